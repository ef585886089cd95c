"""Parsing ``slo-controller-config`` keys: defaults, merging, Go's key matching, refusals."""

from __future__ import annotations

import json

import pytest

from apis.slo import ColocationStrategy, CPUBurstStrategy, ResourceThresholdStrategy
from controller.slo import config as c

ANOLIS = {"matchLabels": {"kubernetes.io/kernel": "anolis"}}


def _threshold(value: object) -> c.Strategies[ResourceThresholdStrategy]:
    return c.parse_key(c.RESOURCE_THRESHOLD_KEY, json.dumps(value))


def test_an_absent_key_gives_koordinators_defaults() -> None:
    threshold = c.parse_key(c.RESOURCE_THRESHOLD_KEY, None).cluster
    assert threshold == ResourceThresholdStrategy(
        enable=False,
        cpu_suppress_threshold_percent=65,
        cpu_suppress_policy="cpuset",
        memory_evict_threshold_percent=70,
        cpu_evict_policy="evictByRealLimit",
    )
    burst = c.parse_key(c.CPU_BURST_KEY, None).cluster
    assert burst == CPUBurstStrategy(
        policy="none",
        cpu_burst_percent=1000,
        cfs_quota_burst_percent=300,
        cfs_quota_burst_period_seconds=-1,
        share_pool_threshold_percent=50,
    )
    colocation = c.parse_key(c.COLOCATION_KEY, None).cluster
    assert colocation.enable is False
    assert colocation.cpu_reclaim_threshold_percent == 60
    assert colocation.memory_reclaim_threshold_percent == 65
    assert colocation.degrade_time_minutes == 15
    assert colocation.resource_diff_threshold == 0.1


def test_cluster_strategy_is_laid_over_the_defaults_and_nodes_over_the_cluster() -> None:
    parsed = _threshold(
        {
            "clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60},
            "nodeStrategies": [
                {"name": "anolis", "nodeSelector": ANOLIS, "memoryEvictThresholdPercent": 80},
                {"name": "all-gpu", "nodeSelector": {"matchLabels": {"gpu": "true"}}},
            ],
        }
    )
    assert parsed.cluster.enable is True
    assert parsed.cluster.cpu_suppress_threshold_percent == 60
    assert parsed.cluster.memory_evict_threshold_percent == 70  # default kept
    node = parsed.for_node({"kubernetes.io/kernel": "anolis", "gpu": "true"})
    # the first matching node strategy wins; it keeps the cluster's fields it does not set
    assert node.memory_evict_threshold_percent == 80
    assert node.cpu_suppress_threshold_percent == 60
    assert node.enable is True
    assert parsed.for_node({"gpu": "true"}) == parsed.cluster
    assert parsed.for_node({}) == parsed.cluster


def test_objects_merge_key_by_key_and_lists_are_replaced() -> None:
    qos = c.parse_key(
        c.RESOURCE_QOS_KEY,
        json.dumps(
            {
                "clusterStrategy": {
                    "beClass": {"memoryQOS": {"enable": True, "wmarkRatio": 95, "wmarkMinAdj": 50}}
                },
                "nodeStrategies": [
                    {
                        "name": "anolis",
                        "nodeSelector": ANOLIS,
                        "beClass": {"memoryQOS": {"wmarkRatio": 90}},
                    }
                ],
            }
        ),
    )
    node = qos.for_node({"kubernetes.io/kernel": "anolis"})
    assert node.be_class is not None
    assert node.be_class.memory_qos is not None
    assert node.be_class.memory_qos.wmark_ratio == 90
    assert node.be_class.memory_qos.wmark_min_adj == 50
    assert node.be_class.memory_qos.enable is True
    durations = c.parse_key(
        c.COLOCATION_KEY, json.dumps({"metricAggregatePolicy": {"durations": ["1m"]}})
    ).cluster.metric_aggregate_policy
    assert durations is not None
    assert [str(d) for d in durations.durations] == ["1m0s"]


def test_keys_match_as_go_matches_them_and_unknown_ones_are_dropped() -> None:
    parsed = _threshold(
        {"clusterStrategy": {"enable": True, "CPUEvictTimeWindowSeconds": 60, "colour": "red"}}
    )
    assert parsed.cluster.cpu_evict_time_window_seconds == 60
    assert parsed.unknown == ("clusterStrategy.colour",)


def test_colocation_node_configs_take_their_fields_inline() -> None:
    parsed = c.parse_key(
        c.COLOCATION_KEY,
        json.dumps(
            {
                "enable": True,
                "cpuReclaimThresholdPercent": 70,
                "nodeConfigs": [
                    {
                        "name": "anolis",
                        "nodeSelector": ANOLIS,
                        "updateTimeThresholdSeconds": 360,
                        "resourceDiffThreshold": 0.2,
                    }
                ],
            }
        ),
    )
    node = parsed.for_node({"kubernetes.io/kernel": "anolis"})
    assert isinstance(node, ColocationStrategy)
    assert (node.enable, node.cpu_reclaim_threshold_percent) == (True, 70)
    assert (node.update_time_threshold_seconds, node.resource_diff_threshold) == (360, 0.2)
    assert parsed.cluster.update_time_threshold_seconds == 300


@pytest.mark.parametrize(
    ("key", "text", "unmarshal", "named"),
    [
        (c.SYSTEM_KEY, '{"clusterStrategy": {"minFreeKbytesFactor": 100} "x": 1}', True, "line 1"),
        (c.RESOURCE_THRESHOLD_KEY, "[1, 2]", True, "expected a JSON object"),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"clusterStrategy": {"cpuSuppressThresholdPercent": "65"}}',
            True,
            "clusterStrategy.cpuSuppressThresholdPercent: '65'",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"clusterStrategy": {"cpuSuppressThresholdPercent": 120}}',
            False,
            "clusterStrategy.cpuSuppressThresholdPercent: 120 is out of range [0, 100]",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"clusterStrategy": {"memoryEvictThresholdPercent": 60,'
            ' "memoryEvictLowerPercent": 65}}',
            False,
            "clusterStrategy.memoryEvictLowerPercent: 65 must be below memoryEvictThresholdPercent",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"clusterStrategy": {"cpuSuppressPolicy": "quota"}}',
            False,
            "clusterStrategy.cpuSuppressPolicy: 'quota'",
        ),
        (
            c.CPU_BURST_KEY,
            '{"clusterStrategy": {"cfsQuotaBurstPercent": 50}}',
            False,
            "clusterStrategy.cfsQuotaBurstPercent: 50 is out of range",
        ),
        (
            c.CPU_BURST_KEY,
            '{"nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabels": {"a": "b"}},'
            ' "policy": "sometimes"}]}',
            False,
            "nodeStrategies[0].policy: 'sometimes'",
        ),
        (
            c.COLOCATION_KEY,
            '{"resourceDiffThreshold": 1.5}',
            False,
            "resourceDiffThreshold: 1.5 is out of range (0, 1]",
        ),
        (
            c.COLOCATION_KEY,
            '{"midCPUThresholdPercent": 101}',
            False,
            "midCPUThresholdPercent: 101 is out of range [0, 100]",
        ),
        (
            c.RESOURCE_QOS_KEY,
            '{"clusterStrategy": {"beClass": {"cpuQOS": {"groupIdentity": 3}}}}',
            False,
            "clusterStrategy.beClass.cpuQOS.groupIdentity: 3 is out of range [-1, 2]",
        ),
        (
            c.SYSTEM_KEY,
            '{"clusterStrategy": {"watermarkScaleFactor": 500}}',
            False,
            "clusterStrategy.watermarkScaleFactor: 500 is out of range [1, 400]",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"nodeStrategies": [{"nodeSelector": {"matchLabels": {"a": "b"}}}]}',
            False,
            "nodeStrategies[0].name: a node strategy needs a name",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabels": {"a": "b"}}},'
            ' {"name": "a", "nodeSelector": {"matchLabels": {"c": "d"}}}]}',
            False,
            "nodeStrategies[1].name: 'a' is used by another node strategy",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"nodeStrategies": [{"name": "a", "nodeSelector": {}}]}',
            False,
            "nodeStrategies[0].nodeSelector: {}: must not be empty",
        ),
        (
            c.RESOURCE_THRESHOLD_KEY,
            '{"nodeStrategies": [{"name": "a", "nodeSelector": {"matchExpressions":'
            ' [{"key": "a", "operator": "Near"}]}}]}',
            False,
            "nodeStrategies[0].nodeSelector: ",
        ),
    ],
)
def test_a_key_koordinator_refuses_names_the_field_and_the_value(
    key: str, text: str, unmarshal: bool, named: str
) -> None:
    with pytest.raises(c.SLOConfigError) as caught:
        c.parse_key(key, text)
    assert caught.value.key == key
    assert caught.value.unmarshal is unmarshal
    assert str(caught.value).startswith(f"{key}: ")
    assert named in str(caught.value)
