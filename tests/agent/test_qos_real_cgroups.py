"""QoS strategies on this machine's real cgroup v1, with real busy processes.

Each test builds a private kubepods sub-tree (``koordpy-test-<random>/kubepods``), puts
busy-looping processes in LS, BE and LSR pod containers, runs the agent's QoS loop over it and
checks what the kernel then does. Everything is removed afterwards, even on failure.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from agent.cgroups import detect, paths
from agent.cgroups.cpuset import CpuSet
from agent.config import AgentConfig, CgroupSection, QoSSection
from agent.node import build_node, read_host_facts
from agent.qos import service
from agent.qos.framework import NodeSnapshot
from agent.qos.loop import QoSLoop
from apis import constants as k
from apis.core import (
    Container,
    ContainerState,
    ContainerStatus,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from apis.meta import ObjectMeta
from apis.qos import KubeQoS
from apis.resources import ResourceList
from apis.slo import CPUBurstStrategy, NodeSLOSpec, ResourceThresholdStrategy
from tests.agent.realcgroups import KubepodsTree, kubepods_tree

pytestmark = pytest.mark.root

INTERVAL = 0.25
PERIOD = 100_000


@pytest.fixture
def tree() -> Iterator[KubepodsTree]:
    with kubepods_tree() as made:
        yield made


def _pod(
    name: str,
    *,
    qos_label: str,
    kube_qos: KubeQoS,
    requests: dict[str, int] | None = None,
    limits: dict[str, int] | None = None,
    annotations: dict[str, str] | None = None,
) -> Pod:
    uid = f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}"
    container_id = f"containerd://{secrets.token_hex(32)}"
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            uid=uid,
            labels={k.LABEL_QOS_CLASS: qos_label},
            annotations=annotations or {},
        ),
        spec=PodSpec(
            node_name="node-1",
            containers=(
                Container(
                    name="main",
                    image="busy",
                    resources=ResourceRequirements(
                        requests=ResourceList(requests or {}), limits=ResourceList(limits or {})
                    ),
                ),
            ),
        ),
        status=PodStatus(
            phase="Running",
            qos_class=str(kube_qos),
            container_statuses=(
                ContainerStatus(
                    name="main",
                    container_id=container_id,
                    ready=True,
                    state=ContainerState(running={"startedAt": "2026-01-01T00:00:00Z"}),
                ),
            ),
        ),
    )


def _container_dir(loop: QoSLoop, pod: Pod) -> str:
    info = loop.cgroup
    qos = KubeQoS(pod.status.qos_class)
    pod_dir = paths.pod_dir(info, qos, pod.metadata.uid)
    return paths.container_dir(info, pod_dir, pod.status.container_statuses[0].container_id)


def _loop(tree: KubepodsTree, pods: list[Pod], slo: NodeSLOSpec) -> QoSLoop:
    cfg = AgentConfig(
        cgroup=CgroupSection(root="/sys/fs/cgroup", kubepods_parent=tree.parent),
        qos=QoSSection(interval=INTERVAL),
    )
    info = detect.detect(cfg.host, cfg.cgroup)
    now = datetime.now(UTC)
    node = build_node(
        "node-1", read_host_facts(cfg.host), heartbeat=now, ready_since=now, cgroup=info
    )
    for tier in (KubeQoS.BURSTABLE, KubeQoS.BEST_EFFORT):
        tree.mkdir(paths.qos_dir(info, tier))
    return service.build_loop(
        cfg,
        node="node-1",
        cgroup=info,
        pods=lambda: tuple(pods),
        node_object=lambda: node,
        nodeslo=lambda: slo,
    )


async def _passes(loop: QoSLoop, count: int) -> None:
    for _ in range(count):
        await loop.run_once()
        await asyncio.sleep(INTERVAL)


def _expected_be_quota(snapshot: NodeSnapshot, current: int, ls_uid: str, be_uid: str) -> int:
    """The spec's cfsQuota rule (§2.3, §2.5) on the inputs of ``snapshot``."""
    usage, window = snapshot.usage, 2 * INTERVAL
    capacity = snapshot.node.status.capacity["cpu"]
    node_used = usage.node_cpu(window) or 0.0
    ls_used = usage.pod_cpu(ls_uid, window) or 0.0
    be_used = usage.pod_cpu(be_uid, window) or 0.0
    system = max(node_used - ls_used - be_used, 0.0)  # no node reservation here
    budget = capacity * 65 / 100 - ls_used - system
    # The budget is whole millicores (truncated), then 100 µs of quota per millicore.
    target = max(int(budget) * PERIOD // 1000, 2000)
    band = capacity // 1000 * PERIOD * 0.01
    step = capacity // 1000 * PERIOD * 0.1
    if current != -1 and abs(target - current) < band and target != 2000:
        return current
    if current != -1 and target - current > step:
        return int(current + step)
    return target


async def test_be_quota_converges_to_the_budget_and_bounds_be_cpu(tree: KubepodsTree) -> None:
    ls = _pod("web", qos_label="LS", kube_qos=KubeQoS.BURSTABLE, requests={"cpu": 500})
    be = _pod("batch", qos_label="BE", kube_qos=KubeQoS.BEST_EFFORT)
    slo = NodeSLOSpec(
        resource_used_threshold_with_be=ResourceThresholdStrategy(
            enable=True, cpu_suppress_threshold_percent=65, cpu_suppress_policy="cfsQuota"
        )
    )
    loop = _loop(tree, [ls, be], slo)
    tree.busy(_container_dir(loop, ls), 1)
    tree.busy(_container_dir(loop, be), 2)
    be_tier = paths.qos_dir(loop.cgroup, KubeQoS.BEST_EFFORT)
    assert tree.read("cpu", be_tier, "cpu.cfs_quota_us") == "-1"

    await _passes(loop, 12)
    current = int(tree.read("cpu", be_tier, "cpu.cfs_quota_us"))
    assert current != -1, "the BE tier got a quota"
    # One more pass: what it writes is exactly the rule applied to what it measured.
    snapshot = loop.snapshot()
    outcome = loop.decide(snapshot)
    expected = _expected_be_quota(snapshot, current, ls.metadata.uid, be.metadata.uid)
    loop.writer.apply(outcome.writes)
    written = int(tree.read("cpu", be_tier, "cpu.cfs_quota_us"))
    assert written == expected, (written, expected, current)
    # The BE processes want two whole CPUs; the kernel holds them to the quota.
    allowed = written / PERIOD * 1000
    measured = tree.measure_millicores(_container_dir(loop, be), 1.5)
    assert measured <= allowed * 1.3 + 50, (measured, allowed)
    assert measured < 1500, "BE is suppressed well below the two CPUs it asks for"


async def test_throttled_ls_quota_scales_up_then_down_under_overload(
    tree: KubepodsTree,
) -> None:
    ls = _pod(
        "web",
        qos_label="LS",
        kube_qos=KubeQoS.BURSTABLE,
        requests={"cpu": 250},
        limits={"cpu": 500},
    )
    slo = NodeSLOSpec(
        cpu_burst_strategy=CPUBurstStrategy(
            policy="cfsQuotaBurstOnly", cfs_quota_burst_percent=300, share_pool_threshold_percent=95
        )
    )
    loop = _loop(tree, [ls], slo)
    container = _container_dir(loop, ls)
    pod_dir = paths.pod_dir(loop.cgroup, KubeQoS.BURSTABLE, ls.metadata.uid)
    tree.mkdir(container)
    base = 500 * PERIOD // 1000
    for directory in (pod_dir, container):
        tree.write("cpu", directory, "cpu.cfs_quota_us", str(base))
    tree.busy(container, 2)  # wants 2 CPUs, limited to half of one: throttled every period

    await _passes(loop, 16)
    scaled = int(tree.read("cpu", container, "cpu.cfs_quota_us"))
    assert scaled > base, "a throttled LS container's quota scales up"
    assert scaled <= base * 3, "never above cfsQuotaBurstPercent of the base"
    assert int(tree.read("cpu", pod_dir, "cpu.cfs_quota_us")) >= scaled

    # Overload the share pool: busy work outside the pod (system usage stays in the pool).
    tree.busy(f"{tree.prefix}/noise", 2)
    await _passes(loop, 20)
    shrunk = int(tree.read("cpu", container, "cpu.cfs_quota_us"))
    assert shrunk < scaled, "under overload the quota comes back down"
    assert shrunk >= base, "never below the base quota"


async def test_lsr_pod_gets_exclusive_cpus_and_the_ls_pool_shrinks(tree: KubepodsTree) -> None:
    cpus = sorted(CpuSet.parse(tree.read("cpuset", "", "cpuset.cpus")))
    if len(cpus) < 2:
        pytest.skip(reason="needs at least two CPUs to bind one exclusively")
    exclusive = str(cpus[-1])
    lsr = _pod(
        "inference",
        qos_label="LSR",
        kube_qos=KubeQoS.GUARANTEED,
        requests={"cpu": 1000, "memory": 64 << 20},
        limits={"cpu": 1000, "memory": 64 << 20},
        annotations={k.ANNOTATION_RESOURCE_STATUS: f'{{"cpuset": "{exclusive}"}}'},
    )
    ls = _pod("web", qos_label="LS", kube_qos=KubeQoS.BURSTABLE, requests={"cpu": 250})
    loop = _loop(tree, [lsr, ls], NodeSLOSpec())
    lsr_container, ls_container = _container_dir(loop, lsr), _container_dir(loop, ls)
    tree.busy(lsr_container, 1)
    tree.busy(ls_container, 1)
    everything = tree.read("cpuset", ls_container, "cpuset.cpus")

    await _passes(loop, 3)
    assert tree.read("cpuset", lsr_container, "cpuset.cpus") == exclusive
    ls_pool = tree.read("cpuset", ls_container, "cpuset.cpus")
    assert ls_pool != everything
    assert cpus[-1] not in CpuSet.parse(ls_pool)
    # The bound pod's quota is lifted so the bound CPUs are never throttled.
    assert tree.read("cpu", lsr_container, "cpu.cfs_quota_us") == "-1"
