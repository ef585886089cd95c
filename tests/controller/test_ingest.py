"""Ingest: agent reports on the bus become objects in the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
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
from apis.meta import REPORTED_AT_ANNOTATION, Object, ObjectMeta, ObjectReference
from apis.scheduling import Device
from apis.slo import NodeMetric, NodeMetricStatus
from controller.fleet.ingest import AGENT_LABELS_ANNOTATION, Ingest, Result
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

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


async def test_an_older_report_delivered_again_is_stale(store: Store) -> None:
    """A body taken before, with another taken since (a broker's retained copy replayed
    after a newer live report), is dropped whatever its stamps say."""
    ingest = Ingest(Bus(), store)
    earlier, later = T0, T0 + timedelta(minutes=1)
    old_labels = {"kubernetes.io/hostname": "n1", "node.koordpy.io/old": "yes"}
    metric = NodeMetric(metadata=ObjectMeta(name="n1"), status=NodeMetricStatus(update_time=later))
    older = msgspec.structs.replace(metric, status=NodeMetricStatus(update_time=earlier))
    bodies = {
        "node": (node_body("n1", earlier, labels=old_labels), node_body("n1", later)),
        "device": (device_body("n1", earlier), device_body("n1", later)),
        "nodemetric": (older, metric),
    }
    for leaf, (old, new) in bodies.items():
        for body in (old, new):
            assert await ingest.handle(message("n1", leaf, encode_json(body))) == Result.APPLIED
        assert await ingest.handle(message("n1", leaf, encode_json(old))) == Result.STALE
        assert await ingest.handle(message("n1", leaf, encode_json(new))) == Result.UNCHANGED
    assert "node.koordpy.io/old" not in stored_node(store).metadata.labels
    assert heartbeat(store) == later


async def test_a_clock_jumping_forward_then_back_keeps_the_node_updated(store: Store) -> None:
    """Reports are taken in the order they arrive: a node whose clock jumped a day ahead and
    back is not wedged (the sender's clock never decides what is stale)."""
    ingest = Ingest(Bus(), store, clock=lambda: T0 + timedelta(days=2))
    beats = [T0, T0 + timedelta(days=1), T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)]
    for beat in beats:
        body = encode_json(node_body("n1", beat))
        assert await ingest.handle(message("n1", "node", body)) == Result.APPLIED
        assert heartbeat(store) == beat
    for when in (T0 + timedelta(days=1), T0 + timedelta(minutes=3)):
        metric = NodeMetric(
            metadata=ObjectMeta(name="n1"), status=NodeMetricStatus(update_time=when)
        )
        body = encode_json(metric)
        assert await ingest.handle(message("n1", "nodemetric", body)) == Result.APPLIED
        assert await ingest.handle(
            message("n1", "device", encode_json(device_body("n1", when)))
        ) == (Result.APPLIED)
    stored = store.get(kind_of(store, NodeMetric), "n1")
    assert isinstance(stored, NodeMetric)
    assert stored.status.update_time == T0 + timedelta(minutes=3)


async def test_a_report_stamped_in_the_future_is_clamped_to_the_receive_time(
    store: Store,
) -> None:
    """One heartbeat a year ahead does not make every later report stale."""
    received = T0 + timedelta(minutes=10)
    ingest = Ingest(Bus(), store, clock=lambda: received)
    future = T0 + timedelta(days=365)
    assert await ingest.handle(message("n1", "node", encode_json(node_body("n1", future)))) == (
        Result.APPLIED
    )
    assert heartbeat(store) == received
    device = encode_json(device_body("n1", future))
    assert await ingest.handle(message("n1", "device", device)) == Result.APPLIED
    stored = store.get(kind_of(store, Device), "n1")
    assert stored.metadata.annotations[REPORTED_AT_ANNOTATION] == received.isoformat()
    metric = NodeMetric(metadata=ObjectMeta(name="n1"), status=NodeMetricStatus(update_time=future))
    assert await ingest.handle(message("n1", "nodemetric", encode_json(metric))) == Result.APPLIED
    stored_metric = store.get(kind_of(store, NodeMetric), "n1")
    assert isinstance(stored_metric, NodeMetric)
    assert stored_metric.status.update_time == received
    # The node's next, truthful, report is taken (and lost later, it comes back with one).
    now = T0 + timedelta(minutes=9)
    assert await ingest.handle(message("n1", "node", encode_json(node_body("n1", now)))) == (
        Result.APPLIED
    )
    assert heartbeat(store) == now


async def test_labels_and_spec_set_by_others_are_kept(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    node_kind = kind_of(store, Node)
    gpu = {"node.koordinator.sh/gpu-vendor": "nvidia"}
    first = node_body("n1", T0, labels={"kubernetes.io/hostname": "n1", **gpu})
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


def heartbeat(store: Store) -> datetime | None:
    ready = stored_node(store).condition("Ready")
    return ready.last_heartbeat_time if ready is not None else None


def unreachable(node: Node) -> bool:
    return any(t.key == "node.kubernetes.io/unreachable" for t in node.spec.taints)


def stored_node(store: Store, name: str = "n1") -> Node:
    node = store.get(kind_of(store, Node), name)
    assert isinstance(node, Node)
    return node


async def test_offline_status_makes_the_node_not_ready_and_unschedulable(store: Store) -> None:
    ingest = Ingest(Bus(), store, clock=lambda: T0 + timedelta(minutes=2))
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    assert await ingest.handle(message("n1", "status", status_body("online", T0))) == (
        Result.IGNORED
    )
    assert await ingest.handle(message("n1", "status", status_body("offline"))) == Result.APPLIED
    node = stored_node(store)
    ready = node.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "NodeStatusUnknown",
        "agent went offline",
    )
    assert ready.last_heartbeat_time == T0
    assert ready.last_transition_time == T0 + timedelta(minutes=2)
    assert [(t.key, t.effect) for t in node.spec.taints] == [
        ("node.kubernetes.io/unreachable", "NoSchedule")
    ]
    again = await ingest.handle(message("n1", "status", status_body("offline")))
    assert again == Result.UNCHANGED
    # The same report replayed (a broker restart, a reconnect) does not bring it back ...
    replay = await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    assert replay in (Result.STALE, Result.UNCHANGED)
    assert not stored_node(store).is_ready
    # ... a newer one does.
    fresh = node_body("n1", T0 + timedelta(minutes=3))
    assert await ingest.handle(message("n1", "node", encode_json(fresh))) == Result.APPLIED
    back = stored_node(store)
    assert back.is_ready
    assert not unreachable(back)


async def test_a_fresh_report_removes_only_the_unreachable_taint(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    node = stored_node(store)
    gpu_only = Taint(key="nvidia.com/gpu", effect="NoSchedule", value="true")
    store.update(
        msgspec.structs.replace(node, spec=msgspec.structs.replace(node.spec, taints=(gpu_only,)))
    )
    await ingest.handle(message("n1", "status", status_body("offline")))
    assert [t.key for t in stored_node(store).spec.taints] == [
        "nvidia.com/gpu",
        "node.kubernetes.io/unreachable",
    ]
    later = node_body("n1", T0 + timedelta(minutes=1))
    await ingest.handle(message("n1", "node", encode_json(later)))
    assert stored_node(store).spec.taints == (gpu_only,)


async def test_online_after_offline_restores_the_last_node_on_the_bus(store: Store) -> None:
    """A dropped connection: the will marks the node, the reconnect's online brings it back."""
    bus = Bus()
    ingest = Ingest(bus, store)
    body = encode_json(node_body("n1", T0))
    bus.publish(node_topic("n1", "node"), body, retain=True)
    await ingest.handle(message("n1", "node", body))
    await ingest.handle(message("n1", "status", status_body("online", T0)))
    await ingest.handle(message("n1", "status", status_body("offline")))
    assert not stored_node(store).is_ready
    # The reconnecting agent republishes the same Node (skipped) and its online.
    assert await ingest.handle(message("n1", "node", body)) == Result.UNCHANGED
    assert not stored_node(store).is_ready
    assert await ingest.handle(message("n1", "status", status_body("online", T0))) == (
        Result.APPLIED
    )
    back = stored_node(store)
    assert back.is_ready
    assert not unreachable(back)


async def test_online_after_a_stale_replay_lets_the_current_node_restore(store: Store) -> None:
    """A broker restored from an old save: older bodies and an offline, then the agent."""
    bus = Bus()
    ingest = Ingest(bus, store)
    current = encode_json(node_body("n1", T0 + timedelta(minutes=5)))
    old = encode_json(node_body("n1", T0))
    await ingest.handle(message("n1", "node", old))
    await ingest.handle(message("n1", "node", current))
    await ingest.handle(message("n1", "status", status_body("online", T0)))
    bus.publish(node_topic("n1", "node"), old, retain=True)  # what the replay left on the bus
    replay = [message("n1", "node", old), message("n1", "status", status_body("offline"))]
    assert await ingest.handle_many(replay) == [Result.STALE, Result.APPLIED]
    # The agent reconnects: its online first (the bus holds only the old Node), then its Node.
    assert await ingest.handle(message("n1", "status", status_body("online", T0))) == (
        Result.IGNORED
    )
    assert not stored_node(store).is_ready
    assert await ingest.handle(message("n1", "node", current)) == Result.APPLIED
    back = stored_node(store)
    assert back.is_ready
    assert not unreachable(back)


async def test_an_offline_delivered_again_after_the_agent_came_back_is_stale(
    store: Store,
) -> None:
    ingest = Ingest(Bus(), store)
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    shutdown = status_body("offline", T0 + timedelta(minutes=1))
    assert await ingest.handle(message("n1", "status", shutdown)) == Result.APPLIED
    # The agent starts again (its clock behind its previous run's): online, then its Node.
    assert await ingest.handle(message("n1", "status", status_body("online", T0))) == (
        Result.IGNORED
    )
    again = node_body("n1", T0 - timedelta(minutes=5))
    assert await ingest.handle(message("n1", "node", encode_json(again))) == Result.APPLIED
    assert stored_node(store).is_ready
    assert await ingest.handle(message("n1", "status", shutdown)) == Result.STALE
    assert stored_node(store).is_ready


async def test_a_replayed_retained_state_never_rolls_the_store_back(store: Store) -> None:
    """A broker restored from an old save replays older retained bodies: all stale."""
    ingest = Ingest(Bus(), store)
    early, late = T0, T0 + timedelta(minutes=5)
    metric = NodeMetric(metadata=ObjectMeta(name="n1"), status=NodeMetricStatus(update_time=late))
    old_metric = msgspec.structs.replace(metric, status=NodeMetricStatus(update_time=early))
    # What the broker saved, taken then: a Node, Device and NodeMetric, and a clean shutdown.
    saved = [
        message("n1", "device", encode_json(device_body("n1", early))),
        message("n1", "node", encode_json(node_body("n1", early, labels={"old": "yes"}))),
        message("n1", "nodemetric", encode_json(old_metric)),
        message("n1", "status", status_body("offline", early)),
    ]
    assert await ingest.handle_many(saved) == [Result.APPLIED] * 4
    assert await ingest.handle(message("n1", "status", status_body("online", late))) == (
        Result.IGNORED
    )
    newest = [
        message("n1", "node", encode_json(node_body("n1", late))),
        message("n1", "device", encode_json(device_body("n1", late))),
        message("n1", "nodemetric", encode_json(metric)),
    ]
    assert await ingest.handle_many(newest) == [Result.APPLIED] * 3
    version = store.resource_version
    assert await ingest.handle_many(saved) == [Result.STALE] * 4
    assert store.resource_version == version
    # The agent's current bodies, republished after the restart, change nothing either.
    assert await ingest.handle_many(newest) == [Result.UNCHANGED] * 3
    assert store.resource_version == version
    assert stored_node(store).is_ready


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


def count(registry: CollectorRegistry, leaf: str, result: str) -> float:
    value = registry.get_sample_value(
        "koordpy_ingest_messages_total", {"leaf": leaf, "result": result}
    )
    return value or 0.0


async def test_bodies_for_another_node_and_foreign_topics_are_counted(store: Store) -> None:
    registry = CollectorRegistry()
    ingest = Ingest(Bus(), store, registry=registry)
    await ingest.handle(message("n1", "node", encode_json(node_body("n1", T0))))
    stored = stored_node(store)
    impostor = encode_json(node_body("n2", T0 + timedelta(minutes=1), labels={"evil": "yes"}))
    assert await ingest.handle(message("n1", "node", impostor)) == Result.FOREIGN
    device = encode_json(device_body("n2", T0))
    assert await ingest.handle(message("n1", "device", device)) == Result.FOREIGN
    assert await ingest.handle(Message("koordpy/v1/nodes/n1/bogus", b"{}")) == Result.FOREIGN
    assert await ingest.handle(Message("koordpy/v1/other", b"{}")) == Result.FOREIGN
    assert [n.name for n in store.list(kind_of(store, Node))[0]] == ["n1"]
    assert stored_node(store) == stored
    assert store.list(kind_of(store, Device))[0] == []
    assert count(registry, "node", "foreign") == 1
    assert count(registry, "device", "foreign") == 1
    assert count(registry, "unknown", "foreign") == 2


async def test_oversized_payloads_are_dropped_undecoded(store: Store) -> None:
    registry = CollectorRegistry()
    ingest = Ingest(Bus(), store, registry=registry, max_payload=4096)
    body = encode_json(node_body("n1", T0))
    padded = body[:-1] + b',"padding":"' + b"x" * 4096 + b'"}'
    assert await ingest.handle(message("n1", "node", padded)) == Result.OVERSIZED
    assert store.list(kind_of(store, Node))[0] == []
    assert await ingest.handle(message("n1", "node", body)) == Result.APPLIED
    assert count(registry, "node", "oversized") == 1
    assert count(registry, "node", "applied") == 1


async def test_other_topics_are_ignored(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(message("n1", "pods", b"{}")) == Result.IGNORED
    assert await ingest.handle(message("n1", "node", b"")) == Result.IGNORED


async def test_a_repeated_body_is_not_decoded_again(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    body = encode_json(node_body("n1", T0))
    assert await ingest.handle(message("n1", "node", body)) == Result.APPLIED
    node = stored_node(store)
    assert await ingest.handle(message("n1", "node", body)) == Result.UNCHANGED
    assert stored_node(store) is node
    later = encode_json(node_body("n1", T0 + timedelta(minutes=1)))
    assert await ingest.handle(message("n1", "node", later)) == Result.APPLIED


async def test_a_batch_commits_what_is_valid_and_reports_each_message(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    bad_label = node_body("n2", T0, labels={"not a label key!": "x"})
    batch = [
        message("n1", "node", encode_json(node_body("n1", T0))),
        message("n2", "node", encode_json(bad_label)),
        message("n3", "node", b"{"),
        message("n4", "node", encode_json(node_body("n4", T0))),
        message("n1", "node", encode_json(node_body("n1", T0 + timedelta(minutes=1)))),
        message("n1", "node", encode_json(node_body("n1", T0))),
    ]
    results = await ingest.handle_many(batch)
    assert results == [
        Result.APPLIED,
        Result.INVALID,
        Result.INVALID,
        Result.APPLIED,
        Result.APPLIED,
        Result.STALE,
    ]
    assert [n.name for n in store.list(kind_of(store, Node))[0]] == ["n1", "n4"]


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


async def _newest_beats(store: Store, newest: datetime) -> None:
    async with asyncio.timeout(10):
        with store.watch(kind_of(store, Node)) as changes:
            beats: dict[str, datetime | None] = {}
            for node in store.list(kind_of(store, Node))[0]:
                assert isinstance(node, Node)
                ready = node.condition("Ready")
                beats[node.name] = ready.last_heartbeat_time if ready else None
            async for change in changes:
                if beats == {"n1": newest, "n2": newest}:
                    break
                node = change.object
                assert isinstance(node, Node)
                ready = node.condition("Ready")
                beats[node.name] = ready.last_heartbeat_time if ready else None
                if beats == {"n1": newest, "n2": newest}:
                    break


@pytest.mark.parametrize("events", [0, 20])
async def test_behind_a_burst_it_takes_each_nodes_newest_state(store: Store, events: int) -> None:
    """A burst of state reports larger than the queue is coalesced to each node's newest;
    a burst of events (which are never dropped) overflows it, and the ingest resubscribes
    to the retained state."""
    bus = Bus(queue_size=8)
    registry = CollectorRegistry()
    ingest = Ingest(bus, store, registry=registry)
    task = asyncio.create_task(ingest.run(), name="ingest")
    try:
        await asyncio.sleep(0)  # subscribed
        # Published without yielding: the ingest reads none of it until the burst is over.
        for _ in range(events):
            bus.publish(node_topic("n1", "events"), b"{}")
        for minute in range(20):
            for name in ("n1", "n2"):
                body = encode_json(node_body(name, T0 + timedelta(minutes=minute)))
                bus.publish(node_topic(name, "node"), body, retain=True)
        await _newest_beats(store, T0 + timedelta(minutes=19))
        async with asyncio.timeout(10):  # the ingest counts once the commit is answered
            while not registry.get_sample_value(  # noqa: ASYNC110 - a metric, no event
                "koordpy_ingest_messages_total", {"leaf": "node", "result": "applied"}
            ):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    resyncs = registry.get_sample_value("koordpy_ingest_resyncs_total")
    assert resyncs == (1 if events else 0)
    applied = registry.get_sample_value(
        "koordpy_ingest_messages_total", {"leaf": "node", "result": "applied"}
    )
    assert applied == 2, "only each node's newest report was taken"
    superseded = registry.get_sample_value(
        "koordpy_ingest_messages_total", {"leaf": "node", "result": "superseded"}
    )
    assert superseded == (None if events else 2 * 19), "each report not taken is counted"


def _arrivals(bus: Bus, count: int) -> tuple[list[float], Callable[[float], Awaitable[None]]]:
    """A stand-in for ``asyncio.sleep``: each wait sees one more report arrive on ``bus``,
    ``count`` times, then none; the waits asked for."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) <= count:
            bus.publish(node_topic(f"n{len(waits)}", "status"), status_body("online"), retain=True)

    return waits, sleep


@pytest.mark.parametrize("arrivals", [0, 1, 5])
async def test_a_batch_waits_again_while_reports_keep_coming(
    store: Store, monkeypatch: pytest.MonkeyPatch, arrivals: int
) -> None:
    bus = Bus()
    ingest = Ingest(bus, store, linger=0.02, max_linger=60.0)
    with bus.subscribe("koordpy/v1/nodes/+/+") as subscription:
        bus.publish(node_topic("n0", "status"), status_body("online"), retain=True)
        batch = [await subscription.get()]
        waits, sleep = _arrivals(bus, arrivals)
        monkeypatch.setattr(asyncio, "sleep", sleep)
        assert await ingest._gather(subscription, batch) is None
    assert [m.topic for m in batch] == [node_topic(f"n{i}", "status") for i in range(arrivals + 1)]
    assert waits == [0.02] * (arrivals + 1)  # the last wait saw nothing new


async def test_a_batch_stops_waiting_at_max_linger(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = Bus()
    ingest = Ingest(bus, store, linger=0.02, max_linger=0.0)
    with bus.subscribe("koordpy/v1/nodes/+/+") as subscription:
        bus.publish(node_topic("n0", "status"), status_body("online"), retain=True)
        batch = [await subscription.get()]
        waits, sleep = _arrivals(bus, 100)
        monkeypatch.setattr(asyncio, "sleep", sleep)
        assert await ingest._gather(subscription, batch) is None
    assert len(batch) == 2  # reports were still coming, but the window was over
    assert len(waits) == 1
