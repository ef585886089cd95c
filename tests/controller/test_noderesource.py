"""koord-manager's noderesource duty: Batch, Mid and device resources written into Nodes.

The calculation (:mod:`controller.slo.calculator`) is checked against the node agent's, case by
case: the agent's tests of agent-spec §5 (``tests/agent/test_batch_resources.py``) give the
node, the pods and the expected amounts; here the same usage arrives as a NodeMetric, as the
agent reports it. Then the write rule (:func:`~controller.slo.noderesource.plan_node`) and the
loop over a store: only the owned resources and labels of a Node change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from agent.qos.settings import ColocationSettings
from apis import constants as k
from apis.core import ConfigMap, Node, NodeStatus, Pod
from apis.meta import Condition, ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo, DeviceSpec
from apis.slo import (
    ColocationStrategy,
    HostApplicationMetricInfo,
    NodeMetric,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
)
from controller.loops import LoopContext
from controller.slo import calculator
from controller.slo.config import default_colocation, merged
from controller.slo.loop import CONFIG_NAME, CONFIG_NAMESPACE
from controller.slo.noderesource import NodeResourceController, plan_node
from controller.store.sqlite import Store
from tests.agent import test_batch_resources as agent_cases
from tests.agent.qos_fixtures_evict import GIB, make_node, make_pod

CPU, MEMORY = k.RESOURCE_CPU, k.RESOURCE_MEMORY
BATCH_CPU, BATCH_MEMORY = k.RESOURCE_BATCH_CPU, k.RESOURCE_BATCH_MEMORY
MID_CPU, MID_MEMORY = k.RESOURCE_MID_CPU, k.RESOURCE_MID_MEMORY
BATCH_MID = (BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY)
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def strategy_of(settings: ColocationSettings) -> ColocationStrategy:
    """The ColocationStrategy of the agent's ``[colocation]`` settings, over the defaults."""
    fields = msgspec.to_builtins(settings)
    if not fields.get("mid_reclaim_mode"):
        fields.pop("mid_reclaim_mode", None)
    wire = msgspec.to_builtins(ColocationStrategy(**fields))
    return merged(default_colocation(), wire, ColocationStrategy)


def usage(cpu: int, memory: int) -> ResourceMap:
    return ResourceMap(resources=ResourceList({CPU: cpu, MEMORY: memory}))


def pod_metric(pod: Pod, cpu: int, memory: int, priority: str = "") -> PodMetricInfo:
    return PodMetricInfo(
        name=pod.metadata.name,
        namespace=pod.metadata.namespace,
        pod_usage=usage(cpu, memory),
        priority=priority,
    )


def agent_metric(
    *,
    at: datetime | None = T0,
    pods: Mapping[str, Pod] = agent_cases.PODS,
    system: tuple[int, int] = (agent_cases.SYS_CPU, agent_cases.SYS_MEM),
    extra: tuple[PodMetricInfo, ...] = (),
    host_apps: tuple[HostApplicationMetricInfo, ...] = (),
    reclaimable: tuple[int, int] | None = None,
) -> NodeMetric:
    """The NodeMetric the agent reports for the agent tests' node (usage 7 cores / 40 GiB)."""
    measured = {
        "ls": (1500, 3 * GIB),
        "lse": (1000, 6 * GIB),
        "mid": (500, GIB),
        "be": (2000, 2 * GIB),
    }
    return NodeMetric(
        metadata=ObjectMeta(name="n1"),
        status=NodeMetricStatus(
            update_time=at,
            node_metric=NodeMetricInfo(
                node_usage=usage(agent_cases.NODE_CPU, agent_cases.NODE_MEM),
                system_usage=usage(*system),
            ),
            pods_metric=tuple(pod_metric(pods[n], *measured[n]) for n in measured) + extra,
            host_application_metric=host_apps,
            prod_reclaimable_metric=(
                ReclaimableMetric(resource=usage(*reclaimable)) if reclaimable else None
            ),
        ),
    )


def agent_node(
    labels: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
) -> Node:
    return make_node(
        cpu=agent_cases.CAP_CPU,
        memory=agent_cases.CAP_MEM,
        allocatable={
            CPU: agent_cases.CAP_CPU - agent_cases.KUBELET_CPU,
            MEMORY: agent_cases.CAP_MEM - agent_cases.KUBELET_MEM,
        },
        labels=labels,
        annotations=annotations,
    )


def computed(
    strategy: ColocationStrategy,
    *,
    node: Node | None = None,
    metric: NodeMetric | None = None,
    pods: Mapping[str, Pod] = agent_cases.PODS,
) -> dict[str, int]:
    found = calculator.batch_mid(
        node or agent_node(), tuple(pods.values()), metric or agent_metric(), strategy, T0
    )
    assert found.resources is not None, found.reset
    return dict(found.resources)


# --- the calculation: the agent's cases ------------------------------------------------------


@pytest.mark.parametrize(
    ("colocation", "labels", "annotations", "cpu", "memory"), agent_cases.BATCH_CASES
)
def test_batch_is_what_the_agent_computes(
    colocation: ColocationSettings,
    labels: dict[str, str],
    annotations: dict[str, str],
    cpu: int,
    memory: int,
) -> None:
    mine = computed(strategy_of(colocation), node=agent_node(labels, annotations))
    assert (mine[BATCH_CPU], mine[BATCH_MEMORY]) == (max(cpu, 0), memory)
    theirs = agent_cases.plan(colocation, labels=labels, annotations=annotations)
    assert {name: mine[name] for name in BATCH_MID} == dict(theirs)


@pytest.mark.parametrize(("colocation", "labels", "cpu", "memory"), agent_cases.MID_CASES)
def test_mid_is_what_the_agent_computes(
    colocation: ColocationSettings, labels: dict[str, str], cpu: int, memory: int
) -> None:
    mine = computed(strategy_of(colocation), node=agent_node(labels))
    assert (mine[MID_CPU], mine[MID_MEMORY]) == (cpu, memory)
    assert {name: mine[name] for name in BATCH_MID} == dict(
        agent_cases.plan(colocation, labels=labels)
    )


ON = strategy_of(ColocationSettings(enable=True))


def test_dynamic_mid_takes_the_prod_reclaimable_within_the_unused_capacity() -> None:
    strategy = msgspec.structs.replace(ON, mid_unallocated_percent=50)
    unallocated_cpu = agent_cases.CAP_CPU - agent_cases.SYS_CPU - agent_cases.PROD_REQ_CPU
    # 3 cores reclaimable of 13 unused; memory: 80 GiB reclaimable, only 60 unused
    mine = computed(strategy, metric=agent_metric(reclaimable=(3000, 80 * GIB)))
    assert mine[MID_CPU] == 3000 + unallocated_cpu * 50 // 100
    unallocated_mem = agent_cases.CAP_MEM - agent_cases.SYS_MEM - agent_cases.PROD_REQ_MEM
    unused_mem = agent_cases.CAP_MEM - agent_cases.NODE_MEM
    assert mine[MID_MEMORY] == unused_mem + unallocated_mem * 50 // 100


def test_metrics_of_pods_gone_from_the_node_count_as_high_priority_use() -> None:
    gone = make_pod("gone", qos="LS")
    finished = make_pod("finished-be", qos="BE")
    extra = (
        pod_metric(gone, 700, GIB, priority="koord-prod"),
        pod_metric(finished, 900, GIB, priority="koord-batch"),  # batch: not high priority
    )
    mine = computed(ON, metric=agent_metric(extra=extra))
    base = computed(ON)
    assert base[BATCH_CPU] - mine[BATCH_CPU] == 700
    assert base[BATCH_MEMORY] - mine[BATCH_MEMORY] == GIB


def test_host_applications_above_the_band_add_to_the_system_usage() -> None:
    apps = (
        HostApplicationMetricInfo(name="sshd", usage=usage(800, GIB), priority="koord-prod"),
        HostApplicationMetricInfo(name="logs", usage=usage(600, GIB), priority="koord-batch"),
    )
    mine = computed(ON, metric=agent_metric(host_apps=apps))
    base = computed(ON)
    # system 2000m + 800m (prod only) is above the kubelet's 1000m: all of it counts
    assert base[BATCH_CPU] - mine[BATCH_CPU] == 800
    assert base[BATCH_MEMORY] - mine[BATCH_MEMORY] == GIB


def test_only_running_and_pending_pods_count() -> None:
    pods = dict(agent_cases.PODS)
    pods["waiting"] = make_pod("waiting", qos="LS", requests={CPU: 1000}, phase="Pending")
    pods["failed"] = make_pod("failed", qos="LS", requests={CPU: 4000}, phase="Failed")
    mine = computed(ON, pods=pods)
    # the pending pod has no metric: its request counts; the failed one's does not
    assert computed(ON)[BATCH_CPU] - mine[BATCH_CPU] == 1000


def test_the_reservation_annotation_with_reserved_cpus() -> None:
    node = agent_node(
        annotations={
            k.ANNOTATION_NODE_RESERVATION: json.dumps(
                {"resources": {"cpu": "1", "memory": "30Gi"}, "reservedCPUs": "0-3"}
            )
        }
    )
    reserved, problem = calculator.node_reserved(node)
    assert problem is None
    assert dict(reserved) == {CPU: 4000, MEMORY: 30 * GIB}  # reservedCPUs decide the cpu
    bad = agent_node(annotations={k.ANNOTATION_NODE_RESERVATION: "{not json"})
    reserved, problem = calculator.node_reserved(bad)
    assert dict(reserved) == {CPU: agent_cases.KUBELET_CPU, MEMORY: agent_cases.KUBELET_MEM}
    assert problem is not None
    assert k.ANNOTATION_NODE_RESERVATION in problem


def test_bad_labels_are_reported_and_ignored() -> None:
    node = agent_node({k.LABEL_NODE_CPU_RECLAIM_RATIO: "lots"})
    found = calculator.batch_mid(node, tuple(agent_cases.PODS.values()), agent_metric(), ON, T0)
    assert found.resources is not None
    assert found.resources[BATCH_CPU] == computed(ON)[BATCH_CPU]
    assert found.ignored == (
        f"label {k.LABEL_NODE_CPU_RECLAIM_RATIO}='lots' is not a number; ignored",
    )


@pytest.mark.parametrize(
    ("strategy", "metric", "reason"),
    [
        pytest.param(
            strategy_of(ColocationSettings()), agent_metric(), calculator.DISABLED, id="disabled"
        ),
        pytest.param(ON, None, calculator.NO_METRIC, id="no-nodemetric"),
        pytest.param(ON, agent_metric(at=None), calculator.NO_UPDATE_TIME, id="no-update-time"),
        pytest.param(
            ON, agent_metric(at=T0 - timedelta(minutes=15, seconds=1)), calculator.STALE, id="stale"
        ),
    ],
)
def test_resources_are_reset(
    strategy: ColocationStrategy, metric: NodeMetric | None, reason: str
) -> None:
    found = calculator.batch_mid(
        agent_node(), tuple(agent_cases.PODS.values()), metric, strategy, T0
    )
    assert (found.resources, found.reset) == (None, reason)


def test_a_report_exactly_degrade_time_old_still_counts() -> None:
    metric = agent_metric(at=T0 - timedelta(minutes=15))
    assert calculator.batch_mid(agent_node(), (), metric, ON, T0).resources is not None


# --- device resources ---------------------------------------------------------------------------


def gpu_device(healthy: int = 2, broken: int = 0, vendor: str = "nvidia") -> Device:
    def card(minor: int, health: bool) -> DeviceInfo:
        return DeviceInfo(
            type="gpu",
            minor=minor,
            health=health,
            resources=ResourceList(
                {
                    k.RESOURCE_GPU_CORE: 100,
                    k.RESOURCE_GPU_MEMORY: 80 * GIB,
                    k.RESOURCE_GPU_MEMORY_RATIO: 100,
                }
            ),
        )

    cards = [card(i, True) for i in range(healthy)]
    cards += [card(healthy + i, False) for i in range(broken)]
    return Device(
        metadata=ObjectMeta(
            name="n1",
            labels={
                k.LABEL_GPU_VENDOR: vendor,
                k.LABEL_GPU_MODEL: "H100-SXM5-80GB",
                k.LABEL_GPU_DRIVER_VERSION: "550.54.15",
                k.LABEL_GPU_PARTITION_POLICY: "Honor",
            },
        ),
        spec=DeviceSpec(devices=tuple(cards)),
    )


def test_device_resources_sum_the_healthy_gpus_koord_manager_writes() -> None:
    found = calculator.device_resources(gpu_device(healthy=3, broken=1))
    assert dict(found) == {
        k.RESOURCE_GPU: 300,
        k.RESOURCE_GPU_CORE: 300,
        k.RESOURCE_GPU_MEMORY: 3 * 80 * GIB,
        k.RESOURCE_GPU_MEMORY_RATIO: 300,
        k.RESOURCE_GPU_SHARED: 300,
    }
    # the vendor's device count is its device plugin's (through the kubelet), not written here
    assert k.RESOURCE_NVIDIA_GPU not in found
    assert calculator.device_resources(None) == ResourceList()
    assert calculator.device_resources(gpu_device(healthy=0, broken=2)) == ResourceList()


def kubelet_node(**labels: str) -> Node:
    """A Node as the kubelet reports it, with one extended resource of a device plugin."""
    resources = ResourceList(
        {CPU: 96_000, MEMORY: 768 * GIB, "pods": 110, k.RESOURCE_NVIDIA_GPU: 2}
    )
    return Node(
        metadata=ObjectMeta(name="n1", labels={"kubernetes.io/hostname": "n1", **labels}),
        status=NodeStatus(
            capacity=resources,
            allocatable=resources - {CPU: 2000, MEMORY: 8 * GIB},
            conditions=(Condition(type="Ready", status="True"),),
        ),
    )


def test_only_owned_resources_and_the_gpu_labels_change() -> None:
    node = kubelet_node()
    device = gpu_device()
    batch = {BATCH_CPU: 5000, BATCH_MEMORY: GIB, MID_CPU: 0, MID_MEMORY: 0}
    written = calculator.with_resources(node, batch, calculator.device_resources(device), device)
    for resources, before in (
        (written.status.capacity, node.status.capacity),
        (written.status.allocatable, node.status.allocatable),
    ):
        assert {n: v for n, v in resources.items() if n not in calculator.OWNED_RESOURCES} == dict(
            before
        )
        assert resources[BATCH_CPU] == 5000
        assert resources[k.RESOURCE_GPU_CORE] == 200
    assert written.status.conditions == node.status.conditions
    assert written.metadata.labels == {
        **node.metadata.labels,
        k.LABEL_GPU_VENDOR: "nvidia",
        k.LABEL_GPU_MODEL: "H100-SXM5-80GB",
        k.LABEL_GPU_DRIVER_VERSION: "550.54.15",
    }
    # removing: what is owned goes, the rest stays; nothing to change is the same object
    cleared = calculator.with_resources(written, {}, {}, None)
    assert cleared.status.capacity == node.status.capacity
    assert cleared.status.allocatable == node.status.allocatable
    assert calculator.with_resources(cleared, {}, {}, None) is cleared


# --- when to write ------------------------------------------------------------------------------


def placed(amounts: Mapping[str, int]) -> Node:
    """The agent tests' node carrying ``amounts`` as its Batch/Mid resources."""
    node = agent_node()
    return calculator.with_resources(node, amounts, {}, None)


FRESH = computed(ON)


def test_new_amounts_are_written_at_once_by_a_loop_that_has_not_written_them() -> None:
    plan = plan_node(
        agent_node(),
        tuple(agent_cases.PODS.values()),
        agent_metric(),
        None,
        ON,
        now=T0,
        written_at=None,
    )
    assert plan.node is not None
    assert plan.batch_mid_changed
    assert {n: plan.node.status.allocatable[n] for n in BATCH_MID} == FRESH
    # the next look, unless something changes: when the NodeMetric goes stale
    assert plan.until == T0 + timedelta(minutes=15)


def test_a_small_move_waits_for_the_update_time_threshold() -> None:
    near = {**FRESH, BATCH_CPU: FRESH[BATCH_CPU] + 100}  # 3100 -> 3000: under 10 %
    node = placed(near)
    pods = tuple(agent_cases.PODS.values())
    written = T0 - timedelta(seconds=100)
    held = plan_node(node, pods, agent_metric(), None, ON, now=T0, written_at=written)
    assert held.node is None
    assert not held.batch_mid_changed
    assert held.until == written + timedelta(seconds=300)
    due = plan_node(
        node, pods, agent_metric(), None, ON, now=T0 + timedelta(seconds=200), written_at=written
    )
    assert due.node is not None
    assert due.batch_mid_changed
    far = placed({**FRESH, BATCH_CPU: FRESH[BATCH_CPU] * 2})
    moved = plan_node(far, pods, agent_metric(), None, ON, now=T0, written_at=written)
    assert moved.node is not None
    assert moved.node.status.capacity[BATCH_CPU] == FRESH[BATCH_CPU]


def test_a_reset_removes_the_resources_at_once() -> None:
    node = placed(FRESH)
    stale = agent_metric(at=T0 - timedelta(hours=1))
    plan = plan_node(node, (), stale, None, ON, now=T0, written_at=T0)
    assert plan.node is not None
    assert plan.batch_mid_changed
    assert not set(BATCH_MID) & set(plan.node.status.capacity)
    assert not set(BATCH_MID) & set(plan.node.status.allocatable)
    assert plan_node(agent_node(), (), stale, None, ON, now=T0, written_at=None).node is None


# --- the loop over a store ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened


def colocation_config(**fields: object) -> ConfigMap:
    return ConfigMap(
        metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
        data={"colocation-config": json.dumps(fields)},
    )


def stored_node(store: Store) -> Node:
    node = store.get(store.registry.for_type(Node), "n1")
    assert isinstance(node, Node)
    return node


def report(store: Store, at: datetime, cpu: int = 20_000, memory: int = 100 * GIB) -> None:
    """The agent's report: a NodeMetric of a node using ``cpu`` and ``memory`` in all, no pod."""
    store.apply(
        NodeMetric(
            metadata=ObjectMeta(name="n1"),
            status=NodeMetricStatus(
                update_time=at,
                node_metric=NodeMetricInfo(
                    node_usage=usage(cpu, memory), system_usage=usage(cpu, memory)
                ),
            ),
        )
    )


def settle(loop: NodeResourceController, ctx: LoopContext) -> float | None:
    """Run the loop until a pass writes nothing (a Node's labels go in a pass of their own,
    before its resources); what the last pass asked for."""
    for _ in range(4):
        before = ctx.store.revision
        wait = loop.reconcile(ctx)
        if ctx.store.revision == before:
            return wait
    raise AssertionError("the loop keeps writing")


def test_the_labels_go_first_then_the_resources(store: Store, clock: Clock) -> None:
    store.create(kubelet_node())
    store.create(gpu_device())
    loop = NodeResourceController()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    node = stored_node(store)
    assert node.metadata.labels[k.LABEL_GPU_VENDOR] == "nvidia"
    assert node.status == kubelet_node().status
    loop.reconcile(ctx)
    assert stored_node(store).status.capacity[k.RESOURCE_GPU_CORE] == 200
    revision = store.revision
    assert loop.reconcile(ctx) is None  # colocation off (no ConfigMap): no time to wake at
    assert store.revision == revision


def test_the_loop_writes_batch_and_device_resources_and_removes_them_when_stale(
    store: Store, clock: Clock
) -> None:
    store.create(kubelet_node())
    store.create(gpu_device())
    store.create(colocation_config(enable=True))
    report(store, T0, cpu=10_000, memory=768 * GIB)
    loop = NodeResourceController()
    ctx = LoopContext(store=store, now=clock)
    wait = settle(loop, ctx)
    node = stored_node(store)
    # 96 cores: safety 40 % = 38.4, system 10 > kubelet's 2: 96 - 38.4 - 10 = 47.6 cores
    assert node.status.capacity[BATCH_CPU] == node.status.allocatable[BATCH_CPU] == 47_600
    assert node.status.allocatable[BATCH_MEMORY] == 0  # memory all used
    assert node.status.allocatable[k.RESOURCE_GPU_CORE] == 200
    assert node.metadata.labels[k.LABEL_GPU_MODEL] == "H100-SXM5-80GB"
    kubelet = kubelet_node()
    assert node.status.allocatable[CPU] == kubelet.status.allocatable[CPU]
    assert node.status.capacity[k.RESOURCE_NVIDIA_GPU] == 2
    assert node.status.conditions == kubelet.status.conditions
    # nothing more to do until the report goes stale (15 minutes)
    assert wait == pytest.approx(15 * 60)
    version = node.metadata.resource_version
    assert settle(loop, ctx) == pytest.approx(15 * 60)
    assert stored_node(store).metadata.resource_version == version
    clock.now = T0 + timedelta(minutes=15, seconds=1)
    assert settle(loop, ctx) is None
    node = stored_node(store)
    assert not set(BATCH_MID) & set(node.status.allocatable)
    assert node.status.allocatable[k.RESOURCE_GPU_CORE] == 200  # the Device's stay
    # a fresh report brings them back
    report(store, clock.now, cpu=10_000, memory=768 * GIB)
    settle(loop, ctx)
    assert stored_node(store).status.allocatable[BATCH_CPU] == 47_600


def test_a_device_gone_or_broken_takes_its_resources_with_it(store: Store, clock: Clock) -> None:
    store.create(kubelet_node())
    store.create(gpu_device())
    loop = NodeResourceController()
    ctx = LoopContext(store=store, now=clock)
    settle(loop, ctx)
    assert stored_node(store).status.capacity[k.RESOURCE_GPU_MEMORY] == 160 * GIB
    store.apply(gpu_device(healthy=1, broken=1))
    settle(loop, ctx)
    assert stored_node(store).status.capacity[k.RESOURCE_GPU_MEMORY] == 80 * GIB
    store.delete(store.registry.for_type(Device), "n1")
    settle(loop, ctx)
    node = stored_node(store)
    assert not set(calculator.OWNED_RESOURCES) & set(node.status.capacity)
    assert node.status.capacity == kubelet_node().status.capacity


def test_colocation_switched_off_removes_batch_and_mid(store: Store, clock: Clock) -> None:
    store.create(kubelet_node())
    store.create(colocation_config(enable=True))
    report(store, T0, cpu=10_000)
    loop = NodeResourceController()
    ctx = LoopContext(store=store, now=clock)
    settle(loop, ctx)
    assert BATCH_CPU in stored_node(store).status.allocatable
    store.apply(colocation_config(enable=False))
    settle(loop, ctx)
    assert not set(BATCH_MID) & set(stored_node(store).status.allocatable)
    # without the ConfigMap: Koordinator's defaults, colocation off
    store.apply(colocation_config(enable=True))
    settle(loop, ctx)
    store.delete(store.registry.for_type(ConfigMap), CONFIG_NAME, CONFIG_NAMESPACE)
    settle(loop, ctx)
    assert not set(BATCH_MID) & set(stored_node(store).status.allocatable)
