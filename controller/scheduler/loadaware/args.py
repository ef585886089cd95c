"""``LoadAwareSchedulingArgs`` and the per-node thresholds (controller-spec §5.1, §8).

Defaults are those of the plugin's Args (load filter on: cpu 65 %, memory 95 %; metrics older
than 180 s expire). The shipped ``koord-scheduler`` profile (Koordinator's Helm chart) sets
``filterExpiredNodeMetrics: false`` and ``nodeMetricExpirationSeconds: 300`` and keeps the
thresholds; ``usageThresholds {cpu: 0, memory: 0}`` (the repository's own
``scheduler-config.yaml``) switches the load filter off.

The resource vector every other module uses is :func:`resource_names`: cpu and memory first,
then every other name the args mention, sorted.

A node may carry its own thresholds in the annotation
``scheduling.koordinator.sh/usage-thresholds``; :func:`node_thresholds` overlays them on the
args field by field (a field the annotation sets replaces the args' field whole; a field it
leaves out keeps the args' value).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from apis import constants as k
from apis.bounded import decode_any
from apis.codec import decode_as
from apis.duration import Duration
from apis.errors import DecodeError
from apis.meta import Model
from controller.errors import ConfigError

__all__ = [
    "AGGREGATION_TYPES",
    "AggregatedArgs",
    "ArgsError",
    "CustomAggregatedUsage",
    "CustomUsageThresholds",
    "LoadAwareArgs",
    "NodeThresholds",
    "load_args",
    "node_thresholds",
    "resource_names",
]

log = logging.getLogger(__name__)

KIND: Final = "LoadAwareSchedulingArgs"
#: Aggregations a NodeMetric reports (``aggregatedNodeUsages[].usage`` keys).
AGGREGATION_TYPES: Final = frozenset({"avg", "p50", "p90", "p95", "p99"})
DEFAULT_WEIGHTS: Final = {"cpu": 1, "memory": 1}
DEFAULT_USAGE_THRESHOLDS: Final = {"cpu": 65, "memory": 95}
DEFAULT_SCALING_FACTORS: Final = {"cpu": 85, "memory": 70}
DEFAULT_EXPIRATION_SECONDS: Final = 180
#: Estimator names accepted in ``estimator`` (there is only the default one).
ESTIMATORS: Final = frozenset({"", "default", "defaultEstimator"})


class ArgsError(ConfigError):
    """Args that cannot be used; names the field and the value."""

    def __init__(
        self, detail: str, *, field: str = "", value: object = None, shown: str = ""
    ) -> None:
        self.field = field
        self.value = value
        where = f"field {field}: " if field else ""
        shown = shown or (repr(value) if value is not None else "")
        suffix = f" (value: {shown})" if shown else ""
        super().__init__(f"{KIND}: {where}{detail}{suffix}")


def _check_range(field: str, amounts: Mapping[str, int], low: int, high: int) -> None:
    for name, amount in amounts.items():
        if not name:
            raise ArgsError("resource name must not be empty", field=field)
        if not low <= amount <= high:
            raise ArgsError(
                f"must be between {low} and {high}", field=f"{field}[{name}]", value=amount
            )


def _check_duration(field: str, duration: Duration | None) -> None:
    if duration is not None and duration.nanoseconds < 0:
        raise ArgsError("must not be negative", field=field, value=str(duration))


def _check_type(field: str, aggregation: str) -> None:
    if aggregation and aggregation not in AGGREGATION_TYPES:
        raise ArgsError(
            f"must be one of {', '.join(sorted(AGGREGATION_TYPES))}", field=field, value=aggregation
        )


class AggregatedArgs(Model):
    """Percentile-based filtering and scoring (``aggregated``)."""

    #: Thresholds in percent against the aggregated usage; empty = no aggregated filter.
    usage_thresholds: dict[str, int] = {}
    #: ``avg``, ``p50``, ``p90``, ``p95`` or ``p99`` for the filter.
    usage_aggregation_type: str = ""
    #: Window of the filter's figure; 0 or unset = the longest window the node reports.
    usage_aggregated_duration: Duration | None = None
    #: Aggregation for the score; empty = score on the latest usage.
    score_aggregation_type: str = ""
    score_aggregated_duration: Duration | None = None

    def __post_init__(self) -> None:
        _check_range("aggregated.usageThresholds", self.usage_thresholds, 0, 100)
        _check_type("aggregated.usageAggregationType", self.usage_aggregation_type)
        _check_type("aggregated.scoreAggregationType", self.score_aggregation_type)
        _check_duration("aggregated.usageAggregatedDuration", self.usage_aggregated_duration)
        _check_duration("aggregated.scoreAggregatedDuration", self.score_aggregated_duration)


class LoadAwareArgs(Model):
    """Args of the ``LoadAwareScheduling`` plugin, defaulted and validated on construction.

    Maps left empty take their defaults: ``usageThresholds`` {cpu 65, memory 95},
    ``resourceWeights`` {cpu 1, memory 1} (only while ``dominantResourceWeight`` is 0), and
    ``estimatedScalingFactors`` gets cpu 85 and memory 70 for whichever of the two it lacks.
    """

    api_version: str = ""
    kind: str = ""
    #: Whether a node whose NodeMetric is older than the expiration is filtered out.
    filter_expired_node_metrics: bool = True
    #: Age in seconds at which a NodeMetric counts as expired (default 180).
    node_metric_expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    #: With expired-metric filtering on: let such nodes pass instead of rejecting them.
    enable_schedule_when_node_metrics_expired: bool = False
    #: Score weight per resource, 1..100.
    resource_weights: dict[str, int] = {}
    #: Weight of the node's most used resource in the score, 0..100.
    dominant_resource_weight: int = 0
    #: Percent of capacity a node may reach; 0 switches a resource off.
    usage_thresholds: dict[str, int] = {}
    #: Thresholds on the usage of prod pods (applied to prod pods only); empty = off.
    prod_usage_thresholds: dict[str, int] = {}
    #: Count the node's system usage into prod usage.
    prod_usage_include_sys: bool = False
    #: Score prod pods on the node's prod usage.
    score_according_prod_usage: bool = False
    #: Name of the estimator; only the default estimator exists.
    estimator: str = ""
    #: Percent of max(limit, request) a new pod is expected to use, 1..100.
    estimated_scaling_factors: dict[str, int] = {}
    #: Keep estimating a pod for this many seconds after it was scheduled.
    estimated_seconds_after_pod_scheduled: int | None = None
    #: Keep estimating a pod for this many seconds after it was initialized.
    estimated_seconds_after_initialized: int | None = None
    #: Read scaling factors and estimation windows from pod annotations.
    allow_customize_estimation: bool = False
    aggregated: AggregatedArgs | None = None
    #: Extra resource names to track (names only used by node annotation thresholds).
    supported_resources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind and self.kind != KIND:
            raise ArgsError(f"must be {KIND}", field="kind", value=self.kind)
        if self.node_metric_expiration_seconds <= 0:
            raise ArgsError(
                "must be greater than 0",
                field="nodeMetricExpirationSeconds",
                value=self.node_metric_expiration_seconds,
            )
        if not 0 <= self.dominant_resource_weight <= 100:
            raise ArgsError(
                "must be between 0 and 100",
                field="dominantResourceWeight",
                value=self.dominant_resource_weight,
            )
        if self.estimator not in ESTIMATORS:
            raise ArgsError("unknown estimator", field="estimator", value=self.estimator)
        _check_range("resourceWeights", self.resource_weights, 1, 100)
        _check_range("usageThresholds", self.usage_thresholds, 0, 100)
        _check_range("prodUsageThresholds", self.prod_usage_thresholds, 0, 100)
        _check_range("estimatedScalingFactors", self.estimated_scaling_factors, 1, 100)
        for field, seconds in (
            ("estimatedSecondsAfterPodScheduled", self.estimated_seconds_after_pod_scheduled),
            ("estimatedSecondsAfterInitialized", self.estimated_seconds_after_initialized),
        ):
            if seconds is not None and seconds < 0:
                raise ArgsError("must not be negative", field=field, value=seconds)
        for name in self.supported_resources:
            if not name:
                raise ArgsError("resource name must not be empty", field="supportedResources")
        factors = {**DEFAULT_SCALING_FACTORS, **self.estimated_scaling_factors}
        for name in self.resource_weights:
            if name not in factors:
                raise ArgsError(
                    "every weighted resource needs an estimatedScalingFactors entry",
                    field=f"resourceWeights[{name}]",
                    value=self.resource_weights[name],
                )
        msgspec.structs.force_setattr(self, "estimated_scaling_factors", factors)
        if not self.usage_thresholds:
            msgspec.structs.force_setattr(self, "usage_thresholds", dict(DEFAULT_USAGE_THRESHOLDS))
        if not self.resource_weights and self.dominant_resource_weight == 0:
            msgspec.structs.force_setattr(self, "resource_weights", dict(DEFAULT_WEIGHTS))

    @property
    def filter_aggregation(self) -> bool:
        """Whether the args configure an aggregated-usage filter."""
        agg = self.aggregated
        return agg is not None and bool(agg.usage_thresholds) and bool(agg.usage_aggregation_type)


def load_args(raw: Mapping[str, Any] | None) -> LoadAwareArgs:
    """Args from a pluginConfig ``args`` mapping (None or empty = all defaults)."""
    try:
        return decode_as(dict(raw or {}), LoadAwareArgs)
    except DecodeError as err:
        # A check of ``__post_init__`` travels as the cause of msgspec's error.
        inner = err.__context__
        cause = inner.__cause__ if inner is not None else None
        if isinstance(cause, ArgsError):
            raise cause from None
        raise ArgsError(err.message, field=err.field, shown=err.value) from None


def resource_names(args: LoadAwareArgs) -> tuple[str, ...]:
    """The resource vector: cpu, memory, then every other name the args use, sorted."""
    names: set[str] = set(args.supported_resources)
    for amounts in (
        args.resource_weights,
        args.usage_thresholds,
        args.prod_usage_thresholds,
        args.estimated_scaling_factors,
        args.aggregated.usage_thresholds if args.aggregated is not None else {},
    ):
        names.update(amounts)
    names -= {"cpu", "memory"}
    return ("cpu", "memory", *sorted(names))


# --- per-node thresholds -----------------------------------------------------------------------


class CustomAggregatedUsage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    usage_thresholds: dict[str, int] = {}
    usage_aggregation_type: str = ""
    usage_aggregated_duration: Duration | None = None


class CustomUsageThresholds(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The node annotation ``scheduling.koordinator.sh/usage-thresholds``."""

    usage_thresholds: dict[str, int] = {}
    prod_usage_thresholds: dict[str, int] = {}
    aggregated_usage: CustomAggregatedUsage | None = None


class NodeThresholds(msgspec.Struct, frozen=True, kw_only=True):
    """The thresholds that apply to one node (percent; 0 or absent = resource not checked)."""

    usage: Mapping[str, int]
    prod_usage: Mapping[str, int]
    aggregated_usage: Mapping[str, int]
    aggregation_type: str = ""
    aggregated_duration: Duration | None = None

    @property
    def aggregated(self) -> bool:
        """Whether the aggregated-usage filter applies on this node."""
        return bool(self.aggregation_type) and any(self.aggregated_usage.values())


def _decode_custom(text: str) -> CustomUsageThresholds | None:
    try:
        custom = decode_as(decode_any(text, ""), CustomUsageThresholds)
    except (ValueError, DecodeError) as err:
        log.debug("ignoring annotation %s: %s", k.ANNOTATION_USAGE_THRESHOLDS, err)
        return None
    for amounts in (
        custom.usage_thresholds,
        custom.prod_usage_thresholds,
        custom.aggregated_usage.usage_thresholds if custom.aggregated_usage else {},
    ):
        if any(not 0 <= v <= 100 for v in amounts.values()):
            log.debug(
                "ignoring annotation %s: threshold out of 0..100", k.ANNOTATION_USAGE_THRESHOLDS
            )
            return None
    agg = custom.aggregated_usage
    if agg is not None and agg.usage_aggregation_type not in AGGREGATION_TYPES | {""}:
        log.debug("ignoring annotation %s: bad aggregation type", k.ANNOTATION_USAGE_THRESHOLDS)
        return None
    return custom


def node_thresholds(args: LoadAwareArgs, annotations: Mapping[str, str]) -> NodeThresholds:
    """The args' thresholds with the node annotation's fields laid over them.

    An annotation that is not valid JSON of the expected shape (or has a threshold outside
    0..100) is ignored as a whole.
    """
    agg = args.aggregated
    usage: Mapping[str, int] = args.usage_thresholds
    prod: Mapping[str, int] = args.prod_usage_thresholds
    agg_usage: Mapping[str, int] = agg.usage_thresholds if agg is not None else {}
    agg_type = agg.usage_aggregation_type if agg is not None else ""
    agg_duration = agg.usage_aggregated_duration if agg is not None else None
    text = annotations.get(k.ANNOTATION_USAGE_THRESHOLDS)
    custom = _decode_custom(text) if text else None
    if custom is not None:
        usage = custom.usage_thresholds or usage
        prod = custom.prod_usage_thresholds or prod
        if custom.aggregated_usage is not None:
            over = custom.aggregated_usage
            agg_usage = over.usage_thresholds or agg_usage
            agg_type = over.usage_aggregation_type or agg_type
            if over.usage_aggregated_duration is not None:
                agg_duration = over.usage_aggregated_duration
    return NodeThresholds(
        usage=usage,
        prod_usage=prod,
        aggregated_usage=agg_usage,
        aggregation_type=agg_type,
        aggregated_duration=agg_duration,
    )
