"""How a write changes an object: pure functions the store applies inside a transaction.

Server-owned metadata (uid, creationTimestamp, resourceVersion, generation, deletionTimestamp,
deletionGracePeriodSeconds) is set here and never taken from a caller on update. The *body* of
a kind is every top-level field but ``apiVersion``, ``kind``, ``metadata`` and ``status``;
``metadata.generation`` counts changes of the body.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import msgspec

from apis.core import Pod
from apis.kinds import Kind
from apis.meta import Object, ObjectMeta

__all__ = [
    "Shape",
    "applied",
    "body_changed",
    "created",
    "deleting",
    "shape_of",
    "stamp",
    "updated",
    "whole_seconds",
]

replace = msgspec.structs.replace
ObjT = TypeVar("ObjT", bound=Object)
_ENVELOPE = frozenset({"api_version", "kind", "metadata", "status"})


@dataclass(frozen=True, slots=True)
class Shape:
    """What the store needs to know about a kind, computed once (``Kind``'s properties are not
    cached, and the store needs them on every write)."""

    kind: Kind
    key: str
    api_version: str
    name: str
    namespaced: bool
    #: top-level fields outside apiVersion, kind, metadata and status
    body: tuple[str, ...]
    has_status: bool
    default_status: Any
    #: an object's ``body`` fields as a tuple, by ``operator.attrgetter`` (compared whole)
    body_of: Callable[[Object], tuple[Any, ...]]


def shape_of(kind: Kind) -> Shape:
    body: list[str] = []
    has_status = False
    default_status: Any = None
    for info in msgspec.structs.fields(kind.type):
        if info.name == "status":
            has_status = True
            if info.default_factory is not msgspec.NODEFAULT:
                default_status = info.default_factory()
            elif info.default is not msgspec.NODEFAULT:
                default_status = info.default
        elif info.name not in _ENVELOPE:
            body.append(info.name)
    return Shape(
        kind=kind,
        key=kind.key,
        api_version=kind.api_version,
        name=kind.kind,
        namespaced=kind.namespaced,
        body=tuple(body),
        has_status=has_status,
        default_status=default_status,
        body_of=_tuple_getter(tuple(body)),
    )


def _tuple_getter(names: tuple[str, ...]) -> Callable[[Object], tuple[Any, ...]]:
    """``operator.attrgetter`` of ``names`` that always gives a tuple (also of one or none)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        get_one = operator.attrgetter(names[0])
        return lambda obj: (get_one(obj),)
    return cast("Callable[[Object], tuple[Any, ...]]", operator.attrgetter(*names))


def body_changed(shape: Shape, old: Object, new: Object) -> bool:
    body_of = shape.body_of
    return body_of(old) != body_of(new)


def whole_seconds(moment: datetime) -> datetime:
    """UTC, truncated to the second (how Kubernetes stores timestamps)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    elif moment.utcoffset():
        moment = moment.astimezone(UTC)
    return moment.replace(microsecond=0)


def created(
    shape: Shape,
    obj: ObjT,
    *,
    name: str,
    namespace: str,
    uid: str,
    now: datetime,
    resource_version: int,
) -> ObjT:
    """``obj`` as first stored: server-owned metadata set, generation 1."""
    meta = replace(
        obj.metadata,
        name=name,
        namespace=namespace,
        uid=uid,
        resource_version=str(resource_version),
        generation=1,
        creation_timestamp=now,
        deletion_timestamp=None,
        deletion_grace_period_seconds=None,
    )
    return replace(obj, api_version=shape.api_version, kind=shape.name, metadata=meta)


def _keep_server_owned(stored: ObjectMeta, incoming: ObjectMeta) -> ObjectMeta:
    return replace(
        incoming,
        name=stored.name,
        namespace=stored.namespace,
        uid=stored.uid,
        resource_version=stored.resource_version,
        generation=stored.generation,
        creation_timestamp=stored.creation_timestamp,
        deletion_timestamp=stored.deletion_timestamp,
        deletion_grace_period_seconds=stored.deletion_grace_period_seconds,
    )


def updated(shape: Shape, stored: Object, incoming: ObjT) -> ObjT:
    """``incoming`` with the stored server-owned metadata (version and generation unchanged:
    equal to ``stored`` exactly when the update changes nothing)."""
    return replace(
        incoming,
        api_version=shape.api_version,
        kind=shape.name,
        metadata=_keep_server_owned(stored.metadata, incoming.metadata),
    )


def applied(shape: Shape, stored: ObjT, incoming: Object) -> ObjT:
    """``stored`` with what an apply of ``incoming`` replaces: labels, annotations, finalizers,
    owner references and the body; the status too when ``incoming`` carries one (what a
    server-side apply by the object's sole manager gives). A bound pod stays bound: the
    binding is a subresource, and ``spec.nodeName`` cannot be unset.

    ``kubectl apply``'s merging of a user's manifest (what it keeps of the controller's
    writes) is the API server's: :mod:`controller.api.apply`."""
    meta = incoming.metadata
    fields = {name: getattr(incoming, name) for name in shape.body}
    if shape.has_status:
        status = getattr(incoming, "status")  # noqa: B009 - not every kind has one
        if status != shape.default_status:
            fields["status"] = status
    if (
        isinstance(stored, Pod)
        and isinstance(incoming, Pod)
        and stored.spec.node_name
        and not incoming.spec.node_name
    ):
        fields["spec"] = replace(incoming.spec, node_name=stored.spec.node_name)
    return replace(
        stored,
        metadata=replace(
            stored.metadata,
            labels=meta.labels,
            annotations=meta.annotations,
            finalizers=meta.finalizers,
            owner_references=meta.owner_references,
        ),
        **fields,
    )


def stamp(obj: ObjT, *, resource_version: int, generation: int) -> ObjT:
    return replace(
        obj,
        metadata=replace(
            obj.metadata, resource_version=str(resource_version), generation=generation
        ),
    )


def deleting(obj: ObjT, *, now: datetime, resource_version: int) -> ObjT:
    """``obj`` marked for deletion (it waits for its finalizers)."""
    meta = obj.metadata
    return replace(
        obj,
        metadata=replace(
            meta,
            deletion_timestamp=now,
            deletion_grace_period_seconds=0,
            generation=meta.generation + 1,
            resource_version=str(resource_version),
        ),
    )
