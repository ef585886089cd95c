"""The pod-side reservation API and the per-reservation match decision (controller-spec
§1.4-1.5).

Annotations parsed here, each with an :class:`AnnotationError` naming the key and the reason:

- pod ``scheduling.koordinator.sh/reservation-affinity``: :class:`ReservationAffinity`. Its
  presence, even empty, means the pod must use a reservation.
- pod ``scheduling.koordinator.sh/exact-match-reservation``: ``{"resourceNames": [...]}``.
- reservation ``scheduling.koordinator.sh/reservation-restricted-options``:
  ``{"resources": [...]}``.

Unknown fields in these annotations are refused (a misspelt key is an error, not silently a
wider match).

:func:`match_reservation` decides, for one pod and one matchable reservation, in this order:
the pod ignores reservations (matched as "ignored"); the owners must match; an affinity naming
a reservation matches on the name and the exact-match spec only; otherwise an unschedulable or
terminating reservation needs a toleration of ``node.kubernetes.io/unschedulable:NoSchedule``,
every NoSchedule/NoExecute reservation taint must be tolerated, the affinity's selector and
terms must match the labels of the node overlaid by those of the reservation, and the
exact-match spec must hold.

Quirk kept (§9 item 6): the exact-match check answers "match" as soon as it meets a listed
resource name absent from both the pod's requests and the reservation's allocatable, without
looking at the names after it.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from apis import constants as k
from apis.bounded import BoundedError, decode
from apis.core import (
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    Taint,
    Toleration,
    pod_requests,
)
from apis.meta import Model
from apis.resources import ResourceList
from apis.scheduling import Reservation
from controller.reservations import AnnotationError
from controller.reservations.owners import Owners, owners_of
from controller.reservations.reserve_pod import reservation_requests

__all__ = [
    "AllocatedReservation",
    "AnnotationError",
    "ExactMatchSpec",
    "MatchOutcome",
    "MatchResult",
    "NodeMatch",
    "PodReservationView",
    "ReservationAffinity",
    "ReservationAffinitySelector",
    "RestrictedOptions",
    "allocated_annotation",
    "diagnosis_reasons",
    "exact_match",
    "is_matchable",
    "match_affinity",
    "match_node",
    "match_reservation",
    "parse_allocated",
    "parse_exact_match",
    "parse_reservation_affinity",
    "parse_restricted_options",
    "pod_view",
    "terms_match",
    "tolerates",
]

#: The taint an unschedulable or terminating reservation is treated as carrying.
UNSCHEDULABLE_TAINT = Taint(key=k.TAINT_NODE_UNSCHEDULABLE, effect="NoSchedule")
_EVALUATED_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class ReservationAffinitySelector(Model):
    #: ORed terms, each with the shape of a NodeSelectorTerm, over the reservation's labels.
    reservation_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class ReservationAffinity(Model):
    """The ``reservation-affinity`` annotation of a pod."""

    #: The one reservation the pod must use (no other check but exact-match then).
    name: str = ""
    required_during_scheduling_ignored_during_execution: ReservationAffinitySelector | None = None
    #: Labels the reservation (overlaid on its node's) must carry.
    reservation_selector: dict[str, str] = {}
    #: Tolerations of reservation taints (and of ``unschedulable``).
    tolerations: tuple[Toleration, ...] = ()


class AllocatedReservation(Model):
    """The ``reservation-allocated`` annotation: the reservation a pod consumes."""

    name: str = ""
    uid: str = ""


class ExactMatchSpec(Model):
    resource_names: tuple[str, ...] = ()


class RestrictedOptions(Model):
    resources: tuple[str, ...] = ()


_T = TypeVar("_T")


def _decode(key: str, text: str, target: type[_T]) -> _T:
    if not text.strip():
        return msgspec.convert({}, target)
    try:
        return decode(text, target, "")
    except BoundedError as err:
        raise AnnotationError(key, str(err)) from None


def parse_reservation_affinity(pod: Pod) -> ReservationAffinity | None:
    """The pod's reservation affinity; None without the annotation, empty for ``""``."""
    text = pod.metadata.annotations.get(k.ANNOTATION_RESERVATION_AFFINITY)
    if text is None:
        return None
    return _decode(k.ANNOTATION_RESERVATION_AFFINITY, text, ReservationAffinity)


def parse_allocated(pod: Pod) -> AllocatedReservation | None:
    """The reservation ``pod`` consumes (its ``reservation-allocated`` annotation), if any."""
    text = pod.metadata.annotations.get(k.ANNOTATION_RESERVATION_ALLOCATED)
    if not text:
        return None
    return _decode(k.ANNOTATION_RESERVATION_ALLOCATED, text, AllocatedReservation)


def allocated_annotation(reservation: Reservation) -> dict[str, str]:
    """The annotation PreBind sets on a pod that consumes ``reservation``."""
    meta = reservation.metadata
    value = msgspec.json.encode(AllocatedReservation(name=meta.name, uid=meta.uid)).decode()
    return {k.ANNOTATION_RESERVATION_ALLOCATED: value}


def parse_exact_match(pod: Pod) -> tuple[str, ...]:
    """Resource names the pod's requests must equal the reservation's allocatable for."""
    text = pod.metadata.annotations.get(k.ANNOTATION_EXACT_MATCH_RESERVATION)
    if text is None:
        return ()
    return _decode(k.ANNOTATION_EXACT_MATCH_RESERVATION, text, ExactMatchSpec).resource_names


def parse_restricted_options(reservation: Reservation) -> tuple[str, ...]:
    """The resource names a Restricted reservation restricts (empty: all of its names)."""
    text = reservation.metadata.annotations.get(k.ANNOTATION_RESERVATION_RESTRICTED_OPTIONS)
    if text is None:
        return ()
    return _decode(k.ANNOTATION_RESERVATION_RESTRICTED_OPTIONS, text, RestrictedOptions).resources


def exact_match(
    requests: Mapping[str, int], allocatable: Mapping[str, int], names: Sequence[str]
) -> bool:
    """Each listed resource requested exactly as reserved (with the early "match" of §9.6)."""
    for name in names:
        want, have = requests.get(name), allocatable.get(name)
        if want is None and have is None:
            return True
        if want != have:
            return False
    return True


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    """Kubernetes' rule: some toleration matches the taint's key, value and effect."""
    for tol in tolerations:
        if tol.effect and tol.effect != taint.effect:
            continue
        if tol.key and tol.key != taint.key:
            continue
        if tol.operator == "Exists":
            return True
        if tol.operator in ("", "Equal") and tol.value == taint.value:
            return True
    return False


def _requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def terms_match(
    terms: Sequence[NodeSelectorTerm], labels: Mapping[str, str], name: str = ""
) -> bool:
    """ORed node-selector terms over ``labels`` (``matchFields`` over ``metadata.name``).

    A term with no requirement matches nothing, as in Kubernetes.
    """
    for term in terms:
        if not term.match_expressions and not term.match_fields:
            continue
        if all(_requirement_matches(r, labels.get(r.key)) for r in term.match_expressions) and all(
            _requirement_matches(r, name if r.key == "metadata.name" else None)
            for r in term.match_fields
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class PodReservationView:
    """What matching needs of a pod, parsed once per scheduling attempt."""

    pod: Pod
    requests: ResourceList
    affinity: ReservationAffinity | None
    exact_match: tuple[str, ...]
    #: Label ``reservation-ignored=true``: reservations are free capacity, never owned.
    ignored: bool

    @property
    def requires_reservation(self) -> bool:
        return self.affinity is not None


def pod_view(pod: Pod, requests: ResourceList | None = None) -> PodReservationView:
    """Parse the pod's reservation annotations (raises :class:`AnnotationError`)."""
    return PodReservationView(
        pod=pod,
        requests=pod_requests(pod) if requests is None else requests,
        affinity=parse_reservation_affinity(pod),
        exact_match=parse_exact_match(pod),
        ignored=pod.metadata.labels.get(k.LABEL_RESERVATION_IGNORED) == "true",
    )


class MatchOutcome(enum.StrEnum):
    """The decision for one reservation, with the diagnosis counter it feeds."""

    IGNORED = "ignored"
    MATCHED = "matched"
    OWNER_UNMATCHED = "ownerUnmatched"
    NAME_UNMATCHED = "nameUnmatched"
    UNSCHEDULABLE = "unschedulable"
    TAINT_UNTOLERATED = "taintUntolerated"
    AFFINITY_UNMATCHED = "affinityUnmatched"
    NOT_EXACT_MATCHED = "notExactMatched"

    @property
    def usable(self) -> bool:
        """The pod may take resources from the reservation (or sees it as free)."""
        return self in (MatchOutcome.IGNORED, MatchOutcome.MATCHED)


@dataclass(frozen=True, slots=True)
class MatchResult:
    outcome: MatchOutcome
    #: Diagnosis text (empty when matched); for a taint, which one.
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.outcome.usable


_MATCHED = MatchResult(MatchOutcome.MATCHED)
_IGNORED = MatchResult(MatchOutcome.IGNORED)


def _taint_text(taint: Taint) -> str:
    return f"{{{taint.key}: {taint.value}}}"


def is_matchable(reservation: Reservation, owners: Owners | None = None) -> bool:
    """Available on a node, owners usable, and not an allocate-once one already consumed."""
    status = reservation.status
    if status.phase != "Available" or not status.node_name:
        return False
    if (owners or owners_of(reservation)).error:
        return False
    return not (reservation.spec.effective_allocate_once and status.current_owners)


def match_reservation(
    view: PodReservationView,
    reservation: Reservation,
    node_labels: Mapping[str, str],
    *,
    owners: Owners | None = None,
    omit_node_labels: bool = False,
) -> MatchResult:
    """Whether the pod of ``view`` may use ``reservation`` (assumed matchable), and why not."""
    if view.ignored:
        return _IGNORED
    if not (owners or owners_of(reservation)).matches(view.pod):
        return MatchResult(MatchOutcome.OWNER_UNMATCHED, "owner unmatched")
    return match_affinity(view, reservation, node_labels, omit_node_labels=omit_node_labels)


def match_affinity(
    view: PodReservationView,
    reservation: Reservation,
    node_labels: Mapping[str, str],
    *,
    check_unschedulable: bool = True,
    omit_node_labels: bool = False,
) -> MatchResult:
    """The pod's own reservation affinity against ``reservation`` (owners not consulted).

    Pre-allocation candidates are checked with ``check_unschedulable=False``: their
    reservation is the one being scheduled, not one already on the node.
    """
    affinity = view.affinity
    allocatable = reservation_requests(reservation)
    if affinity is not None and affinity.name:
        if affinity.name != reservation.metadata.name:
            return MatchResult(MatchOutcome.NAME_UNMATCHED, "name unmatched")
        if not exact_match(view.requests, allocatable, view.exact_match):
            return MatchResult(MatchOutcome.NOT_EXACT_MATCHED, "not exact matched")
        return _MATCHED
    tolerations = affinity.tolerations if affinity is not None else ()
    spec = reservation.spec
    terminating = reservation.metadata.deletion_timestamp is not None
    if (
        check_unschedulable
        and (spec.unschedulable or terminating)
        and not tolerates(tolerations, UNSCHEDULABLE_TAINT)
    ):
        return MatchResult(MatchOutcome.UNSCHEDULABLE, "is unschedulable")
    for taint in spec.taints:
        if taint.effect in _EVALUATED_EFFECTS and not tolerates(tolerations, taint):
            return MatchResult(
                MatchOutcome.TAINT_UNTOLERATED, f"had untolerated taint {_taint_text(taint)}"
            )
    if affinity is not None:
        labels = dict(reservation.metadata.labels)
        if not omit_node_labels:
            labels = {**node_labels, **labels}
        selector_ok = all(labels.get(key) == v for key, v in affinity.reservation_selector.items())
        required = affinity.required_during_scheduling_ignored_during_execution
        if not selector_ok or (
            required is not None
            and not terms_match(
                required.reservation_selector_terms, labels, reservation.metadata.name
            )
        ):
            return MatchResult(MatchOutcome.AFFINITY_UNMATCHED, "didn't match affinity rules")
    if not exact_match(view.requests, allocatable, view.exact_match):
        return MatchResult(MatchOutcome.NOT_EXACT_MATCHED, "not exact matched")
    return _MATCHED


@dataclass(frozen=True, slots=True)
class NodeMatch:
    """The reservations of one node as one pod sees them."""

    #: Reservations the pod may use, or sees as free capacity (``reservation-ignored``).
    matched: tuple[Reservation, ...] = ()
    #: Reservations the pod may not use that already have owners (their double count goes).
    unmatched: tuple[Reservation, ...] = ()
    #: The decision for each matchable reservation, in the order given.
    results: tuple[MatchResult, ...] = ()


def _has_owners(reservation: Reservation) -> bool:
    status = reservation.status
    return bool(status.current_owners) or any(v for v in status.allocated.values())


def match_node(
    view: PodReservationView,
    reservations: Sequence[Reservation],
    node_labels: Mapping[str, str],
    *,
    owners: Mapping[str, Owners] | None = None,
    omit_node_labels: bool = False,
) -> NodeMatch:
    """Every matchable reservation of a node decided for one pod (§1.5)."""
    matched: list[Reservation] = []
    unmatched: list[Reservation] = []
    results: list[MatchResult] = []
    for r in reservations:
        compiled = (owners or {}).get(r.metadata.name) or owners_of(r)
        if not is_matchable(r, compiled):
            continue
        result = match_reservation(
            view, r, node_labels, owners=compiled, omit_node_labels=omit_node_labels
        )
        results.append(result)
        if result.usable:
            matched.append(r)
        elif _has_owners(r):
            unmatched.append(r)
    return NodeMatch(tuple(matched), tuple(unmatched), tuple(results))


_DIAGNOSED = (
    MatchOutcome.AFFINITY_UNMATCHED,
    MatchOutcome.UNSCHEDULABLE,
    MatchOutcome.TAINT_UNTOLERATED,
)


def diagnosis_reasons(results: Iterable[MatchResult]) -> tuple[str, ...]:
    """The PostFilter summary of many decisions: ``N Reservation(s) <reason>`` lines.

    The first line counts the reservations whose owners matched; then one line per reason of
    an affinity mismatch, unschedulable reservation and untolerated taint, in that order.
    """
    owner_matched = 0
    counts: Counter[tuple[MatchOutcome, str]] = Counter()
    for result in results:
        if result.outcome in (MatchOutcome.OWNER_UNMATCHED, MatchOutcome.IGNORED):
            continue
        owner_matched += 1
        if result.outcome in _DIAGNOSED:
            counts[(result.outcome, result.reason)] += 1
    if not owner_matched:
        return ()
    lines = [f"{owner_matched} Reservation(s) matched owner total"]
    for outcome in _DIAGNOSED:
        lines.extend(
            f"{n} Reservation(s) {reason}"
            for (o, reason), n in sorted(counts.items())
            if o is outcome
        )
    return tuple(lines)
