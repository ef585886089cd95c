"""``LoadAwareScheduling``: keep pods off nodes whose measured load is high (controller-spec §5.1).

The arithmetic lives in :mod:`controller.scheduler.loadaware`; this module keeps its state in
step with the cluster and answers at the framework's extension points:

- ``sync`` (once per pass): one :class:`~controller.scheduler.loadaware.usage.NodeLoad` record
  per node, rebuilt only for the nodes whose Node, NodeMetric or assigned pods changed since
  the last pass, and copied into a :class:`~controller.scheduler.loadaware.table.LoadTable`
  aligned with the scheduler's node table rows;
- Filter and Score: :func:`~controller.scheduler.loadaware.table.filter_rows` and
  :func:`~controller.scheduler.loadaware.table.score_rows` over every candidate at once (a
  cluster where no node has a NodeMetric, or where no threshold applies, costs nothing);
- Reserve/Unreserve: the pod's estimate added to / taken from its node's record at once, so
  the next pod of the same pass sees it.

The plugin reads the loop's clock (``set_time``) for metric expiry and for when a pod was
assumed. A NodeMetric that changed releases the unschedulable pods when the filter can reject
anything at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

from apis.core import Node, Pod
from apis.kinds import default_registry
from apis.meta import Object, without_reported_at
from apis.slo import NodeMetric
from controller.scheduler import framework as fw
from controller.scheduler.loadaware.args import LoadAwareArgs, resource_names
from controller.scheduler.loadaware.estimator import scheduled_time
from controller.scheduler.loadaware.table import (
    UNCHECKED,
    LoadTable,
    PodDemand,
    filter_rows,
    pod_demand,
    score_rows,
)
from controller.scheduler.loadaware.usage import NodeLoad, assume, build_node_load, forget, pod_key

if TYPE_CHECKING:
    from controller.scheduler.nodetable import NodeTable
    from controller.scheduler.podinfo import PodInfo
    from controller.store.snapshots import Snapshot

__all__ = ["NAME", "LoadAwareScheduling", "LoadAwareSchedulingArgs"]

NAME = "LoadAwareScheduling"

_EPOCH = datetime.fromtimestamp(0, UTC)
_POD_KIND = default_registry().for_type(Pod)


def _load_inputs(node: Node) -> tuple[object, ...]:
    """What a node's load record reads of the Node: allocatable and the annotations (raw
    allocatable, thresholds), not the heartbeat or the time its agent last reported it."""
    return (node.allocatable, without_reported_at(node.metadata.annotations))


class LoadAwareSchedulingArgs(fw.PluginArgs, LoadAwareArgs):
    """The plugin's args: :class:`~controller.scheduler.loadaware.args.LoadAwareArgs`, with its
    defaults (filter on: cpu 65 %, memory 95 %) and its validation."""


class LoadAwareScheduling:
    """See the module docstring."""

    name = NAME

    def __init__(self, args: LoadAwareSchedulingArgs) -> None:
        self.args: LoadAwareArgs = args
        self.resources = resource_names(args)
        self._now = _EPOCH
        #: Row ``i`` is the node table's row ``i`` (the nodes of ``_names``).
        self.loads = LoadTable.empty(0, self.resources)
        self._names: tuple[str, ...] = ()
        #: Node name -> its record, for every node of the table.
        self._records: dict[str, NodeLoad] = {}
        self._node_view: Sequence[object] | None = None
        self._nodes: dict[str, Node] = {}
        self._metric_view: Sequence[object] | None = None
        self._metrics: dict[str, NodeMetric] = {}
        self._pod_view: Sequence[Object] | None = None
        #: uid -> the assigned pod last seen; node name -> ``namespace/name`` -> pod.
        self._pods: dict[str, Pod] = {}
        self._by_node: dict[str, dict[str, Pod]] = {}
        #: ``namespace/name`` -> when this scheduler assumed the pod (until its PodScheduled
        #: condition says when it was scheduled).
        self._assumed_at: dict[str, datetime] = {}
        #: Whether any node has a NodeMetric; whether the filter can reject any node at all.
        self._any_metric = False
        self._filtering = False

    # -- cluster state ---------------------------------------------------------------------

    def set_time(self, now: datetime) -> None:
        self._now = now

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        kinds = default_registry()
        dirty: set[str] = set()
        self._sync_nodes(snapshot.objects(kinds.for_type(Node)), dirty)
        metrics_changed = self._sync_metrics(snapshot.objects(kinds.for_type(NodeMetric)), dirty)
        self._sync_pods(snapshot, snapshot.objects(kinds.for_type(Pod)), dirty)
        if table.names is not self._names:
            self._realign(table, dirty)
        for name in dirty:
            row = table.index.get(name)
            if row is not None:
                self._rebuild(name, row)
        self._any_metric = bool(self.loads.has_metric.any())
        self._filtering = self._can_reject()
        return metrics_changed and self._filtering

    def _sync_nodes(self, nodes: Sequence[object], dirty: set[str]) -> None:
        if nodes is self._node_view:
            return
        self._node_view = nodes
        seen: dict[str, Node] = {}
        known = self._nodes
        for obj in nodes:
            node = cast("Node", obj)
            name = node.metadata.name
            seen[name] = node
            before = known.get(name)
            if before is node:
                continue
            if before is None or _load_inputs(before) != _load_inputs(node):
                dirty.add(name)
        dirty.update(name for name in self._nodes if name not in seen)
        self._nodes = seen

    def _sync_metrics(self, metrics: Sequence[object], dirty: set[str]) -> bool:
        if metrics is self._metric_view:
            return False
        self._metric_view = metrics
        changed = False
        seen: dict[str, NodeMetric] = {}
        for obj in metrics:
            metric = cast("NodeMetric", obj)
            name = metric.metadata.name
            seen[name] = metric
            if self._metrics.get(name) is not metric:
                dirty.add(name)
                changed = True
        for name in self._metrics:
            if name not in seen:
                dirty.add(name)
                changed = True
        self._metrics = seen
        return changed

    def _sync_pods(self, snapshot: Snapshot, pods: Sequence[Object], dirty: set[str]) -> None:
        """Take the pods changed since the last sync (every pod when the snapshot no longer
        knows which)."""
        if pods is self._pod_view:
            return
        since, self._pod_view = self._pod_view, pods
        changes = snapshot.changes(_POD_KIND, since) if since is not None else None
        if changes is None:  # every pod: whatever is not among them is gone
            gone = list(self._pods)
            changes = [(None, obj) for obj in pods]
        else:
            gone = [b.metadata.uid or pod_key(b) for b, _ in changes if isinstance(b, Pod)]
        seen: set[str] = set()
        for _, obj in changes:
            if obj is None:
                continue
            pod = cast("Pod", obj)
            node = pod.spec.node_name
            if not node:
                continue
            uid = pod.metadata.uid or pod_key(pod)
            seen.add(uid)
            before = self._pods.get(uid)
            if before is pod:
                continue
            if before is not None:
                self._drop(before, dirty)
            self._pods[uid] = pod
            key = pod_key(pod)
            self._by_node.setdefault(node, {})[key] = pod
            dirty.add(node)
            if key in self._assumed_at and scheduled_time(pod) is not None:
                del self._assumed_at[key]
        for uid in gone:
            if uid in self._pods and uid not in seen:
                self._drop(self._pods.pop(uid), dirty)

    def _drop(self, pod: Pod, dirty: set[str]) -> None:
        node = pod.spec.node_name
        on_node = self._by_node.get(node)
        if on_node is not None:
            on_node.pop(pod_key(pod), None)
            if not on_node:
                del self._by_node[node]
        dirty.add(node)

    def _realign(self, table: NodeTable, dirty: set[str]) -> None:
        self._names = table.names
        self.loads = LoadTable.empty(len(table), self.resources)
        records: dict[str, NodeLoad] = {}
        for row, name in enumerate(table.names):
            record = self._records.get(name)
            if record is None or name in dirty:
                dirty.add(name)
                continue
            records[name] = record
            self.loads.set_row(row, record)
        self._records = records

    def _rebuild(self, name: str, row: int) -> None:
        node = self._nodes.get(name)
        if node is None:
            self._records.pop(name, None)
            self.loads.clear_row(row)
            return
        metric = self._metrics.get(name)
        # Without a NodeMetric the row passes and scores 0 whatever its pods: their loads
        # are not worked out until a NodeMetric comes (which rebuilds the node).
        record = build_node_load(
            node,
            metric,
            self._by_node.get(name, {}).values() if metric is not None else (),
            args=self.args,
            resources=self.resources,
            now=self._now,
            assumed_at=self._assumed_at,
            previous=self._records.get(name),
        )
        self._records[name] = record
        self.loads.set_row(row, record)

    def _can_reject(self) -> bool:
        loads = self.loads
        if not self._any_metric:
            return False
        if self.args.filter_expired_node_metrics and not (
            self.args.enable_schedule_when_node_metrics_expired
        ):
            return True
        rows = loads.has_metric
        return bool((loads.limit[:, rows] != UNCHECKED).any()) or bool(
            (loads.prod_limit[:, rows] != UNCHECKED).any()
        )

    def _aligned(self, table: NodeTable) -> bool:
        return self._names is table.names and len(self.loads) == len(table)

    # -- extension points ------------------------------------------------------------------

    def _demand(self, state: fw.CycleState, pod: PodInfo) -> PodDemand:
        demand = state.get(NAME, PodDemand)
        if demand is None:
            demand = pod_demand(pod.pod, self.args, self.resources)
            state.write(NAME, demand)
        return demand

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        if not self._filtering or not self._aligned(table):
            return fw.FilterResult.accept(candidates)
        demand = self._demand(state, pod)
        result = filter_rows(self.loads, candidates, demand, args=self.args, now=self._now)
        if not result.reasons:
            return fw.FilterResult.accept(candidates)
        rejections = tuple(
            fw.Rejection(reason, fw.Code.UNSCHEDULABLE, rows) for reason, rows in result.reasons
        )
        return fw.FilterResult(result.passed, rejections)

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        if not self._any_metric or not self._aligned(table):
            return fw.zero_scores(len(feasible))
        demand = self._demand(state, pod)
        return score_rows(self.loads, feasible, demand, args=self.args, now=self._now)

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        name = table.names[row]
        record = self._records.get(name)
        # Without a NodeMetric the node passes and scores 0 whatever its pods; when one comes,
        # the node is rebuilt from the store, where this pod is bound by then.
        if record is None or not record.has_metric or not self._aligned(table):
            return fw.SUCCESS
        self._assumed_at[pod_key(pod.pod)] = self._now
        updated = assume(record, pod.pod, args=self.args, now=self._now)
        self._records[name] = updated
        self.loads.set_row(row, updated)
        return fw.SUCCESS

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        name = table.names[row]
        key = pod_key(pod.pod)
        self._assumed_at.pop(key, None)
        record = self._records.get(name)
        if record is None or not self._aligned(table):
            return
        updated = forget(record, key)
        self._records[name] = updated
        self.loads.set_row(row, updated)
