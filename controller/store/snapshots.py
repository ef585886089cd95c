"""Immutable views of the store for control loops.

A :class:`Snapshot` holds, per kind, the (frozen) objects sorted by namespace and name
(:class:`Items`: an immutable sequence in chunks, which a view built from the one before
shares), and the resourceVersion it reflects (kinds are found by their Struct type, so lookups
never compute a kind's names). The store keeps one :class:`KindView` per kind and
rebuilds it only after that kind changed, so taking snapshots repeatedly costs little.

A kind's view is built when a snapshot first reads it (a :class:`LazyView`, shared by every
snapshot taken while that kind stays unchanged), not when the snapshot is taken: a loop that
reads only pods pays nothing for the thousands of nodes whose reports changed since its last
pass. Before a kind changes, the store sets aside its objects (a shallow copy of the map) for
any snapshot still holding that kind unread (:meth:`LazyView.detach`), so a snapshot reads the
state it was taken at, however late it reads it, and the view is built only if it does.

Identity. An object that did not change is the same Python object in every later snapshot
(and in what the store's reads return), and a kind that did not change has the same
:class:`Items` in every snapshot: every backend keeps this, a remote one by keeping the object
it decoded until the object changes. Caches keyed by identity rely on it and on nothing else:
the named identity caches of :mod:`apis.caches` (``queueing.template-requests``,
``scheduler.mask-rows``), the bytes objects were stored as (:meth:`MemoryStore.stored_bytes
<controller.store.memory.MemoryStore.stored_bytes>`, per store), the API server's wire
encodings (:class:`controller.api.wire.WireEncoder`) and the loops' state per view (the
scheduler's node signatures and its last pods, the descheduler's and the migration
controller's pod indexes), which they compare with ``is`` before working anything out again.
:func:`apis.caches.clear_all` empties the named ones.

What changed between views. Each view built after another knows, for the few views of its
kind built before it (:data:`LINEAGE_DEPTH`), which objects changed since and what they were
then (:class:`Lineage`). A loop that keeps what it read last updates its own state from
:meth:`Snapshot.changes`, and :meth:`Snapshot.derived` updates a result worked out for any of
those views, so neither walks every object after a write.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, overload

from apis.kinds import Kind
from apis.labels import Selector
from apis.meta import Object

ViewsByType = Mapping[type[Object], "LazyView"]
T = TypeVar("T")
#: An object before and after a change (None: absent), for :meth:`Snapshot.derived`.
Change = tuple[Object | None, Object | None]

__all__ = ["LINEAGE_DEPTH", "Change", "Items", "KindView", "LazyView", "Lineage", "Snapshot"]

#: Earlier views of a kind whose changes a view keeps (see :class:`Lineage`).
LINEAGE_DEPTH = 4
#: Views an index may be layered over before it is copied whole (see :class:`_Layered`).
MAX_LAYERS = 8
#: Objects per part of a large index (:class:`_Parts`) when it is split.
PART = 1_024
#: Changed objects past which a view keeps no lineage to an earlier one: reading every object
#: again costs about as much by then.
MAX_LINEAGE_CHANGES = 4_096

Key = tuple[str, str]

#: Objects per chunk of :class:`Items` when built; a chunk is split past :data:`MAX_CHUNK` and
#: merged with a neighbour under :data:`MIN_CHUNK`.
CHUNK = 1_024
MAX_CHUNK = 2 * CHUNK
MIN_CHUNK = CHUNK // 4


#: An object's (namespace, name), at C speed.
_key_of: Callable[[Object], Key] = operator.attrgetter("metadata.namespace", "metadata.name")


class Items(Sequence[Object]):
    """A kind's objects sorted by (namespace, name): an immutable sequence kept as a tuple of
    chunks, so that :meth:`updated` copies only the chunks an update touches and views built
    one after another share the rest (dropping an old view frees only what it alone held).

    Loops tell views apart by identity: a new view has a new ``Items``; the view of a kind
    that did not change is the same object. Equal to a tuple or ``Items`` of the same objects.
    """

    __slots__ = ("_chunks", "_firsts", "_len", "_starts")

    def __init__(self, objects: Sequence[Object] = ()) -> None:
        """``objects`` already sorted by (namespace, name)."""
        self._set(tuple(tuple(objects[at : at + CHUNK]) for at in range(0, len(objects), CHUNK)))

    def _set(self, chunks: tuple[tuple[Object, ...], ...]) -> None:
        self._chunks = chunks
        self._firsts = [_key_of(chunk[0]) for chunk in chunks]
        starts = [0, *itertools.accumulate(map(len, chunks))]
        self._len = starts.pop()
        self._starts = starts

    @classmethod
    def _of(cls, chunks: tuple[tuple[Object, ...], ...]) -> Items:
        items = cls.__new__(cls)
        items._set(chunks)
        return items

    @property
    def chunks(self) -> tuple[tuple[Object, ...], ...]:
        """The chunks, in order: of a view's items (built or updated), each holds between
        :data:`MIN_CHUNK` and :data:`MAX_CHUNK` objects, unless there is only one; a slice
        may begin and end with smaller ones."""
        return self._chunks

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Object]:
        return itertools.chain.from_iterable(self._chunks)

    def __reversed__(self) -> Iterator[Object]:
        return (obj for chunk in reversed(self._chunks) for obj in reversed(chunk))

    @overload
    def __getitem__(self, at: int) -> Object: ...
    @overload
    def __getitem__(self, at: slice) -> Items: ...
    def __getitem__(self, at: int | slice) -> Object | Items:
        if isinstance(at, slice):
            begin, end, step = at.indices(self._len)
            if step != 1:
                return Items(tuple(self)[at])
            return self._slice(begin, end)
        if at < 0:
            at += self._len
        if not 0 <= at < self._len:
            raise IndexError("Items index out of range")
        i = bisect.bisect_right(self._starts, at) - 1
        return self._chunks[i][at - self._starts[i]]

    def _slice(self, begin: int, end: int) -> Items:
        if begin >= end:
            return EMPTY_ITEMS
        starts, chunks = self._starts, self._chunks
        first = bisect.bisect_right(starts, begin) - 1
        last = bisect.bisect_right(starts, end - 1) - 1
        if first == last:
            return Items._of((chunks[first][begin - starts[first] : end - starts[first]],))
        head = chunks[first][begin - starts[first] :]
        tail = chunks[last][: end - starts[last]]
        return Items._of((head, *chunks[first + 1 : last], tail))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Items | tuple):
            return len(other) == self._len and tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Items({list(self)!r})"

    def bisect(self, key: Key) -> int:
        """Where ``key`` (namespace, name) is, or would be inserted (bisect_left)."""
        if not self._chunks:
            return 0
        i = max(bisect.bisect_right(self._firsts, key) - 1, 0)
        return self._starts[i] + bisect.bisect_left(self._chunks[i], key, key=_key_of)

    def updated(self, changes: Mapping[Key, Object | None]) -> Items:
        """These items with the objects under the keys of ``changes`` replaced, added or
        (None) removed; costs the chunks touched and the number of chunks, not every object."""
        if not changes:
            return self
        chunks = list(self._chunks)
        firsts = self._firsts
        touched: dict[int, list[Object]] = {}
        for key in sorted(changes):
            i = max(bisect.bisect_right(firsts, key) - 1, 0)
            objs = touched.get(i)
            if objs is None:
                objs = touched[i] = list(chunks[i]) if chunks else []
            at = bisect.bisect_left(objs, key, key=_key_of)
            here = at < len(objs) and _key_of(objs[at]) == key
            obj = changes[key]
            if obj is None:
                if here:
                    del objs[at]
            elif here:
                objs[at] = obj
            else:
                objs.insert(at, obj)
        if not chunks:
            chunks.append(())
        for i, objs in touched.items():
            chunks[i] = tuple(objs)
        # From the last: a chunk split or merged leaves the places of those before it alone.
        for i in sorted(touched, reverse=True):
            if i >= len(chunks):  # merged into the one before already
                continue
            size = len(chunks[i])
            if size < MIN_CHUNK and len(chunks) > 1:
                lo = i if i + 1 < len(chunks) else i - 1  # with the next one, or the one before
                chunks[lo : lo + 2] = _split([*chunks[lo], *chunks[lo + 1]])
            elif size > MAX_CHUNK or not size:
                chunks[i : i + 1] = _split(list(chunks[i]))
        return Items._of(tuple(chunks))


def _split(objs: list[Object]) -> list[tuple[Object, ...]]:
    """``objs`` as chunks of at most :data:`MAX_CHUNK` (none if empty), of even sizes."""
    if not objs:
        return []
    parts = -(-len(objs) // MAX_CHUNK)
    size = -(-len(objs) // parts)
    return [tuple(objs[at : at + size]) for at in range(0, len(objs), size)]


EMPTY_ITEMS = Items()


@dataclass(frozen=True, slots=True)
class _Ancestor:
    """An earlier view: its items, what was worked out from it, and, for every key that
    changed since, the object it held then (None: absent)."""

    items: Items
    derived: dict[Callable[[Sequence[Object]], object], object]
    before: Mapping[Key, Object | None]


class Lineage:
    """The earlier views of a kind a view knows the changes since, nearest first.

    The store links each view it builds to the one it built before: it calls :meth:`clear`
    on the older view, then :meth:`append` ``(older, keys changed since)`` on the new one,
    which folds in what the older view knew, up to :data:`LINEAGE_DEPTH` views back and
    :data:`MAX_LINEAGE_CHANGES` changes. A view keeps no reference to another view.
    """

    __slots__ = ("_ancestors", "_handed")

    def __init__(self) -> None:
        self._ancestors: tuple[_Ancestor, ...] = ()
        #: what :meth:`clear` took away, for the next view's :meth:`append` to fold in
        self._handed: tuple[_Ancestor, ...] = ()

    @property
    def ancestors(self) -> tuple[_Ancestor, ...]:
        return self._ancestors

    def __bool__(self) -> bool:
        return bool(self._ancestors)

    def clear(self) -> None:
        """A newer view is built: hand this lineage over to it (and keep none)."""
        self._handed, self._ancestors = self._ancestors, ()

    def append(self, link: tuple[KindView, frozenset[Key]]) -> None:
        """Link to ``older``, the view built before this one, ``keys`` changed since."""
        older, keys = link
        if len(keys) > MAX_LINEAGE_CHANGES:
            older.base._handed = ()
            return
        index = older.index
        then = {key: index.get(key) for key in keys}
        folded = [_Ancestor(older.items, older.derived, then)]
        for ancestor in older.base._handed[: LINEAGE_DEPTH - 1]:
            if len(ancestor.before) + len(keys) > MAX_LINEAGE_CHANGES:
                break
            before = dict(then)
            before.update(ancestor.before)  # what it held then, not what the older view did
            folded.append(_Ancestor(ancestor.items, ancestor.derived, before))
        older.base._handed = ()
        self._ancestors = tuple(folded)


@dataclass(frozen=True, slots=True)
class KindView:
    """The objects of one kind at one version: sorted items and a (namespace, name) index."""

    items: Items
    index: Mapping[tuple[str, str], Object]
    #: what loops worked out from ``items``, by the function that did (:meth:`Snapshot.derived`)
    derived: dict[Callable[[Sequence[Object]], object], object] = field(
        default_factory=dict, compare=False
    )
    #: the earlier views whose changes this one knows (linked by the store; emptied when the
    #: next view is built), from which :meth:`Snapshot.changes` and :meth:`Snapshot.derived`
    #: work instead of starting over
    base: Lineage = field(default_factory=Lineage, compare=False)

    @classmethod
    def build(
        cls,
        objects: Mapping[tuple[str, str], Object],
        order: Sequence[tuple[str, str]] | None = None,
    ) -> KindView:
        """The view of ``objects``; ``order``, when given, is their keys already sorted."""
        keys = sorted(objects) if order is None else order
        found = list(map(objects.__getitem__, keys))
        index = _Parts(keys, found) if len(keys) > 2 * PART else dict(objects)
        return cls(Items(found), index)

    @classmethod
    def updated(
        cls, before: KindView, objects: Mapping[Key, Object], changed: Iterable[Key]
    ) -> KindView:
        """The view of ``objects`` where ``before`` is the view of the kind before the objects
        under ``changed`` were replaced, added or removed: the items copy only the chunks
        those touch (:meth:`Items.updated`) and the index shares ``before``'s
        (:class:`_Layered`, :class:`_Parts`), so this costs what changed, not what is
        stored."""
        top: dict[Key, Object | None] = {key: objects.get(key) for key in changed}
        return cls(before.items.updated(top), _Layered.over(before.index, top))


class _Layered(Mapping[Key, Object]):
    """An index as another one with a few keys replaced or removed (None), without copying
    the other; flattened into a plain dict once :data:`MAX_LAYERS` deep."""

    __slots__ = ("_base", "_depth", "_top")

    def __init__(
        self, base: Mapping[Key, Object], top: dict[Key, Object | None], depth: int
    ) -> None:
        self._base, self._top, self._depth = base, top, depth

    @classmethod
    def over(
        cls, base: Mapping[Key, Object], top: dict[Key, Object | None]
    ) -> Mapping[Key, Object]:
        """``base`` with ``top`` over it (None: the key removed)."""
        if isinstance(base, _Parts):
            return base.updated(top)
        depth = base._depth + 1 if isinstance(base, _Layered) else 1
        if depth <= MAX_LAYERS:
            return cls(base, top, depth)
        flat = cls(base, top, 0)._flat()
        # Large (it grew since it was built): split once, from then on updated part by part
        # (a copy of it all per MAX_LAYERS views would cost, and free, every object).
        return _Parts.of(flat) if len(flat) > 2 * PART else flat

    def get(self, key: Key, default: Any = None) -> Any:
        layer: Mapping[Key, Object] = self
        while isinstance(layer, _Layered):
            top = layer._top
            if key in top:
                found = top[key]
                return default if found is None else found
            layer = layer._base
        return layer.get(key, default)

    def __getitem__(self, key: Key) -> Object:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return cast("Object", found)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.get(cast("Key", key)) is not None

    def _flat(self) -> dict[Key, Object]:
        layers: list[dict[Key, Object | None]] = []
        layer: Mapping[Key, Object] = self
        while isinstance(layer, _Layered):
            layers.append(layer._top)
            layer = layer._base
        flat = dict(layer)  # a plain dict: copied at C speed
        for top in reversed(layers):
            for key, obj in top.items():
                if obj is None:
                    flat.pop(key, None)
                else:
                    flat[key] = obj
        return flat

    def __iter__(self) -> Iterator[Key]:
        return iter(self._flat())

    def __len__(self) -> int:
        return len(self._flat())


class _Parts(Mapping[Key, Object]):
    """A large index as dicts each holding one range of keys (in key order), so that an
    update copies only the parts its keys fall in and shares the others."""

    __slots__ = ("_firsts", "_len", "_parts")

    def __init__(self, keys: Sequence[Key], objects: Sequence[Object]) -> None:
        """The index of ``objects`` under ``keys`` (sorted; the same length)."""
        spans = range(0, len(keys), PART)
        self._parts = tuple(
            dict(zip(keys[at : at + PART], objects[at : at + PART], strict=True)) for at in spans
        )
        self._firsts = [keys[at] for at in spans]
        self._len = len(keys)

    @classmethod
    def of(cls, objects: Mapping[Key, Object]) -> Mapping[Key, Object]:
        """An index of ``objects``: split in parts if large, else a dict."""
        if len(objects) <= 2 * PART:
            return dict(objects)
        keys = sorted(objects)
        return cls(keys, list(map(objects.__getitem__, keys)))

    def updated(self, top: Mapping[Key, Object | None]) -> Mapping[Key, Object]:
        """This index with ``top`` over it (None: the key removed). A part grown past
        4 x :data:`PART` is halved, an emptied one dropped; the whole is made again once it
        holds far fewer objects than its parts were made for."""
        parts, firsts, size = list(self._parts), self._firsts, self._len
        copied: dict[int, dict[Key, Object]] = {}
        for key, obj in top.items():
            at = bisect.bisect_right(firsts, key, 1) - 1 if len(firsts) > 1 else 0
            part = copied.get(at)
            if part is None:
                part = parts[at] = copied[at] = dict(parts[at])
            if obj is None:
                size -= part.pop(key, None) is not None
            else:
                size += key not in part
                part[key] = obj
        firsts = list(firsts)
        for at in sorted(copied, reverse=True):  # from the last: the places before stay put
            part = parts[at]
            if len(part) > 4 * PART:
                keys = sorted(part)
                half = len(keys) // 2
                parts[at : at + 1] = [
                    {key: part[key] for key in keys[:half]},
                    {key: part[key] for key in keys[half:]},
                ]
                firsts[at : at + 1] = [firsts[at], keys[half]]
            elif not part and len(parts) > 1:
                del parts[at], firsts[at]
        index = _Parts.__new__(_Parts)
        index._parts, index._firsts, index._len = tuple(parts), firsts, size
        if size * 4 < PART * len(parts):
            return _Parts.of(index)
        return index

    def get(self, key: Key, default: Any = None) -> Any:
        firsts = self._firsts
        at = bisect.bisect_right(firsts, key, 1) - 1 if len(firsts) > 1 else 0
        return self._parts[at].get(key, default)

    def __getitem__(self, key: Key) -> Object:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return cast("Object", found)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.get(cast("Key", key)) is not None

    def __iter__(self) -> Iterator[Key]:
        return itertools.chain.from_iterable(self._parts)

    def __len__(self) -> int:
        return self._len


EMPTY_VIEW = KindView(EMPTY_ITEMS, {})


class LazyView:
    """One kind's :class:`KindView` at one state of the store, built on first :meth:`get`.

    ``build`` is called at most once, with this object, and only while the kind is still in
    the state this view stands for (the store calls :meth:`settle` before changing it).
    """

    __slots__ = ("__weakref__", "_build", "_view")

    def __init__(self, build: Callable[[LazyView], KindView]) -> None:
        self._build: Callable[[LazyView], KindView] | None = build
        self._view: KindView | None = None

    @classmethod
    def of(cls, view: KindView) -> LazyView:
        """A view that is already built."""
        lazy = cls.__new__(cls)
        lazy._build = None
        lazy._view = view
        return lazy

    @property
    def built(self) -> bool:
        return self._view is not None

    def get(self) -> KindView:
        view = self._view
        if view is None:
            build, self._build = self._build, None
            assert build is not None
            view = self._view = build(self)
        return view

    def detach(self, build: Callable[[LazyView], KindView]) -> None:
        """The kind is about to change: build, when read, with ``build`` (over the state this
        view stands for, kept aside) instead."""
        if self._view is None:
            self._build = build


EMPTY_LAZY_VIEW = LazyView.of(EMPTY_VIEW)


class Snapshot:
    """Every object at one resourceVersion; never changes after it is taken."""

    __slots__ = ("_views", "resource_version")

    def __init__(self, resource_version: int, views: ViewsByType) -> None:
        self.resource_version = resource_version
        self._views = views

    def objects(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: Selector | None = None,
    ) -> Items:
        """The objects of ``kind`` sorted by namespace then name, optionally filtered.

        Unfiltered, the same object for every snapshot of the same version of the kind, a new
        one after it changed (loops compare them by identity, see :meth:`changes`)."""
        items = self._views.get(kind.type, EMPTY_LAZY_VIEW).get().items
        if namespace and kind.namespaced:
            begin = items.bisect((namespace, ""))
            items = items[begin : items.bisect((namespace + "\0", ""))]
        if selector is not None and not selector.empty:
            items = Items([o for o in items if selector.matches(o.metadata.labels)])
        return items

    def derived(
        self,
        kind: Kind,
        compute: Callable[[Sequence[Object]], T],
        update: Callable[[T, Sequence[Change]], T] | None = None,
    ) -> T:
        """``compute(objects of kind)``, worked out once per version of the kind and shared by
        every snapshot and loop that asks with the same (module-level) function; the result
        must be treated as immutable.

        ``update(earlier, changes)``, when given, is what ``compute`` gives for this version
        from what it gave for the kind's previous view and the objects that changed since,
        ``(before, after)`` pairs (None: absent), in key order; it is used when the store
        knows that previous view (a result for it is kept) and must not modify ``earlier``.
        """
        view = self._views.get(kind.type, EMPTY_LAZY_VIEW).get()
        memo = view.derived
        try:
            return cast("T", memo[compute])
        except KeyError:
            pass
        result: T | None = None
        if update is not None:
            for ancestor in view.base.ancestors:
                if compute in ancestor.derived:
                    earlier = cast("T", ancestor.derived[compute])
                    result = update(earlier, _changes(ancestor, view))
                    break
        if result is None:
            result = compute(view.items)
        memo[compute] = result
        return result

    def changes(self, kind: Kind, since: Sequence[Object]) -> list[Change] | None:
        """The objects of ``kind`` that changed from ``since`` (what :meth:`objects` gave
        for the kind, unfiltered, in an earlier snapshot) to this snapshot, ``(before,
        after)`` pairs (None: absent) in key order; None when that is no longer known (the
        caller reads every object instead). Costs what changed, not what is stored."""
        view = self._views.get(kind.type, EMPTY_LAZY_VIEW).get()
        if since is view.items:
            return []
        for ancestor in view.base.ancestors:
            if ancestor.items is since:
                return _changes(ancestor, view)
        return None

    def replaced(self, kind: Kind, shown: Mapping[Key, Object | None]) -> Snapshot:
        """This snapshot with the objects of ``kind`` under ``shown``'s keys (namespace, name)
        as given there (None: absent): what a backend whose writes become visible only later
        shows its readers meanwhile. Costs what is replaced, as a store's next view does."""
        before = self._views.get(kind.type, EMPTY_LAZY_VIEW).get()
        present = {key: obj for key, obj in shown.items() if obj is not None}
        view = KindView.updated(before, present, shown)
        return Snapshot(self.resource_version, {**self._views, kind.type: LazyView.of(view)})

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object | None:
        """One object, or None; a namespaced kind's empty namespace means ``default``."""
        ns = (namespace or "default") if kind.namespaced else ""
        return self._views.get(kind.type, EMPTY_LAZY_VIEW).get().index.get((ns, name))

    def __len__(self) -> int:
        return sum(len(view.get().items) for view in self._views.values())


def _changes(ancestor: _Ancestor, view: KindView) -> list[Change]:
    """What changed from ``ancestor`` to ``view``, in key order."""
    now = view.index
    found: list[Change] = []
    for key in sorted(ancestor.before):
        before, after = ancestor.before[key], now.get(key)
        if before is not after:
            found.append((before, after))
    return found
