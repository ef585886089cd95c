"""The scheduler control loop: pending pods in, bindings and explanations out.

Each pass (:meth:`SchedulerLoop.reconcile`):

1. brings the :class:`~controller.scheduler.nodetable.NodeTable` up to date with the store
   snapshot: the node arrays are rebuilt only when a node's scheduling-relevant part
   (allocatable, labels, taints, ``unschedulable``) changed or nodes came or went; assigned
   pods are accounted incrementally (an object the loop has already seen is skipped);
2. queues every pending pod (no ``spec.nodeName``, not finished, not being deleted, no
   ``spec.schedulingGates``, a ``spec.schedulerName`` some profile serves; empty means
   ``default-scheduler``) and drops
   queued pods that stopped being pending. A node change, a node added, or an assigned pod
   deleted or finished releases the unschedulable pods (:meth:`SchedulingQueue.move_all`);
   a pending pod whose spec, labels or annotations changed is released too;
   Plugins that keep cluster state of their own (``ClusterStatePlugin``) sync from the
   snapshot here, and may release the unschedulable pods too;
3. schedules the active pods, in queue order, each against the table as the previous ones
   left it (every placement is assumed at once): at most ``max_attempts`` of them
   (:data:`MAX_ATTEMPTS_PER_PASS` by default), so that one pass over a large backlog does
   not hold the event loop for seconds; the rest stay active and the pass returns a wait of
   0, so the runner comes back at once (``koordpy simulate`` repeats passes at the same
   instant while they change the store). The bound is a count, not a time, so a run is
   reproducible. Pending pods nominated to a node by an
   earlier preemption hold their room there for pods of no higher priority. A pod a Permit
   plugin answers Wait for (a gang member) stays assumed on its node and in flight; before
   and after the attempts the loop asks each ``WaitingPermitPlugin`` which waiting pods are
   allowed (bound with this pass's pods) or rejected (unreserved, backed off, and, as for a
   pod no node fits, ``PodScheduled=False`` reason ``Unschedulable`` with the FitError of the
   one node it waited on, ``0/1 nodes are available: 1 <reason>.``, and the Event with it);
4. binds the placed pods in one store transaction: ``spec.nodeName``, condition
   ``PodScheduled=True``, the PreBind plugins' annotations and labels, and the diagnosis
   annotation removed. The node feed then sends each pod to its node's agent;
5. for a pod no node fits: condition ``PodScheduled=False`` reason ``Unschedulable`` with
   the FitError summary and the annotation ``scheduling.koordpy.io/diagnosis``, written
   (in one transaction for the pass) only when they changed, and a ``FailedScheduling``
   Warning Event (aggregated by the recorder) per attempt; the pod waits for a cluster event.
   A Reserve or Permit rejection is the FitError of the one node it judged
   (``0/1 nodes are available: 1 <reason>.``). An attempt that fails with status Error (a
   malformed annotation, a plugin that raised, a PreBind or Bind failure) writes
   ``PodScheduled=False`` reason ``SchedulerError`` with the error text, the Event with it,
   and backs off (1 s doubling up to 10 s; the pass returns when the retry is due). The
   condition writers are :mod:`.conditions`. When a
   PostFilter preempts: ``status.nominatedNodeName`` is set on the pod, and each victim is
   deleted with a ``Preempted`` Normal Event (``Preempted by pod <uid> on node <node>``);
   the pod is retried once the deletions release it, and binding clears the nomination.

Reservations (when a profile enables the Reservation plugin): the reserve pod of every
unassigned, non-terminal Reservation whose template's scheduler is served is queued like a
pending pod; every Available reservation occupies its node like a pod requesting what is
still free inside it, except during the attempt of a pod that may use it (the plugin's
``hidden_for``); one placed earlier in the same pass does too (reserve pods are queued
first, at the highest priority, so its owners created with it go into it). Binding a reserve
pod writes the Reservation Available
(:func:`~controller.reservations.controller.mark_available`) and marks the pods a
pre-allocation took over with ``reservation-allocated``; a reserve pod no node fits writes
``Scheduled=False`` (:func:`~controller.reservations.controller.mark_unschedulable`) and the
``FailedScheduling`` Event on the Reservation.

Configuration: a loop built without profiles (as ``koordpy up`` and ``simulate`` build it)
polls the ConfigMap ``koordinator-system/koord-scheduler-config`` each pass
(:class:`~controller.scheduler.config.ConfigInForce`, shared with the reservation controller);
a new valid configuration replaces the profiles and starts the loop afresh (queue and table
rebuilt from the store, as a restarted koord-scheduler would), a bad one is refused and the
profiles in force stay.

It returns the seconds until the next backoff or unschedulable timeout ends (None when
nothing waits). The loop owns the table and the queue between passes; a new store (a
restart) starts both afresh.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, cast

import msgspec

from apis.constants import LABEL_SCHEDULE_ADMISSION
from apis.core import Node, Pod
from apis.kinds import default_registry
from apis.meta import Object
from apis.scheduling import Reservation
from controller.errors import StoreError
from controller.events import NORMAL, WARNING, EventRecorder
from controller.reservations import AnnotationError
from controller.reservations.affinity import allocated_annotation
from controller.reservations.controller import (
    ReservationNotActive,
    mark_available,
    mark_unschedulable,
)
from controller.scheduler import framework as fw
from controller.scheduler.conditions import (
    POD_SCHEDULED,
    bound_pod,
    nominated_pod,
    permit_rejected_pod,
    scheduler_error_pod,
    unschedulable_pod,
)
from controller.scheduler.config import ConfigInForce
from controller.scheduler.cycle import BindPlan, Decision, abandon, prepare_binding, schedule_one
from controller.scheduler.explain import (
    DIAGNOSIS_ANNOTATION,
    diagnosis_annotation,
    fit_error_message,
    rejection_diagnosis,
)
from controller.scheduler.metrics import SchedulerMetrics
from controller.scheduler.nodetable import NodeTable, Placed, is_assigned
from controller.scheduler.plugins.reservation import ReservationPlugin
from controller.scheduler.podinfo import PodInfo, pod_key
from controller.scheduler.profile import (
    DEFAULT_SCHEDULER,
    KOORD_SCHEDULER,
    Profile,
    default_profile,
    profiles_by_scheduler,
)
from controller.scheduler.scheduling_queue import QueuedPod, SchedulingQueue
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster
from controller.store.snapshots import Snapshot
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = [
    "MAX_ATTEMPTS_PER_PASS",
    "POD_SCHEDULED",
    "SchedulerLoop",
    "bound_pod",
    "unschedulable_pod",
]

log = logging.getLogger(__name__)
#: Pods, to ask a snapshot what changed among them.
_POD_KIND = default_registry().for_type(Pod)
_RESERVATION_KIND = default_registry().for_type(Reservation)

FAILED_SCHEDULING = "FailedScheduling"
#: Event reason on a pod evicted to make room for a pod of higher priority.
PREEMPTED = "Preempted"

NodeSignature = tuple[object, ...]

_REJECTED = frozenset({fw.Code.UNSCHEDULABLE, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE})

#: Scheduling attempts per pass, by default (a few tenths of a second of work at most).
MAX_ATTEMPTS_PER_PASS = 1000


def _fit_inputs(pod: Pod) -> tuple[object, ...]:
    annotations = dict(pod.metadata.annotations)
    annotations.pop(DIAGNOSIS_ANNOTATION, None)
    return (pod.spec, pod.metadata.labels, annotations)


def _node_signature(node: Node) -> NodeSignature:
    return (
        node.metadata.name,
        node.allocatable,
        tuple(sorted(node.metadata.labels.items())),
        node.spec.taints,
        node.spec.unschedulable,
    )


class _Nominations:
    """Pending pods nominated to a node (after a preemption) hold room there for the pods of
    no higher priority scheduled in the same pass, as kube-scheduler's filters count them:
    each is assumed on its node before the first attempt of such a pod (queue order is
    priority first) and forgotten before its own attempt and at the end of the pass."""

    def __init__(self, table: NodeTable, nominated: list[tuple[PodInfo, int]]) -> None:
        self._table = table
        self._todo = sorted(nominated, key=lambda item: -item[0].priority)
        self._next = 0
        self._active: set[str] = set()

    def before(self, entry: QueuedPod) -> None:
        while self._next < len(self._todo) and self._todo[self._next][0].priority >= entry.priority:
            info, row = self._todo[self._next]
            self._next += 1
            self._table.assume(info.uid, info.vector, info.nonzero, row)
            self._active.add(info.uid)
        uid = entry.pod.metadata.uid or entry.key
        if uid in self._active:
            self._active.discard(uid)
            self._table.forget(uid)

    def done(self) -> None:
        for uid in self._active:
            self._table.forget(uid)
        self._active.clear()


def _unschedulable_reservation(
    reservation: Reservation, message: str, now: datetime
) -> Reservation | None:
    """The reservation with ``Scheduled=False`` and the fit error; None when it says so."""
    current = next((c for c in reservation.status.conditions if c.type == "Scheduled"), None)
    if current is not None and (current.status, current.message) == ("False", message):
        return None
    return mark_unschedulable(reservation, message, now)


def _allocated_to(pod: Pod, reservation: Reservation) -> Pod:
    """A running pod a pre-allocated reservation took over, marked as its owner."""
    annotations = {**pod.metadata.annotations, **allocated_annotation(reservation)}
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations)
    )


def _log_marked(results: Sequence[Result]) -> None:
    for result in results:
        if isinstance(result, StoreError):
            log.info("marking a pre-allocated pod: %s", result)


def _log_unexplained(results: Sequence[Result]) -> None:
    for result in results:
        if isinstance(result, StoreError):
            log.info("recording why a pod is unschedulable: %s", result)


class SchedulerLoop:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "scheduler"

    def __init__(
        self,
        profiles: Sequence[Profile] | None = None,
        *,
        metrics: SchedulerMetrics | None = None,
        max_attempts: int | None = MAX_ATTEMPTS_PER_PASS,
        only_named: bool = False,
    ) -> None:
        #: Serve only pods naming a profile's own schedulerName, never the ``default-scheduler``
        #: alias (a cluster where kube-scheduler schedules the rest: Kubernetes mode).
        self._only_named = only_named
        if max_attempts is not None and max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        #: Attempts per pass (None: every active pod).
        self._max_attempts = max_attempts
        #: Given no profiles, the loop follows the scheduler's ConfigMap (:mod:`.config`).
        self._watch = ConfigInForce() if profiles is None else None
        #: The generation of the configuration installed (``ConfigInForce.generation``).
        self._generation = 0
        self._install(tuple(profiles) if profiles is not None else (default_profile(),))
        self._metrics = metrics
        self._store: Cluster | None = None
        self._reset()

    def _install(self, profiles: tuple[Profile, ...]) -> None:
        """Take ``profiles`` and the plugins of theirs the loop calls outside the cycle."""
        self._profiles = profiles
        self._by_scheduler = profiles_by_scheduler(self._profiles)
        if self._only_named:
            self._by_scheduler = {p.scheduler_name: p for p in self._profiles}
        stateful: dict[int, fw.ClusterStatePlugin] = {}
        timed: dict[int, fw.TimedPlugin] = {}
        for profile in self._profiles:
            for plugin in profile.plugins.values():
                if isinstance(plugin, fw.ClusterStatePlugin):
                    stateful.setdefault(id(plugin), plugin)
                if isinstance(plugin, fw.TimedPlugin):
                    timed.setdefault(id(plugin), plugin)
        #: Plugins that read the snapshot each pass (``ClusterStatePlugin``).
        self._stateful = tuple(stateful.values())
        #: The Reservation plugin (reserve pods to queue, reservations holding their nodes).
        self._reservation = next(
            (p for p in self._stateful if isinstance(p, ReservationPlugin)), None
        )
        #: Plugins that refuse annotations while syncing (``WarningPlugin``).
        self._warners = tuple(p for p in self._stateful if isinstance(p, fw.WarningPlugin))
        #: Plugins that read the loop's clock (``TimedPlugin``).
        self._timed = tuple(timed.values())
        #: Permit plugins that hold pods (``WaitingPermitPlugin``).
        self._waiters = tuple(
            {
                id(p): p
                for profile in self._profiles
                for p in profile.permit
                if isinstance(p, fw.WaitingPermitPlugin)
            }.values()
        )

    def _reset(self) -> None:
        self._now = 0.0
        self._table = NodeTable()
        self._queue = SchedulingQueue(lambda: self._now)
        self._node_view: Sequence[Object] | None = None
        #: name -> the node last seen and its signature
        self._node_signatures: dict[str, tuple[Node, NodeSignature]] = {}
        self._pod_view: Sequence[Object] | None = None
        #: uid -> the assigned pod object last accounted.
        self._assigned: dict[str, Pod] = {}
        #: the pods and reservations this loop wrote (bound, marked unschedulable, preempted):
        #: laid over every snapshot until it shows them; their results handled as they arrive
        self._outbox = Outbox(kinds=(_POD_KIND, _RESERVATION_KIND))
        #: namespace/name -> the pending pod object last queued.
        self._pending: dict[str, Pod] = {}
        #: reservation uid -> the pod an Available reservation holds its node with.
        self._held: dict[str, Pod] = {}
        #: namespace/uid -> the reserve pod of a reservation waiting for a node.
        self._reserve_pending: dict[str, Pod] = {}
        #: namespace/name -> a pod held in Permit (assumed on its node, in flight in the queue).
        self._waiting: dict[str, tuple[QueuedPod, Profile, Decision]] = {}
        self._recorder: EventRecorder | None = None
        #: The pods and reservations the last full pass read.
        self._seen: tuple[Sequence[Object], Sequence[Object]] | None = None

    def share_configuration(self, shared: ConfigInForce) -> None:
        """Follow ``shared`` (the configuration the reservation controller follows too);
        nothing changes for a loop built with fixed profiles."""
        if self._watch is not None:
            self._watch, self._generation = shared, 0

    @property
    def profiles(self) -> tuple[Profile, ...]:
        """The profiles in force."""
        return self._profiles

    @property
    def table(self) -> NodeTable:
        return self._table

    @property
    def queue(self) -> SchedulingQueue:
        return self._queue

    def serves(self, pod: Pod) -> bool:
        return (pod.spec.scheduler_name or DEFAULT_SCHEDULER) in self._by_scheduler

    def _is_pending(self, pod: Pod) -> bool:
        """Unbound, alive, ungated (no ``schedulingGates``, and not held back by the queue's
        replica-level admission label ``alibabacloud.com/schedule-admission: "false"``), and
        of a scheduler some profile serves."""
        return (
            not pod.spec.node_name
            and not pod.is_terminated
            and pod.metadata.deletion_timestamp is None
            and not pod.spec.scheduling_gates
            and pod.metadata.labels.get(LABEL_SCHEDULE_ADMISSION) != "false"
            and self.serves(pod)
        )

    # -- the pass --------------------------------------------------------------------------

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._reset()
            self._recorder = EventRecorder(store, component=KOORD_SCHEDULER, clock=ctx.now)
        now = ctx.now()
        snapshot = self._outbox.over(store.snapshot())
        if self._watch is not None:
            config = self._watch.poll(snapshot, store.registry, self._recorder)
            if config is not None and self._generation != self._watch.generation:
                # A new configuration: the scheduler starts afresh.
                self._generation = self._watch.generation
                recorder = self._recorder
                self._install(config.profiles)
                self._reset()
                self._recorder = recorder
        self._now = now.timestamp()
        pods = snapshot.objects(store.registry.for_type(Pod))
        reservations = snapshot.objects(store.registry.for_type(Reservation))
        if self._idle(pods, reservations):
            return self._wake()
        nodes = snapshot.objects(store.registry.for_type(Node))
        moved = self._sync_nodes(nodes)
        moved = self._sync_pods(pods, snapshot) or moved
        for timed in self._timed:
            timed.set_time(now)
        for plugin in self._stateful:
            moved = plugin.sync(snapshot, self._table) or moved
        for warner in self._warners:
            for pod, message in warner.take_warnings():
                log.warning("pod %s: %s", pod_key(pod), message)
                if self._recorder is not None:
                    self._recorder.record(
                        pod, type=WARNING, reason=fw.INVALID_ANNOTATION, message=message
                    )
        moved = self._sync_reservations() or moved
        if moved:
            released = self._queue.move_all()
            if self._metrics is not None:
                self._metrics.moved(released)
        self._schedule_ready(store, now)
        if self._metrics is not None:
            self._metrics.pass_done(self._queue, snapshot)
        # What this pass saw, for the next one to tell whether anything could be scheduled.
        self._seen = (pods, reservations)
        return self._wake()

    def _idle(self, pods: Sequence[Object], reservations: Sequence[Object]) -> bool:
        """Nothing to schedule and nothing that could make something to schedule: no pod
        queued or held in Permit, and the pods and reservations are those of the last pass.

        Such a pass reads nothing else: changes to nodes, Devices, NodeMetrics (the reports
        of a fleet, many per second) are taken by the next pass that has a pod to place,
        which reads every object as it is then.
        """
        return (
            not self._queue
            and not self._waiting
            and self._seen is not None
            and self._seen[0] is pods
            and self._seen[1] is reservations
        )

    def _wake(self) -> float | None:
        wake = self._queue.next_wake()
        for waiter in self._waiters:
            deadline = waiter.next_deadline()
            if deadline is not None:
                until = max(deadline - self._now, 0.0)
                wake = until if wake is None else min(wake, until)
        return wake

    def _sync_nodes(self, nodes: Sequence[Object]) -> bool:
        if nodes is self._node_view:
            return False
        self._node_view = nodes
        typed = cast("tuple[Node, ...]", nodes)
        # A node's signature is worked out again only when its object changed.
        known = self._node_signatures
        signatures: dict[str, tuple[Node, NodeSignature]] = {}
        same = len(typed) == len(known)
        for node in typed:
            name = node.metadata.name
            before = known.get(name)
            if before is not None and before[0] is node:
                signatures[name] = before
                continue
            signature = _node_signature(node)
            signatures[name] = (node, signature)
            same = same and before is not None and before[1] == signature
        self._node_signatures = signatures
        if same:
            return False
        self._table.replace_nodes(typed)
        for uid, pod in self._assigned.items():
            if self._table.placed(uid) is None:
                self._table.add_pod(pod)
        return True

    def _sync_pods(self, pods: Sequence[Object], snapshot: Snapshot) -> bool:
        """Take the pods changed since the last pass (every pod when the snapshot no longer
        knows which); True when an assigned pod went away (room was freed)."""
        if pods is self._pod_view:
            return False
        since, self._pod_view = self._pod_view, pods
        changes = snapshot.changes(_POD_KIND, since) if since is not None else None
        if changes is None:  # every pod: whatever is not among them is gone
            changes = [(None, obj) for obj in pods]
            gone_uids, gone_keys = list(self._assigned), list(self._pending)
        else:
            gone_uids, gone_keys = [], []
        assigned: set[str] = set()
        pending: set[str] = set()
        for before, obj in changes:
            if before is not None:
                old = cast("Pod", before)
                gone_uids.append(old.metadata.uid or pod_key(old))
                gone_keys.append(pod_key(old))
            if obj is None:
                continue
            pod = cast("Pod", obj)
            if is_assigned(pod):
                uid = pod.metadata.uid or pod_key(pod)
                assigned.add(uid)
                if self._assigned.get(uid) is not pod:
                    self._assigned[uid] = pod
                    self._table.add_pod(pod)
            elif self._is_pending(pod):
                key = pod_key(pod)
                pending.add(key)
                was = self._pending.get(key)
                if was is not pod:
                    self._pending[key] = pod
                    if was is None and self._metrics is not None:
                        self._metrics.pod_added()
                    changed = was is None or _fit_inputs(was) != _fit_inputs(pod)
                    self._queue.add(pod, changed=changed)
        freed = False
        for uid in gone_uids:
            if uid in self._assigned and uid not in assigned:
                del self._assigned[uid]
                self._table.remove_pod(uid)
                freed = True
        for key in gone_keys:
            if key in self._pending and key not in pending:
                del self._pending[key]
                self._queue.delete(key)
        return freed

    def _schedule_ready(self, store: Cluster, now: datetime) -> None:
        binds: list[tuple[QueuedPod, Profile, Decision, BindPlan]] = []
        explained: list[tuple[Object, str, Object | None]] = []
        preempted: list[tuple[Pod, str, tuple[Pod, ...]]] = []
        explained.extend(self._settle_waiting(binds, now))
        nominations = _Nominations(self._table, self._nominated_pods())
        for entry in self._queue.pop_ready(self._max_attempts):
            pod = entry.pod
            nominations.before(entry)
            profile = self._by_scheduler[pod.spec.scheduler_name or DEFAULT_SCHEDULER]
            if self._metrics is not None:
                profile = self._metrics.start_attempt(profile)
            info = PodInfo.of(pod, self._table, priority=entry.priority)
            hidden = self._hide(info)
            decision = schedule_one(profile, self._table, info)
            if hidden:
                self._unhide(hidden)
            if self._metrics is not None:
                self._metrics.attempted(profile, entry, decision)
            code = decision.status.code
            if code is fw.Code.SUCCESS and decision.row is not None:
                plan = prepare_binding(profile, self._table, decision)
                if plan.status.is_success:
                    binds.append((entry, profile, decision, plan))
                    continue
                abandon(profile, self._table, decision)
                log.warning("binding %s failed: %s", entry.key, plan.status.message)
                self._queue.backoff(entry.key)
                explained.append(self._scheduler_error(pod, plan.status.message, now))
            elif code is fw.Code.WAIT and decision.row is not None:
                # Held assumed on its node (in flight in the queue) until its plugin decides.
                self._waiting[entry.key] = (entry, profile, decision)
            elif code in _REJECTED:
                # A Reserve or Permit rejection has no diagnosis: it judged the one node.
                diagnosis = decision.diagnosis or rejection_diagnosis(decision.status)
                self._queue.park(entry.key)
                message = fit_error_message(diagnosis)
                annotation = diagnosis_annotation(diagnosis)
                updated = unschedulable_pod(pod, message, annotation, now)
                if decision.nominated:
                    updated = nominated_pod(updated or pod, decision.nominated)
                    updated = None if updated is pod else updated
                    preempted.append((pod, decision.nominated, decision.victims))
                reservation = self._reservation_of(pod)
                if reservation is not None:
                    changed = _unschedulable_reservation(reservation, message, now)
                    explained.append((reservation, message, changed))
                else:
                    explained.append((pod, message, updated))
            else:
                log.warning(
                    "scheduling %s failed: %s (%s)",
                    entry.key,
                    decision.status.message,
                    decision.status.plugin,
                )
                self._queue.backoff(entry.key)
                if code is fw.Code.ERROR:
                    explained.append(self._scheduler_error(pod, decision.status.message, now))
        nominations.done()
        explained.extend(self._settle_waiting(binds, now))
        if binds:
            self._bind(store, binds, now)
        if explained:
            self._explain(store, explained)
        if preempted:
            self._preempt(store, preempted)

    def _bind(
        self,
        store: Cluster,
        binds: list[tuple[QueuedPod, Profile, Decision, BindPlan]],
        now: datetime,
    ) -> None:
        writes: list[tuple[QueuedPod, Profile, Decision]] = []
        objects: list[Object] = []
        for entry, profile, decision, plan in binds:
            if plan.binder:
                # A Bind plugin took the pod; the loop writes only for the default binder
                # and for the Reservation plugin's (the reservation becomes Available).
                available = self._available(entry.pod, decision.node, now)
                if available is None:
                    self._queue.done(entry.key)
                    continue
                if isinstance(available, Exception):
                    log.info("binding %s to %s: %s", entry.key, decision.node, available)
                    abandon(profile, self._table, decision)
                    self._queue.backoff(entry.key)
                    continue
                writes.append((entry, profile, decision))
                objects.append(available)
                continue
            writes.append((entry, profile, decision))
            objects.append(bound_pod(entry.pod, decision.node, plan, now))
        for (_, _, decision), obj in zip(writes, objects, strict=True):
            if isinstance(obj, Pod):
                # The table holds the assumed pod already: the overlay of what is being bound
                # (or, later, what was stored) need not be accounted again.
                self._assigned[decision.pod.uid] = obj
        self._outbox.send(
            store,
            [Write.bind(o) if isinstance(o, Pod) else Write.update(o) for o in objects],
            functools.partial(self._bound, store, writes),
        )

    def _bound(
        self,
        store: Cluster,
        writes: Sequence[tuple[QueuedPod, Profile, Decision]],
        results: Sequence[Result],
    ) -> None:
        """The results of :meth:`_bind`'s writes: a failed one is unreserved and backed off;
        the pods a pre-allocating reservation took over are marked."""
        taken_over: list[Object] = []
        for (entry, profile, decision), result in zip(writes, results, strict=True):
            if isinstance(result, StoreError):
                log.info("binding %s to %s: %s", entry.key, decision.node, result)
                abandon(profile, self._table, decision)
                self._assigned.pop(decision.pod.uid, None)
                self._queue.backoff(entry.key)
                continue
            self._queue.done(entry.key)
            self._pending.pop(entry.key, None)
            self._reserve_pending.pop(entry.key, None)
            stored = result[0]
            if isinstance(stored, Reservation) and self._reservation is not None:
                taken_over.extend(
                    _allocated_to(pod, stored)
                    for pod in self._reservation.pre_allocated(decision.state)
                )
            elif isinstance(stored, Pod) and self._assigned.get(decision.pod.uid) is not None:
                self._assigned[decision.pod.uid] = stored
        self._outbox.send(store, [Write.update(o) for o in taken_over], _log_marked)

    # -- reservations ----------------------------------------------------------------------

    def _reservation_of(self, pod: Pod) -> Reservation | None:
        return self._reservation.reservation_of(pod) if self._reservation is not None else None

    def _sync_reservations(self) -> bool:
        """Account the held part of every Available reservation; queue the reserve pods of
        the reservations waiting for a node. True when a reservation stopped holding."""
        plugin = self._reservation
        if plugin is None:
            return False
        freed = False
        held = plugin.held_pods()
        for uid in [u for u in self._held if u not in held]:
            del self._held[uid]
            self._table.remove_pod(uid)
            freed = True
        for uid, pod in held.items():
            if self._held.get(uid) is not pod:
                self._held[uid] = pod
                self._table.add_pod(pod)
        pending: set[str] = set()
        for pod in plugin.pending_reserve_pods():
            if not self.serves(pod):
                continue
            key = pod_key(pod)
            pending.add(key)
            before = self._reserve_pending.get(key)
            if before != pod:
                self._reserve_pending[key] = pod
                changed = before is None or _fit_inputs(before) != _fit_inputs(pod)
                self._queue.add(pod, changed=changed)
        for key in [k for k in self._reserve_pending if k not in pending]:
            del self._reserve_pending[key]
            self._queue.delete(key)
        return freed

    def _hide(self, info: PodInfo) -> list[tuple[str, Placed]]:
        """Stop counting, for this pod's attempt, the reservations it may use (and the pods a
        pre-allocatable reserve pod may take over)."""
        if self._reservation is None:
            return []
        try:
            uids = self._reservation.hidden_for(info, self._table)
        except AnnotationError:
            return []  # the plugin's PreFilter reports it
        hidden: list[tuple[str, Placed]] = []
        for uid in uids:
            record = self._table.placed(uid)
            if record is not None:
                self._table.forget(uid)
                hidden.append((uid, record))
        return hidden

    def _unhide(self, hidden: list[tuple[str, Placed]]) -> None:
        """Count again what :meth:`_hide` took out (a reservation, one placed earlier in this
        pass included, with what the attempt put into it)."""
        assert self._reservation is not None
        for uid, record in hidden:
            held = self._reservation.held_pod(uid)
            if held is not None:
                self._held[uid] = held
                self._table.add_pod(held)
            elif record.node in self._table.index:
                row = self._table.index[record.node]
                self._table.assume(uid, record.requests, record.nonzero, row)

    def _available(self, pod: Pod, node: str, now: datetime) -> Object | Exception | None:
        """What the Reservation plugin's Bind writes: the reservation Available on ``node``."""
        reservation = self._reservation_of(pod)
        if reservation is None:
            return None
        try:
            return mark_available(reservation, node, now)
        except (ReservationNotActive, AnnotationError) as err:
            return err

    def _scheduler_error(
        self, pod: Pod, message: str, now: datetime
    ) -> tuple[Object, str, Object | None]:
        """What an attempt that failed with an error writes: ``PodScheduled=False`` reason
        ``SchedulerError`` (``Scheduled=False`` on a reserve pod's Reservation), an Event."""
        reservation = self._reservation_of(pod)
        if reservation is not None:
            return (reservation, message, _unschedulable_reservation(reservation, message, now))
        return (pod, message, scheduler_error_pod(pod, message, now))

    def _explain(self, store: Cluster, explained: list[tuple[Object, str, Object | None]]) -> None:
        """Write the changed conditions in one transaction, then one Event per attempt."""
        updates: list[Object] = [updated for _, _, updated in explained if updated is not None]
        self._outbox.send(store, [Write.update(o) for o in updates], _log_unexplained)
        if self._recorder is not None:
            for pod, message, _ in explained:
                self._recorder.record(pod, type=WARNING, reason=FAILED_SCHEDULING, message=message)

    def _nominated_pods(self) -> list[tuple[PodInfo, int]]:
        """Pending pods nominated to a node of the table (not those held in Permit)."""
        found: list[tuple[PodInfo, int]] = []
        for key, pod in self._pending.items():
            node = pod.status.nominated_node_name
            row = self._table.index.get(node) if node else None
            if row is not None and key not in self._waiting:
                found.append((PodInfo.of(pod, self._table), row))
        return found

    def _settle_waiting(
        self, binds: list[tuple[QueuedPod, Profile, Decision, BindPlan]], now: datetime
    ) -> list[tuple[Object, str, Object | None]]:
        """Hand the waiting pods their Permit plugins allowed to ``binds``; unreserve and back
        off the rejected ones and those no longer pending. Returns what to write and record
        for each rejected one, as :meth:`_explain` takes it."""
        rejected: list[tuple[Object, str, Object | None]] = []
        for key in [k for k in self._waiting if k not in self._pending]:
            _, profile, decision = self._waiting.pop(key)
            abandon(profile, self._table, decision)
        while self._waiters:
            verdicts: dict[str, fw.Status] = {}
            for waiter in self._waiters:
                for key, status in waiter.resolve_waiting(self._now).items():
                    if key not in verdicts or not status.is_success:
                        verdicts[key] = status
            # Unreserving a rejected pod may reject others of its group: repeat until settled.
            decided = [(key, status) for key, status in verdicts.items() if key in self._waiting]
            if not decided:
                break
            for key, status in decided:
                entry, profile, decision = self._waiting.pop(key)
                if status.is_success:
                    plan = prepare_binding(profile, self._table, decision)
                    if plan.status.is_success:
                        binds.append((entry, profile, decision, plan))
                        continue
                    status = plan.status
                abandon(profile, self._table, decision)
                self._queue.backoff(key)
                rejected.append(
                    self._permit_rejected(self._pending.get(key, entry.pod), status, now)
                )
        return rejected

    def _permit_rejected(
        self, pod: Pod, status: fw.Status, now: datetime
    ) -> tuple[Object, str, Object | None]:
        """What a pod rejected while it waited in Permit writes (a reserve pod: on its
        Reservation), as :meth:`_explain` takes it; an error (a PreBind failure once allowed)
        is a ``SchedulerError``."""
        if status.code not in _REJECTED:
            return self._scheduler_error(pod, status.message, now)
        message, updated = permit_rejected_pod(pod, status, now)
        reservation = self._reservation_of(pod)
        if reservation is not None:
            return (reservation, message, _unschedulable_reservation(reservation, message, now))
        return (pod, message, updated)

    def _preempt(self, store: Cluster, preempted: list[tuple[Pod, str, tuple[Pod, ...]]]) -> None:
        """Delete the victims of each preemption, with a ``Preempted`` Event on each."""
        kind = store.registry.for_type(Pod)
        doomed = [(preemptor, node, v) for preemptor, node, victims in preempted for v in victims]
        self._outbox.send(
            store,
            [Write.delete_of(kind, victim) for _, _, victim in doomed],
            functools.partial(self._preempted, doomed),
        )

    def _preempted(self, doomed: Sequence[tuple[Pod, str, Pod]], results: Sequence[Result]) -> None:
        for (preemptor, node, victim), result in zip(doomed, results, strict=True):
            if isinstance(result, StoreError):
                log.info("preempting %s/%s: %s", victim.namespace, victim.name, result)
            elif self._recorder is not None:
                message = f"Preempted by pod {preemptor.metadata.uid} on node {node}"
                self._recorder.record(victim, type=NORMAL, reason=PREEMPTED, message=message)
