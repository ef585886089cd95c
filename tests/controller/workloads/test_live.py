"""Workloads under the real clock, as ``koordpy up`` runs the control loops: a Deployment applied
to a running controller gets its Ready pods, and a deleted pod comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from apis import codec
from apis.apps import Deployment
from apis.core import Pod
from controller.loops import LoopRunner, build_loops
from controller.store.sqlite import Store
from tests.controller.workloads.test_scenarios import APP_DEMO, running_ready
from tests.manuals.replay import node


async def _until(store: Store, done: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not done():
            await store.changed(store.resource_version)


def _pods(store: Store) -> list[Pod]:
    items, _ = store.list(store.registry.for_type(Pod), namespace="default")
    return [p for p in items if isinstance(p, Pod)]


def _available(store: Store) -> int:
    deploy = store.get(store.registry.for_type(Deployment), "app-demo", "default")
    assert isinstance(deploy, Deployment)
    return deploy.status.available_replicas


async def test_a_deployment_runs_and_heals_in_a_live_controller() -> None:
    async with Store() as store:
        runner = LoopRunner(store, build_loops(), idle_interval=3600)
        task = asyncio.create_task(runner.run(), name="control-loops")
        try:
            for text in (node("node-0", cpu="8"), node("node-1", cpu="8"), APP_DEMO):
                for obj in codec.decode_documents(text):
                    store.apply(obj)
            await _until(store, lambda: _available(store) == 2)
            pods = _pods(store)
            assert len(pods) == 2
            assert all(running_ready(p) for p in pods)
            victim = pods[0].metadata.name
            store.delete(store.registry.for_type(Pod), victim, "default")
            await _until(
                store,
                lambda: (
                    len(_pods(store)) == 2
                    and victim not in {p.metadata.name for p in _pods(store)}
                    and all(running_ready(p) for p in _pods(store))
                ),
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
