"""The queueing plugin framework: extension points, statuses, and what a cycle can read.

Extension points (queue-spec §5.1), each a Protocol; a plugin implements one or more:

=====================  ===========  =========================================================
point                  cardinality  contract
=====================  ===========  =========================================================
MultiQueueSort         one          ``queue_order(queue)``: queues are visited in this order
QueueSort              one          ``unit_order(unit)``: the order inside a queue
QueueUnitMapping       one          ``queue_for(unit, queues)``: the queue a unit waits in;
                                    ``desired_queues(quotas)``: queues to keep in the store
Filter                 list         ``filter(ctx, unit, request)``: which of the outstanding
                                    replicas may be admitted now; ``signature(unit)``: what of
                                    a unit the filter reads
Reserve                list         ``reserve``/``unreserve`` around one admission;
                                    ``assigned``/``removed`` when the store shows a unit start
                                    or stop holding resources
=====================  ===========  =========================================================

The filter runner (:func:`run_filters`) follows Koord-Queue: each plugin sees the outstanding
replicas per pod set; the admissible count of a pod set is the smallest any plugin allows; the
first refusal stops the chain. A refusal names its ``blockers``: the keys (quota names, tenant
keys) whose change may turn it around, so the engine re-tries it only then.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from apis.queueing import Queue, QueueAdmissionCheck
from apis.quota import ElasticQuota
from controller.quota.check import QuotaIndex

if TYPE_CHECKING:
    from controller.queueing.ledger import QuotaLedger
    from controller.queueing.units import UnitInfo

__all__ = [
    "Code",
    "CycleContext",
    "FilterPlugin",
    "FilterResult",
    "MultiQueueSortPlugin",
    "QueueConfig",
    "QueueSortPlugin",
    "QueueUnitMappingPlugin",
    "ReservePlugin",
    "Shortfall",
    "Status",
    "run_filters",
]


class Code(enum.StrEnum):
    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    WAIT = "Wait"
    SKIP = "Skip"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why a unit does not fit: at ``level`` (the unit's quota or an ancestor), resource
    ``resource`` needs ``need`` but only ``free`` is left under the ``kind`` limit."""

    quota: str
    level: str
    resource: str
    need: int
    free: int
    limit: int
    #: ``max``, ``runtime``, ``min`` (non-preemptible), or a plugin's own word.
    kind: str


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    message: str = ""
    plugin: str = ""
    #: Keys whose change may turn a refusal around (quota names, ``tenant:<key>``).
    blockers: tuple[str, ...] = ()
    shortfall: Shortfall | None = None

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status()


@dataclass(frozen=True, slots=True)
class FilterResult:
    status: Status
    #: Pod set -> replicas that may be admitted (only on success).
    admissible: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """One Queue object as the engine uses it (annotations read once, both prefixes)."""

    name: str
    namespace: str
    #: ``Priority``, ``Block`` or ``Intelligent``.
    policy: str
    priority: int
    wait_for_pods_running: bool = False
    enable_preemption: bool = False
    #: Scan at most this many units (None: all).
    max_depth: int | None = None
    priority_threshold: int = 4
    admission_checks: tuple[QueueAdmissionCheck, ...] = ()
    #: Quotas allowed to enqueue here besides the queue's own (``*``: any).
    available_quotas: frozenset[str] = frozenset()
    #: Created and owned by the controller (label ``create-by-kubequeue``).
    owned: bool = False
    obj: Queue | None = None


class CycleContext:
    """What the plugins read and change during one admission cycle."""

    def __init__(
        self,
        *,
        now: datetime,
        index: QuotaIndex,
        ledger: QuotaLedger,
        runtime: Mapping[str, Mapping[str, int]],
        paths: Mapping[str, tuple[str, ...]],
        bump: Any,
    ) -> None:
        self.now = now
        self.index = index
        self.ledger = ledger
        #: Quota -> the runtime quota enforced per resource (resources no node reports are
        #: absent: only ``max`` limits them).
        self.runtime = runtime
        self._paths = paths
        #: ``bump(key)``: tell the engine that ``key`` changed in a way that may admit more.
        self.bump = bump

    def path(self, quota: str) -> tuple[str, ...]:
        """The quota and its ancestors below the root."""
        return self._paths.get(quota, (quota,))

    def quota(self, name: str) -> ElasticQuota | None:
        return self.index.get(name)


@runtime_checkable
class MultiQueueSortPlugin(Protocol):
    name: str

    def queue_order(self, queue: QueueConfig) -> tuple[Any, ...]: ...


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def unit_order(self, unit: UnitInfo) -> tuple[Any, ...]: ...


@runtime_checkable
class QueueUnitMappingPlugin(Protocol):
    name: str

    def queue_for(self, unit: UnitInfo, queues: Mapping[str, QueueConfig]) -> str | None: ...

    def desired_queues(self, quotas: Sequence[ElasticQuota]) -> list[Queue]: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def signature(self, unit: UnitInfo) -> Hashable: ...

    def filter(
        self, ctx: CycleContext, unit: UnitInfo, request: Mapping[str, int]
    ) -> FilterResult: ...


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, ctx: CycleContext, unit: UnitInfo, replicas: Mapping[str, int]) -> Status: ...

    def unreserve(self, ctx: CycleContext, unit: UnitInfo) -> None: ...

    def assigned(self, ctx: CycleContext, unit: UnitInfo) -> None: ...

    def removed(self, ctx: CycleContext, unit: UnitInfo) -> None: ...


def run_filters(
    filters: Sequence[FilterPlugin],
    ctx: CycleContext,
    unit: UnitInfo,
    request: Mapping[str, int],
) -> FilterResult:
    """Every filter in turn; the admissible count per pod set is the smallest allowed."""
    admissible = dict(request)
    for plugin in filters:
        result = plugin.filter(ctx, unit, admissible)
        if not result.status.ok:
            return result
        for name in list(admissible):
            allowed = result.admissible.get(name, 0)
            if allowed <= 0:
                del admissible[name]
            elif allowed < admissible[name]:
                admissible[name] = allowed
        if not admissible:
            return FilterResult(
                Status(Code.UNSCHEDULABLE, "no replica may be admitted", plugin=plugin.name)
            )
    return FilterResult(SUCCESS, admissible)
