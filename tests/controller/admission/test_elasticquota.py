"""Koordinator's ElasticQuota webhook rules and defaults, through the store
(controller.admission.elasticquota)."""

from __future__ import annotations

import json

import msgspec
import pytest

from apis import constants as k
from apis.core import Pod
from apis.quota import ElasticQuota
from apis.resources import ResourceList
from controller.errors import Invalid
from controller.store.cluster import Outcome
from controller.store.sqlite import Store
from tests.controller.admission.helpers import pod, quota

PARENT = f"metadata.labels[{k.LABEL_QUOTA_PARENT}]"
IS_PARENT = f"metadata.labels[{k.LABEL_QUOTA_IS_PARENT}]"
TREE_ID = f"metadata.labels[{k.LABEL_QUOTA_TREE_ID}]"


@pytest.fixture
def store() -> Store:
    return Store()


def quotas(store: Store) -> dict[str, ElasticQuota]:
    items = store.list(store.registry.for_type(ElasticQuota))[0]
    return {q.metadata.name: q for q in items if isinstance(q, ElasticQuota)}


def refused(store: Store, obj: ElasticQuota | Pod) -> Invalid:
    before = store.resource_version
    with pytest.raises(Invalid) as caught:
        store.apply(obj)
    assert store.resource_version == before, "a refused write stored something"
    return caught.value


# --- defaults ------------------------------------------------------------------------------------


def test_a_new_quota_gets_the_root_as_parent_and_its_max_as_shared_weight(store: Store) -> None:
    saved = store.apply(quota("team", max={"cpu": 40, "memory": "40Gi"}, parent=""))[0]
    assert saved.metadata.labels[k.LABEL_QUOTA_PARENT] == k.QUOTA_ROOT
    weight = json.loads(saved.metadata.annotations[k.ANNOTATION_QUOTA_SHARED_WEIGHT])
    assert weight == {"cpu": "40", "memory": "40Gi"}


def test_a_shared_weight_gets_the_names_of_max_and_loses_the_others(store: Store) -> None:
    given = json.dumps({"cpu": "4", "gpu": "1"})
    saved = store.apply(
        quota(
            "team",
            max={"cpu": 40, "memory": "40Gi"},
            annotations={k.ANNOTATION_QUOTA_SHARED_WEIGHT: given},
        )
    )[0]
    weight = json.loads(saved.metadata.annotations[k.ANNOTATION_QUOTA_SHARED_WEIGHT])
    assert weight == {"cpu": "4", "memory": "40Gi"}


def test_a_child_takes_the_tree_id_of_its_parent(store: Store) -> None:
    store.apply(quota("pool", is_parent=True, labels={k.LABEL_QUOTA_TREE_ID: "t1"}))
    saved = store.apply(quota("team", parent="pool"))[0]
    assert saved.metadata.labels[k.LABEL_QUOTA_TREE_ID] == "t1"


def test_the_same_manifest_applied_again_is_unchanged(store: Store) -> None:
    manifest = quota("team", parent="")
    assert store.apply(manifest)[1] is Outcome.CREATED
    again, outcome = store.apply(manifest)
    assert outcome is Outcome.UNCHANGED
    assert k.ANNOTATION_QUOTA_SHARED_WEIGHT in again.metadata.annotations


def test_a_status_write_is_not_checked_again(store: Store) -> None:
    saved = store.apply(quota("team"))[0]
    used = msgspec.structs.replace(
        saved, status=msgspec.structs.replace(saved.status, used=ResourceList({"cpu": 500}))
    )
    assert store.update(used).status.used == {"cpu": 500}


# --- the quota itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        (
            {"max": {"cpu": 4}, "min": {"cpu": 8}},
            'spec.min: Invalid value: "cpu:8": cpu is more than spec.max (cpu:4)',
        ),
        (
            {"max": {"cpu": 4}, "min": {"memory": "1Gi"}},
            'spec.min: Invalid value: "memory:1Gi": names memory, which spec.max does not name',
        ),
        (
            {"max": {"cpu": -1}},
            'spec.max: Invalid value: "cpu:-1": must not be negative (in cpu)',
        ),
    ],
)
def test_min_and_max_of_the_quota_itself(
    store: Store, spec: dict[str, dict[str, object]], shown: str
) -> None:
    err = refused(store, quota("team", max=spec["max"], min=spec.get("min")))
    assert str(err) == f'ElasticQuota.scheduling.sigs.k8s.io "team" is invalid: {shown}'


def test_a_shared_weight_that_is_not_a_resource_list_is_refused(store: Store) -> None:
    err = refused(store, quota("team", annotations={k.ANNOTATION_QUOTA_SHARED_WEIGHT: "[1]"}))
    assert err.field == f"metadata.annotations[{k.ANNOTATION_QUOTA_SHARED_WEIGHT}]"
    assert err.value == "[1]"


def test_quota_names_are_unique_across_namespaces(store: Store) -> None:
    store.apply(quota("team", namespace="a"))
    err = refused(store, quota("team", namespace="b"))
    assert (err.field, err.value) == ("metadata.name", "team")
    assert "exists in namespace a" in str(err)


def test_a_namespace_is_bound_to_one_quota_at_most(store: Store) -> None:
    bind = {k.ANNOTATION_QUOTA_NAMESPACES: json.dumps(["ns1"])}
    store.apply(quota("first", annotations=bind))
    err = refused(store, quota("second", annotations=bind))
    assert "namespace ns1 is bound to quota first already" in str(err)
    store.apply(quota("first", annotations=bind))  # the quota itself again: fine


# --- the tree ------------------------------------------------------------------------------------


def test_the_parent_must_exist(store: Store) -> None:
    err = refused(store, quota("team", parent="nowhere"))
    assert (err.field, err.value) == (PARENT, "nowhere")


def test_the_parent_must_be_a_parent_group(store: Store) -> None:
    store.apply(quota("dept", is_parent=False))
    err = refused(store, quota("team", parent="dept"))
    assert (err.field, err.value) == (PARENT, "dept")
    assert "quota dept is not a parent group" in str(err)


def test_children_share_the_min_of_their_parent(store: Store) -> None:
    store.apply(quota("dept", is_parent=True, min={"cpu": 10}, max={"cpu": 40}))
    store.apply(quota("a", parent="dept", min={"cpu": 6}, max={"cpu": 40}))
    err = refused(store, quota("b", parent="dept", min={"cpu": 5}, max={"cpu": 40}))
    assert err.field == "spec.min"
    assert "add up to cpu:11, more than its min (cpu:10)" in str(err)
    store.apply(quota("b", parent="dept", min={"cpu": 4}, max={"cpu": 40}))


def test_the_first_level_is_not_held_to_the_min_of_the_root(store: Store) -> None:
    store.apply(quota("a", min={"cpu": 1000}, max={"cpu": 1000}))
    store.apply(quota("b", min={"cpu": 1000}, max={"cpu": 1000}, is_parent=True))


def test_a_parent_cannot_lower_its_min_below_its_children(store: Store) -> None:
    store.apply(quota("dept", is_parent=True, min={"cpu": 10}, max={"cpu": 40}))
    store.apply(quota("a", parent="dept", min={"cpu": 8}, max={"cpu": 40}))
    err = refused(store, quota("dept", is_parent=True, min={"cpu": 5}, max={"cpu": 40}))
    assert "less than the min of its children together (cpu:8)" in str(err)
    assert quotas(store)["dept"].spec.min == {"cpu": 10_000}


def test_forced_updates_and_tree_roots_skip_the_min_sums(store: Store) -> None:
    store.apply(quota("dept", is_parent=True, min={"cpu": 1}, max={"cpu": 40}))
    forced = {k.LABEL_QUOTA_ALLOW_FORCE_UPDATE: "true"}
    store.apply(quota("a", parent="dept", min={"cpu": 8}, max={"cpu": 40}, labels=forced))
    rooted = {k.LABEL_QUOTA_IS_ROOT: "true"}
    store.apply(quota("b", parent="dept", min={"cpu": 8}, max={"cpu": 40}, labels=rooted))


def test_a_child_names_the_same_max_resources_as_its_parent(store: Store) -> None:
    store.apply(quota("dept", is_parent=True, max={"cpu": 40, "memory": "40Gi"}))
    err = refused(store, quota("team", parent="dept", max={"cpu": 40, "memory": "1Gi", "x": 1}))
    assert err.field == "spec.max"
    assert "same resources as the max of the parent quota dept (cpu,memory)" in str(err)


def test_is_parent_cannot_change(store: Store) -> None:
    store.apply(quota("dept", is_parent=True))
    err = refused(store, quota("dept", is_parent=False))
    assert (err.field, err.value) == (IS_PARENT, "false")
    assert quotas(store)["dept"].metadata.labels[k.LABEL_QUOTA_IS_PARENT] == "true"


def test_tree_ids_stay_and_match_the_parent(store: Store) -> None:
    store.apply(quota("pool", is_parent=True, labels={k.LABEL_QUOTA_TREE_ID: "t1"}))
    err = refused(store, quota("team", parent="pool", labels={k.LABEL_QUOTA_TREE_ID: "t2"}))
    assert (err.field, err.value) == (TREE_ID, "t2")
    store.apply(quota("team", parent="pool"))
    err = refused(store, quota("pool", is_parent=True, labels={k.LABEL_QUOTA_TREE_ID: "t3"}))
    assert "is immutable" in str(err)


def test_a_quota_cannot_become_its_own_ancestor(store: Store) -> None:
    store.apply(quota("a", is_parent=True))
    store.apply(quota("b", is_parent=True, parent="a"))
    err = refused(store, quota("a", is_parent=True, parent="b"))
    assert (err.field, err.value) == (PARENT, "b")
    assert "its own ancestor" in str(err)
    err = refused(store, quota("a", is_parent=True, parent="a"))
    assert "its own parent" in str(err)


# --- pods ----------------------------------------------------------------------------------------


def test_a_pod_cannot_be_charged_to_a_parent_group(store: Store) -> None:
    store.apply(quota("dept", is_parent=True))
    store.apply(quota("team", parent="dept", max={"cpu": 40, "memory": "40Gi"}))
    err = refused(store, pod("web", labels={k.LABEL_QUOTA_NAME: "dept"}))
    assert str(err) == (
        f'Pod "web" is invalid: metadata.labels[{k.LABEL_QUOTA_NAME}]: Invalid value: "dept":'
        " pods cannot be charged to quota dept: it is a parent group"
    )
    store.apply(pod("web", labels={k.LABEL_QUOTA_NAME: "team"}))


def test_a_pod_in_the_namespace_of_a_parent_group_is_refused(store: Store) -> None:
    store.apply(quota("dept", namespace="dept", is_parent=True))
    err = refused(store, pod("web", namespace="dept"))
    assert (err.field, err.value) == ("metadata.namespace", "dept")


def test_relabelling_a_pod_onto_a_parent_group_is_refused(store: Store) -> None:
    store.apply(quota("dept", is_parent=True))
    store.apply(quota("team", parent="dept", max={"cpu": 40, "memory": "40Gi"}))
    store.apply(pod("web", labels={k.LABEL_QUOTA_NAME: "team"}))
    refused(store, pod("web", labels={k.LABEL_QUOTA_NAME: "dept"}))
