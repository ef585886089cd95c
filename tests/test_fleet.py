"""A fleet end to end: agents -> mosquitto -> controller, each a real process.

One broker per module: the shipped mosquitto configuration (mutual TLS, the node ACL), with
persistence so that a restart can replay older retained messages. One controller
(``koordpy controller run``, ``[ingest] transport = "mqtt"``, the ``controller`` certificate)
and agents (``koordpy agent run``, each with its node's certificate, a simulated H100 board,
pods from the controller's bindings) beside it. The store is read through the controller's API.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from prometheus_client.parser import text_string_to_metric_families

from apis.codec import encode_json
from apis.core import Node
from apis.kinds import Kind, default_registry
from apis.meta import REPORTED_AT_ANNOTATION, Object, ObjectMeta
from apis.scheduling import Device
from apis.slo import NodeMetric
from controller.api.client import Client, Unreachable
from controller.errors import NotFound
from runtime.bus import node_topic
from tests.fakes.broker import Broker, free_port, running_broker
from tests.koordpy.daemons import koordpy_command

pytestmark = pytest.mark.slow

T = TypeVar("T")
REGISTRY = default_registry()
NODES: Kind = REGISTRY.for_type(Node)
DEVICES: Kind = REGISTRY.for_type(Device)
NODEMETRICS: Kind = REGISTRY.for_type(NodeMetric)
#: The controller's largest accepted report in this module (small, to test the limit).
MAX_PAYLOAD = 64 * 1024
#: Fast reconnects and short intervals, so that the module runs in seconds.
FAST_MQTT = "reconnect_min = 0.05\nreconnect_max = 0.5\nkeepalive = 5\n"


def _tls(broker: Broker, user: str) -> str:
    assert broker.ca is not None
    cert, key = broker.certificate(user)
    return f'ca_file = "{broker.ca.cert}"\ncert_file = "{cert}"\nkey_file = "{key}"\n'


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll ``probe`` until it returns something other than None/False."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got is not None and got is not False:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@dataclass
class Fleet:
    root: Path
    broker: Broker
    api: str
    metrics_url: str
    controller: subprocess.Popen[bytes]
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[BinaryIO] = field(default_factory=list)

    def log(self, name: str) -> BinaryIO:
        """A log file for a process (read them when a test fails)."""
        stream = (self.root / f"{name}.log").open("wb")
        self.logs.append(stream)
        return stream

    def start_agent(
        self, node: str, *, user: str = "", metrics: str = "off"
    ) -> subprocess.Popen[bytes]:
        """``koordpy agent run`` for ``node``, authenticated as ``user`` (default: itself)."""
        config = self.root / f"agent-{node}.toml"
        config.write_text(
            '[agent]\nlog_level = "warning"\n'
            f'[metrics]\naddress = "{metrics}"\ncollect_interval = 0.2\nreport_interval = 1\n'
            '[report]\ntransport = "mqtt"\ninterval = 0.5\nheartbeat = 1\ndevice_interval = 1\n'
            f'[report.mqtt]\nhost = "{self.broker.host}"\nport = {self.broker.port}\n'
            + FAST_MQTT
            + _tls(self.broker, user or node)
            + '[devices]\nsimulate = ["nvidia-h100"]\n[pods]\nsource = "bindings"\n'
        )
        process = subprocess.Popen(
            koordpy_command("agent", "run", "--config", str(config), "--node-name", node),
            stdout=subprocess.DEVNULL,
            stderr=self.log(f"agent-{node}"),
            env={**os.environ, "NOTIFY_SOCKET": ""},
        )
        self.agents.append(process)
        return process

    def client(self) -> Client:
        return Client(self.api, timeout=10)

    def get(self, kind: Kind, name: str) -> Object | None:
        with self.client() as client:
            try:
                return client.get(kind, name)
            except NotFound:
                return None

    def node(self, name: str) -> Node | None:
        found = self.get(NODES, name)
        assert found is None or isinstance(found, Node)
        return found

    def counts(self) -> dict[tuple[str, str], float]:
        """The controller's ``koordpy_ingest_messages_total`` by (leaf, result)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        found: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            if family.name == "koordpy_ingest_messages":
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        found[(sample.labels["leaf"], sample.labels["result"])] = sample.value
        return found

    def metric(self, name: str) -> float:
        """The controller's sample ``name`` (unlabelled)."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return sample.value
        raise AssertionError(f"no {name} in the controller's metrics")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    with running_broker(root / "broker", secure=True, persistence=True) as broker:
        metrics_port = free_port()
        api = f"unix://{root / 'api.sock'}"
        config = root / "controller.toml"
        config.write_text(
            '[controller]\nlog_level = "warning"\n'
            f'[metrics]\naddress = "127.0.0.1:{metrics_port}"\n'
            f'[ingest]\ntransport = "mqtt"\nmax_payload = {MAX_PAYLOAD}\n'
            f'[mqtt]\nhost = "{broker.host}"\nport = {broker.port}\n'
            + FAST_MQTT
            + _tls(broker, "controller")
        )
        controller_log = (root / "controller.log").open("wb")
        controller = subprocess.Popen(
            koordpy_command(
                "controller",
                "run",
                "--config",
                str(config),
                "--state-dir",
                str(root / "state"),
                "--api",
                api,
            ),
            stdout=subprocess.DEVNULL,
            stderr=controller_log,
            env={**os.environ, "NOTIFY_SOCKET": ""},
        )
        fleet = Fleet(root, broker, api, f"http://127.0.0.1:{metrics_port}/metrics", controller)
        fleet.logs.append(controller_log)
        try:
            wait_for("the controller's API", lambda: _reachable(fleet))
            yield fleet
        finally:
            for process in [*fleet.agents, controller]:
                _stop(process)
            for stream in fleet.logs:
                stream.close()


def _reachable(fleet: Fleet) -> bool:
    try:
        with fleet.client() as client:
            client.list(NODES)
    except Unreachable:
        return False
    return True


@pytest.fixture(scope="module")
def node_a(fleet: Fleet) -> str:
    """A running agent, node-a, whose three reports are in the store."""
    fleet.start_agent("node-a")
    for kind in (NODES, DEVICES, NODEMETRICS):
        wait_for(f"node-a's {kind.kind}", lambda kind=kind: fleet.get(kind, "node-a"))
    return "node-a"


def _heartbeat(node: Node | None) -> datetime | None:
    ready = node.condition("Ready") if node is not None else None
    return ready.last_heartbeat_time if ready is not None else None


def test_an_agents_node_device_and_nodemetric_land_in_the_store(fleet: Fleet, node_a: str) -> None:
    node = fleet.node(node_a)
    assert node is not None
    assert node.is_ready
    assert node.status.capacity["nvidia.com/gpu"] == 8
    device = fleet.get(DEVICES, node_a)
    assert isinstance(device, Device)
    assert len(device.spec.devices) == 8
    assert device.metadata.owner_references[0].uid == node.metadata.uid
    metric = fleet.get(NODEMETRICS, node_a)
    assert isinstance(metric, NodeMetric)
    assert metric.status.update_time is not None
    assert metric.status.node_metric is not None
    assert metric.status.node_metric.node_usage.resources["memory"] > 0


def test_an_agent_killed_with_sigkill_turns_its_node_not_ready(fleet: Fleet) -> None:
    agent = fleet.start_agent("node-c")
    wait_for("node-c Ready", lambda: (n := fleet.node("node-c")) is not None and n.is_ready)
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=10)
    lost = wait_for(
        "node-c NotReady", lambda: (n := fleet.node("node-c")) is not None and not n.is_ready and n
    )
    ready = lost.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "NodeStatusUnknown",
        "agent went offline",
    )
    assert [(t.key, t.effect) for t in lost.spec.taints] == [
        ("node.kubernetes.io/unreachable", "NoSchedule")
    ]


def test_an_agent_authenticated_as_node_a_cannot_report_for_node_b(
    fleet: Fleet, node_a: str
) -> None:
    port = free_port()
    impostor = fleet.start_agent("node-b", user=node_a, metrics=f"127.0.0.1:{port}")

    def refused() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return False
        refusals = ("koordpy_mqtt_connect_failures", "koordpy_mqtt_messages_dropped")
        return any(
            sample.labels.get("reason") == "not_authorised" and sample.value > 0
            for family in text_string_to_metric_families(text)
            if family.name in refusals
            for sample in family.samples
        )

    before = fleet.node(node_a)
    wait_for("the broker to refuse the impostor", refused)
    time.sleep(1.0)  # what it might have sent has had time to arrive
    assert impostor.poll() is None  # refused, not crashed: it keeps trying
    # To the broker it is node-a (its client ID is its user name): it shares node-a's one
    # session, and node-a is back once it is gone.
    _stop(impostor)
    fleet.agents.remove(impostor)
    for kind in (NODES, DEVICES, NODEMETRICS):
        assert fleet.get(kind, "node-b") is None
    after = wait_for(
        "node-a Ready", lambda: (n := fleet.node(node_a)) is not None and n.is_ready and n
    )
    assert before is not None
    assert after.metadata.uid == before.metadata.uid


def test_node_credentials_cannot_push_the_controller_or_a_node_off_the_broker(
    fleet: Fleet, node_a: str
) -> None:
    broker = fleet.broker
    assert broker.ca is not None
    cert, key = broker.certificate("node-d")
    # The client IDs the controller and node-a's agent are connected with, as the broker saw
    # them (user names controller and node-a).
    log = broker.log()
    ids = {
        user: client_id for client_id, user in re.findall(r" as (\S+) \(p5, [^)]*u'([^']+)'\)", log)
    }
    connects = fleet.metric("koordpy_mqtt_connects_total")
    for victim in (ids["controller"], ids[node_a]):
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id=victim, protocol=paho.MQTTv5)
        client.tls_set(ca_certs=str(broker.ca.cert), certfile=str(cert), keyfile=str(key))
        client.connect(broker.host, broker.port)
        client.loop_start()
        try:
            wait_for("node-d's connection", client.is_connected)
            # A heartbeat of node-a after node-d came: node-a's agent and the controller are
            # both still on the broker.
            beat = _heartbeat(fleet.node(node_a))
            wait_for(
                "a newer heartbeat of node-a",
                lambda beat=beat: (
                    (b := _heartbeat(fleet.node(node_a))) is not None
                    and beat is not None
                    and b > beat
                ),
            )
        finally:
            client.disconnect()
            client.loop_stop()
    assert fleet.metric("koordpy_mqtt_connects_total") == connects, "the controller was pushed off"
    node = fleet.node(node_a)
    assert node is not None
    assert node.is_ready
    assert "already connected, closing old connection" not in broker.log()[len(log) :]


def test_garbage_oversized_and_wrong_kind_payloads_are_dropped_and_counted(
    fleet: Fleet,
) -> None:
    before = fleet.counts()
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="test-node-d", protocol=paho.MQTTv5)
    assert fleet.broker.ca is not None
    cert, key = fleet.broker.certificate("node-d")
    client.tls_set(ca_certs=str(fleet.broker.ca.cert), certfile=str(cert), keyfile=str(key))
    client.connect(fleet.broker.host, fleet.broker.port)
    client.loop_start()
    topic = node_topic("node-d", "node")
    wrong_kind = encode_json(Device(metadata=ObjectMeta(name="node-d")))
    foreign = encode_json(Node(metadata=ObjectMeta(name="node-e")))
    node = Node(metadata=ObjectMeta(name="node-d", labels={"pad": "x"}))
    oversized = encode_json(node)[:-1] + b',"padding":"' + b"x" * MAX_PAYLOAD + b'"}'

    def grew(result: str, by: float) -> bool:
        now = fleet.counts()
        return now.get(("node", result), 0) - before.get(("node", result), 0) >= by

    # One at a time: a body still unread when the next one on its topic arrives is superseded
    # by it (counted as such, never read), so each waits to be counted before the next.
    try:
        for payload, result, count in (
            (b"not json {", "invalid", 1),
            (wrong_kind, "invalid", 2),
            (foreign, "foreign", 1),
            (oversized, "oversized", 1),
        ):
            client.publish(topic, payload, qos=1).wait_for_publish(timeout=10)
            wait_for(f"{count} {result} bodies counted", lambda r=result, c=count: grew(r, c))
    finally:
        client.disconnect()
        client.loop_stop()
    assert fleet.node("node-d") is None
    assert fleet.node("node-e") is None


def _stamps(fleet: Fleet, node: str, since: int) -> dict[str, list[datetime]]:
    """Every report time of ``node``'s objects stored after resourceVersion ``since``."""
    with fleet.client() as client:
        end = client.list(NODES)[1]
        seen: dict[str, list[datetime]] = {"node": [], "device": [], "nodemetric": []}
        if end <= since:
            return seen
        stream = client.watch(resource_version=since)
        try:
            for event in stream:
                obj: Any = event.object
                if obj.metadata.name == node:
                    stamp: datetime | None = None
                    if isinstance(obj, Node):
                        stamp, leaf = _heartbeat(obj), "node"
                    elif isinstance(obj, Device):
                        text = obj.metadata.annotations.get(REPORTED_AT_ANNOTATION)
                        stamp, leaf = (datetime.fromisoformat(text) if text else None), "device"
                    elif isinstance(obj, NodeMetric):
                        stamp, leaf = obj.status.update_time, "nodemetric"
                    if stamp is not None:
                        seen[leaf].append(stamp)
                if int(obj.metadata.resource_version) >= end:
                    break
        finally:
            stream.close()
    return seen


def test_a_broker_restart_resumes_reports_and_stale_replays_never_win(
    fleet: Fleet, node_a: str
) -> None:
    broker = fleet.broker
    with fleet.client() as client:
        since = client.list(NODES)[1]
    agent = fleet.agents[0]

    def newer_than(beat: datetime | None) -> datetime | None:
        now = _heartbeat(fleet.node(node_a))
        return now if now is not None and (beat is None or now > beat) else None

    # A clean restart: the broker saves its retained messages and comes back with them.
    broker.stop()
    saved = _heartbeat(fleet.node(node_a))
    broker.start()
    wait_for("reports after the restart", lambda: newer_than(saved))
    # Reports move on past what the broker saved; then it dies without saving and comes back
    # with the older state. The agent is paused meanwhile so that the replay surely reaches
    # the controller before the agent's newer reports do.
    wait_for("a report newer than the broker's save", lambda: newer_than(saved))
    stale_before = fleet.counts().get(("node", "stale"), 0)
    agent.send_signal(signal.SIGSTOP)
    try:
        paused = _heartbeat(fleet.node(node_a))
        broker.kill()
        broker.start()
        wait_for(
            "the replayed older Node dropped as stale",
            lambda: fleet.counts().get(("node", "stale"), 0) > stale_before,
        )
        assert _heartbeat(fleet.node(node_a)) == paused
    finally:
        agent.send_signal(signal.SIGCONT)
    wait_for("reports after the second restart", lambda: newer_than(paused))
    node = fleet.node(node_a)
    assert node is not None
    assert node.is_ready
    for leaf, stamps in _stamps(fleet, node_a, since).items():
        assert stamps, f"no {leaf} stored during the restarts"
        assert stamps == sorted(stamps), f"a {leaf} went back in time: {stamps}"
