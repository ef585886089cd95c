"""``ElasticQuota``: a pod is admitted only while its quota holds it (controller-spec §4.4).

An adapter over :mod:`controller.quota`:

- **sync**: the :class:`~controller.quota.QuotaIndex` is rebuilt from the ElasticQuota objects
  and the :class:`~controller.quota.QuotaLedger` from the assigned pods whenever either
  changed; pods this plugin reserved that the snapshot does not show assigned yet (bound in
  this pass, or waiting in Permit) stay charged. A changed quota releases the unschedulable
  pods.
- **PreFilter**: :func:`~controller.quota.check_pod` against ``spec.max`` (the runtime quota
  of the quota tree is not computed yet): ``Insufficient quotas, quotaName: <q>, runtime:
  .., used: .., pod's request: .., exceedDimensions: [..]`` (Unschedulable); a pod of no
  quota is skipped.
- **Reserve** / **Unreserve**: the pod's request is charged to / released from its quota, so
  the pods placed later in the same pass see it.

Per pod the common case is cheap: the plugin keeps each touched quota's ``used`` as plain
amounts in step with its charges, and a pod whose quota holds ``used + request`` (a
preemptible pod, no parent check) is admitted from those amounts without building a new
:class:`~controller.quota.QuotaLedger`; charges are folded into the ledger only when it is
read (the full :func:`~controller.quota.check_pod` runs, and words the message, whenever the
quick test is not conclusive).

Not done here: the PostFilter (quota-aware preemption; :func:`~controller.quota.
preemption_policy` is its core), the runtime quota, hook plugins, over-use revocation.
Its args are :class:`controller.quota.args.ElasticQuotaArgs`.
"""

from __future__ import annotations

from dataclasses import dataclass

from apis.core import Pod, pod_requests
from apis.kinds import default_registry
from apis.meta import Object
from apis.quota import ElasticQuota as ElasticQuotaObject
from apis.resources import ResourceList
from controller.quota.args import ElasticQuotaArgs
from controller.quota.check import (
    QuotaIndex,
    QuotaLedger,
    Verdict,
    check_pod,
    is_assigned,
    is_non_preemptible,
    quota_name,
)
from controller.scheduler import framework as fw
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.snapshots import Snapshot

__all__ = ["ElasticQuota"]

NAME = "ElasticQuota"
#: CycleState key: the pod's quota name, from PreFilter to Reserve.
_QUOTA_KEY = f"{NAME}/quota"

_REGISTRY = default_registry()
_POD_KIND = _REGISTRY.for_type(Pod)
_QUOTA_KIND = _REGISTRY.for_type(ElasticQuotaObject)


@dataclass(frozen=True, slots=True)
class _Charge:
    quota: str
    pod: Pod
    request: ResourceList


class ElasticQuota:
    """PreFilter, Reserve and Unreserve of the quota check."""

    name = NAME

    def __init__(self, args: ElasticQuotaArgs) -> None:
        self.args = args
        self._index = QuotaIndex.build((), args)
        self._ledger = QuotaLedger()
        #: Charges (quota, pod, request, assign?) made since ``_ledger`` was last folded.
        self._unfolded: list[tuple[str, Pod, ResourceList, bool]] = []
        #: quota -> its used amounts, with every charge of the pass (quotas touched only).
        self._used: dict[str, dict[str, int]] = {}
        #: quota -> its max as a plain dict (quotas checked only; rebuilt with the index).
        self._limits: dict[str, dict[str, int]] = {}
        self._views: tuple[tuple[Object, ...], tuple[Object, ...]] | None = None
        #: uid -> what Reserve charged, until the snapshot shows the pod assigned.
        self._charged: dict[str, _Charge] = {}
        #: uid -> (the pod object, its request): requests computed once per object.
        self._requests: dict[str, tuple[Pod, ResourceList]] = {}

    @property
    def index(self) -> QuotaIndex:
        return self._index

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
        """The quick test: ``used + request`` within the quota's max over the requested names
        (only conclusive for a preemptible pod without the parent check)."""
        limit = self._limits.get(quota)
        if limit is None:
            limit = self._limits[quota] = dict(self._index.by_name[quota].spec.max)
        used = self._used_of(quota)
        requests = pod.requests
        for resource in requests:
            cap = limit.get(resource)
            if cap is not None and used.get(resource, 0) + requests[resource] > cap:
                return False
        return True

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        pods = snapshot.objects(_POD_KIND)
        quotas = snapshot.objects(_QUOTA_KIND)
        if self._views is not None and self._views[0] is pods and self._views[1] is quotas:
            return False
        quotas_changed = self._views is None or self._views[1] is not quotas
        self._views = (pods, quotas)
        if quotas_changed:
            before = self._index
            self._index = QuotaIndex.build(
                (q for q in quotas if isinstance(q, ElasticQuotaObject)), self.args
            )
            self._limits.clear()
            quotas_changed = before.by_name != self._index.by_name
        typed = [p for p in pods if isinstance(p, Pod)]
        pending = {_uid(p) for p in typed if not is_assigned(p) and not p.is_terminated}
        self._charged = {uid: c for uid, c in self._charged.items() if uid in pending}
        requests: dict[str, tuple[Pod, ResourceList]] = {}

        def requests_of(pod: Pod) -> ResourceList:
            uid = _uid(pod)
            cached = self._requests.get(uid)
            request = cached[1] if cached is not None and cached[0] is pod else pod_requests(pod)
            requests[uid] = (pod, request)
            return request

        ledger = QuotaLedger.from_pods(typed, self._index, requests_of=requests_of)
        self._requests = requests
        for charge in self._charged.values():
            ledger = ledger.assign(charge.quota, charge.pod, charge.request)
        self._ledger = ledger
        self._unfolded.clear()
        self._used.clear()
        return quotas_changed

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
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
            pod.pod, index=self._index, ledger=self.ledger, args=self.args, request=pod.requests
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
