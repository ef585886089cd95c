"""``argoproj.io/v1alpha1`` Workflow (Argo), queued whole as one unit ``<workflow>-wf-qu``.

* held by the annotation ``scheduling.x-k8s.io/suspend: "true"``, or as the v1.8 manual has
  it: a template named ``koord-queue-suspend`` with a ``suspend`` field, and ``spec.suspend:
  true`` or a ``Suspend`` node ``Running``; resuming sets the annotation to ``"false"`` and
  clears ``spec.suspend`` (Argo's own pause switch otherwise stays the user's);
* pod sets: one per template that runs a pod (``container`` or ``script``), named after the
  template, 1 pod each: the unit asks for the whole workflow at once (queue-spec §13, DAG-aware
  queuing). The pods of the simulated runtime start together rather than in DAG order;
* priority: ``spec.podPriorityClassName``, else ``spec.podPriority``;
* status: ``phase`` ``Pending`` while queued, ``Running``, then ``Succeeded`` when every pod
  succeeded or ``Failed`` when one failed; ``progress`` ``done/total``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import msgspec

from apis import codec
from apis import constants as k
from apis.core import Pod, PodSpec, PodTemplateSpec, ResourceRequirements
from apis.errors import DecodeError
from apis.meta import Object, ObjectMeta
from apis.queueing import PodSet
from apis.workloads import Workflow
from controller.queueing.jobs.base import (
    FAILED,
    SUCCEEDED,
    AnnotationHeldAdapter,
    ExtensionArgs,
    count_replicas,
    has_suspend_annotation,
    plain_container,
    with_annotations,
)

__all__ = ["Args", "WorkflowAdapter"]

replace = msgspec.structs.replace


class Args(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``workflow`` extension."""


def _job(obj: Object) -> Workflow:
    if not isinstance(obj, Workflow):
        raise TypeError(f"expected a Workflow, got {obj.kind}")
    return obj


def _strings(raw: object) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(key): str(value) for key, value in raw.items()}


def _template(workflow: Workflow, template: Mapping[str, Any]) -> PodTemplateSpec | None:
    body = template.get("container") or template.get("script")
    if not isinstance(body, Mapping):
        return None
    try:
        resources = codec.decode_as(body.get("resources") or {}, ResourceRequirements)
    except DecodeError:
        resources = ResourceRequirements()
    requests = {**resources.limits, **resources.requests}
    metadata = template.get("metadata") or {}
    pod_metadata = workflow.spec.pod_metadata or {}
    spec = workflow.spec
    return PodTemplateSpec(
        metadata=ObjectMeta(
            labels={**_strings(pod_metadata.get("labels")), **_strings(metadata.get("labels"))},
            annotations={
                **_strings(pod_metadata.get("annotations")),
                **_strings(metadata.get("annotations")),
            },
        ),
        spec=PodSpec(
            containers=(plain_container("main", requests, str(body.get("image") or "")),),
            node_selector={**spec.node_selector, **_strings(template.get("nodeSelector"))},
            tolerations=spec.tolerations,
            affinity=spec.affinity,
            scheduler_name=spec.scheduler_name,
            priority_class_name=spec.pod_priority_class_name,
            priority=spec.pod_priority,
            restart_policy="Never",
        ),
    )


#: The template whose ``suspend`` marks a workflow as the queue's to release (the v1.8 manual).
SUSPEND_TEMPLATE = "koord-queue-suspend"


def _held_by_template(workflow: Workflow) -> bool:
    """The manual's way of holding a workflow (module docstring)."""
    if not any(
        t.get("name") == SUSPEND_TEMPLATE and "suspend" in t for t in workflow.spec.templates
    ):
        return False
    if workflow.spec.suspend:
        return True
    return any(
        node.get("type") == "Suspend" and node.get("phase") == "Running"
        for node in workflow.status.nodes.values()
    )


class WorkflowAdapter(AnnotationHeldAdapter):
    name: ClassVar[str] = "workflow"
    kind: ClassVar[type[Object]] = Workflow
    args_type: ClassVar[type[ExtensionArgs]] = Args
    suffix: ClassVar[str] = "-wf-qu"

    def is_suspended(self, job: Object) -> bool:
        workflow = _job(job)
        return super().is_suspended(workflow) or (
            not has_suspend_annotation(workflow, "false") and _held_by_template(workflow)
        )

    def is_managed(self, job: Object) -> bool:
        workflow = _job(job)
        return self.is_suspended(workflow) and workflow.status.started_at is None

    def pod_sets(self, job: Object, pods: Mapping[str, Sequence[Pod]]) -> tuple[PodSet, ...]:
        workflow = _job(job)
        sets: list[PodSet] = []
        for raw in workflow.spec.templates:
            template = _template(workflow, raw)
            name = str(raw.get("name") or "")
            if template is not None and name:
                sets.append(PodSet(name=name, template=template, count=1))
        return tuple(sets)

    def priority_source(self, job: Object) -> tuple[str, int | None]:
        spec = _job(job).spec
        return spec.pod_priority_class_name, spec.pod_priority

    def enqueued(self, job: Object, unit: str, now: datetime) -> Object:
        workflow = _job(job)
        meta = with_annotations(workflow, **{k.ANNOTATION_JOB_HAS_ENQUEUED: "true"})
        return replace(workflow, metadata=meta, status=replace(workflow.status, phase="Pending"))

    def suspend(self, job: Object, now: datetime) -> Object:
        workflow = _job(job)
        meta = with_annotations(workflow, **{k.ANNOTATION_QUEUE_SUSPEND: "true"})
        return replace(workflow, metadata=meta, status=replace(workflow.status, phase="Pending"))

    def resume(self, job: Object, now: datetime) -> Object:
        workflow = _job(job)
        meta = with_annotations(workflow, **{k.ANNOTATION_QUEUE_SUSPEND: "false"})
        status = replace(
            workflow.status, phase="Running", started_at=workflow.status.started_at or now
        )
        spec = workflow.spec
        if spec.suspend and _held_by_template(workflow):
            spec = replace(spec, suspend=False)
        return replace(workflow, metadata=meta, spec=spec, status=status)

    def observe(self, job: Object, pods: Mapping[str, Sequence[Pod]], now: datetime) -> Object:
        workflow = _job(job)
        status = workflow.status
        if self.outcome(workflow) is not None or status.phase != "Running":
            return workflow
        sets = self.pod_sets(workflow, pods)
        done = failed = 0
        for pod_set in sets:
            counts = count_replicas(pods.get(pod_set.name, ()))
            done += min(counts.succeeded, pod_set.count)
            failed += counts.failed
        new = replace(status, progress=f"{done}/{len(sets)}")
        if failed:
            new = replace(new, phase=FAILED, finished_at=now, message="child pod failed")
        elif sets and done >= len(sets):
            new = replace(new, phase=SUCCEEDED, finished_at=now)
        return workflow if new == status else replace(workflow, status=new)

    def outcome(self, job: Object) -> str | None:
        phase = _job(job).status.phase
        if phase == SUCCEEDED:
            return SUCCEEDED
        if phase in (FAILED, "Error"):
            return FAILED
        return None
