"""The ``nodemetric`` control loop: koord-manager's nodemetric controller (agent-spec §7.2;
Kubernetes mode, under the Lease ``koordinator-manager``).

Every Node has a NodeMetric of its name whose ``spec.metricCollectPolicy`` is what the node's
colocation strategy says (:func:`collect_policy`, from ``slo-controller-config``'s
``colocation-config`` as :class:`~.colocation.ColocationSource` resolves it per node; without
it Koordinator's defaults: 300 s aggregation, a report every 60 s, windows 5m/10m/30m, memory
``usageWithoutPageCache``): a node without one gets it, a changed configuration (or a node's
changed labels) rewrites the specs that differ, and the NodeMetric of a deleted Node is
deleted. The status is the agent's: it is never written here (a spec update sends the spec
alone, conditional on the version read).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from apis.core import Node
from apis.kinds import Kind, default_registry
from apis.meta import ObjectMeta
from apis.slo import ColocationStrategy, NodeMetric, NodeMetricCollectPolicy, NodeMetricSpec
from controller.errors import StoreError
from controller.slo.colocation import ColocationSource
from controller.store.assumed import Outbox
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops lists the loops: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["RETRY_SECONDS", "NodeMetricController", "collect_policy", "metric_spec"]

log = logging.getLogger(__name__)

#: Seconds before writes that failed are tried again.
RETRY_SECONDS: Final = 1.0


def collect_policy(strategy: ColocationStrategy) -> NodeMetricCollectPolicy:
    """The NodeMetric collect policy of a colocation strategy."""
    return NodeMetricCollectPolicy(
        aggregate_duration_seconds=strategy.metric_aggregate_duration_seconds,
        report_interval_seconds=strategy.metric_report_interval_seconds,
        node_aggregate_policy=strategy.metric_aggregate_policy,
        node_memory_collect_policy=strategy.metric_memory_collect_policy or "",
    )


def metric_spec(strategy: ColocationStrategy) -> NodeMetricSpec:
    return NodeMetricSpec(metric_collect_policy=collect_policy(strategy))


class NodeMetricController:
    """The ``nodemetric`` control loop (see the module docstring)."""

    name = "nodemetric"

    def __init__(self) -> None:
        self._source = ColocationSource()
        #: the NodeMetric writes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=(default_registry().for_type(NodeMetric),))
        self._seen: tuple[object, object, int] | None = None
        #: node name -> (Node, NodeMetric) last found in agreement under the configuration
        self._agreed: dict[str, tuple[Node, NodeMetric]] = {}
        self._version = -1
        #: a write failed: try again after RETRY_SECONDS
        self._retry = False

    def reconcile(self, ctx: LoopContext) -> float | None:
        self._retry = False  # a result arriving now may set it
        store = ctx.store
        registry = store.registry
        snapshot = self._outbox.over(store.snapshot())
        self._source.read(registry, snapshot)
        version = self._source.version
        if version != self._version:
            self._version, self._agreed = version, {}
        kind = registry.for_type(NodeMetric)
        nodes = snapshot.objects(registry.for_type(Node))
        metrics = snapshot.objects(kind)
        seen = (nodes, metrics, version)
        if self._seen is not None and all(a is b for a, b in zip(seen, self._seen, strict=True)):
            return None
        self._seen = seen
        writes: list[Write] = []
        creates = updates = 0
        names: set[str] = set()
        for node in nodes:
            if not isinstance(node, Node):
                continue
            name = node.metadata.name
            names.add(name)
            found = snapshot.get(kind, name)
            current = found if isinstance(found, NodeMetric) else None
            agreed = self._agreed.get(name)
            if agreed is not None and agreed[0] is node and agreed[1] is current:
                continue
            spec = metric_spec(self._source.for_node(node))
            if current is None:
                writes.append(Write.create(NodeMetric(metadata=ObjectMeta(name=name), spec=spec)))
                creates += 1
            elif current.spec != spec:
                writes.append(Write.update(msgspec.structs.replace(current, spec=spec)))
                updates += 1
            else:
                self._agreed[name] = (node, current)
        if len(metrics) > len(names) - creates or len(self._agreed) > len(names):
            writes.extend(self._gone(kind, names, metrics))
        if creates or updates:
            log.info("NodeMetrics written: %d created, %d updated", creates, updates)
        self._outbox.send(store, writes, self._written)
        return RETRY_SECONDS if self._retry else None

    def _gone(self, kind: Kind, names: set[str], metrics: Sequence[object]) -> list[Write]:
        """Deletes of the NodeMetrics of nodes that are gone; what was kept for them goes."""
        for name in [n for n in self._agreed if n not in names]:
            del self._agreed[name]
        self._source.forget(names)
        writes: list[Write] = []
        for metric in metrics:
            if isinstance(metric, NodeMetric) and metric.metadata.name not in names:
                writes.append(Write.delete_of(kind, metric))
                log.info("NodeMetric %s deleted: its node is gone", metric.metadata.name)
        return writes

    def _written(self, results: Sequence[Result]) -> None:
        failed = [r for r in results if isinstance(r, StoreError)]
        if failed:
            log.warning("NodeMetrics not written, trying again: %s", failed[0])
            self._seen = None
            self._retry = True
