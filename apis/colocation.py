"""Batch and Mid allocatable: the arithmetic of agent-spec §5.2-5.3 over plain amounts.

Shared by the node agent (:mod:`agent.qos.batch_resources`, which measures on the node) and
the controller's ``noderesource`` loop (which reads the NodeMetric, as koord-manager does):
each gathers its inputs its own way, the amounts come from here. Pure functions over ints and
Fractions; cpu in millicores, memory in bytes. Per resource (cpu, memory)::

    safetyMargin = capacity * (100 - reclaimPercent) / 100
    floor        = max(systemUsed, reserved)

Batch (:func:`batch_amount`; HP = the high-priority pods, :class:`HighPriority`):

* ``usage``: ``capacity - safetyMargin - floor - Σ HP used``
* ``request`` (memory only; a cpu ``request`` policy is ``usage``):
  ``capacity - safetyMargin - reserved - Σ HP request``
* ``maxUsageRequest``: ``capacity - safetyMargin - floor - Σ max(HP request, HP used)``

floored at 0 (rounded down), then capped at ``capacity * batchThresholdPercent / 100`` when
set; a ``cpu-normalization-ratio`` above 1 multiplies batch-cpu (:func:`normalized`).

Mid, dynamic (:func:`mid_dynamic_amount`): ``max(min(prodReclaimable, nodeUnused), 0) +
unallocated * midUnallocatedPercent / 100`` with ``unallocated = max(capacity - floor - Σ
prod/none requests, 0)``, capped at ``capacity * midThresholdPercent / 100``. Static
(:func:`mid_static_amount`, ``midReclaimMode: static``): ``min(capacity *
midStaticReservedPercent, capacity * midThresholdPercent) / 100``.

Node labels override percents (:func:`ratio_label`, a float ratio: ``0.3`` is 30 %):
``node.koordinator.sh/{cpu,memory}-reclaim-ratio`` the reclaim percent when at most 1
(:func:`reclaim_percent`), ``…/mid-static-{cpu,memory}-reserved-ratio`` the static Mid percent
(:func:`mid_static_percent`); a negative or non-numeric label is ignored.

A published amount is replaced when some amount :func:`moved` by at least
``resourceDiffThreshold`` of it (or, the caller's part, ``updateTimeThresholdSeconds`` after
the last publication): koord-manager's rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Final

import msgspec

from apis import constants as k
from apis.qos import PriorityClass

__all__ = [
    "BATCH_BAND",
    "MAXIMUM_USAGE_REQUEST",
    "MID_BAND",
    "MID_RECLAIM_STATIC",
    "MID_STATIC_RATIO_LABELS",
    "RECLAIM_RATIO_LABELS",
    "REQUEST",
    "USAGE",
    "HighPriority",
    "batch_amount",
    "high_priority",
    "mid_dynamic_amount",
    "mid_static_amount",
    "mid_static_percent",
    "moved",
    "normalization_ratio",
    "normalized",
    "parse_ratio",
    "ratio_label",
    "reclaim_percent",
]

_CPU: Final = k.RESOURCE_CPU
_MEMORY: Final = k.RESOURCE_MEMORY

#: ``cpuCalculatePolicy`` / ``memoryCalculatePolicy`` values.
USAGE: Final = "usage"
REQUEST: Final = "request"
MAXIMUM_USAGE_REQUEST: Final = "maxUsageRequest"
#: ``midReclaimMode`` of the static reservation mode.
MID_RECLAIM_STATIC: Final = "static"

#: Priority classes that are not "high priority" for each band.
BATCH_BAND: Final = frozenset({PriorityClass.BATCH, PriorityClass.FREE})
MID_BAND: Final = frozenset({PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE})

#: Resource -> the node label overriding its reclaim threshold percent.
RECLAIM_RATIO_LABELS: Final[Mapping[str, str]] = {
    _CPU: k.LABEL_NODE_CPU_RECLAIM_RATIO,
    _MEMORY: k.LABEL_NODE_MEMORY_RECLAIM_RATIO,
}
#: Resource -> the node label overriding its static Mid reserved percent.
MID_STATIC_RATIO_LABELS: Final[Mapping[str, str]] = {
    _CPU: k.LABEL_NODE_MID_STATIC_CPU_RESERVED_RATIO,
    _MEMORY: k.LABEL_NODE_MID_STATIC_MEMORY_RESERVED_RATIO,
}


class HighPriority(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Sums over the high-priority pods of one resource."""

    #: Σ request
    request: int = 0
    #: Σ used (a pod's usage, or its request where it counts its request)
    used: int = 0
    #: Σ max(request, used), pod by pod
    greater: int = 0


def high_priority(pods: Iterable[tuple[int, int]]) -> HighPriority:
    """The sums of ``(request, used)`` pairs, one per high-priority pod."""
    request = used = greater = 0
    for asked, held in pods:
        request += asked
        used += held
        greater += max(asked, held)
    return HighPriority(request=request, used=used, greater=greater)


def _floor(value: Fraction) -> int:
    return max(math.floor(value), 0)


def batch_amount(
    resource: str,
    *,
    capacity: int,
    reclaim_percent: Fraction,
    system_used: int,
    reserved: int,
    hp: HighPriority,
    policy: str,
    threshold_percent: int | None,
) -> int:
    """Batch allocatable of ``resource`` (``cpu`` or ``memory``), before normalization."""
    safety = capacity * (100 - reclaim_percent) / 100
    floor = max(system_used, reserved)
    if policy == REQUEST and resource == _MEMORY:
        value = capacity - safety - reserved - hp.request
    elif policy == MAXIMUM_USAGE_REQUEST:
        value = capacity - safety - floor - hp.greater
    else:
        value = capacity - safety - floor - hp.used
    if threshold_percent is not None:
        value = min(value, Fraction(capacity * threshold_percent, 100))
    return _floor(value)


def normalized(batch_cpu: int, ratio: Fraction) -> int:
    """batch-cpu multiplied by a CPU normalization ratio above 1 (rounded down)."""
    return math.floor(batch_cpu * ratio) if ratio > 1 else batch_cpu


def mid_static_amount(*, capacity: int, reserved_percent: Fraction, threshold_percent: int) -> int:
    """Mid allocatable in the static reservation mode."""
    return _floor(min(capacity * reserved_percent, Fraction(capacity * threshold_percent)) / 100)


def mid_dynamic_amount(
    *,
    capacity: int,
    prod_reclaimable: int,
    node_unused: int,
    reserved: int,
    system_used: int,
    hp_request: int,
    unallocated_percent: int,
    threshold_percent: int,
) -> int:
    """Mid allocatable in the dynamic mode (``hp_request``: Σ requests of prod/none pods)."""
    held = max(reserved, system_used)
    unallocated = max(capacity - held - hp_request, 0)
    reclaimable = max(min(prod_reclaimable, node_unused), 0)
    value = Fraction(reclaimable) + Fraction(unallocated * unallocated_percent, 100)
    return _floor(min(value, Fraction(capacity * threshold_percent, 100)))


def parse_ratio(text: str) -> Fraction:
    """A float ratio as an exact fraction (``"0.3"`` -> 3/10); ``ValueError`` saying why it
    cannot be used ("is not a number", "is negative")."""
    try:
        ratio = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError("is not a number") from None
    if ratio < 0:
        raise ValueError("is negative")
    return ratio


#: Told (label key, its text, why) about a label that is ignored.
Ignored = Callable[[str, str, str], None]


def ratio_label(
    labels: Mapping[str, str], key: str, *, ignored: Ignored | None = None
) -> Fraction | None:
    """The ratio label ``key``; None when absent or unusable (``ignored`` is told why)."""
    text = labels.get(key)
    if text is None:
        return None
    try:
        return parse_ratio(text)
    except ValueError as err:
        if ignored is not None:
            ignored(key, text, str(err))
        return None


def reclaim_percent(configured: int, ratio: Fraction | None) -> Fraction:
    """The reclaim threshold percent: a ratio label of at most 1, else ``configured``."""
    if ratio is not None and ratio <= 1:
        return ratio * 100
    return Fraction(configured)


def mid_static_percent(configured: int, ratio: Fraction | None) -> Fraction:
    """The static Mid reserved percent: the ratio label's, else ``configured``."""
    return ratio * 100 if ratio is not None else Fraction(configured)


def normalization_ratio(text: str | None) -> Fraction:
    """A ``cpu-normalization-ratio`` above 1, else 1 (absent or not a number)."""
    if not text:
        return Fraction(1)
    try:
        ratio = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return Fraction(1)
    return ratio if ratio > 1 else Fraction(1)


def moved(published: int, fresh: int, threshold: float) -> bool:
    """Whether ``fresh`` differs from ``published`` by at least ``threshold`` of it."""
    return fresh != published and abs(fresh - published) >= published * threshold
