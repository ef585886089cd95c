"""Pods and Device objects for the DeviceShare tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from apis import constants as k
from apis.core import Container, Pod, PodSpec, ResourceRequirements
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo, DeviceSpec, DeviceTopology

GIB = 1 << 30
MIB = 1 << 20


def pod(
    requests: Mapping[str, str] | None = None,
    *,
    name: str = "p",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Pod:
    """A one-container pod requesting ``requests`` (wire quantities)."""
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            annotations=dict(annotations or {}),
            labels=dict(labels or {}),
        ),
        spec=PodSpec(
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(
                        requests=ResourceList.parse(requests or {"cpu": "1"})
                    ),
                ),
            )
        ),
    )


def gpu(
    minor: int,
    *,
    memory: int = 80 * GIB,
    numa: int = -1,
    pcie: str = "",
    healthy: bool = True,
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, int] | None = None,
) -> DeviceInfo:
    topology = (
        DeviceTopology(socket_id=numa, node_id=numa, pcie_id=pcie, bus_id=f"0000:{minor:02x}:00.0")
        if pcie
        else None
    )
    return DeviceInfo(
        type=k.DEVICE_TYPE_GPU,
        id=f"GPU-{minor}",
        minor=minor,
        health=healthy,
        labels=dict(labels or {}),
        resources=ResourceList(
            {
                k.RESOURCE_GPU_CORE: 100,
                k.RESOURCE_GPU_MEMORY: memory,
                k.RESOURCE_GPU_MEMORY_RATIO: 100,
                **(extra or {}),
            }
        ),
        topology=topology,
    )


def npu(minor: int, *, aicore: int = 20, aicpu: int = 7, memory: int = 64 * GIB) -> DeviceInfo:
    return DeviceInfo(
        type=k.DEVICE_TYPE_GPU,
        id=f"npu{minor}",
        minor=minor,
        health=True,
        resources=ResourceList(
            {
                k.RESOURCE_HUAWEI_NPU_CORE: aicore,
                k.RESOURCE_HUAWEI_NPU_CPU: aicpu,
                k.RESOURCE_HUAWEI_NPU_DVPP: 100,
                k.RESOURCE_GPU_MEMORY: memory,
                k.RESOURCE_GPU_MEMORY_RATIO: 100,
            }
        ),
    )


def rdma(minor: int, *, numa: int, pcie: str, healthy: bool = True) -> DeviceInfo:
    return DeviceInfo(
        type=k.DEVICE_TYPE_RDMA,
        id=f"0000:{0x80 + minor:02x}:00.0",
        minor=minor,
        health=healthy,
        resources=ResourceList({k.RESOURCE_RDMA: 100}),
        topology=DeviceTopology(socket_id=numa, node_id=numa, pcie_id=pcie),
    )


def device(
    devices: Sequence[DeviceInfo],
    *,
    node: str = "n1",
    vendor: str = "nvidia",
    model: str = "H100",
    labels: Mapping[str, str] | None = None,
) -> Device:
    return Device(
        metadata=ObjectMeta(
            name=node,
            labels={k.LABEL_GPU_VENDOR: vendor, k.LABEL_GPU_MODEL: model, **(labels or {})},
        ),
        spec=DeviceSpec(devices=tuple(devices)),
    )


def h100_node(*, node: str = "n1", rdma_nics: bool = False) -> Device:
    """Eight H100s: two NUMA nodes, a PCIe switch per pair of GPUs (and one NIC per switch)."""
    gpus = [gpu(m, numa=m // 4, pcie=f"pci{m // 2}") for m in range(8)]
    nics = [rdma(m, numa=m // 2, pcie=f"pci{m}") for m in range(4)] if rdma_nics else []
    return device([*gpus, *nics], node=node, model="H100-80GB-HBM3")
