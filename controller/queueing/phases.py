"""QueueUnit phases, the predicates that decide queue membership, and the condition mirror.

Phase strings are Koord-Queue's (queue-spec §2.3). The predicates follow the same section:

* *pending*: the phase is ``Enqueued``, empty or ``SchedFailed``;
* *assigned* (holds quota): some admission exists, or the phase is ``Running``, ``Dequeued``,
  ``Reserved`` or ``SchedReady``;
* *satisfied*: every pod set (or the pseudo default pod set) has as many admitted replicas
  as it asks for;
* *all running*: admissions exist and each has ``running >= replicas``;
* *reserved not run* ("assumed"): admissions exist and not all of them run.

The conditions mirror the phase (:func:`mirrored_conditions`); ``lastTransitionTime`` moves
only when a condition's status flips. Conditions are never read back for decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from apis import constants as k
from apis.meta import Condition
from apis.queueing import Admission, QueueUnit

__all__ = [
    "ASSIGNED_PHASES",
    "DEQUEUED",
    "ENQUEUED",
    "EVICTED_BACKOFF",
    "EVICTED_DEACTIVATED",
    "EVICTED_MAX_EXECUTION",
    "EVICTED_PREEMPTED",
    "FAILED",
    "FINISHED_PHASES",
    "PENDING_PHASES",
    "PREEMPTED",
    "RESERVED",
    "RUNNING",
    "SCHED_FAILED",
    "SCHED_READY",
    "SCHED_SUCCEED",
    "SUCCEED",
    "TIMEOUT_BACKOFF",
    "all_running",
    "is_assigned",
    "is_finished",
    "is_pending",
    "is_satisfied",
    "mirrored_conditions",
    "requested_replicas",
    "reserved_not_run",
]

ENQUEUED: Final = "Enqueued"
RESERVED: Final = "Reserved"
DEQUEUED: Final = "Dequeued"
RUNNING: Final = "Running"
SUCCEED: Final = "Succeed"
FAILED: Final = "Failed"
SCHED_READY: Final = "SchedReady"
SCHED_SUCCEED: Final = "SchedSucceed"
SCHED_FAILED: Final = "SchedFailed"
TIMEOUT_BACKOFF: Final = "TimeoutBackoff"
#: Legacy phase, still recognised.
PREEMPTED: Final = "Preempted"

PENDING_PHASES: Final = frozenset({ENQUEUED, "", SCHED_FAILED})
ASSIGNED_PHASES: Final = frozenset({RUNNING, DEQUEUED, RESERVED, SCHED_READY})
FINISHED_PHASES: Final = frozenset({SUCCEED, FAILED})

#: Condition types of the mirror.
QUOTA_RESERVED: Final = "QuotaReserved"
ADMITTED: Final = "Admitted"
PODS_READY: Final = "PodsReady"
FINISHED: Final = "Finished"
EVICTED: Final = "Evicted"

#: Reasons of ``Evicted=True``.
EVICTED_DEACTIVATED: Final = "Deactivated"
EVICTED_BACKOFF: Final = "BackoffTimeout"
EVICTED_PREEMPTED: Final = "Preempted"
EVICTED_MAX_EXECUTION: Final = "MaximumExecutionTimeExceeded"


def is_pending(unit: QueueUnit) -> bool:
    return unit.status.phase in PENDING_PHASES


def is_finished(unit: QueueUnit) -> bool:
    return unit.status.phase in FINISHED_PHASES


def is_assigned(unit: QueueUnit) -> bool:
    """Holds quota: admitted replicas, or a phase past admission."""
    return bool(unit.status.admissions) or unit.status.phase in ASSIGNED_PHASES


def requested_replicas(unit: QueueUnit) -> dict[str, int]:
    """Pod set name -> replicas asked for (the pseudo default pod set: 1 replica)."""
    if not unit.spec.pod_set:
        return {k.QUEUE_DEFAULT_PODSET: 1}
    return {pod_set.name: pod_set.count for pod_set in unit.spec.pod_set}


def _admitted(admissions: Sequence[Admission]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for admission in admissions:
        totals[admission.name] = totals.get(admission.name, 0) + admission.replicas
    return totals


def is_satisfied(unit: QueueUnit) -> bool:
    """Every pod set has all the replicas it asks for admitted."""
    admitted = _admitted(unit.status.admissions)
    return all(admitted.get(name, 0) >= count for name, count in requested_replicas(unit).items())


def all_running(unit: QueueUnit) -> bool:
    admissions = unit.status.admissions
    return bool(admissions) and all(a.running >= a.replicas for a in admissions)


def reserved_not_run(unit: QueueUnit) -> bool:
    """Assumed: admitted replicas some of which are not bound yet."""
    return bool(unit.status.admissions) and not all_running(unit)


# --- the condition mirror ----------------------------------------------------------------------

_Want = tuple[str, str, str]  # type, status, reason


def _wanted(phase: str, evicted_reason: str) -> tuple[list[_Want], set[str]]:
    """Conditions the phase sets, and the types it clears."""
    if phase in (ENQUEUED, ""):
        wanted = [(QUOTA_RESERVED, "False", "Pending"), (ADMITTED, "False", "Pending")]
        if evicted_reason:
            return [*wanted, (EVICTED, "True", evicted_reason)], {PODS_READY}
        # An eviction stays on record until the unit is admitted again.
        return wanted, {PODS_READY}
    if phase == RESERVED:
        return [
            (QUOTA_RESERVED, "True", "QuotaReserved"),
            (ADMITTED, "False", "WaitingForAdmissionChecks"),
        ], set()
    if phase in (DEQUEUED, SCHED_READY, SCHED_SUCCEED):
        return [(QUOTA_RESERVED, "True", "QuotaReserved"), (ADMITTED, "True", "Admitted")], {
            EVICTED
        }
    if phase == RUNNING:
        return [
            (QUOTA_RESERVED, "True", "QuotaReserved"),
            (ADMITTED, "True", "Admitted"),
            (PODS_READY, "True", "PodsRunning"),
        ], {EVICTED}
    if phase == SUCCEED:
        return [(FINISHED, "True", "Succeeded")], set()
    if phase == FAILED:
        return [(FINISHED, "True", "Failed")], set()
    if phase == TIMEOUT_BACKOFF:
        return [
            (QUOTA_RESERVED, "False", EVICTED_BACKOFF),
            (ADMITTED, "False", EVICTED_BACKOFF),
            (EVICTED, "True", evicted_reason or EVICTED_BACKOFF),
        ], {PODS_READY}
    if phase == SCHED_FAILED:
        return [(ADMITTED, "False", "SchedulingFailed")], set()
    return [], set()


def mirrored_conditions(
    current: Sequence[Condition],
    phase: str,
    now: datetime,
    *,
    message: str = "",
    evicted_reason: str = "",
) -> tuple[Condition, ...]:
    """``current`` brought in line with ``phase`` (queue-spec §2.3 table).

    ``evicted_reason`` (``Deactivated``, ``Preempted``, ...) adds ``Evicted=True`` to an
    ``Enqueued`` unit that was just evicted. A condition whose status does not change keeps its
    ``lastTransitionTime``; one whose reason and message do not change is kept as it is.
    """
    wanted, cleared = _wanted(phase, evicted_reason)
    by_type = {c.type: c for c in current}
    out: list[Condition] = []
    wanted_types = {w[0] for w in wanted}
    for condition in current:
        if condition.type in cleared or condition.type in wanted_types:
            continue
        out.append(condition)
    for type_, status, reason in wanted:
        before = by_type.get(type_)
        text = message if type_ in (QUOTA_RESERVED, ADMITTED, EVICTED) else ""
        if before is not None and before.status == status:
            if before.reason == reason and before.message == text:
                out.append(before)
                continue
            since = before.last_transition_time or now
        else:
            since = now
        out.append(
            Condition(
                type=type_, status=status, reason=reason, message=text, last_transition_time=since
            )
        )
    return tuple(out)
