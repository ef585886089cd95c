"""The devices of one node and what the pods on it hold: the allocator's view of a node.

:func:`node_state` builds it from the node's ``Device`` object and the ``device-allocated``
annotations of its pods; :func:`apply` and :func:`release` give a new state with one
allocation charged or returned (the state itself never changes). An unhealthy device keeps
its place but offers nothing. A Device's resources under the deprecated ``kubernetes.io/``
names count as their ``koordinator.sh/`` successors (:mod:`apis.devicenames`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Final

import msgspec

from apis import constants as k
from apis.bounded import decode
from apis.core import Pod
from apis.devicenames import translated
from apis.labels import Selector
from apis.quantity import QuantityError, to_canonical
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo, VirtualFunction, VirtualFunctionGroup
from controller.scheduler.deviceshare.annotation import (
    MAX_DEVICES,
    AllocatedDevice,
    Allocation,
    AllocationFormatError,
    parse_allocation,
)

__all__ = [
    "ANNOTATION_SGPU_QOS_POLICIES",
    "BUILTIN_PARTITION_MODELS",
    "DeviceSlot",
    "GPUPartition",
    "NodeDeviceState",
    "PartitionTable",
    "apply",
    "charge",
    "demand",
    "mark_unhealthy",
    "node_state",
    "parse_partitions",
    "pod_allocation",
    "release",
    "topology_tree",
]

_log = logging.getLogger(__name__)

#: Device annotation the node agent writes on a MetaX node: the sGPU QoS policies its cards
#: support, comma-separated (a pod's ``metax-tech.com/sgpu-qos-policy`` must be one of them).
ANNOTATION_SGPU_QOS_POLICIES: Final = k.ANNOTATION_SGPU_QOS_POLICIES

_NOTHING: Final = ResourceList()
_RATIO: Final = k.RESOURCE_GPU_MEMORY_RATIO
_MEMORY: Final = k.RESOURCE_GPU_MEMORY
_CORE: Final = k.RESOURCE_GPU_CORE


@dataclass(frozen=True, slots=True)
class DeviceSlot:
    """One device of the node with what is already taken from it."""

    type: str
    minor: int
    healthy: bool
    #: What the Device reports.
    total: ResourceList
    used: ResourceList = _NOTHING
    id: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    #: NUMA node, CPU socket, PCIe switch and bus address; -1 / "" when unknown.
    numa: int = -1
    socket: int = -1
    pcie: str = ""
    bus_id: str = ""
    #: SR-IOV virtual functions: each group's labels and its VFs.
    vf_groups: tuple[VirtualFunctionGroup, ...] = ()
    #: Bus IDs of the VFs pods hold.
    used_vfs: frozenset[str] = frozenset()

    def free_vfs(self, selector: Selector) -> list[VirtualFunction]:
        """The VFs no pod holds, of the groups ``selector`` matches, by bus ID."""
        if not self.healthy:
            return []
        return sorted(
            (
                vf
                for group in self.vf_groups
                if selector.matches(group.labels)
                for vf in group.vfs
                if vf.bus_id not in self.used_vfs
            ),
            key=lambda vf: vf.bus_id,
        )

    @property
    def capacity(self) -> ResourceList:
        """What the device offers: nothing when unhealthy."""
        return self.total if self.healthy else _NOTHING

    @property
    def free(self) -> ResourceList:
        capacity = self.capacity
        return ResourceList(
            {name: max(amount - self.used.get_amount(name), 0) for name, amount in capacity.items()}
        )

    @property
    def has_topology(self) -> bool:
        return self.numa >= 0 and bool(self.pcie)

    @property
    def in_use(self) -> bool:
        return any(amount > 0 for amount in self.used.values())


@dataclass(frozen=True, slots=True)
class GPUPartition:
    """A set of GPUs meant to be handed out together (linked by NVLink, HCCS, ...)."""

    minors: tuple[int, ...]
    link_type: str = ""
    #: Ring bus bandwidth in bytes per second; 0 when not given.
    ring_bus_bandwidth: int = 0
    #: Lower is tried first.
    allocation_score: int = 1


#: Partition table: GPU count -> the partitions of that size.
PartitionTable = Mapping[int, tuple[GPUPartition, ...]]


class _WirePartition(msgspec.Struct, frozen=True, kw_only=True):
    minors: Annotated[tuple[int, ...], msgspec.Meta(max_length=MAX_DEVICES)]
    gpu_link_type: str = msgspec.field(default="", name="gpuLinkType")
    ring_bus_bandwidth: str = msgspec.field(default="", name="ringBusBandwidth")
    allocation_score: int = msgspec.field(default=1, name="allocationScore")


_WirePartitions = Annotated[
    dict[str, Annotated[list[_WirePartition], msgspec.Meta(max_length=MAX_DEVICES)]],
    msgspec.Meta(max_length=MAX_DEVICES),
]
_PARTITIONS: Final = msgspec.json.Decoder(_WirePartitions)


def parse_partitions(text: str) -> dict[int, tuple[GPUPartition, ...]]:
    """The Device annotation ``scheduling.koordinator.sh/gpu-partitions``; ValueError when it
    cannot be read (or is past the bounds: 256 KiB, 1024 sizes, partitions and minors)."""
    try:
        wire = decode(text, _PARTITIONS, "partition table")
        table: dict[int, tuple[GPUPartition, ...]] = {}
        for count, partitions in wire.items():
            table[int(count)] = tuple(
                GPUPartition(
                    minors=tuple(sorted(p.minors)),
                    link_type=p.gpu_link_type,
                    ring_bus_bandwidth=(
                        to_canonical("ringBusBandwidth", p.ring_bus_bandwidth)
                        if p.ring_bus_bandwidth
                        else 0
                    ),
                    allocation_score=p.allocation_score,
                )
                for p in partitions
            )
    except (QuantityError, ValueError) as err:
        raise ValueError(f"invalid GPU partition table: {err}") from None
    return table


def _builtin(groups: Mapping[int, Iterable[Iterable[int]]]) -> PartitionTable:
    return {
        count: tuple(GPUPartition(minors=tuple(m), link_type="NVLink") for m in sets)
        for count, sets in groups.items()
    }


_EIGHT_WAY: Final = _builtin(
    {
        1: [[m] for m in range(8)],
        2: [[0, 1], [2, 3], [4, 5], [6, 7]],
        4: [[0, 1, 2, 3], [4, 5, 6, 7]],
        8: [list(range(8))],
    }
)
#: Models (the first part of ``gpu-model``) with a built-in partition table.
BUILTIN_PARTITION_MODELS: Final = frozenset({"H100", "H800", "H20"})


@dataclass(frozen=True, slots=True)
class NodeDeviceState:
    """Every device of a node, sorted by (type, minor)."""

    node: str
    devices: tuple[DeviceSlot, ...] = ()
    #: Device labels, with the Node's labels under them (vendor, model, isolation provider).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The Device's own GPU partition table, if it gives one.
    partitions: PartitionTable | None = None
    #: ``Honor``, ``Prefer`` or empty: the Device's label when the Device gives a partition
    #: table, else the Node's (as v1.8 falls back to the Node for the built-in tables).
    partition_policy: str = ""
    #: The MetaX sGPU QoS policies the node's cards support; None: the Device names none.
    sgpu_qos_policies: frozenset[str] | None = None

    @property
    def vendor(self) -> str:
        """``nvidia`` when the Device names none."""
        return self.labels.get(k.LABEL_GPU_VENDOR) or k.GPU_VENDOR_NVIDIA

    @property
    def model(self) -> str:
        return self.labels.get(k.LABEL_GPU_MODEL, "")

    def partition_table(self) -> PartitionTable | None:
        """The Device's partition table, else the built-in one of its model, else None."""
        if self.partitions is not None:
            return self.partitions
        if (
            self.vendor == k.GPU_VENDOR_NVIDIA
            and self.model.split("-")[0] in BUILTIN_PARTITION_MODELS
        ):
            return _EIGHT_WAY
        return None

    def of_type(self, device_type: str) -> tuple[DeviceSlot, ...]:
        return tuple(d for d in self.devices if d.type == device_type)

    def slot(self, device_type: str, minor: int) -> DeviceSlot | None:
        for device in self.devices:
            if device.type == device_type and device.minor == minor:
                return device
        return None


def demand(slot: DeviceSlot, request: Mapping[str, int]) -> ResourceList:
    """``request`` as this device must give it: a memory request also takes its share of the
    card's ratio (rounded down), a ratio request its memory."""
    amounts = {name: amount for name, amount in request.items() if amount > 0}
    card_memory = slot.total.get_amount(_MEMORY)
    if card_memory > 0:
        if _MEMORY in amounts and _RATIO not in amounts:
            amounts[_RATIO] = amounts[_MEMORY] * 100 // card_memory
        elif _RATIO in amounts and _MEMORY not in amounts:
            amounts[_MEMORY] = amounts[_RATIO] * card_memory // 100
    return ResourceList(amounts)


def _is_share(slot: DeviceSlot, resources: Mapping[str, int]) -> bool:
    ratio = resources.get(_RATIO, 0)
    core = resources.get(_CORE, 0)
    return 0 < ratio < 100 or 0 < core < 100 or (ratio == 0 and resources.get(_MEMORY, 0) > 0)


def charge(slot: DeviceSlot, resources: Mapping[str, int]) -> ResourceList:
    """What an allocation of ``resources`` takes from ``slot``: the resources, plus one MetaX
    sGPU slot for a share of a card that reports them."""
    charged = ResourceList(resources)
    if slot.total.get_amount(k.RESOURCE_METAX_SGPU) > 0 and _is_share(slot, resources):
        charged = charged + {k.RESOURCE_METAX_SGPU: 1}
    return charged


def _slot(info: DeviceInfo) -> DeviceSlot | None:
    if info.minor is None:
        return None
    topology = info.topology
    return DeviceSlot(
        type=info.type,
        minor=info.minor,
        healthy=info.health,
        total=translated(info.resources),
        id=info.id,
        labels=info.labels,
        numa=topology.node_id if topology is not None else -1,
        socket=topology.socket_id if topology is not None else -1,
        pcie=topology.pcie_id if topology is not None else "",
        bus_id=topology.bus_id if topology is not None else "",
        vf_groups=info.vf_groups,
    )


def _charged(state: NodeDeviceState, allocation: Allocation, sign: int) -> NodeDeviceState:
    changes: dict[tuple[str, int], list[AllocatedDevice]] = {}
    for device_type, devices in allocation.devices.items():
        for device in devices:
            changes.setdefault((device_type, device.minor), []).append(device)
    if not changes:
        return state
    slots = []
    for slot in state.devices:
        given = changes.get((slot.type, slot.minor))
        if given:
            used = slot.used
            vfs = set(slot.used_vfs)
            for device in given:
                amount = charge(slot, device.resources)
                used = used + amount if sign > 0 else (used - amount).clamp_min(0)
                held = {vf.bus_id for vf in device.vfs}
                vfs = vfs | held if sign > 0 else vfs - held
            slot = replace(slot, used=used.nonzero(), used_vfs=frozenset(vfs))
        slots.append(slot)
    return replace(state, devices=tuple(slots))


def apply(state: NodeDeviceState, allocation: Allocation) -> NodeDeviceState:
    """The state with ``allocation`` charged (an assumed or bound pod)."""
    return _charged(state, allocation, 1)


def release(state: NodeDeviceState, allocation: Allocation) -> NodeDeviceState:
    """The state with ``allocation`` given back (an unreserved or deleted pod)."""
    return _charged(state, allocation, -1)


def mark_unhealthy(state: NodeDeviceState) -> NodeDeviceState:
    """Every device unhealthy (the Device object is gone), allocations kept."""
    return replace(state, devices=tuple(replace(d, healthy=False) for d in state.devices))


def pod_allocation(pod: Pod) -> Allocation | None:
    """The allocation a pod holds, or None (none, or an annotation that cannot be read)."""
    text = pod.annotations.get(k.ANNOTATION_DEVICE_ALLOCATED, "")
    if not text:
        return None
    try:
        return parse_allocation(text)
    except AllocationFormatError as err:
        _log.warning(
            "pod %s/%s: ignoring its device allocation: %s",
            pod.metadata.namespace,
            pod.metadata.name,
            err,
        )
        return None


def node_state(
    device: Device | None,
    pods: Iterable[Pod] = (),
    *,
    node: str = "",
    node_labels: Mapping[str, str] | None = None,
) -> NodeDeviceState:
    """The device state of a node from its Device and the pods bound or assumed on it
    (finished pods hold nothing)."""
    labels = dict(node_labels or {})
    slots: list[DeviceSlot] = []
    partitions = None
    qos_policies = None
    if device is not None:
        labels.update(device.metadata.labels)
        listed = device.metadata.annotations.get(ANNOTATION_SGPU_QOS_POLICIES)
        if listed is not None:
            qos_policies = frozenset(p.strip() for p in listed.split(",") if p.strip())
        text = device.metadata.annotations.get(k.ANNOTATION_GPU_PARTITIONS, "")
        if text:
            try:
                partitions = parse_partitions(text)
            except ValueError as err:
                _log.warning("device %s: ignoring %s", device.metadata.name, err)
        slots = [slot for info in device.spec.devices if (slot := _slot(info)) is not None]
        slots.sort(key=lambda s: (s.type, s.minor))
    policy_source = (
        device.metadata.labels if device is not None and partitions is not None else node_labels
    )
    state = NodeDeviceState(
        node=node or (device.metadata.name if device is not None else ""),
        devices=tuple(slots),
        labels=labels,
        partitions=partitions,
        partition_policy=(policy_source or {}).get(k.LABEL_GPU_PARTITION_POLICY, ""),
        sgpu_qos_policies=qos_policies,
    )
    held: dict[str, list[AllocatedDevice]] = {}
    for pod in pods:
        if pod.is_terminated:
            continue
        allocation = pod_allocation(pod)
        if allocation is not None:
            for device_type, devices in allocation.devices.items():
                held.setdefault(device_type, []).extend(devices)
    return apply(state, Allocation({t: tuple(d) for t, d in held.items()}))


def topology_tree(
    state: NodeDeviceState, device_type: str
) -> dict[int, dict[str, tuple[int, ...]]]:
    """NUMA node -> PCIe switch -> minors of the devices of ``device_type`` (-1 / "" for
    devices that report no topology)."""
    tree: dict[int, dict[str, tuple[int, ...]]] = {}
    for slot in state.of_type(device_type):
        switches = tree.setdefault(slot.numa, {})
        switches[slot.pcie] = (*switches.get(slot.pcie, ()), slot.minor)
    return tree
