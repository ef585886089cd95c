"""One pod's hostile annotations cost the scheduler one refusal, never the other pods' passes.

Each value here used to break the whole pass (an exception out of a plugin's ``sync``: every
other pod stayed pending) or to take CPUs the node does not have; now the pod is refused or
its annotation treated as absent, with a Warning Event on it, and the rest is scheduled.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from apis import constants as k
from apis.core import Event, Node, Pod
from apis.meta import ObjectMeta
from controller.loops import LoopContext
from controller.scheduler.framework import INVALID_ANNOTATION
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.numaresource.status import parse_resource_status
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, Clock, make_node, make_pod
from tests.controller.scheduler.loadaware.builders import metric

#: 4 cores of 2 threads on one NUMA node: CPUs 0-7.
TOPOLOGY = json.dumps(
    {"detail": [{"id": i, "core": i % 4, "socket": 0, "node": 0} for i in range(8)]}
)
DEEP = "[" * 200_000


def _node() -> Node:
    base = make_node("n1", cpu=16_000, memory=32 * GI)
    return Node(
        metadata=ObjectMeta(name="n1", annotations={k.ANNOTATION_NODE_CPU_TOPOLOGY: TOPOLOGY}),
        spec=base.spec,
        status=base.status,
    )


def _pod(
    name: str, annotations: dict[str, str], *, cpu: int = 1000, node: str = "", qos: str = ""
) -> Pod:
    base = make_pod(name, cpu=cpu, memory=GI, node=node)
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            labels={k.LABEL_QOS_CLASS: qos} if qos else {},
            annotations=annotations,
        ),
        spec=base.spec,
        status=base.status,
    )


def _get(store: Store, name: str) -> Pod:
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found


def _events(store: Store, name: str) -> list[Event]:
    found = store.list(store.registry.for_type(Event))[0]
    return [e for e in found if isinstance(e, Event) and e.involved_object.name == name]


def _gang(**extra: str) -> dict[str, str]:
    return {k.ANNOTATION_GANG_NAME: "g", k.ANNOTATION_GANG_MIN_AVAILABLE: "1", **extra}


@pytest.mark.parametrize(
    ("annotations", "binds"),
    [
        # json.loads recursed past the interpreter's limit inside Coscheduling's sync.
        pytest.param(_gang(**{k.ANNOTATION_GANG_GROUPS: DEEP}), True, id="gang-groups-deep"),
        # int() of 5000 digits raised ValueError inside Coscheduling's sync.
        pytest.param(_gang(**{k.ANNOTATION_GANG_MIN_AVAILABLE: "9" * 5000}), False, id="gang-min"),
        pytest.param(
            {k.ANNOTATION_SCHEDULING_HINT: '{"extensions":{"x":' + DEEP}, False, id="hint-deep"
        ),
        pytest.param(
            {k.ANNOTATION_RESOURCE_SPEC: '{"requiredCPUBindPolicy":' + DEEP},
            False,
            id="resource-spec",
        ),
        pytest.param(
            {k.ANNOTATION_DEVICE_ALLOCATE_HINT: '{"gpu":' + DEEP}, False, id="device-hint"
        ),
        pytest.param(
            {k.ANNOTATION_RESERVATION_AFFINITY: '{"name":' + DEEP}, False, id="reservation"
        ),
    ],
)
def test_a_pending_pod_with_a_hostile_annotation_leaves_the_others_scheduled(
    store: Store, clock: Clock, annotations: dict[str, str], binds: bool
) -> None:
    store.create(_node())
    store.create(_pod("hostile", annotations))
    store.create(_pod("plain", {}))
    store.create(_pod("bound", {}, cpu=2000, qos="LSR"))
    ctx = LoopContext(store=store, now=clock)
    loop = SchedulerLoop()
    loop.reconcile(ctx)
    loop.reconcile(ctx)
    assert _get(store, "plain").spec.node_name == "n1"
    assert len(parse_resource_status(_annotation(_get(store, "bound"))).cpuset) == 2
    hostile = _get(store, "hostile")
    assert (hostile.spec.node_name == "n1") is binds
    if not binds:
        (event,) = _events(store, "hostile")
        assert event.type == "Warning"
        assert len(event.message.encode()) <= 1024


def _annotation(pod: Pod) -> str:
    return pod.metadata.annotations[k.ANNOTATION_RESOURCE_STATUS]


@pytest.mark.parametrize(
    ("cpuset", "named"),
    [
        # Parsed fine, and held every CPU of the node (8-1000 are not there at all).
        pytest.param("0-1000", "8-1000", id="past-the-node"),
        # Expanded into a billion-element set before the cpu-list bound.
        pytest.param("0-1000000000", "1000000000", id="past-any-machine"),
    ],
)
def test_a_bound_cpuset_past_the_node_holds_nothing_and_is_an_event(
    store: Store, clock: Clock, cpuset: str, named: str
) -> None:
    store.create(_node())
    status = json.dumps({"cpuset": cpuset})
    store.create(_pod("hog", {k.ANNOTATION_RESOURCE_STATUS: status}, node="n1", qos="LSR"))
    store.create(_pod("lsr", {}, cpu=4000, qos="LSR"))
    ctx = LoopContext(store=store, now=clock)
    loop = SchedulerLoop()
    loop.reconcile(ctx)
    placed = _get(store, "lsr")
    assert placed.spec.node_name == "n1"
    assert len(parse_resource_status(_annotation(placed)).cpuset) == 4
    (event,) = _events(store, "hog")
    assert (event.type, event.reason) == ("Warning", INVALID_ANNOTATION)
    assert named in event.message
    assert k.ANNOTATION_RESOURCE_STATUS in event.message
    # Refused once per value: later passes add no Event and do not bump its count.
    store.create(_pod("later", {}, cpu=2000, qos="LSR"))
    loop.reconcile(ctx)
    assert _get(store, "later").spec.node_name == "n1"
    (again,) = _events(store, "hog")
    assert again.count == event.count == 1


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({k.ANNOTATION_NODE_RAW_ALLOCATABLE: DEEP}, id="raw-allocatable"),
        pytest.param({k.ANNOTATION_USAGE_THRESHOLDS: DEEP}, id="usage-thresholds"),
    ],
)
def test_a_node_with_hostile_load_aware_annotations_is_scheduled_as_without_them(
    store: Store, clock: Clock, annotations: dict[str, str]
) -> None:
    """Load-aware scheduling reads these while it syncs (json.loads recursed past the
    interpreter's limit there, failing every pass): they are treated as absent."""
    node = _node()
    meta = ObjectMeta(name="n1", annotations={**node.metadata.annotations, **annotations})
    store.create(msgspec.structs.replace(node, metadata=meta))
    store.create(metric("n1", node_usage={"cpu": 1000, "memory": GI}, updated_at=clock.now))
    store.create(_pod("plain", {}))
    SchedulerLoop().reconcile(LoopContext(store=store, now=clock))
    assert _get(store, "plain").spec.node_name == "n1"
