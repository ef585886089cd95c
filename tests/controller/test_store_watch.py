"""Watches: ordering, filters, selector enter/leave, resume, Expired, slow consumers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from apis.labels import parse_selector
from controller.api.groupcommit import GroupCommit
from controller.errors import Expired
from controller.store.memory import EventType, MemoryStore, Watch, WatchEvent
from tests.controller.backends import STORE_BACKENDS, open_backend
from tests.controller.storekinds import (
    GADGETS,
    REGISTRY,
    WIDGETS,
    FakeClock,
    Widget,
    applying,
    gadget,
    widget,
)

replace = msgspec.structs.replace
ADDED, MODIFIED, DELETED = EventType.ADDED, EventType.MODIFIED, EventType.DELETED


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    """Every test runs over each backend."""
    with open_backend(request.param, tmp_path, registry=REGISTRY, clock=FakeClock()) as opened:
        yield opened


async def take(watch: Watch, count: int) -> list[WatchEvent]:
    """The next ``count`` events (fails the test instead of hanging)."""
    async with asyncio.timeout(5):
        return [await anext(watch) for _ in range(count)]


def pending(watch: Watch) -> list[WatchEvent]:
    """Events already buffered, without waiting."""
    return watch.drain()


def summary(events: list[WatchEvent]) -> list[tuple[str, str, int]]:
    return [(e.type.value, e.object.metadata.name, e.resource_version) for e in events]


async def test_initial_objects_then_live_events_in_order(store: MemoryStore) -> None:
    store.create(widget("b"))
    store.create(widget("a"))
    with store.watch(WIDGETS) as watch:
        store.apply(widget("a", size=5))
        store.delete(WIDGETS, "b")
        store.create(widget("c"))
        events = await take(watch, 5)
    assert summary(events) == [
        ("ADDED", "a", 2),
        ("ADDED", "b", 2),
        ("MODIFIED", "a", 3),
        ("DELETED", "b", 4),
        ("ADDED", "c", 5),
    ]
    modified = events[2].object
    assert isinstance(modified, Widget)
    assert modified.spec.size == 5
    # a DELETED event carries the last state with the deleting version
    assert events[3].object.metadata.resource_version == "4"


async def test_watch_filters_by_kind_and_namespace(store: MemoryStore) -> None:
    everything = store.watch()
    gadgets = store.watch(GADGETS)
    team = store.watch(WIDGETS, namespace="team")
    store.create(widget("w1", "team"))
    store.create(widget("w2", "other"))
    store.create(gadget("g1"))
    assert summary(await take(everything, 3)) == [
        ("ADDED", "w1", 1),
        ("ADDED", "w2", 2),
        ("ADDED", "g1", 3),
    ]
    assert summary(await take(gadgets, 1)) == [("ADDED", "g1", 3)]
    assert summary(await take(team, 1)) == [("ADDED", "w1", 1)]
    assert pending(team) == []
    for watch in (everything, gadgets, team):
        watch.close()


async def test_no_op_writes_produce_no_events(store: MemoryStore) -> None:
    created = store.create(widget("a"))
    with store.watch(WIDGETS, resource_version=1) as watch:
        store.update(created)
        store.apply(widget("a"))
        store.apply(widget("a", size=2))
        assert summary(await take(watch, 1)) == [("MODIFIED", "a", 2)]
        assert pending(watch) == []


async def test_selector_enter_and_leave(store: MemoryStore) -> None:
    store.create(widget("a", labels={"app": "web"}))
    store.create(widget("b", labels={"app": "db"}))
    with store.watch(WIDGETS, selector=parse_selector("app=web")) as watch:
        store.apply(widget("b", labels={"app": "web"}))  # starts matching
        store.apply(widget("a", labels={"app": "db"}))  # stops matching
        store.apply(widget("a", labels={"app": "db"}, size=3))  # still not matching
        store.apply(widget("b", labels={"app": "web"}, size=2))  # keeps matching
        store.delete(WIDGETS, "a")  # not matching: unseen
        store.delete(WIDGETS, "b")
        events = await take(watch, 5)
        assert pending(watch) == []
    assert summary(events) == [
        ("ADDED", "a", 2),
        ("ADDED", "b", 3),
        ("DELETED", "a", 4),
        ("MODIFIED", "b", 6),
        ("DELETED", "b", 8),
    ]
    assert events[2].object.metadata.labels == {"app": "db"}


async def test_resume_from_a_version(store: MemoryStore) -> None:
    for name in "abcd":
        store.create(widget(name))
    store.delete(WIDGETS, "a")
    with store.watch(WIDGETS, resource_version=2) as watch:
        store.create(widget("e"))
        assert summary(await take(watch, 4)) == [
            ("ADDED", "c", 3),
            ("ADDED", "d", 4),
            ("DELETED", "a", 5),
            ("ADDED", "e", 6),
        ]
    with store.watch(WIDGETS, resource_version=store.resource_version) as watch:
        assert pending(watch) == []


async def test_resume_applies_the_filters(store: MemoryStore) -> None:
    store.create(widget("a", "x", labels={"app": "web"}))
    store.create(gadget("g"))
    store.create(widget("b", "y", labels={"app": "web"}))
    store.apply(widget("a", "x", labels={"app": "db"}))
    with store.watch(
        WIDGETS, namespace="x", selector=parse_selector("app=web"), resource_version=0
    ) as watch:
        assert summary(await take(watch, 2)) == [("ADDED", "a", 1), ("DELETED", "a", 4)]
        assert pending(watch) == []


async def test_too_old_version_is_expired() -> None:
    store = MemoryStore(registry=REGISTRY, clock=FakeClock(), history_size=3)
    for i in range(6):
        store.create(widget(f"w{i}"))
    # the history holds versions 4..6: resuming after 3 works, after 2 does not
    with store.watch(WIDGETS, resource_version=3) as watch:
        assert [e.resource_version for e in await take(watch, 3)] == [4, 5, 6]
    with pytest.raises(Expired, match="too old resource version: 2"):
        store.watch(WIDGETS, resource_version=2)


async def test_slow_watcher_is_closed_not_blocking_writers() -> None:
    store = MemoryStore(registry=REGISTRY, clock=FakeClock(), watch_queue_size=4)
    slow = store.watch(WIDGETS)
    fast = store.watch(WIDGETS)
    for i in range(10):
        store.create(widget(f"w{i}"))
        assert [e.resource_version for e in pending(fast)] == [i + 1]
    assert store.resource_version == 10  # nobody waited for the slow watcher
    # it first gets everything it had buffered, then the error, then nothing
    got = [e.resource_version for e in await take(slow, 4)]
    assert got == [1, 2, 3, 4]
    with pytest.raises(Expired, match="resourceVersion 4"):
        await anext(slow)
    with pytest.raises(StopAsyncIteration):
        await anext(slow)
    # it can resume from the last version it saw
    with store.watch(WIDGETS, resource_version=got[-1]) as again:
        assert [e.resource_version for e in await take(again, 6)] == [5, 6, 7, 8, 9, 10]
    fast.close()


async def test_initial_backlog_does_not_count_against_the_queue() -> None:
    store = MemoryStore(registry=REGISTRY, clock=FakeClock(), watch_queue_size=2)
    for i in range(10):
        store.create(widget(f"w{i}"))
    with store.watch(WIDGETS) as watch:
        store.create(widget("late"))
        events = await take(watch, 11)
    assert events[-1].object.metadata.name == "late"


async def test_close_ends_iteration_and_wakes_a_waiting_consumer(store: MemoryStore) -> None:
    watch = store.watch(WIDGETS)
    consumer = asyncio.ensure_future(anext(watch))
    await asyncio.sleep(0)
    assert not consumer.done()
    watch.close()
    with pytest.raises(StopAsyncIteration):
        await consumer
    store.create(widget("a"))
    assert pending(watch) == []


async def test_closing_the_store_ends_watches(store: MemoryStore) -> None:
    watch = store.watch()
    store.create(widget("a"))
    store.close()
    assert [e async for e in watch] == []


async def test_a_consumer_waiting_receives_events(store: MemoryStore) -> None:
    with store.watch(WIDGETS) as watch:
        consumer = asyncio.ensure_future(take(watch, 2))
        await asyncio.sleep(0)
        store.create(widget("a"))
        await asyncio.sleep(0)
        store.create(widget("b"))
        assert summary(await consumer) == [("ADDED", "a", 1), ("ADDED", "b", 2)]


async def test_finalizer_flow_events(store: MemoryStore) -> None:
    store.create(widget("a", finalizers=("example.com/f",)))
    with store.watch(WIDGETS, resource_version=1) as watch:
        marked, _ = store.delete(WIDGETS, "a")
        store.update(replace(marked, metadata=replace(marked.metadata, finalizers=())))
        events = await take(watch, 2)
    assert summary(events) == [("MODIFIED", "a", 2), ("DELETED", "a", 3)]
    assert events[0].object.metadata.deletion_timestamp is not None


async def test_group_commit_events_are_in_version_order(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    with store.watch(WIDGETS) as watch:

        async def writer(prefix: str) -> None:
            for i in range(20):
                await commits.submit(applying(widget(f"{prefix}{i % 5}", size=i)))

        await asyncio.gather(*(writer(p) for p in "abcd"))
        events = await take(watch, store.resource_version)
        assert pending(watch) == []
    versions = [e.resource_version for e in events]
    assert versions == list(range(1, store.resource_version + 1))
    assert [int(e.object.metadata.resource_version) for e in events] == versions
    await commits.aclose()


async def test_failed_ops_publish_nothing(store: MemoryStore) -> None:
    def fails(s: MemoryStore) -> None:
        s.create(widget("ghost"))
        raise ValueError("no")

    commits = GroupCommit(store)
    with store.watch(WIDGETS) as watch:
        results = await asyncio.gather(
            commits.submit(fails),
            commits.submit(lambda s: s.create(widget("real"))),
            return_exceptions=True,
        )
        assert isinstance(results[0], ValueError)
        assert summary(await take(watch, 1)) == [("ADDED", "real", 1)]
        assert pending(watch) == []
    await commits.aclose()
