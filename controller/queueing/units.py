"""What the admission engine knows of one QueueUnit, read once per object version.

:func:`unit_info` turns a QueueUnit into a :class:`UnitInfo`: its order key, its quota, its
pod sets with the request of one replica each (canonical integers), what is admitted and what
is still outstanding, and the amount its admissions charge to the quota. Everything the engine
decides on is here, so a unit is read once however often it is looked at.

* **Quota** (queue-spec §3): the label ``quota.scheduling.koordinator.sh/name``, else
  ``alibabacloud.com/quota-name``, else ``quota.scheduling.alibabacloud.com/name``; a unit
  without any is charged to the quota its namespace maps to (as a pod would be: a quota named
  like the namespace in that namespace, then the ``namespaces`` annotation), else to
  ``koordinator-default-quota``.
* **Preemptible**: label ``quota.scheduling.koordinator.sh/preemptible`` (or
  ``alibabacloud.com/preemptible``) ``"false"`` makes a unit non-preemptible.
* **Active**: ``spec.active`` unset or true, and no ``queue-suspend: "true"`` annotation.
* **Charge** (queue-spec §7.1, with the accounting fix): per admission, the larger of the
  replicas times the pod set's per-replica request and the admission's ``resources``; a legacy
  unit holding quota without admissions charges ``spec.resource`` (or ``spec.request``). Every
  holding unit also counts 1 of the pseudo resource ``kube-queue/max-jobs``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import msgspec

from apis import constants as k
from apis.caches import IdentityCache
from apis.core import PodSpec, pod_requests
from apis.queueing import QueueUnit, QueueUnitSpec
from apis.resources import ResourceList
from controller.queueing import phases

__all__ = [
    "MAX_JOBS",
    "PodSetInfo",
    "UnitInfo",
    "add_into",
    "same_for_engine",
    "scaled",
    "unit_info",
    "unit_key",
    "unit_quota_label",
]

MAX_JOBS: Final = k.RESOURCE_QUEUE_MAX_JOBS
_EPOCH: Final = 0.0
_NOTHING: Final[Mapping[str, int]] = {}

Vector = Mapping[str, int]


def add_into(total: dict[str, int], amounts: Vector, times: int = 1) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount * times


def scaled(amounts: Vector, times: int) -> dict[str, int]:
    return {name: amount * times for name, amount in amounts.items()}


@dataclass(frozen=True, slots=True)
class PodSetInfo:
    name: str
    count: int
    #: Fewest replicas the pod set may start with (``minCount``; ``count`` when unset).
    min_count: int
    #: Request of one replica.
    per_replica: ResourceList
    #: ``per_replica`` as a sorted tuple (a hashable key).
    request_key: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True, eq=False)
class UnitInfo:
    """One QueueUnit as the engine sees it (immutable; rebuilt when the object changes)."""

    obj: QueueUnit
    key: tuple[str, str]
    uid: str
    priority: int
    created: float
    quota: str
    #: Queue named by ``koord-queue/queue-name`` (either prefix); "" when none.
    queue_hint: str
    preemptible: bool
    active: bool
    phase: str
    pod_sets: tuple[PodSetInfo, ...]
    #: Pod set -> replicas admitted.
    admitted: Mapping[str, int]
    #: Pod set -> replicas still to admit (pod sets fully admitted are absent).
    outstanding: Mapping[str, int]
    #: What the unit holds now (empty when it holds nothing); never changed after reading.
    charge: Mapping[str, int]
    #: The whole job's request (every replica), for the quota's demand.
    demand: Mapping[str, int]
    holds: bool
    finished: bool
    #: Admitted replicas all bound (or nothing admitted).
    all_running: bool
    #: What every filter's request depends on: per pod set (count, minCount, admitted,
    #: per-replica request), in order (names aside).
    shape: tuple[tuple[int, int, int, tuple[tuple[str, int], ...]], ...] = ()

    @property
    def namespace(self) -> str:
        return self.key[0]

    @property
    def name(self) -> str:
        return self.key[1]

    @property
    def order(self) -> tuple[int, float, str, str]:
        """Priority first (higher first), then creation time, then namespace/name."""
        return (-self.priority, self.created, self.key[0], self.key[1])

    def request_of(self, replicas: Mapping[str, int]) -> dict[str, int]:
        """The request of ``replicas`` (pod set -> count)."""
        total: dict[str, int] = {}
        for pod_set in self.pod_sets:
            count = replicas.get(pod_set.name, 0)
            if count:
                add_into(total, pod_set.per_replica, count)
        return total


def unit_key(unit: QueueUnit) -> tuple[str, str]:
    return (unit.metadata.namespace or "default", unit.metadata.name)


def unit_quota_label(unit: QueueUnit) -> str:
    labels = unit.metadata.labels
    return (
        labels.get(k.LABEL_QUOTA_NAME)
        or labels.get(k.LABEL_QUOTA_NAME_ALIBABACLOUD)
        or labels.get(k.LABEL_QUOTA_NAME_TREE)
        or ""
    )


def _first(mapping: Mapping[str, str], *keys: str) -> str:
    for key in keys:
        value = mapping.get(key)
        if value:
            return value
    return ""


def _template_request(spec: PodSpec) -> ResourceList:
    """A replica's request; a container without requests asks for its limits."""
    if any(not c.resources.requests and c.resources.limits for c in spec.containers):
        containers = tuple(
            msgspec.structs.replace(
                c, resources=msgspec.structs.replace(c.resources, requests=c.resources.limits)
            )
            if not c.resources.requests and c.resources.limits
            else c
            for c in spec.containers
        )
        spec = msgspec.structs.replace(spec, containers=containers)
    return pod_requests(spec)


_REQUEST_CACHE: IdentityCache[PodSpec, ResourceList] = IdentityCache(
    "queueing.template-requests",
    limit=65_536,
    contract="a unit's pod template spec -> what one replica requests: the spec is immutable",
)


def _per_replica(spec: PodSpec) -> ResourceList:
    cached = _REQUEST_CACHE.get(spec)
    return cached if cached is not None else _REQUEST_CACHE.put(spec, _template_request(spec))


def _timestamp(value: datetime | None) -> float:
    return value.timestamp() if value is not None else _EPOCH


def _pod_sets(spec: QueueUnitSpec) -> tuple[PodSetInfo, ...]:
    if spec.pod_set:
        return tuple(
            PodSetInfo(
                name=p.name,
                count=max(0, p.count),
                min_count=max(1, min(p.count, p.min_count)) if p.min_count else max(0, p.count),
                per_replica=(request := _per_replica(p.template.spec)),
                request_key=tuple(sorted(request.items())),
            )
            for p in spec.pod_set
        )
    legacy = spec.resource or spec.request
    return (
        PodSetInfo(
            name=k.QUEUE_DEFAULT_PODSET,
            count=1,
            min_count=1,
            per_replica=legacy,
            request_key=tuple(sorted(legacy.items())),
        ),
    )


def same_for_engine(before: QueueUnit, after: QueueUnit) -> bool:
    """Nothing the engine reads differs (a write of a message or conditions only)."""
    if before is after:
        return True
    b, a = before.status, after.status
    return (
        (before.spec is after.spec or before.spec == after.spec)
        and before.metadata.labels == after.metadata.labels
        and before.metadata.annotations == after.metadata.annotations
        and before.metadata.creation_timestamp == after.metadata.creation_timestamp
        and b.phase == a.phase
        and (b.admissions is a.admissions or b.admissions == a.admissions)
        and b.last_allocate_time == a.last_allocate_time
        and b.requeue_state == a.requeue_state
    )


def unit_info(unit: QueueUnit, quota: str, previous: UnitInfo | None = None) -> UnitInfo:
    """Read ``unit``, charged to ``quota`` (the caller resolves it, see the module docs).

    ``previous`` (the same unit's last reading) lends its pod sets when the spec is the same.
    """
    meta = unit.metadata
    spec = unit.spec
    status = unit.status
    pod_sets = (
        previous.pod_sets if previous is not None and previous.obj.spec is spec else _pod_sets(spec)
    )
    admitted: dict[str, int] = {}
    charge: dict[str, int] = {}
    by_name = {p.name: p for p in pod_sets}
    for admission in status.admissions:
        admitted[admission.name] = admitted.get(admission.name, 0) + admission.replicas
        pod_set = by_name.get(admission.name)
        amounts = scaled(pod_set.per_replica, admission.replicas) if pod_set is not None else {}
        for name, amount in admission.resources.items():
            if amount > amounts.get(name, 0):
                amounts[name] = amount
        add_into(charge, amounts)
    phase = status.phase
    finished = phase in phases.FINISHED_PHASES
    holds = not finished and (bool(status.admissions) or phase in phases.ASSIGNED_PHASES)
    if holds and not status.admissions:
        # A legacy unit past admission without admissions holds its whole request.
        add_into(charge, spec.resource or spec.request)
    if holds:
        charge[MAX_JOBS] = 1
    outstanding = (
        {}
        if holds and not status.admissions  # a legacy unit past admission is satisfied
        else {
            p.name: p.count - admitted.get(p.name, 0)
            for p in pod_sets
            if p.count > admitted.get(p.name, 0)
        }
    )
    demand: dict[str, int] = {}
    for pod_set in pod_sets:
        add_into(demand, pod_set.per_replica, max(pod_set.count, admitted.get(pod_set.name, 0)))
    for name, amount in charge.items():
        if amount > demand.get(name, 0):
            demand[name] = amount
    if not finished:
        demand[MAX_JOBS] = 1
    annotations = meta.annotations
    labels = meta.labels
    preemptible = _first(labels, k.LABEL_QUOTA_PREEMPTIBLE, k.LABEL_PREEMPTIBLE_ALIBABACLOUD)
    return UnitInfo(
        obj=unit,
        key=unit_key(unit),
        uid=meta.uid or f"{meta.namespace or 'default'}/{meta.name}",
        priority=spec.priority or 0,
        created=_timestamp(meta.creation_timestamp),
        quota=quota,
        queue_hint=_first(annotations, k.ANNOTATION_QUEUE_NAME, k.ANNOTATION_QUEUE_NAME_LEGACY),
        preemptible=preemptible != "false",
        active=spec.active is not False
        and annotations.get(k.ANNOTATION_QUEUEUNIT_SUSPEND) != "true",
        phase=phase,
        pod_sets=pod_sets,
        admitted=admitted,
        outstanding=outstanding,
        charge=charge,
        demand=demand if not finished else _NOTHING,
        holds=holds,
        finished=finished,
        all_running=all(a.running >= a.replicas for a in status.admissions),
        shape=tuple(
            (p.count, p.min_count, admitted.get(p.name, 0), p.request_key) for p in pod_sets
        ),
    )
