"""Reports that differ from the previous one only in their time stamp are taken without being
decoded again: what is stored is exactly what decoding them would store."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.devices import base, simulated
from agent.node import HostFacts, build_node
from apis.codec import encode_json, to_builtins
from apis.core import Node
from apis.meta import REPORTED_AT_ANNOTATION, Object, ObjectMeta
from apis.scheduling import Device
from controller.fleet.ingest import Ingest, Result
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FACTS = HostFacts(
    hostname="n1",
    cpus=16,
    memory=64 << 30,
    ephemeral_storage=100 << 30,
    kernel="6.1.0",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
)
#: Annotation keys, among them the stamps' own keys where they do not belong.
KEYS = ("team", "lastHeartbeatTime", REPORTED_AT_ANNOTATION, "note")
VALUES = st.text(alphabet='ab:"\\\u00e9 -0Z', max_size=12)
#: A stamp's text as agents and others might write it (not always a time at all).
STAMPS = st.one_of(
    st.integers(min_value=-3600, max_value=3600).map(
        lambda s: (T0 + timedelta(seconds=s, microseconds=s % 7)).isoformat()
    ),
    st.sampled_from(["", "not a time", "2026-03-01T12:00:00", 'quote"d', "back\\slash"]),
)


def node_body(stamp: str, annotations: dict[str, str]) -> bytes:
    node = build_node("n1", FACTS, heartbeat=T0, ready_since=T0)
    node = msgspec.structs.replace(
        node, metadata=msgspec.structs.replace(node.metadata, annotations=annotations)
    )
    # The heartbeat goes in as text, so that it can be anything a sender writes.
    return encode_json(node).replace(encode_json(T0)[1:-1], stamp.encode(), 1)


def device_body(stamp: str, annotations: dict[str, str]) -> bytes:
    result = simulated.simulate((simulated.PROFILES["nvidia-h100"],), "n1")
    device = base.build_device(Node(metadata=ObjectMeta(name="n1")), [result])
    meta = msgspec.structs.replace(
        device.metadata, annotations={**annotations, REPORTED_AT_ANNOTATION: stamp}
    )
    return encode_json(msgspec.structs.replace(device, metadata=meta))


def content(obj: Object | None) -> object:
    """What an agent's report decides in a stored object (not the server's metadata)."""
    if obj is None:
        return None
    body = to_builtins(obj)
    body.pop("metadata")
    return obj.metadata.labels, obj.metadata.annotations, body


async def replay(bodies: list[tuple[str, bytes]]) -> None:
    """The same messages into one long-lived ingest and into a fresh one per message."""
    async with Store() as mine, Store() as reference:
        ingest = Ingest(Bus(), mine)
        for leaf, body in bodies:
            message = Message(node_topic("n1", leaf), body, retain=True)
            got = await ingest.handle(message)
            want = await Ingest(Bus(), reference).handle(message)
            assert got == want or {got, want} == {Result.UNCHANGED, Result.APPLIED}
            for struct in (Node, Device):
                kind = mine.registry.for_type(struct)
                assert content(mine.snapshot().get(kind, "n1")) == content(
                    reference.snapshot().get(kind, "n1")
                )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["node", "device"]),
            STAMPS,
            # None: the annotations of the previous report (mostly only the stamp changes)
            st.one_of(st.none(), st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=3)),
        ),
        min_size=2,
        max_size=8,
    )
)
def test_what_is_stored_is_what_decoding_every_body_stores(
    reports: list[tuple[str, str, dict[str, str] | None]],
) -> None:
    bodies = []
    last: dict[str, dict[str, str]] = {"node": {}, "device": {}}
    sent: dict[str, list[bytes]] = {"node": [], "device": []}
    for leaf, stamp, changed in reports:
        notes = last[leaf] = last[leaf] if changed is None else changed
        body = node_body(stamp, notes) if leaf == "node" else device_body(stamp, notes)
        if body in sent[leaf][:-1]:
            continue  # an older report again: stale (tests/controller/test_ingest.py)
        sent[leaf].append(body)
        bodies.append((leaf, body))
    asyncio.run(replay(bodies))


async def test_a_new_stamp_that_is_no_time_is_refused() -> None:
    async with Store() as store:
        ingest = Ingest(Bus(), store)
        first = node_body(T0.isoformat(), {})
        assert await ingest.handle(Message(node_topic("n1", "node"), first)) == Result.APPLIED
        bad = node_body("yesterday", {})
        assert await ingest.handle(Message(node_topic("n1", "node"), bad)) == Result.INVALID
        later = node_body((T0 + timedelta(minutes=1)).isoformat(), {})
        assert await ingest.handle(Message(node_topic("n1", "node"), later)) == Result.APPLIED
        node = store.get(store.registry.for_type(Node), "n1")
        assert isinstance(node, Node)
        ready = node.condition("Ready")
        assert ready is not None
        assert ready.last_heartbeat_time == T0 + timedelta(minutes=1)
