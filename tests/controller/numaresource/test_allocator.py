"""Taking CPUs for a pod on a 2-socket, 2-NUMA-node, hyper-threaded node.

Node 0 holds cpus 0-3 with their siblings 8-11 (cores 0: {0,8}, 1: {1,9}, 2: {2,10},
3: {3,11}); node 1 holds cpus 4-7 with siblings 12-15.
"""

from __future__ import annotations

import pytest

from apis import constants as k
from apis.resources import ResourceList
from controller.scheduler.numaresource.allocator import (
    allocate,
    exclusive_cpus,
    free_cpus,
    numa_allocate_strategy,
    numa_node_resources,
    take_cpus,
)
from controller.scheduler.numaresource.args import NodeNUMAResourceArgs, ScoringStrategy
from controller.scheduler.numaresource.status import NUMANodeResource
from controller.scheduler.numaresource.topology import (
    CPUTopology,
    node_topology,
    parse_cpu_topology,
)
from tests.controller.numaresource.builders import bound, node, topology_text

TOPO = node_topology(node())
ALL = frozenset(range(16))
FULL = "FullPCPUs"
SPREAD = "SpreadByPCPUs"
LEAST = "LeastAllocated"
MOST = "MostAllocated"


def cores_of(topology: CPUTopology, cpus: frozenset[int]) -> set[int]:
    return {topology.by_id[c].core for c in cpus}


def nodes_of(topology: CPUTopology, cpus: frozenset[int]) -> set[int]:
    return {topology.by_id[c].node for c in cpus}


def test_full_pcpus_of_4_takes_two_whole_cores_on_one_numa_node() -> None:
    got = take_cpus(TOPO, ALL, 4, FULL, LEAST)
    assert got == frozenset({0, 8, 1, 9})
    assert len(cores_of(TOPO, got)) == 2
    assert nodes_of(TOPO, got) == {0}


def test_spread_by_pcpus_of_4_takes_four_different_cores() -> None:
    got = take_cpus(TOPO, ALL, 4, SPREAD, LEAST)
    assert got == frozenset({0, 1, 2, 3})
    assert len(cores_of(TOPO, got)) == 4
    assert nodes_of(TOPO, got) == {0}


@pytest.mark.parametrize(
    ("held", "policy", "strategy", "expected"),
    [
        pytest.param({0, 8}, FULL, LEAST, {4, 12, 5, 13}, id="full-least-goes-to-the-emptier-node"),
        pytest.param({0, 8}, FULL, MOST, {1, 9, 2, 10}, id="full-most-packs-the-busier-node"),
        pytest.param({0, 8}, SPREAD, LEAST, {4, 5, 6, 7}, id="spread-least"),
        pytest.param({0, 8}, SPREAD, MOST, {1, 2, 3, 9}, id="spread-most-packs"),
        pytest.param({0}, FULL, MOST, {1, 9, 2, 10}, id="full-skips-a-half-used-core"),
        pytest.param(
            {0, 1, 2}, SPREAD, MOST, {3, 8, 9, 10}, id="spread-prefers-idle-cores-then-threads"
        ),
        pytest.param(
            set(range(8)), FULL, LEAST, {8, 9, 10, 11}, id="no-whole-core-left-falls-back"
        ),
        pytest.param(
            {0, 1, 2, 8, 9, 10, 4, 5, 6, 12, 13, 14},
            FULL,
            LEAST,
            {3, 11, 7, 15},
            id="whole-cores-across-sockets",
        ),
    ],
)
def test_strategies(held: set[int], policy: str, strategy: str, expected: set[int]) -> None:
    got = take_cpus(TOPO, ALL - frozenset(held), 4, policy, strategy)
    assert got == frozenset(expected)


def test_more_than_a_socket_takes_a_whole_socket_then_whole_cores() -> None:
    got = take_cpus(TOPO, ALL, 10, FULL, LEAST)
    assert got is not None
    assert got >= {0, 1, 2, 3, 8, 9, 10, 11}
    assert len(got) == 10
    assert len(cores_of(TOPO, got)) == 5, "whole cores only"


def test_the_whole_node() -> None:
    assert take_cpus(TOPO, ALL, 16, SPREAD, LEAST) == ALL
    assert take_cpus(TOPO, ALL, 16, FULL, MOST) == ALL


@pytest.mark.parametrize("policy", [FULL, SPREAD])
def test_not_enough_free_cpus(policy: str) -> None:
    assert take_cpus(TOPO, ALL, 17, policy, LEAST) is None
    assert take_cpus(TOPO, frozenset({1, 2, 3}), 4, policy, LEAST) is None
    assert take_cpus(TOPO, ALL, 0, policy, LEAST) == frozenset()


def test_single_numa_node_keeps_to_one_node_or_fails() -> None:
    free = ALL - {0, 8, 1, 9}
    got = take_cpus(TOPO, free, 6, FULL, MOST, single_numa_node=True)
    assert got is not None
    assert nodes_of(TOPO, got) == {1}
    assert take_cpus(TOPO, ALL, 10, FULL, LEAST, single_numa_node=True) is None
    # 5 free on node 0 (one whole core) and 4 on node 1: 5 fit only node 0, by partial cores
    free = frozenset({2, 3, 10, 11, 1, 4, 5, 6, 7})
    got = take_cpus(TOPO, free, 5, FULL, LEAST, single_numa_node=True)
    assert got == frozenset({1, 2, 3, 10, 11})


def test_one_thread_per_core_packs_like_full_pcpus() -> None:
    topo = parse_cpu_topology(topology_text(sockets=2, cores=4, threads=1))
    got = take_cpus(topo, topo.ids, 3, SPREAD, LEAST)
    assert got == frozenset({0, 1, 2})


def test_free_cpus_leave_out_bound_pods_and_reserved_cpus() -> None:
    pods = [bound("a", frozenset({0, 8})), bound("old", frozenset({1, 9}), phase="Succeeded")]
    assert free_cpus(TOPO, pods, reserved={15}) == ALL - {0, 8, 15}


def test_allocate_on_a_node_with_pods() -> None:
    pods = [bound("a", frozenset({0, 8, 1, 9}))]
    got = allocate(TOPO, pods, 4, FULL, MOST)
    assert got == frozenset({2, 10, 3, 11})
    assert (
        allocate(TOPO, [*pods, bound("b", frozenset(range(2, 16)) - {8, 9})], 1, FULL, MOST) is None
    )


@pytest.mark.parametrize(
    ("labels", "numa_type", "expected"),
    [
        ({}, LEAST, LEAST),
        ({}, MOST, MOST),
        ({k.LABEL_NODE_NUMA_ALLOCATE_STRATEGY: MOST}, LEAST, MOST),
        ({k.LABEL_NODE_NUMA_ALLOCATE_STRATEGY: LEAST}, MOST, LEAST),
        ({k.LABEL_NODE_NUMA_ALLOCATE_STRATEGY: "DistributeEvenly"}, MOST, "DistributeEvenly"),
        ({k.LABEL_NODE_NUMA_ALLOCATE_STRATEGY: "Bogus"}, MOST, MOST),
    ],
)
def test_numa_allocate_strategy(labels: dict[str, str], numa_type: str, expected: str) -> None:
    args = NodeNUMAResourceArgs(numa_scoring_strategy=ScoringStrategy(type=numa_type))
    assert numa_allocate_strategy(node(labels=labels), args) == expected


def test_numa_node_resources_count_cpus_per_node() -> None:
    assert numa_node_resources(TOPO, {0, 8, 4}) == (
        NUMANodeResource(node=0, resources=ResourceList({"cpu": 2000})),
        NUMANodeResource(node=1, resources=ResourceList({"cpu": 1000})),
    )


PCPU = "PCPULevel"
NUMA = "NUMANodeLevel"


@pytest.mark.parametrize(
    ("held_by", "exclusive", "policy", "expected"),
    [
        pytest.param("", PCPU, SPREAD, {1, 2, 3, 8}, id="pcpu-neighbour-not-exclusive"),
        pytest.param(PCPU, PCPU, SPREAD, {1, 2, 3, 9}, id="pcpu-keeps-off-the-shared-core"),
        pytest.param(PCPU, "", SPREAD, {1, 2, 3, 8}, id="pod-not-exclusive"),
        pytest.param(NUMA, PCPU, SPREAD, {1, 2, 3, 8}, id="different-levels-ignore-each-other"),
        pytest.param("", NUMA, FULL, {1, 9, 2, 10}, id="numa-neighbour-not-exclusive"),
        pytest.param(NUMA, NUMA, FULL, {4, 12, 5, 13}, id="numa-keeps-off-the-node"),
    ],
)
def test_exclusive_policies_keep_pods_apart(
    held_by: str, exclusive: str, policy: str, expected: set[int]
) -> None:
    # cpu 0 is taken by a pod of policy `held_by`; MostAllocated would pack onto node 0
    pods = [bound("first", frozenset({0}), exclusive=held_by)]
    assert allocate(TOPO, pods, 4, policy, MOST, exclusive=exclusive) == frozenset(expected)


def test_exclusive_policies_are_preferences() -> None:
    pods = [bound("first", frozenset({0, 8, 4, 12}), exclusive=NUMA)]
    got = allocate(TOPO, pods, 4, FULL, MOST, exclusive=NUMA)
    assert got == frozenset({1, 9, 2, 10}), "every node is held: take one anyway"


def test_exclusive_cpus() -> None:
    pods = [
        bound("a", frozenset({0}), exclusive=PCPU),
        bound("b", frozenset({5}), exclusive=NUMA),
        bound("gone", frozenset({1}), exclusive=PCPU, phase="Failed"),
    ]
    assert exclusive_cpus(TOPO, pods, PCPU) == {0, 8}
    assert exclusive_cpus(TOPO, pods, NUMA) == {4, 5, 6, 7, 12, 13, 14, 15}
    assert exclusive_cpus(TOPO, pods, "None") == frozenset()
