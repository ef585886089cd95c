"""The bindings source: the controller's retained PodList topic on the in-process bus."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from agent.pods.base import PodSource
from agent.pods.bindings import BindingsPodSource
from apis.codec import encode_json
from apis.core import Pod, PodSpec
from apis.meta import ObjectMeta
from runtime.bus import Bus, node_topic


def _pod(name: str, node: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
        spec=PodSpec(node_name=node),
    )


def _pod_list(*pods: Pod) -> bytes:
    """The body the controller publishes."""
    return encode_json({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods})


def _names(source: BindingsPodSource) -> list[str]:
    return [p.metadata.name for p in source.pods]


async def _eventually(condition: Callable[[], bool]) -> None:
    """Let the source's task run until ``condition`` holds (at most 10 s)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


@pytest.fixture
async def running() -> AsyncIterator[Callable[[BindingsPodSource], None]]:
    tasks: list[asyncio.Task[None]] = []

    def start(source: BindingsPodSource) -> None:
        tasks.append(asyncio.create_task(source.run(), name=source.name))

    yield start
    for task in tasks:
        task.cancel()
    for task in tasks:
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_retained_list_arrives_first_and_is_filtered_by_node(
    running: Callable[[BindingsPodSource], None], caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus()
    topic = node_topic("n1", "pods")
    # published before the agent subscribes: delivered from the retained store
    bus.publish(
        topic, _pod_list(_pod("a", "n1"), _pod("stray", "n2"), _pod("b", "n1")), retain=True
    )
    source = BindingsPodSource(bus, "n1")
    assert isinstance(source, PodSource)
    assert source.topic == topic
    with caplog.at_level(logging.WARNING):
        running(source)
        await asyncio.wait_for(source.synced.wait(), 10)
    assert _names(source) == ["a", "b"]
    assert "1 pods bound to other nodes ignored" in caplog.text


async def test_updates_follow_and_empty_payload_clears(
    running: Callable[[BindingsPodSource], None],
) -> None:
    bus = Bus()
    topic = node_topic("n1", "pods")
    source = BindingsPodSource(bus, "n1")
    running(source)
    await asyncio.sleep(0)
    assert not source.synced.is_set(), "nothing retained yet: not synced"

    bus.publish(topic, _pod_list(_pod("a", "n1")), retain=True)
    await asyncio.wait_for(source.synced.wait(), 10)
    assert _names(source) == ["a"]

    bus.publish(topic, _pod_list(_pod("a", "n1"), _pod("b", "n1")), retain=True)
    await _eventually(lambda: _names(source) == ["a", "b"])
    generation = source.generation

    bus.publish(topic, b"", retain=True)
    await _eventually(lambda: source.pods == ())
    assert source.generation == generation + 1
    # other nodes' topics are none of its business
    bus.publish(node_topic("n2", "pods"), _pod_list(_pod("c", "n2")), retain=True)
    await asyncio.sleep(0.05)
    assert source.pods == ()


async def test_bad_body_keeps_the_previous_pods(
    running: Callable[[BindingsPodSource], None], caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus()
    topic = node_topic("n1", "pods")
    bus.publish(topic, _pod_list(_pod("a", "n1")), retain=True)
    source = BindingsPodSource(bus, "n1")
    running(source)
    await asyncio.wait_for(source.synced.wait(), 10)
    with caplog.at_level(logging.ERROR):
        bus.publish(topic, b"{not json", retain=True)
        bus.publish(topic, b'{"kind": "NodeList", "items": []}', retain=True)
        bus.publish(topic, _pod_list(_pod("a", "n1"), _pod("z", "n1")), retain=True)
        await _eventually(lambda: _names(source) == ["a", "z"])
    assert caplog.text.count("message ignored") == 2


async def test_resubscribes_after_falling_behind(
    running: Callable[[BindingsPodSource], None], caplog: pytest.LogCaptureFixture
) -> None:
    bus = Bus(queue_size=2)
    topic = node_topic("n1", "pods")
    source = BindingsPodSource(bus, "n1")
    running(source)
    await asyncio.sleep(0)
    # more messages than the queue holds, without yielding: the subscription overflows
    with caplog.at_level(logging.WARNING, logger="agent.pods.bindings"):
        for i in range(5):
            pods = (_pod(f"p{j}", "n1") for j in range(i + 1))
            bus.publish(topic, _pod_list(*pods), retain=True)
        await _eventually(lambda: len(source.pods) == 5)
    assert "fell behind; subscribing again" in caplog.text
    # the retained list replayed on the new subscription is the latest one
    assert _names(source) == [f"p{j}" for j in range(5)]
