"""The NodeMetric spec the agent follows (agent-spec §7.2).

``spec.metricCollectPolicy`` of the node's NodeMetric is the controller's (or the user's) to
write; the agent reads it and collects and reports under it, as koordlet does. The controller
sends it on the retained ``koordpy/v1/nodes/{node}/nodemetricspec`` topic (a NodeMetric with
metadata and spec only; an empty payload once there is none). :func:`followed` lays it over the
``[metrics]`` section: each field the spec sets wins (``aggregateDurationSeconds``,
``reportIntervalSeconds``, ``nodeAggregatePolicy.durations``, ``nodeMemoryCollectPolicy``), a
field it leaves unset or sets to a value koordlet could not use (not positive, an unknown
memory policy) keeps the agent's own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, get_args

import msgspec

from agent.config import MemoryPolicy, MetricsSection
from apis import codec
from apis.errors import ApiError
from apis.slo import NodeMetric, NodeMetricSpec
from runtime.bus import Bus, node_topic

__all__ = ["LEAF", "NodeMetricSpecFollower", "followed"]

log = logging.getLogger(__name__)

#: The bus leaf the controller sends a node's NodeMetric spec on.
LEAF: Final = "nodemetricspec"
_MEMORY_POLICIES: Final[frozenset[str]] = frozenset(get_args(MemoryPolicy))


def followed(settings: MetricsSection, spec: NodeMetricSpec | None) -> MetricsSection:
    """``settings`` with what ``spec.metricCollectPolicy`` sets laid over it (module doc)."""
    policy = spec.metric_collect_policy if spec is not None else None
    if policy is None:
        return settings
    changes: dict[str, object] = {}
    if policy.aggregate_duration_seconds is not None and policy.aggregate_duration_seconds > 0:
        changes["aggregate_duration"] = float(policy.aggregate_duration_seconds)
    if policy.report_interval_seconds is not None and policy.report_interval_seconds > 0:
        changes["report_interval"] = float(policy.report_interval_seconds)
    aggregate = policy.node_aggregate_policy
    if aggregate is not None and aggregate.durations:
        windows = tuple(d.seconds for d in aggregate.durations)
        if all(w > 0 for w in windows):
            changes["aggregate_durations"] = windows
    if policy.node_memory_collect_policy in _MEMORY_POLICIES:
        changes["memory_policy"] = policy.node_memory_collect_policy
    return msgspec.structs.replace(settings, **changes) if changes else settings


class NodeMetricSpecFollower:
    """A component keeping the latest NodeMetric spec the controller sent this node, or the
    spec of the NodeMetric ``watched`` returns (Kubernetes mode: the object a watch holds)."""

    def __init__(
        self,
        bus: Bus | None,
        node: str,
        *,
        watched: Callable[[], NodeMetric | None] | None = None,
    ) -> None:
        self.name = f"{LEAF}/{node}"
        self._bus = bus
        self._node = node
        self._watched = watched
        self._spec: NodeMetricSpec | None = None

    def current(self) -> NodeMetricSpec | None:
        if self._watched is not None:
            metric = self._watched()
            return metric.spec if metric is not None else None
        return self._spec

    def handle(self, payload: bytes) -> None:
        if not payload:
            self._spec = None
            return
        try:
            metric = codec.decode_json(payload, NodeMetric)
        except (ApiError, msgspec.ValidationError) as err:
            log.error("NodeMetric spec for %s refused, keeping the last one: %s", self._node, err)
            return
        if metric.spec != self._spec:
            log.info("NodeMetric spec for %s now %s", self._node, metric.spec)
        self._spec = metric.spec

    async def run(self) -> None:
        if self._bus is None:
            await asyncio.Event().wait()
            return
        with self._bus.subscribe(node_topic(self._node, LEAF)) as messages:
            async for message in messages:
                self.handle(message.payload)
