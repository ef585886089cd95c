"""The admission engine: queues, policies and the plugin chain over in-memory units.

The engine holds every QueueUnit the loop showed it (:meth:`Engine.upsert`,
:meth:`Engine.remove`), the quota tree and the charges (:class:`~controller.queueing.ledger.
QuotaLedger`), and runs admission cycles (:meth:`Engine.cycle`). It does no I/O: the control
loop (:mod:`controller.queueing.loop`) feeds it from the store and writes its decisions back.

**Candidates.** A unit waits in its queue (chosen by the QueueUnitMapping plugin) while it is
active, not finished, has replicas left to admit, and is not waiting on admission checks, a
backoff, or the echo of its own last admission. Units the mapping cannot place wait in a "no
queue" set and are mapped again whenever queues or quotas change.

**Equivalence classes.** Inside a queue, units that every filter sees alike (the same quota,
the same outstanding replicas with the same per-replica requests, the same tier, the same
filter signatures) form one class, ordered by the queue's sort. Only a class's first unit is
ever tried: if it does not fit, none of its class does. A refused class is not tried again
until one of the keys its refusal named (a quota on its path, a tenant) changes in a way that
may admit more — a release, a larger runtime, a changed quota, a new unit. So a cycle costs
O(admissions + classes), not O(units), and nothing polls on a timer.

**Policies** (queue-spec §6, event-driven). Each dirty queue is scanned in its sort order,
class heads merged by a heap; several units may be admitted in one cycle:

* ``Priority``: a unit that does not fit is skipped and later ones may still be admitted.
* ``Block``: the first unit of quota Q that does not fit blocks every later unit of Q in this
  queue (units of other quotas still proceed) until Q's room changes or a unit of Q arrives.
* ``Intelligent``: two tiers split at the queue's priority threshold (default 4; priority >=
  threshold is high); inside a tier: priority, then non-preemptible first, then creation time;
  both tiers block per quota like ``Block``, and the low tier is scanned only while the high
  tier has no unit left to admit.

Queue annotations apply too: ``max-depth`` (only the first N units of the queue are eligible),
``wait-for-pods-running`` (no admission while an admitted unit of the queue still has unbound
replicas). Queues are visited in the MultiQueueSort plugin's order.

**Reclaim.** When a unit does not fit although its quota's usage plus its request stays within
the quota's ``min`` (the quota wants its guarantee back), preemptible units of other quotas
that use more than their runtime quota are evicted — lowest priority first, then the most
recently admitted — until the unit fits, never one admitted less than ``reclaim_min_runtime``
seconds ago. If no set of victims makes room, nothing is evicted.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from apis import constants as k
from apis.queueing import ReclaimState
from controller.queueing import phases
from controller.queueing.framework import (
    Code,
    CycleContext,
    QueueConfig,
    Status,
    run_filters,
)
from controller.queueing.ledger import QuotaLedger
from controller.queueing.plugins import Plugins, build_plugins
from controller.queueing.units import MAX_JOBS, UnitInfo, add_into
from controller.quota.check import QuotaIndex

__all__ = [
    "ADMISSIONS_PER_CYCLE",
    "NO_QUEUE_MESSAGE",
    "WAIT_FOR_PODS_MESSAGE",
    "Admitted",
    "CycleResult",
    "Engine",
    "Eviction",
]

log = logging.getLogger(__name__)

#: Filter attempts one cycle makes at most; the rest waits for the next (a count, so a run is
#: reproducible).
ADMISSIONS_PER_CYCLE: Final = 2000
NO_QUEUE_MESSAGE: Final = "no queue accepts this unit's quota"
WAIT_FOR_PODS_MESSAGE: Final = "no more queueUnit allowed to schedule in this queue"
_QUOTA_INDEX_KEY: Final = "quota-index"
#: One attempt in this many has its Filter time measured.
_SAMPLE_EVERY: Final = 10

Order = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Admitted:
    """One admission of a cycle: ``replicas`` more per pod set for ``unit``."""

    unit: UnitInfo
    queue: str
    replicas: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Eviction:
    unit: UnitInfo
    #: ``Preempted``, ``Deactivated``, ...
    reason: str
    message: str


@dataclass(slots=True)
class CycleResult:
    admitted: list[Admitted] = field(default_factory=list)
    evicted: list[Eviction] = field(default_factory=list)
    #: More work is left for another cycle at once.
    more: bool = False
    #: (queue, ``scheduled``/``unschedulable``) -> attempts.
    attempts: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (queue, seconds) of the Filter chain, measured on one attempt in ten.
    filter_samples: list[tuple[str, float]] = field(default_factory=list)
    #: Queue preemption: units asked to give back unbound replicas (pod set -> replicas).
    reclaims: list[tuple[UnitInfo, dict[str, int]]] = field(default_factory=list)


class _Class:
    """Units a filter chain cannot tell apart, in queue order (a heap with lazy deletion)."""

    __slots__ = ("failed", "heap", "members", "tier")

    def __init__(self, tier: int) -> None:
        self.heap: list[tuple[Order, str]] = []
        self.members: dict[str, Order] = {}
        self.tier = tier
        #: The refusal of the last head tried, while none of its blockers changed.
        self.failed: Status | None = None

    def add(self, uid: str, order: Order) -> None:
        self.members[uid] = order
        heapq.heappush(self.heap, (order, uid))

    def discard(self, uid: str) -> None:
        self.members.pop(uid, None)

    def head(self) -> tuple[Order, str] | None:
        heap = self.heap
        members = self.members
        while heap:
            order, uid = heap[0]
            if members.get(uid) == order:
                return order, uid
            heapq.heappop(heap)
        return None


@dataclass(slots=True)
class _Queue:
    config: QueueConfig
    classes: dict[Hashable, _Class] = field(default_factory=dict)
    #: uid -> its class key.
    members: dict[str, Hashable] = field(default_factory=dict)
    #: Block/Intelligent: quota -> the refusal that blocks it.
    blocked: dict[str, Status] = field(default_factory=dict)
    #: Admitted units whose replicas are not all bound (wait-for-pods-running).
    assumed: set[str] = field(default_factory=set)
    dirty: bool = True


class Engine:
    """Admission state and cycles (see the module docstring)."""

    def __init__(
        self,
        plugins: Plugins | None = None,
        *,
        reclaim_min_runtime: float = 60.0,
        attempts_per_cycle: int = ADMISSIONS_PER_CYCLE,
    ) -> None:
        self.plugins = plugins if plugins is not None else build_plugins()
        self.reclaim_min_runtime = reclaim_min_runtime
        self.attempts_per_cycle = attempts_per_cycle
        self.index = QuotaIndex.build(())
        self._paths: dict[str, tuple[str, ...]] = {}
        self.ledger = QuotaLedger(self.path)
        self.units: dict[str, UnitInfo] = {}
        self.queues: dict[str, _Queue] = {}
        #: uid -> queue name of every unit mapped to a queue (candidate or holding).
        self._queue_of: dict[str, str] = {}
        self.no_queue: set[str] = set()
        #: Units admitted by a cycle whose new state the store has not shown yet.
        self.updating: set[str] = set()
        #: Units holding resources, or charged by a cycle and not seen since.
        self._holding: set[str] = set()
        #: Quota -> its runtime quota (only resources the cluster reports).
        self.runtime: Mapping[str, Mapping[str, int]] = {}
        #: Keys bumped outside the ledger (runtime grew, tenant released, quotas changed).
        self._bumped: set[str] = set()
        #: Blocker key -> queues with a class or a block waiting on it.
        self._waiting: dict[str, set[str]] = {}
        #: Leaf quota -> the demand of its units (for the runtime quota).
        self._demand: dict[str, dict[str, int]] = {}
        self.demand_changed = True
        #: Last refusal of each unit tried (the head of its class), for visibility.
        self.refusals: dict[str, Status] = {}
        self._config_cache: dict[str, QueueConfig] | None = None
        self._attempts = 0
        self._ctx = self._context(datetime.fromtimestamp(0).astimezone())

    # -- the quota tree -----------------------------------------------------------------------

    def path(self, quota: str) -> tuple[str, ...]:
        """The quota and its ancestors below the root. A parent label naming no quota ends
        the path with that name, so the filter refuses with ``quota not exist``."""
        path = self._paths.get(quota)
        if path is None:
            chain = [quota, *self.index.ancestors(quota)]
            top = self.index.get(chain[-1])
            if top is not None:
                parent = top.metadata.labels.get(k.LABEL_QUOTA_PARENT, "")
                if parent and parent != k.QUOTA_ROOT and parent not in self.index:
                    chain.append(parent)
            path = self._paths[quota] = tuple(chain)
        return path

    def set_quotas(self, index: QuotaIndex) -> None:
        """The ElasticQuotas changed: new paths, charges re-added, every refusal re-tried."""
        self.index = index
        self._paths.clear()
        self.ledger.rebuild(self.path)
        self._bump(_QUOTA_INDEX_KEY)
        for queue in self.queues.values():
            self._release_all(queue)

    def set_runtime(self, runtime: Mapping[str, Mapping[str, int]]) -> None:
        """New runtime quotas; a quota whose runtime grew in some resource is re-tried."""
        before = self.runtime
        for quota, amounts in runtime.items():
            old = before.get(quota)
            if old is None or any(v > old.get(r, -1) for r, v in amounts.items()):
                self._bump(quota)
        for quota in before:
            if quota not in runtime:
                self._bump(quota)
        self.runtime = runtime
        self.demand_changed = False

    def demand(self) -> Mapping[str, Mapping[str, int]]:
        """Leaf quota -> the demand of its unfinished units."""
        return self._demand

    # -- queues ---------------------------------------------------------------------------------

    def set_queues(self, configs: Mapping[str, QueueConfig]) -> None:
        """Replace the queue configurations; units are re-mapped where queues came or went."""
        changed = False
        self._config_cache = None
        for name in list(self.queues):
            if name not in configs:
                gone = self.queues.pop(name)
                for uid in gone.members:
                    self._queue_of.pop(uid, None)
                changed = True
        for name, config in configs.items():
            queue = self.queues.get(name)
            if queue is None:
                self.queues[name] = _Queue(config)
                changed = True
            elif queue.config != config:
                relayout = (
                    queue.config.policy != config.policy
                    or queue.config.priority_threshold != config.priority_threshold
                )
                queue.config = config
                queue.blocked.clear()
                self._release_all(queue)
                if relayout:
                    uids = list(queue.members)
                    queue.classes.clear()
                    queue.members.clear()
                    for uid in uids:
                        self._enter(queue, self.units[uid])
        if changed:
            for unit in list(self.units.values()):
                self._place(unit)

    # -- units ----------------------------------------------------------------------------------

    def upsert(self, unit: UnitInfo) -> None:
        """A unit was added or changed in the store."""
        uid = unit.uid
        before = self.units.get(uid)
        self.units[uid] = unit
        self.updating.discard(uid)
        self._account_demand(before, unit)
        if unit.holds or uid in self._holding:
            # Also when the store skipped states: a unit admitted by a cycle and finished
            # before the loop saw its admission still releases what the cycle charged.
            ctx = self._ctx
            for plugin in self.plugins.reserves:
                plugin.assigned(ctx, unit)
            if unit.holds:
                self._holding.add(uid)
            else:
                self._holding.discard(uid)
        self._place(unit)

    def refresh(self, unit: UnitInfo) -> None:
        """A unit's object changed in nothing the engine reads (see
        :func:`~controller.queueing.units.same_for_engine`): only the object is replaced."""
        self.units[unit.uid] = unit
        self.updating.discard(unit.uid)

    def remove(self, uid: str) -> None:
        """A unit was deleted from the store: its charge and place are released."""
        unit = self.units.pop(uid, None)
        self.updating.discard(uid)
        self.refusals.pop(uid, None)
        if unit is None:
            return
        self._account_demand(unit, None)
        for plugin in self.plugins.reserves:
            plugin.removed(self._ctx, unit)
        self._holding.discard(uid)
        self._leave(uid)
        self.no_queue.discard(uid)
        self._queue_of.pop(uid, None)

    def release(self, unit: UnitInfo) -> None:
        """Give back what ``unit`` holds now (it is being evicted); its echo follows."""
        for plugin in self.plugins.reserves:
            plugin.removed(self._ctx, unit)
        self.updating.add(unit.uid)

    def _account_demand(self, before: UnitInfo | None, after: UnitInfo | None) -> None:
        if (
            before is not None
            and after is not None
            and before.demand == after.demand
            and before.quota == after.quota
        ):
            return
        if before is not None and before.demand:
            add_into(self._demand.setdefault(before.quota, {}), before.demand, -1)
            self.demand_changed = True
        if after is not None and after.demand:
            add_into(self._demand.setdefault(after.quota, {}), after.demand)
            self.demand_changed = True

    def is_candidate(self, unit: UnitInfo) -> bool:
        return (
            unit.active
            and not unit.finished
            and bool(unit.outstanding)
            and unit.uid not in self.updating
            and unit.phase
            in (phases.ENQUEUED, "", phases.SCHED_FAILED, phases.DEQUEUED, phases.RUNNING)
        )

    def _place(self, unit: UnitInfo) -> None:
        uid = unit.uid
        name = self.plugins.mapping.queue_for(unit, self._configs())
        current = self._queue_of.get(uid)
        if name is not None and name == current and self.is_candidate(unit):
            queue = self.queues[name]
            key = queue.members.get(uid)
            if key is not None and key == self._signature(queue, unit):
                cls = queue.classes[key]
                order = self._order(queue, unit)
                if cls.members.get(uid) != order:
                    cls.add(uid, order)
                self._track_assumed(queue, unit)
                return
        self._leave(uid)
        if name is None or name != current:
            self.refusals.pop(uid, None)
        if name is None:
            self._queue_of.pop(uid, None)
            if self.is_candidate(unit):
                self.no_queue.add(uid)
            else:
                self.no_queue.discard(uid)
            return
        self.no_queue.discard(uid)
        self._queue_of[uid] = name
        queue = self.queues[name]
        self._track_assumed(queue, unit)
        if self.is_candidate(unit):
            self._enter(queue, unit)

    def _track_assumed(self, queue: _Queue, unit: UnitInfo) -> None:
        uid = unit.uid
        if unit.holds and not unit.all_running:
            queue.assumed.add(uid)
        elif uid in queue.assumed:
            queue.assumed.discard(uid)
            queue.dirty = True

    def _configs(self) -> dict[str, QueueConfig]:
        configs = self._config_cache
        if configs is None or len(configs) != len(self.queues):
            configs = self._config_cache = {n: q.config for n, q in self.queues.items()}
        return configs

    def _tier(self, queue: _Queue, unit: UnitInfo) -> int:
        if queue.config.policy != "Intelligent":
            return 0
        return 0 if unit.priority >= queue.config.priority_threshold else 1

    def _order(self, queue: _Queue, unit: UnitInfo) -> Order:
        if queue.config.policy == "Intelligent":
            return (
                self._tier(queue, unit),
                -unit.priority,
                unit.preemptible,
                unit.created,
                unit.namespace,
                unit.name,
            )
        return self.plugins.queue_sort.unit_order(unit)

    def _signature(self, queue: _Queue, unit: UnitInfo) -> Hashable:
        filters = self.plugins.filters
        if len(filters) == 1:
            return (self._tier(queue, unit), unit.shape, filters[0].signature(unit))
        return (self._tier(queue, unit), unit.shape, tuple(f.signature(unit) for f in filters))

    def _enter(self, queue: _Queue, unit: UnitInfo) -> None:
        key = self._signature(queue, unit)
        cls = queue.classes.get(key)
        if cls is None:
            cls = queue.classes[key] = _Class(self._tier(queue, unit))
            queue.dirty = True
        cls.add(unit.uid, self._order(queue, unit))
        queue.members[unit.uid] = key
        if queue.config.policy != "Priority" and unit.quota in queue.blocked:
            # Block: a unit of a blocked quota arriving re-opens the quota.
            del queue.blocked[unit.quota]
            queue.dirty = True
        if cls.failed is None:
            queue.dirty = True

    def _leave(self, uid: str) -> None:
        name = self._queue_of.get(uid)
        if name is None:
            return
        queue = self.queues.get(name)
        if queue is None:
            return
        if uid in queue.assumed:
            queue.assumed.discard(uid)
            queue.dirty = True
        key = queue.members.pop(uid, None)
        if key is None:
            return
        cls = queue.classes[key]
        cls.discard(uid)
        if not cls.members:
            del queue.classes[key]
        if queue.config.policy != "Priority":
            unit = self.units.get(uid)
            if unit is not None and unit.quota in queue.blocked:
                del queue.blocked[unit.quota]
                queue.dirty = True

    # -- change tracking ------------------------------------------------------------------------

    def _bump(self, key: str) -> None:
        self._bumped.add(key)

    def _release_all(self, queue: _Queue) -> None:
        for cls in queue.classes.values():
            cls.failed = None
        queue.blocked.clear()
        queue.dirty = True

    def _wake(self) -> None:
        """Re-open what waits on a key that changed since the last cycle."""
        keys = self._bumped | self.ledger.take_released()
        self._bumped = set()
        if not keys:
            return
        for key in keys:
            for name in self._waiting.pop(key, ()):
                queue = self.queues.get(name)
                if queue is None:
                    continue
                queue.dirty = True
                for cls in queue.classes.values():
                    failed = cls.failed
                    if failed is not None and key in failed.blockers:
                        cls.failed = None
                for quota, status in list(queue.blocked.items()):
                    if key in status.blockers:
                        del queue.blocked[quota]

    def _wait_on(self, queue: str, status: Status) -> None:
        for key in status.blockers or (_QUOTA_INDEX_KEY,):
            self._waiting.setdefault(key, set()).add(queue)

    def _context(self, now: datetime) -> CycleContext:
        return CycleContext(
            now=now,
            index=self.index,
            ledger=self.ledger,
            runtime=self.runtime,
            paths=self._PathView(self),
            bump=self._bump,
        )

    class _PathView(Mapping[str, tuple[str, ...]]):
        def __init__(self, engine: Engine) -> None:
            self._engine = engine

        def __getitem__(self, quota: str) -> tuple[str, ...]:
            return self._engine.path(quota)

        def __iter__(self) -> Any:
            return iter(self._engine.index.by_name)

        def __len__(self) -> int:
            return len(self._engine.index.by_name)

    # -- the cycle ------------------------------------------------------------------------------

    def cycle(self, now: datetime) -> CycleResult:
        """Admit what fits, queue by queue, in order; evict for reclaim where needed."""
        self._wake()
        ctx = self._ctx = self._context(now)
        result = CycleResult()
        budget = self.attempts_per_cycle
        order = self.plugins.multi_queue_sort.queue_order
        dirty = sorted((q for q in self.queues.values() if q.dirty), key=lambda q: order(q.config))
        for queue in dirty:
            if budget <= 0:
                result.more = True
                break
            budget = self._scan(ctx, queue, budget, result)
            self._wake()
        return result

    def _depth_cutoff(self, queue: _Queue) -> Order | None:
        depth = queue.config.max_depth
        if depth is None or depth < 0 or len(queue.members) <= depth:
            return None
        if depth == 0:
            return ()
        orders = heapq.nsmallest(
            depth, (o for c in queue.classes.values() for o in c.members.values())
        )
        return orders[-1]

    def _scan(self, ctx: CycleContext, queue: _Queue, budget: int, result: CycleResult) -> int:
        queue.dirty = False
        config = queue.config
        policy = config.policy
        if config.wait_for_pods_running and queue.assumed:
            if config.enable_preemption:
                self._queue_preempt(ctx, queue, result)
            return budget
        cutoff = self._depth_cutoff(queue)
        high_pending = policy == "Intelligent" and any(c.tier == 0 for c in queue.classes.values())
        heap: list[tuple[Order, Hashable]] = []
        for key, cls in queue.classes.items():
            if cls.failed is not None:
                continue
            if high_pending and cls.tier == 1:
                continue
            head = cls.head()
            if head is not None:
                heap.append((head[0], key))
        heapq.heapify(heap)
        blocked_now = set(queue.blocked)
        while True:
            if not heap:
                if not high_pending or any(c.tier == 0 for c in queue.classes.values()):
                    break
                # The high tier is all admitted: the low tier opens in the same scan.
                high_pending = False
                for key, cls in queue.classes.items():
                    head = cls.head() if cls.failed is None else None
                    if head is not None:
                        heapq.heappush(heap, (head[0], key))
                if not heap:
                    break
            if budget <= 0:
                queue.dirty = True
                result.more = True
                break
            order, key = heapq.heappop(heap)
            current = queue.classes.get(key)
            if current is None:
                continue
            cls = current
            head = cls.head()
            if head is None:
                continue
            if head[0] != order:
                heapq.heappush(heap, (head[0], key))
                continue
            if cutoff is not None and order > cutoff:
                continue
            unit = self.units[head[1]]
            if policy != "Priority" and unit.quota in blocked_now:
                continue
            budget -= 1
            self._attempts += 1
            sampled = self._attempts % _SAMPLE_EVERY == 0
            started = time.perf_counter() if sampled else 0.0
            filtered = run_filters(self.plugins.filters, ctx, unit, unit.outstanding)
            if sampled:
                result.filter_samples.append((config.name, time.perf_counter() - started))
            if not filtered.status.ok and self._reclaim(ctx, unit, filtered.status, result):
                filtered = run_filters(self.plugins.filters, ctx, unit, unit.outstanding)
            outcome = (config.name, "scheduled" if filtered.status.ok else "unschedulable")
            result.attempts[outcome] = result.attempts.get(outcome, 0) + 1
            if not filtered.status.ok:
                self._refuse(queue, cls, unit, filtered.status)
                if policy != "Priority":
                    blocked_now.add(unit.quota)
                    queue.blocked[unit.quota] = filtered.status
                continue
            reserved = self._reserve(ctx, unit, filtered.admissible)
            if not reserved.ok:
                self._refuse(queue, cls, unit, reserved)
                continue
            self.refusals.pop(unit.uid, None)
            result.admitted.append(Admitted(unit, config.name, filtered.admissible))
            self.updating.add(unit.uid)
            self._holding.add(unit.uid)
            self._leave(unit.uid)
            if config.wait_for_pods_running:
                queue.assumed.add(unit.uid)
                break
            next_head = cls.head() if key in queue.classes else None
            if next_head is not None:
                heapq.heappush(heap, (next_head[0], key))
        return budget

    def _refuse(self, queue: _Queue, cls: _Class, unit: UnitInfo, status: Status) -> None:
        cls.failed = status
        self.refusals[unit.uid] = status
        self._wait_on(queue.config.name, status)

    def _reserve(self, ctx: CycleContext, unit: UnitInfo, replicas: Mapping[str, int]) -> Status:
        done: list[Any] = []
        for plugin in self.plugins.reserves:
            status = plugin.reserve(ctx, unit, replicas)
            if not status.ok:
                for earlier in reversed(done):
                    earlier.unreserve(ctx, unit)
                return status
            done.append(plugin)
        return Status()

    def refusal_of(self, uid: str) -> Status | None:
        """Why a waiting unit is not admitted (its class head's refusal), if known."""
        status = self.refusals.get(uid)
        if status is not None:
            return status
        name = self._queue_of.get(uid)
        queue = self.queues.get(name) if name is not None else None
        if queue is None:
            return Status(Code.UNSCHEDULABLE, NO_QUEUE_MESSAGE) if uid in self.no_queue else None
        key = queue.members.get(uid)
        cls = queue.classes.get(key) if key is not None else None
        if cls is not None and cls.failed is not None:
            return cls.failed
        unit = self.units.get(uid)
        if unit is not None and unit.quota in queue.blocked:
            return queue.blocked[unit.quota]
        if queue.config.wait_for_pods_running and queue.assumed:
            return Status(Code.WAIT, WAIT_FOR_PODS_MESSAGE)
        if cls is not None and cls.tier == 1 and any(c.tier == 0 for c in queue.classes.values()):
            return Status(
                Code.WAIT,
                f"waiting for the high-priority tier of queue {queue.config.name} "
                f"(priority >= {queue.config.priority_threshold})",
            )
        return None

    # -- queue preemption (wait-for-pods-running queues) -----------------------------------------

    def _queue_preempt(self, ctx: CycleContext, queue: _Queue, result: CycleResult) -> None:
        """The first waiting unit takes back not-yet-bound replicas of lower-ranked admitted
        units of its queue (queue-spec §8): from the lowest-ranked up, only from units admitted
        longer than the protection window ago, only as many replicas as it needs, one
        preemption at a time per queue."""
        assumed = [self.units[uid] for uid in queue.assumed if uid in self.units]
        if any(
            isinstance(a.reclaim_state, ReclaimState) and a.reclaim_state.replicas > 0
            for unit in assumed
            for a in unit.obj.status.admissions
        ):
            return
        heads = [head for cls in queue.classes.values() if (head := cls.head()) is not None]
        if not heads:
            return
        order, uid = min(heads)
        preemptor = self.units[uid]
        remaining = {r: v for r, v in preemptor.request_of(preemptor.outstanding).items() if v > 0}
        lower = sorted(
            (u for u in assumed if self._order(queue, u) > order),
            key=lambda u: self._order(queue, u),
            reverse=True,
        )
        chosen: list[tuple[UnitInfo, dict[str, int]]] = []
        for victim in lower:
            since = victim.obj.status.last_allocate_time
            if since is not None and (ctx.now - since).total_seconds() < self.reclaim_min_runtime:
                continue
            per_replica = {p.name: p.per_replica for p in victim.pod_sets}
            take: dict[str, int] = {}
            for admission in victim.obj.status.admissions:
                unbound = admission.replicas - admission.running
                request = per_replica.get(admission.name)
                if unbound <= 0 or request is None or not remaining:
                    continue
                wanted = (
                    max(-(-need // request[r]) for r, need in remaining.items() if request.get(r))
                    if any(request.get(r) for r in remaining)
                    else 0
                )
                count = min(unbound, wanted)
                if count <= 0:
                    continue
                take[admission.name] = count
                for r, amount in request.items():
                    if r in remaining:
                        remaining[r] -= amount * count
                remaining = {r: v for r, v in remaining.items() if v > 0}
            if take:
                chosen.append((victim, take))
            if not remaining:
                break
        if remaining or not chosen:
            return
        result.reclaims.extend(chosen)
        self.refusals[uid] = Status(Code.WAIT, "waiting for queueUnit preempted")

    # -- reclaim --------------------------------------------------------------------------------

    def _wants_min(self, unit: UnitInfo, status: Status) -> bool:
        short = status.shortfall
        if short is None or short.resource == MAX_JOBS:
            return False
        quota = self.index.get(unit.quota)
        if quota is None:
            return False
        floor = quota.spec.min.get(short.resource)
        if floor is None:
            return False
        used: int = self.ledger.used(unit.quota).get(short.resource, 0)
        return used + short.need <= int(floor)

    def _victims(self, unit: UnitInfo, now: datetime) -> list[UnitInfo]:
        found: list[UnitInfo] = []
        for uid in list(self.ledger.holders()):
            victim = self.units.get(uid)
            if victim is None or victim.quota == unit.quota or not victim.preemptible:
                continue
            if not victim.holds or uid in self.updating:
                continue
            runtime = self.runtime.get(victim.quota, {})
            used = self.ledger.used(victim.quota)
            if not any(used.get(r, 0) > cap for r, cap in runtime.items() if r != MAX_JOBS):
                continue
            since = victim.obj.status.last_allocate_time
            if since is not None and (now - since).total_seconds() < self.reclaim_min_runtime:
                continue
            found.append(victim)
        found.sort(
            key=lambda v: (
                v.priority,
                -self._overuse(v.quota),
                -(
                    v.obj.status.last_allocate_time or datetime.min.replace(tzinfo=now.tzinfo)
                ).timestamp(),
                v.key,
            )
        )
        return found

    def _overuse(self, quota: str) -> float:
        """How far ``quota`` is above its runtime quota (the largest share over, per resource):
        the quota furthest over gives back first."""
        used = self.ledger.used(quota)
        worst = 0.0
        for resource, cap in self.runtime.get(quota, {}).items():
            over = used.get(resource, 0) - cap
            if over > 0:
                worst = max(worst, over / max(cap, 1))
        return worst

    def _reclaim(
        self, ctx: CycleContext, unit: UnitInfo, status: Status, result: CycleResult
    ) -> bool:
        if not self._wants_min(unit, status):
            return False
        chosen: list[UnitInfo] = []
        for victim in self._victims(unit, ctx.now):
            for plugin in self.plugins.reserves:
                plugin.removed(ctx, victim)
            chosen.append(victim)
            if run_filters(self.plugins.filters, ctx, unit, unit.outstanding).status.ok:
                break
        else:
            for victim in chosen:
                for plugin in self.plugins.reserves:
                    plugin.assigned(ctx, victim)
            return False
        for victim in chosen:
            self.updating.add(victim.uid)
            result.evicted.append(
                Eviction(
                    victim,
                    phases.EVICTED_PREEMPTED,
                    f"preempted to return quota {unit.quota}'s guaranteed min to "
                    f"{unit.namespace}/{unit.name}",
                )
            )
        return True

    # -- visibility -----------------------------------------------------------------------------

    def ordered(self, queue_name: str) -> list[UnitInfo]:
        """The units waiting in a queue, in its order."""
        queue = self.queues.get(queue_name)
        if queue is None:
            return []
        entries = sorted(
            (order, uid) for cls in queue.classes.values() for uid, order in cls.members.items()
        )
        return [self.units[uid] for _, uid in entries]

    def queue_of(self, uid: str) -> str | None:
        return self._queue_of.get(uid)

    def pending_count(self, queue_name: str) -> int:
        queue = self.queues.get(queue_name)
        return len(queue.members) if queue is not None else 0

    def holding(self) -> Iterable[UnitInfo]:
        return (u for u in self.units.values() if u.holds)

    def quotas_in_use(self) -> Sequence[str]:
        return sorted({u.quota for u in self.units.values()})
