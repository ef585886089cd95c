"""The job extensions one by one: registry, unit names, pod sets, priority sources, suspend and
resume, status from pods, and their ``Args`` (queue-spec §4)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from apis import constants as k
from apis.codec import decode_documents
from apis.core import Pod, PodStatus, PyTorchJob, ReplicaSpec
from apis.meta import Object, ObjectMeta
from apis.workloads import (
    HeadGroupSpec,
    MPIJob,
    MPIJobSpec,
    RayClusterSpec,
    RayJob,
    RayJobSpec,
    SparkApplication,
    SparkApplicationSpec,
    SparkBatchSchedulerOptions,
    SparkGPU,
    SparkPodSpec,
    WorkerGroupSpec,
    Workflow,
    WorkflowSpec,
)
from controller.queueing.jobs import EXTENSIONS, JobAdapter
from controller.queueing.jobs.base import JobArgsError, total_request
from controller.queueing.jobs.batchjob import Args as BatchArgs
from controller.queueing.jobs.kubeflow import PyTorchJobArgs
from controller.queueing.jobs.spark import spark_memory_bytes
from tests.controller.queueing.jobs import (
    GI,
    batch_job,
    job_meta,
    pytorch_job,
    template,
    tf_job,
)

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
MI = 1 << 20
replace = msgspec.structs.replace


def mpi_job(name: str = "allreduce", workers: int = 4) -> MPIJob:
    return MPIJob(
        metadata=job_meta(name, suspend_annotation=True),
        spec=MPIJobSpec(
            mpi_replica_specs={
                "Launcher": ReplicaSpec(replicas=1, template=template(priority_class="low")),
                "Worker": ReplicaSpec(replicas=workers, template=template(priority_class="high")),
            }
        ),
    )


def ray_job(name: str = "tune") -> RayJob:
    return RayJob(
        metadata=job_meta(name, suspend_annotation=True),
        spec=RayJobSpec(
            entrypoint="python tune.py",
            ray_cluster_spec=RayClusterSpec(
                head_group_spec=HeadGroupSpec(template=template(priority_class="koord-prod")),
                worker_group_specs=(
                    WorkerGroupSpec(group_name="cpu", replicas=3, template=template()),
                    WorkerGroupSpec(
                        group_name="tpu", replicas=2, num_of_hosts=4, template=template()
                    ),
                ),
            ),
        ),
    )


def spark_app(name: str = "etl", instances: int = 3) -> SparkApplication:
    return SparkApplication(
        metadata=job_meta(name, suspend_annotation=True),
        spec=SparkApplicationSpec(
            type="Scala",
            mode="cluster",
            image="spark:3.5",
            driver=SparkPodSpec(cores=1, memory="512m"),
            executor=SparkPodSpec(
                cores=2,
                memory="4g",
                instances=instances,
                gpu=SparkGPU(name="nvidia.com/gpu", quantity=1),
            ),
        ),
    )


def workflow(name: str = "pipeline") -> Workflow:
    return Workflow(
        metadata=job_meta(name, suspend_annotation=True),
        spec=WorkflowSpec(
            entrypoint="main",
            pod_priority_class_name="koord-batch",
            templates=(
                {"name": "main", "dag": {"tasks": [{"name": "a", "template": "prep"}]}},
                {
                    "name": "prep",
                    "container": {
                        "image": "alpine",
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                    },
                },
                {
                    "name": "train",
                    "script": {
                        "image": "python",
                        "source": "print(1)",
                        "resources": {"limits": {"cpu": "2", "memory": "2Gi"}},
                    },
                },
            ),
        ),
    )


def _pod(pod_set: str, phase: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(
            name=f"{pod_set}-x", annotations={k.ANNOTATION_RELATED_PODSET_NAME: pod_set}
        ),
        status=PodStatus(phase=phase),
    )


CASES: list[tuple[str, Object, str, list[tuple[str, int]]]] = [
    ("job", batch_job(), "train", [("train", 2)]),
    ("pytorchjob", pytorch_job(workers=3), "ddp-py-qu", [("master", 1), ("worker", 3)]),
    ("tfjob", tf_job(workers=2), "mnist-tf-qu", [("master", 1), ("worker", 2)]),
    ("mpijob", mpi_job(), "allreduce-mpi-qu", [("launcher", 1), ("worker", 4)]),
    ("rayjob", ray_job(), "tune-ray-qu", [("head", 1), ("cpu", 3), ("tpu", 8)]),
    ("sparkapp", spark_app(), "etl-spark-qu", [("driver", 1), ("executor", 3)]),
    ("workflow", workflow(), "pipeline-wf-qu", [("prep", 1), ("train", 1)]),
]


def test_registry_has_every_helm_extension() -> None:
    assert sorted(EXTENSIONS) == sorted(
        ["job", "pytorchjob", "tfjob", "mpijob", "rayjob", "sparkapp", "workflow"]
    )
    for name, adapter in EXTENSIONS.items():
        assert isinstance(adapter, JobAdapter)
        assert adapter.name == name


@pytest.mark.parametrize(("extension", "job", "unit", "pod_sets"), CASES, ids=[c[0] for c in CASES])
def test_unit_name_and_pod_sets(
    extension: str, job: Object, unit: str, pod_sets: list[tuple[str, int]]
) -> None:
    adapter = EXTENSIONS[extension]
    assert isinstance(job, adapter.kind)
    assert adapter.unit_name(job) == unit
    assert [(s.name, s.count) for s in adapter.pod_sets(job, {})] == pod_sets


@pytest.mark.parametrize(("extension", "job", "unit", "pod_sets"), CASES, ids=[c[0] for c in CASES])
def test_held_job_is_managed_and_resume_suspend_round_trip(
    extension: str, job: Object, unit: str, pod_sets: list[tuple[str, int]]
) -> None:
    adapter = EXTENSIONS[extension]
    assert adapter.is_suspended(job)
    assert adapter.is_managed(job)
    enqueued = adapter.enqueued(job, f"team-a/{unit}", NOW)
    resumed = adapter.resume(enqueued, NOW)
    assert not adapter.is_suspended(resumed)
    assert not adapter.is_managed(resumed)  # it has started
    assert adapter.is_suspended(adapter.suspend(resumed, NOW))


@pytest.mark.parametrize(
    ("extension", "job", "source"),
    [
        ("job", batch_job(pod_template=template(priority_class="koord-mid")), ("koord-mid", None)),
        ("job", batch_job(pod_template=template(priority=7)), ("", 7)),
        (
            "pytorchjob",
            pytorch_job(worker_class="high", master_class="low"),
            ("high", None),
        ),
        (
            "pytorchjob",
            pytorch_job(master=False, worker_class="only"),
            ("only", None),
        ),
        ("mpijob", mpi_job(), ("high", None)),
        ("rayjob", ray_job(), ("koord-prod", None)),
        ("workflow", workflow(), ("koord-batch", None)),
    ],
)
def test_priority_source(extension: str, job: Object, source: tuple[str, int | None]) -> None:
    assert EXTENSIONS[extension].priority_source(job) == source


def test_spark_priority_from_batch_scheduler_options() -> None:
    app = spark_app()
    options = SparkBatchSchedulerOptions(priority_class_name="koord-batch", queue="q")
    app = replace(app, spec=replace(app.spec, batch_scheduler_options=options))
    assert EXTENSIONS["sparkapp"].priority_source(app) == ("koord-batch", None)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512m", 512 * MI),
        ("4g", 4 * GI),
        ("4G", 4 * GI),
        ("1024", 1024 * MI),
        ("2gb", 2 * GI),
        ("100k", 100 << 10),
    ],
)
def test_spark_memory_units(text: str, size: int) -> None:
    assert spark_memory_bytes(text) == size


def test_spark_pod_sets_carry_the_spark_sizes() -> None:
    driver, executor = EXTENSIONS["sparkapp"].pod_sets(spark_app(instances=3), {})
    # 512m heap + the 384 MiB minimum overhead; 4g heap + 10 % overhead
    assert total_request([driver]) == {"cpu": 1000, "memory": 896 * MI}
    assert total_request([executor]) == {
        "cpu": 6000,
        "memory": 3 * (4 * GI + int(4 * GI * 0.1)),
        "nvidia.com/gpu": 3,
    }
    assert executor.template.metadata.labels["spark-role"] == "executor"


def test_spark_executor_count_follows_live_pods_when_larger() -> None:
    live = {"executor": [_pod("executor", "Running")] * 5}
    [_, executor] = EXTENSIONS["sparkapp"].pod_sets(spark_app(instances=3), live)
    assert executor.count == 5


def test_workflow_pod_sets_read_container_and_script_templates() -> None:
    prep, train = EXTENSIONS["workflow"].pod_sets(workflow(), {})
    assert total_request([prep]) == {"cpu": 500, "memory": GI}
    assert total_request([train]) == {"cpu": 2000, "memory": 2 * GI}
    assert train.template.spec.priority_class_name == "koord-batch"


@pytest.mark.parametrize(
    ("extension", "job", "pods", "outcome"),
    [
        ("pytorchjob", pytorch_job(workers=2), {"master": "Succeeded"}, "Succeeded"),
        ("pytorchjob", pytorch_job(workers=2), {"worker": "Failed"}, "Failed"),
        ("pytorchjob", pytorch_job(workers=1, master=False), {"worker": "Succeeded"}, "Succeeded"),
        ("pytorchjob", pytorch_job(workers=2), {"worker": "Succeeded"}, None),
        ("tfjob", tf_job(workers=1), {"master": "Running"}, None),
        ("mpijob", mpi_job(workers=1), {"launcher": "Succeeded"}, "Succeeded"),
        ("rayjob", ray_job(), {"head": "Succeeded"}, "Succeeded"),
        ("rayjob", ray_job(), {"head": "Failed"}, "Failed"),
        ("sparkapp", spark_app(), {"driver": "Succeeded"}, "Succeeded"),
        ("sparkapp", spark_app(), {"executor": "Failed"}, None),
        ("workflow", workflow(), {"prep": "Succeeded", "train": "Succeeded"}, "Succeeded"),
        ("workflow", workflow(), {"prep": "Succeeded"}, None),
        ("workflow", workflow(), {"train": "Failed"}, "Failed"),
    ],
)
def test_outcome_from_pods(
    extension: str, job: Object, pods: dict[str, str], outcome: str | None
) -> None:
    adapter = EXTENSIONS[extension]
    running = adapter.resume(adapter.enqueued(job, "team-a/u", NOW), NOW)
    by_set = {name: [_pod(name, phase)] for name, phase in pods.items()}
    observed = adapter.observe(running, by_set, NOW)
    assert adapter.outcome(observed) == outcome


def test_kubeflow_status_lists_replica_statuses_and_running() -> None:
    adapter = EXTENSIONS["pytorchjob"]
    job = adapter.resume(pytorch_job(workers=2), NOW)
    observed = adapter.observe(
        job, {"master": [_pod("master", "Running")], "worker": [_pod("worker", "Pending")]}, NOW
    )
    assert isinstance(observed, PyTorchJob)
    statuses = observed.status.replica_statuses
    assert (statuses["Master"].active, statuses["Worker"].active) == (1, 1)
    assert {c.type: c.status for c in observed.status.conditions}["Running"] == "True"


def test_mpi_job_is_held_by_run_policy_too() -> None:
    job = mpi_job()
    job = replace(job, metadata=replace(job.metadata, annotations={}))
    adapter = EXTENSIONS["mpijob"]
    assert not adapter.is_managed(job)
    held = replace(
        job, spec=replace(job.spec, run_policy=replace(job.spec.run_policy, suspend=True))
    )
    assert adapter.is_managed(held)
    resumed = adapter.resume(held, NOW)
    assert isinstance(resumed, MPIJob)
    assert resumed.spec.run_policy.suspend is False


def test_adapters_refuse_other_kinds() -> None:
    with pytest.raises(TypeError, match="expected a batch/v1 Job"):
        EXTENSIONS["job"].unit_name(tf_job())
    with pytest.raises(TypeError, match="expected a TFJob"):
        EXTENSIONS["tfjob"].unit_name(pytorch_job())


# --- Args ------------------------------------------------------------------------------------


def test_args_defaults_are_off() -> None:
    args = BatchArgs()
    assert (args.running_timeout_seconds, args.backoff_timeout_seconds) == (0.0, 0.0)


def test_args_decode_from_yaml() -> None:
    args = msgspec.yaml.decode(b"runningTimeout: 5m\nbackoffTimeout: 90s\n", type=PyTorchJobArgs)
    assert (args.running_timeout_seconds, args.backoff_timeout_seconds) == (300.0, 90.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"runningTimeout": "soon"}, "PyTorchJobArgs.runningTimeout: 'soon' is not a duration"),
        ({"backoffTimeout": "-1s"}, "PyTorchJobArgs.backoffTimeout: '-1s' is negative"),
        ({"runingTimeout": "1s"}, "unknown field `runingTimeout`"),
    ],
)
def test_bad_args_name_the_field_and_value(raw: dict[str, str], message: str) -> None:
    with pytest.raises((JobArgsError, msgspec.ValidationError), match=message):
        msgspec.convert(raw, PyTorchJobArgs)


def test_real_manifests_of_every_kind_load() -> None:
    text = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: pi, namespace: team-a, annotations: {scheduling.x-k8s.io/suspend: "true"}}
spec:
  slotsPerWorker: 1
  runPolicy: {cleanPodPolicy: Running}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template: {spec: {containers: [{name: l, image: mpi, resources: {limits: {cpu: "1"}}}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: w, image: mpi, resources: {limits: {cpu: "2"}}}]}}
---
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: rj, namespace: team-a}
spec:
  entrypoint: python -c 'print(1)'
  suspend: true
  shutdownAfterJobFinishes: true
  rayClusterSpec:
    rayVersion: "2.9.0"
    headGroupSpec:
      rayStartParams: {dashboard-host: 0.0.0.0}
      template: {spec: {containers: [{name: head, image: ray, resources: {requests: {cpu: "1"}}}]}}
    workerGroupSpecs:
      - groupName: small
        replicas: 2
        minReplicas: 1
        maxReplicas: 4
        rayStartParams: {}
        template: {spec: {containers: [{name: w, image: ray}]}}
---
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: pi, namespace: team-a, annotations: {scheduling.x-k8s.io/suspend: "true"}}
spec:
  type: Scala
  mode: cluster
  image: spark:3.5.0
  mainClass: org.apache.spark.examples.SparkPi
  mainApplicationFile: local:///opt/spark/examples/jars/spark-examples.jar
  sparkVersion: 3.5.0
  driver: {cores: 1, memory: 512m, serviceAccount: spark, labels: {version: 3.5.0}}
  executor: {cores: 1, instances: 2, memory: 512m}
---
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata: {name: hello, namespace: team-a, annotations: {scheduling.x-k8s.io/suspend: "true"}}
spec:
  entrypoint: whalesay
  templates:
    - name: whalesay
      container: {image: docker/whalesay, command: [cowsay], args: [hello]}
"""
    documents = decode_documents(text)
    assert [type(d) for d in documents] == [MPIJob, RayJob, SparkApplication, Workflow]
    assert EXTENSIONS["rayjob"].is_managed(documents[1])
    assert [(s.name, s.count) for s in EXTENSIONS["mpijob"].pod_sets(documents[0], {})] == [
        ("launcher", 1),
        ("worker", 2),
    ]
