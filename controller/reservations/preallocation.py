"""Pre-allocation: placing a reservation over pods already running (controller-spec §1.8).

A reservation with ``spec.preAllocation`` may be placed on a node by taking over the
resources of *candidate* pods there: once bound, each selected pod gets the
``reservation-allocated`` annotation and becomes an owner.

Preconditions (:func:`check_preconditions`): ``allocatePolicy: Restricted``, owners that parse,
and, for ``preAllocationPolicy.mode: Cluster``, ``preAllocationConfig.enableClusterMode``.

Candidates (:func:`find_candidates`), per node:

- **Default mode**: pods matching the label selector of an owner that has one (owners with
  only ``object`` or ``controller`` find nothing, §9 item 4), assigned to a node, not consuming
  a reservation already, not reserve pods, and matching the owners as a whole; each once.
- **Cluster mode**: assigned, not finished pods labelled ``<clusterLabelKey>=true``, highest
  ``<clusterPriorityAnnotationKey>`` first (missing or invalid: 0), then by uid. Owners are
  not consulted and pods consuming another reservation are not excluded (§9 item 3).
- Either way a candidate's own reservation affinity must accept the reservation.

Selection on one node (:func:`select`), ``node.requested`` being what the node's pods request
with the candidates still counted:

- with ``preferNoPreAllocatedPods`` and not required: if the reservation fits the node as it
  is, no pod is taken;
- single: some candidate c (sharing a resource name with the reservation) must let the
  reservation fit the node once ``req(c)`` is freed, and fit inside the reservation itself;
  then every candidate of the node is kept as selected;
- multiple (``enableMultiple``): candidates in order (Default: best reservation score first;
  Cluster: the candidate order) are accumulated while their sum fits inside the reservation,
  until the reservation fits the node with the sum freed;
- otherwise a required reservation fails with the reasons, or ``node(s) no pod(s) to meet the
  pre-allocation requirements``; one not required falls back to the node's free capacity.

Nomination (single mode, :func:`nominate`) picks the best-scoring candidate (§9 item 5: not the
priority annotation), the first on a tie; :func:`node_score` scores the node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from apis import constants as k
from apis.core import Pod, pod_requests
from apis.labels import Selector
from apis.resources import ResourceList
from apis.scheduling import Reservation
from controller.reservations import AnnotationError
from controller.reservations.accounting import (
    RESTRICTED,
    ReservationState,
    Restored,
    fits_node,
    fits_policy,
    score_reservation,
)
from controller.reservations.affinity import match_affinity, parse_restricted_options, pod_view
from controller.reservations.args import PreAllocationConfig, ReservationArgs
from controller.reservations.owners import Owners, owners_of
from controller.reservations.reserve_pod import is_reserve_pod, reservation_requests

__all__ = [
    "MODE_CLUSTER",
    "MODE_DEFAULT",
    "MSG_CLUSTER_MODE_DISABLED",
    "MSG_NO_CANDIDATE",
    "MSG_NO_POD_FITS",
    "MSG_UNSUPPORTED",
    "Candidate",
    "Selection",
    "candidate_priority",
    "check_preconditions",
    "cluster_mode_candidates",
    "default_mode_candidates",
    "find_candidates",
    "is_required",
    "mode_of",
    "node_score",
    "nominate",
    "select",
]

MODE_DEFAULT: Final = "Default"
MODE_CLUSTER: Final = "Cluster"

MSG_UNSUPPORTED: Final = "node(s) reservation pre allocation is unsupported with current attributes"
MSG_CLUSTER_MODE_DISABLED: Final = (
    "reservation requires cluster mode pre-allocation which is disabled"
)
MSG_NO_CANDIDATE: Final = "node(s) no pod match reservation with pre allocation required"
MSG_NO_POD_FITS: Final = "node(s) no pod(s) to meet the pre-allocation requirements"


def mode_of(reservation: Reservation) -> str:
    policy = reservation.spec.pre_allocation_policy
    return (policy.mode if policy is not None else "") or MODE_DEFAULT


def _multiple(reservation: Reservation) -> bool:
    policy = reservation.spec.pre_allocation_policy
    return policy is not None and policy.enable_multiple


def is_required(reservation: Reservation) -> bool:
    """Label ``pre-allocation-required=true``: only nodes where a pod is taken over."""
    return reservation.metadata.labels.get(k.LABEL_PRE_ALLOCATION_REQUIRED) == "true"


def check_preconditions(reservation: Reservation, args: ReservationArgs) -> str:
    """Why the reservation cannot be pre-allocated (empty when it can)."""
    if reservation.spec.allocate_policy != RESTRICTED:
        return MSG_UNSUPPORTED
    owners = owners_of(reservation)
    if owners.error:
        return owners.error
    if mode_of(reservation) == MODE_CLUSTER and not args.pre_allocation_config.enable_cluster_mode:
        return MSG_CLUSTER_MODE_DISABLED
    return ""


def candidate_priority(pod: Pod, key: str = k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY) -> int:
    """The Cluster-mode priority annotation as an integer; 0 when missing or invalid."""
    try:
        return int(pod.metadata.annotations.get(key, "0"), 10)
    except ValueError:
        return 0


def default_mode_candidates(
    reservation: Reservation, pods: Iterable[Pod], owners: Owners | None = None
) -> dict[str, tuple[Pod, ...]]:
    """Default-mode candidates by node (in the order of ``pods``)."""
    owners = owners or owners_of(reservation)
    selectors: list[Selector] = [m.selector for m in owners.matchers if m.selector is not None]
    if owners.error or not selectors:
        return {}
    seen: set[str] = set()
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        meta = pod.metadata
        if (
            not pod.spec.node_name
            or meta.uid in seen
            or k.ANNOTATION_RESERVATION_ALLOCATED in meta.annotations
            or is_reserve_pod(pod)
            or not any(s.matches(meta.labels) for s in selectors)
            or not owners.matches(pod)
        ):
            continue
        seen.add(meta.uid)
        by_node.setdefault(pod.spec.node_name, []).append(pod)
    return {node: tuple(found) for node, found in by_node.items()}


def cluster_mode_candidates(
    pods: Iterable[Pod], config: PreAllocationConfig | None = None
) -> dict[str, tuple[Pod, ...]]:
    """Cluster-mode candidates by node: priority descending, then uid."""
    config = config or PreAllocationConfig()
    label, priority = config.effective_label_key, config.effective_priority_key
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.spec.node_name and not pod.is_terminated and pod.labels.get(label) == "true":
            by_node.setdefault(pod.spec.node_name, []).append(pod)
    return {
        node: tuple(sorted(found, key=lambda p: (-candidate_priority(p, priority), p.metadata.uid)))
        for node, found in by_node.items()
    }


def _accepts(pod: Pod, reservation: Reservation, node_labels: Mapping[str, str]) -> bool:
    try:
        view = pod_view(pod)
    except AnnotationError:
        return False
    return match_affinity(view, reservation, node_labels, check_unschedulable=False).usable


def find_candidates(
    reservation: Reservation,
    pods: Iterable[Pod],
    node_labels: Mapping[str, Mapping[str, str]],
    args: ReservationArgs | None = None,
) -> dict[str, tuple[Pod, ...]]:
    """Candidates by node, in the mode of the reservation, that their own affinity allows."""
    args = args or ReservationArgs()
    if mode_of(reservation) == MODE_CLUSTER:
        found = cluster_mode_candidates(pods, args.pre_allocation_config)
    else:
        found = default_mode_candidates(reservation, pods)
    accepted: dict[str, tuple[Pod, ...]] = {}
    for node, candidates in found.items():
        labels = node_labels.get(node, {})
        kept = tuple(p for p in candidates if _accepts(p, reservation, labels))
        if kept:
            accepted[node] = kept
    return accepted


@dataclass(frozen=True, slots=True)
class Candidate:
    pod: Pod
    requests: ResourceList

    @classmethod
    def of(cls, pod: Pod) -> Candidate:
        return cls(pod, pod_requests(pod))


@dataclass(frozen=True, slots=True)
class Selection:
    """The Reservation filter's answer for a pre-allocatable reservation on one node."""

    fits: bool
    #: The pods the reservation takes over (empty: none, it fits on free capacity).
    selected: tuple[Candidate, ...] = ()
    reasons: tuple[str, ...] = ()


def _never(_: str) -> bool:
    return False


def _state(reservation: Reservation) -> ReservationState:
    return ReservationState(
        name=reservation.metadata.name,
        allocatable=reservation_requests(reservation),
        policy=RESTRICTED,
        restricted_options=parse_restricted_options(reservation),
    )


def select(
    reservation: Reservation,
    allocatable: Mapping[str, int],
    requested: ResourceList,
    pods: int,
    candidates: Sequence[Candidate],
    *,
    prefer_no_pre_allocated: bool = False,
    ignores: Callable[[str], bool] = _never,
) -> Selection:
    """Which candidates of a node the reservation takes over, if it fits there at all.

    ``requested`` and ``pods``: the node's requests and pod count, candidates included.
    """
    state = _state(reservation)
    request = state.allocatable
    required = is_required(reservation)
    remaining_pods = pods - len(candidates)

    def node_fit(freed: Mapping[str, int]) -> tuple[str, ...]:
        restored = Restored(
            pod_requested=requested - freed,
            requested=requested - freed,
            r_allocated=ResourceList(),
            pods=remaining_pods,
            matched=0,
        )
        return fits_node(request, allocatable, restored, ignores=ignores)

    if prefer_no_pre_allocated and not required and not node_fit(ResourceList()):
        return Selection(True)
    reasons: list[str] = []
    if _multiple(reservation):
        ordered = list(candidates)
        if mode_of(reservation) != MODE_CLUSTER:
            ordered.sort(key=lambda c: -score_reservation(c.requests, state))
        taken: list[Candidate] = []
        freed = ResourceList()
        for c in ordered:
            trial = freed + c.requests
            why = fits_policy(trial, state)
            if why:
                reasons.extend(w for w in why if w not in reasons)
                continue
            taken.append(c)
            freed = trial
            why = node_fit(freed)
            if not why:
                return Selection(True, tuple(taken))
        reasons.extend(w for w in node_fit(freed) if w not in reasons)
    else:
        for c in candidates:
            if not any(name in request for name, v in c.requests.items() if v):
                continue
            why = node_fit(c.requests) + fits_policy(c.requests, state)
            if not why:
                return Selection(True, tuple(candidates))
            reasons.extend(w for w in why if w not in reasons)
    if required:
        return Selection(False, (), tuple(reasons) or (MSG_NO_POD_FITS,))
    why = node_fit(ResourceList())
    return Selection(not why, (), why)


def nominate(reservation: Reservation, candidates: Sequence[Candidate]) -> Candidate | None:
    """Single mode: the pod the reservation takes over (best score, first on a tie)."""
    if not candidates:
        return None
    if len(candidates) == 1 and is_required(reservation):
        return candidates[0]
    state = _state(reservation)
    best = candidates[0]
    best_score = score_reservation(best.requests, state)
    for c in candidates[1:]:
        score = score_reservation(c.requests, state)
        if score > best_score:
            best, best_score = c, score
    return best


def node_score(reservation: Reservation, selection: Selection) -> int:
    """Score of a node (0-100): single mode scores the nominated pod, multiple mode prefers
    taking over fewer pods."""
    if _multiple(reservation):
        return 100 // (1 + len(selection.selected))
    chosen = nominate(reservation, selection.selected)
    return 0 if chosen is None else score_reservation(chosen.requests, _state(reservation))
