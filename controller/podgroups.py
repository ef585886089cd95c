"""The ``podgroups`` control loop: a PodGroup's ``status`` as Koordinator v1.8 writes it
(controller-spec §5.3; the Coscheduling plugin's PodGroup controller and its PostBind).

A PodGroup's members are the pods whose gang (:func:`controller.scheduler.gangs.gang_ref`) is the
PodGroup's ``<namespace>/<name>`` and that are not being deleted. :func:`pod_group_status` moves
the status one rule at a time until no rule applies:

1. no phase: ``Pending``;
2. ``Finished`` and ``Failed`` are final;
3. more members bound (``spec.nodeName`` set) than ``status.scheduled`` says (the scheduler's
   PostBind): ``scheduled`` is their number and the phase ``Scheduled`` when that reaches
   ``spec.minMember``, else ``Scheduling``; ``scheduleStartTime`` is set (once) when a bind left
   the gang short of ``minMember``, as binding the members one by one does for a gang of more
   than one;
4. ``Pending`` with at least ``minMember`` members: ``PreScheduling``, ``occupiedBy`` the
   ``<namespace>/<owner name>`` of the oldest member's owners, sorted and joined with ``,``
   (upstream only rewrites an ``occupiedBy`` already set, so never fills it: we fill it);
5. otherwise ``running``, ``succeeded`` and ``failed`` count the members in those pod phases,
   ``scheduled`` follows the bound members down as they go; no member left: ``Pending``;
   ``Scheduling`` with ``scheduled >= minMember``: ``Scheduled``; ``Scheduled`` with
   ``running + succeeded >= minMember``: ``Running``; any failed member once ``failed + running
   + succeeded >= minMember``: ``Failed``; ``succeeded >= minMember``: ``Finished``.

:func:`pod_group_status` is pure; :class:`PodGroupStatusLoop` reads a snapshot and writes the
PodGroups whose status changed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Final

import msgspec

from apis.core import Pod
from apis.gang import PodGroup, PodGroupStatus
from apis.kinds import default_registry
from controller.errors import StoreError
from controller.mutations import whole_seconds
from controller.scheduler.gangs import gang_ref
from controller.store.assumed import Outbox
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = [
    "FAILED",
    "FINISHED",
    "PENDING",
    "PRE_SCHEDULING",
    "RUNNING",
    "SCHEDULED",
    "SCHEDULING",
    "PodGroupStatusLoop",
    "members_by_group",
    "pod_group_status",
]

log = logging.getLogger(__name__)

_replace = msgspec.structs.replace

PENDING: Final = "Pending"
PRE_SCHEDULING: Final = "PreScheduling"
SCHEDULING: Final = "Scheduling"
SCHEDULED: Final = "Scheduled"
RUNNING: Final = "Running"
FINISHED: Final = "Finished"
FAILED: Final = "Failed"
_FINAL: Final = frozenset({FINISHED, FAILED})
#: More rule applications than any status needs (each rule moves the phase forward).
_MAX_STEPS: Final = 16
#: Seconds before a PodGroup whose write failed is tried again.
RETRY_SECONDS: Final = 1.0
_POD_GROUP_KIND = default_registry().for_type(PodGroup)


def _occupied_by(pod: Pod) -> str:
    refs = sorted(f"{pod.metadata.namespace}/{r.name}" for r in pod.metadata.owner_references)
    return ",".join(refs)


def _oldest(members: Sequence[Pod]) -> Pod:
    return min(
        members,
        key=lambda p: (
            p.metadata.creation_timestamp is None,
            p.metadata.creation_timestamp or datetime.min,
            p.metadata.name,
        ),
    )


def _step(
    status: PodGroupStatus, min_member: int, members: Sequence[Pod], now: datetime
) -> PodGroupStatus:
    """One rule of the module docstring applied to ``status``."""
    phase = status.phase
    if not phase:
        return _replace(status, phase=PENDING)
    if phase in _FINAL:
        return status
    bound = sum(1 for p in members if p.spec.node_name)
    if bound > status.scheduled:
        start = status.schedule_start_time
        if start is None and status.scheduled + 1 < min_member:
            start = whole_seconds(now)
        return _replace(
            status,
            scheduled=bound,
            phase=SCHEDULED if bound >= min_member else SCHEDULING,
            schedule_start_time=start,
        )
    if phase == PENDING:
        if members and len(members) >= min_member:
            occupied = _occupied_by(_oldest(members)) or status.occupied_by
            return _replace(status, phase=PRE_SCHEDULING, occupied_by=occupied)
        return status
    running = sum(1 for p in members if p.status.phase == "Running")
    succeeded = sum(1 for p in members if p.status.phase == "Succeeded")
    failed = sum(1 for p in members if p.status.phase == "Failed")
    new = _replace(status, running=running, succeeded=succeeded, failed=failed, scheduled=bound)
    if not members:
        return _replace(new, phase=PENDING)
    if phase == SCHEDULING and new.scheduled >= min_member:
        new = _replace(new, phase=SCHEDULED)
    if new.phase == SCHEDULED and succeeded + running >= min_member:
        new = _replace(new, phase=RUNNING)
    if failed and failed + running + succeeded >= min_member:
        new = _replace(new, phase=FAILED)
    if succeeded >= min_member:
        new = _replace(new, phase=FINISHED)
    return new


def pod_group_status(group: PodGroup, members: Sequence[Pod], now: datetime) -> PodGroupStatus:
    """The status ``group`` moves to with ``members`` (its live pods) at ``now``."""
    status = group.status
    for _ in range(_MAX_STEPS):
        after = _step(status, group.spec.min_member, members, now)
        if after == status:
            break
        status = after
    return status


def members_by_group(pods: Iterable[Pod]) -> Mapping[str, list[Pod]]:
    """Gang id (``<namespace>/<name>``) -> its pods that are not being deleted."""
    found: dict[str, list[Pod]] = {}
    for pod in pods:
        ref = gang_ref(pod)
        if ref is not None and pod.metadata.deletion_timestamp is None:
            found.setdefault(ref.id, []).append(pod)
    return found


class PodGroupStatusLoop:
    """The ``podgroups`` control loop; see the module docstring."""

    name = "podgroups"

    def __init__(self) -> None:
        #: The PodGroup and Pod views of the last pass that wrote nothing: nothing to do while
        #: both stay the same (no rule depends on the time alone).
        self._settled: tuple[object, object] | None = None
        #: the status writes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=(_POD_GROUP_KIND,))
        #: a status write failed: try again after RETRY_SECONDS
        self._retry = False

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        registry = store.registry
        snapshot = self._outbox.over(store.snapshot())
        group_view = snapshot.objects(registry.for_type(PodGroup))
        pod_view = snapshot.objects(registry.for_type(Pod))
        settled = self._settled
        if not group_view or (
            settled is not None and settled[0] is group_view and settled[1] is pod_view
        ):
            return None
        groups = [g for g in group_view if isinstance(g, PodGroup)]
        members = members_by_group(p for p in pod_view if isinstance(p, Pod))
        now = ctx.now()
        retry, self._retry = self._retry, False
        writes: list[Write] = []
        gangs: list[str] = []
        for group in groups:
            gang = f"{group.metadata.namespace}/{group.metadata.name}"
            status = pod_group_status(group, members.get(gang, ()), now)
            if status == group.status:
                continue
            writes.append(Write.update_status(_replace(group, status=status)))
            gangs.append(gang)
        self._outbox.send(store, writes, functools.partial(self._written, gangs))
        self._settled = None if writes or retry else (group_view, pod_view)
        return RETRY_SECONDS if self._retry else None

    def _written(self, gangs: Sequence[str], results: Sequence[Result]) -> None:
        for gang, result in zip(gangs, results, strict=True):
            if isinstance(result, StoreError):
                log.warning("PodGroup %s: status write failed: %s", gang, result)
                self._retry = True
                self._settled = None
            else:
                log.debug("PodGroup %s: %s", gang, getattr(result[0], "status", None))
