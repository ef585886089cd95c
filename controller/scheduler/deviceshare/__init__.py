"""DeviceShare: GPUs (and NPUs), RDMA NICs and FPGAs shared or whole, as pure functions.

Per pod the scheduler calls :func:`prepare` once (PreFilter), then per node
:func:`allocate` (Filter and Reserve), :func:`score_node` (Score), :func:`apply` (assume) and
:func:`encode_allocation` (PreBind); :func:`numa_hints` answers the topology manager::

    request = prepare(pod, args=args, templates=templates)
    state = node_state(device, pods_on_node, node_labels=node.labels)
    allocation = allocate(request, state, args=args, templates=templates)
    state = apply(state, allocation)
    pod_annotations[ANNOTATION_DEVICE_ALLOCATED] = encode_allocation(allocation)
"""

from __future__ import annotations

from controller.scheduler.deviceshare.allocator import (
    NUMAHint,
    ReservedDevices,
    allocate,
    numa_hints,
)
from controller.scheduler.deviceshare.annotation import (
    AllocatedDevice,
    Allocation,
    adapter_annotations,
    encode_allocation,
    parse_allocation,
)
from controller.scheduler.deviceshare.args import DeviceShareArgs, decode_args
from controller.scheduler.deviceshare.requests import DeviceRequest, Rejection, TypeRequest, prepare
from controller.scheduler.deviceshare.scoring import normalize, score_node
from controller.scheduler.deviceshare.state import NodeDeviceState, apply, node_state, release
from controller.scheduler.deviceshare.templates import SharedTemplates, parse_templates

__all__ = [
    "AllocatedDevice",
    "Allocation",
    "DeviceRequest",
    "DeviceShareArgs",
    "NUMAHint",
    "NodeDeviceState",
    "Rejection",
    "ReservedDevices",
    "SharedTemplates",
    "TypeRequest",
    "adapter_annotations",
    "allocate",
    "apply",
    "decode_args",
    "encode_allocation",
    "node_state",
    "normalize",
    "numa_hints",
    "parse_allocation",
    "parse_templates",
    "prepare",
    "release",
    "score_node",
]
