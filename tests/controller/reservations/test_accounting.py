"""Node fit, policy fit, scoring and nomination (§1.6-1.7), with the worked example of §1.6."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.resources import ResourceList
from controller.reservations.accounting import (
    ALIGNED,
    MSG_NO_RESERVATION_FITS,
    RESTRICTED,
    NodeUsage,
    NominationCandidate,
    ReservationState,
    assume,
    filter_with_reservations,
    fits_node,
    fits_policy,
    nominate,
    policy_conflict,
    preferred_node,
    reservation_order,
    restore,
    score_reservation,
)
from tests.controller.reservations.builders import available, res

# --- the worked example of §1.6 -------------------------------------------------------------
# Node: 32 CPU; other pods request 10 CPU; R (8 CPU, allocateOnce=false) has one owner using
# 3 CPU; P requests 6 CPU.
NODE = NodeUsage(
    allocatable=res(cpu=32),
    requested=ResourceList.total([res(cpu=10), res(cpu=8), res(cpu=3)]),
    pods=3,
)
P = res(cpu=6)


def _r(policy: str) -> ReservationState:
    return ReservationState(
        name="R",
        allocatable=res(cpu=8),
        allocated=res(cpu=3),
        allocated_pods=1,
        policy=policy,
        allocate_once=False,
    )


def test_worked_example_restore_for_a_matching_pod() -> None:
    restored = restore(NODE, [_r(ALIGNED)])
    assert restored.pod_requested == res(cpu=21)
    assert restored.requested == res(cpu=13)  # what NodeResourcesFit sees: 19 CPU free
    assert restored.r_allocated == res(cpu=3)
    assert _r(ALIGNED).remaining == res(cpu=5)


def test_worked_example_p_fits_an_aligned_reservation() -> None:
    r = _r(ALIGNED)
    restored = restore(NODE, [r])
    assert fits_node(P, NODE.allocatable, restored, r) == ()
    result = filter_with_reservations(P, NODE.allocatable, restored, [r])
    assert (result.fits, result.fitting) == (True, ("R",))
    # after binding, an Aligned R may hold more than it reserved (the extra from the node)
    assert assume(r, P).allocated == res(cpu=9)


def test_worked_example_restricted_reservation_refuses_p() -> None:
    r = _r(RESTRICTED)
    restored = restore(NODE, [r])
    assert fits_policy(P, r) == ("Reservation(s) Insufficient cpu",)
    result = filter_with_reservations(P, NODE.allocatable, restored, [r], has_affinity=True)
    assert not result.fits
    assert result.reasons == ("Reservation(s) Insufficient cpu",)


def test_worked_example_restricted_without_affinity_falls_back_to_the_node() -> None:
    r = _r(RESTRICTED)
    result = filter_with_reservations(P, NODE.allocatable, restore(NODE, [r]), [r])
    assert (result.fits, result.fitting) == (True, ())


def test_worked_example_q_sees_the_full_reservation_blocked() -> None:
    restored = restore(NODE, matched=[], unmatched=[_r(ALIGNED)])
    assert restored.pod_requested == res(cpu=18)  # 10 + R's 8; the owner is not counted twice
    # Q can have the 14 CPU left, not one more
    assert fits_node(res(cpu=14), NODE.allocatable, restored) == ()
    assert fits_node(res(cpu=15), NODE.allocatable, restored) == ("Insufficient cpu by node",)


# --- node fit ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (res(cpu=19), ()),
        (res(cpu=20), ("Insufficient cpu by node",)),
        (res(cpu=1, memory_gi=65), ("Insufficient memory by node",)),
        (res(cpu=1, gpu=1), ("Insufficient nvidia.com/gpu by node",)),
        (ResourceList({"cpu": 0, "memory": 0}), ()),
    ],
    ids=["fits", "cpu", "memory", "scalar", "zero requests"],
)
def test_node_fit(request_: ResourceList, expected: tuple[str, ...]) -> None:
    node = NodeUsage(allocatable=res(cpu=32, memory_gi=64), requested=res(cpu=21), pods=3)
    r = _r(ALIGNED)
    assert fits_node(request_, node.allocatable, restore(node, [r]), r) == expected


def test_ignored_scalars_are_not_checked() -> None:
    node = NodeUsage(allocatable=res(cpu=4), requested=res())
    restored = restore(node, [])
    gpu = res(cpu=1, gpu=1)
    assert fits_node(gpu, node.allocatable, restored, ignores=lambda n: n == "nvidia.com/gpu") == ()


def test_pods_count() -> None:
    node = NodeUsage(allocatable=ResourceList({"cpu": 4000, "pods": 3}), requested=res(), pods=3)
    assert fits_node(res(cpu=1), node.allocatable, restore(node, [])) == ("Too many pods by node",)
    r = ReservationState(name="R", allocatable=res(cpu=1))
    assert fits_node(res(cpu=1), node.allocatable, restore(node, [r]), r) == ()


# --- policy fit -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "request_", "named", "expected"),
    [
        (ReservationState(name="R", allocatable=res(cpu=2), policy=ALIGNED), res(cpu=9), False, ()),
        (
            ReservationState(
                name="R", allocatable=res(cpu=2), allocated=res(cpu=1), policy=RESTRICTED
            ),
            res(cpu=2),
            True,
            ("Reservation(s) Insufficient cpu, requested: 2000, used: 1000, capacity: 2000",),
        ),
        (
            ReservationState(
                name="R",
                allocatable=res(cpu=2),
                allocated=res(cpu=1),
                preemptible=res(cpu=1),
                policy=RESTRICTED,
            ),
            res(cpu=2),
            False,
            (),
        ),
        (
            ReservationState(
                name="R", allocatable=res(cpu=4), reserved=res(cpu=3), policy=RESTRICTED
            ),
            res(cpu=2),
            False,
            ("Reservation(s) Insufficient cpu",),
        ),
        (
            ReservationState(
                name="R",
                allocatable=res(cpu=4, memory_gi=1),
                policy=RESTRICTED,
                restricted_options=("memory",),
            ),
            res(cpu=8, memory_gi=1),
            False,
            (),
        ),
        (
            ReservationState(
                name="R",
                allocatable=res(cpu=4, memory_gi=1),
                policy=RESTRICTED,
                restricted_options=("nvidia.com/gpu",),
            ),
            res(cpu=8),
            False,
            ("Reservation(s) Insufficient cpu",),
        ),
        (
            ReservationState(
                name="R",
                allocatable=ResourceList({"cpu": 4000, "pods": 1}),
                allocated_pods=1,
                policy=RESTRICTED,
            ),
            res(cpu=1),
            True,
            ("Reservation(s) Too many pods, requested: 1, used: 1, capacity: 1",),
        ),
    ],
    ids=[
        "aligned",
        "restricted named",
        "preemptible frees",
        "node reservation kept back",
        "restricted options",
        "options outside R mean all",
        "pods",
    ],
)
def test_policy_fit(
    state: ReservationState, request_: ResourceList, named: bool, expected: tuple[str, ...]
) -> None:
    assert fits_policy(request_, state, named=named) == expected


def test_affinity_without_any_candidate_says_no_reservation() -> None:
    node = NodeUsage(allocatable=res(cpu=4), requested=res())
    result = filter_with_reservations(
        res(cpu=1), node.allocatable, restore(node, []), [], has_affinity=True
    )
    assert result.reasons == (MSG_NO_RESERVATION_FITS,)


def test_named_reservation_is_the_only_one_tried() -> None:
    node = NodeUsage(allocatable=res(cpu=32), requested=res(cpu=8))
    small = ReservationState(name="small", allocatable=res(cpu=1), policy=RESTRICTED)
    big = ReservationState(name="big", allocatable=res(cpu=8), policy=RESTRICTED)
    restored = restore(node, [small, big])
    result = filter_with_reservations(
        res(cpu=2), node.allocatable, restored, [small, big], has_affinity=True, named="small"
    )
    assert not result.fits
    assert result.reasons == (
        "Reservation(s) Insufficient cpu, requested: 2000, used: 0, capacity: 1000",
    )


def test_reservations_sharing_no_resource_are_skipped() -> None:
    node = NodeUsage(allocatable=res(cpu=32, gpu=8), requested=res())
    gpus = ReservationState(name="gpus", allocatable=res(gpu=8))
    result = filter_with_reservations(res(cpu=1), node.allocatable, restore(node, [gpus]), [gpus])
    assert (result.fits, result.fitting) == (True, ())


@pytest.mark.parametrize(
    ("policy", "others", "expected"),
    [
        ("", ["Aligned"], True),
        ("Aligned", [""], True),
        ("", [""], False),
        ("Restricted", ["Aligned"], False),
    ],
)
def test_policy_conflict(policy: str, others: list[str], expected: bool) -> None:
    assert policy_conflict(policy, others) is expected


# --- scoring and nomination -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "allocated", "expected"),
    [
        (res(cpu=2, memory_gi=4), res(), 50),
        (res(cpu=4, memory_gi=8), res(), 100),
        (res(cpu=2, memory_gi=4), res(cpu=2, memory_gi=4), 100),
        (res(cpu=5, memory_gi=4), res(), 25),  # cpu over capacity scores 0
    ],
)
def test_score_reservation(request_: ResourceList, allocated: ResourceList, expected: int) -> None:
    state = ReservationState(name="R", allocatable=res(cpu=4, memory_gi=8), allocated=allocated)
    assert score_reservation(request_, state) == expected


@pytest.mark.parametrize(
    ("candidates", "has_affinity", "previous", "expected"),
    [
        ([NominationCandidate("a", used_once=True)], True, "", "a"),
        ([NominationCandidate("a"), NominationCandidate("b")], False, "b", "b"),
        ([NominationCandidate("a", used_once=True), NominationCandidate("b")], False, "", "b"),
        ([NominationCandidate("a", order=2), NominationCandidate("b", order=1)], False, "", "b"),
        (
            [NominationCandidate("a", score=10), NominationCandidate("b", score=90, order=0)],
            False,
            "",
            "b",
        ),
        ([NominationCandidate("a", score=10), NominationCandidate("b", score=10)], False, "", "a"),
        ([NominationCandidate("a", used_once=True)], False, "", None),
    ],
    ids=["single with affinity", "previous", "used once", "order", "score", "tie", "none"],
)
def test_nominate(
    candidates: list[NominationCandidate], has_affinity: bool, previous: str, expected: str | None
) -> None:
    chosen = nominate(candidates, has_affinity=has_affinity, previous=previous)
    assert (chosen.name if chosen else None) == expected


def test_reservation_order_label() -> None:
    key = k.LABEL_RESERVATION_ORDER
    assert reservation_order(available(labels={key: "3"})) == 3
    assert reservation_order(available(labels={key: "-1"})) == 0
    assert reservation_order(available(labels={key: "first"})) == 0
    assert preferred_node({"n1": [0, 5], "n2": [2], "n3": []}) == "n2"
    assert preferred_node({"n1": [0]}) is None


def test_state_of_a_reservation() -> None:
    r = available(requests=res(cpu=4), allocated=res(cpu=1), policy=RESTRICTED, allocate_once=False)
    state = ReservationState.of(r)
    assert (state.allocatable, state.allocated, state.policy, state.allocate_once) == (
        res(cpu=4),
        res(cpu=1),
        RESTRICTED,
        False,
    )


# --- property: a Restricted reservation never holds more than it reserves ---------------------

_REQUEST = st.builds(
    lambda cpu, mem, gpu: ResourceList(
        {n: v for n, v in (("cpu", cpu), ("memory", mem), ("nvidia.com/gpu", gpu)) if v}
    ),
    st.integers(0, 6000),
    st.integers(0, 8 * 1024**3),
    st.integers(0, 2),
)


@settings(max_examples=200, deadline=None)
@given(
    allocatable=st.builds(
        lambda cpu, mem: ResourceList({"cpu": cpu, "memory": mem}),
        st.integers(1, 16000),
        st.integers(1, 32 * 1024**3),
    ),
    policy=st.sampled_from([ALIGNED, RESTRICTED]),
    options=st.sampled_from([(), ("cpu",), ("memory",)]),
    pods=st.lists(_REQUEST, max_size=20),
)
def test_restricted_allocated_never_exceeds_allocatable(
    allocatable: ResourceList, policy: str, options: tuple[str, ...], pods: list[ResourceList]
) -> None:
    node = NodeUsage(
        allocatable=ResourceList({"cpu": 10**9, "memory": 10**15}), requested=allocatable
    )
    state = ReservationState(
        name="R",
        allocatable=allocatable,
        policy=policy,
        allocate_once=False,
        restricted_options=options,
    )
    for request in pods:
        restored = restore(node, [state])
        result = filter_with_reservations(
            request, node.allocatable, restored, [state], has_affinity=True
        )
        if result.fits:
            state = assume(state, request)
            node = dataclasses.replace(node, requested=node.requested + request, pods=node.pods + 1)
        if policy == RESTRICTED:
            for name in state.restricted_names:
                assert state.allocated.get(name, 0) <= allocatable[name]
