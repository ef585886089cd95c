"""koord-scheduler's feature gates (controller-spec §8), parsed from the ``--feature-gates`` syntax.

Upstream sets them with koord-scheduler's ``--feature-gates`` flag; koordpy reads the same text
(``Name=true,Other=false``) from the key ``feature-gates`` of the scheduler's ConfigMap (see
:mod:`controller.scheduler.config`). :data:`DEFAULTS` are v1.8's defaults; every built profile
carries the resolved :class:`FeatureGates`, so a plugin reads e.g.
``profile.feature_gates.device_plugin_adaption``. An unknown gate or a value that is not a
boolean raises :class:`FeatureGateError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from controller.errors import ConfigError

__all__ = ["DEFAULTS", "NO_GATES", "FeatureGateError", "FeatureGates", "parse_feature_gates"]

#: Every scheduler gate koordpy knows, with v1.8's default.
DEFAULTS: Final[Mapping[str, bool]] = MappingProxyType(
    {
        "CleanExpiredReservationAllocated": False,
        "DevicePluginAdaption": False,
        "DisableDefaultQuota": False,
        "DynamicSchedulerCheck": True,
        "ElasticQuotaGuaranteeUsage": False,
        "ElasticQuotaIgnorePodOverhead": False,
        "ElasticQuotaIgnoreTerminatingPod": False,
        "ElasticQuotaImmediateIgnoreTerminatingPod": False,
        "EnableBatchScheduleNodeSnapshot": True,
        "EnableInlineBatchSchedule": False,
        "GangPendingPodsConditionPatch": True,
        "LazyReservationRestore": False,
        "MultiQuotaTree": False,
        "OmitNodeLabelsForReservation": False,
        "PodDisruptionBudget": True,
        "ResizePod": False,
        "SkipReservationFitsNode": False,
    }
)

_TRUE: Final = frozenset({"true", "1", "t"})
_FALSE: Final = frozenset({"false", "0", "f"})


class FeatureGateError(ConfigError):
    """A feature gate koordpy does not know, or a value that is not a boolean."""


class FeatureGates:
    """The gates in force: every known gate, set or defaulted. Immutable."""

    __slots__ = ("_values",)

    def __init__(self, overrides: Mapping[str, bool] | None = None) -> None:
        values = dict(DEFAULTS)
        for name, value in (overrides or {}).items():
            if name not in DEFAULTS:
                raise FeatureGateError(f"unknown feature gate {name!r}")
            values[name] = value
        self._values: Mapping[str, bool] = MappingProxyType(values)

    def enabled(self, name: str) -> bool:
        """Whether gate ``name`` is on (KeyError for a gate koordpy does not know)."""
        return self._values[name]

    @property
    def values(self) -> Mapping[str, bool]:
        return self._values

    @property
    def device_plugin_adaption(self) -> bool:
        """DeviceShare writes the vendor device plugins' annotations at PreBind."""
        return self._values["DevicePluginAdaption"]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeatureGates) and dict(self._values) == dict(other._values)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        changed = {n: v for n, v in self._values.items() if v != DEFAULTS[n]}
        return f"FeatureGates({changed})"


#: v1.8's defaults.
NO_GATES: Final = FeatureGates()


def parse_feature_gates(text: str) -> FeatureGates:
    """``Name=true,Other=false`` (spaces and newlines between entries allowed) -> gates."""
    overrides: dict[str, bool] = {}
    for raw in text.replace("\n", ",").split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip().lower()
        if not sep or not name:
            raise FeatureGateError(f"{entry!r} is not Name=true or Name=false")
        if name not in DEFAULTS:
            known = ", ".join(DEFAULTS)
            raise FeatureGateError(f"unknown feature gate {name!r} (known: {known})")
        if value in _TRUE:
            overrides[name] = True
        elif value in _FALSE:
            overrides[name] = False
        else:
            raise FeatureGateError(f"{name}: {value!r} is not true or false")
    return FeatureGates(overrides)
