"""Small builders for QoS strategy tests: pods, nodes, CPU topologies, usage and cgroup views.

Everything is in memory; a snapshot built here is what the QoS loop would hand a strategy on a
cgroupfs-driven v1 node (``version=2`` for a unified host). Pod directories follow the kube QoS
tier: ``kubepods/pod<uid>``, ``kubepods/burstable/pod<uid>``, ``kubepods/besteffort/pod<uid>``;
container ``i`` of pod ``web`` is ``<pod dir>/web-c<i>``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.cgroups.cpuset import CpuSet
from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from agent.cgroups.resources import Resource
from agent.qos.framework import ContainerState, CpuInfo, NodeSnapshot, PodState, Value
from agent.qos.settings import DEFAULT_GATES, BurstSettings, QoSSettings, SuppressSettings
from apis import constants as k
from apis.core import (
    Container,
    Node,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
    pod_requests,
)
from apis.meta import ObjectMeta
from apis.qos import KubeQoS, koord_qos, priority_class, priority_value
from apis.resources import ResourceList

GiB = 1 << 30
KUBEPODS = "kubepods"
BE_DIR = f"{KUBEPODS}/besteffort"
BURSTABLE_DIR = f"{KUBEPODS}/burstable"


# --- topology --------------------------------------------------------------------------------


def make_cpus(
    *, sockets: int = 2, cores_per_socket: int = 4, threads: int = 2
) -> tuple[CpuInfo, ...]:
    """Linux-style numbering: CPU ``t*N + core`` is thread ``t`` of core ``core`` (N cores in
    all); each socket is one NUMA node."""
    cores = sockets * cores_per_socket
    cpus = [
        CpuInfo(
            cpu=t * cores + core,
            core=core,
            socket=core // cores_per_socket,
            node=core // cores_per_socket,
        )
        for t in range(threads)
        for core in range(cores)
    ]
    return tuple(sorted(cpus, key=lambda c: c.cpu))


def core_cpus(cpus: Iterable[CpuInfo], *cores: int) -> CpuSet:
    """The logical CPUs (hyper-threads) of the given cores."""
    return CpuSet(c.cpu for c in cpus if c.core in cores)


def node_cpus(cpus: Iterable[CpuInfo], node: int) -> CpuSet:
    return CpuSet(c.cpu for c in cpus if c.node == node)


# --- objects ---------------------------------------------------------------------------------


def make_node(
    cores: int = 16,
    *,
    allocatable_cores: float | None = None,
    annotations: Mapping[str, Any] | None = None,
    name: str = "node-a",
) -> Node:
    """A node with ``cores`` CPUs of capacity; annotation values that are not strings are
    written as JSON."""
    alloc = cores if allocatable_cores is None else allocatable_cores
    texts = {
        key: value if isinstance(value, str) else json.dumps(value)
        for key, value in (annotations or {}).items()
    }
    return Node(
        metadata=ObjectMeta(name=name, annotations=texts),
        status=NodeStatus(
            capacity=ResourceList({"cpu": cores * 1000, "memory": 64 * GiB}),
            allocatable=ResourceList({"cpu": int(alloc * 1000), "memory": 60 * GiB}),
        ),
    )


def _tier_dir(kube: KubeQoS) -> str:
    return {
        KubeQoS.GUARANTEED: KUBEPODS,
        KubeQoS.BURSTABLE: BURSTABLE_DIR,
        KubeQoS.BEST_EFFORT: BE_DIR,
    }[kube]


def make_pod(
    name: str,
    *,
    qos: str | None = None,
    kube: KubeQoS | None = None,
    cpu_limit: int | None = None,
    cpu_request: int | None = None,
    containers: int = 1,
    cpuset: str | None = None,
    numa: Mapping[int, Mapping[str, str]] | None = None,
    annotations: Mapping[str, Any] | None = None,
    phase: str = "Running",
    running: bool = True,
    container_ids: bool = True,
) -> PodState:
    """A pod of ``containers`` identical containers (cpu in millicores per container).

    The kube QoS defaults to Guaranteed when request == limit, Burstable when either is set,
    else BestEffort; ``qos`` sets the ``koordinator.sh/qosClass`` label. ``cpuset``/``numa``
    make the scheduler's resource-status annotation (numa: node -> resources).
    """
    uid = f"uid-{name}"
    if kube is None:
        if cpu_limit is not None and cpu_request in (None, cpu_limit):
            kube = KubeQoS.GUARANTEED
        elif cpu_limit is not None or cpu_request is not None:
            kube = KubeQoS.BURSTABLE
        else:
            kube = KubeQoS.BEST_EFFORT
    requests: dict[str, int] = {}
    limits: dict[str, int] = {}
    if cpu_request is not None or cpu_limit is not None:
        requests["cpu"] = cpu_request if cpu_request is not None else cpu_limit or 0
        requests["memory"] = GiB
    if cpu_limit is not None:
        limits["cpu"] = cpu_limit
        limits["memory"] = GiB
    texts = {
        key: value if isinstance(value, str) else json.dumps(value)
        for key, value in (annotations or {}).items()
    }
    if cpuset is not None or numa is not None:
        status: dict[str, Any] = {}
        if cpuset is not None:
            status["cpuset"] = cpuset
        if numa is not None:
            status["numaNodeResources"] = [
                {"node": node, "resources": dict(res)} for node, res in numa.items()
            ]
        texts[k.ANNOTATION_RESOURCE_STATUS] = json.dumps(status)
    labels = {k.LABEL_QOS_CLASS: qos} if qos is not None else {}
    specs = tuple(
        Container(
            name=f"{name}-c{i}",
            resources=ResourceRequirements(
                requests=ResourceList(requests), limits=ResourceList(limits)
            ),
        )
        for i in range(containers)
    )
    pod = Pod(
        metadata=ObjectMeta(
            name=name, namespace="default", uid=uid, labels=labels, annotations=texts
        ),
        spec=PodSpec(containers=specs),
        status=PodStatus(phase=phase, qos_class=str(kube)),
    )
    pod_dir = f"{_tier_dir(kube)}/pod{uid}"
    states = tuple(
        ContainerState(
            name=spec.name,
            container_id=f"containerd://{spec.name}" if container_ids else "",
            cgroup=f"{pod_dir}/{spec.name}" if container_ids else None,
            requests=ResourceList(requests),
            limits=ResourceList(limits),
            running=running,
        )
        for spec in specs
    )
    return PodState(
        pod=pod,
        uid=uid,
        kube_qos=kube,
        qos=koord_qos(pod),
        priority_class=priority_class(pod),
        priority=priority_value(pod),
        cgroup=pod_dir,
        containers=states,
        cpuset=CpuSet.parse(cpuset) if cpuset else None,
        phase=phase,
        requests=pod_requests(pod),
    )


def container_dirs(pod: PodState) -> list[str]:
    return [c.cgroup for c in pod.containers if c.cgroup is not None]


# --- usage and cgroup values -----------------------------------------------------------------


@dataclass
class FakeUsage:
    """Fixed usage figures (millicores); every window gets the same numbers."""

    node: float | None = None
    pods: dict[str, float] = field(default_factory=dict)
    cgroups: dict[str, float] = field(default_factory=dict)
    throttled: dict[str, float] = field(default_factory=dict)
    host_apps: dict[str, float] = field(default_factory=dict)
    memory: int | None = None
    interval: float = 1.0
    #: Windows the strategies asked for node CPU, in order.
    node_windows: list[float] = field(default_factory=list)

    def node_cpu(self, window: float) -> float | None:
        self.node_windows.append(window)
        return self.node

    def node_memory(self) -> int | None:
        return self.memory

    def pod_cpu(self, uid: str, window: float) -> float | None:
        return self.pods.get(uid)

    def pod_memory(self, uid: str) -> int | None:
        return None

    def cgroup_cpu(self, cgroup: str, window: float) -> float | None:
        return self.cgroups.get(cgroup)

    def throttled_ratio(self, cgroup: str, window: float) -> float | None:
        return self.throttled.get(cgroup)

    def host_app_cpu(self, name: str, window: float) -> float | None:
        return self.host_apps.get(name)

    def samples(self, window: float) -> int:
        return int(window / self.interval)


@dataclass
class FakeView:
    """Current cgroup values, by (directory, resource)."""

    values: dict[tuple[str, Resource], Value] = field(default_factory=dict)

    def get(self, cgroup: str, resource: Resource) -> Value | None:
        return self.values.get((cgroup, resource))

    def set(self, cgroup: str, resource: Resource, value: Value) -> FakeView:
        self.values[(cgroup, resource)] = value
        return self


# --- settings and snapshots ------------------------------------------------------------------


def make_settings(
    *,
    suppress: SuppressSettings | None = None,
    burst: BurstSettings | None = None,
    gates: Mapping[str, bool] | None = None,
    host_applications: Sequence[object] = (),
    disable_unset_cpu_quota: bool = False,
) -> QoSSettings:
    return QoSSettings(
        suppress=suppress or SuppressSettings(),
        burst=burst or BurstSettings(),
        gates={**DEFAULT_GATES, **(gates or {})},
        host_applications=tuple(host_applications),
        disable_unset_cpu_quota=disable_unset_cpu_quota,
    )


def make_snapshot(
    *,
    pods: Sequence[PodState] = (),
    node: Node | None = None,
    cpus: tuple[CpuInfo, ...] | None = None,
    usage: FakeUsage | None = None,
    current: FakeView | None = None,
    settings: QoSSettings | None = None,
    now: float = 0.0,
    version: int = 1,
) -> NodeSnapshot:
    info = CgroupInfo(
        version=CgroupVersion.V2 if version == 2 else CgroupVersion.V1,
        driver=CgroupDriver.CGROUPFS,
        root=Path("/sys/fs/cgroup"),
    )
    return NodeSnapshot(
        now=now,
        node=node or make_node(),
        cgroup=info,
        settings=settings or make_settings(),
        pods=tuple(pods),
        cpus=make_cpus() if cpus is None else cpus,
        usage=usage or FakeUsage(),
        current=current or FakeView(),
    )


def at(snapshot: NodeSnapshot, now: float, **changes: Any) -> NodeSnapshot:
    """The same snapshot at another time (and with other fields replaced)."""
    return dataclasses.replace(snapshot, now=now, **changes)
