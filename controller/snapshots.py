"""Immutable views of the store for control loops.

A :class:`Snapshot` holds, per kind, a tuple of the (frozen) objects sorted by namespace and
name, and the resourceVersion it reflects (kinds are found by their Struct type, so lookups
never compute a kind's names). The store keeps one :class:`KindView` per kind and
rebuilds it only after that kind changed, so taking snapshots repeatedly costs little.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from apis.kinds import Kind
from apis.labels import Selector
from apis.meta import Object

ViewsByType = Mapping[type[Object], "KindView"]

__all__ = ["KindView", "Snapshot"]


@dataclass(frozen=True, slots=True)
class KindView:
    """The objects of one kind at one version: sorted items and a (namespace, name) index."""

    items: tuple[Object, ...]
    index: Mapping[tuple[str, str], Object]

    @classmethod
    def build(cls, objects: Mapping[tuple[str, str], Object]) -> KindView:
        index = dict(objects)
        return cls(tuple(index[key] for key in sorted(index)), index)


EMPTY_VIEW = KindView((), {})


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
        items = self._views.get(kind.type, EMPTY_VIEW).items
        if namespace and kind.namespaced:
            items = tuple(o for o in items if o.metadata.namespace == namespace)
        if selector is not None and not selector.empty:
            items = tuple(o for o in items if selector.matches(o.metadata.labels))
        return items

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object | None:
        """One object, or None; a namespaced kind's empty namespace means ``default``."""
        ns = (namespace or "default") if kind.namespaced else ""
        return self._views.get(kind.type, EMPTY_VIEW).index.get((ns, name))

    def __len__(self) -> int:
        return sum(len(view.items) for view in self._views.values())
