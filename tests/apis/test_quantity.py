"""Kubernetes quantities: every form the API server accepts, canonical units, canonical text."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis import quantity
from apis.quantity import (
    MAX_QUANTITY,
    QuantityError,
    format_quantity,
    parse_quantity,
    to_canonical,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1Ki", Fraction(1024)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e-3", Fraction(1, 1000)),
        ("2k", Fraction(2000)),
        ("1E", Fraction(10**18)),
        ("1Ei", Fraction(2**60)),
        ("3M", Fraction(3 * 10**6)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("-2", Fraction(-2)),
        ("+2", Fraction(2)),
        ("-250m", Fraction(-1, 4)),
        ("100n", Fraction(1, 10**7)),
        ("7u", Fraction(7, 10**6)),
        ("0", Fraction(0)),
    ],
)
def test_parses_every_kubernetes_form(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text", ["12x", "1..2", "", " 1", "1 ", "1e", "Gi", "1gi", "1.2.3", "--1", "0x10"]
)
def test_rejects_malformed_quantities(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


def test_numbers_are_accepted_as_yaml_gives_them() -> None:
    assert parse_quantity(4) == 4
    assert parse_quantity(0.5) == Fraction(1, 2)
    with pytest.raises(QuantityError):
        parse_quantity(True)
    with pytest.raises(QuantityError):
        parse_quantity(float("inf"))


@pytest.mark.parametrize(
    ("name", "value", "canonical"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", "1.5", 1500),
        ("cpu", "0.0001", 1),  # finer than a millicore rounds up, as MilliValue() does
        ("cpu", 2, 2000),
        ("cpu", "1e3", 1_000_000),
        ("memory", "4Gi", 4 * 2**30),
        ("memory", "1.5", 2),  # Value() rounds up to whole bytes
        ("memory", "1k", 1000),
        ("memory", "128974848", 128974848),
        ("memory", "129e6", 129_000_000),
        ("nvidia.com/gpu", "1", 1),
        ("koordinator.sh/gpu-memory", "1Gi", 2**30),
        ("kubernetes.io/batch-cpu", "4k", 4000),  # batch-cpu is already in milli-cores
        ("cpu", "-500m", -500),
    ],
)
def test_canonical_units(name: str, value: str | int, canonical: int) -> None:
    assert to_canonical(name, value) == canonical


def test_too_large_is_an_error() -> None:
    with pytest.raises(QuantityError, match="too large"):
        to_canonical("memory", "10Ei")
    with pytest.raises(QuantityError):
        to_canonical("memory", "1e40")


@pytest.mark.parametrize(
    ("name", "amount", "text"),
    [
        ("cpu", 500, "500m"),
        ("cpu", 2000, "2"),
        ("cpu", 1500, "1500m"),
        ("cpu", 0, "0"),
        ("cpu", -250, "-250m"),
        ("memory", 4 * 2**30, "4Gi"),
        ("memory", 1536, "1536"),
        ("memory", 1000, "1k"),
        ("memory", 64 * 2**30, "64Gi"),
        ("ephemeral-storage", 2**40, "1Ti"),
        ("hugepages-2Mi", 2 * 2**20, "2Mi"),
        ("koordinator.sh/gpu-memory", 80 * 2**30, "80Gi"),
        ("nvidia.com/gpu", 8, "8"),
        ("koordinator.sh/gpu-core", 100, "100"),
        ("kubernetes.io/batch-cpu", 4000, "4k"),
        ("pods", 110, "110"),
    ],
)
def test_formats_canonically(name: str, amount: int, text: str) -> None:
    assert format_quantity(name, amount) == text


_NAMES = st.sampled_from(
    [
        "cpu",
        "memory",
        "ephemeral-storage",
        "pods",
        "nvidia.com/gpu",
        "koordinator.sh/gpu-core",
        "koordinator.sh/gpu-memory",
        "kubernetes.io/batch-cpu",
        "huawei.com/npu-core",
    ]
)
_AMOUNTS = st.one_of(
    st.integers(min_value=-MAX_QUANTITY, max_value=MAX_QUANTITY),
    st.integers(min_value=0, max_value=62).map(lambda e: 2**e),
    st.integers(min_value=0, max_value=18).map(lambda e: 10**e),
    st.integers(min_value=1, max_value=1000).map(lambda n: n * 2**30),
)


@given(name=_NAMES, amount=_AMOUNTS)
def test_format_then_parse_is_the_identity(name: str, amount: int) -> None:
    assert to_canonical(name, format_quantity(name, amount)) == amount


@given(
    name=st.sampled_from(["cpu", "memory", "kubernetes.io/batch-cpu", "koordinator.sh/gpu-core"]),
    digits=st.text(alphabet="0123456789", min_size=1, max_size=20),
    milli=st.booleans(),
)
def test_plain_and_milli_integers_read_as_the_general_parser_reads_them(
    name: str, digits: str, milli: bool
) -> None:
    text = f"{digits}m" if milli else digits
    try:
        expected: int | str = quantity._canonical(name, text)
    except QuantityError as err:
        expected = f"error: {err}"
    try:
        got: int | str = to_canonical(name, text)
    except QuantityError as err:
        got = f"error: {err}"
    assert got == expected
