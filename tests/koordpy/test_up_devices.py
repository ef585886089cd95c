"""``koordpy up --demo``: the simulated nodes' device metrics on the agent's endpoint."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agent.devices import simulated
from apis import constants as k
from koordpy.up import DEMO_NODES
from tests.koordpy.daemons import running_up

pytestmark = pytest.mark.slow


def agent_metrics_url(banner: list[str]) -> str:
    (line,) = [line for line in banner if "agent metrics" in line]
    return line.split()[-1]


def scrape(url: str) -> dict[str, list[Sample]]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_demo_nodes_expose_device_metrics_on_the_agent_endpoint(tmp_path: Path) -> None:
    with running_up(tmp_path, "--demo") as up:
        families = scrape(agent_metrics_url(up.stdout))
        assert up.stop(signal.SIGTERM) == 0

    healthy = families["koordpy_device_healthy"]
    for node, name in DEMO_NODES.items():
        profile = simulated.PROFILES[name]
        mine = [s for s in healthy if s.labels["node"] == node]
        assert len(mine) == len(profile.slots), node
        assert all(s.value == 1.0 for s in mine), node
        assert {(s.labels["vendor"], s.labels["model"]) for s in mine} == {
            (profile.vendor, profile.model)
        }
        assert sorted(int(s.labels["minor"]) for s in mine) == list(range(len(profile.slots)))
        totals = [
            s.value
            for s in families["koordpy_device_memory_total_bytes"]
            if s.labels["node"] == node
        ]
        assert totals == [float(profile.resources[k.RESOURCE_GPU_MEMORY])] * len(profile.slots)
        runs = [
            s.value
            for s in families["koordpy_device_probe_duration_seconds"]
            if s.name.endswith("_count") and s.labels == {"node": node, "probe": "simulated"}
        ]
        assert runs
        assert runs[0] >= 1
    # Simulated devices have no temperature or power: nothing is invented for them.
    assert not [
        s
        for s in families.get("koordpy_device_temperature_celsius", [])
        if s.labels["node"] in DEMO_NODES
    ]
    assert not [
        s for s in families.get("koordpy_device_power_watts", []) if s.labels["node"] in DEMO_NODES
    ]
