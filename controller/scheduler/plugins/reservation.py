"""Reservation: pods into the reservations they own, reservations onto nodes (controller-spec §1).

The plugin wraps :mod:`controller.reservations`. Each pass :meth:`ReservationPlugin.sync` reads
every Reservation and pod of the snapshot:

- an unassigned, non-terminal reservation is a *reserve pod* to schedule
  (:meth:`~ReservationPlugin.pending_reserve_pods`; the loop queues it);
- an Available one *holds* its node: :meth:`~ReservationPlugin.held_pods` gives, per
  reservation, a pod requesting what is still free inside it (``allocatable`` minus what its
  owners use, floored at 0); the loop accounts it in the node table, so its owners, which are
  pods of their own, are not counted twice and a node's requests do not grow by what owners
  consume inside a reservation;
- for the pod being scheduled the loop hides the held pods of the reservations it matches
  (:meth:`~ReservationPlugin.hidden_for`; for a pre-allocatable reserve pod, its candidate
  pods): the generic plugins then see them as free and this plugin's Filter decides precisely.

Extension points:

- PreFilter: a pod's reservation annotations parsed (a bad one is an Error); the match of every
  node's reservations (§1.5); a pod with reservation affinity is narrowed to the nodes where
  one matched, none: ``node(s) no reservations match reservation affinity``; a pod matching
  none is skipped. A pre-allocatable reserve pod checks its preconditions and finds its
  candidates (§1.8); one with ``pre-allocation-required`` is narrowed to their nodes.
- Filter: node fit and allocate-policy fit per matched reservation, the fallback to the
  node's own capacity without affinity (§1.6); for reserve pods the template's ``nodeName``,
  the ``""`` policy conflict and the pre-allocation selection.
- PostFilter: the summary of the match decisions (``N Reservation(s) matched owner total``,
  ``N Reservation(s) didn't match affinity rules``, ...), appended to the fit error.
- PreScore/Score: the nominated reservation's score per node; the node holding the smallest
  ``reservation-order`` scores 1000; normalized to 100 by the highest.
- Reserve/Unreserve: the pod counts inside its nominated reservation for the rest of the pass.
  A reserve pod's reservation counts as Available on its node for the rest of the pass
  (:func:`~controller.reservations.reserve_pod.assumed_available`): reserve pods come first in
  the queue (their priority is the highest unless the template sets one), so an owner created
  with its reservation, in one apply or one scenario file, is scheduled after the reservation
  is placed and goes into it, as in koord-scheduler, where the reserve pods share the queue.
- PreBind: ``scheduling.koordinator.sh/reservation-allocated`` on the pod.
- Bind: reserve pods only (the loop writes the reservation Available).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, cast

import numpy as np
from numpy.typing import NDArray

from apis import constants as k
from apis.core import Container, Pod, PodSpec, ResourceRequirements, pod_requests
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Reservation
from controller.reservations import AnnotationError, preallocation
from controller.reservations.accounting import (
    DEFAULT_POLICY,
    MSG_ALLOCATE_ONCE_USED,
    MSG_NO_AFFINITY_MATCH,
    MSG_POLICY_CONFLICT,
    NominationCandidate,
    ReservationState,
    Restored,
    filter_with_reservations,
    masked_requests,
    nominate,
    policy_conflict,
    preferred_node,
    score_reservation,
)
from controller.reservations.affinity import (
    NodeMatch,
    PodReservationView,
    allocated_annotation,
    diagnosis_reasons,
    match_node,
    parse_allocated,
    pod_view,
)
from controller.reservations.args import ReservationArgs
from controller.reservations.reserve_pod import (
    MSG_NODE_NAME_MISMATCH,
    assumed_available,
    is_available,
    is_reserve_pod,
    pinned_node,
    reserve_pod,
)
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import PODS, NodeTable
from controller.scheduler.podinfo import PodInfo

if TYPE_CHECKING:
    from controller.store.snapshots import Snapshot

__all__ = ["PLUGIN_NAME", "PREFERRED_SCORE", "ReservationPlugin"]

PLUGIN_NAME: Final = "Reservation"
#: Score of the node holding the smallest ``reservation-order`` (before normalizing).
PREFERRED_SCORE: Final = 1000

_MATCH: Final = "Reservation/match"
_FIT: Final = "Reservation/fit"
_NOMINATED: Final = "Reservation/nominated"
_PREFERRED: Final = "Reservation/preferred"
_PREALLOC: Final = "Reservation/preallocation"
_SELECTED: Final = "Reservation/selected"
_PLACED: Final = "Reservation/placed"

_TERMINAL: Final = frozenset({"Succeeded", "Failed"})
_RESERVATIONS: Final = default_registry().for_type(Reservation)
_PODS: Final = default_registry().for_type(Pod)


@dataclass(frozen=True, slots=True)
class _Match:
    """PreFilter's answer for a normal pod: the matched reservations per row."""

    view: PodReservationView
    rows: Mapping[int, NodeMatch]


@dataclass(frozen=True, slots=True)
class _Fit:
    """Filter's answer: the reservations the pod fits in, per row."""

    fitting: dict[int, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _PreAllocation:
    reservation: Reservation
    candidates: Mapping[int, tuple[preallocation.Candidate, ...]]
    selections: dict[int, preallocation.Selection]


def _resources(table: NodeTable, matrix: NDArray[np.int64], row: int) -> ResourceList:
    """One row of a per-node resource matrix as a resource list (``pods`` left out)."""
    values = matrix[row]
    return ResourceList(
        {table.column_names[c]: int(values[c]) for c in np.flatnonzero(values) if c != PODS}
    )


def _held_pod(reservation: Reservation, remaining: ResourceList) -> Pod:
    meta = reservation.metadata
    return Pod(
        metadata=ObjectMeta(
            name=meta.uid,
            uid=meta.uid,
            namespace=reservation.spec.template.metadata.namespace or "default",
        ),
        spec=PodSpec(
            node_name=reservation.status.node_name,
            containers=(
                Container(
                    name=k.RESERVE_POD_FAKE_CONTAINER,
                    resources=ResourceRequirements(requests=remaining),
                ),
            ),
        ),
    )


class ReservationPlugin:
    """See the module docstring."""

    name = PLUGIN_NAME

    def __init__(self, args: ReservationArgs) -> None:
        self.args = args
        self._reservations: dict[str, Reservation] = {}
        self._by_uid: dict[str, Reservation] = {}
        self._by_node: dict[str, tuple[Reservation, ...]] = {}
        #: reservation uid -> (requests of its owners masked to its allocatable, owners).
        self._usage: dict[str, tuple[ResourceList, int]] = {}
        #: reservation name -> what pods placed this pass added.
        self._assumed: dict[str, tuple[ResourceList, int]] = {}
        self._pods: tuple[Pod, ...] = ()
        self._pending: tuple[Pod, ...] = ()
        self._held: dict[str, Pod] = {}
        #: uid -> the reservation as synced, for those placed (assumed Available) this pass.
        self._placed: dict[str, Reservation] = {}
        self._view: tuple[object, object] | None = None
        self._cache: tuple[str, _Match | None] | None = None

    # -- cluster state -----------------------------------------------------------------------

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        reservations = snapshot.objects(_RESERVATIONS)
        pods = snapshot.objects(_PODS)
        self._assumed = {}
        self._cache = None
        if self._placed:  # the placements of the last pass are in the snapshot or undone
            self._placed = {}
            self._view = None
        if self._view is not None and self._view[0] is reservations and self._view[1] is pods:
            return False
        changed = self._view is None or self._view[0] is not reservations
        self._view = (reservations, pods)
        typed = cast("tuple[Reservation, ...]", reservations)
        self._pods = cast("tuple[Pod, ...]", pods)
        active = [r for r in typed if r.status.phase not in _TERMINAL]
        self._reservations = {r.metadata.name: r for r in active}
        self._by_uid = {r.metadata.uid: r for r in active}
        by_node: dict[str, list[Reservation]] = {}
        for r in active:
            if is_available(r):
                by_node.setdefault(r.status.node_name, []).append(r)
        self._by_node = {node: tuple(rs) for node, rs in by_node.items()}
        usage: dict[str, tuple[ResourceList, int]] = {}
        for pod in self._pods if self._by_node else ():
            if not pod.spec.node_name or pod.is_terminated:
                continue
            try:
                allocated = parse_allocated(pod)
            except AnnotationError:
                continue
            owned = self._by_uid.get(allocated.uid) if allocated is not None else None
            if owned is None or owned.status.node_name != pod.spec.node_name:
                continue
            used, count = usage.get(owned.metadata.uid, (ResourceList(), 0))
            mask = owned.status.allocatable
            usage[owned.metadata.uid] = (used + masked_requests(pod_requests(pod), mask), count + 1)
        self._usage = usage
        self._pending = tuple(
            reserve_pod(r) for r in active if not r.status.node_name and not _invalid(r)
        )
        return changed

    def pending_reserve_pods(self) -> tuple[Pod, ...]:
        """The reserve pods of the reservations waiting for a node."""
        return self._pending

    def reservation_of(self, pod: Pod) -> Reservation | None:
        """The Reservation behind a reserve pod."""
        return self._by_uid.get(pod.metadata.uid) if is_reserve_pod(pod) else None

    def _state(self, reservation: Reservation) -> ReservationState:
        state = ReservationState.of(reservation)
        used, owners = self._usage.get(reservation.metadata.uid, (ResourceList(), 0))
        extra, more = self._assumed.get(reservation.metadata.name, (ResourceList(), 0))
        return dataclasses.replace(state, allocated=used + extra, allocated_pods=owners + more)

    def held_pods(self) -> dict[str, Pod]:
        """uid -> the pod an Available reservation occupies its node with (what is free in it)."""
        held: dict[str, Pod] = {}
        for reservations in self._by_node.values():
            for r in reservations:
                pod = self.held_pod(r.metadata.uid)
                if pod is not None:
                    held[r.metadata.uid] = pod
        return held

    def held_pod(self, uid: str) -> Pod | None:
        r = self._by_uid.get(uid)
        if r is None or not is_available(r):
            return None
        try:
            state = self._state(r)
        except AnnotationError:
            state = ReservationState(name=r.metadata.name, allocatable=r.status.allocatable)
        remaining = (state.allocatable - state.allocated).mask(state.allocatable).clamp_min()
        before = self._held.get(uid)
        if (
            before is not None
            and before.spec.node_name == r.status.node_name
            and pod_requests(before) == remaining
        ):
            return before
        pod = _held_pod(r, remaining)
        self._held[uid] = pod
        return pod

    def hidden_for(self, pod: PodInfo, table: NodeTable) -> tuple[str, ...]:
        """The uids the generic plugins must not count for ``pod``: the held pods of the
        reservations it matches, or the candidates of a pre-allocatable reserve pod."""
        if is_reserve_pod(pod.pod):
            reservation = self.reservation_of(pod.pod)
            if reservation is None or not reservation.spec.pre_allocation:
                return ()
            if preallocation.check_preconditions(reservation, self.args):
                return ()
            found = self._candidates(reservation, table)
            return tuple(c.pod.metadata.uid for cs in found.values() for c in cs)
        match = self._match(pod, table)
        if match is None:
            return ()
        return tuple(r.metadata.uid for m in match.rows.values() for r in m.matched)

    def _match(self, pod: PodInfo, table: NodeTable) -> _Match | None:
        if self._cache is not None and self._cache[0] == pod.uid:
            return self._cache[1]
        if (
            not self._by_node
            and k.ANNOTATION_RESERVATION_AFFINITY not in pod.pod.metadata.annotations
        ):
            self._cache = (pod.uid, None)  # no reservation anywhere, none required
            return None
        view = pod_view(pod.pod, pod.requests)
        rows: dict[int, NodeMatch] = {}
        if self._by_node:
            for node, reservations in self._by_node.items():
                row = table.index.get(node)
                if row is None:
                    continue
                labels = table.nodes[row].metadata.labels
                found = match_node(view, reservations, labels)
                if found.results:
                    rows[row] = found
        match = _Match(view, rows) if rows or view.requires_reservation else None
        self._cache = (pod.uid, match)
        return match

    def _candidates(
        self, reservation: Reservation, table: NodeTable
    ) -> dict[int, tuple[preallocation.Candidate, ...]]:
        labels = {n.metadata.name: n.metadata.labels for n in table.nodes}
        found = preallocation.find_candidates(reservation, self._pods, labels, self.args)
        return {
            table.index[node]: tuple(preallocation.Candidate.of(p) for p in pods)
            for node, pods in found.items()
            if node in table.index
        }

    # -- PreFilter ---------------------------------------------------------------------------

    def pre_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable
    ) -> fw.Status | fw.NodeSubset:
        if is_reserve_pod(pod.pod):
            return self._pre_filter_reserve(state, pod, table)
        try:
            match = self._match(pod, table)
        except AnnotationError as err:
            return fw.Status.of(fw.Code.ERROR, str(err), plugin=self.name)
        if match is None:
            return fw.SKIP
        state.write(_MATCH, match)
        usable = {row for row, m in match.rows.items() if m.matched}
        if match.view.requires_reservation:
            if not usable:
                return fw.Status.of(fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, MSG_NO_AFFINITY_MATCH)
            rows = np.zeros(len(table), dtype=np.bool_)
            rows[list(usable)] = True
            return fw.NodeSubset(rows)
        return fw.SUCCESS if usable else fw.SKIP

    def _pre_filter_reserve(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable
    ) -> fw.Status | fw.NodeSubset:
        reservation = self.reservation_of(pod.pod)
        if reservation is None or not reservation.spec.pre_allocation:
            return fw.SUCCESS
        why = preallocation.check_preconditions(reservation, self.args)
        if why:
            return fw.Status.of(fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, why)
        candidates = self._candidates(reservation, table)
        state.write(_PREALLOC, _PreAllocation(reservation, candidates, {}))
        if preallocation.is_required(reservation):
            if not candidates:
                return fw.Status.of(
                    fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, preallocation.MSG_NO_CANDIDATE
                )
            rows = np.zeros(len(table), dtype=np.bool_)
            rows[list(candidates)] = True
            return fw.NodeSubset(rows)
        return fw.SUCCESS

    # -- Filter ------------------------------------------------------------------------------

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        if is_reserve_pod(pod.pod):
            return self._filter_reserve(state, pod, table, candidates)
        match = state.get(_MATCH, _Match)
        if match is None or match.view.ignored:
            return fw.FilterResult.accept(candidates)
        has_affinity = match.view.requires_reservation
        named = match.view.affinity.name if match.view.affinity is not None else ""
        rejected: dict[str, list[int]] = {}
        fitting: dict[int, tuple[str, ...]] = {}
        for row, found in match.rows.items():
            if not candidates[row] or not found.matched:
                continue
            states = [self._state(r) for r in found.matched]
            # The table holds the owners as pods of their own and, hidden for this pod, not
            # the reservations: their full allocatable on top is Koordinator's podRequested,
            # which counts the owners twice, hence rAllocated (§1.6).
            used = _resources(table, table.requested, row)
            restored = Restored(
                pod_requested=used + ResourceList.total(s.allocatable for s in states),
                requested=used,
                r_allocated=ResourceList.total(s.allocated for s in states),
                pods=int(table.pod_count[row]),
                matched=0,
            )
            result = filter_with_reservations(
                pod.requests,
                table.nodes[row].allocatable,
                restored,
                states,
                has_affinity=has_affinity,
                named=named,
                ignores=self.args.ignores,
            )
            if result.fits:
                fitting[row] = result.fitting
            else:
                for reason in result.reasons:
                    rejected.setdefault(reason, []).append(row)
        state.write(_FIT, _Fit(fitting))
        return _rejecting(candidates, rejected, fw.Code.UNSCHEDULABLE)

    def _filter_reserve(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        reservation = self.reservation_of(pod.pod)
        rejected: dict[str, list[int]] = {}
        pinned = pinned_node(pod.pod)
        policy = reservation.spec.allocate_policy if reservation is not None else DEFAULT_POLICY
        pre = state.get(_PREALLOC, _PreAllocation)
        for found_row in np.flatnonzero(candidates):
            row = int(found_row)
            node = table.names[row]
            if pinned and node != pinned:
                rejected.setdefault(MSG_NODE_NAME_MISMATCH, []).append(row)
                continue
            others = (r.spec.allocate_policy for r in self._by_node.get(node, ()))
            if policy_conflict(policy, others):
                rejected.setdefault(MSG_POLICY_CONFLICT, []).append(row)
                continue
            if pre is not None and row in pre.candidates:
                found = pre.candidates[row]
                hidden = ResourceList.total(c.requests for c in found)
                selection = preallocation.select(
                    pre.reservation,
                    table.nodes[row].allocatable,
                    _resources(table, table.requested, row) + hidden,
                    int(table.pod_count[row]) + len(found),
                    found,
                    prefer_no_pre_allocated=self.args.pre_allocation_config.prefer_no_pre_allocated_pods,
                    ignores=self.args.ignores,
                )
                pre.selections[row] = selection
                if not selection.fits:
                    for reason in selection.reasons:
                        rejected.setdefault(reason, []).append(row)
        return _rejecting(candidates, rejected, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    # -- PostFilter --------------------------------------------------------------------------

    def post_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, diagnosis: fw.Diagnosis
    ) -> fw.PostFilterResult:
        """Why the reservations did not help: ``N Reservation(s) matched owner total, ...``."""
        match = state.get(_MATCH, _Match)
        unschedulable = fw.Status(fw.Code.UNSCHEDULABLE, (), self.name)
        if match is None:
            return fw.PostFilterResult(unschedulable)
        results = [r for found in match.rows.values() for r in found.results]
        return fw.PostFilterResult(unschedulable, message=", ".join(diagnosis_reasons(results)))

    # -- PreScore / Score --------------------------------------------------------------------

    def pre_score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Status:
        if is_reserve_pod(pod.pod):
            pre = state.get(_PREALLOC, _PreAllocation)
            return fw.SUCCESS if pre is not None and pre.selections else fw.SKIP
        match = state.get(_MATCH, _Match)
        if match is None or match.view.ignored:
            return fw.SKIP
        orders = {
            table.names[row]: [self._state(r).order for r in m.matched]
            for row, m in match.rows.items()
        }
        best = preferred_node(orders)
        state.write(_PREFERRED, table.index[best] if best is not None else -1)
        return fw.SUCCESS

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        scores = np.zeros(len(feasible), dtype=np.int64)
        if is_reserve_pod(pod.pod):
            pre = state.get(_PREALLOC, _PreAllocation)
            if pre is not None:
                for i, row in enumerate(feasible):
                    selection = pre.selections.get(int(row))
                    if selection is not None and selection.fits:
                        scores[i] = preallocation.node_score(pre.reservation, selection)
            return scores
        preferred = state.get(_PREFERRED, int)
        for i, row in enumerate(feasible):
            row = int(row)
            if row == preferred:
                scores[i] = PREFERRED_SCORE
                continue
            chosen = self._nominate(state, pod, row)
            if chosen is not None:
                scores[i] = chosen.score
        return scores

    def normalize(self, state: fw.CycleState, pod: PodInfo, scores: fw.Scores) -> fw.Scores:
        return fw.default_normalize(scores)

    def _nominate(self, state: fw.CycleState, pod: PodInfo, row: int) -> NominationCandidate | None:
        match = state.get(_MATCH, _Match)
        fit = state.get(_FIT, _Fit)
        if match is None or fit is None or match.view.ignored:
            return None
        names = fit.fitting.get(row, ())
        found = match.rows.get(row)
        if not names or found is None:
            return None
        candidates = []
        for r in found.matched:
            if r.metadata.name not in names:
                continue
            s = self._state(r)
            candidates.append(
                NominationCandidate(
                    name=s.name,
                    order=s.order,
                    score=score_reservation(pod.requests, s),
                    used_once=s.used_once,
                )
            )
        return nominate(candidates, has_affinity=match.view.requires_reservation)

    # -- Reserve -----------------------------------------------------------------------------

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        if is_reserve_pod(pod.pod):
            pre = state.get(_PREALLOC, _PreAllocation)
            selection = pre.selections.get(row) if pre is not None else None
            if pre is not None and selection is not None and selection.selected:
                if pre.reservation.spec.pre_allocation_policy is not None and (
                    pre.reservation.spec.pre_allocation_policy.enable_multiple
                ):
                    taken = selection.selected
                else:
                    one = preallocation.nominate(pre.reservation, selection.selected)
                    taken = (one,) if one is not None else ()
                state.write(_SELECTED, tuple(c.pod for c in taken))
                self._place(state, pod.pod, table.names[row], tuple(c.pod for c in taken))
            else:
                self._place(state, pod.pod, table.names[row], ())
            return fw.SUCCESS
        chosen = self._nominate(state, pod, row)
        if chosen is None:
            match = state.get(_MATCH, _Match)
            if match is not None and match.view.requires_reservation:
                return fw.Status.of(fw.Code.UNSCHEDULABLE, MSG_ALLOCATE_ONCE_USED)
            return fw.SUCCESS
        reservation = self._reservations[chosen.name]
        used, count = self._assumed.get(chosen.name, (ResourceList(), 0))
        added = masked_requests(pod.requests, reservation.status.allocatable)
        self._assumed[chosen.name] = (used + added, count + 1)
        state.write(_NOMINATED, chosen.name)
        return fw.SUCCESS

    def _place(self, state: fw.CycleState, reserve: Pod, node: str, taken: tuple[Pod, ...]) -> None:
        """Count the reservation of ``reserve`` as Available on ``node`` for the rest of the
        pass, with the pods its pre-allocation takes over inside it."""
        original = self.reservation_of(reserve)
        if original is None:
            return
        try:
            placed = assumed_available(original, node)
        except AnnotationError:
            return  # its Bind reports the annotation
        uid, name = placed.metadata.uid, placed.metadata.name
        self._placed.setdefault(uid, original)
        self._reservations[name] = placed
        self._by_uid[uid] = placed
        self._by_node[node] = (*self._by_node.get(node, ()), placed)
        if taken:
            mask = placed.status.allocatable
            used = ResourceList.total(masked_requests(pod_requests(p), mask) for p in taken)
            self._assumed[name] = (used, len(taken))
        self._cache = None
        state.write(_PLACED, uid)

    def _unplace(self, uid: str) -> None:
        original = self._placed.pop(uid, None)
        placed = self._by_uid.get(uid)
        if original is None or placed is None:
            return
        name, node = placed.metadata.name, placed.status.node_name
        self._reservations[name] = original
        self._by_uid[uid] = original
        rest = tuple(r for r in self._by_node.get(node, ()) if r.metadata.uid != uid)
        if rest:
            self._by_node[node] = rest
        else:
            self._by_node.pop(node, None)
        self._assumed.pop(name, None)
        self._cache = None

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        placed = state.get(_PLACED, str)
        if placed is not None:
            state.delete(_PLACED)
            self._unplace(placed)
            return
        name = state.get(_NOMINATED, str)
        if name is None:
            return
        state.delete(_NOMINATED)
        reservation = self._reservations.get(name)
        used, count = self._assumed.get(name, (ResourceList(), 0))
        if reservation is None or count == 0:
            return
        added = masked_requests(pod.requests, reservation.status.allocatable)
        self._assumed[name] = ((used - added).clamp_min(), count - 1)

    def nominated(self, state: fw.CycleState) -> Reservation | None:
        """The reservation a placed pod went into."""
        name = state.get(_NOMINATED, str)
        return self._reservations.get(name) if name is not None else None

    def pre_allocated(self, state: fw.CycleState) -> tuple[Pod, ...]:
        """The running pods a placed pre-allocatable reservation takes over."""
        return state.get(_SELECTED, tuple) or ()

    # -- PreBind / Bind ----------------------------------------------------------------------

    def pre_bind(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> fw.PreBindResult:
        reservation = self.nominated(state)
        if reservation is None:
            return fw.PreBindResult()
        return fw.PreBindResult(annotations=allocated_annotation(reservation))

    def bind(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        if self.reservation_of(pod.pod) is None:
            return fw.SKIP
        return fw.SUCCESS


def _invalid(reservation: Reservation) -> bool:
    """The validity gate of §1.1: owners and a template (a ttl always has its default)."""
    return not reservation.spec.owners


def _rejecting(
    candidates: fw.Mask, rejected: Mapping[str, Iterable[int]], code: fw.Code
) -> fw.FilterResult:
    if not rejected:
        return fw.FilterResult.accept(candidates)
    passed = candidates.copy()
    rejections = []
    for reason, rows in rejected.items():
        array = np.array(sorted(set(rows)), dtype=np.intp)
        passed[array] = False
        rejections.append(fw.Rejection(reason, code, array))
    return fw.FilterResult(passed, tuple(rejections))
