"""The control-loop runner under the real clock: runs at start, on changes, when asked."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import pytest

from apis.core import Node
from apis.meta import ObjectMeta
from controller.loops import ControlLoop, LoopContext, LoopRunner, build_loops
from controller.store.sqlite import Store


@dataclass
class Counting:
    name: str = "counting"
    wait: float | None = None
    seen_versions: list[int] = field(default_factory=list)
    ran: asyncio.Event = field(default_factory=asyncio.Event)

    def reconcile(self, ctx: LoopContext) -> float | None:
        self.seen_versions.append(ctx.store.snapshot().resource_version)
        self.ran.set()
        return self.wait


async def _next_run(loop: Counting) -> None:
    loop.ran.clear()
    async with asyncio.timeout(10):
        await loop.ran.wait()


async def test_runs_at_start_and_after_each_change() -> None:
    loop = Counting()
    async with Store() as store:
        runner = LoopRunner(store, [loop], idle_interval=3600)
        task = asyncio.create_task(runner.run(), name="runner")
        try:
            async with asyncio.timeout(10):
                await loop.ran.wait()
            assert loop.seen_versions == [0]
            waiting = asyncio.create_task(_next_run(loop), name="next-run")
            await asyncio.sleep(0)
            store.create(Node(metadata=ObjectMeta(name="n1")))
            await waiting
            assert loop.seen_versions[-1] == store.resource_version
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_burst_of_changes_is_one_pass() -> None:
    loop = Counting()
    async with Store() as store:
        runner = LoopRunner(store, [loop], idle_interval=3600)
        task = asyncio.create_task(runner.run(), name="runner")
        try:
            async with asyncio.timeout(10):
                await loop.ran.wait()
            waiting = asyncio.create_task(_next_run(loop), name="next-run")
            await asyncio.sleep(0)
            store.apply_many([Node(metadata=ObjectMeta(name=f"n{i}")) for i in range(50)])
            await waiting
            await asyncio.sleep(0.05)
            assert len(loop.seen_versions) == 2
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_runs_again_when_the_loop_asks() -> None:
    loop = Counting(wait=0.01)
    async with Store() as store:
        runner = LoopRunner(store, [loop], idle_interval=3600)
        task = asyncio.create_task(runner.run(), name="runner")
        try:
            async with asyncio.timeout(10):
                while len(loop.seen_versions) < 3:
                    await _next_run(loop)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@dataclass
class Backlogged:
    """Has ``left`` passes of work; each pass writes (as a scheduler's bindings do) and asks to
    run again at once until the work is done."""

    left: int
    name: str = "backlogged"
    others_ran: list[int] = field(default_factory=list)
    ticks: list[int] = field(default_factory=lambda: [0])

    def reconcile(self, ctx: LoopContext) -> float | None:
        self.others_ran.append(self.ticks[0])
        if self.left == 0:
            return None
        self.left -= 1
        ctx.store.create(Node(metadata=ObjectMeta(name=f"n{self.left}")))
        return 0.0


async def test_a_loop_with_more_to_do_lets_other_tasks_run_between_passes() -> None:
    loop = Backlogged(left=5)

    async def other_task() -> None:
        while True:
            loop.ticks[0] += 1
            await asyncio.sleep(0)

    async with Store() as store:
        runner = LoopRunner(store, [loop], idle_interval=3600)
        other = asyncio.create_task(other_task(), name="other")
        task = asyncio.create_task(runner.run(), name="runner")
        try:
            async with asyncio.timeout(10):
                while len(loop.others_ran) < 6:  # noqa: ASYNC110 - counting passes
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            other.cancel()
            await asyncio.gather(task, other, return_exceptions=True)
    seen = loop.others_ran
    assert all(later > earlier for earlier, later in itertools.pairwise(seen)), seen


def test_build_loops_checks_the_protocol() -> None:
    assert isinstance(build_loops({"c": Counting})[0], ControlLoop)

    class NotALoop:
        pass

    with pytest.raises(TypeError, match="ControlLoop"):
        build_loops({"bad": NotALoop})  # type: ignore[dict-item]


def test_build_loops_gives_the_descheduler_and_migration_loops_one_evict_qps_bucket() -> None:
    from controller.descheduler.loop import DeschedulerLoop
    from controller.descheduler.migration import MigrationController

    loops = build_loops()
    (descheduler,) = (loop for loop in loops if isinstance(loop, DeschedulerLoop))
    (migration,) = (loop for loop in loops if isinstance(loop, MigrationController))
    assert descheduler.eviction_buckets is not None
    assert descheduler.eviction_buckets is migration.eviction_buckets
    # a second controller's loops have buckets of their own
    again = next(loop for loop in build_loops() if isinstance(loop, DeschedulerLoop))
    assert again.eviction_buckets is not descheduler.eviction_buckets
