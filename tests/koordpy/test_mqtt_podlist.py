"""A node's PodList larger than one MQTT message still reaches the node (issue 18).

Through the shipped broker (``max_packet_size`` 2 MiB) and the bridges' ``max_payload``
(1 MiB): the controller's bridge sends the body in parts, the agent's bridge puts it back
together, and the agent's real pods source (:class:`agent.pods.bindings.BindingsPodSource`)
reads it from its bus as from ``koordpy up``. The pure side (:mod:`runtime.mqttparts`) is in
``test_mqttparts.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent.pods.bindings import BindingsPodSource
from apis.core import Container, Pod, PodSpec
from apis.meta import ObjectMeta
from controller.fleet.nodefeed import pod_list
from runtime import mqttparts
from runtime.bus import Bus, node_topic
from runtime.mqtt import DEFAULT_MAX_PAYLOAD, agent_bridge, controller_bridge
from tests.fakes.broker import Broker, running_broker
from tests.koordpy.test_mqtt import (
    OFFLINE,
    collecting,
    connected,
    retained,
    sample,
    until,
    watcher,
)

pytestmark = pytest.mark.network

PODS = 3000


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker", secure=True) as started:
        yield started


def big_pod_list(node: str, version: str) -> bytes:
    """``PODS`` pods bound to ``node``, each with a kilobyte of random annotation."""
    return pod_list(
        Pod(
            metadata=ObjectMeta(
                name=f"pod-{i}",
                namespace="default",
                uid=f"uid-{i}",
                annotations={"example.com/blob": secrets.token_hex(512), "version": version},
            ),
            spec=PodSpec(node_name=node, containers=(Container(name="main", image="app"),)),
        )
        for i in range(PODS)
    )


async def test_a_pod_list_over_the_message_limit_reaches_the_node_whole(
    secure_broker: Broker,
) -> None:
    broker = secure_broker
    cbus, abus = Bus(), Bus()
    registry = CollectorRegistry()
    topic = node_topic("node-a", "pods")
    versions = {v: big_pod_list("node-a", v) for v in ("a", "b", "c")}
    assert all(len(body) > 2 * DEFAULT_MAX_PAYLOAD for body in versions.values())
    source = BindingsPodSource(abus, "node-a")
    delivered = abus.subscribe(topic)
    async with (
        controller_bridge(cbus, broker.settings("controller"), registry=registry) as controller,
        agent_bridge(abus, broker.settings("node-a"), "node-a", will_payload=OFFLINE) as agent,
    ):
        await connected(controller, agent)
        reader = asyncio.create_task(source.run())
        try:

            def got(version: str) -> bool:
                dropped = sample(
                    registry, "koordpy_mqtt_messages_dropped_total", reason="oversized"
                )
                return dropped > 0 or (
                    len(source.pods) == PODS
                    and all(p.metadata.annotations["version"] == version for p in source.pods)
                )

            cbus.publish(topic, versions["a"], retain=True)
            await until(lambda: got("a"), "the first list, or the controller dropped it", 60)
            parts = len(mqttparts.split(versions["a"], DEFAULT_MAX_PAYLOAD)[1])
            assert parts >= 2
            await until(
                lambda: (
                    sample(registry, "koordpy_mqtt_messages_sent_total", leaf="pods") == parts + 1
                ),
                "its parts and manifest acknowledged",
            )
            # Two more versions back to back: their parts cross on the way.
            cbus.publish(topic, versions["b"], retain=True)
            cbus.publish(topic, versions["c"], retain=True)
            await until(lambda: got("c"), "the last list, or the controller dropped it", 60)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        assert sample(registry, "koordpy_mqtt_messages_dropped_total", reason="oversized") == 0
        assert len(source.pods) == PODS
        assert {p.metadata.annotations["version"] for p in source.pods} == {"c"}
        bodies = []
        while (message := delivered.get_nowait()) is not None:
            bodies.append(message.payload)
        # Every body the node's bus saw was one version, whole; never a mix of two.
        assert set(bodies) <= set(versions.values())
        assert bodies[0] == versions["a"]
        assert bodies[-1] == versions["c"]
        assert retained(abus)[topic] == versions["c"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker") as started:
        yield started


async def test_a_list_that_fits_again_clears_the_parts_left_on_the_broker(broker: Broker) -> None:
    cbus = Bus()
    topic = node_topic("node-a", "pods")
    settings = broker.settings(max_payload=64 * 1024)
    async with controller_bridge(cbus, settings) as controller:
        await connected(controller)
        cbus.publish(topic, secrets.token_bytes(300_000), retain=True)  # five parts
        cbus.publish(topic, b'{"kind":"PodList","items":[]}', retain=True)
        await until(lambda: not controller._outbox and not controller._inflight, "sent", 30)
    async with watcher(broker) as client:
        await client.subscribe(f"{topic}/#", qos=1)
        async with collecting(client) as seen:
            await client.subscribe("marker", qos=1)  # after the retained replay of the first
            await client.publish("marker", b"end", qos=1)
            await until(lambda: any(m.topic.value == "marker" for m in seen), "the marker")
    assert [(m.topic.value, m.payload) for m in seen if m.topic.value != "marker"] == [
        (topic, b'{"kind":"PodList","items":[]}')
    ]
