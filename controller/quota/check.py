"""ElasticQuota admission of one pod (controller-spec §4.1, §4.2, §4.4).

* **Which quota** (:func:`quota_name`): the pod label ``quota.scheduling.koordinator.sh/name``;
  else an ElasticQuota named like the pod's namespace in that namespace; else the first quota
  (by namespace, then name) whose ``quota.scheduling.koordinator.sh/namespaces`` annotation
  lists the namespace; else ``koordinator-default-quota``. A name no quota has means the
  default quota. With ``disable_default_quota`` (gate ``DisableDefaultQuota``) only the label
  counts and a pod without a known quota is not quota-managed ("").
* **Usage** (:class:`QuotaLedger`): ``used`` of a quota is the sum of the requests (overhead
  included) of its assigned pods (``spec.nodeName`` set, not Succeeded/Failed);
  ``nonPreemptibleUsed`` the same over pods labelled ``.../preemptible: "false"``. A parent's
  used is the sum over its subtree.
* **PreFilter** (:func:`check_pod`): a pod without quota is skipped. With ``req`` its request,
  the quota must hold ``used + req`` over the names the pod requests (a name missing from the
  limit is unconstrained), and a non-preemptible pod also ``nonPreemptibleUsed + req`` within
  ``min``. With ``enableCheckParentQuota`` every ancestor below the root must hold it too.
* **Request** (:func:`quota_requests`): the request of a quota is the sum of the requests of
  its pending and assigned pods (not Succeeded/Failed), masked to the names of its ``max``;
  it feeds the runtime quota (:mod:`controller.quota.tree`).

The limit is the runtime quota when one is given (``limits``, from the quota tree) and
``enableRuntimeQuota`` is on; otherwise (and for a quota ``limits`` does not name) it is
``spec.max``.

The built-in quotas (``koordinator-root-quota``, ``koordinator-system-quota``,
``koordinator-default-quota``) exist in a :class:`QuotaIndex` even when no object was created
for them, with the max the args give.

The PostFilter rule (:func:`preemption_policy`): victims only from the preemptor's own quota,
of strictly lower priority (the preemption core's rule), never non-preemptible, and none at all
for pods of the default quota while ``disableDefaultQuotaPreemption`` holds; the quota must
hold ``used - freed + req`` after the evictions.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from apis import bounded
from apis import constants as k
from apis.core import Pod, pod_requests
from apis.meta import Object, ObjectMeta
from apis.quota import ElasticQuota, ElasticQuotaSpec
from apis.resources import ResourceList
from controller.quota.args import ElasticQuotaArgs
from controller.scheduler import preemption

__all__ = [
    "DEFAULT_ARGS",
    "PodUsage",
    "QuotaCheck",
    "QuotaIndex",
    "QuotaLedger",
    "QuotaSums",
    "QuotaUsage",
    "Verdict",
    "check_pod",
    "exceeded_dimensions",
    "format_resources",
    "is_assigned",
    "is_non_preemptible",
    "preemption_policy",
    "quota_name",
    "quota_requests",
]

log = logging.getLogger(__name__)

DEFAULT_ARGS: Final = ElasticQuotaArgs()
_NO_RESOURCES: Final = ResourceList()


# --- messages ----------------------------------------------------------------------------------


def format_resources(amounts: Mapping[str, int]) -> str:
    """``cpu:2,memory:4Gi``: ``name:quantity`` pairs in name order, comma-joined."""
    wire = ResourceList(amounts).to_wire()
    return ",".join(sorted(f"{name}:{value}" for name, value in wire.items()))


def exceeded_dimensions(amounts: Mapping[str, int], limit: Mapping[str, int]) -> tuple[str, ...]:
    """Names of ``limit`` present in ``amounts`` with a larger amount (Kubernetes'
    ``LessThanOrEqual``: a name absent from either side is not compared)."""
    return tuple(
        name for name, cap in sorted(limit.items()) if name in amounts and amounts[name] > cap
    )


def _dimensions(names: Iterable[str]) -> str:
    return "[" + " ".join(names) + "]"


def _insufficient(
    head: str,
    *,
    limit: tuple[str, ResourceList],
    used: tuple[str, ResourceList],
    request: ResourceList,
    exceeded: tuple[str, ...],
) -> str:
    """``<head>, <limit>: .., <used>: .., pod's request: .., exceedDimensions: [..]``."""
    return (
        f"{head}, {limit[0]}: {format_resources(limit[1])}, "
        f"{used[0]}: {format_resources(used[1])}, pod's request: {format_resources(request)}, "
        f"exceedDimensions: {_dimensions(exceeded)}"
    )


# --- the quotas ----------------------------------------------------------------------------------


def _bound_namespaces(quota: ElasticQuota) -> tuple[str, ...]:
    text = quota.metadata.annotations.get(k.ANNOTATION_QUOTA_NAMESPACES, "")
    if not text:
        return ()
    try:
        value = bounded.decode_any(text, k.ANNOTATION_QUOTA_NAMESPACES)
    except bounded.BoundedError as err:
        log.debug("quota %s: ignoring annotation: %s", quota.name, err)
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)


def _builtin(name: str, namespace: str, max_: ResourceList, labels: dict[str, str]) -> ElasticQuota:
    return ElasticQuota(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=ElasticQuotaSpec(max=max_),
    )


@dataclass(frozen=True, slots=True)
class QuotaIndex:
    """Quotas by name, with the namespace bindings and the tree's parent links."""

    by_name: Mapping[str, ElasticQuota]
    #: (namespace, name) of every quota object.
    object_keys: frozenset[tuple[str, str]]
    #: Namespace -> the quota its annotation binds it to.
    bound: Mapping[str, str]
    #: Quota -> its children.
    children: Mapping[str, tuple[str, ...]]

    @classmethod
    def build(
        cls, quotas: Iterable[ElasticQuota], args: ElasticQuotaArgs = DEFAULT_ARGS
    ) -> QuotaIndex:
        """Index ``quotas``; the built-in quotas are added where absent. Of two quotas with
        one name, the first by namespace wins."""
        by_name: dict[str, ElasticQuota] = {}
        bound: dict[str, str] = {}
        ordered = sorted(quotas, key=lambda q: (q.namespace, q.name))
        for quota in ordered:
            by_name.setdefault(quota.name, quota)
        namespace = args.quota_group_namespace
        for name, max_, labels in (
            (
                k.QUOTA_ROOT,
                _NO_RESOURCES,
                {k.LABEL_QUOTA_IS_PARENT: "true", k.LABEL_QUOTA_ALLOW_LENT_RESOURCE: "false"},
            ),
            (k.QUOTA_SYSTEM, args.system_quota_group_max, {}),
            (k.QUOTA_DEFAULT, args.default_quota_group_max, {}),
        ):
            by_name.setdefault(name, _builtin(name, namespace, max_, labels))
        for quota in by_name.values():
            for bound_namespace in _bound_namespaces(quota):
                bound.setdefault(bound_namespace, quota.name)
        children: dict[str, list[str]] = {}
        for name, quota in by_name.items():
            if name != k.QUOTA_ROOT:
                parent = quota.metadata.labels.get(k.LABEL_QUOTA_PARENT) or k.QUOTA_ROOT
                children.setdefault(parent, []).append(name)
        return cls(
            by_name=by_name,
            object_keys=frozenset((q.namespace, q.name) for q in ordered),
            bound=bound,
            children={name: tuple(sorted(kids)) for name, kids in children.items()},
        )

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def get(self, name: str) -> ElasticQuota | None:
        return self.by_name.get(name)

    def parent(self, name: str) -> str:
        """The parent quota's name (the root for a quota without the parent label)."""
        quota = self.by_name.get(name)
        if quota is None or name == k.QUOTA_ROOT:
            return ""
        return quota.metadata.labels.get(k.LABEL_QUOTA_PARENT) or k.QUOTA_ROOT

    def ancestors(self, name: str) -> tuple[str, ...]:
        """Parent first, up to (not including) the root; stops at an unknown parent."""
        chain: list[str] = []
        seen = {name}
        current = self.parent(name)
        while current and current != k.QUOTA_ROOT and current in self and current not in seen:
            chain.append(current)
            seen.add(current)
            current = self.parent(current)
        return tuple(chain)

    def subtree(self, name: str) -> tuple[str, ...]:
        """``name`` and every quota below it."""
        found: list[str] = []
        stack = [name]
        seen: set[str] = set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            found.append(current)
            stack.extend(self.children.get(current, ()))
        return tuple(found)


def is_non_preemptible(pod: Pod) -> bool:
    return pod.metadata.labels.get(k.LABEL_QUOTA_PREEMPTIBLE) == "false"


def is_assigned(pod: Pod) -> bool:
    """Bound to a node and not finished: the pod's request counts as used."""
    return bool(pod.spec.node_name) and not pod.is_terminated


def quota_name(pod: Pod, index: QuotaIndex, *, disable_default_quota: bool = False) -> str:
    """The quota the pod is charged to ("" when it is not quota-managed)."""
    label = pod.metadata.labels.get(k.LABEL_QUOTA_NAME, "")
    if disable_default_quota:
        return label if label in index else ""
    namespace = pod.namespace
    if label:
        name = label
    elif (namespace, namespace) in index.object_keys:
        name = namespace
    else:
        name = index.bound.get(namespace, k.QUOTA_DEFAULT)
    return name if name in index else k.QUOTA_DEFAULT


# --- usage ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QuotaUsage:
    used: ResourceList = _NO_RESOURCES
    non_preemptible_used: ResourceList = _NO_RESOURCES


_NO_USAGE: Final = QuotaUsage()


@dataclass(frozen=True, slots=True)
class QuotaLedger:
    """Usage of every quota by its own assigned pods; a new ledger for every change."""

    own: Mapping[str, QuotaUsage] = field(default_factory=dict)

    @classmethod
    def from_pods(
        cls,
        pods: Iterable[Pod],
        index: QuotaIndex,
        *,
        disable_default_quota: bool = False,
        requests_of: Callable[[Pod], ResourceList] = pod_requests,
    ) -> QuotaLedger:
        """The usage of the assigned pods among ``pods`` (``requests_of`` gives a pod's
        effective request; the scheduler passes its cached figures)."""
        used: dict[str, dict[str, int]] = {}
        pinned: dict[str, dict[str, int]] = {}
        for pod in pods:
            if not is_assigned(pod):
                continue
            name = quota_name(pod, index, disable_default_quota=disable_default_quota)
            if not name:
                continue
            request = requests_of(pod)
            targets = [used.setdefault(name, {})]
            if is_non_preemptible(pod):
                targets.append(pinned.setdefault(name, {}))
            for total in targets:
                for resource, amount in request.items():
                    total[resource] = total.get(resource, 0) + amount
        return cls(
            own={
                name: QuotaUsage(
                    used=ResourceList(amounts),
                    non_preemptible_used=ResourceList(pinned.get(name, {})),
                )
                for name, amounts in used.items()
            }
        )

    def usage(self, name: str) -> QuotaUsage:
        return self.own.get(name, _NO_USAGE)

    def subtree_used(self, name: str, index: QuotaIndex) -> ResourceList:
        """Used of ``name`` and everything below it."""
        return ResourceList.total(self.usage(member).used for member in index.subtree(name))

    def _change(self, name: str, pod: Pod, sign: int, request: ResourceList | None) -> QuotaLedger:
        request = pod_requests(pod) if request is None else request
        delta = ResourceList({r: sign * a for r, a in request.items()})
        before = self.usage(name)
        after = replace(
            before,
            used=before.used + delta,
            non_preemptible_used=(
                before.non_preemptible_used + delta
                if is_non_preemptible(pod)
                else before.non_preemptible_used
            ),
        )
        return QuotaLedger(own={**self.own, name: after})

    def assign(self, name: str, pod: Pod, request: ResourceList | None = None) -> QuotaLedger:
        """The ledger with ``pod`` assigned in quota ``name`` (Reserve)."""
        return self._change(name, pod, 1, request)

    def release(self, name: str, pod: Pod, request: ResourceList | None = None) -> QuotaLedger:
        """The ledger without ``pod`` (Unreserve, deletion, eviction)."""
        return self._change(name, pod, -1, request)


def quota_requests(
    pods: Iterable[Pod],
    index: QuotaIndex,
    *,
    disable_default_quota: bool = False,
    requests_of: Callable[[Pod], ResourceList] = pod_requests,
) -> dict[str, ResourceList]:
    """The request of every quota with pods: its pending and assigned pods' requests summed,
    over the names of the quota's ``max``."""
    sums: dict[str, dict[str, int]] = {}
    for pod in pods:
        if pod.is_terminated:
            continue
        name = quota_name(pod, index, disable_default_quota=disable_default_quota)
        if not name:
            continue
        limit = index.by_name[name].spec.max
        total = sums.setdefault(name, {})
        for resource, amount in requests_of(pod).items():
            if resource in limit:
                total[resource] = total.get(resource, 0) + amount
    return {name: ResourceList(amounts) for name, amounts in sums.items()}


class QuotaSums:
    """Per quota, the amounts of the pods counted and how many pods name each resource, so
    that taking a pod out leaves exactly what summing the others gives."""

    __slots__ = ("amounts", "counts", "pods")

    def __init__(self) -> None:
        self.amounts: dict[str, dict[str, int]] = {}
        self.counts: dict[str, dict[str, int]] = {}
        self.pods: dict[str, int] = {}

    def add(self, name: str, request: Mapping[str, int], sign: int) -> None:
        pods = self.pods[name] = self.pods.get(name, 0) + sign
        total = self.amounts.setdefault(name, {})
        counts = self.counts.setdefault(name, {})
        for resource, amount in request.items():
            count = counts[resource] = counts.get(resource, 0) + sign
            if count:
                total[resource] = total.get(resource, 0) + sign * amount
            else:
                del counts[resource], total[resource]
        if not pods:
            del self.pods[name], self.amounts[name], self.counts[name]


#: What one pod adds: its quota, request, and whether it is assigned and non-preemptible.
_PodShare = tuple[str, ResourceList, bool, bool]


class PodUsage:
    """:meth:`QuotaLedger.from_pods` and :func:`quota_requests` of a set of pods, kept pod by
    pod: :meth:`update` with the pods that changed costs their requests, not a walk over
    every pod. Pods are told apart by namespace and name; objects that are not Pods are
    left out."""

    def __init__(
        self, index: QuotaIndex, pods: Iterable[Object] = (), *, disable_default_quota: bool = False
    ) -> None:
        self.index = index
        self._disable_default_quota = disable_default_quota
        self._shares: dict[tuple[str, str], _PodShare] = {}
        self._used, self._pinned, self._requested = QuotaSums(), QuotaSums(), QuotaSums()
        self._ledger: QuotaLedger | None = None
        self._requests: dict[str, ResourceList] | None = None
        self.update((None, pod) for pod in pods)

    def _share(self, pod: Object | None) -> _PodShare | None:
        if not isinstance(pod, Pod) or pod.is_terminated:
            return None
        name = quota_name(pod, self.index, disable_default_quota=self._disable_default_quota)
        if not name:
            return None
        return name, pod_requests(pod), bool(pod.spec.node_name), is_non_preemptible(pod)

    def _add(self, share: _PodShare, sign: int) -> None:
        name, request, assigned, pinned = share
        self._requested.add(name, request, sign)
        if assigned:
            self._used.add(name, request, sign)
            if pinned:
                self._pinned.add(name, request, sign)

    def update(self, changes: Iterable[tuple[Object | None, Object | None]]) -> None:
        """Count each ``(before, after)`` change of a pod (None: absent)."""
        shares = self._shares
        for before, after in changes:
            obj = after if after is not None else before
            if obj is None:
                continue
            key = (obj.metadata.namespace, obj.metadata.name)
            old = shares.pop(key, None)
            new = self._share(after)
            if new is not None:
                shares[key] = new
            if old != new:
                if old is not None:
                    self._add(old, -1)
                if new is not None:
                    self._add(new, 1)
                self._ledger = self._requests = None

    def ledger(self) -> QuotaLedger:
        """What :meth:`QuotaLedger.from_pods` gives for the pods."""
        if self._ledger is None:
            pinned = self._pinned.amounts
            self._ledger = QuotaLedger(
                own={
                    name: QuotaUsage(
                        used=ResourceList(amounts),
                        non_preemptible_used=ResourceList(pinned.get(name, {})),
                    )
                    for name, amounts in self._used.amounts.items()
                }
            )
        return self._ledger

    def requests(self) -> dict[str, ResourceList]:
        """What :func:`quota_requests` gives for the pods."""
        if self._requests is None:
            by_name = self.index.by_name
            self._requests = {
                name: ResourceList(
                    {r: a for r, a in amounts.items() if r in by_name[name].spec.max}
                )
                for name, amounts in self._requested.amounts.items()
            }
        return dict(self._requests)


# --- the PreFilter check -------------------------------------------------------------------------


class Verdict(enum.StrEnum):
    SUCCESS = "Success"
    SKIP = "Skip"
    UNSCHEDULABLE = "Unschedulable"
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    verdict: Verdict
    #: The pod's quota ("" when not quota-managed).
    quota: str = ""
    message: str = ""
    exceeded: tuple[str, ...] = ()

    @property
    def admitted(self) -> bool:
        return self.verdict in (Verdict.SUCCESS, Verdict.SKIP)


def _limit(
    name: str,
    quota: ElasticQuota,
    limits: Mapping[str, ResourceList] | None,
    args: ElasticQuotaArgs,
) -> ResourceList:
    if limits is not None and args.enable_runtime_quota and name in limits:
        return limits[name]
    return quota.spec.max


def _with_request(used: ResourceList, request: ResourceList) -> ResourceList:
    """``used + request`` over the names the pod requests."""
    return ResourceList({name: used.get(name, 0) + amount for name, amount in request.items()})


def check_pod(
    pod: Pod,
    *,
    index: QuotaIndex,
    ledger: QuotaLedger,
    args: ElasticQuotaArgs = DEFAULT_ARGS,
    limits: Mapping[str, ResourceList] | None = None,
    disable_default_quota: bool = False,
    request: ResourceList | None = None,
) -> QuotaCheck:
    """The ElasticQuota PreFilter for ``pod`` (see the module docstring).

    ``limits`` maps quota names to their runtime quota; quotas it does not name are limited
    by ``spec.max``. ``request`` is the pod's effective request (computed when None). Hook
    plugins' ``CheckPod`` is not run (none exists yet).
    """
    name = quota_name(pod, index, disable_default_quota=disable_default_quota)
    if not name:
        return QuotaCheck(verdict=Verdict.SKIP)
    quota = index.get(name)
    if quota is None:
        return QuotaCheck(
            verdict=Verdict.ERROR, quota=name, message="Could not find the specified ElasticQuota"
        )
    request = pod_requests(pod) if request is None else request
    usage = ledger.usage(name)
    refused = _refusal(
        name,
        f"Insufficient quotas, quotaName: {name}",
        limit=("runtime", _limit(name, quota, limits, args)),
        used=("used", usage.used),
        request=request,
    )
    if refused is None and is_non_preemptible(pod):
        refused = _refusal(
            name,
            f"Insufficient non-preemptible quotas, quotaName: {name}",
            limit=("min", quota.spec.min),
            used=("nonPreemptibleUsed", usage.non_preemptible_used),
            request=request,
        )
    if refused is None and args.enable_check_parent_quota:
        topology = [name]
        for ancestor in index.ancestors(name):
            topology.insert(0, ancestor)
            refused = _refusal(
                name,
                f"Insufficient quotas, quotaNameTopo: {_dimensions(topology)}",
                limit=("runtime", _limit(ancestor, index.by_name[ancestor], limits, args)),
                used=("used", ledger.subtree_used(ancestor, index)),
                request=request,
            )
            if refused is not None:
                break
    return refused if refused is not None else QuotaCheck(verdict=Verdict.SUCCESS, quota=name)


def _refusal(
    name: str,
    head: str,
    *,
    limit: tuple[str, ResourceList],
    used: tuple[str, ResourceList],
    request: ResourceList,
) -> QuotaCheck | None:
    """Unschedulable when ``used + request`` exceeds ``limit`` in a dimension, else None."""
    exceeded = exceeded_dimensions(_with_request(used[1], request), limit[1])
    if not exceeded:
        return None
    return QuotaCheck(
        verdict=Verdict.UNSCHEDULABLE,
        quota=name,
        exceeded=exceeded,
        message=_insufficient(head, limit=limit, used=used, request=request, exceeded=exceeded),
    )


# --- the PostFilter rule -------------------------------------------------------------------------


def _evicts_nothing(_: Pod) -> bool:
    return False


def preemption_policy(
    preemptor: Pod,
    *,
    index: QuotaIndex,
    ledger: QuotaLedger,
    args: ElasticQuotaArgs = DEFAULT_ARGS,
    limits: Mapping[str, ResourceList] | None = None,
    disable_default_quota: bool = False,
) -> preemption.VictimPolicy:
    """The ElasticQuota plugin's victim rule for ``preemptor``, for :func:`preemption.preempt`.

    Messages carry the plugin's ``preemption: `` prefix.
    """
    name = quota_name(preemptor, index, disable_default_quota=disable_default_quota)
    no_victims = "No victims found on node {node} for preemptor pod {pod}"
    prefix = "preemption: "
    if name == k.QUOTA_DEFAULT and args.disable_default_quota_preemption:
        return preemption.VictimPolicy(
            may_evict=_evicts_nothing, no_victims=no_victims, message_prefix=prefix
        )

    def may_evict(victim: Pod) -> bool:
        if is_non_preemptible(victim):
            return False
        return quota_name(victim, index, disable_default_quota=disable_default_quota) == name

    quota = index.get(name) if name else None
    budget = (
        preemption.QuotaBudget(
            name=name,
            used=ledger.usage(name).used,
            limit=_limit(name, quota, limits, args),
        )
        if quota is not None
        else None
    )
    return preemption.VictimPolicy(
        may_evict=may_evict, budget=budget, no_victims=no_victims, message_prefix=prefix
    )
