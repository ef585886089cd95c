"""Device metrics on the agent's Prometheus endpoint: live readings and the probes' own health.

Names. koordlet v1.8 exports no per-device series (its GPU usage goes into NodeMetric), so
these are koordpy's own and carry the ``koordpy_`` prefix, like
``koordpy_component_restarts_total``; ``koordlet_`` stays with the series that mirror
koordlet's (the QoS gauges). They say ``device``, not ``gpu``: NPUs and MetaX GPUs are
reported the same way (Koordinator's Device type ``gpu`` covers all of them) and the
``vendor`` label tells them apart. Units are in the names, in base units (bytes, watts,
seconds). Where NVIDIA's dcgm-exporter has a field with the same meaning it is given here, so
a dashboard can be ported:

=========================================  =========  ========================================
metric                                     type       meaning (dcgm-exporter field)
=========================================  =========  ========================================
``koordpy_device_utilization_percent``     gauge      busy share of the last sample, 0-100
                                                      (``DCGM_FI_DEV_GPU_UTIL``)
``koordpy_device_memory_used_bytes``       gauge      device memory in use
                                                      (``DCGM_FI_DEV_FB_USED``, in MiB there)
``koordpy_device_memory_total_bytes``      gauge      device memory size (dcgm-exporter only
                                                      splits it: ``_FB_FREE``, ``_FB_USED``,
                                                      ``_FB_RESERVED``)
``koordpy_device_temperature_celsius``     gauge      chip temperature (``DCGM_FI_DEV_GPU_TEMP``)
``koordpy_device_power_watts``             gauge      power draw (``DCGM_FI_DEV_POWER_USAGE``)
``koordpy_device_healthy``                 gauge      1 healthy, 0 not: the Device's ``health``
                                                      (the probe's verdict: critical XIDs, ECC,
                                                      retired pages, vendor tool status; not
                                                      DCGM's own ``DCGM_EXP_GPU_HEALTH_STATUS``)
``koordpy_device_probe_errors_total``      counter    probe runs that failed, by ``probe`` and
                                                      ``kind`` (see :func:`error_kind`)
``koordpy_device_probe_duration_seconds``  histogram  time of every probe run, by ``probe``
=========================================  =========  ========================================

Every device series has the labels ``node``, ``vendor``, ``model``, ``minor``, ``uuid``; the
probe series have ``node`` and ``probe``. A figure a vendor does not report (``None`` in
:class:`~agent.devices.base.DeviceReading`) is left out, never exported as 0.

Nothing is copied into gauges between scrapes: each scrape reads the latest probe results the
agent keeps (:attr:`NodeDevices.results`), so a device that is gone stops being exported with
the next probe. Several agents in one process (``koordpy up --demo``) share one registry, and
a metric family may appear only once in an exposition, so one :class:`DeviceCollector` per
registry serves every node; :func:`exported` adds a node to it for as long as the agent runs.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from agent.devices.base import DeviceReading, ProbeResult
from agent.errors import ConfigError, NotFound, Rejected, TransientError, Unsupported

__all__ = [
    "DEVICE_LABELS",
    "LATENCY_BUCKETS",
    "PREFIX",
    "DeviceCollector",
    "NodeDevices",
    "error_kind",
    "exported",
]

PREFIX: Final = "koordpy_device_"
DEVICE_LABELS: Final = ("node", "vendor", "model", "minor", "uuid")
PROBE_LABELS: Final = ("node", "probe")
#: Upper bounds (seconds) of the probe latency buckets: NVML answers in microseconds to
#: milliseconds, a vendor CLI in tens of milliseconds to seconds, a hung call at its timeout.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_Value = Callable[[DeviceReading], float | None]

#: (name after the prefix, help, value of a reading) of every per-device gauge.
_GAUGES: Final[tuple[tuple[str, str, _Value], ...]] = (
    (
        "utilization_percent",
        "Share of the last sample period the device was busy (0-100).",
        lambda r: r.utilization_percent,
    ),
    (
        "memory_used_bytes",
        "Device memory in use, in bytes.",
        lambda r: r.memory_used_bytes,
    ),
    (
        "memory_total_bytes",
        "Device memory size, in bytes.",
        lambda r: r.memory_total_bytes,
    ),
    (
        "temperature_celsius",
        "Device temperature, in degrees Celsius.",
        lambda r: r.temperature_celsius,
    ),
    (
        "power_watts",
        "Device power draw, in watts.",
        lambda r: r.power_watts,
    ),
    (
        "healthy",
        "1 when the device is healthy (the Device object's health), else 0.",
        lambda r: 1.0 if r.healthy else 0.0,
    ),
)
ERRORS: Final = PREFIX + "probe_errors"
LATENCY: Final = PREFIX + "probe_duration_seconds"

#: Error classes in the order they are matched (a subclass before its base).
_KINDS: Final[tuple[tuple[type[BaseException], str], ...]] = (
    (Unsupported, "unsupported"),
    (TransientError, "transient"),
    (ConfigError, "config"),
    (NotFound, "not_found"),
    (Rejected, "rejected"),
)


def error_kind(error: BaseException) -> str:
    """The ``kind`` label of a failed probe run.

    ``timeout`` (the run or a call inside it overran its limit), ``unsupported`` (no hardware
    or library: the probe is left out of that report, and counted so a node that lost its
    driver shows; alerts on real failures exclude this kind), ``transient``, ``config``,
    ``not_found``, ``rejected``, else ``other`` (an error the probe did not translate: a bug).
    """
    if isinstance(error, TimeoutError) or isinstance(error.__cause__, TimeoutError):
        return "timeout"
    for cls, kind in _KINDS:
        if isinstance(error, cls):
            return kind
    return "other"


def _no_results() -> Sequence[ProbeResult]:
    return ()


@dataclass(slots=True)
class _Latency:
    #: Runs per bucket (not cumulative); the last one is ``+Inf``.
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def add(self, seconds: float) -> None:
        index = next((i for i, le in enumerate(LATENCY_BUCKETS) if seconds <= le), -1)
        self.buckets[index] += 1
        self.total += seconds

    def cumulative(self) -> list[tuple[str, float]]:
        bounds = [*(str(le) for le in LATENCY_BUCKETS), "+Inf"]
        counts: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(bounds, self.buckets, strict=True):
            running += count
            counts.append((bound, float(running)))
        return counts


@dataclass(slots=True, eq=False)
class NodeDevices:
    """One node's part of the collector: where its readings come from, what its probes did.

    ``results`` is called at each scrape, from the HTTP server's thread: it must only return
    what the agent already has (the Reporter's latest results), never probe.
    """

    node: str
    results: Callable[[], Sequence[ProbeResult]] = _no_results
    _errors: dict[tuple[str, str], int] = field(default_factory=dict, init=False)
    _latency: dict[str, _Latency] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def observe(self, probe: str, seconds: float, error: BaseException | None) -> None:
        """Record one probe run (a :data:`agent.devices.base.ProbeObserver`)."""
        with self._lock:
            self._latency.setdefault(probe, _Latency()).add(seconds)
            if error is not None:
                key = (probe, error_kind(error))
                self._errors[key] = self._errors.get(key, 0) + 1

    def statistics(self) -> tuple[dict[tuple[str, str], int], dict[str, _Latency]]:
        with self._lock:
            latency = {
                probe: _Latency(list(entry.buckets), entry.total)
                for probe, entry in self._latency.items()
            }
            return dict(self._errors), latency


class DeviceCollector(Collector):
    """Exports the device readings and probe statistics of every node added to it."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeDevices] = {}
        self._lock = threading.Lock()

    @property
    def nodes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._nodes)

    def add(
        self, node: str, results: Callable[[], Sequence[ProbeResult]] = _no_results
    ) -> NodeDevices:
        """Export ``node`` (a name already exported is a :class:`ValueError`)."""
        with self._lock:
            if node in self._nodes:
                raise ValueError(f"device metrics of node {node} are already exported")
            devices = NodeDevices(node, results)
            self._nodes[node] = devices
            return devices

    def remove(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)

    def _families(
        self,
    ) -> tuple[dict[str, GaugeMetricFamily], CounterMetricFamily, HistogramMetricFamily]:
        gauges = {
            name: GaugeMetricFamily(PREFIX + name, text, labels=list(DEVICE_LABELS))
            for name, text, _ in _GAUGES
        }
        errors = CounterMetricFamily(
            ERRORS, "Device probe runs that failed.", labels=[*PROBE_LABELS, "kind"]
        )
        latency = HistogramMetricFamily(
            LATENCY, "Time of each device probe run, in seconds.", labels=list(PROBE_LABELS)
        )
        return gauges, errors, latency

    def describe(self) -> Iterable[Metric]:
        gauges, errors, latency = self._families()
        return [*gauges.values(), errors, latency]

    def collect(self) -> Iterable[Metric]:
        gauges, errors, latency = self._families()
        with self._lock:
            nodes = list(self._nodes.values())
        for node in nodes:
            seen: set[tuple[str, ...]] = set()
            for result in node.results():
                for reading in result.readings:
                    labels = (
                        node.node,
                        reading.vendor,
                        reading.model,
                        str(reading.minor),
                        reading.uuid,
                    )
                    if labels in seen:  # two probes naming one device: the first one counts
                        continue
                    seen.add(labels)
                    for name, _, value_of in _GAUGES:
                        value = value_of(reading)
                        if value is not None:
                            gauges[name].add_metric(labels, float(value))
            counts, runs = node.statistics()
            for (probe, kind), count in sorted(counts.items()):
                errors.add_metric([node.node, probe, kind], float(count))
            for probe, entry in sorted(runs.items()):
                latency.add_metric([node.node, probe], entry.cumulative(), entry.total)
        return [*gauges.values(), errors, latency]


_SHARED: weakref.WeakKeyDictionary[CollectorRegistry, DeviceCollector] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


@contextlib.contextmanager
def exported(
    registry: CollectorRegistry,
    node: str,
    results: Callable[[], Sequence[ProbeResult]] = _no_results,
) -> Iterator[NodeDevices]:
    """Export ``node``'s device metrics on ``registry`` while inside.

    The registry's one :class:`DeviceCollector` is registered with its first node and
    unregistered when its last node leaves. ``results`` may also be set on the yielded
    :class:`NodeDevices` later (once the agent has something that keeps them).
    """
    with _SHARED_LOCK:
        collector = _SHARED.get(registry)
        if collector is None:
            collector = DeviceCollector()
            registry.register(collector)
            _SHARED[registry] = collector
        devices = collector.add(node, results)
    try:
        yield devices
    finally:
        with _SHARED_LOCK:
            collector.remove(node)
            if not collector.nodes:
                registry.unregister(collector)
                _SHARED.pop(registry, None)
