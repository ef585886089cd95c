"""Pre-allocation (§1.8): preconditions, candidates in both modes, selection, nomination."""

from __future__ import annotations

import msgspec
import pytest

from apis import constants as k
from apis.core import Pod
from apis.meta import LabelSelector, LabelSelectorRequirement, ObjectReference
from apis.resources import ResourceList
from apis.scheduling import PreAllocationPolicy, Reservation, ReservationOwner
from controller.reservations.accounting import ALIGNED, RESTRICTED
from controller.reservations.args import PreAllocationConfig, ReservationArgs
from controller.reservations.preallocation import (
    MSG_CLUSTER_MODE_DISABLED,
    MSG_NO_POD_FITS,
    MSG_UNSUPPORTED,
    Candidate,
    check_preconditions,
    cluster_mode_candidates,
    default_mode_candidates,
    find_candidates,
    node_score,
    nominate,
    select,
)
from tests.controller.reservations.builders import by_labels, by_name, pod, res, reservation

CLUSTER_ON = ReservationArgs(pre_allocation_config=PreAllocationConfig(enable_cluster_mode=True))


def _pre(
    *,
    policy: str = RESTRICTED,
    mode: str = "",
    multiple: bool = False,
    requests: ResourceList | None = None,
    owners: tuple[ReservationOwner, ...] | None = None,
    required: bool = False,
) -> Reservation:
    r = reservation(
        "pre",
        requests=res(cpu=2, memory_gi=4) if requests is None else requests,
        owners=by_labels(app="my-app") if owners is None else owners,
        policy=policy,
        allocate_once=False,
        labels={k.LABEL_PRE_ALLOCATION_REQUIRED: "true"} if required else {},
    )
    return msgspec.structs.replace(
        r,
        spec=msgspec.structs.replace(
            r.spec,
            pre_allocation=True,
            pre_allocation_policy=PreAllocationPolicy(mode=mode, enable_multiple=multiple),
        ),
    )


BAD_OWNERS = (
    ReservationOwner(
        label_selector=LabelSelector(
            match_expressions=(LabelSelectorRequirement(key="app", operator="Near"),)
        )
    ),
)


@pytest.mark.parametrize(
    ("candidate", "args", "expected"),
    [
        (_pre(), ReservationArgs(), ""),
        (_pre(policy=ALIGNED), ReservationArgs(), MSG_UNSUPPORTED),
        (_pre(policy=""), ReservationArgs(), MSG_UNSUPPORTED),
        (_pre(mode="Cluster"), ReservationArgs(), MSG_CLUSTER_MODE_DISABLED),
        (_pre(mode="Cluster"), CLUSTER_ON, ""),
    ],
    ids=["restricted", "aligned", "default policy", "cluster disabled", "cluster enabled"],
)
def test_preconditions(candidate: Reservation, args: ReservationArgs, expected: str) -> None:
    assert check_preconditions(candidate, args) == expected


def test_owner_parse_error_is_a_precondition() -> None:
    assert "labelSelector" in check_preconditions(_pre(owners=BAD_OWNERS), ReservationArgs())


APP = {"app": "my-app"}
ALLOCATED = {k.ANNOTATION_RESERVATION_ALLOCATED: '{"name":"x","uid":"uid-x"}'}
RESERVE_POD = {k.ANNOTATION_RESERVE_POD: "true"}


def test_default_mode_candidates() -> None:
    pods = [
        pod("a", labels=APP, node="n1"),
        pod("b", labels=APP, node="n2"),
        pod("c", labels=APP, node="n1"),
        pod("a-again", uid="uid-a", labels=APP, node="n1"),
        pod("unassigned", labels=APP),
        pod("taken", labels=APP, node="n1", annotations=ALLOCATED),
        pod("reserve", labels=APP, node="n1", annotations=RESERVE_POD),
        pod("other", labels={"app": "web"}, node="n1"),
    ]
    found = default_mode_candidates(_pre(), pods)
    assert {n: [p.metadata.name for p in ps] for n, ps in found.items()} == {
        "n1": ["a", "c"],
        "n2": ["b"],
    }


def test_default_mode_needs_an_owner_with_a_label_selector() -> None:
    pods = [pod("pod-demo-0", node="n1")]
    assert default_mode_candidates(_pre(owners=by_name("pod-demo-0")), pods) == {}


def test_default_mode_rechecks_the_whole_owner() -> None:
    owner = ReservationOwner(
        object=ObjectReference(namespace="team-a"),
        label_selector=LabelSelector(match_labels=APP),
    )
    pods = [pod("in", namespace="team-a", labels=APP, node="n1"), pod("out", labels=APP, node="n1")]
    found = default_mode_candidates(_pre(owners=(owner,)), pods)
    assert [p.metadata.name for p in found["n1"]] == ["in"]


def _cluster_pod(
    name: str, priority: str | None, *, annotations: dict[str, str] | None = None, phase: str = ""
) -> Pod:
    notes = dict(annotations or {})
    if priority is not None:
        notes[k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY] = priority
    return pod(
        name,
        node="n1",
        labels={k.LABEL_IS_PRE_ALLOCATABLE: "true"},
        annotations=notes,
        phase=phase,
    )


def test_cluster_mode_candidates_are_ordered_by_priority_then_uid() -> None:
    pods = [
        _cluster_pod("low", "1"),
        _cluster_pod("high", "100"),
        _cluster_pod("b-none", None),
        _cluster_pod("a-bad", "urgent"),
        _cluster_pod("finished", "500", phase="Succeeded"),
        _cluster_pod("taken", "50", annotations=ALLOCATED),
        pod("unlabelled", node="n1"),
    ]
    found = cluster_mode_candidates(pods)
    assert [p.metadata.name for p in found["n1"]] == ["high", "taken", "low", "a-bad", "b-none"]


def test_cluster_mode_keys_are_configurable() -> None:
    config = PreAllocationConfig(cluster_label_key="example.com/spare")
    pods = [pod("spare", node="n1", labels={"example.com/spare": "true"})]
    assert list(cluster_mode_candidates(pods, config)) == ["n1"]
    assert cluster_mode_candidates(pods) == {}


def test_cluster_mode_ignores_owners_but_not_the_candidates_affinity() -> None:
    other = {k.ANNOTATION_RESERVATION_AFFINITY: '{"name":"someone-else"}'}
    pods = [_cluster_pod("free", "1"), _cluster_pod("bound-elsewhere", "2", annotations=other)]
    found = find_candidates(_pre(mode="Cluster", owners=by_name("nobody")), pods, {}, CLUSTER_ON)
    assert [p.metadata.name for p in found["n1"]] == ["free"]


# --- selection --------------------------------------------------------------------------------

NODE = res(cpu=4, memory_gi=8)


def _candidates(*requests: ResourceList) -> list[Candidate]:
    return [
        Candidate.of(pod(f"c{i}", node="n1", requests=r, labels=APP))
        for i, r in enumerate(requests)
    ]


def test_single_mode_takes_over_a_pod_to_fit() -> None:
    # the node is full: 2 CPU / 4 Gi of others plus the candidate's 2 CPU / 4 Gi
    candidates = _candidates(res(cpu=2, memory_gi=4))
    requested = res(cpu=4, memory_gi=8)
    selection = select(_pre(), NODE, requested, pods=2, candidates=candidates)
    assert selection.fits
    assert selection.selected == tuple(candidates)
    assert node_score(_pre(), selection) == 100


def test_single_mode_candidate_must_fit_inside_the_reservation() -> None:
    candidates = _candidates(res(cpu=3, memory_gi=4))
    requested = res(cpu=4, memory_gi=8)
    required = select(_pre(required=True), NODE, requested, pods=2, candidates=candidates)
    assert not required.fits
    assert required.reasons == ("Reservation(s) Insufficient cpu",)
    optional = select(_pre(), NODE, requested, pods=2, candidates=candidates)
    assert (optional.fits, optional.reasons) == (
        False,
        ("Insufficient cpu by node", "Insufficient memory by node"),
    )


def test_required_without_candidates_says_so() -> None:
    selection = select(_pre(required=True), NODE, res(), pods=0, candidates=())
    assert selection.reasons == (MSG_NO_POD_FITS,)


def test_prefer_no_pre_allocated_pods() -> None:
    candidates = _candidates(res(cpu=1, memory_gi=1))
    requested = res(cpu=1, memory_gi=1)
    preferred = select(
        _pre(), NODE, requested, pods=1, candidates=candidates, prefer_no_pre_allocated=True
    )
    assert (preferred.fits, preferred.selected) == (True, ())
    assert select(_pre(), NODE, requested, pods=1, candidates=candidates).selected == tuple(
        candidates
    )


def test_multiple_mode_accumulates_until_the_reservation_fits() -> None:
    # the user manual's example: two pods of 1 CPU / 2 Gi for a 2 CPU / 4 Gi reservation
    candidates = _candidates(res(cpu=1, memory_gi=2), res(cpu=1, memory_gi=2), res(cpu=1))
    requested = res(cpu=4, memory_gi=8)
    multiple = _pre(multiple=True)
    selection = select(multiple, NODE, requested, pods=4, candidates=candidates)
    assert selection.fits
    assert [c.pod.metadata.name for c in selection.selected] == ["c0", "c1"]
    assert node_score(multiple, selection) == 33


def test_multiple_mode_skips_pods_that_overflow_the_reservation() -> None:
    candidates = _candidates(
        res(cpu=3, memory_gi=2), res(cpu=1, memory_gi=2), res(cpu=1, memory_gi=2)
    )
    requested = res(cpu=4, memory_gi=8)
    selection = select(
        _pre(multiple=True, mode="Cluster"), NODE, requested, pods=4, candidates=candidates
    )
    assert [c.pod.metadata.name for c in selection.selected] == ["c1", "c2"]


def test_nominate_by_score_not_priority() -> None:
    candidates = _candidates(
        res(cpu=1, memory_gi=1), res(cpu=2, memory_gi=4), res(cpu=2, memory_gi=4)
    )
    chosen = nominate(_pre(), candidates)
    assert chosen is not None
    assert chosen.pod.metadata.name == "c1"  # the tightest fit, first of the tie
    assert nominate(_pre(), []) is None
