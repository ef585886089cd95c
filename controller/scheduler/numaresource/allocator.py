"""Which CPUs a pod gets from a node.

The node's free CPUs are all of its topology's CPUs minus those already bound to its pods
(their ``resource-status`` cpusets, :func:`~controller.scheduler.numaresource.status.bound_cpus`)
and
any reserved ones.

``FullPCPUs`` (and any policy on a node with one thread per core) takes whole physical cores:

1. when the request fits in one NUMA node, from the first NUMA node whose wholly free cores
   hold enough CPUs, in the order of the NUMA allocate strategy;
2. else, when it fits in one socket, from the first such socket, in the same order;
3. else whole free sockets' cores first (the socket with the most free cores first), then
   core by core from the sockets with the fewest;
4. what is still missing (no whole cores left) comes from any free CPU, as ``SpreadByPCPUs``.

``SpreadByPCPUs`` takes one logical CPU per physical core before a second thread of any core:
from the first NUMA node with enough free CPUs, else the first such socket, else anywhere.

The NUMA allocate strategy (node label ``node.koordinator.sh/numa-allocate-strategy``, else
``MostAllocated`` when the args' NUMA scoring strategy is, else ``LeastAllocated``) orders the
NUMA nodes and sockets: ``MostAllocated`` tries the one with the fewest free CPUs first (pack),
``LeastAllocated`` and ``DistributeEvenly`` the one with the most (spread); ties go to the
socket with fewer (pack) or more (spread) free CPUs, then to the lower id.

A pod with an exclusive policy first tries without the CPUs it should keep away from:
``PCPULevel`` leaves out the physical cores holding CPUs of other ``PCPULevel`` pods,
``NUMANodeLevel`` the NUMA nodes holding CPUs of other ``NUMANodeLevel`` pods; when that fails
it takes them too (the policies are preferences).

With ``single_numa_node`` (NUMA topology policy ``SingleNUMANode`` or ``Restricted``) every CPU
comes from one NUMA node, or the allocation fails. A failed allocation is ``None``; the plugin
reports it as Unschedulable with :data:`NOT_ENOUGH_CPUS`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from apis import constants as k
from apis.core import Node, Pod
from apis.resources import ResourceList
from controller.scheduler.numaresource.args import MOST_ALLOCATED, NodeNUMAResourceArgs
from controller.scheduler.numaresource.policy import (
    CPUBindPolicy,
    CPUExclusivePolicy,
    pod_exclusive_policy,
)
from controller.scheduler.numaresource.status import (
    FINISHED_PHASES,
    NUMANodeResource,
    bound_cpus,
    pod_resource_status,
)
from controller.scheduler.numaresource.topology import Cpu, CPUTopology

__all__ = [
    "DISTRIBUTE_EVENLY",
    "NOT_ENOUGH_CPUS",
    "NUMA_ALLOCATE_STRATEGIES",
    "allocate",
    "exclusive_cpus",
    "free_cpus",
    "numa_allocate_strategy",
    "numa_node_resources",
    "take_cpus",
]

NOT_ENOUGH_CPUS: Final = "not enough cpus available to satisfy request"
DISTRIBUTE_EVENLY: Final = "DistributeEvenly"
NUMA_ALLOCATE_STRATEGIES: Final = ("MostAllocated", "LeastAllocated", DISTRIBUTE_EVENLY)


def numa_allocate_strategy(node: Node, args: NodeNUMAResourceArgs) -> str:
    """The node's ``numa-allocate-strategy`` label when it is a known value, else the args'."""
    value = node.metadata.labels.get(k.LABEL_NODE_NUMA_ALLOCATE_STRATEGY, "")
    if value in NUMA_ALLOCATE_STRATEGIES:
        return value
    return args.default_numa_allocate_strategy


def free_cpus(
    topology: CPUTopology, pods: Iterable[Pod], reserved: Iterable[int] = ()
) -> frozenset[int]:
    """The topology's CPUs not bound to ``pods`` (the node's pods) and not ``reserved``."""
    return topology.ids - bound_cpus(pods) - frozenset(reserved)


class _Free:
    """The free CPUs of one allocation, grouped by core, NUMA node and socket."""

    def __init__(self, topology: CPUTopology, free: frozenset[int], packs: bool) -> None:
        self.topology = topology
        self.packs = packs
        self.cpus: list[Cpu] = [topology.by_id[c] for c in sorted(free) if c in topology.by_id]
        self.core_size: dict[int, int] = defaultdict(int)
        for cpu in topology.cpus:
            self.core_size[cpu.core] += 1
        self.socket_free: dict[int, int] = defaultdict(int)
        for cpu in self.cpus:
            self.socket_free[cpu.socket] += 1

    def whole_cores(self, cpus: Sequence[Cpu]) -> list[int]:
        """CPU ids of the cores of ``cpus`` that are wholly free, core by core."""
        by_core: dict[int, list[int]] = defaultdict(list)
        for cpu in cpus:
            by_core[cpu.core].append(cpu.id)
        result: list[int] = []
        for core in sorted(by_core):
            ids = by_core[core]
            if len(ids) == self.core_size[core]:
                result.extend(sorted(ids))
        return result

    def ordered_groups(
        self, key: Callable[[Cpu], int], eligible: Callable[[Sequence[Cpu]], list[int]]
    ) -> list[tuple[int, list[int]]]:
        """(group id, eligible CPU ids) per NUMA node or socket, in the strategy's order."""
        groups: dict[int, list[Cpu]] = defaultdict(list)
        for cpu in self.cpus:
            groups[key(cpu)].append(cpu)
        ranked: list[tuple[tuple[int, int, int], int, list[int]]] = []
        sign = 1 if self.packs else -1
        for group, members in groups.items():
            ids = eligible(members)
            socket = members[0].socket
            rank = (sign * len(ids), sign * self.socket_free[socket], group)
            ranked.append((rank, group, ids))
        ranked.sort(key=lambda item: item[0])
        return [(group, ids) for _, group, ids in ranked]


def _spread(cpus: Sequence[Cpu]) -> list[int]:
    """CPU ids, one per core before any core's second: cores with more free threads first."""
    by_core: dict[int, list[int]] = defaultdict(list)
    for cpu in cpus:
        by_core[cpu.core].append(cpu.id)
    threads = sorted((sorted(ids) for ids in by_core.values()), key=lambda ids: -len(ids))
    result: list[int] = []
    for depth in range(len(threads[0]) if threads else 0):
        result.extend(ids[depth] for ids in threads if depth < len(ids))
    return result


def _from_one_group(
    free: _Free, count: int, whole: bool, key: Callable[[Cpu], int]
) -> list[int] | None:
    eligible = free.whole_cores if whole else _spread
    for _, ids in free.ordered_groups(key, eligible):
        if len(ids) >= count:
            return ids[:count]
    return None


def _by_node(cpu: Cpu) -> int:
    return cpu.node


def _by_socket(cpu: Cpu) -> int:
    return cpu.socket


def _whole_cores_across_sockets(free: _Free, count: int) -> list[int]:
    """Whole free cores for a request larger than a socket's free cores (step 3)."""
    per_socket = [ids for _, ids in free.ordered_groups(_by_socket, free.whole_cores)]
    per_socket.sort(key=len, reverse=True)
    taken: list[int] = []
    partial: list[list[int]] = []
    for ids in per_socket:
        if ids and len(ids) <= count - len(taken):
            taken.extend(ids)
        else:
            partial.append(ids)
    partial.sort(key=len)
    by_id = free.topology.by_id
    for ids in partial:
        position = 0
        while position < len(ids):
            core = by_id[ids[position]].core
            size = free.core_size[core]
            if size > count - len(taken):
                break
            taken.extend(ids[position : position + size])
            position += size
    return taken


def take_cpus(
    topology: CPUTopology,
    free: frozenset[int],
    count: int,
    policy: str,
    strategy: str,
    *,
    single_numa_node: bool = False,
) -> frozenset[int] | None:
    """``count`` CPUs out of ``free`` under ``policy`` and ``strategy``; ``None`` if impossible."""
    if count <= 0:
        return frozenset()
    state = _Free(topology, free, packs=strategy == MOST_ALLOCATED)
    if count > len(state.cpus):
        return None
    whole = policy == CPUBindPolicy.FULL_PCPUS or topology.cpus_per_core == 1
    if single_numa_node:
        picked = _from_one_group(state, count, whole, _by_node) if whole else None
        if picked is None:
            picked = _from_one_group(state, count, False, _by_node)
        return frozenset(picked) if picked is not None else None
    if count <= topology.cpus_per_node:
        picked = _from_one_group(state, count, whole, _by_node)
        if picked is not None:
            return frozenset(picked)
    if count <= topology.cpus_per_socket:
        picked = _from_one_group(state, count, whole, _by_socket)
        if picked is not None:
            return frozenset(picked)
    taken = _whole_cores_across_sockets(state, count) if whole else []
    if len(taken) < count:
        chosen = set(taken)
        rest = [cpu for cpu in state.cpus if cpu.id not in chosen]
        taken.extend(_spread(rest)[: count - len(taken)])
    return frozenset(taken)


def exclusive_cpus(topology: CPUTopology, pods: Iterable[Pod], exclusive: str) -> frozenset[int]:
    """CPUs a pod with ``exclusive`` policy keeps away from, given the node's ``pods``.

    ``PCPULevel``: every CPU of a core holding a CPU of another ``PCPULevel`` pod;
    ``NUMANodeLevel``: every CPU of a NUMA node holding one of another ``NUMANodeLevel`` pod.
    """
    if exclusive not in (CPUExclusivePolicy.PCPU_LEVEL, CPUExclusivePolicy.NUMA_NODE_LEVEL):
        return frozenset()
    by_core = exclusive == CPUExclusivePolicy.PCPU_LEVEL
    held: set[int] = set()
    for pod in pods:
        if pod.status.phase in FINISHED_PHASES or pod_exclusive_policy(pod) != exclusive:
            continue
        status = pod_resource_status(pod)
        if status is None:
            continue
        for cpu in status.cpuset:
            info = topology.by_id.get(cpu)
            if info is not None:
                held.add(info.core if by_core else info.node)
    return frozenset(cpu.id for cpu in topology.cpus if (cpu.core if by_core else cpu.node) in held)


def allocate(
    topology: CPUTopology,
    pods: Iterable[Pod],
    count: int,
    policy: str,
    strategy: str,
    *,
    exclusive: str = "",
    reserved: Iterable[int] = (),
    single_numa_node: bool = False,
) -> frozenset[int] | None:
    """``count`` CPUs for a pod on a node holding ``pods``; ``None`` if they are not there.

    ``exclusive`` is the pod's ``preferredCPUExclusivePolicy``.
    """
    on_node = tuple(pods)
    free = free_cpus(topology, on_node, reserved)
    avoided = exclusive_cpus(topology, on_node, exclusive)
    if avoided & free:
        picked = take_cpus(
            topology, free - avoided, count, policy, strategy, single_numa_node=single_numa_node
        )
        if picked is not None:
            return picked
    return take_cpus(topology, free, count, policy, strategy, single_numa_node=single_numa_node)


def numa_node_resources(topology: CPUTopology, cpus: Iterable[int]) -> tuple[NUMANodeResource, ...]:
    """The cpu (millicores) ``cpus`` take from each NUMA node, by node id."""
    per_node: dict[int, int] = defaultdict(int)
    for cpu in cpus:
        per_node[topology.by_id[cpu].node] += 1000
    return tuple(
        NUMANodeResource(node=node, resources=ResourceList({k.RESOURCE_CPU: amount}))
        for node, amount in sorted(per_node.items())
    )
