"""A node's estimated usage: which pods are estimated, fallbacks, prod usage, assume/forget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import hypothesis.strategies as st
import msgspec
import pytest
from hypothesis import given, settings

from apis import constants as k
from apis.core import Pod
from apis.slo import NodeMetric
from controller.scheduler.loadaware.args import LoadAwareArgs, load_args, resource_names
from controller.scheduler.loadaware.usage import NodeLoad, assume, build_node_load, forget
from tests.controller.scheduler.loadaware.builders import GIB, MIB, NOW, ago, metric, node, pod

BASE = {"cpu": 10_000, "memory": 20 * GIB}
FOUR_CORES = {"cpu": 4000, "memory": 8 * GIB}
FOUR_CORES_ESTIMATE = (3400, round(8 * GIB * 0.7))


def load_of(
    m: NodeMetric | None,
    pods: Sequence[Pod] = (),
    args: LoadAwareArgs | None = None,
    assumed_at: Mapping[str, datetime] | None = None,
) -> NodeLoad:
    args = args or LoadAwareArgs()
    return build_node_load(
        node(),
        m,
        pods,
        args=args,
        resources=resource_names(args),
        now=NOW,
        assumed_at=assumed_at,
    )


def worker(**kwargs: Any) -> Pod:
    kwargs.setdefault("requests", FOUR_CORES)
    kwargs.setdefault("limits", FOUR_CORES)
    return pod("w", **kwargs)


REPORTED = [("w", {"cpu": 1000, "memory": GIB}, "koord-prod")]


@pytest.mark.parametrize(
    ("running", "pods_metric", "args", "expected_delta"),
    [
        (worker(scheduled_at=ago(600)), (), {}, FOUR_CORES_ESTIMATE),
        (worker(scheduled_at=ago(600)), REPORTED, {}, (0, 0)),
        (
            worker(scheduled_at=ago(60)),
            REPORTED,
            {},
            (3400 - 1000, FOUR_CORES_ESTIMATE[1] - GIB),
        ),
        (worker(scheduled_at=ago(100)), REPORTED, {}, (0, 0)),
        (
            worker(scheduled_at=ago(600)),
            REPORTED,
            {"estimatedSecondsAfterPodScheduled": 900},
            (2400, FOUR_CORES_ESTIMATE[1] - GIB),
        ),
        (
            worker(scheduled_at=ago(600)),
            REPORTED,
            {"estimatedSecondsAfterPodScheduled": 300},
            (0, 0),
        ),
        (
            worker(scheduled_at=ago(600), initialized_at=ago(500)),
            REPORTED,
            {"estimatedSecondsAfterInitialized": 600},
            (2400, FOUR_CORES_ESTIMATE[1] - GIB),
        ),
        (
            worker(scheduled_at=ago(600)),
            REPORTED,
            {"estimatedSecondsAfterInitialized": 60},
            (2400, FOUR_CORES_ESTIMATE[1] - GIB),
        ),
        (
            worker(
                scheduled_at=ago(600),
                annotations={k.ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: "900"},
            ),
            REPORTED,
            {"allowCustomizeEstimation": True},
            (2400, FOUR_CORES_ESTIMATE[1] - GIB),
        ),
        (
            worker(
                scheduled_at=ago(600),
                annotations={k.ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: "900"},
            ),
            REPORTED,
            {},
            (0, 0),
        ),
        (
            worker(scheduled_at=ago(60)),
            [("w", {"cpu": 9000, "memory": 16 * GIB}, "koord-prod")],
            {},
            (0, 0),
        ),
    ],
    ids=[
        "not-reported",
        "reported-and-old",
        "assigned-within-report-interval",
        "assigned-before-report-interval",
        "forced-after-scheduled",
        "forced-window-over",
        "forced-after-initialized",
        "not-initialized-stays-forced",
        "annotation-window-allowed",
        "annotation-window-not-allowed",
        "usage-above-estimate-adds-nothing",
    ],
)
def test_which_pods_are_estimated(
    running: Pod,
    pods_metric: Sequence[tuple[str, Mapping[str, int], str]],
    args: Mapping[str, Any],
    expected_delta: tuple[int, int],
) -> None:
    """Metric updated 10 s ago, report interval 60 s: pods assigned in the last 70 s count."""
    m = metric(node_usage=BASE, pods=pods_metric, updated_at=ago(10), report_interval=60)
    load = load_of(m, [running], load_args(args))
    assert load.pods["default/w"].delta == expected_delta
    assert load.usage == (BASE["cpu"] + expected_delta[0], BASE["memory"] + expected_delta[1])


def test_assign_time_falls_back_to_when_the_scheduler_assumed_it() -> None:
    m = metric(node_usage=BASE, pods=REPORTED, updated_at=ago(10))
    assert load_of(m, [worker()], assumed_at={"default/w": ago(600)}).delta == (0, 0)
    recent = load_of(m, [worker()], assumed_at={"default/w": ago(30)})
    assert recent.delta == (2400, FOUR_CORES_ESTIMATE[1] - GIB)


def test_terminated_and_reserve_pods_do_not_count() -> None:
    m = metric(node_usage=BASE)
    done = worker(phase="Succeeded")
    reserve = pod("r", requests=FOUR_CORES, annotations={k.ANNOTATION_RESERVE_POD: "true"})
    load = load_of(m, [done, reserve])
    assert load.pods == {}
    assert load.usage == (BASE["cpu"], BASE["memory"])


def test_without_node_usage_the_full_estimates_count() -> None:
    old = worker(scheduled_at=ago(3600))
    small = pod("s", requests={"cpu": 100}, scheduled_at=ago(3600))
    load = load_of(metric(node_usage={}, pods=REPORTED), [old, small])
    assert load.usage == (3400 + 85, FOUR_CORES_ESTIMATE[1] + 200 * MIB)


def test_prod_usage_counts_pods_prod_in_spec_and_metric() -> None:
    running = [
        pod("a", requests={"cpu": 1000}, priority_class="koord-prod", scheduled_at=ago(600)),
        # prod in the metric only: its spec says batch
        pod(
            "b",
            requests={k.RESOURCE_BATCH_CPU: 1000},
            priority_class="koord-batch",
            scheduled_at=ago(600),
        ),
        # prod by spec, not yet reported: its estimate is a prod delta
        pod("c", requests={"cpu": 2000}, priority_class="koord-prod", scheduled_at=ago(5)),
    ]
    m = metric(
        node_usage={"cpu": 8000, "memory": 4 * GIB},
        system_usage={"cpu": 500, "memory": GIB},
        pods=[("a", {"cpu": 700}, "koord-prod"), ("b", {"cpu": 900}, "koord-prod")],
    )
    plain = load_of(m, running)
    assert plain.prod_usage == (700 + 1700, 200 * MIB)
    with_sys = load_of(m, running, load_args({"prodUsageIncludeSys": True}))
    assert with_sys.prod_usage == (500 + 700 + 1700, GIB + 200 * MIB)


def test_assume_adds_the_estimate_and_forget_removes_it() -> None:
    m = metric(node_usage=BASE, updated_at=ago(10))
    empty = load_of(m)
    incoming = worker()
    placed = assume(empty, incoming, args=LoadAwareArgs(), now=NOW)
    assert placed.usage == (BASE["cpu"] + 3400, BASE["memory"] + FOUR_CORES_ESTIMATE[1])
    assert placed == load_of(m, [incoming])
    assert forget(placed, "default/w") == empty
    assert forget(empty, "default/w") == empty
    # assuming twice replaces the first share
    assert assume(placed, incoming, args=LoadAwareArgs(), now=NOW) == placed


def test_assume_ignores_reserve_pods() -> None:
    empty = load_of(metric(node_usage=BASE))
    reserve = pod("r", requests=FOUR_CORES, annotations={k.ANNOTATION_RESERVE_POD: "true"})
    assert assume(empty, reserve, args=LoadAwareArgs(), now=NOW) == empty


PODS = st.lists(
    st.tuples(
        st.integers(0, 8000),
        st.integers(0, 16 * GIB),
        st.sampled_from(["", "koord-prod", "koord-batch"]),
        st.integers(0, 900),
        st.booleans(),
    ),
    max_size=6,
)


def make_pods(specs: list[tuple[int, int, str, int, bool]]) -> tuple[list[Pod], list[Any]]:
    pods: list[Pod] = []
    reported: list[Any] = []
    for i, (cpu, memory, prio, age, is_reported) in enumerate(specs):
        name = f"p{i}"
        requests = {"cpu": cpu, "memory": memory}
        if prio == "koord-batch":
            requests = {k.RESOURCE_BATCH_CPU: cpu, k.RESOURCE_BATCH_MEMORY: memory}
        pods.append(pod(name, requests=requests, priority_class=prio, scheduled_at=ago(age)))
        if is_reported:
            reported.append((name, {"cpu": cpu // 2, "memory": memory // 2}, prio))
    return pods, reported


@settings(max_examples=60, deadline=None)
@given(PODS, st.integers(0, 5))
def test_assume_and_forget_agree_with_a_rebuild(
    specs: list[tuple[int, int, str, int, bool]], drop: int
) -> None:
    """Building with all pods equals building without one and assuming it at its time; forgetting
    it again equals the build without it."""
    pods, reported = make_pods(specs)
    m = metric(node_usage=BASE, system_usage={"cpu": 1}, pods=reported, updated_at=ago(30))
    args = load_args({"prodUsageIncludeSys": True, "prodUsageThresholds": {"cpu": 50}})
    full = load_of(m, pods, args)
    if not pods:
        assert full.usage == (BASE["cpu"], BASE["memory"])
        return
    index = drop % len(pods)
    others = pods[:index] + pods[index + 1 :]
    without = load_of(m, others, args)
    key = f"default/{pods[index].name}"
    rebuilt = assume(without, pods[index], args=args, now=NOW)
    assert rebuilt.usage == full.usage
    assert rebuilt.prod_usage == full.prod_usage
    assert rebuilt.pods[key] == full.pods[key]
    again = forget(full, key)
    assert again.usage == without.usage
    assert again.prod_usage == without.prod_usage


def test_rebuild_reuses_estimates_of_unchanged_pods() -> None:
    """A rebuild lends the earlier estimate only to a pod with the same uid and version."""
    args = LoadAwareArgs()
    first = pod("w", requests=FOUR_CORES, scheduled_at=ago(600))
    first = msgspec.structs.replace(
        first, metadata=msgspec.structs.replace(first.metadata, uid="u1", resource_version="7")
    )
    before = load_of(metric(node_usage=BASE), [first])
    # a planted estimate shows whether it was reused
    planted = msgspec.structs.replace(before.pods["default/w"], estimate=(1, 1))
    previous = msgspec.structs.replace(before, pods={"default/w": planted})
    m = metric(node_usage={}, updated_at=NOW)
    kwargs: dict[str, Any] = {"args": args, "resources": resource_names(args), "now": NOW}
    same = build_node_load(node(), m, [first], previous=previous, **kwargs)
    assert same.usage == (1, 1)
    resized = msgspec.structs.replace(
        first, metadata=msgspec.structs.replace(first.metadata, resource_version="8")
    )
    changed = build_node_load(node(), m, [resized], previous=previous, **kwargs)
    assert changed.usage == FOUR_CORES_ESTIMATE
