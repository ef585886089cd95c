"""Priority preemption: which pods to evict so that a pending pod fits, and on which node.

Pure functions over frozen inputs; the scheduler's PostFilter turns the result into actions
(evict the victims, set ``status.nominatedNodeName`` on the preemptor, clear the nominations
of lower-priority pods nominated to the chosen node).

The facts follow kube-scheduler's DefaultPreemption:

* A pod with ``preemptionPolicy: Never`` never preempts; neither does a pod whose nominated
  node still holds a terminating pod it could have evicted (it waits for that pod to go).
* On one node, the potential victims are the pods of strictly lower priority that the
  :class:`VictimPolicy` lets go. When the preemptor does not fit even with all of them gone,
  the node is no candidate. Otherwise they are reprieved one by one, most important first
  (higher priority, then earlier start), each kept while the preemptor still fits.
* Among the candidate nodes the best one has, in order: the lowest highest-victim priority,
  the lowest sum of victim priorities (each offset by 2^31, so more victims weigh more), the
  fewest victims, the latest start among its highest-priority victims; then input order.
* A node where every potential victim could be reprieved is no candidate either: the
  preemptor fits there as it is, so whatever rejected the node is something preemption
  does not model (kube-scheduler reports it as an error).

Beyond the reprieve, when the node's pool of evictable pods at or below the highest victim
priority is small (:data:`EXACT_SEARCH_LIMIT`), an exact search looks for a smaller victim set
of no higher priority (the reprieve keeps the most important pods first, which can cost more
victims than needed). The highest victim priority is already the lowest possible after the
reprieve, so the search never trades a lower-priority victim for a higher one.

Fit is resource fit (Kubernetes ``NodeResourcesFit``: every resource the preemptor requests,
plus one pod slot when the node reports ``pods``) and, optionally, a :class:`QuotaBudget` (the
ElasticQuota rule: the quota must hold ``used - freed + request``) and an ``extra_fit`` check
for everything else a filter plugin may need (devices, NUMA). PodDisruptionBudgets are out of
scope: no victim counts as violating one.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from apis.core import Pod, pod_requests
from apis.qos import scheduling_priority
from apis.resources import ResourceList

__all__ = [
    "DEFAULT_POLICY",
    "EXACT_SEARCH_LIMIT",
    "Candidate",
    "ExtraFit",
    "NodeState",
    "Preemption",
    "QuotaBudget",
    "RequestsOf",
    "VictimPolicy",
    "eligible_to_preempt",
    "importance_key",
    "pick_candidate",
    "pod_priority",
    "preempt",
    "select_victims",
]

#: Added to every victim priority in the sum (kube-scheduler's ``MaxInt32 + 1``).
_PRIORITY_OFFSET: Final = 2**31
#: Largest pool of evictable pods the exact victim search looks at.
EXACT_SEARCH_LIMIT: Final = 12
_NOT_HELPFUL: Final = "Preemption is not helpful for scheduling"
_NO_RESOURCES: Final = ResourceList()
_POD_SLOT: Final = "pods"


def pod_priority(pod: Pod) -> int:
    """The pod's scheduling priority (:func:`apis.qos.scheduling_priority`), the one the
    scheduling queue orders by."""
    return scheduling_priority(pod)


def _start(pod: Pod) -> float:
    """Start time as a timestamp; a pod that has not started counts as starting now (latest)."""
    started = pod.status.start_time
    return started.timestamp() if started is not None else math.inf


def importance_key(pod: Pod) -> tuple[int, float]:
    """Sort key putting the most important pod first: higher priority, then earlier start."""
    return (-pod_priority(pod), _start(pod))


def _same_pod(a: Pod, b: Pod) -> bool:
    if a.metadata.uid and b.metadata.uid:
        return a.metadata.uid == b.metadata.uid
    return (a.namespace, a.name) == (b.namespace, b.name)


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as preemption sees it."""

    name: str
    allocatable: ResourceList
    #: Pods holding resources on the node (assigned, not terminated).
    pods: tuple[Pod, ...] = ()
    #: Pending pods nominated to this node; those of the preemptor's priority or higher
    #: count as placed (kube-scheduler's "filter with nominated pods").
    nominated: tuple[Pod, ...] = ()
    #: Further amounts held on the node that preemption cannot free (reservations...).
    reserved: ResourceList = _NO_RESOURCES


@dataclass(frozen=True, slots=True)
class QuotaBudget:
    """The preemptor's quota: after preemption ``used - freed + request`` must fit ``limit``.

    Compared over the names of ``limit`` that the preemptor requests (a name missing from the
    limit is unconstrained). Every victim the policy allows is charged to this quota, so its
    request is freed from ``used`` when it goes.
    """

    name: str
    used: ResourceList
    limit: ResourceList


def _any_pod(_: Pod) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class VictimPolicy:
    """Which lower-priority pods may be evicted, and under what budget."""

    #: Whether a pod of lower priority than the preemptor may be a victim.
    may_evict: Callable[[Pod], bool] = _any_pod
    budget: QuotaBudget | None = None
    #: Reason of a node without any potential victim (``{node}``, ``{pod}`` are filled in).
    no_victims: str = "No preemption victims found for incoming pod"
    #: Put in front of every message of the result (ElasticQuota: ``"preemption: "``).
    message_prefix: str = ""


DEFAULT_POLICY: Final = VictimPolicy()

#: A pod's effective request; the scheduler passes its cached figures (default: computed).
RequestsOf = Callable[[Pod], ResourceList]

#: ``extra_fit(preemptor, node, kept_pods)``: "" when the preemptor fits with only
#: ``kept_pods`` left on the node, else the reason it does not.
ExtraFit = Callable[[Pod, NodeState, tuple[Pod, ...]], str]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` are gone."""

    node: str
    #: Most important first.
    victims: tuple[Pod, ...]

    @property
    def highest_priority(self) -> int | None:
        return pod_priority(self.victims[0]) if self.victims else None

    @property
    def priority_sum(self) -> int:
        return sum(pod_priority(p) + _PRIORITY_OFFSET for p in self.victims)

    def rank_key(self) -> tuple[int, int, int, float]:
        """Smaller is better (see the module docstring)."""
        if not self.victims:
            return (-(2**63), 0, 0, 0.0)
        top = pod_priority(self.victims[0])
        earliest = min(_start(p) for p in self.victims if pod_priority(p) == top)
        return (top, self.priority_sum, len(self.victims), -earliest)


@dataclass(frozen=True, slots=True)
class Preemption:
    """The outcome of one preemption attempt."""

    #: Node to nominate the preemptor to; "" when preemption cannot help.
    nominated_node: str = ""
    victims: tuple[Pod, ...] = ()
    #: Lower-priority pods nominated to the chosen node: their nomination is cleared.
    clear_nominations: tuple[Pod, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    #: Why each node that is no candidate is not one.
    reasons: Mapping[str, str] = field(default_factory=dict)
    #: Unschedulable message when there is no candidate ("" on success).
    message: str = ""

    @property
    def succeeded(self) -> bool:
        return bool(self.nominated_node)


# --- eligibility ---------------------------------------------------------------------------------


def eligible_to_preempt(
    preemptor: Pod,
    nominated: NodeState | None,
    *,
    policy: VictimPolicy = DEFAULT_POLICY,
) -> str:
    """ "" when the preemptor may preempt, else why not.

    ``nominated`` is the node the preemptor is already nominated to (None when it has none,
    when that node is gone, or when preemption cannot help there).
    """
    if preemptor.spec.preemption_policy == "Never":
        return "not eligible due to preemptionPolicy=Never."
    if nominated is not None:
        priority = pod_priority(preemptor)
        for pod in nominated.pods:
            if (
                pod.metadata.deletion_timestamp is not None
                and pod_priority(pod) < priority
                and policy.may_evict(pod)
            ):
                return "not eligible due to a terminating pod on the nominated node."
    return ""


# --- victims on one node -------------------------------------------------------------------------


class _Fit:
    """Running resource totals of one node over the names the preemptor requests."""

    __slots__ = ("allocatable", "budget_limit", "budget_names", "budget_used", "names", "need")

    def __init__(
        self, preemptor_request: ResourceList, node: NodeState, budget: QuotaBudget | None
    ) -> None:
        need = {name: amount for name, amount in preemptor_request.items() if amount > 0}
        if _POD_SLOT in node.allocatable:
            need[_POD_SLOT] = 1
        self.names = tuple(need)
        self.need = tuple(need.values())
        self.allocatable = tuple(node.allocatable.get(name, 0) for name in self.names)
        if budget is None:
            self.budget_names: tuple[str, ...] = ()
            self.budget_limit: tuple[int, ...] = ()
            self.budget_used: tuple[int, ...] = ()
        else:
            self.budget_names = tuple(n for n in budget.limit if n in preemptor_request)
            self.budget_limit = tuple(budget.limit[n] for n in self.budget_names)
            self.budget_used = tuple(
                budget.used.get(n, 0) + preemptor_request[n] for n in self.budget_names
            )

    def node_vector(self, amounts: ResourceList, pods: int) -> list[int]:
        return [pods if n == _POD_SLOT else amounts.get(n, 0) for n in self.names]

    def quota_vector(self, amounts: ResourceList) -> list[int]:
        return [amounts.get(n, 0) for n in self.budget_names]

    def node_fits(self, used: Sequence[int]) -> bool:
        return all(u + n <= a for u, n, a in zip(used, self.need, self.allocatable, strict=True))

    def node_shortfall(self, used: Sequence[int]) -> str:
        reasons = []
        for name, u, n, a in zip(self.names, used, self.need, self.allocatable, strict=True):
            if u + n > a:
                reasons.append("Too many pods" if name == _POD_SLOT else f"Insufficient {name}")
        return ", ".join(reasons)

    def quota_exceeded(self, freed: Sequence[int]) -> tuple[str, ...]:
        return tuple(
            name
            for name, u, f, cap in zip(
                self.budget_names, self.budget_used, freed, self.budget_limit, strict=True
            )
            if u - f > cap
        )


def _add(total: list[int], amounts: Sequence[int], sign: int = 1) -> None:
    for i, amount in enumerate(amounts):
        total[i] += sign * amount


def select_victims(
    preemptor: Pod,
    node: NodeState,
    *,
    policy: VictimPolicy = DEFAULT_POLICY,
    extra_fit: ExtraFit | None = None,
    requests_of: RequestsOf = pod_requests,
) -> Candidate | str:
    """The victims on ``node`` (a :class:`Candidate`), or why the node is no candidate."""
    request = requests_of(preemptor)
    priority = pod_priority(preemptor)
    potential = [p for p in node.pods if pod_priority(p) < priority and policy.may_evict(p)]
    if not potential:
        return policy.no_victims.format(node=node.name, pod=preemptor.name)
    fit = _Fit(request, node, policy.budget)
    is_potential = {id(p) for p in potential}
    kept = [p for p in node.pods if id(p) not in is_potential]
    placed_nominated = [
        p for p in node.nominated if pod_priority(p) >= priority and not _same_pod(p, preemptor)
    ]
    used = fit.node_vector(node.reserved, 0)
    for pod in (*kept, *placed_nominated):
        _add(used, fit.node_vector(requests_of(pod), 1))
    requests = {id(p): requests_of(p) for p in potential}
    node_vec = {id(p): fit.node_vector(requests[id(p)], 1) for p in potential}
    quota_vec = {id(p): fit.quota_vector(requests[id(p)]) for p in potential}
    freed = [0] * len(fit.budget_names)
    for pod in potential:
        _add(freed, quota_vec[id(pod)])

    # Every potential victim gone: does the preemptor fit at all?
    shortfall = fit.node_shortfall(used)
    if shortfall:
        return shortfall
    exceeded = fit.quota_exceeded(freed)
    if exceeded and policy.budget is not None:
        return (
            f"Insufficient quotas, quotaName: {policy.budget.name}, "
            f"exceedDimensions: [{' '.join(exceeded)}]"
        )
    if extra_fit is not None:
        reason = extra_fit(preemptor, node, tuple(kept))
        if reason:
            return reason

    # Reprieve, most important first.
    potential.sort(key=importance_key)
    victims: list[Pod] = []
    for pod in potential:
        _add(used, node_vec[id(pod)])
        _add(freed, quota_vec[id(pod)], -1)
        keep = fit.node_fits(used) and not fit.quota_exceeded(freed)
        if keep and extra_fit is not None:
            keep = not extra_fit(preemptor, node, (*kept, pod))
        if keep:
            kept.append(pod)
        else:
            _add(used, node_vec[id(pod)], -1)
            _add(freed, quota_vec[id(pod)])
            victims.append(pod)
    if not victims:
        return f'expected at least one victim pod on node "{node.name}"'
    if len(victims) > 1:
        used_all = list(used)
        for pod in victims:
            _add(used_all, node_vec[id(pod)])
        victims = _fewer_victims(
            preemptor, node, fit, used_all, potential, victims, extra_fit, node_vec, quota_vec
        )
    victims.sort(key=importance_key)
    return Candidate(node=node.name, victims=tuple(victims))


def _fewer_victims(
    preemptor: Pod,
    node: NodeState,
    fit: _Fit,
    used_all: Sequence[int],
    potential: Sequence[Pod],
    victims: list[Pod],
    extra_fit: ExtraFit | None,
    node_vec: Mapping[int, Sequence[int]],
    quota_vec: Mapping[int, Sequence[int]],
) -> list[Pod]:
    """A smaller victim set of no higher top priority, when the pool is small enough.

    ``used_all`` is the node's usage with every pod in place; the pool is the potential
    victims at or below the highest priority among ``victims`` (those above it were all
    reprieved, so they stay).
    """
    top = pod_priority(max(victims, key=pod_priority))
    # Least important first: among equal sets the less important pods go.
    pool = sorted(
        (p for p in potential if pod_priority(p) <= top), key=importance_key, reverse=True
    )
    if len(pool) > EXACT_SEARCH_LIMIT:
        return victims
    for size in range(1, len(victims)):
        best: tuple[tuple[int, int], tuple[Pod, ...]] | None = None
        for chosen in itertools.combinations(pool, size):
            used = list(used_all)
            freed = [0] * len(fit.budget_names)
            for pod in chosen:
                _add(used, node_vec[id(pod)], -1)
                _add(freed, quota_vec[id(pod)])
            if not fit.node_fits(used) or fit.quota_exceeded(freed):
                continue
            if extra_fit is not None:
                gone = {id(p) for p in chosen}
                left = tuple(p for p in node.pods if id(p) not in gone)
                if extra_fit(preemptor, node, left):
                    continue
            key = (max(map(pod_priority, chosen)), sum(map(pod_priority, chosen)))
            if best is None or key < best[0]:
                best = (key, chosen)
        if best is not None:
            return list(best[1])
    return victims


# --- choosing the node ---------------------------------------------------------------------------


def pick_candidate(candidates: Iterable[Candidate]) -> Candidate | None:
    """The best candidate (see the module docstring); the first of equals."""
    best: Candidate | None = None
    best_key: tuple[int, int, int, float] | None = None
    for candidate in candidates:
        key = candidate.rank_key()
        if best_key is None or key < best_key:
            best, best_key = candidate, key
    return best


def _summary(total: int, reasons: Iterable[str]) -> str:
    counts = Counter(reasons)
    parts = sorted(f"{count} {reason}" for reason, count in counts.items())
    text = f"0/{total} nodes are available"
    return f"{text}: {', '.join(parts)}." if parts else f"{text}."


def preempt(
    preemptor: Pod,
    nodes: Sequence[NodeState],
    *,
    policy: VictimPolicy = DEFAULT_POLICY,
    extra_fit: ExtraFit | None = None,
    unresolvable: Sequence[str] = (),
    requests_of: RequestsOf = pod_requests,
) -> Preemption:
    """One preemption attempt for ``preemptor`` over ``nodes``.

    ``nodes`` are the nodes where preemption might help; ``unresolvable`` names the nodes the
    filters rejected for reasons no eviction can change (they only count in the message).
    """
    prefix = policy.message_prefix
    nominated_name = preemptor.status.nominated_node_name
    nominated = next((n for n in nodes if n.name == nominated_name), None)
    why_not = eligible_to_preempt(preemptor, nominated, policy=policy)
    if why_not:
        return Preemption(message=prefix + why_not)
    candidates: list[Candidate] = []
    reasons: dict[str, str] = {}
    for node in nodes:
        outcome = select_victims(
            preemptor, node, policy=policy, extra_fit=extra_fit, requests_of=requests_of
        )
        if isinstance(outcome, Candidate):
            candidates.append(outcome)
        else:
            reasons[node.name] = outcome
    best = pick_candidate(candidates)
    if best is None:
        all_reasons = [*reasons.values(), *([_NOT_HELPFUL] * len(unresolvable))]
        message = _summary(len(nodes) + len(unresolvable), all_reasons)
        return Preemption(reasons=reasons, message=prefix + message)
    chosen = next(n for n in nodes if n.name == best.node)
    priority = pod_priority(preemptor)
    clear = tuple(
        p for p in chosen.nominated if pod_priority(p) < priority and not _same_pod(p, preemptor)
    )
    return Preemption(
        nominated_node=best.node,
        victims=best.victims,
        clear_nominations=clear,
        candidates=tuple(candidates),
        reasons=reasons,
    )
