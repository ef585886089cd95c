"""The Kubernetes backend of the :class:`~controller.store.cluster.Cluster` seam: the control
loops run against a real kube-apiserver, reading informer caches and writing as Koordinator's
components write.

Reads. :meth:`KubeStore.start` asks the API server which of the registry's kinds it serves
(discovery: a kind whose group is not installed, a job kind say, is left out and stays empty)
and runs one :class:`~runtime.kube.reflector.Reflector` per served kind (ConfigMaps of the
configuration namespace only; Events are written, not read). Every batch of changes a
reflector applies is mirrored into a :class:`~controller.store.memory.MemoryStore`
(:meth:`~controller.store.memory.MemoryStore.mirror`), which serves snapshots, ``get``,
``exists`` and watches exactly as it does for ``koordpy up``: the objects are the ones the
reflector decoded, so identity carries over (an object that did not change is the same
Python object in every snapshot, across relists too). The loops start once every reflector
has listed (:meth:`KubeStore.start` returns then).

Writes (:meth:`KubeStore.write`) are sent at once, each batch as a task whose writes go out
concurrently (at most ``max_in_flight`` requests in flight, under the client's QPS/burst);
the :class:`~controller.store.writes.Pending` resolves when every answer is in, and that
counts as a change for :meth:`changed_after`. What the server stores comes back through the
watches, so a loop's own writes become visible later, as the seam allows:

- **update** / **status update**: a JSON merge patch of the difference between the object as
  the cache holds it and the one written (the status alone for a status update), carrying the
  resourceVersion read as its precondition; where the kind has a ``status`` subresource the
  status part goes there (an update changes both, as on every backend). So fields koordpy's
  Structs do not model are never dropped, and a stale version fails with ``Conflict``, as a
  PUT would. An object not in the cache (an Event) is PUT whole.
- **merge patch**: as given (a resourceVersion, when set, is its precondition).
- **apply**: a create, or (the object there) an update without version precondition, as
  ``kubectl apply`` is the last writer's; a created object's status follows through its
  subresource. Not server-side apply: that refuses any field the cluster's schema lacks (a
  v1.8 QueueUnit has no ``status.conditions``), where a create or patch has it pruned.
- **create**: POST; **delete**: DELETE with the uid (and resourceVersion, when asked) as
  preconditions.
- **bind**: as koord-scheduler's PreBind and DefaultBinder: first one merge patch of what the
  scheduler added to the pod's metadata (annotations and labels: ``device-allocated``,
  ``resource-status``, ``reservation-allocated``, gang...), carrying the pod's uid, so a pod
  deleted and created again under the same name is never patched; then the ``binding``
  subresource (``Binding`` with the uid, target the node).
- **evict**: the ``policy/v1`` Eviction subresource with the pod's uid as precondition; a
  429 (a PodDisruptionBudget refusing it) is an :class:`~controller.errors.Unavailable`
  result that the loop retries later, never turned into a delete.

Every write is recorded under the field manager ``koordpy``. A batch whose writes all left
the server's objects as they were does not count as a change (a loop writing a field the
schema prunes is not woken by its own no-op to write it again).

While a pod is being bound, the versions of it that are not bound yet (the PreBind patch's)
are held back from the cache until the bound one arrives (or the binding fails), so no
snapshot shows the pod annotated and unbound, to be bound again.

A 5xx, a broken connection or a 429 (but an eviction's) is sent again up to
:data:`WRITE_ATTEMPTS` times; what still fails is the write's result. A write the server
refuses as invalid becomes a Warning Event on the object (reason ``FailedWrite``) beside its
result, so the refusal is seen where the object is (``kubectl describe``), and the loop goes
on (the same refusal of the same object is reported once per :data:`EVENT_REPEAT`). An object
that does not decode into koordpy's type (a bad quantity, an unknown field: what Koordinator's
webhooks would have refused) is left out, its last readable version kept, and gets a Warning
Event ``InvalidObject`` saying why. An ElasticQuota or a Reservation is held to the checks
of Koordinator's webhooks (:data:`CHECKS`, koordpy's admission): one that fails them stays
(the cluster has it) and gets the same ``InvalidObject`` Event, naming the field and value.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from apis.codec import decode_json
from apis.core import Event, EventSource, Pod
from apis.errors import DecodeError
from apis.kinds import Kind, Registry, default_registry
from apis.meta import Object, ObjectMeta, ObjectReference
from apis.quota import ElasticQuota
from apis.scheduling import Reservation
from controller.admission.base import Registration
from controller.admission.chain import PLUGINS, admit
from controller.errors import (
    AlreadyExists,
    Invalid,
    NotFound,
    StoreError,
    Unavailable,
)
from controller.kube.client import (
    MERGE_PATCH,
    KubeClient,
    ServerUnavailable,
    resource_path,
)
from controller.store.encoding import encode
from controller.store.memory import MemoryStore
from controller.store.snapshots import Snapshot
from controller.store.watching import Watch
from controller.store.writes import Outcome, Pending, Result, Verb, Write
from runtime.kube.reflector import Delta, Reflector

__all__ = ["CONFIG_NAMESPACE", "FIELD_MANAGER", "WRITE_ATTEMPTS", "KubeStore", "merge_diff"]

log = logging.getLogger(__name__)

#: Where Koordinator's components read their ConfigMaps.
CONFIG_NAMESPACE: Final = "koordinator-system"
#: The field manager koordpy's writes are recorded under (``managedFields``).
FIELD_MANAGER: Final = "koordpy"
#: Tries of a write the server did not do (5xx, 429, no answer).
WRITE_ATTEMPTS: Final = 3
#: Seconds before the second try of such a write (doubled for each later one).
RETRY_DELAY: Final = 0.2
#: The admission checks a stored object is held to (the validating ones of the quota tree and
#: of a reservation's template: what Koordinator's webhooks refuse; the API server itself
#: validates pods and nodes).
CHECKS: Final[tuple[Registration, ...]] = tuple(
    r for r in PLUGINS if r.name in ("ElasticQuota", "PodTemplateValidation")
)
_CHECKED: Final = frozenset(
    kind for r in CHECKS for kind in r.kinds if kind is Reservation or kind is ElasticQuota
)
#: Seconds within which the same refusal of the same object makes no second Event.
EVENT_REPEAT: Final = 600.0
#: Requests in flight at once, by default.
DEFAULT_MAX_IN_FLIGHT: Final = 100
#: Metadata the server sets, left out of what koordpy applies.
_SERVER_METADATA: Final = (
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def merge_diff(before: Any, after: Any) -> Any:
    """The JSON merge patch (RFC 7386) turning ``before`` into ``after`` (decoded JSON):
    objects compared field by field, anything else (lists included) replaced whole; a field
    gone is null. Equal documents give ``{}``."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return after
    patch: dict[str, Any] = {}
    for key, value in after.items():
        if key not in before:
            patch[key] = value
        elif before[key] != value:
            if isinstance(value, dict) and isinstance(before[key], dict):
                patch[key] = merge_diff(before[key], value)
            else:
                patch[key] = value
    for key in before:
        if key not in after:
            patch[key] = None
    return patch


def _doc(obj: Object) -> dict[str, Any]:
    doc: dict[str, Any] = msgspec.json.decode(encode(obj))
    return doc


def _sent(obj: Object, namespace: str) -> dict[str, Any]:
    """``obj`` as koordpy sends it to be created or applied: without the metadata the server
    sets, in ``namespace``."""
    doc = _doc(obj)
    meta = doc.setdefault("metadata", {})
    for field in _SERVER_METADATA:
        meta.pop(field, None)
    if namespace:
        meta["namespace"] = namespace
    return doc


class _VersionMeta(msgspec.Struct, frozen=True, rename="camel"):
    resource_version: str = ""


class _Versioned(msgspec.Struct, frozen=True):
    """Only the resourceVersion of an answer."""

    metadata: _VersionMeta = _VersionMeta()


def _now() -> datetime:
    return datetime.now(UTC)


class KubeStore:
    """The cluster behind ``client`` as a :class:`~controller.store.cluster.Cluster`; see the
    module docstring. Open it with :meth:`start` (or ``async with``), close it with
    :meth:`aclose`; the client stays the caller's."""

    def __init__(
        self,
        client: KubeClient,
        *,
        registry: Registry | None = None,
        config_namespace: str = CONFIG_NAMESPACE,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        component: str = "koordpy",
        dry_run: bool = False,
    ) -> None:
        self.client = client
        self._registry = registry if registry is not None else default_registry()
        self._cache = MemoryStore(registry=self._registry)
        self._config_namespace = config_namespace
        self._slots = asyncio.Semaphore(max_in_flight)
        self._component = component
        self._dry_run = dry_run
        #: kind key -> its reflector (served kinds only, after :meth:`start`)
        self.reflectors: dict[str, Reflector] = {}
        #: kind keys served with a ``status`` subresource
        self._status: set[str] = set()
        self._served: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: pods with a binding sent and not seen bound yet: (namespace, name) -> uid, and the
        #: unbound version of each that came since (shown only if the binding fails)
        self._binding: dict[tuple[str, str], str] = {}
        self._held_back: dict[tuple[str, str], Delta] = {}
        #: (kind, namespace, name, message) -> when its FailedWrite Event was last made
        self._reported: dict[tuple[str, str, str, str], datetime] = {}
        self._version = 0
        self._wake = asyncio.Event()
        self._failure: BaseException | None = None
        #: writes sent, by verb, and their failures (tests and metrics read them)
        self.sent: dict[str, int] = {}
        self.failed: dict[str, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, *, sync_timeout: float = 60.0) -> None:
        """Discover the served kinds, start their reflectors, return once each has listed
        (``TimeoutError`` after ``sync_timeout`` seconds, naming those that have not)."""
        await self._discover()
        for kind in self._registry:
            if kind.key not in self._served or kind.type is Event:
                continue
            namespace = self._config_namespace if kind.kind == "ConfigMap" else ""
            reflector = Reflector(
                self.client,
                kind,
                namespace=namespace,
                on_change=functools.partial(self._mirror, kind),
                on_undecodable=functools.partial(self._report_undecodable, kind),
            )
            self.reflectors[kind.key] = reflector
            self._spawn(reflector.run(), name=f"reflector {reflector.name}")
        waits = {key: asyncio.ensure_future(r.synced.wait()) for key, r in self.reflectors.items()}
        try:
            _, pending = await asyncio.wait(waits.values(), timeout=sync_timeout)
        finally:
            for wait in waits.values():
                wait.cancel()
        if pending:
            late = sorted(key for key, wait in waits.items() if wait in pending)
            raise TimeoutError(f"not listed within {sync_timeout:.0f}s: {', '.join(late)}")
        log.info(
            "watching %d kinds of %s (%s)",
            len(self.reflectors),
            self.client.server,
            ", ".join(sorted(self.reflectors)),
        )

    async def _discover(self) -> None:
        by_version: dict[str, list[Kind]] = {}
        for kind in self._registry:
            by_version.setdefault(kind.api_version, []).append(kind)
        for api_version, kinds in by_version.items():
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                body = await self.client.get(path)
            except NotFound:
                log.info("%s is not served: its kinds stay empty", api_version)
                continue
            resources = {r["name"] for r in msgspec.json.decode(body).get("resources", ())}
            for kind in kinds:
                if kind.plural in resources:
                    self._served.add(kind.key)
                    if f"{kind.plural}/status" in resources:
                        self._status.add(kind.key)

    def served(self, kind: Kind) -> bool:
        """Whether the API server serves ``kind`` (after :meth:`start`)."""
        return kind.key in self._served

    def _spawn(self, coro: Any, *, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        failure = task.exception()
        if failure is not None:  # a bug: the reflectors and senders catch what they expect
            log.error("%s failed", task.get_name(), exc_info=failure)
            self._failure = failure
            self._tick()

    async def aclose(self) -> None:
        """Stop the reflectors and any write still in flight; close the cache."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._cache.close()

    async def __aenter__(self) -> KubeStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- reads (the cache's) -----------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        return self._registry

    @property
    def revision(self) -> str:
        return str(self._version)

    def _tick(self) -> None:
        self._version += 1
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    async def changed_after(self, revision: str) -> str:
        while str(self._version) == revision:
            if self._failure is not None:
                raise self._failure
            await self._wake.wait()
        return str(self._version)

    def snapshot(self) -> Snapshot:
        return self._cache.snapshot()

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object:
        return self._cache.get(kind, name, namespace)

    def exists(self, kind: Kind, name: str, namespace: str = "") -> bool:
        return self._cache.exists(kind, name, namespace)

    def watch(self, kind: Kind | None = None) -> Watch:
        return self._cache.watch(kind)

    def _mirror(self, kind: Kind, deltas: Sequence[Delta]) -> None:
        if self._binding and kind.type is Pod:
            deltas = [d for d in deltas if not self._hold_back(d)]
            if not deltas:
                return
        self._cache.mirror(kind, ((d.before, d.after) for d in deltas))
        if kind.type in _CHECKED:
            for delta in deltas:
                if delta.after is not None:
                    self._check(kind, delta.after, delta.before)
        self._tick()

    def _check(self, kind: Kind, obj: Object, before: Object | None) -> None:
        """Koordinator's webhooks' checks of a quota or a reservation, which the cluster did
        not make (no webhook of koordpy's is installed): a refusal is said on the object."""
        try:
            admit(kind, obj, before, self._cache, table=CHECKS)
        except (Invalid, NotFound) as err:
            meta = obj.metadata
            message = f"koordpy's checks refuse this object: {err.message}"
            self._report(kind, meta.namespace, meta.name, meta.uid, "InvalidObject", message)

    def _hold_back(self, delta: Delta) -> bool:
        """Whether ``delta`` is a version of a pod being bound that is not bound yet (the
        PreBind patch's): held back, so no snapshot shows the pod between its two writes."""
        obj = delta.after if delta.after is not None else delta.before
        if obj is None:
            return False
        key = (obj.metadata.namespace, obj.metadata.name)
        uid = self._binding.get(key)
        if uid is None:
            return False
        bound = isinstance(delta.after, Pod) and bool(delta.after.spec.node_name)
        if delta.after is None or obj.metadata.uid != uid or bound:
            del self._binding[key]
            self._held_back.pop(key, None)
            return False
        self._held_back[key] = delta
        return True

    def _bind_failed(self, key: tuple[str, str]) -> None:
        """A binding that did not happen: the versions held back are shown."""
        self._binding.pop(key, None)
        delta = self._held_back.pop(key, None)
        if delta is not None:
            self._cache.mirror(self._registry.for_type(Pod), [(delta.before, delta.after)])
            self._tick()

    def _held(self, kind: Kind, name: str, namespace: str) -> Object | None:
        try:
            return self._cache.get(kind, name, namespace)
        except NotFound:
            return None

    # -- writes --------------------------------------------------------------------------------

    def write(self, writes: Sequence[Write]) -> Pending:
        pending = Pending()
        if not writes:
            pending.resolve(())
            return pending
        self._spawn(self._send(list(writes), pending), name="writes")
        return pending

    async def _send(self, writes: list[Write], pending: Pending, *, wake: bool = True) -> None:
        results: list[Result] = list(await asyncio.gather(*(self._attempt(w) for w in writes)))
        pending.resolve(results)
        # Only a batch that changed something wakes the loops: one that changed nothing (a
        # field the schema prunes written again) or failed (a refused write) is seen at the
        # next change, so a loop is never woken by its own no-op or refusal to repeat it.
        if wake and any(
            not isinstance(r, StoreError) and r[1] is not Outcome.UNCHANGED for r in results
        ):
            self._tick()

    async def _attempt(self, write: Write) -> Result:
        verb = write.verb.value
        self.sent[verb] = self.sent.get(verb, 0) + 1
        delay = RETRY_DELAY
        result: Result
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                async with self._slots:
                    result = await self._one(write)
                return result
            except ServerUnavailable as err:
                kind = self._kind(write)
                final = attempt == WRITE_ATTEMPTS or (write.verb is Verb.EVICT and err.code == 429)
                if final:
                    result = Unavailable(
                        err.message,
                        kind=kind,
                        namespace=self._namespace_of(write),
                        name=self._name_of(write),
                        code=err.code,
                        retry_after=err.retry_after,
                    )
                    break
                await asyncio.sleep(max(delay, err.retry_after or 0.0))
                delay *= 2
            except StoreError as err:
                result = err
                if isinstance(err, Invalid) and self._kind(write).type is not Event:
                    self._report_invalid(write, err)
                break
        self.failed[verb] = self.failed.get(verb, 0) + 1
        log.debug("%s %s/%s: %s", verb, self._namespace_of(write), self._name_of(write), result)
        return result

    def _kind(self, write: Write) -> Kind:
        if write.kind is not None:
            return write.kind
        assert write.obj is not None
        return self._registry.for_type(type(write.obj))

    @staticmethod
    def _name_of(write: Write) -> str:
        return write.obj.metadata.name if write.obj is not None else write.name

    def _namespace_of(self, write: Write) -> str:
        if not self._kind(write).namespaced:
            return ""
        namespace = write.obj.metadata.namespace if write.obj is not None else write.namespace
        return namespace or "default"

    def _decode(self, kind: Kind, body: bytes, fallback: Object | None) -> Object:
        """The object the server answered with; ``fallback`` when it does not decode into
        koordpy's Struct (a field it does not know), which is an error without one."""
        try:
            return decode_json(body, kind.type)
        except DecodeError as err:
            if fallback is None:
                raise StoreError(
                    f"{kind.qualified_plural}: the server's answer does not decode: {err}",
                    kind=kind,
                ) from None
            log.debug("%s: the server's answer does not decode (%s)", kind.key, err)
            return fallback

    def _params(self, *, manager: bool = True, **params: str) -> dict[str, str]:
        if manager:
            params["fieldManager"] = FIELD_MANAGER
        if self._dry_run:
            params["dryRun"] = "All"
        return params

    async def _one(self, write: Write) -> tuple[Object, Outcome]:
        kind = self._kind(write)
        if kind.key not in self._served:
            raise NotFound(
                f"{kind.qualified_plural} are not served by {self.client.server}",
                kind=kind,
                namespace=self._namespace_of(write),
                name=self._name_of(write),
            )
        verb = write.verb
        if verb is Verb.CREATE:
            return await self._create(kind, _require(write))
        if verb is Verb.UPDATE:
            return await self._update(kind, _require(write), status=False)
        if verb is Verb.UPDATE_STATUS:
            return await self._update(kind, _require(write), status=True)
        if verb is Verb.PATCH:
            return await self._patch(kind, write)
        if verb is Verb.APPLY:
            return await self._apply(kind, _require(write))
        if verb is Verb.DELETE:
            return await self._delete(kind, write)
        if verb is Verb.BIND:
            return await self._bind(kind, _require(write))
        return await self._evict(kind, write)

    async def _create(self, kind: Kind, obj: Object) -> tuple[Object, Outcome]:
        namespace = (obj.metadata.namespace or "default") if kind.namespaced else ""
        sent = _sent(obj, namespace)
        try:
            body = await self._post(kind, namespace, sent)
        except AlreadyExists:
            if kind.type is not Event:
                raise
            # Events are not watched, so a recorder cannot see the names taken (by another
            # loop's Event of the same second): this one gets a name of its own.
            sent["metadata"]["name"] = f"{obj.metadata.name}-{secrets.token_hex(3)}"
            body = await self._post(kind, namespace, sent)
        return self._decode(kind, body, obj), Outcome.CREATED

    async def _post(self, kind: Kind, namespace: str, doc: dict[str, Any]) -> bytes:
        return await self.client.post(
            resource_path(kind, namespace),
            msgspec.json.encode(doc),
            params=self._params(),
            kind=kind,
            namespace=namespace,
            name=doc["metadata"].get("name", ""),
        )

    async def _update(
        self, kind: Kind, obj: Object, *, status: bool, held: Object | None = None
    ) -> tuple[Object, Outcome]:
        """A merge patch of what changed from ``held`` (default: the cached object); for a
        kind with a ``status`` subresource the status goes there (an update writes both, as
        every backend's update does)."""
        meta = obj.metadata
        namespace = (meta.namespace or "default") if kind.namespaced else ""
        if held is None:
            held = self._held(kind, meta.name, namespace)
        has_status = kind.key in self._status
        where: dict[str, Any] = {"kind": kind, "namespace": namespace, "name": meta.name}
        if held is None:  # not cached (an Event): the whole object, as written
            path = resource_path(kind, namespace, meta.name, "status" if status else "")
            body = await self.client.put(path, encode(obj), params=self._params(), **where)
            return self._decode(kind, body, obj), Outcome.CONFIGURED
        before, after = _doc(held), _doc(obj)
        if status:
            before = {"status": before.get("status", {})}
            after = {"status": after.get("status", {})}
        patch = merge_diff(before, after)
        if not isinstance(patch, dict):
            patch = {}
        metadata = patch.get("metadata")
        if isinstance(metadata, dict):
            metadata.pop("resourceVersion", None)
            if not metadata:
                del patch["metadata"]
        status_patch: dict[str, Any] = {}
        if has_status and "status" in patch:
            status_patch = {"status": patch.pop("status")}
        if not patch and not status_patch:
            return held, Outcome.UNCHANGED
        version = meta.resource_version
        stored = held
        for body_patch, subresource in ((patch, ""), (status_patch, "status")):
            if not body_patch:
                continue
            if version:
                body_patch.setdefault("metadata", {})["resourceVersion"] = version
            answer = await self.client.patch(
                resource_path(kind, namespace, meta.name, subresource),
                msgspec.json.encode(body_patch),
                content_type=MERGE_PATCH,
                params=self._params(),
                **where,
            )
            stored = self._decode(kind, answer, obj)
            if version:  # the next part is conditional on this one's version
                version = stored.metadata.resource_version
        same = stored.metadata.resource_version == held.metadata.resource_version
        return stored, Outcome.UNCHANGED if same else Outcome.CONFIGURED

    async def _patch(self, kind: Kind, write: Write) -> tuple[Object, Outcome]:
        namespace = (write.namespace or "default") if kind.namespaced else ""
        patch: dict[str, Any] = dict(write.patch or {})
        if write.resource_version:
            meta = dict(patch.get("metadata") or {})
            meta["resourceVersion"] = write.resource_version
            patch["metadata"] = meta
        held = self._held(kind, write.name, namespace)
        body = await self.client.patch(
            resource_path(kind, namespace, write.name),
            msgspec.json.encode(patch),
            content_type=MERGE_PATCH,
            params=self._params(),
            kind=kind,
            namespace=namespace,
            name=write.name,
        )
        stored = self._decode(kind, body, held)
        same = held is not None and stored.metadata.resource_version == (
            held.metadata.resource_version
        )
        return stored, Outcome.UNCHANGED if same else Outcome.CONFIGURED

    async def _apply(self, kind: Kind, obj: Object) -> tuple[Object, Outcome]:
        """Create, or update what differs from the object stored (no version precondition:
        apply is the last writer's, as ``kubectl apply``). Fields the cluster's schema does
        not declare are pruned by the server, as it prunes them for kubectl."""
        meta = obj.metadata
        namespace = (meta.namespace or "default") if kind.namespaced else ""
        held = self._held(kind, meta.name, namespace)
        unversioned = msgspec.structs.replace(
            obj, metadata=msgspec.structs.replace(meta, resource_version="")
        )
        if held is not None:
            return await self._update(kind, unversioned, status=False, held=held)
        try:
            created, _ = await self._create(kind, unversioned)
        except AlreadyExists:  # the cache is behind: what is stored is the base
            answer = await self.client.get(
                resource_path(kind, namespace, meta.name),
                kind=kind,
                namespace=namespace,
                name=meta.name,
            )
            current = self._decode(kind, answer, None)
            return await self._update(kind, unversioned, status=False, held=current)
        if kind.key not in self._status or not _doc(unversioned).get("status"):
            return created, Outcome.CREATED
        # The server left the status out of the create: it goes to its subresource.
        versioned = msgspec.structs.replace(
            obj,
            metadata=msgspec.structs.replace(
                meta, resource_version=created.metadata.resource_version
            ),
        )
        stored, _ = await self._update(kind, versioned, status=True, held=created)
        return stored, Outcome.CREATED

    def _preconditions(self, write: Write) -> dict[str, str]:
        preconditions: dict[str, str] = {}
        if write.obj is not None and write.obj.metadata.uid:
            preconditions["uid"] = write.obj.metadata.uid
        if write.resource_version:
            preconditions["resourceVersion"] = write.resource_version
        return preconditions

    async def _delete(self, kind: Kind, write: Write) -> tuple[Object, Outcome]:
        name = self._name_of(write)
        namespace = self._namespace_of(write)
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = self._preconditions(write)
        if preconditions:
            options["preconditions"] = preconditions
        held = write.obj or self._held(kind, name, namespace)
        body = await self.client.delete(
            resource_path(kind, namespace, name),
            msgspec.json.encode(options),
            params=self._params(manager=False),
            kind=kind,
            namespace=namespace,
            name=name,
        )
        try:
            stored = decode_json(body, kind.type)
        except DecodeError:  # a Status: gone at once
            if held is None:
                raise NotFound.of(kind, name, namespace) from None
            return held, Outcome.DELETED
        if stored.metadata.deletion_timestamp is not None and stored.metadata.finalizers:
            return stored, Outcome.CONFIGURED
        return stored, Outcome.DELETED

    async def _bind(self, kind: Kind, pod: Object) -> tuple[Object, Outcome]:
        meta = pod.metadata
        namespace = meta.namespace or "default"
        where: dict[str, Any] = {"kind": kind, "namespace": namespace, "name": meta.name}
        node = pod.spec.node_name if isinstance(pod, Pod) else ""
        held = self._held(kind, meta.name, namespace)
        if held is None:
            raise NotFound.of(kind, meta.name, namespace)
        if meta.uid and held.metadata.uid != meta.uid:
            raise NotFound(
                f'pods "{meta.name}" was deleted and created again (uid {held.metadata.uid},'
                f" not {meta.uid})",
                **where,
            )
        before, after = _doc(held).get("metadata", {}), _doc(pod).get("metadata", {})
        changed = {
            field: diff
            for field in ("annotations", "labels")
            if (diff := merge_diff(before.get(field, {}), after.get(field, {})))
        }
        key = (namespace, meta.name)
        self._binding[key] = held.metadata.uid
        # The version the server gives the pod when bound is not in the binding's answer;
        # this one (the PreBind patch's, else none) only says the pod is no longer the one
        # read, so that a loop's assumed pod stays shown until the bound one is seen.
        version = ""
        try:
            if changed:
                # PreBind: what the scheduler's plugins added, with the uid as a precondition.
                patch = {"metadata": {"uid": held.metadata.uid, **changed}}
                answer = await self.client.patch(
                    resource_path(kind, namespace, meta.name),
                    msgspec.json.encode(patch),
                    content_type=MERGE_PATCH,
                    params=self._params(),
                    **where,
                )
                version = msgspec.json.decode(answer, type=_Versioned).metadata.resource_version
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta.name, "namespace": namespace, "uid": held.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            await self.client.post(
                resource_path(kind, namespace, meta.name, "binding"),
                msgspec.json.encode(binding),
                params=self._params(),
                **where,
            )
        except BaseException:
            self._bind_failed(key)
            raise
        if self._dry_run:
            self._bind_failed(key)
        bound = msgspec.structs.replace(
            pod, metadata=msgspec.structs.replace(meta, resource_version=version)
        )
        return bound, Outcome.CONFIGURED

    async def _evict(self, kind: Kind, write: Write) -> tuple[Object, Outcome]:
        name = self._name_of(write)
        namespace = self._namespace_of(write)
        eviction: dict[str, Any] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        preconditions = self._preconditions(write)
        if preconditions:
            eviction["deleteOptions"] = {"preconditions": preconditions}
        await self.client.post(
            resource_path(kind, namespace, name, "eviction"),
            msgspec.json.encode(eviction),
            params=self._params(manager=False),
            kind=kind,
            namespace=namespace,
            name=name,
        )
        held = write.obj or self._held(kind, name, namespace)
        if held is None:
            raise NotFound.of(kind, name, namespace)
        return held, Outcome.DELETED

    # -- a refused write, shown on its object ------------------------------------------------

    def _report_invalid(self, write: Write, err: Invalid) -> None:
        kind = self._kind(write)
        name = self._name_of(write)
        if not name:
            return
        namespace = self._namespace_of(write)
        obj = write.obj or self._held(kind, name, namespace)
        message = f"{write.verb.value} refused by the API server: {err.message}"
        uid = obj.metadata.uid if obj is not None else ""
        self._report(kind, namespace, name, uid, "FailedWrite", message)

    def _report_undecodable(
        self, kind: Kind, key: tuple[str, str], uid: str, err: DecodeError
    ) -> None:
        """An object koordpy cannot read (a field its type refuses: what Koordinator's webhook
        would have rejected) is left out, its last readable version kept: said on it."""
        namespace, name = key
        message = f"koordpy cannot use this object and leaves it out: {err}"
        self._report(kind, namespace, name, uid, "InvalidObject", message)

    def _report(
        self, kind: Kind, namespace: str, name: str, uid: str, reason: str, message: str
    ) -> None:
        """A Warning Event on the object, the same one at most once per
        :data:`EVENT_REPEAT`."""
        now = _now().replace(microsecond=0)
        said = (kind.key, namespace, name, message)
        last = self._reported.get(said)
        if last is not None and (now - last).total_seconds() < EVENT_REPEAT:
            return
        if len(self._reported) > 1000:
            self._reported.clear()
        self._reported[said] = now
        event = Event(
            metadata=ObjectMeta(
                name=f"{name}.{int(now.timestamp() * 1e9):x}",
                namespace=namespace or "default",
            ),
            involved_object=ObjectReference(
                api_version=kind.api_version,
                kind=kind.kind,
                namespace=namespace,
                name=name,
                uid=uid,
            ),
            reason=reason,
            message=message[:1024],
            source=EventSource(component=self._component),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            type="Warning",
            reporting_component=self._component,
        )
        self._spawn(
            self._send([Write.create(event)], Pending(), wake=False), name=f"{reason} event"
        )


def _require(write: Write) -> Object:
    if write.obj is None:
        raise Invalid(f"a {write.verb.value} write needs the object")
    return write.obj
