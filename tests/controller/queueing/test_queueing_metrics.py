"""The queueing metrics as Prometheus serves them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from controller.queueing.metrics import QueueingMetrics, QueueingSnapshot, QuotaStatusSample

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GI = 1 << 30


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> QueueingMetrics:
    return QueueingMetrics(registry)


TEAM_A = QuotaStatusSample(
    name="team-a",
    tree="tree-1",
    parent="dept",
    used={"cpu": 4000, "memory": 8 * GI},
    runtime={"cpu": 6000},
    request={"cpu": 10000},
    min={"cpu": 4000},
    max={"cpu": 8000},
)
DEPT = QuotaStatusSample(name="dept", tree="tree-1", is_parent=True, parent="root", max={"cpu": 1})


def status(registry: CollectorRegistry, name: str, resource: str, field: str) -> float | None:
    quota = {"team-a": TEAM_A, "dept": DEPT}[name]
    labels = {
        "name": name,
        "resource": resource,
        "tree": quota.tree,
        "is_parent": "true" if quota.is_parent else "false",
        "parent": quota.parent,
        "field": field,
    }
    return registry.get_sample_value("scheduler_elastic_quota_status", labels)


@pytest.mark.parametrize(
    ("name", "resource", "field", "value"),
    [
        ("team-a", "cpu", "used", 4000.0),
        ("team-a", "memory", "used", float(8 * GI)),
        ("team-a", "cpu", "runtime", 6000.0),
        ("team-a", "cpu", "request", 10000.0),
        ("team-a", "cpu", "min", 4000.0),
        ("team-a", "cpu", "max", 8000.0),
        ("dept", "cpu", "max", 1.0),
        ("team-a", "memory", "max", None),
    ],
)
def test_quota_status_gauge(
    registry: CollectorRegistry,
    metrics: QueueingMetrics,
    name: str,
    resource: str,
    field: str,
    value: float | None,
) -> None:
    metrics.observe(QueueingSnapshot(quotas=(TEAM_A, DEPT)))
    assert status(registry, name, resource, field) == value


def test_removed_quota_and_queue_disappear(
    registry: CollectorRegistry, metrics: QueueingMetrics
) -> None:
    metrics.observe(
        QueueingSnapshot(active={"team-a": 3, "dept": 1}, backoff={"team-a": 2}, quotas=(TEAM_A,))
    )
    active = "queueunits_in_active_queue"
    assert registry.get_sample_value(active, {"queue": "team-a"}) == 3
    assert registry.get_sample_value("queueunits_in_backoff_queue", {"queue": "team-a"}) == 2
    assert status(registry, "team-a", "cpu", "used") == 4000
    metrics.observe(QueueingSnapshot(active={"dept": 0}))
    assert registry.get_sample_value(active, {"queue": "team-a"}) is None
    assert registry.get_sample_value(active, {"queue": "dept"}) == 0
    assert status(registry, "team-a", "cpu", "used") is None


def test_attempts_by_queue_and_result(
    registry: CollectorRegistry, metrics: QueueingMetrics
) -> None:
    metrics.attempt("team-a", "scheduled", filter_seconds=0.002)
    metrics.attempt("team-a", "unschedulable", filter_seconds=0.5)
    metrics.attempt("team-a", "unschedulable")
    metrics.attempt("team-b", "error")
    counts = {
        (queue, result): registry.get_sample_value(
            "job_schedule_attempts_total", {"queue": queue, "result": result}
        )
        for queue, result in [
            ("team-a", "scheduled"),
            ("team-a", "unschedulable"),
            ("team-b", "error"),
        ]
    }
    assert counts == {
        ("team-a", "scheduled"): 1,
        ("team-a", "unschedulable"): 2,
        ("team-b", "error"): 1,
    }
    latency = "job_scheduling_algorithm_latency"
    assert registry.get_sample_value(f"{latency}_count") == 2
    assert registry.get_sample_value(f"{latency}_sum") == pytest.approx(502.0)
    with pytest.raises(ValueError, match="result"):
        metrics.attempt("team-a", "maybe")


def test_admission_latency_from_creation(
    registry: CollectorRegistry, metrics: QueueingMetrics
) -> None:
    metrics.admitted(NOW - timedelta(minutes=2), NOW)
    metrics.admitted(None, NOW)
    name = "queueunit_admission_latency_seconds"
    assert registry.get_sample_value(f"{name}_count") == 1
    assert registry.get_sample_value(f"{name}_sum") == 120.0
    assert registry.get_sample_value(f"{name}_bucket", {"le": "102.4"}) == 0
    assert registry.get_sample_value(f"{name}_bucket", {"le": "409.6"}) == 1
