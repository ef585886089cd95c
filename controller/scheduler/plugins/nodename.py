"""``NodeName``: a pod that names its node (``spec.nodeName``) fits only there.

Pods the scheduler picks up have no ``spec.nodeName`` (kubelet-bound pods never reach it), so
this filter matters for callers that schedule a pod pinned to a node, such as a Reservation
whose template names one. Failing nodes get ``node(s) didn't match the requested node name``
(UnschedulableAndUnresolvable).
"""

from __future__ import annotations

import numpy as np

from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo

__all__ = ["NodeName"]

NAME = "NodeName"
MISMATCH = "node(s) didn't match the requested node name"


class NodeName:
    name = NAME

    def __init__(self, args: fw.NoArgs) -> None:
        self.args = args

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        wanted = pod.pod.spec.node_name
        if not wanted:
            return fw.FilterResult(candidates)
        other = np.ones_like(candidates)
        row = table.index.get(wanted)
        if row is not None:
            other[row] = False
        return fw.FilterResult.reject_where(
            candidates, other, MISMATCH, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        )
