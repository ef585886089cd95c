"""``koordpy agent run|plan|devices``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from datetime import UTC, datetime
from typing import TextIO

import msgspec
from prometheus_client import CollectorRegistry

from agent import config as agent_config
from agent import daemon
from agent.cgroups import detect
from agent.devices.base import probe_all, probes_for
from agent.errors import AgentError, ConfigError, Unsupported
from agent.node import build_node, node_name, read_host_facts
from agent.pods.kubelet import KubeletPodSource
from agent.pods.static import read_pods_file
from agent.qos import service
from agent.report.bus import status_body
from apis.codec import dump_yaml, to_builtins
from apis.core import Pod
from apis.scheduling import Device
from runtime import configfile, lifecycle, logs, mqtt
from runtime.bus import Bus, BusError, node_topic
from runtime.exposition import MetricsAddressError, serve_metrics
from runtime.kube.client import ClientOptions, KubeClient, connect

__all__ = ["main"]

PROG = "koordpy agent"
EXIT_FAILURE = 1

BUS_EMBEDDED = (
    f"{PROG} run: [report] transport = 'bus' exists only inside `koordpy up`; use 'mqtt' to"
    " report to a controller through a broker, or 'none' for a node on its own"
)


def main(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    stdout = out if out is not None else sys.stdout
    try:
        cfg = agent_config.load(getattr(args, "config", None))
    except ConfigError as err:
        return configfile.exit_on_error(err, prog=PROG)
    action = args.agent_command
    # One-shot commands print results on stdout; their logs only say what went wrong.
    quiet = action != "run" and cfg.agent.log_level.lower() != "debug"
    logs.setup_logging("warning" if quiet else cfg.agent.log_level)
    node = node_name(getattr(args, "node_name", None), cfg)
    try:
        if action == "run":
            kubeconfig = getattr(args, "kubeconfig", None)
            if kubeconfig:
                cfg = msgspec.structs.replace(
                    cfg,
                    report=msgspec.structs.replace(cfg.report, transport="kubernetes"),
                    kubernetes=msgspec.structs.replace(cfg.kubernetes, kubeconfig=kubeconfig),
                )
            context = getattr(args, "context", None)
            if context:
                cfg = msgspec.structs.replace(
                    cfg, kubernetes=msgspec.structs.replace(cfg.kubernetes, context=context)
                )
            return _run(cfg, node)
        if action == "devices":
            device = asyncio.run(_devices(cfg, node))
            _print(device, args.output, stdout)
            return 0
        if action == "plan":
            return asyncio.run(_plan(cfg, node, args, stdout))
    except ConfigError as err:
        return configfile.exit_on_error(err, prog=PROG)
    except AgentError as err:
        print(f"{PROG} {action}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{PROG}: unknown action {action!r}", file=sys.stderr)
    return configfile.EXIT_CONFIG


def _run(cfg: agent_config.AgentConfig, node: str) -> int:
    """The daemon on this host: QoS over its cgroups, metrics, and reports to the controller
    through the MQTT broker (``[report] transport = "mqtt"``), to a Kubernetes API server
    (``"kubernetes"``) or nowhere (``"none"``)."""
    if cfg.report.transport == "bus":
        print(BUS_EMBEDDED, file=sys.stderr)
        return configfile.EXIT_CONFIG
    if cfg.report.transport == "mqtt":
        try:
            node_topic(node, "status")
        except BusError as err:
            return configfile.exit_on_error(ConfigError(str(err)), prog=PROG)
        try:
            mqtt.check_files(cfg.report.mqtt)
        except mqtt.MqttFileError as err:
            return configfile.exit_on_error(ConfigError(f"[report.mqtt] {err}"), prog=PROG)
    registry = CollectorRegistry()
    lifecycle.raise_open_files_limit()

    async def serve() -> None:
        with lifecycle.stop_event() as stop, serve_metrics(cfg.metrics.address, registry):
            async with contextlib.AsyncExitStack() as stack:
                kube: KubeClient | None = None
                if cfg.report.transport == "kubernetes":
                    kube = await stack.enter_async_context(await _connect(cfg.kubernetes))
                bus: Bus | None = None
                if cfg.report.transport == "mqtt":
                    # The bridge is entered first so that it leaves last: the publisher's final
                    # "offline" on the local bus still reaches the broker.
                    bus = Bus()
                    await stack.enter_async_context(
                        mqtt.agent_bridge(
                            bus,
                            cfg.report.mqtt,
                            node,
                            will_payload=status_body("offline"),
                            registry=registry,
                        )
                    )
                ready = asyncio.Event()
                async with asyncio.TaskGroup() as group:
                    # systemd's Type=notify: ready once the first Node and Device are out.
                    notifier = group.create_task(_notify_when(ready))
                    await daemon.run(
                        cfg,
                        bus=bus,
                        kube=kube,
                        stop=stop,
                        node=node,
                        qos=True,
                        registry=registry,
                        restarts_metric=lifecycle.restarts_counter(registry),
                        ready=ready,
                    )
                    notifier.cancel()
                lifecycle.notify_stopping()

    try:
        asyncio.run(serve())
    except MetricsAddressError as err:
        print(f"{PROG} run: {err}", file=sys.stderr)
        return configfile.EXIT_CONFIG
    except configfile.ConfigError as err:  # an unusable kubeconfig or service account
        return configfile.exit_on_error(ConfigError(str(err)), prog=PROG)
    return 0


async def _notify_when(ready: asyncio.Event) -> None:
    await ready.wait()
    lifecycle.notify_ready()


async def _connect(section: agent_config.KubernetesSection) -> KubeClient:
    """The API server connection of ``[kubernetes]`` (its kubeconfig, else in-cluster)."""
    options = ClientOptions(
        qps=section.qps, burst=section.burst, timeout=section.timeout, user_agent="koordpy-agent"
    )
    return await connect(
        section.kubeconfig or None, context=section.context or None, options=options
    )


async def _devices(cfg: agent_config.AgentConfig, node: str) -> Device:
    """The Device the agent would report: the daemon's probes (the configured simulation, or
    every hardware probe of :data:`agent.devices.base.PROBES`) and its builder."""
    results = await probe_all(probes_for(cfg, node), limit=cfg.devices.probe_timeout)
    return daemon.device_of(node, results)


def _print(device: Device, output: str, out: TextIO) -> None:
    if output == "json":
        out.write(json.dumps(to_builtins(device), indent=2) + "\n")
    else:
        out.write(dump_yaml(device))


async def _plan_pods(cfg: agent_config.AgentConfig, args: argparse.Namespace) -> tuple[Pod, ...]:
    if args.pods_file:
        return read_pods_file(args.pods_file)
    if cfg.pods.source == "file":
        return read_pods_file(cfg.pods.file)
    if cfg.pods.source == "bindings":
        raise ConfigError(
            "[pods] source = 'bindings' follows the controller; give --pods-file to plan"
        )
    source = service.pod_source(cfg, node="", bus=None)
    assert isinstance(source, KubeletPodSource)
    await source.refresh()
    return source.pods


def _show(value: object) -> str:
    return "<absent>" if value is None else str(value)


async def _plan(
    cfg: agent_config.AgentConfig, node: str, args: argparse.Namespace, out: TextIO
) -> int:
    """One QoS pass that writes nothing: every write it would make, and why."""
    try:
        cgroup = detect.detect(cfg.host, cfg.cgroup)
    except Unsupported as err:
        print(f"{PROG} plan: {err}", file=sys.stderr)
        return EXIT_FAILURE
    pods = await _plan_pods(cfg, args)
    slo_file = args.nodeslo_file or cfg.qos.nodeslo_file
    slo = service.read_nodeslo_file(slo_file) if slo_file else None
    facts = await asyncio.to_thread(read_host_facts, cfg.host)
    now = datetime.now(UTC)
    node_object = build_node(node, facts, heartbeat=now, ready_since=now, cgroup=cgroup)
    loop = service.build_loop(
        cfg,
        node=node,
        cgroup=cgroup,
        pods=lambda: pods,
        node_object=lambda: node_object,
        nodeslo=lambda: slo,
    )
    # Usage is a rate: sample once, wait one interval, then plan on the second sample.
    loop.snapshot()
    await asyncio.sleep(cfg.qos.interval)
    _, outcome, planned = loop.plan_once()
    # Everything not already in place: changes, and writes that could not land (cgroup
    # absent, value invalid) with the note saying why.
    changes = [p for p in planned if p.changed or p.note]
    rows = [
        {
            "cgroup": p.write.cgroup,
            "file": p.path,
            "current": _show(p.current),
            "desired": str(p.write.value),
            "strategy": p.write.strategy,
            "reason": "; ".join(x for x in (p.write.reason, p.note) if x),
        }
        for p in changes
    ]
    evictions = [
        {
            "pod": f"{e.pod.metadata.namespace}/{e.pod.metadata.name}",
            "feature": e.reason,
            "message": e.message,
        }
        for e in outcome.evictions
    ]
    resources = outcome.node_resources.to_wire() if outcome.node_resources is not None else None
    if args.output == "json":
        document = {
            "node": node,
            "cgroup": {"version": str(cgroup.version), "driver": str(cgroup.driver)},
            "writes": rows,
            "unchanged": len(planned) - len(changes),
            "evictions": evictions,
            "nodeResources": resources,
        }
        out.write(json.dumps(document, indent=2) + "\n")
        return 0
    out.write(
        f"node {node}: cgroup {cgroup.version}, driver {cgroup.driver}, {len(pods)} pods;"
        f" {len(changes)} writes, {len(planned) - len(changes)} values already as desired\n"
    )
    if rows:
        headers = ["CGROUP", "FILE", "CURRENT", "DESIRED", "STRATEGY", "REASON"]
        table = [[r[h.lower()] for h in headers] for r in rows]
        widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
        for line in [headers, *table]:
            out.write("   ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))
            out.write("\n")
    else:
        out.write("no changes\n")
    for eviction in evictions:
        out.write(f"evict {eviction['pod']}: {eviction['feature']}: {eviction['message']}\n")
    if resources:
        listed = ", ".join(f"{k}={v}" for k, v in resources.items())
        out.write(f"node resources: {listed}\n")
    return 0
