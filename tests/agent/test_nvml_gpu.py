"""Smoke test of the real NVML adapter and probe on a machine with NVIDIA GPUs.

Deselected by default; run with ``pytest -m gpu -s tests/agent/test_nvml_gpu.py`` on a GPU
machine (``-s`` shows what NVML reported). Without the NVIDIA library, driver or a GPU, every
test skips with the reason.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent import daemon
from agent.config import AgentConfig, HostPaths, MetricsSection
from agent.devices import pci
from agent.devices.nvidia import NvidiaProbe, nvidia_gpus
from agent.devices.nvml import MemoryInfo, PynvmlApi, XidEvent
from agent.errors import Unsupported
from apis.codec import decode_json, encode_json
from apis.slo import NodeMetric
from runtime.bus import Bus, node_topic
from tests.crdschema import schema_errors, validator

pytestmark = pytest.mark.gpu

T = TypeVar("T")


@pytest.fixture(scope="module")
def api() -> Iterator[PynvmlApi]:
    api = PynvmlApi()
    try:
        api.init()
    except Unsupported as err:
        pytest.skip(reason=f"no usable NVML on this machine: {err}")
    try:
        if api.device_count() == 0:
            pytest.skip(reason="NVML reports no GPU on this machine")
        yield api
    finally:
        api.shutdown()


def field(read: Callable[[], T]) -> T | str:
    """A field's value, or ``unsupported``."""
    try:
        return read()
    except Unsupported:
        return "unsupported"


def test_enumerate_and_memory(api: PynvmlApi) -> None:
    print(f"driver {api.driver_version()}, {api.device_count()} GPU(s)")
    for index in range(api.device_count()):
        handle = api.handle_by_index(index)
        uuid = api.uuid(handle)
        bus_id = api.pci_bus_id(handle)
        memory = api.memory(handle)
        print(
            f"  {index}: {api.name(handle)} {uuid} minor {api.minor_number(handle)} "
            f"bus {bus_id} memory {memory.used}/{memory.total} bytes"
        )
        assert uuid.startswith("GPU-")
        assert api.minor_number(handle) >= 0
        assert isinstance(memory, MemoryInfo)
        assert 0 <= memory.used <= memory.total
        assert memory.total > 0
        # The probe finds GPUs by their sysfs address: NVML must take it back.
        again = api.handle_by_bus_id(pci.normalize_address(bus_id))
        assert api.uuid(again) == uuid


def test_health_and_readings(api: PynvmlApi) -> None:
    for index in range(api.device_count()):
        handle = api.handle_by_index(index)
        figures = {
            "utilization %": field(partial(api.utilization, handle)),
            "temperature C": field(partial(api.temperature, handle)),
            "power mW": field(partial(api.power_usage, handle)),
            "MIG": field(partial(api.mig_enabled, handle)),
            "volatile DBE": field(partial(api.ecc_uncorrected_volatile, handle)),
            "retired pages pending": field(partial(api.retired_pages_pending, handle)),
        }
        print(f"  {index}: {figures}")
        utilization = figures["utilization %"]
        assert utilization == "unsupported" or 0 <= int(utilization) <= 100


def test_event_wait_with_a_short_timeout(api: PynvmlApi) -> None:
    event_set = api.event_set_create()
    try:
        registered = 0
        for index in range(api.device_count()):
            try:
                api.register_xid_events(api.handle_by_index(index), event_set)
                registered += 1
            except Unsupported as err:
                print(f"  {index}: XID events unsupported: {err}")
        started = time.monotonic()
        event = api.event_wait(event_set, 200)
        waited = time.monotonic() - started
        print(f"registered {registered} GPU(s); waited {waited:.3f}s; event: {event}")
        assert event is None or isinstance(event, XidEvent)
        assert waited < 5
    finally:
        api.event_set_free(event_set)


async def test_the_probe_on_this_host(api: PynvmlApi) -> None:
    host = HostPaths()
    on_bus = nvidia_gpus(pci.scan(host))
    probe = NvidiaProbe(host)
    try:
        result = await probe.probe()
        event = await probe.watcher.wait_once()
    finally:
        await probe.aclose()
    print(f"PCI: {[d.address for d in on_bus]}; labels {dict(result.labels)}; event {event}")
    for device in result.devices:
        print(f"  {encode_json(device).decode()}")
    for reading in result.readings:
        print(f"  {reading}")
    assert len(result.devices) == len(on_bus) == api.device_count()
    assert {d.id for d in result.devices} == {
        api.uuid(api.handle_by_index(i)) for i in range(api.device_count())
    }


async def test_the_agent_reports_this_hosts_gpus_in_nodemetric_and_metrics(
    api: PynvmlApi, shared_dir: Path
) -> None:
    """The whole agent on this host: the real NVML probe's readings reach the NodeMetric
    (per GPU gpu-core, gpu-memory, gpu-memory-ratio) and the metrics endpoint."""
    bus, stop = Bus(), asyncio.Event()
    registry = CollectorRegistry()
    cfg = AgentConfig(metrics=MetricsSection(collect_interval=0.2, report_interval=3600.0))
    task = asyncio.create_task(
        daemon.run(
            cfg, bus=bus, stop=stop, node="gpu-host", detect_cgroups=False, registry=registry
        )
    )
    topic = node_topic("gpu-host", "nodemetric")
    try:
        async with asyncio.timeout(60):
            while not list(bus.retained(topic)):  # noqa: ASYNC110 - bus state, no event
                await asyncio.sleep(0.1)
        exposition = generate_latest(registry).decode()
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task
    (message,) = bus.retained(topic)
    raw = json.loads(message.payload)
    print(f"nodeUsage: {json.dumps(raw['status']['nodeMetric']['nodeUsage'])}")
    assert schema_errors(validator(shared_dir, "slo.koordinator.sh/NodeMetric"), raw) == []
    usage = decode_json(message.payload, NodeMetric).status.node_metric
    assert usage is not None
    devices = usage.node_usage.devices
    assert len(devices) == api.device_count()
    uuids = {api.uuid(api.handle_by_index(i)) for i in range(api.device_count())}
    assert {d.id for d in devices} == uuids
    for device in devices:
        assert device.resources.get("koordinator.sh/gpu-memory", 0) > 0, "the driver holds some"
    lines = [line for line in exposition.splitlines() if line.startswith("koordpy_device_")]
    print("\n".join(lines[:12]))
    assert any(line.startswith("koordpy_device_memory_total_bytes") for line in lines)
