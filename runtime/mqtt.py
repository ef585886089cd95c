"""MQTT between agents and the controller: connection settings and the bus bridge.

The fleet's wire protocol (``koordpy/v1/nodes/{node}/{leaf}``, MQTT 5, QoS 1, JSON bodies) is
the in-process bus's (:mod:`runtime.bus`) carried over a broker. Each daemon keeps a local
:class:`~runtime.bus.Bus`; an :class:`MqttBridge` mirrors chosen topics between that bus and
the broker, so every component that speaks the bus works unchanged in a fleet.

An agent (:func:`agent_bridge`) sends its node's ``node``, ``device``, ``nodemetric``,
``status``, ``events`` and ``evictions`` up and receives its ``pods`` and ``nodeslo``; its will
marks the node ``offline`` when it dies without saying goodbye. Enter the bridge before the
agent's publisher connects to the local bus, so that the publisher's final ``offline`` is
still sent when both shut down. The controller (:func:`controller_bridge`) is the mirror
image::

    bus = Bus(queue_size=65536)          # room for a fleet's retained replay on connect
    async with controller_bridge(bus, settings, registry=registry) as bridge:
        ...                              # Ingest and NodeFeed speak to `bus` as in `koordpy up`

which is ``MqttBridge(bus, settings, client_id="controller", username="controller",
uplink=["koordpy/v1/nodes/+/pods", "koordpy/v1/nodes/+/nodeslo"], downlink=[
"koordpy/v1/nodes/+/node", ... one filter per agent leaf])``.

What the bridge guarantees:

* **Retained or not by leaf** (:data:`runtime.bus.RETAINED_LEAVES`), both ways; every publish
  is QoS 1. A retained empty body clears the topic, on the broker and on the local bus.
* **Order**: messages leave in the order they were published on the local bus.
* **While disconnected** only the newest body of each retained topic is kept (a newer body
  replaces the older and moves to the back of the queue), and at most ``max_queued_events``
  events (the oldest are dropped and counted); on reconnect the queue is flushed in order.
  After every (re)connect the newest body of every retained topic is published again: the
  broker may have lost it, or published our will meanwhile.
* **Oversized** bodies (over ``max_payload``) are dropped and counted, never sent or applied;
  except a retained body the controller sends a node (``pods``, ``nodeslo``,
  ``nodemetricspec``: a PodList of thousands of pods), which goes compressed in parts and is
  put back together, whole and of one version, on the other side (:mod:`runtime.mqttparts`).
* **No loops**: a message is never forwarded back the way it came, even when the filters
  overlap (MQTT 5 no-local on the broker side, echo suppression on the bus side).
* **Never fatal**: a broker that is down, refuses our credentials or drops us is retried
  forever with jittered exponential backoff between ``reconnect_min`` and ``reconnect_max``
  (at the cap while it says "not authorised": someone may fix the ACL); the daemon runs on.
* **Shutdown**: leaving normally sends what is queued (the final ``offline``), waits up to
  ``flush_timeout`` for the broker's acknowledgements and disconnects cleanly, so the broker
  discards the will; leaving by an exception disconnects asking the broker to publish it.

Prometheus metrics (on the ``registry`` given): ``koordpy_mqtt_connected``,
``koordpy_mqtt_connects_total``, ``koordpy_mqtt_reconnects_total``,
``koordpy_mqtt_connect_failures_total{reason}``, ``koordpy_mqtt_messages_sent_total{leaf}``
(acknowledged by the broker), ``koordpy_mqtt_messages_received_total{leaf}``,
``koordpy_mqtt_messages_dropped_total{reason}`` (``oversized``, ``queue_full``,
``not_authorised``, ``rejected``, ``invalid``) and ``koordpy_mqtt_queued_messages``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import ssl
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Annotated, Any, Final

import aiomqtt
import msgspec
import paho.mqtt.client as paho
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from runtime import mqttparts, mqttwire
from runtime.bus import (
    AGENT_LEAVES,
    CONTROLLER_LEAVES,
    RETAINED_LEAVES,
    ROOT,
    Bus,
    BusError,
    BusOverflow,
    Message,
    Subscription,
    check_filter,
    node_topic,
    parse_node_topic,
    topic_matches,
)
from runtime.lifecycle import Backoff

__all__ = [
    "CONTROLLER_READ_PACE",
    "DEFAULT_MAX_PAYLOAD",
    "MqttBridge",
    "MqttFileError",
    "MqttSettings",
    "Outbox",
    "Outgoing",
    "agent_bridge",
    "check_files",
    "controller_bridge",
    "read_password",
    "reconnect_delay",
    "tls_context",
]

_log = logging.getLogger(__name__)
#: paho's own log lines repeat what the bridge logs about its connection (as ERROR, on every
#: broker restart); raise this logger's level back to see them.
_paho_log = logging.getLogger(f"{__name__}.paho")
_paho_log.setLevel(logging.CRITICAL)

#: Largest body a node may send (a NodeMetric of a 250-pod node is about 150 KiB).
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024

_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class MqttSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to reach the broker (``[report.mqtt]`` of the agent, ``[mqtt]`` of the controller)."""

    #: Broker host name or address. Default ``localhost``.
    host: str = "localhost"
    #: Broker port. Default 1883 (8883 is the usual TLS port).
    port: _Port = 1883
    #: Use TLS. On as soon as ``ca_file`` or ``cert_file`` is set; with none of them the
    #: system's CAs verify the broker. Default off.
    tls: bool = False
    #: CA bundle (PEM) that signed the broker's certificate. Default: the system's CAs.
    ca_file: str = ""
    #: Client certificate and key (PEM) for brokers that require one (mutual TLS).
    cert_file: str = ""
    key_file: str = ""
    #: Skip verifying the broker's certificate and host name (testing only).
    tls_insecure: bool = False
    #: User name to authenticate as. Default: the agent's node name; the controller's
    #: ``controller``. Empty with a client certificate: the broker names us by the certificate.
    username: str = ""
    #: File whose first line is the password (never the password itself in the config).
    password_file: str = ""
    #: MQTT client id. Default: the user name (the agent's node name, the controller's
    #: ``controller``), which is the ID the shipped broker gives every client whatever it asks
    #: for (``use_username_as_clientid``): one identity, one session.
    client_id: str = ""
    #: Seconds between keep-alive pings; the broker publishes the will after 1.5 times this
    #: without traffic. Default 30.
    keepalive: Annotated[int, msgspec.Meta(ge=5, le=65535)] = 30
    #: Jittered backoff between reconnect attempts: first delay and cap, seconds.
    reconnect_min: _Seconds = 1.0
    reconnect_max: _Seconds = 30.0
    #: Events (unretained messages) kept while disconnected; the oldest are dropped beyond.
    #: Retained topics keep only their newest body. Default 1000.
    max_queued_events: Annotated[int, msgspec.Meta(ge=0)] = 1000
    #: Largest body sent or accepted, bytes; a larger one is dropped and counted.
    max_payload: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_PAYLOAD
    #: Seconds a clean shutdown waits for queued messages (the final ``offline``) to go out.
    flush_timeout: _Seconds = 3.0

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file must be given together")
        if self.reconnect_min > self.reconnect_max:
            raise ValueError(
                f"reconnect_min ({self.reconnect_min}) must not exceed "
                f"reconnect_max ({self.reconnect_max})"
            )

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.ca_file) or bool(self.cert_file)


# --- credentials ------------------------------------------------------------------------------


class MqttFileError(ValueError):
    """A file the settings name (password, CA, certificate, key) cannot be used."""

    def __init__(self, field: str, path: str, problem: str) -> None:
        super().__init__(f"{field} {path!r}: {problem}")
        self.field = field
        self.path = path


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def read_password(path: str) -> str:
    """The first line of ``path`` (without its line ending); :class:`MqttFileError` when
    the file cannot be read or its first line is empty."""
    try:
        with open(path, encoding="utf-8") as handle:
            line = handle.readline()
    except OSError as err:
        raise MqttFileError("password_file", path, f"cannot read: {_reason(err)}") from err
    except UnicodeDecodeError as err:
        raise MqttFileError("password_file", path, "is not UTF-8 text") from err
    password = line.rstrip("\r\n")
    if not password:
        raise MqttFileError("password_file", path, "first line is empty")
    return password


def _readable(field: str, path: str) -> None:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as err:
        raise MqttFileError(field, path, f"cannot read: {_reason(err)}") from err


def tls_context(settings: MqttSettings) -> ssl.SSLContext:
    """The TLS context ``settings`` ask for (CA, client certificate, insecure); files are read
    now, so a renewed certificate is picked up by the next connection."""
    if settings.ca_file:
        _readable("ca_file", settings.ca_file)
    if settings.cert_file:
        _readable("cert_file", settings.cert_file)
        _readable("key_file", settings.key_file)
    try:
        context = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=settings.ca_file or None
        )
    except ssl.SSLError as err:
        raise MqttFileError("ca_file", settings.ca_file, f"not a PEM CA bundle: {err}") from err
    if settings.cert_file:
        try:
            context.load_cert_chain(settings.cert_file, settings.key_file)
        except ssl.SSLError as err:
            raise MqttFileError(
                "cert_file",
                settings.cert_file,
                f"with key_file {settings.key_file!r}: not a PEM certificate and its key: {err}",
            ) from err
    if settings.tls_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def check_files(settings: MqttSettings) -> None:
    """Read every file ``settings`` name, as a connection would: raises
    :class:`MqttFileError` naming the first that cannot be used (a config error at start)."""
    if settings.password_file:
        read_password(settings.password_file)
    if settings.uses_tls:
        tls_context(settings)


# --- backoff ----------------------------------------------------------------------------------


def reconnect_delay(attempt: int, settings: MqttSettings, rng: random.Random) -> float:
    """Seconds to wait before reconnect attempt ``attempt`` (0: the first retry).

    The ceiling doubles from ``2 * reconnect_min`` up to ``reconnect_max``; the delay is drawn
    uniformly from its upper half and is never below ``reconnect_min``, so a fleet that lost
    its broker does not come back in one wave.
    """
    ceiling = Backoff(
        initial=settings.reconnect_min, cap=settings.reconnect_max, attempts=attempt + 1
    ).ceiling
    return max(settings.reconnect_min, rng.uniform(ceiling / 2, ceiling))


# --- outbox -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message for the broker."""

    topic: str
    payload: bytes
    retain: bool


class Outbox:
    """Messages waiting for the broker, oldest first.

    A retained message replaces a queued one of the same topic (and moves to the back); events
    are kept in order, at most ``limit`` of them, the oldest dropped first. Pure bookkeeping:
    the bridge's loops do the waiting.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[object, Outgoing] = OrderedDict()
        #: Keys of the queued events, oldest first (the same order as in ``_items``).
        self._events: deque[int] = deque()
        self._keys = itertools.count()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def events(self) -> int:
        return len(self._events)

    def put(self, message: Outgoing, *, limit: int) -> int:
        """Queue ``message`` at the back; the number of events dropped to stay within ``limit``."""
        if message.retain:
            self._items.pop(message.topic, None)
            self._items[message.topic] = message
            return 0
        key = next(self._keys)
        self._items[key] = message
        self._events.append(key)
        return self.trim(limit)

    def push_front(self, messages: Sequence[Outgoing]) -> None:
        """Put ``messages`` back at the front, in their order (unsent after a lost connection,
        or republished after a reconnect); a retained topic already queued keeps its newer
        body."""
        for message in reversed(messages):
            if message.retain:
                if message.topic in self._items:
                    continue
                self._items[message.topic] = message
                self._items.move_to_end(message.topic, last=False)
            else:
                key = next(self._keys)
                self._items[key] = message
                self._items.move_to_end(key, last=False)
                self._events.appendleft(key)

    def trim(self, limit: int) -> int:
        """Drop the oldest events beyond ``limit``; how many were dropped."""
        dropped = 0
        while len(self._events) > limit:
            del self._items[self._events.popleft()]
            dropped += 1
        return dropped

    def pop(self) -> Outgoing | None:
        """The oldest message, removed; ``None`` when empty."""
        if not self._items:
            return None
        _, message = self._items.popitem(last=False)
        if not message.retain:
            self._events.popleft()
        return message

    def peek_all(self) -> list[Outgoing]:
        """Everything queued, oldest first (for inspection)."""
        return list(self._items.values())


# --- the client -------------------------------------------------------------------------------

#: MQTT 5 reason codes of a refused connection that no retry fixes until someone acts.
_AUTH_REFUSALS: Final = frozenset({0x84, 0x85, 0x86, 0x87, 0x8A, 0x8C, 4, 5})
_NOT_AUTHORISED: Final = 0x87
#: Seconds to wait for the broker's CONNACK or SUBACK.
_REPLY_TIMEOUT: Final = 10.0
#: Messages sent and not yet acknowledged on one connection, at most (the broker's Receive
#: Maximum lowers it; paho itself is left unlimited, the bridge keeps count).
_WINDOW: Final = 1000
#: Events queued while connected (the broker is slow, not gone): bounded, but roomy.
_CONNECTED_EVENT_LIMIT: Final = 65536
#: Topics remembered as matching the wildcard uplink filters or not (a fleet's topics).
_MATCH_CACHE: Final = 1 << 16
#: Bytes one read from the broker's socket may take.
_READ_AHEAD: Final = 1 << 18
#: Seconds the controller's connection rests after a read that brought messages, so that
#: under a fleet's steady flow one wake-up reads many (a report waits that much longer).
CONTROLLER_READ_PACE: Final = 0.005
#: Queue of the bridge's own uplink subscriptions: a controller's retained replay of every
#: node's pods and nodeslo must fit.
_UPLINK_QUEUE: Final = 1 << 17


class _LeanSocket:
    """The connection's socket as the client sees it, with PUBLISH packets taken out.

    Each read takes whatever the kernel holds (up to :data:`_READ_AHEAD` bytes) and cuts it
    into packets (:class:`runtime.mqttwire.Splitter`): the PUBLISH packets are handed to
    ``deliver`` as a batch, their QoS 1 acknowledgements to ``acknowledge`` as one write,
    and only the other packets (CONNACK, SUBACK, PUBACK, PINGRESP, DISCONNECT, and a PUBLISH
    the splitter leaves alone) reach paho, which reads each in pieces, one ``recv`` apiece.
    When nothing is left for paho a read says "try again" (``BlockingIOError``), as a
    non-blocking socket with no data does; :meth:`pending` tells the client's reader that
    more is buffered for it, so a burst costs one wake-up.

    Every read that brings bytes calls ``heard`` first: the broker is alive even when paho
    sees none of those bytes. (paho's keep-alive counts only what it reads itself; behind a
    burst that takes longer than the keep-alive to read, its PINGRESP waits behind thousands
    of messages, and paho would drop a connection that never went quiet, and with it the
    broker's queue for this clean session.)"""

    __slots__ = (
        "_acknowledge",
        "_buffer",
        "_deliver",
        "_heard",
        "_sock",
        "_splitter",
        "_start",
        "delivered",
    )

    def __init__(
        self,
        sock: Any,
        deliver: Callable[[list[mqttwire.Publish]], None],
        acknowledge: Callable[[bytes], None],
        heard: Callable[[], None] = lambda: None,
    ) -> None:
        self._sock = sock
        self._deliver = deliver
        self._acknowledge = acknowledge
        self._heard = heard
        self._splitter = mqttwire.Splitter()
        self._buffer = b""
        self._start = 0
        #: Messages delivered since the client's reader last looked.
        self.delivered = 0

    def recv(self, size: int) -> bytes:
        while self._start >= len(self._buffer):
            data: bytes = self._sock.recv(_READ_AHEAD)
            if not data:
                return data  # the broker closed the connection
            self._heard()
            read, others = self._splitter.feed(data)
            self._buffer, self._start = others, 0
            if read:
                self.delivered += len(read)
                self._deliver(read)
                acks = [mqttwire.puback(m.packet_id) for m in read if m.qos]
                if acks:
                    self._acknowledge(b"".join(acks))
            if not others:
                raise BlockingIOError  # everything read was ours: nothing for paho yet
        start = self._start
        self._start = start + size
        return self._buffer[start : start + size]

    def pending(self) -> int:
        """Bytes buffered for paho and not yet taken (an SSL socket's own included)."""
        buffered = len(self._buffer) - self._start
        inner = getattr(self._sock, "pending", None)
        return max(buffered, 0) + (inner() if inner is not None else 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


#: The versions :class:`_Client` is written against (pinned in pyproject.toml), and the
#: private members of theirs it uses: aiomqtt's client (what it subclasses) and paho's (the
#: connection aiomqtt holds as ``_client``). ``tests/koordpy/test_mqtt_internals.py`` fails
#: when another version is installed or one of these is gone.
WRITTEN_AGAINST: Final = {"aiomqtt": "2.5.1", "paho-mqtt": "2.2.0"}
PRIVATE_MEMBERS: Final = {
    "aiomqtt.Client": (
        "_client",
        "_disconnected",
        "_loop",
        "_misc_loop",
        "_misc_task",
        "_on_message",
        "_on_publish",
        "_on_socket_close",
        "_on_socket_open",
    ),
    "paho.mqtt.client.Client": (
        "_last_bytes_received",
        "_msgtime_mutex",
        "_packet_queue",
        "_sock",
        "_sock_close",
    ),
}


class _Client(aiomqtt.Client):
    """aiomqtt's client, with the changes the bridge needs: messages are handed to a callback
    as they arrive (no task per message; PUBLISH packets are read off the socket by
    :class:`_LeanSocket`, paho's own path only takes what that leaves), and each publish's
    acknowledgement resolves a future with its reason code (a refused publish is told apart
    from a delivered one)."""

    def __init__(
        self,
        deliver: Callable[[list[mqttwire.Publish]], None],
        *,
        read_pace: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._deliver = deliver
        self._read_pace = read_pace
        #: The reader's return after a rest (see _on_socket_open).
        self._resume: asyncio.TimerHandle | None = None
        self._acks: dict[int, asyncio.Future[int]] = {}
        #: QoS 1 messages the broker takes unacknowledged at once (its CONNACK says; 65535
        #: when it does not).
        self.receive_maximum = 65535

    def publish_nowait(self, topic: str, payload: bytes, *, retain: bool) -> asyncio.Future[int]:
        """Hand one QoS 1 message to the connection; the future resolves with the broker's
        reason code (0: accepted). Raises :class:`aiomqtt.MqttCodeError` when not connected."""
        info = self._client.publish(topic, payload, qos=1, retain=retain)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._acks[info.mid] = future
        return future

    def forget_pending(self) -> None:
        """Cancel the futures of unacknowledged messages (the connection is gone)."""
        for future in self._acks.values():
            future.cancel()
        self._acks.clear()

    async def disconnect_with_will(self, limit: float) -> None:
        """MQTT 5 DISCONNECT with reason 0x04: the broker publishes our will."""
        reason = ReasonCode(PacketTypes.DISCONNECT, identifier=0x04)
        if self._client.disconnect(reasoncode=reason) != paho.MQTT_ERR_SUCCESS:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._disconnected), limit)
        if self._disconnected.done() and not self._disconnected.cancelled():
            self._disconnected.exception()  # retrieved: it only says we asked for the will

    def close_socket(self) -> None:
        """Drop the connection without a word (a connect attempt cut short); no-op when closed."""
        if self._client.socket() is not None:
            self._client._sock_close()

    async def settle(self) -> None:
        """Wait for the client's housekeeping task to end (the socket is closed)."""
        task = self._misc_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=1.0)

    def _on_connect(
        self,
        client: paho.Client,
        userdata: Any,
        flags: paho.ConnectFlags,
        reason_code: ReasonCode,
        properties: Properties | None = None,
    ) -> None:
        receive_maximum = getattr(properties, "ReceiveMaximum", None)
        if isinstance(receive_maximum, int) and receive_maximum > 0:
            self.receive_maximum = receive_maximum
        super()._on_connect(client, userdata, flags, reason_code, properties)

    def _on_publish(
        self,
        client: paho.Client,
        userdata: Any,
        mid: int,
        reason_code: ReasonCode,
        properties: Properties,
    ) -> None:
        future = self._acks.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(int(reason_code.value))
        super()._on_publish(client, userdata, mid, reason_code, properties)

    def _on_message(self, client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        self._deliver(
            [mqttwire.Publish(message.topic, bytes(message.payload), retain=bool(message.retain))]
        )

    def _acknowledge(self, pubacks: bytes) -> None:
        """Send PUBACK packets (several, back to back) through paho's outgoing queue, in one
        write, after the messages they acknowledge were delivered."""
        self._client._packet_queue(mqttwire.PUBACK << 4, pubacks, 0, 1)

    def _heard(self) -> None:
        """Bytes came from the broker: what paho's keep-alive reads as "the broker is there"."""
        client = self._client
        with client._msgtime_mutex:
            client._last_bytes_received = paho.time_func()

    def _on_socket_open(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        # Called as the socket is made (on the thread that connects), before anything is
        # read from it.
        lean = _LeanSocket(sock, self._deliver, self._acknowledge, self._heard)
        client._sock = lean
        if self._read_pace <= 0:
            super()._on_socket_open(client, userdata, sock)
            return
        loop = self._loop
        fileno = sock.fileno()

        def read() -> None:
            # As aiomqtt's reader, then a rest when the read brought messages: the reader
            # comes back ``read_pace`` seconds later to take all that arrived meanwhile.
            lean.delivered = 0
            try:
                while True:
                    client.loop_read()
                    if lean.pending() > 0:
                        continue
                    break
            except Exception as exc:
                if not self._disconnected.done():
                    self._disconnected.set_exception(exc)
                return
            if lean.delivered and client._sock is lean:
                loop.remove_reader(fileno)
                self._resume = loop.call_later(self._read_pace, resume)

        def resume() -> None:
            self._resume = None
            if client._sock is lean:
                loop.add_reader(fileno, read)

        def start() -> None:
            loop.add_reader(fileno, read)
            self._misc_task = loop.create_task(self._misc_loop())

        loop.call_soon_threadsafe(start)

    def _on_socket_close(self, client: paho.Client, userdata: Any, sock: Any) -> None:
        resume, self._resume = self._resume, None
        if resume is not None:
            self._loop.call_soon_threadsafe(resume.cancel)
        super()._on_socket_close(client, userdata, sock)


# --- metrics ----------------------------------------------------------------------------------


class _Stats:
    """The bridge's counters (plain numbers; the collector reads them on scrape)."""

    def __init__(self) -> None:
        self.connected = False
        self.connects = 0
        self.connect_failures: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.queued = 0


class _BridgeCollector(Collector):
    def __init__(self, stats: _Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        stats = self._stats
        yield GaugeMetricFamily(
            "koordpy_mqtt_connected",
            "1 while connected to the MQTT broker and subscribed, else 0.",
            value=1.0 if stats.connected else 0.0,
        )
        yield CounterMetricFamily(
            "koordpy_mqtt_connects", "Connections made to the MQTT broker.", value=stats.connects
        )
        yield CounterMetricFamily(
            "koordpy_mqtt_reconnects",
            "Connections made to the MQTT broker after the first.",
            value=max(0, stats.connects - 1),
        )
        for name, documentation, label, counts in (
            (
                "koordpy_mqtt_connect_failures",
                "Failed connection attempts, by reason.",
                "reason",
                stats.connect_failures,
            ),
            (
                "koordpy_mqtt_messages_sent",
                "Messages the broker acknowledged, by topic leaf.",
                "leaf",
                stats.sent,
            ),
            (
                "koordpy_mqtt_messages_received",
                "Messages received from the broker and published on the local bus, by topic leaf.",
                "leaf",
                stats.received,
            ),
            (
                "koordpy_mqtt_messages_dropped",
                "Messages dropped, by reason (oversized, queue_full, not_authorised, rejected,"
                " invalid).",
                "reason",
                stats.dropped,
            ),
        ):
            family = CounterMetricFamily(name, documentation, labels=[label])
            for value, count in sorted(counts.items()):
                family.add_metric([value], count)
            yield family
        yield GaugeMetricFamily(
            "koordpy_mqtt_queued_messages",
            "Messages waiting to be sent to the MQTT broker.",
            value=stats.queued,
        )


def _covering(filters: Sequence[str]) -> str:
    """One filter matching every topic any of ``filters`` matches (and maybe more): equal
    levels kept, differing ones ``+``, ``#`` past a difference in depth."""
    split = [f.split("/") for f in filters]
    depth = len(split[0])
    if any(len(levels) != depth or "#" in levels for levels in split):
        prefix = []
        for column in zip(*split, strict=False):
            if len(set(column)) != 1 or column[0] in ("+", "#"):
                break
            prefix.append(column[0])
        return "/".join([*prefix, "#"])
    return "/".join(
        column[0] if len(set(column)) == 1 else "+" for column in zip(*split, strict=True)
    )


def _filters_overlap(first: str, second: str) -> bool:
    """Whether some topic matches both filters."""
    a, b = first.split("/"), second.split("/")
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x == "#" or y == "#":
            return True  # "a/#" also matches "a"
        if x is None or y is None:
            return False
        if x != y and "+" not in (x, y):
            return False
    return True


def _leaf(topic: str) -> str:
    """The leaf of a node topic (of a part's whole body for a part), else ``other``."""
    part = mqttparts.parse_part_topic(topic)
    parsed = parse_node_topic(part[0] if part is not None else topic)
    return parsed[1] if parsed is not None else "other"


def _retained(topic: str, default: bool) -> bool:
    """Node topics are retained by leaf; anything else keeps the flag it came with."""
    parsed = parse_node_topic(topic)
    return parsed[1] in RETAINED_LEAVES if parsed is not None else default


class _Stop(Exception):  # noqa: N818 - a control-flow signal, not an error
    """The bridge is closing: end the current connection."""


# --- the bridge -------------------------------------------------------------------------------


class MqttBridge:
    """Mirrors topics between a local :class:`~runtime.bus.Bus` and an MQTT 5 broker (see the
    module docstring for what it guarantees).

    ``uplink`` filters select what goes from the local bus to the broker, ``downlink`` filters
    what comes from the broker into the local bus. ``will`` is left with the broker on every
    connection (an agent's ``status`` -> ``offline``, retained). Entering starts the bridge's
    own connection task and returns at once: a daemon starts with its broker down and catches
    up when it comes.
    """

    def __init__(
        self,
        bus: Bus,
        settings: MqttSettings,
        *,
        client_id: str,
        username: str,
        uplink: Sequence[str],
        downlink: Sequence[str],
        will: Message | None = None,
        registry: CollectorRegistry | None = None,
        name: str = "mqtt",
        rng: random.Random | None = None,
        read_pace: float = 0.0,
    ) -> None:
        for topic_filter in (*uplink, *downlink):
            check_filter(topic_filter)
        if not client_id:
            raise ValueError("an MQTT bridge needs a client id")
        self.name = name
        self.settings = settings
        self.client_id = client_id
        self.username = username
        self.uplink = tuple(uplink)
        self.downlink = tuple(downlink)
        #: What the connection subscribes to: the downlink, and the parts of the bodies on
        #: its filters that may come in parts (:mod:`runtime.mqttparts`).
        self._filters = self.downlink + tuple(
            f"{f}/+" for f in self.downlink if f.rsplit("/", 1)[-1] in mqttparts.PARTED_LEAVES
        )
        self.will = will
        #: Set while connected to the broker and subscribed to the downlink filters.
        self.connected = asyncio.Event()
        self._bus = bus
        self._registry = registry
        self._rng = rng or random.Random()
        #: Seconds the connection rests after a read that brought messages (0: never).
        self._read_pace = read_pace
        self._stats = _Stats()
        self._collector = _BridgeCollector(self._stats)
        self._outbox = Outbox()
        #: Newest body of every retained topic sent up, in order of its last change: what a
        #: reconnect publishes again.
        self._latest: dict[str, bytes] = {}
        #: Bodies sent in parts: topic -> (body, manifest, parts), the newest of each topic.
        self._split: dict[str, tuple[bytes, bytes, list[bytes]]] = {}
        #: How many parts the broker holds of each topic's body, as we sent them.
        self._parts_sent: dict[str, int] = {}
        self._assembler = mqttparts.Assembler()
        #: Sent and not yet acknowledged on the current connection, oldest first.
        self._inflight: dict[int, Outgoing] = {}
        self._inflight_keys = itertools.count()
        self._window = asyncio.Semaphore(_WINDOW)
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._stop = asyncio.Event()
        self._will_on_stop = False
        #: One local subscription covers every uplink filter, so that messages on different
        #: topics still leave in the order they were published.
        self._covering = _covering(self.uplink) if self.uplink else ""
        self._exact = frozenset(f for f in self.uplink if "+" not in f and "#" not in f)
        self._wild = tuple(f for f in self.uplink if f not in self._exact)
        self._matched: dict[str, bool] = {}
        self._subscription: Subscription | None = None
        #: Downlink bodies our subscription will see again, not to be sent back up.
        self._echoes: Counter[tuple[str, bytes]] = Counter()
        self._may_echo = any(
            _filters_overlap(up, down) for up in self.uplink for down in self.downlink
        )
        #: Newest retained body the bridge itself put on the local bus, per topic.
        self._from_broker: dict[str, bytes] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._refused: set[str] = set()
        self._failure: str | None = None
        self._warned_drops = False

    # --- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> MqttBridge:
        if self._registry is not None:
            self._registry.register(self._collector)
        try:
            if self.uplink:
                self._subscription = self._bus.subscribe(self._covering, queue_size=_UPLINK_QUEUE)
                self._tasks.append(asyncio.create_task(self._pump(), name=f"{self.name}-uplink"))
            self._tasks.append(asyncio.create_task(self._link(), name=f"{self.name}-link"))
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        clean = exc_type is None or issubclass(exc_type, asyncio.CancelledError)
        pumps, link = self._tasks[:-1], self._tasks[-1:]
        await _cancel(pumps)
        if clean:
            self._drain_subscriptions()
            if not self._idle.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), self.settings.flush_timeout)
            if not self._idle.is_set():
                _log.warning(
                    "%s: %d message(s) not sent to the broker at shutdown",
                    self.name,
                    len(self._outbox) + len(self._inflight),
                )
        self._will_on_stop = not clean
        self._stop.set()
        if link:
            done, _ = await asyncio.wait(link, timeout=self.settings.flush_timeout + 2.0)
            if not done:
                _log.warning("%s: the broker connection did not close in time", self.name)
        await self._close()

    async def _close(self) -> None:
        await _cancel(self._tasks)
        self._tasks.clear()
        if self._subscription is not None:
            self._subscription.close()
            self._subscription = None
        self._set_connected(False)
        if self._registry is not None:
            with contextlib.suppress(KeyError):
                self._registry.unregister(self._collector)

    async def wait_connected(self, timeout: float) -> bool:  # noqa: ASYNC109 - a bounded probe
        """Whether the bridge is (or becomes within ``timeout`` seconds) connected."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.connected.wait(), timeout)
        return self.connected.is_set()

    # --- uplink: local bus -> outbox ------------------------------------------------------

    async def _pump(self) -> None:
        while (subscription := self._subscription) is not None:
            try:
                while True:
                    self._accept(await subscription.get())
            except BusOverflow:
                _log.warning(
                    "%s: fell behind the local bus on %s; resubscribing",
                    self.name,
                    subscription.filter,
                )
                self._echoes.clear()
                self._subscription = self._bus.subscribe(
                    subscription.filter, queue_size=_UPLINK_QUEUE
                )

    def _drain_subscriptions(self) -> None:
        """Take what the local bus queued for us but the pump did not read yet."""
        if self._subscription is None:
            return
        with contextlib.suppress(BusError):
            while (message := self._subscription.get_nowait()) is not None:
                self._accept(message)

    def _is_uplink(self, topic: str) -> bool:
        if topic in self._exact:
            return True
        if not self._wild:
            return False
        known = self._matched.get(topic)
        if known is None:
            if len(self._matched) >= _MATCH_CACHE:
                self._matched.clear()
            known = self._matched[topic] = any(topic_matches(f, topic) for f in self._wild)
        return known

    def _accept(self, message: Message) -> None:
        if not self._is_uplink(message.topic):
            return  # the covering subscription's surplus
        if self._echoes:
            key = (message.topic, message.payload)
            if self._echoes.get(key):
                self._echoes[key] -= 1
                if not self._echoes[key]:
                    del self._echoes[key]
                return
        if message.retain and self._from_broker.get(message.topic) == message.payload:
            return  # the retained replay of something that came from the broker
        retain = _retained(message.topic, message.retain)
        try:
            outgoing = self._expand(message.topic, message.payload, retain)
        except mqttparts.PartsError as err:
            self._stats.dropped["oversized"] += 1
            _log.warning("%s: not sending %s: %s", self.name, message.topic, err)
            return
        if retain:
            self._latest.pop(message.topic, None)
            if message.payload:
                self._latest[message.topic] = message.payload
        for one in outgoing:
            self._queue(one)

    def _expand(self, topic: str, payload: bytes, retain: bool) -> list[Outgoing]:
        """What goes to the broker for one body: itself, or (a retained body over
        ``max_payload`` on a leaf that may be parted) its parts and manifest; then the clears of
        the parts an earlier body of the topic left. :class:`~runtime.mqttparts.PartsError`
        for a body that can go neither way."""
        limit = self.settings.max_payload
        if len(payload) <= limit:
            out = [Outgoing(topic, payload, retain)]
            count = 0
        elif retain and mqttparts.parted(topic):
            cached = self._split.get(topic)
            if cached is None or cached[0] != payload:
                manifest, parts = mqttparts.split(payload, limit)
                if len(manifest) > limit:
                    raise mqttparts.PartsError(
                        f"its manifest of {len(parts)} parts is over max_payload ({limit})"
                    )
                cached = self._split[topic] = (payload, manifest, parts)
            _, manifest, parts = cached
            out = [
                Outgoing(mqttparts.part_topic(topic, i), part, True) for i, part in enumerate(parts)
            ]
            out.append(Outgoing(topic, manifest, True))
            count = len(parts)
        else:
            raise mqttparts.PartsError(f"{len(payload)} bytes is over max_payload ({limit})")
        if retain:
            before = self._parts_sent.pop(topic, 0)
            stale = range(count, before)
            out += [Outgoing(mqttparts.part_topic(topic, i), b"", True) for i in stale]
            if count:
                self._parts_sent[topic] = count
            else:
                self._split.pop(topic, None)
        return out

    def _queue(self, message: Outgoing) -> None:
        limit = (
            max(self.settings.max_queued_events, _CONNECTED_EVENT_LIMIT)
            if self.connected.is_set()
            else self.settings.max_queued_events
        )
        dropped = self._outbox.put(message, limit=limit)
        if dropped:
            self._drop_events(dropped)
        self._changed()

    def _drop_events(self, count: int) -> None:
        self._stats.dropped["queue_full"] += count
        if self._warned_drops:
            return
        self._warned_drops = True  # once per outage; the metric counts every one
        _log.warning(
            "%s: the broker is unreachable and more than max_queued_events (%d) events are"
            " waiting: dropping the oldest",
            self.name,
            self.settings.max_queued_events,
        )

    def _changed(self) -> None:
        self._stats.queued = len(self._outbox)
        if self._outbox or self._inflight:
            self._idle.clear()
            if self._outbox:
                self._wakeup.set()
        else:
            self._idle.set()

    # --- downlink: broker -> local bus ----------------------------------------------------

    def _received(self, messages: list[mqttwire.Publish]) -> None:
        """Messages from the broker (called by the client as they arrive): onto the bus."""
        for message in messages:
            try:
                self._take(message.topic, message.payload, message.retain)
            except mqttparts.PartsError as err:
                self._stats.dropped["invalid"] += 1
                _log.warning("%s: dropped %s from the broker: %s", self.name, message.topic, err)
            except Exception:  # a bad message must not cost the connection
                self._stats.dropped["invalid"] += 1
                _log.exception("%s: dropped a message from the broker", self.name)

    def _take(self, topic: str, payload: bytes, retained: bool) -> None:
        """One message from the broker: a part or a manifest goes to the assembler (the body
        they make, once whole, onto the bus), anything else onto the bus."""
        if len(payload) > self.settings.max_payload:
            self._stats.dropped["oversized"] += 1
            _log.warning(
                "%s: dropped %s from the broker: %d bytes is over max_payload (%d)",
                self.name,
                topic,
                len(payload),
                self.settings.max_payload,
            )
            return
        part = mqttparts.parse_part_topic(topic)
        if part is not None:
            whole = self._assembler.part(*part, payload)
            topic = part[0]
        elif mqttparts.is_manifest(payload) and mqttparts.parted(topic):
            whole = self._assembler.manifest(topic, payload)
        else:
            if mqttparts.parted(topic):
                self._assembler.whole(topic)
            self._put_on_bus(topic, payload, retained)
            return
        if whole is not None:
            self._put_on_bus(topic, whole, True)

    def _put_on_bus(self, topic: str, payload: bytes, retained: bool) -> None:
        parsed = parse_node_topic(topic)
        leaf = parsed[1] if parsed is not None else "other"
        retain = leaf in RETAINED_LEAVES if parsed is not None else retained
        echoed = self._may_echo and self._subscription is not None and self._is_uplink(topic)
        if echoed:
            self._echoes[(topic, payload)] += 1
        try:
            self._bus.publish(topic, payload, retain=retain)
        except BusError as err:
            self._stats.dropped["invalid"] += 1
            _log.warning("%s: dropped %r from the broker: %s", self.name, topic, err)
            return
        if echoed and retain:
            if payload:
                self._from_broker[topic] = payload
            else:
                self._from_broker.pop(topic, None)
        self._stats.received[leaf] += 1

    # --- the connection -------------------------------------------------------------------

    def _set_connected(self, up: bool) -> None:
        self._stats.connected = up
        if up:
            self.connected.set()
        else:
            self.connected.clear()

    async def _link(self) -> None:
        """Connect, forward, reconnect, until the bridge closes."""
        loop = asyncio.get_running_loop()
        attempt = 0
        while not self._stop.is_set():
            started, connects = loop.time(), self._stats.connects
            try:
                await self._session()
            except _Stop:
                return
            except MqttConnectError as err:
                refused = _reason_code(err)
                if refused in _AUTH_REFUSALS:
                    self._failed(
                        "not_authorised",
                        f"the broker refused {self.username or self.client_id!r}: {err}"
                        " (check the user name, password_file, client certificate and ACL)",
                        level=logging.ERROR,
                    )
                    attempt = max(attempt, 64)  # at the cap: a person has to act
                else:
                    self._failed("refused", f"the broker refused the connection: {err}")
            except (aiomqtt.MqttError, OSError) as err:
                self._failed(_failure_kind(err), f"connection to the broker failed: {err}")
            except MqttFileError as err:
                self._failed("config", f"cannot connect: {err}", level=logging.ERROR)
            except Exception as err:  # never let the daemon lose its link for good
                _log.exception("%s: unexpected error on the broker connection", self.name)
                self._failed("error", f"unexpected error: {err!r}")
            if self._stop.is_set():
                return
            if (
                self._stats.connects > connects
                and loop.time() - started >= self.settings.reconnect_max
            ):
                attempt = 0  # it was up long enough to start the backoff over
            self._set_connected(False)
            delay = reconnect_delay(attempt, self.settings, self._rng)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    def _failed(self, kind: str, text: str, *, level: int = logging.WARNING) -> None:
        self._stats.connect_failures[kind] += 1
        if text != self._failure:
            _log.log(level, "%s: %s", self.name, text)
            self._failure = text
        else:
            _log.debug("%s: still failing: %s", self.name, text)

    async def _session(self) -> None:
        """One connection: connect, subscribe, forward both ways until it breaks or we stop."""
        settings = self.settings
        context = await asyncio.to_thread(tls_context, settings) if settings.uses_tls else None
        password = (
            await asyncio.to_thread(read_password, settings.password_file)
            if settings.password_file
            else None
        )
        will = (
            aiomqtt.Will(self.will.topic, self.will.payload, qos=1, retain=self.will.retain)
            if self.will is not None
            else None
        )
        client = _Client(
            self._received,
            read_pace=self._read_pace,
            hostname=settings.host,
            port=settings.port,
            username=self.username or None,
            password=password,
            identifier=self.client_id,
            protocol=aiomqtt.ProtocolVersion.V5,
            will=will,
            clean_start=True,
            keepalive=settings.keepalive,
            timeout=_REPLY_TIMEOUT,
            max_inflight_messages=0,
            tls_context=context,
            tls_insecure=True if context is not None and settings.tls_insecure else None,
            logger=_paho_log,
        )
        try:
            async with client:
                await self._connected(client)
                await self._forward(client)
        finally:
            client.close_socket()
            self._lost(client)
            await client.settle()

    async def _connected(self, client: _Client) -> None:
        self._stats.connects += 1
        self._window = asyncio.Semaphore(min(client.receive_maximum, _WINDOW))
        if self._filters:
            codes = await client.subscribe(
                [(f, SubscribeOptions(qos=1, noLocal=True)) for f in self._filters]
            )
            for topic_filter, code in zip(self._filters, codes, strict=False):
                if isinstance(code, ReasonCode) and code.is_failure:
                    _log.error(
                        "%s: the broker refused the subscription to %s: %s",
                        self.name,
                        topic_filter,
                        code,
                    )
        # The broker may have lost our retained state, or published our will meanwhile.
        self._outbox.push_front(
            [
                outgoing
                for topic, payload in self._latest.items()
                for outgoing in self._expand(topic, payload, True)
            ]
        )
        self._changed()
        _log.info(
            "%s: %s to %s:%d",
            self.name,
            "reconnected" if self._stats.connects > 1 else "connected",
            self.settings.host,
            self.settings.port,
        )
        self._failure = None
        self._warned_drops = False
        self._set_connected(True)

    async def _forward(self, client: _Client) -> None:
        sender = asyncio.create_task(self._send(client), name=f"{self.name}-send")
        watcher = asyncio.create_task(_until_disconnected(client), name=f"{self.name}-watch")
        stopper = asyncio.create_task(self._stop.wait(), name=f"{self.name}-stop")
        try:
            done, _ = await asyncio.wait(
                {sender, watcher, stopper}, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            await _cancel([sender, watcher, stopper])
        for task in (watcher, sender):
            if task in done:
                task.result()  # raises what ended the connection
        if self._will_on_stop:
            self._set_connected(False)
            await client.disconnect_with_will(self.settings.flush_timeout)
        raise _Stop

    async def _send(self, client: _Client) -> None:
        while True:
            await self._window.acquire()
            message = self._outbox.pop()
            if message is None:
                self._window.release()
                self._wakeup.clear()
                self._changed()
                await self._wakeup.wait()
                continue
            try:
                ack = client.publish_nowait(message.topic, message.payload, retain=message.retain)
            except aiomqtt.MqttError:
                self._window.release()
                self._outbox.push_front([message])
                self._changed()
                raise
            key = next(self._inflight_keys)
            self._inflight[key] = message
            ack.add_done_callback(functools.partial(self._acked, key))
            self._stats.queued = len(self._outbox)

    def _acked(self, key: int, ack: asyncio.Future[int]) -> None:
        message = self._inflight.pop(key, None)
        if message is None:
            return  # requeued when the connection was lost
        self._window.release()
        if not ack.cancelled():
            code = ack.result()
            if code < 0x80:
                self._stats.sent[_leaf(message.topic)] += 1
            else:
                self._refused_publish(message, code)
        self._changed()

    def _refused_publish(self, message: Outgoing, code: int) -> None:
        kind = "not_authorised" if code == _NOT_AUTHORISED else "rejected"
        self._stats.dropped[kind] += 1
        if message.topic not in self._refused:
            self._refused.add(message.topic)
            _log.error(
                "%s: the broker refused %s (reason 0x%02x: %s); check the ACL and the user name",
                self.name,
                message.topic,
                code,
                "not authorised" if kind == "not_authorised" else "rejected",
            )

    def _lost(self, client: _Client) -> None:
        """The connection ended: put what was not acknowledged back in front of the queue."""
        self._set_connected(False)
        unacked = list(self._inflight.values())
        self._inflight.clear()
        client.forget_pending()
        self._outbox.push_front(unacked)
        dropped = self._outbox.trim(self.settings.max_queued_events)
        if dropped:
            self._drop_events(dropped)
        self._changed()


async def _until_disconnected(client: _Client) -> None:
    """Returns (by raising :class:`aiomqtt.MqttError`) when the connection breaks; every
    message goes to the bridge's callback, so nothing is ever queued here."""
    async for _ in client.messages:
        pass


async def _cancel(tasks: Iterable[asyncio.Task[Any]]) -> None:
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the caller reads what matters through done sets


def _reason_code(err: aiomqtt.MqttCodeError) -> int | None:
    rc = err.rc
    if isinstance(rc, ReasonCode):
        return int(rc.value)
    return rc


def _failure_kind(err: BaseException) -> str:
    if isinstance(err, ssl.SSLError) or "SSL" in str(err) or "certificate" in str(err):
        return "tls"
    if isinstance(err, aiomqtt.MqttError) and "timed out" in str(err):
        return "timeout"
    return "network"


# --- the two sides ----------------------------------------------------------------------------


def agent_bridge(
    bus: Bus,
    settings: MqttSettings,
    node: str,
    *,
    will_payload: bytes,
    registry: CollectorRegistry | None = None,
) -> MqttBridge:
    """The bridge of node ``node``'s agent: its reports up, its ``pods`` and ``nodeslo`` down,
    ``will_payload`` as the retained ``status`` will."""
    return MqttBridge(
        bus,
        settings,
        client_id=settings.client_id or settings.username or node,
        username=settings.username or node,
        uplink=[node_topic(node, leaf) for leaf in AGENT_LEAVES],
        downlink=[node_topic(node, leaf) for leaf in CONTROLLER_LEAVES],
        will=Message(node_topic(node, "status"), will_payload, retain=True),
        registry=registry,
    )


def controller_bridge(
    bus: Bus, settings: MqttSettings, *, registry: CollectorRegistry | None = None
) -> MqttBridge:
    """The controller's bridge: every node's ``pods`` and ``nodeslo`` up, every node's reports
    down. Give ``bus`` a queue as long as the fleet's retained state (four messages a node)."""
    nodes = f"{ROOT}/nodes/+"
    return MqttBridge(
        bus,
        settings,
        client_id=settings.client_id or settings.username or "controller",
        username=settings.username or "controller",
        uplink=[f"{nodes}/{leaf}" for leaf in CONTROLLER_LEAVES],
        downlink=[f"{nodes}/{leaf}" for leaf in AGENT_LEAVES],
        registry=registry,
        read_pace=CONTROLLER_READ_PACE,
    )
