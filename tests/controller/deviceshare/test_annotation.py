"""PreBind: the device-allocated annotation (both ways) and the vendor adapter annotations."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from apis import constants as k
from apis.resources import ResourceList
from controller.scheduler.deviceshare.annotation import (
    EMPTY_ALLOCATION,
    AdapterOutput,
    AdaptError,
    AllocatedDevice,
    AllocatedVF,
    Allocation,
    AllocationFormatError,
    adapter_annotations,
    encode_allocation,
    node_lock_free,
    node_lock_value,
    parse_allocation,
)
from tests.controller.deviceshare.builders import GIB, MIB

SPEC_EXAMPLE = (
    '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",'
    '"koordinator.sh/gpu-memory":"16Gi","koordinator.sh/gpu-memory-ratio":"100"}}],'
    '"rdma":[{"minor":1,"id":"0000:10:00.0","resources":{"koordinator.sh/rdma":"100"}}]}'
)


def _whole(minor: int, memory: int = 16 * GIB, id_: str = "") -> AllocatedDevice:
    return AllocatedDevice(
        minor=minor,
        id=id_,
        resources=ResourceList(
            {
                k.RESOURCE_GPU_CORE: 100,
                k.RESOURCE_GPU_MEMORY: memory,
                k.RESOURCE_GPU_MEMORY_RATIO: 100,
            }
        ),
    )


SPEC_ALLOCATION = Allocation(
    {
        # rdma first on purpose: gpu is still written first
        "rdma": (
            AllocatedDevice(
                minor=1, id="0000:10:00.0", resources=ResourceList({k.RESOURCE_RDMA: 100})
            ),
        ),
        "gpu": (_whole(0),),
    }
)


def test_the_spec_example_is_written_exactly() -> None:
    assert encode_allocation(SPEC_ALLOCATION) == SPEC_EXAMPLE


def test_the_spec_example_reads_back() -> None:
    parsed = parse_allocation(SPEC_EXAMPLE)
    assert parsed.of("gpu") == SPEC_ALLOCATION.of("gpu")
    assert parsed.of("rdma") == SPEC_ALLOCATION.of("rdma")
    assert encode_allocation(parsed) == SPEC_EXAMPLE


def test_extensions_round_trip() -> None:
    allocation = Allocation(
        {
            "gpu": (
                AllocatedDevice(
                    minor=2,
                    id="npu2",
                    template="vir10_3c_32g",
                    resources=ResourceList({k.RESOURCE_HUAWEI_NPU_CORE: 10}),
                ),
            ),
            "rdma": (
                AllocatedDevice(
                    minor=0,
                    resources=ResourceList({k.RESOURCE_RDMA: 1}),
                    vfs=(AllocatedVF(minor=3, bus_id="0000:1f:00.3"),),
                ),
            ),
        }
    )
    text = encode_allocation(allocation)
    assert json.loads(text) == {
        "gpu": [
            {
                "minor": 2,
                "id": "npu2",
                "resources": {k.RESOURCE_HUAWEI_NPU_CORE: "10"},
                "extension": {"gpuSharedResourceTemplate": "vir10_3c_32g"},
            }
        ],
        "rdma": [
            {
                "minor": 0,
                "resources": {k.RESOURCE_RDMA: "1"},
                "extension": {"vfs": [{"minor": 3, "busID": "0000:1f:00.3"}]},
            }
        ],
    }
    assert parse_allocation(text) == allocation


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        '{"gpu": {}}',
        '{"gpu": [{"minor": "0"}]}',
        '{"gpu": [{"minor": 0, "resources": {"a": "x"}}]}',
    ],
)
def test_unreadable_annotations_raise(text: str) -> None:
    with pytest.raises(AllocationFormatError):
        parse_allocation(text)


GPUS = Allocation({"gpu": (_whole(0, id_="GPU-a"), _whole(1, id_="GPU-b"))})
VNPU = Allocation(
    {
        "gpu": (
            AllocatedDevice(
                minor=3,
                template="vir10_3c_32g",
                resources=ResourceList({k.RESOURCE_HUAWEI_NPU_CORE: 10}),
            ),
        )
    }
)
SGPU = Allocation(
    {
        "gpu": (
            AllocatedDevice(
                minor=0,
                id="GPU-m0",
                resources=ResourceList(
                    {
                        k.RESOURCE_GPU_CORE: 30,
                        k.RESOURCE_GPU_MEMORY: 8 * GIB,
                        k.RESOURCE_GPU_MEMORY_RATIO: 12,
                    }
                ),
            ),
        )
    }
)
NOW = 1_700_000_000_123_456_789
BASE = {k.ANNOTATION_BIND_TIMESTAMP: str(NOW)}


@pytest.mark.parametrize(
    ("allocation", "vendor", "model", "provider", "expected"),
    [
        (
            GPUS,
            "nvidia",
            "H100",
            "",
            AdapterOutput({**BASE, k.ANNOTATION_GPU_MINORS: "0,1"}),
        ),
        (
            GPUS,
            "nvidia",
            "H100",
            "HAMi-core",
            AdapterOutput({**BASE, k.ANNOTATION_GPU_MINORS: "0,1"}, {k.LABEL_HAMI_VGPU_NODE: "n1"}),
        ),
        (
            GPUS,
            "huawei",
            "Ascend-910B3",
            "",
            AdapterOutput(
                {
                    **BASE,
                    k.ANNOTATION_GPU_MINORS: "0,1",
                    "predicate-time": str(NOW),
                    "huawei.com/npu-core": "0,1",
                }
            ),
        ),
        (
            VNPU,
            "huawei",
            "Ascend-910B3",
            "",
            AdapterOutput(
                {
                    **BASE,
                    k.ANNOTATION_GPU_MINORS: "3",
                    "predicate-time": str(NOW),
                    "huawei.com/npu-core": "3-vir10_3c_32g",
                }
            ),
        ),
        (
            GPUS,
            "huawei",
            "Ascend-310P3-300I-DUO",
            "",
            AdapterOutput(
                {
                    **BASE,
                    k.ANNOTATION_GPU_MINORS: "0,1",
                    "predicate-time": str(NOW),
                    "huawei.com/Ascend310P": "Ascend310P-0,Ascend310P-1",
                }
            ),
        ),
        (
            SGPU,
            "metax",
            "C500",
            "",
            AdapterOutput(
                {
                    **BASE,
                    k.ANNOTATION_GPU_MINORS: "0",
                    "metax-tech.com/gpu-devices-allocated": (
                        '[[{"uuid":"GPU-m0","compute":30,"vRam":8192}]]'
                    ),
                },
                node_lock="hami.io/mutex.lock",
            ),
        ),
        (
            SGPU,
            "cambricon",
            "MLU-370",
            "",
            AdapterOutput(
                {
                    **BASE,
                    k.ANNOTATION_GPU_MINORS: "0",
                    "CAMBRICON_DSMLU_ASSIGHED": "false",
                    "CAMBRICON_DSMLU_PROFILE": "0_30_32",
                },
                node_lock="cambricon.com/dsmlu.lock",
            ),
        ),
        # HAMi-core isolation is vendor-neutral in Koordinator's general GPU adapter.
        (
            SGPU,
            "metax",
            "C500",
            "HAMi-core",
            AdapterOutput(
                {
                    **BASE,
                    k.ANNOTATION_GPU_MINORS: "0",
                    k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED: (
                        '[[{"uuid":"GPU-m0","compute":30,"vRam":8192}]]'
                    ),
                },
                {k.LABEL_HAMI_VGPU_NODE: "n1"},
                node_lock="hami.io/mutex.lock",
            ),
        ),
        # Only the bind time for a pod given devices but no GPU (Koordinator's general adapter).
        (
            Allocation({"rdma": SPEC_ALLOCATION.of("rdma")}),
            "nvidia",
            "H100",
            "",
            AdapterOutput(annotations=BASE),
        ),
        (EMPTY_ALLOCATION, "nvidia", "H100", "", AdapterOutput()),
    ],
    ids=[
        "nvidia",
        "hami-core",
        "ascend-whole",
        "ascend-vnpu",
        "ascend-300i-duo",
        "metax",
        "cambricon-one-card",
        "hami-core-on-metax",
        "no-gpu",
        "no-device",
    ],
)
def test_device_plugin_adapters(
    allocation: Allocation, vendor: str, model: str, provider: str, expected: AdapterOutput
) -> None:
    got = adapter_annotations(
        allocation,
        vendor=vendor,
        model=model,
        node_name="n1",
        now_ns=NOW,
        isolation_provider=provider,
    )
    assert got == expected


def _card(**resources: int) -> Allocation:
    return Allocation(
        {"gpu": (AllocatedDevice(minor=0, id="GPU-0", resources=ResourceList(resources)),)}
    )


@pytest.mark.parametrize(
    ("allocation", "vendor", "model", "reason"),
    [
        (GPUS, "cambricon", "MLU-370", "multiple gpu share is not supported on device side"),
        (
            _card(**{k.RESOURCE_GPU_CORE: 20, k.RESOURCE_GPU_MEMORY: 128 * MIB}),
            "cambricon",
            "MLU-370",
            "gpu memory must not be less than 268435456 bytes",
        ),
        (
            _card(**{k.RESOURCE_GPU_MEMORY: 8 * GIB}),
            "metax",
            "C500",
            "gpu core resource is required",
        ),
        (
            _card(**{k.RESOURCE_GPU_CORE: 10, k.RESOURCE_GPU_MEMORY: 1000}),
            "metax",
            "C500",
            "gpu memory must not be less than 1048576 bytes",
        ),
        (
            VNPU,
            "huawei",
            "Ascend-310P3-300I-DUO",
            'model "Ascend-310P3-300I-DUO" does not support vNPU',
        ),
    ],
    ids=["cambricon-two-cards", "cambricon-small", "metax-no-core", "metax-small", "310p-vnpu"],
)
def test_allocations_a_vendor_plugin_cannot_take_are_refused(
    allocation: Allocation, vendor: str, model: str, reason: str
) -> None:
    expected = f'failed to adapt for GPU device plugin of vendor "{vendor}": {reason}'
    with pytest.raises(AdaptError) as raised:
        adapter_annotations(allocation, vendor=vendor, model=model, node_name="n1", now_ns=NOW)
    assert str(raised.value) == expected


LOCKED_AT = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def test_node_lock_value() -> None:
    assert node_lock_value(LOCKED_AT, "ns", "p") == "2026-03-01T12:00:00Z,ns,p"


@pytest.mark.parametrize(
    ("value", "after", "holder_alive", "free"),
    [
        ("", timedelta(0), True, True),
        ("2026-03-01T12:00:00Z,ns,p", timedelta(minutes=1), True, False),
        ("2026-03-01T12:00:00Z,ns,p", timedelta(minutes=1), False, True),
        ("2026-03-01T12:00:00Z,ns,p", timedelta(minutes=6), True, True),
        ("garbage", timedelta(0), True, True),
        ("not-a-time,ns,p", timedelta(0), True, True),
    ],
)
def test_node_lock_free(value: str, after: timedelta, holder_alive: bool, free: bool) -> None:
    seen: list[tuple[str, str]] = []

    def exists(namespace: str, name: str) -> bool:
        seen.append((namespace, name))
        return holder_alive

    assert node_lock_free(value, LOCKED_AT + after, exists) is free
    assert seen in ([], [("ns", "p")])
