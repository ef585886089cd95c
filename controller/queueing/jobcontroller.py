"""The ``jobs`` control loop: job kinds -> QueueUnits, and admitted jobs run (queue-spec §4, §9).

For every job of a kind in :data:`~controller.queueing.jobs.EXTENSIONS` (the job's own
controller too, since ``koordpy up``/``simulate`` have no Kubernetes):

1. **Enqueue.** A new held job (:meth:`JobAdapter.is_managed`) gets its QueueUnit, phase
   ``Enqueued``: the adapter's name, an owner reference to the job, the job's labels and
   annotations, ``spec.consumerRef``, ``spec.priority`` (the named PriorityClass object's
   value, else Koordinator's built-in class value, else the template's ``priority``, else 0;
   a job naming no class takes the ``globalDefault`` class if there is one), ``spec.podSet``
   (limits copied to requests where a container has none), ``spec.resource`` and
   ``spec.request`` (the total), ``spec.active: false`` for ``scheduling.x-k8s.io/active:
   "false"`` and ``spec.maximumExecutionTimeSeconds`` from
   ``scheduling.x-k8s.io/max-exec-time-seconds``. A job that is not held gets no unit.
2. **Follow the job.** Pod set counts that change are written to ``spec.podSet`` (and to
   ``spec.resource``/``spec.request`` unless the unit is ``Running``); the two annotations
   above are synced (``active`` only ever set to false by the annotation).
3. **Run.** While the unit is ``Dequeued``, ``SchedSucceed`` or ``Running`` the job is
   resumed and has one pod per replica (a batch Job: ``count`` interchangeable pods,
   finished ones counting toward completion), made from its templates with the
   ``podSetUpdates`` of the unit's admission checks applied, owned by the job, and labelled
   with the job's quota labels and ``alibabacloud.com/schedule-admission`` (a batch Job's
   pods also with ``job-name``, ``controller-uid``, their ``batch.kubernetes.io/`` forms and,
   for an ``Indexed`` job, ``batch.kubernetes.io/job-completion-index``). Replica-level
   admission: per pod set, bound unfinished pods count against ``admissions[].replicas`` and
   the rest of it goes to unbound pods, those already ungated first, then by replica index;
   every other unbound pod is gated ``"false"``. Bound pods are never touched. Pods beyond
   a lowered count are deleted (unbound ones first for a batch Job).
4. **Report.** ``admissions[].running`` = bound unfinished pods of the pod set; a pending
   ``reclaimState.replicas = n`` (queue preemption) gives back up to ``n`` replicas whose pods
   are unbound and is cleared (those pods are gated again); replicas are raised to the bound
   count when more are bound; a pod set whose count fell below its replicas keeps
   ``max(count, live pods)`` (finished and deleted pods release their quota, Example F);
   ``status.podState``. The unit becomes ``Running`` as soon as one of its pods is bound and
   in phase Running.
5. **Finish.** When the job's status says it ended: phase ``Succeed``/``Failed`` and
   ``admissions`` emptied (the quota is released), unfinished pods deleted. A batch Job's
   pods, suspensions and end are recorded as Events the way Kubernetes' Job controller
   records them (:func:`batch_job_events`).
6. **Evicted.** A unit back in ``Enqueued``/``TimeoutBackoff``/``SchedFailed`` (or the legacy
   ``Preempted``, which is then set ``Enqueued``) suspends a running job and deletes its
   unfinished pods. ``runningTimeout`` (per extension, 0 = off): a ``Dequeued`` unit whose job
   has no running pod that long after ``lastUpdateTime`` goes to ``TimeoutBackoff`` with its
   admissions cleared, and after ``backoffTimeout`` back to ``Enqueued`` (with
   ``exponentialBackoff``: at ``status.requeueState.requeueAt``, 10 s doubling to 15 min,
   ±10 %; the state is cleared when the unit reaches ``Running``).
7. **Delete.** A deleted job's QueueUnit and pods are deleted.

On Kubernetes (``JobController(own_pods=False)``) the job kinds' own controllers run: the
loop keeps every unit write and the job's ``suspend`` (3, 5, 6), and leaves the pods, the job's
status and the Events about them to those controllers (so replica-level admission, which
gates pods, is theirs too: a released job runs all its pods).

A pass looks only at jobs whose object, QueueUnit or pods changed since the last pass (each
compared by identity with what the last pass saw) or whose timer is due, so an idle pass
costs a few identity checks. A pass's writes go out in one batch (:class:`Outbox`); the
loop's snapshots show them (jobs, units, pods) until the store does, so a job is never planned
twice from the state before its writes. A plan's Events are recorded once its writes' results
are in (none when one failed: the job is looked at again after :data:`RETRY_SECONDS`). The
loop returns the seconds until the next timer.
"""

from __future__ import annotations

import functools
import heapq
import logging
import random
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec

from apis import constants as k
from apis import qos
from apis.core import Job, Pod, PodStatus, PriorityClass
from apis.kinds import Registry
from apis.meta import Condition, Object, ObjectMeta, ObjectReference, OwnerReference
from apis.queueing import (
    Admission,
    PodSet,
    PodSetUpdate,
    PodState,
    QueueUnit,
    QueueUnitSpec,
    QueueUnitStatus,
    ReclaimState,
)
from controller.errors import NotFound, StoreError
from controller.events import NORMAL, WARNING, EventRecorder
from controller.queueing import phases
from controller.queueing.admissionchecks import next_requeue_state
from controller.queueing.jobs import EXTENSIONS, JobAdapter
from controller.queueing.jobs.base import (
    FAILED,
    ExtensionArgs,
    positive_int_annotation,
    requests_from_limits,
    total_request,
)
from controller.queueing.jobs.batchjob import BatchJobAdapter
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster, Result, Write
from controller.store.snapshots import Snapshot

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = [
    "RUN_PHASES",
    "JobController",
    "JobPlan",
    "batch_job_events",
    "batch_job_labels",
    "gate_pods",
    "held_by_queue",
    "make_pod",
    "new_unit",
    "plan_job",
    "resolve_priority",
]

log = logging.getLogger(__name__)

replace = msgspec.structs.replace

#: Phases in which an admitted job runs.
RUN_PHASES: Final = frozenset({phases.DEQUEUED, phases.SCHED_SUCCEED, phases.RUNNING})
#: Phases in which a job is held (suspended, no unfinished pods).
HELD_PHASES: Final = frozenset(
    {phases.ENQUEUED, "", phases.TIMEOUT_BACKOFF, phases.SCHED_FAILED, phases.PREEMPTED}
)
#: The ``source.component`` of the Events about the batch Jobs this loop runs.
JOB_CONTROLLER: Final = "job-controller"
MSG_ENQUEUED: Final = "Enqueued"
MSG_RUNNING: Final = "Job is running"
MSG_SUCCEEDED: Final = "Job succeeded"
MSG_FAILED: Final = "Job failed"
MSG_RUNNING_TIMEOUT: Final = "Backoff due to running timeout"
MSG_BACKOFF_DONE: Final = "Enqueued because backoff timeout"
MSG_PREEMPTED: Final = "Enqueued after preempted"
#: Job labels copied onto the pods (the quota the scheduler charges them to).
QUOTA_LABELS: Final = (
    k.LABEL_QUOTA_NAME,
    k.LABEL_QUOTA_NAME_ALIBABACLOUD,
    k.LABEL_QUOTA_NAME_TREE,
    k.LABEL_QUOTA_PREEMPTIBLE,
    k.LABEL_PREEMPTIBLE_ALIBABACLOUD,
)
#: The labels a batch/v1 Job's pods carry (and the annotation of an Indexed job's index).
LABEL_BATCH_JOB_NAME: Final = "batch.kubernetes.io/job-name"
LABEL_BATCH_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
LABEL_LEGACY_JOB_NAME: Final = "job-name"
LABEL_LEGACY_CONTROLLER_UID: Final = "controller-uid"
LABEL_BATCH_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
#: Seconds before a job whose write failed is looked at again.
RETRY_SECONDS: Final = 1.0

JobKey = tuple[str, str, str]  # extension, namespace, name
PriorityResolver = Callable[[str, "int | None"], int]

_INVALID_NAME = re.compile(r"[^a-z0-9-]+")
_BATCH: Final = BatchJobAdapter()


# --- pure pieces ----------------------------------------------------------------------------------


def resolve_priority(
    class_name: str, template_priority: int | None, classes: Mapping[str, PriorityClass]
) -> int:
    """A unit's priority (see the module docstring, step 1)."""
    if class_name:
        found = classes.get(class_name)
        if found is not None:
            return found.value
        try:
            builtin = qos.PriorityClass(class_name)
        except ValueError:
            builtin = qos.PriorityClass.NONE
        if builtin is not qos.PriorityClass.NONE:
            return builtin.default_value
        return template_priority if template_priority is not None else 0
    if template_priority is not None:
        return template_priority
    default = next((c for c in classes.values() if c.global_default), None)
    return default.value if default is not None else 0


def _pod_set_of(pod: Pod) -> str:
    return pod.metadata.annotations.get(k.ANNOTATION_RELATED_PODSET_NAME, "")


def _index_of(pod: Pod) -> int:
    try:
        return int(pod.metadata.labels.get(k.LABEL_JOB_REPLICA_INDEX, "-1"))
    except ValueError:
        return -1


def _live(pod: Pod) -> bool:
    return not pod.is_terminated and pod.metadata.deletion_timestamp is None


def _group(pods: Sequence[Pod]) -> dict[str, list[Pod]]:
    grouped: dict[str, list[Pod]] = {}
    for pod in pods:
        grouped.setdefault(_pod_set_of(pod), []).append(pod)
    for members in grouped.values():
        members.sort(key=lambda p: (_index_of(p), p.metadata.name))
    return grouped


def _unit_pod_sets(sets: Sequence[PodSet]) -> tuple[PodSet, ...]:
    return tuple(replace(s, template=requests_from_limits(s.template)) for s in sets)


def _deactivated(job: Object) -> bool:
    return job.metadata.annotations.get(k.ANNOTATION_QUEUE_ACTIVE) == "false"


def _owner_reference(job: Object) -> OwnerReference:
    return OwnerReference(
        api_version=job.api_version,
        kind=job.kind,
        name=job.metadata.name,
        uid=job.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def _owned_by(obj: Object, job: Object) -> bool:
    return any(
        ref.uid == job.metadata.uid and ref.controller for ref in obj.metadata.owner_references
    )


def _with_phase(
    unit: QueueUnit,
    phase: str,
    message: str,
    now: datetime,
    *,
    evicted_reason: str = "",
    admissions: tuple[Admission, ...] | None = None,
) -> QueueUnit:
    status = unit.status
    return replace(
        unit,
        status=replace(
            status,
            phase=phase,
            message=message,
            last_update_time=now,
            admissions=status.admissions if admissions is None else admissions,
            conditions=phases.mirrored_conditions(
                status.conditions, phase, now, message=message, evicted_reason=evicted_reason
            ),
        ),
    )


def new_unit(
    adapter: JobAdapter,
    job: Object,
    sets: Sequence[PodSet],
    priority: int,
    class_name: str,
    now: datetime,
) -> QueueUnit:
    """The QueueUnit of a newly held job (module docstring, step 1)."""
    total = total_request(sets)
    meta = job.metadata
    return QueueUnit(
        metadata=ObjectMeta(
            name=adapter.unit_name(job),
            namespace=meta.namespace,
            labels=dict(meta.labels),
            annotations=dict(meta.annotations),
            owner_references=(_owner_reference(job),),
        ),
        spec=QueueUnitSpec(
            consumer_ref=ObjectReference(
                api_version=job.api_version,
                kind=job.kind,
                namespace=meta.namespace,
                name=meta.name,
                uid=meta.uid,
            ),
            priority=priority,
            priority_class_name=class_name,
            pod_set=_unit_pod_sets(sets),
            resource=total,
            request=total,
            active=False if _deactivated(job) else None,
            maximum_execution_time_seconds=positive_int_annotation(
                job, k.ANNOTATION_QUEUE_MAX_EXEC_TIME_SECONDS
            ),
        ),
        status=QueueUnitStatus(
            phase=phases.ENQUEUED,
            message=MSG_ENQUEUED,
            last_update_time=now,
            conditions=phases.mirrored_conditions((), phases.ENQUEUED, now, message=MSG_ENQUEUED),
        ),
    )


def _synced_spec(unit: QueueUnit, job: Object, sets: Sequence[PodSet]) -> QueueUnit:
    spec = unit.spec
    counts = [(s.name, s.count, s.min_count) for s in sets]
    have = [(s.name, s.count, s.min_count) for s in spec.pod_set]
    if counts != have:
        pod_set = _unit_pod_sets(sets)
        spec = replace(spec, pod_set=pod_set)
        if unit.status.phase != phases.RUNNING:
            total = total_request(pod_set)
            spec = replace(spec, resource=total, request=total)
    if _deactivated(job) and spec.active is not False:
        spec = replace(spec, active=False)
    exec_seconds = positive_int_annotation(job, k.ANNOTATION_QUEUE_MAX_EXEC_TIME_SECONDS)
    if exec_seconds is not None and exec_seconds != spec.maximum_execution_time_seconds:
        spec = replace(spec, maximum_execution_time_seconds=exec_seconds)
    return unit if spec is unit.spec else replace(unit, spec=spec)


def _pod_name(job: Object, adapter: JobAdapter, pod_set: str, index: int) -> str:
    if adapter.fungible:
        return f"{job.metadata.name}-{index}"
    role = _INVALID_NAME.sub("-", pod_set.lower()).strip("-") or "pod"
    return f"{job.metadata.name}-{role}-{index}"


def _updates_for(unit: QueueUnit, pod_set: str) -> list[PodSetUpdate]:
    return [
        update
        for check in unit.status.admission_checks
        for update in check.pod_set_updates
        if update.name == pod_set
    ]


def batch_job_labels(job: Object, index: int) -> dict[str, str]:
    """The labels Kubernetes' Job controller gives a ``batch/v1`` Job's pods (none for others);
    an ``Indexed`` job's pods also carry their completion index. Shared with the standalone
    Job controller (:mod:`controller.workloads.job`), which runs the Jobs the queue does not
    hold (:func:`held_by_queue`)."""
    if not isinstance(job, Job):
        return {}
    name, uid = job.metadata.name, job.metadata.uid
    labels = {
        LABEL_BATCH_CONTROLLER_UID: uid,
        LABEL_BATCH_JOB_NAME: name,
        LABEL_LEGACY_CONTROLLER_UID: uid,
        LABEL_LEGACY_JOB_NAME: name,
    }
    if job.spec.completion_mode == "Indexed":
        labels[LABEL_BATCH_COMPLETION_INDEX] = str(index)
    return labels


def held_by_queue(job: Job, queued: Collection[str]) -> bool:
    """Whether the queue path owns ``job`` (``queued``: the uids of the jobs a QueueUnit is
    controlled by): from the moment it is held (created ``suspend: true``, never started) and
    for as long as a QueueUnit of it exists. Every other batch Job is run by the standalone
    Job controller (:mod:`controller.workloads.job`); one that was started there and is
    suspended later keeps its ``startTime``, so it never becomes the queue's."""
    return job.metadata.uid in queued or _BATCH.is_managed(job)


def make_pod(
    adapter: JobAdapter,
    job: Object,
    unit: QueueUnit,
    pod_set: PodSet,
    index: int,
) -> Pod:
    """A pod of ``pod_set`` (gated ``"false"``; :func:`gate_pods` opens it)."""
    template = pod_set.template
    labels = dict(template.metadata.labels)
    annotations = dict(template.metadata.annotations)
    spec = template.spec
    node_selector = dict(spec.node_selector)
    tolerations = list(spec.tolerations)
    for update in _updates_for(unit, pod_set.name):
        labels.update(update.labels)
        annotations.update(update.annotations)
        node_selector.update(update.node_selector)
        tolerations.extend(update.tolerations)
    for key in QUOTA_LABELS:
        value = job.metadata.labels.get(key)
        if value is not None:
            labels[key] = value
    labels.update(batch_job_labels(job, index))
    labels[k.LABEL_JOB_REPLICA_INDEX] = str(index)
    labels[k.LABEL_SCHEDULE_ADMISSION] = "false"
    annotations[k.ANNOTATION_RELATED_QUEUEUNIT] = f"{unit.metadata.namespace}/{unit.metadata.name}"
    annotations[k.ANNOTATION_RELATED_PODSET_NAME] = pod_set.name
    if isinstance(job, Job) and job.spec.completion_mode == "Indexed":
        annotations[LABEL_BATCH_COMPLETION_INDEX] = str(index)
    return Pod(
        metadata=ObjectMeta(
            name=_pod_name(job, adapter, pod_set.name, index),
            namespace=job.metadata.namespace,
            labels=labels,
            annotations=annotations,
            owner_references=(_owner_reference(job),),
        ),
        spec=replace(spec, node_selector=node_selector, tolerations=tuple(tolerations)),
        status=PodStatus(phase="Pending"),
    )


def gate_pods(pods: Sequence[Pod], replicas: int) -> list[Pod]:
    """The live pods of one pod set with their admission labels set (changed ones only).

    Bound pods take ``replicas`` first and are never changed; the rest of ``replicas`` goes to
    unbound pods, those already ``"true"`` first, then by replica index.
    """
    bound = sum(1 for p in pods if p.spec.node_name)
    room = max(0, replicas - bound)
    unbound = [p for p in pods if not p.spec.node_name]
    unbound.sort(
        key=lambda p: (
            p.metadata.labels.get(k.LABEL_SCHEDULE_ADMISSION) != "true",
            _index_of(p),
            p.metadata.name,
        )
    )
    changed: list[Pod] = []
    for position, pod in enumerate(unbound):
        want = "true" if position < room else "false"
        if pod.metadata.labels.get(k.LABEL_SCHEDULE_ADMISSION) != want:
            labels = {**pod.metadata.labels, k.LABEL_SCHEDULE_ADMISSION: want}
            changed.append(replace(pod, metadata=replace(pod.metadata, labels=labels)))
    return changed


@dataclass(slots=True)
class JobPlan:
    """The writes one job needs (all empty: nothing to do)."""

    job: Object | None = None
    create_unit: QueueUnit | None = None
    unit: QueueUnit | None = None
    delete_unit: QueueUnit | None = None
    create_pods: list[Pod] = field(default_factory=list)
    update_pods: list[Pod] = field(default_factory=list)
    delete_pods: list[Pod] = field(default_factory=list)
    #: When the job wants to be looked at again (a timeout).
    wake_at: datetime | None = None
    #: ``(object, type, reason, message)`` Events to record once the writes went through.
    events: list[tuple[Object, str, str, str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.job
            or self.create_unit
            or self.unit
            or self.delete_unit
            or self.create_pods
            or self.update_pods
            or self.delete_pods
        )


def _run(
    plan: JobPlan,
    adapter: JobAdapter,
    job: Object,
    unit: QueueUnit,
    sets: Sequence[PodSet],
    grouped: Mapping[str, list[Pod]],
    now: datetime,
) -> tuple[Object, QueueUnit]:
    """Resume, create/delete/gate pods and report admissions (module docstring, 3-4)."""
    if adapter.is_suspended(job):
        job = adapter.resume(job, now)
    by_name = {a.name: a for a in unit.status.admissions}
    admissions: list[Admission] = []
    bound_total = pending_total = 0
    any_running = False
    wanted = {s.name for s in sets}
    for pod_set in sets:
        existing = grouped.get(pod_set.name, [])
        live = [p for p in existing if _live(p)]
        doomed: list[Pod] = []
        if adapter.fungible:
            extra = len(live) - pod_set.count
            if extra > 0:
                order = sorted(live, key=lambda p: (bool(p.spec.node_name), -_index_of(p)))
                doomed = order[:extra]
        else:
            doomed = [p for p in live if _index_of(p) >= pod_set.count]
        if doomed:
            gone = {id(p) for p in doomed}
            live = [p for p in live if id(p) not in gone]
            plan.delete_pods.extend(doomed)
        created: list[Pod] = []
        if adapter.fungible:
            used = {_index_of(p) for p in existing}
            index = 0
            while len(live) + len(created) < pod_set.count:
                while index in used:
                    index += 1
                used.add(index)
                created.append(make_pod(adapter, job, unit, pod_set, index))
        else:
            present = {_index_of(p) for p in existing}
            created = [
                make_pod(adapter, job, unit, pod_set, i)
                for i in range(pod_set.count)
                if i not in present
            ]
        bound = sum(1 for p in live if p.spec.node_name)
        bound_total += bound
        pending_total += len(live) + len(created) - bound
        any_running = any_running or any(
            p.spec.node_name and p.status.phase == "Running" for p in live
        )
        admission = by_name.get(pod_set.name)
        replicas = 0
        if admission is not None:
            replicas = admission.replicas
            reclaim = admission.reclaim_state
            if isinstance(reclaim, ReclaimState) and reclaim.replicas > 0:
                unbound = len(live) + len(created) - bound
                replicas -= min(reclaim.replicas, unbound)
                reclaim = msgspec.UNSET
            replicas = max(replicas, bound)
            if pod_set.count < replicas:
                replicas = max(pod_set.count, len(live) + len(created))
            updated = replace(admission, replicas=replicas, running=bound, reclaim_state=reclaim)
            admissions.append(updated)
        gated = gate_pods([*live, *created], replicas)
        opened = {p.metadata.name: p for p in gated}
        plan.create_pods.extend(opened.pop(p.metadata.name, p) for p in created)
        plan.update_pods.extend(opened.values())
    # Admissions of pod sets the job no longer has are kept as they are (the engine's).
    admissions.extend(a for a in unit.status.admissions if a.name not in wanted)
    status = replace(
        unit.status,
        admissions=tuple(admissions),
        pod_state=PodState(running=bound_total, pending=pending_total),
    )
    unit = replace(unit, status=status)
    if any_running and unit.status.phase != phases.RUNNING:
        unit = _with_phase(unit, phases.RUNNING, MSG_RUNNING, now)
        if unit.status.requeue_state is not None:
            unit = replace(unit, status=replace(unit.status, requeue_state=None))
    return job, unit


def _hold(
    plan: JobPlan, adapter: JobAdapter, job: Object, pods: Sequence[Pod], now: datetime
) -> Object:
    """Suspend a job that runs and delete its unfinished pods."""
    if not adapter.is_suspended(job):
        job = adapter.suspend(job, now)
    plan.delete_pods.extend(p for p in pods if _live(p))
    return job


def plan_job(
    adapter: JobAdapter,
    args: ExtensionArgs,
    job: Object | None,
    unit: QueueUnit | None,
    pods: Sequence[Pod],
    now: datetime,
    priority: PriorityResolver,
    *,
    last_job: Object | None = None,
    own_pods: bool = True,
) -> JobPlan:
    """What one job needs, from its current objects (pure; the module docstring's rules).

    ``job`` None (or being deleted): the job is gone; ``last_job`` is how it was last seen.
    ``own_pods`` false: the job kind's own controller (Kubernetes' Job controller, the
    training operator...) makes and deletes the job's pods and writes its status, so the plan
    holds neither pod writes, nor the job's status, nor the Events that controller records:
    only the unit's writes and the job's ``suspend`` (or its kind's equivalent) and metadata.
    """
    plan = _plan_job(
        adapter, args, job, unit, pods, now, priority, last_job=last_job, own_pods=own_pods
    )
    if own_pods:
        return plan
    plan.create_pods.clear()
    plan.update_pods.clear()
    plan.delete_pods.clear()
    plan.events.clear()
    if plan.job is not None and job is not None and hasattr(job, "status"):
        plan.job = msgspec.structs.replace(plan.job, status=job.status)
        if plan.job == job:
            plan.job = None
    return plan


def _plan_job(
    adapter: JobAdapter,
    args: ExtensionArgs,
    job: Object | None,
    unit: QueueUnit | None,
    pods: Sequence[Pod],
    now: datetime,
    priority: PriorityResolver,
    *,
    last_job: Object | None,
    own_pods: bool,
) -> JobPlan:
    plan = JobPlan()
    if job is None or job.metadata.deletion_timestamp is not None:
        gone = job or last_job
        if unit is not None and (gone is None or _owned_by(unit, gone)):
            plan.delete_unit = unit
        plan.delete_pods.extend(p for p in pods if p.metadata.deletion_timestamp is None)
        return plan
    if unit is None:
        if adapter.outcome(job) is not None or not adapter.is_managed(job):
            return plan
        stamped = adapter.enqueued(job, f"{job.metadata.namespace}/{adapter.unit_name(job)}", now)
        sets = adapter.pod_sets(stamped, {})
        class_name, template_priority = adapter.priority_source(stamped)
        plan.create_unit = new_unit(
            adapter, job, sets, priority(class_name, template_priority), class_name, now
        )
        if stamped != job:
            plan.job = stamped
        return plan
    if not _owned_by(unit, job):
        log.warning(
            "QueueUnit %s/%s is not owned by %s %s; leaving it alone",
            unit.metadata.namespace,
            unit.metadata.name,
            job.kind,
            job.metadata.name,
        )
        return plan
    grouped = _group(pods)
    current = adapter.observe(job, grouped, now) if own_pods else job
    sets = adapter.pod_sets(current, grouped)
    new = _synced_spec(unit, current, sets)
    phase = new.status.phase
    outcome = adapter.outcome(current)
    if outcome is not None:
        if not phases.is_finished(new):
            final = phases.FAILED if outcome == FAILED else phases.SUCCEED
            message = MSG_FAILED if outcome == FAILED else MSG_SUCCEEDED
            new = _with_phase(new, final, message, now, admissions=())
        plan.delete_pods.extend(p for p in pods if _live(p))
    elif phases.is_finished(new):
        pass
    elif phase in RUN_PHASES:
        timeout = args.running_timeout_seconds
        since = new.status.last_update_time
        if phase == phases.DEQUEUED and timeout > 0 and since is not None:
            due = since + timedelta(seconds=timeout)
            if now >= due and not _any_running(pods):
                new = _with_phase(
                    new,
                    phases.TIMEOUT_BACKOFF,
                    MSG_RUNNING_TIMEOUT,
                    now,
                    evicted_reason=phases.EVICTED_BACKOFF,
                    admissions=(),
                )
                if args.exponential_backoff:
                    new = _with_requeue_state(new, now)
                current = _hold(plan, adapter, current, pods, now)
                plan.wake_at = _backoff_end(new, args, now)
                return _finish(plan, job, current, unit, new)
            if now < due:
                plan.wake_at = due
        current, new = _run(plan, adapter, current, new, sets, grouped, now)
        if own_pods and (plan.create_pods or plan.delete_pods):
            # The job's status as its controller will see it once these writes land.
            deleted = {p.metadata.name for p in plan.delete_pods}
            after = [p for p in pods if p.metadata.name not in deleted]
            current = adapter.observe(current, _group([*after, *plan.create_pods]), now)
    elif phase in HELD_PHASES:
        current = _hold(plan, adapter, current, pods, now)
        if phase == phases.PREEMPTED:
            new = _with_phase(
                new,
                phases.ENQUEUED,
                MSG_PREEMPTED,
                now,
                evicted_reason=phases.EVICTED_PREEMPTED,
                admissions=(),
            )
        elif phase == phases.TIMEOUT_BACKOFF:
            due = _backoff_end(new, args, new.status.last_update_time or now)
            if now >= due:
                new = _with_phase(
                    new,
                    phases.ENQUEUED,
                    MSG_BACKOFF_DONE,
                    now,
                    evicted_reason=phases.EVICTED_BACKOFF,
                    admissions=(),
                )
            else:
                plan.wake_at = due
    return _finish(plan, job, current, unit, new)


def _with_requeue_state(unit: QueueUnit, now: datetime) -> QueueUnit:
    """One more backoff attempt in ``status.requeueState`` (jitter seeded by unit and attempt,
    so a simulation is reproducible)."""
    current = unit.status.requeue_state
    attempt = (current.count or 0) + 1 if current is not None else 1
    rand = random.Random(f"{unit.metadata.uid}/{attempt}").random
    state = next_requeue_state(current, now, rand)
    return replace(unit, status=replace(unit.status, requeue_state=state))


def _backoff_end(unit: QueueUnit, args: ExtensionArgs, since: datetime) -> datetime:
    """When a unit in ``TimeoutBackoff`` since ``since`` goes back to ``Enqueued``."""
    state = unit.status.requeue_state
    if args.exponential_backoff and state is not None and state.requeue_at is not None:
        return state.requeue_at
    return since + timedelta(seconds=args.backoff_timeout_seconds)


def _any_running(pods: Sequence[Pod]) -> bool:
    return any(p.spec.node_name and p.status.phase == "Running" for p in pods)


def _finish(
    plan: JobPlan, job: Object, current: Object, unit: QueueUnit, new: QueueUnit
) -> JobPlan:
    if current != job:
        plan.job = current
    if new != unit:
        plan.unit = new
    plan.events.extend(batch_job_events(job, plan))
    return plan


def _true(job: Job, type_: str) -> Condition | None:
    return next((c for c in job.status.conditions if c.type == type_ and c.status == "True"), None)


def batch_job_events(job: Object, plan: JobPlan) -> list[tuple[Object, str, str, str]]:
    """The Events Kubernetes' Job controller records about a batch/v1 Job the queue runs, for
    the writes of ``plan`` (none for other kinds): ``SuccessfulCreate`` "Created pod: <name>",
    ``SuccessfulDelete`` "Deleted pod: <name>", ``Suspended``/``Resumed`` when the
    ``Suspended`` condition flips, and when the Job ends ``Completed`` "Job completed" or a
    Warning with the failure's reason and message; as the standalone Job controller records
    them (:mod:`controller.workloads.job`)."""
    if not isinstance(job, Job):
        return []
    events: list[tuple[Object, str, str, str]] = [
        (job, NORMAL, "SuccessfulCreate", f"Created pod: {p.metadata.name}")
        for p in plan.create_pods
    ]
    events.extend(
        (job, NORMAL, "SuccessfulDelete", f"Deleted pod: {p.metadata.name}")
        for p in plan.delete_pods
    )
    after = plan.job
    if not isinstance(after, Job):
        return events
    before = _true(job, "Suspended") is not None
    suspended = _true(after, "Suspended") is not None
    if suspended and not before:
        events.append((after, NORMAL, "Suspended", "Job suspended"))
    elif before and not suspended:
        events.append((after, NORMAL, "Resumed", "Job resumed"))
    if _true(job, "Complete") is None and _true(after, "Complete") is not None:
        events.append((after, NORMAL, "Completed", "Job completed"))
    failed = _true(after, "Failed")
    if _true(job, "Failed") is None and failed is not None:
        events.append((after, WARNING, failed.reason, failed.message))
    return events


# --- the loop -------------------------------------------------------------------------------------


class JobController:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "jobs"

    def __init__(
        self,
        extensions: Mapping[str, JobAdapter] | None = None,
        *,
        args: Mapping[str, ExtensionArgs] | None = None,
        own_pods: bool = True,
    ) -> None:
        #: whether this loop is also the job kinds' own controller (see :func:`plan_job`):
        #: ``koordpy up`` and ``simulate``; not on Kubernetes, where those controllers run.
        self.own_pods = own_pods
        self._adapters = dict(EXTENSIONS if extensions is None else extensions)
        given = dict(args or {})
        unknown = sorted(set(given) - set(self._adapters))
        if unknown:
            raise ValueError(f"args for unknown job extensions: {', '.join(unknown)}")
        self._args: dict[str, ExtensionArgs] = {}
        for name, adapter in self._adapters.items():
            value = given.get(name) or adapter.args_type()
            if not isinstance(value, adapter.args_type):
                raise TypeError(
                    f"args of extension {name!r} must be {adapter.args_type.__name__},"
                    f" got {type(value).__name__}"
                )
            self._args[name] = value
        self._store: Cluster | None = None
        self._recorder: EventRecorder | None = None
        self._reset()

    def _reset(self, registry: Registry | None = None) -> None:
        #: the writes sent: jobs, units and pods are shown as written until the store does
        self._outbox = Outbox(
            kinds=()
            if registry is None
            else (
                *(registry.for_type(adapter.kind) for adapter in self._adapters.values()),
                registry.for_type(QueueUnit),
                registry.for_type(Pod),
            )
        )
        self._job_views: dict[str, Sequence[Object]] = {}
        #: job key -> the job object last seen.
        self._jobs: dict[JobKey, Object] = {}
        #: job key -> the job last seen, for jobs forgotten after a failed write (so a job
        #: deleted before it is planned again still finds its unit and pods).
        self._forgotten: dict[JobKey, Object] = {}
        #: job uid -> job key.
        self._uid_key: dict[str, JobKey] = {}
        self._unit_view: Sequence[Object] | None = None
        #: (namespace, name) -> the QueueUnit last seen.
        self._units: dict[tuple[str, str], QueueUnit] = {}
        self._pod_view: Sequence[Object] | None = None
        #: pod id (:func:`_pod_id`) -> (the pod last seen, its owner's uid).
        self._pods: dict[str, tuple[Pod, str]] = {}
        #: owner uid -> pod id -> pod.
        self._owned: dict[str, dict[str, Pod]] = {}
        #: (at, job key) timers; stale entries are skipped.
        self._timers: list[tuple[datetime, JobKey]] = []
        self._due: dict[JobKey, datetime] = {}

    # -- change detection ---------------------------------------------------------------------

    def _changed_jobs(self, snapshot: Snapshot, store: Cluster, dirty: set[JobKey]) -> None:
        for name, adapter in self._adapters.items():
            view = snapshot.objects(store.registry.for_type(adapter.kind))
            if self._job_views.get(name) is view:
                continue
            self._job_views[name] = view
            seen: set[JobKey] = set()
            for job in view:
                key = (name, job.metadata.namespace, job.metadata.name)
                seen.add(key)
                if self._jobs.get(key) is not job:
                    dirty.add(key)
            for known in (self._jobs, self._forgotten):
                dirty.update(key for key in known if key[0] == name and key not in seen)

    def _changed_units(self, snapshot: Snapshot, store: Cluster, dirty: set[JobKey]) -> None:
        view = snapshot.objects(store.registry.for_type(QueueUnit))
        if view is self._unit_view:
            return
        self._unit_view = view
        seen: set[tuple[str, str]] = set()
        for obj in view:
            unit = obj if isinstance(obj, QueueUnit) else None
            if unit is None:
                continue
            key = (unit.metadata.namespace, unit.metadata.name)
            seen.add(key)
            if self._units.get(key) is not unit:
                self._units[key] = unit
                self._mark_owner(unit, dirty)
        for key in [k_ for k_ in self._units if k_ not in seen]:
            self._mark_owner(self._units.pop(key), dirty)

    def _mark_owner(self, obj: Object, dirty: set[JobKey]) -> None:
        for ref in obj.metadata.owner_references:
            if ref.controller:
                key = self._uid_key.get(ref.uid)
                if key is not None:
                    dirty.add(key)

    def _changed_pods(self, snapshot: Snapshot, store: Cluster, dirty: set[JobKey]) -> None:
        """Track the owned pods changed since the last pass (every pod when the snapshot no
        longer knows which), marking their owners dirty."""
        kind = store.registry.for_type(Pod)
        view = snapshot.objects(kind)
        if view is self._pod_view:
            return
        since, self._pod_view = self._pod_view, view
        changes = snapshot.changes(kind, since) if since is not None else None
        if changes is None:  # every pod: whatever is not among them is gone
            changes = [(None, obj) for obj in view]
            gone = list(self._pods)
        else:
            gone = [_pod_id(b) for b, _ in changes if isinstance(b, Pod)]
        seen: set[str] = set()
        for _, obj in changes:
            pod = obj if isinstance(obj, Pod) else None
            if pod is None or not pod.metadata.owner_references:
                continue
            uid = _pod_id(pod)
            before = self._pods.get(uid)
            seen.add(uid)
            if before is not None and before[0] is pod:
                continue
            owner = next((r.uid for r in pod.metadata.owner_references if r.controller), "")
            if not owner:
                continue
            self._pods[uid] = (pod, owner)
            self._owned.setdefault(owner, {})[uid] = pod
            key = self._uid_key.get(owner)
            if key is not None:
                dirty.add(key)
        for uid in gone:
            if uid in seen or uid not in self._pods:
                continue
            _, owner = self._pods.pop(uid)
            owned = self._owned.get(owner)
            if owned is not None:
                owned.pop(uid, None)
                if not owned:
                    del self._owned[owner]
            key = self._uid_key.get(owner)
            if key is not None:
                dirty.add(key)

    def _due_timers(self, now: datetime, dirty: set[JobKey]) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            at, key = heapq.heappop(timers)
            if self._due.get(key) == at:
                del self._due[key]
                dirty.add(key)

    def _set_timer(self, key: JobKey, at: datetime | None) -> None:
        if at is None:
            self._due.pop(key, None)
            return
        if self._due.get(key) == at:
            return
        self._due[key] = at
        heapq.heappush(self._timers, (at, key))

    # -- the pass -----------------------------------------------------------------------------

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._recorder = EventRecorder(store, component=JOB_CONTROLLER, clock=ctx.now)
            self._reset(store.registry)
        now = ctx.now()
        # results that arrived first, then what this loop wrote and the store does not show yet
        snapshot = self._outbox.over(store.snapshot())
        dirty: set[JobKey] = set()
        self._changed_jobs(snapshot, store, dirty)
        self._changed_units(snapshot, store, dirty)
        self._changed_pods(snapshot, store, dirty)
        self._due_timers(now, dirty)
        if dirty:
            self._reconcile_jobs(store, snapshot, sorted(dirty), now)
        if not self._due:
            return None
        return max(0.0, (min(self._due.values()) - now).total_seconds())

    def _priority_resolver(self, snapshot: Snapshot, store: Cluster) -> PriorityResolver:
        kind = store.registry.for_type(PriorityClass)
        classes = {
            o.metadata.name: o for o in snapshot.objects(kind) if isinstance(o, PriorityClass)
        }

        def resolve(class_name: str, template_priority: int | None) -> int:
            return resolve_priority(class_name, template_priority, classes)

        return resolve

    def _reconcile_jobs(
        self, store: Cluster, snapshot: Snapshot, keys: Sequence[JobKey], now: datetime
    ) -> None:
        priority = self._priority_resolver(snapshot, store)
        plans: list[tuple[JobKey, JobPlan]] = []
        for key in keys:
            name, namespace, job_name = key
            adapter = self._adapters[name]
            kind = store.registry.for_type(adapter.kind)
            job = snapshot.get(kind, job_name, namespace)
            forgotten = self._forgotten.pop(key, None)
            last = self._jobs.get(key) or forgotten
            if job is not None:
                self._jobs[key] = job
                self._uid_key[job.metadata.uid] = key
            else:
                self._jobs.pop(key, None)
            known = job or last
            if known is None:
                continue
            unit = self._units.get((namespace, adapter.unit_name(known)))
            pods = tuple(self._owned.get(known.metadata.uid, {}).values())
            plan = plan_job(
                adapter,
                self._args[name],
                job,
                unit,
                pods,
                now,
                priority,
                last_job=last,
                own_pods=self.own_pods,
            )
            if job is None:
                self._uid_key.pop(known.metadata.uid, None)
                self._set_timer(key, None)
            else:
                self._set_timer(key, plan.wake_at)
            if not plan.empty:
                plans.append((key, plan))
        if plans:
            self._write(store, plans, now)

    def _write(
        self, store: Cluster, plans: Sequence[tuple[JobKey, JobPlan]], now: datetime
    ) -> None:
        """Send every plan's writes in one batch, in the order jobs, creates (units, then
        pods), updates (units, then pods), deletes (pods, then the unit)."""
        owners: list[JobKey] = []
        writes: list[Write] = []
        for key, plan in plans:
            if plan.job is not None:
                owners.append(key)
                writes.append(Write.update(plan.job))
        for key, plan in plans:
            if plan.create_unit is not None:
                owners.append(key)
                writes.append(Write.apply(plan.create_unit))
        for key, plan in plans:
            for pod in plan.create_pods:
                owners.append(key)
                writes.append(Write.apply(pod))
        for key, plan in plans:
            if plan.unit is not None:
                owners.append(key)
                writes.append(Write.update(plan.unit))
        for key, plan in plans:
            for pod in plan.update_pods:
                owners.append(key)
                writes.append(Write.update(pod))
        registry = store.registry
        for key, plan in plans:
            doomed: list[Object] = list(plan.delete_pods)
            if plan.delete_unit is not None:
                doomed.append(plan.delete_unit)
            for obj in doomed:
                owners.append(key)
                writes.append(Write.delete_of(registry.for_object(obj), obj))
        self._outbox.send(
            store, writes, functools.partial(self._written, plans, owners, writes, now)
        )

    def _written(
        self,
        plans: Sequence[tuple[JobKey, JobPlan]],
        owners: Sequence[JobKey],
        writes: Sequence[Write],
        sent_at: datetime,
        results: Sequence[Result],
    ) -> None:
        """The results of one pass's writes: the Events of the plans whose writes all went
        through are recorded; a job with a failed write is forgotten (so the next pass that
        looks at it plans it afresh) and looked at again :data:`RETRY_SECONDS` after the
        writes were sent. A delete of what is gone already did not fail."""
        failed: set[JobKey] = set()
        for key, write, result in zip(owners, writes, results, strict=True):
            if not isinstance(result, StoreError):
                continue
            if write.removes:
                if isinstance(result, NotFound):
                    continue
                log.warning("job %s/%s: delete failed: %s", key[1], key[2], result)
            else:
                log.warning("job %s/%s: write failed: %s", key[1], key[2], result)
            failed.add(key)
        events = [e for key, plan in plans if key not in failed for e in plan.events]
        if events and self._recorder is not None:
            try:
                self._recorder.record_many(events)
            except StoreError as err:  # an Event lost is no reason to stop the loop
                log.warning("jobs: recording %d events failed: %s", len(events), err)
        for key in failed:
            # Look again soon: forget the job so the next pass treats it as changed (its last
            # state kept aside, should it be deleted meanwhile).
            forgotten = self._jobs.pop(key, None)
            if forgotten is not None:
                self._forgotten[key] = forgotten
            self._set_timer(key, sent_at + timedelta(seconds=RETRY_SECONDS))


def _pod_id(pod: Object) -> str:
    """What the loop tracks a pod by: its uid; for a pod it created and the store has not
    answered yet (shown as written, without a uid), its namespace and name."""
    meta = pod.metadata
    return meta.uid or f"/{meta.namespace}/{meta.name}"
