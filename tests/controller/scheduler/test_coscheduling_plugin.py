"""Coscheduling on the scheduler loop: gangs bind all together or not at all."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from apis import constants as k
from apis.core import Event, Pod
from apis.gang import PodGroup, PodGroupSpec
from apis.meta import ObjectMeta
from controller.loops import LoopContext
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.plugins.coscheduling import Coscheduling
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    PluginConfig,
    ProfileConfig,
    ProfileError,
    build_profile,
)
from controller.store.sqlite import Store
from tests.controller.scheduler import Clock, make_node, make_pod

GANG_PROFILE = ProfileConfig(
    pre_filter=("Coscheduling",),
    filter=("NodeUnschedulable", "NodeAffinity", "NodeResourcesFit"),
    post_filter=("Coscheduling",),
    score=(),
    reserve=("Coscheduling",),
    permit=("Coscheduling",),
    pre_bind=("Coscheduling",),
)


def gang_pod(
    name: str,
    *,
    gang: str = "g",
    min_available: int = 3,
    mode: str = "",
    waiting: str = "",
    cpu: int = 1000,
    selector: dict[str, str] | None = None,
) -> Pod:
    pod = make_pod(name, cpu=cpu, selector=selector)
    annotations = {
        k.ANNOTATION_GANG_NAME: gang,
        k.ANNOTATION_GANG_MIN_AVAILABLE: str(min_available),
    }
    if mode:
        annotations[k.ANNOTATION_GANG_MODE] = mode
    if waiting:
        annotations[k.ANNOTATION_GANG_WAITING_TIME] = waiting
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations)
    )


def _loop() -> SchedulerLoop:
    return SchedulerLoop([build_profile(GANG_PROFILE)])


def _pod(store: Store, name: str) -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(pod, Pod)
    return pod


def _nodes(store: Store, *names: str) -> dict[str, str]:
    return {name: _pod(store, name).spec.node_name for name in names}


def _message(pod: Pod) -> str:
    return next(c.message for c in pod.status.conditions if c.type == POD_SCHEDULED)


def _events(store: Store) -> list[Event]:
    return [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]


def _cluster(store: Store, nodes: int) -> None:
    for i in range(nodes):
        store.create(make_node(f"n{i + 1}", cpu=1000))


def test_the_shipped_profile_enables_coscheduling_where_the_spec_says() -> None:
    names = {point: tuple(getattr(DEFAULT_CONFIG, point)) for point in ("permit", "post_filter")}
    assert names["permit"] == ("Coscheduling",)
    assert "Coscheduling" in names["post_filter"]
    for point in ("pre_filter", "reserve", "pre_bind"):
        assert "Coscheduling" in getattr(DEFAULT_CONFIG, point)


@pytest.mark.parametrize("mode", ["Strict", "NonStrict"])
def test_a_gang_without_room_for_all_binds_nobody(store: Store, clock: Clock, mode: str) -> None:
    _cluster(store, 2)
    for name in ("a", "b", "c"):
        store.create(gang_pod(name, mode=mode))
    loop = _loop()
    loop.reconcile(LoopContext(store=store, now=clock))
    assert _nodes(store, "a", "b", "c") == {"a": "", "b": "", "c": ""}
    # c found no room; a and b had been held in Permit on n1 and n2.
    assert _message(_pod(store, "c")).startswith("0/2 nodes are available: 2 Insufficient cpu.")
    if mode == "Strict":
        assert _message(_pod(store, "c")) == (
            "0/2 nodes are available: 2 Insufficient cpu."
            ' Gang "default/g" gets rejected due to pod is unschedulable.'
        )
        assert loop.table.accounted == 0  # the waiting members were unreserved
    else:
        assert loop.table.accounted == 2  # NonStrict keeps them waiting


def test_a_gang_with_room_for_all_binds_in_one_pass(store: Store, clock: Clock) -> None:
    _cluster(store, 3)
    for name in ("a", "b", "c"):
        store.create(gang_pod(name))
    _loop().reconcile(LoopContext(store=store, now=clock))
    placed = _nodes(store, "a", "b", "c")
    assert sorted(placed.values()) == ["n1", "n2", "n3"]
    for name in placed:
        annotations = _pod(store, name).metadata.annotations
        assert annotations[k.ANNOTATION_BIND_GANG_GROUP_ID] == "default/g"
        assert annotations[k.ANNOTATION_BIND_GANG_MEMBER_COUNT] == "3"
        assert annotations[k.ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED] == "default/g"


def test_members_wait_until_the_gang_is_complete(store: Store, clock: Clock) -> None:
    _cluster(store, 3)
    store.create(gang_pod("a"))
    store.create(gang_pod("b"))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _nodes(store, "a", "b") == {"a": "", "b": ""}
    assert _message(_pod(store, "a")) == (
        "0/3 nodes are available: gangGroup [default/g] basic check: memberGangs [default/g]"
        " child pod not collect enough, current gang: default/g, podName: default/a."
    )
    store.create(gang_pod("c"))
    clock.now += timedelta(seconds=2)  # past the parked pods' backoff
    loop.reconcile(ctx)
    assert sorted(_nodes(store, "a", "b", "c").values()) == ["n1", "n2", "n3"]


def test_non_strict_members_keep_waiting_until_the_rest_fits(store: Store, clock: Clock) -> None:
    _cluster(store, 2)
    for name in ("a", "b", "c"):
        store.create(gang_pod(name, mode="NonStrict"))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert loop.table.accounted == 2
    store.create(make_node("n3", cpu=1000))
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert sorted(_nodes(store, "a", "b", "c").values()) == ["n1", "n2", "n3"]


def test_a_wait_that_runs_out_rejects_the_waiting_members(store: Store, clock: Clock) -> None:
    _cluster(store, 3)
    store.create(gang_pod("a", mode="NonStrict", waiting="10s"))
    store.create(gang_pod("b", mode="NonStrict", waiting="10s"))
    store.create(gang_pod("c", mode="NonStrict", waiting="10s", selector={"pool": "none"}))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    wake = loop.reconcile(ctx)
    assert loop.table.accounted == 2
    assert wake is not None
    assert wake <= 10.0
    clock.now += timedelta(seconds=11)
    loop.reconcile(ctx)
    assert _nodes(store, "a", "b", "c") == {"a": "", "b": "", "c": ""}
    timeouts = sorted(
        e.involved_object.name
        for e in _events(store)
        if e.message
        == "0/1 nodes are available: 1 rejected due to timeout after waiting 10s at plugin"
        " Coscheduling."
    )
    assert timeouts == ["a", "b"]  # (past their backoff, both are held again at once)


def test_a_pod_group_configures_its_gang(store: Store, clock: Clock) -> None:
    _cluster(store, 2)
    store.create(
        PodGroup(
            metadata=ObjectMeta(name="pg", namespace="default"), spec=PodGroupSpec(min_member=2)
        )
    )
    for name in ("a", "b"):
        pod = make_pod(name, cpu=1000)
        store.create(
            msgspec.structs.replace(
                pod,
                metadata=msgspec.structs.replace(pod.metadata, labels={k.LABEL_POD_GROUP: "pg"}),
            )
        )
    _loop().reconcile(LoopContext(store=store, now=clock))
    assert sorted(_nodes(store, "a", "b").values()) == ["n1", "n2"]
    assert _pod(store, "a").metadata.annotations[k.ANNOTATION_BIND_GANG_MEMBER_COUNT] == "2"


def test_a_recreated_gang_binds_again_with_its_own_member_count(store: Store, clock: Clock) -> None:
    _cluster(store, 3)
    for name in ("a", "b", "c"):
        store.create(gang_pod(name))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    for name in ("a", "b", "c"):
        store.delete(store.registry.for_type(Pod), name, "default")
    loop.reconcile(ctx)
    for name in ("d", "e"):
        store.create(gang_pod(name, min_available=2))
    clock.now += timedelta(seconds=1)
    loop.reconcile(ctx)
    assert sorted(_nodes(store, "d", "e").values()) == ["n1", "n2"]
    assert _pod(store, "d").metadata.annotations[k.ANNOTATION_BIND_GANG_MEMBER_COUNT] == "2"


def test_pods_outside_gangs_are_not_held(store: Store, clock: Clock) -> None:
    _cluster(store, 1)
    store.create(make_pod("plain", cpu=500))
    _loop().reconcile(LoopContext(store=store, now=clock))
    pod = _pod(store, "plain")
    assert pod.spec.node_name == "n1"
    assert k.ANNOTATION_BIND_GANG_GROUP_ID not in pod.metadata.annotations


@pytest.mark.parametrize(
    ("args", "field"),
    [({"defaultTimeout": "0s"}, "defaultTimeout"), ({"controllerWorkers": 0}, "controllerWorkers")],
)
def test_bad_args_name_the_field(args: dict[str, object], field: str) -> None:
    config = msgspec.structs.replace(
        GANG_PROFILE, plugin_config=(PluginConfig(name="Coscheduling", args=args),)
    )
    with pytest.raises(ProfileError, match=field):
        build_profile(config)


def test_default_args_are_the_documented_ones() -> None:
    plugin = build_profile(GANG_PROFILE).plugins["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    assert plugin.args.default_timeout_seconds == 600
    assert plugin.args.default_match_policy == "once-satisfied"
