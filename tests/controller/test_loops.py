"""The control-loop runner under the real clock: runs at start, on changes, when asked."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from apis.core import Node
from apis.meta import ObjectMeta
from controller.loops import ControlLoop, LoopContext, LoopRunner, build_loops
from controller.store import Store


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


def test_build_loops_checks_the_protocol() -> None:
    assert isinstance(build_loops({"c": Counting})[0], ControlLoop)

    class NotALoop:
        pass

    with pytest.raises(TypeError, match="ControlLoop"):
        build_loops({"bad": NotALoop})  # type: ignore[dict-item]
