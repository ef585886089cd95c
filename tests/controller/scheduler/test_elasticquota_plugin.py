"""ElasticQuota on the scheduler loop: a quota admits pods up to its max."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.core import Pod
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
from controller.scheduler.plugins.elasticquota import ElasticQuota
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    PluginConfig,
    ProfileConfig,
    ProfileError,
    build_profile,
)
from controller.store import Store
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
    # over the plugin's ledger says; admitted pods are reserved (charged) in turn, and every
    # third one given back.
    now = datetime(2026, 1, 1, tzinfo=UTC)
    team = ElasticQuotaObject(
        metadata=ObjectMeta(name="team", namespace="team"),
        spec=ElasticQuotaSpec(
            max=ResourceList({"cpu": max_cpu}), min=ResourceList({"cpu": min_cpu})
        ),
    )
    with Store(clock=lambda: now) as store:
        store.create(team)
        snapshot = store.snapshot()
    table = NodeTable([make_node("n1", cpu=64_000)])
    plugin = ElasticQuota(ElasticQuotaArgs())
    plugin.sync(snapshot, table)
    for i, (cpu, pinned, other_namespace) in enumerate(requests):
        pod = make_pod(f"p{i}", cpu=cpu, namespace="elsewhere" if other_namespace else "team")
        if pinned:
            labels = {k.LABEL_QUOTA_PREEMPTIBLE: "false"}
            pod = msgspec.structs.replace(
                pod, metadata=msgspec.structs.replace(pod.metadata, labels=labels)
            )
        info = PodInfo.of(pod, table)
        want = check_pod(pod, index=plugin.index, ledger=plugin.ledger, args=plugin.args)
        state = fw.CycleState()
        got = plugin.pre_filter(state, info, table)
        assert got.is_success == want.admitted
        assert got.message == want.message
        if got.is_success:
            plugin.reserve(state, info, table, 0)
            if i % 3 == 2:
                plugin.unreserve(state, info, table, 0)
