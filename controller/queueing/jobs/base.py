"""What every job extension provides (:class:`JobAdapter`), its settings (:class:`ExtensionArgs`),
and the helpers the extensions share.

An adapter is a set of pure functions over one job kind: whether a job is held for the queue,
its pod sets (queue-spec §4 table), where its priority comes from, how to suspend and resume
it, how its status follows its pods, and when it is finished. The jobs control loop
(:mod:`controller.queueing.jobcontroller`) does the rest the same way for every kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Final, Protocol, runtime_checkable

import msgspec

from apis import constants as k
from apis.core import Container, Pod, PodTemplateSpec, ResourceRequirements, pod_requests
from apis.duration import Duration, DurationError
from apis.meta import Condition, Object, ObjectMeta
from apis.queueing import PodSet
from apis.resources import ResourceList

__all__ = [
    "FAILED",
    "SUCCEEDED",
    "AnnotationHeldAdapter",
    "ExtensionArgs",
    "JobAdapter",
    "JobArgsError",
    "ReplicaCounts",
    "count_replicas",
    "has_suspend_annotation",
    "positive_int_annotation",
    "requests_from_limits",
    "set_condition",
    "stamp_template",
    "total_request",
    "with_annotations",
]

SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"

replace = msgspec.structs.replace


class JobArgsError(ValueError):
    """An extension setting with a value it may not have."""


class ExtensionArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """Settings of one job extension (YAML under the extension's name).

    ``runningTimeout``: a resumed job whose pods are not running that long after admission
    goes to ``TimeoutBackoff`` and is suspended again; ``backoffTimeout``: how long it stays
    there before it is ``Enqueued`` again. Go durations; ``0s`` (the default) turns the
    running timeout off and makes the backoff immediate. ``exponentialBackoff`` (Koord-Queue's
    ``QueueUnitRequeueState`` gate, off by default) replaces the flat backoff by 10 s doubling
    per attempt up to 15 min, ±10 %, kept in the unit's ``status.requeueState``.
    """

    running_timeout: str = "0s"
    backoff_timeout: str = "0s"
    exponential_backoff: bool = False

    def __post_init__(self) -> None:
        for field, value in (
            ("runningTimeout", self.running_timeout),
            ("backoffTimeout", self.backoff_timeout),
        ):
            try:
                parsed = Duration.parse(value)
            except DurationError:
                raise JobArgsError(
                    f"{type(self).__name__}.{field}: {value!r} is not a duration (e.g. '90s')"
                ) from None
            if parsed.nanoseconds < 0:
                raise JobArgsError(f"{type(self).__name__}.{field}: {value!r} is negative")

    @property
    def running_timeout_seconds(self) -> float:
        return Duration.parse(self.running_timeout).seconds

    @property
    def backoff_timeout_seconds(self) -> float:
        return Duration.parse(self.backoff_timeout).seconds


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """What the pods of one pod set are doing."""

    #: Not finished (the Kubernetes ``active`` count).
    active: int = 0
    #: In phase Running.
    running: int = 0
    succeeded: int = 0
    failed: int = 0


def count_replicas(pods: Sequence[Pod]) -> ReplicaCounts:
    active = running = succeeded = failed = 0
    for pod in pods:
        phase = pod.status.phase
        if phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed":
            failed += 1
        else:
            active += 1
            if phase == "Running":
                running += 1
    return ReplicaCounts(active=active, running=running, succeeded=succeeded, failed=failed)


@runtime_checkable
class JobAdapter(Protocol):
    """One job kind, as the jobs loop sees it (all methods pure)."""

    #: The extension name (``job``, ``pytorchjob``...).
    name: ClassVar[str]
    #: The job's Struct type.
    kind: ClassVar[type[Object]]
    #: Settings type; decoded from the extension's YAML.
    args_type: ClassVar[type[ExtensionArgs]]
    #: True: pods are interchangeable and a finished one counts towards completion (batch
    #: Job); False: one pod per replica index, never re-created once finished.
    fungible: ClassVar[bool]

    def unit_name(self, job: Object) -> str:
        """The QueueUnit's name."""
        ...

    def is_suspended(self, job: Object) -> bool:
        """The job is held (not running pods)."""
        ...

    def is_managed(self, job: Object) -> bool:
        """A new job that waits for the queue (held and never started)."""
        ...

    def pod_sets(self, job: Object, pods: Mapping[str, Sequence[Pod]]) -> tuple[PodSet, ...]:
        """Pod sets with the pod templates the pods are made from and the counts wanted now."""
        ...

    def priority_source(self, job: Object) -> tuple[str, int | None]:
        """(priorityClassName, a template ``priority``) the unit's priority comes from."""
        ...

    def enqueued(self, job: Object, unit: str, now: datetime) -> Object:
        """The job marked as queued: templates stamped with ``unit`` (``ns/name``)."""
        ...

    def suspend(self, job: Object, now: datetime) -> Object: ...

    def resume(self, job: Object, now: datetime) -> Object: ...

    def observe(self, job: Object, pods: Mapping[str, Sequence[Pod]], now: datetime) -> Object:
        """The job's status brought in line with its pods (what its own controller writes)."""
        ...

    def outcome(self, job: Object) -> str | None:
        """``Succeeded``/``Failed`` once the job's status says it ended, else None."""
        ...


# --- helpers -----------------------------------------------------------------------------------


def positive_int_annotation(obj: Object, key: str) -> int | None:
    """The annotation ``key`` as a positive integer (None when absent, not an integer or not
    positive)."""
    raw = obj.metadata.annotations.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value > 0 else None


def has_suspend_annotation(job: Object, value: str = "true") -> bool:
    return job.metadata.annotations.get(k.ANNOTATION_QUEUE_SUSPEND) == value


class AnnotationHeldAdapter:
    """What the adapters of kinds held by the ``scheduling.x-k8s.io/suspend`` annotation share:
    the unit is named ``<job><suffix>``, the job is suspended while the annotation says
    ``"true"``, and its pods are not interchangeable (not ``fungible``)."""

    suffix: ClassVar[str] = ""
    fungible: ClassVar[bool] = False

    def unit_name(self, job: Object) -> str:
        return f"{job.metadata.name}{self.suffix}"

    def is_suspended(self, job: Object) -> bool:
        return has_suspend_annotation(job)


def with_annotations(job: Object, **changes: str | None) -> ObjectMeta:
    """The job's metadata with annotations set (a None value removes the key)."""
    annotations = dict(job.metadata.annotations)
    for key, value in changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return replace(job.metadata, annotations=annotations)


def stamp_template(
    template: PodTemplateSpec, unit: str, pod_set: str, *, gate: bool = True
) -> PodTemplateSpec:
    """``template`` carrying the related-queueunit/podset annotations (and the
    ``schedule-admission: "false"`` gate label)."""
    meta = template.metadata
    annotations = {
        **meta.annotations,
        k.ANNOTATION_RELATED_QUEUEUNIT: unit,
        k.ANNOTATION_RELATED_PODSET_NAME: pod_set,
    }
    labels = {**meta.labels, k.LABEL_SCHEDULE_ADMISSION: "false"} if gate else meta.labels
    if annotations == meta.annotations and labels == meta.labels:
        return template
    return replace(template, metadata=replace(meta, annotations=annotations, labels=labels))


def _with_requests(container: Container) -> Container:
    resources = container.resources
    if resources.requests or not resources.limits:
        return container
    return replace(container, resources=replace(resources, requests=resources.limits))


def requests_from_limits(template: PodTemplateSpec) -> PodTemplateSpec:
    """``template`` with each container's limits copied to its requests where it has none."""
    spec = template.spec
    containers = tuple(_with_requests(c) for c in spec.containers)
    init = tuple(_with_requests(c) for c in spec.init_containers)
    if containers == spec.containers and init == spec.init_containers:
        return template
    return replace(template, spec=replace(spec, containers=containers, init_containers=init))


def total_request(pod_sets: Sequence[PodSet]) -> ResourceList:
    """Sum over pod sets of ``count`` x the pod request."""
    total: dict[str, int] = {}
    for pod_set in pod_sets:
        for name, amount in pod_requests(pod_set.template.spec).items():
            total[name] = total.get(name, 0) + amount * pod_set.count
    return ResourceList({name: amount for name, amount in total.items() if amount})


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: str,
    now: datetime,
    *,
    reason: str = "",
    message: str = "",
    update_time: bool = False,
) -> tuple[Condition, ...]:
    """``conditions`` with ``type_`` set; its transition time moves only when the status flips.
    ``update_time`` also writes ``lastUpdateTime`` (Kubeflow's conditions carry one)."""
    before = next((c for c in conditions if c.type == type_), None)
    if (
        before is not None
        and before.status == status
        and before.reason == reason
        and before.message == message
    ):
        return tuple(conditions)
    since = before.last_transition_time if before is not None and before.status == status else now
    condition = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        last_update_time=now if update_time else None,
    )
    if before is None:
        return (*conditions, condition)
    return tuple(condition if c.type == type_ else c for c in conditions)


def plain_container(name: str, requests: Mapping[str, int], image: str = "") -> Container:
    """A container requesting ``requests`` (what a synthesized pod template holds)."""
    return Container(
        name=name,
        image=image,
        resources=ResourceRequirements(requests=ResourceList(requests)),
    )
