"""The default pod usage estimator (controller-spec §5.1).

For each resource with a scaling factor ``f`` (args ``estimatedScalingFactors``, with the pod
annotation ``scheduling.koordinator.sh/load-estimated-scaling-factors`` laid over them when
``allowCustomizeEstimation``), the pod is expected to use ``round(q * f / 100)`` where ``q`` is
``max(limit, request)`` of the resource name its priority class consumes (batch pods
``kubernetes.io/batch-cpu`` / ``batch-memory``, mid pods ``kubernetes.io/mid-cpu`` /
``mid-memory``), never more than the limit when one is set. A pod that asks for nothing is
expected to use 250 millicores and 200 MiB.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Final

from apis import constants as k
from apis.bounded import decode_any
from apis.core import Container, Pod, ResourceRequirements, pod_requests
from apis.qos import PriorityClass, priority_class
from controller.scheduler.loadaware.args import LoadAwareArgs

__all__ = [
    "DEFAULT_MEMORY",
    "DEFAULT_MILLI_CPU",
    "estimate_pod",
    "estimation_deadline",
    "is_daemonset_pod",
    "is_reserve_pod",
    "pod_limits",
    "scaling_factors",
    "scheduled_time",
    "translated_name",
]

log = logging.getLogger(__name__)

#: Expected use of a pod that requests no cpu (millicores) / no memory (bytes).
DEFAULT_MILLI_CPU: Final = 250
DEFAULT_MEMORY: Final = 200 * 1024 * 1024

_TRANSLATED: Final[Mapping[PriorityClass, Mapping[str, str]]] = {
    PriorityClass.BATCH: {"cpu": k.RESOURCE_BATCH_CPU, "memory": k.RESOURCE_BATCH_MEMORY},
    PriorityClass.MID: {"cpu": k.RESOURCE_MID_CPU, "memory": k.RESOURCE_MID_MEMORY},
}
_CPU_NAMES: Final = frozenset({"cpu", k.RESOURCE_BATCH_CPU, k.RESOURCE_MID_CPU})
_MEMORY_NAMES: Final = frozenset({"memory", k.RESOURCE_BATCH_MEMORY, k.RESOURCE_MID_MEMORY})


def translated_name(name: str, priority: PriorityClass) -> str:
    """The resource a pod of ``priority`` consumes in place of ``name``."""
    return _TRANSLATED.get(priority, {}).get(name, name)


def _limits(requirements: ResourceRequirements) -> Mapping[str, int]:
    return requirements.limits


def _add(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, 0) + amount


def _raise_to(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for name, amount in amounts.items():
        total[name] = max(total.get(name, 0), amount)


def _sidecar_limits(init_containers: Iterable[Container]) -> tuple[dict[str, int], dict[str, int]]:
    peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for container in init_containers:
        if container.is_sidecar:
            _add(sidecars, _limits(container.resources))
            _raise_to(peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, _limits(container.resources))
            _raise_to(peak, running)
    return peak, sidecars


def pod_limits(pod: Pod) -> dict[str, int]:
    """The pod's effective limits (resources no container limits are absent).

    Per resource: ``max(sum of containers + sidecars, peak of the init phase)``, plus the
    overhead for the resources that have a limit; pod-level ``spec.resources.limits`` replaces
    the container figure for the names it lists.
    """
    spec = pod.spec
    total: dict[str, int] = {}
    for container in spec.containers:
        _add(total, _limits(container.resources))
    peak, sidecars = _sidecar_limits(spec.init_containers)
    _add(total, sidecars)
    _raise_to(total, peak)
    total.update(spec.resources.limits)
    for name, amount in spec.overhead.items():
        if name in total:
            total[name] += amount
    return total


def _annotation_json(pod: Pod, key: str) -> object:
    text = pod.metadata.annotations.get(key)
    if not text:
        return None
    try:
        return decode_any(text, key)
    except ValueError:
        log.debug("pod %s/%s: ignoring annotation %s", pod.namespace, pod.name, key)
        return None


def scaling_factors(pod: Pod, args: LoadAwareArgs) -> Mapping[str, int]:
    """The args' factors, with the pod's annotation laid over them when customizing is allowed.

    Annotation entries that are not whole numbers in 1..100 are ignored.
    """
    factors = args.estimated_scaling_factors
    if not args.allow_customize_estimation:
        return factors
    custom = _annotation_json(pod, k.ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS)
    if not isinstance(custom, dict):
        return factors
    valid = {
        name: factor
        for name, factor in custom.items()
        if isinstance(factor, int) and not isinstance(factor, bool) and 0 < factor <= 100
    }
    return {**factors, **valid}


def _estimate_one(name: str, request: int, limit: int, factor: int) -> int:
    amount = max(limit, request)
    if amount <= 0:
        if name in _CPU_NAMES:
            return DEFAULT_MILLI_CPU
        if name in _MEMORY_NAMES:
            return DEFAULT_MEMORY
        return 0
    # round half away from zero on non-negative integers
    estimate = (amount * factor + 50) // 100
    if 0 < limit < estimate:
        return limit
    return estimate


def estimate_pod(pod: Pod, args: LoadAwareArgs) -> dict[str, int]:
    """Expected usage per scaling-factor resource, keyed by the untranslated name (cpu...)."""
    requests = pod_requests(pod)
    limits = pod_limits(pod)
    priority = priority_class(pod)
    estimate: dict[str, int] = {}
    for name, factor in scaling_factors(pod, args).items():
        real = translated_name(name, priority)
        estimate[name] = _estimate_one(real, requests.get(real, 0), limits.get(real, 0), factor)
    return estimate


# --- pods the load filter treats specially ---------------------------------------------------


def is_daemonset_pod(pod: Pod) -> bool:
    """Owned by a DaemonSet (such pods always pass the load filter)."""
    return any(ref.kind == "DaemonSet" for ref in pod.metadata.owner_references)


def is_reserve_pod(pod: Pod) -> bool:
    """The scheduler's stand-in for a Reservation: never counted as node load."""
    return k.ANNOTATION_RESERVE_POD in pod.metadata.annotations


# --- forced estimation -------------------------------------------------------------------------


#: Longest forced-estimation window an annotation may ask for (about 31 years); a longer one
#: is not read (a ``timedelta`` of it would overflow).
_MAX_SECONDS: Final = 10**9


def _annotation_seconds(pod: Pod, key: str) -> int | None:
    value = _annotation_json(pod, key)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SECONDS:
        return value
    return None


def _condition_time(pod: Pod, type_: str) -> datetime | None:
    for condition in pod.status.conditions:
        if condition.type == type_ and condition.status == "True":
            return condition.last_transition_time
    return None


def estimation_deadline(pod: Pod, args: LoadAwareArgs, scheduled_at: datetime) -> datetime | None:
    """Until when the pod is estimated whatever its reported usage (None: no forced window).

    Windows: ``estimatedSecondsAfterPodScheduled`` from ``scheduled_at``, and
    ``estimatedSecondsAfterInitialized`` from the pod's Initialized condition (a pod not yet
    initialized stays estimated: the deadline is open); the pod annotations replace the args'
    values when customizing is allowed. The later deadline wins.
    """
    after_scheduled = args.estimated_seconds_after_pod_scheduled
    after_initialized = args.estimated_seconds_after_initialized
    if args.allow_customize_estimation:
        custom = _annotation_seconds(pod, k.ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED)
        after_scheduled = custom if custom is not None else after_scheduled
        custom = _annotation_seconds(pod, k.ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED)
        after_initialized = custom if custom is not None else after_initialized
    deadlines: list[datetime] = []
    if after_scheduled:
        deadlines.append(scheduled_at + timedelta(seconds=after_scheduled))
    if after_initialized:
        initialized = _condition_time(pod, "Initialized")
        if initialized is None:
            return datetime.max.replace(tzinfo=scheduled_at.tzinfo)
        deadlines.append(initialized + timedelta(seconds=after_initialized))
    return max(deadlines) if deadlines else None


def scheduled_time(pod: Pod) -> datetime | None:
    """When the PodScheduled condition turned True, if the pod says."""
    return _condition_time(pod, "PodScheduled")
