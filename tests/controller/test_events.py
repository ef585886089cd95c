"""Events about objects: recorded through the store, aggregated on repeats."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apis.core import Event, Node, Pod
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from controller import daemon
from controller.api.client import Client, Unreachable
from controller.config import ControllerConfig, StoreSection
from controller.events import EVENT_TTL, MAX_MESSAGE_BYTES, NORMAL, WARNING, EventRecorder, EventTTL
from controller.loops import LoopContext
from controller.store.sqlite import Store


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _events(store: Store) -> list[Event]:
    items, _ = store.list(store.registry.for_type(Event))
    return [e for e in items if isinstance(e, Event)]


def test_event_names_the_object_and_lands_in_its_namespace() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        pod = store.create(Pod(metadata=ObjectMeta(name="web", namespace="team-a")))
        event = EventRecorder(store, component="koord-scheduler", clock=clock).record(
            pod, type=WARNING, reason="FailedScheduling", message="0/3 nodes are available"
        )
        assert event.metadata.namespace == "team-a"
        assert event.involved_object.kind == "Pod"
        assert event.involved_object.name == "web"
        assert event.involved_object.uid == pod.metadata.uid
        assert event.source.component == "koord-scheduler"
        assert (event.type, event.reason, event.count) == (WARNING, "FailedScheduling", 1)
        assert event.first_timestamp == event.last_timestamp == clock.now
        assert _events(store) == [event]


def test_cluster_scoped_objects_get_events_in_default() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        node = store.create(Node(metadata=ObjectMeta(name="gpu-1")))
        event = EventRecorder(store, component="c", clock=clock).record(
            node, type=NORMAL, reason="Ready", message="ok"
        )
        assert event.metadata.namespace == "default"


def test_repeats_bump_the_count_and_move_last_timestamp() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        pod = store.create(Pod(metadata=ObjectMeta(name="web")))
        recorder = EventRecorder(store, component="c", clock=clock)
        first = recorder.record(pod, type=NORMAL, reason="Scheduled", message="to node-1")
        clock.now += timedelta(seconds=30)
        again = recorder.record(pod, type=NORMAL, reason="Scheduled", message="to node-1")
        assert again.metadata.name == first.metadata.name
        assert again.count == 2
        assert again.first_timestamp == first.first_timestamp
        assert again.last_timestamp == clock.now
        other = recorder.record(pod, type=NORMAL, reason="Scheduled", message="to node-2")
        assert other.metadata.name != first.metadata.name
        assert len(_events(store)) == 2


def test_same_instant_events_get_distinct_names() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        pod = store.create(Pod(metadata=ObjectMeta(name="web")))
        recorder = EventRecorder(store, component="c", clock=clock)
        a = recorder.record(pod, type=NORMAL, reason="A", message="a")
        b = recorder.record(pod, type=NORMAL, reason="B", message="b")
        assert a.metadata.name != b.metadata.name


def test_long_messages_are_truncated_like_kubernetes() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        pod = store.create(Pod(metadata=ObjectMeta(name="web")))
        event = EventRecorder(store, component="c", clock=clock).record(
            pod, type=WARNING, reason="R", message="x" * 5000
        )
        assert len(event.message.encode()) <= MAX_MESSAGE_BYTES
        assert event.message.endswith("...")


def test_record_many_writes_each_event_once_and_aggregates_repeats() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        web = store.create(Pod(metadata=ObjectMeta(name="web", namespace="team-a")))
        db = store.create(Pod(metadata=ObjectMeta(name="db", namespace="team-a")))
        recorder = EventRecorder(store, component="koord-queue", clock=clock)
        recorder.record_many(
            [
                (web, NORMAL, "Scheduled", "admitted"),
                (db, NORMAL, "Scheduled", "admitted"),
                (web, WARNING, "Evicted", "preempted"),
                (web, NORMAL, "Scheduled", "admitted"),
            ]
        )
        events = _events(store)
        assert len({e.metadata.name for e in events}) == len(events) == 3
        counts = {(e.involved_object.name, e.reason): e.count for e in events}
        assert counts == {("web", "Scheduled"): 2, ("db", "Scheduled"): 1, ("web", "Evicted"): 1}
        clock.now += timedelta(seconds=5)
        recorder.record_many([(db, NORMAL, "Scheduled", "admitted")])
        again = {(e.involved_object.name, e.reason): e.count for e in _events(store)}
        assert again[("db", "Scheduled")] == 2


def test_record_many_bumps_what_it_recorded_before() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        pods = [store.create(Pod(metadata=ObjectMeta(name=f"p{i}"))) for i in range(3)]
        recorder = EventRecorder(store, component="koord-descheduler", clock=clock)
        recorder.record_many([(p, NORMAL, "EvictionProposed", "dry run") for p in pods])
        first = {e.involved_object.name: e for e in _events(store)}
        # one Event deleted meanwhile (its TTL ran out): recorded anew
        kind = store.registry.for_type(Event)
        store.delete(kind, first["p2"].metadata.name, first["p2"].metadata.namespace)
        clock.now += timedelta(seconds=10)
        version = store.resource_version
        recorder.record_many([(p, NORMAL, "EvictionProposed", "dry run") for p in (*pods, pods[0])])
        events = {e.involved_object.name: e for e in _events(store)}
        assert {name: e.count for name, e in events.items()} == {"p0": 3, "p1": 2, "p2": 1}
        assert events["p0"].metadata.name == first["p0"].metadata.name
        assert events["p0"].first_timestamp == first["p0"].first_timestamp
        assert events["p0"].last_timestamp == clock.now
        assert events["p2"].metadata.name != first["p2"].metadata.name
        assert store.resource_version - version == 3  # two bumps, one new Event


# --- expiry -----------------------------------------------------------------------------------


def test_events_expire_an_hour_after_their_last_write() -> None:
    """Kubernetes keeps Events one hour (``--event-ttl``): counted from the last write, so an
    Event that keeps recurring stays and one that stopped goes."""
    clock = Clock()
    with Store(clock=clock) as store:
        pod = store.create(Pod(metadata=ObjectMeta(name="web")))
        recorder = EventRecorder(store, component="c", clock=clock)
        once = recorder.record(pod, type=NORMAL, reason="Pulled", message="image pulled")
        recurring = recorder.record(pod, type=WARNING, reason="BackOff", message="restarting")
        ctx = LoopContext(store=store, now=clock)
        ttl = EventTTL()
        assert ttl.ttl == timedelta(seconds=EVENT_TTL) == timedelta(hours=1)
        assert ttl.reconcile(ctx) == 3600.0
        clock.now += timedelta(minutes=40)
        recorder.record(pod, type=WARNING, reason="BackOff", message="restarting")
        clock.now += timedelta(minutes=20)  # an hour after both were created
        assert ttl.reconcile(ctx) == 40 * 60.0  # the recurring one was written 20 minutes ago
        assert [e.metadata.name for e in _events(store)] == [recurring.metadata.name]
        assert once.metadata.name not in {e.metadata.name for e in _events(store)}
        clock.now += timedelta(minutes=40)
        assert ttl.reconcile(ctx) is None
        assert _events(store) == []


def test_a_configured_ttl_and_an_event_with_only_a_creation_time() -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        bare = store.create(Event(metadata=ObjectMeta(name="bare", namespace="default")))
        old = store.create(
            Event(
                metadata=ObjectMeta(name="old", namespace="default"),
                last_timestamp=clock.now - timedelta(days=1),
            )
        )
        assert old.metadata.creation_timestamp == bare.metadata.creation_timestamp == clock.now
        ttl = EventTTL(ttl=600)
        ctx = LoopContext(store=store, now=clock)
        assert ttl.reconcile(ctx) == 600.0
        clock.now += timedelta(seconds=600)
        assert ttl.reconcile(ctx) is None
        assert _events(store) == []
        with pytest.raises(ValueError, match="must be positive"):
            EventTTL(ttl=0)


async def test_the_controller_daemon_expires_events(tmp_path: Path) -> None:
    """``koordpy controller run`` runs the loop (here with ``[store] event_ttl = 1``): an Event
    created through the API goes by itself."""
    stop = asyncio.Event()
    api = f"unix://{tmp_path / 'c.sock'}"
    served = asyncio.create_task(
        daemon.run(
            ControllerConfig(store=StoreSection(event_ttl=1.0)),
            state_dir=tmp_path / "state",
            api_address=api,
            metrics_address="off",
            stop=stop,
        )
    )
    kind = default_registry().for_type(Event)

    def expired() -> bool:
        """The Event created, then polled until it is gone (in a thread: the API is sync)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(api, timeout=5) as client:
                    client.create(Event(metadata=ObjectMeta(name="seen", namespace="default")))
                break
            except Unreachable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        while time.monotonic() < deadline:
            with Client(api, timeout=5) as client:
                if not client.list(kind)[0]:
                    return True
            time.sleep(0.2)
        return False

    try:
        assert await asyncio.to_thread(expired)
    finally:
        stop.set()
        await served
