"""Every annotation key, label key and resource name koordpy reads or writes, in one place.

Grouped by domain; each key is spelt exactly as Koordinator, Koord-Queue, Kueue, HAMi and the
device vendors spell it, so objects written for those systems work unchanged. Keys that
exist under two spellings (Koord-Queue's ``koord-queue/`` and the older ``kube-queue/``) get
both constants: the plain name is the current spelling, ``*_LEGACY`` the old one.
"""

from __future__ import annotations

from typing import Final

# =============================================================================================
# API groups and versions
# =============================================================================================

#: Reservation, Device, PodMigrationJob (cluster-scoped).
GROUP_SCHEDULING: Final = "scheduling.koordinator.sh"
API_SCHEDULING: Final = "scheduling.koordinator.sh/v1alpha1"
#: NodeMetric, NodeSLO.
GROUP_SLO: Final = "slo.koordinator.sh"
API_SLO: Final = "slo.koordinator.sh/v1alpha1"
#: ElasticQuota, PodGroup (namespaced).
GROUP_SCHEDULING_SIGS: Final = "scheduling.sigs.k8s.io"
API_SCHEDULING_SIGS: Final = "scheduling.sigs.k8s.io/v1alpha1"
#: Koord-Queue Queue and QueueUnit (namespaced).
GROUP_QUEUE: Final = "scheduling.x-k8s.io"
API_QUEUE: Final = "scheduling.x-k8s.io/v1alpha1"
#: Kubeflow training jobs (PyTorchJob, TFJob).
API_KUBEFLOW: Final = "kubeflow.org/v1"
API_BATCH: Final = "batch/v1"
API_CORE: Final = "v1"

# =============================================================================================
# Domain prefixes
# =============================================================================================

PREFIX_KOORDINATOR: Final = "koordinator.sh/"
PREFIX_SCHEDULING: Final = "scheduling.koordinator.sh/"
PREFIX_INTERNAL_SCHEDULING: Final = "internal.scheduling.koordinator.sh/"
PREFIX_NODE: Final = "node.koordinator.sh/"
PREFIX_POD: Final = "pod.koordinator.sh/"
PREFIX_QUOTA: Final = "quota.scheduling.koordinator.sh/"
PREFIX_GANG: Final = "gang.scheduling.koordinator.sh/"
#: Koord-Queue annotation prefix (current) and its kube-queue predecessor.
PREFIX_KOORD_QUEUE: Final = "koord-queue/"
PREFIX_KUBE_QUEUE: Final = "kube-queue/"
#: Both Koord-Queue prefixes, preferred first (readers try each in turn).
QUEUE_ANNOTATION_PREFIXES: Final = (PREFIX_KOORD_QUEUE, PREFIX_KUBE_QUEUE)

# =============================================================================================
# Resource names
# =============================================================================================

# --- Kubernetes core ---------------------------------------------------------------------------
RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
RESOURCE_EPHEMERAL_STORAGE: Final = "ephemeral-storage"
RESOURCE_PODS: Final = "pods"

# --- Koordinator colocation (batch / mid); *-cpu are integer milli-cores -------------------
RESOURCE_BATCH_CPU: Final = "kubernetes.io/batch-cpu"
RESOURCE_BATCH_MEMORY: Final = "kubernetes.io/batch-memory"
RESOURCE_MID_CPU: Final = "kubernetes.io/mid-cpu"
RESOURCE_MID_MEMORY: Final = "kubernetes.io/mid-memory"
#: Deprecated spellings of the batch resources.
RESOURCE_BATCH_CPU_DEPRECATED: Final = "koordinator.sh/batch-cpu"
RESOURCE_BATCH_MEMORY_DEPRECATED: Final = "koordinator.sh/batch-memory"

# --- Koordinator devices -------------------------------------------------------------------
#: Whole/partial GPUs in percent of a card (100 = one card).
RESOURCE_GPU: Final = "koordinator.sh/gpu"
#: Number of GPUs a shared request spreads over.
RESOURCE_GPU_SHARED: Final = "koordinator.sh/gpu.shared"
#: Compute share of a card, percent.
RESOURCE_GPU_CORE: Final = "koordinator.sh/gpu-core"
#: Device memory, bytes.
RESOURCE_GPU_MEMORY: Final = "koordinator.sh/gpu-memory"
#: Device memory, percent of a card.
RESOURCE_GPU_MEMORY_RATIO: Final = "koordinator.sh/gpu-memory-ratio"
RESOURCE_RDMA: Final = "koordinator.sh/rdma"
RESOURCE_FPGA: Final = "koordinator.sh/fpga"
#: Deprecated ``kubernetes.io/`` device names older docs still use.
RESOURCE_GPU_DEPRECATED: Final = "kubernetes.io/gpu"
RESOURCE_GPU_CORE_DEPRECATED: Final = "kubernetes.io/gpu-core"
RESOURCE_GPU_MEMORY_DEPRECATED: Final = "kubernetes.io/gpu-memory"
RESOURCE_GPU_MEMORY_RATIO_DEPRECATED: Final = "kubernetes.io/gpu-memory-ratio"
RESOURCE_RDMA_DEPRECATED: Final = "kubernetes.io/rdma"
RESOURCE_FPGA_DEPRECATED: Final = "kubernetes.io/fpga"

# --- Vendor device-plugin resources ----------------------------------------------------------
RESOURCE_NVIDIA_GPU: Final = "nvidia.com/gpu"
#: HAMi vGPU on NVIDIA: memory (MiB), memory percent, cores (percent).
RESOURCE_NVIDIA_GPUMEM: Final = "nvidia.com/gpumem"
RESOURCE_NVIDIA_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
RESOURCE_NVIDIA_GPUCORES: Final = "nvidia.com/gpucores"
RESOURCE_AMD_GPU: Final = "amd.com/gpu"
RESOURCE_AMD_GPUMEM: Final = "amd.com/gpumem"
RESOURCE_AMD_GPUCORES: Final = "amd.com/gpucores"
RESOURCE_DCU_GPU: Final = "dcu.com/gpu"
#: Huawei Ascend: AI cores, AI CPUs, DVPP share (reported per device and on the node).
RESOURCE_HUAWEI_NPU_CORE: Final = "huawei.com/npu-core"
RESOURCE_HUAWEI_NPU_CPU: Final = "huawei.com/npu-cpu"
RESOURCE_HUAWEI_NPU_DVPP: Final = "huawei.com/npu-dvpp"
#: Ascend 310P (300I Duo) cards, and the HAMi-style per-model memory/core names.
RESOURCE_HUAWEI_ASCEND_310P: Final = "huawei.com/Ascend310P"
RESOURCE_HUAWEI_ASCEND_310P_MEMORY: Final = "huawei.com/Ascend310P-memory"
RESOURCE_HUAWEI_ASCEND_310P_CORE: Final = "huawei.com/Ascend310P-core"
RESOURCE_HUAWEI_ASCEND_910A: Final = "huawei.com/Ascend910A"
RESOURCE_HUAWEI_ASCEND_910A_MEMORY: Final = "huawei.com/Ascend910A-memory"
RESOURCE_HUAWEI_ASCEND_910A_CORE: Final = "huawei.com/Ascend910A-core"
#: MetaX: whole GPUs, sGPU slices (at most 16 per card), sGPU memory (GiB) and compute (%).
RESOURCE_METAX_GPU: Final = "metax-tech.com/gpu"
RESOURCE_METAX_SGPU: Final = "metax-tech.com/sgpu"
RESOURCE_METAX_VMEMORY: Final = "metax-tech.com/vmemory"
RESOURCE_METAX_VCORE: Final = "metax-tech.com/vcore"
#: Cambricon MLU: whole cards, sMLU compute (%) and memory (slices of 256 MiB).
RESOURCE_CAMBRICON_VMLU: Final = "cambricon.com/vmlu"
RESOURCE_CAMBRICON_SMLU_VCORE: Final = "cambricon.com/mlu.smlu.vcore"
RESOURCE_CAMBRICON_SMLU_VMEMORY: Final = "cambricon.com/mlu.smlu.vmemory"
RESOURCE_HYGON_DCUNUM: Final = "hygon.com/dcunum"
RESOURCE_HYGON_DCUMEM: Final = "hygon.com/dcumem"
RESOURCE_HYGON_DCUCORES: Final = "hygon.com/dcucores"
RESOURCE_ENFLAME_GCU: Final = "enflame.com/gcu"
RESOURCE_ENFLAME_DRS_GCU: Final = "enflame.com/drs-gcu"
RESOURCE_ENFLAME_GCU_MEMORY: Final = "enflame.com/gcu-memory"
RESOURCE_ENFLAME_GCU_CORE: Final = "enflame.com/gcu-core"
RESOURCE_MTHREADS_VGPU: Final = "mthreads.com/vgpu"
RESOURCE_MTHREADS_SGPU_MEMORY: Final = "mthreads.com/sgpu-memory"
RESOURCE_MTHREADS_SGPU_CORE: Final = "mthreads.com/sgpu-core"
#: Iluvatar names embed the chip model: ``RESOURCE_ILUVATAR_VGPU.format(chip="BI-V150")``.
RESOURCE_ILUVATAR_VGPU: Final = "iluvatar.ai/{chip}-vgpu"
RESOURCE_ILUVATAR_VMEM: Final = "iluvatar.ai/{chip}.vMem"
RESOURCE_ILUVATAR_VCORE: Final = "iluvatar.ai/{chip}.vCore"
RESOURCE_KUNLUNXIN_XPU: Final = "kunlunxin.com/xpu"
RESOURCE_AWS_NEURON: Final = "aws.amazon.com/neuron"
RESOURCE_AWS_NEURONCORE: Final = "aws.amazon.com/neuroncore"

# --- Koord-Queue pseudo resources ------------------------------------------------------------
#: Job count limit inside an ElasticQuotaTree node's min/max.
RESOURCE_QUEUE_MAX_JOBS: Final = "kube-queue/max-jobs"
RESOURCE_QUEUE_MAX_PREEMPTIBLE_JOBS: Final = "kube-queue/max-preempible-jobs"
#: Name of the single pseudo pod set of a QueueUnit without ``spec.podSet``.
QUEUE_DEFAULT_PODSET: Final = "kube-queue/default-requirement"

#: Resources every GPU-family request may use (DeviceShare knows only these).
GPU_RESOURCES: Final = frozenset(
    {
        RESOURCE_NVIDIA_GPU,
        RESOURCE_AMD_GPU,
        RESOURCE_DCU_GPU,
        RESOURCE_GPU,
        RESOURCE_GPU_SHARED,
        RESOURCE_GPU_CORE,
        RESOURCE_GPU_MEMORY,
        RESOURCE_GPU_MEMORY_RATIO,
        RESOURCE_HUAWEI_NPU_CORE,
        RESOURCE_HUAWEI_NPU_CPU,
        RESOURCE_HUAWEI_NPU_DVPP,
    }
)

# =============================================================================================
# QoS and priority (pods)
# =============================================================================================

#: Koordinator QoS class of a pod: LSE, LSR, LS, BE, SYSTEM.
LABEL_QOS_CLASS: Final = "koordinator.sh/qosClass"
#: Koordinator priority class: koord-prod, koord-mid, koord-batch, koord-free.
LABEL_PRIORITY_CLASS: Final = "koordinator.sh/priority-class"
#: Sub-priority inside a class (integer).
LABEL_PRIORITY: Final = "koordinator.sh/priority"

QOS_LSE: Final = "LSE"
QOS_LSR: Final = "LSR"
QOS_LS: Final = "LS"
QOS_BE: Final = "BE"
QOS_SYSTEM: Final = "SYSTEM"
QOS_CLASSES: Final = (QOS_LSE, QOS_LSR, QOS_LS, QOS_BE, QOS_SYSTEM)

PRIORITY_PROD: Final = "koord-prod"
PRIORITY_MID: Final = "koord-mid"
PRIORITY_BATCH: Final = "koord-batch"
PRIORITY_FREE: Final = "koord-free"
#: ``spec.priority`` bands of the priority classes (inclusive) and their default values.
PRIORITY_BANDS: Final = {
    PRIORITY_PROD: (9000, 9999, 9500),
    PRIORITY_MID: (7000, 7999, 7500),
    PRIORITY_BATCH: (5000, 5999, 5500),
    PRIORITY_FREE: (3000, 3999, 3500),
}

# --- Agent QoS overrides on pods (JSON; ``policy: default|none|auto`` + fields) -------------
ANNOTATION_CPU_BURST: Final = "koordinator.sh/cpuBurst"
ANNOTATION_CPU_QOS: Final = "koordinator.sh/cpuQOS"
ANNOTATION_MEMORY_QOS: Final = "koordinator.sh/memoryQOS"
ANNOTATION_BLKIO_QOS: Final = "koordinator.sh/blkioQOS"
#: Core scheduling group and policy (``none``/``exclusive``).
LABEL_CORE_SCHED_GROUP_ID: Final = "koordinator.sh/core-sched-group-id"
LABEL_CORE_SCHED_POLICY: Final = "koordinator.sh/core-sched-policy"
#: Pod default ``oom_score_adj`` ([-1000, 1000]) and per-container JSON overrides.
ANNOTATION_OOM_SCORE_ADJ: Final = "koordinator.sh/oom-score-adj"
ANNOTATION_OOM_SCORE_ADJ_SPEC: Final = "koordinator.sh/oom-score-adj-spec"
#: Extended resources of the containers, for runtime hooks (CRI lacks the pod spec).
ANNOTATION_EXTENDED_RESOURCE_SPEC: Final = "node.koordinator.sh/extended-resource-spec"

# --- Agent eviction --------------------------------------------------------------------------
#: JSON list of eviction features allowed to evict the pod (absent: all).
ANNOTATION_EVICTION_POLICY: Final = "koordinator.sh/eviction-policy"
#: ``"true"`` required for usage/allocatable-based eviction.
LABEL_EVICTION_ENABLED: Final = "koordinator.sh/eviction-enabled"
#: Eviction order inside a priority (int32, lower first).
ANNOTATION_EVICTION_PRIORITY: Final = "koordinator.sh/eviction-priority"

# =============================================================================================
# Nodes (agent and scheduler)
# =============================================================================================

#: Node reservation JSON ``{resources, reservedCPUs, applyPolicy}``.
ANNOTATION_NODE_RESERVATION: Final = "node.koordinator.sh/reservation"
#: SYSTEM-QoS cpuset ``{cpuset, cpusetExclusive}``.
ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: Final = "node.koordinator.sh/system-qos-resource"
#: Per-node colocation strategy override (JSON, merged).
ANNOTATION_NODE_COLOCATION_STRATEGY: Final = "node.koordinator.sh/colocation-strategy"
LABEL_NODE_CPU_RECLAIM_RATIO: Final = "node.koordinator.sh/cpu-reclaim-ratio"
LABEL_NODE_MEMORY_RECLAIM_RATIO: Final = "node.koordinator.sh/memory-reclaim-ratio"
LABEL_NODE_MID_STATIC_CPU_RESERVED_RATIO: Final = (
    "node.koordinator.sh/mid-static-cpu-reserved-ratio"
)
LABEL_NODE_MID_STATIC_MEMORY_RESERVED_RATIO: Final = (
    "node.koordinator.sh/mid-static-memory-reserved-ratio"
)
ANNOTATION_NODE_CPU_NORMALIZATION_RATIO: Final = "node.koordinator.sh/cpu-normalization-ratio"
LABEL_NODE_ENABLE_NUMA_RESERVATION: Final = "node.koordinator.sh/enable-numa-reservation"
#: ``None``, ``FullPCPUsOnly``, ``SpreadByPCPUs``.
LABEL_NODE_CPU_BIND_POLICY: Final = "node.koordinator.sh/cpu-bind-policy"
LABEL_NODE_NUMA_TOPOLOGY_POLICY: Final = "node.koordinator.sh/numa-topology-policy"
#: ``MostAllocated``, ``LeastAllocated``, ``DistributeEvenly``.
LABEL_NODE_NUMA_ALLOCATE_STRATEGY: Final = "node.koordinator.sh/numa-allocate-strategy"
#: JSON ResourceList: allocatable before amplification (load-aware, descheduler thresholds).
ANNOTATION_NODE_RAW_ALLOCATABLE: Final = "node.koordinator.sh/raw-allocatable"

# --- NodeResourceTopology annotations written by the agent -----------------------------------
ANNOTATION_NODE_CPU_BASIC_INFO: Final = "node.koordinator.sh/cpu-basic-info"
ANNOTATION_NODE_CPU_TOPOLOGY: Final = "node.koordinator.sh/cpu-topology"
ANNOTATION_NODE_POD_CPU_ALLOCS: Final = "node.koordinator.sh/pod-cpu-allocs"
ANNOTATION_NODE_CPU_SHARED_POOLS: Final = "node.koordinator.sh/cpu-shared-pools"
ANNOTATION_NODE_BE_CPU_SHARED_POOLS: Final = "node.koordinator.sh/be-cpu-shared-pools"
ANNOTATION_KUBELET_CPU_MANAGER_POLICY: Final = "kubelet.koordinator.sh/cpu-manager-policy"

# --- Device labels (on Device and Node) -------------------------------------------------------
#: ``nvidia``, ``huawei``, ``cambricon``, ``metax``, ``baidu`` (empty means nvidia).
LABEL_GPU_VENDOR: Final = "node.koordinator.sh/gpu-vendor"
LABEL_GPU_MODEL: Final = "node.koordinator.sh/gpu-model"
LABEL_GPU_DRIVER_VERSION: Final = "node.koordinator.sh/gpu-driver-version"
#: ``Honor`` or ``Prefer``.
LABEL_GPU_PARTITION_POLICY: Final = "node.koordinator.sh/gpu-partition-policy"
LABEL_SECONDARY_DEVICE_WELL_PLANNED: Final = "node.koordinator.sh/secondary-device-well-planned"
#: Device annotation: GPU partition table ``{"<#gpus>": [{minors, gpuLinkType, ...}]}``.
ANNOTATION_GPU_PARTITIONS: Final = "scheduling.koordinator.sh/gpu-partitions"
#: Pod and node label: GPU isolation provider (e.g. ``HAMi-core``).
LABEL_GPU_ISOLATION_PROVIDER: Final = "koordinator.sh/gpu-isolation-provider"
#: The isolation provider HAMi's in-container controller names.
GPU_ISOLATION_PROVIDER_HAMI_CORE: Final = "HAMi-core"

GPU_VENDOR_NVIDIA: Final = "nvidia"
GPU_VENDOR_HUAWEI: Final = "huawei"
GPU_VENDOR_CAMBRICON: Final = "cambricon"
GPU_VENDOR_METAX: Final = "metax"
GPU_VENDOR_BAIDU: Final = "baidu"

DEVICE_TYPE_GPU: Final = "gpu"
DEVICE_TYPE_RDMA: Final = "rdma"
DEVICE_TYPE_FPGA: Final = "fpga"

# --- Well-known Kubernetes keys ----------------------------------------------------------------
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
#: Taint of a cordoned node (reservations use it for ``unschedulable``).
TAINT_NODE_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"

# =============================================================================================
# Reservation
# =============================================================================================

#: Pod annotation ``{"name", "uid"}``: the reservation the pod consumes.
ANNOTATION_RESERVATION_ALLOCATED: Final = "scheduling.koordinator.sh/reservation-allocated"
#: Pod annotation: the pod must use a reservation (ReservationAffinity JSON).
ANNOTATION_RESERVATION_AFFINITY: Final = "scheduling.koordinator.sh/reservation-affinity"
#: Pod label ``"true"``: treat reservations as free capacity, never become an owner.
LABEL_RESERVATION_IGNORED: Final = "scheduling.koordinator.sh/reservation-ignored"
#: Pod annotation ``{"resourceNames": [...]}``: requests must equal the reservation exactly.
ANNOTATION_EXACT_MATCH_RESERVATION: Final = "scheduling.koordinator.sh/exact-match-reservation"
#: Reservation annotation ``{"resources": [...]}``: the Restricted resource set.
ANNOTATION_RESERVATION_RESTRICTED_OPTIONS: Final = (
    "scheduling.koordinator.sh/reservation-restricted-options"
)
#: Reservation label (int): lower positive value preferred.
LABEL_RESERVATION_ORDER: Final = "scheduling.koordinator.sh/reservation-order"
#: Reservation label ``"true"``: place only where a pre-allocatable pod is consumed.
LABEL_PRE_ALLOCATION_REQUIRED: Final = "scheduling.koordinator.sh/pre-allocation-required"
#: Reservation annotation ``{"resources": {...}}`` overriding the allocatable at bind.
ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE: Final = (
    "scheduling.koordinator.sh/reservation-resize-allocatable"
)
#: Pod label ``Reservation``: a real pod acting as a reservation.
LABEL_POD_OPERATING_MODE: Final = "scheduling.koordinator.sh/operating-mode"
ANNOTATION_RESERVATION_OWNERS: Final = "scheduling.koordinator.sh/reservation-owners"
ANNOTATION_RESERVATION_CURRENT_OWNER: Final = "scheduling.koordinator.sh/reservation-current-owner"
#: Reserve-pod annotations (the scheduler's pod view of a Reservation).
ANNOTATION_RESERVE_POD: Final = "scheduling.koordinator.sh/reserve-pod"
ANNOTATION_RESERVATION_NAME: Final = "scheduling.koordinator.sh/reservation-name"
ANNOTATION_IS_PRE_ALLOCATION: Final = "scheduling.koordinator.sh/is-pre-allocation"
ANNOTATION_RESERVATION_NODE: Final = "scheduling.koordinator.sh/reservation-node"
#: Cluster-mode pre-allocation candidate (pod label ``"true"``) and its priority (annotation).
LABEL_IS_PRE_ALLOCATABLE: Final = "pod.koordinator.sh/is-pre-allocatable"
ANNOTATION_PRE_ALLOCATABLE_PRIORITY: Final = "pod.koordinator.sh/pre-allocatable-priority"
#: Name of the fake container a resized reserve pod carries.
RESERVE_POD_FAKE_CONTAINER: Final = "__internal_fake_container__"

# =============================================================================================
# Scheduling hint, devices, NUMA, load-aware
# =============================================================================================

#: Pod annotation ``{"nodeNames", "preferredNodeNames", "extensions"}``.
ANNOTATION_SCHEDULING_HINT: Final = "internal.scheduling.koordinator.sh/scheduling-hint"
#: Deprecated spelling, read only when the new key is absent or empty.
ANNOTATION_SCHEDULING_HINT_DEPRECATED: Final = "scheduling.koordinator.sh/scheduling-hint"

#: Pod annotation: the device allocation ``{"gpu": [{minor, resources, id?, extension?}]}``.
ANNOTATION_DEVICE_ALLOCATED: Final = "scheduling.koordinator.sh/device-allocated"
ANNOTATION_DEVICE_ALLOCATE_HINT: Final = "scheduling.koordinator.sh/device-allocate-hint"
ANNOTATION_DEVICE_JOINT_ALLOCATE: Final = "scheduling.koordinator.sh/device-joint-allocate"
#: Pod annotation ``{"allocatePolicy": "Restricted|BestEffort", "ringBusBandwidth"}``.
ANNOTATION_GPU_PARTITION_SPEC: Final = "scheduling.koordinator.sh/gpu-partition-spec"
#: Device-plugin adapters: bind time (unix ns) and allocated minors (``"0,1"``).
ANNOTATION_BIND_TIMESTAMP: Final = "scheduling.koordinator.sh/bind-timestamp"
ANNOTATION_GPU_MINORS: Final = "scheduling.koordinator.sh/gpu-minors"

#: Pod annotation ``{requiredCPUBindPolicy, preferredCPUBindPolicy, ...}``.
ANNOTATION_RESOURCE_SPEC: Final = "scheduling.koordinator.sh/resource-spec"
#: Pod annotation ``{numaTopologyPolicy, singleNUMANodeExclusive}``.
ANNOTATION_NUMA_TOPOLOGY_SPEC: Final = "scheduling.koordinator.sh/numa-topology-spec"
#: Pod annotation written at bind: ``{cpuset, numaNodeResources: [{node, resources}]}``.
ANNOTATION_RESOURCE_STATUS: Final = "scheduling.koordinator.sh/resource-status"

#: Pod annotation: JSON scaling factors merged over the estimator defaults.
ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS: Final = (
    "scheduling.koordinator.sh/load-estimated-scaling-factors"
)
ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: Final = (
    "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled"
)
ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED: Final = (
    "scheduling.koordinator.sh/load-estimated-seconds-after-initialized"
)
#: Node annotation: per-node load-aware thresholds.
ANNOTATION_USAGE_THRESHOLDS: Final = "scheduling.koordinator.sh/usage-thresholds"

# =============================================================================================
# Elastic quota
# =============================================================================================

#: Quota label: parent quota name (empty means the root quota).
LABEL_QUOTA_PARENT: Final = "quota.scheduling.koordinator.sh/parent"
#: Quota label ``"true"``: a parent group (holds children, not pods).
LABEL_QUOTA_IS_PARENT: Final = "quota.scheduling.koordinator.sh/is-parent"
#: Quota label: anything but ``"false"`` lets the quota lend unused min.
LABEL_QUOTA_ALLOW_LENT_RESOURCE: Final = "quota.scheduling.koordinator.sh/allow-lent-resource"
LABEL_QUOTA_TREE_ID: Final = "quota.scheduling.koordinator.sh/tree-id"
LABEL_QUOTA_IS_ROOT: Final = "quota.scheduling.koordinator.sh/is-root"
LABEL_QUOTA_IGNORE_DEFAULT_TREE: Final = "quota.scheduling.koordinator.sh/ignore-default-tree"
#: Quota annotation (JSON ResourceList): competition weight, defaults to max.
ANNOTATION_QUOTA_SHARED_WEIGHT: Final = "quota.scheduling.koordinator.sh/shared-weight"
ANNOTATION_QUOTA_TOTAL_RESOURCE: Final = "quota.scheduling.koordinator.sh/total-resource"
#: Quota annotation (JSON list): namespaces bound to the quota.
ANNOTATION_QUOTA_NAMESPACES: Final = "quota.scheduling.koordinator.sh/namespaces"
#: Pod/job label: the quota the pod is charged to.
LABEL_QUOTA_NAME: Final = "quota.scheduling.koordinator.sh/name"
#: Pod/QueueUnit label ``"false"``: not preemptible.
LABEL_QUOTA_PREEMPTIBLE: Final = "quota.scheduling.koordinator.sh/preemptible"
#: Quota status annotations written by the scheduler (JSON ResourceLists).
ANNOTATION_QUOTA_RUNTIME: Final = "quota.scheduling.koordinator.sh/runtime"
ANNOTATION_QUOTA_REQUEST: Final = "quota.scheduling.koordinator.sh/request"
ANNOTATION_QUOTA_CHILD_REQUEST: Final = "quota.scheduling.koordinator.sh/child-request"
ANNOTATION_QUOTA_GUARANTEED: Final = "quota.scheduling.koordinator.sh/guaranteed"
ANNOTATION_QUOTA_ALLOCATED: Final = "quota.scheduling.koordinator.sh/allocated"
ANNOTATION_QUOTA_NON_PREEMPTIBLE_REQUEST: Final = (
    "quota.scheduling.koordinator.sh/non-preemptible-request"
)
ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED: Final = (
    "quota.scheduling.koordinator.sh/non-preemptible-used"
)
#: Further quota keys Koordinator defines.
LABEL_QUOTA_PROFILE: Final = "quota.scheduling.koordinator.sh/profile"
LABEL_QUOTA_ALLOW_FORCE_UPDATE: Final = "quota.scheduling.koordinator.sh/allow-force-update"
ANNOTATION_QUOTA_RESOURCE_KEYS: Final = "quota.scheduling.koordinator.sh/resource-keys"
ANNOTATION_QUOTA_UNSCHEDULABLE_RESOURCE: Final = (
    "quota.scheduling.koordinator.sh/unschedulable-resource"
)
ANNOTATION_QUOTA_ADMISSION: Final = "quota.scheduling.koordinator.sh/admission"
ANNOTATION_QUOTA_MAX_STRICT_CHECK_RESOURCE_KEYS: Final = (
    "quota.scheduling.koordinator.sh/max-strict-check-resource-keys"
)
#: QueueUnit annotations: ``ForbiddenQuotaOverSold``/``AcceptQuotaOverSold``/``ForceQuotaOverSold``.
ANNOTATION_QUOTA_OVERSOLD_TYPE: Final = "quota.scheduling.koordinator.sh/quota-oversold-type"
ANNOTATION_ACTUAL_QUOTA_OVERSOLD_TYPE: Final = (
    "quota.scheduling.koordinator.sh/actual-quota-oversold-type"
)
#: Built-in quota groups (in namespace ``koordinator-system`` by default).
QUOTA_ROOT: Final = "koordinator-root-quota"
QUOTA_SYSTEM: Final = "koordinator-system-quota"
QUOTA_DEFAULT: Final = "koordinator-default-quota"
QUOTA_NAMESPACE: Final = "koordinator-system"

# =============================================================================================
# Gang scheduling (coscheduling)
# =============================================================================================

ANNOTATION_GANG_NAME: Final = "gang.scheduling.koordinator.sh/name"
ANNOTATION_GANG_MIN_AVAILABLE: Final = "gang.scheduling.koordinator.sh/min-available"
ANNOTATION_GANG_TOTAL_NUMBER: Final = "gang.scheduling.koordinator.sh/total-number"
#: ``Strict`` (default) or ``NonStrict``.
ANNOTATION_GANG_MODE: Final = "gang.scheduling.koordinator.sh/mode"
#: Go duration; 0 or invalid means the default (600s).
ANNOTATION_GANG_WAITING_TIME: Final = "gang.scheduling.koordinator.sh/waiting-time"
#: JSON ``["ns/gangA", "ns/gangB"]``.
ANNOTATION_GANG_GROUPS: Final = "gang.scheduling.koordinator.sh/groups"
#: ``only-waiting``, ``waiting-and-running``, ``once-satisfied``.
ANNOTATION_GANG_MATCH_POLICY: Final = "gang.scheduling.koordinator.sh/match-policy"
#: Pod label naming its PodGroup.
LABEL_POD_GROUP: Final = "pod-group.scheduling.sigs.k8s.io"
ANNOTATION_POD_GROUP_MATCH_POLICY: Final = "pod-group.scheduling.sigs.k8s.io/match-policy"
#: Legacy PodGroup labels.
LABEL_POD_GROUP_NAME_LEGACY: Final = "pod-group.scheduling.sigs.k8s.io/name"
LABEL_POD_GROUP_MIN_AVAILABLE_LEGACY: Final = "pod-group.scheduling.sigs.k8s.io/min-available"
#: Written at bind, plus deprecated ``scheduling.koordinator.sh/`` twins.
ANNOTATION_BIND_GANG_GROUP_ID: Final = "internal.scheduling.koordinator.sh/bind-gang-group-id"
ANNOTATION_BIND_GANG_MEMBER_COUNT: Final = (
    "internal.scheduling.koordinator.sh/bind-gang-member-count"
)
ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED: Final = "scheduling.koordinator.sh/bind-gang-group-id"
ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED: Final = (
    "scheduling.koordinator.sh/bind-gang-member-count"
)

# =============================================================================================
# Descheduler and migration
# =============================================================================================

#: Pod label overriding the eviction policy (``Eviction``, ``Delete``, ``SoftEviction``).
LABEL_EVICT_POLICY: Final = "koordinator.sh/evict-policy"
#: PodMigrationJob annotations.
ANNOTATION_EVICT_REASON: Final = "koordinator.sh/evict-reason"
ANNOTATION_EVICT_TRIGGER: Final = "koordinator.sh/evict-trigger"
ANNOTATION_JOB_CREATED_BY: Final = "koordinator.sh/job-created-by"
#: Pod annotation: MaxInt32 forbids migration.
ANNOTATION_EVICTION_COST: Final = "scheduling.koordinator.sh/eviction-cost"
#: Pod annotation that bypasses every migration filter.
ANNOTATION_DESCHEDULER_EVICT: Final = "descheduler.alpha.kubernetes.io/evict"

# =============================================================================================
# Koord-Queue (both spellings)
# =============================================================================================

# --- Queue annotations -------------------------------------------------------------------------
#: ``"true"``: no new admission while a reserved unit still has non-running replicas.
ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING: Final = "koord-queue/wait-for-pods-running"
ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING_LEGACY: Final = "kube-queue/wait-for-pods-running"
ANNOTATION_QUEUE_ENABLE_QUEUEUNIT_PREEMPTION: Final = "koord-queue/enable-queueunit-preemption"
ANNOTATION_QUEUE_ENABLE_QUEUEUNIT_PREEMPTION_LEGACY: Final = (
    "kube-queue/enable-queueunit-preemption"
)
#: Scan at most the first N units per pass.
ANNOTATION_QUEUE_MAX_DEPTH: Final = "koord-queue/max-depth"
ANNOTATION_QUEUE_MAX_DEPTH_LEGACY: Final = "kube-queue/max-depth"
#: Intelligent policy split point (default 4).
ANNOTATION_QUEUE_PRIORITY_THRESHOLD: Final = "koord-queue/priority-threshold"
ANNOTATION_QUEUE_PRIORITY_THRESHOLD_LEGACY: Final = "kube-queue/priority-threshold"
#: YAML map of policy args.
ANNOTATION_QUEUE_ARGS: Final = "koord-queue/queue-args"
ANNOTATION_QUEUE_ARGS_LEGACY: Final = "kube-queue/queue-args"
#: Go duration between ``status.queueItemDetails`` refreshes (default 15s).
ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL: Final = "koord-queue/queue-items-refresh-interval"
ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL_LEGACY: Final = "kube-queue/queue-items-refresh-interval"
#: Presence stops ``queueItemDetails`` updates.
ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS: Final = "koord-queue/disable-show-queue-items"
ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS_LEGACY: Final = "kube-queue/disable-show-queue-items"
#: Comma list of quota names (or ``*``) allowed to enqueue here.
ANNOTATION_QUEUE_AVAILABLE_QUOTA: Final = "koord-queue/available-quota"
ANNOTATION_QUEUE_AVAILABLE_QUOTA_LEGACY: Final = "kube-queue/available-quota"
ANNOTATION_QUEUE_AVAILABLE_QUOTA_IN_QUEUE: Final = "koord-queue/available-quota-in-queue"
ANNOTATION_QUEUE_AVAILABLE_QUOTA_IN_QUEUE_LEGACY: Final = "kube-queue/available-quota-in-queue"
#: Set on auto-created queues to link queue and quota.
ANNOTATION_QUEUE_QUOTA_FULLNAME: Final = "koord-queue/quota-fullname"
ANNOTATION_QUEUE_QUOTA_FULLNAME_LEGACY: Final = "kube-queue/quota-fullname"
ANNOTATION_QUEUE_PARENT_QUOTA_FULLNAME: Final = "koord-queue/parent-quota-fullname"
ANNOTATION_QUEUE_PARENT_QUOTA_FULLNAME_LEGACY: Final = "kube-queue/parent-quota-fullname"
#: Quota label choosing the policy of the queue created for it.
LABEL_QUEUE_POLICY: Final = "koord-queue/queue-policy"
LABEL_QUEUE_POLICY_LEGACY: Final = "kube-queue/queue-policy"
#: Copied from the ElasticQuota annotation onto its auto-created Queue.
ANNOTATION_QUOTA_KOORD_QUEUE_ENABLE: Final = "quota-koord-queue-enable"
#: Queue label ``"true"``: a controller-owned queue.
LABEL_QUEUE_CREATED_BY_KUBEQUEUE: Final = "create-by-kubequeue"
#: JSON usage maps written on a Queue by the ElasticQuotaV2 plugin.
ANNOTATION_QUEUE_USED: Final = "alibabacloud.com/queue-used"
ANNOTATION_QUEUE_GUARANTEED_USED: Final = "alibabacloud.com/queue-guaranteed-used"
ANNOTATION_QUEUE_SELF_USED: Final = "alibabacloud.com/queue-self-used"
ANNOTATION_QUEUE_SELF_GUARANTEED_USED: Final = "alibabacloud.com/queue-self-guaranteed-used"
ANNOTATION_QUEUE_CHILDREN_USED: Final = "alibabacloud.com/queue-children-used"
ANNOTATION_QUEUE_CHILDREN_GUARANTEED_USED: Final = "alibabacloud.com/queue-children-guaranteed-used"

# --- Job and QueueUnit keys --------------------------------------------------------------------
#: Job/QueueUnit annotation: explicit queue (ElasticQuotaTree mode).
ANNOTATION_QUEUE_NAME: Final = "koord-queue/queue-name"
ANNOTATION_QUEUE_NAME_LEGACY: Final = "kube-queue/queue-name"
#: Job bookkeeping of the job extensions.
ANNOTATION_JOB_HAS_ENQUEUED: Final = "koord-queue/job-has-enqueued"
ANNOTATION_JOB_HAS_ENQUEUED_LEGACY: Final = "kube-queue/job-has-enqueued"
ANNOTATION_JOB_ENQUEUE_TIMESTAMP: Final = "koord-queue/job-enqueue-timestamp"
ANNOTATION_JOB_ENQUEUE_TIMESTAMP_LEGACY: Final = "kube-queue/job-enqueue-timestamp"
ANNOTATION_JOB_DEQUEUE_TIMESTAMP: Final = "koord-queue/job-dequeue-timestamp"
ANNOTATION_JOB_DEQUEUE_TIMESTAMP_LEGACY: Final = "kube-queue/job-dequeue-timestamp"
#: Pod-template annotations mapping pods back to their QueueUnit (``ns/name``) and pod set.
ANNOTATION_RELATED_QUEUEUNIT: Final = "koord-queue/related-queueunit"
ANNOTATION_RELATED_QUEUEUNIT_LEGACY: Final = "kube-queue/related-queueunit"
ANNOTATION_RELATED_PODSET_NAME: Final = "koord-queue/related-podset-name"
ANNOTATION_RELATED_PODSET_NAME_LEGACY: Final = "kube-queue/related-podset-name"
#: QueueUnit annotation: test hook that makes the tree plugin reject.
ANNOTATION_QUEUE_BLOCK_FOR_TEST: Final = "kube-queue/block-for-test"
#: Suspend flag of non-Job CRs (TF/PyTorch/MPI/Spark/Ray/Argo).
ANNOTATION_QUEUE_SUSPEND: Final = "scheduling.x-k8s.io/suspend"
#: Job annotation ``"false"``: QueueUnit ``spec.active=false``.
ANNOTATION_QUEUE_ACTIVE: Final = "scheduling.x-k8s.io/active"
#: Job annotation: positive int, the QueueUnit's execution budget.
ANNOTATION_QUEUE_MAX_EXEC_TIME_SECONDS: Final = "scheduling.x-k8s.io/max-exec-time-seconds"
#: QueueUnit annotation ``"true"``: do not schedule.
ANNOTATION_QUEUEUNIT_SUSPEND: Final = "queue-suspend"
#: Pod-level admission gate: pods start ``"false"``, admitted replicas flip to ``"true"``.
LABEL_SCHEDULE_ADMISSION: Final = "alibabacloud.com/schedule-admission"
#: QueueUnit label ``"true"``: skip live-usage sync.
LABEL_DISABLE_RESOURCE_RECYCLE: Final = "alibabacloud.com/disable-resource-recycle"
#: Fallback quota labels of older deployments.
LABEL_QUOTA_NAME_ALIBABACLOUD: Final = "alibabacloud.com/quota-name"
LABEL_QUOTA_NAME_TREE: Final = "quota.scheduling.alibabacloud.com/name"
LABEL_PREEMPTIBLE_ALIBABACLOUD: Final = "alibabacloud.com/preemptible"
#: ElasticQuotaTree attribute: lend limit.
ATTRIBUTE_LEND_LIMIT: Final = "alibabacloud.com/lendlimit"
#: Strict-dequeue reservations: labels naming the job, annotation naming the QueueUnit.
LABEL_RESERVED_JOB_NAMESPACE: Final = "reserved-job-namespace"
LABEL_RESERVED_JOB_NAME: Final = "reserved-job-name"
ANNOTATION_RESERVED_QUEUEUNIT_NAME: Final = "reserved-queueunit-name"
#: Default namespace of Queue objects.
QUEUE_NAMESPACE: Final = "koord-queue"

#: Every Koord-Queue key with a legacy twin: current spelling -> ``kube-queue/`` spelling.
QUEUE_LEGACY_KEYS: Final = {
    ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING: ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING_LEGACY,
    ANNOTATION_QUEUE_ENABLE_QUEUEUNIT_PREEMPTION: (
        ANNOTATION_QUEUE_ENABLE_QUEUEUNIT_PREEMPTION_LEGACY
    ),
    ANNOTATION_QUEUE_MAX_DEPTH: ANNOTATION_QUEUE_MAX_DEPTH_LEGACY,
    ANNOTATION_QUEUE_PRIORITY_THRESHOLD: ANNOTATION_QUEUE_PRIORITY_THRESHOLD_LEGACY,
    ANNOTATION_QUEUE_ARGS: ANNOTATION_QUEUE_ARGS_LEGACY,
    ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL: ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL_LEGACY,
    ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS: ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS_LEGACY,
    ANNOTATION_QUEUE_AVAILABLE_QUOTA: ANNOTATION_QUEUE_AVAILABLE_QUOTA_LEGACY,
    ANNOTATION_QUEUE_AVAILABLE_QUOTA_IN_QUEUE: ANNOTATION_QUEUE_AVAILABLE_QUOTA_IN_QUEUE_LEGACY,
    ANNOTATION_QUEUE_QUOTA_FULLNAME: ANNOTATION_QUEUE_QUOTA_FULLNAME_LEGACY,
    ANNOTATION_QUEUE_PARENT_QUOTA_FULLNAME: ANNOTATION_QUEUE_PARENT_QUOTA_FULLNAME_LEGACY,
    LABEL_QUEUE_POLICY: LABEL_QUEUE_POLICY_LEGACY,
    ANNOTATION_QUEUE_NAME: ANNOTATION_QUEUE_NAME_LEGACY,
    ANNOTATION_JOB_HAS_ENQUEUED: ANNOTATION_JOB_HAS_ENQUEUED_LEGACY,
    ANNOTATION_JOB_ENQUEUE_TIMESTAMP: ANNOTATION_JOB_ENQUEUE_TIMESTAMP_LEGACY,
    ANNOTATION_JOB_DEQUEUE_TIMESTAMP: ANNOTATION_JOB_DEQUEUE_TIMESTAMP_LEGACY,
    ANNOTATION_RELATED_QUEUEUNIT: ANNOTATION_RELATED_QUEUEUNIT_LEGACY,
    ANNOTATION_RELATED_PODSET_NAME: ANNOTATION_RELATED_PODSET_NAME_LEGACY,
}

# --- Kueue (for comparison and migration) -----------------------------------------------------
LABEL_KUEUE_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"
ANNOTATION_KUEUE_MAX_EXEC_TIME_SECONDS: Final = "kueue.x-k8s.io/max-exec-time-seconds"
ANNOTATION_KUEUE_JOB_MIN_PARALLELISM: Final = "kueue.x-k8s.io/job-min-parallelism"
ANNOTATION_KUEUE_PODSET_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
ANNOTATION_KUEUE_PODSET_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
ANNOTATION_KUEUE_PODSET_UNCONSTRAINED_TOPOLOGY: Final = (
    "kueue.x-k8s.io/podset-unconstrained-topology"
)

# =============================================================================================
# Vendor device-plugin adapters (pod annotations and node locks)
# =============================================================================================

#: MetaX sGPU QoS: ``fixed-share``, ``best-effort``, ``burst-share``.
ANNOTATION_SGPU_QOS_POLICY: Final = "metax-tech.com/sgpu-qos-policy"
#: Device annotation listing the sGPU QoS policies a MetaX node in sGPU mode accepts (comma
#: separated); a pod asking another one does not fit there.
ANNOTATION_SGPU_QOS_POLICIES: Final = "koordpy.io/sgpu-qos-policies"
SGPU_QOS_POLICIES: Final = ("fixed-share", "best-effort", "burst-share")
#: MetaX allocation ``[[{uuid, compute, vRam}]]`` (vRam in MiB).
ANNOTATION_METAX_GPU_DEVICES_ALLOCATED: Final = "metax-tech.com/gpu-devices-allocated"
ANNOTATION_METAX_GPU_TOPOLOGY_LOSSES: Final = "metax-tech.com/gpu.topology.losses"
ANNOTATION_METAX_GPU_TOPOLOGY_SCORES: Final = "metax-tech.com/gpu.topology.scores"
#: Huawei Ascend adapter: predicate time (ns); allocated cards are written under the resource
#: name itself (``huawei.com/npu-core: "0,1"``, ``huawei.com/Ascend310P: "Ascend310P-0"``).
ANNOTATION_HUAWEI_PREDICATE_TIME: Final = "predicate-time"
ANNOTATION_HUAWEI_NPU_CORE: Final = RESOURCE_HUAWEI_NPU_CORE
ANNOTATION_HUAWEI_ASCEND_310P: Final = RESOURCE_HUAWEI_ASCEND_310P
#: Model whose cards are allocated as ``huawei.com/Ascend310P``.
MODEL_ASCEND_310P3_300I_DUO: Final = "Ascend-310P3-300I-DUO"
#: Cambricon sMLU adapter annotations (the vendor's spelling, typo included) and node lock.
ANNOTATION_CAMBRICON_DSMLU_ASSIGNED: Final = "CAMBRICON_DSMLU_ASSIGHED"
ANNOTATION_CAMBRICON_DSMLU_PROFILE: Final = "CAMBRICON_DSMLU_PROFILE"
ANNOTATION_CAMBRICON_DSMLU_LOCK: Final = "cambricon.com/dsmlu.lock"
#: HAMi: node lock, vGPU node label, scheduler policies, device-plugin handshake keys
#: (``{type}`` is the device type, e.g. ``NVIDIA``).
ANNOTATION_HAMI_MUTEX_LOCK: Final = "hami.io/mutex.lock"
LABEL_HAMI_VGPU_NODE: Final = "hami.io/vgpu-node"
ANNOTATION_HAMI_NODE_SCHEDULER_POLICY: Final = "hami.io/node-scheduler-policy"
ANNOTATION_HAMI_GPU_SCHEDULER_POLICY: Final = "hami.io/gpu-scheduler-policy"
ANNOTATION_HAMI_NODE_HANDSHAKE: Final = "hami.io/node-handshake-{type}"
ANNOTATION_HAMI_NODE_REGISTER: Final = "hami.io/node-{type}-register"
ANNOTATION_HAMI_DEVICES_TO_ALLOCATE: Final = "hami.io/{type}-devices-to-allocate"

# =============================================================================================
# Job extensions and the simulated job runtime (koordpy's own keys)
# =============================================================================================

#: Pod label: the replica index of a pod the job controller created (``0``, ``1``, ...).
LABEL_JOB_REPLICA_INDEX: Final = "koordpy.io/replica-index"
#: Pod (or pod-template) annotation: a duration (``90s``); without a kubelet, the pod succeeds
#: that long after it started running.
ANNOTATION_SIMULATED_RUNTIME: Final = "koordpy.io/simulated-runtime"
#: Kubeflow job condition set while the job waits in a queue.
CONDITION_JOB_QUEUING: Final = "Queuing"

# =============================================================================================
# Descheduler: evictor filters and configuration (koord-descheduler, kubernetes-sigs/descheduler)
# =============================================================================================

#: Pod annotation of a mirror pod (the API twin of a static pod); never evicted.
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
#: Pod annotation naming where the kubelet got the pod; anything but ``api`` is a static pod.
ANNOTATION_CONFIG_SOURCE: Final = "kubernetes.io/config.source"
#: Built-in priority classes and the priority from which a pod counts as system-critical.
PRIORITY_CLASS_SYSTEM_CLUSTER_CRITICAL: Final = "system-cluster-critical"
PRIORITY_CLASS_SYSTEM_NODE_CRITICAL: Final = "system-node-critical"
SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
#: Values of the built-in priority classes.
SYSTEM_PRIORITY_CLASSES: Final = {
    PRIORITY_CLASS_SYSTEM_CLUSTER_CRITICAL: SYSTEM_CRITICAL_PRIORITY,
    PRIORITY_CLASS_SYSTEM_NODE_CRITICAL: SYSTEM_CRITICAL_PRIORITY + 1000,
}
#: ``scheduling.koordinator.sh/eviction-cost`` value that forbids migrating the pod (MaxInt32).
EVICTION_COST_FORBIDDEN: Final = 2**31 - 1
#: Where koord-descheduler's configuration lives (what Koordinator's Helm chart installs).
DESCHEDULER_CONFIG_NAMESPACE: Final = "koordinator-system"
DESCHEDULER_CONFIG_NAME: Final = "koord-descheduler-config"
DESCHEDULER_CONFIG_KEY: Final = "koord-descheduler-config"
