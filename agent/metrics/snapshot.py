"""What one collection tick measured: the immutable snapshot the exporter, the NodeMetric
builder and the QoS strategies read.

The collector (:mod:`agent.metrics.collector`) takes one sample per tick and publishes a new
:class:`MetricsSnapshot`; nothing else reads ``/proc`` or cgroup files for metrics. Figures
are in canonical units: CPU in millicores (averaged over the last tick), memory in bytes.
``None`` means "not known this tick" (a file was absent, or no previous sample to diff).

The records are frozen msgspec Structs without garbage-collector tracking (``gc=False``): a
tick builds one per pod and container, and they only hold values, never each other in a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import msgspec

from agent.devices.base import DeviceReading
from apis.resources import ResourceList

__all__ = [
    "CgroupUsage",
    "ContainerUsage",
    "HostAppUsage",
    "MetricsSnapshot",
    "PodUsage",
    "Pressure",
]


class Pressure(msgspec.Struct, frozen=True, gc=False):
    """PSI of one resource (``/proc/pressure/cpu`` or a cgroup's ``cpu.pressure``): the share
    of time, in percent, some (or all, ``full``) tasks stalled, over 10, 60 and 300 s.

    ``full`` is ``None`` where the kernel reports no ``full`` line (CPU before Linux 5.13).
    """

    some: tuple[float, float, float]
    full: tuple[float, float, float] | None = None


class CgroupUsage(msgspec.Struct, frozen=True, gc=False):
    """Usage of one cgroup over the last tick (a container: since its previous read, see
    :mod:`agent.metrics.collector`)."""

    #: CPU used, millicores (Δ cpuacct usage / Δ wall time).
    cpu: float | None = None
    #: Memory as ``[metrics] memory_policy`` counts it (default: without page cache,
    #: i.e. anon + unevictable), bytes.
    memory: int | None = None
    #: Working set: memory usage minus inactive file pages, bytes.
    working_set: int | None = None
    #: Throttled periods / periods (0 when no period ran), read with the containers, so over
    #: the collector's ``detail_interval``.
    throttled_ratio: float | None = None
    #: PSI by resource (``cpu``, ``memory``, ``io``); empty when unsupported or off.
    pressure: Mapping[str, Pressure] = msgspec.field(default_factory=dict)


class ContainerUsage(msgspec.Struct, frozen=True, gc=False):
    name: str
    #: ``containerd://<id>`` as the pod status gives it ("" when not running).
    container_id: str
    usage: CgroupUsage


class PodUsage(msgspec.Struct, frozen=True, gc=False):
    uid: str
    name: str
    namespace: str
    #: Koordinator QoS class (``LSE``, ``LSR``, ``LS``, ``BE``, ``SYSTEM``; ``""`` for none).
    qos: str
    #: Koordinator priority class (``koord-prod``, ``koord-mid``, ``koord-batch``,
    #: ``koord-free``; ``""`` for none).
    priority: str
    usage: CgroupUsage
    #: Running containers (see :mod:`agent.metrics.collector` for how often they are read).
    containers: tuple[ContainerUsage, ...] = ()
    #: The pod's effective request (canonical units), for what NodeMetric derives from it.
    requests: ResourceList = msgspec.field(default_factory=ResourceList)


class HostAppUsage(msgspec.Struct, frozen=True, gc=False):
    """A NodeSLO host application (``hostApplications[]``)."""

    name: str
    qos: str
    priority: str
    usage: CgroupUsage


class MetricsSnapshot(msgspec.Struct, frozen=True, gc=False):
    """One tick of the node (see the module docstring)."""

    node: str
    #: When the sample was taken: wall clock (NodeMetric ``updateTime``) and the collector's
    #: monotonic clock (window arithmetic).
    taken_at: datetime
    monotonic: float
    #: Node CPU (``/proc/stat``: user+nice+system+irq+softirq) and memory
    #: (``/proc/meminfo``: MemTotal - MemAvailable, or per the memory policy).
    node_cpu: float | None = None
    node_memory: int | None = None
    #: System usage: node - pods - host applications, never below 0.
    system_cpu: float | None = None
    system_memory: int | None = None
    node_pressure: Mapping[str, Pressure] = msgspec.field(default_factory=dict)
    pods: tuple[PodUsage, ...] = ()
    host_apps: tuple[HostAppUsage, ...] = ()
    #: CPUs of the LS share pool and what they used (per-CPU ``/proc/stat`` ticks), and the
    #: same for the BE share pool; empty/None when the pools are not known.
    share_pool_cpus: tuple[int, ...] = ()
    share_pool_cpu: float | None = None
    be_share_pool_cpus: tuple[int, ...] = ()
    be_share_pool_cpu: float | None = None
    #: Live device figures (GPU utilisation and memory) from the latest device probe.
    devices: tuple[DeviceReading, ...] = ()
    #: Seconds the tick's collection took (its own health metric).
    duration: float = 0.0
