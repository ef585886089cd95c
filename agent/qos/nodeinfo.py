"""Readers of the node and pod annotations the QoS strategies depend on.

All functions are pure and cheap: each annotation's text is parsed once and the result is
cached by the text itself (so a steady node costs a dictionary lookup per pass). An
annotation that is not valid JSON, or whose values do not parse, or that is past the bounds of
:mod:`apis.bounded` (256 KiB, nesting 32 deep, cpu ids below 8192, 1024 NUMA nodes), is logged
once (per object and text) and treated as absent; a pass never fails because of one.

Node:

* ``node.koordinator.sh/reservation`` ``{resources, reservedCPUs, applyPolicy}``: resources
  kept away from pods; when ``reservedCPUs`` is set, it also decides the reserved CPU amount.
* ``node.koordinator.sh/system-qos-resource`` ``{cpuset, cpusetExclusive}``: CPUs of SYSTEM
  QoS pods; exclusive (the default) keeps every other class off them.

Pod:

* ``scheduling.koordinator.sh/resource-status`` ``{cpuset, numaNodeResources: [{node,
  resources}]}``: CPUs and NUMA nodes the scheduler bound the pod to (LSE/LSR pods);
* ``koordinator.sh/cpuBurst``: the pod's CPU burst policy laid over the node's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.cgroups.cpuset import CpuSet, CpuSetError
from apis import constants as k
from apis.bounded import BoundedError, decode_any
from apis.codec import decode_as
from apis.core import Node, Pod
from apis.errors import DecodeError
from apis.quantity import QuantityError
from apis.resources import ResourceList
from apis.slo import CPUBurstStrategy

__all__ = [
    "NodeReservation",
    "NumaResources",
    "ResourceStatus",
    "kubelet_reserved",
    "node_reserved",
    "pod_burst_override",
    "pod_cpuset",
    "pod_resource_status",
    "reservation",
    "reserved_cpus",
    "system_qos",
]

_log = logging.getLogger(__name__)

_CPU: Final = k.RESOURCE_CPU
_MEMORY: Final = k.RESOURCE_MEMORY
_CACHE_SIZE: Final = 4096
#: Most NUMA nodes a resource status may list (Linux allows 1024).
MAX_NUMA_NODES: Final = 1024
_NO_CPUS: Final = CpuSet()
_NO_RESOURCES: Final = ResourceList()
# Fields of the pod-level burst config (the node-level ``sharePoolThresholdPercent`` is not one).
_BURST_FIELDS: Final = frozenset(
    {"policy", "cpuBurstPercent", "cfsQuotaBurstPercent", "cfsQuotaBurstPeriodSeconds"}
)


@dataclass(frozen=True, slots=True)
class NodeReservation:
    """The parsed ``node.koordinator.sh/reservation`` annotation."""

    resources: ResourceList = _NO_RESOURCES
    reserved_cpus: CpuSet = _NO_CPUS
    #: ``Default`` (or empty) or ``ReservedCPUsOnly``, as given.
    apply_policy: str = ""

    @property
    def amounts(self) -> ResourceList:
        """cpu (millicores) and memory (bytes) held back; ``reservedCPUs`` decides the cpu."""
        amounts = dict(self.resources.mask((_CPU, _MEMORY)))
        if self.reserved_cpus:
            amounts[_CPU] = len(self.reserved_cpus) * 1000
        return ResourceList(amounts)


@dataclass(frozen=True, slots=True)
class NumaResources:
    node: int
    resources: ResourceList


@dataclass(frozen=True, slots=True)
class ResourceStatus:
    """The parsed ``scheduling.koordinator.sh/resource-status`` annotation."""

    cpuset: CpuSet = _NO_CPUS
    numa_node_resources: tuple[NumaResources, ...] = ()


class _InvalidError(ValueError):
    """An annotation value that cannot be used."""


def _json(text: str) -> Any:
    try:
        return decode_any(text, "")
    except BoundedError as err:
        raise _InvalidError(str(err)) from None


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _InvalidError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _cpuset(value: Any, what: str) -> CpuSet:
    if value is None:
        return CpuSet()
    if not isinstance(value, str):
        raise _InvalidError(f"{what} must be a cpu list string, got {value!r}")
    try:
        return CpuSet.parse(value)
    except CpuSetError as err:
        raise _InvalidError(f"{what}: {err}") from None


def _resources(value: Any, what: str) -> ResourceList:
    if value is None:
        return ResourceList()
    try:
        return ResourceList.parse(_mapping(value, what))
    except QuantityError as err:
        raise _InvalidError(f"{what}: {err}") from None


def _parse_reservation(text: str) -> NodeReservation:
    raw = _mapping(_json(text), "the reservation")
    policy = raw.get("applyPolicy") or ""
    if not isinstance(policy, str):
        raise _InvalidError(f"applyPolicy must be a string, got {policy!r}")
    return NodeReservation(
        resources=_resources(raw.get("resources"), "resources"),
        reserved_cpus=_cpuset(raw.get("reservedCPUs"), "reservedCPUs"),
        apply_policy=policy,
    )


def _parse_system_qos(text: str) -> tuple[CpuSet, bool]:
    raw = _mapping(_json(text), "the system QoS resource")
    exclusive = raw.get("cpusetExclusive")
    if exclusive is not None and not isinstance(exclusive, bool):
        raise _InvalidError(f"cpusetExclusive must be a boolean, got {exclusive!r}")
    return _cpuset(raw.get("cpuset"), "cpuset"), exclusive is not False


def _parse_resource_status(text: str) -> ResourceStatus:
    raw = _mapping(_json(text), "the resource status")
    numa: list[NumaResources] = []
    entries = raw.get("numaNodeResources") or []
    if not isinstance(entries, list):
        raise _InvalidError(f"numaNodeResources must be a list, got {type(entries).__name__}")
    if len(entries) > MAX_NUMA_NODES:
        raise _InvalidError(f"numaNodeResources: {len(entries)} entries, at most {MAX_NUMA_NODES}")
    for i, entry in enumerate(entries):
        item = _mapping(entry, f"numaNodeResources[{i}]")
        node = item.get("node", 0)
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < MAX_NUMA_NODES:
            raise _InvalidError(f"numaNodeResources[{i}].node must be a NUMA node id, got {node!r}")
        numa.append(
            NumaResources(node, _resources(item.get("resources"), f"numaNodeResources[{i}]"))
        )
    return ResourceStatus(_cpuset(raw.get("cpuset"), "cpuset"), tuple(numa))


def _parse_burst(text: str) -> CPUBurstStrategy:
    raw = _mapping(_json(text), "the cpu burst config")
    # Unknown keys are ignored, as Kubernetes' JSON decoding does for annotations.
    known = {key: value for key, value in raw.items() if key in _BURST_FIELDS}
    try:
        return decode_as(known, CPUBurstStrategy)
    except DecodeError as err:
        raise _InvalidError(str(err)) from None


_PARSERS: Final[Mapping[str, Any]] = {
    k.ANNOTATION_NODE_RESERVATION: _parse_reservation,
    k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: _parse_system_qos,
    k.ANNOTATION_RESOURCE_STATUS: _parse_resource_status,
    k.ANNOTATION_CPU_BURST: _parse_burst,
}


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _parsed(owner: str, key: str, text: str) -> Any:
    """Parse ``text`` of annotation ``key``; ``None`` (logged once per owner/text) if invalid.

    ``owner`` is part of the cache key only so each object with a bad value is named once.
    """
    try:
        return _PARSERS[key](text)
    except _InvalidError as err:
        _log.warning(
            "%s: annotation %s ignored: %s", owner, key, err, extra={"object": owner, "key": key}
        )
        return None


def _annotation(owner: str, annotations: Mapping[str, str], key: str) -> Any:
    text = annotations.get(key)
    if not text:
        return None
    return _parsed(owner, key, text)


def _node_owner(node: Node) -> str:
    return f"node {node.metadata.name}"


def _pod_owner(pod: Pod) -> str:
    return f"pod {pod.metadata.namespace}/{pod.metadata.name}"


# --- node ---------------------------------------------------------------------------------------


def reservation(node: Node) -> NodeReservation:
    """The node's reservation annotation (empty when absent or invalid)."""
    found = _annotation(_node_owner(node), node.metadata.annotations, k.ANNOTATION_NODE_RESERVATION)
    return found if isinstance(found, NodeReservation) else NodeReservation()


def kubelet_reserved(node: Node) -> ResourceList:
    """``max(capacity - allocatable, 0)`` for cpu and memory (a missing allocatable: 0)."""
    capacity = node.status.capacity
    allocatable = node.status.allocatable
    reserved = {}
    for name in (_CPU, _MEMORY):
        if name in capacity:
            reserved[name] = max(capacity[name] - allocatable.get(name, capacity[name]), 0)
    return ResourceList(reserved)


def node_reserved(node: Node) -> ResourceList:
    """cpu (millicores) and memory (bytes) kept from pods: the larger of the kubelet's
    reservation and the node annotation's, per resource."""
    kubelet = kubelet_reserved(node)
    annotated = reservation(node).amounts
    return ResourceList(
        {
            name: max(kubelet.get(name, 0), annotated.get(name, 0))
            for name in (_CPU, _MEMORY)
            if name in kubelet or name in annotated
        }
    )


def reserved_cpus(node: Node) -> CpuSet:
    """``reservedCPUs`` of the reservation annotation (empty when absent)."""
    return reservation(node).reserved_cpus


def system_qos(node: Node) -> tuple[CpuSet, bool]:
    """``(cpuset, exclusive)`` of SYSTEM QoS pods; ``(CpuSet(), True)`` when absent."""
    found = _annotation(
        _node_owner(node), node.metadata.annotations, k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE
    )
    if isinstance(found, tuple):
        return found
    return CpuSet(), True


# --- pod ----------------------------------------------------------------------------------------


def pod_resource_status(pod: Pod) -> ResourceStatus | None:
    """The scheduler's resource status of the pod (``None`` when absent or invalid)."""
    found = _annotation(_pod_owner(pod), pod.metadata.annotations, k.ANNOTATION_RESOURCE_STATUS)
    return found if isinstance(found, ResourceStatus) else None


def pod_cpuset(pod: Pod) -> CpuSet | None:
    """CPUs the pod is bound to (LSE/LSR); ``None`` when it is bound to none."""
    status = pod_resource_status(pod)
    if status is None or not status.cpuset:
        return None
    return status.cpuset


def pod_burst_override(pod: Pod) -> CPUBurstStrategy | None:
    """The pod's ``koordinator.sh/cpuBurst`` config (``None`` when absent or invalid).

    Values are not range-checked here: :func:`agent.qos.settings.merge_burst` validates the
    merged result and names the annotation in its error.
    """
    found = _annotation(_pod_owner(pod), pod.metadata.annotations, k.ANNOTATION_CPU_BURST)
    return found if isinstance(found, CPUBurstStrategy) else None
