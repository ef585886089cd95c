"""DeschedulerConfiguration: defaults, plugin merging, args, errors naming field and value."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from apis import constants as k
from apis.codec import load_yaml_documents
from apis.meta import Model
from controller.descheduler import config as cfg
from controller.descheduler.config import (
    DeschedulerConfigError,
    PluginEntry,
    PluginRef,
    PluginSet,
    load_configuration,
    merge_plugin_set,
)
from controller.descheduler.evictor import MigrationController, MigrationControllerArgs
from controller.descheduler.framework import CycleView, Evictor, Status
from controller.descheduler.plugins import PLUGINS
from controller.descheduler.plugins.lownodeload import LowNodeLoadArgs
from controller.errors import ConfigError

HEAD = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n"


class FakeArgs(Model):
    """A fake plugin's args: one bounded number."""

    limit: int = 3

    def __post_init__(self) -> None:
        if not 0 <= self.limit <= 10:
            raise ValueError(f"FakeArgs.limit: {self.limit} is not in [0, 10]")


@dataclass
class FakeDeschedule:
    args: FakeArgs
    name: str = "Fake"

    def deschedule(self, view: CycleView, evictor: Evictor) -> Status:
        return Status()


#: A table with a Deschedule plugin, which the real registry lacks.
FAKE_TABLE = {
    **PLUGINS,
    "Fake": PluginEntry(args=FakeArgs, factory=FakeDeschedule, points=frozenset({cfg.DESCHEDULE})),
}


def load(body: str) -> cfg.Configuration:
    return load_configuration(HEAD + body, plugins=FAKE_TABLE)


def test_an_empty_document_gets_every_default() -> None:
    config = load_configuration(HEAD)
    assert config.interval == 10.0
    assert not config.dry_run
    assert config.node_selector.empty
    assert (config.max_pods_per_node, config.max_pods_per_namespace, config.max_pods_total) == (
        None,
        None,
        None,
    )
    (profile,) = config.profiles
    assert profile.name == "koord-descheduler"
    assert (profile.deschedule, profile.balance) == ((), ())
    assert profile.evict == profile.filter == ("MigrationController",)
    args = profile.args["MigrationController"]
    assert isinstance(args, MigrationControllerArgs)
    assert args == MigrationControllerArgs()


def test_migration_controller_defaults_are_the_spec_s() -> None:
    args = MigrationControllerArgs()
    assert args.max_concurrent_reconciles == 1
    assert args.max_migrating_per_node == 2
    assert args.max_migrating_globally is None
    assert args.max_migrating_per_namespace is None
    assert args.max_migrating_per_workload is None
    assert args.max_unavailable_per_workload is None
    assert args.default_job_mode == "ReservationFirst"
    assert str(args.default_job_ttl) == "5m0s"
    assert args.scheduler_names == ("koord-scheduler",)
    assert args.eviction_policy == "Eviction"
    assert (args.qps, args.evict_burst) == (10.0, 1)
    assert set(args.object_limiters) == {"workload"}
    assert str(args.object_limiters["workload"].duration) == "5m0s"
    assert args.arbitration_args.enabled
    assert str(args.arbitration_args.interval) == "500ms"
    assert not args.node_fit
    assert args.skip_eviction_gates == ()


@pytest.mark.parametrize(
    ("interval", "seconds"),
    [("10s", 10.0), ("1m30s", 90.0), ("0s", 0.0), ("'0'", 0.0), ("500ms", 0.5)],
)
def test_descheduling_interval(interval: str, seconds: float) -> None:
    assert load(f"deschedulingInterval: {interval}\n").interval == seconds


@pytest.mark.parametrize(
    ("defaults", "enabled", "disabled", "merged"),
    [
        pytest.param(["A"], [], [], ("A",), id="defaults kept"),
        pytest.param(["A"], ["B"], [], ("A", "B"), id="custom appended"),
        pytest.param(["A", "B"], ["C", "A"], [], ("A", "B", "C"), id="default replaced in place"),
        pytest.param(["A", "B"], [], ["A"], ("B",), id="one default disabled"),
        pytest.param(["A", "B"], ["C"], ["*"], ("C",), id="star drops every default"),
        pytest.param(["A"], ["A"], ["*"], ("A",), id="star then re-enabled"),
        pytest.param([], ["B", "C"], [], ("B", "C"), id="no defaults"),
    ],
)
def test_merge_plugin_set(
    defaults: list[str], enabled: list[str], disabled: list[str], merged: tuple[str, ...]
) -> None:
    custom = PluginSet(
        enabled=tuple(PluginRef(name=n) for n in enabled),
        disabled=tuple(PluginRef(name=n) for n in disabled),
    )
    assert merge_plugin_set(defaults, custom) == merged


def test_enabled_plugins_merge_with_the_defaults_and_get_default_args() -> None:
    config = load(
        "profiles:\n"
        "- plugins:\n"
        "    deschedule: {enabled: [{name: Fake}]}\n"
        "    balance: {enabled: [{name: LowNodeLoad}, {name: CustomPriority}]}\n"
        "    filter: {disabled: [{name: '*'}]}\n"
        "  pluginConfig:\n"
        "  - name: CustomPriority\n"
        "    args:\n"
        "      evictionOrder:\n"
        "      - {name: od, nodeSelector: {matchLabels: {tier: od}}}\n"
        "      - {name: rsv, nodeSelector: {matchLabels: {tier: rsv}}}\n"
    )
    (profile,) = config.profiles
    assert profile.deschedule == ("Fake",)
    assert profile.balance == ("LowNodeLoad", "CustomPriority")
    assert profile.evict == ("MigrationController",)
    assert profile.filter == ()
    assert profile.plugins == ("Fake", "LowNodeLoad", "CustomPriority", "MigrationController")
    assert profile.args["Fake"] == FakeArgs()
    assert profile.args["LowNodeLoad"] == LowNodeLoadArgs()
    assert [t.name for t in profile.args["CustomPriority"].eviction_order] == ["od", "rsv"]


SHIPPED = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
leaderElection:
  resourceLock: leases
  resourceName: koord-descheduler
  resourceNamespace: koordinator-system
deschedulingInterval: 10s
enableContentionProfiling: true
enableProfiling: true
healthzBindAddress: 0.0.0.0:10251
metricsBindAddress: 0.0.0.0:10251
profiles:
- name: koord-descheduler
  plugins:
    deschedule:
      disabled:
      - name: "*"
    balance:
      disabled:
      - name: "*"
    evict:
      disabled:
      - name: "*"
      enabled:
      - name: MigrationController
  pluginConfig:
  - name: MigrationController
    args:
      apiVersion: descheduler/v1alpha2
      kind: MigrationControllerArgs
      evictionPolicy: Eviction
      namespaces:
        exclude:
        - kube-system
        - koordinator-system
      evictQPS: "10"
      evictBurst: 1
  - name: LowNodeLoad
    args:
      apiVersion: descheduler/v1alpha2
      kind: LowNodeLoadArgs
      evictableNamespaces:
        exclude:
        - kube-system
        - koordinator-system
      lowThresholds:
        cpu: 45
        memory: 55
      highThresholds:
        cpu: 75
        memory: 80
"""


def test_the_shipped_configuration_loads_with_low_node_load_configured_but_not_enabled() -> None:
    config = load_configuration(SHIPPED)
    (profile,) = config.profiles
    assert profile.balance == ()
    assert profile.evict == profile.filter == ("MigrationController",)
    args = profile.args["MigrationController"]
    assert args.qps == 10.0
    assert args.namespaces is not None
    assert args.namespaces.exclude == ("kube-system", "koordinator-system")
    low = profile.args["LowNodeLoad"]
    assert low.high_thresholds == {"cpu": 75, "memory": 80}


def test_limits_selectors_and_dry_run() -> None:
    config = load(
        "dryRun: true\n"
        "maxNoOfPodsToEvictPerNode: 2\n"
        "maxNoOfPodsToEvictPerNamespace: 0\n"
        "maxNoOfPodsToEvictTotal: 7\n"
        "nodeSelector: {matchLabels: {pool: gpu}}\n"
        "profiles:\n"
        "- name: a\n"
        "  nodeSelector: {matchExpressions: [{key: tier, operator: In, values: [od]}]}\n"
        "- name: b\n"
    )
    assert config.dry_run
    assert (config.max_pods_per_node, config.max_pods_per_namespace, config.max_pods_total) == (
        2,
        0,
        7,
    )
    assert config.node_selector.matches({"pool": "gpu"})
    assert not config.node_selector.matches({"pool": "cpu"})
    a, b = config.profiles
    assert (a.name, b.name) == ("a", "b")
    assert a.node_selector.matches({"tier": "od"})
    assert not a.node_selector.matches({})
    assert b.node_selector.empty


def test_pluginconfig_of_an_unknown_plugin_that_is_not_enabled_is_ignored() -> None:
    config = load("profiles:\n- pluginConfig:\n  - name: RemovePodsViolatingNodeAffinity\n")
    assert "RemovePodsViolatingNodeAffinity" not in config.profiles[0].args


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        pytest.param("bogus: 1\n", "bogus", "unknown field", id="unknown top-level field"),
        pytest.param(
            "maxNoOfPodsToEvictPerNode: -1\n",
            "maxNoOfPodsToEvictPerNode",
            "-1 must not be negative",
            id="negative limit",
        ),
        pytest.param(
            "deschedulingInterval: -5s\n",
            "deschedulingInterval",
            "'-5s' must not be negative",
            id="negative interval",
        ),
        pytest.param(
            "deschedulingInterval: often\n",
            "deschedulingInterval",
            "invalid duration",
            id="not a duration",
        ),
        pytest.param(
            "profiles:\n- plugins: {balance: {enabled: [{name: Nope}]}}\n",
            "profiles[0].plugins.balance.enabled[0].name",
            "'Nope' is not a known plugin",
            id="unknown plugin",
        ),
        pytest.param(
            "profiles:\n- plugins: {balance: {enabled: [{name: MigrationController}]}}\n",
            "profiles[0].plugins.balance.enabled[0].name",
            "is not a balance plugin (it is: evict, filter)",
            id="plugin at the wrong extension point",
        ),
        pytest.param(
            "profiles:\n"
            "- plugins:\n"
            "    balance: {enabled: [{name: LowNodeLoad}]}\n"
            "    evict: {disabled: [{name: '*'}]}\n",
            "profiles[0].plugins.evict",
            "needs an evict plugin",
            id="balance without an evictor",
        ),
        pytest.param(
            "profiles:\n- name: a\n- {}\n",
            "profiles[1].name",
            "is required when there are several profiles",
            id="unnamed among several",
        ),
        pytest.param(
            "profiles:\n- name: a\n- name: a\n",
            "profiles[1].name",
            "'a' is already the name of profiles[0]",
            id="duplicate profile name",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - {name: MigrationController}\n"
            "  - {name: MigrationController}\n",
            "profiles[0].pluginConfig[1].name",
            "is configured twice",
            id="plugin configured twice",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {evictBurst: 0}\n",
            "profiles[0].pluginConfig[0].args.evictBurst",
            "0 must be > 0 when evictQPS is set",
            id="burst without tokens",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {evictQPS: fast}\n",
            "profiles[0].pluginConfig[0].args.evictQPS",
            "'fast' is not a number",
            id="qps not a number",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {skipEvictionGates: [NoSuchGate]}\n",
            "profiles[0].pluginConfig[0].args.skipEvictionGates",
            "'NoSuchGate' is not one of",
            id="unknown eviction gate",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {defaultJobMode: Teleport}\n",
            "profiles[0].pluginConfig[0].args.defaultJobMode",
            "'Teleport' is not one of",
            id="unknown job mode",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {maxMigratingPerWorkload: lots}\n",
            "profiles[0].pluginConfig[0].args.maxMigratingPerWorkload",
            "'lots' is neither an integer nor a percentage",
            id="bad int-or-percent",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {maxMigratingPerNode: many}\n",
            "profiles[0].pluginConfig[0].args.maxMigratingPerNode",
            "Expected `int | null`, got `str`",
            id="wrong type",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {namespaces: {include: [a], exclude: [b]}}\n",
            "profiles[0].pluginConfig[0].args.namespaces",
            "sets both include and exclude",
            id="include and exclude",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: MigrationController\n"
            "    args: {kind: LowNodeLoadArgs}\n",
            "profiles[0].pluginConfig[0].args.kind",
            "'LowNodeLoadArgs' is not 'MigrationControllerArgs'",
            id="args of another kind",
        ),
        pytest.param(
            "profiles:\n- pluginConfig:\n  - name: LowNodeLoad\n"
            "    args: {highThresholds: {cpu: 120}}\n",
            "profiles[0].pluginConfig[0].args.highThresholds.cpu",
            "120.0 is not in [0, 100]",
            id="a plugin's own check",
        ),
        pytest.param(
            "profiles:\n- plugins: {deschedule: {enabled: [{name: Fake}]}}\n"
            "  pluginConfig:\n  - {name: Fake, args: {limit: 11}}\n",
            "profiles[0].pluginConfig[0].args.limit",
            "11 is not in [0, 10]",
            id="kind prefix dropped",
        ),
        pytest.param(
            "profiles:\n- plugins: {balance: {enabled: [{name: CustomPriority}]}}\n",
            "profiles[0].pluginConfig[name=CustomPriority].args.evictionOrder",
            "[] must list at least 2 tiers",
            id="enabled without the args it needs",
        ),
        pytest.param(
            "nodeSelector: {matchExpressions: [{key: a, operator: Near}]}\n",
            "nodeSelector",
            "'Near' is not a valid label selector operator",
            id="bad selector operator",
        ),
    ],
)
def test_errors_name_the_field_and_the_value(body: str, field: str, text: str) -> None:
    with pytest.raises(DeschedulerConfigError) as caught:
        load(body)
    err = caught.value
    assert err.field == field
    assert str(err).startswith(f"{field}: ")
    assert text in str(err)
    assert isinstance(err, ConfigError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("a: [\n", "invalid YAML", id="not YAML"),
        pytest.param(HEAD + "---\n" + HEAD, "found 2", id="two documents"),
        pytest.param("- 1\n", "must be a mapping", id="not a mapping"),
        pytest.param(
            "apiVersion: descheduler/v1alpha1\nkind: DeschedulerConfiguration\n",
            "is not 'descheduler/v1alpha2'",
            id="other version",
        ),
    ],
)
def test_documents_that_are_not_a_configuration(text: str, message: str) -> None:
    with pytest.raises(DeschedulerConfigError) as caught:
        load_configuration(text, plugins=FAKE_TABLE)
    assert message in str(caught.value)


def test_the_registry_names_every_plugin_with_its_args_and_points() -> None:
    assert set(PLUGINS) == {"CustomPriority", "LowNodeLoad", "MigrationController"}
    for name, entry in PLUGINS.items():
        assert entry.args.__name__ == f"{name}Args"
    for name in ("LowNodeLoad", "MigrationController"):
        entry = PLUGINS[name]
        assert getattr(entry.factory(entry.args()), "name", None) == name
    assert PLUGINS["MigrationController"].points == {cfg.EVICT, cfg.FILTER}
    assert PLUGINS["MigrationController"].factory is MigrationController
    assert PLUGINS["LowNodeLoad"].points == PLUGINS["CustomPriority"].points == {cfg.BALANCE}


def test_a_document_becomes_the_config_map_the_loop_reads() -> None:
    (raw,) = load_yaml_documents(SHIPPED)
    assert cfg.is_document(raw)
    assert not cfg.is_document({"apiVersion": "v1", "kind": "ConfigMap"})
    made = cfg.config_map(raw)
    assert (made.metadata.namespace, made.metadata.name) == (
        k.DESCHEDULER_CONFIG_NAMESPACE,
        k.DESCHEDULER_CONFIG_NAME,
    )
    again = load_configuration(made.data[k.DESCHEDULER_CONFIG_KEY])
    assert again.document == load_configuration(SHIPPED).document
    with pytest.raises(DeschedulerConfigError, match="maxNoOfPodsToEvictTotal"):
        cfg.config_map({**raw, "maxNoOfPodsToEvictTotal": -3})
