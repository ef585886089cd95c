"""Parsing the agent's ``node.koordinator.sh/cpu-topology`` annotation."""

from __future__ import annotations

import pytest

from agent.node import cpu_topology_annotation
from agent.qos.framework import CpuInfo
from controller.scheduler.numaresource import topology
from tests.controller.numaresource.builders import TWO_SOCKETS, node, topology_text


def test_two_sockets_hyperthreaded() -> None:
    topo = topology.node_topology(node())
    assert topo.valid
    assert (topo.num_cpus, topo.num_cores, topo.num_numa_nodes, topo.num_sockets) == (16, 8, 2, 2)
    assert (topo.cpus_per_core, topo.cpus_per_node, topo.cpus_per_socket) == (2, 8, 8)
    assert [c.id for c in topo.cpus] == list(range(16))
    # core ids restart on socket 1, yet its cores are distinct from socket 0's
    assert topo.by_id[0].core == topo.by_id[8].core
    assert topo.by_id[0].core != topo.by_id[4].core
    assert {c.id for c in topo.cpus if c.node == 1} == {4, 5, 6, 7, 12, 13, 14, 15}


def test_one_thread_per_core_and_two_numa_nodes_per_socket() -> None:
    text = topology_text(sockets=1, cores=8, threads=1, numa_per_socket=2)
    topo = topology.parse_cpu_topology(text)
    assert (topo.cpus_per_core, topo.num_numa_nodes, topo.cpus_per_node) == (1, 2, 4)


def test_what_the_agent_writes_parses_back() -> None:
    cpus = tuple(CpuInfo(cpu=i, core=i % 2, socket=0, node=0) for i in range(4))
    topo = topology.parse_cpu_topology(cpu_topology_annotation(cpus))
    assert [(c.id, c.socket, c.node) for c in topo.cpus] == [(i, 0, 0) for i in range(4)]
    assert topo.cpus_per_core == 2


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(None, id="no-annotation"),
        pytest.param("", id="empty-text"),
        pytest.param("{broken", id="not-json"),
        pytest.param('{"detail":[]}', id="no-cpus"),
        pytest.param("[]", id="not-an-object"),
        pytest.param('{"detail":[{"id":0},{"id":0}]}', id="cpu-twice"),
        pytest.param('{"detail":[{"id":-1}]}', id="negative-id"),
        pytest.param('{"detail":[{"id":"0"}]}', id="id-not-a-number"),
    ],
)
def test_an_unusable_annotation_is_the_invalid_topology(text: str | None) -> None:
    topo = topology.node_topology(node(topology=text))
    assert not topo.valid
    assert topo.cpus_per_core == 0


@pytest.mark.parametrize(
    "text", ["{broken", '{"detail":[{"id":0},{"id":0}]}', '{"detail":[{"id":1,"core":-2}]}']
)
def test_parse_names_the_problem(text: str) -> None:
    with pytest.raises(topology.CPUTopologyError):
        topology.parse_cpu_topology(text)


def test_missing_fields_default_to_zero() -> None:
    topo = topology.parse_cpu_topology('{"detail":[{"id":0},{"id":1}]}')
    assert (topo.num_cores, topo.num_sockets, topo.num_numa_nodes) == (1, 1, 1)


def test_parsed_once_per_text() -> None:
    assert topology.node_topology(node()) is topology.node_topology(node(topology=TWO_SOCKETS))
