"""The ``jobs`` loop: job -> QueueUnit, run on admission, report back, finish, evict, delete
(queue-spec §4, §9, §16 Example F, §17 items 1-3 and 12-15, the job-side halves).

The admission engine is played by the tests: they write the unit's phase and admissions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

import msgspec
import pytest

from apis import constants as k
from apis.core import (
    Event,
    Job,
    Node,
    NodeStatus,
    Pod,
    PodSpec,
    PriorityClass,
    PyTorchJob,
    TFJob,
    Toleration,
)
from apis.meta import Object, ObjectMeta
from apis.queueing import AdmissionCheckState, PodSetUpdate, QueueUnit, ReclaimState
from apis.resources import ResourceList
from controller.api.apply import apply as kubectl_apply
from controller.loops import LoopContext
from controller.queueing import phases
from controller.queueing.jobcontroller import JobController, gate_pods, make_pod
from controller.queueing.jobs import EXTENSIONS
from controller.queueing.jobs.batchjob import Args as BatchArgs
from controller.queueing.podlifecycle import PodLifecycle
from controller.scheduler.loop import SchedulerLoop
from controller.simulate import simulate
from controller.store.cluster import Outcome
from controller.store.sqlite import Store
from tests.controller.queueing.jobs import (
    GI,
    Clock,
    admit,
    batch_job,
    evict,
    pytorch_job,
    template,
    tf_job,
)

replace = msgspec.structs.replace


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened


class Harness:
    """The jobs loop over a store, with the engine's and the kubelet's writes done by hand."""

    def __init__(self, store: Store, clock: Clock, loop: JobController | None = None) -> None:
        self.store = store
        self.clock = clock
        self.loop = loop or JobController()
        self.ctx = LoopContext(store=store, now=clock)

    def run(self) -> float | None:
        """Passes until the loop changes nothing; the wait it asked for last."""
        for _ in range(10):
            before = self.store.resource_version
            wait = self.loop.reconcile(self.ctx)
            if self.store.resource_version == before:
                return wait
        raise AssertionError("the jobs loop does not settle")

    def unit(self, name: str) -> QueueUnit:
        found = self.store.get(self.store.registry.for_type(QueueUnit), name, "team-a")
        assert isinstance(found, QueueUnit)
        return found

    def units(self) -> list[QueueUnit]:
        items, _ = self.store.list(self.store.registry.for_type(QueueUnit))
        return [u for u in items if isinstance(u, QueueUnit)]

    def pods(self) -> dict[str, Pod]:
        items, _ = self.store.list(self.store.registry.for_type(Pod))
        return {p.metadata.name: p for p in items if isinstance(p, Pod)}

    def gates(self) -> dict[str, str]:
        return {
            name: pod.metadata.labels.get(k.LABEL_SCHEDULE_ADMISSION, "")
            for name, pod in self.pods().items()
        }

    def job(self, struct: type[Object], name: str) -> Object:
        return self.store.get(self.store.registry.for_type(struct), name, "team-a")

    def engine(self, name: str, change: Callable[[QueueUnit], QueueUnit]) -> None:
        self.store.update(change(self.unit(name)))

    def admit(self, name: str, **replicas: int) -> None:
        self.engine(name, lambda u: admit(u, self.clock(), **replicas))

    def kubelet(self, pod_name: str, *, node: str = "n1", phase: str = "Running") -> None:
        pod = self.pods()[pod_name]
        self.store.update(
            replace(
                pod,
                spec=replace(pod.spec, node_name=node or pod.spec.node_name),
                status=replace(pod.status, phase=phase),
            )
        )


@pytest.fixture
def harness(store: Store, clock: Clock) -> Harness:
    return Harness(store, clock)


# --- §17.1-3: job -> QueueUnit --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parallelism", "completions", "succeeded", "count"),
    [
        (2, 4, 0, 2),
        (2, 4, 3, 1),
        (5, 3, 0, 3),
        (3, None, 0, 3),
        (None, None, 0, 1),
    ],
)
def test_suspended_batch_job_gets_an_enqueued_unit(
    harness: Harness,
    parallelism: int | None,
    completions: int | None,
    succeeded: int,
    count: int,
) -> None:
    job = batch_job(
        parallelism=parallelism,
        completions=completions,
        annotations={"team": "vision"},
        labels={"app": "train"},
    )
    job = replace(job, status=replace(job.status, succeeded=succeeded))
    stored = kubectl_apply(harness.store, job)[0]
    harness.run()
    unit = harness.unit("train")
    assert unit.metadata.namespace == "team-a"
    [owner] = unit.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Job",
        "train",
        stored.metadata.uid,
        True,
    )
    assert unit.metadata.labels == {k.LABEL_QUOTA_NAME: "team-a", "app": "train"}
    assert unit.metadata.annotations == {"team": "vision"}
    assert unit.status.phase == phases.ENQUEUED
    assert unit.status.message == "Enqueued"
    assert unit.status.last_update_time == harness.clock()
    assert {c.type: c.status for c in unit.status.conditions} == {
        "QuotaReserved": "False",
        "Admitted": "False",
    }
    assert unit.spec.consumer_ref is not None
    assert (unit.spec.consumer_ref.kind, unit.spec.consumer_ref.name) == ("Job", "train")
    [pod_set] = unit.spec.pod_set
    assert (pod_set.name, pod_set.count) == ("train", count)
    assert unit.spec.resource == ResourceList({"cpu": 1000 * count, "memory": GI * count})
    assert unit.spec.request == unit.spec.resource


def test_unsuspended_job_gets_no_unit(harness: Harness) -> None:
    kubectl_apply(harness.store, batch_job(suspend=None))
    kubectl_apply(harness.store, batch_job("started", suspend=False))
    harness.run()
    assert harness.units() == []
    assert harness.pods() == {}


def test_started_job_suspended_later_gets_no_unit(harness: Harness) -> None:
    job = batch_job()
    job = replace(job, status=replace(job.status, start_time=harness.clock()))
    kubectl_apply(harness.store, job)
    harness.run()
    assert harness.units() == []


def test_batch_job_unit_spec_from_annotations(harness: Harness) -> None:
    kubectl_apply(
        harness.store,
        batch_job(
            parallelism=4,
            completions=8,
            annotations={
                k.ANNOTATION_KUEUE_JOB_MIN_PARALLELISM: "2",
                k.ANNOTATION_QUEUE_ACTIVE: "false",
                k.ANNOTATION_QUEUE_MAX_EXEC_TIME_SECONDS: "600",
            },
            pod_template=template(limits_only=True),
        ),
    )
    harness.run()
    unit = harness.unit("train")
    [pod_set] = unit.spec.pod_set
    assert (pod_set.count, pod_set.min_count) == (4, 2)
    [container] = pod_set.template.spec.containers
    assert container.resources.requests == container.resources.limits
    assert unit.spec.active is False
    assert unit.spec.maximum_execution_time_seconds == 600


@pytest.mark.parametrize(
    ("make", "unit_name"),
    [
        (lambda: tf_job(worker_class="team-high"), "mnist-tf-qu"),
        (lambda: pytorch_job(worker_class="team-high"), "ddp-py-qu"),
    ],
    ids=["tfjob", "pytorchjob"],
)
def test_kubeflow_unit_name_priority_and_stamped_templates(
    harness: Harness, make: Callable[[], TFJob | PyTorchJob], unit_name: str
) -> None:
    kubectl_apply(harness.store, PriorityClass(metadata=ObjectMeta(name="team-high"), value=8000))
    made = make()
    kubectl_apply(harness.store, made)
    harness.run()
    unit = harness.unit(unit_name)
    assert unit.spec.priority == 8000
    assert unit.spec.priority_class_name == "team-high"
    assert [(s.name, s.count) for s in unit.spec.pod_set] == [("master", 1), ("worker", 2)]
    worker = unit.spec.pod_set[1].template.metadata
    assert worker.annotations[k.ANNOTATION_RELATED_QUEUEUNIT] == f"team-a/{unit_name}"
    assert worker.annotations[k.ANNOTATION_RELATED_PODSET_NAME] == "worker"
    assert worker.labels[k.LABEL_SCHEDULE_ADMISSION] == "false"
    master = unit.spec.pod_set[0].template.metadata
    assert k.ANNOTATION_RELATED_QUEUEUNIT not in master.annotations
    # the job's own worker template carries the same stamps, and its Queuing condition is set
    job = harness.job(type(made), made.metadata.name)
    assert isinstance(job, TFJob | PyTorchJob)
    specs = job.spec.tf_replica_specs if isinstance(job, TFJob) else job.spec.pytorch_replica_specs
    assert specs["Worker"].template.metadata.labels == worker.labels
    conditions = {c.type: c.status for c in job.status.conditions}
    assert conditions[k.CONDITION_JOB_QUEUING] == "True"


@pytest.mark.parametrize(
    ("worker_class", "classes", "priority"),
    [
        ("koord-batch", {}, 5500),
        ("koord-batch", {"koord-batch": 5100}, 5100),
        ("unknown-class", {}, 0),
        ("", {"everyone": 42}, 42),
    ],
    ids=["builtin", "object-wins", "unknown", "global-default"],
)
def test_unit_priority_sources(
    harness: Harness, worker_class: str, classes: dict[str, int], priority: int
) -> None:
    for name, value in classes.items():
        kubectl_apply(
            harness.store,
            PriorityClass(
                metadata=ObjectMeta(name=name), value=value, global_default=name == "everyone"
            ),
        )
    kubectl_apply(harness.store, pytorch_job(worker_class=worker_class, master_class="koord-prod"))
    harness.run()
    assert harness.unit("ddp-py-qu").spec.priority == priority


# --- running an admitted job ----------------------------------------------------------------------


def test_admitted_job_is_resumed_and_gets_gated_pods(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=4))
    harness.run()
    harness.admit("ddp-py-qu", master=1, worker=2)
    harness.run()
    job = harness.job(PyTorchJob, "ddp")
    assert isinstance(job, PyTorchJob)
    assert job.metadata.annotations[k.ANNOTATION_QUEUE_SUSPEND] == "false"
    assert k.ANNOTATION_JOB_DEQUEUE_TIMESTAMP in job.metadata.annotations
    assert {c.type: c.status for c in job.status.conditions}[k.CONDITION_JOB_QUEUING] == "False"
    assert harness.gates() == {
        "ddp-master-0": "true",
        "ddp-worker-0": "true",
        "ddp-worker-1": "true",
        "ddp-worker-2": "false",
        "ddp-worker-3": "false",
    }
    pod = harness.pods()["ddp-worker-1"]
    assert pod.metadata.labels[k.LABEL_QUOTA_NAME] == "team-a"
    assert pod.metadata.annotations[k.ANNOTATION_RELATED_QUEUEUNIT] == "team-a/ddp-py-qu"
    [owner] = pod.metadata.owner_references
    assert (owner.kind, owner.name, owner.controller) == ("PyTorchJob", "ddp", True)


def test_batch_job_resume_sets_suspend_false_and_start_time(harness: Harness) -> None:
    kubectl_apply(harness.store, batch_job())
    harness.run()
    harness.admit("train")
    harness.run()
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert job.spec.suspend is False
    assert job.status.start_time == harness.clock()
    assert job.status.active == 2
    assert sorted(harness.pods()) == ["train-0", "train-1"]


def test_beside_the_job_kinds_own_controllers_only_suspend_and_the_unit_are_written(
    store: Store, clock: Clock
) -> None:
    """On Kubernetes the Job controller makes the pods and writes the Job's status: the queue
    releases and holds the Job through ``spec.suspend`` alone and reports from its pods."""
    harness = Harness(store, clock, JobController(own_pods=False))
    kubectl_apply(harness.store, batch_job())
    harness.run()
    assert [u.status.phase for u in harness.units()] == [phases.ENQUEUED]
    harness.admit("train")
    harness.run()
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert job.spec.suspend is False
    assert job.status.start_time is None  # the Job controller's to write
    assert job.status.conditions == ()
    assert harness.pods() == {}
    # the Job controller's pods, bound and running, make the unit Running
    unit = harness.unit("train")
    for index in range(2):
        harness.store.create(make_pod(EXTENSIONS["job"], job, unit, unit.spec.pod_set[0], index))
    harness.kubelet("train-0")
    harness.run()
    unit = harness.unit("train")
    assert unit.status.phase == phases.RUNNING
    assert unit.status.pod_state.running == 1
    # evicted: suspended again; the pods are left to the Job controller
    harness.engine("train", lambda u: evict(u, harness.clock(), phases.EVICTED_PREEMPTED))
    harness.run()
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert job.spec.suspend is True
    assert job.status.conditions == ()
    assert set(harness.pods()) == {"train-0", "train-1"}


def test_batch_job_pods_carry_the_labels_kubernetes_gives_them(harness: Harness) -> None:
    stored = kubectl_apply(harness.store, batch_job())[0]
    harness.run()
    harness.admit("train")
    harness.run()
    uid = stored.metadata.uid
    for pod in harness.pods().values():
        labels = pod.metadata.labels
        assert labels["job-name"] == "train"
        assert labels["batch.kubernetes.io/job-name"] == "train"
        assert labels["controller-uid"] == uid
        assert labels["batch.kubernetes.io/controller-uid"] == uid
        assert "batch.kubernetes.io/job-completion-index" not in labels


def test_indexed_batch_job_pods_carry_their_completion_index(harness: Harness) -> None:
    job = batch_job()
    job = replace(job, spec=replace(job.spec, completion_mode="Indexed"))
    kubectl_apply(harness.store, job)
    harness.run()
    harness.admit("train")
    harness.run()
    pods = harness.pods()
    indexes = {
        name: (
            pod.metadata.labels["batch.kubernetes.io/job-completion-index"],
            pod.metadata.annotations["batch.kubernetes.io/job-completion-index"],
        )
        for name, pod in pods.items()
    }
    assert indexes == {"train-0": ("0", "0"), "train-1": ("1", "1")}


def test_other_job_kinds_get_no_batch_labels(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=1))
    harness.run()
    harness.admit("ddp-py-qu", master=1, worker=1)
    harness.run()
    for pod in harness.pods().values():
        assert "job-name" not in pod.metadata.labels
        assert "batch.kubernetes.io/controller-uid" not in pod.metadata.labels


def test_pod_set_updates_of_admission_checks_are_applied(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=1))
    harness.run()
    toleration = Toleration(key="pool", operator="Equal", value="spot", effect="NoSchedule")
    update = PodSetUpdate(
        name="worker",
        labels={"pool": "spot"},
        annotations={"provreq": "attempt-1"},
        node_selector={"node-pool": "spot"},
        tolerations=(toleration,),
    )
    check = AdmissionCheckState(name="prov", state="Ready", pod_set_updates=(update,))

    def admitted_with_check(unit: QueueUnit) -> QueueUnit:
        unit = admit(unit, harness.clock())
        return replace(unit, status=replace(unit.status, admission_checks=(check,)))

    harness.engine("ddp-py-qu", admitted_with_check)
    harness.run()
    worker = harness.pods()["ddp-worker-0"]
    assert worker.metadata.labels["pool"] == "spot"
    assert worker.metadata.annotations["provreq"] == "attempt-1"
    assert worker.spec.node_selector == {"node-pool": "spot"}
    assert worker.spec.tolerations == (toleration,)
    master = harness.pods()["ddp-master-0"]
    assert "pool" not in master.metadata.labels
    assert master.spec.node_selector == {}


def test_gated_pods_are_not_scheduled(store: Store, clock: Clock) -> None:
    harness = Harness(store, clock)
    store.apply(
        Node(
            metadata=ObjectMeta(name="n1"),
            status=NodeStatus(
                allocatable=ResourceList({"cpu": 64_000, "memory": 256 * GI, "pods": 110})
            ),
        )
    )
    store.apply(pytorch_job(workers=3))
    harness.run()
    harness.admit("ddp-py-qu", master=1, worker=1)
    harness.run()
    SchedulerLoop().reconcile(harness.ctx)
    bound = {name for name, pod in harness.pods().items() if pod.spec.node_name}
    assert bound == {"ddp-master-0", "ddp-worker-0"}


def _gated(name: str, index: int, gate: str, node: str = "") -> Pod:
    labels = {k.LABEL_JOB_REPLICA_INDEX: str(index), k.LABEL_SCHEDULE_ADMISSION: gate}
    return Pod(metadata=ObjectMeta(name=name, labels=labels), spec=PodSpec(node_name=node))


@pytest.mark.parametrize(
    ("replicas", "changed"),
    [
        # p3 is bound and takes one replica; p1 is already open and keeps the other
        (2, {}),
        (3, {"p0": "true"}),
        (4, {"p0": "true", "p2": "true"}),
        # fewer replicas: the open unbound pod is shut; the bound one is never touched
        (1, {"p1": "false"}),
        (0, {"p1": "false"}),
    ],
)
def test_gate_prefers_pods_already_open_and_never_touches_bound_ones(
    replicas: int, changed: dict[str, str]
) -> None:
    pods = [
        _gated("p0", 0, "false"),
        _gated("p1", 1, "true"),
        _gated("p2", 2, "false"),
        _gated("p3", 3, "true", node="n1"),
    ]
    got = {
        p.metadata.name: p.metadata.labels[k.LABEL_SCHEDULE_ADMISSION]
        for p in gate_pods(pods, replicas)
    }
    assert got == changed


def test_reporter_counts_bound_pods_and_raises_replicas(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=3))
    harness.run()
    harness.admit("ddp-py-qu", master=1, worker=1)
    harness.run()
    harness.kubelet("ddp-worker-0", phase="Pending")
    # a pod bound outside the admission (a scheduler that ignores the label) is counted
    harness.kubelet("ddp-worker-2", phase="Pending")
    harness.run()
    unit = harness.unit("ddp-py-qu")
    by_name = {a.name: a for a in unit.status.admissions}
    assert (by_name["worker"].replicas, by_name["worker"].running) == (2, 2)
    assert (by_name["master"].replicas, by_name["master"].running) == (1, 0)
    assert unit.status.phase == phases.DEQUEUED  # nothing runs yet
    harness.kubelet("ddp-master-0")
    harness.run()
    unit = harness.unit("ddp-py-qu")
    assert unit.status.phase == phases.RUNNING
    assert {c.type: c.status for c in unit.status.conditions}["PodsReady"] == "True"


# --- §17.13: the job ends -------------------------------------------------------------------------


def test_job_success_releases_the_admission(harness: Harness) -> None:
    kubectl_apply(harness.store, batch_job(parallelism=2, completions=2))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0")
    harness.kubelet("train-1")
    harness.run()
    assert harness.unit("train").status.phase == phases.RUNNING
    harness.kubelet("train-0", phase="Succeeded")
    harness.run()
    unit = harness.unit("train")
    # one pod finished: the pod set shrinks to the live pod (its quota is released)
    assert [(a.name, a.replicas, a.running) for a in unit.status.admissions] == [("train", 1, 1)]
    harness.kubelet("train-1", phase="Succeeded")
    harness.run()
    unit = harness.unit("train")
    assert unit.status.phase == phases.SUCCEED
    assert unit.status.admissions == ()
    assert {c.type: c.status for c in unit.status.conditions}["Finished"] == "True"
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert (job.status.succeeded, job.status.active) == (2, 0)
    assert {c.type for c in job.status.conditions if c.status == "True"} >= {"Complete"}
    assert job.status.completion_time == harness.clock()


def test_job_failure_marks_the_unit_failed(harness: Harness) -> None:
    job = batch_job(parallelism=1, completions=1)
    kubectl_apply(harness.store, replace(job, spec=replace(job.spec, backoff_limit=0)))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0", phase="Failed")
    harness.run()
    unit = harness.unit("train")
    assert unit.status.phase == phases.FAILED
    assert unit.status.admissions == ()
    stored = harness.job(Job, "train")
    assert isinstance(stored, Job)
    assert [c.reason for c in stored.status.conditions if c.type == "Failed"] == [
        "BackoffLimitExceeded"
    ]


def _ends(job: Object) -> list[tuple[str, str, str, str]]:
    assert isinstance(job, Job)
    return [(c.type, c.status, c.reason, c.message) for c in job.status.conditions]


def test_a_queue_job_completes_with_the_conditions_kubernetes_writes(harness: Harness) -> None:
    """As the standalone Job controller (and Kubernetes v1.35): ``SuccessCriteriaMet`` first,
    then ``Complete``, both reason ``CompletionsReached``, at the same moment."""
    kubectl_apply(harness.store, batch_job(parallelism=1, completions=1))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0")
    harness.run()
    harness.clock.advance(30)
    harness.kubelet("train-0", phase="Succeeded")
    harness.run()
    job = harness.job(Job, "train")
    message = "Reached expected number of succeeded pods"
    assert _ends(job) == [
        ("SuccessCriteriaMet", "True", "CompletionsReached", message),
        ("Complete", "True", "CompletionsReached", message),
    ]
    assert isinstance(job, Job)
    assert {c.last_transition_time for c in job.status.conditions} == {harness.clock()}
    assert job.status.completion_time == harness.clock()
    harness.run()
    assert _ends(harness.job(Job, "train")) == _ends(job)  # written once


def test_a_queue_job_over_its_backoff_limit_fails_as_kubernetes_writes(harness: Harness) -> None:
    job = batch_job(parallelism=1, completions=1)
    kubectl_apply(harness.store, replace(job, spec=replace(job.spec, backoff_limit=0)))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0", phase="Failed")
    harness.run()
    message = "Job has reached the specified backoff limit"
    assert _ends(harness.job(Job, "train")) == [
        ("FailureTarget", "True", "BackoffLimitExceeded", message),
        ("Failed", "True", "BackoffLimitExceeded", message),
    ]
    assert harness.unit("train").status.phase == phases.FAILED


def test_the_queue_marks_the_batch_jobs_it_enqueues(harness: Harness) -> None:
    kubectl_apply(harness.store, batch_job())
    kubectl_apply(harness.store, batch_job("free", suspend=False))
    harness.run()
    assert harness.job(Job, "train").metadata.annotations[k.ANNOTATION_JOB_HAS_ENQUEUED] == "true"
    assert k.ANNOTATION_JOB_HAS_ENQUEUED not in harness.job(Job, "free").metadata.annotations


def test_reapplying_a_released_job_as_submitted_keeps_it_running(harness: Harness) -> None:
    """The manifest says ``suspend: true`` (how it waits for the queue); applied again after
    the queue released the Job, the Job stays released and its pods stay."""
    kubectl_apply(harness.store, batch_job(parallelism=1, completions=1))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0")
    harness.run()
    _, outcome = kubectl_apply(harness.store, batch_job(parallelism=1, completions=1))
    harness.run()
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert job.spec.suspend is False
    assert outcome is Outcome.UNCHANGED
    assert set(harness.pods()) == {"train-0"}
    assert harness.unit("train").status.phase == phases.RUNNING


def test_a_job_that_ran_without_the_queue_is_suspended_by_apply(harness: Harness) -> None:
    """Created ``suspend: false`` and started: applying ``suspend: true`` suspends it, and the
    queue does not take it (it was never held)."""
    started = batch_job("free", suspend=False)
    started = replace(started, status=replace(started.status, start_time=harness.clock()))
    kubectl_apply(harness.store, started)
    harness.run()
    kubectl_apply(harness.store, batch_job("free", suspend=True))
    harness.run()
    job = harness.job(Job, "free")
    assert isinstance(job, Job)
    assert job.spec.suspend is True
    assert harness.units() == []


def _job_events(harness: Harness, name: str) -> list[tuple[str, str, str, int]]:
    items, _ = harness.store.list(harness.store.registry.for_type(Event))
    about = [
        e
        for e in items
        if isinstance(e, Event)
        and (e.involved_object.kind, e.involved_object.name) == ("Job", name)
    ]
    about.sort(key=lambda e: (e.first_timestamp or harness.clock(), e.reason, e.message))
    return [(e.type, e.reason, e.message, e.count) for e in about]


def test_a_queue_job_records_what_kubernetes_job_controller_records(harness: Harness) -> None:
    """Its pods, an eviction's suspension and the resumption after, and the end."""
    kubectl_apply(harness.store, batch_job(parallelism=1, completions=1))
    harness.run()
    assert _job_events(harness, "train") == []  # held: nothing yet
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0")
    harness.run()
    harness.clock.advance(10)
    harness.engine("train", lambda u: evict(u, harness.clock()))
    harness.run()
    harness.clock.advance(10)
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0", phase="Succeeded")
    harness.run()
    assert _job_events(harness, "train") == [
        ("Normal", "SuccessfulCreate", "Created pod: train-0", 2),  # made again: a repeat
        ("Normal", "SuccessfulDelete", "Deleted pod: train-0", 1),
        ("Normal", "Suspended", "Job suspended", 1),
        ("Normal", "Completed", "Job completed", 1),
        ("Normal", "Resumed", "Job resumed", 1),
    ]


def test_a_failed_queue_job_records_the_reason(harness: Harness) -> None:
    job = batch_job(parallelism=1, completions=1)
    kubectl_apply(harness.store, replace(job, spec=replace(job.spec, backoff_limit=0)))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0", phase="Failed")
    harness.run()
    assert _job_events(harness, "train") == [
        ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit", 1),
        ("Normal", "SuccessfulCreate", "Created pod: train-0", 1),
    ]


def test_kubeflow_job_succeeds_when_its_master_does(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=2))
    harness.run()
    harness.admit("ddp-py-qu")
    harness.run()
    for name in ("ddp-master-0", "ddp-worker-0", "ddp-worker-1"):
        harness.kubelet(name)
    harness.run()
    harness.kubelet("ddp-master-0", phase="Succeeded")
    harness.run()
    assert harness.unit("ddp-py-qu").status.phase == phases.SUCCEED
    job = harness.job(PyTorchJob, "ddp")
    assert isinstance(job, PyTorchJob)
    assert {c.type: c.status for c in job.status.conditions}["Succeeded"] == "True"
    # the workers that still ran are cleaned up
    assert set(harness.pods()) == {"ddp-master-0"}


# --- §17.12: running timeout and backoff ----------------------------------------------------------


def test_running_timeout_backs_off_then_requeues(store: Store, clock: Clock) -> None:
    loop = JobController(args={"job": BatchArgs(running_timeout="60s", backoff_timeout="30s")})
    harness = Harness(store, clock, loop)
    store.apply(batch_job())
    harness.run()
    harness.admit("train")
    assert harness.run() == pytest.approx(60.0)
    assert len(harness.pods()) == 2
    clock.advance(60)
    wait = harness.run()
    unit = harness.unit("train")
    assert unit.status.phase == phases.TIMEOUT_BACKOFF
    assert unit.status.message == "Backoff due to running timeout"
    assert unit.status.admissions == ()
    evicted = {c.type: (c.status, c.reason) for c in unit.status.conditions}["Evicted"]
    assert evicted == ("True", "BackoffTimeout")
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert job.spec.suspend is True
    assert harness.pods() == {}
    assert wait == pytest.approx(30.0)
    clock.advance(30)
    harness.run()
    unit = harness.unit("train")
    assert unit.status.phase == phases.ENQUEUED
    assert unit.status.message == "Enqueued because backoff timeout"


def test_running_pods_stop_the_running_timeout(store: Store, clock: Clock) -> None:
    loop = JobController(args={"job": BatchArgs(running_timeout="60s")})
    harness = Harness(store, clock, loop)
    store.apply(batch_job())
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0")
    harness.run()
    clock.advance(120)
    harness.run()
    assert harness.unit("train").status.phase == phases.RUNNING


# --- §17.14-15: deletion and eviction -------------------------------------------------------------


def test_deleting_the_job_deletes_its_unit_and_pods(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job())
    harness.run()
    harness.admit("ddp-py-qu")
    harness.run()
    assert harness.pods()
    harness.store.delete(harness.store.registry.for_type(PyTorchJob), "ddp", "team-a")
    harness.run()
    assert harness.units() == []
    assert harness.pods() == {}


@pytest.mark.parametrize("reason", [phases.EVICTED_DEACTIVATED, phases.EVICTED_PREEMPTED])
def test_evicted_unit_suspends_the_job_and_deletes_unfinished_pods(
    harness: Harness, reason: str
) -> None:
    kubectl_apply(harness.store, batch_job(parallelism=2, completions=3))
    harness.run()
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0", phase="Succeeded")
    harness.kubelet("train-1")
    harness.run()
    harness.engine("train", lambda u: evict(u, harness.clock(), reason))
    harness.run()
    job = harness.job(Job, "train")
    assert isinstance(job, Job)
    assert job.spec.suspend is True
    assert {c.type: c.status for c in job.status.conditions}["Suspended"] == "True"
    # the finished pod stays (it counts toward completions); the running one is gone
    assert set(harness.pods()) == {"train-0"}
    unit = harness.unit("train")
    assert unit.status.phase == phases.ENQUEUED
    assert {c.type: c.reason for c in unit.status.conditions}["Evicted"] == reason
    # admitted again: two of the three completions are left, run side by side
    harness.admit("train")
    harness.run()
    assert harness.unit("train").spec.pod_set[0].count == 2
    assert set(harness.pods()) == {"train-0", "train-1", "train-2"}


def test_deactivation_annotation_sets_spec_active_false(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job())
    harness.run()
    assert harness.unit("ddp-py-qu").spec.active is None
    job = harness.job(PyTorchJob, "ddp")
    notes = {**job.metadata.annotations, k.ANNOTATION_QUEUE_ACTIVE: "false"}
    harness.store.update(replace(job, metadata=replace(job.metadata, annotations=notes)))
    harness.run()
    assert harness.unit("ddp-py-qu").spec.active is False


def test_legacy_preempted_phase_is_requeued(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job())
    harness.run()
    harness.admit("ddp-py-qu")
    harness.run()

    def preempted(unit: QueueUnit) -> QueueUnit:
        return replace(unit, status=replace(unit.status, phase=phases.PREEMPTED))

    harness.engine("ddp-py-qu", preempted)
    harness.run()
    unit = harness.unit("ddp-py-qu")
    assert (unit.status.phase, unit.status.message) == (
        phases.ENQUEUED,
        "Enqueued after preempted",
    )
    assert unit.status.admissions == ()
    assert harness.pods() == {}


# --- §16 Example F: replica-level admission, scale up and down ------------------------------------


def _scale(harness: Harness, workers: int) -> None:
    job = harness.job(PyTorchJob, "ddp")
    assert isinstance(job, PyTorchJob)
    specs = dict(job.spec.pytorch_replica_specs)
    specs["Worker"] = replace(specs["Worker"], replicas=workers)
    harness.store.update(replace(job, spec=replace(job.spec, pytorch_replica_specs=specs)))


def _workers(harness: Harness) -> dict[str, str]:
    return {n: g for n, g in harness.gates().items() if "worker" in n}


def test_example_f_scale_up_then_down(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=8, master=False))
    harness.run()
    harness.admit("ddp-py-qu", worker=8)
    harness.run()
    assert list(_workers(harness).values()) == ["true"] * 8
    # scale 8 -> 12: the unit asks for 12, four new pods wait gated
    _scale(harness, 12)
    harness.run()
    unit = harness.unit("ddp-py-qu")
    assert unit.spec.pod_set[0].count == 12
    assert not phases.is_satisfied(unit)
    gates = _workers(harness)
    assert sorted(n for n, g in gates.items() if g == "false") == [
        "ddp-worker-10",
        "ddp-worker-11",
        "ddp-worker-8",
        "ddp-worker-9",
    ]
    # the engine admits the 4 outstanding replicas: they are ungated
    harness.admit("ddp-py-qu", worker=12)
    harness.run()
    assert list(_workers(harness).values()) == ["true"] * 12
    # scale down to 6: pods 6..11 go, the admission shrinks to 6 (quota released)
    _scale(harness, 6)
    harness.run()
    assert sorted(_workers(harness)) == [f"ddp-worker-{i}" for i in range(6)]
    [admission] = harness.unit("ddp-py-qu").status.admissions
    assert admission.replicas == 6


# --- the loop's cost ------------------------------------------------------------------------------


def test_an_idle_pass_writes_nothing(harness: Harness) -> None:
    kubectl_apply(harness.store, pytorch_job())
    kubectl_apply(harness.store, batch_job())
    harness.run()
    harness.admit("train")
    harness.run()
    before = harness.store.resource_version
    assert harness.loop.reconcile(harness.ctx) is None
    assert harness.store.resource_version == before


# --- pod lifecycle and the whole flow under simulate ----------------------------------------------


def test_pod_lifecycle_starts_bound_pods_and_ends_them_after_their_runtime(
    store: Store, clock: Clock
) -> None:
    ctx = LoopContext(store=store, now=clock)
    loop = PodLifecycle()
    pod = Pod(
        metadata=ObjectMeta(
            name="p", namespace="team-a", annotations={k.ANNOTATION_SIMULATED_RUNTIME: "90s"}
        )
    )
    store.apply(pod)
    store.apply(replace(pod, metadata=replace(pod.metadata, name="q", annotations={})))
    assert loop.reconcile(ctx) is None
    for name in ("p", "q"):
        found = store.get(store.registry.for_type(Pod), name, "team-a")
        assert isinstance(found, Pod)
        store.update(replace(found, spec=replace(found.spec, node_name="n1")))
    assert loop.reconcile(ctx) == pytest.approx(90.0)
    started = store.get(store.registry.for_type(Pod), "p", "team-a")
    assert isinstance(started, Pod)
    assert (started.status.phase, started.status.start_time) == ("Running", clock())
    assert {c.type: c.status for c in started.status.conditions}["Ready"] == "True"
    clock.advance(90)
    assert loop.reconcile(ctx) is None
    phases_now = {
        p.metadata.name: p.status.phase
        for p in store.list(store.registry.for_type(Pod))[0]
        if isinstance(p, Pod)
    }
    assert phases_now == {"p": "Succeeded", "q": "Running"}


class FakeEngine:
    """Admits every Enqueued unit whole (stands in for the queueing loop)."""

    name = "queueing"

    def reconcile(self, ctx: LoopContext) -> float | None:
        kind = ctx.store.registry.for_type(QueueUnit)
        for unit in ctx.store.list(kind)[0]:
            if isinstance(unit, QueueUnit) and unit.status.phase == phases.ENQUEUED:
                ctx.store.update(admit(unit, ctx.now()))
        return None


def test_simulated_batch_job_runs_to_completion() -> None:
    job = batch_job(
        parallelism=2,
        completions=3,
        pod_template=template(annotations={k.ANNOTATION_SIMULATED_RUNTIME: "2m"}),
    )
    node = Node(
        metadata=ObjectMeta(name="n1"),
        status=NodeStatus(allocatable=ResourceList({"cpu": 8000, "memory": 32 * GI, "pods": 110})),
    )
    result = simulate(
        [node, job],
        loops={
            "jobs": JobController,
            "queueing": FakeEngine,
            "scheduler": SchedulerLoop,
            "pod-lifecycle": PodLifecycle,
        },
    )
    by_kind: dict[str, list[Object]] = {}
    for obj in result.objects:
        by_kind.setdefault(obj.kind, []).append(obj)
    [unit] = by_kind["QueueUnit"]
    assert isinstance(unit, QueueUnit)
    assert unit.status.phase == phases.SUCCEED
    [done] = by_kind["Job"]
    assert isinstance(done, Job)
    assert done.status.succeeded == 3
    pods = [p for p in by_kind["Pod"] if isinstance(p, Pod)]
    assert sorted(p.status.phase for p in pods) == ["Succeeded"] * 3
    # two pods ran side by side, then the third: four simulated minutes in all
    assert result.ended - result.started == timedelta(minutes=4)


# --- §17.11, the reporter's half: reclaim of unbound replicas -------------------------------------


@pytest.mark.parametrize(
    ("reclaim", "bound", "replicas", "open_workers"),
    [
        (2, 1, 2, 1),  # two unbound replicas given back; the bound one keeps its place
        (5, 1, 1, 0),  # only unbound replicas can be given back
        (1, 3, 3, 0),  # nothing unbound to give back: the request is dropped
    ],
)
def test_reclaim_state_shrinks_unbound_replicas(
    harness: Harness, reclaim: int, bound: int, replicas: int, open_workers: int
) -> None:
    kubectl_apply(harness.store, pytorch_job(workers=4, master=False))
    harness.run()
    harness.admit("ddp-py-qu", worker=4 if bound < 4 else 3)
    harness.run()
    for i in range(bound):
        harness.kubelet(f"ddp-worker-{i}", phase="Pending")
    harness.run()

    def reclaiming(unit: QueueUnit) -> QueueUnit:
        [admission] = unit.status.admissions
        admission = replace(admission, reclaim_state=ReclaimState(replicas=reclaim))
        return replace(unit, status=replace(unit.status, admissions=(admission,)))

    harness.engine("ddp-py-qu", reclaiming)
    harness.run()
    [admission] = harness.unit("ddp-py-qu").status.admissions
    assert (admission.replicas, admission.running, admission.reclaim_state) == (
        replicas,
        bound,
        msgspec.UNSET,
    )
    unbound_open = [
        name
        for name, pod in harness.pods().items()
        if not pod.spec.node_name and pod.metadata.labels[k.LABEL_SCHEDULE_ADMISSION] == "true"
    ]
    assert len(unbound_open) == open_workers


def test_exponential_backoff_doubles_per_timeout(store: Store, clock: Clock) -> None:
    args = BatchArgs(running_timeout="60s", exponential_backoff=True)
    harness = Harness(store, clock, JobController(args={"job": args}))
    store.apply(batch_job())
    harness.run()
    for attempt, base in enumerate((10.0, 20.0, 40.0), start=1):
        harness.admit("train")
        harness.run()
        clock.advance(60)
        wait = harness.run()
        unit = harness.unit("train")
        assert unit.status.phase == phases.TIMEOUT_BACKOFF
        assert unit.status.requeue_state is not None
        assert unit.status.requeue_state.count == attempt
        assert wait is not None
        assert base * 0.9 <= wait <= base * 1.1
        clock.advance(wait)
        harness.run()
        assert harness.unit("train").status.phase == phases.ENQUEUED
    # reaching Running clears the bookkeeping
    harness.admit("train")
    harness.run()
    harness.kubelet("train-0")
    harness.run()
    unit = harness.unit("train")
    assert (unit.status.phase, unit.status.requeue_state) == (phases.RUNNING, None)
