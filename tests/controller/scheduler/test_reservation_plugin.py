"""Reservation plugin through the scheduler loop: reservations placed and made Available, owners
placed into them, pre-allocation, and what a user sees when nothing fits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.core import (
    Container,
    Event,
    Pod,
    PodSpec,
    PodTemplateSpec,
    ResourceRequirements,
)
from apis.duration import Duration
from apis.meta import LabelSelector, ObjectMeta, ObjectReference
from apis.resources import ResourceList
from apis.scheduling import PreAllocationPolicy, Reservation, ReservationOwner, ReservationSpec
from controller.loops import LoopContext
from controller.reservations.controller import ReservationController
from controller.scheduler.framework import SUCCESS, Code, CycleState, NoArgs, Status
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    PLUGINS,
    PluginConfig,
    PluginSpec,
    build_profile,
)
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, MI, make_node, make_pod

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(clock=lambda: NOW) as opened:
        yield opened


def _ctx(store: Store) -> LoopContext:
    return LoopContext(store=store, now=lambda: NOW)


def _reservation(
    name: str,
    *,
    cpu: int,
    memory: int,
    owners: tuple[ReservationOwner, ...],
    node: str = "",
    allocate_once: bool | None = None,
    policy: str = "",
    pre_allocation: bool = False,
    multiple: bool = False,
    labels: dict[str, str] | None = None,
) -> Reservation:
    requests = ResourceList({"cpu": cpu, "memory": memory})
    return Reservation(
        metadata=ObjectMeta(name=name, labels=labels or {}),
        spec=ReservationSpec(
            template=PodTemplateSpec(
                spec=PodSpec(
                    node_name=node,
                    scheduler_name="koord-scheduler",
                    containers=(
                        Container(name="main", resources=ResourceRequirements(requests=requests)),
                    ),
                )
            ),
            owners=owners,
            ttl=Duration.parse("1h"),
            allocate_once=allocate_once,
            allocate_policy=policy,
            pre_allocation=pre_allocation,
            pre_allocation_policy=PreAllocationPolicy(enable_multiple=True) if multiple else None,
        ),
    )


def _labelled(pod: Pod, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Pod:
    meta = msgspec.structs.replace(
        pod.metadata,
        labels={**pod.metadata.labels, **labels},
        annotations={**pod.metadata.annotations, **(annotations or {})},
    )
    return msgspec.structs.replace(pod, metadata=meta)


def _get_reservation(store: Store, name: str) -> Reservation:
    found = store.get(store.registry.for_type(Reservation), name)
    assert isinstance(found, Reservation)
    return found


def _get_pod(store: Store, name: str) -> Pod:
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found


def _allocated(pod: Pod) -> dict[str, str] | None:
    text = pod.metadata.annotations.get(k.ANNOTATION_RESERVATION_ALLOCATED)
    return None if text is None else dict(json.loads(text))


def _events(store: Store) -> list[Event]:
    return [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]


def test_user_manual_example_1_reservation_demo(store: Store) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    store.create(make_node("node-2", cpu=4000, memory=8 * GI))
    owner = ReservationOwner(object=ObjectReference(name="pod-demo-0", namespace="default"))
    store.create(_reservation("reservation-demo", cpu=500, memory=800 * MI, owners=(owner,)))
    scheduler, controller = SchedulerLoop(), ReservationController()
    scheduler.reconcile(_ctx(store))

    reservation = _get_reservation(store, "reservation-demo")
    assert reservation.status.phase == "Available"
    node = reservation.status.node_name
    assert node in ("node-1", "node-2")
    assert reservation.status.allocatable == ResourceList({"cpu": 500, "memory": 800 * MI})
    assert [(c.type, c.status, c.reason) for c in reservation.status.conditions] == [
        ("Scheduled", "True", "Scheduled"),
        ("Ready", "True", "Available"),
    ]

    # The owner goes into the reservation, although the other node is emptier.
    store.create(make_pod("pod-demo-0", cpu=200, memory=400 * MI))
    scheduler.reconcile(_ctx(store))
    pod = _get_pod(store, "pod-demo-0")
    assert pod.spec.node_name == node
    assert _allocated(pod) == {"name": "reservation-demo", "uid": reservation.metadata.uid}

    controller.reconcile(_ctx(store))
    reservation = _get_reservation(store, "reservation-demo")
    assert reservation.status.allocated == ResourceList({"cpu": 200, "memory": 400 * MI})
    assert [o.name for o in reservation.status.current_owners] == ["pod-demo-0"]

    # Deleting the reservation leaves the pod running where it is.
    store.delete(store.registry.for_type(Reservation), "reservation-demo")
    scheduler.reconcile(_ctx(store))
    assert _get_pod(store, "pod-demo-0").spec.node_name == node


def test_user_manual_example_2_a_big_reservation_shared_by_a_deployment(store: Store) -> None:
    store.create(make_node("node-1", cpu=16000, memory=64 * GI))
    store.create(make_node("node-2", cpu=32000, memory=128 * GI))
    owners = (
        ReservationOwner(object=ObjectReference(name="pod-demo-1", namespace="default")),
        ReservationOwner(label_selector=LabelSelector(match_labels={"app": "app-demo"})),
    )
    store.create(
        _reservation(
            "reservation-demo-big",
            cpu=6000,
            memory=20 * GI,
            owners=owners,
            node="node-1",
            allocate_once=False,
        )
    )
    scheduler, controller = SchedulerLoop(), ReservationController()
    scheduler.reconcile(_ctx(store))
    reservation = _get_reservation(store, "reservation-demo-big")
    # template.spec.nodeName pins it, although node-2 is emptier.
    assert (reservation.status.phase, reservation.status.node_name) == ("Available", "node-1")

    for name in ("app-demo-a", "app-demo-b"):
        store.create(_labelled(make_pod(name, cpu=2000, memory=10 * GI), {"app": "app-demo"}))
    scheduler.reconcile(_ctx(store))
    for name in ("app-demo-a", "app-demo-b"):
        pod = _get_pod(store, name)
        assert pod.spec.node_name == "node-1"
        assert _allocated(pod) == {"name": "reservation-demo-big", "uid": reservation.metadata.uid}

    controller.reconcile(_ctx(store))
    scheduler.reconcile(_ctx(store))
    reservation = _get_reservation(store, "reservation-demo-big")
    assert reservation.status.phase == "Available"  # allocateOnce: false
    assert reservation.status.allocated == ResourceList({"cpu": 4000, "memory": 20 * GI})
    # The node's requests do not grow by what the owners consume inside the reservation.
    row = scheduler.table.index["node-1"]
    cpu, memory = scheduler.table.columns["cpu"], scheduler.table.columns["memory"]
    assert int(scheduler.table.requested[row, cpu]) == 6000
    assert int(scheduler.table.requested[row, memory]) == 20 * GI


def test_a_pod_that_does_not_own_the_reservation_cannot_use_its_room(store: Store) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "mine"}))
    store.create(_reservation("r", cpu=3000, memory=GI, owners=(owner,)))
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    assert _get_reservation(store, "r").status.phase == "Available"

    store.create(make_pod("stranger", cpu=2000))
    store.create(_labelled(make_pod("owner", cpu=2000), {"app": "mine"}))
    scheduler.reconcile(_ctx(store))
    assert _get_pod(store, "owner").spec.node_name == "node-1"
    stranger = _get_pod(store, "stranger")
    assert stranger.spec.node_name == ""
    (condition,) = [c for c in stranger.status.conditions if c.type == "PodScheduled"]
    assert condition.message.startswith("0/1 nodes are available: 1 Insufficient cpu.")


@pytest.mark.parametrize(
    ("policy", "cpu", "placed"),
    [
        # Aligned: the part beyond the reservation comes from the node.
        ("Aligned", 3000, True),
        # Restricted: the pod must fit inside what the reservation has left.
        ("Restricted", 3000, False),
        ("Restricted", 2000, True),
    ],
)
def test_allocate_policy_decides_whether_a_pod_may_outgrow_the_reservation(
    store: Store, policy: str, cpu: int, placed: bool
) -> None:
    store.create(make_node("node-1", cpu=8000, memory=8 * GI))
    affinity = {k.ANNOTATION_RESERVATION_AFFINITY: json.dumps({"name": "r"})}
    store.create(
        _reservation("r", cpu=2000, memory=GI, owners=(ReservationOwner(),), policy=policy)
    )
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    store.create(_labelled(make_pod("p", cpu=cpu), {}, affinity))
    scheduler.reconcile(_ctx(store))
    pod = _get_pod(store, "p")
    assert bool(pod.spec.node_name) is placed
    if not placed:
        (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
        assert condition.message.startswith(
            "0/1 nodes are available: 1 Reservation(s) Insufficient cpu, "
            "requested: 3000, used: 0, capacity: 2000."
        )


def test_a_pod_requiring_a_reservation_where_none_matches_stays_pending(store: Store) -> None:
    store.create(make_node("node-1"))
    store.create(make_node("node-2"))
    store.create(_labelled(make_pod("p", cpu=100), {}, {k.ANNOTATION_RESERVATION_AFFINITY: ""}))
    SchedulerLoop().reconcile(_ctx(store))
    pod = _get_pod(store, "p")
    assert pod.spec.node_name == ""
    (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert condition.message.startswith(
        "0/2 nodes are available: node(s) no reservations match reservation affinity."
    )


def test_a_reservation_that_fits_nowhere_says_why_on_the_reservation(store: Store) -> None:
    store.create(make_node("node-1", cpu=2000))
    store.create(_reservation("too-big", cpu=4000, memory=GI, owners=(ReservationOwner(),)))
    SchedulerLoop().reconcile(_ctx(store))
    reservation = _get_reservation(store, "too-big")
    assert reservation.status.phase in ("", "Pending")
    (condition,) = reservation.status.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "Scheduled",
        "False",
        "Unschedulable",
    )
    assert condition.message.startswith("0/1 nodes are available: 1 Insufficient cpu.")
    (event,) = _events(store)
    assert (event.reason, event.involved_object.kind, event.involved_object.name) == (
        "FailedScheduling",
        "Reservation",
        "too-big",
    )
    assert event.message == condition.message


def test_pre_allocation_takes_over_a_running_pod(store: Store) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    store.create(make_node("node-2", cpu=4000, memory=8 * GI))
    # node-1 is full: only taking over the my-app pod makes room there.
    store.create(
        _labelled(make_pod("my-app-0", cpu=2000, memory=GI, node="node-1"), {"app": "my-app"})
    )
    store.create(make_pod("other", cpu=2000, memory=GI, node="node-1"))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "my-app"}))
    store.create(
        _reservation(
            "pre",
            cpu=2000,
            memory=GI,
            owners=(owner,),
            policy="Restricted",
            allocate_once=False,
            pre_allocation=True,
            labels={k.LABEL_PRE_ALLOCATION_REQUIRED: "true"},
        )
    )
    SchedulerLoop().reconcile(_ctx(store))
    reservation = _get_reservation(store, "pre")
    assert (reservation.status.phase, reservation.status.node_name) == ("Available", "node-1")
    taken = _get_pod(store, "my-app-0")
    assert _allocated(taken) == {"name": "pre", "uid": reservation.metadata.uid}
    assert _allocated(_get_pod(store, "other")) is None


def test_pre_allocation_requires_the_restricted_policy(store: Store) -> None:
    store.create(make_node("node-1"))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "my-app"}))
    store.create(_reservation("pre", cpu=1000, memory=GI, owners=(owner,), pre_allocation=True))
    SchedulerLoop().reconcile(_ctx(store))
    (condition,) = _get_reservation(store, "pre").status.conditions
    assert condition.message.startswith(
        "0/1 nodes are available: node(s) reservation pre allocation is unsupported with "
        "current attributes."
    )


@pytest.mark.parametrize(
    ("policy", "labels", "cpu", "expected"),
    [
        # Spec §1.6 worked example: 6 <= 32 - (21 - 5 - 3) = 19, P goes into R.
        ("Aligned", {"app": "owner"}, 6000, "r"),
        # A Restricted R refuses it (6 > 8 - 3); without reservation affinity the pod falls
        # back to the node's own capacity (32 - 21 = 11 free) and owns nothing.
        ("Restricted", {"app": "owner"}, 6000, ""),
        # Q does not match R: R's 8 CPU stay blocked, its owner is not counted twice (18 used).
        ("Aligned", {}, 14000, ""),
        ("Aligned", {}, 15000, None),
    ],
)
def test_spec_worked_example_of_node_fit_with_a_reservation(
    store: Store, policy: str, labels: dict[str, str], cpu: int, expected: str | None
) -> None:
    store.create(make_node("n1", cpu=32000, memory=64 * GI))
    store.create(make_pod("others", cpu=10000, node="n1"))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "owner"}))
    store.create(
        _reservation(
            "r", cpu=8000, memory=GI, owners=(owner,), node="n1", policy=policy, allocate_once=False
        )
    )
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    reservation = _get_reservation(store, "r")
    assert reservation.status.phase == "Available"
    allocated = {
        k.ANNOTATION_RESERVATION_ALLOCATED: json.dumps(
            {"name": "r", "uid": reservation.metadata.uid}
        )
    }
    store.create(_labelled(make_pod("first", cpu=3000, node="n1"), {"app": "owner"}, allocated))
    store.create(_labelled(make_pod("p", cpu=cpu), labels))
    scheduler.reconcile(_ctx(store))
    pod = _get_pod(store, "p")
    if expected is None:
        assert pod.spec.node_name == ""
    else:
        assert pod.spec.node_name == "n1"
        found = _allocated(pod)
        assert (found or {}).get("name", "") == expected


def _pre_allocated(
    name: str, *, cpu: int, memory: int, mode: str = "", multiple: bool = False
) -> Reservation:
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "my-app"}))
    reservation = _reservation(
        name,
        cpu=cpu,
        memory=memory,
        owners=(owner,),
        policy="Restricted",
        allocate_once=False,
        pre_allocation=True,
        labels={k.LABEL_PRE_ALLOCATION_REQUIRED: "true"},
    )
    policy = PreAllocationPolicy(mode=mode, enable_multiple=multiple)
    spec = msgspec.structs.replace(reservation.spec, pre_allocation_policy=policy)
    return msgspec.structs.replace(reservation, spec=spec)


def test_pre_allocation_with_enable_multiple_takes_over_several_pods(store: Store) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    for name in ("my-app-0", "my-app-1"):
        pod = make_pod(name, cpu=1000, memory=2 * GI, node="node-1")
        store.create(_labelled(pod, {"app": "my-app"}))
    store.create(make_pod("other", cpu=2000, memory=4 * GI, node="node-1"))
    store.create(_pre_allocated("multi", cpu=2000, memory=4 * GI, multiple=True))
    SchedulerLoop().reconcile(_ctx(store))
    reservation = _get_reservation(store, "multi")
    assert (reservation.status.phase, reservation.status.node_name) == ("Available", "node-1")
    owner = {"name": "multi", "uid": reservation.metadata.uid}
    assert _allocated(_get_pod(store, "my-app-0")) == owner
    assert _allocated(_get_pod(store, "my-app-1")) == owner
    assert _allocated(_get_pod(store, "other")) is None


def _cluster_mode_loop() -> SchedulerLoop:
    args = {"preAllocationConfig": {"enableClusterMode": True}}
    config = msgspec.structs.replace(
        DEFAULT_CONFIG,
        plugin_config=(*DEFAULT_CONFIG.plugin_config, PluginConfig(name="Reservation", args=args)),
    )
    return SchedulerLoop([build_profile(config)])


def test_cluster_mode_pre_allocation_takes_the_labelled_pod(store: Store) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    for name, priority in (("low", "10"), ("high", "100")):
        pod = make_pod(name, cpu=2000, memory=GI, node="node-1")
        store.create(
            _labelled(
                pod,
                {k.LABEL_IS_PRE_ALLOCATABLE: "true"},
                {k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY: priority},
            )
        )
    store.create(_pre_allocated("cluster", cpu=2000, memory=GI, mode="Cluster"))
    _cluster_mode_loop().reconcile(_ctx(store))
    reservation = _get_reservation(store, "cluster")
    assert (reservation.status.phase, reservation.status.node_name) == ("Available", "node-1")
    # Equal scores: the candidate order (priority, highest first) decides.
    assert _allocated(_get_pod(store, "high")) == {
        "name": "cluster",
        "uid": reservation.metadata.uid,
    }
    assert _allocated(_get_pod(store, "low")) is None


def test_cluster_mode_is_refused_unless_enabled(store: Store) -> None:
    store.create(make_node("node-1"))
    store.create(_pre_allocated("cluster", cpu=1000, memory=GI, mode="Cluster"))
    SchedulerLoop().reconcile(_ctx(store))
    (condition,) = _get_reservation(store, "cluster").status.conditions
    assert condition.message.startswith(
        "0/1 nodes are available: reservation requires cluster mode pre-allocation which is "
        "disabled."
    )


def test_reservations_for_a_scheduler_no_profile_serves_are_left_alone(store: Store) -> None:
    store.create(make_node("node-1"))
    reservation = _reservation("elsewhere", cpu=100, memory=MI, owners=(ReservationOwner(),))
    template = msgspec.structs.replace(
        reservation.spec.template,
        spec=msgspec.structs.replace(reservation.spec.template.spec, scheduler_name="other"),
    )
    spec = msgspec.structs.replace(reservation.spec, template=template)
    store.create(msgspec.structs.replace(reservation, spec=spec))
    SchedulerLoop().reconcile(_ctx(store))
    found = _get_reservation(store, "elsewhere")
    assert (found.status.phase, found.status.conditions) == ("", ())


@pytest.mark.parametrize(
    ("orders", "sizes", "expected"),
    [
        # The smallest positive reservation-order wins, whatever else scores better.
        (("2", "1"), (1000, 1000), "n2"),
        (("1", "2"), (1000, 1000), "n1"),
        # No order: the reservation the pod fills best (MostAllocated) wins.
        (("", ""), (4000, 1000), "n2"),
        (("", ""), (1000, 4000), "n1"),
    ],
)
def test_the_reservation_to_use_is_chosen_by_order_then_by_fit(
    store: Store, orders: tuple[str, str], sizes: tuple[int, int], expected: str
) -> None:
    # n1 is much emptier: without the Reservation score the pod would always go there.
    store.create(make_node("n1", cpu=32000, memory=64 * GI))
    store.create(make_node("n2", cpu=8000, memory=16 * GI))
    for node, order, cpu in zip(("n1", "n2"), orders, sizes, strict=True):
        labels = {k.LABEL_RESERVATION_ORDER: order} if order else {}
        owners = (ReservationOwner(),)
        store.create(
            _reservation(f"r-{node}", cpu=cpu, memory=GI, owners=owners, node=node, labels=labels)
        )
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    store.create(make_pod("p", cpu=1000, memory=GI))
    scheduler.reconcile(_ctx(store))
    pod = _get_pod(store, "p")
    assert pod.spec.node_name == expected
    assert (_allocated(pod) or {}).get("name") == f"r-{expected}"


def test_the_fit_error_says_why_the_reservations_did_not_match(store: Store) -> None:
    store.create(make_node("n1"))
    for name in ("a", "b"):
        store.create(
            _reservation(name, cpu=1000, memory=GI, owners=(ReservationOwner(),), node="n1")
        )
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    affinity = {k.ANNOTATION_RESERVATION_AFFINITY: json.dumps({"reservationSelector": {"x": "y"}})}
    store.create(_labelled(make_pod("p", cpu=100), {}, affinity))
    scheduler.reconcile(_ctx(store))
    pod = _get_pod(store, "p")
    (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert condition.message.startswith(
        "0/1 nodes are available: node(s) no reservations match reservation affinity. "
        "2 Reservation(s) matched owner total, 2 Reservation(s) didn't match affinity rules"
    )


@settings(max_examples=25, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=8),
    requests=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=8),
)
def test_a_restricted_reservation_is_never_allocated_beyond_its_allocatable(
    capacity: int, requests: list[int]
) -> None:
    with Store(clock=lambda: NOW) as store:
        store.create(make_node("n1", cpu=64000, memory=64 * GI))
        owners = (ReservationOwner(),)
        store.create(
            _reservation(
                "r",
                cpu=capacity * 1000,
                memory=GI,
                owners=owners,
                policy="Restricted",
                allocate_once=False,
            )
        )
        scheduler, controller = SchedulerLoop(), ReservationController()
        scheduler.reconcile(_ctx(store))
        affinity = {k.ANNOTATION_RESERVATION_AFFINITY: json.dumps({"name": "r"})}
        for i, cpu in enumerate(requests):
            store.create(_labelled(make_pod(f"p{i}", cpu=cpu * 1000), {}, affinity))
        scheduler.reconcile(_ctx(store))
        controller.reconcile(_ctx(store))
        reservation = _get_reservation(store, "r")
        placed = [_get_pod(store, f"p{i}").spec.node_name == "n1" for i in range(len(requests))]
        used = sum(cpu * 1000 for cpu, bound in zip(requests, placed, strict=True) if bound)
        assert reservation.status.allocated.get("cpu", 0) == used
        assert used <= capacity * 1000
        # Whatever was left out did not fit into what was left.
        if not all(placed):
            smallest = min(c for c, bound in zip(requests, placed, strict=True) if not bound)
            assert used + smallest * 1000 > capacity * 1000


def test_a_pod_ignoring_reservations_sees_their_room_as_free_and_owns_nothing(
    store: Store,
) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "mine"}))
    store.create(_reservation("r", cpu=3000, memory=GI, owners=(owner,)))
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    store.create(_labelled(make_pod("free-rider", cpu=2000), {k.LABEL_RESERVATION_IGNORED: "true"}))
    scheduler.reconcile(_ctx(store))
    pod = _get_pod(store, "free-rider")
    assert pod.spec.node_name == "node-1"
    assert _allocated(pod) is None


def test_an_owner_created_with_its_reservation_goes_into_it_in_the_same_pass(
    store: Store,
) -> None:
    # One apply: the reservation, its owner and a pod that owns nothing. The reserve pod is
    # first in the queue; the owner, scheduled after it in the same pass, goes into it (the
    # emptier node-2 would win otherwise), and the other pod still finds the room the
    # reservation leaves on node-1: 4 CPU = 3 reserved (the owner inside) + 1.
    store.create(make_node("node-1", cpu=4000, memory=8 * GI, labels={"zone": "a"}))
    store.create(make_node("node-2", cpu=4000, memory=8 * GI))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "owner"}))
    store.create(
        _reservation("r", cpu=3000, memory=GI, owners=(owner,), node="node-1", allocate_once=False)
    )
    store.create(_labelled(make_pod("a-owner", cpu=1000, memory=GI), {"app": "owner"}))
    other = make_pod("b-other", cpu=1000, memory=GI)
    pinned = msgspec.structs.replace(other.spec, node_selector={"zone": "a"})
    store.create(msgspec.structs.replace(other, spec=pinned))
    SchedulerLoop().reconcile(_ctx(store))

    reservation = _get_reservation(store, "r")
    assert (reservation.status.phase, reservation.status.node_name) == ("Available", "node-1")
    placed = _get_pod(store, "a-owner")
    assert placed.spec.node_name == "node-1"
    assert _allocated(placed) == {"name": "r", "uid": reservation.metadata.uid}
    other_pod = _get_pod(store, "b-other")
    assert other_pod.spec.node_name == "node-1"
    assert _allocated(other_pod) is None


def test_an_owner_whose_reservation_fits_nowhere_is_scheduled_on_its_own(store: Store) -> None:
    store.create(make_node("node-1", cpu=2000, memory=8 * GI))
    owner = ReservationOwner(object=ObjectReference(name="pod-demo-0", namespace="default"))
    store.create(_reservation("too-big", cpu=3000, memory=GI, owners=(owner,)))
    store.create(make_pod("pod-demo-0", cpu=1000, memory=GI))
    SchedulerLoop().reconcile(_ctx(store))

    reservation = _get_reservation(store, "too-big")
    assert reservation.status.node_name == ""
    assert [(c.type, c.status) for c in reservation.status.conditions] == [("Scheduled", "False")]
    pod = _get_pod(store, "pod-demo-0")
    assert pod.spec.node_name == "node-1"
    assert _allocated(pod) is None


def test_what_owners_use_inside_a_reservation_is_not_counted_twice(store: Store) -> None:
    # 8 CPU: 1 for other pods, 6 reserved, 3 of them used by an owner. A second owner of 3 CPU
    # fits: 3 of the reservation are left (Koordinator: 3 <= 8 - (1 + 6 + 3 - 3 - 3) = 4).
    # Counting the first owner both in the node and in the reservation would leave 1.
    store.create(make_node("n1", cpu=8000, memory=64 * GI))
    store.create(make_pod("others", cpu=1000, node="n1"))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "owner"}))
    store.create(
        _reservation("r", cpu=6000, memory=GI, owners=(owner,), node="n1", allocate_once=False)
    )
    scheduler = SchedulerLoop()
    scheduler.reconcile(_ctx(store))
    reservation = _get_reservation(store, "r")
    allocated = {
        k.ANNOTATION_RESERVATION_ALLOCATED: json.dumps(
            {"name": "r", "uid": reservation.metadata.uid}
        )
    }
    store.create(_labelled(make_pod("first", cpu=3000, node="n1"), {"app": "owner"}, allocated))
    store.create(_labelled(make_pod("second", cpu=3000), {"app": "owner"}))
    scheduler.reconcile(_ctx(store))
    second = _get_pod(store, "second")
    assert second.spec.node_name == "n1"
    assert _allocated(second) == {"name": "r", "uid": reservation.metadata.uid}


class _RefuseReservePods:
    """A Reserve plugin after Reservation that turns every reserve pod down."""

    name = "RefuseReservePods"

    def __init__(self, args: object) -> None:
        del args

    def reserve(self, state: CycleState, pod: PodInfo, table: NodeTable, row: int) -> Status:
        if pod.pod.metadata.annotations.get(k.ANNOTATION_RESERVE_POD) == "true":
            return Status.of(Code.UNSCHEDULABLE, "refused")
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        return None


def test_a_reservation_unreserved_in_its_pass_takes_no_owner(store: Store) -> None:
    store.create(make_node("node-1", cpu=4000, memory=8 * GI))
    owner = ReservationOwner(object=ObjectReference(name="pod-demo-0", namespace="default"))
    store.create(_reservation("r", cpu=1000, memory=GI, owners=(owner,)))
    store.create(make_pod("pod-demo-0", cpu=500, memory=GI))
    registry = {**PLUGINS, "RefuseReservePods": PluginSpec(NoArgs, _RefuseReservePods)}
    config = msgspec.structs.replace(
        DEFAULT_CONFIG, reserve=(*DEFAULT_CONFIG.reserve, "RefuseReservePods")
    )
    SchedulerLoop([build_profile(config, registry)]).reconcile(_ctx(store))

    assert _get_reservation(store, "r").status.node_name == ""
    pod = _get_pod(store, "pod-demo-0")
    assert pod.spec.node_name == "node-1"
    assert _allocated(pod) is None


def test_queue_order_decides_whether_an_owner_created_with_its_reservation_uses_it(
    store: Store,
) -> None:
    # Reserve pods share the queue with pods: by priority, then creation. A reservation whose
    # template sets a priority below its owner's is placed after the owner, which then owns
    # nothing (as in koord-scheduler); the next owner, of lower priority, goes into it.
    store.create(make_node("node-1", cpu=4000, memory=8 * GI, labels={"zone": "a"}))
    store.create(make_node("node-2", cpu=4000, memory=8 * GI))
    owner = ReservationOwner(label_selector=LabelSelector(match_labels={"app": "owner"}))
    reservation = _reservation(
        "r", cpu=2000, memory=GI, owners=(owner,), node="node-1", allocate_once=False
    )
    template = reservation.spec.template
    low = msgspec.structs.replace(
        template, spec=msgspec.structs.replace(template.spec, priority=10)
    )
    store.create(
        msgspec.structs.replace(
            reservation, spec=msgspec.structs.replace(reservation.spec, template=low)
        )
    )
    for name, priority in (("urgent", 100), ("later", 5)):
        pod = make_pod(name, cpu=1000, memory=GI, priority=priority)
        store.create(_labelled(pod, {"app": "owner"}))
    SchedulerLoop().reconcile(_ctx(store))

    placed = _get_reservation(store, "r")
    assert placed.status.node_name == "node-1"
    urgent = _get_pod(store, "urgent")
    assert urgent.spec.node_name != ""
    assert _allocated(urgent) is None
    assert _allocated(_get_pod(store, "later")) == {"name": "r", "uid": placed.metadata.uid}
