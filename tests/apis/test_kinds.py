"""Every kind of the catalog: round trips unchanged, and every name a user types resolves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apis.codec import (
    decode_documents,
    decode_json,
    decode_object,
    dump_yaml,
    encode_json,
    load_yaml_documents,
)
from apis.errors import UnknownKind
from apis.kinds import Kind, default_registry
from apis.meta import Object

REGISTRY = default_registry()
KINDS = list(REGISTRY)


def _samples(repo_root: Path) -> dict[str, tuple[Object, object]]:
    """Kind key -> (decoded sample, raw document) from ``tests/data/objects``."""
    found: dict[str, tuple[Object, object]] = {}
    for path in sorted((repo_root / "tests" / "data" / "objects").glob("*.yaml")):
        text = path.read_text()
        [obj] = decode_documents(text, source=str(path))
        [raw] = load_yaml_documents(text)
        found[REGISTRY.for_object(obj).key] = (obj, raw)
    return found


@pytest.fixture(scope="module")
def samples(repo_root: Path) -> dict[str, tuple[Object, object]]:
    return _samples(repo_root)


def test_every_kind_has_a_sample(samples: dict[str, tuple[Object, object]]) -> None:
    assert sorted(samples) == sorted(kind.key for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.key)
def test_yaml_to_object_to_json_to_object_is_unchanged(
    kind: Kind, samples: dict[str, tuple[Object, object]]
) -> None:
    obj, raw = samples[kind.key]
    assert type(obj) is kind.type
    wire = encode_json(obj)
    assert decode_json(wire, kind.type) == obj
    assert decode_object(json.loads(wire)) == obj
    # The samples are written canonically, so nothing may be lost, renamed or reformatted.
    assert json.loads(wire) == raw


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.key)
def test_yaml_dump_round_trips(kind: Kind, samples: dict[str, tuple[Object, object]]) -> None:
    obj, _ = samples[kind.key]
    text = dump_yaml(obj)
    assert text.startswith(f"apiVersion: {kind.api_version}\nkind: {kind.kind}\nmetadata:")
    assert decode_documents(text) == [obj]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.key)
def test_default_object_round_trips(kind: Kind, samples: dict[str, tuple[Object, object]]) -> None:
    """Kinds with no required spec fields can be built empty and still round-trip."""
    obj, _ = samples[kind.key]
    emptied = decode_object(
        {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": "x"}}
        | _required_parts(obj)
    )
    assert decode_json(encode_json(emptied), kind.type) == emptied


def _required_parts(obj: Object) -> dict[str, object]:
    """The sample's spec for kinds whose spec has required fields, else nothing."""
    raw = json.loads(encode_json(obj))
    if obj.kind in ("Reservation", "PodMigrationJob"):
        return {"spec": raw["spec"]}
    if obj.api_version == "apps/v1":  # a selector matching the template's labels is required
        return {"spec": {"selector": raw["spec"]["selector"], "template": raw["spec"]["template"]}}
    return {}


def test_every_name_resolves_to_its_own_kind() -> None:
    for kind in KINDS:
        for name in kind.names():
            assert REGISTRY.resolve(name) is kind, name
            assert REGISTRY.resolve(name.upper()) is kind, name


def test_no_name_is_shared_between_kinds() -> None:
    owners: dict[str, str] = {}
    for kind in KINDS:
        for name in set(kind.names()):
            assert name not in owners, f"{name} used by {owners.get(name)} and {kind.key}"
            owners[name] = kind.key


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("po", "Pod"),
        ("pods", "Pod"),
        ("Pod", "Pod"),
        ("no", "Node"),
        ("ev", "Event"),
        ("cm", "ConfigMap"),
        ("configmaps", "ConfigMap"),
        ("configmap", "ConfigMap"),
        ("jobs", "batch/Job"),
        ("jobs.batch", "batch/Job"),
        ("devices", "scheduling.koordinator.sh/Device"),
        ("rsv", "scheduling.koordinator.sh/Reservation"),
        ("deploy", "apps/Deployment"),
        ("deployments", "apps/Deployment"),
        ("deployments.apps", "apps/Deployment"),
        ("rs", "apps/ReplicaSet"),
        ("replicasets", "apps/ReplicaSet"),
        ("sts", "apps/StatefulSet"),
        ("statefulsets", "apps/StatefulSet"),
        ("ds", "apps/DaemonSet"),
        ("daemonsets", "apps/DaemonSet"),
        ("reservations", "scheduling.koordinator.sh/Reservation"),
        ("reservations.scheduling.koordinator.sh", "scheduling.koordinator.sh/Reservation"),
        ("pmj", "scheduling.koordinator.sh/PodMigrationJob"),
        ("nodemetrics", "slo.koordinator.sh/NodeMetric"),
        ("nodeslos", "slo.koordinator.sh/NodeSLO"),
        ("eq", "scheduling.sigs.k8s.io/ElasticQuota"),
        ("elasticquotas", "scheduling.sigs.k8s.io/ElasticQuota"),
        ("pg", "scheduling.sigs.k8s.io/PodGroup"),
        ("queues", "scheduling.x-k8s.io/Queue"),
        ("queue", "scheduling.x-k8s.io/Queue"),
        ("queues.scheduling.x-k8s.io", "scheduling.x-k8s.io/Queue"),
        ("qu", "scheduling.x-k8s.io/QueueUnit"),
        ("qus", "scheduling.x-k8s.io/QueueUnit"),
        ("pytorchjobs", "kubeflow.org/PyTorchJob"),
        ("tfjob", "kubeflow.org/TFJob"),
        ("mpijobs", "kubeflow.org/MPIJob"),
        ("rayjobs", "ray.io/RayJob"),
        ("sparkapplications", "sparkoperator.k8s.io/SparkApplication"),
        ("workflows", "argoproj.io/Workflow"),
        ("wf", "argoproj.io/Workflow"),
        ("priorityclasses", "scheduling.k8s.io/PriorityClass"),
        ("pc", "scheduling.k8s.io/PriorityClass"),
        ("admissionchecks", "kueue.x-k8s.io/AdmissionCheck"),
    ],
)
def test_cli_names(typed: str, key: str) -> None:
    assert REGISTRY.resolve(typed).key == key


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownKind, match="reservations"):
        REGISTRY.resolve("reservationz")


def test_scopes() -> None:
    namespaced = {kind.kind for kind in KINDS if kind.namespaced}
    assert namespaced == {
        "Pod",
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "DaemonSet",
        "Event",
        "ConfigMap",
        "Job",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "RayJob",
        "SparkApplication",
        "Workflow",
        "ElasticQuota",
        "PodGroup",
        "Queue",
        "QueueUnit",
    }


def test_queue_alias_is_rewritten_to_the_canonical_api_version() -> None:
    text = (
        "apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Queue\n"
        "metadata: {name: q, namespace: koord-queue}\nspec: {queuePolicy: Priority}\n"
    )
    [queue] = decode_documents(text)
    assert queue.api_version == "scheduling.x-k8s.io/v1alpha1"
    assert REGISTRY.for_gvk("scheduling.koordinator.sh/v1alpha1", "Queue").key == (
        "scheduling.x-k8s.io/Queue"
    )
    assert b'"apiVersion":"scheduling.x-k8s.io/v1alpha1"' in encode_json(queue)
