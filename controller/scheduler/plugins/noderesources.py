"""``NodeResourcesFit``: does the pod's request fit a node's free resources, and how full is it.

Filter (over every candidate at once):

- ``Too many pods`` when the node already runs ``allocatable.pods`` pods;
- ``Insufficient <name>`` for every resource the pod requests more of than the node has
  free (``allocatable - requested``); a resource no node advertises is insufficient
  everywhere. Resources named in ``ignoredResources``, or whose ``<group>/`` prefix is in
  ``ignoredResourceGroups``, are not checked (extended resources only, as upstream).

Score, over the ``scoringStrategy.resources`` (default: the shipped profile's ``cpu``,
``memory``, ``kubernetes.io/batch-cpu``, ``kubernetes.io/batch-memory``, weight 1 each), per
resource with ``requested`` = node requested + pod request:

- ``LeastAllocated``: ``(allocatable - requested) * 100 // allocatable`` (0 when over);
- ``MostAllocated``: ``min(requested, allocatable) * 100 // allocatable``;

then the weighted mean (integer division) over the resources the node has (allocatable > 0).
cpu and memory use the non-zero requests (100m / 200Mi stand in for a missing request). An
extended resource the pod does not request is left out of the mean, as upstream does.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

import msgspec
import numpy as np
from numpy.typing import NDArray

from apis import constants as k
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import FIRST_COLUMNS, MEMORY, PERCENT, NodeTable
from controller.scheduler.podinfo import PodInfo

__all__ = ["NodeResourcesFit", "NodeResourcesFitArgs", "ResourceWeight", "ScoringStrategy"]

NAME = "NodeResourcesFit"
TOO_MANY_PODS = "Too many pods"


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class ResourceWeight(fw.PluginArgs):
    name: str
    weight: Annotated[int, msgspec.Meta(ge=1, le=100)] = 1


SHIPPED_RESOURCES = (
    ResourceWeight(name=k.RESOURCE_CPU),
    ResourceWeight(name=k.RESOURCE_MEMORY),
    ResourceWeight(name=k.RESOURCE_BATCH_CPU),
    ResourceWeight(name=k.RESOURCE_BATCH_MEMORY),
)


class ScoringStrategy(fw.PluginArgs):
    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    resources: tuple[ResourceWeight, ...] = SHIPPED_RESOURCES


class NodeResourcesFitArgs(fw.PluginArgs):
    ignored_resources: tuple[str, ...] = ()
    ignored_resource_groups: tuple[str, ...] = ()
    scoring_strategy: ScoringStrategy = ScoringStrategy()

    def __post_init__(self) -> None:
        if not self.scoring_strategy.resources:
            raise ValueError("scoringStrategy.resources: must name at least one resource")
        names = [r.name for r in self.scoring_strategy.resources]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"scoringStrategy.resources: {name!r} is listed twice")


def _is_extended(name: str) -> bool:
    return name not in FIRST_COLUMNS


class NodeResourcesFit:
    """Filter and Score; see the module docstring."""

    name = NAME
    #: Score: a weighted mean of per-resource scores of 0..100 (see the framework).
    scores_bounded = True

    def __init__(self, args: NodeResourcesFitArgs) -> None:
        self.args = args
        self._most = args.scoring_strategy.type == "MostAllocated"
        #: id(table) -> (its columns, the scoring plan over them).
        self._plans: dict[int, tuple[tuple[str, ...], tuple[tuple[int, int, bool], ...]]] = {}

    @cached_property
    def _ignored(self) -> frozenset[str]:
        return frozenset(self.args.ignored_resources)

    def _checked(self, name: str) -> bool:
        if not _is_extended(name):
            return True
        if name in self._ignored:
            return False
        group, slash, _ = name.partition("/")
        return not (slash and group in self.args.ignored_resource_groups)

    # -- Filter ----------------------------------------------------------------------------

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        rejections: list[fw.Rejection] = []
        # Each check runs over every node, and is intersected with the candidates only when
        # some node fails it (most pods fit most nodes).
        failed: fw.Mask | None = None
        if table.full_nodes:
            full = table.free_pods <= 0
            full &= candidates
            if np.count_nonzero(full):
                rejections.append(
                    fw.Rejection(TOO_MANY_PODS, fw.Code.UNSCHEDULABLE, np.flatnonzero(full))
                )
                failed = full
        missing = [name for name in pod.missing if self._checked(name)]
        if missing and np.count_nonzero(candidates):
            rows = np.flatnonzero(candidates)
            rejections.extend(
                fw.Rejection(insufficient(name), fw.Code.UNSCHEDULABLE, rows) for name in missing
            )
            return fw.FilterResult(np.zeros_like(candidates), tuple(rejections))
        names = table.column_names
        for column, amount in pod.demands:
            name = names[column]
            if column > MEMORY and not self._checked(name):
                continue
            over = table.free[:, column] < amount
            if not np.count_nonzero(over):
                continue
            over &= candidates
            if np.count_nonzero(over):
                rejections.append(
                    fw.Rejection(insufficient(name), fw.Code.UNSCHEDULABLE, np.flatnonzero(over))
                )
                failed = over if failed is None else failed | over
        if failed is None:
            return fw.FilterResult(candidates, tuple(rejections))
        return fw.FilterResult(candidates & ~failed, tuple(rejections))

    # -- Score -----------------------------------------------------------------------------

    def _plan(self, table: NodeTable) -> tuple[tuple[int, int, bool], ...]:
        """Per scored resource the table has: (column, weight, counts only when requested)."""
        cached = self._plans.get(id(table))
        if cached is not None and cached[0] == table.column_names:
            return cached[1]
        plan = tuple(
            (column, r.weight, _is_extended(r.name))
            for r in self.args.scoring_strategy.resources
            if (column := table.columns.get(r.name)) is not None
        )
        self._plans[id(table)] = (table.column_names, plan)
        return plan

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        # Whole columns are contiguous (the table is column-major): score every node, then
        # take the feasible ones, cheaper than gathering each column first. The arithmetic
        # is float64 true division then floor, which equals integer division exactly while
        # amounts * 100 stay below 2**53 (memory below ~90 TB per node).
        plan = self._plan(table)
        if not self._most and _cpu_memory_only(plan, table):
            return self._least_cpu_memory(pod, table, feasible, plan)
        total: NDArray[np.float64] | None = None
        weights: NDArray[np.int64] | int = 0
        vector = pod.vector
        for column, weight, extended in plan:
            if column <= MEMORY:  # cpu and memory: columns 0 and 1, as in nonzero_free
                free = table.nonzero_free[:, column] - float(pod.nonzero[column])
            elif extended and not vector[column]:
                continue
            else:
                free = (table.free[:, column] - vector[column]).astype(np.float64)
            if self._most:
                allocatable = table.allocatable[:, column]
                free = np.clip(allocatable - free, 0.0, allocatable)
            else:
                np.maximum(free, 0.0, out=free)
            free *= float(fw.MAX_NODE_SCORE)
            free /= table.divisor_f[:, column]
            np.floor(free, out=free)
            if weight != 1:
                free *= weight
            if total is None:
                total = free
            else:
                total += free
            if table.everywhere[column]:
                weights = weights + weight
            else:
                weights = weights + weight * (table.allocatable[:, column] > 0)
        if total is None:
            return np.zeros(len(feasible), dtype=np.int64)
        picked = total if len(feasible) == len(table) else total[feasible]
        if isinstance(weights, int):
            picked /= weights
            return np.floor(picked, out=picked).astype(np.int64)
        wsum = weights[feasible]
        means = np.floor(picked / np.maximum(wsum, 1)).astype(np.int64)
        return np.where(wsum > 0, means, 0)

    def _least_cpu_memory(
        self,
        pod: PodInfo,
        table: NodeTable,
        feasible: fw.Rows,
        plan: tuple[tuple[int, int, bool], ...],
    ) -> fw.Scores:
        """LeastAllocated over exactly cpu and memory, every node having both: the general
        path's values on both columns at once. ``nonzero_free_pct`` is the free amount
        already times 100 (exact), so ``(free - request) * 100 / allocatable`` is a
        subtraction and a division; truncation equals floor once negatives are clipped to
        0, and for non-negative integers a right shift is the floor of a halving."""
        cpu, memory = pod.nonzero
        ratio = table.nonzero_free_pct - np.array(
            (PERCENT * cpu, PERCENT * memory), dtype=np.float64
        )
        ratio /= table.divisor_f[:, :2]
        np.maximum(ratio, 0.0, out=ratio)
        per_resource = ratio.astype(np.int64)
        (_, cpu_weight, _), (_, memory_weight, _) = plan
        if cpu_weight != 1:
            per_resource[:, 0] *= cpu_weight
        if memory_weight != 1:
            per_resource[:, 1] *= memory_weight
        total = per_resource[:, 0] + per_resource[:, 1]
        picked = total if len(feasible) == len(table) else total[feasible]
        weights = cpu_weight + memory_weight
        if weights & (weights - 1) == 0:  # a power of two
            picked >>= weights.bit_length() - 1
            return picked
        return picked // weights


def _cpu_memory_only(plan: tuple[tuple[int, int, bool], ...], table: NodeTable) -> bool:
    """The plan scores cpu then memory and nothing else, and every node has both."""
    return (
        len(plan) == 2
        and plan[0][0] == 0
        and plan[1][0] == MEMORY
        and table.everywhere[0]
        and table.everywhere[MEMORY]
    )
