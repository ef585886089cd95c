"""The scheduler's metrics, read back from the registry after loop passes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from apis.resources import ResourceList
from controller.loops import LoopContext
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.metrics import SchedulerMetrics
from controller.scheduler.profile import (
    DEFAULT_SCHEDULER,
    KOORD_SCHEDULER,
    ProfileConfig,
    WeightedPlugin,
    build_profile,
)
from controller.store.sqlite import Store
from tests.controller.reservations.builders import available
from tests.controller.scheduler import GI, make_node, make_pod


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened


def _loop(registry: CollectorRegistry, *, sample_every: int = 1) -> SchedulerLoop:
    config = ProfileConfig(
        aliases=(DEFAULT_SCHEDULER,),
        filter=("NodeUnschedulable", "NodeResourcesFit"),
        score=(WeightedPlugin(name="NodeResourcesFit"),),
    )
    metrics = SchedulerMetrics(registry, sample_every=sample_every)
    return SchedulerLoop([build_profile(config)], metrics=metrics)


def _value(registry: CollectorRegistry, metric: str, /, **labels: str) -> float:
    value = registry.get_sample_value(metric, labels)
    return 0.0 if value is None else value


def test_a_pass_is_counted(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=2000, memory=4 * GI))
    store.create(make_pod("fits", cpu=1000))
    store.create(make_pod("huge", cpu=8000))
    registry = CollectorRegistry()
    _loop(registry).reconcile(LoopContext(store=store, now=clock))

    profile = KOORD_SCHEDULER
    attempts = "scheduler_schedule_attempts_total"
    assert _value(registry, attempts, result="scheduled", profile=profile) == 1
    assert _value(registry, attempts, result="unschedulable", profile=profile) == 1
    assert _value(registry, "scheduler_pending_pods", queue="unschedulable") == 1
    assert _value(registry, "scheduler_pending_pods", queue="active") == 0
    unschedulable = "scheduler_unschedulable_pods"
    assert _value(registry, unschedulable, plugin="NodeResourcesFit", profile=profile) == 1
    incoming = "scheduler_queue_incoming_pods_total"
    assert _value(registry, incoming, queue="active", event="PodAdd") == 2
    assert _value(registry, incoming, queue="unschedulable", event="ScheduleAttemptFailure") == 1
    assert _value(registry, "scheduler_pod_scheduling_attempts_count") == 1
    assert _value(registry, "scheduler_scheduling_algorithm_duration_seconds_count") == 2
    duration = "scheduler_scheduling_attempt_duration_seconds_count"
    assert _value(registry, duration, result="scheduled", profile=profile) == 1
    assert _value(registry, duration, result="unschedulable", profile=profile) == 1
    # No PostFilter in this profile: nothing tried to preempt.
    assert _value(registry, "scheduler_preemption_attempts_total") == 0


def test_sampled_attempts_time_each_point_and_plugin(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=2000, memory=4 * GI))
    store.create(make_node("n2", cpu=2000, memory=4 * GI))
    store.create(make_pod("fits", cpu=1000))
    store.create(make_pod("huge", cpu=8000))
    registry = CollectorRegistry()
    _loop(registry).reconcile(LoopContext(store=store, now=clock))

    plugin = "scheduler_plugin_execution_duration_seconds_count"
    assert (
        _value(
            registry, plugin, plugin="NodeResourcesFit", extension_point="Filter", status="Success"
        )
        == 1
    )
    assert (
        _value(
            registry,
            plugin,
            plugin="NodeResourcesFit",
            extension_point="Filter",
            status="Unschedulable",
        )
        == 1
    )
    assert (
        _value(
            registry, plugin, plugin="NodeResourcesFit", extension_point="Score", status="Success"
        )
        == 1
    )
    point = "scheduler_framework_extension_point_duration_seconds_count"
    assert (
        _value(registry, point, extension_point="Filter", status="Success", profile=KOORD_SCHEDULER)
        == 1
    )
    assert (
        _value(
            registry,
            point,
            extension_point="Filter",
            status="Unschedulable",
            profile=KOORD_SCHEDULER,
        )
        == 1
    )


def test_unsampled_attempts_are_not_timed_per_plugin(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=8000, memory=8 * GI))
    for i in range(3):
        store.create(make_pod(f"p{i}", cpu=100))
    registry = CollectorRegistry()
    _loop(registry, sample_every=10).reconcile(LoopContext(store=store, now=clock))
    attempts = "scheduler_schedule_attempts_total"
    assert _value(registry, attempts, result="scheduled", profile=KOORD_SCHEDULER) == 3
    plugin = "scheduler_plugin_execution_duration_seconds_count"
    # The first attempt of ten is sampled; one feasible node means no Score.
    assert (
        _value(
            registry, plugin, plugin="NodeResourcesFit", extension_point="Filter", status="Success"
        )
        == 1
    )


def test_parked_pods_leave_the_gauge_once_placed(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=2000, memory=4 * GI, unschedulable=True))
    store.create(make_pod("waits", cpu=1000))
    registry = CollectorRegistry()
    loop = _loop(registry)
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    gauge = "scheduler_unschedulable_pods"
    assert _value(registry, gauge, plugin="NodeUnschedulable", profile=KOORD_SCHEDULER) == 1
    store.create(make_node("n2", cpu=2000, memory=4 * GI))
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert _value(registry, gauge, plugin="NodeUnschedulable", profile=KOORD_SCHEDULER) == 0
    assert _value(registry, "scheduler_pending_pods", queue="unschedulable") == 0
    released = "scheduler_queue_incoming_pods_total"
    assert _value(registry, released, queue="active", event="ClusterChange") == 1


def test_reservation_gauges_follow_the_store(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=8000, memory=8 * GI))
    store.create(
        available(
            "r1",
            allocatable=ResourceList({"cpu": 4000, "memory": 2 * GI}),
            allocated=ResourceList({"cpu": 1000}),
        )
    )
    registry = CollectorRegistry()
    _loop(registry).reconcile(LoopContext(store=store, now=clock))
    phase = "scheduler_reservation_status_phase"
    assert _value(registry, phase, name="r1", phase="Available") == 1
    assert _value(registry, phase, name="r1", phase="Pending") == 0
    resource = "scheduler_reservation_resource"
    labels = {"name": "r1", "resource": "cpu"}
    assert _value(registry, resource, type="allocatable", unit="core", **labels) == 4
    assert _value(registry, resource, type="allocated", unit="core", **labels) == 1
    assert _value(registry, resource, type="utilization", unit="ratio", **labels) == 0.25
    assert (
        _value(registry, resource, type="allocatable", name="r1", resource="memory", unit="Gi") == 2
    )
