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

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Final

import msgspec

from apis import bounded
from apis import constants as k
from apis.core import Node, Pod
from apis.qos import PriorityClass, priority_class
from apis.resources import ResourceList
from apis.slo import NodeMetric

__all__ = [
    "MAX_SCORE",
    "PODS",
    "NodeUsage",
    "PodKey",
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


#: A pod's ``(namespace, name)``.
PodKey = tuple[str, str]


def pod_key(pod: Pod) -> PodKey:
    meta = pod.metadata
    return (meta.namespace, meta.name)


def capacity_of(node: Node) -> ResourceList:
    """The raw allocatable annotation as is when it parses, else ``status.allocatable``."""
    text = node.metadata.annotations.get(k.ANNOTATION_NODE_RAW_ALLOCATABLE)
    if text:
        try:
            return ResourceList.parse(bounded.decode_any(text, k.ANNOTATION_NODE_RAW_ALLOCATABLE))
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


class NodeUsage(msgspec.Struct, frozen=True):
    """One node's usage for one cycle."""

    node: Node
    capacity: Mapping[str, int]
    #: Resource -> usage (every resource of the pool, plus ``pods``).
    usage: Mapping[str, int]
    #: Resource -> usage of the node's koord-prod pods.
    prod_usage: Mapping[str, int]
    #: The pods on the node.
    pods: Sequence[Pod]
    #: Each pod's reported usage (None: not reported), in the order of ``pods``.
    reported: Sequence[Mapping[str, int] | None]
    #: Resource -> the smallest reported usage of a pod on the node (0 for a pod that reports
    #: none of it); absent when no pod on the node has a reported usage.
    smallest: Mapping[str, int]
    #: The node's name.
    name: str

    def pod_usage(self) -> dict[PodKey, Mapping[str, int]]:
        """``(namespace, name)`` -> reported usage, for the pods on the node that have one
        (a new dict each call)."""
        return {
            pod_key(pod): amounts
            for pod, amounts in zip(self.pods, self.reported, strict=True)
            if amounts is not None
        }


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
    entries = metric.status.pods_metric
    system = info.system_usage.resources.amounts
    reported: list[Mapping[str, int] | None] = []
    by_name = {entry.name: entry for entry in entries}
    if len(by_name) == len(entries):
        # Names unique on the node (the rule): look a pod up by name, then its namespace.
        find = by_name.get
        add = reported.append
        for pod in pods:
            meta = pod.metadata
            entry = find(meta.name)
            add(
                entry.pod_usage.resources.amounts
                if entry is not None and entry.namespace == meta.namespace
                else None
            )
    else:
        by_key = {
            (entry.namespace, entry.name): entry.pod_usage.resources.amounts for entry in entries
        }
        for pod in pods:
            meta = pod.metadata
            reported.append(by_key.get((meta.namespace, meta.name)))
    everyone = [amounts for amounts in reported if amounts is not None]
    prod_pods = (
        [
            amounts
            for pod, amounts in zip(pods, reported, strict=True)
            if amounts is not None and priority_class(pod) is PriorityClass.PROD
        ]
        if with_prod
        else []
    )
    usage: dict[str, int] = {}
    smallest: dict[str, int] = {}
    for name in resources:
        column = [amounts.get(name, 0) for amounts in everyone]
        usage[name] = system.get(name, 0) + sum(column)
        if column:
            smallest[name] = min(column)
    prod = {name: sum([amounts.get(name, 0) for amounts in prod_pods]) for name in resources}
    usage[PODS] = len(pods)
    return NodeUsage(
        node=node,
        capacity=capacity_of(node),
        usage=usage,
        prod_usage=prod,
        pods=pods,
        reported=reported,
        smallest=smallest,
        name=node.metadata.name,
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
