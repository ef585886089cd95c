"""Job extension tests, and the builders they share (jobs of every kind, a settable clock,
and a stand-in for the admission engine)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import msgspec

from apis import constants as k
from apis.core import (
    Container,
    Job,
    JobSpec,
    PodSpec,
    PodTemplateSpec,
    PyTorchJob,
    PyTorchJobSpec,
    ReplicaSpec,
    ResourceRequirements,
    TFJob,
    TFJobSpec,
)
from apis.meta import ObjectMeta
from apis.queueing import Admission, QueueUnit
from apis.resources import ResourceList
from controller.queueing import phases

GI = 1 << 30
QUOTA = "team-a"


class Clock:
    """A settable clock for the store and the loops."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def template(
    *,
    cpu: int = 1000,
    memory: int = GI,
    limits_only: bool = False,
    priority_class: str = "",
    priority: int | None = None,
    annotations: Mapping[str, str] | None = None,
) -> PodTemplateSpec:
    amounts = ResourceList({"cpu": cpu, "memory": memory})
    resources = (
        ResourceRequirements(limits=amounts)
        if limits_only
        else ResourceRequirements(requests=amounts)
    )
    return PodTemplateSpec(
        metadata=ObjectMeta(annotations=dict(annotations or {})),
        spec=PodSpec(
            containers=(Container(name="main", image="busybox", resources=resources),),
            priority_class_name=priority_class,
            priority=priority,
            scheduler_name="koord-scheduler",
        ),
    )


def job_meta(
    name: str,
    *,
    suspend_annotation: bool = False,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> ObjectMeta:
    notes = dict(annotations or {})
    if suspend_annotation:
        notes[k.ANNOTATION_QUEUE_SUSPEND] = "true"
    return ObjectMeta(
        name=name,
        namespace="team-a",
        labels={k.LABEL_QUOTA_NAME: QUOTA, **(labels or {})},
        annotations=notes,
    )


def batch_job(
    name: str = "train",
    *,
    parallelism: int | None = 2,
    completions: int | None = 4,
    suspend: bool | None = True,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    pod_template: PodTemplateSpec | None = None,
) -> Job:
    return Job(
        metadata=job_meta(name, labels=labels, annotations=annotations),
        spec=JobSpec(
            template=pod_template or template(),
            parallelism=parallelism,
            completions=completions,
            suspend=suspend,
        ),
    )


def roles(
    workers: int, *, master: bool = True, worker_class: str = "", master_class: str = ""
) -> dict[str, ReplicaSpec]:
    specs: dict[str, ReplicaSpec] = {}
    if master:
        specs["Master"] = ReplicaSpec(
            replicas=1, template=template(priority_class=master_class, cpu=2000)
        )
    specs["Worker"] = ReplicaSpec(
        replicas=workers, template=template(priority_class=worker_class, limits_only=True)
    )
    return specs


def pytorch_job(
    name: str = "ddp",
    *,
    workers: int = 2,
    master: bool = True,
    worker_class: str = "",
    master_class: str = "",
    annotations: Mapping[str, str] | None = None,
) -> PyTorchJob:
    return PyTorchJob(
        metadata=job_meta(name, suspend_annotation=True, annotations=annotations),
        spec=PyTorchJobSpec(
            pytorch_replica_specs=roles(
                workers, master=master, worker_class=worker_class, master_class=master_class
            )
        ),
    )


def tf_job(name: str = "mnist", *, workers: int = 2, worker_class: str = "") -> TFJob:
    return TFJob(
        metadata=job_meta(name, suspend_annotation=True),
        spec=TFJobSpec(tf_replica_specs=roles(workers, worker_class=worker_class)),
    )


def admit(unit: QueueUnit, now: datetime, **replicas: int) -> QueueUnit:
    """``unit`` as the admission engine writes it: Dequeued with these admitted replicas."""
    admissions = tuple(Admission(name=name, replicas=count) for name, count in replicas.items())
    if not admissions:
        admissions = tuple(Admission(name=s.name, replicas=s.count) for s in unit.spec.pod_set)
    status = msgspec.structs.replace(
        unit.status,
        phase=phases.DEQUEUED,
        message="Dequeued because schedule successfully",
        admissions=admissions,
        last_update_time=now,
        last_allocate_time=now,
        conditions=phases.mirrored_conditions(unit.status.conditions, phases.DEQUEUED, now),
    )
    return msgspec.structs.replace(unit, status=status)


def evict(unit: QueueUnit, now: datetime, reason: str = phases.EVICTED_DEACTIVATED) -> QueueUnit:
    """``unit`` as the engine writes an eviction: Enqueued, no admissions, Evicted=True."""
    status = msgspec.structs.replace(
        unit.status,
        phase=phases.ENQUEUED,
        message="evicted",
        admissions=(),
        last_update_time=now,
        conditions=phases.mirrored_conditions(
            unit.status.conditions, phases.ENQUEUED, now, evicted_reason=reason
        ),
    )
    return msgspec.structs.replace(unit, status=status)
