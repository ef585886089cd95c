"""Thresholds and the classification of a pool's nodes (controller-spec §6.4 steps 1, 3, 4).

Percentages of the pool's maps become amounts per node, against the node's capacity:

* absolute mode: ``amount = percent * capacity / 100``; a resource a map leaves out counts as
  100 %;
* deviation mode: with ``avg`` the mean usage percentage of the resource over the pool's nodes
  (those with a usable NodeMetric), ``low = clamp(avg - low%, 0, 100)`` and
  ``high = clamp(avg + high%, 0, 100)`` percent of the node's capacity; a resource a map leaves
  out counts as 0 %, and a resource whose low percentage is 0 takes no part (both levels are the
  whole capacity).

The prod levels are made the same way from the prod maps and the nodes' prod usage.

A node is *underutilized* (low) when it is schedulable and **every** resource is at or below
its low level; *overutilized* (high) when **any** resource is above its high level. With prod
thresholds configured (either prod map non-empty), a node is *prodHigh* when any prod usage is
above its prod high level, *prodLow* when it is schedulable and every prod usage is at or below
its prod low level. Classes: a low node is prodHigh, else bothLow when prodLow, else low; a high
node is high; any other node is prodHigh, prodLow or nothing. Without prod thresholds no node is
prodHigh, prodLow or bothLow (every underutilized node is plainly low).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from controller.descheduler.plugins.lownodeload.usage import NodeUsage

__all__ = [
    "Classes",
    "Levels",
    "classify",
    "is_over",
    "is_under",
    "node_levels",
    "over_text",
    "percent",
    "room",
]


class Levels(msgspec.Struct, frozen=True):
    """A node's low and high levels (amounts, canonical units) per resource."""

    low: Mapping[str, float]
    high: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Classes:
    """Node names by class, in the pool's node order."""

    low: tuple[str, ...] = ()
    high: tuple[str, ...] = ()
    prod_low: tuple[str, ...] = ()
    prod_high: tuple[str, ...] = ()
    both_low: tuple[str, ...] = ()
    #: Every underutilized node (low, bothLow, and the low nodes that are prodHigh).
    under: tuple[str, ...] = ()


def percent(amount: float, capacity: float) -> float:
    """``amount`` as a percentage of ``capacity`` (0 without capacity)."""
    return amount * 100.0 / capacity if capacity > 0 else 0.0


def _clamp(value: float) -> float:
    return min(100.0, max(0.0, value))


def node_levels(
    usages: Sequence[NodeUsage],
    low_percent: Mapping[str, float],
    high_percent: Mapping[str, float],
    resources: Sequence[str],
    *,
    deviation: bool,
    prod: bool = False,
) -> dict[str, Levels]:
    """Each node's levels (by node name); ``prod`` averages the prod usage."""
    missing = 0.0 if deviation else 100.0
    low_pct = {name: low_percent.get(name, missing) for name in resources}
    high_pct = {name: high_percent.get(name, missing) for name in resources}
    if deviation:
        average: dict[str, float] = {}
        for name in resources:
            shares = [
                percent((u.prod_usage if prod else u.usage).get(name, 0), u.capacity.get(name, 0))
                for u in usages
            ]
            average[name] = sum(shares) / len(shares) if shares else 0.0
        for name in resources:
            if low_pct[name] == 0:
                low_pct[name] = high_pct[name] = 100.0
            else:
                low_pct[name] = _clamp(average[name] - low_pct[name])
                high_pct[name] = _clamp(average[name] + high_pct[name])
    levels: dict[str, Levels] = {}
    for u in usages:
        cap = u.capacity
        levels[u.name] = Levels(
            low={name: low_pct[name] * cap.get(name, 0) / 100.0 for name in resources},
            high={name: high_pct[name] * cap.get(name, 0) / 100.0 for name in resources},
        )
    return levels


def is_under(usage: Mapping[str, int], level: Mapping[str, float]) -> bool:
    """Every resource at or below its level."""
    return all(usage.get(name, 0) <= amount for name, amount in level.items())


def is_over(usage: Mapping[str, int], level: Mapping[str, float]) -> bool:
    """Some resource above its level."""
    return any(usage.get(name, 0) > amount for name, amount in level.items())


def room(high: Mapping[str, float], usage: Mapping[str, int]) -> dict[str, float]:
    """What a node can still take, per resource, before it passes its high level (a target's
    share of the budget)."""
    return {name: amount - usage.get(name, 0) for name, amount in high.items()}


def classify(
    usages: Sequence[NodeUsage],
    levels: Mapping[str, Levels],
    prod_levels: Mapping[str, Levels] | None,
) -> Classes:
    """The pool's nodes by class (``prod_levels`` None: no prod thresholds)."""
    low: list[str] = []
    high: list[str] = []
    prod_low: list[str] = []
    prod_high: list[str] = []
    both_low: list[str] = []
    under: list[str] = []
    for u in usages:
        name = u.name
        level = levels[name]
        schedulable = not u.node.spec.unschedulable
        prod_level = prod_levels[name] if prod_levels is not None else None
        is_prod_high = prod_level is not None and is_over(u.prod_usage, prod_level.high)
        is_prod_low = (
            prod_level is not None and schedulable and is_under(u.prod_usage, prod_level.low)
        )
        if schedulable and is_under(u.usage, level.low):
            under.append(name)
            if is_prod_high:
                prod_high.append(name)
            elif is_prod_low:
                both_low.append(name)
            else:
                low.append(name)
        elif is_over(u.usage, level.high):
            high.append(name)
        elif is_prod_high:
            prod_high.append(name)
        elif is_prod_low:
            prod_low.append(name)
    return Classes(
        low=tuple(low),
        high=tuple(high),
        prod_low=tuple(prod_low),
        prod_high=tuple(prod_high),
        both_low=tuple(both_low),
        under=tuple(under),
    )


def over_text(
    usage: Mapping[str, int],
    high: Mapping[str, float],
    capacity: Mapping[str, int],
    *,
    prod: bool = False,
) -> str:
    """The eviction reason: ``node is overutilized, node cpu usage(82.00%)>threshold(75.00%)``
    for every resource above its level, in the pool's resource order (``prod cpu ...`` in the
    prod pass)."""
    scope = "prod" if prod else "node"
    parts = [
        f"{scope} {name} usage({percent(usage.get(name, 0), capacity.get(name, 0)):.2f}%)"
        f">threshold({percent(amount, capacity.get(name, 0)):.2f}%)"
        for name, amount in high.items()
        if usage.get(name, 0) > amount
    ]
    return ", ".join(["node is overutilized", *parts])
