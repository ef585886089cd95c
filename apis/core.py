"""Core Kubernetes kinds: Pod, Node, Event, ConfigMap (``v1``), Job (``batch/v1``), the Kubeflow
training jobs PyTorchJob and TFJob (``kubeflow.org/v1``), and PriorityClass
(``scheduling.k8s.io/v1``).

Every field name Kubernetes 1.24-1.35 defines is known, so a real manifest loads and a typo is
an "unknown field" error. Parts koordpy never interprets (volumes, probes, security contexts...) are
typed loosely as plain mappings; what the scheduler, quota, queue and node agent read
(resources, affinity, tolerations, taints, conditions, container statuses) is typed in full.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import msgspec

from apis.devicenames import translated
from apis.meta import (
    Condition,
    LabelSelector,
    Model,
    Object,
    ObjectMeta,
    ObjectReference,
)
from apis.resources import ResourceList

__all__ = [
    "Affinity",
    "ConfigMap",
    "Container",
    "ContainerPort",
    "ContainerState",
    "ContainerStatus",
    "EnvVar",
    "Event",
    "EventSeries",
    "EventSource",
    "Job",
    "JobSpec",
    "JobStatus",
    "KubeflowJobStatus",
    "Node",
    "NodeAddress",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "NodeSpec",
    "NodeStatus",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodSpec",
    "PodStatus",
    "PodTemplateSpec",
    "PreferredSchedulingTerm",
    "PriorityClass",
    "PyTorchJob",
    "PyTorchJobSpec",
    "ReplicaSpec",
    "ReplicaStatus",
    "ResourceRequirements",
    "RunPolicy",
    "TFJob",
    "TFJobSpec",
    "Taint",
    "Toleration",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
    "container_requests",
    "pod_requests",
]

_NO_RESOURCES = ResourceList()

Loose = dict[str, Any]
"""A nested part of an object koordpy keeps as given and never interprets."""


# --- containers --------------------------------------------------------------------------------


class ResourceRequirements(Model):
    limits: ResourceList = _NO_RESOURCES
    requests: ResourceList = _NO_RESOURCES
    #: Dynamic resource allocation claims (``[{name, request}]``).
    claims: tuple[Loose, ...] = ()


_NO_REQUIREMENTS = ResourceRequirements()


class ContainerPort(Model):
    container_port: int
    name: str = ""
    host_port: int | None = None
    protocol: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")


class EnvVar(Model):
    name: str
    value: str | None = None
    #: ``{fieldRef | resourceFieldRef | configMapKeyRef | secretKeyRef | fileKeyRef}``.
    value_from: Loose | None = None


class Container(Model):
    """A container (``containers``, ``initContainers``; ephemeral ones are kept loosely)."""

    name: str
    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str = ""
    ports: tuple[ContainerPort, ...] = ()
    env_from: tuple[Loose, ...] = ()
    env: tuple[EnvVar, ...] = ()
    resources: ResourceRequirements = _NO_REQUIREMENTS
    resize_policy: tuple[Loose, ...] = ()
    #: ``Always`` on an init container makes it a sidecar (restartable init container).
    restart_policy: str = ""
    restart_policy_rules: tuple[Loose, ...] = ()
    volume_mounts: tuple[Loose, ...] = ()
    volume_devices: tuple[Loose, ...] = ()
    liveness_probe: Loose | None = None
    readiness_probe: Loose | None = None
    startup_probe: Loose | None = None
    lifecycle: Loose | None = None
    termination_message_path: str = ""
    termination_message_policy: str = ""
    image_pull_policy: str = ""
    security_context: Loose | None = None
    stdin: bool | None = None
    stdin_once: bool | None = None
    tty: bool | None = None

    @property
    def is_sidecar(self) -> bool:
        """A restartable init container: runs beside the main containers."""
        return self.restart_policy == "Always"


# --- scheduling constraints --------------------------------------------------------------------


class NodeSelectorRequirement(Model):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class NodeSelectorTerm(Model):
    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class NodeSelector(Model):
    node_selector_terms: tuple[NodeSelectorTerm, ...] = ()


class PreferredSchedulingTerm(Model):
    weight: int
    preference: NodeSelectorTerm


class NodeAffinity(Model):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: tuple[PreferredSchedulingTerm, ...] = ()


class PodAffinityTerm(Model):
    topology_key: str
    label_selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


class WeightedPodAffinityTerm(Model):
    weight: int
    pod_affinity_term: PodAffinityTerm


class PodAffinity(Model):
    """Pod affinity or anti-affinity (the two have the same shape)."""

    required_during_scheduling_ignored_during_execution: tuple[PodAffinityTerm, ...] = ()
    preferred_during_scheduling_ignored_during_execution: tuple[WeightedPodAffinityTerm, ...] = ()


class Affinity(Model):
    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


class Toleration(Model):
    key: str = ""
    #: ``Exists`` or ``Equal`` (empty means ``Equal``).
    operator: str = ""
    value: str = ""
    #: ``NoSchedule``, ``PreferNoSchedule``, ``NoExecute``; empty matches every effect.
    effect: str = ""
    toleration_seconds: int | None = None


class TopologySpreadConstraint(Model):
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    label_selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = ""
    node_taints_policy: str = ""
    match_label_keys: tuple[str, ...] = ()


# --- Pod ---------------------------------------------------------------------------------------


class PodSpec(Model):
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    ephemeral_containers: tuple[Loose, ...] = ()
    volumes: tuple[Loose, ...] = ()
    restart_policy: str = ""
    termination_grace_period_seconds: int | None = None
    active_deadline_seconds: int | None = None
    dns_policy: str = ""
    node_selector: dict[str, str] = {}
    service_account_name: str = ""
    service_account: str = ""
    automount_service_account_token: bool | None = None
    node_name: str = ""
    host_network: bool | None = None
    host_pid: bool | None = msgspec.field(default=None, name="hostPID")
    host_ipc: bool | None = msgspec.field(default=None, name="hostIPC")
    share_process_namespace: bool | None = None
    security_context: Loose | None = None
    image_pull_secrets: tuple[Loose, ...] = ()
    hostname: str = ""
    hostname_override: str = ""
    subdomain: str = ""
    affinity: Affinity | None = None
    scheduler_name: str = ""
    tolerations: tuple[Toleration, ...] = ()
    host_aliases: tuple[Loose, ...] = ()
    priority_class_name: str = ""
    priority: int | None = None
    dns_config: Loose | None = None
    readiness_gates: tuple[Loose, ...] = ()
    runtime_class_name: str = ""
    enable_service_links: bool | None = None
    preemption_policy: str = ""
    overhead: ResourceList = _NO_RESOURCES
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...] = ()
    set_hostname_as_fqdn: bool | None = msgspec.field(default=None, name="setHostnameAsFQDN")
    os: Loose | None = None
    host_users: bool | None = None
    scheduling_gates: tuple[Loose, ...] = ()
    resource_claims: tuple[Loose, ...] = ()
    #: Pod-level resources (overrides the per-container sum for the names it lists).
    resources: ResourceRequirements = _NO_REQUIREMENTS
    workload_ref: Loose | None = None


_NO_POD_SPEC = PodSpec()


class ContainerState(Model):
    """What a container is doing; at most one of the three is set (none: not created yet)."""

    #: ``{startedAt}``.
    running: Loose | None = None
    #: ``{reason, message}``.
    waiting: Loose | None = None
    #: ``{exitCode, signal, reason, message, startedAt, finishedAt, containerID}``.
    terminated: Loose | None = None


class ContainerStatus(Model):
    """``status.containerStatuses[]`` (and the init and ephemeral twins).

    ``ready``, ``restartCount``, ``image`` and ``imageID`` are always written by the kubelet,
    so they are optional here only to accept hand-written statuses; ``None`` means absent,
    which keeps ``ready: false`` and ``restartCount: 0`` on the wire when they were given.
    """

    name: str
    state: ContainerState | None = None
    last_state: ContainerState | None = None
    ready: bool | None = None
    restart_count: int | None = None
    image: str | None = None
    image_id: str | None = msgspec.field(default=None, name="imageID")
    #: ``<runtime>://<id>`` (``containerd://...``); empty until the container is created.
    container_id: str = msgspec.field(default="", name="containerID")
    started: bool | None = None
    allocated_resources: ResourceList = _NO_RESOURCES
    resources: ResourceRequirements | None = None
    #: ``[{name, mountPath, readOnly, recursiveReadOnly}]``.
    volume_mounts: tuple[Loose, ...] = ()
    #: ``{linux: {uid, gid, supplementalGroups}}``.
    user: Loose | None = None
    #: ``[{name, resources: [{resourceID, health}]}]``.
    allocated_resources_status: tuple[Loose, ...] = ()
    stop_signal: str | None = None

    @property
    def running(self) -> bool:
        return self.state is not None and self.state.running is not None

    @property
    def terminated(self) -> bool:
        return self.state is not None and self.state.terminated is not None


class PodStatus(Model):
    observed_generation: int | None = None
    #: ``Pending``, ``Running``, ``Succeeded``, ``Failed``, ``Unknown``.
    phase: str = ""
    conditions: tuple[Condition, ...] = ()
    message: str = ""
    reason: str = ""
    nominated_node_name: str = ""
    host_ip: str = msgspec.field(default="", name="hostIP")
    host_ips: tuple[Loose, ...] = msgspec.field(default=(), name="hostIPs")
    pod_ip: str = msgspec.field(default="", name="podIP")
    pod_ips: tuple[Loose, ...] = msgspec.field(default=(), name="podIPs")
    start_time: datetime | None = None
    init_container_statuses: tuple[ContainerStatus, ...] = ()
    container_statuses: tuple[ContainerStatus, ...] = ()
    ephemeral_container_statuses: tuple[ContainerStatus, ...] = ()
    qos_class: str = msgspec.field(default="", name="qosClass")
    resize: str = ""
    resource_claim_statuses: tuple[Loose, ...] = ()
    extended_resource_claim_status: Loose | None = None
    allocated_resources: ResourceList = _NO_RESOURCES
    resources: ResourceRequirements | None = None


_NO_META = ObjectMeta()


class PodTemplateSpec(Model):
    metadata: ObjectMeta = _NO_META
    spec: PodSpec = _NO_POD_SPEC


class Pod(Object):
    api_version: str = "v1"
    kind: str = "Pod"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodSpec = msgspec.field(default_factory=PodSpec)
    status: PodStatus = msgspec.field(default_factory=PodStatus)

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def annotations(self) -> dict[str, str]:
        return self.metadata.annotations

    @property
    def is_terminated(self) -> bool:
        """Succeeded or Failed: the pod holds no resources any more."""
        return self.status.phase in ("Succeeded", "Failed")


def _effective(req: ResourceRequirements) -> dict[str, int]:
    """Requests, with a limit standing in for a missing request (API-server defaulting);
    deprecated device names read as their successors (:mod:`apis.devicenames`)."""
    merged = dict(translated(req.limits))
    merged.update(translated(req.requests))
    return merged


def container_requests(container: Container) -> ResourceList:
    """One container's effective requests."""
    return ResourceList(_effective(container.resources))


def _add_into(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount


def _max_into(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _init_peak(init_containers: Iterable[Container]) -> tuple[dict[str, int], dict[str, int]]:
    """(peak while init containers run, sum of sidecars that keep running afterwards)."""
    peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for container in init_containers:
        amounts = _effective(container.resources)
        if container.is_sidecar:
            _add_into(sidecars, amounts)
            _max_into(peak, sidecars)
        else:
            running = dict(sidecars)
            _add_into(running, amounts)
            _max_into(peak, running)
    return peak, sidecars


def pod_requests(pod: Pod | PodSpec) -> ResourceList:
    """Kubernetes' effective pod request.

    Per resource: ``max(sum of containers (+ sidecars), peak of the init phase) + overhead``,
    where the init phase peak is each init container plus the sidecars started before it.
    A limit counts as the request when a container gives no request for that resource.
    Pod-level ``spec.resources`` replaces the container figure for the names it lists.
    """
    spec = pod.spec if isinstance(pod, Pod) else pod
    total: dict[str, int] = {}
    for container in spec.containers:
        _add_into(total, _effective(container.resources))
    init_peak, sidecars = _init_peak(spec.init_containers)
    _add_into(total, sidecars)
    _max_into(total, init_peak)
    total.update(_effective(spec.resources))
    _add_into(total, translated(spec.overhead))
    return ResourceList(total)


# --- Node --------------------------------------------------------------------------------------


class Taint(Model):
    key: str
    #: ``NoSchedule``, ``PreferNoSchedule`` or ``NoExecute``.
    effect: str
    value: str = ""
    time_added: datetime | None = None


class NodeSpec(Model):
    pod_cidr: str = msgspec.field(default="", name="podCIDR")
    pod_cidrs: tuple[str, ...] = msgspec.field(default=(), name="podCIDRs")
    provider_id: str = msgspec.field(default="", name="providerID")
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    config_source: Loose | None = None
    external_id: str = msgspec.field(default="", name="externalID")


class NodeAddress(Model):
    #: ``Hostname``, ``InternalIP``, ``ExternalIP``, ``InternalDNS``, ``ExternalDNS``.
    type: str
    address: str


class NodeStatus(Model):
    capacity: ResourceList = _NO_RESOURCES
    allocatable: ResourceList = _NO_RESOURCES
    phase: str = ""
    conditions: tuple[Condition, ...] = ()
    addresses: tuple[NodeAddress, ...] = ()
    daemon_endpoints: Loose | None = None
    #: ``{machineID, systemUUID, bootID, kernelVersion, osImage, containerRuntimeVersion,
    #: kubeletVersion, kubeProxyVersion, operatingSystem, architecture, swap}``.
    node_info: dict[str, Any] = {}
    images: tuple[Loose, ...] = ()
    volumes_in_use: tuple[str, ...] = ()
    volumes_attached: tuple[Loose, ...] = ()
    config: Loose | None = None
    runtime_handlers: tuple[Loose, ...] = ()
    features: Loose | None = None
    declared_features: tuple[str, ...] = ()


class Node(Object):
    api_version: str = "v1"
    kind: str = "Node"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)

    @property
    def labels(self) -> dict[str, str]:
        return self.metadata.labels

    @property
    def allocatable(self) -> ResourceList:
        """Allocatable, or capacity when the node reports no allocatable; deprecated device
        names read as their successors (:mod:`apis.devicenames`)."""
        return translated(self.status.allocatable or self.status.capacity)

    @property
    def capacity(self) -> ResourceList:
        return translated(self.status.capacity)

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    @property
    def is_ready(self) -> bool:
        ready = self.condition("Ready")
        return ready is not None and ready.status == "True"


# --- Event -------------------------------------------------------------------------------------


class EventSource(Model):
    component: str = ""
    host: str = ""


class EventSeries(Model):
    count: int = 0
    last_observed_time: datetime | None = None


class Event(Object):
    """``core/v1`` Event (namespaced; the fields sit at the top level, there is no spec)."""

    api_version: str = "v1"
    kind: str = "Event"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    involved_object: ObjectReference = msgspec.field(default_factory=ObjectReference)
    reason: str = ""
    message: str = ""
    source: EventSource = msgspec.field(default_factory=EventSource)
    first_timestamp: datetime | None = None
    last_timestamp: datetime | None = None
    count: int = 0
    #: ``Normal`` or ``Warning``.
    type: str = ""
    event_time: datetime | None = None
    series: EventSeries | None = None
    action: str = ""
    related: ObjectReference | None = None
    reporting_component: str = ""
    reporting_instance: str = ""


# --- ConfigMap ---------------------------------------------------------------------------------


class ConfigMap(Object):
    """``core/v1`` ConfigMap (namespaced; ``data`` and ``binaryData`` at the top level)."""

    api_version: str = "v1"
    kind: str = "ConfigMap"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    data: dict[str, str] = msgspec.field(default_factory=dict)
    #: Values are base64 strings, kept as written.
    binary_data: dict[str, str] = msgspec.field(default_factory=dict)
    #: True: ``data`` and ``binaryData`` may not change.
    immutable: bool | None = None


# --- batch/v1 Job ------------------------------------------------------------------------------


class JobSpec(Model):
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    parallelism: int | None = None
    completions: int | None = None
    active_deadline_seconds: int | None = None
    pod_failure_policy: Loose | None = None
    success_policy: Loose | None = None
    backoff_limit: int | None = None
    backoff_limit_per_index: int | None = None
    max_failed_indexes: int | None = None
    selector: LabelSelector | None = None
    manual_selector: bool | None = None
    ttl_seconds_after_finished: int | None = None
    #: ``NonIndexed`` or ``Indexed``.
    completion_mode: str = ""
    suspend: bool | None = None
    pod_replacement_policy: str = ""
    managed_by: str = ""


class JobStatus(Model):
    conditions: tuple[Condition, ...] = ()
    start_time: datetime | None = None
    completion_time: datetime | None = None
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    terminating: int | None = None
    ready: int | None = None
    completed_indexes: str = ""
    failed_indexes: str | None = None
    uncounted_terminated_pods: Loose | None = None


class Job(Object):
    api_version: str = "batch/v1"
    kind: str = "Job"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: JobSpec = msgspec.field(default_factory=JobSpec)
    status: JobStatus = msgspec.field(default_factory=JobStatus)


# --- Kubeflow training jobs (kubeflow.org/v1) --------------------------------------------------


class ReplicaSpec(Model):
    """One role of a training job (``Master``, ``Worker``, ``PS``, ``Chief``...)."""

    replicas: int | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    #: ``Always``, ``OnFailure``, ``Never``, ``ExitCode``.
    restart_policy: str = ""


class RunPolicy(Model):
    #: ``All``, ``Running``, ``None``.
    clean_pod_policy: str = ""
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    #: ``{minAvailable, queue, minResources, priorityClass, scheduleTimeoutSeconds}``.
    scheduling_policy: Loose | None = None
    suspend: bool | None = None
    managed_by: str = ""


class ReplicaStatus(Model):
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    label_selector: LabelSelector | None = None
    selector: str = ""


class KubeflowJobStatus(Model):
    """Status shared by the Kubeflow training jobs (conditions carry ``lastUpdateTime``)."""

    conditions: tuple[Condition, ...] = ()
    replica_statuses: dict[str, ReplicaStatus] = {}
    start_time: datetime | None = None
    completion_time: datetime | None = None
    last_reconcile_time: datetime | None = None


class PyTorchJobSpec(Model):
    run_policy: RunPolicy = msgspec.field(default_factory=RunPolicy)
    #: ``{minReplicas, maxReplicas, rdzvBackend, rdzvPort, rdzvHost, rdzvId, rdzvConf,
    #: standalone, nProcPerNode, maxRestarts, metrics}``.
    elastic_policy: Loose | None = None
    pytorch_replica_specs: dict[str, ReplicaSpec] = msgspec.field(
        default_factory=dict, name="pytorchReplicaSpecs"
    )
    nproc_per_node: str | None = None


class PyTorchJob(Object):
    api_version: str = "kubeflow.org/v1"
    kind: str = "PyTorchJob"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PyTorchJobSpec = msgspec.field(default_factory=PyTorchJobSpec)
    status: KubeflowJobStatus = msgspec.field(default_factory=KubeflowJobStatus)


class TFJobSpec(Model):
    run_policy: RunPolicy = msgspec.field(default_factory=RunPolicy)
    #: ``AllWorkers`` or the default (chief/worker-0 decides).
    success_policy: str | None = None
    tf_replica_specs: dict[str, ReplicaSpec] = msgspec.field(
        default_factory=dict, name="tfReplicaSpecs"
    )
    enable_dynamic_worker: bool | None = None


class TFJob(Object):
    api_version: str = "kubeflow.org/v1"
    kind: str = "TFJob"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: TFJobSpec = msgspec.field(default_factory=TFJobSpec)
    status: KubeflowJobStatus = msgspec.field(default_factory=KubeflowJobStatus)


# --- PriorityClass (scheduling.k8s.io/v1, cluster-scoped) ---------------------------------------


class PriorityClass(Object):
    """A named priority value; the fields sit at the top level, there is no spec."""

    api_version: str = "scheduling.k8s.io/v1"
    kind: str = "PriorityClass"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    value: int = 0
    #: The class of pods that name none (at most one class sets it).
    global_default: bool | None = None
    #: ``PreemptLowerPriority`` (the default) or ``Never``.
    preemption_policy: str | None = None
    description: str = ""
