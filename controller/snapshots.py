"""Immutable views of the store for control loops.

A :class:`Snapshot` holds, per kind, a tuple of the (frozen) objects sorted by namespace and
name, and the resourceVersion it reflects (kinds are found by their Struct type, so lookups
never compute a kind's names). The store keeps one :class:`KindView` per kind and
rebuilds it only after that kind changed, so taking snapshots repeatedly costs little.

A kind's view is built when a snapshot first reads it (a :class:`LazyView`, shared by every
snapshot taken while that kind stays unchanged), not when the snapshot is taken: a loop that
reads only pods pays nothing for the thousands of nodes whose reports changed since its last
pass. Before a kind changes, the store sets aside its objects (a shallow copy of the map) for
any snapshot still holding that kind unread (:meth:`LazyView.detach`), so a snapshot reads the
state it was taken at, however late it reads it, and the view is built only if it does.

What changed between views. Each view built after another knows, for the few views of its
kind built before it (:data:`LINEAGE_DEPTH`), which objects changed since and what they were
then (:class:`Lineage`). A loop that keeps what it read last updates its own state from
:meth:`Snapshot.changes`, and :meth:`Snapshot.derived` updates a result worked out for any of
those views, so neither walks every object after a write.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from apis.kinds import Kind
from apis.labels import Selector
from apis.meta import Object

ViewsByType = Mapping[type[Object], "LazyView"]
T = TypeVar("T")
#: An object before and after a change (None: absent), for :meth:`Snapshot.derived`.
Change = tuple[Object | None, Object | None]

__all__ = ["LINEAGE_DEPTH", "Change", "KindView", "LazyView", "Lineage", "Snapshot"]

#: Earlier views of a kind whose changes a view keeps (see :class:`Lineage`).
LINEAGE_DEPTH = 4
#: Views an index may be layered over before it is copied whole (see :class:`_Layered`).
MAX_LAYERS = 8
#: Changed objects past which a view keeps no lineage to an earlier one: reading every object
#: again costs about as much by then.
MAX_LINEAGE_CHANGES = 4_096

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Ancestor:
    """An earlier view: its items, what was worked out from it, and, for every key that
    changed since, the object it held then (None: absent)."""

    items: tuple[Object, ...]
    derived: dict[Callable[[tuple[Object, ...]], object], object]
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

    items: tuple[Object, ...]
    index: Mapping[tuple[str, str], Object]
    #: what loops worked out from ``items``, by the function that did (:meth:`Snapshot.derived`)
    derived: dict[Callable[[tuple[Object, ...]], object], object] = field(
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
        index = dict(objects)
        keys = sorted(index) if order is None else order
        return cls(tuple(map(index.__getitem__, keys)), index)

    @classmethod
    def updated(
        cls,
        before: KindView,
        objects: Mapping[tuple[str, str], Object],
        order: Sequence[tuple[str, str]],
        changed: Iterable[tuple[str, str]],
    ) -> KindView:
        """The view of ``objects`` (their keys sorted: ``order``) where ``before`` is the
        view of the kind before the objects under ``changed`` were replaced, added or
        removed: their places are found by bisection, not every key looked up again (tuple
        keys hash anew each time), and the index shares ``before``'s (:class:`_Layered`)."""
        items = list(before.items)
        old = before.index
        top: dict[Key, Object | None] = {}
        # In key order, everything before the key at hand is in its new place already.
        for key in sorted(changed):
            at = bisect.bisect_left(order, key)
            obj = objects.get(key)
            top[key] = obj
            if obj is None:
                if key in old:
                    del items[at]
            elif key in old:
                items[at] = obj
            else:
                items.insert(at, obj)
        return cls(tuple(items), _Layered.over(old, top))

    @staticmethod
    def sorted_keys(
        before: Sequence[Key], objects: Mapping[Key, Object], changed: Iterable[Key]
    ) -> list[Key]:
        """The sorted keys of ``objects``, from ``before`` (sorted, not modified), the keys
        before the objects under ``changed`` came or went: bisection, not a new sort."""
        keys = list(before)
        for key in changed:
            at = bisect.bisect_left(keys, key)
            here = at < len(keys) and keys[at] == key
            if key in objects:
                if not here:
                    keys.insert(at, key)
            elif here:
                del keys[at]
        return keys


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
        depth = base._depth + 1 if isinstance(base, _Layered) else 1
        if depth <= MAX_LAYERS:
            return cls(base, top, depth)
        return cls(base, top, 0)._flat()

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


EMPTY_VIEW = KindView((), {})


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
    ) -> tuple[Object, ...]:
        """The objects of ``kind`` sorted by namespace then name, optionally filtered."""
        items = self._views.get(kind.type, EMPTY_LAZY_VIEW).get().items
        if namespace and kind.namespaced:
            items = tuple(o for o in items if o.metadata.namespace == namespace)
        if selector is not None and not selector.empty:
            items = tuple(o for o in items if selector.matches(o.metadata.labels))
        return items

    def derived(
        self,
        kind: Kind,
        compute: Callable[[tuple[Object, ...]], T],
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

    def changes(self, kind: Kind, since: tuple[Object, ...]) -> list[Change] | None:
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
