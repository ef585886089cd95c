"""The metrics collector: one sample of the node per tick, for metrics, NodeMetric and QoS.

Every ``[metrics] collect_interval`` (default 1 s) the :class:`Collector` takes one sample
through the agent's :class:`~agent.metrics.usage.UsageSampler`, publishes it as an immutable
:class:`~agent.metrics.snapshot.MetricsSnapshot` (:attr:`Collector.latest`) and records it in
the :class:`~agent.metrics.windows.Windows` that :meth:`Collector.nodemetric` builds NodeMetric
from. When the QoS loop shares the sampler (``QoSLoop.sampling = False``) it samples nothing
itself: it states its needs in the sampler's ``requested`` and reads this tick's figures, so
every file is read once per tick for both.

What one tick holds:

* the node: CPU over the last tick (``/proc/stat``), memory per ``memory_policy``:
  ``usageWithoutPageCache`` = MemTotal - MemAvailable, ``usageWithPageCache`` = MemTotal -
  MemFree; ``usageWithHotPageCache`` needs the kernel's hot page cache accounting (kidled),
  which koordpy does not read: it is counted as ``usageWithoutPageCache``;
* every active pod: CPU over the last tick, its QoS and priority class and requests;
* the NodeSLO's host applications: CPU over the last tick (memory as for the pods);
* the system usage: node minus pods minus host applications, never below 0 (a pod or
  application with no figure counts as 0);
* the share pools' CPU (the ``pools`` callable names their CPUs; none known: no figure) and the
  devices' latest readings (the ``devices`` callable);
* read every ``detail_interval`` (default 10 s, koordlet's PSI interval), and in between the
  figures of that read: the pods' (and host applications') memory per the policy (without
  page cache: anon + unevictable of ``memory.stat``; with page cache:
  ``memory.usage_in_bytes`` / ``memory.current``), working set (usage minus inactive file)
  and throttling; the running containers (CPU and throttling averaged since the previous
  read, memory, working set); PSI of the node, pods and containers (off with ``[metrics] psi
  = false``; cgroup PSI only where the kernel has the files). Memory is read every tick while
  the QoS loop asks for it (its eviction strategies).

Why two paces: the bulk of the files are the memory and container files (four per cgroup on
v1): some 2,600 reads and tens of milliseconds of CPU per pass at 150 pods and 500
containers; every second, they alone would take the agent's whole budget (2 % of a core).
CPU figures come from cumulative counters, so averages over any window lose nothing; memory
for NodeMetric's 5-minute average is sampled 30 times.

Without cgroups (``cgroup=None``) only the node figures and devices are collected.

The node's NodeMetric spec (the ``policy`` callable, :mod:`agent.metrics.policy`) is laid over
``[metrics]`` at each tick: its aggregate duration and windows resize the windows (their
history starts again), its memory policy chooses the memory figures, and :attr:`settings`
carries its report interval for the reporter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, NamedTuple

from agent.cgroups.detect import CgroupInfo
from agent.cgroups.paths import qos_dir
from agent.config import AgentConfig, MetricsSection
from agent.devices.base import DeviceReading
from agent.metrics.nodemetric import build_nodemetric
from agent.metrics.policy import followed
from agent.metrics.snapshot import (
    CgroupUsage,
    ContainerUsage,
    HostAppUsage,
    MetricsSnapshot,
    PodUsage,
    Pressure,
)
from agent.metrics.usage import (
    CgroupReader,
    Detail,
    HierarchyReader,
    MemoryFigures,
    NoCgroups,
    UsageSampler,
    host_app_cgroups,
)
from agent.metrics.windows import Windows
from agent.qos.framework import PodState
from agent.states import PodStateCache, pod_states
from apis.core import Pod
from apis.qos import KubeQoS
from apis.resources import ResourceList
from apis.slo import HostApplicationSpec, NodeMetric, NodeMetricSpec, NodeSLOSpec
from runtime import lifecycle

__all__ = ["DETAIL_INTERVAL", "Collector", "SharePools", "build_collector", "build_sampler"]

log = logging.getLogger(__name__)

#: Seconds between reads of containers, pod throttling and PSI (koordlet's PSI interval).
DETAIL_INTERVAL: Final = 10.0
#: Open cgroup files not read for this long are closed.
_SWEEP_SECONDS: Final = 60.0
_NO_PRESSURE: Mapping[str, Pressure] = {}
_NO_APPS: Mapping[str, str] = {}


class SharePools(NamedTuple):
    """The CPUs of the LS and BE share pools (empty: not known)."""

    ls: tuple[int, ...] = ()
    be: tuple[int, ...] = ()


def _no_pods() -> Sequence[Pod]:
    return ()


def _no_policy() -> NodeMetricSpec | None:
    return None


def _no_nodeslo() -> NodeSLOSpec | None:
    return None


def _no_devices() -> tuple[DeviceReading, ...]:
    return ()


def _no_pools() -> tuple[Sequence[int], Sequence[int]]:
    return SharePools()


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Slow:
    """A pod's figures read every ``detail_interval``, kept between those reads."""

    throttled_ratio: float | None
    pressure: Mapping[str, Pressure]
    containers: tuple[ContainerUsage, ...]


_NOT_YET = _Slow(None, _NO_PRESSURE, ())


@dataclass(frozen=True, slots=True)
class _Pod:
    """What a tick reports of an active pod that only its state decides."""

    uid: str
    name: str
    namespace: str
    qos: str
    priority: str
    cgroup: str
    requests: ResourceList

    @classmethod
    def of(cls, state: PodState) -> _Pod:
        return cls(
            uid=state.uid,
            name=state.name,
            namespace=state.namespace,
            qos=str(state.qos),
            priority=str(state.priority_class),
            cgroup=state.cgroup,
            requests=state.requests,
        )


@dataclass(slots=True, eq=False)
class Collector:
    """The agent's metrics component (``name = "metrics"``); see the module docstring."""

    node: str
    sampler: UsageSampler
    windows: Windows
    settings: MetricsSection
    cgroup: CgroupInfo | None = None
    pods: Callable[[], Sequence[Pod]] = _no_pods
    nodeslo: Callable[[], NodeSLOSpec | None] = _no_nodeslo
    #: The node's NodeMetric spec as the controller sent it (``None``: none yet).
    policy: Callable[[], NodeMetricSpec | None] = _no_policy
    devices: Callable[[], tuple[DeviceReading, ...]] = _no_devices
    #: The CPUs of the LS and BE share pools (a :class:`SharePools` or a pair of sequences).
    pools: Callable[[], tuple[Sequence[int], Sequence[int]]] = _no_pools
    detail_interval: float = DETAIL_INTERVAL
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], datetime] = _utcnow
    name: str = "metrics"
    #: The last tick's snapshot; ``None`` before the first.
    latest: MetricsSnapshot | None = field(default=None, init=False)
    _states: PodStateCache = field(default_factory=PodStateCache, init=False)
    #: The pod list the active states below were worked out from (a tuple: immutable).
    _pods_seen: tuple[Pod, ...] | None = field(default=None, init=False)
    _active: tuple[PodState, ...] = field(default=(), init=False)
    _rows: tuple[_Pod, ...] = field(default=(), init=False)
    _slo_seen: object = field(default=None, init=False)
    _apps: tuple[Mapping[str, str], Mapping[str, HostApplicationSpec]] = field(
        default=(_NO_APPS, {}), init=False
    )
    _tiers: tuple[str, ...] = field(default=(), init=False)
    _detail_due: float = field(default=float("-inf"), init=False)
    _slow: dict[str, _Slow] = field(default_factory=dict, init=False)
    #: ``[metrics]`` as configured; :attr:`settings` is it with the NodeMetric spec laid over.
    _configured: MetricsSection = field(init=False)
    _policy_seen: object = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._configured = self.settings
        if self.detail_interval <= 0:
            raise ValueError(f"detail_interval must be positive, got {self.detail_interval}")
        if self.cgroup is not None:
            # The BE tier and the kubepods root (every pod together), as the QoS loop uses.
            self._tiers = (
                qos_dir(self.cgroup, KubeQoS.BEST_EFFORT),
                qos_dir(self.cgroup, KubeQoS.GUARANTEED),
            )

    @property
    def interval(self) -> float:
        return self.settings.collect_interval

    def _host_apps(self) -> tuple[Mapping[str, str], Mapping[str, HostApplicationSpec]]:
        """name -> cgroup and name -> spec of the NodeSLO's host applications (cached)."""
        spec = self.nodeslo()
        if spec is not self._slo_seen:
            self._slo_seen = spec
            if spec is None or self.cgroup is None or not spec.host_applications:
                self._apps = (_NO_APPS, {})
            else:
                cgroups = host_app_cgroups(spec.host_applications, self.cgroup)
                specs = {a.name: a for a in spec.host_applications if a.name in cgroups}
                self._apps = (cgroups, specs)
        return self._apps

    def _active_pods(self) -> tuple[tuple[PodState, ...], tuple[_Pod, ...]]:
        """The active pods' states and what they report; worked out again only when the pod
        source hands out another list (it keeps its tuple of immutable pods until a change)."""
        if self.cgroup is None:
            return (), ()
        pods = self.pods()
        if pods is self._pods_seen:
            return self._active, self._rows
        every = pod_states(pods, self.cgroup, cache=self._states)
        self._active = tuple(s for s in every if s.active)
        self._rows = tuple(_Pod.of(s) for s in self._active)
        self._pods_seen = pods if type(pods) is tuple else None
        return self._active, self._rows

    def _memory(self, figures: MemoryFigures | None) -> int | None:
        if figures is None:
            return None
        if self.settings.memory_policy == "usageWithPageCache":
            return figures.usage
        return figures.without_cache

    def _usage(
        self,
        cgroup: str,
        cpu: float | None,
        throttled_ratio: float | None,
        pressure: Mapping[str, Pressure],
    ) -> CgroupUsage:
        figures = self.sampler.memory(cgroup)
        return CgroupUsage(
            cpu=cpu,
            memory=self._memory(figures),
            working_set=figures.working_set if figures is not None else None,
            throttled_ratio=throttled_ratio,
            pressure=pressure,
        )

    def _slow_figures(self, state: PodState, window: float) -> _Slow:
        sampler = self.sampler
        containers = []
        for container in state.containers:
            cgroup = container.cgroup
            if cgroup is None or not container.running:
                continue
            usage = self._usage(
                cgroup,
                sampler.cgroup_cpu(cgroup, window),
                sampler.throttled_ratio(cgroup, window),
                sampler.pressure(cgroup),
            )
            containers.append(
                ContainerUsage(
                    name=container.name, container_id=container.container_id, usage=usage
                )
            )
        return _Slow(
            throttled_ratio=sampler.throttled_ratio(state.cgroup, window),
            pressure=sampler.pressure(state.cgroup),
            containers=tuple(containers),
        )

    def follow_policy(self) -> MetricsSection:
        """Lay the NodeMetric spec over ``[metrics]`` when it changed; the settings now."""
        spec = self.policy()
        if spec is self._policy_seen:
            return self.settings
        self._policy_seen = spec
        settings: MetricsSection = followed(self._configured, spec)
        windows = self.windows
        if (
            settings.aggregate_duration != windows.aggregate_duration
            or settings.aggregate_durations != windows.durations
        ):
            log.info(
                "NodeMetric of %s: aggregate duration %ss, windows %s (history restarts)",
                self.node,
                settings.aggregate_duration,
                settings.aggregate_durations,
            )
            self.windows = Windows(
                interval=windows.interval,
                aggregate_duration=settings.aggregate_duration,
                durations=settings.aggregate_durations,
            )
        self.settings = settings
        return settings

    def collect(self) -> MetricsSnapshot:
        """Take one tick's sample, publish it as :attr:`latest` and record it."""
        self.follow_policy()
        started = time.perf_counter()
        taken_at = self.wall()
        sampler = self.sampler
        states, rows = self._active_pods()
        app_cgroups, app_specs = self._host_apps()
        request = sampler.requested
        now = self.clock()
        detailed = now >= self._detail_due
        if detailed:
            # Half a tick early, so that clock jitter never skips a due read.
            self._detail_due = now + self.detail_interval - self.interval / 2
        ls_pool, be_pool = self.pools()
        extra = self._tiers
        if request.extra_cgroups:
            extra = tuple(dict.fromkeys((*extra, *request.extra_cgroups)))
        host_apps = {**request.host_apps, **app_cgroups} if request.host_apps else app_cgroups
        sampler.sample(
            states,
            extra,
            host_apps=host_apps,
            containers=request.containers,
            container_cpu=request.container_cpu,
            memory=request.memory or detailed,
            detail=Detail(
                containers=detailed,
                pod_throttle=detailed,
                working_set=True,
                pressure=detailed and self.settings.psi,
                per_cpu=bool(ls_pool or be_pool),
            ),
        )

        window = max(self.detail_interval - self.interval / 2, self.interval / 2)
        slow = self._slow
        if detailed:
            slow = self._slow = {s.uid: self._slow_figures(s, window) for s in states}
        pods = []
        pods_cpu = pods_memory = 0.0
        cpu_last = sampler.cgroup_cpu_last
        for row in rows:
            figures = slow.get(row.uid, _NOT_YET)
            usage = self._usage(
                row.cgroup, cpu_last(row.cgroup), figures.throttled_ratio, figures.pressure
            )
            pods_cpu += usage.cpu or 0.0
            pods_memory += usage.memory or 0
            pods.append(
                PodUsage(
                    uid=row.uid,
                    name=row.name,
                    namespace=row.namespace,
                    qos=row.qos,
                    priority=row.priority,
                    usage=usage,
                    containers=figures.containers,
                    requests=row.requests,
                )
            )
        apps = []
        for name, cgroup in app_cgroups.items():
            spec = app_specs[name]
            usage = self._usage(cgroup, sampler.cgroup_cpu_last(cgroup), None, _NO_PRESSURE)
            pods_cpu += usage.cpu or 0.0
            pods_memory += usage.memory or 0
            apps.append(HostAppUsage(name=name, qos=spec.qos, priority=spec.priority, usage=usage))

        node_cpu = sampler.node_cpu_last()
        if self.settings.memory_policy == "usageWithPageCache":
            node_memory = sampler.node_memory_with_cache()
        else:
            node_memory = sampler.node_memory()
        snapshot = MetricsSnapshot(
            node=self.node,
            taken_at=taken_at,
            monotonic=sampler.sampled_at if sampler.sampled_at is not None else now,
            node_cpu=node_cpu,
            node_memory=node_memory,
            system_cpu=max(node_cpu - pods_cpu, 0.0) if node_cpu is not None else None,
            system_memory=(
                max(node_memory - round(pods_memory), 0) if node_memory is not None else None
            ),
            node_pressure=sampler.node_pressure if self.settings.psi else _NO_PRESSURE,
            pods=tuple(pods),
            host_apps=tuple(apps),
            share_pool_cpus=tuple(ls_pool),
            share_pool_cpu=sampler.cpus_cpu(ls_pool) if ls_pool else None,
            be_share_pool_cpus=tuple(be_pool),
            be_share_pool_cpu=sampler.cpus_cpu(be_pool) if be_pool else None,
            devices=self.devices(),
            duration=time.perf_counter() - started,
        )
        self.latest = snapshot
        self.windows.record(snapshot)
        return snapshot

    def nodemetric(self) -> NodeMetric | None:
        """The NodeMetric built from the windows now; ``None`` before the first tick."""
        if self.latest is None:
            return None
        self.follow_policy()
        return build_nodemetric(
            self.node, self.windows.aggregate(), self.latest, self.settings, now=self.wall()
        )

    async def run(self) -> None:
        ticker = lifecycle.Ticker(self.interval)
        while True:
            self.collect()
            await ticker.wait()


def build_sampler(
    cfg: AgentConfig,
    cgroup: CgroupInfo | None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> UsageSampler:
    """The sampler the collector drives (and the QoS loop may share): over this host's
    cgroups, or over none (node figures only)."""
    reader: CgroupReader = (
        HierarchyReader(cgroup, clock=clock) if cgroup is not None else NoCgroups()
    )
    return UsageSampler(
        cfg.host,
        reader,
        clock=clock,
        interval=cfg.metrics.collect_interval,
        sweep_seconds=_SWEEP_SECONDS,
    )


def build_collector(
    cfg: AgentConfig,
    *,
    node: str,
    cgroup: CgroupInfo | None,
    pods: Callable[[], Sequence[Pod]] = _no_pods,
    nodeslo: Callable[[], NodeSLOSpec | None] = _no_nodeslo,
    policy: Callable[[], NodeMetricSpec | None] = _no_policy,
    devices: Callable[[], tuple[DeviceReading, ...]] = _no_devices,
    pools: Callable[[], tuple[Sequence[int], Sequence[int]]] = _no_pools,
    sampler: UsageSampler | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], datetime] = _utcnow,
    detail_interval: float = DETAIL_INTERVAL,
) -> Collector:
    """The collector of ``node`` as ``cfg`` describes it (see the module docstring).

    ``sampler``: the sampler to drive (default: :func:`build_sampler`); hand the same one to
    :func:`agent.qos.service.build_loop` so the QoS loop reads this collector's ticks.
    ``clock`` (monotonic seconds) must be the sampler's; ``wall`` dates the snapshots.
    """
    settings = cfg.metrics
    return Collector(
        node=node,
        sampler=sampler if sampler is not None else build_sampler(cfg, cgroup, clock=clock),
        windows=Windows(
            interval=settings.collect_interval,
            aggregate_duration=settings.aggregate_duration,
            durations=settings.aggregate_durations,
        ),
        settings=settings,
        cgroup=cgroup,
        pods=pods,
        nodeslo=nodeslo,
        policy=policy,
        devices=devices,
        pools=pools,
        detail_interval=detail_interval,
        clock=clock,
        wall=wall,
    )
