"""The descheduler's Prometheus metrics (controller-spec §7.2, plus koordpy's own).

:class:`DeschedulerMetrics` registers, on the controller's registry (served on ``:9317``):

===================================================================  =============================
``descheduler_pods_evicted{result,strategy,namespace,node}``         evictions, under
                                                                     koord-descheduler's exact
                                                                     name (no ``_total``;
                                                                     untyped): ``success``,
                                                                     ``error``, or the limit that
                                                                     refused (``maximum number of
                                                                     pods per node reached``...);
                                                                     ``strategy`` is the plugin
``descheduler_plugin_execution_duration_seconds``                    one plugin's run in a cycle
``{plugin,extension_point,profile}``
``descheduler_cycle_duration_seconds``                               one whole cycle
``descheduler_dry_run_proposals_total{strategy,namespace,node}``     evictions proposed in dry run
``descheduler_pod_migration_jobs{phase}``                            PodMigrationJobs by phase
                                                                     (``Pending``, ``Running``,
                                                                     ``Succeeded``, ``Failed``,
                                                                     ``Aborted``)
===================================================================  =============================

The descheduler loop counts what it does itself (direct evictions, refusals, proposals); the
migration loop counts the evictions its PodMigrationJobs make through :meth:`evicted`. The job
gauge is set by the descheduler loop from its snapshot whenever the jobs changed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from apis.scheduling import PodMigrationJob

__all__ = ["ERROR", "PMJ_PHASES", "SUCCESS", "DeschedulerMetrics"]

SUCCESS: Final = "success"
ERROR: Final = "error"
PMJ_PHASES: Final = ("Pending", "Running", "Succeeded", "Failed", "Aborted")
PODS_EVICTED: Final = "descheduler_pods_evicted"

#: One plugin run, 0.1 ms .. ~3.3 s; one cycle 1 ms .. ~33 s.
_PLUGIN_BUCKETS: Final = tuple(0.0001 * 2**i for i in range(16))
_CYCLE_BUCKETS: Final = tuple(0.001 * 2**i for i in range(16))

_EvictedKey = tuple[str, str, str, str]


class _EvictedCollector(Collector):
    """``descheduler_pods_evicted`` as koord-descheduler names it, without the ``_total`` that
    prometheus_client gives every counter (Kubernetes' component-base does not add it). The
    family is exported untyped so that its TYPE line and its samples carry the same name; it
    only ever grows, and ``rate()`` works on it as on any counter."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[_EvictedKey, float] = {}

    def inc(self, key: _EvictedKey, amount: float) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0.0) + amount

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            counts = sorted(self._counts.items())
        metric = Metric(
            PODS_EVICTED,
            "Number of evicted pods, by the result, by the strategy, by the namespace, by the"
            " node name. 'error' result means a pod could not be evicted",
            "unknown",
        )
        for (result, strategy, namespace, node), value in counts:
            metric.add_sample(
                PODS_EVICTED,
                {"result": result, "strategy": strategy, "namespace": namespace, "node": node},
                value,
            )
        return (metric,)


class _JobsCollector(Collector):
    def __init__(self) -> None:
        self.counts: Mapping[str, int] = dict.fromkeys(PMJ_PHASES, 0)

    def collect(self) -> Iterable[Metric]:
        counts = self.counts  # one read: the loop may swap the mapping meanwhile
        family = GaugeMetricFamily(
            "descheduler_pod_migration_jobs",
            "PodMigrationJobs by phase",
            labels=("phase",),
        )
        for phase in PMJ_PHASES:
            family.add_metric((phase,), counts.get(phase, 0))
        return (family,)


class DeschedulerMetrics:
    """See the module docstring; one per controller."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._evicted = _EvictedCollector()
        registry.register(self._evicted)
        self._jobs = _JobsCollector()
        registry.register(self._jobs)
        self.plugin_duration = Histogram(
            "descheduler_plugin_execution_duration_seconds",
            "Duration of one descheduler plugin's run in a cycle",
            ("plugin", "extension_point", "profile"),
            buckets=_PLUGIN_BUCKETS,
            registry=registry,
        )
        self.cycle_duration = Histogram(
            "descheduler_cycle_duration_seconds",
            "Duration of one descheduling cycle",
            buckets=_CYCLE_BUCKETS,
            registry=registry,
        )
        self.proposals = Counter(
            "descheduler_dry_run_proposals",
            "Evictions proposed in dry run, by the strategy, namespace and node",
            ("strategy", "namespace", "node"),
            registry=registry,
        )

    def evicted(
        self, result: str, *, strategy: str, namespace: str, node: str, count: int = 1
    ) -> None:
        """Count ``descheduler_pods_evicted{result,strategy,namespace,node}``."""
        self._evicted.inc((result, strategy, namespace, node), float(count))

    def proposed(self, *, strategy: str, namespace: str, node: str) -> None:
        self.proposals.labels(strategy, namespace, node).inc()

    def plugin_ran(self, plugin: str, point: str, profile: str, seconds: float) -> None:
        self.plugin_duration.labels(plugin, point, profile).observe(seconds)

    def cycle_ran(self, seconds: float) -> None:
        self.cycle_duration.observe(seconds)

    def migration_jobs(self, jobs: Iterable[PodMigrationJob]) -> None:
        """Set the phase gauge from every PodMigrationJob (no phase yet counts as Pending)."""
        counts = dict.fromkeys(PMJ_PHASES, 0)
        for job in jobs:
            phase = job.status.phase or "Pending"
            counts[phase] = counts.get(phase, 0) + 1
        self._jobs.counts = counts
