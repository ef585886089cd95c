"""Ingest: agent reports on the bus become objects in the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from agent import daemon
from agent.config import AgentConfig
from agent.devices import base, simulated
from agent.node import HostFacts, build_node
from agent.report.bus import status_body
from apis.codec import encode_json
from apis.core import Event, Node, Taint
from apis.kinds import Kind
from apis.meta import Object, ObjectMeta, ObjectReference
from apis.scheduling import Device
from apis.slo import NodeMetric, NodeMetricStatus
from controller.ingest import AGENT_LABELS_ANNOTATION, Ingest, Result
from controller.store import Store
from koordpy.bus import REPORTED_AT_ANNOTATION, Bus, Message, node_topic

GIB = 1 << 30
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FACTS = HostFacts(
    hostname="box",
    cpus=32,
    memory=128 * GIB,
    ephemeral_storage=200 * GIB,
    kernel="6.1.0",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
)


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store() as opened:
        yield opened


def kind_of(store: Store, struct: type[Object]) -> Kind:
    return store.registry.for_type(struct)


def node_body(name: str, heartbeat: datetime, *, labels: dict[str, str] | None = None) -> Node:
    node = build_node(name, FACTS, heartbeat=heartbeat, ready_since=T0)
    if labels is not None:
        node = msgspec.structs.replace(
            node, metadata=msgspec.structs.replace(node.metadata, labels=labels)
        )
    return node


def device_body(name: str, reported_at: datetime) -> Device:
    result = simulated.simulate((simulated.PROFILES["nvidia-h100"],), name)
    device = base.build_device(Node(metadata=ObjectMeta(name=name)), [result])
    annotations = {REPORTED_AT_ANNOTATION: reported_at.isoformat()}
    return msgspec.structs.replace(
        device, metadata=msgspec.structs.replace(device.metadata, annotations=annotations)
    )


def message(node: str, leaf: str, body: bytes, *, retain: bool = True) -> Message:
    return Message(node_topic(node, leaf), body, retain=retain)


async def test_node_and_device_are_stored_with_the_owner_uid(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0)))) == (
        Result.APPLIED
    )
    body = encode_json(device_body("n1", T0))
    assert await ingest.handle(message("n1", "device", body)) == Result.APPLIED
    node = store.get(kind_of(store, Node), "n1")
    device = store.get(kind_of(store, Device), "n1")
    assert isinstance(node, Node)
    assert isinstance(device, Device)
    assert node.metadata.uid
    assert node.status.capacity["cpu"] == 32_000
    assert device.metadata.owner_references[0].uid == node.metadata.uid
    assert await ingest.handle(message("n1", "device", body)) == Result.UNCHANGED


async def test_a_device_before_its_node_gets_the_owner_uid_later(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    await ingest.handle(message("n1", "device", encode_json(device_body("n1", T0))))
    device = store.get(kind_of(store, Device), "n1")
    assert device.metadata.owner_references[0].uid == ""
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    node = store.get(kind_of(store, Node), "n1")
    device = store.get(kind_of(store, Device), "n1")
    assert device.metadata.owner_references[0].uid == node.metadata.uid


async def test_stale_reports_are_dropped(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    later, earlier = T0 + timedelta(minutes=1), T0
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", later))))
    stale = node_body("n1", earlier, labels={"kubernetes.io/hostname": "n1", "old": "yes"})
    assert await ingest.handle(message("n1", "node", encode_json(stale))) == Result.STALE
    assert "old" not in store.get(kind_of(store, Node), "n1").metadata.labels
    await ingest.handle(message("n1", "device", encode_json(device_body("n1", later))))
    old_device = device_body("n1", earlier)
    assert await ingest.handle(message("n1", "device", encode_json(old_device))) == Result.STALE
    metric = NodeMetric(metadata=ObjectMeta(name="n1"), status=NodeMetricStatus(update_time=later))
    assert await ingest.handle(message("n1", "nodemetric", encode_json(metric))) == (Result.APPLIED)
    older = msgspec.structs.replace(metric, status=NodeMetricStatus(update_time=earlier))
    assert await ingest.handle(message("n1", "nodemetric", encode_json(older))) == Result.STALE


async def test_labels_and_spec_set_by_others_are_kept(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    node_kind = kind_of(store, Node)
    first = node_body("n1", T0, labels={"kubernetes.io/hostname": "n1", "gpu": "yes"})
    await ingest.handle(message("n1", "node", encode_json(first)))
    stored = store.get(node_kind, "n1")
    assert isinstance(stored, Node)
    cordoned = msgspec.structs.replace(
        stored,
        metadata=msgspec.structs.replace(
            stored.metadata, labels={**stored.metadata.labels, "team": "ml"}
        ),
        spec=msgspec.structs.replace(
            stored.spec,
            unschedulable=True,
            taints=(Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule"),),
        ),
    )
    store.update(cordoned)
    second = node_body("n1", T0 + timedelta(seconds=60), labels={"kubernetes.io/hostname": "n1"})
    assert await ingest.handle(message("n1", "node", encode_json(second))) == Result.APPLIED
    node = store.get(node_kind, "n1")
    assert isinstance(node, Node)
    assert node.metadata.labels == {"kubernetes.io/hostname": "n1", "team": "ml"}
    assert node.metadata.annotations[AGENT_LABELS_ANNOTATION] == "kubernetes.io/hostname"
    assert node.spec.unschedulable
    assert node.metadata.uid == stored.metadata.uid


async def test_offline_status_marks_the_node_unknown(store: Store) -> None:
    ingest = Ingest(Bus(), store, clock=lambda: T0 + timedelta(minutes=2))
    node_kind = kind_of(store, Node)
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    assert await ingest.handle(message("n1", "status", status_body("online", T0))) == (
        Result.IGNORED
    )
    assert await ingest.handle(message("n1", "status", status_body("offline"))) == Result.APPLIED
    node = store.get(node_kind, "n1")
    assert isinstance(node, Node)
    ready = node.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "Unknown",
        "NodeStatusUnknown",
        "agent went offline",
    )
    assert ready.last_heartbeat_time == T0
    assert ready.last_transition_time == T0 + timedelta(minutes=2)
    again = await ingest.handle(message("n1", "status", status_body("offline")))
    assert again == Result.UNCHANGED
    # The agent comes back: a newer heartbeat makes the node Ready again.
    fresh = node_body("n1", T0 + timedelta(minutes=3))
    await ingest.handle(message("n1", "node", encode_json(fresh)))
    back = store.get(node_kind, "n1")
    assert isinstance(back, Node)
    assert back.is_ready


async def test_events_are_created_with_generated_names(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    event = Event(
        involved_object=ObjectReference(kind="Node", name="n1"),
        reason="DeviceUnhealthy",
        message="GPU 3 fell off the bus",
        type="Warning",
    )
    for _ in range(2):
        body = encode_json(event)
        assert await ingest.handle(message("n1", "events", body, retain=False)) == Result.APPLIED
    events, _ = store.list(kind_of(store, Event), namespace="default")
    assert len(events) == 2
    for stored in events:
        assert isinstance(stored, Event)
        assert stored.metadata.name.startswith("n1.")
        assert stored.source.host == "n1"


@pytest.mark.parametrize(
    ("leaf", "payload"),
    [
        ("node", b"not json"),
        ("node", b'{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},"bogus":1}'),
        ("node", encode_json(Device(metadata=ObjectMeta(name="n1")))),
        ("device", b'{"apiVersion":"scheduling.koordinator.sh/v1alpha1","kind":"Device"'),
        ("status", b'{"state":"sleepy"}'),
        ("events", b"[]"),
    ],
    ids=["garbage", "unknown-field", "wrong-kind", "truncated", "bad-status", "not-an-event"],
)
async def test_bad_payloads_are_dropped_and_logged(
    store: Store, leaf: str, payload: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(message("n1", leaf, payload)) == Result.INVALID
    assert f"koordpy/v1/nodes/n1/{leaf}" in caplog.text
    assert store.list(kind_of(store, Node))[0] == []


async def test_a_body_for_another_node_is_refused(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    body = encode_json(node_body("n2", T0))
    assert await ingest.handle(message("n1", "node", body)) == Result.INVALID
    assert store.list(kind_of(store, Node))[0] == []


async def test_other_topics_are_ignored(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(message("n1", "pods", b"{}")) == Result.IGNORED
    assert await ingest.handle(message("n1", "node", b"")) == Result.IGNORED
    assert await ingest.handle(Message("koordpy/v1/other", b"{}")) == Result.IGNORED


async def test_agents_on_the_bus_reach_the_store(store: Store) -> None:
    """End to end: two simulated agents and the ingest on one bus, then an agent goes away."""
    bus = Bus()
    registry = CollectorRegistry()
    ingest = Ingest(bus, store, registry=registry)
    ingest_task = asyncio.create_task(ingest.run(), name="ingest")
    agent_stop = {"sim-a": asyncio.Event(), "sim-b": asyncio.Event()}
    agents = {
        name: asyncio.create_task(
            daemon.run(
                AgentConfig(),
                bus=bus,
                stop=agent_stop[name],
                node=name,
                probes=[simulated.SimulatedProbe((simulated.PROFILES["ascend-910b3"],), name)],
                facts=lambda: FACTS,
                detect_cgroups=False,
            )
        )
        for name in agent_stop
    }
    device_kind, node_kind = kind_of(store, Device), kind_of(store, Node)
    try:
        async with asyncio.timeout(10):
            watch = store.watch(device_kind)
            seen: set[str] = set()
            async for change in watch:
                seen.add(change.object.metadata.name)
                if seen == set(agents):
                    break
            watch.close()
        agent_stop["sim-b"].set()
        async with asyncio.timeout(10):
            await agents["sim-b"]
            watch = store.watch(node_kind)
            async for change in watch:
                node = change.object
                if isinstance(node, Node) and node.name == "sim-b" and not node.is_ready:
                    break
            watch.close()
    finally:
        agent_stop["sim-a"].set()
        await asyncio.gather(*agents.values())
        ingest_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ingest_task
    nodes = {n.name: n for n in store.list(node_kind)[0] if isinstance(n, Node)}
    assert nodes["sim-a"].status.capacity["huawei.com/Ascend910"] == 8
    devices = store.list(device_kind)[0]
    assert {d.name for d in devices} == {"sim-a", "sim-b"}
    applied = registry.get_sample_value(
        "koordpy_ingest_messages_total", {"leaf": "device", "result": "applied"}
    )
    assert applied == 2
