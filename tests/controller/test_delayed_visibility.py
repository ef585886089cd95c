"""The loops' contract under delayed visibility (controller/store/cluster.py): their own writes
reach their snapshots late, and the invariants hold anyway.

The backend (:mod:`tests.controller.delayed`) hides each write a loop makes from the loops'
next snapshots; these tests check that it does, then run the invariant properties of the
scheduler (no node over-committed, over passes whose own binds are not yet visible) and of
queueing (no quota over max, one charge per admitted unit) over it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.core import Node, Pod, pod_requests
from controller.errors import Conflict
from controller.loops import LoopContext
from controller.scheduler.loop import SchedulerLoop
from controller.store.writes import Pending, Verb, Write
from tests.controller.delayed import DelayedStore, delayed_store, mark_loops
from tests.controller.queueing.conftest import Clock, Harness
from tests.controller.queueing.test_properties import Step, Tree, run, steps, trees
from tests.controller.scheduler import make_node, make_pod
from tests.controller.scheduler.test_properties import nodes, pods

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_loop_s_own_write_reaches_its_snapshots_late_and_the_test_at_once() -> None:
    with delayed_store(clock=lambda: NOW, reads=2) as store:
        pod_kind = store.registry.for_type(Pod)
        store.create(make_node("n1", cpu=4000))
        store.create(make_pod("web", cpu=1000))
        loop = SchedulerLoop()
        loop.reconcile(LoopContext(store=store, now=lambda: NOW))
        bound = store.get(pod_kind, "web", "default")
        assert isinstance(bound, Pod)
        assert bound.spec.node_name == "n1"  # the test reads what was committed
        assert store.delayed == 1
        assert store.late == 1  # the bind's result reached the loop a snapshot later
        # The loop's next two snapshots still show the pod pending; the third shows it bound.
        seen = []
        for _ in range(3):
            loop.reconcile(LoopContext(store=store, now=lambda: NOW))
            after = store.get(pod_kind, "web", "default")
            assert after == bound  # bound once: the loop did not bind it again
            seen.append(store.delayed)
        assert seen == [1, 1, 1]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=nodes(),
    waves=st.lists(pods(), min_size=1, max_size=3),
    reads=st.integers(1, 3),
    results_after=st.integers(0, 3),
)
def test_no_node_is_overcommitted_while_the_loop_s_binds_are_not_yet_visible(
    cluster: list[Node], waves: list[list[Pod]], reads: int, results_after: int
) -> None:
    """Pods arrive in waves, a scheduling pass after each and more after the last; every
    bind stays out of the loop's next ``reads`` snapshots and its result arrives
    ``results_after`` snapshots late, so only what it assumed keeps it from placing pods on
    room it already gave away."""
    with delayed_store(clock=lambda: NOW, reads=reads, results_after=results_after) as store:
        for node in cluster:
            store.create(node)
        loop = SchedulerLoop()
        ctx = LoopContext(store=store, now=lambda: NOW)
        for number, wave in enumerate(waves):
            for pod in wave:
                meta = msgspec.structs.replace(pod.metadata, name=f"w{number}-{pod.metadata.name}")
                store.create(msgspec.structs.replace(pod, metadata=meta))
            loop.reconcile(ctx)
        for _ in range(max(reads, results_after) + 1):
            loop.reconcile(ctx)
        stored = [p for p in store.list(store.registry.for_type(Pod))[0] if isinstance(p, Pod)]
    by_name = {n.metadata.name: n for n in cluster}
    used: dict[str, dict[str, int]] = {name: {} for name in by_name}
    count = dict.fromkeys(by_name, 0)
    for pod in stored:
        if pod.spec.node_name:
            count[pod.spec.node_name] += 1
            for resource, amount in pod_requests(pod).items():
                on = used[pod.spec.node_name]
                on[resource] = on.get(resource, 0) + amount
    for name, node in by_name.items():
        assert count[name] <= node.allocatable["pods"]
        for resource, amount in used[name].items():
            assert amount <= node.allocatable.get(resource, 0), (name, resource, amount)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree=trees(),
    plan=st.lists(steps, min_size=1, max_size=10),
    policy=st.sampled_from(["Priority", "Block", "Intelligent"]),
    restart_at=st.integers(0, 12),
)
def test_queueing_never_exceeds_max_nor_charges_twice_while_its_writes_are_not_yet_visible(
    tree: Tree, plan: list[Step], policy: str, restart_at: int
) -> None:
    """The queueing property (no quota level over its max; the ledger is exactly what the
    admitted units hold, one charge each), after every step, over the delayed backend."""
    clock = Clock()
    with delayed_store(clock=clock) as store:
        run(Harness(store, clock), tree, plan, policy, restart_at)


class _RefusedBinds(DelayedStore):
    """Refuses the first ``refuse`` binds a loop sends (Conflict, as when the pod changed
    since it was read), nothing of them stored; the answer arrives late, as every result."""

    def __init__(self, *, refuse: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.refuse = refuse

    def write(self, writes: Sequence[Write]) -> Pending:
        if not any(w.verb is Verb.BIND for w in writes) or self.refuse <= 0:
            return super().write(writes)
        refused = [w.verb is Verb.BIND for w in writes]
        self.refuse -= 1
        kept = super().write([w for w, r in zip(writes, refused, strict=True) if not r])
        late = Pending()

        def answer(done: Pending) -> None:
            results = iter(done.results())
            late.resolve(
                Conflict("the object has been modified") if r else next(results) for r in refused
            )

        kept.add_done_callback(answer)
        return late


def test_a_bind_refused_late_gives_its_room_back_and_the_pod_is_bound_once() -> None:
    """The scheduler assumes a pod on the only node that fits it and sends the bind; the
    refusal arrives a pass later. Until then the room stays taken (a second pod waits), then
    the first is unreserved and backed off, and in the end each pod is bound once."""
    with pytest.MonkeyPatch.context() as patch:
        mark_loops(patch)
        with _RefusedBinds(refuse=1, clock=lambda: NOW, reads=1, results_after=1) as store:
            pod_kind = store.registry.for_type(Pod)
            store.create(make_node("n1", cpu=1000))
            store.create(make_pod("first", cpu=1000))
            clock = {"now": NOW}
            ctx = LoopContext(store=store, now=lambda: clock["now"])
            loop = SchedulerLoop()
            loop.reconcile(ctx)  # first assumed on n1, its bind in flight
            assert loop.table.placed(_uid(store, "first")) is not None
            store.create(make_pod("second", cpu=1000))
            loop.reconcile(ctx)  # the refusal arrives: first is unreserved and backed off
            assert loop.table.placed(_uid(store, "first")) is None
            for _ in range(8):
                clock["now"] += timedelta(seconds=5)  # past every backoff
                loop.reconcile(ctx)
            bound = [
                p.metadata.name
                for p in store.list(pod_kind)[0]
                if isinstance(p, Pod) and p.spec.node_name == "n1"
            ]
            assert len(bound) == 1  # one 1-CPU pod on the 1-CPU node, never two
            assert store.refuse == 0


def _uid(store: DelayedStore, name: str) -> str:
    return store.get(store.registry.for_type(Pod), name, "default").metadata.uid
