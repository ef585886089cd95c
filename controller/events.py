"""Recording Kubernetes Events about objects, aggregated like client-go's recorder.

An Event names the object it is about (``involvedObject``), a reason and a message. A repeat of
the same (object, type, reason, message) within one recorder increments ``count`` and moves
``lastTimestamp`` instead of creating another Event. Events about cluster-scoped objects live in
namespace ``default``, as Kubernetes puts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

import msgspec

from apis.core import Event, EventSource
from apis.kinds import Kind, Registry
from apis.meta import Object, ObjectMeta, ObjectReference
from controller.errors import NotFound, StoreError
from controller.store import Store

__all__ = ["MAX_MESSAGE_BYTES", "EventRecorder"]

#: Kubernetes truncates an event's note to this many bytes.
MAX_MESSAGE_BYTES = 1024

NORMAL = "Normal"
WARNING = "Warning"

_Key = tuple[str, str, str, str, str, str, str]


def _truncate(message: str) -> str:
    raw = message.encode()
    if len(raw) <= MAX_MESSAGE_BYTES:
        return message
    return raw[: MAX_MESSAGE_BYTES - 3].decode(errors="ignore") + "..."


class EventRecorder:
    """Writes Events through the store on behalf of one component."""

    def __init__(
        self, store: Store, *, component: str, clock: Callable[[], datetime], host: str = ""
    ) -> None:
        self._store = store
        self._component = component
        self._host = host
        self._clock = clock
        self._seen: dict[_Key, tuple[str, str]] = {}

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
        """Create the Event, or bump the count of the identical one recorded before."""
        now = self._clock().replace(microsecond=0)
        message = _truncate(message)
        namespace = obj.metadata.namespace or "default"
        key: _Key = (
            obj.kind,
            namespace,
            obj.metadata.name,
            obj.metadata.uid,
            type,
            reason,
            message,
        )
        kind = self.registry.for_type(Event)
        updated = self._bumped(kind, key, now)
        if updated is not None:
            stored = self._store.update(updated)
            assert isinstance(stored, Event)
            return stored
        event = self._create_unique(
            self._event(
                obj,
                name=f"{obj.metadata.name}.{int(now.timestamp() * 1e9):x}",
                namespace=namespace,
                type_=type,
                reason=reason,
                message=message,
                now=now,
            )
        )
        self._seen[key] = (event.metadata.namespace, event.metadata.name)
        return event

    def _bumped(self, kind: Kind, key: _Key, now: datetime) -> Event | None:
        """The Event recorded before under ``key`` with its count bumped and its last time
        ``now``, to write back; None when there is none (or it was deleted since)."""
        previous = self._seen.get(key)
        if previous is None:
            return None
        try:
            existing = self._store.get(kind, previous[1], previous[0])
        except NotFound:
            return None
        if not isinstance(existing, Event):
            return None
        return msgspec.structs.replace(
            existing,
            metadata=msgspec.structs.replace(existing.metadata, resource_version=""),
            count=existing.count + 1,
            last_timestamp=now,
        )

    def record_many(self, items: Iterable[tuple[Object, str, str, str]]) -> None:
        """Record each ``(obj, type, reason, message)``: the new Events are written in one
        store transaction, and the count bumps of Events seen before (as :meth:`record`) in
        another."""
        now = self._clock().replace(microsecond=0)
        stamp = f"{int(now.timestamp() * 1e9):x}"
        kind = self.registry.for_type(Event)
        fresh: list[Event] = []
        keys: list[_Key] = []
        batch: dict[_Key, int] = {}
        bumped: list[Event] = []
        bumps: dict[_Key, int] = {}
        taken: set[tuple[str, str]] = set()
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
            position = bumps.get(key)
            if position is not None:  # bumped already in this batch
                bumped[position] = msgspec.structs.replace(
                    bumped[position], count=bumped[position].count + 1
                )
                continue
            updated = self._bumped(kind, key, now)
            if updated is not None:
                bumps[key] = len(bumped)
                bumped.append(updated)
                continue
            position = batch.get(key)
            if position is not None:  # a repeat within the batch
                fresh[position] = msgspec.structs.replace(
                    fresh[position], count=fresh[position].count + 1
                )
                continue
            base = f"{obj.metadata.name}.{stamp}"
            name = base
            attempt = 0
            while (namespace, name) in taken or self._store.exists(kind, name, namespace):
                attempt += 1
                name = f"{base}-{attempt}"
            taken.add((namespace, name))
            batch[key] = len(fresh)
            keys.append(key)
            fresh.append(
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
        if bumped:
            for result in self._store.update_many(bumped):
                if isinstance(result, StoreError):
                    raise result
        if not fresh:
            return
        for key, result in zip(keys, self._store.apply_many(fresh), strict=True):
            if isinstance(result, StoreError):
                raise result
            stored = result[0]
            self._seen[key] = (stored.metadata.namespace, stored.metadata.name)

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

    def _create_unique(self, event: Event) -> Event:
        base = event.metadata.name
        for attempt in range(1000):
            name = base if attempt == 0 else f"{base}-{attempt}"
            candidate = msgspec.structs.replace(
                event, metadata=msgspec.structs.replace(event.metadata, name=name)
            )
            kind = self.registry.for_type(Event)
            try:
                self._store.get(kind, name, candidate.metadata.namespace)
            except NotFound:
                stored = self._store.create(candidate)
                assert isinstance(stored, Event)
                return stored
        raise RuntimeError(f"no free event name for {base}")
