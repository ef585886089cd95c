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
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

from apis.kinds import Kind
from apis.labels import Selector
from apis.meta import Object

ViewsByType = Mapping[type[Object], "LazyView"]
T = TypeVar("T")
#: An object before and after a change (None: absent), for :meth:`Snapshot.derived`.
Change = tuple[Object | None, Object | None]

__all__ = ["Change", "KindView", "LazyView", "Snapshot"]


@dataclass(frozen=True, slots=True)
class KindView:
    """The objects of one kind at one version: sorted items and a (namespace, name) index."""

    items: tuple[Object, ...]
    index: Mapping[tuple[str, str], Object]
    #: what loops worked out from ``items``, by the function that did (:meth:`Snapshot.derived`)
    derived: dict[Callable[[tuple[Object, ...]], object], object] = field(
        default_factory=dict, compare=False
    )
    #: ``[(view, keys)]``: the kind's view built before this one and the keys of the objects
    #: that changed since (set by the store; emptied when the next view is built), from which
    #: :meth:`Snapshot.derived` may update what was worked out instead of starting over
    base: list[tuple[KindView, frozenset[tuple[str, str]]]] = field(
        default_factory=list, compare=False
    )

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
        """The view of ``objects`` where ``before`` is the view of the same keys (``order``,
        sorted) and only the objects under ``changed`` were replaced since: their places are
        found by bisection, not every key looked up again (tuple keys hash anew each time)."""
        items = list(before.items)
        for key in changed:
            items[bisect.bisect_left(order, key)] = objects[key]
        return cls(tuple(items), dict(objects))


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
        if update is not None and view.base:
            ((before, keys),) = view.base
            if compute in before.derived:
                earlier = cast("T", before.derived[compute])
                old, new = before.index, view.index
                changes = [
                    (old.get(key), new.get(key))
                    for key in sorted(keys)
                    if old.get(key) is not new.get(key)
                ]
                result = update(earlier, changes)
        if result is None:
            result = compute(view.items)
        memo[compute] = result
        return result

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object | None:
        """One object, or None; a namespaced kind's empty namespace means ``default``."""
        ns = (namespace or "default") if kind.namespaced else ""
        return self._views.get(kind.type, EMPTY_LAZY_VIEW).get().index.get((ns, name))

    def __len__(self) -> int:
        return sum(len(view.get().items) for view in self._views.values())
