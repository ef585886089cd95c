"""What koordpy emits for Koordinator kinds validates against Koordinator's own CRD schemas."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from apis.codec import decode_documents, encode_json
from apis.kinds import default_registry
from apis.meta import ObjectMeta, ObjectReference
from apis.resources import ResourceList
from apis.scheduling import (
    Device,
    DeviceCondition,
    DeviceInfo,
    DeviceSpec,
    DeviceTopology,
    PodMigrationJob,
    PodMigrationJobSpec,
)
from tests.crdschema import CRDS, crd, schema_errors, validator

SAMPLES = {
    "scheduling.koordinator.sh/Device": "device.yaml",
    "scheduling.koordinator.sh/Reservation": "reservation.yaml",
    "scheduling.koordinator.sh/PodMigrationJob": "podmigrationjob.yaml",
    "slo.koordinator.sh/NodeMetric": "nodemetric.yaml",
    "slo.koordinator.sh/NodeSLO": "nodeslo.yaml",
    "scheduling.sigs.k8s.io/ElasticQuota": "elasticquota.yaml",
    "scheduling.sigs.k8s.io/PodGroup": "podgroup.yaml",
}


@pytest.mark.parametrize("key", sorted(CRDS))
def test_populated_sample_validates(shared_dir: Path, repo_root: Path, key: str) -> None:
    path = repo_root / "tests" / "data" / "objects" / SAMPLES[key]
    [obj] = decode_documents(path.read_text(), source=str(path))
    assert default_registry().for_object(obj).key == key
    document = json.loads(encode_json(obj))
    assert schema_errors(validator(shared_dir, key), document) == []


@pytest.mark.parametrize("key", sorted(CRDS))
def test_strict_schema_catches_a_misspelt_field(
    shared_dir: Path, repo_root: Path, key: str
) -> None:
    path = repo_root / "tests" / "data" / "objects" / SAMPLES[key]
    [obj] = decode_documents(path.read_text(), source=str(path))
    document = json.loads(encode_json(obj))
    document["spec"]["misspeltField"] = 1
    assert any(
        "misspeltField" in error for error in schema_errors(validator(shared_dir, key), document)
    )


@pytest.mark.parametrize("key", sorted(CRDS))
def test_kind_names_and_scope_match_the_crd(shared_dir: Path, key: str) -> None:
    definition = crd(shared_dir, key)
    kind = default_registry().for_key(key)
    assert kind.group == definition["spec"]["group"]
    assert kind.kind == definition["spec"]["names"]["kind"]
    assert kind.plural == definition["spec"]["names"]["plural"]
    assert kind.namespaced == (definition["spec"]["scope"] == "Namespaced")
    assert set(definition["spec"]["names"].get("shortNames", ())) <= set(kind.short_names)
    assert kind.api_version in {
        f"{definition['spec']['group']}/{v['name']}" for v in definition["spec"]["versions"]
    }


def test_device_built_in_code_with_zero_values_validates(shared_dir: Path) -> None:
    """Zero values that omit_defaults would drop must still be written where the CRD needs them."""
    device = Device(
        metadata=ObjectMeta(name="node-0"),
        spec=DeviceSpec(
            devices=(
                DeviceInfo(
                    health=False,
                    type="gpu",
                    minor=0,
                    resources=ResourceList({"koordinator.sh/gpu-core": 100}),
                    topology=DeviceTopology(socket_id=0, node_id=0, pcie_id=""),
                    conditions=(
                        DeviceCondition(
                            type="Healthy",
                            status="False",
                            last_transition_time=datetime(2026, 3, 1, 8, 0, 0).astimezone(),
                            reason="Unknown",
                            message="",
                        ),
                    ),
                ),
            )
        ),
    )
    document = json.loads(encode_json(device))
    assert schema_errors(validator(shared_dir, "scheduling.koordinator.sh/Device"), document) == []
    info = document["spec"]["devices"][0]
    assert info["health"] is False
    assert info["topology"] == {"socketID": 0, "nodeID": 0, "pcieID": ""}
    assert info["conditions"][0]["message"] == ""


def test_pod_migration_job_built_in_code_validates(shared_dir: Path) -> None:
    job = PodMigrationJob(
        metadata=ObjectMeta(name="pmj-1"),
        spec=PodMigrationJobSpec(pod_ref=ObjectReference(namespace="default", name="web-0")),
    )
    document = json.loads(encode_json(job))
    assert (
        schema_errors(validator(shared_dir, "scheduling.koordinator.sh/PodMigrationJob"), document)
        == []
    )
