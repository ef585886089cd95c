"""The parameters QoS strategies run with: NodeSLO and agent config, defaults resolved.

Strategies never read a NodeSLO directly; they read :class:`QoSSettings`, where every optional
field of the NodeSLO has been replaced by its Koordinator default and validated. A NodeSLO
that fails validation raises :class:`SettingsError` naming the field and the value, and the
caller keeps the settings it had (the agent never runs on a half-valid config).

They are strict msgspec Structs, so the agent config holds them directly as TOML tables.
Feature gates and agent-side switches (``disable_unset_cpu_quota``) come from the agent config.
Colocation (Batch/Mid resources, computed on the node) starts from the agent config's
``[colocation]``; a NodeSLO rendered from ``slo-controller-config`` carries the node's
``colocation-config`` in its ``extensions``, which is laid over it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

import msgspec

from apis import codec
from apis.errors import ApiError
from apis.slo import (
    COLOCATION_EXTENSION,
    ColocationStrategy,
    CPUBurstStrategy,
    HostApplicationSpec,
    NodeSLOSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
)

__all__ = [
    "DEFAULT_GATES",
    "BurstSettings",
    "ColocationSettings",
    "EvictSettings",
    "GroupIdentitySettings",
    "QoSSettings",
    "SettingsError",
    "SuppressSettings",
    "from_nodeslo",
    "merge_burst",
]

#: Feature gates and their defaults (Koordinator's koordlet gates that koordpy implements).
DEFAULT_GATES: Final[Mapping[str, bool]] = {
    "BECPUSuppress": True,
    "CPUBurst": True,
    "GroupIdentity": True,
    "CPUSetAllocator": True,
    "BatchResource": True,
    "BECPUManager": False,
    "BECPUEvict": False,
    "CPUEvict": False,
    "CPUAllocatableEvict": False,
    "BEMemoryEvict": False,
    "MemoryEvict": False,
    "MemoryAllocatableEvict": False,
    "PerCPUMetric": False,
}

SuppressPolicy = Literal["cpuset", "cfsQuota"]
BurstPolicy = Literal["none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"]
CpuEvictPolicy = Literal["evictByRealLimit", "evictByAllocatable"]
CalculatePolicy = Literal["usage", "request", "maxUsageRequest"]


class SettingsError(ValueError):
    """A NodeSLO or config value out of range; names the field and the value."""


class SuppressSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``resourceUsedThresholdWithBE``: BE CPU suppress."""

    enable: bool = False
    threshold_percent: int = 65
    min_percent: int | None = None
    policy: SuppressPolicy = "cpuset"


class BurstSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``cpuBurstStrategy`` (node level; a pod may override it by annotation)."""

    policy: BurstPolicy = "none"
    cpu_burst_percent: int = 1000
    cfs_quota_burst_percent: int = 300
    cfs_quota_burst_period_seconds: int = -1
    share_pool_threshold_percent: int = 50


class EvictSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Eviction thresholds (``resourceUsedThresholdWithBE``); ``None`` = not configured."""

    memory_threshold_percent: int = 70
    memory_lower_percent: int | None = None  # None: threshold - 2
    cpu_be_satisfaction_upper_percent: int | None = None
    cpu_be_satisfaction_lower_percent: int | None = None
    cpu_be_usage_threshold_percent: int = 90
    cpu_time_window_seconds: int | None = None
    cpu_threshold_percent: int | None = None
    cpu_lower_percent: int | None = None  # None: threshold - 2
    cpu_policy: CpuEvictPolicy = "evictByRealLimit"
    cpu_allocatable_threshold_percent: int | None = None
    cpu_allocatable_lower_percent: int | None = None
    memory_allocatable_threshold_percent: int | None = None
    memory_allocatable_lower_percent: int | None = None
    evict_enabled_priority_threshold: int | None = None
    allocatable_priority_threshold: int | None = None

    @property
    def memory_lower(self) -> int:
        lower = self.memory_lower_percent
        return self.memory_threshold_percent - 2 if lower is None else lower

    @property
    def cpu_lower(self) -> int | None:
        if self.cpu_threshold_percent is None:
            return None
        lower = self.cpu_lower_percent
        return self.cpu_threshold_percent - 2 if lower is None else lower


class ColocationSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Batch/Mid allocatable (Koordinator's ColocationStrategy), from the agent config."""

    enable: bool = False
    cpu_reclaim_threshold_percent: int = 60
    memory_reclaim_threshold_percent: int = 65
    cpu_calculate_policy: CalculatePolicy = "usage"
    memory_calculate_policy: CalculatePolicy = "usage"
    degrade_time_minutes: int = 15
    mid_reclaim_mode: Literal["", "static"] = ""
    mid_cpu_threshold_percent: int = 100
    mid_memory_threshold_percent: int = 100
    mid_unallocated_percent: int = 0
    mid_static_cpu_reserved_percent: int = 0
    mid_static_memory_reserved_percent: int = 0
    batch_cpu_threshold_percent: int | None = None
    batch_memory_threshold_percent: int | None = None
    #: Usage window of the calculation, seconds (None: the strategy's own, the report interval).
    metric_aggregate_duration_seconds: int | None = None
    #: A new result is published when a resource moved by more than this fraction of the
    #: published amount, or ``update_time_threshold_seconds`` after the last publication
    #: (None: every result is published).
    resource_diff_threshold: float | None = None
    update_time_threshold_seconds: int = 300


class GroupIdentitySettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``resourceQOSStrategy``'s CPU QoS: the ``cpu.bvt_warp_ns`` of each Koordinator QoS class
    (``LSR``, ``LS``, ``BE``, ``SYSTEM``; 0 where the class's ``cpuQOS`` is off). Inactive
    (nothing written) unless some class is on under the ``groupIdentity`` CPU policy."""

    active: bool = False
    bvt: dict[str, int] = msgspec.field(default_factory=dict)


#: ``cpuQOS.groupIdentity`` of each class when enabled without a value (koordlet's defaults).
_BVT_DEFAULTS: Final[Mapping[str, int]] = {"LSR": 2, "LS": 2, "BE": -1, "SYSTEM": 0}


def _group_identity(spec: ResourceQOSStrategy) -> GroupIdentitySettings:
    path = "spec.resourceQOSStrategy"
    policy = spec.policies.cpu_policy if spec.policies is not None else ""
    classes = {
        "LSR": ("lsrClass", spec.lsr_class),
        "LS": ("lsClass", spec.ls_class),
        "BE": ("beClass", spec.be_class),
        "SYSTEM": ("systemClass", spec.system_class),
    }
    bvt: dict[str, int] = {}
    for qos, (field, qos_spec) in classes.items():
        cpu = qos_spec.cpu_qos if qos_spec is not None else None
        if cpu is None or not cpu.enable:
            bvt[qos] = 0
            continue
        value = _BVT_DEFAULTS[qos] if cpu.group_identity is None else cpu.group_identity
        if not -1 <= value <= 2:
            raise SettingsError(f"{path}.{field}.cpuQOS.groupIdentity: {value} is not in [-1, 2]")
        bvt[qos] = value
    enabled = any(
        qos_spec is not None and qos_spec.cpu_qos is not None and qos_spec.cpu_qos.enable
        for _, qos_spec in classes.values()
    )
    return GroupIdentitySettings(active=enabled and policy in ("", "groupIdentity"), bvt=bvt)


class QoSSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    suppress: SuppressSettings = msgspec.field(default_factory=SuppressSettings)
    burst: BurstSettings = msgspec.field(default_factory=BurstSettings)
    evict: EvictSettings = msgspec.field(default_factory=EvictSettings)
    group_identity: GroupIdentitySettings = msgspec.field(default_factory=GroupIdentitySettings)
    colocation: ColocationSettings = msgspec.field(default_factory=ColocationSettings)
    gates: dict[str, bool] = msgspec.field(default_factory=lambda: dict(DEFAULT_GATES))
    #: v1.8's ``-disable-unset-cpu-quota``: keep the quota of cpuset-bound pods.
    disable_unset_cpu_quota: bool = False
    #: Host applications of the NodeSLO (name, priority, qos, cgroup path).
    host_applications: tuple[HostApplicationSpec, ...] = ()

    def gate(self, name: str) -> bool:
        return self.gates.get(name, DEFAULT_GATES.get(name, False))


def _percent(name: str, value: int | None, *, low: int = 0, high: int = 100) -> None:
    if value is not None and not low <= value <= high:
        raise SettingsError(f"{name}: {value} is out of range [{low}, {high}]")


def _thresholds(spec: ResourceThresholdStrategy) -> tuple[SuppressSettings, EvictSettings]:
    path = "spec.resourceUsedThresholdWithBE"
    _percent(f"{path}.cpuSuppressThresholdPercent", spec.cpu_suppress_threshold_percent)
    _percent(f"{path}.cpuSuppressMinPercent", spec.cpu_suppress_min_percent)
    policy = spec.cpu_suppress_policy or "cpuset"
    if policy not in ("cpuset", "cfsQuota"):
        raise SettingsError(f"{path}.cpuSuppressPolicy: {policy!r} is not cpuset or cfsQuota")
    suppress = SuppressSettings(
        enable=bool(spec.enable),
        threshold_percent=_or(spec.cpu_suppress_threshold_percent, 65),
        min_percent=spec.cpu_suppress_min_percent,
        policy=policy,  # type: ignore[arg-type]
    )
    for name, value in (
        ("memoryEvictThresholdPercent", spec.memory_evict_threshold_percent),
        ("memoryEvictLowerPercent", spec.memory_evict_lower_percent),
        ("cpuEvictBEUsageThresholdPercent", spec.cpu_evict_be_usage_threshold_percent),
        ("cpuEvictThresholdPercent", spec.cpu_evict_threshold_percent),
        ("cpuEvictLowerPercent", spec.cpu_evict_lower_percent),
    ):
        _percent(f"{path}.{name}", value)
    upper = spec.cpu_evict_be_satisfaction_upper_percent
    lower = spec.cpu_evict_be_satisfaction_lower_percent
    if upper is not None or lower is not None:
        if lower is None or not 0 < lower <= 60:
            raise SettingsError(
                f"{path}.cpuEvictBESatisfactionLowerPercent: {lower} not in (0, 60]"
            )
        if upper is None or not 0 < upper < 100 or upper < lower:
            raise SettingsError(
                f"{path}.cpuEvictBESatisfactionUpperPercent: {upper} not in (0, 100) or below"
                f" the lower percent {lower}"
            )
    for kind, threshold, lowest in (
        (
            "cpu",
            spec.cpu_allocatable_evict_threshold_percent,
            spec.cpu_allocatable_evict_lower_percent,
        ),
        (
            "memory",
            spec.memory_allocatable_evict_threshold_percent,
            spec.memory_allocatable_evict_lower_percent,
        ),
    ):
        if threshold is not None and lowest is not None and lowest >= threshold:
            raise SettingsError(
                f"{path}.{kind}AllocatableEvictLowerPercent: {lowest} must be below the"
                f" threshold {threshold}"
            )
    priority = spec.allocatable_evict_priority_threshold
    if priority is not None and priority > 7999:
        raise SettingsError(
            f"{path}.allocatableEvictPriorityThreshold: {priority} exceeds 7999 (Prod pods are"
            " never evicted by allocatable)"
        )
    cpu_policy = spec.cpu_evict_policy or "evictByRealLimit"
    if cpu_policy not in ("evictByRealLimit", "evictByAllocatable"):
        raise SettingsError(f"{path}.cpuEvictPolicy: {cpu_policy!r} is not a known policy")
    evict = EvictSettings(
        memory_threshold_percent=_or(spec.memory_evict_threshold_percent, 70),
        memory_lower_percent=spec.memory_evict_lower_percent,
        cpu_be_satisfaction_upper_percent=upper,
        cpu_be_satisfaction_lower_percent=lower,
        cpu_be_usage_threshold_percent=_or(spec.cpu_evict_be_usage_threshold_percent, 90),
        cpu_time_window_seconds=spec.cpu_evict_time_window_seconds,
        cpu_threshold_percent=spec.cpu_evict_threshold_percent,
        cpu_lower_percent=spec.cpu_evict_lower_percent,
        cpu_policy=cpu_policy,  # type: ignore[arg-type]
        cpu_allocatable_threshold_percent=spec.cpu_allocatable_evict_threshold_percent,
        cpu_allocatable_lower_percent=spec.cpu_allocatable_evict_lower_percent,
        memory_allocatable_threshold_percent=spec.memory_allocatable_evict_threshold_percent,
        memory_allocatable_lower_percent=spec.memory_allocatable_evict_lower_percent,
        evict_enabled_priority_threshold=spec.evict_enabled_priority_threshold,
        allocatable_priority_threshold=priority,
    )
    return suppress, evict


def _burst(spec: CPUBurstStrategy, path: str = "spec.cpuBurstStrategy") -> BurstSettings:
    policy = spec.policy or "none"
    if policy not in ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"):
        raise SettingsError(
            f"{path}.policy: {policy!r} is not none, cpuBurstOnly, cfsQuotaBurstOnly or auto"
        )
    _percent(f"{path}.cpuBurstPercent", spec.cpu_burst_percent, low=1, high=10000)
    if spec.cfs_quota_burst_percent is not None and spec.cfs_quota_burst_percent < 100:
        raise SettingsError(
            f"{path}.cfsQuotaBurstPercent: {spec.cfs_quota_burst_percent} is below 100"
        )
    _percent(f"{path}.sharePoolThresholdPercent", spec.share_pool_threshold_percent)
    return BurstSettings(
        policy=policy,  # type: ignore[arg-type]
        cpu_burst_percent=_or(spec.cpu_burst_percent, 1000),
        cfs_quota_burst_percent=_or(spec.cfs_quota_burst_percent, 300),
        cfs_quota_burst_period_seconds=_or(spec.cfs_quota_burst_period_seconds, -1),
        share_pool_threshold_percent=_or(spec.share_pool_threshold_percent, 50),
    )


def merge_burst(base: BurstSettings, override: CPUBurstStrategy, path: str) -> BurstSettings:
    """A pod's ``koordinator.sh/cpuBurst`` annotation laid field by field over the node's."""
    merged = CPUBurstStrategy(
        policy=override.policy or base.policy,
        cpu_burst_percent=_or(override.cpu_burst_percent, base.cpu_burst_percent),
        cfs_quota_burst_percent=_or(override.cfs_quota_burst_percent, base.cfs_quota_burst_percent),
        cfs_quota_burst_period_seconds=_or(
            override.cfs_quota_burst_period_seconds, base.cfs_quota_burst_period_seconds
        ),
        share_pool_threshold_percent=base.share_pool_threshold_percent,
    )
    return _burst(merged, path)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


#: ColocationStrategy wire fields -> ColocationSettings fields, with their ranges.
_COLOCATION_FIELDS: Final[Mapping[str, tuple[str, int | None, int | None]]] = {
    "cpuReclaimThresholdPercent": ("cpu_reclaim_threshold_percent", 0, None),
    "memoryReclaimThresholdPercent": ("memory_reclaim_threshold_percent", 0, None),
    "degradeTimeMinutes": ("degrade_time_minutes", 1, None),
    "updateTimeThresholdSeconds": ("update_time_threshold_seconds", 1, None),
    "metricAggregateDurationSeconds": ("metric_aggregate_duration_seconds", 1, None),
    "midCPUThresholdPercent": ("mid_cpu_threshold_percent", 0, 100),
    "midMemoryThresholdPercent": ("mid_memory_threshold_percent", 0, 100),
    "midUnallocatedPercent": ("mid_unallocated_percent", 0, 100),
    "midStaticCPUReservedPercent": ("mid_static_cpu_reserved_percent", 0, 100),
    "midStaticMemoryReservedPercent": ("mid_static_memory_reserved_percent", 0, 100),
    "batchCPUThresholdPercent": ("batch_cpu_threshold_percent", 0, None),
    "batchMemoryThresholdPercent": ("batch_memory_threshold_percent", 0, None),
}


def _colocation(raw: object, base: ColocationSettings) -> ColocationSettings:
    """The controller's ``colocation-config`` for this node (NodeSLO ``extensions``) laid
    over the agent config's ``[colocation]``."""
    path = f"spec.extensions.{COLOCATION_EXTENSION}"
    try:
        strategy = codec.decode_as(raw, ColocationStrategy)
    except ApiError as err:
        raise SettingsError(f"{path}: {err}") from None
    wire = codec.to_builtins(strategy)
    values: dict[str, object] = {}
    for name, (attr, low, high) in _COLOCATION_FIELDS.items():
        value = wire.get(name)
        if value is None:
            continue
        if value < (low or 0) or (high is not None and value > high):
            raise SettingsError(f"{path}.{name}: {value} is out of range")
        values[attr] = value
    for name, attr, allowed in (
        ("cpuCalculatePolicy", "cpu_calculate_policy", ("usage", "maxUsageRequest")),
        (
            "memoryCalculatePolicy",
            "memory_calculate_policy",
            ("usage", "request", "maxUsageRequest"),
        ),
        ("midReclaimMode", "mid_reclaim_mode", ("", "static")),
    ):
        value = wire.get(name)
        if value is None:
            continue
        if value not in allowed:
            raise SettingsError(f"{path}.{name}: {value!r} is not one of {', '.join(allowed)}")
        values[attr] = value
    diff = strategy.resource_diff_threshold
    if diff is not None:
        if not 0 < diff <= 1:
            raise SettingsError(f"{path}.resourceDiffThreshold: {diff} is out of range (0, 1]")
        values["resource_diff_threshold"] = diff
    if strategy.enable is not None:
        values["enable"] = strategy.enable
    return msgspec.structs.replace(base, **values)


def from_nodeslo(spec: NodeSLOSpec | None, base: QoSSettings) -> QoSSettings:
    """``base`` (agent config and defaults) with the NodeSLO's strategies laid over it."""
    if spec is None:
        return base
    suppress, evict = base.suppress, base.evict
    if spec.resource_used_threshold_with_be is not None:
        suppress, evict = _thresholds(spec.resource_used_threshold_with_be)
    burst = base.burst
    if spec.cpu_burst_strategy is not None:
        burst = _burst(spec.cpu_burst_strategy)
    colocation = base.colocation
    extension = (spec.extensions or {}).get(COLOCATION_EXTENSION)
    if extension is not None:
        colocation = _colocation(extension, base.colocation)
    group_identity = base.group_identity
    if spec.resource_qos_strategy is not None:
        group_identity = _group_identity(spec.resource_qos_strategy)
    return msgspec.structs.replace(
        base,
        suppress=suppress,
        evict=evict,
        burst=burst,
        colocation=colocation,
        group_identity=group_identity,
        host_applications=tuple(spec.host_applications),
    )
