"""``koordpy agent run`` reporting through a real mosquitto: online while it runs, ``offline``
from the agent itself on SIGTERM, from the broker (the will) when it is killed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest

from runtime.bus import Bus, node_topic
from runtime.mqtt import MqttSettings, controller_bridge
from tests.fakes.broker import Broker, running_broker
from tests.fakes.host import FakeHost
from tests.koordpy.daemons import koordpy_command

pytestmark = [pytest.mark.network, pytest.mark.slow]

LIMIT = 30.0  # generous: an agent process starts, probes, connects


def agent_config(tmp_path: Path, settings: MqttSettings) -> Path:
    """A node without cgroups (no QoS) on a fake host, reporting over MQTT to ``settings``."""
    host = FakeHost(tmp_path)
    host.write("/proc/stat", "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 50 0 50 500 0 0 0 0 0 0\n")
    host.write(
        "/proc/meminfo",
        "MemTotal:        8000000 kB\nMemFree:         5000000 kB\n"
        "MemAvailable:    6000000 kB\nBuffers:          100000 kB\n"
        "Cached:           900000 kB\nActive:          1000000 kB\n"
        "Inactive:         800000 kB\n",
    )
    host.write("/sys/devices/system/cpu/online", "0\n")
    fields = msgspec.to_builtins(settings)
    mqtt = "".join(f"{key} = {json.dumps(value)}\n" for key, value in fields.items())
    path = tmp_path / "agent.toml"
    path.write_text(
        f'[host]\nroot = "{host.root}"\n[cgroup]\nroot = "{host.cgroup_root}"\n'
        f'[metrics]\naddress = "off"\n[report]\ntransport = "mqtt"\n[report.mqtt]\n{mqtt}'
    )
    return path


@contextmanager
def agent_process(config: Path, node: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        koordpy_command("agent", "run", "--config", str(config), "--node-name", node),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "NOTIFY_SOCKET": ""},
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()


def status_of(bus: Bus, node: str) -> dict[str, object] | None:
    for message in bus.retained(node_topic(node, "status")):
        parsed: dict[str, object] = json.loads(message.payload)
        return parsed
    return None


async def until_status(bus: Bus, node: str, state: str, process: subprocess.Popen[bytes]) -> None:
    async with asyncio.timeout(LIMIT):
        while (status := status_of(bus, node)) is None or status["state"] != state:
            if state == "online" and process.poll() is not None:
                assert process.stderr is not None
                pytest.fail(f"the agent exited: {process.stderr.read().decode()[-2000:]}")
            await asyncio.sleep(0.05)


async def until_retained(bus: Bus, topic: str) -> None:
    """Wait until ``topic`` holds a retained report (it may follow the agent's ``online``)."""
    with bus.subscribe(topic) as subscription:  # a retained message is delivered first
        async with asyncio.timeout(LIMIT):
            await subscription.get()
    assert list(bus.retained(topic))


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker", secure=True) as started:
        yield started


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker") as started:
        yield started


async def test_a_killed_agent_goes_offline_through_its_will(
    secure_broker: Broker, tmp_path: Path
) -> None:
    broker = secure_broker
    config = agent_config(tmp_path / "node-a", broker.settings("node-a"))
    cbus = Bus()
    async with controller_bridge(cbus, broker.settings("controller")) as controller:
        assert await controller.wait_connected(LIMIT)
        with agent_process(config, "node-a") as agent:
            await until_status(cbus, "node-a", "online", agent)
            # The agent's reports came through TLS and the ACL too.
            await until_retained(cbus, node_topic("node-a", "node"))
            agent.send_signal(signal.SIGKILL)
            await until_status(cbus, "node-a", "offline", agent)
            assert agent.wait(timeout=LIMIT) == -signal.SIGKILL
    # The will carries no time: nobody was there to stamp it.
    assert status_of(cbus, "node-a") == {"state": "offline", "since": None}


async def test_a_stopped_agent_says_offline_itself(broker: Broker, tmp_path: Path) -> None:
    config = agent_config(tmp_path / "node-1", broker.settings())
    cbus = Bus()
    async with controller_bridge(cbus, broker.settings()) as controller:
        assert await controller.wait_connected(LIMIT)
        with agent_process(config, "node-1") as agent:
            await until_status(cbus, "node-1", "online", agent)
            agent.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(agent.wait, LIMIT) == 0
            await until_status(cbus, "node-1", "offline", agent)
    status = status_of(cbus, "node-1")
    assert status is not None
    assert status["since"] is not None  # the agent's own goodbye, not the broker's will


async def test_an_agent_started_before_its_broker_reports_once_it_is_up(
    tmp_path: Path,
) -> None:
    with running_broker(tmp_path / "broker") as broker:
        broker.stop()
        config = agent_config(tmp_path / "node-1", broker.settings())
        with agent_process(config, "node-1") as agent:
            await asyncio.sleep(1.0)
            assert agent.poll() is None, "the agent must wait for its broker, not exit"
            await asyncio.to_thread(broker.start)
            cbus = Bus()
            async with controller_bridge(cbus, broker.settings()) as controller:
                assert await controller.wait_connected(LIMIT)
                await until_status(cbus, "node-1", "online", agent)
                await until_retained(cbus, node_topic("node-1", "device"))
