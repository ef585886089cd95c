"""``TaintToleration``: taints a pod does not tolerate keep it off a node or count against it.

Filter: a node fails on its first ``NoSchedule`` or ``NoExecute`` taint the pod does not
tolerate, with ``node(s) had untolerated taint {<key>: <value>}``
(UnschedulableAndUnresolvable). Score: the number of ``PreferNoSchedule`` taints not
tolerated by the pod's tolerations of effect ``PreferNoSchedule`` (or any effect), reversed
and normalized so the node with none gets 100.

A toleration tolerates a taint when its effect is empty or equal, its key is empty (only with
``Exists``: every key) or equal, and, for ``Equal`` (or an empty operator), its value equals
the taint's. Evaluated once per distinct taint set (``table.taint_group``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from apis.core import Taint, Toleration
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo

__all__ = ["TaintToleration", "tolerates", "untolerated_reason"]

NAME = "TaintToleration"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return False


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def untolerated_reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def _first_untolerated(taints: Iterable[Taint], tolerations: tuple[Toleration, ...]) -> str:
    for taint in taints:
        if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerated(tolerations, taint):
            return untolerated_reason(taint)
    return ""


class TaintToleration:
    """Filter, PreScore and Score; see the module docstring."""

    name = NAME

    def __init__(self, args: fw.NoArgs) -> None:
        self.args = args

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        if not table.tainted:
            return fw.FilterResult(candidates)
        reasons = [_first_untolerated(ts, pod.tolerations) for ts in table.taint_sets]
        if not any(reasons):
            return fw.FilterResult(candidates)
        passed = candidates.copy()
        rejections: list[fw.Rejection] = []
        by_reason: dict[str, list[NDArray[np.intp]]] = {}
        for group, reason in enumerate(reasons):
            if reason:
                rows = table.taint_rows[group]
                rows = rows[candidates[rows]]
                if len(rows):
                    by_reason.setdefault(reason, []).append(rows)
        for reason, parts in by_reason.items():
            rows = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))
            passed[rows] = False
            code = fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            rejections.append(fw.Rejection(reason, code, rows))
        return fw.FilterResult(passed, tuple(rejections))

    def pre_score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Status:
        prefer = any(t.effect == PREFER_NO_SCHEDULE for ts in table.taint_sets for t in ts)
        return fw.SUCCESS if prefer else fw.SKIP

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        relevant = tuple(t for t in pod.tolerations if t.effect in ("", PREFER_NO_SCHEDULE))
        per_group = np.array(
            [
                sum(
                    1
                    for taint in ts
                    if taint.effect == PREFER_NO_SCHEDULE and not tolerated(relevant, taint)
                )
                for ts in table.taint_sets
            ],
            dtype=np.int64,
        )
        return per_group[table.taint_group[feasible]]

    def normalize(self, state: fw.CycleState, pod: PodInfo, scores: fw.Scores) -> fw.Scores:
        return fw.default_normalize(scores, reverse=True)
