"""The downlink: agents get their bound pods and their NodeSLO, retained, as they change."""

from __future__ import annotations

import asyncio
import json

import msgspec

from apis.core import Node, Pod, PodSpec
from apis.meta import ObjectMeta
from apis.slo import NodeSLO, NodeSLOSpec, ResourceThresholdStrategy
from controller.fleet.nodefeed import NodeFeed
from controller.store.sqlite import Store
from runtime.bus import Bus, Subscription, node_topic


def _pod(name: str, node: str) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace="default"), spec=PodSpec(node_name=node))


async def _latest(sub: Subscription) -> bytes:
    """The last message queued on ``sub`` (waiting for at least one)."""
    async with asyncio.timeout(5):
        message = await sub.get()
    while sub.pending():
        message = await sub.get()
    return message.payload


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_pods_and_nodeslo_follow_the_store() -> None:
    bus = Bus()
    async with Store() as store:
        store.create(_pod("a", "n1"))
        store.create(_pod("b", "n2"))
        store.create(
            NodeSLO(
                metadata=ObjectMeta(name="n1"),
                spec=NodeSLOSpec(
                    resource_used_threshold_with_be=ResourceThresholdStrategy(enable=True)
                ),
            )
        )
        feed = NodeFeed(bus, store)
        task = asyncio.create_task(feed.run(), name="feed")
        try:
            await _settle()
            with (
                bus.subscribe(node_topic("n1", "pods")) as n1,
                bus.subscribe(node_topic("n2", "pods")) as n2,
                bus.subscribe(node_topic("n1", "nodeslo")) as slo,
            ):
                first = json.loads(await _latest(n1))
                assert first["kind"] == "PodList"
                assert [p["metadata"]["name"] for p in first["items"]] == ["a"]
                assert json.loads(await _latest(slo))["spec"]["resourceUsedThresholdWithBE"] == {
                    "enable": True
                }
                assert [p["metadata"]["name"] for p in json.loads(await _latest(n2))["items"]] == [
                    "b"
                ]

                # Rebinding a pod updates both nodes.
                pod = store.get(store.registry.for_type(Pod), "a", "default")
                store.update(
                    msgspec.structs.replace(
                        pod, spec=msgspec.structs.replace(pod.spec, node_name="n2")
                    )
                )
                await _settle()
                assert json.loads(await _latest(n1))["items"] == []
                names = [p["metadata"]["name"] for p in json.loads(await _latest(n2))["items"]]
                assert names == ["a", "b"]

                store.delete(store.registry.for_type(NodeSLO), "n1")
                await _settle()
                assert await _latest(slo) == b""
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_late_subscriber_gets_the_retained_state() -> None:
    bus = Bus()
    async with Store() as store:
        store.create(_pod("a", "n1"))
        feed = NodeFeed(bus, store)
        feed.publish_all()
        with bus.subscribe(node_topic("n1", "pods")) as late:
            message = await late.get()
            assert message.retain
            assert [p["metadata"]["name"] for p in json.loads(message.payload)["items"]] == ["a"]


async def test_unchanged_bodies_are_not_sent_again() -> None:
    bus = Bus()
    async with Store() as store:
        store.create(_pod("a", "n1"))
        feed = NodeFeed(bus, store)
        feed.publish_all()
        with bus.subscribe(node_topic("n1", "pods")) as sub:
            await sub.get()  # retained
            feed.publish_node("n1")
            assert sub.pending() == 0


async def test_a_node_without_pods_gets_an_empty_list() -> None:
    bus = Bus()
    async with Store() as store:
        store.create(Node(metadata=ObjectMeta(name="idle")))
        NodeFeed(bus, store).publish_all()
        with bus.subscribe(node_topic("idle", "pods")) as sub:
            message = await sub.get()
            assert json.loads(message.payload)["items"] == []
