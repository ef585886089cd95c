"""The Device objects the node agent reports (its simulated profiles) through DeviceShare."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from agent.devices import simulated
from agent.devices.base import build_device
from apis import constants as k
from apis.core import Node
from apis.meta import ObjectMeta
from controller.scheduler.deviceshare.allocator import allocate
from controller.scheduler.deviceshare.annotation import Allocation, adapter_annotations
from controller.scheduler.deviceshare.args import MOST_ALLOCATED, DeviceShareArgs, ScoringStrategy
from controller.scheduler.deviceshare.requests import DeviceRequest, prepare
from controller.scheduler.deviceshare.state import NodeDeviceState, apply, node_state
from controller.scheduler.deviceshare.templates import parse_templates
from tests.controller.deviceshare.builders import pod

BINPACK = DeviceShareArgs(scoring_strategy=ScoringStrategy(type=MOST_ALLOCATED))


def _node(profile: str) -> NodeDeviceState:
    node = Node(metadata=ObjectMeta(name="sim-1", uid="u-1"))
    result = simulated.simulate([simulated.profile(profile)], "sim-1")
    return node_state(build_device(node, [result]))


def _allocate(
    state: NodeDeviceState, requests: Mapping[str, str], args: DeviceShareArgs = BINPACK
) -> Allocation:
    request = prepare(pod(requests), args=args, templates=TEMPLATES)
    assert isinstance(request, DeviceRequest), request
    result = allocate(request, state, args=args, templates=TEMPLATES)
    assert isinstance(result, Allocation), result
    return result


TEMPLATES = parse_templates(
    {
        "data.yaml": (
            "huawei-Ascend-910B3:\n"
            "  vir10_3c_32g: {huawei.com/npu-core: '10', huawei.com/npu-cpu: '3',"
            " koordinator.sh/gpu-memory: 32Gi}\n"
        )
    }
)


def test_h100_pairs_share_a_pcie_switch() -> None:
    state = _node("nvidia-h100")
    first = _allocate(state, {"nvidia.com/gpu": "1"})
    state = apply(state, first)
    pair = _allocate(state, {"nvidia.com/gpu": "2"})
    switches = {s.pcie for m in pair.minors("gpu") if (s := state.slot("gpu", m)) is not None}
    assert len(switches) == 1
    assert first.minors("gpu") == (0,)
    assert pair.minors("gpu") == (2, 3)


def test_metax_c500_sgpu_shares_and_annotation() -> None:
    state = _node("metax-c500-sgpu")
    assert (state.vendor, state.model) == ("metax", "C500")
    share = _allocate(state, {k.RESOURCE_GPU_CORE: "25", k.RESOURCE_GPU_MEMORY: "16Gi"})
    (entry,) = share.of("gpu")
    assert entry.resources.get_amount(k.RESOURCE_GPU_MEMORY_RATIO) == 25
    out = adapter_annotations(
        share, vendor=state.vendor, model=state.model, node_name="sim-1", now_ns=1
    )
    assert out.annotations[k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED] == (
        f'[[{{"uuid":"{entry.id}","compute":25,"vRam":16384}}]]'
    )
    assert out.node_lock == k.ANNOTATION_HAMI_MUTEX_LOCK
    for _ in range(15):
        state = apply(
            state, _allocate(state, {k.RESOURCE_GPU_CORE: "1", k.RESOURCE_GPU_MEMORY: "1Gi"})
        )
    slot = state.slot("gpu", 0)
    assert slot is not None
    assert slot.used.get_amount(k.RESOURCE_METAX_SGPU) == 15
    state = apply(state, share)
    assert _allocate(state, {k.RESOURCE_GPU_CORE: "1", k.RESOURCE_GPU_MEMORY: "1Gi"}).minors(
        "gpu"
    ) == (1,)


def test_ascend_910b3_vnpu_annotation() -> None:
    state = _node("ascend-910b3")
    vnpu = _allocate(
        state,
        {
            k.RESOURCE_GPU_SHARED: "1",
            k.RESOURCE_HUAWEI_NPU_CORE: "10",
            k.RESOURCE_HUAWEI_NPU_CPU: "3",
            k.RESOURCE_GPU_MEMORY: "32Gi",
        },
    )
    out = adapter_annotations(
        vnpu, vendor=state.vendor, model=state.model, node_name="sim-1", now_ns=1
    )
    assert out.annotations[k.ANNOTATION_HUAWEI_NPU_CORE] == "0-vir10_3c_32g"


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ({k.RESOURCE_GPU_MEMORY_RATIO: "200"}, "Ascend310P-0,Ascend310P-1"),
        ({k.RESOURCE_HUAWEI_NPU_CORE: "8", k.RESOURCE_GPU_MEMORY_RATIO: "100"}, "Ascend310P-0"),
    ],
)
def test_ascend_300i_duo_annotation(requests: Mapping[str, str], expected: str) -> None:
    state = _node("ascend-310p3-300i-duo")
    assert state.model == k.MODEL_ASCEND_310P3_300I_DUO
    cards = _allocate(state, requests)
    out = adapter_annotations(
        cards, vendor=state.vendor, model=state.model, node_name="sim-1", now_ns=1
    )
    assert out.annotations[k.ANNOTATION_HUAWEI_ASCEND_310P] == expected
    assert k.ANNOTATION_HUAWEI_NPU_CORE not in out.annotations
