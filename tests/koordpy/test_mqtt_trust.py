"""Client IDs tied to identity on the shipped broker (issue 18, fleet trust).

MQTT lets a new connection with a client ID already in use disconnect the older one. Had any
client been free to pick its ID, a node's credentials could take the controller's (or another
node's) and keep it off the broker, every node NotReady. The shipped configuration makes the
client ID the user name (``use_username_as_clientid`` on both listeners): a node that asks for
someone else's ID gets its own.
"""

from __future__ import annotations

import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiomqtt
import pytest
from prometheus_client import CollectorRegistry

from runtime.bus import Bus, node_topic
from runtime.mqtt import agent_bridge, controller_bridge
from tests.fakes.broker import Broker, running_broker
from tests.koordpy.test_mqtt import OFFLINE, connected, sample, until

pytestmark = pytest.mark.network


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(
        tmp_path / "broker", secure=True, passwords={"node-p": "s3cret"}
    ) as started:
        yield started


@contextlib.asynccontextmanager
async def intruder(broker: Broker, how: str, client_id: str) -> AsyncIterator[None]:
    """A connection asking for ``client_id``: with node-a's certificate (``how="cert"``) or as
    the password user node-p (``"password"``); returns once the broker accepted it."""
    assert broker.ca is not None
    assert broker.password_port is not None
    context = ssl.create_default_context(cafile=str(broker.ca.cert))
    if how == "cert":
        cert, key = broker.certificate("node-a")
        context.load_cert_chain(cert, key)
        port, login = broker.port, {}
    else:
        port, login = broker.password_port, {"username": "node-p", "password": "s3cret"}
    client = aiomqtt.Client(
        broker.host,
        port,
        identifier=client_id,
        protocol=aiomqtt.ProtocolVersion.V5,
        tls_context=context,
        **login,
    )
    await client.__aenter__()
    try:
        yield
    finally:
        with contextlib.suppress(aiomqtt.MqttError):  # already gone, when it was taken over
            await client.__aexit__(None, None, None)


@pytest.mark.parametrize("how", ["cert", "password"])
async def test_node_credentials_cannot_take_over_the_controllers_or_another_nodes_session(
    secure_broker: Broker, how: str
) -> None:
    broker = secure_broker
    cbus, abus = Bus(), Bus()
    creg, areg = CollectorRegistry(), CollectorRegistry()
    status = node_topic("node-b", "status")
    events = node_topic("node-b", "events")
    statuses: list[str] = []
    seen: set[bytes] = set()
    markers = cbus.subscribe(events)
    async with (
        controller_bridge(cbus, broker.settings("controller"), registry=creg) as controller,
        agent_bridge(
            abus, broker.settings("node-b"), "node-b", will_payload=OFFLINE, registry=areg
        ) as agent,
    ):
        await connected(controller, agent)
        abus.publish(status, json.dumps({"state": "online"}).encode(), retain=True)
        watch = cbus.subscribe(status)
        for n, victim in enumerate((controller.client_id, agent.client_id)):
            async with intruder(broker, how, victim):
                # The intruder is in: a takeover has happened by now. A marker from node-b
                # through both bridges comes after it.
                marker = str(n).encode()
                abus.publish(events, marker)

                def through_or_dropped(marker: bytes = marker) -> bool:
                    while (message := markers.get_nowait()) is not None:
                        seen.add(message.payload)
                    bridges = ((controller, creg), (agent, areg))
                    return marker in seen or any(
                        not bridge.connected.is_set()
                        or sample(registry, "koordpy_mqtt_connects_total") > 1
                        for bridge, registry in bridges
                    )

                await until(through_or_dropped, "the marker, or a bridge disconnected")
            while (message := watch.get_nowait()) is not None:
                statuses.append(json.loads(message.payload)["state"])
        assert controller.connected.is_set()
        assert agent.connected.is_set()
        assert sample(creg, "koordpy_mqtt_connects_total") == 1, "the controller was disconnected"
        assert sample(areg, "koordpy_mqtt_connects_total") == 1, "node-b was disconnected"
        assert "offline" not in statuses  # node-b's will never fired: it stayed Ready
    assert "already connected, closing old connection" not in broker.log()
