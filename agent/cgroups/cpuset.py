"""CPU sets as the kernel writes them (``0-3,8,10-11``), compared as sets."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

__all__ = ["MAX_CPUS", "MAX_TEXT", "CpuSet", "CpuSetError"]

#: Linux supports at most 8192 logical CPUs (``CONFIG_NR_CPUS``); larger ids are refused.
MAX_CPUS = 8192
#: Kubernetes bounds all annotations of an object to 256 KiB together.
MAX_TEXT = 256 * 1024


class CpuSetError(ValueError):
    """Text that is not a cpu list."""


class CpuSet(frozenset[int]):
    """An immutable set of logical CPU ids; ``str()`` is the kernel's list format."""

    __slots__ = ()

    def __new__(cls, cpus: Iterable[int] = ()) -> CpuSet:
        items = frozenset(cpus)
        for cpu in items:
            if type(cpu) is not int or cpu < 0:
                raise CpuSetError(f"cpu ids must be non-negative integers, got {cpu!r}")
        return super().__new__(cls, items)

    @classmethod
    def parse(cls, text: str) -> CpuSet:
        """``"0-3,8"`` -> {0, 1, 2, 3, 8}; empty text is the empty set."""
        if len(text) > MAX_TEXT:
            raise CpuSetError(f"cpu list too long: {len(text)} characters, at most {MAX_TEXT}")
        cpus: set[int] = set()
        for part in text.strip().split(","):
            part = part.strip()
            if not part:
                continue
            low, sep, high = part.partition("-")
            try:
                first = int(low)
                last = int(high) if sep else first
            except ValueError:
                raise CpuSetError(f"invalid cpu list {text!r}") from None
            if first < 0 or last < first:
                raise CpuSetError(f"invalid cpu range {part!r} in {text!r}")
            if last >= MAX_CPUS:
                raise CpuSetError(f"cpu id {last} in {part!r} is not below {MAX_CPUS}")
            cpus.update(range(first, last + 1))
        return cls(cpus)

    def ranges(self) -> Iterator[tuple[int, int]]:
        """Maximal runs of consecutive ids, in order."""
        ordered = sorted(self)
        start = prev = None
        for cpu in ordered:
            if start is None:
                start = prev = cpu
            elif prev is not None and cpu == prev + 1:
                prev = cpu
            else:
                assert prev is not None
                yield start, prev
                start = prev = cpu
        if start is not None and prev is not None:
            yield start, prev

    def __str__(self) -> str:
        return _format(self)

    def __repr__(self) -> str:
        return f"CpuSet({str(self)!r})"

    def __or__(self, other: frozenset[int]) -> CpuSet:  # type: ignore[override]
        return CpuSet(frozenset.__or__(self, other))

    def __and__(self, other: frozenset[int]) -> CpuSet:  # type: ignore[override]
        return CpuSet(frozenset.__and__(self, other))

    def __sub__(self, other: frozenset[int]) -> CpuSet:  # type: ignore[override]
        return CpuSet(frozenset.__sub__(self, other))


@functools.lru_cache(maxsize=4096)
def _format(cpus: CpuSet) -> str:
    # The same few sets (pools, bound pods) are printed every pass.
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in cpus.ranges())
