"""The queueing loop's Prometheus metrics, under Koord-Queue's and koord-scheduler's names.

:class:`QueueingMetrics` registers, on the controller's registry:

==================================================  ==============================================
``queueunits_in_active_queue{queue}``               units waiting for admission
``queueunits_in_backoff_queue{queue}``              units backing off (Retry, timeouts)
``job_schedule_attempts_total{queue,result}``       admission attempts: ``scheduled``,
                                                    ``unschedulable`` or ``error``
``job_scheduling_algorithm_latency``                one attempt's Filter time, milliseconds
``queueunit_admission_latency_seconds``             creation of a unit to its admission
``scheduler_elastic_quota_status``                  per quota and resource: ``used``,
``{name,resource,tree,is_parent,parent,field}``     ``runtime``, ``request``, ``min``, ``max``
==================================================  ==============================================

The gauges are set from a :class:`QueueingSnapshot` the engine hands over once per pass
(:meth:`QueueingMetrics.observe`) and exported as that pass left them, by custom collectors: a
queue or quota that is gone disappears from the output. Amounts are in canonical units, as
koord-scheduler exports them: cpu in millicores, memory in bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "ERROR",
    "QUOTA_FIELDS",
    "RESULTS",
    "SCHEDULED",
    "UNSCHEDULABLE",
    "QueueingMetrics",
    "QueueingSnapshot",
    "QuotaStatusSample",
]

SCHEDULED: Final = "scheduled"
UNSCHEDULABLE: Final = "unschedulable"
ERROR: Final = "error"
RESULTS: Final = (SCHEDULED, UNSCHEDULABLE, ERROR)
#: ``field`` label values of ``scheduler_elastic_quota_status``, in export order.
QUOTA_FIELDS: Final = ("used", "runtime", "request", "min", "max")

#: Filter time, 0.1 ms .. ~3.3 s.
_LATENCY_MS_BUCKETS: Final = tuple(0.1 * 2**i for i in range(16))
#: Creation to admission, 0.1 s .. ~1.8 days.
_ADMISSION_BUCKETS: Final = tuple(0.1 * 4**i for i in range(12))


@dataclass(frozen=True, slots=True)
class QuotaStatusSample:
    """One quota's figures for ``scheduler_elastic_quota_status`` (canonical units)."""

    name: str
    #: The quota tree's id (label ``quota.scheduling.koordinator.sh/tree-id``), "" if none.
    tree: str = ""
    is_parent: bool = False
    parent: str = ""
    used: Mapping[str, int] = field(default_factory=dict)
    runtime: Mapping[str, int] = field(default_factory=dict)
    request: Mapping[str, int] = field(default_factory=dict)
    min: Mapping[str, int] = field(default_factory=dict)
    max: Mapping[str, int] = field(default_factory=dict)

    def values(self) -> Iterable[tuple[str, str, int]]:
        """(resource, field, amount) for every figure the quota has."""
        for name in QUOTA_FIELDS:
            amounts: Mapping[str, int] = getattr(self, name)
            for resource in sorted(amounts):
                yield resource, name, amounts[resource]


@dataclass(frozen=True, slots=True)
class QueueingSnapshot:
    """What the engine knows at the end of one pass."""

    #: Queue name -> units waiting for admission.
    active: Mapping[str, int] = field(default_factory=dict)
    #: Queue name -> units backing off.
    backoff: Mapping[str, int] = field(default_factory=dict)
    quotas: tuple[QuotaStatusSample, ...] = ()


class _SnapshotCollector(Collector):
    """The per-queue and per-quota gauges of the last snapshot."""

    def __init__(self) -> None:
        self.snapshot = QueueingSnapshot()

    def collect(self) -> Iterable[Metric]:
        snapshot = self.snapshot  # one read: the engine may swap it meanwhile
        active = GaugeMetricFamily(
            "queueunits_in_active_queue",
            "The number of queue units waiting for admission, by queue",
            labels=("queue",),
        )
        backoff = GaugeMetricFamily(
            "queueunits_in_backoff_queue",
            "The number of queue units backing off, by queue",
            labels=("queue",),
        )
        for queue, count in sorted(snapshot.active.items()):
            active.add_metric((queue,), count)
        for queue, count in sorted(snapshot.backoff.items()):
            backoff.add_metric((queue,), count)
        status = GaugeMetricFamily(
            "scheduler_elastic_quota_status",
            "Elastic quota figures (used, runtime, request, min, max) by quota and resource",
            labels=("name", "resource", "tree", "is_parent", "parent", "field"),
        )
        for quota in snapshot.quotas:
            is_parent = "true" if quota.is_parent else "false"
            for resource, name, amount in quota.values():
                status.add_metric(
                    (quota.name, resource, quota.tree, is_parent, quota.parent, name), amount
                )
        return (active, backoff, status)


class QueueingMetrics:
    """See the module docstring; one per queueing loop."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts = Counter(
            "job_schedule_attempts",
            "Admission attempts of queue units, by queue and result",
            ("queue", "result"),
            registry=registry,
        )
        self.algorithm_latency = Histogram(
            "job_scheduling_algorithm_latency",
            "Time one admission attempt spent in the Filter plugins, in milliseconds",
            buckets=_LATENCY_MS_BUCKETS,
            registry=registry,
        )
        self.admission_latency = Histogram(
            "queueunit_admission_latency_seconds",
            "Time from a queue unit's creation to its admission, in seconds",
            buckets=_ADMISSION_BUCKETS,
            registry=registry,
        )
        self._snapshot = _SnapshotCollector()
        registry.register(self._snapshot)

    def observe(self, snapshot: QueueingSnapshot) -> None:
        """The gauges as of this pass (replacing the last pass's, removed entries included)."""
        self._snapshot.snapshot = snapshot

    def attempt(self, queue: str, result: str, *, filter_seconds: float | None = None) -> None:
        """One admission attempt of a unit of ``queue``, and its Filter time if measured."""
        if result not in RESULTS:
            raise ValueError(f"result must be one of {', '.join(RESULTS)}, got {result!r}")
        self.attempts.labels(queue, result).inc()
        if filter_seconds is not None:
            self.algorithm_latency.observe(filter_seconds * 1000.0)

    def admitted(self, created: datetime | None, now: datetime) -> None:
        """A unit created at ``created`` was admitted at ``now`` (no creation time: ignored)."""
        if created is None:
            return
        self.admission_latency.observe(max((now - created).total_seconds(), 0.0))
