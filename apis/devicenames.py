"""The deprecated ``kubernetes.io/`` device resource names, read as their ``koordinator.sh/``
successors (controller-spec §3.1).

Koordinator v1.8 renames ``kubernetes.io/gpu``, ``gpu-core``, ``gpu-memory``,
``gpu-memory-ratio``, ``rdma`` and ``fpga`` wherever its scheduler reads resources: a
container's requests and limits, a pod's overhead, a Node's capacity and allocatable, a
Device's per-device resources and the resources of a ``device-allocated`` annotation. Only the
name changes, never the amount (``kubernetes.io/gpu: 100`` is ``koordinator.sh/gpu: 100``, one
card). A list that already names the successor keeps the old entry as it is: the new name
wins, and the old one stays a plain extended resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from apis import constants as k
from apis.resources import ResourceList

__all__ = ["DEPRECATED_DEVICE_NAMES", "translated"]

#: Deprecated name -> the name Koordinator reads it as.
DEPRECATED_DEVICE_NAMES: Final[Mapping[str, str]] = {
    k.RESOURCE_GPU_DEPRECATED: k.RESOURCE_GPU,
    k.RESOURCE_GPU_CORE_DEPRECATED: k.RESOURCE_GPU_CORE,
    k.RESOURCE_GPU_MEMORY_DEPRECATED: k.RESOURCE_GPU_MEMORY,
    k.RESOURCE_GPU_MEMORY_RATIO_DEPRECATED: k.RESOURCE_GPU_MEMORY_RATIO,
    k.RESOURCE_RDMA_DEPRECATED: k.RESOURCE_RDMA,
    k.RESOURCE_FPGA_DEPRECATED: k.RESOURCE_FPGA,
}
_OLD: Final = frozenset(DEPRECATED_DEVICE_NAMES)


def translated(resources: ResourceList) -> ResourceList:
    """``resources`` with every deprecated device name whose successor it does not name
    renamed to that successor; the same object when there is nothing to rename."""
    if _OLD.isdisjoint(resources):  # the common case: one pass over a few names, in C
        return resources
    renamed: dict[str, int] = {}
    for name, amount in resources.items():
        new = DEPRECATED_DEVICE_NAMES.get(name)
        if new is not None and new not in resources:
            name = new
        renamed[name] = amount
    return ResourceList(renamed)
