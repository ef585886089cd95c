"""BE CPU suppress: BE work gets what latency-sensitive work leaves under a threshold.

Budget (millicores), each pass, from usage over ``2 x`` the sampling interval:

1. ``pods_non_be`` = usage of pods that are neither Koordinator BE nor kube BestEffort, plus
   the usage of pods that have metrics but are missing from the pod list. The snapshot lists
   only known pods, so the latter is measured as the kubepods cgroup's usage less the listed
   pods' and the kubepods-resident host applications' (never below 0; when the kubepods
   cgroup has no sample this part is 0);
2. ``host_apps_non_be`` = usage of host applications except BE ones living in the BE tier;
3. ``system`` = ``max(node - all pods - all host apps, 0)``, then at least the node's
   reserved CPU (``max(capacity - allocatable, reservation annotation)``);
4. ``budget = capacity x threshold% - pods_non_be - host_apps_non_be - system``;
5. with ``cpuSuppressMinPercent``: ``budget = max(budget, capacity x min%)``.

Policy ``cpuset`` (default): ``ceil(budget / 1000)`` CPUs, at least 2, growing by at most
``ceil(10 %)`` of the logical CPUs per pass, picked from the LSR-bound and LS CPUs in
proportion (node-reserved, exclusive SYSTEM and LSE CPUs are never candidates), whole
hyper-thread pairs first and spread over NUMA node/socket buckets (:func:`pick_cpus`). The set
goes to the BE QoS directory, its pods and containers (with the kubelet's static CPU manager
only to the containers; the QoS and pod directories keep the full BE cpuset). The BE QoS quota
is then put back to unlimited once.

Policy ``cfsQuota``: ``quota = budget x 100`` µs per 100 ms period, at least 2000; unchanged
when within 1 % of the node's capacity of the current quota (and not at the 2000 floor);
growing by at most 10 % of the capacity per pass, except from unlimited, where it goes
straight to the target (the v1.8 fix of upstream #2723). Only the BE QoS directory gets the
quota; its cpuset is put back to the full BE cpuset once. With gate ``BatchResource`` the BE
tier's pods and containers are set to an unlimited quota first (the parent may then never sit
below a child: cgroup v1 refuses that). Without the gate their quotas stay, and the tier's
quota is never written below the largest of them.

Deliberate difference: the "within 1 %" bypass never applies while the current quota is
unlimited (upstream would keep a small target from ever being written then).

Disabled (NodeSLO ``resourceUsedThresholdWithBE.enable`` false): the BE QoS quota goes back to
unlimited and every BE directory to the full BE cpuset, once. With gates ``BECPUSuppress`` and
``BECPUManager`` both on, suppression is skipped the same way, except that containers of BE pods
with their own cpuset or NUMA allocation keep theirs.

Gauges: ``be_suppress_cpu_cores{type}`` (CPUs or quota cores applied) and
``be_suppress_ls_used_cpu_cores`` (``pods_non_be`` in cores).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from agent.cgroups import paths
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import CFS_PERIOD, UNLIMITED, Resource
from agent.qos import nodeinfo
from agent.qos.cpuset_pool import (
    be_full_cpuset,
    bound_cpus,
    kubelet_cpu_policy,
    node_excluded_cpus,
)
from agent.qos.framework import (
    CgroupWrite,
    CpuInfo,
    Gauge,
    NodeSnapshot,
    Outcome,
    PodState,
)
from apis import constants as k
from apis.qos import KubeQoS, QoSClass
from apis.slo import HostApplicationSpec

__all__ = ["Budget", "CpuSuppress", "be_budget", "pick_cpus"]

_log = logging.getLogger(__name__)

NAME: Final = "cpu_suppress"
#: Lowest quota the cfsQuota policy writes (0.02 core).
FLOOR_QUOTA: Final = 2000
MIN_CPUS: Final = 2
_KUBEPODS_BASES: Final = frozenset({"Kubepods", "KubepodsBurstable", "KubepodsBesteffort"})


@dataclass(frozen=True, slots=True)
class Budget:
    """The terms of the BE CPU budget, in millicores."""

    capacity: int
    threshold: float
    pods_non_be: float
    host_apps_non_be: float
    #: System usage, already floored at the node's reserved CPU.
    system: float
    minimum: float | None = None

    @property
    def milli(self) -> int:
        value = self.threshold - self.pods_non_be - self.host_apps_non_be - self.system
        if self.minimum is not None:
            value = max(value, self.minimum)
        return math.floor(value)

    def explain(self) -> str:
        text = (
            f"BE budget {self.milli}m = {self.threshold:g}m threshold"
            f" - {self.pods_non_be:g}m non-BE pods - {self.host_apps_non_be:g}m host apps"
            f" - {self.system:g}m system"
        )
        if self.minimum is not None:
            text += f", at least {self.minimum:g}m"
        return text


def _host_apps(snapshot: NodeSnapshot) -> Iterable[HostApplicationSpec]:
    return iter(snapshot.settings.host_applications)


def be_budget(snapshot: NodeSnapshot) -> Budget | None:
    """The BE budget of this pass; ``None`` without node usage or capacity."""
    usage = snapshot.usage
    window = 2 * usage.interval
    capacity = snapshot.node.status.capacity.get(k.RESOURCE_CPU, 0)
    node_used = usage.node_cpu(window)
    if node_used is None or capacity <= 0:
        return None
    pods_all = pods_non_be = 0.0
    for pod in snapshot.pods:
        used = usage.pod_cpu(pod.uid, window)
        if used is None:
            continue
        pods_all += used
        if pod.qos is not QoSClass.BE and pod.kube_qos is not KubeQoS.BEST_EFFORT:
            pods_non_be += used
    apps_all = apps_non_be = apps_in_kubepods = 0.0
    for app in _host_apps(snapshot):
        used = usage.host_app_cpu(app.name, window)
        if used is None:
            continue
        apps_all += used
        base = app.cgroup_path.base if app.cgroup_path is not None else ""
        if base in _KUBEPODS_BASES:
            apps_in_kubepods += used
        if not (app.qos == QoSClass.BE and base == "KubepodsBesteffort"):
            apps_non_be += used
    kubepods_used = usage.cgroup_cpu(paths.qos_dir(snapshot.cgroup, KubeQoS.GUARANTEED), window)
    if kubepods_used is not None:
        unlisted = max(kubepods_used - pods_all - apps_in_kubepods, 0.0)
        pods_all += unlisted
        pods_non_be += unlisted
    reserved = nodeinfo.node_reserved(snapshot.node).get(k.RESOURCE_CPU, 0)
    system = max(node_used - pods_all - apps_all, 0.0)
    suppress = snapshot.settings.suppress
    return Budget(
        capacity=capacity,
        threshold=capacity * suppress.threshold_percent / 100,
        pods_non_be=pods_non_be,
        host_apps_non_be=apps_non_be,
        system=max(system, float(reserved)),
        minimum=None if suppress.min_percent is None else capacity * suppress.min_percent / 100,
    )


def pick_cpus(pool: Sequence[CpuInfo], count: int) -> CpuSet:
    """``count`` CPUs of ``pool``: whole hyper-thread pairs first, spread over buckets.

    Buckets are (NUMA node, socket), each sorted by (core, cpu), the largest bucket first (ties:
    lowest first cpu). Round-robin over the buckets takes the first free pair of consecutive
    CPUs of one core while two or more are still needed, then single CPUs. A pool smaller than
    ``count`` gives nothing.
    """
    if count <= 0:
        return CpuSet()
    if len(pool) < count:
        _log.warning("BE suppress wants %d CPUs but only %d are candidates", count, len(pool))
        return CpuSet()
    grouped: dict[tuple[int, int], list[CpuInfo]] = {}
    for cpu in pool:
        grouped.setdefault((cpu.node, cpu.socket), []).append(cpu)
    buckets = [sorted(b, key=lambda c: (c.core, c.cpu)) for b in grouped.values()]
    buckets.sort(key=lambda b: (-len(b), b[0].cpu))
    taken: set[int] = set()
    need = count
    while need > 1:
        progressed = False
        for bucket in buckets:
            if need <= 1:
                break
            for first, second in itertools.pairwise(bucket):
                if first.core == second.core and not {first.cpu, second.cpu} & taken:
                    taken.update((first.cpu, second.cpu))
                    need -= 2
                    progressed = True
                    break
        if not progressed:
            break
    while need > 0:
        progressed = False
        for bucket in buckets:
            if need == 0:
                break
            free = next((c for c in bucket if c.cpu not in taken), None)
            if free is not None:
                taken.add(free.cpu)
                need -= 1
                progressed = True
        if not progressed:
            break
    return CpuSet(taken)


def _be_tier(snapshot: NodeSnapshot) -> list[PodState]:
    return [
        p for p in snapshot.pods if p.kube_qos is KubeQoS.BEST_EFFORT and not p.pod.is_terminated
    ]


def _has_allocation(pod: PodState) -> bool:
    if pod.cpuset:
        return True
    status = nodeinfo.pod_resource_status(pod.pod)
    return status is not None and bool(status.numa_node_resources)


class CpuSuppress:
    """BE CPU suppress (gate ``BECPUSuppress``); see the module docstring.

    Keeps which policy's leftovers were put back, so each recovery is written once.
    """

    def __init__(self) -> None:
        self._quota_recovered = False
        #: The full BE cpuset last restored (``None``: not restored since suppressed by cpuset).
        self._cpuset_recovered: CpuSet | None = None

    @property
    def name(self) -> str:
        return NAME

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        settings = snapshot.settings
        if not settings.gate("BECPUSuppress"):
            return Outcome()
        be_dir = paths.qos_dir(snapshot.cgroup, KubeQoS.BEST_EFFORT)
        if settings.gate("BECPUManager"):
            writes = self._recover_quota(be_dir, "BECPUManager on: suppress skipped")
            writes += self._recover_cpuset(snapshot, be_dir, keep_allocated=True)
            return Outcome(writes=tuple(writes))
        if not settings.suppress.enable:
            writes = self._recover_quota(be_dir, "BE suppress disabled")
            writes += self._recover_cpuset(snapshot, be_dir)
            return Outcome(writes=tuple(writes))
        budget = be_budget(snapshot)
        if budget is None:
            _log.debug("BE suppress: no node usage or capacity yet")
            return Outcome()
        ls_used = Gauge("be_suppress_ls_used_cpu_cores", budget.pods_non_be / 1000)
        if settings.suppress.policy == "cfsQuota":
            outcome = self._by_quota(snapshot, be_dir, budget)
        else:
            outcome = self._by_cpuset(snapshot, be_dir, budget)
        return outcome + Outcome(gauges=(ls_used,))

    # --- cfsQuota --------------------------------------------------------------------------

    def _by_quota(self, snapshot: NodeSnapshot, be_dir: str, budget: Budget) -> Outcome:
        self._quota_recovered = False
        cap_cores = budget.capacity // 1000
        band = cap_cores * CFS_PERIOD // 100
        step = cap_cores * CFS_PERIOD // 10
        target = max(budget.milli * CFS_PERIOD // 1000, FLOOR_QUOTA)
        found = snapshot.current.get(be_dir, Resource.CPU_QUOTA)
        current = found if isinstance(found, int) else UNLIMITED
        writes: list[CgroupWrite] = []
        floor = UNLIMITED
        for pod in _be_tier(snapshot):
            dirs = [pod.cgroup, *(c.cgroup for c in pod.containers if c.cgroup is not None)]
            if snapshot.settings.gate("BatchResource"):
                writes.extend(
                    CgroupWrite(d, Resource.CPU_QUOTA, UNLIMITED, NAME, "BE pod under cfsQuota")
                    for d in dirs
                )
                continue
            for directory in dirs:
                held = snapshot.current.get(directory, Resource.CPU_QUOTA)
                if isinstance(held, int) and held > floor:
                    floor = held
        reason = budget.explain()
        applied = current
        bypass = current != UNLIMITED and abs(target - current) < band and target != FLOOR_QUOTA
        if not bypass:
            if current != UNLIMITED and target - current > step:
                target = current + step
                reason += f"; step-limited from {current}"
            if target < floor:
                _log.info("BE tier quota %d raised to %d, held by a BE pod", target, floor)
                target = floor
                reason += f"; not below the {floor} a BE pod holds"
            writes.append(CgroupWrite(be_dir, Resource.CPU_QUOTA, target, NAME, reason))
            applied = target
        writes += self._recover_cpuset(snapshot, be_dir)
        gauges: tuple[Gauge, ...] = ()
        if applied != UNLIMITED:
            gauges = (Gauge("be_suppress_cpu_cores", applied / CFS_PERIOD, {"type": "cfsQuota"}),)
        return Outcome(writes=tuple(writes), gauges=gauges)

    # --- cpuset ----------------------------------------------------------------------------

    def _by_cpuset(self, snapshot: NodeSnapshot, be_dir: str, budget: Budget) -> Outcome:
        self._cpuset_recovered = None
        total = len(snapshot.cpus)
        want = max(-(-budget.milli // 1000), MIN_CPUS)
        reason = budget.explain()
        current = snapshot.current.get(be_dir, Resource.CPUSET_CPUS)
        if isinstance(current, CpuSet):
            limit = -(-total // 10)
            if want - len(current) > limit:
                want = len(current) + limit
                reason += f"; step-limited from {len(current)} cpus"
        picked = self._pick(snapshot, want)
        writes: list[CgroupWrite] = []
        if not picked:
            _log.warning(
                "BE suppress: no CPU could be picked for %d wanted; cpuset unchanged", want
            )
        else:
            reason = f"{reason} -> {want} cpus"
            pods = _be_tier(snapshot)
            if kubelet_cpu_policy(snapshot.node) == "static":
                full = be_full_cpuset(snapshot)
                upper = f"kubelet static policy: full BE cpuset ({reason})"
                writes.append(CgroupWrite(be_dir, Resource.CPUSET_CPUS, full, NAME, upper))
                writes.extend(
                    CgroupWrite(p.cgroup, Resource.CPUSET_CPUS, full, NAME, upper) for p in pods
                )
            else:
                writes.append(CgroupWrite(be_dir, Resource.CPUSET_CPUS, picked, NAME, reason))
                writes.extend(
                    CgroupWrite(p.cgroup, Resource.CPUSET_CPUS, picked, NAME, reason) for p in pods
                )
            writes.extend(
                CgroupWrite(c.cgroup, Resource.CPUSET_CPUS, picked, NAME, reason)
                for p in pods
                for c in p.containers
                if c.cgroup is not None
            )
        writes += self._recover_quota(be_dir, "BE suppressed by cpuset")
        gauge = Gauge("be_suppress_cpu_cores", float(len(picked)), {"type": "cpuset"})
        return Outcome(writes=tuple(writes), gauges=(gauge,))

    @staticmethod
    def _pick(snapshot: NodeSnapshot, want: int) -> CpuSet:
        candidates = CpuSet(c.cpu for c in snapshot.cpus) - node_excluded_cpus(snapshot.node)
        lsr = bound_cpus(snapshot.pods, QoSClass.LSR) & candidates
        ls = candidates - lsr - bound_cpus(snapshot.pods, QoSClass.LSE)
        if not lsr and not ls:
            return CpuSet()
        from_lsr = want * len(lsr) // (len(lsr) + len(ls))
        lsr_pool = [c for c in snapshot.cpus if c.cpu in lsr]
        ls_pool = [c for c in snapshot.cpus if c.cpu in ls]
        return pick_cpus(lsr_pool, from_lsr) | pick_cpus(ls_pool, want - from_lsr)

    # --- recovery --------------------------------------------------------------------------

    def _recover_quota(self, be_dir: str, why: str) -> list[CgroupWrite]:
        if self._quota_recovered:
            return []
        self._quota_recovered = True
        reason = f"{why}: BE quota back to unlimited"
        return [CgroupWrite(be_dir, Resource.CPU_QUOTA, UNLIMITED, NAME, reason)]

    def _recover_cpuset(
        self, snapshot: NodeSnapshot, be_dir: str, *, keep_allocated: bool = False
    ) -> list[CgroupWrite]:
        full = be_full_cpuset(snapshot)
        if not full or self._cpuset_recovered == full:
            return []
        self._cpuset_recovered = full
        reason = "BE cpuset back to every CPU BE may use"
        pods = _be_tier(snapshot)
        writes = [CgroupWrite(be_dir, Resource.CPUSET_CPUS, full, NAME, reason)]
        writes.extend(CgroupWrite(p.cgroup, Resource.CPUSET_CPUS, full, NAME, reason) for p in pods)
        writes.extend(
            CgroupWrite(c.cgroup, Resource.CPUSET_CPUS, full, NAME, reason)
            for p in pods
            if not (keep_allocated and _has_allocation(p))
            for c in p.containers
            if c.cgroup is not None
        )
        return writes
