"""Koordinator v1.8 user manual "Memory Resource Eviction Strategy" (``memory-evict``).

Source: koordinator-sh/website ``versioned_docs/version-v1.8/user-manuals/memory-evict.md``. Its
``slo-controller-config`` ConfigMaps (usage; allocated, and the allocated step that zeroes the
batch memory account) are applied unchanged (their long comments left out) with the page's
``be-pod-demo``; each renders the NodeSLO the page relies on, and the agent's eviction strategy,
run with the page's feature gates under that NodeSLO, evicts the way the page shows.
"""

from __future__ import annotations

from pathlib import Path

from agent.qos.evictions import Evictions
from apis import constants as k
from apis.slo import COLOCATION_EXTENSION
from tests.agent.qos_fixtures_evict import GIB, FakeUsage, make_node, make_pod, snapshot
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.colocation import admitted, batch_node, evicted_on_batch_account, replay_demo
from tests.manuals.replay import Outcome

USAGE = """
# ConfigMap slo-controller-config example.
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  # Enable eviction feature based on memory usage
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "memoryEvictThresholdPercent": 70
      }
    }
"""

BE_POD_DEMO = """
apiVersion: v1
kind: Pod
metadata:
  name: be-pod-demo
  labels:
    koordinator.sh/qosClass: 'BE' # Specify Pod QoS level as BE.
spec:
  containers:
    - args:
        - '-c'
        - '1'
        - '--vm'
        - '1'
      command:
        - stress
      image: polinux/stress
      imagePullPolicy: Always
      name: stress
  restartPolicy: Always
  schedulerName: default-scheduler
  # priorityClassName is required when ColocationProfile feature is enabled (default)
  priorityClassName: koord-batch
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
  # Enable eviction feature based on memory allocated
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true,
        "memoryAllocatableEvictThresholdPercent": 110,
        "memoryAllocatableEvictLowerPercent": 100,
        "allocatableEvictPriorityThreshold": 5999
      }
    }
"""

#: The page's next step: the batch memory account patched to zero, the thresholds kept.
ALLOCATED_ZERO = ALLOCATED.replace(
    '"batchMemoryThresholdPercent": 100', '"batchMemoryThresholdPercent": 0'
)

MEMORY = 64 * GIB
NODE = batch_node()


def _cluster(configmap: str) -> Outcome:
    return replay_demo(configmap, NODE, BE_POD_DEMO)


def test_usage_configmap_evicts_the_demo_pod_over_70_percent_memory(shared_dir: Path) -> None:
    out = _cluster(USAGE)
    spec = slo_spec(out, "node-1")
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert (threshold.enable, threshold.memory_evict_threshold_percent) == (True, 70)
    assert valid_nodeslos(shared_dir, out) == 1
    pod = admitted(out)
    qos = agent_settings(spec, "BEMemoryEvict")
    assert qos.evict.memory_lower == 68  # the default: threshold - 2
    node_obj = make_node(cpu=16_000, memory=MEMORY)
    # `stress --vm-bytes 10G` and the pod: 50 of 64 GiB used (78 %)
    usage = FakeUsage(node_memory_bytes=50 * GIB, pods_memory={pod.metadata.uid: 12 * GIB})
    outcome = Evictions().plan(snapshot(node_obj, [pod], usage, qos))
    assert [(e.pod.metadata.name, e.reason) for e in outcome.evictions] == [
        ("be-pod-demo", "BEMemoryEvict")
    ]
    calm = FakeUsage(node_memory_bytes=40 * GIB, pods_memory={pod.metadata.uid: 12 * GIB})
    assert Evictions().plan(snapshot(node_obj, [pod], calm, qos)).evictions == ()


def test_allocated_configmap_then_a_zero_batch_memory_account_evicts_batch_pods() -> None:
    first = _cluster(ALLOCATED)
    spec = slo_spec(first, "node-1")
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert threshold.memory_allocatable_evict_threshold_percent == 110
    assert threshold.memory_allocatable_evict_lower_percent == 100
    assert threshold.allocatable_evict_priority_threshold == 5999
    # "several BE pods": batch pods asking for batch memory, allowed to be evicted
    batch = [
        make_pod(
            f"batch-{i}",
            qos="BE",
            priority=5000,
            requests={k.RESOURCE_BATCH_MEMORY: 4 * GIB},
            evictable=True,
        )
        for i in range(3)
    ]
    usage = FakeUsage(
        node_cpu_milli=2_000,
        node_memory_bytes=16 * GIB,
        pods_memory={p.metadata.uid: 2 * GIB for p in batch},
    )

    def evicted_under(out: Outcome) -> list[str]:
        qos = agent_settings(slo_spec(out, "node-1"), "MemoryAllocatableEvict")
        return evicted_on_batch_account(
            qos, batch, usage, cpu=16_000, memory=MEMORY, resource=k.RESOURCE_BATCH_MEMORY
        )

    assert evicted_under(first) == []
    zeroed = _cluster(ALLOCATED_ZERO)
    slo = slo_spec(zeroed, "node-1")
    assert slo.extensions is not None
    assert slo.extensions[COLOCATION_EXTENSION]["batchMemoryThresholdPercent"] == 0
    assert slo.resource_used_threshold_with_be == threshold
    assert evicted_under(zeroed) == [f"batch-{i}:MemoryAllocatableEvict" for i in range(3)]
