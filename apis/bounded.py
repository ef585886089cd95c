"""Bounded reading of annotation and label values: untrusted text any pod's author controls.

Every reader of a Koordinator annotation goes through here, so one hostile value costs the
scheduler and the agent a bounded amount of time and memory and ends in a clean refusal:

- text over :data:`MAX_TEXT` (Kubernetes' budget for all annotations of one object) is refused
  before it is looked at;
- untyped JSON (:func:`decode_any`) is refused when it nests deeper than :data:`MAX_DEPTH`,
  found by a linear scan before the decoder recurses; typed JSON (:func:`decode`) has the
  nesting of its type, and list lengths are bounded where the type says so
  (``Annotated[..., msgspec.Meta(max_length=...)]``);
- a cpu list (:func:`parse_cpu_list`) is refused by its largest id before any range is
  expanded, so ``0-1000000000`` costs nothing; :func:`check_cpus` refuses one naming a CPU the
  node does not have.

Every refusal is a :class:`BoundedError` (a ``ValueError``) naming what was read and why, with
the value quoted short (:func:`excerpt`) so a refusal never logs 256 KiB; ``what`` (empty for
none) prefixes the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, TypeVar

import msgspec

__all__ = [
    "MAX_CPUS",
    "MAX_DEPTH",
    "MAX_TEXT",
    "BoundedError",
    "CpuListError",
    "check_cpus",
    "check_text",
    "decode",
    "decode_any",
    "excerpt",
    "format_cpu_list",
    "nested_deeper",
    "parse_cpu_list",
]

#: Kubernetes bounds all annotations of an object to 256 KiB together.
MAX_TEXT: Final = 256 * 1024
#: Deepest nesting of arrays and objects an untyped JSON value may have.
MAX_DEPTH: Final = 32
#: Linux supports at most 8192 logical CPUs (``CONFIG_NR_CPUS``); larger ids are refused.
MAX_CPUS: Final = 8192

_EXCERPT: Final = 64
_T = TypeVar("_T")
_ID_DIGITS: Final = len(str(MAX_CPUS))


class BoundedError(ValueError):
    """A value refused because it is too large, too deep or not what was expected.

    ``detail`` is the reason alone: the decoder's own text for JSON it refused.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class CpuListError(BoundedError):
    """Text that is not a cpu list, or names a CPU out of range."""


def excerpt(text: str | bytes) -> str:
    """``repr`` of ``text``, cut to its first characters (with the full length) when long."""
    if len(text) <= _EXCERPT:
        return repr(text)
    return f"{text[:_EXCERPT]!r}... ({len(text)} characters)"


def _prefix(what: str) -> str:
    return f"{what}: " if what else ""


def check_text(text: str | bytes, what: str, *, limit: int = MAX_TEXT) -> None:
    """Refuse ``text`` longer than ``limit`` characters (bytes), naming ``what``."""
    if len(text) > limit:
        raise BoundedError(f"{_prefix(what)}{len(text)} characters is too long, at most {limit}")


#: What :func:`nested_deeper` keeps of a text: brackets (braces read as brackets) and quotes.
_STRUCTURE: Final = bytes.maketrans(b"{}", b"[]"), bytes(set(range(256)) - set(b'[]{}"'))


def _outside_strings(raw: bytes) -> bytes:
    """The brackets of the JSON text ``raw`` that are not inside strings (all of them after a
    quote that never closes are). Only C-speed bytes operations: linear in ``len(raw)``."""
    if b'\\"' in raw:  # escaped quotes are no quotes; escaped backslashes go first (in
        if b"\\\\" in raw:  # ``\\\\"`` the quote closes a string)
            raw = raw.replace(b"\\\\", b"")
        raw = raw.replace(b'\\"', b"")
    kept = raw.translate(*_STRUCTURE).replace(b'""', b"")  # strings without brackets
    if b'"' not in kept:
        return kept
    return b"".join(kept.split(b'"')[::2])


def nested_deeper(text: str | bytes, limit: int) -> bool:
    """Whether the JSON ``text`` nests arrays and objects deeper than ``limit`` (also when it
    is not JSON but a decoder would recurse that deep before noticing). Linear in the size of
    ``text`` (times the depth, for deeply nested text); strings are not counted."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    brackets = left = _outside_strings(raw)
    for _ in range(limit):  # each pass takes away the innermost level of pairs
        shorter = left.replace(b"[]", b"")
        if not shorter:
            return False
        if len(shorter) == len(left):
            break  # not JSON
        left = shorter
    depth = 0  # some left: deeper, or not JSON; count the levels as a decoder would go
    for byte in brackets:
        depth += 1 if byte == 0x5B else -1
        if depth > limit:
            return True
    return False


def _check_depth(text: str | bytes, what: str, limit: int) -> None:
    if nested_deeper(text, limit):
        raise BoundedError(f"{_prefix(what)}nested deeper than {limit} levels")


def decode(
    text: str | bytes,
    target: type[_T] | msgspec.json.Decoder[_T],
    what: str,
    *,
    limit: int = MAX_TEXT,
    depth: int | None = None,
) -> _T:
    """``text`` decoded as JSON into ``target`` (a type, or a decoder made for one).

    Raises :class:`BoundedError` for text over ``limit``, nesting deeper than ``depth`` (given
    for a ``target`` with untyped parts) or JSON that is not a ``target``.
    """
    check_text(text, what, limit=limit)
    if depth is not None:
        _check_depth(text, what, depth)
    try:
        if isinstance(target, msgspec.json.Decoder):
            return target.decode(text)
        return msgspec.json.decode(text, type=target)
    except msgspec.ValidationError as err:
        raise BoundedError(f"{_prefix(what)}{err}", str(err)) from None
    except (msgspec.DecodeError, RecursionError) as err:
        raise BoundedError(f"{_prefix(what)}invalid JSON: {err}", str(err)) from None


def decode_any(
    text: str | bytes, what: str, *, limit: int = MAX_TEXT, depth: int = MAX_DEPTH
) -> Any:
    """``text`` decoded as untyped JSON; :class:`BoundedError` for text over ``limit``,
    nesting deeper than ``depth`` or text that is not JSON."""
    check_text(text, what, limit=limit)
    _check_depth(text, what, depth)
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as err:
        raise BoundedError(f"{_prefix(what)}invalid JSON: {err}") from None


def _cpu_id(digits: str, part: str, what: str, limit: int) -> int:
    digits = digits.strip()
    if not digits.isascii() or not digits.isdigit():
        raise CpuListError(f"{_prefix(what)}{excerpt(part)} is not a cpu id or range")
    # Compared by length first: a thousand-digit id is never converted.
    if len(digits.lstrip("0")) > _ID_DIGITS or int(digits) >= limit:
        raise CpuListError(f"{_prefix(what)}cpu id {excerpt(digits)} is not below {limit}")
    return int(digits)


def parse_cpu_list(text: str, what: str = "cpu list", *, limit: int = MAX_CPUS) -> frozenset[int]:
    """``"0-3,8"`` -> ``{0, 1, 2, 3, 8}`` (the kernel's format; spaces and overlaps allowed,
    blank text is the empty set).

    Raises :class:`CpuListError` for text over :data:`MAX_TEXT`, a part that is not an id or
    an ascending range, or an id not below ``limit``: each is refused before it is expanded.
    """
    if len(text) > MAX_TEXT:
        raise CpuListError(
            f"{_prefix(what)}cpu list of {len(text)} characters is too long, at most {MAX_TEXT}"
        )
    cpus: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        low, dash, high = part.partition("-")
        first = _cpu_id(low, part, what, limit)
        last = _cpu_id(high, part, what, limit) if dash else first
        if last < first:
            raise CpuListError(f"{_prefix(what)}cpu range {excerpt(part)} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 3, 8, 10, 11}`` -> ``"0-3,8,10-11"``; the empty set is ``""``."""
    ordered = sorted(cpus)
    parts: list[str] = []
    start = 0
    for index in range(1, len(ordered) + 1):
        if index < len(ordered) and ordered[index] == ordered[index - 1] + 1:
            continue
        first, last = ordered[start], ordered[index - 1]
        parts.append(str(first) if first == last else f"{first}-{last}")
        start = index
    return ",".join(parts)


def check_cpus(cpus: frozenset[int], known: frozenset[int], what: str = "cpuset") -> None:
    """Refuse ``cpus`` naming a CPU not in ``known`` (the node's), with :class:`CpuListError`
    naming the CPUs out of range and those the node has."""
    outside = cpus - known
    if outside:
        raise CpuListError(
            f"{_prefix(what)}CPUs {excerpt(format_cpu_list(outside))} are out of range:"
            f" the node has CPUs {excerpt(format_cpu_list(known)) if known else 'none'}"
        )
