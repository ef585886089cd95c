"""``DefaultPreemption``: a pod no node fits may evict pods of lower priority (PostFilter).

An adapter over :func:`controller.scheduler.preemption.preempt`. Each pass the plugin groups the
snapshot's pods by node: the assigned ones (potential victims) and the pending ones nominated
there (``status.nominatedNodeName``; those of the preemptor's priority or higher count as
placed). At PostFilter the nodes the filters rejected as UnschedulableAndUnresolvable are left
out (they only count as ``Preemption is not helpful for scheduling``); among the others the
core picks the node whose eviction set has the lowest top priority, then the lowest priority
sum, then the fewest victims.

On success the answer nominates that node and names the victims; the scheduler loop sets
``status.nominatedNodeName`` on the preemptor, deletes the victims with a ``Preempted`` Event
on each, and retries the preemptor once they are gone. Otherwise the core's summary is added
to the FitError as ``preemption: 0/<n> nodes are available: ...``.

Fit is resource fit only (plus the pod slot); a pod the PreFilter points rejected is not
preempted for. Pods bound during the current pass are not victims until the next pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from apis.core import Pod
from apis.kinds import default_registry
from apis.meta import Object
from controller.scheduler import framework as fw
from controller.scheduler import preemption
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.store.snapshots import Snapshot

__all__ = ["DefaultPreemption"]

NAME = "DefaultPreemption"
#: Put in front of the core's summary in the FitError (kube-scheduler's wording).
PREFIX = "preemption: "

_POD_KIND = default_registry().for_type(Pod)


class DefaultPreemption:
    """PostFilter: priority preemption."""

    name = NAME

    def __init__(self, args: fw.NoArgs) -> None:
        self.args = args
        self._view: Sequence[Object] | None = None
        #: (True, node name) -> its assigned, not finished pods; (False, node name) -> the
        #: pending pods nominated to it; by (namespace, name)
        self._placed: dict[tuple[bool, str], dict[tuple[str, str], Pod]] = {}
        #: what :meth:`_pods` last gave for each place, until a pod there changes
        self._sorted: dict[tuple[bool, str], tuple[Pod, ...]] = {}

    def _pods(self, assigned: bool, node: str) -> tuple[Pod, ...]:
        """The pods assigned (or nominated) to ``node``, by namespace and name."""
        place = (assigned, node)
        found = self._sorted.get(place)
        if found is None:
            on = self._placed.get(place, {})
            found = self._sorted[place] = tuple(on[key] for key in sorted(on))
        return found

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        pods = snapshot.objects(_POD_KIND)
        if pods is self._view:
            return False
        since, self._view = self._view, pods
        changes = snapshot.changes(_POD_KIND, since) if since is not None else None
        if changes is None:  # every pod
            self._placed, self._sorted = {}, {}
            changes = [(None, obj) for obj in pods]
        for before, after in changes:
            for obj in (before, after):
                if not isinstance(obj, Pod) or obj.is_terminated:
                    continue
                if obj.spec.node_name:
                    place = (True, obj.spec.node_name)
                elif obj.status.nominated_node_name:
                    place = (False, obj.status.nominated_node_name)
                else:
                    continue
                on = self._placed.setdefault(place, {})
                key = (obj.metadata.namespace, obj.metadata.name)
                if obj is before:
                    on.pop(key, None)
                else:
                    on[key] = obj
                self._sorted.pop(place, None)
        return False

    def post_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, diagnosis: fw.Diagnosis
    ) -> fw.PostFilterResult:
        unschedulable = fw.Status(fw.Code.UNSCHEDULABLE, (), NAME)
        if diagnosis.pre_filter or not len(table):
            return fw.PostFilterResult(unschedulable)
        out = set(diagnosis.unresolvable.tolist())
        nodes = [
            preemption.NodeState(
                name=name,
                allocatable=node.allocatable,
                pods=self._pods(True, name),
                nominated=self._pods(False, name),
            )
            for row, (name, node) in enumerate(zip(table.names, table.nodes, strict=True))
            if row not in out
        ]
        unresolvable = [table.names[row] for row in sorted(out)]
        result = preemption.preempt(pod.pod, nodes, unresolvable=unresolvable)
        if not result.succeeded:
            return fw.PostFilterResult(unschedulable, message=PREFIX + result.message.rstrip("."))
        return fw.PostFilterResult(
            fw.Status(plugin=NAME),
            nominated=table.index[result.nominated_node],
            victims=result.victims,
        )
