"""Recording Kubernetes Events about objects, aggregated like client-go's recorder; and their
expiry.

An Event names the object it is about (``involvedObject``), a reason and a message. A repeat of
the same (object, type, reason, message) within one recorder increments ``count`` and moves
``lastTimestamp`` instead of creating another Event. Events about cluster-scoped objects live in
namespace ``default``, as Kubernetes puts them.

The ``event-ttl`` control loop (:class:`EventTTL`; the controller daemon runs it beside the
others, ``koordpy simulate`` does not, so that its output keeps every Event of the run) deletes
Events ``ttl`` after they were last written, as the API server's ``--event-ttl`` (default one
hour) has etcd do: an Event's last
write is the latest of its ``creationTimestamp``, ``lastTimestamp``, ``eventTime`` and
``series.lastObservedTime`` (a repeat moves ``lastTimestamp``, so an Event that keeps happening
stays). A sweep runs when the oldest Event it knows of expires, but not within ``ttl / 60``
(a minute for an hour) of the last one, and deletes a bounded number per pass (the rest in
the next, at once); an Event written with older times than those already stored waits for
that sweep.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec

from apis.core import Event, EventSource
from apis.kinds import Kind, Registry, default_registry
from apis.meta import Object, ObjectMeta, ObjectReference
from controller.errors import NotFound, StoreError
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops registers the TTL loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["EVENT_TTL", "MAX_MESSAGE_BYTES", "EventRecorder", "EventTTL", "last_written"]

_log = logging.getLogger(__name__)

#: Seconds an Event is kept after its last write (the API server's ``--event-ttl``).
EVENT_TTL: Final = 3600.0
#: Most Events one pass of :class:`EventTTL` deletes (the rest go in the next, at once).
MAX_DELETES: Final = 500

#: Kubernetes truncates an event's note to this many bytes.
MAX_MESSAGE_BYTES = 1024

NORMAL = "Normal"
WARNING = "Warning"

_Key = tuple[str, str, str, str, str, str, str]
_EVENT_KIND = default_registry().for_type(Event)


def _truncate(message: str) -> str:
    raw = message.encode()
    if len(raw) <= MAX_MESSAGE_BYTES:
        return message
    return raw[: MAX_MESSAGE_BYTES - 3].decode(errors="ignore") + "..."


class EventRecorder:
    """Writes Events through the store on behalf of one component."""

    def __init__(
        self, store: Cluster, *, component: str, clock: Callable[[], datetime], host: str = ""
    ) -> None:
        self._store = store
        self._component = component
        self._host = host
        self._clock = clock
        #: each Event recorded, as last written and whether the store answered that write
        self._seen: dict[_Key, tuple[Event, bool]] = {}
        self._outbox = Outbox()

    @property
    def registry(self) -> Registry:
        return self._store.registry

    def reference(self, obj: Object) -> ObjectReference:
        return ObjectReference(
            api_version=obj.api_version,
            kind=obj.kind,
            namespace=obj.metadata.namespace,
            name=obj.metadata.name,
            uid=obj.metadata.uid,
            resource_version=obj.metadata.resource_version,
        )

    def record(self, obj: Object, *, type: str, reason: str, message: str) -> Event:  # noqa: A002
        """Create the Event, or bump the count of the identical one recorded before; the
        Event as written (as stored, when the store answered at once)."""
        return self._record([(obj, type, reason, message)])[0]

    def record_many(self, items: Iterable[tuple[Object, str, str, str]]) -> None:
        """Record each ``(obj, type, reason, message)`` as :meth:`record` does, every new
        Event and count bump in one batch of writes."""
        self._record(items)

    def _record(self, items: Iterable[tuple[Object, str, str, str]]) -> list[Event]:
        self._outbox.collect()
        now = self._clock().replace(microsecond=0)
        stamp = f"{int(now.timestamp() * 1e9):x}"
        kind = self.registry.for_type(Event)
        #: key -> its place in ``writes``: a repeat within the batch bumps that write
        batch: dict[_Key, int] = {}
        keys: list[_Key] = []
        writes: list[Event] = []
        fresh: list[bool] = []
        taken: set[tuple[str, str]] = set()
        shown: list[int] = []
        for obj, type_, reason, message in items:
            message = _truncate(message)
            namespace = obj.metadata.namespace or "default"
            key: _Key = (
                obj.kind,
                namespace,
                obj.metadata.name,
                obj.metadata.uid,
                type_,
                reason,
                message,
            )
            position = batch.get(key)
            if position is not None:  # a repeat within the batch
                writes[position] = msgspec.structs.replace(
                    writes[position], count=writes[position].count + 1, last_timestamp=now
                )
                shown.append(position)
                continue
            batch[key] = len(writes)
            shown.append(len(writes))
            keys.append(key)
            bumped = self._bumped(kind, key, now)
            if bumped is not None:
                writes.append(bumped)
                fresh.append(False)
                continue
            base = f"{obj.metadata.name}.{stamp}"
            name = base
            attempt = 0
            while (namespace, name) in taken or self._store.exists(kind, name, namespace):
                attempt += 1
                name = f"{base}-{attempt}"
            taken.add((namespace, name))
            writes.append(
                self._event(
                    obj,
                    name=name,
                    namespace=namespace,
                    type_=type_,
                    reason=reason,
                    message=message,
                    now=now,
                )
            )
            fresh.append(True)
        if not writes:
            return []
        for key, event in zip(keys, writes, strict=True):
            self._seen[key] = (event, False)
        self._outbox.send(
            self._store,
            [
                Write.create(e) if new else Write.update(e)
                for e, new in zip(writes, fresh, strict=True)
            ],
            functools.partial(self._written, keys, writes),
        )
        written = [
            self._seen.get(key, (event, False))[0] for key, event in zip(keys, writes, strict=True)
        ]
        return [written[at] for at in shown]

    def _written(
        self, keys: Sequence[_Key], sent: Sequence[Event], results: Sequence[Result]
    ) -> None:
        """Keep what was stored, to bump next time; forget an Event whose write failed."""
        for key, event, result in zip(keys, sent, results, strict=True):
            current = self._seen.get(key)
            if current is None or current[0] is not event:
                continue  # written again since
            if isinstance(result, StoreError):
                del self._seen[key]
                _log.warning(
                    "event %s/%s not recorded: %s",
                    event.metadata.namespace,
                    event.metadata.name,
                    result,
                )
            elif isinstance(result[0], Event):
                self._seen[key] = (result[0], True)

    def _bumped(self, kind: Kind, key: _Key, now: datetime) -> Event | None:
        """The Event recorded before under ``key`` with its count bumped and its last time
        ``now``, to write back; None when there is none (or, once its write was answered, it
        was deleted since)."""
        previous = self._seen.get(key)
        if previous is None:
            return None
        last, answered = previous
        meta = last.metadata
        if answered and not self._store.exists(kind, meta.name, meta.namespace):
            del self._seen[key]
            return None
        return msgspec.structs.replace(
            last,
            metadata=msgspec.structs.replace(meta, resource_version=""),
            count=last.count + 1,
            last_timestamp=now,
        )

    def _event(
        self,
        obj: Object,
        *,
        name: str,
        namespace: str,
        type_: str,
        reason: str,
        message: str,
        now: datetime,
    ) -> Event:
        return Event(
            metadata=ObjectMeta(name=name, namespace=namespace),
            involved_object=self.reference(obj),
            reason=reason,
            message=message,
            source=EventSource(component=self._component, host=self._host),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            type=type_,
            reporting_component=self._component,
            reporting_instance=self._host,
        )


def last_written(event: Event) -> datetime | None:
    """When ``event`` was last written, as far as its times tell (see the module docstring)."""
    series = event.series
    times = (
        event.metadata.creation_timestamp,
        event.last_timestamp,
        event.event_time,
        series.last_observed_time if series is not None else None,
    )
    known = [t if t.tzinfo is not None else t.replace(tzinfo=UTC) for t in times if t is not None]
    return max(known, default=None)


class EventTTL:
    """The ``event-ttl`` :class:`~controller.loops.ControlLoop`: Events go ``ttl`` seconds
    after their last write (see the module docstring)."""

    name = "event-ttl"

    def __init__(self, *, ttl: float = EVENT_TTL) -> None:
        if ttl <= 0:
            raise ValueError(f"event ttl must be positive, got {ttl}")
        self.ttl = timedelta(seconds=ttl)
        #: the least time between two sweeps
        self._granularity = timedelta(seconds=max(1.0, ttl / 60))
        #: when the next sweep is due (None: at the next Event)
        self._due: datetime | None = None
        #: the deletes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=(_EVENT_KIND,))

    @staticmethod
    def _deleted(results: Sequence[Result]) -> None:
        for result in results:
            # gone already, or changed meanwhile (or the store refused): the next sweep
            if isinstance(result, StoreError) and not isinstance(result, NotFound):
                _log.warning("cannot delete an expired event: %s", result)

    def reconcile(self, ctx: LoopContext) -> float | None:
        now = ctx.now()
        if self._due is not None and now < self._due:
            return (self._due - now).total_seconds()
        store = ctx.store
        kind = store.registry.for_type(Event)
        cutoff = now - self.ttl
        expired: list[Event] = []
        oldest: datetime | None = None
        for event in self._outbox.over(store.snapshot()).objects(kind):
            if not isinstance(event, Event):
                continue
            written = last_written(event)
            if written is None or written <= cutoff:
                expired.append(event)
            elif oldest is None or written < oldest:
                oldest = written
        self._outbox.send(
            store,
            [Write.delete_of(kind, event, precondition=True) for event in expired[:MAX_DELETES]],
            self._deleted,
        )
        if len(expired) > MAX_DELETES:
            self._due = None
            return 0.0
        if oldest is None:
            self._due = None
            return None
        self._due = max(oldest + self.ttl, now + self._granularity)
        return (self._due - now).total_seconds()
