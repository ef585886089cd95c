"""Properties: pods allocated one after another never overfill a device or use a sick one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.scheduling import Device, DeviceInfo
from controller.scheduler.deviceshare.allocator import allocate
from controller.scheduler.deviceshare.annotation import Allocation, encode_allocation
from controller.scheduler.deviceshare.args import (
    LEAST_ALLOCATED,
    MOST_ALLOCATED,
    DeviceShareArgs,
    ScoringStrategy,
)
from controller.scheduler.deviceshare.requests import DeviceRequest, prepare
from controller.scheduler.deviceshare.state import apply, node_state
from tests.controller.deviceshare.builders import GIB, device, gpu, pod, rdma

_REQUESTS = st.one_of(
    st.integers(1, 3).map(lambda n: {"nvidia.com/gpu": str(n)}),
    st.sampled_from([10, 25, 50, 75, 100, 200]).map(lambda p: {k.RESOURCE_GPU: str(p)}),
    st.tuples(st.integers(1, 100), st.integers(1, 80)).map(
        lambda cm: {k.RESOURCE_GPU_CORE: str(cm[0]), k.RESOURCE_GPU_MEMORY: f"{cm[1]}Gi"}
    ),
    st.tuples(st.integers(1, 100), st.integers(1, 100)).map(
        lambda cr: {k.RESOURCE_GPU_CORE: str(cr[0]), k.RESOURCE_GPU_MEMORY_RATIO: str(cr[1])}
    ),
    st.integers(1, 100).map(lambda r: {k.RESOURCE_GPU_MEMORY_RATIO: str(r)}),
    st.sampled_from([(2, "100", "8Gi"), (2, "50", "30Gi"), (3, "150", "3Gi")]).map(
        lambda s: {
            k.RESOURCE_GPU_SHARED: str(s[0]),
            k.RESOURCE_GPU_CORE: s[1],
            k.RESOURCE_GPU_MEMORY: s[2],
        }
    ),
    st.tuples(st.integers(1, 2), st.sampled_from(["1", "50", "100", "200"])).map(
        lambda gr: {"nvidia.com/gpu": str(gr[0]), k.RESOURCE_RDMA: gr[1]}
    ),
)


@st.composite
def _devices(draw: st.DrawFn) -> Device:
    health = draw(st.lists(st.booleans(), min_size=1, max_size=8))
    sgpu = draw(st.sampled_from([0, 3]))
    infos: list[DeviceInfo] = [
        gpu(
            minor,
            memory=80 * GIB,
            numa=minor // 4,
            pcie=f"pci{minor // 2}",
            healthy=healthy,
            extra={k.RESOURCE_METAX_SGPU: sgpu} if sgpu else None,
        )
        for minor, healthy in enumerate(health)
    ]
    nics = draw(st.lists(st.booleans(), max_size=4))
    infos += [rdma(m, numa=m // 2, pcie=f"pci{m}", healthy=h) for m, h in enumerate(nics)]
    return device(infos, vendor="metax" if sgpu else "nvidia")


@settings(max_examples=150, deadline=None)
@given(
    dev=_devices(),
    pods=st.lists(_REQUESTS, min_size=1, max_size=25),
    strategy=st.sampled_from([LEAST_ALLOCATED, MOST_ALLOCATED]),
)
def test_devices_never_overfill_and_only_healthy_ones_are_used(
    dev: Device, pods: list[dict[str, str]], strategy: str
) -> None:
    args = DeviceShareArgs(scoring_strategy=ScoringStrategy(type=strategy))
    state = node_state(dev)
    placed = []
    for index, requests in enumerate(pods):
        request = prepare(pod(requests))
        assert isinstance(request, DeviceRequest)
        result = allocate(request, state, args=args)
        if not isinstance(result, Allocation):
            continue
        for device_type, devices in result.devices.items():
            for entry in devices:
                slot = state.slot(device_type, entry.minor)
                assert slot is not None
                assert slot.healthy
        state = apply(state, result)
        placed.append(
            pod(
                requests,
                name=f"p{index}",
                annotations={k.ANNOTATION_DEVICE_ALLOCATED: encode_allocation(result)},
            )
        )
        for slot in state.devices:
            for name, amount in slot.used.items():
                assert amount <= slot.total.get_amount(name), (slot, name)
    # the annotations written describe the state the assumes built
    rebuilt = node_state(dev, placed)
    assert [s.used for s in rebuilt.devices] == [s.used for s in state.devices]
