"""A node's CPU topology, from the agent's ``node.koordinator.sh/cpu-topology`` annotation.

The annotation is ``{"detail":[{"id":0,"core":0,"socket":0,"node":0},...]}``: one entry per
logical CPU with its physical core, socket and NUMA node. Core ids may restart on every socket
(as sysfs reports them), so a physical core is the pair (socket, core); here cores are
renumbered densely in that pair's order.

A topology is valid when it has at least one CPU (and so a core, a NUMA node and a socket).
A missing annotation, text that is not the document above, a negative id or a CPU listed twice
(or a document past the bounds of :mod:`apis.bounded`: 256 KiB, 8192 CPUs, ids below 8192)
gives the empty topology, which is invalid: CPU binding on that node is refused with
:data:`INVALID_CPU_TOPOLOGY`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Final

import msgspec

from apis import constants as k
from apis.bounded import MAX_CPUS, BoundedError, decode
from apis.core import Node

__all__ = [
    "INVALID_CPU_TOPOLOGY",
    "CPUTopology",
    "CPUTopologyError",
    "Cpu",
    "build_topology",
    "node_topology",
    "parse_cpu_topology",
]

_log = logging.getLogger(__name__)

INVALID_CPU_TOPOLOGY: Final = "node(s) invalid CPU Topology"


class CPUTopologyError(ValueError):
    """A ``cpu-topology`` annotation that cannot be used."""


@dataclass(frozen=True, slots=True)
class Cpu:
    """One logical CPU. ``core`` is a dense physical-core index unique across sockets."""

    id: int
    core: int
    socket: int
    node: int


@dataclass(frozen=True, slots=True)
class CPUTopology:
    """Logical CPUs sorted by id, with the counts the binding rules need."""

    cpus: tuple[Cpu, ...] = ()
    num_cores: int = 0
    num_numa_nodes: int = 0
    num_sockets: int = 0
    by_id: Mapping[int, Cpu] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_cpus(self) -> int:
        return len(self.cpus)

    @property
    def valid(self) -> bool:
        return bool(self.cpus)

    @property
    def cpus_per_core(self) -> int:
        """Threads per physical core (0 for the empty topology)."""
        return self.num_cpus // self.num_cores if self.num_cores else 0

    @property
    def cpus_per_node(self) -> int:
        return self.num_cpus // self.num_numa_nodes if self.num_numa_nodes else 0

    @property
    def cpus_per_socket(self) -> int:
        return self.num_cpus // self.num_sockets if self.num_sockets else 0

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self.by_id)


_EMPTY: Final = CPUTopology()

_Id = Annotated[int, msgspec.Meta(ge=0, lt=MAX_CPUS)]


class _Entry(msgspec.Struct, frozen=True, gc=False):
    id: _Id
    core: _Id = 0
    socket: _Id = 0
    node: _Id = 0


class _Document(msgspec.Struct, frozen=True, gc=False):
    detail: Annotated[tuple[_Entry, ...], msgspec.Meta(max_length=MAX_CPUS)] = ()


_DECODER: Final = msgspec.json.Decoder(_Document)


def build_topology(entries: tuple[tuple[int, int, int, int], ...]) -> CPUTopology:
    """A topology from ``(id, core, socket, node)`` tuples (core ids may repeat per socket).

    Raises :class:`CPUTopologyError` for a negative id or a CPU given twice.
    """
    cores: dict[tuple[int, int], int] = {}
    by_id: dict[int, Cpu] = {}
    for cpu, core, socket, node in sorted(entries):
        if min(cpu, core, socket, node) < 0:
            raise CPUTopologyError(f"cpu {cpu}: ids must not be negative")
        if cpu in by_id:
            raise CPUTopologyError(f"cpu {cpu} is listed twice")
        index = cores.setdefault((socket, core), len(cores))
        by_id[cpu] = Cpu(id=cpu, core=index, socket=socket, node=node)
    cpus = tuple(by_id.values())
    return CPUTopology(
        cpus=cpus,
        num_cores=len(cores),
        num_numa_nodes=len({c.node for c in cpus}),
        num_sockets=len({c.socket for c in cpus}),
        by_id=by_id,
    )


def parse_cpu_topology(text: str) -> CPUTopology:
    """The topology of an annotation's text; :class:`CPUTopologyError` if it is not one (over
    256 KiB, more than 8192 CPUs, an id of 8192 or more)."""
    try:
        document = decode(text, _DECODER, "cpu topology")
    except BoundedError as err:
        raise CPUTopologyError(str(err)) from None
    return build_topology(tuple((e.id, e.core, e.socket, e.node) for e in document.detail))


@functools.lru_cache(maxsize=4096)
def _cached(text: str) -> CPUTopology:
    try:
        return parse_cpu_topology(text)
    except CPUTopologyError as err:
        _log.warning("ignoring node annotation %s: %s", k.ANNOTATION_NODE_CPU_TOPOLOGY, err)
        return _EMPTY


def node_topology(node: Node) -> CPUTopology:
    """The node's topology; the empty (invalid) one when the annotation is absent or bad.

    Parsed once per distinct annotation text.
    """
    text = node.metadata.annotations.get(k.ANNOTATION_NODE_CPU_TOPOLOGY)
    if not text:
        return _EMPTY
    return _cached(text)
