"""Pods from the kubelet's ``/pods`` endpoint, polled.

Two ways in, as koordlet has them:

* the authenticated port (HTTPS, 10250) with a bearer token read from a file on every request
  (service account tokens are rotated); the server certificate is checked against ``ca_file``
  (default: the system's CAs) unless ``insecure_tls`` is set (koordlet's
  ``-kubelet-insecure-tls``);
* the read-only port (HTTP, 10255), which needs no token (none is sent over plain HTTP).

Each request runs in a worker thread (``http.client``, no proxy, no redirects) under one
deadline of ``timeout`` seconds for connecting and reading together. A failed poll keeps the
previous pods and is retried at the next interval.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import ssl
import time
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from agent.errors import ConfigError, TransientError
from agent.pods.base import PodListError, PollingSource, parse_pod_list

__all__ = [
    "DEFAULT_PORT",
    "READ_ONLY_PORT",
    "SERVICE_ACCOUNT_CA",
    "SERVICE_ACCOUNT_TOKEN",
    "KubeletPodSource",
    "kubelet_url",
]

_log = logging.getLogger(__name__)

#: The kubelet's authenticated port and its read-only port.
DEFAULT_PORT: Final = 10250
READ_ONLY_PORT: Final = 10255
#: Where a pod finds its service account token and the cluster CA.
SERVICE_ACCOUNT_TOKEN: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA: Final = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
#: A body larger than this is refused (a node's pod list is a few MiB at most).
MAX_BODY: Final = 256 * 2**20
_CHUNK: Final = 1 << 16


def kubelet_url(address: str = "127.0.0.1", port: int = DEFAULT_PORT) -> str:
    """``https://address:port/pods``, or ``http://`` for the read-only port."""
    scheme = "http" if port == READ_ONLY_PORT else "https"
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"{scheme}://{host}:{port}/pods"


class KubeletPodSource(PollingSource):
    """Polls ``url`` every ``interval`` seconds (see the module docstring)."""

    def __init__(
        self,
        url: str = kubelet_url(),
        *,
        token_file: str | None = SERVICE_ACCOUNT_TOKEN,
        ca_file: str | None = None,
        insecure_tls: bool = False,
        interval: float = 10.0,
        timeout: float = 3.0,
        name: str = "pods/kubelet",
    ) -> None:
        super().__init__(name, interval=interval)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"kubelet URL must be http(s)://host[:port]/path, got {url!r}")
        if interval <= 0 or timeout <= 0:
            raise ConfigError(
                f"kubelet interval and timeout must be positive, got {interval}, {timeout}"
            )
        self.url = url
        self.timeout = timeout
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._path = (parts.path or "/pods") + (f"?{parts.query}" if parts.query else "")
        self._token_file = token_file
        self._ca_file = ca_file
        self._insecure = insecure_tls
        self._warned_token = False

    # --- one request (worker thread) -----------------------------------------------------------

    def _tls(self) -> ssl.SSLContext:
        if self._insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        try:
            return ssl.create_default_context(cafile=self._ca_file)
        except (OSError, ssl.SSLError) as err:
            raise TransientError(f"kubelet CA file {self._ca_file}: {err}") from err

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if not self._https or not self._token_file:
            return headers
        try:
            token = Path(self._token_file).read_text(encoding="utf-8").strip()
        except OSError as err:
            if not self._warned_token:
                _log.warning(
                    "%s: no bearer token (%s); asking the kubelet without one", self.name, err
                )
                self._warned_token = True
            return headers
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=self._tls()
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def _get(self) -> bytes:
        """GET the pod list; every failure becomes :class:`TransientError`."""
        deadline = time.monotonic() + self.timeout
        conn = self._connection()
        try:
            conn.request("GET", self._path, headers=self._headers())
            response = conn.getresponse()
            if response.status != http.client.OK:
                raise TransientError(
                    f"{self.url}: HTTP {response.status} {response.reason}".rstrip()
                )
            chunks: list[bytes] = []
            size = 0
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TransientError(f"{self.url}: timed out after {self.timeout} s")
                if conn.sock is not None:
                    conn.sock.settimeout(remaining)
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_BODY:
                    raise TransientError(f"{self.url}: body larger than {MAX_BODY} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
        except TimeoutError as err:
            raise TransientError(f"{self.url}: timed out after {self.timeout} s") from err
        except (OSError, http.client.HTTPException) as err:
            raise TransientError(f"{self.url}: {err}") from err
        finally:
            conn.close()

    # --- the component ---------------------------------------------------------------------

    async def refresh(self) -> bool:
        """Read the pods once; ``True`` when they changed. Raises :class:`TransientError`."""
        body = await asyncio.to_thread(self._get)
        try:
            pods = await asyncio.to_thread(parse_pod_list, body, source=self.url)
        except PodListError as err:
            raise TransientError(str(err)) from err
        return self._replace(pods)
