"""The order pods are tried in: kube-scheduler's PrioritySort, as v1.8's koord-scheduler uses it.

The profile of Koordinator v1.8's chart (``koord-scheduler-config``) disables every queue sort
plugin but ``PrioritySort``: ``spec.priority`` first (0 for a pod without one), then the time
the pod entered the queue. Each test below has a node with room for one pod only, so the pod
tried first is the one bound.
"""

from __future__ import annotations

from datetime import timedelta

import msgspec

from apis.core import Event, Pod
from controller.loops import LoopContext
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.scheduling_queue import SchedulingQueue
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, Clock, make_node, make_pod


def _pod(store: Store, name: str) -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(pod, Pod)
    return pod


def _with_class(pod: Pod, name: str) -> Pod:
    return msgspec.structs.replace(
        pod, spec=msgspec.structs.replace(pod.spec, priority_class_name=name)
    )


def _bound(store: Store, *names: str) -> dict[str, str]:
    return {name: _pod(store, name).spec.node_name for name in names}


def _one_slot(store: Store) -> None:
    store.create(make_node("n1", cpu=1000, memory=4 * GI))


def _run(store: Store, clock: Clock) -> SchedulerLoop:
    loop = SchedulerLoop()
    loop.reconcile(LoopContext(store=store, now=clock))
    return loop


def test_a_priority_zero_pod_created_first_goes_before_a_later_one_without_priority(
    store: Store, clock: Clock
) -> None:
    """Both have priority 0 (no priority class is 0, not a koord-prod default): the one
    created first is tried first, whatever the names say."""
    _one_slot(store)
    store.create(make_pod("z-first", cpu=1000, priority=0))
    store.create(make_pod("a-later", cpu=1000))
    _run(store, clock)
    assert _bound(store, "z-first", "a-later") == {"z-first": "n1", "a-later": ""}


def test_a_higher_priority_goes_first_without_preempting_the_older_pod(
    store: Store, clock: Clock
) -> None:
    """A pod of priority 100 created after a pod without priority is bound first; the older
    pod is left pending, not bound and then preempted."""
    _one_slot(store)
    store.create(make_pod("older", cpu=1000))
    store.create(make_pod("urgent", cpu=1000, priority=100))
    _run(store, clock)
    assert _bound(store, "older", "urgent") == {"older": "", "urgent": "n1"}
    events = store.list(store.registry.for_type(Event))[0]
    assert not [e for e in events if isinstance(e, Event) and e.reason == "Preempted"]


def test_a_koordinator_priority_class_goes_before_no_priority_class(
    store: Store, clock: Clock
) -> None:
    """``priorityClassName: koord-batch`` (5500 by default) before a pod without a class."""
    _one_slot(store)
    store.create(make_pod("a-plain", cpu=1000))
    store.create(_with_class(make_pod("z-batch", cpu=1000), "koord-batch"))
    _run(store, clock)
    assert _bound(store, "a-plain", "z-batch") == {"a-plain": "", "z-batch": "n1"}


def test_among_equal_priorities_the_pod_queued_first_goes_first(store: Store, clock: Clock) -> None:
    """A pod queued a pass earlier goes before an older pod that became pending later."""
    _one_slot(store)
    store.create(make_pod("gated-older", cpu=1000))
    gated = _pod(store, "gated-older")
    store.update(
        msgspec.structs.replace(
            gated, spec=msgspec.structs.replace(gated.spec, scheduler_name="someone-else")
        )
    )
    clock.now += timedelta(seconds=5)
    store.create(make_pod("blocker", cpu=2000))  # no fit: queued now, parked
    loop = _run(store, clock)
    assert loop.queue.entry("default/blocker") is not None
    # Handed to koord-scheduler after the blocker was queued.
    store.update(
        msgspec.structs.replace(
            _pod(store, "gated-older"),
            spec=msgspec.structs.replace(gated.spec, scheduler_name="koord-scheduler"),
        )
    )
    # The blocker, changed to fit, is released: it entered the queue before gated-older.
    blocker = _pod(store, "blocker")
    store.update(
        msgspec.structs.replace(
            blocker,
            spec=msgspec.structs.replace(
                blocker.spec,
                containers=make_pod("blocker", cpu=1000).spec.containers,
            ),
        )
    )
    clock.now += timedelta(seconds=1)
    loop.reconcile(LoopContext(store=store, now=clock))
    assert _bound(store, "gated-older", "blocker") == {"gated-older": "", "blocker": "n1"}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pod_back_from_a_failed_attempt_goes_behind_those_waiting() -> None:
    """kube-scheduler stamps a pod the time it re-enters the queue after a failure: an older
    pod that just failed goes after a younger one that has been waiting since."""
    clock = _Clock()
    queue = SchedulingQueue(clock)
    queue.add(make_pod("old"))
    queue.add(make_pod("young"))
    (first,) = queue.pop_ready(1)
    assert first.key == "default/old"
    clock.now += 2  # past its 1 s backoff when it fails
    queue.backoff(first.key)
    assert [e.key for e in queue.pop_ready()] == ["default/young", "default/old"]


def test_the_same_instant_falls_back_to_creation_order() -> None:
    """Pods queued together (a restart, a scenario) go in the order they were created."""
    clock = _Clock()
    queue = SchedulingQueue(clock)
    for version, name in ((7, "c"), (3, "b"), (5, "a")):
        pod = make_pod(name)
        queue.add(
            msgspec.structs.replace(
                pod, metadata=msgspec.structs.replace(pod.metadata, resource_version=str(version))
            )
        )
    assert [e.key for e in queue.pop_ready()] == ["default/b", "default/a", "default/c"]
