"""Koordinator user manual "SLO Configuration" (``slo-config``), and the ConfigMap parts of the
"CPU Burst" (``cpu-burst``) and "CPU QoS" (``cpu-qos``) manuals.

Sources: koordinator-sh/website ``docs/user-manuals/slo-config.md`` (no v1.8 copy; its template
refers to v1.2 and is still what v1.8 reads), ``docs/user-manuals/cpu-burst.md`` and
``docs/user-manuals/cpu-qos.md``. The ConfigMaps are applied unchanged (the template's long
comments left out); each test asserts the NodeSLO the page shows or implies.

The template's ``system-config`` is not valid JSON (a comma is missing after
``clusterStrategy``): koord-manager refuses that key with an Event on the ConfigMap and keeps
its defaults, and so does koordpy, while every other key renders.
"""

from __future__ import annotations

from pathlib import Path

from apis.core import Event
from apis.slo import COLOCATION_EXTENSION, CPUBurstStrategy, ResourceThresholdStrategy
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.replay import node, replay

TEMPLATE = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  colocation-config: |
    {
      "enable": false,
      "metricAggregateDurationSeconds": 300,
      "metricReportIntervalSeconds": 60,
      "metricAggregatePolicy": {
        "durations": [
          "5m",
          "10m",
          "15m"
        ]
      },
      "cpuReclaimThresholdPercent": 60,
      "memoryReclaimThresholdPercent": 65,
      "memoryCalculatePolicy": "usage",
      "degradeTimeMinutes": 15,
      "updateTimeThresholdSeconds": 300,
      "resourceDiffThreshold": 0.1,
      "nodeConfigs": [
        {
          "name": "anolis",
          "nodeSelector": {
            "matchLabels": {
              "kubernetes.io/kernel": "anolis"
            }
          },
          "updateTimeThresholdSeconds": 360,
          "resourceDiffThreshold": 0.2
        }
      ]
    }
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": false,
        "cpuSuppressThresholdPercent": 65,
        "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 70,
        "memoryEvictLowerPercent": 65,
        "cpuEvictBESatisfactionUpperPercent": 90,
        "cpuEvictBESatisfactionLowerPercent": 60,
        "cpuEvictBEUsageThresholdPercent": 90
      },
      "nodeStrategies": [
        {
          "name": "anolis",
          "nodeSelector": {
            "matchLabels": {
              "kubernetes.io/kernel": "anolis"
            }
          },
          "cpuEvictBEUsageThresholdPercent": 80
        }
      ]
    }
  resource-qos-config: |
    {
      "clusterStrategy": {
        "lsrClass": {
          "cpuQOS": {
            "enable": false,
            "groupIdentity": 2
          },
          "memoryQOS": {
            "enable": false,
            "minLimitPercent": 0,
            "lowLimitPercent": 0,
            "throttlingPercent": 0,
            "wmarkRatio": 95,
            "wmarkScalePermill": 20,
            "wmarkMinAdj": -25,
            "priorityEnable": 0,
            "priority": 0,
            "oomKillGroup": 0
          },
          "resctrlQOS": {
            "enable": false,
            "catRangeStartPercent": 0,
            "catRangeEndPercent": 100,
            "mbaPercent": 100
          }
        },
        "lsClass": {
          "cpuQOS": {
            "enable": false,
            "groupIdentity": 2
          },
          "memoryQOS": {
            "enable": false,
            "minLimitPercent": 0,
            "lowLimitPercent": 0,
            "throttlingPercent": 0,
            "wmarkRatio": 95,
            "wmarkScalePermill": 20,
            "wmarkMinAdj": -25,
            "priorityEnable": 0,
            "priority": 0,
            "oomKillGroup": 0
          },
          "resctrlQOS": {
            "enable": false,
            "catRangeStartPercent": 0,
            "catRangeEndPercent": 100,
            "mbaPercent": 100
          }
        },
        "beClass": {
          "cpuQOS": {
            "enable": false,
            "groupIdentity": -1
          },
          "memoryQOS": {
            "enable": false,
            "minLimitPercent": 0,
            "lowLimitPercent": 0,
            "throttlingPercent": 0,
            "wmarkRatio": 95,
            "wmarkScalePermill": 20,
            "wmarkMinAdj": 50,
            "priorityEnable": 0,
            "priority": 0,
            "oomKillGroup": 0
          },
          "resctrlQOS": {
            "enable": false,
            "catRangeStartPercent": 0,
            "catRangeEndPercent": 30,
            "mbaPercent": 100
          }
        }
      },
      "nodeStrategies": [
        {
          "name": "anolis",
          "nodeSelector": {
            "matchLabels": {
              "kubernetes.io/kernel": "anolis"
            }
          },
          "beClass": {
            "memoryQOS": {
              "wmarkRatio": 90
            }
          }
        }
      ]
    }
  cpu-burst-config: |
    {
      "clusterStrategy": {
        "policy": "none",
        "cpuBurstPercent": 1000,
        "cfsQuotaBurstPercent": 300,
        "cfsQuotaBurstPeriodSeconds": -1,
        "sharePoolThresholdPercent": 50
      },
      "nodeStrategies": [
        {
          "name": "anolis",
          "nodeSelector": {
            "matchLabels": {
              "kubernetes.io/kernel": "anolis"
            }
          },
          "policy": "cfsQuotaBurstOnly",
          "cfsQuotaBurstPercent": 400
        }
      ]
    }
  system-config: |-
    {
      "clusterStrategy": {
        "minFreeKbytesFactor": 100,
        "watermarkScaleFactor": 150,
        "memcgReapBackGround": 0
      }
      "nodeStrategies": [
        {
          "name": "anolis",
          "nodeSelector": {
            "matchLabels": {
              "kubernetes.io/kernel": "anolis"
            }
          },
          "minFreeKbytesFactor": 100,
          "watermarkScaleFactor": 150
        }
      ]
    }
"""

#: Quick Start, step 1: the ConfigMap as the Helm chart installs it.
INSTALLED = """
apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    meta.helm.sh/release-name: koordinator
    meta.helm.sh/release-namespace: default
  labels:
    app.kubernetes.io/managed-by: Helm
  name: slo-controller-config
  namespace: koordinator-system
data:
  colocation-config: |
    {
      "enable": false,
      "metricAggregateDurationSeconds": 300,
      "metricReportIntervalSeconds": 60,
      "cpuReclaimThresholdPercent": 60,
      "memoryReclaimThresholdPercent": 65,
      "memoryCalculatePolicy": "usage",
      "degradeTimeMinutes": 15,
      "updateTimeThresholdSeconds": 300,
      "resourceDiffThreshold": 0.1
    }
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": false
      }
    }
"""

#: Quick Start, step 2: ``resource-threshold-config`` edited (the rest as installed).
EDITED = INSTALLED.replace(
    """  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": false
      }
    }
""",
    """  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "cpuSuppressThresholdPercent": 60,
        "cpuSuppressPolicy": "cpuset",
        "memoryEvictThresholdPercent": 60
      }
    }
""",
)

ANOLIS = {"kubernetes.io/kernel": "anolis"}


def test_the_nodeslo_example_is_what_an_enabled_threshold_config_renders() -> None:
    """The page's NodeSLO ``test-node``: ``resourceUsedThresholdWithBE`` parsed from
    ``resource-threshold-config`` with Koordinator's defaults, the other parts present."""
    out = replay(
        """
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  resource-threshold-config: |
    {"clusterStrategy": {"enable": true}}
""",
        node("test-node"),
    )
    wire = out.wire("NodeSLO", "test-node")["spec"]
    threshold = wire["resourceUsedThresholdWithBE"]
    assert {k: threshold[k] for k in ("cpuSuppressPolicy", "cpuSuppressThresholdPercent")} == {
        "cpuSuppressPolicy": "cpuset",
        "cpuSuppressThresholdPercent": 65,
    }
    assert (threshold["enable"], threshold["memoryEvictThresholdPercent"]) == (True, 70)
    assert wire["extensions"] == {}
    assert wire["resourceQOSStrategy"] == {}
    assert {"cpuBurstStrategy", "systemStrategy"} <= set(wire)


def test_the_template_renders_cluster_and_node_strategies(shared_dir: Path) -> None:
    out = replay(TEMPLATE, node("plain"), node("anolis-1", labels=ANOLIS))
    assert valid_nodeslos(shared_dir, out) == 2
    plain, anolis = slo_spec(out, "plain"), slo_spec(out, "anolis-1")
    # resource-threshold-config
    cluster = ResourceThresholdStrategy(
        enable=False,
        cpu_suppress_threshold_percent=65,
        cpu_suppress_policy="cpuset",
        memory_evict_threshold_percent=70,
        memory_evict_lower_percent=65,
        cpu_evict_be_satisfaction_upper_percent=90,
        cpu_evict_be_satisfaction_lower_percent=60,
        cpu_evict_be_usage_threshold_percent=90,
        cpu_evict_policy="evictByRealLimit",
    )
    assert plain.resource_used_threshold_with_be == cluster
    assert anolis.resource_used_threshold_with_be is not None
    assert anolis.resource_used_threshold_with_be.cpu_evict_be_usage_threshold_percent == 80
    assert anolis.resource_used_threshold_with_be.memory_evict_lower_percent == 65
    # resource-qos-config: the anolis nodes lower only the BE wmarkRatio
    assert plain.resource_qos_strategy is not None
    assert anolis.resource_qos_strategy is not None
    plain_be, anolis_be = (
        plain.resource_qos_strategy.be_class,
        anolis.resource_qos_strategy.be_class,
    )
    assert plain_be is not None
    assert anolis_be is not None
    assert plain_be.memory_qos is not None
    assert anolis_be.memory_qos is not None
    assert (plain_be.memory_qos.wmark_ratio, anolis_be.memory_qos.wmark_ratio) == (95, 90)
    assert anolis_be.memory_qos.wmark_min_adj == 50
    assert anolis_be.resctrl_qos is not None
    assert anolis_be.resctrl_qos.cat_range_end_percent == 30
    assert anolis.resource_qos_strategy.ls_class == plain.resource_qos_strategy.ls_class
    # cpu-burst-config
    assert plain.cpu_burst_strategy == CPUBurstStrategy(
        policy="none",
        cpu_burst_percent=1000,
        cfs_quota_burst_percent=300,
        cfs_quota_burst_period_seconds=-1,
        share_pool_threshold_percent=50,
    )
    assert anolis.cpu_burst_strategy is not None
    assert (
        anolis.cpu_burst_strategy.policy,
        anolis.cpu_burst_strategy.cfs_quota_burst_percent,
    ) == (
        "cfsQuotaBurstOnly",
        400,
    )
    # colocation-config reaches the agents: disabled, with the anolis nodes' own thresholds
    assert plain.extensions is not None
    assert anolis.extensions is not None
    plain_co, anolis_co = (
        plain.extensions[COLOCATION_EXTENSION],
        anolis.extensions[COLOCATION_EXTENSION],
    )
    assert plain_co["enable"] is False
    assert plain_co["metricAggregatePolicy"] == {"durations": ["5m0s", "10m0s", "15m0s"]}
    assert (plain_co["updateTimeThresholdSeconds"], plain_co["resourceDiffThreshold"]) == (300, 0.1)
    assert (anolis_co["updateTimeThresholdSeconds"], anolis_co["resourceDiffThreshold"]) == (
        360,
        0.2,
    )
    assert agent_settings(anolis).colocation.resource_diff_threshold == 0.2
    assert agent_settings(plain).colocation.enable is False


def test_the_templates_bad_system_config_is_refused_and_keeps_the_defaults() -> None:
    out = replay(TEMPLATE, node("plain"))
    [event] = out.events("SLOCfgUnmarshalFailed")
    assert isinstance(event, Event)
    assert event.type == "Warning"
    assert (event.involved_object.kind, event.involved_object.name) == (
        "ConfigMap",
        "slo-controller-config",
    )
    assert event.message.startswith("system-config: invalid JSON at line 7 column 3")
    system = slo_spec(out, "plain").system_strategy
    assert system is not None
    assert (system.min_free_kbytes_factor, system.watermark_scale_factor) == (100, 150)
    assert system.memcg_reap_back_ground == 0
    assert list(out.events("SLOCfgInvalid")) == []


def test_quick_start_edit_dispatches_the_nodeslo_it_shows() -> None:
    installed = slo_spec(replay(INSTALLED, node("test-node")), "test-node")
    assert installed.resource_used_threshold_with_be is not None
    assert installed.resource_used_threshold_with_be.enable is False
    out = replay(EDITED, node("test-node"))
    threshold = out.wire("NodeSLO", "test-node")["spec"]["resourceUsedThresholdWithBE"]
    assert {k: v for k, v in threshold.items() if k != "cpuEvictPolicy"} == {
        "cpuSuppressPolicy": "cpuset",
        "cpuSuppressThresholdPercent": 60,
        "enable": True,
        "memoryEvictThresholdPercent": 60,
    }
    qos = agent_settings(slo_spec(out, "test-node"))
    assert (qos.suppress.enable, qos.suppress.threshold_percent) == (True, 60)
    assert qos.evict.memory_threshold_percent == 60
    assert list(out.events()) == []


CPU_BURST = """
apiVersion: v1
data:
  cpu-burst-config: '{"clusterStrategy": {"policy": "auto"}}'
  #cpu-burst-config: '{"clusterStrategy": {"policy": "cpuBurstOnly"}}'
  #cpu-burst-config: '{"clusterStrategy": {"policy": "none"}}'
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
"""

CPU_BURST_ADVANCED = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  cpu-burst-config: |
    {
      "clusterStrategy": {
        "policy": "auto",
        "cpuBurstPercent": 1000,
        "cfsQuotaBurstPercent": 300,
        "sharePoolThresholdPercent": 50,
        "cfsQuotaBurstPeriodSeconds": -1
      }
    }
"""


def test_cpu_burst_config_is_the_nodeslos_cpu_burst_strategy() -> None:
    """cpu-burst manual: ``cpu-burst-config`` becomes the NodeSLO's ``cpuBurstStrategy``, the
    fields it leaves out at Koordinator's defaults; the agent bursts by it."""
    auto = CPUBurstStrategy(
        policy="auto",
        cpu_burst_percent=1000,
        cfs_quota_burst_percent=300,
        cfs_quota_burst_period_seconds=-1,
        share_pool_threshold_percent=50,
    )
    for text in (CPU_BURST, CPU_BURST_ADVANCED):
        out = replay(text, node("node-1"))
        spec = slo_spec(out, "node-1")
        assert spec.cpu_burst_strategy == auto
        burst = agent_settings(spec).burst
        assert (burst.policy, burst.cpu_burst_percent, burst.cfs_quota_burst_percent) == (
            "auto",
            1000,
            300,
        )
        assert list(out.events()) == []


CPU_QOS = """
# Example of the slo-controller-config ConfigMap.
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  # Enable the CPU QoS feature.
  resource-qos-config: |
    {
      "clusterStrategy": {
        "lsClass": {
          "cpuQOS": {
            "enable": true,
            "groupIdentity": 2
          }
        },
        "beClass": {
          "cpuQOS": {
            "enable": true,
            "groupIdentity": -1
          }
        }
      }
    }
"""


def test_cpu_qos_config_is_the_nodeslos_resource_qos_strategy(shared_dir: Path) -> None:
    """cpu-qos manual: ``resource-qos-config`` becomes ``resourceQOSStrategy``: group identity
    2 for LS pods, -1 for BE pods, enabled."""
    out = replay(CPU_QOS, node("node-1"))
    wire = out.wire("NodeSLO", "node-1")["spec"]["resourceQOSStrategy"]
    assert wire == {
        "lsClass": {"cpuQOS": {"enable": True, "groupIdentity": 2}},
        "beClass": {"cpuQOS": {"enable": True, "groupIdentity": -1}},
    }
    assert valid_nodeslos(shared_dir, out) == 1
    assert list(out.events()) == []
