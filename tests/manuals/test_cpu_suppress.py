"""Koordinator user manual "CPU Utilization Threshold Management" (``cpu-suppress``).

Source: koordinator-sh/website ``versioned_docs/version-v1.7/user-manuals/cpu-suppress.md`` (the
page has no v1.8 copy; v1.8 serves the same text). Its "Use CPU Suppress" ConfigMap is applied
unchanged; the "Configurations" excerpt is a Helm template (``namespace: {{ .Values...}}``,
``...`` for the other keys), replayed with the chart's namespace filled in and the ellipsis left
out. Each renders the NodeSLO that turns BE CPU suppress on at the 65 % default, and the agent's
suppress budget under that NodeSLO is 65 % of the node less what LS pods and the system use.
"""

from __future__ import annotations

from pathlib import Path

from agent.qos.cpu_suppress import be_budget
from apis.slo import ResourceThresholdStrategy
from tests.agent.qos_fixtures_evict import FakeUsage, make_node, make_pod, snapshot
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.replay import node, replay

USE_CPU_SUPPRESS = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  # Enable the elastic resource limit feature.
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true
      }
    }
"""

CONFIGURATIONS = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "cpuSuppressThresholdPercent": 65
      }
    }
"""

#: What the NodeSLO holds under either ConfigMap (Koordinator's defaults filled in).
SUPPRESS_AT_65 = ResourceThresholdStrategy(
    enable=True,
    cpu_suppress_threshold_percent=65,
    cpu_suppress_policy="cpuset",
    memory_evict_threshold_percent=70,
    cpu_evict_policy="evictByRealLimit",
)


#: The 32-core node the agent's examples run on.
NODE = node("node-1", cpu="32")


def test_use_cpu_suppress_turns_it_on_at_65_percent(shared_dir: Path) -> None:
    out = replay(USE_CPU_SUPPRESS, NODE)
    spec = slo_spec(out, "node-1")
    assert spec.resource_used_threshold_with_be == SUPPRESS_AT_65
    assert valid_nodeslos(shared_dir, out) == 1
    assert list(out.events()) == []


def test_the_configurations_excerpt_renders_the_same_nodeslo() -> None:
    out = replay(CONFIGURATIONS, node("node-1"), node("node-2"))
    for name in ("node-1", "node-2"):
        assert slo_spec(out, name).resource_used_threshold_with_be == SUPPRESS_AT_65


def test_the_agent_gives_be_pods_what_65_percent_leaves() -> None:
    out = replay(USE_CPU_SUPPRESS, NODE)
    qos = agent_settings(slo_spec(out, "node-1"))
    assert (qos.suppress.enable, qos.suppress.threshold_percent, qos.suppress.policy) == (
        True,
        65,
        "cpuset",
    )
    ls = make_pod("nginx", qos="LS", requests={"cpu": 8_000})
    be = make_pod("stress", qos="BE")
    # 32 cores; the LS pod uses 10, the BE pod 6, the system 2
    usage = FakeUsage(
        node_cpu_milli=18_000, pods_cpu={ls.metadata.uid: 10_000, be.metadata.uid: 6_000}
    )
    node_obj = make_node(cpu=32_000, memory=64 << 30)
    budget = be_budget(snapshot(node_obj, [ls, be], usage, qos))
    assert budget is not None
    assert budget.milli == 32_000 * 65 // 100 - 10_000 - 2_000  # 8800m: 9 CPUs of cpuset
    # LS usage rising to 18 cores leaves BE only 800m
    busy = FakeUsage(
        node_cpu_milli=26_000, pods_cpu={ls.metadata.uid: 18_000, be.metadata.uid: 6_000}
    )
    squeezed = be_budget(snapshot(node_obj, [ls, be], busy, qos))
    assert squeezed is not None
    assert squeezed.milli == 32_000 * 65 // 100 - 18_000 - 2_000
