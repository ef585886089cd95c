"""The deprecated ``kubernetes.io/`` device names read as ``koordinator.sh/`` (spec §3.1):
on pods, Nodes, Devices and device-allocated annotations, and never a way to over-commit a
GPU."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apis import codec
from apis import constants as k
from apis.core import Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements, pod_requests
from apis.devicenames import DEPRECATED_DEVICE_NAMES, translated
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from controller import simulate as sim
from controller.scheduler.deviceshare.annotation import parse_allocation
from controller.scheduler.deviceshare.requests import DeviceRequest, prepare
from controller.scheduler.deviceshare.state import node_state
from tests.controller.deviceshare.builders import GIB, device, gpu

OLD_GPU = k.RESOURCE_GPU_DEPRECATED
OLD_CORE = k.RESOURCE_GPU_CORE_DEPRECATED
OLD_RATIO = k.RESOURCE_GPU_MEMORY_RATIO_DEPRECATED
OLD_MEMORY = k.RESOURCE_GPU_MEMORY_DEPRECATED
#: New name -> the deprecated one.
DEPRECATED_OLD = {new: old for old, new in DEPRECATED_DEVICE_NAMES.items()}


def test_every_deprecated_name_maps_to_its_koordinator_successor() -> None:
    assert DEPRECATED_DEVICE_NAMES == {
        "kubernetes.io/gpu": "koordinator.sh/gpu",
        "kubernetes.io/gpu-core": "koordinator.sh/gpu-core",
        "kubernetes.io/gpu-memory": "koordinator.sh/gpu-memory",
        "kubernetes.io/gpu-memory-ratio": "koordinator.sh/gpu-memory-ratio",
        "kubernetes.io/rdma": "koordinator.sh/rdma",
        "kubernetes.io/fpga": "koordinator.sh/fpga",
    }


def test_only_the_name_changes_and_the_successor_wins() -> None:
    old = ResourceList.parse({"cpu": "1", OLD_GPU: "100", OLD_MEMORY: "16Gi"})
    assert translated(old) == {"cpu": 1000, k.RESOURCE_GPU: 100, k.RESOURCE_GPU_MEMORY: 16 * GIB}
    both = ResourceList.parse({OLD_GPU: "50", k.RESOURCE_GPU: "100"})
    assert translated(both) == both
    plain = ResourceList.parse({"cpu": "1", k.RESOURCE_GPU: "100"})
    assert translated(plain) is plain


def _pod(
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    overhead: Mapping[str, str] | None = None,
) -> Pod:
    return Pod(
        metadata=ObjectMeta(name="p", namespace="default"),
        spec=PodSpec(
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(
                        requests=ResourceList.parse(requests or {}),
                        limits=ResourceList.parse(limits or {}),
                    ),
                ),
            ),
            overhead=ResourceList.parse(overhead or {}),
        ),
    )


def test_a_pods_requests_limits_and_overhead_read_the_new_names() -> None:
    assert pod_requests(_pod(requests={OLD_GPU: "100"})) == {k.RESOURCE_GPU: 100}
    assert pod_requests(_pod(limits={OLD_CORE: "50", OLD_RATIO: "50"})) == {
        k.RESOURCE_GPU_CORE: 50,
        k.RESOURCE_GPU_MEMORY_RATIO: 50,
    }
    assert pod_requests(_pod(overhead={k.RESOURCE_RDMA_DEPRECATED: "100"})) == {
        k.RESOURCE_RDMA: 100
    }


def test_the_stored_pod_keeps_the_names_it_was_written_with() -> None:
    pod = _pod(requests={OLD_GPU: "100"})
    pod_requests(pod)
    assert dict(pod.spec.containers[0].resources.requests) == {OLD_GPU: 100}


def test_deprecated_gpu_requests_are_normalized_like_the_new_ones() -> None:
    for old, new in (
        ({OLD_GPU: "200"}, {k.RESOURCE_GPU: "200"}),
        (
            {OLD_CORE: "50", OLD_MEMORY: "4Gi"},
            {k.RESOURCE_GPU_CORE: "50", k.RESOURCE_GPU_MEMORY: "4Gi"},
        ),
        (
            {OLD_CORE: "50", k.RESOURCE_GPU_MEMORY_RATIO: "50"},
            {k.RESOURCE_GPU_CORE: "50", k.RESOURCE_GPU_MEMORY_RATIO: "50"},
        ),
    ):
        assert prepare(_pod(requests=old)) == prepare(_pod(requests=new))


def test_the_amount_keeps_its_unit_one_is_one_percent_of_a_card() -> None:
    """``kubernetes.io/gpu`` was always a percentage, like ``koordinator.sh/gpu``: 1 is a 1 %
    share, not one card."""
    request = prepare(_pod(requests={OLD_GPU: "1"}))
    assert isinstance(request, DeviceRequest)
    gpu = request.gpu
    assert gpu is not None
    assert (gpu.count, gpu.shared) == (1, True)
    assert gpu.per_device == {k.RESOURCE_GPU_CORE: 1, k.RESOURCE_GPU_MEMORY_RATIO: 1}


def test_an_invalid_deprecated_request_is_refused_under_the_name_the_scheduler_reads() -> None:
    refused = prepare(_pod(requests={OLD_GPU: "150"}))
    assert getattr(refused, "reason", "") == "invalid resource unit koordinator.sh/gpu: 150"


def test_a_nodes_capacity_and_allocatable_read_the_new_names() -> None:
    status = NodeStatus(
        capacity=ResourceList.parse({OLD_GPU: "200", OLD_CORE: "200"}),
        allocatable=ResourceList.parse({OLD_GPU: "200", OLD_MEMORY: "32Gi"}),
    )
    node = Node(metadata=ObjectMeta(name="n1"), status=status)
    assert node.allocatable == {k.RESOURCE_GPU: 200, k.RESOURCE_GPU_MEMORY: 32 * GIB}
    assert node.capacity == {k.RESOURCE_GPU: 200, k.RESOURCE_GPU_CORE: 200}
    bare = Node(metadata=ObjectMeta(name="n2"), status=NodeStatus(capacity=status.capacity))
    assert bare.allocatable == {k.RESOURCE_GPU: 200, k.RESOURCE_GPU_CORE: 200}


def test_a_devices_old_names_give_the_card_its_totals() -> None:
    card = gpu(0, memory=16 * GIB)
    old = ResourceList({DEPRECATED_OLD[name]: amount for name, amount in card.resources.items()})
    state = node_state(device([msgspec.structs.replace(card, resources=old)]))
    (slot,) = state.devices
    assert slot.total == card.resources


def test_an_allocation_written_with_old_names_holds_the_same_share() -> None:
    """The annotation the fine-grained-device-scheduling page shows (written by an older
    koord-scheduler)."""
    text = json.dumps(
        {
            "gpu": [
                {
                    "minor": 0,
                    "resources": {OLD_CORE: "100", OLD_MEMORY: "12508288Ki", OLD_RATIO: "100"},
                }
            ]
        }
    )
    (held,) = parse_allocation(text).of(k.DEVICE_TYPE_GPU)
    assert held.resources == {
        k.RESOURCE_GPU_CORE: 100,
        k.RESOURCE_GPU_MEMORY: 12508288 * 1024,
        k.RESOURCE_GPU_MEMORY_RATIO: 100,
    }


# --- property: old and new names on one node never over-commit a card --------------------------

CARDS = 2
CARD_MEMORY = 16 * GIB


def _name(draw: st.DrawFn, new: str) -> str:
    old = DEPRECATED_OLD.get(new)
    return draw(st.sampled_from([new, old])) if old else new


@st.composite
def _gpu_request(draw: st.DrawFn) -> dict[str, str]:
    shape = draw(st.sampled_from(["gpu", "core+ratio", "core+memory", "nvidia"]))
    if shape == "gpu":
        return {_name(draw, k.RESOURCE_GPU): str(draw(st.sampled_from([25, 50, 100, 200])))}
    if shape == "nvidia":
        return {k.RESOURCE_NVIDIA_GPU: "1"}
    core = str(draw(st.sampled_from([20, 50, 70, 100])))
    if shape == "core+ratio":
        second = {_name(draw, k.RESOURCE_GPU_MEMORY_RATIO): str(draw(st.sampled_from([30, 60])))}
    else:
        second = {_name(draw, k.RESOURCE_GPU_MEMORY): f"{draw(st.sampled_from([4, 10]))}Gi"}
    return {_name(draw, k.RESOURCE_GPU_CORE): core, **second}


def _manifest_pod(index: int, request: dict[str, str]) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", **request}}
    if any(not name.startswith("kubernetes.io/") for name in request):
        resources["limits"] = dict(request)  # extended resources need limit = request
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{index}", "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]},
    }


def _manifest_node(old_node: bool, old_device: bool) -> list[dict[str, Any]]:
    def names(resources: dict[str, str], old: bool) -> dict[str, str]:
        return {(DEPRECATED_OLD.get(n, n) if old else n): v for n, v in resources.items()}

    card = {
        k.RESOURCE_GPU_CORE: "100",
        k.RESOURCE_GPU_MEMORY: "16Gi",
        k.RESOURCE_GPU_MEMORY_RATIO: "100",
    }
    total = {
        k.RESOURCE_GPU: str(100 * CARDS),
        k.RESOURCE_GPU_CORE: str(100 * CARDS),
        k.RESOURCE_GPU_MEMORY: f"{16 * CARDS}Gi",
        k.RESOURCE_GPU_MEMORY_RATIO: str(100 * CARDS),
    }
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110", k.RESOURCE_NVIDIA_GPU: str(CARDS)}
    allocatable |= names(total, old_node)
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-node"},
            "status": {
                "capacity": allocatable,
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {"name": "gpu-node"},
            "spec": {
                "devices": [
                    {
                        "type": "gpu",
                        "minor": m,
                        "health": True,
                        "id": f"GPU-{m}",
                        "resources": names(card, old_device),
                    }
                    for m in range(CARDS)
                ]
            },
        },
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.lists(_gpu_request(), min_size=2, max_size=6),
    old_node=st.booleans(),
    old_device=st.booleans(),
)
def test_old_and_new_names_together_never_over_commit_a_card(
    requests: list[dict[str, str]], old_node: bool, old_device: bool
) -> None:
    """Pods asking with either spelling (mixed inside a pod, too) on a node and Device
    reported with either spelling: some pod is bound (each request fits the empty node),
    every bound GPU pod holds devices, and no card gives more than it has."""
    cluster = _manifest_node(old_node, old_device)
    docs = [*cluster, *(_manifest_pod(i, r) for i, r in enumerate(requests))]
    objects = sim.scenario_objects("\n---\n".join(codec.dump_yaml(d) for d in docs))
    result = sim.simulate(objects, max_time=timedelta(minutes=5))
    used: dict[int, dict[str, int]] = {}
    bound = 0
    for obj in result.objects:
        if not isinstance(obj, Pod) or not obj.spec.node_name:
            continue
        bound += 1
        text = obj.metadata.annotations.get(k.ANNOTATION_DEVICE_ALLOCATED, "")
        assert text, f"{obj.metadata.name} bound without devices: {requests}"
        for held in parse_allocation(text).of(k.DEVICE_TYPE_GPU):
            for name, amount in held.resources.items():
                card = used.setdefault(held.minor, {})
                card[name] = card.get(name, 0) + amount
    assert bound, f"every request fits an empty node, yet none was bound: {requests}"
    for minor, card in used.items():
        assert card.get(k.RESOURCE_GPU_CORE, 0) <= 100, (minor, card, requests)
        assert card.get(k.RESOURCE_GPU_MEMORY_RATIO, 0) <= 100, (minor, card, requests)
        assert card.get(k.RESOURCE_GPU_MEMORY, 0) <= CARD_MEMORY, (minor, card, requests)
