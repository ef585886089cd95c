"""``NodeUnschedulable``: a cordoned node (``spec.unschedulable``) takes no new pods, unless
the pod tolerates the ``node.kubernetes.io/unschedulable:NoSchedule`` taint.

Failing nodes get ``node(s) were unschedulable`` (UnschedulableAndUnresolvable).
"""

from __future__ import annotations

from apis import constants as k
from apis.core import Taint
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.tainttoleration import NO_SCHEDULE, tolerated
from controller.scheduler.podinfo import PodInfo

__all__ = ["NodeUnschedulable"]

NAME = "NodeUnschedulable"
UNSCHEDULABLE = "node(s) were unschedulable"
_CORDON = Taint(key=k.TAINT_NODE_UNSCHEDULABLE, effect=NO_SCHEDULE)


class NodeUnschedulable:
    name = NAME

    def __init__(self, args: fw.NoArgs) -> None:
        self.args = args

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        if not table.cordoned or tolerated(pod.tolerations, _CORDON):
            return fw.FilterResult(candidates)
        return fw.FilterResult.reject_where(
            candidates, table.unschedulable, UNSCHEDULABLE, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        )
