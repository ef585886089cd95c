"""Assembling the QoS loop from the agent config: pods, NodeSLO, evictor, writer, sampler.

The daemon and ``koordpy agent plan`` build the same loop here; they differ only in whether the
loop's decisions are carried out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from agent.cgroups.detect import CgroupInfo
from agent.cgroups.files import CgroupFiles
from agent.cgroups.writer import CgroupWriter
from agent.config import AgentConfig
from agent.errors import ConfigError
from agent.evictor import ApiServerEvictor, BusSink, ControllerEvictor, Evictor
from agent.metrics.usage import HierarchyReader, UsageSampler
from agent.pods.base import PodSource
from agent.pods.bindings import BindingsPodSource
from agent.pods.kubelet import KubeletPodSource, kubelet_url
from agent.pods.static import StaticPodSource
from agent.qos.framework import Strategy
from agent.qos.loop import GaugeCollector, QoSLoop
from agent.qos.registry import STRATEGIES
from agent.qos.settings import DEFAULT_GATES, QoSSettings
from agent.report.transport import Publisher
from agent.states import cpu_topology
from apis import codec
from apis.core import Node, Pod
from apis.errors import ApiError
from apis.resources import ResourceList
from apis.slo import NodeSLO, NodeSLOSpec
from runtime.bus import Bus, node_topic

__all__ = [
    "NodeSLOFollower",
    "base_settings",
    "build_loop",
    "evictor_for",
    "pod_source",
    "read_nodeslo_file",
    "strategies_for",
]

log = logging.getLogger(__name__)


def base_settings(cfg: AgentConfig) -> QoSSettings:
    """What the agent config says, before any NodeSLO."""
    return QoSSettings(
        colocation=cfg.colocation,
        gates={**DEFAULT_GATES, **cfg.qos.gates},
        disable_unset_cpu_quota=cfg.qos.disable_unset_cpu_quota,
    )


def strategies_for(cfg: AgentConfig) -> list[Strategy]:
    """The strategies ``[qos] strategies`` names (every one when empty), in table order."""
    wanted = cfg.qos.strategies
    unknown = sorted(set(wanted) - set(STRATEGIES))
    if unknown:
        raise ConfigError(
            f"[qos] strategies: unknown strategy {unknown[0]!r} (known: {', '.join(STRATEGIES)})"
        )
    return [factory() for name, factory in STRATEGIES.items() if not wanted or name in wanted]


def read_nodeslo_file(path: str | Path) -> NodeSLOSpec:
    """The spec of the NodeSLO in a YAML/JSON file (``[qos] nodeslo_file``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"NodeSLO file {path}: {err.strerror or err}") from None
    try:
        objects = codec.decode_documents(text, source=str(path))
    except ApiError as err:
        raise ConfigError(str(err)) from None
    slos = [o for o in objects if isinstance(o, NodeSLO)]
    if len(slos) != 1:
        raise ConfigError(f"NodeSLO file {path}: expected one NodeSLO, found {len(slos)}")
    return slos[0].spec


def pod_source(cfg: AgentConfig, *, node: str, bus: Bus | None) -> PodSource:
    """The pod source ``[pods] source`` names."""
    pods = cfg.pods
    if pods.source == "file":
        return StaticPodSource(pods.file, interval=pods.file_interval)
    if pods.source == "bindings":
        if bus is None:
            raise ConfigError(
                "[pods] source = 'bindings' needs the controller's bus (embedded in `koordpy up`)"
            )
        return BindingsPodSource(bus, node)
    if pods.source == "apiserver":
        raise ConfigError(
            "[pods] source = 'apiserver' needs the agent connected to a Kubernetes API server"
            " ([report] transport = 'kubernetes')"
        )
    return KubeletPodSource(
        kubelet_url(pods.kubelet_address, pods.kubelet_port),
        token_file=pods.kubelet_token_file,
        ca_file=pods.kubelet_ca_file or None,
        insecure_tls=pods.kubelet_insecure_tls,
        interval=pods.kubelet_sync_interval,
        timeout=pods.kubelet_sync_timeout,
    )


def evictor_for(
    cfg: AgentConfig, *, node: str, bus: Bus | None, events: Publisher | None
) -> Evictor | None:
    """Who carries out evictions; None when nobody can (they are then only logged)."""
    section = cfg.evictions
    if section.mode == "apiserver":
        if not section.apiserver_url:
            raise ConfigError("[evictions] mode = 'apiserver' needs apiserver_url")
        return ApiServerEvictor(
            section.apiserver_url,
            node,
            token_file=Path(section.token_file) if section.token_file else None,
            ca_file=Path(section.ca_file) if section.ca_file else None,
            insecure=section.insecure_tls,
            timeout=section.timeout,
            events=events,
        )
    if bus is None:
        return None
    return ControllerEvictor(BusSink(bus), node)


class NodeSLOFollower:
    """Follows the controller's ``nodeslo`` topic for this node, or ``watched`` (the NodeSLO
    a Kubernetes watch holds, :class:`agent.report.kubernetes.NodeObjects`); the file NodeSLO
    while neither has one."""

    def __init__(
        self,
        bus: Bus | None,
        node: str,
        *,
        fallback: NodeSLOSpec | None = None,
        watched: Callable[[], NodeSLOSpec | None] | None = None,
    ) -> None:
        self.name = f"nodeslo/{node}"
        self._bus = bus
        self._node = node
        self._fallback = fallback
        self._watched = watched
        self._spec: NodeSLOSpec | None = None

    def current(self) -> NodeSLOSpec | None:
        spec = self._watched() if self._watched is not None else self._spec
        return spec if spec is not None else self._fallback

    def handle(self, payload: bytes) -> None:
        if not payload:
            self._spec = None
            return
        try:
            self._spec = codec.decode_json(payload, NodeSLO).spec
        except (ApiError, msgspec.ValidationError) as err:
            log.error("NodeSLO for %s refused, keeping the previous one: %s", self._node, err)

    async def run(self) -> None:
        if self._bus is None:
            await asyncio.Event().wait()
            return
        with self._bus.subscribe(node_topic(self._node, "nodeslo")) as messages:
            async for message in messages:
                self.handle(message.payload)


def build_loop(
    cfg: AgentConfig,
    *,
    node: str,
    cgroup: CgroupInfo,
    pods: Callable[[], tuple[Pod, ...]],
    node_object: Callable[[], Node],
    nodeslo: Callable[[], NodeSLOSpec | None],
    evictor: Evictor | None = None,
    on_node_resources: Callable[[ResourceList | None], None] | None = None,
    strategies: list[Strategy] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sampler: UsageSampler | None = None,
) -> QoSLoop:
    """A QoS loop over this host's cgroups as ``cfg`` describes them (``clock``: seconds,
    monotonic; one clock drives the sampler's windows, the writer's cache and the loop).

    ``sampler``: a sampler someone else samples every tick (the metrics collector's, see
    :func:`agent.metrics.collector.build_collector`); the loop then reads it and samples
    nothing itself. By default the loop has a sampler of its own and samples each pass.
    """
    writer = CgroupWriter(
        CgroupFiles(cgroup), clock=clock, refresh_seconds=cfg.qos.force_update_seconds
    )
    shared = sampler is not None
    if sampler is None:
        sampler = UsageSampler(
            cfg.host, HierarchyReader(cgroup, clock=clock), clock=clock, interval=cfg.qos.interval
        )
    return QoSLoop(
        node_name=node,
        cgroup=cgroup,
        writer=writer,
        sampler=sampler,
        strategies=strategies if strategies is not None else strategies_for(cfg),
        pods=pods,
        node=node_object,
        cpus=cpu_topology(cfg.host),
        base_settings=base_settings(cfg),
        nodeslo=nodeslo,
        evictor=evictor,
        on_node_resources=on_node_resources,
        gauges=GaugeCollector(node=node),
        interval=cfg.qos.interval,
        clock=clock,
        sampling=not shared,
    )
