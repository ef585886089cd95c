"""Priority preemption: victims on one node, the choice of node, eligibility, and the
properties the victims always have (they make the pod fit, are of lower priority, and no
smaller set of no higher priority would do)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from apis.core import Pod, pod_requests
from apis.resources import ResourceList
from controller.scheduler.preemption import (
    Candidate,
    NodeState,
    QuotaBudget,
    VictimPolicy,
    importance_key,
    pick_candidate,
    pod_priority,
    preempt,
    select_victims,
)
from tests.controller.quota.builders import GI, pod, res


def node(name: str, *pods: Pod, cpu: int = 4000, memory: int = 8, slots: int = 110) -> NodeState:
    return NodeState(name=name, allocatable=res(cpu, memory, pods=slots), pods=pods)


def names(pods: Sequence[Pod]) -> list[str]:
    return [p.name for p in pods]


PREEMPTOR = pod("web", cpu=2000, priority=10)


# --- victims on one node -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (
            node("n", pod("low", cpu=2000, priority=1), pod("mid", cpu=2000, priority=5)),
            ["low"],
        ),
        (
            node("n", pod("same", cpu=2000, priority=10), pod("high", cpu=2000, priority=20)),
            "No preemption victims found for incoming pod",
        ),
        (
            node("n", pod("high", cpu=3000, priority=20), pod("low", cpu=1000, priority=1)),
            "Insufficient cpu",
        ),
        (
            node(
                "n",
                pod("high", cpu=3000, memory=8, priority=20),
                pod("low", cpu=1000, priority=1),
            ),
            "Insufficient cpu",
        ),
        (
            node("n", pod("a", cpu=1, priority=1, started=1), pod("b", cpu=1, priority=1), slots=2),
            ["b"],
        ),
        (
            node(
                "n",
                pod("p5", cpu=2000, priority=5),
                pod("p1", cpu=1000, priority=1),
                pod("p1b", cpu=1000, priority=1),
            ),
            ["p1", "p1b"],
        ),
        (
            node(
                "n",
                pod("big", cpu=2000, priority=1, started=0),
                pod("small1", cpu=1000, priority=1, started=1),
                pod("small2", cpu=1000, priority=1, started=2),
            ),
            ["big"],
        ),
        (
            node(
                "n",
                pod("old", cpu=2000, priority=1, started=0),
                pod("new", cpu=2000, priority=1, started=5),
            ),
            ["new"],
        ),
        (
            node(
                "n",
                pod("mem-hog", memory=6, priority=1),
                pod("cpu-hog", cpu=3000, priority=1),
                pod("other", cpu=500, memory=1, priority=2),
            ),
            ["cpu-hog"],
        ),
        (
            node("n", pod("low", cpu=1000, priority=1)),
            'expected at least one victim pod on node "n"',
        ),
    ],
    ids=[
        "lowest priority goes",
        "nothing of lower priority",
        "no fit even with every victim gone",
        "higher-priority pod holds the resource",
        "pod slots: the pod that has not started goes first",
        "two low-priority victims rather than one of higher priority",
        "exact search: one victim instead of two",
        "later started pod of equal priority goes",
        "only what frees the requested resource",
        "fits without evicting anything",
    ],
)
def test_select_victims(state: NodeState, expected: list[str] | str) -> None:
    outcome = select_victims(PREEMPTOR, state)
    if isinstance(expected, str):
        assert outcome == expected
    else:
        assert isinstance(outcome, Candidate)
        assert names(outcome.victims) == expected


def test_victims_are_ordered_most_important_first() -> None:
    state = node(
        "n",
        pod("a", cpu=1000, priority=1),
        pod("b", cpu=1000, priority=3),
        pod("c", cpu=1000, priority=2),
        pod("d", cpu=1000, priority=2),
        cpu=4000,
    )
    outcome = select_victims(pod("web", cpu=4000, priority=10), state)
    assert isinstance(outcome, Candidate)
    assert [pod_priority(p) for p in outcome.victims] == [3, 2, 2, 1]


def test_nominated_pods_of_higher_priority_hold_their_place() -> None:
    low = pod("low", cpu=2000, priority=1)
    busy = pod("busy", cpu=2000, priority=1)
    state = NodeState(
        name="n",
        allocatable=res(cpu=4000),
        pods=(low, busy),
        nominated=(pod("vip", cpu=2000, priority=50), pod("meh", cpu=2000, priority=2)),
    )
    outcome = select_victims(PREEMPTOR, state)
    assert isinstance(outcome, Candidate)
    assert sorted(names(outcome.victims)) == ["busy", "low"]


def test_reserved_amounts_are_never_freed() -> None:
    state = NodeState(
        name="n",
        allocatable=res(cpu=4000),
        pods=(pod("low", cpu=2000, priority=1),),
        reserved=res(cpu=3000),
    )
    assert select_victims(PREEMPTOR, state) == "Insufficient cpu"


def test_extra_fit_can_demand_more_victims() -> None:
    """A filter beyond resources (a device held by one pod) decides too."""

    def device_free(preemptor: Pod, state: NodeState, kept: tuple[Pod, ...]) -> str:
        return "Insufficient nvidia.com/gpu" if "gpu-holder" in names(kept) else ""

    state = node("n", pod("gpu-holder", cpu=100, priority=3), pod("cheap", cpu=2000, priority=1))
    outcome = select_victims(PREEMPTOR, state, extra_fit=device_free)
    assert isinstance(outcome, Candidate)
    assert names(outcome.victims) == ["gpu-holder"]
    blocked = node("n", pod("gpu-holder", cpu=100, priority=30), pod("x", cpu=2000, priority=1))
    assert select_victims(PREEMPTOR, blocked, extra_fit=device_free) == (
        "Insufficient nvidia.com/gpu"
    )


def test_quota_budget_evicts_a_pod_the_node_could_keep() -> None:
    v1 = pod("v1", cpu=2000, priority=1)
    v2 = pod("v2", cpu=2000, priority=2)
    state = node("n", v1, v2, cpu=8000)
    budget = QuotaBudget(name="q", used=res(cpu=4000), limit=res(cpu=4000))
    outcome = select_victims(PREEMPTOR, state, policy=VictimPolicy(budget=budget))
    assert isinstance(outcome, Candidate)
    assert names(outcome.victims) == ["v1"]
    short = QuotaBudget(name="q", used=res(cpu=6000), limit=res(cpu=4000, memory=1))
    assert select_victims(
        PREEMPTOR, node("n", v1, cpu=8000), policy=VictimPolicy(budget=short)
    ) == ("Insufficient quotas, quotaName: q, exceedDimensions: [cpu]")


# --- the node ----------------------------------------------------------------------------------


def _candidate(node_name: str, *priorities: int, started: int | None = None) -> Candidate:
    victims = tuple(
        pod(f"{node_name}-{i}", priority=p, started=started) for i, p in enumerate(priorities)
    )
    return Candidate(node=node_name, victims=tuple(sorted(victims, key=importance_key)))


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        ([_candidate("a", 5), _candidate("b", 3, 3, 3)], "b"),
        ([_candidate("a", 3, 3), _candidate("b", 3, 1)], "b"),
        ([_candidate("a", 3, 1), _candidate("b", 3)], "b"),
        ([_candidate("a", -5, -5), _candidate("b", -5)], "b"),
        ([_candidate("a", 3, started=10), _candidate("b", 3, started=20)], "b"),
        ([_candidate("a", 3, started=10), _candidate("b", 3)], "b"),
        ([_candidate("a", 1), _candidate("b")], "b"),
        ([_candidate("a", 3), _candidate("b", 3)], "a"),
    ],
    ids=[
        "lowest highest priority",
        "lowest sum of priorities",
        "sum weighs the count",
        "fewest victims among negative priorities",
        "latest start of the highest-priority victims",
        "not started counts as latest",
        "no victims ranks first",
        "first of equals",
    ],
)
def test_pick_candidate(candidates: list[Candidate], expected: str) -> None:
    best = pick_candidate(candidates)
    assert best is not None
    assert best.node == expected


def test_pick_candidate_of_none() -> None:
    assert pick_candidate([]) is None


def test_preempt_nominates_the_best_node() -> None:
    nodes = [
        node("n1", pod("mid", cpu=4000, priority=5, node="n1")),
        node("n2", pod("low", cpu=4000, priority=1, node="n2")),
        node("n3", pod("top", cpu=4000, priority=99, node="n3")),
    ]
    result = preempt(PREEMPTOR, nodes, unresolvable=["n4"])
    assert result.succeeded
    assert result.nominated_node == "n2"
    assert names(result.victims) == ["low"]
    assert [c.node for c in result.candidates] == ["n1", "n2"]
    assert result.reasons == {"n3": "No preemption victims found for incoming pod"}
    assert result.message == ""


def test_preempt_clears_lower_nominations_on_the_chosen_node() -> None:
    waiting = pod("waiting", cpu=1000, priority=3, nominated="n1")
    state = NodeState(
        name="n1",
        allocatable=res(cpu=4000),
        pods=(pod("low", cpu=4000, priority=1),),
        nominated=(waiting, pod("web", cpu=2000, priority=10, nominated="n1")),
    )
    result = preempt(PREEMPTOR, [state])
    assert result.nominated_node == "n1"
    assert names(result.clear_nominations) == ["waiting"]


@pytest.mark.parametrize(
    ("preemptor", "nodes", "unresolvable", "message"),
    [
        (
            PREEMPTOR,
            [],
            ["a", "b"],
            "0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        ),
        (
            PREEMPTOR,
            [
                node("a", pod("x", cpu=4000, priority=10)),
                node("b", pod("y", cpu=3000, priority=20), pod("z", cpu=1000, priority=1)),
            ],
            ["c"],
            "0/3 nodes are available: 1 Insufficient cpu, "
            "1 No preemption victims found for incoming pod, "
            "1 Preemption is not helpful for scheduling.",
        ),
        (
            pod("web", cpu=2000, priority=10, preemption_policy="Never"),
            [node("a", pod("x", cpu=4000, priority=1))],
            [],
            "not eligible due to preemptionPolicy=Never.",
        ),
        (
            pod("web", cpu=2000, priority=10, nominated="a"),
            [node("a", pod("x", cpu=4000, priority=1, terminating=True))],
            [],
            "not eligible due to a terminating pod on the nominated node.",
        ),
    ],
    ids=["nothing can help", "histogram of reasons", "preemptionPolicy Never", "terminating"],
)
def test_preempt_fails_with_a_message(
    preemptor: Pod, nodes: list[NodeState], unresolvable: list[str], message: str
) -> None:
    result = preempt(preemptor, nodes, unresolvable=unresolvable)
    assert not result.succeeded
    assert result.victims == ()
    assert result.message == message


def test_terminating_pod_elsewhere_does_not_block() -> None:
    """Only the nominated node's terminating pods make the preemptor wait."""
    preemptor = pod("web", cpu=2000, priority=10, nominated="gone")
    result = preempt(preemptor, [node("a", pod("x", cpu=4000, priority=1, terminating=True))])
    assert result.nominated_node == "a"


# --- properties ----------------------------------------------------------------------------------

CPU = st.sampled_from((0, 500, 1000, 1500, 2000))
MEMORY = st.sampled_from((0, 0, 1))
PRIORITY = st.integers(0, 3)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Pod, NodeState, QuotaBudget | None]:
    """A node packed with up to 7 pods (with a little room left, or none)."""
    placed = tuple(
        pod(
            f"p{i}",
            cpu=draw(CPU),
            memory=draw(MEMORY),
            priority=draw(PRIORITY),
            started=draw(st.none() | st.integers(0, 3)),
        )
        for i in range(draw(st.integers(1, 7)))
    )
    total = ResourceList.total(pod_requests(p) for p in placed)
    allocatable = ResourceList(
        {
            "cpu": total.get_amount("cpu") + draw(st.sampled_from((0, 0, 500, 1000))),
            "memory": total.get_amount("memory") + draw(st.sampled_from((0, GI))),
            "pods": len(placed) + draw(st.integers(0, 2)),
        }
    )
    preemptor = pod(
        "preemptor",
        cpu=draw(st.sampled_from((500, 1000, 2000, 3000))),
        memory=draw(MEMORY),
        priority=draw(st.integers(1, 4)),
    )
    budget = None
    if draw(st.booleans()):
        budget = QuotaBudget(
            name="q",
            used=ResourceList({"cpu": total.get_amount("cpu") + draw(st.sampled_from((0, 1000)))}),
            limit=ResourceList({"cpu": draw(st.sampled_from((2000, 4000, 8000)))}),
        )
    return preemptor, NodeState(name="n", allocatable=allocatable, pods=placed), budget


#: Keeping the most important pod costs two victims where one would do.
GREEDY_IS_NOT_ENOUGH = (
    pod("preemptor", cpu=2000, priority=5),
    node(
        "n",
        pod("big", cpu=2000, priority=1, started=0),
        pod("small1", cpu=1000, priority=1, started=1),
        pod("small2", cpu=1000, priority=1, started=2),
    ),
    None,
)
#: The node has room; the quota needs one victim.
QUOTA_NEEDS_A_VICTIM = (
    pod("preemptor", cpu=1000, priority=5),
    node("n", pod("a", cpu=1000, priority=1), pod("b", cpu=1000, priority=2), cpu=8000),
    QuotaBudget(name="q", used=res(cpu=2000), limit=res(cpu=2000)),
)


def fits_without(
    preemptor: Pod, state: NodeState, budget: QuotaBudget | None, gone: Sequence[Pod]
) -> bool:
    """Independent check: the preemptor fits on the node (and its quota) once ``gone`` left."""
    gone_ids = {id(p) for p in gone}
    left = [p for p in state.pods if id(p) not in gone_ids]
    request = pod_requests(preemptor)
    total = ResourceList.total([request, *(pod_requests(p) for p in left)])
    for name, amount in request.items():
        if amount > 0 and total.get_amount(name) > state.allocatable.get_amount(name):
            return False
    if len(left) + 1 > state.allocatable["pods"]:
        return False
    if budget is not None:
        freed = ResourceList.total(pod_requests(p) for p in gone)
        after = budget.used - freed + request
        for name, cap in budget.limit.items():
            if name in request and after.get_amount(name) > cap:
                return False
    return True


@settings(max_examples=300, deadline=None)
@given(scenarios())
@example(GREEDY_IS_NOT_ENOUGH)
@example(QUOTA_NEEDS_A_VICTIM)
def test_victims_are_right_and_as_few_as_possible(
    scenario: tuple[Pod, NodeState, QuotaBudget | None],
) -> None:
    preemptor, state, budget = scenario
    outcome = select_victims(preemptor, state, policy=VictimPolicy(budget=budget))
    priority = pod_priority(preemptor)
    evictable = [p for p in state.pods if pod_priority(p) < priority]
    alternatives = [
        chosen
        for size in range(len(evictable) + 1)
        for chosen in itertools.combinations(evictable, size)
        if fits_without(preemptor, state, budget, chosen)
    ]
    if not isinstance(outcome, Candidate):
        # Rejected only when no set of evictable pods would make room, or when the pod
        # already fits as the node is.
        fits_as_is = () in alternatives
        assert fits_as_is or not alternatives, outcome
        if not evictable:
            assert outcome == "No preemption victims found for incoming pod"
        else:
            assert fits_as_is == outcome.startswith("expected at least one victim"), outcome
        return
    assert outcome.victims
    victims = outcome.victims
    assert fits_without(preemptor, state, budget, victims)
    assert all(pod_priority(v) < priority for v in victims)
    top = max((pod_priority(v) for v in victims), default=-1)
    for alternative in alternatives:
        alt_top = max((pod_priority(v) for v in alternative), default=-1)
        assert alt_top >= top, (names(alternative), names(victims))
        if alt_top <= top:
            assert len(alternative) >= len(victims), (names(alternative), names(victims))


@settings(max_examples=100, deadline=None)
@given(st.lists(scenarios(), min_size=1, max_size=4))
def test_the_chosen_node_ranks_best(
    scenarios_: list[tuple[Pod, NodeState, QuotaBudget | None]],
) -> None:
    preemptor = scenarios_[0][0]
    nodes = [
        NodeState(name=f"n{i}", allocatable=state.allocatable, pods=state.pods)
        for i, (_, state, _) in enumerate(scenarios_)
    ]
    result = preempt(preemptor, nodes)
    assert len(result.candidates) + len(result.reasons) == len(nodes)
    if result.succeeded:
        best = next(c for c in result.candidates if c.node == result.nominated_node)
        assert all(best.rank_key() <= c.rank_key() for c in result.candidates)
        assert best.victims == result.victims
    else:
        assert result.message.startswith(f"0/{len(nodes)} nodes are available: ")


def test_exact_search_respects_extra_fit() -> None:
    """The smaller set the search finds must pass ``extra_fit`` too."""

    def small1_gone(preemptor: Pod, state: NodeState, kept: tuple[Pod, ...]) -> str:
        return "node(s) small1 in the way" if "small1" in names(kept) else ""

    preemptor, state, _ = GREEDY_IS_NOT_ENOUGH
    assert names(_victims(select_victims(preemptor, state))) == ["big"]
    outcome = select_victims(preemptor, state, extra_fit=small1_gone)
    assert sorted(names(_victims(outcome))) == ["small1", "small2"]


def test_requests_come_from_the_callers_figures() -> None:
    """The scheduler's cached requests are used instead of recomputing them."""
    state = node("n", pod("low", cpu=100, priority=1), cpu=200)

    def doubled(p: Pod) -> ResourceList:
        return ResourceList({"cpu": 2 * pod_requests(p).get_amount("cpu")})

    small = pod("web", cpu=100, priority=10)
    assert select_victims(small, state) == 'expected at least one victim pod on node "n"'
    assert names(_victims(select_victims(small, state, requests_of=doubled))) == ["low"]


def _victims(outcome: Candidate | str) -> tuple[Pod, ...]:
    assert isinstance(outcome, Candidate), outcome
    return outcome.victims
