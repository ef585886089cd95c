"""The reservation lifecycle loop (§1.2) on a memory store under a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import msgspec
import pytest

from apis import codec
from apis import constants as k
from apis.core import Node, Pod
from apis.meta import Condition, ObjectMeta, ObjectReference
from apis.scheduling import Reservation
from controller.errors import NotFound
from controller.loops import ControlLoop, LoopContext
from controller.reservations.args import ReservationArgs
from controller.reservations.controller import (
    ReservationController,
    ReservationNotActive,
    expiry_of,
    mark_available,
    mark_unschedulable,
    metric_samples,
    sync,
)
from controller.simulate import simulate
from controller.store.sqlite import Store
from tests.controller.delayed import BACKENDS, open_store
from tests.controller.reservations.builders import (
    T0,
    allocated_to,
    available,
    pod,
    res,
    reservation,
)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=BACKENDS)
def store(
    request: pytest.FixtureRequest, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Store]:
    """Every test runs over the memory store and the delayed-visibility one."""
    with open_store(request.param, monkeypatch, clock=clock) as s:
        s.create(Node(metadata=ObjectMeta(name="n1")))
        yield s


def _ctx(store: Store, clock: Clock) -> LoopContext:
    return LoopContext(store=store, now=clock)


def _get(store: Store, name: str) -> Reservation:
    found = store.get(store.registry.for_type(Reservation), name)
    assert isinstance(found, Reservation)
    return found


def _ready(r: Reservation) -> Condition:
    return next(c for c in r.status.conditions if c.type == "Ready")


def test_is_a_control_loop() -> None:
    loop = ReservationController()
    assert isinstance(loop, ControlLoop)
    assert loop.name == "reservations"


def test_expires_after_ttl(store: Store, clock: Clock) -> None:
    store.create(available("r", ttl="1h"))
    loop = ReservationController()
    clock.advance(minutes=30)
    assert loop.reconcile(_ctx(store, clock)) == 15.0
    assert _get(store, "r").status.phase == "Available"
    clock.advance(minutes=30, seconds=1)
    loop.reconcile(_ctx(store, clock))
    r = _get(store, "r")
    assert r.status.phase == "Failed"
    ready = _ready(r)
    assert (ready.status, ready.reason) == ("False", "Expired")
    assert ready.last_transition_time == clock.now


def test_requeue_is_clamped_to_the_expiry(store: Store, clock: Clock) -> None:
    store.create(available("r", ttl="1h"))
    loop = ReservationController()
    clock.advance(minutes=59, seconds=50)
    assert loop.reconcile(_ctx(store, clock)) == 10.0
    clock.advance(seconds=9)
    assert loop.reconcile(_ctx(store, clock)) == 3.0


@pytest.mark.parametrize(
    ("ttl", "expires", "expected"),
    [
        (None, None, T0 + timedelta(hours=24)),
        ("2h", None, T0 + timedelta(hours=2)),
        ("2h", T0 + timedelta(minutes=5), T0 + timedelta(minutes=5)),
        ("2h", T0 + timedelta(hours=5), T0 + timedelta(hours=2)),
        (None, T0 + timedelta(hours=48), T0 + timedelta(hours=24)),
        ("0s", T0 + timedelta(minutes=5), None),
    ],
    ids=[
        "CRD default ttl",
        "ttl",
        "expires first",
        "ttl first",
        "CRD default ttl before expires",
        "zero ttl disables",
    ],
)
def test_expiry(ttl: str | None, expires: datetime | None, expected: datetime | None) -> None:
    assert expiry_of(reservation(ttl=ttl, expires=expires)) == expected


def test_zero_ttl_never_expires(store: Store, clock: Clock) -> None:
    store.create(available("r", ttl="0s", expires=T0))
    clock.advance(days=30)
    assert ReservationController().reconcile(_ctx(store, clock)) is None
    assert _get(store, "r").status.phase == "Available"


def test_node_deleted_fails_the_reservation(store: Store, clock: Clock) -> None:
    store.create(available("r", node="gone"))
    ReservationController().reconcile(_ctx(store, clock))
    r = _get(store, "r")
    assert r.status.phase == "Failed"
    assert (_ready(r).reason, _ready(r).message) == ("Expired", "node deleted")


def test_owners_and_allocated_are_recomputed(store: Store, clock: Clock) -> None:
    r = store.create(available("r", requests=res(cpu=6, memory_gi=20), allocate_once=False))
    mine = allocated_to(r)
    other = allocated_to(reservation("other", uid="uid-other"))
    store.create(pod("web-b", uid="", node="n1", requests=res(cpu=2, gpu=1), annotations=mine))
    store.create(pod("web-a", node="n1", requests=res(cpu=2, memory_gi=10), annotations=mine))
    store.create(pod("elsewhere", node="n2", requests=res(cpu=1), annotations=mine))
    store.create(pod("done", node="n1", requests=res(cpu=1), annotations=mine, phase="Succeeded"))
    store.create(pod("theirs", node="n1", requests=res(cpu=1), annotations=other))
    store.create(pod("plain", node="n1", requests=res(cpu=1)))
    ReservationController().reconcile(_ctx(store, clock))
    status = _get(store, "r").status
    assert status.phase == "Available"
    pods = {p.metadata.name: p for p in store.list(store.registry.for_type(Pod))[0]}
    expected = sorted(
        (
            ObjectReference(namespace="default", name=n, uid=pods[n].metadata.uid)
            for n in ("web-a", "web-b")
        ),
        key=lambda ref: ref.uid,
    )
    assert list(status.current_owners) == expected
    # the GPU is not reserved, so it is not counted as allocated
    assert status.allocated == res(cpu=4, memory_gi=10)


def test_owner_leaving_gives_back_its_share(store: Store, clock: Clock) -> None:
    r = store.create(available("r", requests=res(cpu=6), allocate_once=False))
    owner = store.create(pod("web", node="n1", requests=res(cpu=2), annotations=allocated_to(r)))
    loop = ReservationController()
    loop.reconcile(_ctx(store, clock))
    assert _get(store, "r").status.allocated == res(cpu=2)
    store.delete(store.registry.for_type(Pod), owner.metadata.name, "default")
    loop.reconcile(_ctx(store, clock))
    status = _get(store, "r").status
    assert (status.current_owners, status.allocated) == ((), res())


def test_allocate_once_succeeds_with_its_first_owner(store: Store, clock: Clock) -> None:
    r = store.create(available("r", requests=res(cpu=4)))
    ReservationController().reconcile(_ctx(store, clock))
    assert _get(store, "r").status.phase == "Available"
    store.create(pod("web", node="n1", requests=res(cpu=1), annotations=allocated_to(r)))
    clock.advance(seconds=10)
    ReservationController().reconcile(_ctx(store, clock))
    done = _get(store, "r")
    assert done.status.phase == "Succeeded"
    assert (_ready(done).status, _ready(done).reason) == ("False", "Succeeded")
    assert done.status.allocated == res(cpu=1)


def test_pending_reservation_past_expiry_fails(store: Store, clock: Clock) -> None:
    store.create(reservation("waiting", ttl="10m"))
    clock.advance(minutes=11)
    ReservationController().reconcile(_ctx(store, clock))
    assert _get(store, "waiting").status.phase == "Failed"


def test_pending_reservations_can_be_left_alone_as_koordinator_does(
    store: Store, clock: Clock
) -> None:
    store.create(reservation("waiting", ttl="10m"))
    clock.advance(minutes=11)
    assert ReservationController(expire_pending=False).reconcile(_ctx(store, clock)) is None
    assert _get(store, "waiting").status.phase == ""


def test_garbage_collection(store: Store, clock: Clock) -> None:
    store.create(available("expiring", ttl="1h"))
    r = store.create(available("used", requests=res(cpu=4)))
    store.create(pod("web", node="n1", requests=res(cpu=1), annotations=allocated_to(r)))
    loop = ReservationController(ReservationArgs(gc_duration_seconds=600))
    loop.reconcile(_ctx(store, clock))
    assert _get(store, "used").status.phase == "Succeeded"
    clock.advance(hours=1, seconds=1)
    loop.reconcile(_ctx(store, clock))
    assert _get(store, "expiring").status.phase == "Failed"
    clock.advance(minutes=5)
    loop.reconcile(_ctx(store, clock))
    assert {_get(store, "expiring").status.phase} == {"Failed"}  # not yet due
    clock.advance(minutes=6)
    wait = loop.reconcile(_ctx(store, clock))
    kind = store.registry.for_type(Reservation)
    for name in ("expiring", "used"):
        with pytest.raises(NotFound):
            store.get(kind, name)
    assert wait is None


def test_terminal_reservation_on_a_vanished_node_is_collected_at_once(
    store: Store, clock: Clock
) -> None:
    failed = available("r", node="gone")
    failed = msgspec.structs.replace(
        failed, status=msgspec.structs.replace(failed.status, phase="Failed")
    )
    store.create(failed)
    ReservationController().reconcile(_ctx(store, clock))
    with pytest.raises(NotFound):
        _get(store, "r")


def test_garbage_collection_can_be_disabled(store: Store, clock: Clock) -> None:
    store.create(available("r", node="gone"))
    loop = ReservationController(ReservationArgs(disable_garbage_collection=True))
    loop.reconcile(_ctx(store, clock))
    clock.advance(days=2)
    loop.reconcile(_ctx(store, clock))
    assert _get(store, "r").status.phase == "Failed"


def test_sync_is_idempotent() -> None:
    r = available("r", ttl="1h")
    result = sync(r, now=T0 + timedelta(hours=2), node_exists=True)
    assert result.updated is not None
    again = sync(result.updated, now=T0 + timedelta(hours=3), node_exists=True)
    assert again.updated is None


MANIFESTS = """
apiVersion: v1
kind: Node
metadata: {name: node-1, creationTimestamp: "2026-01-01T00:00:00Z"}
---
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata: {name: reservation-demo, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  template:
    spec:
      schedulerName: koord-scheduler
      containers:
      - name: main
        resources: {requests: {cpu: 500m, memory: 800Mi}}
  owners:
  - object: {name: pod-demo-0, namespace: default}
  ttl: 30m
status:
  phase: Available
  nodeName: node-1
  allocatable: {cpu: 500m, memory: 800Mi}
"""


def test_simulated_reservation_expires_and_converges() -> None:
    objects = codec.decode_documents(MANIFESTS)
    result = simulate(objects, loops={"reservations": ReservationController})
    (r,) = [o for o in result.objects if isinstance(o, Reservation)]
    assert r.status.phase == "Failed"
    # looked at again at most 3 s after the expiry (the requeue floor)
    expired_at = _ready(r).last_transition_time
    assert expired_at is not None
    assert T0 + timedelta(minutes=30) < expired_at <= T0 + timedelta(minutes=30, seconds=3)


def test_metric_samples() -> None:
    r = available("r", requests=res(cpu=4, memory_gi=8), allocated=res(cpu=1))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in metric_samples([r])}
    phase = "scheduler_reservation_status_phase"
    assert samples[(phase, (("name", "r"), ("phase", "Available")))] == 1.0
    assert samples[(phase, (("name", "r"), ("phase", "Pending")))] == 0.0
    resource = "scheduler_reservation_resource"

    def value(kind: str, name: str, unit: str) -> float:
        labels = (("name", "r"), ("resource", name), ("type", kind), ("unit", unit))
        return samples[(resource, labels)]

    assert value("allocatable", "cpu", "core") == 4.0
    assert value("allocated", "cpu", "core") == 1.0
    assert value("utilization", "cpu", "ratio") == 0.25
    assert value("allocatable", "memory", "Gi") == 8.0


def test_bind_marks_available_with_the_resized_allocatable() -> None:
    key = k.ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE
    r = reservation(
        requests=res(cpu=4, memory_gi=8), annotations={key: '{"resources":{"cpu":"2"}}'}
    )
    r = mark_unschedulable(r, "0/3 nodes are available", T0)
    bound = mark_available(r, "n1", T0 + timedelta(minutes=1))
    status = bound.status
    assert (status.phase, status.node_name) == ("Available", "n1")
    assert status.allocatable == res(cpu=2, memory_gi=8)
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [
        ("Scheduled", "True", "Scheduled"),
        ("Ready", "True", "Available"),
    ]


def test_bind_refuses_a_failed_reservation() -> None:
    failed = reservation(node="n1", phase="Failed")
    with pytest.raises(ReservationNotActive, match="reservation is not active"):
        mark_available(failed, "n1", T0)


def test_scheduling_failures_refresh_the_scheduled_condition() -> None:
    first = mark_unschedulable(reservation(), "0/3 nodes are available: 3 Insufficient cpu", T0)
    (cond,) = first.status.conditions
    assert (cond.type, cond.status, cond.reason) == ("Scheduled", "False", "Unschedulable")
    assert cond.message == "0/3 nodes are available: 3 Insufficient cpu"
    later = T0 + timedelta(minutes=1)
    (again,) = mark_unschedulable(first, "0/4 nodes are available", later).status.conditions
    assert (again.message, again.last_probe_time, again.last_transition_time) == (
        "0/4 nodes are available",
        later,
        T0,
    )
    scheduled = mark_available(first, "n1", T0)
    probed = mark_unschedulable(scheduled, "ignored", later)
    cond = probed.status.conditions[0]
    assert (cond.status, cond.message, cond.last_probe_time) == ("True", "", later)
