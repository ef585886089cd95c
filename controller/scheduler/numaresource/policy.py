"""Which pods get CPUs bound, with which policy, and why a node cannot take them.

Two steps, as the plugin's PreFilter and Filter split them:

:func:`prepare` (once per pod). A pod with no requests at all is skipped (``None``). A pod
asks for bound CPUs itself when its ``koordinator.sh/qosClass`` label says LSE or LSR, its
priority class is koord-prod, and its bind policy (``requiredCPUBindPolicy`` of the
``scheduling.koordinator.sh/resource-spec`` annotation, else ``preferredCPUBindPolicy``, else
the args' ``defaultCPUBindPolicy``; ``Default`` means the args') is ``FullPCPUs`` or
``SpreadByPCPUs``. Such a pod must request whole CPUs (:data:`INVALID_REQUESTED_CPUS`).

:func:`plan` (per node). The node label ``node.koordinator.sh/numa-topology-policy`` and the
pod's ``numaTopologyPolicy`` must agree when both are set (:data:`NUMA_POLICY_NOT_MATCH`). The
node label ``node.koordinator.sh/cpu-bind-policy`` ``FullPCPUsOnly`` or ``SpreadByPCPUs`` binds
every pod requesting CPU (whole CPUs again) and requires that policy: a pod requiring another
one is refused (:data:`CPU_BIND_POLICY_CONFLICT`). A pod bound here needs a valid topology
(:data:`INVALID_CPU_TOPOLOGY`); a required ``FullPCPUs`` needs a multiple of the threads per
core (:data:`SMT_ALIGNMENT`). The policy to allocate with is the required one (the node's or
the pod's, which must agree), else the pod's preferred one.

Rejections carry kube-scheduler's status code names; every one here is
``UnschedulableAndUnresolvable`` except an unreadable pod annotation (``Error``, the decoding
message).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

import msgspec

from apis import constants as k
from apis.bounded import BoundedError, decode
from apis.core import Node, Pod, pod_requests
from apis.qos import PriorityClass, priority_class
from controller.scheduler.numaresource.args import NodeNUMAResourceArgs
from controller.scheduler.numaresource.topology import INVALID_CPU_TOPOLOGY, CPUTopology

__all__ = [
    "CPU_BIND_POLICY_CONFLICT",
    "INVALID_CPU_TOPOLOGY",
    "INVALID_REQUESTED_CPUS",
    "NUMA_POLICY_NOT_MATCH",
    "SMT_ALIGNMENT",
    "CPUBindPolicy",
    "CPUExclusivePolicy",
    "CPURequest",
    "Code",
    "NUMATopologyPolicy",
    "NodeCPUBindPolicy",
    "NodePlan",
    "Rejection",
    "allows_cpuset",
    "node_cpu_bind_policy",
    "node_numa_topology_policy",
    "plan",
    "pod_exclusive_policy",
    "prepare",
]

NUMA_POLICY_NOT_MATCH: Final = "node(s) NUMA Topology policy not match"
INVALID_REQUESTED_CPUS: Final = "the requested CPUs must be integer"
SMT_ALIGNMENT: Final = "node(s) requested cpus not multiple cpus per core"
CPU_BIND_POLICY_CONFLICT: Final = (
    "node(s) cpu bind policy conflicts with pod's required cpu bind policy"
)

Code = Literal["Unschedulable", "UnschedulableAndUnresolvable", "Error"]
_UNRESOLVABLE: Final = "UnschedulableAndUnresolvable"


class CPUBindPolicy(enum.StrEnum):
    """Values of the pod's required/preferred CPU bind policy."""

    DEFAULT = "Default"
    FULL_PCPUS = "FullPCPUs"
    SPREAD_BY_PCPUS = "SpreadByPCPUs"
    CONSTRAINED_BURST = "ConstrainedBurst"


class NodeCPUBindPolicy(enum.StrEnum):
    """Values of the node label ``node.koordinator.sh/cpu-bind-policy``."""

    NONE = "None"
    FULL_PCPUS_ONLY = "FullPCPUsOnly"
    SPREAD_BY_PCPUS = "SpreadByPCPUs"


class CPUExclusivePolicy(enum.StrEnum):
    """Values of ``preferredCPUExclusivePolicy``: whom a pod's CPUs keep away."""

    NONE = "None"
    #: No other PCPULevel pod on the pod's physical cores.
    PCPU_LEVEL = "PCPULevel"
    #: No other NUMANodeLevel pod on the pod's NUMA nodes.
    NUMA_NODE_LEVEL = "NUMANodeLevel"


class NUMATopologyPolicy(enum.StrEnum):
    NONE = ""
    BEST_EFFORT = "BestEffort"
    RESTRICTED = "Restricted"
    SINGLE_NUMA_NODE = "SingleNUMANode"


_BINDING: Final = frozenset({CPUBindPolicy.FULL_PCPUS, CPUBindPolicy.SPREAD_BY_PCPUS})
_NODE_REQUIRES: Final = {
    NodeCPUBindPolicy.FULL_PCPUS_ONLY: CPUBindPolicy.FULL_PCPUS,
    NodeCPUBindPolicy.SPREAD_BY_PCPUS: CPUBindPolicy.SPREAD_BY_PCPUS,
}
_BINDING_QOS: Final = frozenset({"LSE", "LSR"})
_NUMA_EXCLUSIVE_REQUIRED: Final = "Required"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a pod cannot (have its CPUs bound on) a node: a status code and its message."""

    code: Code
    reason: str


# Unknown keys are ignored, as Kubernetes' JSON decoding of annotations does.
class _ResourceSpec(msgspec.Struct, frozen=True, gc=False):
    required: str = msgspec.field(default="", name="requiredCPUBindPolicy")
    preferred: str = msgspec.field(default="", name="preferredCPUBindPolicy")
    exclusive: str = msgspec.field(default="", name="preferredCPUExclusivePolicy")


class _NUMATopologySpec(msgspec.Struct, frozen=True, gc=False):
    policy: str = msgspec.field(default="", name="numaTopologyPolicy")
    exclusive: str = msgspec.field(default="", name="singleNUMANodeExclusive")


_Spec = TypeVar("_Spec", _ResourceSpec, _NUMATopologySpec)


def _decode(pod: Pod, key: str, target: type[_Spec]) -> _Spec | Rejection:
    text = pod.metadata.annotations.get(key)
    if not text:
        return target()
    try:
        return decode(text, target, f"invalid annotation {key}")
    except BoundedError as err:
        return Rejection("Error", str(err))


@dataclass(frozen=True, slots=True)
class CPURequest:
    """What a pod asks of a node's CPUs (found once per scheduling attempt)."""

    #: Requested CPU in millicores.
    cpu: int
    #: The pod itself asks for bound CPUs (LSE/LSR, prod, a binding policy, cpu > 0).
    bind: bool = False
    #: The pod's required bind policy (``Default`` resolved) when it binds; else "".
    required_policy: str = ""
    #: The policy used when nothing is required (the pod's preferred one, or the default).
    preferred_policy: str = ""
    #: ``preferredCPUExclusivePolicy`` as given.
    exclusive_policy: str = ""
    #: The pod's ``numaTopologyPolicy`` ("" when unset).
    numa_policy: str = ""
    #: The pod's ``singleNUMANodeExclusive`` as given.
    numa_exclusive: str = ""

    @property
    def cpus_needed(self) -> int:
        """Whole CPUs requested."""
        return self.cpu // 1000


def allows_cpuset(pod: Pod) -> bool:
    """The pod may have CPUs bound: QoS label LSE or LSR and priority class koord-prod."""
    qos = pod.metadata.labels.get(k.LABEL_QOS_CLASS, "")
    return qos in _BINDING_QOS and priority_class(pod) is PriorityClass.PROD


def prepare(pod: Pod, args: NodeNUMAResourceArgs) -> CPURequest | Rejection | None:
    """The pod's CPU request; ``None`` when it requests nothing at all (the plugin skips it)."""
    spec = _decode(pod, k.ANNOTATION_RESOURCE_SPEC, _ResourceSpec)
    if isinstance(spec, Rejection):
        return spec
    numa = _decode(pod, k.ANNOTATION_NUMA_TOPOLOGY_SPEC, _NUMATopologySpec)
    if isinstance(numa, Rejection):
        return numa
    requests = pod_requests(pod)
    if not any(requests.values()):
        return None
    cpu = requests.get_amount(k.RESOURCE_CPU)
    base = CPURequest(
        cpu=cpu,
        numa_policy=numa.policy,
        numa_exclusive=numa.exclusive,
    )
    if not allows_cpuset(pod):
        return base
    default = args.default_cpu_bind_policy
    preferred = spec.preferred
    if preferred in ("", CPUBindPolicy.DEFAULT):
        preferred = default
    required = spec.required
    if required == CPUBindPolicy.DEFAULT:
        required = default
    policy = required or preferred
    if policy not in _BINDING:
        return base
    if cpu % 1000:
        return Rejection(_UNRESOLVABLE, INVALID_REQUESTED_CPUS)
    if cpu == 0:
        return base
    return CPURequest(
        cpu=cpu,
        bind=True,
        required_policy=required,
        preferred_policy=policy,
        exclusive_policy=spec.exclusive,
        numa_policy=base.numa_policy,
        numa_exclusive=base.numa_exclusive,
    )


def pod_exclusive_policy(pod: Pod) -> str:
    """The pod's ``preferredCPUExclusivePolicy`` ("" when unset or unreadable)."""
    spec = _decode(pod, k.ANNOTATION_RESOURCE_SPEC, _ResourceSpec)
    return "" if isinstance(spec, Rejection) else spec.exclusive


def node_cpu_bind_policy(node: Node) -> str:
    """The node's ``cpu-bind-policy`` label when it is a known value, else ""."""
    value = node.metadata.labels.get(k.LABEL_NODE_CPU_BIND_POLICY, "")
    return value if value in NodeCPUBindPolicy.__members__.values() else ""


def node_numa_topology_policy(node: Node) -> str:
    """The node's ``numa-topology-policy`` label when it names a policy, else "" (none)."""
    value = node.metadata.labels.get(k.LABEL_NODE_NUMA_TOPOLOGY_POLICY, "")
    return value if value in NUMATopologyPolicy.__members__.values() else ""


@dataclass(frozen=True, slots=True)
class NodePlan:
    """How a node would treat the pod's CPUs."""

    #: The pod gets bound CPUs on this node.
    bind: bool
    #: The bind policy to allocate with ("" when not binding).
    policy: str = ""
    #: The policy is required (by the pod or by the node), not merely preferred.
    required: bool = False
    #: The NUMA topology policy in force ("" none): the pod's, else the node's.
    numa_policy: str = ""
    #: ``singleNUMANodeExclusive`` in force (``Required`` when the pod sets a policy only).
    numa_exclusive: str = ""


def plan(request: CPURequest, node: Node, topology: CPUTopology) -> NodePlan | Rejection:
    """The node's verdict on the pod's CPU request (the plugin's Filter, before allocating)."""
    node_numa = node_numa_topology_policy(node)
    pod_numa = request.numa_policy
    if node_numa and pod_numa and node_numa != pod_numa:
        return Rejection(_UNRESOLVABLE, NUMA_POLICY_NOT_MATCH)
    numa_policy = pod_numa or node_numa
    numa_exclusive = request.numa_exclusive
    if not numa_exclusive and pod_numa:
        numa_exclusive = _NUMA_EXCLUSIVE_REQUIRED
    node_policy = node_cpu_bind_policy(node)
    forced = _NODE_REQUIRES.get(NodeCPUBindPolicy(node_policy)) if node_policy else None
    bind = request.bind
    if not bind and forced is not None and request.cpu > 0:
        if request.cpu % 1000:
            return Rejection(_UNRESOLVABLE, INVALID_REQUESTED_CPUS)
        bind = True
    if not bind:
        return NodePlan(bind=False, numa_policy=numa_policy, numa_exclusive=numa_exclusive)
    if not topology.valid:
        return Rejection(_UNRESOLVABLE, INVALID_CPU_TOPOLOGY)
    required = forced if forced is not None else request.required_policy
    if request.required_policy and request.required_policy != required:
        return Rejection(_UNRESOLVABLE, CPU_BIND_POLICY_CONFLICT)
    if required == CPUBindPolicy.FULL_PCPUS and request.cpus_needed % topology.cpus_per_core:
        return Rejection(_UNRESOLVABLE, SMT_ALIGNMENT)
    return NodePlan(
        bind=True,
        policy=required or request.preferred_policy,
        required=bool(required),
        numa_policy=numa_policy,
        numa_exclusive=numa_exclusive,
    )
