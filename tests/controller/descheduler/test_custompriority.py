"""The CustomPriority Balance plugin (controller-spec §6.3): args, tiers, candidates, both modes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis.codec import decode_as
from apis.core import (
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    ResourceRequirements,
    Taint,
    Toleration,
)
from apis.errors import DecodeError
from apis.meta import LabelSelector
from apis.resources import ResourceList
from controller.descheduler import nodefit
from controller.descheduler.framework import (
    BalancePlugin,
    CycleView,
    EvictionIntent,
    Evictor,
    Status,
)
from controller.descheduler.plugins.custompriority import (
    MAX_CONSECUTIVE_MISSES,
    CustomPriority,
    CustomPriorityArgs,
    EvictionTier,
    _constraints,
    _Ledger,
    _Targets,
    candidate_order,
    container_requests_sum,
)
from tests.controller.descheduler.conftest import GI, T0, make_node, make_pod

CORES = 1000
OD = {"pool": "on-demand"}
RS = {"pool": "reserved"}
SPOT = {"pool": "spot"}


class FakeEvictor:
    """An :class:`Evictor` with the limits a test sets.

    ``limit``: evictions admitted in total; ``refuse``: pod names ``evict`` refuses; ``reject``:
    pod names ``filter`` rejects; ``pre_reject``: pod names ``pre_eviction_filter`` rejects;
    ``earlier``: intents other plugins recorded before.
    """

    def __init__(
        self,
        *,
        limit: int | None = None,
        refuse: Iterable[str] = (),
        reject: Iterable[str] = (),
        pre_reject: Iterable[str] = (),
        earlier: Iterable[EvictionIntent] = (),
    ) -> None:
        self.limit = limit
        self.refuse = frozenset(refuse)
        self.reject = frozenset(reject)
        self.pre_reject = frozenset(pre_reject)
        self._intents = list(earlier)
        self._mine = 0
        self._cordoned: list[str] = []
        self.uncordoned: list[str] = []

    def filter(self, pod: Pod) -> bool:
        return pod.metadata.name not in self.reject

    def pre_eviction_filter(self, pod: Pod) -> bool:
        return pod.metadata.name not in self.pre_reject

    def can_evict_from(self, node: str) -> bool:
        return self.limit is None or self._mine < self.limit

    def evict(self, pod: Pod, *, plugin: str, reason: str) -> bool:
        if pod.metadata.name in self.refuse:
            return False
        if self.limit is not None and self._mine >= self.limit:
            return False
        self._mine += 1
        self._intents.append(
            EvictionIntent(pod=pod, node=pod.spec.node_name, plugin=plugin, reason=reason)
        )
        return True

    @property
    def intents(self) -> Sequence[EvictionIntent]:
        return tuple(self._intents)

    def cordon(self, node: str, *, plugin: str) -> None:
        assert plugin == "CustomPriority"
        self._cordoned.append(node)

    def uncordon(self, node: str) -> None:
        self._cordoned.remove(node)
        self.uncordoned.append(node)

    @property
    def cordoned(self) -> Sequence[str]:
        return tuple(self._cordoned)


def tier(name: str, labels: Mapping[str, str] | None) -> dict[str, Any]:
    return {"name": name, "nodeSelector": {"matchLabels": dict(labels or {})}}


TWO_TIERS = [tier("on-demand", OD), tier("reserved", RS)]


def make_args(**fields: Any) -> CustomPriorityArgs:
    """Args from their wire form (camelCase); two tiers, on-demand then reserved, by default."""
    raw = {"evictionOrder": TWO_TIERS, **fields}
    return decode_as(raw, CustomPriorityArgs)


def make_view(
    nodes: Sequence[Node], pods: Iterable[Pod], direct_nodes: frozenset[str] | None = None
) -> CycleView:
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        by_node.setdefault(pod.spec.node_name, []).append(pod)
    return CycleView(
        now=T0,
        nodes=sorted(nodes, key=lambda n: n.metadata.name),
        pods_by_node=by_node,
        all_nodes={n.metadata.name: n for n in nodes},
        direct_nodes=direct_nodes,
    )


def balance(
    args: CustomPriorityArgs,
    nodes: Sequence[Node],
    pods: Iterable[Pod],
    evictor: FakeEvictor | None = None,
    *,
    direct_nodes: frozenset[str] | None = None,
) -> FakeEvictor:
    evictor = evictor or FakeEvictor()
    status = CustomPriority(args).balance(make_view(nodes, pods, direct_nodes), evictor)
    assert status == Status()
    return evictor


def evicted(evictor: FakeEvictor) -> list[str]:
    return [i.pod.metadata.name for i in evictor.intents if i.plugin == "CustomPriority"]


def pod(name: str, node: str, cpu: float = 1, memory: int = GI, **kw: Any) -> Pod:
    return make_pod(name, node=node, cpu=int(cpu * CORES), memory=memory, **kw)


def with_spec(p: Pod, **changes: Any) -> Pod:
    return msgspec.structs.replace(p, spec=msgspec.structs.replace(p.spec, **changes))


def node(name: str, labels: Mapping[str, str], cpu: float = 8, **kw: Any) -> Node:
    return make_node(name, cpu=int(cpu * CORES), memory=64 * GI, labels=labels, **kw)


# --- args ---------------------------------------------------------------------------------------


def test_plugin_satisfies_the_framework_protocols() -> None:
    assert isinstance(CustomPriority(make_args()), BalancePlugin)
    assert isinstance(FakeEvictor(), Evictor)


def test_args_defaults() -> None:
    args = make_args()
    assert (args.paused, args.dry_run, args.node_fit, args.mode, args.auto_cordon) == (
        False,
        False,
        True,
        "BestEffort",
        False,
    )
    assert args.evictable_namespaces is None
    assert args.pod_selectors == ()
    assert [t.name for t in args.eviction_order] == ["on-demand", "reserved"]


def test_args_read_every_field_in_camel_case() -> None:
    raw = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "CustomPriorityArgs",
        "paused": True,
        "dryRun": True,
        "evictableNamespaces": {"exclude": ["kube-system"]},
        "nodeSelector": {"matchExpressions": [{"key": "pool", "operator": "Exists"}]},
        "podSelectors": [{"name": "web", "selector": {"matchLabels": {"app": "web"}}}],
        "nodeFit": False,
        "evictionOrder": [
            {**tier("on-demand", OD), "keepThreshold": 10, "rejectThreshold": 90},
            tier("reserved", RS),
        ],
        "mode": "DrainNode",
        "autoCordon": True,
    }
    args = decode_as(raw, CustomPriorityArgs)
    assert (args.paused, args.dry_run, args.auto_cordon, args.node_fit) == (True, True, True, False)
    assert args.mode == "DrainNode"
    assert args.evictable_namespaces is not None
    assert args.evictable_namespaces.exclude == ("kube-system",)
    assert args.eviction_order[0].keep_threshold == 10
    assert args.eviction_order[0].reject_threshold == 90
    assert msgspec.json.decode(msgspec.json.encode(args)) == raw


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        ({"evictionOrder": [tier("only", OD)]}, "evictionOrder", "['only']"),
        ({"evictionOrder": [tier("a", OD), tier("a", RS)]}, "evictionOrder[1].name", "'a'"),
        ({"evictionOrder": [tier("Bad_Name", OD), tier("b", RS)]}, "evictionOrder[0].name", "Bad"),
        ({"evictionOrder": [tier("a", OD), {"name": "b"}]}, "evictionOrder[1].nodeSelector", ""),
        (
            {"evictionOrder": [{**tier("a", OD), "keepThreshold": 101}, tier("b", RS)]},
            "evictionOrder[0].keepThreshold",
            "101",
        ),
        (
            {"evictionOrder": [tier("a", OD), {**tier("b", RS), "rejectThreshold": -1}]},
            "evictionOrder[1].rejectThreshold",
            "-1",
        ),
        ({"mode": "Drain"}, "mode", "Drain"),
        (
            {"evictableNamespaces": {"include": ["a"], "exclude": ["b"]}},
            "evictableNamespaces",
            "include",
        ),
        (
            {
                "podSelectors": [
                    {"selector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}}
                ]
            },
            "podSelectors[0].selector",
            "Has",
        ),
        ({"nodeFitt": True}, "nodeFitt", ""),
        ({"kind": "LowNodeLoadArgs"}, "kind", "LowNodeLoadArgs"),
    ],
)
def test_bad_args_name_the_field_and_value(change: dict[str, Any], field: str, value: str) -> None:
    with pytest.raises(DecodeError) as caught:
        make_args(**change)
    assert field in str(caught.value)
    assert value in str(caught.value)


def test_bad_args_built_in_code_raise_value_error() -> None:
    with pytest.raises(ValueError, match=r"evictionOrder\[1\]\.name: 'a' is listed twice"):
        CustomPriorityArgs(
            eviction_order=(
                EvictionTier(name="a", node_selector=LabelSelector()),
                EvictionTier(name="a", node_selector=LabelSelector()),
            )
        )


# --- tiers --------------------------------------------------------------------------------------

BOTH = {**OD, "reserved": "yes"}


@pytest.mark.parametrize(
    ("order", "nodes", "pods", "expected"),
    [
        pytest.param(
            TWO_TIERS,
            [node("src", OD), node("dst", RS)],
            [pod("a", "src"), pod("b", "dst")],
            ["a"],
            id="on-demand pods move to reserved",
        ),
        pytest.param(
            # "src" matches both selectors: the first tier takes it, so it is a source.
            [tier("on-demand", {"reserved": "yes"}), tier("reserved", {})],
            [node("src", BOTH), node("dst", RS)],
            [pod("a", "src"), pod("b", "dst")],
            ["a"],
            id="first matching tier wins",
        ),
        pytest.param(
            [tier("reserved", {}), tier("on-demand", {"reserved": "yes"})],
            [node("src", BOTH), node("dst", RS)],
            [pod("a", "src"), pod("b", "dst")],
            [],
            id="a catch-all first tier leaves the later one empty",
        ),
        pytest.param(
            TWO_TIERS,
            [node("src", OD), node("free", {})],
            [pod("a", "src")],
            [],
            id="a node in no tier is no target",
        ),
        pytest.param(
            TWO_TIERS,
            [node("loose", {}), node("dst", RS)],
            [pod("a", "loose")],
            [],
            id="a node in no tier is no source",
        ),
        pytest.param(
            [tier("on-demand", OD), tier("spot", SPOT), tier("reserved", RS)],
            [node("src", OD), node("dst", RS)],
            [pod("a", "src")],
            ["a"],
            id="an empty middle tier is skipped",
        ),
        pytest.param(
            TWO_TIERS,
            [node("src1", OD), node("src2", OD)],
            [pod("a", "src1"), pod("b", "src2")],
            [],
            id="fewer than two tiers with nodes: nothing",
        ),
    ],
)
def test_tier_assignment(
    order: list[dict[str, Any]], nodes: list[Node], pods: list[Pod], expected: list[str]
) -> None:
    assert evicted(balance(make_args(evictionOrder=order), nodes, pods)) == expected


def test_plugin_node_selector_limits_sources_and_targets() -> None:
    nodes = [node("src", {**OD, "zone": "a"}), node("dst", {**RS, "zone": "b"})]
    pods = [pod("a", "src")]
    args = make_args(nodeSelector={"matchLabels": {"zone": "a"}})
    assert evicted(balance(args, nodes, pods)) == []
    assert evicted(balance(make_args(nodeSelector={}), nodes, pods)) == ["a"]


def test_three_tiers_move_each_tier_down_and_targets_are_tried_in_tier_order() -> None:
    # The reserved node is named "zeta", the spot node "alpha": the on-demand pod goes to
    # the reserved tier first (tier order beats name order), which leaves the spot node's
    # room for the reserved pod.
    order = [tier("on-demand", OD), tier("reserved", RS), tier("spot", SPOT)]
    nodes = [node("src", OD), node("zeta", RS, cpu=2), node("alpha", SPOT, cpu=1)]
    pods = [pod("od-pod", "src"), pod("rs-pod", "zeta")]
    evictor = balance(make_args(evictionOrder=order), nodes, pods)
    assert [(i.pod.metadata.name, i.reason) for i in evictor.intents] == [
        ("od-pod", "evicting from on-demand priority resource to lower priority resource"),
        ("rs-pod", "evicting from reserved priority resource to lower priority resource"),
    ]


# --- candidates ---------------------------------------------------------------------------------


def test_candidates_sorted_by_cpu_then_memory_then_namespace_and_name() -> None:
    pods = [
        pod("big", "src", cpu=3),
        pod("mem-high", "src", cpu=1, memory=4 * GI),
        pod("b", "src", cpu=1, memory=GI, namespace="x"),
        pod("a", "src", cpu=1, memory=GI, namespace="y"),
        pod("c", "src", cpu=1, memory=GI, namespace="x"),
        pod("tiny", "src", cpu=0.5, memory=8 * GI),
    ]
    nodes = [node("src", OD), node("dst", RS, cpu=32)]
    assert evicted(balance(make_args(), nodes, pods)) == ["tiny", "b", "c", "a", "mem-high", "big"]


@pytest.mark.parametrize(
    ("fields", "evictor", "expected"),
    [
        pytest.param({}, FakeEvictor(), ["a1", "a2", "b1", "web"], id="all"),
        pytest.param(
            {"evictableNamespaces": {"include": ["a"]}}, FakeEvictor(), ["a1", "a2"], id="include"
        ),
        pytest.param(
            {"evictableNamespaces": {"exclude": ["a"]}}, FakeEvictor(), ["b1", "web"], id="exclude"
        ),
        pytest.param(
            {
                "podSelectors": [
                    {"name": "web", "selector": {"matchLabels": {"app": "web"}}},
                    {"name": "one", "selector": {"matchLabels": {"n": "1"}}},
                ]
            },
            FakeEvictor(),
            ["a1", "b1", "web"],
            id="pod selectors are ORed",
        ),
        pytest.param(
            {"podSelectors": [{"name": "no-selector"}]}, FakeEvictor(), [], id="nil selector"
        ),
        pytest.param({}, FakeEvictor(reject={"a1"}), ["a2", "b1", "web"], id="evictor filter"),
        pytest.param(
            {}, FakeEvictor(pre_reject={"a2"}), ["a1", "b1", "web"], id="pre-eviction filter"
        ),
        pytest.param(
            {},
            FakeEvictor(
                earlier=[
                    EvictionIntent(
                        pod=pod("b1", "src", namespace="b"),
                        node="src",
                        plugin="LowNodeLoad",
                        reason="node is overutilized",
                    )
                ]
            ),
            ["a1", "a2", "web"],
            id="a pod another plugin evicts is no candidate",
        ),
    ],
)
def test_candidate_selection(
    fields: dict[str, Any], evictor: FakeEvictor, expected: list[str]
) -> None:
    pods = [
        pod("a1", "src", namespace="a", labels={"n": "1"}),
        pod("a2", "src", namespace="a", labels={"n": "2"}),
        pod("b1", "src", namespace="b", labels={"n": "1"}),
        pod("web", "src", namespace="c", labels={"app": "web"}),
    ]
    nodes = [node("src", OD), node("dst", RS, cpu=32)]
    assert sorted(evicted(balance(make_args(**fields), nodes, pods, evictor))) == expected


# --- BestEffort and DrainNode -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "target_cpu", "expected"),
    [
        # Spec example: 3 pods of 4 cpu, a target with 8 cpu free -> 2 evicted.
        pytest.param("BestEffort", 8, ["p1", "p2"], id="best effort: what fits"),
        pytest.param("DrainNode", 8, [], id="drain: all or nothing"),
        pytest.param("DrainNode", 12, ["p1", "p2", "p3"], id="drain: everything fits"),
        pytest.param("BestEffort", 3, [], id="best effort: nothing fits"),
    ],
)
def test_capacity_promised_on_targets(mode: str, target_cpu: int, expected: list[str]) -> None:
    nodes = [node("src", OD, cpu=16), node("dst", RS, cpu=target_cpu)]
    pods = [pod(f"p{i}", "src", cpu=4) for i in (1, 2, 3)]
    assert evicted(balance(make_args(mode=mode), nodes, pods)) == expected


def with_request(p: Pod, resource: str, amount: int) -> Pod:
    container = p.spec.containers[0]
    requests = ResourceList({**container.resources.requests, resource: amount})
    resources = msgspec.structs.replace(container.resources, requests=requests)
    return with_spec(p, containers=(msgspec.structs.replace(container, resources=resources),))


def with_allocatable(n: Node, resource: str, amount: int) -> Node:
    allocatable = ResourceList({**n.allocatable, resource: amount})
    return msgspec.structs.replace(
        n, status=msgspec.structs.replace(n.status, allocatable=allocatable)
    )


@pytest.mark.parametrize(
    ("resource", "capacity", "amount"),
    [
        pytest.param("memory", 5 * GI, 4 * GI, id="memory"),
        pytest.param("pods", 1, 1, id="pod count"),
        pytest.param("example.com/gpu", 1, 1, id="extended resource"),
    ],
)
def test_every_requested_resource_is_promised(resource: str, capacity: int, amount: int) -> None:
    dst = with_allocatable(node("dst", RS, cpu=64), resource, capacity)
    pods = [pod(f"p{i}", "src", memory=0) for i in (1, 2)]
    if resource != "pods":
        pods = [with_request(p, resource, amount) for p in pods]
    assert evicted(balance(make_args(), [node("src", OD), dst], pods)) == ["p1"]


def test_pods_already_on_a_target_count() -> None:
    nodes = [node("src", OD), node("dst", RS, cpu=8)]
    pods = [pod("resident", "dst", cpu=6), pod("a", "src", cpu=2), pod("b", "src", cpu=2)]
    assert evicted(balance(make_args(), nodes, pods)) == ["a"]


def test_promises_carry_over_to_the_next_source_node() -> None:
    nodes = [node("src1", OD), node("src2", OD), node("dst", RS, cpu=8)]
    pods = [pod("a", "src1", cpu=4), pod("b", "src1", cpu=3), pod("c", "src2", cpu=2)]
    assert evicted(balance(make_args(), nodes, pods)) == ["b", "a"]


def test_drain_takes_the_node_that_fits_and_keeps_its_promise() -> None:
    nodes = [node("src1", OD), node("src2", OD), node("src3", OD), node("dst", RS, cpu=8)]
    pods = [
        pod("a", "src1", cpu=6),
        pod("b", "src1", cpu=6),  # src1 needs 12: skipped
        pod("c", "src2", cpu=3),
        pod("d", "src2", cpu=3),  # src2 needs 6: drained
        pod("e", "src3", cpu=3),  # 6 + 3 > 8: skipped
    ]
    evictor = balance(make_args(mode="DrainNode"), nodes, pods)
    assert [(i.pod.metadata.name, i.reason) for i in evictor.intents] == [
        ("c", "drain node src2 (sourcePriority=on-demand)"),
        ("d", "drain node src2 (sourcePriority=on-demand)"),
    ]


def test_a_skipped_drain_gives_back_what_it_held() -> None:
    nodes = [node("src1", OD), node("src2", OD), node("dst", RS, cpu=8)]
    pods = [pod("a", "src1", cpu=6), pod("b", "src1", cpu=6), pod("c", "src2", cpu=6)]
    assert evicted(balance(make_args(mode="DrainNode"), nodes, pods)) == ["c"]


def test_drain_needs_every_candidate_to_pass_the_pre_eviction_filter() -> None:
    nodes = [node("src", OD), node("dst", RS)]
    pods = [pod("a", "src"), pod("b", "src")]
    args = make_args(mode="DrainNode")
    assert evicted(balance(args, nodes, pods, FakeEvictor(pre_reject={"b"}))) == []
    assert evicted(balance(args, nodes, pods)) == ["a", "b"]


def test_drain_skips_a_node_promised_pods_in_the_same_call() -> None:
    order = [tier("on-demand", OD), tier("reserved", RS), tier("spot", SPOT)]
    nodes = [node("src", OD), node("mid", RS, cpu=4), node("low", SPOT, cpu=32)]
    pods = [pod("od", "src", cpu=4), pod("rs", "mid", cpu=0)]
    args = make_args(evictionOrder=order, mode="DrainNode", autoCordon=True)
    evictor = balance(args, nodes, pods)
    assert evicted(evictor) == ["od"]
    assert evictor.cordoned == ("src",)


@pytest.mark.parametrize(
    ("auto_cordon", "unschedulable", "refuse", "expected", "cordoned", "uncordoned"),
    [
        pytest.param(True, False, set(), ["a", "b", "c"], ("src",), [], id="cordon and drain"),
        pytest.param(False, False, set(), ["a", "b", "c"], (), [], id="no autoCordon"),
        pytest.param(True, False, {"b"}, ["a"], (), ["src"], id="refused: stop and uncordon"),
        pytest.param(True, True, set(), ["a", "b", "c"], (), [], id="already cordoned"),
        pytest.param(True, True, {"b"}, ["a"], (), [], id="already cordoned stays so"),
    ],
)
def test_auto_cordon_and_rollback(
    auto_cordon: bool,
    unschedulable: bool,
    refuse: set[str],
    expected: list[str],
    cordoned: tuple[str, ...],
    uncordoned: list[str],
) -> None:
    nodes = [node("src", OD, unschedulable=unschedulable), node("dst", RS)]
    pods = [pod(n, "src", cpu=1 + i) for i, n in enumerate("abc")]
    evictor = FakeEvictor(refuse=refuse)
    balance(make_args(mode="DrainNode", autoCordon=auto_cordon), nodes, pods, evictor)
    assert evicted(evictor) == expected
    assert evictor.cordoned == cordoned
    assert evictor.uncordoned == uncordoned


def test_a_stopped_drain_gives_back_the_capacity_of_pods_left_behind() -> None:
    nodes = [node("src1", OD), node("src2", OD), node("dst", RS, cpu=4)]
    pods = [pod("a", "src1", cpu=2), pod("b", "src1", cpu=2), pod("c", "src2", cpu=2)]
    evictor = balance(make_args(mode="DrainNode"), nodes, pods, FakeEvictor(refuse={"b"}))
    assert evicted(evictor) == ["a", "c"]


def test_best_effort_refused_eviction_promises_nothing() -> None:
    nodes = [node("src", OD), node("dst", RS, cpu=2)]
    pods = [pod("a", "src"), pod("b", "src"), pod("c", "src")]
    evictor = balance(make_args(), nodes, pods, FakeEvictor(refuse={"a"}))
    assert evicted(evictor) == ["b", "c"]


@pytest.mark.parametrize(
    ("misses", "expected"),
    [
        pytest.param(MAX_CONSECUTIVE_MISSES - 1, ["fits"], id="4 misses: keep scanning"),
        pytest.param(MAX_CONSECUTIVE_MISSES, [], id="5 misses: stop"),
    ],
)
def test_best_effort_stops_after_consecutive_misses(misses: int, expected: list[str]) -> None:
    nodes = [node("src", OD), node("dst", RS)]
    pods = [
        with_spec(pod(f"m{i}", "src", cpu=0.1), node_selector={"zone": "nowhere"})
        for i in range(misses)
    ]
    pods.append(pod("fits", "src", cpu=1))
    assert evicted(balance(make_args(), nodes, pods)) == expected


def test_a_fit_resets_the_miss_count() -> None:
    nodes = [node("src", OD), node("dst", RS)]
    misses = [
        with_spec(pod(f"m{i}", "src", cpu=0.1 * (i + 1)), node_selector={"zone": "nowhere"})
        for i in range(8)
    ]
    # By cpu: m0..m3 (4 misses), "mid" (fits), m4..m7 (4 misses), then "last", which a
    # count carried over "mid" would never reach.
    pods = [*misses, pod("mid", "src", cpu=0.45), pod("last", "src", cpu=2)]
    evictor = balance(make_args(), nodes, pods)
    assert evicted(evictor) == ["mid", "last"]


TAINT = Taint(key="dedicated", value="batch", effect="NoSchedule")
TOLERATE = Toleration(key="dedicated", operator="Equal", value="batch", effect="NoSchedule")


@pytest.mark.parametrize(
    ("node_fit", "mode", "expected"),
    [
        pytest.param(True, "BestEffort", ["tolerant"], id="node fit: taints and selectors"),
        pytest.param(False, "BestEffort", ["a", "b", "tolerant", "picky"], id="off: everything"),
        pytest.param(True, "DrainNode", [], id="drain with node fit: blocked"),
        pytest.param(
            False, "DrainNode", ["a", "b", "tolerant", "picky"], id="drain without: capacity only"
        ),
    ],
)
def test_node_fit(node_fit: bool, mode: str, expected: list[str]) -> None:
    nodes = [node("src", OD), node("dst", RS, cpu=5, taints=[TAINT])]
    pods = [
        pod("a", "src"),
        pod("b", "src"),
        with_spec(pod("tolerant", "src"), tolerations=(TOLERATE,)),
        with_spec(
            pod("picky", "src", cpu=1.5), tolerations=(TOLERATE,), node_selector={"disk": "ssd"}
        ),
    ]
    got = evicted(balance(make_args(nodeFit=node_fit, mode=mode), nodes, pods))
    assert sorted(got) == sorted(expected)


def needs_ssd(p: Pod) -> Pod:
    term = NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(key="disk", operator="In", values=("ssd",)),)
    )
    required = NodeSelector(node_selector_terms=(term,))
    affinity = Affinity(
        node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=required)
    )
    return with_spec(p, affinity=affinity)


def test_required_node_affinity_chooses_the_target() -> None:
    nodes = [
        node("src", OD),
        node("dst-a", {**RS, "disk": "hdd"}),
        node("dst-b", {**RS, "disk": "ssd"}, cpu=1),
    ]
    pods = [needs_ssd(pod("x", "src")), needs_ssd(pod("y", "src")), pod("z", "src", cpu=2)]
    assert evicted(balance(make_args(), nodes, pods)) == ["x", "z"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        pytest.param("BestEffort", ["a", "b", "c", "d"], id="best effort: no room needed"),
        pytest.param("DrainNode", [], id="drain: still counts target capacity"),
    ],
)
def test_without_node_fit(mode: str, expected: list[str]) -> None:
    nodes = [node("src", OD), node("dst", RS, cpu=3)]
    pods = [pod(n, "src", cpu=1) for n in "abcd"]
    assert evicted(balance(make_args(nodeFit=False, mode=mode), nodes, pods)) == expected


def test_paused_does_nothing() -> None:
    nodes = [node("src", OD), node("dst", RS)]
    assert evicted(balance(make_args(paused=True), nodes, [pod("a", "src")])) == []


def test_dry_run_decides_the_same() -> None:
    nodes = [node("src", OD, cpu=16), node("dst", RS, cpu=8)]
    pods = [pod(f"p{i}", "src", cpu=4) for i in (1, 2, 3)]
    assert evicted(balance(make_args(dryRun=True), nodes, pods)) == ["p1", "p2"]


# --- properties ---------------------------------------------------------------------------------

LABELS = [OD, RS, SPOT, {}]
ORDER = [tier("on-demand", OD), tier("reserved", RS), tier("spot", SPOT)]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod]]:
    count = draw(st.integers(2, 7))
    nodes = []
    for i in range(count):
        tainted = draw(st.booleans())
        nodes.append(
            make_node(
                f"n{i}",
                cpu=draw(st.integers(1, 8)) * CORES,
                memory=draw(st.integers(1, 8)) * GI,
                pods=draw(st.integers(1, 6)),
                labels={**draw(st.sampled_from(LABELS)), "disk": draw(st.sampled_from("ab"))},
                taints=[TAINT] if tainted else [],
                unschedulable=draw(st.integers(0, 9)) == 0,
            )
        )
    pods = []
    for i in range(draw(st.integers(0, 14))):
        made = pod(
            f"p{i}",
            f"n{draw(st.integers(0, count - 1))}",
            cpu=draw(st.integers(0, 4)) / 2,
            memory=draw(st.integers(0, 3)) * GI,
        )
        if draw(st.booleans()):
            made = with_spec(made, tolerations=(TOLERATE,))
        if draw(st.integers(0, 3)) == 0:
            made = with_spec(made, node_selector={"disk": draw(st.sampled_from("ab"))})
        pods.append(made)
    return nodes, pods


def tier_of(n: Node) -> int | None:
    for i, labels in enumerate((OD, RS, SPOT)):
        if all(n.metadata.labels.get(k) == v for k, v in labels.items()):
            return i
    return None


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(
    cluster=clusters(),
    mode=st.sampled_from(["BestEffort", "DrainNode"]),
    refuse=st.sets(st.sampled_from([f"p{i}" for i in range(14)]), max_size=3),
    reject=st.sets(st.sampled_from([f"p{i}" for i in range(14)]), max_size=3),
)
def test_no_pod_is_evicted_to_nowhere(
    cluster: tuple[list[Node], list[Pod]], mode: str, refuse: set[str], reject: set[str]
) -> None:
    nodes, pods = cluster
    evictor = FakeEvictor(refuse=refuse, reject=reject)
    balance(make_args(evictionOrder=ORDER, mode=mode), nodes, pods, evictor)
    # Replay: in eviction order, each pod has a place on a later tier (tier order, then name)
    # with node fit against the pods there and everything promised before it.
    by_name = {n.metadata.name: n for n in nodes}
    ordered = sorted(
        (n for n in nodes if tier_of(n) is not None),
        key=lambda n: (tier_of(n), n.metadata.name),
    )
    promised: dict[str, dict[str, int]] = {}
    for intent in evictor.intents:
        source = tier_of(by_name[intent.node])
        assert source is not None
        assert intent.pod.metadata.name not in reject
        targets = [n for n in ordered if (tier_of(n) or 0) > source]
        on = [p for p in pods if p.spec.node_name]
        home = next(
            (
                n
                for n in targets
                if nodefit.fits(
                    intent.pod,
                    n,
                    [p for p in on if p.spec.node_name == n.metadata.name],
                    promised=promised.get(n.metadata.name),
                )
            ),
            None,
        )
        assert home is not None, f"{intent.pod.metadata.name} was evicted to nowhere"
        booked = promised.setdefault(home.metadata.name, {})
        for name, amount in nodefit.requested([intent.pod]).items():
            booked[name] = booked.get(name, 0) + amount


@PROPERTY
@given(
    cluster=clusters(),
    node_fit=st.booleans(),
    reject=st.sets(st.sampled_from([f"p{i}" for i in range(14)]), max_size=3),
)
def test_drain_evicts_all_candidates_of_a_node_or_none(
    cluster: tuple[list[Node], list[Pod]], node_fit: bool, reject: set[str]
) -> None:
    nodes, pods = cluster
    evictor = FakeEvictor(reject=reject)
    args = make_args(evictionOrder=ORDER, mode="DrainNode", nodeFit=node_fit, autoCordon=True)
    balance(args, nodes, pods, evictor)
    gone = set(evicted(evictor))
    for n in nodes:
        candidates = {
            p.metadata.name
            for p in pods
            if p.spec.node_name == n.metadata.name and p.metadata.name not in reject
        }
        mine = candidates & gone
        assert mine in (set(), candidates), n.metadata.name
        if mine and not n.spec.unschedulable:
            assert n.metadata.name in evictor.cordoned


@PROPERTY
@given(
    cluster=clusters(),
    node_fit=st.booleans(),
    steps=st.lists(
        st.tuples(st.sampled_from(["promise", "hold", "release"]), st.integers(0, 13)),
        max_size=12,
    ),
)
def test_first_fit_is_the_leftmost_target_that_fits_after_any_bookings(
    cluster: tuple[list[Node], list[Pod]],
    node_fit: bool,
    steps: list[tuple[str, int]],
) -> None:
    # What is remembered between searches never changes the answer: after each promise,
    # hold or release, every pod's first fit is the first target that fits it now.
    nodes, pods = cluster
    ledger = _Ledger(make_view(nodes, pods))
    targets = _Targets(sorted(nodes, key=lambda n: n.metadata.name), ledger, node_fit=node_fit)

    def leftmost(p: Pod) -> int | None:
        need, constraints = ledger.need(p), _constraints(p)
        return next((i for i in range(len(nodes)) if targets._fits(p, need, constraints, i)), None)

    def check() -> None:
        for p in pods:
            assert targets.first_fit(p) == leftmost(p), p.metadata.name

    check()
    held = False
    for step, index in steps:
        if not pods:
            break
        p = pods[index % len(pods)]
        found = targets.first_fit(p)
        if step == "release":
            targets.release()
            held = False
        elif found is not None and step == "hold":
            targets.hold(p, found)
            held = True
        elif found is not None and not held:
            targets.promise(p, found)
        check()


@pytest.mark.parametrize("mode", ["BestEffort", "DrainNode"])
def test_targets_full_of_their_own_pods_are_passed_over(mode: str) -> None:
    # Seven reserved nodes, the first six filled by their own pods: the pods of src can only
    # go to the last one, and it takes two of the three.
    targets = [node(f"dst{i}", RS, cpu=8) for i in range(7)]
    residents = [pod(f"resident{i}", f"dst{i}", cpu=7) for i in range(6)]
    pods = [pod(f"p{i}", "src", cpu=4) for i in (1, 2, 3)]
    expected = ["p1", "p2"] if mode == "BestEffort" else []
    nodes = [node("src", OD, cpu=16), *targets]
    assert evicted(balance(make_args(mode=mode), nodes, [*residents, *pods])) == expected


def _two_containers(p: Pod, limits: Mapping[str, int]) -> Pod:
    main = p.spec.containers[0]
    side = msgspec.structs.replace(
        main,
        name="side",
        resources=msgspec.structs.replace(main.resources, limits=ResourceList(limits)),
    )
    return with_spec(p, containers=(main, side))


@pytest.mark.parametrize(
    "candidate",
    [
        pytest.param(pod("p", "src", cpu=2), id="one container"),
        pytest.param(
            with_spec(
                pod("p", "src", cpu=2),
                containers=(
                    msgspec.structs.replace(
                        pod("p", "src").spec.containers[0],
                        resources=ResourceRequirements(
                            requests=ResourceList({"cpu": 500}),
                            limits=ResourceList({"cpu": 900, "memory": 3 * GI}),
                        ),
                    ),
                ),
            ),
            id="a limit stands in for the missing memory request",
        ),
        pytest.param(_two_containers(pod("p", "src", cpu=2), {"cpu": 100}), id="two containers"),
    ],
)
def test_candidate_order_sums_the_containers(candidate: Pod) -> None:
    summed = container_requests_sum(candidate)
    assert candidate_order(candidate) == (
        summed.get("cpu", 0),
        summed.get("memory", 0),
        candidate.metadata.namespace,
        candidate.metadata.name,
    )


class CountingEvictor(FakeEvictor):
    """A :class:`FakeEvictor` that records the pods its filter was asked about."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.asked: list[str] = []

    def filter(self, pod: Pod) -> bool:
        self.asked.append(pod.metadata.name)
        return super().filter(pod)


@pytest.mark.parametrize(
    ("direct_nodes", "asked"),
    [
        pytest.param(None, 5, id="filter not known to hold: every pod asked up front"),
        pytest.param(frozenset({"src"}), 5, id="src has pods evicted directly: the same"),
        pytest.param(frozenset(), 3, id="filter holds: asked as the loop reaches a pod"),
    ],
)
def test_best_effort_asks_the_filter_lazily_where_it_holds(
    direct_nodes: frozenset[str] | None, asked: int
) -> None:
    nodes = [node("src", OD), node("dst", RS, cpu=32)]
    pods = [pod(f"p{i}", "src", cpu=1 + i / 10) for i in range(5)]
    evictor = CountingEvictor(reject=["p1"], limit=2)
    balance(make_args(), nodes, pods, evictor, direct_nodes=direct_nodes)
    # The same evictions either way: p1 rejected, the limit reached after p0 and p2.
    assert evicted(evictor) == ["p0", "p2"]
    assert len(evictor.asked) == asked


@pytest.mark.parametrize("direct_nodes", [None, frozenset()])
def test_lazy_filter_keeps_the_miss_count(direct_nodes: frozenset[str] | None) -> None:
    nodes = [node("src", OD), node("dst", RS)]
    misses = [
        with_spec(pod(f"m{i}", "src", cpu=0.1 * (i + 1)), node_selector={"zone": "nowhere"})
        for i in range(6)
    ]
    # m0..m3 miss, "gone" is rejected by the filter (no candidate, no miss), m4 is the fifth
    # miss: "last" is never reached.
    pods = [*misses[:4], pod("gone", "src", cpu=0.45), misses[4], pod("last", "src", cpu=2)]
    evictor = FakeEvictor(reject=["gone"])
    assert evicted(balance(make_args(), nodes, pods, evictor, direct_nodes=direct_nodes)) == []


# --- what a call keeps for the next -------------------------------------------------------------


def test_a_source_candidates_are_ordered_again_when_its_pod_list_changes() -> None:
    plugin = CustomPriority(make_args())
    nodes = [node("od1", OD), node("rs1", RS)]
    first = [pod("a", "od1", cpu=2), pod("b", "od1", cpu=1)]

    def one_eviction(on_source: Sequence[Pod], earlier: Iterable[EvictionIntent] = ()) -> list[str]:
        view = CycleView(
            now=T0,
            nodes=nodes,
            pods_by_node={"od1": on_source},
            all_nodes={n.metadata.name: n for n in nodes},
            direct_nodes=frozenset(),  # the filter holds: candidates are ordered up front
        )
        evictor = FakeEvictor(limit=1, earlier=earlier)
        assert plugin.balance(view, evictor) == Status()
        return evicted(evictor)

    assert one_eviction(first) == ["b"]
    assert one_eviction(first) == ["b"]  # the same list: the same order
    second = [first[0], pod("c", "od1", cpu=0.5)]
    assert one_eviction(second) == ["c"]
    taken = EvictionIntent(pod=second[1], node="od1", plugin="LowNodeLoad", reason="earlier")
    assert one_eviction(second, earlier=[taken]) == ["a"]
    assert one_eviction(first) == ["b"]


def test_tiers_are_assigned_again_when_a_node_changes() -> None:
    plugin = CustomPriority(make_args())
    source = node("n1", OD)
    target = node("n2", RS)
    pods = [pod("a", "n1"), pod("b", "n2")]

    def moved(nodes: Sequence[Node]) -> list[str]:
        evictor = FakeEvictor()
        assert plugin.balance(make_view(nodes, pods), evictor) == Status()
        return evicted(evictor)

    assert moved([source, target]) == ["a"]
    assert moved([source, target]) == ["a"]  # the same nodes: the same tiers
    # relabelled: n1 is reserved now and n2 on-demand, so b moves instead
    assert moved([node("n1", RS), node("n2", OD)]) == ["b"]
    assert moved([source, target]) == ["a"]
