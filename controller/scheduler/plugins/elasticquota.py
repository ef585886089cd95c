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
from controller.quota.check import QuotaIndex, QuotaLedger, Verdict, check_pod, is_assigned
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
        return self._ledger

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
        return quotas_changed

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
        check = check_pod(
            pod.pod, index=self._index, ledger=self._ledger, args=self.args, request=pod.requests
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
            self._ledger = self._ledger.assign(quota, pod.pod, pod.requests)
            self._charged[pod.uid] = _Charge(quota, pod.pod, pod.requests)
        return fw.SUCCESS

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        charge = self._charged.pop(pod.uid, None)
        if charge is not None:
            self._ledger = self._ledger.release(charge.quota, charge.pod, charge.request)


def _uid(pod: Pod) -> str:
    return pod.metadata.uid or f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"
