"""The LowNodeLoad Balance plugin (controller-spec §6.4): thresholds, classes, budgets, node fit,
anomaly counting, pools, sorting and the eviction reasons."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.core import Node, Pod, Taint, pod_requests
from apis.slo import NodeMetric
from controller.descheduler.framework import CycleView, EvictionIntent
from controller.descheduler.plugins.lownodeload import LowNodeLoad, load_args
from controller.descheduler.plugins.lownodeload.thresholds import (
    classify,
    node_levels,
    over_text,
    room,
)
from controller.descheduler.plugins.lownodeload.usage import capacity_of, node_usage
from tests.controller.descheduler.conftest import GI, T0, make_node, make_nodemetric, make_pod

CORE = 1000
MEMORY = 256 * GI
SHIPPED: dict[str, Any] = {
    "lowThresholds": {"cpu": 45, "memory": 55},
    "highThresholds": {"cpu": 75, "memory": 80},
}
#: The shipped thresholds, a node a source on its first over-threshold cycle.
AT_ONCE: dict[str, Any] = {**SHIPPED, "anomalyCondition": {"consecutiveAbnormalities": 1}}
BATCH = {k.LABEL_PRIORITY_CLASS: "koord-batch"}
PROD = {k.LABEL_PRIORITY_CLASS: "koord-prod"}
#: A raw-allocatable annotation of 100 cores (and the nodes' memory).
RAW_100 = json.dumps({"cpu": "100", "memory": "256Gi"})


class FakeEvictor:
    """Records evictions; refuses pods by name (filter) or past a total limit (evict)."""

    def __init__(
        self,
        *,
        refuse: Sequence[str] = (),
        limit: int | None = None,
        already: Sequence[Pod] = (),
    ) -> None:
        self.refuse = set(refuse)
        self.limit = limit
        self._intents = [
            EvictionIntent(pod=pod, node=pod.spec.node_name, plugin="Other", reason="earlier")
            for pod in already
        ]
        self._cordoned: list[str] = []

    def filter(self, pod: Pod) -> bool:
        return pod.metadata.name not in self.refuse

    def pre_eviction_filter(self, pod: Pod) -> bool:
        return True

    def can_evict_from(self, node: str) -> bool:
        return self.limit is None or len(self._intents) < self.limit

    def evict(self, pod: Pod, *, plugin: str, reason: str) -> bool:
        if self.limit is not None and len(self._intents) >= self.limit:
            return False
        self._intents.append(
            EvictionIntent(pod=pod, node=pod.spec.node_name, plugin=plugin, reason=reason)
        )
        return True

    @property
    def intents(self) -> Sequence[EvictionIntent]:
        return self._intents

    def cordon(self, node: str, *, plugin: str) -> None:
        self._cordoned.append(node)

    def uncordon(self, node: str) -> None:
        self._cordoned.remove(node)

    @property
    def cordoned(self) -> Sequence[str]:
        return self._cordoned

    def evicted(self, plugin: str = "LowNodeLoad") -> list[str]:
        return [i.pod.metadata.name for i in self._intents if i.plugin == plugin]


class Cluster:
    """Nodes, their pods and what their NodeMetrics report, built up for one view."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        #: Node name -> ``(pod, cores used)``.
        self.pods: dict[str, list[tuple[Pod, float]]] = {}
        self.system: dict[str, float] = {}
        #: Node name -> the NodeMetric's updateTime (None: no NodeMetric).
        self.reported_at: dict[str, datetime | None] = {}

    def node(
        self,
        name: str,
        *,
        cores: int = 100,
        system: float = 0,
        pods: Sequence[tuple[str, float]] = (),
        pod_labels: Mapping[str, str] = BATCH,
        at: datetime | None = T0,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        unschedulable: bool = False,
        allocatable_cores: int | None = None,
    ) -> None:
        """A node of ``cores`` (allocatable: ``allocatable_cores`` when given) with ``system``
        cores of system usage and pods ``(name, cores)`` that request and use that much cpu;
        ``at``: when its NodeMetric was updated (None: it has none)."""
        self.nodes.append(
            make_node(
                name,
                cpu=(allocatable_cores or cores) * CORE,
                memory=MEMORY,
                labels=labels,
                annotations=annotations,
                taints=taints,
                unschedulable=unschedulable,
            )
        )
        self.system[name] = system
        self.reported_at[name] = at
        self.pods[name] = [
            (make_pod(pod, node=name, cpu=int(used * CORE), labels=pod_labels), used)
            for pod, used in pods
        ]

    def add_pods(self, node: str, pods: Sequence[tuple[Pod, float]]) -> None:
        """Pods built by hand, ``(pod, cores used)``."""
        self.pods[node].extend(pods)

    def metric(self, name: str) -> NodeMetric | None:
        at = self.reported_at[name]
        if at is None:
            return None
        return make_nodemetric(
            name,
            at=at,
            system_cpu=int(self.system[name] * CORE),
            pods=[(pod, int(used * CORE), 0) for pod, used in self.pods[name]],
        )

    def pods_on(self, name: str) -> list[Pod]:
        return [pod for pod, _ in self.pods[name]]

    def view(self, now: datetime = T0) -> CycleView:
        nodes = sorted(self.nodes, key=lambda n: n.metadata.name)
        metrics = {
            n.metadata.name: metric
            for n in nodes
            if (metric := self.metric(n.metadata.name)) is not None
        }
        return CycleView(
            now=now,
            nodes=nodes,
            pods_by_node={n.metadata.name: tuple(self.pods_on(n.metadata.name)) for n in nodes},
            metrics=metrics,
            all_nodes={n.metadata.name: n for n in nodes},
        )


def _run(
    args: Mapping[str, Any], cluster: Cluster, evictor: FakeEvictor | None = None
) -> FakeEvictor:
    evictor = evictor or FakeEvictor()
    status = LowNodeLoad(load_args(args)).balance(cluster.view(), evictor)
    assert status.ok
    return evictor


def _usage(cluster: Cluster, name: str, resources: Sequence[str] = ("cpu", "memory")) -> Any:
    node = next(n for n in cluster.nodes if n.metadata.name == name)
    return node_usage(
        node,
        cluster.metric(name),
        cluster.pods_on(name),
        resources,
        now=T0,
        expiration_seconds=180,
    )


# --- the worked examples ------------------------------------------------------------------------


def test_deviation_example_20_50_80_is_low_neither_high() -> None:
    cluster = Cluster()
    raw = RAW_100
    for name, used in (("node1", 20), ("node2", 50), ("node3", 80)):
        # Allocatable is amplified (overcommitted) to 150 cores; the raw 100 cores count.
        cluster.node(
            name,
            system=used,
            allocatable_cores=150,
            annotations={k.ANNOTATION_NODE_RAW_ALLOCATABLE: raw},
        )
    usages = [_usage(cluster, name) for name in ("node1", "node2", "node3")]
    levels = node_levels(usages, {"cpu": 10}, {"cpu": 10}, ("cpu", "memory"), deviation=True)
    assert levels["node1"].low["cpu"] == pytest.approx(40 * CORE)
    assert levels["node1"].high["cpu"] == pytest.approx(60 * CORE)
    # memory has no deviation: it takes no part (both levels are the whole capacity).
    assert levels["node1"].low["memory"] == levels["node1"].high["memory"] == MEMORY
    classes = classify(usages, levels, None)
    assert (classes.low, classes.high) == (("node1",), ("node3",))


def test_absolute_example_budget_of_a_96_core_node_at_20_percent() -> None:
    cluster = Cluster()
    cluster.node("target", cores=96, system=96 * 0.20)
    usage = _usage(cluster, "target")
    levels = node_levels(
        [usage],
        {"cpu": 45, "memory": 55},
        {"cpu": 75, "memory": 80},
        ("cpu", "memory"),
        deviation=False,
    )
    assert room(levels["target"].high, usage.usage)["cpu"] == pytest.approx(52.8 * CORE)


def _pods(count: int, cores: float, prefix: str = "p") -> list[tuple[str, float]]:
    return [(f"{prefix}{i:02d}", cores) for i in range(count)]


@pytest.mark.parametrize(
    ("node_fit", "evicted"),
    [
        pytest.param(
            False, 6, id="no nodeFit: evict while the 52.8-core budget is above 0 (6 x 10 cores)"
        ),
        pytest.param(True, 5, id="nodeFit: the target takes 5 x 10 cores within its 75%"),
    ],
)
def test_budget_stops_evictions(node_fit: bool, evicted: int) -> None:
    cluster = Cluster()
    # 390 of 400 cores used, 300 is the high level: the source alone would shed 9 pods.
    cluster.node("source", cores=400, pods=_pods(39, 10))
    cluster.node("target", cores=96, system=96 * 0.20)
    evictor = _run({**AT_ONCE, "nodeFit": node_fit}, cluster)
    assert len(evictor.evicted()) == evicted


# --- thresholds and classes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "memory", "unschedulable", "expected"),
    [
        pytest.param(45, 55, False, "low", id="at both low levels: low"),
        pytest.param(46, 10, False, "neither", id="cpu above low: not low"),
        pytest.param(10, 56, False, "neither", id="memory above low: not low"),
        pytest.param(75, 10, False, "neither", id="at the high level: not high"),
        pytest.param(76, 10, False, "high", id="cpu above high"),
        pytest.param(10, 81, False, "high", id="memory alone above high"),
        pytest.param(10, 10, True, "neither", id="unschedulable is never low"),
    ],
)
def test_absolute_classes(cpu: int, memory: int, unschedulable: bool, expected: str) -> None:
    node = make_node("n", cpu=100 * CORE, memory=MEMORY, unschedulable=unschedulable)
    metric = make_nodemetric("n", system_cpu=cpu * CORE, system_memory=MEMORY * memory // 100)
    usage = node_usage(node, metric, (), ("cpu", "memory"), now=T0, expiration_seconds=180)
    assert usage is not None
    levels = node_levels(
        [usage],
        SHIPPED["lowThresholds"],
        SHIPPED["highThresholds"],
        ("cpu", "memory"),
        deviation=False,
    )
    classes = classify([usage], levels, None)
    found = "low" if classes.low else "high" if classes.high else "neither"
    assert found == expected


@pytest.mark.parametrize(
    ("usages", "low", "high", "expected"),
    [
        pytest.param((20, 50, 80), 10, 10, ("low", "neither", "high"), id="spec example"),
        pytest.param(
            (20, 50, 80), 40, 40, ("neither", "neither", "neither"), id="wide band: all neither"
        ),
        pytest.param(
            (0, 10, 95),
            40,
            70,
            ("low", "neither", "neither"),
            id="clamped: low level 0% (avg 35 - 40), high level 100% (avg 35 + 70)",
        ),
        pytest.param(
            (20, 50, 80),
            0,
            10,
            ("low", "low", "low"),
            id="low 0%: cpu takes no part, so every node is low",
        ),
    ],
)
def test_deviation_classes(
    usages: tuple[int, ...], low: float, high: float, expected: tuple[str, ...]
) -> None:
    cluster = Cluster()
    for i, used in enumerate(usages):
        cluster.node(f"n{i}", system=used)
    node_usages = [_usage(cluster, f"n{i}") for i in range(len(usages))]
    levels = node_levels(
        node_usages, {"cpu": low}, {"cpu": high}, ("cpu", "memory"), deviation=True
    )
    classes = classify(node_usages, levels, None)
    found = tuple(
        "low" if f"n{i}" in classes.low else "high" if f"n{i}" in classes.high else "neither"
        for i in range(len(usages))
    )
    assert found == expected


def test_reason_lists_every_resource_over_its_level() -> None:
    text = over_text(
        {"cpu": 82_000, "memory": 90},
        {"cpu": 75_000.0, "memory": 80.0},
        {"cpu": 100_000, "memory": 100},
    )
    assert text == (
        "node is overutilized, node cpu usage(82.00%)>threshold(75.00%), "
        "node memory usage(90.00%)>threshold(80.00%)"
    )


# --- the plugin end to end ----------------------------------------------------------------------


def _hot_and_cold(**source: Any) -> Cluster:
    """``hot``: 82 of 100 cores (4 pods of 20 + 2 system); ``cold``: 10 of 100."""
    cluster = Cluster()
    cluster.node("hot", system=2, pods=_pods(4, 20), **source)
    cluster.node("cold", system=10)
    return cluster


def test_evicts_until_below_the_high_level_with_the_spec_reason() -> None:
    evictor = _run(AT_ONCE, _hot_and_cold())
    (intent,) = evictor.intents
    assert intent.plugin == "LowNodeLoad"
    assert intent.node == "hot"
    assert intent.reason == "node is overutilized, node cpu usage(82.00%)>threshold(75.00%)"


@pytest.mark.parametrize(
    ("annotation", "evicted"),
    [
        pytest.param(RAW_100, 1, id="raw 100 cores: 82%"),
        pytest.param(None, 0, id="allocatable 200 cores: 41%"),
        pytest.param("{not json", 0, id="unparseable: allocatable"),
        pytest.param(json.dumps({"cpu": "lots"}), 0, id="bad quantity: allocatable"),
    ],
)
def test_raw_allocatable(annotation: str | None, evicted: int) -> None:
    annotations = {} if annotation is None else {k.ANNOTATION_NODE_RAW_ALLOCATABLE: annotation}
    cluster = _hot_and_cold(allocatable_cores=200, annotations=annotations)
    assert len(_run(AT_ONCE, cluster).intents) == evicted


def test_raw_allocatable_is_used_as_is() -> None:
    node = make_node(
        "n",
        cpu=200 * CORE,
        annotations={k.ANNOTATION_NODE_RAW_ALLOCATABLE: json.dumps({"cpu": "100"})},
    )
    assert dict(capacity_of(node)) == {"cpu": 100 * CORE}


@pytest.mark.parametrize(
    ("source_age", "target_age", "evicted"),
    [
        pytest.param(timedelta(seconds=179), timedelta(0), 1, id="179 s old: used"),
        pytest.param(timedelta(seconds=180), timedelta(0), 0, id="source 180 s old: ignored"),
        pytest.param(timedelta(0), timedelta(seconds=600), 0, id="target expired: no target"),
        pytest.param(None, timedelta(0), 0, id="source without NodeMetric"),
    ],
)
def test_expired_metrics_are_ignored(
    source_age: timedelta | None, target_age: timedelta, evicted: int
) -> None:
    cluster = Cluster()
    cluster.node(
        "hot", system=2, pods=_pods(4, 20), at=None if source_age is None else T0 - source_age
    )
    cluster.node("cold", system=10, at=T0 - target_age)
    assert len(_run(AT_ONCE, cluster).intents) == evicted


def test_metric_without_update_time_is_ignored() -> None:
    metric = make_nodemetric("n", system_cpu=90 * CORE)
    metric = msgspec.structs.replace(
        metric, status=msgspec.structs.replace(metric.status, update_time=None)
    )
    node = make_node("n", cpu=100 * CORE)
    assert node_usage(node, metric, (), ("cpu",), now=T0, expiration_seconds=180) is None


def test_anomaly_default_source_on_the_fifth_cycle() -> None:
    cluster = _hot_and_cold()
    plugin = LowNodeLoad(load_args(SHIPPED))
    counts = []
    for cycle in range(7):
        evictor = FakeEvictor()
        plugin.balance(cluster.view(T0 + timedelta(seconds=10 * cycle)), evictor)
        counts.append(len(evictor.intents))
    # Evicting brought the node below its level: reset, counting starts again.
    assert counts == [0, 0, 0, 0, 1, 0, 0]


def test_pool_with_its_own_anomaly_condition() -> None:
    cluster = Cluster()
    cluster.node("gpu-hot", system=2, pods=_pods(4, 20), labels={"tier": "gpu"})
    cluster.node("gpu-cold", system=10, labels={"tier": "gpu"})
    args = {
        **SHIPPED,
        "nodeSelector": {"matchLabels": {"tier": "general"}},
        "nodePools": [
            {
                "name": "gpu",
                "nodeSelector": {"matchLabels": {"tier": "gpu"}},
                "anomalyCondition": {"consecutiveAbnormalities": 2},
            }
        ],
    }
    plugin = LowNodeLoad(load_args(args))
    counts = []
    for cycle in range(2):
        evictor = FakeEvictor()
        plugin.balance(cluster.view(T0 + timedelta(seconds=10 * cycle)), evictor)
        counts.append(len(evictor.intents))
    assert counts == [0, 1]


def test_a_later_pool_skips_nodes_high_in_an_earlier_pool() -> None:
    cluster = Cluster()
    cluster.node("hot", system=2, pods=_pods(4, 20), labels={"pool": "b"})
    cluster.node("cold", system=10, labels={"pool": "b"})
    # Pool b would evict a second pod from "hot" if it looked at it again (the view does not
    # change within a cycle); with a tighter high level it would otherwise find hot over it.
    args = {
        **AT_ONCE,
        "nodePools": [
            {
                "name": "b",
                "nodeSelector": {"matchLabels": {"pool": "b"}},
                "highThresholds": {"cpu": 50, "memory": 80},
            }
        ],
    }
    assert len(_run(args, cluster).intents) == 1


def test_sources_by_usage_highest_first() -> None:
    cluster = Cluster()
    cluster.node("a-warm", system=10, pods=_pods(2, 40, "a"))
    cluster.node("b-hot", system=15, pods=_pods(2, 40, "b"))
    # Room on the only target: 75% - 40% = 35 cores, a budget of one 40-core eviction.
    cluster.node("target", system=40)
    evictor = _run({**AT_ONCE, "nodeFit": False}, cluster)
    assert evictor.evicted() == ["b00"]


def _one_source_with(pods: Sequence[tuple[Pod, float]]) -> Cluster:
    cluster = Cluster()
    # 70 system cores + the pods, which bring it above 75% and any one pod brings it back.
    cluster.node("hot", system=70)
    cluster.add_pods("hot", pods)
    cluster.node("cold", system=10)
    return cluster


def _pod(name: str, *, labels: Mapping[str, str] = BATCH, age: int = 0) -> Pod:
    """A pod on ``hot`` requesting 5 cores, created ``age`` hours before T0."""
    pod = make_pod(name, node="hot", cpu=5 * CORE, labels=labels)
    meta = msgspec.structs.replace(pod.metadata, creation_timestamp=T0 - timedelta(hours=age))
    return msgspec.structs.replace(pod, metadata=meta)


@pytest.mark.parametrize(
    ("pods", "first"),
    [
        pytest.param(
            [(_pod("prod", labels=PROD), 9), (_pod("batch"), 6)],
            "batch",
            id="pod order before usage: batch before prod",
        ),
        pytest.param(
            [(_pod("small"), 6), (_pod("big"), 9)],
            "big",
            id="same class: most usage of the over resources first",
        ),
        pytest.param(
            [(_pod("old", age=5), 6), (_pod("new", age=1), 6)],
            "new",
            id="same usage: newest first",
        ),
    ],
)
def test_pod_order_on_a_source(pods: list[tuple[Pod, float]], first: str) -> None:
    evictor = _run(AT_ONCE, _one_source_with(pods))
    assert evictor.evicted()[0] == first


@pytest.mark.parametrize(
    ("target", "node_fit", "evicted"),
    [
        pytest.param({}, True, 1, id="target fits"),
        pytest.param(
            {"taints": (Taint(key="dedicated", value="x", effect="NoSchedule"),)},
            True,
            0,
            id="untolerated taint: no target",
        ),
        pytest.param(
            {"taints": (Taint(key="dedicated", value="x", effect="NoSchedule"),)},
            False,
            1,
            id="taint ignored without nodeFit",
        ),
        pytest.param(
            {
                "allocatable_cores": 15,
                "annotations": {k.ANNOTATION_NODE_RAW_ALLOCATABLE: RAW_100},
            },
            True,
            0,
            id="low by its raw 100 cores, but 15 allocatable cores: requests do not fit",
        ),
    ],
)
def test_node_fit(target: dict[str, Any], node_fit: bool, evicted: int) -> None:
    cluster = Cluster()
    cluster.node("hot", system=2, pods=_pods(4, 20))
    cluster.node("cold", system=10, **target)
    assert len(_run({**AT_ONCE, "nodeFit": node_fit}, cluster).intents) == evicted


def test_prod_pass_moves_prod_pods_only() -> None:
    cluster = Cluster()
    # Node level 70% (not high at 90%); prod pods 60% above the prod high level of 50%.
    cluster.node("hot", system=0, pods=_pods(2, 30, "prod"), pod_labels=PROD)
    cluster.add_pods("hot", [(make_pod("batch", node="hot", cpu=10 * CORE, labels=BATCH), 10)])
    cluster.node("cold", system=10)
    args = {
        "lowThresholds": {"cpu": 40},
        "highThresholds": {"cpu": 90},
        "prodLowThresholds": {"cpu": 20},
        "prodHighThresholds": {"cpu": 50},
        "anomalyCondition": {"consecutiveAbnormalities": 1},
    }
    evictor = _run(args, cluster)
    (intent,) = evictor.intents
    assert intent.pod.metadata.name.startswith("prod")
    assert intent.reason == "node is overutilized, prod cpu usage(60.00%)>threshold(50.00%)"


@pytest.mark.parametrize(
    ("number_of_nodes", "evicted"),
    [
        pytest.param(0, 1, id="one low node > 0"),
        pytest.param(1, 0, id="one low node <= 1: nothing"),
    ],
)
def test_number_of_nodes(number_of_nodes: int, evicted: int) -> None:
    args = {**AT_ONCE, "numberOfNodes": number_of_nodes}
    assert len(_run(args, _hot_and_cold()).intents) == evicted


def test_no_low_node_no_eviction() -> None:
    cluster = Cluster()
    cluster.node("hot", system=2, pods=_pods(4, 20))
    cluster.node("busy", system=60)
    assert _run(AT_ONCE, cluster).intents == []


def test_namespaces_and_pod_selectors() -> None:
    cluster = Cluster()
    cluster.node("hot", system=70)
    cluster.add_pods(
        "hot",
        [
            (make_pod("system", node="hot", namespace="kube-system", labels={"app": "web"}), 9),
            (make_pod("other-app", node="hot", labels={"app": "db"}), 8),
            (make_pod("web", node="hot", labels={"app": "web"}), 7),
        ],
    )
    cluster.node("cold", system=10)
    args = {
        **AT_ONCE,
        "evictableNamespaces": {"exclude": ["kube-system"]},
        "podSelectors": [{"name": "web", "selector": {"matchLabels": {"app": "web"}}}],
    }
    assert _run(args, cluster).evicted() == ["web"]


def test_filtered_and_taken_pods_are_passed_over() -> None:
    cluster = _hot_and_cold()
    taken = cluster.pods_on("hot")[0]
    evictor = FakeEvictor(refuse=["p01"], already=[taken])
    _run(AT_ONCE, cluster, evictor)
    assert evictor.evicted() == ["p02"]


def test_a_refused_eviction_moves_on_and_books_nothing() -> None:
    evictor = _run(AT_ONCE, _hot_and_cold(), FakeEvictor(limit=0))
    assert evictor.intents == []


def test_paused_does_nothing() -> None:
    assert _run({**AT_ONCE, "paused": True}, _hot_and_cold()).intents == []


def test_prod_classes() -> None:
    cluster = Cluster()
    cluster.node("low-prod-high", system=0, pods=[("a", 30)], pod_labels=PROD)
    cluster.node("both-low", system=5, pods=[("b", 5)], pod_labels=PROD)
    cluster.node("prod-low", system=60, pods=[("c", 5)], pod_labels=PROD)
    cluster.node("plain-low", system=5, pods=[("d", 30)], pod_labels=BATCH)
    cluster.node("high", system=95)
    names = ("low-prod-high", "both-low", "prod-low", "plain-low", "high")
    usages = [_usage(cluster, name, ("cpu",)) for name in names]
    levels = node_levels(usages, {"cpu": 45}, {"cpu": 90}, ("cpu",), deviation=False)
    prod_levels = node_levels(
        usages, {"cpu": 10}, {"cpu": 20}, ("cpu",), deviation=False, prod=True
    )
    classes = classify(usages, levels, prod_levels)
    # "plain-low" has no prod usage at all: prodLow too, so bothLow.
    assert classes.prod_high == ("low-prod-high",)
    assert classes.both_low == ("both-low", "plain-low")
    assert classes.prod_low == ("prod-low",)
    assert classes.high == ("high",)
    assert classes.low == ()
    assert set(classes.under) == {"low-prod-high", "both-low", "plain-low"}


@settings(max_examples=100, deadline=None)
@given(
    sources=st.lists(st.lists(st.integers(1, 30), min_size=1, max_size=8), min_size=1, max_size=3),
    targets=st.lists(st.tuples(st.integers(0, 45), st.integers(5, 100)), min_size=1, max_size=3),
)
def test_with_node_fit_evicted_pods_fit_the_targets(
    sources: list[list[int]], targets: list[tuple[int, int]]
) -> None:
    """With nodeFit, what is evicted fits what the targets had free: in usage (below their
    75% level) and in allocatable cpu."""
    cluster = Cluster()
    for i, pods in enumerate(sources):
        cluster.node(
            f"s{i}",
            system=max(0, 100 - sum(pods)),
            pods=[(f"s{i}-{j}", used) for j, used in enumerate(pods)],
        )
    for i, (used, allocatable) in enumerate(targets):
        cluster.node(
            f"t{i}",
            system=used,
            allocatable_cores=allocatable,
            annotations={k.ANNOTATION_NODE_RAW_ALLOCATABLE: RAW_100},
        )
    evictor = _run(AT_ONCE, cluster)
    evicted_cpu = sum(pod_requests(i.pod).get("cpu", 0) for i in evictor.intents)
    room_cpu = sum((75 - used) * CORE for used, _ in targets)
    free_cpu = sum(allocatable * CORE for _, allocatable in targets)
    assert evicted_cpu <= room_cpu
    assert evicted_cpu <= free_cpu
    for intent in evictor.intents:
        # Every evicted pod fits some target on its own.
        cpu = pod_requests(intent.pod).get("cpu", 0)
        assert any(cpu <= min((75 - u) * CORE, a * CORE) for u, a in targets)


def test_first_fit_passes_over_full_targets_and_fills_leftover_room(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster()
    # 366 of 400 cores used, 300 the high level: big pods go first (most usage over the level).
    cluster.node("hot", cores=400, pods=[*_pods(12, 30, "big"), *_pods(2, 3, "small")])
    # Coldest first: "a" has 35 cores of room below 75%, "b" 31.
    cluster.node("a", system=40)
    cluster.node("b", system=44)
    with caplog.at_level("INFO", logger="controller.descheduler.plugins.lownodeload.plugin"):
        evictor = _run(AT_ONCE, cluster)
    moves = [
        (found[1], found[2])
        for r in caplog.records
        if (found := re.match(r"LowNodeLoad: evicting (\S+) from \S+ to (\S+):", r.getMessage()))
    ]
    # big00 fills "a" to 5 cores of room, big01 "b" to 1; no target takes a big pod any more,
    # but "a" still takes a small one.
    assert moves == [("default/big00", "a"), ("default/big01", "b"), ("default/small00", "a")]
    assert evictor.evicted() == ["big00", "big01", "small00"]


# --- node usage: which reported pods count ---------------------------------------------------


def _reported(namespace: str, name: str, cpu: int) -> tuple[Pod, int, int]:
    return make_pod(name, node="elsewhere", namespace=namespace), cpu, cpu * 1000


@pytest.mark.parametrize(
    ("on_node", "reported", "cpu", "smallest", "counted"),
    [
        pytest.param(
            [("default", "a"), ("default", "b")],
            [("default", "b", 300), ("default", "a", 100)],
            400,
            100,
            [("default", "a"), ("default", "b")],
            id="reported in another order",
        ),
        pytest.param(
            [("default", "a"), ("default", "b")],
            [("default", "a", 100), ("default", "gone", 900)],
            100,
            100,
            [("default", "a")],
            id="an unreported pod and a reported pod no longer on the node",
        ),
        pytest.param(
            [("default", "a"), ("team", "a")],
            [("team", "a", 200), ("default", "a", 50), ("other", "a", 700)],
            250,
            50,
            [("default", "a"), ("team", "a")],
            id="one name in several namespaces",
        ),
        pytest.param(
            [("default", "a")],
            [("team", "a", 200)],
            0,
            None,
            [],
            id="same name, another namespace: not this pod",
        ),
        pytest.param(
            [("default", "a"), ("default", "b")],
            [("default", "a", 100), ("default", "b", -40)],
            60,
            -40,
            [("default", "a"), ("default", "b")],
            id="a negative report counts and is the smallest",
        ),
    ],
)
def test_node_usage_counts_the_reported_pods_on_the_node(
    on_node: list[tuple[str, str]],
    reported: list[tuple[str, str, int]],
    cpu: int,
    smallest: int | None,
    counted: list[tuple[str, str]],
) -> None:
    pods = [make_pod(name, node="n", namespace=namespace) for namespace, name in on_node]
    metric = make_nodemetric(
        "n", system_cpu=10, pods=[_reported(ns, name, amount) for ns, name, amount in reported]
    )
    usage = node_usage(make_node("n"), metric, pods, ("cpu",), now=T0, expiration_seconds=180)
    assert usage is not None
    assert usage.usage == {"cpu": 10 + cpu, "pods": len(pods)}
    assert usage.smallest == ({} if smallest is None else {"cpu": smallest})
    assert sorted(usage.pod_usage()) == counted
    assert [amounts is not None for amounts in usage.reported] == [
        key in counted for key in on_node
    ]


# --- what a call keeps for the next -------------------------------------------------------------


def test_a_node_usage_is_worked_out_again_when_its_nodemetric_or_pods_change() -> None:
    cluster = _hot_and_cold()
    plugin = LowNodeLoad(load_args(AT_ONCE))
    first = cluster.view()

    def again(
        metrics: Mapping[str, NodeMetric] | None = None,
        pods: Mapping[str, Sequence[Pod]] | None = None,
        now: datetime = T0,
    ) -> int:
        evictor = FakeEvictor()
        plugin.balance(
            CycleView(
                now=now,
                nodes=first.nodes,
                pods_by_node=pods if pods is not None else first.pods_by_node,
                metrics=metrics if metrics is not None else first.metrics,
                all_nodes=first.all_nodes,
            ),
            evictor,
        )
        return len(evictor.intents)

    assert again() == 1
    assert again() == 1  # the same objects: the same answer
    # hot's agent now reports 2 of its 4 pods using 1 core: 44 of 100, not over 75
    cooled = Cluster()
    cooled.node("hot", system=2, pods=[("p0", 20), ("p1", 20), ("p2", 1), ("p3", 1)])
    metric = cooled.metric("hot")
    assert metric is not None
    assert again(metrics={**first.metrics, "hot": metric}) == 0
    assert again() == 1
    # two of hot's pods are gone (a new pod list): 42 of 100
    hot_pods = first.pods_by_node["hot"][:2]
    assert again(pods={**first.pods_by_node, "hot": hot_pods}) == 0
    assert again() == 1
    # the same NodeMetric, now expired
    assert again(now=T0 + timedelta(seconds=180)) == 0


def test_a_sources_order_is_kept_while_its_usage_is_the_same_and_taken_pods_are_dropped() -> None:
    # hot: 84 of 100 cores; its pods use 4, 30, 20 and 28 cores (all batch, same requests
    # order): the order is by usage, most first, so p1 goes first (84 - 30 = 54, below 75).
    cluster = Cluster()
    cluster.node("hot", system=2, pods=[("p0", 4), ("p1", 30), ("p2", 20), ("p3", 28)])
    cluster.node("cold", system=10)
    plugin = LowNodeLoad(load_args(AT_ONCE))
    view = cluster.view()
    by_name = {p.metadata.name: p for p in view.pods_on("hot")}

    def evicted(current: CycleView, *, already: Sequence[str] = ()) -> list[str]:
        evictor = FakeEvictor(already=[by_name[name] for name in already])
        assert plugin.balance(current, evictor).ok
        return evictor.evicted()

    assert evicted(view) == ["p1"]
    assert evicted(view) == ["p1"]  # the same objects: the same order
    # p1 taken by an earlier plugin: the kept order goes on with the next pod
    assert evicted(view, already=["p1"]) == ["p3"]
    assert evicted(view, already=["p1", "p3"]) == ["p2"]
    assert evicted(view) == ["p1"]
    # a new report: p2 now uses the most (84 cores in all again), the order is worked out anew
    moved = Cluster()
    moved.node("hot", system=2, pods=[("p0", 4), ("p1", 20), ("p2", 30), ("p3", 28)])
    metric = moved.metric("hot")
    assert metric is not None
    again = CycleView(
        now=view.now,
        nodes=view.nodes,
        pods_by_node=view.pods_by_node,
        metrics={**view.metrics, "hot": metric},
        all_nodes=view.all_nodes,
    )
    assert evicted(again) == ["p2"]
    assert evicted(view) == ["p1"]


@settings(max_examples=60, deadline=None)
@given(
    cores=st.lists(st.sampled_from([50, 100]), min_size=3, max_size=7),
    first=st.lists(st.lists(st.integers(1, 30), max_size=5), min_size=7, max_size=7),
    steps=st.lists(
        st.lists(
            st.tuples(st.integers(0, 6), st.lists(st.integers(1, 30), max_size=5)), max_size=3
        ),
        min_size=1,
        max_size=4,
    ),
    deviation=st.booleans(),
)
def test_what_a_call_keeps_never_changes_what_it_decides(
    cores: list[int],
    first: list[list[int]],
    steps: list[list[tuple[int, list[int]]]],
    deviation: bool,
) -> None:
    # One plugin keeps its per-node work between calls; a twin forgets it before each call.
    # Over views where only some nodes' pods or NodeMetrics are new objects, both decide the
    # same (and their anomaly detectors see the same calls).
    thresholds = (
        {
            "useDeviationThresholds": True,
            "lowThresholds": {"cpu": 10},
            "highThresholds": {"cpu": 10},
        }
        if deviation
        else {}
    )
    args = load_args({**AT_ONCE, **thresholds})
    keeping, forgetting = LowNodeLoad(args), LowNodeLoad(args)
    names = [f"n{i}" for i in range(len(cores))]
    nodes = [
        make_node(name, cpu=c * CORE, memory=MEMORY) for name, c in zip(names, cores, strict=True)
    ]
    pods: dict[str, tuple[Pod, ...]] = {}
    metrics: dict[str, NodeMetric] = {}

    def report(i: int, used: list[int]) -> None:
        name = names[i]
        on_node = tuple(
            make_pod(f"{name}-p{j}-{u}", node=name, cpu=u * CORE, labels=BATCH)
            for j, u in enumerate(used)
        )
        pods[name] = on_node
        metrics[name] = make_nodemetric(
            name,
            at=T0,
            system_cpu=CORE,
            pods=[(p, u * CORE, 0) for p, u in zip(on_node, used, strict=True)],
        )

    for i in range(len(names)):
        report(i, first[i])
    for changes in [[], *steps]:
        for i, used in changes:
            if i < len(names):
                report(i, used)
        view = CycleView(
            now=T0,
            nodes=tuple(nodes),
            pods_by_node=dict(pods),
            metrics=dict(metrics),
            all_nodes={n.metadata.name: n for n in nodes},
        )
        forgetting._usages, forgetting._orders, forgetting._classified = {}, {}, {}
        decided = []
        for plugin in (keeping, forgetting):
            evictor = FakeEvictor()
            assert plugin.balance(view, evictor).ok
            decided.append([(i.pod.metadata.name, i.reason) for i in evictor.intents])
        assert decided[0] == decided[1]
