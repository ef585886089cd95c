"""This host as a Kubernetes ``Node``: capacity, labels, conditions and node info.

:func:`read_host_facts` reads the host (psutil and a few files under :class:`HostPaths`);
:func:`build_node` is pure: facts, cgroup detection and the Device report in, ``Node`` out.

Capacity: ``cpu`` in millicores (logical CPUs), ``memory`` and ``ephemeral-storage`` (the root
filesystem) in bytes, ``pods`` 110 (the kubelet's default), plus the accelerator resources of
the healthy devices of the Device report: the sums of their ``koordinator.sh/gpu-core``,
``gpu-memory``, ``gpu-memory-ratio`` and ``huawei.com/npu-*`` resources, the vendor's device
count (``nvidia.com/gpu``, ``huawei.com/Ascend910`` or ``huawei.com/Ascend310P``,
``metax-tech.com/gpu``; ``metax-tech.com/sgpu`` in sGPU mode), and ``koordinator.sh/gpu`` for
NVIDIA. Allocatable equals capacity (no reservations yet).

Annotations: ``node.koordinator.sh/cpu-topology`` ``{"detail":[{id,core,socket,node},...]}``
(sorted by CPU id, compact JSON, so an unchanged host gives the same bytes every report) when
the host's CPU topology could be read. ``kubelet.koordinator.sh/cpu-manager-policy`` is not
written: no kubelet is asked for its CPU manager policy.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec
import psutil

from agent.cgroups.detect import CgroupInfo
from agent.config import AgentConfig, HostPaths
from agent.qos.framework import CpuInfo
from agent.states import cpu_topology
from apis import constants as k
from apis.core import Node, NodeAddress, NodeStatus
from apis.meta import Condition, ObjectMeta
from apis.noderesources import RESOURCE_HUAWEI_ASCEND_910, accelerator_resources
from apis.resources import ResourceList
from apis.scheduling import Device

__all__ = [
    "LABEL_CGROUP_DRIVER",
    "LABEL_CGROUP_VERSION",
    "RESOURCE_HUAWEI_ASCEND_910",
    "HostFacts",
    "accelerator_resources",
    "build_node",
    "cpu_topology_annotation",
    "node_name",
    "read_host_facts",
]

#: koordpy's own Node labels: how the node's cgroups are laid out.
LABEL_CGROUP_VERSION: Final = "node.koordpy.io/cgroup-version"
LABEL_CGROUP_DRIVER: Final = "node.koordpy.io/cgroup-driver"

#: Well-known Kubernetes node labels (``kubernetes.io/hostname`` is in :mod:`apis.constants`).
LABEL_OS: Final = "kubernetes.io/os"
LABEL_ARCH: Final = "kubernetes.io/arch"

#: The kubelet's default ``maxPods``.
DEFAULT_MAX_PODS: Final = 110

READY_REASON: Final = "AgentReady"
READY_MESSAGE: Final = "koordpy agent is posting ready status"

# Kubernetes spells architectures as Go does.
_GOARCH: Final[Mapping[str, str]] = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "i686": "386",
    "i386": "386",
}


@dataclass(frozen=True, slots=True)
class HostFacts:
    """What the Node says about the machine; read once per report."""

    hostname: str
    cpus: int
    memory: int
    ephemeral_storage: int
    kernel: str
    os_image: str
    architecture: str
    operating_system: str = "linux"
    machine_id: str = ""
    boot_id: str = ""
    internal_ips: tuple[str, ...] = ()
    #: Online logical CPUs with core, socket and NUMA node, sorted by id; empty if unreadable.
    cpu_topology: tuple[CpuInfo, ...] = ()
    #: Extra Node labels this machine is given (kubelet's ``--node-labels``).
    labels: Mapping[str, str] = field(default_factory=dict)


class _TopologyEntry(msgspec.Struct, frozen=True, gc=False):
    id: int
    core: int
    socket: int
    node: int


class _TopologyDetail(msgspec.Struct, frozen=True, gc=False):
    detail: tuple[_TopologyEntry, ...]


@functools.lru_cache(maxsize=8)
def cpu_topology_annotation(cpus: tuple[CpuInfo, ...]) -> str:
    """The ``node.koordinator.sh/cpu-topology`` value: ``{"detail":[...]}`` sorted by CPU id."""
    entries = tuple(
        _TopologyEntry(id=c.cpu, core=c.core, socket=c.socket, node=c.node)
        for c in sorted(cpus, key=lambda c: c.cpu)
    )
    return msgspec.json.encode(_TopologyDetail(detail=entries)).decode()


def node_name(
    explicit: str | None, cfg: AgentConfig, environ: Mapping[str, str] | None = None
) -> str:
    """``--node-name``, else ``[agent] node_name``, else ``$NODE_NAME``, else the hostname."""
    env = os.environ if environ is None else environ
    for candidate in (explicit, cfg.agent.node_name, env.get("NODE_NAME")):
        if candidate:
            return candidate
    return socket.gethostname().lower()


def _read_first_line(path: os.PathLike[str] | str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def _os_image(host: HostPaths) -> str:
    for candidate in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = host.path(candidate).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() == "PRETTY_NAME":
                return value.strip().strip('"').strip("'")
    return platform.system()


def _internal_ips() -> tuple[str, ...]:
    found: list[str] = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(address.address)
            if not ip.is_loopback and not ip.is_link_local:
                found.append(str(ip))
    return tuple(sorted(set(found)))


def read_host_facts(host: HostPaths) -> HostFacts:
    """This machine's facts (the host's /proc and / when ``host.root`` is not ``/``)."""
    # psutil reads one process-wide /proc; point it at this host's every time.
    psutil.PROCFS_PATH = str(host.proc)
    try:
        storage = psutil.disk_usage(str(host.path("/"))).total
    except OSError:
        storage = 0
    machine = platform.machine()
    return HostFacts(
        hostname=socket.gethostname().lower(),
        cpus=psutil.cpu_count(logical=True) or 1,
        memory=psutil.virtual_memory().total,
        ephemeral_storage=storage,
        kernel=platform.release(),
        os_image=_os_image(host),
        architecture=_GOARCH.get(machine, machine.lower()),
        operating_system=platform.system().lower() or "linux",
        machine_id=_read_first_line(host.path("/etc/machine-id")),
        boot_id=_read_first_line(host.proc / "sys/kernel/random/boot_id"),
        internal_ips=_internal_ips(),
        cpu_topology=cpu_topology(host),
    )


def build_node(
    name: str,
    facts: HostFacts,
    *,
    heartbeat: datetime,
    ready_since: datetime,
    cgroup: CgroupInfo | None = None,
    device: Device | None = None,
    extended: ResourceList | None = None,
) -> Node:
    """The Node object for this agent's report (pure).

    ``extended`` holds resources the agent computes (``kubernetes.io/batch-cpu``, ``mid-*``),
    added to capacity and allocatable as Koordinator publishes them.
    """
    labels = {
        k.LABEL_HOSTNAME: name,
        LABEL_OS: facts.operating_system,
        LABEL_ARCH: facts.architecture,
    }
    labels.update(facts.labels)
    if cgroup is not None:
        labels[LABEL_CGROUP_VERSION] = str(cgroup.version)
        labels[LABEL_CGROUP_DRIVER] = str(cgroup.driver)
    if device is not None:
        for key in (k.LABEL_GPU_VENDOR, k.LABEL_GPU_MODEL, k.LABEL_GPU_DRIVER_VERSION):
            value = device.metadata.labels.get(key)
            if value:
                labels[key] = value
    capacity = ResourceList(
        {
            k.RESOURCE_CPU: facts.cpus * 1000,
            k.RESOURCE_MEMORY: facts.memory,
            k.RESOURCE_EPHEMERAL_STORAGE: facts.ephemeral_storage,
            k.RESOURCE_PODS: DEFAULT_MAX_PODS,
        }
    ) + accelerator_resources(device)
    if extended:
        capacity = capacity + extended
    ready = Condition(
        type="Ready",
        status="True",
        reason=READY_REASON,
        message=READY_MESSAGE,
        last_heartbeat_time=heartbeat,
        last_transition_time=ready_since,
    )
    addresses = [NodeAddress(type="InternalIP", address=ip) for ip in facts.internal_ips]
    addresses.append(NodeAddress(type="Hostname", address=facts.hostname))
    info = {
        "machineID": facts.machine_id,
        "bootID": facts.boot_id,
        "kernelVersion": facts.kernel,
        "osImage": facts.os_image,
        "operatingSystem": facts.operating_system,
        "architecture": facts.architecture,
    }
    annotations: dict[str, str] = {}
    if facts.cpu_topology:
        annotations[k.ANNOTATION_NODE_CPU_TOPOLOGY] = cpu_topology_annotation(facts.cpu_topology)
    return Node(
        metadata=ObjectMeta(name=name, labels=labels, annotations=annotations),
        status=NodeStatus(
            capacity=capacity,
            allocatable=capacity,
            conditions=(ready,),
            addresses=tuple(addresses),
            node_info={k: v for k, v in info.items() if v},
        ),
    )
