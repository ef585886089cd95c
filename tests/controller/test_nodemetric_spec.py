"""A NodeMetric's spec is the controller's: reports bring the status, the agent gets the spec."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from agent.metrics.policy import NodeMetricSpecFollower
from apis.codec import encode_json
from apis.meta import ObjectMeta
from apis.slo import NodeMetric, NodeMetricCollectPolicy, NodeMetricSpec, NodeMetricStatus
from controller.fleet.ingest import Ingest, Result
from controller.fleet.nodefeed import NodeFeed
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WRITTEN = NodeMetricSpec(
    metric_collect_policy=NodeMetricCollectPolicy(
        aggregate_duration_seconds=60, report_interval_seconds=30
    )
)
#: What an agent that collected under its defaults says in its report.
REPORTED = NodeMetricSpec(
    metric_collect_policy=NodeMetricCollectPolicy(
        aggregate_duration_seconds=300,
        report_interval_seconds=60,
        node_memory_collect_policy="usageWithoutPageCache",
    )
)


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store() as opened:
        yield opened


def report(at: datetime) -> Message:
    metric = NodeMetric(
        metadata=ObjectMeta(name="n1"), spec=REPORTED, status=NodeMetricStatus(update_time=at)
    )
    return Message(node_topic("n1", "nodemetric"), encode_json(metric), retain=True)


def stored(store: Store) -> NodeMetric:
    metric = store.get(store.registry.for_type(NodeMetric), "n1")
    assert isinstance(metric, NodeMetric)
    return metric


async def test_a_report_never_overwrites_the_spec(store: Store) -> None:
    store.create(NodeMetric(metadata=ObjectMeta(name="n1"), spec=WRITTEN))
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(report(T0)) == Result.APPLIED
    assert stored(store).spec == WRITTEN
    assert stored(store).status.update_time == T0
    assert await ingest.handle(report(T0 + timedelta(minutes=1))) == Result.APPLIED
    assert stored(store).spec == WRITTEN


async def test_a_first_report_creates_the_nodemetric_without_a_spec(store: Store) -> None:
    assert await Ingest(Bus(), store).handle(report(T0)) == Result.APPLIED
    assert stored(store).spec == NodeMetricSpec()
    assert stored(store).status.update_time == T0


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_the_agent_follows_the_spec_the_store_holds(store: Store) -> None:
    bus = Bus()
    follower = NodeMetricSpecFollower(bus, "n1")
    feed = NodeFeed(bus, store)
    tasks = [asyncio.create_task(follower.run()), asyncio.create_task(feed.run())]
    try:
        await _settle()
        assert follower.current() is None
        store.create(NodeMetric(metadata=ObjectMeta(name="n1"), spec=WRITTEN))
        await _settle()
        assert follower.current() == WRITTEN

        # The agent's own reports change the status only: nothing new is sent down.
        with bus.subscribe(node_topic("n1", "nodemetricspec")) as sub:
            await sub.get()  # the retained one
            assert await Ingest(bus, store).handle(report(T0)) == Result.APPLIED
            await _settle()
            assert sub.pending() == 0
        assert follower.current() == WRITTEN

        store.delete(store.registry.for_type(NodeMetric), "n1")
        await _settle()
        assert follower.current() is None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
