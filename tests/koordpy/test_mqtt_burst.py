"""A burst of events from one node, through the shipped broker to a busy controller.

Issue 18: 3,000 events from one node made the broker drop the controller's session ("Protocol
error") and lost most of them. The controller's receive path takes PUBLISH packets off the
socket itself; paho's keep-alive, seeing none of those bytes, sent a PINGREQ whose PINGRESP then
waited behind thousands of messages, and paho closed a connection that had never gone quiet.
The broker logged the abrupt end as a protocol error and dropped the clean session's queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from prometheus_client import CollectorRegistry

from runtime.bus import Bus, node_topic
from runtime.mqtt import controller_bridge
from tests.fakes.broker import Broker, running_broker
from tests.koordpy.test_mqtt import connected, sample, until

pytestmark = [pytest.mark.network, pytest.mark.slow]

BURST = 3000
#: What each event costs the controller's loop (the ingest writes it to the store): the
#: burst takes longer than two keep-alive periods to work through.
COST = 0.004
KEEPALIVE = 5


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker", secure=True) as started:
        yield started


class _Node:
    """node-a's certificate on a plain paho client that publishes as fast as it can."""

    def __init__(self, broker: Broker, node: str) -> None:
        settings = broker.settings(node)
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=node, protocol=paho.MQTTv5)
        self.client.tls_set(settings.ca_file, settings.cert_file, settings.key_file)
        self.client.max_inflight_messages_set(0)  # the broker's Receive Maximum still holds
        self.client.max_queued_messages_set(0)
        self.acked: set[int] = set()  # mids the broker accepted
        self._lock = threading.Lock()
        self.client.on_publish = self._on_publish
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()

    def _on_publish(self, client: object, data: object, mid: int, code: object, _: object) -> None:
        if not getattr(code, "is_failure", False):
            with self._lock:
                self.acked.add(mid)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


async def test_a_burst_of_events_reaches_a_busy_controller_without_losing_its_session(
    secure_broker: Broker,
) -> None:
    broker = secure_broker
    registry = CollectorRegistry()
    cbus = Bus(queue_size=65536)
    events = cbus.subscribe(node_topic("node-a", "events"), queue_size=65536)
    seen: set[int] = set()

    async def busy_ingest() -> None:
        while True:
            message = await events.get()
            seen.add(json.loads(message.payload)["i"])
            time.sleep(COST)  # noqa: ASYNC251 - the point: a controller whose loop is busy

    settings = broker.settings("controller", keepalive=KEEPALIVE)
    async with controller_bridge(cbus, settings, registry=registry) as controller:
        await connected(controller)
        consumer = asyncio.create_task(busy_ingest())
        node = _Node(broker, "node-a")
        try:
            mids = {
                node.client.publish(
                    node_topic("node-a", "events"), json.dumps({"i": i}).encode(), qos=1
                ).mid: i
                for i in range(BURST)
            }
            await until(lambda: len(node.acked) == BURST, "the broker accepted the burst", 60)
            await until(
                lambda: (
                    len(seen) == BURST
                    or not controller.connected.is_set()
                    or sample(registry, "koordpy_mqtt_connects_total") > 1
                ),
                "every event at the controller, or the connection lost",
                90,
            )
        finally:
            node.close()
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
        acknowledged = {mids[mid] for mid in node.acked}
        assert acknowledged == set(range(BURST))
        assert acknowledged <= seen
        assert sample(registry, "koordpy_mqtt_connects_total") == 1  # never dropped
        assert "Protocol error" not in broker.log()
