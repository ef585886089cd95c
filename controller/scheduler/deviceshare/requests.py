"""What a pod asks of a node's devices, validated and normalized once per scheduling attempt.

:func:`prepare` reads the pod's device resources and its device annotations and gives either
a :class:`DeviceRequest` (per device type: how many devices and how much of each) or a
:class:`Rejection` carrying the scheduler status and message.

GPU-family resources are accepted only in these combinations (the normalized per-pod request
in brackets; core and ratio are percent of one card)::

    nvidia.com/gpu | amd.com/gpu | dcu.com/gpu: N     [core = ratio = 100*N]
    koordinator.sh/gpu: X                              [core = ratio = X]
    gpu-memory | gpu-memory-ratio                      [as given]
    gpu-core + (gpu-memory | gpu-memory-ratio)         [as given]
    npu-core + gpu-memory-ratio                        [as given]
    gpu.shared + (gpu-memory | gpu-memory-ratio) [+ gpu-core]
    gpu.shared + npu-core + npu-cpu [+ npu-dvpp] + gpu-memory

A percentage above 100 must be a whole number of cards; with ``gpu.shared`` the core and ratio
must split evenly over the shared cards and give none more than 100. The deprecated
``kubernetes.io/gpu*``, ``rdma`` and ``fpga`` names arrive already read as their
``koordinator.sh/`` successors (:func:`apis.core.pod_requests`, :mod:`apis.devicenames`), so a
refusal names the new spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, TypeVar

import msgspec

from apis import constants as k
from apis.bounded import BoundedError, decode
from apis.core import Pod, pod_requests
from apis.labels import Selector, SelectorError
from apis.meta import LabelSelector
from apis.quantity import QuantityError, format_quantity, to_canonical
from apis.resources import ResourceList
from controller.scheduler.deviceshare.annotation import (
    Allocation,
    AllocationFormatError,
    parse_allocation,
)
from controller.scheduler.deviceshare.args import DEFAULT_ARGS, DeviceShareArgs
from controller.scheduler.deviceshare.templates import NO_TEMPLATES, SharedTemplates, needs_template

__all__ = [
    "APPLY_FOR_ALL",
    "ERROR",
    "REQUESTS_AS_COUNT",
    "SCOPES",
    "UNSCHEDULABLE",
    "UNSCHEDULABLE_AND_UNRESOLVABLE",
    "DeviceHint",
    "DeviceRequest",
    "JointAllocate",
    "PartitionSpec",
    "Rejection",
    "TypeRequest",
    "normalize_gpu",
    "prepare",
]

UNSCHEDULABLE: Final = "Unschedulable"
UNSCHEDULABLE_AND_UNRESOLVABLE: Final = "UnschedulableAndUnresolvable"
ERROR: Final = "Error"
Code = Literal["Unschedulable", "UnschedulableAndUnresolvable", "Error"]

APPLY_FOR_ALL: Final = "ApplyForAll"
REQUESTS_AS_COUNT: Final = "RequestsAsCount"
DEVICE_LEVEL: Final = "DeviceLevel"
SAME_PCIE: Final = "SamePCIe"
#: ``requiredTopologyScope`` values, tightest first, with their depth in the topology tree.
SCOPES: Final[Mapping[str, int]] = {"Device": 4, "PCIe": 3, "NUMANode": 2, "Node": 1}

_WHOLE_GPU_NAMES: Final = (k.RESOURCE_NVIDIA_GPU, k.RESOURCE_AMD_GPU, k.RESOURCE_DCU_GPU)
_GPU_NAMES: Final = k.GPU_RESOURCES
_CORE: Final = k.RESOURCE_GPU_CORE
_RATIO: Final = k.RESOURCE_GPU_MEMORY_RATIO
_MEMORY: Final = k.RESOURCE_GPU_MEMORY
_SHARED: Final = k.RESOURCE_GPU_SHARED
_NPU_CORE: Final = k.RESOURCE_HUAWEI_NPU_CORE
_NPU_CPU: Final = k.RESOURCE_HUAWEI_NPU_CPU
_NPU_DVPP: Final = k.RESOURCE_HUAWEI_NPU_DVPP

#: Every accepted set of GPU resource names.
_GPU_COMBINATIONS: Final = frozenset(
    frozenset(names)
    for names in (
        *((name,) for name in _WHOLE_GPU_NAMES),
        (k.RESOURCE_GPU,),
        (_MEMORY,),
        (_RATIO,),
        (_CORE, _MEMORY),
        (_CORE, _RATIO),
        (_NPU_CORE, _RATIO),
        (_SHARED, _MEMORY),
        (_SHARED, _RATIO),
        (_SHARED, _CORE, _MEMORY),
        (_SHARED, _CORE, _RATIO),
        (_SHARED, _NPU_CORE, _NPU_CPU, _MEMORY),
        (_SHARED, _NPU_CORE, _NPU_CPU, _NPU_DVPP, _MEMORY),
    )
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a pod cannot use (this node's) devices: a scheduler status code and its message."""

    code: Code
    reason: str

    @classmethod
    def unresolvable(cls, reason: str) -> Rejection:
        return cls(UNSCHEDULABLE_AND_UNRESOLVABLE, reason)

    @classmethod
    def unschedulable(cls, reason: str) -> Rejection:
        return cls(UNSCHEDULABLE, reason)


# --- annotations -----------------------------------------------------------------------------


class DeviceHint(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One device type's entry of ``scheduling.koordinator.sh/device-allocate-hint``."""

    selector: LabelSelector | None = None
    vf_selector: LabelSelector | None = None
    #: ``ApplyForAll`` or ``RequestsAsCount``.
    allocate_strategy: str = ""
    #: ``DeviceLevel`` or ``PCIExpressLevel``.
    exclusive_policy: str = ""
    #: ``Device``, ``PCIe``, ``NUMANode`` or ``Node``.
    required_topology_scope: str = ""

    def device_selector(self) -> Selector:
        """The selector devices must match (every device when none is given)."""
        return (
            Selector.everything()
            if self.selector is None
            else Selector.from_label_selector(self.selector)
        )


class JointAllocate(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``scheduling.koordinator.sh/device-joint-allocate``: the first type is the primary."""

    device_types: tuple[str, ...] = ()
    #: ``SamePCIe``: every secondary device sits on a PCIe switch of the primary's devices.
    required_scope: str = ""

    @property
    def same_pcie(self) -> bool:
        return self.required_scope == SAME_PCIE


class PartitionSpec(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``scheduling.koordinator.sh/gpu-partition-spec``."""

    #: ``Restricted`` (only the best partition group) or ``BestEffort``.
    allocate_policy: str = "BestEffort"
    #: Least ring bus bandwidth a partition must have (a quantity).
    ring_bus_bandwidth: str = ""

    @property
    def restricted(self) -> bool:
        return self.allocate_policy == "Restricted"

    @property
    def bandwidth(self) -> int:
        """The bandwidth asked for, canonical; 0 when none (checked by :func:`prepare`)."""
        if not self.ring_bus_bandwidth:
            return 0
        return to_canonical("ringBusBandwidth", self.ring_bus_bandwidth)


_HINTS: Final = msgspec.json.Decoder(dict[str, DeviceHint])
_JOINT: Final = msgspec.json.Decoder(JointAllocate)
_PARTITION: Final = msgspec.json.Decoder(PartitionSpec)

# --- the request -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypeRequest:
    """The pod's need of one device type."""

    device_type: str
    #: The normalized per-pod request.
    total: ResourceList
    #: How many devices; with ``apply_for_all`` the count is every candidate device.
    count: int
    #: What each device must give.
    per_device: ResourceList
    #: GPUs only: a share of a card (per-GPU ratio below 100, or a memory-sized request).
    shared: bool = False
    apply_for_all: bool = False


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """Everything the allocator needs to know about the pod, worked out once."""

    types: Mapping[str, TypeRequest] = field(default_factory=dict)
    hints: Mapping[str, DeviceHint] = field(default_factory=dict)
    joint: JointAllocate | None = None
    partition: PartitionSpec | None = None
    #: An allocation the pod already carries: only verified, never chosen anew.
    designated: Allocation | None = None
    #: Pod label ``koordinator.sh/gpu-isolation-provider``.
    isolation_provider: str = ""
    #: Pod annotation ``metax-tech.com/sgpu-qos-policy`` (one of ``SGPU_QOS_POLICIES``).
    sgpu_qos_policy: str = ""

    @property
    def empty(self) -> bool:
        """The pod asks for no device: the plugin has nothing to do (PreFilter Skip)."""
        return not self.types

    def of(self, device_type: str) -> TypeRequest | None:
        return self.types.get(device_type)

    def hint(self, device_type: str) -> DeviceHint | None:
        return self.hints.get(device_type)

    @property
    def gpu(self) -> TypeRequest | None:
        return self.types.get(k.DEVICE_TYPE_GPU)


class _InvalidError(Exception):
    """A request refused during normalization (carries the message)."""


def _unit(name: str, amount: int) -> _InvalidError:
    return _InvalidError(f"invalid resource unit {name}: {format_quantity(name, amount)}")


def _percent(requests: Mapping[str, int], name: str) -> None:
    """A percentage above 100 must be whole cards."""
    amount = requests.get(name, 0)
    if amount > 100 and amount % 100 != 0:
        raise _unit(name, amount)


def _gpu_total(requests: Mapping[str, int]) -> ResourceList:
    """The normalized per-pod GPU request (names already checked against the table)."""
    names = frozenset(requests)
    if len(names) == 1 and next(iter(names)) in _WHOLE_GPU_NAMES:
        cards = next(iter(requests.values()))
        return ResourceList({_CORE: 100 * cards, _RATIO: 100 * cards})
    if names == {k.RESOURCE_GPU}:
        amount = requests[k.RESOURCE_GPU]
        _percent(requests, k.RESOURCE_GPU)
        return ResourceList({_CORE: amount, _RATIO: amount})
    shared = requests.get(_SHARED, 0)
    if shared:
        if _NPU_CORE in names:
            if shared != 1:
                raise _unit(_SHARED, shared)
            if requests.get(_NPU_DVPP, 0) > 100:
                raise _unit(_NPU_DVPP, requests[_NPU_DVPP])
        for name in (_CORE, _RATIO):
            amount = requests.get(name, 0)
            if amount and (amount % shared != 0 or amount > 100 * shared):
                raise _unit(name, amount)
    else:
        _percent(requests, _CORE)
        _percent(requests, _RATIO)
    return ResourceList(requests)


def _gpu_count(total: Mapping[str, int]) -> int:
    shared = total.get(_SHARED, 0)
    if shared > 0:
        return shared
    ratio = total.get(_RATIO, 0)
    if ratio > 100 and ratio % 100 == 0:
        return ratio // 100
    return 1


def normalize_gpu(requests: Mapping[str, int]) -> TypeRequest:
    """The GPU part of a pod's request, normalized; :class:`ValueError` with the scheduler's
    message when the combination or a value is not accepted."""
    present = {name: amount for name, amount in requests.items() if name in _GPU_NAMES and amount}
    if frozenset(present) not in _GPU_COMBINATIONS:
        raise ValueError(f"invalid resource device requests: [{' '.join(sorted(present))}]")
    try:
        total = _gpu_total(present)
    except _InvalidError as err:
        raise ValueError(str(err)) from None
    count = _gpu_count(total)
    per_device = ResourceList(
        {name: amount // count for name, amount in total.items() if name != _SHARED}
    )
    ratio = per_device.get_amount(_RATIO)
    shared = (_RATIO in per_device and ratio < 100) or (
        _MEMORY in per_device and _RATIO not in per_device
    )
    return TypeRequest(
        device_type=k.DEVICE_TYPE_GPU,
        total=total,
        count=count,
        per_device=per_device,
        shared=shared,
    )


def _normalize_other(
    device_type: str, name: str, amount: int, hint: DeviceHint | None
) -> TypeRequest:
    total = ResourceList({name: amount})
    strategy = hint.allocate_strategy if hint is not None else ""
    if strategy == APPLY_FOR_ALL:
        return TypeRequest(device_type, total, 0, total, apply_for_all=True)
    if strategy == REQUESTS_AS_COUNT:
        each = 100 if hint is not None and hint.exclusive_policy == DEVICE_LEVEL else 1
        return TypeRequest(device_type, total, amount, ResourceList({name: each}))
    if amount > 100:
        if amount % 100 != 0:
            raise _unit(name, amount)
        return TypeRequest(device_type, total, amount // 100, ResourceList({name: 100}))
    return TypeRequest(device_type, total, 1, total)


_T = TypeVar("_T")


def _decode(decoder: msgspec.json.Decoder[_T], pod: Pod, key: str) -> _T | None:
    text = pod.annotations.get(key, "")
    if not text:
        return None
    try:
        return decode(text, decoder, f"invalid annotation {key}")
    except BoundedError as err:
        raise _InvalidError(str(err)) from None


def _annotations(
    pod: Pod,
) -> tuple[dict[str, DeviceHint], JointAllocate | None, PartitionSpec | None, Allocation | None]:
    hints = _decode(_HINTS, pod, k.ANNOTATION_DEVICE_ALLOCATE_HINT) or {}
    for device_type, hint in hints.items():
        try:
            hint.device_selector()
            if hint.vf_selector is not None:
                Selector.from_label_selector(hint.vf_selector)
        except SelectorError as err:
            raise _InvalidError(
                f"invalid annotation {k.ANNOTATION_DEVICE_ALLOCATE_HINT}: {device_type}: {err}"
            ) from None
        scope = hint.required_topology_scope
        if scope and scope not in SCOPES:
            raise _InvalidError(
                f"invalid annotation {k.ANNOTATION_DEVICE_ALLOCATE_HINT}: {device_type}:"
                f" unknown requiredTopologyScope {scope!r}"
            )
    joint = _decode(_JOINT, pod, k.ANNOTATION_DEVICE_JOINT_ALLOCATE)
    partition = _decode(_PARTITION, pod, k.ANNOTATION_GPU_PARTITION_SPEC)
    if partition is not None:
        try:
            partition.bandwidth  # noqa: B018 - checked once here, read later
        except QuantityError as err:
            raise _InvalidError(
                f"invalid annotation {k.ANNOTATION_GPU_PARTITION_SPEC}: ringBusBandwidth: {err}"
            ) from None
    designated = None
    text = pod.annotations.get(k.ANNOTATION_DEVICE_ALLOCATED, "")
    if text:
        try:
            designated = parse_allocation(text)
        except AllocationFormatError as err:
            raise _InvalidError(str(err)) from None
    return hints, joint, partition, designated


def prepare(
    pod: Pod,
    *,
    args: DeviceShareArgs = DEFAULT_ARGS,
    templates: SharedTemplates = NO_TEMPLATES,
) -> DeviceRequest | Rejection:
    """The pod's device request, or why no node can take it (UnschedulableAndUnresolvable).

    A pod asking for no device gets an empty request (:attr:`DeviceRequest.empty`).
    """
    requests = pod_requests(pod).nonzero()
    qos = pod.annotations.get(k.ANNOTATION_SGPU_QOS_POLICY, "")
    if qos and qos not in k.SGPU_QOS_POLICIES:
        return Rejection.unresolvable(
            f'invalid annotation {k.ANNOTATION_SGPU_QOS_POLICY}: "{qos}"'
            f" (want one of {', '.join(k.SGPU_QOS_POLICIES)})"
        )
    try:
        hints, joint, partition, designated = _annotations(pod)
        types: dict[str, TypeRequest] = {}
        if any(name in _GPU_NAMES for name in requests):
            try:
                gpu = normalize_gpu(requests)
            except ValueError as err:
                raise _InvalidError(str(err)) from None
            if (
                gpu.shared
                and needs_template(
                    gpu.per_device, args.gpu_shared_resource_templates_config.matched_resources
                )
                and not templates.any_equal(gpu.per_device)
            ):
                raise _InvalidError("no matched GPU shared resource template")
            types[k.DEVICE_TYPE_GPU] = gpu
        for device_type, name in (
            (k.DEVICE_TYPE_RDMA, k.RESOURCE_RDMA),
            (k.DEVICE_TYPE_FPGA, k.RESOURCE_FPGA),
        ):
            amount = requests.get(name, 0)
            if amount:
                types[device_type] = _normalize_other(
                    device_type, name, amount, hints.get(device_type)
                )
    except _InvalidError as err:
        return Rejection.unresolvable(str(err))
    if not types:
        return DeviceRequest()
    return DeviceRequest(
        types=types,
        hints=hints,
        joint=joint,
        partition=partition,
        designated=designated,
        isolation_provider=pod.labels.get(k.LABEL_GPU_ISOLATION_PROVIDER, ""),
        sgpu_qos_policy=qos,
    )
