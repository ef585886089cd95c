"""The in-process bus: MQTT topic semantics (retained, wildcards, will, order, bounds)."""

from __future__ import annotations

import asyncio

import pytest

from runtime.bus import (
    Bus,
    BusError,
    BusOverflow,
    Message,
    Subscription,
    check_filter,
    node_topic,
    parse_node_topic,
    topic_matches,
)


async def drain(sub: Subscription) -> list[Message]:
    """Every message queued right now."""
    messages = []
    while sub.pending():
        messages.append(await sub.get())
    return messages


def test_node_topics_are_built_and_parsed() -> None:
    assert node_topic("gpu-1", "device") == "koordpy/v1/nodes/gpu-1/device"
    assert parse_node_topic("koordpy/v1/nodes/gpu-1/device") == ("gpu-1", "device")
    assert parse_node_topic("koordpy/v1/nodes/gpu-1/unknown") is None
    assert parse_node_topic("other/v1/nodes/gpu-1/node") is None


@pytest.mark.parametrize(
    ("node", "leaf"), [("a/b", "node"), ("+", "node"), ("", "node"), ("n", "x")]
)
def test_node_topic_rejects_bad_parts(node: str, leaf: str) -> None:
    with pytest.raises(BusError):
        node_topic(node, leaf)


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("koordpy/v1/nodes/+/+", "koordpy/v1/nodes/n1/node", True),
        ("koordpy/v1/nodes/+/+", "koordpy/v1/nodes/n1", False),
        ("koordpy/v1/nodes/+/+", "koordpy/v1/nodes/n1/node/extra", False),
        ("koordpy/v1/nodes/+/status", "koordpy/v1/nodes/n1/status", True),
        ("koordpy/v1/nodes/+/status", "koordpy/v1/nodes/n1/node", False),
        ("koordpy/v1/#", "koordpy/v1/nodes/n1/node", True),
        ("koordpy/v1/#", "koordpy/v1", True),
        ("koordpy/#", "other/v1", False),
        ("#", "koordpy/v1/nodes/n1/node", True),
        ("#", "$SYS/broker/uptime", False),
        ("+/broker/uptime", "$SYS/broker/uptime", False),
        ("$SYS/#", "$SYS/broker/uptime", True),
        ("a/+/c", "a//c", True),
        ("a/b", "a/b", True),
        ("a/b", "a/b/c", False),
    ],
)
def test_topic_matching_follows_mqtt(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected


@pytest.mark.parametrize("bad", ["", "a/#/b", "a/b#", "a+/b", "#/a"])
def test_bad_filters_are_refused(bad: str) -> None:
    with pytest.raises(BusError):
        Bus().subscribe(bad)


@pytest.mark.parametrize("bad", ["", "a/+", "a/#"])
def test_wildcards_cannot_be_published_to(bad: str) -> None:
    with pytest.raises(BusError):
        Bus().publish(bad, b"x")


async def test_retained_messages_reach_new_subscribers_first() -> None:
    bus = Bus()
    bus.publish(node_topic("n2", "node"), b"n2", retain=True)
    bus.publish(node_topic("n1", "node"), b"old", retain=True)
    bus.publish(node_topic("n1", "node"), b"n1", retain=True)
    bus.publish(node_topic("n1", "events"), b"not kept")
    with bus.subscribe("koordpy/v1/nodes/+/node") as sub:
        bus.publish(node_topic("n3", "node"), b"live")
        got = await drain(sub)
    assert [(m.topic, m.payload, m.retain) for m in got] == [
        ("koordpy/v1/nodes/n1/node", b"n1", True),
        ("koordpy/v1/nodes/n2/node", b"n2", True),
        ("koordpy/v1/nodes/n3/node", b"live", False),
    ]


async def test_an_empty_retained_payload_clears_the_topic() -> None:
    bus = Bus()
    topic = node_topic("n1", "device")
    bus.publish(topic, b"{}", retain=True)
    with bus.subscribe(topic) as existing:
        bus.publish(topic, b"", retain=True)
        assert [m.payload for m in await drain(existing)] == [b"{}", b""]
    assert list(bus.retained()) == []
    with bus.subscribe("#") as late:
        assert await drain(late) == []


async def test_a_subscriber_behind_gets_each_topics_newest_state_in_order() -> None:
    bus = Bus(queue_size=4)
    with bus.subscribe("koordpy/v1/nodes/#", coalesce=True) as sub:
        for report in range(100):  # far more than the queue holds: state is superseded
            bus.publish(node_topic("n1", "nodemetric"), b"n1-%d" % report, retain=True)
            bus.publish(node_topic("n2", "nodemetric"), b"n2-%d" % report, retain=True)
        bus.publish(node_topic("n1", "events"), b"event")
        bus.publish(node_topic("n2", "nodemetric"), b"n2-last", retain=True)
        got = [(m.topic.rsplit("/", 2)[1], m.payload) for m in await drain(sub)]
        assert got == [("n1", b"n1-99"), ("n1", b"event"), ("n2", b"n2-last")]
        assert sub.superseded == 99 + 100
        # Messages that are not retained state are never dropped that way: they overflow.
        for number in range(5):
            bus.publish(node_topic("n1", "events"), b"%d" % number)
        with pytest.raises(BusOverflow):
            await sub.get()


async def test_wildcard_subscriptions_see_every_node() -> None:
    bus = Bus()
    with (
        bus.subscribe("koordpy/v1/nodes/+/+") as every,
        bus.subscribe("koordpy/v1/nodes/n2/#") as one,
    ):
        for node in ("n1", "n2"):
            for leaf in ("node", "device", "status"):
                bus.publish(node_topic(node, leaf), leaf.encode())
        assert len(await drain(every)) == 6
        assert [m.topic.rsplit("/", 1)[1] for m in await drain(one)] == [
            "node",
            "device",
            "status",
        ]


async def test_will_is_published_on_unclean_disconnect() -> None:
    bus = Bus()
    status = node_topic("n1", "status")
    will = Message(status, b'{"state":"offline"}', retain=True)

    def crashing_agent() -> None:
        with bus.connect("agent/n1", will=will) as client:
            client.publish(status, b'{"state":"online"}', retain=True)
            raise RuntimeError("agent crashed")

    with bus.subscribe(status) as watcher:
        with pytest.raises(RuntimeError, match="crashed"):
            crashing_agent()
        got = [m.payload for m in await drain(watcher)]
    assert got == [b'{"state":"online"}', b'{"state":"offline"}']
    assert [m.payload for m in bus.retained(status)] == [b'{"state":"offline"}']


async def test_clean_close_publishes_no_will_and_keeps_retained() -> None:
    bus = Bus()
    status = node_topic("n1", "status")
    will = Message(status, b'{"state":"offline"}', retain=True)
    with bus.connect("agent/n1", will=will) as client:
        client.publish(status, b'{"state":"online"}', retain=True)
        client.publish(node_topic("n1", "node"), b"{}", retain=True)
    assert not client.connected
    assert {m.topic: m.payload for m in bus.retained()} == {
        status: b'{"state":"online"}',
        node_topic("n1", "node"): b"{}",
    }
    with pytest.raises(BusError):
        client.publish(status, b"x")


async def test_cancellation_counts_as_a_clean_close() -> None:
    bus = Bus()
    status = node_topic("n1", "status")
    will = Message(status, b"offline", retain=True)
    entered = asyncio.Event()

    async def agent() -> None:
        with bus.connect("agent/n1", will=will):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(agent())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert list(bus.retained()) == []


async def test_a_second_connection_with_the_same_id_takes_over() -> None:
    bus = Bus()
    status = node_topic("n1", "status")
    first = bus.connect("agent/n1", will=Message(status, b"offline", retain=True))
    second = bus.connect("agent/n1")
    assert not first.connected
    assert second.connected
    assert [m.payload for m in bus.retained(status)] == [b"offline"]


async def test_client_subscriptions_end_with_the_client() -> None:
    bus = Bus()
    client = bus.connect("controller/ingest")
    sub = client.subscribe("#")
    client.close()
    bus.publish("a/b", b"x")
    assert [m async for m in sub] == []


async def test_delivery_keeps_publish_order() -> None:
    bus = Bus()
    with bus.subscribe("koordpy/v1/nodes/+/+") as sub:
        publisher = bus.connect("agent/n1")
        for i in range(200):
            leaf = ("node", "device", "events")[i % 3]
            publisher.publish(node_topic("n1", leaf), str(i).encode(), retain=i % 2 == 0)
        got = [int(m.payload) for m in await drain(sub)]
    assert got == list(range(200))


async def test_a_subscriber_that_falls_behind_loses_its_subscription() -> None:
    bus = Bus(queue_size=3)
    topic = node_topic("n1", "node")
    sub = bus.subscribe(topic)
    for i in range(5):
        bus.publish(topic, str(i).encode(), retain=True)
    with pytest.raises(BusOverflow):
        await sub.get()
    bus.publish(topic, b"later", retain=True)
    assert sub.pending() == 0, "a dropped subscription receives nothing more"
    # Subscribing again resynchronises from the retained state.
    with bus.subscribe(topic) as again:
        assert [m.payload for m in await drain(again)] == [b"later"]


async def test_iteration_raises_overflow_and_ends_on_close() -> None:
    bus = Bus(queue_size=1)
    sub = bus.subscribe("a/#")
    bus.publish("a/1", b"1")
    bus.publish("a/2", b"2")
    with pytest.raises(BusOverflow):
        async for _ in sub:
            pass
    closing = bus.subscribe("b/#")
    bus.publish("b/1", b"1")
    closing.close()
    assert [m.payload async for m in closing] == [b"1"]


def test_get_nowait_reads_what_is_queued_and_never_waits() -> None:
    bus = Bus()
    sub = bus.subscribe("a/+")
    assert sub.get_nowait() is None
    bus.publish("a/1", b"one")
    bus.publish("a/2", b"two")
    assert sub.get_nowait() == Message("a/1", b"one")
    assert sub.get_nowait() == Message("a/2", b"two")
    assert sub.get_nowait() is None
    sub.close()
    with pytest.raises(BusError):
        sub.get_nowait()


async def test_get_nowait_reports_an_overflow_to_every_later_read() -> None:
    bus = Bus(queue_size=2)
    sub = bus.subscribe("a/#")
    for i in range(3):
        bus.publish("a/b", str(i).encode())
    with pytest.raises(BusOverflow):
        sub.get_nowait()
    with pytest.raises(BusOverflow):
        await sub.get()


@pytest.mark.parametrize("topic_filter", ["a/#/b", "a/b+", "", "a\0"])
def test_check_filter_rejects_invalid_filters(topic_filter: str) -> None:
    with pytest.raises(BusError):
        check_filter(topic_filter)


def test_check_filter_accepts_wildcards() -> None:
    for topic_filter in ("#", "a/+/c", "koordpy/v1/nodes/+/+", "a/#"):
        check_filter(topic_filter)
