"""The in-process message bus: MQTT's semantics without a broker.

``koordpy up`` joins the controller and its agents through this bus; a fleet uses an MQTT 5
broker with the same topics (``koordpy/v1/nodes/{node}/{leaf}``) and the same rules:

* **retained messages**: the last retained message of a topic is delivered to every new
  matching subscriber before anything else; a retained empty payload clears it (and is still
  delivered to the current subscribers, as MQTT does);
* **wildcards**: ``+`` matches one topic level, ``#`` (last) any number of levels, the parent
  included; wildcards never match topics that start with ``$``;
* **will**: a client may leave a message to publish when it disconnects without a clean close
  (an agent's ``status`` -> ``{"state":"offline"}``, retained); a clean close publishes nothing
  and removes nothing retained;
* **ordering**: messages reach each subscriber in the order they were published;
* **bounded queues**: a subscriber that falls more than ``queue_size`` messages behind loses its
  subscription with :class:`BusOverflow` on the next read; subscribing again replays the
  retained state, so a supervised consumer resynchronises by restarting.

Leaves under ``koordpy/v1/nodes/{node}/``: the agent publishes ``node``, ``device``,
``nodemetric``, ``status`` (retained), ``events`` and ``evictions`` (requests the controller
carries out); the controller publishes ``pods`` (the PodList bound to the node) and
``nodeslo`` (the NodeSLO the agent enforces), both retained.

Everything runs on the event loop's thread; ``publish`` never blocks.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Final, Literal

import msgspec

__all__ = [
    "AGENT_LEAVES",
    "CONTROLLER_LEAVES",
    "LEAVES",
    "RETAINED_LEAVES",
    "ROOT",
    "AgentStatus",
    "Bus",
    "BusClient",
    "BusError",
    "BusOverflow",
    "Message",
    "Subscription",
    "check_filter",
    "node_topic",
    "parse_node_topic",
    "topic_matches",
]

_log = logging.getLogger(__name__)

#: Root of every koordpy topic (the wire protocol's version is part of it).
ROOT: Final = "koordpy/v1"
#: The leaves under ``koordpy/v1/nodes/{node}/`` and who publishes them.
LEAVES: Final = (
    *("node", "device", "nodemetric", "status", "events", "evictions"),
    *("pods", "nodeslo", "nodemetricspec"),
)

Leaf = Literal[
    "node",
    "device",
    "nodemetric",
    "status",
    "events",
    "evictions",
    "pods",
    "nodeslo",
    "nodemetricspec",
]
#: Leaves whose messages are published retained (a node's state); the rest are events.
RETAINED_LEAVES: Final = frozenset(
    {"node", "device", "nodemetric", "status", "pods", "nodeslo", "nodemetricspec"}
)
#: Leaves only agents publish (uplink) and only the controller publishes (downlink):
#: ``nodemetricspec`` is the node's NodeMetric with its spec only (what the agent follows).
AGENT_LEAVES: Final = ("node", "device", "nodemetric", "status", "events", "evictions")
CONTROLLER_LEAVES: Final = ("pods", "nodeslo", "nodemetricspec")


class BusError(Exception):
    """A bus operation was misused (bad topic or filter, closed client)."""


class BusOverflow(BusError):  # noqa: N818 - the condition is the name
    """A subscriber fell too far behind and lost its subscription."""


class AgentStatus(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Body of ``koordpy/v1/nodes/{node}/status``."""

    state: Literal["online", "offline"]
    since: datetime | None = None


def _check_segment(value: str, what: str) -> None:
    if not value or any(ch in value for ch in "/+#\0"):
        raise BusError(f"{what} must be a non-empty topic level without / + # NUL, got {value!r}")


def node_topic(node: str, leaf: str) -> str:
    """``koordpy/v1/nodes/{node}/{leaf}``."""
    _check_segment(node, "node name")
    if leaf not in LEAVES:
        raise BusError(f"unknown topic leaf {leaf!r} (one of {', '.join(LEAVES)})")
    return f"{ROOT}/nodes/{node}/{leaf}"


def parse_node_topic(topic: str) -> tuple[str, str] | None:
    """``(node, leaf)`` of a node topic, else ``None``."""
    prefix = f"{ROOT}/nodes/"
    if not topic.startswith(prefix):
        return None
    node, sep, leaf = topic[len(prefix) :].partition("/")
    if not sep or not node or leaf not in LEAVES:
        return None
    return node, leaf


def _check_topic(topic: str) -> None:
    if not topic or "+" in topic or "#" in topic or "\0" in topic:
        raise BusError(f"invalid topic {topic!r} (non-empty, no wildcards)")


def _check_filter(topic_filter: str) -> None:
    if not topic_filter or "\0" in topic_filter:
        raise BusError(f"invalid topic filter {topic_filter!r}")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise BusError(f"invalid topic filter {topic_filter!r}: '#' must be a whole last level")
        if "+" in level and level != "+":
            raise BusError(f"invalid topic filter {topic_filter!r}: '+' must be a whole level")


def check_filter(topic_filter: str) -> None:
    """Raise :class:`BusError` unless ``topic_filter`` is a valid MQTT topic filter."""
    _check_filter(topic_filter)


def topic_matches(topic_filter: str, topic: str) -> bool:
    """MQTT topic matching (the filter is assumed valid)."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    want = topic_filter.split("/")
    have = topic.split("/")
    for i, level in enumerate(want):
        if level == "#":
            return True  # also "a/#" against "a": the parent level matches
        if i >= len(have):
            return False
        if level != "+" and level != have[i]:
            return False
    return len(have) == len(want)


#: :func:`topic_matches`, remembered: a fleet publishes the same topics over and over.
_matches = functools.lru_cache(maxsize=1 << 16)(topic_matches)


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    payload: bytes
    #: True when delivered from the retained store to a new subscriber.
    retain: bool = False


class Subscription:
    """Messages matching one filter, in order; iterate with ``async for``.

    ``coalesce``: a retained topic's message still unread when a newer one of that topic
    arrives is dropped (the newer one queues at the end), so a subscriber behind a fleet's
    reports gets each node's newest state, in publication order, rather than falling further
    behind and overflowing. Messages that are not retained are never dropped that way.
    """

    def __init__(
        self,
        bus: Bus,
        topic_filter: str,
        queue_size: int,
        *,
        coalesce: bool = False,
        superseded: Callable[[Message], None] | None = None,
    ) -> None:
        self.filter = topic_filter
        self.coalesce = coalesce
        #: told of each unread message a newer one replaced
        self._on_superseded = superseded
        self._bus = bus
        #: topic (retained publications) or a sequence number (the rest) -> the message
        self._queue: OrderedDict[str | int, Message] = OrderedDict()
        self._sequence = itertools.count()
        self._waiter: asyncio.Future[None] | None = None
        self._size = queue_size
        self._overflowed = False
        self._closed = False
        #: unread retained messages a newer one replaced
        self.superseded = 0

    def _deliver(self, message: Message, retained: bool = False) -> None:
        if self._closed or self._overflowed:
            return
        queue = self._queue
        key: str | int
        if self.coalesce and (retained or message.retain):
            key = message.topic
            older = queue.pop(key, None)
            if older is not None:
                self.superseded += 1
                if self._on_superseded is not None:
                    self._on_superseded(older)
        else:
            key = next(self._sequence)
        if len(queue) >= self._size:
            self._overflowed = True
            self._bus._unsubscribe(self)
            queue.clear()
            self._wake()
            _log.warning(
                "subscriber to %s fell %d messages behind; subscription dropped",
                self.filter,
                self._size,
            )
            return
        queue[key] = message
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def pending(self) -> int:
        """Messages waiting to be read."""
        return len(self._queue)

    def _ended(self) -> BusError:
        if self._overflowed:
            return BusOverflow(f"subscriber to {self.filter} fell {self._size} messages behind")
        return BusError(f"subscription to {self.filter} is closed")

    async def get(self) -> Message:
        """The next message; raises :class:`BusOverflow` or :class:`BusError` when closed."""
        while not self._queue:
            if self._closed or self._overflowed:
                raise self._ended()
            waiter = self._waiter
            if waiter is None or waiter.done():
                waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter
        return self._queue.popitem(last=False)[1]

    def get_nowait(self) -> Message | None:
        """The next message if one is waiting, else ``None``; raises like :meth:`get`."""
        if not self._queue:
            if self._closed or self._overflowed:
                raise self._ended()
            return None
        return self._queue.popitem(last=False)[1]

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            try:
                yield await self.get()
            except BusOverflow:
                raise
            except BusError:
                return

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._bus._unsubscribe(self)
        self._wake()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BusClient:
    """One connection to the bus: publishes, subscribes, and owns an optional will message.

    Use as a context manager: leaving it normally (or by cancellation) is a clean close;
    leaving it with an exception is an unclean disconnect and publishes the will.
    """

    def __init__(self, bus: Bus, client_id: str, will: Message | None) -> None:
        self.client_id = client_id
        self._bus = bus
        self._will = will
        self._subscriptions: list[Subscription] = []
        self._connected = True

    @property
    def connected(self) -> bool:
        return self._connected

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None:
        if not self._connected:
            raise BusError(f"client {self.client_id} is closed")
        self._bus.publish(topic, payload, retain=retain)

    def subscribe(
        self,
        topic_filter: str,
        *,
        queue_size: int | None = None,
        coalesce: bool = False,
        superseded: Callable[[Message], None] | None = None,
    ) -> Subscription:
        if not self._connected:
            raise BusError(f"client {self.client_id} is closed")
        sub = self._bus.subscribe(
            topic_filter, queue_size=queue_size, coalesce=coalesce, superseded=superseded
        )
        self._subscriptions.append(sub)
        return sub

    def _end(self) -> None:
        self._connected = False
        for sub in self._subscriptions:
            sub.close()
        self._subscriptions.clear()
        self._bus._clients.pop(self.client_id, None)

    def close(self) -> None:
        """Clean close: the will is discarded."""
        if self._connected:
            self._end()

    def disconnect(self) -> None:
        """Unclean disconnect (a crash, a lost connection): the will is published."""
        if not self._connected:
            return
        self._end()
        if self._will is not None:
            _log.info("client %s went away; publishing its will", self.client_id)
            self._bus.publish(self._will.topic, self._will.payload, retain=self._will.retain)

    def __enter__(self) -> BusClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or issubclass(exc_type, asyncio.CancelledError):
            self.close()
        else:
            self.disconnect()


class Bus:
    """The broker: retained store, subscriptions, clients."""

    def __init__(self, *, queue_size: int = 1024) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be positive, got {queue_size}")
        self.queue_size = queue_size
        self._retained: dict[str, bytes] = {}
        self._subscriptions: list[Subscription] = []
        self._clients: dict[str, BusClient] = {}

    def connect(self, client_id: str, *, will: Message | None = None) -> BusClient:
        """A new client; a client already connected under that id is taken over (MQTT).

        The old connection ends uncleanly, so its will is published, as a broker does.
        """
        if will is not None:
            _check_topic(will.topic)
        old = self._clients.get(client_id)
        if old is not None:
            old.disconnect()
        client = BusClient(self, client_id, will)
        self._clients[client_id] = client
        return client

    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None:
        _check_topic(topic)
        if retain:
            if payload:
                self._retained[topic] = bytes(payload)
            else:
                self._retained.pop(topic, None)
        message = Message(topic, bytes(payload))
        for sub in list(self._subscriptions):
            if _matches(sub.filter, topic):
                sub._deliver(message, retain)

    def subscribe(
        self,
        topic_filter: str,
        *,
        queue_size: int | None = None,
        coalesce: bool = False,
        superseded: Callable[[Message], None] | None = None,
    ) -> Subscription:
        """Subscribe; matching retained messages are queued first (sorted by topic).
        ``coalesce`` and ``superseded``: see :class:`Subscription`."""
        _check_filter(topic_filter)
        sub = Subscription(
            self,
            topic_filter,
            queue_size or self.queue_size,
            coalesce=coalesce,
            superseded=superseded,
        )
        for topic in sorted(self._retained):
            if topic_matches(topic_filter, topic):
                sub._deliver(Message(topic, self._retained[topic], retain=True))
        if not sub._overflowed:
            self._subscriptions.append(sub)
        return sub

    def retained(self, topic_filter: str = "#") -> Iterator[Message]:
        """Retained messages matching ``topic_filter``, sorted by topic."""
        _check_filter(topic_filter)
        for topic in sorted(self._retained):
            if topic_matches(topic_filter, topic):
                yield Message(topic, self._retained[topic], retain=True)

    def _unsubscribe(self, sub: Subscription) -> None:
        if sub in self._subscriptions:
            self._subscriptions.remove(sub)
