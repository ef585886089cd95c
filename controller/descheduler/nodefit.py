"""Node fit: could a pod run on a node (the descheduler's ``nodeFit``, controller-spec §6.2).

The upstream check, restated: the node is schedulable; the pod's ``nodeSelector`` and required
node affinity match the node; every ``NoSchedule``/``NoExecute`` taint of the node is tolerated;
and the node's allocatable holds the requests of the pods already on it, plus ``promised``
(what earlier decisions of the same cycle placed there), plus the pod's own request, for every
resource the pod requests (``pods`` counts one per pod).

:func:`request_of` is :func:`apis.core.pod_requests` as a plain dict, with a short way for the
common pod (containers only: no init containers, overhead or pod-level resources); the cycle's
:class:`~controller.descheduler.framework.CycleView` keeps it per pod for the cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from apis.core import Node, Pod, pod_requests
from controller.scheduler.plugins.nodeaffinity import selector_matches
from controller.scheduler.plugins.tainttoleration import tolerated

__all__ = ["PODS", "asks_less_than_nothing", "fits", "request_of", "requested", "why_not"]

PODS = "pods"
_HARD_EFFECTS = ("NoSchedule", "NoExecute")


def request_of(pod: Pod) -> dict[str, int]:
    """``pod``'s effective request (:func:`apis.core.pod_requests`), names in order, as a new
    dict."""
    spec = pod.spec
    pod_level = spec.resources
    if (
        spec.init_containers
        or spec.overhead.amounts
        or pod_level.requests.amounts
        or pod_level.limits.amounts
    ):
        return dict(pod_requests(pod))
    containers = spec.containers
    if len(containers) == 1 and not containers[0].resources.limits.amounts:
        return dict(containers[0].resources.requests.amounts)
    # The containers' requests summed, a limit standing in for a missing request.
    total: dict[str, int] = {}
    for container in containers:
        requests = container.resources.requests
        limits = container.resources.limits
        for name in limits:
            if name not in requests:
                total[name] = total.get(name, 0) + limits[name]
        for name in requests:
            total[name] = total.get(name, 0) + requests[name]
    return dict(sorted(total.items()))


def asks_less_than_nothing(pod: Pod) -> bool:
    """Whether some amount ``pod`` requests or limits (a container's, an init container's,
    its overhead or its pod-level resources) is negative: only then can its effective request
    (:func:`request_of`, sums and peaks of these) have a negative amount."""
    spec = pod.spec
    for container in spec.containers:
        resources = container.resources
        requests = resources.requests.amounts
        limits = resources.limits.amounts
        if (requests and min(requests.values()) < 0) or (limits and min(limits.values()) < 0):
            return True
    pod_level = spec.resources
    if not (
        spec.init_containers
        or spec.overhead.amounts
        or pod_level.requests.amounts
        or pod_level.limits.amounts
    ):
        return False
    amounts = [
        spec.overhead.amounts,
        pod_level.requests.amounts,
        pod_level.limits.amounts,
        *(c.resources.requests.amounts for c in spec.init_containers),
        *(c.resources.limits.amounts for c in spec.init_containers),
    ]
    return any(min(found.values(), default=0) < 0 for found in amounts)


def requested(
    pods: Sequence[Pod], request: Callable[[Pod], Mapping[str, int]] = request_of
) -> dict[str, int]:
    """The requests of ``pods`` summed (with ``pods`` = their number); ``request`` gives each
    pod's (a cycle's memo of :func:`request_of`)."""
    total: dict[str, int] = {PODS: len(pods)}
    for pod in pods:
        for name, amount in request(pod).items():
            total[name] = total.get(name, 0) + amount
    return total


def why_not(
    pod: Pod,
    node: Node,
    pods_on_node: Sequence[Pod] = (),
    *,
    promised: Mapping[str, int] | None = None,
    used: Mapping[str, int] | None = None,
    request: Mapping[str, int] | None = None,
) -> str:
    """Why ``pod`` does not fit on ``node`` ("" when it fits). ``used`` replaces the sum of
    ``pods_on_node``'s requests, and ``request`` the pod's own request, when the caller keeps
    them already."""
    if node.spec.unschedulable:
        return "node is unschedulable"
    labels = node.metadata.labels
    for key, value in pod.spec.node_selector.items():
        if labels.get(key) != value:
            return f"node does not match the pod's nodeSelector {key}={value}"
    affinity = pod.spec.affinity
    required = (
        affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if affinity is not None and affinity.node_affinity is not None
        else None
    )
    if required is not None and not selector_matches(required, labels, node.metadata.name):
        return "node does not match the pod's required node affinity"
    for taint in node.spec.taints:
        if taint.effect in _HARD_EFFECTS and not tolerated(pod.spec.tolerations, taint):
            return f"node has an untolerated taint {taint.key}={taint.value}:{taint.effect}"
    base = dict(used) if used is not None else requested(pods_on_node)
    for name, amount in (promised or {}).items():
        base[name] = base.get(name, 0) + amount
    need = {**(request if request is not None else pod_requests(pod)), PODS: 1}
    allocatable = node.allocatable
    for name, amount in need.items():
        if amount <= 0:
            continue
        cap = allocatable.get(name)
        if cap is None:
            if name == PODS:
                continue
            return f"node has no {name}"
        if base.get(name, 0) + amount > cap:
            return f"node has not enough {name}"
    return ""


def fits(
    pod: Pod,
    node: Node,
    pods_on_node: Sequence[Pod] = (),
    *,
    promised: Mapping[str, int] | None = None,
    used: Mapping[str, int] | None = None,
    request: Mapping[str, int] | None = None,
) -> bool:
    """Whether ``pod`` fits on ``node`` (see :func:`why_not`)."""
    return not why_not(pod, node, pods_on_node, promised=promised, used=used, request=request)
