"""Watch fan-out: ordered ADDED/MODIFIED/DELETED events to every watcher, and a bounded history.

The store hands every committed transaction's changes to :meth:`WatchHub.publish`, in
resourceVersion order. Each :class:`Watch` filters them by kind, namespace and label selector
and buffers what it keeps until its consumer iterates. With a selector, an object whose labels
stop matching is reported as DELETED to that watcher and one that starts matching as ADDED
(Kubernetes' behaviour), so a consumer's view always equals a filtered list.

Writers never wait for watchers: a watcher whose consumer falls more than ``queue_size`` events
behind is closed; its consumer first receives every event buffered so far, then
:class:`~controller.errors.Expired`, and can resume from the last version it saw (while the
history still holds it) or re-list. Events are never dropped silently.

The hub keeps the last ``history_size`` changes so a watch can resume from a resourceVersion;
asking for one older than the history raises ``Expired`` (HTTP 410 Gone semantics).
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import Self

import msgspec

from apis.labels import Selector
from apis.meta import Object
from controller.errors import Expired

__all__ = ["Change", "EventType", "Watch", "WatchEvent", "WatchHub"]


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class WatchEvent(msgspec.Struct, frozen=True, gc=False):
    """One event a watcher receives; ``resource_version`` orders them."""

    type: EventType
    object: Object
    resource_version: int


class Change(msgspec.Struct, frozen=True, gc=False):
    """One committed write, as the store publishes it.

    ``object`` is the new state (for DELETED the last state, carrying the deleting version);
    ``previous`` the state before the write (``None`` for ADDED).
    """

    type: EventType
    kind: str
    object: Object
    previous: Object | None
    resource_version: int


class Watch:
    """An async iterator of :class:`WatchEvent`; ``close()`` ends it (also a context manager)."""

    def __init__(
        self,
        hub: WatchHub,
        *,
        kind: str | None,
        namespace: str | None,
        selector: Selector | None,
        capacity: int,
        initial: Iterable[WatchEvent] = (),
    ) -> None:
        self._hub = hub
        self.kind = kind
        self.namespace = namespace or None
        self.selector = None if selector is None or selector.empty else selector
        self._buffer: deque[WatchEvent] = deque(initial)
        self._capacity = capacity + len(self._buffer)
        self._waiter: asyncio.Future[None] | None = None
        self._error: Expired | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """No further events will arrive (buffered ones may still be read)."""
        return self._closed

    def accepts(self, change: Change) -> WatchEvent | None:
        """What this watcher sees of ``change``, if anything."""
        obj = change.object
        if self.namespace is not None and obj.metadata.namespace != self.namespace:
            return None
        selector = self.selector
        if selector is None:
            return WatchEvent(change.type, obj, change.resource_version)
        now = selector.matches(obj.metadata.labels)
        previous = change.previous
        if change.type is EventType.MODIFIED and previous is not None:
            before = selector.matches(previous.metadata.labels)
            if before and not now:
                return WatchEvent(EventType.DELETED, obj, change.resource_version)
            if now and not before:
                return WatchEvent(EventType.ADDED, obj, change.resource_version)
        if not now:
            return None
        return WatchEvent(change.type, obj, change.resource_version)

    def _push(self, event: WatchEvent) -> bool:
        """Buffer ``event``; False (and the watch failed) when the consumer is too far behind."""
        if self._closed:
            return False
        if len(self._buffer) >= self._capacity:
            last = self._buffer[-1].resource_version
            self._fail(
                Expired(
                    f"watch closed: its consumer fell {len(self._buffer)} events behind;"
                    f" watch again from resourceVersion {last} or re-list"
                )
            )
            return False
        self._buffer.append(event)
        self._wake()
        return True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: Expired) -> None:
        self._error = error
        self._closed = True
        self._hub.discard(self)
        self._wake()

    def drain(self) -> list[WatchEvent]:
        """Every event buffered now, without waiting (a pending error stays for ``anext``)."""
        events = list(self._buffer)
        self._buffer.clear()
        return events

    def close(self) -> None:
        """Stop watching; iteration ends at once (buffered events are dropped)."""
        self._closed = True
        self._buffer.clear()
        self._error = None
        self._hub.discard(self)
        self._wake()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            if self._buffer:
                return self._buffer.popleft()
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class WatchHub:
    """The watchers of one store and the history of its recent changes."""

    def __init__(self, *, history_size: int, queue_size: int) -> None:
        if history_size < 1 or queue_size < 1:
            raise ValueError("history_size and queue_size must be positive")
        self._history: deque[Change] = deque(maxlen=history_size)
        self._queue_size = queue_size
        #: kind key (None: every kind) -> its watchers
        self._watchers: dict[str | None, set[Watch]] = {}

    @property
    def oldest_resumable(self) -> int | None:
        """The oldest resourceVersion a watch can resume from (None: any up to now)."""
        return self._history[0].resource_version - 1 if self._history else None

    def __len__(self) -> int:
        return sum(len(group) for group in self._watchers.values())

    def open(
        self,
        *,
        kind: str | None,
        namespace: str | None,
        selector: Selector | None,
        current: int,
        resource_version: int | None,
        objects: Iterable[Object],
    ) -> Watch:
        """A new watch: from now on, after a synthetic ADDED for each of ``objects`` (those that
        match), or, given ``resource_version``, replaying every kept change after it."""
        probe = Watch(self, kind=kind, namespace=namespace, selector=selector, capacity=1)
        initial: list[WatchEvent] = []
        if resource_version is None:
            for obj in objects:
                event = probe.accepts(Change(EventType.ADDED, "", obj, None, current))
                if event is not None:
                    initial.append(event)
        else:
            oldest = self.oldest_resumable
            if oldest is None:
                oldest = current
            if resource_version < oldest:
                raise Expired(
                    f"too old resource version: {resource_version} (the oldest a watch can"
                    f" resume from is {oldest}); re-list and watch again"
                )
            replay: list[Change] = []
            for change in reversed(self._history):
                if change.resource_version <= resource_version:
                    break
                replay.append(change)
            for change in reversed(replay):
                if kind is not None and change.kind != kind:
                    continue
                event = probe.accepts(change)
                if event is not None:
                    initial.append(event)
        watch = Watch(
            self,
            kind=kind,
            namespace=namespace,
            selector=selector,
            capacity=self._queue_size,
            initial=initial,
        )
        self._watchers.setdefault(kind, set()).add(watch)
        return watch

    def changes_after(self, resource_version: int, *, current: int) -> list[Change]:
        """Every change after ``resource_version``, oldest first; ``Expired`` when the history
        no longer reaches back to it (``current``: the store's version now)."""
        oldest = self.oldest_resumable
        if resource_version < (current if oldest is None else oldest):
            raise Expired(f"resourceVersion {resource_version} is older than the store's history")
        after: list[Change] = []
        for change in reversed(self._history):
            if change.resource_version <= resource_version:
                break
            after.append(change)
        after.reverse()
        return after

    def discard(self, watch: Watch) -> None:
        group = self._watchers.get(watch.kind)
        if group is not None:
            group.discard(watch)
            if not group:
                del self._watchers[watch.kind]

    def publish(self, changes: list[Change]) -> None:
        """Record committed ``changes`` (in version order) and hand them to the watchers."""
        self._history.extend(changes)
        watchers = self._watchers
        if not watchers:
            return
        everything = tuple(watchers.get(None, ()))
        for change in changes:
            group = watchers.get(change.kind)
            targets = (*group, *everything) if group else everything
            for watch in targets:
                event = watch.accepts(change)
                if event is not None:
                    watch._push(event)

    def close(self) -> None:
        """End every watch (the store is closing)."""
        for group in list(self._watchers.values()):
            for watch in list(group):
                watch.close()
        self._watchers.clear()
