"""LoadAwareScheduling through the scheduler loop: NodeMetrics in the store decide placement."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from apis import constants as k
from apis.core import Node, Pod
from apis.slo import NodeMetric
from controller.loops import LoopContext
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    DEFAULT_SCHEDULER,
    PluginConfig,
    ProfileConfig,
    WeightedPlugin,
    build_profile,
)
from controller.store.sqlite import Store
from tests.controller.scheduler.loadaware.builders import GIB, metric, node, pod

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened


def _loop(args: dict[str, Any] | None = None) -> SchedulerLoop:
    config = ProfileConfig(
        aliases=(DEFAULT_SCHEDULER,),
        filter=("NodeResourcesFit", "LoadAwareScheduling"),
        score=(WeightedPlugin(name="LoadAwareScheduling"),),
        reserve=("LoadAwareScheduling",),
        plugin_config=(PluginConfig(name="LoadAwareScheduling", args=args or {}),),
    )
    return SchedulerLoop([build_profile(config)])


def _get(store: Store, name: str) -> Pod:
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found


def _message(found: Pod) -> str:
    return next((c.message for c in found.status.conditions if c.type == POD_SCHEDULED), "")


def _ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def _worked_example_node(store: Store, name: str, cpu_used: int, updated: float = 30) -> None:
    """§5.1: 32 cores / 128 GiB, 12 cores and 60 GiB in use 30 s ago, a 4-core pod bound 10 s
    ago that the report does not know yet (it adds 3.4 cores and 5.6 GiB)."""
    store.create(node(name))
    store.create(
        metric(
            name,
            node_usage={"cpu": cpu_used, "memory": 60 * GIB},
            updated_at=_ago(updated),
            report_interval=60,
        )
    )
    store.create(
        pod(
            f"running-{name}",
            requests={"cpu": 4000, "memory": 8 * GIB},
            limits={"cpu": 4000, "memory": 8 * GIB},
            scheduled_at=_ago(10),
            node_name=name,
        )
    )


def _incoming(name: str = "incoming") -> Pod:
    """The example's incoming pod: 2 cores / 4 GiB, limit 4 cores (estimates 3.4 cores)."""
    return pod(name, requests={"cpu": 2000, "memory": 4 * GIB}, limits={"cpu": 4000}, node_name="")


@pytest.mark.parametrize(
    ("nodes", "expected_node", "expected_message"),
    [
        # 12 + 3.4 + 3.4 = 18.8 cores: round(58.75) = 59 % <= 65.
        pytest.param([("n1", 12_000, 30)], "n1", "", id="worked-example-passes"),
        # 25 + 3.4 + 3.4 = 31.8 cores: 99 % > 65.
        pytest.param(
            [("n1", 25_000, 30)],
            "",
            "0/1 nodes are available: 1 node(s) cpu usage exceed threshold.",
            id="over-threshold",
        ),
        pytest.param([("n1", 25_000, 30), ("n2", 12_000, 30)], "n2", "", id="hot-node-skipped"),
        pytest.param(
            [("n1", 12_000, 180)],
            "",
            "0/1 nodes are available: 1 node(s) nodeMetric expired.",
            id="expired-metric",
        ),
        # Both pass; the score (least used) prefers the cooler node.
        pytest.param([("n1", 16_000, 30), ("n2", 8_000, 30)], "n2", "", id="least-used-wins"),
    ],
)
def test_load_decides_placement(
    store: Store,
    clock: Clock,
    nodes: Sequence[tuple[str, int, float]],
    expected_node: str,
    expected_message: str,
) -> None:
    for name, cpu_used, updated in nodes:
        _worked_example_node(store, name, cpu_used, updated)
    store.create(_incoming())
    _loop().reconcile(LoopContext(store=store, now=clock))
    placed = _get(store, "incoming")
    assert placed.spec.node_name == expected_node
    if expected_message:
        assert _message(placed) == expected_message


def test_a_pod_placed_in_the_pass_counts_for_the_next_one(store: Store, clock: Clock) -> None:
    # 15.4 cores estimated; each incoming pod adds 3.4: the first reaches 59 %, the second 69 %.
    _worked_example_node(store, "n1", 12_000)
    store.create(_incoming("a"))
    store.create(_incoming("b"))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _get(store, "a").spec.node_name == "n1"
    second = _get(store, "b")
    assert second.spec.node_name == ""
    assert _message(second) == "0/1 nodes are available: 1 node(s) cpu usage exceed threshold."
    # The next pass rebuilds n1 from the store (``a`` is bound now) and agrees.
    clock.now += timedelta(seconds=2)
    loop.reconcile(ctx)
    assert _get(store, "b").spec.node_name == ""


def test_a_cooler_metric_lets_the_parked_pod_in(store: Store, clock: Clock) -> None:
    _worked_example_node(store, "n1", 25_000)
    store.create(_incoming())
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    assert _get(store, "incoming").spec.node_name == ""
    clock.now += timedelta(seconds=5)
    kind = store.registry.for_type(NodeMetric)
    store.delete(kind, "n1")
    store.create(metric("n1", node_usage={"cpu": 4000, "memory": 8 * GIB}, updated_at=clock.now))
    loop.reconcile(ctx)
    assert _get(store, "incoming").spec.node_name == "n1"


def test_a_node_annotation_tightens_the_thresholds(store: Store, clock: Clock) -> None:
    _worked_example_node(store, "n1", 12_000)
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)  # n1 is known unannotated (59 % would pass the default 65 %)
    kind = store.registry.for_type(Node)
    current = store.get(kind, "n1")
    assert isinstance(current, Node)
    thresholds = {k.ANNOTATION_USAGE_THRESHOLDS: '{"usageThresholds":{"cpu":50}}'}
    meta = msgspec.structs.replace(current.metadata, annotations=thresholds)
    store.update(msgspec.structs.replace(current, metadata=meta))
    store.create(_incoming())
    loop.reconcile(ctx)
    placed = _get(store, "incoming")
    assert placed.spec.node_name == ""
    assert _message(placed) == "0/1 nodes are available: 1 node(s) cpu usage exceed threshold."


@pytest.mark.parametrize(("cpu_used", "expected"), [(12_000, "n1"), (25_000, "")])
def test_the_shipped_profile_filters_at_the_charts_thresholds(
    store: Store, clock: Clock, cpu_used: int, expected: str
) -> None:
    """Koordinator's Helm chart sets cpu 65 % / memory 95 %: 59 % passes, 99 % does not."""
    _worked_example_node(store, "n1", cpu_used)
    store.create(_incoming())
    config = DEFAULT_CONFIG
    loadaware = next(c for c in config.plugin_config if c.name == "LoadAwareScheduling")
    _loop(dict(loadaware.args)).reconcile(LoopContext(store=store, now=clock))
    assert _get(store, "incoming").spec.node_name == expected


def test_the_shipped_profile_places_the_plugin_as_koord_scheduler_does() -> None:
    config = DEFAULT_CONFIG
    assert "LoadAwareScheduling" in config.filter
    assert "LoadAwareScheduling" in config.reserve
    weights = {w.name: w.weight for w in config.score}
    assert weights["LoadAwareScheduling"] == 1


def test_bad_args_name_the_field() -> None:
    with pytest.raises(ValueError, match="dominantResourceWeight"):
        _loop({"dominantResourceWeight": 500})
