"""Clients of the controller API: a blocking one for the CLI, an asyncio one for daemons.

Both return :mod:`apis` objects and raise :mod:`controller.errors` exceptions, whatever the
transport said::

    with Client("unix:///run/koordpy/controller.sock") as api:
        pod = api.get(registry.resolve("po"), "web-0", "default")
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import grpc
import msgspec
from grpc import aio

from apis.codec import decode_json, encode_json
from apis.errors import DecodeError, UnknownKind
from apis.kinds import Kind, Registry, default_registry
from apis.meta import Object
from controller import errors
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.address import Address, resolve

__all__ = [
    "CHUNK_SIZE",
    "Applied",
    "AsyncClient",
    "Client",
    "Mode",
    "Page",
    "Unauthenticated",
    "Unreachable",
    "WatchEvent",
]

_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Objects :meth:`Client.list` asks for per page (kubectl's ``--chunk-size`` default).
CHUNK_SIZE = 500
_REASON_KEY = "koordpy-reason"


class Unreachable(errors.ControllerError):
    """Nothing answers at the API address."""


class Unauthenticated(errors.ControllerError):
    """The API refused the bearer token (or none was given)."""


class Mode(enum.Enum):
    """How :meth:`Client.apply` writes: upsert, create only, or update only."""

    APPLY = pb.APPLY_MODE_APPLY
    CREATE = pb.APPLY_MODE_CREATE
    UPDATE = pb.APPLY_MODE_UPDATE


@dataclass(frozen=True, slots=True)
class Applied:
    """One object written: ``outcome`` is created, configured, unchanged (or deleted).

    ``object`` is ``None`` when the caller asked the server not to send it back.
    """

    outcome: str
    object: Object | None


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list; ``continue_`` (empty on the last) asks for the next."""

    items: list[Object]
    resource_version: int
    continue_: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """``type`` is ADDED, MODIFIED or DELETED; ``resource_version`` resumes after it."""

    type: str
    object: Object
    resource_version: int


_OUTCOMES = {
    pb.OUTCOME_CREATED: "created",
    pb.OUTCOME_CONFIGURED: "configured",
    pb.OUTCOME_UNCHANGED: "unchanged",
    pb.OUTCOME_DELETED: "deleted",
}
_EVENT_TYPES = {
    pb.EVENT_TYPE_ADDED: "ADDED",
    pb.EVENT_TYPE_MODIFIED: "MODIFIED",
    pb.EVENT_TYPE_DELETED: "DELETED",
}
_STATUS_ERRORS: dict[grpc.StatusCode, type[errors.StoreError]] = {
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.AlreadyExists,
    grpc.StatusCode.ABORTED: errors.Conflict,
    grpc.StatusCode.INVALID_ARGUMENT: errors.Invalid,
    grpc.StatusCode.OUT_OF_RANGE: errors.Expired,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.StoreError,
}
_CODE_ERRORS: dict[int, type[errors.StoreError]] = {
    pb.ERROR_CODE_NOT_FOUND: errors.NotFound,
    pb.ERROR_CODE_ALREADY_EXISTS: errors.AlreadyExists,
    pb.ERROR_CODE_CONFLICT: errors.Conflict,
    pb.ERROR_CODE_INVALID: errors.Invalid,
    pb.ERROR_CODE_EXPIRED: errors.Expired,
}


def _object_error(detail: Any) -> errors.StoreError:
    """The error one object of an Apply batch got."""
    cls = _CODE_ERRORS.get(detail.code, errors.StoreError)
    if cls is errors.Invalid:
        return errors.Invalid(detail.message, field=detail.field, value=detail.value)
    return cls(detail.message)


class _Head(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""


_HEAD = msgspec.json.Decoder(_Head)


class _Translator:
    """gRPC failures -> the exceptions the rest of koordpy knows."""

    def __init__(self, address: Address) -> None:
        self.address = address

    def error(self, err: grpc.RpcError) -> Exception:
        code = err.code()
        details = err.details() or ""
        reason = ""
        metadata: Any = err.trailing_metadata() or ()
        for key, value in metadata:
            if key == _REASON_KEY:
                reason = value if isinstance(value, str) else value.decode()
        if code == grpc.StatusCode.UNAVAILABLE:
            return Unreachable(
                f"cannot reach the koordpy API at {self.address}: is `koordpy up` running?"
                f" ({details})"
            )
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return Unreachable(f"the koordpy API at {self.address} did not answer in time")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return Unauthenticated(f"the koordpy API at {self.address} refused us: {details}")
        if reason == "UnknownKind":
            return UnknownKind(details)
        cls = _STATUS_ERRORS.get(code)
        if cls is not None:
            return cls(details)
        return errors.ControllerError(f"koordpy API error ({code.name}): {details}")


def _metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def _credentials(tls_ca: Path | None) -> grpc.ChannelCredentials | None:
    if tls_ca is None:
        return None
    try:
        roots = tls_ca.read_bytes()
    except OSError as err:
        raise errors.ConfigError(f"--tls-ca: cannot read {str(tls_ca)!r}: {err.strerror}") from None
    return grpc.ssl_channel_credentials(root_certificates=roots)


_OPTIONS = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
)


class _Codec:
    """Object bodies <-> the kinds of one registry."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def decode(self, body: bytes, key: str = "") -> Object:
        if key:
            return decode_json(body, self.registry.for_key(key).type)
        head = _HEAD.decode(body)
        return decode_json(body, self.registry.for_gvk(head.api_version, head.kind).type)

    def applied(self, result: Any) -> Applied | errors.StoreError:
        if result.HasField("error"):
            return _object_error(result.error)
        obj = self.decode(result.object) if result.object else None
        return Applied(_OUTCOMES.get(result.outcome, "unchanged"), obj)

    def page(self, response: Any, key: str) -> Page:
        return Page(
            [self.decode(body, key) for body in response.items],
            response.resource_version,
            getattr(response, "continue"),
        )

    def event(self, message: Any) -> WatchEvent:
        return WatchEvent(
            _EVENT_TYPES.get(message.type, "MODIFIED"),
            self.decode(message.object, message.kind),
            message.resource_version,
        )


def _apply_request(objects: Sequence[Object], mode: Mode, omit_objects: bool) -> Any:
    return pb.ApplyRequest(
        mode=mode.value,
        objects=[encode_json(obj) for obj in objects],
        omit_objects=omit_objects,
    )


def _list_request(
    kind: Kind, namespace: str | None, selector: str, limit: int, continue_: str
) -> Any:
    if limit < 0:
        raise errors.Invalid(f"chunk size must be >= 0, got {limit}", field="limit")
    return pb.ListRequest(
        kind=kind.key,
        namespace=namespace or "",
        label_selector=selector,
        limit=limit,
        **{"continue": continue_},
    )


def _watch_request(
    kind: Kind | None, namespace: str | None, selector: str, resource_version: int | None
) -> Any:
    request = pb.WatchRequest(
        kind=kind.key if kind is not None else "",
        namespace=namespace or "",
        label_selector=selector,
    )
    if resource_version is not None:
        request.resource_version = resource_version
    return request


def _single(results: list[Applied | errors.StoreError]) -> Object:
    (result,) = results
    if isinstance(result, Exception):
        raise result
    if result.object is None:  # pragma: no cover - only when omit_objects was asked
        raise DecodeError("the API returned no object")
    return result.object


class Client:
    """Blocking client (one channel; safe to share between threads)."""

    def __init__(
        self,
        address: Address | str | None = None,
        *,
        token: str = "",
        registry: Registry | None = None,
        timeout: float = 60.0,
        tls_ca: Path | None = None,
    ) -> None:
        self.address = address if isinstance(address, Address) else resolve(address)
        self._metadata = _metadata(token)
        self._timeout = timeout
        self._codec = _Codec(registry or default_registry())
        self._errors = _Translator(self.address)
        credentials = _credentials(tls_ca)
        target = self.address.target
        self._channel = (
            grpc.secure_channel(target, credentials, options=_OPTIONS)
            if credentials is not None
            else grpc.insecure_channel(target, options=_OPTIONS)
        )
        self._stub = pb_grpc.ObjectsStub(self._channel)

    @property
    def registry(self) -> Registry:
        return self._codec.registry

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: Any, request: Any) -> Any:
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise self._errors.error(err) from None

    def apply(
        self,
        objects: Sequence[Object],
        *,
        mode: Mode = Mode.APPLY,
        omit_objects: bool = False,
    ) -> list[Applied | errors.StoreError]:
        """Write a batch; one result per object, in order (an error does not stop the rest)."""
        response = self._call(self._stub.Apply, _apply_request(objects, mode, omit_objects))
        return [self._codec.applied(result) for result in response.results]

    def create(self, obj: Object) -> Object:
        return _single(self.apply([obj], mode=Mode.CREATE))

    def update(self, obj: Object) -> Object:
        """Update; a non-empty ``metadata.resourceVersion`` must still be current (Conflict)."""
        return _single(self.apply([obj], mode=Mode.UPDATE))

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object:
        response = self._call(
            self._stub.Get, pb.GetRequest(kind=kind.key, name=name, namespace=namespace)
        )
        return self._codec.decode(response.object, kind.key)

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: str = "",
        chunk_size: int = CHUNK_SIZE,
    ) -> tuple[list[Object], int]:
        """Objects sorted by namespace and name, and the resourceVersion to watch from,
        fetched ``chunk_size`` at a time (as kubectl's ``--chunk-size``; 0: in one message):
        the list at the first page's version however large it is."""
        items: list[Object] = []
        token = ""
        while True:
            page = self.list_page(
                kind, namespace=namespace, selector=selector, limit=chunk_size, continue_=token
            )
            items.extend(page.items)
            token = page.continue_
            if not token:
                return items, page.resource_version

    def list_page(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: str = "",
        limit: int = 0,
        continue_: str = "",
    ) -> Page:
        """One page of a list (see ``ListRequest`` in objects.proto)."""
        response = self._call(
            self._stub.List, _list_request(kind, namespace, selector, limit, continue_)
        )
        return self._codec.page(response, kind.key)

    def delete(
        self, kind: Kind, name: str, namespace: str = "", *, resource_version: int = 0
    ) -> tuple[Object, str]:
        """Delete (or, with finalizers, mark for deletion: outcome ``configured``)."""
        response = self._call(
            self._stub.Delete,
            pb.DeleteRequest(
                kind=kind.key, name=name, namespace=namespace, resource_version=resource_version
            ),
        )
        outcome = _OUTCOMES.get(response.outcome, "deleted")
        return self._codec.decode(response.object, kind.key), outcome

    def watch(
        self,
        kind: Kind | None = None,
        *,
        namespace: str | None = None,
        selector: str = "",
        resource_version: int | None = None,
    ) -> Generator[WatchEvent, None, None]:
        """Events until the iterator is closed (closing it cancels the stream)."""
        call = self._stub.Watch(
            _watch_request(kind, namespace, selector, resource_version),
            metadata=self._metadata,
        )
        try:
            for message in call:
                yield self._codec.event(message)
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.CANCELLED:
                return
            raise self._errors.error(err) from None
        finally:
            call.cancel()


class AsyncClient:
    """The same operations for asyncio code (the agent, watchers, benchmarks)."""

    def __init__(
        self,
        address: Address | str | None = None,
        *,
        token: str = "",
        registry: Registry | None = None,
        timeout: float = 60.0,
        tls_ca: Path | None = None,
    ) -> None:
        self.address = address if isinstance(address, Address) else resolve(address)
        self._metadata = _metadata(token)
        self._timeout = timeout
        self._codec = _Codec(registry or default_registry())
        self._errors = _Translator(self.address)
        credentials = _credentials(tls_ca)
        target = self.address.target
        self._channel = (
            aio.secure_channel(target, credentials, options=_OPTIONS)
            if credentials is not None
            else aio.insecure_channel(target, options=_OPTIONS)
        )
        self._stub = pb_grpc.ObjectsStub(self._channel)

    @property
    def registry(self) -> Registry:
        return self._codec.registry

    async def close(self) -> None:
        await self._channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise self._errors.error(err) from None

    async def apply(
        self,
        objects: Sequence[Object],
        *,
        mode: Mode = Mode.APPLY,
        omit_objects: bool = False,
    ) -> list[Applied | errors.StoreError]:
        response = await self._call(self._stub.Apply, _apply_request(objects, mode, omit_objects))
        return [self._codec.applied(result) for result in response.results]

    async def create(self, obj: Object) -> Object:
        return _single(await self.apply([obj], mode=Mode.CREATE))

    async def update(self, obj: Object) -> Object:
        return _single(await self.apply([obj], mode=Mode.UPDATE))

    async def get(self, kind: Kind, name: str, namespace: str = "") -> Object:
        response = await self._call(
            self._stub.Get, pb.GetRequest(kind=kind.key, name=name, namespace=namespace)
        )
        return self._codec.decode(response.object, kind.key)

    async def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: str = "",
        chunk_size: int = CHUNK_SIZE,
    ) -> tuple[list[Object], int]:
        items: list[Object] = []
        token = ""
        while True:
            page = await self.list_page(
                kind, namespace=namespace, selector=selector, limit=chunk_size, continue_=token
            )
            items.extend(page.items)
            token = page.continue_
            if not token:
                return items, page.resource_version

    async def list_page(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: str = "",
        limit: int = 0,
        continue_: str = "",
    ) -> Page:
        response = await self._call(
            self._stub.List, _list_request(kind, namespace, selector, limit, continue_)
        )
        return self._codec.page(response, kind.key)

    async def delete(
        self, kind: Kind, name: str, namespace: str = "", *, resource_version: int = 0
    ) -> tuple[Object, str]:
        response = await self._call(
            self._stub.Delete,
            pb.DeleteRequest(
                kind=kind.key, name=name, namespace=namespace, resource_version=resource_version
            ),
        )
        outcome = _OUTCOMES.get(response.outcome, "deleted")
        return self._codec.decode(response.object, kind.key), outcome

    async def watch(
        self,
        kind: Kind | None = None,
        *,
        namespace: str | None = None,
        selector: str = "",
        resource_version: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Events until the consumer stops iterating (the stream is then cancelled)."""
        call = self._stub.Watch(
            _watch_request(kind, namespace, selector, resource_version),
            metadata=self._metadata,
        )
        try:
            async for message in call:
                yield self._codec.event(message)
        except grpc.RpcError as err:
            raise self._errors.error(err) from None
        finally:
            call.cancel()
