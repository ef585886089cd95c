"""Fixtures and builders of the descheduler tests.

``clock`` and ``store`` are fixtures; the builders are plain functions (import them from this
module) so that table cases can use them in ``pytest.mark.parametrize``:

- :func:`make_node`: a Ready node with cpu (millicores), memory (bytes) and pods allocatable;
- :func:`make_pod`: a pod bound to a node, owned by a ReplicaSet unless ``owner=None``;
- :func:`make_nodemetric`: a NodeMetric with node usage and per-pod usage, updated at ``at``;

and :func:`answered`, for a test that looks at what a loop's pass wrote over either backend.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

import pytest

from apis.core import (
    Container,
    Node,
    NodeSpec,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
    Taint,
)
from apis.meta import Condition, ObjectMeta, OwnerReference
from apis.resources import ResourceList
from apis.slo import NodeMetric, NodeMetricInfo, NodeMetricStatus, PodMetricInfo, ResourceMap
from controller.store.assumed import Outbox
from controller.store.sqlite import Store
from tests.controller.delayed import BACKENDS, DelayedStore, as_loop, open_store

__all__ = [
    "GI",
    "T0",
    "Clock",
    "answered",
    "make_node",
    "make_nodemetric",
    "make_pod",
    "replicaset",
]

GI = 1 << 30
#: Where every test's clock starts.
T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


class Clock:
    """A settable clock for the store and the loops (tests move ``now`` by hand)."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=BACKENDS)
def store(
    request: pytest.FixtureRequest, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Store]:
    """Every test runs over the memory store and the delayed-visibility one."""
    with open_store(request.param, monkeypatch, clock=clock) as opened:
        yield opened


class _WritingLoop(Protocol):
    @property
    def outbox(self) -> Outbox: ...


def answered(store: Store, *loops: _WritingLoop) -> None:
    """The answers to the ``loops``' writes arrive, and the loops handle them, as right after
    the pass that sent them. The ``delayed`` backend holds them until a loop's next pass
    begins, so what a loop writes once an answer is in (a PodMigrationJob's update after the
    reservation it waited on, the Events) would show only a pass later; a test that looks at
    what one pass did lets them arrive first. The loops handle them as their next pass begins
    to (their outboxes collect), without taking that pass, and what they send meanwhile is
    theirs (shown to them late, answered late, and let arrive here too); what the delayed
    visibility hides from their snapshots stays hidden. Nothing to do over the memory
    backend, which answers at once. The late answers themselves, over passes, are the
    business of the tests that take no such shortcut."""
    if not isinstance(store, DelayedStore):
        return
    with as_loop():
        for _ in range(100):
            if not store.holding:
                return
            store.loop_pass()
            for loop in loops:
                loop.outbox.collect()
        raise AssertionError("the loops keep writing on their answers")


def replicaset(name: str = "web-rs", uid: str = "") -> OwnerReference:
    """A controller reference to a ReplicaSet."""
    return OwnerReference(
        api_version="apps/v1",
        kind="ReplicaSet",
        name=name,
        uid=uid or f"uid-{name}",
        controller=True,
    )


def make_node(
    name: str,
    *,
    cpu: int = 4000,
    memory: int = 8 * GI,
    pods: int = 110,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
    ready: bool = True,
) -> Node:
    """A node with ``cpu`` millicores, ``memory`` bytes and ``pods`` allocatable."""
    allocatable = ResourceList({"cpu": cpu, "memory": memory, "pods": pods})
    return Node(
        metadata=ObjectMeta(
            name=name,
            uid=f"uid-{name}",
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
        ),
        spec=NodeSpec(taints=tuple(taints), unschedulable=unschedulable),
        status=NodeStatus(
            capacity=allocatable,
            allocatable=allocatable,
            conditions=(Condition(type="Ready", status="True" if ready else "False"),),
        ),
    )


_DEFAULT_OWNER = replicaset()


def make_pod(
    name: str,
    *,
    node: str = "node-a",
    namespace: str = "default",
    cpu: int = 0,
    memory: int = 0,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner: OwnerReference | None = _DEFAULT_OWNER,
    priority: int | None = None,
    priority_class_name: str = "",
    scheduler: str = "koord-scheduler",
    phase: str = "Running",
    volumes: Sequence[Mapping[str, object]] = (),
    uid: str = "",
    ready: bool = False,
) -> Pod:
    """A one-container pod on ``node`` requesting ``cpu`` millicores and ``memory`` bytes (0 =
    not requested); owned by a ReplicaSet unless ``owner`` is None (a bare pod); with a
    ``Ready=True`` condition when ``ready`` (else no condition)."""
    requests = {"cpu": cpu, "memory": memory}
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid or f"uid-{namespace}-{name}",
            labels=dict(labels or {}),
            annotations=dict(annotations or {}),
            owner_references=(owner,) if owner is not None else (),
        ),
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
            priority=priority,
            priority_class_name=priority_class_name,
            scheduler_name=scheduler,
            volumes=tuple(dict(v) for v in volumes),
        ),
        status=PodStatus(
            phase=phase,
            conditions=(Condition(type="Ready", status="True"),) if ready else (),
        ),
    )


def make_nodemetric(
    node: str,
    *,
    at: datetime = T0,
    cpu: int = 0,
    memory: int = 0,
    system_cpu: int = 0,
    system_memory: int = 0,
    pods: Sequence[tuple[Pod, int, int]] = (),
    prod: Sequence[str] = (),
) -> NodeMetric:
    """A NodeMetric of ``node`` updated at ``at``: node usage ``cpu`` millicores and ``memory``
    bytes, system usage, and ``(pod, cpu, memory)`` per pod (``prod`` names the pods reported
    as ``koord-prod``)."""
    return NodeMetric(
        metadata=ObjectMeta(name=node),
        status=NodeMetricStatus(
            update_time=at,
            node_metric=NodeMetricInfo(
                node_usage=ResourceMap(resources=ResourceList({"cpu": cpu, "memory": memory})),
                system_usage=ResourceMap(
                    resources=ResourceList({"cpu": system_cpu, "memory": system_memory})
                ),
            ),
            pods_metric=tuple(
                PodMetricInfo(
                    name=pod.metadata.name,
                    namespace=pod.metadata.namespace,
                    pod_usage=ResourceMap(
                        resources=ResourceList({"cpu": pod_cpu, "memory": pod_memory})
                    ),
                    priority="koord-prod" if pod.metadata.name in prod else "",
                )
                for pod, pod_cpu, pod_memory in pods
            ),
        ),
    )
