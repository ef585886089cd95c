"""Resource accounting of pods in reservations: node fit, allocate-policy fit, scoring and
nomination (controller-spec §1.6-1.7), as pure functions over resource lists.

Vocabulary (all amounts in canonical units):

- ``requested`` of a node: what every pod on it requests, reserve pods of Available
  reservations included; their owners are pods too, so owners are counted twice.
- :func:`restore` for one pod being scheduled: ``pod_requested`` lowers ``requested`` by the
  ``allocated`` of each *unmatched* reservation (removing the double count); the generic
  plugins see ``pod_requested`` minus the allocatable of each *matched* reservation (their
  reserve pods removed); ``r_allocated`` is the sum of the matched reservations' ``allocated``.
- ``remaining`` of a reservation R = ``allocatable - allocated - reserved``, floored at 0
  (``reserved`` from R's ``node.koordinator.sh/reservation`` annotation).

Node fit with R, per resource d the pod requests (cpu, memory, ephemeral-storage and every
scalar; zero requests and ignored scalars skipped)::

    request_d <= allocatable_d - (pod_requested_d - remaining(R)_d - r_allocated_d - preemptible_d)

and ``pods - matched + 1 <= allocatable pods``. Without R the same with ``remaining = 0``.
Failures read ``Insufficient <res> by node``.

Policy fit: ``Aligned`` and ``""`` need node fit only (the pod may take part from R and the
rest from the node). ``Restricted`` also needs, for each restricted name r the pod requests,
``request_r <= allocatable_r - reserved_r - max(0, allocated_r - preemptible_r)`` and, when R
reserves ``pods``, ``allocated_pods + 1 <= pods``; failures read ``Reservation(s) Insufficient
<res>`` (with ``, requested: X, used: Y, capacity: Z`` when the pod named R).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from apis import bounded
from apis import constants as k
from apis.meta import Model
from apis.quantity import QuantityError
from apis.resources import ResourceList
from apis.scheduling import Reservation
from controller.reservations import AnnotationError
from controller.reservations.affinity import parse_restricted_options
from controller.reservations.reserve_pod import reservation_requests

__all__ = [
    "ALIGNED",
    "DEFAULT_POLICY",
    "MSG_ALLOCATE_ONCE_USED",
    "MSG_NO_AFFINITY_MATCH",
    "MSG_NO_RESERVATION_FITS",
    "MSG_POLICY_CONFLICT",
    "MSG_PREEMPTION_FAILED",
    "RESTRICTED",
    "FilterResult",
    "NodeUsage",
    "NominationCandidate",
    "ReservationState",
    "Restored",
    "assume",
    "filter_with_reservations",
    "fits_node",
    "fits_policy",
    "masked_requests",
    "node_reserved",
    "nominate",
    "policy_conflict",
    "preferred_node",
    "reservation_order",
    "restore",
    "score_reservation",
]

ALIGNED: Final = "Aligned"
RESTRICTED: Final = "Restricted"
#: The deprecated default policy: like Aligned, but alone on its node.
DEFAULT_POLICY: Final = ""

# Messages of the Reservation plugin (§10).
MSG_NO_AFFINITY_MATCH: Final = "node(s) no reservations match reservation affinity"
MSG_POLICY_CONFLICT: Final = "node(s) reservation allocate policy conflict"
MSG_PREEMPTION_FAILED: Final = "node(s) preemption failed due to insufficient resources"
MSG_NO_RESERVATION_FITS: Final = "node(s) no reservation(s) to meet the requirements"
MSG_ALLOCATE_ONCE_USED: Final = (
    "reservation has allocateOnce enabled and has already been allocated"
)
_RESERVATION_PREFIX: Final = "Reservation(s) "
_PODS: Final = "pods"
_NATIVE: Final = ("cpu", "memory", "ephemeral-storage")
_EMPTY = ResourceList()


class _NodeReservationAnnotation(Model):
    resources: dict[str, Any] = {}
    reserved_cpus: str = msgspec.field(default="", name="reservedCPUs")
    apply_policy: str = ""


def node_reserved(reservation: Reservation) -> ResourceList:
    """The resources of R's ``node.koordinator.sh/reservation`` annotation (kept back)."""
    key = k.ANNOTATION_NODE_RESERVATION
    text = reservation.metadata.annotations.get(key)
    if not text:
        return _EMPTY
    try:
        raw = bounded.decode(text, _NodeReservationAnnotation, key, depth=bounded.MAX_DEPTH)
        return ResourceList.parse({name: str(v) for name, v in raw.resources.items()})
    except bounded.BoundedError as err:
        raise AnnotationError(key, err.detail) from None
    except QuantityError as err:
        raise AnnotationError(key, str(err)) from None


def reservation_order(reservation: Reservation) -> int:
    """The ``reservation-order`` label when a positive integer, else 0 (no order)."""
    try:
        order = int(reservation.metadata.labels.get(k.LABEL_RESERVATION_ORDER, "0"), 10)
    except ValueError:
        return 0
    return max(order, 0)


def masked_requests(request: Mapping[str, int], allocatable: Mapping[str, int]) -> ResourceList:
    """The part of ``request`` a reservation with ``allocatable`` accounts for."""
    return ResourceList({name: v for name, v in request.items() if name in allocatable})


@dataclass(frozen=True, slots=True)
class ReservationState:
    """What accounting needs of one reservation on a node."""

    name: str
    allocatable: ResourceList
    allocated: ResourceList = _EMPTY
    #: Kept back from the pods (``node.koordinator.sh/reservation`` on the Reservation).
    reserved: ResourceList = _EMPTY
    #: Requests of R's owners that preemption would free.
    preemptible: ResourceList = _EMPTY
    allocated_pods: int = 0
    policy: str = DEFAULT_POLICY
    #: The ``reservation-restricted-options`` resources (empty: every name of R).
    restricted_options: tuple[str, ...] = ()
    allocate_once: bool = True
    order: int = 0

    @classmethod
    def of(cls, reservation: Reservation) -> ReservationState:
        """From the object (status ``allocated`` and ``currentOwners`` as the current use)."""
        status = reservation.status
        return cls(
            name=reservation.metadata.name,
            allocatable=reservation_requests(reservation),
            allocated=status.allocated,
            reserved=node_reserved(reservation),
            allocated_pods=len(status.current_owners),
            policy=reservation.spec.allocate_policy,
            restricted_options=parse_restricted_options(reservation),
            allocate_once=reservation.spec.effective_allocate_once,
            order=reservation_order(reservation),
        )

    @property
    def remaining(self) -> ResourceList:
        """``allocatable - allocated - reserved``, floored at 0."""
        return (
            (self.allocatable - self.allocated - self.reserved).mask(self.allocatable).clamp_min()
        )

    @property
    def restricted_names(self) -> tuple[str, ...]:
        names = tuple(self.allocatable)
        chosen = tuple(n for n in self.restricted_options if n in self.allocatable)
        return chosen or names

    @property
    def used_once(self) -> bool:
        """An allocate-once reservation that already has an owner."""
        return self.allocate_once and self.allocated_pods > 0


def assume(state: ReservationState, request: Mapping[str, int]) -> ReservationState:
    """R after one more owner requesting ``request`` (Reserve)."""
    return dataclasses.replace(
        state,
        allocated=state.allocated + masked_requests(request, state.allocatable),
        allocated_pods=state.allocated_pods + 1,
    )


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node as the scheduler's snapshot holds it, before the reservation restore."""

    allocatable: ResourceList
    #: Requests of every pod on the node, Available reservations' reserve pods included.
    requested: ResourceList
    #: Pods on the node, reserve pods included.
    pods: int = 0


@dataclass(frozen=True, slots=True)
class Restored:
    """The node for one pod after the restore (§1.6)."""

    #: ``requested`` without the double count of unmatched reservations' owners.
    pod_requested: ResourceList
    #: What the generic plugins see: matched reserve pods removed.
    requested: ResourceList
    #: Sum of the matched reservations' ``allocated``.
    r_allocated: ResourceList
    #: Pods left in the node view (matched reserve pods removed).
    pods: int
    matched: int


def restore(
    node: NodeUsage,
    matched: Sequence[ReservationState],
    unmatched: Sequence[ReservationState] = (),
) -> Restored:
    """The node as seen by a pod that matched (or ignores) ``matched``."""
    pod_requested = node.requested - ResourceList.total(r.allocated for r in unmatched)
    return Restored(
        pod_requested=pod_requested,
        requested=pod_requested - ResourceList.total(r.allocatable for r in matched),
        r_allocated=ResourceList.total(r.allocated for r in matched),
        pods=node.pods - len(matched),
        matched=len(matched),
    )


def _checked(request: Mapping[str, int], ignores: Callable[[str], bool]) -> Iterable[str]:
    for name, amount in request.items():
        if amount <= 0 or name == _PODS:
            continue
        if name not in _NATIVE and ignores(name):
            continue
        yield name


def _never(_: str) -> bool:
    return False


def fits_node(
    request: Mapping[str, int],
    allocatable: Mapping[str, int],
    restored: Restored,
    reservation: ReservationState | None = None,
    *,
    preemptible: Mapping[str, int] = _EMPTY,
    ignores: Callable[[str], bool] = _never,
) -> tuple[str, ...]:
    """Reasons the pod does not fit the node when it uses ``reservation`` (None: no R)."""
    reasons: list[str] = []
    allowed = allocatable.get(_PODS)
    if allowed is not None and restored.pods - restored.matched + 1 > allowed:
        reasons.append("Too many pods by node")
    remaining = reservation.remaining if reservation is not None else _EMPTY
    used = restored.pod_requested
    for name in _checked(request, ignores):
        free = allocatable.get(name, 0) - (
            used.get(name, 0)
            - remaining.get(name, 0)
            - restored.r_allocated.get(name, 0)
            - preemptible.get(name, 0)
        )
        if request[name] > free:
            reasons.append(f"Insufficient {name} by node")
    return tuple(reasons)


def fits_policy(
    request: Mapping[str, int], reservation: ReservationState, *, named: bool = False
) -> tuple[str, ...]:
    """Reasons the pod does not fit inside ``reservation`` under its allocate policy."""
    if reservation.policy != RESTRICTED:
        return ()
    r = reservation
    reasons: list[str] = []
    for name in r.restricted_names:
        if name == _PODS:
            continue
        want = request.get(name, 0)
        if want <= 0:
            continue
        capacity = r.allocatable.get(name, 0) - r.reserved.get(name, 0)
        used = max(0, r.allocated.get(name, 0) - r.preemptible.get(name, 0))
        if want > capacity - used:
            detail = f", requested: {want}, used: {used}, capacity: {capacity}" if named else ""
            reasons.append(f"{_RESERVATION_PREFIX}Insufficient {name}{detail}")
    pods = r.allocatable.get(_PODS)
    if pods is not None and r.allocated_pods + 1 > pods:
        detail = f", requested: 1, used: {r.allocated_pods}, capacity: {pods}" if named else ""
        reasons.append(f"{_RESERVATION_PREFIX}Too many pods{detail}")
    return tuple(reasons)


def policy_conflict(policy: str, others: Iterable[str]) -> bool:
    """The deprecated ``""`` policy shares no node with the others, and vice versa."""
    return any((policy == DEFAULT_POLICY) != (other == DEFAULT_POLICY) for other in others)


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The Reservation filter's answer for one pod on one node."""

    fits: bool
    #: Reservations the pod fits in (empty: none, or it fits on node capacity alone).
    fitting: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


def filter_with_reservations(
    request: Mapping[str, int],
    allocatable: Mapping[str, int],
    restored: Restored,
    matched: Sequence[ReservationState],
    *,
    has_affinity: bool = False,
    named: str = "",
    preemptible: Mapping[str, int] = _EMPTY,
    ignores: Callable[[str], bool] = _never,
) -> FilterResult:
    """Try each matched reservation; without affinity fall back to node capacity alone.

    Reservations sharing no resource name with the pod are skipped unless the pod has
    reservation affinity; an affinity naming a reservation tries that one only.
    """
    fitting: list[str] = []
    reasons: list[str] = []
    for r in matched:
        if named and r.name != named:
            continue
        if not has_affinity and not any(n in r.allocatable for n, v in request.items() if v):
            continue
        why = fits_node(request, allocatable, restored, r, preemptible=preemptible, ignores=ignores)
        why += fits_policy(request, r, named=bool(named))
        if why:
            reasons.extend(w for w in why if w not in reasons)
        else:
            fitting.append(r.name)
    if fitting:
        return FilterResult(True, tuple(fitting))
    if has_affinity:
        return FilterResult(False, (), tuple(reasons) or (MSG_NO_RESERVATION_FITS,))
    why = fits_node(request, allocatable, restored, None, preemptible=preemptible, ignores=ignores)
    return FilterResult(not why, (), why)


def score_reservation(request: Mapping[str, int], reservation: ReservationState) -> int:
    """MostAllocated over R's non-zero allocatable: tighter fits score higher (0-100)."""
    names = [n for n, v in reservation.allocatable.items() if v > 0]
    if not names:
        return 0
    total = 0
    for name in names:
        capacity = reservation.allocatable[name]
        used = request.get(name, 0) + reservation.allocated.get(name, 0)
        total += used * 100 // capacity if used <= capacity else 0
    return total // len(names)


@dataclass(frozen=True, slots=True)
class NominationCandidate:
    """A reservation the pod fits in on the chosen node."""

    name: str
    order: int = 0
    score: int = 0
    used_once: bool = False


def nominate(
    candidates: Sequence[NominationCandidate], *, has_affinity: bool = False, previous: str = ""
) -> NominationCandidate | None:
    """The reservation the pod goes into (§1.7), or None.

    One candidate and reservation affinity: that one; else the one nominated before; else,
    of those not already used by their one allowed owner, the only one, else the smallest
    positive ``reservation-order``, else the highest score (the first on a tie).
    """
    if len(candidates) == 1 and has_affinity:
        return candidates[0]
    if previous:
        for c in candidates:
            if c.name == previous:
                return c
    usable = [c for c in candidates if not c.used_once]
    if not usable:
        return None
    if len(usable) == 1:
        return usable[0]
    ordered = [c for c in usable if c.order > 0]
    if ordered:
        return min(ordered, key=lambda c: c.order)
    best = usable[0]
    for c in usable[1:]:
        if c.score > best.score:
            best = c
    return best


def preferred_node(matched_orders: Mapping[str, Iterable[int]]) -> str | None:
    """The node holding the globally smallest positive ``reservation-order`` (PreScore)."""
    best: tuple[int, str] | None = None
    for node, orders in matched_orders.items():
        for order in orders:
            if order > 0 and (best is None or order < best[0]):
                best = (order, node)
    return None if best is None else best[1]
