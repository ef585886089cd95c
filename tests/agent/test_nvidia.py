"""The NVIDIA probe over FakeNvml: inventory, health, faults, recovery, threads and loop lag."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import logging
import sys
import threading
import time
import types
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pynvml
import pytest

from agent.config import AgentConfig
from agent.devices import base, nvidia, nvml
from agent.devices.nvidia import NvidiaProbe
from agent.errors import NotFound, TransientError, Unsupported
from apis import constants as k
from apis.codec import encode_json
from apis.core import Node
from apis.meta import ObjectMeta
from apis.scheduling import DeviceInfo
from tests.crdschema import schema_errors, validator
from tests.fakes.host import FakeHost
from tests.fakes.nvml import H100_MEMORY, FakeNvml, add_pci_device, h100_table

MIB = 1 << 20
WINDOW = 300.0


class Clock:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


@pytest.fixture
def clock() -> Clock:
    return Clock()


Make = Callable[..., NvidiaProbe]


@pytest.fixture
async def make(host: FakeHost, clock: Clock) -> AsyncIterator[Make]:
    """Probes over a FakeNvml whose GPUs are laid out in ``host``; released and closed after."""
    made: list[tuple[NvidiaProbe, FakeNvml]] = []

    def factory(fake: FakeNvml, **options: Any) -> NvidiaProbe:
        fake.write_sysfs(host)
        options.setdefault("clock", clock)
        probe = NvidiaProbe(host.paths, nvml=fake, **options)
        made.append((probe, fake))
        return probe

    yield factory
    for probe, fake in made:
        fake.release()
        await probe.aclose()


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait (polling) until ``condition()`` holds."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - another thread changes it
            await asyncio.sleep(0.01)


def by_minor(devices: tuple[DeviceInfo, ...]) -> dict[int, DeviceInfo]:
    return {device.minor: device for device in devices if device.minor is not None}


def condition(device: DeviceInfo) -> tuple[str, str, str]:
    [cond] = device.conditions
    assert (cond.type, cond.status) == ("Healthy", "False")
    return cond.reason, cond.message, cond.last_transition_time.isoformat()


# --- inventory --------------------------------------------------------------------------------


async def test_reports_every_gpu_bound_to_the_nvidia_driver(
    make: Make, host: FakeHost, clock: Clock
) -> None:
    fake = FakeNvml.h100(count=8)
    probe = make(fake)
    # Not GPUs of ours: the GPU's audio function and a GPU handed to a VM (vfio-pci).
    add_pci_device(
        host,
        "0000:18:00.1",
        vendor=0x10DE,
        device=0x22A3,
        class_code=0x040300,
        driver="snd_hda_intel",
    )
    add_pci_device(
        host, "0000:ff:00.0", vendor=0x10DE, device=0x2330, class_code=0x030200, driver="vfio-pci"
    )
    result = await probe.probe()

    assert result.labels == {
        k.LABEL_GPU_VENDOR: "nvidia",
        k.LABEL_GPU_MODEL: "H100-80GB-HBM3",
        k.LABEL_GPU_DRIVER_VERSION: "550.54.15",
    }
    devices = by_minor(result.devices)
    assert sorted(devices) == list(range(8))
    table = h100_table(8)
    for row in table:
        device = devices[row.minor]
        assert device.id == row.uuid
        assert device.type == "gpu"
        assert device.health is True
        assert device.conditions == ()
        assert device.labels == {}
        assert dict(device.resources) == {
            k.RESOURCE_GPU_CORE: 100,
            k.RESOURCE_GPU_MEMORY: 81559 * MIB,
            k.RESOURCE_GPU_MEMORY_RATIO: 100,
        }
        assert device.topology is not None
        assert (device.topology.bus_id, device.topology.pcie_id) == (row.bus_id, row.pcie_root)
        assert device.topology.node_id == device.topology.socket_id == row.index // 4
    bus_ids_asked = {index for call, index in fake.calls if call == "handle_by_bus_id"}
    assert bus_ids_asked == set(range(8))
    assert fake.registered() == list(range(8))


async def test_the_device_validates_against_the_crd(make: Make, shared_dir: Path) -> None:
    fake = FakeNvml.h100(count=4)
    fake.gpus[1].mig = True
    probe = make(fake)
    await probe.probe()
    fake.lose(2)
    result = await probe.probe()
    device = base.build_device(Node(metadata=ObjectMeta(name="gpu-1", uid="u-1")), [result])
    schema = validator(shared_dir, "scheduling.koordinator.sh/Device")
    assert schema_errors(schema, json.loads(encode_json(device))) == []
    assert [d.health for d in device.spec.devices] == [True, True, False, True]
    assert device.spec.devices[1].labels == {nvidia.LABEL_MIG_MODE: "enabled"}


async def test_readings(make: Make) -> None:
    fake = FakeNvml.h100(count=2)
    fake.gpus[0].memory_used = 40 * 1024 * MIB
    fake.gpus[0].utilization = 87
    fake.gpus[0].temperature = 61
    fake.gpus[0].power_mw = 512_345
    fake.gpus[1].temperature = None  # not supported
    result = await make(fake).probe()
    first, second = sorted(result.readings, key=lambda r: r.minor)
    assert first == base.DeviceReading(
        vendor="nvidia",
        model="H100-80GB-HBM3",
        minor=0,
        uuid=fake.gpus[0].uuid,
        healthy=True,
        utilization_percent=87.0,
        memory_used_bytes=40 * 1024 * MIB,
        memory_total_bytes=H100_MEMORY,
        temperature_celsius=61.0,
        power_watts=512.345,
    )
    assert second.temperature_celsius is None
    assert second.power_watts == 70.0


async def test_mig_mode_label_and_unsupported_fields_are_not_asked_again(make: Make) -> None:
    fake = FakeNvml.h100(count=3)
    fake.gpus[0].mig = True
    fake.gpus[2].mig = None  # a GPU without MIG
    probe = make(fake)
    await probe.probe()
    result = await probe.probe()
    labels = {d.minor: d.labels for d in result.devices}
    assert labels == {0: {nvidia.LABEL_MIG_MODE: "enabled"}, 1: {}, 2: {}}
    asked = [index for call, index in fake.calls if call == "mig_enabled"]
    assert sorted(i for i in asked if i is not None) == [0, 0, 1, 1, 2]


async def test_gpus_of_different_models_carry_no_model_label(make: Make) -> None:
    fake = FakeNvml.h100(count=2)
    fake.gpus[1].name = "NVIDIA A100-SXM4-80GB"
    result = await make(fake).probe()
    assert k.LABEL_GPU_MODEL not in result.labels
    assert {r.model for r in result.readings} == {"H100-80GB-HBM3", "A100-SXM4-80GB"}


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("Tesla T4", "Tesla-T4"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB-HBM3"),
        ("NVIDIA GeForce RTX 4070 Laptop GPU", "GeForce-RTX-4070-Laptop-GPU"),
        ("A made-up name (with/odd) characters ", "A-made-up-name-with-odd-characters"),
    ],
)
def test_model_label(name: str, label: str) -> None:
    assert nvidia.model_label(name) == label


async def test_no_gpus_on_the_bus_report_nothing(host: FakeHost) -> None:
    probe = NvidiaProbe(host.paths, nvml=FakeNvml([]))
    assert await probe.probe() == base.ProbeResult()
    await probe.aclose()


# --- the factory ------------------------------------------------------------------------------


def test_the_factory_needs_gpus_bound_to_nvidia(host: FakeHost) -> None:
    cfg = AgentConfig(host=host.paths)
    assert base.PROBES["nvidia"](cfg, "n1") is None
    add_pci_device(host, "0000:3b:00.0", vendor=0x10DE, device=0x2330, class_code=0x030200)
    assert base.PROBES["nvidia"](cfg, "n1") is None  # unbound
    FakeNvml.h100(count=1).write_sysfs(host)
    probe = base.PROBES["nvidia"](cfg, "n1")
    assert isinstance(probe, NvidiaProbe)
    assert "nvidia" in [p.name for p in base.probes_for(cfg, "n1")]


# --- NVML missing or failing ------------------------------------------------------------------


async def test_library_missing_means_no_devices_and_one_log_line(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    probe = make(FakeNvml.h100(count=8, library_missing=True))
    with caplog.at_level(logging.INFO, logger="agent.devices"):
        for _ in range(3):
            assert await probe.probe() == base.ProbeResult()
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "NVML is unavailable" in record.getMessage()


async def test_the_real_adapter_without_the_library(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip(reason="libnvidia-ml is installed on this machine")
    FakeNvml.h100(count=2).write_sysfs(host)
    probe = NvidiaProbe(host.paths)
    with caplog.at_level(logging.INFO, logger="agent.devices"):
        assert await probe.probe() == base.ProbeResult()
        assert await probe.probe() == base.ProbeResult()
    await probe.aclose()
    [record] = caplog.records
    assert "Library Not Found" in record.getMessage()


async def test_nvml_coming_up_later_is_picked_up(make: Make) -> None:
    fake = FakeNvml.h100(count=2)
    fake.init_error = TransientError("nvmlInit: Unknown Error")
    probe = make(fake)
    assert await probe.probe() == base.ProbeResult()
    fake.init_error = None
    assert len((await probe.probe()).devices) == 2


def test_the_adapter_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(Unsupported, match="nvidia-ml-py"):
        nvml.PynvmlApi().init()


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, Unsupported),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, Unsupported),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, Unsupported),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, Unsupported),
        (pynvml.NVML_ERROR_GPU_IS_LOST, NotFound),
        (pynvml.NVML_ERROR_NOT_FOUND, NotFound),
        (pynvml.NVML_ERROR_UNKNOWN, TransientError),
        (pynvml.NVML_ERROR_NO_PERMISSION, TransientError),
        (pynvml.NVML_ERROR_TIMEOUT, TransientError),
    ],
)
def test_nvml_errors_are_translated(code: int, error: type[Exception]) -> None:
    translated = nvml.translate(pynvml, pynvml.NVMLError(code), "nvmlDeviceGetUUID")
    assert type(translated) is error
    assert str(translated).startswith("nvmlDeviceGetUUID: ")


def adapter_over(**functions: Callable[..., Any]) -> nvml.PynvmlApi:
    """The real adapter over pynvml's constants and errors but these functions."""
    lib = types.SimpleNamespace(**{n: getattr(pynvml, n) for n in dir(pynvml) if n.isupper()})
    lib.NVMLError = pynvml.NVMLError
    lib.nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    lib.nvmlInit = lambda: None
    for name, function in functions.items():
        setattr(lib, name, function)
    api = nvml.PynvmlApi()
    api._module = lib
    return api


def test_the_adapter_event_wait() -> None:
    def timeout(event_set: object, ms: int) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    assert adapter_over(nvmlEventSetWait=timeout).event_wait(object(), 10) is None

    def xid(event_set: object, ms: int) -> Any:
        return types.SimpleNamespace(
            device="h", eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=79
        )

    api = adapter_over(nvmlEventSetWait=xid, nvmlDeviceGetUUID=lambda handle: "GPU-1")
    assert api.event_wait(object(), 10) == nvml.XidEvent(uuid="GPU-1", xid=79)

    def lost(handle: object) -> str:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    api = adapter_over(nvmlEventSetWait=xid, nvmlDeviceGetUUID=lost)
    assert api.event_wait(object(), 10) == nvml.XidEvent(uuid=None, xid=79)

    def broken(event_set: object, ms: int) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    with pytest.raises(TransientError, match="nvmlEventSetWait"):
        adapter_over(nvmlEventSetWait=broken).event_wait(object(), 10)


def test_the_adapter_decodes_struct_strings() -> None:
    info = types.SimpleNamespace(busId=b"00000000:3B:00.0")
    api = adapter_over(nvmlDeviceGetPciInfo=lambda handle: info)
    assert api.pci_bus_id(object()) == "00000000:3B:00.0"


# --- health -----------------------------------------------------------------------------------


async def test_init_failure_of_one_gpu_keeps_the_others(
    make: Make, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml.h100(count=8)
    fake.fail_init(2)
    probe = make(fake)
    with caplog.at_level(logging.WARNING, logger="agent.devices"):
        first = await probe.probe()
        second = await probe.probe()
    assert sorted(by_minor(first.devices)) == [0, 1, 3, 4, 5, 6, 7]
    assert all(d.health for d in first.devices)
    assert second == first
    left_out = [r for r in caplog.records if "left out" in r.getMessage()]
    assert len(left_out) == 1
    assert fake.gpus[2].bus_id in left_out[0].getMessage()

    fake.gpus[2].handle_error = None  # it comes up
    third = by_minor((await probe.probe()).devices)
    assert sorted(third) == list(range(8))
    assert third[2].health is False  # failures within the recovery window
    clock.advance(WINDOW)
    assert by_minor((await probe.probe()).devices)[2].health is True


async def test_a_lost_gpu_is_unhealthy_and_the_others_keep_reporting(make: Make) -> None:
    fake = FakeNvml.h100(count=8)
    probe = make(fake)
    before = await probe.probe()
    fake.lose(3)
    result = await probe.probe()
    devices = by_minor(result.devices)
    assert [minor for minor, d in devices.items() if not d.health] == [3]
    reason, message, _ = condition(devices[3])
    assert reason == "GPULost"
    assert "GPU is lost" in message
    assert devices[3].id == by_minor(before.devices)[3].id
    assert devices[3].resources == by_minor(before.devices)[3].resources
    readings = {r.minor: r for r in result.readings}
    assert readings[3].healthy is False
    assert readings[3].memory_used_bytes is None
    assert all(readings[m].memory_used_bytes == 0 for m in devices if m != 3)


async def test_a_recovered_gpu_comes_back_after_the_window(make: Make, clock: Clock) -> None:
    fake = FakeNvml.h100(count=2)
    probe = make(fake, recovery_window=WINDOW)
    await probe.probe()
    fake.lose(1)
    lost_at = clock.now
    await probe.probe()
    fake.restore(1)
    for seconds in (10, WINDOW - 20):
        clock.advance(seconds)
        gpu = by_minor((await probe.probe()).devices)[1]
        assert gpu.health is False
        assert condition(gpu)[2] == lost_at.isoformat()  # the transition, not the probe
    clock.advance(10)
    gpu = by_minor((await probe.probe()).devices)[1]
    assert (gpu.health, gpu.conditions) == (True, ())


async def test_a_gpu_failing_again_restarts_the_window(make: Make, clock: Clock) -> None:
    fake = FakeNvml.h100(count=1)
    probe = make(fake, recovery_window=WINDOW)
    await probe.probe()
    fake.lose(0)
    await probe.probe()
    fake.restore(0)
    clock.advance(WINDOW - 1)
    fake.double_bit_ecc(0, 1)
    await probe.probe()
    fake.double_bit_ecc(0, 0)
    clock.advance(2)
    [gpu] = (await probe.probe()).devices
    assert gpu.health is False
    assert condition(gpu)[0] == "DoubleBitECCError"


async def test_double_bit_ecc_and_pending_retired_pages(make: Make) -> None:
    fake = FakeNvml.h100(count=4)
    fake.double_bit_ecc(1, 2)
    fake.retired_pages(2)
    fake.gpus[3].retired_pages_pending = False
    result = by_minor((await make(fake).probe()).devices)
    assert [m for m, d in result.items() if not d.health] == [1, 2]
    assert condition(result[1])[:2] == (
        "DoubleBitECCError",
        "2 uncorrected ECC error(s) since the driver loaded",
    )
    assert condition(result[2])[0] == "RetiredPagesPending"


async def test_a_gpu_whose_events_cannot_be_watched_is_unhealthy(make: Make) -> None:
    fake = FakeNvml.h100(count=2)
    fake.gpus[1].events_supported = False
    result = by_minor((await make(fake).probe()).devices)
    assert result[0].health is True
    assert condition(result[1])[0] == "DeviceHealthCheckNotSupported"


async def test_a_gpu_leaving_the_driver_stays_reported_unhealthy(
    make: Make, host: FakeHost
) -> None:
    fake = FakeNvml.h100(count=2)
    probe = make(fake)
    await probe.probe()
    (host.root / "sys/bus/pci/devices" / fake.gpus[1].bus_id).unlink()
    result = by_minor((await probe.probe()).devices)
    assert result[0].health is True
    assert condition(result[1])[0] == "NotBoundToDriver"


# --- XID events -------------------------------------------------------------------------------


async def test_a_critical_xid_marks_that_gpu_unhealthy(make: Make, clock: Clock) -> None:
    fake = FakeNvml.h100(count=4)
    changed = asyncio.Event()
    probe = make(fake, event_wait_ms=20, event_interval=0.01, on_change=changed.set)
    await probe.probe()
    watcher = asyncio.create_task(probe.watcher.run())
    try:
        fake.xid(2, 79)
        await asyncio.wait_for(changed.wait(), 10)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    result = by_minor((await probe.probe()).devices)
    assert [m for m, d in result.items() if not d.health] == [2]
    assert condition(result[2])[:2] == ("Xid79", "Xid error detected on device, error code: 79")
    clock.advance(WINDOW)
    assert all(d.health for d in (await probe.probe()).devices)


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
async def test_application_xids_leave_health_alone(make: Make, xid: int) -> None:
    fake = FakeNvml.h100(count=2)
    changes: list[None] = []
    probe = make(fake, on_change=lambda: changes.append(None))
    await probe.probe()
    fake.xid(0, xid)
    event = await probe.watcher.wait_once()
    assert event == nvml.XidEvent(uuid=fake.gpus[0].uuid, xid=xid)
    probe.record_xid(event)
    assert all(d.health for d in (await probe.probe()).devices)
    assert changes == []


async def test_an_xid_naming_no_gpu_marks_every_gpu(make: Make) -> None:
    fake = FakeNvml.h100(count=3)
    probe = make(fake)
    await probe.probe()
    fake.xid(None, 48)
    event = await probe.watcher.wait_once()
    assert event is not None
    probe.record_xid(event)
    result = (await probe.probe()).devices
    assert [condition(d)[0] for d in result] == ["Xid48"] * 3


async def test_an_xid_of_a_gpu_not_reported_changes_nothing(make: Make) -> None:
    probe = make(FakeNvml.h100(count=2))
    await probe.probe()
    probe.record_xid(nvml.XidEvent(uuid="GPU-elsewhere", xid=79))
    assert all(d.health for d in (await probe.probe()).devices)


async def test_the_watcher_waits_for_nvml_and_survives_failing_waits(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml.h100(count=1)
    probe = make(fake, event_wait_ms=10)
    assert await probe.watcher.wait_once() is None  # NVML not started yet: nothing asked
    assert fake.calls == []
    await probe.probe()
    original = fake.event_wait

    def broken(event_set: object, timeout_ms: int) -> nvml.XidEvent | None:
        raise TransientError("nvmlEventSetWait: Unknown Error")

    fake.event_wait = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="agent.devices"):
        for _ in range(3):
            assert await probe.watcher.wait_once() is None
        fake.event_wait = original  # type: ignore[method-assign]
        fake.xid(0, 79)
        assert await probe.watcher.wait_once() == nvml.XidEvent(fake.gpus[0].uuid, 79)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert all(d.health for d in (await probe.probe()).devices)


def test_the_watcher_is_a_component(host: FakeHost) -> None:
    from runtime.lifecycle import Component

    probe = NvidiaProbe(host.paths, nvml=FakeNvml([]))
    assert probe.components() == (probe.watcher,)
    assert isinstance(probe.watcher, Component)
    assert isinstance(probe, base.DeviceProbe)


# --- threads, timeouts and loop lag -----------------------------------------------------------


async def test_every_nvml_call_runs_off_the_event_loop(make: Make) -> None:
    fake = FakeNvml.h100(count=4)
    probe = make(fake)
    await probe.probe()
    await probe.watcher.wait_once()
    assert fake.calls
    assert threading.get_ident() not in fake.threads
    assert len(fake.threads) == 1  # one dedicated worker thread


async def test_a_hanging_call_is_abandoned_at_its_timeout(make: Make) -> None:
    fake = FakeNvml.h100(count=8)
    probe = make(fake, call_timeout=0.5)
    await probe.probe()
    threads = probe.runner.threads_started
    release = fake.hang(5)

    started = time.monotonic()
    result = await probe.probe()
    took = time.monotonic() - started
    assert took < 0.5 + 3.0  # the timeout plus a generous margin for the other 7 GPUs
    devices = by_minor(result.devices)
    assert sorted(devices) == list(range(8))
    assert [m for m, d in devices.items() if not d.health] == [5]
    assert condition(devices[5])[0] == "NVMLTimeout"
    assert probe.runner.threads_started == threads + 1  # a fresh worker for the others

    # Still hung: the GPU is skipped at once, no work queued behind the hung thread.
    calls = len(fake.calls)
    started = time.monotonic()
    result = await probe.probe()
    assert time.monotonic() - started < 0.5
    assert probe.runner.threads_started == threads + 1
    assert not [index for _, index in fake.calls[calls:] if index == 5]
    assert [d.minor for d in result.devices if not d.health] == [5]

    release.set()
    await until(lambda: not probe.runner.hung(fake.gpus[5].bus_id))
    await probe.probe()
    assert any(index == 5 for _, index in fake.calls[calls:])


async def test_a_probe_cancelled_by_the_agent_leaves_no_work_behind_the_hung_call(
    make: Make,
) -> None:
    fake = FakeNvml.h100(count=4)
    probe = make(fake, call_timeout=30.0)
    await probe.probe()
    fake.hang(1)
    with pytest.raises(TransientError, match="took longer"):
        await base.run_probe(probe, limit=0.5)  # the agent's limit on a whole probe
    started = time.monotonic()
    result = by_minor((await probe.probe()).devices)
    assert time.monotonic() - started < 3.0
    assert [m for m, d in result.items() if not d.health] == [1]
    assert "still hangs" in condition(result[1])[1]


async def test_a_hang_on_first_sight_of_a_gpu(make: Make) -> None:
    fake = FakeNvml.h100(count=3)
    fake.hang(1, call="temperature")
    probe = make(fake, call_timeout=0.3)
    started = time.monotonic()
    result = by_minor((await probe.probe()).devices)
    assert time.monotonic() - started < 0.3 + 3.0
    assert (result[0].health, result[1].health, result[2].health) == (True, False, True)


async def test_a_hanging_init_is_abandoned(make: Make) -> None:
    fake = FakeNvml.h100(count=2)
    release = fake.hang(call="init")
    probe = make(fake, init_timeout=0.3)
    started = time.monotonic()
    assert await probe.probe() == base.ProbeResult()
    assert time.monotonic() - started < 0.3 + 3.0
    assert await probe.probe() == base.ProbeResult()  # still hung: not asked again
    assert [call for call, _ in fake.calls].count("init") == 1
    release.set()
    await until(lambda: not probe.runner.hung("init"))
    assert len((await probe.probe()).devices) == 2


async def max_loop_lag_during(work: Coroutine[Any, Any, object]) -> tuple[float, float, int]:
    """(worst lag of ``asyncio.sleep(0.001)``, seconds ``work`` took, samples taken)."""
    lags: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            started = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - started - 0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    lags.clear()
    started = time.perf_counter()
    await work
    took = time.perf_counter() - started
    done = True
    await task
    return max(lags), took, len(lags)


async def test_the_probe_never_blocks_the_event_loop(host: FakeHost) -> None:
    # Every NVML call takes 50 ms (about 15 calls: a probe of >= 0.4 s); the loop must stay
    # responsive throughout: no tick more than 5 ms late. A call made on the loop would make
    # one tick >= 45 ms late in every attempt; a busy machine delays single ticks now and
    # then, so the best of five probes counts.
    worst: list[float] = []
    FakeNvml.h100(count=1).write_sysfs(host)  # the same GPU for every attempt
    for _ in range(5):
        fake = FakeNvml.h100(count=1, call_delay=0.05)
        probe = NvidiaProbe(host.paths, nvml=fake)
        gc.collect()
        lag, took, samples = await max_loop_lag_during(probe.probe())
        await probe.aclose()
        assert took >= 0.4
        assert samples >= 40
        worst.append(lag)
        if lag < 0.005:
            break
    assert min(worst) < 0.005, f"worst loop lag of each probe: {worst}"


async def test_the_lag_measurement_sees_calls_made_on_the_loop() -> None:
    # The control: the same 50 ms calls made on the event loop thread show up as lag.
    fake = FakeNvml.h100(count=1, call_delay=0.05)
    fake.init()
    handle = fake.handle_by_index(0)

    async def on_the_loop() -> None:
        for _ in range(8):
            fake.memory(handle)
            await asyncio.sleep(0)

    lag, took, _ = await max_loop_lag_during(on_the_loop())
    assert took >= 0.4
    assert lag >= 0.04
