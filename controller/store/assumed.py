"""What a loop wrote and has not seen yet: its own writes laid over its next snapshots.

Under the :class:`~controller.store.cluster.Cluster` contract a loop's write may reach its
snapshots late. A loop that keeps an :class:`Assumed` of a kind records each write it sends
(:meth:`Assumed.sending`) and its result (:meth:`Assumed.took`, :meth:`Assumed.failed`), and
reads every snapshot through :meth:`Assumed.over`, which shows those objects as written until
the snapshot shows them itself, as kube-scheduler's assume cache does for the pods it bound. A
loop's :class:`Outbox` keeps them for it. An entry is forgotten as soon as the snapshot moved
past the state the write changed: for an update, a version other than the one it replaced (the
write, or anyone's later one: versions are compared for equality only) or the object gone; for
a create, the object there; for a delete, the object gone or another one (another uid) in its
place. A write that succeeded is committed, so every backend shows it in the end: nothing waits
on a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apis.kinds import Kind
from apis.meta import Object
from controller.errors import StoreError
from controller.store.writes import Outcome, Pending, Result, Write

if TYPE_CHECKING:
    from controller.store.cluster import Cluster
from controller.store.snapshots import Snapshot

__all__ = ["Assumed", "Outbox", "before_write"]


@dataclass(slots=True)
class _Entry:
    #: the resourceVersion the write replaced; "" for a create, None for a delete
    replaced: str | None
    uid: str
    written: Object | None  # None: deleted


def before_write(replaced: str | None, uid: str, seen: Object | None) -> bool:
    """Whether ``seen`` (what a snapshot or a watch shows now) is still the state a write
    changed: ``replaced`` the resourceVersion it replaced ("" for a create, None for a delete)
    and ``uid`` the object's. A version other than the one replaced, the object gone, or another
    object in its place is past it (versions are compared for equality only)."""
    if replaced is None:  # deleted: still there
        return seen is not None and seen.metadata.uid == uid
    if not replaced:  # created: not there yet
        return seen is None
    return (
        seen is not None and seen.metadata.resource_version == replaced and seen.metadata.uid == uid
    )


def _unseen(entry: _Entry, seen: Object | None) -> bool:
    return before_write(entry.replaced, entry.uid, seen)


class Assumed:
    """The writes of one kind a loop made and has not seen yet, by (namespace, name)."""

    __slots__ = ("_entries", "_kind")

    def __init__(self, kind: Kind) -> None:
        self._kind = kind
        self._entries: dict[tuple[str, str], _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def sending(self, sent: Object, *, removes: bool = False) -> None:
        """``sent`` is being written (``removes``: deleted); shown as written until its result
        arrives (:meth:`took`, :meth:`failed`). A create of a generated name is not shown
        before its result names it."""
        meta = sent.metadata
        if not meta.name:
            return
        key = (meta.namespace, meta.name)
        if removes:
            self._entries[key] = _Entry(None, meta.uid, None)
            return
        replaced = meta.resource_version
        found = self._entries.get(key)
        if found is not None and found.replaced is not None:
            replaced = found.replaced  # an earlier write not seen yet: what it replaced
        self._entries[key] = _Entry(replaced, meta.uid, sent)

    def failed(self, sent: Object) -> None:
        """The write of ``sent`` failed: the snapshots show what is there."""
        meta = sent.metadata
        key = (meta.namespace, meta.name)
        found = self._entries.get(key)
        if found is not None and (found.written is sent or found.written is None):
            del self._entries[key]

    def took(self, sent: Object, stored: Object, outcome: Outcome) -> None:
        """A write of ``sent`` (the object as the loop read and changed it; its
        resourceVersion that of the object it replaces, empty for a create) stored
        ``stored`` with ``outcome`` (for DELETED, the object's last state)."""
        meta = stored.metadata
        key = (meta.namespace, meta.name)
        if outcome is Outcome.DELETED:
            self._entries[key] = _Entry(None, meta.uid, None)
            return
        found = self._entries.get(key)
        replaced = "" if outcome is Outcome.CREATED else sent.metadata.resource_version
        if outcome is Outcome.UNCHANGED or (replaced and meta.resource_version == replaced):
            # Nothing written. What is stored is what the snapshots show, unless an earlier
            # write of the object is not seen yet: that one stays shown (as stored now).
            if found is not None and found.written is sent:
                if found.replaced is not None and found.replaced != meta.resource_version:
                    self._entries[key] = _Entry(found.replaced, meta.uid, stored)
                else:
                    del self._entries[key]
            return
        if found is not None and found.replaced is not None:
            replaced = found.replaced  # an earlier write not seen yet: what it replaced
        self._entries[key] = _Entry(replaced, meta.uid, stored)

    def clear(self) -> None:
        self._entries.clear()

    def over(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the writes it does not show yet laid over it."""
        if not self._entries:
            return snapshot
        kind = self._kind
        shown: dict[tuple[str, str], Object | None] = {}
        for key, entry in list(self._entries.items()):
            if _unseen(entry, snapshot.get(kind, key[1], key[0])):
                shown[key] = entry.written
            else:
                del self._entries[key]  # seen, superseded or gone
        return snapshot.replaced(kind, shown) if shown else snapshot


#: What a loop does with a batch's results, each in its write's place.
Then = Callable[[Sequence[Result]], None]


@dataclass(slots=True)
class _Sent:
    pending: Pending
    writes: Sequence[Write]
    then: Then | None


@dataclass(slots=True)
class Outbox:
    """One loop's writes: sent in batches, laid over its snapshots until they show them, and
    their results handled when they arrive (see the module docstring).

    ``kinds``: the kinds whose writes the loop keeps assumed; writes of other kinds are sent
    and their results handled, but not laid over its snapshots."""

    kinds: Iterable[Kind] = ()
    _assumed: dict[type[Object], Assumed] = field(init=False)
    _sent: deque[_Sent] = field(init=False, default_factory=deque)

    def __post_init__(self) -> None:
        self._assumed = {kind.type: Assumed(kind) for kind in self.kinds}

    def __len__(self) -> int:
        """Batches whose results have not been handled yet."""
        return len(self._sent)

    def assumed(self, of: type[Object]) -> Assumed | None:
        return self._assumed.get(of)

    def send(self, store: Cluster, writes: Sequence[Write], then: Then | None = None) -> None:
        """Send ``writes`` (one batch) through ``store``; ``then`` gets their
        results when they arrive: here, when they are in already (a local backend), or from
        the :meth:`collect` of a later pass. Nothing is sent for an empty batch."""
        if not writes:
            return
        for write in writes:
            obj = write.obj
            if obj is not None:
                assumed = self._assumed.get(type(obj))
                if assumed is not None:
                    assumed.sending(obj, removes=write.removes)
        pending = store.write(writes)
        sent = _Sent(pending, writes, then)
        if pending.done() and not self._sent:
            self._finish(sent)
        else:
            self._sent.append(sent)

    def collect(self) -> None:
        """Handle the results that arrived since, batch by batch in the order sent (a batch
        whose results are not in holds back those sent after it)."""
        sent = self._sent
        while sent and sent[0].pending.done():
            self._finish(sent.popleft())

    def over(self, snapshot: Snapshot) -> Snapshot:
        """Collect what arrived, then lay every write not seen yet over ``snapshot``."""
        self.collect()
        for assumed in self._assumed.values():
            snapshot = assumed.over(snapshot)
        return snapshot

    def clear(self) -> None:
        """Forget everything (a loop starting afresh); results still to come are dropped."""
        self._sent.clear()
        for assumed in self._assumed.values():
            assumed.clear()

    def _finish(self, sent: _Sent) -> None:
        results = sent.pending.results()
        assumed_of = self._assumed
        for write, result in zip(sent.writes, results, strict=True):
            obj = write.obj
            if isinstance(result, StoreError):
                if obj is not None and (assumed := assumed_of.get(type(obj))) is not None:
                    assumed.failed(obj)
                continue
            stored, outcome = result
            assumed = assumed_of.get(type(stored))
            if assumed is not None:
                assumed.took(obj if obj is not None else stored, stored, outcome)
        if sent.then is not None:
            sent.then(results)
