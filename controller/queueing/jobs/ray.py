"""``ray.io/v1`` RayJob: a head pod and worker groups, queued as one unit ``<job>-ray-qu``.

* held by the annotation ``scheduling.x-k8s.io/suspend: "true"`` or ``spec.suspend``; resumed
  with both set to false;
* pod sets: ``head`` (1 pod) and one per worker group, named by ``groupName`` (count
  ``replicas`` x ``numOfHosts``); a RayJob that only selects an existing cluster has none;
* priority: the head template's ``priorityClassName``/``priority``;
* status: ``jobDeploymentStatus`` ``Suspended``/``Running``/``Complete``/``Failed`` and
  ``jobStatus`` ``PENDING``/``RUNNING``/``SUCCEEDED``/``FAILED``, decided by the head pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar, Final

import msgspec

from apis import constants as k
from apis.core import Pod
from apis.meta import Object
from apis.queueing import PodSet
from apis.workloads import RayJob
from controller.queueing.jobs.base import (
    FAILED,
    SUCCEEDED,
    AnnotationHeldAdapter,
    ExtensionArgs,
    count_replicas,
    has_suspend_annotation,
    stamp_template,
    with_annotations,
)

__all__ = ["Args", "RayJobAdapter"]

replace = msgspec.structs.replace

HEAD: Final = "head"


class Args(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``rayjob`` extension."""


def _job(obj: Object) -> RayJob:
    if not isinstance(obj, RayJob):
        raise TypeError(f"expected a RayJob, got {obj.kind}")
    return obj


class RayJobAdapter(AnnotationHeldAdapter):
    name: ClassVar[str] = "rayjob"
    kind: ClassVar[type[Object]] = RayJob
    args_type: ClassVar[type[ExtensionArgs]] = Args
    suffix: ClassVar[str] = "-ray-qu"

    def is_suspended(self, job: Object) -> bool:
        typed = _job(job)
        return has_suspend_annotation(typed) or typed.spec.suspend is True

    def is_managed(self, job: Object) -> bool:
        typed = _job(job)
        return self.is_suspended(typed) and typed.status.start_time is None

    def pod_sets(self, job: Object, pods: Mapping[str, Sequence[Pod]]) -> tuple[PodSet, ...]:
        cluster = _job(job).spec.ray_cluster_spec
        if cluster is None:
            return ()
        sets = [PodSet(name=HEAD, template=cluster.head_group_spec.template, count=1)]
        for group in cluster.worker_group_specs:
            replicas = group.replicas if group.replicas is not None else 0
            hosts = group.num_of_hosts if group.num_of_hosts else 1
            sets.append(
                PodSet(
                    name=group.group_name or f"group-{len(sets)}",
                    template=group.template,
                    count=replicas * hosts,
                )
            )
        return tuple(sets)

    def priority_source(self, job: Object) -> tuple[str, int | None]:
        cluster = _job(job).spec.ray_cluster_spec
        if cluster is None:
            return "", None
        spec = cluster.head_group_spec.template.spec
        return spec.priority_class_name, spec.priority

    def enqueued(self, job: Object, unit: str, now: datetime) -> Object:
        typed = _job(job)
        cluster = typed.spec.ray_cluster_spec
        if cluster is not None:
            head = cluster.head_group_spec
            workers = tuple(
                replace(g, template=stamp_template(g.template, unit, g.group_name))
                for g in cluster.worker_group_specs
            )
            cluster = replace(
                cluster,
                head_group_spec=replace(head, template=stamp_template(head.template, unit, HEAD)),
                worker_group_specs=workers,
            )
        meta = with_annotations(typed, **{k.ANNOTATION_JOB_HAS_ENQUEUED: "true"})
        return replace(
            typed,
            metadata=meta,
            spec=replace(typed.spec, ray_cluster_spec=cluster),
            status=replace(typed.status, job_deployment_status="Suspended"),
        )

    def suspend(self, job: Object, now: datetime) -> Object:
        typed = _job(job)
        meta = with_annotations(typed, **{k.ANNOTATION_QUEUE_SUSPEND: "true"})
        return replace(
            typed,
            metadata=meta,
            spec=replace(typed.spec, suspend=True),
            status=replace(typed.status, job_deployment_status="Suspended"),
        )

    def resume(self, job: Object, now: datetime) -> Object:
        typed = _job(job)
        meta = with_annotations(typed, **{k.ANNOTATION_QUEUE_SUSPEND: "false"})
        status = replace(
            typed.status,
            job_deployment_status="Running",
            job_status=typed.status.job_status or "PENDING",
            start_time=typed.status.start_time or now,
        )
        return replace(
            typed,
            metadata=meta,
            spec=replace(typed.spec, suspend=False if typed.spec.suspend is not None else None),
            status=status,
        )

    def observe(self, job: Object, pods: Mapping[str, Sequence[Pod]], now: datetime) -> Object:
        typed = _job(job)
        status = typed.status
        if self.outcome(typed) is not None or self.is_suspended(typed):
            return typed
        head = count_replicas(pods.get(HEAD, ()))
        if head.failed:
            new = replace(
                status,
                job_status="FAILED",
                job_deployment_status="Failed",
                end_time=now,
                failed=(status.failed or 0) + 1,
            )
        elif head.succeeded:
            new = replace(
                status,
                job_status="SUCCEEDED",
                job_deployment_status="Complete",
                end_time=now,
                succeeded=(status.succeeded or 0) + 1,
            )
        elif head.running:
            new = replace(status, job_status="RUNNING", job_deployment_status="Running")
        else:
            new = status
        return typed if new == status else replace(typed, status=new)

    def outcome(self, job: Object) -> str | None:
        state = _job(job).status.job_deployment_status
        if state == "Complete":
            return SUCCEEDED
        if state == "Failed":
            return FAILED
        return None
