"""ResourceList: an immutable mapping of resource name to canonical integer amount.

On the wire a ResourceList is ``{"cpu": "500m", "memory": "4Gi"}``; inside it is
``ResourceList({"cpu": 500, "memory": 4294967296})`` (millicores for CPU, whole units for
everything else, see :mod:`apis.quantity`). Arithmetic follows Kubernetes' ``quota`` helpers:
``a <= b`` only checks the keys present in ``b`` (a key missing from a limit is unconstrained).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from apis.quantity import QuantityError, format_quantity, to_canonical

__all__ = ["ResourceList"]


def _is_name(name: object) -> bool:
    """Runtime guard: callers with untyped input may hand in anything."""
    return isinstance(name, str) and bool(name)


class ResourceList(Mapping[str, int]):
    """Immutable, hashable resource amounts in canonical units."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = dict(data)
        for name, amount in items.items():
            if not _is_name(name):
                raise QuantityError(f"resource name must be a non-empty string, got {name!r}")
            if isinstance(amount, bool) or not isinstance(amount, int):
                raise QuantityError(f"resource {name!r} amount must be an integer, got {amount!r}")
        self._data: dict[str, int] = dict(sorted(items.items()))
        self._hash: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ResourceList:
        """Build from wire quantities; errors name the resource and the value."""
        if not isinstance(raw, Mapping):
            raise QuantityError(f"expected a map of resource quantities, got {raw!r}")
        parsed: dict[str, int] = {}
        for name, value in raw.items():
            if not _is_name(name):
                raise QuantityError(f"resource name must be a non-empty string, got {name!r}")
            try:
                parsed[name] = to_canonical(name, value)
            except QuantityError as err:
                raise QuantityError(f"resource {name!r}: {err}") from None
        # Every name and amount is checked above: skip the constructor's second pass.
        made = cls.__new__(cls)
        made._data = dict(sorted(parsed.items()))
        made._hash = None
        return made

    def to_wire(self) -> dict[str, str]:
        """Quantities as Kubernetes prints them."""
        return {name: format_quantity(name, amount) for name, amount in self._data.items()}

    # Mapping protocol -------------------------------------------------------------------
    def __getitem__(self, name: str) -> int:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ResourceList):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"ResourceList({self.to_wire()!r})"

    # Arithmetic ---------------------------------------------------------------------------
    def get_amount(self, name: str) -> int:
        """Amount of ``name``, 0 when absent."""
        return self._data.get(name, 0)

    def __add__(self, other: Mapping[str, int]) -> ResourceList:
        merged = dict(self._data)
        for name, amount in other.items():
            merged[name] = merged.get(name, 0) + amount
        return ResourceList(merged)

    def __sub__(self, other: Mapping[str, int]) -> ResourceList:
        merged = dict(self._data)
        for name, amount in other.items():
            merged[name] = merged.get(name, 0) - amount
        return ResourceList(merged)

    def fits_in(self, limit: Mapping[str, int]) -> bool:
        """``self <= limit`` over the keys of ``limit`` only (Kubernetes ``LessThanOrEqual``)."""
        return all(self._data.get(name, 0) <= cap for name, cap in limit.items())

    def exceeded(self, limit: Mapping[str, int]) -> tuple[str, ...]:
        """Names of ``limit`` that ``self`` exceeds."""
        return tuple(name for name, cap in limit.items() if self._data.get(name, 0) > cap)

    def mask(self, names: Iterable[str]) -> ResourceList:
        """Only the given resource names."""
        keep = set(names)
        return ResourceList({k: v for k, v in self._data.items() if k in keep})

    def nonzero(self) -> ResourceList:
        """Drop zero amounts."""
        return ResourceList({k: v for k, v in self._data.items() if v != 0})

    def clamp_min(self, floor: int = 0) -> ResourceList:
        """Raise every amount to at least ``floor``."""
        return ResourceList({k: max(v, floor) for k, v in self._data.items()})

    @staticmethod
    def total(lists: Iterable[Mapping[str, int]]) -> ResourceList:
        """Sum of many resource lists."""
        merged: dict[str, int] = {}
        for item in lists:
            for name, amount in item.items():
                merged[name] = merged.get(name, 0) + amount
        return ResourceList(merged)
