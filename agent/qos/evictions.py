"""Evictions: which pods to evict when the node runs short, and in which order.

Six features, each switched on by its feature gate and only while the NodeSLO's
``resourceUsedThresholdWithBE.enable`` is true:

=========================  =====================================================================
``BEMemoryEvict``          node memory ``usage% = floor(used * 100 / capacity)`` at or above
                           ``memoryEvictThresholdPercent`` (70): release ``capacity * (usage% -
                           lower) / 100`` bytes of pod memory usage (lower: ``memoryEvict-
                           LowerPercent``, else threshold - 2), from BE pods.
``MemoryEvict``            the same trigger and amount, from any pod at or below
                           ``evictEnabledPriorityThreshold``. Koordinator multiplies each pod's
                           memory by 1000 in this path (over-crediting the release); koordpy
                           credits the pod's real memory usage.
``BECPUEvict``             BE CPU satisfaction: ``limit / request`` of the BE tier (request = Σ
                           batch-cpu requests of BE pods; limit = the BE tier's real limit,
                           ``min(smallest BE cpuset * 1000, quota * 1000 / period)``, or the node's
                           allocatable batch-cpu with ``evictByAllocatable``) at or below the lower
                           percent while the tier uses at least ``cpuEvictBEUsageThresholdPercent``
                           (90) of its limit: release ``request * upper% - limit`` millicores of
                           batch-cpu requests, computed on the window averages and on the latest
                           values, the smaller of the two.
``CPUEvict``               node CPU ``usage%`` over the window at or above ``cpuEvictThreshold-
                           Percent``: release ``capacity * (usage% - lower) / 100`` millicores
                           of pod usage, from pods at or below ``evictEnabledPriorityThreshold``.
``CPUAllocatableEvict``    v1.8: Mid/Batch CPU requested by pods at or below
``MemoryAllocatableEvict`` ``allocatableEvictPriorityThreshold`` against the node's allocatable
                           ``mid-*``/``batch-*``: above ``threshold%`` (or no allocatable at all)
                           release ``requested - allocatable * lower%`` of those requests.
=========================  =====================================================================

One round builds the tasks in the order BE* -> *Allocatable* -> usage-based (memory before CPU
within a tier) and runs them in that order. A task stops as soon as what its victims release
covers its amount. A pod is a victim at most once per round, and every victim is credited to every
later task by that task's own measure (its memory usage, its CPU usage or its Mid/Batch request),
so a victim counts once per kind of release however many tasks want it. Pods evicted in earlier
rounds (for ``pending_seconds``) and pods already terminating count as pending releases: they are
credited first and never chosen again. After a round that evicted, the CPU features rest
``cpu_cool_down`` seconds (20) and the memory features ``memory_cool_down`` seconds (4), measured by
``snapshot.now``.

Victims are only active pods whose ``koordinator.sh/eviction-policy`` annotation (a JSON list of
feature names; absent = every feature, invalid = none) allows the feature; ``CPUEvict``,
``MemoryEvict`` and the ``*Allocatable*`` features also require the label
``koordinator.sh/eviction-enabled: "true"`` and a recent usage sample. Order:

* BEMemoryEvict: ``spec.priority`` ascending when both pods set it and it differs, then memory used
  descending with pods using nothing last, then name descending;
* BECPUEvict: ``spec.priority`` ascending when both set and different, then CPU used / batch-cpu
  request descending, then name descending;
* the others: ``koordinator.sh/eviction-priority`` ascending, priority value ascending,
  ``koordinator.sh/priority`` ascending, then the amount (usage, or request for the
  ``*Allocatable*`` features) descending, then namespace and name.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal

from agent.cgroups import paths
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource
from agent.qos.framework import Eviction, Gauge, NodeSnapshot, Outcome, PodState
from agent.qos.settings import EvictSettings, QoSSettings
from apis import constants as k
from apis.bounded import decode_any
from apis.core import container_requests
from apis.qos import KubeQoS, PriorityClass, QoSClass, sub_priority

__all__ = [
    "ALLOCATABLE_RESOURCES",
    "BE_CPU_EVICT",
    "BE_MEMORY_EVICT",
    "CPU_ALLOCATABLE_EVICT",
    "CPU_COOL_DOWN",
    "CPU_EVICT",
    "FEATURES",
    "MEMORY_ALLOCATABLE_EVICT",
    "MEMORY_COOL_DOWN",
    "MEMORY_EVICT",
    "NAME",
    "PENDING_SECONDS",
    "Evictions",
    "Task",
    "allows",
    "eviction_priority",
    "extended_request",
]

_log = logging.getLogger(__name__)

NAME: Final = "evictions"

BE_CPU_EVICT: Final = "BECPUEvict"
BE_MEMORY_EVICT: Final = "BEMemoryEvict"
CPU_ALLOCATABLE_EVICT: Final = "CPUAllocatableEvict"
MEMORY_ALLOCATABLE_EVICT: Final = "MemoryAllocatableEvict"
CPU_EVICT: Final = "CPUEvict"
MEMORY_EVICT: Final = "MemoryEvict"
_ALL_GATES: Final = (
    BE_CPU_EVICT,
    BE_MEMORY_EVICT,
    CPU_ALLOCATABLE_EVICT,
    MEMORY_ALLOCATABLE_EVICT,
    CPU_EVICT,
    MEMORY_EVICT,
)
#: Every feature, in the order a round runs them.
FEATURES: Final = (
    BE_MEMORY_EVICT,
    BE_CPU_EVICT,
    MEMORY_ALLOCATABLE_EVICT,
    CPU_ALLOCATABLE_EVICT,
    MEMORY_EVICT,
    CPU_EVICT,
)
#: Seconds the CPU / memory features rest after a round that evicted.
CPU_COOL_DOWN: Final = 20.0
MEMORY_COOL_DOWN: Final = 4.0
#: Seconds an evicted pod still present counts as a pending release.
PENDING_SECONDS: Final = 60.0
#: Mid/Batch resources each priority class owns (what ``*Allocatable*`` may release).
ALLOCATABLE_RESOURCES: Final = {
    "cpu": {
        PriorityClass.MID: k.RESOURCE_MID_CPU,
        PriorityClass.BATCH: k.RESOURCE_BATCH_CPU,
    },
    "memory": {
        PriorityClass.MID: k.RESOURCE_MID_MEMORY,
        PriorityClass.BATCH: k.RESOURCE_BATCH_MEMORY,
    },
}

_CFS_PERIOD: Final = 100_000
_GIB: Final = 1 << 30
Group = Literal["cpu", "memory"]
Target = Literal["podUsed", "podResourceRequest"]


@dataclass(frozen=True, slots=True)
class Task:
    """What one feature wants released this round, and from whom."""

    feature: str
    group: Group
    #: What is released: ``memory``, ``cpu`` (usage) or a Mid/Batch resource name (requests).
    resource: str
    target: Target
    #: Amount to release (bytes or millicores).
    need: int
    #: Victims in the order they are taken.
    candidates: tuple[PodState, ...]
    #: What one pod releases, in this task's unit.
    release: Callable[[PodState], int]
    #: Why, for the eviction message.
    why: str


# --- pod helpers --------------------------------------------------------------------------------


def allows(pod: PodState, feature: str) -> bool:
    """The pod's ``koordinator.sh/eviction-policy`` lets ``feature`` evict it."""
    text = pod.pod.metadata.annotations.get(k.ANNOTATION_EVICTION_POLICY)
    if text is None:
        return True
    try:
        allowed = decode_any(text, k.ANNOTATION_EVICTION_POLICY)
    except ValueError:
        return False
    return isinstance(allowed, list) and feature in allowed


def _eviction_enabled(pod: PodState) -> bool:
    return pod.pod.metadata.labels.get(k.LABEL_EVICTION_ENABLED) == "true"


def eviction_priority(pod: PodState) -> int:
    """``koordinator.sh/eviction-priority`` (int32; 0 when absent or invalid)."""
    text = pod.pod.metadata.annotations.get(k.ANNOTATION_EVICTION_PRIORITY, "")
    try:
        value = int(text)
    except ValueError:
        return 0
    return value if -(2**31) <= value < 2**31 else 0


def extended_request(pod: PodState, name: str) -> int:
    """Σ requests of ``name`` over the containers and the sidecar init containers."""
    spec = pod.pod.spec
    containers = (*spec.containers, *(c for c in spec.init_containers if c.is_sidecar))
    return sum(container_requests(c).get_amount(name) for c in containers)


def _evictable(pod: PodState) -> bool:
    return pod.active and pod.pod.metadata.deletion_timestamp is None


def _priority_order(pods: Iterable[PodState], amount: Callable[[PodState], int]) -> list[PodState]:
    """§6.1 order: eviction-priority, priority value, sub-priority asc; amount desc."""
    return sorted(
        pods,
        key=lambda p: (
            eviction_priority(p),
            p.priority,
            sub_priority(p.pod),
            -amount(p),
            p.namespace,
            p.name,
        ),
    )


def _spec_priority_first(a: PodState, b: PodState) -> int:
    first, second = a.pod.spec.priority, b.pod.spec.priority
    if first is not None and second is not None and first != second:
        return -1 if first < second else 1
    return 0


def _name_desc(a: PodState, b: PodState) -> int:
    return (a.name < b.name) - (a.name > b.name)


def _be_memory_order(pods: Iterable[PodState], used: Callable[[PodState], int]) -> list[PodState]:
    def compare(a: PodState, b: PodState) -> int:
        by_priority = _spec_priority_first(a, b)
        if by_priority:
            return by_priority
        first, second = used(a), used(b)
        if (first == 0) != (second == 0):
            return 1 if first == 0 else -1
        if first != second:
            return -1 if first > second else 1
        return _name_desc(a, b)

    return sorted(pods, key=functools.cmp_to_key(compare))


def _be_cpu_order(
    pods: Iterable[PodState], ratio: Callable[[PodState], Fraction]
) -> list[PodState]:
    def compare(a: PodState, b: PodState) -> int:
        by_priority = _spec_priority_first(a, b)
        if by_priority:
            return by_priority
        first, second = ratio(a), ratio(b)
        if first != second:
            return -1 if first > second else 1
        return _name_desc(a, b)

    return sorted(pods, key=functools.cmp_to_key(compare))


def _amount(resource: str, value: int) -> str:
    if resource.endswith("memory"):
        return f"{value / _GIB:.2f}Gi"
    return f"{value}m"


def besteffort_dir(snapshot: NodeSnapshot) -> str:
    """The BE tier's QoS cgroup (``kubepods/besteffort``...)."""
    return paths.qos_dir(snapshot.cgroup, KubeQoS.BEST_EFFORT)


# --- the strategy -------------------------------------------------------------------------------


class Evictions:
    """The ``evictions`` strategy (see the module docstring)."""

    def __init__(
        self,
        *,
        cpu_cool_down: float = CPU_COOL_DOWN,
        memory_cool_down: float = MEMORY_COOL_DOWN,
        pending_seconds: float = PENDING_SECONDS,
    ) -> None:
        self.cool_down: dict[Group, float] = {"cpu": cpu_cool_down, "memory": memory_cool_down}
        self.pending_seconds = pending_seconds
        #: Group -> the ``snapshot.now`` before which it rests.
        self._resting: dict[Group, float] = {}
        #: uid -> when it was evicted.
        self._evicted: dict[str, float] = {}
        #: (now, BE request, BE limit) samples for BECPUEvict's window averages.
        self._be_history: deque[tuple[float, int, int]] = deque()

    def wants_memory(self, settings: QoSSettings) -> bool:
        """Pod memory usage is needed while any eviction feature is on."""
        return any(settings.gate(gate) for gate in _ALL_GATES)

    @property
    def name(self) -> str:
        return NAME

    # -- tasks ----------------------------------------------------------------------------

    @staticmethod
    def _window(snapshot: NodeSnapshot, evict: EvictSettings) -> float:
        return max(snapshot.usage.interval, float(evict.cpu_time_window_seconds or 0))

    @staticmethod
    def _enough_samples(snapshot: NodeSnapshot, window: float) -> bool:
        usage = snapshot.usage
        return usage.samples(window) * usage.interval >= window / 3

    def _memory_need(self, snapshot: NodeSnapshot) -> tuple[int, str] | None:
        evict = snapshot.settings.evict
        capacity = snapshot.node.status.capacity.get_amount(k.RESOURCE_MEMORY)
        used = snapshot.usage.node_memory()
        if used is None or capacity <= 0:
            return None
        percent = used * 100 // capacity
        if percent < evict.memory_threshold_percent:
            return None
        lower = evict.memory_lower
        need = capacity * (percent - lower) // 100
        if need <= 0:
            return None
        why = (
            f"node memory usage {percent}% >= threshold {evict.memory_threshold_percent}%,"
            f" releasing {_amount('memory', need)} to reach {lower}%"
        )
        return need, why

    def _pod_memory(self, snapshot: NodeSnapshot) -> Callable[[PodState], int]:
        usage = snapshot.usage

        @functools.cache
        def used(uid: str) -> int:
            return usage.pod_memory(uid) or 0

        return lambda pod: used(pod.uid)

    def _pod_cpu(self, snapshot: NodeSnapshot, window: float) -> Callable[[PodState], int]:
        usage = snapshot.usage

        @functools.cache
        def used(uid: str) -> int:
            value = usage.pod_cpu(uid, window)
            return round(value) if value is not None else 0

        return lambda pod: used(pod.uid)

    def _be_memory(self, snapshot: NodeSnapshot) -> Task | None:
        found = self._memory_need(snapshot)
        if found is None:
            return None
        need, why = found
        used = self._pod_memory(snapshot)
        pods = [
            p
            for p in snapshot.pods
            if p.qos is QoSClass.BE and _evictable(p) and allows(p, BE_MEMORY_EVICT)
        ]
        return Task(
            feature=BE_MEMORY_EVICT,
            group="memory",
            resource=k.RESOURCE_MEMORY,
            target="podUsed",
            need=need,
            candidates=tuple(_be_memory_order(pods, used)),
            release=used,
            why=why,
        )

    def _memory(self, snapshot: NodeSnapshot) -> Task | None:
        threshold = snapshot.settings.evict.evict_enabled_priority_threshold
        if threshold is None:
            return None
        found = self._memory_need(snapshot)
        if found is None:
            return None
        need, why = found
        usage = snapshot.usage
        used = self._pod_memory(snapshot)
        pods = [
            p
            for p in snapshot.pods
            if _evictable(p)
            and p.priority <= threshold
            and _eviction_enabled(p)
            and allows(p, MEMORY_EVICT)
            and usage.pod_memory(p.uid) is not None
        ]
        return Task(
            feature=MEMORY_EVICT,
            group="memory",
            resource=k.RESOURCE_MEMORY,
            target="podUsed",
            need=need,
            candidates=tuple(_priority_order(pods, used)),
            release=used,
            why=why,
        )

    def _cpu(self, snapshot: NodeSnapshot) -> Task | None:
        evict = snapshot.settings.evict
        threshold, lower = evict.cpu_threshold_percent, evict.cpu_lower
        priority = evict.evict_enabled_priority_threshold
        if threshold is None or lower is None or priority is None:
            return None
        window = self._window(snapshot, evict)
        capacity = snapshot.node.status.capacity.get_amount(k.RESOURCE_CPU)
        used_node = snapshot.usage.node_cpu(window)
        if used_node is None or capacity <= 0 or not self._enough_samples(snapshot, window):
            return None
        percent = math.floor(Fraction(used_node) * 100 / capacity)
        if percent < threshold:
            return None
        need = capacity * (percent - lower) // 100
        if need <= 0:
            return None
        usage = snapshot.usage
        used = self._pod_cpu(snapshot, window)
        pods = [
            p
            for p in snapshot.pods
            if _evictable(p)
            and p.priority <= priority
            and _eviction_enabled(p)
            and allows(p, CPU_EVICT)
            and usage.pod_cpu(p.uid, window) is not None
        ]
        return Task(
            feature=CPU_EVICT,
            group="cpu",
            resource=k.RESOURCE_CPU,
            target="podUsed",
            need=need,
            candidates=tuple(_priority_order(pods, used)),
            release=used,
            why=(
                f"node CPU usage {percent}% >= threshold {threshold}% over {window:g}s,"
                f" releasing {need}m to reach {lower}%"
            ),
        )

    def _allocatable(self, snapshot: NodeSnapshot, group: Group) -> list[Task]:
        evict = snapshot.settings.evict
        if group == "cpu":
            feature = CPU_ALLOCATABLE_EVICT
            threshold = evict.cpu_allocatable_threshold_percent
            lower = evict.cpu_allocatable_lower_percent
        else:
            feature = MEMORY_ALLOCATABLE_EVICT
            threshold = evict.memory_allocatable_threshold_percent
            lower = evict.memory_allocatable_lower_percent
        priority = evict.allocatable_priority_threshold
        if threshold is None or lower is None or priority is None:
            return []
        usage = snapshot.usage
        window = self._window(snapshot, evict)
        allocatable = snapshot.node.status.allocatable
        tasks: list[Task] = []
        for klass, resource in ALLOCATABLE_RESOURCES[group].items():
            owners = [
                p
                for p in snapshot.pods
                if p.active and p.priority <= priority and p.priority_class is klass
            ]
            requested = sum(extended_request(p, resource) for p in owners)
            if requested <= 0:
                continue
            alloc = allocatable.get_amount(resource)
            if alloc <= 0:
                need = requested
                why = f"{resource} requested {requested} but the node has none allocatable"
            elif requested * 100 > alloc * threshold:
                need = requested - alloc * lower // 100
                why = (
                    f"{resource} requested {requested} is over {threshold}% of allocatable"
                    f" {alloc}, releasing {need} to reach {lower}%"
                )
            else:
                continue
            if need <= 0:
                continue

            def request(pod: PodState, name: str = resource) -> int:
                return extended_request(pod, name)

            def measured(pod: PodState) -> bool:
                if group == "cpu":
                    return usage.pod_cpu(pod.uid, window) is not None
                return usage.pod_memory(pod.uid) is not None

            pods = [
                p
                for p in owners
                if _evictable(p) and _eviction_enabled(p) and allows(p, feature) and measured(p)
            ]
            tasks.append(
                Task(
                    feature=feature,
                    group=group,
                    resource=resource,
                    target="podResourceRequest",
                    need=need,
                    candidates=tuple(_priority_order(pods, request)),
                    release=request,
                    why=why,
                )
            )
        return tasks

    def _be_limit(self, snapshot: NodeSnapshot, evict: EvictSettings) -> int:
        if evict.cpu_policy == "evictByAllocatable":
            allocatable = snapshot.node.status.allocatable
            if k.RESOURCE_BATCH_CPU not in allocatable:
                return -1
            value = allocatable[k.RESOURCE_BATCH_CPU]
            return -1 if value < 0 else max(value, 1)
        return self.be_real_limit(snapshot)

    @staticmethod
    def be_real_limit(snapshot: NodeSnapshot) -> int:
        """``min(smallest BE cpuset * 1000, quota * 1000 / period)`` of the BE tier, millicores.

        The smallest cpuset among the BE QoS dir and the BE containers' dirs; the quota and
        period of the BE QoS dir (an unlimited quota does not bound). Without any cpuset known,
        every CPU of the node.
        """
        qos_dir = besteffort_dir(snapshot)
        current = snapshot.current
        dirs = [qos_dir]
        for pod in snapshot.pods:
            if pod.kube_qos is KubeQoS.BEST_EFFORT:
                dirs.extend(c.cgroup for c in pod.containers if c.cgroup is not None)
        sizes = [
            len(v) for d in dirs if isinstance(v := current.get(d, Resource.CPUSET_CPUS), CpuSet)
        ]
        if sizes:
            limit = min(sizes) * 1000
        elif snapshot.cpus:
            limit = len(snapshot.cpus) * 1000
        else:
            limit = snapshot.node.status.capacity.get_amount(k.RESOURCE_CPU)
        quota = current.get(qos_dir, Resource.CPU_QUOTA)
        period = current.get(qos_dir, Resource.CPU_PERIOD)
        if isinstance(quota, int) and quota > 0:
            per = period if isinstance(period, int) and period > 0 else _CFS_PERIOD
            limit = min(limit, quota * 1000 // per)
        return limit

    @staticmethod
    def _be_release(request: Fraction, limit: Fraction, used: float, evict: EvictSettings) -> int:
        """Millicores of batch-cpu requests to release for one (request, limit, usage) view."""
        lower = evict.cpu_be_satisfaction_lower_percent
        upper = evict.cpu_be_satisfaction_upper_percent
        if lower is None or upper is None or limit <= 0 or request <= 0:
            return 0
        if limit >= 1000 and Fraction(used) * 100 < limit * evict.cpu_be_usage_threshold_percent:
            return 0
        if limit * 100 > request * lower:  # satisfaction above the lower percent
            return 0
        return max(math.floor(request * upper / 100 - limit), 0)

    def _be_cpu(self, snapshot: NodeSnapshot) -> Task | None:
        evict = snapshot.settings.evict
        lower = evict.cpu_be_satisfaction_lower_percent
        upper = evict.cpu_be_satisfaction_upper_percent
        if lower is None or upper is None or not (0 < lower <= 60 and lower <= upper < 100):
            self._be_history.clear()
            return None
        window = self._window(snapshot, evict)
        pods = [p for p in snapshot.pods if p.qos is QoSClass.BE and p.active]
        request = sum(extended_request(p, k.RESOURCE_BATCH_CPU) for p in pods)
        limit = self._be_limit(snapshot, evict)
        history = self._be_history
        history.append((snapshot.now, request, limit))
        while history and history[0][0] <= snapshot.now - window:
            history.popleft()
        usage = snapshot.usage
        qos_dir = besteffort_dir(snapshot)
        average = usage.cgroup_cpu(qos_dir, window)
        latest = usage.cgroup_cpu(qos_dir, 2 * usage.interval)
        if average is None or latest is None or not self._enough_samples(snapshot, window):
            return None
        count = len(history)
        by_average = self._be_release(
            Fraction(sum(h[1] for h in history), count),
            Fraction(sum(h[2] for h in history), count),
            average,
            evict,
        )
        if by_average <= 0:
            return None
        by_latest = self._be_release(Fraction(request), Fraction(limit), latest, evict)
        if by_latest <= 0:
            return None
        need = min(by_average, by_latest)
        used = self._pod_cpu(snapshot, window)

        def batch_cpu(pod: PodState) -> int:
            return extended_request(pod, k.RESOURCE_BATCH_CPU)

        def ratio(pod: PodState) -> Fraction:
            asked = batch_cpu(pod)
            return Fraction(used(pod), asked) if asked > 0 else Fraction(0)

        candidates = [p for p in pods if _evictable(p) and allows(p, BE_CPU_EVICT)]
        return Task(
            feature=BE_CPU_EVICT,
            group="cpu",
            resource=k.RESOURCE_BATCH_CPU,
            target="podResourceRequest",
            need=need,
            candidates=tuple(_be_cpu_order(candidates, ratio)),
            release=batch_cpu,
            why=(
                f"BE CPU satisfaction {limit}m of {request}m requested is at or below"
                f" {lower}%, releasing {need}m of batch-cpu to reach {upper}%"
            ),
        )

    def tasks(self, snapshot: NodeSnapshot) -> list[Task]:
        """This round's tasks, in run order (cooling groups and disabled features left out)."""
        settings = snapshot.settings
        if not settings.suppress.enable:
            self._be_history.clear()
            return []

        def on(feature: str, group: Group) -> bool:
            resting = self._resting.get(group)
            return settings.gate(feature) and (resting is None or snapshot.now >= resting)

        found: list[Task | None] = []
        if on(BE_MEMORY_EVICT, "memory"):
            found.append(self._be_memory(snapshot))
        if not settings.gate(BE_CPU_EVICT):
            self._be_history.clear()
        elif on(BE_CPU_EVICT, "cpu"):
            found.append(self._be_cpu(snapshot))
        if on(MEMORY_ALLOCATABLE_EVICT, "memory"):
            found.extend(self._allocatable(snapshot, "memory"))
        if on(CPU_ALLOCATABLE_EVICT, "cpu"):
            found.extend(self._allocatable(snapshot, "cpu"))
        if on(MEMORY_EVICT, "memory"):
            found.append(self._memory(snapshot))
        if on(CPU_EVICT, "cpu"):
            found.append(self._cpu(snapshot))
        return [t for t in found if t is not None]

    # -- the round ------------------------------------------------------------------------

    def _pending(self, snapshot: NodeSnapshot) -> dict[str, PodState]:
        present = {p.uid: p for p in snapshot.pods}
        horizon = snapshot.now - self.pending_seconds
        self._evicted = {
            uid: at for uid, at in self._evicted.items() if uid in present and at > horizon
        }
        pending = {uid: present[uid] for uid in self._evicted}
        for pod in snapshot.pods:
            if pod.pod.metadata.deletion_timestamp is not None:
                pending[pod.uid] = pod
        return pending

    @staticmethod
    def select(tasks: Sequence[Task], pending: dict[str, PodState]) -> list[tuple[PodState, Task]]:
        """Run the tasks in order; the victims, each with the task that chose it."""
        victims = dict(pending)
        chosen: list[tuple[PodState, Task]] = []
        for task in tasks:
            released = sum(task.release(v) for v in victims.values())
            for pod in task.candidates:
                if released >= task.need:
                    break
                if pod.uid in victims:
                    continue
                victims[pod.uid] = pod
                chosen.append((pod, task))
                released += task.release(pod)
        return chosen

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        pending = self._pending(snapshot)
        tasks = self.tasks(snapshot)
        chosen = self.select(tasks, pending)
        evictions: list[Eviction] = []
        for pod, task in chosen:
            self._evicted[pod.uid] = snapshot.now
            self._resting[task.group] = snapshot.now + self.cool_down[task.group]
            released = _amount(task.resource, task.release(pod))
            evictions.append(
                Eviction(
                    pod=pod.pod,
                    reason=task.feature,
                    message=(
                        f"evicting pod {pod.namespace}/{pod.name} ({released} of"
                        f" {task.resource}): {task.why}; feature {task.feature}"
                    ),
                    strategy=NAME,
                )
            )
            _log.info(
                "evicting pod %s/%s: %s (%s)",
                pod.namespace,
                pod.name,
                task.why,
                task.feature,
                extra={"pod": f"{pod.namespace}/{pod.name}", "feature": task.feature},
            )
        gauges: list[Gauge] = []
        for task in tasks:
            labels = {"reason": task.feature, "resource": task.resource}
            victims = sum(1 for _, t in chosen if t is task)
            gauges.append(Gauge("evict_release_needed", float(task.need), labels))
            gauges.append(Gauge("evict_victims", float(victims), labels))
        return Outcome(evictions=tuple(evictions), gauges=tuple(gauges))
