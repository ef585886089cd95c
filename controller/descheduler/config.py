"""``DeschedulerConfiguration`` (``descheduler/v1alpha2``): koord-descheduler's configuration file.

The document (controller-spec §6.1) is decoded into frozen Structs that refuse unknown fields,
then resolved into a :class:`Configuration`:

- ``deschedulingInterval`` (Go duration) defaults to ``10s``; ``0s`` runs one cycle and stops.
- ``maxNoOfPodsToEvictPerNode``/``PerNamespace``/``Total``: unset means unlimited.
- ``nodeSelector`` (global and per profile) is a ``meta/v1`` LabelSelector, as in Koordinator's
  v1alpha2 types; unset selects every node.
- No profile: one profile. A single profile without a name is called ``koord-descheduler``;
  with several, every profile needs a unique name.
- Plugin sets merge with the defaults as kube-scheduler's do: the defaults are
  ``evict: [MigrationController]`` and ``filter: [MigrationController]`` (``deschedule`` and
  ``balance`` have none); ``disabled: [{name: "*"}]`` drops every default of that point, a named
  one drops that default; an enabled plugin that is also a default replaces it in place, the
  other enabled plugins follow in their order.
- Every plugin enabled at any point gets its ``Args`` (``<Plugin>Args``) from ``pluginConfig``,
  or the defaults when it has none; a ``pluginConfig`` of a known plugin that is not enabled is
  decoded and checked too (the shipped configuration configures LowNodeLoad without enabling
  it). Args are built through the registry (:data:`controller.descheduler.plugins.PLUGINS`):
  each plugin's frozen Struct holds its defaults and refuses bad values; ``apiVersion`` and
  ``kind`` inside ``args`` may be given and must then be ``descheduler/v1alpha2`` and
  ``<Plugin>Args``.

Any error raises :class:`DeschedulerConfigError` naming the field and the value, e.g.
``profiles[0].pluginConfig[1].args.highThresholds.cpu: 120.0 is not in [0, 100]``. A plugin's
``Args`` report their own errors as ``ValueError("<field>: <value> <rule>")`` (msgspec turns an
error raised in ``__post_init__`` into a validation error); this module adds where it was.
``pluginConfig`` entries for plugins koordpy does not have are ignored with a warning unless
the plugin is enabled, which is an error (upstream skips out-of-tree args the same way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from apis import codec
from apis import constants as k
from apis.core import ConfigMap
from apis.duration import Duration
from apis.errors import DecodeError
from apis.labels import Selector, SelectorError
from apis.meta import LabelSelector, Model, ObjectMeta
from controller.errors import ConfigError

__all__ = [
    "API_VERSION",
    "BALANCE",
    "DEFAULT_INTERVAL",
    "DEFAULT_PROFILE_NAME",
    "DESCHEDULE",
    "EVICT",
    "FILTER",
    "KIND",
    "Configuration",
    "DeschedulerConfigError",
    "DeschedulerConfiguration",
    "DeschedulerProfile",
    "PluginConfig",
    "PluginEntry",
    "PluginRef",
    "PluginSet",
    "Plugins",
    "ProfileConfig",
    "build_configuration",
    "config_map",
    "decode_document",
    "is_document",
    "load_configuration",
    "merge_plugin_set",
]

log = logging.getLogger(__name__)

API_VERSION: Final = "descheduler/v1alpha2"
KIND: Final = "DeschedulerConfiguration"
DEFAULT_PROFILE_NAME: Final = "koord-descheduler"
#: ``deschedulingInterval`` when the document gives none.
DEFAULT_INTERVAL: Final = Duration.parse("10s")
#: The plugin that evicts and filters unless a profile says otherwise.
MIGRATION_CONTROLLER: Final = "MigrationController"

#: Extension points.
DESCHEDULE: Final = "deschedule"
BALANCE: Final = "balance"
EVICT: Final = "evict"
FILTER: Final = "filter"
POINTS: Final = (DESCHEDULE, BALANCE, EVICT, FILTER)


class DeschedulerConfigError(ConfigError):
    """A DeschedulerConfiguration that cannot be used. ``field`` is the path of the first bad
    field (``profiles[0].plugins.balance.enabled[1].name``), ``value`` its value as given."""

    def __init__(self, message: str, *, field: str = "", value: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value


# --- registry entries ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PluginEntry:
    """One plugin of the registry: its ``Args`` Struct, how to build it, where it may run."""

    #: The frozen msgspec Struct of the plugin's arguments (``<Plugin>Args``), all defaulted.
    args: type[Any]
    #: ``factory(args)`` -> the plugin instance (kept across cycles).
    factory: Callable[[Any], object]
    #: The extension points the plugin implements (:data:`DESCHEDULE`, :data:`BALANCE`...).
    points: frozenset[str] = frozenset({BALANCE})


# --- the document ------------------------------------------------------------------------------


class PluginRef(Model):
    name: str = ""


class PluginSet(Model):
    enabled: tuple[PluginRef, ...] = ()
    disabled: tuple[PluginRef, ...] = ()


_NO_SET = PluginSet()


class Plugins(Model):
    deschedule: PluginSet = _NO_SET
    balance: PluginSet = _NO_SET
    evict: PluginSet = _NO_SET
    filter: PluginSet = _NO_SET


class PluginConfig(Model):
    name: str
    #: The plugin's args as given (``apiVersion``/``kind`` inside are allowed and checked).
    args: dict[str, Any] | None = None


class DeschedulerProfile(Model):
    name: str = ""
    plugin_config: tuple[PluginConfig, ...] = ()
    plugins: Plugins | None = None
    node_selector: LabelSelector | None = None


class DeschedulerConfiguration(Model):
    """The document as written (see the module docstring for defaults)."""

    api_version: str = API_VERSION
    kind: str = KIND
    #: Accepted for compatibility and not used: koordpy's controller is single-writer.
    leader_election: dict[str, Any] | None = None
    client_connection: dict[str, Any] | None = None
    healthz_bind_address: str | None = None
    metrics_bind_address: str | None = None
    enable_profiling: bool | None = None
    enable_contention_profiling: bool | None = None
    #: Time between cycles (default 10s); ``0s`` runs one cycle only.
    descheduling_interval: Duration | None = None
    dry_run: bool = False
    profiles: tuple[DeschedulerProfile, ...] = ()
    node_selector: LabelSelector | None = None
    max_no_of_pods_to_evict_per_node: int | None = None
    max_no_of_pods_to_evict_per_namespace: int | None = None
    max_no_of_pods_to_evict_total: int | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("maxNoOfPodsToEvictPerNode", self.max_no_of_pods_to_evict_per_node),
            ("maxNoOfPodsToEvictPerNamespace", self.max_no_of_pods_to_evict_per_namespace),
            ("maxNoOfPodsToEvictTotal", self.max_no_of_pods_to_evict_total),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{name}: {value} must not be negative")
        interval = self.descheduling_interval
        if interval is not None and interval.nanoseconds < 0:
            raise ValueError(f"deschedulingInterval: {str(interval)!r} must not be negative")


# --- the resolved configuration ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One profile, defaults applied and merged."""

    name: str
    #: The profile's nodes (everything when the profile names no selector).
    node_selector: Selector
    deschedule: tuple[str, ...] = ()
    balance: tuple[str, ...] = ()
    evict: tuple[str, ...] = (MIGRATION_CONTROLLER,)
    filter: tuple[str, ...] = (MIGRATION_CONTROLLER,)
    #: Plugin name -> its Args instance: every enabled plugin, and every known one configured.
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def plugins(self) -> tuple[str, ...]:
        """Every enabled plugin, each once, in point order (deschedule, balance, evict...)."""
        seen: dict[str, None] = {}
        for point in (self.deschedule, self.balance, self.evict, self.filter):
            seen.update(dict.fromkeys(point))
        return tuple(seen)


@dataclass(frozen=True, slots=True)
class Configuration:
    """What a descheduler runs with."""

    #: Seconds between cycles; 0: one cycle only.
    interval: float
    dry_run: bool
    node_selector: Selector
    max_pods_per_node: int | None
    max_pods_per_namespace: int | None
    max_pods_total: int | None
    profiles: tuple[ProfileConfig, ...]
    #: The document it came from.
    document: DeschedulerConfiguration


_DEFAULT_PLUGINS: Final = Plugins(
    evict=PluginSet(enabled=(PluginRef(name=MIGRATION_CONTROLLER),)),
    filter=PluginSet(enabled=(PluginRef(name=MIGRATION_CONTROLLER),)),
)


def merge_plugin_set(defaults: Sequence[str], custom: PluginSet) -> tuple[str, ...]:
    """kube-scheduler's merge of one extension point's default and configured plugins."""
    disabled = {ref.name for ref in custom.disabled}
    wanted = [ref.name for ref in custom.enabled]
    merged: list[str] = []
    replaced: set[str] = set()
    if "*" not in disabled:
        for name in defaults:
            if name in disabled:
                continue
            if name in wanted:
                replaced.add(name)
            merged.append(name)
    merged.extend(name for name in wanted if name not in replaced)
    return tuple(dict.fromkeys(merged))


def _error(path: str, message: str, value: object = None) -> DeschedulerConfigError:
    shown = "" if value is None else _show(value)
    text = f"{path}: {shown} {message}" if shown else f"{path}: {message}"
    return DeschedulerConfigError(text, field=path, value=shown)


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _join(prefix: str, path: str) -> str:
    if not path:
        return prefix
    if not prefix:
        return path
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def _decode_error(prefix: str, err: DecodeError, kind: str = "") -> DeschedulerConfigError:
    """``err`` (a field path relative to ``prefix``) as a configuration error. A message of the
    ``<field>: <value> <rule>`` form (a Struct's own checks; ``<Kind>.`` before the field is
    dropped) names the field below where msgspec found the error."""
    base = _join(prefix, err.field)
    head, sep, rest = err.message.partition(": ")
    if sep and head and " " not in head and "`" not in head:
        if kind and (head == kind or head.startswith(f"{kind}.")):
            head = head[len(kind) :].lstrip(".")
        path = _join(base, head)
        return DeschedulerConfigError(f"{path}: {rest}", field=path)
    if not base:
        return DeschedulerConfigError(err.message, value=err.value)
    text = f"{base}: {err.value} {err.message}" if err.value else f"{base}: {err.message}"
    return DeschedulerConfigError(text, field=base, value=err.value)


def _selector(path: str, selector: LabelSelector | None) -> Selector:
    if selector is None:
        return Selector.everything()
    try:
        return Selector.from_label_selector(selector)
    except SelectorError as err:
        raise _error(path, err.reason, err.text) from None


def _build_args(path: str, name: str, raw: Mapping[str, Any] | None, entry: PluginEntry) -> object:
    body = dict(raw or {})
    kind = body.pop("kind", None)
    api_version = body.pop("apiVersion", None)
    expected = f"{name}Args"
    if kind is not None and kind != expected:
        raise _error(f"{path}.kind", f"is not {expected!r}", kind)
    if api_version is not None and api_version != API_VERSION:
        raise _error(f"{path}.apiVersion", f"is not {API_VERSION!r}", api_version)
    try:
        return codec.decode_as(body, entry.args)
    except DecodeError as err:
        raise _decode_error(path, err, expected) from None
    except ValueError as err:  # checks run outside decoding (a property, a helper)
        raise _decode_error(path, DecodeError(str(err)), expected) from None


def _profile(
    index: int,
    profile: DeschedulerProfile,
    name: str,
    plugins: Mapping[str, PluginEntry],
) -> ProfileConfig:
    where = f"profiles[{index}]"
    custom = profile.plugins or Plugins()
    sets: dict[str, tuple[str, ...]] = {}
    for point in POINTS:
        given: PluginSet = getattr(custom, point)
        defaults = [ref.name for ref in getattr(_DEFAULT_PLUGINS, point).enabled]
        for position, ref in enumerate(given.enabled):
            at = f"{where}.plugins.{point}.enabled[{position}].name"
            entry = plugins.get(ref.name)
            if entry is None:
                known = ", ".join(sorted(plugins))
                raise _error(at, f"is not a known plugin (known: {known})", ref.name)
            if point not in entry.points:
                points = ", ".join(p for p in POINTS if p in entry.points)
                raise _error(at, f"is not a {point} plugin (it is: {points})", ref.name)
        sets[point] = merge_plugin_set(defaults, given)
    if (sets[DESCHEDULE] or sets[BALANCE]) and not sets[EVICT]:
        raise _error(
            f"{where}.plugins.evict",
            "a profile with deschedule or balance plugins needs an evict plugin",
        )
    configured: dict[str, tuple[int, PluginConfig]] = {}
    for position, config in enumerate(profile.plugin_config):
        if config.name in configured:
            raise _error(
                f"{where}.pluginConfig[{position}].name", "is configured twice", config.name
            )
        configured[config.name] = (position, config)
    enabled = dict.fromkeys(name for point in POINTS for name in sets[point])
    for plugin_name, (position, _) in configured.items():
        if plugin_name not in plugins:
            log.warning(
                "descheduler profile %s: ignoring pluginConfig[%d] of unknown plugin %s",
                name,
                position,
                plugin_name,
            )
    args: dict[str, Any] = {}
    for plugin_name in {**enabled, **{n: None for n in configured if n in plugins}}:
        entry = plugins[plugin_name]
        found = configured.get(plugin_name)
        if found is None:
            # No pluginConfig entry: the defaults, which some plugins cannot run with.
            path = f"{where}.pluginConfig[name={plugin_name}].args"
            args[plugin_name] = _build_args(path, plugin_name, None, entry)
        else:
            position, config = found
            path = f"{where}.pluginConfig[{position}].args"
            args[plugin_name] = _build_args(path, plugin_name, config.args, entry)
    return ProfileConfig(
        name=name,
        node_selector=_selector(f"{where}.nodeSelector", profile.node_selector),
        deschedule=sets[DESCHEDULE],
        balance=sets[BALANCE],
        evict=sets[EVICT],
        filter=sets[FILTER],
        args=args,
    )


def build_configuration(
    document: DeschedulerConfiguration, *, plugins: Mapping[str, PluginEntry] | None = None
) -> Configuration:
    """Resolve a decoded document (defaults, plugin merging, every plugin's Args)."""
    table = _registry() if plugins is None else plugins
    if document.api_version != API_VERSION:
        raise _error("apiVersion", f"is not {API_VERSION!r}", document.api_version)
    if document.kind != KIND:
        raise _error("kind", f"is not {KIND!r}", document.kind)
    profiles = document.profiles or (DeschedulerProfile(),)
    names: dict[str, int] = {}
    resolved: list[ProfileConfig] = []
    for index, profile in enumerate(profiles):
        name = profile.name
        if not name:
            if len(profiles) > 1:
                raise _error(
                    f"profiles[{index}].name", "is required when there are several profiles"
                )
            name = DEFAULT_PROFILE_NAME
        if name in names:
            raise _error(
                f"profiles[{index}].name",
                f"is already the name of profiles[{names[name]}]",
                name,
            )
        names[name] = index
        resolved.append(_profile(index, profile, name, table))
    interval = document.descheduling_interval or (
        DEFAULT_INTERVAL if document.descheduling_interval is None else Duration(0)
    )
    return Configuration(
        interval=interval.seconds,
        dry_run=document.dry_run,
        node_selector=_selector("nodeSelector", document.node_selector),
        max_pods_per_node=document.max_no_of_pods_to_evict_per_node,
        max_pods_per_namespace=document.max_no_of_pods_to_evict_per_namespace,
        max_pods_total=document.max_no_of_pods_to_evict_total,
        profiles=tuple(resolved),
        document=document,
    )


def decode_document(raw: Any) -> DeschedulerConfiguration:
    """The document from decoded YAML/JSON (errors name the field and value)."""
    if not isinstance(raw, dict):
        raise DeschedulerConfigError(
            f"a DeschedulerConfiguration must be a mapping, got {type(raw).__name__}"
        )
    try:
        return codec.decode_as(raw, DeschedulerConfiguration)
    except DecodeError as err:
        raise _decode_error("", err) from None


def load_configuration(
    text: str, *, plugins: Mapping[str, PluginEntry] | None = None
) -> Configuration:
    """Decode a DeschedulerConfiguration YAML (or JSON) document and resolve it."""
    try:
        documents = codec.load_yaml_documents(text)
    except DecodeError as err:
        raise DeschedulerConfigError(err.message) from None
    if len(documents) != 1:
        raise DeschedulerConfigError(
            f"expected one DeschedulerConfiguration document, found {len(documents)}"
        )
    return build_configuration(decode_document(documents[0]), plugins=plugins)


def is_document(raw: object) -> TypeGuard[dict[str, Any]]:
    """Whether decoded YAML is a DeschedulerConfiguration document."""
    return (
        isinstance(raw, dict)
        and raw.get("kind") == KIND
        and str(raw.get("apiVersion", "")).startswith("descheduler/")
    )


def config_map(
    raw: Mapping[str, Any], *, plugins: Mapping[str, PluginEntry] | None = None
) -> ConfigMap:
    """The ConfigMap the descheduler loop reads, holding the document ``raw`` (checked first:
    a bad document raises :class:`DeschedulerConfigError`)."""
    build_configuration(decode_document(dict(raw)), plugins=plugins)
    return ConfigMap(
        metadata=ObjectMeta(
            name=k.DESCHEDULER_CONFIG_NAME, namespace=k.DESCHEDULER_CONFIG_NAMESPACE
        ),
        data={k.DESCHEDULER_CONFIG_KEY: codec.dump_yaml(dict(raw))},
    )


def _registry() -> Mapping[str, PluginEntry]:
    # Imported here: the registry imports every plugin, and the plugins import this module.
    from controller.descheduler.plugins import PLUGINS

    return PLUGINS
