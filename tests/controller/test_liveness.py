"""Node liveness: silent or offline nodes become NotReady and unschedulable, and come back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from agent.node import HostFacts, build_node
from agent.report.bus import status_body
from apis.codec import encode_json
from apis.core import Node, Taint
from apis.meta import ObjectMeta
from controller.fleet.ingest import Ingest, Result
from controller.fleet.liveness import Liveness
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

GIB = 1 << 30
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FACTS = HostFacts(
    hostname="box",
    cpus=8,
    memory=32 * GIB,
    ephemeral_storage=100 * GIB,
    kernel="6.1.0",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
)
UNREACHABLE = ("node.kubernetes.io/unreachable", "NoSchedule")


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store() as opened:
        yield opened


def report(name: str, heartbeat: datetime) -> Message:
    node = build_node(name, FACTS, heartbeat=heartbeat, ready_since=T0)
    return Message(node_topic(name, "node"), encode_json(node), retain=True)


def get_node(store: Store, name: str) -> Node:
    node = store.get(store.registry.for_type(Node), name)
    assert isinstance(node, Node)
    return node


def taints(node: Node) -> list[tuple[str, str]]:
    return [(t.key, t.effect) for t in node.spec.taints]


def wiring(store: Store, clock: Clock) -> tuple[Ingest, Liveness]:
    liveness = Liveness(store, lost_after=180, clock=clock, now=lambda: T0 + timedelta(hours=1))
    return Ingest(Bus(), store, liveness=liveness), liveness


async def test_a_node_silent_for_three_heartbeats_is_lost_until_it_reports(store: Store) -> None:
    clock = Clock()
    ingest, liveness = wiring(store, clock)
    await ingest.handle(report("n1", T0))
    await ingest.handle(report("n2", T0))
    clock.now += 120
    await ingest.handle(report("n2", T0 + timedelta(minutes=2)))
    assert await liveness.check() == []
    clock.now += 61  # n1: 181 s silent, n2: 61 s
    assert await liveness.check() == ["n1"]
    lost = get_node(store, "n1")
    ready = lost.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "NodeStatusUnknown",
        "no report for 180 s",
    )
    assert ready.last_heartbeat_time == T0
    assert taints(lost) == [UNREACHABLE]
    assert get_node(store, "n2").is_ready
    version = store.resource_version
    clock.now += 60
    assert await liveness.check() == []
    assert store.resource_version == version  # marked once, not at every check
    # A fresh report brings it back, Ready and schedulable.
    assert await ingest.handle(report("n1", T0 + timedelta(minutes=5))) == Result.APPLIED
    back = get_node(store, "n1")
    assert back.is_ready
    assert taints(back) == []
    # And it is watched again from then on.
    clock.now += 181
    assert await liveness.check() == ["n1", "n2"]


async def test_a_replayed_report_does_not_revive_a_lost_node(store: Store) -> None:
    clock = Clock()
    ingest, liveness = wiring(store, clock)
    await ingest.handle(report("n1", T0))
    clock.now += 200
    assert await liveness.check() == ["n1"]
    # A new ingest (say after a bridge reconnect) sees the same retained Node again.
    again = Ingest(Bus(), store, liveness=liveness)
    assert await again.handle(report("n1", T0)) == Result.STALE
    assert not get_node(store, "n1").is_ready
    assert await again.handle(Message(node_topic("n1", "status"), status_body("online", T0))) in (
        Result.IGNORED,
        Result.UNCHANGED,
    )
    assert not get_node(store, "n1").is_ready


async def test_taints_set_by_others_are_kept_through_loss_and_return(store: Store) -> None:
    clock = Clock()
    ingest, liveness = wiring(store, clock)
    await ingest.handle(report("n1", T0))
    node = get_node(store, "n1")
    dedicated = Taint(key="dedicated", value="ml", effect="NoSchedule")
    store.update(
        msgspec.structs.replace(node, spec=msgspec.structs.replace(node.spec, taints=(dedicated,)))
    )
    clock.now += 180
    await liveness.check()
    assert taints(get_node(store, "n1")) == [("dedicated", "NoSchedule"), UNREACHABLE]
    await ingest.handle(report("n1", T0 + timedelta(minutes=4)))
    assert get_node(store, "n1").spec.taints == (dedicated,)


async def test_an_offline_node_is_not_marked_again_for_silence(store: Store) -> None:
    clock = Clock()
    ingest, liveness = wiring(store, clock)
    await ingest.handle(report("n1", T0))
    offline = Message(node_topic("n1", "status"), status_body("offline"), retain=True)
    assert await ingest.handle(offline) == Result.APPLIED
    clock.now += 500
    assert await liveness.check() == []
    ready = get_node(store, "n1").condition("Ready")
    assert ready is not None
    assert ready.message == "agent went offline"


async def test_nodes_no_agent_reports_are_never_marked(store: Store) -> None:
    clock = Clock()
    liveness = Liveness(store, lost_after=180, clock=clock)
    store.create(Node(metadata=ObjectMeta(name="hand-made")))
    liveness.seed()
    clock.now += 10_000
    assert await liveness.check() == []
    assert taints(get_node(store, "hand-made")) == []


async def test_after_a_restart_the_clock_starts_at_the_restart(store: Store) -> None:
    clock = Clock()
    ingest, _ = wiring(store, clock)
    await ingest.handle(report("n1", T0))
    # The controller restarts long after n1's last heartbeat: n1 gets a full period.
    clock.now += 3600
    restarted = Liveness(store, lost_after=180, clock=clock)
    restarted.seed()
    clock.now += 179
    assert await restarted.check() == []
    clock.now += 2
    assert await restarted.check() == ["n1"]


async def test_a_deleted_node_is_forgotten(store: Store) -> None:
    clock = Clock()
    ingest, liveness = wiring(store, clock)
    await ingest.handle(report("n1", T0))
    store.delete(store.registry.for_type(Node), "n1")
    clock.now += 200
    assert await liveness.check() == []
    assert "n1" not in liveness.tracked()


async def test_run_checks_on_its_own_timer(store: Store) -> None:
    liveness = Liveness(store, lost_after=0.2, check_interval=0.05)
    ingest = Ingest(Bus(), store, liveness=liveness)
    await ingest.handle(report("n1", T0))
    task = asyncio.create_task(liveness.run(), name="liveness")
    try:
        async with asyncio.timeout(10):
            with store.watch(store.registry.for_type(Node)) as changes:
                async for change in changes:
                    node = change.object
                    if isinstance(node, Node) and not node.is_ready:
                        break
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert UNREACHABLE in taints(get_node(store, "n1"))
