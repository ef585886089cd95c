"""Serving a metrics registry over HTTP."""

from __future__ import annotations

import gzip
import http.client
import math
import urllib.error
import urllib.request

import pytest
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
)
from prometheus_client.parser import text_string_to_metric_families

from runtime.exposition import (
    CONTENT_TYPE,
    MetricsAddressError,
    attached,
    parse_listen_address,
    render,
    render_gzip,
    serve_metrics,
)


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


class Prerendered:
    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    def render(self) -> bytes:
        self.calls += 1
        return self.text.encode()


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_attached_sources_follow_the_registry_while_attached() -> None:
    registry = CollectorRegistry()
    Counter("koordpy_test_total", "a test counter", registry=registry).inc()
    source = Prerendered("# HELP koordlet_x x\n# TYPE koordlet_x gauge\nkoordlet_x 7\n")
    with attached(registry, source):
        body = render(registry).decode()
        families = {f.name: f for f in text_string_to_metric_families(body)}
        assert families["koordlet_x"].samples[0].value == 7
        assert families["koordpy_test"].samples[0].value == 1
        # Compressed: one gzip member per part, read back as one stream.
        assert gzip.decompress(render_gzip(registry)) == render(registry)
        assert gzip.decompress(render_gzip(registry)) == render(registry), "from the cache"
    assert b"koordlet_x" not in render(registry)


def test_the_endpoint_speaks_text_format_and_gzip() -> None:
    registry = CollectorRegistry()
    source = Prerendered("# HELP koordlet_x x\n# TYPE koordlet_x gauge\nkoordlet_x 7\n")
    with attached(registry, source), serve_metrics("127.0.0.1:0", registry) as endpoint:
        assert endpoint is not None
        base = f"http://127.0.0.1:{endpoint.port}"
        # What Prometheus asks for: OpenMetrics preferred, gzip accepted.
        status, headers, body = get(
            f"{base}/metrics",
            Accept="application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
            **{"Accept-Encoding": "gzip"},
        )
        assert status == 200
        assert headers["Content-Type"] == CONTENT_TYPE
        assert headers["Content-Encoding"] == "gzip"
        assert b"koordlet_x 7\n" in gzip.decompress(body)
        status, headers, body = get(f"{base}/metrics")
        assert "Content-Encoding" not in headers
        assert b"koordlet_x 7\n" in body
        status, _, _ = get(f"{base}/nothing-here")
        assert status == 404
    assert source.calls == 2


Samples = list[tuple[str, tuple[tuple[str, str], ...], float]]


def families_of(text: str) -> dict[str, tuple[str, str, Samples]]:
    """Family -> (type, help, samples); label order is not significant."""
    return {
        f.name: (
            f.type,
            f.documentation,
            sorted((s.name, tuple(sorted(s.labels.items())), s.value) for s in f.samples),
        )
        for f in text_string_to_metric_families(text)
    }


def test_registry_text_reads_back_as_prometheus_clients_own() -> None:
    registry = CollectorRegistry()
    counter = Counter(
        "koordpy_c", 'a counter\\with "quotes"\nand lines', ["a", "b"], registry=registry
    )
    counter.labels(a='x"y', b="back\\slash\nnewline").inc(2)
    Gauge("koordpy_g", "a gauge", registry=registry).set(float("inf"))
    Gauge("koordpy_nan", "not a number", registry=registry).set(float("nan"))
    histogram = Histogram(
        "koordpy_h", "a histogram", ["node"], buckets=(0.1, 1.0), registry=registry
    )
    histogram.labels(node="n1").observe(0.5)
    Summary("koordpy_s", "a summary", registry=registry).observe(3.0)
    Info("koordpy_build", "build info", registry=registry).info({"version": "1.2"})
    Enum("koordpy_state", "a state", states=["up", "down"], registry=registry).state("down")
    Gauge("koordpy_big", "a big one", registry=registry).set(123456789012.0)
    ours = render(registry).decode()
    theirs = generate_latest(registry).decode()
    got, expected = families_of(ours), families_of(theirs)
    assert got.keys() == expected.keys()
    for name, (kind, doc, samples) in expected.items():
        assert got[name][:2] == (kind, doc), name
        mine = got[name][2]
        assert len(mine) == len(samples), name
        for (n1, l1, v1), (n2, l2, v2) in zip(mine, samples, strict=True):
            assert (n1, l1) == (n2, l2)
            assert v1 == v2 or (math.isnan(v1) and math.isnan(v2)), name

    def types(text: str) -> list[str]:
        return sorted(line for line in text.splitlines() if line.startswith("# TYPE"))

    assert types(ours) == types(theirs), "the same families, _created ones included"


def test_kept_alive_connections_end_with_the_server() -> None:
    registry = CollectorRegistry()
    Counter("koordpy_test_total", "a test counter", registry=registry).inc()
    with serve_metrics("127.0.0.1:0", registry) as endpoint:
        assert endpoint is not None
        connection = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=5)
        for _ in range(2):  # one connection, two scrapes
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            assert b"koordpy_test_total 1.0" in response.read()
            assert not response.will_close

    def scrape_again() -> bytes:
        connection.request("GET", "/metrics")
        return connection.getresponse().read()

    with pytest.raises((OSError, http.client.HTTPException)):
        scrape_again()
    connection.close()
