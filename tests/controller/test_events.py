"""Events about objects: recorded through the store, aggregated on repeats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apis.core import Event, Node, Pod
from apis.meta import ObjectMeta
from controller.events import MAX_MESSAGE_BYTES, NORMAL, WARNING, EventRecorder
from controller.store import Store


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
