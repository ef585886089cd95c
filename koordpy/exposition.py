"""Serving a Prometheus registry over HTTP (``/metrics``) for the life of a daemon."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server

__all__ = ["MetricsAddressError", "MetricsEndpoint", "parse_listen_address", "serve_metrics"]

log = logging.getLogger(__name__)


class MetricsAddressError(ValueError):
    """A listen address that is not ``[host]:port`` or ``off``."""


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "localhost"
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


@contextlib.contextmanager
def serve_metrics(address: str, registry: CollectorRegistry) -> Iterator[MetricsEndpoint | None]:
    """Serve ``registry`` on ``address`` in a background thread; stop on exit."""
    parsed = parse_listen_address(address)
    if parsed is None:
        yield None
        return
    host, port = parsed
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as err:
        raise MetricsAddressError(
            f"cannot serve metrics on {address}: {err.strerror or err}"
        ) from err
    bound = MetricsEndpoint(host=host, port=int(server.server_address[1]))
    log.info("metrics at %s", bound.url)
    try:
        yield bound
    finally:
        stopper = threading.Thread(target=server.shutdown, name="metrics-shutdown", daemon=True)
        stopper.start()
        stopper.join(timeout=5)
        server.server_close()
        thread.join(timeout=5)
