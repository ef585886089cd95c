"""The load filter and score over node rows (controller-spec §5.1, §10)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

from apis import constants as k
from apis.core import Node, Pod
from apis.slo import NodeMetric
from controller.scheduler.loadaware.args import LoadAwareArgs, load_args, resource_names
from controller.scheduler.loadaware.table import (
    REASON_METRIC_EXPIRED,
    FilterResult,
    LoadTable,
    exceeding_estimate,
    filter_rows,
    least_used_scores,
    pod_demand,
    reason_usage_exceeded,
    score_rows,
    usage_exceeded,
    usage_percent,
    weighted_scores,
)
from controller.scheduler.loadaware.usage import NodeLoad, build_node_load
from tests.controller.scheduler.loadaware.builders import (
    GIB,
    MIB,
    NOW,
    aggregated,
    ago,
    metric,
    node,
    pod,
)

CPU_EXCEEDED = reason_usage_exceeded("cpu")
CPU_AGGREGATED_EXCEEDED = reason_usage_exceeded("cpu", aggregated=True)


def load_of(
    n: Node,
    m: NodeMetric | None,
    pods: Sequence[Pod] = (),
    args: LoadAwareArgs | None = None,
) -> NodeLoad:
    args = args or LoadAwareArgs()
    return build_node_load(n, m, pods, args=args, resources=resource_names(args), now=NOW)


def run_filter(
    loads: Sequence[NodeLoad], incoming: Pod, args: LoadAwareArgs | None = None
) -> FilterResult:
    args = args or LoadAwareArgs()
    table = LoadTable.of(list(loads), resource_names(args))
    candidates = np.ones(len(loads), dtype=np.bool_)
    demand = pod_demand(incoming, args, table.resources)
    return filter_rows(table, candidates, demand, args=args, now=NOW)


def run_score(
    loads: Sequence[NodeLoad], incoming: Pod, args: LoadAwareArgs | None = None
) -> list[int]:
    args = args or LoadAwareArgs()
    table = LoadTable.of(list(loads), resource_names(args))
    demand = pod_demand(incoming, args, table.resources)
    rows = np.arange(len(loads), dtype=np.intp)
    return [int(s) for s in score_rows(table, rows, demand, args=args, now=NOW)]


def verdict(result: FilterResult, row: int = 0) -> str:
    """``pass`` or the reason the row was rejected."""
    if result.passed[row]:
        return "pass"
    return result.reason_of(row) or "rejected without reason"


# --- the worked example of §5.1 ----------------------------------------------------------------


def worked_example_load(args: LoadAwareArgs | None = None) -> NodeLoad:
    """32 cores / 128 GiB; 12 cores and 60 GiB used 30 s ago; a 4-core / 8 GiB pod bound 10 s
    ago that the metric does not know yet."""
    bound = pod(
        "bound",
        requests={"cpu": 4000, "memory": 8 * GIB},
        limits={"cpu": 4000, "memory": 8 * GIB},
        scheduled_at=ago(10),
    )
    usage = {"cpu": 12_000, "memory": 60 * GIB}
    return load_of(
        node(),
        metric(node_usage=usage, updated_at=ago(30), report_interval=60),
        [bound],
        args,
    )


INCOMING = pod("incoming", requests={"cpu": 2000, "memory": 4 * GIB}, limits={"cpu": 4000})


def test_worked_example_estimates_the_bound_pod_and_the_incoming_one() -> None:
    load = worked_example_load()
    assert load.usage == (12_000 + 3400, 60 * GIB + round(8 * GIB * 0.7))
    demand = pod_demand(INCOMING, LoadAwareArgs(), load.resources)
    assert demand.estimate == (3400, round(4 * GIB * 0.7))


def test_worked_example_is_59_percent_cpu_and_passes() -> None:
    load = worked_example_load()
    demand = pod_demand(INCOMING, LoadAwareArgs(), load.resources)
    used = np.asarray(load.usage, dtype=np.int64) + np.asarray(demand.estimate)
    percent = usage_percent(used, np.asarray(load.capacity, dtype=np.int64))
    assert percent.tolist() == [59, 53]
    assert verdict(run_filter([load], INCOMING)) == "pass"


def test_worked_example_scores_43() -> None:
    assert run_score([worked_example_load()], INCOMING) == [43]


@pytest.mark.parametrize(
    ("cpu_threshold", "expected"),
    [(59, "pass"), (58, CPU_EXCEEDED)],
    ids=["59%-at-threshold-passes", "59%-over-58-rejected"],
)
def test_worked_example_against_a_tighter_threshold(cpu_threshold: int, expected: str) -> None:
    args = load_args({"usageThresholds": {"cpu": cpu_threshold, "memory": 95}})
    assert verdict(run_filter([worked_example_load(args)], INCOMING, args)) == expected


# --- filter cases -------------------------------------------------------------------------------

BUSY = {"cpu": 28_000, "memory": 40 * GIB}  # 87.5 % cpu before the incoming pod
SMALL = pod("incoming", requests={"cpu": 100, "memory": GIB})


def case(
    args: Mapping[str, Any] | None = None,
    *,
    annotations: Mapping[str, str] | None = None,
    **metric_kwargs: Any,
) -> tuple[LoadAwareArgs, NodeLoad]:
    parsed = load_args(args or {})
    metric_kwargs.setdefault("node_usage", BUSY)
    n = node(annotations=annotations)
    return parsed, load_of(n, metric(**metric_kwargs), (), parsed)


FILTER_CASES: list[tuple[str, tuple[LoadAwareArgs, NodeLoad], Pod, str]] = [
    ("busy-node-rejected", case(), SMALL, CPU_EXCEEDED),
    (
        "expired-metric-rejected",
        case(updated_at=ago(180)),
        SMALL,
        REASON_METRIC_EXPIRED,
    ),
    ("metric-without-update-time-expired", case(updated_at=None), SMALL, REASON_METRIC_EXPIRED),
    (
        "fresh-metric-179s",
        case({"usageThresholds": {"cpu": 95}}, updated_at=ago(179)),
        SMALL,
        "pass",
    ),
    (
        "expired-allowed-when-enabled",
        case({"enableScheduleWhenNodeMetricsExpired": True}, updated_at=ago(600)),
        SMALL,
        "pass",
    ),
    (
        "expired-not-filtered-still-checks-usage",
        case({"filterExpiredNodeMetrics": False}, updated_at=ago(600)),
        SMALL,
        CPU_EXCEEDED,
    ),
    (
        "longer-expiration",
        case(
            {"nodeMetricExpirationSeconds": 300, "usageThresholds": {"cpu": 95}},
            updated_at=ago(200),
        ),
        SMALL,
        "pass",
    ),
    ("daemonset-pod-passes", case(), pod("ds", daemonset=True, requests={"cpu": 100}), "pass"),
    (
        "daemonset-pod-passes-expired",
        case(updated_at=ago(999)),
        pod("ds", daemonset=True),
        "pass",
    ),
    (
        "threshold-0-disables-cpu",
        case({"usageThresholds": {"cpu": 0, "memory": 95}}),
        SMALL,
        "pass",
    ),
    (
        "shipped-profile-thresholds-off",
        case(
            {
                "filterExpiredNodeMetrics": False,
                "nodeMetricExpirationSeconds": 300,
                "usageThresholds": {"cpu": 0, "memory": 0},
            },
            node_usage={"cpu": 32_000, "memory": 128 * GIB},
        ),
        SMALL,
        "pass",
    ),
    (
        "memory-over-threshold",
        case(node_usage={"cpu": 1000, "memory": 125 * GIB}),
        SMALL,
        reason_usage_exceeded("memory"),
    ),
    (
        "annotation-raises-cpu-threshold",
        case(annotations={k.ANNOTATION_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 90}}'}),
        SMALL,
        "pass",
    ),
    (
        "annotation-lowers-cpu-threshold",
        case(
            annotations={k.ANNOTATION_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 10}}'},
            node_usage={"cpu": 8000, "memory": GIB},
        ),
        SMALL,
        CPU_EXCEEDED,
    ),
    (
        "annotation-not-json-ignored",
        case(annotations={k.ANNOTATION_USAGE_THRESHOLDS: "{cpu: 90"}),
        SMALL,
        CPU_EXCEEDED,
    ),
    (
        "annotation-switches-cpu-off",
        case(annotations={k.ANNOTATION_USAGE_THRESHOLDS: '{"usageThresholds": {"cpu": 0}}'}),
        SMALL,
        "pass",
    ),
]


@pytest.mark.parametrize(
    ("built", "incoming", "expected"),
    [c[1:] for c in FILTER_CASES],
    ids=[c[0] for c in FILTER_CASES],
)
def test_filter(built: tuple[LoadAwareArgs, NodeLoad], incoming: Pod, expected: str) -> None:
    args, load = built
    assert verdict(run_filter([load], incoming, args)) == expected


def test_node_without_nodemetric_passes_and_scores_zero() -> None:
    load = load_of(node(), None)
    assert verdict(run_filter([load], SMALL)) == "pass"
    assert run_score([load], SMALL) == [0]


def test_expired_metric_scores_zero_even_when_not_filtered() -> None:
    args = load_args({"filterExpiredNodeMetrics": False})
    fresh = load_of(node("a"), metric("a", node_usage={"cpu": 1000, "memory": GIB}), (), args)
    stale = load_of(
        node("b"),
        metric("b", node_usage={"cpu": 1000, "memory": GIB}, updated_at=ago(180)),
        (),
        args,
    )
    scores = run_score([fresh, stale], SMALL, args)
    assert scores[0] > 0
    assert scores[1] == 0


def test_filter_reports_each_reason_with_its_rows() -> None:
    loads = [
        load_of(node("ok"), metric("ok", node_usage={"cpu": 1000, "memory": GIB})),
        load_of(node("hot"), metric("hot", node_usage=BUSY)),
        load_of(node("old"), metric("old", node_usage={"cpu": 1000}, updated_at=ago(1000))),
        load_of(node("hot2"), metric("hot2", node_usage=BUSY)),
    ]
    result = run_filter(loads, SMALL)
    assert result.passed.tolist() == [True, False, False, False]
    reasons = {message: rows.tolist() for message, rows in result.reasons}
    assert reasons == {REASON_METRIC_EXPIRED: [2], CPU_EXCEEDED: [1, 3]}


def test_filter_only_looks_at_candidates() -> None:
    loads = [load_of(node("hot"), metric("hot", node_usage=BUSY)), load_of(node("ok"), None)]
    args = LoadAwareArgs()
    table = LoadTable.of(loads, resource_names(args))
    candidates = np.asarray([False, True])
    demand = pod_demand(SMALL, args, table.resources)
    result = filter_rows(table, candidates, demand, args=args, now=NOW)
    assert result.passed.tolist() == [False, True]
    assert result.reasons == ()


# --- prod thresholds ----------------------------------------------------------------------------

PROD_ARGS: Mapping[str, Any] = {"prodUsageThresholds": {"cpu": 40}}
PROD_POD = pod("web", requests={"cpu": 1000}, priority_class="koord-prod")
BATCH_POD = pod("job", requests={k.RESOURCE_BATCH_CPU: 1000}, priority_class="koord-batch")


def prod_node_load(args: LoadAwareArgs) -> NodeLoad:
    """50 % cpu in use: 16 cores by a prod pod (prod in spec and metric), 4 by a batch pod."""
    running = [
        pod("prod-a", requests={"cpu": 16_000}, priority_class="koord-prod", scheduled_at=ago(600)),
        pod(
            "batch-a",
            requests={k.RESOURCE_BATCH_CPU: 4000},
            priority_class="koord-batch",
            scheduled_at=ago(600),
        ),
    ]
    m = metric(
        node_usage={"cpu": 16_000, "memory": 10 * GIB},
        pods=[("prod-a", {"cpu": 12_000}, "koord-prod"), ("batch-a", {"cpu": 4000}, "koord-batch")],
        updated_at=ago(5),
    )
    return load_of(node(), m, running, args)


@pytest.mark.parametrize(
    ("incoming", "prod_cpu", "expected"),
    [
        (PROD_POD, 39, CPU_EXCEEDED),  # prod usage (12 + 0.85 cores) / 32 = 40 %
        (PROD_POD, 40, "pass"),
        (BATCH_POD, 10, "pass"),  # batch pods use usageThresholds (cpu 65): 16.85 / 32 = 53 %
    ],
    ids=["prod-pod-over-prod-threshold", "prod-pod-under-prod-threshold", "batch-pod-ignores-prod"],
)
def test_prod_thresholds_apply_to_prod_pods(incoming: Pod, prod_cpu: int, expected: str) -> None:
    args = load_args({"prodUsageThresholds": {"cpu": prod_cpu}})
    load = prod_node_load(args)
    assert load.prod_usage[0] == 12_000
    assert verdict(run_filter([load], incoming, args)) == expected


# --- aggregated usage ---------------------------------------------------------------------------


def aggregated_args(duration: str) -> Mapping[str, Any]:
    return {
        "aggregated": {
            "usageThresholds": {"cpu": 70},
            "usageAggregationType": "p95",
            "usageAggregatedDuration": duration,
        }
    }


AGGREGATES = [
    aggregated(5, p95={"cpu": 25_600}, avg={"cpu": 3200}),  # p95 80 % over 5 minutes
    aggregated(10, p95={"cpu": 6400}),  # 20 %
    aggregated(30, p95={"cpu": 28_800}),  # 90 % over the longest window
]


@pytest.mark.parametrize(
    ("duration", "aggregates", "expected"),
    [
        ("5m", AGGREGATES, CPU_AGGREGATED_EXCEEDED),
        ("10m", AGGREGATES, "pass"),
        ("0s", AGGREGATES, CPU_AGGREGATED_EXCEEDED),
        ("15m", AGGREGATES, "pass"),  # not reported: the assigned pods' estimates (none)
    ],
    ids=["p95-5m-over", "p95-10m-under", "duration-0-longest-window", "window-not-reported"],
)
def test_aggregated_p95_over_a_duration(
    duration: str, aggregates: list[Any], expected: str
) -> None:
    args = load_args(aggregated_args(duration))
    load = load_of(
        node(), metric(node_usage={"cpu": 1000, "memory": GIB}, aggregates=aggregates), (), args
    )
    assert verdict(run_filter([load], SMALL, args)) == expected


def test_aggregated_thresholds_from_the_node_annotation() -> None:
    annotation = {
        "aggregatedUsage": {
            "usageThresholds": {"cpu": 70},
            "usageAggregationType": "p95",
            "usageAggregatedDuration": "5m",
        }
    }
    n = node(annotations={k.ANNOTATION_USAGE_THRESHOLDS: json.dumps(annotation)})
    load = load_of(n, metric(node_usage={"cpu": 1000, "memory": GIB}, aggregates=AGGREGATES))
    assert verdict(run_filter([load], SMALL)) == CPU_AGGREGATED_EXCEEDED


# --- capacity -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "pass"),  # 16 + 0.1 cores of 32 = 50 %
        ('{"cpu": "24"}', "pass"),  # of 24 = 67 %
        ('{"cpu": "20"}', CPU_EXCEEDED),  # of 20 = 80 %
        ("not json", "pass"),
    ],
    ids=["allocatable", "raw-24-cores", "raw-20-cores", "raw-unparsable-ignored"],
)
def test_raw_allocatable_is_the_capacity(raw: str | None, expected: str) -> None:
    annotations = {k.ANNOTATION_NODE_RAW_ALLOCATABLE: raw} if raw is not None else {}
    args = load_args({"usageThresholds": {"cpu": 70}})
    load = load_of(
        node(annotations=annotations), metric(node_usage={"cpu": 16_000, "memory": GIB}), (), args
    )
    assert verdict(run_filter([load], SMALL, args)) == expected


# --- score --------------------------------------------------------------------------------------


def test_least_used_scores_integer_arithmetic() -> None:
    used = np.asarray([18_800, 0, 40_000, 50, 0, 0], dtype=np.int64)
    cap = np.asarray([32_000, 100, 32_000, 100, 0, 100], dtype=np.int64)
    assert least_used_scores(used, cap).tolist() == [41, 100, 0, 50, 0, 100]


@pytest.mark.parametrize(
    ("weights", "dominant", "expected"),
    [
        ([1, 1], 0, [43, 50]),
        ([2, 1], 0, [42, 66]),  # (82 + 46) // 3; 200 // 3
        ([1, 1], 2, [42, 25]),  # (41 + 46 + 2 * 41) // 4; (100 + 0 + 0) // 4
        ([0, 0], 1, [41, 0]),  # dominant only: the lower of all scores
        ([0, 0], 0, [0, 0]),
    ],
)
def test_weighted_scores(weights: list[int], dominant: int, expected: list[int]) -> None:
    # two nodes: (cpu 41, memory 46) and (cpu 100, memory 0); one row per resource
    per_resource = np.asarray([[41, 100], [46, 0]], dtype=np.int64)
    got = weighted_scores(per_resource, np.asarray(weights, dtype=np.int64), dominant)
    assert got.tolist() == expected


def test_score_prefers_the_less_loaded_node() -> None:
    loads = [
        load_of(node("hot"), metric("hot", node_usage=BUSY)),
        load_of(node("cold"), metric("cold", node_usage={"cpu": 2000, "memory": GIB})),
    ]
    hot, cold = run_score(loads, SMALL)
    assert cold > hot


def test_score_prod_pods_on_prod_usage_when_configured() -> None:
    args = load_args({"scoreAccordingProdUsage": True})
    load = prod_node_load(args)
    # prod usage: 12 cores + 0.85 for the pod; no memory but the pod's 200 MiB floor
    [prod_score] = run_score([load], PROD_POD, args)
    memory = (128 * GIB - 200 * MIB) * 100 // (128 * GIB)
    assert prod_score == ((32_000 - 12_850) * 100 // 32_000 + memory) // 2
    # a batch pod is scored on the whole node's usage (16 cores, 10 GiB)
    [batch_score] = run_score([load], BATCH_POD, args)
    assert batch_score < prod_score


def test_score_aggregated_type() -> None:
    args = load_args(
        {"aggregated": {"scoreAggregationType": "p95", "scoreAggregatedDuration": "5m"}}
    )
    load = load_of(
        node(), metric(node_usage={"cpu": 1000, "memory": GIB}, aggregates=AGGREGATES), (), args
    )
    # p95 over 5 minutes is 25.6 cores (the report gives no memory figure)
    assert load.score_usage == (25_600, 0)
    [score] = run_score([load], SMALL, args)
    cpu = (32_000 - 25_685) * 100 // 32_000
    memory = (128 * GIB - round(GIB * 0.7)) * 100 // (128 * GIB)
    assert score == (cpu + memory) // 2


@settings(max_examples=300, deadline=None)
@given(
    used=st.integers(0, 1 << 44),
    capacity=st.integers(0, 1 << 44),
    threshold=st.integers(0, 100),
    offset=st.integers(-2, 2),
)
def test_folded_limit_agrees_with_the_rounded_percent(
    used: int, capacity: int, threshold: int, offset: int
) -> None:
    """The table's per-cell limit rejects exactly when round(used * 100 / capacity) > threshold;
    estimates are drawn right around the limit."""
    limit = exceeding_estimate(used, capacity, threshold)
    estimate = max(0, min(limit, 1 << 50) + offset)
    reference = usage_exceeded(
        np.asarray([used + estimate]), np.asarray([capacity]), np.asarray([threshold])
    )
    assert (estimate >= limit) == bool(reference[0])


@pytest.mark.parametrize(
    ("used", "estimate", "expected"),
    [(0, 504, "pass"), (0, 505, CPU_EXCEEDED), (100, 404, "pass"), (100, 405, CPU_EXCEEDED)],
    ids=["50.4%", "50.5%-rounds-to-51", "50.4%-with-usage", "50.5%-with-usage"],
)
def test_threshold_edge_through_the_table(used: int, estimate: int, expected: str) -> None:
    """1 core, threshold 50 %: 50.5 % rounds up to 51 % and is rejected."""
    args = load_args({"usageThresholds": {"cpu": 50}, "estimatedScalingFactors": {"cpu": 100}})
    load = load_of(node(cpu=1000), metric(node_usage={"cpu": used, "memory": GIB}), (), args)
    incoming = pod("edge", requests={"cpu": estimate}, limits={"cpu": estimate})
    assert verdict(run_filter([load], incoming, args)) == expected
