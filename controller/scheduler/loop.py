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
3. schedules every active pod, in queue order, each against the table as the previous ones
   left it (every placement is assumed at once);
4. binds the placed pods in one store transaction: ``spec.nodeName``, condition
   ``PodScheduled=True``, the PreBind plugins' annotations and labels, and the diagnosis
   annotation removed. The node feed then sends each pod to its node's agent;
5. for a pod no node fits: condition ``PodScheduled=False`` reason ``Unschedulable`` with
   the FitError summary and the annotation ``scheduling.koordpy.io/diagnosis``, written
   (in one transaction for the pass) only when they changed, and a ``FailedScheduling``
   Warning Event (aggregated by the recorder) per attempt.

It returns the seconds until the next backoff or unschedulable timeout ends (None when
nothing waits). The loop owns the table and the queue between passes; a new store (a
restart) starts both afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, cast

import msgspec

from apis.core import Node, Pod
from apis.meta import Condition, Object
from controller.errors import StoreError
from controller.events import WARNING, EventRecorder
from controller.scheduler import framework as fw
from controller.scheduler.cycle import BindPlan, Decision, abandon, prepare_binding, schedule_one
from controller.scheduler.explain import (
    DIAGNOSIS_ANNOTATION,
    diagnosis_annotation,
    fit_error_message,
)
from controller.scheduler.nodetable import NodeTable, is_assigned
from controller.scheduler.podinfo import PodInfo, pod_key
from controller.scheduler.profile import (
    DEFAULT_SCHEDULER,
    KOORD_SCHEDULER,
    Profile,
    default_profile,
    profiles_by_scheduler,
)
from controller.scheduler.scheduling_queue import QueuedPod, SchedulingQueue
from controller.store import Store

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["POD_SCHEDULED", "SchedulerLoop", "bound_pod", "unschedulable_pod"]

log = logging.getLogger(__name__)

POD_SCHEDULED = "PodScheduled"
UNSCHEDULABLE = "Unschedulable"
FAILED_SCHEDULING = "FailedScheduling"

NodeSignature = tuple[object, ...]


def _scheduled_condition(pod: Pod) -> Condition | None:
    return next((c for c in pod.status.conditions if c.type == POD_SCHEDULED), None)


def _with_condition(pod: Pod, condition: Condition) -> tuple[Condition, ...]:
    others = tuple(c for c in pod.status.conditions if c.type != POD_SCHEDULED)
    return (*others, condition)


def bound_pod(pod: Pod, node: str, plan: BindPlan, now: datetime) -> Pod:
    """``pod`` bound to ``node``: what the default binder writes."""
    annotations = {**pod.metadata.annotations, **plan.annotations}
    annotations.pop(DIAGNOSIS_ANNOTATION, None)
    labels = {**pod.metadata.labels, **plan.labels}
    condition = Condition(type=POD_SCHEDULED, status="True", last_transition_time=now)
    return msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(pod.metadata, annotations=annotations, labels=labels),
        spec=msgspec.structs.replace(pod.spec, node_name=node),
        status=msgspec.structs.replace(pod.status, conditions=_with_condition(pod, condition)),
    )


def unschedulable_pod(pod: Pod, message: str, diagnosis: str, now: datetime) -> Pod | None:
    """``pod`` with ``PodScheduled=False`` and the diagnosis; None when it already says so."""
    current = _scheduled_condition(pod)
    same_condition = (
        current is not None
        and current.status == "False"
        and current.reason == UNSCHEDULABLE
        and current.message == message
    )
    if same_condition and pod.metadata.annotations.get(DIAGNOSIS_ANNOTATION) == diagnosis:
        return None
    since = (
        current.last_transition_time
        if current is not None and current.status == "False" and current.last_transition_time
        else now
    )
    condition = Condition(
        type=POD_SCHEDULED,
        status="False",
        reason=UNSCHEDULABLE,
        message=message,
        last_probe_time=None,
        last_transition_time=since,
    )
    annotations = {**pod.metadata.annotations, DIAGNOSIS_ANNOTATION: diagnosis}
    return msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(pod.metadata, annotations=annotations),
        status=msgspec.structs.replace(pod.status, conditions=_with_condition(pod, condition)),
    )


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


class SchedulerLoop:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "scheduler"

    def __init__(self, profiles: Sequence[Profile] | None = None) -> None:
        self._profiles = tuple(profiles) if profiles is not None else (default_profile(),)
        self._by_scheduler = profiles_by_scheduler(self._profiles)
        stateful: dict[int, fw.ClusterStatePlugin] = {}
        for profile in self._profiles:
            for plugin in profile.plugins.values():
                if isinstance(plugin, fw.ClusterStatePlugin):
                    stateful.setdefault(id(plugin), plugin)
        #: Plugins that read the snapshot each pass (``ClusterStatePlugin``).
        self._stateful = tuple(stateful.values())
        self._store: Store | None = None
        self._reset()

    def _reset(self) -> None:
        self._now = 0.0
        self._table = NodeTable()
        self._queue = SchedulingQueue(lambda: self._now)
        self._node_view: tuple[Object, ...] | None = None
        self._node_signature: tuple[NodeSignature, ...] | None = None
        self._pod_view: tuple[Object, ...] | None = None
        #: uid -> the assigned pod object last accounted.
        self._assigned: dict[str, Pod] = {}
        #: namespace/name -> the pending pod object last queued.
        self._pending: dict[str, Pod] = {}
        self._recorder: EventRecorder | None = None

    @property
    def table(self) -> NodeTable:
        return self._table

    @property
    def queue(self) -> SchedulingQueue:
        return self._queue

    def serves(self, pod: Pod) -> bool:
        return (pod.spec.scheduler_name or DEFAULT_SCHEDULER) in self._by_scheduler

    def _is_pending(self, pod: Pod) -> bool:
        return (
            not pod.spec.node_name
            and not pod.is_terminated
            and pod.metadata.deletion_timestamp is None
            and not pod.spec.scheduling_gates
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
        self._now = now.timestamp()
        snapshot = store.snapshot()
        nodes = snapshot.objects(store.registry.for_type(Node))
        pods = snapshot.objects(store.registry.for_type(Pod))
        moved = self._sync_nodes(nodes)
        moved = self._sync_pods(pods) or moved
        for plugin in self._stateful:
            moved = plugin.sync(snapshot, self._table) or moved
        if moved:
            self._queue.move_all()
        self._schedule_ready(store, now)
        return self._queue.next_wake()

    def _sync_nodes(self, nodes: tuple[Object, ...]) -> bool:
        if nodes is self._node_view:
            return False
        self._node_view = nodes
        typed = cast("tuple[Node, ...]", nodes)
        signature = tuple(_node_signature(n) for n in typed)
        if signature == self._node_signature:
            return False
        self._node_signature = signature
        self._table.replace_nodes(typed)
        for uid, pod in self._assigned.items():
            if self._table.placed(uid) is None:
                self._table.add_pod(pod)
        return True

    def _sync_pods(self, pods: tuple[Object, ...]) -> bool:
        if pods is self._pod_view:
            return False
        self._pod_view = pods
        freed = False
        assigned: set[str] = set()
        pending: set[str] = set()
        for obj in pods:
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
                before = self._pending.get(key)
                if before is not pod:
                    self._pending[key] = pod
                    changed = before is None or _fit_inputs(before) != _fit_inputs(pod)
                    self._queue.add(pod, changed=changed)
        for uid in [u for u in self._assigned if u not in assigned]:
            del self._assigned[uid]
            self._table.remove_pod(uid)
            freed = True
        for key in [k for k in self._pending if k not in pending]:
            del self._pending[key]
            self._queue.delete(key)
        return freed

    def _schedule_ready(self, store: Store, now: datetime) -> None:
        binds: list[tuple[QueuedPod, Profile, Decision, BindPlan]] = []
        explained: list[tuple[Pod, str, Pod | None]] = []
        for entry in self._queue.pop_ready():
            pod = entry.pod
            profile = self._by_scheduler[pod.spec.scheduler_name or DEFAULT_SCHEDULER]
            info = PodInfo.of(pod, self._table, priority=entry.priority)
            decision = schedule_one(profile, self._table, info)
            code = decision.status.code
            if code is fw.Code.SUCCESS and decision.row is not None:
                plan = prepare_binding(profile, self._table, decision)
                if plan.status.is_success:
                    binds.append((entry, profile, decision, plan))
                    continue
                abandon(profile, self._table, decision)
                log.warning("binding %s failed: %s", entry.key, plan.status.message)
                self._queue.backoff(entry.key)
            elif code is fw.Code.WAIT:
                # Holding a permitted pod arrives with Coscheduling; until then it retries.
                abandon(profile, self._table, decision)
                self._queue.backoff(entry.key)
            elif code is fw.Code.UNSCHEDULABLE and decision.diagnosis is not None:
                self._queue.park(entry.key)
                message = fit_error_message(decision.diagnosis)
                annotation = diagnosis_annotation(decision.diagnosis)
                explained.append((pod, message, unschedulable_pod(pod, message, annotation, now)))
            else:
                log.warning(
                    "scheduling %s failed: %s (%s)",
                    entry.key,
                    decision.status.message,
                    decision.status.plugin,
                )
                self._queue.backoff(entry.key)
        if binds:
            self._bind(store, binds, now)
        if explained:
            self._explain(store, explained)

    def _bind(
        self,
        store: Store,
        binds: list[tuple[QueuedPod, Profile, Decision, BindPlan]],
        now: datetime,
    ) -> None:
        writes: list[tuple[QueuedPod, Profile, Decision]] = []
        objects: list[Object] = []
        for entry, profile, decision, plan in binds:
            if plan.binder:
                # A Bind plugin took the pod; the loop writes only for the default binder.
                self._queue.done(entry.key)
                continue
            writes.append((entry, profile, decision))
            objects.append(bound_pod(entry.pod, decision.node, plan, now))
        results = store.update_many(objects) if objects else []
        for (entry, profile, decision), result in zip(writes, results, strict=True):
            if isinstance(result, StoreError):
                log.info("binding %s to %s: %s", entry.key, decision.node, result)
                abandon(profile, self._table, decision)
                self._queue.backoff(entry.key)
            else:
                self._queue.done(entry.key)
                self._pending.pop(entry.key, None)
                # The table already holds the assumed pod: the next pass need not redo it.
                stored = result[0]
                if isinstance(stored, Pod):
                    self._assigned[decision.pod.uid] = stored

    def _explain(self, store: Store, explained: list[tuple[Pod, str, Pod | None]]) -> None:
        """Write the changed conditions in one transaction, then one Event per attempt."""
        updates: list[Object] = [updated for _, _, updated in explained if updated is not None]
        for result in store.update_many(updates) if updates else []:
            if isinstance(result, StoreError):
                log.info("recording why a pod is unschedulable: %s", result)
        if self._recorder is not None:
            for pod, message, _ in explained:
                self._recorder.record(pod, type=WARNING, reason=FAILED_SCHEDULING, message=message)
