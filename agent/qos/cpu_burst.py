"""CPU burst: let latency-sensitive containers borrow CPU above their limit.

Eligible: pods whose Koordinator QoS is not LSR, LSE or BE, ``Pending`` or ``Running``; only
containers with a CPU limit. The QoS is the ``koordinator.sh/qosClass`` label; an unlabelled
pod is BE when BestEffort and LS otherwise, so a Guaranteed pod without the label bursts as the
manual means (the general default mapping would make it LSR and leave it out). The node's
``cpuBurstStrategy`` applies, with the pod's ``koordinator.sh/cpuBurst`` annotation laid over it
field by field.

Kernel burst (policy ``cpuBurstOnly`` or ``auto``): ``cpu.cfs_burst_us`` (``cpu.max.burst`` on
v2) of a container is ``limit x cpuBurstPercent%`` of a period, i.e. ``limit_milli x percent``
µs; 0 under the other policies. The pod gets the sum of its containers'. Containers first,
then the pod.

Quota burst (policy ``cfsQuotaBurstOnly`` or ``auto``), per running container: the base quota
is the limit's (``limit_milli x 100``); the ceiling ``base x cfsQuotaBurstPercent%``. A
throttled container scales up by x1.2, an idle one stays, and a container whose limiter ran out
scales down by x0.8; the node's share pool overrides that: **overload** (share-pool use at or
above ``sharePoolThresholdPercent``) turns up/stay into down, **cooling** (within 90 % of the
threshold) or unknown turns up into stay. Other policies reset to the base. The result is
clamped to [base, ceiling] and the change applied to the container and, when it has a quota,
its pod: growing pod first, shrinking container first.

Share pool: ``#CPUs - requests of LSE/LSR pods`` in size, ``node usage - usage of LSE/LSR/BE
pods`` in use (averaged over ``min(5 x interval, 10 s)``).

Limiter (when ``cfsQuotaBurstPeriodSeconds >= 0``): a token bucket per container with capacity
``period x (cfsQuotaBurstPercent - 100)`` and random initial tokens in ``[0, capacity/2)``; each
whole second at ``u`` % of its limit (the container's CPU usage; a one-container pod's usage
when the container has no sample) takes ``u - 100`` tokens when ``u >= 100``, gives
``100 - u`` when ``u < 60``; clamped to ``[-capacity, capacity]``; scaling up is allowed while
tokens are positive. A bucket is rebuilt when its capacity changes and dropped after
``2 x period`` seconds unused. The random source is injectable so tests are deterministic.

cgroup v2 (and the upstream #2801 bug): the kernel refuses a ``cpu.max.burst`` above the quota,
so the burst is capped at the cgroup's quota after this pass, and a burst that fits under the
current quota is written before any quota change (lowering the burst before the quota goes
down), one that does not is written after.

Gauges: ``container_scaled_cfs_burst_us`` and ``container_scaled_cfs_quota_us`` per container.
"""

from __future__ import annotations

import enum
import functools
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from agent.cgroups.resources import Resource, quota_from_milli
from agent.qos import nodeinfo
from agent.qos.framework import (
    CgroupWrite,
    ContainerState,
    Gauge,
    NodeSnapshot,
    Outcome,
    PodState,
)
from agent.qos.settings import BurstSettings, SettingsError, merge_burst
from apis import constants as k
from apis.core import Pod
from apis.qos import QoSClass
from apis.slo import CPUBurstStrategy

__all__ = [
    "CpuBurst",
    "Operation",
    "PoolState",
    "TokenBucket",
    "burst_qos",
    "eligible",
    "share_pool_state",
]

_log = logging.getLogger(__name__)

NAME: Final = "cpu_burst"
_NOT_ELIGIBLE: Final = frozenset({QoSClass.LSR, QoSClass.LSE, QoSClass.BE})
_KERNEL_POLICIES: Final = frozenset({"cpuBurstOnly", "auto"})
_QUOTA_POLICIES: Final = frozenset({"cfsQuotaBurstOnly", "auto"})
_POOL_WINDOW_MAX: Final = 10.0


class PoolState(enum.StrEnum):
    OVERLOAD = "overload"
    COOLING = "cooling"
    IDLE = "idle"
    UNKNOWN = "unknown"


class Operation(enum.StrEnum):
    SCALE_UP = "scaleUp"
    SCALE_DOWN = "scaleDown"
    REMAIN = "remain"
    RESET = "reset"


def burst_qos(pod: PodState) -> QoSClass:
    """The QoS CPU burst goes by: the label's, else BE for BestEffort and LS for the rest."""
    return pod.label_or_kube_qos


def eligible(pod: PodState) -> bool:
    """Whether CPU burst manages the pod: LS, SYSTEM or unlabelled, active, a CPU limit."""
    return (
        burst_qos(pod) not in _NOT_ELIGIBLE
        and pod.active
        and any(c.limits.get(k.RESOURCE_CPU, 0) > 0 for c in pod.containers)
    )


def share_pool_state(snapshot: NodeSnapshot, threshold_percent: int) -> PoolState:
    """How loaded the share pool is (see the module docstring)."""
    usage = snapshot.usage
    window = min(5 * usage.interval, _POOL_WINDOW_MAX)
    node_used = usage.node_cpu(window)
    if node_used is None:
        return PoolState.UNKNOWN
    cpus = len(snapshot.cpus) * 1000 or snapshot.node.status.capacity.get(k.RESOURCE_CPU, 0)
    bound = 0
    others = 0.0
    for pod in snapshot.pods:
        if pod.pod.is_terminated:
            continue
        if pod.qos in (QoSClass.LSE, QoSClass.LSR):
            bound += pod.requests.get(k.RESOURCE_CPU, 0)
        if pod.qos in (QoSClass.LSE, QoSClass.LSR, QoSClass.BE):
            others += usage.pod_cpu(pod.uid, window) or 0.0
    total = cpus - bound
    ratio = (node_used - others) / total if total > 0 else 1.0
    threshold = threshold_percent / 100
    if ratio >= threshold:
        return PoolState.OVERLOAD
    if ratio >= 0.9 * threshold:
        return PoolState.COOLING
    return PoolState.IDLE


@dataclass(slots=True)
class TokenBucket:
    """A container's right to stay above its base quota (see the module docstring)."""

    capacity: int
    tokens: float
    #: Whole seconds are accounted from here.
    updated: float
    #: Last time the bucket was asked.
    used: float
    period: int

    def allow(self, now: float, used_percent: float | None) -> bool:
        elapsed = int(now - self.updated)
        if elapsed > 0:
            if used_percent is not None:
                if used_percent >= 100:
                    self.tokens -= (used_percent - 100) * elapsed
                elif used_percent < 60:
                    self.tokens += (100 - used_percent) * elapsed
                self.tokens = min(max(self.tokens, -self.capacity), self.capacity)
            self.updated += elapsed
        self.used = now
        return self.tokens > 0


@dataclass(frozen=True, slots=True)
class _Quota:
    """One container's quota decision."""

    cgroup: str
    current: int
    target: int
    operation: Operation


@dataclass(slots=True)
class _Planned:
    """What the last pass planned for an eligible pod, and from what.

    ``config`` is the pod's burst config merged from ``node`` (the node's) and its annotation.
    Without quota scaling the pod's writes and gauges depend only on its state, its config,
    the cgroup version and the quotas of ``cgroups`` (its CPU-limited containers', then its
    own): ``quotas`` holds those the writes were planned from (None: not planned so).
    """

    pod: PodState
    node: BurstSettings
    config: BurstSettings
    cgroups: tuple[str, ...]
    quotas: tuple[object, ...] | None = None
    v2: bool = False
    writes: list[CgroupWrite] = field(default_factory=list)
    gauges: list[Gauge] = field(default_factory=list)


@functools.lru_cache(maxsize=16384)
def _container_labels(
    namespace: str, name: str, container: str, container_id: str
) -> Mapping[str, str]:
    # The same containers are reported every pass: one immutable label map each.
    return MappingProxyType(
        {
            "pod_namespace": namespace,
            "pod_name": name,
            "container_name": container,
            "container_id": container_id,
        }
    )


def _quota_cgroups(pod: PodState) -> tuple[str, ...]:
    """The cgroups whose quota a pod's burst plan reads: its CPU-limited containers', then its
    own."""
    limited = (c.cgroup for c in pod.containers if c.limits.get(k.RESOURCE_CPU, 0) > 0)
    return (*(cgroup for cgroup in limited if cgroup is not None), pod.cgroup)


def _labels(pod: PodState, container: ContainerState) -> Mapping[str, str]:
    return _container_labels(pod.namespace, pod.name, container.name, container.container_id)


@functools.lru_cache(maxsize=256)
def _burst_reason(policy: str, percent: int, kernel: bool) -> str:
    if not kernel:
        return f"policy {policy}: no kernel burst"
    return f"policy {policy}: {percent}% of the limit"


class CpuBurst:
    """CPU burst (gate ``CPUBurst``); see the module docstring.

    ``rng`` draws the limiters' initial tokens; ``override`` reads a pod's burst annotation.
    """

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        override: Callable[[Pod], CPUBurstStrategy | None] = nodeinfo.pod_burst_override,
    ) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._override = override
        self._buckets: dict[str, TokenBucket] = {}
        self._refused: dict[str, str] = {}
        #: pod UID -> its last plan without quota scaling (see :meth:`_plan_pod`).
        self._planned: dict[str, _Planned] = {}

    @property
    def name(self) -> str:
        return NAME

    @property
    def buckets(self) -> dict[str, TokenBucket]:
        """Live limiters by container (id, or cgroup directory before the id is known)."""
        return self._buckets

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        if not snapshot.settings.gate("CPUBurst"):
            return Outcome()
        node = snapshot.settings.burst
        writes: list[CgroupWrite] = []
        gauges: list[Gauge] = []
        pool: PoolState | None = None
        seen: set[str] = set()
        planned, self._planned = self._planned, {}
        for pod in snapshot.pods:
            last = planned.get(pod.uid)
            if last is None or last.pod is not pod or last.node is not node:
                # A new or changed pod (or node config): eligibility and config afresh.
                if not eligible(pod):
                    continue
                last = _Planned(pod, node, self._config(node, pod), _quota_cgroups(pod))
            self._planned[pod.uid] = last
            seen.add(pod.uid)
            if last.config.policy in _QUOTA_POLICIES and pool is None:
                pool = share_pool_state(snapshot, node.share_pool_threshold_percent)
            pod_writes, pod_gauges = self._plan_pod(snapshot, last, pool or PoolState.UNKNOWN)
            writes += pod_writes
            gauges += pod_gauges
        self._forget(snapshot.now, seen)
        return Outcome(writes=tuple(writes), gauges=tuple(gauges))

    # --- per pod ----------------------------------------------------------------------------

    def _config(self, node: BurstSettings, pod: PodState) -> BurstSettings:
        override = self._override(pod.pod)
        if override is None:
            self._refused.pop(pod.uid, None)
            return node
        where = f"pod {pod.namespace}/{pod.name} annotation {k.ANNOTATION_CPU_BURST}"
        try:
            merged = merge_burst(node, override, where)
        except SettingsError as err:
            if self._refused.get(pod.uid) != str(err):
                _log.warning("%s; using the node's burst config", err)
                self._refused[pod.uid] = str(err)
            return node
        self._refused.pop(pod.uid, None)
        return merged

    def _plan_pod(
        self, snapshot: NodeSnapshot, last: _Planned, pool: PoolState
    ) -> tuple[list[CgroupWrite], list[Gauge]]:
        """The pod's writes and gauges: those of the last pass when it scales no quota and
        nothing they depend on changed (see :class:`_Planned`)."""
        pod, config = last.pod, last.config
        if config.policy in _QUOTA_POLICIES:
            return self._work_out(snapshot, pod, config, pool)
        v2 = snapshot.cgroup.resource_version == 2
        current = snapshot.current
        quotas = tuple([current.get(cgroup, Resource.CPU_QUOTA) for cgroup in last.cgroups])
        if last.quotas != quotas or last.v2 != v2:
            last.writes, last.gauges = self._work_out(snapshot, pod, config, pool)
            last.quotas, last.v2 = quotas, v2
        return last.writes, last.gauges

    def _work_out(
        self, snapshot: NodeSnapshot, pod: PodState, config: BurstSettings, pool: PoolState
    ) -> tuple[list[CgroupWrite], list[Gauge]]:
        current = snapshot.current
        v2 = snapshot.cgroup.resource_version == 2
        kernel = config.policy in _KERNEL_POLICIES
        limited = [c for c in pod.containers if c.limits.get(k.RESOURCE_CPU, 0) > 0]
        gauges: list[Gauge] = []

        # Quotas first: the burst cap on v2 depends on them.
        decisions: list[_Quota] = []
        quota_now: dict[str, int | None] = {}
        quota_after: dict[str, int] = {}
        for container in limited:
            base = quota_from_milli(container.limits[k.RESOURCE_CPU])
            quota_after[container.name] = base
            if container.cgroup is None:
                continue
            found = current.get(container.cgroup, Resource.CPU_QUOTA)
            held = found if isinstance(found, int) else None
            quota_now[container.cgroup] = held
            if held is None:
                continue
            quota_after[container.name] = held
            if not container.running or held <= 0:
                continue
            decision = self._decide(
                snapshot, pod, container, container.cgroup, config, pool, base, held
            )
            decisions.append(decision)
            quota_after[container.name] = decision.target
            gauges.append(
                Gauge(
                    "container_scaled_cfs_quota_us",
                    float(decision.target),
                    _labels(pod, container),
                )
            )
        found = current.get(pod.cgroup, Resource.CPU_QUOTA)
        pod_now = found if isinstance(found, int) else None
        quota_now[pod.cgroup] = pod_now
        delta = sum(d.target - d.current for d in decisions)
        pod_after = pod_now
        if pod_now is not None and pod_now > 0 and delta:
            pod_after = pod_now + delta

        # Kernel burst, capped on v2 at the quota the cgroup has after this pass.
        bursts: list[tuple[str, int, str]] = []
        pod_burst = 0
        for container in limited:
            burst = container.limits[k.RESOURCE_CPU] * config.cpu_burst_percent if kernel else 0
            cap = quota_after[container.name]
            if v2 and cap > 0:
                burst = min(burst, cap)
            pod_burst += burst
            if container.cgroup is None:
                continue
            reason = _burst_reason(config.policy, config.cpu_burst_percent, kernel)
            bursts.append((container.cgroup, burst, reason))
            gauges.append(
                Gauge("container_scaled_cfs_burst_us", float(burst), _labels(pod, container))
            )
        if v2 and pod_after is not None and pod_after > 0:
            pod_burst = min(pod_burst, pod_after)
        pod_reason = "sum of its containers' bursts"
        bursts.append((pod.cgroup, pod_burst, pod_reason))

        # Order: bursts that fit under today's quota, quota changes, the remaining bursts.
        before: list[CgroupWrite] = []
        after: list[CgroupWrite] = []
        for directory, value, reason in bursts:
            write = CgroupWrite(directory, Resource.CPU_BURST, value, NAME, reason)
            limit = quota_now.get(directory)
            fits = limit is None or limit <= 0 or value <= limit
            (before if fits else after).append(write)
        return [*before, *self._quota_writes(pod, decisions, pod_now, pod_after), *after], gauges

    @staticmethod
    def _quota_writes(
        pod: PodState, decisions: list[_Quota], pod_now: int | None, pod_after: int | None
    ) -> list[CgroupWrite]:
        changed = [d for d in decisions if d.target != d.current]
        if not changed:
            return []

        def write(d: _Quota) -> CgroupWrite:
            reason = f"{d.operation}: {d.current} -> {d.target}"
            return CgroupWrite(d.cgroup, Resource.CPU_QUOTA, d.target, NAME, reason)

        writes = [write(d) for d in changed if d.target < d.current]
        if pod_after is not None and pod_after != pod_now:
            reason = f"containers' quota changed by {pod_after - (pod_now or 0)}"
            writes.append(CgroupWrite(pod.cgroup, Resource.CPU_QUOTA, pod_after, NAME, reason))
        writes += [write(d) for d in changed if d.target > d.current]
        return writes

    def _decide(
        self,
        snapshot: NodeSnapshot,
        pod: PodState,
        container: ContainerState,
        cgroup: str,
        config: BurstSettings,
        pool: PoolState,
        base: int,
        held: int,
    ) -> _Quota:
        percent = config.cfs_quota_burst_percent
        ceiling = base * percent // 100 if percent > 100 else base
        operation = self._operation(snapshot, pod, container, cgroup, config)
        if operation is not Operation.RESET:
            if pool is PoolState.OVERLOAD and operation in (Operation.SCALE_UP, Operation.REMAIN):
                operation = Operation.SCALE_DOWN
            elif pool in (PoolState.COOLING, PoolState.UNKNOWN) and (
                operation is Operation.SCALE_UP
            ):
                operation = Operation.REMAIN
        if operation is Operation.SCALE_UP:
            target = held * 12 // 10
        elif operation is Operation.SCALE_DOWN:
            target = held * 8 // 10
        elif operation is Operation.RESET:
            target = base
        else:
            target = held
        target = min(max(target, base), ceiling)
        return _Quota(cgroup, held, target, operation)

    def _operation(
        self,
        snapshot: NodeSnapshot,
        pod: PodState,
        container: ContainerState,
        cgroup: str,
        config: BurstSettings,
    ) -> Operation:
        if config.policy not in _QUOTA_POLICIES:
            return Operation.RESET
        usage = snapshot.usage
        window = 2 * usage.interval
        period = config.cfs_quota_burst_period_seconds
        if period >= 0:
            used = usage.cgroup_cpu(cgroup, window)
            if used is None and len(pod.containers) == 1:
                # A one-container pod's usage is its container's (the sandbox is idle).
                used = usage.pod_cpu(pod.uid, window)
            limit = container.limits[k.RESOURCE_CPU]
            percent = None if used is None else used / limit * 100
            if not self._allowed(snapshot.now, container, config, percent):
                return Operation.SCALE_DOWN
        throttled = usage.throttled_ratio(cgroup, window)
        if throttled is not None and throttled > 0:
            return Operation.SCALE_UP
        return Operation.REMAIN

    # --- limiter ----------------------------------------------------------------------------

    def _allowed(
        self,
        now: float,
        container: ContainerState,
        config: BurstSettings,
        used_percent: float | None,
    ) -> bool:
        if config.cfs_quota_burst_percent < 100:
            return False
        period = config.cfs_quota_burst_period_seconds
        capacity = period * (config.cfs_quota_burst_percent - 100)
        key = container.container_id or (container.cgroup or container.name)
        bucket = self._buckets.get(key)
        if bucket is None or bucket.capacity != capacity:
            tokens = self._rng.random() * capacity / 2
            bucket = TokenBucket(capacity, tokens, updated=now, used=now, period=period)
            self._buckets[key] = bucket
        return bucket.allow(now, used_percent)

    def _forget(self, now: float, pods: set[str]) -> None:
        for key, bucket in list(self._buckets.items()):
            if now - bucket.used > 2 * bucket.period:
                del self._buckets[key]
        for uid in set(self._refused) - pods:
            del self._refused[uid]
