"""The ``migration`` loop's token buckets: ``evictQPS``/``evictBurst`` and ``objectLimiters``
(controller-spec §6.2)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.duration import Duration
from controller.descheduler.evictor import MigrationControllerArgs, ObjectLimiter
from controller.descheduler.migrationrates import (
    DEFAULT_OBJECT_RATES,
    EvictionBuckets,
    MigrationRates,
    ObjectRate,
    object_rates,
)
from tests.controller.descheduler.conftest import T0, make_pod, replicaset


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


@pytest.mark.parametrize(
    ("qps", "burst", "taken_at_once", "next_in"),
    [
        pytest.param(10.0, 1, 1, 0.1, id="default-10qps-burst-1"),
        pytest.param(2.0, 3, 3, 0.5, id="burst-3"),
        pytest.param(0.5, 1, 1, 2.0, id="below-one-a-second"),
    ],
)
def test_the_eviction_bucket_allows_its_burst_then_says_when(
    qps: float, burst: int, taken_at_once: int, next_in: float
) -> None:
    rates = MigrationRates(qps=qps, burst=burst)
    taken = 0
    while rates.take_eviction(T0) is None:
        taken += 1
    assert taken == taken_at_once
    due = rates.take_eviction(T0)
    assert due is not None
    assert (due - T0).total_seconds() == pytest.approx(next_in, abs=1e-3)
    # Not a moment before, and at once when due.
    assert rates.take_eviction(due - timedelta(milliseconds=10)) is not None
    assert rates.take_eviction(due) is None


def test_evict_qps_0_is_no_limit() -> None:
    rates = MigrationRates(qps=0.0, burst=0)
    assert all(rates.take_eviction(T0) is None for _ in range(1000))


@settings(max_examples=150, deadline=None)
@given(
    qps=st.sampled_from([0.5, 1.0, 3.0, 10.0]),
    burst=st.integers(min_value=1, max_value=4),
    gaps=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=60),
)
def test_evictions_never_outrun_the_bucket(qps: float, burst: int, gaps: list[int]) -> None:
    """Over any run of attempts, the evictions taken are at most the burst plus what the
    rate refills over the elapsed time."""
    rates = MigrationRates(qps=qps, burst=burst)
    now = T0
    taken = 0
    for gap in gaps:
        now += timedelta(milliseconds=gap)
        if rates.take_eviction(now) is None:
            taken += 1
    elapsed = (now - T0).total_seconds()
    assert taken <= burst + qps * elapsed + 1e-9


@pytest.mark.parametrize(
    ("objects", "pods", "workload_max", "started", "held_by"),
    [
        pytest.param(
            DEFAULT_OBJECT_RATES,
            [("a", "default", "web"), ("b", "default", "web")],
            1,
            ["a"],
            "objectLimiters.workload",
            id="default-workload-1-per-5m",
        ),
        pytest.param(
            DEFAULT_OBJECT_RATES,
            [("a", "default", "web"), ("b", "default", "db")],
            1,
            ["a", "b"],
            "",
            id="one-bucket-per-workload",
        ),
        pytest.param(
            DEFAULT_OBJECT_RATES,
            [("a", "default", ""), ("b", "default", "")],
            1,
            ["a", "b"],
            "",
            id="bare-pods-have-no-workload",
        ),
        pytest.param(
            (ObjectRate("workload", _seconds(60), max_migrating=4, burst=2),),
            [("a", "default", "web"), ("b", "default", "web"), ("c", "default", "web")],
            1,
            ["a", "b"],
            "objectLimiters.workload",
            id="burst-2",
        ),
        pytest.param(
            (ObjectRate("namespace", _seconds(60), max_migrating=1),),
            [("a", "ns1", "web"), ("b", "ns1", "db"), ("c", "ns2", "web")],
            1,
            ["a", "c"],
            "objectLimiters.namespace",
            id="per-namespace",
        ),
        pytest.param(
            (ObjectRate("namespace", _seconds(60)),),
            [("a", "ns1", "web"), ("b", "ns1", "web")],
            1,
            ["a", "b"],
            "",
            id="namespace-max-0-is-off",
        ),
        pytest.param(
            (ObjectRate("workload", timedelta(0)),),
            [("a", "default", "web"), ("b", "default", "web")],
            1,
            ["a", "b"],
            "",
            id="duration-0-is-off",
        ),
        pytest.param(
            (),
            [("a", "default", "web"), ("b", "default", "web")],
            1,
            ["a", "b"],
            "",
            id="empty-object-limiters",
        ),
    ],
)
def test_object_limiters_at_start(
    objects: tuple[ObjectRate, ...],
    pods: list[tuple[str, str, str]],
    workload_max: int,
    started: list[str],
    held_by: str,
) -> None:
    rates = MigrationRates(qps=0.0, burst=0, objects=objects)
    went: list[str] = []
    refusals: set[str] = set()
    for name, namespace, owner in pods:
        pod = make_pod(name, namespace=namespace, owner=replicaset(owner) if owner else None)
        workload = f"uid-{owner}" if owner else ""
        held = rates.take_start(pod, workload, workload_max, T0)
        if held is None:
            went.append(name)
        else:
            refusals.add(held[0])
    assert went == started
    assert refusals == ({held_by} if held_by else set())


def test_a_workload_limiter_of_max_0_paces_at_the_per_workload_max() -> None:
    """maxMigrating 0: the workload's maxMigratingPerWorkload per duration (2 per 5 minutes:
    one every 150 s with burst 1)."""
    rates = MigrationRates(qps=0.0, burst=0)
    pod = make_pod("a", owner=replicaset("web"))
    assert rates.take_start(pod, "uid-web", 2, T0) is None
    held = rates.take_start(pod, "uid-web", 2, T0)
    assert held is not None
    field, due = held
    assert field == "objectLimiters.workload"
    assert (due - T0).total_seconds() == pytest.approx(150, abs=1e-3)
    assert rates.take_start(pod, "uid-web", 2, due) is None


def test_a_held_start_takes_no_token_from_the_other_buckets() -> None:
    rates = MigrationRates(
        qps=0.0,
        burst=0,
        objects=(
            ObjectRate("namespace", _seconds(60), max_migrating=1),
            ObjectRate("workload", _seconds(60), max_migrating=1),
        ),
    )
    web = make_pod("a", owner=replicaset("web"))
    db = make_pod("b", owner=replicaset("db"))
    assert rates.take_start(web, "uid-web", 1, T0) is None
    # The namespace bucket is empty: db's workload bucket keeps its token.
    assert rates.take_start(db, "uid-db", 1, T0) is not None
    later = T0 + _seconds(60)
    assert rates.take_start(db, "uid-db", 1, later) is None


def test_object_rates_from_the_args() -> None:
    args = MigrationControllerArgs(
        object_limiters={
            "workload": ObjectLimiter(duration=Duration.parse("10m"), max_migrating=3),
            "namespace": ObjectLimiter(duration=Duration.parse("1m"), max_migrating=5, burst=2),
        }
    )
    assert object_rates(args.object_limiters) == (
        ObjectRate("namespace", _seconds(60), max_migrating=5, burst=2),
        ObjectRate("workload", _seconds(600), max_migrating=3),
    )
    assert object_rates(MigrationControllerArgs().object_limiters) == DEFAULT_OBJECT_RATES


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "pod"}, "objectLimiters"),
        ({"kind": "workload", "duration": _seconds(-1)}, "objectLimiters.workload.duration"),
        ({"kind": "namespace", "max_migrating": -1}, "objectLimiters.namespace.maxMigrating"),
        ({"kind": "workload", "burst": -2}, "objectLimiters.workload.burst"),
    ],
)
def test_bad_object_limiters_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ObjectRate(**kwargs)  # type: ignore[arg-type]


def test_eviction_buckets_hand_out_one_bucket_per_rate() -> None:
    buckets = EvictionBuckets()
    first = buckets.get(0.5, 1)
    assert first is not None
    assert buckets.get(0.5, 1) is first
    assert buckets.get(0.5, 2) is not first
    assert buckets.get(0.0, 1) is None  # evictQPS 0: no limit
    # a migration loop's rates over them take from that very bucket
    rates = MigrationRates(qps=0.5, burst=1, objects=(), evictions=buckets)
    assert first.take(T0)
    assert rates.take_eviction(T0) == T0 + timedelta(seconds=2, microseconds=1)
    assert MigrationRates(qps=0.5, burst=1, objects=()).take_eviction(T0) is None  # its own
