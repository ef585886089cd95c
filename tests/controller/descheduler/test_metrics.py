"""The descheduler's metrics: koord-descheduler's eviction counter, durations, proposals, jobs."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from apis.scheduling import PodMigrationJob
from controller.descheduler.loop import DeschedulerLoop
from controller.descheduler.metrics import DeschedulerMetrics
from controller.loops import LoopContext
from controller.store.sqlite import Store
from tests.controller.descheduler.conftest import Clock, answered
from tests.controller.descheduler.test_loop import (
    TABLE,
    config_map,
    document,
    listing,
    setup_cluster,
)

EVICTED = "descheduler_pods_evicted"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def run(store: Store, clock: Clock, registry: CollectorRegistry, text: str) -> DeschedulerLoop:
    setup_cluster(store)
    store.create(config_map(text))
    loop = DeschedulerLoop(plugins=TABLE, metrics=DeschedulerMetrics(registry))
    loop.reconcile(LoopContext(store=store, now=clock))
    answered(store, loop)  # the counts follow the answers
    return loop


def evicted(registry: CollectorRegistry, result: str, namespace: str, node: str) -> float | None:
    labels = {"result": result, "strategy": "Pick", "namespace": namespace, "node": node}
    return registry.get_sample_value(EVICTED, labels)


def test_direct_evictions_count_as_success_under_koord_descheduler_s_name(
    store: Store, clock: Clock, registry: CollectorRegistry
) -> None:
    run(store, clock, registry, document(migration={"defaultJobMode": "EvictDirectly"}))
    assert evicted(registry, "success", "default", "node-a") == 1.0
    exposition = generate_latest(registry).decode()
    assert (
        'descheduler_pods_evicted{namespace="default",node="node-a",result="success",'
        'strategy="Pick"} 1.0'
    ) in exposition
    assert "descheduler_pods_evicted_total" not in exposition


def test_refusals_of_the_cycle_limits_are_counted_with_the_limit(
    store: Store, clock: Clock, registry: CollectorRegistry
) -> None:
    text = document(pods=("web-1", "other-1"), extra={"maxNoOfPodsToEvictPerNode": 1})
    run(store, clock, registry, text)
    assert evicted(registry, "maximum number of pods per node reached", "default", "node-b") == 1.0
    # ReservationFirst: the migration loop counts the eviction when it makes it.
    assert evicted(registry, "success", "default", "node-b") is None


def test_dry_run_proposals_are_counted(
    store: Store, clock: Clock, registry: CollectorRegistry
) -> None:
    run(store, clock, registry, document(dry_run=True))
    labels = {"strategy": "Pick", "namespace": "default", "node": "node-a"}
    assert registry.get_sample_value("descheduler_dry_run_proposals_total", labels) == 1.0
    assert evicted(registry, "success", "default", "node-a") is None


def test_plugin_and_cycle_durations_are_observed(
    store: Store, clock: Clock, registry: CollectorRegistry
) -> None:
    run(store, clock, registry, document(pods=()))
    labels = {"plugin": "Pick", "extension_point": "Balance", "profile": "test"}
    name = "descheduler_plugin_execution_duration_seconds_count"
    assert registry.get_sample_value(name, labels) == 1.0
    assert registry.get_sample_value("descheduler_cycle_duration_seconds_count") == 1.0


def test_the_job_gauge_follows_the_jobs_phases(
    store: Store, clock: Clock, registry: CollectorRegistry
) -> None:
    loop = run(store, clock, registry, document())

    def phase(name: str) -> float | None:
        return registry.get_sample_value("descheduler_pod_migration_jobs", {"phase": name})

    assert (phase("Pending"), phase("Succeeded")) == (1.0, 0.0)
    (job,) = listing(store, PodMigrationJob)
    store.update(
        msgspec.structs.replace(job, status=msgspec.structs.replace(job.status, phase="Succeeded"))
    )
    clock.now += timedelta(seconds=1)
    loop.reconcile(LoopContext(store=store, now=clock))
    assert (phase("Pending"), phase("Succeeded")) == (0.0, 1.0)


def test_the_migration_loop_can_count_its_evictions(registry: CollectorRegistry) -> None:
    metrics = DeschedulerMetrics(registry)
    metrics.evicted("error", strategy="LowNodeLoad", namespace="ns", node="n1")
    metrics.evicted("error", strategy="LowNodeLoad", namespace="ns", node="n1", count=2)
    labels = {"result": "error", "strategy": "LowNodeLoad", "namespace": "ns", "node": "n1"}
    assert registry.get_sample_value(EVICTED, labels) == 3.0
