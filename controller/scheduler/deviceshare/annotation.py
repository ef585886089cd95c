"""The device allocation of a pod and its ``scheduling.koordinator.sh/device-allocated`` form.

:class:`Allocation` is what the allocator hands back and what the node state charges; the
annotation is its JSON, both ways::

    {"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100",...}}],
     "rdma":[{"minor":1,"id":"0000:10:00.0","resources":{"koordinator.sh/rdma":"100"}}]}

:func:`adapter_annotations` adds what vendor device plugins read (gate
``DevicePluginAdaption``, spec §3.5): the bind time for a pod given any device; for GPUs their
minors and, for a HAMi-core pod, the ``hami.io/vgpu-node`` label; Huawei's ``predicate-time``
and ``huawei.com/npu-core`` / ``huawei.com/Ascend310P``, MetaX's
``metax-tech.com/gpu-devices-allocated`` and Cambricon's sMLU profile, with the node lock
those plugins expect (:func:`node_lock_value`, :func:`node_lock_free`). What a vendor's plugin
cannot take raises :class:`AdaptError`. Resources written with the deprecated
``kubernetes.io/`` names read as their successors (:mod:`apis.devicenames`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final

import msgspec

from apis import constants as k
from apis.bounded import BoundedError, decode
from apis.devicenames import translated
from apis.quantity import QuantityError
from apis.resources import ResourceList

__all__ = [
    "EMPTY_ALLOCATION",
    "MAX_DEVICES",
    "NODE_LOCKS",
    "NODE_LOCK_EXPIRY",
    "AdaptError",
    "AdapterOutput",
    "AllocatedDevice",
    "AllocatedVF",
    "Allocation",
    "AllocationFormatError",
    "adapter_annotations",
    "encode_allocation",
    "node_lock_free",
    "node_lock_value",
    "parse_allocation",
]

_MIB: Final = 1 << 20
#: Order device types are written in (others follow in name order).
_TYPE_ORDER: Final = (k.DEVICE_TYPE_GPU, k.DEVICE_TYPE_RDMA, k.DEVICE_TYPE_FPGA)


class AllocationFormatError(ValueError):
    """A device-allocated annotation that cannot be read."""


@dataclass(frozen=True, slots=True)
class AllocatedVF:
    minor: int
    bus_id: str = ""


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One device (or a share of it) given to a pod."""

    minor: int
    resources: ResourceList
    #: The Device's ``id`` (GPU UUID, RDMA PCI address); empty when the Device gives none.
    id: str = ""
    vfs: tuple[AllocatedVF, ...] = ()
    #: Name of the GPU shared-resource template the share was cut by (Ascend vNPU).
    template: str = ""


@dataclass(frozen=True, slots=True)
class Allocation:
    """Devices per device type (``gpu``, ``rdma``, ``fpga``), in allocation order."""

    devices: Mapping[str, tuple[AllocatedDevice, ...]] = field(default_factory=dict)

    def of(self, device_type: str) -> tuple[AllocatedDevice, ...]:
        return self.devices.get(device_type, ())

    def minors(self, device_type: str) -> tuple[int, ...]:
        return tuple(d.minor for d in self.of(device_type))

    @property
    def empty(self) -> bool:
        return not any(self.devices.values())


EMPTY_ALLOCATION: Final = Allocation()

# --- wire form -------------------------------------------------------------------------------


class _WireVF(msgspec.Struct, frozen=True, kw_only=True):
    minor: int
    bus_id: str = msgspec.field(default="", name="busID")


class _WireExtension(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    vfs: tuple[_WireVF, ...] = ()
    gpu_shared_resource_template: str = msgspec.field(default="", name="gpuSharedResourceTemplate")


class _WireEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    minor: int
    id: str = ""
    resources: dict[str, str] = {}
    extension: _WireExtension | None = None


#: Most devices of one type an allocation may list, and most device types.
MAX_DEVICES: Final = 1024
MAX_TYPES: Final = 16
_Wire = Annotated[
    dict[str, Annotated[list[_WireEntry], msgspec.Meta(max_length=MAX_DEVICES)]],
    msgspec.Meta(max_length=MAX_TYPES),
]
_DECODER: Final = msgspec.json.Decoder(_Wire)
_ENCODER: Final = msgspec.json.Encoder()


def _type_key(device_type: str) -> tuple[int, str]:
    if device_type in _TYPE_ORDER:
        return _TYPE_ORDER.index(device_type), ""
    return len(_TYPE_ORDER), device_type


def _to_wire(device: AllocatedDevice) -> _WireEntry:
    extension = None
    if device.vfs or device.template:
        extension = _WireExtension(
            vfs=tuple(_WireVF(minor=vf.minor, bus_id=vf.bus_id) for vf in device.vfs),
            gpu_shared_resource_template=device.template,
        )
    return _WireEntry(
        minor=device.minor,
        id=device.id,
        resources=device.resources.to_wire(),
        extension=extension,
    )


def encode_allocation(allocation: Allocation) -> str:
    """The annotation value: compact JSON, types in the order gpu, rdma, fpga."""
    wire = {
        device_type: [_to_wire(d) for d in devices]
        for device_type, devices in sorted(
            allocation.devices.items(), key=lambda i: _type_key(i[0])
        )
        if devices
    }
    return _ENCODER.encode(wire).decode()


def _from_wire(device_type: str, entry: _WireEntry) -> AllocatedDevice:
    try:
        resources = translated(ResourceList.parse(entry.resources))
    except QuantityError as err:
        raise AllocationFormatError(f"{device_type} minor {entry.minor}: {err}") from None
    extension = entry.extension or _WireExtension()
    return AllocatedDevice(
        minor=entry.minor,
        resources=resources,
        id=entry.id,
        vfs=tuple(AllocatedVF(minor=vf.minor, bus_id=vf.bus_id) for vf in extension.vfs),
        template=extension.gpu_shared_resource_template,
    )


def parse_allocation(text: str) -> Allocation:
    """An annotation value back into an :class:`Allocation`; :class:`AllocationFormatError`
    when it is not one (or is past the bounds: 256 KiB, 16 types, 1024 devices per type)."""
    try:
        wire = decode(text, _DECODER, "device allocation")
    except BoundedError as err:
        raise AllocationFormatError(f"invalid {err}") from None
    return Allocation(
        {
            device_type: tuple(_from_wire(device_type, entry) for entry in entries)
            for device_type, entries in wire.items()
        }
    )


# --- device-plugin adapters ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdapterOutput:
    """What the device-plugin adapters add to the pod at binding, and the Node annotation the
    binder must hold as a lock while it binds (empty: none)."""

    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    node_lock: str = ""


#: Node annotation each vendor's device plugin uses as a binding lock.
NODE_LOCKS: Final[Mapping[str, str]] = {
    k.GPU_VENDOR_METAX: k.ANNOTATION_HAMI_MUTEX_LOCK,
    k.GPU_VENDOR_CAMBRICON: k.ANNOTATION_CAMBRICON_DSMLU_LOCK,
}
#: A node lock older than this is stale and may be taken over.
NODE_LOCK_EXPIRY: Final = timedelta(minutes=5)


def node_lock_value(now: datetime, namespace: str, name: str) -> str:
    """``<RFC 3339 time>,<namespace>,<pod>``."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp},{namespace},{name}"


def node_lock_free(value: str, now: datetime, holder_exists: Callable[[str, str], bool]) -> bool:
    """Whether a node lock may be taken: none, unreadable, stale, or its pod is gone."""
    if not value:
        return True
    parts = value.split(",")
    if len(parts) != 3:
        return True
    try:
        taken = datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    except ValueError:
        return True
    if taken.tzinfo is None:
        taken = taken.replace(tzinfo=UTC)
    if now - taken > NODE_LOCK_EXPIRY:
        return True
    return not holder_exists(parts[1], parts[2])


class AdaptError(ValueError):
    """An allocation a vendor's device plugin cannot take (Koordinator fails PreBind)."""


#: The least memory a Cambricon dynamic sMLU and a MetaX sGPU are cut in.
_CAMBRICON_MEMORY_UNIT: Final = 256 * _MIB
_METAX_MEMORY_UNIT: Final = _MIB


def _core_and_memory(card: AllocatedDevice, unit: int) -> tuple[int, int]:
    """A card's compute (percent) and memory in ``unit``s; :class:`AdaptError` when it gives
    no compute or less memory than one unit."""
    if k.RESOURCE_GPU_CORE not in card.resources:
        raise AdaptError("gpu core resource is required")
    memory = card.resources.get_amount(k.RESOURCE_GPU_MEMORY)
    if memory < unit:
        raise AdaptError(f"gpu memory must not be less than {unit} bytes")
    return card.resources.get_amount(k.RESOURCE_GPU_CORE), memory // unit


def _cambricon(gpus: tuple[AllocatedDevice, ...], _model: str) -> dict[str, str]:
    if len(gpus) > 1:
        raise AdaptError("multiple gpu share is not supported on device side")
    (card,) = gpus
    core, slices = _core_and_memory(card, _CAMBRICON_MEMORY_UNIT)
    return {
        k.ANNOTATION_CAMBRICON_DSMLU_ASSIGNED: "false",
        k.ANNOTATION_CAMBRICON_DSMLU_PROFILE: f"{card.minor}_{core}_{slices}",
    }


def _huawei(gpus: tuple[AllocatedDevice, ...], model: str) -> dict[str, str]:
    first = gpus[0]
    if model == k.MODEL_ASCEND_310P3_300I_DUO:
        if first.template:
            raise AdaptError(f'model "{model}" does not support vNPU')
        cards = ",".join(f"Ascend310P-{d.minor}" for d in gpus)
        return {k.ANNOTATION_HUAWEI_ASCEND_310P: cards}
    if first.template:
        return {k.ANNOTATION_HUAWEI_NPU_CORE: f"{first.minor}-{first.template}"}
    return {k.ANNOTATION_HUAWEI_NPU_CORE: ",".join(str(d.minor) for d in gpus)}


def _metax(gpus: tuple[AllocatedDevice, ...], _model: str) -> dict[str, str]:
    devices = []
    for card in gpus:
        compute, vram = _core_and_memory(card, _METAX_MEMORY_UNIT)
        devices.append({"uuid": card.id, "compute": compute, "vRam": vram})
    return {k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED: _ENCODER.encode([devices]).decode()}


#: Vendor -> its device plugin's annotations for the GPUs given (and the node's model).
_VENDORS: Final[Mapping[str, Callable[[tuple[AllocatedDevice, ...], str], dict[str, str]]]] = {
    k.GPU_VENDOR_HUAWEI: _huawei,
    k.GPU_VENDOR_METAX: _metax,
    k.GPU_VENDOR_CAMBRICON: _cambricon,
}


def adapter_annotations(
    allocation: Allocation,
    *,
    vendor: str,
    model: str,
    node_name: str,
    now_ns: int,
    isolation_provider: str = "",
) -> AdapterOutput:
    """The vendor device-plugin annotations (and labels) for ``allocation`` on a node of
    ``vendor``/``model``: the bind time for any device, the rest for GPUs only; nothing
    without a device. :class:`AdaptError` (naming the vendor) for an allocation the vendor's
    device plugin cannot take."""
    if allocation.empty:
        return AdapterOutput()
    annotations = {k.ANNOTATION_BIND_TIMESTAMP: str(now_ns)}
    gpus = allocation.of(k.DEVICE_TYPE_GPU)
    if not gpus:
        return AdapterOutput(annotations=annotations)
    annotations[k.ANNOTATION_GPU_MINORS] = ",".join(str(d.minor) for d in gpus)
    labels: dict[str, str] = {}
    if isolation_provider == k.GPU_ISOLATION_PROVIDER_HAMI_CORE:
        labels[k.LABEL_HAMI_VGPU_NODE] = node_name
    if vendor == k.GPU_VENDOR_HUAWEI:
        annotations[k.ANNOTATION_HUAWEI_PREDICATE_TIME] = str(now_ns)
    adapt = _VENDORS.get(vendor)
    if adapt is not None:
        try:
            annotations.update(adapt(gpus, model))
        except AdaptError as err:
            raise AdaptError(
                f'failed to adapt for GPU device plugin of vendor "{vendor}": {err}'
            ) from None
    return AdapterOutput(
        annotations=annotations, labels=labels, node_lock=NODE_LOCKS.get(vendor, "")
    )
