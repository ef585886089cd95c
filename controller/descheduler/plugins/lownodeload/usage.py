"""A node's measured usage as LowNodeLoad sees it (controller-spec §6.4 step 2).

* Capacity: the ``node.koordinator.sh/raw-allocatable`` annotation (a JSON resource list, the
  node's size before overcommitment) **as is** when present and parseable, else
  ``status.allocatable``. Every threshold, average, percentage and score uses it. (The
  scheduler's load-aware plugin lays the annotation over allocatable instead; the descheduler
  replaces allocatable with it, so a resource the annotation leaves out has capacity 0.)
* Usage of a resource: the NodeMetric's ``nodeMetric.systemUsage`` plus the ``podsMetric``
  usage of every pod now on the node; ``pods``: the number of pods on the node. Reported pods
  that are no longer on the node do not count.
* Prod usage: the same sum over the node's ``koord-prod`` pods only (no system usage).
* A node without a NodeMetric, without ``updateTime``, or whose NodeMetric is at least
  ``nodeMetricExpirationSeconds`` old is left out of its pool for the cycle.

Amounts are integers in canonical units (millicores, bytes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from apis import constants as k
from apis.core import Node, Pod
from apis.qos import PriorityClass, priority_class
from apis.resources import ResourceList
from apis.slo import NodeMetric

__all__ = [
    "MAX_SCORE",
    "PODS",
    "NodeUsage",
    "capacity_of",
    "is_expired",
    "node_usage",
    "pod_key",
    "usage_score",
]

log = logging.getLogger(__name__)

PODS: Final = "pods"
#: The weighted usage score of a full node.
MAX_SCORE: Final = 1000


def pod_key(pod: Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def capacity_of(node: Node) -> ResourceList:
    """The raw allocatable annotation as is when it parses, else ``status.allocatable``."""
    text = node.metadata.annotations.get(k.ANNOTATION_NODE_RAW_ALLOCATABLE)
    if text:
        try:
            return ResourceList.parse(json.loads(text))
        except ValueError as err:
            log.debug(
                "node %s: ignoring %s: %s",
                node.metadata.name,
                k.ANNOTATION_NODE_RAW_ALLOCATABLE,
                err,
            )
    return node.allocatable


def is_expired(metric: NodeMetric, now: datetime, expiration_seconds: int) -> bool:
    """Without ``updateTime``, or at least ``expiration_seconds`` old."""
    updated = metric.status.update_time
    return updated is None or now - updated >= timedelta(seconds=expiration_seconds)


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One node's usage for one cycle."""

    node: Node
    capacity: Mapping[str, int]
    #: Resource -> usage (every resource of the pool, plus ``pods``).
    usage: Mapping[str, int]
    #: Resource -> usage of the node's koord-prod pods.
    prod_usage: Mapping[str, int]
    #: The pods on the node.
    pods: Sequence[Pod]
    #: ``namespace/name`` -> reported usage, for the pods on the node that have one.
    pod_usage: Mapping[str, Mapping[str, int]]

    @property
    def name(self) -> str:
        return self.node.metadata.name


def node_usage(
    node: Node,
    metric: NodeMetric | None,
    pods: Sequence[Pod],
    resources: Sequence[str],
    *,
    now: datetime,
    expiration_seconds: int,
    with_prod: bool = True,
) -> NodeUsage | None:
    """The node's usage; None when its NodeMetric is missing or expired. ``with_prod`` False
    leaves the prod usage at 0 (a pool without prod thresholds never reads it)."""
    if metric is None or is_expired(metric, now, expiration_seconds):
        return None
    info = metric.status.node_metric
    if info is None:
        return None
    reported = {
        (entry.namespace, entry.name): entry.pod_usage.resources
        for entry in metric.status.pods_metric
    }
    system = info.system_usage.resources
    pod_usage: dict[str, Mapping[str, int]] = {}
    everyone: list[Mapping[str, int]] = []
    prod_pods: list[Mapping[str, int]] = []
    for pod in pods:
        meta = pod.metadata
        amounts = reported.get((meta.namespace, meta.name))
        if amounts is None:
            continue
        pod_usage[f"{meta.namespace}/{meta.name}"] = amounts
        everyone.append(amounts)
        if with_prod and priority_class(pod) is PriorityClass.PROD:
            prod_pods.append(amounts)
    usage = {
        name: system.get(name, 0) + sum([amounts.get(name, 0) for amounts in everyone])
        for name in resources
    }
    prod = {name: sum([amounts.get(name, 0) for amounts in prod_pods]) for name in resources}
    usage[PODS] = len(pods)
    return NodeUsage(
        node=node,
        capacity=capacity_of(node),
        usage=usage,
        prod_usage=prod,
        pods=pods,
        pod_usage=pod_usage,
    )


def usage_score(
    usage: Mapping[str, int],
    capacity: Mapping[str, int],
    weights: Mapping[str, int],
    resources: Sequence[str],
) -> int:
    """Weighted mean of ``usage / capacity`` over ``resources``, in [0, ``MAX_SCORE``] (a
    resource without capacity scores 0; one used beyond it scores ``MAX_SCORE``)."""
    total = 0
    weight_sum = 0
    for name in resources:
        weight = weights.get(name, 0)
        if weight <= 0:
            continue
        cap = capacity.get(name, 0)
        used = usage.get(name, 0)
        score = 0 if cap <= 0 else min(used, cap) * MAX_SCORE // cap
        total += score * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0
