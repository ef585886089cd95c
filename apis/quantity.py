"""Kubernetes quantities: parsed at the edge, integers in canonical units inside.

Grammar (as Kubernetes accepts it)::

    quantity  := [+-] number [suffix]
    number    := digits | digits "." [digits] | "." digits
    suffix    := "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei"            (binary SI)
               | "n" | "u" | "m" | "" | "k" | "M" | "G" | "T" | "P" | "E"   (decimal SI)
               | ("e" | "E") [+-] digits                             (decimal exponent)

Canonical units: CPU-like resources are held in millicores, everything else in whole units
(bytes for memory). Like Kubernetes' ``MilliValue()``/``Value()``, a value finer than the
canonical unit is rounded up (away from zero).

Formatting back is canonical and lossless for the integer held: millicores print as ``500m`` or
``2``; byte-like resources use the largest binary suffix that divides exactly (``4Gi``), else
a decimal one; every other resource uses the largest exact decimal suffix (``5k``).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Final

__all__ = [
    "MAX_QUANTITY",
    "MILLI_RESOURCES",
    "QuantityError",
    "format_quantity",
    "is_bytes_resource",
    "is_milli_resource",
    "parse_quantity",
    "to_canonical",
]

#: Kubernetes stores quantities as int64 scaled values; we reject anything beyond that.
MAX_QUANTITY = 2**63 - 1

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)
_DECIMAL_OUT = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3))
_BINARY_OUT = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))
#: The resources held in millicores.
MILLI_RESOURCES: Final = frozenset({"cpu", "requests.cpu", "limits.cpu"})


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity."""


def is_milli_resource(name: str) -> bool:
    """CPU-like resources are compared and held in millicores."""
    return name in MILLI_RESOURCES


@functools.lru_cache(maxsize=1024)
def is_bytes_resource(name: str) -> bool:
    """Resources measured in bytes (formatted with binary suffixes when exact)."""
    leaf = name.rsplit("/", 1)[-1]
    return leaf.endswith(("memory", "storage")) or leaf.startswith(
        ("hugepages-", "requests.hugepages-")
    )


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity into an exact rational number of base units."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or number, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity must be finite, got {value!r}")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or number, got {type(value).__name__}")
    match = _PATTERN.match(value.strip())
    if match is None or value != value.strip() or not value:
        raise QuantityError(f"quantity {value!r} does not match the quantity format")
    number = Fraction(match["number"] if match["number"][-1] != "." else match["number"][:-1])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        scale = Fraction(_BINARY[suffix])
    elif suffix in _DECIMAL:
        scale = _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"quantity {value!r} has an exponent out of range")
        scale = Fraction(10) ** exponent
    result = number * scale
    return -result if match["sign"] == "-" else result


def _round_away(value: Fraction) -> int:
    return math.ceil(value) if value >= 0 else math.floor(value)


def to_canonical(name: str, value: str | int | float) -> int:
    """Parse ``value`` for resource ``name`` into its canonical integer unit."""
    if isinstance(value, str):
        # Reports are full of plain integers ("123456789") and millis ("250m"), each seen
        # once: read them directly (exactly what the general path gives, without Fraction).
        digits = value[:-1] if value[-1:] == "m" else value
        if 0 < len(digits) <= 15 and digits.isascii() and digits.isdigit():
            amount = int(digits)
            if digits is value:
                return amount * 1000 if is_milli_resource(name) else amount
            return amount if is_milli_resource(name) else -(-amount // 1000)
        return _canonical_text(name, value)
    return _canonical(name, value)


@functools.lru_cache(maxsize=8192)
def _canonical_text(name: str, value: str) -> int:
    # Manifests repeat the same few quantities ("500m", "4Gi") over and over.
    return _canonical(name, value)


def _canonical(name: str, value: str | int | float) -> int:
    exact = parse_quantity(value)
    scaled = _round_away(exact * 1000) if is_milli_resource(name) else _round_away(exact)
    if abs(scaled) > MAX_QUANTITY:
        raise QuantityError(f"quantity {value!r} is too large")
    return scaled


def _format_suffixed(amount: int, table: tuple[tuple[str, int], ...], base: int) -> str | None:
    for suffix, exponent in table:
        unit = base**exponent
        if amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return None


def _format_units(amount: int, *, binary: bool) -> str:
    if amount == 0:
        return "0"
    sign = "-" if amount < 0 else ""
    magnitude = abs(amount)
    if magnitude % 1000 and (not binary or magnitude % 1024):
        # Every suffix is a multiple of 1000 (or of 1024 for binary ones): none fits.
        return sign + str(magnitude)
    text = None
    if binary:
        text = _format_suffixed(magnitude, _BINARY_OUT, 2)
    if text is None:
        text = _format_suffixed(magnitude, _DECIMAL_OUT, 10) or str(magnitude)
    return sign + text


@functools.lru_cache(maxsize=8192)
def format_quantity(name: str, amount: int) -> str:
    """Format a canonical integer for resource ``name`` back into a quantity string."""
    if is_milli_resource(name):
        if amount % 1000 == 0:
            return _format_units(amount // 1000, binary=False)
        return f"{amount}m"
    return _format_units(amount, binary=is_bytes_resource(name))
