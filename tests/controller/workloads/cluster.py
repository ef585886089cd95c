"""A standalone cluster for workload tests: every control loop over a memory-only store, under a
clock the test moves, with the user's writes (apply, delete) between settled states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from apis import codec
from apis.core import Pod
from apis.kinds import default_registry
from apis.meta import Object
from controller.api.apply import apply as kubectl_apply
from controller.loops import LoopContext, build_loops
from controller.store.sqlite import Store

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class _Clock:
    def __init__(self) -> None:
        self.now = EPOCH

    def __call__(self) -> datetime:
        return self.now


class Cluster:
    """``apply`` manifests, ``settle`` the loops, look objects up; ``close`` when done."""

    def __init__(self) -> None:
        self.registry = default_registry()
        self.clock = _Clock()
        self.store = Store(path=None, registry=self.registry, clock=self.clock, seed=0)
        self.loops = build_loops()
        self.ctx = LoopContext(store=self.store, now=self.clock)

    def close(self) -> None:
        self.store.close()

    def apply(self, *texts: str) -> None:
        for text in texts:
            for obj in codec.decode_documents(text, registry=self.registry):
                kubectl_apply(self.store, obj)

    def delete(self, kind: str, name: str, namespace: str = "default") -> None:
        self.store.delete(self.registry.resolve(kind), name, namespace)

    def update(self, obj: Object) -> None:
        self.store.update(obj)

    def step(self) -> bool:
        """One pass of every loop; whether it changed anything."""
        before = self.store.resource_version
        for loop in self.loops:
            loop.reconcile(self.ctx)
        return self.store.resource_version != before

    def settle(self, *, advance: timedelta = timedelta(0)) -> None:
        """Pass until nothing changes (after moving the clock by ``advance``)."""
        self.clock.now += advance
        for _ in range(200):
            if not self.step():
                return
        raise AssertionError("the loops did not settle")

    def all(self, kind: str, namespace: str = "default") -> list[Object]:
        return self.store.list(self.registry.resolve(kind), namespace=namespace)[0]

    def get(self, kind: str, name: str, namespace: str = "default") -> Object:
        return self.store.get(self.registry.resolve(kind), name, namespace)

    def pods(self, namespace: str = "default") -> list[Pod]:
        return [p for p in self.all("pods", namespace) if isinstance(p, Pod)]

    def fail(self, pod: Pod, reason: str = "Evicted") -> None:
        """Mark ``pod`` Failed as a kubelet that evicted it does."""
        status = msgspec.structs.replace(pod.status, phase="Failed", reason=reason)
        self.store.update(msgspec.structs.replace(pod, status=status))

    def advance(self, seconds: float) -> None:
        self.settle(advance=timedelta(seconds=seconds))
