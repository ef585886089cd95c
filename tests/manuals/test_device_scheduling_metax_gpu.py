"""Koordinator v1.8 user manual "Device Scheduling - Metax GPU"
(``versioned_docs/version-v1.8/user-manuals/device-scheduling-metax-gpu.md``).

The page's node ``sample-node1`` has one MetaX C500 (64 GiB) in sGPU mode: 16 virtual GPUs
(``metax-tech.com/sgpu``). koord-scheduler runs with ``DevicePluginAdaption=true``, as the page
requires, so binding also writes what MetaX's device plugin reads:
``metax-tech.com/gpu-devices-allocated`` (``[[{"uuid", "compute", "vRam" in MiB}]]``). (The
``hami.io/mutex.lock`` node lock that v1.8 also takes is not: koordpy's nodes run no vendor
device plugin to release it.) The Device's bus ID is quoted here: unquoted, koordpy's YAML reader
still takes ``0000:38:00.0`` for a YAML 1.1 base-60 number, where Kubernetes reads a string.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apis import constants as k
from tests.manuals.devices import (
    EPOCH_NS,
    allocation,
    check_devices,
    pod_variant,
    pods,
    replay_adapted,
    unschedulable,
)
from tests.manuals.replay import node, replay

UUID = "89033010-2354-0000-0000-000000000000"

#: Step 1: the Device koordlet reports (the page's example).
DEVICE = f"""
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  labels:
    node.koordinator.sh/gpu-model: C500
    node.koordinator.sh/gpu-vendor: metax
  name: sample-node1
spec:
  devices:
  - health: true
    id: {UUID}
    minor: 0
    resources:
      koordinator.sh/gpu-core: "100"
      koordinator.sh/gpu-memory: "64Gi"
      koordinator.sh/gpu-memory-ratio: "100"
    topology:
      busID: "0000:38:00.0"
      nodeID: 3
      pcieID: pci0000:3a
      socketID: -1
    type: gpu
    conditions:
    - lastTransitionTime: "2025-03-15T10:00:00Z"
      message: device is healthy
      reason: DeviceHealthy
      status: "True"
      type: Healthy
status: {{}}
"""

#: Step 2: the node's allocatable (the page's device resources; cpu and memory for the pod).
NODE = node(
    "sample-node1",
    cpu="64",
    memory="256Gi",
    extra={
        "koordinator.sh/gpu.shared": "100",
        "koordinator.sh/gpu-core": "100",
        "koordinator.sh/gpu-memory": "64Gi",
        "koordinator.sh/gpu-memory-ratio": "100",
        "metax-tech.com/sgpu": "16",
    },
)

#: Step 3: the page's sGPU pod.
POD = """
apiVersion: v1
kind: Pod
metadata:
  labels:
    app: demo-sleep
  name: test-metax-sgpu
  namespace: default
  annotations:
     metax-tech.com/sgpu-qos-policy: "fixed-share"
spec:
  containers:
  - command:
    - sleep
    - infinity
    image: ubuntu:22.04
    imagePullPolicy: IfNotPresent
    name: demo-sleep
    resources:
      limits:
        cpu: "32"
        memory: 64Gi
        koordinator.sh/gpu.shared: "1"
        koordinator.sh/gpu-memory: "1Gi"
        koordinator.sh/gpu-core: "10"
        metax-tech.com/sgpu: "1"
      requests:
        cpu: "32"
        memory: 64Gi
        koordinator.sh/gpu.shared: "1"
        koordinator.sh/gpu-memory: "1Gi"
        koordinator.sh/gpu-core: "10"
        metax-tech.com/sgpu: "1"
"""

#: The page's sGPU: 10 % of the card's compute, 1 GiB of its memory (1 % of 64 GiB, rounded down).
SGPU = {
    "minor": 0,
    "id": UUID,
    "resources": {
        k.RESOURCE_GPU_CORE: "10",
        k.RESOURCE_GPU_MEMORY: "1Gi",
        k.RESOURCE_GPU_MEMORY_RATIO: "1",
    },
}


def sgpu_pod(name: str, *, core: str = "10", memory: str = "1Gi", policy: str = "") -> str:
    """The page's pod with a name, a share of the card and (optionally) a QoS policy."""
    asked = {"cpu": "1", "memory": "1Gi", k.RESOURCE_GPU_CORE: core, k.RESOURCE_GPU_MEMORY: memory}
    policies = {k.ANNOTATION_SGPU_QOS_POLICY: policy} if policy else {}
    return pod_variant(POD, name, resources=asked, annotations=policies)


def test_the_pages_device_is_a_valid_device_object(shared_dir: Path) -> None:
    check_devices(shared_dir, DEVICE)


def test_the_sgpu_pod_gets_its_share_and_the_metax_annotation() -> None:
    outcome = replay_adapted(DEVICE, NODE, POD)
    pod = outcome.pod("test-metax-sgpu")
    assert pod.spec.node_name == "sample-node1"
    assert pod.status.phase == "Running"
    assert allocation(outcome, "test-metax-sgpu") == {"gpu": [SGPU]}
    annotations = pod.metadata.annotations
    assert json.loads(annotations[k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED]) == [
        [{"uuid": UUID, "compute": 10, "vRam": 1024}]
    ]
    assert annotations[k.ANNOTATION_GPU_MINORS] == "0"
    assert annotations[k.ANNOTATION_BIND_TIMESTAMP] == str(EPOCH_NS)
    # The QoS policy stays where the user put it, for MetaX's device plugin to read.
    assert annotations[k.ANNOTATION_SGPU_QOS_POLICY] == "fixed-share"


def test_without_the_feature_gate_only_the_allocation_is_written() -> None:
    outcome = replay(DEVICE, NODE, POD)
    annotations = outcome.pod("test-metax-sgpu").metadata.annotations
    assert json.loads(annotations[k.ANNOTATION_DEVICE_ALLOCATED]) == {"gpu": [SGPU]}
    assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED not in annotations
    assert k.ANNOTATION_BIND_TIMESTAMP not in annotations


def test_the_cards_compute_is_shared_out_and_never_exceeded() -> None:
    """Eleven sGPUs of 10 % compute on one card: ten fit, the eleventh waits."""
    outcome = replay_adapted(DEVICE, NODE, *(sgpu_pod(f"sgpu-{i:02}") for i in range(11)))
    bound = [p for p in pods(outcome) if p.spec.node_name]
    assert len(bound) == 10
    stamps = {p.metadata.annotations[k.ANNOTATION_BIND_TIMESTAMP] for p in bound}
    assert len(stamps) == 10  # the device plugin tells them apart by it
    [waiting] = [p.metadata.name for p in pods(outcome) if not p.spec.node_name]
    assert "Insufficient koordinator.sh/gpu-core" in unschedulable(outcome, waiting)


def test_the_sgpu_slots_are_counted() -> None:
    """Sixteen sGPUs per card (``metax-tech.com/sgpu``): the seventeenth waits even though
    compute and memory are left."""
    docs = [sgpu_pod(f"tiny-{i:02}", core="1", memory="1Gi") for i in range(17)]
    outcome = replay_adapted(DEVICE, NODE, *docs)
    bound = [p for p in pods(outcome) if p.spec.node_name]
    assert len(bound) == 16
    [waiting] = [p.metadata.name for p in pods(outcome) if not p.spec.node_name]
    assert "Insufficient metax-tech.com/sgpu" in unschedulable(outcome, waiting)


@pytest.mark.parametrize("policy", ["fixed-share", "best-effort", "burst-share"])
def test_each_qos_policy_the_page_lists_is_accepted(policy: str) -> None:
    outcome = replay_adapted(DEVICE, NODE, sgpu_pod("qos", policy=policy))
    assert allocation(outcome, "qos")["gpu"][0]["minor"] == 0
