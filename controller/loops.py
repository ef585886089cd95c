"""Control loops: the extension point every controller feature plugs into.

A control loop reads an immutable snapshot of the store, decides, and writes through the store.
It never sleeps or keeps time itself: ``reconcile`` returns how long until it wants to run again
(``None`` = only when something changes), so the same loop runs under the real clock in the
daemon (:class:`LoopRunner`) and under a simulated one in ``koordpy simulate``.

``LOOPS`` is the explicit name -> factory table, in the order loops run within one pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from controller.descheduler.loop import DeschedulerLoop
from controller.descheduler.migration import MigrationController
from controller.descheduler.migrationrates import EvictionBuckets
from controller.podgroups import PodGroupStatusLoop
from controller.queueing.jobcontroller import JobController
from controller.queueing.loop import QueueingLoop
from controller.queueing.podlifecycle import PodLifecycle
from controller.quota.revoke import QuotaRevokeLoop
from controller.reservations.controller import ReservationController
from controller.scheduler.config import ConfigInForce
from controller.scheduler.loop import SchedulerLoop
from controller.slo.loop import NodeSLOController
from controller.store.cluster import Cluster
from controller.workloads.daemonset import DaemonSetController
from controller.workloads.deployment import DeploymentController
from controller.workloads.gc import GarbageCollector
from controller.workloads.job import BatchJobController
from controller.workloads.replicaset import ReplicaSetController
from controller.workloads.statefulset import StatefulSetController

__all__ = [
    "DEBOUNCE",
    "LOOPS",
    "ControlLoop",
    "LoopContext",
    "LoopFactory",
    "LoopRunner",
    "build_loops",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopContext:
    """What a loop may touch: the store and the clock (real or simulated)."""

    store: Cluster
    now: Callable[[], datetime]


@runtime_checkable
class ControlLoop(Protocol):
    """One control loop. ``reconcile`` returns seconds until its next wanted run, or None."""

    name: str

    def reconcile(self, ctx: LoopContext) -> float | None: ...


LoopFactory = Callable[[], ControlLoop]

#: Every control loop of the controller, in run order. Later features add their entries here.
LOOPS: Mapping[str, LoopFactory] = {
    "deployments": DeploymentController,
    "replicasets": ReplicaSetController,
    "statefulsets": StatefulSetController,
    "daemonsets": DaemonSetController,
    "workload-gc": GarbageCollector,
    "batch-jobs": BatchJobController,
    "jobs": JobController,
    "queueing": QueueingLoop,
    "reservations": ReservationController,
    "scheduler": SchedulerLoop,
    "quota-revoke": QuotaRevokeLoop,
    "descheduler": DeschedulerLoop,
    "migration": MigrationController,
    "pod-lifecycle": PodLifecycle,
    "podgroups": PodGroupStatusLoop,
    "nodeslo": NodeSLOController,
}


def build_loops(table: Mapping[str, LoopFactory] | None = None) -> list[ControlLoop]:
    """Instantiate every loop of ``table`` (default :data:`LOOPS`)."""
    loops = [factory() for factory in (LOOPS if table is None else table).values()]
    evictions = EvictionBuckets()  # one evictQPS bucket for the descheduler's evictions
    scheduler_config = ConfigInForce()  # one koord-scheduler configuration, read once
    for loop in loops:
        if not isinstance(loop, ControlLoop):
            raise TypeError(f"{loop!r} does not implement ControlLoop")
        if isinstance(loop, DeschedulerLoop | MigrationController):
            loop.share_evictions(evictions)
        if isinstance(loop, SchedulerLoop | ReservationController):
            loop.share_configuration(scheduler_config)
        if isinstance(loop, QuotaRevokeLoop):
            loop.share_configuration(scheduler_config)
    return loops


def _utcnow() -> datetime:
    return datetime.now(UTC)


#: Seconds :class:`LoopRunner` waits after a change before its pass.
DEBOUNCE = 0.005


class LoopRunner:
    """Runs loops under the real clock: on every store change and at each requested time.

    ``name``: the component's, for a runner beside the one of :data:`LOOPS`. ``debounce``:
    seconds the loops wait after a change woke them, so that the API answers the write that
    woke them before they run in the same thread (a write's latency is its own, not the
    loops' reaction to it) and a burst of writes is one pass."""

    def __init__(
        self,
        store: Cluster,
        loops: Sequence[ControlLoop],
        *,
        clock: Callable[[], datetime] = _utcnow,
        idle_interval: float = 30.0,
        name: str = "control-loops",
        debounce: float = DEBOUNCE,
    ) -> None:
        self.name = name
        self._debounce = debounce
        self._store = store
        self._loops = list(loops)
        self._ctx = LoopContext(store=store, now=clock)
        self._idle = idle_interval

    def run_pass(self) -> float | None:
        """Run each loop once; the shortest wait any loop asked for."""
        waits: list[float] = []
        for loop in self._loops:
            wait = loop.reconcile(self._ctx)
            if wait is not None:
                waits.append(max(0.0, wait))
        return min(waits) if waits else None

    async def run(self) -> None:
        if not self._loops:
            await asyncio.Event().wait()  # nothing to run; stay until cancelled
        # Changes committed after a pass began wake the loops (their own writes included); a
        # burst of them is one pass, not one per change.
        store = self._store
        while True:
            seen = store.revision
            wait = self.run_pass()
            if wait == 0.0:
                # A loop has more to do at once (a bounded scheduler pass): let the other
                # tasks run first, then go again; the next pass reads every change anyway.
                await asyncio.sleep(0)
                continue
            timeout = self._idle if wait is None else min(wait, self._idle)
            try:
                async with asyncio.timeout(timeout):
                    await store.changed_after(seen)
            except TimeoutError:
                continue
            await asyncio.sleep(self._debounce)
