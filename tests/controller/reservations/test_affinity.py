"""Pod-side annotations and the per-reservation match decision (§1.4-1.5)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from apis import constants as k
from apis.core import Taint
from apis.meta import LabelSelector, LabelSelectorRequirement, ObjectReference
from apis.scheduling import Reservation, ReservationOwner
from controller.reservations import AnnotationError
from controller.reservations.affinity import (
    MatchOutcome,
    allocated_annotation,
    diagnosis_reasons,
    exact_match,
    is_matchable,
    match_node,
    match_reservation,
    parse_allocated,
    parse_reservation_affinity,
    parse_restricted_options,
    pod_view,
)
from tests.controller.reservations.builders import available, by_labels, pod, res, reservation

AFFINITY = k.ANNOTATION_RESERVATION_AFFINITY
EXACT = k.ANNOTATION_EXACT_MATCH_RESERVATION
NODE_LABELS = {"zone": "a", "pool": "gpu"}
BAD_SELECTOR = LabelSelector(
    match_expressions=(LabelSelectorRequirement(key="app", operator="Like"),)
)


def _spec(r: Reservation, **fields: object) -> Reservation:
    return msgspec.structs.replace(r, spec=msgspec.structs.replace(r.spec, **fields))


R = available("r1", requests=res(cpu=4), labels={"kind": "train"})
TAINTED = _spec(R, taints=(Taint(key="gpu", value="a100", effect="NoSchedule"),))
PREFER = _spec(R, taints=(Taint(key="gpu", value="a100", effect="PreferNoSchedule"),))
CORDONED = _spec(R, unschedulable=True)
TERMINATING = msgspec.structs.replace(
    R,
    metadata=msgspec.structs.replace(
        R.metadata, deletion_timestamp=datetime(2026, 1, 2, tzinfo=UTC)
    ),
)
OWNED_BY_WEB = available("r2", owners=by_labels(app="web"))

REQUIRED = '{"requiredDuringSchedulingIgnoredDuringExecution":{"reservationSelectorTerms":%s}}'
TOLERATE_UNSCHEDULABLE = (
    '{"tolerations":[{"key":"node.kubernetes.io/unschedulable","operator":"Exists"}]}'
)

CASES: list[tuple[str, dict[str, str], dict[str, str], Reservation, MatchOutcome]] = [
    ("no affinity matches", {}, {}, R, MatchOutcome.MATCHED),
    (
        "ignored label",
        {},
        {k.LABEL_RESERVATION_IGNORED: "true"},
        OWNED_BY_WEB,
        MatchOutcome.IGNORED,
    ),
    ("owner mismatch", {}, {"app": "db"}, OWNED_BY_WEB, MatchOutcome.OWNER_UNMATCHED),
    ("owner match", {}, {"app": "web"}, OWNED_BY_WEB, MatchOutcome.MATCHED),
    ("named reservation", {AFFINITY: '{"name":"r1"}'}, {}, R, MatchOutcome.MATCHED),
    ("other name", {AFFINITY: '{"name":"r9"}'}, {}, R, MatchOutcome.NAME_UNMATCHED),
    ("named skips unschedulable", {AFFINITY: '{"name":"r1"}'}, {}, CORDONED, MatchOutcome.MATCHED),
    ("unschedulable", {}, {}, CORDONED, MatchOutcome.UNSCHEDULABLE),
    ("terminating", {}, {}, TERMINATING, MatchOutcome.UNSCHEDULABLE),
    (
        "unschedulable tolerated",
        {AFFINITY: TOLERATE_UNSCHEDULABLE},
        {},
        CORDONED,
        MatchOutcome.MATCHED,
    ),
    ("taint", {}, {}, TAINTED, MatchOutcome.TAINT_UNTOLERATED),
    ("PreferNoSchedule ignored", {}, {}, PREFER, MatchOutcome.MATCHED),
    (
        "taint tolerated",
        {AFFINITY: '{"tolerations":[{"key":"gpu","value":"a100","effect":"NoSchedule"}]}'},
        {},
        TAINTED,
        MatchOutcome.MATCHED,
    ),
    (
        "selector on reservation label",
        {AFFINITY: '{"reservationSelector":{"kind":"train"}}'},
        {},
        R,
        MatchOutcome.MATCHED,
    ),
    (
        "selector on node label",
        {AFFINITY: '{"reservationSelector":{"zone":"a"}}'},
        {},
        R,
        MatchOutcome.MATCHED,
    ),
    (
        "selector mismatch",
        {AFFINITY: '{"reservationSelector":{"kind":"serve"}}'},
        {},
        R,
        MatchOutcome.AFFINITY_UNMATCHED,
    ),
    (
        "terms",
        {
            AFFINITY: REQUIRED
            % '[{"matchExpressions":[{"key":"pool","operator":"In","values":["gpu"]}]}]'
        },
        {},
        R,
        MatchOutcome.MATCHED,
    ),
    (
        "terms mismatch",
        {AFFINITY: REQUIRED % '[{"matchExpressions":[{"key":"pool","operator":"DoesNotExist"}]}]'},
        {},
        R,
        MatchOutcome.AFFINITY_UNMATCHED,
    ),
    (
        "exact match fails",
        {EXACT: '{"resourceNames":["cpu"]}'},
        {},
        R,
        MatchOutcome.NOT_EXACT_MATCHED,
    ),
    (
        "named with exact match fails",
        {AFFINITY: '{"name":"r1"}', EXACT: '{"resourceNames":["cpu"]}'},
        {},
        R,
        MatchOutcome.NOT_EXACT_MATCHED,
    ),
]


@pytest.mark.parametrize(
    ("annotations", "labels", "candidate", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_match_decision(
    annotations: dict[str, str],
    labels: dict[str, str],
    candidate: Reservation,
    expected: MatchOutcome,
) -> None:
    view = pod_view(pod("p", requests=res(cpu=2), labels=labels, annotations=annotations))
    result = match_reservation(view, candidate, NODE_LABELS)
    assert result.outcome is expected
    assert result.usable is (expected in (MatchOutcome.MATCHED, MatchOutcome.IGNORED))


def test_taint_reason_names_the_taint() -> None:
    result = match_reservation(pod_view(pod("p")), TAINTED, {})
    assert result.reason == "had untolerated taint {gpu: a100}"


def test_omitting_node_labels() -> None:
    view = pod_view(pod("p", annotations={AFFINITY: '{"reservationSelector":{"zone":"a"}}'}))
    assert match_reservation(view, R, NODE_LABELS, omit_node_labels=True).outcome is (
        MatchOutcome.AFFINITY_UNMATCHED
    )


@pytest.mark.parametrize(
    ("requests", "allocatable", "names", "expected"),
    [
        ({"cpu": 2000}, {"cpu": 2000}, ["cpu"], True),
        ({"cpu": 2000}, {"cpu": 4000}, ["cpu"], False),
        ({"cpu": 2000}, {}, ["cpu"], False),
        # a name absent on both sides answers "match" before the later names are looked at
        ({"cpu": 2000}, {"cpu": 4000}, ["nvidia.com/gpu", "cpu"], True),
        ({"cpu": 2000}, {"cpu": 4000}, ["cpu", "nvidia.com/gpu"], False),
        ({}, {}, [], True),
    ],
)
def test_exact_match(
    requests: dict[str, int], allocatable: dict[str, int], names: list[str], expected: bool
) -> None:
    assert exact_match(requests, allocatable, names) is expected


def test_empty_affinity_annotation_requires_a_reservation() -> None:
    view = pod_view(pod("p", annotations={AFFINITY: ""}))
    assert view.requires_reservation
    assert pod_view(pod("p")).affinity is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("{", "invalid JSON"), ('{"name": 3}', "Expected `str`"), ('{"nmae":"x"}', "unknown field")],
)
def test_affinity_parse_errors_name_the_annotation(text: str, fragment: str) -> None:
    with pytest.raises(AnnotationError, match=fragment) as caught:
        parse_reservation_affinity(pod("p", annotations={AFFINITY: text}))
    assert caught.value.key == AFFINITY


def test_restricted_options() -> None:
    key = k.ANNOTATION_RESERVATION_RESTRICTED_OPTIONS
    r = available(annotations={key: '{"resources":["cpu"]}'})
    assert parse_restricted_options(r) == ("cpu",)
    assert parse_restricted_options(available()) == ()


CONSUMED = (ObjectReference(name="o", namespace="default", uid="uid-o"),)


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (available(), True),
        (reservation(node="n1", phase="Succeeded"), False),
        (reservation(phase="Available"), False),
        (available(current_owners=CONSUMED), False),
        (available(allocate_once=False, current_owners=CONSUMED), True),
        (available(owners=(ReservationOwner(label_selector=BAD_SELECTOR),)), False),
    ],
    ids=["available", "terminal", "unassigned", "consumed once", "reusable", "parse error"],
)
def test_matchable(candidate: Reservation, expected: bool) -> None:
    assert is_matchable(candidate) is expected


def test_match_node_sorts_reservations() -> None:
    web = available("web-r", owners=by_labels(app="web"))
    db_used = available(
        "db-r", owners=by_labels(app="db"), allocate_once=False, allocated=res(cpu=1)
    )
    db_idle = available("db-idle", owners=by_labels(app="db"))
    consumed = available("consumed", current_owners=CONSUMED)
    view = pod_view(pod("p", labels={"app": "web"}))
    found = match_node(view, [web, db_used, db_idle, consumed], NODE_LABELS)
    assert [r.metadata.name for r in found.matched] == ["web-r"]
    # only an unmatched reservation with owners is kept (its owners are counted twice)
    assert [r.metadata.name for r in found.unmatched] == ["db-r"]
    assert len(found.results) == 3  # the consumed allocate-once one is not matchable


def test_diagnosis_reasons() -> None:
    view = pod_view(pod("p", labels={"app": "web"}))
    results = [
        match_reservation(view, r, {})
        for r in (R, TAINTED, TAINTED, CORDONED, available("x", owners=by_labels(app="db")))
    ]
    assert diagnosis_reasons(results) == (
        "4 Reservation(s) matched owner total",
        "1 Reservation(s) is unschedulable",
        "2 Reservation(s) had untolerated taint {gpu: a100}",
    )
    assert diagnosis_reasons([]) == ()


def test_allocated_annotation_round_trip() -> None:
    annotations = allocated_annotation(R)
    assert annotations == {k.ANNOTATION_RESERVATION_ALLOCATED: '{"name":"r1","uid":"uid-r1"}'}
    found = parse_allocated(pod("p", annotations=annotations))
    assert found is not None
    assert (found.name, found.uid) == ("r1", "uid-r1")
    assert parse_allocated(pod("p")) is None
