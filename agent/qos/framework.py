"""What a QoS strategy sees and what it decides.

A strategy is an object with a ``name`` and ``plan(snapshot) -> Outcome``. It does no I/O:
everything it needs is in the :class:`NodeSnapshot` (node, pods with their cgroup dirs,
settings, CPU topology, usage history, current cgroup values), and everything it wants done is
in the :class:`Outcome` (cgroup writes, evictions, extended resources for the Node, gauges).
A strategy may keep small state between passes (a limiter's tokens, a cool-down deadline),
always advanced by ``snapshot.now`` so tests drive it deterministically.

Cgroup directories are relative to the hierarchy root and the same in every v1 subsystem and
on v2 (``kubepods/besteffort/pod<uid>``); the writer maps them to files.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import msgspec

from agent.cgroups.cpuset import CpuSet
from agent.cgroups.detect import CgroupInfo
from agent.cgroups.resources import Resource
from agent.qos.settings import QoSSettings
from apis import constants as k
from apis.core import Node, Pod
from apis.qos import KubeQoS, PriorityClass, QoSClass
from apis.resources import ResourceList

__all__ = [
    "CgroupView",
    "CgroupWrite",
    "ContainerState",
    "CpuInfo",
    "Eviction",
    "Gauge",
    "LastPlan",
    "NodeSnapshot",
    "Outcome",
    "PodState",
    "Strategy",
    "Usage",
    "Value",
    "same_pods",
]

_NO_RESOURCES = ResourceList()

#: A cgroup value in v1 units: an int (µs, shares, bytes; -1 = unlimited) or a cpu set.
Value = int | CpuSet


class CgroupWrite(msgspec.Struct, frozen=True):
    """One desired cgroup value, with who wants it and why (shown by ``agent plan``).

    A Struct, not a dataclass: strategies make about a thousand of these every pass.
    """

    cgroup: str
    resource: Resource
    value: Value
    strategy: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Eviction:
    """A pod a strategy wants gone, and why (``reason`` is the feature: ``BEMemoryEvict``...)."""

    pod: Pod
    reason: str
    message: str
    strategy: str


class Gauge(msgspec.Struct, frozen=True):
    """A metric sample a strategy reports (exported as ``koordlet_<name>``)."""

    name: str
    value: float
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Everything one strategy wants from one pass."""

    writes: tuple[CgroupWrite, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    #: Extended resources to publish on the Node (``kubernetes.io/batch-cpu``...); None = no say.
    node_resources: ResourceList | None = None
    gauges: tuple[Gauge, ...] = ()

    def __add__(self, other: Outcome) -> Outcome:
        resources = self.node_resources
        if other.node_resources is not None:
            resources = (resources or ResourceList()) + other.node_resources
        return Outcome(
            writes=self.writes + other.writes,
            evictions=self.evictions + other.evictions,
            node_resources=resources,
            gauges=self.gauges + other.gauges,
        )


@dataclass(frozen=True, slots=True)
class ContainerState:
    name: str
    #: ``<runtime>://<id>`` from the pod status; empty until the container exists.
    container_id: str
    #: Its cgroup directory; None when it cannot be built (no id yet, unknown runtime).
    cgroup: str | None
    requests: ResourceList
    limits: ResourceList
    running: bool = False


@dataclass(frozen=True, slots=True)
class PodState:
    pod: Pod
    uid: str
    kube_qos: KubeQoS
    qos: QoSClass
    priority_class: PriorityClass
    #: Priority value with default (eviction ordering).
    priority: int
    #: The pod's cgroup directory (follows the kube QoS).
    cgroup: str
    containers: tuple[ContainerState, ...] = ()
    #: CPUs bound by ``scheduling.koordinator.sh/resource-status`` (LSE/LSR pods), if any.
    cpuset: CpuSet | None = None
    #: ``Pending``, ``Running``...
    phase: str = ""
    #: The pod's effective request (Kubernetes rules, :func:`apis.core.pod_requests`).
    requests: ResourceList = _NO_RESOURCES

    @property
    def name(self) -> str:
        return self.pod.metadata.name

    @property
    def namespace(self) -> str:
        return self.pod.metadata.namespace

    @property
    def active(self) -> bool:
        """Pending, Running, or a phase not reported (yet): the pod holds its resources."""
        return self.phase not in ("Succeeded", "Failed")

    @property
    def label_or_kube_qos(self) -> QoSClass:
        """The class the pod's ``koordinator.sh/qosClass`` label gives, else BE for a
        BestEffort pod and LS for the rest: what CPU burst and group identity go by."""
        if k.LABEL_QOS_CLASS in self.pod.metadata.labels:
            return self.qos
        return QoSClass.BE if self.kube_qos is KubeQoS.BEST_EFFORT else QoSClass.LS


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """One logical CPU and where it sits."""

    cpu: int
    core: int
    socket: int
    node: int


class Usage(Protocol):
    """Measured usage, averaged over a trailing window (seconds). None = no data."""

    @property
    def interval(self) -> float:
        """Seconds between samples."""
        ...

    def node_cpu(self, window: float) -> float | None:
        """Node CPU used, millicores."""
        ...

    def node_memory(self) -> int | None:
        """Node memory used (MemTotal - MemAvailable), bytes, latest sample."""
        ...

    def pod_cpu(self, uid: str, window: float) -> float | None: ...

    def pod_memory(self, uid: str) -> int | None:
        """Pod memory used without page cache, bytes, latest sample."""
        ...

    def cgroup_cpu(self, cgroup: str, window: float) -> float | None:
        """CPU used by any cgroup directory (e.g. the BE QoS dir), millicores."""
        ...

    def throttled_ratio(self, cgroup: str, window: float) -> float | None:
        """Δnr_throttled / Δnr_periods of a cgroup over the window."""
        ...

    def host_app_cpu(self, name: str, window: float) -> float | None: ...

    def samples(self, window: float) -> int:
        """How many node samples fall within the window."""
        ...


class CgroupView(Protocol):
    """Current cgroup values (read through the writer's cache). None = absent."""

    def get(self, cgroup: str, resource: Resource) -> Value | None: ...


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One pass's view of the node. ``now`` is seconds on the agent's monotonic clock."""

    now: float
    node: Node
    cgroup: CgroupInfo
    settings: QoSSettings
    pods: tuple[PodState, ...]
    cpus: tuple[CpuInfo, ...]
    usage: Usage
    current: CgroupView

    @property
    def kubepods(self) -> str:
        """The kubepods root directory (``kubepods`` or ``kubepods.slice``)."""
        return self.cgroup.kubepods_dir

    def pods_of(self, *classes: QoSClass) -> tuple[PodState, ...]:
        return tuple(p for p in self.pods if p.qos in classes)


@runtime_checkable
class Strategy(Protocol):
    """One QoS strategy (see the module docstring).

    Optional members the loop honours: ``interval`` (seconds; the strategy runs at most that
    often instead of every pass) and ``wants_memory(settings) -> bool`` (pods' memory usage
    must be sampled for it; without it the loop does not read pod memory for this strategy).
    """

    @property
    def name(self) -> str: ...

    def plan(self, snapshot: NodeSnapshot) -> Outcome: ...


def combine(outcomes: Sequence[Outcome]) -> Outcome:
    total = Outcome()
    for outcome in outcomes:
        total = total + outcome
    return total


def same_pods(a: Sequence[PodState], b: Sequence[PodState]) -> bool:
    """Whether two lists hold the very same pod states, in order (states are immutable: the
    pod sources hand out the same objects until a pod changes)."""
    return a is b or (len(a) == len(b) and all(map(operator.is_, a, b)))


@dataclass(slots=True)
class LastPlan:
    """A strategy's last outcome and what it was planned from, for strategies whose outcome
    is a function of the pod states and a few other immutable inputs alone: the same states
    (:func:`same_pods`) and equal inputs give that outcome again without planning it anew.

    Drift needs no planning: the writer compares the (same) writes with the cgroups' values
    and rewrites what changed behind the agent's back.
    """

    pods: tuple[PodState, ...] = ()
    inputs: tuple[object, ...] = ()
    outcome: Outcome | None = None

    def get(self, pods: Sequence[PodState], *inputs: object) -> Outcome | None:
        """The last outcome if it was planned from these pods and inputs, else ``None``."""
        if self.outcome is None or len(inputs) != len(self.inputs):
            return None
        for now, then in zip(inputs, self.inputs, strict=True):
            if now is not then and now != then:
                return None
        return self.outcome if same_pods(pods, self.pods) else None

    def put(
        self, pods: Sequence[PodState], inputs: tuple[object, ...], outcome: Outcome
    ) -> Outcome:
        """Remember ``outcome`` as planned from ``pods`` and ``inputs``; returns it."""
        self.pods, self.inputs, self.outcome = tuple(pods), inputs, outcome
        return outcome
