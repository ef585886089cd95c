"""CPU sets as the kernel writes them (``0-3,8,10-11``), compared as sets."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

from apis.bounded import MAX_CPUS, MAX_TEXT, CpuListError, parse_cpu_list

__all__ = ["MAX_CPUS", "MAX_TEXT", "CpuSet", "CpuSetError"]


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
        """``"0-3,8"`` -> {0, 1, 2, 3, 8}; empty text is the empty set.

        Bounded as :func:`apis.bounded.parse_cpu_list` (256 KiB, ids below 8192, refused before
        any range is expanded); :class:`CpuSetError` otherwise.
        """
        try:
            return cls(parse_cpu_list(text, ""))
        except CpuListError as err:
            raise CpuSetError(str(err)) from None

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
