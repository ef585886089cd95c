"""Go ``time.Duration`` strings (``1h``, ``24h0m0s``, ``1.5m``, ``300ms``) as exact integers.

Held as whole nanoseconds; formatted back the way Go's ``Duration.String()`` prints them
(``1h0m0s``, ``1m30s``, ``300ms``, ``0s``) so a round trip is stable.
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation

__all__ = ["Duration", "DurationError"]

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_MAX = 2**63 - 1


class DurationError(ValueError):
    """A value that is not a Go duration."""


class Duration:
    """An immutable duration with nanosecond precision."""

    __slots__ = ("nanoseconds",)
    nanoseconds: int

    def __init__(self, nanoseconds: int = 0) -> None:
        object.__setattr__(self, "nanoseconds", int(nanoseconds))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Duration is immutable")

    @classmethod
    def from_seconds(cls, seconds: float | int) -> Duration:
        return cls(round(Decimal(str(seconds)) * 1_000_000_000))

    @classmethod
    def parse(cls, text: str) -> Duration:
        if not isinstance(text, str):
            raise DurationError(f"duration must be a string like '1h30m', got {text!r}")
        body = text
        sign = 1
        if body[:1] in "+-" and body:
            sign = -1 if body[0] == "-" else 1
            body = body[1:]
        if body == "0":
            return cls(0)
        if not body:
            raise DurationError(f"invalid duration {text!r}")
        total = Decimal(0)
        pos = 0
        while pos < len(body):
            match = _PART.match(body, pos)
            if match is None:
                raise DurationError(f"invalid duration {text!r}")
            try:
                total += Decimal(match[1]) * _UNITS[match[2]]
            except InvalidOperation:
                raise DurationError(f"invalid duration {text!r}") from None
            pos = match.end()
        nanos = int(total)
        if nanos > _MAX:
            raise DurationError(f"duration {text!r} is out of range")
        return cls(sign * nanos)

    @property
    def seconds(self) -> float:
        return self.nanoseconds / 1_000_000_000

    def __str__(self) -> str:
        return _text(self.nanoseconds)

    def __repr__(self) -> str:
        return f"Duration({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Duration):
            return self.nanoseconds == other.nanoseconds
        return NotImplemented

    def __lt__(self, other: Duration) -> bool:
        return self.nanoseconds < other.nanoseconds

    def __hash__(self) -> int:
        return hash(self.nanoseconds)


def _trim(value: Decimal) -> str:
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


@functools.lru_cache(maxsize=1024)
def _text(nanos: int) -> str:
    """The Go form of ``nanos`` nanoseconds (reports repeat a few windows)."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(Decimal(nanos) / size) + unit
    hours, rest = divmod(nanos, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _trim(Decimal(rest) / 1_000_000_000)
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"
