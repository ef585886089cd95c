"""TaintToleration, NodeUnschedulable and NodeName."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from apis.core import Pod, Taint, Toleration
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.nodename import NodeName
from controller.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from controller.scheduler.plugins.tainttoleration import TaintToleration, tolerates
from controller.scheduler.podinfo import PodInfo
from tests.controller.scheduler import make_node, make_pod

GPU_TAINT = Taint(key="dedicated", value="gpu", effect="NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration(key="dedicated", operator="Equal", value="gpu"), GPU_TAINT, True),
        (Toleration(key="dedicated", value="gpu"), GPU_TAINT, True),
        (Toleration(key="dedicated", operator="Equal", value="cpu"), GPU_TAINT, False),
        (Toleration(key="dedicated", operator="Exists"), GPU_TAINT, True),
        (Toleration(key="other", operator="Exists"), GPU_TAINT, False),
        (Toleration(operator="Exists"), GPU_TAINT, True),
        (Toleration(operator="Exists", effect="NoExecute"), GPU_TAINT, False),
        (Toleration(key="dedicated", operator="Exists", effect="NoSchedule"), GPU_TAINT, True),
        (Toleration(key="dedicated", operator="Lt", value="gpu"), GPU_TAINT, False),
        (Toleration(key="k", operator="Equal"), Taint(key="k", effect="NoSchedule"), True),
    ],
    ids=[
        "equal",
        "empty-operator-is-equal",
        "equal-other-value",
        "exists",
        "exists-other-key",
        "empty-key-exists-matches-all",
        "other-effect",
        "same-effect",
        "unknown-operator",
        "equal-empty-values",
    ],
)
def test_tolerates(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def _run_filter(
    plugin: fw.FilterPlugin, table: NodeTable, pod: Pod
) -> tuple[list[str], dict[str, list[str]]]:
    result = plugin.filter(
        fw.CycleState(), PodInfo.of(pod, table), table, np.ones(len(table), bool)
    )
    for rejection in result.rejections:
        assert rejection.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    return (
        [table.names[r] for r in np.flatnonzero(result.passed)],
        {r.reason: [table.names[i] for i in r.rows] for r in result.rejections},
    )


TAINTED = NodeTable(
    [
        make_node("plain"),
        make_node("gpu", taints=[GPU_TAINT]),
        make_node("evict", taints=[Taint(key="maint", value="", effect="NoExecute")]),
        make_node("soft", taints=[Taint(key="spot", value="true", effect="PreferNoSchedule")]),
        make_node(
            "both",
            taints=[Taint(key="spot", value="true", effect="PreferNoSchedule"), GPU_TAINT],
        ),
    ]
)


@pytest.mark.parametrize(
    ("tolerations", "passed", "reasons"),
    [
        pytest.param(
            (),
            ["plain", "soft"],
            {
                "node(s) had untolerated taint {dedicated: gpu}": ["both", "gpu"],
                "node(s) had untolerated taint {maint: }": ["evict"],
            },
            id="no-tolerations",
        ),
        pytest.param(
            (Toleration(key="dedicated", operator="Exists"),),
            ["both", "gpu", "plain", "soft"],
            {"node(s) had untolerated taint {maint: }": ["evict"]},
            id="tolerates-gpu",
        ),
        pytest.param(
            (Toleration(operator="Exists"),),
            ["both", "evict", "gpu", "plain", "soft"],
            {},
            id="tolerates-everything",
        ),
    ],
)
def test_taint_filter(
    tolerations: Sequence[Toleration], passed: list[str], reasons: dict[str, list[str]]
) -> None:
    pod = make_pod("p", tolerations=tolerations)
    got_passed, got_reasons = _run_filter(TaintToleration(fw.NoArgs()), TAINTED, pod)
    assert sorted(got_passed) == passed
    assert {k: sorted(v) for k, v in got_reasons.items()} == reasons


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        # rows: both, evict, gpu, plain, soft; "both" and "soft" carry one untolerated
        # PreferNoSchedule taint each: reversed, 100 - 1*100/1 = 0
        pytest.param((), [0, 100, 100, 100, 0], id="untolerated-prefer"),
        pytest.param(
            (Toleration(key="spot", operator="Exists", effect="PreferNoSchedule"),),
            [100, 100, 100, 100, 100],
            id="tolerated-prefer",
        ),
        pytest.param(
            (Toleration(key="spot", operator="Exists", effect="NoSchedule"),),
            [0, 100, 100, 100, 0],
            id="other-effect-does-not-count",
        ),
    ],
)
def test_prefer_no_schedule_score(tolerations: Sequence[Toleration], expected: list[int]) -> None:
    plugin = TaintToleration(fw.NoArgs())
    pod = PodInfo.of(make_pod("p", tolerations=tolerations), TAINTED)
    state = fw.CycleState()
    rows = np.arange(len(TAINTED))
    assert plugin.pre_score(state, pod, TAINTED, rows).is_success
    assert plugin.normalize(state, pod, plugin.score(state, pod, TAINTED, rows)).tolist() == (
        expected
    )


def test_score_skipped_without_prefer_no_schedule_taints() -> None:
    table = NodeTable([make_node("a", taints=[GPU_TAINT])])
    pod = PodInfo.of(make_pod("p"), table)
    status = TaintToleration(fw.NoArgs()).pre_score(fw.CycleState(), pod, table, np.arange(1))
    assert status.code is fw.Code.SKIP


@pytest.mark.parametrize(
    ("tolerations", "passed"),
    [
        pytest.param((), ["open"], id="cordoned-rejected"),
        pytest.param(
            (Toleration(key="node.kubernetes.io/unschedulable", operator="Exists"),),
            ["cordoned", "open"],
            id="toleration-admits",
        ),
    ],
)
def test_node_unschedulable(tolerations: Sequence[Toleration], passed: list[str]) -> None:
    table = NodeTable([make_node("cordoned", unschedulable=True), make_node("open")])
    got, reasons = _run_filter(
        NodeUnschedulable(fw.NoArgs()), table, make_pod("p", tolerations=tolerations)
    )
    assert got == passed
    assert reasons == ({} if "cordoned" in passed else {"node(s) were unschedulable": ["cordoned"]})


@pytest.mark.parametrize(
    ("wanted", "passed"),
    [("", ["a", "b"]), ("b", ["b"]), ("gone", [])],
    ids=["unset", "named", "unknown-node"],
)
def test_node_name(wanted: str, passed: list[str]) -> None:
    table = NodeTable([make_node("a"), make_node("b")])
    got, reasons = _run_filter(NodeName(fw.NoArgs()), table, make_pod("p", node=wanted))
    assert got == passed
    rejected = [n for n in ("a", "b") if n not in passed]
    assert reasons == (
        {"node(s) didn't match the requested node name": rejected} if rejected else {}
    )


@pytest.mark.parametrize(
    "tolerations",
    [
        pytest.param((), id="none"),
        pytest.param((Toleration(key="dedicated", operator="Exists"),), id="tolerates-gpu"),
        pytest.param((Toleration(operator="Exists"),), id="tolerates-everything"),
    ],
)
def test_taint_filter_remembers_per_toleration_list_and_node_set(
    tolerations: Sequence[Toleration],
) -> None:
    # One plugin, every candidate (the table's own mask), pods of the same tolerations, and
    # a node set that changes: each answer is what a fresh plugin on a subset mask gives.
    plugin = TaintToleration(fw.NoArgs())
    retainted = NodeTable(
        [
            make_node("plain", taints=[GPU_TAINT]),
            make_node("gpu"),
            make_node("evict", taints=[Taint(key="maint", value="", effect="NoExecute")]),
        ]
    )
    for table in (TAINTED, TAINTED, retainted, TAINTED):
        for name in ("p", "q"):
            pod = PodInfo.of(make_pod(name, tolerations=tolerations), table)
            got = plugin.filter(fw.CycleState(), pod, table, table.all_mask)
            want = TaintToleration(fw.NoArgs()).filter(
                fw.CycleState(), pod, table, np.ones(len(table), bool)
            )
            assert got.passed.tolist() == want.passed.tolist()
            assert [(r.reason, r.code, r.rows.tolist()) for r in got.rejections] == [
                (r.reason, r.code, r.rows.tolist()) for r in want.rejections
            ]
