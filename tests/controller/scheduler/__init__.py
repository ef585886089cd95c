"""Scheduler tests, and small builders they share: ``make_node``, ``make_pod``, ``table_of``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from apis.core import (
    Affinity,
    Container,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    NodeSpec,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
    PreferredSchedulingTerm,
    ResourceRequirements,
    Taint,
    Toleration,
)
from apis.meta import ObjectMeta
from apis.resources import ResourceList

GI = 1 << 30


class Clock:
    """A settable clock for the store and the loops (tests move ``now`` by hand)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


MI = 1 << 20


def make_node(
    name: str,
    *,
    cpu: int = 4000,
    memory: int = 8 * GI,
    pods: int = 110,
    extra: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
) -> Node:
    """A node with ``cpu`` millicores, ``memory`` bytes and ``pods`` allocatable."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    return Node(
        metadata=ObjectMeta(name=name, labels=dict(labels or {})),
        spec=NodeSpec(taints=tuple(taints), unschedulable=unschedulable),
        status=NodeStatus(allocatable=ResourceList(allocatable)),
    )


def make_pod(
    name: str,
    *,
    cpu: int = 0,
    memory: int = 0,
    extra: Mapping[str, int] | None = None,
    namespace: str = "default",
    node: str = "",
    selector: Mapping[str, str] | None = None,
    required: Sequence[Sequence[NodeSelectorRequirement]] | None = None,
    preferred: Sequence[tuple[int, Sequence[NodeSelectorRequirement]]] = (),
    tolerations: Sequence[Toleration] = (),
    priority: int | None = None,
    scheduler: str = "koord-scheduler",
    phase: str = "",
) -> Pod:
    """A one-container pod requesting ``cpu``/``memory`` (0 = not requested)."""
    requests = {"cpu": cpu, "memory": memory, **(extra or {})}
    affinity = None
    if required is not None or preferred:
        affinity = Affinity(
            node_affinity=NodeAffinity(
                required_during_scheduling_ignored_during_execution=(
                    NodeSelector(
                        node_selector_terms=tuple(
                            NodeSelectorTerm(match_expressions=tuple(term)) for term in required
                        )
                    )
                    if required is not None
                    else None
                ),
                preferred_during_scheduling_ignored_during_execution=tuple(
                    PreferredSchedulingTerm(
                        weight=weight,
                        preference=NodeSelectorTerm(match_expressions=tuple(term)),
                    )
                    for weight, term in preferred
                ),
            )
        )
    return Pod(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=PodSpec(
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(
                        requests=ResourceList({k: v for k, v in requests.items() if v})
                    ),
                ),
            ),
            node_name=node,
            node_selector=dict(selector or {}),
            affinity=affinity,
            tolerations=tuple(tolerations),
            priority=priority,
            scheduler_name=scheduler,
        ),
        status=PodStatus(phase=phase),
    )


def expr(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)
