"""A node's estimated usage, cached per node (controller-spec §5.1).

:func:`build_node_load` makes a :class:`NodeLoad` from the Node, its NodeMetric and the pods
assigned to it; rebuild it whenever one of them changes. :func:`assume` and :func:`forget`
return a new record with one pod added or removed (the scheduler's Reserve and Unreserve),
touching only that pod's share.

Usage is reported usage plus what the report cannot know yet:

- base: the NodeMetric's ``nodeUsage`` (or, for the aggregated filter and score, the chosen
  aggregation over the chosen window; window 0 = the longest reported);
- plus, per assigned pod, ``max(0, estimate - reported pod usage)`` when the pod is *estimated*:
  it has no reported usage, or it was assigned after ``updateTime - reportInterval`` (assigned
  = its PodScheduled condition time, else when the scheduler assumed it), or its forced
  estimation window ends after ``updateTime``;
- without a base (no ``nodeUsage``, or an aggregation the node does not report): the full
  estimates of all assigned pods instead;
- prod usage: the reported usage of the pods that are prod both by their spec and in the
  NodeMetric (plus the system usage with ``prodUsageIncludeSys``), plus the prod pods' shares.

Reserve pods and terminated pods never count. Vectors are tuples of integers in the order of
:func:`controller.scheduler.loadaware.args.resource_names` (millicores for cpu, bytes for memory).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Final

import msgspec

from apis import constants as k
from apis.bounded import decode_any
from apis.core import Node, Pod
from apis.duration import Duration
from apis.qos import PriorityClass, priority_class
from apis.resources import ResourceList
from apis.slo import NodeMetric, NodeMetricInfo
from controller.scheduler.loadaware.args import LoadAwareArgs, NodeThresholds, node_thresholds
from controller.scheduler.loadaware.estimator import (
    estimate_pod,
    estimation_deadline,
    is_reserve_pod,
    scheduled_time,
)

__all__ = [
    "DEFAULT_REPORT_INTERVAL_SECONDS",
    "NodeLoad",
    "PodLoad",
    "ReportedPod",
    "Vector",
    "aggregated_usage",
    "assume",
    "build_node_load",
    "forget",
    "is_expired",
    "node_capacity",
    "pod_key",
]

log = logging.getLogger(__name__)

#: ``spec.metricCollectPolicy.reportIntervalSeconds`` when the NodeMetric does not say.
DEFAULT_REPORT_INTERVAL_SECONDS: Final = 60

Vector = tuple[int, ...]


def pod_key(pod: Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _vector(amounts: Mapping[str, int], resources: tuple[str, ...]) -> Vector:
    return tuple(amounts.get(name, 0) for name in resources)


def _plus(a: Vector, b: Vector) -> Vector:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _minus(a: Vector, b: Vector) -> Vector:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def node_capacity(node: Node) -> ResourceList:
    """Allocatable, with the ``node.koordinator.sh/raw-allocatable`` annotation laid over it.

    The annotation (a JSON resource list, e.g. the node's size before overcommitment) replaces
    the amounts it names; one that does not parse is ignored.
    """
    allocatable = node.allocatable
    text = node.metadata.annotations.get(k.ANNOTATION_NODE_RAW_ALLOCATABLE)
    if not text:
        return allocatable
    try:
        raw = ResourceList.parse(decode_any(text, k.ANNOTATION_NODE_RAW_ALLOCATABLE))
    except ValueError as err:
        log.debug("node %s: ignoring %s: %s", node.name, k.ANNOTATION_NODE_RAW_ALLOCATABLE, err)
        return allocatable
    if all(allocatable.get(name) == amount for name, amount in raw.items()):
        return allocatable
    return ResourceList({**allocatable, **raw})


def is_expired(updated_at: datetime | None, now: datetime, expiration_seconds: int) -> bool:
    """A NodeMetric without ``updateTime``, or at least ``expiration_seconds`` old."""
    return updated_at is None or now - updated_at >= timedelta(seconds=expiration_seconds)


def aggregated_usage(
    info: NodeMetricInfo, aggregation: str, duration: Duration | None
) -> ResourceList | None:
    """The node's ``aggregation`` usage over ``duration`` (0/None = longest window reported)."""
    best: tuple[int, ResourceList] | None = None
    for entry in info.aggregated_node_usages:
        usage = entry.usage.get(aggregation)
        if usage is None or not usage.resources:
            continue
        window = entry.duration.nanoseconds if entry.duration is not None else 0
        if duration is not None and duration.nanoseconds:
            if window == duration.nanoseconds:
                return usage.resources
        elif best is None or window > best[0]:
            best = (window, usage.resources)
    return best[1] if best is not None else None


class PodLoad(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One assigned pod's part in its node's usage."""

    key: str
    #: ``uid/resourceVersion`` of the pod the estimate was made from ("" when unknown).
    stamp: str = ""
    #: Full estimate (counts when the node has no base usage).
    estimate: Vector
    #: What it adds to the reported usage: ``max(0, estimate - reported)`` when estimated,
    #: zeros otherwise.
    delta: Vector
    #: Prod by its spec (its share counts in prod usage).
    prod: bool


class ReportedPod(msgspec.Struct, frozen=True, gc=False):
    """A pod's usage as the NodeMetric reports it, and whether the report calls it prod."""

    usage: Vector
    prod: bool


class NodeLoad(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything the load filter and score need about one node."""

    name: str
    resources: tuple[str, ...]
    capacity: Vector
    thresholds: NodeThresholds
    #: Whether the node has a NodeMetric at all (without one, the filter passes it and the
    #: score is 0).
    has_metric: bool = False
    updated_at: datetime | None = None
    report_interval_seconds: int = DEFAULT_REPORT_INTERVAL_SECONDS
    #: Latest reported node usage; None when the NodeMetric has none.
    base: Vector | None = None
    #: The filter compares against aggregated usage on this node.
    filter_aggregated: bool = False
    filter_base: Vector | None = None
    #: The score uses aggregated usage (args ``aggregated.scoreAggregationType``).
    score_aggregated: bool = False
    score_base: Vector | None = None
    prod_base: Vector | None = None
    reported: Mapping[str, ReportedPod] = {}
    pods: Mapping[str, PodLoad] = {}
    #: Sums over ``pods``: deltas, prod deltas, full estimates, prod full estimates.
    delta: Vector = ()
    prod_delta: Vector = ()
    estimated: Vector = ()
    prod_estimated: Vector = ()

    def _with_base(self, base: Vector | None) -> Vector:
        return _plus(base, self.delta) if base is not None else self.estimated

    @property
    def usage(self) -> Vector:
        """Estimated usage on the latest figures."""
        return self._with_base(self.base)

    @property
    def filter_usage(self) -> Vector:
        """Estimated usage the aggregated filter compares (the latest when not aggregated)."""
        return self._with_base(self.filter_base) if self.filter_aggregated else self.usage

    @property
    def score_usage(self) -> Vector:
        return self._with_base(self.score_base) if self.score_aggregated else self.usage

    @property
    def prod_usage(self) -> Vector:
        if self.prod_base is None:
            return self.prod_estimated
        return _plus(self.prod_base, self.prod_delta)


def _estimated(
    pod: Pod,
    args: LoadAwareArgs,
    assigned_at: datetime,
    updated_at: datetime | None,
    interval: int,
    reported: ReportedPod | None,
) -> bool:
    if reported is None or updated_at is None:
        return True
    if assigned_at > updated_at - timedelta(seconds=interval):
        return True
    deadline = estimation_deadline(pod, args, assigned_at)
    return deadline is not None and deadline > updated_at


def _pod_load(
    pod: Pod,
    args: LoadAwareArgs,
    resources: tuple[str, ...],
    assigned_at: datetime,
    updated_at: datetime | None,
    interval: int,
    reported: ReportedPod | None,
    earlier: PodLoad | None = None,
) -> PodLoad:
    stamp = _stamp(pod)
    if earlier is not None and stamp and earlier.stamp == stamp:
        estimate = earlier.estimate
    else:
        estimate = _vector(estimate_pod(pod, args), resources)
    if not _estimated(pod, args, assigned_at, updated_at, interval, reported):
        delta: Vector = (0,) * len(resources)
    elif reported is None:
        delta = estimate
    else:
        delta = tuple(max(0, e - r) for e, r in zip(estimate, reported.usage, strict=True))
    return PodLoad(
        key=pod_key(pod),
        stamp=stamp,
        estimate=estimate,
        delta=delta,
        prod=priority_class(pod) is PriorityClass.PROD,
    )


def _stamp(pod: Pod) -> str:
    meta = pod.metadata
    return f"{meta.uid}/{meta.resource_version}" if meta.uid and meta.resource_version else ""


def _counted(pod: Pod) -> bool:
    return not pod.is_terminated and not is_reserve_pod(pod)


def _add_pod(load: NodeLoad, share: PodLoad) -> NodeLoad:
    zero = (0,) * len(load.resources)
    return msgspec.structs.replace(
        load,
        pods={**load.pods, share.key: share},
        delta=_plus(load.delta, share.delta),
        estimated=_plus(load.estimated, share.estimate),
        prod_delta=_plus(load.prod_delta, share.delta if share.prod else zero),
        prod_estimated=_plus(load.prod_estimated, share.estimate if share.prod else zero),
    )


def build_node_load(
    node: Node,
    metric: NodeMetric | None,
    pods: Iterable[Pod],
    *,
    args: LoadAwareArgs,
    resources: tuple[str, ...],
    now: datetime,
    assumed_at: Mapping[str, datetime] | None = None,
    previous: NodeLoad | None = None,
) -> NodeLoad:
    """The node's load record.

    ``pods`` are the pods assigned to the node (reserve pods and terminated pods are skipped);
    ``assumed_at`` maps ``namespace/name`` to when the scheduler assumed the pod, for pods whose
    PodScheduled condition is not set yet (a pod in neither counts as assigned ``now``).
    ``previous``, the node's last record built with the same args, lends the estimates of the
    pods whose uid and resourceVersion are unchanged (a NodeMetric refresh re-estimates none).
    """
    thresholds = node_thresholds(args, node.metadata.annotations)
    zero: Vector = (0,) * len(resources)
    load = NodeLoad(
        name=node.name,
        resources=resources,
        capacity=_vector(node_capacity(node), resources),
        thresholds=thresholds,
        delta=zero,
        prod_delta=zero,
        estimated=zero,
        prod_estimated=zero,
    )
    if metric is not None:
        load = _with_metric(load, metric, args, thresholds)
    assumed = assumed_at or {}
    shares: dict[str, PodLoad] = {}
    for pod in pods:
        if not _counted(pod):
            continue
        key = pod_key(pod)
        assigned_at = scheduled_time(pod) or assumed.get(key) or now
        shares[key] = _pod_load(
            pod,
            args,
            resources,
            assigned_at,
            load.updated_at,
            load.report_interval_seconds,
            load.reported.get(key),
            previous.pods.get(key) if previous is not None else None,
        )
    return _with_pods(load, shares)


def _with_pods(load: NodeLoad, shares: Mapping[str, PodLoad]) -> NodeLoad:
    width = len(load.resources)
    delta = [0] * width
    prod_delta = [0] * width
    estimated = [0] * width
    prod_estimated = [0] * width
    prod_keys: set[str] = set()
    for share in shares.values():
        for i in range(width):
            delta[i] += share.delta[i]
            estimated[i] += share.estimate[i]
            if share.prod:
                prod_delta[i] += share.delta[i]
                prod_estimated[i] += share.estimate[i]
        if share.prod:
            prod_keys.add(share.key)
    prod_base = load.prod_base
    if prod_base is not None:
        # Pods count as prod when both their spec and the NodeMetric say so.
        for key, reported in load.reported.items():
            if reported.prod and key in prod_keys:
                prod_base = _plus(prod_base, reported.usage)
    return msgspec.structs.replace(
        load,
        pods=dict(shares),
        delta=tuple(delta),
        prod_delta=tuple(prod_delta),
        estimated=tuple(estimated),
        prod_estimated=tuple(prod_estimated),
        prod_base=prod_base,
    )


def _with_metric(
    load: NodeLoad, metric: NodeMetric, args: LoadAwareArgs, thresholds: NodeThresholds
) -> NodeLoad:
    resources = load.resources
    status = metric.status
    policy = metric.spec.metric_collect_policy
    interval = DEFAULT_REPORT_INTERVAL_SECONDS
    if policy is not None and policy.report_interval_seconds:
        interval = policy.report_interval_seconds
    reported = {
        f"{entry.namespace}/{entry.name}": ReportedPod(
            _vector(entry.pod_usage.resources, resources), entry.priority == PriorityClass.PROD
        )
        for entry in status.pods_metric
    }
    info = status.node_metric
    base: Vector | None = None
    filter_base: Vector | None = None
    score_base: Vector | None = None
    prod_base: Vector | None = None
    filter_aggregated = thresholds.aggregated
    agg = args.aggregated
    score_aggregated = agg is not None and bool(agg.score_aggregation_type)
    if info is not None and info.node_usage.resources:
        base = _vector(info.node_usage.resources, resources)
        prod_base = (
            _vector(info.system_usage.resources, resources)
            if args.prod_usage_include_sys
            else (0,) * len(resources)
        )
    if info is not None and filter_aggregated:
        found = aggregated_usage(info, thresholds.aggregation_type, thresholds.aggregated_duration)
        filter_base = _vector(found, resources) if found is not None else None
    if info is not None and agg is not None and score_aggregated:
        found = aggregated_usage(info, agg.score_aggregation_type, agg.score_aggregated_duration)
        score_base = _vector(found, resources) if found is not None else None
    return msgspec.structs.replace(
        load,
        has_metric=True,
        updated_at=status.update_time,
        report_interval_seconds=interval,
        base=base,
        filter_aggregated=filter_aggregated,
        filter_base=filter_base,
        score_aggregated=score_aggregated,
        score_base=score_base,
        prod_base=prod_base,
        reported=reported,
    )


def assume(load: NodeLoad, pod: Pod, *, args: LoadAwareArgs, now: datetime) -> NodeLoad:
    """The record with ``pod`` placed on the node now (Reserve); replaces an earlier share."""
    if not _counted(pod):
        return load
    key = pod_key(pod)
    if key in load.pods:
        load = forget(load, key)
    reported = load.reported.get(key)
    share = _pod_load(
        pod,
        args,
        load.resources,
        scheduled_time(pod) or now,
        load.updated_at,
        load.report_interval_seconds,
        reported,
    )
    load = _add_pod(load, share)
    if share.prod and reported is not None and reported.prod and load.prod_base is not None:
        load = msgspec.structs.replace(load, prod_base=_plus(load.prod_base, reported.usage))
    return load


def forget(load: NodeLoad, key: str) -> NodeLoad:
    """The record without the pod ``namespace/name`` (Unreserve); unchanged when absent."""
    share = load.pods.get(key)
    if share is None:
        return load
    zero = (0,) * len(load.resources)
    pods = dict(load.pods)
    del pods[key]
    prod_base = load.prod_base
    reported = load.reported.get(key)
    if share.prod and reported is not None and reported.prod and prod_base is not None:
        prod_base = _minus(prod_base, reported.usage)
    return msgspec.structs.replace(
        load,
        pods=pods,
        delta=_minus(load.delta, share.delta),
        estimated=_minus(load.estimated, share.estimate),
        prod_delta=_minus(load.prod_delta, share.delta if share.prod else zero),
        prod_estimated=_minus(load.prod_estimated, share.estimate if share.prod else zero),
        prod_base=prod_base,
    )
