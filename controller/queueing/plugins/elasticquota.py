"""``ElasticQuota``: queue per quota, the quota-tree Filter, and charging (queue-spec §7).

**Mapping.** Every ElasticQuota object gets a Queue of the same name in the queue namespace
(``koord-queue`` by default): priority 1000, policy from the quota's label
``koord-queue/queue-policy`` (either prefix; anything but ``Priority``, ``Block`` or
``Intelligent`` means ``Priority``), label ``create-by-kubequeue: "true"``, the quota's parent
label and its ``quota-koord-queue-enable`` annotation copied, and the queue tuning annotations
the v1.8 manual sets on the ElasticQuota (``priority-threshold``, ``max-depth``,
``wait-for-pods-running``, either prefix) carried over. ``koordinator-default-quota``
gets one too, so a job without a quota label is still admitted. A unit waits in its quota's
queue, or in the queue its ``koord-queue/queue-name`` annotation names when that queue exists
and accepts the quota (the queue is the quota's own, or its ``available-quota`` annotation
lists the quota or ``*``).

**Filter.** The outstanding request (the replicas still to admit, times each pod set's
per-replica request) must hold at the unit's quota and at every ancestor below the root, per
resource the quota's ``max`` names: ``used + request <= max`` and, with ``checkRuntime``,
``used + request <= runtime`` (the water-filled runtime quota, for resources the cluster
reports). A non-preemptible unit must also hold ``nonPreemptibleUsed + request <= min``
wherever a min is set. ``kube-queue/max-jobs`` in a ``max`` caps the number of holding units.
A missing quota refuses with ``quota not exist``; a quota with an empty ``max`` refuses every
request. The refusal keeps Koord-Queue's wording (``limited quotaName:<q>, limited
resKey:<r>``) and adds what is missing.

**Partial admission.** When the whole outstanding request does not fit and the unit has one
pod set left to admit whose ``minCount`` allows fewer replicas, the largest count that fits is
admitted (at least ``minCount`` for the first admission, at least one afterwards).

**Reserve** charges the admitted replicas to the unit's charge in the ledger at once, so later
units of the same cycle see them; ``assigned``/``removed`` keep the ledger equal to what the
store's units hold.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Final

import msgspec

from apis import constants as k
from apis.meta import ObjectMeta
from apis.queueing import Queue, QueueSpec
from apis.quota import ElasticQuota as ElasticQuotaObject
from apis.resources import ResourceList
from controller.queueing.framework import (
    SUCCESS,
    Code,
    CycleContext,
    FilterResult,
    QueueConfig,
    Shortfall,
    Status,
)
from controller.queueing.units import MAX_JOBS, UnitInfo, add_into

__all__ = ["POLICIES", "ElasticQuota", "ElasticQuotaArgs", "format_amount", "queue_policy"]

NAME = "ElasticQuota"
POLICIES = ("Priority", "Block", "Intelligent")
#: Priority of the queues created for quotas.
AUTO_QUEUE_PRIORITY = 1000


#: Queue tuning annotations an ElasticQuota passes on to its Queue (both spellings).
_TUNING: Final = frozenset(
    key
    for current in (
        k.ANNOTATION_QUEUE_PRIORITY_THRESHOLD,
        k.ANNOTATION_QUEUE_MAX_DEPTH,
        k.ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING,
    )
    for key in (current, k.QUEUE_LEGACY_KEYS[current])
)


class ElasticQuotaArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    #: Namespace of the Queues created for quotas.
    queue_namespace: str = k.QUEUE_NAMESPACE
    #: Check the runtime quota (water-filled fair share) as well as max.
    check_runtime: bool = True
    #: Policy of a created queue whose quota names none (or an unknown one).
    default_policy: str = "Priority"

    def __post_init__(self) -> None:
        if not self.queue_namespace:
            raise ValueError(f"{NAME}Args.queueNamespace: '' must not be empty")
        if self.default_policy not in POLICIES:
            raise ValueError(
                f"{NAME}Args.defaultPolicy: {self.default_policy!r} is not one of "
                f"{', '.join(POLICIES)}"
            )


def queue_policy(value: str, default: str = "Priority") -> str:
    return value if value in POLICIES else default


def format_amount(resource: str, amount: int) -> str:
    """One amount in wire form (``6``, ``500m``, ``4Gi``)."""
    return ResourceList({resource: amount}).to_wire()[resource]


class ElasticQuota:
    name = NAME

    def __init__(self, args: ElasticQuotaArgs) -> None:
        self.args = args

    # -- QueueUnitMapping ---------------------------------------------------------------------

    def queue_for(self, unit: UnitInfo, queues: Mapping[str, QueueConfig]) -> str | None:
        hint = unit.queue_hint
        if hint:
            queue = queues.get(hint)
            if queue is not None and (
                hint == unit.quota
                or "*" in queue.available_quotas
                or unit.quota in queue.available_quotas
            ):
                return hint
        return unit.quota if unit.quota in queues else None

    def desired_queues(self, quotas: Sequence[ElasticQuotaObject]) -> list[Queue]:
        wanted = [self._queue_for_quota(quota) for quota in quotas]
        names = {q.name for q in quotas}
        if k.QUOTA_DEFAULT not in names:
            wanted.append(
                self._queue_for_quota(ElasticQuotaObject(metadata=ObjectMeta(name=k.QUOTA_DEFAULT)))
            )
        return wanted

    def _queue_for_quota(self, quota: ElasticQuotaObject) -> Queue:
        labels = quota.metadata.labels
        policy = labels.get(k.LABEL_QUEUE_POLICY) or labels.get(k.LABEL_QUEUE_POLICY_LEGACY) or ""
        queue_labels = {k.LABEL_QUEUE_CREATED_BY_KUBEQUEUE: "true"}
        parent = labels.get(k.LABEL_QUOTA_PARENT)
        if parent:
            queue_labels[k.LABEL_QUOTA_PARENT] = parent
        annotations = {}
        enable = quota.metadata.annotations.get(k.ANNOTATION_QUOTA_KOORD_QUEUE_ENABLE)
        if enable is not None:
            annotations[k.ANNOTATION_QUOTA_KOORD_QUEUE_ENABLE] = enable
        annotations.update(
            (key, value) for key, value in quota.metadata.annotations.items() if key in _TUNING
        )
        return Queue(
            metadata=ObjectMeta(
                name=quota.name,
                namespace=self.args.queue_namespace,
                labels=queue_labels,
                annotations=annotations,
            ),
            spec=QueueSpec(
                queue_policy=queue_policy(policy, self.args.default_policy),
                priority=AUTO_QUEUE_PRIORITY,
            ),
        )

    # -- Filter -------------------------------------------------------------------------------

    def signature(self, unit: UnitInfo) -> Hashable:
        return (unit.quota, unit.preemptible, unit.holds)

    def _refusal(self, ctx: CycleContext, unit: UnitInfo, amounts: Mapping[str, int]) -> Status:
        """SUCCESS when ``amounts`` fit at every level, else the first shortfall."""
        index = ctx.index
        quota = unit.quota
        if quota not in index:
            return Status(
                Code.UNSCHEDULABLE,
                f"quota not exist, quotaName:{quota}",
                plugin=NAME,
                blockers=("quota-index",),
            )
        ledger = ctx.ledger
        for level in ctx.path(quota):
            obj = index.by_name.get(level)
            if obj is None:
                return Status(
                    Code.UNSCHEDULABLE,
                    f"quota not exist, quotaName:{level}",
                    plugin=NAME,
                    blockers=("quota-index",),
                )
            limit = obj.spec.max
            used = ledger.used(level)
            if not limit and any(name != MAX_JOBS and v > 0 for name, v in amounts.items()):
                return Status(
                    Code.UNSCHEDULABLE,
                    f"limited quotaName:{level}, quota has no max",
                    plugin=NAME,
                    blockers=("quota-index",),
                )
            runtime = ctx.runtime.get(level) if self.args.check_runtime else None
            for resource, need in amounts.items():
                if need <= 0:
                    continue
                cap = limit.get(resource)
                if cap is None:
                    continue
                have = used.get(resource, 0)
                if have + need > cap:
                    return _short(quota, level, resource, need, cap - have, cap, "max")
                if runtime is not None:
                    share = runtime.get(resource)
                    if share is not None and have + need > share:
                        return _short(quota, level, resource, need, share - have, share, "runtime")
            if not unit.preemptible:
                guaranteed = obj.spec.min
                pinned = ledger.non_preemptible_used(level)
                for resource, need in amounts.items():
                    floor = guaranteed.get(resource)
                    if floor is None or need <= 0 or resource == MAX_JOBS:
                        continue
                    have = pinned.get(resource, 0)
                    if have + need > floor:
                        return _short(quota, level, resource, need, floor - have, floor, "min")
        return SUCCESS

    def _amounts(self, unit: UnitInfo, replicas: Mapping[str, int]) -> dict[str, int]:
        amounts = unit.request_of(replicas)
        if not unit.holds:
            amounts[MAX_JOBS] = 1
        return amounts

    def filter(self, ctx: CycleContext, unit: UnitInfo, request: Mapping[str, int]) -> FilterResult:
        status = self._refusal(ctx, unit, self._amounts(unit, request))
        if status.ok:
            return FilterResult(SUCCESS, request)
        partial = self._partial(ctx, unit, request)
        if partial is not None:
            return FilterResult(SUCCESS, partial)
        return FilterResult(status)

    def _partial(
        self, ctx: CycleContext, unit: UnitInfo, request: Mapping[str, int]
    ) -> dict[str, int] | None:
        if len(request) != 1:
            return None
        ((pod_set_name, wanted),) = request.items()
        pod_set = next((p for p in unit.pod_sets if p.name == pod_set_name), None)
        if pod_set is None:
            return None
        admitted = unit.admitted.get(pod_set_name, 0)
        lowest = max(1, pod_set.min_count - admitted)
        if lowest >= wanted:
            return None
        low, high = lowest, wanted - 1
        if not self._refusal(ctx, unit, self._amounts(unit, {pod_set_name: low})).ok:
            return None
        while low < high:
            middle = (low + high + 1) // 2
            if self._refusal(ctx, unit, self._amounts(unit, {pod_set_name: middle})).ok:
                low = middle
            else:
                high = middle - 1
        return {pod_set_name: low}

    # -- Reserve ------------------------------------------------------------------------------

    def reserve(self, ctx: CycleContext, unit: UnitInfo, replicas: Mapping[str, int]) -> Status:
        held = ctx.ledger.charge_of(unit.uid)
        total: dict[str, int] = dict(held.amounts) if held is not None else dict(unit.charge)
        add_into(total, unit.request_of(replicas))
        total[MAX_JOBS] = 1
        ctx.ledger.charge(unit.uid, unit.quota, total, non_preemptible=not unit.preemptible)
        return SUCCESS

    def unreserve(self, ctx: CycleContext, unit: UnitInfo) -> None:
        self.assigned(ctx, unit)

    def assigned(self, ctx: CycleContext, unit: UnitInfo) -> None:
        if unit.holds and unit.charge:
            ctx.ledger.charge(
                unit.uid, unit.quota, unit.charge, non_preemptible=not unit.preemptible
            )
        else:
            ctx.ledger.release(unit.uid)

    def removed(self, ctx: CycleContext, unit: UnitInfo) -> None:
        ctx.ledger.release(unit.uid)


def _short(
    quota: str, level: str, resource: str, need: int, free: int, limit: int, kind: str
) -> Status:
    free = max(0, free)
    detail = (
        f"{resource} needs {format_amount(resource, need)}, "
        f"{format_amount(resource, free)} free of {kind} {format_amount(resource, limit)}"
    )
    where = f"quota {level}" if level == quota else f"quota {level} (parent of {quota})"
    return Status(
        Code.UNSCHEDULABLE,
        f"limited quotaName:{level}, limited resKey:{resource}; waiting for {where}: {detail}",
        plugin=NAME,
        blockers=(level,),
        shortfall=Shortfall(
            quota=quota,
            level=level,
            resource=resource,
            need=need,
            free=free,
            limit=limit,
            kind=kind,
        ),
    )
