"""Smoke test of the real NVML adapter and probe on a machine with NVIDIA GPUs.

Deselected by default; run with ``pytest -m gpu -s tests/agent/test_nvml_gpu.py`` on a GPU
machine (``-s`` shows what NVML reported). Without the NVIDIA library, driver or a GPU, every
test skips with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TypeVar

import pytest

from agent.config import HostPaths
from agent.devices import pci
from agent.devices.nvidia import NvidiaProbe, nvidia_gpus
from agent.devices.nvml import MemoryInfo, PynvmlApi, XidEvent
from agent.errors import Unsupported
from apis.codec import encode_json

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
