"""NodeResourcesFit: the fit filter's reasons and the Least/MostAllocated scores."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.core import Node, Pod
from apis.resources import ResourceList
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.noderesources import (
    NodeResourcesFit,
    NodeResourcesFitArgs,
    ResourceWeight,
    ScoringStrategy,
)
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import PluginConfig, ProfileConfig, ProfileError, build_profile
from tests.controller.scheduler import GI, MI, make_node, make_pod

GPU = "nvidia.com/gpu"
Strategy = Literal["LeastAllocated", "MostAllocated"]


def _filter(
    nodes: Sequence[Node],
    pod: Pod,
    assigned: Sequence[Pod] = (),
    args: NodeResourcesFitArgs | None = None,
) -> tuple[list[str], dict[str, list[str]]]:
    """(names of passing nodes, reason -> rejected node names)."""
    table = NodeTable(nodes, assigned)
    plugin = NodeResourcesFit(args or NodeResourcesFitArgs())
    result = plugin.filter(
        fw.CycleState(), PodInfo.of(pod, table), table, np.ones(len(table), bool)
    )
    passed = [table.names[r] for r in np.flatnonzero(result.passed)]
    reasons = {r.reason: [table.names[i] for i in r.rows] for r in result.rejections}
    return passed, reasons


@pytest.mark.parametrize(
    ("pod", "assigned", "passed", "reasons"),
    [
        pytest.param(make_pod("p", cpu=1000, memory=GI), (), ["big", "small"], {}, id="fits"),
        pytest.param(
            make_pod("p", cpu=3000), (), ["big"], {"Insufficient cpu": ["small"]}, id="cpu"
        ),
        pytest.param(
            make_pod("p", cpu=3000, memory=6 * GI),
            (),
            ["big"],
            {"Insufficient cpu": ["small"], "Insufficient memory": ["small"]},
            id="two-reasons-one-node",
        ),
        pytest.param(
            make_pod("p", cpu=1000),
            (make_pod("q", cpu=3500, node="big"),),
            ["small"],
            {"Insufficient cpu": ["big"]},
            id="requested-counts",
        ),
        pytest.param(
            make_pod("p", cpu=0, memory=0),
            (make_pod("q", node="small"),),
            ["big"],
            {"Too many pods": ["small"]},
            id="pods-limit",
        ),
        pytest.param(
            make_pod("p", extra={GPU: 2}),
            (),
            ["big"],
            {f"Insufficient {GPU}": ["small"]},
            id="extended-resource-absent-on-a-node",
        ),
        pytest.param(
            make_pod("p", extra={GPU: 5}),
            (),
            [],
            {f"Insufficient {GPU}": ["big", "small"]},
            id="extended-resource-too-little",
        ),
        pytest.param(
            make_pod("p", extra={"example.com/fpga": 1}),
            (),
            [],
            {"Insufficient example.com/fpga": ["big", "small"]},
            id="resource-no-node-has",
        ),
    ],
)
def test_fit_filter(
    pod: Pod, assigned: Sequence[Pod], passed: list[str], reasons: Mapping[str, list[str]]
) -> None:
    nodes = [
        make_node("big", cpu=4000, memory=8 * GI, extra={GPU: 4}),
        make_node("small", cpu=2000, memory=4 * GI, pods=1),
    ]
    assert _filter(nodes, pod, assigned) == (passed, reasons)


@pytest.mark.parametrize(
    "args",
    [
        NodeResourcesFitArgs(ignored_resources=("example.com/fpga",)),
        NodeResourcesFitArgs(ignored_resource_groups=("example.com",)),
    ],
    ids=["ignored-resource", "ignored-group"],
)
def test_ignored_extended_resources_are_not_checked(args: NodeResourcesFitArgs) -> None:
    nodes = [make_node("n")]
    pod = make_pod("p", cpu=100, extra={"example.com/fpga": 1})
    assert _filter(nodes, pod, args=args) == (["n"], {})


def _scores(
    node: Node, pod: Pod, assigned: Sequence[Pod] = (), strategy: Strategy = "LeastAllocated"
) -> int:
    table = NodeTable([node], assigned)
    args = NodeResourcesFitArgs(scoring_strategy=ScoringStrategy(type=strategy))
    plugin = NodeResourcesFit(args)
    scores = plugin.score(fw.CycleState(), PodInfo.of(pod, table), table, np.arange(1))
    return int(scores[0])


@pytest.mark.parametrize(
    ("node", "pod", "assigned", "strategy", "expected"),
    [
        # cpu (4000-2000)*100/4000 = 50, memory (8-4)*100/8 = 50 -> 50
        pytest.param(
            make_node("n", cpu=4000, memory=8 * GI),
            make_pod("p", cpu=1000, memory=2 * GI),
            (make_pod("q", cpu=1000, memory=2 * GI, node="n"),),
            "LeastAllocated",
            50,
            id="least-half-used",
        ),
        # cpu (10000-3000)*100/10000 = 70, memory (10-1)*100/10 = 90 -> 80
        pytest.param(
            make_node("n", cpu=10000, memory=10 * GI),
            make_pod("p", cpu=3000, memory=GI),
            (),
            "LeastAllocated",
            80,
            id="least-empty-node",
        ),
        # cpu 3000*100/10000 = 30, memory 1*100/10 = 10 -> 20
        pytest.param(
            make_node("n", cpu=10000, memory=10 * GI),
            make_pod("p", cpu=3000, memory=GI),
            (),
            "MostAllocated",
            20,
            id="most-empty-node",
        ),
        # request-less pod counts 100m / 200Mi: cpu (1000-100)*100/1000 = 90,
        # memory (1000Mi-200Mi)*100/1000Mi = 80 -> 85
        pytest.param(
            make_node("n", cpu=1000, memory=1000 * MI),
            make_pod("p"),
            (),
            "LeastAllocated",
            85,
            id="least-nonzero-defaults",
        ),
        # cpu over allocatable scores 0; memory counts q's 200Mi default too:
        # (8192Mi - 200Mi - 1024Mi)*100/8192Mi = 85 -> (0 + 85) // 2 = 42
        pytest.param(
            make_node("n", cpu=1000, memory=8 * GI),
            make_pod("p", cpu=500, memory=GI),
            (make_pod("q", cpu=800, node="n"),),
            "LeastAllocated",
            42,
            id="least-over-allocatable",
        ),
        # batch-cpu counts only when requested: cpu (4000-100)*100/4000 = 97,
        # memory (8192Mi-200Mi)*100/8192Mi = 97, batch-cpu (8000-2000)*100/8000 = 75 -> 89
        pytest.param(
            make_node("n", cpu=4000, memory=8 * GI, extra={"kubernetes.io/batch-cpu": 8000}),
            make_pod("p", extra={"kubernetes.io/batch-cpu": 2000}),
            (),
            "LeastAllocated",
            89,
            id="least-batch-resource",
        ),
        # not requested: batch-cpu left out -> cpu 97, memory 97 -> 97
        pytest.param(
            make_node("n", cpu=4000, memory=8 * GI, extra={"kubernetes.io/batch-cpu": 8000}),
            make_pod("p"),
            (),
            "LeastAllocated",
            97,
            id="least-batch-not-requested",
        ),
    ],
)
def test_scores(
    node: Node, pod: Pod, assigned: Sequence[Pod], strategy: Strategy, expected: int
) -> None:
    assert _scores(node, pod, assigned, strategy) == expected


def test_weights_make_a_weighted_mean() -> None:
    # cpu 70 (weight 3), memory 90 (weight 1): (3*70 + 90) // 4 = 75
    args = NodeResourcesFitArgs(
        scoring_strategy=ScoringStrategy(
            resources=(ResourceWeight(name="cpu", weight=3), ResourceWeight(name="memory"))
        )
    )
    table = NodeTable([make_node("n", cpu=10000, memory=10 * GI)])
    pod = PodInfo.of(make_pod("p", cpu=3000, memory=GI), table)
    scores = NodeResourcesFit(args).score(fw.CycleState(), pod, table, np.arange(1))
    assert scores.tolist() == [75]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"scoringStrategy": {"type": "Balanced"}}, "scoringStrategy.type"),
        ({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}}, "weight"),
        ({"scoringStrategy": {"resources": []}}, "at least one resource"),
        ({"ignoredResource": ["x"]}, "ignoredResource"),
    ],
    ids=["bad-type", "zero-weight", "no-resources", "unknown-field"],
)
def test_bad_args_are_rejected_naming_the_field(args: dict[str, object], message: str) -> None:
    config = ProfileConfig(
        filter=("NodeResourcesFit",),
        plugin_config=(PluginConfig(name="NodeResourcesFit", args=args),),
    )
    with pytest.raises(ProfileError, match="NodeResourcesFit") as raised:
        build_profile(config)
    assert message in str(raised.value)


def test_a_node_stating_no_pod_limit_takes_any_number() -> None:
    unlimited = make_node("n")
    unlimited = unlimited.__class__(
        metadata=unlimited.metadata,
        status=unlimited.status.__class__(
            allocatable=ResourceList({"cpu": 4000, "memory": 8 * GI})
        ),
    )
    assigned = [make_pod(f"q{i}", node="n") for i in range(200)]
    assert _filter([unlimited], make_pod("p"), assigned) == (["n"], {})
    zero = make_node("z", pods=0)
    assert _filter([zero], make_pod("p")) == ([], {"Too many pods": ["z"]})


@settings(max_examples=80, deadline=None)
@given(
    allocatable=st.lists(
        st.tuples(st.integers(0, 64_000), st.integers(0, 512 * GI)), min_size=2, max_size=6
    ),
    used=st.lists(st.tuples(st.integers(0, 70_000), st.integers(0, 600 * GI)), max_size=6),
    request=st.tuples(st.integers(0, 70_000), st.integers(0, 600 * GI)),
    weights=st.tuples(st.integers(1, 100), st.integers(1, 100)),
)
def test_cpu_and_memory_scores_equal_the_general_path(
    allocatable: list[tuple[int, int]],
    used: list[tuple[int, int]],
    request: tuple[int, int],
    weights: tuple[int, int],
) -> None:
    # cpu then memory is scored on both columns at once; memory then cpu takes the general
    # per-resource path: the weighted means must be the same on every node.
    nodes = [make_node(f"n{i}", cpu=c, memory=m) for i, (c, m) in enumerate(allocatable)]
    assigned = [
        make_pod(f"q{i}", cpu=c, memory=m, node=f"n{i % len(nodes)}")
        for i, (c, m) in enumerate(used)
    ]
    table = NodeTable(nodes, assigned)
    pod = PodInfo.of(make_pod("p", cpu=request[0], memory=request[1]), table)
    cpu, memory = (
        ResourceWeight(name="cpu", weight=weights[0]),
        ResourceWeight(name="memory", weight=weights[1]),
    )
    feasible = np.arange(len(table))

    def scores(order: tuple[ResourceWeight, ...]) -> list[int]:
        args = NodeResourcesFitArgs(scoring_strategy=ScoringStrategy(resources=order))
        plugin = NodeResourcesFit(args)
        return [int(v) for v in plugin.score(fw.CycleState(), pod, table, feasible)]

    fast = scores((cpu, memory))
    assert fast == scores((memory, cpu))
    assert all(0 <= score <= fw.MAX_NODE_SCORE for score in fast)
