"""Revoking borrowed resources: koord-scheduler's ``QuotaOverUsedRevokeController``
(controller-spec §4.4, last bullet; args §4.5).

A quota may borrow what other quotas lend; when their demand comes back its runtime shrinks
below what it uses. A quota whose ``used`` stays above its runtime in some resource for longer
than ``delayEvictTime`` gives pods back:

- **Which quotas**: every quota of the tree but ``koordinator-root-quota`` and
  ``koordinator-system-quota``; ``used`` and the runtime as the ElasticQuota plugin counts them
  (:mod:`controller.quota.check`, :mod:`controller.quota.tree`), compared over the names of the
  runtime (the quota's ``max``), as Kubernetes' ``LessThanOrEqual``.
- **When** (:func:`observe`): a quota is checked every ``revokePodInterval`` while some quota
  is over; it is due at the first check more than ``delayEvictTime`` after it was last seen
  within its runtime (or first seen), and that moment restarts its wait.
- **Which pods** (:func:`pods_to_revoke`): its assigned pods, least important first (lower
  priority, then the later start, then by namespace and name), without the
  non-preemptible ones (``quota.scheduling.koordinator.sh/preemptible: "false"``, held to the
  quota's min). They are dropped in that order until ``used`` fits the runtime; if it never
  does, all of them go; otherwise the dropped pods are taken back, most important first,
  each one that still fits.

Decided against upstream's accident (§9 item 9): while dropping, v1.8 masks ``used`` to the
names the dropped pod requests, so a resource a pod does not ask for drops out of the
comparison; here every resource of ``used`` stays in it.

:class:`QuotaRevokeLoop` is the thin control loop: it follows the scheduler configuration in
force (the ``ElasticQuota`` args), runs only with ``monitorAllQuotas`` and
``enableRuntimeQuota`` both true, and evicts by deleting the pod it saw (koord-scheduler goes
through the Eviction API; koordpy has no PodDisruptionBudgets to consult). Koordinator logs each
revoked pod and records no Event; koordpy records a Warning Event ``Evicted`` on it as well,
so that ``koordpy get events`` tells why the pod went.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from apis import constants as k
from apis.core import Node, Pod, pod_requests
from apis.duration import Duration
from apis.kinds import default_registry
from apis.meta import Object
from apis.quota import ElasticQuota
from apis.resources import ResourceList
from controller.errors import StoreError
from controller.events import WARNING, EventRecorder
from controller.quota.args import ElasticQuotaArgs
from controller.quota.check import (
    QuotaIndex,
    QuotaLedger,
    is_assigned,
    is_non_preemptible,
    quota_name,
    quota_requests,
)
from controller.quota.check import format_resources as _format
from controller.quota.tree import QuotaTree
from controller.scheduler.config import ConfigInForce
from controller.scheduler.plugins.elasticquota import NodeTotal
from controller.scheduler.preemption import importance_key
from controller.scheduler.profile import KOORD_SCHEDULER
from controller.store.assumed import Outbox
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops lists this loop: no import back at run time
    from controller.loops import LoopContext
    from controller.store.cluster import Cluster
    from controller.store.snapshots import Snapshot

__all__ = [
    "EVICTED",
    "Observation",
    "QuotaRevokeLoop",
    "QuotaView",
    "observe",
    "pods_to_revoke",
    "quota_views",
    "revoke_message",
]

log = logging.getLogger(__name__)

#: Reason of the Event on a revoked pod.
EVICTED: Final = "Evicted"
#: Quotas never watched (Koordinator's ``SystemQuotaName`` and ``RootQuotaName``).
_UNWATCHED: Final = frozenset({k.QUOTA_ROOT, k.QUOTA_SYSTEM})


@dataclass(frozen=True, slots=True)
class QuotaView:
    """One quota at one instant: what it uses, its runtime, and its assigned pods."""

    name: str
    used: ResourceList
    runtime: ResourceList
    pods: tuple[Pod, ...] = ()

    @property
    def exceeded(self) -> tuple[str, ...]:
        """The resources of the runtime that ``used`` is above."""
        return self.used.exceeded(self.runtime)


def quota_views(
    pods: Iterable[Pod],
    quotas: Iterable[ElasticQuota],
    allocatable: Mapping[str, int],
    args: ElasticQuotaArgs,
) -> dict[str, QuotaView]:
    """Every watched quota as the ElasticQuota plugin sees it: the runtime shared out of the
    nodes' ``allocatable`` (summed; less what the system and default quotas use), ``used`` of
    the quota's subtree, and the quota's own assigned pods."""
    pods = list(pods)
    index = QuotaIndex.build(quotas, args)
    tree = QuotaTree.build(index, enable_min_quota_scale=args.enable_min_quota_scale)
    ledger = QuotaLedger.from_pods(pods, index)
    outside = ledger.usage(k.QUOTA_SYSTEM).used + ledger.usage(k.QUOTA_DEFAULT).used
    total = (ResourceList(allocatable) - outside).clamp_min(0)
    runtime = tree.runtime(quota_requests(pods, index), total)
    assigned: dict[str, list[Pod]] = {}
    for pod in pods:
        if is_assigned(pod):
            assigned.setdefault(quota_name(pod, index), []).append(pod)
    return {
        name: QuotaView(
            name=name,
            used=ledger.subtree_used(name, index),
            runtime=runtime.of(name),
            pods=tuple(assigned.get(name, ())),
        )
        for name in index.by_name
        if name not in _UNWATCHED
    }


@dataclass(frozen=True, slots=True)
class Observation:
    """What one check found."""

    #: Quota -> when it was last seen within its runtime (or, if never, first seen).
    since: Mapping[str, datetime]
    #: The quotas above their runtime now, by name.
    over: tuple[str, ...]
    #: Those over for longer than the delay: their pods are revoked now.
    due: tuple[str, ...]


def observe(
    since: Mapping[str, datetime],
    views: Mapping[str, QuotaView],
    now: datetime,
    delay: timedelta,
) -> Observation:
    """One check at ``now``, given when each quota was last within its runtime (a quota
    ``since`` does not name starts its wait now; one ``views`` does not name is forgotten)."""
    after: dict[str, datetime] = {}
    over: list[str] = []
    due: list[str] = []
    for name in sorted(views):
        if not views[name].exceeded:
            after[name] = now
            continue
        over.append(name)
        start = since.get(name, now)
        if now - start > delay:
            due.append(name)
            start = now
        after[name] = start
    return Observation(since=after, over=tuple(over), due=tuple(due))


def _least_important_first(pod: Pod) -> tuple[int, float, str, str]:
    priority, start = importance_key(pod)
    return (-priority, -start, pod.metadata.namespace, pod.metadata.name)


def pods_to_revoke(view: QuotaView) -> tuple[Pod, ...]:
    """The pods of ``view`` to evict so that its ``used`` fits its runtime (see the module
    docstring), least important first; none while it fits."""
    used = view.used
    runtime = view.runtime
    if used.fits_in(runtime):
        return ()
    candidates = sorted(
        (pod for pod in view.pods if not is_non_preemptible(pod)),
        key=_least_important_first,
    )
    dropped: list[tuple[Pod, ResourceList]] = []
    for pod in candidates:
        if used.fits_in(runtime):
            break
        request = pod_requests(pod)
        used = used - request
        dropped.append((pod, request))
    if not used.fits_in(runtime):
        return tuple(pod for pod, _ in dropped)
    revoked: list[Pod] = []
    for pod, request in reversed(dropped):
        back = used + request
        if back.fits_in(runtime):
            used = back
        else:
            revoked.append(pod)
    return tuple(reversed(revoked))


def revoke_message(view: QuotaView, delay: timedelta) -> str:
    """The Event message on a pod revoked from ``view``'s quota."""
    return (
        f"revoked by {KOORD_SCHEDULER}: quota {view.name} used {_format(view.used)} above its"
        f" runtime {_format(view.runtime)} (in {','.join(view.exceeded)}) for longer than"
        f" delayEvictTime {delay.total_seconds():g}s"
    )


def _timedelta(duration: Duration) -> timedelta:
    return timedelta(microseconds=duration.nanoseconds / 1000)


def _args(config: object) -> ElasticQuotaArgs:
    return config if isinstance(config, ElasticQuotaArgs) else ElasticQuotaArgs()


class QuotaRevokeLoop:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring.

    ``reconcile`` returns ``revokePodInterval`` while some quota is over its runtime, else
    None (a store change wakes it, and a check is made at once)."""

    name = "quota-revoke"

    def __init__(self, args: ElasticQuotaArgs | None = None) -> None:
        #: The scheduler configuration followed (None: ``args`` were given).
        self._config = ConfigInForce() if args is None else None
        self._generation = -1
        self.args = args or ElasticQuotaArgs()
        self._since: Mapping[str, datetime] = {}
        #: When the next check is due (None: no quota was over at the last one).
        self._next: datetime | None = None
        #: The object views the last figures came from, and those figures.
        self._seen: tuple[Sequence[Object], ...] | None = None
        self._views: dict[str, QuotaView] = {}
        self._nodes = NodeTotal()
        self._allocatable = ResourceList()
        self._recorder: tuple[Cluster, EventRecorder] | None = None
        #: the revocations sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=(default_registry().for_type(Pod),))

    def share_configuration(self, shared: ConfigInForce) -> None:
        """Follow ``shared``, the configuration the scheduler loop follows (a loop built with
        ``args`` keeps them)."""
        if self._config is not None:
            self._config, self._generation = shared, -1

    @property
    def enabled(self) -> bool:
        """``monitorAllQuotas`` and ``enableRuntimeQuota`` of the args in force."""
        return self.args.monitor_all_quotas and self.args.enable_runtime_quota

    def _events(self, store: Cluster, ctx: LoopContext) -> EventRecorder:
        if self._recorder is None or self._recorder[0] is not store:
            self._recorder = (store, EventRecorder(store, component=KOORD_SCHEDULER, clock=ctx.now))
        return self._recorder[1]

    def _follow(self, ctx: LoopContext, snapshot: Snapshot) -> None:
        if self._config is None:
            return
        store = ctx.store
        config = self._config.poll(snapshot, store.registry, self._events(store, ctx))
        if self._generation == self._config.generation:
            return
        self._generation = self._config.generation
        self.args = _args(config.plugin_args("ElasticQuota") if config is not None else None)
        # A new configuration is a restarted koord-scheduler: every wait starts afresh.
        self._since, self._next, self._seen = {}, None, None
        log.info(
            "quota revocation %s (revokePodInterval %s, delayEvictTime %s)",
            "on" if self.enabled else "off",
            self.args.revoke_pod_interval,
            self.args.delay_evict_time,
        )

    def _current(self, store: Cluster, snapshot: Snapshot) -> dict[str, QuotaView]:
        registry = store.registry
        seen = (
            snapshot.objects(registry.for_type(Pod)),
            snapshot.objects(registry.for_type(ElasticQuota)),
        )
        # Nodes count through their allocatable only (not their heartbeats).
        allocatable = self._nodes.update(snapshot.objects(registry.for_type(Node)))
        before = self._seen
        if (
            before is None
            or any(a is not b for a, b in zip(seen, before, strict=True))
            or allocatable != self._allocatable
        ):
            pods, quotas = seen
            self._views = quota_views(
                (p for p in pods if isinstance(p, Pod)),
                (q for q in quotas if isinstance(q, ElasticQuota)),
                allocatable,
                self.args,
            )
            self._seen, self._allocatable = seen, allocatable
        return self._views

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        snapshot = self._outbox.over(store.snapshot())
        self._follow(ctx, snapshot)
        if not self.enabled:
            self._since, self._next, self._seen = {}, None, None
            return None
        now = ctx.now()
        interval = _timedelta(self.args.revoke_pod_interval)
        if self._next is not None and now < self._next:
            return (self._next - now).total_seconds()
        if self._next is None:
            # No quota was over at the last check and none has been since: every wait
            # starts now.
            self._since = {}
        views = self._current(store, snapshot)
        delay = _timedelta(self.args.delay_evict_time)
        seen = observe(self._since, views, now, delay)
        self._since = seen.since
        for name in seen.due:
            self._revoke(store, ctx, views[name], pods_to_revoke(views[name]), delay)
        if not seen.over:
            self._next = None
            return None
        self._next = now + interval
        return interval.total_seconds()

    def _revoke(
        self,
        store: Cluster,
        ctx: LoopContext,
        view: QuotaView,
        pods: Sequence[Pod],
        delay: timedelta,
    ) -> None:
        kind = store.registry.for_type(Pod)
        message = revoke_message(view, delay)
        doomed = [pod for pod in pods if pod.metadata.deletion_timestamp is None]  # not going
        self._outbox.send(
            store,
            [Write.delete_of(kind, pod, precondition=True) for pod in doomed],
            functools.partial(self._revoked, store, ctx, view, doomed, message),
        )

    def _revoked(
        self,
        store: Cluster,
        ctx: LoopContext,
        view: QuotaView,
        pods: Sequence[Pod],
        message: str,
        results: Sequence[Result],
    ) -> None:
        for pod, result in zip(pods, results, strict=True):
            if isinstance(result, StoreError):
                log.warning(
                    "revoking pod %s/%s of quota %s failed: %s",
                    pod.metadata.namespace,
                    pod.metadata.name,
                    view.name,
                    result,
                )
                continue
            log.info(
                "pod %s/%s revoked: quota %s used %s, runtime %s",
                pod.metadata.namespace,
                pod.metadata.name,
                view.name,
                _format(view.used),
                _format(view.runtime),
            )
            self._events(store, ctx).record(pod, type=WARNING, reason=EVICTED, message=message)
