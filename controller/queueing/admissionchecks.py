"""Admission checks of a QueueUnit: which apply, their states, the verdict, the retry backoff.

A Queue lists checks by name in ``spec.admissionChecks`` (queue-spec §10); a check applies to a
unit when its label selector matches the unit's labels (no selector: every unit; a selector
that does not parse: the check is ignored, logged once per check and selector). When a unit
gets its quota reserved every applying check starts ``Pending``; the states then move through
``Ready``, ``Retry`` or ``Rejected``, written by the check's controller (a built-in one from
:mod:`controller.queueing.checkers`, or an external one writing ``status.admissionChecks``).

:func:`verdict` folds the states: any ``Rejected`` rejects (Kueue parity: the unit is
deactivated), else any ``Retry`` retries (quota released, the unit backs off), else all
``Ready`` admits, else the unit waits.

An ``AdmissionCheck`` object of the check's name is optional. Without one the check works by
name alone, as Koord-Queue does; with one, :func:`check_gate` holds the unit while the object's
``Active`` condition is not ``True``, as Kueue does.

Every function is pure; the clock and the random source are arguments.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Final

import msgspec

from apis.admission import AdmissionCheck
from apis.labels import Selector, SelectorError
from apis.meta import LabelSelector
from apis.queueing import AdmissionCheckState, Queue, QueueUnit, RequeueState

__all__ = [
    "ACTIVE",
    "BASE_DELAY",
    "JITTER",
    "MAX_DELAY",
    "PENDING",
    "READY",
    "REJECTED",
    "REMOVED_MESSAGE",
    "RETRY",
    "STATES",
    "Verdict",
    "check_gate",
    "matching_checks",
    "merge_states",
    "next_requeue_state",
    "requeue_delay",
    "reset_states",
    "verdict",
]

log = logging.getLogger(__name__)

PENDING: Final = "Pending"
READY: Final = "Ready"
RETRY: Final = "Retry"
REJECTED: Final = "Rejected"
STATES: Final = frozenset({PENDING, READY, RETRY, REJECTED})

#: The AdmissionCheck condition that gates units.
ACTIVE: Final = "Active"
#: Message of a state forced ``Ready`` because its check left the queue's list.
REMOVED_MESSAGE: Final = "removed from the queue's admission checks"

#: Retry backoff: first delay, cap, and symmetric jitter (queue-spec §17 item 12).
BASE_DELAY: Final = timedelta(seconds=10)
MAX_DELAY: Final = timedelta(minutes=15)
JITTER: Final = 0.1


class Verdict(enum.StrEnum):
    READY = "Ready"
    WAIT = "Wait"
    RETRY = "Retry"
    REJECTED = "Rejected"


# --- which checks apply ------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _selector(check: str, encoded: bytes) -> Selector | None:
    """The parsed selector, or None (logged) when it is invalid; cached, so logged once."""
    try:
        return Selector.from_label_selector(msgspec.json.decode(encoded, type=LabelSelector))
    except SelectorError as err:
        log.warning("admission check %s ignored: %s", check, err)
        return None


def matching_checks(queue: Queue, unit: QueueUnit) -> tuple[str, ...]:
    """Names of the queue's admission checks whose selector matches the unit's labels."""
    labels = unit.metadata.labels
    names: list[str] = []
    for check in queue.spec.admission_checks:
        if check.label_selector is None:
            names.append(check.name)
            continue
        selector = _selector(check.name, msgspec.json.encode(check.label_selector))
        if selector is not None and selector.matches(labels):
            names.append(check.name)
    return tuple(dict.fromkeys(names))


# --- states ------------------------------------------------------------------------------------


def reset_states(names: Iterable[str], now: datetime) -> tuple[AdmissionCheckState, ...]:
    """Every check ``Pending``: the states of a fresh quota reservation."""
    return tuple(
        AdmissionCheckState(name=name, state=PENDING, last_transition_time=now)
        for name in dict.fromkeys(names)
    )


def merge_states(
    current: Sequence[AdmissionCheckState], names: Iterable[str], now: datetime
) -> tuple[AdmissionCheckState, ...]:
    """``current`` brought in line with the checks that apply now.

    A listed check keeps its state, a new one starts ``Pending``; a check that no longer
    applies is forced ``Ready`` (Koord-Queue's "removed from queue"), so it stops holding the
    unit. Listed checks come first, in ``names`` order, then the removed ones.
    """
    by_name = {state.name: state for state in current}
    wanted = tuple(dict.fromkeys(names))
    out = [
        by_name.get(name) or AdmissionCheckState(name=name, state=PENDING, last_transition_time=now)
        for name in wanted
    ]
    for state in current:
        if state.name in wanted:
            continue
        if state.state == READY:
            out.append(state)
        else:
            out.append(
                msgspec.structs.replace(
                    state, state=READY, message=REMOVED_MESSAGE, last_transition_time=now
                )
            )
    return tuple(out)


def check_gate(name: str, checks: Mapping[str, AdmissionCheck]) -> str | None:
    """Why the unit waits for check ``name``'s object, or None when nothing holds it.

    No object of that name: the check works by name alone (no gate). An object whose
    ``Active`` condition is not ``True`` holds every unit the check applies to.
    """
    check = checks.get(name)
    if check is None:
        return None
    active = next((c for c in check.status.conditions if c.type == ACTIVE), None)
    if active is not None and active.status == "True":
        return None
    text = f"waiting for AdmissionCheck {name} to become active"
    if active is not None and (active.reason or active.message):
        detail = ": ".join(part for part in (active.reason, active.message) if part)
        text += f" ({detail})"
    return text


def verdict(states: Iterable[AdmissionCheckState]) -> Verdict:
    """Any Rejected: REJECTED; else any Retry: RETRY; else all Ready: READY; else WAIT."""
    seen = {state.state for state in states}
    if REJECTED in seen:
        return Verdict.REJECTED
    if RETRY in seen:
        return Verdict.RETRY
    if seen <= {READY}:
        return Verdict.READY
    return Verdict.WAIT


# --- retry backoff -----------------------------------------------------------------------------


def requeue_delay(
    count: int,
    *,
    base: timedelta = BASE_DELAY,
    cap: timedelta = MAX_DELAY,
    jitter: float = JITTER,
    rand: Callable[[], float],
) -> timedelta:
    """``base * 2**(count-1)``, at most ``cap``, then scaled by ``1 ± jitter``.

    ``rand()`` returns a float in ``[0, 1)``; 0.5 gives the delay without jitter.
    """
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {jitter!r}")
    steps = min(max(count, 1) - 1, 64)
    seconds = min(base.total_seconds() * 2.0**steps, cap.total_seconds())
    return timedelta(seconds=max(seconds, 0.0) * (1 + jitter * (2 * rand() - 1)))


def next_requeue_state(
    current: RequeueState | None,
    now: datetime,
    rand: Callable[[], float],
    requeue_after_seconds: int | None = None,
) -> RequeueState:
    """The unit's requeue bookkeeping after one more retry.

    The count grows by one and ``requeueAt`` is ``now`` plus :func:`requeue_delay`, or plus a
    check's ``requeueAfterSeconds`` when that is longer.
    """
    count = (current.count or 0) + 1 if current is not None else 1
    delay = requeue_delay(count, rand=rand)
    if requeue_after_seconds is not None and requeue_after_seconds > delay.total_seconds():
        delay = timedelta(seconds=requeue_after_seconds)
    return RequeueState(count=count, requeue_at=now + delay)
