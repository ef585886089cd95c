"""What a node's Device report adds to the Node: accelerator resources and GPU labels
(agent-spec §8, "Node-resource sync").

Shared by the node agent, which publishes its own Node with them (``koordpy up``), and the
controller's ``noderesource`` loop, which writes them into a cluster's Nodes as koord-manager's
``GPUDeviceResource`` plugin does (Kubernetes mode). Pure functions over :mod:`apis` types.
"""

from __future__ import annotations

from typing import Final

from apis import constants as k
from apis.resources import ResourceList
from apis.scheduling import Device

__all__ = [
    "DEVICE_LABELS",
    "MANAGER_DEVICE_RESOURCES",
    "RESOURCE_HUAWEI_ASCEND_910",
    "accelerator_resources",
    "device_labels",
]

#: Device-plugin count of Ascend 910 NPUs (every 910 model; 310P has its own name).
RESOURCE_HUAWEI_ASCEND_910: Final = "huawei.com/Ascend910"

# Device resources summed into the Node (Koordinator's GPUDeviceResource sync).
_SUMMED: Final = (
    k.RESOURCE_GPU_CORE,
    k.RESOURCE_GPU_MEMORY,
    k.RESOURCE_GPU_MEMORY_RATIO,
    k.RESOURCE_HUAWEI_NPU_CORE,
    k.RESOURCE_HUAWEI_NPU_CPU,
    k.RESOURCE_HUAWEI_NPU_DVPP,
    k.RESOURCE_METAX_SGPU,
)

#: The resources of :func:`accelerator_resources` that koord-manager writes into a Node (the
#: vendors' device counts, ``nvidia.com/gpu`` and the like, are their device plugins', through
#: the kubelet). ``koordinator.sh/gpu.shared`` is among them as koordpy's agent always reports
#: it (Koordinator: behind the manager gate ``EnableSyncGPUSharedResource``).
MANAGER_DEVICE_RESOURCES: Final = frozenset(
    {
        k.RESOURCE_GPU,
        k.RESOURCE_GPU_SHARED,
        k.RESOURCE_GPU_CORE,
        k.RESOURCE_GPU_MEMORY,
        k.RESOURCE_GPU_MEMORY_RATIO,
        k.RESOURCE_HUAWEI_NPU_CORE,
        k.RESOURCE_HUAWEI_NPU_CPU,
        k.RESOURCE_HUAWEI_NPU_DVPP,
    }
)

#: The Device labels copied onto its Node.
DEVICE_LABELS: Final = (k.LABEL_GPU_VENDOR, k.LABEL_GPU_MODEL, k.LABEL_GPU_DRIVER_VERSION)


def accelerator_resources(device: Device | None) -> ResourceList:
    """Node resources contributed by the healthy devices of a Device report."""
    if device is None:
        return ResourceList()
    healthy = [d for d in device.spec.devices if d.type == k.DEVICE_TYPE_GPU and d.health]
    if not healthy:
        return ResourceList()
    totals = ResourceList.total(d.resources.mask(_SUMMED) for d in healthy)
    vendor = device.metadata.labels.get(k.LABEL_GPU_VENDOR, "")
    model = device.metadata.labels.get(k.LABEL_GPU_MODEL, "")
    count = len(healthy)
    # Shared-GPU pods (`gpu.shared` with gpu-core / gpu-memory) are counted against this,
    # 100 per healthy card, so the node's fit check admits them (Koordinator reports it
    # behind a feature gate; koordpy always does).
    extra: dict[str, int] = {k.RESOURCE_GPU_SHARED: 100 * count}
    if vendor == k.GPU_VENDOR_NVIDIA:
        extra[k.RESOURCE_NVIDIA_GPU] = count
        extra[k.RESOURCE_GPU] = totals.get_amount(k.RESOURCE_GPU_CORE)
    elif vendor == k.GPU_VENDOR_HUAWEI:
        name = k.RESOURCE_HUAWEI_ASCEND_310P if "310P" in model else RESOURCE_HUAWEI_ASCEND_910
        extra[name] = count
    elif vendor == k.GPU_VENDOR_METAX:
        extra[k.RESOURCE_METAX_GPU] = count
    return totals + extra


def device_labels(device: Device | None) -> dict[str, str]:
    """The Device's non-empty ``gpu-vendor``, ``gpu-model`` and ``gpu-driver-version`` labels,
    as its Node carries them."""
    if device is None:
        return {}
    labels = device.metadata.labels
    return {key: labels[key] for key in DEVICE_LABELS if labels.get(key)}
