"""The ``workload-gc`` control loop: deleting an owner deletes what it owns (in the background).

A pod or ReplicaSet whose owner references all name ``apps/v1`` workloads (Deployment,
ReplicaSet, StatefulSet, DaemonSet), none of which exists any more with that uid, is deleted,
as Kubernetes' garbage collector does with background propagation: the owner goes at once, its
ReplicaSets next, their pods after them. Objects with any other owner are left to the
controllers of those owners (the job controller deletes its own pods).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from apis.apps import DaemonSet, Deployment, ReplicaSet, StatefulSet
from apis.core import Pod
from apis.kinds import default_registry
from apis.meta import Object
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster
from controller.store.snapshots import Change
from controller.store.writes import Result
from controller.workloads.common import delete_failed, delete_writes, group_pods, regroup_pods

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["GarbageCollector", "orphans"]

_OWNER_TYPES: tuple[type[Object], ...] = (Deployment, ReplicaSet, StatefulSet, DaemonSet)
_OWNER_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"})
#: What may be an orphan: ReplicaSets (read whole) and Pods (read by the owners they name).
_DEPENDENT_TYPES: tuple[type[Object], ...] = (ReplicaSet, Pod)
_KINDS = default_registry()


def _owner_groups(pod: Pod) -> tuple[str, ...]:
    """The uids a pod owned by ``apps/v1`` workloads only names (none: it has other owners)."""
    refs = pod.metadata.owner_references
    if all(r.kind in _OWNER_KINDS and r.api_version == "apps/v1" for r in refs):
        return tuple(r.uid for r in refs)
    return ()


def _pods_by_owners(objects: Sequence[Object]) -> Mapping[str, tuple[Pod, ...]]:
    return group_pods(objects, _owner_groups)


def _regroup(
    earlier: Mapping[str, tuple[Pod, ...]], changes: Sequence[Change]
) -> Mapping[str, tuple[Pod, ...]]:
    return regroup_pods(earlier, changes, _owner_groups)


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
        self._store: Cluster | None = None
        self._views: tuple[Sequence[Object], ...] | None = None
        #: the deletes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=[_KINDS.for_type(t) for t in _DEPENDENT_TYPES])
        #: a delete failed: look again in a second
        self._retry = False

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._views = None
            self._outbox.clear()
        self._retry = False
        snapshot = self._outbox.over(store.snapshot())
        registry = store.registry
        views = tuple(
            snapshot.objects(registry.for_type(t)) for t in (*_OWNER_TYPES, *_DEPENDENT_TYPES)
        )
        if self._views is not None and all(a is b for a, b in zip(views, self._views, strict=True)):
            return None
        self._views = views
        owners = frozenset(o.metadata.uid for view in views[: len(_OWNER_TYPES)] for o in view)
        # Pods are looked at only when an owner they name is gone (most pods' owners exist).
        by_owner = snapshot.derived(registry.for_type(Pod), _pods_by_owners, _regroup)
        pods = {
            (pod.metadata.namespace, pod.metadata.name): pod
            for uid, group in by_owner.items()
            if uid not in owners
            for pod in group
        }
        dependents = [*views[-2], *(pods[key] for key in sorted(pods))]
        doomed = orphans(dependents, owners)
        # every one, not the first; a failed one is looked at again in a second
        self._outbox.send(
            store, delete_writes(store, doomed), functools.partial(self._done, doomed)
        )
        return 1.0 if self._retry else None

    def _done(self, doomed: Sequence[Object], results: Sequence[Result]) -> None:
        failed = [delete_failed(r, o, self.name) for o, r in zip(doomed, results, strict=True)]
        if any(failed):
            self._views = None
            self._retry = True
