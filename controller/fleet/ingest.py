"""Ingest: what agents publish on the bus becomes objects in the store.

Subscribes to ``koordpy/v1/nodes/+/+`` and, per topic leaf:

* ``node`` -> the Node, applied with the agent's status and labels; labels and annotations
  others set, the spec (taints, unschedulable) and finalizers are kept. A report may change
  only what the agent owns (:mod:`controller.fleet.noderestriction`, after Kubernetes'
  NodeRestriction): a change to anything else is held back (the stored value kept, the
  rest of the report taken), said once per node.
  Labels of its own the agent stops reporting are removed (the keys it last set are
  remembered in an annotation);
* ``device`` -> the Device; its owner reference is pointed at the stored Node's uid;
* ``nodemetric`` -> the NodeMetric's status; its spec stays what the controller or the user
  wrote (empty on the first report), since the agent follows it (:mod:`agent.metrics.policy`);
* ``events`` -> a new Event (``generateName``) about the node itself (in ``default``) or a
  pod bound to it (in the pod's namespace, uid checked when given); about anything else, or
  holding finalizers (it would outlive its TTL, :class:`controller.events.EventTTL`), it is
  ``forbidden``. Each node may send :data:`EVENT_QPS` a second, :data:`EVENT_BURST` at
  once (the kubelet's defaults, a token bucket per node); beyond, ``throttled``;
* ``evictions`` -> a ``policy/v1`` Eviction request (:class:`apis.eviction.EvictionRequest`):
  the named pod is deleted (finalizers honoured: a pod with finalizers only gets its
  ``deletionTimestamp``) and a Warning Event ``Evicted`` is recorded on it, naming the agent's
  feature and node. A request for a pod that is gone, has another uid, or runs on another node
  is dropped with a log line;
* ``status`` ``offline`` -> the node is lost (:mod:`controller.fleet.liveness`): ``Ready=False``
  (``NodeStatusUnknown``, "agent went offline") and the ``node.kubernetes.io/unreachable``
  taint. A later ``online`` for a node lost that way restores the agent's last Node (the
  retained one on the bus, or the next to arrive, even with the same heartbeat).

Every message is checked before anything is written, and counted in
``koordpy_ingest_messages_total{leaf,result}`` with one of the :class:`Result` values:

* ``oversized``: a payload larger than ``max_payload`` bytes (not even decoded);
* ``foreign``: a topic outside the protocol, or a body naming another node than its topic;
* ``invalid``: not JSON, unknown fields, a wrong kind, or a write the store refused;
* ``stale``: an older report delivered again (see "Which report is stale" below);
* ``forbidden``: a write the node may not make (see ``node`` and ``events`` above);
* ``throttled``: an Event over the node's rate;
* ``unchanged``: nothing to write (a body byte-identical to the last one taken from that topic
  is recognised without decoding it again);
* ``applied``, or ``ignored`` (an empty payload clearing a retained topic, the controller's own
  ``pods``/``nodeslo``/``nodemetricspec``, an ``online`` status).

Times without a UTC offset are read as UTC, and a report's stamps (the Node's condition
heartbeats, the Device's ``koordpy.io/reported-at``, the NodeMetric's ``status.updateTime``,
an Event's times) that lie after the receive time are clamped to it. Nothing invalid is ever
applied, and nothing an agent sends stops the ingest.

Which report is stale: decided by the order reports arrive in, per topic, never by the
sender's clock (a node's clock may jump; a restarted agent's may be behind its previous
run's). MQTT delivers one publisher's messages on a topic in order (the bus too), so the last
body to arrive is the node's newest report whatever its stamps say. An older one can arrive
later only as a copy delivered again (a broker restarted from an older save replaying its
retained copy, a QoS 1 redelivery, a body the bus superseded unread): a body identical to one
of the last :data:`HISTORY` that arrived on its topic, but not the last, is ``stale``. Every
``node``, ``device`` and ``nodemetric`` body carries its stamp, and a clean shutdown's
``offline`` its ``since``, so none recurs; an ``online`` and a will's bare ``offline`` do, and
are taken as they come. A lost node comes back only with a body that is not stale and whose
heartbeat is not the stored one (which, after a controller restart has emptied that memory,
still tells the report already stored), or after its agent's ``online`` (see ``status``).

Cost. Messages that arrive together (within ``linger``, 20 ms, of each other, and within
``max_linger``, 100 ms, of the first) are written in one store transaction (one SQLite commit,
and one pass of the control loops) through
:meth:`controller.api.groupcommit.GroupCommit.submit_many`; each message's writes still succeed
or fail alone. What arrives is taken off the subscription at
every ``linger`` step, so a body waits unread at most that long. A Node or Device that
differs from the last body of its topic only in its time stamp (a heartbeat, a
``reported-at``: most of what a fleet sends) is taken without being decoded again; what is
stored is exactly what decoding it would store. An ingest that falls too far behind a burst
resubscribes, and the bus replays every node's newest state (``koordpy_ingest_resyncs_total``
counts it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import msgspec
from prometheus_client import CollectorRegistry, Counter

from apis.codec import decode_json
from apis.core import Event, Node, Pod
from apis.errors import ApiError, UnknownKind
from apis.eviction import EVICTIONS_LEAF, EvictionRequest
from apis.kinds import Kind
from apis.meta import REPORTED_AT_ANNOTATION, Object
from apis.scheduling import Device
from apis.slo import NodeMetric, NodeMetricSpec
from controller.api.groupcommit import GroupCommit
from controller.descheduler.evictor import TokenBucket
from controller.errors import AlreadyExists, NotFound, StoreError
from controller.events import WARNING, EventRecorder
from controller.fleet.liveness import (
    AGENT_LABELS_ANNOTATION,
    OFFLINE_MESSAGE,
    Liveness,
    clear_unreachable,
    is_marked,
    lost_because,
    mark_unreachable,
)
from controller.fleet.noderestriction import agent_owns_label, restricted
from controller.store.cluster import Outcome
from controller.store.sqlite import Store
from runtime.bus import (
    CONTROLLER_LEAVES,
    AgentStatus,
    Bus,
    BusError,
    BusOverflow,
    Message,
    Subscription,
    node_topic,
    parse_node_topic,
)
from runtime.mqtt import DEFAULT_MAX_PAYLOAD

__all__ = [
    "AGENT_LABELS_ANNOTATION",
    "EVENT_BURST",
    "EVENT_QPS",
    "HISTORY",
    "LINGER",
    "MAX_BATCH",
    "MAX_LINGER",
    "SUBSCRIPTION",
    "Ingest",
    "Result",
    "merge_node",
]

_log = logging.getLogger(__name__)

#: What the ingest subscribes to: every leaf of every node.
SUBSCRIPTION: Final = "koordpy/v1/nodes/+/+"
#: Leaves the controller publishes to agents (ignored by the ingest).
DOWNLINK: Final = CONTROLLER_LEAVES
#: Leaves holding a node's state: a body identical to the last one taken is not decoded again.
_STATE_LEAVES: Final = frozenset({"node", "device", "nodemetric", "status"})
#: Namespace of events that name none (Kubernetes puts node events in ``default``).
EVENT_NAMESPACE: Final = "default"
#: Component named on the Events of evictions an agent asked for.
EVICTION_COMPONENT: Final = "koordlet"
#: Most messages written in one store transaction.
MAX_BATCH: Final = 1024
#: Seconds the ingest waits after a message for more to write in the same transaction (and
#: again while more keep coming): each wait ends by taking what arrived into the batch, so a
#: body waits unread at most this long (a newer report of the same topic supersedes a body
#: still unread: never validated, never counted as what it was).
LINGER: Final = 0.02
#: Seconds the ingest gathers a batch at most, while messages keep coming, before writing
#: them: under a fleet's steady flow, one commit and one pass of the control loops per this
#: much time, whatever the rate.
MAX_LINGER: Final = 0.1
#: Events a second each node may send, and how many at once: the kubelet's defaults
#: (``eventRecordQPS`` 50, ``eventBurst`` 100); the rest are dropped as ``throttled``.
EVENT_QPS: Final = 50.0
EVENT_BURST: Final = 100
#: Bodies remembered per topic to recognise an older one delivered again (see the module
#: docstring: "Which report is stale"): mosquitto's default save every 30 minutes holds a
#: Device 60 reports old at the agent's 30 s interval (512 bytes a topic).
HISTORY: Final = 64

_O = TypeVar("_O", bound=Object)


class Result(enum.StrEnum):
    """What became of one message."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    STALE = "stale"
    INVALID = "invalid"
    FOREIGN = "foreign"
    OVERSIZED = "oversized"
    IGNORED = "ignored"
    #: replaced, unread, by a newer report on its topic (the ingest was behind)
    SUPERSEDED = "superseded"
    #: a write the node may not make (:mod:`controller.fleet.noderestriction`, an Event about an
    #: object that is neither the node nor one of its pods)
    FORBIDDEN = "forbidden"
    #: an Event over the node's rate limit
    THROTTLED = "throttled"


#: Leaves whose bodies never recur (each carries its stamp): one that arrived before, with
#: another since, is an older report delivered again (so is an ``offline`` with a ``since``).
_REPLAYABLE: Final = frozenset({"node", "device", "nodemetric"})
#: Results after which a body counts as taken (a byte-identical copy is skipped).
_TAKEN: Final = frozenset({Result.APPLIED, Result.UNCHANGED, Result.IGNORED})
#: Leaves whose applied messages prove the agent is alive (a replay is never "applied");
#: a valid event or eviction request does too, and a status never does.
_LIVE_LEAVES: Final = frozenset({"node", "device", "nodemetric"})


class _Foreign(Exception):  # noqa: N818 - a verdict, raised only inside this module
    """A body that names another node than its topic."""


class _Forbidden(Exception):  # noqa: N818 - a verdict, raised only inside this module
    """A write the node may not make."""


@dataclass(frozen=True, slots=True)
class _Write:
    """A message's store work (run in the next group commit) and how its value reads."""

    op: Callable[[Store], Any]
    done: Callable[[Any], Result]


def _result(value: Any) -> Result:
    return Result(value)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _heartbeat(node: Node) -> datetime | None:
    ready = node.condition("Ready")
    return ready.last_heartbeat_time if ready is not None else None


def _utc(when: datetime) -> datetime:
    """``when``, a time without an offset read as UTC (so any two compare)."""
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _clamped(when: datetime | None, now: datetime) -> datetime | None:
    """``when``, or ``now`` when ``when`` lies after it (a sender's clock ahead of ours)."""
    return now if when is not None and _utc(when) > now else when


def _same_time(incoming: datetime | None, stored: datetime | None) -> bool:
    """Whether ``incoming`` is no other time than ``stored`` (None: no telling)."""
    return incoming is None or (stored is not None and _utc(incoming) == _utc(stored))


def _reported_at(obj: Object) -> datetime | None:
    text = obj.metadata.annotations.get(REPORTED_AT_ANNOTATION)
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _node_clamped(node: Node, now: datetime) -> Node:
    """``node`` with no condition heartbeat after ``now``."""
    conditions = node.status.conditions
    if all(_clamped(c.last_heartbeat_time, now) is c.last_heartbeat_time for c in conditions):
        return node
    fixed = tuple(
        msgspec.structs.replace(c, last_heartbeat_time=_clamped(c.last_heartbeat_time, now))
        for c in conditions
    )
    return msgspec.structs.replace(
        node, status=msgspec.structs.replace(node.status, conditions=fixed)
    )


def _device_clamped(device: Device, now: datetime) -> Device:
    """``device`` with no ``reported-at`` after ``now``."""
    reported = _reported_at(device)
    if reported is None or _clamped(reported, now) is reported:
        return device
    return _device_stamp(device, now.isoformat())


def _event_clamped(event: Event, now: datetime) -> Event:
    """``event`` with none of its times after ``now`` (they decide when it expires)."""
    series = event.series
    if series is not None and _clamped(series.last_observed_time, now) is not (
        series.last_observed_time
    ):
        series = msgspec.structs.replace(series, last_observed_time=now)
    return msgspec.structs.replace(
        event,
        first_timestamp=_clamped(event.first_timestamp, now),
        last_timestamp=_clamped(event.last_timestamp, now),
        event_time=_clamped(event.event_time, now),
        series=series,
    )


class _History:
    """The hashes of the last :data:`HISTORY` bodies that arrived on one topic (a ring), and
    of the newest."""

    __slots__ = ("hashes", "newest", "slot")

    def __init__(self) -> None:
        self.hashes = array("q")
        self.slot = 0
        self.newest: int | None = None

    def replayed(self, digest: int) -> bool:
        """An older body again: it arrived before, and another since."""
        return digest != self.newest and digest in self.hashes

    def add(self, digest: int, *, newest: bool) -> None:
        if newest:
            self.newest = digest
        if digest in self.hashes:
            return
        if len(self.hashes) < HISTORY:
            self.hashes.append(digest)
        else:
            self.hashes[self.slot] = digest
            self.slot = (self.slot + 1) % HISTORY


def merge_node(stored: Node | None, incoming: Node) -> Node:
    """The Node to store: the agent's status and labels over what others own.

    :data:`AGENT_LABELS_ANNOTATION` lists the labels of the report that its agent owns
    (:func:`controller.fleet.noderestriction.agent_owns_label`); one of those it stops reporting is
    removed.
    """
    reported = dict(incoming.metadata.labels)
    annotations = {
        **incoming.metadata.annotations,
        AGENT_LABELS_ANNOTATION: ",".join(sorted(filter(agent_owns_label, reported))),
    }
    if stored is None:
        return msgspec.structs.replace(
            incoming,
            metadata=msgspec.structs.replace(incoming.metadata, annotations=annotations),
        )
    have = stored.metadata
    previously = {
        key
        for key in have.annotations.get(AGENT_LABELS_ANNOTATION, "").split(",")
        if key and agent_owns_label(key)
    }
    labels = {k: v for k, v in have.labels.items() if k not in previously or k in reported}
    labels.update(reported)
    return msgspec.structs.replace(
        stored,
        metadata=msgspec.structs.replace(
            have, labels=labels, annotations={**have.annotations, **annotations}
        ),
        status=incoming.status,
    )


def _with_owner_uid(device: Device, node: Node) -> Device:
    refs = tuple(
        msgspec.structs.replace(ref, uid=node.metadata.uid)
        if ref.kind == "Node" and ref.name == node.metadata.name
        else ref
        for ref in device.metadata.owner_references
    )
    if refs == device.metadata.owner_references:
        return device
    return msgspec.structs.replace(
        device, metadata=msgspec.structs.replace(device.metadata, owner_references=refs)
    )


def _decode(payload: bytes, target: type[_O]) -> _O:
    obj = decode_json(payload, target)
    expected = target()
    if (obj.api_version, obj.kind) != (expected.api_version, expected.kind):
        raise ApiError(
            f"expected {expected.api_version} {expected.kind}, got {obj.api_version} {obj.kind}"
        )
    return obj


def _check_name(node: str, obj: Object) -> None:
    if obj.metadata.name != node:
        raise _Foreign(
            f"{obj.kind} {obj.metadata.name!r} published under node {node!r}; names must match"
        )


# -- bodies that differ from the last one only in their time stamp ---------------------------
#
# An agent republishes its Node (new Ready heartbeat) and its Device (new reported-at) with
# nothing else changed. Such a body is recognised without decoding it: the bytes before and
# after the stamp are those of the last body decoded from that topic, so the new body decodes
# to that object with the new stamp. Exact: the stamp's key occurs once in the old body and
# is the very field read back from its decoded object, neither body holds a JSON escape, and
# the new stamp is a plain string (no quote, no backslash) parsed as the decoder would.


@dataclass(frozen=True, slots=True)
class _Stamped:
    """The last body decoded from a topic, as far as its time stamp is concerned."""

    start: int
    head: int
    tail: int
    obj: Object


_HEARTBEAT_KEY: Final = b'"lastHeartbeatTime":"'
_REPORTED_AT_KEY: Final = b'"' + REPORTED_AT_ANNOTATION.encode() + b'":"'
_DATETIME: Final = msgspec.json.Decoder(datetime)


def _stamp_span(payload: bytes, key: bytes) -> tuple[int, int] | None:
    """Where the one string value of ``key`` lies in ``payload``; None when not exactly once
    or when the body holds escapes."""
    if b"\\" in payload or payload.count(key) != 1:
        return None
    start = payload.index(key) + len(key)
    end = payload.find(b'"', start)
    return (start, end) if end > 0 else None


def _node_stamp(obj: Node, text: str) -> Node:
    when = _DATETIME.decode(b'"' + text.encode() + b'"')
    conditions = list(obj.status.conditions)
    for i, condition in enumerate(conditions):
        if condition.type == "Ready":
            conditions[i] = msgspec.structs.replace(condition, last_heartbeat_time=when)
            break
    status = msgspec.structs.replace(obj.status, conditions=tuple(conditions))
    return msgspec.structs.replace(obj, status=status)


def _device_stamp(obj: Device, text: str) -> Device:
    annotations = {**obj.metadata.annotations, REPORTED_AT_ANNOTATION: text}
    meta = msgspec.structs.replace(obj.metadata, annotations=annotations)
    return msgspec.structs.replace(obj, metadata=meta)


def _same_stamp(leaf: str, obj: Object, text: str) -> bool:
    """Whether ``text`` (the stamp found in the body) is what ``obj`` decoded it to."""
    if isinstance(obj, Node) and leaf == "node":
        try:
            return _heartbeat(obj) == _DATETIME.decode(b'"' + text.encode() + b'"')
        except msgspec.DecodeError:
            return False
    if isinstance(obj, Device) and leaf == "device":
        return obj.metadata.annotations.get(REPORTED_AT_ANNOTATION) == text
    return False


class Ingest:
    """A controller component: bus -> store. Run it under ``lifecycle.supervise``.

    ``liveness`` (optional) is told when each node was last heard from and which went
    offline; ``max_payload`` is the largest body taken, bytes; ``event_qps`` and
    ``event_burst`` each node's Event rate limit (a token bucket; ``event_qps`` <= 0: none).
    ``clock`` is the receive time (later stamps are clamped to it). ``run`` waits ``linger``
    seconds after a message for others to write with it, and again while more keep coming,
    up to ``max_linger`` in all (a report is stored that much later; a fleet's thousands of
    reports a second cost one commit, and one pass of the control loops, per batch, not one
    each).
    """

    def __init__(
        self,
        bus: Bus,
        store: Store,
        *,
        clock: Callable[[], datetime] = _utcnow,
        registry: CollectorRegistry | None = None,
        client_id: str = "controller/ingest",
        liveness: Liveness | None = None,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        linger: float = LINGER,
        max_linger: float = MAX_LINGER,
        event_qps: float = EVENT_QPS,
        event_burst: int = EVENT_BURST,
        commits: GroupCommit[Store] | None = None,
    ) -> None:
        self.name = "ingest"
        self._bus = bus
        self._store = store
        self._commits = commits if commits is not None else GroupCommit(store)
        self._clock = clock
        self._client_id = client_id
        self._liveness = liveness
        self._max_payload = max_payload
        self._linger = linger
        self._max_linger = max_linger
        self._recorders: dict[str, EventRecorder] = {}
        #: topic -> hash of the last body taken from it (state leaves only)
        self._taken: dict[str, int] = {}
        #: topic -> the last Node or Device decoded from it (see _Stamped)
        self._stamped: dict[str, _Stamped] = {}
        #: nodes whose last status was offline (an online may restore them)
        self._offline: set[str] = set()
        #: nodes whose online followed an offline: their next Node restores them
        self._vouched: set[str] = set()
        self._kinds: dict[type[Object], Kind | None] = {}
        #: topic -> the bodies that arrived on it (what tells an older one delivered again)
        self._history: dict[str, _History] = {}
        self._event_rate = (event_qps, event_burst)
        #: node -> its Event token bucket
        self._buckets: dict[str, TokenBucket] = {}
        #: (node, leaf) -> why its last report was refused (said once until that changes)
        self._refused: dict[tuple[str, str], str] = {}
        self._throttled: set[str] = set()
        registry = registry if registry is not None else CollectorRegistry()
        self._messages = Counter(
            "koordpy_ingest_messages",
            "Messages from agents, by topic leaf and what became of them.",
            ["leaf", "result"],
            registry=registry,
        )
        #: (leaf, result) -> its child of the messages counter
        self._counted: dict[tuple[str, Result], Any] = {}
        self._resyncs = Counter(
            "koordpy_ingest_resyncs",
            "Times the ingest fell too far behind and resubscribed to the retained state.",
            registry=registry,
        )

    async def run(self) -> None:
        with self._bus.connect(self._client_id) as client:
            while True:
                # Behind a burst, each node's newest state is all the store needs.
                with client.subscribe(
                    SUBSCRIPTION, coalesce=True, superseded=self._superseded
                ) as subscription:
                    try:
                        await self._consume(subscription)
                        return
                    except BusOverflow:
                        # Fell behind a burst: subscribing again replays every node's newest
                        # state (the retained bodies), which is all the store needs.
                        self._resyncs.inc()
                        _log.warning("ingest fell behind; resynchronising from retained state")

    async def _consume(self, subscription: Subscription) -> None:
        """Take messages in batches until the subscription ends (returns) or overflows."""
        while True:
            try:
                batch = [await subscription.get()]
            except BusOverflow:
                raise
            except BusError:  # closed
                return
            ended = self._drain(subscription, batch)
            if ended is None and len(batch) < MAX_BATCH and self._linger > 0:
                ended = await self._gather(subscription, batch)
            await self.handle_many(batch)
            if isinstance(ended, BusOverflow):
                raise ended
            if ended is not None:  # closed
                return

    async def _gather(self, subscription: Subscription, batch: list[Message]) -> BusError | None:
        """Let what is on its way join ``batch``: one commit (and one pass of the control
        loops) for all of it. Waits ``linger`` seconds, and again while messages keep coming,
        up to ``max_linger`` in all or :data:`MAX_BATCH` messages; the error that ended the
        subscription, if it did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_linger
        while True:
            before = len(batch)
            await asyncio.sleep(self._linger)
            ended = self._drain(subscription, batch)
            if (
                ended is not None
                or len(batch) == before
                or len(batch) >= MAX_BATCH
                or loop.time() >= deadline
            ):
                return ended

    @staticmethod
    def _drain(subscription: Subscription, batch: list[Message]) -> BusError | None:
        """Move what ``subscription`` has queued into ``batch`` (up to :data:`MAX_BATCH`);
        the error that ended the subscription, if it did."""
        while len(batch) < MAX_BATCH:
            try:
                message = subscription.get_nowait()
            except BusError as err:
                return err
            if message is None:
                return None
            batch.append(message)
        return None

    def _superseded(self, message: Message) -> None:
        parsed = parse_node_topic(message.topic)
        leaf = parsed[1] if parsed is not None else "unknown"
        self._count(leaf, Result.SUPERSEDED)
        if leaf in _STATE_LEAVES and message.payload:
            self._remember(message.topic, message.payload, newest=False)

    def _remember(self, topic: str, payload: bytes, *, newest: bool = True) -> None:
        """``payload`` arrived on ``topic`` (``newest``: it is the topic's newest body; else
        one superseded unread)."""
        history = self._history.get(topic)
        if history is None:
            history = self._history[topic] = _History()
        history.add(hash(payload), newest=newest)

    def _replayed(self, topic: str, payload: bytes) -> bool:
        history = self._history.get(topic)
        return history is not None and history.replayed(hash(payload))

    def _kind(self, struct: type[Object]) -> Kind | None:
        if struct not in self._kinds:
            try:
                self._kinds[struct] = self._store.registry.for_type(struct)
            except UnknownKind:
                self._kinds[struct] = None
        return self._kinds[struct]

    async def handle(self, message: Message) -> Result:
        """Apply one message; never raises for what the message contains."""
        return (await self.handle_many([message]))[0]

    async def handle_many(self, messages: Sequence[Message]) -> list[Result]:
        """Apply messages in order, their writes in one transaction; a result for each."""
        prepared: list[tuple[Message, str, str, Result | _Write]] = []
        now = _utc(self._clock())
        for message in messages:
            parsed = parse_node_topic(message.topic)
            node, leaf = parsed if parsed is not None else ("", "unknown")
            prepared.append((message, node, leaf, self._prepare(message, node, leaf, now)))
        writes = [p[3] for p in prepared if isinstance(p[3], _Write)]
        outcomes: list[Any] = []
        if writes:
            try:
                done_all = await self._commits.submit_many([w.op for w in writes])
            except StoreError as err:  # closed (or the commit failed): every write alike
                outcomes = [err] * len(writes)
            else:
                outcomes = [value for _, value in done_all]
        failure: BaseException | None = None
        results: list[Result] = []
        done = iter(outcomes)
        for message, node, leaf, step in prepared:
            if isinstance(step, Result):
                result = step
            else:
                outcome = next(done)
                if isinstance(outcome, StoreError):
                    _log.warning(
                        "store refused message on %s: %s",
                        message.topic,
                        outcome,
                        extra={"topic": message.topic},
                    )
                    result = Result.INVALID
                elif isinstance(outcome, Exception):
                    # A bug met by this message: said loudly, but it does not stop the
                    # ingest (a restart would meet the same retained message again).
                    _log.error(
                        "failed to apply message on %s",
                        message.topic,
                        exc_info=outcome,
                        extra={"topic": message.topic},
                    )
                    result = Result.INVALID
                elif isinstance(outcome, BaseException):
                    failure = failure or outcome
                    result = Result.INVALID
                else:
                    result = step.done(outcome)
            self._account(message, node, leaf, result)
            results.append(result)
        if failure is not None:
            raise failure
        return results

    def _count(self, leaf: str, result: Result) -> None:
        child = self._counted.get((leaf, result))
        if child is None:
            child = self._counted[(leaf, result)] = self._messages.labels(leaf=leaf, result=result)
        child.inc()

    def _account(self, message: Message, node: str, leaf: str, result: Result) -> None:
        self._count(leaf, result)
        if leaf in _STATE_LEAVES:
            if result in _TAKEN:
                self._taken[message.topic] = hash(message.payload)
            else:
                self._taken.pop(message.topic, None)
        if leaf == "node" and result is Result.APPLIED:
            self._vouched.discard(node)
        liveness = self._liveness
        if liveness is None or not node:
            return
        fresh = result is Result.APPLIED if leaf in _LIVE_LEAVES else result in _TAKEN
        if fresh and leaf != "status":
            liveness.heard(node)

    def _prepare(self, message: Message, node: str, leaf: str, now: datetime) -> Result | _Write:
        """Check one message (received at ``now``); its result, or the store work it needs."""
        payload = message.payload
        if not node:
            _log.warning("dropped message on foreign topic %r", message.topic)
            return Result.FOREIGN
        if leaf in DOWNLINK or not payload:
            return Result.IGNORED
        if len(payload) > self._max_payload:
            _log.warning(
                "dropped %d-byte message on %s: larger than %d bytes",
                len(payload),
                message.topic,
                self._max_payload,
                extra={"topic": message.topic},
            )
            return Result.OVERSIZED
        if leaf in _REPLAYABLE:
            if self._replayed(message.topic, payload):
                return Result.STALE
            self._remember(message.topic, payload)
        if (
            leaf in _STATE_LEAVES
            and self._taken.get(message.topic) == hash(payload)
            and not (leaf == "node" and node in self._vouched)
        ):
            return Result.UNCHANGED
        try:
            if leaf == "node":
                incoming = self._restamped(message.topic, leaf, payload, Node)
                return self._node(node, _node_clamped(incoming, now), vouched=node in self._vouched)
            if leaf == "device":
                device = self._restamped(message.topic, leaf, payload, Device)
                return self._device(node, _device_clamped(device, now))
            if leaf == "nodemetric":
                return self._nodemetric(node, _decode(payload, NodeMetric), now)
            if leaf == "events":
                return self._event(node, _event_clamped(_decode(payload, Event), now), now)
            if leaf == EVICTIONS_LEAF:
                return self._eviction(node, _decode(payload, EvictionRequest))
            if leaf == "status":
                status = msgspec.json.decode(payload, type=AgentStatus)
                if (
                    status.state == "offline"
                    and status.since is not None
                    and self._replayed(message.topic, payload)
                ):
                    return Result.STALE
                self._remember(message.topic, payload)
                return self._status(node, status, now)
        except _Foreign as err:
            _log.warning(
                "dropped message on %s: %s", message.topic, err, extra={"topic": message.topic}
            )
            return Result.FOREIGN
        except _Forbidden as err:
            if (node, leaf) not in self._refused:
                self._refused[(node, leaf)] = str(err)
                _log.warning(
                    "dropped message on %s: %s", message.topic, err, extra={"topic": message.topic}
                )
            return Result.FORBIDDEN
        except (ApiError, msgspec.ValidationError, msgspec.DecodeError) as err:
            _log.warning(
                "dropped message on %s: %s", message.topic, err, extra={"topic": message.topic}
            )
            return Result.INVALID
        return Result.IGNORED

    def _restamped(self, topic: str, leaf: str, payload: bytes, target: type[_O]) -> _O:
        """``payload`` decoded; without decoding when it is the last body of ``topic`` with
        only its time stamp changed."""
        known = self._stamped.get(topic)
        if known is not None and isinstance(known.obj, target):
            start = known.start
            end = payload.find(b'"', start)
            if (
                end > 0
                and hash(payload[:start]) == known.head
                and hash(payload[end:]) == known.tail
                and b"\\" not in payload[start:end]
            ):
                try:
                    text = payload[start:end].decode()
                    obj: Object = (
                        _node_stamp(known.obj, text)
                        if isinstance(known.obj, Node)
                        else _device_stamp(known.obj, text)
                        if isinstance(known.obj, Device)
                        else known.obj
                    )
                except (UnicodeDecodeError, msgspec.DecodeError):
                    pass  # not a time stamp after all: decode it whole (and refuse it)
                else:
                    if isinstance(obj, target):
                        self._stamped[topic] = dataclasses.replace(known, obj=obj)
                        return obj
        decoded = _decode(payload, target)
        key = _HEARTBEAT_KEY if leaf == "node" else _REPORTED_AT_KEY
        span = _stamp_span(payload, key)
        if span is not None:
            start, end = span
            text = payload[start:end].decode(errors="replace")
            if _same_stamp(leaf, decoded, text):
                head, tail = hash(payload[:start]), hash(payload[end:])
                self._stamped[topic] = _Stamped(start, head, tail, decoded)
                return decoded
        self._stamped.pop(topic, None)
        return decoded

    # -- per leaf: checks before the write, and the write ----------------------------------

    def _node(
        self, node: str, incoming: Node, *, vouched: bool = False, restore_only: bool = False
    ) -> Result | _Write:
        """The write of an agent's Node (its stamps already clamped).

        A lost node comes back only with a report not taken before (its heartbeat is not the
        stored one's), or, when it was lost because its status said offline and an ``online``
        has since vouched for the agent (``vouched``), with the same one. ``restore_only``:
        write nothing unless that brings it back. A change the node may not make
        (:mod:`controller.fleet.noderestriction`) is held back.
        """
        _check_name(node, incoming)
        kind = self._kind(Node)
        if kind is None:
            return Result.IGNORED
        device_kind = self._kind(Device)
        beat = _heartbeat(incoming)
        refused: list[str] = []

        def write(store: Store) -> Result:
            try:
                found = store.get(kind, node)
            except NotFound:
                found = None
            stored = found if isinstance(found, Node) else None
            if restore_only and (stored is None or not is_marked(stored)):
                return Result.UNCHANGED
            merged, why = restricted(
                stored, merge_node(stored, incoming), ignore=(AGENT_LABELS_ANNOTATION,)
            )
            if why is not None:
                refused.append(why)
            if stored is not None and is_marked(stored):
                # A repeated report (after a restart, the one stored) does not bring a lost
                # node back.
                again = vouched and lost_because(stored) == OFFLINE_MESSAGE
                if not again and _same_time(beat, _heartbeat(stored)):
                    return Result.STALE
                merged = clear_unreachable(merged)
            saved, outcome = store.apply(merged)
            if device_kind is not None and outcome is Outcome.CREATED and isinstance(saved, Node):
                # A Device that arrived first (retained topics replay in name order) gets
                # its owner reference fixed now (a Node's uid is given when it is created).
                try:
                    device = store.get(device_kind, node)
                except NotFound:
                    device = None
                if isinstance(device, Device):
                    fixed = _with_owner_uid(device, saved)
                    if fixed is not device:
                        store.update(fixed)
            return Result.UNCHANGED if outcome is Outcome.UNCHANGED else Result.APPLIED

        def done(result: Result) -> Result:
            if not refused:
                self._refused.pop((node, "node"), None)
            elif self._refused.get((node, "node")) != refused[0]:
                self._refused[(node, "node")] = refused[0]
                _log.warning(
                    "held back part of a Node report: %s", refused[0], extra={"node": node}
                )
            return result

        return _Write(write, done)

    def _device(self, node: str, incoming: Device) -> Result | _Write:
        _check_name(node, incoming)
        kind = self._kind(Device)
        node_kind = self._kind(Node)
        if kind is None:
            return Result.IGNORED

        def write(store: Store) -> Result:
            device = incoming
            if node_kind is not None:
                try:
                    owner = store.get(node_kind, node)
                except NotFound:
                    owner = None
                if isinstance(owner, Node):
                    device = _with_owner_uid(device, owner)
            outcome = store.apply(device)[1]
            return Result.UNCHANGED if outcome is Outcome.UNCHANGED else Result.APPLIED

        return _Write(write, _result)

    def _nodemetric(self, node: str, incoming: NodeMetric, now: datetime) -> Result | _Write:
        _check_name(node, incoming)
        kind = self._kind(NodeMetric)
        if kind is None:
            return Result.IGNORED
        updated = incoming.status.update_time
        if _clamped(updated, now) is not updated:
            status = msgspec.structs.replace(incoming.status, update_time=now)
            incoming = msgspec.structs.replace(incoming, status=status)

        def write(store: Store) -> Result:
            try:
                stored = store.get(kind, node)
            except NotFound:
                stored = None
            # The spec is the controller's (or the user's): a report brings the status only.
            spec = stored.spec if isinstance(stored, NodeMetric) else NodeMetricSpec()
            outcome = store.apply(msgspec.structs.replace(incoming, spec=spec))[1]
            return Result.UNCHANGED if outcome is Outcome.UNCHANGED else Result.APPLIED

        return _Write(write, _result)

    def _event(self, node: str, incoming: Event, now: datetime) -> Result | _Write:
        """The write of an Event from ``node``: about the node itself (in ``default``) or a
        pod bound to it (in the pod's namespace), within the node's rate limit."""
        pod_kind = self._kind(Pod)
        if self._kind(Event) is None or pod_kind is None:
            return Result.IGNORED
        meta = incoming.metadata
        about = incoming.involved_object
        if about.kind in ("", "Node"):
            if about.name not in ("", node) or about.namespace:
                raise _Forbidden(f"an Event from node {node!r} about Node {about.name!r}")
            namespace = EVENT_NAMESPACE
            about = msgspec.structs.replace(about, kind="Node", name=node)
        elif about.kind == "Pod" and about.api_version in ("", "v1") and about.name:
            namespace = about.namespace or EVENT_NAMESPACE
            about = msgspec.structs.replace(about, namespace=namespace)
        else:
            raise _Forbidden(
                f"an Event from node {node!r} about {about.kind} {about.name!r}:"
                " only the node and its pods"
            )
        if meta.finalizers:
            raise _Forbidden(
                f"metadata.finalizers: an Event from node {node!r} may not hold finalizers"
                f" (it would outlive its TTL), got {list(meta.finalizers)}"
            )
        if meta.namespace not in ("", namespace):
            raise ApiError(
                f"involvedObject.namespace: Invalid value: {namespace!r}:"
                f" does not match event.namespace {meta.namespace!r}"
            )
        if not self._take_token(node, now):
            return Result.THROTTLED
        event = msgspec.structs.replace(
            incoming,
            metadata=msgspec.structs.replace(
                meta,
                namespace=namespace,
                generate_name=meta.generate_name or ("" if meta.name else f"{about.name}."),
            ),
            involved_object=about,
            source=msgspec.structs.replace(incoming.source, host=incoming.source.host or node),
        )

        def write(store: Store) -> Result:
            if about.kind == "Pod":
                try:
                    pod = store.get(pod_kind, about.name, namespace)
                except NotFound:
                    pod = None
                if (
                    not isinstance(pod, Pod)
                    or pod.spec.node_name != node
                    or (about.uid and about.uid != pod.metadata.uid)
                ):
                    return Result.FORBIDDEN
            try:
                store.create(event)
            except AlreadyExists:
                return Result.UNCHANGED
            return Result.APPLIED

        def done(result: Result) -> Result:
            if result is Result.APPLIED:
                self._refused.pop((node, "events"), None)
            elif result is Result.FORBIDDEN and (node, "events") not in self._refused:
                # Said once until one of its Events is taken again: a flood is one line.
                why = f"pod {namespace}/{about.name} is not bound to node {node}"
                self._refused[(node, "events")] = why
                _log.warning("dropped an Event from node %s: %s", node, why, extra={"node": node})
            return result

        return _Write(write, done)

    def _take_token(self, node: str, now: datetime) -> bool:
        """One token from ``node``'s Event bucket; False when it is dry (said once until a
        token is taken again)."""
        bucket = self._buckets.get(node)
        if bucket is None:
            qps, burst = self._event_rate
            bucket = self._buckets[node] = TokenBucket(rate=qps, burst=burst)
        if bucket.take(now):
            self._throttled.discard(node)
            return True
        if node not in self._throttled:
            self._throttled.add(node)
            qps, burst = self._event_rate
            _log.warning(
                "node %s sends Events faster than %g/s (burst %d): dropping them",
                node,
                qps,
                burst,
                extra={"node": node},
            )
        return False

    def _recorder(self, node: str) -> EventRecorder:
        recorder = self._recorders.get(node)
        if recorder is None:
            recorder = self._recorders[node] = EventRecorder(
                self._store, component=EVICTION_COMPONENT, clock=self._clock, host=node
            )
        return recorder

    def _eviction(self, node: str, request: EvictionRequest) -> Result | _Write:
        kind = self._kind(Pod)
        if kind is None or self._kind(Event) is None:
            return Result.IGNORED
        meta = request.metadata
        if not meta.name:
            raise ApiError(f"eviction request from node {node!r} names no pod")
        recorder = self._recorder(node)
        where = {"node": node, "pod": f"{meta.namespace or 'default'}/{meta.name}"}

        def write(store: Store) -> tuple[Result, str]:
            try:
                pod = store.get(kind, meta.name, meta.namespace)
            except NotFound:
                return Result.IGNORED, "the pod is gone"
            if not isinstance(pod, Pod):
                return Result.IGNORED, "not a pod"
            if meta.uid and pod.metadata.uid != meta.uid:
                return Result.IGNORED, f"the pod now has uid {pod.metadata.uid}, not {meta.uid}"
            if pod.spec.node_name != node:
                return Result.IGNORED, f"the pod runs on node {pod.spec.node_name!r}"
            if pod.metadata.deletion_timestamp is not None:
                return Result.UNCHANGED, "the pod is already being deleted"
            feature = request.feature or "unknown"
            text = f"evicted on request of the agent of node {node} (feature {feature})"
            if request.message:
                text = f"{text}: {request.message}"
            recorder.record(pod, type=WARNING, reason=request.reason or "Evicted", message=text)
            store.delete(kind, meta.name, pod.metadata.namespace)
            return Result.APPLIED, ""

        def done(value: tuple[Result, str]) -> Result:
            result, why = value
            if result is Result.APPLIED:
                _log.info(
                    "evicted pod %s for node %s (%s)",
                    where["pod"],
                    node,
                    request.feature,
                    extra=where,
                )
            else:
                _log.info(
                    "dropped eviction of pod %s from node %s: %s",
                    where["pod"],
                    node,
                    why,
                    extra=where,
                )
            return result

        return _Write(write, done)

    def _status(self, node: str, status: AgentStatus, now: datetime) -> Result | _Write:
        if status.state == "online":
            _log.info("node %s is online", node, extra={"node": node})
            return self._online(node, now)
        kind = self._kind(Node)
        if kind is None:
            return Result.IGNORED
        self._offline.add(node)
        self._vouched.discard(node)

        def write(store: Store) -> Result:
            try:
                stored = store.get(kind, node)
            except NotFound:
                return Result.IGNORED
            if not isinstance(stored, Node):
                return Result.IGNORED
            offline = mark_unreachable(stored, now, OFFLINE_MESSAGE)
            if offline is stored:
                return Result.UNCHANGED
            store.update(offline)
            return Result.APPLIED

        def done(result: Result) -> Result:
            if result is Result.APPLIED:
                _log.warning("node %s went offline", node, extra={"node": node})
            if result in (Result.APPLIED, Result.UNCHANGED) and self._liveness is not None:
                self._liveness.went_offline(node)
            return result

        return _Write(write, done)

    def _online(self, node: str, now: datetime) -> Result | _Write:
        """After an offline, the agent's ``online`` restores its last Node from the bus (not
        an older one delivered again: then the agent's next Node does)."""
        if node not in self._offline:
            return Result.IGNORED
        self._offline.discard(node)
        self._vouched.add(node)
        try:
            last = next(iter(self._bus.retained(node_topic(node, "node"))), None)
        except BusError:
            return Result.IGNORED
        if last is None or not last.payload or len(last.payload) > self._max_payload:
            return Result.IGNORED
        if self._replayed(last.topic, last.payload):
            return Result.IGNORED
        try:
            restored = _node_clamped(_decode(last.payload, Node), now)
            step = self._node(node, restored, vouched=True, restore_only=True)
        except (_Foreign, ApiError, msgspec.ValidationError, msgspec.DecodeError):
            return Result.IGNORED
        if isinstance(step, Result):
            return Result.IGNORED

        def done(result: Result) -> Result:
            if result is Result.APPLIED:
                _log.info("node %s is back online", node, extra={"node": node})
                self._vouched.discard(node)
                if self._liveness is not None:
                    self._liveness.heard(node)
                return Result.APPLIED
            return Result.IGNORED

        return _Write(step.op, done)
