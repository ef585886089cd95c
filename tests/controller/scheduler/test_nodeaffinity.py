"""NodeAffinity: nodeSelector and required terms filter, preferred terms score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from apis.core import (
    Affinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
)
from apis.core import (
    NodeAffinity as NodeAffinitySpec,
)
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.nodeaffinity import NodeAffinity, requirement_matches
from controller.scheduler.podinfo import PodInfo
from tests.controller.scheduler import expr, make_node, make_pod

MISMATCH = "node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize(
    ("req", "labels", "expected"),
    [
        (expr("zone", "In", "a", "b"), {"zone": "a"}, True),
        (expr("zone", "In", "a", "b"), {"zone": "c"}, False),
        (expr("zone", "In", "a"), {}, False),
        (expr("zone", "NotIn", "a"), {"zone": "b"}, True),
        (expr("zone", "NotIn", "a"), {"zone": "a"}, False),
        (expr("zone", "NotIn", "a"), {}, True),
        (expr("gpu", "Exists"), {"gpu": ""}, True),
        (expr("gpu", "Exists"), {}, False),
        (expr("gpu", "DoesNotExist"), {}, True),
        (expr("gpu", "DoesNotExist"), {"gpu": "a100"}, False),
        (expr("cores", "Gt", "8"), {"cores": "16"}, True),
        (expr("cores", "Gt", "8"), {"cores": "8"}, False),
        (expr("cores", "Gt", "8"), {"cores": "many"}, False),
        (expr("cores", "Gt", "8"), {}, False),
        (expr("cores", "Lt", "8"), {"cores": "4"}, True),
        (expr("cores", "Lt", "8"), {"cores": "-1"}, True),
        (expr("cores", "Lt", "x"), {"cores": "4"}, False),
        (expr("cores", "Lt", "8", "9"), {"cores": "4"}, False),
        (expr("zone", "Like", "a"), {"zone": "a"}, False),
    ],
    ids=lambda v: str(v) if not isinstance(v, NodeSelectorRequirement) else v.operator,
)
def test_requirement_operators(
    req: NodeSelectorRequirement, labels: Mapping[str, str], expected: bool
) -> None:
    assert requirement_matches(req, labels) is expected


NODES = [
    make_node("n1", labels={"zone": "a", "gpu": "a100", "kubernetes.io/hostname": "n1"}),
    make_node("n2", labels={"zone": "b", "kubernetes.io/hostname": "n2"}),
    make_node("n3", labels={"zone": "a", "kubernetes.io/hostname": "n3"}),
]


def _filter(pod: Pod) -> tuple[list[str], dict[str, list[str]]]:
    table = NodeTable(NODES)
    result = NodeAffinity(fw.NoArgs()).filter(
        fw.CycleState(), PodInfo.of(pod, table), table, np.ones(len(table), bool)
    )
    passed = [table.names[r] for r in np.flatnonzero(result.passed)]
    reasons = {r.reason: [table.names[i] for i in r.rows] for r in result.rejections}
    for rejection in result.rejections:
        assert rejection.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    return passed, reasons


@pytest.mark.parametrize(
    ("pod", "passed"),
    [
        pytest.param(make_pod("p"), ["n1", "n2", "n3"], id="no-constraints"),
        pytest.param(make_pod("p", selector={"zone": "a"}), ["n1", "n3"], id="node-selector"),
        pytest.param(
            make_pod("p", selector={"zone": "a", "gpu": "a100"}), ["n1"], id="selector-all-labels"
        ),
        pytest.param(
            make_pod("p", required=[[expr("zone", "In", "b")], [expr("gpu", "Exists")]]),
            ["n1", "n2"],
            id="terms-are-ored",
        ),
        pytest.param(
            make_pod("p", required=[[expr("zone", "In", "a"), expr("gpu", "DoesNotExist")]]),
            ["n3"],
            id="expressions-are-anded",
        ),
        pytest.param(
            make_pod("p", selector={"zone": "b"}, required=[[expr("gpu", "Exists")]]),
            [],
            id="selector-and-affinity-both-apply",
        ),
        pytest.param(
            make_pod("p", required=[[expr("kubernetes.io/hostname", "NotIn", "n1", "n2")]]),
            ["n3"],
            id="hostname-per-node",
        ),
        pytest.param(make_pod("p", required=[[]]), [], id="empty-term-matches-nothing"),
        pytest.param(make_pod("p", required=[]), [], id="no-terms-matches-nothing"),
    ],
)
def test_filter(pod: Pod, passed: list[str]) -> None:
    got, reasons = _filter(pod)
    assert got == passed
    rejected = [n.metadata.name for n in NODES if n.metadata.name not in passed]
    assert reasons == ({MISMATCH: rejected} if rejected else {})


def test_match_fields_select_by_node_name() -> None:
    term = NodeSelectorTerm(
        match_fields=(NodeSelectorRequirement(key="metadata.name", operator="In", values=("n2",)),)
    )
    pod = make_pod("p")
    affinity = Affinity(
        node_affinity=NodeAffinitySpec(
            required_during_scheduling_ignored_during_execution=NodeSelector(
                node_selector_terms=(term,)
            )
        )
    )
    pod = pod.__class__(
        metadata=pod.metadata,
        spec=pod.spec.__class__(containers=pod.spec.containers, affinity=affinity),
    )
    assert _filter(pod) == (["n2"], {MISMATCH: ["n1", "n3"]})


@pytest.mark.parametrize(
    ("preferred", "expected"),
    [
        pytest.param([], None, id="none-skips"),
        # n1 matches both (3 + 1 = 4), n2 nothing, n3 zone only (3): scaled to the best 4
        pytest.param(
            [(3, [expr("zone", "In", "a")]), (1, [expr("gpu", "Exists")])],
            [100, 0, 75],
            id="weights-summed-and-normalized",
        ),
        pytest.param([(5, [expr("zone", "In", "x")])], [0, 0, 0], id="nothing-matches"),
    ],
)
def test_preferred_terms_score(
    preferred: Sequence[tuple[int, Sequence[NodeSelectorRequirement]]],
    expected: list[int] | None,
) -> None:
    table = NodeTable(NODES)
    plugin = NodeAffinity(fw.NoArgs())
    pod = PodInfo.of(make_pod("p", preferred=preferred), table)
    state = fw.CycleState()
    rows = np.arange(len(table))
    status = plugin.pre_score(state, pod, table, rows)
    if expected is None:
        assert status.code is fw.Code.SKIP
        return
    assert status.is_success
    scores = plugin.normalize(state, pod, plugin.score(state, pod, table, rows))
    assert scores.tolist() == expected
