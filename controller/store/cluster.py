"""The ``Cluster`` seam: what the control loops and ``koordpy simulate`` use of a backend.

A control loop is written against :class:`Cluster` and nothing else, so the same loop runs
over the in-memory backend (:mod:`controller.store.memory`, ``koordpy simulate``), the SQLite
one (:mod:`controller.store.sqlite`, ``koordpy up``) and any later one. Import-linter keeps
loops and plugins off the backend modules (``make lint``).

The contract a loop may rely on, and no more (a backend that watches a remote API server
offers no more than this either):

- **Snapshots** (:meth:`Cluster.snapshot`) are immutable and consistent: every kind in one
  snapshot is at the one state it was taken at. An object that did not change between two
  snapshots is the same Python object in both (caches keyed by identity rely on this; see
  :mod:`controller.store.snapshots`).
- **A loop's own writes may become visible later.** A write that succeeded is acknowledged by
  its result; the next snapshot may still show the object as it was (as an informer's cache
  does). A loop therefore keeps what it wrote, assumed, until a snapshot shows it (or until the
  write failed), and never charges, admits, binds or evicts twice because a write it made is
  not yet visible: the scheduler's assumed placements, the queueing ledger's charges, the
  descheduler's evictions in flight.
- **Writes are conditional on what was read.** An update carries the resourceVersion of the
  object it changes; a stale one fails with ``Conflict``, and nothing of it is stored. A batch
  (``update_many``, ``apply_many``) reports each write's result in its place.
- **Versions are opaque.** :attr:`Cluster.revision` and ``metadata.resourceVersion`` are
  compared for equality only; a loop never orders or does arithmetic on them.
- **Reads are synchronous and local**: ``get``, ``exists`` and snapshots never wait
  on a network (a remote backend serves them from its cache).
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Sequence
from typing import Protocol, TypeVar

from apis.kinds import Kind, Registry
from apis.meta import Object
from controller.errors import StoreError
from controller.store.snapshots import Snapshot
from controller.store.watching import Watch

__all__ = ["Cluster", "Outcome"]

ObjT = TypeVar("ObjT", bound=Object)


class Outcome(enum.StrEnum):
    """What a write did."""

    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    DELETED = "deleted"


class Cluster(Protocol):
    """What a control loop reads and writes; see the module docstring for the contract."""

    @property
    def registry(self) -> Registry:
        """The kinds this cluster serves."""
        ...

    @property
    def revision(self) -> str:
        """An opaque token of the state last committed: equal tokens, nothing changed."""
        ...

    async def changed_after(self, revision: str) -> str:
        """Wait until something is committed after ``revision`` (at once when it already
        is); the revision then."""
        ...

    def snapshot(self) -> Snapshot:
        """Every object, immutable; cheap when little changed since the last one."""
        ...

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object:
        """One object (``NotFound`` when absent)."""
        ...

    def exists(self, kind: Kind, name: str, namespace: str = "") -> bool: ...

    def create(self, obj: ObjT) -> ObjT: ...

    def update(self, obj: ObjT) -> ObjT:
        """Replace an object; its non-empty resourceVersion must be the stored one."""
        ...

    def apply(self, obj: ObjT) -> tuple[ObjT, Outcome]: ...

    def delete(
        self, kind: Kind, name: str, namespace: str = "", *, resource_version: str = ""
    ) -> tuple[Object, Outcome]: ...

    def update_many(
        self, objs: Sequence[Object]
    ) -> builtins.list[tuple[Object, Outcome] | StoreError]:
        """Update each object; each result in its place."""
        ...

    def apply_many(
        self, objs: Sequence[Object]
    ) -> builtins.list[tuple[Object, Outcome] | StoreError]:
        """Apply each object; each result in its place."""
        ...

    def watch(self, kind: Kind | None = None) -> Watch:
        """Every object of ``kind`` as ADDED, then its changes in order."""
        ...
