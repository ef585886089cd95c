"""``kubectl apply`` of a user's manifest: the API server's merge, not the store's.

The store's apply (:func:`controller.mutations.applied`) replaces what its writer names, as a
server-side apply by an object's only manager does. A user applying a manifest again names
only what the manifest holds, while the controller has written more since, so the API server
(the gRPC ``Apply``, ``koordpy simulate`` loading manifests) merges first, as ``kubectl apply``
keeps what it did not set:

- the annotations the controller sets (:data:`SERVER_SET_ANNOTATIONS`) stay unless the
  manifest names them;
- a job the queue released stays released when its manifest (``suspend: true``, as it was
  submitted) is applied again, and the queue's stamps on its pod templates stay;

then writes the merged object as an update conditional on the version it merged over
(:func:`apply`), or creates the object when there is none.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from apis import constants
from apis.caches import Cache
from apis.core import Job, JobSpec
from apis.kinds import Kind
from apis.meta import Object
from controller.errors import NotFound, StoreError
from controller.mutations import Shape, applied, shape_of
from controller.store.memory import MemoryStore
from controller.store.writes import Outcome, Write

__all__ = ["SERVER_SET_ANNOTATIONS", "apply", "kubectl_applied"]

replace = msgspec.structs.replace
ObjT = TypeVar("ObjT", bound=Object)


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


def kubectl_applied(shape: Shape, stored: ObjT, incoming: Object) -> ObjT:
    """``stored`` with what ``kubectl apply`` of the manifest ``incoming`` changes: what a
    plain apply replaces (:func:`controller.mutations.applied`: labels, annotations,
    finalizers, owners, body, a status given), keeping what the controller wrote that the
    manifest does not name (see the module docstring)."""
    merged = applied(shape, stored, incoming)
    annotations = incoming.metadata.annotations
    kept = {
        key: value
        for key, value in stored.metadata.annotations.items()
        if key in SERVER_SET_ANNOTATIONS and key not in annotations
    }
    if kept:
        annotations = {**annotations, **kept}
    fields: dict[str, Any] = {}
    if "spec" in shape.body:
        fields["spec"] = getattr(merged, "spec")  # noqa: B009 - a kind with a spec
        annotations = _keep_queue_release(stored, incoming, fields, annotations)
        if (
            constants.ANNOTATION_JOB_HAS_ENQUEUED in stored.metadata.annotations
            or constants.ANNOTATION_JOB_HAS_ENQUEUED_LEGACY in stored.metadata.annotations
        ):
            fields["spec"] = _carry_stamps(getattr(stored, "spec"), fields["spec"])  # noqa: B009
    if annotations is merged.metadata.annotations and not fields:
        return merged
    return replace(merged, metadata=replace(merged.metadata, annotations=annotations), **fields)


def apply(store: MemoryStore, obj: Object) -> tuple[Object, Outcome]:
    """``kubectl apply`` of ``obj`` against ``store``: created when absent, else merged
    (:func:`kubectl_applied`) and written as an update conditional on the version merged
    over. The outcome is CREATED, CONFIGURED, UNCHANGED (nothing written), or DELETED when
    the apply removed the last finalizer of an object being deleted. Run it inside the
    store's transaction (a group commit's op) to have the read and the write in one."""
    kind = store.registry.for_object(obj)
    meta = obj.metadata
    try:
        stored = store.get(kind, meta.name, meta.namespace) if meta.name else None
    except NotFound:
        stored = None
    write = (
        Write.create(obj)
        if stored is None
        else Write.update(_conditional(kubectl_applied(_shape(kind), stored, obj), obj))
    )
    result = store.write([write]).results()[0]
    if isinstance(result, StoreError):
        raise result
    return result


def _conditional(merged: ObjT, incoming: Object) -> ObjT:
    """``merged`` (stored metadata) carrying the resourceVersion and uid ``incoming`` names,
    when it names them, as the update's preconditions (the store checks them)."""
    meta = incoming.metadata
    if not meta.resource_version and not meta.uid:
        return merged
    have = merged.metadata
    return replace(
        merged,
        metadata=replace(
            have,
            resource_version=meta.resource_version or have.resource_version,
            uid=meta.uid or have.uid,
        ),
    )


#: kind's Struct type -> its Shape (a kind's shape is its Struct's fields: fixed per type)
_SHAPES: Cache[type[Object], Shape] = Cache(
    "api.apply-shapes", limit=256, contract="a kind's Shape depends on its Struct type alone"
)


def _shape(kind: Kind) -> Shape:
    found = _SHAPES.get(kind.type)
    return found if found is not None else _SHAPES.put(kind.type, shape_of(kind))


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
