"""Device and node scores: LeastAllocated spreads pods over cards, MostAllocated packs them.

For each weighted resource the device has, ``requested = used + request``; LeastAllocated
scores ``(total - requested) * 100 / total`` (0 when over), MostAllocated
``requested * 100 / total`` (at most 100); a device's score is the weighted mean. A node is
scored the same way over the sums of each requested device type (one device's worth of the
request added), the types' scores added up; :func:`normalize` rescales a node list to 0..100.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from apis.resources import ResourceList
from controller.scheduler.deviceshare.args import DEFAULT_ARGS, MOST_ALLOCATED, DeviceShareArgs
from controller.scheduler.deviceshare.requests import DeviceRequest
from controller.scheduler.deviceshare.state import DeviceSlot, NodeDeviceState, demand

__all__ = [
    "MAX_SCORE",
    "device_score",
    "normalize",
    "resource_score",
    "score_node",
    "weighted_score",
]

MAX_SCORE: Final = 100


def resource_score(total: int, requested: int, *, most_allocated: bool) -> int:
    if total <= 0:
        return 0
    if most_allocated:
        return min(requested, total) * MAX_SCORE // total
    if requested > total:
        return 0
    return (total - requested) * MAX_SCORE // total


def weighted_score(
    total: Mapping[str, int],
    free: Mapping[str, int],
    request: Mapping[str, int],
    weights: Mapping[str, int],
    *,
    most_allocated: bool,
) -> int:
    """Weighted mean over the weighted resources ``total`` has; 0 when it has none."""
    score = weight_sum = 0
    for name, weight in weights.items():
        capacity = total.get(name, 0)
        if capacity <= 0:
            continue
        requested = capacity - free.get(name, 0) + request.get(name, 0)
        score += resource_score(capacity, requested, most_allocated=most_allocated) * weight
        weight_sum += weight
    return score // weight_sum if weight_sum else 0


def device_score(
    slot: DeviceSlot, request: Mapping[str, int], args: DeviceShareArgs = DEFAULT_ARGS
) -> int:
    """How well ``request`` (one device's share) suits ``slot``."""
    strategy = args.scoring_strategy
    return weighted_score(
        slot.capacity,
        slot.free,
        demand(slot, request),
        strategy.weights,
        most_allocated=strategy.type == MOST_ALLOCATED,
    )


def score_node(
    request: DeviceRequest, state: NodeDeviceState, args: DeviceShareArgs = DEFAULT_ARGS
) -> int:
    """The node's score for the pod, before normalization (types' scores added)."""
    strategy = args.scoring_strategy
    weights = strategy.weights
    most = strategy.type == MOST_ALLOCATED
    total = 0
    for device_type, wanted in request.types.items():
        healthy = [slot for slot in state.of_type(device_type) if slot.healthy]
        if not healthy:
            continue
        capacity = ResourceList.total(slot.capacity for slot in healthy)
        free = ResourceList.total(slot.free for slot in healthy)
        one = demand(healthy[0], wanted.per_device)
        total += weighted_score(capacity, free, one, weights, most_allocated=most)
    return total


def normalize(scores: Mapping[str, int]) -> dict[str, int]:
    """Scores rescaled so the best node has :data:`MAX_SCORE` (all zero stays zero)."""
    best = max(scores.values(), default=0)
    if best <= 0:
        return dict.fromkeys(scores, 0)
    return {node: score * MAX_SCORE // best for node, score in scores.items()}
