"""The agent's lifecycle: detect, probe, collect, report, until told to stop.

:func:`run` proceeds in order:

1. resolve the node name; detect the cgroup version and driver (absent cgroups degrade: the
   Node carries no cgroup labels, and metrics cover the node and its devices only);
2. probe devices once; a probe error other than ``Unsupported`` fails the start;
3. connect the transport (announces ``online``) and publish the first Node and Device; then
   ``ready`` is set;
4. run the supervised components until ``stop`` is set: the :class:`Reporter` (Node and
   Device), the metrics collector (:mod:`agent.metrics.collector`, one tick every
   ``[metrics] collect_interval``), the :class:`NodeMetricReporter` (NodeMetric every
   ``[metrics] report_interval``, the first as soon as a tick measured the node's CPU), and,
   with cgroups, the pod source and the NodeSLO follower; with ``qos``, the QoS loop, which
   reads the collector's ticks instead of sampling on its own;
5. on the way out the transport announces ``offline`` and closes cleanly (or, after a fatal
   error, disconnects so its will says ``offline``).

With a metrics ``registry`` the agent exports on it, for as long as it runs: the node's,
pods' and containers' usage in koordlet's names (:mod:`agent.metrics.exporter`), the device
readings and probe statistics (:mod:`agent.devices.metrics`), the QoS gauges, and its own
health (:mod:`agent.metrics.health`: reports sent or failed, failed cgroup writes, collection
time, component restarts).

Several agents may run in one process (``koordpy up --demo``), one per node, on one bus.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec
from prometheus_client import CollectorRegistry, Counter

from agent.cgroups import detect
from agent.cgroups.cpuset import CpuSet
from agent.config import AgentConfig
from agent.devices import metrics as device_metrics
from agent.devices.base import (
    DeviceProbe,
    DeviceReading,
    ProbeObserver,
    ProbeResult,
    build_device,
    probe_all,
    probes_for,
)
from agent.devices.events import health_events
from agent.errors import Unsupported
from agent.evictor import Evictor, KubeEvictor
from agent.metrics import exporter, health
from agent.metrics.collector import Collector, SharePools, build_collector, build_sampler
from agent.metrics.policy import NodeMetricSpecFollower
from agent.metrics.usage import UsageSampler
from agent.node import HostFacts, build_node, node_name, read_host_facts
from agent.pods.apiserver import ApiServerPodSource
from agent.pods.base import PodSource
from agent.qos import service
from agent.qos.cpuset_pool import bound_cpus, kubelet_pinned_cpus, node_excluded_cpus
from agent.qos.framework import CpuInfo
from agent.qos.loop import QoSLoop
from agent.report.bus import BusPublisher
from agent.report.kubernetes import KubePublisher, NodeObjects
from agent.report.transport import NullPublisher, Publisher
from agent.states import PodStateCache, cpu_topology, pod_states
from apis.core import Node, Pod
from apis.meta import REPORTED_AT_ANNOTATION, ObjectMeta
from apis.qos import QoSClass
from apis.resources import ResourceList
from apis.scheduling import Device
from apis.slo import NodeMetric
from runtime import lifecycle
from runtime.bus import Bus
from runtime.kube.client import KubeClient

__all__ = ["DEVICE_INTERVAL", "NodeMetricReporter", "Reporter", "device_of", "run"]

_log = logging.getLogger(__name__)

#: Seconds after which an unchanged Device is published again (with a new report time), so
#: the controller can tell a live report from a stale one; a change is published at once.
DEVICE_INTERVAL: Final = 30.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


def device_of(node: str, results: Sequence[ProbeResult]) -> Device:
    """The Device ``node`` reports for these probe results (before its report time is
    stamped); ``koordpy agent devices`` prints the same."""
    return build_device(Node(metadata=ObjectMeta(name=node)), results)


class Reporter:
    """Probes, then publishes the Node and Device of one node, every interval and when woken.

    A device whose health changed is told as an Event on the Node
    (:func:`agent.devices.events.health_events`). A body identical to the last one is not sent
    again; the Node's Ready heartbeat is refreshed
    only when the Node changed or ``heartbeat`` seconds have passed, and the Device's report
    time (``koordpy.io/reported-at``) when its content changed or ``device_interval`` seconds
    have passed, so an idle node publishes its Node once per ``heartbeat`` and its Device once
    per ``device_interval``. Checks run every ``interval`` seconds, or every
    ``device_interval`` when that is shorter. The results of the latest probe run are kept
    (:attr:`last_results`: the device metrics read them); ``observe`` is told of every probe
    run.
    """

    def __init__(
        self,
        *,
        node: str,
        publisher: Publisher,
        probes: Sequence[DeviceProbe],
        facts: Callable[[], HostFacts],
        cgroup: detect.CgroupInfo | None,
        interval: float,
        heartbeat: float,
        probe_timeout: float,
        device_interval: float = DEVICE_INTERVAL,
        observe: ProbeObserver | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.node = node
        self.name = f"reporter/{node}"
        self.wakeup = asyncio.Event()
        self._publisher = publisher
        self._probes = tuple(probes)
        self._facts = facts
        self._cgroup = cgroup
        self._interval = interval
        self._heartbeat_every = timedelta(seconds=heartbeat)
        self._probe_timeout = probe_timeout
        self._device_every = timedelta(seconds=device_interval)
        self._observe = observe
        self._clock = clock
        self._ready_since = clock()
        self._heartbeat: datetime | None = None
        self._node: Node | None = None
        self._device: Device | None = None
        #: When the last Device was stamped (its content changed or it was refreshed).
        self._device_stamped: datetime | None = None
        self._extended: ResourceList | None = None
        self._results: tuple[ProbeResult, ...] = ()

    @property
    def last_node(self) -> Node | None:
        return self._node

    @property
    def last_device(self) -> Device | None:
        return self._device

    @property
    def last_results(self) -> tuple[ProbeResult, ...]:
        """What the probes found in the latest run (before it was published)."""
        return self._results

    def trigger(self) -> None:
        """Report now (a device or node change was noticed)."""
        self.wakeup.set()

    def set_extended_resources(self, resources: ResourceList | None) -> None:
        """Resources the QoS loop computed (Batch/Mid); a change is reported at once."""
        if resources != self._extended:
            self._extended = resources
            self.trigger()

    async def run(self) -> None:
        ticker = lifecycle.Ticker(min(self._interval, self._device_every.total_seconds()))
        while True:
            await ticker.wait(self.wakeup)
            self.wakeup.clear()
            await self.report()

    def _stamped(self, device: Device, now: datetime) -> Device:
        """``device`` stamped with its report time: the previous stamp while the content is
        unchanged and younger than the device interval, else ``now``."""
        previous = self._device
        stamped = self._device_stamped
        if previous is not None and stamped is not None and now - stamped < self._device_every:
            unstamped = dict(previous.metadata.annotations)
            unstamped.pop(REPORTED_AT_ANNOTATION, None)
            same = (
                msgspec.structs.replace(
                    previous,
                    metadata=msgspec.structs.replace(previous.metadata, annotations=unstamped),
                )
                == device
            )
            if same:
                return previous
        self._device_stamped = now
        annotations = {**device.metadata.annotations, REPORTED_AT_ANNOTATION: now.isoformat()}
        return msgspec.structs.replace(
            device, metadata=msgspec.structs.replace(device.metadata, annotations=annotations)
        )

    async def report(self, results: Sequence[ProbeResult] | None = None) -> None:
        """Probe (unless ``results`` are given), build and publish Node then Device."""
        if results is None:
            results = await probe_all(
                self._probes, limit=self._probe_timeout, observe=self._observe
            )
        self._results = tuple(results)
        facts = await asyncio.to_thread(self._facts)
        now = self._clock()
        device = self._stamped(device_of(self.node, results), now)

        def node_at(heartbeat: datetime) -> Node:
            return build_node(
                self.node,
                facts,
                heartbeat=heartbeat,
                ready_since=self._ready_since,
                cgroup=self._cgroup,
                device=device,
                extended=self._extended,
            )

        node = node_at(self._heartbeat or now)
        if (
            self._heartbeat is None
            or node != self._node
            or now - self._heartbeat >= self._heartbeat_every
        ):
            self._heartbeat = now
            node = node_at(now)
        await self._publisher.report("node", node)
        await self._publisher.report("device", device)
        for event in health_events(self._device, device, node=self.node, now=now):
            await self._publisher.event(event)
        self._node = node
        self._device = device


class NodeMetricReporter:
    """Publishes the node's NodeMetric every ``interval`` seconds.

    The first is published once ``measured`` is set (a collector tick measured the node's
    CPU: CPU is a difference, so the second tick), then one every ``interval`` (a callable:
    read after each report, so a new ``reportIntervalSeconds`` takes over from the next).
    :attr:`last` is the last one published (the exporter's ``koordlet_node_metric_*``
    series). A publish that fails fails the component, which its supervisor restarts: the
    next attempt comes after its backoff.
    """

    def __init__(
        self,
        *,
        node: str,
        publisher: Publisher,
        build: Callable[[], NodeMetric | None],
        measured: asyncio.Event,
        interval: float | Callable[[], float],
    ) -> None:
        self.name = f"nodemetric/{node}"
        self.last: NodeMetric | None = None
        self._publisher = publisher
        self._build = build
        self._measured = measured
        self._interval = interval if callable(interval) else (lambda: interval)

    async def report(self) -> bool:
        """Build and publish one NodeMetric now; ``False`` when there is none yet."""
        metric = self._build()
        if metric is None:
            return False
        await self._publisher.report("nodemetric", metric)
        self.last = metric
        return True

    async def run(self) -> None:
        await self._measured.wait()
        ticker = lifecycle.Ticker(self._interval())
        while True:
            await ticker.wait()
            await self.report()
            interval = self._interval()
            if interval != ticker.interval:
                ticker = lifecycle.Ticker(interval)
                await ticker.wait()  # tick 0, at once: the next report is one interval on


class _Collecting:
    """Drives the collector's ticks and times each one (the agent's health); sets
    ``measured`` once a tick measured the node's CPU."""

    def __init__(self, node: str, collector: Collector, health: health.NodeHealth) -> None:
        self.name = f"metrics/{node}"
        self.measured = asyncio.Event()
        self._collector = collector
        self._health = health

    async def run(self) -> None:
        ticker = lifecycle.Ticker(self._collector.interval)
        while True:
            await ticker.wait()  # the first tick at once, then one every interval
            snapshot = self._collector.collect()
            self._health.collected(snapshot)
            if snapshot.node_cpu is not None:
                self.measured.set()


class _SharePoolsOf:
    """The CPUs of the LS and BE share pools as the cpuset pool strategy draws them: every
    CPU less the kubelet's pinned and the node's excluded CPUs, less the CPUs bound to pods
    (LS pool) or to LSE pods (BE pool). Recomputed when the pods or the Node change."""

    def __init__(
        self,
        cgroup: detect.CgroupInfo,
        cpus: Sequence[CpuInfo],
        pods: Callable[[], Sequence[Pod]],
        node: Callable[[], Node | None],
    ) -> None:
        self._cgroup = cgroup
        self._all = CpuSet(c.cpu for c in cpus)
        self._pods = pods
        self._node = node
        self._states = PodStateCache()
        self._seen: tuple[object, object] = (None, None)
        self._pools = SharePools()

    def __call__(self) -> SharePools:
        pods, node = self._pods(), self._node()
        if node is None or not self._all:
            return SharePools()
        if self._seen[0] is not pods or self._seen[1] is not node:
            states = pod_states(pods, self._cgroup, cache=self._states)
            base = self._all - kubelet_pinned_cpus(node) - node_excluded_cpus(node)
            self._pools = SharePools(
                ls=tuple(base - bound_cpus(states)),
                be=tuple(base - bound_cpus(states, QoSClass.LSE)),
            )
            self._seen = (pods, node)
        return self._pools


def _no_pods() -> Sequence[Pod]:
    return ()


def _no_pools() -> SharePools:
    return SharePools()


def _readings(reporter: Reporter) -> Callable[[], tuple[DeviceReading, ...]]:
    """The latest probe run's device readings."""

    def readings() -> tuple[DeviceReading, ...]:
        return tuple(r for result in reporter.last_results for r in result.readings)

    return readings


def _detect_cgroups(cfg: AgentConfig) -> detect.CgroupInfo | None:
    try:
        return detect.detect(cfg.host, cfg.cgroup)
    except Unsupported as err:
        _log.warning("cgroups not available, running without them: %s", err)
        return None


async def run(
    cfg: AgentConfig,
    *,
    bus: Bus | None,
    stop: asyncio.Event,
    kube: KubeClient | None = None,
    node: str | None = None,
    probes: Sequence[DeviceProbe] | None = None,
    facts: Callable[[], HostFacts] | None = None,
    detect_cgroups: bool = True,
    qos: bool = False,
    restarts_metric: Counter | None = None,
    registry: CollectorRegistry | None = None,
    ready: asyncio.Event | None = None,
    clock: Callable[[], datetime] = _utcnow,
) -> None:
    """Run one node's agent on ``bus`` until ``stop`` is set.

    ``node`` defaults to ``[agent] node_name``, ``$NODE_NAME`` or the hostname; ``probes`` to
    the probes the config asks for (:func:`agent.devices.base.probes_for`); ``facts`` to this
    host's (:func:`agent.node.read_host_facts`). ``ready`` is set once the first Node and
    Device are published. ``bus`` None: nothing is reported (``[report] transport = "none"``),
    unless ``kube`` connects the agent to a Kubernetes API server (``"kubernetes"``): then
    the reports, the NodeSLO, the NodeMetric spec, the Node, the pods (``[pods] source =
    "apiserver"``) and evictions go through it (:mod:`agent.report.kubernetes`).
    ``detect_cgroups`` False (a simulated node): metrics and NodeMetric cover the node and
    its devices, no pods. ``qos``: also run the QoS loop over this host's cgroups (needs them
    detected). With a ``registry``, the metrics of the module docstring are exported on it
    until the agent stops.
    """
    name = node_name(node, cfg)
    cgroup = _detect_cgroups(cfg) if detect_cgroups else None
    chosen = list(probes) if probes is not None else probes_for(cfg, name)
    host = cfg.host
    read_facts = facts if facts is not None else (lambda: read_host_facts(host))
    counter = restarts_metric if restarts_metric is not None else lifecycle.restarts_counter()
    node_health = health.health_of(registry).node(name)
    async with contextlib.AsyncExitStack() as stack:
        exported = (
            stack.enter_context(device_metrics.exported(registry, name))
            if registry is not None
            else None
        )
        observe = exported.observe if exported is not None else None
        results = await probe_all(chosen, limit=cfg.devices.probe_timeout, observe=observe)
        _log.info(
            "node %s: %d device(s) from %d probe(s)",
            name,
            sum(len(r.devices) for r in results),
            len(chosen),
            extra={"node": name},
        )
        transport: Publisher
        objects: NodeObjects | None = None
        components: list[lifecycle.Component] = []
        if kube is not None:
            objects = NodeObjects(kube, name, pods=cfg.pods.source == "apiserver")
            kube_publisher = KubePublisher(objects)
            transport = kube_publisher
            components.extend([objects, kube_publisher])
        elif bus is None:
            transport = await stack.enter_async_context(NullPublisher(name))
        else:
            transport = await stack.enter_async_context(BusPublisher(bus, name, clock=clock))
        publisher = health.CountingPublisher(transport, node_health)
        reporter = Reporter(
            node=name,
            publisher=publisher,
            probes=chosen,
            facts=read_facts,
            cgroup=cgroup,
            interval=cfg.report.interval,
            heartbeat=cfg.report.heartbeat,
            device_interval=cfg.report.device_interval,
            probe_timeout=cfg.devices.probe_timeout,
            observe=observe,
            clock=clock,
        )
        if exported is not None:
            exported.results = lambda: reporter.last_results
        components.append(reporter)
        for probe in chosen:
            _attach(probe, reporter, components, stack)
        await reporter.report(results)
        if ready is not None:
            ready.set()

        if qos and cgroup is None:
            _log.warning("node %s: no cgroups detected, QoS is off", name)
        run_qos = qos and cgroup is not None
        pods = _pod_source(cfg, name, bus, cgroup, required=run_qos, objects=objects)
        pod_list: Callable[[], Sequence[Pod]] = (
            (lambda: pods.pods) if pods is not None else _no_pods
        )
        follower = _nodeslo_follower(cfg, name, bus, objects) if cgroup is not None else None
        metric_spec = NodeMetricSpecFollower(
            bus, name, watched=objects.nodemetric if objects is not None else None
        )
        node_object = _node_object(name, reporter, objects)
        sampler = build_sampler(cfg, cgroup)
        pools: Callable[[], SharePools] = _no_pools
        if run_qos and cgroup is not None and service.base_settings(cfg).gate("CPUSetAllocator"):
            pools = _SharePoolsOf(cgroup, cpu_topology(cfg.host), pod_list, node_object)
        collector = build_collector(
            cfg,
            node=name,
            cgroup=cgroup,
            pods=pod_list,
            nodeslo=follower.current if follower is not None else (lambda: None),
            policy=metric_spec.current,
            devices=_readings(reporter),
            pools=pools,
            sampler=sampler,
            wall=clock,
            detail_interval=cfg.metrics.detail_interval,
        )
        collecting = _Collecting(name, collector, node_health)
        nodemetrics = NodeMetricReporter(
            node=name,
            publisher=publisher,
            build=collector.nodemetric,
            measured=collecting.measured,
            interval=lambda: collector.settings.report_interval,
        )
        components.extend([collecting, nodemetrics, metric_spec])
        components.extend(c for c in (pods, follower) if c is not None)
        if run_qos and cgroup is not None and pods is not None and follower is not None:
            evictor = (
                KubeEvictor(kube, name, events=publisher)
                if kube is not None
                else service.evictor_for(cfg, node=name, bus=bus, events=publisher)
            )
            loop = _qos_loop(
                cfg, name, cgroup, node_object, evictor, reporter, pods, follower, sampler
            )
            loop.on_pass = lambda result: node_health.writes(result.results)
            components.append(loop)
            if registry is not None and loop.gauges is not None:
                registry.register(loop.gauges)
                stack.callback(registry.unregister, loop.gauges)
        if registry is not None:
            stack.enter_context(
                exporter.exported(
                    registry,
                    name,
                    latest=lambda: collector.latest,
                    pods=pod_list,
                    nodemetric=lambda: nodemetrics.last,
                    start_time=time.time(),
                )
            )
        await lifecycle.run_components(components, stop, restarts_metric=counter)


def _attach(
    probe: DeviceProbe,
    reporter: Reporter,
    components: list[lifecycle.Component],
    stack: contextlib.AsyncExitStack,
) -> None:
    """A probe's optional hooks: ``components()`` (e.g. an event watcher) run supervised,
    ``on_change`` publishes the Device at once (a health event), ``aclose()`` on the way out."""
    extra = getattr(probe, "components", None)
    if extra is not None:
        components.extend(extra())
    if hasattr(probe, "on_change"):
        probe.on_change = reporter.trigger
    close = getattr(probe, "aclose", None)
    if close is not None:
        stack.push_async_callback(close)


def _node_object(
    name: str, reporter: Reporter, objects: NodeObjects | None
) -> Callable[[], Node | None]:
    """The Node the QoS strategies read: the API server's (the kubelet's, with what the
    controller wrote into it) in Kubernetes mode once it is seen, else the one this agent
    reports."""

    def node_object() -> Node | None:
        seen = objects.node_object() if objects is not None else None
        return seen if seen is not None else reporter.last_node

    return node_object


def _pod_source(
    cfg: AgentConfig,
    name: str,
    bus: Bus | None,
    cgroup: detect.CgroupInfo | None,
    *,
    required: bool,
    objects: NodeObjects | None = None,
) -> PodSource | None:
    """The configured pod source (QoS and metrics share it); none without cgroups (nothing
    to measure pods by), nor for ``bindings`` without a bus unless QoS needs it (an error).
    ``apiserver``: the pods ``objects`` watches."""
    if cgroup is None:
        return None
    if cfg.pods.source == "apiserver" and objects is not None and objects.pods is not None:
        return ApiServerPodSource(objects.pods)
    if cfg.pods.source == "bindings" and bus is None and not required:
        return None
    return service.pod_source(cfg, node=name, bus=bus)


def _nodeslo_follower(
    cfg: AgentConfig, name: str, bus: Bus | None, objects: NodeObjects | None
) -> service.NodeSLOFollower:
    fallback = service.read_nodeslo_file(cfg.qos.nodeslo_file) if cfg.qos.nodeslo_file else None
    watched = objects.nodeslo if objects is not None else None
    return service.NodeSLOFollower(bus, name, fallback=fallback, watched=watched)


def _qos_loop(
    cfg: AgentConfig,
    name: str,
    cgroup: detect.CgroupInfo,
    node_seen: Callable[[], Node | None],
    evictor: Evictor | None,
    reporter: Reporter,
    pods: PodSource,
    follower: service.NodeSLOFollower,
    sampler: UsageSampler,
) -> QoSLoop:
    """The QoS loop over the pods and NodeSLO the metrics also use, reading the collector's
    ticks (``sampler``)."""

    def node_object() -> Node:
        return node_seen() or Node(metadata=ObjectMeta(name=name))

    loop = service.build_loop(
        cfg,
        node=name,
        cgroup=cgroup,
        pods=lambda: pods.pods,
        node_object=node_object,
        nodeslo=follower.current,
        evictor=evictor,
        on_node_resources=reporter.set_extended_resources,
        sampler=sampler,
    )
    loop.synced = pods.synced
    loop.sync_timeout = cfg.pods.sync_timeout
    return loop
