"""Nodes, pods and NodeMetrics for the LoadAwareScheduling tests.

Amounts are canonical integers: millicores for cpu, bytes for memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from apis import constants as k
from apis.core import (
    Container,
    Node,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from apis.duration import Duration
from apis.meta import Condition, ObjectMeta, OwnerReference
from apis.resources import ResourceList
from apis.slo import (
    AggregatedUsage,
    NodeMetric,
    NodeMetricCollectPolicy,
    NodeMetricInfo,
    NodeMetricSpec,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)

GIB = 1 << 30
MIB = 1 << 20
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def node(
    name: str = "n1",
    *,
    cpu: int = 32_000,
    memory: int = 128 * GIB,
    annotations: Mapping[str, str] | None = None,
) -> Node:
    return Node(
        metadata=ObjectMeta(name=name, annotations=dict(annotations or {})),
        status=NodeStatus(allocatable=ResourceList({"cpu": cpu, "memory": memory, "pods": 110})),
    )


def pod(
    name: str = "p",
    *,
    requests: Mapping[str, int] | None = None,
    limits: Mapping[str, int] | None = None,
    priority_class: str = "",
    scheduled_at: datetime | None = None,
    initialized_at: datetime | None = None,
    annotations: Mapping[str, str] | None = None,
    daemonset: bool = False,
    phase: str = "",
    node_name: str = "n1",
) -> Pod:
    """A one-container pod; ``scheduled_at`` sets a True PodScheduled condition."""
    labels = {k.LABEL_PRIORITY_CLASS: priority_class} if priority_class else {}
    owners = (
        (OwnerReference(api_version="apps/v1", kind="DaemonSet", name="ds", uid="u1"),)
        if daemonset
        else ()
    )
    conditions = []
    if scheduled_at is not None:
        conditions.append(
            Condition(type="PodScheduled", status="True", last_transition_time=scheduled_at)
        )
    if initialized_at is not None:
        conditions.append(
            Condition(type="Initialized", status="True", last_transition_time=initialized_at)
        )
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            labels=labels,
            annotations=dict(annotations or {}),
            owner_references=owners,
        ),
        spec=PodSpec(
            node_name=node_name,
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(
                        requests=ResourceList(requests or {}), limits=ResourceList(limits or {})
                    ),
                ),
            ),
        ),
        status=PodStatus(phase=phase, conditions=tuple(conditions)),
    )


def usage(amounts: Mapping[str, int]) -> ResourceMap:
    return ResourceMap(resources=ResourceList(amounts))


def aggregated(minutes: int, **by_type: Mapping[str, int]) -> AggregatedUsage:
    """One ``aggregatedNodeUsages`` entry: ``aggregated(5, p95={"cpu": 1000})``."""
    return AggregatedUsage(
        duration=Duration.from_seconds(minutes * 60),
        usage={kind: usage(amounts) for kind, amounts in by_type.items()},
    )


def metric(
    name: str = "n1",
    *,
    node_usage: Mapping[str, int] | None = None,
    updated_at: datetime | None = NOW,
    pods: Sequence[tuple[str, Mapping[str, int], str]] = (),
    system_usage: Mapping[str, int] | None = None,
    aggregates: Sequence[AggregatedUsage] = (),
    report_interval: int | None = None,
) -> NodeMetric:
    """A NodeMetric; ``pods`` are ``(name, usage, priority class)`` in namespace default."""
    policy = (
        NodeMetricCollectPolicy(report_interval_seconds=report_interval)
        if report_interval is not None
        else None
    )
    return NodeMetric(
        metadata=ObjectMeta(name=name),
        spec=NodeMetricSpec(metric_collect_policy=policy),
        status=NodeMetricStatus(
            update_time=updated_at,
            node_metric=NodeMetricInfo(
                node_usage=usage(node_usage or {}),
                system_usage=usage(system_usage or {}),
                aggregated_node_usages=tuple(aggregates),
            ),
            pods_metric=tuple(
                PodMetricInfo(
                    name=pod_name, namespace="default", pod_usage=usage(amounts), priority=prio
                )
                for pod_name, amounts, prio in pods
            ),
        ),
    )
