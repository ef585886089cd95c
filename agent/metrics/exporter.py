"""Node, pod and container usage on the agent's Prometheus endpoint, in koordlet's names.

Every series carries the label ``node``. CPU is in cores, memory in bytes; a figure the
latest tick did not measure (``None`` in the snapshot) is left out, never exported as 0.

koordlet's series (agent-spec §7.3, same names and labels):

=================================================  =============================================
``koordlet_start_time``                            when the agent started, Unix seconds
``koordlet_node_used_cpu_cores``                   node CPU used over the latest tick
``koordlet_node_used_memory_bytes``                node memory used (``[metrics] memory_policy``)
``koordlet_node_metric_node_usage``,               the last reported NodeMetric's ``nodeUsage`` /
``koordlet_node_metric_system_usage``              ``systemUsage`` (``resource``, ``unit``)
``koordlet_node_metric_numa_node_usage``,          the same per NUMA node (``numa_node_id``,
``koordlet_node_metric_numa_system_usage``         ``resource``, ``unit``)
``koordlet_container_resource_requests``,          every container's requests / limits
``koordlet_container_resource_limits``             (``resource``, ``unit``, pod and container ids)
``koordlet_pod_psi``, ``koordlet_container_psi``   pressure (``psi_resource_type`` cpu, mem, io;
                                                   ``psi_precision`` avg10, avg60, avg300;
                                                   ``psi_degree`` some, full;
                                                   ``cpu_full_supported``), in percent
``koordlet_host_application_resource_usage``       NodeSLO host applications
                                                   (``host_application_name``, ``resource``,
                                                   ``priority_class``, ``qos``)
=================================================  =============================================

Additions (koordlet keeps these figures in its internal store; koordpy exports them in the
same style):

=================================================  =============================================
``koordlet_node_system_used_cpu_cores``,           system usage: node minus pods minus host
``koordlet_node_system_used_memory_bytes``         applications, latest tick
``koordlet_node_psi``                              node pressure, labels as ``koordlet_pod_psi``
``koordlet_pod_used_cpu_cores``,                   per pod (``pod_uid``, ``pod_name``,
``koordlet_pod_used_memory_bytes``,                ``pod_namespace``): CPU, memory (memory policy),
``koordlet_pod_memory_working_set_bytes``,         working set (usage minus inactive file), share
``koordlet_pod_cpu_throttled_ratio``               of CFS periods throttled over the latest tick
``koordlet_container_used_cpu_cores`` ...          the same four per container (pod ids plus
                                                   ``container_id``, ``container_name``)
``koordlet_cpuset_share_pool_used_cpu_cores``,     CPU the LS / BE share pool used (the pool
``koordlet_cpuset_be_share_pool_used_cpu_cores``   sizes are the QoS gauges
                                                   ``koordlet_cpuset_share_pool_cpu_cores``...)
=================================================  =============================================

Allocatable (``koordlet_node_resource_allocatable``, Batch and Mid resources) and the other
QoS figures are exported by the QoS loop's gauges; no family here repeats one of them.

Cost. Collection happens on the agent's tick; a scrape only formats the latest snapshot, the
pods and the last NodeMetric, and formats each of them once: the text of an input is kept
until the input changes, and the whole body until one of them does, so scrapes between two
ticks cost a lookup. The text is written directly (no ``prometheus_client`` samples), and is
served through :func:`runtime.exposition.attached`. Several agents in one process
(``koordpy up --demo``) share one registry and a family may appear only once in an
exposition, so one :class:`UsageExporter` per registry serves every node (:func:`exported`).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from prometheus_client import CollectorRegistry

from agent.metrics.snapshot import CgroupUsage, MetricsSnapshot, PodUsage, Pressure
from apis.core import Pod
from apis.quantity import is_milli_resource
from apis.resources import ResourceList
from apis.slo import NodeMetric, ResourceMap
from runtime import exposition
from runtime.exposition import escape_label_value as _esc

__all__ = ["FAMILIES", "NodeUsage", "UsageExporter", "exported", "resource_unit"]


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str

    def header(self) -> str:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} gauge\n"


START_TIME: Final = Family("koordlet_start_time", "When the agent started, in Unix seconds.")
NODE_CPU: Final = Family("koordlet_node_used_cpu_cores", "CPU the node used, in cores.")
NODE_MEMORY: Final = Family("koordlet_node_used_memory_bytes", "Memory the node used, in bytes.")
SYSTEM_CPU: Final = Family(
    "koordlet_node_system_used_cpu_cores",
    "CPU used outside pods and host applications, in cores.",
)
SYSTEM_MEMORY: Final = Family(
    "koordlet_node_system_used_memory_bytes",
    "Memory used outside pods and host applications, in bytes.",
)
NODE_PSI: Final = Family("koordlet_node_psi", "Node pressure stall information, in percent.")
METRIC_NODE: Final = Family(
    "koordlet_node_metric_node_usage", "Node usage as the last NodeMetric reported it."
)
METRIC_SYSTEM: Final = Family(
    "koordlet_node_metric_system_usage", "System usage as the last NodeMetric reported it."
)
METRIC_NUMA_NODE: Final = Family(
    "koordlet_node_metric_numa_node_usage",
    "NUMA node usage as the last NodeMetric reported it.",
)
METRIC_NUMA_SYSTEM: Final = Family(
    "koordlet_node_metric_numa_system_usage",
    "NUMA system usage as the last NodeMetric reported it.",
)
SHARE_POOL: Final = Family(
    "koordlet_cpuset_share_pool_used_cpu_cores", "CPU the LS share pool used, in cores."
)
BE_SHARE_POOL: Final = Family(
    "koordlet_cpuset_be_share_pool_used_cpu_cores", "CPU the BE share pool used, in cores."
)
HOST_APP: Final = Family(
    "koordlet_host_application_resource_usage",
    "Usage of a host application (cpu in cores, memory in bytes).",
)
POD_CPU: Final = Family("koordlet_pod_used_cpu_cores", "CPU the pod used, in cores.")
POD_MEMORY: Final = Family("koordlet_pod_used_memory_bytes", "Memory the pod used, in bytes.")
POD_WORKING_SET: Final = Family(
    "koordlet_pod_memory_working_set_bytes", "Pod memory usage minus inactive file, in bytes."
)
POD_THROTTLED: Final = Family(
    "koordlet_pod_cpu_throttled_ratio", "Share of the pod's CFS periods that were throttled."
)
POD_PSI: Final = Family("koordlet_pod_psi", "Pod pressure stall information, in percent.")
CONTAINER_CPU: Final = Family(
    "koordlet_container_used_cpu_cores", "CPU the container used, in cores."
)
CONTAINER_MEMORY: Final = Family(
    "koordlet_container_used_memory_bytes", "Memory the container used, in bytes."
)
CONTAINER_WORKING_SET: Final = Family(
    "koordlet_container_memory_working_set_bytes",
    "Container memory usage minus inactive file, in bytes.",
)
CONTAINER_THROTTLED: Final = Family(
    "koordlet_container_cpu_throttled_ratio",
    "Share of the container's CFS periods that were throttled.",
)
CONTAINER_PSI: Final = Family(
    "koordlet_container_psi", "Container pressure stall information, in percent."
)
REQUESTS: Final = Family(
    "koordlet_container_resource_requests", "Resource requests of the container."
)
LIMITS: Final = Family("koordlet_container_resource_limits", "Resource limits of the container.")

#: Every family, in the order of the exposition.
FAMILIES: Final = (
    START_TIME,
    NODE_CPU,
    NODE_MEMORY,
    SYSTEM_CPU,
    SYSTEM_MEMORY,
    NODE_PSI,
    METRIC_NODE,
    METRIC_SYSTEM,
    METRIC_NUMA_NODE,
    METRIC_NUMA_SYSTEM,
    SHARE_POOL,
    BE_SHARE_POOL,
    HOST_APP,
    POD_CPU,
    POD_MEMORY,
    POD_WORKING_SET,
    POD_THROTTLED,
    POD_PSI,
    CONTAINER_CPU,
    CONTAINER_MEMORY,
    CONTAINER_WORKING_SET,
    CONTAINER_THROTTLED,
    CONTAINER_PSI,
    REQUESTS,
    LIMITS,
)

#: PSI resource names of the snapshot -> ``psi_resource_type`` (koordlet says ``mem``).
_PSI_TYPES: Final = {"cpu": "cpu", "memory": "mem", "io": "io"}
_PRECISIONS: Final = ("avg10", "avg60", "avg300")
_MEMORY_LIKE: Final = ("memory", "ephemeral-storage", "hugepages-")

#: Text of one family's series: family name -> sample lines.
_Chunks = dict[str, str]
#: What one node's series are made of: the latest snapshot, the pods, the last NodeMetric.
_Inputs = tuple[MetricsSnapshot | None, Sequence[Pod], NodeMetric | None]
_T = TypeVar("_T")


def resource_unit(name: str) -> str:
    """koordlet's ``unit`` label of a resource: ``core`` (CPU, exported in cores), ``byte``
    (memory, storage, hugepages) or ``integer`` (everything counted: Batch/Mid CPU, which
    is millicores on the wire, devices, pods)."""
    if is_milli_resource(name):
        return "core"
    if any(marker in name for marker in _MEMORY_LIKE):
        return "byte"
    return "integer"


def _amount(name: str, amount: int) -> str:
    """A canonical amount in the unit :func:`resource_unit` names."""
    return _num(amount / 1000) if is_milli_resource(name) else str(amount)


def _num(number: float) -> str:
    """A sample value; whole numbers without a fraction (shorter scrapes)."""
    value = float(number)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _cores(millicores: float) -> str:
    return _num(millicores / 1000)


class _Lines:
    """Sample lines of several families, built up then joined."""

    __slots__ = ("_by_family",)

    def __init__(self) -> None:
        self._by_family: dict[str, list[str]] = {}

    def add(self, family: Family, labels: str, value: str) -> None:
        self._by_family.setdefault(family.name, []).append(f"{family.name}{{{labels}}} {value}\n")

    def pressure(self, family: Family, labels: str, pressure: Mapping[str, Pressure]) -> None:
        cpu = pressure.get("cpu")
        full_supported = "true" if cpu is not None and cpu.full is not None else "false"
        lines = self._by_family.setdefault(family.name, [])
        for resource, figures in pressure.items():
            kind = _PSI_TYPES.get(resource, resource)
            prefix = (
                f'{family.name}{{{labels},psi_resource_type="{_esc(kind)}",'
                f'cpu_full_supported="{full_supported}",psi_precision="'
            )
            for degree, values in (("some", figures.some), ("full", figures.full)):
                if values is None:
                    continue
                for precision, value in zip(_PRECISIONS, values, strict=True):
                    lines.append(f'{prefix}{precision}",psi_degree="{degree}"}} {_num(value)}\n')

    def usage(
        self,
        labels: str,
        usage: CgroupUsage,
        families: tuple[Family, Family, Family, Family, Family],
        *,
        pressure: bool = True,
    ) -> None:
        cpu, memory, working_set, throttled, psi = families
        if usage.cpu is not None:
            self.add(cpu, labels, _cores(usage.cpu))
        if usage.memory is not None:
            self.add(memory, labels, str(usage.memory))
        if usage.working_set is not None:
            self.add(working_set, labels, str(usage.working_set))
        if usage.throttled_ratio is not None:
            self.add(throttled, labels, _num(usage.throttled_ratio))
        if pressure and usage.pressure:
            self.pressure(psi, labels, usage.pressure)

    def extend(self, chunks: _Chunks) -> None:
        """Append text rendered before."""
        for name, text in chunks.items():
            self._by_family.setdefault(name, []).append(text)

    def chunks(self) -> _Chunks:
        return {name: "".join(lines) for name, lines in self._by_family.items()}


_POD_FAMILIES: Final = (POD_CPU, POD_MEMORY, POD_WORKING_SET, POD_THROTTLED, POD_PSI)
_CONTAINER_FAMILIES: Final = (
    CONTAINER_CPU,
    CONTAINER_MEMORY,
    CONTAINER_WORKING_SET,
    CONTAINER_THROTTLED,
    CONTAINER_PSI,
)


def _pod_labels(node: str, uid: str, name: str, namespace: str) -> str:
    return (
        f'node="{_esc(node)}",pod_uid="{_esc(uid)}",pod_name="{_esc(name)}",'
        f'pod_namespace="{_esc(namespace)}"'
    )


def _container_labels(pod: str, container_id: str, name: str) -> str:
    return f'{pod},container_id="{_esc(container_id)}",container_name="{_esc(name)}"'


class _PodText:
    """The text of each pod's containers and pressure, kept while a snapshot carries the same
    objects: the collector reads containers and PSI every few ticks only and hands out the
    objects it read in between."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, tuple[object, object, _Chunks]] = {}

    def of(self, pod: PodUsage, labels: str) -> _Chunks:
        entry = self._entries.get(pod.uid)
        if entry is not None and entry[0] is pod.containers and entry[1] is pod.usage.pressure:
            return entry[2]
        out = _Lines()
        if pod.usage.pressure:
            out.pressure(POD_PSI, labels, pod.usage.pressure)
        for container in pod.containers:
            ids = _container_labels(labels, container.container_id, container.name)
            out.usage(ids, container.usage, _CONTAINER_FAMILIES)
        chunks = out.chunks()
        self._entries[pod.uid] = (pod.containers, pod.usage.pressure, chunks)
        return chunks

    def keep(self, uids: set[str]) -> None:
        """Forget the pods not in ``uids``."""
        if len(self._entries) > len(uids):
            for uid in [uid for uid in self._entries if uid not in uids]:
                del self._entries[uid]


def render_snapshot(snapshot: MetricsSnapshot, pods: _PodText | None = None) -> _Chunks:
    """The series of one tick (``pods``: text kept from earlier ticks, see :class:`_PodText`)."""
    cache = pods if pods is not None else _PodText()
    out = _Lines()
    node = f'node="{_esc(snapshot.node)}"'
    if snapshot.node_cpu is not None:
        out.add(NODE_CPU, node, _cores(snapshot.node_cpu))
    if snapshot.node_memory is not None:
        out.add(NODE_MEMORY, node, str(snapshot.node_memory))
    if snapshot.system_cpu is not None:
        out.add(SYSTEM_CPU, node, _cores(snapshot.system_cpu))
    if snapshot.system_memory is not None:
        out.add(SYSTEM_MEMORY, node, str(snapshot.system_memory))
    if snapshot.node_pressure:
        out.pressure(NODE_PSI, node, snapshot.node_pressure)
    if snapshot.share_pool_cpu is not None:
        out.add(SHARE_POOL, node, _cores(snapshot.share_pool_cpu))
    if snapshot.be_share_pool_cpu is not None:
        out.add(BE_SHARE_POOL, node, _cores(snapshot.be_share_pool_cpu))
    for app in snapshot.host_apps:
        labels = (
            f'{node},host_application_name="{_esc(app.name)}",'
            f'priority_class="{_esc(app.priority)}",qos="{_esc(app.qos)}",resource="'
        )
        if app.usage.cpu is not None:
            out.add(HOST_APP, labels + 'cpu"', _cores(app.usage.cpu))
        if app.usage.memory is not None:
            out.add(HOST_APP, labels + 'memory"', str(app.usage.memory))
    for pod in snapshot.pods:
        pod_labels = _pod_labels(snapshot.node, pod.uid, pod.name, pod.namespace)
        out.usage(pod_labels, pod.usage, _POD_FAMILIES, pressure=False)
        out.extend(cache.of(pod, pod_labels))
    cache.keep({pod.uid for pod in snapshot.pods})
    return out.chunks()


def render_pods(node: str, pods: Sequence[Pod]) -> _Chunks:
    """Requests and limits of every container of ``pods``."""
    out = _Lines()
    for pod in pods:
        meta = pod.metadata
        pod_labels = _pod_labels(node, meta.uid, meta.name, meta.namespace)
        ids = {status.name: status.container_id for status in pod.status.container_statuses}
        for container in pod.spec.containers:
            labels = _container_labels(pod_labels, ids.get(container.name, ""), container.name)
            for family, amounts in (
                (REQUESTS, container.resources.requests),
                (LIMITS, container.resources.limits),
            ):
                for resource, amount in amounts.items():
                    out.add(
                        family,
                        f'{labels},resource="{_esc(resource)}",unit="{resource_unit(resource)}"',
                        _amount(resource, amount),
                    )
    return out.chunks()


def _resource_lines(out: _Lines, family: Family, labels: str, usage: ResourceMap) -> None:
    resources: ResourceList = usage.resources
    for resource in ("cpu", "memory"):
        if resource in resources:
            out.add(
                family,
                f'{labels},resource="{resource}",unit="{resource_unit(resource)}"',
                _amount(resource, resources[resource]),
            )


def render_nodemetric(node: str, metric: NodeMetric) -> _Chunks:
    """The node and system usage of a reported NodeMetric (cpu and memory)."""
    out = _Lines()
    info = metric.status.node_metric
    if info is None:
        return {}
    labels = f'node="{_esc(node)}"'
    _resource_lines(out, METRIC_NODE, labels, info.node_usage)
    _resource_lines(out, METRIC_SYSTEM, labels, info.system_usage)
    for numa in info.numa_usages:
        numa_labels = f'{labels},numa_node_id="{numa.numa_node_id}"'
        _resource_lines(out, METRIC_NUMA_NODE, numa_labels, numa.node_usage)
        _resource_lines(out, METRIC_NUMA_SYSTEM, numa_labels, numa.system_usage)
    return out.chunks()


def _none() -> None:
    return None


def _no_pods() -> Sequence[Pod]:
    return ()


class _Memo(Generic[_T]):
    """The text of the last input seen (compared by identity: inputs are immutable)."""

    __slots__ = ("_chunks", "_render", "_source")

    def __init__(self, render: Callable[[_T], _Chunks]) -> None:
        self._render = render
        self._source: _T | None = None
        self._chunks: _Chunks = {}

    def of(self, value: _T | None) -> _Chunks:
        if value is not self._source:
            self._chunks = {} if value is None else self._render(value)
            self._source = value
        return self._chunks


@dataclass(slots=True, eq=False)
class NodeUsage:
    """One node's part of the exporter: where its latest figures come from.

    The callables are called at each scrape, from the HTTP server's threads: they must only
    return what the agent already has (the collector's latest snapshot, the pod source's
    pods, the last NodeMetric reported), never measure.
    """

    node: str
    #: When the agent started, Unix seconds.
    start_time: float
    latest: Callable[[], MetricsSnapshot | None] = _none
    pods: Callable[[], Sequence[Pod]] = _no_pods
    nodemetric: Callable[[], NodeMetric | None] = _none
    _start: _Chunks = field(init=False)
    _snapshot: _Memo[MetricsSnapshot] = field(init=False)
    _pods: _Memo[Sequence[Pod]] = field(init=False)
    _metric: _Memo[NodeMetric] = field(init=False)

    def __post_init__(self) -> None:
        self._start = {
            START_TIME.name: f'{START_TIME.name}{{node="{_esc(self.node)}"}} '
            f"{_num(self.start_time)}\n"
        }
        node, pod_text = self.node, _PodText()
        self._snapshot = _Memo(lambda snapshot: render_snapshot(snapshot, pod_text))
        self._pods = _Memo(lambda pods: render_pods(node, pods))
        self._metric = _Memo(lambda metric: render_nodemetric(node, metric))

    def inputs(self) -> _Inputs:
        """The current inputs (snapshot, pods, NodeMetric)."""
        return (self.latest(), self.pods(), self.nodemetric())

    def chunks(self, inputs: _Inputs) -> tuple[_Chunks, ...]:
        snapshot, pods, metric = inputs
        return (
            self._start,
            self._snapshot.of(snapshot),
            self._pods.of(pods),
            self._metric.of(metric),
        )


class UsageExporter:
    """Renders the series of every node added to it (see the module docstring)."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeUsage] = {}
        self._lock = threading.Lock()
        self._inputs: list[_Inputs] = []
        self._body = b""

    @property
    def nodes(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._nodes)

    def add(self, usage: NodeUsage) -> NodeUsage:
        """Export ``usage.node`` (a name already exported is a :class:`ValueError`)."""
        with self._lock:
            if usage.node in self._nodes:
                raise ValueError(f"usage metrics of node {usage.node} are already exported")
            self._nodes[usage.node] = usage
            self._inputs = []
            return usage

    def remove(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)
            self._inputs = []

    def render(self) -> bytes:
        """Text format 0.0.4 of every family that has a series, nodes in the order added."""
        with self._lock:
            nodes = list(self._nodes.values())
            inputs = [usage.inputs() for usage in nodes]
            if len(inputs) == len(self._inputs) and all(
                new is old
                for now, before in zip(inputs, self._inputs, strict=True)
                for new, old in zip(now, before, strict=True)
            ):
                return self._body
            parts = [
                chunks
                for usage, current in zip(nodes, inputs, strict=True)
                for chunks in usage.chunks(current)
            ]
            text: list[str] = []
            for family in FAMILIES:
                series = [chunk[family.name] for chunk in parts if family.name in chunk]
                if series:
                    text.append(family.header())
                    text.extend(series)
            self._inputs = inputs
            self._body = "".join(text).encode()
            return self._body


_SHARED: weakref.WeakKeyDictionary[
    CollectorRegistry, tuple[UsageExporter, contextlib.ExitStack]
] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


@contextlib.contextmanager
def exported(
    registry: CollectorRegistry,
    node: str,
    *,
    latest: Callable[[], MetricsSnapshot | None] = _none,
    pods: Callable[[], Sequence[Pod]] = _no_pods,
    nodemetric: Callable[[], NodeMetric | None] = _none,
    start_time: float | None = None,
) -> Iterator[NodeUsage]:
    """Export ``node``'s usage on ``registry``'s endpoint while inside.

    The registry's one :class:`UsageExporter` is attached (:func:`runtime.exposition.attached`)
    with its first node and detached when its last node leaves. The callables may also be
    set on the yielded :class:`NodeUsage` later. ``start_time`` defaults to now.
    """
    usage = NodeUsage(
        node,
        time.time() if start_time is None else start_time,
        latest=latest,
        pods=pods,
        nodemetric=nodemetric,
    )
    with _SHARED_LOCK:
        shared = _SHARED.get(registry)
        if shared is None:
            exporter, stack = UsageExporter(), contextlib.ExitStack()
            stack.enter_context(exposition.attached(registry, exporter))
            shared = _SHARED[registry] = (exporter, stack)
        shared[0].add(usage)
    try:
        yield usage
    finally:
        with _SHARED_LOCK:
            exporter, stack = shared
            exporter.remove(node)
            if not exporter.nodes:
                stack.close()
                _SHARED.pop(registry, None)
