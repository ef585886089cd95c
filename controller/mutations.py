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

from apis import constants
from apis.core import Job, JobSpec, Pod
from apis.kinds import Kind
from apis.meta import Object, ObjectMeta

__all__ = [
    "SERVER_SET_ANNOTATIONS",
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

#: Annotations the controller writes when it binds a pod (its devices, CPUs, reservation and
#: gang) or fails to (the scheduler's diagnosis), and the status it writes on quotas and
#: queues. An apply whose manifest does not name them keeps them, as ``kubectl apply`` keeps
#: what it did not set.
SERVER_SET_ANNOTATIONS = frozenset(
    {
        constants.ANNOTATION_DEVICE_ALLOCATED,
        constants.ANNOTATION_RESOURCE_STATUS,
        constants.ANNOTATION_RESERVATION_ALLOCATED,
        constants.ANNOTATION_BIND_GANG_GROUP_ID,
        constants.ANNOTATION_BIND_GANG_MEMBER_COUNT,
        constants.ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED,
        constants.ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED,
        "scheduling.koordpy.io/diagnosis",
        # ElasticQuota status (the queueing loop) and Queue status annotations.
        constants.ANNOTATION_QUOTA_RUNTIME,
        constants.ANNOTATION_QUOTA_REQUEST,
        constants.ANNOTATION_QUOTA_CHILD_REQUEST,
        constants.ANNOTATION_QUOTA_GUARANTEED,
        constants.ANNOTATION_QUOTA_ALLOCATED,
        constants.ANNOTATION_QUOTA_NON_PREEMPTIBLE_REQUEST,
        constants.ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED,
        "koordpy.io/admission-rate",
        # The job extensions' bookkeeping on queued jobs.
        constants.ANNOTATION_JOB_HAS_ENQUEUED,
        constants.ANNOTATION_JOB_HAS_ENQUEUED_LEGACY,
        constants.ANNOTATION_JOB_ENQUEUE_TIMESTAMP,
        constants.ANNOTATION_JOB_ENQUEUE_TIMESTAMP_LEGACY,
        constants.ANNOTATION_JOB_DEQUEUE_TIMESTAMP,
        constants.ANNOTATION_JOB_DEQUEUE_TIMESTAMP_LEGACY,
    }
)


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
    owner references and the body; the status too when ``incoming`` carries one."""
    meta = incoming.metadata
    fields = {name: getattr(incoming, name) for name in shape.body}
    if shape.has_status:
        status = getattr(incoming, "status")  # noqa: B009 - not every kind has one
        if status != shape.default_status:
            fields["status"] = status
    annotations = meta.annotations
    kept = {
        key: value
        for key, value in stored.metadata.annotations.items()
        if key in SERVER_SET_ANNOTATIONS and key not in annotations
    }
    if kept:
        annotations = {**annotations, **kept}
    if (
        isinstance(stored, Pod)
        and isinstance(incoming, Pod)
        and stored.spec.node_name
        and not incoming.spec.node_name
    ):
        # The scheduler's binding (a subresource in Kubernetes): a manifest naming no node
        # does not unbind the pod.
        fields["spec"] = replace(incoming.spec, node_name=stored.spec.node_name)
    annotations = _keep_queue_release(stored, incoming, fields, annotations)
    if "spec" in fields and (
        constants.ANNOTATION_JOB_HAS_ENQUEUED in stored.metadata.annotations
        or constants.ANNOTATION_JOB_HAS_ENQUEUED_LEGACY in stored.metadata.annotations
    ):
        fields["spec"] = _carry_stamps(getattr(stored, "spec"), fields["spec"])  # noqa: B009
    return replace(
        stored,
        metadata=replace(
            stored.metadata,
            labels=meta.labels,
            annotations=annotations,
            finalizers=meta.finalizers,
            owner_references=meta.owner_references,
        ),
        **fields,
    )


def _keep_queue_release(
    stored: Object, incoming: Object, fields: dict[str, Any], annotations: dict[str, str]
) -> dict[str, str]:
    """A job the queue released stays released when its manifest (``suspend: true``, as it
    was submitted) is applied again (a batch Job: one the queue marked
    ``koord-queue/job-has-enqueued``): the queue owns the suspension from then on, as the
    Kubernetes job controllers own a resumed Job's ``suspend`` under Kueue. (Deactivate a job
    with the ``scheduling.x-k8s.io/active: "false"`` annotation instead.) The annotations to
    write are returned."""
    spec = getattr(stored, "spec", None)
    new_spec = fields.get("spec")
    if spec is None or new_spec is None:
        return annotations
    key = constants.ANNOTATION_QUEUE_SUSPEND
    if isinstance(stored, Job) and isinstance(new_spec, JobSpec):
        # Only a Job the queue held and released (it marks the Jobs it enqueues); a Job that
        # ran without the queue is suspended by applying ``suspend: true``.
        queued = constants.ANNOTATION_JOB_HAS_ENQUEUED in stored.metadata.annotations
        started = stored.spec.suspend is False and stored.status.start_time is not None
        if queued and started and new_spec.suspend:
            fields["spec"] = replace(new_spec, suspend=False)
        return annotations
    released = stored.metadata.annotations.get(key) == "false" and (
        constants.ANNOTATION_JOB_DEQUEUE_TIMESTAMP in stored.metadata.annotations
        or constants.ANNOTATION_JOB_DEQUEUE_TIMESTAMP_LEGACY in stored.metadata.annotations
    )
    if not released or annotations.get(key) != "true":
        return annotations
    policy = getattr(new_spec, "run_policy", None)
    if policy is not None and getattr(policy, "suspend", None):
        fields["spec"] = replace(new_spec, run_policy=replace(policy, suspend=False))
    return {**annotations, key: "false"}


#: What the job extensions stamp on a queued job's pod templates.
_STAMP_ANNOTATIONS = frozenset(
    {
        constants.ANNOTATION_RELATED_QUEUEUNIT,
        constants.ANNOTATION_RELATED_QUEUEUNIT_LEGACY,
        constants.ANNOTATION_RELATED_PODSET_NAME,
        constants.ANNOTATION_RELATED_PODSET_NAME_LEGACY,
    }
)
_STAMP_LABELS = frozenset({constants.LABEL_SCHEDULE_ADMISSION})


def _carry_stamps(stored: Any, incoming: Any) -> Any:
    """``incoming`` with the queue's stamps on pod templates (anything holding labels and
    annotations) that ``stored`` has at the same place and ``incoming`` lacks."""
    if isinstance(stored, msgspec.Struct) and type(stored) is type(incoming):
        changes: dict[str, Any] = {}
        for name in stored.__struct_fields__:
            before, after = getattr(stored, name), getattr(incoming, name)
            if name in ("labels", "annotations") and isinstance(before, dict):
                keys = _STAMP_LABELS if name == "labels" else _STAMP_ANNOTATIONS
                carried = {
                    key: value
                    for key, value in before.items()
                    if key in keys and key not in (after or {})
                }
                if carried:
                    changes[name] = {**(after or {}), **carried}
            elif before is not after:
                merged = _carry_stamps(before, after)
                if merged is not after:
                    changes[name] = merged
        return replace(incoming, **changes) if changes else incoming
    if isinstance(stored, dict) and isinstance(incoming, dict):
        merged_items = {
            key: _carry_stamps(stored.get(key), value) for key, value in incoming.items()
        }
        if any(merged_items[key] is not incoming[key] for key in incoming):
            return merged_items
        return incoming
    if isinstance(stored, tuple) and isinstance(incoming, tuple) and len(stored) == len(incoming):
        items = tuple(_carry_stamps(a, b) for a, b in zip(stored, incoming, strict=True))
        if any(a is not b for a, b in zip(items, incoming, strict=True)):
            return items
    return incoming


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
