"""``NodeAffinity``: ``spec.nodeSelector`` and required node affinity as a filter, preferred
node affinity as a score.

A node passes when it carries every ``nodeSelector`` label and, with required affinity, at
least one of its ``nodeSelectorTerms`` matches (a term matches when all its
``matchExpressions`` and ``matchFields`` hold; an empty term matches nothing). Operators:
``In``, ``NotIn`` (also true without the label), ``Exists``, ``DoesNotExist``, ``Gt``/``Lt``
(the label and the single value compared as integers; false when either is not one). The
only field is ``metadata.name`` (``In``/``NotIn``). A failing node gets
``node(s) didn't match Pod's node affinity/selector`` (UnschedulableAndUnresolvable).

Score: the sum of the weights of the preferred terms a node matches, normalized so the best
node gets 100. Evaluated once per distinct label set (``table.label_group``); only a pod
using ``matchFields`` or a per-node label (``kubernetes.io/hostname``) is evaluated node by
node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from apis.core import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import PER_NODE_LABELS, NodeTable
from controller.scheduler.podinfo import PodInfo

__all__ = [
    "NodeAffinity",
    "requirement_matches",
    "selector_matches",
    "term_matches",
]

NAME = "NodeAffinity"
MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NAME_FIELD = "metadata.name"


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One ``matchExpressions`` entry against a node's labels."""
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        have, want = _integer(value), _integer(req.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _field_matches(req: NodeSelectorRequirement, node_name: str) -> bool:
    if req.key != NAME_FIELD:
        return False
    if req.operator == "In":
        return node_name in req.values
    if req.operator == "NotIn":
        return node_name not in req.values
    return False


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], node_name: str) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    return all(requirement_matches(r, labels) for r in term.match_expressions) and all(
        _field_matches(r, node_name) for r in term.match_fields
    )


def selector_matches(selector: NodeSelector, labels: Mapping[str, str], node_name: str) -> bool:
    return any(term_matches(t, labels, node_name) for t in selector.node_selector_terms)


def _per_node(pod: PodInfo) -> bool:
    """Whether the pod's terms read something the label groups leave out."""
    if not PER_NODE_LABELS.isdisjoint(pod.node_selector):
        return True
    terms = pod.required_affinity.node_selector_terms if pod.required_affinity else ()
    preferred = tuple(p.preference for p in pod.preferred_affinity)
    return any(
        t.match_fields or any(r.key in PER_NODE_LABELS for r in t.match_expressions)
        for t in (*terms, *preferred)
    )


def _per_row(
    table: NodeTable, rows: fw.Rows, pod: PodInfo, fn: Callable[[Mapping[str, str], str], int]
) -> fw.Scores:
    """``fn(labels, name)`` for ``rows``: once per label group, or per row with fields."""
    if _per_node(pod):
        nodes = table.nodes
        return np.fromiter(
            (fn(nodes[r].metadata.labels, nodes[r].metadata.name) for r in rows.tolist()),
            dtype=np.int64,
            count=len(rows),
        )
    groups = table.label_group[rows]
    count = len(table.label_sets)
    wanted = range(count) if count <= 64 else np.unique(groups).tolist()
    per_group = np.zeros(count, dtype=np.int64)
    for group in wanted:
        per_group[group] = fn(table.label_sets[group], "")
    return per_group[groups]


class NodeAffinity:
    """Filter, PreScore and Score; see the module docstring."""

    name = NAME

    def __init__(self, args: fw.NoArgs) -> None:
        self.args = args

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        selector, required = pod.node_selector, pod.required_affinity
        if not selector and required is None:
            return fw.FilterResult(candidates)

        def fits(labels: Mapping[str, str], name: str) -> int:
            if any(labels.get(key) != value for key, value in selector.items()):
                return 0
            return int(required is None or selector_matches(required, labels, name))

        if _per_node(pod):
            rows = np.flatnonzero(candidates)
            ok = _per_row(table, rows, pod, fits).astype(np.bool_)
            if ok.all():
                return fw.FilterResult(candidates)
            passed = np.zeros_like(candidates)
            passed[rows[ok]] = True
            rejection = fw.Rejection(MISMATCH, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, rows[~ok])
            return fw.FilterResult(passed, (rejection,))
        # Once per label group, then one mask over every row.
        per_group = np.fromiter(
            (bool(fits(labels, "")) for labels in table.label_sets),
            dtype=np.bool_,
            count=len(table.label_sets),
        )
        if per_group.all():
            return fw.FilterResult(candidates)
        mismatched = ~per_group[table.label_group]
        mismatched &= candidates
        if not np.count_nonzero(mismatched):
            return fw.FilterResult(candidates)
        rejection = fw.Rejection(
            MISMATCH, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, np.flatnonzero(mismatched)
        )
        return fw.FilterResult(candidates & ~mismatched, (rejection,))

    def pre_score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Status:
        return fw.SUCCESS if pod.preferred_affinity else fw.SKIP

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        terms = pod.preferred_affinity

        def weight(labels: Mapping[str, str], name: str) -> int:
            return sum(t.weight for t in terms if term_matches(t.preference, labels, name))

        return _per_row(table, feasible, pod, weight)

    def normalize(self, state: fw.CycleState, pod: PodInfo, scores: fw.Scores) -> fw.Scores:
        return fw.default_normalize(scores)
