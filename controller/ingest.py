"""Ingest: what agents publish on the bus becomes objects in the store.

Subscribes to ``koordpy/v1/nodes/+/+`` and, per topic leaf:

* ``node`` -> the Node, applied with the agent's status and labels; labels and annotations
  others set, the spec (taints, unschedulable) and finalizers are kept. Labels the agent
  stops reporting are removed (the keys it last set are remembered in an annotation);
* ``device`` -> the Device; its owner reference is pointed at the stored Node's uid;
* ``nodemetric`` -> the NodeMetric;
* ``events`` -> a new Event (``generateName``; namespace ``default`` when none);
* ``evictions`` -> a ``policy/v1`` Eviction request (:class:`apis.eviction.EvictionRequest`):
  the named pod is deleted (finalizers honoured: a pod with finalizers only gets its
  ``deletionTimestamp``) and a Warning Event ``Evicted`` is recorded on it, naming the agent's
  feature and node. A request for a pod that is gone, has another uid, or runs on another node
  is dropped with a log line;
* ``status`` ``offline`` -> the Node's Ready condition becomes ``Unknown``
  (``NodeStatusUnknown``, "agent went offline"), as Kubernetes marks a silent node.

A body named differently from the topic's node is refused. A body older than the stored one
is dropped: Nodes by the Ready heartbeat, NodeMetrics by ``status.updateTime``, Devices by the
``koordpy.io/reported-at`` annotation. Bad payloads are logged with their topic and dropped;
nothing an agent sends stops the ingest.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, TypeVar

import msgspec
from prometheus_client import CollectorRegistry, Counter

from apis.codec import decode_json
from apis.core import Event, Node, Pod
from apis.errors import ApiError, UnknownKind
from apis.eviction import EVICTIONS_LEAF, EvictionRequest
from apis.kinds import Kind
from apis.meta import Condition, Object
from apis.scheduling import Device
from apis.slo import NodeMetric
from controller.errors import AlreadyExists, NotFound, StoreError
from controller.events import WARNING, EventRecorder
from controller.store import Outcome, Store
from koordpy.bus import (
    REPORTED_AT_ANNOTATION,
    AgentStatus,
    Bus,
    Message,
    parse_node_topic,
)

__all__ = [
    "AGENT_LABELS_ANNOTATION",
    "SUBSCRIPTION",
    "Ingest",
    "Result",
    "mark_offline",
    "merge_node",
]

_log = logging.getLogger(__name__)

#: What the ingest subscribes to: every leaf of every node.
SUBSCRIPTION: Final = "koordpy/v1/nodes/+/+"
#: Leaves the controller publishes to agents (ignored by the ingest).
DOWNLINK: Final = ("pods", "nodeslo")
#: Node annotation holding the label keys the agent set last (comma-separated, sorted).
AGENT_LABELS_ANNOTATION: Final = "koordpy.io/agent-labels"
#: Namespace of events that name none (Kubernetes puts node events in ``default``).
EVENT_NAMESPACE: Final = "default"

OFFLINE_REASON: Final = "NodeStatusUnknown"
OFFLINE_MESSAGE: Final = "agent went offline"
#: Component named on the Events of evictions an agent asked for.
EVICTION_COMPONENT: Final = "koordlet"

_O = TypeVar("_O", bound=Object)


class Result(enum.StrEnum):
    """What became of one message."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    STALE = "stale"
    INVALID = "invalid"
    IGNORED = "ignored"


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _ready(node: Node) -> Condition | None:
    return node.condition("Ready")


def _heartbeat(node: Node) -> datetime | None:
    ready = _ready(node)
    return ready.last_heartbeat_time if ready is not None else None


def _older(incoming: datetime | None, stored: datetime | None) -> bool:
    return incoming is not None and stored is not None and incoming < stored


def _reported_at(obj: Object) -> datetime | None:
    text = obj.metadata.annotations.get(REPORTED_AT_ANNOTATION)
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def merge_node(stored: Node | None, incoming: Node) -> Node:
    """The Node to store: the agent's status and labels over what others own."""
    reported = dict(incoming.metadata.labels)
    annotations = {
        **incoming.metadata.annotations,
        AGENT_LABELS_ANNOTATION: ",".join(sorted(reported)),
    }
    if stored is None:
        return msgspec.structs.replace(
            incoming,
            metadata=msgspec.structs.replace(incoming.metadata, annotations=annotations),
        )
    have = stored.metadata
    previously = set(filter(None, have.annotations.get(AGENT_LABELS_ANNOTATION, "").split(",")))
    labels = {k: v for k, v in have.labels.items() if k not in previously or k in reported}
    labels.update(reported)
    return msgspec.structs.replace(
        stored,
        metadata=msgspec.structs.replace(
            have, labels=labels, annotations={**have.annotations, **annotations}
        ),
        status=incoming.status,
    )


def mark_offline(node: Node, now: datetime) -> Node:
    """``node`` with Ready ``Unknown`` (unchanged when it already is)."""
    ready = _ready(node)
    if ready is not None and ready.status == "Unknown" and ready.reason == OFFLINE_REASON:
        return node
    unknown = Condition(
        type="Ready",
        status="Unknown",
        reason=OFFLINE_REASON,
        message=OFFLINE_MESSAGE,
        last_heartbeat_time=ready.last_heartbeat_time if ready is not None else None,
        last_transition_time=now,
    )
    others = tuple(c for c in node.status.conditions if c.type != "Ready")
    return msgspec.structs.replace(
        node, status=msgspec.structs.replace(node.status, conditions=(unknown, *others))
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


class Ingest:
    """A controller component: bus -> store. Run it under ``lifecycle.supervise``."""

    def __init__(
        self,
        bus: Bus,
        store: Store,
        *,
        clock: Callable[[], datetime] = _utcnow,
        registry: CollectorRegistry | None = None,
        client_id: str = "controller/ingest",
    ) -> None:
        self.name = "ingest"
        self._bus = bus
        self._store = store
        self._clock = clock
        self._client_id = client_id
        self._recorders: dict[str, EventRecorder] = {}
        self._messages = Counter(
            "koordpy_ingest_messages",
            "Messages from agents, by topic leaf and what became of them.",
            ["leaf", "result"],
            registry=registry if registry is not None else CollectorRegistry(),
        )

    async def run(self) -> None:
        with (
            self._bus.connect(self._client_id) as client,
            client.subscribe(SUBSCRIPTION) as subscription,
        ):
            async for message in subscription:
                await self.handle(message)

    def _kind(self, struct: type[Object]) -> Kind | None:
        try:
            return self._store.registry.for_type(struct)
        except UnknownKind:
            return None

    async def handle(self, message: Message) -> Result:
        """Apply one message; never raises for what the message contains."""
        parsed = parse_node_topic(message.topic)
        leaf = parsed[1] if parsed is not None else "unknown"
        result = await self._handle(message, parsed)
        self._messages.labels(leaf=leaf, result=result).inc()
        return result

    async def _handle(self, message: Message, parsed: tuple[str, str] | None) -> Result:
        if parsed is None or parsed[1] in DOWNLINK or not message.payload:
            return Result.IGNORED
        node, leaf = parsed
        try:
            if leaf == "node":
                return await self._node(node, self._decode(message, Node))
            if leaf == "device":
                return await self._device(node, self._decode(message, Device))
            if leaf == "nodemetric":
                return await self._nodemetric(node, self._decode(message, NodeMetric))
            if leaf == "events":
                return await self._event(node, self._decode(message, Event))
            if leaf == EVICTIONS_LEAF:
                return await self._eviction(node, self._decode(message, EvictionRequest))
            if leaf == "status":
                return await self._status(
                    node, msgspec.json.decode(message.payload, type=AgentStatus)
                )
        except (ApiError, msgspec.ValidationError, msgspec.DecodeError) as err:
            _log.warning(
                "dropped message on %s: %s", message.topic, err, extra={"topic": message.topic}
            )
            return Result.INVALID
        except StoreError as err:
            _log.warning(
                "store refused message on %s: %s",
                message.topic,
                err,
                extra={"topic": message.topic},
            )
            return Result.INVALID
        return Result.IGNORED

    @staticmethod
    def _decode(message: Message, target: type[_O]) -> _O:
        obj = decode_json(message.payload, target)
        expected = target()
        if (obj.api_version, obj.kind) != (expected.api_version, expected.kind):
            raise ApiError(
                f"expected {expected.api_version} {expected.kind}, got {obj.api_version} {obj.kind}"
            )
        return obj

    @staticmethod
    def _check_name(node: str, obj: Object) -> None:
        if obj.metadata.name != node:
            raise ApiError(
                f"{obj.kind} {obj.metadata.name!r} published under node {node!r}; names must match"
            )

    async def _node(self, node: str, incoming: Node) -> Result:
        self._check_name(node, incoming)
        kind = self._kind(Node)
        if kind is None:
            return Result.IGNORED
        device_kind = self._kind(Device)

        def write(store: Store) -> Result:
            try:
                stored = store.get(kind, node)
            except NotFound:
                stored = None
            if isinstance(stored, Node) and _older(_heartbeat(incoming), _heartbeat(stored)):
                return Result.STALE
            saved, outcome = store.apply(
                merge_node(stored if isinstance(stored, Node) else None, incoming)
            )
            if device_kind is not None and isinstance(saved, Node):
                # A Device that arrived first (retained topics replay in name order) gets
                # its owner reference fixed now.
                try:
                    device = store.get(device_kind, node)
                except NotFound:
                    device = None
                if isinstance(device, Device):
                    fixed = _with_owner_uid(device, saved)
                    if fixed is not device:
                        store.update(fixed)
            return Result.UNCHANGED if outcome is Outcome.UNCHANGED else Result.APPLIED

        return await self._store.submit(write)

    async def _device(self, node: str, incoming: Device) -> Result:
        self._check_name(node, incoming)
        kind = self._kind(Device)
        node_kind = self._kind(Node)
        if kind is None:
            return Result.IGNORED

        def write(store: Store) -> Result:
            try:
                stored = store.get(kind, node)
            except NotFound:
                stored = None
            if stored is not None and _older(_reported_at(incoming), _reported_at(stored)):
                return Result.STALE
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

        return await self._store.submit(write)

    async def _nodemetric(self, node: str, incoming: NodeMetric) -> Result:
        self._check_name(node, incoming)
        kind = self._kind(NodeMetric)
        if kind is None:
            return Result.IGNORED

        def write(store: Store) -> Result:
            try:
                stored = store.get(kind, node)
            except NotFound:
                stored = None
            if isinstance(stored, NodeMetric) and _older(
                incoming.status.update_time, stored.status.update_time
            ):
                return Result.STALE
            outcome = store.apply(incoming)[1]
            return Result.UNCHANGED if outcome is Outcome.UNCHANGED else Result.APPLIED

        return await self._store.submit(write)

    async def _event(self, node: str, incoming: Event) -> Result:
        if self._kind(Event) is None:
            return Result.IGNORED
        meta = incoming.metadata
        involved = incoming.involved_object.name or node
        event = msgspec.structs.replace(
            incoming,
            metadata=msgspec.structs.replace(
                meta,
                namespace=meta.namespace or EVENT_NAMESPACE,
                generate_name=meta.generate_name or ("" if meta.name else f"{involved}."),
            ),
            source=msgspec.structs.replace(incoming.source, host=incoming.source.host or node),
        )

        def write(store: Store) -> Result:
            try:
                store.create(event)
            except AlreadyExists:
                return Result.UNCHANGED
            return Result.APPLIED

        return await self._store.submit(write)

    def _recorder(self, node: str) -> EventRecorder:
        recorder = self._recorders.get(node)
        if recorder is None:
            recorder = self._recorders[node] = EventRecorder(
                self._store, component=EVICTION_COMPONENT, clock=self._clock, host=node
            )
        return recorder

    async def _eviction(self, node: str, request: EvictionRequest) -> Result:
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

        result, why = await self._store.submit(write)
        if result is Result.APPLIED:
            _log.info(
                "evicted pod %s for node %s (%s)", where["pod"], node, request.feature, extra=where
            )
        else:
            _log.info(
                "dropped eviction of pod %s from node %s: %s", where["pod"], node, why, extra=where
            )
        return result

    async def _status(self, node: str, status: AgentStatus) -> Result:
        if status.state == "online":
            _log.info("node %s is online", node, extra={"node": node})
            return Result.IGNORED
        kind = self._kind(Node)
        if kind is None:
            return Result.IGNORED
        now = self._clock()

        def write(store: Store) -> Result:
            try:
                stored = store.get(kind, node)
            except NotFound:
                return Result.IGNORED
            if not isinstance(stored, Node):
                return Result.IGNORED
            offline = mark_offline(stored, now)
            if offline is stored:
                return Result.UNCHANGED
            store.update(offline)
            return Result.APPLIED

        result = await self._store.submit(write)
        if result is Result.APPLIED:
            _log.warning("node %s went offline", node, extra={"node": node})
        return result
