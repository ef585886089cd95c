"""Pods rejected while they wait in Permit (gang members): what the loop writes into them.

kube-scheduler's binding cycle turns a rejection in Permit into the FitError of the one node
the pod was assumed on: the pod's ``PodScheduled`` condition is ``False`` reason
``Unschedulable`` with ``0/1 nodes are available: 1 <reason>.``, and the ``FailedScheduling``
Event carries the same message.
"""

from __future__ import annotations

import json
from datetime import timedelta

from apis.core import Event, Pod
from controller.loops import LoopContext
from controller.scheduler.explain import DIAGNOSIS_ANNOTATION
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.profile import build_profile
from controller.store.sqlite import Store
from tests.controller.scheduler import Clock, make_node
from tests.controller.scheduler.test_coscheduling_plugin import GANG_PROFILE, gang_pod

TIMEOUT = "rejected due to timeout after waiting 10s at plugin Coscheduling"


def _pod(store: Store, name: str) -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(pod, Pod)
    return pod


def _scheduled(pod: Pod) -> tuple[str, str, str]:
    [condition] = [c for c in pod.status.conditions if c.type == POD_SCHEDULED]
    return condition.status, condition.reason, condition.message


def _event_messages(store: Store, name: str) -> list[str]:
    return [
        e.message
        for e in store.list(store.registry.for_type(Event))[0]
        if isinstance(e, Event)
        and e.involved_object.name == name
        and e.reason == "FailedScheduling"
    ]


def _cluster(store: Store, nodes: int) -> None:
    for i in range(nodes):
        store.create(make_node(f"n{i + 1}", cpu=1000))


def _timed_out(store: Store, clock: Clock) -> SchedulerLoop:
    """A NonStrict gang of three with room for two: a and b wait, until their 10 s run out."""
    _cluster(store, 3)
    store.create(gang_pod("a", mode="NonStrict", waiting="10s"))
    store.create(gang_pod("b", mode="NonStrict", waiting="10s"))
    store.create(gang_pod("c", mode="NonStrict", waiting="10s", selector={"pool": "none"}))
    loop = SchedulerLoop([build_profile(GANG_PROFILE)])
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert loop.table.accounted == 2
    clock.now += timedelta(seconds=11)
    loop.reconcile(ctx)
    return loop


def test_a_wait_that_runs_out_marks_the_waiting_pods_unschedulable(
    store: Store, clock: Clock
) -> None:
    _timed_out(store, clock)
    expected = f"0/1 nodes are available: 1 {TIMEOUT}."
    for name in ("a", "b"):
        pod = _pod(store, name)
        assert pod.spec.node_name == ""
        assert _scheduled(pod) == ("False", "Unschedulable", expected)
        assert json.loads(pod.metadata.annotations[DIAGNOSIS_ANNOTATION]) == {
            "Coscheduling": {TIMEOUT: 1}
        }
        assert _event_messages(store, name) == [expected]


def test_a_condition_already_written_is_not_written_again(store: Store, clock: Clock) -> None:
    """A second timeout with the same words keeps the condition (and its transition time)."""
    loop = _timed_out(store, clock)
    first = _pod(store, "a")
    [before] = [c for c in first.status.conditions if c.type == POD_SCHEDULED]
    ctx = LoopContext(store=store, now=clock)
    clock.now += timedelta(seconds=2)  # past the backoff: a and b are held again
    loop.reconcile(ctx)
    clock.now += timedelta(seconds=11)
    loop.reconcile(ctx)
    again = _pod(store, "a")
    [after] = [c for c in again.status.conditions if c.type == POD_SCHEDULED]
    assert after == before
    assert again.metadata.resource_version == first.metadata.resource_version


def test_a_strict_gang_rejects_its_waiting_members_with_the_framework_s_wording(
    store: Store, clock: Clock
) -> None:
    _cluster(store, 3)
    store.create(gang_pod("a"))
    store.create(gang_pod("b"))
    store.create(gang_pod("c", selector={"pool": "none"}))
    SchedulerLoop([build_profile(GANG_PROFILE)]).reconcile(LoopContext(store=store, now=clock))
    prefix = '0/1 nodes are available: 1 Gang "default/g" gets rejected due to member Pod "c"'
    for name in ("a", "b"):
        status, reason, message = _scheduled(_pod(store, name))
        assert (status, reason) == ("False", "Unschedulable")
        assert message.startswith(prefix)
        assert message.endswith(".")
        assert _event_messages(store, name) == [message]
    # c itself failed in the scheduling cycle: its FitError counts the three nodes.
    assert _scheduled(_pod(store, "c"))[2].startswith("0/3 nodes are available:")


def test_a_rejected_member_bound_later_says_scheduled(store: Store, clock: Clock) -> None:
    loop = _timed_out(store, clock)
    store.create(make_node("n4", cpu=1000, labels={"pool": "none"}))
    clock.now += timedelta(seconds=2)
    loop.reconcile(LoopContext(store=store, now=clock))
    for name in ("a", "b", "c"):
        pod = _pod(store, name)
        assert pod.spec.node_name
        assert _scheduled(pod)[:2] == ("True", "")
        assert DIAGNOSIS_ANNOTATION not in pod.metadata.annotations
