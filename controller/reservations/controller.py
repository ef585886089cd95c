"""The reservation lifecycle controller (controller-spec §1.2), as a control loop.

Each pass looks at every Reservation (terminal ones only for garbage collection):

1. ``Succeeded`` and ``Failed`` reservations are final.
2. Expiry: unless ``ttl`` is explicitly ``0s`` (which disables expiry, ``expires`` included),
   a reservation whose ``expires`` has passed, or whose age exceeds ``ttl`` (the CRD's default
   of 24 h when unset; with both set, whichever comes first, as Koordinator checks both),
   becomes ``Failed`` with ``Ready=False``, reason ``Expired``. An
   assigned reservation whose Node no longer exists fails the same way.
3. Otherwise, for an assigned reservation, ``status.currentOwners`` (sorted by uid) and
   ``status.allocated`` (their requests masked to ``status.allocatable``) are recomputed from
   the pods on its node whose ``reservation-allocated`` annotation carries its uid; when they
   changed they are written, and an allocate-once reservation that now has an owner becomes
   ``Succeeded`` (``Ready=False``, reason ``Succeeded``).
4. The loop asks to run again within ``clamp(time until the nearest expiry, 3 s, 15 s)``.

Garbage collection (every ``gcIntervalSeconds`` unless disabled) deletes a ``Failed``
reservation whose Expired condition changed more than ``gcDurationSeconds`` ago, a
``Succeeded`` one whose Succeeded condition was probed that long ago, and either kind whose
node is gone.

Settings: the ``ReservationArgs`` of the scheduler configuration in force (the Reservation
plugin's ``pluginConfig`` in ``koord-scheduler-config``, as Koordinator's controller runs
inside koord-scheduler with them), followed through the
:class:`~controller.scheduler.config.ConfigInForce` the scheduler loop follows; a controller
built with ``args`` keeps those.

Decisions taken where Koordinator's behaviour is an accident (§9 item 2):

- Koordinator only looks at assigned reservations, so one that was never scheduled is never
  expired and never collected. Here a Pending reservation past its expiry fails too (reason
  ``Expired``), and is then collected like any other; ``ReservationController(
  expire_pending=False)`` restores the original behaviour.
- Pods that finished (phase ``Succeeded``/``Failed``) hold nothing and are not owners: what
  they used goes back to the reservation.

The optional clean-up of the ``reservation-allocated`` annotation of a deleted reservation's
owners (Koordinator's ``CleanExpiredReservationAllocated`` gate, off by default) is not done.

:func:`sync` and :func:`garbage` are pure; :class:`ReservationController` reads a snapshot and
writes through the store. :func:`mark_available` and :func:`mark_unschedulable` are the status
changes the scheduler makes when it binds a reservation or fails to place it.
:func:`metric_samples` gives the values of the reservation metrics
(§7.1) for the metrics endpoint to export.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec

from apis.core import Node, Pod, pod_requests
from apis.kinds import default_registry
from apis.meta import Condition, ObjectReference
from apis.resources import ResourceList
from apis.scheduling import Reservation
from controller.errors import StoreError
from controller.events import EventRecorder
from controller.mutations import whole_seconds
from controller.reservations import AnnotationError
from controller.reservations.accounting import masked_requests
from controller.reservations.affinity import parse_allocated
from controller.reservations.args import ReservationArgs
from controller.reservations.reserve_pod import allocatable_at_bind
from controller.scheduler.config import ConfigInForce
from controller.scheduler.profile import KOORD_SCHEDULER
from controller.store.assumed import Outbox
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops lists this loop: no import back at run time
    from controller.loops import LoopContext
    from controller.store.cluster import Cluster
    from controller.store.snapshots import Snapshot

_RESERVATION_KIND = default_registry().for_type(Reservation)

__all__ = [
    "MAX_REQUEUE_SECONDS",
    "MIN_REQUEUE_SECONDS",
    "MetricSample",
    "ReservationController",
    "ReservationNotActive",
    "expiry_of",
    "garbage",
    "mark_available",
    "mark_unschedulable",
    "metric_samples",
    "owners_on_node",
    "sync",
]

log = logging.getLogger(__name__)

MIN_REQUEUE_SECONDS: Final = 3.0
MAX_REQUEUE_SECONDS: Final = 15.0

PENDING: Final = "Pending"
AVAILABLE: Final = "Available"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
_TERMINAL: Final = frozenset({SUCCEEDED, FAILED})

READY: Final = "Ready"
REASON_EXPIRED: Final = "Expired"
REASON_SUCCEEDED: Final = "Succeeded"
MSG_EXPIRED: Final = "expired"
MSG_NODE_DELETED: Final = "node deleted"
MSG_SUCCEEDED: Final = "reservation allocated to its owner"

_replace = msgspec.structs.replace


def expiry_of(reservation: Reservation) -> datetime | None:
    """When ``reservation`` expires; None when it never does (``ttl: 0s``)."""
    spec = reservation.spec
    if spec.ttl is not None and spec.ttl.nanoseconds == 0:
        return None
    created = reservation.metadata.creation_timestamp
    by_ttl = (
        created + timedelta(microseconds=spec.effective_ttl.nanoseconds // 1000)
        if created is not None
        else None
    )
    if spec.expires is None:
        return by_ttl
    return spec.expires if by_ttl is None else min(spec.expires, by_ttl)


def _set_condition(
    conditions: Sequence[Condition], *, status: str, reason: str, message: str, now: datetime
) -> tuple[Condition, ...]:
    """``conditions`` with the Ready condition set (transition time kept if status is)."""
    old = next((c for c in conditions if c.type == READY), None)
    changed = old is None or old.status != status
    ready = Condition(
        type=READY,
        status=status,
        reason=reason,
        message=message,
        last_probe_time=now,
        last_transition_time=now if changed or old is None else old.last_transition_time,
    )
    if old is None:
        return (*conditions, ready)
    return tuple(ready if c.type == READY else c for c in conditions)


def _finish(r: Reservation, phase: str, reason: str, message: str, now: datetime) -> Reservation:
    status = r.status
    conditions = _set_condition(
        status.conditions, status="False", reason=reason, message=message, now=now
    )
    return _replace(r, status=_replace(status, phase=phase, conditions=conditions))


def owners_on_node(reservation: Reservation, pods: Iterable[Pod]) -> list[Pod]:
    """The live pods on the reservation's node that consume it, sorted by uid."""
    uid = reservation.metadata.uid
    node = reservation.status.node_name
    owners: list[Pod] = []
    for pod in pods:
        if pod.spec.node_name != node or pod.is_terminated:
            continue
        try:
            allocated = parse_allocated(pod)
        except AnnotationError:
            continue
        if allocated is not None and allocated.uid == uid:
            owners.append(pod)
    owners.sort(key=lambda p: p.metadata.uid)
    return owners


@dataclass(frozen=True, slots=True)
class SyncResult:
    #: The reservation to write, or None when it is unchanged.
    updated: Reservation | None
    #: Seconds until this reservation wants to be looked at again (None: only on changes).
    requeue: float | None


def _requeue(expiry: datetime | None, now: datetime) -> float | None:
    if expiry is None:
        return None
    left = (expiry - now).total_seconds()
    return min(max(left, MIN_REQUEUE_SECONDS), MAX_REQUEUE_SECONDS)


def sync(
    reservation: Reservation,
    *,
    now: datetime,
    node_exists: bool,
    pods: Iterable[Pod] = (),
    expire_pending: bool = True,
) -> SyncResult:
    """One reservation's next state. ``pods``: candidates for its owners (any node)."""
    r = reservation
    status = r.status
    if status.phase in _TERMINAL:
        return SyncResult(None, None)
    now = whole_seconds(now)
    expiry = expiry_of(r)
    expired = expiry is not None and now > expiry
    if not status.node_name:
        if expire_pending and expired:
            return SyncResult(_finish(r, FAILED, REASON_EXPIRED, MSG_EXPIRED, now), None)
        return SyncResult(None, _requeue(expiry, now) if expire_pending else None)
    if expired:
        return SyncResult(_finish(r, FAILED, REASON_EXPIRED, MSG_EXPIRED, now), None)
    if not node_exists:
        return SyncResult(_finish(r, FAILED, REASON_EXPIRED, MSG_NODE_DELETED, now), None)
    owners = owners_on_node(r, pods)
    refs = tuple(
        ObjectReference(namespace=p.metadata.namespace, name=p.metadata.name, uid=p.metadata.uid)
        for p in owners
    )
    allocated = ResourceList.total(
        masked_requests(pod_requests(p), status.allocatable) for p in owners
    )
    requeue = _requeue(expiry, now)
    if refs == status.current_owners and allocated == status.allocated:
        return SyncResult(None, requeue)
    updated = _replace(r, status=_replace(status, current_owners=refs, allocated=allocated))
    if r.spec.effective_allocate_once and refs:
        return SyncResult(_finish(updated, SUCCEEDED, REASON_SUCCEEDED, MSG_SUCCEEDED, now), None)
    return SyncResult(updated, requeue)


def _collectable_since(r: Reservation) -> datetime | None:
    """When the terminal condition of ``r`` started counting towards collection."""
    ready = next((c for c in r.status.conditions if c.type == READY), None)
    if ready is None:
        return None
    if r.status.phase == FAILED and ready.reason == REASON_EXPIRED:
        return ready.last_transition_time
    if r.status.phase == SUCCEEDED and ready.reason == REASON_SUCCEEDED:
        return ready.last_probe_time
    return None


def garbage(
    reservation: Reservation, *, now: datetime, node_exists: bool, gc_duration: timedelta
) -> datetime | None:
    """When ``reservation`` may be deleted (at or before ``now``: delete it); None: never."""
    r = reservation
    if r.status.phase not in _TERMINAL:
        return None
    if r.status.node_name and not node_exists:
        return now
    since = _collectable_since(r)
    return None if since is None else since + gc_duration


# --- transitions the scheduler applies (§1.2) ------------------------------------------------

SCHEDULED: Final = "Scheduled"
REASON_SCHEDULED: Final = "Scheduled"
REASON_AVAILABLE: Final = "Available"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
MSG_NOT_ACTIVE: Final = "reservation is not active"


class ReservationNotActive(Exception):  # noqa: N818 - reads as the scheduler says it
    """Binding a reservation that already failed."""

    def __init__(self) -> None:
        super().__init__(MSG_NOT_ACTIVE)


def mark_available(reservation: Reservation, node_name: str, now: datetime) -> Reservation:
    """``reservation`` bound to ``node_name`` (the Reservation plugin's Bind).

    ``status.allocatable`` becomes the template's requests with the resize annotation applied
    (an unparsable annotation raises :class:`~controller.reservations.AnnotationError`), and the
    conditions exactly ``Scheduled=True`` and ``Ready=True`` (reason ``Available``).
    """
    if reservation.status.phase == FAILED:
        raise ReservationNotActive
    now = whole_seconds(now)
    conditions = (
        Condition(
            type=SCHEDULED,
            status="True",
            reason=REASON_SCHEDULED,
            last_probe_time=now,
            last_transition_time=now,
        ),
        Condition(
            type=READY,
            status="True",
            reason=REASON_AVAILABLE,
            last_probe_time=now,
            last_transition_time=now,
        ),
    )
    status = _replace(
        reservation.status,
        phase=AVAILABLE,
        node_name=node_name,
        allocatable=allocatable_at_bind(reservation),
        conditions=conditions,
    )
    return _replace(reservation, status=status)


def mark_unschedulable(reservation: Reservation, message: str, now: datetime) -> Reservation:
    """``reservation`` after a failed scheduling attempt: ``Scheduled=False``, reason
    ``Unschedulable``, the fit error as message; when already ``Scheduled=True`` only its
    ``lastProbeTime`` moves."""
    now = whole_seconds(now)
    status = reservation.status
    old = next((c for c in status.conditions if c.type == SCHEDULED), None)
    if old is not None and old.status == "True":
        new = _replace(old, last_probe_time=now)
    else:
        new = Condition(
            type=SCHEDULED,
            status="False",
            reason=REASON_UNSCHEDULABLE,
            message=message,
            last_probe_time=now,
            last_transition_time=(
                old.last_transition_time if old is not None and old.last_transition_time else now
            ),
        )
    if old is None:
        conditions = (*status.conditions, new)
    else:
        conditions = tuple(new if c.type == SCHEDULED else c for c in status.conditions)
    return _replace(reservation, status=_replace(status, conditions=conditions))


class ReservationController:
    """The ``reservations`` control loop."""

    name = "reservations"

    def __init__(self, args: ReservationArgs | None = None, *, expire_pending: bool = True) -> None:
        self.args = args or ReservationArgs()
        self.expire_pending = expire_pending
        self._next_gc: datetime | None = None
        #: the reservations this loop wrote, laid over its snapshots until they show them
        self._outbox = Outbox(kinds=(_RESERVATION_KIND,))
        #: a write failed: look again after MIN_REQUEUE_SECONDS
        self._retry = False
        #: The scheduler configuration followed (None: ``args`` were given).
        self._config = ConfigInForce() if args is None else None
        self._generation = 0
        self._recorder: tuple[Cluster, EventRecorder] | None = None

    def share_configuration(self, shared: ConfigInForce) -> None:
        """Follow ``shared``, the configuration the scheduler loop follows (a controller built
        with ``args`` keeps them)."""
        if self._config is not None:
            self._config, self._generation = shared, 0

    def _follow(self, ctx: LoopContext, snapshot: Snapshot) -> None:
        """Take the Reservation args of a new scheduler configuration."""
        if self._config is None:
            return
        store = ctx.store
        if self._recorder is None or self._recorder[0] is not store:
            # A refused configuration is reported by koord-scheduler, whichever loop sees it.
            self._recorder = (store, EventRecorder(store, component=KOORD_SCHEDULER, clock=ctx.now))
        config = self._config.poll(snapshot, store.registry, self._recorder[1])
        if config is None or self._generation == self._config.generation:
            return
        self._generation = self._config.generation
        args = config.plugin_args("Reservation")
        self.args = args if isinstance(args, ReservationArgs) else ReservationArgs()
        self._next_gc = None
        log.info(
            "reservation controller: gcDurationSeconds %s, gcIntervalSeconds %s, GC %s",
            self.args.effective_gc_duration_seconds,
            self.args.gc_interval_seconds,
            "off" if self.args.disable_garbage_collection else "on",
        )

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        registry = store.registry
        now = ctx.now()
        self._retry = False  # a result arriving now may set it
        snapshot = self._outbox.over(store.snapshot())
        self._follow(ctx, snapshot)
        reservations = [
            r
            for r in snapshot.objects(registry.for_type(Reservation))
            if isinstance(r, Reservation)
        ]
        if not reservations:
            return None
        nodes = {n.metadata.name for n in snapshot.objects(registry.for_type(Node))}
        pods_by_node: dict[str, list[Pod]] = {}
        for pod in snapshot.objects(registry.for_type(Pod)):
            if isinstance(pod, Pod) and pod.spec.node_name:
                pods_by_node.setdefault(pod.spec.node_name, []).append(pod)
        waits: list[float] = []
        updates: list[Reservation] = []
        for r in reservations:
            node = r.status.node_name
            result = sync(
                r,
                now=now,
                node_exists=node in nodes,
                pods=pods_by_node.get(node, ()),
                expire_pending=self.expire_pending,
            )
            if result.requeue is not None:
                waits.append(result.requeue)
            if result.updated is not None:
                updates.append(result.updated)
        self._outbox.send(
            store,
            [Write.update_status(r) for r in updates],
            functools.partial(self._written, updates),
        )
        if not self.args.disable_garbage_collection:
            waits.extend(self._collect(ctx, reservations, nodes, now))
        if self._retry:
            waits.append(MIN_REQUEUE_SECONDS)
        return min(waits, default=None)

    def _written(self, updates: Sequence[Reservation], results: Sequence[Result]) -> None:
        for updated, result in zip(updates, results, strict=True):
            if isinstance(result, StoreError):
                log.warning("cannot update reservation %s: %s", updated.metadata.name, result)
                self._retry = True
            elif updated.status.phase in _TERMINAL:
                log.info("reservation %s is %s", updated.metadata.name, updated.status.phase)

    def _collected(self, names: Sequence[str], results: Sequence[Result]) -> None:
        for name, result in zip(names, results, strict=True):
            if isinstance(result, StoreError):
                log.warning("cannot delete reservation %s: %s", name, result)
            else:
                log.info("reservation %s garbage collected", name)

    def _collect(
        self,
        ctx: LoopContext,
        reservations: Sequence[Reservation],
        nodes: set[str],
        now: datetime,
    ) -> list[float]:
        """Delete due terminal reservations at GC ticks; the wait until the next useful tick."""
        args = self.args
        duration = timedelta(seconds=args.effective_gc_duration_seconds)
        interval = timedelta(seconds=args.gc_interval_seconds)
        due_times = {
            r.metadata.name: due
            for r in reservations
            if (
                due := garbage(
                    r, now=now, node_exists=r.status.node_name in nodes, gc_duration=duration
                )
            )
            is not None
        }
        if not due_times:
            return []
        if self._next_gc is None or now >= self._next_gc:
            self._next_gc = now + interval
            kind = ctx.store.registry.for_type(Reservation)
            by_name = {r.metadata.name: r for r in reservations}
            names = [name for name, due in sorted(due_times.items()) if due <= now]
            self._outbox.send(
                ctx.store,
                [Write.delete_of(kind, by_name[name]) for name in names],
                functools.partial(self._collected, names),
            )
            due_times = {n: d for n, d in due_times.items() if d > now}
            if not due_times:
                return []
        wake = max(self._next_gc, min(due_times.values()))
        return [max((wake - now).total_seconds(), 0.0)]


# --- metrics (§7.1) ------------------------------------------------------------------------------

PHASES: Final = (PENDING, AVAILABLE, SUCCEEDED, FAILED)
_GIB: Final = 1024**3


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    labels: Mapping[str, str]
    value: float


def _unit(resource: str, amount: int) -> tuple[str, float]:
    if resource == "cpu":
        return "core", amount / 1000
    if resource == "memory":
        return "Gi", amount / _GIB
    return "raw", float(amount)


def metric_samples(reservations: Iterable[Reservation]) -> list[MetricSample]:
    """``scheduler_reservation_status_phase`` and ``scheduler_reservation_resource`` values."""
    samples: list[MetricSample] = []
    for r in reservations:
        name = r.metadata.name
        phase = r.status.phase or PENDING
        samples.extend(
            MetricSample(
                "scheduler_reservation_status_phase",
                {"name": name, "phase": p},
                1.0 if p == phase else 0.0,
            )
            for p in PHASES
        )
        allocatable, allocated = r.status.allocatable, r.status.allocated
        for resource, total in allocatable.items():
            used = allocated.get(resource, 0)
            for kind, amount in (("allocatable", total), ("allocated", used)):
                unit, value = _unit(resource, amount)
                samples.append(
                    MetricSample(
                        "scheduler_reservation_resource",
                        {"type": kind, "name": name, "resource": resource, "unit": unit},
                        value,
                    )
                )
            samples.append(
                MetricSample(
                    "scheduler_reservation_resource",
                    {"type": "utilization", "name": name, "resource": resource, "unit": "ratio"},
                    used / total if total else 0.0,
                )
            )
    return samples
