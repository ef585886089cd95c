"""Serving a metrics registry over HTTP."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from koordpy.exposition import MetricsAddressError, parse_listen_address, serve_metrics


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (":9316", ("0.0.0.0", 9316)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9317", ("::1", 9317)),
        ("off", None),
        ("", None),
    ],
)
def test_parse_listen_address(text: str, expected: tuple[str, int] | None) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["9316", "host:", "host:port", ":70000"])
def test_bad_addresses_name_the_value(text: str) -> None:
    with pytest.raises(MetricsAddressError, match="metrics address"):
        parse_listen_address(text)


def test_serves_the_registry_and_stops() -> None:
    registry = CollectorRegistry()
    Counter("koordpy_test_total", "a test counter", registry=registry).inc(3)
    with serve_metrics("127.0.0.1:0", registry) as endpoint:
        assert endpoint is not None
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
        assert "koordpy_test_total 3.0" in body
    with pytest.raises(OSError):  # noqa: PT011 - connection refused or reset, platform-dependent
        urllib.request.urlopen(url, timeout=2)


def test_off_serves_nothing() -> None:
    with serve_metrics("off", CollectorRegistry()) as endpoint:
        assert endpoint is None


def test_a_taken_port_is_a_clear_error() -> None:
    registry = CollectorRegistry()
    with serve_metrics("127.0.0.1:0", registry) as endpoint:
        assert endpoint is not None
        with (
            pytest.raises(MetricsAddressError, match="cannot serve metrics"),
            serve_metrics(f"127.0.0.1:{endpoint.port}", registry),
        ):
            pass
