"""The in-memory backend of the :class:`~controller.store.cluster.Cluster` seam: Kubernetes
objects with Kubernetes semantics (``koordpy simulate``; the base of the SQLite backend,
:mod:`controller.store.sqlite`).

- Namespaced kinds default to namespace ``default``; cluster-scoped objects have none.
- ``metadata.resourceVersion`` is the decimal string of one global counter, increased by every
  write. A write carrying a stale version fails with :class:`~controller.errors.Conflict`; an
  empty version makes the write unconditional.
- ``create`` sets the uid, creationTimestamp (whole seconds, UTC, from the injected clock) and
  generation 1, and generates the name from ``metadata.generateName`` when no name is given.
- ``update`` keeps server-owned metadata; ``generation`` counts changes outside metadata and
  status; an update that changes nothing is a no-op (no new version, no event).
- ``apply`` is kubectl apply as a user sees it: create when absent, else the incoming labels,
  annotations, finalizers, owner references and body replace the stored ones (the status only
  when the incoming object carries one); "unchanged" when that changes nothing.
- ``delete`` of an object with finalizers only sets ``deletionTimestamp``; the update that
  removes its last finalizer deletes it.
- ``create``, ``update`` and ``apply`` pass the object through admission
  (:mod:`controller.admission`) inside the write's transaction, which may change it or refuse
  it (``Invalid``, ``Forbidden``); a refused write stores nothing. So is an object whose JSON
  is over :data:`MAX_OBJECT_BYTES` (1.5 MiB, what the API server can store).
- Watches deliver ADDED/MODIFIED/DELETED in resourceVersion order
  (:mod:`controller.store.watching`); control loops read immutable snapshots
  (:mod:`controller.store.snapshots`).

Transactions. Every write runs in a transaction. A synchronous write method (``create``,
``update``, ``apply``, ``delete``, ``apply_many``) called on its own is one transaction,
committed (kept by the backend: :meth:`MemoryStore._persist`) before it returns.
``transact(ops)`` runs many ops (callables against the store) in one transaction, commits
it and publishes the watch events; an op that raises rolls back only its own changes, the
others still commit (the API's group commit, :mod:`controller.api.groupcommit`, batches
callers' writes with it). Writes made by an op (or by ``apply_many``) and ``get``/``list``
called from inside it see that transaction's changes; everywhere else reads see committed
state only.

The store is used from one thread (the event loop's, or a plain script's).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import builtins
import functools
import logging
import os
import random
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar, cast

import msgspec

from apis import codec, validation
from apis.errors import DecodeError
from apis.kinds import Kind, Registry, default_registry
from apis.labels import Selector
from apis.meta import Object, ObjectMeta
from controller import admission, mutations
from controller.errors import (
    AlreadyExists,
    Conflict,
    Expired,
    Invalid,
    NotFound,
    StoreError,
)
from controller.store.encoding import encode
from controller.store.snapshots import KindView, LazyView, Snapshot
from controller.store.watching import Change, EventType, Watch, WatchEvent, WatchHub
from controller.store.writes import Outcome, Pending, Result, Verb, Write

__all__ = ["EventType", "MemoryStore", "Outcome", "Page", "Snapshot", "Watch", "WatchEvent"]

log = logging.getLogger(__name__)

T = TypeVar("T")
ObjT = TypeVar("ObjT", bound=Object)
P = ParamSpec("P")
Key = tuple[str, str, str]

#: Characters of generated name suffixes (no vowels, no look-alikes), as Kubernetes uses.
NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
NAME_SUFFIX_LENGTH = 5
#: generateName is cut to this length so the generated name stays a valid label (63).
MAX_GENERATE_PREFIX = 58
_GENERATE_ATTEMPTS = 16
#: Changes to a kind after which its next view no longer offers what was worked out from the
#: one before to be updated (:meth:`Snapshot.derived`): working it out anew is as cheap then.
MAX_CHANGED_SINCE = 10_000
#: Recently stored objects whose JSON the store keeps (:meth:`MemoryStore.stored_bytes`):
#: encoded once when committed (for the size limit and the state file), read again by
#: whoever serves them.
STORED_BYTES_KEPT = 8_192
#: The most bytes of JSON an object may be stored as (etcd's request limit, which the API
#: server answers a larger object with: "request is too large").
MAX_OBJECT_BYTES = 1_572_864
#: hex digit -> the digit with the RFC 4122 variant bits (10xx) set
_UUID_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _RESOURCE_VERSION_ON_CREATE(value: str) -> validation.FieldError:  # noqa: N802
    """The API server's refusal of a create that carries a resourceVersion."""
    return validation.invalid(
        "metadata.resourceVersion",
        value,
        "must be empty: it should not be set on objects to be created",
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with the JSON merge patch ``patch`` applied (RFC 7386: an object merges
    key by key, ``null`` removes a key, anything else replaces)."""
    if not isinstance(patch, Mapping):
        return patch
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _encoded_within_limit(kind: Kind, obj: Object) -> bytes:
    """``obj`` as stored (to keep for the commit); ``Invalid`` when that is more than
    :data:`MAX_OBJECT_BYTES`."""
    data = encode(obj)
    if len(data) > MAX_OBJECT_BYTES:
        meta = obj.metadata
        raise Invalid(
            f'{kind.qualified_plural} "{meta.name}" is invalid: request is too large: the'
            f" object is {len(data)} bytes as JSON, more than the limit of"
            f" {MAX_OBJECT_BYTES} bytes",
            kind=kind,
            namespace=meta.namespace,
            name=meta.name,
        )
    return data


_FINALIZERS_FORBIDDEN = validation.FieldError(
    "metadata.finalizers",
    "Forbidden",
    "no new finalizers can be added if the object is being deleted",
)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Transaction:
    """Changes staged since the last commit; ``mark``/``rollback`` undo a part of them."""

    resource_version: int
    #: the instant this transaction's writes are stamped with (read from the clock once)
    now: datetime | None = None
    staged: dict[Key, Object | None] = field(default_factory=dict)
    undo: list[tuple[Key, bool, Object | None]] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    #: kind key -> the keys of that kind ever staged (a superset after a rollback)
    kinds: dict[str, set[Key]] = field(default_factory=dict)

    def mark(self) -> tuple[int, int, int]:
        return len(self.undo), len(self.changes), self.resource_version

    def rollback(self, mark: tuple[int, int, int]) -> None:
        undo_len, changes_len, version = mark
        staged, undo = self.staged, self.undo
        while len(undo) > undo_len:
            key, had, previous = undo.pop()
            if had:
                staged[key] = previous
            else:
                del staged[key]
        del self.changes[changes_len:]
        self.resource_version = version

    def stage(
        self, key: Key, kind: str, event: EventType, obj: Object, previous: Object | None
    ) -> None:
        """Stage ``obj`` (for DELETED: its last state) at ``self.resource_version``."""
        staged = self.staged
        had = key in staged
        self.undo.append((key, had, staged[key] if had else None))
        staged[key] = None if event is EventType.DELETED else obj
        keys = self.kinds.get(kind)
        if keys is None:
            keys = self.kinds[kind] = set()
        keys.add(key)
        self.changes.append(Change(event, kind, obj, previous, self.resource_version))


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list (:meth:`MemoryStore.list_page`): ``continue_`` is empty on the last."""

    items: list[Object]
    resource_version: int
    continue_: str


class _Continue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a continue token carries: the list's version and the last key served."""

    v: int
    rv: int
    namespace: str
    name: str

    def encode(self) -> str:
        return base64.urlsafe_b64encode(msgspec.json.encode(self)).rstrip(b"=").decode()

    @classmethod
    def token(cls, rv: int, namespace: str, name: str) -> str:
        return cls(v=1, rv=rv, namespace=namespace, name=name).encode()

    @classmethod
    def parse(cls, text: str, current: int) -> _Continue:
        """The token ``text`` (of a store now at version ``current``), or Invalid."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            token = _CONTINUE.decode(raw)
        except (ValueError, msgspec.DecodeError):
            token = None
        if token is None or token.v != 1 or not 0 <= token.rv <= current:
            shown = repr(text) if len(text) <= 80 else repr(text[:77]) + "..."
            raise Invalid(
                f"continue: Invalid value: {shown}: not a continue token of this store"
                " (pass the continue value of the previous page unchanged)",
                field="continue",
                value=text[:80],
            )
        return token


_CONTINUE = msgspec.json.Decoder(_Continue)


def _key_of(obj: Object) -> tuple[str, str]:
    meta = obj.metadata
    return meta.namespace, meta.name


def _merged(
    items: Sequence[Object],
    begin: int,
    past: Mapping[tuple[str, str], Object | None],
    start: tuple[str, str] | None,
) -> Iterator[tuple[tuple[str, str], Object]]:
    """(key, object) in key order from ``items[begin:]`` (sorted), with the objects under
    ``past`` replaced by their state there (leaving out those absent then), after ``start``."""
    earlier = sorted(
        (
            (at, obj)
            for at, obj in past.items()
            if obj is not None and (start is None or at > start)
        ),
        key=lambda entry: entry[0],
    )
    j = 0
    for obj in items[begin:]:  # a view's items slice without copying them
        at = _key_of(obj)
        while j < len(earlier) and earlier[j][0] < at:
            yield earlier[j]
            j += 1
        if at not in past:
            yield at, obj
    yield from earlier[j:]


def _few(changed: Set[tuple[str, str]], before: KindView) -> bool:
    """Whether a view is updated from ``before`` (``changed`` since) rather than built anew."""
    return len(changed) * 8 < len(before.items)


def _detached_view(
    objects: dict[tuple[str, str], Object],
    order: list[tuple[str, str]] | None,
    before: KindView | None,
    changed: frozenset[tuple[str, str]] | None,
    _cell: LazyView,
) -> KindView:
    if before is not None and changed is not None and _few(changed, before):
        return KindView.updated(before, objects, changed)
    return KindView.build(objects, order)


class MemoryStore:
    """Every object of the controller, in memory; see the module docstring for the semantics."""

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        clock: Callable[[], datetime] = _utcnow,
        history_size: int = 10_000,
        watch_queue_size: int = 1_024,
        seed: int | None = None,
    ) -> None:
        self._registry = registry if registry is not None else default_registry()
        self._clock = clock
        self._shapes: dict[type[Object], mutations.Shape] = {}
        for kind in self._registry:
            self._shapes[kind.type] = mutations.shape_of(kind)
        self._keys = tuple(shape.key for shape in self._shapes.values())
        self._objects: dict[str, dict[tuple[str, str], Object]] = {key: {} for key in self._keys}
        #: kind key -> its view, built (kept until the kind changes)
        self._views: dict[str, LazyView] = {}
        #: kind key -> the unbuilt view snapshots share while the kind stays as it is
        self._unread: dict[str, weakref.ref[LazyView]] = {}
        #: kind key -> its keys sorted, for a view built anew (kept while no object of the kind
        #: comes or goes)
        self._order: dict[str, list[tuple[str, str]]] = {}
        #: kind key -> its last view built and the keys changed since (see KindView.base)
        self._last_built: dict[str, KindView] = {}
        self._changed_since: dict[str, set[tuple[str, str]]] = {}
        self._version = 0
        #: set (and dropped) by the next commit, for :meth:`changed`
        self._changed: asyncio.Event | None = None
        self._txn: _Transaction | None = None
        self._hub = WatchHub(history_size=history_size, queue_size=watch_queue_size)
        self._closed = False
        # A seed makes uids and generated names reproducible (``koordpy simulate``).
        self._random = random.Random(seed)
        self._seeded = seed is not None
        self._uid_pool = ""
        self._uid_pos = 0
        #: id(object) -> (object, its JSON); holding the object keeps its id from being reused
        self._stored: OrderedDict[int, tuple[Object, bytes]] = OrderedDict()

    # -- properties --------------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        return self._registry

    @property
    def resource_version(self) -> int:
        """The version of the last committed write."""
        return self._version

    @property
    def revision(self) -> str:
        """:attr:`resource_version` as the seam's opaque token."""
        return str(self._version)

    async def changed_after(self, revision: str) -> str:
        """:meth:`changed` with the seam's opaque token."""
        return str(await self.changed(int(revision)))

    async def changed(self, after: int) -> int:
        """Wait until a write is committed after resourceVersion ``after`` (at once when one
        already is); the version then. Cheaper than a watch for a reader that only needs to
        know that something changed (it re-reads a snapshot)."""
        while self._version <= after:
            self._check_open()
            event = self._changed
            if event is None:
                event = self._changed = asyncio.Event()
            await event.wait()
        return self._version

    @property
    def path(self) -> Path | None:
        """The state file (None: this store keeps nothing beyond the process)."""
        return None

    # -- helpers -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    @staticmethod
    def _namespace(shape: mutations.Shape, namespace: str) -> str:
        if not shape.namespaced:
            return ""
        return namespace or "default"

    def _shape(self, kind: Kind) -> mutations.Shape:
        shape = self._shapes.get(kind.type)
        if shape is None or (shape.kind is not kind and shape.kind != kind):
            raise Invalid(f"kind {kind.key} is not served by this store")
        return shape

    def _kind_of(self, obj: Object) -> mutations.Shape:
        shape = self._shapes.get(type(obj))
        if shape is None:
            raise Invalid(f"{type(obj).__name__} is not a kind served by this store")
        return shape

    def _lookup(self, key: str, namespace: str, name: str) -> Object | None:
        txn = self._txn
        if txn is not None:
            staged = txn.staged
            full = (key, namespace, name)
            if full in staged:
                return staged[full]
        bucket = self._objects.get(key)
        return bucket.get((namespace, name)) if bucket is not None else None

    def _view(self, key: str) -> KindView:
        return self._lazy_view(key).get()

    def _lazy_view(self, key: str) -> LazyView:
        """The (possibly unbuilt) view of ``key`` as it is now."""
        lazy = self._views.get(key)
        if lazy is None:
            ref = self._unread.get(key)
            lazy = ref() if ref is not None else None
            if lazy is None:
                lazy = LazyView(lambda cell: self._build_view(key, cell))
                self._unread[key] = weakref.ref(lazy)
        return lazy

    def _build_view(self, key: str, cell: LazyView) -> KindView:
        """Build the view ``cell`` stands for: the kind as it is now (see ``_commit``)."""
        objects = self._objects.get(key, {})
        before = self._last_built.get(key)
        changed = self._changed_since.get(key)
        if before is not None and changed is not None and _few(changed, before):
            # Few changes since the last view: it is updated from that one (objects that came
            # or went included) instead of sorted and built anew.
            view = KindView.updated(before, objects, changed)
        else:
            order = self._order.get(key)
            if order is None:
                order = self._order[key] = sorted(objects)
            view = KindView.build(objects, order)
        if before is not None:
            before.base.clear()  # no chain of views: only the last one is kept
            view.base.append((before, frozenset(self._changed_since[key])))
        self._last_built[key] = view
        self._changed_since[key] = set()
        if self._unread.get(key) is not None and self._unread[key]() is cell:
            del self._unread[key]
            self._views[key] = cell
        return view

    def _now(self, txn: _Transaction) -> datetime:
        now = txn.now
        if now is None:
            now = txn.now = mutations.whole_seconds(self._clock())
        return now

    def _new_uid(self) -> str:
        """A random (version 4) UUID, drawn from a pool of OS randomness."""
        pos = self._uid_pos
        if pos >= len(self._uid_pool):
            pool = self._random.randbytes(16 * 256) if self._seeded else os.urandom(16 * 256)
            self._uid_pool = pool.hex()
            pos = 0
        self._uid_pos = pos + 32
        h = self._uid_pool[pos : pos + 32]
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_UUID_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"

    # -- reads -------------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object:
        """One object; a namespaced kind's empty namespace means ``default``."""
        self._check_open()
        shape = self._shape(kind)
        ns = self._namespace(shape, namespace)
        obj = self._lookup(shape.key, ns, name)
        if obj is None:
            raise NotFound.of(kind, name, ns)
        return obj

    def exists(self, kind: Kind, name: str, namespace: str = "") -> bool:
        """Whether the object is stored (no error either way)."""
        self._check_open()
        shape = self._shape(kind)
        return self._lookup(shape.key, self._namespace(shape, namespace), name) is not None

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: Selector | None = None,
    ) -> tuple[builtins.list[Object], int]:
        """Objects of ``kind`` sorted by namespace then name, and the version they reflect.

        ``namespace`` None (or empty) lists every namespace; it is ignored for cluster-scoped
        kinds.
        """
        self._check_open()
        shape = self._shape(kind)
        key = shape.key
        txn = self._txn
        items: Iterable[Object]
        staged_keys = txn.kinds.get(key) if txn is not None else None
        if txn is not None and staged_keys:
            merged = dict(self._objects.get(key, {}))
            staged = txn.staged
            for full in staged_keys:
                if full not in staged:  # rolled back
                    continue
                obj = staged[full]
                if obj is None:
                    merged.pop((full[1], full[2]), None)
                else:
                    merged[(full[1], full[2])] = obj
            items = [merged[k] for k in sorted(merged)]
            version = txn.resource_version
        else:
            items = self._view(key).items
            version = self._version
        if namespace and shape.namespaced:
            items = [o for o in items if o.metadata.namespace == namespace]
        if selector is not None and not selector.empty:
            items = [o for o in items if selector.matches(o.metadata.labels)]
        return builtins.list(items), version

    def list_page(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        selector: Selector | None = None,
        limit: int = 0,
        continue_: str = "",
        max_bytes: int = 0,
    ) -> Page:
        """One page of :meth:`list` over committed state, as Kubernetes pages a list.

        At most ``limit`` objects (0: no limit) and, given ``max_bytes``, no more than fit in
        that many bytes of JSON (at least one): like the API server, the store may return fewer
        than asked, and says there are more with a continue token. ``continue_`` empty starts a
        list at the current version; a token (opaque: the list's resourceVersion and the last
        key served) continues after that key *at that version*: the objects changed since are
        taken back to their state then from the watch history, so the pages together are the
        list at the first page's version, each object once, whatever changed in between. A
        token older than the history keeps is :class:`~controller.errors.Expired` (Kubernetes'
        410 Gone: start the list again); a malformed one, or a negative ``limit``, is
        :class:`~controller.errors.Invalid` naming ``continue`` (``limit``).
        """
        self._check_open()
        if limit < 0:
            raise Invalid(
                f"limit: Invalid value: {limit}: must be greater than or equal to 0",
                field="limit",
                value=str(limit),
            )
        shape = self._shape(kind)
        key = shape.key
        items = self._view(key).items
        version = self._version
        start: tuple[str, str] | None = None
        #: (namespace, name) -> its state at ``version`` (None: absent) where it changed since
        past: dict[tuple[str, str], Object | None] = {}
        if continue_:
            token = _Continue.parse(continue_, self._version)
            start, version = (token.namespace, token.name), token.rv
            try:
                changes = self._hub.changes_after(version, current=self._version)
            except Expired:
                raise Expired(
                    f"continue token expired: the list's resourceVersion {version} is older"
                    " than the store's history; start the list again without continue"
                ) from None
            for change in reversed(changes):
                if change.kind == key:
                    meta = change.object.metadata
                    past[(meta.namespace, meta.name)] = change.previous
        ns = namespace if namespace and shape.namespaced else None
        if start is not None:
            begin = bisect.bisect_right(items, start, key=_key_of)
        else:
            begin = bisect.bisect_left(items, (ns, ""), key=_key_of) if ns is not None else 0
        page: builtins.list[Object] = []
        size = 0
        more = False
        for at, obj in _merged(items, begin, past, start):
            if ns is not None and at[0] != ns:
                break
            if selector is not None and not selector.matches(obj.metadata.labels):
                continue
            body = len(self._bytes_of(obj)) if max_bytes else 0
            if page and ((limit and len(page) >= limit) or (max_bytes and size + body > max_bytes)):
                more = True
                break
            page.append(obj)
            size += body
        last = page[-1].metadata if more else None
        return Page(
            items=page,
            resource_version=version,
            continue_=_Continue.token(version, last.namespace, last.name) if last else "",
        )

    def stored_bytes(self, obj: Object) -> bytes | None:
        """The JSON ``obj`` was stored as (:func:`controller.store.encoding.encode`), while
        the store still keeps it (the last :data:`STORED_BYTES_KEPT` objects it committed or
        loaded); None for another object or one committed longer ago."""
        found = self._stored.get(id(obj))
        return found[1] if found is not None and found[0] is obj else None

    def _bytes_of(self, obj: Object) -> bytes:
        data = self.stored_bytes(obj)
        return data if data is not None else encode(obj)

    def _remember(self, obj: Object, data: bytes) -> None:
        cache = self._stored
        if len(cache) >= STORED_BYTES_KEPT:
            cache.popitem(last=False)
        cache[id(obj)] = (obj, data)

    def snapshot(self) -> Snapshot:
        """Every committed object, immutable; cheap when little changed since the last one."""
        self._check_open()
        views = {struct: self._lazy_view(shape.key) for struct, shape in self._shapes.items()}
        return Snapshot(self._version, views)

    # -- synchronous writes ------------------------------------------------------------------

    def create(self, obj: ObjT) -> ObjT:
        """Store a new object (``AlreadyExists`` when the name is taken); the stored object."""
        return self._write(self._create, obj)

    def update(self, obj: ObjT) -> ObjT:
        """Replace an object; its non-empty resourceVersion must be the stored one."""
        return self._write(self._update, obj)

    def apply(self, obj: ObjT) -> tuple[ObjT, Outcome]:
        """Create, or merge into the stored object as ``kubectl apply`` does.

        The outcome is CREATED, CONFIGURED, UNCHANGED (nothing written), or DELETED when the
        apply removed the last finalizer of an object being deleted.
        """
        return self._write(self._apply, obj)

    def delete(
        self, kind: Kind, name: str, namespace: str = "", *, resource_version: str = ""
    ) -> tuple[Object, Outcome]:
        """Delete (DELETED, with the last state at the deleting version), or, for an object
        with finalizers, set its deletionTimestamp (CONFIGURED; nothing is written when it is
        already set)."""
        return self._write(self._delete, kind, name, namespace, resource_version)

    def apply_many(
        self, objs: Sequence[Object]
    ) -> builtins.list[tuple[Object, Outcome] | StoreError]:
        """Apply each object in one transaction; a failing one is reported in its place."""
        return self._write(self._write_batch, [Write.apply(o) for o in objs])

    def update_many(
        self, objs: Sequence[Object]
    ) -> builtins.list[tuple[Object, Outcome] | StoreError]:
        """Update each object (its resourceVersion must be current, as with :meth:`update`)
        in one transaction; a failing one is reported in its place. What a control loop
        uses to write back objects it read and changed."""
        return self._write(self._write_batch, [Write.update(o) for o in objs])

    def write(self, writes: Sequence[Write]) -> Pending:
        """The :class:`~controller.store.cluster.Cluster` write: ``writes`` in one
        transaction, each rolled back alone when it fails; the results are in the returned
        :class:`Pending` already."""
        return Pending.completed(self._write(self._write_batch, writes))

    def _write(
        self,
        fn: Callable[Concatenate[_Transaction, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        txn = self._txn
        if txn is not None:  # inside a transaction: one more savepoint
            mark = txn.mark()
            try:
                return fn(txn, *args, **kwargs)
            except BaseException:
                txn.rollback(mark)
                raise
        self._check_open()
        txn = self._txn = _Transaction(self._version)
        try:
            result = fn(txn, *args, **kwargs)
        finally:
            self._txn = None
        self._commit(txn)
        return result

    def mirror(self, kind: Kind, changes: Iterable[tuple[Object | None, Object | None]]) -> None:
        """Hold ``kind``'s objects as another server stored them: each ``(before, after)``
        (None: absent) taken as it is, with its resourceVersion, uid and every field, without
        admission or checks, in one commit (one local version; watches see each change).

        What a backend caching a remote API server (:mod:`controller.store.kubernetes`) keeps
        its snapshots in: an object given is the very object later snapshots hold, so the
        identity contract of :mod:`controller.store.snapshots` carries over from its source.
        """
        self._write(self._mirror, self._shape(kind), changes)

    def _mirror(
        self,
        txn: _Transaction,
        shape: mutations.Shape,
        changes: Iterable[tuple[Object | None, Object | None]],
    ) -> None:
        key = shape.key
        for before, after in changes:
            obj = after if after is not None else before
            if obj is None:
                continue
            meta = obj.metadata
            namespace = meta.namespace if shape.namespaced else ""
            held = self._lookup(key, namespace, meta.name)
            if after is None and held is None:
                continue
            txn.resource_version += 1
            full = (key, namespace, meta.name)
            if after is None:
                assert held is not None
                txn.stage(full, key, EventType.DELETED, held, held)
            elif held is None:
                txn.stage(full, key, EventType.ADDED, after, None)
            elif held is not after:
                txn.stage(full, key, EventType.MODIFIED, after, held)

    # -- write logic (inside a transaction) ----------------------------------------------------

    def _create(self, txn: _Transaction, obj: ObjT) -> ObjT:
        shape = self._kind_of(obj)
        kind = shape.kind
        meta = obj.metadata
        ns = self._namespace(shape, meta.namespace)
        errors = validation.object_meta(meta, namespaced=shape.namespaced)
        if meta.resource_version:
            errors.append(_RESOURCE_VERSION_ON_CREATE(meta.resource_version))
        prefix = meta.generate_name[:MAX_GENERATE_PREFIX]
        if not meta.name and prefix:
            errors.extend(
                validation.invalid("metadata.generateName", meta.generate_name, reason)
                for reason in validation.object_name(prefix + "x" * NAME_SUFFIX_LENGTH)
            )
        if errors:
            raise Invalid.of(kind, meta.name or meta.generate_name, errors, ns)
        obj = admission.admit(kind, obj, None, self)  # may refuse; nothing staged yet
        meta = obj.metadata
        key = shape.key
        name = meta.name
        if name:
            if self._lookup(key, ns, name) is not None:
                raise AlreadyExists.of(kind, name, ns)
        else:
            for _ in range(_GENERATE_ATTEMPTS):
                suffix = "".join(self._random.choices(NAME_SUFFIX_ALPHABET, k=NAME_SUFFIX_LENGTH))
                name = prefix + suffix
                if self._lookup(key, ns, name) is None:
                    break
            else:
                raise AlreadyExists.of(kind, name, ns)
        txn.resource_version += 1
        new = mutations.created(
            shape,
            obj,
            name=name,
            namespace=ns,
            uid=self._new_uid(),
            now=self._now(txn),
            resource_version=txn.resource_version,
        )
        self._remember(new, _encoded_within_limit(kind, new))
        txn.stage((key, ns, name), key, EventType.ADDED, new, None)
        return new

    def _existing(
        self, shape: mutations.Shape, meta: ObjectMeta, *, verb: str
    ) -> tuple[str, Object | None]:
        """The namespace ``meta`` names and the object stored there, if any."""
        ns = self._namespace(shape, meta.namespace)
        if not meta.name:
            raise Invalid.of(
                shape.kind,
                meta.generate_name,
                [validation.required("metadata.name", f"name is required to {verb} an object")],
                ns,
            )
        return ns, self._lookup(shape.key, ns, meta.name)

    @staticmethod
    def _preconditions(kind: Kind, stored: Object, meta: ObjectMeta) -> None:
        MemoryStore._check_preconditions(kind, stored, meta.resource_version, meta.uid)

    @staticmethod
    def _check_preconditions(kind: Kind, stored: Object, resource_version: str, uid: str) -> None:
        """``stored`` must have the resourceVersion and uid a write names (when it names them)."""
        have = stored.metadata
        if resource_version and resource_version != have.resource_version:
            raise Conflict.of(kind, have.name, have.namespace)
        if uid and uid != have.uid:
            raise Conflict.of(
                kind,
                have.name,
                have.namespace,
                detail=f"Precondition failed: UID in precondition: {uid},"
                f" UID in object meta: {have.uid}",
            )

    @staticmethod
    def _meta_errors(old: ObjectMeta, new: ObjectMeta) -> builtins.list[validation.FieldError]:
        """Problems with the parts of ``new`` a write changes (labels, annotations, finalizers)."""
        errors: builtins.list[validation.FieldError] = []
        if new.labels != old.labels:
            errors.extend(validation.label_map(new.labels))
        if new.annotations != old.annotations:
            errors.extend(validation.annotation_map(new.annotations))
        if new.finalizers != old.finalizers:
            errors.extend(validation.finalizer_list(new.finalizers))
            if old.deletion_timestamp is not None and not set(new.finalizers) <= set(
                old.finalizers
            ):
                errors.append(_FINALIZERS_FORBIDDEN)
        return errors

    def _replace(
        self, txn: _Transaction, shape: mutations.Shape, stored: ObjT, candidate: ObjT
    ) -> tuple[ObjT, Outcome]:
        """Stage ``candidate`` (stored server-owned metadata) in place of ``stored``."""
        candidate = admission.admit(shape.kind, candidate, stored, self)
        if candidate == stored:
            return stored, Outcome.UNCHANGED
        have = stored.metadata
        errors = self._meta_errors(have, candidate.metadata)
        if errors:
            raise Invalid.of(shape.kind, have.name, errors, have.namespace)
        key = (shape.key, have.namespace, have.name)
        txn.resource_version += 1
        if have.deletion_timestamp is not None and not candidate.metadata.finalizers:
            last = mutations.stamp(
                candidate, resource_version=txn.resource_version, generation=have.generation
            )
            txn.stage(key, shape.key, EventType.DELETED, last, stored)
            return last, Outcome.DELETED
        generation = have.generation
        if mutations.body_changed(shape, stored, candidate):
            generation += 1
        new = mutations.stamp(
            candidate, resource_version=txn.resource_version, generation=generation
        )
        self._remember(new, _encoded_within_limit(shape.kind, new))
        txn.stage(key, shape.key, EventType.MODIFIED, new, stored)
        return new, Outcome.CONFIGURED

    def _update(self, txn: _Transaction, obj: ObjT) -> ObjT:
        return self._update_outcome(txn, obj)[0]

    def _update_outcome(self, txn: _Transaction, obj: ObjT) -> tuple[ObjT, Outcome]:
        shape = self._kind_of(obj)
        meta = obj.metadata
        ns, found = self._existing(shape, meta, verb="update")
        if found is None:
            raise NotFound.of(shape.kind, meta.name, ns)
        stored = cast("ObjT", found)  # the store keeps each kind under its own type
        self._preconditions(shape.kind, stored, meta)
        return self._replace(txn, shape, stored, mutations.updated(shape, stored, obj))

    def _apply(self, txn: _Transaction, obj: ObjT) -> tuple[ObjT, Outcome]:
        shape = self._kind_of(obj)
        meta = obj.metadata
        _, found = self._existing(shape, meta, verb="apply")
        if found is None:
            return self._create(txn, obj), Outcome.CREATED
        stored = cast("ObjT", found)
        self._preconditions(shape.kind, stored, meta)
        return self._replace(txn, shape, stored, mutations.applied(shape, stored, obj))

    def _delete(
        self,
        txn: _Transaction,
        kind: Kind,
        name: str,
        namespace: str,
        resource_version: str,
        uid: str = "",
    ) -> tuple[Object, Outcome]:
        shape = self._shape(kind)
        ns = self._namespace(shape, namespace)
        stored = self._lookup(shape.key, ns, name)
        if stored is None:
            raise NotFound.of(kind, name, ns)
        have = stored.metadata
        self._check_preconditions(kind, stored, resource_version, uid)
        key = (shape.key, ns, name)
        if have.finalizers:
            if have.deletion_timestamp is not None:
                return stored, Outcome.CONFIGURED
            txn.resource_version += 1
            marked = mutations.deleting(
                stored, now=self._now(txn), resource_version=txn.resource_version
            )
            txn.stage(key, shape.key, EventType.MODIFIED, marked, stored)
            return marked, Outcome.CONFIGURED
        txn.resource_version += 1
        last = mutations.stamp(
            stored, resource_version=txn.resource_version, generation=have.generation
        )
        txn.stage(key, shape.key, EventType.DELETED, last, stored)
        return last, Outcome.DELETED

    def _write_batch(self, txn: _Transaction, writes: Sequence[Write]) -> builtins.list[Result]:
        results: builtins.list[Result] = []
        for write in writes:
            mark = txn.mark()
            try:
                results.append(self._write_one(txn, write))
            except StoreError as err:
                txn.rollback(mark)
                results.append(err)
        return results

    def _write_one(self, txn: _Transaction, write: Write) -> tuple[Object, Outcome]:
        verb, obj = write.verb, write.obj
        if verb is Verb.DELETE or verb is Verb.EVICT or verb is Verb.PATCH:
            kind = write.kind
            if kind is None:
                raise Invalid(f"a {verb} names the kind of its object")
            if verb is Verb.PATCH:
                return self._patch(txn, kind, write)
            uid = obj.metadata.uid if obj is not None else ""
            return self._delete(txn, kind, write.name, write.namespace, write.resource_version, uid)
        if obj is None:
            raise Invalid(f"a {verb} carries its object")
        if verb is Verb.CREATE:
            return self._create(txn, obj), Outcome.CREATED
        if verb is Verb.APPLY:
            return self._apply(txn, obj)
        if verb is Verb.UPDATE_STATUS:
            return self._update_status(txn, obj)
        if verb is Verb.BIND:
            self._check_binding(obj)
        return self._update_outcome(txn, obj)

    def _check_binding(self, pod: Object) -> None:
        """A binding names a node, and a pod is bound once (Kubernetes answers Conflict)."""
        shape = self._kind_of(pod)
        node = getattr(getattr(pod, "spec", None), "node_name", None)
        meta = pod.metadata
        if not isinstance(node, str) or not node:
            raise Invalid.of(
                shape.kind,
                meta.name,
                [validation.required("target.name", "a binding names a node")],
                meta.namespace,
            )
        stored = self._lookup(shape.key, self._namespace(shape, meta.namespace), meta.name)
        bound = getattr(getattr(stored, "spec", None), "node_name", "")
        if bound and bound != node:
            raise Conflict.of(
                shape.kind,
                meta.name,
                meta.namespace,
                detail=f"pod {meta.name} is already assigned to node {bound!r}",
            )

    def _update_status(self, txn: _Transaction, obj: ObjT) -> tuple[ObjT, Outcome]:
        shape = self._kind_of(obj)
        meta = obj.metadata
        ns, found = self._existing(shape, meta, verb="update")
        if found is None:
            raise NotFound.of(shape.kind, meta.name, ns)
        if not shape.has_status:
            raise Invalid(f"{shape.kind.kind} has no status subresource")
        stored = cast("ObjT", found)
        self._preconditions(shape.kind, stored, meta)
        status = getattr(obj, "status")  # noqa: B009 - a kind with a status
        return self._replace(txn, shape, stored, msgspec.structs.replace(stored, status=status))

    def _patch(self, txn: _Transaction, kind: Kind, write: Write) -> tuple[Object, Outcome]:
        shape = self._shape(kind)
        ns = self._namespace(shape, write.namespace)
        stored = self._lookup(shape.key, ns, write.name)
        if stored is None:
            raise NotFound.of(kind, write.name, ns)
        self._check_preconditions(kind, stored, write.resource_version, "")
        merged = merge_patch(msgspec.json.decode(encode(stored)), write.patch or {})
        try:
            candidate = codec.decode_as(merged, kind.type)
        except DecodeError as err:
            raise Invalid(f"{kind.kind} {write.name!r}: the patch does not decode: {err}") from None
        meta = candidate.metadata
        if (meta.name, meta.namespace) != (stored.metadata.name, stored.metadata.namespace):
            raise Invalid(f"{kind.kind} {write.name!r}: a patch may not rename its object")
        candidate = msgspec.structs.replace(
            candidate, metadata=msgspec.structs.replace(meta, resource_version="")
        )
        return self._replace(txn, shape, stored, mutations.updated(shape, stored, candidate))

    # -- commit ------------------------------------------------------------------------------

    def _commit(self, txn: _Transaction) -> None:
        """Persist, then make visible and publish, what ``txn`` staged."""
        staged = txn.staged
        if not staged:
            return
        self._persist(txn)
        objects, views, unread, order = self._objects, self._views, self._unread, self._order
        for kind in {key[0] for key in staged}:
            views.pop(kind, None)
            ref = unread.pop(kind, None)
            lazy = ref() if ref is not None else None
            if lazy is not None and not lazy.built:
                # A snapshot taken before this commit has not read the kind yet: keep the
                # state it was taken at aside for it (a shallow copy; the sorted keys are
                # never changed in place), to build its view from if it reads the kind.
                kept = dict(objects.get(kind, {}))
                since = self._changed_since.get(kind)
                lazy.detach(
                    functools.partial(
                        _detached_view,
                        kept,
                        order.get(kind),
                        self._last_built.get(kind),
                        frozenset(since) if since is not None else None,
                    )
                )
        changed_since = self._changed_since
        for (kind, namespace, name), obj in staged.items():
            since = changed_since.get(kind)
            if since is not None:
                since.add((namespace, name))
                if len(since) > MAX_CHANGED_SINCE:  # a new start is as cheap by then
                    del changed_since[kind]
                    del self._last_built[kind]
            bucket = objects.get(kind)
            if bucket is None:
                bucket = objects[kind] = {}
            if obj is None:
                if bucket.pop((namespace, name), None) is not None:
                    order.pop(kind, None)
            else:
                at = (namespace, name)
                if at not in bucket:
                    order.pop(kind, None)
                bucket[at] = obj
        self._version = txn.resource_version
        self._hub.publish(txn.changes)
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    # -- what a backend keeping the objects elsewhere adds ---------------------------------

    def _persist(self, txn: _Transaction) -> None:
        """Keep what ``txn`` staged before it is visible (raise ``StoreError`` to refuse the
        commit: nothing of it is then visible or published)."""

    def _release(self) -> None:
        """Closing: release what the backend holds (after every watch ended)."""

    # -- many ops in one commit -------------------------------------------------------------

    def transact(self, ops: Sequence[Callable[[Self], Any]]) -> builtins.list[tuple[bool, Any]]:
        """Run ``ops`` in one transaction: ``(True, result)`` or ``(False, exception)`` for
        each, in order, each op's changes rolled back alone when it raises; committed before
        this returns (``StoreError``: nothing of it is). Inside a transaction, part of it.
        What :class:`controller.api.groupcommit.GroupCommit` runs its batches with."""
        txn = self._txn
        if txn is not None:
            return self._run_each(txn, ops)
        self._check_open()
        txn = self._txn = _Transaction(self._version)
        try:
            results = self._run_each(txn, ops)
        finally:
            self._txn = None
        self._commit(txn)
        return results

    def _run_each(
        self, txn: _Transaction, ops: Sequence[Callable[[Self], Any]]
    ) -> builtins.list[tuple[bool, Any]]:
        results: builtins.list[tuple[bool, Any]] = []
        for op in ops:
            mark = txn.mark()
            try:
                results.append((True, op(self)))
            except Exception as err:
                txn.rollback(mark)
                results.append((False, err))
        return results

    # -- watches -----------------------------------------------------------------------------

    def watch(
        self,
        kind: Kind | None = None,
        *,
        namespace: str | None = None,
        selector: Selector | None = None,
        resource_version: int | None = None,
    ) -> Watch:
        """Events of ``kind`` (every kind when None), optionally one namespace and a selector.

        ``resource_version`` None: a synthetic ADDED for every matching object (carrying the
        current version), then live events. An int N: every event after N, from the history
        (``Expired`` when N is older than what the history keeps).
        """
        self._check_open()
        shape = self._shape(kind) if kind is not None else None
        keys = (shape.key,) if shape is not None else self._keys
        return self._hub.open(
            kind=shape.key if shape is not None else None,
            namespace=namespace if shape is None or shape.namespaced else None,
            selector=selector,
            current=self._version,
            resource_version=resource_version,
            objects=(obj for key in keys for obj in self._view(key).items),
        )

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the file and end every watch. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._hub.close()
        if self._changed is not None:
            self._changed.set()  # the waiters find the store closed
        self._release()

    async def aclose(self) -> None:
        """:meth:`close`, for ``async with``."""
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
