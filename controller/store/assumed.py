"""What a loop wrote and has not seen yet: its own writes laid over its next snapshots.

Under the :class:`~controller.store.cluster.Cluster` contract a loop's write may reach its
snapshots late. A loop that keeps an :class:`Assumed` of a kind records each write it made
(:meth:`Assumed.took`) and reads every snapshot through :meth:`Assumed.over`, which shows
those objects as written until the snapshot shows them itself, as kube-scheduler's assume
cache does for the pods it bound. An entry is forgotten as soon as the snapshot moved past the
state the write changed: for an update, a version other than the one it replaced (the write,
or anyone's later one: versions are compared for equality only) or the object gone; for a
create, the object there; for a delete, the object gone or another one (another uid) in its
place. A write that succeeded is committed, so every backend shows it in the end: nothing
waits on a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from apis.kinds import Kind
from apis.meta import Object
from controller.store.cluster import Outcome
from controller.store.snapshots import Snapshot

__all__ = ["Assumed"]


@dataclass(slots=True)
class _Entry:
    #: the resourceVersion the write replaced; "" for a create, None for a delete
    replaced: str | None
    uid: str
    written: Object | None  # None: deleted


def _unseen(entry: _Entry, seen: Object | None) -> bool:
    """Whether ``seen`` (what the snapshot holds) is still from before the write."""
    if entry.replaced is None:  # deleted: still there
        return seen is not None and seen.metadata.uid == entry.uid
    if not entry.replaced:  # created: not there yet
        return seen is None
    return (
        seen is not None
        and seen.metadata.resource_version == entry.replaced
        and seen.metadata.uid == entry.uid
    )


class Assumed:
    """The writes of one kind a loop made and has not seen yet, by (namespace, name)."""

    __slots__ = ("_entries", "_kind")

    def __init__(self, kind: Kind) -> None:
        self._kind = kind
        self._entries: dict[tuple[str, str], _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def took(self, sent: Object, stored: Object, outcome: Outcome) -> None:
        """A write of ``sent`` (the object as the loop read and changed it; its
        resourceVersion that of the object it replaces, empty for a create) stored
        ``stored`` with ``outcome`` (for DELETED, the object's last state)."""
        meta = stored.metadata
        key = (meta.namespace, meta.name)
        if outcome is Outcome.UNCHANGED:
            return
        if outcome is Outcome.DELETED:
            self._entries[key] = _Entry(None, meta.uid, None)
            return
        replaced = "" if outcome is Outcome.CREATED else sent.metadata.resource_version
        if replaced and meta.resource_version == replaced:
            return  # nothing written
        found = self._entries.get(key)
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
