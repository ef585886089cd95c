"""ResourceList: an immutable mapping of resource name to canonical integer amount.

On the wire a ResourceList is ``{"cpu": "500m", "memory": "4Gi"}``; inside it is
``ResourceList({"cpu": 500, "memory": 4294967296})`` (millicores for CPU, whole units for
everything else, see :mod:`apis.quantity`). Arithmetic follows Kubernetes' ``quota`` helpers:
``a <= b`` only checks the keys present in ``b`` (a key missing from a limit is unconstrained).

A list decoded from a map of plain and milli numbers only (``{"cpu": "3790m", "memory":
"2151672808"}``, what reports are made of) is checked against their grammar when decoded and
read into amounts when first used: most of a NodeMetric's figures are never read by the
controller. Such a list keeps the text it came with (:meth:`ResourceList.stored_form`), as an
API server keeps a custom resource's quantities; :meth:`ResourceList.wire_form` is canonical.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from apis.quantity import (
    MILLI_RESOURCES,
    QuantityError,
    format_quantity,
    is_bytes_resource,
    to_canonical,
)

__all__ = ["ResourceList", "ResourceTally"]


def _deferrable(values: Iterable[object]) -> bool:
    """Whether every value is a plain or milli number as :func:`format_quantity` could print
    one: ASCII digits without a leading zero (1 to 15 of them), or ``"0"``, then an optional
    ``m``. (String methods: a regular expression per value costs a third more.)"""
    for value in values:
        if type(value) is not str:
            return False
        digits = value[:-1] if value[-1:] == "m" else value
        if not (digits.isdigit() and digits.isascii() and len(digits) <= 15):
            return False
        if digits[0] == "0" and value != "0":
            return False
    return True


def _is_name(name: object) -> bool:
    """Runtime guard: callers with untyped input may hand in anything."""
    return isinstance(name, str) and bool(name)


def _read(raw: Mapping[str, Any]) -> tuple[dict[str, int], bool]:
    """The amounts of a wire map, and whether it is canonical: names in order, every quantity
    exactly as :func:`format_quantity` prints its amount. Plain and milli quantities are read
    without the general parser (no leading zero; a plain amount that some suffix divides,
    ``"2000"`` or ``"1024"`` bytes, prints with the suffix)."""
    parsed: dict[str, int] = {}
    canonical = True
    previous = ""
    milli = MILLI_RESOURCES
    for name, value in raw.items():
        if type(name) is not str or not name:
            raise QuantityError(f"resource name must be a non-empty string, got {name!r}")
        if name <= previous:
            canonical = False
        previous = name
        if type(value) is str:
            milli_text = value[-1:] == "m"
            digits = value[:-1] if milli_text else value
            if 0 < len(digits) <= 15 and digits.isdigit() and digits.isascii():
                number = int(digits)
                exact = len(digits) == 1 or digits[0] != "0"
                if name in milli:
                    if milli_text:
                        parsed[name] = number
                        canonical = canonical and exact and number % 1000 != 0
                    else:
                        parsed[name] = number * 1000
                        canonical = canonical and exact and (number == 0 or number % 1000 != 0)
                elif milli_text:
                    parsed[name] = -(-number // 1000)
                    canonical = False
                else:
                    parsed[name] = number
                    canonical = (
                        canonical
                        and exact
                        and (
                            number == 0
                            or (
                                number % 1000 != 0
                                and (number % 1024 != 0 or not is_bytes_resource(name))
                            )
                        )
                    )
                continue
        canonical = False
        try:
            parsed[name] = to_canonical(name, value)
        except QuantityError as err:
            raise QuantityError(f"resource {name!r}: {err}") from None
    return parsed, canonical


class ResourceList(Mapping[str, int]):
    """Immutable, hashable resource amounts in canonical units."""

    __slots__ = ("_data", "_hash", "_raw", "_wire")

    def __init__(self, data: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = dict(data)
        for name, amount in items.items():
            if not _is_name(name):
                raise QuantityError(f"resource name must be a non-empty string, got {name!r}")
            if isinstance(amount, bool) or not isinstance(amount, int):
                raise QuantityError(f"resource {name!r} amount must be an integer, got {amount!r}")
        self._data: dict[str, int] = dict(sorted(items.items()))
        self._hash: int | None = None
        #: the wire form, once known (kept from a canonical wire map, or made by to_wire)
        self._wire: dict[str, str] | None = None
        #: the wire map it was decoded from, when its reading was deferred
        self._raw: dict[str, str] | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ResourceList:
        """Build from wire quantities; errors name the resource and the value."""
        if type(raw) is not dict and not isinstance(raw, Mapping):
            raise QuantityError(f"expected a map of resource quantities, got {raw!r}")
        return cls.adopt(dict(raw))

    @classmethod
    def adopt(cls, raw: dict[str, Any]) -> ResourceList:
        """:meth:`parse` of a map nobody else holds (a decoder's fresh dict): when every
        quantity in it is already canonical and in name order, it is kept as the wire form.
        A map of plain and milli numbers only is checked now and read when first used."""
        made = cls.__new__(cls)
        made._hash = None
        if raw and _deferrable(raw.values()) and "" not in raw:
            made._raw = raw
            made._wire = None
            return made
        parsed, canonical = _read(raw)
        # Every name and amount is checked by _read: skip the constructor's second pass.
        if canonical:
            made._data = parsed
            made._wire = raw
        else:
            made._data = dict(sorted(parsed.items()))
            made._wire = None
        made._raw = None
        return made

    def __getattr__(self, name: str) -> Any:
        # Only the amounts of a list whose reading was deferred (see adopt) are ever missing.
        if name != "_data":
            raise AttributeError(name)
        raw = self._raw
        assert raw is not None
        parsed, canonical = _read(raw)
        if canonical:
            self._wire = raw
            data = parsed
        else:
            data = dict(sorted(parsed.items()))
        self._data = data
        return data

    def any_negative(self) -> bool:
        """Whether an amount is below 0 (a list of plain numbers, read later, never is)."""
        if self._raw is not None:
            return False
        return any(amount < 0 for amount in self._data.values())

    def stored_form(self) -> Mapping[str, str]:
        """The quantities to store: the text a deferred list came with (it reads back to the
        same amounts), else :meth:`wire_form`. Do not modify it."""
        raw = self._raw
        return raw if raw is not None else self.wire_form()

    def to_wire(self) -> dict[str, str]:
        """Quantities as Kubernetes prints them."""
        return dict(self.wire_form())

    def wire_form(self) -> Mapping[str, str]:
        """:meth:`to_wire` without the copy, for encoders (do not modify it)."""
        wire = self._wire
        if wire is None:
            data = self._data  # reading a deferred list finds whether its text is canonical
            wire = self._wire
            if wire is None:
                wire = self._wire = {
                    name: format_quantity(name, amount) for name, amount in data.items()
                }
        return wire

    @property
    def amounts(self) -> Mapping[str, int]:
        """The amounts as a plain dict, names in order, for hot loops (its ``get`` and
        ``in`` run at C speed, where this Mapping's are Python calls). Shared: never modify
        it."""
        return self._data

    # Mapping protocol -------------------------------------------------------------------
    def __getitem__(self, name: str) -> int:
        return self._data[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def get(self, name: str, default: Any = None) -> Any:  # Mapping's, without a KeyError
        return self._data.get(name, default)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if type(other) is ResourceList or isinstance(other, ResourceList):
            raw = self._raw
            if raw is not None and raw == other._raw:
                return True  # the same text: the same amounts, without reading them
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


class ResourceTally:
    """A running :meth:`ResourceList.total`: lists are added and taken away one at a time, and
    :meth:`total` is what ``ResourceList.total`` of the lists added and not taken away gives
    (a resource no such list names is left out, one they name with 0 is kept)."""

    __slots__ = ("_sums",)

    def __init__(self) -> None:
        #: resource -> (sum, how many of the lists name it)
        self._sums: dict[str, tuple[int, int]] = {}

    def add(self, amounts: Mapping[str, int], sign: int = 1) -> None:
        """Count ``amounts`` in (``sign`` -1: take them away again)."""
        sums = self._sums
        for name, amount in amounts.items():
            total, count = sums.get(name, (0, 0))
            sums[name] = (total + sign * amount, count + sign)

    def remove(self, amounts: Mapping[str, int]) -> None:
        self.add(amounts, -1)

    def total(self) -> ResourceList:
        return ResourceList({name: total for name, (total, count) in self._sums.items() if count})
