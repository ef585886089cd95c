"""The MQTT bridge: the local bus mirrored through a real mosquitto, both ways.

Everything here runs against a real broker (``tests/fakes/broker.py``); the secure tests use
the shipped ``systemd/mosquitto`` configuration and ACL with throwaway certificates.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from prometheus_client import CollectorRegistry

from agent.config import AgentConfig
from agent.report.bus import BusPublisher, status_body
from runtime import configfile
from runtime.bus import AGENT_LEAVES, Bus, Message, node_topic
from runtime.mqtt import (
    MqttBridge,
    MqttFileError,
    MqttSettings,
    Outbox,
    Outgoing,
    agent_bridge,
    check_files,
    controller_bridge,
    read_password,
    reconnect_delay,
)
from tests.fakes.broker import Broker, running_broker
from tests.fakes.tls import make_ca

OFFLINE = status_body("offline")
CONNECT = 10.0  # generous bound for a connection to a local broker


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker") as started:
        yield started


@pytest.fixture
def persistent_broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(tmp_path / "broker", persistence=True) as started:
        yield started


@pytest.fixture
def secure_broker(tmp_path: Path) -> Iterator[Broker]:
    with running_broker(
        tmp_path / "broker", secure=True, passwords={"node-p": "s3cret"}
    ) as started:
        yield started


def retained(bus: Bus) -> dict[str, bytes]:
    return {m.topic: m.payload for m in bus.retained()}


async def until(predicate: Callable[[], bool], what: str, limit: float = 15.0) -> None:
    """Wait (generously) until ``predicate()`` holds."""
    async with asyncio.timeout(limit):
        while not predicate():  # noqa: ASYNC110 - conditions no event signals (metrics, state)
            await asyncio.sleep(0.02)
    assert predicate(), what


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def connected(*bridges: MqttBridge) -> None:
    for bridge in bridges:
        assert await bridge.wait_connected(CONNECT), f"{bridge.client_id} did not connect"


def watcher(broker: Broker, client_id: str = "watcher", **kwargs: object) -> aiomqtt.Client:
    """A plain MQTT 5 client on the plain broker (a persistent session when asked)."""
    return aiomqtt.Client(
        broker.host,
        broker.port,
        identifier=client_id,
        protocol=aiomqtt.ProtocolVersion.V5,
        **kwargs,
    )


def persistent_session() -> dict[str, object]:
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 3600
    return {"clean_start": False, "properties": properties}


@contextlib.asynccontextmanager
async def collecting(client: aiomqtt.Client) -> AsyncIterator[list[aiomqtt.Message]]:
    """Every message ``client`` receives, appended as it arrives."""
    seen: list[aiomqtt.Message] = []

    async def collect() -> None:
        async for message in client.messages:
            seen.append(message)  # noqa: PERF401 - seen as they arrive, not at the end

    task = asyncio.create_task(collect())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# --- pure parts -------------------------------------------------------------------------------


def out(topic: str, payload: bytes, retain: bool) -> Outgoing:
    return Outgoing(topic, payload, retain)


def test_outbox_keeps_the_newest_body_per_retained_topic_at_the_back() -> None:
    box = Outbox()
    box.put(out("n/node", b"1", True), limit=10)
    box.put(out("n/events", b"e1", False), limit=10)
    box.put(out("n/node", b"2", True), limit=10)
    assert box.peek_all() == [out("n/events", b"e1", False), out("n/node", b"2", True)]


def test_outbox_drops_the_oldest_events_beyond_the_limit() -> None:
    box = Outbox()
    box.put(out("n/status", b"online", True), limit=2)
    dropped = [box.put(out("n/events", f"e{i}".encode(), False), limit=2) for i in range(4)]
    assert dropped == [0, 0, 1, 1]
    assert [m.payload for m in box.peek_all()] == [b"online", b"e2", b"e3"]
    assert box.trim(0) == 2
    assert [m.payload for m in box.peek_all()] == [b"online"]


def test_outbox_pops_in_order_and_requeues_in_front_without_undoing_newer_state() -> None:
    box = Outbox()
    box.put(out("n/node", b"3", True), limit=10)
    box.put(out("n/events", b"e3", False), limit=10)
    # Unacknowledged when the connection broke: an older node body and two events.
    box.push_front(
        [out("n/events", b"e1", False), out("n/node", b"2", True), out("n/e", b"e2", False)]
    )
    popped = []
    while (message := box.pop()) is not None:
        popped.append(message.payload)
    assert popped == [b"e1", b"e2", b"3", b"e3"]
    assert len(box) == 0
    assert box.events == 0


def test_reconnect_delay_is_jittered_and_bounded() -> None:
    settings = MqttSettings(reconnect_min=1.0, reconnect_max=30.0)
    rng = random.Random(7)
    first = [reconnect_delay(0, settings, rng) for _ in range(200)]
    assert all(1.0 <= d <= 2.0 for d in first)
    assert len(set(first)) > 100  # a fleet does not come back in one wave
    late = [reconnect_delay(50, settings, rng) for _ in range(200)]
    assert all(15.0 <= d <= 30.0 for d in late)
    assert max(reconnect_delay(n, settings, rng) for n in range(100)) <= 30.0


def test_password_is_the_first_line_of_its_file(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text("s3cret\r\nignored\n")
    assert read_password(str(path)) == "s3cret"
    path.write_text("\n")
    with pytest.raises(MqttFileError, match="first line is empty"):
        read_password(str(path))
    with pytest.raises(MqttFileError, match=r"password_file .*missing.*cannot read"):
        read_password(str(tmp_path / "missing"))


def test_check_files_names_the_file_that_cannot_be_used(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "pki")
    cert, key = ca.issue("node-1")
    good = MqttSettings(ca_file=str(ca.cert), cert_file=str(cert), key_file=str(key))
    check_files(good)
    with pytest.raises(MqttFileError, match=r"cert_file '/nonexistent\.pem': cannot read") as err:
        check_files(MqttSettings(cert_file="/nonexistent.pem", key_file=str(key)))
    assert err.value.field == "cert_file"
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(MqttFileError, match="ca_file"):
        check_files(MqttSettings(ca_file=str(garbage)))
    with pytest.raises(MqttFileError, match=r"cert_file .*key_file"):
        check_files(MqttSettings(cert_file=str(cert), key_file=str(garbage)))


# --- through the broker -----------------------------------------------------------------------


@pytest.mark.network
async def test_reports_go_up_and_bindings_come_down(broker: Broker) -> None:
    agent_registry, controller_registry = CollectorRegistry(), CollectorRegistry()
    abus, cbus = Bus(), Bus()
    node, events, pods = (node_topic("node-1", leaf) for leaf in ("node", "events", "pods"))
    async with (
        agent_bridge(
            abus, broker.settings(), "node-1", will_payload=OFFLINE, registry=agent_registry
        ) as agent,
        controller_bridge(cbus, broker.settings(), registry=controller_registry) as controller,
    ):
        await connected(agent, controller)
        assert sample(agent_registry, "koordpy_mqtt_connected") == 1
        with cbus.subscribe(events) as arrivals:
            abus.publish(node, b'{"kind":"Node"}', retain=True)
            abus.publish(events, b'{"kind":"Event"}')
            assert await asyncio.wait_for(arrivals.get(), CONNECT) == Message(
                events, b'{"kind":"Event"}'
            )
        await until(lambda: retained(cbus).get(node) == b'{"kind":"Node"}', "node retained")
        assert events not in retained(cbus)  # events are not retained
        cbus.publish(pods, b'{"kind":"PodList"}', retain=True)
        await until(lambda: retained(abus).get(pods) == b'{"kind":"PodList"}', "pods down")
        await until(
            lambda: sample(agent_registry, "koordpy_mqtt_messages_sent_total", leaf="events") == 1,
            "acknowledged",
        )
        assert sample(agent_registry, "koordpy_mqtt_messages_sent_total", leaf="node") == 1
        assert sample(agent_registry, "koordpy_mqtt_messages_received_total", leaf="pods") == 1
        assert sample(controller_registry, "koordpy_mqtt_messages_received_total", leaf="node") == 1
        assert sample(controller_registry, "koordpy_mqtt_messages_sent_total", leaf="pods") == 1
        assert sample(agent_registry, "koordpy_mqtt_queued_messages") == 0
    # Leaving unregisters the metrics and says disconnected.
    assert sample(agent_registry, "koordpy_mqtt_connected") == 0


@pytest.mark.network
async def test_a_late_subscriber_gets_the_retained_state_and_a_clear_removes_it(
    broker: Broker,
) -> None:
    abus = Bus()
    device = node_topic("node-1", "device")
    async with agent_bridge(abus, broker.settings(), "node-1", will_payload=OFFLINE) as agent:
        await connected(agent)
        for leaf in ("node", "device", "nodemetric", "status"):
            abus.publish(node_topic("node-1", leaf), f"{leaf}-body".encode(), retain=True)
        await until(lambda: len(agent._outbox) == 0 and not agent._inflight, "flushed")
        cbus = Bus()
        async with controller_bridge(cbus, broker.settings()) as controller:
            await connected(controller)
            want = {
                node_topic("node-1", leaf): f"{leaf}-body".encode() for leaf in AGENT_LEAVES[:4]
            }
            await until(lambda: retained(cbus) == want, f"retained replay, got {retained(cbus)}")
            abus.publish(device, b"", retain=True)
            await until(lambda: device not in retained(cbus), "device cleared")
    async with watcher(broker, "late") as late:
        await late.subscribe("koordpy/v1/nodes/#", qos=1)
        async with collecting(late) as seen:
            await until(lambda: len(seen) >= 3, "replay")
            await asyncio.sleep(0.2)
        assert sorted(str(m.topic) for m in seen) == sorted(
            node_topic("node-1", leaf) for leaf in ("node", "nodemetric", "status")
        )
        assert all(m.retain for m in seen)


@pytest.mark.network
async def test_while_the_broker_is_down_only_newest_state_and_the_latest_events_are_kept(
    persistent_broker: Broker,
) -> None:
    broker = persistent_broker
    # A persistent session subscribed before the outage: the broker keeps every message for
    # it, in order, so what the bridge flushed can be read back afterwards.
    async with watcher(broker, **persistent_session()) as early:
        await early.subscribe("koordpy/v1/nodes/#", qos=1)
    await asyncio.to_thread(broker.stop)
    registry = CollectorRegistry()
    abus = Bus()
    settings = broker.settings(max_queued_events=3)
    node, status, events = (node_topic("node-1", leaf) for leaf in ("node", "status", "events"))
    async with agent_bridge(
        abus, settings, "node-1", will_payload=OFFLINE, registry=registry
    ) as agent:
        abus.publish(node, b"v1", retain=True)
        abus.publish(events, b"e1")
        abus.publish(node, b"v2", retain=True)
        abus.publish(status, b"online", retain=True)
        for i in range(2, 6):
            abus.publish(events, f"e{i}".encode())
        abus.publish(node, b"v3", retain=True)
        await until(lambda: sample(registry, "koordpy_mqtt_queued_messages") == 5, "queued")
        assert sample(registry, "koordpy_mqtt_messages_dropped_total", reason="queue_full") == 2
        assert not agent.connected.is_set()
        assert sample(registry, "koordpy_mqtt_connect_failures_total", reason="network") >= 1
        await asyncio.to_thread(broker.start)
        await connected(agent)
        await until(lambda: sample(registry, "koordpy_mqtt_queued_messages") == 0, "flushed")
        await until(lambda: not agent._inflight, "acknowledged")
    async with watcher(broker, **persistent_session()) as late, collecting(late) as seen:
        await until(lambda: len(seen) >= 5, "the queued messages")
        await asyncio.sleep(0.2)
    assert [(str(m.topic), m.payload) for m in seen] == [
        (status, b"online"),
        (events, b"e3"),
        (events, b"e4"),
        (events, b"e5"),
        (node, b"v3"),
    ]


@pytest.mark.network
@pytest.mark.parametrize("persistence", [False, True])
async def test_a_broker_restart_mid_stream_resumes_reports_and_the_newest_state_wins(
    tmp_path: Path, persistence: bool
) -> None:
    with running_broker(tmp_path / "broker", persistence=persistence) as broker:
        registry = CollectorRegistry()
        abus, cbus = Bus(), Bus()
        metric, status = node_topic("node-1", "nodemetric"), node_topic("node-1", "status")
        seen: list[int] = []
        async with (
            agent_bridge(
                abus, broker.settings(), "node-1", will_payload=OFFLINE, registry=registry
            ) as agent,
            controller_bridge(cbus, broker.settings()) as controller,
        ):
            await connected(agent, controller)
            abus.publish(status, b"online", retain=True)
            with cbus.subscribe(metric) as arrivals:

                async def follow() -> None:
                    async for message in arrivals:
                        seen.append(int(message.payload))  # noqa: PERF401 - as they arrive

                follower = asyncio.create_task(follow())
                last = 0
                for last in range(1, 121):
                    abus.publish(metric, str(last).encode(), retain=True)
                    if last == 40:
                        await asyncio.to_thread(broker.restart)
                    await asyncio.sleep(0.01)
                await until(lambda: bool(seen) and seen[-1] == last, f"the newest, got {seen[-5:]}")
                await until(lambda: retained(cbus).get(status) == b"online", "online again")
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follower
            assert sample(registry, "koordpy_mqtt_reconnects_total") >= 1
        assert seen == sorted(seen), "a stale report overwrote a newer one"
        assert any(value > 40 for value in seen)


@pytest.mark.network
async def test_oversized_bodies_are_dropped_and_counted_both_ways(broker: Broker) -> None:
    registry = CollectorRegistry()
    abus, cbus = Bus(), Bus()
    small = broker.settings(max_payload=2048)
    node, events = node_topic("node-1", "node"), node_topic("node-1", "events")
    pods, nodeslo = node_topic("node-1", "pods"), node_topic("node-1", "nodeslo")
    async with (
        agent_bridge(abus, small, "node-1", will_payload=OFFLINE, registry=registry) as agent,
        controller_bridge(cbus, broker.settings()) as controller,
    ):
        await connected(agent, controller)
        with cbus.subscribe("koordpy/v1/nodes/node-1/+") as arrivals:
            abus.publish(node, b"x" * 4096, retain=True)
            abus.publish(events, b"after")
            assert (await asyncio.wait_for(arrivals.get(), CONNECT)).payload == b"after"
        assert node not in retained(cbus)
        cbus.publish(pods, b"y" * 4096, retain=True)
        cbus.publish(nodeslo, b"small", retain=True)
        await until(lambda: nodeslo in retained(abus), "nodeslo down")
        assert pods not in retained(abus)
        assert sample(registry, "koordpy_mqtt_messages_dropped_total", reason="oversized") == 2


@pytest.mark.network
async def test_overlapping_filters_never_loop(broker: Broker) -> None:
    bus = Bus()
    topic = node_topic("node-1", "events")
    bridge = MqttBridge(
        bus, broker.settings(), client_id="both-ways", username="", uplink=[topic], downlink=[topic]
    )
    async with watcher(broker, "outside") as outside, bridge:
        await connected(bridge)
        await outside.subscribe(topic, qos=1)
        with bus.subscribe(topic) as local:
            async with collecting(outside) as seen:
                await outside.publish(topic, b"from-the-broker", qos=1)
                bus.publish(topic, b"from-the-bus")
                await until(lambda: len(seen) >= 2, "both")
                await asyncio.sleep(0.3)
            # The broker's message came into the bus once and did not go back up; the bus's
            # went up once and did not come back down.
            assert sorted(m.payload for m in seen) == [b"from-the-broker", b"from-the-bus"]
            payloads = []
            while (message := local.get_nowait()) is not None:
                payloads.append(message.payload)
            assert sorted(payloads) == [b"from-the-broker", b"from-the-bus"]


@pytest.mark.network
async def test_leaving_by_an_exception_lets_the_broker_publish_the_will(broker: Broker) -> None:
    cbus = Bus()
    status = node_topic("node-1", "status")
    async with controller_bridge(cbus, broker.settings()) as controller:
        await connected(controller)
        abus = Bus()

        async def crash() -> None:
            async with agent_bridge(
                abus, broker.settings(), "node-1", will_payload=OFFLINE
            ) as agent:
                await connected(agent)
                abus.publish(status, b'{"state":"online"}', retain=True)
                await until(lambda: status in retained(cbus), "online")
                raise RuntimeError("agent crashed")

        with pytest.raises(RuntimeError, match="agent crashed"):
            await crash()
        await until(lambda: retained(cbus).get(status) == OFFLINE, "the will")


@pytest.mark.network
async def test_a_clean_exit_sends_the_final_offline_and_no_will(broker: Broker) -> None:
    cbus = Bus()
    events = node_topic("node-1", "events")
    async with controller_bridge(cbus, broker.settings()) as controller, watcher(broker) as other:
        await connected(controller)
        with cbus.subscribe("koordpy/v1/nodes/node-1/+") as arrivals:
            abus = Bus()
            async with agent_bridge(
                abus, broker.settings(), "node-1", will_payload=OFFLINE
            ) as agent:
                await connected(agent)
                async with BusPublisher(abus, "node-1"):
                    pass
            # What follows the agent's exit on the broker: a marker from someone else.
            await other.publish(events, b"marker", qos=1)
            bodies = []
            while (message := await asyncio.wait_for(arrivals.get(), CONNECT)).payload != b"marker":
                bodies.append(message.payload)
        # Only the agent's own statuses (the "online" may have been superseded before it went
        # out), the last its goodbye: "offline" with a time; no will came after it.
        assert bodies
        assert all(b'"state"' in body for body in bodies)
        assert b'"offline"' in bodies[-1]
        assert b'"since":null' not in bodies[-1]


# --- TLS, passwords and the shipped ACL -------------------------------------------------------


@pytest.mark.network
async def test_tls_with_client_certificates_and_the_acl(secure_broker: Broker) -> None:
    broker = secure_broker
    nbus = Bus()
    registry = CollectorRegistry()
    own = {leaf: node_topic("node-a", leaf) for leaf in ("node", "events", "pods")}
    foreign_node, foreign_pods = node_topic("node-b", "node"), node_topic("node-b", "pods")
    # node-a's certificate, publishing where node-a may, and where it may not: under node-b,
    # and node-a's pods. (One client per identity: the broker makes the user name the client
    # ID, so a second node-a would take this one's session.)
    node = MqttBridge(
        nbus,
        broker.settings("node-a"),
        client_id="node-a",
        username="node-a",
        uplink=[own["node"], foreign_node, own["pods"], own["events"]],
        downlink=[foreign_pods, own["pods"]],
        registry=registry,
    )
    async with broker_client(broker, "controller") as controller, node:
        await connected(node)
        await controller.subscribe("koordpy/v1/nodes/#", qos=1)
        async with collecting(controller) as seen:
            nbus.publish(own["node"], b"node-a's node", retain=True)
            nbus.publish(foreign_node, b"forged", retain=True)
            nbus.publish(own["pods"], b"forged pods", retain=True)
            nbus.publish(own["events"], b"marker")
            await until(lambda: any(m.payload == b"marker" for m in seen), "the marker")
            await until(
                lambda: (
                    sample(registry, "koordpy_mqtt_messages_dropped_total", reason="not_authorised")
                    == 2
                ),
                "both refusals counted",
            )
            # The controller may write pods; node-a reads its own only.
            await controller.publish(foreign_pods, b"node-b's pods", qos=1, retain=True)
            await controller.publish(own["pods"], b"node-a's pods", qos=1, retain=True)
            await until(lambda: retained(nbus).get(own["pods"]) == b"node-a's pods", "own pods")
            await asyncio.sleep(0.3)
        assert [m.payload for m in seen if m.topic.value == own["node"]] == [b"node-a's node"]
        assert [m.payload for m in seen if m.payload in (b"forged", b"forged pods")] == []
        # The pods that came down were not sent back up (the filters overlap).
        assert sample(registry, "koordpy_mqtt_messages_dropped_total", reason="not_authorised") == 2
        assert foreign_pods not in retained(nbus)


@contextlib.asynccontextmanager
async def broker_client(broker: Broker, user: str) -> AsyncIterator[aiomqtt.Client]:
    """A plain client with ``user``'s certificate on the secure broker."""
    settings = broker.settings(user)
    context = ssl.create_default_context(cafile=settings.ca_file)
    context.load_cert_chain(settings.cert_file, settings.key_file)
    async with aiomqtt.Client(
        broker.host,
        broker.port,
        identifier=f"spy-{user}",
        protocol=aiomqtt.ProtocolVersion.V5,
        tls_context=context,
    ) as client:
        yield client


@pytest.mark.network
async def test_password_file_is_read_at_each_connect(secure_broker: Broker, tmp_path: Path) -> None:
    broker = secure_broker
    password = tmp_path / "password"
    password.write_text("wrong\n")
    registry = CollectorRegistry()
    cbus, pbus = Bus(), Bus()
    node = node_topic("node-p", "node")
    settings = broker.password_settings("node-p", password)
    async with (
        controller_bridge(cbus, broker.settings("controller")) as controller,
        agent_bridge(pbus, settings, "node-p", will_payload=OFFLINE, registry=registry) as agent,
    ):
        await connected(controller)
        await until(
            lambda: (
                sample(registry, "koordpy_mqtt_connect_failures_total", reason="not_authorised")
                >= 2
            ),
            "refused, and retried",
        )
        assert not agent.connected.is_set()
        pbus.publish(node, b"queued while refused", retain=True)
        password.write_text("s3cret\n")
        await connected(agent)
        await until(lambda: retained(cbus).get(node) == b"queued while refused", "delivered")


def test_the_broker_readme_configs_are_real_agent_configs(repo_root: Path) -> None:
    text = (repo_root / "systemd" / "mosquitto" / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        settings = configfile.parse_config(block, AgentConfig).report.mqtt
        assert settings.uses_tls
        assert settings.port in (8883, 8884)


@pytest.mark.network
@pytest.mark.slow
async def test_a_controller_receives_a_whole_fleet_s_retained_state_on_connect(
    broker: Broker,
) -> None:
    # 2,000 retained messages: twice what mosquitto queues for a client by default.
    nodes, leaves = 500, ("node", "device", "nodemetric", "status")
    fleet_bus = Bus(queue_size=nodes * len(leaves))
    fleet = MqttBridge(
        fleet_bus,
        broker.settings(),
        client_id="fleet",
        username="",
        uplink=["koordpy/v1/nodes/+/+"],
        downlink=[],
    )
    async with fleet:
        await connected(fleet)
        for i in range(nodes):
            for leaf in leaves:
                fleet_bus.publish(node_topic(f"node-{i}", leaf), b"x" * 300, retain=True)
        await until(lambda: len(fleet._outbox) == 0 and not fleet._inflight, "published", 120)
    registry = CollectorRegistry()
    cbus = Bus(queue_size=nodes * len(leaves))
    async with controller_bridge(cbus, broker.settings(), registry=registry) as controller:
        await connected(controller)
        await until(lambda: len(retained(cbus)) == nodes * len(leaves), "every node's state", 120)
        received = sum(
            sample(registry, "koordpy_mqtt_messages_received_total", leaf=leaf) for leaf in leaves
        )
        assert received == nodes * len(leaves)


# --- the lean receiving socket -----------------------------------------------------------------


class _Chunks:
    """A non-blocking socket that returns the chunks given, then "try again"."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    def recv(self, size: int) -> bytes:
        if not self.chunks:
            raise BlockingIOError
        return self.chunks.pop(0)

    def fileno(self) -> int:
        return 42


def test_the_lean_socket_delivers_publishes_acks_them_at_once_and_hands_the_rest_to_paho() -> None:
    from runtime import mqttwire
    from runtime.mqtt import _LeanSocket

    qos1 = [
        mqttwire.encode_publish(
            mqttwire.Publish(node_topic(f"n{i}", "node"), b"{}", qos=1, packet_id=i + 1)
        )
        for i in range(3)
    ]
    qos0 = mqttwire.encode_publish(mqttwire.Publish(node_topic("n9", "events"), b"[]"))
    pingresp = b"\xd0\x00"
    stream = qos1[0] + pingresp + qos1[1] + qos0 + qos1[2]
    delivered: list[list[mqttwire.Publish]] = []
    acks: list[bytes] = []
    sock = _LeanSocket(_Chunks(stream[:7], stream[7:]), delivered.append, acks.append)
    with pytest.raises(BlockingIOError):  # the first chunk holds no whole packet
        sock.recv(1)
    assert sock.recv(1) == b"\xd0"  # paho reads the PINGRESP in pieces
    assert sock.pending() == 1
    assert sock.recv(1) == b"\x00"
    assert sock.pending() == 0
    assert [[m.topic for m in batch] for batch in delivered] == [
        [
            node_topic("n0", "node"),
            node_topic("n1", "node"),
            node_topic("n9", "events"),
            node_topic("n2", "node"),
        ]
    ]
    assert acks == [mqttwire.puback(1) + mqttwire.puback(2) + mqttwire.puback(3)]
    with pytest.raises(BlockingIOError):
        sock.recv(1)
    assert sock.fileno() == 42  # the rest is the socket's


def test_the_lean_socket_passes_on_the_end_of_the_connection() -> None:
    from runtime.mqtt import _LeanSocket

    sock = _LeanSocket(_Chunks(b""), lambda _: None, lambda _: None)
    assert sock.recv(1) == b""
