"""The Node carries this host's CPU topology in ``node.koordinator.sh/cpu-topology``."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import psutil

from agent import node as agent_node
from agent.qos.framework import CpuInfo
from apis import constants as k
from apis.codec import decode_json, encode_json
from apis.core import Node
from tests.fakes.host import FakeHost

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)

#: 2 sockets x 2 cores x 2 threads, one NUMA node per socket; siblings are N and N+4.
TOPOLOGY = tuple(
    CpuInfo(cpu=cpu, core=cpu % 4, socket=(cpu % 4) // 2, node=(cpu % 4) // 2) for cpu in range(8)
)
EXPECTED = (
    '{"detail":['
    '{"id":0,"core":0,"socket":0,"node":0},'
    '{"id":1,"core":1,"socket":0,"node":0},'
    '{"id":2,"core":2,"socket":1,"node":1},'
    '{"id":3,"core":3,"socket":1,"node":1},'
    '{"id":4,"core":0,"socket":0,"node":0},'
    '{"id":5,"core":1,"socket":0,"node":0},'
    '{"id":6,"core":2,"socket":1,"node":1},'
    '{"id":7,"core":3,"socket":1,"node":1}'
    "]}"
)

FACTS = agent_node.HostFacts(
    hostname="cpu-1",
    cpus=8,
    memory=1 << 34,
    ephemeral_storage=1 << 36,
    kernel="6.8.0",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
    cpu_topology=TOPOLOGY,
)


def build(facts: agent_node.HostFacts = FACTS) -> Node:
    return agent_node.build_node("cpu-1", facts, heartbeat=T1, ready_since=T0)


def test_the_node_carries_the_cpu_topology_sorted_by_id() -> None:
    shuffled = dataclasses.replace(FACTS, cpu_topology=tuple(reversed(TOPOLOGY)))
    for facts in (FACTS, shuffled):
        annotations = build(facts).metadata.annotations
        assert annotations[k.ANNOTATION_NODE_CPU_TOPOLOGY] == EXPECTED
    parsed = json.loads(EXPECTED)
    assert [entry["id"] for entry in parsed["detail"]] == list(range(8))


def test_the_kubelet_cpu_manager_policy_is_not_claimed() -> None:
    assert k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY not in build().metadata.annotations


def test_without_a_readable_topology_there_is_no_annotation() -> None:
    node = build(dataclasses.replace(FACTS, cpu_topology=()))
    assert k.ANNOTATION_NODE_CPU_TOPOLOGY not in node.metadata.annotations


def test_an_unchanged_host_gives_byte_identical_nodes() -> None:
    first = encode_json(build())
    again = encode_json(build(dataclasses.replace(FACTS, cpu_topology=tuple(TOPOLOGY))))
    assert first == again
    assert decode_json(first, Node) == build()


MEMINFO = """\
MemTotal:       16777216 kB
MemFree:        8000000 kB
MemAvailable:   12000000 kB
Buffers:          10000 kB
Cached:          900000 kB
SwapCached:            0 kB
Active:          500000 kB
Inactive:        400000 kB
Shmem:             5000 kB
Slab:             70000 kB
SReclaimable:     50000 kB
SUnreclaim:       20000 kB
SwapTotal:             0 kB
SwapFree:              0 kB
"""


def _cpu(host: FakeHost, cpu: int, *, core: int, package: int) -> None:
    base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
    host.write(f"{base}/core_id", f"{core}\n")
    host.write(f"{base}/physical_package_id", f"{package}\n")


def test_read_host_facts_reads_the_topology_under_the_host_root(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    # core_id restarts per socket: (socket, core_id) pairs name the physical cores
    for cpu in range(8):
        _cpu(host, cpu, core=(cpu % 4) % 2, package=(cpu % 4) // 2)
    host.write("/sys/devices/system/cpu/online", "0-7\n")
    host.write("/sys/devices/system/node/node0/cpulist", "0-1,4-5\n")
    host.write("/sys/devices/system/node/node1/cpulist", "2-3,6-7\n")
    host.write("/proc/meminfo", MEMINFO)
    try:
        facts = agent_node.read_host_facts(host.paths)
        again = agent_node.read_host_facts(host.paths)
    finally:
        psutil.PROCFS_PATH = "/proc"
    assert facts.cpu_topology == TOPOLOGY
    name = "cpu-1"
    node = agent_node.build_node(name, facts, heartbeat=T1, ready_since=T0)
    assert node.metadata.annotations[k.ANNOTATION_NODE_CPU_TOPOLOGY] == EXPECTED
    same = agent_node.build_node(name, again, heartbeat=T1, ready_since=T0)
    assert encode_json(same) == encode_json(node)
