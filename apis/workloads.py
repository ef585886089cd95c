"""Job kinds the Koord-Queue job extensions queue, besides ``batch/v1`` Job and the Kubeflow
training jobs of :mod:`apis.core`:

* ``kubeflow.org/v2beta1`` MPIJob (``Launcher`` and ``Worker`` replica specs);
* ``ray.io/v1`` RayJob (a head group and worker groups inside ``rayClusterSpec``);
* ``sparkoperator.k8s.io/v1beta2`` SparkApplication (a driver and ``instances`` executors,
  sized by ``cores``/``memory`` rather than pod templates);
* ``argoproj.io/v1alpha1`` Workflow (Argo; its templates are kept as given).

Only the parts the job extensions read or write are typed in full; the rest of each spec is
kept loosely (plain mappings) so real manifests load unchanged.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from apis.core import (
    Affinity,
    KubeflowJobStatus,
    PodTemplateSpec,
    ReplicaSpec,
    RunPolicy,
    Toleration,
)
from apis.meta import Condition, Model, Object, ObjectMeta

__all__ = [
    "HeadGroupSpec",
    "MPIJob",
    "MPIJobSpec",
    "RayClusterSpec",
    "RayJob",
    "RayJobSpec",
    "RayJobStatus",
    "SparkApplication",
    "SparkApplicationSpec",
    "SparkApplicationState",
    "SparkApplicationStatus",
    "SparkBatchSchedulerOptions",
    "SparkGPU",
    "SparkPodSpec",
    "WorkerGroupSpec",
    "Workflow",
    "WorkflowSpec",
    "WorkflowStatus",
]

Loose = dict[str, Any]


# --- MPIJob (kubeflow.org/v2beta1) -------------------------------------------------------------


class MPIJobSpec(Model):
    slots_per_worker: int | None = None
    run_launcher_as_worker: bool | None = None
    run_policy: RunPolicy = msgspec.field(default_factory=RunPolicy)
    #: ``Launcher`` and ``Worker``.
    mpi_replica_specs: dict[str, ReplicaSpec] = msgspec.field(
        default_factory=dict, name="mpiReplicaSpecs"
    )
    ssh_auth_mount_path: str = ""
    #: ``AtStartup`` or ``WaitForWorkersReady``.
    launcher_creation_policy: str = ""
    #: ``OpenMPI``, ``Intel``, ``MPICH``.
    mpi_implementation: str = ""


class MPIJob(Object):
    api_version: str = "kubeflow.org/v2beta1"
    kind: str = "MPIJob"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: MPIJobSpec = msgspec.field(default_factory=MPIJobSpec)
    status: KubeflowJobStatus = msgspec.field(default_factory=KubeflowJobStatus)


# --- RayJob (ray.io/v1) ------------------------------------------------------------------------


class HeadGroupSpec(Model):
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    ray_start_params: dict[str, str] = {}
    service_type: str = ""
    head_service: Loose | None = None
    enable_ingress: bool | None = None
    suspend: bool | None = None


class WorkerGroupSpec(Model):
    group_name: str = ""
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    #: Pods per replica (multi-host workers); 1 when unset.
    num_of_hosts: int | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    ray_start_params: dict[str, str] = {}
    scale_strategy: Loose | None = None
    suspend: bool | None = None
    idle_timeout_seconds: int | None = None


class RayClusterSpec(Model):
    ray_version: str = ""
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: Loose | None = None
    head_service_annotations: dict[str, str] = {}
    head_group_spec: HeadGroupSpec = msgspec.field(default_factory=HeadGroupSpec)
    worker_group_specs: tuple[WorkerGroupSpec, ...] = ()
    gcs_fault_tolerance_options: Loose | None = None
    managed_by: str = ""
    suspend: bool | None = None


class RayJobSpec(Model):
    entrypoint: str = ""
    runtime_env_yaml: str = msgspec.field(default="", name="runtimeEnvYAML")
    job_id: str = ""
    shutdown_after_job_finishes: bool | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    ray_cluster_spec: RayClusterSpec | None = None
    cluster_selector: dict[str, str] = {}
    submitter_pod_template: PodTemplateSpec | None = None
    #: ``K8sJobMode``, ``HTTPMode``, ``InteractiveMode``, ``SidecarMode``.
    submission_mode: str = ""
    suspend: bool | None = None
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_resources: str = ""
    submitter_config: Loose | None = None
    managed_by: str = ""
    deletion_strategy: Loose | None = None
    backoff_limit: int | None = None
    metadata: dict[str, str] = {}


class RayJobStatus(Model):
    job_id: str = ""
    ray_cluster_name: str = ""
    dashboard_url: str = msgspec.field(default="", name="dashboardURL")
    #: ``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED``, ``FAILED``.
    job_status: str = ""
    #: ``New``, ``Initializing``, ``Running``, ``Complete``, ``Failed``, ``Suspending``,
    #: ``Suspended``, ``Retrying``, ``Waiting``.
    job_deployment_status: str = ""
    reason: str = ""
    message: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None
    succeeded: int | None = None
    failed: int | None = None
    ray_cluster_status: Loose | None = None
    observed_generation: int | None = None


class RayJob(Object):
    api_version: str = "ray.io/v1"
    kind: str = "RayJob"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: RayJobSpec = msgspec.field(default_factory=RayJobSpec)
    status: RayJobStatus = msgspec.field(default_factory=RayJobStatus)


# --- SparkApplication (sparkoperator.k8s.io/v1beta2) -------------------------------------------


class SparkGPU(Model):
    #: Resource name (``nvidia.com/gpu``).
    name: str
    quantity: int = 0


class SparkPodSpec(Model):
    """The driver or executor of a Spark application: sizes in Spark's own units."""

    cores: int | None = None
    #: A Kubernetes quantity overriding ``cores`` as the pod's cpu request.
    core_request: str = ""
    core_limit: str = ""
    #: JVM heap in Spark units (``512m``, ``4g``: binary multiples).
    memory: str = ""
    #: Non-heap memory; unset: 10 % of ``memory``, at least 384 MiB.
    memory_overhead: str = ""
    gpu: SparkGPU | None = None
    image: str = ""
    config_maps: tuple[Loose, ...] = ()
    secrets: tuple[Loose, ...] = ()
    env: tuple[Loose, ...] = ()
    env_vars: dict[str, str] = {}
    env_from: tuple[Loose, ...] = ()
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    volume_mounts: tuple[Loose, ...] = ()
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    pod_security_context: Loose | None = None
    security_context: Loose | None = None
    scheduler_name: str = ""
    sidecars: tuple[Loose, ...] = ()
    init_containers: tuple[Loose, ...] = ()
    host_network: bool | None = None
    node_selector: dict[str, str] = {}
    dns_config: Loose | None = None
    termination_grace_period_seconds: int | None = None
    service_account: str = ""
    host_aliases: tuple[Loose, ...] = ()
    share_process_namespace: bool | None = None
    template: PodTemplateSpec | None = None
    # driver only
    pod_name: str = ""
    kubernetes_master: str = ""
    service_annotations: dict[str, str] = {}
    service_labels: dict[str, str] = {}
    lifecycle: Loose | None = None
    # executor only
    instances: int | None = None
    delete_on_termination: bool | None = None
    priority_class_name: str = ""
    # both
    java_options: str = ""
    ports: tuple[Loose, ...] = ()


class SparkBatchSchedulerOptions(Model):
    queue: str = ""
    priority_class_name: str = ""
    resources: dict[str, Any] = {}


class SparkApplicationSpec(Model):
    #: ``Java``, ``Python``, ``Scala``, ``R``.
    type: str = ""
    spark_version: str = ""
    #: ``cluster`` (the driver runs in a pod), ``client``, ``in-cluster-client``.
    mode: str = ""
    proxy_user: str = ""
    image: str = ""
    image_pull_policy: str = ""
    image_pull_secrets: tuple[str, ...] = ()
    main_class: str = ""
    main_application_file: str = ""
    arguments: tuple[str, ...] = ()
    spark_conf: dict[str, str] = {}
    hadoop_conf: dict[str, str] = {}
    spark_config_map: str = ""
    hadoop_config_map: str = ""
    volumes: tuple[Loose, ...] = ()
    driver: SparkPodSpec = msgspec.field(default_factory=SparkPodSpec)
    executor: SparkPodSpec = msgspec.field(default_factory=SparkPodSpec)
    deps: Loose | None = None
    restart_policy: Loose | None = None
    node_selector: dict[str, str] = {}
    failure_retries: int | None = None
    retry_interval: int | None = None
    python_version: str = ""
    memory_overhead_factor: str = ""
    monitoring: Loose | None = None
    batch_scheduler: str = ""
    time_to_live_seconds: int | None = None
    batch_scheduler_options: SparkBatchSchedulerOptions | None = None
    spark_ui_options: Loose | None = None
    driver_ingress_options: tuple[Loose, ...] = ()
    dynamic_allocation: Loose | None = None


class SparkApplicationState(Model):
    #: ``SUBMITTED``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``SUBMISSION_FAILED``, ...
    state: str = ""
    error_message: str = ""


class SparkApplicationStatus(Model):
    spark_application_id: str = ""
    submission_id: str = msgspec.field(default="", name="submissionID")
    last_submission_attempt_time: datetime | None = None
    termination_time: datetime | None = None
    driver_info: Loose | None = None
    application_state: SparkApplicationState | None = None
    #: Executor pod name -> ``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``UNKNOWN``.
    executor_state: dict[str, str] = {}
    execution_attempts: int | None = None
    submission_attempts: int | None = None


class SparkApplication(Object):
    api_version: str = "sparkoperator.k8s.io/v1beta2"
    kind: str = "SparkApplication"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: SparkApplicationSpec = msgspec.field(default_factory=SparkApplicationSpec)
    status: SparkApplicationStatus = msgspec.field(default_factory=SparkApplicationStatus)


# --- Argo Workflow (argoproj.io/v1alpha1) ------------------------------------------------------


class WorkflowSpec(Model):
    entrypoint: str = ""
    #: Argo templates, kept as given (``container``, ``script``, ``steps``, ``dag``...).
    templates: tuple[Loose, ...] = ()
    arguments: Loose | None = None
    service_account_name: str = ""
    automount_service_account_token: bool | None = None
    executor: Loose | None = None
    volumes: tuple[Loose, ...] = ()
    volume_claim_templates: tuple[Loose, ...] = ()
    parallelism: int | None = None
    artifact_repository_ref: Loose | None = None
    #: Argo's own pause switch (not the queue's: that is the suspend annotation).
    suspend: bool | None = None
    node_selector: dict[str, str] = {}
    affinity: Affinity | None = None
    tolerations: tuple[Toleration, ...] = ()
    image_pull_secrets: tuple[Loose, ...] = ()
    host_network: bool | None = None
    dns_policy: str = ""
    dns_config: Loose | None = None
    on_exit: str = ""
    ttl_strategy: Loose | None = None
    active_deadline_seconds: int | None = None
    priority: int | None = None
    scheduler_name: str = ""
    pod_gc: Loose | None = msgspec.field(default=None, name="podGC")
    pod_priority_class_name: str = ""
    pod_priority: int | None = None
    host_aliases: tuple[Loose, ...] = ()
    security_context: Loose | None = None
    pod_spec_patch: str = ""
    pod_disruption_budget: Loose | None = None
    metrics: Loose | None = None
    shutdown: str = ""
    workflow_template_ref: Loose | None = None
    synchronization: Loose | None = None
    volume_claim_gc: Loose | None = msgspec.field(default=None, name="volumeClaimGC")
    retry_strategy: Loose | None = None
    pod_metadata: Loose | None = None
    template_defaults: Loose | None = None
    archive_logs: bool | None = None
    hooks: Loose | None = None
    workflow_metadata: Loose | None = None
    artifact_gc: Loose | None = msgspec.field(default=None, name="artifactGC")


class WorkflowStatus(Model):
    #: ``Pending``, ``Running``, ``Succeeded``, ``Failed``, ``Error``.
    phase: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    estimated_duration: int | None = None
    progress: str = ""
    message: str = ""
    nodes: dict[str, Loose] = {}
    conditions: tuple[Condition, ...] = ()
    resources_duration: dict[str, int] = {}
    stored_templates: dict[str, Loose] = {}
    stored_workflow_template_spec: Loose | None = None
    persistent_volume_claims: tuple[Loose, ...] = ()
    outputs: Loose | None = None
    synchronization: Loose | None = None
    artifact_repository_ref: Loose | None = None
    artifact_gc_status: Loose | None = msgspec.field(default=None, name="artifactGCStatus")
    task_results_completion_status: dict[str, bool] = {}
    offload_node_status_version: str = ""


class Workflow(Object):
    api_version: str = "argoproj.io/v1alpha1"
    kind: str = "Workflow"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: WorkflowSpec = msgspec.field(default_factory=WorkflowSpec)
    status: WorkflowStatus = msgspec.field(default_factory=WorkflowStatus)
