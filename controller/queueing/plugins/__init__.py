"""The queueing plugins: the explicit name -> (Args, factory) table and the configuration.

The configuration has Koord-Queue's shape (``KoordQueueConfiguration``): ``plugins`` lists the
enabled plugins by name, ``pluginConfigs`` maps a name to its args. The default enables
``Priority`` and ``ElasticQuota`` (Koord-Queue's Helm default, ``Priority`` +
``ElasticQuotaV2``; that name is accepted as an alias). A plugin serves every extension point
it implements; exactly one MultiQueueSort, QueueSort and QueueUnitMapping must be enabled.
Unknown plugin names, unknown args fields or bad values are refused with an error naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from apis.codec import decode_as
from apis.errors import DecodeError
from controller.errors import ConfigError
from controller.queueing.framework import (
    FilterPlugin,
    MultiQueueSortPlugin,
    QueueSortPlugin,
    QueueUnitMappingPlugin,
    ReservePlugin,
)
from controller.queueing.plugins.elasticquota import ElasticQuota, ElasticQuotaArgs
from controller.queueing.plugins.priority import Priority, PriorityArgs
from controller.queueing.plugins.tenantcap import TenantCap, TenantCapArgs

__all__ = [
    "DEFAULT_CONFIG",
    "PLUGINS",
    "PluginRef",
    "Plugins",
    "QueueingConfig",
    "QueueingConfigError",
    "build_plugins",
]


class QueueingConfigError(ConfigError):
    """A queueing configuration that cannot be used (names the field and the value)."""


@dataclass(frozen=True, slots=True)
class PluginEntry:
    args: type[msgspec.Struct]
    factory: Callable[[Any], object]


#: Every queueing plugin, by the name a configuration enables it with.
PLUGINS: Final[Mapping[str, PluginEntry]] = {
    "Priority": PluginEntry(PriorityArgs, Priority),
    "ElasticQuota": PluginEntry(ElasticQuotaArgs, ElasticQuota),
    "TenantCap": PluginEntry(TenantCapArgs, TenantCap),
}
_ALIASES: Final = {"ElasticQuotaV2": "ElasticQuota"}


class PluginRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str


class QueueingConfig(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    api_version: str = "scheduling.k8s.io/v1"
    kind: str = "KoordQueueConfiguration"
    plugins: tuple[PluginRef, ...] = (PluginRef(name="Priority"), PluginRef(name="ElasticQuota"))
    plugin_configs: dict[str, dict[str, Any]] = {}


DEFAULT_CONFIG: Final = QueueingConfig()


@dataclass(frozen=True, slots=True)
class Plugins:
    multi_queue_sort: MultiQueueSortPlugin
    queue_sort: QueueSortPlugin
    mapping: QueueUnitMappingPlugin
    filters: tuple[FilterPlugin, ...]
    reserves: tuple[ReservePlugin, ...]
    by_name: Mapping[str, object]


def _args(name: str, entry: PluginEntry, raw: Mapping[str, Any] | None) -> object:
    try:
        return decode_as(dict(raw or {}), entry.args)
    except DecodeError as err:
        inner = err.__context__
        cause = inner.__cause__ if inner is not None else None
        detail = str(cause) if isinstance(cause, ValueError) else str(err)
        raise QueueingConfigError(f"pluginConfigs.{name}: {detail}") from None


def _one(kind: str, found: list[Any]) -> Any:
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "none"
        raise QueueingConfigError(f"plugins: exactly one {kind} plugin must be enabled ({names})")
    return found[0]


def build_plugins(config: QueueingConfig = DEFAULT_CONFIG) -> Plugins:
    """Instantiate the enabled plugins with their args."""
    configs = {_ALIASES.get(n, n): v for n, v in config.plugin_configs.items()}
    for name in configs:
        if name not in PLUGINS:
            raise QueueingConfigError(f"pluginConfigs: unknown plugin {name!r}")
    built: dict[str, object] = {}
    for index, ref in enumerate(config.plugins):
        name = _ALIASES.get(ref.name, ref.name)
        entry = PLUGINS.get(name)
        if entry is None:
            raise QueueingConfigError(
                f"plugins[{index}].name: unknown plugin {ref.name!r} "
                f"(known: {', '.join(sorted(PLUGINS))})"
            )
        if name in built:
            raise QueueingConfigError(f"plugins[{index}].name: {ref.name!r} is listed twice")
        built[name] = entry.factory(_args(name, entry, configs.get(name)))
    plugins = list(built.values())
    return Plugins(
        multi_queue_sort=_one(
            "MultiQueueSort", [p for p in plugins if isinstance(p, MultiQueueSortPlugin)]
        ),
        queue_sort=_one("QueueSort", [p for p in plugins if isinstance(p, QueueSortPlugin)]),
        mapping=_one(
            "QueueUnitMapping", [p for p in plugins if isinstance(p, QueueUnitMappingPlugin)]
        ),
        filters=tuple(p for p in plugins if isinstance(p, FilterPlugin)),
        reserves=tuple(p for p in plugins if isinstance(p, ReservePlugin)),
        by_name=built,
    )
