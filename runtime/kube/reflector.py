"""One kind's objects kept in memory from a Kubernetes API server: LIST, then WATCH.

A :class:`Reflector` does what an informer's reflector does, for one :class:`~apis.kinds.Kind`
(optionally one namespace, label and field selector):

1. **LIST** in pages (``limit``/``continue``, :data:`DEFAULT_PAGE_SIZE` objects each), each
   page decoded in one pass into a list Struct whose items are the kind's Struct
   (:func:`apis.codec.decode_json`; about 15 % faster on pods than leaving the items raw and
   decoding them one by one, which is done only for a page where some item will not decode),
   with the cycle collector paused (it halves the cost); the whole list replaces what was
   held at once, when its last page is in, so readers never see half a list. The list's
   resourceVersion is where the watch starts.
2. **WATCH** from that resourceVersion, with bookmarks (``allowWatchBookmarks``) so the
   version moves on while nothing of this kind changes, and a server-side ``timeoutSeconds``
   (jittered, so reflectors do not all reconnect together); each ADDED, MODIFIED and DELETED
   event is applied in order, and a watch that ends is started again from the last version.
3. **410 Gone** (refused at the start, or an ERROR event with code 410: the version is older
   than the server's history) means events were lost: LIST again, and apply the difference.
   A broken connection or an unavailable server is retried from the last version after a
   jittered exponential backoff (:class:`Backoff`); nothing is relisted for it.

Identity. An object whose resourceVersion did not change stays the very object first decoded,
across watches and relists: the relist keeps the held object instead of the one just decoded.
So a store's snapshots built on reflectors keep the identity of unchanged objects, and caches
keyed by identity keep working after a relist.

Changes. Each batch of changes (one list, or the events of one chunk the server flushed) is
handed in order to ``on_change`` as :class:`Delta` values (key, object before, object after;
None: absent), then :attr:`Reflector.version` moves on and :meth:`Reflector.changed_after`
wakes. A bookmark changes no object and wakes nothing.

Undecodable objects (a field our Structs do not know) are logged and counted
(:attr:`Reflector.decode_errors`): a modified one keeps its last decoded state, a new one is
left out, a deleted one is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar, cast

import msgspec

from apis.codec import decode_json
from apis.errors import DecodeError
from apis.kinds import Kind
from apis.meta import Object
from runtime.kube.client import KubeClient, Status, error_from_status, resource_path
from runtime.kube.errors import Expired, KubeError, ServerUnavailable

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_WATCH_TIMEOUT",
    "Backoff",
    "Delta",
    "Key",
    "Reflector",
]

log = logging.getLogger(__name__)

#: Objects per page of a list (client-go's informers ask for 500).
DEFAULT_PAGE_SIZE: Final = 500
#: Shortest server-side watch timeout, seconds; each watch asks for between it and twice it.
DEFAULT_WATCH_TIMEOUT: Final = 300.0
#: Seconds a watch's connection may stay silent past its server-side timeout before it is
#: taken for broken.
WATCH_READ_SLACK: Final = 30.0
#: A watch that ends this soon (seconds) without an event counts as a failure (backoff).
SHORT_WATCH: Final = 1.0

#: An object's (namespace, name); the namespace is empty for a cluster-scoped kind.
Key = tuple[str, str]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Delta:
    """One object's change: its state before and after (None: absent)."""

    key: Key
    before: Object | None
    after: Object | None


class Backoff:
    """Jittered exponential backoff: ``initial`` seconds, doubled after each failure up to
    ``maximum``, each delay drawn between half of it and all of it (so reflectors that failed
    together do not retry together); :meth:`reset` after a success."""

    def __init__(
        self,
        initial: float = 0.8,
        maximum: float = 30.0,
        *,
        factor: float = 2.0,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self._rng = rng
        self.failures = 0

    def next(self, at_least: float | None = None) -> float:
        """The delay before the next try (at least ``at_least``: a server's Retry-After)."""
        delay = min(self.maximum, self.initial * self.factor**self.failures)
        self.failures += 1
        delay *= 0.5 + 0.5 * self._rng()
        return max(delay, at_least or 0.0)

    def reset(self) -> None:
        self.failures = 0


# --- wire shapes -----------------------------------------------------------------------------


class _ListMeta(msgspec.Struct, frozen=True):
    resourceVersion: str = ""  # noqa: N815 - the wire name
    # ``continue`` is a keyword
    continue_: str = msgspec.field(default="", name="continue")


class _RawList(msgspec.Struct, frozen=True):
    """A list response, its items left undecoded."""

    metadata: _ListMeta = _ListMeta()
    items: list[msgspec.Raw] = []


class _TypedList(msgspec.Struct, Generic[T], frozen=True):
    """A list response, its items decoded as ``T`` in the same pass."""

    metadata: _ListMeta = _ListMeta()
    items: list[T] = []


class _Event(msgspec.Struct, frozen=True):
    """A watch event, its object left undecoded until its type says what it is."""

    type: str
    object: msgspec.Raw


class _Meta(msgspec.Struct, frozen=True, rename="camel"):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""
    uid: str = ""


class _MetaOnly(msgspec.Struct, frozen=True):
    """Just an object's identity and version: of a bookmark, or of an undecodable object."""

    metadata: _Meta = _Meta()


_EVENT: Final = msgspec.json.Decoder(_Event)
_META_ONLY: Final = msgspec.json.Decoder(_MetaOnly)
_STATUS: Final = msgspec.json.Decoder(Status)
_RAW_LIST: Final = msgspec.json.Decoder(_RawList)


def _key(obj: Object) -> Key:
    meta = obj.metadata
    return (meta.namespace, meta.name)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection during the block (if there was any before it).

    A page of pods decodes into hundreds of thousands of containers (managed fields, loose
    maps), all kept: with the collector on, their allocation sets off collection after
    collection that can free none of them (decoded objects form no cycles), which doubles
    what decoding a page costs. Nothing else runs on the loop meanwhile: the block awaits
    nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _identity(raw: msgspec.Raw | bytes) -> _Meta:
    """The name, namespace and version of a raw object (:class:`DecodeError` if it has none
    that can be read)."""
    try:
        return _META_ONLY.decode(raw).metadata
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise DecodeError(f"an object without readable metadata: {err}") from None


# --- the reflector ---------------------------------------------------------------------------


class Reflector:
    """One kind's objects, listed and then watched; run :meth:`run` as a task.

    ``namespace`` (empty: every namespace), ``label_selector`` and ``field_selector`` narrow
    what is listed and watched, as the API server reads them. ``on_change`` is called on the
    event loop with each batch of :class:`Delta` values (see the module docstring); it must
    not block, and what it raises ends :meth:`run`.
    """

    def __init__(
        self,
        client: KubeClient,
        kind: Kind,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        page_size: int = DEFAULT_PAGE_SIZE,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        on_change: Callable[[Sequence[Delta]], None] | None = None,
        on_undecodable: Callable[[Key, str, DecodeError], None] | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace if kind.namespaced else ""
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.on_change = on_change
        #: told (key, uid, error) of each object version that does not decode
        self.on_undecodable = on_undecodable
        self.backoff = backoff or Backoff()
        self._path = resource_path(kind, self.namespace)
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        where = f" in {self.namespace}" if self.namespace else ""
        self.name = f"{kind.qualified_plural}{where}"
        # A list Struct of this kind's items (a type built at run time: typed as Any).
        self._list_type: Any = cast("Any", _TypedList)[kind.type]
        self._objects: dict[Key, Object] = {}
        self._wake = asyncio.Event()
        #: Set once the first list is in: :attr:`objects` holds the whole kind from then on.
        self.synced = asyncio.Event()
        #: The resourceVersion of the last list, event or bookmark (empty before the list).
        self.resource_version = ""
        #: Batches of changes applied so far (see :meth:`changed_after`).
        self.version = 0
        #: Lists completed, watches started, pages of the last list, objects not decoded.
        self.lists = 0
        self.watches = 0
        self.last_list_pages = 0
        self.decode_errors = 0

    def __repr__(self) -> str:
        return f"Reflector({self.name})"

    @property
    def objects(self) -> Mapping[Key, Object]:
        """What is held now, by (namespace, name); a read-only view, not a copy."""
        return MappingProxyType(self._objects)

    def get(self, name: str, namespace: str = "") -> Object | None:
        """One object held now, or None."""
        return self._objects.get((namespace if self.kind.namespaced else "", name))

    async def changed_after(self, version: int) -> int:
        """Wait until :attr:`version` is other than ``version`` (at once if it already is);
        the version then."""
        while self.version == version:
            await self._wake.wait()
        return self.version

    def _publish(self, deltas: Sequence[Delta]) -> None:
        if not deltas:
            return
        self.version += 1
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()
        if self.on_change is not None:
            self.on_change(deltas)

    async def run(self) -> None:
        """List, then watch, until cancelled; failures are retried, never raised (only what
        ``on_change`` raises, and bugs, end it). Run again after it was cancelled, it goes on
        watching from the last version it saw (a first list only if none completed)."""
        loop = asyncio.get_running_loop()
        must_list = not self.synced.is_set()
        while True:
            try:
                if must_list:
                    await self._list()
                    must_list = False
                    self.backoff.reset()
                started = loop.time()
                if not await self._watch() and loop.time() - started < SHORT_WATCH:
                    raise self.client.errors.unavailable(f"the watch of {self.name} ended at once")
                self.backoff.reset()
            except Expired as err:
                log.info("%s: %s; listing again", self, err.message)
                must_list = True
            except ServerUnavailable as err:
                delay = self.backoff.next(err.retry_after)
                log.warning("%s: %s; again in %.1fs", self, err, delay)
                await asyncio.sleep(delay)
            except (KubeError, DecodeError) as err:
                delay = self.backoff.next()
                log.error("%s: %s; again in %.1fs", self, err, delay)
                await asyncio.sleep(delay)

    # --- list --------------------------------------------------------------------------------

    async def _list(self) -> None:
        """One full list, page by page; replaces what is held when the last page is in."""
        held = self._objects
        fresh: dict[Key, Object] = {}
        limit = self.page_size
        token = ""
        pages = 0
        while True:
            params: dict[str, str | int] = dict(self._selectors)
            if limit > 0:
                params["limit"] = limit
            if token:
                params["continue"] = token
            try:
                body = await self.client.get(
                    self._path, params=params, kind=self.kind, namespace=self.namespace
                )
            except Expired as err:
                if not token:
                    raise
                # The pages' snapshot left the server's history before the last page was
                # read: a paged list cannot finish now, so read it in one piece.
                log.info("%s: %s; listing again in one page", self, err.message)
                fresh.clear()
                limit, token, pages = 0, "", 0
                continue
            pages += 1
            meta = self._take_page(body, held, fresh)
            token = meta.continue_
            if not token:
                break
        deltas = [
            Delta(key, before, obj)
            for key, obj in fresh.items()
            if (before := held.get(key)) is not obj
        ]
        deltas.extend(Delta(key, obj, None) for key, obj in held.items() if key not in fresh)
        self._objects = fresh
        self.resource_version = meta.resourceVersion
        self.lists += 1
        self.last_list_pages = pages
        log.debug(
            "%s: listed %s objects in %s pages at %s, %s changed",
            self,
            len(fresh),
            pages,
            meta.resourceVersion,
            len(deltas),
        )
        self._publish(deltas)
        self.synced.set()

    def _take_page(
        self, body: bytes, held: Mapping[Key, Object], fresh: dict[Key, Object]
    ) -> _ListMeta:
        """Decode one page into ``fresh``, keeping each object of ``held`` whose version did
        not change; the page's list metadata."""
        try:
            with _collector_paused():
                page = decode_json(body, self._list_type)
        except DecodeError:  # some item will not decode: take the others one by one
            return self._take_items(body, held, fresh)
        for obj in page.items:
            key = _key(obj)
            before = held.get(key)
            if before is not None and (
                before.metadata.resource_version == obj.metadata.resource_version
            ):
                obj = before
            fresh[key] = obj
        meta: _ListMeta = page.metadata
        return meta

    def _take_items(
        self, body: bytes, held: Mapping[Key, Object], fresh: dict[Key, Object]
    ) -> _ListMeta:
        try:
            page = _RAW_LIST.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise DecodeError(f"a list of {self.name} that is not one: {err}") from None
        for raw in page.items:
            try:
                obj = decode_json(bytes(raw), self.kind.type)
            except DecodeError as err:
                ident = _identity(raw)
                key = (ident.namespace, ident.name)
                self._undecodable(key, err, ident.uid)
                before = held.get(key)
                if before is not None:
                    fresh[key] = before
                continue
            key = _key(obj)
            before = held.get(key)
            if before is not None and (
                before.metadata.resource_version == obj.metadata.resource_version
            ):
                obj = before
            fresh[key] = obj
        return page.metadata

    def _undecodable(self, key: Key, err: DecodeError, uid: str) -> None:
        self.decode_errors += 1
        namespace, name = key
        shown = f"{namespace}/{name}" if namespace else name
        log.error("%s: cannot decode %s: %s", self, shown, err)
        if self.on_undecodable is not None:
            self.on_undecodable(key, uid, err)

    # --- watch -------------------------------------------------------------------------------

    async def _watch(self) -> bool:
        """One watch from :attr:`resource_version` until the server ends it; whether any
        event came. Raises :class:`~runtime.kube.errors.Expired` for 410 Gone."""
        timeout = int(self.watch_timeout * (1.0 + random.random()))
        params: dict[str, str | int] = {
            **self._selectors,
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": timeout,
        }
        self.watches += 1
        got = False
        async with self.client.stream(
            self._path,
            params=params,
            io_timeout=timeout + WATCH_READ_SLACK,
            kind=self.kind,
            namespace=self.namespace,
        ) as lines:
            async for batch in lines:
                got = True
                deltas: list[Delta] = []
                try:
                    for line in batch:
                        self._apply(line, deltas)
                finally:  # what came before an ERROR event still counts
                    self._publish(deltas)
        return got

    def _apply(self, line: bytes, deltas: list[Delta]) -> None:
        """Apply one watch event to what is held, adding its change (if any) to ``deltas``.

        A line that is no event at all breaks the stream (:class:`ServerUnavailable`: watch
        again from the last version)."""
        try:
            event = _EVENT.decode(line)
            if event.type == "ERROR":
                status = _STATUS.decode(event.object)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise self.client.errors.unavailable(
                f"the watch of {self.name} sent a bad event: {err}"
            ) from None
        kind = event.type
        if kind == "ERROR":
            raise error_from_status(
                status, kind=self.kind, namespace=self.namespace, errors=self.client.errors
            )
        if kind == "BOOKMARK":
            self.resource_version = _identity(event.object).resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s: ignoring a watch event of type %r", self, kind)
            return
        try:
            obj = decode_json(bytes(event.object), self.kind.type)
        except DecodeError as err:
            ident = _identity(event.object)
            key = (ident.namespace, ident.name)
            self._undecodable(key, err, ident.uid)
            self.resource_version = ident.resource_version
            if kind == "DELETED" and (gone := self._objects.pop(key, None)) is not None:
                deltas.append(Delta(key, gone, None))
            return
        key = _key(obj)
        version = obj.metadata.resource_version
        before = self._objects.get(key)
        if kind == "DELETED":
            if before is not None:
                del self._objects[key]
                deltas.append(Delta(key, before, None))
        elif before is None or before.metadata.resource_version != version:
            self._objects[key] = obj
            deltas.append(Delta(key, before, obj))
        self.resource_version = version
