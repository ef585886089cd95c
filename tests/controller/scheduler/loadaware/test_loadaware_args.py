"""LoadAwareSchedulingArgs: wire names, defaults, validation; per-node thresholds (§5.1, §8)."""

from __future__ import annotations

from typing import Any

import pytest

from apis import constants as k
from apis.codec import to_builtins
from apis.duration import Duration
from controller.errors import ConfigError
from controller.scheduler.loadaware.args import (
    ArgsError,
    LoadAwareArgs,
    load_args,
    node_thresholds,
    resource_names,
)


def test_defaults() -> None:
    args = load_args(None)
    assert args.filter_expired_node_metrics is True
    assert args.enable_schedule_when_node_metrics_expired is False
    assert args.node_metric_expiration_seconds == 180
    assert args.resource_weights == {"cpu": 1, "memory": 1}
    assert args.usage_thresholds == {"cpu": 65, "memory": 95}
    assert args.estimated_scaling_factors == {"cpu": 85, "memory": 70}
    assert args.dominant_resource_weight == 0
    assert args.prod_usage_thresholds == {}
    assert args.aggregated is None
    assert args == LoadAwareArgs()


def test_shipped_profile_args_decode() -> None:
    """The pluginConfig of Koordinator's ``config/manager/scheduler-config.yaml`` (thresholds of
    0: load filter off)."""
    args = load_args(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "LoadAwareSchedulingArgs",
            "filterExpiredNodeMetrics": False,
            "nodeMetricExpirationSeconds": 300,
            "resourceWeights": {"cpu": 1, "memory": 1},
            "usageThresholds": {"cpu": 0, "memory": 0},
            "estimatedScalingFactors": {"cpu": 85, "memory": 70},
        }
    )
    assert args.filter_expired_node_metrics is False
    assert args.node_metric_expiration_seconds == 300
    assert args.usage_thresholds == {"cpu": 0, "memory": 0}


def test_every_wire_name() -> None:
    raw: dict[str, Any] = {
        "filterExpiredNodeMetrics": True,
        "nodeMetricExpirationSeconds": 120,
        "enableScheduleWhenNodeMetricsExpired": True,
        "resourceWeights": {"cpu": 2, "memory": 1},
        "dominantResourceWeight": 3,
        "usageThresholds": {"cpu": 70},
        "prodUsageThresholds": {"cpu": 50},
        "prodUsageIncludeSys": True,
        "scoreAccordingProdUsage": True,
        "estimator": "default",
        "estimatedScalingFactors": {"cpu": 90},
        "estimatedSecondsAfterPodScheduled": 30,
        "estimatedSecondsAfterInitialized": 60,
        "allowCustomizeEstimation": True,
        "aggregated": {
            "usageThresholds": {"cpu": 80},
            "usageAggregationType": "p95",
            "usageAggregatedDuration": "5m",
            "scoreAggregationType": "avg",
            "scoreAggregatedDuration": "10m",
        },
        "supportedResources": ["nvidia.com/gpu"],
    }
    args = load_args(raw)
    assert args.dominant_resource_weight == 3
    assert args.estimated_scaling_factors == {"cpu": 90, "memory": 70}
    assert args.aggregated is not None
    assert args.aggregated.usage_aggregated_duration == Duration.parse("5m")
    assert args.estimated_seconds_after_initialized == 60
    assert resource_names(args) == ("cpu", "memory", "nvidia.com/gpu")
    assert load_args(to_builtins(args)) == args


def test_no_default_weights_with_a_dominant_weight() -> None:
    assert load_args({"dominantResourceWeight": 1}).resource_weights == {}


def test_resource_names_cover_every_map() -> None:
    args = load_args(
        {
            "usageThresholds": {"ephemeral-storage": 90},
            "estimatedScalingFactors": {"nvidia.com/gpu": 100},
            "resourceWeights": {"nvidia.com/gpu": 1},
        }
    )
    assert resource_names(args) == ("cpu", "memory", "ephemeral-storage", "nvidia.com/gpu")


@pytest.mark.parametrize(
    ("raw", "field", "value"),
    [
        ({"resourceWeights": {"cpu": 0}}, "resourceWeights[cpu]", 0),
        ({"resourceWeights": {"cpu": 101}}, "resourceWeights[cpu]", 101),
        ({"usageThresholds": {"cpu": -1}}, "usageThresholds[cpu]", -1),
        ({"usageThresholds": {"memory": 101}}, "usageThresholds[memory]", 101),
        ({"prodUsageThresholds": {"cpu": 120}}, "prodUsageThresholds[cpu]", 120),
        ({"estimatedScalingFactors": {"cpu": 0}}, "estimatedScalingFactors[cpu]", 0),
        ({"estimatedScalingFactors": {"memory": 101}}, "estimatedScalingFactors[memory]", 101),
        ({"dominantResourceWeight": 101}, "dominantResourceWeight", 101),
        ({"dominantResourceWeight": -1}, "dominantResourceWeight", -1),
        ({"nodeMetricExpirationSeconds": 0}, "nodeMetricExpirationSeconds", 0),
        ({"nodeMetricExpirationSeconds": -5}, "nodeMetricExpirationSeconds", -5),
        ({"resourceWeights": {"nvidia.com/gpu": 1}}, "resourceWeights[nvidia.com/gpu]", 1),
        (
            {"aggregated": {"usageAggregationType": "p42"}},
            "aggregated.usageAggregationType",
            "p42",
        ),
        (
            {"aggregated": {"scoreAggregationType": "max"}},
            "aggregated.scoreAggregationType",
            "max",
        ),
        (
            {"aggregated": {"usageThresholds": {"cpu": 101}}},
            "aggregated.usageThresholds[cpu]",
            101,
        ),
        (
            {"aggregated": {"usageAggregatedDuration": "-5m"}},
            "aggregated.usageAggregatedDuration",
            "-5m0s",
        ),
        (
            {"aggregated": {"scoreAggregatedDuration": "-1s"}},
            "aggregated.scoreAggregatedDuration",
            "-1s",
        ),
        (
            {"estimatedSecondsAfterPodScheduled": -1},
            "estimatedSecondsAfterPodScheduled",
            -1,
        ),
        ({"kind": "DeviceShareArgs"}, "kind", "DeviceShareArgs"),
        ({"estimator": "fancy"}, "estimator", "fancy"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_args_name_field_and_value(raw: dict[str, Any], field: str, value: object) -> None:
    with pytest.raises(ArgsError) as caught:
        load_args(raw)
    assert caught.value.field == field
    assert caught.value.value == value
    assert str(caught.value).startswith(f"LoadAwareSchedulingArgs: field {field}: ")
    assert repr(value) in str(caught.value)
    assert isinstance(caught.value, ConfigError)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"usageTreshold": {"cpu": 1}}, "usageTreshold"),
        ({"usageThresholds": {"cpu": "high"}}, "usageThresholds"),
        ({"aggregated": {"usageAggregatedDuration": "soon"}}, "aggregated.usageAggregatedDuration"),
    ],
    ids=["unknown-field", "not-an-integer", "not-a-duration"],
)
def test_malformed_args_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ArgsError) as caught:
        load_args(raw)
    assert caught.value.field.startswith(field)


def test_constructing_invalid_args_raises() -> None:
    with pytest.raises(ArgsError, match="resourceWeights"):
        LoadAwareArgs(resource_weights={"cpu": 0})


# --- node annotation thresholds -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "usage", "prod", "aggregated", "agg_type"),
    [
        (None, {"cpu": 65, "memory": 95}, {"cpu": 50}, {}, ""),
        ('{"usageThresholds": {"cpu": 80}}', {"cpu": 80}, {"cpu": 50}, {}, ""),
        (
            '{"prodUsageThresholds": {"memory": 60}}',
            {"cpu": 65, "memory": 95},
            {"memory": 60},
            {},
            "",
        ),
        (
            '{"aggregatedUsage": {"usageThresholds": {"cpu": 70}, "usageAggregationType": "p99"}}',
            {"cpu": 65, "memory": 95},
            {"cpu": 50},
            {"cpu": 70},
            "p99",
        ),
        ("[1, 2]", {"cpu": 65, "memory": 95}, {"cpu": 50}, {}, ""),
        ('{"usageThresholds": {"cpu": 180}}', {"cpu": 65, "memory": 95}, {"cpu": 50}, {}, ""),
    ],
    ids=["none", "usage", "prod", "aggregated", "not-an-object", "out-of-range"],
)
def test_node_annotation_overrides_fields(
    annotation: str | None,
    usage: dict[str, int],
    prod: dict[str, int],
    aggregated: dict[str, int],
    agg_type: str,
) -> None:
    args = load_args({"prodUsageThresholds": {"cpu": 50}})
    annotations = {k.ANNOTATION_USAGE_THRESHOLDS: annotation} if annotation else {}
    got = node_thresholds(args, annotations)
    assert dict(got.usage) == usage
    assert dict(got.prod_usage) == prod
    assert dict(got.aggregated_usage) == aggregated
    assert got.aggregation_type == agg_type
    assert got.aggregated is bool(aggregated)
