"""The controller API server: ``grpc.aio`` over the :class:`~controller.store.sqlite.Store`.

Writes go through a group commit (:mod:`controller.api.groupcommit`) so concurrent requests
share one transaction; reads go straight to the store. Store errors become gRPC statuses (see
``objects.proto``) carrying the store's message and a ``koordpy-reason`` trailer.

A unix socket is guarded by its file mode (0600, parent directory 0700 when created here);
TCP always needs a bearer token (``authorization: Bearer <token>``) and may use TLS::

    async with ApiServer(store, "unix:///run/koordpy/controller.sock"):
        await stopping.wait()
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Self

import grpc
import msgspec
from grpc import aio

from apis import labels
from apis.codec import check_depth, decode_json
from apis.errors import DecodeError, UnknownKind
from apis.kinds import Kind
from apis.meta import Object
from controller import errors
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.address import Address, resolve
from controller.api.apply import apply as kubectl_apply
from controller.api.groupcommit import GroupCommit
from controller.api.wire import WireEncoder
from controller.store.cluster import Outcome
from controller.store.persistence import StorageFull
from controller.store.sqlite import Store

__all__ = ["MAX_MESSAGE_BYTES", "REASON_KEY", "ApiServer", "ListenError"]

log = logging.getLogger(__name__)

#: Largest request or response (a batch of Apply objects, a page of a List).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Object bytes a List page holds at most (then it ends with a continue token), and those an
#: unpaged List may answer with (larger: RESOURCE_EXHAUSTED asking for pages).
PAGE_BYTES = MAX_MESSAGE_BYTES // 4
UNPAGED_BYTES = MAX_MESSAGE_BYTES - 1024 * 1024
#: Trailing-metadata key carrying the Kubernetes-style reason of an error status.
REASON_KEY = "koordpy-reason"

_OUTCOMES = {
    Outcome.CREATED: pb.OUTCOME_CREATED,
    Outcome.CONFIGURED: pb.OUTCOME_CONFIGURED,
    Outcome.UNCHANGED: pb.OUTCOME_UNCHANGED,
    Outcome.DELETED: pb.OUTCOME_DELETED,
}
_EVENT_TYPES = {
    "ADDED": pb.EVENT_TYPE_ADDED,
    "MODIFIED": pb.EVENT_TYPE_MODIFIED,
    "DELETED": pb.EVENT_TYPE_DELETED,
}
#: store error class -> (gRPC status, reason, Apply error code); most specific first.
_ERRORS: tuple[tuple[type[Exception], grpc.StatusCode, str, Any], ...] = (
    (errors.NotFound, grpc.StatusCode.NOT_FOUND, "NotFound", pb.ERROR_CODE_NOT_FOUND),
    (
        errors.AlreadyExists,
        grpc.StatusCode.ALREADY_EXISTS,
        "AlreadyExists",
        pb.ERROR_CODE_ALREADY_EXISTS,
    ),
    (errors.Conflict, grpc.StatusCode.ABORTED, "Conflict", pb.ERROR_CODE_CONFLICT),
    (errors.Invalid, grpc.StatusCode.INVALID_ARGUMENT, "Invalid", pb.ERROR_CODE_INVALID),
    (DecodeError, grpc.StatusCode.INVALID_ARGUMENT, "Invalid", pb.ERROR_CODE_INVALID),
    (UnknownKind, grpc.StatusCode.INVALID_ARGUMENT, "UnknownKind", pb.ERROR_CODE_INVALID),
    (labels.SelectorError, grpc.StatusCode.INVALID_ARGUMENT, "BadRequest", pb.ERROR_CODE_INVALID),
    (errors.Expired, grpc.StatusCode.OUT_OF_RANGE, "Expired", pb.ERROR_CODE_EXPIRED),
    (StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED, "StorageFull", pb.ERROR_CODE_INTERNAL),
)


class ListenError(errors.ControllerError):
    """The API cannot listen where it was told to (socket in use, bad TLS files, no token)."""


class _Head(msgspec.Struct, rename="camel"):
    """Just enough of an object body to find its kind."""

    api_version: str = ""
    kind: str = ""


_HEAD = msgspec.json.Decoder(_Head)


def _classify(err: Exception) -> tuple[grpc.StatusCode, str, Any]:
    for cls, status, reason, code in _ERRORS:
        if isinstance(err, cls):
            return status, reason, code
    return grpc.StatusCode.INTERNAL, "InternalError", pb.ERROR_CODE_INTERNAL


def _message(err: Exception) -> str:
    return err.message if isinstance(err, DecodeError) else str(err)


def _error_detail(err: Exception) -> Any:
    _, _, code = _classify(err)
    return pb.Error(
        code=code,
        message=_message(err),
        field=str(getattr(err, "field", "") or ""),
        value=str(getattr(err, "value", "") or ""),
    )


async def _abort(context: aio.ServicerContext[Any, Any], err: Exception) -> NoReturn:
    status, reason, _ = _classify(err)
    if isinstance(err, StorageFull):
        log.warning("API request refused: %s", err)  # one line, no traceback per request
    await context.abort(status, str(err), trailing_metadata=((REASON_KEY, reason),))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class _Servicer(pb_grpc.ObjectsServicer):  # type: ignore[misc]
    """The five RPCs, each a thin translation onto the store."""

    def __init__(self, store: Store, commits: GroupCommit[Store] | None = None) -> None:
        self._store = store
        self._wire = WireEncoder(store)
        #: the writes of concurrent requests, committed together
        self._commits = commits if commits is not None else GroupCommit(store)
        # Kind properties are derived from the Struct on each access; keep what we need.
        self._versions: dict[Kind, str] = {}
        self._keys: dict[type[Object], str] = {}

    # -- lookups ---------------------------------------------------------------------------

    def _kind(self, key: str) -> Kind:
        return self._store.registry.for_key(key)

    def _decode(self, body: bytes) -> Object:
        check_depth(body)  # before any decoder recurses into it
        try:
            head = _HEAD.decode(body)
        except msgspec.DecodeError as err:
            raise DecodeError(f"invalid JSON: {err}") from None
        except msgspec.ValidationError as err:
            raise DecodeError(f"not an object: {err}") from None
        if not head.api_version:
            raise DecodeError("apiVersion is required", field="apiVersion")
        if not head.kind:
            raise DecodeError("kind is required", field="kind")
        try:
            kind = self._store.registry.for_gvk(head.api_version, head.kind)
        except UnknownKind as err:
            raise DecodeError(str(err), field="kind", value=head.kind) from None
        obj = decode_json(body, kind.type, depth_checked=True)
        canonical = self._versions.get(kind)
        if canonical is None:
            canonical = self._versions[kind] = kind.api_version
        if obj.api_version != canonical:
            obj = msgspec.structs.replace(obj, api_version=canonical)
        return obj

    def _key_of(self, obj: Object) -> str:
        key = self._keys.get(type(obj))
        if key is None:
            key = self._keys[type(obj)] = self._store.registry.for_object(obj).key
        return key

    @staticmethod
    def _namespace(kind: Kind, namespace: str) -> str:
        if not kind.namespaced:
            return ""
        return namespace or "default"

    @staticmethod
    def _selector(text: str) -> labels.Selector | None:
        return labels.parse_selector(text) if text.strip() else None

    # -- RPCs --------------------------------------------------------------------------------

    async def Apply(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:  # noqa: N802
        write = _WRITES.get(request.mode)
        if write is None:
            await _abort(context, DecodeError(f"unknown apply mode {request.mode}"))
        decoded: list[Object | Exception] = []
        for body in request.objects:
            try:
                decoded.append(self._decode(body))
            except DecodeError as err:
                decoded.append(err)

        def run(store: Store) -> list[tuple[Object, Outcome] | Exception]:
            done: list[tuple[Object, Outcome] | Exception] = []
            for item in decoded:
                if isinstance(item, Exception):
                    done.append(item)
                    continue
                try:
                    done.append(write(store, item))
                except (errors.StoreError, DecodeError, UnknownKind) as err:
                    done.append(err)
            return done

        try:
            outcomes = await self._commits.submit(run)
        except errors.StoreError as err:  # the batch could not be committed (disk full...)
            await _abort(context, err)
        omit = request.omit_objects
        results = []
        for outcome in outcomes:
            if isinstance(outcome, Exception):
                results.append(pb.ApplyResult(error=_error_detail(outcome)))
            else:
                obj, how = outcome
                results.append(
                    pb.ApplyResult(
                        outcome=_OUTCOMES[how], object=b"" if omit else self._wire.encode(obj)
                    )
                )
        return pb.ApplyResponse(results=results, resource_version=self._store.resource_version)

    async def Get(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:  # noqa: N802
        try:
            kind = self._kind(request.kind)
            obj = self._store.get(kind, request.name, self._namespace(kind, request.namespace))
        except (errors.StoreError, UnknownKind) as err:
            await _abort(context, err)
        return pb.GetResponse(object=self._wire.encode(obj))

    async def List(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:  # noqa: N802
        """A page of at most ``limit`` objects and :data:`PAGE_BYTES` (see objects.proto);
        an unpaged list (limit 0) answers everything or, past :data:`UNPAGED_BYTES`,
        RESOURCE_EXHAUSTED asking for pages."""
        limit = request.limit
        try:
            kind = self._kind(request.kind)
            page = self._store.list_page(
                kind,
                namespace=(request.namespace or None) if kind.namespaced else None,
                selector=self._selector(request.label_selector),
                limit=limit,
                continue_=getattr(request, "continue"),
                max_bytes=PAGE_BYTES if limit else 0,
            )
        except (errors.StoreError, UnknownKind, labels.SelectorError) as err:
            await _abort(context, err)
        items = [self._wire.encode(obj) for obj in page.items]
        if not limit and sum(map(len, items)) > UNPAGED_BYTES:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the list of {kind.qualified_plural} exceeds {UNPAGED_BYTES} bytes, more than"
                " one message holds: ask for it in pages (limit and continue)",
                trailing_metadata=((REASON_KEY, "TooLarge"),),
            )
        return pb.ListResponse(
            items=items,
            resource_version=page.resource_version,
            **{"continue": page.continue_},  # a keyword in Python
        )

    async def Delete(self, request: Any, context: aio.ServicerContext[Any, Any]) -> Any:  # noqa: N802
        try:
            kind = self._kind(request.kind)
            name = request.name
            namespace = self._namespace(kind, request.namespace)
            version = str(request.resource_version) if request.resource_version else ""
            obj, outcome = await self._commits.submit(
                lambda store: store.delete(kind, name, namespace, resource_version=version)
            )
        except (errors.StoreError, UnknownKind) as err:
            await _abort(context, err)
        return pb.DeleteResponse(outcome=_OUTCOMES[outcome], object=self._wire.encode(obj))

    async def Watch(  # noqa: N802
        self, request: Any, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        try:
            kind = self._kind(request.kind) if request.kind else None
            watch = self._store.watch(
                kind,
                namespace=request.namespace or None,
                selector=self._selector(request.label_selector),
                resource_version=(
                    request.resource_version if request.HasField("resource_version") else None
                ),
            )
        except (errors.StoreError, UnknownKind, labels.SelectorError) as err:
            await _abort(context, err)
        try:
            async for event in watch:
                yield pb.WatchEvent(
                    type=_EVENT_TYPES[event.type],
                    kind=self._key_of(event.object),
                    object=self._wire.encode(event.object),
                    resource_version=event.resource_version,
                )
        except errors.StoreError as err:
            await _abort(context, err)
        finally:
            watch.close()


def _create(store: Store, obj: Object) -> tuple[Object, Outcome]:
    return store.create(obj), Outcome.CREATED


def _update(store: Store, obj: Object) -> tuple[Object, Outcome]:
    return store.update(obj), Outcome.CONFIGURED


_WRITES: dict[int, Callable[[Store, Object], tuple[Object, Outcome]]] = {
    pb.APPLY_MODE_APPLY: kubectl_apply,
    pb.APPLY_MODE_CREATE: _create,
    pb.APPLY_MODE_UPDATE: _update,
}


if TYPE_CHECKING:
    _Interceptor = aio.ServerInterceptor[Any, Any]
else:  # not subscriptable at run time
    _Interceptor = aio.ServerInterceptor


class _BearerAuth(_Interceptor):
    """Refuse every call whose ``authorization`` metadata is not ``Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def _authorized(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> bool:
        for key, value in metadata or ():
            if key == "authorization":
                given = value if isinstance(value, bytes) else value.encode()
                return hmac.compare_digest(given, self._expected)
        return False

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler: grpc.RpcMethodHandler[Any, Any] | None = await continuation(handler_call_details)
        if handler is None or self._authorized(handler_call_details.invocation_metadata):
            return handler  # type: ignore[return-value]  # None: unknown method, gRPC answers
        return _deny(handler)


def _deny(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    async def refuse(request: Any, context: aio.ServicerContext[Any, Any]) -> NoReturn:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            "missing or wrong bearer token (pass --token or set KOORDPY_TOKEN)",
            trailing_metadata=((REASON_KEY, "Unauthorized"),),
        )
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    # A coroutine (not an async generator) serves streaming methods too: it aborts first.
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def _socket_in_use(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _private_umask(private: bool) -> Iterator[None]:
    """Umask 0177 while the unix socket is bound, so it is 0600 from the moment it exists.

    gRPC binds the socket itself (no hook between ``socket()`` and ``bind()``), and a
    ``chmod`` after the bind leaves a window in which another local user could connect. The
    umask is process-wide, so this runs only in start-up, before any loop writes files; a
    file created meanwhile only comes out narrower.
    """
    if not private:
        yield
        return
    previous = os.umask(0o177)
    try:
        yield
    finally:
        os.umask(previous)


def _prepare_socket(path: Path) -> None:
    """Create the parent directory (0700) and remove a stale socket left by a dead server."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ListenError(f"cannot listen on {path}: it exists and is not a socket")
    if _socket_in_use(path):
        raise ListenError(f"cannot listen on {path}: another server is listening there")
    log.info("removing stale API socket %s", path)
    path.unlink()


class ApiServer:
    """The gRPC API over one store, on one address; start/stop or ``async with``.

    ``address`` None (or empty) means ``$KOORDPY_API``, else the default socket (see
    :func:`controller.api.address.resolve`). ``grace`` is how long :meth:`stop` lets calls in
    flight finish; open watches are cancelled when it runs out.
    """

    def __init__(
        self,
        store: Store,
        address: Address | str | None = None,
        *,
        token: str = "",
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        grace: float = 5.0,
        commits: GroupCommit[Store] | None = None,
    ) -> None:
        self._store = store
        self._commits = commits if commits is not None else GroupCommit(store)
        self._address = address if isinstance(address, Address) else resolve(address)
        self._token = token
        self._tls = (tls_cert, tls_key)
        self._grace = grace
        self._server: aio.Server | None = None
        self._bound: Address | None = None

    @property
    def address(self) -> Address:
        """Where it listens (the real port once started on ``host:0``)."""
        return self._bound or self._address

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("API server already started")
        address = self._address
        if address.path is None and not self._token:
            raise ListenError(f"a TCP API ({address}) needs a bearer token")
        if address.path is not None and any(self._tls):
            raise ListenError("TLS applies to a TCP API only, not a unix socket")
        if (self._tls[0] is None) != (self._tls[1] is None):
            raise ListenError("TLS needs both a certificate and a key")
        server = aio.server(
            interceptors=[_BearerAuth(self._token)] if address.path is None else [],
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        pb_grpc.add_ObjectsServicer_to_server(_Servicer(self._store, self._commits), server)
        try:
            if address.path is not None:
                _prepare_socket(address.path)
            with _private_umask(address.path is not None):
                port = self._bind(server, address)
                await server.start()
        except (OSError, RuntimeError) as err:
            raise ListenError(f"cannot listen on {address}: {err}") from err
        if address.path is not None:
            self._bound = address
        else:
            self._bound = address.with_port(port)
        self._server = server
        log.info("controller API listening on %s", self._bound)

    def _bind(self, server: aio.Server, address: Address) -> int:
        if address.path is not None:
            return server.add_insecure_port(address.target)
        cert, key = self._tls
        if cert is not None and key is not None:
            try:
                credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
            except OSError as err:
                raise ListenError(f"cannot read TLS certificate or key: {err}") from err
            return server.add_secure_port(address.target, credentials)
        return server.add_insecure_port(address.target)

    async def stop(self, grace: float | None = None) -> None:
        """Let calls in flight finish for ``grace`` seconds, then cancel the rest."""
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop(self._grace if grace is None else grace)
        path = self._address.path
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
        log.info("controller API on %s stopped", self._bound)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
