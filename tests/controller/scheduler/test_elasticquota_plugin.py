"""ElasticQuota on the scheduler loop: a quota admits pods up to its max."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.core import Node, Pod
from apis.meta import ObjectMeta
from apis.quota import ElasticQuota as ElasticQuotaObject
from apis.quota import ElasticQuotaSpec
from apis.resources import ResourceList
from controller.loops import LoopContext
from controller.quota.args import ElasticQuotaArgs
from controller.quota.check import check_pod
from controller.scheduler import framework as fw
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.elasticquota import ElasticQuota, NodeTotal
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    PluginConfig,
    ProfileConfig,
    ProfileError,
    build_profile,
)
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, Clock, make_node, make_pod

QUOTA_PROFILE = ProfileConfig(
    pre_filter=("Coscheduling", "ElasticQuota"),
    filter=("NodeUnschedulable", "NodeResourcesFit"),
    post_filter=("Coscheduling",),
    reserve=("Coscheduling", "ElasticQuota"),
    permit=("Coscheduling",),
)


def quota(name: str, namespace: str, **max_: int) -> ElasticQuotaObject:
    return ElasticQuotaObject(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=ElasticQuotaSpec(max=ResourceList(max_)),
    )


def team_pod(
    name: str, *, cpu: int = 1000, label: str = "", annotations: dict[str, str] | None = None
) -> Pod:
    pod = make_pod(name, cpu=cpu, namespace="team")
    labels = {k.LABEL_QUOTA_NAME: label} if label else {}
    return msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(
            pod.metadata, labels=labels, annotations=dict(annotations or {})
        ),
    )


def _pod(store: Store, name: str) -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, "team")
    assert isinstance(pod, Pod)
    return pod


def _message(pod: Pod) -> str:
    return next(c.message for c in pod.status.conditions if c.type == POD_SCHEDULED)


def _plugin(loop: SchedulerLoop) -> ElasticQuota:
    (profile,) = loop._profiles
    plugin = profile.plugins["ElasticQuota"]
    assert isinstance(plugin, ElasticQuota)
    return plugin


def test_the_shipped_profile_checks_quotas_at_prefilter_and_reserve() -> None:
    assert "ElasticQuota" in DEFAULT_CONFIG.pre_filter
    assert "ElasticQuota" in DEFAULT_CONFIG.reserve


@pytest.mark.parametrize(
    ("quota_object", "label"),
    [
        (quota("team", "team", cpu=2000), ""),  # a quota named like the namespace
        (quota("gold", "quotas", cpu=2000), "gold"),  # the quota label
    ],
)
def test_a_quota_admits_pods_up_to_its_max(
    store: Store, clock: Clock, quota_object: ElasticQuotaObject, label: str
) -> None:
    store.create(make_node("n1", cpu=8000, memory=8 * GI))
    store.create(quota_object)
    for name in ("p1", "p2", "p3"):
        store.create(team_pod(name, label=label))
    loop = SchedulerLoop([build_profile(QUOTA_PROFILE)])
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert [_pod(store, n).spec.node_name for n in ("p1", "p2", "p3")] == ["n1", "n1", ""]
    name = quota_object.metadata.name
    assert _message(_pod(store, "p3")) == (
        f"0/1 nodes are available: Insufficient quotas, quotaName: {name}, runtime: cpu:2,"
        " used: cpu:2, pod's request: cpu:1, exceedDimensions: [cpu]."
    )
    # A pod of the quota going away makes room.
    store.delete(store.registry.for_type(Pod), "p1", "team")
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert _pod(store, "p3").spec.node_name == "n1"
    assert _plugin(loop).ledger.usage(name).used == ResourceList({"cpu": 2000})


def test_a_raised_max_lets_a_parked_pod_in(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=8000))
    store.create(quota("team", "team", cpu=1000))
    store.create(team_pod("p1"))
    store.create(team_pod("p2"))
    loop = SchedulerLoop([build_profile(QUOTA_PROFILE)])
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _pod(store, "p2").spec.node_name == ""
    store.update(quota("team", "team", cpu=3000))
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert _pod(store, "p2").spec.node_name == "n1"


def test_unreserve_gives_back_what_a_rejected_gang_held(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=2000))
    store.create(quota("team", "team", cpu=8000))
    gang = {k.ANNOTATION_GANG_NAME: "g", k.ANNOTATION_GANG_MIN_AVAILABLE: "3"}
    for name in ("a", "b", "c"):
        store.create(team_pod(name, annotations=gang))
    loop = SchedulerLoop([build_profile(QUOTA_PROFILE)])
    loop.reconcile(LoopContext(store=store, now=clock))
    # a and b were reserved (and charged) while waiting; c found no room: all let go.
    assert [_pod(store, n).spec.node_name for n in ("a", "b", "c")] == ["", "", ""]
    assert _plugin(loop).ledger.usage("team").used.get("cpu", 0) == 0


def test_pods_without_a_quota_object_use_the_default_quota(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=8000))
    store.create(team_pod("free", cpu=4000))
    SchedulerLoop([build_profile(QUOTA_PROFILE)]).reconcile(LoopContext(store=store, now=clock))
    assert _pod(store, "free").spec.node_name == "n1"


def test_bad_args_name_the_field() -> None:
    config = msgspec.structs.replace(
        QUOTA_PROFILE,
        plugin_config=(PluginConfig(name="ElasticQuota", args={"quotaGroupNamespace": ""}),),
    )
    with pytest.raises(ProfileError, match="quotaGroupNamespace"):
        build_profile(config)


@settings(max_examples=40, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.integers(0, 1500), st.booleans(), st.booleans()), min_size=1, max_size=12
    ),
    max_cpu=st.integers(0, 4000),
    min_cpu=st.integers(0, 2000),
)
def test_pre_filter_answers_as_the_quota_check_does(
    requests: list[tuple[int, bool, bool]], max_cpu: int, min_cpu: int
) -> None:
    # Each pod is admitted, or refused with the same words, exactly as the core's check
    # over the plugin's ledger and runtime quota says; admitted pods are reserved (charged)
    # in turn, and every third one given back.
    now = datetime(2026, 1, 1, tzinfo=UTC)
    team = ElasticQuotaObject(
        metadata=ObjectMeta(name="team", namespace="team"),
        spec=ElasticQuotaSpec(
            # Admission refuses a min above the max.
            max=ResourceList({"cpu": max_cpu}),
            min=ResourceList({"cpu": min(min_cpu, max_cpu)}),
        ),
    )
    pods = []
    for i, (cpu, pinned, other_namespace) in enumerate(requests):
        pod = make_pod(f"p{i}", cpu=cpu, namespace="elsewhere" if other_namespace else "team")
        if pinned:
            labels = {k.LABEL_QUOTA_PREEMPTIBLE: "false"}
            pod = msgspec.structs.replace(
                pod, metadata=msgspec.structs.replace(pod.metadata, labels=labels)
            )
        pods.append(pod)
    node = make_node("n1", cpu=64_000)
    with Store(clock=lambda: now) as store:
        for obj in (team, node, *pods):
            store.create(obj)
        snapshot = store.snapshot()
    table = NodeTable([node])
    plugin = ElasticQuota(ElasticQuotaArgs())
    plugin.sync(snapshot, table)
    for i, pod in enumerate(pods):
        info = PodInfo.of(pod, table)
        want = check_pod(
            pod, index=plugin.index, ledger=plugin.ledger, args=plugin.args, limits=plugin.limits
        )
        state = fw.CycleState()
        got = plugin.pre_filter(state, info, table)
        assert got.is_success == want.admitted
        assert got.message == want.message
        if got.is_success:
            plugin.reserve(state, info, table, 0)
            if i % 3 == 2:
                plugin.unreserve(state, info, table, 0)


# --- the runtime quota ---------------------------------------------------------------------------


def shared_quota(
    name: str, *, min_cpu: int, max_cpu: int, lends: bool = True
) -> ElasticQuotaObject:
    labels = {} if lends else {k.LABEL_QUOTA_ALLOW_LENT_RESOURCE: "false"}
    return ElasticQuotaObject(
        metadata=ObjectMeta(name=name, namespace="quotas", labels=labels),
        spec=ElasticQuotaSpec(
            min=ResourceList({"cpu": min_cpu}), max=ResourceList({"cpu": max_cpu})
        ),
    )


def _placed(store: Store, prefix: str, count: int) -> int:
    return sum(bool(_pod(store, f"{prefix}{i}").spec.node_name) for i in range(count))


@pytest.mark.parametrize(
    ("b_pods", "b_lends", "enable_runtime", "placed_a", "placed_b"),
    [
        (4, True, True, 2, 2),
        (0, True, True, 4, 0),
        (0, False, True, 2, 0),
        (4, True, False, 4, 0),
    ],
    ids=[
        "both hungry: each gets its min of the 4-cpu node",
        "an idle quota lends its min",
        "a quota that does not lend keeps its min",
        "enableRuntimeQuota off: max is the limit, first come first served",
    ],
)
def test_quotas_share_the_cluster_by_their_runtime(
    store: Store,
    clock: Clock,
    b_pods: int,
    b_lends: bool,
    enable_runtime: bool,
    placed_a: int,
    placed_b: int,
) -> None:
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(shared_quota("a", min_cpu=2000, max_cpu=4000))
    store.create(shared_quota("b", min_cpu=2000, max_cpu=4000, lends=b_lends))
    for i in range(4):
        store.create(team_pod(f"a{i}", label="a"))
    for i in range(b_pods):
        store.create(team_pod(f"b{i}", label="b"))
    config = msgspec.structs.replace(
        QUOTA_PROFILE,
        plugin_config=(
            PluginConfig(name="ElasticQuota", args={"enableRuntimeQuota": enable_runtime}),
        ),
    )
    SchedulerLoop([build_profile(config)]).reconcile(LoopContext(store=store, now=clock))
    assert (_placed(store, "a", 4), _placed(store, "b", b_pods)) == (placed_a, placed_b)


def test_a_pod_over_its_runtime_says_so(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(shared_quota("a", min_cpu=2000, max_cpu=4000))
    store.create(shared_quota("b", min_cpu=2000, max_cpu=4000))
    for i in range(3):
        store.create(team_pod(f"a{i}", label="a"))
        store.create(team_pod(f"b{i}", label="b"))
    loop = SchedulerLoop([build_profile(QUOTA_PROFILE)])
    loop.reconcile(LoopContext(store=store, now=clock))
    assert _message(_pod(store, "a2")) == (
        "0/1 nodes are available: Insufficient quotas, quotaName: a, runtime: cpu:2,"
        " used: cpu:2, pod's request: cpu:1, exceedDimensions: [cpu]."
    )
    runtime = _plugin(loop).runtime
    assert runtime is not None
    assert (runtime.of("a"), runtime.of("b")) == (ResourceList({"cpu": 2000}),) * 2


def test_a_runtime_that_grows_lets_parked_pods_in(store: Store, clock: Clock) -> None:
    # b's demand goes away: a's runtime grows from its min to its whole request.
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(shared_quota("a", min_cpu=2000, max_cpu=4000))
    store.create(shared_quota("b", min_cpu=2000, max_cpu=4000))
    for i in range(3):
        store.create(team_pod(f"a{i}", label="a"))
    store.create(team_pod("b0", label="b", cpu=2000))
    loop = SchedulerLoop([build_profile(QUOTA_PROFILE)])
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _placed(store, "a", 3) == 2
    store.delete(store.registry.for_type(Pod), "b0", "team")
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert _placed(store, "a", 3) == 3


def test_what_the_default_quota_uses_is_not_shared(store: Store, clock: Clock) -> None:
    # 4 cpu of nodes, 3 used by a pod without quota: the quotas share the 1 cpu left.
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(make_pod("free", cpu=3000, namespace="team", node="n1"))
    store.create(shared_quota("a", min_cpu=0, max_cpu=4000))
    for i in range(2):
        store.create(team_pod(f"a{i}", label="a"))
    loop = SchedulerLoop([build_profile(QUOTA_PROFILE)])
    loop.reconcile(LoopContext(store=store, now=clock))
    assert _placed(store, "a", 2) == 1
    runtime = _plugin(loop).runtime
    assert runtime is not None
    assert runtime.of("a") == ResourceList({"cpu": 1000})


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["n1", "n2", "n3", "n4"]),
                st.integers(0, 8000),
                st.sampled_from([None, 0, 1, 4]),
                st.booleans(),
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_node_total_is_the_sum_of_every_nodes_allocatable(
    rounds: list[list[tuple[str, int, int | None, bool]]],
) -> None:
    # The runtime quota's cluster total is kept node by node as node lists come and go; it
    # must always equal the plain sum over the current list (resources no node names drop).
    total = NodeTotal()
    kept: dict[str, Node] = {}
    for entries in rounds:
        nodes: dict[str, Node] = {}
        for name, cpu, gpus, reuse in entries:
            extra = {} if gpus is None else {k.RESOURCE_NVIDIA_GPU: gpus}
            fresh = make_node(name, cpu=cpu, extra=extra)
            same = kept.get(name)
            # The store hands out the same object while a node is unchanged, and a new one
            # for a heartbeat (``reuse`` false) with the same allocatable.
            if reuse and same is not None and same.allocatable == fresh.allocatable:
                fresh = same
            nodes[name] = fresh
        kept = nodes
        listed = sorted(nodes.values(), key=lambda n: n.metadata.name)
        assert total.update(listed) == ResourceList.total(n.allocatable for n in listed)
