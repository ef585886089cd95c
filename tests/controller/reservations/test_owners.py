"""Owner matching (§1.1): object, controller, label selector; ORed owners, ANDed fields."""

from __future__ import annotations

import msgspec
import pytest

from apis.core import Pod
from apis.meta import LabelSelector, LabelSelectorRequirement, ObjectReference, OwnerReference
from apis.scheduling import ReservationControllerReference, ReservationOwner
from controller.reservations.owners import compile_owners
from tests.controller.reservations.builders import pod

_BARE_WEB = pod("web-0", namespace="team-a", labels={"app": "web"})
WEB = msgspec.structs.replace(
    _BARE_WEB,
    metadata=msgspec.structs.replace(
        _BARE_WEB.metadata,
        owner_references=(
            OwnerReference(
                api_version="apps/v1", kind="ReplicaSet", name="web-rs", uid="rs-1", controller=True
            ),
        ),
    ),
)


def _controller(
    *,
    name: str = "",
    kind: str = "",
    uid: str = "",
    namespace: str = "",
    controller: bool | None = None,
) -> ReservationOwner:
    return ReservationOwner(
        controller=ReservationControllerReference(
            api_version="",
            kind=kind,
            name=name,
            uid=uid,
            namespace=namespace,
            controller=controller,
        )
    )


CASES: list[tuple[str, tuple[ReservationOwner, ...], Pod, bool]] = [
    ("empty owner matches all", (ReservationOwner(),), WEB, True),
    ("no owners match nothing", (), WEB, False),
    (
        "object by name and namespace",
        (ReservationOwner(object=ObjectReference(name="web-0", namespace="team-a")),),
        WEB,
        True,
    ),
    (
        "object in another namespace",
        (ReservationOwner(object=ObjectReference(name="web-0", namespace="team-b")),),
        WEB,
        False,
    ),
    (
        "object kind is ignored",
        (ReservationOwner(object=ObjectReference(kind="Deployment", uid="uid-web-0")),),
        WEB,
        True,
    ),
    (
        "object apiVersion compared",
        (ReservationOwner(object=ObjectReference(api_version="v2", name="web-0")),),
        WEB,
        False,
    ),
    ("controller by name and kind", (_controller(name="web-rs", kind="ReplicaSet"),), WEB, True),
    ("controller uid differs", (_controller(uid="rs-2"),), WEB, False),
    ("controller namespace differs", (_controller(name="web-rs", namespace="x"),), WEB, False),
    ("controller flag must agree", (_controller(name="web-rs", controller=False),), WEB, False),
    ("controller of a pod without owners", (_controller(),), pod("bare"), False),
    (
        "label selector",
        (ReservationOwner(label_selector=LabelSelector(match_labels={"app": "web"})),),
        WEB,
        True,
    ),
    (
        "label selector mismatch",
        (ReservationOwner(label_selector=LabelSelector(match_labels={"app": "db"})),),
        WEB,
        False,
    ),
    (
        "fields of one owner are ANDed",
        (
            ReservationOwner(
                object=ObjectReference(name="web-0"),
                label_selector=LabelSelector(match_labels={"app": "db"}),
            ),
        ),
        WEB,
        False,
    ),
    (
        "owners are ORed",
        (
            ReservationOwner(label_selector=LabelSelector(match_labels={"app": "db"})),
            ReservationOwner(object=ObjectReference(name="web-0")),
        ),
        WEB,
        True,
    ),
]


@pytest.mark.parametrize(
    ("owners", "candidate", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_owner_matching(
    owners: tuple[ReservationOwner, ...], candidate: Pod, expected: bool
) -> None:
    assert compile_owners(owners).matches(candidate) is expected


def test_selector_parse_error_makes_the_reservation_unmatchable() -> None:
    bad = ReservationOwner(
        label_selector=LabelSelector(
            match_expressions=(LabelSelectorRequirement(key="app", operator="Like"),)
        )
    )
    owners = compile_owners((ReservationOwner(), bad))
    assert "owners[1].labelSelector" in owners.error
    assert not owners.matches(WEB)
