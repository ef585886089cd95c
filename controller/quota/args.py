"""``ElasticQuotaArgs``: the ElasticQuota plugin's settings (controller-spec §4.5).

Decoded from the scheduler configuration's ``pluginConfig`` (camelCase, unknown fields
refused, durations as Go duration strings such as ``120s``, resource amounts as quantities).
A bad value raises :class:`QuotaArgsError` naming the field and the value.

``hookPlugins`` is accepted and kept, but no hook plugin exists yet: their ``CheckPod`` is not
run (see :mod:`controller.quota.check`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from apis import constants as k
from apis.codec import decode_as
from apis.duration import Duration
from apis.errors import DecodeError
from apis.resources import ResourceList
from controller.errors import ConfigError

__all__ = [
    "DEFAULT_GROUP_MAX",
    "ElasticQuotaArgs",
    "HookPluginConf",
    "QuotaArgsError",
    "decode_args",
]

KIND: Final = "ElasticQuotaArgs"
#: ``MaxInt64 / 5`` cores and bytes: the max of the built-in default and system quotas.
_GROUP_MAX_UNITS: Final = (2**63 - 1) // 5
DEFAULT_GROUP_MAX: Final = ResourceList(
    {"cpu": _GROUP_MAX_UNITS * 1000, "memory": _GROUP_MAX_UNITS}
)


class QuotaArgsError(ConfigError):
    """An ElasticQuotaArgs field with a value it may not have."""


def _fail(field: str, value: object, rule: str) -> QuotaArgsError:
    return QuotaArgsError(f"{KIND}.{field}: {value!s} {rule}")


class HookPluginConf(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    key: str
    factory_key: str
    factory_args: dict[str, Any] = {}


class ElasticQuotaArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """Args of the ``ElasticQuota`` plugin, validated on construction."""

    api_version: str = ""
    kind: str = ""
    #: How long a quota must stay over its runtime before its pods are revoked.
    delay_evict_time: Duration = Duration.from_seconds(120)
    #: Period of the over-used quota revocation loop.
    revoke_pod_interval: Duration = Duration.from_seconds(1)
    #: Max of ``koordinator-default-quota``.
    default_quota_group_max: ResourceList = DEFAULT_GROUP_MAX
    #: Max of ``koordinator-system-quota``.
    system_quota_group_max: ResourceList = DEFAULT_GROUP_MAX
    #: Namespace of the built-in quota groups.
    quota_group_namespace: str = k.QUOTA_NAMESPACE
    #: Revoke pods of every quota whose used stays above its runtime.
    monitor_all_quotas: bool = False
    #: Every ancestor (root excluded) must also hold ``used + request``.
    enable_check_parent_quota: bool = False
    #: Check against the runtime quota (else against max).
    enable_runtime_quota: bool = True
    #: Scale children's min down when their sum exceeds the parent's total.
    enable_min_quota_scale: bool = True
    #: Pods of the default quota never preempt.
    disable_default_quota_preemption: bool = True
    enable_queue_hint: bool = False
    quota_snapshot_update_interval: Duration = Duration.from_seconds(120)
    hook_plugins: tuple[HookPluginConf, ...] = ()

    def __post_init__(self) -> None:
        if self.kind and self.kind != KIND:
            raise _fail("kind", repr(self.kind), f"is not {KIND}")
        for field, duration in (
            ("delayEvictTime", self.delay_evict_time),
            ("revokePodInterval", self.revoke_pod_interval),
            ("quotaSnapshotUpdateInterval", self.quota_snapshot_update_interval),
        ):
            if duration.nanoseconds <= 0:
                raise _fail(field, duration, "must be positive")
        for field, amounts in (
            ("defaultQuotaGroupMax", self.default_quota_group_max),
            ("systemQuotaGroupMax", self.system_quota_group_max),
        ):
            for name, amount in amounts.items():
                if amount <= 0:
                    raise _fail(f"{field}[{name}]", amounts.to_wire()[name], "must be positive")
        if not self.quota_group_namespace:
            raise _fail("quotaGroupNamespace", "''", "must not be empty")
        seen: set[str] = set()
        for index, hook in enumerate(self.hook_plugins):
            if not hook.key or not hook.factory_key:
                raise _fail(f"hookPlugins[{index}]", repr(hook.key), "needs key and factoryKey")
            if hook.key in seen:
                raise _fail(f"hookPlugins[{index}].key", repr(hook.key), "is a duplicate")
            seen.add(hook.key)


def decode_args(raw: Mapping[str, Any] | None) -> ElasticQuotaArgs:
    """Args from a pluginConfig ``args`` mapping (None or empty: every default)."""
    try:
        return decode_as(dict(raw or {}), ElasticQuotaArgs)
    except DecodeError as err:
        # A check of ``__post_init__`` travels as the cause of msgspec's error.
        inner = err.__context__
        cause = inner.__cause__ if inner is not None else None
        if isinstance(cause, QuotaArgsError):
            raise cause from None
        raise QuotaArgsError(f"{KIND}: {err}") from None
