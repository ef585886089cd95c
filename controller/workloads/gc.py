"""The ``workload-gc`` control loop: deleting an owner deletes what it owns (in the background).

A pod or ReplicaSet whose owner references all name ``apps/v1`` workloads (Deployment,
ReplicaSet, StatefulSet, DaemonSet), none of which exists any more with that uid, is deleted,
as Kubernetes' garbage collector does with background propagation: the owner goes at once, its
ReplicaSets next, their pods after them. Objects with any other owner are left to the
controllers of those owners (the job controller deletes its own pods).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from apis.apps import DaemonSet, Deployment, ReplicaSet, StatefulSet
from apis.core import Pod
from apis.meta import Object
from controller.store import Store
from controller.workloads.common import delete

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["GarbageCollector", "orphans"]

_OWNER_TYPES: tuple[type[Object], ...] = (Deployment, ReplicaSet, StatefulSet, DaemonSet)
_OWNER_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"})
_DEPENDENT_TYPES: tuple[type[Object], ...] = (ReplicaSet, Pod)


def orphans(dependents: Iterable[Object], owner_uids: frozenset[str]) -> list[Object]:
    """The ``dependents`` owned only by ``apps/v1`` workloads, none of them in ``owner_uids``."""
    found: list[Object] = []
    for obj in dependents:
        refs = obj.metadata.owner_references
        if not refs or obj.metadata.deletion_timestamp is not None:
            continue
        if all(
            r.kind in _OWNER_KINDS and r.api_version == "apps/v1" and r.uid not in owner_uids
            for r in refs
        ):
            found.append(obj)
    return found


class GarbageCollector:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "workload-gc"

    def __init__(self) -> None:
        self._store: Store | None = None
        self._views: tuple[tuple[Object, ...], ...] | None = None

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._views = None
        snapshot = store.snapshot()
        registry = store.registry
        views = tuple(
            snapshot.objects(registry.for_type(t)) for t in (*_OWNER_TYPES, *_DEPENDENT_TYPES)
        )
        if self._views is not None and all(a is b for a, b in zip(views, self._views, strict=True)):
            return None
        self._views = views
        owners = frozenset(o.metadata.uid for view in views[: len(_OWNER_TYPES)] for o in view)
        dependents = [o for view in views[len(_OWNER_TYPES) :] for o in view]
        doomed = orphans(dependents, owners)
        results = [delete(store, obj, self.name) for obj in doomed]  # every one, not the first
        if not all(results):
            self._views = None
            return 1.0
        return None
