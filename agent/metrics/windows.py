"""The samples behind NodeMetric's averages and percentiles, in bounded memory.

:class:`Windows` records every :class:`~agent.metrics.snapshot.MetricsSnapshot` the collector
takes and answers, at any moment, what NodeMetric reports (:meth:`Windows.aggregate`):

* node and system CPU and memory, and each device's utilisation and memory: avg, p50, p90, p95
  and p99 over each of ``durations`` (koordlet's ``nodeAggregatePolicy``, default 5, 10 and
  30 minutes) and over ``aggregate_duration`` (default 5 minutes);
* each pod's and host application's CPU and memory: the average over ``aggregate_duration``.

Storage is preallocated numpy ring buffers: one slot per tick (``interval``) for the longest
window, per series; pods and host applications share one matrix (a slot per tick, a column
per pod), and a pod that is gone from a snapshot loses its column at once. Memory therefore
depends on the windows and on how many pods run at the same time, never on how long the agent
runs. Devices missing from the readings for longer than the longest window are forgotten.

Coverage (cold start): a window whose ticks cover less than half of it (ticks recorded within
it x ``interval`` < window / 2) has no percentiles, and :attr:`WindowStats.covered` is false;
its average is still given. Percentiles interpolate linearly between the retained samples, as
:func:`numpy.percentile` does by default; ``None`` values of a snapshot are not samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from agent.devices.base import DeviceReading
from agent.metrics.snapshot import MetricsSnapshot

__all__ = [
    "AGGREGATIONS",
    "Aggregates",
    "Average",
    "DeviceStats",
    "Stats",
    "WindowStats",
    "Windows",
]

#: The aggregations of NodeMetric's ``aggregated*Usages`` entries, in order.
AGGREGATIONS: Final = ("avg", "p50", "p90", "p95", "p99")
_PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0)
#: No window keeps more slots than this (a very short interval with long windows).
_MAX_SLOTS: Final = 1_000_000
_NODE_CPU, _NODE_MEMORY, _SYSTEM_CPU, _SYSTEM_MEMORY = range(4)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Stats:
    """One series over one window; percentiles are ``None`` when the window is not covered."""

    avg: float
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    def get(self, aggregation: str) -> float | None:
        """The figure named as NodeMetric names it (``avg``, ``p50``...)."""
        value: float | None = getattr(self, aggregation)
        return value


@dataclass(frozen=True, slots=True)
class DeviceStats:
    """A device's utilisation (percent) and memory used (bytes) over a window."""

    uuid: str
    minor: int
    healthy: bool
    memory_total: int | None
    utilization: Stats | None
    memory: Stats | None


@dataclass(frozen=True, slots=True)
class WindowStats:
    seconds: float
    #: Whether the samples cover at least half the window (else no percentiles).
    covered: bool
    node_cpu: Stats | None = None
    node_memory: Stats | None = None
    system_cpu: Stats | None = None
    system_memory: Stats | None = None
    devices: tuple[DeviceStats, ...] = ()


@dataclass(frozen=True, slots=True)
class Average:
    """CPU (millicores) and memory (bytes) averaged over ``aggregate_duration``."""

    cpu: float | None
    memory: float | None


@dataclass(frozen=True, slots=True)
class Aggregates:
    """Everything :class:`Windows` holds, aggregated at one moment."""

    #: Over ``aggregate_duration``: NodeMetric's ``nodeUsage`` and ``systemUsage`` (avg).
    average: WindowStats
    #: One per ``durations`` entry, in order.
    windows: tuple[WindowStats, ...]
    #: pod UID -> average; host application name -> average (those in the latest snapshot).
    pods: Mapping[str, Average]
    host_apps: Mapping[str, Average]


def _stats(samples: FloatArray, covered: bool) -> Stats | None:
    values = samples[~np.isnan(samples)]
    if values.size == 0:
        return None
    avg = float(values.mean())
    if not covered:
        return Stats(avg=avg)
    p50, p90, p95, p99 = (float(v) for v in np.percentile(values, _PERCENTILES))
    return Stats(avg=avg, p50=p50, p90=p90, p95=p95, p99=p99)


def _slots(window: float, interval: float) -> int:
    return min(math.ceil(window / interval - 1e-9) + 1, _MAX_SLOTS)


def _value(value: float | None) -> float:
    return math.nan if value is None else float(value)


class _Ring:
    """Fixed slots of (time, row of ``width`` floats); NaN is "no sample"."""

    __slots__ = ("pos", "times", "values")

    def __init__(self, slots: int, width: int) -> None:
        self.times: FloatArray = np.full(slots, -np.inf)
        self.values: FloatArray = np.full((slots, width), np.nan)
        self.pos = 0

    def push(self, at: float, row: Sequence[float]) -> None:
        pos = self.pos
        self.times[pos] = at
        self.values[pos] = row
        self.pos = (pos + 1) % self.times.size

    def since(self, start: float) -> FloatArray:
        """The rows recorded after ``start``."""
        result: FloatArray = self.values[self.times > start]
        return result

    def count(self, start: float) -> int:
        return int(np.count_nonzero(self.times > start))

    @property
    def nbytes(self) -> int:
        return int(self.times.nbytes + self.values.nbytes)


class _Table:
    """CPU and memory of keyed members (pods, host applications) over a fixed number of
    ticks: a slot per tick, a column per member; a member's column is freed when it is
    missing from a tick."""

    __slots__ = ("columns", "cpu", "free", "memory", "pos", "times")

    def __init__(self, slots: int, width: int = 16) -> None:
        self.times: FloatArray = np.full(slots, -np.inf)
        self.cpu: FloatArray = np.full((slots, width), np.nan)
        self.memory: FloatArray = np.full((slots, width), np.nan)
        self.columns: dict[str, int] = {}
        self.free: list[int] = list(range(width - 1, -1, -1))
        self.pos = 0

    def _grow(self) -> None:
        slots, width = self.cpu.shape
        wider = width * 2
        for name in ("cpu", "memory"):
            old: FloatArray = getattr(self, name)
            new: FloatArray = np.full((slots, wider), np.nan)
            new[:, :width] = old
            setattr(self, name, new)
        self.free.extend(range(wider - 1, width - 1, -1))

    def _column(self, key: str) -> int:
        column = self.columns.get(key)
        if column is None:
            if not self.free:
                self._grow()
            column = self.columns[key] = self.free.pop()
        return column

    def record(self, at: float, members: Sequence[tuple[str, float | None, float | None]]) -> None:
        columns = self.columns
        if len(members) != len(columns) or any(key not in columns for key, _, _ in members):
            present = {key for key, _, _ in members}
            for key in [k for k in columns if k not in present]:
                column = columns.pop(key)
                self.cpu[:, column] = np.nan
                self.memory[:, column] = np.nan
                self.free.append(column)
        pos = self.pos
        self.times[pos] = at
        self.cpu[pos] = np.nan
        self.memory[pos] = np.nan
        if members:
            where = [self._column(key) for key, _, _ in members]
            self.cpu[pos, where] = [_value(cpu) for _, cpu, _ in members]
            self.memory[pos, where] = [_value(memory) for _, _, memory in members]
        self.pos = (pos + 1) % self.times.size

    def averages(self, start: float) -> dict[str, Average]:
        rows = self.times > start
        found: dict[str, Average] = {}
        if not self.columns:
            return found
        means: list[list[float | None]] = []
        for table in (self.cpu, self.memory):
            selected = table[rows]
            counts = np.count_nonzero(~np.isnan(selected), axis=0)
            sums = np.nansum(selected, axis=0)
            means.append([float(s / c) if c else None for s, c in zip(sums, counts, strict=True)])
        cpu, memory = means
        for key, column in self.columns.items():
            found[key] = Average(cpu=cpu[column], memory=memory[column])
        return found

    @property
    def nbytes(self) -> int:
        return int(self.times.nbytes + self.cpu.nbytes + self.memory.nbytes)


@dataclass(slots=True)
class _Device:
    ring: _Ring
    reading: DeviceReading
    seen: float


class Windows:
    """Bounded sample windows over the collector's snapshots (see the module docstring)."""

    def __init__(
        self,
        *,
        interval: float,
        aggregate_duration: float = 300.0,
        durations: Iterable[float] = (300.0, 600.0, 1800.0),
    ) -> None:
        self.durations = tuple(durations)
        if interval <= 0 or aggregate_duration <= 0 or any(d <= 0 for d in self.durations):
            raise ValueError("the interval and every window must be positive")
        self.interval = interval
        self.aggregate_duration = aggregate_duration
        self.longest = max((aggregate_duration, *self.durations))
        self._slots = _slots(self.longest, interval)
        self._node = _Ring(self._slots, 4)
        self._devices: dict[str, _Device] = {}
        member_slots = _slots(aggregate_duration, interval)
        self._pods = _Table(member_slots)
        self._apps = _Table(member_slots, width=4)
        self._latest: float | None = None

    @property
    def latest(self) -> float | None:
        """The monotonic time of the last snapshot recorded."""
        return self._latest

    @property
    def nbytes(self) -> int:
        """Bytes held in sample buffers."""
        devices = sum(d.ring.nbytes for d in self._devices.values())
        return self._node.nbytes + devices + self._pods.nbytes + self._apps.nbytes

    def record(self, snapshot: MetricsSnapshot) -> None:
        """Add one tick (snapshots must come in time order; an older one is ignored)."""
        at = snapshot.monotonic
        if self._latest is not None and at <= self._latest:
            return
        self._latest = at
        self._node.push(
            at,
            (
                _value(snapshot.node_cpu),
                _value(snapshot.node_memory),
                _value(snapshot.system_cpu),
                _value(snapshot.system_memory),
            ),
        )
        for reading in snapshot.devices:
            device = self._devices.get(reading.uuid)
            if device is None:
                device = self._devices[reading.uuid] = _Device(_Ring(self._slots, 2), reading, at)
            device.reading = reading
            device.seen = at
            device.ring.push(
                at, (_value(reading.utilization_percent), _value(reading.memory_used_bytes))
            )
        if self._devices:
            horizon = at - self.longest
            for uuid in [u for u, d in self._devices.items() if d.seen <= horizon]:
                del self._devices[uuid]
        self._pods.record(
            at, [(p.uid, p.usage.cpu, _memory(p.usage.memory)) for p in snapshot.pods]
        )
        self._apps.record(
            at, [(a.name, a.usage.cpu, _memory(a.usage.memory)) for a in snapshot.host_apps]
        )

    def _window(self, seconds: float, now: float) -> WindowStats:
        start = now - seconds
        covered = self._node.count(start) * self.interval >= seconds / 2
        node = self._node.since(start)
        devices = []
        for uuid in sorted(self._devices):
            device = self._devices[uuid]
            rows = device.ring.since(start)
            reading = device.reading
            devices.append(
                DeviceStats(
                    uuid=uuid,
                    minor=reading.minor,
                    healthy=reading.healthy,
                    memory_total=reading.memory_total_bytes,
                    utilization=_stats(rows[:, 0], covered),
                    memory=_stats(rows[:, 1], covered),
                )
            )
        return WindowStats(
            seconds=seconds,
            covered=covered,
            node_cpu=_stats(node[:, _NODE_CPU], covered),
            node_memory=_stats(node[:, _NODE_MEMORY], covered),
            system_cpu=_stats(node[:, _SYSTEM_CPU], covered),
            system_memory=_stats(node[:, _SYSTEM_MEMORY], covered),
            devices=tuple(d for d in devices if d.utilization or d.memory),
        )

    def aggregate(self, now: float | None = None) -> Aggregates:
        """The windows ending at ``now`` (default: the last snapshot's time)."""
        at = now if now is not None else self._latest
        if at is None:
            empty = WindowStats(seconds=self.aggregate_duration, covered=False)
            windows = tuple(WindowStats(seconds=d, covered=False) for d in self.durations)
            return Aggregates(average=empty, windows=windows, pods={}, host_apps={})
        start = at - self.aggregate_duration
        return Aggregates(
            average=self._window(self.aggregate_duration, at),
            windows=tuple(self._window(d, at) for d in self.durations),
            pods=self._pods.averages(start),
            host_apps=self._apps.averages(start),
        )


def _memory(value: int | None) -> float | None:
    return None if value is None else float(value)
