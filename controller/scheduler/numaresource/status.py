"""The ``scheduling.koordinator.sh/resource-status`` annotation and the cpu list format.

The scheduler writes ``{"cpuset":"0-3","numaNodeResources":[{"node":0,"resources":{...}}]}``
on a pod it bound to CPUs (empty parts left out); the agent pins the pod's containers to that
cpuset. Cpu lists are the kernel's format: ascending ids, every run of consecutive ids written
``first-last`` (``0-3,8-11``, ``0-1,4``).

:func:`bound_cpus` is what pods already hold on a node: the union of the cpusets of its pods
that have not finished. A pod whose annotation cannot be read holds nothing (logged).
The annotation is untrusted text, read within the bounds of :mod:`apis.bounded`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

import msgspec

from apis import constants as k
from apis.bounded import (
    MAX_CPUS,
    MAX_TEXT,
    BoundedError,
    CpuListError,
    decode,
    format_cpu_list,
    parse_cpu_list,
)
from apis.core import Pod
from apis.quantity import QuantityError
from apis.resources import ResourceList

__all__ = [
    "FINISHED_PHASES",
    "MAX_CPUS",
    "MAX_NUMA_NODES",
    "MAX_TEXT",
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
    "read_pod_resource_status",
]

_log = logging.getLogger(__name__)

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})


class ResourceStatusError(ValueError):
    """A ``resource-status`` annotation that cannot be used."""


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


#: Most NUMA nodes a status may list (Linux allows 1024, ``CONFIG_NODES_SHIFT`` 10).
MAX_NUMA_NODES: Final = 1024


class _WireNUMA(msgspec.Struct, frozen=True, gc=False):
    node: Annotated[int, msgspec.Meta(ge=0, lt=MAX_NUMA_NODES)] = 0
    resources: Annotated[dict[str, str | int], msgspec.Meta(max_length=64)] = {}


class _WireStatus(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, rename="camel"):
    cpuset: str = ""
    numa_node_resources: Annotated[
        tuple[_WireNUMA, ...], msgspec.Meta(max_length=MAX_NUMA_NODES)
    ] = ()


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
    """The status of an annotation value; :class:`ResourceStatusError` if it is not one (text
    over 256 KiB, a cpuset naming a CPU id of 8192 or more, more than 1024 NUMA entries)."""
    try:
        wire = decode(text, _DECODER, "resource status")
        cpuset = parse_cpu_list(wire.cpuset, "cpuset")
    except BoundedError as err:
        raise ResourceStatusError(str(err)) from None
    numa = tuple(
        NUMANodeResource(
            node=entry.node,
            resources=_resources(entry.resources, f"numaNodeResources[{index}].resources"),
        )
        for index, entry in enumerate(wire.numa_node_resources)
    )
    return ResourceStatus(cpuset=cpuset, numa_node_resources=numa)


@functools.lru_cache(maxsize=65536)
def _cached(text: str) -> ResourceStatus | ResourceStatusError:
    try:
        return parse_resource_status(text)
    except ResourceStatusError as err:
        _log.warning("ignoring pod annotation %s: %s", k.ANNOTATION_RESOURCE_STATUS, err)
        return err


def read_pod_resource_status(pod: Pod) -> ResourceStatus | ResourceStatusError | None:
    """The pod's status, why it cannot be read, or ``None`` when the annotation is absent.

    Parsed (and a refusal logged) once per distinct annotation text.
    """
    text = pod.metadata.annotations.get(k.ANNOTATION_RESOURCE_STATUS)
    if not text:
        return None
    return _cached(text)


def pod_resource_status(pod: Pod) -> ResourceStatus | None:
    """The pod's status; ``None`` when the annotation is absent or cannot be read."""
    found = read_pod_resource_status(pod)
    return None if isinstance(found, ResourceStatusError) else found


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
