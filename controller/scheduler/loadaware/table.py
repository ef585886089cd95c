"""Load records of many nodes as numpy arrays; the filter and score over all of them at once.

A :class:`LoadTable` holds one slot per node (the scheduler's node table rows, in its order)
for each resource of :func:`controller.scheduler.loadaware.args.resource_names`. Arrays are
resource-major, shape ``(resources, nodes)``: with two or three resources and thousands of
nodes, a per-node reduction over resources is then a few operations on contiguous vectors.
:meth:`LoadTable.set_row` copies a :class:`~controller.scheduler.loadaware.usage.NodeLoad` into
its node's slot (after every rebuild, assume or forget); a node never set has no NodeMetric.

:func:`filter_rows` and :func:`score_rows` are the plugin's Filter and Score over many nodes;
:func:`usage_percent`, :func:`usage_exceeded`, :func:`least_used_scores` and
:func:`weighted_scores` are the bare arithmetic of §5.1 (elementwise, any layout, except
:func:`weighted_scores`, which takes one row per resource).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import msgspec
import numpy as np
import numpy.typing as npt

from apis.core import Pod
from apis.qos import PriorityClass, priority_class
from controller.scheduler.loadaware.args import LoadAwareArgs
from controller.scheduler.loadaware.estimator import estimate_pod, is_daemonset_pod
from controller.scheduler.loadaware.usage import NodeLoad

__all__ = [
    "MAX_NODE_SCORE",
    "REASON_METRIC_EXPIRED",
    "UNCHECKED",
    "FilterResult",
    "LoadTable",
    "PodDemand",
    "exceeding_estimate",
    "filter_rows",
    "least_used_scores",
    "pod_demand",
    "reason_usage_exceeded",
    "score_rows",
    "usage_exceeded",
    "usage_percent",
    "weighted_scores",
]

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
IndexArray = npt.NDArray[np.intp]

MAX_NODE_SCORE: Final = 100
REASON_METRIC_EXPIRED: Final = "node(s) nodeMetric expired"


def reason_usage_exceeded(resource: str, *, aggregated: bool = False) -> str:
    """``node(s) <res> usage exceed threshold`` (``aggregated usage`` for the aggregated filter)."""
    kind = "aggregated usage" if aggregated else "usage"
    return f"node(s) {resource} {kind} exceed threshold"


class PodDemand(msgspec.Struct, frozen=True, kw_only=True):
    """What the load filter and score need of the pod being scheduled."""

    #: The pod's estimated usage over the resource vector.
    estimate: tuple[int, ...]
    #: Prod by its priority class (prod thresholds and prod-usage scoring apply).
    prod: bool = False
    #: Owned by a DaemonSet: passes the load filter everywhere.
    daemonset: bool = False


def pod_demand(pod: Pod, args: LoadAwareArgs, resources: tuple[str, ...]) -> PodDemand:
    estimate = estimate_pod(pod, args)
    return PodDemand(
        estimate=tuple(estimate.get(name, 0) for name in resources),
        prod=priority_class(pod) is PriorityClass.PROD,
        daemonset=is_daemonset_pod(pod),
    )


#: The limit of a cell no threshold checks.
UNCHECKED: Final = np.iinfo(np.int64).max


def exceeding_estimate(used: int, capacity: int, threshold: int) -> int:
    """The smallest incoming estimate that takes ``used`` above ``threshold`` percent.

    ``round((used + e) * 100 / capacity) > threshold`` (halves rounded up) holds exactly when
    ``200 * (used + e) >= capacity * (2 * threshold + 1)``; :data:`UNCHECKED` when the threshold
    is 0 or the capacity is 0 (the resource is not checked).
    """
    if threshold <= 0 or capacity <= 0:
        return int(UNCHECKED)
    return -(-(capacity * (2 * threshold + 1)) // 200) - used


def _limits(used: Sequence[int], capacity: Sequence[int], thresholds: Sequence[int]) -> list[int]:
    return [exceeding_estimate(u, c, t) for u, c, t in zip(used, capacity, thresholds, strict=True)]


@dataclass(slots=True)
class LoadTable:
    """Per-node load figures, shape ``(resources, nodes)``; updated in place, one node at a
    time (:meth:`set_row`), by the plugin's cache. Node ``i`` is the scheduler's row ``i``.

    The thresholds are folded into ``limit`` / ``prod_limit``: per cell, the smallest estimate
    of an incoming pod that the row rejects, so the filter is one comparison per cell.
    """

    resources: tuple[str, ...]
    capacity: Int64Array
    usage: Int64Array
    score_usage: Int64Array
    prod_usage: Int64Array
    #: Rejecting estimate for pods other than prod ones (aggregated or plain thresholds).
    limit: Int64Array
    #: Rejecting estimate for prod pods (prod thresholds where the row has any, else ``limit``).
    prod_limit: Int64Array
    #: ``limit`` comes from the aggregated-usage thresholds.
    aggregated: BoolArray
    #: The row has prod thresholds.
    prod_checked: BoolArray
    has_metric: BoolArray
    #: ``updateTime`` as POSIX seconds; NaN when the NodeMetric has none.
    updated_at: npt.NDArray[np.float64]

    @classmethod
    def empty(cls, rows: int, resources: tuple[str, ...]) -> LoadTable:
        """``rows`` nodes, none with a NodeMetric yet."""
        shape = (len(resources), rows)

        def matrix() -> Int64Array:
            return np.zeros(shape, dtype=np.int64)

        return cls(
            resources=resources,
            capacity=matrix(),
            usage=matrix(),
            score_usage=matrix(),
            prod_usage=matrix(),
            limit=np.full(shape, UNCHECKED, dtype=np.int64),
            prod_limit=np.full(shape, UNCHECKED, dtype=np.int64),
            aggregated=np.zeros(rows, dtype=np.bool_),
            prod_checked=np.zeros(rows, dtype=np.bool_),
            has_metric=np.zeros(rows, dtype=np.bool_),
            updated_at=np.full(rows, np.nan, dtype=np.float64),
        )

    @classmethod
    def of(cls, loads: Sequence[NodeLoad], resources: tuple[str, ...]) -> LoadTable:
        """A table whose row ``i`` is ``loads[i]``."""
        table = cls.empty(len(loads), resources)
        for row, load in enumerate(loads):
            table.set_row(row, load)
        return table

    def __len__(self) -> int:
        return len(self.has_metric)

    def set_row(self, row: int, load: NodeLoad) -> None:
        resources = self.resources
        if load.resources != resources:
            raise ValueError(
                f"node {load.name}: resources {load.resources} differ from {resources}"
            )
        th = load.thresholds
        capacity = load.capacity
        usage = load.usage
        self.capacity[:, row] = capacity
        self.usage[:, row] = usage
        self.score_usage[:, row] = load.score_usage
        self.prod_usage[:, row] = load.prod_usage
        if load.filter_aggregated:
            limit = _limits(
                load.filter_usage, capacity, [th.aggregated_usage.get(n, 0) for n in resources]
            )
        else:
            limit = _limits(usage, capacity, [th.usage.get(n, 0) for n in resources])
        prod = [th.prod_usage.get(n, 0) for n in resources]
        prod_checked = any(t > 0 for t in prod)
        self.limit[:, row] = limit
        self.prod_limit[:, row] = (
            _limits(load.prod_usage, capacity, prod) if prod_checked else limit
        )
        self.aggregated[row] = load.filter_aggregated
        self.prod_checked[row] = prod_checked
        self.has_metric[row] = load.has_metric
        updated = load.updated_at
        self.updated_at[row] = updated.timestamp() if updated is not None else np.nan

    def clear_row(self, row: int) -> None:
        """The node has no load record (no NodeMetric): the filter passes it, it scores 0."""
        self.has_metric[row] = False
        self.updated_at[row] = np.nan

    def expired(self, now: datetime, expiration_seconds: int) -> BoolArray:
        """Per row: the NodeMetric has no ``updateTime`` or is at least that old."""
        # NaN compares false: a row without updateTime is expired
        fresh: BoolArray = self.updated_at > now.timestamp() - expiration_seconds
        return ~fresh


# --- arithmetic ---------------------------------------------------------------------------------


def usage_percent(used: Int64Array, capacity: Int64Array) -> Int64Array:
    """``round(used * 100 / capacity)`` (halves away from zero); 0 where capacity is 0."""
    safe = np.where(capacity > 0, capacity, 1)
    percent = (200 * used + safe) // (2 * safe)
    return np.where(capacity > 0, percent, 0)


def usage_exceeded(used: Int64Array, capacity: Int64Array, thresholds: Int64Array) -> BoolArray:
    """Per cell: the rounded usage percent is above a non-zero threshold."""
    checked = (thresholds > 0) & (capacity > 0)
    return checked & (usage_percent(used, capacity) > thresholds)


def least_used_scores(used: Int64Array, capacity: Int64Array) -> Int64Array:
    """``(capacity - used) * 100 // capacity`` per cell; 0 where used > capacity or capacity 0."""
    free = capacity - used
    valid = (capacity > 0) & (free >= 0)
    np.multiply(free, MAX_NODE_SCORE, out=free)
    np.floor_divide(free, np.maximum(capacity, 1), out=free)
    np.multiply(free, valid, out=free)
    return free


def weighted_scores(per_resource: Int64Array, weights: Int64Array, dominant: int) -> Int64Array:
    """``(sum w_r * s_r + dominant * min s_r) // (sum w + dominant)`` per node.

    ``per_resource`` has one row per resource (shape ``(resources, nodes)``). The dominant
    (most used, lowest-scoring) resource is taken among the weighted resources, or among all
    of them when no resource has a weight.
    """
    total = int(weights.sum()) + dominant
    nodes = per_resource.shape[1]
    if total == 0 or per_resource.shape[0] == 0:
        return np.zeros(nodes, dtype=np.int64)
    score: Int64Array = weights @ per_resource
    if dominant:
        weighted = weights > 0
        pool = per_resource[weighted] if weighted.any() else per_resource
        score = score + dominant * np.minimum.reduce(pool, axis=0)
    return score // total


# --- filter and score ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterResult:
    """``passed``: rows (over the whole table) that were candidates and pass; ``reasons``: per
    message, the rows rejected with it (each rejected row appears under exactly one)."""

    passed: BoolArray
    reasons: tuple[tuple[str, IndexArray], ...]

    def reason_of(self, row: int) -> str | None:
        for message, rows in self.reasons:
            if row in rows:
                return message
        return None


def filter_rows(
    table: LoadTable,
    candidates: BoolArray,
    demand: PodDemand,
    *,
    args: LoadAwareArgs,
    now: datetime,
) -> FilterResult:
    """The load filter for one pod over every candidate row.

    In order: a DaemonSet pod passes everywhere; a row without NodeMetric passes; with
    ``filterExpiredNodeMetrics`` an expired row is rejected (``node(s) nodeMetric expired``),
    or passes unchecked with ``enableScheduleWhenNodeMetricsExpired``; then a prod pod on a row
    with prod thresholds is checked against prod usage, a row with aggregated thresholds
    against aggregated usage, any other against ``usageThresholds``. A rejected row is reported
    under its first exceeding resource in column order.
    """
    passed = candidates.copy()
    if demand.daemonset:
        return FilterResult(passed, ())
    reasons: list[tuple[str, IndexArray]] = []
    checked = candidates & table.has_metric
    if args.filter_expired_node_metrics:
        expired = table.expired(now, args.node_metric_expiration_seconds)
        stale = checked & expired
        if not args.enable_schedule_when_node_metrics_expired and stale.any():
            passed &= ~stale
            reasons.append((REASON_METRIC_EXPIRED, np.flatnonzero(stale)))
        checked &= ~expired
    estimate = np.asarray(demand.estimate, dtype=np.int64)[:, None]
    limit = table.prod_limit if demand.prod else table.limit
    exceeded = limit <= estimate
    failing = checked & np.logical_or.reduce(exceeded, axis=0)
    if not failing.any():
        return FilterResult(passed, tuple(reasons))
    passed &= ~failing
    rows = np.flatnonzero(failing)
    first = exceeded[:, rows].argmax(axis=0)
    aggregated = table.aggregated[rows]
    if demand.prod:
        aggregated &= ~table.prod_checked[rows]
    for column, resource in enumerate(table.resources):
        in_column = first == column
        for agg in (False, True):
            hit = rows[in_column & (aggregated == agg)]
            if hit.size:
                reasons.append((reason_usage_exceeded(resource, aggregated=agg), hit))
    return FilterResult(passed, tuple(reasons))


def score_rows(
    table: LoadTable,
    rows: IndexArray,
    demand: PodDemand,
    *,
    args: LoadAwareArgs,
    now: datetime,
) -> Int64Array:
    """The load score (0..100) of each of ``rows``; 0 for rows without a fresh NodeMetric."""
    weights = np.asarray(
        [args.resource_weights.get(name, 0) for name in table.resources], dtype=np.int64
    )
    if int(weights.sum()) + args.dominant_resource_weight == 0:
        return np.zeros(rows.size, dtype=np.int64)
    source = (
        table.prod_usage if args.score_according_prod_usage and demand.prod else table.score_usage
    )
    used = source.take(rows, axis=1) + np.asarray(demand.estimate, dtype=np.int64)[:, None]
    capacity = table.capacity.take(rows, axis=1)
    scores = weighted_scores(
        least_used_scores(used, capacity), weights, args.dominant_resource_weight
    )
    stale = table.expired(now, args.node_metric_expiration_seconds)[rows]
    fresh = table.has_metric[rows] & ~stale
    return np.where(fresh, scores, 0)
