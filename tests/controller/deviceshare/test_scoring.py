"""Score: device and node scores under LeastAllocated and MostAllocated."""

from __future__ import annotations

import pytest

from apis import constants as k
from apis.resources import ResourceList
from controller.scheduler.deviceshare.allocator import allocate
from controller.scheduler.deviceshare.annotation import Allocation
from controller.scheduler.deviceshare.args import MOST_ALLOCATED, DeviceShareArgs, ScoringStrategy
from controller.scheduler.deviceshare.requests import DeviceRequest, prepare
from controller.scheduler.deviceshare.scoring import (
    device_score,
    normalize,
    resource_score,
    score_node,
    weighted_score,
)
from controller.scheduler.deviceshare.state import NodeDeviceState, apply, node_state
from tests.controller.deviceshare.builders import GIB, device, gpu, h100_node, pod

MOST = DeviceShareArgs(scoring_strategy=ScoringStrategy(type=MOST_ALLOCATED))


@pytest.mark.parametrize(
    ("total", "requested", "least", "most"),
    [
        (100, 0, 100, 0),
        (100, 30, 70, 30),
        (100, 100, 0, 100),
        (100, 150, 0, 100),  # over: least 0, most capped
        (800, 100, 87, 12),
        (0, 10, 0, 0),
    ],
)
def test_resource_score(total: int, requested: int, least: int, most: int) -> None:
    assert resource_score(total, requested, most_allocated=False) == least
    assert resource_score(total, requested, most_allocated=True) == most


def test_weighted_score_is_the_mean_over_resources_the_device_has() -> None:
    weights = {"a": 1, "b": 3, "absent": 5}
    total = {"a": 100, "b": 100}
    free = {"a": 100, "b": 50}
    # a: requested 10 -> 90; b: requested 60 -> 40; (90 + 3*40) / 4 = 52
    assert weighted_score(total, free, {"a": 10, "b": 10}, weights, most_allocated=False) == 52
    assert weighted_score({}, {}, {"a": 1}, weights, most_allocated=False) == 0


def _request(requests: dict[str, str]) -> DeviceRequest:
    result = prepare(pod(requests))
    assert isinstance(result, DeviceRequest)
    return result


def test_device_score_counts_memory_from_ratio() -> None:
    state = node_state(device([gpu(0, memory=80 * GIB)]))
    (slot,) = state.devices
    # ratio 50 and memory 40Gi both half a card
    assert device_score(slot, ResourceList({k.RESOURCE_GPU_MEMORY_RATIO: 50})) == 50
    assert device_score(slot, ResourceList({k.RESOURCE_GPU_MEMORY_RATIO: 50}), MOST) == 50
    assert device_score(slot, ResourceList({k.RESOURCE_GPU_MEMORY_RATIO: 25}), MOST) == 25


def _busy(gpus: int) -> NodeDeviceState:
    state = node_state(h100_node())
    if gpus:
        result = allocate(_request({"nvidia.com/gpu": str(gpus)}), state)
        assert isinstance(result, Allocation)
        state = apply(state, result)
    return state


def test_least_allocated_prefers_emptier_nodes_most_allocated_fuller_ones() -> None:
    request = _request({k.RESOURCE_GPU: "50"})
    empty, busy = _busy(0), _busy(4)
    assert score_node(request, empty) > score_node(request, busy)
    assert score_node(request, empty, MOST) < score_node(request, busy, MOST)
    # one device's worth of the request only: 50% of one card out of eight
    assert score_node(request, empty) == (800 - 50) * 100 // 800
    assert score_node(_request({"nvidia.com/gpu": "4"}), empty) == (800 - 100) * 100 // 800


def test_node_scores_add_up_over_device_types() -> None:
    state = node_state(h100_node(rdma_nics=True))
    gpu_only = score_node(_request({"nvidia.com/gpu": "1"}), state)
    both = score_node(_request({"nvidia.com/gpu": "1", k.RESOURCE_RDMA: "100"}), state)
    assert both == gpu_only + (400 - 100) * 100 // 400


def test_a_node_without_the_device_type_scores_zero() -> None:
    assert score_node(_request({"nvidia.com/gpu": "1"}), node_state(None)) == 0


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ({"a": 50, "b": 100, "c": 0}, {"a": 50, "b": 100, "c": 0}),
        ({"a": 87, "b": 174}, {"a": 50, "b": 100}),
        ({"a": 0, "b": 0}, {"a": 0, "b": 0}),
        ({}, {}),
    ],
)
def test_normalize(scores: dict[str, int], expected: dict[str, int]) -> None:
    assert normalize(scores) == expected
