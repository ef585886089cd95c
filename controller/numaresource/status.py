"""The ``scheduling.koordinator.sh/resource-status`` annotation and the cpu list format.

The scheduler writes ``{"cpuset":"0-3","numaNodeResources":[{"node":0,"resources":{...}}]}``
on a pod it bound to CPUs (empty parts left out); the agent pins the pod's containers to that
cpuset. Cpu lists are the kernel's format: ascending ids, every run of consecutive ids written
``first-last`` (``0-3,8-11``, ``0-1,4``).

:func:`bound_cpus` is what pods already hold on a node: the union of the cpusets of its pods
that have not finished. A pod whose annotation cannot be read holds nothing (logged).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from apis import constants as k
from apis.core import Pod
from apis.quantity import QuantityError
from apis.resources import ResourceList

__all__ = [
    "FINISHED_PHASES",
    "CpuListError",
    "NUMANodeResource",
    "ResourceStatus",
    "ResourceStatusError",
    "bound_cpus",
    "encode_resource_status",
    "format_cpu_list",
    "parse_cpu_list",
    "parse_resource_status",
    "pod_resource_status",
]

_log = logging.getLogger(__name__)

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})


#: Linux supports at most 8192 logical CPUs (``CONFIG_NR_CPUS``); larger ids are refused.
MAX_CPUS: Final = 8192
#: Kubernetes bounds all annotations of an object to 256 KiB together.
MAX_TEXT: Final = 256 * 1024


class CpuListError(ValueError):
    """Text that is not a cpu list."""


class ResourceStatusError(ValueError):
    """A ``resource-status`` annotation that cannot be used."""


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 3, 8, 10, 11}`` -> ``"0-3,8,10-11"``; the empty set is ``""``."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for index in range(1, len(ordered) + 1):
        if index < len(ordered) and ordered[index] == ordered[index - 1] + 1:
            continue
        first, last = ordered[start], ordered[index - 1]
        parts.append(str(first) if first == last else f"{first}-{last}")
        start = index
    return ",".join(parts)


def parse_cpu_list(text: str) -> frozenset[int]:
    """``"0-3,8"`` -> ``{0, 1, 2, 3, 8}``; blank text is the empty set."""
    if len(text) > MAX_TEXT:
        raise CpuListError(f"cpu list too long: {len(text)} characters, at most {MAX_TEXT}")
    cpus: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not low.strip().isdigit() or (dash and not high.strip().isdigit()):
            raise CpuListError(f"invalid cpu list {text!r}: {part!r}")
        first = int(low)
        last = int(high) if dash else first
        if last < first:
            raise CpuListError(f"invalid cpu list {text!r}: range {part!r} runs backwards")
        if last >= MAX_CPUS:
            raise CpuListError(f"cpu id {last} in {part!r} is not below {MAX_CPUS}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


@dataclass(frozen=True, slots=True)
class NUMANodeResource:
    """Resources a pod takes from one NUMA node (cpu in millicores, memory in bytes)."""

    node: int
    resources: ResourceList


@dataclass(frozen=True, slots=True)
class ResourceStatus:
    """What the scheduler bound a pod to."""

    cpuset: frozenset[int] = frozenset()
    numa_node_resources: tuple[NUMANodeResource, ...] = ()


class _WireNUMA(msgspec.Struct, frozen=True, gc=False):
    node: int = 0
    resources: dict[str, str | int] = {}


class _WireStatus(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, rename="camel"):
    cpuset: str = ""
    numa_node_resources: tuple[_WireNUMA, ...] = ()


_DECODER: Final = msgspec.json.Decoder(_WireStatus)


def encode_resource_status(status: ResourceStatus) -> str:
    """The annotation value; empty parts are left out (an empty status is ``{}``)."""
    wire = _WireStatus(
        cpuset=format_cpu_list(status.cpuset),
        numa_node_resources=tuple(
            _WireNUMA(node=entry.node, resources=dict(entry.resources.to_wire()))
            for entry in sorted(status.numa_node_resources, key=lambda e: e.node)
        ),
    )
    return msgspec.json.encode(wire).decode()


def _resources(raw: Mapping[str, Any], where: str) -> ResourceList:
    try:
        return ResourceList.parse(raw)
    except QuantityError as err:
        raise ResourceStatusError(f"{where}: {err}") from None


def parse_resource_status(text: str) -> ResourceStatus:
    """The status of an annotation value; :class:`ResourceStatusError` if it is not one."""
    try:
        wire = _DECODER.decode(text)
    except msgspec.DecodeError as err:
        raise ResourceStatusError(f"invalid resource status: {err}") from None
    try:
        cpuset = parse_cpu_list(wire.cpuset)
    except CpuListError as err:
        raise ResourceStatusError(f"cpuset: {err}") from None
    numa: list[NUMANodeResource] = []
    for index, entry in enumerate(wire.numa_node_resources):
        if entry.node < 0:
            raise ResourceStatusError(f"numaNodeResources[{index}].node: {entry.node} < 0")
        resources = _resources(entry.resources, f"numaNodeResources[{index}].resources")
        numa.append(NUMANodeResource(node=entry.node, resources=resources))
    return ResourceStatus(cpuset=cpuset, numa_node_resources=tuple(numa))


@functools.lru_cache(maxsize=65536)
def _cached(text: str) -> ResourceStatus | None:
    try:
        return parse_resource_status(text)
    except ResourceStatusError as err:
        _log.warning("ignoring pod annotation %s: %s", k.ANNOTATION_RESOURCE_STATUS, err)
        return None


def pod_resource_status(pod: Pod) -> ResourceStatus | None:
    """The pod's status; ``None`` when the annotation is absent or cannot be read."""
    text = pod.metadata.annotations.get(k.ANNOTATION_RESOURCE_STATUS)
    if not text:
        return None
    return _cached(text)


def bound_cpus(pods: Iterable[Pod]) -> frozenset[int]:
    """CPUs held by the pods that have not finished (the union of their cpusets)."""
    held: set[int] = set()
    for pod in pods:
        if pod.status.phase in FINISHED_PHASES:
            continue
        status = pod_resource_status(pod)
        if status is not None:
            held.update(status.cpuset)
    return frozenset(held)
