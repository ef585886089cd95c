"""Small builders for the Batch/Mid resource and eviction strategy tests.

Pods are real ``apis.core.Pod`` objects turned into ``PodState`` by the agent's own
``agent.states.pod_state``; usage and current cgroup values come from plain tables.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from agent.qos.framework import CpuInfo, NodeSnapshot, PodState
from agent.qos.settings import QoSSettings
from agent.states import pod_state
from apis import constants as k
from apis.core import (
    Container,
    ContainerState,
    ContainerStatus,
    Node,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from tests.agent.qos_builders import FakeView

GIB = 1 << 30
CGROUP = CgroupInfo(
    version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS, root=Path("/sys/fs/cgroup")
)
_uids = itertools.count(1)


def next_uid() -> str:
    """A fresh, valid pod UID."""
    return f"00000000-0000-4000-8000-{next(_uids):012d}"


def make_pod(
    name: str,
    *,
    qos: str | None = None,
    priority: int | None = None,
    priority_class: str | None = None,
    requests: Mapping[str, int] | None = None,
    limits: Mapping[str, int] | None = None,
    sidecar_requests: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    evictable: bool = False,
    policy: list[str] | str | None = None,
    eviction_priority: int | None = None,
    sub_priority: int | None = None,
    phase: str = "Running",
    namespace: str = "default",
    node: str = "n1",
    container_id: str | None = None,
    deleting: bool = False,
) -> Pod:
    """A one-container pod; amounts in canonical units (millicores, bytes)."""
    all_labels = dict(labels or {})
    if qos is not None:
        all_labels[k.LABEL_QOS_CLASS] = qos
    if priority_class is not None:
        all_labels[k.LABEL_PRIORITY_CLASS] = priority_class
    if evictable:
        all_labels[k.LABEL_EVICTION_ENABLED] = "true"
    if sub_priority is not None:
        all_labels[k.LABEL_PRIORITY] = str(sub_priority)
    all_annotations = dict(annotations or {})
    if policy is not None:
        all_annotations[k.ANNOTATION_EVICTION_POLICY] = (
            policy if isinstance(policy, str) else json.dumps(policy)
        )
    if eviction_priority is not None:
        all_annotations[k.ANNOTATION_EVICTION_PRIORITY] = str(eviction_priority)
    resources = ResourceRequirements(
        requests=ResourceList(requests or {}), limits=ResourceList(limits or {})
    )
    init: tuple[Container, ...] = ()
    if sidecar_requests is not None:
        init = (
            Container(
                name="sidecar",
                restart_policy="Always",
                resources=ResourceRequirements(requests=ResourceList(sidecar_requests)),
            ),
        )
    statuses: tuple[ContainerStatus, ...] = ()
    if container_id is not None:
        statuses = (
            ContainerStatus(
                name="main",
                container_id=f"containerd://{container_id}",
                state=ContainerState(running={}),
            ),
        )
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=next_uid(),
            labels=all_labels,
            annotations=all_annotations,
            deletion_timestamp=datetime(2026, 1, 1, tzinfo=UTC) if deleting else None,
        ),
        spec=PodSpec(
            containers=(Container(name="main", resources=resources),),
            init_containers=init,
            priority=priority,
            node_name=node,
        ),
        status=PodStatus(phase=phase, container_statuses=statuses),
    )


def state(pod: Pod) -> PodState:
    return pod_state(pod, CGROUP)


def make_node(
    *,
    cpu: int,
    memory: int,
    allocatable: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Node:
    """A node with ``cpu`` millicores and ``memory`` bytes of capacity."""
    capacity = ResourceList({k.RESOURCE_CPU: cpu, k.RESOURCE_MEMORY: memory})
    return Node(
        metadata=ObjectMeta(
            name="n1", labels=dict(labels or {}), annotations=dict(annotations or {})
        ),
        status=NodeStatus(
            capacity=capacity,
            allocatable=ResourceList(allocatable) if allocatable is not None else capacity,
        ),
    )


@dataclass
class FakeUsage:
    """``framework.Usage`` from tables (cpu in millicores, memory in bytes)."""

    interval: float = 1.0
    node_cpu_milli: float | None = None
    node_memory_bytes: int | None = None
    pods_cpu: dict[str, float] = field(default_factory=dict)
    pods_memory: dict[str, int] = field(default_factory=dict)
    #: cgroup -> cpu; ``cgroups_cpu_latest`` overrides it for windows of at most 2 intervals.
    cgroups_cpu: dict[str, float] = field(default_factory=dict)
    cgroups_cpu_latest: dict[str, float] = field(default_factory=dict)
    host_apps_cpu: dict[str, float] = field(default_factory=dict)
    #: Node samples available (``None``: as many as any window holds).
    sample_count: int | None = None

    def node_cpu(self, window: float) -> float | None:
        return self.node_cpu_milli

    def node_memory(self) -> int | None:
        return self.node_memory_bytes

    def pod_cpu(self, uid: str, window: float) -> float | None:
        return self.pods_cpu.get(uid)

    def pod_memory(self, uid: str) -> int | None:
        return self.pods_memory.get(uid)

    def cgroup_cpu(self, cgroup: str, window: float) -> float | None:
        if window <= 2 * self.interval and cgroup in self.cgroups_cpu_latest:
            return self.cgroups_cpu_latest[cgroup]
        return self.cgroups_cpu.get(cgroup)

    def throttled_ratio(self, cgroup: str, window: float) -> float | None:
        return None

    def host_app_cpu(self, name: str, window: float) -> float | None:
        return self.host_apps_cpu.get(name)

    def samples(self, window: float) -> int:
        if self.sample_count is not None:
            return self.sample_count
        return int(window / self.interval)


def snapshot(
    node: Node,
    pods: list[Pod] | tuple[Pod, ...],
    usage: FakeUsage,
    settings: QoSSettings,
    *,
    now: float = 1000.0,
    current: FakeView | None = None,
    cpus: int = 0,
) -> NodeSnapshot:
    return NodeSnapshot(
        now=now,
        node=node,
        cgroup=CGROUP,
        settings=settings,
        pods=tuple(state(p) for p in pods),
        cpus=tuple(CpuInfo(cpu=i, core=i, socket=0, node=0) for i in range(cpus)),
        usage=usage,
        current=current or FakeView(),
    )
