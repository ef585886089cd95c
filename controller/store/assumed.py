"""What a loop wrote and has not seen yet: its own writes laid over its next snapshots.

Under the :class:`~controller.store.cluster.Cluster` contract a loop's write may reach its
snapshots late. A loop that keeps an :class:`Assumed` of a kind records each write it made
(:meth:`Assumed.wrote`) and reads every snapshot through :meth:`Assumed.over`, which shows
those objects as written until the snapshot shows them itself, as kube-scheduler's assume
cache does for the pods it bound. An entry is forgotten as soon as the snapshot holds a
version other than the one the write replaced (the write, or anyone's later one: versions are
compared for equality only) or the object is gone. A write that succeeded is committed, so
every backend shows it in the end: nothing waits on a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from apis.kinds import Kind
from apis.meta import Object
from controller.store.snapshots import Snapshot

__all__ = ["Assumed"]


@dataclass(slots=True)
class _Entry:
    replaced: str  # the resourceVersion of the object the write replaced
    uid: str
    written: Object | None  # None: deleted


class Assumed:
    """The writes of one kind a loop made and has not seen yet, by (namespace, name)."""

    __slots__ = ("_entries", "_kind")

    def __init__(self, kind: Kind) -> None:
        self._kind = kind
        self._entries: dict[tuple[str, str], _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def wrote(self, before: Object, after: Object) -> None:
        """``after`` is stored in place of ``before`` (as the loop read it)."""
        self._record(before, after)

    def deleted(self, before: Object) -> None:
        """``before`` (as the loop read it) is deleted."""
        self._record(before, None)

    def _record(self, before: Object, after: Object | None) -> None:
        meta = before.metadata
        key = (meta.namespace, meta.name)
        found = self._entries.get(key)
        replaced = found.replaced if found is not None else meta.resource_version
        self._entries[key] = _Entry(replaced, meta.uid, after)

    def clear(self) -> None:
        self._entries.clear()

    def over(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the writes it does not show yet laid over it."""
        if not self._entries:
            return snapshot
        kind = self._kind
        shown: dict[tuple[str, str], Object | None] = {}
        for key, entry in list(self._entries.items()):
            seen = snapshot.get(kind, key[1], key[0])
            if (
                seen is not None
                and seen.metadata.resource_version == entry.replaced
                and seen.metadata.uid == entry.uid
            ):
                shown[key] = entry.written
            else:
                del self._entries[key]  # seen, superseded or gone
        return snapshot.replaced(kind, shown) if shown else snapshot
