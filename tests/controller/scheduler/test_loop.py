"""The scheduler loop on a memory store: binding, explanations, events, re-queueing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

import msgspec
import numpy as np
import pytest

from apis.core import Event, Node, Pod
from apis.kinds import default_registry
from controller.loops import ControlLoop, LoopContext
from controller.scheduler import framework as fw
from controller.scheduler.explain import DIAGNOSIS_ANNOTATION
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import DEFAULT_CONFIG, PLUGINS, PluginSpec, build_profile
from controller.scheduler.scheduling_queue import Where
from controller.simulate import simulate
from controller.store.snapshots import Snapshot
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, Clock, make_node, make_pod


def _pod(store: Store, name: str, namespace: str = "default") -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, namespace)
    assert isinstance(pod, Pod)
    return pod


def _events(store: Store) -> list[Event]:
    return [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]


def _condition(pod: Pod) -> tuple[str, str, str] | None:
    for c in pod.status.conditions:
        if c.type == POD_SCHEDULED:
            return (c.status, c.reason, c.message)
    return None


def _cluster(store: Store) -> None:
    for node in (
        make_node("n1", cpu=2000, memory=4 * GI),
        make_node("n2", cpu=2000, memory=4 * GI),
        make_node("n3", cpu=4000, memory=4 * GI, labels={"gpu": "yes"}),
    ):
        store.create(node)


def test_is_a_control_loop() -> None:
    assert isinstance(SchedulerLoop(), ControlLoop)
    assert SchedulerLoop().name == "scheduler"


def test_binds_what_fits_and_explains_what_does_not(store: Store, clock: Clock) -> None:
    _cluster(store)
    store.create(make_pod("small", cpu=1000, memory=GI))
    store.create(make_pod("gpu", cpu=500, selector={"gpu": "yes"}))
    store.create(make_pod("huge", cpu=8000))
    loop = SchedulerLoop()
    wait = loop.reconcile(LoopContext(store=store, now=clock))

    small, gpu, huge = (_pod(store, n) for n in ("small", "gpu", "huge"))
    assert small.spec.node_name == "n3"  # the emptiest node
    assert gpu.spec.node_name == "n3"
    assert _condition(small) == ("True", "", "")
    assert huge.spec.node_name == ""
    message = (
        "0/3 nodes are available: 3 Insufficient cpu."
        " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    assert _condition(huge) == ("False", "Unschedulable", message)
    assert json.loads(huge.metadata.annotations[DIAGNOSIS_ANNOTATION]) == {
        "NodeResourcesFit": {"Insufficient cpu": 3}
    }
    (event,) = _events(store)
    assert (event.type, event.reason, event.message) == ("Warning", "FailedScheduling", message)
    assert event.involved_object.name == "huge"
    assert wait == pytest.approx(300.0)  # only the parked pod waits (5 min at most)


def test_a_second_pass_changes_nothing(store: Store, clock: Clock) -> None:
    _cluster(store)
    store.create(make_pod("huge", cpu=8000))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    version = store.resource_version
    loop.reconcile(ctx)
    assert store.resource_version == version


def test_a_pass_stops_after_its_budget_and_the_next_continues(store: Store, clock: Clock) -> None:
    store.create(make_node("big", cpu=64_000, memory=64 * GI))
    for i in range(7):
        store.create(make_pod(f"p{i}", cpu=100, priority=100 - i))
    loop = SchedulerLoop(max_attempts=3)
    ctx = LoopContext(store=store, now=clock)

    def bound() -> set[str]:
        pods = store.list(store.registry.for_type(Pod))[0]
        return {p.metadata.name for p in pods if isinstance(p, Pod) and p.spec.node_name}

    assert loop.reconcile(ctx) == 0.0  # more to do: come back at once
    assert bound() == {"p0", "p1", "p2"}  # the first three in queue order
    assert loop.reconcile(ctx) == 0.0
    assert bound() == {f"p{i}" for i in range(6)}
    assert loop.reconcile(ctx) is None  # the last one; nothing left to wait for
    assert bound() == {f"p{i}" for i in range(7)}


def test_a_pass_budget_counts_unschedulable_attempts_too(store: Store, clock: Clock) -> None:
    store.create(make_node("small", cpu=1000))
    for i in range(4):
        store.create(make_pod(f"huge{i}", cpu=8000))
    loop = SchedulerLoop(max_attempts=3)
    ctx = LoopContext(store=store, now=clock)
    assert loop.reconcile(ctx) == 0.0
    assert loop.queue.counts()[Where.UNSCHEDULABLE] == 3
    assert loop.reconcile(ctx) == pytest.approx(300.0)  # all parked: the 5 min retry
    assert loop.queue.counts()[Where.UNSCHEDULABLE] == 4


@pytest.mark.parametrize("budget", [None, 1, 2, 1000])
def test_passes_of_any_budget_end_in_the_same_placements(budget: int | None) -> None:
    # One priority: no preemption (a pass's own placements are not yet victims to it).
    objects = [
        make_node("n1", cpu=2000),
        make_node("n2", cpu=3000),
        *(make_pod(f"p{i}", cpu=700 + 100 * (i % 3)) for i in range(8)),
    ]

    def scheduler() -> SchedulerLoop:
        return SchedulerLoop(max_attempts=budget)

    result = simulate(objects, max_time=timedelta(minutes=1), loops={"scheduler": scheduler})
    placed = {o.metadata.name: o.spec.node_name for o in result.objects if isinstance(o, Pod)}
    unlimited = simulate(
        objects,
        max_time=timedelta(minutes=1),
        loops={"scheduler": lambda: SchedulerLoop(max_attempts=None)},
    )
    expected = {o.metadata.name: o.spec.node_name for o in unlimited.objects if isinstance(o, Pod)}
    assert placed == expected
    assert 0 < sum(1 for node in placed.values() if node) < 8  # 5000m for 6400m of pods
    assert result.ended == result.started  # no simulated time spent on the passes


@pytest.mark.parametrize("budget", [0, -1])
def test_a_pass_budget_below_one_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        SchedulerLoop(max_attempts=budget)


def test_freed_resources_let_a_parked_pod_in(store: Store, clock: Clock) -> None:
    _cluster(store)
    store.create(make_pod("busy", cpu=3500, node="n3"))
    store.create(make_pod("wants", cpu=3000))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _pod(store, "wants").spec.node_name == ""
    store.delete(store.registry.for_type(Pod), "busy", "default")
    clock.now += timedelta(seconds=2)  # past the first attempt's 1 s backoff
    loop.reconcile(ctx)
    wants = _pod(store, "wants")
    assert wants.spec.node_name == "n3"
    assert _condition(wants) == ("True", "", "")
    assert DIAGNOSIS_ANNOTATION not in wants.metadata.annotations


def test_a_new_node_lets_a_parked_pod_in_after_its_backoff(store: Store, clock: Clock) -> None:
    _cluster(store)
    store.create(make_pod("wants", cpu=3000, selector={"pool": "new"}))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    store.create(make_node("n4", cpu=8000, labels={"pool": "new"}))
    wait = loop.reconcile(ctx)
    assert _pod(store, "wants").spec.node_name == ""
    assert wait == pytest.approx(1.0)
    clock.now += timedelta(seconds=1)
    loop.reconcile(ctx)
    assert _pod(store, "wants").spec.node_name == "n4"


def test_pods_of_other_schedulers_are_left_alone(store: Store, clock: Clock) -> None:
    _cluster(store)
    store.create(make_pod("theirs", cpu=100, scheduler="volcano"))
    store.create(make_pod("default", cpu=100, scheduler="default-scheduler"))
    store.create(make_pod("unnamed", cpu=100, scheduler=""))
    SchedulerLoop().reconcile(LoopContext(store=store, now=clock))
    assert _pod(store, "theirs").spec.node_name == ""
    assert _pod(store, "theirs").status.conditions == ()
    assert _pod(store, "default").spec.node_name != ""
    assert _pod(store, "unnamed").spec.node_name != ""


def test_assigned_and_finished_pods_count_correctly(store: Store, clock: Clock) -> None:
    _cluster(store)
    store.create(make_pod("running", cpu=2000, node="n1"))
    store.create(make_pod("done", cpu=2000, node="n2", phase="Succeeded"))
    store.create(make_pod("new", cpu=1500))
    store.create(make_pod("newer", cpu=1500))
    loop = SchedulerLoop()
    loop.reconcile(LoopContext(store=store, now=clock))
    placed = {_pod(store, n).spec.node_name for n in ("new", "newer")}
    assert placed == {"n2", "n3"}  # n1 is full; the finished pod holds nothing on n2
    assert loop.table.pod_count.tolist() == [1, 1, 1]


def test_higher_priority_pods_go_first(store: Store, clock: Clock) -> None:
    store.create(make_node("only", cpu=1000))
    store.create(make_pod("low", cpu=1000, priority=1))
    store.create(make_pod("high", cpu=1000, priority=100))
    SchedulerLoop().reconcile(LoopContext(store=store, now=clock))
    assert _pod(store, "high").spec.node_name == "only"
    assert _pod(store, "low").spec.node_name == ""


def test_repeated_failures_update_the_condition_only_when_it_changes(
    store: Store, clock: Clock
) -> None:
    _cluster(store)
    store.create(make_pod("huge", cpu=8000))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    first = _pod(store, "huge")
    clock.now += timedelta(minutes=5)
    loop.reconcile(ctx)
    again = _pod(store, "huge")
    assert again.metadata.resource_version == first.metadata.resource_version
    (event,) = _events(store)
    assert event.count == 2
    store.create(make_node("n4", cpu=1000))
    clock.now += timedelta(seconds=5)
    loop.reconcile(ctx)
    assert _condition(_pod(store, "huge")) == (
        "False",
        "Unschedulable",
        "0/4 nodes are available: 4 Insufficient cpu."
        " preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod.",
    )


def test_nodes_without_changes_in_scheduling_fields_do_not_rebuild(
    store: Store, clock: Clock
) -> None:
    _cluster(store)
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    table = loop.table.allocatable
    node = store.get(store.registry.for_type(Node), "n1")
    assert isinstance(node, Node)
    store.update(
        node.__class__(
            metadata=node.metadata.__class__(
                name="n1",
                labels=node.metadata.labels,
                annotations={"heartbeat": "1"},
                resource_version=node.metadata.resource_version,
            ),
            spec=node.spec,
            status=node.status,
        )
    )
    loop.reconcile(ctx)
    assert loop.table.allocatable is table


def test_runs_under_simulate_and_retries_parked_pods_every_five_minutes() -> None:
    objects = [
        make_node("n1", cpu=2000),
        make_node("n2", cpu=2000),
        make_pod("a", cpu=1500),
        make_pod("b", cpu=1500),
        make_pod("c", cpu=1500),
    ]
    result = simulate(objects, max_time=timedelta(minutes=30), loops={"scheduler": SchedulerLoop})
    pods = {o.metadata.name: o for o in result.objects if isinstance(o, Pod)}
    assert {pods["a"].spec.node_name, pods["b"].spec.node_name} == {"n1", "n2"}
    assert _condition(pods["c"]) == (
        "False",
        "Unschedulable",
        "0/2 nodes are available: 2 Insufficient cpu."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
    )
    (event,) = [o for o in result.objects if isinstance(o, Event)]
    assert event.count == 7  # the first attempt, then one every 5 minutes for 30 minutes


def test_gated_pods_wait_for_their_gates(store: Store, clock: Clock) -> None:
    _cluster(store)
    gated = make_pod("gated", cpu=100)
    gated = msgspec.structs.replace(
        gated,
        spec=msgspec.structs.replace(gated.spec, scheduling_gates=({"name": "example.com/q"},)),
    )
    store.create(gated)
    SchedulerLoop().reconcile(LoopContext(store=store, now=clock))
    assert _pod(store, "gated").spec.node_name == ""
    assert _events(store) == []


@dataclass
class DeviceGate:
    """A filter fed from the snapshot: nodes pass once an annotation says their device is up."""

    name: str = "DeviceGate"
    ready: frozenset[str] = frozenset()
    syncs: int = 0

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        self.syncs += 1
        nodes = snapshot.objects(default_registry().for_type(Node))
        ready = frozenset(n.metadata.name for n in nodes if n.metadata.annotations.get("dev"))
        changed = ready != self.ready
        self.ready = ready
        return changed

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        down = np.array([name not in self.ready for name in table.names], dtype=np.bool_)
        return fw.FilterResult.reject_where(candidates, down, "node(s) device not ready")


def test_cluster_state_plugins_sync_each_pass_and_can_release_pods(
    store: Store, clock: Clock
) -> None:
    gate = DeviceGate()
    registry = {**PLUGINS, "DeviceGate": PluginSpec(fw.NoArgs, lambda _args: gate)}
    config = msgspec.structs.replace(DEFAULT_CONFIG, filter=(*DEFAULT_CONFIG.filter, "DeviceGate"))
    loop = SchedulerLoop([build_profile(config, registry)])
    ctx = LoopContext(store=store, now=clock)
    _cluster(store)
    store.create(make_pod("p", cpu=100))
    loop.reconcile(ctx)
    assert _condition(_pod(store, "p")) == (
        "False",
        "Unschedulable",
        "0/3 nodes are available: 3 node(s) device not ready."
        " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
    )
    node = store.get(store.registry.for_type(Node), "n2")
    assert isinstance(node, Node)
    store.update(
        msgspec.structs.replace(
            node, metadata=msgspec.structs.replace(node.metadata, annotations={"dev": "up"})
        )
    )
    clock.now += timedelta(seconds=1)
    loop.reconcile(ctx)
    assert _pod(store, "p").spec.node_name == "n2"
    assert gate.syncs == 2
