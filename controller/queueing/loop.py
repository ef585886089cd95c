"""The ``queueing`` control loop: feeds the admission engine from the store, writes its decisions.

Each pass (:meth:`QueueingLoop.reconcile`):

1. **Reads changes only.** The loop watches QueueUnits, Queues, ElasticQuotas, Nodes, Pods and
   AdmissionChecks and applies just what changed since the last pass (a watch that fell
   behind is reopened and its kind read whole), so a pass costs what changed, not what is
   stored. On a new store (a restart) everything is read again and the charges are rebuilt
   from ``status.admissions`` before any admission.
2. **Quotas.** A changed ElasticQuota rebuilds the quota index and tree; the queue of every
   quota (and of ``koordinator-default-quota``) is created, updated or deleted in the queue
   namespace (controller-owned queues only, label ``create-by-kubequeue``).
3. **Runtime quota.** When demand (the units' requests, pending and admitted, plus pods outside
   the queue), quotas or nodes changed, the water-filled runtime of every quota is computed
   over the cluster total (Σ node allocatable); resources no node reports are limited by
   ``max`` only.
4. **Admission cycle** (:meth:`Engine.cycle`), then the writes: an admitted unit gets
   ``status.admissions`` (summed per pod set), phase ``Dequeued`` (``Reserved`` with its
   admission checks ``Pending`` when the queue names checks that select it), message
   ``Dequeued because schedule successfully``, ``lastUpdateTime``/``lastAllocateTime``,
   ``spec.queue`` and a ``Scheduled`` Event; a refused unit its reason in ``status.message``
   and the ``QuotaReserved=False`` condition and a ``FailedScheduling`` Warning, written only
   when the reason changed (the other units of a refused class and reasons whose amounts
   moved are refreshed with the queue status); an evicted unit phase ``Enqueued``, no
   admissions, ``Evicted=True`` with the reason, and an Event.
5. **Admission checks** of Reserved units: the built-in checkers decide the checks their
   ``controllerName`` names; all Ready -> ``Dequeued``; a Retry releases the quota and backs
   the unit off (``TimeoutBackoff`` with ``requeueState``: 10 s doubling to 15 min, ±10 %),
   a Rejected deactivates it (``spec.active=false``, evicted ``Deactivated``).
6. **Time limits**: a backed-off unit whose ``requeueAt`` passed is ``Enqueued`` again; an
   admitted unit with ``spec.active=false`` is evicted (``Deactivated``); a Running unit past
   ``maximumExecutionTimeSeconds`` (counted while ``PodsReady=True``, banked across
   evictions) is deactivated with reason ``MaximumExecutionTimeExceeded``.
7. **Visibility**, every ``status_interval`` (15 s by default, the Queue annotation
   ``queue-items-refresh-interval`` overrides it per queue): ``status.queueItemDetails.active``
   with 1-based positions and the ``koordpy.io/admission-rate`` annotation on each Queue, the
   waiting units' reasons, and the quotas' ``status.used`` and runtime/request annotations.

Writes are sent, never waited on (:class:`~controller.store.assumed.Outbox`): a pass's unit
writes, its queue writes and its status writes each go out as one batch, and their results are
handled when they arrive (at once from a local backend, else at the start of a later pass).
A unit stays ``updating`` (never admitted, charged or evicted twice) until the watch shows its
write; one whose write failed is read again in full, so what the pass charged or gave back for
it follows the unit as stored. A Queue or quota the loop wrote is not written again before the
watch shows that write.

It returns 0 when a cycle left work, else the seconds until the next timer (backoff end,
execution deadline, status refresh), else None.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

import msgspec

from apis import constants as k
from apis.admission import AdmissionCheck
from apis.core import Node, Pod, pod_requests
from apis.duration import Duration
from apis.kinds import Kind, default_registry
from apis.meta import Object
from apis.queueing import Admission, Queue, QueueUnit, QueueUnitStatus, ReclaimState
from apis.quota import ElasticQuota
from apis.resources import ResourceList, ResourceTally
from controller.errors import StoreError
from controller.events import NORMAL, WARNING, EventRecorder
from controller.queueing import admissionchecks as checks
from controller.queueing import phases
from controller.queueing.checkers import CHECKERS, CheckContext, free_capacity
from controller.queueing.engine import Admitted, Engine, Eviction
from controller.queueing.framework import QueueConfig
from controller.queueing.metrics import QueueingMetrics, QueueingSnapshot, QuotaStatusSample
from controller.queueing.plugins import Plugins
from controller.queueing.plugins.elasticquota import queue_policy
from controller.queueing.units import (
    MAX_JOBS,
    UnitInfo,
    same_for_engine,
    unit_info,
    unit_key,
    unit_quota_label,
)
from controller.queueing.visibility import (
    ANNOTATION_QUEUE_ADMISSION_RATE,
    AdmissionRate,
    format_rate,
    queue_item_details,
)
from controller.quota.check import QuotaIndex, QuotaSums, quota_name
from controller.quota.status import child_request, quota_status
from controller.quota.tree import QuotaTree, RuntimeQuota
from controller.store.assumed import Outbox, before_write
from controller.store.cluster import Cluster, Outcome, Result, Verb, Write
from controller.store.watching import EventType, Watch

if TYPE_CHECKING:
    from controller.loops import LoopContext

__all__ = ["COMPONENT", "DEQUEUED_MESSAGE", "QueueingLoop", "queue_config"]

log = logging.getLogger(__name__)

COMPONENT: Final = "koord-queue"
DEQUEUED_MESSAGE: Final = "Dequeued because schedule successfully"
RESERVED_MESSAGE: Final = "Reserved resources success, waiting admission checks to be ready"
REQUEUED_MESSAGE: Final = "Enqueued because backoff timeout"
RECLAIM_MESSAGE: Final = "Waiting job extension to reclaim resources."
SCHEDULED: Final = "Scheduled"
FAILED_SCHEDULING: Final = "FailedScheduling"
#: How often queue positions, waiting reasons and quota status are refreshed (seconds).
STATUS_INTERVAL: Final = 15.0

_REGISTRY = default_registry()
_UNIT = _REGISTRY.for_type(QueueUnit)
_QUEUE = _REGISTRY.for_type(Queue)
_QUOTA = _REGISTRY.for_type(ElasticQuota)
_NODE = _REGISTRY.for_type(Node)
_POD = _REGISTRY.for_type(Pod)
_CHECK = _REGISTRY.for_type(AdmissionCheck)
_WATCHED: Final = (_UNIT, _QUEUE, _QUOTA, _NODE, _POD, _CHECK)


def _annotation(annotations: Mapping[str, str], key: str) -> str:
    value = annotations.get(key)
    if value is None:
        legacy = k.QUEUE_LEGACY_KEYS.get(key)
        value = annotations.get(legacy) if legacy else None
    return value or ""


def _int(text: str, default: int | None, what: str, queue: str) -> int | None:
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        log.warning("queue %s: ignoring %s %r: not an integer", queue, what, text)
        return default


def queue_config(queue: Queue) -> QueueConfig:
    """What the engine uses of a Queue object (both annotation prefixes are read)."""
    ann = queue.metadata.annotations
    name = queue.metadata.name
    available = _annotation(ann, k.ANNOTATION_QUEUE_AVAILABLE_QUOTA) or _annotation(
        ann, k.ANNOTATION_QUEUE_AVAILABLE_QUOTA_IN_QUEUE
    )
    return QueueConfig(
        name=name,
        namespace=queue.metadata.namespace,
        policy=queue_policy(queue.spec.queue_policy),
        priority=queue.spec.priority or 0,
        wait_for_pods_running=_annotation(ann, k.ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING) == "true",
        enable_preemption=_annotation(ann, k.ANNOTATION_QUEUE_ENABLE_QUEUEUNIT_PREEMPTION)
        == "true",
        max_depth=_int(_annotation(ann, k.ANNOTATION_QUEUE_MAX_DEPTH), None, "max-depth", name),
        priority_threshold=_int(
            _annotation(ann, k.ANNOTATION_QUEUE_PRIORITY_THRESHOLD), 4, "priority-threshold", name
        )
        or 0,
        admission_checks=queue.spec.admission_checks,
        available_quotas=frozenset(q.strip() for q in available.split(",") if q.strip()),
        owned=queue.metadata.labels.get(k.LABEL_QUEUE_CREATED_BY_KUBEQUEUE) == "true",
        obj=queue,
    )


def _refresh_interval(queue: Queue, default: float) -> float:
    text = _annotation(queue.metadata.annotations, k.ANNOTATION_QUEUE_ITEMS_REFRESH_INTERVAL)
    if text:
        try:
            seconds = Duration.parse(text).nanoseconds / 1e9
            if seconds > 0:
                return seconds
        except ValueError:
            log.warning("queue %s: ignoring refresh interval %r", queue.metadata.name, text)
    return default


def _is_queue_pod(pod: Pod) -> bool:
    """Pods a job released for a QueueUnit are charged through the unit, not one by one."""
    meta = pod.metadata
    return (
        k.LABEL_SCHEDULE_ADMISSION in meta.labels
        or k.ANNOTATION_RELATED_QUEUEUNIT in meta.annotations
        or k.ANNOTATION_RELATED_QUEUEUNIT_LEGACY in meta.annotations
    )


#: What a pod outside the queue adds to its quota: the quota, its request, the ledger holder
#: it is charged as once bound ("" while unbound) and whether it is non-preemptible.
_Share = tuple[str, ResourceList, str, bool]


@dataclass(slots=True)
class _Written:
    """What the loop last wrote of a waiting unit's reason."""

    message: str
    at: float


#: (kind key, namespace, name) of a Queue or ElasticQuota
_ObjectKey = tuple[str, str, str]


@dataclass(slots=True)
class _Unseen:
    """A Queue or ElasticQuota write the loop sent that its watches have not shown yet (they
    may show a loop's own writes late, as snapshots may): while it is unseen the loop does not
    write the object again from the state before it."""

    #: the resourceVersion the write replaced; "" for a create, None for a delete
    replaced: str | None
    uid: str
    write: Write


def _before_write(entry: _Unseen, seen: Object | None) -> bool:
    """Whether ``seen`` (what the watch shows now) is still the state ``entry``'s write
    changed (the rule :class:`~controller.store.assumed.Assumed` follows)."""
    return before_write(entry.replaced, entry.uid, seen)


def _object_key(obj: Object) -> _ObjectKey:
    meta = obj.metadata
    return (_REGISTRY.for_type(type(obj)).key, meta.namespace, meta.name)


class QueueingLoop:
    """Koord-Queue admission as a control loop (see the module docstring)."""

    name = "queueing"

    def __init__(
        self,
        plugins: Plugins | Callable[[], Plugins] | None = None,
        *,
        reclaim_min_runtime: float = 60.0,
        status_interval: float = STATUS_INTERVAL,
        rand: Callable[[], float] | None = None,
        metrics: QueueingMetrics | None = None,
    ) -> None:
        self._plugins = plugins
        self._reclaim_min_runtime = reclaim_min_runtime
        self._status_interval = status_interval
        self._rand = rand or random.Random(0x51).random
        self._metrics = metrics
        self._store: Cluster | None = None

    # -- state (reset with every new store) ----------------------------------------------------

    def _reset(self, store: Cluster, now: datetime) -> None:
        self._store = store
        #: this store's writes: results still to come from an earlier store are dropped
        self._outbox = Outbox()
        #: the Queue and ElasticQuota writes sent and not seen yet, by object
        self._unseen: dict[_ObjectKey, _Unseen] = {}
        #: the unit writes whose results are still to come, batch by batch as sent (the
        #: Outbox hands results over in that order)
        self._unit_batches: deque[Mapping[str, QueueUnit]] = deque()
        #: units read again in full at the next sync: a write of theirs failed, so what this
        #: loop decided for them (a charge, an eviction) is undone from what the store holds
        self._reread: set[tuple[str, str]] = set()
        #: uid -> the unit as its admission checks were last decided and written from, while
        #: the loop has not seen that write (decided once per state of the unit)
        self._checked: dict[str, QueueUnit] = {}
        self._uid_by_key: dict[tuple[str, str], str] = {}
        # Plugins keep state: a factory gives every store (every restart) fresh ones.
        plugins = self._plugins() if callable(self._plugins) else self._plugins
        self.engine = Engine(plugins, reclaim_min_runtime=self._reclaim_min_runtime)
        self._recorder = EventRecorder(store, component=COMPONENT, clock=self._clock)
        self._watches: dict[str, Watch] = {}
        self._objects: dict[str, dict[tuple[str, str], Object]] = {
            kind.key: {} for kind in _WATCHED
        }
        self._quotas_dirty = True
        self._requota = False
        self._default_queue_wanted = False
        self._queues_dirty = True
        self._nodes_dirty = True
        self._allocatable: dict[tuple[str, str], Mapping[str, int]] = {}
        #: the sum of the nodes' allocatable
        self._tally = ResourceTally()
        #: every pod is read again (a new store, a new quota tree); else only those changed
        self._pods_all = True
        self._changed_pods: dict[tuple[str, str], None] = {}
        #: pod key -> what it adds to its quota (pods outside the queue with a quota only)
        self._shares: dict[tuple[str, str], _Share] = {}
        #: per quota, the requests of its pods outside the queue (their shares)
        self._demand = QuotaSums()
        self._changed_units: dict[tuple[str, str], QueueUnit | None] = {}
        self._tree: QuotaTree | None = None
        self._runtime_quota: RuntimeQuota | None = None
        #: quota -> its own pods' requests, as the last runtime was computed from them
        self._own_requests: Mapping[str, Mapping[str, int]] = {}
        self._total: dict[str, int] = {}
        self._runtime_dirty = True
        self._written: dict[str, _Written] = {}
        self._rates: dict[str, AdmissionRate] = {}
        self._admitted_since: dict[str, int] = {}
        self._last_status = float("-inf")
        self._refresh: dict[str, float] = {}
        self._pass_interval = self._status_interval
        self._queue_status_at: dict[str, float] = {}
        self._status_dirty = True
        self._units_seen = False
        self._reserved: set[str] = set()
        self._timers: dict[str, float] = {}
        self._now_dt = now
        for kind in _WATCHED:
            self._open(store, kind)

    def _clock(self) -> datetime:
        return self._now_dt

    def _open(self, store: Cluster, kind: Kind) -> None:
        watch = store.watch(kind)
        self._watches[kind.key] = watch
        known = self._objects[kind.key]
        fresh: dict[tuple[str, str], Object] = {}
        for event in watch.drain():
            obj = event.object
            fresh[(obj.metadata.namespace, obj.metadata.name)] = obj
        for key in known.keys() - fresh.keys():
            self._note(kind, key, None)
        for key, obj in fresh.items():
            if known.get(key) is not obj:
                self._note(kind, key, obj)

    # -- reading changes ------------------------------------------------------------------------

    def _note(self, kind: Kind, key: tuple[str, str], obj: Object | None) -> None:
        objects = self._objects[kind.key]
        if obj is None:
            objects.pop(key, None)
        else:
            objects[key] = obj
        if kind is _UNIT:
            self._changed_units[key] = obj if isinstance(obj, QueueUnit) else None
        elif kind is _QUOTA or kind is _QUEUE:
            if kind is _QUOTA:
                self._quotas_dirty = True
            else:
                self._queues_dirty = True
            if self._unseen:
                entry_key = (kind.key, *key)
                entry = self._unseen.get(entry_key)
                if entry is not None and not _before_write(entry, obj):
                    del self._unseen[entry_key]  # seen, superseded or gone
        elif kind is _NODE:
            # Only a changed allocatable moves the cluster total (heartbeats do not).
            before = self._allocatable.pop(key, None)
            after = obj.allocatable if isinstance(obj, Node) else None
            if after is not None:
                self._allocatable[key] = after
            if before is not after and before != after:
                if before is not None:
                    self._tally.remove(before)
                if after is not None:
                    self._tally.add(after)
                self._nodes_dirty = True
        elif kind is _POD:
            self._changed_pods[key] = None

    def _drain(self, store: Cluster) -> None:
        for kind in _WATCHED:
            watch = self._watches[kind.key]
            for event in watch.drain():
                obj = event.object
                key = (obj.metadata.namespace, obj.metadata.name)
                self._note(kind, key, None if event.type is EventType.DELETED else obj)
            if watch.closed:
                log.info("queueing: %s watch fell behind; reading the kind again", kind.key)
                self._open(store, kind)

    # -- quotas, queues, units ---------------------------------------------------------------------

    def _quota_objects(self) -> list[ElasticQuota]:
        return [q for q in self._objects[_QUOTA.key].values() if isinstance(q, ElasticQuota)]

    def _sync_quotas(self, store: Cluster) -> None:
        if not self._quotas_dirty:
            return
        self._quotas_dirty = False
        quotas = self._quota_objects()
        index = QuotaIndex.build(quotas)
        if self._tree is not None and index.by_name == self.engine.index.by_name:
            return
        self.engine.set_quotas(index)
        self._tree = QuotaTree.build(index)
        self._runtime_dirty = True
        self._pods_all = True
        # A unit's quota may follow its namespace: resolve every unit again.
        self._requota = True
        for key, obj in self._objects[_UNIT.key].items():
            self._changed_units.setdefault(key, obj if isinstance(obj, QueueUnit) else None)
        self._write_queues(store, quotas)

    def _write_queues(self, store: Cluster, quotas: list[ElasticQuota]) -> None:
        needs_default = any(u.quota == k.QUOTA_DEFAULT for u in self.engine.units.values())
        desired = {
            (q.metadata.namespace, q.metadata.name): q
            for q in self.engine.plugins.mapping.desired_queues(quotas)
            # The default quota's queue is made once a unit waits for it.
            if q.metadata.name != k.QUOTA_DEFAULT or needs_default
        }
        existing = self._objects[_QUEUE.key]
        unseen = self._unseen
        # What the loop wrote and has not seen yet counts as there: it is not written again.
        shown: Mapping[tuple[str, str], Object | None] = existing
        if unseen:
            shown = dict(existing)
            for (kind_key, namespace, name), entry in unseen.items():
                if kind_key == _QUEUE.key:
                    shown[(namespace, name)] = None if entry.write.removes else entry.write.obj
        deletes: list[Write] = []
        for key, current in shown.items():
            if (
                current is not None
                and key not in desired
                and current.metadata.labels.get(k.LABEL_QUEUE_CREATED_BY_KUBEQUEUE) == "true"
            ):
                deletes.append(Write.delete_of(_QUEUE, current))
        applies: list[Write] = []
        for key, queue in desired.items():
            current = shown.get(key)
            if isinstance(current, Queue):
                if current.metadata.labels.get(k.LABEL_QUEUE_CREATED_BY_KUBEQUEUE) != "true":
                    continue  # a Queue made by hand keeps its settings
                wanted_labels = {**current.metadata.labels, **queue.metadata.labels}
                wanted_annotations = {**current.metadata.annotations, **queue.metadata.annotations}
                if (
                    current.spec.queue_policy == queue.spec.queue_policy
                    and current.spec.priority == queue.spec.priority
                    and current.metadata.labels == wanted_labels
                    and current.metadata.annotations == wanted_annotations
                ):
                    continue
                applies.append(
                    Write.apply(
                        msgspec.structs.replace(
                            current,
                            metadata=msgspec.structs.replace(
                                current.metadata,
                                labels=wanted_labels,
                                annotations=wanted_annotations,
                            ),
                            spec=msgspec.structs.replace(
                                current.spec,
                                queue_policy=queue.spec.queue_policy,
                                priority=queue.spec.priority,
                            ),
                        )
                    )
                )
            else:
                applies.append(Write.apply(queue))
        self._send_objects(store, [*deletes, *applies])

    def _send_objects(self, store: Cluster, writes: Sequence[Write]) -> None:
        """Send Queue and ElasticQuota writes (one batch), each unseen until the watches show
        it or its result says it changed nothing."""
        if not writes:
            return
        unseen = self._unseen
        for write in writes:
            obj = write.obj
            assert obj is not None
            meta = obj.metadata
            key = _object_key(obj)
            replaced: str | None = None
            if not write.removes:
                found = unseen.get(key)
                replaced = (
                    found.replaced
                    if found is not None and found.replaced is not None
                    else meta.resource_version  # an earlier write not seen yet: what it replaced
                )
            unseen[key] = _Unseen(replaced, meta.uid, write)
        self._outbox.send(store, writes, functools.partial(self._objects_written, writes))

    def _objects_written(self, writes: Sequence[Write], results: Sequence[Result]) -> None:
        """The results of Queue and ElasticQuota writes: one that failed or changed nothing
        shows no change on the watches, so it is no longer waited for."""
        unseen = self._unseen
        for write, result in zip(writes, results, strict=True):
            obj = write.obj
            assert obj is not None
            if isinstance(result, StoreError):
                meta = obj.metadata
                if isinstance(obj, Queue) and write.removes:
                    log.debug(
                        "queueing: deleting queue %s/%s: %s", meta.namespace, meta.name, result
                    )
                elif isinstance(obj, Queue) and write.verb is not Verb.UPDATE:
                    log.warning("queueing: writing a queue: %s", result)
                else:
                    log.debug("queueing: status write: %s", result)
            elif result[1] is not Outcome.UNCHANGED:
                continue
            key = _object_key(obj)
            entry = unseen.get(key)
            if entry is not None and entry.write is write:
                del unseen[key]

    def _interval(self) -> float:
        """Seconds between status passes: the shortest refresh interval any queue asks for."""
        return self._pass_interval

    def _sync_queues(self) -> None:
        if not self._queues_dirty:
            return
        self._queues_dirty = False
        self._refresh = {
            obj.metadata.name: _refresh_interval(obj, self._status_interval)
            for obj in self._objects[_QUEUE.key].values()
            if isinstance(obj, Queue)
        }
        self._pass_interval = min(self._refresh.values(), default=self._status_interval)
        configs: dict[str, QueueConfig] = {}
        for (namespace, name), obj in sorted(self._objects[_QUEUE.key].items()):
            if not isinstance(obj, Queue):
                continue
            if name in configs and namespace != k.QUEUE_NAMESPACE:
                continue
            configs[name] = queue_config(obj)
        self.engine.set_queues(configs)

    def _unit_quota(self, unit: QueueUnit) -> str:
        label = unit_quota_label(unit)
        index = self.engine.index
        if label:
            return label
        namespace = unit.metadata.namespace or "default"
        if (namespace, namespace) in index.object_keys:
            return namespace
        return index.bound.get(namespace, k.QUOTA_DEFAULT)

    def _sync_units(self, now: datetime) -> None:
        changed = self._changed_units
        if not changed:
            return
        self._changed_units = {}
        reread, self._reread = self._reread, set()
        requota = self._requota
        self._units_seen = True
        engine = self.engine
        checked = self._checked
        for key, obj in changed.items():
            if obj is None:
                uid = self._uid_by_key.pop(key, None)
                if uid is not None:
                    engine.remove(uid)
                    self._written.pop(uid, None)
                    self._reserved.discard(uid)
                    self._timers.pop(uid, None)
                    checked.pop(uid, None)
                continue
            previous = self._uid_by_key.get(key)
            before = engine.units.get(previous) if previous is not None else None
            if checked and previous is not None:
                checked.pop(previous, None)  # a new state: its checks are decided again
            if (
                before is not None
                and before.uid == (obj.metadata.uid or before.uid)
                and not requota
                and same_for_engine(before.obj, obj)
                and (not reread or key not in reread)
            ):
                engine.refresh(dataclasses.replace(before, obj=obj))
                continue
            info = unit_info(obj, self._unit_quota(obj), before)
            if previous is not None and previous != info.uid:
                engine.remove(previous)
            self._uid_by_key[key] = info.uid
            engine.upsert(info)
            if info.quota == k.QUOTA_DEFAULT and k.QUOTA_DEFAULT not in engine.queues:
                self._default_queue_wanted = True
            if info.phase == phases.RESERVED:
                self._reserved.add(info.uid)
            else:
                self._reserved.discard(info.uid)
            self._track_timers(info, now)
        self._requota = False

    def _track_timers(self, info: UnitInfo, now: datetime) -> None:
        """Backoff ends and execution deadlines of ``info`` (seconds since the epoch)."""
        uid = info.uid
        self._timers.pop(uid, None)
        status = info.obj.status
        if info.phase == phases.TIMEOUT_BACKOFF and status.requeue_state is not None:
            at = status.requeue_state.requeue_at
            if at is not None:
                self._timers[uid] = at.timestamp()
        elif info.holds and not info.active:
            self._timers[uid] = now.timestamp()
        elif info.phase == phases.RUNNING and info.obj.spec.maximum_execution_time_seconds:
            deadline = _execution_deadline(info.obj)
            if deadline is not None:
                self._timers[uid] = deadline

    # -- nodes, pods, runtime ---------------------------------------------------------------------

    def _sync_nodes(self) -> None:
        if not self._nodes_dirty:
            return
        self._nodes_dirty = False
        total = dict(self._tally.total())
        if total != self._total:
            self._total = total
            self._runtime_dirty = True

    def _share(self, pod: Object | None) -> _Share | None:
        if not isinstance(pod, Pod) or pod.is_terminated or _is_queue_pod(pod):
            return None
        quota = quota_name(pod, self.engine.index)
        if not quota:
            return None
        meta = pod.metadata
        holder = f"pod:{meta.uid or meta.namespace + '/' + meta.name}" if pod.spec.node_name else ""
        non_preemptible = meta.labels.get(k.LABEL_QUOTA_PREEMPTIBLE) == "false"
        return quota, pod_requests(pod), holder, non_preemptible

    def _add_demand(self, share: _Share, sign: int) -> None:
        self._demand.add(share[0], share[1], sign)

    def _sync_pods(self) -> None:
        """Pods outside the queue count in their quota's demand, and in used once bound.

        Only the pods changed since the last pass are read (every pod after a new quota
        tree): each one's share is taken out of its quota's demand and ledger charge and its
        new share put in, so the sums are those of reading every pod."""
        ledger = self.engine.ledger
        pods = self._objects[_POD.key]
        if self._pods_all:
            self._pods_all = False
            self._changed_pods.clear()
            before = self._shares
            demand_before = self._demand.amounts
            self._shares, self._demand = {}, QuotaSums()
            for key, pod in pods.items():
                share = self._share(pod)
                if share is not None:
                    self._shares[key] = share
                    self._add_demand(share, 1)
            charged = {s[2]: s for s in self._shares.values() if s[2]}
            for holder, (quota, request, _, non_preemptible) in charged.items():
                ledger.charge(holder, quota, request, non_preemptible=non_preemptible)
            for holder in [h for h in ledger.holders() if h.startswith("pod:")]:
                if holder not in charged:
                    ledger.release(holder)
            if charged != {s[2]: s for s in before.values() if s[2]}:
                # What pods outside the queue use shows in their quotas' status too.
                self._status_dirty = True
            if self._demand.amounts != demand_before:
                self._runtime_dirty = True
            return
        changed, self._changed_pods = self._changed_pods, {}
        touched: dict[str, dict[str, int] | None] = {}
        for key in changed:
            old = self._shares.pop(key, None)
            new = self._share(pods.get(key))
            if old == new:
                if new is not None:
                    self._shares[key] = new
                continue
            for share in (old, new):
                if share is not None and share[0] not in touched:
                    found = self._demand.amounts.get(share[0])
                    touched[share[0]] = dict(found) if found is not None else None
            if old is not None:
                self._add_demand(old, -1)
                if old[2] and (new is None or new[2] != old[2]):
                    ledger.release(old[2])
            if new is not None:
                self._shares[key] = new
                self._add_demand(new, 1)
                if new[2]:
                    ledger.charge(new[2], new[0], new[1], non_preemptible=new[3])
            if (old[2] if old else "") or (new[2] if new else ""):
                self._status_dirty = True
        if any(self._demand.amounts.get(quota) != was for quota, was in touched.items()):
            self._runtime_dirty = True

    def _sync_runtime(self) -> None:
        engine = self.engine
        if self._tree is None or not (self._runtime_dirty or engine.demand_changed):
            return
        self._runtime_dirty = False
        requests: dict[str, dict[str, int]] = {}
        for source in (engine.demand(), self._demand.amounts):
            for quota, amounts in source.items():
                total = requests.setdefault(quota, {})
                for name, amount in amounts.items():
                    if name != MAX_JOBS:
                        total[name] = total.get(name, 0) + amount
        outside = {k.QUOTA_SYSTEM, k.QUOTA_DEFAULT}
        total = dict(self._total)
        for quota in outside:
            for name, amount in engine.ledger.used(quota).items():
                if name in total:
                    total[name] -= amount
        quota_runtime = self._tree.runtime(requests, total)
        self._runtime_quota = quota_runtime
        self._own_requests = requests
        reported = {name for name, amount in self._total.items() if amount > 0}
        enforced: dict[str, dict[str, int]] = {}
        for quota in engine.index.by_name:
            if quota in outside or quota == k.QUOTA_ROOT:
                continue
            amounts = {r: v for r, v in quota_runtime.of(quota).items() if r in reported}
            if amounts:
                enforced[quota] = amounts
        engine.set_runtime(enforced)

    # -- the pass ----------------------------------------------------------------------------------

    def reconcile(self, ctx: LoopContext) -> float | None:
        now = ctx.now()
        store = ctx.store
        if store is not self._store:
            self._reset(store, now)
        self._now_dt = now
        self._outbox.collect()  # the results of earlier writes, before anything is decided
        self._drain(store)
        self._sync_quotas(store)
        self._drain(store)  # the queues just written
        self._sync_queues()
        self._sync_nodes()
        self._sync_pods()
        self._sync_units(now)
        if self._default_queue_wanted:
            self._default_queue_wanted = False
            self._write_queues(store, self._quota_objects())
            self._drain(store)
            self._sync_queues()
            self._sync_units(now)
        self._sync_runtime()
        writes: dict[str, QueueUnit] = {}
        events: list[tuple[Object, str, str, str]] = []
        self._expire_timers(now, writes, events)
        self._run_checks(now, writes, events)
        result = self.engine.cycle(now)
        for admitted in result.admitted:
            self._admit(admitted, now, writes, events)
        for eviction in result.evicted:
            self._evict(eviction, now, writes, events)
        for victim, replicas in result.reclaims:
            self._mark_reclaim(victim, replicas, now, writes, events)
        self._write_refusals(now, writes, events, everyone=False)
        if writes or result.admitted or result.evicted or self._units_seen:
            self._status_dirty = True
        self._units_seen = False
        if self._status_dirty and now.timestamp() - self._last_status >= self._interval():
            self._last_status = now.timestamp()
            self._status_dirty = False
            self._write_refusals(now, writes, events, everyone=True)
            # one held back (its last write not seen yet) is written at the next status pass
            self._status_dirty = self._write_status(store, now)
        self._flush(store, writes, events)
        if self._metrics is not None:
            for (queue, outcome), count in result.attempts.items():
                for _ in range(count):
                    self._metrics.attempt(queue, outcome)
            for _queue, seconds in result.filter_samples:
                self._metrics.algorithm_latency.observe(seconds * 1000.0)
        if result.more:
            return 0.0
        waits = [t - now.timestamp() for t in self._timers.values()]
        if self._status_dirty:
            waits.append(self._last_status + self._interval() - now.timestamp())
        return max(0.0, min(waits)) if waits else None

    # -- decisions into objects --------------------------------------------------------------------

    def _current(self, uid: str, writes: Mapping[str, QueueUnit]) -> QueueUnit | None:
        written = writes.get(uid)
        if written is not None:
            return written
        unit = self.engine.units.get(uid)
        return unit.obj if unit is not None else None

    def _admit(
        self,
        admitted: Admitted,
        now: datetime,
        writes: dict[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
    ) -> None:
        unit = self._current(admitted.unit.uid, writes)
        if unit is None:
            return
        totals = {a.name: a for a in unit.status.admissions}
        for name, replicas in admitted.replicas.items():
            before = totals.get(name)
            totals[name] = (
                Admission(name=name, replicas=replicas)
                if before is None
                else msgspec.structs.replace(before, replicas=before.replicas + replicas)
            )
        queue = self.engine.queues.get(admitted.queue)
        config = queue.config if queue is not None else None
        matched = (
            checks.matching_checks(config.obj, unit)
            if config is not None and config.obj is not None and config.admission_checks
            else ()
        )
        if matched and unit.status.phase not in (phases.DEQUEUED, phases.RUNNING):
            phase, message = phases.RESERVED, RESERVED_MESSAGE
            states = checks.reset_states(matched, now)
        else:
            phase = (
                unit.status.phase
                if unit.status.phase in (phases.DEQUEUED, phases.RUNNING)
                else phases.DEQUEUED
            )
            message, states = DEQUEUED_MESSAGE, unit.status.admission_checks
        status = msgspec.structs.replace(
            unit.status,
            phase=phase,
            message=message,
            admissions=tuple(totals.values()),
            admission_checks=states,
            last_update_time=now,
            last_allocate_time=now,
            conditions=phases.mirrored_conditions(unit.status.conditions, phase, now),
        )
        writes[admitted.unit.uid] = msgspec.structs.replace(
            unit,
            spec=msgspec.structs.replace(unit.spec, queue=admitted.queue),
            status=status,
        )
        self._written.pop(admitted.unit.uid, None)
        if self._metrics is not None:
            self._metrics.admitted(unit.metadata.creation_timestamp, now)
        self._admitted_since[admitted.queue] = self._admitted_since.get(admitted.queue, 0) + 1
        counts = ", ".join(f"{n}={r}" for n, r in sorted(admitted.replicas.items()))
        events.append(
            (
                unit,
                NORMAL,
                SCHEDULED,
                f"Admitted by queue {admitted.queue} against quota {admitted.unit.quota}"
                f" ({counts})",
            )
        )

    def _mark_reclaim(
        self,
        victim: UnitInfo,
        replicas: Mapping[str, int],
        now: datetime,
        writes: dict[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
    ) -> None:
        unit = self._current(victim.uid, writes)
        if unit is None:
            return
        admissions = tuple(
            msgspec.structs.replace(a, reclaim_state=ReclaimState(replicas=replicas[a.name]))
            if a.name in replicas
            else a
            for a in unit.status.admissions
        )
        writes[victim.uid] = msgspec.structs.replace(
            unit,
            status=msgspec.structs.replace(
                unit.status,
                admissions=admissions,
                message=RECLAIM_MESSAGE,
                last_update_time=now,
            ),
        )
        counts = ", ".join(f"{n}={r}" for n, r in sorted(replicas.items()))
        events.append((unit, WARNING, "Preempted", f"{RECLAIM_MESSAGE} ({counts})"))

    def _evicted_status(
        self, unit: QueueUnit, now: datetime, reason: str, message: str, phase: str
    ) -> QueueUnitStatus:
        banked = unit.status.accumulated_past_execution_time_seconds or 0
        ready = next(
            (c for c in unit.status.conditions if c.type == "PodsReady" and c.status == "True"),
            None,
        )
        if ready is not None and ready.last_transition_time is not None:
            banked += int((now - ready.last_transition_time).total_seconds())
        return msgspec.structs.replace(
            unit.status,
            phase=phase,
            message=message,
            admissions=(),
            last_update_time=now,
            accumulated_past_execution_time_seconds=banked or None,
            conditions=phases.mirrored_conditions(
                unit.status.conditions, phase, now, message=message, evicted_reason=reason
            ),
        )

    def _evict(
        self,
        eviction: Eviction,
        now: datetime,
        writes: dict[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
        *,
        deactivate: bool = False,
    ) -> None:
        unit = self._current(eviction.unit.uid, writes)
        if unit is None:
            return
        status = self._evicted_status(unit, now, eviction.reason, eviction.message, phases.ENQUEUED)
        if eviction.reason == phases.EVICTED_MAX_EXECUTION:
            status = msgspec.structs.replace(status, accumulated_past_execution_time_seconds=None)
        spec = msgspec.structs.replace(unit.spec, active=False) if deactivate else unit.spec
        writes[eviction.unit.uid] = msgspec.structs.replace(unit, spec=spec, status=status)
        self.engine.updating.add(eviction.unit.uid)
        events.append((unit, WARNING, "Evicted", eviction.message))

    def _expire_timers(
        self,
        now: datetime,
        writes: dict[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
    ) -> None:
        instant = now.timestamp()
        due = [uid for uid, at in self._timers.items() if at <= instant]
        for uid in due:
            del self._timers[uid]
            info = self.engine.units.get(uid)
            if info is None:
                continue
            unit = info.obj
            if info.phase == phases.TIMEOUT_BACKOFF:
                writes[uid] = msgspec.structs.replace(
                    unit,
                    status=msgspec.structs.replace(
                        unit.status,
                        phase=phases.ENQUEUED,
                        message=REQUEUED_MESSAGE,
                        last_update_time=now,
                        conditions=phases.mirrored_conditions(
                            unit.status.conditions, phases.ENQUEUED, now
                        ),
                    ),
                )
            elif info.holds and not info.active:
                self._release_in_engine(info)
                self._evict(
                    Eviction(
                        info, phases.EVICTED_DEACTIVATED, "unit deactivated (spec.active=false)"
                    ),
                    now,
                    writes,
                    events,
                )
            elif info.phase == phases.RUNNING:
                self._release_in_engine(info)
                self._evict(
                    Eviction(
                        info,
                        phases.EVICTED_MAX_EXECUTION,
                        f"exceeded maximumExecutionTimeSeconds "
                        f"({unit.spec.maximum_execution_time_seconds})",
                    ),
                    now,
                    writes,
                    events,
                    deactivate=True,
                )

    def _release_in_engine(self, info: UnitInfo) -> None:
        for plugin in self.engine.plugins.reserves:
            plugin.removed(self.engine._ctx, info)

    # -- admission checks --------------------------------------------------------------------------

    def _check_objects(self) -> dict[str, AdmissionCheck]:
        return {
            key[1]: obj
            for key, obj in self._objects[_CHECK.key].items()
            if isinstance(obj, AdmissionCheck)
        }

    def _run_checks(
        self,
        now: datetime,
        writes: dict[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
    ) -> None:
        if not self._reserved:
            return
        objects = self._check_objects()
        free: Mapping[str, Mapping[str, int]] | None = None
        for uid in sorted(self._reserved):
            info = self.engine.units.get(uid)
            if info is None or info.phase != phases.RESERVED or uid in self.engine.updating:
                continue
            unit = info.obj
            if self._checked.get(uid) is unit:
                continue  # decided and written from this state; the write is not seen yet
            states = list(unit.status.admission_checks)
            changed = False
            gate = ""
            for position, state in enumerate(states):
                blocked = checks.check_gate(state.name, objects)
                if blocked is not None:
                    gate = blocked
                    continue
                obj = objects.get(state.name)
                factory = CHECKERS.get(obj.spec.controller_name) if obj is not None else None
                if factory is None:
                    continue  # an external controller owns this check
                if free is None:
                    free = free_capacity(
                        (n for n in self._objects[_NODE.key].values() if isinstance(n, Node)),
                        (p for p in self._objects[_POD.key].values() if isinstance(p, Pod)),
                    )
                decided = factory().decide(unit, CheckContext(check=state.name, now=now, free=free))
                if decided is not None and decided != state:
                    states[position] = decided
                    changed = True
            verdict = checks.verdict(states)
            written = writes.get(uid)
            if verdict is checks.Verdict.READY:
                status = msgspec.structs.replace(
                    unit.status,
                    phase=phases.DEQUEUED,
                    message=DEQUEUED_MESSAGE,
                    admission_checks=tuple(states),
                    last_update_time=now,
                    conditions=phases.mirrored_conditions(
                        unit.status.conditions, phases.DEQUEUED, now
                    ),
                )
                writes[uid] = msgspec.structs.replace(unit, status=status)
                events.append((unit, NORMAL, SCHEDULED, "all admission checks are Ready"))
            elif verdict is checks.Verdict.RETRY:
                retry_after = max(
                    (s.requeue_after_seconds or 0 for s in states if s.state == checks.RETRY),
                    default=0,
                )
                requeue = checks.next_requeue_state(
                    unit.status.requeue_state, now, self._rand, retry_after or None
                )
                message = "admission check failed: " + ", ".join(
                    f"{s.name}: {s.message or s.state}" for s in states if s.state == checks.RETRY
                )
                self._release_in_engine(info)
                status = msgspec.structs.replace(
                    self._evicted_status(
                        unit, now, phases.EVICTED_BACKOFF, message, phases.TIMEOUT_BACKOFF
                    ),
                    admission_checks=tuple(states),
                    requeue_state=requeue,
                )
                writes[uid] = msgspec.structs.replace(unit, status=status)
                self.engine.updating.add(uid)
                events.append((unit, WARNING, "AdmissionCheckRetry", message))
            elif verdict is checks.Verdict.REJECTED:
                message = "admission check rejected: " + ", ".join(
                    f"{s.name}: {s.message or s.state}"
                    for s in states
                    if s.state == checks.REJECTED
                )
                self._release_in_engine(info)
                status = msgspec.structs.replace(
                    self._evicted_status(
                        unit, now, phases.EVICTED_DEACTIVATED, message, phases.ENQUEUED
                    ),
                    admission_checks=tuple(states),
                )
                writes[uid] = msgspec.structs.replace(
                    unit, spec=msgspec.structs.replace(unit.spec, active=False), status=status
                )
                self.engine.updating.add(uid)
                events.append((unit, WARNING, "AdmissionCheckRejected", message))
            elif changed or (gate and unit.status.message != gate):
                writes[uid] = msgspec.structs.replace(
                    unit,
                    status=msgspec.structs.replace(
                        unit.status,
                        admission_checks=tuple(states),
                        message=gate or unit.status.message,
                    ),
                )
            if writes.get(uid) is not written:
                self._checked[uid] = unit

    # -- reasons -----------------------------------------------------------------------------------

    def _write_refusals(
        self,
        now: datetime,
        writes: dict[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
        *,
        everyone: bool,
    ) -> None:
        engine = self.engine
        instant = now.timestamp()
        if everyone:
            uids: Iterable[str] = [
                uid
                for uid, unit in engine.units.items()
                if engine.is_candidate(unit) and uid not in writes
            ]
        else:
            uids = list(engine.refusals)
        for uid in uids:
            if uid in writes:
                continue
            status = engine.refusal_of(uid)
            if status is None:
                continue
            info = engine.units.get(uid)
            if info is None or not engine.is_candidate(info):
                continue
            message = status.message
            written = self._written.get(uid)
            if written is None and info.obj.status.message == message:
                self._written[uid] = _Written(message, instant)
                continue
            if written is not None and written.message == message:
                continue
            if written is not None and not everyone and _same_reason(written.message, message):
                continue  # only the amounts moved: refreshed with the queue status
            self._written[uid] = _Written(message, instant)
            unit = info.obj
            phase = unit.status.phase or phases.ENQUEUED
            writes[uid] = msgspec.structs.replace(
                unit,
                status=msgspec.structs.replace(
                    unit.status,
                    phase=phase,
                    message=message,
                    last_update_time=now,
                    conditions=phases.mirrored_conditions(
                        unit.status.conditions, phase, now, message=message
                    ),
                ),
            )
            if uid in engine.refusals:
                events.append((unit, WARNING, FAILED_SCHEDULING, message))

    # -- status of queues and quotas ---------------------------------------------------------------

    def _write_status(self, store: Cluster, now: datetime) -> bool:
        """Write the queues' and quotas' status (one batch); whether one was held back because
        the loop's last write of it is not seen yet (it is written at the next status pass,
        from the state the write made)."""
        engine = self.engine
        writes: list[Write] = []
        unseen = self._unseen
        held = False
        instant = now.timestamp()
        for name, queue in engine.queues.items():
            obj = queue.config.obj
            if obj is None:
                continue
            interval = self._refresh.get(name, self._status_interval)
            if instant - self._queue_status_at.get(name, float("-inf")) < interval - 1e-6:
                continue
            if unseen and _object_key(obj) in unseen:
                held = True
                continue
            self._queue_status_at[name] = instant
            rate = self._rates.get(name, AdmissionRate()).update(
                now, self._admitted_since.pop(name, 0)
            )
            self._rates[name] = rate
            annotations = dict(obj.metadata.annotations)
            disabled = _annotation(annotations, k.ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS)
            show = not (
                k.ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS in annotations
                or k.ANNOTATION_QUEUE_DISABLE_SHOW_QUEUE_ITEMS_LEGACY in annotations
                or disabled
            )
            details = (
                queue_item_details(
                    [(u.name, u.namespace, u.priority) for u in engine.ordered(name)]
                )
                if show
                else obj.status.queue_item_details
            )
            annotations[ANNOTATION_QUEUE_ADMISSION_RATE] = format_rate(rate)
            if details == obj.status.queue_item_details and annotations == obj.metadata.annotations:
                continue
            writes.append(
                Write.update(
                    msgspec.structs.replace(
                        obj,
                        metadata=msgspec.structs.replace(obj.metadata, annotations=annotations),
                        status=msgspec.structs.replace(obj.status, queue_item_details=details),
                    )
                )
            )
        runtime = self._runtime_quota
        if self._metrics is not None:
            self._metrics.observe(self._snapshot(runtime))
        for quota in self._quota_objects():
            if unseen and _object_key(quota) in unseen:
                held = True
                continue
            name = quota.metadata.name
            used = ResourceList(
                {r: v for r, v in engine.ledger.used(name).items() if r != MAX_JOBS and v}
            )
            pinned = ResourceList(
                {
                    r: v
                    for r, v in engine.ledger.non_preemptible_used(name).items()
                    if r != MAX_JOBS and v
                }
            )
            enforced = engine.runtime.get(name, {})
            limit = {r: enforced.get(r, v) for r, v in quota.spec.max.items() if r != MAX_JOBS}
            updated = quota_status(
                quota,
                used=used,
                runtime=ResourceList(limit),
                request=runtime.request.get(name, ResourceList())
                if runtime is not None
                else ResourceList(),
                child_request=child_request(
                    quota,
                    own=self._own_requests.get(name),
                    children=runtime.child_request.get(name) if runtime is not None else None,
                    ignore=(MAX_JOBS,),
                ),
                non_preemptible_used=pinned,
            )
            if updated is not None:
                writes.append(Write.update(updated))
        self._send_objects(store, writes)
        return held

    def _snapshot(self, runtime: RuntimeQuota | None) -> QueueingSnapshot:
        engine = self.engine
        backoff: dict[str, int] = {}
        for info in engine.units.values():
            if info.phase == phases.TIMEOUT_BACKOFF:
                queue = engine.queue_of(info.uid) or info.quota
                backoff[queue] = backoff.get(queue, 0) + 1
        samples = []
        for quota in self._quota_objects():
            name = quota.metadata.name
            labels = quota.metadata.labels
            samples.append(
                QuotaStatusSample(
                    name=name,
                    tree=labels.get(k.LABEL_QUOTA_TREE_ID, ""),
                    is_parent=labels.get(k.LABEL_QUOTA_IS_PARENT) == "true",
                    parent=labels.get(k.LABEL_QUOTA_PARENT) or k.QUOTA_ROOT,
                    used={r: v for r, v in engine.ledger.used(name).items() if r != MAX_JOBS},
                    runtime=dict(engine.runtime.get(name, quota.spec.max)),
                    request=dict(runtime.request.get(name, {})) if runtime is not None else {},
                    min=dict(quota.spec.min),
                    max=dict(quota.spec.max),
                )
            )
        return QueueingSnapshot(
            active={name: engine.pending_count(name) for name in engine.queues},
            backoff=backoff,
            quotas=tuple(samples),
        )

    def _flush(
        self,
        store: Cluster,
        writes: Mapping[str, QueueUnit],
        events: list[tuple[Object, str, str, str]],
    ) -> None:
        if writes:
            self._unit_batches.append(writes)
            self._outbox.send(
                store,
                [Write.update(unit) for unit in writes.values()],
                functools.partial(self._units_written, writes),
            )
        if events:
            try:
                self._recorder.record_many(events)
            except StoreError as err:
                log.debug("queueing: events: %s", err)

    def _units_written(self, sent: Mapping[str, QueueUnit], results: Sequence[Result]) -> None:
        """The results of one pass's unit writes (that pass's or a later one's end).

        A unit whose write failed (someone else wrote it meanwhile, or the store refused)
        keeps what the store holds: what the pass decided for it is forgotten and the unit is
        read again in full at the next sync, so what a cycle charged (or an eviction gave
        back) follows the unit as stored. Until then the unit stayed ``updating``, so nothing
        was decided for it twice. A failure is ignored when a later write of the unit is still
        in flight: that one was decided from a newer state, and its own result counts."""
        batches = self._unit_batches
        if batches and batches[0] is sent:
            batches.popleft()
        elif sent in batches:
            batches.remove(sent)
        for (uid, unit), result in zip(sent.items(), results, strict=True):
            if not isinstance(result, StoreError):
                continue
            log.info("queueing: unit %s/%s not written: %s", *unit_key(unit), result)
            if any(uid in later for later in batches):
                continue
            self.engine.updating.discard(uid)
            key = unit_key(unit)
            known = self._objects[_UNIT.key].get(key)
            self._changed_units[key] = known if isinstance(known, QueueUnit) else None
            self._reread.add(key)
            self._written.pop(uid, None)
            self._checked.pop(uid, None)


def _same_reason(before: str, after: str) -> bool:
    """Two reasons naming the same quota and resource (only the amounts differ)."""
    return before.split(";", 1)[0] == after.split(";", 1)[0]


def _execution_deadline(unit: QueueUnit) -> float | None:
    budget = unit.spec.maximum_execution_time_seconds
    if not budget:
        return None
    ready = next(
        (c for c in unit.status.conditions if c.type == "PodsReady" and c.status == "True"), None
    )
    if ready is None or ready.last_transition_time is None:
        return None
    banked = unit.status.accumulated_past_execution_time_seconds or 0
    return ready.last_transition_time.timestamp() + max(0, budget - banked)
