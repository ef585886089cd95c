"""Properties of scheduling a random batch onto random nodes: nothing over-committed, and
every bound pod satisfies its selector, affinity and taints."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.core import Node, Pod, Taint, Toleration, pod_requests
from controller.loops import LoopContext
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.plugins.nodeaffinity import selector_matches
from controller.scheduler.plugins.tainttoleration import tolerated
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, expr, make_node, make_pod

ZONES = ("a", "b", "c")
TAINTS = (
    Taint(key="dedicated", value="gpu", effect="NoSchedule"),
    Taint(key="maint", value="", effect="NoExecute"),
    Taint(key="spot", value="true", effect="PreferNoSchedule"),
)
CORDON = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")
TOLERATIONS = (
    Toleration(key="dedicated", operator="Exists"),
    Toleration(key="maint", operator="Equal", value=""),
    Toleration(operator="Exists"),
)


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    count = draw(st.integers(1, 6))
    return [
        make_node(
            f"n{i}",
            cpu=draw(st.sampled_from((1000, 2000, 4000))),
            memory=draw(st.sampled_from((1, 2, 4))) * GI,
            pods=draw(st.integers(1, 5)),
            extra=draw(st.sampled_from(({}, {"nvidia.com/gpu": 2}))),
            labels={"zone": draw(st.sampled_from(ZONES))},
            taints=draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique=True)),
            unschedulable=draw(st.booleans()) and draw(st.booleans()),
        )
        for i in range(count)
    ]


@st.composite
def pods(draw: st.DrawFn) -> list[Pod]:
    count = draw(st.integers(1, 15))
    made = []
    for i in range(count):
        zone = draw(st.sampled_from((None, *ZONES)))
        required = draw(
            st.sampled_from(
                (
                    None,
                    [[expr("zone", "NotIn", "a")]],
                    [[expr("zone", "In", "b")], [expr("zone", "In", "c")]],
                )
            )
        )
        made.append(
            make_pod(
                f"p{i}",
                cpu=draw(st.sampled_from((0, 250, 500, 1000, 1500))),
                memory=draw(st.sampled_from((0, GI // 2, GI))),
                extra=draw(st.sampled_from(({}, {}, {"nvidia.com/gpu": 1}))),
                selector={"zone": zone} if zone else None,
                required=required,
                tolerations=draw(st.lists(st.sampled_from(TOLERATIONS), max_size=2)),
                priority=draw(st.integers(0, 3)),
            )
        )
    return made


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=nodes(), batch=pods())
def test_no_node_overcommitted_and_every_placement_allowed(
    cluster: list[Node], batch: list[Pod]
) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with Store(clock=lambda: now) as store:
        for node in cluster:
            store.create(node)
        for pod in batch:
            store.create(pod)
        SchedulerLoop().reconcile(LoopContext(store=store, now=lambda: now))
        stored = [p for p in store.list(store.registry.for_type(Pod))[0] if isinstance(p, Pod)]
    by_name = {n.metadata.name: n for n in cluster}
    used: dict[str, dict[str, int]] = {name: {} for name in by_name}
    count = dict.fromkeys(by_name, 0)
    for pod in stored:
        name = pod.spec.node_name
        if not name:
            continue
        node = by_name[name]
        count[name] += 1
        for resource, amount in pod_requests(pod).items():
            used[name][resource] = used[name].get(resource, 0) + amount
        labels = node.metadata.labels
        assert all(labels.get(k) == v for k, v in pod.spec.node_selector.items())
        affinity = pod.spec.affinity.node_affinity if pod.spec.affinity else None
        required = (
            affinity.required_during_scheduling_ignored_during_execution if affinity else None
        )
        assert required is None or selector_matches(required, labels, name)
        for taint in node.spec.taints:
            if taint.effect in ("NoSchedule", "NoExecute"):
                assert tolerated(pod.spec.tolerations, taint)
        if node.spec.unschedulable:
            assert tolerated(pod.spec.tolerations, CORDON)
    for name, node in by_name.items():
        assert count[name] <= node.allocatable["pods"]
        for resource, amount in used[name].items():
            assert amount <= node.allocatable.get(resource, 0), (name, resource)
