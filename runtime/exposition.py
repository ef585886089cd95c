"""Serving a Prometheus registry over HTTP (``/metrics``) for the life of a daemon.

The body is Prometheus' text format 0.0.4 (whatever the ``Accept`` header asks: every
Prometheus version reads it), gzip-compressed when the scraper accepts gzip. It is the
registry's collectors, followed by the pre-rendered text of every :class:`Rendered` source
:func:`attached` to the registry; compressed, one gzip member per part, so a source whose
text did not change is not compressed again.

The registry's families are formatted here rather than by ``prometheus_client``'s
``generate_latest``, with the same text (families, ``_total``/``_created`` handling, escaping)
except that labels keep their order instead of being sorted: it validates every label name of
every sample, about 25 µs a sample, where this takes a few. A source with thousands of series
(the agent's pod and container usage) renders itself into bytes once per new input and hands
out the same bytes to every scrape in between. A rendered source must not repeat a family the
registry's collectors export (a family may appear only once in an exposition).
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import logging
import math
import re
import socket
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

__all__ = [
    "CONTENT_TYPE",
    "MetricsAddressError",
    "MetricsEndpoint",
    "Rendered",
    "attached",
    "escape_label_value",
    "parse_listen_address",
    "render",
    "render_gzip",
    "serve_metrics",
    "text_format",
]

log = logging.getLogger(__name__)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
#: Paths that answer with the metrics (koordlet serves ``/metrics``; ``/`` for convenience).
_PATHS: Final = frozenset({"/metrics", "/"})
#: gzip level of compressed answers: the fastest, as metrics text compresses well anyway.
_GZIP_LEVEL: Final = 1


class MetricsAddressError(ValueError):
    """A listen address that is not ``[host]:port`` or ``off``."""


class Rendered(Protocol):
    """A source of complete metric families already in text format 0.0.4 (``# HELP``,
    ``# TYPE`` and sample lines, ending with a newline). Called from the HTTP server's
    threads: it must only format what its owner already measured."""

    def render(self) -> bytes: ...


_RENDERED: weakref.WeakKeyDictionary[CollectorRegistry, list[Rendered]] = (
    weakref.WeakKeyDictionary()
)
_RENDERED_LOCK = threading.Lock()


@contextlib.contextmanager
def attached(registry: CollectorRegistry, source: Rendered) -> Iterator[Rendered]:
    """Serve ``source`` after ``registry``'s collectors while inside."""
    with _RENDERED_LOCK:
        _RENDERED.setdefault(registry, []).append(source)
    try:
        yield source
    finally:
        with _RENDERED_LOCK:
            sources = _RENDERED.get(registry, [])
            with contextlib.suppress(ValueError):
                sources.remove(source)
            if not sources:
                _RENDERED.pop(registry, None)


_LEGACY_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_NOT_METRIC = re.compile(r"[^a-zA-Z0-9_:]")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")
#: OpenMetrics-only series of a family, exported as gauge families of their own.
_SEPARATE: Final = ("_created", "_gsum", "_gcount")
#: OpenMetrics types -> (text format type, suffix of the family name).
_TYPES: Final = {
    "counter": ("counter", "_total"),
    "info": ("gauge", "_info"),
    "stateset": ("gauge", ""),
    "gaugehistogram": ("histogram", ""),
    "unknown": ("untyped", ""),
}


def _legacy(name: str, valid: re.Pattern[str], invalid: re.Pattern[str]) -> str:
    """``name`` with every character outside the legacy set (and a leading digit) as ``_``."""
    if valid.fullmatch(name):
        return name
    fixed = invalid.sub("_", name)
    return "_" + fixed[1:] if fixed[:1].isdigit() else fixed


@functools.lru_cache(maxsize=4096)
def _metric_name(name: str) -> str:
    return _legacy(name, _LEGACY_METRIC, _NOT_METRIC)


@functools.lru_cache(maxsize=4096)
def _label_name(name: str) -> str:
    return _legacy(name, _LEGACY_LABEL, _NOT_LABEL)


def _value(value: float) -> str:
    number = float(value)
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if math.isnan(number):
        return "NaN"
    return repr(number)


def escape_label_value(value: str) -> str:
    """A label value escaped for the text format (backslash, newline, double quote)."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _sample(sample: Sample) -> str:
    name = _metric_name(sample.name)
    if sample.labels:
        pairs = ",".join(
            f'{_label_name(k)}="{escape_label_value(v)}"' for k, v in sample.labels.items()
        )
        name = f"{name}{{{pairs}}}"
    if sample.timestamp is None:
        return f"{name} {_value(sample.value)}\n"
    stamp = int(float(sample.timestamp) * 1000)
    return f"{name} {_value(sample.value)} {stamp}\n"


def _header(name: str, documentation: str, kind: str) -> str:
    text = documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {text}\n# TYPE {name} {kind}\n"


def text_format(metrics: Iterable[Metric]) -> str:
    """``metrics`` in text format 0.0.4 (see the module docstring)."""
    out: list[str] = []
    for metric in metrics:
        kind, suffix = _TYPES.get(metric.type, (metric.type, ""))
        out.append(_header(_metric_name(metric.name + suffix), metric.documentation, kind))
        separate: dict[str, list[str]] = {}
        for sample in metric.samples:
            tail = sample.name[len(metric.name) :]
            if tail in _SEPARATE and sample.name.startswith(metric.name):
                separate.setdefault(tail, []).append(_sample(sample))
            else:
                out.append(_sample(sample))
        for tail, lines in sorted(separate.items()):
            out.append(_header(_metric_name(metric.name + tail), metric.documentation, "gauge"))
            out.extend(lines)
    return "".join(out)


def _parts(registry: CollectorRegistry) -> list[tuple[Rendered | None, bytes]]:
    with _RENDERED_LOCK:
        sources = tuple(_RENDERED.get(registry, ()))
    parts: list[tuple[Rendered | None, bytes]] = [(None, text_format(registry.collect()).encode())]
    parts.extend((source, source.render()) for source in sources)
    return parts


def render(registry: CollectorRegistry) -> bytes:
    """The exposition of ``registry``: its collectors, then its :func:`attached` sources."""
    return b"".join(part for _, part in _parts(registry))


#: source -> (its last text, that text gzip-compressed).
_COMPRESSED: weakref.WeakKeyDictionary[Rendered, tuple[bytes, bytes]] = weakref.WeakKeyDictionary()


def render_gzip(registry: CollectorRegistry) -> bytes:
    """:func:`render`, gzip-compressed: one gzip member per part, concatenated (a multi-member
    stream, which every gzip reader decodes as one), so the text of a source that did not
    change since the last scrape is not compressed again."""
    members = []
    for source, part in _parts(registry):
        if source is None:
            members.append(gzip.compress(part, compresslevel=_GZIP_LEVEL))
            continue
        with _RENDERED_LOCK:
            cached = _COMPRESSED.get(source)
        if cached is not None and cached[0] is part:
            members.append(cached[1])
            continue
        compressed = gzip.compress(part, compresslevel=_GZIP_LEVEL)
        with _RENDERED_LOCK:
            _COMPRESSED[source] = (part, compressed)
        members.append(compressed)
    return b"".join(members)


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "localhost"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/metrics"


def parse_listen_address(text: str) -> tuple[str, int] | None:
    """``:9316`` -> ("0.0.0.0", 9316); ``127.0.0.1:0`` -> ephemeral; ``off`` -> None."""
    if text.strip().lower() in ("off", "none", "disabled", ""):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsAddressError(f"metrics address {text!r} is not [host]:port or 'off'")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def _accepts_gzip(header: str | None) -> bool:
    for part in (header or "").split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        if path not in _PATHS:
            self._answer(404, b"not found: the metrics are at /metrics\n", "text/plain")
            return
        compress = _accepts_gzip(self.headers.get("Accept-Encoding"))
        try:
            body = render_gzip(self.registry) if compress else render(self.registry)
        except Exception:
            log.exception("rendering the metrics failed")
            self._answer(500, b"rendering the metrics failed\n", "text/plain")
            return
        self._answer(200, body, CONTENT_TYPE, "gzip" if compress else None)

    def _answer(
        self, status: int, body: bytes, content_type: str, encoding: str | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if encoding is not None:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the hook's name
        """Scrapes are not logged."""


class _Server(ThreadingHTTPServer):
    """One thread per connection; kept-alive connections (Prometheus keeps its own open) are
    closed when the server closes, so nothing is served after it stopped."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler]) -> None:
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (the scraper left, or the server closed it) is no error;
        anything else is logged."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError | ValueError):
            log.debug("metrics connection from %s ended: %s", client_address, error)
            return
        log.error("metrics request from %s failed", client_address, exc_info=error)

    def server_close(self) -> None:
        super().server_close()
        with self._connections_lock:
            open_connections = list(self._connections)
        for connection in open_connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


def _server(host: str, port: int, registry: CollectorRegistry) -> _Server:
    handler = type("MetricsHandler", (_Handler,), {"registry": registry})
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    server: _Server = server_class((host, port), handler)
    return server


@contextlib.contextmanager
def serve_metrics(address: str, registry: CollectorRegistry) -> Iterator[MetricsEndpoint | None]:
    """Serve ``registry`` (and its attached sources) on ``address`` in a background thread;
    stop on exit."""
    parsed = parse_listen_address(address)
    if parsed is None:
        yield None
        return
    host, port = parsed
    try:
        server = _server(host, port, registry)
    except OSError as err:
        raise MetricsAddressError(
            f"cannot serve metrics on {address}: {err.strerror or err}"
        ) from err
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="metrics", daemon=True
    )
    thread.start()
    bound = MetricsEndpoint(host=host, port=int(server.server_address[1]))
    log.info("metrics at %s", bound.url)
    try:
        yield bound
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
