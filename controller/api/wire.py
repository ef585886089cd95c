"""Objects as the API serves them: JSON bytes, each object encoded once however often it is
answered, listed or sent to watchers.

The wire form is the stored form (:func:`controller.store.encoding.encode`). An object the
store committed recently still has the bytes it was stored as
(:meth:`~controller.store.memory.MemoryStore.stored_bytes`), so answering the write that
stored it costs nothing; anything else is encoded here once and kept by identity (objects
are immutable, and an unchanged object is the same Python object in every read: the identity
contract of :mod:`controller.store.snapshots`), so a watch event sent to a hundred watchers,
or a list served again, is encoded once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from apis.meta import Object
from controller.store.encoding import encode

__all__ = ["ENCODINGS_KEPT", "StoredBytes", "WireEncoder"]

#: Objects whose wire bytes a :class:`WireEncoder` keeps, the least recently encoded dropped.
ENCODINGS_KEPT = 8_192


class StoredBytes(Protocol):
    """Where the bytes an object was stored as may be found (the store)."""

    def stored_bytes(self, obj: Object) -> bytes | None: ...


class WireEncoder:
    """The wire bytes of objects, by identity (see the module docstring). One per API server;
    :meth:`clear` empties it."""

    __slots__ = ("_kept", "_limit", "_source")

    def __init__(self, source: StoredBytes, *, limit: int = ENCODINGS_KEPT) -> None:
        self._source = source
        self._limit = limit
        self._kept: OrderedDict[int, tuple[Object, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def encode(self, obj: Object) -> bytes:
        found = self._kept.get(id(obj))
        if found is not None and found[0] is obj:
            return found[1]
        data = self._source.stored_bytes(obj)
        if data is None:
            data = encode(obj)
        kept = self._kept
        if len(kept) >= self._limit:
            kept.popitem(last=False)
        kept[id(obj)] = (obj, data)
        return data

    def clear(self) -> None:
        self._kept.clear()
