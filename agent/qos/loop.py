"""The QoS loop: snapshot -> strategies -> writes, evictions and Node resources, every second.

One pass:

1. take the pods from the pod source and build their states (QoS classes, cgroup dirs);
2. sample usage (node, pods, containers, the BE tier); with ``sampling = False`` the loop
   shares the metrics collector's sampler instead: it only states what it needs (the sampler's
   ``requested``) and reads the figures of the collector's latest tick;
3. resolve settings: the agent config's base with the NodeSLO laid over it; a NodeSLO that
   fails validation is reported once and the previous settings stay in force;
4. run every strategy on the same immutable snapshot; combine their outcomes;
5. hand the cgroup writes to the writer (leveled, unchanged values skipped), the evictions to
   the evictor, the Batch/Mid resources to the Node reporter, the gauges to the metrics.

``plan_once`` does steps 1-4 and asks the writer what it *would* write: ``koordpy agent plan``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agent.cgroups.detect import CgroupInfo
from agent.cgroups.paths import qos_dir
from agent.cgroups.writer import CgroupWriter, PlannedWrite, WriteResult
from agent.evictor import Evictor
from agent.metrics.usage import SampleRequest, UsageSampler, host_app_cgroups
from agent.qos import cpu_burst
from agent.qos.framework import CpuInfo, Gauge, NodeSnapshot, Outcome, PodState, Strategy
from agent.qos.settings import QoSSettings, SettingsError, from_nodeslo
from agent.states import pod_states
from apis.core import Node, Pod
from apis.qos import KubeQoS
from apis.resources import ResourceList
from apis.slo import NodeSLOSpec
from runtime import lifecycle

__all__ = ["GaugeCollector", "PassResult", "QoSLoop"]

log = logging.getLogger(__name__)


def _scales_quota(settings: QoSSettings) -> bool:
    """Whether CPU burst scales container quotas (it alone needs per-container samples:
    throttling always, CPU for its limiter)."""
    return settings.gate("CPUBurst") and settings.burst.policy in ("cfsQuotaBurstOnly", "auto")


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one pass decided and did."""

    snapshot: NodeSnapshot
    outcome: Outcome
    results: tuple[WriteResult, ...] = ()
    evicted: tuple[str, ...] = ()

    @property
    def written(self) -> int:
        return sum(1 for r in self.results if r.status == "written")


@dataclass(slots=True, eq=False)
class GaugeCollector(Collector):
    """Exports the gauges of the last pass as ``koordlet_<name>{node, ...}``."""

    node: str
    gauges: tuple[Gauge, ...] = ()
    prefix: str = "koordlet_"

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families: dict[tuple[str, tuple[str, ...]], GaugeMetricFamily] = {}
        for gauge in self.gauges:
            names = ("node", *sorted(gauge.labels))
            key = (gauge.name, names)
            family = families.get(key)
            if family is None:
                family = GaugeMetricFamily(
                    self.prefix + gauge.name, f"koordpy QoS: {gauge.name}", labels=list(names)
                )
                families[key] = family
            family.add_metric([self.node, *(gauge.labels[n] for n in names[1:])], gauge.value)
        return list(families.values())


@dataclass(slots=True)
class QoSLoop:
    """The agent's QoS component (``name = "qos"``); see the module docstring."""

    node_name: str
    cgroup: CgroupInfo
    writer: CgroupWriter
    sampler: UsageSampler
    strategies: Sequence[Strategy]
    pods: Callable[[], Sequence[Pod]]
    node: Callable[[], Node]
    cpus: tuple[CpuInfo, ...]
    base_settings: QoSSettings
    nodeslo: Callable[[], NodeSLOSpec | None] = lambda: None
    evictor: Evictor | None = None
    on_node_resources: Callable[[ResourceList | None], None] | None = None
    #: Told of every pass's result (the agent's health metrics count its failed writes).
    on_pass: Callable[[PassResult], object] | None = None
    gauges: GaugeCollector | None = None
    interval: float = 1.0
    clock: Callable[[], float] = time.monotonic
    name: str = "qos"
    #: Set once the pod source has its first list; passes wait for it (up to ``sync_timeout``).
    synced: asyncio.Event | None = None
    sync_timeout: float = 30.0
    #: Sample usage each pass (the default); ``False`` when the metrics collector samples the
    #: same sampler every tick (see the module docstring).
    sampling: bool = True
    _settings: QoSSettings | None = field(default=None, init=False)
    #: strategy name -> the loop time before which it is not run again (its ``interval``).
    _due: dict[str, float] = field(default_factory=dict, init=False)
    _slo_seen: NodeSLOSpec | None = field(default=None, init=False)
    _slo_error: str = field(default="", init=False)
    #: The pod list the states below were built from (a tuple: immutable).
    _pods_seen: tuple[Pod, ...] | None = field(default=None, init=False)
    _states: tuple[PodState, ...] = field(default=(), init=False)

    def settings(self) -> QoSSettings:
        """The base settings with the NodeSLO laid over; a bad NodeSLO keeps the previous."""
        spec = self.nodeslo()
        if self._settings is not None and spec == self._slo_seen:
            return self._settings
        try:
            settings = from_nodeslo(spec, self.base_settings)
        except SettingsError as err:
            if str(err) != self._slo_error:
                log.error("NodeSLO refused, keeping the previous settings: %s", err)
                self._slo_error = str(err)
            return self._settings or self.base_settings
        self._slo_error = ""
        self._slo_seen = spec
        self._settings = settings
        return settings

    def due(self, now: float) -> list[Strategy]:
        """The strategies that run at ``now`` (every one without an ``interval``)."""
        return [s for s in self.strategies if now >= self._due.get(s.name, now)]

    def _pod_states(self) -> tuple[PodState, ...]:
        """The pods' states; the last ones while the pod source hands out the same tuple."""
        pods = self.pods()
        if pods is not self._pods_seen:
            self._states = pod_states(pods, self.cgroup)
            self._pods_seen = pods if type(pods) is tuple else None
        return self._states

    def _wants_memory(self, strategies: Sequence[Strategy], settings: QoSSettings) -> bool:
        for strategy in strategies:
            wants = getattr(strategy, "wants_memory", None)
            if wants is not None and wants(settings):
                return True
        return False

    def snapshot(self, strategies: Sequence[Strategy] | None = None) -> NodeSnapshot:
        """The node as ``strategies`` (default: all) need it sampled."""
        settings = self.settings()
        wanted = self.strategies if strategies is None else strategies
        states = self._pod_states()
        tiers = [
            qos_dir(self.cgroup, KubeQoS.BEST_EFFORT),
            qos_dir(self.cgroup, KubeQoS.GUARANTEED),  # the kubepods root: every pod together
        ]
        scaling = _scales_quota(settings)
        request = SampleRequest(
            extra_cgroups=tuple(tiers),
            host_apps=host_app_cgroups(settings.host_applications, self.cgroup),
            containers=cpu_burst.eligible if scaling else False,
            container_cpu=scaling and settings.burst.cfs_quota_burst_period_seconds >= 0,
            memory=self._wants_memory(wanted, settings),
        )
        if self.sampling:
            self.sampler.sample(
                states,
                request.extra_cgroups,
                host_apps=request.host_apps,
                containers=request.containers,
                container_cpu=request.container_cpu,
                memory=request.memory,
            )
        else:
            self.sampler.requested = request
        return NodeSnapshot(
            now=self.clock(),
            node=self.node(),
            cgroup=self.cgroup,
            settings=settings,
            pods=states,
            cpus=self.cpus,
            usage=self.sampler,
            current=self.writer.current(),
        )

    def decide(
        self, snapshot: NodeSnapshot, strategies: Sequence[Strategy] | None = None
    ) -> Outcome:
        """Every strategy's outcome on ``snapshot`` (default: all strategies), combined."""
        total = Outcome()
        for strategy in self.strategies if strategies is None else strategies:
            try:
                total = total + strategy.plan(snapshot)
            except Exception:
                # One broken strategy must not stop the others (it is logged every pass).
                log.exception("strategy %s failed", strategy.name)
        return total

    def plan_once(self) -> tuple[NodeSnapshot, Outcome, list[PlannedWrite]]:
        """One pass that writes nothing: what the writer would do with the outcome."""
        snapshot = self.snapshot()
        outcome = self.decide(snapshot)
        return snapshot, outcome, self.writer.plan(outcome.writes)

    async def run_once(self) -> PassResult:
        now = self.clock()
        due = self.due(now)
        for strategy in due:
            interval = getattr(strategy, "interval", None)
            if interval:
                self._due[strategy.name] = now + interval
        snapshot = self.snapshot(due)
        outcome = self.decide(snapshot, due)
        results = tuple(self.writer.apply(outcome.writes))
        evicted: list[str] = []
        if self.evictor is not None:
            for eviction in outcome.evictions:
                if await self.evictor.evict(eviction):
                    meta = eviction.pod.metadata
                    evicted.append(f"{meta.namespace}/{meta.name}")
        if self.on_node_resources is not None and outcome.node_resources is not None:
            self.on_node_resources(outcome.node_resources)
        if self.gauges is not None:
            self.gauges.gauges = outcome.gauges
        result = PassResult(
            snapshot=snapshot, outcome=outcome, results=results, evicted=tuple(evicted)
        )
        if self.on_pass is not None:
            self.on_pass(result)
        return result

    async def run(self) -> None:
        if self.synced is not None and not self.synced.is_set():
            try:
                async with asyncio.timeout(self.sync_timeout):
                    await self.synced.wait()
            except TimeoutError:
                log.warning(
                    "no pod list after %.0f s; QoS starts with the pods known so far",
                    self.sync_timeout,
                )
        ticker = lifecycle.Ticker(self.interval)
        while True:
            await self.run_once()
            await ticker.wait()
