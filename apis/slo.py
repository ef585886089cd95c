"""``slo.koordinator.sh/v1alpha1``: NodeMetric and NodeSLO (cluster-scoped, named after the node).

NodeMetric carries a node's measured usage (written by the agent every report interval);
NodeSLO carries the QoS strategies the agent enforces on that node. Every field of the CRDs is
known; optional numbers are ``int | None`` (Koordinator's pointers: unset means "use the
default").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import msgspec

from apis.duration import Duration
from apis.meta import Model, Object, ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import DeviceInfo

__all__ = [
    "COLOCATION_EXTENSION",
    "CPUQOS",
    "AggregatePolicy",
    "AggregatedUsage",
    "BlkIOQOS",
    "BlockCfg",
    "CPUBurstStrategy",
    "CgroupPath",
    "ColocationStrategy",
    "HostApplicationMetricInfo",
    "HostApplicationSpec",
    "IOCfg",
    "MemoryQOS",
    "NUMAMetricInfo",
    "NetworkQOS",
    "NodeMetric",
    "NodeMetricCollectPolicy",
    "NodeMetricInfo",
    "NodeMetricSpec",
    "NodeMetricStatus",
    "NodeSLO",
    "NodeSLOSpec",
    "PodMetricInfo",
    "ReclaimableMetric",
    "ResctrlQOS",
    "ResourceMap",
    "ResourceQOS",
    "ResourceQOSPolicies",
    "ResourceQOSStrategy",
    "ResourceThresholdStrategy",
    "SystemStrategy",
]

_NO_RESOURCES = ResourceList()

# --- NodeMetric --------------------------------------------------------------------------------


class ResourceMap(Model):
    """Usage of some scope: resource amounts plus per-device usage (GPU core %, memory...)."""

    resources: ResourceList = _NO_RESOURCES
    devices: tuple[DeviceInfo, ...] = ()


_NO_USAGE = ResourceMap()


class AggregatePolicy(Model):
    durations: tuple[Duration, ...] = ()


class NodeMetricCollectPolicy(Model):
    #: Window of the averaged usage (default 300, at least 60).
    aggregate_duration_seconds: int | None = None
    #: How often the agent reports (default 60, at least 30).
    report_interval_seconds: int | None = None
    #: Windows of the percentile figures (default 5m, 10m, 30m).
    node_aggregate_policy: AggregatePolicy | None = None
    #: ``usageWithoutPageCache`` (default), ``usageWithHotPageCache``, ``usageWithPageCache``.
    node_memory_collect_policy: str = ""


class NodeMetricSpec(Model):
    metric_collect_policy: NodeMetricCollectPolicy | None = None


class AggregatedUsage(Model):
    """Usage over one window, by aggregation (``avg``, ``p50``, ``p90``, ``p95``, ``p99``)."""

    usage: dict[str, ResourceMap] = {}
    duration: Duration | None = None


class NUMAMetricInfo(Model):
    numa_node_id: int = msgspec.field(name="numaNodeID")
    node_usage: ResourceMap = _NO_USAGE
    system_usage: ResourceMap = _NO_USAGE


class NodeMetricInfo(Model):
    node_usage: ResourceMap = _NO_USAGE
    aggregated_node_usages: tuple[AggregatedUsage, ...] = ()
    system_usage: ResourceMap = _NO_USAGE
    aggregated_system_usages: tuple[AggregatedUsage, ...] = ()
    numa_usages: tuple[NUMAMetricInfo, ...] = ()


class PodMetricInfo(Model):
    name: str = ""
    namespace: str = ""
    pod_usage: ResourceMap = _NO_USAGE
    #: Koordinator priority class (``koord-prod``, ``koord-batch``...).
    priority: str = ""
    #: Koordinator QoS class (``LS``, ``BE``...).
    qos: str = ""
    extensions: dict[str, Any] | None = None


class HostApplicationMetricInfo(Model):
    name: str = ""
    usage: ResourceMap = _NO_USAGE
    priority: str = ""
    qos: str = ""


class ReclaimableMetric(Model):
    resource: ResourceMap = _NO_USAGE


class NodeMetricStatus(Model):
    update_time: datetime | None = None
    node_metric: NodeMetricInfo | None = None
    pods_metric: tuple[PodMetricInfo, ...] = ()
    host_application_metric: tuple[HostApplicationMetricInfo, ...] = ()
    prod_reclaimable_metric: ReclaimableMetric | None = None
    prod_peak_metric: ReclaimableMetric | None = None


class NodeMetric(Object):
    api_version: str = "slo.koordinator.sh/v1alpha1"
    kind: str = "NodeMetric"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeMetricSpec = msgspec.field(default_factory=NodeMetricSpec)
    status: NodeMetricStatus = msgspec.field(default_factory=NodeMetricStatus)


# --- NodeSLO -----------------------------------------------------------------------------------


class ResourceThresholdStrategy(Model):
    """``resourceUsedThresholdWithBE``: BE suppression and eviction thresholds."""

    enable: bool | None = None
    cpu_suppress_threshold_percent: int | None = None
    cpu_suppress_min_percent: int | None = None
    #: ``cpuset`` (default) or ``cfsQuota``.
    cpu_suppress_policy: str = ""
    memory_evict_threshold_percent: int | None = None
    memory_evict_lower_percent: int | None = None
    memory_allocatable_evict_threshold_percent: int | None = None
    memory_allocatable_evict_lower_percent: int | None = None
    cpu_evict_be_satisfaction_upper_percent: int | None = msgspec.field(
        default=None, name="cpuEvictBESatisfactionUpperPercent"
    )
    cpu_evict_be_satisfaction_lower_percent: int | None = msgspec.field(
        default=None, name="cpuEvictBESatisfactionLowerPercent"
    )
    cpu_evict_be_usage_threshold_percent: int | None = msgspec.field(
        default=None, name="cpuEvictBEUsageThresholdPercent"
    )
    cpu_evict_time_window_seconds: int | None = None
    cpu_evict_threshold_percent: int | None = None
    cpu_evict_lower_percent: int | None = None
    cpu_allocatable_evict_threshold_percent: int | None = None
    cpu_allocatable_evict_lower_percent: int | None = None
    #: ``evictByRealLimit`` (default) or ``evictByAllocatable``.
    cpu_evict_policy: str = ""
    evict_enabled_priority_threshold: int | None = None
    allocatable_evict_priority_threshold: int | None = None


class CPUQOS(Model):
    enable: bool | None = None
    group_identity: int | None = None
    sched_idle: int | None = None
    core_expeller: bool | None = None


class MemoryQOS(Model):
    enable: bool | None = None
    min_limit_percent: int | None = None
    low_limit_percent: int | None = None
    throttling_percent: int | None = None
    wmark_ratio: int | None = None
    wmark_scale_permill: int | None = None
    wmark_min_adj: int | None = None
    priority_enable: int | None = None
    priority: int | None = None
    oom_kill_group: int | None = None
    page_cache_enable: bool | None = None
    page_cache_limit_percent: int | None = None
    page_cache_limit_size: int | None = None
    page_cache_reclaim_sync: bool | None = None


class IOCfg(Model):
    read_iops: int | None = msgspec.field(default=None, name="readIOPS")
    write_iops: int | None = msgspec.field(default=None, name="writeIOPS")
    read_bps: int | None = msgspec.field(default=None, name="readBPS")
    write_bps: int | None = msgspec.field(default=None, name="writeBPS")
    io_weight_percent: int | None = msgspec.field(default=None, name="ioWeightPercent")
    enable_user_model: bool | None = None
    model_read_bps: int | None = msgspec.field(default=None, name="modelReadBPS")
    model_write_bps: int | None = msgspec.field(default=None, name="modelWriteBPS")
    model_read_seq_iops: int | None = msgspec.field(default=None, name="modelReadSeqIOPS")
    model_write_seq_iops: int | None = msgspec.field(default=None, name="modelWriteSeqIOPS")
    model_read_rand_iops: int | None = msgspec.field(default=None, name="modelReadRandIOPS")
    model_write_rand_iops: int | None = msgspec.field(default=None, name="modelWriteRandIOPS")
    read_latency: int | None = None
    write_latency: int | None = None
    read_latency_percent: int | None = None
    write_latency_percent: int | None = None


class BlockCfg(Model):
    name: str = ""
    #: ``device``, ``volumegroup`` or ``podvolume``.
    type: str = ""
    io_cfg: IOCfg | None = None


class BlkIOQOS(Model):
    enable: bool | None = None
    blocks: tuple[BlockCfg, ...] = ()


class ResctrlQOS(Model):
    enable: bool | None = None
    cat_range_start_percent: int | None = None
    cat_range_end_percent: int | None = None
    mba_percent: int | None = None


class NetworkQOS(Model):
    """Bandwidths: an integer percentage of the node bandwidth or a quantity string."""

    enable: bool | None = None
    ingress_request: int | str | None = None
    ingress_limit: int | str | None = None
    egress_request: int | str | None = None
    egress_limit: int | str | None = None


class ResourceQOS(Model):
    """The QoS knobs of one class (``lsrClass``, ``lsClass``, ``beClass``...)."""

    cpu_qos: CPUQOS | None = msgspec.field(default=None, name="cpuQOS")
    memory_qos: MemoryQOS | None = msgspec.field(default=None, name="memoryQOS")
    blkio_qos: BlkIOQOS | None = msgspec.field(default=None, name="blkioQOS")
    resctrl_qos: ResctrlQOS | None = msgspec.field(default=None, name="resctrlQOS")
    network_qos: NetworkQOS | None = msgspec.field(default=None, name="networkQOS")


class ResourceQOSPolicies(Model):
    #: ``groupIdentity`` (default) or ``coreSched``.
    cpu_policy: str = ""
    #: ``tc`` or ``terway-qos``.
    net_qos_policy: str = msgspec.field(default="", name="netQOSPolicy")


class ResourceQOSStrategy(Model):
    policies: ResourceQOSPolicies | None = None
    lsr_class: ResourceQOS | None = None
    ls_class: ResourceQOS | None = None
    be_class: ResourceQOS | None = None
    system_class: ResourceQOS | None = None
    cgroup_root: ResourceQOS | None = None


class CPUBurstStrategy(Model):
    #: ``none``, ``cpuBurstOnly``, ``cfsQuotaBurstOnly``, ``auto``.
    policy: str = ""
    cpu_burst_percent: int | None = None
    cfs_quota_burst_percent: int | None = None
    cfs_quota_burst_period_seconds: int | None = None
    share_pool_threshold_percent: int | None = None


class SystemStrategy(Model):
    min_free_kbytes_factor: int | None = None
    watermark_scale_factor: int | None = None
    memcg_reap_back_ground: int | None = msgspec.field(default=None, name="memcgReapBackGround")
    sched_group_identity_enabled: int | None = None
    sched_idle_saver_wmark: int | None = None
    sched_features: dict[str, bool] = {}
    page_cache_limit_enabled: int | None = None
    #: Node network bandwidth as a quantity (Mbps), as given.
    total_network_bandwidth: int | str | None = None


class CgroupPath(Model):
    #: ``CgroupRoot``, ``Kubepods``, ``KubepodsBurstable``, ``KubepodsBesteffort``.
    base: str = ""
    parent_dir: str = ""
    relative_path: str = ""


class HostApplicationSpec(Model):
    name: str = ""
    priority: str = ""
    qos: str = ""
    cgroup_path: CgroupPath | None = None
    strategy: dict[str, Any] | None = None


class ColocationStrategy(Model):
    """``colocation-config`` of ``slo-controller-config``: Batch/Mid resources of a node.

    koord-manager reads it itself; koordpy computes Batch/Mid resources on the node, so the
    controller hands each node its resolved strategy in the NodeSLO's ``extensions`` under
    :data:`COLOCATION_EXTENSION`.
    """

    enable: bool | None = None
    metric_aggregate_duration_seconds: int | None = None
    metric_report_interval_seconds: int | None = None
    metric_aggregate_policy: AggregatePolicy | None = None
    #: ``usageWithoutPageCache`` (default), ``usageWithHotPageCache``, ``usageWithPageCache``.
    metric_memory_collect_policy: str | None = None
    cpu_reclaim_threshold_percent: int | None = None
    #: ``usage`` (default) or ``maxUsageRequest``.
    cpu_calculate_policy: str | None = None
    memory_reclaim_threshold_percent: int | None = None
    #: ``usage`` (default), ``request`` or ``maxUsageRequest``.
    memory_calculate_policy: str | None = None
    degrade_time_minutes: int | None = None
    update_time_threshold_seconds: int | None = None
    resource_diff_threshold: float | None = None
    #: Unset (dynamic) or ``static``.
    mid_reclaim_mode: str | None = None
    mid_cpu_threshold_percent: int | None = msgspec.field(
        default=None, name="midCPUThresholdPercent"
    )
    mid_memory_threshold_percent: int | None = None
    mid_unallocated_percent: int | None = None
    mid_static_cpu_reserved_percent: int | None = msgspec.field(
        default=None, name="midStaticCPUReservedPercent"
    )
    mid_static_memory_reserved_percent: int | None = None
    batch_cpu_threshold_percent: int | None = msgspec.field(
        default=None, name="batchCPUThresholdPercent"
    )
    batch_memory_threshold_percent: int | None = None
    extensions: dict[str, Any] | None = None


#: Key of the node's resolved :class:`ColocationStrategy` in ``NodeSLO.spec.extensions``.
COLOCATION_EXTENSION: Final = "koordpy.io/colocation-strategy"


class NodeSLOSpec(Model):
    resource_used_threshold_with_be: ResourceThresholdStrategy | None = msgspec.field(
        default=None, name="resourceUsedThresholdWithBE"
    )
    resource_qos_strategy: ResourceQOSStrategy | None = msgspec.field(
        default=None, name="resourceQOSStrategy"
    )
    cpu_burst_strategy: CPUBurstStrategy | None = None
    system_strategy: SystemStrategy | None = None
    extensions: dict[str, Any] | None = None
    host_applications: tuple[HostApplicationSpec, ...] = ()


class NodeSLO(Object):
    api_version: str = "slo.koordinator.sh/v1alpha1"
    kind: str = "NodeSLO"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: NodeSLOSpec = msgspec.field(default_factory=NodeSLOSpec)
    #: The CRD defines no status fields.
    status: dict[str, Any] = msgspec.field(default_factory=dict)
