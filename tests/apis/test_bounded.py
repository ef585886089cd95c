"""The bounded reader every annotation parser shares (:mod:`apis.bounded`)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.bounded import (
    MAX_DEPTH,
    MAX_TEXT,
    BoundedError,
    CpuListError,
    check_cpus,
    decode,
    decode_any,
    excerpt,
    parse_cpu_list,
)


def test_nesting_past_the_bound_is_refused_before_decoding() -> None:
    with pytest.raises(BoundedError, match=f"hint: nested deeper than {MAX_DEPTH} levels"):
        decode_any("[" * 200_000, "hint")
    assert decode_any("[" * MAX_DEPTH + "]" * MAX_DEPTH, "hint") is not None


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"a": "[" * 1000}),  # brackets inside a string do not nest
        json.dumps({"a": '\\"' + "{" * 1000}),  # nor after an escaped quote in it
        json.dumps(["\\", "[" * 1000]),  # an escaped backslash ends no string early
    ],
)
def test_brackets_in_strings_are_not_nesting(text: str) -> None:
    assert decode_any(text, "x") == json.loads(text)


@given(st.recursive(st.text(alphabet='[]{}"\\ ab', max_size=8), lambda c: st.lists(c, max_size=3)))
def test_the_nesting_scan_agrees_with_the_decoder(value: object) -> None:
    """Within the bound, what the scan lets through decodes as the stdlib reads it."""
    text = json.dumps(value)
    assert decode_any(text, "x", depth=1000) == json.loads(text)


def test_text_over_the_cap_is_refused_naming_its_size() -> None:
    text = json.dumps("a" * MAX_TEXT)
    with pytest.raises(BoundedError, match=f"groups: {len(text)} characters is too long"):
        decode(text, str, "groups")
    with pytest.raises(BoundedError, match="too long"):
        decode_any(text, "groups")


def test_a_typed_refusal_names_what_was_read() -> None:
    with pytest.raises(BoundedError, match=r"^status: Expected `int`, got `str`") as caught:
        decode('"x"', int, "status")
    assert caught.value.detail == "Expected `int`, got `str`"


def test_a_cpuset_naming_cpus_the_node_lacks_is_out_of_range() -> None:
    cpus = parse_cpu_list("0-1000")
    with pytest.raises(CpuListError, match=r"cpuset: CPUs '8-1000' are out of range: .* '0-7'"):
        check_cpus(cpus, frozenset(range(8)))
    check_cpus(parse_cpu_list("0-7"), frozenset(range(8)))


@pytest.mark.parametrize("text", ["\u00b2", "\uff11", "0-" + "9" * 5000, "+1", "1_0"])
def test_only_ascii_decimal_ids_are_cpu_ids(text: str) -> None:
    """``str.isdigit`` and ``int()`` accept more than the kernel writes; none of it is read."""
    with pytest.raises(CpuListError):
        parse_cpu_list(text)


def test_refusals_quote_a_long_value_short() -> None:
    assert len(excerpt("x" * MAX_TEXT)) < 100
