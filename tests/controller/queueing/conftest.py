"""Fixtures of the queueing tests: a settable clock, a memory store, and a harness that builds
quotas, nodes and QueueUnits and runs the ``queueing`` loop pass by pass on that clock."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from apis import constants as k
from apis.core import (
    Container,
    Event,
    Node,
    NodeStatus,
    PodSpec,
    PodTemplateSpec,
    ResourceRequirements,
)
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from apis.queueing import Admission, PodSet, Queue, QueueUnit, QueueUnitSpec, QueueUnitStatus
from apis.quota import ElasticQuota, ElasticQuotaSpec
from apis.resources import ResourceList
from controller.loops import LoopContext
from controller.queueing import phases
from controller.queueing.loop import QueueingLoop
from controller.store.sqlite import Store
from tests.controller.delayed import BACKENDS, open_store

GI = 1 << 30
T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
QUOTA_NAMESPACE = "kube-system"
UNIT_NAMESPACE = "team"

_REGISTRY = default_registry()
UNIT_KIND = _REGISTRY.for_type(QueueUnit)
QUEUE_KIND = _REGISTRY.for_type(Queue)
QUOTA_KIND = _REGISTRY.for_type(ElasticQuota)
EVENT_KIND = _REGISTRY.for_type(Event)
NODE_KIND = _REGISTRY.for_type(Node)


class Clock:
    """A settable clock shared by the store and the loop."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def cpu(millicores: int, **extra: int) -> ResourceList:
    """``millicores`` of cpu plus any other canonical amounts (zero amounts left out)."""
    amounts = {"cpu": millicores, **extra}
    return ResourceList({name: amount for name, amount in amounts.items() if amount})


def cores(count: int) -> ResourceList:
    return cpu(count * 1000)


def holding(name: str, replicas: int = 1) -> tuple[Admission, ...]:
    """Admissions of ``replicas`` replicas of pod set ``name``, all bound."""
    return (Admission(name=name, replicas=replicas, running=replicas),)


def template(request: Mapping[str, int]) -> PodTemplateSpec:
    return PodTemplateSpec(
        spec=PodSpec(
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(requests=ResourceList(dict(request))),
                ),
            )
        )
    )


def quota_object(
    name: str,
    *,
    max: Mapping[str, int] | None = None,  # noqa: A002 - the spec's field name
    min: Mapping[str, int] | None = None,  # noqa: A002 - the spec's field name
    parent: str = "",
    is_parent: bool = False,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> ElasticQuota:
    all_labels = dict(labels or {})
    if parent:
        all_labels[k.LABEL_QUOTA_PARENT] = parent
    if is_parent:
        all_labels[k.LABEL_QUOTA_IS_PARENT] = "true"
    return ElasticQuota(
        metadata=ObjectMeta(
            name=name,
            namespace=QUOTA_NAMESPACE,
            labels=all_labels,
            annotations=dict(annotations or {}),
        ),
        spec=ElasticQuotaSpec(min=ResourceList(dict(min or {})), max=ResourceList(dict(max or {}))),
    )


def unit_object(
    name: str,
    *,
    quota: str | None = "team-a",
    cpu_m: int = 1000,
    count: int = 1,
    min_count: int | None = None,
    pod_sets: Sequence[tuple[str, int, Mapping[str, int]]] = (),
    legacy: Mapping[str, int] | None = None,
    priority: int | None = 0,
    created: float = 0.0,
    namespace: str = UNIT_NAMESPACE,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    active: bool | None = None,
    max_exec: int | None = None,
    phase: str = phases.ENQUEUED,
    admissions: Sequence[Admission] = (),
    allocated: float | None = None,
) -> QueueUnit:
    """A QueueUnit of one pod set ``main`` (``count`` replicas of ``cpu_m`` millicores), of the
    given ``pod_sets`` (name, count, per-replica request), or legacy (``spec.resource``).

    ``created`` and ``allocated`` (``status.lastAllocateTime``) are seconds after ``T0``.
    """
    all_labels = dict(labels or {})
    if quota is not None:
        all_labels[k.LABEL_QUOTA_NAME] = quota
    if legacy is not None:
        sets: tuple[PodSet, ...] = ()
        resource = ResourceList(dict(legacy))
    else:
        shapes = pod_sets or (("main", count, cpu(cpu_m)),)
        sets = tuple(
            PodSet(
                name=set_name,
                count=replicas,
                min_count=min_count if len(shapes) == 1 else None,
                template=template(request),
            )
            for set_name, replicas, request in shapes
        )
        resource = ResourceList()
    return QueueUnit(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=f"uid-{namespace}-{name}",
            labels=all_labels,
            annotations=dict(annotations or {}),
            creation_timestamp=T0 + timedelta(seconds=created),
        ),
        spec=QueueUnitSpec(
            priority=priority,
            pod_set=sets,
            resource=resource,
            active=active,
            maximum_execution_time_seconds=max_exec,
        ),
        status=QueueUnitStatus(
            phase=phase,
            admissions=tuple(admissions),
            last_allocate_time=None if allocated is None else T0 + timedelta(seconds=allocated),
        ),
    )


class Harness:
    """A memory store, a clock and one ``queueing`` loop run pass by pass."""

    def __init__(self, store: Store, clock: Clock, **loop_args: Any) -> None:
        self.store = store
        self.clock = clock
        self.loop = QueueingLoop(rand=lambda: 0.5, **loop_args)
        self.ctx = LoopContext(store=store, now=clock)

    # -- objects -------------------------------------------------------------------------------

    def quota(self, name: str, **kwargs: Any) -> ElasticQuota:
        stored, _ = self.store.apply(quota_object(name, **kwargs))
        return stored

    def node(self, name: str, allocatable: Mapping[str, int]) -> Node:
        stored, _ = self.store.apply(
            Node(
                metadata=ObjectMeta(name=name),
                status=NodeStatus(allocatable=ResourceList(dict(allocatable))),
            )
        )
        return stored

    def unit(self, name: str, **kwargs: Any) -> QueueUnit:
        """Create a QueueUnit (see :func:`unit_object`); the store stamps its
        ``creationTimestamp``, so the clock is set to ``created`` for that write."""
        obj = unit_object(name, **kwargs)
        now = self.clock.now
        self.clock.now = obj.metadata.creation_timestamp or now
        try:
            stored, _ = self.store.apply(obj)
        finally:
            self.clock.now = now
        return stored

    def get(self, name: str, namespace: str = UNIT_NAMESPACE) -> QueueUnit:
        obj = self.store.get(UNIT_KIND, name, namespace)
        assert isinstance(obj, QueueUnit)
        return obj

    def units(self) -> list[QueueUnit]:
        return [u for u in self.store.list(UNIT_KIND)[0] if isinstance(u, QueueUnit)]

    def queue(self, name: str, namespace: str = k.QUEUE_NAMESPACE) -> Queue:
        obj = self.store.get(QUEUE_KIND, name, namespace)
        assert isinstance(obj, Queue)
        return obj

    def queues(self) -> dict[tuple[str, str], Queue]:
        return {
            (q.metadata.namespace, q.metadata.name): q
            for q in self.store.list(QUEUE_KIND)[0]
            if isinstance(q, Queue)
        }

    def quota_obj(self, name: str) -> ElasticQuota:
        obj = self.store.get(QUOTA_KIND, name, QUOTA_NAMESPACE)
        assert isinstance(obj, ElasticQuota)
        return obj

    def events(self, reason: str = "", name: str = "") -> list[Event]:
        return [
            e
            for e in self.store.list(EVENT_KIND)[0]
            if isinstance(e, Event)
            and (not reason or e.reason == reason)
            and (not name or e.involved_object.name == name)
        ]

    def write(self, unit: QueueUnit, **status: Any) -> QueueUnit:
        """Replace fields of ``unit``'s status (as a job controller would)."""
        current = self.get(unit.metadata.name, unit.metadata.namespace)
        return self.store.update(
            msgspec.structs.replace(
                current, status=msgspec.structs.replace(current.status, **status)
            )
        )

    def write_spec(self, name: str, **spec: Any) -> QueueUnit:
        current = self.get(name)
        return self.store.update(
            msgspec.structs.replace(current, spec=msgspec.structs.replace(current.spec, **spec))
        )

    def finish(self, name: str, phase: str = phases.SUCCEED) -> QueueUnit:
        """The job ended: phase Succeed/Failed with the admissions emptied."""
        current = self.get(name)
        return self.write(
            current,
            phase=phase,
            admissions=(),
            conditions=phases.mirrored_conditions(current.status.conditions, phase, self.clock()),
        )

    def bind(self, name: str) -> QueueUnit:
        """Every admitted replica's pod got a node (``admissions[].running = replicas``)."""
        current = self.get(name)
        return self.write(
            current,
            admissions=tuple(
                msgspec.structs.replace(a, running=a.replicas) for a in current.status.admissions
            ),
        )

    def delete(self, name: str) -> None:
        self.store.delete(UNIT_KIND, name, UNIT_NAMESPACE)

    # -- running -------------------------------------------------------------------------------

    def run(self) -> float | None:
        """One pass of the loop."""
        return self.loop.reconcile(self.ctx)

    def settle(self, passes: int = 20) -> float | None:
        """Passes at this instant until one changes nothing in the store."""
        wait: float | None = None
        for _ in range(passes):
            before = self.store.resource_version
            wait = self.run()
            if self.store.resource_version == before:
                return wait
        raise AssertionError(f"the queueing loop still writes after {passes} passes")

    def advance(self, seconds: float) -> float | None:
        self.clock.advance(seconds)
        return self.settle()

    # -- reading results -----------------------------------------------------------------------

    def phase(self, name: str) -> str:
        return self.get(name).status.phase

    def admitted(self, name: str) -> dict[str, int]:
        totals: dict[str, int] = {}
        for admission in self.get(name).status.admissions:
            totals[admission.name] = totals.get(admission.name, 0) + admission.replicas
        return totals

    def holding(self) -> set[str]:
        """Names of the units holding quota now."""
        return {u.metadata.name for u in self.units() if phases.is_assigned(u)}

    def used(self, quota: str) -> dict[str, int]:
        return {
            r: v
            for r, v in self.loop.engine.ledger.used(quota).items()
            if v and r != k.RESOURCE_QUEUE_MAX_JOBS
        }

    def annotation(self, quota: str, key: str) -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(self.quota_obj(quota).metadata.annotations[key])
        return shown


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


@pytest.fixture
def harness(store: Store, clock: Clock) -> Harness:
    return Harness(store, clock)
