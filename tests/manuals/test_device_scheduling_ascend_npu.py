"""Koordinator v1.8 user manual "Device Scheduling - Huawei Ascend NPU"
(``versioned_docs/version-v1.8/user-manuals/device-scheduling-ascend-npu.md``).

The page's ``node-1`` has eight Ascend 910B3 NPUs in two HCCS partitions (cards 0-3 and
4-7) that the scheduler must honour (``gpu-partition-policy: Honor``), and koord-scheduler runs
with ``DevicePluginAdaption=true``: binding writes ``huawei.com/npu-core`` (the cards, or
``<card>-<template>`` for a vNPU) and ``predicate-time`` for Ascend's device plugin.

Where the page's examples cannot be applied as printed:

- its ``scheduling.koordinator.sh/gpu-partitions`` value is not JSON (comments, the key
  ``"4"`` twice, ``allocationScore`` as a string); as printed it is ignored and the Node's
  partition policy decides (as in v1.8), and the other replays give the Device the table it
  describes, as JSON;
- that table lists only 4-card partitions, and under ``Honor`` v1.8 refuses a request for a
  number of cards the table has no partitions of: the page's one-card full-card pod is refused
  there (``node(s) Unsupported number of GPU requests``); four cards take a partition, and a
  table that also lists single cards places the one-card pod;
- its virtual templates are printed flat; the templates ConfigMap
  (``koordinator-system/gpu-shared-resource-templates``, ``data.yaml``) nests them under
  ``<vendor>-<model>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from apis import constants as k
from tests.manuals.devices import (
    EPOCH_NS,
    allocation,
    check_devices,
    pod_variant,
    replay_adapted,
    unschedulable,
)

UUID0 = "GPU-fd971b33-4891-fd2e-ed42-ce6adf324615"


#: The page's table, as JSON: cards 0-3 and 4-7 each one HCCS partition.
PARTITIONS = {
    "4": [
        {"minors": [0, 1, 2, 3], "gpuLinkType": "HCCS", "allocationScore": 1},
        {"minors": [4, 5, 6, 7], "gpuLinkType": "HCCS", "allocationScore": 1},
    ]
}
#: The same, and every card alone.
WITH_SINGLES = {
    "1": [{"minors": [m], "gpuLinkType": "HCCS", "allocationScore": 1} for m in range(8)],
    **PARTITIONS,
}

#: Step 1: the Device koordlet reports (the page's example).
DEVICE = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  labels:
    node.koordinator.sh/gpu-partition-policy: "Honor"
    node.koordinator.sh/gpu-model: Ascend-910B3
    node.koordinator.sh/gpu-vendor: huawei
  annotations:
    scheduling.koordinator.sh/gpu-partitions: '{partitions}'
  name: node-1
spec:
  devices:
  - health: true
    id: GPU-fd971b33-4891-fd2e-ed42-ce6adf324615
    minor: 0
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.0
      nodeID: 0
      pcieID: pci0000:3a
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-ab123c45-6789-d001-e234-f567890abcde
    minor: 1
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.1
      nodeID: 1
      pcieID: pci0000:3a
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-bc234d56-7890-e112-f345-678901bcdefa
    minor: 2
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.2
      nodeID: 2
      pcieID: pci0000:3a
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-cd345e67-8901-f223-4567-890123cdefab
    minor: 3
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.3
      nodeID: 3
      pcieID: pci0000:3a
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-de456f78-9012-f334-5678-901234defabc
    minor: 4
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.4
      nodeID: 4
      pcieID: pci0000:3b
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-ef567g89-0123-f445-6789-012345efabcd
    minor: 5
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.5
      nodeID: 5
      pcieID: pci0000:3b
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-fg678h90-1234-f556-7890-123456fgabce
    minor: 6
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.6
      nodeID: 6
      pcieID: pci0000:3b
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
  - health: true
    id: GPU-gh789i01-2345-f667-8901-234567ghabcd
    minor: 7
    resources:
      huawei.com/npu-core: "20"
      huawei.com/npu-cpu: "7"
      huawei.com/npu-dvpp: "100"
      koordinator.sh/gpu-memory: 64Gi
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: 0000:3b:00.7
      nodeID: 7
      pcieID: pci0000:3b
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-04-25T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
status: {}
"""

#: Step 2: the node's allocatable (the page's device resources; cpu and memory for the pods).
NODE = """
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels:
    kubernetes.io/hostname: node-1
status:
  allocatable: &resources
    cpu: "128"
    memory: 512Gi
    pods: "110"
    koordinator.sh/gpu.shared: "800"
    koordinator.sh/gpu-memory: 512Gi
    koordinator.sh/gpu-memory-ratio: "800"
    huawei.com/npu-core: "160"
    huawei.com/npu-cpu: "56"
    huawei.com/npu-dvpp: "800"
  capacity: *resources
  conditions:
  - type: Ready
    status: "True"
"""

#: The 910B3 templates of the page's list, as the templates ConfigMap holds them.
TEMPLATES = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: gpu-shared-resource-templates
  namespace: koordinator-system
data:
  data.yaml: |
    huawei-Ascend-910B3:
      vir05_1c_16g:
        huawei.com/npu-core: "5"
        huawei.com/npu-cpu: "1"
        koordinator.sh/gpu-memory: 16Gi
      vir10_3c_32g:
        huawei.com/npu-core: "10"
        huawei.com/npu-cpu: "3"
        koordinator.sh/gpu-memory: 32Gi
"""

#: Step 3, full card: ``gpu-memory-ratio`` = cards x 100, ``npu-core`` = cards x 20.
FULL_CARD = """
apiVersion: v1
kind: Pod
metadata:
  labels:
    app: demo-sleep
  name: test-ascend-full-1
  namespace: default
spec:
  containers:
  - command:
    - sleep
    - infinity
    image: swr.cn-south-1.myhuaweicloud.com/ascendhub/ascend-infer:24.0.0-ubuntu20.04
    imagePullPolicy: IfNotPresent
    name: demo-sleep
    resources:
      limits:
        cpu: "32"
        memory: 64Gi
        koordinator.sh/gpu-memory-ratio: "100" # card_count * 100
        huawei.com/npu-core: "20" # card_count * npucore_per_card
      requests:
        cpu: "32"
        memory: 64Gi
        koordinator.sh/gpu-memory-ratio: "100"
        huawei.com/npu-core: "20"
"""

#: Step 3, virtual card: the 910B3's ``vir10_3c_32g``.
PARTIAL_CARD = """
apiVersion: v1
kind: Pod
metadata:
  labels:
    app: demo-sleep
  name: test-ascend-partial-1
  namespace: default
spec:
  containers:
  - command:
    - sleep
    - infinity
    image: swr.cn-south-1.myhuaweicloud.com/ascendhub/ascend-infer:24.0.0-ubuntu20.04
    imagePullPolicy: IfNotPresent
    name: demo-sleep
    resources:
      limits:
        cpu: "32"
        memory: 64Gi
        koordinator.sh/gpu.shared: "1"
        koordinator.sh/gpu-memory: "32Gi"
        huawei.com/npu-core: "10"
        huawei.com/npu-cpu: "3"
      requests:
        cpu: "32"
        memory: 64Gi
        koordinator.sh/gpu.shared: "1"
        koordinator.sh/gpu-memory: "32Gi"
        huawei.com/npu-core: "10"
        huawei.com/npu-cpu: "3"
"""


#: The page's annotation as printed (its two long comments cut short): not JSON (comments,
#: ``"4"`` twice, a string score).
PAGE_PARTITIONS = """|
      {
        "4": [
                {
                    "minors": [
                       0,1,2,3  # Minor numbers of cards in this partition
                    ],
                    "gpuLinkType": "HCCS", # Indicate the type of inter-card link
                    "allocationScore": "1" # Indicate the overall allocation quality
                }
        ],
        "4": [
                {
                    "minors": [
                       4,5,6,7
                    ],
                    "gpuLinkType": "HCCS",
                    "allocationScore": "1"
                }
        ]
      }"""


def device(partitions: dict[str, Any]) -> str:
    return DEVICE.replace("{partitions}", json.dumps(partitions))


def full_card_pod(name: str, cards: int) -> str:
    """The page's full-card pod asking ``cards`` cards by its formulas."""
    asked = {
        k.RESOURCE_GPU_MEMORY_RATIO: str(cards * 100),
        k.RESOURCE_HUAWEI_NPU_CORE: str(cards * 20),
    }
    return pod_variant(FULL_CARD, name, resources=asked)


def test_the_pages_device_is_a_valid_device_object(shared_dir: Path) -> None:
    check_devices(shared_dir, device(PARTITIONS))


def test_the_virtual_card_example_gets_the_vir10_template() -> None:
    outcome = replay_adapted(device(PARTITIONS), NODE, TEMPLATES, PARTIAL_CARD)
    pod = outcome.pod("test-ascend-partial-1")
    assert pod.status.phase == "Running"
    assert allocation(outcome, "test-ascend-partial-1") == {
        "gpu": [
            {
                "minor": 0,
                "id": UUID0,
                "resources": {
                    k.RESOURCE_HUAWEI_NPU_CORE: "10",
                    k.RESOURCE_HUAWEI_NPU_CPU: "3",
                    k.RESOURCE_GPU_MEMORY: "32Gi",
                    k.RESOURCE_GPU_MEMORY_RATIO: "50",
                },
                "extension": {"gpuSharedResourceTemplate": "vir10_3c_32g"},
            }
        ]
    }
    assert pod.metadata.annotations[k.ANNOTATION_HUAWEI_NPU_CORE] == "0-vir10_3c_32g"
    assert pod.metadata.annotations[k.ANNOTATION_HUAWEI_PREDICATE_TIME] == str(EPOCH_NS)


def test_a_virtual_card_no_template_cuts_is_refused() -> None:
    odd = pod_variant(PARTIAL_CARD, resources={k.RESOURCE_HUAWEI_NPU_CORE: "7"})
    outcome = replay_adapted(device(PARTITIONS), NODE, TEMPLATES, odd)
    assert "no matched GPU shared resource template" in unschedulable(
        outcome, "test-ascend-partial-1"
    )


def test_one_full_card_is_refused_where_the_table_has_only_4_card_partitions() -> None:
    outcome = replay_adapted(device(PARTITIONS), NODE, TEMPLATES, FULL_CARD)
    assert "node(s) Unsupported number of GPU requests" in unschedulable(
        outcome, "test-ascend-full-1"
    )


def test_four_full_cards_take_one_hccs_partition_each() -> None:
    outcome = replay_adapted(
        device(PARTITIONS),
        NODE,
        full_card_pod("four-a", 4),
        full_card_pod("four-b", 4),
        full_card_pod("four-c", 4),
    )
    partitions = sorted(
        tuple(d["minor"] for d in allocation(outcome, name)["gpu"]) for name in ("four-a", "four-b")
    )
    assert partitions == [(0, 1, 2, 3), (4, 5, 6, 7)]
    for name in ("four-a", "four-b"):
        minors = ",".join(str(d["minor"]) for d in allocation(outcome, name)["gpu"])
        assert outcome.pod(name).metadata.annotations[k.ANNOTATION_HUAWEI_NPU_CORE] == minors
    # Eight cards given out: the node's NPU cores are all requested.
    assert "Insufficient huawei.com/npu-core" in unschedulable(outcome, "four-c")


def test_two_full_cards_never_straddle_a_partition() -> None:
    """The table has no 2-card partitions: under Honor two cards are refused rather than
    given across HCCS groups."""
    outcome = replay_adapted(device(PARTITIONS), NODE, full_card_pod("two", 2))
    assert "node(s) Unsupported number of GPU requests" in unschedulable(outcome, "two")


def test_with_the_pages_unreadable_table_the_node_label_decides() -> None:
    """The annotation as printed cannot be read: like v1.8, the scheduler then takes the
    partition policy from the Node (the page's Node has none), so the full-card pod gets a
    card without partitions."""
    text = DEVICE.replace("'{partitions}'", PAGE_PARTITIONS)
    outcome = replay_adapted(text, NODE, TEMPLATES, FULL_CARD)
    [card] = allocation(outcome, "test-ascend-full-1")["gpu"]
    assert card["minor"] == 0
    honoring = NODE.replace(
        "    kubernetes.io/hostname: node-1\n",
        "    kubernetes.io/hostname: node-1\n    node.koordinator.sh/gpu-partition-policy: Honor\n",
    )
    outcome = replay_adapted(text, honoring, TEMPLATES, FULL_CARD)
    assert "node(s) missing GPU Partition Table" in unschedulable(outcome, "test-ascend-full-1")


def test_with_single_card_partitions_the_full_card_example_gets_a_card() -> None:
    outcome = replay_adapted(device(WITH_SINGLES), NODE, TEMPLATES, FULL_CARD)
    [card] = allocation(outcome, "test-ascend-full-1")["gpu"]
    assert card["resources"] == {
        k.RESOURCE_HUAWEI_NPU_CORE: "20",
        k.RESOURCE_GPU_MEMORY: "64Gi",
        k.RESOURCE_GPU_MEMORY_RATIO: "100",
    }
    annotations = outcome.pod("test-ascend-full-1").metadata.annotations
    assert annotations[k.ANNOTATION_HUAWEI_NPU_CORE] == str(card["minor"])
    assert annotations[k.ANNOTATION_GPU_MINORS] == str(card["minor"])
