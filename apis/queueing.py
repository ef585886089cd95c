"""``scheduling.x-k8s.io/v1alpha1``: Queue and QueueUnit (Koord-Queue, both namespaced).

A QueueUnit wraps one job (``spec.consumerRef``) waiting for admission; a Queue orders the
units mapped to it by its policy. ``spec.podSet`` (singular on the wire) holds Kueue-shaped
pod sets. The v1.8 release notes show a Queue under ``scheduling.koordinator.sh/v1alpha1``;
the catalog accepts that apiVersion as an alias.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from apis.core import PodTemplateSpec, Toleration
from apis.meta import Condition, LabelSelector, Model, Object, ObjectMeta, ObjectReference
from apis.resources import ResourceList

__all__ = [
    "Admission",
    "AdmissionCheckState",
    "PodSet",
    "PodSetUpdate",
    "PodState",
    "Queue",
    "QueueAdmissionCheck",
    "QueueItemDetail",
    "QueueSpec",
    "QueueStatus",
    "QueueUnit",
    "QueueUnitSpec",
    "QueueUnitStatus",
    "ReclaimState",
    "ReclaimablePod",
    "RequeueState",
]

_NO_RESOURCES = ResourceList()

# --- Queue -------------------------------------------------------------------------------------


class QueueAdmissionCheck(Model):
    name: str
    #: Matched against the QueueUnit's labels; unset matches every unit.
    label_selector: LabelSelector | None = None


class QueueSpec(Model):
    #: ``Priority`` (the default), ``Block`` or ``Intelligent``.
    queue_policy: str = ""
    priority: int | None = None
    priority_class_name: str = ""
    admission_checks: tuple[QueueAdmissionCheck, ...] = ()


class QueueItemDetail(Model):
    name: str = ""
    namespace: str = ""
    priority: int = 0
    #: 1-based place in the sorted queue.
    position: int = 0


class QueueStatus(Model):
    #: Snapshot of the queue order, keyed by sub-queue (``active``).
    queue_item_details: dict[str, tuple[QueueItemDetail, ...]] = {}


class Queue(Object):
    api_version: str = "scheduling.x-k8s.io/v1alpha1"
    kind: str = "Queue"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: QueueSpec = msgspec.field(default_factory=QueueSpec)
    status: QueueStatus = msgspec.field(default_factory=QueueStatus)


# --- QueueUnit ---------------------------------------------------------------------------------


class PodSet(Model):
    """A group of identical pods of a job (Kueue ``PodSet``)."""

    name: str
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    count: int = 0
    #: Fewer pods the job can run with (partial admission); unset means ``count``.
    min_count: int | None = None
    topology_request: dict[str, Any] | None = None


class QueueUnitSpec(Model):
    consumer_ref: ObjectReference | None = None
    priority: int | None = None
    #: Overwritten with the actual queue at dequeue.
    queue: str = ""
    #: Total request of the job (sum over replicas).
    resource: ResourceList = _NO_RESOURCES
    pod_set: tuple[PodSet, ...] = msgspec.field(default=(), name="podSet")
    priority_class_name: str = ""
    #: Legacy total request, used when ``podSet`` is empty.
    request: ResourceList = _NO_RESOURCES
    #: Unset means active.
    active: bool | None = None
    maximum_execution_time_seconds: int | None = None


class PodSetUpdate(Model):
    name: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    node_selector: dict[str, str] = {}
    tolerations: tuple[Toleration, ...] = ()


class AdmissionCheckState(Model):
    name: str
    #: ``Pending``, ``Ready``, ``Retry``, ``Rejected``.
    state: str
    last_transition_time: datetime | None = None
    message: str = ""
    pod_set_updates: tuple[PodSetUpdate, ...] = ()
    retry_count: int | None = None
    requeue_after_seconds: int | None = None


class ReclaimState(Model, omit_defaults=False):
    #: Written even when 0: Koord-Queue's CRD requires it.
    replicas: int = 0


class Admission(Model, omit_defaults=False):
    """What one pod set holds: admitted replicas, bound replicas, pending reclaim.

    ``replicas``, ``running`` and ``resources`` are written even when 0 or empty (Koord-Queue's
    CRD requires the first two); ``reclaim_state`` is left out unless set."""

    name: str
    replicas: int = 0
    resources: ResourceList = _NO_RESOURCES
    running: int = 0
    reclaim_state: ReclaimState | msgspec.UnsetType = msgspec.UNSET


class PodState(Model):
    running: int = 0
    pending: int = 0


class RequeueState(Model):
    count: int | None = None
    requeue_at: datetime | None = None


class ReclaimablePod(Model):
    name: str
    count: int = 0


class QueueUnitStatus(Model):
    #: ``Enqueued``, ``Reserved``, ``Dequeued``, ``Running``, ``Succeed``, ``Failed``,
    #: ``SchedReady``, ``SchedSucceed``, ``SchedFailed``, ``TimeoutBackoff``, ``Preempted``.
    phase: str = ""
    attempts: int = 0
    message: str = ""
    last_update_time: datetime | None = None
    admission_checks: tuple[AdmissionCheckState, ...] = ()
    admissions: tuple[Admission, ...] = ()
    pod_state: PodState | None = None
    last_allocate_time: datetime | None = None
    conditions: tuple[Condition, ...] = ()
    requeue_state: RequeueState | None = None
    reclaimable_pods: tuple[ReclaimablePod, ...] = ()
    accumulated_past_execution_time_seconds: int | None = None


class QueueUnit(Object):
    api_version: str = "scheduling.x-k8s.io/v1alpha1"
    kind: str = "QueueUnit"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: QueueUnitSpec = msgspec.field(default_factory=QueueUnitSpec)
    status: QueueUnitStatus = msgspec.field(default_factory=QueueUnitStatus)
