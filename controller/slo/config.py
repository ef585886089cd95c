"""``koordinator-system/slo-controller-config``: its keys parsed, checked and merged.

Each key holds JSON as Koordinator's chart and manuals write it (agent-spec §10.3):

* ``resource-threshold-config``, ``resource-qos-config``, ``cpu-burst-config``,
  ``system-config``: ``{"clusterStrategy": {...}, "nodeStrategies": [{"name", "nodeSelector",
  <strategy fields>}]}``;
* ``colocation-config``: ``{<ColocationStrategy fields>, "nodeConfigs": [{"name",
  "nodeSelector", <fields>}]}``;
* ``host-application-config``: ``{"applications": [...], "nodeConfigs": [{"name",
  "nodeSelector", "applications"}]}``.

As koord-manager does, the cluster strategy is laid over Koordinator's defaults and every node
strategy over the merged cluster strategy (a field set wins, objects merge key by key, lists are
replaced); a node takes the first node strategy whose selector matches it. Keys are matched as
Go matches them (:mod:`.gojson`); unknown keys are dropped and reported.

A key that is not valid JSON or has a value of the wrong type (koord-manager's unmarshal
failure), or one the koord-manager webhook refuses (a value out of its range, a node strategy
without a name, with a duplicate name or with an empty or bad selector) raises
:class:`SLOConfigError` naming the key, the field and the value; the caller keeps what that key
gave before. A key that is absent gives the defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from apis import codec
from apis.duration import Duration
from apis.errors import ApiError
from apis.labels import Selector, SelectorError
from apis.meta import LabelSelector
from apis.quantity import parse_quantity
from apis.slo import (
    AggregatePolicy,
    ColocationStrategy,
    CPUBurstStrategy,
    HostApplicationSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)
from controller.errors import ControllerError
from controller.slo import gojson

__all__ = [
    "COLOCATION_KEY",
    "CPU_BURST_KEY",
    "HOST_APPLICATION_KEY",
    "KEYS",
    "RESOURCE_QOS_KEY",
    "RESOURCE_THRESHOLD_KEY",
    "SYSTEM_KEY",
    "NodeProfile",
    "SLOConfigError",
    "Strategies",
    "check_burst",
    "check_colocation",
    "check_qos",
    "check_system",
    "check_threshold",
    "default_burst",
    "default_colocation",
    "default_qos",
    "default_system",
    "default_threshold",
    "merge_wire",
    "merged",
    "parse_key",
]


COLOCATION_KEY: Final = "colocation-config"
RESOURCE_THRESHOLD_KEY: Final = "resource-threshold-config"
RESOURCE_QOS_KEY: Final = "resource-qos-config"
CPU_BURST_KEY: Final = "cpu-burst-config"
SYSTEM_KEY: Final = "system-config"
HOST_APPLICATION_KEY: Final = "host-application-config"
#: The keys koordpy renders, in the order they are read.
KEYS: Final = (
    COLOCATION_KEY,
    RESOURCE_THRESHOLD_KEY,
    RESOURCE_QOS_KEY,
    CPU_BURST_KEY,
    SYSTEM_KEY,
    HOST_APPLICATION_KEY,
)

S = TypeVar("S")


class SLOConfigError(ControllerError):
    """A key of ``slo-controller-config`` that cannot be used; names key, field and value."""

    def __init__(self, key: str, message: str, *, unmarshal: bool) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        #: True: not JSON or a wrong type (koord-manager's unmarshal failure); False: a value
        #: the koord-manager webhook refuses.
        self.unmarshal = unmarshal


@dataclass(frozen=True, slots=True)
class NodeProfile(Generic[S]):
    """One node strategy, already merged over the cluster strategy."""

    name: str
    selector: Selector
    strategy: S


@dataclass(frozen=True, slots=True)
class Strategies(Generic[S]):
    """The cluster strategy and the node strategies of one key."""

    cluster: S
    nodes: tuple[NodeProfile[S], ...] = ()
    #: Keys of the JSON that no field has (dropped, as Go does).
    unknown: tuple[str, ...] = field(default=(), compare=False)

    def for_node(self, labels: Mapping[str, str]) -> S:
        """The first node strategy whose selector matches ``labels``, else the cluster's."""
        for profile in self.nodes:
            if profile.selector.matches(labels):
                return profile.strategy
        return self.cluster


# --- defaults (Koordinator's pkg/util/sloconfig) ------------------------------------------------


def default_threshold() -> ResourceThresholdStrategy:
    return ResourceThresholdStrategy(
        enable=False,
        cpu_suppress_threshold_percent=65,
        cpu_suppress_policy="cpuset",
        memory_evict_threshold_percent=70,
        cpu_evict_policy="evictByRealLimit",
    )


def default_burst() -> CPUBurstStrategy:
    return CPUBurstStrategy(
        policy="none",
        cpu_burst_percent=1000,
        cfs_quota_burst_percent=300,
        cfs_quota_burst_period_seconds=-1,
        share_pool_threshold_percent=50,
    )


def default_system() -> SystemStrategy:
    return SystemStrategy(
        min_free_kbytes_factor=100,
        watermark_scale_factor=150,
        memcg_reap_back_ground=0,
        total_network_bandwidth="0",
    )


def default_qos() -> ResourceQOSStrategy:
    """koord-manager renders an empty strategy; koordlet applies its own defaults."""
    return ResourceQOSStrategy()


def default_colocation() -> ColocationStrategy:
    return ColocationStrategy(
        enable=False,
        metric_aggregate_duration_seconds=300,
        metric_report_interval_seconds=60,
        metric_aggregate_policy=AggregatePolicy(
            durations=tuple(Duration.parse(text) for text in ("5m", "10m", "30m"))
        ),
        metric_memory_collect_policy="usageWithoutPageCache",
        cpu_reclaim_threshold_percent=60,
        cpu_calculate_policy="usage",
        memory_reclaim_threshold_percent=65,
        memory_calculate_policy="usage",
        degrade_time_minutes=15,
        update_time_threshold_seconds=300,
        resource_diff_threshold=0.1,
        mid_cpu_threshold_percent=100,
        mid_memory_threshold_percent=100,
        mid_unallocated_percent=0,
        mid_static_cpu_reserved_percent=0,
        mid_static_memory_reserved_percent=0,
    )


# --- merging --------------------------------------------------------------------------------------


def merge_wire(base: Any, over: Any) -> Any:
    """``over`` laid over ``base`` as Go's decode-into-existing does: objects merge key by key,
    anything else (lists included) replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = merge_wire(base.get(key), value) if key in base else value
        return out
    return over


def merged(base: S, over: Any, tp: type[S]) -> S:
    """The Struct ``over`` (wire form) laid over ``base``."""
    result: S = codec.decode_as(merge_wire(codec.to_builtins(base), over), tp)
    return result


# --- checks (the koord-manager webhook's rules) ---------------------------------------------------

_Range = tuple[int | float | None, int | float | None]


def _check_ranges(where: str, wire: Mapping[str, Any], ranges: Mapping[str, _Range]) -> None:
    for name, (low, high) in ranges.items():
        value = wire.get(name)
        if value is None:
            continue
        if (low is not None and value < low) or (high is not None and value > high):
            shown = f"[{'' if low is None else low}, {'' if high is None else high}]"
            raise ValueError(f"{where}{name}: {value} is out of range {shown}")


def _check_order(where: str, wire: Mapping[str, Any], lower: str, upper: str) -> None:
    low, high = wire.get(lower), wire.get(upper)
    if low is not None and high is not None and not low < high:
        raise ValueError(f"{where}{lower}: {low} must be below {upper} ({high})")


def _check_choice(where: str, wire: Mapping[str, Any], name: str, allowed: Sequence[str]) -> None:
    value = wire.get(name)
    if value is not None and value != "" and value not in allowed:
        raise ValueError(f"{where}{name}: {value!r} is not one of {', '.join(allowed)}")


_PERCENT: Final[_Range] = (0, 100)

_THRESHOLD_RANGES: Final[Mapping[str, _Range]] = {
    "cpuSuppressThresholdPercent": _PERCENT,
    "cpuSuppressMinPercent": _PERCENT,
    "memoryEvictThresholdPercent": _PERCENT,
    "memoryEvictLowerPercent": _PERCENT,
    "cpuEvictBESatisfactionUpperPercent": _PERCENT,
    "cpuEvictBESatisfactionLowerPercent": _PERCENT,
    "cpuEvictBEUsageThresholdPercent": _PERCENT,
    "cpuEvictThresholdPercent": _PERCENT,
    "cpuEvictLowerPercent": _PERCENT,
    "cpuEvictTimeWindowSeconds": (1, None),
    "memoryAllocatableEvictThresholdPercent": (0, None),
    "memoryAllocatableEvictLowerPercent": (0, None),
    "cpuAllocatableEvictThresholdPercent": (0, None),
    "cpuAllocatableEvictLowerPercent": (0, None),
    "allocatableEvictPriorityThreshold": (None, 7999),
}


def check_threshold(where: str, strategy: ResourceThresholdStrategy) -> None:
    wire = codec.to_builtins(strategy)
    _check_ranges(where, wire, _THRESHOLD_RANGES)
    _check_order(where, wire, "memoryEvictLowerPercent", "memoryEvictThresholdPercent")
    _check_order(where, wire, "cpuEvictLowerPercent", "cpuEvictThresholdPercent")
    _check_order(
        where, wire, "cpuEvictBESatisfactionLowerPercent", "cpuEvictBESatisfactionUpperPercent"
    )
    _check_order(
        where, wire, "memoryAllocatableEvictLowerPercent", "memoryAllocatableEvictThresholdPercent"
    )
    _check_order(
        where, wire, "cpuAllocatableEvictLowerPercent", "cpuAllocatableEvictThresholdPercent"
    )
    _check_choice(where, wire, "cpuSuppressPolicy", ("cpuset", "cfsQuota"))
    _check_choice(where, wire, "cpuEvictPolicy", ("evictByRealLimit", "evictByAllocatable"))


def check_burst(where: str, strategy: CPUBurstStrategy) -> None:
    wire = codec.to_builtins(strategy)
    _check_ranges(
        where,
        wire,
        {
            "cpuBurstPercent": (1, 10000),
            "cfsQuotaBurstPercent": (100, None),
            "cfsQuotaBurstPeriodSeconds": (-1, None),
            "sharePoolThresholdPercent": _PERCENT,
        },
    )
    _check_choice(where, wire, "policy", ("none", "cpuBurstOnly", "cfsQuotaBurstOnly", "auto"))


def check_system(where: str, strategy: SystemStrategy) -> None:
    wire = codec.to_builtins(strategy)
    _check_ranges(
        where,
        wire,
        {
            "minFreeKbytesFactor": (1, None),
            "watermarkScaleFactor": (1, 400),
            "memcgReapBackGround": (0, 1),
            "pageCacheLimitEnabled": (0, 1),
            "schedGroupIdentityEnabled": (0, 1),
        },
    )
    bandwidth = strategy.total_network_bandwidth
    if isinstance(bandwidth, str):
        try:
            parse_quantity(bandwidth)
        except (ApiError, ValueError):
            raise ValueError(
                f"{where}totalNetworkBandwidth: {bandwidth!r} is not a quantity"
            ) from None


_QOS_RANGES: Final[Mapping[str, Mapping[str, _Range]]] = {
    "cpuQOS": {"groupIdentity": (-1, 2), "schedIdle": (0, 1)},
    "memoryQOS": {
        "minLimitPercent": _PERCENT,
        "lowLimitPercent": _PERCENT,
        "throttlingPercent": _PERCENT,
        "wmarkRatio": _PERCENT,
        "wmarkScalePermill": (1, 1000),
        "wmarkMinAdj": (-25, 50),
        "priorityEnable": (0, 1),
        "priority": (0, 12),
        "oomKillGroup": (0, 1),
        "pageCacheLimitPercent": _PERCENT,
    },
    "resctrlQOS": {
        "catRangeStartPercent": _PERCENT,
        "catRangeEndPercent": _PERCENT,
        "mbaPercent": _PERCENT,
    },
}


def check_qos(where: str, strategy: ResourceQOSStrategy) -> None:
    wire = codec.to_builtins(strategy)
    policies = wire.get("policies") or {}
    _check_choice(f"{where}policies.", policies, "cpuPolicy", ("groupIdentity", "coreSched"))
    _check_choice(f"{where}policies.", policies, "netQOSPolicy", ("tc", "terway-qos"))
    for klass in ("lsrClass", "lsClass", "beClass", "systemClass", "cgroupRoot"):
        qos = wire.get(klass) or {}
        for part, ranges in _QOS_RANGES.items():
            values = qos.get(part) or {}
            _check_ranges(f"{where}{klass}.{part}.", values, ranges)
        resctrl = qos.get("resctrlQOS") or {}
        _check_order(
            f"{where}{klass}.resctrlQOS.", resctrl, "catRangeStartPercent", "catRangeEndPercent"
        )


def check_colocation(where: str, strategy: ColocationStrategy) -> None:
    wire = codec.to_builtins(strategy)
    _check_ranges(
        where,
        wire,
        {
            "metricAggregateDurationSeconds": (1, None),
            "metricReportIntervalSeconds": (1, None),
            "cpuReclaimThresholdPercent": (0, None),
            "memoryReclaimThresholdPercent": (0, None),
            "degradeTimeMinutes": (1, None),
            "updateTimeThresholdSeconds": (1, None),
            "midCPUThresholdPercent": _PERCENT,
            "midMemoryThresholdPercent": _PERCENT,
            "midUnallocatedPercent": _PERCENT,
            "midStaticCPUReservedPercent": _PERCENT,
            "midStaticMemoryReservedPercent": _PERCENT,
            "batchCPUThresholdPercent": (0, None),
            "batchMemoryThresholdPercent": (0, None),
        },
    )
    diff = strategy.resource_diff_threshold
    if diff is not None and not 0 < diff <= 1:
        raise ValueError(f"{where}resourceDiffThreshold: {diff} is out of range (0, 1]")
    _check_choice(where, wire, "cpuCalculatePolicy", ("usage", "maxUsageRequest"))
    _check_choice(where, wire, "memoryCalculatePolicy", ("usage", "request", "maxUsageRequest"))
    _check_choice(where, wire, "midReclaimMode", ("static",))
    _check_choice(
        where,
        wire,
        "metricMemoryCollectPolicy",
        ("usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache"),
    )


# --- parsing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KeySpec(Generic[S]):
    strategy: type[S]
    default: Callable[[], S]
    check: Callable[[str, S], None]


_SPECS: Final[Mapping[str, _KeySpec[Any]]] = {
    RESOURCE_THRESHOLD_KEY: _KeySpec(ResourceThresholdStrategy, default_threshold, check_threshold),
    RESOURCE_QOS_KEY: _KeySpec(ResourceQOSStrategy, default_qos, check_qos),
    CPU_BURST_KEY: _KeySpec(CPUBurstStrategy, default_burst, check_burst),
    SYSTEM_KEY: _KeySpec(SystemStrategy, default_system, check_system),
    COLOCATION_KEY: _KeySpec(ColocationStrategy, default_colocation, check_colocation),
}


def _pick(raw: Mapping[str, Any], name: str) -> tuple[str | None, Any]:
    """The key of ``raw`` Go would take for the field ``name`` (exact, else any case)."""
    if name in raw:
        return name, raw[name]
    for key, value in raw.items():
        if key.lower() == name.lower():
            return key, value
    return None, None


def _profile_header(
    where: str, raw: Any, seen: set[str]
) -> tuple[str, Selector, dict[str, Any], str | None]:
    """Name and selector of one node strategy; the rest of its fields (a ValueError when the
    webhook would refuse it; the GoJSONError of a wrong type)."""
    if not isinstance(raw, dict):
        raise gojson.GoJSONError(f"{where}: {gojson.json_text(raw)}: expected an object")
    rest = dict(raw)
    name_key, name = _pick(rest, "name")
    if name_key is not None:
        del rest[name_key]
    selector_key, selector_raw = _pick(rest, "nodeSelector")
    if selector_key is not None:
        del rest[selector_key]
    if name is not None and not isinstance(name, str):
        raise gojson.GoJSONError(f"{where}.name: {gojson.json_text(name)}: expected a string")
    problem = None
    if not name:
        problem = f"{where}.name: a node strategy needs a name"
    elif name in seen:
        problem = f"{where}.name: {name!r} is used by another node strategy"
    seen.add(name or "")
    conformed, _ = gojson.conform(selector_raw, LabelSelector | None)
    label_selector = gojson.decode(conformed, LabelSelector | None, f"{where}.nodeSelector")
    if problem is None and (
        label_selector is None
        or (not label_selector.match_labels and not label_selector.match_expressions)
    ):
        problem = f"{where}.nodeSelector: {gojson.json_text(selector_raw)}: must not be empty"
    selector = Selector.nothing()
    if problem is None and label_selector is not None:
        try:
            selector = Selector.from_label_selector(label_selector)
        except SelectorError as err:
            problem = f"{where}.nodeSelector: {err}"
    return name or "", selector, rest, problem


def _parse_strategies(key: str, raw: dict[str, Any], spec: _KeySpec[S]) -> Strategies[S]:
    unknown: list[str] = []
    cluster_raw: Any
    if key == COLOCATION_KEY:
        nodes_key, nodes_raw = _pick(raw, "nodeConfigs")
        cluster_raw = {k: v for k, v in raw.items() if k != nodes_key}
        cluster_where = ""
        nodes_where = "nodeConfigs"
    else:
        cluster_key, cluster_raw = _pick(raw, "clusterStrategy")
        nodes_key, nodes_raw = _pick(raw, "nodeStrategies")
        unknown.extend(other for other in raw if other not in (cluster_key, nodes_key))
        cluster_where = "clusterStrategy"
        nodes_where = "nodeStrategies"
    cluster_raw = cluster_raw if cluster_raw is not None else {}
    conformed, dropped = gojson.conform(cluster_raw, spec.strategy, cluster_where)
    unknown.extend(dropped)
    over = gojson.decode(conformed, spec.strategy, cluster_where)
    cluster = merged(spec.default(), codec.to_builtins(over), spec.strategy)
    problems: list[str] = []
    prefix = f"{cluster_where}." if cluster_where else ""
    _checked(problems, spec.check, prefix, cluster)
    if nodes_raw is None:
        nodes_raw = []
    if not isinstance(nodes_raw, list):
        raise gojson.GoJSONError(f"{nodes_where}: {gojson.json_text(nodes_raw)}: expected a list")
    profiles: list[NodeProfile[S]] = []
    seen: set[str] = set()
    for index, item in enumerate(nodes_raw):
        where = f"{nodes_where}[{index}]"
        name, selector, rest, problem = _profile_header(where, item, seen)
        if problem is not None:
            problems.append(problem)
        conformed, dropped = gojson.conform(rest, spec.strategy, where)
        unknown.extend(dropped)
        node_over = gojson.decode(conformed, spec.strategy, where)
        strategy = merged(cluster, codec.to_builtins(node_over), spec.strategy)
        _checked(problems, spec.check, f"{where}.", strategy)
        profiles.append(NodeProfile(name=name, selector=selector, strategy=strategy))
    if problems:
        raise ValueError(problems[0])
    return Strategies(cluster=cluster, nodes=tuple(profiles), unknown=tuple(unknown))


def _checked(problems: list[str], check: Callable[[str, S], None], where: str, strategy: S) -> None:
    try:
        check(where, strategy)
    except ValueError as err:
        problems.append(str(err))


_Apps = tuple[HostApplicationSpec, ...]


def _parse_host_apps(raw: dict[str, Any]) -> Strategies[_Apps]:
    unknown: list[str] = []
    apps_key, apps_raw = _pick(raw, "applications")
    nodes_key, nodes_raw = _pick(raw, "nodeConfigs")
    unknown.extend(k for k in raw if k not in (apps_key, nodes_key))
    conformed, dropped = gojson.conform(apps_raw or [], _Apps, "applications")
    unknown.extend(dropped)
    cluster = gojson.decode(conformed, _Apps, "applications")
    profiles: list[NodeProfile[_Apps]] = []
    seen: set[str] = set()
    for index, item in enumerate(nodes_raw or []):
        where = f"nodeConfigs[{index}]"
        name, selector, rest, problem = _profile_header(where, item, seen)
        if problem is not None:
            raise ValueError(problem)
        app_key, apps = _pick(rest, "applications")
        unknown.extend(f"{where}.{k}" for k in rest if k != app_key)
        conformed, dropped = gojson.conform(apps or [], _Apps, f"{where}.applications")
        unknown.extend(dropped)
        node_apps = gojson.decode(conformed, _Apps, f"{where}.applications")
        profiles.append(NodeProfile(name=name, selector=selector, strategy=node_apps))
    return Strategies(cluster=cluster, nodes=tuple(profiles), unknown=tuple(unknown))


def parse_key(key: str, text: str | None) -> Strategies[Any]:
    """The strategies of ``key`` from its text (None: the key is absent, the defaults)."""
    if key == HOST_APPLICATION_KEY:
        if text is None:
            return Strategies(cluster=())
        try:
            return _parse_host_apps(gojson.load_object(text))
        except gojson.GoJSONError as err:
            raise SLOConfigError(key, str(err), unmarshal=True) from None
        except ValueError as err:
            raise SLOConfigError(key, str(err), unmarshal=False) from None
    spec = _SPECS[key]
    if text is None:
        return Strategies(cluster=spec.default())
    try:
        return _parse_strategies(key, gojson.load_object(text), spec)
    except gojson.GoJSONError as err:
        raise SLOConfigError(key, str(err), unmarshal=True) from None
    except ValueError as err:
        raise SLOConfigError(key, str(err), unmarshal=False) from None
