"""ElasticQuotaArgs (§4.5): the defaults, decoding, and errors that name the field."""

from __future__ import annotations

import pytest

from apis.duration import Duration
from controller.quota.args import (
    DEFAULT_GROUP_MAX,
    ElasticQuotaArgs,
    QuotaArgsError,
    decode_args,
)

GI = 1 << 30


def test_defaults() -> None:
    args = decode_args(None)
    assert args == ElasticQuotaArgs()
    assert args.delay_evict_time == Duration.from_seconds(120)
    assert args.revoke_pod_interval == Duration.from_seconds(1)
    assert args.quota_snapshot_update_interval == Duration.from_seconds(120)
    assert args.quota_group_namespace == "koordinator-system"
    assert (args.monitor_all_quotas, args.enable_check_parent_quota) == (False, False)
    assert (args.enable_runtime_quota, args.enable_min_quota_scale) == (True, True)
    assert (args.disable_default_quota_preemption, args.enable_queue_hint) == (True, False)
    assert args.hook_plugins == ()
    # MaxInt64 / 5 cores and bytes, CPU held in millicores.
    assert args.default_quota_group_max == args.system_quota_group_max == DEFAULT_GROUP_MAX
    assert DEFAULT_GROUP_MAX["cpu"] == 1844674407370955161 * 1000
    assert DEFAULT_GROUP_MAX["memory"] == 1844674407370955161


def test_wire_values() -> None:
    args = decode_args(
        {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "ElasticQuotaArgs",
            "delayEvictTime": "5m",
            "revokePodInterval": "500ms",
            "defaultQuotaGroupMax": {"cpu": "100", "memory": "200Gi"},
            "quotaGroupNamespace": "quotas",
            "enableCheckParentQuota": True,
            "disableDefaultQuotaPreemption": False,
            "hookPlugins": [{"key": "limiter", "factoryKey": "custom", "factoryArgs": {"a": 1}}],
        }
    )
    assert args.delay_evict_time == Duration.from_seconds(300)
    assert args.revoke_pod_interval == Duration.from_seconds(0.5)
    assert dict(args.default_quota_group_max) == {"cpu": 100_000, "memory": 200 * GI}
    assert args.system_quota_group_max == DEFAULT_GROUP_MAX
    assert args.quota_group_namespace == "quotas"
    assert args.enable_check_parent_quota
    assert not args.disable_default_quota_preemption
    assert args.hook_plugins[0].factory_args == {"a": 1}


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"delayEvictTime": "0s"}, "ElasticQuotaArgs.delayEvictTime: 0s must be positive"),
        ({"revokePodInterval": "-1s"}, "ElasticQuotaArgs.revokePodInterval: -1s"),
        ({"quotaSnapshotUpdateInterval": "0s"}, "quotaSnapshotUpdateInterval: 0s"),
        ({"delayEvictTime": "soon"}, "field delayEvictTime: invalid duration 'soon'"),
        ({"defaultQuotaGroupMax": {"cpu": "0"}}, "defaultQuotaGroupMax[cpu]: 0 must be positive"),
        ({"systemQuotaGroupMax": {"memory": "-1Gi"}}, "systemQuotaGroupMax[memory]: -1Gi"),
        ({"quotaGroupNamespace": ""}, "quotaGroupNamespace"),
        ({"hookPlugins": [{"key": "", "factoryKey": "f"}]}, "hookPlugins[0]"),
        (
            {"hookPlugins": [{"key": "a", "factoryKey": "f"}, {"key": "a", "factoryKey": "g"}]},
            "hookPlugins[1].key: 'a' is a duplicate",
        ),
        ({"kind": "CoschedulingArgs"}, "kind: 'CoschedulingArgs'"),
        ({"enableRuntimeQuotas": True}, "field enableRuntimeQuotas: unknown field"),
        ({"monitorAllQuotas": "yes"}, "field monitorAllQuotas"),
    ],
    ids=[
        "zero delay",
        "negative interval",
        "zero snapshot interval",
        "not a duration",
        "zero max",
        "negative max",
        "empty namespace",
        "hook without key",
        "duplicate hook",
        "wrong kind",
        "unknown field",
        "wrong type",
    ],
)
def test_bad_values_name_the_field(raw: dict[str, object], fragment: str) -> None:
    with pytest.raises(QuotaArgsError, match="ElasticQuotaArgs") as caught:
        decode_args(raw)
    assert fragment in str(caught.value)


def test_direct_construction_is_validated() -> None:
    with pytest.raises(QuotaArgsError, match="delayEvictTime"):
        ElasticQuotaArgs(delay_evict_time=Duration(0))
