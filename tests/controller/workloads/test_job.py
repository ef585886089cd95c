"""The standalone batch/v1 Job controller: its decision function, and Jobs run end to end by
every control loop (``koordpy simulate``, and the loops under a clock the test moves)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from apis import codec
from apis.codec import decode_object
from apis.core import ContainerState, ContainerStatus, Job, Pod
from apis.meta import Condition, OwnerReference
from controller.loops import LoopRunner, build_loops
from controller.queueing.jobcontroller import held_by_queue
from controller.store.sqlite import Store
from controller.workloads.job import (
    TRACKING_FINALIZER,
    PodBackoff,
    creation_delay,
    finished_at,
    format_indexes,
    newly_ended,
    next_backoff,
    parse_indexes,
    plan_batch_job,
    plan_ttl,
)
from tests.controller.workloads.cluster import EPOCH, Cluster
from tests.controller.workloads.objects import NOW
from tests.manuals.replay import node, replay

replace = msgspec.structs.replace

INDEX = "batch.kubernetes.io/job-completion-index"


def job(name: str = "pi", *, status: dict[str, Any] | None = None, **spec: Any) -> Job:
    raw = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "pi"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "pi", "image": "perl:5.34.0"}],
                },
            },
            **spec,
        },
        "status": status or {},
    }
    obj = decode_object(raw)
    assert isinstance(obj, Job)
    return obj


def job_pod(
    owner: Job,
    name: str,
    *,
    phase: str = "Running",
    tracked: bool = True,
    deleting: bool = False,
    index: int | None = None,
) -> Pod:
    ref = OwnerReference(
        api_version="batch/v1",
        kind="Job",
        name=owner.metadata.name,
        uid=owner.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )
    base = Pod()
    annotations = {INDEX: str(index)} if index is not None else {}
    ready = (Condition(type="Ready", status="True"),) if phase == "Running" else ()
    return replace(
        base,
        metadata=replace(
            base.metadata,
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            annotations=annotations,
            finalizers=(TRACKING_FINALIZER,) if tracked else (),
            owner_references=(ref,),
            deletion_timestamp=NOW if deleting else None,
        ),
        spec=replace(base.spec, node_name="node-0"),
        status=replace(base.status, phase=phase, conditions=ready),
    )


def status_of(plan_update: list[Any], name: str = "pi") -> Any:
    [written] = [o for o in plan_update if isinstance(o, Job) and o.metadata.name == name]
    return written.status


def condition(status: Any, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)


# --- the decision function -------------------------------------------------------------------


def test_a_new_job_starts_parallelism_pods_tracked_and_labelled() -> None:
    pi = job(parallelism=2, completions=3)
    plan = plan_batch_job(pi, [], NOW)
    assert len(plan.create) == 2
    for pod in plan.create:
        assert isinstance(pod, Pod)
        assert pod.metadata.generate_name == "pi-"
        assert pod.metadata.finalizers == (TRACKING_FINALIZER,)
        labels = pod.metadata.labels
        assert labels["app"] == "pi"
        assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == "pi"
        assert labels["controller-uid"] == labels["batch.kubernetes.io/controller-uid"] == "uid-pi"
        assert "alibabacloud.com/schedule-admission" not in labels  # not gated by a queue
        [ref] = pod.metadata.owner_references
        assert (ref.kind, ref.uid, ref.controller) == ("Job", "uid-pi", True)
    status = status_of(plan.update)
    assert (status.active, status.start_time) == (2, NOW)


def test_the_last_completions_need_fewer_pods() -> None:
    pi = job(parallelism=2, completions=3, status={"succeeded": 2, "startTime": NOW.isoformat()})
    assert len(plan_batch_job(pi, [], NOW).create) == 1


def test_completions_and_parallelism_default_to_one() -> None:
    assert len(plan_batch_job(job(), [], NOW).create) == 1


def test_without_completions_the_first_success_stops_new_pods() -> None:
    """A work queue (``parallelism`` set, ``completions`` unset): once one pod succeeded no
    pod is added, and the Job completes when the others have ended."""
    queue = job(parallelism=3)
    assert len(plan_batch_job(queue, [], NOW).create) == 3
    started = replace(queue, status=replace(queue.status, start_time=NOW, succeeded=1))
    running = [job_pod(queue, "pi-b"), job_pod(queue, "pi-c")]
    plan = plan_batch_job(started, running, NOW)
    assert plan.create == []
    assert plan.delete == []
    assert condition(status_of(plan.update), "SuccessCriteriaMet") is None
    plan = plan_batch_job(started, [], NOW)
    assert condition(status_of(plan.update), "SuccessCriteriaMet") is not None


def test_an_indexed_job_makes_one_pod_per_missing_index() -> None:
    pi = job(parallelism=2, completions=4, completionMode="Indexed")
    pi = replace(pi, status=replace(pi.status, start_time=NOW, completed_indexes="0"))
    plan = plan_batch_job(pi, [job_pod(pi, "pi-1-aaaaa", index=1)], NOW)
    [new] = plan.create
    assert isinstance(new, Pod)
    assert new.metadata.generate_name == "pi-2-"
    assert new.metadata.labels[INDEX] == new.metadata.annotations[INDEX] == "2"
    assert new.spec.hostname == "pi-2"
    [env] = new.spec.containers[0].env
    assert env.name == "JOB_COMPLETION_INDEX"
    assert env.value_from == {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}}


def test_completed_indexes_are_written_as_ranges() -> None:
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert parse_indexes("0-2,5", limit=2) == {0, 1}
    assert format_indexes(()) == ""


def test_a_finished_pod_is_counted_once_then_released() -> None:
    """Uncounted first, then the finalizer goes, then the counter moves."""
    pi = job(completions=2, parallelism=1, status={"startTime": NOW.isoformat()})
    done = job_pod(pi, "pi-a", phase="Succeeded")
    plan = plan_batch_job(pi, [done], NOW)
    status = status_of(plan.update)
    assert status.uncounted_terminated_pods == {"succeeded": ["uid-pi-a"]}
    assert status.succeeded == 0
    assert [o.metadata.name for o in plan.update if isinstance(o, Pod)] == []

    pi = replace(pi, status=status)
    plan = plan_batch_job(pi, [done], NOW)
    [released] = [o for o in plan.update if isinstance(o, Pod)]
    assert released.metadata.finalizers == ()

    plan = plan_batch_job(pi, [replace(done, metadata=released.metadata)], NOW)
    status = status_of(plan.update)
    assert (status.succeeded, status.uncounted_terminated_pods) == (1, {})


def test_a_deleted_pod_counts_as_failed_and_is_replaced() -> None:
    """An evicted pod (deleted while running) is a failure with ``podFailurePolicy`` unset."""
    pi = job(status={"startTime": NOW.isoformat(), "active": 1})
    evicted = job_pod(pi, "pi-a", deleting=True)
    plan = plan_batch_job(pi, [evicted], NOW)
    assert len(plan.create) == 1
    status = status_of(plan.update)
    assert status.uncounted_terminated_pods == {"failed": ["uid-pi-a"]}
    assert status.terminating == 1


def test_more_failures_than_the_backoff_limit_fail_the_job() -> None:
    pi = job(parallelism=2, completions=4, backoffLimit=1)
    pi = replace(pi, status=replace(pi.status, start_time=NOW, failed=1))
    failed = job_pod(pi, "pi-a", phase="Failed")
    alive = job_pod(pi, "pi-b")
    plan = plan_batch_job(pi, [failed, alive], NOW)
    status = status_of(plan.update)
    target = condition(status, "FailureTarget")
    assert target is not None
    assert target.reason == "BackoffLimitExceeded"
    assert condition(status, "Failed") is None  # not before every pod is accounted for
    assert plan.delete == [alive]
    assert plan.create == []
    # Once the pods are counted and gone, the Job has failed.
    ended = replace(pi, status=replace(status, uncounted_terminated_pods={}, failed=3))
    status = status_of(plan_batch_job(ended, [], NOW).update)
    failed_condition = condition(status, "Failed")
    assert failed_condition is not None
    assert failed_condition.reason == "BackoffLimitExceeded"
    assert failed_condition.message == "Job has reached the specified backoff limit"
    assert status.completion_time is None


def test_the_backoff_limit_itself_is_allowed() -> None:
    pi = job(backoffLimit=1, status={"startTime": NOW.isoformat(), "failed": 1})
    plan = plan_batch_job(pi, [], NOW)
    assert condition(status_of(plan.update), "FailureTarget") is None
    assert len(plan.create) == 1


def test_the_active_deadline_counts_from_the_start() -> None:
    start = NOW - timedelta(seconds=30)
    pi = job(activeDeadlineSeconds=60, status={"startTime": start.isoformat(), "active": 1})
    pods = [job_pod(pi, "pi-a")]
    plan = plan_batch_job(pi, pods, NOW)
    assert plan.wake_at == start + timedelta(seconds=60)
    assert plan.delete == []
    plan = plan_batch_job(pi, pods, start + timedelta(seconds=60))
    target = condition(status_of(plan.update), "FailureTarget")
    assert target is not None
    assert target.reason == "DeadlineExceeded"
    assert plan.delete == pods


def test_suspending_deletes_the_pods_without_counting_them() -> None:
    pi = job(parallelism=2, suspend=True, status={"startTime": NOW.isoformat(), "active": 2})
    pods = [job_pod(pi, "pi-a"), job_pod(pi, "pi-b")]
    plan = plan_batch_job(pi, pods, NOW)
    assert sorted(p.metadata.name for p in plan.delete) == ["pi-a", "pi-b"]
    released = [o for o in plan.update if isinstance(o, Pod)]
    assert sorted(p.metadata.name for p in released) == ["pi-a", "pi-b"]
    assert all(p.metadata.finalizers == () for p in released)
    status = status_of(plan.update)
    suspended = condition(status, "Suspended")
    assert suspended is not None
    assert (suspended.status, suspended.reason) == ("True", "JobSuspended")
    assert (status.active, status.failed) == (0, 0)


def test_resuming_restarts_the_clock() -> None:
    before = NOW - timedelta(hours=1)
    suspended = Condition(type="Suspended", status="True", reason="JobSuspended")
    pi = job(suspend=False, activeDeadlineSeconds=600)
    pi = replace(pi, status=replace(pi.status, start_time=before, conditions=(suspended,)))
    plan = plan_batch_job(pi, [], NOW)
    status = status_of(plan.update)
    assert status.start_time == NOW
    resumed = condition(status, "Suspended")
    assert resumed is not None
    assert (resumed.status, resumed.reason) == ("False", "JobResumed")
    assert len(plan.create) == 1
    assert plan.wake_at == NOW + timedelta(seconds=600)


def test_a_finished_job_is_deleted_after_its_ttl() -> None:
    finished = Condition(type="Complete", status="True", last_transition_time=NOW)
    pi = job(ttlSecondsAfterFinished=100)
    pi = replace(pi, status=replace(pi.status, conditions=(finished,)))
    pods = [job_pod(pi, "pi-a", phase="Succeeded", tracked=False)]
    plan = plan_ttl(pi, pods, NOW + timedelta(seconds=99))
    assert plan.delete == []
    assert plan.wake_at == NOW + timedelta(seconds=100)
    plan = plan_ttl(pi, pods, NOW + timedelta(seconds=100))
    assert [o.kind for o in plan.delete] == ["Pod", "Job"]
    assert plan_ttl(job(), [], NOW).wake_at is None  # no TTL, no finished condition


def test_the_queue_holds_jobs_created_suspended() -> None:
    assert held_by_queue(job(suspend=True), ())
    assert held_by_queue(job(), {"uid-pi"})  # a QueueUnit of it exists: resumed by the queue
    assert not held_by_queue(job(), ())
    started_then_suspended = job(suspend=True, status={"startTime": NOW.isoformat()})
    assert not held_by_queue(started_then_suspended, ())


# --- end to end ------------------------------------------------------------------------------


def pi_job(name: str, spec: str, runtime: str = "60s") -> str:
    """A Job shaped like Kubernetes' ``pi`` example, running ``runtime`` in simulation."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
{spec}
  template:
    metadata:
      annotations:
        koordpy.io/simulated-runtime: {runtime}
    spec:
      restartPolicy: Never
      containers:
      - name: pi
        image: perl:5.34.0
        command: ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]
        resources:
          requests: {{cpu: "1", memory: 1Gi}}
"""


def test_a_parallel_job_completes_with_its_status_and_times() -> None:
    out = replay(node("node-0"), pi_job("pi", "  completions: 3\n  parallelism: 2"))
    pi = out.wire("Job", "pi")
    status = pi["status"]
    assert (status["succeeded"], status.get("failed", 0), status.get("active", 0)) == (3, 0, 0)
    assert status["uncountedTerminatedPods"] == {}
    types = [(c["type"], c["status"], c["reason"]) for c in status["conditions"]]
    assert types == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    pods = [p for p in out.all("Pod") if isinstance(p, Pod)]
    assert len(pods) == 3
    assert all(p.status.phase == "Succeeded" and not p.metadata.finalizers for p in pods)
    starts = sorted(p.status.start_time for p in pods if p.status.start_time)
    # Two at once, the third when the first two are done; complete when the third is.
    assert [s - starts[0] for s in starts] == [timedelta(0), timedelta(0), timedelta(seconds=60)]
    assert status["completionTime"] == status["conditions"][1]["lastTransitionTime"]
    job_obj = out.get("Job", "pi")
    assert isinstance(job_obj, Job)
    assert job_obj.status.start_time == starts[0]
    assert job_obj.status.completion_time == starts[0] + timedelta(seconds=120)


def test_a_job_past_its_deadline_fails_and_its_pods_go() -> None:
    out = replay(node("node-0"), pi_job("slow", "  parallelism: 2\n  activeDeadlineSeconds: 30"))
    slow = out.get("Job", "slow")
    assert isinstance(slow, Job)
    failed = condition(slow.status, "Failed")
    assert failed is not None
    assert failed.reason == "DeadlineExceeded"
    assert slow.status.start_time is not None
    assert failed.last_transition_time == slow.status.start_time + timedelta(seconds=30)
    assert (slow.status.failed, slow.status.succeeded, slow.status.active) == (2, 0, 0)
    assert out.all("Pod") == []


def test_a_finished_job_and_its_pods_are_deleted_after_the_ttl() -> None:
    out = replay(node("node-0"), pi_job("short", "  ttlSecondsAfterFinished: 100"))
    assert out.all("Job") == []
    assert out.all("Pod") == []


def test_a_job_created_suspended_is_left_to_the_queue() -> None:
    """Koord-Queue admits it and makes its pods (``<job>-<index>``, admission label, no
    tracking finalizer); the standalone controller adds nothing."""
    out = replay(node("node-0"), pi_job("queued", "  suspend: true"))
    unit = out.get("QueueUnit", "queued")
    assert unit.metadata.owner_references[0].kind == "Job"
    [pod] = out.all("Pod")
    assert pod.metadata.name == "queued-0"
    assert pod.metadata.labels["alibabacloud.com/schedule-admission"] == "true"
    assert TRACKING_FINALIZER not in pod.metadata.finalizers
    status = out.wire("Job", "queued")["status"]
    # The queue path's status: none of the standalone controller's pod tracking fields, and
    # the same end conditions as Kubernetes writes.
    assert "uncountedTerminatedPods" not in status
    assert "terminating" not in status
    ends = [(c["type"], c["reason"]) for c in status["conditions"]]
    assert ends == [
        ("SuccessCriteriaMet", "CompletionsReached"),
        ("Complete", "CompletionsReached"),
    ]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    c.apply(node("node-0"))
    yield c
    c.close()


def pods_of(cluster: Cluster, name: str) -> list[Pod]:
    return [p for p in cluster.pods() if p.metadata.labels.get("job-name") == name]


def get_job(cluster: Cluster, name: str) -> Job:
    obj = cluster.get("jobs", name)
    assert isinstance(obj, Job)
    return obj


def crash(cluster: Cluster, pod: Pod) -> None:
    """``pod``'s container exits 1 now, as the kubelet reports it."""
    stamp = cluster.clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    exited = ContainerStatus(
        name="pi",
        state=ContainerState(terminated={"exitCode": 1, "reason": "Error", "finishedAt": stamp}),
    )
    ready = Condition(type="Ready", status="False", last_transition_time=cluster.clock.now)
    status = replace(pod.status, phase="Failed", container_statuses=(exited,), conditions=(ready,))
    cluster.update(replace(pod, status=status))


def live(cluster: Cluster, name: str) -> list[Pod]:
    return [p for p in pods_of(cluster, name) if not p.is_terminated]


def test_failed_pods_are_replaced_after_a_doubling_delay_until_the_limit(
    cluster: Cluster,
) -> None:
    """10 s after the first failure, 20 s after the second; the third exceeds the limit."""
    cluster.apply(pi_job("flaky", "  backoffLimit: 2", runtime="1h"))
    cluster.settle()
    for delay in (10, 20):
        [pod] = live(cluster, "flaky")
        assert pod.status.phase == "Running"
        crash(cluster, pod)
        cluster.settle(advance=timedelta(seconds=delay - 1))
        assert live(cluster, "flaky") == []
        cluster.settle(advance=timedelta(seconds=1))
        assert len(live(cluster, "flaky")) == 1
        assert not any(p.metadata.finalizers for p in pods_of(cluster, "flaky") if p.is_terminated)
    [pod] = live(cluster, "flaky")
    crash(cluster, pod)
    cluster.settle()
    flaky = get_job(cluster, "flaky")
    failed = condition(flaky.status, "Failed")
    assert failed is not None
    assert failed.reason == "BackoffLimitExceeded"
    assert (flaky.status.failed, flaky.status.active) == (3, 0)
    assert [p.status.phase for p in pods_of(cluster, "flaky")] == ["Failed"] * 3
    cluster.settle(advance=timedelta(minutes=5))
    assert live(cluster, "flaky") == []


def test_an_evicted_pod_is_replaced_and_counted_as_failed(cluster: Cluster) -> None:
    """A pod deleted as the descheduler evicts one: the Job runs a new pod in its place once
    the backoff passed, and completes."""
    cluster.apply(pi_job("work", "  completions: 1", runtime="60s"))
    cluster.settle()
    [first] = pods_of(cluster, "work")
    cluster.delete("pods", first.metadata.name)
    cluster.settle()
    assert pods_of(cluster, "work") == []  # the finalizer let the Job count it, then it went
    assert get_job(cluster, "work").status.failed == 1
    cluster.settle(advance=timedelta(seconds=10))
    [second] = pods_of(cluster, "work")
    assert second.metadata.name != first.metadata.name
    cluster.settle(advance=timedelta(seconds=60))
    work = get_job(cluster, "work")
    assert condition(work.status, "Complete") is not None
    assert (work.status.succeeded, work.status.failed) == (1, 1)


def test_suspend_and_resume_a_running_job(cluster: Cluster) -> None:
    cluster.apply(pi_job("pausable", "  parallelism: 2\n  completions: 4", runtime="1h"))
    cluster.settle()
    assert len(pods_of(cluster, "pausable")) == 2
    running = get_job(cluster, "pausable")
    cluster.update(replace(running, spec=replace(running.spec, suspend=True)))
    cluster.settle(advance=timedelta(minutes=5))
    assert pods_of(cluster, "pausable") == []
    paused = get_job(cluster, "pausable")
    assert (paused.status.active, paused.status.failed) == (0, 0)
    assert condition(paused.status, "Suspended") is not None
    cluster.update(replace(paused, spec=replace(paused.spec, suspend=False)))
    cluster.settle(advance=timedelta(minutes=5))
    assert len(pods_of(cluster, "pausable")) == 2
    resumed = get_job(cluster, "pausable")
    assert resumed.status.start_time == EPOCH + timedelta(minutes=10)
    assert resumed.status.active == 2


def test_deleting_a_job_deletes_its_pods(cluster: Cluster) -> None:
    cluster.apply(pi_job("gone", "  parallelism: 2", runtime="1h"))
    cluster.settle()
    assert len(pods_of(cluster, "gone")) == 2
    cluster.delete("jobs", "gone")
    cluster.settle()
    assert pods_of(cluster, "gone") == []


#: The Job of Koordinator's "Batch Workload Colocation Quick Start Guide"
#: (``best-practices/batch-colocation-quick-start``, "Method 2: Manual Configuration"), as the
#: page gives it; ``{runtime}`` is where a test adds the simulated run time.
MANUAL_BATCH_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: manual-batch-job
  namespace: batch-demo
spec:
  completions: 1
  template:
    metadata:
      labels:
        koordinator.sh/qosClass: BE  # Explicitly set QoS{runtime}
    spec:
      priorityClassName: koord-batch  # Explicitly set priority
      schedulerName: koord-scheduler  # Use Koordinator scheduler
      containers:
      - name: worker
        image: python:3.9
        command: ["python", "-c", "print('Hello from batch job'); import time; time.sleep(30)"]
        resources:
          requests:
            kubernetes.io/batch-cpu: "1000"     # Use batch resources
            kubernetes.io/batch-memory: "2Gi"
          limits:
            kubernetes.io/batch-cpu: "1000"
            kubernetes.io/batch-memory: "2Gi"
      restartPolicy: Never
"""

#: The page's node ("Check Node Resources": 8 cores, 16 GiB, batch resources on offer).
COLOCATED_NODE = node(
    "node-0",
    cpu="8",
    memory="16Gi",
    extra={"kubernetes.io/batch-cpu": "15000", "kubernetes.io/batch-memory": "20Gi"},
)


def test_the_colocation_quick_start_job_runs_its_batch_pod() -> None:
    """``kubectl apply -f manual-batch-job.yaml``: the Job runs one BE pod on batch resources."""
    out = replay(COLOCATED_NODE, MANUAL_BATCH_JOB.format(runtime=""))
    [pod] = out.all("Pod")
    assert isinstance(pod, Pod)
    assert pod.metadata.namespace == "batch-demo"
    assert pod.metadata.name.startswith("manual-batch-job-")
    assert pod.metadata.labels["koordinator.sh/qosClass"] == "BE"
    assert pod.metadata.labels["job-name"] == "manual-batch-job"
    assert (pod.spec.node_name, pod.status.phase) == ("node-0", "Running")
    requests = pod.spec.containers[0].resources.requests
    assert requests["kubernetes.io/batch-cpu"] == 1000
    status = out.wire("Job", "manual-batch-job", "batch-demo")["status"]
    assert (status["active"], status["ready"]) == (1, 1)
    assert "startTime" in status
    assert "conditions" not in status


def test_the_colocation_quick_start_job_completes_after_its_run() -> None:
    """The same Job, its 30 s sleep simulated: ``COMPLETIONS 1/1`` once the pod is done."""
    runtime = "\n      annotations:\n        koordpy.io/simulated-runtime: 30s"
    out = replay(COLOCATED_NODE, MANUAL_BATCH_JOB.format(runtime=runtime))
    done = out.get("Job", "manual-batch-job", "batch-demo")
    assert isinstance(done, Job)
    assert done.status.succeeded == 1
    assert done.status.start_time is not None
    assert done.status.completion_time == done.status.start_time + timedelta(seconds=30)
    [pod] = out.all("Pod")
    assert isinstance(pod, Pod)
    assert pod.status.phase == "Succeeded"


# --- the pod failure backoff -----------------------------------------------------------------


def ended(owner: Job, name: str, phase: str, at: timedelta) -> Pod:
    pod = job_pod(owner, name, phase=phase)
    ready = Condition(type="Ready", status="False", last_transition_time=NOW + at)
    return replace(pod, status=replace(pod.status, conditions=(ready,)))


def test_the_backoff_doubles_and_is_capped() -> None:
    at = NOW
    assert creation_delay(PodBackoff(failures=1, last_failure=at), at) == timedelta(seconds=10)
    assert creation_delay(PodBackoff(failures=3, last_failure=at), at) == timedelta(seconds=40)
    assert creation_delay(PodBackoff(failures=30, last_failure=at), at) == timedelta(minutes=10)
    later = at + timedelta(seconds=25)
    assert creation_delay(PodBackoff(failures=2, last_failure=at), later) == timedelta(0)
    assert creation_delay(PodBackoff(), at) == timedelta(0)


def test_a_success_resets_the_backoff_to_the_failures_after_it() -> None:
    pi = job()
    early = ended(pi, "pi-a", "Failed", timedelta(seconds=1))
    success = ended(pi, "pi-b", "Succeeded", timedelta(seconds=2))
    late = ended(pi, "pi-c", "Failed", timedelta(seconds=3))
    record = next_backoff(PodBackoff(failures=4, last_failure=NOW), [success], [early, late])
    assert record == PodBackoff(failures=1, last_failure=NOW + timedelta(seconds=3))
    assert next_backoff(record, [success], []) == PodBackoff()
    grown = next_backoff(record, [], [early])
    assert grown == PodBackoff(failures=2, last_failure=NOW + timedelta(seconds=1))


def test_creation_waits_for_the_backoff() -> None:
    pi = job(status={"startTime": NOW.isoformat()})
    record = PodBackoff(failures=2, last_failure=NOW - timedelta(seconds=5))
    plan = plan_batch_job(pi, [], NOW, record)
    assert plan.create == []
    assert plan.wake_at == NOW + timedelta(seconds=15)
    assert len(plan_batch_job(pi, [], NOW + timedelta(seconds=15), record).create) == 1


def test_only_pods_not_counted_yet_are_new() -> None:
    pi = job(status={"uncountedTerminatedPods": {"failed": ["uid-pi-a"]}})
    counted = job_pod(pi, "pi-a", phase="Failed")
    fresh = job_pod(pi, "pi-b", phase="Failed")
    evicted = job_pod(pi, "pi-c", deleting=True)
    done = job_pod(pi, "pi-d", phase="Succeeded")
    released = job_pod(pi, "pi-e", phase="Failed", tracked=False)
    succeeded, failed = newly_ended(pi, [counted, fresh, evicted, done, released])
    assert [p.metadata.name for p in succeeded] == ["pi-d"]
    assert [p.metadata.name for p in failed] == ["pi-b", "pi-c"]
    assert finished_at(evicted) == NOW


def test_a_job_managed_by_another_controller_is_left_alone() -> None:
    out = replay(node("node-0"), pi_job("kueued", "  managedBy: kueue.x-k8s.io/multikueue"))
    assert out.all("Pod") == []
    assert out.wire("Job", "kueued").get("status", {}) == {}
    ours = pi_job("ours", "  managedBy: kubernetes.io/job-controller")
    out = replay(node("node-0"), ours)
    assert out.wire("Job", "ours")["status"]["succeeded"] == 1


def test_an_indexed_job_removes_a_duplicate_index_before_adding_pods() -> None:
    pi = job(parallelism=2, completions=2, completionMode="Indexed")
    pi = replace(pi, status=replace(pi.status, start_time=NOW))
    twins = [job_pod(pi, "pi-0-a", index=0), job_pod(pi, "pi-0-b", index=0)]
    plan = plan_batch_job(pi, twins, NOW)
    assert [p.metadata.name for p in plan.delete] == ["pi-0-b"]
    assert plan.create == []
    plan = plan_batch_job(pi, twins[:1], NOW)
    [new] = plan.create
    assert new.metadata.annotations[INDEX] == "1"


async def test_a_job_runs_in_a_live_controller_and_goes_with_its_pods() -> None:
    """As ``koordpy up`` runs the loops under the real clock."""
    async with Store() as store:
        runner = LoopRunner(store, build_loops(), idle_interval=3600)
        task = asyncio.create_task(runner.run(), name="control-loops")
        pods_kind = store.registry.for_type(Pod)
        jobs_kind = store.registry.for_type(Job)

        def pods() -> list[Pod]:
            items, _ = store.list(pods_kind, namespace="default")
            return [p for p in items if isinstance(p, Pod)]

        def ready() -> bool:
            found = store.get(jobs_kind, "live", "default")
            return isinstance(found, Job) and found.status.ready == 2

        async def until(done: Callable[[], bool]) -> None:
            async with asyncio.timeout(30):
                while not done():
                    await store.changed(store.resource_version)

        try:
            for text in (node("node-0"), pi_job("live", "  parallelism: 2", runtime="1h")):
                for obj in codec.decode_documents(text):
                    store.apply(obj)
            await until(ready)
            assert [p.status.phase for p in pods()] == ["Running", "Running"]
            store.delete(jobs_kind, "live", "default")
            await until(lambda: pods() == [])
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
