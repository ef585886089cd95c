"""An async connection to a Kubernetes API server: raw requests in, bytes or errors out.

:class:`KubeClient` talks to one API server over HTTPS. Where it connects and as whom comes from
a kubeconfig file or, inside a pod, from the service account's files (token, CA, namespace
under :data:`SERVICE_ACCOUNT_DIR`, address from ``KUBERNETES_SERVICE_HOST``/``_PORT``); lightkube
reads both and builds the HTTP client with its authentication and TLS settings (a rotated
service-account token is read again when the server answers 401), so this module handles
neither credentials nor certificates itself.

The client knows nothing of objects: a request sends bytes and returns the body's bytes, so the
caller decodes straight into its own Structs (:mod:`apis.codec`) without a detour through dicts.
:func:`resource_path` gives the path of a :class:`~apis.kinds.Kind`'s collection or object.

Every request, watches included, first takes a token from a :class:`RateLimiter` (client-go's
defaults: 50 per second, bursts of 100), so a burst of writes from the loops cannot flood the
server. A failed request raises what :mod:`runtime.kube.errors` names for it (or the
subclass the client's :attr:`KubeClient.errors` table gives), with the message of the server's
``Status``.

Building a client reads files (the kubeconfig, certificates): do it before the event loop runs
or through :func:`connect`, which does it in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, Final, Self
from urllib.parse import quote

import httpx2
import lightkube
import msgspec
import yaml
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

from apis.kinds import Kind
from runtime.kube.errors import ERRORS, ErrorTable, KubeError, ServerUnavailable

__all__ = [
    "APPLY_PATCH",
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_TIMEOUT",
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "SERVICE_ACCOUNT_DIR",
    "STRATEGIC_MERGE_PATCH",
    "ClientOptions",
    "KubeClient",
    "Lines",
    "RateLimiter",
    "Status",
    "StatusCause",
    "StatusDetails",
    "connect",
    "error_from_status",
    "resource_path",
    "status_error",
]

log = logging.getLogger(__name__)

#: client-go's defaults for a client's requests per second and burst.
DEFAULT_QPS: Final = 50.0
DEFAULT_BURST: Final = 100
#: Seconds a request (not a watch) may take before it fails as :class:`ServerUnavailable`.
DEFAULT_TIMEOUT: Final = 30.0
#: Where a pod finds its service account's token, CA and namespace.
SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

#: Query parameters as httpx takes them.
Params = Mapping[str, str | int | float | bool]


# --- errors ----------------------------------------------------------------------------------


class StatusCause(msgspec.Struct, frozen=True):
    """One problem a ``Status`` names: ``field`` (``metadata.name``), ``message``, ``reason``."""

    reason: str = ""
    message: str = ""
    field: str = ""


class StatusDetails(msgspec.Struct, frozen=True, rename="camel"):
    """What a ``Status`` says about the object concerned; ``kind`` is the resource (plural)."""

    name: str = ""
    group: str = ""
    kind: str = ""
    uid: str = ""
    causes: tuple[StatusCause, ...] = ()
    retry_after_seconds: int = 0


class Status(msgspec.Struct, frozen=True):
    """``meta/v1`` Status, the body of every error the API server returns (and of a watch's
    ERROR event). Unknown fields are ignored: only what errors are built from is read."""

    kind: str = ""
    status: str = ""
    message: str = ""
    reason: str = ""
    details: StatusDetails | None = None
    code: int = 0


_STATUS: Final = msgspec.json.Decoder(Status)
#: ``Invalid value: "Bad_Name": detail`` (or an unquoted value), as a cause's message starts.
_INVALID_VALUE: Final = re.compile(r'Invalid value: ("(?:[^"\\]|\\.)*"|[^:"]*):')


def _cause_value(message: str) -> str:
    """The value a cause's message quotes (``Invalid value: "x": ...``), else empty."""
    match = _INVALID_VALUE.match(message)
    if match is None:
        return ""
    shown = match[1]
    if shown.startswith('"'):
        try:
            value = json.loads(shown)
        except ValueError:
            return shown
        return value if isinstance(value, str) else shown
    return shown.strip()


def error_from_status(
    status: Status,
    *,
    code: int = 0,
    kind: Kind | None = None,
    namespace: str = "",
    name: str = "",
    retry_after: float | None = None,
    errors: ErrorTable = ERRORS,
) -> KubeError:
    """The error of ``errors`` a ``Status`` stands for.

    ``code`` is the HTTP status (0: the Status's own ``code``, as in a watch's ERROR event);
    ``kind``, ``namespace`` and ``name`` say what the request was about (the Status's details
    fill in a name left empty). The message is the server's own.
    """
    code = code or status.code
    details = status.details or StatusDetails()
    name = name or details.name
    message = status.message or f"the server answered {code} {status.reason}".rstrip()
    if code == 404:
        return errors.not_found(message, kind=kind, namespace=namespace, name=name)
    if code == 409:
        if status.reason == "AlreadyExists":
            return errors.already_exists(message, kind=kind, namespace=namespace, name=name)
        return errors.conflict(message, kind=kind, namespace=namespace, name=name)
    if code == 410:
        return errors.expired(message, kind=kind, namespace=namespace, name=name)
    if code == 422:
        causes = [f"{c.field}: {c.message}" if c.field else c.message for c in details.causes]
        first = details.causes[0] if details.causes else StatusCause()
        return errors.invalid(
            message,
            kind=kind,
            namespace=namespace,
            name=name,
            causes=causes,
            field=first.field,
            value=_cause_value(first.message),
        )
    if code == 403:
        return errors.forbidden(
            message, kind=kind, namespace=namespace, name=name, causes=(message,)
        )
    if code == 429 or code >= 500:
        if retry_after is None and details.retry_after_seconds > 0:
            retry_after = float(details.retry_after_seconds)
        return errors.unavailable(message, code=code, retry_after=retry_after)
    return errors.api_error(
        message, code=code, reason=status.reason, kind=kind, namespace=namespace, name=name
    )


def status_error(
    code: int,
    body: bytes,
    *,
    kind: Kind | None = None,
    namespace: str = "",
    name: str = "",
    retry_after: float | None = None,
    errors: ErrorTable = ERRORS,
) -> KubeError:
    """The error for an HTTP ``code`` and its response ``body`` (a ``Status``, or any text a
    proxy in between answered with, which then becomes the message, cut short)."""
    try:
        status = _STATUS.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        status = None
    if status is None or not (status.kind == "Status" or status.message):
        text = body.decode("utf-8", "replace").strip()
        shown = text if len(text) <= 200 else text[:197] + "..."
        status = Status(message=f"the server answered {code}: {shown}" if shown else "")
    return error_from_status(
        status,
        code=code,
        kind=kind,
        namespace=namespace,
        name=name,
        retry_after=retry_after,
        errors=errors,
    )


def _retry_after(headers: httpx2.Headers) -> float | None:
    """The ``Retry-After`` header's seconds (the API server only ever sends seconds)."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


def _unreachable(
    method: str, path: str, err: httpx2.TransportError, errors: ErrorTable
) -> ServerUnavailable:
    detail = str(err) or type(err).__name__
    return errors.unavailable(f"{method} {path}: no answer from the API server: {detail}")


# --- paths -----------------------------------------------------------------------------------


def resource_path(kind: Kind, namespace: str = "", name: str = "", subresource: str = "") -> str:
    """The API path of ``kind``'s objects (``name`` empty), one object, or its subresource.

    Core kinds live under ``/api/v1``, the others under ``/apis/GROUP/VERSION``. A namespaced
    kind without ``namespace`` means every namespace (lists and watches only: an object of a
    namespaced kind needs its namespace); a cluster-scoped kind ignores ``namespace``.
    """
    group, _, version = kind.api_version.rpartition("/")
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if kind.namespaced:
        if namespace:
            path += f"/namespaces/{quote(namespace, safe='')}"
        elif name:
            raise ValueError(f'{kind.qualified_plural} "{name}" needs a namespace')
    path += f"/{kind.plural}"
    if name:
        path += f"/{quote(name, safe='')}"
    if subresource:
        if not name:
            raise ValueError(f"subresource {subresource!r} of {kind.plural} needs a name")
        path += f"/{subresource}"
    return path


# --- rate limit ------------------------------------------------------------------------------


class RateLimiter:
    """A token bucket: ``qps`` tokens a second, at most ``burst`` saved up.

    Every request takes one token; one that finds none waits until its token is due. Tokens
    are handed out in the order they are asked for (a waiter's token is reserved when it asks,
    so later requests cannot overtake it). ``qps`` <= 0 turns the limit off.
    """

    def __init__(
        self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def reserve(self) -> float:
        """Take a token: the seconds until it may be used (0: now)."""
        if self.qps <= 0:
            return 0.0
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        """Wait for a token."""
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


# --- the client ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How a :class:`KubeClient` behaves apart from where it connects.

    ``qps``/``burst``: the rate limit (:class:`RateLimiter`); ``timeout``: seconds per
    request (a watch sets its own); ``http2``: one connection for every request and watch
    instead of one per request in flight; ``trust_env``: honour ``HTTPS_PROXY``/``NO_PROXY``
    (as kubectl does) and ``SSL_CERT_FILE``.
    """

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST
    timeout: float = DEFAULT_TIMEOUT
    http2: bool = False
    trust_env: bool = True
    user_agent: str = "koordpy"


class Lines:
    """The lines of a streamed response body, a batch at a time.

    Each batch is every complete line (without its newline, empty ones left out) that the
    chunks read so far completed: a watch's events as the server flushed them, so a reader can
    apply a burst of events together. Reading fails with :class:`ServerUnavailable` when the
    connection breaks. Closed by :meth:`KubeClient.stream` when its block ends.
    """

    __slots__ = ("_chunks", "_errors", "_method", "_path", "_pending")

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        method: str,
        path: str,
        errors: ErrorTable = ERRORS,
    ) -> None:
        self._chunks = chunks
        self._errors = errors
        self._method = method
        self._path = path
        #: the start of a line not complete yet, in the pieces it came in (a large object's
        #: event spans many chunks: joined once, when its newline arrives)
        self._pending: list[bytes] = []

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> list[bytes]:
        while True:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                last = b"".join(self._pending)
                self._pending = []
                if last.strip():  # a last line without its newline
                    return [last]
                raise
            except httpx2.TransportError as err:
                raise _unreachable(self._method, self._path, err, self._errors) from err
            if b"\n" not in chunk:
                self._pending.append(chunk)
                continue
            head, _, rest = chunk.rpartition(b"\n")
            if self._pending:
                self._pending.append(head)
                head = b"".join(self._pending)
            self._pending = [rest] if rest else []
            lines = [line for line in head.split(b"\n") if line.strip()]
            if lines:
                return lines

    async def aclose(self) -> None:
        closer = getattr(self._chunks, "aclose", None)
        if closer is not None:
            await closer()


class KubeClient:
    """One API server, as one user: raw requests returning bytes; see the module docstring.

    Build it with :meth:`from_kubeconfig`, :meth:`in_cluster` or :func:`connect` (or from a
    lightkube ``SingleConfig``); close it with :meth:`aclose` or ``async with``. It may be
    shared by any number of tasks of one event loop. :attr:`errors` is what its refusals
    raise (a subclass sets its package's own).
    """

    errors: ClassVar[ErrorTable] = ERRORS

    def __init__(self, config: SingleConfig, options: ClientOptions = ClientOptions()) -> None:
        if config.user is None:  # no user in the context: no credentials, as kubectl does
            config = config._replace(user=User())
        self.config = config
        self.options = options
        #: The API server's URL.
        self.server: str = config.cluster.server
        #: The context's namespace (in a pod, the service account's), ``default`` if none.
        self.namespace: str = config.namespace
        self.limiter = RateLimiter(options.qps, options.burst)
        params = client_adapter.ConnectionParams(
            timeout=httpx2.Timeout(options.timeout),
            trust_env=options.trust_env,
            http2=options.http2,
        )
        try:
            self._http = client_adapter.AsyncClient(config, params)
        except lightkube.ConfigError as err:
            raise self.errors.config(f"cannot connect to {self.server}: {err}") from err
        except OSError as err:  # an unreadable or bad certificate file
            raise self.errors.config(f"cannot connect to {self.server}: {err}") from err
        self._headers = {"Accept": JSON, "User-Agent": options.user_agent}

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str],
        *,
        context: str | None = None,
        options: ClientOptions = ClientOptions(),
    ) -> Self:
        """A client for ``context`` (None: the current one) of the kubeconfig file ``path``."""
        try:
            config = lightkube.KubeConfig.from_file(path).get(context)
        except lightkube.ConfigError as err:
            raise cls.errors.config(f"kubeconfig {os.fspath(path)}: {err}") from err
        except KeyError as err:  # a context naming a cluster or user that is not there
            raise cls.errors.config(
                f"kubeconfig {os.fspath(path)}: {err.args[0]!r} not found"
            ) from err
        except (yaml.YAMLError, msgspec.ValidationError, TypeError, AttributeError) as err:
            raise cls.errors.config(
                f"kubeconfig {os.fspath(path)} is not a kubeconfig: {err}"
            ) from err
        if config is None:  # get() returns None only for a default, which is not passed
            raise cls.errors.config(f"kubeconfig {os.fspath(path)}: no current context")
        return cls(config, options)

    @classmethod
    def in_cluster(
        cls,
        service_account_dir: str | os.PathLike[str] = SERVICE_ACCOUNT_DIR,
        *,
        options: ClientOptions = ClientOptions(),
    ) -> Self:
        """A client as the pod's service account: token, ``ca.crt`` and ``namespace`` from
        ``service_account_dir``, the server from ``KUBERNETES_SERVICE_HOST``/``_PORT``."""
        where = os.fspath(service_account_dir)
        missing = [
            v
            for v in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
            if not os.environ.get(v)
        ]
        if missing:
            raise cls.errors.config(
                f"not running in a Kubernetes pod: {' and '.join(missing)} not set"
                " (give a kubeconfig instead)"
            )
        try:
            config = lightkube.KubeConfig.from_service_account(where).get()
        except lightkube.ConfigError as err:
            raise cls.errors.config(f"service account {where}: {err}") from err
        if config is None:
            raise cls.errors.config(f"service account {where}: no context")
        return cls(config, options)

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | os.PathLike[str] | None = None,
        *,
        context: str | None = None,
        options: ClientOptions = ClientOptions(),
    ) -> Self:
        """From the kubeconfig file when one is given, else in-cluster."""
        if kubeconfig is None:
            return cls.in_cluster(options=options)
        return cls.from_kubeconfig(kubeconfig, context=context, options=options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection; the client cannot be used afterwards."""
        await self._http.aclose()

    def _request_headers(self, content_type: str | None) -> dict[str, str]:
        if content_type is None:
            return self._headers
        return {**self._headers, "Content-Type": content_type}

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: bytes | None = None,
        content_type: str = JSON,
        io_timeout: float | None = None,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> bytes:
        """Send one request (after the rate limit lets it); the response body of a 2xx.

        ``io_timeout`` bounds the connect, the send and the wait for the answer, each (None:
        the client's :attr:`ClientOptions.timeout`); ``kind``, ``namespace`` and ``name``
        only label the error a refusal raises.
        """
        await self.limiter.acquire()
        try:
            response = await self._http.request(
                method,
                path,
                params=params,
                content=body,
                headers=self._request_headers(content_type if body is not None else None),
                timeout=io_timeout if io_timeout is not None else httpx2.USE_CLIENT_DEFAULT,
            )
        except httpx2.TransportError as err:
            raise _unreachable(method, path, err, self.errors) from err
        log.debug("%s %s: %s", method, path, response.status_code)
        if not 200 <= response.status_code < 300:
            raise status_error(
                response.status_code,
                response.content,
                kind=kind,
                namespace=namespace,
                name=name,
                retry_after=_retry_after(response.headers),
                errors=self.errors,
            )
        return response.content

    async def get(
        self,
        path: str,
        *,
        params: Params | None = None,
        io_timeout: float | None = None,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> bytes:
        """GET ``path``: one object, or a page of a list."""
        return await self.request(
            "GET",
            path,
            params=params,
            io_timeout=io_timeout,
            kind=kind,
            namespace=namespace,
            name=name,
        )

    async def post(
        self,
        path: str,
        body: bytes,
        *,
        params: Params | None = None,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> bytes:
        """POST ``body`` (JSON) to ``path``: a create, or a subresource such as a binding."""
        return await self.request(
            "POST", path, params=params, body=body, kind=kind, namespace=namespace, name=name
        )

    async def put(
        self,
        path: str,
        body: bytes,
        *,
        params: Params | None = None,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> bytes:
        """PUT ``body`` (JSON) at ``path``: an update, conditional on its resourceVersion."""
        return await self.request(
            "PUT", path, params=params, body=body, kind=kind, namespace=namespace, name=name
        )

    async def patch(
        self,
        path: str,
        body: bytes,
        *,
        content_type: str = MERGE_PATCH,
        params: Params | None = None,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> bytes:
        """PATCH ``path`` with ``body`` of ``content_type`` (:data:`MERGE_PATCH`,
        :data:`STRATEGIC_MERGE_PATCH`, :data:`JSON_PATCH` or :data:`APPLY_PATCH`)."""
        return await self.request(
            "PATCH",
            path,
            params=params,
            body=body,
            content_type=content_type,
            kind=kind,
            namespace=namespace,
            name=name,
        )

    async def delete(
        self,
        path: str,
        body: bytes | None = None,
        *,
        params: Params | None = None,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> bytes:
        """DELETE ``path``; ``body`` may carry DeleteOptions (preconditions, grace period)."""
        return await self.request(
            "DELETE", path, params=params, body=body, kind=kind, namespace=namespace, name=name
        )

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Params | None = None,
        io_timeout: float | None = None,
        kind: Kind | None = None,
        namespace: str = "",
    ) -> AsyncIterator[Lines]:
        """GET ``path`` and read its body as it comes, a batch of lines at a time (a watch).

        A refusal raises before the block is entered, as :meth:`request` raises it;
        ``io_timeout`` bounds the connect and each wait for more of the body (None: the client's).
        """
        await self.limiter.acquire()
        try:
            async with self._http.stream(
                "GET",
                path,
                params=params,
                headers=self._headers,
                timeout=io_timeout if io_timeout is not None else httpx2.USE_CLIENT_DEFAULT,
            ) as response:
                if response.status_code != 200:
                    body = await response.aread()
                    raise status_error(
                        response.status_code,
                        body,
                        kind=kind,
                        namespace=namespace,
                        retry_after=_retry_after(response.headers),
                        errors=self.errors,
                    )
                lines = Lines(response.aiter_bytes(), "GET", path, self.errors)
                try:
                    yield lines
                finally:
                    await lines.aclose()
        except httpx2.TransportError as err:
            raise _unreachable("GET", path, err, self.errors) from err


async def connect(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    options: ClientOptions = ClientOptions(),
    client: type[KubeClient] = KubeClient,
) -> KubeClient:
    """``client``'s :meth:`KubeClient.from_config` in a worker thread, so reading the
    kubeconfig and the certificates never holds up the event loop."""
    return await asyncio.to_thread(client.from_config, kubeconfig, context=context, options=options)
