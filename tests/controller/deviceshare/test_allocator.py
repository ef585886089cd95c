"""Filter/Reserve: which devices a pod gets on a node, and why it gets none."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import msgspec
import pytest

from apis import constants as k
from apis.core import Pod
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo, VirtualFunction, VirtualFunctionGroup
from controller.scheduler.deviceshare.allocator import (
    ALIGNED,
    RESTRICTED,
    ReservedDevices,
    allocate,
    numa_hints,
)
from controller.scheduler.deviceshare.annotation import AllocatedDevice, Allocation
from controller.scheduler.deviceshare.args import (
    DEFAULT_ARGS,
    MOST_ALLOCATED,
    DeviceShareArgs,
    ScoringStrategy,
    UnsupportedModel,
)
from controller.scheduler.deviceshare.requests import (
    UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    DeviceRequest,
    Rejection,
    prepare,
)
from controller.scheduler.deviceshare.state import (
    ANNOTATION_SGPU_QOS_POLICIES,
    NodeDeviceState,
    apply,
    node_state,
)
from controller.scheduler.deviceshare.templates import (
    NO_TEMPLATES,
    SharedTemplates,
    parse_templates,
)
from tests.controller.deviceshare.builders import GIB, device, gpu, h100_node, npu, pod, rdma

BINPACK = DeviceShareArgs(scoring_strategy=ScoringStrategy(type=MOST_ALLOCATED))


def _request(
    requests: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    templates: SharedTemplates | None = None,
) -> DeviceRequest:
    result = prepare(
        pod(requests, annotations=annotations, labels=labels),
        templates=templates if templates is not None else NO_TEMPLATES,
    )
    assert isinstance(result, DeviceRequest), result
    return result


def _allocated(result: Allocation | Rejection) -> Allocation:
    assert isinstance(result, Allocation), result
    return result


def _place(
    state: NodeDeviceState, requests: Mapping[str, str], args: DeviceShareArgs = DEFAULT_ARGS
) -> tuple[NodeDeviceState, Allocation | Rejection]:
    """Allocate and, when it worked, assume the pod on the node."""
    result = allocate(_request(requests), state, args=args)
    if isinstance(result, Allocation):
        state = apply(state, result)
    return state, result


def _holders(*taken: int) -> list[Pod]:
    """Pods each holding one of the listed minors whole."""
    return [
        pod(
            {"nvidia.com/gpu": "1"},
            name=f"holder-{minor}",
            annotations={
                k.ANNOTATION_DEVICE_ALLOCATED: json.dumps(
                    {
                        "gpu": [
                            {
                                "minor": minor,
                                "resources": {
                                    k.RESOURCE_GPU_CORE: "100",
                                    k.RESOURCE_GPU_MEMORY_RATIO: "100",
                                    k.RESOURCE_GPU_MEMORY: "80Gi",
                                },
                            }
                        ]
                    }
                )
            },
        )
        for minor in taken
    ]


def _h100(*taken: int) -> NodeDeviceState:
    """An H100 node whose listed minors are each held whole by a pod."""
    return node_state(h100_node(), _holders(*taken))


# --- whole GPUs and topology ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("taken", "cards", "minors"),
    [
        ((), 1, (0,)),
        ((), 2, (0, 1)),  # both behind one PCIe switch
        ((0,), 1, (1,)),  # packs the switch already in use
        ((0,), 2, (2, 3)),  # the next switch with two free GPUs
        ((0, 2), 2, (4, 5)),
        ((0, 2, 4, 6), 2, (1, 3)),  # no switch has two free: NUMA node 0 does
        ((), 4, (0, 1, 2, 3)),  # one NUMA node
        ((1,), 4, (4, 5, 6, 7)),
        ((1, 5), 4, (0, 2, 3, 4)),  # no NUMA node has four free: the node's lowest minors
        ((), 8, tuple(range(8))),
    ],
)
def test_whole_gpus_take_the_tightest_topology_scope(
    taken: Sequence[int], cards: int, minors: Sequence[int]
) -> None:
    result = _allocated(allocate(_request({"nvidia.com/gpu": str(cards)}), _h100(*taken)))
    assert result.minors("gpu") == tuple(minors)


def test_whole_gpus_beyond_the_free_ones_are_insufficient() -> None:
    assert allocate(_request({"nvidia.com/gpu": "9"}), _h100()) == Rejection(
        UNSCHEDULABLE, "Insufficient gpu devices"
    )
    assert allocate(_request({"nvidia.com/gpu": "2"}), _h100(*range(7))) == Rejection(
        UNSCHEDULABLE, "Insufficient gpu devices"
    )


@pytest.mark.parametrize(
    ("scope", "cards", "taken", "expected"),
    [
        (
            "PCIe",
            2,
            (0, 2, 4, 6),
            Rejection(UNSCHEDULABLE, "Insufficient Topology Scoped GPU Devices"),
        ),
        ("PCIe", 2, (0,), (2, 3)),
        (
            "NUMANode",
            4,
            (0, 4),
            Rejection(UNSCHEDULABLE, "Insufficient Topology Scoped GPU Devices"),
        ),
        ("NUMANode", 3, (0, 4), (1, 2, 3)),
        ("Node", 8, (), tuple(range(8))),
        ("Device", 2, (), Rejection(UNSCHEDULABLE, "Insufficient Topology Scoped GPU Devices")),
    ],
)
def test_required_topology_scope_is_mandatory(
    scope: str, cards: int, taken: Sequence[int], expected: object
) -> None:
    hint = {
        k.ANNOTATION_DEVICE_ALLOCATE_HINT: json.dumps({"gpu": {"requiredTopologyScope": scope}})
    }
    result = allocate(_request({"nvidia.com/gpu": str(cards)}, hint), _h100(*taken))
    if isinstance(expected, Rejection):
        assert result == expected
    else:
        assert _allocated(result).minors("gpu") == expected


def test_a_required_scope_needs_a_topology_tree() -> None:
    state = node_state(device([gpu(0), gpu(1)]))
    hint = {k.ANNOTATION_DEVICE_ALLOCATE_HINT: '{"gpu": {"requiredTopologyScope": "PCIe"}}'}
    assert allocate(_request({"nvidia.com/gpu": "2"}, hint), state) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) missing GPU Device Topology Tree"
    )
    # without a required scope the default path places them
    assert _allocated(allocate(_request({"nvidia.com/gpu": "2"}), state)).minors("gpu") == (0, 1)


def test_numa_affinity_restricts_the_candidates() -> None:
    request = _request({"nvidia.com/gpu": "2"})
    result = allocate(request, _h100(), numa_nodes=frozenset({1}))
    assert _allocated(result).minors("gpu") == (4, 5)
    ignoring = DeviceShareArgs(disable_device_numa_topology_alignment=True)
    result = allocate(request, _h100(), numa_nodes=frozenset({1}), args=ignoring)
    assert _allocated(result).minors("gpu") == (0, 1)


def test_whole_gpu_entries_carry_memory_and_ratio() -> None:
    result = _allocated(allocate(_request({"nvidia.com/gpu": "1"}), _h100()))
    (entry,) = result.of("gpu")
    assert dict(entry.resources) == {
        k.RESOURCE_GPU_CORE: 100,
        k.RESOURCE_GPU_MEMORY_RATIO: 100,
        k.RESOURCE_GPU_MEMORY: 80 * GIB,
    }
    assert entry.id == "GPU-0"


# --- health, selectors, missing devices ---------------------------------------------------------


def test_unhealthy_devices_are_never_chosen() -> None:
    state = node_state(device([gpu(0, healthy=False), gpu(1), gpu(2, healthy=False)]))
    assert _allocated(allocate(_request({"nvidia.com/gpu": "1"}), state)).minors("gpu") == (1,)
    assert allocate(_request({"nvidia.com/gpu": "2"}), state) == Rejection(
        UNSCHEDULABLE, "Insufficient gpu devices"
    )
    assert allocate(_request({k.RESOURCE_GPU: "50"}), state) != Rejection(
        UNSCHEDULABLE, "Insufficient gpu devices"
    )


@pytest.mark.parametrize(
    "dev",
    [None, device([rdma(0, numa=0, pcie="p0")])],
    ids=["no-device-object", "no-gpus"],
)
def test_a_node_without_gpus_is_unresolvable(dev: Device | None) -> None:
    assert allocate(_request({"nvidia.com/gpu": "1"}), node_state(dev)) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "Insufficient gpu devices"
    )


def test_hint_selector_limits_devices() -> None:
    state = node_state(device([gpu(0), gpu(1, labels={"tier": "a"}), gpu(2, labels={"tier": "a"})]))
    hint = {
        k.ANNOTATION_DEVICE_ALLOCATE_HINT: json.dumps(
            {"gpu": {"selector": {"matchLabels": {"tier": "a"}}}}
        )
    }
    assert _allocated(allocate(_request({"nvidia.com/gpu": "2"}, hint), state)).minors("gpu") == (
        1,
        2,
    )
    assert allocate(_request({"nvidia.com/gpu": "3"}, hint), state) == Rejection(
        UNSCHEDULABLE, "Insufficient gpu devices"
    )


def test_preferred_minors_come_first() -> None:
    state = node_state(device([gpu(0), gpu(1), gpu(2)]))
    result = allocate(_request({k.RESOURCE_GPU: "50"}), state, preferred={"gpu": frozenset({2})})
    assert _allocated(result).minors("gpu") == (2,)


def test_a_designated_allocation_is_only_verified() -> None:
    value = json.dumps({"gpu": [{"minor": 5, "resources": {k.RESOURCE_GPU_CORE: "100"}}]})
    request = _request({"nvidia.com/gpu": "1"}, {k.ANNOTATION_DEVICE_ALLOCATED: value})
    assert _allocated(allocate(request, _h100())).minors("gpu") == (5,)
    assert allocate(request, _h100(5)) == Rejection(UNSCHEDULABLE, "Insufficient gpu devices")


# --- shared GPUs -------------------------------------------------------------------------------


def _two_cards() -> NodeDeviceState:
    return node_state(device([gpu(0), gpu(1)]))


@pytest.mark.parametrize(
    ("args", "expected"),
    [(DeviceShareArgs(), [(0,), (1,), (0,), (1,)]), (BINPACK, [(0,), (0,), (1,), (1,)])],
    ids=["LeastAllocated-spreads", "MostAllocated-packs"],
)
def test_shared_gpus_spread_or_pack(args: DeviceShareArgs, expected: list[tuple[int, ...]]) -> None:
    state = _two_cards()
    got = []
    for _ in expected:
        state, result = _place(state, {k.RESOURCE_GPU: "50"}, args=args)
        got.append(_allocated(result).minors("gpu"))
    assert got == expected
    state, result = _place(state, {k.RESOURCE_GPU: "50"}, args=args)
    assert result == Rejection(UNSCHEDULABLE, "Insufficient gpu devices")


@pytest.mark.parametrize(
    ("requests", "resources"),
    [
        (
            {k.RESOURCE_GPU_MEMORY: "40Gi"},
            {k.RESOURCE_GPU_MEMORY: 40 * GIB, k.RESOURCE_GPU_MEMORY_RATIO: 50},
        ),
        (
            {k.RESOURCE_GPU_MEMORY: "30Gi"},
            {k.RESOURCE_GPU_MEMORY: 30 * GIB, k.RESOURCE_GPU_MEMORY_RATIO: 37},
        ),
        (
            {k.RESOURCE_GPU_CORE: "30", k.RESOURCE_GPU_MEMORY_RATIO: "25"},
            {
                k.RESOURCE_GPU_CORE: 30,
                k.RESOURCE_GPU_MEMORY: 20 * GIB,
                k.RESOURCE_GPU_MEMORY_RATIO: 25,
            },
        ),
    ],
)
def test_shared_entries_carry_memory_and_ratio(
    requests: Mapping[str, str], resources: Mapping[str, int]
) -> None:
    (entry,) = _allocated(allocate(_request(requests), _two_cards())).of("gpu")
    assert dict(entry.resources) == resources


def test_memory_and_core_both_bound_a_shared_card() -> None:
    state = node_state(device([gpu(0)]))
    state, first = _place(state, {k.RESOURCE_GPU_CORE: "80", k.RESOURCE_GPU_MEMORY: "10Gi"})
    _allocated(first)
    state, second = _place(state, {k.RESOURCE_GPU_CORE: "30", k.RESOURCE_GPU_MEMORY: "10Gi"})
    assert second == Rejection(UNSCHEDULABLE, "Insufficient gpu devices")
    state, third = _place(state, {k.RESOURCE_GPU_CORE: "10", k.RESOURCE_GPU_MEMORY: "75Gi"})
    assert third == Rejection(UNSCHEDULABLE, "Insufficient gpu devices")


def test_multi_card_shares_take_one_share_of_each_card() -> None:
    requests = {
        k.RESOURCE_GPU_SHARED: "2",
        k.RESOURCE_GPU_CORE: "100",
        k.RESOURCE_GPU_MEMORY: "8Gi",
    }
    (a, b) = _allocated(allocate(_request(requests), _two_cards())).of("gpu")
    assert (a.minor, b.minor) == (0, 1)
    assert a.resources.get_amount(k.RESOURCE_GPU_CORE) == 50
    assert a.resources.get_amount(k.RESOURCE_GPU_MEMORY) == 4 * GIB


def test_share_unsupported_models_refuse_shared_pods_only() -> None:
    args = DeviceShareArgs(
        gpu_share_unsupported_models=(UnsupportedModel(vendor="nvidia", model="H100"),)
    )
    state = node_state(device([gpu(0)], model="H100"))
    assert allocate(_request({k.RESOURCE_GPU: "50"}), state, args=args) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, 'model "H100" of vendor "nvidia" does not support GPU Share'
    )
    assert isinstance(allocate(_request({k.RESOURCE_GPU: "100"}), state, args=args), Allocation)


def test_isolation_provider_must_be_on_the_node() -> None:
    labels = {k.LABEL_GPU_ISOLATION_PROVIDER: "HAMi-core"}
    request = _request({k.RESOURCE_GPU: "50"}, labels=labels)
    assert allocate(request, node_state(device([gpu(0)]))) == Rejection(
        "Error", "GPUIsolationProviderHAMICore not found on the node"
    )
    state = node_state(device([gpu(0)]), node_labels=labels)
    assert isinstance(allocate(request, state), Allocation)


# --- MetaX sGPU ---------------------------------------------------------------------------------


def _metax() -> NodeDeviceState:
    cards = [gpu(m, memory=64 * GIB, extra={k.RESOURCE_METAX_SGPU: 16}) for m in range(2)]
    return node_state(device(cards, vendor="metax", model="C500"))


def test_metax_cards_hold_at_most_sixteen_shares() -> None:
    state = _metax()
    placed = []
    for _ in range(33):
        state, result = _place(
            state, {k.RESOURCE_GPU_CORE: "1", k.RESOURCE_GPU_MEMORY: "1Gi"}, args=BINPACK
        )
        placed.append(result)
    minors = [r.minors("gpu")[0] for r in placed if isinstance(r, Allocation)]
    assert minors == [0] * 16 + [1] * 16
    assert placed[-1] == Rejection(UNSCHEDULABLE, "Insufficient gpu devices")


def test_metax_whole_cards_take_no_share_slot() -> None:
    state, result = _place(_metax(), {"nvidia.com/gpu": "1"})
    assert _allocated(result).minors("gpu") == (0,)
    slot = state.slot("gpu", 0)
    assert slot is not None
    assert slot.used.get_amount(k.RESOURCE_METAX_SGPU) == 0


def test_metax_shares_span_one_card_only() -> None:
    requests = {
        k.RESOURCE_GPU_SHARED: "2",
        k.RESOURCE_GPU_CORE: "100",
        k.RESOURCE_GPU_MEMORY: "8Gi",
    }
    assert allocate(_request(requests), _metax()) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) Unsupported Multi-Shared GPU"
    )


# --- Ascend templates ---------------------------------------------------------------------------

TEMPLATES = parse_templates(
    {
        "data.yaml": (
            "huawei-Ascend-910B3:\n"
            "  vir10_3c_32g: {huawei.com/npu-core: '10', huawei.com/npu-cpu: '3',"
            " koordinator.sh/gpu-memory: 32Gi}\n"
            "huawei-Ascend-310P3:\n"
            "  vir04: {huawei.com/npu-core: '4', huawei.com/npu-cpu: '3',"
            " koordinator.sh/gpu-memory: 32Gi}\n"
        )
    }
)
VNPU = {
    k.RESOURCE_GPU_SHARED: "1",
    k.RESOURCE_HUAWEI_NPU_CORE: "10",
    k.RESOURCE_HUAWEI_NPU_CPU: "3",
    k.RESOURCE_GPU_MEMORY: "32Gi",
}


def _ascend(model: str = "Ascend-910B3") -> NodeDeviceState:
    return node_state(device([npu(0), npu(1)], vendor="huawei", model=model))


def test_vnpu_shares_record_their_template() -> None:
    request = _request(VNPU, templates=TEMPLATES)
    state = _ascend()
    got = []
    for _ in range(5):
        result = allocate(request, state, templates=TEMPLATES, args=BINPACK)
        if isinstance(result, Allocation):
            state = apply(state, result)
            (entry,) = result.of("gpu")
            assert entry.template == "vir10_3c_32g"
            assert entry.resources.get_amount(k.RESOURCE_GPU_MEMORY_RATIO) == 50
        got.append(result.minors("gpu") if isinstance(result, Allocation) else result)
    assert got == [(0,), (0,), (1,), (1,), Rejection(UNSCHEDULABLE, "Insufficient gpu devices")]


def test_vnpu_on_a_model_without_that_template_is_unresolvable() -> None:
    request = _request(VNPU, templates=TEMPLATES)
    assert allocate(request, _ascend("Ascend-910B4"), templates=TEMPLATES) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "no matched GPU shared resource template"
    )


def test_whole_npus_by_ratio() -> None:
    request = _request({k.RESOURCE_HUAWEI_NPU_CORE: "40", k.RESOURCE_GPU_MEMORY_RATIO: "200"})
    result = _allocated(allocate(request, _ascend()))
    assert result.minors("gpu") == (0, 1)
    assert result.of("gpu")[0].resources.get_amount(k.RESOURCE_HUAWEI_NPU_CORE) == 20


# --- RDMA and joint allocation ------------------------------------------------------------------

JOINT = json.dumps({"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"})
JOINT_PREFERRED = json.dumps({"deviceTypes": ["gpu", "rdma"]})


def _nodes_with_nics(*unhealthy_nics: int) -> NodeDeviceState:
    dev = h100_node(rdma_nics=True)
    infos = tuple(
        d
        if not (d.type == "rdma" and d.minor in unhealthy_nics)
        else rdma(d.minor or 0, numa=0, pcie=f"pci{d.minor}", healthy=False)
        for d in dev.spec.devices
    )
    return node_state(device(infos))


@pytest.mark.parametrize(
    ("cards", "joint", "unhealthy", "expected"),
    [
        ("2", JOINT, (), ((0, 1), (0,))),
        ("4", JOINT, (), ((0, 1, 2, 3), (0, 1))),  # one NIC per switch of the GPUs
        (
            "2",
            JOINT,
            (0,),
            Rejection(UNSCHEDULABLE, "node(s) Device Joint-Allocate rules violation"),
        ),
        ("2", JOINT_PREFERRED, (0,), ((0, 1), (1,))),  # preferred only: any NIC will do
        ("4", JOINT_PREFERRED, (), ((0, 1, 2, 3), (0,))),
    ],
)
def test_gpu_and_rdma_joint_allocation(
    cards: str, joint: str, unhealthy: Sequence[int], expected: object
) -> None:
    request = _request(
        {"nvidia.com/gpu": cards, k.RESOURCE_RDMA: "1"},
        {k.ANNOTATION_DEVICE_JOINT_ALLOCATE: joint},
    )
    result = allocate(request, _nodes_with_nics(*unhealthy))
    if isinstance(expected, Rejection):
        assert result == expected
    else:
        allocation = _allocated(result)
        assert (allocation.minors("gpu"), allocation.minors("rdma")) == expected


def test_well_planned_secondaries_wait_for_reserve() -> None:
    dev = h100_node(rdma_nics=True)
    labels = {**dev.metadata.labels, k.LABEL_SECONDARY_DEVICE_WELL_PLANNED: "true"}
    state = node_state(device(dev.spec.devices, labels=labels))
    request = _request(
        {"nvidia.com/gpu": "2", k.RESOURCE_RDMA: "1"}, {k.ANNOTATION_DEVICE_JOINT_ALLOCATE: JOINT}
    )
    filtered = _allocated(allocate(request, state, filtering=True))
    assert (filtered.minors("gpu"), filtered.minors("rdma")) == ((0, 1), ())
    reserved = _allocated(allocate(request, state))
    assert reserved.minors("rdma") == (0,)


def test_rdma_apply_for_all_takes_every_matching_nic() -> None:
    hint = {k.ANNOTATION_DEVICE_ALLOCATE_HINT: '{"rdma": {"allocateStrategy": "ApplyForAll"}}'}
    request = _request({k.RESOURCE_RDMA: "1"}, hint)
    result = _allocated(allocate(request, _nodes_with_nics()))
    assert result.minors("rdma") == (0, 1, 2, 3)
    assert allocate(request, node_state(h100_node())) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "Insufficient rdma devices"
    )


def test_rdma_percentages_beyond_one_nic() -> None:
    result = _allocated(allocate(_request({k.RESOURCE_RDMA: "200"}), _nodes_with_nics()))
    assert result.minors("rdma") == (0, 1)
    assert allocate(_request({k.RESOURCE_RDMA: "500"}), _nodes_with_nics()) == Rejection(
        UNSCHEDULABLE, "Insufficient rdma devices"
    )


def test_a_pod_without_devices_gets_an_empty_allocation() -> None:
    assert _allocated(allocate(_request({"cpu": "1"}), _h100())).empty


# --- GPU partitions -----------------------------------------------------------------------------

SPEC = {k.ANNOTATION_GPU_PARTITION_SPEC: '{"allocatePolicy": "BestEffort"}'}
RESTRICTED_SPEC = {k.ANNOTATION_GPU_PARTITION_SPEC: '{"allocatePolicy": "Restricted"}'}


@pytest.mark.parametrize(
    ("taken", "cards", "minors"),
    [
        ((), 1, (0,)),
        ((0,), 1, (1,)),  # keeps 4-7 whole
        ((0,), 2, (2, 3)),  # keeps 4-7 whole
        ((0, 5), 2, (2, 3)),
        ((), 4, (0, 1, 2, 3)),
        ((4,), 4, (0, 1, 2, 3)),
        ((), 8, tuple(range(8))),
    ],
)
def test_builtin_partitions_of_h100(
    taken: Sequence[int], cards: int, minors: Sequence[int]
) -> None:
    result = allocate(_request({"nvidia.com/gpu": str(cards)}, SPEC), _h100(*taken))
    assert _allocated(result).minors("gpu") == tuple(minors)


HONOR = {k.LABEL_GPU_PARTITION_POLICY: "Honor"}


def test_honor_policy_refuses_what_no_partition_gives() -> None:
    """A Device without a table of its own: the built-in table, honoured when the Node says
    Honor (v1.8 reads the policy from the Node then)."""
    dev = h100_node()
    honor = device(dev.spec.devices, model="H100-80GB-HBM3", labels=HONOR)
    state = node_state(honor, node_labels=HONOR)
    assert allocate(_request({"nvidia.com/gpu": "3"}), state) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) Unsupported number of GPU requests"
    )
    busy = node_state(honor, _holders(1, 5), node_labels=HONOR)
    assert allocate(_request({"nvidia.com/gpu": "4"}), busy) == Rejection(
        UNSCHEDULABLE, "Insufficient Partitioned GPU Devices"
    )
    assert _allocated(allocate(_request({"nvidia.com/gpu": "2"}), busy)).minors("gpu") == (2, 3)
    other = device([gpu(m, numa=0, pcie="p") for m in range(4)], model="A100", labels=HONOR)
    assert allocate(
        _request({"nvidia.com/gpu": "2"}), node_state(other, node_labels=HONOR)
    ) == Rejection(UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) missing GPU Partition Table")
    # Honor on the Device alone, with no table of its own: not honoured.
    assert _allocated(allocate(_request({"nvidia.com/gpu": "3"}), node_state(honor))).minors(
        "gpu"
    ) == (0, 1, 2)
    assert _allocated(allocate(_request({"nvidia.com/gpu": "2"}), node_state(other))).minors(
        "gpu"
    ) == (0, 1)
    # without Honor a missing table just means the topology path
    plain = device([gpu(m, numa=0, pcie="p") for m in range(4)], model="A100")
    assert _allocated(allocate(_request({"nvidia.com/gpu": "2"}, SPEC), node_state(plain))).minors(
        "gpu"
    ) == (0, 1)


TABLE = json.dumps(
    {
        "2": [
            {
                "minors": [0, 1],
                "gpuLinkType": "HCCS",
                "ringBusBandwidth": "400Gi",
                "allocationScore": 1,
            },
            {
                "minors": [2, 3],
                "gpuLinkType": "HCCS",
                "ringBusBandwidth": "200Gi",
                "allocationScore": 1,
            },
            {"minors": [1, 2], "gpuLinkType": "PCIe", "allocationScore": 2},
        ]
    }
)


def _table_node(*taken: int) -> NodeDeviceState:
    dev = device([gpu(m, numa=0, pcie="p") for m in range(4)], model="X")
    meta = ObjectMeta(
        name="n1", labels=dev.metadata.labels, annotations={k.ANNOTATION_GPU_PARTITIONS: TABLE}
    )
    return node_state(Device(metadata=meta, spec=dev.spec), _holders(*taken))


@pytest.mark.parametrize(
    ("annotations", "taken", "expected"),
    [
        (SPEC, (), (0, 1)),
        (SPEC, (0,), (2, 3)),
        (SPEC, (0, 3), (1, 2)),  # the second group
        (RESTRICTED_SPEC, (0, 3), Rejection(UNSCHEDULABLE, "Insufficient Partitioned GPU Devices")),
        (
            {k.ANNOTATION_GPU_PARTITION_SPEC: '{"ringBusBandwidth": "300Gi"}'},
            (0,),
            (1, 2),  # BestEffort: nothing fast enough is free, falls back to the node scope
        ),
        (
            {
                k.ANNOTATION_GPU_PARTITION_SPEC: json.dumps(
                    {"allocatePolicy": "Restricted", "ringBusBandwidth": "300Gi"}
                )
            },
            (),
            (0, 1),
        ),
    ],
)
def test_device_partition_table(
    annotations: Mapping[str, str], taken: Sequence[int], expected: object
) -> None:
    result = allocate(_request({"nvidia.com/gpu": "2"}, annotations), _table_node(*taken))
    if isinstance(expected, Rejection):
        assert result == expected
    else:
        assert _allocated(result).minors("gpu") == expected


# --- SR-IOV virtual functions -------------------------------------------------------------------


def _nic_with_vfs(minor: int, buses: Sequence[str], role: str = "training") -> DeviceInfo:
    base = rdma(minor, numa=0, pcie=f"pci{minor}")
    group = VirtualFunctionGroup(
        labels={"type": role},
        vfs=tuple(VirtualFunction(minor=-1, bus_id=bus) for bus in buses),
    )
    return msgspec.structs.replace(base, vf_groups=(group,))


VF_HINT = {
    k.ANNOTATION_DEVICE_ALLOCATE_HINT: json.dumps(
        {"rdma": {"vfSelector": {"matchLabels": {"type": "training"}}}}
    )
}


def test_rdma_virtual_functions_lowest_bus_first_and_never_twice() -> None:
    state = node_state(
        device([_nic_with_vfs(0, ["0000:1f:00.3", "0000:1f:00.2"]), _nic_with_vfs(1, [], "other")])
    )
    request = _request({k.RESOURCE_RDMA: "1"}, VF_HINT)
    got: list[object] = []
    for _ in range(3):
        result = allocate(request, state)
        if isinstance(result, Allocation):
            state = apply(state, result)
            (entry,) = result.of("rdma")
            got.append((entry.minor, tuple(vf.bus_id for vf in entry.vfs)))
        else:
            got.append(result)
    assert got == [
        (0, ("0000:1f:00.2",)),
        (0, ("0000:1f:00.3",)),
        Rejection(UNSCHEDULABLE, "Insufficient rdma devices"),
    ]
    slot = state.slot("rdma", 0)
    assert slot is not None
    assert slot.used_vfs == {"0000:1f:00.2", "0000:1f:00.3"}


def test_no_matching_virtual_functions_at_all_is_unresolvable() -> None:
    state = node_state(device([_nic_with_vfs(0, ["0000:1f:00.2"], "other")]))
    assert allocate(_request({k.RESOURCE_RDMA: "1"}, VF_HINT), state) == Rejection(
        UNSCHEDULABLE_AND_UNRESOLVABLE, "Insufficient rdma VirtualFunctions"
    )


# --- reservations -------------------------------------------------------------------------------

WHOLE = ResourceList(
    {k.RESOURCE_GPU_CORE: 100, k.RESOURCE_GPU_MEMORY_RATIO: 100, k.RESOURCE_GPU_MEMORY: 80 * GIB}
)
HALF = ResourceList(
    {k.RESOURCE_GPU_CORE: 50, k.RESOURCE_GPU_MEMORY_RATIO: 50, k.RESOURCE_GPU_MEMORY: 40 * GIB}
)


def test_aligned_reservation_gives_its_own_gpus() -> None:
    state = _h100(4, 5)  # the reserve pod holds 4 and 5
    reserved = ReservedDevices({"gpu": {4: WHOLE, 5: WHOLE}}, ALIGNED)
    request = _request({"nvidia.com/gpu": "2"})
    assert _allocated(allocate(request, state, reserved=reserved)).minors("gpu") == (4, 5)
    assert _allocated(allocate(request, state)).minors("gpu") == (0, 1)
    one = _request({"nvidia.com/gpu": "1"})
    assert _allocated(allocate(one, state, reserved=reserved)).minors("gpu") == (4,)


def _half_reserved() -> tuple[NodeDeviceState, dict[str, dict[int, ResourceList]]]:
    state = apply(_two_cards(), Allocation({"gpu": (AllocatedDevice(minor=0, resources=HALF),)}))
    return state, {"gpu": {0: HALF}}


@pytest.mark.parametrize(
    ("policy", "share", "minor"),
    [
        (RESTRICTED, "30", 0),
        (RESTRICTED, "50", 0),
        (RESTRICTED, "60", 1),  # more than the reservation holds: not from its device
        (ALIGNED, "60", 0),  # aligned only prefers: the device's free capacity counts too
        ("", "60", 0),  # the share is visible as free: both cards are empty
    ],
)
def test_reservation_policies_on_a_shared_gpu(policy: str, share: str, minor: int) -> None:
    state, remaining = _half_reserved()
    reserved = ReservedDevices(remaining, policy)
    result = allocate(_request({k.RESOURCE_GPU: share}), state, reserved=reserved, args=BINPACK)
    assert _allocated(result).minors("gpu") == (minor,)


def test_reserved_capacity_is_free_only_to_its_owners() -> None:
    state = node_state(device([gpu(0)]), _holders(0))
    request = _request({"nvidia.com/gpu": "1"})
    assert allocate(request, state) == Rejection(UNSCHEDULABLE, "Insufficient gpu devices")
    reserved = ReservedDevices({"gpu": {0: WHOLE}})
    assert _allocated(allocate(request, state, reserved=reserved)).minors("gpu") == (0,)


# --- NUMA hints ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cards", "taken", "expected"),
    [
        ("2", (), [({0}, True), ({1}, True), ({0, 1}, False)]),
        ("4", (0,), [({1}, True), ({0, 1}, False)]),
        ("6", (), [({0, 1}, True)]),
        ("8", (0,), []),
    ],
)
def test_numa_hints_smallest_sets_preferred(
    cards: str, taken: Sequence[int], expected: list[tuple[set[int], bool]]
) -> None:
    hints = numa_hints(_request({"nvidia.com/gpu": cards}), _h100(*taken))
    assert [(set(h.nodes), h.preferred) for h in hints] == expected


def test_no_numa_hints_without_numa_information_or_when_disabled() -> None:
    request = _request({"nvidia.com/gpu": "1"})
    assert numa_hints(request, node_state(device([gpu(0)]))) == ()
    disabled = DeviceShareArgs(disable_device_numa_topology_alignment=True)
    assert numa_hints(request, _h100(), args=disabled) == ()


def _metax_listing(policies: str | None) -> NodeDeviceState:
    found = device(
        [gpu(m, memory=64 * GIB, extra={k.RESOURCE_METAX_SGPU: 16}) for m in range(2)],
        vendor=k.GPU_VENDOR_METAX,
        model="C500",
    )
    if policies is not None:
        meta = msgspec.structs.replace(
            found.metadata, annotations={ANNOTATION_SGPU_QOS_POLICIES: policies}
        )
        found = msgspec.structs.replace(found, metadata=meta)
    return node_state(found)


@pytest.mark.parametrize(
    ("policies", "policy", "fits"),
    [
        (None, "best-effort", True),
        ("fixed-share,best-effort,burst-share", "best-effort", True),
        ("fixed-share", "fixed-share", True),
        ("fixed-share", "burst-share", False),
        ("fixed-share", "", True),
    ],
)
def test_metax_nodes_take_only_the_sgpu_qos_policies_they_list(
    policies: str | None, policy: str, fits: bool
) -> None:
    requests = {
        k.RESOURCE_GPU_SHARED: "1",
        k.RESOURCE_GPU_CORE: "10",
        k.RESOURCE_GPU_MEMORY: "1Gi",
        k.RESOURCE_METAX_SGPU: "1",
    }
    request = prepare(pod(requests, annotations={k.ANNOTATION_SGPU_QOS_POLICY: policy}))
    assert isinstance(request, DeviceRequest)
    answer = allocate(request, _metax_listing(policies))
    if fits:
        assert isinstance(answer, Allocation)
    else:
        assert answer == Rejection.unschedulable(
            f'node(s) didn\'t support MetaX sGPU QoS policy "{policy}"'
        )


def test_the_listed_sgpu_qos_policies_are_read_from_the_device() -> None:
    assert _metax_listing(None).sgpu_qos_policies is None
    listed = _metax_listing(" fixed-share , burst-share,").sgpu_qos_policies
    assert listed == frozenset({"fixed-share", "burst-share"})
    assert _metax_listing("").sgpu_qos_policies == frozenset()
