"""Node device state: totals, what pods hold, health, and copy-on-write updates."""

from __future__ import annotations

import json
import logging

import pytest

from apis import constants as k
from apis.core import Pod, PodStatus
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo
from controller.scheduler.deviceshare.annotation import AllocatedDevice, Allocation
from controller.scheduler.deviceshare.state import (
    GPUPartition,
    apply,
    mark_unhealthy,
    node_state,
    release,
    topology_tree,
)
from tests.controller.deviceshare.builders import GIB, device, gpu, h100_node, pod


def _holder(name: str, entries: list[dict[str, object]], phase: str = "Running") -> Pod:
    held = pod(
        {"nvidia.com/gpu": "1"},
        name=name,
        annotations={k.ANNOTATION_DEVICE_ALLOCATED: json.dumps({"gpu": entries})},
    )
    return held.__class__(metadata=held.metadata, spec=held.spec, status=PodStatus(phase=phase))


def _share(minor: int, core: int, ratio: int) -> dict[str, object]:
    return {
        "minor": minor,
        "resources": {
            k.RESOURCE_GPU_CORE: str(core),
            k.RESOURCE_GPU_MEMORY_RATIO: str(ratio),
            k.RESOURCE_GPU_MEMORY: f"{ratio * 80 // 100}Gi",
        },
    }


def test_pods_allocations_are_summed_per_device() -> None:
    pods = [
        _holder("a", [_share(0, 30, 25)]),
        _holder("b", [_share(0, 20, 25), _share(1, 100, 100)]),
        _holder("done", [_share(2, 100, 100)], phase="Succeeded"),
    ]
    state = node_state(device([gpu(0), gpu(1), gpu(2)]), pods)
    used = {slot.minor: dict(slot.used) for slot in state.devices}
    assert used == {
        0: {
            k.RESOURCE_GPU_CORE: 50,
            k.RESOURCE_GPU_MEMORY_RATIO: 50,
            k.RESOURCE_GPU_MEMORY: 40 * GIB,
        },
        1: {
            k.RESOURCE_GPU_CORE: 100,
            k.RESOURCE_GPU_MEMORY_RATIO: 100,
            k.RESOURCE_GPU_MEMORY: 80 * GIB,
        },
        2: {},
    }
    slot = state.slot("gpu", 0)
    assert slot is not None
    assert slot.free == ResourceList(
        {k.RESOURCE_GPU_CORE: 50, k.RESOURCE_GPU_MEMORY_RATIO: 50, k.RESOURCE_GPU_MEMORY: 40 * GIB}
    )


def test_an_unreadable_allocation_is_ignored_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = pod(
        {"nvidia.com/gpu": "1"}, name="broken", annotations={k.ANNOTATION_DEVICE_ALLOCATED: "{"}
    )
    with caplog.at_level(logging.WARNING):
        state = node_state(device([gpu(0)]), [broken])
    assert all(not slot.in_use for slot in state.devices)
    assert "default/broken" in caplog.text


def test_unhealthy_devices_offer_nothing_but_stay_known() -> None:
    state = node_state(device([gpu(0, healthy=False), gpu(1)]))
    sick, well = state.devices
    assert (sick.minor, len(sick.free), sick.total.get_amount(k.RESOURCE_GPU_CORE)) == (0, 0, 100)
    assert well.free.get_amount(k.RESOURCE_GPU_CORE) == 100
    gone = mark_unhealthy(state)
    assert [len(slot.free) for slot in gone.devices] == [0, 0]
    assert [slot.minor for slot in gone.devices] == [0, 1]


def test_devices_are_sorted_and_those_without_minor_dropped() -> None:
    infos = [gpu(3), gpu(1), DeviceInfo(type="gpu", health=True), gpu(2)]
    state = node_state(device(infos))
    assert [slot.minor for slot in state.devices] == [1, 2, 3]


def test_topology_labels_and_vendor_come_from_the_device() -> None:
    state = node_state(h100_node(), node_labels={"extra": "x"})
    slot = state.slot("gpu", 5)
    assert slot is not None
    assert (slot.numa, slot.pcie, slot.id) == (1, "pci2", "GPU-5")
    assert (state.vendor, state.model, state.node) == ("nvidia", "H100-80GB-HBM3", "n1")
    assert state.labels["extra"] == "x"


def test_vendor_defaults_to_nvidia() -> None:
    assert node_state(None, node="n9").vendor == "nvidia"


def test_apply_and_release_are_copy_on_write() -> None:
    state = node_state(device([gpu(0), gpu(1)]))
    allocation = Allocation(
        {"gpu": (AllocatedDevice(minor=1, resources=ResourceList({k.RESOURCE_GPU_CORE: 40})),)}
    )
    assumed = apply(state, allocation)
    assert state.devices[1].used == {}
    assert assumed.devices[1].used == {k.RESOURCE_GPU_CORE: 40}
    assert assumed.devices[0] is state.devices[0]
    assert release(assumed, allocation) == state
    assert apply(state, Allocation()) is state


def test_partition_tables_from_the_device_or_built_in(caplog: pytest.LogCaptureFixture) -> None:
    table = '{"2": [{"minors": [1, 0], "gpuLinkType": "HCCS", "ringBusBandwidth": "1Gi"}]}'
    dev = device([gpu(0), gpu(1)], model="910")
    with_table = Device(
        metadata=ObjectMeta(
            name="n1", labels=dev.metadata.labels, annotations={k.ANNOTATION_GPU_PARTITIONS: table}
        ),
        spec=dev.spec,
    )
    assert node_state(with_table).partition_table() == {
        2: (GPUPartition(minors=(0, 1), link_type="HCCS", ring_bus_bandwidth=GIB),)
    }
    builtin = node_state(h100_node()).partition_table()
    assert builtin is not None
    assert [p.minors for p in builtin[2]] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert node_state(device([gpu(0)], model="H200")).partition_table() is None
    broken = Device(
        metadata=ObjectMeta(name="n2", annotations={k.ANNOTATION_GPU_PARTITIONS: "{"}),
        spec=dev.spec,
    )
    with caplog.at_level(logging.WARNING):
        assert node_state(broken).partition_table() is None
    assert "invalid GPU partition table" in caplog.text


def test_topology_tree() -> None:
    state = node_state(h100_node(rdma_nics=True))
    assert topology_tree(state, "gpu") == {
        0: {"pci0": (0, 1), "pci1": (2, 3)},
        1: {"pci2": (4, 5), "pci3": (6, 7)},
    }
    assert topology_tree(node_state(device([gpu(0)])), "gpu") == {-1: {"": (0,)}}
