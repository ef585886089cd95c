"""A pod write costs the control loops what changed, not what is stored: with thousands of
pods stored, the passes after one new pod (scheduled, bound and started) read a handful of
pods, where they used to read every one (issue: each pod write walked every stored pod)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from apis.codec import decode_object
from apis.core import Pod
from apis.meta import Object
from controller.loops import LoopRunner, build_loops
from controller.queueing import loop as queueing_loop
from controller.quota import check
from controller.scheduler import gangs
from controller.store.sqlite import Store

STORED = 2_000
NAMESPACES = tuple(f"team-{i:02d}" for i in range(20))
#: What reading a few changed pods may cost (every stored pod: STORED and more).
FEW = 100


def _pod(name: str, namespace: str, node: str = "") -> Object:
    return decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": "w"}},
            "spec": {
                "schedulerName": "koord-scheduler",
                "nodeName": node,
                "containers": [
                    {
                        "name": "w",
                        "image": "w:1",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    }
                ],
            },
            "status": {"phase": "Running"} if node else {},
        }
    )


def _node(name: str) -> Object:
    room = {"cpu": "10000", "memory": "10Ti", "pods": "10000"}
    return decode_object(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": room, "allocatable": room},
        }
    )


class Calls:
    """Counts the calls of functions read for every pod in a full walk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: dict[str, int] = {}
        self.on = False
        terminated = Pod.__dict__["is_terminated"]
        monkeypatch.setattr(
            Pod, "is_terminated", property(self._count("is_terminated", terminated.fget))
        )
        monkeypatch.setattr(
            queueing_loop, "pod_requests", self._count("pod_requests", queueing_loop.pod_requests)
        )
        monkeypatch.setattr(check, "pod_requests", self._count("pod_requests", check.pod_requests))
        monkeypatch.setattr(gangs, "gang_ref", self._count("gang_ref", gangs.gang_ref))

    def _count(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            if self.on:
                self.counts[name] = self.counts.get(name, 0) + 1
            return fn(*args)

        return counted


@pytest.fixture
def settled() -> Iterator[tuple[Store, LoopRunner]]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with Store() as store:
        store.apply_many([_node(f"node-{i}") for i in range(4)])
        store.apply_many(
            [
                _pod(f"stored-{i:05d}", NAMESPACES[i % len(NAMESPACES)], f"node-{i % 4}")
                for i in range(STORED)
            ]
        )
        runner = LoopRunner(store, build_loops(), clock=lambda: now)
        for _ in range(3):
            runner.run_pass()
        yield store, runner


def test_a_new_pod_costs_the_loops_the_pods_that_changed(
    settled: tuple[Store, LoopRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, runner = settled
    calls = Calls(monkeypatch)
    calls.on = True
    for i in range(3):
        store.apply(_pod(f"new-{i}", NAMESPACES[i]))
        for _ in range(3):  # scheduled and bound, started, seen started
            runner.run_pass()
    calls.on = False
    placed = [store.get(store.registry.for_type(Pod), f"new-{i}", NAMESPACES[i]) for i in range(3)]
    assert all(isinstance(p, Pod) and p.spec.node_name for p in placed)
    assert all(count <= FEW for count in calls.counts.values()), calls.counts
    assert calls.counts.get("pod_requests", 0) > 0  # the counters do see the loops' reads


def test_a_config_map_costs_the_loops_no_pod(
    settled: tuple[Store, LoopRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, runner = settled
    calls = Calls(monkeypatch)
    calls.on = True
    store.apply(
        decode_object(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
        )
    )
    runner.run_pass()
    calls.on = False
    assert calls.counts == {}
