"""``KubeSchedulerConfiguration``: koord-scheduler's configuration, the way Koordinator ships it.

Where (controller-spec §8): ConfigMap ``koordinator-system/koord-scheduler-config``, key
``koord-scheduler-config``, a ``kubescheduler.config.k8s.io/v1`` (or ``v1beta3``) document;
the optional key ``feature-gates`` holds the scheduler's feature gates in the syntax of
koord-scheduler's ``--feature-gates`` flag (:mod:`.features`). No ConfigMap: the shipped
profile (:data:`~.profile.DEFAULT_CONFIG`, the Helm chart's configuration) and v1.8's gates.

Resolution of each ``profiles[]`` entry:

- ``schedulerName`` defaults to ``default-scheduler`` and must be unique. Each profile
  schedules the pods naming its ``schedulerName``; pods that name none (or
  ``default-scheduler``) go to the profile named ``default-scheduler`` if there is one, else
  to the ``koord-scheduler`` profile, else to the first profile (koordpy is the only
  scheduler of its cluster).
- ``plugins``: per extension point, koordpy's defaults (the shipped profile's list for that
  point) merged as kube-scheduler merges them: ``disabled: [{name: "*"}]`` drops them all, a
  named one drops that one; an enabled plugin that is a default takes its place (and its
  weight, unless it gives one), the others follow in order. ``multiPoint`` enables a plugin at
  every point it implements where it is not already (after the others) and its ``disabled``
  drops defaults everywhere. ``preEnqueue``, ``queueSort`` and ``postBind`` are accepted and
  not run (koordpy's queue sorts by priority; PostBind does nothing). ``PrioritySort``,
  ``DefaultBinder`` and ``DefaultPreBind`` are koordpy's own queue, binder and PreBind
  patch; Kubernetes' plugins koordpy does not have (``PodTopologySpread``,
  ``VolumeBinding``...) are ignored with a warning, and so is a Koordinator plugin enabled at
  a point koordpy's version of it does not have (ElasticQuota's ``postFilter``, Coscheduling's
  ``preScore``/``score``). A name nobody knows, or a Kubernetes plugin at a point it has no
  method for (``NodeName`` at ``score``), is an error.
- ``pluginConfig[].args``: ``apiVersion``/``kind`` may be given (``<Plugin>Args``); the rest
  decodes into the plugin's ``Args`` Struct (defaults filled, unknown fields and values out of
  range refused). Args of a plugin that is not enabled are still checked.

Any error raises :class:`SchedulerConfigError` naming the field as the user wrote it and the
value, e.g. ``profiles[0].pluginConfig[1].args.usageThresholds.cpu: must be between 0 and 100
(value: 120)``. :class:`ConfigWatch` is what the scheduler loop polls: a new valid ConfigMap
replaces the configuration; a bad one gets a Warning Event ``InvalidConfiguration`` on the
ConfigMap and a log line, and the configuration in force stays. :class:`ConfigInForce` holds
that configuration for every loop that follows it (the scheduler, and the reservation
controller for its Reservation args), so the ConfigMap is resolved once.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import msgspec

from apis import codec
from apis.core import ConfigMap
from apis.errors import DecodeError
from apis.kinds import Registry
from apis.meta import Model, ObjectMeta
from controller.errors import ConfigError
from controller.events import WARNING, EventRecorder
from controller.scheduler import framework as fw
from controller.scheduler.features import (
    NO_GATES,
    FeatureGateError,
    FeatureGates,
    parse_feature_gates,
)
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    DEFAULT_SCHEDULER,
    EXTENSION_POINTS,
    KOORD_SCHEDULER,
    PLUGINS,
    PluginConfig,
    PluginSpec,
    Profile,
    ProfileConfig,
    ProfileError,
    WeightedPlugin,
    build_profile,
)
from controller.store.snapshots import Snapshot

__all__ = [
    "API_VERSIONS",
    "CONFIG_KEY",
    "CONFIG_NAME",
    "CONFIG_NAMESPACE",
    "FEATURE_GATES_KEY",
    "INVALID_CONFIGURATION",
    "KIND",
    "ConfigInForce",
    "ConfigWatch",
    "KubeSchedulerConfiguration",
    "SchedulerConfigError",
    "SchedulerConfiguration",
    "build_configuration",
    "config_map",
    "default_configuration",
    "is_document",
    "load_configuration",
]

log = logging.getLogger(__name__)

API_VERSIONS: Final = ("kubescheduler.config.k8s.io/v1", "kubescheduler.config.k8s.io/v1beta3")
KIND: Final = "KubeSchedulerConfiguration"
CONFIG_NAMESPACE: Final = "koordinator-system"
CONFIG_NAME: Final = "koord-scheduler-config"
CONFIG_KEY: Final = "koord-scheduler-config"
FEATURE_GATES_KEY: Final = "feature-gates"
#: Reason of the Warning Event on a ConfigMap that was refused.
INVALID_CONFIGURATION: Final = "InvalidConfiguration"

#: Names koordpy accepts at the points it does not run, or runs itself (no plugin of its own).
BUILT_IN: Final = frozenset({"PrioritySort", "DefaultBinder", "DefaultPreBind"})
#: Plugins of kube-scheduler and koord-scheduler that koordpy does not have: ignored, warned.
NOT_IMPLEMENTED: Final = frozenset(
    {
        "AzureDiskLimits",
        "CinderLimits",
        "DynamicResources",
        "EBSLimits",
        "GCEPDLimits",
        "ImageLocality",
        "InterPodAffinity",
        "NodePorts",
        "NodeResourcesBalancedAllocation",
        "NodeResourcesFitPlus",
        "NodeVolumeLimits",
        "PodTopologySpread",
        "ScarceResourceAvoidance",
        "SchedulingGates",
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
    }
)
#: koord-scheduler's own plugins: enabled at a point koordpy's version of it lacks (ElasticQuota's
#: quota-aware postFilter, Coscheduling's score), it is skipped there with a warning.
KOORDINATOR_PLUGINS: Final = frozenset(
    {
        "Coscheduling",
        "DeviceShare",
        "ElasticQuota",
        "LoadAwareScheduling",
        "NodeNUMAResource",
        "Reservation",
        "SchedulingHint",
    }
)
#: Extension points in the document, the ones koordpy runs mapped to ProfileConfig fields.
RUN_POINTS: Final = {
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
}
UNRUN_POINTS: Final = {
    "preEnqueue": "pre_enqueue",
    "queueSort": "queue_sort",
    "postBind": "post_bind",
}


class SchedulerConfigError(ConfigError):
    """A scheduler configuration that cannot be used: ``field`` is the path of the first bad
    field as the user wrote it, ``value`` its value as given."""

    def __init__(self, message: str, *, field: str = "", value: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value


# --- the document ------------------------------------------------------------------------------


class Plugin(Model):
    name: str = ""
    #: Score weight; unset or 0: the default plugin's weight, else 1.
    weight: int | None = None


class PluginSet(Model):
    enabled: tuple[Plugin, ...] = ()
    disabled: tuple[Plugin, ...] = ()


_NO_SET: Final = PluginSet()


class Plugins(Model):
    multi_point: PluginSet = _NO_SET
    pre_enqueue: PluginSet = _NO_SET
    queue_sort: PluginSet = _NO_SET
    pre_filter: PluginSet = _NO_SET
    filter: PluginSet = _NO_SET
    post_filter: PluginSet = _NO_SET
    pre_score: PluginSet = _NO_SET
    score: PluginSet = _NO_SET
    reserve: PluginSet = _NO_SET
    permit: PluginSet = _NO_SET
    pre_bind: PluginSet = _NO_SET
    bind: PluginSet = _NO_SET
    post_bind: PluginSet = _NO_SET


class PluginConfigEntry(Model):
    name: str = ""
    args: dict[str, Any] | None = None


class KubeSchedulerProfile(Model):
    scheduler_name: str = ""
    #: Accepted; koordpy always looks at every node.
    percentage_of_nodes_to_score: int | None = None
    plugins: Plugins | None = None
    plugin_config: tuple[PluginConfigEntry, ...] = ()


class KubeSchedulerConfiguration(Model):
    """The document as written; the process settings are accepted and not used (koordpy's
    controller is one process, without leader election or a separate endpoint)."""

    api_version: str = API_VERSIONS[0]
    kind: str = KIND
    parallelism: int | None = None
    leader_election: dict[str, Any] | None = None
    client_connection: dict[str, Any] | None = None
    healthz_bind_address: str | None = msgspec.field(default=None, name="healthzBindAddress")
    metrics_bind_address: str | None = None
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    percentage_of_nodes_to_score: int | None = None
    pod_initial_backoff_seconds: int | None = None
    pod_max_backoff_seconds: int | None = None
    delay_cache_until_active: bool | None = None
    profiles: tuple[KubeSchedulerProfile, ...] = ()
    #: Scheduler extenders (HTTP webhooks): koordpy has none to call, so any is refused.
    extenders: tuple[dict[str, Any], ...] = ()


# --- the resolved configuration -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    """What the scheduler runs with."""

    profiles: tuple[Profile, ...]
    feature_gates: FeatureGates
    #: schedulerName -> plugin -> decoded Args, for every plugin a profile configures.
    args: Mapping[str, Mapping[str, object]]
    #: The document it came from (None: the shipped configuration).
    document: KubeSchedulerConfiguration | None = None

    def plugin_args(self, plugin: str) -> object | None:
        """The decoded args of ``plugin`` for what runs once per scheduler (a plugin's
        controller): the ``koord-scheduler`` profile's, else the first profile's that
        configures it; None when no profile does (the plugin's defaults apply)."""
        if plugin in self.args.get(KOORD_SCHEDULER, {}):
            return self.args[KOORD_SCHEDULER][plugin]
        return next((a[plugin] for a in self.args.values() if plugin in a), None)


def default_configuration(feature_gates: FeatureGates = NO_GATES) -> SchedulerConfiguration:
    """The shipped profile (also serving ``default-scheduler``) with ``feature_gates``."""
    profile = build_profile(DEFAULT_CONFIG, feature_gates=feature_gates)
    args = {
        p.name: _decode_args(f"pluginConfig[{i}].args", p.name, p.args, PLUGINS[p.name])
        for i, p in enumerate(DEFAULT_CONFIG.plugin_config)
    }
    return SchedulerConfiguration(
        profiles=(profile,), feature_gates=feature_gates, args={KOORD_SCHEDULER: args}
    )


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _error(path: str, message: str, value: object = None) -> SchedulerConfigError:
    shown = "" if value is None else _show(value)
    text = f"{path}: {shown} {message}" if shown else f"{path}: {message}"
    return SchedulerConfigError(text, field=path, value=shown)


#: ``name[key]`` for a non-numeric key: written ``name.key`` in the user's terms.
_KEYED: Final = re.compile(r"\[([^\]0-9][^\]]*)\]")
#: A check's message of the form ``[<Kind>.|<Kind>: field ]<field>: <rest>``.
_CHECK: Final = re.compile(r"^(?:(?P<kind>\w+Args)(?:\.|: (?:field )?))?(?P<field>[\w.\[\]/-]+): ")


def _join(prefix: str, path: str) -> str:
    path = _KEYED.sub(r".\1", path)
    if not path:
        return prefix
    if not prefix:
        return path
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def _args_error(prefix: str, err: DecodeError) -> SchedulerConfigError:
    """A plugin's args error (msgspec's, or a Struct's own check) placed under ``prefix``."""
    base = _join(prefix, err.field)
    match = _CHECK.match(err.message)
    if match is not None and match["field"] != "field":
        named = match["field"]
        # A nested Struct's check may name its field from the top of the args already.
        inside = err.field and (named == err.field or named.startswith(f"{err.field}."))
        path = _join(prefix if inside else base, named)
        return SchedulerConfigError(f"{path}: {err.message[match.end() :]}", field=path)
    prefix_kind = re.match(r"^\w+Args: ", err.message)
    message = err.message[prefix_kind.end() :] if prefix_kind else err.message
    text = f"{base}: {message} (value: {err.value})" if err.value else f"{base}: {message}"
    return SchedulerConfigError(text, field=base, value=err.value)


def _decode_args(path: str, name: str, raw: Mapping[str, Any] | None, spec: PluginSpec) -> object:
    body = dict(raw or {})
    kind = body.pop("kind", None)
    api_version = body.pop("apiVersion", None)
    expected = f"{name}Args"
    if kind is not None and kind != expected:
        raise _error(f"{path}.kind", f"is not {expected!r}", kind)
    if api_version is not None and api_version not in API_VERSIONS:
        raise _error(f"{path}.apiVersion", f"is not one of {', '.join(API_VERSIONS)}", api_version)
    if spec.args is fw.NoArgs:
        if body:
            log.warning("%s: koordpy's %s takes no args; ignoring them", path, name)
        return fw.NoArgs()
    try:
        return codec.decode_as(body, spec.args)
    except DecodeError as err:
        raise _args_error(path, err) from None
    except ValueError as err:  # checks run outside decoding
        raise _args_error(path, DecodeError(str(err))) from None


@functools.cache
def _points_of(spec: PluginSpec) -> frozenset[str]:
    """The extension points (wire names) a plugin implements, from an instance with defaults."""
    plugin = spec.factory(codec.decode_as({}, spec.args))
    return frozenset(
        point for point, proto in EXTENSION_POINTS.items() if isinstance(plugin, proto)
    )


def _default_points() -> dict[str, list[tuple[str, int]]]:
    cfg = DEFAULT_CONFIG
    points: dict[str, list[tuple[str, int]]] = {}
    for point, attr in RUN_POINTS.items():
        if point == "score":
            points[point] = [(w.name, w.weight) for w in cfg.score]
        else:
            points[point] = [(name, 0) for name in getattr(cfg, attr)]
    return points


def _check_name(
    at: str, name: str, point: str, registry: Mapping[str, PluginSpec], *, enabling: bool
) -> bool:
    """Whether ``name`` is a koordpy plugin to run at ``point`` (False: accepted, not run)."""
    if name == "*" and not enabling:
        return False
    if name in registry:
        if enabling and point in RUN_POINTS and point not in _points_of(registry[name]):
            if name not in KOORDINATOR_PLUGINS:
                raise _error(at, f"has no {point} extension point", name)
            log.warning("%s: koordpy's %s has no %s extension point; skipped", at, name, point)
            return False
        return True
    if name in BUILT_IN:
        return False
    if name in NOT_IMPLEMENTED:
        if enabling:
            log.warning("%s: plugin %s is not implemented by koordpy; ignored", at, name)
        return False
    known = ", ".join(sorted({*registry, *BUILT_IN}))
    raise _error(at, f"is not a known plugin (known: {known})", name)


def _merge(
    where: str,
    point: str,
    defaults: Sequence[tuple[str, int]],
    given: PluginSet,
    multi: PluginSet,
    registry: Mapping[str, PluginSpec],
) -> list[tuple[str, int]]:
    """One point's plugins (name, weight) after merging ``given`` into ``defaults``."""
    disabled: set[str] = set()
    for source, refs in (("multiPoint", multi.disabled), (point, given.disabled)):
        for index, ref in enumerate(refs):
            at = f"{where}.{source}.disabled[{index}].name"
            _check_name(at, ref.name, point, registry, enabling=False)
            disabled.add(ref.name)
    wanted: list[tuple[str, int]] = []
    for index, ref in enumerate(given.enabled):
        at = f"{where}.{point}.enabled[{index}]"
        if ref.weight is not None and ref.weight < 0:
            raise _error(f"{at}.weight", "must not be negative", ref.weight)
        if _check_name(f"{at}.name", ref.name, point, registry, enabling=True):
            if any(name == ref.name for name, _ in wanted):
                raise _error(f"{at}.name", f"is enabled twice at {point}", ref.name)
            wanted.append((ref.name, ref.weight or 0))
    merged: list[tuple[str, int]] = []
    if "*" not in disabled:
        for name, weight in defaults:
            if name in disabled:
                continue
            override = next((w for n, w in wanted if n == name), None)
            merged.append((name, override or weight))
    names = {name for name, _ in merged}
    merged.extend((name, weight) for name, weight in wanted if name not in names)
    for index, ref in enumerate(multi.enabled):
        at = f"{where}.multiPoint.enabled[{index}]"
        if ref.weight is not None and ref.weight < 0:
            raise _error(f"{at}.weight", "must not be negative", ref.weight)
        spec = registry.get(ref.name)
        if not _check_name(f"{at}.name", ref.name, "multiPoint", registry, enabling=True):
            continue
        assert spec is not None
        if point in _points_of(spec) and all(n != ref.name for n, _ in merged):
            merged.append((ref.name, ref.weight or 0))
    return merged


def _profile(
    index: int,
    profile: KubeSchedulerProfile,
    name: str,
    aliases: tuple[str, ...],
    gates: FeatureGates,
    registry: Mapping[str, PluginSpec],
) -> tuple[Profile, dict[str, object]]:
    where = f"profiles[{index}]"
    custom = profile.plugins or Plugins()
    defaults = _default_points()
    resolved: dict[str, list[tuple[str, int]]] = {}
    for point, attr in RUN_POINTS.items():
        resolved[point] = _merge(
            f"{where}.plugins",
            point,
            defaults[point],
            getattr(custom, attr),
            custom.multi_point,
            registry,
        )
    for point, attr in UNRUN_POINTS.items():
        given: PluginSet = getattr(custom, attr)
        for side, refs in (("enabled", given.enabled), ("disabled", given.disabled)):
            for position, ref in enumerate(refs):
                at = f"{where}.plugins.{point}.{side}[{position}].name"
                _check_name(at, ref.name, point, registry, enabling=False)
    configured: dict[str, tuple[int, dict[str, Any]]] = {}
    args: dict[str, object] = {}
    for position, entry in enumerate(profile.plugin_config):
        at = f"{where}.pluginConfig[{position}]"
        if entry.name in configured:
            raise _error(f"{at}.name", "is configured twice", entry.name)
        spec = registry.get(entry.name)
        if spec is None:
            if entry.name in BUILT_IN or entry.name in NOT_IMPLEMENTED:
                log.warning("%s: koordpy has no plugin %s; its args are ignored", at, entry.name)
                continue
            known = ", ".join(sorted(registry))
            raise _error(f"{at}.name", f"is not a known plugin (known: {known})", entry.name)
        args[entry.name] = _decode_args(f"{at}.args", entry.name, entry.args, spec)
        body = {k: v for k, v in (entry.args or {}).items() if k not in ("apiVersion", "kind")}
        configured[entry.name] = (position, body)
    # A plugin enabled without a pluginConfig entry runs with its own defaults.
    enabled = {name for names in resolved.values() for name, _ in names}
    plugin_config = tuple(
        PluginConfig(name=name, args=configured[name][1])
        for name in sorted(enabled)
        if name in configured
    )
    config = ProfileConfig(
        scheduler_name=name,
        aliases=aliases,
        plugin_config=plugin_config,
        score=tuple(WeightedPlugin(name=n, weight=w or 1) for n, w in resolved["score"]),
        **{
            attr: tuple(n for n, _ in resolved[point])
            for point, attr in RUN_POINTS.items()
            if point != "score"
        },
    )
    try:
        built = build_profile(config, registry, feature_gates=gates)
    except ProfileError as err:
        raise _error(f"{where}.plugins", str(err)) from None
    return built, args


def _served(profiles: Sequence[KubeSchedulerProfile]) -> list[str]:
    return [p.scheduler_name or DEFAULT_SCHEDULER for p in profiles]


def build_configuration(
    document: KubeSchedulerConfiguration,
    *,
    feature_gates: FeatureGates = NO_GATES,
    registry: Mapping[str, PluginSpec] = PLUGINS,
) -> SchedulerConfiguration:
    """Resolve a decoded document (defaults, plugin merging, every plugin's Args)."""
    if document.api_version not in API_VERSIONS:
        raise _error("apiVersion", f"is not one of {', '.join(API_VERSIONS)}", document.api_version)
    if document.kind != KIND:
        raise _error("kind", f"is not {KIND!r}", document.kind)
    if document.extenders:
        raise _error("extenders", "are not supported by koordpy (it calls no extender)")
    if not document.profiles:
        return default_configuration(feature_gates)
    names = _served(document.profiles)
    for index, name in enumerate(names):
        if names.index(name) != index:
            raise _error(
                f"profiles[{index}].schedulerName",
                f"is already the name of profiles[{names.index(name)}]",
                name,
            )
    # Pods naming no scheduler: the default-scheduler profile, else koord-scheduler, else
    # the first profile.
    fallback = -1
    if DEFAULT_SCHEDULER not in names:
        fallback = names.index(KOORD_SCHEDULER) if KOORD_SCHEDULER in names else 0
    profiles: list[Profile] = []
    args: dict[str, Mapping[str, object]] = {}
    for index, (profile, name) in enumerate(zip(document.profiles, names, strict=True)):
        aliases = (DEFAULT_SCHEDULER,) if index == fallback else ()
        built, plugin_args = _profile(index, profile, name, aliases, feature_gates, registry)
        profiles.append(built)
        args[name] = plugin_args
    return SchedulerConfiguration(
        profiles=tuple(profiles), feature_gates=feature_gates, args=args, document=document
    )


def decode_document(raw: Any) -> KubeSchedulerConfiguration:
    """The document from decoded YAML/JSON (errors name the field and the value)."""
    if not isinstance(raw, dict):
        raise SchedulerConfigError(
            f"a KubeSchedulerConfiguration must be a mapping, got {type(raw).__name__}"
        )
    try:
        return codec.decode_as(raw, KubeSchedulerConfiguration)
    except DecodeError as err:
        raise _args_error("", err) from None


def load_configuration(
    text: str, *, feature_gates: str = "", registry: Mapping[str, PluginSpec] = PLUGINS
) -> SchedulerConfiguration:
    """Decode a KubeSchedulerConfiguration YAML (or JSON) text and resolve it; ``feature_gates``
    in the ``--feature-gates`` syntax."""
    try:
        gates = parse_feature_gates(feature_gates)
    except FeatureGateError as err:
        raise SchedulerConfigError(f"{FEATURE_GATES_KEY}: {err}", field=FEATURE_GATES_KEY) from None
    try:
        documents = codec.load_yaml_documents(text)
    except DecodeError as err:
        raise SchedulerConfigError(f"{CONFIG_KEY}: {err.message}") from None
    if len(documents) != 1:
        raise SchedulerConfigError(
            f"{CONFIG_KEY}: expected one KubeSchedulerConfiguration document,"
            f" found {len(documents)}"
        )
    return build_configuration(
        decode_document(documents[0]), feature_gates=gates, registry=registry
    )


def is_document(raw: object) -> TypeGuard[dict[str, Any]]:
    """Whether decoded YAML is a KubeSchedulerConfiguration document."""
    return (
        isinstance(raw, dict)
        and raw.get("kind") == KIND
        and str(raw.get("apiVersion", "")).startswith("kubescheduler.config.k8s.io/")
    )


def config_map(raw: Mapping[str, Any]) -> ConfigMap:
    """The ConfigMap the scheduler reads, holding the document ``raw`` (checked first: a bad
    document raises :class:`SchedulerConfigError`)."""
    build_configuration(decode_document(dict(raw)))
    return ConfigMap(
        metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
        data={CONFIG_KEY: codec.dump_yaml(dict(raw))},
    )


# --- what the loop polls ------------------------------------------------------------------


class ConfigWatch:
    """The configuration in force, following the ConfigMap from snapshot to snapshot."""

    def __init__(self, registry: Mapping[str, PluginSpec] = PLUGINS) -> None:
        self._registry = registry
        #: (uid, configuration text, gates text) of the ConfigMap in force; None: none.
        self._source: tuple[str, str | None, str] | None = None
        self._refused: tuple[str, str | None, str] | None = None

    def poll(
        self, snapshot: Snapshot, registry: Registry, recorder: EventRecorder | None
    ) -> SchedulerConfiguration | None:
        """The new configuration when the ConfigMap changed to a valid one (or went away:
        the shipped one); None when nothing changes. A bad ConfigMap is reported (a Warning
        Event on it, a log line) and None returned, so what is in force stays."""
        found = snapshot.get(registry.for_type(ConfigMap), CONFIG_NAME, CONFIG_NAMESPACE)
        if not isinstance(found, ConfigMap):
            if self._source is None:
                return None
            log.info(
                "ConfigMap %s/%s is gone: the shipped scheduler configuration is in force",
                CONFIG_NAMESPACE,
                CONFIG_NAME,
            )
            self._source = self._refused = None
            return default_configuration()
        text = found.data.get(CONFIG_KEY)
        source = (found.metadata.uid, text, found.data.get(FEATURE_GATES_KEY, ""))
        if source in (self._source, self._refused):
            return None
        try:
            if text is None:
                gates_only = source[2]
                config = default_configuration(_gates(gates_only))
            else:
                config = load_configuration(text, feature_gates=source[2], registry=self._registry)
        except SchedulerConfigError as err:
            self._refused = source
            log.error(
                "ConfigMap %s/%s: invalid scheduler configuration (the previous one stays): %s",
                CONFIG_NAMESPACE,
                CONFIG_NAME,
                err,
            )
            if recorder is not None:
                recorder.record(
                    found,
                    type=WARNING,
                    reason=INVALID_CONFIGURATION,
                    message=f"invalid scheduler configuration (the previous one stays): {err}",
                )
            return None
        self._source, self._refused = source, None
        log.info(
            "scheduler configuration loaded: profile(s) %s, feature gates %s",
            ", ".join(p.scheduler_name for p in config.profiles),
            config.feature_gates,
        )
        return config


class ConfigInForce:
    """The configuration in force, shared by the loops that follow it
    (:func:`controller.loops.build_loops` gives the scheduler and the reservation controller
    one): whichever polls first in a pass reads the ConfigMap through its
    :class:`ConfigWatch`; ``generation`` tells a follower the configuration changed."""

    def __init__(self, registry: Mapping[str, PluginSpec] = PLUGINS) -> None:
        self._watch = ConfigWatch(registry)
        self._config: SchedulerConfiguration | None = None
        #: One more at each new configuration (0: none loaded, the shipped one is in force).
        self.generation = 0

    def poll(
        self, snapshot: Snapshot, registry: Registry, recorder: EventRecorder | None
    ) -> SchedulerConfiguration | None:
        """The configuration in force once ``snapshot``'s ConfigMap is looked at (see
        :meth:`ConfigWatch.poll`); None while none was ever loaded (the shipped one)."""
        config = self._watch.poll(snapshot, registry, recorder)
        if config is not None:
            self._config = config
            self.generation += 1
        return self._config


def _gates(text: str) -> FeatureGates:
    try:
        return parse_feature_gates(text)
    except FeatureGateError as err:
        raise SchedulerConfigError(f"{FEATURE_GATES_KEY}: {err}", field=FEATURE_GATES_KEY) from None
