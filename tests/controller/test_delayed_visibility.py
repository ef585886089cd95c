"""The loops' contract under delayed visibility (controller/store/cluster.py): their own writes
reach their snapshots late, and the invariants hold anyway.

The backend (:mod:`tests.controller.delayed`) hides each write a loop makes from the loops'
next snapshots; these tests check that it does, then run the invariant properties of the
scheduler (no node over-committed, over passes whose own binds are not yet visible) and of
queueing (no quota over max, one charge per admitted unit) over it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.core import Node, Pod, pod_requests
from controller.loops import LoopContext
from controller.scheduler.loop import SchedulerLoop
from tests.controller.delayed import delayed_store
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
        # The loop's next two snapshots still show the pod pending; the third shows it bound.
        seen = []
        for _ in range(3):
            loop.reconcile(LoopContext(store=store, now=lambda: NOW))
            after = store.get(pod_kind, "web", "default")
            assert after == bound  # bound once: the loop did not bind it again
            seen.append(store.delayed)
        assert seen == [1, 1, 1]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=nodes(), waves=st.lists(pods(), min_size=1, max_size=3), reads=st.integers(1, 3))
def test_no_node_is_overcommitted_while_the_loop_s_binds_are_not_yet_visible(
    cluster: list[Node], waves: list[list[Pod]], reads: int
) -> None:
    """Pods arrive in waves, a scheduling pass after each and more after the last; every
    bind stays out of the loop's next ``reads`` snapshots, so only what it assumed keeps it
    from placing pods on room it already gave away."""
    with delayed_store(clock=lambda: NOW, reads=reads) as store:
        for node in cluster:
            store.create(node)
        loop = SchedulerLoop()
        ctx = LoopContext(store=store, now=lambda: NOW)
        for number, wave in enumerate(waves):
            for pod in wave:
                meta = msgspec.structs.replace(pod.metadata, name=f"w{number}-{pod.metadata.name}")
                store.create(msgspec.structs.replace(pod, metadata=meta))
            loop.reconcile(ctx)
        for _ in range(reads + 1):
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
