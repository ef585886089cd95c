"""``NodeNUMAResource``: bound CPUs for LSE/LSR pods (controller-spec §5.2, basics).

The rules live in :mod:`controller.scheduler.numaresource`; this module applies them at the
framework's
extension points:

- PreFilter: :func:`~controller.scheduler.numaresource.policy.prepare` once per pod (a pod that
  requests
  nothing is skipped; a bad request is refused with its message). A pod that binds no CPUs
  itself, sets no NUMA topology policy and meets no node whose ``cpu-bind-policy`` label
  forces binding is skipped too: the Filter has nothing to check for it.
- Filter: only for the remaining pods and only on candidate rows that may bind
  (:func:`~controller.scheduler.numaresource.policy.plan`, then
  :func:`~controller.scheduler.numaresource.allocator.allocate` from the CPUs the node's pods do not
  hold); a node without enough free CPUs is Unschedulable
  (:data:`~controller.scheduler.numaresource.allocator.NOT_ENOUGH_CPUS`). The CPUs found per row are
  kept in the cycle state.
- Reserve: the chosen row's CPUs are held for the rest of the pass (until the pod's binding
  shows in the store), so two pods of one pass never get the same CPU.
- PreBind: ``scheduling.koordinator.sh/resource-status`` with the cpuset and the cpu per NUMA
  node.
- Score: for pods the plugin handles, the node-level ``scoringStrategy`` (``LeastAllocated``
  or ``MostAllocated`` over its weighted resources, the pod's requests included); other pods
  score 0 everywhere.

``sync`` reads the Nodes (their ``cpu-topology`` annotation, which the node table does not
keep) and the pods holding a cpuset, node by node. A bound pod whose ``resource-status`` cannot
be read, or names a CPU its node's topology does not have, holds nothing: it is refused once
per pod and value with a Warning Event (``fw.WarningPlugin``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from apis import constants as k
from apis.bounded import CpuListError, check_cpus
from apis.core import Node, Pod
from apis.kinds import default_registry
from apis.meta import Object
from controller.scheduler import framework as fw
from controller.scheduler.numaresource.allocator import (
    NOT_ENOUGH_CPUS,
    allocate,
    numa_node_resources,
)
from controller.scheduler.numaresource.allocator import numa_allocate_strategy as allocate_strategy
from controller.scheduler.numaresource.args import MOST_ALLOCATED, NodeNUMAResourceArgs
from controller.scheduler.numaresource.policy import (
    CPURequest,
    NodeCPUBindPolicy,
    NodePlan,
    NUMATopologyPolicy,
    Rejection,
    node_cpu_bind_policy,
    plan,
    prepare,
)
from controller.scheduler.numaresource.status import (
    FINISHED_PHASES,
    ResourceStatus,
    ResourceStatusError,
    encode_resource_status,
    read_pod_resource_status,
)
from controller.scheduler.numaresource.topology import CPUTopology, node_topology
from controller.scheduler.podinfo import pod_key

if TYPE_CHECKING:
    from controller.scheduler.nodetable import NodeTable
    from controller.scheduler.podinfo import PodInfo
    from controller.store.snapshots import Snapshot

__all__ = ["NAME", "NodeNUMAResource", "NodeNUMAResourcePluginArgs"]

NAME = "NodeNUMAResource"

_CODES = {
    "Unschedulable": fw.Code.UNSCHEDULABLE,
    "UnschedulableAndUnresolvable": fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
    "Error": fw.Code.ERROR,
}
#: QoS classes whose prod pods may have CPUs bound.
_POD_KIND = default_registry().for_type(Pod)
_BINDING_QOS = frozenset({"LSE", "LSR"})
_FORCING = frozenset({NodeCPUBindPolicy.FULL_PCPUS_ONLY, NodeCPUBindPolicy.SPREAD_BY_PCPUS})
#: NUMA topology policies under which a pod's CPUs all come from one NUMA node.
_SINGLE_NODE = frozenset({NUMATopologyPolicy.SINGLE_NUMA_NODE, NUMATopologyPolicy.RESTRICTED})


class NodeNUMAResourcePluginArgs(fw.PluginArgs, NodeNUMAResourceArgs):
    """The plugin's args: :class:`~controller.scheduler.numaresource.args.NodeNUMAResourceArgs`
    (``defaultCPUBindPolicy: FullPCPUs``, LeastAllocated cpu 1 / memory 1 scoring)."""


@dataclass(slots=True)
class _PodState:
    request: CPURequest
    #: Row -> (plan, CPUs) for the rows where the pod gets bound CPUs.
    choices: dict[int, tuple[NodePlan, frozenset[int]]] = field(default_factory=dict)
    #: The CPUs of the row Reserve took (empty: none bound).
    chosen: frozenset[int] = frozenset()
    chosen_node: str = ""

    @property
    def handled(self) -> bool:
        return self.request.bind or bool(self.request.numa_policy)


class NodeNUMAResource:
    """See the module docstring."""

    name = NAME
    #: Score: a weighted mean of per-resource scores of 0..100 (see the framework).
    scores_bounded = True
    #: PreFilter Skip: no bind request and no NUMA policy for the pod; nothing to filter,
    #: score, hold or write for it (see the framework).
    pre_filter_skip_is_final = True

    def __init__(self, args: NodeNUMAResourcePluginArgs) -> None:
        self.args: NodeNUMAResourceArgs = args
        self._node_view: Sequence[object] | None = None
        self._nodes: dict[str, Node] = {}
        self._pod_view: Sequence[Object] | None = None
        #: uid -> bound, unfinished pod carrying a resource-status annotation.
        self._held: dict[str, Pod] = {}
        #: uid -> the refusal of its annotation already handed out; and those not yet.
        self._refused: dict[str, str] = {}
        self._warnings: list[tuple[Pod, str]] = []
        #: Node name -> uid -> assigned pod holding a cpuset.
        self._by_node: dict[str, dict[str, Pod]] = {}
        #: uid -> (node, CPUs) of pods this plugin reserved and the store does not show yet.
        self._assumed: dict[str, tuple[str, frozenset[int]]] = {}
        #: The node names ``_forcing`` was computed for, and per row: the node's label forces
        #: binding.
        self._forcing_names: tuple[str, ...] | None = None
        self._forcing = np.zeros(0, dtype=np.bool_)
        self._any_forcing = False

    # -- cluster state ---------------------------------------------------------------------

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        kinds = default_registry()
        before = self._nodes
        changed = self._sync_nodes(snapshot.objects(kinds.for_type(Node)))
        # A node's CPUs changed, or a node came or went: the held cpusets are checked again.
        recheck = changed or (self._nodes is not before and self._nodes.keys() != before.keys())
        self._sync_pods(snapshot, snapshot.objects(kinds.for_type(Pod)), recheck)
        return changed

    def _sync_nodes(self, nodes: Sequence[object]) -> bool:
        if nodes is self._node_view:
            return False
        self._node_view = nodes
        changed = False
        seen: dict[str, Node] = {}
        for obj in nodes:
            node = cast("Node", obj)
            name = node.metadata.name
            seen[name] = node
            before = self._nodes.get(name)
            if before is not None and before is not node:
                key = k.ANNOTATION_NODE_CPU_TOPOLOGY
                if before.metadata.annotations.get(key) != node.metadata.annotations.get(key):
                    changed = True
        self._nodes = seen
        self._forcing_names = None
        return changed

    def _sync_pods(self, snapshot: Snapshot, pods: Sequence[Object], recheck: bool) -> None:
        """Take the pods changed since the last sync (every pod when the snapshot no longer
        knows which); ``recheck``: the nodes' CPUs changed, so every held cpuset is checked
        against them again."""
        if pods is self._pod_view and not recheck:
            return
        since, self._pod_view = self._pod_view, pods
        changes = snapshot.changes(_POD_KIND, since) if since is not None else None
        if changes is None:  # every pod
            self._held = {}
            changes = [(None, obj) for obj in pods]
        held = self._held
        touched = recheck
        for before, _ in changes:
            if isinstance(before, Pod):
                touched |= held.pop(before.metadata.uid or pod_key(before), None) is not None
        for _, obj in changes:
            if obj is None:
                continue
            pod = cast("Pod", obj)
            if not pod.spec.node_name:
                continue
            uid = pod.metadata.uid or pod_key(pod)
            self._assumed.pop(uid, None)
            if pod.status.phase in FINISHED_PHASES:
                continue
            if k.ANNOTATION_RESOURCE_STATUS in pod.metadata.annotations:
                held[uid] = pod
                touched = True
        if touched:
            self._regroup()

    def _regroup(self) -> None:
        """``_by_node`` and ``_refused`` from the held pods (few: those with a cpuset)."""
        by_node: dict[str, dict[str, Pod]] = {}
        refused: dict[str, str] = {}
        for uid, pod in self._held.items():
            node = pod.spec.node_name
            problem = self._refusal(pod, node)
            if problem is None:
                by_node.setdefault(node, {})[uid] = pod
                continue
            refused[uid] = problem
            if self._refused.get(uid) != problem:
                self._warnings.append((pod, problem))
        self._by_node = by_node
        self._refused = refused

    def _refusal(self, pod: Pod, node_name: str) -> str | None:
        """Why the bound pod's ``resource-status`` holds nothing; ``None`` when it holds."""
        found = read_pod_resource_status(pod)
        error: ValueError | None = found if isinstance(found, ResourceStatusError) else None
        node = self._nodes.get(node_name)
        if isinstance(found, ResourceStatus) and node is not None:
            topology = node_topology(node)
            if topology.valid:
                try:
                    check_cpus(found.cpuset, topology.ids, "cpuset")
                except CpuListError as err:
                    error = err
        if error is None:
            return None
        return f"annotation {k.ANNOTATION_RESOURCE_STATUS} ignored: {error}"

    def take_warnings(self) -> list[tuple[Pod, str]]:
        taken, self._warnings = self._warnings, []
        return taken

    def _node(self, table: NodeTable, row: int) -> Node:
        name = table.names[row]
        return self._nodes.get(name) or table.nodes[row]

    def _forcing_rows(self, table: NodeTable) -> fw.Mask:
        if self._forcing_names is not table.names:
            self._forcing = np.array(
                [node_cpu_bind_policy(self._node(table, r)) in _FORCING for r in table.all_rows],
                dtype=np.bool_,
            )
            self._any_forcing = bool(self._forcing.any())
            self._forcing_names = table.names
        return self._forcing

    def _forces_any(self, table: NodeTable) -> bool:
        """Some node's ``cpu-bind-policy`` label forces binding."""
        if self._forcing_names is not table.names:
            self._forcing_rows(table)
        return self._any_forcing

    # -- extension points ------------------------------------------------------------------

    def pre_filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable
    ) -> fw.Status | fw.NodeSubset:
        meta = pod.pod.metadata
        if (
            meta.labels.get(k.LABEL_QOS_CLASS) not in _BINDING_QOS
            and k.ANNOTATION_RESOURCE_SPEC not in meta.annotations
            and k.ANNOTATION_NUMA_TOPOLOGY_SPEC not in meta.annotations
            and not self._forces_any(table)
        ):
            # What prepare would find: nothing to bind, no NUMA policy, no node that forces.
            return fw.SKIP
        request = prepare(pod.pod, self.args)
        if request is None:
            return fw.SKIP
        if isinstance(request, Rejection):
            return fw.Status.of(_CODES[request.code], request.reason, plugin=NAME)
        pod_state = _PodState(request)
        state.write(NAME, pod_state)
        if not pod_state.handled and not (request.cpu > 0 and self._forces_any(table)):
            return fw.SKIP
        return fw.SUCCESS

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        pod_state = state.get(NAME, _PodState)
        if pod_state is None:
            return fw.FilterResult.accept(candidates)
        request = pod_state.request
        checked = candidates if pod_state.handled else candidates & self._forcing_rows(table)
        rows = np.flatnonzero(checked)
        if not rows.size:
            return fw.FilterResult.accept(candidates)
        rejected: dict[tuple[str, fw.Code], list[int]] = {}
        for row in rows.tolist():
            node = self._node(table, row)
            topology = node_topology(node)
            verdict = plan(request, node, topology)
            if isinstance(verdict, Rejection):
                rejected.setdefault((verdict.reason, _CODES[verdict.code]), []).append(row)
                continue
            if not verdict.bind:
                continue
            cpus = self._allocate(node, topology, request, verdict)
            if cpus is None:
                rejected.setdefault((NOT_ENOUGH_CPUS, fw.Code.UNSCHEDULABLE), []).append(row)
            else:
                pod_state.choices[row] = (verdict, cpus)
        if not rejected:
            return fw.FilterResult.accept(candidates)
        passed = candidates.copy()
        rejections = []
        for (reason, code), failed in rejected.items():
            indices = np.asarray(failed, dtype=np.intp)
            passed[indices] = False
            rejections.append(fw.Rejection(reason, code, indices))
        return fw.FilterResult(passed, tuple(rejections))

    def _allocate(
        self, node: Node, topology: CPUTopology, request: CPURequest, verdict: NodePlan
    ) -> frozenset[int] | None:
        name = node.metadata.name
        held: set[int] = set()
        for assumed_node, cpus in self._assumed.values():
            if assumed_node == name:
                held.update(cpus)
        return allocate(
            topology,
            self._by_node.get(name, {}).values(),
            request.cpus_needed,
            verdict.policy,
            allocate_strategy(node, self.args),
            exclusive=request.exclusive_policy,
            reserved=held,
            single_numa_node=verdict.numa_policy in _SINGLE_NODE,
        )

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        pod_state = state.get(NAME, _PodState)
        if pod_state is None or not pod_state.handled:
            return fw.zero_scores(len(feasible))
        strategy = self.args.scoring_strategy
        total = np.zeros(len(feasible), dtype=np.int64)
        weights = 0
        for resource, weight in strategy.weights.items():
            column = table.columns.get(resource)
            if column is None:
                continue
            allocatable = table.allocatable[feasible, column]
            requested = table.requested[feasible, column] + int(pod.vector[column])
            safe = np.maximum(allocatable, 1)
            if strategy.type == MOST_ALLOCATED:
                part = np.minimum(requested, allocatable) * fw.MAX_NODE_SCORE // safe
            else:
                part = np.maximum(allocatable - requested, 0) * fw.MAX_NODE_SCORE // safe
            total += weight * np.where(allocatable > 0, part, 0)
            weights += weight
        return total // weights if weights else total

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        pod_state = state.get(NAME, _PodState)
        if pod_state is None:
            return fw.SUCCESS
        choice = pod_state.choices.get(row)
        if choice is None:
            return fw.SUCCESS
        name = table.names[row]
        pod_state.chosen = choice[1]
        pod_state.chosen_node = name
        self._assumed[pod.uid] = (name, choice[1])
        return fw.SUCCESS

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        self._assumed.pop(pod.uid, None)
        pod_state = state.get(NAME, _PodState)
        if pod_state is not None:
            pod_state.chosen = frozenset()
            pod_state.chosen_node = ""

    def pre_bind(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> fw.PreBindResult:
        pod_state = state.get(NAME, _PodState)
        if pod_state is None or not pod_state.chosen:
            return fw.PreBindResult()
        topology = node_topology(self._node(table, row))
        status = ResourceStatus(
            cpuset=pod_state.chosen,
            numa_node_resources=numa_node_resources(topology, pod_state.chosen),
        )
        return fw.PreBindResult(
            annotations={k.ANNOTATION_RESOURCE_STATUS: encode_resource_status(status)}
        )
