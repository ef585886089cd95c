"""Named caches: every cache held in a module global, in one registry.

Each cache has a name, a bound (it is emptied when full: what it holds is cheap to work out
again) and a contract, the one sentence that says why a hit is right. :func:`clear_all`
empties every one (tests, a process that wants its memory back); :func:`registered` lists them.

Two kinds:

- :class:`Cache`: by an ordinary key (a type, a text).
- :class:`IdentityCache`: by an object's identity, for immutable objects worked out once (a
  pod spec's requests, a filter's rows). It holds the object with its value, so the object's
  ``id()`` is not reused while the entry lives, and a hit is only for that very object. These
  caches pay because the store hands out the same Python object for an object that did not
  change (the identity contract, :mod:`controller.store.snapshots`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

__all__ = ["Cache", "IdentityCache", "clear_all", "registered"]

K = TypeVar("K")
O = TypeVar("O")  # noqa: E741 - an object cached by identity
V = TypeVar("V")

_REGISTRY: dict[str, Cache[Any, Any] | IdentityCache[Any, Any]] = {}


def _register(cache: Cache[Any, Any] | IdentityCache[Any, Any]) -> None:
    if cache.name in _REGISTRY:
        raise ValueError(f"a cache named {cache.name!r} exists already")
    _REGISTRY[cache.name] = cache


class Cache(Generic[K, V]):
    """At most ``limit`` entries by key; emptied when full."""

    __slots__ = ("_data", "contract", "limit", "name")

    def __init__(self, name: str, *, limit: int, contract: str) -> None:
        self.name, self.limit, self.contract = name, limit, contract
        self._data: dict[K, V] = {}
        _register(self)

    def get(self, key: K) -> V | None:
        return self._data.get(key)

    def put(self, key: K, value: V) -> V:
        data = self._data
        if len(data) >= self.limit:
            data.clear()
        data[key] = value
        return value

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


class IdentityCache(Generic[O, V]):
    """At most ``limit`` entries by the identity of an object; emptied when full."""

    __slots__ = ("_data", "contract", "limit", "name")

    def __init__(self, name: str, *, limit: int, contract: str) -> None:
        self.name, self.limit, self.contract = name, limit, contract
        self._data: dict[int, tuple[O, V]] = {}
        _register(self)

    def get(self, obj: O) -> V | None:
        found = self._data.get(id(obj))
        return found[1] if found is not None and found[0] is obj else None

    def put(self, obj: O, value: V) -> V:
        data = self._data
        if len(data) >= self.limit:
            data.clear()
        data[id(obj)] = (obj, value)
        return value

    def clear(self) -> None:
        self._data.clear()

    def __len__(self) -> int:
        return len(self._data)


def registered() -> Mapping[str, Cache[Any, Any] | IdentityCache[Any, Any]]:
    """Every named cache, by name."""
    return dict(_REGISTRY)


def clear_all() -> None:
    """Empty every named cache."""
    for cache in _REGISTRY.values():
        cache.clear()
