"""The NodeMetric windows: averages and percentiles against numpy, cold start, bounded memory."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.devices.base import DeviceReading
from agent.metrics.snapshot import CgroupUsage, HostAppUsage, MetricsSnapshot, PodUsage
from agent.metrics.windows import AGGREGATIONS, Windows

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _snap(
    at: float,
    cpu: float | None = None,
    memory: int | None = None,
    *,
    pods: dict[str, tuple[float | None, int | None]] | None = None,
    devices: tuple[DeviceReading, ...] = (),
    apps: dict[str, float] | None = None,
) -> MetricsSnapshot:
    return MetricsSnapshot(
        node="n",
        taken_at=EPOCH,
        monotonic=at,
        node_cpu=cpu,
        node_memory=memory,
        system_cpu=None if cpu is None else cpu / 2,
        system_memory=None if memory is None else memory // 2,
        pods=tuple(
            PodUsage(
                uid=uid,
                name=uid,
                namespace="ns",
                qos="LS",
                priority="koord-prod",
                usage=CgroupUsage(cpu=c, memory=m),
            )
            for uid, (c, m) in (pods or {}).items()
        ),
        host_apps=tuple(
            HostAppUsage(name=name, qos="LS", priority="", usage=CgroupUsage(cpu=c))
            for name, c in (apps or {}).items()
        ),
        devices=devices,
    )


_CPU = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(_CPU, min_size=1, max_size=80), window=st.sampled_from([5.0, 10.0, 30.0]))
def test_avg_and_percentiles_match_numpy_on_the_retained_samples(
    values: list[float | None], window: float
) -> None:
    windows = Windows(interval=1.0, aggregate_duration=window, durations=(window, 2 * window))
    for tick, value in enumerate(values):
        windows.record(_snap(float(tick), value))
    now = float(len(values) - 1)
    found = windows.aggregate()
    for stats in (found.average, found.windows[0], found.windows[1]):
        # the samples of the window: the ticks after now - window
        kept = [v for t, v in enumerate(values) if t > now - stats.seconds and v is not None]
        ticks = sum(1 for t in range(len(values)) if t > now - stats.seconds)
        assert stats.covered == (ticks >= stats.seconds / 2)
        if not kept:
            assert stats.node_cpu is None
            continue
        assert stats.node_cpu is not None
        assert stats.node_cpu.avg == pytest.approx(np.mean(kept))
        if not stats.covered:
            assert stats.node_cpu.p50 is None
            continue
        for name, q in zip(AGGREGATIONS[1:], (50, 90, 95, 99), strict=True):
            assert stats.node_cpu.get(name) == pytest.approx(np.percentile(kept, q)), name
        assert stats.system_cpu is not None
        assert stats.system_cpu.p90 == pytest.approx(np.percentile(kept, 90) / 2)


@settings(max_examples=30, deadline=None)
@given(
    ticks=st.integers(min_value=1, max_value=3000),
    churn=st.lists(st.sets(st.integers(0, 40), max_size=12), min_size=1, max_size=40),
)
def test_memory_is_bounded_whatever_the_ticks_and_the_pod_churn(
    ticks: int, churn: list[set[int]]
) -> None:
    windows = Windows(interval=1.0, aggregate_duration=60.0, durations=(60.0, 120.0))
    gpu = DeviceReading(vendor="v", model="m", minor=0, uuid="g", healthy=True)
    windows.record(_snap(0.0, 1.0, devices=(gpu,)))
    baseline = windows.nbytes
    peak = 0
    for tick in range(1, ticks + 1):
        live = churn[tick % len(churn)]
        peak = max(peak, len(live))
        pods = {f"pod-{i}": (float(i), i * 100) for i in live}
        windows.record(_snap(float(tick), float(tick), pods=pods, devices=(gpu,)))
    # the node and device rings never grow; the pod table is at most twice the peak
    # concurrency wide (it starts 16 columns wide and doubles)
    width = 16
    while width < peak:
        width *= 2
    growth = (width - 16) * 61 * 8 * 2
    assert windows.nbytes <= baseline + growth
    assert set(windows.aggregate().pods) == {f"pod-{i}" for i in churn[ticks % len(churn)]}


def test_cold_start_coverage() -> None:
    windows = Windows(interval=1.0, aggregate_duration=10.0, durations=(10.0, 20.0))
    found = windows.aggregate()
    assert not found.average.covered
    assert found.average.node_cpu is None
    assert found.pods == {}
    for tick in range(10):
        windows.record(_snap(float(tick), 100.0 + tick))
    found = windows.aggregate()
    ten, twenty = found.windows
    assert ten.covered
    assert ten.node_cpu is not None
    assert ten.node_cpu.p99 is not None
    assert twenty.covered, "10 samples of 1 s cover half of 20 s"
    windows = Windows(interval=1.0, aggregate_duration=10.0, durations=(10.0, 20.0))
    for tick in range(9):
        windows.record(_snap(float(tick), 100.0))
    twenty = windows.aggregate().windows[1]
    assert not twenty.covered
    assert twenty.node_cpu is not None
    assert twenty.node_cpu.avg == 100.0
    assert twenty.node_cpu.p50 is None


def test_pod_and_host_app_averages_over_the_aggregate_duration() -> None:
    windows = Windows(interval=1.0, aggregate_duration=4.0, durations=(4.0,))
    for tick in range(10):
        pods: dict[str, tuple[float | None, int | None]] = {"a": (float(tick), 1000)}
        if tick >= 8:
            pods["b"] = (None, 50)
        windows.record(_snap(float(tick), pods=pods, apps={"nginx": 5.0}))
    found = windows.aggregate()
    # the last 4 ticks: 6, 7, 8, 9
    assert found.pods["a"].cpu == pytest.approx(7.5)
    assert found.pods["a"].memory == 1000
    assert found.pods["b"].cpu is None
    assert found.pods["b"].memory == 50
    assert found.host_apps["nginx"].cpu == 5.0

    # "a" goes, then a new pod takes its column: it starts clean
    windows.record(_snap(10.0, pods={"b": (1.0, 50)}))
    assert set(windows.aggregate().pods) == {"b"}
    windows.record(_snap(11.0, pods={"b": (1.0, 50), "c": (3.0, None)}))
    found = windows.aggregate()
    assert found.pods["c"].cpu == 3.0
    assert found.pods["c"].memory is None


def test_devices_are_aggregated_and_forgotten_after_the_longest_window() -> None:
    windows = Windows(interval=1.0, aggregate_duration=4.0, durations=(4.0, 8.0))
    gpu = DeviceReading(
        vendor="nvidia",
        model="A100",
        minor=3,
        uuid="GPU-3",
        healthy=True,
        utilization_percent=50.0,
        memory_used_bytes=4 << 30,
        memory_total_bytes=16 << 30,
    )
    for tick in range(4):
        windows.record(_snap(float(tick), 1.0, devices=(gpu,)))
    [device] = windows.aggregate().average.devices
    assert (device.uuid, device.minor, device.healthy) == ("GPU-3", 3, True)
    assert device.memory_total == 16 << 30
    assert device.utilization is not None
    assert device.utilization.p95 == 50.0
    assert device.memory is not None
    assert device.memory.avg == 4 << 30
    held = windows.nbytes
    for tick in range(4, 13):
        windows.record(_snap(float(tick), 1.0))
    assert windows.aggregate().average.devices == ()
    assert windows.nbytes < held, "its buffers are freed"


def test_windows_refuse_nonsense_and_ignore_old_snapshots() -> None:
    with pytest.raises(ValueError, match="positive"):
        Windows(interval=0, durations=(10.0,))
    with pytest.raises(ValueError, match="positive"):
        Windows(interval=1.0, durations=(0.0,))
    windows = Windows(interval=1.0, aggregate_duration=10.0, durations=(10.0,))
    windows.record(_snap(5.0, 10.0))
    windows.record(_snap(4.0, 99.0))
    average = windows.aggregate().average.node_cpu
    assert average is not None
    assert average.avg == 10.0
    assert windows.latest == 5.0
    assert not math.isnan(average.avg)
