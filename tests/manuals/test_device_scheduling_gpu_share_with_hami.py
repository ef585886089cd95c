"""Koordinator v1.8 user manual "Device Scheduling - GPU Share With HAMi"
(``versioned_docs/version-v1.8/user-manuals/device-scheduling-gpu-share-with-hami.md``).

The page's pod asks half of a GPU's compute and memory with HAMi-core isolation
(``koordinator.sh/gpu-isolation-provider: HAMi-core``); since v1.7 such a pod only goes to a
node labelled with the same provider. The page's allocation lands on card 1 with 11520Mi, half
of a 23040Mi card: the replays give the node two such cards, card 0 already half taken by a
pod that was running there.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import yaml

from apis import constants as k
from tests.manuals.devices import (
    EPOCH_NS,
    allocation,
    check_devices,
    replay_adapted,
)
from tests.manuals.replay import node, replay

#: Two 23040Mi NVIDIA cards, as koordlet reports them.
DEVICE = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  name: gpu-node
  labels:
    node.koordinator.sh/gpu-vendor: nvidia
    node.koordinator.sh/gpu-model: NVIDIA-A10
spec:
  devices:
  - health: true
    id: GPU-7d1a3e0c-5f2b-4c88-9a61-1e2f3a4b5c60
    minor: 0
    resources:
      koordinator.sh/gpu-core: "100"
      koordinator.sh/gpu-memory: 23040Mi
      koordinator.sh/gpu-memory-ratio: "100"
    type: gpu
  - health: true
    id: GPU-7d1a3e0c-5f2b-4c88-9a61-1e2f3a4b5c61
    minor: 1
    resources:
      koordinator.sh/gpu-core: "100"
      koordinator.sh/gpu-memory: 23040Mi
      koordinator.sh/gpu-memory-ratio: "100"
    type: gpu
"""

#: What koord-manager reports with ``EnableSyncGPUSharedResource=true`` (the page's setup).
RESOURCES = {
    "koordinator.sh/gpu.shared": "200",
    "koordinator.sh/gpu-core": "200",
    "koordinator.sh/gpu-memory": "46080Mi",
    "koordinator.sh/gpu-memory-ratio": "200",
    "nvidia.com/gpu": "2",
}
HAMI = {"koordinator.sh/gpu-isolation-provider": "HAMi-core"}
NODE = node("gpu-node", extra=RESOURCES, labels=HAMI)
PLAIN_NODE = node("gpu-node", extra=RESOURCES)

#: Step 1: the page's pod.
POD = """
apiVersion: v1
kind: Pod
metadata:
  name: pod-example
  namespace: default
  labels:
    koordinator.sh/gpu-isolation-provider: HAMi-core
spec:
  schedulerName: koord-scheduler
  containers:
  - command:
    - sleep
    - 365d
    image: nvidia/cuda:11.8.0-base-ubuntu22.04
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 4
        memory: 2Gi
        koordinator.sh/gpu.shared: 1
        koordinator.sh/gpu-core: 50
        koordinator.sh/gpu-memory-ratio: 50
      requests:
        cpu: 4
        memory: 2Gi
        koordinator.sh/gpu.shared: 1
        koordinator.sh/gpu-core: 50
        koordinator.sh/gpu-memory-ratio: 50
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  restartPolicy: Always
"""

#: The allocation the page shows for pod-example.
PAGE_ALLOCATION = {
    "gpu": [
        {
            "minor": 1,
            "resources": {
                "koordinator.sh/gpu-core": "50",
                "koordinator.sh/gpu-memory": "11520Mi",
                "koordinator.sh/gpu-memory-ratio": "50",
            },
        }
    ]
}


def running_on_card_0() -> str:
    """A HAMi pod like the page's, already running on the node with half of card 0."""
    doc = yaml.safe_load(POD)
    doc["metadata"]["name"] = "earlier"
    doc["metadata"]["annotations"] = {
        k.ANNOTATION_DEVICE_ALLOCATED: (
            '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"50",'
            '"koordinator.sh/gpu-memory":"11520Mi","koordinator.sh/gpu-memory-ratio":"50"}}]}'
        )
    }
    doc["spec"]["nodeName"] = "gpu-node"
    return yaml.safe_dump(doc)


def without_ids(allocated: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    return {
        t: [{n: v for n, v in d.items() if n != "id"} for d in ds] for t, ds in allocated.items()
    }


def test_the_device_is_a_valid_device_object(shared_dir: Path) -> None:
    check_devices(shared_dir, DEVICE)


def test_the_pod_gets_half_of_the_free_card_as_the_page_shows() -> None:
    outcome = replay(DEVICE, NODE, running_on_card_0(), POD)
    pod = outcome.pod("pod-example")
    assert pod.spec.node_name == "gpu-node"
    assert pod.status.phase == "Running"
    assert without_ids(allocation(outcome, "pod-example")) == PAGE_ALLOCATION
    assert pod.metadata.labels == HAMI


def test_a_node_without_hami_core_does_not_take_the_pod() -> None:
    """v1.8's mandatory check: a scheduling error, not a plain misfit."""
    outcome = replay(DEVICE, PLAIN_NODE, POD, max_time=timedelta(minutes=1))
    assert not outcome.pod("pod-example").spec.node_name
    messages = {(e.type, e.message) for e in outcome.events("FailedScheduling")}
    assert messages == {("Warning", "GPUIsolationProviderHAMICore not found on the node")}


def test_a_gpu_pod_without_isolation_still_goes_to_the_plain_node() -> None:
    doc = yaml.safe_load(POD)
    doc["metadata"]["labels"] = {}
    outcome = replay(DEVICE, PLAIN_NODE, yaml.safe_dump(doc))
    assert allocation(outcome, "pod-example")["gpu"][0]["minor"] == 0


def test_with_the_feature_gate_the_hami_node_label_is_written() -> None:
    outcome = replay_adapted(DEVICE, NODE, running_on_card_0(), POD)
    pod = outcome.pod("pod-example")
    assert pod.metadata.labels == {**HAMI, k.LABEL_HAMI_VGPU_NODE: "gpu-node"}
    assert pod.metadata.annotations[k.ANNOTATION_GPU_MINORS] == "1"
    assert pod.metadata.annotations[k.ANNOTATION_BIND_TIMESTAMP] == str(EPOCH_NS)


def test_two_halves_fill_a_card_and_a_third_share_takes_the_other() -> None:
    docs = []
    for name in ("half-a", "half-b", "half-c"):
        doc = yaml.safe_load(POD)
        doc["metadata"]["name"] = name
        docs.append(yaml.safe_dump(doc))
    outcome = replay(DEVICE, NODE, running_on_card_0(), *docs)
    used = {0: 50, 1: 0}
    placed = 0
    for name in ("half-a", "half-b", "half-c"):
        if outcome.pod(name).spec.node_name:
            placed += 1
            used[allocation(outcome, name)["gpu"][0]["minor"]] += 50
    assert placed == 3
    assert used == {0: 100, 1: 100}
