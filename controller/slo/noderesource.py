"""The ``noderesource`` control loop: koord-manager's noderesource controller (agent-spec §5,
§8 "Node-resource sync"; Kubernetes mode, under the Lease ``koordinator-manager``).

Every Node gets, in its ``status.capacity`` and ``status.allocatable``, the Batch and Mid
resources and the device resources :mod:`.calculator` works out for it, and its Device's GPU
labels; nothing else of the Node is touched (the kubelet's cpu, memory, pods, conditions stay
as they are). Labels that differ go first, as a merge patch of those labels alone (``patch``
on ``nodes``); the resources in a later pass, as a status update (on a cluster a merge patch
of ``nodes/status`` conditional on the version read, :mod:`controller.store.kubernetes`).
Each is a single write, which the snapshots show whole, and a node has at most one in flight.

When (:func:`plan_node`, koord-manager's rule): device resources and labels are written as
soon as they differ. New Batch and Mid amounts are written when one of them moved by at least
``resourceDiffThreshold`` of what the Node has, or ``updateTimeThresholdSeconds`` after this
loop last wrote them, or at once when the Node's are incomplete or this loop has not written
them since it started; they are removed at once when reset (colocation disabled, NodeMetric
missing or stale). The loop runs again on every change of a Node, its NodeMetric, its Device,
its pods or ``slo-controller-config``, and at the times a NodeMetric goes stale or a held-back
amount is due.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec

from apis import colocation
from apis.core import Node, Pod
from apis.kinds import Kind, default_registry
from apis.scheduling import Device
from apis.slo import ColocationStrategy, NodeMetric
from controller.errors import StoreError
from controller.slo.calculator import (
    BATCH_MID_RESOURCES,
    BatchMid,
    batch_mid,
    device_resources,
    fresh_until,
    with_resources,
)
from controller.slo.colocation import ColocationSource
from controller.store.assumed import Outbox
from controller.store.writes import Result, Verb, Write

if TYPE_CHECKING:  # controller.loops lists the loops: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["RETRY_SECONDS", "NodePlan", "NodeResourceController", "plan_node"]

log = logging.getLogger(__name__)

#: Seconds before writes that failed are tried again.
RETRY_SECONDS: Final = 1.0
#: The shortest wait the loop asks for (a time already due runs at the next pass).
_MIN_WAIT: Final = 0.5


class NodePlan(msgspec.Struct, frozen=True, kw_only=True):
    """What to do about one Node."""

    #: The Node to write; None when it is as it should be.
    node: Node | None
    #: Whether the write changes its Batch and Mid resources.
    batch_mid_changed: bool
    #: What the calculation gave.
    calculated: BatchMid
    #: When to look again though nothing changed (None: only on a change).
    until: datetime | None = None


def _current(node: Node) -> tuple[dict[str, int], bool]:
    """The Node's Batch and Mid amounts (allocatable), and whether capacity and allocatable
    carry all four, alike."""
    status = node.status
    allocatable = status.allocatable or status.capacity
    current = {name: allocatable[name] for name in BATCH_MID_RESOURCES if name in allocatable}
    complete = len(current) == len(BATCH_MID_RESOURCES) and all(
        status.capacity.get(name) == amount for name, amount in current.items()
    )
    return current, complete


def plan_node(
    node: Node,
    pods: Sequence[Pod],
    metric: NodeMetric | None,
    device: Device | None,
    strategy: ColocationStrategy,
    *,
    now: datetime,
    written_at: datetime | None,
) -> NodePlan:
    """What ``node`` should carry, and whether to write it now (``written_at``: when this
    loop last wrote its Batch and Mid resources, None if it has not)."""
    calculated = batch_mid(node, pods, metric, strategy, now)
    current, complete = _current(node)
    until: datetime | None = None
    if calculated.resources is None:
        target: Mapping[str, int] = {}
    else:
        fresh = dict(calculated.resources)
        target = fresh
        until = fresh_until(metric, strategy)
        threshold = strategy.resource_diff_threshold
        if complete and fresh != current and threshold is not None and written_at is not None:
            seconds = strategy.update_time_threshold_seconds
            due = written_at + timedelta(seconds=300 if seconds is None else seconds)
            if now < due and not any(
                colocation.moved(current[name], fresh[name], threshold)
                for name in BATCH_MID_RESOURCES
            ):
                target = current  # held back until due, or until one moves far enough
                until = due if until is None else min(until, due)
    changed = not (complete and dict(target) == current) and (bool(target) or bool(current))
    desired = with_resources(node, target, device_resources(device), device)
    return NodePlan(
        node=None if desired is node else desired,
        batch_mid_changed=changed,
        calculated=calculated,
        until=until,
    )


def _pods_by_node(pods: Sequence[object]) -> Mapping[str, tuple[Pod, ...]]:
    grouped: dict[str, list[Pod]] = {}
    for pod in pods:
        if isinstance(pod, Pod) and pod.spec.node_name:
            grouped.setdefault(pod.spec.node_name, []).append(pod)
    return {name: tuple(group) for name, group in grouped.items()}


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True, slots=True)
class _Seen:
    """The inputs a node was last planned from, and until when that plan holds."""

    node: Node
    metric: object
    device: object
    pods: tuple[Pod, ...]
    version: int
    until: datetime | None

    def holds(
        self, node: Node, metric: object, device: object, pods: tuple[Pod, ...], version: int
    ) -> bool:
        return (
            self.node is node
            and self.metric is metric
            and self.device is device
            and self.version == version
            and _same(self.pods, pods)
        )


class NodeResourceController:
    """The ``noderesource`` control loop (see the module docstring)."""

    name = "noderesource"

    def __init__(self) -> None:
        self._source = ColocationSource()
        #: the Node status writes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=(default_registry().for_type(Node),))
        #: node -> when this loop last wrote its Batch and Mid resources
        self._written: dict[str, datetime] = {}
        self._seen: dict[str, _Seen] = {}
        #: nodes with a write in flight: not planned again before its result is in
        self._in_flight: set[str] = set()
        #: node -> the resourceVersion its labels were patched from, until the snapshots
        #: show a later one (a merge patch is not laid over them)
        self._labelled: dict[str, str] = {}
        #: node -> what was last logged as ignored for it, and why its resources were reset
        self._ignored: dict[str, tuple[str, ...]] = {}
        self._reset: dict[str, str] = {}
        #: a write failed: try again after RETRY_SECONDS
        self._retry = False

    def reconcile(self, ctx: LoopContext) -> float | None:
        self._retry = False  # a result arriving now may set it
        store = ctx.store
        registry = store.registry
        snapshot = self._outbox.over(store.snapshot())
        self._source.read(registry, snapshot)
        version = self._source.version
        now = ctx.now()
        metric_kind = registry.for_type(NodeMetric)
        device_kind = registry.for_type(Device)
        by_node = snapshot.derived(registry.for_type(Pod), _pods_by_node)
        names: set[str] = set()
        writes: list[tuple[str, Write, NodePlan]] = []
        wakes: list[datetime] = []
        for node in snapshot.objects(registry.for_type(Node)):
            if not isinstance(node, Node):
                continue
            name = node.metadata.name
            names.add(name)
            if name in self._in_flight:
                continue
            labelled = self._labelled.get(name)
            if labelled is not None:
                if labelled == node.metadata.resource_version:
                    continue  # the label patch is not in the snapshots yet
                del self._labelled[name]
            metric = snapshot.get(metric_kind, name)
            device = snapshot.get(device_kind, name)
            pods = by_node.get(name, ())
            seen = self._seen.get(name)
            if (
                seen is not None
                and seen.holds(node, metric, device, pods, version)
                and (seen.until is None or now < seen.until)
            ):
                if seen.until is not None:
                    wakes.append(seen.until)
                continue
            plan = plan_node(
                node,
                pods,
                metric if isinstance(metric, NodeMetric) else None,
                device if isinstance(device, Device) else None,
                self._source.for_node(node),
                now=now,
                written_at=self._written.get(name),
            )
            self._seen[name] = _Seen(node, metric, device, pods, version, plan.until)
            if plan.until is not None:
                wakes.append(plan.until)
            self._report(name, plan)
            write = self._write_of(node, plan, registry.for_type(Node))
            if write is not None:
                writes.append((name, write, plan))
        self._forget(names)
        self._send(ctx, writes, now)
        if self._retry:
            return RETRY_SECONDS
        if not wakes:
            return None
        return max((min(wakes) - now).total_seconds(), _MIN_WAIT)

    def _write_of(self, node: Node, plan: NodePlan, kind: Kind) -> Write | None:
        """The labels first, as a merge patch of the labels alone (the resources follow in a
        later pass); else the status, through the status subresource. Each is one write of
        one version, which the snapshots show whole."""
        desired = plan.node
        if desired is None:
            return None
        labels = desired.metadata.labels
        if labels != node.metadata.labels:
            self._labelled[node.metadata.name] = node.metadata.resource_version
            changed = {key: v for key, v in labels.items() if node.metadata.labels.get(key) != v}
            return Write.merge_patch(kind, node.metadata.name, {"metadata": {"labels": changed}})
        return Write.update_status(desired)

    def _report(self, name: str, plan: NodePlan) -> None:
        ignored = plan.calculated.ignored
        if ignored and self._ignored.get(name) != ignored:
            for line in ignored:
                log.warning("node %s: %s", name, line)
        self._ignored[name] = ignored
        reset = plan.calculated.reset
        if reset and self._reset.get(name) != reset and plan.batch_mid_changed:
            log.info("node %s: Batch and Mid resources removed: %s", name, reset)
        self._reset[name] = reset

    def _send(
        self, ctx: LoopContext, planned: list[tuple[str, Write, NodePlan]], now: datetime
    ) -> None:
        sent: list[tuple[str, bool]] = []
        for name, write, plan in planned:
            self._in_flight.add(name)
            resources = write.verb is Verb.UPDATE_STATUS and plan.batch_mid_changed
            sent.append((name, resources))
            if resources and plan.calculated.resources is not None:
                self._written[name] = now
            elif resources:
                self._written.pop(name, None)
        statuses = sum(resources for _, resources in sent)
        if sent:
            log.info("node resources written: %d node(s), Batch and Mid of %d", len(sent), statuses)

        def written(results: Sequence[Result]) -> None:
            for (name, resources), result in zip(sent, results, strict=True):
                self._in_flight.discard(name)
                self._seen.pop(name, None)  # planned again from what the snapshots show
                if isinstance(result, StoreError):
                    log.warning("node %s: resources not written, trying again: %s", name, result)
                    self._labelled.pop(name, None)
                    if resources:
                        self._written.pop(name, None)
                    self._retry = True

        self._outbox.send(ctx.store, [write for _, write, _ in planned], written)

    def _forget(self, names: set[str]) -> None:
        """Drop what is kept for nodes that are gone."""
        if len(self._seen) <= len(names) and len(self._written) <= len(names):
            return
        for table in (self._seen, self._written, self._ignored, self._reset, self._labelled):
            for name in [n for n in table if n not in names]:
                del table[name]
        self._source.forget(names)
