"""The ``resource-status`` annotation and the cpu list format, both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.qos import nodeinfo
from apis import constants as k
from apis.resources import ResourceList
from controller.scheduler.numaresource.status import (
    CpuListError,
    NUMANodeResource,
    ResourceStatus,
    ResourceStatusError,
    bound_cpus,
    encode_resource_status,
    format_cpu_list,
    parse_cpu_list,
    parse_resource_status,
    pod_resource_status,
)
from tests.controller.numaresource.builders import bound, pod


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        (set(), ""),
        ({5}, "5"),
        ({0, 1}, "0-1"),
        ({0, 1, 2, 3}, "0-3"),
        ({0, 1, 2, 3, 8, 9, 10, 11}, "0-3,8-11"),
        ({0, 2, 4}, "0,2,4"),
        ({11, 10, 8, 3, 2, 1, 0}, "0-3,8,10-11"),
    ],
)
def test_cpu_list_format(cpus: set[int], text: str) -> None:
    assert format_cpu_list(cpus) == text
    assert parse_cpu_list(text) == frozenset(cpus)


@pytest.mark.parametrize(("text", "cpus"), [(" 0-2 , 7 ", {0, 1, 2, 7}), ("3,3,1-3", {1, 2, 3})])
def test_cpu_list_parse_is_lenient_on_spacing_and_overlap(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == frozenset(cpus)


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1-2-3", "0x1", "1.5"])
def test_cpu_list_errors(text: str) -> None:
    with pytest.raises(CpuListError):
        parse_cpu_list(text)


@given(st.frozensets(st.integers(0, 511)))
def test_cpu_list_round_trip(cpus: frozenset[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == cpus


FULL = ResourceStatus(
    cpuset=frozenset({0, 1, 8, 9}),
    numa_node_resources=(
        NUMANodeResource(node=0, resources=ResourceList({"cpu": 4000, "memory": 1 << 30})),
    ),
)


def test_resource_status_wire_form() -> None:
    assert encode_resource_status(FULL) == (
        '{"cpuset":"0-1,8-9","numaNodeResources":[{"node":0,"resources":{"cpu":"4","memory":"1Gi"}}]}'
    )
    assert encode_resource_status(ResourceStatus(cpuset=frozenset({0, 1, 2, 3}))) == (
        '{"cpuset":"0-3"}'
    )
    assert encode_resource_status(ResourceStatus()) == "{}"


@pytest.mark.parametrize(
    "status",
    [FULL, ResourceStatus(), ResourceStatus(cpuset=frozenset({3, 7}))],
    ids=["full", "empty", "cpuset-only"],
)
def test_resource_status_round_trip(status: ResourceStatus) -> None:
    assert parse_resource_status(encode_resource_status(status)) == status


def test_the_agent_reads_what_the_scheduler_writes() -> None:
    text = encode_resource_status(FULL)
    agent_view = nodeinfo.pod_resource_status(pod(annotations={k.ANNOTATION_RESOURCE_STATUS: text}))
    assert agent_view is not None
    assert set(agent_view.cpuset) == set(FULL.cpuset)
    assert [(n.node, n.resources) for n in agent_view.numa_node_resources] == [
        (0, ResourceList({"cpu": 4000, "memory": 1 << 30}))
    ]


def test_a_status_written_elsewhere_reads_too() -> None:
    text = '{"cpuset":"2-3","numaNodeResources":[{"node":1,"resources":{"cpu":2}}],"x":1}'
    status = parse_resource_status(text)
    assert status.cpuset == frozenset({2, 3})
    assert status.numa_node_resources == (
        NUMANodeResource(node=1, resources=ResourceList({"cpu": 2000})),
    )


@pytest.mark.parametrize(
    "text",
    [
        "{broken",
        '{"cpuset":"a-b"}',
        '{"cpuset":7}',
        '{"numaNodeResources":[{"node":-1}]}',
        '{"numaNodeResources":[{"node":0,"resources":{"cpu":"lots"}}]}',
    ],
)
def test_resource_status_errors(text: str) -> None:
    with pytest.raises(ResourceStatusError):
        parse_resource_status(text)
    assert pod_resource_status(pod(annotations={k.ANNOTATION_RESOURCE_STATUS: text})) is None


def test_bound_cpus_are_those_of_unfinished_pods() -> None:
    pods = [
        bound("a", frozenset({0, 8})),
        bound("b", frozenset({1, 9}), phase="Pending"),
        bound("done", frozenset({2, 10}), phase="Succeeded"),
        bound("failed", frozenset({3, 11}), phase="Failed"),
        pod("unbound", node_name="n1"),
        pod("broken", annotations={k.ANNOTATION_RESOURCE_STATUS: "{"}),
    ]
    assert bound_cpus(pods) == frozenset({0, 1, 8, 9})
