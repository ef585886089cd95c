"""The kind table: every kind koordpy stores, with its names as kubectl prints them.

``Registry`` is an explicit, immutable table (no import-time registration). ``default_registry()``
builds the table of every kind in :mod:`apis`; tests may build their own.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from apis.errors import UnknownKind
from apis.meta import Object

__all__ = ["Kind", "Registry", "default_registry"]

_K = TypeVar("_K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind: its Struct type and the names a user may call it by."""

    type: type[Object]
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    #: Other ``apiVersion`` values accepted on input and rewritten to the canonical one.
    api_version_aliases: tuple[str, ...] = ()
    singular: str = field(default="")
    #: ``kind`` and ``apiVersion`` read once from the Struct's defaults (hot paths use them).
    kind: str = field(init=False, default="")
    api_version: str = field(init=False, default="")
    key: str = field(init=False, default="")

    def __post_init__(self) -> None:
        kind = _default_field(self.type, "kind")
        api_version = _default_field(self.type, "api_version")
        group = api_version.rpartition("/")[0]
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "api_version", api_version)
        # Stable identifier of the kind (storage and wire): ``group/Kind`` or ``Kind``.
        object.__setattr__(self, "key", f"{group}/{kind}" if group else kind)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def qualified_plural(self) -> str:
        """``reservations.scheduling.koordinator.sh`` (``pods`` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def names(self) -> Iterator[str]:
        yield self.kind.lower()
        yield self.singular or self.kind.lower()
        yield self.plural
        yield self.qualified_plural
        yield from self.short_names


def _default_field(struct: type[Object], name: str) -> str:
    for info in msgspec.structs.fields(struct):
        if info.name == name:
            if not isinstance(info.default, str) or not info.default:
                raise TypeError(f"{struct.__name__}.{name} needs a non-empty default")
            return info.default
    raise TypeError(f"{struct.__name__} has no field {name}")


class Registry:
    """Lookup of kinds by (apiVersion, kind), by key, and by any user-facing name."""

    def __init__(self, kinds: Iterable[Kind]) -> None:
        self._kinds: tuple[Kind, ...] = tuple(kinds)
        self._by_gvk: dict[tuple[str, str], Kind] = {}
        self._by_key: dict[str, Kind] = {}
        self._by_name: dict[str, Kind] = {}
        self._by_type: dict[type[Object], Kind] = {}
        for kind in self._kinds:
            for version in (kind.api_version, *kind.api_version_aliases):
                self._claim(self._by_gvk, (version, kind.kind), kind)
            self._claim(self._by_key, kind.key, kind)
            self._by_type[kind.type] = kind
            for name in kind.names():
                self._by_name.setdefault(name.lower(), kind)

    @staticmethod
    def _claim(table: dict[_K, Kind], key: _K, kind: Kind) -> None:
        if key in table and table[key] is not kind:
            raise ValueError(f"kind {kind.key} clashes with {table[key].key} on {key!r}")
        table[key] = kind

    def __iter__(self) -> Iterator[Kind]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def for_gvk(self, api_version: str, kind: str) -> Kind:
        try:
            return self._by_gvk[(api_version, kind)]
        except KeyError:
            known = sorted({k.kind for k in self._kinds})
            if any(k.kind == kind for k in self._kinds):
                versions = sorted(
                    v
                    for k in self._kinds
                    if k.kind == kind
                    for v in (k.api_version, *k.api_version_aliases)
                )
                raise UnknownKind(
                    f"kind {kind!r} is not served in apiVersion {api_version!r}"
                    f" (served in {', '.join(versions)})"
                ) from None
            raise UnknownKind(
                f"unknown kind {kind!r} (apiVersion {api_version!r}); known kinds: "
                + ", ".join(known)
            ) from None

    def for_key(self, key: str) -> Kind:
        try:
            return self._by_key[key]
        except KeyError:
            raise UnknownKind(f"unknown kind key {key!r}") from None

    def for_type(self, struct: type[Object]) -> Kind:
        try:
            return self._by_type[struct]
        except KeyError:
            raise UnknownKind(f"{struct.__name__} is not a registered kind") from None

    def for_object(self, obj: Object) -> Kind:
        return self.for_type(type(obj))

    def resolve(self, name: str) -> Kind:
        """A kind from what a user typed.

        ``po``, ``pods``, ``Pod``, ``rsv``, ``queues.scheduling.x-k8s.io``...
        """
        found = self._by_name.get(name.lower())
        if found is None:
            raise UnknownKind(
                f'the server doesn\'t have a resource type "{name}"; known: '
                + ", ".join(sorted(k.plural for k in self._kinds))
            )
        return found


@functools.cache
def default_registry() -> Registry:
    """Every kind koordpy knows, in the order ``koordpy get all`` lists them."""
    from apis import catalog  # the table lives beside the kinds it names

    return Registry(catalog.KINDS)
