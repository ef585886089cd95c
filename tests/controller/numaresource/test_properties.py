"""Properties: CPUs handed out one pod after another on a node are never handed out twice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apis.core import Pod
from controller.scheduler.numaresource.allocator import allocate, free_cpus
from controller.scheduler.numaresource.status import bound_cpus
from controller.scheduler.numaresource.topology import parse_cpu_topology
from tests.controller.numaresource.builders import bound, topology_text

_SHAPES = st.tuples(
    st.integers(1, 2),  # sockets
    st.sampled_from([2, 4, 6]),  # cores per socket
    st.integers(1, 2),  # threads per core
    st.sampled_from([1, 2]),  # NUMA nodes per socket
)
_ASKS = st.lists(
    st.tuples(
        st.integers(1, 8),
        st.sampled_from(["FullPCPUs", "SpreadByPCPUs"]),
        st.sampled_from(["MostAllocated", "LeastAllocated", "DistributeEvenly"]),
        st.booleans(),  # single NUMA node
        st.booleans(),  # the pod finishes before the next one comes
        st.sampled_from(["", "PCPULevel", "NUMANodeLevel"]),  # exclusive policy
    ),
    min_size=1,
    max_size=12,
)


@given(_SHAPES, _ASKS)
def test_successive_allocations_never_overlap_nor_overflow(
    shape: tuple[int, int, int, int],
    asks: list[tuple[int, str, str, bool, bool, str]],
) -> None:
    sockets, cores, threads, numa = shape
    topology = parse_cpu_topology(
        topology_text(sockets=sockets, cores=cores, threads=threads, numa_per_socket=numa)
    )
    pods: list[Pod] = []
    for index, (count, policy, strategy, single, finishes, exclusive) in enumerate(asks):
        free = free_cpus(topology, pods)
        got = allocate(
            topology, pods, count, policy, strategy, exclusive=exclusive, single_numa_node=single
        )
        if got is None:
            # only when the CPUs are not there (in one NUMA node, when that is asked)
            if not single:
                assert len(free) < count
            continue
        assert len(got) == count
        assert got <= free, "a CPU handed out twice"
        assert got <= topology.ids
        if single:
            assert len({topology.by_id[c].node for c in got}) == 1
        phase = "Succeeded" if finishes else "Running"
        pods.append(bound(f"p{index}", got, phase=phase, exclusive=exclusive))
        held = [bound_cpus([p]) for p in pods]
        assert sum(map(len, held)) == len(bound_cpus(pods)), "two running pods share a CPU"
        assert bound_cpus(pods) <= topology.ids
