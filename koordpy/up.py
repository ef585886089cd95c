"""``koordpy up``: the controller and this host's agent in one process.

The two halves are joined by the in-process bus, which has the topics and semantics of the
fleet's MQTT wire protocol. ``--demo`` adds simulated nodes whose devices come from fake probes
and applies the manifests in ``examples/``.

Config (``--config``) holds both halves' files as tables::

    [controller.api]
    address = "unix:///run/koordpy/controller.sock"
    [controller.metrics]
    address = ":9317"
    [agent.report]
    interval = 10.0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
from prometheus_client import CollectorRegistry

from agent import daemon as agent_daemon
from agent.config import AgentConfig, HostPaths
from agent.devices import simulated
from agent.devices.base import DeviceProbe
from agent.errors import AgentError
from agent.node import HostFacts, node_name, read_host_facts
from agent.qos.framework import CpuInfo
from apis import codec
from apis.errors import ApiError
from apis.meta import Object
from controller import app
from controller.api.address import resolve as resolve_address
from controller.config import ControllerConfig
from controller.errors import ControllerError
from controller.store.sqlite import Store
from runtime import configfile, lifecycle, logs
from runtime.bus import Bus
from runtime.exposition import MetricsAddressError, MetricsEndpoint, serve_metrics

__all__ = [
    "DEMO_ADDRESSES",
    "DEMO_NODES",
    "UpConfig",
    "default_state_dir",
    "demo_cpu_topology",
    "examples_dir",
    "main",
    "run",
]

log = logging.getLogger(__name__)

#: Simulated nodes of ``--demo``: node name -> device profile of its fake probe.
DEMO_NODES: Final[dict[str, str]] = {
    "demo-nvidia-h100": "nvidia-h100",
    "demo-metax-c500": "metax-c500-sgpu",
    "demo-ascend-910b3": "ascend-910b3",
    "demo-ascend-300i-duo": "ascend-310p3-300i-duo",
}
#: The capacity type of each simulated node (Karpenter's label): the descheduling example moves
#: pods from the ``on-demand`` nodes to the ``reserved`` ones.
LABEL_CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
DEMO_CAPACITY_TYPES: Final[dict[str, str]] = {
    "demo-nvidia-h100": "reserved",
    "demo-metax-c500": "reserved",
    "demo-ascend-910b3": "on-demand",
    "demo-ascend-300i-duo": "on-demand",
}
#: Each simulated node's InternalIP, from the documentation range (RFC 5737, TEST-NET-1): the
#: pods placed there report a host and pod IP, and no address reaches a real machine.
DEMO_ADDRESSES: Final[dict[str, str]] = {
    "demo-nvidia-h100": "192.0.2.11",
    "demo-metax-c500": "192.0.2.12",
    "demo-ascend-910b3": "192.0.2.13",
    "demo-ascend-300i-duo": "192.0.2.14",
}
#: Seconds the simulated nodes get to publish their first report before the banner.
READY_TIMEOUT: Final = 30.0


class UpConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    controller: ControllerConfig = msgspec.field(default_factory=ControllerConfig)
    agent: AgentConfig = msgspec.field(default_factory=AgentConfig)


def default_state_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/koordpy``, else ``~/.local/state/koordpy``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "koordpy"


def examples_dir() -> Path | None:
    """The ``examples/`` manifests: beside the sources, else shipped inside the package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "examples", here / "examples"):
        if candidate.is_dir():
            return candidate
    return None


def load_examples(directory: Path) -> list[Object]:
    """Every manifest of ``directory`` (``*.yaml``, ``*.yml``, ``*.json``), in name order."""
    objects: list[Object] = []
    for path in sorted(directory.iterdir()):
        if path.suffix in (".yaml", ".yml", ".json") and path.is_file():
            objects.extend(codec.decode_documents(path.read_text("utf-8"), source=str(path)))
    return objects


@dataclass(frozen=True, slots=True)
class _NodeAgent:
    name: str
    probes: Sequence[DeviceProbe] | None
    detect_cgroups: bool
    facts: Callable[[], HostFacts] | None = None


#: The machine every simulated node is: a two-socket GPU server (2 x 24 cores, two threads
#: each, one NUMA node per socket), 768 GiB of memory and 2 TiB of local disk.
DEMO_SOCKETS: Final = 2
DEMO_CORES_PER_SOCKET: Final = 24
DEMO_MEMORY: Final = 768 << 30
DEMO_STORAGE: Final = 2 << 40


def demo_cpu_topology() -> tuple[CpuInfo, ...]:
    """Logical CPUs of the simulated server, numbered as Linux does: the first thread of
    every core, socket by socket, then the second threads."""
    cores = DEMO_SOCKETS * DEMO_CORES_PER_SOCKET
    return tuple(
        CpuInfo(cpu=thread * cores + core, core=core, socket=core // DEMO_CORES_PER_SOCKET,
                node=core // DEMO_CORES_PER_SOCKET)
        for thread in range(2)
        for core in range(cores)
    )  # fmt: skip


def _simulated_facts(name: str, host: HostPaths) -> Callable[[], HostFacts]:
    """A simulated node: a GPU server of its own (:func:`demo_cpu_topology`), this machine's
    kernel and OS, its own hostname and a documentation address (:data:`DEMO_ADDRESSES`)."""
    topology = tuple(sorted(demo_cpu_topology(), key=lambda cpu: cpu.cpu))

    def read() -> HostFacts:
        return dataclasses.replace(
            read_host_facts(host),
            hostname=name,
            internal_ips=(DEMO_ADDRESSES[name],) if name in DEMO_ADDRESSES else (),
            cpus=len(topology),
            memory=DEMO_MEMORY,
            ephemeral_storage=DEMO_STORAGE,
            cpu_topology=topology,
            labels={LABEL_CAPACITY_TYPE: DEMO_CAPACITY_TYPES.get(name, "on-demand")},
        )

    return read


def _agents(cfg: AgentConfig, *, host: str, demo: bool) -> list[_NodeAgent]:
    agents = [_NodeAgent(name=host, probes=None, detect_cgroups=True)]
    if demo:
        agents.extend(
            _NodeAgent(
                name=name,
                probes=[simulated.probe_for(name, profile)],
                detect_cgroups=False,
                facts=_simulated_facts(name, cfg.host),
            )
            for name, profile in DEMO_NODES.items()
        )
    return agents


def _apply_examples(store: Store, directory: Path | None) -> int:
    if directory is None:
        log.warning("no examples/ directory found; the demo starts without example objects")
        return 0
    results = store.apply_many(load_examples(directory))
    failures = [r for r in results if isinstance(r, Exception)]
    for failure in failures:
        log.error("example not applied: %s", failure)
    return len(results) - len(failures)


def _banner(
    controller: app.Controller,
    agent_metrics: MetricsEndpoint | None,
    state_dir: Path,
    nodes: Sequence[str],
) -> str:
    api = controller.api.address
    hint = "koordpy get nodes"
    if api != resolve_address(None):
        hint = f"koordpy --api {api} get nodes"
    return "\n".join(
        [
            "koordpy is up",
            f"  API                 {api}",
            f"  controller metrics  {controller.metrics.url if controller.metrics else 'off'}",
            f"  agent metrics       {agent_metrics.url if agent_metrics else 'off'}",
            f"  state               {state_dir}",
            f"  nodes               {', '.join(nodes)}",
            f"try: {hint}   (Ctrl-C stops)",
        ]
    )


async def _wait_ready(readies: Sequence[asyncio.Event], stop: asyncio.Event) -> bool:
    """True once every agent published its first report; False on stop or timeout."""
    everyone: asyncio.Future[object] = asyncio.ensure_future(
        asyncio.gather(*(r.wait() for r in readies))
    )
    stopping: asyncio.Future[object] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait(
            {everyone, stopping}, timeout=READY_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        everyone.cancel()
        stopping.cancel()
        await asyncio.gather(everyone, stopping, return_exceptions=True)
    if not all(r.is_set() for r in readies) and not stop.is_set():
        log.warning("not every agent reported within %.0f s", READY_TIMEOUT)
    return not stop.is_set()


async def run(
    cfg: UpConfig,
    *,
    state_dir: Path,
    stop: asyncio.Event,
    demo: bool = False,
    host_node: str | None = None,
    api_address: str | None = None,
    metrics_address: str | None = None,
    agent_metrics_address: str | None = None,
    api_token: str | None = None,
    announce: Callable[[str], None] = print,
) -> None:
    """Run until ``stop`` is set; every task and resource is closed before returning."""
    bus = Bus()
    host = node_name(host_node, cfg.agent)
    agent_registry = CollectorRegistry()
    agent_restarts = lifecycle.restarts_counter(agent_registry)
    async with contextlib.AsyncExitStack() as stack:
        controller = await app.open_controller(
            stack,
            cfg.controller,
            state_dir=state_dir,
            api_address=api_address,
            metrics_address=metrics_address,
            api_token=api_token,
            bus=bus,
        )
        agent_metrics = stack.enter_context(
            serve_metrics(agent_metrics_address or cfg.agent.metrics.address, agent_registry)
        )
        if demo:
            applied = _apply_examples(controller.store, examples_dir())
            log.info("demo: %d example objects applied", applied)
        agents = _agents(cfg.agent, host=host, demo=demo)
        # All-in-one: this host's pods are the ones the controller binds to it.
        embedded = msgspec.structs.replace(
            cfg.agent, pods=msgspec.structs.replace(cfg.agent.pods, source="bindings")
        )
        readies = [asyncio.Event() for _ in agents]
        async with asyncio.TaskGroup() as group:
            group.create_task(
                lifecycle.run_components(
                    controller.components, stop, restarts_metric=controller.restarts
                ),
                name="controller",
            )
            for agent, ready in zip(agents, readies, strict=True):
                group.create_task(
                    agent_daemon.run(
                        embedded,
                        bus=bus,
                        stop=stop,
                        node=agent.name,
                        probes=agent.probes,
                        facts=agent.facts,
                        detect_cgroups=agent.detect_cgroups,
                        qos=agent.detect_cgroups,
                        restarts_metric=agent_restarts,
                        registry=agent_registry,
                        ready=ready,
                    ),
                    name=f"agent:{agent.name}",
                )
            if await _wait_ready(readies, stop):
                announce(_banner(controller, agent_metrics, state_dir, [a.name for a in agents]))
                lifecycle.notify_ready()
        lifecycle.notify_stopping()


def _load(path: str | None) -> UpConfig:
    if not path:
        return UpConfig()
    return configfile.load_config(path, UpConfig)


def main(args: argparse.Namespace) -> int:
    """CLI: ``koordpy up [--demo] [--state-dir DIR] [--api ADDR] [--config FILE]``."""
    try:
        cfg = _load(args.config)
    except configfile.ConfigError as err:
        return configfile.exit_on_error(err)
    if args.start_fresh:
        cfg = msgspec.structs.replace(cfg, controller=cfg.controller.starting_fresh(True))
    logs.setup_logging(cfg.controller.controller.log_level)
    state_dir = Path(
        args.state_dir or cfg.controller.controller.state_dir or default_state_dir()
    ).expanduser()

    async def serve() -> None:
        with lifecycle.stop_event() as stop:
            await run(
                cfg,
                state_dir=state_dir,
                stop=stop,
                demo=args.demo,
                host_node=args.node_name,
                api_address=args.api or None,
                metrics_address=args.metrics_address,
                agent_metrics_address=args.agent_metrics_address,
                api_token=args.token or None,
                announce=lambda text: print(text, flush=True),
            )

    try:
        asyncio.run(serve())
    except (configfile.ConfigError, MetricsAddressError) as err:
        print(f"koordpy up: {err}", file=sys.stderr)
        return configfile.EXIT_CONFIG
    except (ControllerError, AgentError, ApiError) as err:
        print(f"koordpy up: {err}", file=sys.stderr)
        return 1
    return 0
