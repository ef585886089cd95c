"""``LowNodeLoadArgs`` and the node pools it resolves to (controller-spec §6.4).

Decoded from the descheduler profile's ``pluginConfig`` (camelCase, unknown fields refused);
a bad value raises :class:`LowNodeLoadArgsError` naming the field and the value.

Defaults: ``nodeMetricExpirationSeconds`` 180, ``nodeFit`` on, ``numberOfNodes`` 0,
``detectorCacheTimeout`` 5m, ``anomalyCondition`` {timeout 1m, consecutiveAbnormalities 5,
consecutiveNormalities 3}, ``resourceWeights`` 1 for cpu, memory and every resource a threshold
names (a weight that is missing or not positive becomes 1). Thresholds have no default.

:func:`node_pools` turns the args into the pools the plugin runs, in order: first
``__default_node_pool__`` made of the top-level settings (with the top-level ``nodeSelector``),
then every entry of ``nodePools``. A pool inherits each field it leaves unset from the
defaulted top level: ``useDeviationThresholds``, the four threshold maps, ``resourceWeights``
(to which the pool's own threshold names are added with weight 1) and ``anomalyCondition``
(whole when unset; field by field when given: a zero or unset counter and an unset timeout take
the top level's). Both anomaly counters are defaulted when zero, at the top level as in pools
(upstream fills only one of them when both are zero, §9 item 10; we do not repeat that).
A timeout of ``0s`` means no timeout.

Validation: ``nodeMetricExpirationSeconds`` > 0; ``numberOfNodes`` >= 0; only one of
``evictableNamespaces.include``/``exclude``; selectors that parse; per pool every percentage in
[0, 100], low <= high, prodHigh <= high and prodLow <= prodHigh (for each resource both maps
name); counters >= 0; pool names non-empty and unique.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from apis.codec import decode_as
from apis.duration import Duration
from apis.errors import DecodeError
from apis.labels import Selector, SelectorError
from apis.meta import LabelSelector, Model
from controller.descheduler.selection import (
    EvictableNamespaces,
    PodSelector,
    namespaces_problem,
)

__all__ = [
    "DEFAULT_POOL",
    "KIND",
    "AnomalyCondition",
    "EvictableNamespaces",
    "LowNodeLoadArgs",
    "LowNodeLoadArgsError",
    "NodePool",
    "PodSelector",
    "Pool",
    "load_args",
    "node_pools",
]

KIND: Final = "LowNodeLoadArgs"
#: The pool the top-level settings make; always the first.
DEFAULT_POOL: Final = "__default_node_pool__"

DEFAULT_EXPIRATION_SECONDS: Final = 180
DEFAULT_TIMEOUT: Final = timedelta(minutes=1)
DEFAULT_CONSECUTIVE_ABNORMALITIES: Final = 5
DEFAULT_CONSECUTIVE_NORMALITIES: Final = 3
DEFAULT_DETECTOR_CACHE_TIMEOUT: Final = timedelta(minutes=5)
_DEFAULT_WEIGHTED: Final = ("cpu", "memory")

Thresholds = dict[str, float]


class LowNodeLoadArgsError(ValueError):
    """A LowNodeLoadArgs field with a value it may not have."""


def _fail(field: str, value: object, rule: str) -> LowNodeLoadArgsError:
    return LowNodeLoadArgsError(f"{KIND}.{field}: {value!r} {rule}")


def _selector(field: str, selector: LabelSelector | None) -> Selector | None:
    """The parsed selector; None when unset (every node or pod)."""
    if selector is None:
        return None
    try:
        return Selector.from_label_selector(selector)
    except SelectorError as err:
        raise _fail(field, err.text, err.reason) from None


class AnomalyCondition(Model):
    """When an over-threshold node becomes a source, and when it stops being one (see
    :mod:`~controller.descheduler.plugins.lownodeload.anomaly`). Unset/zero: inherited or
    defaulted."""

    #: How long a node stays abnormal at most (from when it became abnormal); ``0s``: forever.
    timeout: Duration | None = None
    #: Consecutive over-threshold cycles that make a node abnormal (a source).
    consecutive_abnormalities: int = 0
    #: Consecutive normal marks that make an abnormal node normal again.
    consecutive_normalities: int = 0


class NodePool(Model):
    """One entry of ``nodePools``; every unset field is inherited from the top level."""

    name: str = ""
    #: Nodes of the pool (unset: every node).
    node_selector: LabelSelector | None = None
    use_deviation_thresholds: bool | None = None
    high_thresholds: Thresholds | None = None
    low_thresholds: Thresholds | None = None
    prod_high_thresholds: Thresholds | None = None
    prod_low_thresholds: Thresholds | None = None
    resource_weights: dict[str, int] | None = None
    anomaly_condition: AnomalyCondition | None = None


@dataclass(frozen=True, slots=True)
class Anomaly:
    """An anomaly condition with every field settled."""

    consecutive_abnormalities: int
    consecutive_normalities: int
    #: None: an abnormal node never times out.
    timeout: timedelta | None


@dataclass(frozen=True, slots=True)
class Pool:
    """A node pool ready to run: every field settled (inherited or defaulted)."""

    name: str
    #: None: every node.
    node_selector: Selector | None
    use_deviation_thresholds: bool
    high: Mapping[str, float]
    low: Mapping[str, float]
    prod_high: Mapping[str, float]
    prod_low: Mapping[str, float]
    resource_weights: Mapping[str, int]
    anomaly: Anomaly

    @property
    def resources(self) -> tuple[str, ...]:
        """The resources the pool looks at: every name of its four threshold maps, and memory
        always (§9 item 10); cpu and memory first, then the rest by name."""
        names = {"memory", *self.high, *self.low, *self.prod_high, *self.prod_low}
        first = [name for name in _DEFAULT_WEIGHTED if name in names]
        return (*first, *sorted(names.difference(first)))

    @property
    def has_prod_thresholds(self) -> bool:
        """Whether the pool classifies nodes by their prod usage at all."""
        return bool(self.prod_high or self.prod_low)


class LowNodeLoadArgs(Model):
    """Args of the ``LowNodeLoad`` Balance plugin, validated on construction."""

    api_version: str = ""
    kind: str = ""
    #: The plugin does nothing while paused.
    paused: bool = False
    #: Decide, log the evictions it would make, evict nothing.
    dry_run: bool = False
    #: Act only when more than this many nodes of a pool are underutilized.
    number_of_nodes: int = 0
    #: A NodeMetric older than this (or without ``updateTime``) is ignored, with its node.
    node_metric_expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS
    evictable_namespaces: EvictableNamespaces | None = None
    #: Nodes of the default pool (unset: every node of the profile).
    node_selector: LabelSelector | None = None
    #: Candidates match at least one of these (none: every pod).
    pod_selectors: tuple[PodSelector, ...] = ()
    #: Evict a pod only when a target node fits it (requests and usage).
    node_fit: bool = True
    #: Thresholds are distances (percent) from the pool's average usage, not levels.
    use_deviation_thresholds: bool = False
    high_thresholds: Thresholds | None = None
    low_thresholds: Thresholds | None = None
    prod_high_thresholds: Thresholds | None = None
    prod_low_thresholds: Thresholds | None = None
    resource_weights: dict[str, int] | None = None
    anomaly_condition: AnomalyCondition | None = None
    #: How long a node's anomaly detector lives after its last mark.
    detector_cache_timeout: Duration | None = None
    node_pools: tuple[NodePool, ...] = ()

    def __post_init__(self) -> None:
        if self.kind and self.kind != KIND:
            raise _fail("kind", self.kind, f"must be {KIND}")
        problem = namespaces_problem(self.evictable_namespaces)
        if problem is not None:
            raise _fail("evictableNamespaces", *problem)
        if self.node_metric_expiration_seconds <= 0:
            raise _fail(
                "nodeMetricExpirationSeconds", self.node_metric_expiration_seconds, "must be > 0"
            )
        if self.number_of_nodes < 0:
            raise _fail("numberOfNodes", self.number_of_nodes, "must be >= 0")
        if self.detector_cache_timeout is not None and self.detector_cache_timeout.nanoseconds < 0:
            raise _fail("detectorCacheTimeout", str(self.detector_cache_timeout), "must be >= 0")
        for i, entry in enumerate(self.pod_selectors):
            _selector(f"podSelectors[{i}].selector", entry.selector)
        node_pools(self)

    @property
    def detector_ttl(self) -> timedelta:
        cache = self.detector_cache_timeout
        if cache is None or cache.nanoseconds == 0:
            return DEFAULT_DETECTOR_CACHE_TIMEOUT
        return timedelta(microseconds=cache.nanoseconds // 1000)

    @property
    def pod_selector_list(self) -> tuple[Selector, ...]:
        """``podSelectors`` parsed (a missing selector selects nothing)."""
        return tuple(Selector.from_label_selector(entry.selector) for entry in self.pod_selectors)


def _timeout(field: str, value: Duration | None) -> timedelta | None:
    if value is None:
        return DEFAULT_TIMEOUT
    if value.nanoseconds < 0:
        raise _fail(field, str(value), "must be >= 0")
    return timedelta(microseconds=value.nanoseconds // 1000) if value.nanoseconds else None


def _anomaly(field: str, given: AnomalyCondition | None, base: Anomaly) -> Anomaly:
    """``given`` with its unset/zero fields taken from ``base``."""
    if given is None:
        return base
    for name, count in (
        ("consecutiveAbnormalities", given.consecutive_abnormalities),
        ("consecutiveNormalities", given.consecutive_normalities),
    ):
        if count < 0:
            raise _fail(f"{field}.{name}", count, "must be >= 0")
    timeout = base.timeout if given.timeout is None else _timeout(f"{field}.timeout", given.timeout)
    return Anomaly(
        consecutive_abnormalities=given.consecutive_abnormalities or base.consecutive_abnormalities,
        consecutive_normalities=given.consecutive_normalities or base.consecutive_normalities,
        timeout=timeout,
    )


_DEFAULT_ANOMALY: Final = Anomaly(
    consecutive_abnormalities=DEFAULT_CONSECUTIVE_ABNORMALITIES,
    consecutive_normalities=DEFAULT_CONSECUTIVE_NORMALITIES,
    timeout=DEFAULT_TIMEOUT,
)


def _weights(
    given: Mapping[str, int], thresholds: tuple[Mapping[str, float], ...]
) -> dict[str, int]:
    """``given`` plus weight 1 for cpu, memory and every threshold name that has no positive
    weight."""
    weights = dict(given)
    for name in (*_DEFAULT_WEIGHTED, *(n for t in thresholds for n in t)):
        if weights.get(name, 0) <= 0:
            weights[name] = 1
    return weights


def _check_thresholds(field: str, pool: Pool) -> None:
    maps = (
        ("highThresholds", pool.high),
        ("lowThresholds", pool.low),
        ("prodHighThresholds", pool.prod_high),
        ("prodLowThresholds", pool.prod_low),
    )
    for name, amounts in maps:
        for resource, percent in amounts.items():
            if not 0 <= percent <= 100:
                raise _fail(f"{field}{name}.{resource}", percent, "is not in [0, 100]")
    for lower_name, lower, upper_name, upper in (
        ("lowThresholds", pool.low, "highThresholds", pool.high),
        ("prodHighThresholds", pool.prod_high, "highThresholds", pool.high),
        ("prodLowThresholds", pool.prod_low, "prodHighThresholds", pool.prod_high),
    ):
        for resource, percent in lower.items():
            bound = upper.get(resource)
            if bound is not None and percent > bound:
                raise _fail(
                    f"{field}{lower_name}.{resource}",
                    percent,
                    f"is above {upper_name}.{resource} ({bound!r})",
                )


def node_pools(args: LowNodeLoadArgs) -> tuple[Pool, ...]:
    """The pools to run, in order, every field settled; raises on a bad value."""
    top_thresholds = (
        args.high_thresholds or {},
        args.low_thresholds or {},
        args.prod_high_thresholds or {},
        args.prod_low_thresholds or {},
    )
    top = Pool(
        name=DEFAULT_POOL,
        node_selector=_selector("nodeSelector", args.node_selector),
        use_deviation_thresholds=args.use_deviation_thresholds,
        high=top_thresholds[0],
        low=top_thresholds[1],
        prod_high=top_thresholds[2],
        prod_low=top_thresholds[3],
        resource_weights=_weights(args.resource_weights or {}, top_thresholds),
        anomaly=_anomaly("anomalyCondition", args.anomaly_condition, _DEFAULT_ANOMALY),
    )
    _check_thresholds("", top)
    pools = [top]
    seen = {DEFAULT_POOL}
    for i, entry in enumerate(args.node_pools):
        field = f"nodePools[{i}]."
        if not entry.name:
            raise _fail(f"{field}name", entry.name, "must not be empty")
        if entry.name in seen:
            raise _fail(f"{field}name", entry.name, "is used by another pool")
        seen.add(entry.name)

        def inherit(own: Thresholds | None, base: Mapping[str, float]) -> Mapping[str, float]:
            return base if own is None else own

        high = inherit(entry.high_thresholds, top.high)
        low = inherit(entry.low_thresholds, top.low)
        prod_high = inherit(entry.prod_high_thresholds, top.prod_high)
        prod_low = inherit(entry.prod_low_thresholds, top.prod_low)
        weights = top.resource_weights if entry.resource_weights is None else entry.resource_weights
        pool = Pool(
            name=entry.name,
            node_selector=_selector(f"{field}nodeSelector", entry.node_selector),
            use_deviation_thresholds=(
                top.use_deviation_thresholds
                if entry.use_deviation_thresholds is None
                else entry.use_deviation_thresholds
            ),
            high=high,
            low=low,
            prod_high=prod_high,
            prod_low=prod_low,
            resource_weights=_weights(weights, (high, low, prod_high, prod_low)),
            anomaly=_anomaly(f"{field}anomalyCondition", entry.anomaly_condition, top.anomaly),
        )
        _check_thresholds(field, pool)
        pools.append(pool)
    return tuple(pools)


def load_args(raw: Mapping[str, Any] | None) -> LowNodeLoadArgs:
    """Args from a pluginConfig ``args`` mapping (None or empty: every default)."""
    try:
        return decode_as(dict(raw or {}), LowNodeLoadArgs)
    except DecodeError as err:
        # A check of ``__post_init__`` travels as the cause of msgspec's error.
        inner = err.__context__
        cause = inner.__cause__ if inner is not None else None
        if isinstance(cause, LowNodeLoadArgsError):
            raise cause from None
        where = f"{err.field}: " if err.field else ""
        shown = f" (value: {err.value})" if err.value else ""
        raise LowNodeLoadArgsError(f"{KIND}.{where}{err.message}{shown}") from None
