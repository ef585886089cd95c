"""Koordinator v1.8 user manual "Device Scheduling - Basics"
(``versioned_docs/version-v1.8/user-manuals/fine-grained-device-scheduling.md``).

The page's node ``host04`` has two 16 GiB GPUs; its Device and Node are written with the
deprecated ``kubernetes.io/gpu*`` names, as the page shows them, and so is its quick-start
pod. koord-scheduler v1.8 reads those names as ``koordinator.sh/gpu*`` and writes the new names
in ``device-allocated``: the page's sample output (taken from an older release) spells the
same allocation with the old names, and its ``gpu-memory`` (12508288Ki) is another card's
memory than the 16Gi its own Device reports; the replays assert the card's own memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis import constants as k
from apis.devicenames import DEPRECATED_DEVICE_NAMES
from tests.manuals.devices import allocation, check_devices, unschedulable
from tests.manuals.replay import node, replay

UUID0 = "GPU-04cea5cd-966f-7116-1d58-1ac34421541b"
UUID1 = "GPU-3680858f-1753-371e-3c1a-7d8127fc7113"

#: Step 1 of the quick start: the Device koordlet reports for host04.
DEVICE = f"""
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  name: host04
spec:
  devices:
  - health: true
    id: {UUID0}
    minor: 0
    resources:
      kubernetes.io/gpu-core: "100"
      kubernetes.io/gpu-memory: 16Gi
      kubernetes.io/gpu-memory-ratio: "100"
    type: gpu
  - health: true
    id: {UUID1}
    minor: 1
    resources:
      kubernetes.io/gpu-core: "100"
      kubernetes.io/gpu-memory: 16Gi
      kubernetes.io/gpu-memory-ratio: "100"
    type: gpu
status: {{}}
"""

#: Step 2: host04's allocatable, every card's resources merged.
NODE = node(
    "host04",
    cpu="6",
    memory="59274552Ki",
    pods="220",
    extra={
        "ephemeral-storage": "200681483926",
        "kubernetes.io/gpu": "200",
        "kubernetes.io/gpu-core": "200",
        "kubernetes.io/gpu-memory": "32Gi",
        "kubernetes.io/gpu-memory-ratio": "200",
        "nvidia.com/gpu": "2",
    },
)

#: A whole card as v1.8 writes it.
WHOLE = {
    k.RESOURCE_GPU_CORE: "100",
    k.RESOURCE_GPU_MEMORY: "16Gi",
    k.RESOURCE_GPU_MEMORY_RATIO: "100",
}


def pod(name: str, requests: dict[str, str], limits: dict[str, str] | None = None) -> str:
    """A pod shaped as the page's: busybox sleeping, scheduled by koord-scheduler."""
    resources: dict[str, Any] = {"requests": requests}
    if limits is not None:
        resources["limits"] = limits
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "koord-scheduler",
            "restartPolicy": "Always",
            "containers": [
                {
                    "name": "curlimage",
                    "image": "busybox",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "365d"],
                    "resources": resources,
                }
            ],
        },
    }
    return yaml.safe_dump(doc)


#: Step 3: the quick-start pod, as the page writes it.
POD_EXAMPLE = """
apiVersion: v1
kind: Pod
metadata:
  name: pod-example
  namespace: default
spec:
  schedulerName: koord-scheduler
  containers:
  - command:
    - sleep
    - 365d
    image: busybox
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 40m
        memory: 40Mi
      requests:
        cpu: 40m
        memory: 40Mi
        kubernetes.io/gpu: "100"
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  restartPolicy: Always
"""

#: The allocation the page shows for pod-example (written with the deprecated names).
PAGE_ALLOCATION = (
    '{"gpu":[{"minor":0,"resources":{"kubernetes.io/gpu-core":"100",'
    '"kubernetes.io/gpu-memory":"12508288Ki","kubernetes.io/gpu-memory-ratio":"100"}}]}'
)


def test_the_pages_device_is_a_valid_device_object(shared_dir: Path) -> None:
    check_devices(shared_dir, DEVICE)


def test_the_quick_start_pod_gets_card_0_whole() -> None:
    outcome = replay(DEVICE, NODE, POD_EXAMPLE)
    example = outcome.pod("pod-example")
    assert example.spec.node_name == "host04"
    assert example.status.phase == "Running"
    assert allocation(outcome, "pod-example") == {
        "gpu": [{"minor": 0, "id": UUID0, "resources": WHOLE}]
    }
    # The page's output names the same resources, in their deprecated spelling.
    [shown] = json.loads(PAGE_ALLOCATION)["gpu"]
    assert {DEPRECATED_DEVICE_NAMES[n] for n in shown["resources"]} == set(WHOLE)
    # The stored pod keeps the names it was written with.
    assert example.spec.containers[0].resources.requests.get_amount("kubernetes.io/gpu") == 100


def test_two_cards_take_two_whole_card_pods_and_no_third() -> None:
    whole = {"cpu": "40m", "memory": "40Mi", "kubernetes.io/gpu": "100"}
    outcome = replay(DEVICE, NODE, *(pod(f"gpu-pod{i}", whole) for i in range(3)))
    minors = sorted(
        allocation(outcome, f"gpu-pod{i}")["gpu"][0]["minor"]
        for i in range(3)
        if outcome.pod(f"gpu-pod{i}").spec.node_name
    )
    assert minors == [0, 1]
    [pending] = [i for i in range(3) if not outcome.pod(f"gpu-pod{i}").spec.node_name]
    assert "Insufficient koordinator.sh/gpu" in unschedulable(outcome, f"gpu-pod{pending}")


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        # "more apply protocol": gpu-core with gpu-memory-ratio, the deprecated names.
        (
            {"kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory-ratio": "100"},
            WHOLE,
        ),
        # gpu-core with gpu-memory: 16Mi of card 0's memory (its ratio rounds down to 0).
        (
            {"kubernetes.io/gpu-core": "100", "kubernetes.io/gpu-memory": "16Mi"},
            {
                k.RESOURCE_GPU_CORE: "100",
                k.RESOURCE_GPU_MEMORY: "16Mi",
                k.RESOURCE_GPU_MEMORY_RATIO: "0",
            },
        ),
    ],
    ids=["gpu-core+gpu-memory-ratio", "gpu-core+gpu-memory"],
)
def test_more_apply_protocol_examples_are_placed_on_card_0(
    requests: dict[str, str], expected: dict[str, str]
) -> None:
    outcome = replay(DEVICE, NODE, pod("protocol", {"cpu": "40m", "memory": "40Mi", **requests}))
    assert allocation(outcome, "protocol") == {
        "gpu": [{"minor": 0, "id": UUID0, "resources": expected}]
    }


def test_nvidia_gpu_counts_whole_cards() -> None:
    """The page's ``nvidia.com/gpu: "100"`` asks for a hundred cards: host04 has two, so the
    pod waits; ``nvidia.com/gpu: 1`` is one whole card. (Kubernetes wants the limit of an
    extended resource set, equal to its request.)"""
    hundred = {"nvidia.com/gpu": "100"}
    one = {"nvidia.com/gpu": "1"}
    outcome = replay(
        DEVICE,
        NODE,
        pod("hundred", {"cpu": "40m", "memory": "40Mi", **hundred}, hundred),
        pod("one", {"cpu": "40m", "memory": "40Mi", **one}, one),
    )
    assert "Insufficient nvidia.com/gpu" in unschedulable(outcome, "hundred")
    assert allocation(outcome, "one") == {"gpu": [{"minor": 0, "id": UUID0, "resources": WHOLE}]}


def test_old_and_new_names_add_up_on_a_card() -> None:
    """Three pods of 60 % of a card, spelt three ways: two cards hold two of them."""
    spellings = [
        {"kubernetes.io/gpu": "60"},
        {"koordinator.sh/gpu-core": "60", "kubernetes.io/gpu-memory-ratio": "60"},
        {"koordinator.sh/gpu": "60"},
    ]
    docs = [
        pod(f"share{i}", {"cpu": "40m", **s}, s if "koordinator.sh/gpu" in s else None)
        for i, s in enumerate(spellings)
    ]
    outcome = replay(DEVICE, NODE, *docs)
    bound = [i for i in range(3) if outcome.pod(f"share{i}").spec.node_name]
    assert len(bound) == 2
    minors = {allocation(outcome, f"share{i}")["gpu"][0]["minor"] for i in bound}
    assert minors == {0, 1}
    [waiting] = set(range(3)) - set(bound)
    assert "Insufficient gpu devices" in unschedulable(outcome, f"share{waiting}")


def test_an_allocation_written_with_the_old_names_keeps_its_card() -> None:
    """A pod already running on host04 with the allocation exactly as the page shows it:
    card 0 stays its own."""
    running = yaml.safe_load(POD_EXAMPLE)
    running["metadata"]["annotations"] = {k.ANNOTATION_DEVICE_ALLOCATED: PAGE_ALLOCATION}
    running["spec"]["nodeName"] = "host04"
    whole = {"cpu": "40m", "memory": "40Mi", "kubernetes.io/gpu": "100"}
    outcome = replay(
        DEVICE, NODE, yaml.safe_dump(running), pod("second", whole), pod("third", whole)
    )
    assert outcome.pod("pod-example").metadata.annotations == {
        k.ANNOTATION_DEVICE_ALLOCATED: PAGE_ALLOCATION
    }
    assert allocation(outcome, "second")["gpu"][0]["minor"] == 1
    assert "Insufficient" in unschedulable(outcome, "third")


@pytest.mark.parametrize(
    ("requests", "reason"),
    [
        ({"kubernetes.io/gpu": "150"}, "invalid resource unit koordinator.sh/gpu: 150"),
        (
            {"kubernetes.io/gpu-core": "150", "kubernetes.io/gpu-memory-ratio": "150"},
            "invalid resource unit koordinator.sh/gpu-core: 150",
        ),
        (
            {"kubernetes.io/gpu-core": "50"},
            "invalid resource device requests: [koordinator.sh/gpu-core]",
        ),
        (
            {
                "kubernetes.io/gpu-core": "50",
                "kubernetes.io/gpu-memory": "1Gi",
                "kubernetes.io/gpu-memory-ratio": "50",
            },
            "invalid resource device requests: [koordinator.sh/gpu-core"
            " koordinator.sh/gpu-memory koordinator.sh/gpu-memory-ratio]",
        ),
    ],
    ids=["gpu-not-whole-cards", "core-not-whole-cards", "core-alone", "memory-and-ratio"],
)
def test_invalid_requests_are_refused_naming_the_resource(
    requests: dict[str, str], reason: str
) -> None:
    outcome = replay(DEVICE, NODE, pod("invalid", {"cpu": "40m", **requests}), POD_EXAMPLE)
    assert reason in unschedulable(outcome, "invalid")
    stored = outcome.pod("invalid").spec.containers[0].resources.requests
    assert set(stored) == {"cpu", *requests}
    # Nothing else is disturbed.
    assert allocation(outcome, "pod-example")["gpu"][0]["minor"] == 0
