"""Kubeflow jobs: TFJob and PyTorchJob (``kubeflow.org/v1``), MPIJob (``kubeflow.org/v2beta1``).

* held by the annotation ``scheduling.x-k8s.io/suspend: "true"`` (or ``runPolicy.suspend``);
  resumed with the annotation ``"false"``, ``runPolicy.suspend: false``, the ``Queuing``
  condition ``False`` and the dequeue timestamp;
* one pod set per replica type, named by the lower-cased role (``worker``, ``ps``...);
* priority: the first role that is not ``Master`` (``Launcher`` for MPI) in manifest order;
* QueueUnit names: ``<job>-tf-qu``, ``<job>-py-qu``, ``<job>-mpi-qu``;
* the templates of the non-Master roles are stamped with the related-queueunit/podset
  annotations and ``schedule-admission: "false"``;
* status: ``replicaStatuses`` per role, ``Running`` once a pod runs, then ``Succeeded`` when
  the deciding role's pods all succeeded (``Master``/``Chief``/``Launcher`` when the job has
  one, else every role but ``PS``), ``Failed`` as soon as a pod failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar

import msgspec

from apis import constants as k
from apis.core import (
    KubeflowJobStatus,
    Pod,
    PyTorchJob,
    ReplicaSpec,
    ReplicaStatus,
    RunPolicy,
    TFJob,
)
from apis.meta import Object
from apis.queueing import PodSet
from apis.workloads import MPIJob
from controller.queueing.jobs.base import (
    FAILED,
    SUCCEEDED,
    ExtensionArgs,
    count_replicas,
    has_suspend_annotation,
    set_condition,
    stamp_template,
    with_annotations,
)

__all__ = [
    "MPIJobAdapter",
    "MPIJobArgs",
    "PyTorchJobAdapter",
    "PyTorchJobArgs",
    "TFJobAdapter",
    "TFJobArgs",
]

replace = msgspec.structs.replace

KubeflowJob = TFJob | PyTorchJob | MPIJob


class TFJobArgs(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``tfjob`` extension."""


class PyTorchJobArgs(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``pytorchjob`` extension."""


class MPIJobArgs(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``mpijob`` extension."""


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class _KubeflowAdapter:
    """What the three kinds share; subclasses name the kind and where its roles live."""

    name: ClassVar[str]
    kind: ClassVar[type[Object]]
    args_type: ClassVar[type[ExtensionArgs]]
    fungible: ClassVar[bool] = False
    suffix: ClassVar[str]
    #: Roles whose template gives no priority (in order of preference otherwise).
    head_roles: ClassVar[tuple[str, ...]] = ("Master",)
    #: Roles that decide success when the job has one of them.
    deciding_roles: ClassVar[tuple[str, ...]] = ("Master", "Chief")

    def _job(self, obj: Object) -> KubeflowJob:
        if not isinstance(obj, TFJob | PyTorchJob | MPIJob) or type(obj) is not self.kind:
            raise TypeError(f"expected a {self.kind.__name__}, got {obj.kind}")
        return obj

    def roles(self, job: Object) -> dict[str, ReplicaSpec]:
        typed = self._job(job)
        if isinstance(typed, TFJob):
            return typed.spec.tf_replica_specs
        if isinstance(typed, PyTorchJob):
            return typed.spec.pytorch_replica_specs
        return typed.spec.mpi_replica_specs

    def _with_roles(self, job: KubeflowJob, roles: dict[str, ReplicaSpec]) -> KubeflowJob:
        if isinstance(job, TFJob):
            return replace(job, spec=replace(job.spec, tf_replica_specs=roles))
        if isinstance(job, PyTorchJob):
            return replace(job, spec=replace(job.spec, pytorch_replica_specs=roles))
        return replace(job, spec=replace(job.spec, mpi_replica_specs=roles))

    @staticmethod
    def _with_run_policy(job: KubeflowJob, policy: RunPolicy) -> KubeflowJob:
        if isinstance(job, TFJob):
            return replace(job, spec=replace(job.spec, run_policy=policy))
        if isinstance(job, PyTorchJob):
            return replace(job, spec=replace(job.spec, run_policy=policy))
        return replace(job, spec=replace(job.spec, run_policy=policy))

    def unit_name(self, job: Object) -> str:
        return f"{self._job(job).metadata.name}{self.suffix}"

    def is_suspended(self, job: Object) -> bool:
        typed = self._job(job)
        return has_suspend_annotation(typed) or typed.spec.run_policy.suspend is True

    def is_managed(self, job: Object) -> bool:
        typed = self._job(job)
        return self.is_suspended(typed) and typed.status.start_time is None

    def pod_sets(self, job: Object, pods: Mapping[str, Sequence[Pod]]) -> tuple[PodSet, ...]:
        return tuple(
            PodSet(
                name=role.lower(),
                template=spec.template,
                count=spec.replicas if spec.replicas is not None else 1,
            )
            for role, spec in self.roles(job).items()
        )

    def priority_source(self, job: Object) -> tuple[str, int | None]:
        roles = self.roles(job)
        chosen = next(
            (spec for role, spec in roles.items() if role not in self.head_roles),
            next(iter(roles.values()), None),
        )
        if chosen is None:
            return "", None
        return chosen.template.spec.priority_class_name, chosen.template.spec.priority

    def enqueued(self, job: Object, unit: str, now: datetime) -> Object:
        typed = self._job(job)
        roles = {
            role: spec
            if role in self.head_roles
            else replace(spec, template=stamp_template(spec.template, unit, role.lower()))
            for role, spec in self.roles(typed).items()
        }
        stamped = self._with_roles(typed, roles)
        conditions = set_condition(
            typed.status.conditions,
            k.CONDITION_JOB_QUEUING,
            "True",
            now,
            reason="JobEnqueued",
            message="job is waiting in the queue",
            update_time=True,
        )
        meta = with_annotations(
            stamped,
            **{
                k.ANNOTATION_JOB_HAS_ENQUEUED: "true",
                k.ANNOTATION_JOB_ENQUEUE_TIMESTAMP: _iso(now),
            },
        )
        return replace(stamped, metadata=meta, status=replace(typed.status, conditions=conditions))

    def suspend(self, job: Object, now: datetime) -> Object:
        typed = self._job(job)
        meta = with_annotations(typed, **{k.ANNOTATION_QUEUE_SUSPEND: "true"})
        policy = replace(typed.spec.run_policy, suspend=True)
        conditions = set_condition(
            typed.status.conditions,
            k.CONDITION_JOB_QUEUING,
            "True",
            now,
            reason="JobSuspended",
            message="job is back in the queue",
            update_time=True,
        )
        conditions = tuple(
            replace(c, status="False", last_transition_time=now, last_update_time=now)
            if c.type == "Running" and c.status == "True"
            else c
            for c in conditions
        )
        suspended = self._with_run_policy(replace(typed, metadata=meta), policy)
        return replace(suspended, status=replace(typed.status, conditions=conditions))

    def resume(self, job: Object, now: datetime) -> Object:
        typed = self._job(job)
        meta = with_annotations(
            typed,
            **{
                k.ANNOTATION_QUEUE_SUSPEND: "false",
                k.ANNOTATION_JOB_DEQUEUE_TIMESTAMP: _iso(now),
            },
        )
        policy = typed.spec.run_policy
        if policy.suspend is not None:
            policy = replace(policy, suspend=False)
        conditions = set_condition(
            typed.status.conditions,
            k.CONDITION_JOB_QUEUING,
            "False",
            now,
            reason="JobDequeued",
            message="job was admitted by the queue",
            update_time=True,
        )
        resumed = self._with_run_policy(replace(typed, metadata=meta), policy)
        status = replace(
            typed.status, conditions=conditions, start_time=typed.status.start_time or now
        )
        return replace(resumed, status=status)

    def _decide(self, job: KubeflowJob, counts: Mapping[str, tuple[int, int, int]]) -> str | None:
        """``counts``: role -> (replicas wanted, succeeded, failed)."""
        if any(failed for _, _, failed in counts.values()):
            return FAILED
        deciding = [r for r in self.deciding_roles if r in counts]
        roles = deciding[:1] or [r for r in counts if r != "PS"]
        if roles and all(counts[r][1] >= counts[r][0] for r in roles):
            return SUCCEEDED
        return None

    def observe(self, job: Object, pods: Mapping[str, Sequence[Pod]], now: datetime) -> Object:
        typed = self._job(job)
        status = typed.status
        if self.outcome(typed) is not None or status.start_time is None:
            return typed
        replica_statuses: dict[str, ReplicaStatus] = {}
        decided: dict[str, tuple[int, int, int]] = {}
        any_running = False
        for role, spec in self.roles(typed).items():
            counts = count_replicas(pods.get(role.lower(), ()))
            replica_statuses[role] = ReplicaStatus(
                active=counts.active, succeeded=counts.succeeded, failed=counts.failed
            )
            wanted = spec.replicas if spec.replicas is not None else 1
            decided[role] = (wanted, counts.succeeded, counts.failed)
            any_running = any_running or counts.running > 0
        conditions = status.conditions
        completion = status.completion_time
        if not self.is_suspended(typed):
            result = self._decide(typed, decided)
            if result is not None:
                running = next((c for c in conditions if c.type == "Running"), None)
                if running is not None and running.status == "True":
                    conditions = set_condition(
                        conditions,
                        "Running",
                        "False",
                        now,
                        reason=f"Job{result}",
                        update_time=True,
                    )
                conditions = set_condition(
                    conditions,
                    result,
                    "True",
                    now,
                    reason=f"Job{result}",
                    message=f"{typed.kind} {typed.metadata.name} is {result.lower()}.",
                    update_time=True,
                )
                completion = now
            elif any_running:
                conditions = set_condition(
                    conditions,
                    "Running",
                    "True",
                    now,
                    reason="JobRunning",
                    message=f"{typed.kind} {typed.metadata.name} is running.",
                    update_time=True,
                )
        new = replace(
            status,
            replica_statuses=replica_statuses,
            conditions=conditions,
            completion_time=completion,
        )
        if new == status:
            return typed
        return replace(typed, status=new)

    def outcome(self, job: Object) -> str | None:
        return _kubeflow_outcome(self._job(job).status)


def _kubeflow_outcome(status: KubeflowJobStatus) -> str | None:
    for condition in status.conditions:
        if condition.status == "True" and condition.type in (SUCCEEDED, FAILED):
            return condition.type
    return None


class TFJobAdapter(_KubeflowAdapter):
    name: ClassVar[str] = "tfjob"
    kind: ClassVar[type[Object]] = TFJob
    args_type: ClassVar[type[ExtensionArgs]] = TFJobArgs
    suffix: ClassVar[str] = "-tf-qu"


class PyTorchJobAdapter(_KubeflowAdapter):
    name: ClassVar[str] = "pytorchjob"
    kind: ClassVar[type[Object]] = PyTorchJob
    args_type: ClassVar[type[ExtensionArgs]] = PyTorchJobArgs
    suffix: ClassVar[str] = "-py-qu"


class MPIJobAdapter(_KubeflowAdapter):
    name: ClassVar[str] = "mpijob"
    kind: ClassVar[type[Object]] = MPIJob
    args_type: ClassVar[type[ExtensionArgs]] = MPIJobArgs
    suffix: ClassVar[str] = "-mpi-qu"
    head_roles: ClassVar[tuple[str, ...]] = ("Launcher",)
    deciding_roles: ClassVar[tuple[str, ...]] = ("Launcher",)
