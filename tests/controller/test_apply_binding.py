"""Applying a pod's manifest again keeps what the scheduler added when it bound the pod."""

from __future__ import annotations

import msgspec
import pytest

from apis.core import Container, Pod, PodSpec
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from controller.api.apply import apply as kubectl_apply
from controller.errors import Conflict
from controller.store.cluster import Outcome
from controller.store.sqlite import Store

DEVICES = "scheduling.koordinator.sh/device-allocated"
PODS = default_registry().for_type(Pod)
replace = msgspec.structs.replace


def manifest(**annotations: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="train", namespace="default", annotations=annotations),
        spec=PodSpec(containers=(Container(name="main", image="trainer"),)),
    )


def bound(store: Store) -> Pod:
    stored = kubectl_apply(store, manifest(team="a"))[0]
    allocation = '{"gpu":[{"minor":0}]}'
    return store.update(
        replace(
            stored,
            metadata=replace(
                stored.metadata, annotations={**stored.metadata.annotations, DEVICES: allocation}
            ),
            spec=replace(stored.spec, node_name="gpu-1"),
        )
    )


def test_the_same_manifest_again_is_unchanged_and_keeps_the_binding() -> None:
    store = Store(registry=default_registry())
    placed = bound(store)
    again, outcome = kubectl_apply(store, manifest(team="a"))
    assert outcome is Outcome.UNCHANGED
    assert again.spec.node_name == "gpu-1"
    assert again.metadata.annotations[DEVICES] == placed.metadata.annotations[DEVICES]


def test_the_users_own_annotations_follow_the_manifest() -> None:
    store = Store(registry=default_registry())
    bound(store)
    again, outcome = kubectl_apply(store, manifest(owner="b"))
    assert outcome is Outcome.CONFIGURED
    assert "team" not in again.metadata.annotations, "a key the user dropped is dropped"
    assert again.metadata.annotations["owner"] == "b"
    assert DEVICES in again.metadata.annotations
    assert again.spec.node_name == "gpu-1"
    # A manifest that names a server-set annotation itself wins.
    named, _ = kubectl_apply(store, manifest(**{DEVICES: "{}"}))
    assert named.metadata.annotations[DEVICES] == "{}"


def test_a_manifest_naming_a_stale_version_or_another_uid_conflicts_and_changes_nothing() -> None:
    with Store() as store:
        stored = bound(store)
        stale = replace(
            manifest(team="b"), metadata=replace(manifest(team="b").metadata, resource_version="1")
        )
        other = replace(
            manifest(team="b"), metadata=replace(manifest(team="b").metadata, uid="not-it")
        )
        for wrong in (stale, other):
            with pytest.raises(Conflict):
                kubectl_apply(store, wrong)
        assert store.get(PODS, "train", "default") == stored
        current = replace(
            manifest(team="b"),
            metadata=replace(
                manifest(team="b").metadata,
                resource_version=stored.metadata.resource_version,
                uid=stored.metadata.uid,
            ),
        )
        applied, outcome = kubectl_apply(store, current)
        assert outcome is Outcome.CONFIGURED
        assert applied.metadata.annotations["team"] == "b"
        assert applied.metadata.annotations[DEVICES]  # the scheduler's, kept
