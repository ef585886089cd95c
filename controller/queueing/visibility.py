"""What a user sees of a waiting unit: its position, an estimated wait, and why it waits.

* :func:`queue_item_details` builds ``Queue.status.queueItemDetails`` from the queue's sorted
  pending units (key ``active``, 1-based positions; queue-spec §2.1).
* :class:`AdmissionRate` is the recent admission rate of one queue, an exponential moving
  average of admissions per second. It is an immutable value: :meth:`AdmissionRate.update`
  returns the next one, so the engine keeps one per queue and swaps it each pass. Until
  :data:`EMA_WINDOW` has passed since the first sample the rate is the plain average over the
  time observed, and at least :data:`MIN_SPAN` (an EMA started at zero would under-estimate it
  for a long while, and a burst over a few milliseconds would over-estimate it). The engine
  writes the rate on the Queue as :data:`ANNOTATION_QUEUE_ADMISSION_RATE` (admissions per
  minute, :func:`format_rate`), which ``koordpy get queueunits -o wide`` turns into an ETA
  with :func:`eta`.
* :func:`shortfall_message` and :func:`waiting_message` say why a pending unit waits, in
  ``status.message`` and in its ``QuotaReserved=False`` condition: which quota (and at which
  level of its parent chain), which resource, how much is missing, in wire quantities. The
  text holds no timestamps and is ordered, so an unchanged wait produces the same text and the
  engine writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from apis.quantity import format_quantity
from apis.queueing import QueueItemDetail

__all__ = [
    "ACTIVE_KEY",
    "ANNOTATION_QUEUE_ADMISSION_RATE",
    "EMA_WINDOW",
    "MIN_SPAN",
    "AdmissionRate",
    "Shortfall",
    "eta",
    "format_rate",
    "parse_rate",
    "queue_item_details",
    "shortfall_message",
    "waiting_message",
]

#: On a Queue: its recent admission rate, admissions per minute as a decimal (``"12.5"``).
ANNOTATION_QUEUE_ADMISSION_RATE: Final = "koordpy.io/admission-rate"
#: ``queueItemDetails`` key of the Priority and Block policies' sorted list.
ACTIVE_KEY: Final = "active"
#: Time constant of the admission-rate average.
EMA_WINDOW: Final = timedelta(minutes=5)
#: The warm-up average never divides by less than this, so a burst in the first moments does
#: not read as a huge rate.
MIN_SPAN: Final = timedelta(seconds=10)


# --- positions -----------------------------------------------------------------------------------


def queue_item_details(
    units: Sequence[tuple[str, str, int]],
) -> dict[str, tuple[QueueItemDetail, ...]]:
    """``{"active": ...}`` from the queue's pending units in order: (name, namespace, priority)."""
    return {
        ACTIVE_KEY: tuple(
            QueueItemDetail(name=name, namespace=namespace, priority=priority, position=index)
            for index, (name, namespace, priority) in enumerate(units, start=1)
        )
    }


# --- admission rate and ETA ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdmissionRate:
    """Admissions per second of one queue, recent samples weighing most.

    ``update(now, admitted)`` records that ``admitted`` units were admitted since the previous
    update. Samples at the same instant (or from a clock that went back) are held and counted
    with the next one that moves forward.
    """

    #: Admissions per second.
    per_second: float = 0.0
    #: When the first sample came; None before any.
    first: datetime | None = None
    #: When the rate was last moved forward.
    last: datetime | None = None
    #: Admissions since ``first``, its own sample included (the warm-up average).
    total: int = 0
    #: Admissions recorded at ``last`` not yet folded into the average.
    held: int = 0
    window: timedelta = EMA_WINDOW

    def update(self, now: datetime, admitted: int) -> AdmissionRate:
        if admitted < 0:
            raise ValueError(f"admitted must be >= 0, got {admitted}")
        if self.first is None or self.last is None:
            return replace(self, first=now, last=now, total=admitted, held=admitted)
        total = self.total + admitted
        elapsed = (now - self.last).total_seconds()
        if elapsed <= 0:
            return replace(self, total=total, held=self.held + admitted)
        since_first = (now - self.first).total_seconds()
        window = self.window.total_seconds()
        if since_first <= window:
            rate = total / max(since_first, MIN_SPAN.total_seconds())
        else:
            alpha = 1.0 - math.exp(-elapsed / window)
            instant = (admitted + self.held) / elapsed
            rate = self.per_second + alpha * (instant - self.per_second)
        return replace(self, per_second=rate, last=now, total=total, held=0)

    @property
    def per_minute(self) -> float:
        return self.per_second * 60.0


def eta(position: int, rate_per_second: float) -> timedelta | None:
    """Estimated wait of the unit at ``position`` (1-based) at the given admission rate.

    None when no estimate can be made: no admissions seen (rate 0) or no position.
    """
    if position < 1 or not rate_per_second > 0 or math.isinf(rate_per_second):
        return None
    return timedelta(seconds=position / rate_per_second)


def format_rate(rate: AdmissionRate | float) -> str:
    """Admissions per minute, at most three decimals, for the Queue annotation."""
    per_minute = rate.per_minute if isinstance(rate, AdmissionRate) else rate * 60.0
    text = f"{max(per_minute, 0.0):.3f}".rstrip("0").rstrip(".")
    return text or "0"


def parse_rate(text: str | None) -> float | None:
    """Admissions per second from the annotation text (per minute); None when unreadable."""
    if not text:
        return None
    try:
        per_minute = float(text)
    except ValueError:
        return None
    if not math.isfinite(per_minute) or per_minute < 0:
        return None
    return per_minute / 60.0


# --- why a unit waits ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource a quota on the unit's chain cannot give now (canonical units)."""

    #: The quota that refuses.
    quota: str
    resource: str
    #: What the unit asks for.
    need: int
    #: What the quota can still give (its limit minus its use; may be negative).
    free: int
    #: The quota's runtime (fair share), when the check used it.
    runtime: int | None = None
    #: The quota's ``spec.max`` for the resource, when it has one.
    max: int | None = None
    #: The unit's own quota when ``quota`` is one of its ancestors.
    via: str = ""


def _amount(resource: str, amount: int) -> str:
    return format_quantity(resource, amount)


def _short_text(short: Shortfall) -> str:
    res = short.resource
    text = f"{res} needs {_amount(res, short.need)}, {_amount(res, max(short.free, 0))} free"
    if short.runtime is not None:
        text += f" of runtime {_amount(res, short.runtime)}"
        if short.max is not None:
            text += f" (max {_amount(res, short.max)})"
    elif short.max is not None:
        text += f" of max {_amount(res, short.max)}"
    return text


def shortfall_message(
    quota: str,
    resource_short: Mapping[str, tuple[int, int]],
    *,
    runtime: Mapping[str, int] | None = None,
    max_: Mapping[str, int] | None = None,
    via: str = "",
) -> str:
    """``waiting for quota team-a: cpu needs 6, 2 free of runtime 40 (max 48)``.

    ``resource_short`` maps each short resource to (need, available); ``runtime`` and ``max_``
    add the quota's limits; ``via`` names the unit's own quota when ``quota`` is an ancestor
    (``waiting for quota dept (parent of team-a): ...``). Resources in name order.
    """
    shorts = [
        Shortfall(
            quota=quota,
            resource=resource,
            need=need,
            free=free,
            runtime=(runtime or {}).get(resource),
            max=(max_ or {}).get(resource),
            via=via,
        )
        for resource, (need, free) in resource_short.items()
    ]
    return waiting_message(shorts)


def _quota_label(quota: str, via: str) -> str:
    if via and via != quota:
        return f"quota {quota} (parent of {via})"
    return f"quota {quota}"


def waiting_message(
    shortfalls: Sequence[Shortfall] = (),
    *,
    missing_quota: str = "",
    blocked_by: str = "",
    gates: Sequence[str] = (),
) -> str:
    """The whole reason a pending unit waits, one clause per cause joined by ``; ``.

    ``missing_quota``: the unit's quota (or an ancestor) does not exist. ``blocked_by``: the
    queue's Block policy holds the quota behind another unit (its ``namespace/name``).
    ``shortfalls``: grouped per quota, nearest quota first as given, resources in name order.
    ``gates``: messages of admission checks holding the unit (:func:`check_gate`).
    """
    clauses: list[str] = []
    if missing_quota:
        clauses.append(f"quota {missing_quota} does not exist (quota not exist)")
    if blocked_by:
        clauses.append(f"waiting behind {blocked_by}, which blocks its quota (Block policy)")
    grouped: dict[tuple[str, str], list[Shortfall]] = {}
    for short in shortfalls:
        grouped.setdefault((short.quota, short.via), []).append(short)
    for (quota, via), shorts in grouped.items():
        parts = "; ".join(_short_text(s) for s in sorted(shorts, key=lambda s: s.resource))
        clauses.append(f"waiting for {_quota_label(quota, via)}: {parts}")
    clauses.extend(gates)
    return "; ".join(clauses) if clauses else "waiting in queue"
