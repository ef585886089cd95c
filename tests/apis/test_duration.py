"""Go duration strings: parsed exactly, printed the way Go prints them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.duration import Duration, DurationError

_S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("1h", 3600 * _S),
        ("24h", 86400 * _S),
        ("24h0m0s", 86400 * _S),
        ("1h30m", 5400 * _S),
        ("1.5m", 90 * _S),
        ("300ms", 300_000_000),
        ("1.5ms", 1_500_000),
        ("10us", 10_000),
        ("10µs", 10_000),
        ("7ns", 7),
        ("0", 0),
        ("0s", 0),
        ("-1s", -_S),
        ("+5s", 5 * _S),
        (".5s", _S // 2),
    ],
)
def test_parses_go_durations(text: str, nanos: int) -> None:
    assert Duration.parse(text).nanoseconds == nanos


@pytest.mark.parametrize("text", ["", "1", "1y", "1h-5m", "h", "1.2.3s", "--1s", " 1s"])
def test_rejects_invalid_durations(text: str) -> None:
    with pytest.raises(DurationError, match="duration"):
        Duration.parse(text)


def test_rejects_non_strings() -> None:
    with pytest.raises(DurationError):
        Duration.parse(60)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "printed"),
    [
        ("1h", "1h0m0s"),
        ("24h", "24h0m0s"),
        ("90s", "1m30s"),
        ("300ms", "300ms"),
        ("1.5s", "1.5s"),
        ("1h0m0.5s", "1h0m0.5s"),
        ("0", "0s"),
        ("-2m", "-2m0s"),
        ("1500us", "1.5ms"),
    ],
)
def test_prints_like_go(text: str, printed: str) -> None:
    assert str(Duration.parse(text)) == printed


def test_seconds_and_from_seconds() -> None:
    assert Duration.from_seconds(90).nanoseconds == 90 * _S
    assert Duration.from_seconds(0.25).seconds == 0.25
    assert Duration.parse("2h").seconds == 7200.0


def test_value_semantics() -> None:
    assert Duration.parse("60m") == Duration.parse("1h")
    assert hash(Duration.parse("60m")) == hash(Duration.parse("1h"))
    assert Duration.parse("1m") < Duration.parse("61s")
    with pytest.raises(AttributeError):
        Duration.parse("1s").nanoseconds = 5


@given(st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1))
def test_print_then_parse_is_the_identity(nanos: int) -> None:
    assert Duration.parse(str(Duration(nanos))).nanoseconds == nanos
