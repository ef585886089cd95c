"""``Coscheduling``: gangs are placed all or nothing (controller-spec §5.3).

An adapter over :mod:`controller.scheduler.gangs`; the plugin keeps the
:class:`~controller.scheduler.gangs.GangBook`
between passes:

- **sync**: the book is rebuilt from the snapshot's PodGroups and pods (members created, bound)
  whenever either changed, keeping what only the scheduler knows (pods waiting in Permit or
  allowed and binding, groups satisfied once). A gang that gained or lost members releases
  the unschedulable pods (they may be complete now).
- **PreFilter** (Koordinator's PreEnqueue/BeforePreFilter check): a member waits until every
  gang of its group exists, is configured and has ``min-available`` members created
  (``... child pod not collect enough ...``, UnschedulableAndUnresolvable).
- **Permit**: the pod waits assumed on its node until its whole group is valid under its match
  policy; the pod completing the group is allowed at once, the others through
  :meth:`resolve_waiting` in the same pass. A wait that runs out rejects the pod (and, in a
  ``Strict`` gang, the rest of its group).
- **PostFilter** / **Unreserve**: a member that fits nowhere or fails after Reserve rejects
  every waiting pod of a ``Strict`` group; ``NonStrict`` keeps them waiting.
- **PreBind**: the bind-gang annotations (group id, members allowed together).

Its args are :class:`controller.scheduler.gangs.CoschedulingArgs` (``CoschedulingArgs`` on the
wire).

Not done here: the PodGroup status controller, Score/PreScore (the network-topology helpers),
gang-aware preemption (``enablePreemption``), and removing stale bind-gang annotations from a
pod that binds outside its group.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

from apis.core import Pod
from apis.gang import PodGroup
from apis.kinds import default_registry
from apis.meta import Object
from controller.scheduler import framework as fw
from controller.scheduler import gangs
from controller.scheduler.explain import fit_error_message
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.store.snapshots import Snapshot

__all__ = ["Coscheduling"]

log = logging.getLogger(__name__)

NAME = gangs.PLUGIN_NAME

_REGISTRY = default_registry()
_POD_KIND = _REGISTRY.for_type(Pod)
_POD_GROUP_KIND = _REGISTRY.for_type(PodGroup)


def _membership(book: gangs.GangBook) -> dict[str, tuple[int, gangs.Gang | None]]:
    return {gid: (len(s.children), s.gang) for gid, s in book.gangs.items()}


class Coscheduling:
    """PreFilter, PostFilter, Reserve, Permit (with waiting pods) and PreBind for gangs."""

    name = NAME

    def __init__(self, args: gangs.CoschedulingArgs) -> None:
        self.args = args
        self._book = gangs.GangBook()
        self._views: tuple[Sequence[Object], Sequence[Object]] | None = None
        #: The loop's clock as of the last :meth:`resolve_waiting`.
        self._now = 0.0
        #: Waiting pods allowed by another member's Permit, not yet handed to the loop.
        self._allowed: set[str] = set()
        #: Waiting pods rejected (PostFilter, Unreserve, timeout), with the message.
        self._rejected: dict[str, str] = {}
        #: (namespace, name) -> every pod of a gang, not being deleted
        self._members: dict[tuple[str, str], Pod] = {}
        #: the keys of the unbound pods not being deleted
        self._pending: set[str] = set()

    @property
    def book(self) -> gangs.GangBook:
        return self._book

    # -- cluster state ------------------------------------------------------------------------

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        pods = snapshot.objects(_POD_KIND)
        groups = snapshot.objects(_POD_GROUP_KIND)
        if self._views is not None and self._views[0] is pods and self._views[1] is groups:
            return False
        since = self._views[0] if self._views is not None else None
        self._views = (pods, groups)
        self._sync_members(snapshot, pods, since)
        before = self._book
        book = gangs.GangBook(satisfied=before.satisfied)
        for group in groups:
            if isinstance(group, PodGroup):
                book = book.with_pod_group(group, self.args)
        gang_pods = self._members
        for key in sorted(gang_pods):  # in the pods' order, as the book reads them
            book = book.with_pod(gang_pods[key], self.args)
        pending = self._pending
        # Carry over what only the scheduler knows: waits and allowed-not-yet-bound pods.
        states = dict(book.gangs)
        for gang_id, old in before.gangs.items():
            state = states.get(gang_id)
            if state is None:
                continue
            waiting = {k: t for k, t in old.waiting.items() if k in pending}
            binding = frozenset(k for k in old.binding if k in pending)
            if waiting or binding:
                states[gang_id] = replace(state, waiting=waiting, binding=binding)
        in_binding = {key for state in states.values() for key in state.binding}
        members = {g: pods for g, pods in before.bind_members.items() if pods & in_binding}
        # A gang that went away (its last member deleted) starts afresh when it comes back.
        satisfied = frozenset(book.satisfied & states.keys())
        self._book = replace(book, gangs=states, bind_members=members, satisfied=satisfied)
        return _membership(self._book) != _membership(before)

    def _sync_members(
        self, snapshot: Snapshot, pods: Sequence[Object], since: Sequence[Object] | None
    ) -> None:
        """The gang members and the keys of the pending pods (not being deleted), from the
        pods changed since ``since`` (every pod when the snapshot no longer knows which)."""
        changes = snapshot.changes(_POD_KIND, since) if since is not None else None
        if changes is None:
            self._members, self._pending = {}, set()
            changes = [(None, obj) for obj in pods]
        for before, after in changes:
            if before is not None:
                self._members.pop((before.metadata.namespace, before.metadata.name), None)
                if isinstance(before, Pod):
                    self._pending.discard(gangs.pod_key(before))
            if not isinstance(after, Pod) or after.metadata.deletion_timestamp is not None:
                continue
            if gangs.gang_ref(after) is not None:
                self._members[(after.metadata.namespace, after.metadata.name)] = after
            if not after.spec.node_name:
                self._pending.add(gangs.pod_key(after))

    # -- PreFilter ----------------------------------------------------------------------------

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
        if gangs.gang_ref(pod.pod) is None:
            return fw.SKIP
        reason = gangs.check_gang_ready(self._book, pod.pod)
        if reason is None:
            return fw.SKIP
        return fw.Status.of(fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason, plugin=NAME)

    # -- PostFilter ---------------------------------------------------------------------------

    def post_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, diagnosis: fw.Diagnosis
    ) -> fw.PostFilterResult:
        unschedulable = fw.Status(fw.Code.UNSCHEDULABLE, (), NAME)
        if gangs.gang_ref(pod.pod) is None or (NAME, diagnosis.pre_filter) in diagnosis.codes:
            # Not a gang pod, or its gang is incomplete (Koordinator's PreEnqueue keeps such a
            # pod out of the cycle, so nothing of it is rejected).
            return fw.PostFilterResult(unschedulable)
        self._book, outcome = gangs.post_filter(self._book, pod.pod, fit_error_message(diagnosis))
        self._reject(outcome.rejections)
        return fw.PostFilterResult(unschedulable, message=outcome.message)

    # -- Reserve ------------------------------------------------------------------------------

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        return fw.SUCCESS

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        if gangs.gang_ref(pod.pod) is None:
            return
        self._allowed.discard(pod.key)
        self._book, rejections = gangs.unreserve(self._book, pod.pod)
        self._reject(rejections)

    # -- Permit -------------------------------------------------------------------------------

    def permit(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        if gangs.gang_ref(pod.pod) is None:
            return fw.SUCCESS  # allowed alone: nothing to record
        self._book, decision = gangs.permit(self._book, pod.pod, self._now)
        if isinstance(decision, gangs.Allow):
            others = set(decision.pods) - {gangs.pod_key(pod.pod)}
            self._allowed.update(others)
            for key in others:
                self._rejected.pop(key, None)
            return fw.SUCCESS
        if isinstance(decision, gangs.Wait):
            return fw.Status(fw.Code.WAIT, (), NAME)
        return fw.Status.of(fw.Code.UNSCHEDULABLE, decision.message, plugin=NAME)

    def resolve_waiting(self, now: float) -> Mapping[str, fw.Status]:
        self._now = now
        self._book, expired = gangs.expire(self._book, now)
        self._reject(expired)
        verdicts: dict[str, fw.Status] = dict.fromkeys(self._allowed, fw.SUCCESS)
        for key, message in self._rejected.items():
            verdicts[key] = fw.Status.of(fw.Code.UNSCHEDULABLE, message, plugin=NAME)
        self._allowed.clear()
        self._rejected.clear()
        return verdicts

    def next_deadline(self) -> float | None:
        deadlines = [t for s in self._book.gangs.values() for t in s.waiting.values()]
        return min(deadlines) if deadlines else None

    def _reject(self, rejections: tuple[gangs.Rejection, ...]) -> None:
        for rejection in rejections:
            self._allowed.discard(rejection.pod)
            self._rejected[rejection.pod] = rejection.message

    # -- PreBind ------------------------------------------------------------------------------

    def pre_bind(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> fw.PreBindResult:
        annotations = gangs.bind_annotations(self._book, pod.pod)
        if not annotations:
            return fw.PreBindResult(fw.SKIP)
        return fw.PreBindResult(annotations=annotations)
