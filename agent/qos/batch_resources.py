"""Batch and Mid allocatable: what the node can lend to lower-priority work.

Koordinator computes these centrally from the NodeMetric; koordpy computes them on the node from
the same inputs and publishes them on the agent's Node (``kubernetes.io/batch-cpu``,
``batch-memory``, ``mid-cpu``, ``mid-memory``). The ``*-cpu`` amounts are integer millicores
(4000 = 4 cores), the ``*-memory`` ones bytes. Per resource (cpu, memory)::

    safetyMargin = capacity * (100 - reclaimThresholdPercent) / 100
    reserved     = max(kubelet reservation, node.koordinator.sh/reservation)
    systemUsed   = max(node usage - Σ pod usage - Σ host-app usage, 0)
                   + Σ usage of host apps whose priority is above the target band

Batch (high-priority pods: priority class not batch or free, Running or Pending; a pod's "used"
is its measured usage, except that an LSE pod's CPU counts its request, and a pod without a
measurement counts its request):

* ``usage``: ``capacity - safetyMargin - max(systemUsed, reserved) - Σ HP used``
* ``request`` (memory only; a cpu ``request`` policy falls back to ``usage``):
  ``capacity - safetyMargin - reserved - Σ HP request``
* ``maxUsageRequest``: ``capacity - safetyMargin - max(systemUsed, reserved)
  - Σ max(HP request, HP used)``

each floored at 0, then capped at ``capacity * batch{CPU,Memory}ThresholdPercent / 100`` when
that is set; a node annotation ``node.koordinator.sh/cpu-normalization-ratio`` above 1
multiplies batch-cpu.

Mid, dynamic mode (``midReclaimMode`` unset): ``min(prodReclaimable, capacity - node usage)
+ unallocated * midUnallocatedPercent / 100`` with ``unallocated = max(capacity -
max(reserved, systemUsed) - Σ requests of prod/none pods, 0)``, capped at ``capacity *
mid{CPU,Memory}ThresholdPercent / 100``. The prod reclaimable amount comes from the peak
predictor, which the node does not run yet: it is taken as 0, so dynamic Mid is only the
configured share of the unallocated amount. Static mode (``midReclaimMode: static``, v1.8):
``min(capacity * midStatic{CPU,Memory}ReservedPercent, capacity * mid threshold) / 100``,
where the node labels ``node.koordinator.sh/mid-static-{cpu,memory}-reserved-ratio`` (a ratio,
``0.3`` = 30 %) override the percents. The labels ``node.koordinator.sh/{cpu,memory}-reclaim-
ratio`` likewise override the reclaim threshold percents. Invalid or negative labels are ignored.

The arithmetic is :mod:`apis.colocation`'s, shared with the controller's ``noderesource`` loop
(which computes the same amounts from the NodeMetric in Kubernetes mode); this module gathers
the node's own inputs. The parameters are Koordinator's ColocationStrategy: the agent config's
``[colocation]``, with the controller's ``colocation-config`` for this node over it when the
NodeSLO carries one (``extensions``, see :mod:`controller.slo.render`). Usage is averaged over
``metricAggregateDurationSeconds`` when that is set, else over ``window`` seconds (the
NodeMetric report interval). With ``resourceDiffThreshold`` set, a result is published only
when some resource moved by at least that fraction of the published amount, or
``updateTimeThresholdSeconds`` after the last publication (koord-manager's rule). When colocation is
disabled everything is published as 0 (reset). When node usage is missing the last result is
kept for ``degradeTimeMinutes``, then everything is reset to 0 until usage returns.

Not done on the node: host applications' memory is not measured separately, so all of it counts
as system memory (conservative); metrics of pods missing from the pod list land in the system
usage (node - known pods) rather than in the HP usage; NUMA-level batch resources and third-party
allocations are not computed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from agent.qos import nodeinfo
from agent.qos.framework import Gauge, NodeSnapshot, Outcome, PodState
from agent.qos.settings import ColocationSettings, QoSSettings
from apis import colocation
from apis import constants as k
from apis.core import Node
from apis.qos import PriorityClass, QoSClass
from apis.resources import ResourceList
from apis.slo import HostApplicationSpec

__all__ = ["NAME", "WINDOW_SECONDS", "BatchResources", "Breakdown"]

_log = logging.getLogger(__name__)

NAME: Final = "batch_resources"
#: Default usage window, seconds (Koordinator's NodeMetric report interval).
WINDOW_SECONDS: Final = 60.0

_CPU: Final = k.RESOURCE_CPU
_MEMORY: Final = k.RESOURCE_MEMORY
_RESOURCES: Final = (_CPU, _MEMORY)
_OUTPUT: Final = (
    k.RESOURCE_BATCH_CPU,
    k.RESOURCE_BATCH_MEMORY,
    k.RESOURCE_MID_CPU,
    k.RESOURCE_MID_MEMORY,
)
_ZERO: Final = ResourceList(dict.fromkeys(_OUTPUT, 0))
#: Priority classes that are not "high priority" for each band.
_BATCH_BAND: Final = colocation.BATCH_BAND
_MID_BAND: Final = colocation.MID_BAND
_LABEL_UNITS: Final = {
    k.RESOURCE_BATCH_CPU: "integer",
    k.RESOURCE_MID_CPU: "integer",
    k.RESOURCE_BATCH_MEMORY: "byte",
    k.RESOURCE_MID_MEMORY: "byte",
}


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The measured inputs of one pass (cpu in millicores, memory in bytes)."""

    node_used: ResourceList
    pods_used: ResourceList
    #: Host applications' CPU, all of them and those above the Batch / Mid bands.
    host_apps_cpu: int
    host_apps_above_batch_cpu: int
    host_apps_above_mid_cpu: int

    def system_used(self, band: frozenset[PriorityClass]) -> ResourceList:
        """``max(node - pods - host apps, 0) + host apps above the band`` per resource."""
        above = (
            self.host_apps_above_batch_cpu if band is _BATCH_BAND else self.host_apps_above_mid_cpu
        )
        cpu = (
            max(
                self.node_used.get_amount(_CPU)
                - self.pods_used.get_amount(_CPU)
                - self.host_apps_cpu,
                0,
            )
            + above
        )
        memory = max(self.node_used.get_amount(_MEMORY) - self.pods_used.get_amount(_MEMORY), 0)
        return ResourceList({_CPU: cpu, _MEMORY: memory})


def _ignored(key: str, text: str, why: str) -> None:
    _log.warning("node label %s=%r %s; ignored", key, text, why, extra={"key": key})


def _ratio_label(node: Node, key: str) -> Fraction | None:
    """A float ratio label as an exact fraction (``"0.3"`` -> 3/10); None if absent/invalid."""
    return colocation.ratio_label(node.metadata.labels, key, ignored=_ignored)


def _normalization(node: Node) -> Fraction:
    return colocation.normalization_ratio(
        node.metadata.annotations.get(k.ANNOTATION_NODE_CPU_NORMALIZATION_RATIO)
    )


def _host_app_class(app: HostApplicationSpec) -> PriorityClass:
    values = PriorityClass.__members__.values()
    return PriorityClass(app.priority) if app.priority in values else PriorityClass.NONE


class BatchResources:
    """The ``batch_resources`` strategy (see the module docstring).

    It runs every ``interval`` seconds (10), not every pass: the Node's Batch/Mid amounts are
    re-published only on a change beyond the diff threshold anyway, and upstream recomputes
    them from NodeMetric reports once a minute.
    """

    #: Seconds between runs (the loop skips it in between).
    interval: float = 10.0

    def wants_memory(self, settings: QoSSettings) -> bool:
        """It reads pods' memory usage when it runs."""
        return True

    def __init__(self, *, window: float = WINDOW_SECONDS) -> None:
        self.window = window
        self._last: ResourceList | None = None
        self._last_measured: float | None = None
        #: What was last handed to the Node, and when (``resourceDiffThreshold``).
        self._published: ResourceList | None = None
        self._published_at = 0.0

    @property
    def name(self) -> str:
        return NAME

    # -- inputs ---------------------------------------------------------------------------

    def window_for(self, snapshot: NodeSnapshot) -> float:
        """The usage window: ``metricAggregateDurationSeconds`` when configured, else
        :attr:`window`."""
        configured = snapshot.settings.colocation.metric_aggregate_duration_seconds
        return float(configured) if configured else self.window

    def measure(self, snapshot: NodeSnapshot) -> Breakdown | None:
        """Node, pod and host-app usage over the window; None when node usage is missing."""
        usage = snapshot.usage
        window = self.window_for(snapshot)
        node_cpu = usage.node_cpu(window)
        node_memory = usage.node_memory()
        if node_cpu is None or node_memory is None:
            return None
        pods_cpu = 0
        pods_memory = 0
        for pod in snapshot.pods:
            cpu = usage.pod_cpu(pod.uid, window)
            memory = usage.pod_memory(pod.uid)
            pods_cpu += round(cpu) if cpu is not None else 0
            pods_memory += memory if memory is not None else 0
        every = above_batch = above_mid = 0
        for app in snapshot.settings.host_applications:
            if not app.name:
                continue
            used = usage.host_app_cpu(app.name, window)
            if used is None:
                continue
            cpu = round(used)
            every += cpu
            klass = _host_app_class(app)
            if klass not in _BATCH_BAND:
                above_batch += cpu
            if klass not in _MID_BAND:
                above_mid += cpu
        return Breakdown(
            node_used=ResourceList({_CPU: round(node_cpu), _MEMORY: node_memory}),
            pods_used=ResourceList({_CPU: pods_cpu, _MEMORY: pods_memory}),
            host_apps_cpu=every,
            host_apps_above_batch_cpu=above_batch,
            host_apps_above_mid_cpu=above_mid,
        )

    def _pod_used(
        self, snapshot: NodeSnapshot, pod: PodState, request: ResourceList
    ) -> dict[str, int]:
        """What an HP pod holds: its usage (an LSE pod's CPU: its request), else its request."""
        usage = snapshot.usage
        cpu = usage.pod_cpu(pod.uid, self.window_for(snapshot))
        memory = usage.pod_memory(pod.uid)
        return {
            _CPU: request.get_amount(_CPU)
            if pod.qos is QoSClass.LSE or cpu is None
            else round(cpu),
            _MEMORY: request.get_amount(_MEMORY) if memory is None else memory,
        }

    # -- formulas -------------------------------------------------------------------------

    @staticmethod
    def _reclaim_percent(node: Node, settings: ColocationSettings, resource: str) -> Fraction:
        percent = (
            settings.cpu_reclaim_threshold_percent
            if resource == _CPU
            else settings.memory_reclaim_threshold_percent
        )
        ratio = _ratio_label(node, colocation.RECLAIM_RATIO_LABELS[resource])
        return colocation.reclaim_percent(percent, ratio)

    def batch(
        self, snapshot: NodeSnapshot, measured: Breakdown, reserved: ResourceList
    ) -> ResourceList:
        """Batch allocatable (cpu millicores, memory bytes), keyed by ``cpu`` / ``memory``."""
        settings = snapshot.settings.colocation
        node = snapshot.node
        capacity = node.status.capacity
        system = measured.system_used(_BATCH_BAND)
        pairs: dict[str, list[tuple[int, int]]] = {name: [] for name in _RESOURCES}
        for pod in _high_priority(snapshot.pods, _BATCH_BAND):
            request = pod.requests
            used = self._pod_used(snapshot, pod, request)
            for name in _RESOURCES:
                pairs[name].append((request.get_amount(name), used[name]))
        result: dict[str, int] = {}
        for name in _RESOURCES:
            result[name] = colocation.batch_amount(
                name,
                capacity=capacity.get_amount(name),
                reclaim_percent=self._reclaim_percent(node, settings, name),
                system_used=system.get_amount(name),
                reserved=reserved.get_amount(name),
                hp=colocation.high_priority(pairs[name]),
                policy=(
                    settings.cpu_calculate_policy
                    if name == _CPU
                    else settings.memory_calculate_policy
                ),
                threshold_percent=(
                    settings.batch_cpu_threshold_percent
                    if name == _CPU
                    else settings.batch_memory_threshold_percent
                ),
            )
        result[_CPU] = colocation.normalized(result[_CPU], _normalization(node))
        return ResourceList(result)

    def mid(
        self, snapshot: NodeSnapshot, measured: Breakdown | None, reserved: ResourceList
    ) -> ResourceList:
        """Mid allocatable, keyed by ``cpu`` / ``memory`` (static mode needs no usage)."""
        settings = snapshot.settings.colocation
        node = snapshot.node
        capacity = node.status.capacity
        thresholds = {
            _CPU: settings.mid_cpu_threshold_percent,
            _MEMORY: settings.mid_memory_threshold_percent,
        }
        result: dict[str, int] = {}
        if settings.mid_reclaim_mode == colocation.MID_RECLAIM_STATIC:
            percents = {
                _CPU: settings.mid_static_cpu_reserved_percent,
                _MEMORY: settings.mid_static_memory_reserved_percent,
            }
            for name, percent in percents.items():
                ratio = _ratio_label(node, colocation.MID_STATIC_RATIO_LABELS[name])
                result[name] = colocation.mid_static_amount(
                    capacity=capacity.get_amount(name),
                    reserved_percent=colocation.mid_static_percent(percent, ratio),
                    threshold_percent=thresholds[name],
                )
            return ResourceList(result)
        if measured is None:
            return ResourceList(dict.fromkeys(_RESOURCES, 0))
        system = measured.system_used(_MID_BAND)
        requests: dict[str, int] = dict.fromkeys(_RESOURCES, 0)
        for pod in _high_priority(snapshot.pods, _MID_BAND):
            for name in _RESOURCES:
                requests[name] += pod.requests.get_amount(name)
        node_used = measured.node_used
        for name in _RESOURCES:
            cap = capacity.get_amount(name)
            result[name] = colocation.mid_dynamic_amount(
                capacity=cap,
                # Prod reclaimable (predicted peak vs request) is not computed on the node: 0.
                prod_reclaimable=0,
                node_unused=cap - node_used.get_amount(name),
                reserved=reserved.get_amount(name),
                system_used=system.get_amount(name),
                hp_request=requests[name],
                unallocated_percent=settings.mid_unallocated_percent,
                threshold_percent=thresholds[name],
            )
        return ResourceList(result)

    # -- the pass -------------------------------------------------------------------------

    def _outcome(self, resources: ResourceList, *, degraded: bool) -> Outcome:
        gauges = [
            Gauge(
                "node_resource_allocatable",
                float(resources.get_amount(name)),
                {"resource": name, "unit": _LABEL_UNITS[name]},
            )
            for name in _OUTPUT
        ]
        gauges.append(Gauge("batch_resource_degraded", 1.0 if degraded else 0.0))
        return Outcome(node_resources=resources, gauges=tuple(gauges))

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        settings = snapshot.settings.colocation
        capacity = snapshot.node.status.capacity
        if not settings.enable:
            self._last = self._published = None
            return self._outcome(_ZERO, degraded=False)
        measured = self.measure(snapshot)
        if measured is None or not all(capacity.get_amount(n) > 0 for n in _RESOURCES):
            fresh = (
                self._last is not None
                and self._last_measured is not None
                and snapshot.now - self._last_measured <= settings.degrade_time_minutes * 60
            )
            if fresh and self._last is not None:
                return self._outcome(self._last, degraded=False)
            if self._last is not None:
                _log.warning(
                    "no node usage for over %d minutes: Batch and Mid resources reset to 0",
                    settings.degrade_time_minutes,
                )
            self._last = self._published = None
            return self._outcome(_ZERO, degraded=True)
        reserved = nodeinfo.node_reserved(snapshot.node)
        batch = self.batch(snapshot, measured, reserved)
        mid = self.mid(snapshot, measured, reserved)
        resources = ResourceList(
            {
                k.RESOURCE_BATCH_CPU: batch.get_amount(_CPU),
                k.RESOURCE_BATCH_MEMORY: batch.get_amount(_MEMORY),
                k.RESOURCE_MID_CPU: mid.get_amount(_CPU),
                k.RESOURCE_MID_MEMORY: mid.get_amount(_MEMORY),
            }
        )
        self._last = resources
        self._last_measured = snapshot.now
        return self._outcome(self._damped(resources, settings, snapshot.now), degraded=False)

    def _damped(
        self, fresh: ResourceList, settings: ColocationSettings, now: float
    ) -> ResourceList:
        """``fresh``, or what was published before while no resource moved by the diff
        threshold and the update time threshold has not passed since (koord-manager's rule)."""
        threshold = settings.resource_diff_threshold
        published = self._published
        if (
            threshold is None
            or published is None
            or now - self._published_at >= settings.update_time_threshold_seconds
            or any(
                colocation.moved(published.get_amount(name), fresh.get_amount(name), threshold)
                for name in _OUTPUT
            )
        ):
            self._published, self._published_at = fresh, now
            return fresh
        return published


def _high_priority(pods: Iterable[PodState], band: frozenset[PriorityClass]) -> Iterable[PodState]:
    return (p for p in pods if p.active and p.priority_class not in band)
