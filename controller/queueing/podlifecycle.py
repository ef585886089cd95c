"""The ``pod-lifecycle`` control loop: what a kubelet would do to pods, for ``up``/``simulate``.

* A bound pod (``spec.nodeName`` set) in phase ``Pending`` or empty, not being deleted, starts:
  phase ``Running``, ``status.startTime`` now, conditions ``Initialized``, ``Ready`` and
  ``ContainersReady`` ``True``.
* A running pod whose annotation ``koordpy.io/simulated-runtime`` is a duration (``90s``,
  ``1h``; copied from the pod template like any annotation) succeeds that long after it
  started: phase ``Succeeded``, ``Ready``/``ContainersReady`` ``False`` with reason
  ``PodCompleted``. A value that is not a duration is ignored (logged once per pod).

Only pods that changed since the last pass are looked at; pending ends sit in a heap, and
``reconcile`` returns the seconds until the next one.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import msgspec

from apis import constants as k
from apis.core import Pod
from apis.duration import Duration, DurationError
from apis.meta import Condition, Object
from controller.store import Store

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["PodLifecycle", "completed_pod", "simulated_runtime", "started_pod"]

log = logging.getLogger(__name__)

replace = msgspec.structs.replace

_STARTED = ("Initialized", "Ready", "ContainersReady")


def _set(conditions: Sequence[Condition], wanted: Sequence[Condition]) -> tuple[Condition, ...]:
    types = {c.type for c in wanted}
    return (*(c for c in conditions if c.type not in types), *wanted)


def started_pod(pod: Pod, now: datetime) -> Pod:
    """``pod`` as the kubelet reports it once its containers run."""
    conditions = _set(
        pod.status.conditions,
        [Condition(type=t, status="True", last_transition_time=now) for t in _STARTED],
    )
    return replace(
        pod,
        status=replace(pod.status, phase="Running", start_time=now, conditions=conditions),
    )


def completed_pod(pod: Pod, now: datetime) -> Pod:
    """``pod`` after all its containers exited 0."""
    conditions = _set(
        pod.status.conditions,
        [
            Condition(type=t, status="False", reason="PodCompleted", last_transition_time=now)
            for t in ("Ready", "ContainersReady")
        ],
    )
    return replace(pod, status=replace(pod.status, phase="Succeeded", conditions=conditions))


def simulated_runtime(pod: Pod) -> timedelta | None:
    """The pod's simulated runtime; None when it has none (or not a valid duration)."""
    raw = pod.metadata.annotations.get(k.ANNOTATION_SIMULATED_RUNTIME)
    if raw is None:
        return None
    try:
        duration = Duration.parse(raw)
    except DurationError:
        log.warning(
            "pod %s/%s: %s=%r is not a duration; ignored",
            pod.metadata.namespace,
            pod.metadata.name,
            k.ANNOTATION_SIMULATED_RUNTIME,
            raw,
        )
        return None
    if duration.nanoseconds < 0:
        return None
    return timedelta(microseconds=duration.nanoseconds // 1000)


def _startable(pod: Pod) -> bool:
    return (
        bool(pod.spec.node_name)
        and pod.status.phase in ("", "Pending")
        and pod.metadata.deletion_timestamp is None
    )


class PodLifecycle:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "pod-lifecycle"

    def __init__(self) -> None:
        self._store: Store | None = None
        self._reset()

    def _reset(self) -> None:
        self._view: tuple[Object, ...] | None = None
        #: uid -> the pod last seen.
        self._seen: dict[str, Pod] = {}
        #: (end, uid, namespace, name) of running pods with a simulated runtime.
        self._ends: list[tuple[datetime, str, str, str]] = []
        self._end_of: dict[str, datetime] = {}

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._reset()
        now = ctx.now()
        snapshot = store.snapshot()
        kind = store.registry.for_type(Pod)
        view = snapshot.objects(kind)
        writes: list[Pod] = []
        if view is not self._view:
            self._view = view
            self._scan(view, now, writes)
        ends = self._ends
        while ends and ends[0][0] <= now:
            end, uid, namespace, name = heapq.heappop(ends)
            if self._end_of.get(uid) != end:
                continue
            del self._end_of[uid]
            pod = snapshot.get(kind, name, namespace)
            if isinstance(pod, Pod) and pod.metadata.uid == uid and pod.status.phase == "Running":
                writes.append(completed_pod(pod, now))
        if writes:
            for result in store.update_many(writes):
                if not isinstance(result, tuple):
                    log.warning("pod lifecycle: write failed: %s", result)
        if not self._end_of:
            return None
        return max(0.0, (min(self._end_of.values()) - now).total_seconds())

    def _scan(self, view: tuple[Object, ...], now: datetime, writes: list[Pod]) -> None:
        seen: dict[str, Pod] = {}
        for obj in view:
            if not isinstance(obj, Pod):
                continue
            uid = obj.metadata.uid
            seen[uid] = obj
            if self._seen.get(uid) is obj:
                continue
            if _startable(obj):
                started = started_pod(obj, now)
                writes.append(started)
                self._track(started)
            elif obj.status.phase == "Running":
                self._track(obj)
            else:
                self._end_of.pop(uid, None)
        for uid in self._seen.keys() - seen.keys():
            self._end_of.pop(uid, None)
        self._seen = seen

    def _track(self, pod: Pod) -> None:
        runtime = simulated_runtime(pod)
        started = pod.status.start_time
        uid = pod.metadata.uid
        if runtime is None or started is None:
            self._end_of.pop(uid, None)
            return
        end = started + runtime
        if self._end_of.get(uid) == end:
            return
        self._end_of[uid] = end
        heapq.heappush(self._ends, (end, uid, pod.metadata.namespace, pod.metadata.name))
