"""One scheduling attempt for one pod: pure apart from the table's assume/forget.

:func:`schedule_one` runs, over a :class:`~controller.scheduler.nodetable.NodeTable`:

1. PreFilter plugins (a rejection ends the attempt; Skip disables the plugin's Filter; a
   :class:`~controller.scheduler.framework.NodeSubset` narrows the candidates);
2. Filter plugins in profile order, each seeing only the nodes every earlier filter accepted,
   so a node's reasons come from the first plugin that rejects it. Every node is considered
   (no sampling);
   A PreFilter plugin that prefers nodes (``PreferNodesPlugin``, the scheduling hint) has
   the Filter chain run on each of its nodes in order first; the first that passes becomes
   the only candidate;
3. when no node is left: PostFilter plugins, and an Unschedulable decision carrying the
   :class:`~controller.scheduler.framework.Diagnosis`;
4. PreScore (Skip drops the plugin's Score for this pod) and Score plugins over every
   feasible node, each normalized when it can be, weighted and summed; the highest total wins,
   ties going to the **lowest row** (the node whose name sorts first), so a run is
   reproducible (kube-scheduler picks at random among ties). A single feasible node is
   taken without scoring;
5. the table assumes the pod on the chosen row; Reserve plugins run (a failure unreserves
   every Reserve plugin in reverse order and forgets the pod); Permit plugins run (Wait is
   passed on in the decision).

:func:`prepare_binding` runs PreBind (merging the plugins' annotations and labels) and Bind
(the first plugin not answering Skip takes the pod; none: the caller's default binder), and
:func:`abandon` undoes an assumed decision (Unreserve + forget) when binding fails.

A plugin whose PreFilter Skip is final for the pod (``pre_filter_skip_is_final``, see the
framework) is left out of every later point of the attempt, PreBind included; a Score that is
the shared :func:`~controller.scheduler.framework.zero_scores` is neither checked nor added.

A plugin that raises turns the attempt into an Error naming it; the pod then backs off.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from apis.caches import IdentityCache
from apis.core import Pod
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import Profile

__all__ = ["BindPlan", "Decision", "abandon", "prepare_binding", "schedule_one"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of :func:`schedule_one`.

    ``status`` Success: placed on ``row``/``node`` (assumed in the table, reserved, permitted);
    Wait: the same but a Permit plugin holds it; Unschedulable: ``diagnosis`` says why;
    Error: ``status.reasons`` say what failed.
    """

    pod: PodInfo
    state: fw.CycleState
    status: fw.Status
    row: int | None = None
    node: str = ""
    diagnosis: fw.Diagnosis | None = None
    nominated: str = ""
    #: Pods to evict so that the pod fits on ``nominated`` (PostFilter preemption).
    victims: tuple[Pod, ...] = ()
    #: Plugins whose PreFilter Skip ended their part for this pod (PreBind skips them too).
    quiet: frozenset[str] = frozenset()

    @property
    def placed(self) -> bool:
        return self.row is not None and self.status.code in (fw.Code.SUCCESS, fw.Code.WAIT)


@dataclass(frozen=True, slots=True)
class BindPlan:
    """What the loop writes for a placed pod: PreBind's changes and who binds it."""

    status: fw.Status
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The Bind plugin that took the pod; empty: the default binder (``spec.nodeName``).
    binder: str = ""


class _PluginFailedError(Exception):
    def __init__(self, status: fw.Status) -> None:
        super().__init__(status.message)
        self.status = status


def _error(plugin: str, err: BaseException) -> fw.Status:
    return fw.Status(fw.Code.ERROR, (f"running {plugin}: {err}",), plugin)


def _excluded_reason(plugins: list[str]) -> str:
    return f"node(s) didn't satisfy plugin(s) [{', '.join(plugins)}]"


def schedule_one(profile: Profile, table: NodeTable, pod: PodInfo) -> Decision:
    """One scheduling cycle; see the module docstring."""
    state = fw.CycleState()
    try:
        return _schedule(profile, table, pod, state)
    except _PluginFailedError as failed:
        return Decision(pod, state, failed.status)
    except Exception as err:  # a framework bug must not stop the loop
        log.exception("scheduling %s failed", pod.key)
        return Decision(pod, state, _error("framework", err))


def _call_failed(plugin: str, err: Exception) -> _PluginFailedError:
    log.error("plugin %s failed", plugin, exc_info=err)
    return _PluginFailedError(_error(plugin, err))


def _schedule(profile: Profile, table: NodeTable, pod: PodInfo, state: fw.CycleState) -> Decision:
    nodes = len(table)
    counts: dict[str, dict[str, int]] = {}
    codes: dict[tuple[str, str], fw.Code] = {}
    skipped: set[str] = set()
    candidates = table.all_mask
    narrowed_by: list[str] = []
    unresolvable: list[fw.Rows] = []

    for pre in profile.pre_filter:
        try:
            answer = pre.pre_filter(state, pod, table)
        except Exception as err:
            raise _call_failed(pre.name, err) from err
        status = answer.status if isinstance(answer, fw.NodeSubset) else answer
        if isinstance(answer, fw.NodeSubset):
            candidates = candidates & answer.rows
            narrowed_by.append(pre.name)
        if status.code is fw.Code.SKIP:
            skipped.add(pre.name)
        elif status.code is fw.Code.ERROR:
            raise _PluginFailedError(fw.Status(fw.Code.ERROR, status.reasons, pre.name))
        elif not status.is_success:
            message = status.message
            diagnosis = fw.Diagnosis(
                nodes=nodes,
                counts={pre.name: {message: nodes}},
                codes={(pre.name, message): status.code},
                pre_filter=message,
            )
            return _unschedulable(profile, table, pod, state, diagnosis, pre.name)

    if narrowed_by and nodes:
        left_out = int(nodes - np.count_nonzero(candidates))
        if left_out:
            reason = _excluded_reason(narrowed_by)
            counts[narrowed_by[0]] = {reason: left_out}
            codes[(narrowed_by[0], reason)] = fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            unresolvable.append(np.flatnonzero(~candidates))

    quiet = skipped & profile.final_skips if skipped else _NONE
    alive = bool(np.count_nonzero(candidates)) if narrowed_by else nodes > 0
    if alive and profile.prefer_nodes:
        preferred = _preferred_row(profile, table, pod, state, candidates, skipped)
        if preferred is not None:
            candidates = np.zeros(nodes, dtype=np.bool_)
            candidates[preferred] = True
    for plugin in profile.filter:
        if not alive:
            break
        if plugin.name in skipped:
            continue
        result = _filter(plugin, state, pod, table, candidates)
        for rejection in result.rejections:
            per_plugin = counts.setdefault(plugin.name, {})
            seen = per_plugin.get(rejection.reason, 0)
            per_plugin[rejection.reason] = seen + len(rejection.rows)
            codes[(plugin.name, rejection.reason)] = rejection.code
            if rejection.code is fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                unresolvable.append(rejection.rows)
        if result.rejections:
            alive = bool(np.count_nonzero(result.passed))
        candidates = result.passed

    left = int(np.count_nonzero(candidates))
    feasible = table.all_rows if left == nodes else _rows_of(candidates)
    if left == 0:
        diagnosis = fw.Diagnosis(
            nodes=nodes,
            counts=counts,
            codes=codes,
            unresolvable=np.unique(np.concatenate(unresolvable))
            if unresolvable
            else np.empty(0, dtype=np.intp),
        )
        return _unschedulable(profile, table, pod, state, diagnosis, "")

    row = (
        int(feasible[0])
        if len(feasible) == 1
        else _select(profile, table, pod, state, feasible, quiet)
    )
    return _assume_and_reserve(profile, table, pod, state, row, quiet)


_NONE: frozenset[str] = frozenset()
_ROWS_OF_READ_ONLY: IdentityCache[fw.Mask, fw.Rows] = IdentityCache(
    "scheduler.mask-rows",
    limit=256,
    contract="a read-only candidate mask owning its data (a filter's memoized answer, which"
    " nobody changes) -> its rows",
)


def _rows_of(candidates: fw.Mask) -> fw.Rows:
    """``np.flatnonzero(candidates)``, remembered for a read-only mask owning its data."""
    if candidates.flags.writeable or candidates.base is not None:
        return np.flatnonzero(candidates)
    known = _ROWS_OF_READ_ONLY.get(candidates)
    if known is not None:
        return known
    rows = np.flatnonzero(candidates)
    rows.flags.writeable = False
    return _ROWS_OF_READ_ONLY.put(candidates, rows)


def _filter(
    plugin: fw.FilterPlugin,
    state: fw.CycleState,
    pod: PodInfo,
    table: NodeTable,
    candidates: fw.Mask,
) -> fw.FilterResult:
    """One Filter call; a plugin that raises, or rejects with Error, fails the attempt."""
    try:
        result = plugin.filter(state, pod, table, candidates)
    except Exception as err:
        raise _call_failed(plugin.name, err) from err
    for rejection in result.rejections:
        if rejection.code is fw.Code.ERROR:
            raise _PluginFailedError(fw.Status(fw.Code.ERROR, (rejection.reason,), plugin.name))
    return result


def _passes_filters(
    profile: Profile,
    table: NodeTable,
    pod: PodInfo,
    state: fw.CycleState,
    row: int,
    skipped: set[str],
) -> bool:
    mask = np.zeros(len(table), dtype=np.bool_)
    mask[row] = True
    for plugin in profile.filter:
        if plugin.name in skipped:
            continue
        result = _filter(plugin, state, pod, table, mask)
        if not result.passed[row]:
            return False
        mask = result.passed
    return True


def _preferred_row(
    profile: Profile,
    table: NodeTable,
    pod: PodInfo,
    state: fw.CycleState,
    candidates: fw.Mask,
    skipped: set[str],
) -> int | None:
    """The first preferred row the whole Filter chain accepts (PreferNodesPlugin)."""
    for prefer in profile.prefer_nodes:
        try:
            rows = prefer.preferred_rows(state, pod, table, candidates)
        except Exception as err:
            raise _call_failed(prefer.name, err) from err
        for row in rows:
            if _passes_filters(profile, table, pod, state, row, skipped):
                return row
    return None


def _unschedulable(
    profile: Profile,
    table: NodeTable,
    pod: PodInfo,
    state: fw.CycleState,
    diagnosis: fw.Diagnosis,
    plugin: str,
) -> Decision:
    nominated = ""
    victims: tuple[Pod, ...] = ()
    messages: list[str] = []
    for post in profile.post_filter:
        try:
            result = post.post_filter(state, pod, table, diagnosis)
        except Exception as err:
            raise _call_failed(post.name, err) from err
        if result.message:
            messages.append(result.message)
        if result.status.is_success and result.nominated is not None:
            nominated = table.names[result.nominated]
            victims = result.victims
            break
    if messages:
        diagnosis = fw.Diagnosis(
            nodes=diagnosis.nodes,
            counts=diagnosis.counts,
            codes=diagnosis.codes,
            pre_filter=diagnosis.pre_filter,
            post_filter=" ".join(messages),
            unresolvable=diagnosis.unresolvable,
        )
    status = fw.Status(fw.Code.UNSCHEDULABLE, (), plugin)
    return Decision(pod, state, status, diagnosis=diagnosis, nominated=nominated, victims=victims)


def _select(
    profile: Profile,
    table: NodeTable,
    pod: PodInfo,
    state: fw.CycleState,
    feasible: fw.Rows,
    quiet: frozenset[str] | set[str],
) -> int:
    """The feasible row with the highest weighted score. Plugins that answered Skip at
    PreScore are not scored, nor the ``quiet`` ones (their PreFilter Skip means a score of
    0 everywhere): leaving out a constant changes no argmax."""
    skipped = set(quiet)
    for pre in profile.pre_score:
        if pre.name in skipped:
            continue
        try:
            status = pre.pre_score(state, pod, table, feasible)
        except Exception as err:
            raise _call_failed(pre.name, err) from err
        if status.code is fw.Code.SKIP:
            skipped.add(pre.name)
        elif not status.is_success:
            raise _PluginFailedError(fw.Status(fw.Code.ERROR, status.reasons, pre.name))
    total: fw.Scores | None = None
    for entry in profile.score:
        plugin = entry.plugin
        if plugin.name in skipped:
            continue
        try:
            scores = plugin.score(state, pod, table, feasible)
            if entry.normalizer is not None:
                scores = entry.normalizer.normalize(state, pod, scores)
        except Exception as err:
            raise _call_failed(plugin.name, err) from err
        if fw.is_zero_scores(scores):
            continue  # no opinion: adds 0 everywhere
        if entry.checked and len(scores) and (scores.min() < 0 or scores.max() > fw.MAX_NODE_SCORE):
            reason = f"score out of range [0, {fw.MAX_NODE_SCORE}]: {scores.min()}..{scores.max()}"
            raise _PluginFailedError(fw.Status(fw.Code.ERROR, (reason,), plugin.name))
        weighted = scores * entry.weight if entry.weight != 1 else scores
        total = weighted if total is None else total + weighted
    if total is None:
        return int(feasible[0])
    return int(feasible[int(np.argmax(total))])


def _assume_and_reserve(
    profile: Profile,
    table: NodeTable,
    pod: PodInfo,
    state: fw.CycleState,
    row: int,
    quiet: frozenset[str] | set[str],
) -> Decision:
    table.assume(pod.uid, pod.vector, pod.nonzero, row)
    reserved: list[fw.ReservePlugin] = []
    for plugin in profile.reserve:
        if plugin.name in quiet:
            continue
        try:
            status = plugin.reserve(state, pod, table, row)
        except Exception as err:
            status = _error(plugin.name, err)
        reserved.append(plugin)
        if not status.is_success:
            _unreserve(profile, table, pod, state, row)
            return Decision(pod, state, _named(status, plugin.name))
    final = fw.SUCCESS
    for permit in profile.permit:
        if permit.name in quiet:
            continue
        try:
            status = permit.permit(state, pod, table, row)
        except Exception as err:
            status = _error(permit.name, err)
        if status.code is fw.Code.WAIT:
            final = _named(status, permit.name)
        elif not status.is_success:
            _unreserve(profile, table, pod, state, row)
            return Decision(pod, state, _named(status, permit.name))
    return Decision(
        pod,
        state,
        final,
        row=row,
        node=table.names[row],
        quiet=frozenset(quiet) if quiet else _NONE,
    )


def _named(status: fw.Status, plugin: str) -> fw.Status:
    return status if status.plugin else fw.Status(status.code, status.reasons, plugin)


def _unreserve(
    profile: Profile, table: NodeTable, pod: PodInfo, state: fw.CycleState, row: int
) -> None:
    for plugin in reversed(profile.reserve):
        try:
            plugin.unreserve(state, pod, table, row)
        except Exception:
            log.exception("unreserve of %s by %s failed", pod.key, plugin.name)
    table.forget(pod.uid)


def abandon(profile: Profile, table: NodeTable, decision: Decision) -> None:
    """Undo a placed decision: every Reserve plugin's Unreserve, then forget the pod."""
    if decision.row is not None:
        _unreserve(profile, table, decision.pod, decision.state, decision.row)


def prepare_binding(profile: Profile, table: NodeTable, decision: Decision) -> BindPlan:
    """PreBind then Bind for a placed decision; a failure is returned, not raised (the caller
    then calls :func:`abandon`)."""
    assert decision.row is not None
    row, pod, state = decision.row, decision.pod, decision.state
    annotations: dict[str, str] = {}
    labels: dict[str, str] = {}
    for plugin in profile.pre_bind:
        if plugin.name in decision.quiet:
            continue
        try:
            result = plugin.pre_bind(state, pod, table, row)
        except Exception as err:
            log.exception("pre-bind of %s by %s failed", pod.key, plugin.name)
            return BindPlan(_error(plugin.name, err))
        if not result.status.is_success and result.status.code is not fw.Code.SKIP:
            return BindPlan(_named(result.status, plugin.name))
        annotations.update(result.annotations)
        labels.update(result.labels)
    for binder in profile.bind:
        try:
            status = binder.bind(state, pod, table, row)
        except Exception as err:
            log.exception("bind of %s by %s failed", pod.key, binder.name)
            return BindPlan(_error(binder.name, err))
        if status.code is fw.Code.SKIP:
            continue
        if not status.is_success:
            return BindPlan(_named(status, binder.name), annotations, labels)
        return BindPlan(fw.SUCCESS, annotations, labels, binder=binder.name)
    return BindPlan(fw.SUCCESS, annotations, labels)
