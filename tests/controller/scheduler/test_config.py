"""The scheduler's KubeSchedulerConfiguration: parsing, defaults, merging, refusals, reloads."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from apis import codec
from apis.core import ConfigMap, Event, Pod
from apis.errors import DecodeError
from apis.meta import ObjectMeta
from controller.errors import NotFound
from controller.loops import LoopContext
from controller.scheduler.config import (
    CONFIG_KEY,
    CONFIG_NAME,
    CONFIG_NAMESPACE,
    FEATURE_GATES_KEY,
    INVALID_CONFIGURATION,
    SchedulerConfigError,
    SchedulerConfiguration,
    config_map,
    default_configuration,
    load_configuration,
)
from controller.scheduler.features import DEFAULTS, parse_feature_gates
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.plugins.deviceshare import DeviceShare
from controller.scheduler.profile import Profile
from controller.simulate import scenario_objects
from controller.store.sqlite import Store
from tests.controller.scheduler.loadaware.builders import GIB, metric, node, pod

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

#: Koordinator v1.8's Helm chart, ``templates/koord-scheduler-config.yaml`` as installed in
#: ``koordinator-system`` (job preemption off).
CHART = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceName: koord-scheduler
  resourceNamespace: koordinator-system
profiles:
  - pluginConfig:
    - name: NodeResourcesFit
      args:
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: NodeResourcesFitArgs
        scoringStrategy:
          type: LeastAllocated
          resources:
            - name: cpu
              weight: 1
            - name: memory
              weight: 1
            - name: "kubernetes.io/batch-cpu"
              weight: 1
            - name: "kubernetes.io/batch-memory"
              weight: 1
    - name: LoadAwareScheduling
      args:
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: LoadAwareSchedulingArgs
        filterExpiredNodeMetrics: false
        nodeMetricExpirationSeconds: 300
        resourceWeights:
          cpu: 1
          memory: 1
        usageThresholds:
          cpu: 65
          memory: 95
        estimatedScalingFactors:
          cpu: 85
          memory: 70
    - name: ElasticQuota
      args:
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: ElasticQuotaArgs
        quotaGroupNamespace: koordinator-system
    - name: Coscheduling
      args:
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: CoschedulingArgs
        awareNetworkTopology: true
    plugins:
      preEnqueue:
        enabled:
          - name: Coscheduling
      queueSort:
        disabled:
          - name: "*"
        enabled:
          - name: PrioritySort
      preFilter:
        enabled:
          - name: SchedulingHint
          - name: Coscheduling
          - name: Reservation
          - name: NodeNUMAResource
          - name: DeviceShare
          - name: ElasticQuota
      filter:
        enabled:
          - name: Reservation
          - name: LoadAwareScheduling
          - name: NodeNUMAResource
          - name: DeviceShare
      postFilter:
        disabled:
          - name: "*"
        enabled:
          - name: Reservation
          - name: Coscheduling
          - name: ElasticQuota
          - name: DefaultPreemption
      preScore:
        enabled:
          - name: Reservation
          - name: Coscheduling
      score:
        enabled:
          - name: LoadAwareScheduling
            weight: 1
          - name: NodeNUMAResource
            weight: 1
          - name: DeviceShare
            weight: 1
          - name: Reservation
            weight: 5000
          - name: Coscheduling
            weight: 1
      reserve:
        enabled:
          - name: Reservation
          - name: LoadAwareScheduling
          - name: NodeNUMAResource
          - name: DeviceShare
          - name: Coscheduling
          - name: ElasticQuota
      permit:
        enabled:
          - name: Coscheduling
      preBind:
        enabled:
          - name: NodeNUMAResource
          - name: DeviceShare
          - name: Reservation
          - name: Coscheduling
          - name: DefaultPreBind
      bind:
        disabled:
          - name: "*"
        enabled:
          - name: Reservation
          - name: DefaultBinder
      postBind:
        enabled:
          - name: Coscheduling
    schedulerName: koord-scheduler
"""


def names(plugins: Any) -> list[str]:
    return [type(p).__name__ for p in plugins]


def doc(plugins: str = "", plugin_config: str = "", scheduler: str = "koord-scheduler") -> str:
    """A one-profile document; ``plugins``/``plugin_config`` are YAML indented for a profile."""
    text = (
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n"
        f"  - schedulerName: {scheduler}\n"
    )
    if plugins:
        text += "    plugins:\n" + plugins
    if plugin_config:
        text += "    pluginConfig:\n" + plugin_config
    return text


def only(config: SchedulerConfiguration) -> Profile:
    assert len(config.profiles) == 1
    return config.profiles[0]


# --- the chart and the defaults --------------------------------------------------------------


def test_the_charts_configuration_is_accepted_as_shipped() -> None:
    config = load_configuration(CHART)
    profile = only(config)
    assert profile.scheduler_names == ("koord-scheduler", "default-scheduler")
    loadaware = config.args["koord-scheduler"]["LoadAwareScheduling"]
    assert codec.to_builtins(loadaware)["usageThresholds"] == {"cpu": 65, "memory": 95}
    assert profile.plugins["Coscheduling"].args.aware_network_topology is True  # type: ignore[attr-defined]
    weights = {type(e.plugin).__name__: e.weight for e in profile.score}
    assert weights["ReservationPlugin"] == 5000
    assert "LoadAwareScheduling" in names(profile.filter)


def test_without_a_configmap_the_charts_args_are_in_force() -> None:
    """The shipped profile's args are the chart's: the load filter at cpu 65 / memory 95."""
    config = default_configuration()
    profile = only(config)
    loadaware = profile.plugins["LoadAwareScheduling"].args  # type: ignore[attr-defined]
    assert loadaware.usage_thresholds == {"cpu": 65, "memory": 95}
    assert loadaware.filter_expired_node_metrics is False
    assert loadaware.node_metric_expiration_seconds == 300
    chart = load_configuration(CHART).args["koord-scheduler"]["LoadAwareScheduling"]
    assert loadaware.usage_thresholds == codec.to_builtins(chart)["usageThresholds"]


def test_a_plugin_enabled_without_pluginconfig_runs_with_its_own_defaults() -> None:
    """As koord-scheduler does: the plugin's defaults (filterExpiredNodeMetrics on, 180 s),
    not the chart's pluginConfig."""
    profile = only(load_configuration(doc()))
    args = profile.plugins["LoadAwareScheduling"].args  # type: ignore[attr-defined]
    assert args.filter_expired_node_metrics is True
    assert args.node_metric_expiration_seconds == 180


def test_v1beta3_is_accepted_too() -> None:
    text = doc().replace("config.k8s.io/v1\n", "config.k8s.io/v1beta3\n")
    assert only(load_configuration(text)).scheduler_name == "koord-scheduler"


def test_no_profiles_is_the_shipped_profile() -> None:
    text = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    profile = only(load_configuration(text))
    assert profile.scheduler_names == ("koord-scheduler", "default-scheduler")


# --- plugins: merging with the defaults ----------------------------------------------------------


def test_disabling_every_default_filter_keeps_only_the_enabled_ones() -> None:
    plugins = (
        "      filter:\n"
        "        disabled:\n"
        "          - name: '*'\n"
        "        enabled:\n"
        "          - name: NodeResourcesFit\n"
    )
    profile = only(load_configuration(doc(plugins)))
    assert names(profile.filter) == ["NodeResourcesFit"]


def test_disabling_one_default_drops_only_that_one() -> None:
    plugins = "      filter:\n        disabled:\n          - name: LoadAwareScheduling\n"
    profile = only(load_configuration(doc(plugins)))
    assert "LoadAwareScheduling" not in names(profile.filter)
    assert "NodeResourcesFit" in names(profile.filter)
    assert "LoadAwareScheduling" in names(p.plugin for p in profile.score)


def test_enabling_a_default_keeps_its_place_and_takes_a_new_weight() -> None:
    plugins = (
        "      score:\n"
        "        enabled:\n"
        "          - name: LoadAwareScheduling\n"
        "            weight: 7\n"
    )
    default = [type(e.plugin).__name__ for e in only(default_configuration()).score]
    profile = only(load_configuration(doc(plugins)))
    assert [type(e.plugin).__name__ for e in profile.score] == default
    weights = {type(e.plugin).__name__: e.weight for e in profile.score}
    assert weights["LoadAwareScheduling"] == 7
    assert weights["ReservationPlugin"] == 5000  # a default's weight when not given


def test_multipoint_disabled_drops_a_plugin_everywhere() -> None:
    plugins = "      multiPoint:\n        disabled:\n          - name: LoadAwareScheduling\n"
    profile = only(load_configuration(doc(plugins)))
    assert "LoadAwareScheduling" not in profile.plugins


def test_multipoint_enabled_adds_a_plugin_at_every_point_it_has() -> None:
    plugins = (
        "      multiPoint:\n"
        "        disabled:\n"
        "          - name: '*'\n"
        "        enabled:\n"
        "          - name: LoadAwareScheduling\n"
        "            weight: 3\n"
    )
    profile = only(load_configuration(doc(plugins)))
    assert names(profile.filter) == ["LoadAwareScheduling"]
    assert names(profile.reserve) == ["LoadAwareScheduling"]
    assert [(type(e.plugin).__name__, e.weight) for e in profile.score] == [
        ("LoadAwareScheduling", 3)
    ]
    assert names(profile.pre_filter) == []


def test_kubernetes_plugins_koordpy_lacks_are_accepted_and_ignored() -> None:
    plugins = (
        "      score:\n"
        "        disabled:\n"
        "          - name: NodeResourcesBalancedAllocation\n"
        "        enabled:\n"
        "          - name: PodTopologySpread\n"
        "            weight: 2\n"
    )
    default = [type(e.plugin).__name__ for e in only(default_configuration()).score]
    profile = only(load_configuration(doc(plugins)))
    assert [type(e.plugin).__name__ for e in profile.score] == default


# --- several profiles ---------------------------------------------------------------------------


def test_each_profile_serves_its_scheduler_name_and_koord_scheduler_the_unnamed() -> None:
    text = doc() + "  - schedulerName: load-only\n"
    config = load_configuration(text)
    assert [p.scheduler_names for p in config.profiles] == [
        ("koord-scheduler", "default-scheduler"),
        ("load-only",),
    ]


def test_a_default_scheduler_profile_serves_the_pods_naming_no_scheduler() -> None:
    text = doc() + "  - schedulerName: default-scheduler\n"
    config = load_configuration(text)
    assert [p.scheduler_names for p in config.profiles] == [
        ("koord-scheduler",),
        ("default-scheduler",),
    ]


def test_without_koord_scheduler_the_first_profile_serves_unnamed_pods() -> None:
    text = doc(scheduler="a") + "  - schedulerName: b\n"
    config = load_configuration(text)
    assert [p.scheduler_names for p in config.profiles] == [("a", "default-scheduler"), ("b",)]


# --- every plugin's args -----------------------------------------------------------------------


def test_every_plugins_args_are_settable() -> None:
    plugin_config = """\
    - name: Reservation
      args:
        enablePreemption: true
        minCandidateNodesPercentage: 20
        gcDurationSeconds: 3600
        preAllocationConfig:
          enableClusterMode: true
          clusterLabelKey: example.com/pre-allocatable
          preferNoPreAllocatedPods: true
        ignoredResources: [example.com/gpu]
        reservationSelectorIndex: {enabled: true, keys: [app]}
    - name: ElasticQuota
      args:
        revokePodInterval: 5s
        delayEvictTime: 30s
        enableRuntimeQuota: false
        enableCheckParentQuota: true
        monitorAllQuotas: true
        defaultQuotaGroupMax: {cpu: "100", memory: 200Gi}
    - name: DeviceShare
      args:
        scoringStrategy:
          type: MostAllocated
          resources: [{name: koordinator.sh/gpu-memory-ratio, weight: 2}]
    - name: NodeNUMAResource
      args:
        defaultCPUBindPolicy: SpreadByPCPUs
        numaScoringStrategy: {type: MostAllocated}
    - name: Coscheduling
      args: {defaultTimeout: 30s, defaultMatchPolicy: waiting-and-running}
    - name: NodeResourcesFit
      args:
        scoringStrategy:
          type: MostAllocated
          resources: [{name: cpu, weight: 2}, {name: memory, weight: 1}]
    - name: SchedulingHint
      args: {maxHintNodes: 3}
    - name: LoadAwareScheduling
      args:
        dominantResourceWeight: 2
        resourceWeights: {}
        aggregated: {usageThresholds: {cpu: 60}, usageAggregationType: p95}
"""
    config = load_configuration(doc(plugin_config=plugin_config))
    args = {name: codec.to_builtins(a) for name, a in config.args["koord-scheduler"].items()}
    reservation = args["Reservation"]
    assert reservation["enablePreemption"] is True
    assert reservation["preAllocationConfig"]["enableClusterMode"] is True
    assert reservation["preAllocationConfig"]["clusterLabelKey"] == "example.com/pre-allocatable"
    assert reservation["reservationSelectorIndex"]["keys"] == ("app",)
    quota = args["ElasticQuota"]
    assert (quota["revokePodInterval"], quota["delayEvictTime"]) == ("5s", "30s")
    assert quota["enableRuntimeQuota"] is False
    assert quota["enableCheckParentQuota"] is True
    assert quota["monitorAllQuotas"] is True
    assert args["DeviceShare"]["scoringStrategy"]["type"] == "MostAllocated"
    assert args["NodeNUMAResource"]["defaultCPUBindPolicy"] == "SpreadByPCPUs"
    assert args["Coscheduling"]["defaultMatchPolicy"] == "waiting-and-running"
    assert args["NodeResourcesFit"]["scoringStrategy"]["type"] == "MostAllocated"
    assert args["SchedulingHint"]["maxHintNodes"] == 3
    assert args["LoadAwareScheduling"]["dominantResourceWeight"] == 2
    # The plugins run with them.
    profile = only(config)
    assert profile.plugins["Reservation"].args.pre_allocation_config.enable_cluster_mode  # type: ignore[attr-defined]
    assert profile.plugins["ElasticQuota"].args.monitor_all_quotas  # type: ignore[attr-defined]
    assert profile.plugins["SchedulingHint"].args.max_hint_nodes == 3  # type: ignore[attr-defined]


# --- refusals ------------------------------------------------------------------------------------


def _pc(name: str, args: str) -> str:
    return doc(plugin_config=f"    - name: {name}\n      args: {args}\n")


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        pytest.param(
            _pc("LoadAwareScheduling", "{resourceWeights: {cpu: 0}}"),
            "profiles[0].pluginConfig[0].args.resourceWeights.cpu",
            "0",
            id="loadaware-weight",
        ),
        pytest.param(
            _pc("LoadAwareScheduling", "{usageThresholds: {memory: 101}}"),
            "profiles[0].pluginConfig[0].args.usageThresholds.memory",
            "101",
            id="loadaware-threshold",
        ),
        pytest.param(
            _pc("LoadAwareScheduling", "{aggregated: {usageAggregationType: p42}}"),
            "profiles[0].pluginConfig[0].args.aggregated.usageAggregationType",
            "p42",
            id="loadaware-aggregation",
        ),
        pytest.param(
            _pc("LoadAwareScheduling", "{usageThreshold: {cpu: 50}}"),
            "profiles[0].pluginConfig[0].args.usageThreshold",
            "",
            id="loadaware-unknown-field",
        ),
        pytest.param(
            _pc("Reservation", "{minCandidateNodesPercentage: 120}"),
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage",
            "120",
            id="reservation-percentage",
        ),
        pytest.param(
            _pc("Reservation", "{preAllocationConfig: {enableClusterMod: true}}"),
            "profiles[0].pluginConfig[0].args.preAllocationConfig.enableClusterMod",
            "",
            id="reservation-unknown-nested-field",
        ),
        pytest.param(
            _pc("ElasticQuota", "{revokePodInterval: 0s}"),
            "profiles[0].pluginConfig[0].args.revokePodInterval",
            "0s",
            id="quota-revoke-interval",
        ),
        pytest.param(
            _pc("ElasticQuota", "{delayEvictTime: soon}"),
            "profiles[0].pluginConfig[0].args.delayEvictTime",
            "soon",
            id="quota-delay-not-a-duration",
        ),
        pytest.param(
            _pc("DeviceShare", "{scoringStrategy: {type: Random}}"),
            "profiles[0].pluginConfig[0].args.scoringStrategy.type",
            "Random",
            id="deviceshare-strategy",
        ),
        pytest.param(
            _pc("NodeNUMAResource", "{defaultCPUBindPolicy: Anything}"),
            "profiles[0].pluginConfig[0].args.defaultCPUBindPolicy",
            "Anything",
            id="numa-bind-policy",
        ),
        pytest.param(
            _pc("Coscheduling", "{defaultTimeout: forever}"),
            "profiles[0].pluginConfig[0].args.defaultTimeout",
            "forever",
            id="coscheduling-timeout",
        ),
        pytest.param(
            _pc("SchedulingHint", "{maxHintNodes: 0}"),
            "profiles[0].pluginConfig[0].args.maxHintNodes",
            "0",
            id="hint-max-nodes",
        ),
        pytest.param(
            _pc("LoadAwareScheduling", "{kind: ReservationArgs}"),
            "profiles[0].pluginConfig[0].args.kind",
            "ReservationArgs",
            id="args-kind",
        ),
        pytest.param(
            _pc("Nonexistent", "{}"),
            "profiles[0].pluginConfig[0].name",
            "Nonexistent",
            id="pluginconfig-unknown-plugin",
        ),
        pytest.param(
            doc("      filter:\n        enabled:\n          - name: NodeLoadFilter\n"),
            "profiles[0].plugins.filter.enabled[0].name",
            "NodeLoadFilter",
            id="unknown-plugin",
        ),
        pytest.param(
            doc("      score:\n        enabled:\n          - name: NodeName\n"),
            "profiles[0].plugins.score.enabled[0].name",
            "NodeName",
            id="plugin-without-that-point",
        ),
        pytest.param(
            doc("      score:\n        enabled:\n          - {name: NodeAffinity, weight: -1}\n"),
            "profiles[0].plugins.score.enabled[0].weight",
            "-1",
            id="negative-weight",
        ),
        pytest.param(
            doc() + "  - schedulerName: koord-scheduler\n",
            "profiles[1].schedulerName",
            "koord-scheduler",
            id="scheduler-name-twice",
        ),
        pytest.param(
            doc() + "percentageOfNodesToScor: 50\n",
            "percentageOfNodesToScor",
            "",
            id="unknown-top-level-field",
        ),
        pytest.param(
            doc().replace("config.k8s.io/v1", "config.k8s.io/v2"),
            "apiVersion",
            "kubescheduler.config.k8s.io/v2",
            id="api-version",
        ),
        pytest.param(
            doc() + "extenders: [{urlPrefix: 'http://x'}]\n",
            "extenders",
            "",
            id="extenders",
        ),
    ],
)
def test_a_bad_configuration_names_the_field_and_the_value(
    text: str, field: str, value: str
) -> None:
    with pytest.raises(SchedulerConfigError) as caught:
        load_configuration(text)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}:")
    assert value in str(caught.value)


def test_pluginconfig_twice_is_refused() -> None:
    text = doc(plugin_config="    - name: SchedulingHint\n    - name: SchedulingHint\n")
    with pytest.raises(SchedulerConfigError, match=r"profiles\[0\]\.pluginConfig\[1\]\.name"):
        load_configuration(text)


def test_bad_yaml_is_refused() -> None:
    with pytest.raises(SchedulerConfigError, match="invalid YAML"):
        load_configuration("profiles: [")


# --- feature gates ------------------------------------------------------------------------------


def test_feature_gates_have_v18s_defaults() -> None:
    gates = parse_feature_gates("")
    assert gates.device_plugin_adaption is False
    assert gates.enabled("PodDisruptionBudget") is True
    assert dict(gates.values) == dict(DEFAULTS)


def test_device_plugin_adaption_reaches_the_profile_and_deviceshare() -> None:
    config = load_configuration(CHART, feature_gates="DevicePluginAdaption=true, ResizePod=false")
    profile = only(config)
    assert profile.feature_gates.device_plugin_adaption is True
    plugin = profile.plugins["DeviceShare"]
    assert isinstance(plugin, DeviceShare)
    assert plugin.args.device_plugin_adaption is True
    off = only(load_configuration(CHART)).plugins["DeviceShare"]
    assert isinstance(off, DeviceShare)
    assert off.args.device_plugin_adaption is False


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("DevicePluginAdaptation=true", "DevicePluginAdaptation"),
        ("DevicePluginAdaption=yes", "'yes'"),
        ("DevicePluginAdaption", "DevicePluginAdaption"),
    ],
)
def test_a_bad_feature_gate_is_refused(text: str, needle: str) -> None:
    with pytest.raises(SchedulerConfigError) as caught:
        load_configuration(CHART, feature_gates=text)
    assert caught.value.field == FEATURE_GATES_KEY
    assert needle in str(caught.value)


# --- the loop follows the ConfigMap -------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(clock=Clock()) as opened:
        yield opened


def _config_map(store: Store, data: dict[str, str]) -> None:
    kind = store.registry.for_type(ConfigMap)
    try:
        found = store.get(kind, CONFIG_NAME, CONFIG_NAMESPACE)
    except NotFound:
        meta = ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE)
        store.create(ConfigMap(metadata=meta, data=data))
    else:
        assert isinstance(found, ConfigMap)
        store.update(msgspec.structs.replace(found, data=data))


def _threshold_config(cpu: int) -> str:
    return _pc("LoadAwareScheduling", f"{{usageThresholds: {{cpu: {cpu}}}}}")


def _busy_cluster(store: Store) -> None:
    """One 32-core node at 50 % cpu (a fresh NodeMetric)."""
    store.create(node("n1"))
    store.create(metric("n1", node_usage={"cpu": 16_000, "memory": 8 * GIB}, updated_at=NOW))


def _try(store: Store, loop: SchedulerLoop, name: str) -> str:
    store.create(pod(name, requests={"cpu": 1000}, limits={"cpu": 1000}, node_name=""))
    loop.reconcile(LoopContext(store=store, now=lambda: NOW))
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found.spec.node_name


def _events(store: Store) -> list[Event]:
    return [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]


def test_the_loop_takes_a_new_configmap_and_keeps_the_last_good_one(store: Store) -> None:
    loop = SchedulerLoop()
    _busy_cluster(store)
    _config_map(store, {CONFIG_KEY: _threshold_config(40)})
    assert _try(store, loop, "a") == ""  # 50 % + 1 core > 40 %
    _config_map(store, {CONFIG_KEY: _threshold_config(80)})
    assert _try(store, loop, "b") == "n1"
    _config_map(store, {CONFIG_KEY: _threshold_config(180)})
    assert _try(store, loop, "c") == "n1"  # refused: 80 % stays
    refused = [e for e in _events(store) if e.reason == INVALID_CONFIGURATION]
    assert len(refused) == 1
    assert refused[0].involved_object.name == CONFIG_NAME
    assert "profiles[0].pluginConfig[0].args.usageThresholds.cpu" in refused[0].message
    assert "180" in refused[0].message


def test_deleting_the_configmap_brings_back_the_shipped_profile(store: Store) -> None:
    loop = SchedulerLoop()
    _busy_cluster(store)
    _config_map(store, {CONFIG_KEY: _threshold_config(40)})
    assert _try(store, loop, "a") == ""
    store.delete(store.registry.for_type(ConfigMap), CONFIG_NAME, CONFIG_NAMESPACE)
    # The chart's 65 %: 16 + 0.85 cores of 32 is 53 %.
    assert _try(store, loop, "b") == "n1"


def test_a_configmap_with_only_feature_gates_sets_them(store: Store) -> None:
    loop = SchedulerLoop()
    _config_map(store, {FEATURE_GATES_KEY: "DevicePluginAdaption=true"})
    loop.reconcile(LoopContext(store=store, now=lambda: NOW))
    assert all(p.feature_gates.device_plugin_adaption for p in loop.profiles)
    _config_map(store, {FEATURE_GATES_KEY: "NoSuchGate=true"})
    loop.reconcile(LoopContext(store=store, now=lambda: NOW))
    assert all(p.feature_gates.device_plugin_adaption for p in loop.profiles)
    assert [e.reason for e in _events(store)] == [INVALID_CONFIGURATION]


def test_a_profile_serves_only_the_pods_naming_it(store: Store) -> None:
    """A second profile with the load filter at 10 %: a pod naming it stays pending on the
    busy node, a pod naming koord-scheduler is placed."""
    text = doc() + (
        "  - schedulerName: strict\n"
        "    pluginConfig:\n"
        "    - name: LoadAwareScheduling\n"
        "      args: {usageThresholds: {cpu: 10}}\n"
    )
    _config_map(store, {CONFIG_KEY: text})
    _busy_cluster(store)
    loop = SchedulerLoop()
    strict = pod("strict-pod", requests={"cpu": 1000}, node_name="")
    store.create(
        msgspec.structs.replace(
            strict, spec=msgspec.structs.replace(strict.spec, scheduler_name="strict")
        )
    )
    assert _try(store, loop, "koord-pod") == "n1"
    found = store.get(store.registry.for_type(Pod), "strict-pod", "default")
    assert isinstance(found, Pod)
    assert found.spec.node_name == ""


def test_given_profiles_the_loop_ignores_the_configmap(store: Store) -> None:
    loop = SchedulerLoop(list(default_configuration().profiles))
    _busy_cluster(store)
    _config_map(store, {CONFIG_KEY: _threshold_config(10)})
    assert _try(store, loop, "a") == "n1"


def test_the_document_round_trips_through_the_configmap_text() -> None:
    """What ``simulate`` stores for a KubeSchedulerConfiguration document loads back the same."""
    raw = codec.load_yaml_documents(CHART)[0]
    stored = config_map(raw)
    again = load_configuration(stored.data[CONFIG_KEY])
    assert again.args.keys() == load_configuration(CHART).args.keys()
    with pytest.raises(SchedulerConfigError, match=r"profiles\[0\]\.pluginConfig\[1\]"):
        config_map(
            {
                **raw,
                "profiles": [
                    {
                        **raw["profiles"][0],
                        "pluginConfig": [
                            raw["profiles"][0]["pluginConfig"][0],
                            {
                                "name": "LoadAwareScheduling",
                                "args": {"usageThresholds": {"cpu": 500}},
                            },
                        ],
                    }
                ],
            }
        )


def test_the_readmes_configmap_example_is_a_valid_configuration(repo_root: Path) -> None:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    blocks = [
        b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL) if CONFIG_NAME in b
    ]
    assert len(blocks) == 1
    found = codec.decode_object(codec.load_yaml_documents(blocks[0])[0])
    assert isinstance(found, ConfigMap)
    assert (found.metadata.namespace, found.metadata.name) == (CONFIG_NAMESPACE, CONFIG_NAME)
    config = load_configuration(found.data[CONFIG_KEY], feature_gates=found.data[FEATURE_GATES_KEY])
    assert config.feature_gates.device_plugin_adaption is True
    loadaware = codec.to_builtins(config.args["koord-scheduler"]["LoadAwareScheduling"])
    assert loadaware["usageThresholds"] == {"cpu": 75, "memory": 85}


def test_a_bad_configuration_document_in_a_scenario_names_its_place() -> None:
    """``koordpy simulate`` refuses a scenario whose KubeSchedulerConfiguration is bad, naming
    the document and the field, before anything runs."""
    scenario = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n" + _pc(
        "Reservation", "{gcIntervalSeconds: 0}"
    )
    with pytest.raises(DecodeError) as caught:
        scenario_objects(scenario, source="scenario.yaml")
    text = str(caught.value)
    assert "scenario.yaml: document 1" in text
    assert "profiles[0].pluginConfig[0].args.gcIntervalSeconds: 0 must be positive" in text
