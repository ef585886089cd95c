"""CustomPriority: move pods from expensive nodes to cheaper ones (controller-spec §6.3).

``evictionOrder`` names node tiers, most expensive first, each by a node selector. Every node
(after the plugin's own ``nodeSelector``) belongs to the **first** tier whose selector matches
it; nodes matching no tier take no part. With at least two non-empty tiers, each tier in turn is
the source and the union of all later tiers the targets. A source node's candidates are its pods
that pass the evictor's filter, the namespaces and the pod selectors, sorted by summed container
CPU request, then memory request (ascending), then namespace/name.

``BestEffort`` evicts candidates one at a time, each only when some target has room for it
(with ``nodeFit``), and gives up on a source node after 5 consecutive candidates that fit
nowhere. Unlike upstream, it keeps the capacity it has promised on each target (every resource
the pod requests, plus one pod) for the rest of the call, so it never evicts more pods than the
targets can take. The target a pod is promised to is the first that fits, in tier order and by
node name within a tier: the same first fit ``DrainNode`` uses, so the two modes fill targets
alike. Without ``nodeFit`` BestEffort looks at no target and evicts every candidate, as
upstream does.

``DrainNode`` moves a source node's candidates all together or not at all: each is placed first
fit on the targets' remaining capacity (cpu, memory, pods; with ``nodeFit`` the full node fit,
which covers every requested resource); if one does not fit the node is skipped. Otherwise the
node is cordoned (``autoCordon``, unless already unschedulable) and every candidate evicted; on
the first refused eviction draining the node stops and the cordon is taken back. The capacity of
the pods actually evicted stays promised for later source nodes. A source node that was
promised pods earlier in the same call is not drained: cordoning it would strand them.

``keepThreshold``/``rejectThreshold`` are validated and, as upstream, not used (§9 item 11).
``dryRun`` is honoured by the evictor the descheduler hands the plugin (proposals are recorded,
nothing is evicted); the plugin decides the same either way.

Every eviction goes through the :class:`~controller.descheduler.framework.Evictor`; a pod
another plugin already asked to evict in this cycle is not a candidate.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from apis import validation
from apis.core import (
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    Pod,
    PodSpec,
    Toleration,
)
from apis.labels import Selector, SelectorError
from apis.meta import LabelSelector, Model
from controller.descheduler import nodefit
from controller.descheduler.framework import CycleView, Evictor, Status, same_objects
from controller.descheduler.selection import (
    EvictableNamespaces,
    PodSelector,
    namespaces_problem,
)

__all__ = [
    "MAX_CONSECUTIVE_MISSES",
    "CustomPriority",
    "CustomPriorityArgs",
    "EvictableNamespaces",
    "EvictionTier",
    "PodSelector",
    "Tier",
    "assign_tiers",
    "candidate_order",
    "container_requests_sum",
]

log = logging.getLogger(__name__)

KIND: Final = "CustomPriorityArgs"
BEST_EFFORT: Final = "BestEffort"
DRAIN_NODE: Final = "DrainNode"
#: BestEffort stops scanning a source node after this many candidates in a row fit nowhere.
MAX_CONSECUTIVE_MISSES: Final = 5

_CPU: Final = "cpu"
_MEMORY: Final = "memory"
#: Remaining amount of a resource a node does not limit (``pods`` absent from allocatable).
_UNLIMITED: Final = 1 << 62


# --- args ---------------------------------------------------------------------------------------


def _fail(field: str, value: object, rule: str) -> ValueError:
    return ValueError(f"{KIND}.{field}: {value!r} {rule}")


def _selector(field: str, selector: LabelSelector | None) -> Selector:
    try:
        return Selector.from_label_selector(selector)
    except SelectorError as err:
        raise _fail(field, err.text, err.reason) from None


class EvictionTier(Model):
    """One entry of ``evictionOrder``: a tier of nodes, most expensive tiers first."""

    #: A DNS-1123 label, unique within ``evictionOrder``.
    name: str
    #: Which nodes belong to the tier (required; ``{}`` matches every node).
    node_selector: LabelSelector | None = None
    #: Percent, 0..100; accepted and not used (as upstream).
    keep_threshold: int | None = None
    #: Percent, 0..100; accepted and not used (as upstream).
    reject_threshold: int | None = None


class CustomPriorityArgs(Model):
    """Args of the ``CustomPriority`` Balance plugin, validated on construction."""

    api_version: str = ""
    kind: str = ""
    #: The plugin does nothing while paused.
    paused: bool = False
    #: Record proposals instead of evicting (the descheduler's evictor honours it).
    dry_run: bool = False
    evictable_namespaces: EvictableNamespaces | None = None
    #: Nodes the plugin looks at (unset: every node of the profile).
    node_selector: LabelSelector | None = None
    #: Candidates match at least one of these (none: every pod).
    pod_selectors: tuple[PodSelector, ...] = ()
    #: Evict a pod only when some target node fits it.
    node_fit: bool = True
    #: The tiers, most expensive first; at least two, names unique.
    eviction_order: tuple[EvictionTier, ...] = ()
    #: ``BestEffort`` (pod by pod) or ``DrainNode`` (a whole source node or nothing).
    mode: Literal["BestEffort", "DrainNode"] = "BestEffort"
    #: DrainNode: cordon a node before draining it (and uncordon it when the drain fails).
    auto_cordon: bool = False

    def __post_init__(self) -> None:
        if self.kind and self.kind != KIND:
            raise _fail("kind", self.kind, f"must be {KIND}")
        problem = namespaces_problem(self.evictable_namespaces)
        if problem is not None:
            raise _fail("evictableNamespaces", *problem)
        if self.mode not in (BEST_EFFORT, DRAIN_NODE):
            raise _fail("mode", self.mode, f"must be {BEST_EFFORT} or {DRAIN_NODE}")
        _selector("nodeSelector", self.node_selector)
        for i, entry in enumerate(self.pod_selectors):
            _selector(f"podSelectors[{i}].selector", entry.selector)
        if len(self.eviction_order) < 2:
            raise _fail(
                "evictionOrder",
                [tier.name for tier in self.eviction_order],
                "must list at least 2 tiers",
            )
        seen: set[str] = set()
        for i, tier in enumerate(self.eviction_order):
            problems = validation.dns1123_label(tier.name)
            if problems:
                raise _fail(f"evictionOrder[{i}].name", tier.name, "; ".join(problems))
            if tier.name in seen:
                raise _fail(f"evictionOrder[{i}].name", tier.name, "is listed twice")
            seen.add(tier.name)
            if tier.node_selector is None:
                raise _fail(f"evictionOrder[{i}].nodeSelector", None, "is required")
            _selector(f"evictionOrder[{i}].nodeSelector", tier.node_selector)
            for field, percent in (
                ("keepThreshold", tier.keep_threshold),
                ("rejectThreshold", tier.reject_threshold),
            ):
                if percent is not None and not 0 <= percent <= 100:
                    raise _fail(f"evictionOrder[{i}].{field}", percent, "is not in [0, 100]")


# --- tiers and candidates -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tier:
    """A tier of ``evictionOrder`` with its nodes (by name)."""

    name: str
    nodes: tuple[Node, ...]


def assign_tiers(nodes: Sequence[Node], tiers: Sequence[tuple[str, Selector]]) -> tuple[Tier, ...]:
    """The non-empty tiers in configured order; each node in the first tier matching it."""
    members: list[list[Node]] = [[] for _ in tiers]
    for node in nodes:
        labels = node.metadata.labels
        for i, (_, selector) in enumerate(tiers):
            if selector.matches(labels):
                members[i].append(node)
                break
    return tuple(
        Tier(name, tuple(found)) for (name, _), found in zip(tiers, members, strict=True) if found
    )


def container_requests_sum(pod: Pod) -> dict[str, int]:
    """The effective requests of ``pod``'s containers summed (a limit stands in for a missing
    request); init containers, overhead and pod-level resources left out."""
    total: dict[str, int] = {}
    for container in pod.spec.containers:
        resources = container.resources
        requests = resources.requests
        limits = resources.limits
        if limits:
            for name in limits:
                if name not in requests:
                    total[name] = total.get(name, 0) + limits[name]
        for name in requests:
            total[name] = total.get(name, 0) + requests[name]
    return total


def candidate_order(pod: Pod) -> tuple[int, int, str, str]:
    """Sort key of candidates: summed container cpu, then memory request, then namespace/name."""
    meta = pod.metadata
    containers = pod.spec.containers
    if len(containers) == 1 and not containers[0].resources.limits:
        # One container without limits (the common pod): its requests are the sum.
        requests = containers[0].resources.requests
        return requests.get(_CPU, 0), requests.get(_MEMORY, 0), meta.namespace, meta.name
    summed = container_requests_sum(pod)
    return summed.get(_CPU, 0), summed.get(_MEMORY, 0), meta.namespace, meta.name


# --- target capacity ----------------------------------------------------------------------------

#: What node fit checks of a pod apart from its request: nodeSelector, the required node
#: affinity and the tolerations.
_Constraints: TypeAlias = tuple[
    tuple[tuple[str, str], ...], NodeSelector | None, tuple[Toleration, ...]
]


def _constraints(pod: Pod) -> _Constraints:
    spec = pod.spec
    affinity = spec.affinity
    required = (
        affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if affinity is not None and affinity.node_affinity is not None
        else None
    )
    return tuple(sorted(spec.node_selector.items())), required, spec.tolerations


#: A first fit's memo key: a need (its items) and constraints.
_FitKey: TypeAlias = tuple[tuple[tuple[str, int], ...], _Constraints]
#: Nothing held on a target (shared: never modified).
_NOTHING: Final[Mapping[str, int]] = {}


def _requestless_pod(constraints: _Constraints) -> Pod:
    """A pod with these constraints and no request (node fit of everything but capacity)."""
    selector, required, tolerations = constraints
    affinity = (
        Affinity(
            node_affinity=NodeAffinity(required_during_scheduling_ignored_during_execution=required)
        )
        if required is not None
        else None
    )
    return Pod(
        spec=PodSpec(node_selector=dict(selector), affinity=affinity, tolerations=tolerations)
    )


class _Ledger:
    """Per call: each pod's need, each node's load (requests of the pods on it plus what the
    call promised to it) and the promises alone."""

    def __init__(self, view: CycleView) -> None:
        self._view = view
        self._needs: dict[int, dict[str, int]] = {}
        self._loads: dict[str, dict[str, int]] = {}
        self.promised: dict[str, dict[str, int]] = {}

    def need(self, pod: Pod) -> dict[str, int]:
        """``pod``'s effective request plus one ``pods`` (cached for the call)."""
        key = id(pod)
        found = self._needs.get(key)
        if found is None:
            found = self._needs[key] = {**self._view.request_of(pod), nodefit.PODS: 1}
        return found

    def load(self, node: str) -> dict[str, int]:
        """The needs of the pods on ``node`` summed, plus what the call promised to it."""
        found = self._loads.get(node)
        if found is None:
            found = dict(self._view.requested_on(node))
            pods = len(self._view.pods_on(node))
            if pods:
                found[nodefit.PODS] = pods  # one each, whatever a pod's own request says
            else:
                del found[nodefit.PODS]
            self._loads[node] = found
        return found

    def promise(self, node: str, need: Mapping[str, int]) -> None:
        load = self.load(node)
        booked = self.promised.setdefault(node, {})
        for name, amount in need.items():
            load[name] = load.get(name, 0) + amount
            booked[name] = booked.get(name, 0) + amount


class _Targets:
    """The target nodes of one source tier, in order, with a first-fit search.

    A max-tree over the targets' remaining cpu, memory and pods prunes the search to nodes that
    can hold the pod's cpu and memory; each such node, leftmost first, is then checked in full.
    With ``nodeFit`` that check is :func:`nodefit.fits` against the node's load (its pods and
    the promises), split in two: the pod's constraints (selector, affinity, taints,
    schedulability) are checked once per node and kind of pod, its request against the load
    every time. Without ``nodeFit`` only the remaining cpu, memory and pods are checked.
    Answers are remembered by need and constraints. Holding or promising only takes room,
    so a target before the one found for a need still has no room for it, and a need that
    fitted nowhere still fits nowhere: the next like pod checks the target found last and,
    when it is full now, searches only past it. Giving held capacity back forgets every
    answer.

    A drain first *holds* capacity for its pods: held capacity counts in the full check but
    leaves the tree alone (the tree then over-states what remains, which only prunes less), so
    giving it back is free; what is evicted is promised for good. A promise, too, reaches the
    tree only when a search finds the target without room for a pod (a promise that gives
    room back, with a negative amount, at once).

    A node's load is summed only when a search first reaches it: until then its leaves hold
    no bound (infinity), which, like held capacity, only prunes less. First fit fills the
    targets from the front, so most targets of a large tier are never summed.
    """

    def __init__(self, nodes: Sequence[Node], ledger: _Ledger, *, node_fit: bool) -> None:
        self.nodes = tuple(nodes)
        self._ledger = ledger
        self._node_fit = node_fit
        self._static: dict[tuple[_Constraints, int], bool] = {}
        #: The first fit last found for a need and constraints (no target before it has
        #: room for them while nothing is given back).
        self._memo: dict[_FitKey, int | None] = {}
        #: Each target's allocatable cpu, memory and pods, once a search reached it.
        self._caps: list[tuple[int, int, int] | None] = [None] * len(self.nodes)
        #: The ledger's load of each node, once a search reached it.
        self._loads: list[dict[str, int] | None] = [None] * len(self.nodes)
        self._held: dict[int, dict[str, int]] = {}
        size = 1
        while size < len(self.nodes):
            size *= 2
        self._size = size
        # Max-trees of the remaining cpu, memory and pods; leaves at [size, 2 * size), those of
        # nodes not summed yet at infinity.
        count = len(self.nodes)
        tree: list[float] = [-_UNLIMITED] * (2 * size)
        tree[size : size + count] = [math.inf] * count
        for v in range(size - 1, 0, -1):
            tree[v] = max(tree[2 * v], tree[2 * v + 1])
        self._trees: tuple[list[float], ...] = (tree, list(tree), list(tree))

    def _load(self, i: int) -> dict[str, int]:
        """Target ``i``'s load (summed on first use, its leaves then set)."""
        load = self._loads[i]
        if load is None:
            load = self._loads[i] = self._ledger.load(self.nodes[i].metadata.name)
            self._refresh(i)
        return load

    def _remaining(self, i: int) -> tuple[int, int, int]:
        caps = self._caps[i]
        if caps is None:
            allocatable = self.nodes[i].allocatable
            caps = self._caps[i] = (
                allocatable.get(_CPU, 0),
                allocatable.get(_MEMORY, 0),
                allocatable.get(nodefit.PODS, _UNLIMITED),
            )
        cpu, memory, pods = caps
        load = self._load(i)
        return (
            cpu - load.get(_CPU, 0),
            memory - load.get(_MEMORY, 0),
            pods - load.get(nodefit.PODS, 0),
        )

    def _refresh(self, i: int) -> None:
        v = self._size + i
        trees = self._trees
        for tree, value in zip(trees, self._remaining(i), strict=True):
            tree[v] = value
        while v > 1:
            v //= 2
            changed = False
            for tree in trees:
                top = max(tree[2 * v], tree[2 * v + 1])
                if tree[v] != top:
                    tree[v] = top
                    changed = True
            if not changed:
                return

    def _static_fit(self, constraints: _Constraints, i: int) -> bool:
        key = (constraints, i)
        found = self._static.get(key)
        if found is None:
            pod = _requestless_pod(constraints)
            found = nodefit.fits(pod, self.nodes[i], used={})
            self._static[key] = found
        return found

    def _fits(self, pod: Pod, need: Mapping[str, int], constraints: _Constraints, i: int) -> bool:
        held = self._held.get(i, _NOTHING)
        if not self._node_fit:
            cpu, memory, pods = self._remaining(i)
            return (
                need.get(_CPU, 0) <= max(cpu - held.get(_CPU, 0), 0)
                and need.get(_MEMORY, 0) <= max(memory - held.get(_MEMORY, 0), 0)
                and pods - held.get(nodefit.PODS, 0) >= 1
            )
        if not self._static_fit(constraints, i):
            return False
        allocatable = self.nodes[i].allocatable.amounts
        load = self._load(i)
        for name, amount in need.items():
            if amount <= 0:
                continue
            cap = allocatable.get(name)
            if cap is None:
                if name == nodefit.PODS:
                    continue
                return False
            if load.get(name, 0) + held.get(name, 0) + amount > cap:
                return False
        return True

    def first_fit(self, pod: Pod) -> int | None:
        """Index of the first target with room for ``pod`` (None when there is none)."""
        if not self.nodes:
            return None
        need = self._ledger.need(pod)
        constraints = _constraints(pod)
        key = (tuple(need.items()), constraints)
        start = 0
        if key in self._memo:
            last = self._memo[key]
            if last is None or self._fits(pod, need, constraints, last):
                return last
            start = last + 1  # the targets before it still have no room for it
        found = self._search(pod, need, constraints, start)
        self._memo[key] = found
        return found

    def _search(
        self, pod: Pod, need: Mapping[str, int], constraints: _Constraints, start: int = 0
    ) -> int | None:
        """The first target from ``start`` on with room for ``pod``."""
        cpu, memory = need.get(_CPU, 0), need.get(_MEMORY, 0)
        cpu_tree, memory_tree, pods_tree = self._trees
        size, count = self._size, len(self.nodes)
        # Leftmost first: go down the left child, keep the right one for later; a subtree
        # whose targets ([lo, lo + span)) all come before ``start`` is passed over.
        later: list[tuple[int, int, int]] = []
        v, lo, span = 1, 0, size
        while True:
            if (
                lo + span > start
                and (cpu <= 0 or cpu_tree[v] >= cpu)
                and (memory <= 0 or memory_tree[v] >= memory)
                and pods_tree[v] >= 1
            ):
                if v < size:
                    span //= 2
                    later.append((2 * v + 1, lo + span, span))
                    v *= 2
                    continue
                if lo < count:
                    if self._fits(pod, need, constraints, lo):
                        return lo
                    self._refresh(lo)  # what was promised to it, off the tree now
            if not later:
                return None
            v, lo, span = later.pop()

    def hold(self, pod: Pod, i: int) -> None:
        """Hold ``pod``'s need on target ``i`` until :meth:`promise` or :meth:`release`."""
        need = self._ledger.need(pod)
        self._add(self._held.setdefault(i, {}), need, 1)
        self._gave_back(need)

    def release(self) -> None:
        """Give back everything held."""
        if self._held:
            self._held.clear()
            self._memo.clear()

    def promise(self, pod: Pod, i: int, *, held: bool = False) -> None:
        """Promise ``pod``'s need on target ``i`` for the rest of the call (``held``: it was
        held there)."""
        need = self._ledger.need(pod)
        if held:
            self._add(self._held[i], need, -1)
        self._ledger.promise(self.nodes[i].metadata.name, need)
        if self._gave_back(need):
            self._refresh(i)

    def _gave_back(self, need: Mapping[str, int]) -> bool:
        """Whether ``need``, booked on a target, gives room back (some amount of it is
        negative): then every first fit is forgotten."""
        if any(amount < 0 for amount in need.values()):
            self._memo.clear()
            return True
        return False

    @staticmethod
    def _add(into: dict[str, int], need: Mapping[str, int], sign: int) -> None:
        for name, amount in need.items():
            into[name] = into.get(name, 0) + sign * amount


# --- the plugin ---------------------------------------------------------------------------------


class CustomPriority:
    """The ``CustomPriority`` Balance plugin."""

    name = "CustomPriority"

    def __init__(self, args: CustomPriorityArgs) -> None:
        self.args = args
        self._node_selector = (
            Selector.from_label_selector(args.node_selector)
            if args.node_selector is not None
            else Selector.everything()
        )
        self._pod_selectors = tuple(
            Selector.from_label_selector(entry.selector) for entry in args.pod_selectors
        )
        self._tiers = tuple(
            (tier.name, Selector.from_label_selector(tier.node_selector))
            for tier in args.eviction_order
        )
        #: Source node -> its pod list in the last call and its candidates in order (before
        #: the evictor's filter and the pods other plugins took): kept for the next call,
        #: which reuses them while the node's pod list is the same object (immutable; a node
        #: whose pods changed gets a new list).
        self._orders: dict[str, tuple[Sequence[Pod], list[Pod]]] = {}
        #: The view's nodes in the last call and their tiers: kept while the nodes are the
        #: same objects in the same order (a node's labels are part of the object).
        self._tiered: tuple[tuple[Node, ...], tuple[Tier, ...]] | None = None

    def _tiers_of(self, nodes: Sequence[Node]) -> tuple[Tier, ...]:
        """The tiers of the nodes the plugin's node selector picks (the last call's while the
        nodes are the same)."""
        last = self._tiered
        if last is not None and same_objects(last[0], nodes):
            return last[1]
        picked = [n for n in nodes if self._node_selector.matches(n.metadata.labels)]
        tiers = assign_tiers(picked, self._tiers)
        self._tiered = (tuple(nodes), tiers)
        return tiers

    def balance(self, view: CycleView, evictor: Evictor) -> Status:
        if self.args.paused:
            return Status()
        tiers = self._tiers_of(view.nodes)
        if len(tiers) < 2:
            log.debug("%s: %d tier(s) with nodes, nothing to balance", self.name, len(tiers))
            return Status()
        ledger = _Ledger(view)
        taken = {(i.pod.metadata.namespace, i.pod.metadata.name) for i in evictor.intents}
        # Nodes a pod was taken from (by an earlier plugin): only their pods are looked up.
        taken_from = {i.node for i in evictor.intents}
        before = self._orders
        orders: dict[str, tuple[Sequence[Pod], list[Pod]]] = {}
        self._orders = orders
        for step, source in enumerate(tiers[:-1]):
            targets = _Targets(
                [node for tier in tiers[step + 1 :] for node in tier.nodes],
                ledger,
                node_fit=self.args.node_fit,
            )
            for node in source.nodes:
                name = node.metadata.name
                if not evictor.can_evict_from(name):
                    continue  # the cycle's limits leave nothing to take from this node
                drain = self.args.mode == DRAIN_NODE
                # BestEffort stops early (limits, misses): where the filter holds, it is asked
                # only for the candidates the loop reaches.
                lazy = not drain and view.filter_holds_on(name)
                pods = view.pods_on(name)
                if lazy:
                    last = before.get(name)
                    ordered = (
                        last[1]
                        if last is not None and last[0] is pods
                        else self._candidates(pods, evictor, None, lazy=True)
                    )
                    orders[name] = (pods, ordered)
                    candidates = (
                        [
                            pod
                            for pod in ordered
                            if (pod.metadata.namespace, pod.metadata.name) not in taken
                        ]
                        if name in taken_from
                        else ordered
                    )
                else:
                    candidates = self._candidates(
                        pods, evictor, taken if name in taken_from else None, lazy=False
                    )
                if not candidates:
                    continue
                if drain:
                    self._drain(node, source.name, candidates, targets, ledger, evictor)
                else:
                    self._best_effort(source.name, candidates, targets, evictor, lazy=lazy)
        return Status()

    def _candidates(
        self,
        pods: Sequence[Pod],
        evictor: Evictor,
        taken: set[tuple[str, str]] | None,
        *,
        lazy: bool = False,
    ) -> list[Pod]:
        """The candidates of a source node in order, less those ``taken`` (``lazy``: the
        evictor's filter left to the caller)."""
        namespaces = self.args.evictable_namespaces
        selectors = self._pod_selectors
        keyed: list[tuple[tuple[int, int, str, str], int, Pod]] = []
        for i, pod in enumerate(pods):
            meta = pod.metadata
            if taken and (meta.namespace, meta.name) in taken:
                continue
            if namespaces is not None and not namespaces.allows(meta.namespace):
                continue
            if selectors and not any(s.matches(meta.labels) for s in selectors):
                continue
            if lazy or evictor.filter(pod):
                containers = pod.spec.containers
                resources = containers[0].resources if len(containers) == 1 else None
                if resources is not None and not resources.limits.amounts:
                    # candidate_order of the common pod, inlined: every pod of a source node
                    requests = resources.requests.amounts
                    key = (
                        requests.get(_CPU, 0),
                        requests.get(_MEMORY, 0),
                        meta.namespace,
                        meta.name,
                    )
                else:
                    key = candidate_order(pod)
                keyed.append((key, i, pod))
        # By key, then given order (a stable sort); the pods themselves are never compared.
        keyed.sort()
        return [pod for _, _, pod in keyed]

    def _best_effort(
        self,
        tier: str,
        candidates: Sequence[Pod],
        targets: _Targets,
        evictor: Evictor,
        *,
        lazy: bool = False,
    ) -> None:
        """Evict ``candidates`` one by one (``lazy``: those the evictor's filter passes)."""
        reason = f"evicting from {tier} priority resource to lower priority resource"
        misses = 0
        for pod in candidates:
            if not evictor.can_evict_from(pod.spec.node_name):
                return
            if lazy and not evictor.filter(pod):
                continue
            target = None
            if self.args.node_fit:
                target = targets.first_fit(pod)
                if target is None:
                    misses += 1
                    if misses >= MAX_CONSECUTIVE_MISSES:
                        return
                    continue
                misses = 0
            if not evictor.pre_eviction_filter(pod):
                continue
            if evictor.evict(pod, plugin=self.name, reason=reason) and target is not None:
                targets.promise(pod, target)

    def _drain(
        self,
        node: Node,
        tier: str,
        candidates: Sequence[Pod],
        targets: _Targets,
        ledger: _Ledger,
        evictor: Evictor,
    ) -> None:
        name = node.metadata.name
        if ledger.promised.get(name):
            log.debug("%s: not draining %s, pods were promised to it", self.name, name)
            return
        placed: list[int] = []
        for pod in candidates:
            target = targets.first_fit(pod)
            if target is None:
                break
            targets.hold(pod, target)
            placed.append(target)
        complete = len(placed) == len(candidates) and all(
            evictor.pre_eviction_filter(pod) for pod in candidates
        )
        if not complete:
            targets.release()
            return
        cordon = self.args.auto_cordon and not node.spec.unschedulable
        if cordon:
            evictor.cordon(name, plugin=self.name)
        reason = f"drain node {name} (sourcePriority={tier})"
        for pod, target in zip(candidates, placed, strict=True):
            if not evictor.evict(pod, plugin=self.name, reason=reason):
                log.debug("%s: drain of %s stopped at %s", self.name, name, pod.metadata.name)
                targets.release()
                if cordon:
                    evictor.uncordon(name)
                return
            targets.promise(pod, target, held=True)
        targets.release()
