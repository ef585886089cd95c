"""``scheduling.koordinator.sh/v1alpha1``: Device, Reservation, PodMigrationJob (cluster-scoped).

Field names and types follow Koordinator's CRD schemas. Fields the schema marks required have no
default here either, so an object missing them fails to decode (as the API server would refuse
it) and an object we build always carries them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from apis.core import PodTemplateSpec, Taint
from apis.duration import Duration
from apis.meta import Condition, LabelSelector, Model, Object, ObjectMeta, ObjectReference
from apis.resources import ResourceList

__all__ = [
    "DEFAULT_RESERVATION_TTL",
    "DeleteOptions",
    "Device",
    "DeviceAllocation",
    "DeviceAllocationItem",
    "DeviceCondition",
    "DeviceInfo",
    "DeviceSpec",
    "DeviceStatus",
    "DeviceTopology",
    "PodMigrationJob",
    "PodMigrationJobPreemptedReservation",
    "PodMigrationJobSpec",
    "PodMigrationJobStatus",
    "PodMigrationReservationOptions",
    "PreAllocationPolicy",
    "Preconditions",
    "Reservation",
    "ReservationControllerReference",
    "ReservationOwner",
    "ReservationSpec",
    "ReservationStatus",
    "ReservationTemplateSpec",
    "VirtualFunction",
    "VirtualFunctionGroup",
]

_NO_RESOURCES = ResourceList()

# --- Device ------------------------------------------------------------------------------------


class DeviceTopology(Model):
    #: CPU socket of the device; -1 when unknown.
    socket_id: int = msgspec.field(name="socketID")
    #: NUMA node of the device.
    node_id: int = msgspec.field(name="nodeID")
    #: PCIe root / switch the device hangs off (``pci0000:3a``).
    pcie_id: str = msgspec.field(name="pcieID")
    #: PCI address ``dddd:bb:dd.f``.
    bus_id: str = msgspec.field(default="", name="busID")


class VirtualFunction(Model):
    minor: int
    bus_id: str = msgspec.field(default="", name="busID")


class VirtualFunctionGroup(Model):
    labels: dict[str, str] = {}
    vfs: tuple[VirtualFunction, ...] = ()


class DeviceCondition(Model):
    """``meta/v1`` Condition as the Device CRD has it: every field but one required.

    Kept apart from :class:`apis.meta.Condition` so that an empty ``message`` is still written
    out (the schema requires the key) and an empty ``reason`` is refused.
    """

    #: ``Healthy``.
    type: str
    #: ``True``, ``False`` or ``Unknown``.
    status: str
    observed_generation: int | None = None
    last_transition_time: datetime
    reason: Annotated[str, msgspec.Meta(min_length=1)]
    message: str


class DeviceInfo(Model):
    """One device of a node (``spec.devices[]``)."""

    #: The CRD defaults it to false; it is required here so it is always written out.
    health: bool
    #: ``gpu``, ``fpga``, ``rdma`` (NPUs, MLUs and MetaX GPUs are all reported as ``gpu``).
    type: str = ""
    labels: dict[str, str] = {}
    #: Device UUID (RDMA: the PCI address).
    id: str = ""
    minor: int | None = None
    module_id: int | None = msgspec.field(default=None, name="moduleID")
    resources: ResourceList = _NO_RESOURCES
    topology: DeviceTopology | None = None
    vf_groups: tuple[VirtualFunctionGroup, ...] = ()
    conditions: tuple[DeviceCondition, ...] = ()


class DeviceSpec(Model):
    devices: tuple[DeviceInfo, ...] = ()


class DeviceAllocationItem(Model):
    name: str = ""
    namespace: str = ""
    uuid: str = ""
    minors: tuple[int, ...] = ()


class DeviceAllocation(Model):
    type: str = ""
    entries: tuple[DeviceAllocationItem, ...] = ()


class DeviceStatus(Model):
    allocations: tuple[DeviceAllocation, ...] = ()


class Device(Object):
    """The devices of one node (the object is named after the node)."""

    api_version: str = "scheduling.koordinator.sh/v1alpha1"
    kind: str = "Device"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeviceSpec = msgspec.field(default_factory=DeviceSpec)
    status: DeviceStatus = msgspec.field(default_factory=DeviceStatus)

    def devices_of(self, type_: str) -> tuple[DeviceInfo, ...]:
        return tuple(d for d in self.spec.devices if d.type == type_)


# --- Reservation -------------------------------------------------------------------------------

#: ``spec.ttl`` when a Reservation gives none (the CRD default).
DEFAULT_RESERVATION_TTL = Duration.parse("24h")


class ReservationControllerReference(Model):
    """An owner reference (plus ``namespace``) a consuming pod's controller must match."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None
    namespace: str = ""


class ReservationOwner(Model):
    """Who may consume a reservation: the set fields of one owner are ANDed, owners are ORed."""

    object: ObjectReference | None = None
    controller: ReservationControllerReference | None = None
    label_selector: LabelSelector | None = None


class PreAllocationPolicy(Model):
    #: ``Default`` (owners' label selectors find candidates) or ``Cluster``.
    mode: str = ""
    enable_multiple: bool = False


class ReservationSpec(Model):
    #: The pod shape to reserve; ``template.spec.schedulerName`` picks the scheduler.
    template: PodTemplateSpec
    owners: tuple[ReservationOwner, ...]
    #: Expiry after creation; ``0s`` disables expiry; unset means the CRD default (24h).
    ttl: Duration | None = None
    expires: datetime | None = None
    pre_allocation: bool = False
    pre_allocation_policy: PreAllocationPolicy | None = None
    #: Only the first owner may consume it; unset means true.
    allocate_once: bool | None = None
    #: ``""`` (deprecated default), ``Aligned`` or ``Restricted``.
    allocate_policy: str = ""
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()

    @property
    def effective_ttl(self) -> Duration:
        return DEFAULT_RESERVATION_TTL if self.ttl is None else self.ttl

    @property
    def effective_allocate_once(self) -> bool:
        return True if self.allocate_once is None else self.allocate_once


class ReservationStatus(Model):
    #: ``Pending`` (also when empty), ``Available``, ``Succeeded``, ``Failed``, ``Waiting``.
    phase: str = ""
    conditions: tuple[Condition, ...] = ()
    current_owners: tuple[ObjectReference, ...] = ()
    node_name: str = ""
    allocatable: ResourceList = _NO_RESOURCES
    allocated: ResourceList = _NO_RESOURCES


class Reservation(Object):
    api_version: str = "scheduling.koordinator.sh/v1alpha1"
    kind: str = "Reservation"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ReservationSpec
    status: ReservationStatus = msgspec.field(default_factory=ReservationStatus)


_NO_META = ObjectMeta()


class ReservationTemplateSpec(Model):
    metadata: ObjectMeta = _NO_META
    spec: ReservationSpec


# --- PodMigrationJob ---------------------------------------------------------------------------


class Preconditions(Model):
    resource_version: str | None = None
    uid: str | None = None


class DeleteOptions(Model):
    """``meta/v1`` DeleteOptions used when the job evicts the pod."""

    api_version: str = ""
    kind: str = ""
    grace_period_seconds: int | None = None
    preconditions: Preconditions | None = None
    orphan_dependents: bool | None = None
    propagation_policy: str | None = None
    dry_run: tuple[str, ...] = ()
    ignore_store_read_error_with_cluster_breaking_potential: bool | None = None


class PodMigrationReservationOptions(Model):
    #: An existing reservation to migrate into (instead of creating one).
    reservation_ref: ObjectReference | None = None
    template: ReservationTemplateSpec | None = None
    preemption_options: dict[str, Any] | None = None


class PodMigrationJobSpec(Model):
    pod_ref: ObjectReference
    paused: bool = False
    ttl: Duration | None = None
    #: ``ReservationFirst`` or ``EvictDirectly``.
    mode: str = ""
    reservation_options: PodMigrationReservationOptions | None = None
    delete_options: DeleteOptions | None = None


class PodMigrationJobPreemptedReservation(Model):
    namespace: str = ""
    name: str = ""
    node_name: str = ""
    phase: str = ""
    preempted_pod_ref: ObjectReference | None = None
    pods_ref: tuple[ObjectReference, ...] = ()


class PodMigrationJobStatus(Model):
    #: ``Pending``, ``Running``, ``Succeeded``, ``Failed``, ``Aborted``.
    phase: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    conditions: tuple[Condition, ...] = ()
    node_name: str = ""
    #: The new pod that replaced the migrated one.
    pod_ref: ObjectReference | None = None
    preempted_pods_ref: tuple[ObjectReference, ...] = ()
    preempted_pods_reservation: tuple[PodMigrationJobPreemptedReservation, ...] = ()


class PodMigrationJob(Object):
    api_version: str = "scheduling.koordinator.sh/v1alpha1"
    kind: str = "PodMigrationJob"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodMigrationJobSpec
    status: PodMigrationJobStatus = msgspec.field(default_factory=PodMigrationJobStatus)
