"""Hostile cpu lists in annotations are refused cleanly, in bounded time and memory.

A ``scheduling.koordinator.sh/resource-status`` cpuset such as ``0-1000000000``
must not be expanded into a billion-element set by the scheduler's parser
(``controller.scheduler.numaresource.status``) nor by the agent's (``agent.cgroups.cpuset``).
"""

from __future__ import annotations

import contextlib
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.cgroups.cpuset import MAX_CPUS, CpuSet, CpuSetError
from controller.scheduler.numaresource.status import CpuListError, parse_cpu_list

Parser = Callable[[str], frozenset[int]]
PARSERS: list[tuple[Parser, type[Exception]]] = [
    (parse_cpu_list, CpuListError),
    (CpuSet.parse, CpuSetError),
]
BUDGET_BYTES = 8 * 1024 * 1024


def _peak(parse: Parser, text: str, error: type[Exception]) -> int:
    tracemalloc.start()
    try:
        with contextlib.suppress(error):
            parse(text)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("parse", "error"), PARSERS)
def test_a_huge_range_is_refused_naming_the_value(parse: Parser, error: type[Exception]) -> None:
    """``0-1000000000`` is refused by id bound, not expanded."""
    with pytest.raises(error, match="1000000000"):
        parse("0-1000000000")


@pytest.mark.parametrize(("parse", "error"), PARSERS)
def test_a_range_past_the_cap_costs_no_memory(parse: Parser, error: type[Exception]) -> None:
    """A range just big enough to show growth stays within the memory budget."""
    assert _peak(parse, f"0-{20 * MAX_CPUS}", error) < 256 * 1024


@pytest.mark.parametrize(("parse", "error"), PARSERS)
def test_ids_up_to_the_cap_still_parse(parse: Parser, error: type[Exception]) -> None:
    """The largest machine Linux supports still has its full cpu list accepted."""
    assert parse(f"0-{MAX_CPUS - 1}") == frozenset(range(MAX_CPUS))
    with pytest.raises(error, match=str(MAX_CPUS)):
        parse(str(MAX_CPUS))


@pytest.mark.parametrize(("parse", "error"), PARSERS)
def test_overlong_text_is_refused(parse: Parser, error: type[Exception]) -> None:
    """Text over the Kubernetes annotation budget (256 KiB) is refused before splitting."""
    with pytest.raises(error, match="too long"):
        parse("1," * (200 * 1024))


_hostile = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="0123456789-, ", max_size=60),
    st.lists(st.tuples(st.integers(-(2**70), 2**70), st.integers(-(2**70), 2**70)), max_size=8).map(
        lambda pairs: ",".join(f"{a}-{b}" for a, b in pairs)
    ),
    st.integers(0, 2**64).map(lambda n: f"0-{n}"),
)


@pytest.mark.parametrize(("parse", "error"), PARSERS)
@settings(max_examples=150, deadline=500)
@given(text=_hostile)
def test_fuzz_clean_result_or_clean_refusal(
    parse: Parser, error: type[Exception], text: str
) -> None:
    """Any string gives a bounded set or the parser's own error, within the memory budget."""
    tracemalloc.start()
    try:
        try:
            cpus = parse(text)
        except error:
            cpus = frozenset()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BUDGET_BYTES
    assert all(0 <= cpu < MAX_CPUS for cpu in cpus)
