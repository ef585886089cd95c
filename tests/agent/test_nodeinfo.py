"""Node and pod annotations the QoS strategies read: reservation, system QoS, cpuset, burst."""

from __future__ import annotations

import json
import logging

import pytest

from agent.cgroups.cpuset import CpuSet
from agent.qos import nodeinfo
from apis import constants as k
from apis.codec import decode_as
from apis.core import Node, Pod
from apis.slo import CPUBurstStrategy

GIB = 2**30


def _node(
    capacity: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    name: str = "n1",
    **annotations: str,
) -> Node:
    status: dict[str, object] = {}
    if capacity is not None:
        status["capacity"] = capacity
    if allocatable is not None:
        status["allocatable"] = allocatable
    return decode_as(
        {"metadata": {"name": name, "annotations": annotations}, "status": status}, Node
    )


def _pod(name: str = "p", **annotations: str) -> Pod:
    return decode_as(
        {"metadata": {"name": name, "namespace": "ns", "annotations": annotations}}, Pod
    )


def _reservation(**fields: object) -> dict[str, str]:
    return {k.ANNOTATION_NODE_RESERVATION: json.dumps(fields)}


def test_kubelet_reserved_is_capacity_minus_allocatable() -> None:
    node = _node({"cpu": "8", "memory": "32Gi"}, {"cpu": "7500m", "memory": "30Gi"})
    assert nodeinfo.kubelet_reserved(node) == {"cpu": 8000 - 7500, "memory": (32 - 30) * GIB}
    assert nodeinfo.node_reserved(node) == {"cpu": 500, "memory": 2 * GIB}


def test_allocatable_above_capacity_reserves_nothing() -> None:
    node = _node({"cpu": "4", "memory": "8Gi"}, {"cpu": "5", "memory": "8Gi"})
    assert nodeinfo.kubelet_reserved(node) == {"cpu": 0, "memory": 0}


def test_annotation_wins_when_larger_per_resource() -> None:
    annotations = _reservation(resources={"cpu": "2", "memory": "1Gi"})
    node = _node({"cpu": "8", "memory": "32Gi"}, {"cpu": "7500m", "memory": "30Gi"}, **annotations)
    # cpu: max(500, 2000); memory: max(2Gi, 1Gi)
    assert nodeinfo.node_reserved(node) == {"cpu": 2000, "memory": 2 * GIB}


def test_reserved_cpus_count_as_the_reserved_cpu_amount() -> None:
    annotations = _reservation(
        resources={"cpu": "1", "memory": "4Gi"}, reservedCPUs="0-2,7", applyPolicy="Default"
    )
    node = _node({"cpu": "8", "memory": "32Gi"}, {"cpu": "8", "memory": "32Gi"}, **annotations)
    assert nodeinfo.reserved_cpus(node) == CpuSet({0, 1, 2, 7})
    # four CPUs in the list beat the one core in resources
    assert nodeinfo.node_reserved(node) == {"cpu": 4 * 1000, "memory": 4 * GIB}
    assert nodeinfo.reservation(node).apply_policy == "Default"


def test_no_annotation_no_reserved_cpus() -> None:
    node = _node({"cpu": "2"})
    assert nodeinfo.reserved_cpus(node) == CpuSet()
    assert nodeinfo.node_reserved(node) == {"cpu": 0}


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '["a list"]',
        '{"reservedCPUs": "3-1"}',
        '{"resources": {"cpu": "lots"}}',
        '{"reservedCPUs": 5}',
    ],
    ids=["bad-json", "not-object", "bad-cpulist", "bad-quantity", "cpus-not-string"],
)
def test_invalid_reservation_is_logged_and_absent(
    text: str, caplog: pytest.LogCaptureFixture
) -> None:
    node = _node(
        {"cpu": "4"}, {"cpu": "3"}, name=f"bad-{text}", **{k.ANNOTATION_NODE_RESERVATION: text}
    )
    with caplog.at_level(logging.WARNING, logger="agent.qos.nodeinfo"):
        assert nodeinfo.reserved_cpus(node) == CpuSet()
        assert nodeinfo.node_reserved(node) == {"cpu": 1000}
    assert k.ANNOTATION_NODE_RESERVATION in caplog.text
    assert caplog.text.count("ignored") == 1, "the same bad value is reported once"


def test_system_qos_cpuset_and_exclusive_default() -> None:
    key = k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE
    assert nodeinfo.system_qos(_node(**{key: '{"cpuset": "0-1"}'})) == (CpuSet({0, 1}), True)
    shared = _node(**{key: '{"cpuset": "3", "cpusetExclusive": false}'})
    assert nodeinfo.system_qos(shared) == (CpuSet({3}), False)
    assert nodeinfo.system_qos(_node()) == (CpuSet(), True)
    assert nodeinfo.system_qos(_node(name="sq-bad", **{key: "nope"})) == (CpuSet(), True)


def test_pod_cpuset_from_resource_status() -> None:
    key = k.ANNOTATION_RESOURCE_STATUS
    status = {
        "cpuset": "2-3",
        "numaNodeResources": [{"node": 1, "resources": {"cpu": "2", "memory": "1Gi"}}],
    }
    pod = _pod(**{key: json.dumps(status)})
    assert nodeinfo.pod_cpuset(pod) == CpuSet({2, 3})
    parsed = nodeinfo.pod_resource_status(pod)
    assert parsed is not None
    assert parsed.numa_node_resources == (
        nodeinfo.NumaResources(node=1, resources={"cpu": 2000, "memory": GIB}),
    )


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        {k.ANNOTATION_RESOURCE_STATUS: '{"numaNodeResources": [{"node": 0}]}'},
        {k.ANNOTATION_RESOURCE_STATUS: '{"cpuset": ""}'},
        {k.ANNOTATION_RESOURCE_STATUS: "{broken"},
        {k.ANNOTATION_RESOURCE_STATUS: '{"cpuset": "a-b"}'},
    ],
    ids=["absent", "numa-only", "empty", "bad-json", "bad-cpuset"],
)
def test_pod_without_a_bound_cpuset(annotations: dict[str, str]) -> None:
    assert nodeinfo.pod_cpuset(_pod("unbound", **annotations)) is None


def test_pod_burst_override_ignores_unknown_keys() -> None:
    text = json.dumps({"policy": "auto", "cfsQuotaBurstPercent": 250, "futureKnob": 1})
    override = nodeinfo.pod_burst_override(_pod(**{k.ANNOTATION_CPU_BURST: text}))
    assert override == CPUBurstStrategy(policy="auto", cfs_quota_burst_percent=250)


@pytest.mark.parametrize(
    "text",
    ["{", '{"policy": 3}', '"auto"', '{"cpuBurstPercent": "many"}'],
    ids=["bad-json", "policy-not-string", "not-object", "percent-not-int"],
)
def test_pod_burst_override_invalid_is_absent(text: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agent.qos.nodeinfo"):
        pod = _pod(f"burst-{text}", **{k.ANNOTATION_CPU_BURST: text})
        assert nodeinfo.pod_burst_override(pod) is None
    assert f"pod ns/burst-{text}" in caplog.text
    assert nodeinfo.pod_burst_override(_pod()) is None
