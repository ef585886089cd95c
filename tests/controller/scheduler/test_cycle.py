"""One scheduling cycle: filter order and reasons, scoring and tie-break, reserve, errors;
and building profiles from the registry."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from apis.core import Node, Pod, Taint
from controller.scheduler import framework as fw
from controller.scheduler.cycle import abandon, prepare_binding, schedule_one
from controller.scheduler.explain import fit_error_message
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    PLUGINS,
    PluginSpec,
    Profile,
    ProfileConfig,
    ProfileError,
    WeightedPlugin,
    build_profile,
    default_profile,
    profiles_by_scheduler,
)
from tests.controller.scheduler import GI, make_node, make_pod


def _schedule(nodes: Sequence[Node], pod: Pod) -> tuple[str, str]:
    table = NodeTable(nodes)
    decision = schedule_one(default_profile(), table, PodInfo.of(pod, table))
    message = fit_error_message(decision.diagnosis) if decision.diagnosis else ""
    return decision.node, message


def test_reasons_come_from_the_first_rejecting_filter() -> None:
    taint = Taint(key="dedicated", value="gpu", effect="NoSchedule")
    nodes = [
        # too small AND tainted: TaintToleration runs first, so the taint is its reason
        make_node("a", cpu=500, taints=[taint]),
        make_node("b", cpu=500),
        make_node("c", cpu=500, labels={"zone": "x"}),
        make_node("d", cpu=4000, unschedulable=True),
    ]
    node, message = _schedule(nodes, make_pod("p", cpu=1000, selector={"zone": "y"}))
    assert node == ""
    assert message == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu},"
        " 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."
        # Evicting pods would not help on any of them (kube-scheduler's wording).
        " preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )


def test_scores_pick_the_least_allocated_node() -> None:
    nodes = [make_node("a", cpu=2000), make_node("b", cpu=8000), make_node("c", cpu=4000)]
    assert _schedule(nodes, make_pod("p", cpu=1000))[0] == "b"


def test_ties_go_to_the_first_node_by_name() -> None:
    nodes = [make_node(name) for name in ("n3", "n1", "n2")]
    assert _schedule(nodes, make_pod("p", cpu=1000))[0] == "n1"


def test_placements_are_assumed_so_the_next_pod_sees_them() -> None:
    table = NodeTable([make_node("a", cpu=2000), make_node("b", cpu=2000)])
    profile = default_profile()
    placed = [
        schedule_one(profile, table, PodInfo.of(make_pod(f"p{i}", cpu=1000), table)).node
        for i in range(5)
    ]
    assert placed == ["a", "b", "a", "b", ""]
    assert table.requested[:, 0].tolist() == [2000, 2000]
    assert table.pod_count.tolist() == [2, 2]


@dataclass
class Recorder:
    """A test plugin at every point, doing what it is told."""

    name: str = "Recorder"
    fail_filter: bool = False
    raise_in_score: bool = False
    reserve_status: fw.Status = fw.SUCCESS
    calls: list[str] = field(default_factory=list)

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
        state.write(self.name, "seen")
        self.calls.append("pre_filter")
        return fw.SUCCESS

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        self.calls.append(f"filter:{state.read(self.name, str)}")
        if self.fail_filter:
            return fw.FilterResult.reject_where(candidates, candidates, "node(s) said no")
        return fw.FilterResult(candidates)

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        if self.raise_in_score:
            raise RuntimeError("boom")
        return np.where(feasible == len(table) - 1, 100, 0).astype(np.int64)

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        self.calls.append("reserve")
        return self.reserve_status

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        self.calls.append("unreserve")

    def pre_bind(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> fw.PreBindResult:
        return fw.PreBindResult(annotations={"example.com/placed": table.names[row]})


def _with_recorder(recorder: Recorder, weight: int = 1000) -> tuple[NodeTable, Profile]:
    registry = {**PLUGINS, "Recorder": PluginSpec(fw.NoArgs, lambda _args: recorder)}
    config = ProfileConfig(
        pre_filter=("Recorder",),
        filter=(*DEFAULT_CONFIG.filter, "Recorder"),
        pre_score=DEFAULT_CONFIG.pre_score,
        score=(*DEFAULT_CONFIG.score, WeightedPlugin(name="Recorder", weight=weight)),
        reserve=("Recorder",),
        pre_bind=("Recorder",),
    )
    table = NodeTable([make_node("a"), make_node("b"), make_node("c")])
    return table, build_profile(config, registry)


def test_cycle_state_flows_from_pre_filter_and_weights_apply() -> None:
    recorder = Recorder()
    table, profile = _with_recorder(recorder)
    pod = PodInfo.of(make_pod("p", cpu=100), table)
    decision = schedule_one(profile, table, pod)
    assert decision.status.is_success
    assert decision.node == "c"  # the recorder's 100 x 1000 outweighs everything
    assert recorder.calls == ["pre_filter", "filter:seen", "reserve"]
    plan = prepare_binding(profile, table, decision)
    assert plan.status.is_success
    assert plan.annotations == {"example.com/placed": "c"}
    assert plan.binder == ""


def test_a_rejecting_custom_filter_is_counted_under_its_name() -> None:
    recorder = Recorder(fail_filter=True)
    table, profile = _with_recorder(recorder)
    decision = schedule_one(profile, table, PodInfo.of(make_pod("p", cpu=100), table))
    assert decision.status.code is fw.Code.UNSCHEDULABLE
    assert decision.diagnosis is not None
    assert decision.diagnosis.counts == {"Recorder": {"node(s) said no": 3}}
    assert table.accounted == 0


def test_a_plugin_exception_is_an_error_naming_it() -> None:
    recorder = Recorder(raise_in_score=True)
    table, profile = _with_recorder(recorder)
    decision = schedule_one(profile, table, PodInfo.of(make_pod("p"), table))
    assert decision.status.code is fw.Code.ERROR
    assert decision.status.plugin == "Recorder"
    assert "boom" in decision.status.message
    assert table.accounted == 0


def test_reserve_failure_unreserves_and_forgets() -> None:
    recorder = Recorder(reserve_status=fw.Status.of(fw.Code.UNSCHEDULABLE, "no room"))
    table, profile = _with_recorder(recorder)
    decision = schedule_one(profile, table, PodInfo.of(make_pod("p", cpu=100), table))
    assert decision.status.code is fw.Code.UNSCHEDULABLE
    assert decision.status.plugin == "Recorder"
    assert recorder.calls[-2:] == ["reserve", "unreserve"]
    assert table.accounted == 0
    assert int(table.requested[:, 0].sum()) == 0


def test_abandon_undoes_an_assumed_decision() -> None:
    recorder = Recorder()
    table, profile = _with_recorder(recorder)
    decision = schedule_one(profile, table, PodInfo.of(make_pod("p", cpu=100), table))
    assert table.accounted == 1
    abandon(profile, table, decision)
    assert table.accounted == 0
    assert recorder.calls[-1] == "unreserve"


def test_resources_no_node_has_make_the_pod_unschedulable_everywhere() -> None:
    _node, message = _schedule([make_node("a"), make_node("b")], make_pod("p", extra={"x.io/y": 1}))
    assert message == (
        "0/2 nodes are available: 2 Insufficient x.io/y."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_no_nodes() -> None:
    assert _schedule([], make_pod("p")) == ("", "no nodes available to schedule pods")


def test_memory_fits_exactly() -> None:
    node, _ = _schedule([make_node("a", memory=2 * GI)], make_pod("p", memory=2 * GI))
    assert node == "a"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (ProfileConfig(filter=("Nope",)), "filter: unknown plugin 'Nope'"),
        (ProfileConfig(reserve=("NodeName",)), "reserve: plugin NodeName has no reserve"),
        (ProfileConfig(filter=("NodeName", "NodeName")), "NodeName is enabled twice"),
        (
            ProfileConfig(score=(WeightedPlugin(name="NodeAffinity", weight=0),)),
            "weight must be >= 1",
        ),
    ],
    ids=["unknown", "wrong-point", "twice", "zero-weight"],
)
def test_bad_profiles(config: ProfileConfig, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        build_profile(config)


def test_default_profile_serves_koord_and_default_scheduler() -> None:
    table = profiles_by_scheduler([default_profile()])
    assert sorted(table) == ["default-scheduler", "koord-scheduler"]
    with pytest.raises(ProfileError, match="served by two profiles"):
        profiles_by_scheduler([default_profile(), default_profile()])


def test_every_registered_plugin_implements_a_point() -> None:
    points = (
        fw.PreFilterPlugin,
        fw.FilterPlugin,
        fw.PostFilterPlugin,
        fw.ScorePlugin,
        fw.ReservePlugin,
    )
    for name, spec in PLUGINS.items():
        plugin = spec.factory(spec.args())
        assert plugin.name == name
        assert any(isinstance(plugin, point) for point in points)


@dataclass
class OnlyNode:
    """A PreFilter narrowing the candidates to one node (as a scheduling hint's nodeNames)."""

    name: str = "OnlyNode"
    node: str = "b"

    def pre_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable
    ) -> fw.Status | fw.NodeSubset:
        rows = np.zeros(len(table), dtype=np.bool_)
        rows[table.index[self.node]] = True
        return fw.NodeSubset(rows)


def test_a_pre_filter_node_subset_limits_the_candidates() -> None:
    registry = {**PLUGINS, "OnlyNode": PluginSpec(fw.NoArgs, lambda _args: OnlyNode())}
    profile = build_profile(
        ProfileConfig(
            pre_filter=("OnlyNode",),
            filter=DEFAULT_CONFIG.filter,
            score=DEFAULT_CONFIG.score,
        ),
        registry,
    )
    table = NodeTable([make_node("a", cpu=8000), make_node("b", cpu=1000), make_node("c")])
    fits = schedule_one(profile, table, PodInfo.of(make_pod("p", cpu=500), table))
    assert fits.node == "b"
    too_big = schedule_one(profile, table, PodInfo.of(make_pod("q", cpu=2000), table))
    assert too_big.diagnosis is not None
    assert fit_error_message(too_big.diagnosis) == (
        "0/3 nodes are available: 1 Insufficient cpu,"
        " 2 node(s) didn't satisfy plugin(s) [OnlyNode]."
    )


@dataclass
class Quiet:
    """A plugin at every point whose PreFilter Skip is final (``pre_filter_skip_is_final``)."""

    name: str = "Quiet"
    skip: bool = True
    calls: list[str] = field(default_factory=list)
    pre_filter_skip_is_final = True

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
        self.calls.append("pre_filter")
        return fw.SKIP if self.skip else fw.SUCCESS

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        self.calls.append("filter")
        return fw.FilterResult(candidates)

    def pre_score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Status:
        self.calls.append("pre_score")
        return fw.SUCCESS

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        self.calls.append("score")
        return fw.zero_scores(len(feasible))

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        self.calls.append("reserve")
        return fw.SUCCESS

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        self.calls.append("unreserve")

    def permit(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        self.calls.append("permit")
        return fw.SUCCESS

    def pre_bind(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> fw.PreBindResult:
        self.calls.append("pre_bind")
        return fw.PreBindResult()


@pytest.mark.parametrize(
    ("skip", "calls"),
    [
        pytest.param(True, ["pre_filter"], id="skipped-at-pre-filter"),
        pytest.param(
            False,
            ["pre_filter", "filter", "pre_score", "score", "reserve", "permit", "pre_bind"],
            id="taking-part",
        ),
    ],
)
def test_a_final_pre_filter_skip_leaves_the_plugin_out_of_the_attempt(
    skip: bool, calls: list[str]
) -> None:
    quiet = Quiet(skip=skip)
    registry = {**PLUGINS, "Quiet": PluginSpec(fw.NoArgs, lambda _args: quiet)}
    config = ProfileConfig(
        pre_filter=("Quiet",),
        filter=("NodeResourcesFit", "Quiet"),
        pre_score=("Quiet",),
        score=(WeightedPlugin(name="NodeResourcesFit"), WeightedPlugin(name="Quiet")),
        reserve=("Quiet",),
        permit=("Quiet",),
        pre_bind=("Quiet",),
    )
    profile = build_profile(config, registry)
    assert profile.final_skips == {"Quiet"}
    table = NodeTable([make_node("a", cpu=2000), make_node("b", cpu=4000)])
    decision = schedule_one(profile, table, PodInfo.of(make_pod("p", cpu=1000), table))
    assert decision.node == "b"  # the zero scores change nothing
    assert prepare_binding(profile, table, decision).status.is_success
    assert quiet.calls == calls


def test_shared_zero_scores_are_read_only_and_recognized() -> None:
    zeros = fw.zero_scores(4)
    assert zeros.tolist() == [0, 0, 0, 0]
    assert fw.zero_scores(4) is zeros
    assert fw.is_zero_scores(zeros)
    assert not fw.is_zero_scores(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="read-only"):
        zeros[0] = 1


def test_on_a_shared_cluster_only_pods_naming_a_profile_are_served() -> None:
    """Kubernetes mode: kube-scheduler schedules ``default-scheduler`` pods, koordpy never."""
    shared = SchedulerLoop(only_named=True)
    alone = SchedulerLoop()
    koord = make_pod("a", scheduler="koord-scheduler")
    default = make_pod("b", scheduler="default-scheduler")
    unnamed = make_pod("c", scheduler="")
    assert shared.serves(koord)
    assert alone.serves(koord)
    assert not shared.serves(default)
    assert not shared.serves(unnamed)
    assert alone.serves(default)
    assert alone.serves(unnamed)
