"""What the scheduler writes into a pod: its ``PodScheduled`` condition, as kube-scheduler does.

- :func:`bound_pod`: ``spec.nodeName``, ``PodScheduled=True``, the PreBind plugins' annotations
  and labels, no nomination and no diagnosis annotation;
- :func:`nominated_pod`: ``status.nominatedNodeName`` after a preemption;
- :func:`unschedulable_pod`: ``PodScheduled=False`` reason ``Unschedulable`` with the FitError
  summary, and the diagnosis annotation (:mod:`.explain`);
- :func:`permit_rejected_pod`: a pod its Permit plugin rejected while it waited (a gang
  member whose gang failed or whose wait ran out): ``PodScheduled=False`` reason
  ``Unschedulable`` with the FitError of the one node it was assumed on
  (``0/1 nodes are available: 1 <reason>.``), as kube-scheduler's binding cycle words it;
- :func:`scheduler_error_pod`: ``PodScheduled=False`` reason ``SchedulerError`` with the error
  text (an attempt that ended in status Error: a malformed annotation, a node missing what a
  plugin requires); the diagnosis annotation is dropped, as no node was judged.

A ``False`` condition keeps its ``lastTransitionTime`` while it stays ``False``; the writers
answer None when the pod already says what they would write, so nothing is written twice.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from apis.core import Pod
from apis.meta import Condition
from controller.scheduler.cycle import BindPlan
from controller.scheduler.explain import (
    DIAGNOSIS_ANNOTATION,
    diagnosis_annotation,
    fit_error_message,
    rejection_diagnosis,
)
from controller.scheduler.framework import Status

__all__ = [
    "POD_SCHEDULED",
    "SCHEDULER_ERROR",
    "UNSCHEDULABLE",
    "bound_pod",
    "nominated_pod",
    "permit_rejected_pod",
    "scheduled_condition",
    "scheduler_error_pod",
    "unschedulable_pod",
]

POD_SCHEDULED = "PodScheduled"
#: Reason of ``PodScheduled=False`` when no node fits.
UNSCHEDULABLE = "Unschedulable"
#: Reason of ``PodScheduled=False`` when the attempt failed with an error.
SCHEDULER_ERROR = "SchedulerError"


def scheduled_condition(pod: Pod) -> Condition | None:
    return next((c for c in pod.status.conditions if c.type == POD_SCHEDULED), None)


def _with_condition(pod: Pod, condition: Condition) -> tuple[Condition, ...]:
    others = tuple(c for c in pod.status.conditions if c.type != POD_SCHEDULED)
    return (*others, condition)


def bound_pod(pod: Pod, node: str, plan: BindPlan, now: datetime) -> Pod:
    """``pod`` bound to ``node``: what the default binder writes."""
    annotations = {**pod.metadata.annotations, **plan.annotations}
    annotations.pop(DIAGNOSIS_ANNOTATION, None)
    labels = {**pod.metadata.labels, **plan.labels}
    condition = Condition(type=POD_SCHEDULED, status="True", last_transition_time=now)
    return msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(pod.metadata, annotations=annotations, labels=labels),
        spec=msgspec.structs.replace(pod.spec, node_name=node),
        status=msgspec.structs.replace(
            pod.status, conditions=_with_condition(pod, condition), nominated_node_name=""
        ),
    )


def nominated_pod(pod: Pod, node: str) -> Pod:
    """``pod`` with ``status.nominatedNodeName`` set to ``node`` (after a preemption)."""
    if pod.status.nominated_node_name == node:
        return pod
    return msgspec.structs.replace(
        pod, status=msgspec.structs.replace(pod.status, nominated_node_name=node)
    )


def _not_scheduled(
    pod: Pod, reason: str, message: str, diagnosis: str | None, now: datetime
) -> Pod | None:
    """``pod`` with ``PodScheduled=False`` (``reason``, ``message``) and the diagnosis
    annotation set to ``diagnosis`` (removed for None); None when it already says so."""
    current = scheduled_condition(pod)
    annotations = pod.metadata.annotations
    same_condition = (
        current is not None
        and current.status == "False"
        and current.reason == reason
        and current.message == message
    )
    if same_condition and annotations.get(DIAGNOSIS_ANNOTATION) == diagnosis:
        return None
    since = (
        current.last_transition_time
        if current is not None and current.status == "False" and current.last_transition_time
        else now
    )
    condition = Condition(
        type=POD_SCHEDULED,
        status="False",
        reason=reason,
        message=message,
        last_probe_time=None,
        last_transition_time=since,
    )
    annotations = {k: v for k, v in annotations.items() if k != DIAGNOSIS_ANNOTATION}
    if diagnosis is not None:
        annotations[DIAGNOSIS_ANNOTATION] = diagnosis
    return msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(pod.metadata, annotations=annotations),
        status=msgspec.structs.replace(pod.status, conditions=_with_condition(pod, condition)),
    )


def unschedulable_pod(pod: Pod, message: str, diagnosis: str, now: datetime) -> Pod | None:
    """``pod`` with ``PodScheduled=False`` and the diagnosis; None when it already says so."""
    return _not_scheduled(pod, UNSCHEDULABLE, message, diagnosis, now)


def scheduler_error_pod(pod: Pod, message: str, now: datetime) -> Pod | None:
    """``pod`` with ``PodScheduled=False`` reason ``SchedulerError`` and ``message``; None
    when it already says so."""
    return _not_scheduled(pod, SCHEDULER_ERROR, message, None, now)


def permit_rejected_pod(pod: Pod, status: Status, now: datetime) -> tuple[str, Pod | None]:
    """The message for a pod rejected with ``status`` while it waited in Permit, and ``pod``
    with ``PodScheduled=False`` saying so (None when it already does)."""
    diagnosis = rejection_diagnosis(status)
    message = fit_error_message(diagnosis)
    return message, unschedulable_pod(pod, message, diagnosis_annotation(diagnosis), now)
