"""Which pods get CPUs bound and why a node refuses them (controller-spec §5.2, §10)."""

from __future__ import annotations

import json
from typing import Final

import pytest

from apis import constants as k
from apis.core import Pod
from controller.scheduler.numaresource.args import NodeNUMAResourceArgs
from controller.scheduler.numaresource.policy import (
    CPU_BIND_POLICY_CONFLICT,
    INVALID_CPU_TOPOLOGY,
    INVALID_REQUESTED_CPUS,
    NUMA_POLICY_NOT_MATCH,
    SMT_ALIGNMENT,
    CPURequest,
    NodePlan,
    Rejection,
    allows_cpuset,
    plan,
    prepare,
)
from controller.scheduler.numaresource.topology import node_topology
from tests.controller.numaresource.builders import TWO_SOCKETS, node, pod, topology_text

ARGS = NodeNUMAResourceArgs()
SPREAD_ARGS = NodeNUMAResourceArgs(default_cpu_bind_policy="SpreadByPCPUs")
UAU: Final = "UnschedulableAndUnresolvable"


def spec(**fields: str) -> dict[str, str]:
    return {k.ANNOTATION_RESOURCE_SPEC: json.dumps(fields)}


def numa_spec(**fields: str) -> dict[str, str]:
    return {k.ANNOTATION_NUMA_TOPOLOGY_SPEC: json.dumps(fields)}


@pytest.mark.parametrize(
    ("pod_", "args", "expected"),
    [
        pytest.param(
            pod(qos="LSR"),
            ARGS,
            CPURequest(cpu=4000, bind=True, preferred_policy="FullPCPUs"),
            id="lsr-takes-the-default-FullPCPUs",
        ),
        pytest.param(
            pod(qos="LSE"),
            SPREAD_ARGS,
            CPURequest(cpu=4000, bind=True, preferred_policy="SpreadByPCPUs"),
            id="lse-takes-the-args-default",
        ),
        pytest.param(
            pod(annotations=spec(preferredCPUBindPolicy="SpreadByPCPUs")),
            ARGS,
            CPURequest(cpu=4000, bind=True, preferred_policy="SpreadByPCPUs"),
            id="preferred-beats-the-default",
        ),
        pytest.param(
            pod(annotations=spec(preferredCPUBindPolicy="Default")),
            SPREAD_ARGS,
            CPURequest(cpu=4000, bind=True, preferred_policy="SpreadByPCPUs"),
            id="preferred-Default-means-the-args",
        ),
        pytest.param(
            pod(
                annotations=spec(
                    requiredCPUBindPolicy="FullPCPUs", preferredCPUBindPolicy="SpreadByPCPUs"
                )
            ),
            ARGS,
            CPURequest(
                cpu=4000, bind=True, required_policy="FullPCPUs", preferred_policy="FullPCPUs"
            ),
            id="required-beats-preferred",
        ),
        pytest.param(
            pod(annotations=spec(requiredCPUBindPolicy="Default")),
            SPREAD_ARGS,
            CPURequest(
                cpu=4000,
                bind=True,
                required_policy="SpreadByPCPUs",
                preferred_policy="SpreadByPCPUs",
            ),
            id="required-Default-means-the-args",
        ),
        pytest.param(
            pod(
                annotations=spec(
                    preferredCPUBindPolicy="FullPCPUs", preferredCPUExclusivePolicy="PCPULevel"
                )
            ),
            ARGS,
            CPURequest(
                cpu=4000, bind=True, preferred_policy="FullPCPUs", exclusive_policy="PCPULevel"
            ),
            id="exclusive-policy-kept",
        ),
        pytest.param(pod(qos="LS"), ARGS, CPURequest(cpu=4000), id="ls-is-not-bound"),
        pytest.param(pod(qos="BE"), ARGS, CPURequest(cpu=4000), id="be-is-not-bound"),
        pytest.param(
            pod(qos=None), ARGS, CPURequest(cpu=4000), id="guaranteed-without-the-label-is-not"
        ),
        pytest.param(
            pod(qos="LSR", priority_class="koord-batch"),
            ARGS,
            CPURequest(cpu=4000),
            id="lsr-of-batch-priority-is-not",
        ),
        pytest.param(
            pod(annotations=spec(preferredCPUBindPolicy="ConstrainedBurst")),
            ARGS,
            CPURequest(cpu=4000),
            id="constrained-burst-does-not-bind",
        ),
        pytest.param(
            pod(cpu=2500, annotations=spec(preferredCPUBindPolicy="ConstrainedBurst")),
            ARGS,
            CPURequest(cpu=2500),
            id="fractional-cpu-without-binding-is-fine",
        ),
        pytest.param(
            pod(cpu=2500),
            ARGS,
            Rejection(UAU, INVALID_REQUESTED_CPUS),
            id="fractional-cpu-with-binding",
        ),
        pytest.param(pod(cpu=0), ARGS, CPURequest(cpu=0), id="memory-only"),
        pytest.param(pod(cpu=0, memory=0), ARGS, None, id="no-requests-skips"),
        pytest.param(
            pod(annotations=numa_spec(numaTopologyPolicy="SingleNUMANode")),
            ARGS,
            CPURequest(
                cpu=4000, bind=True, preferred_policy="FullPCPUs", numa_policy="SingleNUMANode"
            ),
            id="numa-topology-spec-read",
        ),
    ],
)
def test_prepare(pod_: Pod, args: NodeNUMAResourceArgs, expected: object) -> None:
    assert prepare(pod_, args) == expected


@pytest.mark.parametrize(
    "key", [k.ANNOTATION_RESOURCE_SPEC, k.ANNOTATION_NUMA_TOPOLOGY_SPEC], ids=["spec", "numa"]
)
def test_an_unreadable_annotation_is_an_error(key: str) -> None:
    result = prepare(pod(annotations={key: "{not json"}), ARGS)
    assert isinstance(result, Rejection)
    assert result.code == "Error"
    assert key in result.reason


def test_allows_cpuset_needs_both_qos_and_prod() -> None:
    assert allows_cpuset(pod(qos="LSE"))
    assert allows_cpuset(pod(qos="LSR", priority_class="koord-prod"))
    assert not allows_cpuset(pod(qos="LSR", priority_class="koord-mid"))
    assert not allows_cpuset(pod(qos="LS"))


BIND_FULL = CPURequest(cpu=4000, bind=True, preferred_policy="FullPCPUs")
BIND_SPREAD = CPURequest(cpu=4000, bind=True, preferred_policy="SpreadByPCPUs")
REQUIRE_FULL = CPURequest(
    cpu=4000, bind=True, required_policy="FullPCPUs", preferred_policy="FullPCPUs"
)
REQUIRE_SPREAD = CPURequest(
    cpu=4000, bind=True, required_policy="SpreadByPCPUs", preferred_policy="SpreadByPCPUs"
)
PLAIN = CPURequest(cpu=4000)
FULL_ONLY = {k.LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"}
SPREAD_ONLY = {k.LABEL_NODE_CPU_BIND_POLICY: "SpreadByPCPUs"}


@pytest.mark.parametrize(
    ("request_", "labels", "topology", "expected"),
    [
        pytest.param(
            BIND_FULL, {}, True, NodePlan(bind=True, policy="FullPCPUs"), id="preferred-full"
        ),
        pytest.param(
            REQUIRE_SPREAD,
            {},
            True,
            NodePlan(bind=True, policy="SpreadByPCPUs", required=True),
            id="required-spread",
        ),
        pytest.param(PLAIN, {}, True, NodePlan(bind=False), id="no-binding"),
        pytest.param(PLAIN, {}, False, NodePlan(bind=False), id="no-binding-needs-no-topology"),
        pytest.param(
            BIND_FULL, {}, False, Rejection(UAU, INVALID_CPU_TOPOLOGY), id="invalid-topology"
        ),
        pytest.param(
            PLAIN,
            FULL_ONLY,
            True,
            NodePlan(bind=True, policy="FullPCPUs", required=True),
            id="node-forces-full-on-any-pod",
        ),
        pytest.param(
            BIND_SPREAD,
            FULL_ONLY,
            True,
            NodePlan(bind=True, policy="FullPCPUs", required=True),
            id="node-policy-beats-preferred",
        ),
        pytest.param(
            PLAIN,
            SPREAD_ONLY,
            True,
            NodePlan(bind=True, policy="SpreadByPCPUs", required=True),
            id="node-forces-spread",
        ),
        pytest.param(
            PLAIN,
            {k.LABEL_NODE_CPU_BIND_POLICY: "None"},
            True,
            NodePlan(bind=False),
            id="node-policy-None",
        ),
        pytest.param(
            PLAIN,
            {k.LABEL_NODE_CPU_BIND_POLICY: "Bogus"},
            True,
            NodePlan(bind=False),
            id="node-policy-unknown",
        ),
        pytest.param(
            CPURequest(cpu=0), FULL_ONLY, True, NodePlan(bind=False), id="forced-without-cpu"
        ),
        pytest.param(
            CPURequest(cpu=1500),
            FULL_ONLY,
            True,
            Rejection(UAU, INVALID_REQUESTED_CPUS),
            id="forced-fractional-cpu",
        ),
        pytest.param(
            PLAIN, FULL_ONLY, False, Rejection(UAU, INVALID_CPU_TOPOLOGY), id="forced-no-topology"
        ),
        pytest.param(
            REQUIRE_SPREAD,
            FULL_ONLY,
            True,
            Rejection(UAU, CPU_BIND_POLICY_CONFLICT),
            id="required-spread-on-full-only",
        ),
        pytest.param(
            REQUIRE_FULL,
            SPREAD_ONLY,
            True,
            Rejection(UAU, CPU_BIND_POLICY_CONFLICT),
            id="required-full-on-spread-node",
        ),
        pytest.param(
            REQUIRE_FULL,
            FULL_ONLY,
            True,
            NodePlan(bind=True, policy="FullPCPUs", required=True),
            id="required-matches-node",
        ),
        pytest.param(
            CPURequest(cpu=3000, bind=True, required_policy="FullPCPUs"),
            {},
            True,
            Rejection(UAU, SMT_ALIGNMENT),
            id="required-full-odd-cpus",
        ),
        pytest.param(
            CPURequest(cpu=3000),
            FULL_ONLY,
            True,
            Rejection(UAU, SMT_ALIGNMENT),
            id="forced-full-odd-cpus",
        ),
        pytest.param(
            CPURequest(cpu=3000, bind=True, preferred_policy="FullPCPUs"),
            {},
            True,
            NodePlan(bind=True, policy="FullPCPUs"),
            id="preferred-full-odd-cpus-is-allowed",
        ),
        pytest.param(
            CPURequest(cpu=3000, bind=True, required_policy="SpreadByPCPUs"),
            {},
            True,
            NodePlan(bind=True, policy="SpreadByPCPUs", required=True),
            id="spread-odd-cpus",
        ),
        pytest.param(
            CPURequest(cpu=4000, numa_policy="SingleNUMANode"),
            {k.LABEL_NODE_NUMA_TOPOLOGY_POLICY: "Restricted"},
            True,
            Rejection(UAU, NUMA_POLICY_NOT_MATCH),
            id="numa-policy-mismatch",
        ),
        pytest.param(
            CPURequest(cpu=4000, numa_policy="Restricted"),
            {k.LABEL_NODE_NUMA_TOPOLOGY_POLICY: "Restricted"},
            True,
            NodePlan(bind=False, numa_policy="Restricted", numa_exclusive="Required"),
            id="numa-policy-match",
        ),
        pytest.param(
            CPURequest(cpu=4000, numa_policy="SingleNUMANode", numa_exclusive="Preferred"),
            {},
            True,
            NodePlan(bind=False, numa_policy="SingleNUMANode", numa_exclusive="Preferred"),
            id="pod-numa-policy-alone",
        ),
        pytest.param(
            PLAIN,
            {k.LABEL_NODE_NUMA_TOPOLOGY_POLICY: "BestEffort"},
            True,
            NodePlan(bind=False, numa_policy="BestEffort"),
            id="node-numa-policy-alone",
        ),
        pytest.param(
            CPURequest(cpu=4000, numa_policy="SingleNUMANode"),
            {k.LABEL_NODE_NUMA_TOPOLOGY_POLICY: "None"},
            True,
            NodePlan(bind=False, numa_policy="SingleNUMANode", numa_exclusive="Required"),
            id="node-numa-policy-None-matches-any",
        ),
    ],
)
def test_plan(
    request_: CPURequest, labels: dict[str, str], topology: bool, expected: object
) -> None:
    target = node(labels=labels, topology=TWO_SOCKETS if topology else None)
    assert plan(request_, target, node_topology(target)) == expected


def test_one_thread_per_core_needs_no_alignment() -> None:
    target = node(topology=topology_text(threads=1))
    request = CPURequest(cpu=3000, bind=True, required_policy="FullPCPUs")
    assert plan(request, target, node_topology(target)) == NodePlan(
        bind=True, policy="FullPCPUs", required=True
    )
