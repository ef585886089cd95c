"""CPU share pools, and the ``cpuset.cpus`` every pod and container runs on.

Pools (recomputed every pass from the snapshot):

* start from every logical CPU and remove the CPUs the kubelet's static CPU manager pinned
  (node annotation ``node.koordinator.sh/pod-cpu-allocs``); the kubelet's *reserved* CPUs
  stay in;
* remove the node-reserved CPUs (``node.koordinator.sh/reservation`` ``reservedCPUs``) and the
  SYSTEM QoS cpuset when it is exclusive (``node.koordinator.sh/system-qos-resource``);
* **LS pool**: also remove every CPU a pod is bound to by its
  ``scheduling.koordinator.sh/resource-status`` cpuset (LSE and LSR pods);
* **BE pool**: also remove the CPUs of LSE pods only (BE work may share LSR cores).

Per pod, the first rule that applies decides (all containers of a pod get the same set, the
pod directory gets their union):

1. a bound pod (resource-status cpuset) runs on its own CPUs; a cpuset naming a CPU the host
   does not have is treated as absent (logged once per pod and value) and binds no CPU;
2. a NUMA-aware allocation (``numaNodeResources`` with cpu or batch-cpu) runs on the pool's
   CPUs of those NUMA nodes: the LS pool, or for a BE pod the BE pool (gate ``BECPUManager``;
   without it a BE pod goes on to the next rules);
3. SYSTEM pods run on the SYSTEM cpuset when the node declares one;
4. LS pods run on the LS pool;
5. pods of the kube BestEffort tier are left to BE CPU suppress (no write here);
6. any other pod (Guaranteed or Burstable without a Koordinator label) runs on the LS pool,
   unless the kubelet's CPU manager policy is ``static`` (the kubelet owns those cpusets).

Host applications of QoS LS run on the LS pool. An empty set is never written (the kernel
refuses it for a cgroup with tasks); it is logged instead.

Gauges: ``cpuset_share_pool_cpu_cores`` and ``cpuset_be_share_pool_cpu_cores`` (pool sizes),
and with gate ``PerCPUMetric`` one ``cpuset_share_pool_info{cpu}`` /
``cpuset_be_share_pool_info{cpu}`` sample per CPU in the pool.

The pool and topology helpers here (:func:`share_pools`, :func:`be_full_cpuset`,
:func:`kubelet_cpu_policy`) are shared with BE CPU suppress.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from agent.cgroups.cpuset import CpuSet, CpuSetError
from agent.cgroups.resources import Resource
from agent.metrics.usage import host_app_cgroup
from agent.qos import nodeinfo
from agent.qos.framework import CgroupWrite, Gauge, LastPlan, NodeSnapshot, Outcome, PodState
from apis import constants as k
from apis.bounded import BoundedError, CpuListError, check_cpus, decode
from apis.core import Node
from apis.qos import KubeQoS, QoSClass

__all__ = [
    "CpusetPool",
    "SharePools",
    "be_full_cpuset",
    "bound_cpus",
    "host_cpuset",
    "kubelet_cpu_policy",
    "kubelet_pinned_cpus",
    "node_excluded_cpus",
    "numa_cpus",
    "share_pools",
]

_log = logging.getLogger(__name__)

NAME: Final = "cpuset_pool"
_GATE: Final = "CPUSetAllocator"


# --- kubelet annotations ------------------------------------------------------------------------


class _KubeletPolicy(msgspec.Struct, rename="camel"):
    policy: str = ""


class _KubeletAlloc(msgspec.Struct, rename="camel"):
    cpuset: str = ""


#: Most pod entries a ``pod-cpu-allocs`` annotation may list.
MAX_ALLOCS: Final = 8192
_POLICY: Final = msgspec.json.Decoder(_KubeletPolicy)
_ALLOCS: Final = msgspec.json.Decoder(
    Annotated[list[_KubeletAlloc], msgspec.Meta(max_length=MAX_ALLOCS)]
)


@functools.lru_cache(maxsize=64)
def _parse_policy(text: str) -> str:
    try:
        return decode(text, _POLICY, "").policy
    except BoundedError as err:
        _log.warning("annotation %s ignored: %s", k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY, err)
        return ""


@functools.lru_cache(maxsize=64)
def _parse_allocs(text: str) -> CpuSet:
    try:
        pinned: set[int] = set()
        for alloc in decode(text, _ALLOCS, ""):
            pinned.update(CpuSet.parse(alloc.cpuset))
        return CpuSet(pinned)
    except (BoundedError, CpuSetError) as err:
        _log.warning("annotation %s ignored: %s", k.ANNOTATION_NODE_POD_CPU_ALLOCS, err)
        return CpuSet()


def kubelet_cpu_policy(node: Node) -> str:
    """The kubelet's CPU manager policy (``static``, ``none``; empty when unknown)."""
    text = node.metadata.annotations.get(k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY)
    return _parse_policy(text) if text else ""


def kubelet_pinned_cpus(node: Node) -> CpuSet:
    """CPUs the kubelet's static CPU manager pinned to pods (``pod-cpu-allocs``)."""
    text = node.metadata.annotations.get(k.ANNOTATION_NODE_POD_CPU_ALLOCS)
    return _parse_allocs(text) if text else CpuSet()


# --- pools -------------------------------------------------------------------------------------


def node_excluded_cpus(node: Node) -> CpuSet:
    """CPUs no pod pool may use: node-reserved CPUs and the exclusive SYSTEM cpuset."""
    system, exclusive = nodeinfo.system_qos(node)
    excluded = nodeinfo.reserved_cpus(node)
    return excluded | system if exclusive else excluded


@functools.lru_cache(maxsize=4096)
def _refused(owner: str, cpuset: CpuSet, host: CpuSet) -> None:
    """Log, once per pod and value, a bound cpuset naming CPUs the host does not have."""
    try:
        check_cpus(cpuset, host, k.ANNOTATION_RESOURCE_STATUS)
    except CpuListError as err:
        _log.warning("%s: ignoring its bound cpuset: %s", owner, err)


def host_cpuset(pod: PodState, host: CpuSet) -> CpuSet | None:
    """The pod's bound cpuset (resource-status) when the host has every CPU of it; ``None``
    when it has none, or names a CPU out of range (then it is treated as absent, logged once
    per pod and value)."""
    if not pod.cpuset:
        return None
    if pod.cpuset <= host:
        return pod.cpuset
    _refused(f"pod {pod.namespace}/{pod.name}", pod.cpuset, host)
    return None


def bound_cpus(pods: Iterable[PodState], *classes: QoSClass, host: CpuSet | None = None) -> CpuSet:
    """CPUs bound (resource-status cpuset) to live pods of ``classes`` (all when none given);
    with ``host``, a cpuset naming a CPU the host does not have binds nothing."""
    found: set[int] = set()
    for pod in pods:
        if not pod.cpuset or pod.pod.is_terminated or (classes and pod.qos not in classes):
            continue
        cpus = pod.cpuset if host is None else host_cpuset(pod, host)
        found.update(cpus or ())
    return CpuSet(found)


def numa_cpus(snapshot: NodeSnapshot, nodes: Iterable[int]) -> CpuSet:
    """The logical CPUs of the given NUMA nodes."""
    wanted = frozenset(nodes)
    return CpuSet(c.cpu for c in snapshot.cpus if c.node in wanted)


@dataclass(frozen=True, slots=True)
class SharePools:
    """The LS share pool and the BE share pool."""

    ls: CpuSet
    be: CpuSet


def share_pools(snapshot: NodeSnapshot) -> SharePools:
    """Both share pools of the node (see the module docstring)."""
    every = CpuSet(c.cpu for c in snapshot.cpus)
    base = every - kubelet_pinned_cpus(snapshot.node) - node_excluded_cpus(snapshot.node)
    return SharePools(
        ls=base - bound_cpus(snapshot.pods, host=every),
        be=base - bound_cpus(snapshot.pods, QoSClass.LSE, host=every),
    )


def be_full_cpuset(snapshot: NodeSnapshot) -> CpuSet:
    """What BE work gets when nothing suppresses it: every CPU less the exclusive SYSTEM
    cpuset, the node-reserved CPUs and the CPUs of LSE pods."""
    every = CpuSet(c.cpu for c in snapshot.cpus)
    lse = bound_cpus(snapshot.pods, QoSClass.LSE, host=every)
    return every - node_excluded_cpus(snapshot.node) - lse


# --- the strategy ------------------------------------------------------------------------------


def _numa_nodes(pod: PodState) -> frozenset[int]:
    status = nodeinfo.pod_resource_status(pod.pod)
    if status is None:
        return frozenset()
    return frozenset(
        n.node
        for n in status.numa_node_resources
        if n.resources.get(k.RESOURCE_CPU, 0) > 0 or n.resources.get(k.RESOURCE_BATCH_CPU, 0) > 0
    )


class CpusetPool:
    """Keeps every pod and container on the CPUs its class may use (gate ``CPUSetAllocator``)."""

    def __init__(self) -> None:
        #: The outcome is a function of the pods, the Node, the CPUs, the cgroup layout and
        #: the settings (a pass that logged a pod without CPUs is not kept: it logs each pass).
        self._last = LastPlan()

    @property
    def name(self) -> str:
        return NAME

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        settings = snapshot.settings
        if not settings.gate(_GATE):
            return Outcome()
        inputs = (snapshot.node, snapshot.cpus, snapshot.cgroup, settings)
        last = self._last.get(snapshot.pods, *inputs)
        if last is not None:
            return last
        pools = share_pools(snapshot)
        static = kubelet_cpu_policy(snapshot.node) == "static"
        writes: list[CgroupWrite] = []
        logged = False
        for pod in snapshot.pods:
            if pod.pod.is_terminated:
                continue
            decided = self.decide(snapshot, pod, pools, kubelet_static=static)
            if decided is None:
                continue
            cpus, reason = decided
            if not cpus:
                logged = True
                _log.warning(
                    "pod %s/%s: no CPU left for it (%s); cpuset left as is",
                    pod.namespace,
                    pod.name,
                    reason,
                )
                continue
            writes.append(CgroupWrite(pod.cgroup, Resource.CPUSET_CPUS, cpus, NAME, reason))
            writes.extend(
                CgroupWrite(c.cgroup, Resource.CPUSET_CPUS, cpus, NAME, reason)
                for c in pod.containers
                if c.cgroup is not None
            )
        for app in settings.host_applications:
            if app.qos != QoSClass.LS:
                continue
            directory = host_app_cgroup(app, snapshot.cgroup)
            if directory and pools.ls:
                writes.append(
                    CgroupWrite(
                        directory, Resource.CPUSET_CPUS, pools.ls, NAME, "LS host application"
                    )
                )
        outcome = Outcome(
            writes=tuple(writes), gauges=self._gauges(settings.gate("PerCPUMetric"), pools)
        )
        return outcome if logged else self._last.put(snapshot.pods, inputs, outcome)

    @staticmethod
    def decide(
        snapshot: NodeSnapshot, pod: PodState, pools: SharePools, *, kubelet_static: bool
    ) -> tuple[CpuSet, str] | None:
        """The cpuset of ``pod``'s containers and why; ``None`` when this strategy leaves it."""
        bound = host_cpuset(pod, CpuSet(c.cpu for c in snapshot.cpus))
        if bound is not None:
            return bound, f"bound {pod.qos or 'pod'} cpuset"
        nodes = _numa_nodes(pod)
        if nodes:
            if pod.qos is not QoSClass.BE:
                return pools.ls & numa_cpus(snapshot, nodes), "LS pool of its NUMA nodes"
            if snapshot.settings.gate("BECPUManager"):
                return pools.be & numa_cpus(snapshot, nodes), "BE pool of its NUMA nodes"
        if pod.qos is QoSClass.SYSTEM:
            system, _ = nodeinfo.system_qos(snapshot.node)
            if system:
                return system, "SYSTEM cpuset"
        if pod.qos is QoSClass.LS:
            return pools.ls, "LS share pool"
        if pod.kube_qos is KubeQoS.BEST_EFFORT:
            return None
        if kubelet_static:
            return None
        return pools.ls, "LS share pool"

    @staticmethod
    def _gauges(per_cpu: bool, pools: SharePools) -> tuple[Gauge, ...]:
        gauges = [
            Gauge("cpuset_share_pool_cpu_cores", float(len(pools.ls))),
            Gauge("cpuset_be_share_pool_cpu_cores", float(len(pools.be))),
        ]
        if per_cpu:
            gauges.extend(
                Gauge("cpuset_share_pool_info", 1.0, {"cpu": str(cpu)}) for cpu in sorted(pools.ls)
            )
            gauges.extend(
                Gauge("cpuset_be_share_pool_info", 1.0, {"cpu": str(cpu)})
                for cpu in sorted(pools.be)
            )
        return tuple(gauges)
