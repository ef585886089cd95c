"""``LowNodeLoad``: move pods off nodes whose measured usage is high onto nodes whose usage is
low (controller-spec §6.4).

Each call runs the pools of :func:`~controller.descheduler.plugins.lownodeload.args.node_pools`
in order. For one pool:

1. Nodes: the view's nodes matching the pool's selector (a pool with a selector skips nodes that
   were high or prodHigh in an earlier pool of the same call); a node whose NodeMetric is
   missing or expired is left out (:mod:`~controller.descheduler.plugins.lownodeload.usage`).
2. Levels and classes (:mod:`~controller.descheduler.plugins.lownodeload.thresholds`), then the
   anomaly marks (:mod:`~controller.descheduler.plugins.lownodeload.anomaly`): only high nodes
   in ``Anomaly`` are sources (prodHigh nodes likewise, with their own detectors).
3. Nothing happens when there is no source, no underutilized node (low, prodLow or bothLow),
   or no more than ``numberOfNodes`` of them.
4. Non-prod pass: targets = low | bothLow; budget per resource = Σ over targets of
   (high level - usage). Sources by weighted usage score, highest first. A source's candidates
   are its pods with a reported usage that pass the evictor's filter, the namespaces and the
   pod selectors and, with ``nodeFit``, fit some target: node fit (requests, selectors,
   affinity, taints) **and** target usage + pod usage ≤ target high level for every resource.
   They are taken in :mod:`~controller.descheduler.podsort` order, then by usage of the
   resources over threshold on the source (weighted, most first), then newest first. Pods are
   evicted while the source is still over its high level and every budget is above 0. Each
   eviction books the pod's usage and requests on the first target that fits it (targets by
   usage score, lowest first) and takes its usage off the source and the budget; a pod no
   target can take any more is skipped.
5. Prod pass, the same with prodHigh sources, their koord-prod pods, prodLow | bothLow targets,
   the prod levels and prod usage. A target's room is the smaller of its prod room and its
   node-level room (for a bothLow target: what the non-prod pass left of it), so it stays
   within both its levels; the budget sums these rooms.
6. A source brought below its high level is reset to ``OK``; every other source gets one
   normal mark.

A pod already asked for in this cycle (by any plugin) is never a candidate. ``dryRun`` is
honoured by the evictor the descheduler hands the plugin (proposals are recorded, nothing is
evicted); the plugin decides the same either way. Eviction reasons read
``node is overutilized, node cpu usage(82.00%)>threshold(75.00%)`` (``prod cpu ...`` in the
prod pass).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TypeAlias

from apis.core import Node, Pod
from apis.labels import Selector
from apis.qos import PriorityClass, priority_class
from apis.slo import NodeMetric
from controller.descheduler import nodefit
from controller.descheduler.framework import CycleView, Evictor, Status, same_objects
from controller.descheduler.plugins.lownodeload.anomaly import DetectorCache, State
from controller.descheduler.plugins.lownodeload.args import LowNodeLoadArgs, Pool, node_pools
from controller.descheduler.plugins.lownodeload.thresholds import (
    Classes,
    Levels,
    classify,
    is_over,
    node_levels,
    over_text,
    room,
)
from controller.descheduler.plugins.lownodeload.usage import (
    NodeUsage,
    PodKey,
    is_expired,
    node_usage,
    pod_key,
    usage_score,
)
from controller.descheduler.podsort import sort_key

__all__ = ["NAME", "LowNodeLoad"]

log = logging.getLogger(__name__)

NAME: Final = "LowNodeLoad"


class _Current(dict[str, dict[str, int]]):
    """Node name -> its usage (or prod usage) now: a copy of the measured one, made when the
    node is first looked at (most nodes of a large pool never are)."""

    def __init__(self, measured: Mapping[str, Mapping[str, int]]) -> None:
        super().__init__()
        self._measured = measured

    def __missing__(self, name: str) -> dict[str, int]:
        found = self[name] = dict(self._measured[name])
        return found


@dataclass(frozen=True, slots=True)
class _Measured:
    """A node's usage and what it was worked out from (the objects themselves)."""

    node: Node
    metric: NodeMetric
    pods: Sequence[Pod]
    resources: tuple[str, ...]
    with_prod: bool
    #: None: the NodeMetric has no node figures
    usage: NodeUsage | None


@dataclass(frozen=True, slots=True)
class _Classified:
    """A pool's nodes as one call classified them, from their usages (the objects)."""

    usages: tuple[NodeUsage, ...]
    levels: Mapping[str, Levels]
    prod_levels: Mapping[str, Levels] | None
    classes: Classes
    #: Node name -> the classes it is in (names of the fields of ``classes``).
    memberships: Mapping[str, tuple[str, ...]]
    #: Node name -> its usage object, its measured usage, its measured prod usage.
    by_name: Mapping[str, NodeUsage]
    usage: Mapping[str, Mapping[str, int]]
    prod_usage: Mapping[str, Mapping[str, int]]


@dataclass(slots=True)
class _Cycle:
    """What one pool's passes share (runtime only)."""

    view: CycleView
    evictor: Evictor
    pool: Pool
    resources: tuple[str, ...]
    by_name: Mapping[str, NodeUsage]
    levels: Mapping[str, Levels]
    prod_levels: Mapping[str, Levels] | None
    #: Pods asked for in this cycle (``(namespace, name)``).
    taken: set[PodKey]
    #: Node name -> usage / prod usage now (sources lose, targets gain, with each eviction).
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    prod_usage: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Target name -> requests of its pods plus those booked on it (for node fit).
    requested: dict[str, dict[str, int]] = field(default_factory=dict)
    #: (node, prod pass) -> its room below the high level(s), until something is booked.
    rooms: dict[tuple[str, bool], dict[str, float]] = field(default_factory=dict)

    def requests_on(self, name: str) -> dict[str, int]:
        used = self.requested.get(name)
        if used is None:
            used = self.requested[name] = dict(self.view.requested_on(name))
        return used


@dataclass(slots=True)
class _Targets:
    """The targets of one pass in order, for first-fit searches (runtime only).

    A target whose room for some resource is below the smallest usage of that resource among
    the pass's pods (``lowest``) can take none of them: nothing is booked on it again, so its
    room never grows back. ``start`` moves past such targets at the front, and searches begin
    there.
    """

    names: tuple[str, ...]
    #: Resource -> the smallest usage of a pod of the pass's sources (absent: 0).
    lowest: dict[str, int]
    #: Targets before this place can take no pod of the pass.
    start: int = 0


#: A candidate of a source: the pod, its ``(namespace, name)`` and its reported usage.
_Candidate: TypeAlias = tuple[Pod, PodKey, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class _Order:
    """A source's candidates in drain order and what that order was worked out from."""

    source: NodeUsage
    #: The resources over the source's high level (the order weighs their usage).
    over: tuple[str, ...]
    #: Every candidate, none dropped as taken, in order.
    candidates: list[_Candidate]
    #: Whether moving any of them only adds to a target (:meth:`LowNodeLoad._grows_nothing`),
    #: so also for any part of them.
    grows_nothing: bool


_CLASS_FIELDS: Final = ("low", "high", "prod_low", "prod_high", "both_low", "under")


def _memberships(classes: Classes) -> dict[str, tuple[str, ...]]:
    """Node name -> the fields of ``classes`` that list it."""
    found: dict[str, tuple[str, ...]] = {}
    for field_name in _CLASS_FIELDS:
        for name in getattr(classes, field_name):
            found[name] = (*found.get(name, ()), field_name)
    return found


def _classes(usages: Sequence[NodeUsage], memberships: Mapping[str, tuple[str, ...]]) -> Classes:
    """The classes of ``usages`` (each class in their order) from each node's memberships."""
    lists: dict[str, list[str]] = {field_name: [] for field_name in _CLASS_FIELDS}
    for u in usages:
        for field_name in memberships.get(u.name, ()):
            lists[field_name].append(u.name)
    return Classes(**{field_name: tuple(names) for field_name, names in lists.items()})


def _is_prod(pod: Pod) -> bool:
    return priority_class(pod) is PriorityClass.PROD


class LowNodeLoad:
    """See the module docstring. Keeps the anomaly detectors across calls."""

    name = NAME

    def __init__(self, args: LowNodeLoadArgs) -> None:
        self.args = args
        self.pools = node_pools(args)
        self._pod_selectors: tuple[Selector, ...] = args.pod_selector_list
        self.node_detectors = DetectorCache(args.detector_ttl)
        self.prod_detectors = DetectorCache(args.detector_ttl)
        #: (pool, node) -> the inputs of its usage in the last call and that usage: kept for
        #: the next call, which reuses it where the node, its NodeMetric and its pods are the
        #: same objects (immutable; a node whose pods changed gets a new pod list)
        self._usages: dict[tuple[str, str], _Measured] = {}
        #: (pool, source, prod pass) -> its candidates in order as the last call drained it
        #: (before the pods taken in the call were dropped): kept for the next call, which
        #: reuses them while the source's usage is the same object and the same resources
        #: are over the high level
        self._orders: dict[tuple[str, str, bool], _Order] = {}
        self._next_orders: dict[tuple[str, str, bool], _Order] = {}
        #: pool -> its nodes' levels and classes in the last call: kept while the pool's
        #: usages are the same objects in the same order (they are worked out from those
        #: alone; the anomaly marks are not kept: they count calls)
        self._classified: dict[str, _Classified] = {}

    # -- the call --------------------------------------------------------------------------

    def balance(self, view: CycleView, evictor: Evictor) -> Status:
        if self.args.paused:
            return Status()
        now = view.now
        self.node_detectors.sweep(now)
        self.prod_detectors.sweep(now)
        taken = {pod_key(intent.pod) for intent in evictor.intents}
        done: set[str] = set()
        measured: dict[tuple[str, str], _Measured] = {}
        self._next_orders = {}
        for pool in self.pools:
            self._run_pool(pool, view, evictor, done, taken, measured)
        self._usages = measured
        self._orders, self._next_orders = self._next_orders, {}
        return Status()

    def _pool_usages(
        self,
        pool: Pool,
        view: CycleView,
        done: set[str],
        measured: dict[tuple[str, str], _Measured],
    ) -> list[NodeUsage]:
        """The usage of each node of the pool with a NodeMetric in date (recorded in
        ``measured`` for the next call)."""
        selector = pool.node_selector
        resources = pool.resources
        with_prod = pool.has_prod_thresholds
        now = view.now
        expiration = self.args.node_metric_expiration_seconds
        before = self._usages
        usages: list[NodeUsage] = []
        for node in view.nodes:
            name = node.metadata.name
            if selector is not None and (name in done or not selector.matches(node.labels)):
                continue
            metric = view.metrics.get(name)
            if metric is None or is_expired(metric, now, expiration):
                continue
            pods = view.pods_on(name)
            key = (pool.name, name)
            last = before.get(key)
            if (
                last is not None
                and last.node is node
                and last.metric is metric
                and last.pods is pods
                and last.resources == resources
                and last.with_prod == with_prod
            ):
                usage = last.usage
            else:
                usage = node_usage(
                    node,
                    metric,
                    pods,
                    resources,
                    now=now,
                    expiration_seconds=expiration,
                    with_prod=with_prod,
                )
                last = _Measured(node, metric, pods, resources, with_prod, usage)
            measured[key] = last
            if usage is not None:
                usages.append(usage)
        return usages

    def _mark(
        self, pool: Pool, usages: Sequence[NodeUsage], classes: Classes, now: datetime
    ) -> tuple[list[str], list[str]]:
        """One mark per node and detector; the (node-level, prod) sources in Anomaly."""
        rule = pool.anomaly
        high = set(classes.high)
        under = set(classes.under)
        prod_high = set(classes.prod_high)
        prod_low = {*classes.prod_low, *classes.both_low}
        sources: list[str] = []
        prod_sources: list[str] = []
        for u in usages:
            key = (pool.name, u.name)
            if u.name in high:
                if self.node_detectors.mark(key, rule, normal=False, now=now) is State.ANOMALY:
                    sources.append(u.name)
            elif u.name in under:
                self.node_detectors.reset(key, now)
            else:
                self.node_detectors.mark(key, rule, normal=True, now=now)
            if u.name in prod_high:
                if self.prod_detectors.mark(key, rule, normal=False, now=now) is State.ANOMALY:
                    prod_sources.append(u.name)
            elif u.name in prod_low:
                self.prod_detectors.reset(key, now)
            else:
                self.prod_detectors.mark(key, rule, normal=True, now=now)
        return sources, prod_sources

    def _classify(self, pool: Pool, usages: Sequence[NodeUsage]) -> _Classified:
        """The levels and classes of the pool's nodes (the last call's while the usages are
        the same)."""
        last = self._classified.get(pool.name)
        if last is not None and same_objects(last.usages, usages):
            return last
        resources = pool.resources
        deviation = pool.use_deviation_thresholds
        if last is not None and not deviation:
            # Absolute thresholds: a node's levels and class follow from its own usage alone,
            # so only the nodes whose usage is a new object are worked out again.
            fresh = [u for u in usages if last.by_name.get(u.name) is not u]
        else:
            fresh = list(usages)
        levels = node_levels(fresh, pool.low, pool.high, resources, deviation=deviation)
        prod_levels = (
            node_levels(
                fresh, pool.prod_low, pool.prod_high, resources, deviation=deviation, prod=True
            )
            if pool.has_prod_thresholds
            else None
        )
        memberships = _memberships(classify(fresh, levels, prod_levels))
        if len(fresh) < len(usages) and last is not None:
            for u in usages:
                name = u.name
                if name not in levels:
                    levels[name] = last.levels[name]
                    if prod_levels is not None and last.prod_levels is not None:
                        prod_levels[name] = last.prod_levels[name]
                    memberships[name] = last.memberships.get(name, ())
        classified = _Classified(
            usages=tuple(usages),
            levels=levels,
            prod_levels=prod_levels,
            classes=_classes(usages, memberships),
            memberships=memberships,
            by_name={u.name: u for u in usages},
            usage={u.name: u.usage for u in usages},
            prod_usage={u.name: u.prod_usage for u in usages},
        )
        self._classified[pool.name] = classified
        return classified

    def _run_pool(
        self,
        pool: Pool,
        view: CycleView,
        evictor: Evictor,
        done: set[str],
        taken: set[PodKey],
        measured: dict[tuple[str, str], _Measured],
    ) -> None:
        usages = self._pool_usages(pool, view, done, measured)
        if not usages:
            self._classified.pop(pool.name, None)
            return
        resources = pool.resources
        classified = self._classify(pool, usages)
        levels, prod_levels, classes = (
            classified.levels,
            classified.prod_levels,
            classified.classes,
        )
        done.update(classes.high)
        done.update(classes.prod_high)
        sources, prod_sources = self._mark(pool, usages, classes, view.now)
        log.debug(
            "LowNodeLoad pool %s: low %s, high %s, prodLow %s, prodHigh %s, bothLow %s; "
            "sources %s, prod sources %s",
            pool.name,
            classes.low,
            classes.high,
            classes.prod_low,
            classes.prod_high,
            classes.both_low,
            sources,
            prod_sources,
        )
        if not sources and not prod_sources:
            return
        underused = len(classes.low) + len(classes.prod_low) + len(classes.both_low)
        if underused == 0 or underused <= self.args.number_of_nodes:
            return
        cycle = _Cycle(
            view=view,
            evictor=evictor,
            pool=pool,
            resources=resources,
            by_name=classified.by_name,
            levels=levels,
            prod_levels=prod_levels,
            taken=taken,
            usage=_Current(classified.usage),
            prod_usage=_Current(classified.prod_usage),
        )
        if sources:
            self._pass(cycle, sources, (*classes.low, *classes.both_low), prod=False)
        if prod_sources and prod_levels is not None:
            self._pass(cycle, prod_sources, (*classes.prod_low, *classes.both_low), prod=True)

    # -- eviction passes -------------------------------------------------------------------

    def _budget(self, cycle: _Cycle, targets: Sequence[str], *, prod: bool) -> dict[str, float]:
        budget = dict.fromkeys(cycle.resources, 0.0)
        for name in targets:
            space = self._room(cycle, name, prod=prod)
            for resource in cycle.resources:
                budget[resource] += space[resource]
        return budget

    def _room(self, cycle: _Cycle, name: str, *, prod: bool) -> dict[str, float]:
        """What ``name`` can still take before it reaches its high level(s) (kept until
        something is booked on it)."""
        cached = cycle.rooms.get((name, prod))
        if cached is not None:
            return cached
        space = room(cycle.levels[name].high, cycle.usage[name])
        if prod and cycle.prod_levels is not None:
            prod_space = room(cycle.prod_levels[name].high, cycle.prod_usage[name])
            for r in cycle.resources:
                space[r] = min(space[r], prod_space[r])
        cycle.rooms[(name, prod)] = space
        return space

    def _target_for(
        self,
        cycle: _Cycle,
        pod: Pod,
        amounts: Mapping[str, int],
        targets: _Targets,
        *,
        prod: bool,
    ) -> str | None:
        """The first target that fits ``pod`` (requests and usage), if any."""
        resources = cycle.resources
        wanted = [(r, amounts.get(r, 0)) for r in resources]
        request = cycle.view.request_of(pod)
        names = targets.names
        for i in range(targets.start, len(names)):
            name = names[i]
            space = self._room(cycle, name, prod=prod)
            if any(amount > space[r] for r, amount in wanted):
                continue
            node = cycle.by_name[name].node
            if nodefit.fits(pod, node, used=cycle.requests_on(name), request=request):
                return name
        return None

    def _skip_full(self, cycle: _Cycle, targets: _Targets, *, prod: bool) -> None:
        """Move ``targets.start`` past the targets at the front that can take no pod of the
        pass any more."""
        names = targets.names
        lowest = targets.lowest
        i = targets.start
        while i < len(names):
            space = self._room(cycle, names[i], prod=prod)
            if not any(space[r] < lowest.get(r, 0) for r in cycle.resources):
                break
            i += 1
        targets.start = i

    def _selected(self, pod: Pod) -> bool:
        namespaces = self.args.evictable_namespaces
        if namespaces is not None and not namespaces.allows(pod.metadata.namespace):
            return False
        selectors = self._pod_selectors
        return not selectors or any(s.matches(pod.labels) for s in selectors)

    def _pass(
        self, cycle: _Cycle, sources: Sequence[str], targets: Sequence[str], *, prod: bool
    ) -> None:
        pool = cycle.pool
        weights = pool.resource_weights
        resources = cycle.resources
        current = cycle.prod_usage if prod else cycle.usage
        all_levels = cycle.prod_levels if prod and cycle.prod_levels is not None else cycle.levels
        by_name = cycle.by_name

        def node_score(name: str) -> int:
            return usage_score(current[name], by_name[name].capacity, weights, resources)

        ordered_targets = sorted(targets, key=lambda n: (node_score(n), n))
        budget = self._budget(cycle, ordered_targets, prod=prod)
        lowest: dict[str, int] = {}
        for source in sources:
            for r, amount in by_name[source].smallest.items():
                if amount < lowest.get(r, amount + 1):
                    lowest[r] = amount
        scan = _Targets(tuple(ordered_targets), lowest)
        self._skip_full(cycle, scan, prod=prod)
        detectors = self.prod_detectors if prod else self.node_detectors
        for source in sorted(sources, key=lambda n: (-node_score(n), n)):
            self._drain(cycle, by_name[source], scan, budget, all_levels, prod=prod)
            key = (pool.name, source)
            if not is_over(current[source], all_levels[source].high):
                detectors.reset(key, cycle.view.now)
            elif detectors.state(key, cycle.view.now) is State.ANOMALY:
                detectors.mark(key, pool.anomaly, normal=True, now=cycle.view.now)

    def _candidates(self, source: NodeUsage, *, prod: bool) -> list[_Candidate]:
        """The source's pods with a reported usage, selected (and koord-prod in the prod
        pass); the pods taken, the evictor's filter and the targets are asked later."""
        found: list[_Candidate] = []
        for pod, amounts in zip(source.pods, source.reported, strict=True):
            if amounts is None:
                continue
            meta = pod.metadata
            key = (meta.namespace, meta.name)
            if prod and not _is_prod(pod):
                continue
            if self._selected(pod):
                found.append((pod, key, amounts))
        return found

    def _grows_nothing(
        self, cycle: _Cycle, source: NodeUsage, candidates: Sequence[_Candidate]
    ) -> bool:
        """Whether moving any of the candidates only adds to a target's usage and requests (no
        negative amount): then a pod that fits no target now fits none later in the pass."""
        resources = cycle.resources
        # The node's smallest usages bound every candidate's: look at each pod's only when
        # some pod of the node uses less than nothing.
        usage_may_shrink = any(source.smallest.get(r, 0) < 0 for r in resources)
        for pod, _, amounts in candidates:
            if usage_may_shrink and any(amounts.get(r, 0) < 0 for r in resources):
                return False
            if nodefit.asks_less_than_nothing(pod):
                return False
        return True

    def _order(
        self, cycle: _Cycle, source: NodeUsage, over: tuple[str, ...], *, prod: bool
    ) -> _Order:
        """The source's candidates in drain order: :mod:`~controller.descheduler.podsort`
        order, then weighted usage of the ``over`` resources (most first), then newest first,
        then by key (a total order: dropping pods from the list keeps the others' order)."""
        over_weights = {r: cycle.pool.resource_weights.get(r, 1) for r in over}
        capacity = source.capacity

        def order(candidate: _Candidate) -> tuple[object, ...]:
            pod, key, amounts = candidate
            stamp = pod.metadata.creation_timestamp
            return (
                sort_key(pod),
                -usage_score(amounts, capacity, over_weights, over),
                -stamp.timestamp() if stamp is not None else -0.0,
                key,
            )

        candidates = sorted(self._candidates(source, prod=prod), key=order)
        return _Order(
            source=source,
            over=over,
            candidates=candidates,
            grows_nothing=not candidates or self._grows_nothing(cycle, source, candidates),
        )

    def _drain(
        self,
        cycle: _Cycle,
        source: NodeUsage,
        targets: _Targets,
        budget: dict[str, float],
        all_levels: Mapping[str, Levels],
        *,
        prod: bool,
    ) -> None:
        """Evict the source's candidates in order while it is over its high level.

        A candidate passes the evictor's filter and, with ``nodeFit``, fits some target, both
        as the source's turn begins. The filter only ever refuses more as evictions are
        admitted, and targets only fill up, so both are asked lazily, when a pod's turn comes
        (a pod refused then would be refused by ``evict`` anyway); only when some pod would
        give a target room back are the targets asked for every pod up front.
        """
        name = source.name
        evictor = cycle.evictor
        if not evictor.can_evict_from(name):
            return  # the cycle's limits leave nothing to take from this node
        current = cycle.prod_usage if prod else cycle.usage
        high = all_levels[name].high
        node_fit = self.args.node_fit
        over = tuple(r for r in cycle.resources if current[name].get(r, 0) > high[r])
        memo_key = (cycle.pool.name, name, prod)
        order = self._orders.get(memo_key)
        if order is None or order.source is not source or order.over != over:
            order = self._order(cycle, source, over, prod=prod)
        self._next_orders[memo_key] = order
        taken = cycle.taken
        candidates = [c for c in order.candidates if c[1] not in taken]
        if (
            node_fit
            and candidates
            and not order.grows_nothing
            and not self._grows_nothing(cycle, source, candidates)
        ):
            candidates = [
                candidate
                for candidate in candidates
                if evictor.filter(candidate[0])
                and self._target_for(cycle, candidate[0], candidate[2], targets, prod=prod)
                is not None
            ]
        if not candidates:
            return
        for pod, key, amounts in candidates:
            if not is_over(current[name], high) or any(v <= 0 for v in budget.values()):
                return
            if not evictor.can_evict_from(name):
                return
            if not evictor.filter(pod):
                continue
            target = None
            if node_fit:
                target = self._target_for(cycle, pod, amounts, targets, prod=prod)
                if target is None:
                    continue
            if not evictor.pre_eviction_filter(pod):
                continue
            reason = over_text(current[name], high, source.capacity, prod=prod)
            if not evictor.evict(pod, plugin=NAME, reason=reason):
                continue
            log.info("LowNodeLoad: evicting %s/%s from %s to %s: %s", *key, name, target, reason)
            cycle.taken.add(key)
            self._move(cycle, pod, amounts, name, target, budget)
            if target is not None:
                self._skip_full(cycle, targets, prod=prod)

    @staticmethod
    def _move(
        cycle: _Cycle,
        pod: Pod,
        amounts: Mapping[str, int],
        source: str,
        target: str | None,
        budget: dict[str, float],
    ) -> None:
        """Book an evicted pod: off the source and the budget, onto the target."""
        prod_pod = _is_prod(pod)
        for r in cycle.resources:
            amount = amounts.get(r, 0)
            budget[r] -= amount
            cycle.usage[source][r] = cycle.usage[source].get(r, 0) - amount
            if prod_pod:
                cycle.prod_usage[source][r] = cycle.prod_usage[source].get(r, 0) - amount
            if target is not None:
                cycle.usage[target][r] = cycle.usage[target].get(r, 0) + amount
                if prod_pod:
                    cycle.prod_usage[target][r] = cycle.prod_usage[target].get(r, 0) + amount
        cycle.rooms.pop((source, False), None)
        cycle.rooms.pop((source, True), None)
        if target is not None:
            cycle.rooms.pop((target, False), None)
            cycle.rooms.pop((target, True), None)
            requested = cycle.requests_on(target)
            for resource, amount in {**cycle.view.request_of(pod), nodefit.PODS: 1}.items():
                requested[resource] = requested.get(resource, 0) + amount
