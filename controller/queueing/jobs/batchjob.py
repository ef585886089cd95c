"""``batch/v1`` Job: held by ``spec.suspend``, one pod set named after the job.

* managed: ``spec.suspend: true`` and no ``status.startTime`` (queue-spec §4, §17.3);
* pod set count: ``min(parallelism, completions - succeeded)`` (without ``completions``:
  ``parallelism`` until a pod succeeds, then 0); ``minCount`` from the annotation
  ``kueue.x-k8s.io/job-min-parallelism``; pods are interchangeable;
* priority: the template's ``priorityClassName``, else its ``priority``;
* the QueueUnit is named like the job, and the template is not stamped (a Job's template is
  immutable); the Job gets ``koord-queue/job-has-enqueued: "true"`` when its unit is made, the
  mark that it is the queue's (:func:`controller.mutations.applied` keeps such a Job released);
* status as the Job controller writes it: ``active``/``succeeded``/``failed``, ``startTime``
  at the first resume, ``Suspended``, then ``SuccessCriteriaMet`` and ``Complete``, reason
  ``CompletionsReached`` (all completions succeeded), or ``FailureTarget`` and ``Failed``,
  reason ``BackoffLimitExceeded`` (more failed pods than ``backoffLimit``, default 6), as
  :mod:`controller.workloads.jobconditions` writes them for both paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar, Final

import msgspec

from apis import constants as k
from apis.core import Job, Pod
from apis.meta import Object
from apis.queueing import PodSet
from controller.queueing.jobs.base import (
    FAILED,
    SUCCEEDED,
    ExtensionArgs,
    count_replicas,
    positive_int_annotation,
    set_condition,
    with_annotations,
)
from controller.workloads.jobconditions import (
    FAILURE_TARGET,
    MSG_BACKOFF,
    REASON_BACKOFF,
    ended,
    new_condition,
    success_target,
)

__all__ = ["Args", "BatchJobAdapter"]

replace = msgspec.structs.replace

#: Kubernetes' default ``backoffLimit``.
DEFAULT_BACKOFF_LIMIT: Final = 6


class Args(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``job`` extension (both timeouts off by default)."""


def _job(obj: Object) -> Job:
    if not isinstance(obj, Job):
        raise TypeError(f"expected a batch/v1 Job, got {obj.kind}")
    return obj


class BatchJobAdapter:
    name: ClassVar[str] = "job"
    kind: ClassVar[type[Object]] = Job
    args_type: ClassVar[type[ExtensionArgs]] = Args
    fungible: ClassVar[bool] = True

    def unit_name(self, job: Object) -> str:
        return _job(job).metadata.name

    def is_suspended(self, job: Object) -> bool:
        return _job(job).spec.suspend is True

    def is_managed(self, job: Object) -> bool:
        typed = _job(job)
        return typed.spec.suspend is True and typed.status.start_time is None

    def pod_sets(self, job: Object, pods: Mapping[str, Sequence[Pod]]) -> tuple[PodSet, ...]:
        typed = _job(job)
        parallelism = typed.spec.parallelism if typed.spec.parallelism is not None else 1
        succeeded = typed.status.succeeded
        completions = typed.spec.completions
        if completions is None:
            count = parallelism if succeeded == 0 else 0
        else:
            count = max(0, min(parallelism, completions - succeeded))
        min_count = positive_int_annotation(typed, k.ANNOTATION_KUEUE_JOB_MIN_PARALLELISM)
        if min_count is not None and min_count >= count:
            min_count = None
        return (
            PodSet(
                name=typed.metadata.name,
                template=typed.spec.template,
                count=count,
                min_count=min_count,
            ),
        )

    def priority_source(self, job: Object) -> tuple[str, int | None]:
        spec = _job(job).spec.template.spec
        return spec.priority_class_name, spec.priority

    def enqueued(self, job: Object, unit: str, now: datetime) -> Object:
        typed = _job(job)
        meta = with_annotations(typed, **{k.ANNOTATION_JOB_HAS_ENQUEUED: "true"})
        return replace(typed, metadata=meta)

    def suspend(self, job: Object, now: datetime) -> Object:
        typed = _job(job)
        conditions = set_condition(
            typed.status.conditions,
            "Suspended",
            "True",
            now,
            reason="JobSuspended",
            message="Job suspended",
        )
        return replace(
            typed,
            spec=replace(typed.spec, suspend=True),
            status=replace(typed.status, conditions=conditions),
        )

    def resume(self, job: Object, now: datetime) -> Object:
        typed = _job(job)
        status = typed.status
        conditions = status.conditions
        if any(c.type == "Suspended" for c in conditions):
            conditions = set_condition(
                conditions,
                "Suspended",
                "False",
                now,
                reason="JobResumed",
                message="Job resumed",
            )
        return replace(
            typed,
            spec=replace(typed.spec, suspend=False),
            status=replace(status, conditions=conditions, start_time=status.start_time or now),
        )

    def observe(self, job: Object, pods: Mapping[str, Sequence[Pod]], now: datetime) -> Object:
        typed = _job(job)
        counts = count_replicas(pods.get(typed.metadata.name, ()))
        status = typed.status
        if status.completion_time is not None or self.outcome(typed) is not None:
            return typed
        # Finished pods may be gone: the counts never go down (the Job controller tracks them).
        succeeded = max(status.succeeded, counts.succeeded)
        failed = max(status.failed, counts.failed)
        new = replace(
            status,
            active=counts.active,
            succeeded=succeeded,
            failed=failed,
            ready=counts.running if counts.running or status.ready is not None else None,
        )
        limit = typed.spec.backoff_limit
        limit = DEFAULT_BACKOFF_LIMIT if limit is None else limit
        completions = typed.spec.completions
        if failed > limit:
            target = new_condition(FAILURE_TARGET, REASON_BACKOFF, MSG_BACKOFF, now)
            new = replace(new, conditions=ended(new.conditions, target, now))
        elif (completions is not None and succeeded >= completions) or (
            completions is None and succeeded > 0 and counts.active == 0
        ):
            conditions = ended(new.conditions, success_target(now), now)
            new = replace(new, completion_time=now, conditions=conditions)
        return typed if new == status else replace(typed, status=new)

    def outcome(self, job: Object) -> str | None:
        for condition in _job(job).status.conditions:
            if condition.status != "True":
                continue
            if condition.type == "Complete":
                return SUCCEEDED
            if condition.type == "Failed":
                return FAILED
        return None
