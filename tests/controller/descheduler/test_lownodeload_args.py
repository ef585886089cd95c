"""LowNodeLoadArgs: defaults, the default pool, pool inheritance and validation (§6.4)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from controller.descheduler.plugins.lownodeload import LowNodeLoadArgs, load_args
from controller.descheduler.plugins.lownodeload.args import (
    DEFAULT_POOL,
    Anomaly,
    LowNodeLoadArgsError,
    node_pools,
)

SHIPPED: dict[str, Any] = {
    "lowThresholds": {"cpu": 45, "memory": 55},
    "highThresholds": {"cpu": 75, "memory": 80},
}


def test_defaults() -> None:
    args = load_args(None)
    assert args == LowNodeLoadArgs()
    assert (args.node_fit, args.number_of_nodes, args.node_metric_expiration_seconds) == (
        True,
        0,
        180,
    )
    assert args.detector_ttl == timedelta(minutes=5)
    (pool,) = node_pools(args)
    assert pool.name == DEFAULT_POOL
    assert pool.node_selector is None
    assert pool.anomaly == Anomaly(
        consecutive_abnormalities=5, consecutive_normalities=3, timeout=timedelta(minutes=1)
    )
    assert pool.resource_weights == {"cpu": 1, "memory": 1}
    assert pool.resources == ("memory",)


def test_shipped_config_and_weights_of_threshold_names() -> None:
    args = load_args(
        {
            **SHIPPED,
            "prodHighThresholds": {"nvidia.com/gpu": 60},
            "resourceWeights": {"cpu": 0, "memory": 3},
        }
    )
    (pool,) = node_pools(args)
    assert pool.resources == ("cpu", "memory", "nvidia.com/gpu")
    assert pool.resource_weights == {"cpu": 1, "memory": 3, "nvidia.com/gpu": 1}
    assert pool.has_prod_thresholds


@pytest.mark.parametrize(
    ("given", "abnormal", "normal"),
    [
        pytest.param(None, 5, 3, id="unset: both defaults"),
        pytest.param({}, 5, 3, id="empty: both defaults"),
        pytest.param(
            {"consecutiveAbnormalities": 0, "consecutiveNormalities": 0},
            5,
            3,
            id="both zero: both defaulted (upstream fills only one)",
        ),
        pytest.param({"consecutiveAbnormalities": 2}, 2, 3, id="normalities zero: defaulted"),
        pytest.param({"consecutiveNormalities": 7}, 5, 7, id="abnormalities zero: defaulted"),
    ],
)
def test_top_level_anomaly_counters_defaulted_when_zero(
    given: dict[str, Any] | None, abnormal: int, normal: int
) -> None:
    raw = {} if given is None else {"anomalyCondition": given}
    (pool,) = node_pools(load_args(raw))
    assert (pool.anomaly.consecutive_abnormalities, pool.anomaly.consecutive_normalities) == (
        abnormal,
        normal,
    )


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        pytest.param(None, timedelta(minutes=1), id="unset: 1m"),
        pytest.param("90s", timedelta(seconds=90), id="given"),
        pytest.param("0s", None, id="0s: no timeout"),
    ],
)
def test_anomaly_timeout(timeout: str | None, expected: timedelta | None) -> None:
    condition = {} if timeout is None else {"timeout": timeout}
    (pool,) = node_pools(load_args({"anomalyCondition": condition}))
    assert pool.anomaly.timeout == expected


TOP: dict[str, Any] = {
    **SHIPPED,
    "useDeviationThresholds": True,
    "prodHighThresholds": {"cpu": 60},
    "prodLowThresholds": {"cpu": 30},
    "resourceWeights": {"cpu": 2, "memory": 1},
    "anomalyCondition": {
        "timeout": "2m",
        "consecutiveAbnormalities": 4,
        "consecutiveNormalities": 6,
    },
}


@pytest.mark.parametrize(
    ("pool_fields", "attribute", "expected"),
    [
        pytest.param({}, "use_deviation_thresholds", True, id="deviation mode inherited"),
        pytest.param(
            {"useDeviationThresholds": False}, "use_deviation_thresholds", False, id="own mode"
        ),
        pytest.param({}, "high", {"cpu": 75, "memory": 80}, id="high inherited"),
        pytest.param({}, "low", {"cpu": 45, "memory": 55}, id="low inherited"),
        pytest.param({}, "prod_high", {"cpu": 60}, id="prodHigh inherited"),
        pytest.param({}, "prod_low", {"cpu": 30}, id="prodLow inherited"),
        pytest.param(
            {"lowThresholds": {"cpu": 10}}, "low", {"cpu": 10}, id="own low replaces whole"
        ),
        pytest.param(
            {"prodLowThresholds": {}}, "prod_low", {}, id="an empty map is set, not inherited"
        ),
        pytest.param({}, "resource_weights", {"cpu": 2, "memory": 1}, id="weights inherited"),
        pytest.param(
            {"resourceWeights": {"cpu": 5}, "highThresholds": {"cpu": 90, "pods": 90}},
            "resource_weights",
            {"cpu": 5, "memory": 1, "pods": 1},
            id="own weights plus own threshold names",
        ),
        pytest.param(
            {},
            "anomaly",
            Anomaly(
                consecutive_abnormalities=4, consecutive_normalities=6, timeout=timedelta(minutes=2)
            ),
            id="anomaly condition inherited whole",
        ),
        pytest.param(
            {"anomalyCondition": {"consecutiveAbnormalities": 2}},
            "anomaly",
            Anomaly(
                consecutive_abnormalities=2, consecutive_normalities=6, timeout=timedelta(minutes=2)
            ),
            id="zero normalities and unset timeout inherited",
        ),
        pytest.param(
            {"anomalyCondition": {"consecutiveNormalities": 1, "timeout": "10s"}},
            "anomaly",
            Anomaly(
                consecutive_abnormalities=4,
                consecutive_normalities=1,
                timeout=timedelta(seconds=10),
            ),
            id="zero abnormalities inherited",
        ),
    ],
)
def test_pool_inherits_every_unset_field(
    pool_fields: dict[str, Any], attribute: str, expected: object
) -> None:
    args = load_args({**TOP, "nodePools": [{"name": "gpu", **pool_fields}]})
    default, pool = node_pools(args)
    assert default.name == DEFAULT_POOL
    assert pool.name == "gpu"
    assert getattr(pool, attribute) == expected


def test_pools_keep_their_order_after_the_default_pool() -> None:
    args = load_args(
        {
            "nodeSelector": {"matchLabels": {"tier": "general"}},
            "nodePools": [
                {"name": "b", "nodeSelector": {"matchLabels": {"pool": "b"}}},
                {"name": "a"},
            ],
        }
    )
    pools = node_pools(args)
    assert [p.name for p in pools] == [DEFAULT_POOL, "b", "a"]
    assert pools[0].node_selector is not None
    assert pools[0].node_selector.matches({"tier": "general"})
    assert pools[2].node_selector is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(
            {"nodeMetricExpirationSeconds": 0},
            "LowNodeLoadArgs.nodeMetricExpirationSeconds: 0 must be > 0",
            id="expiration",
        ),
        pytest.param(
            {"numberOfNodes": -1}, "LowNodeLoadArgs.numberOfNodes: -1 must be >= 0", id="nodes"
        ),
        pytest.param(
            {"evictableNamespaces": {"include": ["a"], "exclude": ["b"]}},
            "LowNodeLoadArgs.evictableNamespaces: {'include': ['a'], 'exclude': ['b']} sets both",
            id="include and exclude",
        ),
        pytest.param(
            {"highThresholds": {"cpu": 120}},
            "LowNodeLoadArgs.highThresholds.cpu: 120.0 is not in [0, 100]",
            id="percent above 100",
        ),
        pytest.param(
            {"lowThresholds": {"memory": -1}},
            "LowNodeLoadArgs.lowThresholds.memory: -1.0 is not in [0, 100]",
            id="negative percent",
        ),
        pytest.param(
            {"lowThresholds": {"cpu": 80}, "highThresholds": {"cpu": 70}},
            "LowNodeLoadArgs.lowThresholds.cpu: 80.0 is above highThresholds.cpu (70.0)",
            id="low above high",
        ),
        pytest.param(
            {"highThresholds": {"cpu": 70}, "prodHighThresholds": {"cpu": 75}},
            "LowNodeLoadArgs.prodHighThresholds.cpu: 75.0 is above highThresholds.cpu",
            id="prodHigh above high",
        ),
        pytest.param(
            {
                "nodePools": [
                    {
                        "name": "p",
                        "prodLowThresholds": {"cpu": 50},
                        "prodHighThresholds": {"cpu": 40},
                    }
                ]
            },
            "LowNodeLoadArgs.nodePools[0].prodLowThresholds.cpu: 50.0 is above prodHighThresholds",
            id="pool prodLow above prodHigh",
        ),
        pytest.param(
            {"nodePools": [{"name": "p", "lowThresholds": {"cpu": 90}}], **SHIPPED},
            "LowNodeLoadArgs.nodePools[0].lowThresholds.cpu: 90.0 is above highThresholds.cpu",
            id="pool low above the inherited high",
        ),
        pytest.param(
            {"nodePools": [{"name": "p", "anomalyCondition": {"consecutiveNormalities": -2}}]},
            "LowNodeLoadArgs.nodePools[0].anomalyCondition.consecutiveNormalities: -2 must be",
            id="negative counter",
        ),
        pytest.param(
            {"nodePools": [{"name": ""}]},
            "LowNodeLoadArgs.nodePools[0].name: '' must not be empty",
            id="unnamed pool",
        ),
        pytest.param(
            {"nodePools": [{"name": "x"}, {"name": "x"}]},
            "LowNodeLoadArgs.nodePools[1].name: 'x' is used by another pool",
            id="pool name twice",
        ),
        pytest.param(
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "LowNodeLoadArgs.nodeSelector:",
            id="bad selector",
        ),
        pytest.param(
            {"highTreshold": {"cpu": 1}},
            "LowNodeLoadArgs.highTreshold: unknown field",
            id="unknown field",
        ),
        pytest.param(
            {"anomalyCondition": {"timeout": "soon"}},
            "LowNodeLoadArgs.anomalyCondition.timeout: invalid duration",
            id="bad duration",
        ),
        pytest.param(
            {"kind": "CustomPriorityArgs"},
            "LowNodeLoadArgs.kind: 'CustomPriorityArgs' must be LowNodeLoadArgs",
            id="wrong kind",
        ),
    ],
)
def test_bad_args_name_the_field_and_value(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(LowNodeLoadArgsError) as caught:
        load_args(raw)
    assert str(caught.value).startswith(message)


def test_args_round_trip_camel_case() -> None:
    args = load_args(
        {
            "apiVersion": "descheduler/v1alpha2",
            "kind": "LowNodeLoadArgs",
            "dryRun": True,
            "detectorCacheTimeout": "10m",
            **SHIPPED,
        }
    )
    assert args.dry_run
    assert args.detector_ttl == timedelta(minutes=10)
    assert args.low_thresholds == {"cpu": 45.0, "memory": 55.0}
