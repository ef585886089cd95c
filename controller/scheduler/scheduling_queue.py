"""The scheduling queue: active, backoff and unschedulable pods, kube-scheduler's way.

- **active**: pods ready for an attempt, popped in kube-scheduler's PrioritySort order (the
  queue sort v1.8's koord-scheduler profile enables): ``spec.priority`` first (highest first;
  :func:`~apis.qos.scheduling_priority`, 0 for a pod without one), then the time the pod
  entered the queue (oldest first; a failed attempt re-enters it then), then, for pods that
  entered at the same instant, creation time and creation order (the resourceVersion the pod
  had when first queued), then ``namespace/name``;
- **backoff**: pods waiting out a backoff after a failed attempt: ``initial * 2**(n-1)``
  seconds after their n-th attempt, capped (kube-scheduler's defaults: 1 s, 10 s);
- **unschedulable**: pods no node fits; they stay until an event that may make them
  schedulable (:meth:`SchedulingQueue.move_all`: a node added or changed, an assigned pod
  deleted or finished, ...) or for at most ``max_unschedulable`` seconds (5 min,
  kube-scheduler's ``podMaxInUnschedulablePodsDuration``); either way they go to backoff,
  or straight to active when their backoff is already over.

An attempt that ended in Error goes to backoff directly. A pod popped for an attempt is
*in flight* until the caller says how it ended (:meth:`done`, :meth:`backoff`,
:meth:`park`). The clock is injected (seconds, any origin), so simulated time works.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable
from dataclasses import dataclass

from apis.core import Pod
from apis.qos import scheduling_priority
from controller.scheduler.podinfo import created_at, pod_key

__all__ = ["QueuedPod", "SchedulingQueue", "Where"]

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0
MAX_UNSCHEDULABLE = 300.0


class Where(enum.Enum):
    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in-flight"


@dataclass(slots=True)
class QueuedPod:
    pod: Pod
    key: str
    priority: int
    created: float
    #: When the pod entered the queue, or last re-entered it after a failed attempt.
    queued: float = 0.0
    #: The resourceVersion the pod had when first queued: its creation order, near enough.
    arrival: int = 0
    where: Where = Where.ACTIVE
    attempts: int = 0
    #: When the last attempt started.
    last_attempt: float = 0.0
    #: Backoff: when it may run again; unschedulable: when it was parked.
    since: float = 0.0
    #: Bumped whenever the entry moves, so stale backoff-heap items are recognised.
    generation: int = 0

    @property
    def order(self) -> tuple[int, float, float, int, str]:
        return (-self.priority, self.queued, self.created, self.arrival, self.key)


class SchedulingQueue:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        max_unschedulable: float = MAX_UNSCHEDULABLE,
    ) -> None:
        self._clock = clock
        self._initial = initial_backoff
        self._max = max_backoff
        self._max_unschedulable = max_unschedulable
        self._entries: dict[str, QueuedPod] = {}
        self._heap: list[tuple[float, int, str]] = []

    # -- membership ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def where(self, key: str) -> Where | None:
        entry = self._entries.get(key)
        return entry.where if entry is not None else None

    def entry(self, key: str) -> QueuedPod | None:
        return self._entries.get(key)

    def counts(self) -> dict[Where, int]:
        counts = dict.fromkeys(Where, 0)
        for entry in self._entries.values():
            counts[entry.where] += 1
        return counts

    def add(self, pod: Pod, *, changed: bool = True) -> None:
        """Queue a pending pod, or take its newer version.

        For a pod already queued, ``changed`` says whether the update could change its
        fit (spec, labels...); an unschedulable pod then becomes ready for another try.
        """
        key = pod_key(pod)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = QueuedPod(
                pod,
                key,
                scheduling_priority(pod),
                created_at(pod),
                queued=self._clock(),
                arrival=_resource_version(pod),
            )
            return
        entry.pod = pod
        entry.priority = scheduling_priority(pod)
        if changed and entry.where is Where.UNSCHEDULABLE:
            self._release(entry, self._clock())

    def delete(self, key: str) -> None:
        self._entries.pop(key, None)

    # -- attempts --------------------------------------------------------------------------

    def pop_ready(self, limit: int | None = None) -> list[QueuedPod]:
        """Every active pod (after moving the due ones there), in order; now in flight.

        ``limit``: at most that many, the first in order; the others stay active (and
        :meth:`next_wake` then answers 0).
        """
        now = self._clock()
        self._flush(now)
        ready = [e for e in self._entries.values() if e.where is Where.ACTIVE]
        if limit is not None and limit < len(ready):
            ready = heapq.nsmallest(max(limit, 0), ready, key=lambda e: e.order)
        else:
            ready.sort(key=lambda e: e.order)
        for entry in ready:
            entry.where = Where.IN_FLIGHT
            entry.attempts += 1
            entry.last_attempt = now
            entry.generation += 1
        return ready

    def done(self, key: str) -> None:
        """The pod was bound (or handed off): it leaves the queue."""
        self._entries.pop(key, None)

    def backoff(self, key: str) -> None:
        """The attempt failed with an error: retry after the pod's backoff."""
        entry = self._entries.get(key)
        if entry is not None:
            now = self._clock()
            entry.queued = now
            self._to_backoff(entry, now)

    def park(self, key: str) -> None:
        """No node fits: wait for a relevant event (or the unschedulable timeout)."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.where = Where.UNSCHEDULABLE
            entry.since = entry.queued = self._clock()
            entry.generation += 1

    def move_all(self) -> int:
        """A cluster event that may make pods fit: release every unschedulable pod."""
        now = self._clock()
        moved = 0
        for entry in self._entries.values():
            if entry.where is Where.UNSCHEDULABLE:
                self._release(entry, now)
                moved += 1
        return moved

    def next_wake(self) -> float | None:
        """Seconds until a backoff or an unschedulable timeout ends; None when none will."""
        now = self._clock()
        self._flush(now)
        times = [e.since + self._max_unschedulable for e in self._unschedulable()]
        while self._heap and not self._live(self._heap[0]):
            heapq.heappop(self._heap)
        if self._heap:
            times.append(self._heap[0][0])
        if any(e.where is Where.ACTIVE for e in self._entries.values()):
            return 0.0
        return max(0.0, min(times) - now) if times else None

    # -- internals -------------------------------------------------------------------------

    def backoff_duration(self, attempts: int) -> float:
        if attempts <= 0:
            return 0.0
        return min(self._initial * 2.0 ** (attempts - 1), self._max)

    def _unschedulable(self) -> list[QueuedPod]:
        return [e for e in self._entries.values() if e.where is Where.UNSCHEDULABLE]

    def _live(self, item: tuple[float, int, str]) -> bool:
        entry = self._entries.get(item[2])
        return entry is not None and entry.where is Where.BACKOFF and entry.generation == item[1]

    def _to_backoff(self, entry: QueuedPod, now: float) -> None:
        ready_at = entry.last_attempt + self.backoff_duration(entry.attempts)
        entry.generation += 1
        if ready_at <= now:
            entry.where = Where.ACTIVE
            return
        entry.where = Where.BACKOFF
        entry.since = ready_at
        heapq.heappush(self._heap, (ready_at, entry.generation, entry.key))

    def _release(self, entry: QueuedPod, now: float) -> None:
        self._to_backoff(entry, now)

    def _flush(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)
            if self._live(item):
                entry = self._entries[item[2]]
                entry.where = Where.ACTIVE
                entry.generation += 1
        for entry in self._unschedulable():
            if now - entry.since >= self._max_unschedulable:
                self._release(entry, now)


def _resource_version(pod: Pod) -> int:
    try:
        return int(pod.metadata.resource_version or 0)
    except ValueError:
        return 0
