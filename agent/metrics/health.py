"""The agent's own health on its Prometheus endpoint.

=============================================  =========  =====================================
metric                                         type       meaning
=============================================  =========  =====================================
``koordpy_component_restarts_total``           counter    restarts of a failed component, by
                                                          ``component`` (:mod:`runtime.lifecycle`)
``koordpy_agent_reports_total``                counter    state reports by ``node``, ``leaf``
                                                          (``node``, ``device``, ``nodemetric``,
                                                          ``events``) and ``result``: ``sent``,
                                                          ``skipped`` (equal to the last one,
                                                          or no transport: ``none``) or
                                                          ``failed`` (the transport raised)
``koordpy_agent_cgroup_write_errors_total``    counter    cgroup writes of the QoS loop that
                                                          failed, by ``node`` and ``status``:
                                                          ``rejected`` (the kernel refused the
                                                          value), ``unsupported`` (no such file
                                                          on this kernel), ``vanished`` (the
                                                          cgroup went away: a pod that ended)
``koordpy_agent_collect_duration_seconds``     histogram  time of each collection tick, by
                                                          ``node``
=============================================  =========  =====================================

Several agents in one process (``koordpy up --demo``) share one registry; :func:`health_of`
gives each registry one set of these metrics, and every agent counts under its ``node``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from agent.cgroups.writer import WriteResult, WriteStatus
from agent.metrics.snapshot import MetricsSnapshot
from agent.report.transport import Publisher, StateLeaf
from apis.core import Event
from apis.meta import Object

__all__ = [
    "COLLECT_BUCKETS",
    "FAILED_WRITES",
    "AgentHealth",
    "CountingPublisher",
    "NodeHealth",
    "health_of",
]

#: Upper bounds (seconds) of the collection time buckets: a tick over a few pods takes
#: milliseconds, one over hundreds of containers tens of milliseconds.
COLLECT_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Write statuses counted as errors.
FAILED_WRITES: Final = frozenset(
    {WriteStatus.REJECTED, WriteStatus.UNSUPPORTED, WriteStatus.VANISHED}
)


@dataclass(frozen=True, slots=True)
class AgentHealth:
    """One registry's health metrics (see the module docstring)."""

    reports: Counter
    cgroup_write_errors: Counter
    collect_duration: Histogram

    def node(self, node: str) -> NodeHealth:
        return NodeHealth(self, node)


_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, AgentHealth] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def _create(registry: CollectorRegistry) -> AgentHealth:
    return AgentHealth(
        reports=Counter(
            "koordpy_agent_reports",
            "State reports of the agent, by leaf and result (sent, skipped, failed).",
            ["node", "leaf", "result"],
            registry=registry,
        ),
        cgroup_write_errors=Counter(
            "koordpy_agent_cgroup_write_errors",
            "Cgroup writes of the QoS loop that failed, by status.",
            ["node", "status"],
            registry=registry,
        ),
        collect_duration=Histogram(
            "koordpy_agent_collect_duration_seconds",
            "Time of each collection tick, in seconds.",
            ["node"],
            buckets=COLLECT_BUCKETS,
            registry=registry,
        ),
    )


def health_of(registry: CollectorRegistry | None) -> AgentHealth:
    """``registry``'s health metrics, created with its first agent; ``None``: metrics in a
    private registry (an agent that exports nothing still counts)."""
    if registry is None:
        return _create(CollectorRegistry())
    with _SHARED_LOCK:
        health = _SHARED.get(registry)
        if health is None:
            health = _SHARED[registry] = _create(registry)
        return health


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """The health metrics of one node's agent."""

    metrics: AgentHealth
    node: str

    def report(self, leaf: str, result: str) -> None:
        self.metrics.reports.labels(node=self.node, leaf=leaf, result=result).inc()

    def writes(self, results: Iterable[WriteResult]) -> int:
        """Count the failed ones among a pass's write results; how many failed."""
        failed = 0
        for result in results:
            if result.status in FAILED_WRITES:
                self.metrics.cgroup_write_errors.labels(
                    node=self.node, status=str(result.status)
                ).inc()
                failed += 1
        return failed

    def collected(self, snapshot: MetricsSnapshot) -> None:
        self.metrics.collect_duration.labels(node=self.node).observe(snapshot.duration)


class CountingPublisher:
    """A :class:`~agent.report.transport.Publisher` that counts what the one it wraps did."""

    def __init__(self, publisher: Publisher, health: NodeHealth) -> None:
        self._publisher = publisher
        self._health = health

    async def report(self, leaf: StateLeaf, obj: Object) -> bool:
        try:
            sent = await self._publisher.report(leaf, obj)
        except Exception:
            self._health.report(leaf, "failed")
            raise
        self._health.report(leaf, "sent" if sent else "skipped")
        return sent

    async def event(self, event: Event) -> None:
        try:
            await self._publisher.event(event)
        except Exception:
            self._health.report("events", "failed")
            raise
        self._health.report("events", "sent")
