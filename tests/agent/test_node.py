"""This host as a Node: capacity, labels, conditions, accelerator resources."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest
from msgspec.structs import replace

from agent import node as agent_node
from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from agent.config import AgentConfig, AgentSection, HostPaths
from agent.devices import base, simulated
from apis.codec import decode_json, encode_json
from apis.core import Node
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device
from tests.fakes.host import FakeHost

GIB = 1 << 30
MIB = 1 << 20
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)

FACTS = agent_node.HostFacts(
    hostname="gpu-1",
    cpus=96,
    memory=512 * GIB,
    ephemeral_storage=900 * GIB,
    kernel="6.8.0-50-generic",
    os_image="Ubuntu 24.04.1 LTS",
    architecture="amd64",
    machine_id="0123",
    internal_ips=("10.0.0.7",),
)
CGROUP = CgroupInfo(
    version=CgroupVersion.V2, driver=CgroupDriver.SYSTEMD, root=Path("/sys/fs/cgroup")
)


def simulated_device(profile: str, name: str = "gpu-1") -> Device:
    result = simulated.simulate((simulated.PROFILES[profile],), name)
    return base.build_device(Node(metadata=ObjectMeta(name=name)), [result])


def build(device: Device | None = None, cgroup: CgroupInfo | None = CGROUP) -> Node:
    return agent_node.build_node(
        "gpu-1", FACTS, heartbeat=T1, ready_since=T0, cgroup=cgroup, device=device
    )


def test_capacity_labels_and_ready_condition() -> None:
    node = build()
    assert node.metadata.name == "gpu-1"
    assert dict(node.status.capacity) == {
        "cpu": 96_000,
        "memory": 512 * GIB,
        "ephemeral-storage": 900 * GIB,
        "pods": 110,
    }
    assert node.status.allocatable == node.status.capacity
    assert node.metadata.labels == {
        "kubernetes.io/hostname": "gpu-1",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        agent_node.LABEL_CGROUP_VERSION: "v2",
        agent_node.LABEL_CGROUP_DRIVER: "systemd",
    }
    ready = node.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.last_heartbeat_time, ready.last_transition_time) == ("True", T1, T0)
    assert node.is_ready
    assert node.status.node_info["kernelVersion"] == "6.8.0-50-generic"
    assert node.status.node_info["osImage"] == "Ubuntu 24.04.1 LTS"
    assert node.status.node_info["architecture"] == "amd64"
    assert [(a.type, a.address) for a in node.status.addresses] == [
        ("InternalIP", "10.0.0.7"),
        ("Hostname", "gpu-1"),
    ]
    assert decode_json(encode_json(node), Node) == node


def test_without_cgroups_there_are_no_cgroup_labels() -> None:
    labels = build(cgroup=None).metadata.labels
    assert agent_node.LABEL_CGROUP_VERSION not in labels
    assert agent_node.LABEL_CGROUP_DRIVER not in labels


def test_nvidia_gpus_add_koordinator_and_vendor_resources() -> None:
    node = build(simulated_device("nvidia-h100"))
    cap = node.status.capacity
    assert cap["nvidia.com/gpu"] == 8
    assert cap["koordinator.sh/gpu"] == 800
    assert cap["koordinator.sh/gpu-core"] == 800
    assert cap["koordinator.sh/gpu-memory-ratio"] == 800
    assert cap["koordinator.sh/gpu-memory"] == 8 * 81559 * MIB
    assert node.metadata.labels[base.LABEL_GPU_VENDOR] == "nvidia"
    assert node.metadata.labels[base.LABEL_GPU_MODEL] == "H100-80GB-HBM3"
    assert cap.to_wire()["koordinator.sh/gpu-memory"] == "652472Mi"


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (
            "metax-c500-sgpu",
            {"metax-tech.com/gpu": 8, "metax-tech.com/sgpu": 128, "koordinator.sh/gpu-core": 800},
        ),
        (
            "ascend-910b3",
            {
                "huawei.com/Ascend910": 8,
                "huawei.com/npu-core": 160,
                "huawei.com/npu-cpu": 56,
                "huawei.com/npu-dvpp": 800,
                "koordinator.sh/gpu-memory": 8 * 64 * GIB,
            },
        ),
        (
            "ascend-310p3-300i-duo",
            {"huawei.com/Ascend310P": 8, "huawei.com/npu-core": 64},
        ),
    ],
)
def test_vendor_resources(profile: str, expected: dict[str, int]) -> None:
    cap = build(simulated_device(profile)).status.capacity
    for name, amount in expected.items():
        assert cap[name] == amount
    assert "nvidia.com/gpu" not in cap
    assert "koordinator.sh/gpu" not in cap


def test_unhealthy_devices_add_nothing() -> None:
    device = simulated_device("nvidia-h100")
    devices = tuple(replace(d, health=d.minor != 3) for d in device.spec.devices)
    device = replace(device, spec=replace(device.spec, devices=devices))
    cap = agent_node.accelerator_resources(device)
    assert cap["nvidia.com/gpu"] == 7
    assert cap["koordinator.sh/gpu-core"] == 700


def test_an_empty_device_report_adds_nothing() -> None:
    empty = base.build_device(Node(metadata=ObjectMeta(name="gpu-1")), [])
    assert agent_node.accelerator_resources(empty) == ResourceList()
    assert agent_node.accelerator_resources(None) == ResourceList()


def test_node_name_precedence() -> None:
    cfg = AgentConfig(agent=AgentSection(node_name="from-config"))
    env = {"NODE_NAME": "from-env"}
    assert agent_node.node_name("from-flag", cfg, env) == "from-flag"
    assert agent_node.node_name(None, cfg, env) == "from-config"
    assert agent_node.node_name(None, AgentConfig(), env) == "from-env"
    assert agent_node.node_name(None, AgentConfig(), {}) == platform.node().lower()


def test_facts_of_this_machine() -> None:
    facts = agent_node.read_host_facts(HostPaths())
    assert facts.cpus == psutil.cpu_count(logical=True)
    assert facts.memory == psutil.virtual_memory().total
    assert facts.ephemeral_storage == psutil.disk_usage("/").total
    assert facts.kernel == os.uname().release
    assert facts.architecture == {"x86_64": "amd64", "aarch64": "arm64"}.get(
        platform.machine(), facts.architecture
    )


MEMINFO = """\
MemTotal:       268435456 kB
MemFree:        200000000 kB
MemAvailable:   250000000 kB
Buffers:          100000 kB
Cached:          9000000 kB
SwapCached:            0 kB
Active:          5000000 kB
Inactive:        4000000 kB
Shmem:             50000 kB
Slab:             700000 kB
SReclaimable:     500000 kB
SUnreclaim:       200000 kB
SwapTotal:             0 kB
SwapFree:              0 kB
"""


def test_facts_read_the_host_under_the_host_root(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write("/etc/os-release", 'NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    host.write("/etc/machine-id", "abcdef\n")
    host.write("/proc/sys/kernel/random/boot_id", "b00t\n")
    host.write("/proc/meminfo", MEMINFO)
    try:
        facts = agent_node.read_host_facts(host.paths)
    finally:
        psutil.PROCFS_PATH = "/proc"
    assert facts.os_image == "Debian GNU/Linux 12 (bookworm)"
    assert facts.machine_id == "abcdef"
    assert facts.boot_id == "b00t"
    assert facts.memory == 256 * GIB
