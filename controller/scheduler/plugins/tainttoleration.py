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
from dataclasses import dataclass

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


#: Distinct toleration lists remembered per node set before the memo starts afresh.
_MEMO_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class _Untolerated:
    """What a toleration list meets on the current node set: per reason, every row it keeps
    the pod off (ascending, read-only), and the same over all rows at once."""

    by_reason: tuple[tuple[str, NDArray[np.intp]], ...]
    #: Every row that passes, as a read-only mask (the answer when every row is a candidate).
    passed: NDArray[np.bool_]
    rejections: tuple[fw.Rejection, ...]


def _untolerated(table: NodeTable, tolerations: tuple[Toleration, ...]) -> _Untolerated | None:
    reasons = [_first_untolerated(ts, tolerations) for ts in table.taint_sets]
    if not any(reasons):
        return None
    parts: dict[str, list[NDArray[np.intp]]] = {}
    for group, reason in enumerate(reasons):
        if reason and len(table.taint_rows[group]):
            parts.setdefault(reason, []).append(table.taint_rows[group])
    by_reason: list[tuple[str, NDArray[np.intp]]] = []
    passed = np.ones(len(table), dtype=np.bool_)
    for reason, found in parts.items():
        rows = found[0].copy() if len(found) == 1 else np.sort(np.concatenate(found))
        rows.flags.writeable = False
        passed[rows] = False
        by_reason.append((reason, rows))
    passed.flags.writeable = False
    code = fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    rejections = tuple(fw.Rejection(reason, code, rows) for reason, rows in by_reason)
    return _Untolerated(tuple(by_reason), passed, rejections)


class TaintToleration:
    """Filter, PreScore and Score; see the module docstring.

    The Filter's answer for a toleration list depends only on the node set's taint groups:
    it is worked out once per distinct list and node set and reused for every pod with it.
    """

    name = NAME

    def __init__(self, args: fw.NoArgs) -> None:
        self.args = args
        #: The taint rows the memo was made for (a new node set makes new ones).
        self._memo_for: tuple[NDArray[np.intp], ...] | None = None
        self._memo: dict[tuple[Toleration, ...], _Untolerated | None] = {}
        #: Whether some taint set (of ``_prefer_for``) has a PreferNoSchedule taint.
        self._prefer_for: tuple[tuple[Taint, ...], ...] | None = None
        self._prefer = False

    def _lookup(self, table: NodeTable, tolerations: tuple[Toleration, ...]) -> _Untolerated | None:
        if self._memo_for is not table.taint_rows or len(self._memo) >= _MEMO_LIMIT:
            self._memo_for = table.taint_rows
            self._memo = {}
        try:
            return self._memo[tolerations]
        except KeyError:
            found = self._memo[tolerations] = _untolerated(table, tolerations)
            return found
        except TypeError:  # an unhashable toleration: work it out every time
            return _untolerated(table, tolerations)

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        if not table.tainted:
            return fw.FilterResult(candidates)
        found = self._lookup(table, pod.tolerations)
        if found is None:
            return fw.FilterResult(candidates)
        if candidates is table.all_mask:
            return fw.FilterResult(found.passed, found.rejections)
        passed = candidates & found.passed
        rejections: list[fw.Rejection] = []
        for reason, rows in found.by_reason:
            rows = rows[candidates[rows]]
            if len(rows):
                rejections.append(
                    fw.Rejection(reason, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, rows)
                )
        return fw.FilterResult(passed, tuple(rejections))

    def pre_score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Status:
        if self._prefer_for is not table.taint_sets:
            self._prefer_for = table.taint_sets
            self._prefer = any(
                t.effect == PREFER_NO_SCHEDULE for ts in table.taint_sets for t in ts
            )
        return fw.SUCCESS if self._prefer else fw.SKIP

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
