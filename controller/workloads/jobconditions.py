"""How a batch/v1 Job ends, in the conditions Kubernetes v1.35's Job controller writes: first
the target (``SuccessCriteriaMet`` reason ``CompletionsReached``, or ``FailureTarget`` with the
failure's reason), then, once no pod is left to account for, the terminal condition
(``Complete`` or ``Failed``) with the same reason and message.

Both paths that run Jobs use these: the standalone Job controller
(:mod:`controller.workloads.job`) and the queue's (:mod:`controller.queueing.jobs.batchjob`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

from apis.meta import Condition

__all__ = [
    "COMPLETE",
    "FAILED",
    "FAILURE_TARGET",
    "SUCCESS_CRITERIA_MET",
    "condition",
    "ended",
    "final",
    "new_condition",
    "success_target",
]

COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
FAILURE_TARGET: Final = "FailureTarget"
SUCCESS_CRITERIA_MET: Final = "SuccessCriteriaMet"
REASON_BACKOFF: Final = "BackoffLimitExceeded"
MSG_BACKOFF: Final = "Job has reached the specified backoff limit"
REASON_DEADLINE: Final = "DeadlineExceeded"
MSG_DEADLINE: Final = "Job was active longer than specified deadline"
REASON_COMPLETIONS: Final = "CompletionsReached"
MSG_COMPLETIONS: Final = "Reached expected number of succeeded pods"


def condition(conditions: Sequence[Condition], type_: str) -> Condition | None:
    """The condition ``type_`` of ``conditions`` when it is True."""
    return next((c for c in conditions if c.type == type_ and c.status == "True"), None)


def new_condition(type_: str, reason: str, message: str, now: datetime) -> Condition:
    """A True condition set ``now``."""
    return Condition(
        type=type_,
        status="True",
        reason=reason,
        message=message,
        last_probe_time=now,
        last_transition_time=now,
    )


def success_target(now: datetime) -> Condition:
    """``SuccessCriteriaMet``: enough pods succeeded."""
    return new_condition(SUCCESS_CRITERIA_MET, REASON_COMPLETIONS, MSG_COMPLETIONS, now)


def final(target: Condition, now: datetime) -> Condition:
    """The terminal condition that follows ``target``: ``Complete`` after
    ``SuccessCriteriaMet``, ``Failed`` after ``FailureTarget``, with its reason and message."""
    kind = COMPLETE if target.type == SUCCESS_CRITERIA_MET else FAILED
    return new_condition(kind, target.reason, target.message, now)


def ended(
    conditions: Sequence[Condition], target: Condition, now: datetime
) -> tuple[Condition, ...]:
    """``conditions`` with ``target`` (unless a condition of its type is True already) and then
    its terminal condition: a Job that ends at once, with no pod left to account for."""
    out = tuple(conditions)
    if condition(out, target.type) is None:
        out = (*out, target)
    else:
        target = condition(out, target.type) or target
    if condition(out, COMPLETE) is None and condition(out, FAILED) is None:
        out = (*out, final(target, now))
    return out
