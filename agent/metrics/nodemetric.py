"""The NodeMetric the agent reports: built from the windows, the latest snapshot and the config.

:func:`build_nodemetric` is pure. What each field holds:

* ``metadata.name``: the node; ``spec.metricCollectPolicy``: the ``[metrics]`` settings it was
  collected under (aggregate duration, report interval, windows, memory policy);
* ``status.updateTime``: when it was built;
* ``nodeMetric.nodeUsage`` / ``systemUsage``: CPU (millicores) and memory (bytes, as
  ``memory_policy`` counts it) averaged over ``aggregate_duration``; ``nodeUsage.devices``
  has one entry per GPU with ``koordinator.sh/gpu-core`` (utilisation, percent of the GPU),
  ``koordinator.sh/gpu-memory`` (bytes used) and ``koordinator.sh/gpu-memory-ratio``
  (100 x used / total);
* ``aggregatedNodeUsages`` / ``aggregatedSystemUsages``: per window of ``aggregate_durations``,
  avg, p50, p90, p95 and p99; a window its samples cover less than half of (cold start) has
  no entry at all;
* ``podsMetric``: the pods of the latest snapshot, sorted by namespace and name, each with its
  average usage over ``aggregate_duration``, priority class and QoS class (pods with no
  figure yet are left out); ``hostApplicationMetric`` likewise for the NodeSLO's host
  applications;
* ``prodReclaimableMetric`` and ``prodPeakMetric``: koordpy has no usage predictor, so every
  Prod pod counts as unpredicted: nothing is reclaimable (CPU and memory 0) and the peak is
  the sum of the requests of the Prod (and priority-less) pods that hold resources.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agent.config import MetricsSection
from agent.metrics.snapshot import MetricsSnapshot
from agent.metrics.windows import AGGREGATIONS, Aggregates, Average, DeviceStats, WindowStats
from apis.constants import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from apis.duration import Duration
from apis.meta import ObjectMeta
from apis.qos import PriorityClass
from apis.resources import ResourceList
from apis.scheduling import DeviceInfo
from apis.slo import (
    AggregatedUsage,
    AggregatePolicy,
    HostApplicationMetricInfo,
    NodeMetric,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricSpec,
    NodeMetricStatus,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
)

__all__ = ["build_nodemetric", "collect_policy"]

_CPU = "cpu"
_MEMORY = "memory"
#: Priority classes whose pods count for prodReclaimable / prodPeak.
_PROD = (str(PriorityClass.PROD), str(PriorityClass.NONE))


def _resources(cpu: float | None, memory: float | None) -> ResourceList:
    amounts: dict[str, int] = {}
    if cpu is not None:
        amounts[_CPU] = max(round(cpu), 0)
    if memory is not None:
        amounts[_MEMORY] = max(round(memory), 0)
    return ResourceList(amounts)


def _device(stats: DeviceStats, aggregation: str) -> DeviceInfo | None:
    amounts: dict[str, int] = {}
    core = stats.utilization.get(aggregation) if stats.utilization is not None else None
    if core is not None:
        amounts[RESOURCE_GPU_CORE] = max(round(core), 0)
    used = stats.memory.get(aggregation) if stats.memory is not None else None
    if used is not None:
        amounts[RESOURCE_GPU_MEMORY] = max(round(used), 0)
        if stats.memory_total:
            amounts[RESOURCE_GPU_MEMORY_RATIO] = max(round(100 * used / stats.memory_total), 0)
    if not amounts:
        return None
    return DeviceInfo(
        health=stats.healthy,
        type="gpu",
        id=stats.uuid,
        minor=stats.minor,
        resources=ResourceList(amounts),
    )


def _usage(window: WindowStats, aggregation: str, *, system: bool) -> ResourceMap | None:
    cpu_stats = window.system_cpu if system else window.node_cpu
    memory_stats = window.system_memory if system else window.node_memory
    cpu = cpu_stats.get(aggregation) if cpu_stats is not None else None
    memory = memory_stats.get(aggregation) if memory_stats is not None else None
    devices: tuple[DeviceInfo, ...] = ()
    if not system:
        found = (_device(d, aggregation) for d in window.devices)
        devices = tuple(d for d in found if d is not None)
    if cpu is None and memory is None and not devices:
        return None
    return ResourceMap(resources=_resources(cpu, memory), devices=devices)


def _aggregated(windows: Sequence[WindowStats], *, system: bool) -> tuple[AggregatedUsage, ...]:
    entries = []
    for window in windows:
        if not window.covered:
            continue
        usage: dict[str, ResourceMap] = {}
        for aggregation in AGGREGATIONS:
            found = _usage(window, aggregation, system=system)
            if found is not None:
                usage[aggregation] = found
        if usage:
            duration = Duration.from_seconds(window.seconds)
            entries.append(AggregatedUsage(usage=usage, duration=duration))
    return tuple(entries)


def _average(average: Average | None) -> ResourceMap | None:
    if average is None or (average.cpu is None and average.memory is None):
        return None
    return ResourceMap(resources=_resources(average.cpu, average.memory))


def collect_policy(settings: MetricsSection) -> NodeMetricCollectPolicy:
    """``spec.metricCollectPolicy``: the settings the figures were collected under."""
    return NodeMetricCollectPolicy(
        aggregate_duration_seconds=round(settings.aggregate_duration),
        report_interval_seconds=round(settings.report_interval),
        node_aggregate_policy=AggregatePolicy(
            durations=tuple(Duration.from_seconds(d) for d in settings.aggregate_durations)
        ),
        node_memory_collect_policy=settings.memory_policy,
    )


def _prod_peak(latest: MetricsSnapshot | None) -> ResourceList:
    cpu = memory = 0
    for pod in latest.pods if latest is not None else ():
        if pod.priority in _PROD:
            cpu += pod.requests.get(_CPU, 0)
            memory += pod.requests.get(_MEMORY, 0)
    return ResourceList({_CPU: cpu, _MEMORY: memory})


def build_nodemetric(
    node: str,
    aggregates: Aggregates,
    latest: MetricsSnapshot | None,
    settings: MetricsSection,
    *,
    now: datetime,
) -> NodeMetric:
    """The NodeMetric of ``node`` (see the module docstring); ``now`` is its update time."""
    average = aggregates.average
    node_metric = NodeMetricInfo(
        node_usage=_usage(average, "avg", system=False) or ResourceMap(),
        aggregated_node_usages=_aggregated(aggregates.windows, system=False),
        system_usage=_usage(average, "avg", system=True) or ResourceMap(),
        aggregated_system_usages=_aggregated(aggregates.windows, system=True),
    )
    pods = []
    apps = []
    if latest is not None:
        for pod in sorted(latest.pods, key=lambda p: (p.namespace, p.name)):
            usage = _average(aggregates.pods.get(pod.uid))
            if usage is not None:
                pods.append(
                    PodMetricInfo(
                        name=pod.name,
                        namespace=pod.namespace,
                        pod_usage=usage,
                        priority=pod.priority,
                        qos=pod.qos,
                    )
                )
        for app in latest.host_apps:
            usage = _average(aggregates.host_apps.get(app.name))
            if usage is not None:
                apps.append(
                    HostApplicationMetricInfo(
                        name=app.name, usage=usage, priority=app.priority, qos=app.qos
                    )
                )
    nothing = ResourceList({_CPU: 0, _MEMORY: 0})
    return NodeMetric(
        metadata=ObjectMeta(name=node),
        spec=NodeMetricSpec(metric_collect_policy=collect_policy(settings)),
        status=NodeMetricStatus(
            update_time=now,
            node_metric=node_metric,
            pods_metric=tuple(pods),
            host_application_metric=tuple(apps),
            prod_reclaimable_metric=ReclaimableMetric(resource=ResourceMap(resources=nothing)),
            prod_peak_metric=ReclaimableMetric(resource=ResourceMap(resources=_prod_peak(latest))),
        ),
    )
