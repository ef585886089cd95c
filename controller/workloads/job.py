"""The ``batch-jobs`` control loop: Kubernetes' Job controller for the batch/v1 Jobs the queue
does not hold, and the TTL-after-finished controller for every Job (Kubernetes v1.35).

Which path runs a Job: the queue's (:mod:`controller.queueing.jobcontroller`) from the moment
the Job is held (created ``suspend: true``, no ``status.startTime``) for as long as a QueueUnit
of it exists (:func:`~controller.queueing.jobcontroller.held_by_queue`); this loop runs every
other one. A Job this loop started and the user suspends later keeps its ``startTime``, so it
stays here.

* **Pods.** ``parallelism`` (default 1) at a time, from the template with the labels Kubernetes
  gives them (``job-name``, ``controller-uid`` and their ``batch.kubernetes.io/`` forms) and the
  ``batch.kubernetes.io/job-tracking`` finalizer, named ``<job>-<5 letters>``. ``completions``
  unset with ``parallelism`` unset means 1; with ``parallelism`` set it means "the first
  success completes": no new pods once one succeeded, complete when the rest ended. Otherwise
  ``min(parallelism, completions - succeeded)`` run. ``Indexed``: one pod per index not yet
  succeeded (lowest first), named ``<job>-<index>-<5 letters>``, with the index label and
  annotation, ``JOB_COMPLETION_INDEX`` and hostname ``<job>-<index>``. Extra pods are deleted
  in the ReplicaSet's order.
* **Counting.** A pod counts once, when it succeeded, failed, or was deleted before it
  succeeded (an eviction counts toward ``backoffLimit``, as with ``podFailurePolicy`` unset):
  its uid goes to ``status.uncountedTerminatedPods``, then its finalizer is removed, then it
  moves to ``succeeded``/``failed`` (``completedIndexes`` for an ``Indexed`` job's successes).
  Pods the controller deletes itself (suspend, scale-down) lose the finalizer first and do not
  count. After failures no pod is created for 10 s, doubling with each failure since the last
  success up to 10 min, counted from the last failure's end (as Kubernetes' pod backoff, kept
  in memory by the loop like Kubernetes keeps it).
* **Ending.** ``failed > backoffLimit`` (default 6): ``FailureTarget`` reason
  ``BackoffLimitExceeded``; ``activeDeadlineSeconds`` after ``startTime``: ``DeadlineExceeded``.
  Every active pod is deleted (and counts as failed); once none is left uncounted the ``Failed``
  condition follows. Enough successes (and no active pod): ``SuccessCriteriaMet`` then
  ``Complete``, reason ``CompletionsReached``, and ``completionTime``.
* **Suspend.** ``spec.suspend: true`` deletes the active pods and sets ``Suspended``; back to
  false sets it ``False`` (``JobResumed``) and restarts the deadline (``startTime`` now).
* **Status**: ``active``, ``ready``, ``terminating``, ``succeeded``, ``failed``,
  ``startTime`` (first sync while not suspended).
* **Events** (about the Job): ``SuccessfulCreate`` "Created pod: <name>" and
  ``SuccessfulDelete`` "Deleted pod: <name>" (``FailedCreate``/``FailedDelete`` on failure),
  ``Suspended``/``Resumed``, and when it ends ``Completed`` "Job completed" or a Warning with
  the failure's reason and message (``BackoffLimitExceeded``, ``DeadlineExceeded``).
* **TTL.** A finished Job with ``ttlSecondsAfterFinished`` is deleted with its pods that long
  after its ``Complete``/``Failed`` condition. A deleted Job's pods are deleted after it (the
  garbage collector's part; pods of Jobs this loop never saw are left alone).

A Job whose ``spec.managedBy`` names another controller is left to it (only its TTL applies).
``podFailurePolicy``, ``successPolicy``, ``backoffLimitPerIndex``/``maxFailedIndexes`` and
``podReplacementPolicy: Failed`` are not honoured (the Job runs as if they were unset).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, Final

import msgspec

from apis.core import Container, EnvVar, Job, JobStatus, Pod
from apis.meta import Condition, Object
from apis.queueing import QueueUnit
from controller.events import WARNING
from controller.queueing.jobcontroller import (
    LABEL_BATCH_COMPLETION_INDEX,
    batch_job_labels,
    held_by_queue,
)
from controller.store.cluster import Cluster
from controller.store.snapshots import Change, Snapshot
from controller.workloads.common import (
    Note,
    Plan,
    WorkloadLoop,
    deletion_order,
    group_pods,
    is_ready,
    pod_from_template,
    pods_by_owner,
    regroup_by_owner,
    regroup_pods,
)
from controller.workloads.jobconditions import (
    COMPLETE,
    FAILED,
    FAILURE_TARGET,
    MSG_BACKOFF,
    MSG_DEADLINE,
    REASON_BACKOFF,
    REASON_DEADLINE,
    SUCCESS_CRITERIA_MET,
    condition,
    final,
    new_condition,
    success_target,
)

if TYPE_CHECKING:
    from controller.loops import LoopContext

__all__ = [
    "DEFAULT_BACKOFF_LIMIT",
    "TRACKING_FINALIZER",
    "BatchJobController",
    "PodBackoff",
    "creation_delay",
    "finished_at",
    "format_indexes",
    "newly_ended",
    "next_backoff",
    "parse_indexes",
    "plan_batch_job",
    "plan_ttl",
    "stray_pods",
]

replace = msgspec.structs.replace

TRACKING_FINALIZER: Final = "batch.kubernetes.io/job-tracking"
DEFAULT_BACKOFF_LIMIT: Final = 6
ENV_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"
#: The ``spec.managedBy`` of Jobs Kubernetes' own Job controller runs.
MANAGED_BY_JOB_CONTROLLER: Final = "kubernetes.io/job-controller"

SUSPENDED: Final = "Suspended"


# --- indexes ---------------------------------------------------------------------------------


def parse_indexes(text: str, limit: int | None = None) -> set[int]:
    """``"0-2,5"`` -> ``{0, 1, 2, 5}`` (only those below ``limit``; malformed parts skipped)."""
    found: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            continue
        found.update(range(low, high + 1 if limit is None else min(high + 1, limit)))
    return found


def format_indexes(indexes: Iterable[int]) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"`` (Kubernetes' ``completedIndexes``)."""
    runs: list[list[int]] = []
    for index in sorted(set(indexes)):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# --- pieces ----------------------------------------------------------------------------------


def _finished(job: Job) -> Condition | None:
    conditions = job.status.conditions
    return condition(conditions, COMPLETE) or condition(conditions, FAILED)


def _set_suspended(
    conditions: tuple[Condition, ...], suspended: bool, now: datetime
) -> tuple[tuple[Condition, ...], bool]:
    """``conditions`` with ``Suspended`` as ``suspended`` says; whether it changed. A Job never
    suspended gets no ``Suspended`` condition."""
    status = "True" if suspended else "False"
    before = next((c for c in conditions if c.type == SUSPENDED), None)
    if (before is None and not suspended) or (before is not None and before.status == status):
        return conditions, False
    reason, message = (
        ("JobSuspended", "Job suspended") if suspended else ("JobResumed", "Job resumed")
    )
    new = replace(new_condition(SUSPENDED, reason, message, now), status=status)
    if before is None:
        return (*conditions, new), True
    return tuple(new if c.type == SUSPENDED else c for c in conditions), True


def _index(pod: Pod) -> int:
    raw = pod.metadata.annotations.get(
        LABEL_BATCH_COMPLETION_INDEX, pod.metadata.labels.get(LABEL_BATCH_COMPLETION_INDEX, "")
    )
    try:
        return int(raw)
    except ValueError:
        return -1


def _active(pod: Pod) -> bool:
    return not pod.is_terminated and pod.metadata.deletion_timestamp is None


def _counts_as_failed(pod: Pod) -> bool:
    """Failed, or deleted before it succeeded (``podReplacementPolicy: TerminatingOrFailed``)."""
    if pod.status.phase == "Failed":
        return True
    return pod.metadata.deletion_timestamp is not None and pod.status.phase != "Succeeded"


def _tracked(pod: Pod) -> bool:
    return TRACKING_FINALIZER in pod.metadata.finalizers


def _untracked(pod: Pod) -> Pod:
    finalizers = tuple(f for f in pod.metadata.finalizers if f != TRACKING_FINALIZER)
    return replace(pod, metadata=replace(pod.metadata, finalizers=finalizers))


def _unconditional(pod: Pod) -> Pod:
    """``pod`` to delete after an update of it in the same pass (its version moves on)."""
    return replace(pod, metadata=replace(pod.metadata, resource_version=""))


def _uncounted(status: JobStatus) -> tuple[list[str], list[str]]:
    raw = status.uncounted_terminated_pods or {}
    return [str(u) for u in raw.get("succeeded") or ()], [str(u) for u in raw.get("failed") or ()]


def _with_index(job: Job, pod: Pod, index: int) -> Pod:
    """An ``Indexed`` job's pod as Kubernetes makes it: its name, hostname and index env var."""
    field_path = f"metadata.annotations['{LABEL_BATCH_COMPLETION_INDEX}']"
    env = EnvVar(name=ENV_COMPLETION_INDEX, value_from={"fieldRef": {"fieldPath": field_path}})

    def with_env(containers: Sequence[Container]) -> tuple[Container, ...]:
        return tuple(
            c
            if any(e.name == ENV_COMPLETION_INDEX for e in c.env)
            else replace(c, env=(*c.env, env))
            for c in containers
        )

    spec = pod.spec
    spec = replace(
        spec,
        hostname=spec.hostname or f"{job.metadata.name}-{index}",
        containers=with_env(spec.containers),
        init_containers=with_env(spec.init_containers),
    )
    annotations = {**pod.metadata.annotations, LABEL_BATCH_COMPLETION_INDEX: str(index)}
    meta = replace(
        pod.metadata, generate_name=f"{job.metadata.name}-{index}-", annotations=annotations
    )
    return replace(pod, metadata=meta, spec=spec)


def new_pod(job: Job, index: int = -1) -> Pod:
    """A pod of ``job`` (``index`` >= 0: of that completion index)."""
    pod = pod_from_template(
        job.spec.template,
        job,
        generate_name=f"{job.metadata.name}-",
        labels=batch_job_labels(job, max(index, 0)),
    )
    pod = replace(
        pod,
        metadata=replace(pod.metadata, finalizers=(*pod.metadata.finalizers, TRACKING_FINALIZER)),
    )
    return _with_index(job, pod, index) if index >= 0 else pod


def _wanted(job: Job, succeeded: int, active: int) -> int:
    spec = job.spec
    parallelism = 1 if spec.parallelism is None else max(0, spec.parallelism)
    completions = _completions(job)
    if completions is None:
        return active if succeeded > 0 else parallelism
    return max(0, min(parallelism, completions - succeeded))


def _completions(job: Job) -> int | None:
    spec = job.spec
    if spec.completions is None and spec.parallelism is None:
        return 1
    return spec.completions


def _indexed(job: Job) -> bool:
    return job.spec.completion_mode == "Indexed" and job.spec.completions is not None


# --- pod creation backoff --------------------------------------------------------------------

#: Kubernetes' pod failure backoff: the first delay and its cap.
BACKOFF_BASE: Final = timedelta(seconds=10)
BACKOFF_MAX: Final = timedelta(minutes=10)


class PodBackoff(msgspec.Struct, frozen=True, kw_only=True):
    """Failures since a Job's last success and when the last one ended."""

    failures: int = 0
    last_failure: datetime | None = None


def _stamp(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def finished_at(pod: Pod) -> datetime | None:
    """When ``pod`` ended: its containers' last ``finishedAt``, else when Ready went False, else
    its deletionTimestamp, else its creationTimestamp (Kubernetes' order)."""
    ends = [
        stamp
        for status in pod.status.container_statuses
        if status.state is not None and status.state.terminated
        for stamp in [_stamp(status.state.terminated.get("finishedAt"))]
        if stamp is not None
    ]
    if ends:
        return max(ends)
    ready = next((c for c in pod.status.conditions if c.type == "Ready"), None)
    if ready is not None and ready.status == "False" and ready.last_transition_time:
        return ready.last_transition_time
    return pod.metadata.deletion_timestamp or pod.metadata.creation_timestamp


def _ended(pods: Sequence[Pod]) -> list[datetime]:
    return sorted(t for t in map(finished_at, pods) if t is not None)


def next_backoff(record: PodBackoff, succeeded: Sequence[Pod], failed: Sequence[Pod]) -> PodBackoff:
    """``record`` after the newly ended pods: a success resets it to the failures after it."""
    failures = _ended(failed)
    if not succeeded:
        if not failed:
            return record
        last = failures[-1] if failures else record.last_failure
        return PodBackoff(failures=record.failures + len(failed), last_failure=last)
    successes = _ended(succeeded)
    if not successes:
        return PodBackoff()
    after = [t for t in failures if t > successes[-1]]
    return PodBackoff(failures=len(after), last_failure=after[-1] if after else None)


def creation_delay(record: PodBackoff, now: datetime) -> timedelta:
    """How long pod creation still waits after ``record``'s failures (0: not at all)."""
    if record.failures <= 0 or record.last_failure is None:
        return timedelta(0)
    delay = BACKOFF_BASE
    for _ in range(1, record.failures):
        delay *= 2
        if delay >= BACKOFF_MAX:
            delay = BACKOFF_MAX
            break
    return max(timedelta(0), delay - (now - record.last_failure))


def newly_ended(job: Job, pods: Sequence[Pod]) -> tuple[list[Pod], list[Pod]]:
    """The pods of ``job`` that ended and are not counted yet: (succeeded, failed)."""
    uncounted_ok, uncounted_failed = _uncounted(job.status)
    counted = {*uncounted_ok, *uncounted_failed}
    fresh = [p for p in pods if _tracked(p) and p.metadata.uid not in counted]
    succeeded = [p for p in fresh if p.status.phase == "Succeeded"]
    failed = [p for p in fresh if p.status.phase != "Succeeded" and _counts_as_failed(p)]
    return succeeded, failed


# --- the decisions ---------------------------------------------------------------------------


def plan_ttl(job: Job, pods: Sequence[Pod], now: datetime) -> Plan:
    """Delete a finished ``job`` and its ``pods`` once ``ttlSecondsAfterFinished`` passed (else
    wake then), as the TTL controller and the garbage collector after it do."""
    plan = Plan()
    ttl = job.spec.ttl_seconds_after_finished
    finished = _finished(job)
    if ttl is None or finished is None or job.metadata.deletion_timestamp is not None:
        return plan
    since = finished.last_transition_time or job.status.completion_time or now
    due = since + timedelta(seconds=ttl)
    if now >= due:
        plan.delete.extend(_unconditional(p) if _tracked(p) else p for p in pods)
        plan.delete.append(job)
    else:
        plan.wake(due)
    return plan


def plan_batch_job(
    job: Job, pods: Sequence[Pod], now: datetime, backoff: PodBackoff | None = None
) -> Plan:
    """What ``job`` needs given the pods it controls (pure; see the module docstring).
    ``backoff``: the Job's failures so far, the pods that ended now included
    (:func:`next_backoff`)."""
    if _finished(job) is not None:
        plan = plan_ttl(job, pods, now)
        # A finished Job holds on to no pod: what is left loses the finalizer.
        plan.update.extend(_untracked(p) for p in pods if _tracked(p))
        return plan
    plan = Plan()
    status = job.status
    spec = job.spec
    indexed = _indexed(job)
    completions = _completions(job)
    by_uid = {p.metadata.uid: p for p in pods}
    uncounted_ok, uncounted_failed = _uncounted(status)
    uncounted = set(uncounted_ok) | set(uncounted_failed)

    # Counting: uncounted pods that lost their finalizer (or are gone) move to the counters.
    settled = {u for u in uncounted if u not in by_uid or not _tracked(by_uid[u])}
    succeeded = status.succeeded + sum(1 for u in uncounted_ok if u in settled)
    failed = status.failed + sum(1 for u in uncounted_failed if u in settled)
    keep_ok = [u for u in uncounted_ok if u not in settled]
    keep_failed = [u for u in uncounted_failed if u not in settled]
    done_indexes = parse_indexes(status.completed_indexes, completions) if indexed else set()
    for pod in pods:
        uid = pod.metadata.uid
        if not _tracked(pod):
            continue
        if uid in uncounted:
            plan.update.append(_untracked(pod))
        elif pod.status.phase == "Succeeded":
            if indexed:
                if 0 <= _index(pod) < (completions or 0):
                    done_indexes.add(_index(pod))
                plan.update.append(_untracked(pod))
            else:
                keep_ok.append(uid)
        elif _counts_as_failed(pod):
            keep_failed.append(uid)
    if indexed:
        succeeded = len(done_indexes)
    total_ok = succeeded + len(keep_ok)
    total_failed = failed + len(keep_failed)

    active = [p for p in pods if _active(p)]
    terminating = sum(1 for p in pods if p.metadata.deletion_timestamp and not p.is_terminated)
    ready = sum(1 for p in active if is_ready(p))
    conditions = status.conditions
    start = status.start_time
    suspended = spec.suspend is True
    if start is None and not suspended:
        start = now

    target = condition(conditions, FAILURE_TARGET) or condition(conditions, SUCCESS_CRITERIA_MET)
    if target is None:
        conditions, changed = _set_suspended(conditions, suspended, now)
        if changed:
            plan.events.append(
                Note(job, "Suspended", "Job suspended")
                if suspended
                else Note(job, "Resumed", "Job resumed")
            )
        if changed and not suspended:
            start = now  # resumed: the deadline counts from here
    if target is None:
        limit = DEFAULT_BACKOFF_LIMIT if spec.backoff_limit is None else spec.backoff_limit
        deadline = spec.active_deadline_seconds
        if total_failed > limit:
            target = new_condition(FAILURE_TARGET, REASON_BACKOFF, MSG_BACKOFF, now)
        elif deadline is not None and start is not None and not suspended:
            due = start + timedelta(seconds=deadline)
            if now >= due:
                target = new_condition(FAILURE_TARGET, REASON_DEADLINE, MSG_DEADLINE, now)
            else:
                plan.wake(due)
    if target is None:
        reached = total_ok > 0 if completions is None else total_ok >= completions
        if reached and not active:
            target = success_target(now)
        if target is not None:
            conditions = (*conditions, target)
    elif condition(conditions, target.type) is None:
        conditions = (*conditions, target)

    if target is not None:
        # Ending: the active pods are deleted and count as failed once they are gone.
        plan.delete.extend(active)
        terminating += len(active)
        active = []
        ready = 0
        done = not keep_ok and not keep_failed and not any(_tracked(p) for p in pods)
        done = done and terminating == 0
        completion_time = status.completion_time
        if done:
            ending = final(target, now)
            conditions = (*conditions, ending)
            if ending.type == COMPLETE:
                completion_time = now
                plan.events.append(Note(job, "Completed", "Job completed"))
            else:
                plan.events.append(Note(job, ending.reason, ending.message, WARNING))
        plan.status(
            job,
            _status(
                status,
                start=start,
                conditions=conditions,
                active=0,
                ready=ready,
                terminating=terminating,
                succeeded=succeeded,
                failed=failed,
                keep=(keep_ok, keep_failed),
                indexes=done_indexes if indexed else None,
                completion_time=completion_time,
            ),
        )
        return plan

    removed: list[Pod] = []
    created: list[Pod] = []
    if suspended:
        removed = active
    elif indexed:
        seen: set[int] = set()
        for pod in sorted(active, key=lambda p: (_index(p), p.metadata.name)):
            index = _index(pod)
            if index in done_indexes or index in seen or not 0 <= index < (completions or 0):
                removed.append(pod)
            else:
                seen.add(index)
        keep = [p for p in active if p not in removed]
        room = _wanted(job, len(done_indexes), len(keep)) - len(keep)
        if room > 0:
            missing = [i for i in range(completions or 0) if i not in done_indexes | seen]
            created = [new_pod(job, i) for i in missing[:room]]
        elif room < 0:
            removed.extend(deletion_order(keep)[:-room])
    else:
        want = _wanted(job, total_ok, len(active))
        if len(active) < want:
            created = [new_pod(job) for _ in range(want - len(active))]
        elif len(active) > want:
            removed = deletion_order(active)[: len(active) - want]
    if removed:
        created = []  # deletions first: what is missing is made on the next pass
    if created:
        wait = creation_delay(backoff or PodBackoff(), now)
        if wait > timedelta(0):
            created = []
            plan.wake(now + wait)
    for pod in removed:
        # Pods the controller removes itself do not count: the finalizer goes first.
        if _tracked(pod):
            plan.update.append(_untracked(pod))
            plan.delete.append(_unconditional(pod))
        else:
            plan.delete.append(pod)
    plan.create.extend(created)
    gone = {p.metadata.uid for p in removed}
    plan.status(
        job,
        _status(
            status,
            start=start,
            conditions=conditions,
            active=len(active) - len(removed) + len(created),
            ready=sum(1 for p in active if is_ready(p) and p.metadata.uid not in gone),
            terminating=terminating + len(removed),
            succeeded=succeeded,
            failed=failed,
            keep=(keep_ok, keep_failed),
            indexes=done_indexes if indexed else None,
            completion_time=status.completion_time,
        ),
    )
    return plan


def _status(
    status: JobStatus,
    *,
    start: datetime | None,
    conditions: tuple[Condition, ...],
    active: int,
    ready: int,
    terminating: int,
    succeeded: int,
    failed: int,
    keep: tuple[list[str], list[str]],
    indexes: set[int] | None,
    completion_time: datetime | None,
) -> JobStatus:
    ok, bad = keep
    return replace(
        status,
        start_time=start,
        conditions=conditions,
        active=active,
        ready=ready,
        terminating=terminating,
        succeeded=succeeded,
        failed=failed,
        completed_indexes=format_indexes(indexes) if indexes is not None else "",
        completion_time=completion_time,
        uncounted_terminated_pods={
            **({"succeeded": ok} if ok else {}),
            **({"failed": bad} if bad else {}),
        },
    )


def stray_pods(
    pods: Iterable[Object], jobs: Collection[str], gone: Collection[str] = ()
) -> list[Pod]:
    """Pods whose batch/v1 Job is not in ``jobs`` (uids): those holding the tracking finalizer,
    and those of a Job in ``gone`` (seen before and deleted since)."""
    found: list[Pod] = []
    for pod in pods:
        if not isinstance(pod, Pod):
            continue
        ref = next((r for r in pod.metadata.owner_references if r.controller), None)
        if ref is None or ref.kind != "Job" or ref.api_version != "batch/v1":
            continue
        if ref.uid not in jobs and (_tracked(pod) or ref.uid in gone):
            found.append(pod)
    return found


def _job_group(pod: Pod) -> tuple[str, ...]:
    ref = next((r for r in pod.metadata.owner_references if r.controller), None)
    if ref is None or ref.kind != "Job" or ref.api_version != "batch/v1":
        return ()
    return (ref.uid,)


def _pods_by_job(objects: Sequence[Object]) -> Mapping[str, tuple[Pod, ...]]:
    """batch/v1 Job uid -> the pods it controls (a snapshot-derived index)."""
    return group_pods(objects, _job_group)


def _regroup_by_job(
    earlier: Mapping[str, tuple[Pod, ...]], changes: Sequence[Change]
) -> Mapping[str, tuple[Pod, ...]]:
    return regroup_pods(earlier, changes, _job_group)


def _queued(objects: Sequence[Object]) -> frozenset[str]:
    """The uids of the objects a QueueUnit is controlled by."""
    return frozenset(
        r.uid
        for unit in objects
        if isinstance(unit, QueueUnit)
        for r in unit.metadata.owner_references
        if r.controller
    )


class BatchJobController(WorkloadLoop):
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "batch-jobs"
    component = "job-controller"
    owner_type: ClassVar[type[Object]] = Job
    inputs: ClassVar[tuple[type[Object], ...]] = (Pod, QueueUnit)

    def __init__(self) -> None:
        super().__init__()
        self._strays_seen: tuple[Sequence[Object], Sequence[Object]] | None = None
        #: The uids of the Jobs seen (a deleted one's pods are deleted after it).
        self._job_uids: frozenset[str] = frozenset()
        #: Job uid -> its pod failure backoff (unfinished Jobs only).
        self._backoff: dict[str, PodBackoff] = {}

    def pod_event(self, owner: Object, pod: Object, verb: str, error: str = "") -> Note | None:
        """The pod control's Events, but none for a finished Job's pods: the TTL controller and
        the garbage collector delete those, and they record nothing."""
        if isinstance(owner, Job) and _finished(owner) is not None:
            return None
        return super().pod_event(owner, pod, verb, error)

    def plan(self, owner: Object, snapshot: Snapshot, store: Cluster, now: datetime) -> Plan:
        assert isinstance(owner, Job)
        owned = snapshot.derived(store.registry.for_type(Pod), pods_by_owner, regroup_by_owner)
        pods = owned.get(owner.metadata.uid, ())
        queued = snapshot.derived(store.registry.for_type(QueueUnit), _queued)
        uid = owner.metadata.uid
        elsewhere = owner.spec.managed_by not in ("", MANAGED_BY_JOB_CONTROLLER)
        if _finished(owner) is not None or held_by_queue(owner, queued) or elsewhere:
            # Whoever ran it, a finished Job gets its TTL (and releases pods of ours).
            self._backoff.pop(uid, None)
            return plan_batch_job(owner, pods, now) if _finished(owner) else Plan()
        record = next_backoff(self._backoff.get(uid, PodBackoff()), *newly_ended(owner, pods))
        self._backoff[uid] = record
        return plan_batch_job(owner, pods, now, record)

    def reconcile(self, ctx: LoopContext) -> float | None:
        if ctx.store is not self._store:
            self._strays_seen = None
            self._job_uids = frozenset()
            self._backoff = {}
        wait = super().reconcile(ctx)
        store = ctx.store
        snapshot = self._outbox.over(store.snapshot())
        jobs = snapshot.objects(store.registry.for_type(Job))
        pods = snapshot.objects(store.registry.for_type(Pod))
        seen = self._strays_seen
        if seen is not None and seen[0] is jobs and seen[1] is pods:
            return wait
        uids = frozenset(j.metadata.uid for j in jobs)
        for gone in self._backoff.keys() - uids:
            del self._backoff[gone]
        by_job = snapshot.derived(store.registry.for_type(Pod), _pods_by_job, _regroup_by_job)
        # Only the pods of Jobs not in the store: what the pods of a stored Job cost nothing.
        candidates = [pod for uid, group in by_job.items() if uid not in uids for pod in group]
        candidates.sort(key=lambda pod: (pod.metadata.namespace, pod.metadata.name))
        strays = stray_pods(candidates, uids, self._job_uids - uids)
        plan = Plan()
        for pod in strays:
            if _tracked(pod):
                plan.update.append(_untracked(pod))
                if pod.metadata.deletion_timestamp is None:
                    plan.delete.append(_unconditional(pod))
            elif pod.metadata.deletion_timestamp is None:
                plan.delete.append(pod)
        self._write(store, [(None, plan)])  # the garbage collector's part: no Events
        # A deleted Job is remembered until its pods are gone.
        owners = {r.uid for p in strays for r in p.metadata.owner_references if r.controller}
        self._job_uids = uids | frozenset(owners)
        self._strays_seen = (jobs, pods) if not strays else None
        again = self._wait(ctx.now())  # sooner when a write failed
        return again if wait is None else wait if again is None else min(wait, again)
