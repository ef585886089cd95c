"""``koordpy agent run|plan|devices``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TextIO

from agent import config as agent_config
from agent.cgroups import detect
from agent.devices.base import build_device, probe_all, probes_for
from agent.errors import AgentError, ConfigError, Unsupported
from agent.node import node_name
from agent.qos import registry
from apis.codec import dump_yaml, to_builtins
from apis.core import Node
from apis.meta import ObjectMeta
from apis.scheduling import Device
from koordpy import configfile, logs

__all__ = ["main"]

PROG = "koordpy agent"
EXIT_FAILURE = 1

MQTT_LATER = (
    f"{PROG} run: a standalone agent reports over MQTT, and the MQTT transport is configured "
    "in a later release; run this host's agent embedded with `koordpy up` for now"
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
    if action == "run":
        print(MQTT_LATER, file=sys.stderr)
        return configfile.EXIT_CONFIG
    try:
        if action == "devices":
            device = asyncio.run(_devices(cfg, node))
            _print(device, args.output, stdout)
            return 0
        if action == "plan":
            return _plan(cfg, stdout)
    except ConfigError as err:
        return configfile.exit_on_error(err, prog=PROG)
    except AgentError as err:
        print(f"{PROG} {action}: {err}", file=sys.stderr)
        return EXIT_FAILURE
    print(f"{PROG}: unknown action {action!r}", file=sys.stderr)
    return configfile.EXIT_CONFIG


async def _devices(cfg: agent_config.AgentConfig, node: str) -> Device:
    results = await probe_all(probes_for(cfg, node), limit=cfg.devices.probe_timeout)
    return build_device(Node(metadata=ObjectMeta(name=node)), results)


def _print(device: Device, output: str, out: TextIO) -> None:
    if output == "json":
        out.write(json.dumps(to_builtins(device), indent=2) + "\n")
    else:
        out.write(dump_yaml(device))


def _plan(cfg: agent_config.AgentConfig, out: TextIO) -> int:
    try:
        cgroup = detect.detect(cfg.host, cfg.cgroup)
    except Unsupported as err:
        print(f"{PROG} plan: {err}", file=sys.stderr)
        return EXIT_FAILURE
    strategies = registry.build()
    out.write(f"cgroup {cgroup.version}, driver {cgroup.driver}, root {cgroup.root}\n")
    if not strategies:
        out.write("no changes\n")
    return 0
