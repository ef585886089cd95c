"""Koordinator v1.8 user manual "CPU Resource Eviction Strategy" (``cpu-evict``).

Source: koordinator-sh/website ``versioned_docs/version-v1.8/user-manuals/cpu-evict.md``. Its
three ``slo-controller-config`` ConfigMaps (satisfaction, usage, allocated, and the allocated
step that zeroes the batch CPU account) are applied unchanged with the page's ``be-pod-demo``
on a node that offers Batch resources; each renders the NodeSLO the page relies on, and the
agent's eviction strategy, run with the page's feature gates under that NodeSLO, evicts the way
the page shows. The cluster around them is what Koordinator's chart installs (PriorityClass
``koord-batch``) and the labels the page's "Pod" section asks for; the manifests' long
comments are left out.
"""

from __future__ import annotations

from pathlib import Path

from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource
from agent.qos.evictions import Evictions
from apis import constants as k
from apis.slo import COLOCATION_EXTENSION
from tests.agent.qos_builders import FakeView
from tests.agent.qos_fixtures_evict import FakeUsage, make_node, make_pod, snapshot
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.colocation import admitted, batch_node, evicted_on_batch_account, replay_demo
from tests.manuals.replay import Outcome

SATISFACTION = """
# ConfigMap slo-controller-config example
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  # Provide batch account
  colocation-config: |
   {
      "enable": true,
      "batchCPUThresholdPercent": 100,
      "batchMemoryThresholdPercent": 100
    }
  # Enable eviction feature based on CPU resource satisfaction
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "cpuEvictBESatisfactionLowerPercent": 60,
        "cpuEvictBESatisfactionUpperPercent": 80,
        "cpuEvictBEUsageThresholdPercent": 90,
        "CPUEvictTimeWindowSeconds": 60
      }
    }
"""

USAGE = """
# ConfigMap slo-controller-config example.
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
 # Provide batch account
  colocation-config: |
   {
      "enable": true,
      "batchCPUThresholdPercent": 100,
      "batchMemoryThresholdPercent": 100
    }
  # Enable eviction feature based on CPU usage
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "cpuEvictThresholdPercent": 60,
        "cpuEvictLowerPercent": 40,
        "evictEnabledPriorityThreshold": 5999
      }
    }
"""

ALLOCATED = """
# ConfigMap slo-controller-config example.
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  # Provide batch account
  colocation-config: |
   {
      "enable": true,
      "batchCPUThresholdPercent": 100,
      "batchMemoryThresholdPercent": 100
    }
  # Enable eviction feature based on CPU allocated
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "cpuAllocatableEvictThresholdPercent": 110,
        "cpuAllocatableEvictLowerPercent": 100,
        "allocatableEvictPriorityThreshold": 5999
      }
    }
"""

# Step 4 of "Allocated": the batch CPU account set to zero. The page patches the ConfigMap
# (`kubectl patch`), so resource-threshold-config "keeps the same": the patched ConfigMap.
ALLOCATED_ZERO = ALLOCATED.replace(
    '"batchCPUThresholdPercent": 100', '"batchCPUThresholdPercent": 0'
)

BE_POD_DEMO = """
apiVersion: v1
kind: Pod
metadata:
  name: be-pod-demo
  labels:
    koordinator.sh/qosClass: 'BE' # Specify Pod QoS level as BE
    koordinator.sh/eviction-enabled: "true"
spec:
  containers:
    - args:
        - '-c'
        - '4'
        - '--vm'
        - '1'
      command:
        - stress
      image: polinux/stress
      imagePullPolicy: Always
      name: stress
      resources:
        limits:
          kubernetes.io/batch-cpu: 4k
          kubernetes.io/batch-memory: 4Gi
        requests:
          kubernetes.io/batch-cpu: 4k
          kubernetes.io/batch-memory: 4Gi
  restartPolicy: Always
  schedulerName: default-scheduler
  # priorityClassName is required when ColocationProfile feature is enabled (default)
  priorityClassName: koord-batch
"""

CORES = 16
#: The BE QoS cgroup (cgroupfs driver, as the agent fixtures have it).
BE_DIR = "kubepods/besteffort"
NODE = batch_node(cpu=str(CORES))


def _cluster(configmap: str) -> Outcome:
    return replay_demo(configmap, NODE, BE_POD_DEMO)


def test_satisfaction_configmap_renders_the_be_satisfaction_thresholds(shared_dir: Path) -> None:
    out = _cluster(SATISFACTION)
    spec = slo_spec(out, "node-1")
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert threshold.enable is True
    assert threshold.cpu_evict_be_satisfaction_lower_percent == 60
    assert threshold.cpu_evict_be_satisfaction_upper_percent == 80
    assert threshold.cpu_evict_be_usage_threshold_percent == 90
    # written "CPUEvictTimeWindowSeconds" on the page: Go matches the field regardless of case
    assert threshold.cpu_evict_time_window_seconds == 60
    assert spec.extensions is not None
    colocation = spec.extensions[COLOCATION_EXTENSION]
    assert colocation["enable"] is True
    assert colocation["batchCPUThresholdPercent"] == 100
    qos = agent_settings(spec, "BECPUEvict")
    evict = qos.evict
    assert (evict.cpu_be_satisfaction_lower_percent, evict.cpu_be_satisfaction_upper_percent) == (
        60,
        80,
    )
    assert evict.cpu_time_window_seconds == 60
    assert valid_nodeslos(shared_dir, out) == 1
    # `stress --cpu 10` squeezes the BE tier to 2 CPUs (suppress), where the demo pod (4 batch
    # cores requested) keeps them 95 % busy: satisfaction 2000 / 4000 = 50 % < 60 %, usage
    # 95 % >= 90 %: release 4000 x 80 % - 2000 = 1200 of batch-cpu requests, the demo pod's 4000
    pod = admitted(out)
    usage = FakeUsage(pods_cpu={pod.metadata.uid: 1_900}, cgroups_cpu={BE_DIR: 1_900.0})
    squeezed = FakeView({(BE_DIR, Resource.CPUSET_CPUS): CpuSet.parse("0-1")})
    node_obj = make_node(cpu=CORES * 1000, memory=64 << 30)
    outcome = Evictions().plan(snapshot(node_obj, [pod], usage, qos, current=squeezed, cpus=CORES))
    assert [(e.pod.metadata.name, e.reason) for e in outcome.evictions] == [
        ("be-pod-demo", "BECPUEvict")
    ]
    # given 3 CPUs back (75 % satisfied), nothing is evicted
    relieved = FakeView({(BE_DIR, Resource.CPUSET_CPUS): CpuSet.parse("0-2")})
    usage = FakeUsage(pods_cpu={pod.metadata.uid: 2_900}, cgroups_cpu={BE_DIR: 2_900.0})
    calm = Evictions().plan(snapshot(node_obj, [pod], usage, qos, current=relieved, cpus=CORES))
    assert calm.evictions == ()


def test_usage_configmap_evicts_the_demo_pod_over_60_percent_node_cpu() -> None:
    out = _cluster(USAGE)
    spec = slo_spec(out, "node-1")
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert (threshold.cpu_evict_threshold_percent, threshold.cpu_evict_lower_percent) == (60, 40)
    assert threshold.evict_enabled_priority_threshold == 5999
    pod = admitted(out)
    prod = make_pod("online", qos="LS", priority=9000, evictable=True)
    qos = agent_settings(spec, "CPUEvict")
    node_obj = make_node(cpu=CORES * 1000, memory=64 << 30)
    # `stress --cpu 10` on the node: 12 of 16 cores busy (75 %), the demo pod using 4 of them
    usage = FakeUsage(
        node_cpu_milli=12_000, pods_cpu={pod.metadata.uid: 4_000, prod.metadata.uid: 6_000}
    )
    outcome = Evictions().plan(snapshot(node_obj, [pod, prod], usage, qos))
    assert [(e.pod.metadata.name, e.reason) for e in outcome.evictions] == [
        ("be-pod-demo", "CPUEvict")
    ]
    # at 55 % (below the 60 % threshold) nothing is evicted
    calm = FakeUsage(node_cpu_milli=8_800, pods_cpu={pod.metadata.uid: 4_000})
    assert Evictions().plan(snapshot(node_obj, [pod], calm, qos)).evictions == ()


def test_allocated_configmap_then_a_zero_batch_cpu_account_evicts_the_demo_pod() -> None:
    out = _cluster(ALLOCATED)
    spec = slo_spec(out, "node-1")
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert threshold.cpu_allocatable_evict_threshold_percent == 110
    assert threshold.cpu_allocatable_evict_lower_percent == 100
    assert threshold.allocatable_evict_priority_threshold == 5999
    pod = admitted(out)
    usage = FakeUsage(
        node_cpu_milli=2_000,
        node_memory_bytes=8 << 30,
        pods_cpu={pod.metadata.uid: 1_000},
        pods_memory={pod.metadata.uid: 1 << 30},
    )

    def round_under(configmap_spec_out: Outcome) -> list[str]:
        qos = agent_settings(slo_spec(configmap_spec_out, "node-1"), "CPUAllocatableEvict")
        return evicted_on_batch_account(
            qos, [pod], usage, cpu=CORES * 1000, memory=64 << 30, resource=k.RESOURCE_BATCH_CPU
        )

    assert round_under(out) == []  # 4 batch cores requested of plenty
    zeroed = _cluster(ALLOCATED_ZERO)
    slo = slo_spec(zeroed, "node-1")
    assert slo.extensions is not None
    assert slo.extensions[COLOCATION_EXTENSION]["batchCPUThresholdPercent"] == 0
    assert slo.resource_used_threshold_with_be == threshold  # kept the same
    assert round_under(zeroed) == ["be-pod-demo:CPUAllocatableEvict"]
