"""Events from a node: about the node or its own pods, rate limited per node, clamped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from apis.codec import encode_json
from apis.core import Event, Pod, PodSpec
from apis.meta import ObjectMeta, ObjectReference
from controller.fleet.ingest import EVENT_BURST, EVENT_QPS, Ingest, Result
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store() as opened:
        opened.create(
            Pod(metadata=ObjectMeta(name="mine", namespace="team-a"), spec=PodSpec(node_name="n1"))
        )
        opened.create(
            Pod(
                metadata=ObjectMeta(name="theirs", namespace="team-a"), spec=PodSpec(node_name="n2")
            )
        )
        yield opened


def sent(
    node: str,
    about: ObjectReference,
    *,
    namespace: str = "",
    when: datetime | None = None,
    finalizers: tuple[str, ...] = (),
) -> Message:
    event = Event(
        metadata=ObjectMeta(namespace=namespace, finalizers=finalizers),
        involved_object=about,
        reason="Evicted",
        message="evicted by feature BECPUEvict",
        type="Warning",
        first_timestamp=when,
        last_timestamp=when,
        event_time=when,
    )
    return Message(node_topic(node, "events"), encode_json(event))


def events(store: Store) -> list[Event]:
    items = store.list(store.registry.for_type(Event))[0]
    return [e for e in items if isinstance(e, Event)]


POD_MINE = ObjectReference(api_version="v1", kind="Pod", namespace="team-a", name="mine")
POD_THEIRS = ObjectReference(api_version="v1", kind="Pod", namespace="team-a", name="theirs")


async def test_a_node_can_only_speak_of_itself_and_its_own_pods(store: Store) -> None:
    """The attack: n1 writes Events on n2's pod, on n2, on a ConfigMap; all refused."""
    ingest = Ingest(Bus(), store)
    attacks = [
        sent("n1", POD_THEIRS),
        sent("n1", ObjectReference(kind="Node", name="n2")),
        sent("n1", ObjectReference(kind="ConfigMap", namespace="team-a", name="settings")),
        sent("n1", ObjectReference(api_version="v1", kind="Pod", namespace="team-a", name="gone")),
        sent("n1", msgspec.structs.replace(POD_MINE, uid="not-its-uid")),
        sent("n1", POD_MINE, finalizers=("example.com/keep",)),
    ]
    results = await ingest.handle_many(attacks)
    assert events(store) == []
    assert results == [Result.FORBIDDEN] * len(attacks)
    fine = [sent("n1", POD_MINE), sent("n1", ObjectReference(kind="Node", name="n1"))]
    assert await ingest.handle_many(fine) == [Result.APPLIED] * 2
    where = sorted((e.metadata.namespace, e.involved_object.kind) for e in events(store))
    assert where == [("default", "Node"), ("team-a", "Pod")]


async def test_an_event_in_another_namespace_than_its_pod_is_refused(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(sent("n1", POD_MINE, namespace="kube-system")) == Result.INVALID
    assert events(store) == []


async def test_each_node_gets_the_kubelets_event_rate(store: Store) -> None:
    """A burst: the first 100 are taken, the rest dropped until the bucket refills (50/s);
    another node's Events are not held back by it."""
    assert (EVENT_QPS, EVENT_BURST) == (50.0, 100)
    clock = Clock()
    ingest = Ingest(Bus(), store, clock=clock)
    burst = [sent("n1", POD_MINE) for _ in range(EVENT_BURST + 20)]
    results = await ingest.handle_many(burst)
    assert len(events(store)) == EVENT_BURST
    assert results == [Result.APPLIED] * EVENT_BURST + [Result.THROTTLED] * 20
    assert await ingest.handle(sent("n2", POD_THEIRS)) == Result.APPLIED
    clock.now += timedelta(seconds=1)
    later = await ingest.handle_many([sent("n1", POD_MINE) for _ in range(60)])
    assert later == [Result.APPLIED] * 50 + [Result.THROTTLED] * 10


async def test_event_times_in_the_future_are_clamped_so_they_expire(store: Store) -> None:
    clock = Clock()
    ingest = Ingest(Bus(), store, clock=clock)
    year = T0 + timedelta(days=365)
    future = sent("n1", POD_MINE, when=year)
    assert await ingest.handle(future) == Result.APPLIED
    (stored,) = events(store)
    assert (stored.first_timestamp, stored.last_timestamp, stored.event_time) == (T0, T0, T0)
