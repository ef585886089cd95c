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
- **Writes are sent, never waited on** (:meth:`Cluster.write`): a batch goes out at once and
  its results arrive later (:mod:`controller.store.writes`); a loop handles them when they
  do, through its :class:`~controller.store.assumed.Outbox`, and decides nothing that
  needs a result before it is in (a create's generated name, say, is used by a later pass).
- **Writes are conditional on what was read.** An update carries the resourceVersion of the
  object it changes; a stale one fails with ``Conflict``, and nothing of it is stored. Each
  write of a batch stands alone and reports its result in its place.
- **Versions are opaque.** :attr:`Cluster.revision` and ``metadata.resourceVersion`` are
  compared for equality only; a loop never orders or does arithmetic on them.
- **Reads are synchronous and local**: ``get``, ``exists`` and snapshots never wait
  on a network (a remote backend serves them from its cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from apis.kinds import Kind, Registry
from apis.meta import Object
from controller.store.snapshots import Snapshot
from controller.store.watching import Watch
from controller.store.writes import Outcome, Pending, Result, Verb, Write

__all__ = ["Cluster", "Outcome", "Pending", "Result", "Verb", "Write"]


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

    def write(self, writes: Sequence[Write]) -> Pending:
        """Send ``writes`` (one batch; see :mod:`controller.store.writes`) and return at once;
        the results, each in its write's place, arrive in the :class:`Pending` (already
        there from a local backend). A result arriving counts as a change for
        :meth:`changed_after`."""
        ...

    def watch(self, kind: Kind | None = None) -> Watch:
        """Every object of ``kind`` as ADDED, then its changes in order."""
        ...
