"""PreFilter: every GPU combination of the spec's table, normalization and annotations."""

from __future__ import annotations

import json

import pytest

from apis import constants as k
from controller.scheduler.deviceshare.args import DeviceShareArgs, GPUSharedResourceTemplatesConfig
from controller.scheduler.deviceshare.requests import (
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    DeviceRequest,
    Rejection,
    prepare,
)
from controller.scheduler.deviceshare.templates import parse_templates
from tests.controller.deviceshare.builders import GIB, pod

GPU = "koordinator.sh/gpu"
SHARED = "koordinator.sh/gpu.shared"
CORE = "koordinator.sh/gpu-core"
MEM = "koordinator.sh/gpu-memory"
RATIO = "koordinator.sh/gpu-memory-ratio"
NPU_CORE = "huawei.com/npu-core"
NPU_CPU = "huawei.com/npu-cpu"
NPU_DVPP = "huawei.com/npu-dvpp"

TEMPLATES = parse_templates(
    {
        "data.yaml": (
            "huawei-Ascend-910B3:\n"
            "  vir10_3c_32g: {huawei.com/npu-core: '10', huawei.com/npu-cpu: '3',"
            " koordinator.sh/gpu-memory: 32Gi}\n"
            "  vir05_1c_16g: {huawei.com/npu-core: '5', huawei.com/npu-cpu: '1',"
            " koordinator.sh/gpu-memory: 16Gi, huawei.com/npu-dvpp: '25'}\n"
        )
    }
)

NO_TEMPLATE_ARGS = DeviceShareArgs(
    gpu_shared_resource_templates_config=GPUSharedResourceTemplatesConfig(matched_resources=())
)


def _combo(*names: str) -> str:
    return f"invalid resource device requests: [{' '.join(sorted(names))}]"


def _accepted(requests: dict[str, str]) -> DeviceRequest:
    """Accepted when no template is enforced."""
    result = prepare(pod(requests), args=NO_TEMPLATE_ARGS)
    assert isinstance(result, DeviceRequest), result
    return result


# (pod requests, normalized per-pod request, count, per-device request, shared)
VALID = [
    ({"nvidia.com/gpu": "2"}, {CORE: 200, RATIO: 200}, 2, {CORE: 100, RATIO: 100}, False),
    ({"amd.com/gpu": "1"}, {CORE: 100, RATIO: 100}, 1, {CORE: 100, RATIO: 100}, False),
    ({"dcu.com/gpu": "3"}, {CORE: 300, RATIO: 300}, 3, {CORE: 100, RATIO: 100}, False),
    ({GPU: "50"}, {CORE: 50, RATIO: 50}, 1, {CORE: 50, RATIO: 50}, True),
    ({GPU: "100"}, {CORE: 100, RATIO: 100}, 1, {CORE: 100, RATIO: 100}, False),
    ({GPU: "300"}, {CORE: 300, RATIO: 300}, 3, {CORE: 100, RATIO: 100}, False),
    ({MEM: "8Gi"}, {MEM: 8 * GIB}, 1, {MEM: 8 * GIB}, True),
    ({RATIO: "50"}, {RATIO: 50}, 1, {RATIO: 50}, True),
    ({RATIO: "200"}, {RATIO: 200}, 2, {RATIO: 100}, False),
    ({CORE: "50", RATIO: "50"}, {CORE: 50, RATIO: 50}, 1, {CORE: 50, RATIO: 50}, True),
    ({CORE: "30", MEM: "4Gi"}, {CORE: 30, MEM: 4 * GIB}, 1, {CORE: 30, MEM: 4 * GIB}, True),
    ({CORE: "200", RATIO: "200"}, {CORE: 200, RATIO: 200}, 2, {CORE: 100, RATIO: 100}, False),
    ({NPU_CORE: "10", RATIO: "50"}, {NPU_CORE: 10, RATIO: 50}, 1, {NPU_CORE: 10, RATIO: 50}, True),
    (
        {NPU_CORE: "40", RATIO: "200"},
        {NPU_CORE: 40, RATIO: 200},
        2,
        {NPU_CORE: 20, RATIO: 100},
        False,
    ),
    (
        {SHARED: "2", CORE: "100", MEM: "8Gi"},
        {SHARED: 2, CORE: 100, MEM: 8 * GIB},
        2,
        {CORE: 50, MEM: 4 * GIB},
        True,
    ),
    ({SHARED: "1", MEM: "8Gi"}, {SHARED: 1, MEM: 8 * GIB}, 1, {MEM: 8 * GIB}, True),
    ({SHARED: "2", RATIO: "100"}, {SHARED: 2, RATIO: 100}, 2, {RATIO: 50}, True),
    (
        {SHARED: "2", CORE: "60", RATIO: "200"},
        {SHARED: 2, CORE: 60, RATIO: 200},
        2,
        {CORE: 30, RATIO: 100},
        False,
    ),
    (
        {SHARED: "1", NPU_CORE: "10", NPU_CPU: "3", MEM: "32Gi"},
        {SHARED: 1, NPU_CORE: 10, NPU_CPU: 3, MEM: 32 * GIB},
        1,
        {NPU_CORE: 10, NPU_CPU: 3, MEM: 32 * GIB},
        True,
    ),
    (
        {SHARED: "1", NPU_CORE: "5", NPU_CPU: "1", NPU_DVPP: "25", MEM: "16Gi"},
        {SHARED: 1, NPU_CORE: 5, NPU_CPU: 1, NPU_DVPP: 25, MEM: 16 * GIB},
        1,
        {NPU_CORE: 5, NPU_CPU: 1, NPU_DVPP: 25, MEM: 16 * GIB},
        True,
    ),
]


@pytest.mark.parametrize(("requests", "total", "count", "per_device", "shared"), VALID)
def test_accepted_gpu_combinations_normalize(
    requests: dict[str, str],
    total: dict[str, int],
    count: int,
    per_device: dict[str, int],
    shared: bool,
) -> None:
    gpu = _accepted({"cpu": "1", **requests}).gpu
    assert gpu is not None
    assert dict(gpu.total) == total
    assert gpu.count == count
    assert dict(gpu.per_device) == per_device
    assert gpu.shared is shared


INVALID = [
    ({CORE: "50"}, "invalid resource device requests: [koordinator.sh/gpu-core]"),
    (
        {"nvidia.com/gpu": "1", GPU: "100"},
        _combo(GPU, "nvidia.com/gpu"),
    ),
    (
        {"nvidia.com/gpu": "1", "amd.com/gpu": "1"},
        _combo("amd.com/gpu", "nvidia.com/gpu"),
    ),
    (
        {"nvidia.com/gpu": "1", RATIO: "50"},
        _combo(RATIO, "nvidia.com/gpu"),
    ),
    ({GPU: "50", MEM: "4Gi"}, _combo(GPU, MEM)),
    (
        {CORE: "50", MEM: "4Gi", RATIO: "50"},
        _combo(CORE, MEM, RATIO),
    ),
    ({NPU_CORE: "10"}, _combo(NPU_CORE)),
    ({NPU_CORE: "10", MEM: "4Gi"}, _combo(NPU_CORE, MEM)),
    (
        {NPU_CORE: "10", NPU_CPU: "3", MEM: "32Gi"},
        _combo(MEM, NPU_CORE, NPU_CPU),
    ),
    ({SHARED: "1"}, _combo(SHARED)),
    ({SHARED: "1", CORE: "50"}, _combo(CORE, SHARED)),
    (
        {SHARED: "1", NPU_CORE: "10", MEM: "4Gi"},
        _combo(MEM, SHARED, NPU_CORE),
    ),
    (
        {SHARED: "1", NPU_CORE: "10", NPU_CPU: "1", RATIO: "50"},
        _combo(RATIO, SHARED, NPU_CORE, NPU_CPU),
    ),
    ({GPU: "150"}, f"invalid resource unit {GPU}: 150"),
    ({RATIO: "150"}, f"invalid resource unit {RATIO}: 150"),
    ({CORE: "150", RATIO: "200"}, f"invalid resource unit {CORE}: 150"),
    ({CORE: "150", MEM: "8Gi"}, f"invalid resource unit {CORE}: 150"),
    ({NPU_CORE: "10", RATIO: "150"}, f"invalid resource unit {RATIO}: 150"),
    ({SHARED: "2", RATIO: "201"}, f"invalid resource unit {RATIO}: 201"),
    ({SHARED: "2", RATIO: "300"}, f"invalid resource unit {RATIO}: 300"),
    ({SHARED: "2", CORE: "250", MEM: "8Gi"}, f"invalid resource unit {CORE}: 250"),
    ({SHARED: "3", CORE: "100", MEM: "8Gi"}, f"invalid resource unit {CORE}: 100"),
    (
        {SHARED: "2", NPU_CORE: "20", NPU_CPU: "6", MEM: "64Gi"},
        f"invalid resource unit {SHARED}: 2",
    ),
    (
        {SHARED: "1", NPU_CORE: "10", NPU_CPU: "3", NPU_DVPP: "150", MEM: "32Gi"},
        f"invalid resource unit {NPU_DVPP}: 150",
    ),
    ({"koordinator.sh/rdma": "150"}, "invalid resource unit koordinator.sh/rdma: 150"),
    ({"koordinator.sh/fpga": "250"}, "invalid resource unit koordinator.sh/fpga: 250"),
]


@pytest.mark.parametrize(("requests", "message"), INVALID)
def test_refused_requests_are_unresolvable_with_the_exact_message(
    requests: dict[str, str], message: str
) -> None:
    result = prepare(pod(requests), templates=TEMPLATES)
    assert result == Rejection(UNSCHEDULABLE_AND_UNRESOLVABLE, message)


@pytest.mark.parametrize(
    "requests",
    [
        {"cpu": "2", "memory": "4Gi"},
        {"metax-tech.com/sgpu": "1"},  # vendor counts are NodeResourcesFit's business
    ],
)
def test_a_pod_without_device_resources_is_skipped(requests: dict[str, str]) -> None:
    assert _accepted(requests).empty


@pytest.mark.parametrize(
    ("amount", "count", "each"),
    [("200", 2, 100), ("100", 1, 100), ("50", 1, 50)],
)
def test_rdma_percentages_become_device_counts(amount: str, count: int, each: int) -> None:
    rdma = _accepted({"koordinator.sh/rdma": amount}).of("rdma")
    assert rdma is not None
    assert (rdma.count, dict(rdma.per_device)) == (count, {"koordinator.sh/rdma": each})


@pytest.mark.parametrize(
    ("hint", "count", "each", "for_all"),
    [
        ({"allocateStrategy": "ApplyForAll"}, 0, 2, True),
        ({"allocateStrategy": "RequestsAsCount"}, 2, 1, False),
        ({"allocateStrategy": "RequestsAsCount", "exclusivePolicy": "DeviceLevel"}, 2, 100, False),
    ],
)
def test_rdma_allocate_strategies(
    hint: dict[str, str], count: int, each: int, for_all: bool
) -> None:

    result = prepare(
        pod(
            {"koordinator.sh/rdma": "2"},
            annotations={k.ANNOTATION_DEVICE_ALLOCATE_HINT: json.dumps({"rdma": hint})},
        )
    )
    assert isinstance(result, DeviceRequest)
    rdma = result.of("rdma")
    assert rdma is not None
    assert (rdma.count, rdma.per_device.get_amount(k.RESOURCE_RDMA), rdma.apply_for_all) == (
        count,
        each,
        for_all,
    )


@pytest.mark.parametrize(
    ("key", "value", "prefix"),
    [
        (
            k.ANNOTATION_DEVICE_ALLOCATE_HINT,
            "{not json",
            "invalid annotation " + k.ANNOTATION_DEVICE_ALLOCATE_HINT,
        ),
        (
            k.ANNOTATION_DEVICE_ALLOCATE_HINT,
            '{"gpu": {"requiredTopologyScope": "Rack"}}',
            "invalid annotation " + k.ANNOTATION_DEVICE_ALLOCATE_HINT,
        ),
        (
            k.ANNOTATION_DEVICE_ALLOCATE_HINT,
            '{"gpu": {"selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}}',
            "invalid annotation " + k.ANNOTATION_DEVICE_ALLOCATE_HINT,
        ),
        (
            k.ANNOTATION_DEVICE_JOINT_ALLOCATE,
            '{"deviceTypes": "gpu"}',
            "invalid annotation " + k.ANNOTATION_DEVICE_JOINT_ALLOCATE,
        ),
        (
            k.ANNOTATION_GPU_PARTITION_SPEC,
            "[]",
            "invalid annotation " + k.ANNOTATION_GPU_PARTITION_SPEC,
        ),
        (
            k.ANNOTATION_GPU_PARTITION_SPEC,
            '{"ringBusBandwidth": "fast"}',
            "invalid annotation " + k.ANNOTATION_GPU_PARTITION_SPEC + ": ringBusBandwidth",
        ),
        (
            k.ANNOTATION_DEVICE_ALLOCATED,
            '{"gpu": [{"resources": {}}]}',
            "invalid device allocation",
        ),
        (
            k.ANNOTATION_DEVICE_ALLOCATED,
            '{"gpu": [{"minor": 0, "resources": {"x": "lots"}}]}',
            "gpu minor 0",
        ),
    ],
)
def test_malformed_annotations_are_unresolvable(key: str, value: str, prefix: str) -> None:
    result = prepare(pod({"nvidia.com/gpu": "1"}, annotations={key: value}))
    assert isinstance(result, Rejection)
    assert result.code == UNSCHEDULABLE_AND_UNRESOLVABLE
    assert result.reason.startswith(prefix)


def test_a_carried_allocation_is_designated() -> None:
    value = '{"gpu":[{"minor":3,"resources":{"koordinator.sh/gpu-core":"100"}}]}'
    result = prepare(
        pod({"nvidia.com/gpu": "1"}, annotations={k.ANNOTATION_DEVICE_ALLOCATED: value})
    )
    assert isinstance(result, DeviceRequest)
    assert result.designated is not None
    assert result.designated.minors("gpu") == (3,)


@pytest.mark.parametrize(
    ("requests", "accepted"),
    [
        ({SHARED: "1", NPU_CORE: "10", NPU_CPU: "3", MEM: "32Gi"}, True),
        ({SHARED: "1", NPU_CORE: "10", NPU_CPU: "3", MEM: "30Gi"}, False),
        ({SHARED: "1", NPU_CORE: "10", NPU_CPU: "2", MEM: "32Gi"}, False),
        ({NPU_CORE: "10", RATIO: "50"}, False),
        ({NPU_CORE: "40", RATIO: "200"}, True),  # whole cards need no template
        ({CORE: "50", RATIO: "50"}, True),  # names no matched resource
    ],
)
def test_shared_npu_requests_must_match_a_template(
    requests: dict[str, str], accepted: bool
) -> None:
    result = prepare(pod(requests), templates=TEMPLATES)
    if accepted:
        assert isinstance(result, DeviceRequest)
    else:
        assert result == Rejection.unresolvable("no matched GPU shared resource template")


def test_isolation_provider_label_is_carried() -> None:
    result = prepare(pod({GPU: "50"}, labels={k.LABEL_GPU_ISOLATION_PROVIDER: "HAMi-core"}))
    assert isinstance(result, DeviceRequest)
    assert result.isolation_provider == "HAMi-core"


@pytest.mark.parametrize(
    ("annotation", "carried"),
    [
        ("fixed-share", "fixed-share"),
        ("best-effort", "best-effort"),
        ("burst-share", "burst-share"),
        ("", ""),
    ],
)
def test_sgpu_qos_policy_is_carried(annotation: str, carried: str) -> None:
    wanted = pod({GPU: "50"}, annotations={k.ANNOTATION_SGPU_QOS_POLICY: annotation})
    result = prepare(wanted)
    assert isinstance(result, DeviceRequest)
    assert result.sgpu_qos_policy == carried


@pytest.mark.parametrize("annotation", ["fixed", "FIXED-SHARE", "guaranteed"])
def test_an_unknown_sgpu_qos_policy_is_unresolvable(annotation: str) -> None:
    wanted = pod({GPU: "50"}, annotations={k.ANNOTATION_SGPU_QOS_POLICY: annotation})
    assert prepare(wanted) == Rejection.unresolvable(
        f'invalid annotation metax-tech.com/sgpu-qos-policy: "{annotation}"'
        " (want one of fixed-share, best-effort, burst-share)"
    )
