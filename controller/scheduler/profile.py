"""Plugin registry and scheduling profiles.

``PLUGINS`` is the explicit name -> :class:`PluginSpec` table: each plugin's ``Args`` Struct
(its defaults are the plugin's defaults) and its factory. A :class:`ProfileConfig` (what a
user writes, camelCase) names the plugins enabled at each extension point, in order, the
score weights, and per-plugin args; :func:`build_profile` checks every name against the
registry and every plugin against the extension point's Protocol, decodes the args (a bad
field raises :class:`ProfileError` naming the plugin and the field), and instantiates each
plugin once, shared by all the points it is enabled at.

Profiles are selected by ``spec.schedulerName`` (empty means ``default-scheduler``, as the
API server defaults it). :data:`DEFAULT_CONFIG` is the shipped ``koord-scheduler`` profile
(controller-spec §8) restricted to the plugins that exist so far, in the shipped order:

- preFilter: SchedulingHint, Reservation, NodeNUMAResource, DeviceShare, Coscheduling,
  ElasticQuota;
- filter: upstream's defaults (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
  NodeResourcesFit), then LoadAwareScheduling, NodeNUMAResource, DeviceShare, Reservation;
- preScore/score: TaintToleration 3, NodeAffinity 2 (upstream weights), NodeResourcesFit 1,
  LoadAwareScheduling 1, NodeNUMAResource 1, DeviceShare 1, Reservation 5000; DeviceShare is
  also at preScore, where it answers Skip for a pod asking no device (its Score is not run);
- postFilter: Reservation, Coscheduling, DefaultPreemption (ElasticQuota's quota-aware
  preemption is not there yet);
- reserve: LoadAwareScheduling, NodeNUMAResource, DeviceShare, Reservation, Coscheduling,
  ElasticQuota; permit: Coscheduling; preBind: NodeNUMAResource, DeviceShare, Reservation,
  Coscheduling; bind: Reservation (reserve pods), then the loop's own binder;
- args as Koordinator's v1.8 Helm chart ships them (ConfigMap ``koord-scheduler-config``):
  NodeResourcesFit LeastAllocated over cpu, memory, batch-cpu, batch-memory, weight 1;
  LoadAwareScheduling with expired metrics not filtered (300 s), thresholds cpu 65 % and
  memory 95 %, scaling factors cpu 85 % and memory 70 %; Coscheduling network-topology aware.

A profile carries the scheduler's :class:`~controller.scheduler.features.FeatureGates`;
``DevicePluginAdaption`` switches DeviceShare's vendor annotations on (:func:`_gated_args`, the
one place a gate reaches a plugin's args).

koordpy is the only scheduler in ``koordpy up``, so the default profile also serves
``default-scheduler`` (and pods that name no scheduler): ``aliases`` lists the extra names a
profile answers to. Pods naming a scheduler no profile serves are left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec

from apis import codec
from apis.errors import DecodeError
from apis.meta import Model
from controller.quota.args import ElasticQuotaArgs
from controller.reservations.args import ReservationArgs
from controller.scheduler import framework as fw
from controller.scheduler.features import NO_GATES, FeatureGates
from controller.scheduler.gangs import CoschedulingArgs
from controller.scheduler.plugins.coscheduling import Coscheduling
from controller.scheduler.plugins.deviceshare import DeviceShare, DeviceSharePluginArgs
from controller.scheduler.plugins.elasticquota import ElasticQuota
from controller.scheduler.plugins.loadaware import LoadAwareScheduling, LoadAwareSchedulingArgs
from controller.scheduler.plugins.nodeaffinity import NodeAffinity
from controller.scheduler.plugins.nodename import NodeName
from controller.scheduler.plugins.noderesources import NodeResourcesFit, NodeResourcesFitArgs
from controller.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from controller.scheduler.plugins.numaresource import NodeNUMAResource, NodeNUMAResourcePluginArgs
from controller.scheduler.plugins.preemption import DefaultPreemption
from controller.scheduler.plugins.reservation import ReservationPlugin
from controller.scheduler.plugins.schedulinghint import SchedulingHintArgs, SchedulingHintPlugin
from controller.scheduler.plugins.tainttoleration import TaintToleration

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_SCHEDULER",
    "EXTENSION_POINTS",
    "KOORD_SCHEDULER",
    "PLUGINS",
    "PluginConfig",
    "PluginSpec",
    "Profile",
    "ProfileConfig",
    "ProfileError",
    "ScoreEntry",
    "WeightedPlugin",
    "build_profile",
    "default_profile",
    "profiles_by_scheduler",
]

KOORD_SCHEDULER = "koord-scheduler"
DEFAULT_SCHEDULER = "default-scheduler"


class ProfileError(ValueError):
    """A profile that names an unknown plugin, misplaces one, or gives it bad args."""


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """A registry entry: the plugin's Args type and a factory taking decoded Args."""

    args: type[fw.PluginArgs]
    factory: Callable[[Any], fw.Plugin]


#: Every plugin koordpy has, by name. Later plugins add their entries here.
PLUGINS: Mapping[str, PluginSpec] = {
    "NodeUnschedulable": PluginSpec(fw.NoArgs, NodeUnschedulable),
    "NodeName": PluginSpec(fw.NoArgs, NodeName),
    "TaintToleration": PluginSpec(fw.NoArgs, TaintToleration),
    "NodeAffinity": PluginSpec(fw.NoArgs, NodeAffinity),
    "NodeResourcesFit": PluginSpec(NodeResourcesFitArgs, NodeResourcesFit),
    "DeviceShare": PluginSpec(DeviceSharePluginArgs, DeviceShare),
    "LoadAwareScheduling": PluginSpec(LoadAwareSchedulingArgs, LoadAwareScheduling),
    "NodeNUMAResource": PluginSpec(NodeNUMAResourcePluginArgs, NodeNUMAResource),
    # The cores' own args Structs (camelCase, unknown fields rejected, checked on decode).
    "Coscheduling": PluginSpec(cast("type[fw.PluginArgs]", CoschedulingArgs), Coscheduling),
    "ElasticQuota": PluginSpec(cast("type[fw.PluginArgs]", ElasticQuotaArgs), ElasticQuota),
    "DefaultPreemption": PluginSpec(fw.NoArgs, DefaultPreemption),
    "Reservation": PluginSpec(cast("type[fw.PluginArgs]", ReservationArgs), ReservationPlugin),
    "SchedulingHint": PluginSpec(SchedulingHintArgs, SchedulingHintPlugin),
}


# --- configuration (the wire form) -------------------------------------------------------------


class WeightedPlugin(Model):
    name: str
    weight: int = 1


class PluginConfig(Model):
    name: str
    args: dict[str, Any] = {}


class ProfileConfig(Model):
    scheduler_name: str = KOORD_SCHEDULER
    #: Other ``schedulerName`` values this profile serves.
    aliases: tuple[str, ...] = ()
    pre_filter: tuple[str, ...] = ()
    filter: tuple[str, ...] = ()
    post_filter: tuple[str, ...] = ()
    pre_score: tuple[str, ...] = ()
    score: tuple[WeightedPlugin, ...] = ()
    reserve: tuple[str, ...] = ()
    permit: tuple[str, ...] = ()
    pre_bind: tuple[str, ...] = ()
    bind: tuple[str, ...] = ()
    plugin_config: tuple[PluginConfig, ...] = ()


DEFAULT_CONFIG = ProfileConfig(
    scheduler_name=KOORD_SCHEDULER,
    aliases=(DEFAULT_SCHEDULER,),
    pre_filter=(
        "SchedulingHint",
        "Reservation",
        "NodeNUMAResource",
        "DeviceShare",
        "Coscheduling",
        "ElasticQuota",
    ),
    filter=(
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "LoadAwareScheduling",
        "NodeNUMAResource",
        "DeviceShare",
        "Reservation",
    ),
    pre_score=("TaintToleration", "NodeAffinity", "Reservation", "DeviceShare"),
    score=(
        WeightedPlugin(name="TaintToleration", weight=3),
        WeightedPlugin(name="NodeAffinity", weight=2),
        WeightedPlugin(name="NodeResourcesFit", weight=1),
        WeightedPlugin(name="LoadAwareScheduling", weight=1),
        WeightedPlugin(name="NodeNUMAResource", weight=1),
        WeightedPlugin(name="DeviceShare", weight=1),
        WeightedPlugin(name="Reservation", weight=5000),
    ),
    post_filter=("Reservation", "Coscheduling", "DefaultPreemption"),
    reserve=(
        "LoadAwareScheduling",
        "NodeNUMAResource",
        "DeviceShare",
        "Reservation",
        "Coscheduling",
        "ElasticQuota",
    ),
    permit=("Coscheduling",),
    pre_bind=("NodeNUMAResource", "DeviceShare", "Reservation", "Coscheduling"),
    bind=("Reservation",),
    plugin_config=(
        # The chart's config: metrics expire after 300 s and do not filter.
        PluginConfig(
            name="LoadAwareScheduling",
            args={
                "filterExpiredNodeMetrics": False,
                "nodeMetricExpirationSeconds": 300,
                "resourceWeights": {"cpu": 1, "memory": 1},
                "usageThresholds": {"cpu": 65, "memory": 95},
                "estimatedScalingFactors": {"cpu": 85, "memory": 70},
            },
        ),
        PluginConfig(name="Coscheduling", args={"awareNetworkTopology": True}),
    ),
)


# --- built profiles ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScoreEntry:
    plugin: fw.ScorePlugin
    weight: int
    #: The plugin also normalizes (looked up once here, not per pod).
    normalizer: fw.NormalizeScorePlugin | None
    #: Its answers are checked against ``0..MAX_NODE_SCORE`` (not ``scores_bounded``).
    checked: bool = True


@dataclass(frozen=True, slots=True)
class Profile:
    """The plugins of one scheduler name, per extension point, in run order."""

    scheduler_name: str
    aliases: tuple[str, ...]
    pre_filter: tuple[fw.PreFilterPlugin, ...]
    filter: tuple[fw.FilterPlugin, ...]
    post_filter: tuple[fw.PostFilterPlugin, ...]
    pre_score: tuple[fw.PreScorePlugin, ...]
    score: tuple[ScoreEntry, ...]
    reserve: tuple[fw.ReservePlugin, ...]
    permit: tuple[fw.PermitPlugin, ...]
    pre_bind: tuple[fw.PreBindPlugin, ...]
    bind: tuple[fw.BindPlugin, ...]
    #: Every instantiated plugin by name.
    plugins: Mapping[str, fw.Plugin]
    #: The PreFilter plugins that also name nodes to try first (``PreferNodesPlugin``).
    prefer_nodes: tuple[fw.PreferNodesPlugin, ...] = ()
    #: PreFilter plugins whose Skip ends their part in the pod's cycle
    #: (``pre_filter_skip_is_final``).
    final_skips: frozenset[str] = frozenset()
    #: The scheduler's feature gates (v1.8's defaults unless configured).
    feature_gates: FeatureGates = NO_GATES

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        return (self.scheduler_name, *self.aliases)


#: Extension point (wire name) -> the Protocol a plugin implements for it.
EXTENSION_POINTS: Mapping[str, type] = {
    "preFilter": fw.PreFilterPlugin,
    "filter": fw.FilterPlugin,
    "postFilter": fw.PostFilterPlugin,
    "preScore": fw.PreScorePlugin,
    "score": fw.ScorePlugin,
    "reserve": fw.ReservePlugin,
    "permit": fw.PermitPlugin,
    "preBind": fw.PreBindPlugin,
    "bind": fw.BindPlugin,
}


def _decode_args(name: str, spec: PluginSpec, raw: Mapping[str, Any]) -> fw.PluginArgs:
    try:
        return codec.decode_as(dict(raw), spec.args)
    except (DecodeError, ValueError, TypeError) as err:
        raise ProfileError(f"plugin {name}: invalid args: {err}") from err


def _gated_args(args: fw.PluginArgs, gates: FeatureGates) -> fw.PluginArgs:
    """``args`` with what the feature gates set in them (DeviceShare's device-plugin
    adaption)."""
    if isinstance(args, DeviceSharePluginArgs) and gates.device_plugin_adaption:
        return msgspec.structs.replace(args, device_plugin_adaption=True)
    return args


def build_profile(
    config: ProfileConfig = DEFAULT_CONFIG,
    registry: Mapping[str, PluginSpec] = PLUGINS,
    *,
    feature_gates: FeatureGates = NO_GATES,
) -> Profile:
    """Instantiate ``config``'s plugins; :class:`ProfileError` for anything wrong in it."""
    raw_args: dict[str, Mapping[str, Any]] = {}
    for entry in config.plugin_config:
        if entry.name in raw_args:
            raise ProfileError(f"pluginConfig: {entry.name} is configured twice")
        raw_args[entry.name] = entry.args
    points: dict[str, tuple[str, ...]] = {
        "preFilter": config.pre_filter,
        "filter": config.filter,
        "postFilter": config.post_filter,
        "preScore": config.pre_score,
        "score": tuple(w.name for w in config.score),
        "reserve": config.reserve,
        "permit": config.permit,
        "preBind": config.pre_bind,
        "bind": config.bind,
    }
    instances: dict[str, fw.Plugin] = {}
    for point, names in points.items():
        for name in names:
            spec = registry.get(name)
            if spec is None:
                raise ProfileError(f"{point}: unknown plugin {name!r}")
            if names.count(name) > 1:
                raise ProfileError(f"{point}: {name} is enabled twice")
            if name not in instances:
                args = _decode_args(name, spec, raw_args.get(name, {}))
                instances[name] = spec.factory(_gated_args(args, feature_gates))
            if not isinstance(instances[name], EXTENSION_POINTS[point]):
                raise ProfileError(f"{point}: plugin {name} has no {point} extension point")
    for name in raw_args:
        if name not in instances:
            raise ProfileError(f"pluginConfig: {name} is not enabled at any extension point")
    for weighted in config.score:
        if weighted.weight < 1:
            raise ProfileError(f"score: {weighted.name} weight must be >= 1, got {weighted.weight}")

    def pick(point: str) -> tuple[Any, ...]:
        return tuple(instances[name] for name in points[point])

    final_skips = frozenset(
        name
        for name in points["preFilter"]
        if getattr(instances[name], "pre_filter_skip_is_final", False)
    )
    scores = []
    for weighted in config.score:
        plugin = instances[weighted.name]
        assert isinstance(plugin, fw.ScorePlugin)
        normalizer = plugin if isinstance(plugin, fw.NormalizeScorePlugin) else None
        scores.append(
            ScoreEntry(
                plugin,
                weighted.weight,
                normalizer,
                checked=not getattr(plugin, "scores_bounded", False),
            )
        )
    return Profile(
        scheduler_name=config.scheduler_name,
        aliases=config.aliases,
        pre_filter=pick("preFilter"),
        filter=pick("filter"),
        post_filter=pick("postFilter"),
        pre_score=pick("preScore"),
        score=tuple(scores),
        reserve=pick("reserve"),
        permit=pick("permit"),
        pre_bind=pick("preBind"),
        bind=pick("bind"),
        plugins=instances,
        prefer_nodes=tuple(p for p in pick("preFilter") if isinstance(p, fw.PreferNodesPlugin)),
        final_skips=final_skips,
        feature_gates=feature_gates,
    )


def default_profile(feature_gates: FeatureGates = NO_GATES) -> Profile:
    """The shipped ``koord-scheduler`` profile (also serving ``default-scheduler``)."""
    return build_profile(DEFAULT_CONFIG, feature_gates=feature_gates)


def profiles_by_scheduler(profiles: Sequence[Profile]) -> dict[str, Profile]:
    """``schedulerName`` -> profile; a name claimed twice is a :class:`ProfileError`."""
    table: dict[str, Profile] = {}
    for profile in profiles:
        for name in profile.scheduler_names:
            if name in table:
                raise ProfileError(f"schedulerName {name!r} is served by two profiles")
            table[name] = profile
    return table
