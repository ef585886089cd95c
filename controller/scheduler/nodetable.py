"""The cluster's schedulable state as numpy arrays: one row per node, one column per resource.

A :class:`NodeTable` is built from the Node objects and the pods assigned to them
(``spec.nodeName`` set, not Succeeded/Failed). Rows are the nodes sorted by name, so a row
number is stable for a given node set and ties broken by "lowest row" are broken by name.

Columns: ``cpu``, ``memory``, ``ephemeral-storage``, ``pods`` first, then every other
resource any node advertises, sorted. Amounts are canonical integers (millicores, bytes,
units). Arrays:

- ``allocatable`` [N, R]: the node's allocatable (capacity when it reports none);
- ``requested`` [N, R]: the sum of the requests of the pods accounted on the node (the
  ``pods`` column stays 0: ``pod_count`` counts pods);
- ``nonzero_requested`` [N, 2]: cpu and memory requested with kube-scheduler's defaults for a
  pod that requests none (100m, 200Mi), which scoring uses so empty pods still spread;
- ``pod_count`` [N] (a node whose allocatable names no ``pods`` takes any number);
- derived and kept in step: ``free`` (``allocatable - requested``), ``free_pods``,
  ``nonzero_free`` (cpu/memory ``allocatable - nonzero_requested``, float64 for fast exact
  scoring) and ``nonzero_free_pct`` (the same times 100, a score's numerator).

Per-node attributes the non-resource plugins read are grouped: nodes with the same labels
share a ``label_group`` (``label_sets[g]`` are those labels), nodes with the same taints a
``taint_group`` (``taint_sets[g]``), so a plugin evaluates a pod against each distinct set
once and gathers the answer per row with ``answer[table.label_group]``. Labels that differ on
every node by convention (:data:`PER_NODE_LABELS`: ``kubernetes.io/hostname``) are left out
of the label groups; a plugin whose pod names one of them evaluates node by node.

The scheduler loop owns the table and changes it in place (:meth:`assume`, :meth:`forget`,
:meth:`add_pod`, :meth:`remove_pod`, :meth:`replace_nodes`); plugins only read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apis import constants as k
from apis.core import Node, Pod, Taint, pod_requests

__all__ = [
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "FIRST_COLUMNS",
    "PER_NODE_LABELS",
    "NodeTable",
    "Placed",
    "is_assigned",
    "request_layout",
    "request_vector",
]

#: The columns every table starts with, in this order.
FIRST_COLUMNS = (k.RESOURCE_CPU, k.RESOURCE_MEMORY, k.RESOURCE_EPHEMERAL_STORAGE, k.RESOURCE_PODS)
CPU, MEMORY, EPHEMERAL_STORAGE, PODS = 0, 1, 2, 3

#: kube-scheduler's stand-ins, for scoring only, for a pod that requests no cpu / memory.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

#: The scale of ``nonzero_free_pct`` (the framework's ``MAX_NODE_SCORE``).
PERCENT = 100

#: The pod slots of a node whose allocatable names no ``pods``.
UNLIMITED_PODS = 1 << 40

#: Label keys left out of ``label_sets`` because each node has its own value.
PER_NODE_LABELS = frozenset({k.LABEL_HOSTNAME})

Vector = NDArray[np.int64]
LabelKey = tuple[tuple[str, str], ...]
TaintKey = tuple[tuple[str, str, str], ...]


def is_assigned(pod: Pod) -> bool:
    """Bound to a node and still holding its resources."""
    return bool(pod.spec.node_name) and not pod.is_terminated


def request_vector(
    amounts: Mapping[str, int], columns: Mapping[str, int]
) -> tuple[Vector, tuple[str, ...]]:
    """``amounts`` as a vector over ``columns``, and the requested names no column has.

    The ``pods`` column is left 0 (a pod counts in ``pod_count``); zero amounts of an
    unknown resource are not missing.
    """
    vector = np.zeros(len(columns), dtype=np.int64)
    missing: list[str] = []
    for name, amount in amounts.items():
        column = columns.get(name)
        if column is None:
            if amount > 0:
                missing.append(name)
        elif column != PODS:
            vector[column] = amount
    return vector, tuple(sorted(missing))


def request_layout(
    amounts: Mapping[str, int], columns: Mapping[str, int]
) -> tuple[Vector, tuple[str, ...], tuple[tuple[int, int], ...]]:
    """:func:`request_vector`, plus the (column, amount) pairs of the positive amounts in
    column order (what a fit check walks)."""
    vector, missing = request_vector(amounts, columns)
    demands = sorted(
        (column, amount)
        for name, amount in amounts.items()
        if amount and (column := columns.get(name)) is not None and column != PODS
    )
    return vector, missing, tuple(demands)


def nonzero_pair(amounts: Mapping[str, int]) -> tuple[int, int]:
    """cpu and memory with the scoring defaults standing in for a missing request."""
    return (
        amounts.get(k.RESOURCE_CPU, 0) or DEFAULT_MILLI_CPU_REQUEST,
        amounts.get(k.RESOURCE_MEMORY, 0) or DEFAULT_MEMORY_REQUEST,
    )


@dataclass(frozen=True, slots=True)
class Placed:
    """A pod accounted on a node: the node's name and what the pod adds there."""

    node: str
    requests: Vector
    nonzero: tuple[int, int]


def _group_labels(node: Node) -> dict[str, str]:
    labels = node.metadata.labels
    if PER_NODE_LABELS.isdisjoint(labels):
        return labels
    return {key: value for key, value in labels.items() if key not in PER_NODE_LABELS}


def _label_key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def _taint_key(node: Node) -> TaintKey:
    return tuple((t.key, t.value, t.effect) for t in node.spec.taints)


def _groups(keys: Sequence[object]) -> tuple[NDArray[np.intp], list[int]]:
    """Group number per row, and the first row of each group."""
    seen: dict[object, int] = {}
    firsts: list[int] = []
    group = np.empty(len(keys), dtype=np.intp)
    for row, key in enumerate(keys):
        number = seen.get(key)
        if number is None:
            number = seen[key] = len(firsts)
            firsts.append(row)
        group[row] = number
    return group, firsts


def _rows_by_group(group: NDArray[np.intp], count: int) -> tuple[NDArray[np.intp], ...]:
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(count + 1))
    return tuple(order[bounds[g] : bounds[g + 1]] for g in range(count))


class NodeTable:
    """See the module docstring."""

    def __init__(self, nodes: Iterable[Node] = (), pods: Iterable[Pod] = ()) -> None:
        self._placed: dict[str, Placed] = {}
        self.replace_nodes(nodes)
        for pod in pods:
            self.add_pod(pod)

    # -- nodes -----------------------------------------------------------------------------

    def replace_nodes(self, nodes: Iterable[Node]) -> None:
        """Take a new node set; pods already accounted stay accounted where their node still
        is (their request vectors are reused when the columns did not change)."""
        ordered = sorted(nodes, key=lambda n: n.metadata.name)
        extra = sorted({name for n in ordered for name in n.allocatable} - set(FIRST_COLUMNS))
        column_names = (*FIRST_COLUMNS, *extra)
        old_columns = getattr(self, "column_names", None)
        self.nodes: tuple[Node, ...] = tuple(ordered)
        self.names: tuple[str, ...] = tuple(n.metadata.name for n in ordered)
        self.index: dict[str, int] = {name: row for row, name in enumerate(self.names)}
        self.column_names: tuple[str, ...] = column_names
        self.columns: dict[str, int] = {name: col for col, name in enumerate(column_names)}
        size = len(ordered)
        # Column-major: plugins read whole columns (one resource over every node).
        shape = (size, len(column_names))
        self.allocatable: NDArray[np.int64] = np.zeros(shape, np.int64, order="F")
        for row, node in enumerate(ordered):
            for name, amount in node.allocatable.items():
                self.allocatable[row, self.columns[name]] = amount
        #: ``max(allocatable, 1)``: a divisor for ratios of allocatable.
        self.divisor: NDArray[np.int64] = np.maximum(self.allocatable, 1)
        #: Per column: whether every node has some of it.
        self.everywhere: tuple[bool, ...] = tuple(
            bool((self.allocatable[:, c] > 0).all()) for c in range(len(column_names))
        )
        self.requested: NDArray[np.int64] = np.zeros(shape, np.int64, order="F")
        self.nonzero_requested: NDArray[np.int64] = np.zeros((size, 2), np.int64, order="F")
        self.pod_count: NDArray[np.int64] = np.zeros(size, np.int64)
        # Kept in step with the three above, so filters and scores need no subtraction:
        #: ``allocatable - requested``.
        self.free: NDArray[np.int64] = self.allocatable.copy(order="F")
        #: ``allocatable.pods - pod_count``; a node that states no ``pods`` at all (a
        #: hand-written scenario's node; a kubelet always states it) is not limited.
        self.free_pods: NDArray[np.int64] = np.array(
            [n.allocatable.get(k.RESOURCE_PODS, UNLIMITED_PODS) for n in ordered], np.int64
        )
        #: How many nodes have no pod slot left (a filter skips its check at 0).
        self.full_nodes: int = int(np.count_nonzero(self.free_pods <= 0))
        #: cpu/memory ``allocatable - nonzero_requested`` as float64 (exact below 2**53),
        #: for scores: float division is much faster than integer division in numpy.
        self.nonzero_free: NDArray[np.float64] = self.allocatable[:, :2].astype(
            np.float64, order="F"
        )
        #: ``nonzero_free * MAX_NODE_SCORE`` (100), also float64 and exact: the numerator of
        #: a LeastAllocated score, kept so scoring needs no multiplication per pod.
        self.nonzero_free_pct: NDArray[np.float64] = self.nonzero_free * float(PERCENT)
        #: ``divisor`` as float64.
        self.divisor_f: NDArray[np.float64] = self.divisor.astype(np.float64, order="F")
        self.unschedulable: NDArray[np.bool_] = np.array(
            [n.spec.unschedulable for n in ordered], dtype=np.bool_
        )
        self.cordoned: bool = bool(self.unschedulable.any())
        #: Every row as a read-only mask and as indices (the cycle's starting candidates).
        self.all_mask: NDArray[np.bool_] = np.ones(size, dtype=np.bool_)
        self.all_mask.flags.writeable = False
        self.all_rows: NDArray[np.intp] = np.arange(size, dtype=np.intp)
        self.all_rows.flags.writeable = False
        grouped = [_group_labels(n) for n in ordered]
        self.label_group, firsts = _groups([_label_key(labels) for labels in grouped])
        self.label_sets: tuple[Mapping[str, str], ...] = tuple(grouped[r] for r in firsts)
        self.taint_group, firsts = _groups([_taint_key(n) for n in ordered])
        self.taint_sets: tuple[tuple[Taint, ...], ...] = tuple(
            ordered[r].spec.taints for r in firsts
        )
        self.tainted: bool = any(self.taint_sets)
        #: The rows of each taint group (ascending).
        self.taint_rows: tuple[NDArray[np.intp], ...] = _rows_by_group(
            self.taint_group, len(self.taint_sets)
        )
        placed, self._placed = self._placed, {}
        same_columns = old_columns == column_names
        for uid, record in placed.items():
            if record.node not in self.index:
                continue
            if not same_columns:
                record = self._rebase(record, old_columns or ())
            self._account(uid, record)

    def _rebase(self, record: Placed, old_columns: Sequence[str]) -> Placed:
        amounts = {old_columns[c]: int(v) for c, v in enumerate(record.requests) if v}
        vector, _ = request_vector(amounts, self.columns)
        return Placed(record.node, vector, record.nonzero)

    # -- pods ------------------------------------------------------------------------------

    def _change(self, row: int, record: Placed, sign: int) -> None:
        requests = record.requests if sign > 0 else -record.requests
        cpu, memory = record.nonzero
        self.requested[row] += requests
        self.free[row] -= requests
        self.nonzero_requested[row, 0] += sign * cpu
        self.nonzero_requested[row, 1] += sign * memory
        self.nonzero_free[row, 0] -= sign * cpu
        self.nonzero_free[row, 1] -= sign * memory
        self.nonzero_free_pct[row, 0] -= sign * PERCENT * cpu
        self.nonzero_free_pct[row, 1] -= sign * PERCENT * memory
        self.pod_count[row] += sign
        before = int(self.free_pods[row])
        self.free_pods[row] = before - sign
        if sign > 0 and before == 1:
            self.full_nodes += 1
        elif sign < 0 and before == 0:
            self.full_nodes -= 1

    def _account(self, uid: str, record: Placed) -> None:
        self._change(self.index[record.node], record, 1)
        self._placed[uid] = record

    def placed(self, uid: str) -> Placed | None:
        return self._placed.get(uid)

    def add_pod(self, pod: Pod) -> bool:
        """Account an assigned pod (replacing its earlier accounting); False when it holds
        nothing here (not assigned, terminated, or on a node the table lacks)."""
        uid = pod.metadata.uid or f"{pod.metadata.namespace}/{pod.metadata.name}"
        self.remove_pod(uid)
        if not is_assigned(pod) or pod.spec.node_name not in self.index:
            return False
        amounts = pod_requests(pod)
        vector, _ = request_vector(amounts, self.columns)
        self._account(uid, Placed(pod.spec.node_name, vector, nonzero_pair(amounts)))
        return True

    def remove_pod(self, uid: str) -> bool:
        """Stop accounting a pod; False when it was not accounted."""
        record = self._placed.pop(uid, None)
        if record is None:
            return False
        row = self.index.get(record.node)
        if row is not None:
            self._change(row, record, -1)
        return True

    def assume(self, uid: str, requests: Vector, nonzero: tuple[int, int], row: int) -> None:
        """Account a pod the scheduler just placed on ``row`` (before its binding is written)."""
        self.remove_pod(uid)
        self._account(uid, Placed(self.names[row], requests, nonzero))

    def forget(self, uid: str) -> None:
        """Undo :meth:`assume` (binding failed or was abandoned)."""
        self.remove_pod(uid)

    # -- reads -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.names)

    @property
    def accounted(self) -> int:
        return len(self._placed)
