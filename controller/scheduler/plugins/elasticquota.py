"""``ElasticQuota``: a pod is admitted only while its quota holds it (controller-spec §4.4).

An adapter over :mod:`controller.quota`:

- **sync**: the :class:`~controller.quota.QuotaIndex` is rebuilt from the ElasticQuota objects
  and the :class:`~controller.quota.QuotaLedger` from the assigned pods whenever either
  changed; pods this plugin reserved that the snapshot does not show assigned yet (bound in
  this pass, or waiting in Permit) stay charged. A changed quota releases the unschedulable
  pods.
- **runtime**: with ``enableRuntimeQuota`` (the default) each quota's limit is its runtime
  quota (:class:`~controller.quota.tree.QuotaTree`), recomputed whenever the pods, the quotas
  or the nodes changed: the request of a quota is the sum of its pending and assigned pods'
  requests (over the names of its max), and the root's children share the nodes'
  allocatable minus what the system and default quotas use. A runtime that grew releases
  the unschedulable pods. With it off the limit is ``spec.max``.
- **PreFilter**: :func:`~controller.quota.check_pod` against that limit: ``Insufficient
  quotas, quotaName: <q>, runtime: .., used: .., pod's request: .., exceedDimensions: [..]``
  (Unschedulable); a pod of no quota is skipped, and so is a Reservation's reserve pod (the
  pods that use a reservation are charged when they bind).
- **Reserve** / **Unreserve**: the pod's request is charged to / released from its quota, so
  the pods placed later in the same pass see it.

Per pod the common case is cheap: the plugin keeps each touched quota's ``used`` as plain
amounts in step with its charges, and a pod whose quota holds ``used + request`` (a
preemptible pod, no parent check) is admitted from those amounts without building a new
:class:`~controller.quota.QuotaLedger`; charges are folded into the ledger only when it is
read (the full :func:`~controller.quota.check_pod` runs, and words the message, whenever the
quick test is not conclusive).

Not done here: the PostFilter (quota-aware preemption; :func:`~controller.quota.
preemption_policy` is its core) and hook plugins; over-use revocation is the
``quota-revoke`` loop's (:mod:`controller.quota.revoke`).
Its args are :class:`controller.quota.args.ElasticQuotaArgs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from apis import constants as k
from apis.core import Node, Pod
from apis.kinds import default_registry
from apis.meta import Object
from apis.quota import ElasticQuota as ElasticQuotaObject
from apis.resources import ResourceList, ResourceTally
from controller.quota.args import ElasticQuotaArgs
from controller.quota.check import (
    PodUsage,
    QuotaIndex,
    QuotaLedger,
    Verdict,
    check_pod,
    is_assigned,
    is_non_preemptible,
    quota_name,
)
from controller.quota.status import STATUS_ANNOTATIONS
from controller.quota.tree import QuotaTree, RuntimeQuota
from controller.reservations.reserve_pod import is_reserve_pod
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.store.snapshots import Snapshot

__all__ = ["ElasticQuota"]

NAME = "ElasticQuota"
#: CycleState key: the pod's quota name, from PreFilter to Reserve.
_QUOTA_KEY = f"{NAME}/quota"

_REGISTRY = default_registry()
_POD_KIND = _REGISTRY.for_type(Pod)
_QUOTA_KIND = _REGISTRY.for_type(ElasticQuotaObject)
_NODE_KIND = _REGISTRY.for_type(Node)
_NO_RESOURCES = ResourceList()
_WRITTEN = frozenset(STATUS_ANNOTATIONS)


_Shape = tuple[str, str, object, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]


def _shape(quota: ElasticQuotaObject) -> _Shape:
    """The quota as the check reads it: everything but its status and status annotations."""
    meta = quota.metadata
    return (
        meta.namespace,
        meta.name,
        quota.spec,
        tuple(sorted(meta.labels.items())),
        tuple(sorted((key, v) for key, v in meta.annotations.items() if key not in _WRITTEN)),
    )


@dataclass(frozen=True, slots=True)
class _Charge:
    quota: str
    pod: Pod
    request: ResourceList


class NodeTotal:
    """The sum of every node's allocatable (as :meth:`ResourceList.total` of them), kept node
    by node: a new node list costs a look at each node, and arithmetic only for the nodes
    whose allocatable changed (not those whose heartbeat did)."""

    def __init__(self) -> None:
        #: name -> the node last seen and its allocatable
        self._nodes: dict[str, tuple[Node, ResourceList]] = {}
        self._tally = ResourceTally()
        self.total = _NO_RESOURCES

    def update(self, nodes: Iterable[object]) -> ResourceList:
        """The sum over ``nodes`` (objects that are not Nodes are left out)."""
        known = self._nodes
        seen: dict[str, tuple[Node, ResourceList]] = {}
        changed = False
        for node in nodes:
            if not isinstance(node, Node):
                continue
            name = node.metadata.name
            before = known.get(name)
            if before is not None and before[0] is node:
                seen[name] = before
                continue
            allocatable = node.allocatable
            if before is None or before[1] != allocatable:
                if before is not None:
                    self._tally.remove(before[1])
                self._tally.add(allocatable)
                changed = True
            seen[name] = (node, allocatable)
        for name, (_, allocatable) in known.items():
            if name not in seen:
                self._tally.remove(allocatable)
                changed = True
        self._nodes = seen
        if changed:
            self.total = self._tally.total()
        return self.total


class ElasticQuota:
    """PreFilter, Reserve and Unreserve of the quota check."""

    name = NAME

    def __init__(self, args: ElasticQuotaArgs) -> None:
        self.args = args
        self._index = QuotaIndex.build((), args)
        self._tree = QuotaTree.build(
            self._index, enable_min_quota_scale=args.enable_min_quota_scale
        )
        self._ledger = QuotaLedger()
        #: The runtime quota (None while ``enableRuntimeQuota`` is off or before any sync).
        self._runtime: RuntimeQuota | None = None
        #: Quota -> its runtime over the names of its max (None: the limit is max).
        self._runtime_limits: Mapping[str, ResourceList] | None = None
        #: Per quota, the pending and assigned pods' requests (as of the last sync).
        self._requests_by_quota: Mapping[str, ResourceList] = {}
        #: Sum of the nodes' allocatable (as of the last sync).
        self._allocatable = _NO_RESOURCES
        self._node_total = NodeTotal()
        #: Charges (quota, pod, request, assign?) made since ``_ledger`` was last folded.
        self._unfolded: list[tuple[str, Pod, ResourceList, bool]] = []
        #: quota -> its used amounts, with every charge of the pass (quotas touched only).
        self._used: dict[str, dict[str, int]] = {}
        #: quota -> its limit as a plain dict (quotas checked only; reset with the limits).
        self._limits: dict[str, dict[str, int]] = {}
        self._views: tuple[Sequence[Object], ...] | None = None
        #: What of the quotas the check reads (not their status): a change releases pods.
        self._shape: tuple[_Shape, ...] = ()
        #: uid -> what Reserve charged, until the snapshot shows the pod assigned.
        self._charged: dict[str, _Charge] = {}
        #: The assigned pods' usage and the pods' requests, pod by pod.
        self._usage = PodUsage(self._index)

    @property
    def index(self) -> QuotaIndex:
        return self._index

    @property
    def runtime(self) -> RuntimeQuota | None:
        """The runtime quota of the last sync (None while ``enableRuntimeQuota`` is off)."""
        return self._runtime

    @property
    def limits(self) -> Mapping[str, ResourceList] | None:
        """What PreFilter passes to :func:`~controller.quota.check_pod` as ``limits``."""
        return self._runtime_limits

    @property
    def ledger(self) -> QuotaLedger:
        if self._unfolded:
            ledger = self._ledger
            for quota, pod, request, assign in self._unfolded:
                if assign:
                    ledger = ledger.assign(quota, pod, request)
                else:
                    ledger = ledger.release(quota, pod, request)
            self._ledger = ledger
            self._unfolded.clear()
        return self._ledger

    def _used_of(self, quota: str) -> dict[str, int]:
        used = self._used.get(quota)
        if used is None:
            used = self._used[quota] = dict(self.ledger.usage(quota).used)
        return used

    def _charge(self, quota: str, pod: Pod, request: ResourceList, assign: bool) -> None:
        self._unfolded.append((quota, pod, request, assign))
        used = self._used.get(quota)
        if used is not None:
            sign = 1 if assign else -1
            for resource in request:
                used[resource] = used.get(resource, 0) + sign * request[resource]

    def _admits(self, quota: str, pod: PodInfo) -> bool:
        """The quick test: ``used + request`` within the quota's limit over the requested
        names (only conclusive for a preemptible pod without the parent check)."""
        limit = self._limits.get(quota)
        if limit is None:
            runtime = self._runtime_limits
            limit = self._limits[quota] = dict(
                runtime[quota]
                if runtime is not None and quota in runtime
                else self._index.by_name[quota].spec.max
            )
        used = self._used_of(quota)
        requests = pod.requests
        for resource in requests:
            cap = limit.get(resource)
            if cap is not None and used.get(resource, 0) + requests[resource] > cap:
                return False
        return True

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        views = (
            snapshot.objects(_POD_KIND),
            snapshot.objects(_QUOTA_KIND),
            snapshot.objects(_NODE_KIND),
        )
        before = self._views
        if before is not None and all(a is b for a, b in zip(views, before, strict=True)):
            return False
        pods, quotas, nodes = views
        self._views = views
        quotas_changed = False
        if before is None or before[1] is not quotas:
            typed = [q for q in quotas if isinstance(q, ElasticQuotaObject)]
            shape = tuple(_shape(q) for q in typed)
            quotas_changed = before is None or shape != self._shape
            self._shape = shape
            self._index = QuotaIndex.build(typed, self.args)
            if quotas_changed and self.args.enable_runtime_quota:
                self._tree = QuotaTree.build(
                    self._index, enable_min_quota_scale=self.args.enable_min_quota_scale
                )
        moved = quotas_changed
        if before is None or before[0] is not pods or quotas_changed:
            since = None if before is None or quotas_changed else before[0]
            self._sync_pods(snapshot, pods, since)
            moved = True
        if before is None or before[2] is not nodes:
            allocatable = self._node_total.update(nodes)
            moved = moved or allocatable != self._allocatable
            self._allocatable = allocatable
        # The runtime reads the requests, the used of the built-in quotas and the nodes.
        grew = self._sync_runtime() if moved or self._runtime is None else False
        self._limits.clear()
        return quotas_changed or grew

    def _sync_pods(
        self, snapshot: Snapshot, pods: Sequence[Object], since: Sequence[Object] | None
    ) -> None:
        """The ledger and requests from the pods changed since ``since`` (every pod when
        None or when the snapshot no longer knows what changed)."""
        changes = snapshot.changes(_POD_KIND, since) if since is not None else None
        if changes is None:
            self._usage = PodUsage(self._index, pods)
        else:
            self._usage.index = self._index
            self._usage.update(changes)
        self._charged = {
            uid: c
            for uid, c in self._charged.items()
            if isinstance(p := snapshot.get(_POD_KIND, c.pod.metadata.name, c.pod.namespace), Pod)
            and _uid(p) == uid
            and not is_assigned(p)
            and not p.is_terminated
        }
        ledger = self._usage.ledger()
        if self.args.enable_runtime_quota:
            self._requests_by_quota = self._usage.requests()
        for charge in self._charged.values():
            ledger = ledger.assign(charge.quota, charge.pod, charge.request)
        self._ledger = ledger
        self._unfolded.clear()
        self._used.clear()

    def _sync_runtime(self) -> bool:
        """Recompute the runtime quota; True when some quota's runtime grew."""
        if not self.args.enable_runtime_quota:
            self._runtime = self._runtime_limits = None
            return False
        ledger = self.ledger
        outside = ledger.usage(k.QUOTA_SYSTEM).used + ledger.usage(k.QUOTA_DEFAULT).used
        total = (self._allocatable - outside).clamp_min(0)
        before = self._runtime
        after = self._tree.runtime(self._requests_by_quota, total)
        self._runtime = after
        self._runtime_limits = after.limits()
        return before is not None and _grew(before.runtime, after.runtime)

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
        if is_reserve_pod(pod.pod):
            # A Reservation holds room for pods that are charged when they use it.
            return fw.SKIP
        quota = quota_name(pod.pod, self._index)
        if (
            quota in self._index.by_name
            and not is_non_preemptible(pod.pod)
            and not (self.args.enable_check_parent_quota and self._index.ancestors(quota))
            and self._admits(quota, pod)
        ):
            state.write(_QUOTA_KEY, quota)
            return fw.SUCCESS
        check = check_pod(
            pod.pod,
            index=self._index,
            ledger=self.ledger,
            args=self.args,
            limits=self._runtime_limits,
            request=pod.requests,
        )
        if check.verdict is Verdict.SKIP:
            return fw.SKIP
        if check.verdict is Verdict.SUCCESS:
            state.write(_QUOTA_KEY, check.quota)
            return fw.SUCCESS
        code = fw.Code.ERROR if check.verdict is Verdict.ERROR else fw.Code.UNSCHEDULABLE
        return fw.Status.of(code, check.message, plugin=NAME)

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        quota = state.get(_QUOTA_KEY, str)
        if quota:
            self._charge(quota, pod.pod, pod.requests, True)
            self._charged[pod.uid] = _Charge(quota, pod.pod, pod.requests)
        return fw.SUCCESS

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        charge = self._charged.pop(pod.uid, None)
        if charge is not None:
            self._charge(charge.quota, charge.pod, charge.request, False)


def _uid(pod: Pod) -> str:
    return pod.metadata.uid or f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"


def _grew(before: Mapping[str, ResourceList], after: Mapping[str, ResourceList]) -> bool:
    """Whether some quota's runtime is larger in some resource (or new)."""
    for name, runtime in after.items():
        old = before.get(name)
        if old is None:
            return True
        if runtime is not old and any(amount > old.get(r, 0) for r, amount in runtime.items()):
            return True
    return False
