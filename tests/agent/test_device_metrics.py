"""Device metrics: readings and probe statistics as a Prometheus scrape shows them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.devices import base, simulated
from agent.devices.metrics import DeviceCollector, error_kind, exported
from agent.errors import ConfigError, TransientError, Unsupported

GIB = 1 << 30
MIB = 1 << 20

FULL = base.DeviceReading(
    vendor="nvidia",
    model="H100-80GB-HBM3",
    minor=0,
    uuid="GPU-a",
    healthy=True,
    utilization_percent=37.0,
    memory_used_bytes=12 * GIB,
    memory_total_bytes=80 * GIB,
    temperature_celsius=61.0,
    power_watts=312.5,
)
#: What a vendor tool without temperature, power or usage figures reports.
SPARSE = base.DeviceReading(
    vendor="huawei",
    model="Ascend-910B3",
    minor=3,
    uuid="npu-3",
    healthy=False,
    memory_total_bytes=64 * GIB,
)


def labels(reading: base.DeviceReading, node: str = "n1") -> dict[str, str]:
    return {
        "node": node,
        "vendor": reading.vendor,
        "model": reading.model,
        "minor": str(reading.minor),
        "uuid": reading.uuid,
    }


def value(
    registry: CollectorRegistry, name: str, reading: base.DeviceReading, node: str = "n1"
) -> float | None:
    return registry.get_sample_value(name, labels(reading, node))


def families(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return [family.name for family in text_string_to_metric_families(text)]


def registry_with(
    node: str, results: Sequence[base.ProbeResult]
) -> tuple[CollectorRegistry, DeviceCollector]:
    registry = CollectorRegistry()
    collector = DeviceCollector()
    collector.add(node, lambda: results)
    registry.register(collector)
    return registry, collector


def test_every_reading_of_a_device_is_exported() -> None:
    registry, _ = registry_with("n1", [base.ProbeResult(readings=(FULL,))])
    assert value(registry, "koordpy_device_utilization_percent", FULL) == 37.0
    assert value(registry, "koordpy_device_memory_used_bytes", FULL) == 12 * GIB
    assert value(registry, "koordpy_device_memory_total_bytes", FULL) == 80 * GIB
    assert value(registry, "koordpy_device_temperature_celsius", FULL) == 61.0
    assert value(registry, "koordpy_device_power_watts", FULL) == 312.5
    assert value(registry, "koordpy_device_healthy", FULL) == 1.0


def test_figures_a_vendor_does_not_report_are_left_out_not_zero() -> None:
    registry, _ = registry_with("n1", [base.ProbeResult(readings=(FULL, SPARSE))])
    assert value(registry, "koordpy_device_memory_total_bytes", SPARSE) == 64 * GIB
    assert value(registry, "koordpy_device_healthy", SPARSE) == 0.0
    for missing in (
        "koordpy_device_utilization_percent",
        "koordpy_device_memory_used_bytes",
        "koordpy_device_temperature_celsius",
        "koordpy_device_power_watts",
    ):
        assert value(registry, missing, SPARSE) is None, missing
        assert value(registry, missing, FULL) is not None, missing


def test_each_scrape_reads_the_latest_results() -> None:
    current = [base.ProbeResult(readings=(FULL,))]
    registry = CollectorRegistry()
    collector = DeviceCollector()
    collector.add("n1", lambda: current)
    registry.register(collector)
    assert value(registry, "koordpy_device_utilization_percent", FULL) == 37.0
    busier = dataclasses.replace(FULL, utilization_percent=99.0)
    current[:] = [base.ProbeResult(readings=(busier,))]
    assert value(registry, "koordpy_device_utilization_percent", FULL) == 99.0
    current[:] = []
    assert value(registry, "koordpy_device_healthy", FULL) is None, "a gone device is not kept"


def test_a_device_two_probes_report_is_exported_once() -> None:
    twice = [base.ProbeResult(readings=(FULL,)), base.ProbeResult(readings=(FULL,))]
    registry, _ = registry_with("n1", twice)
    text = generate_latest(registry).decode()
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "koordpy_device_healthy"
    ]
    assert len(family.samples) == 1


def test_simulated_devices_report_idle_readings_without_invented_figures() -> None:
    result = simulated.simulate((simulated.PROFILES["ascend-910b3"],), "sim")
    assert len(result.readings) == 8
    assert [r.uuid for r in result.readings] == [d.id for d in result.devices]
    assert [r.minor for r in result.readings] == [d.minor for d in result.devices]
    registry, _ = registry_with("sim", [result])
    for reading in result.readings:
        assert value(registry, "koordpy_device_memory_total_bytes", reading, "sim") == 65536 * MIB
        assert value(registry, "koordpy_device_utilization_percent", reading, "sim") == 0.0
        assert value(registry, "koordpy_device_healthy", reading, "sim") == 1.0
        assert value(registry, "koordpy_device_temperature_celsius", reading, "sim") is None
        assert value(registry, "koordpy_device_power_watts", reading, "sim") is None


# --- probe errors and latency --------------------------------------------------------------


class Answers:
    def __init__(self, name: str, error: BaseException | None = None) -> None:
        self.name = name
        self.error = error

    async def probe(self) -> base.ProbeResult:
        if self.error is not None:
            raise self.error
        return base.ProbeResult(readings=(FULL,))


class Hangs:
    name = "hangs"

    async def probe(self) -> base.ProbeResult:
        await asyncio.Event().wait()
        return base.ProbeResult()


async def test_probe_runs_count_errors_by_kind_and_time_every_run() -> None:
    registry = CollectorRegistry()
    with exported(registry, "n1") as devices:
        good, gone = Answers("nvml"), Answers("npu-smi", Unsupported("npu-smi not found"))
        for _ in range(3):
            await base.probe_all([good, gone], limit=5, observe=devices.observe)
        with pytest.raises(TransientError):
            await base.run_probe(Hangs(), limit=0.01, observe=devices.observe)
        with pytest.raises(TransientError):
            await base.run_probe(
                Answers("mx-smi", TransientError("mx-smi exited 1")),
                limit=5,
                observe=devices.observe,
            )
        with pytest.raises(KeyError):
            await base.run_probe(Answers("nvml", KeyError("bug")), limit=5, observe=devices.observe)

        def errors(probe: str, kind: str) -> float | None:
            return registry.get_sample_value(
                "koordpy_device_probe_errors_total", {"node": "n1", "probe": probe, "kind": kind}
            )

        def runs(probe: str) -> float | None:
            return registry.get_sample_value(
                "koordpy_device_probe_duration_seconds_count", {"node": "n1", "probe": probe}
            )

        assert errors("npu-smi", "unsupported") == 3
        assert errors("hangs", "timeout") == 1
        assert errors("mx-smi", "transient") == 1
        assert errors("nvml", "other") == 1
        assert errors("nvml", "transient") is None, "successful runs are not errors"
        assert runs("nvml") == 4
        assert runs("npu-smi") == 3
        assert runs("hangs") == 1
        hung = registry.get_sample_value(
            "koordpy_device_probe_duration_seconds_sum", {"node": "n1", "probe": "hangs"}
        )
        assert hung is not None
        assert hung > 0.005, "a timed-out run counts until it was abandoned (0.01 s)"
        below_limit = registry.get_sample_value(
            "koordpy_device_probe_duration_seconds_bucket",
            {"node": "n1", "probe": "hangs", "le": "0.005"},
        )
        assert below_limit == 0
        everything = registry.get_sample_value(
            "koordpy_device_probe_duration_seconds_bucket",
            {"node": "n1", "probe": "hangs", "le": "+Inf"},
        )
        assert everything == 1


async def test_a_cancelled_probe_run_is_neither_an_error_nor_timed() -> None:
    seen: list[tuple[str, float, BaseException | None]] = []
    task = asyncio.create_task(
        base.run_probe(Hangs(), limit=60, observe=lambda *run: seen.append(run))
    )
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == []


def test_error_kinds() -> None:
    late = TransientError("mx-smi took longer than 5s")
    late.__cause__ = TimeoutError()
    assert error_kind(late) == "timeout"
    assert error_kind(TransientError("mx-smi exited 1")) == "transient"
    assert error_kind(TimeoutError()) == "timeout"
    assert error_kind(Unsupported("no driver")) == "unsupported"
    assert error_kind(ConfigError("bad path")) == "config"
    assert error_kind(OSError("EIO")) == "other"


# --- one collector per registry ------------------------------------------------------------


def test_nodes_share_one_collector_per_registry_until_the_last_leaves() -> None:
    registry = CollectorRegistry()
    with exported(registry, "a") as a:
        a.results = lambda: [base.ProbeResult(readings=(FULL,))]
        with exported(registry, "b") as b:
            b.results = lambda: [base.ProbeResult(readings=(SPARSE,))]
            names = families(registry)
            assert len(names) == len(set(names)), "each family once in the exposition"
            assert value(registry, "koordpy_device_healthy", FULL, "a") == 1.0
            assert value(registry, "koordpy_device_healthy", SPARSE, "b") == 0.0
            with pytest.raises(ValueError, match="already exported"), exported(registry, "a"):
                pass
        assert value(registry, "koordpy_device_healthy", SPARSE, "b") is None
        assert value(registry, "koordpy_device_healthy", FULL, "a") == 1.0
    assert not [name for name in families(registry) if name.startswith("koordpy_device_")]
    with exported(registry, "a"):  # registers again after the last one left
        assert "koordpy_device_healthy" in families(registry)
