"""SchedulingHint: the nodes a pod's scheduling-hint annotation names (controller-spec §2).

- PreFilter reads the hint (:func:`controller.scheduler.schedulinghint.parse_scheduling_hint`): a
  value
  that does not decode fails the attempt with status Error carrying the decoder's text (the
  loop records it in a ``FailedScheduling`` Event and backs the pod off); ``nodeNames``
  narrows the cycle to exactly those nodes; a pod without a hint is skipped.
- Prefer nodes (the cycle's step after PreFilter): the ``preferredNodeNames`` inside the nodes
  PreFilter left, cut to ``maxHintNodes``, in the hint's order; the cycle runs the full Filter
  chain on each and keeps the first that passes as the only candidate, else schedules over
  every allowed node. Nothing is held for the pod on a preferred node.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from controller.errors import ConfigError
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.schedulinghint import (
    DEFAULT_MAX_HINT_NODES,
    PLUGIN_NAME,
    HintError,
    SchedulingHint,
    candidate_preferred_nodes,
    hinted_nodes,
    parse_scheduling_hint,
)

__all__ = ["SchedulingHintArgs", "SchedulingHintPlugin"]

_STATE: Final = PLUGIN_NAME


class SchedulingHintArgs(fw.PluginArgs):
    #: How many ``preferredNodeNames`` are tried, from the front; must be > 0.
    max_hint_nodes: int = DEFAULT_MAX_HINT_NODES

    def __post_init__(self) -> None:
        if self.max_hint_nodes <= 0:
            raise ConfigError(f"maxHintNodes: must be greater than 0, got {self.max_hint_nodes!r}")


class SchedulingHintPlugin:
    """PreFilter and prefer-nodes step of the scheduling hint."""

    name = PLUGIN_NAME

    def __init__(self, args: SchedulingHintArgs) -> None:
        self.args = args

    def pre_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable
    ) -> fw.Status | fw.NodeSubset:
        hint = parse_scheduling_hint(pod.pod.metadata.annotations)
        if isinstance(hint, HintError):
            return fw.Status.of(fw.Code.ERROR, hint.message, plugin=self.name)
        if hint is None:
            return fw.SKIP
        state.write(_STATE, hint)
        names = hinted_nodes(hint)
        if names is None:
            return fw.SKIP
        rows = np.zeros(len(table), dtype=np.bool_)
        for name in names:
            row = table.index.get(name)
            if row is not None:
                rows[row] = True
        return fw.NodeSubset(rows, fw.SKIP)

    def preferred_rows(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> tuple[int, ...]:
        """The rows worth trying first, in the hint's order (empty: no preference)."""
        hint = state.get(_STATE, SchedulingHint)
        if hint is None or not hint.preferred_node_names:
            return ()
        allowed = {table.names[r] for r in np.flatnonzero(candidates)}
        nodes = candidate_preferred_nodes(
            hint.preferred_node_names, allowed=allowed, max_hint_nodes=self.args.max_hint_nodes
        )
        return tuple(table.index[node] for node in nodes)
