"""What koord-manager's noderesource controller writes into a Node, worked out from
immutable inputs (agent-spec §5 and §8 "Node-resource sync"); the ``noderesource`` loop
(:mod:`.noderesource`) decides when to write it.

Batch and Mid (``kubernetes.io/batch-cpu``, ``batch-memory``, ``mid-cpu``, ``mid-memory``;
cpu in millicores, memory in bytes) come from the node's NodeMetric as the agent reports it,
the node's pods and the Node, under the node's ColocationStrategy; the arithmetic is
:mod:`apis.colocation`'s, the same the node agent runs (:func:`batch_mid`):

- **inputs**: capacity (cpu, memory); ``reserved`` = max(kubelet reserved = capacity -
  allocatable, the ``node.koordinator.sh/reservation`` annotation's resources, where
  ``reservedCPUs`` decides the cpu); ``systemUsed`` = the NodeMetric's ``systemUsage`` plus
  the usage of host applications above the band; the high-priority pods, Running or Pending
  (Batch: priority class not batch or free; Mid: not mid, batch or free), each using its
  ``podsMetric`` usage (an LSE pod's cpu: its request), else its request; the usage of pod
  metrics whose pod is not among the node's Running or Pending pods counts as high-priority
  use when their priority is not batch or free.
- **dynamic Mid** takes the NodeMetric's ``prodReclaimableMetric`` (missing: 0), limited by
  the node's unused capacity (capacity - ``nodeUsage``; no usage: 0).
- **reset** (the resources removed): colocation disabled, no NodeMetric, or its
  ``updateTime`` missing or more than ``degradeTimeMinutes`` old.

Device resources are :func:`apis.noderesources.accelerator_resources` of the node's Device,
those koord-manager writes (:data:`~apis.noderesources.MANAGER_DEVICE_RESOURCES`); a Node
without a Device or without a healthy GPU has none. Its ``gpu-vendor``, ``gpu-model`` and
``gpu-driver-version`` labels go onto the Node.

Not computed (as on the node agent): NUMA-level Batch resources in the NodeResourceTopology
and third-party allocations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import msgspec

from apis import bounded, colocation
from apis import constants as k
from apis.core import Node, Pod, pod_requests
from apis.noderesources import MANAGER_DEVICE_RESOURCES, accelerator_resources, device_labels
from apis.qos import PriorityClass, QoSClass, pod_classes
from apis.quantity import QuantityError
from apis.resources import ResourceList
from apis.scheduling import Device
from apis.slo import ColocationStrategy, NodeMetric, NodeMetricStatus, PodMetricInfo

__all__ = [
    "BATCH_MID_RESOURCES",
    "OWNED_RESOURCES",
    "BatchMid",
    "batch_mid",
    "device_resources",
    "fresh_until",
    "node_reserved",
    "with_resources",
]

_CPU: Final = k.RESOURCE_CPU
_MEMORY: Final = k.RESOURCE_MEMORY
_RESOURCES: Final = (_CPU, _MEMORY)
#: The Batch and Mid resources, in the order written.
BATCH_MID_RESOURCES: Final = (
    k.RESOURCE_BATCH_CPU,
    k.RESOURCE_BATCH_MEMORY,
    k.RESOURCE_MID_CPU,
    k.RESOURCE_MID_MEMORY,
)
#: Every resource of a Node's capacity and allocatable the loop writes; no other is touched.
OWNED_RESOURCES: Final = frozenset(BATCH_MID_RESOURCES) | MANAGER_DEVICE_RESOURCES
#: Pod phases whose pods hold their resources.
_ACTIVE: Final = frozenset({"Running", "Pending"})
_CLASSES: Final[Mapping[str, PriorityClass]] = {c.value: c for c in PriorityClass}

#: Why the Batch and Mid resources are reset.
DISABLED: Final = "colocation is disabled"
NO_METRIC: Final = "the node has no NodeMetric"
NO_UPDATE_TIME: Final = "its NodeMetric has no updateTime"
STALE: Final = "its NodeMetric is older than degradeTimeMinutes"


class BatchMid(msgspec.Struct, frozen=True, kw_only=True):
    """One node's Batch and Mid amounts, or why they are reset."""

    #: The four amounts; None: reset (removed from the Node).
    resources: ResourceList | None
    #: Why they are reset ("" when they are not).
    reset: str = ""
    #: Labels and annotations that were ignored, and why.
    ignored: tuple[str, ...] = ()


class _Reservation(msgspec.Struct, frozen=True, kw_only=True):
    resources: dict[str, Any] = {}
    reserved_cpus: str = msgspec.field(default="", name="reservedCPUs")
    apply_policy: str = msgspec.field(default="", name="applyPolicy")


def node_reserved(node: Node) -> tuple[ResourceList, str | None]:
    """cpu and memory kept from pods: per resource the larger of the kubelet's reservation
    (capacity - allocatable) and the ``node.koordinator.sh/reservation`` annotation's; and
    why the annotation was ignored, if it was."""
    capacity = node.status.capacity
    allocatable = node.status.allocatable
    reserved = {
        name: max(capacity[name] - allocatable.get(name, capacity[name]), 0)
        for name in _RESOURCES
        if name in capacity
    }
    key = k.ANNOTATION_NODE_RESERVATION
    text = node.metadata.annotations.get(key)
    if not text:
        return ResourceList(reserved), None
    try:
        raw = bounded.decode(text, _Reservation, key, depth=bounded.MAX_DEPTH)
        annotated = dict(
            ResourceList.parse({n: str(v) for n, v in raw.resources.items()}).mask(_RESOURCES)
        )
        if raw.reserved_cpus:
            annotated[_CPU] = len(bounded.parse_cpu_list(raw.reserved_cpus, key)) * 1000
    except (bounded.BoundedError, QuantityError) as err:
        return ResourceList(reserved), f"annotation {key} ignored: {err}"
    for name, amount in annotated.items():
        reserved[name] = max(reserved.get(name, 0), amount)
    return ResourceList(reserved), None


def fresh_until(metric: NodeMetric | None, strategy: ColocationStrategy) -> datetime | None:
    """When the NodeMetric's report goes stale (None: it has none)."""
    if metric is None or metric.status.update_time is None:
        return None
    minutes = strategy.degrade_time_minutes
    return metric.status.update_time + timedelta(minutes=15 if minutes is None else minutes)


def _class(priority: str) -> PriorityClass:
    return _CLASSES.get(priority, PriorityClass.NONE)


def _amounts(resources: Mapping[str, int]) -> dict[str, int]:
    return {name: resources.get(name, 0) for name in _RESOURCES}


def _system_used(status: NodeMetricStatus, band: frozenset[PriorityClass]) -> dict[str, int]:
    info = status.node_metric
    used = _amounts(info.system_usage.resources) if info is not None else _amounts({})
    for app in status.host_application_metric:
        if _class(app.priority) not in band:
            for name, amount in _amounts(app.usage.resources).items():
                used[name] += amount
    return used


def _percent(value: int | None, default: int) -> int:
    return default if value is None else value


def batch_mid(
    node: Node,
    pods: Sequence[Pod],
    metric: NodeMetric | None,
    strategy: ColocationStrategy,
    now: datetime,
) -> BatchMid:
    """The node's Batch and Mid amounts (``pods``: those bound to it, any phase)."""
    if not strategy.enable:
        return BatchMid(resources=None, reset=DISABLED)
    if metric is None:
        return BatchMid(resources=None, reset=NO_METRIC)
    until = fresh_until(metric, strategy)
    if until is None:
        return BatchMid(resources=None, reset=NO_UPDATE_TIME)
    if now > until:
        return BatchMid(resources=None, reset=STALE)
    ignored: list[str] = []

    def note(key: str, text: str, why: str) -> None:
        ignored.append(f"label {key}={text!r} {why}; ignored")

    labels = node.metadata.labels
    capacity = node.status.capacity
    reserved, problem = node_reserved(node)
    if problem is not None:
        ignored.append(problem)
    status = metric.status
    usage: dict[tuple[str, str], PodMetricInfo] = {
        (m.namespace, m.name): m for m in status.pods_metric
    }
    active = [p for p in pods if p.status.phase in _ACTIVE]
    listed = {(p.metadata.namespace, p.metadata.name) for p in active}
    batch_pairs: dict[str, list[tuple[int, int]]] = {name: [] for name in _RESOURCES}
    mid_requests = dict.fromkeys(_RESOURCES, 0)
    for pod in active:
        _, qos, priority = pod_classes(pod)
        request = pod_requests(pod)
        if priority not in colocation.MID_BAND:
            for name in _RESOURCES:
                mid_requests[name] += request.get_amount(name)
        if priority in colocation.BATCH_BAND:
            continue
        found = usage.get((pod.metadata.namespace, pod.metadata.name))
        used = _amounts(found.pod_usage.resources) if found is not None else {}
        for name in _RESOURCES:
            asked = request.get_amount(name)
            counts_request = found is None or (name == _CPU and qos is QoSClass.LSE)
            batch_pairs[name].append((asked, asked if counts_request else used[name]))
    for key, dangling in usage.items():
        if key not in listed and _class(dangling.priority) not in colocation.BATCH_BAND:
            for name, amount in _amounts(dangling.pod_usage.resources).items():
                batch_pairs[name].append((0, amount))
    batch_system = _system_used(status, colocation.BATCH_BAND)
    batch: dict[str, int] = {}
    for name in _RESOURCES:
        cpu = name == _CPU
        ratio = colocation.ratio_label(labels, colocation.RECLAIM_RATIO_LABELS[name], ignored=note)
        configured = (
            _percent(strategy.cpu_reclaim_threshold_percent, 60)
            if cpu
            else _percent(strategy.memory_reclaim_threshold_percent, 65)
        )
        batch[name] = colocation.batch_amount(
            name,
            capacity=capacity.get_amount(name),
            reclaim_percent=colocation.reclaim_percent(configured, ratio),
            system_used=batch_system[name],
            reserved=reserved.get_amount(name),
            hp=colocation.high_priority(batch_pairs[name]),
            policy=(
                (strategy.cpu_calculate_policy if cpu else strategy.memory_calculate_policy)
                or colocation.USAGE
            ),
            threshold_percent=(
                strategy.batch_cpu_threshold_percent
                if cpu
                else strategy.batch_memory_threshold_percent
            ),
        )
    batch[_CPU] = colocation.normalized(
        batch[_CPU],
        colocation.normalization_ratio(
            node.metadata.annotations.get(k.ANNOTATION_NODE_CPU_NORMALIZATION_RATIO)
        ),
    )
    mid = _mid(node, status, strategy, reserved, mid_requests, note)
    return BatchMid(
        resources=ResourceList(
            {
                k.RESOURCE_BATCH_CPU: batch[_CPU],
                k.RESOURCE_BATCH_MEMORY: batch[_MEMORY],
                k.RESOURCE_MID_CPU: mid[_CPU],
                k.RESOURCE_MID_MEMORY: mid[_MEMORY],
            }
        ),
        ignored=tuple(ignored),
    )


def _mid(
    node: Node,
    status: NodeMetricStatus,
    strategy: ColocationStrategy,
    reserved: ResourceList,
    requests: Mapping[str, int],
    note: colocation.Ignored,
) -> dict[str, int]:
    capacity = node.status.capacity
    thresholds = {
        _CPU: _percent(strategy.mid_cpu_threshold_percent, 100),
        _MEMORY: _percent(strategy.mid_memory_threshold_percent, 100),
    }
    if strategy.mid_reclaim_mode == colocation.MID_RECLAIM_STATIC:
        percents = {
            _CPU: _percent(strategy.mid_static_cpu_reserved_percent, 0),
            _MEMORY: _percent(strategy.mid_static_memory_reserved_percent, 0),
        }
        return {
            name: colocation.mid_static_amount(
                capacity=capacity.get_amount(name),
                reserved_percent=colocation.mid_static_percent(
                    percent,
                    colocation.ratio_label(
                        node.metadata.labels, colocation.MID_STATIC_RATIO_LABELS[name], ignored=note
                    ),
                ),
                threshold_percent=thresholds[name],
            )
            for name, percent in percents.items()
        }
    system = _system_used(status, colocation.MID_BAND)
    info = status.node_metric
    node_usage = info.node_usage.resources if info is not None else ResourceList()
    reclaimable = (
        status.prod_reclaimable_metric.resource.resources
        if status.prod_reclaimable_metric is not None
        else ResourceList()
    )
    result: dict[str, int] = {}
    for name in _RESOURCES:
        cap = capacity.get_amount(name)
        result[name] = colocation.mid_dynamic_amount(
            capacity=cap,
            prod_reclaimable=reclaimable.get_amount(name),
            node_unused=cap - node_usage[name] if name in node_usage else 0,
            reserved=reserved.get_amount(name),
            system_used=system[name],
            hp_request=requests[name],
            unallocated_percent=_percent(strategy.mid_unallocated_percent, 0),
            threshold_percent=thresholds[name],
        )
    return result


def device_resources(device: Device | None) -> ResourceList:
    """The device resources koord-manager writes into the Device's Node."""
    return accelerator_resources(device).mask(MANAGER_DEVICE_RESOURCES)


def with_resources(
    node: Node,
    batch_mid_resources: Mapping[str, int],
    devices: Mapping[str, int],
    device: Device | None,
) -> Node:
    """``node`` with the owned resources of its capacity and allocatable replaced by
    ``batch_mid_resources`` and ``devices`` (absent: removed) and its Device's GPU labels
    set; everything else as it is."""
    wanted = {**batch_mid_resources, **devices}
    status = node.status

    def replaced(resources: ResourceList) -> ResourceList:
        kept = {n: v for n, v in resources.items() if n not in OWNED_RESOURCES}
        return ResourceList({**kept, **wanted})

    capacity = replaced(status.capacity)
    # no allocatable reported reads as the capacity: so it is written
    allocatable = replaced(status.allocatable or status.capacity)
    labels = {**node.metadata.labels, **device_labels(device)}
    if (
        capacity == status.capacity
        and allocatable == status.allocatable
        and labels == node.metadata.labels
    ):
        return node
    return msgspec.structs.replace(
        node,
        metadata=msgspec.structs.replace(node.metadata, labels=labels),
        status=msgspec.structs.replace(status, capacity=capacity, allocatable=allocatable),
    )
