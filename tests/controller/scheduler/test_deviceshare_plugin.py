"""The DeviceShare plugin on the framework: PreFilter, vectorized Filter, Score, Reserve,
PreBind, its cluster state, and the scheduler loop writing ``device-allocated``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.codec import decode_documents
from apis.core import ConfigMap, Container, Node, Pod, PodSpec, ResourceRequirements
from apis.meta import Object, ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo
from controller.loops import LoopContext
from controller.scheduler import framework as fw
from controller.scheduler.cycle import schedule_one
from controller.scheduler.deviceshare import (
    Allocation,
    DeviceRequest,
    allocate,
    parse_allocation,
    prepare,
    score_node,
)
from controller.scheduler.deviceshare.state import ANNOTATION_SGPU_QOS_POLICIES
from controller.scheduler.explain import DIAGNOSIS_ANNOTATION
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.deviceshare import DeviceShare, DeviceSharePluginArgs
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    PluginConfig,
    PluginSpec,
    ProfileError,
    WeightedPlugin,
    build_profile,
)
from controller.store.snapshots import Snapshot
from controller.store.sqlite import Store
from tests.controller.deviceshare.builders import GIB, device, gpu, h100_node, npu
from tests.controller.scheduler import make_node

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def gpu_pod(
    requests: Mapping[str, str],
    *,
    name: str = "p",
    node: str = "",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Pod:
    wire = {"cpu": "1", **requests}
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            annotations=dict(annotations or {}),
            labels=dict(labels or {}),
        ),
        spec=PodSpec(
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(requests=ResourceList.parse(wire)),
                ),
            ),
            node_name=node,
            scheduler_name="koord-scheduler",
        ),
    )


def holding(node: str, name: str, allocation: Mapping[str, object]) -> Pod:
    """A pod bound to ``node`` holding ``allocation`` (the annotation's JSON form)."""
    return gpu_pod(
        {},
        name=name,
        node=node,
        annotations={k.ANNOTATION_DEVICE_ALLOCATED: json.dumps(allocation)},
    )


def share(minor: int, ratio: int, memory: int = 80 * GIB) -> dict[str, object]:
    return {
        "minor": minor,
        "resources": {
            k.RESOURCE_GPU_CORE: str(ratio),
            k.RESOURCE_GPU_MEMORY_RATIO: str(ratio),
            k.RESOURCE_GPU_MEMORY: str(ratio * memory // 100),
        },
    }


def eight(node: str, *, memory: int = 80 * GIB) -> Device:
    return device([gpu(m, memory=memory) for m in range(8)], node=node)


def nodes(*names: str, gpus: int = 0) -> list[Node]:
    """Nodes advertising ``gpus`` cards' worth of device resources (as the agent sums them)."""
    extra = {
        k.RESOURCE_GPU_CORE: 100 * gpus,
        k.RESOURCE_GPU_MEMORY_RATIO: 100 * gpus,
        k.RESOURCE_GPU_MEMORY: 80 * GIB * gpus,
        k.RESOURCE_NVIDIA_GPU: gpus,
    }
    return [
        make_node(name, cpu=64_000, memory=256 * GIB, extra=extra if gpus else None)
        for name in names
    ]


def snap(objects: Sequence[Object]) -> Snapshot:
    """A store snapshot holding ``objects``."""
    with Store(clock=lambda: NOW) as store:
        store.apply_many(objects)
        return store.snapshot()


def synced(
    objects: Sequence[Object], node_list: Sequence[Node], args: DeviceSharePluginArgs | None = None
) -> tuple[DeviceShare, NodeTable]:
    plugin = DeviceShare(args or DeviceSharePluginArgs())
    table = NodeTable(node_list, [o for o in objects if isinstance(o, Pod)])
    plugin.sync(snap(objects), table)
    return plugin, table


def run_filter(
    plugin: DeviceShare, table: NodeTable, pod: Pod
) -> tuple[fw.Status, fw.FilterResult | None, fw.CycleState]:
    state = fw.CycleState()
    info = PodInfo.of(pod, table)
    status = plugin.pre_filter(state, info, table)
    if not status.is_success:
        return status, None, state
    return status, plugin.filter(state, info, table, table.all_mask), state


# --- PreFilter ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "code", "message"),
    [
        ({}, fw.Code.SKIP, ""),
        ({k.RESOURCE_GPU_MEMORY_RATIO: "50"}, fw.Code.SUCCESS, ""),
        (
            {k.RESOURCE_GPU_CORE: "50"},
            fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"invalid resource device requests: [{k.RESOURCE_GPU_CORE}]",
        ),
        (
            {k.RESOURCE_GPU: "150"},
            fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"invalid resource unit {k.RESOURCE_GPU}: 150",
        ),
    ],
)
def test_pre_filter(requests: dict[str, str], code: fw.Code, message: str) -> None:
    plugin, table = synced([eight("n1")], nodes("n1"))
    status = plugin.pre_filter(fw.CycleState(), PodInfo.of(gpu_pod(requests), table), table)
    assert status.code is code
    assert status.message == message


def test_a_malformed_device_annotation_is_refused_even_without_device_requests() -> None:
    plugin, table = synced([eight("n1")], nodes("n1"))
    pod = gpu_pod({}, annotations={k.ANNOTATION_DEVICE_JOINT_ALLOCATE: "{not json"})
    status = plugin.pre_filter(fw.CycleState(), PodInfo.of(pod, table), table)
    assert status.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert k.ANNOTATION_DEVICE_JOINT_ALLOCATE in status.message


# --- Filter: the vectorized verdict is the core's ----------------------------------------------

#: Nodes in varied states: empty, partly used, nearly full, one unhealthy card, no Device.
_CLUSTER: list[Object] = [
    eight("a-empty"),
    eight("b-half"),
    *(holding("b-half", f"h{m}", {"gpu": [share(m, 50)]}) for m in range(8)),
    eight("c-full"),
    *(holding("c-full", f"f{m}", {"gpu": [share(m, 90 if m else 100)]}) for m in range(8)),
    device(
        [gpu(m, memory=40 * GIB, healthy=m != 0) for m in range(4)],
        node="d-small",
        model="A100",
    ),
    holding("d-small", "s1", {"gpu": [share(1, 70, 40 * GIB)]}),
    h100_node(node="f-topology"),
    holding("f-topology", "t1", {"gpu": [share(5, 30)]}),
    holding("f-topology", "t2", {"gpu": [share(2, 100)]}),
]
_NODES = nodes("a-empty", "b-half", "c-full", "d-small", "e-bare", "f-topology")


@pytest.mark.parametrize(
    "requests",
    [
        {k.RESOURCE_GPU_MEMORY_RATIO: "50"},
        {k.RESOURCE_GPU_MEMORY_RATIO: "10"},
        {k.RESOURCE_GPU_MEMORY_RATIO: "60"},
        {k.RESOURCE_GPU_MEMORY: "20Gi"},
        {k.RESOURCE_GPU_MEMORY: "36Gi"},
        {k.RESOURCE_GPU_CORE: "30", k.RESOURCE_GPU_MEMORY_RATIO: "30"},
        {k.RESOURCE_NVIDIA_GPU: "1"},
        {k.RESOURCE_NVIDIA_GPU: "4"},
        {k.RESOURCE_GPU: "200"},
        {k.RESOURCE_GPU_SHARED: "2", k.RESOURCE_GPU_MEMORY_RATIO: "100"},
    ],
)
def test_vectorized_filter_and_score_agree_with_the_core(requests: dict[str, str]) -> None:
    plugin, table = synced(_CLUSTER, _NODES)
    pod = gpu_pod(requests)
    status, result, state = run_filter(plugin, table, pod)
    assert status.is_success
    assert result is not None
    request = prepare(pod)
    assert isinstance(request, DeviceRequest)
    info = PodInfo.of(pod, table)
    for row, name in enumerate(table.names):
        answer = allocate(request, plugin.state(name))
        assert bool(result.passed[row]) == isinstance(answer, Allocation), name
        if isinstance(answer, Allocation):
            # Reserve picks the very cards the core picks, and Unreserve gives them back.
            assert plugin.reserve(state, info, table, row).is_success
            annotation = plugin.pre_bind(state, info, table, row).annotations
            assert parse_allocation(annotation[k.ANNOTATION_DEVICE_ALLOCATED]) == answer
            plugin.unreserve(state, info, table, row)
            assert allocate(request, plugin.state(name)) == answer
    bare = [r.code for r in result.rejections if table.index["e-bare"] in r.rows]
    assert bare == [fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE]
    feasible = np.flatnonzero(result.passed)
    if len(feasible):
        scores = plugin.score(state, info, table, feasible)
        expected = [score_node(request, plugin.state(table.names[r])) for r in feasible]
        assert scores.tolist() == expected


def test_rows_without_devices_are_unresolvable_and_full_ones_unschedulable() -> None:
    plugin, table = synced(_CLUSTER, _NODES)
    _, result, _ = run_filter(plugin, table, gpu_pod({k.RESOURCE_NVIDIA_GPU: "8"}))
    assert result is not None
    codes = {(r.reason, r.code): sorted(table.names[i] for i in r.rows) for r in result.rejections}
    assert codes == {
        ("Insufficient gpu devices", fw.Code.UNSCHEDULABLE): [
            "b-half",
            "c-full",
            "d-small",
            "f-topology",
        ],
        ("Insufficient gpu devices", fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE): ["e-bare"],
    }


# --- Reserve / Unreserve / PreBind ------------------------------------------------------------


def test_reserve_charges_the_node_and_unreserve_gives_it_back() -> None:
    plugin, table = synced([eight("n1")], nodes("n1"))
    pod = gpu_pod({k.RESOURCE_GPU_MEMORY_RATIO: "100"}, name="whole")
    info = PodInfo.of(pod, table)
    state = fw.CycleState()
    assert plugin.pre_filter(state, info, table).is_success
    assert plugin.reserve(state, info, table, 0).is_success
    (held,) = [s for s in plugin.state("n1").devices if s.in_use]
    assert held.minor == 0
    result = plugin.pre_bind(state, info, table, 0)
    allocation = parse_allocation(result.annotations[k.ANNOTATION_DEVICE_ALLOCATED])
    assert allocation.minors(k.DEVICE_TYPE_GPU) == (0,)
    assert allocation.of(k.DEVICE_TYPE_GPU)[0].resources.get_amount(k.RESOURCE_GPU_MEMORY) == (
        80 * GIB
    )
    plugin.unreserve(state, info, table, 0)
    plugin.unreserve(state, info, table, 0)  # idempotent
    assert not any(s.in_use for s in plugin.state("n1").devices)


def test_pre_bind_adds_vendor_annotations_when_adaption_is_on() -> None:
    metax = device(
        [gpu(m, memory=64 * GIB, extra={k.RESOURCE_METAX_SGPU: 16}) for m in range(2)],
        node="mx",
        vendor=k.GPU_VENDOR_METAX,
        model="C500",
    )
    plugin, table = synced([metax], nodes("mx"), DeviceSharePluginArgs(device_plugin_adaption=True))
    pod = gpu_pod(
        {k.RESOURCE_GPU_SHARED: "1", k.RESOURCE_GPU_MEMORY: "1Gi", k.RESOURCE_GPU_CORE: "10"}
    )
    info = PodInfo.of(pod, table)
    state = fw.CycleState()
    assert plugin.pre_filter(state, info, table).is_success
    assert plugin.filter(state, info, table, table.all_mask).passed.tolist() == [True]
    assert plugin.reserve(state, info, table, 0).is_success
    annotations = plugin.pre_bind(state, info, table, 0).annotations
    assert annotations[k.ANNOTATION_GPU_MINORS] == "0"
    devices = json.loads(annotations[k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED])
    assert devices == [[{"uuid": "GPU-0", "compute": 10, "vRam": 1024}]]
    # The sGPU slot is charged too.
    assert plugin.state("mx").devices[0].used.get_amount(k.RESOURCE_METAX_SGPU) == 1


def _bind_on_huawei(plugin: DeviceShare, table: NodeTable, name: str) -> Mapping[str, str]:
    pod = gpu_pod({k.RESOURCE_HUAWEI_NPU_CORE: "20", k.RESOURCE_GPU_MEMORY_RATIO: "100"}, name=name)
    info = PodInfo.of(pod, table)
    state = fw.CycleState()
    assert plugin.pre_filter(state, info, table).is_success
    assert plugin.reserve(state, info, table, 0).is_success
    return plugin.pre_bind(state, info, table, 0).annotations


def test_bind_times_come_from_the_loop_clock_and_never_repeat() -> None:
    """``bind-timestamp`` and Huawei's ``predicate-time`` are the pass's time in unix
    nanoseconds; two pods bound in one pass get distinct, increasing times."""
    ascend = device(
        [npu(m) for m in range(4)], node="a1", vendor=k.GPU_VENDOR_HUAWEI, model="Ascend-910B3"
    )
    args = DeviceSharePluginArgs(device_plugin_adaption=True)
    plugin, table = synced([ascend], nodes("a1"), args)
    plugin.set_time(NOW)
    first = _bind_on_huawei(plugin, table, "first")
    second = _bind_on_huawei(plugin, table, "second")
    at = int(NOW.timestamp()) * 10**9
    assert first[k.ANNOTATION_BIND_TIMESTAMP] == first[k.ANNOTATION_HUAWEI_PREDICATE_TIME]
    assert int(first[k.ANNOTATION_BIND_TIMESTAMP]) == at
    assert int(second[k.ANNOTATION_BIND_TIMESTAMP]) == at + 1
    plugin.set_time(NOW + timedelta(seconds=2))
    third = _bind_on_huawei(plugin, table, "third")
    assert int(third[k.ANNOTATION_HUAWEI_PREDICATE_TIME]) == at + 2 * 10**9


def test_a_pod_given_only_an_rdma_nic_gets_the_bind_time_alone() -> None:
    nic = DeviceInfo(
        type=k.DEVICE_TYPE_RDMA,
        minor=1,
        health=True,
        resources=ResourceList({k.RESOURCE_RDMA: 100}),
    )
    rdma = device([gpu(0), nic], node="r1")
    plugin, table = synced([rdma], nodes("r1"), DeviceSharePluginArgs(device_plugin_adaption=True))
    plugin.set_time(NOW)
    pod = gpu_pod({k.RESOURCE_RDMA: "100"})
    info = PodInfo.of(pod, table)
    state = fw.CycleState()
    assert plugin.pre_filter(state, info, table).is_success
    assert plugin.reserve(state, info, table, 0).is_success
    annotations = plugin.pre_bind(state, info, table, 0).annotations
    assert set(annotations) == {k.ANNOTATION_DEVICE_ALLOCATED, k.ANNOTATION_BIND_TIMESTAMP}


@pytest.mark.parametrize("adaption", [True, False])
def test_pre_bind_fails_for_what_the_vendor_plugin_cannot_take(adaption: bool) -> None:
    """Two Cambricon cards for one pod: the sMLU plugin takes one card at most, so with the
    gate on PreBind fails (an Error naming the vendor); without it the allocation is written."""
    mlu = device([gpu(m, memory=32 * GIB) for m in range(2)], node="c1", vendor="cambricon")
    args = DeviceSharePluginArgs(device_plugin_adaption=adaption)
    plugin, table = synced([mlu], nodes("c1"), args)
    info = PodInfo.of(gpu_pod({k.RESOURCE_GPU: "200"}), table)
    state = fw.CycleState()
    assert plugin.pre_filter(state, info, table).is_success
    assert plugin.reserve(state, info, table, 0).is_success
    result = plugin.pre_bind(state, info, table, 0)
    if adaption:
        assert result.status.code is fw.Code.ERROR
        assert result.status.message == (
            'failed to adapt for GPU device plugin of vendor "cambricon":'
            " multiple gpu share is not supported on device side"
        )
    else:
        assert result.status.is_success
        assert parse_allocation(result.annotations[k.ANNOTATION_DEVICE_ALLOCATED]).minors(
            k.DEVICE_TYPE_GPU
        ) == (0, 1)


def test_a_pod_asking_no_device_gets_nothing_written() -> None:
    plugin, table = synced([eight("n1")], nodes("n1"))
    state = fw.CycleState()
    info = PodInfo.of(gpu_pod({}), table)
    assert plugin.pre_filter(state, info, table).code is fw.Code.SKIP
    assert plugin.reserve(state, info, table, 0).is_success
    assert plugin.pre_bind(state, info, table, 0).status.code is fw.Code.SKIP


# --- cluster state ------------------------------------------------------------------------------


def used(plugin: DeviceShare, node: str, minor: int) -> int:
    slot = plugin.state(node).slot(k.DEVICE_TYPE_GPU, minor)
    assert slot is not None
    return slot.used.get_amount(k.RESOURCE_GPU_CORE)


def test_sync_reports_device_changes_and_keeps_a_deleted_device_unhealthy() -> None:
    plugin = DeviceShare(DeviceSharePluginArgs())
    table = NodeTable(nodes("n1"))
    first = eight("n1")
    bound = holding("n1", "b", {"gpu": [share(3, 40)]})
    assert plugin.sync(snap([first, bound]), table)
    assert not plugin.sync(snap([first, bound]), table)
    assert used(plugin, "n1", 3) == 40
    assert plugin.sync(snap([bound]), table)
    slots = plugin.state("n1").devices
    assert len(slots) == 8
    assert not any(s.healthy for s in slots)
    assert used(plugin, "n1", 3) == 40
    assert plugin.sync(snap([first, bound]), table)
    assert all(s.healthy for s in plugin.state("n1").devices)
    # The pod's deletion gives its share back; no Device changed.
    assert not plugin.sync(snap([first]), table)
    assert not any(s.in_use for s in plugin.state("n1").devices)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"scoringStrategy": {"type": "Random"}}, "scoringStrategy.type"),
        ({"scoringStrategy": {"resources": [{"name": "x", "weight": 0}]}}, "weight"),
        ({"devicePluginAdaptation": True}, "devicePluginAdaptation"),
    ],
)
def test_bad_args_name_the_field(args: dict[str, object], field: str) -> None:
    config = msgspec.structs.replace(
        DEFAULT_CONFIG, plugin_config=(PluginConfig(name="DeviceShare", args=args),)
    )
    with pytest.raises(ProfileError, match=field):
        build_profile(config)


# --- the scheduler loop -----------------------------------------------------------------------


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(clock=lambda: NOW) as opened:
        yield opened


def _get(store: Store, name: str) -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(pod, Pod)
    return pod


def _message(pod: Pod) -> str:
    return next((c.message for c in pod.status.conditions if c.type == POD_SCHEDULED), "")


def test_loop_places_shares_writes_the_allocation_and_explains_the_rest(store: Store) -> None:
    store.create(nodes("cpu-only")[0])
    store.create(nodes("gpu-1", gpus=2)[0])
    store.create(device([gpu(0), gpu(1)], node="gpu-1"))
    for i in range(2):
        store.create(gpu_pod({k.RESOURCE_GPU_MEMORY_RATIO: "60"}, name=f"share-{i}"))
    store.create(gpu_pod({k.RESOURCE_GPU_MEMORY_RATIO: "60"}, name="share-2"))
    store.create(gpu_pod({k.RESOURCE_GPU_CORE: "50"}, name="invalid"))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=lambda: NOW)
    loop.reconcile(ctx)

    minors = []
    for i in range(2):
        pod = _get(store, f"share-{i}")
        assert pod.spec.node_name == "gpu-1"
        allocation = parse_allocation(pod.annotations[k.ANNOTATION_DEVICE_ALLOCATED])
        (entry,) = allocation.of(k.DEVICE_TYPE_GPU)
        assert entry.id == f"GPU-{entry.minor}"
        assert entry.resources.get_amount(k.RESOURCE_GPU_MEMORY) == 48 * GIB
        minors.append(entry.minor)
    assert sorted(minors) == [0, 1]  # LeastAllocated spreads the shares over the cards

    # 120 of the node's 200 ratio is used, but no card has 60 left.
    late = _get(store, "share-2")
    assert late.spec.node_name == ""
    assert json.loads(late.annotations[DIAGNOSIS_ANNOTATION]) == {
        "NodeResourcesFit": {f"Insufficient {k.RESOURCE_GPU_MEMORY_RATIO}": 1},
        "DeviceShare": {"Insufficient gpu devices": 1},
    }
    assert "1 Insufficient gpu devices" in _message(late)
    invalid = _get(store, "invalid")
    assert _message(invalid) == (
        f"0/2 nodes are available: invalid resource device requests: [{k.RESOURCE_GPU_CORE}]."
    )

    # The next pass reads the bound pods' allocations back: nothing is charged twice, and a
    # deleted pod's share is given back.
    loop.reconcile(ctx)
    used = plugin_of(loop).state("gpu-1").devices
    assert [s.used.get_amount(k.RESOURCE_GPU_MEMORY_RATIO) for s in used] == [60, 60]
    store.delete(store.registry.for_type(Pod), "share-0", "default")
    loop.reconcile(ctx)
    used = plugin_of(loop).state("gpu-1").devices
    assert sorted(s.used.get_amount(k.RESOURCE_GPU_MEMORY_RATIO) for s in used) == [0, 60]


def plugin_of(loop: SchedulerLoop) -> DeviceShare:
    (plugin,) = [p for p in loop._stateful if isinstance(p, DeviceShare)]
    return plugin


def test_loop_retries_a_parked_pod_when_a_device_appears(store: Store) -> None:
    store.create(nodes("n1", gpus=4)[0])
    store.create(gpu_pod({k.RESOURCE_NVIDIA_GPU: "2"}, name="two"))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=lambda: NOW)
    loop.reconcile(ctx)
    assert _get(store, "two").spec.node_name == ""
    store.create(device([gpu(m) for m in range(4)], node="n1"))
    assert loop.reconcile(ctx) == pytest.approx(1.0)  # released, after its backoff
    ctx = LoopContext(store=store, now=lambda: NOW + timedelta(seconds=1))
    loop.reconcile(ctx)
    pod = _get(store, "two")
    assert pod.spec.node_name == "n1"
    allocation = parse_allocation(pod.annotations[k.ANNOTATION_DEVICE_ALLOCATED])
    assert allocation.minors(k.DEVICE_TYPE_GPU) == (0, 1)


# --- property: no card is ever over-committed, and the arrays agree with the core --------------

_SHARES = st.one_of(
    st.sampled_from([10, 25, 30, 50, 60, 100, 200]).map(
        lambda r: {k.RESOURCE_GPU_MEMORY_RATIO: str(r)}
    ),
    st.sampled_from([4, 20, 40]).map(lambda g: {k.RESOURCE_GPU_MEMORY: f"{g}Gi"}),
    st.sampled_from([1, 2]).map(lambda n: {k.RESOURCE_NVIDIA_GPU: str(n)}),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=3),
    topology=st.booleans(),
    requests=st.lists(_SHARES, min_size=1, max_size=25),
)
def test_placed_shares_never_overcommit_a_card(
    sizes: list[int], topology: bool, requests: list[dict[str, str]]
) -> None:
    names = [f"n{i}" for i in range(len(sizes))]
    devices: list[Object] = [
        device(
            [gpu(m, numa=m // 2, pcie=f"p{m // 2}" if topology else "") for m in range(size)],
            node=name,
        )
        for name, size in zip(names, sizes, strict=True)
    ]
    plugin, table = synced(devices, nodes(*names, gpus=4))
    profile = build_profile(
        msgspec.structs.replace(
            DEFAULT_CONFIG,
            pre_filter=("DeviceShare",),
            filter=("DeviceShare",),
            pre_score=("DeviceShare",),
            score=(WeightedPlugin(name="DeviceShare"),),
            reserve=("DeviceShare",),
            permit=(),
            pre_bind=(),
            bind=(),
            post_filter=(),
            plugin_config=(),
        ),
        {"DeviceShare": PluginSpec(DeviceSharePluginArgs, lambda _args: plugin)},
    )
    for index, wire in enumerate(requests):
        pod = gpu_pod(wire, name=f"p{index}")
        request = prepare(pod)
        assert isinstance(request, DeviceRequest)
        fits = [isinstance(allocate(request, plugin.state(n)), Allocation) for n in names]
        decision = schedule_one(profile, table, PodInfo.of(pod, table))
        assert (decision.row is not None) == any(fits)
    # Nothing over-committed, and the arrays the quick paths kept up to date (deferring the
    # node state's own charges) still give the core's verdicts and scores.
    for name in names:
        for slot in plugin.state(name).devices:
            for resource, amount in slot.used.items():
                assert amount <= slot.total.get_amount(resource)
    for share in ("10", "50", "100"):
        probe = gpu_pod({k.RESOURCE_GPU_MEMORY_RATIO: share}, name="probe")
        request = prepare(probe)
        assert isinstance(request, DeviceRequest)
        _, result, state = run_filter(plugin, table, probe)
        assert result is not None
        states = [plugin.state(n) for n in table.names]
        assert result.passed.tolist() == [
            isinstance(allocate(request, one), Allocation) for one in states
        ]
        scores = plugin.score(state, PodInfo.of(probe, table), table, table.all_rows)
        assert scores.tolist() == [score_node(request, one) for one in states]


# --- GPU shared-resource templates from the ConfigMap -----------------------------------------

_TEMPLATES_YAML = """\
huawei-Ascend-910B3:
  vir05_1c_16g: {huawei.com/npu-core: 5, huawei.com/npu-cpu: 1, koordinator.sh/gpu-memory: 16Gi}
  vir10_3c_32g: {huawei.com/npu-core: 10, huawei.com/npu-cpu: 3, koordinator.sh/gpu-memory: 32Gi}
"""
_VIR05 = {
    k.RESOURCE_GPU_SHARED: "1",
    k.RESOURCE_HUAWEI_NPU_CORE: "5",
    k.RESOURCE_HUAWEI_NPU_CPU: "1",
    k.RESOURCE_GPU_MEMORY: "16Gi",
}


def templates_map(
    data: Mapping[str, str],
    *,
    name: str = "gpu-shared-resource-templates",
    namespace: str = "koordinator-system",
) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace), data=dict(data))


def npu_node(name: str, *, cards: int, aicore: int, aicpu: int, memory: int) -> Node:
    """A node advertising ``cards`` NPUs' worth of the device resources."""
    extra = {
        k.RESOURCE_GPU_SHARED: 100 * cards,
        k.RESOURCE_HUAWEI_NPU_CORE: aicore * cards,
        k.RESOURCE_HUAWEI_NPU_CPU: aicpu * cards,
        k.RESOURCE_HUAWEI_NPU_DVPP: 100 * cards,
        k.RESOURCE_GPU_MEMORY: memory * cards,
        k.RESOURCE_GPU_MEMORY_RATIO: 100 * cards,
    }
    return make_node(name, cpu=64_000, memory=256 * GIB, extra=extra)


def ascend_910b3(node: str) -> Device:
    return device(
        [npu(m) for m in range(2)], node=node, vendor=k.GPU_VENDOR_HUAWEI, model="Ascend-910B3"
    )


def test_sync_reads_the_templates_configmap_and_answers_true_when_it_changes() -> None:
    plugin = DeviceShare(DeviceSharePluginArgs())
    table = NodeTable(nodes("n1"), [])
    pod = PodInfo.of(gpu_pod(_VIR05), table)
    without = plugin.pre_filter(fw.CycleState(), pod, table)
    assert without.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert without.message == "no matched GPU shared resource template"

    objects: list[Object] = [ascend_910b3("n1"), templates_map({"data.yaml": _TEMPLATES_YAML})]
    assert plugin.sync(snap(objects), table) is True
    assert plugin.pre_filter(fw.CycleState(), pod, table).is_success  # not the memo's answer
    assert plugin.sync(snap(objects), table) is False  # same content: nothing to retry
    # A ConfigMap of another name is not read.
    assert plugin.sync(snap([objects[0], templates_map({}, name="other")]), table) is True
    assert not plugin.pre_filter(fw.CycleState(), pod, table).is_success


def test_sync_reads_the_configmap_the_args_name() -> None:
    args = msgspec.convert(
        {
            "gpuSharedResourceTemplatesConfig": {
                "configMapNamespace": "npu",
                "configMapName": "vnpu-shapes",
            }
        },
        DeviceSharePluginArgs,
    )
    plugin = DeviceShare(args)
    table = NodeTable(nodes("n1"), [])
    default_place = templates_map({"data.yaml": _TEMPLATES_YAML})
    assert plugin.sync(snap([default_place]), table) is False
    named = templates_map({"data.yaml": _TEMPLATES_YAML}, name="vnpu-shapes", namespace="npu")
    assert plugin.sync(snap([named]), table) is True
    assert plugin.pre_filter(fw.CycleState(), PodInfo.of(gpu_pod(_VIR05), table), table).is_success


def test_a_bad_templates_document_is_logged_and_the_last_good_one_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin = DeviceShare(DeviceSharePluginArgs())
    table = NodeTable(nodes("n1"), [])
    assert plugin.sync(snap([templates_map({"data.yaml": _TEMPLATES_YAML})]), table) is True
    bad = templates_map({"data.yaml": "huawei-Ascend-910B3: [not, a, map]\n"})
    with caplog.at_level("WARNING"):
        assert plugin.sync(snap([bad]), table) is False
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    message = record.getMessage()
    assert "koordinator-system/gpu-shared-resource-templates" in message
    assert "huawei-Ascend-910B3: expected a map of template name to resources" in message
    assert plugin.pre_filter(fw.CycleState(), PodInfo.of(gpu_pod(_VIR05), table), table).is_success


def _example(repo_root: Path, name: str) -> list[Object]:
    path = repo_root / "examples" / name
    return decode_documents(path.read_text(), source=str(path))


def test_loop_places_the_example_vnpu_pod_once_the_templates_arrive(
    store: Store, repo_root: Path
) -> None:
    objects = _example(repo_root, "ascend-vnpu.yaml")
    [config_map] = [o for o in objects if isinstance(o, ConfigMap)]
    [pod] = [o for o in objects if isinstance(o, Pod)]
    store.create(npu_node("duo-1", cards=8, aicore=8, aicpu=7, memory=24 * GIB))
    store.create(
        device(
            [npu(m, aicore=8, aicpu=7, memory=24 * GIB) for m in range(8)],
            node="duo-1",
            vendor=k.GPU_VENDOR_HUAWEI,
            model=k.MODEL_ASCEND_310P3_300I_DUO,
        )
    )
    store.create(pod)
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=lambda: NOW)
    loop.reconcile(ctx)
    parked = _get(store, pod.name)
    assert parked.spec.node_name == ""
    assert _message(parked) == "0/1 nodes are available: no matched GPU shared resource template."

    store.create(config_map)
    loop.reconcile(ctx)  # the ConfigMap changed: the parked pod goes back to the queue
    ctx = LoopContext(store=store, now=lambda: NOW + timedelta(seconds=10))
    loop.reconcile(ctx)
    placed = _get(store, pod.name)
    assert placed.spec.node_name == "duo-1"
    allocation = json.loads(placed.annotations[k.ANNOTATION_DEVICE_ALLOCATED])
    (entry,) = allocation[k.DEVICE_TYPE_GPU]
    assert entry["extension"] == {"gpuSharedResourceTemplate": "vir04_3c"}
    assert entry["resources"][k.RESOURCE_HUAWEI_NPU_CORE] == "4"
    assert entry["resources"][k.RESOURCE_HUAWEI_NPU_CPU] == "3"


# --- MetaX sGPU QoS ---------------------------------------------------------------------------

_SGPU = {
    k.RESOURCE_GPU_SHARED: "1",
    k.RESOURCE_GPU_CORE: "10",
    k.RESOURCE_GPU_MEMORY: "1Gi",
    k.RESOURCE_METAX_SGPU: "1",
}


def metax(node: str, policies: str | None) -> Device:
    found = device(
        [gpu(m, memory=64 * GIB, extra={k.RESOURCE_METAX_SGPU: 16}) for m in range(2)],
        node=node,
        vendor=k.GPU_VENDOR_METAX,
        model="C500",
    )
    if policies is None:
        return found
    meta = msgspec.structs.replace(
        found.metadata, annotations={ANNOTATION_SGPU_QOS_POLICIES: policies}
    )
    return msgspec.structs.replace(found, metadata=meta)


@pytest.mark.parametrize("policy", ["", "fixed", "Best-Effort", "burst"])
def test_an_unknown_sgpu_qos_policy_is_refused_at_pre_filter(policy: str) -> None:
    plugin, table = synced([metax("m1", None)], nodes("m1", gpus=2))
    annotations = {k.ANNOTATION_SGPU_QOS_POLICY: policy}
    status, _, _ = run_filter(plugin, table, gpu_pod(_SGPU, annotations=annotations))
    if not policy:
        assert status.is_success  # an empty annotation asks for no policy
        return
    assert status.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == (
        f'invalid annotation {k.ANNOTATION_SGPU_QOS_POLICY}: "{policy}"'
        " (want one of fixed-share, best-effort, burst-share)"
    )


def test_an_sgpu_qos_policy_is_refused_even_without_device_requests() -> None:
    plugin, table = synced([metax("m1", None)], nodes("m1", gpus=2))
    pod = gpu_pod({}, annotations={k.ANNOTATION_SGPU_QOS_POLICY: "gold"})
    status, _, _ = run_filter(plugin, table, pod)
    assert status.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@pytest.mark.parametrize(
    ("policies", "policy", "passes"),
    [
        (None, "burst-share", True),  # the Device lists none: any policy
        ("fixed-share,best-effort,burst-share", "burst-share", True),
        ("fixed-share, best-effort", "best-effort", True),
        ("fixed-share", "best-effort", False),
        ("", "fixed-share", False),  # listed, but empty: none supported
        ("fixed-share", "", True),  # the pod asks for no policy
    ],
)
def test_a_metax_node_takes_only_the_sgpu_qos_policies_its_device_lists(
    policies: str | None, policy: str, passes: bool
) -> None:
    objects = [metax("m1", policies), metax("m2", "fixed-share,best-effort,burst-share")]
    plugin, table = synced(objects, nodes("m1", "m2", gpus=2))
    annotations = {k.ANNOTATION_SGPU_QOS_POLICY: policy} if policy else {}
    status, result, _ = run_filter(plugin, table, gpu_pod(_SGPU, annotations=annotations))
    assert status.is_success
    assert result is not None
    assert result.passed.tolist() == [passes, True]
    if not passes:
        (rejection,) = result.rejections
        assert rejection.code is fw.Code.UNSCHEDULABLE
        assert rejection.reason == f'node(s) didn\'t support MetaX sGPU QoS policy "{policy}"'
        assert rejection.rows.tolist() == [0]


def test_the_sgpu_qos_policy_stays_on_the_pod_not_in_the_metax_adapter_annotation() -> None:
    args = DeviceSharePluginArgs(device_plugin_adaption=True)
    plugin, table = synced([metax("m1", "fixed-share")], nodes("m1", gpus=2), args)
    pod = gpu_pod(_SGPU, annotations={k.ANNOTATION_SGPU_QOS_POLICY: "fixed-share"})
    _, result, state = run_filter(plugin, table, pod)
    assert result is not None
    info = PodInfo.of(pod, table)
    assert plugin.reserve(state, info, table, 0).is_success
    written = plugin.pre_bind(state, info, table, 0).annotations
    [[entry]] = json.loads(written[k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED])
    assert set(entry) == {"uuid", "compute", "vRam"}
    assert k.ANNOTATION_SGPU_QOS_POLICY not in written
