"""DefaultPreemption on the scheduler loop: the fewest, lowest-priority victims make room."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest

from apis.core import Event, Pod
from controller.errors import NotFound
from controller.loops import LoopContext
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.profile import ProfileConfig, build_profile
from controller.store.sqlite import Store
from tests.controller.scheduler import Clock, make_node, make_pod

PREEMPTING = ProfileConfig(
    filter=("NodeUnschedulable", "NodeAffinity", "NodeResourcesFit"),
    post_filter=("DefaultPreemption",),
)


def _pod(store: Store, name: str) -> Pod | None:
    try:
        pod = store.get(store.registry.for_type(Pod), name, "default")
    except NotFound:
        return None
    assert isinstance(pod, Pod)
    return pod


def _bound(store: Store, name: str) -> str:
    pod = _pod(store, name)
    assert pod is not None
    return pod.spec.node_name


def _message(pod: Pod | None) -> str:
    assert pod is not None
    return next(c.message for c in pod.status.conditions if c.type == POD_SCHEDULED)


def _events(store: Store, reason: str) -> list[Event]:
    events = store.list(store.registry.for_type(Event))[0]
    return [e for e in events if isinstance(e, Event) and e.reason == reason]


def _cluster(store: Store) -> None:
    """n1: a priority-1 and a priority-5 pod; n2: one priority-3 pod; both full."""
    store.create(make_node("n1", cpu=2000))
    store.create(make_node("n2", cpu=2000))
    store.create(make_pod("low", cpu=1000, priority=1, node="n1"))
    store.create(make_pod("mid", cpu=1000, priority=5, node="n1"))
    store.create(make_pod("other", cpu=2000, priority=3, node="n2"))


def _loop() -> SchedulerLoop:
    return SchedulerLoop([build_profile(PREEMPTING)])


def test_a_higher_priority_pod_evicts_the_single_lowest_priority_pod(
    store: Store, clock: Clock
) -> None:
    _cluster(store)
    store.create(make_pod("high", cpu=1000, priority=10))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)

    high = _pod(store, "high")
    assert high is not None
    assert high.spec.node_name == ""
    assert high.status.nominated_node_name == "n1"
    assert _message(high) == "0/2 nodes are available: 2 Insufficient cpu."
    assert _pod(store, "low") is None
    assert _pod(store, "mid") is not None
    assert _pod(store, "other") is not None
    uid = high.metadata.uid

    clock.now += timedelta(seconds=2)  # past the first attempt's backoff
    loop.reconcile(ctx)
    high = _pod(store, "high")
    assert high is not None
    assert (high.spec.node_name, high.status.nominated_node_name) == ("n1", "")
    # recorded once the victim's delete was answered (a pass later on the delayed backend)
    (event,) = _events(store, "Preempted")
    assert (event.type, event.involved_object.name) == ("Normal", "low")
    assert event.message == f"Preempted by pod {uid} on node n1"


@pytest.mark.parametrize(
    ("priority", "policy", "preemption"),
    [
        (
            3,
            "",
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
        ),
        (
            5,
            "",
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
        ),
        (10, "Never", "preemption: not eligible due to preemptionPolicy=Never."),
    ],
    ids=["lower", "equal", "never"],
)
def test_no_preemption_without_a_lower_priority_victim_or_when_the_pod_says_never(
    store: Store, clock: Clock, priority: int, policy: str, preemption: str
) -> None:
    store.create(make_node("n1", cpu=2000))
    store.create(make_node("n2", cpu=2000))
    store.create(make_pod("x", cpu=2000, priority=5, node="n1"))
    store.create(make_pod("y", cpu=2000, priority=5, node="n2"))
    pod = make_pod("p", cpu=1000, priority=priority)
    if policy:
        pod = msgspec.structs.replace(
            pod, spec=msgspec.structs.replace(pod.spec, preemption_policy=policy)
        )
    store.create(pod)
    _loop().reconcile(LoopContext(store=store, now=clock))
    assert _bound(store, "x") == "n1"
    assert _bound(store, "y") == "n2"
    assert not _events(store, "Preempted")
    assert (
        _message(_pod(store, "p")) == f"0/2 nodes are available: 2 Insufficient cpu. {preemption}"
    )


def test_nodes_no_eviction_can_help_are_not_candidates(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=2000, labels={"pool": "a"}))
    store.create(make_node("n2", cpu=2000, labels={"pool": "b"}))
    store.create(make_pod("low", cpu=2000, priority=1, node="n2"))
    store.create(make_pod("high", cpu=1000, priority=10, selector={"pool": "a"}))
    store.create(make_pod("busy", cpu=2000, priority=20, node="n1"))
    _loop().reconcile(LoopContext(store=store, now=clock))
    assert _pod(store, "low") is not None
    assert _message(_pod(store, "high")) == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node"
        " affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims"
        " found for incoming pod, 1 Preemption is not helpful for scheduling."
    )


def test_the_nominated_pod_holds_its_room_against_lower_priority_pods(
    store: Store, clock: Clock
) -> None:
    _cluster(store)
    store.create(make_pod("high", cpu=1000, priority=10))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _pod(store, "low") is None
    # A new lower-priority pod arrives while the preemptor is still in its backoff.
    store.create(make_pod("sneaky", cpu=1000, priority=2))
    clock.now += timedelta(milliseconds=500)
    loop.reconcile(ctx)
    assert _bound(store, "sneaky") == ""
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert _bound(store, "high") == "n1"
    assert _bound(store, "sneaky") == ""
