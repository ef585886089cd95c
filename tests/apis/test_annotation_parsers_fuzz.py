"""Every parser of a Koordinator annotation, fuzzed with valid-looking and hostile text.

Each answers with a clean result or its own refusal, within a memory budget (tracemalloc peak)
and a generous time per example: no RecursionError, MemoryError, ValueError of ``int()`` or
other exception escapes, however deep, long or large the value.
"""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.pods.base import PodListError, parse_pod_list
from agent.qos import cpuset_pool, nodeinfo
from apis import constants as k
from apis.bounded import MAX_CPUS, MAX_TEXT
from apis.core import Node, Pod, PodTemplateSpec
from apis.meta import ObjectMeta
from apis.quota import ElasticQuota, ElasticQuotaSpec
from apis.resources import ResourceList
from apis.scheduling import Reservation, ReservationSpec
from controller.descheduler.plugins.lownodeload.usage import capacity_of
from controller.quota.check import QuotaIndex
from controller.quota.status import read_resources
from controller.quota.tree import shared_weight
from controller.reservations import AnnotationError, affinity
from controller.reservations.accounting import node_reserved
from controller.reservations.reserve_pod import resize_allocatable
from controller.scheduler import gangs
from controller.scheduler.deviceshare import requests as device_requests
from controller.scheduler.deviceshare.annotation import AllocationFormatError, parse_allocation
from controller.scheduler.deviceshare.state import parse_partitions
from controller.scheduler.loadaware.args import load_args, node_thresholds
from controller.scheduler.loadaware.estimator import estimation_deadline, scaling_factors
from controller.scheduler.loadaware.usage import node_capacity
from controller.scheduler.numaresource import policy
from controller.scheduler.numaresource.args import decode_args as numa_args
from controller.scheduler.numaresource.status import (
    ResourceStatus,
    ResourceStatusError,
    parse_resource_status,
)
from controller.scheduler.numaresource.topology import CPUTopologyError, parse_cpu_topology
from controller.scheduler.schedulinghint import parse_scheduling_hint
from controller.slo.config import SLOConfigError, parse_key
from tests.controller.scheduler import GI, make_pod

BUDGET_BYTES = 8 * 1024 * 1024
GANG_ARGS = gangs.parse_args(None)
NUMA_ARGS = numa_args({})
LOAD_ARGS = load_args({"allowCustomizeEstimation": True})


def _pod(annotations: dict[str, str], *, gpu: bool = False) -> Pod:
    base = make_pod("p", cpu=2000, memory=GI, extra={k.RESOURCE_GPU: 1} if gpu else None)
    meta = ObjectMeta(name="p", namespace="default", uid="u", annotations=annotations)
    return Pod(metadata=meta, spec=base.spec, status=base.status)


def _node(annotations: dict[str, str]) -> Node:
    return Node(metadata=ObjectMeta(name="n", annotations=annotations))


def _gang(text: str) -> object:
    keys = (
        k.ANNOTATION_GANG_MIN_AVAILABLE,
        k.ANNOTATION_GANG_TOTAL_NUMBER,
        k.ANNOTATION_GANG_GROUPS,
        k.ANNOTATION_GANG_WAITING_TIME,
        k.ANNOTATION_GANG_MODE,
        k.ANNOTATION_GANG_MATCH_POLICY,
    )
    annotations = dict.fromkeys(keys, text)
    return gangs.gang_from_pod(_pod({k.ANNOTATION_GANG_NAME: "g", **annotations}), GANG_ARGS)


def _reservation(text: str) -> object:
    keys = (
        k.ANNOTATION_RESERVATION_AFFINITY,
        k.ANNOTATION_RESERVATION_ALLOCATED,
        k.ANNOTATION_EXACT_MATCH_RESERVATION,
    )
    pod = _pod(dict.fromkeys(keys, text))
    reservation = Reservation(
        metadata=ObjectMeta(
            name="r", annotations={k.ANNOTATION_RESERVATION_RESTRICTED_OPTIONS: text}
        ),
        spec=ReservationSpec(template=PodTemplateSpec(), owners=()),
    )
    found: list[object] = []
    for parse in (
        lambda: affinity.parse_reservation_affinity(pod),
        lambda: affinity.parse_allocated(pod),
        lambda: affinity.parse_exact_match(pod),
        lambda: affinity.parse_restricted_options(reservation),
    ):
        with contextlib.suppress(AnnotationError):
            found.append(parse())
    return found


def _numa_request(text: str) -> object:
    pod = _pod({k.ANNOTATION_RESOURCE_SPEC: text, k.ANNOTATION_NUMA_TOPOLOGY_SPEC: text})
    return policy.prepare(pod, NUMA_ARGS)


def _device_request(text: str) -> object:
    keys = (
        k.ANNOTATION_DEVICE_ALLOCATE_HINT,
        k.ANNOTATION_DEVICE_JOINT_ALLOCATE,
        k.ANNOTATION_GPU_PARTITION_SPEC,
        k.ANNOTATION_DEVICE_ALLOCATED,
    )
    return device_requests.prepare(_pod(dict.fromkeys(keys, text), gpu=True))


def _agent_pod(text: str) -> object:
    pod = _pod({k.ANNOTATION_RESOURCE_STATUS: text, k.ANNOTATION_CPU_BURST: text})
    return nodeinfo.pod_resource_status(pod), nodeinfo.pod_burst_override(pod)


def _agent_node(text: str) -> object:
    keys = (
        k.ANNOTATION_NODE_RESERVATION,
        k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
        k.ANNOTATION_NODE_POD_CPU_ALLOCS,
        k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    )
    node = _node(dict.fromkeys(keys, text))
    return (
        nodeinfo.reservation(node),
        nodeinfo.system_qos(node),
        cpuset_pool.kubelet_pinned_cpus(node),
        cpuset_pool.kubelet_cpu_policy(node),
    )


def _load_aware(text: str) -> object:
    keys = (
        k.ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS,
        k.ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
        k.ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED,
    )
    pod = _pod(dict.fromkeys(keys, text))
    node = _node({k.ANNOTATION_NODE_RAW_ALLOCATABLE: text, k.ANNOTATION_USAGE_THRESHOLDS: text})
    return (
        estimation_deadline(pod, LOAD_ARGS, datetime(2026, 1, 1, tzinfo=UTC)),
        scaling_factors(pod, LOAD_ARGS),
        node_thresholds(LOAD_ARGS, node.metadata.annotations),
        node_capacity(node),
    )


class _NeverError(Exception):
    """No refusal: the reader answers every value (absent, defaulted or a Rejection)."""


PARSERS: dict[str, tuple[Callable[[str], object], type[Exception]]] = {
    "resource-status": (parse_resource_status, ResourceStatusError),
    "cpu-topology": (parse_cpu_topology, CPUTopologyError),
    "device-allocated": (parse_allocation, AllocationFormatError),
    "gpu-partitions": (parse_partitions, ValueError),
    "gang": (_gang, _NeverError),
    "reservation": (_reservation, _NeverError),
    "scheduling-hint": (
        lambda t: parse_scheduling_hint({k.ANNOTATION_SCHEDULING_HINT: t}),
        _NeverError,
    ),
    "numa-specs": (_numa_request, _NeverError),
    "device-requests": (_device_request, _NeverError),
    "agent-pod": (_agent_pod, _NeverError),
    "agent-node": (_agent_node, _NeverError),
    "load-aware": (_load_aware, _NeverError),
}

_FIELDS = st.sampled_from(
    [
        "cpuset", "numaNodeResources", "node", "resources", "cpu", "memory", "detail", "id",
        "core", "socket", "gpu", "rdma", "minor", "extension", "vfs", "busID", "minors",
        "nodeNames", "preferredNodeNames", "extensions", "name", "uid", "resourceNames",
        "requiredCPUBindPolicy", "numaTopologyPolicy", "reservedCPUs", "cpusetExclusive",
        "policy", "cpuBurstPercent", "koordinator.sh/gpu-core", "1", "8",
    ]
)  # fmt: skip
_CPU_LISTS = st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=4).map(
    lambda pairs: ",".join(f"{a}-{b}" if b > a else str(a) for a, b in pairs)
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    _CPU_LISTS,
    st.sampled_from(["100", "1Gi", "-1", "1e999", "0.001m", "Infinity"]),
)
_VALID_LOOKING = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_FIELDS, inner, max_size=5),
    max_leaves=25,
).map(json.dumps)
#: Many entries of a list each parser reads (past its bound when n is large).
_ENTRIES = (
    ('{"detail":[', '{"id":%d,"core":0,"socket":0,"node":0}', "]}"),
    ('{"gpu":[', '{"minor":%d,"resources":{"koordinator.sh/gpu-core":"100"}}', "]}"),
    ('{"numaNodeResources":[', '{"node":%d,"resources":{"cpu":"1"}}', "]}"),
    ('{"1":[', '{"minors":[%d]}', "]}"),
    ("[", '"g%d"', "]"),
    ("[", '{"cpuset":"%d"}', "]"),
)
_HOSTILE = st.one_of(
    st.text(max_size=200),
    st.integers(1, 200_000).map(lambda n: "[" * n),
    st.integers(1, 50_000).map(lambda n: '{"cpuset":"0",' + '"a":{' * n),
    st.integers(4300, 50_000).map(lambda n: "9" * n),
    st.integers(0, 2**64).map(lambda n: json.dumps({"cpuset": f"0-{n}", "reservedCPUs": f"0-{n}"})),
    st.integers(MAX_TEXT - 8, MAX_TEXT + 8).map(lambda n: json.dumps("a" * n)),
    st.tuples(st.sampled_from(_ENTRIES), st.integers(1, 12_000)).map(
        lambda spec: spec[0][0] + ",".join(spec[0][1] % i for i in range(spec[1])) + spec[0][2]
    ),
)


def _check(parse: Callable[[str], object], error: type[Exception], text: str) -> None:
    tracemalloc.start()
    try:
        try:
            found = parse(text)
        except error:
            found = None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BUDGET_BYTES, f"{peak} bytes"
    if isinstance(found, ResourceStatus):
        assert all(0 <= cpu < MAX_CPUS for cpu in found.cpuset)


_FUZZ = settings(
    max_examples=40,
    deadline=timedelta(seconds=3),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", sorted(PARSERS))
@_FUZZ
@given(text=_VALID_LOOKING)
def test_valid_looking_values_give_a_result_or_a_clean_refusal(name: str, text: str) -> None:
    _check(*PARSERS[name], text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@_FUZZ
@given(text=_HOSTILE)
def test_hostile_values_are_refused_within_the_budget(name: str, text: str) -> None:
    _check(*PARSERS[name], text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 200_000, id="deep"),
        pytest.param("9" * 5000, id="long-number"),
        pytest.param(json.dumps({"cpuset": "0-1000000000"}), id="huge-range"),
        pytest.param('"\\u00b2"', id="superscript-digit"),
    ],
)
def test_the_attacks_of_the_issue_are_refused_within_the_budget(name: str, text: str) -> None:
    """Each of these escaped some parser as an exception (or a 4 GB set) before."""
    _check(*PARSERS[name], text)


_DEEP = "[" * 200_000


@pytest.mark.parametrize(
    "read", [node_reserved, resize_allocatable], ids=["node-reservation", "resize-allocatable"]
)
def test_deep_reservation_resource_annotations_are_annotation_errors(
    read: Callable[[Reservation], object],
) -> None:
    key = (
        k.ANNOTATION_NODE_RESERVATION
        if read is node_reserved
        else k.ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE
    )
    reservation = Reservation(
        metadata=ObjectMeta(name="r", annotations={key: '{"resources": {"cpu": ' + _DEEP + "}}"}),
        spec=ReservationSpec(template=PodTemplateSpec(), owners=()),
    )
    with pytest.raises(AnnotationError, match="nested deeper"):
        read(reservation)


def test_deep_raw_allocatable_leaves_the_descheduler_the_node_allocatable() -> None:
    node = _node({k.ANNOTATION_NODE_RAW_ALLOCATABLE: _DEEP})
    assert capacity_of(node) == node.allocatable


def test_deep_quota_annotations_read_as_absent() -> None:
    quota = ElasticQuota(
        metadata=ObjectMeta(
            name="q",
            annotations={
                k.ANNOTATION_QUOTA_SHARED_WEIGHT: _DEEP,
                k.ANNOTATION_QUOTA_NAMESPACES: _DEEP,
            },
        ),
        spec=ElasticQuotaSpec(max=ResourceList.parse({"cpu": "4"})),
    )
    assert shared_weight(quota) == quota.spec.max
    assert read_resources(_DEEP) is None
    assert QuotaIndex.build([quota]).bound == {}


def test_a_deep_slo_config_value_is_a_config_error() -> None:
    with pytest.raises(SLOConfigError, match="nested more than"):
        parse_key("resource-threshold-config", '{"clusterStrategy": ' + _DEEP + "}")


def test_a_deep_pod_list_body_is_refused_by_the_agent() -> None:
    with pytest.raises(PodListError, match="nested more than"):
        parse_pod_list(_DEEP.encode(), source="pods topic")
