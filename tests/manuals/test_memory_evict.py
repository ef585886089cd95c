"""Koordinator v1.8 user manual "Memory Resource Eviction Strategy" (``memory-evict``).

Source: koordinator-sh/website ``versioned_docs/version-v1.8/user-manuals/memory-evict.md``. Its
``slo-controller-config`` ConfigMaps (usage; allocated, and the allocated step that zeroes the
batch memory account) are applied unchanged (their long comments left out) with the page's
``be-pod-demo``; each renders the NodeSLO the page relies on, and the agent's eviction strategy,
run with the page's feature gates under that NodeSLO, evicts the way the page shows.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from agent.qos.batch_resources import BatchResources
from agent.qos.evictions import Evictions
from apis import constants as k
from apis.core import Pod
from apis.slo import COLOCATION_EXTENSION
from tests.agent.qos_fixtures_evict import GIB, FakeUsage, make_node, make_pod, snapshot
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.replay import Outcome, node, replay

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

ALLOCATED_THRESHOLD = """\
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


def _allocated(batch_memory_percent: int) -> str:
    return (
        f"""
# ConfigMap slo-controller-config example.
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  # Provide batch account
  colocation-config: |
   {{
      "enable": true,
      "batchCPUThresholdPercent": 100,
      "batchMemoryThresholdPercent": {batch_memory_percent}
    }}
"""
        + ALLOCATED_THRESHOLD
    )


#: What Koordinator's chart installs.
KOORD_BATCH = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: koord-batch
value: 5000
"""

MEMORY = 64 * GIB
NODE = node(
    "node-1",
    cpu="16",
    memory="64Gi",
    extra={"kubernetes.io/batch-cpu": "16k", "kubernetes.io/batch-memory": "32Gi"},
)


def _cluster(configmap: str) -> Outcome:
    out = replay(configmap, KOORD_BATCH, NODE, BE_POD_DEMO)
    assert list(out.events("SLOCfgUnmarshalFailed")) == []
    assert list(out.events("SLOCfgInvalid")) == []
    pod = out.get("Pod", "be-pod-demo")
    assert isinstance(pod, Pod)
    assert (pod.status.phase, pod.spec.node_name) == ("Running", "node-1")
    return out


def _demo(out: Outcome) -> Pod:
    """The demo pod as the node sees it (priority from its PriorityClass, as the API server's
    Priority admission sets it)."""
    pod = out.get("Pod", "be-pod-demo")
    assert isinstance(pod, Pod)
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, priority=5000))


def test_usage_configmap_evicts_the_demo_pod_over_70_percent_memory(shared_dir: Path) -> None:
    out = _cluster(USAGE)
    spec = slo_spec(out, "node-1")
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None
    assert (threshold.enable, threshold.memory_evict_threshold_percent) == (True, 70)
    assert valid_nodeslos(shared_dir, out) == 1
    pod = _demo(out)
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
    first = _cluster(_allocated(100))
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
        plain = make_node(cpu=16_000, memory=MEMORY)
        resources = BatchResources().plan(snapshot(plain, batch, usage, qos)).node_resources
        assert resources is not None
        allocatable = {
            k.RESOURCE_CPU: 16_000,
            k.RESOURCE_MEMORY: MEMORY,
            k.RESOURCE_BATCH_MEMORY: resources.get_amount(k.RESOURCE_BATCH_MEMORY),
        }
        node_obj = make_node(cpu=16_000, memory=MEMORY, allocatable=allocatable)
        outcome = Evictions().plan(snapshot(node_obj, batch, usage, qos))
        return sorted(f"{e.pod.metadata.name}:{e.reason}" for e in outcome.evictions)

    assert evicted_under(first) == []
    zeroed = _cluster(_allocated(0))
    slo = slo_spec(zeroed, "node-1")
    assert slo.extensions is not None
    assert slo.extensions[COLOCATION_EXTENSION]["batchMemoryThresholdPercent"] == 0
    assert slo.resource_used_threshold_with_be == threshold
    assert evicted_under(zeroed) == [f"batch-{i}:MemoryAllocatableEvict" for i in range(3)]
