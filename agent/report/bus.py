"""The agent's transport over a :class:`runtime.bus.Bus`: the controller's in ``koordpy up``,
or the agent's local bus that :class:`runtime.mqtt.MqttBridge` mirrors to the fleet's broker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType

from agent.report.transport import StateLeaf
from apis.codec import encode_json
from apis.core import Event
from apis.meta import Object
from runtime.bus import AgentStatus, Bus, BusClient, Message, node_topic

__all__ = ["BusPublisher", "status_body"]

_log = logging.getLogger(__name__)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def status_body(state: str, since: datetime | None = None) -> bytes:
    """JSON body of a ``status`` message."""
    return encode_json(AgentStatus(state="online" if state == "online" else "offline", since=since))


class BusPublisher:
    """Publishes one node's reports on a :class:`runtime.bus.Bus`."""

    def __init__(self, bus: Bus, node: str, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.node = node
        self._bus = bus
        self._clock = clock
        self._client: BusClient | None = None
        self._last: dict[str, bytes] = {}

    @property
    def client_id(self) -> str:
        return f"agent/{self.node}"

    def _connected(self) -> BusClient:
        if self._client is None or not self._client.connected:
            raise RuntimeError(f"publisher for node {self.node} is not connected")
        return self._client

    async def __aenter__(self) -> BusPublisher:
        status = node_topic(self.node, "status")
        will = Message(status, status_body("offline"), retain=True)
        self._client = self._bus.connect(self.client_id, will=will)
        self._last.clear()
        self._client.publish(status, status_body("online", self._clock()), retain=True)
        _log.info("node %s online on the bus", self.node, extra={"node": self.node})
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client = self._client
        if client is None or not client.connected:
            return
        if exc_type is None or issubclass(exc_type, asyncio.CancelledError):
            status = node_topic(self.node, "status")
            client.publish(status, status_body("offline", self._clock()), retain=True)
            client.close()
            _log.info("node %s offline", self.node, extra={"node": self.node})
        else:
            client.disconnect()

    def abort(self) -> None:
        """Drop the connection uncleanly (the bus publishes the will)."""
        if self._client is not None:
            self._client.disconnect()

    async def report(self, leaf: StateLeaf, obj: Object) -> bool:
        body = encode_json(obj)
        if self._last.get(leaf) == body:
            return False
        self._connected().publish(node_topic(self.node, leaf), body, retain=True)
        self._last[leaf] = body
        return True

    async def event(self, event: Event) -> None:
        self._connected().publish(node_topic(self.node, "events"), encode_json(event))
