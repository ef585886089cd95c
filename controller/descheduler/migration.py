"""The ``migration`` control loop: PodMigrationJobs from Pending to an end (controller-spec §6.2).

A PodMigrationJob (PMJ) names one pod (``spec.podRef``) to move. Each pass looks at every PMJ:

1. **Scavenger.** A PMJ older than its TTL plus 5 minutes (30 minutes when ``ttl`` is ``0s``) is
   deleted, and its reservation with it, whatever its phase.
2. **Final and held.** ``Succeeded``, ``Failed`` and ``Aborted`` PMJs stay as they are; so does
   one with ``spec.paused`` (its timeout does not run either).
3. **Timeout.** Past ``creationTimestamp + ttl`` (``spec.ttl``, else 5 minutes; ``0s``: never)
   a PMJ is ``Failed``, reason ``Timeout``, and its reservation deleted. (A PMJ a user sets to
   ``Failed`` or ``Aborted`` is left alone too.)
4. **Arbitration.** ``Pending`` PMJs are taken in the order of :func:`arbitration_order`: those
   of workloads with fewer migrating pods first; within that, the PMJs of one workload together;
   then the least important pod first (:mod:`~controller.descheduler.podsort`); then the oldest
   (creation time, then name). A PMJ whose pod is gone (or has another uid than ``podRef.uid``)
   is ``Failed``, reason ``MissingPod``, message ``Abort job caused by missing Pod
   "<ns>/<name>"``; one whose pod has ``scheduling.koordinator.sh/eviction-cost: 2147483647``
   (and not ``descheduler.alpha.kubernetes.io/evict``) is ``Failed``, reason
   ``ForbiddenMigratePod``, message ``Pod "<ns>/<name>" is forbidden to migrate because it does
   not meet the requirements``. The others become ``Running`` (``podRef.uid`` filled in) while
   the limits hold, counted over the ``Running`` PMJs and those admitted before it in the same
   pass: migrating pods per node (``maxMigratingPerNode``, 2), per namespace, globally (these
   three: 0 or unset is no limit), per workload (the pod's controller), and the unavailable pods
   of the workload (its pods that are not Ready, plus its migrating ones) below
   ``maxUnavailablePerWorkload``. The two workload limits take an int or a percentage of the
   workload's live pods; unset, they are 10 % of them above 10 pods, 2 from 4 to 10, else 1, and
   never below 1 or above the pod count. A PMJ over a limit stays ``Pending`` and is looked at
   again on the next change. Last come the object limiters (``objectLimiters``,
   :mod:`.migrationrates`): a PMJ within every limit takes a token from its pod's workload
   bucket (``maxMigrating`` per ``duration``, 0: the workload's ``maxMigratingPerWorkload``;
   ``burst`` 0: 1) and namespace bucket; without one it stays ``Pending`` (held by
   ``objectLimiters.workload`` or ``objectLimiters.namespace``) and the loop runs again when the
   token is due. Upstream makes such a job ``Running`` and requeues it; here it holds no
   migrating slot meanwhile.
5. **ReservationFirst** (the default mode), one step per pass as far as the cluster allows:

   a. create a Reservation named after the PMJ's uid from the pod: the pod's labels and
      annotations (less the quota labels, the queue's admission label and pod-set
      annotations, and ``reservation-allocated``: a reservation is not charged to the pod's
      quota, its replacement is) and spec, ``nodeName`` cleared and a required node
      anti-affinity (``metadata.name NotIn [current node]``) added to every term; owners the
      pod's controller reference (the pod itself when it has none), ``allocateOnce: true``,
      the PMJ's TTL, label ``scheduling.koordinator.sh/reservation-order=<unix ms>``;
      ``spec.reservationOptions.reservationRef`` points at it; condition
      ``ReservationCreated`` (a refused creation: ``Failed``, reason
      ``FailedCreateReservation``). A PMJ with ``reservationOptions.template`` gets that
      reservation instead: its labels, annotations and spec, kept off the pod's node the same
      way, with the owners, TTL and ``allocateOnce`` above where the template leaves them
      unset. A reservation named in ``reservationRef`` beforehand is
      used instead of creating one (``MissingReservation`` when there is none). A pod without
      ``priority`` gives the template priority 0, as an API server would have admitted it (a
      reservation of no priority is placed with the highest);
   b. wait for the scheduler: a placed reservation gives ``ReservationScheduled`` and
      ``status.nodeName`` (on the pod's own node: ``Failed``, ``ForbiddenMigratePod``); while
      it is ``Pending`` with ``Scheduled=False`` the PMJ carries condition
      ``ReservationScheduled=False``, reason ``Unschedulable`` and the scheduler's message, and
      waits (until its timeout, as v1.8); an expired reservation fails it with
      ``ReservationExpired``, a vanished one with ``MissingReservation``; in every failure
      the reservation is deleted and the pod left alone;
   c. evict the pod, as its eviction policy and delete options say (:mod:`.evictionpolicy`:
      ``Eviction`` and ``Delete`` delete it, ``SoftEviction`` annotates it and leaves the
      deletion to its owner), then a Warning Event ``Evicted`` on it naming the PMJ, its trigger
      and its ``koordinator.sh/evict-reason`` (``deleteOptions.dryRun: [All]``: nothing is
      written to the pod, a Normal Event ``EvictionProposed``); condition ``Eviction=False``,
      reason ``Evicting``, until the pod is gone or replaced by another of its name, then
      ``Eviction=True``, reason ``EvictComplete`` (a dry run: at once; a refused write: reason
      ``FailedEvict``, tried again). Each eviction takes an ``evictQPS``/``evictBurst`` token
      first (:mod:`.migrationrates`); with none the PMJ stays ``Running`` with reason
      ``TooManyEvictions`` and the loop runs again when the next token is due. A bad policy
      label or delete option (checked when the PMJ starts and before it evicts) fails the PMJ
      with reason ``FailedEvict`` and a message naming the field, before any reservation is
      made;
   d. wait for a new pod of the same owner (another uid) bound into the reservation
      (``reservation-allocated`` carries its uid): ``ReservationBound`` and
      ``status.podRef`` the new pod; once it is Ready, ``BoundPodReady``,
      ``PodBoundReservation`` and ``Succeeded``, ``status.status`` ``Complete``, message
      ``Bind Pod "<ns>/<new>" in Reservation "<name>"``, ``status.nodeName`` its node.
6. **EvictDirectly**: the pod is evicted as in 5c (the same token, policy and options) and
   the PMJ ``Succeeded`` (``Complete``, ``Pod "<ns>/<name>" has been evicted``).

As in v1.8, ``status.status`` names the condition of the current step and
``status.reason``/``status.message`` are that condition's (``Eviction``/``Evicting``...), and
the PMJ gets v1.8's Events (component ``koord-descheduler``): Normal ``ReservationCreated``,
``ReservationScheduled``, ``Evicting``, ``EvictComplete``, ``WaitForPodBindReservation``,
``PodBoundReservation``, ``WaitForBoundPodReady``, ``BoundPodReady``, ``Complete``; Warning
``Unschedulable``, ``Timeout``, ``MissingPod``, ``MissingReservation``,
``ForbiddenMigratePod``, ``FailedCreateReservation``, ``FailedEvict``, and ``Evicting`` for a
refused eviction (``ReservationExpired`` and a reservation that can never be placed end the
PMJ without one, as in v1.8). A waiting step's Event is recorded once, not at every pass.

The workload controller brings an evicted pod back: in ``koordpy up``/``simulate`` the jobs loop
re-creates a deleted pod of a running Job or PyTorchJob as a new pod for the same replica (same
name, labels and owner), which the scheduler places in the reservation its owner holds. An
evicted pod needs no mark for that: a deleted pod is not a finished one (only phases
``Succeeded``/``Failed`` count towards a job's completions or failures) and the unit's
admissions keep their replicas while a replica's pod is missing.

The loop's limits come from the descheduler's ConfigMap (the first profile's
``MigrationControllerArgs``; a configuration that does not load keeps those in force). The
token buckets live as long as the rates they were made for (``evictQPS``, ``evictBurst``,
``objectLimiters``). The descheduler loop's own direct evictions (``EvictDirectly``, pods of
schedulers outside ``schedulerNames``) take their tokens from the same ``evictQPS`` bucket
when the two loops share one (:class:`~.migrationrates.EvictionBuckets`, linked by
:func:`controller.loops.build_loops`) and their args give the same rate.

``reservationOptions.preemptionOptions`` is kept as written and not acted on: a reservation
preempts as the scheduler's reservation preemption (``enablePreemption``) decides.

:func:`arbitrate` and :func:`advance` are pure but for the tokens they take from the loop's
buckets (:class:`~.migrationrates.MigrationRates`, passed in; without it no rate applies);
:class:`MigrationController` reads a snapshot and sends its writes through its outbox
(:class:`~controller.store.assumed.Outbox`), whose answers may come a pass or more later: a
PMJ whose step's writes are not all answered is held, counted as its step writes it and not
stepped again, so no reservation is made and no pod evicted twice while an answer is late.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Protocol

import msgspec

from apis import constants as k
from apis.core import (
    Affinity,
    ConfigMap,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
    PodTemplateSpec,
)
from apis.duration import Duration
from apis.kinds import Registry, default_registry
from apis.meta import Condition, Object, ObjectMeta, ObjectReference
from apis.scheduling import (
    DeleteOptions,
    PodMigrationJob,
    PodMigrationReservationOptions,
    Reservation,
    ReservationControllerReference,
    ReservationOwner,
    ReservationSpec,
    ReservationTemplateSpec,
)
from controller.descheduler.config import (
    MIGRATION_CONTROLLER,
    DeschedulerConfigError,
    load_configuration,
)
from controller.descheduler.evictionpolicy import (
    ANNOTATION_SOFT_EVICTION,
    EVICTION,
    SOFT_EVICTION,
    EvictionPlan,
    check_delete_options,
    check_policy,
    event_message,
    plan_eviction,
    soft_evicted,
)
from controller.descheduler.migrationrates import (
    DEFAULT_OBJECT_RATES,
    EvictionBuckets,
    MigrationRates,
    ObjectLimiterArgs,
    ObjectRate,
    object_rates,
)
from controller.descheduler.podsort import SortKey, sort_key
from controller.errors import AlreadyExists, NotFound, StoreError
from controller.events import NORMAL, WARNING, EventRecorder
from controller.mutations import whole_seconds
from controller.reservations import AnnotationError
from controller.reservations.affinity import parse_allocated
from controller.store.assumed import Outbox, Then
from controller.store.cluster import Cluster, Result, Write
from controller.store.snapshots import Snapshot

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = [
    "ABORTED",
    "FAILED",
    "MODES",
    "MODE_EVICT_DIRECTLY",
    "MODE_RESERVATION_FIRST",
    "PENDING",
    "REASON_TOO_MANY_EVICTIONS",
    "RUNNING",
    "SUCCEEDED",
    "Arbitration",
    "Limits",
    "MigrationArgs",
    "MigrationController",
    "Step",
    "World",
    "advance",
    "arbitrate",
    "arbitration_order",
    "reservation_for",
    "reservation_name",
    "workload_limit",
]

log = logging.getLogger(__name__)

_CONFIG_MAP_KIND: Final = default_registry().for_type(ConfigMap)
#: What the controller writes, and keeps assumed until its snapshots show it.
_WRITTEN_KINDS: Final = tuple(
    default_registry().for_type(t) for t in (PodMigrationJob, Reservation, Pod)
)

_replace = msgspec.structs.replace

# --- names of the API (controller-spec §6.2) ------------------------------------------------------

PENDING: Final = "Pending"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
ABORTED: Final = "Aborted"
FINAL_PHASES: Final = frozenset({SUCCEEDED, FAILED, ABORTED})

MODE_RESERVATION_FIRST: Final = "ReservationFirst"
MODE_EVICT_DIRECTLY: Final = "EvictDirectly"
MODES: Final = (MODE_RESERVATION_FIRST, MODE_EVICT_DIRECTLY)

COND_RESERVATION_CREATED: Final = "ReservationCreated"
COND_RESERVATION_SCHEDULED: Final = "ReservationScheduled"
COND_EVICTION: Final = "Eviction"
COND_POD_BOUND_RESERVATION: Final = "PodBoundReservation"
COND_BOUND_POD_READY: Final = "BoundPodReady"
COND_RESERVATION_BOUND: Final = "ReservationBound"

REASON_TIMEOUT: Final = "Timeout"
REASON_FAILED_CREATE_RESERVATION: Final = "FailedCreateReservation"
REASON_RESERVATION_EXPIRED: Final = "ReservationExpired"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_MISSING_POD: Final = "MissingPod"
REASON_MISSING_RESERVATION: Final = "MissingReservation"
REASON_EVICT_COMPLETE: Final = "EvictComplete"
REASON_FAILED_EVICT: Final = "FailedEvict"
REASON_WAIT_FOR_POD_BIND_RESERVATION: Final = "WaitForPodBindReservation"
REASON_WAIT_FOR_BOUND_POD_READY: Final = "WaitForBoundPodReady"
REASON_TOO_MANY_EVICTIONS: Final = "TooManyEvictions"
REASON_EVICTING: Final = "Evicting"
REASON_FORBIDDEN_MIGRATE_POD: Final = "ForbiddenMigratePod"
#: ``status.status`` of a PMJ that succeeded (the Event reason too).
STATUS_COMPLETE: Final = "Complete"

# The messages v1.8 writes in a PMJ's status and its Events (``{}``: a quoted name).
MESSAGE_TIMEOUT: Final = "Abort job caused by timeout"
MESSAGE_MISSING_POD: Final = "Abort job caused by missing Pod {}"
MESSAGE_MISSING_RESERVATION: Final = "Abort job caused by missing Reservation {}"
MESSAGE_RESERVATION_CREATED: Final = 'Successfully create Reservation "{}"'
MESSAGE_RESERVATION_SCHEDULED: Final = 'Assigned Reservation "{}" to node "{}"'
MESSAGE_SAME_NODE: Final = "Scheduler assignes the Reservation {} on the same node as the Pod"
MESSAGE_EVICTING: Final = "Pod {} evicted from node {} by the reason {}"
MESSAGE_EVICT_COMPLETE: Final = "Pod {} has been evicted"
MESSAGE_WAIT_FOR_BIND: Final = "Waiting for Pod bind Reservation"
MESSAGE_BOUND: Final = "Reservation bound by pod {}"
MESSAGE_WAIT_FOR_READY: Final = "Waiting for Bound Pod {} Ready"
MESSAGE_BOUND_POD_READY: Final = "Bind pod {} is ready"
MESSAGE_COMPLETE: Final = "Bind Pod {} in Reservation {}"
MESSAGE_FORBIDDEN: Final = (
    "Pod {} is forbidden to migrate because it does not meet the requirements"
)

#: The Event reason on an evicted pod.
EVENT_EVICTED: Final = "Evicted"
#: The Event reason on a pod whose eviction is a dry run (``deleteOptions.dryRun: [All]``).
EVENT_EVICTION_PROPOSED: Final = "EvictionProposed"
#: The component Events are recorded as.
COMPONENT: Final = "koord-descheduler"

#: ``spec.ttl`` when a PMJ gives none (``defaultJobTTL``).
DEFAULT_TTL: Final = timedelta(minutes=5)
#: How long past its TTL the scavenger keeps a PMJ.
SCAVENGE_AFTER_TTL: Final = timedelta(minutes=5)
#: How long the scavenger keeps a PMJ without TTL (``ttl: 0s``).
SCAVENGE_WITHOUT_TTL: Final = timedelta(minutes=30)
#: Seconds before a PMJ whose write failed is looked at again.
RETRY_SECONDS: Final = 1.0

#: Pod labels and annotations a reservation made from the pod leaves out: the quota the pod
#: is charged to (the replacement is charged when it lands), the queue's admission gate and
#: pod-set bookkeeping, and the pod's own place in a reservation.
_DROPPED_LABELS: Final = frozenset(
    {
        k.LABEL_QUOTA_NAME,
        k.LABEL_QUOTA_NAME_ALIBABACLOUD,
        k.LABEL_QUOTA_NAME_TREE,
        k.LABEL_QUOTA_PREEMPTIBLE,
        k.LABEL_PREEMPTIBLE_ALIBABACLOUD,
        k.LABEL_SCHEDULE_ADMISSION,
        k.LABEL_JOB_REPLICA_INDEX,
    }
)
_DROPPED_ANNOTATIONS: Final = frozenset(
    {
        k.ANNOTATION_RESERVATION_ALLOCATED,
        k.ANNOTATION_RELATED_QUEUEUNIT,
        k.ANNOTATION_RELATED_PODSET_NAME,
    }
)
_PERCENT: Final = re.compile(r"^(\d+)%$")


# --- limits ---------------------------------------------------------------------------------------


def _check_count(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or value < 0):
        raise ValueError(f"{name}: must be a non-negative integer, got {value!r}")


def _check_int_or_percent(name: str, value: int | str | None) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if _PERCENT.match(value) is None:
            raise ValueError(
                f"{name}: must be an integer or a percentage like '10%', got {value!r}"
            )
        return
    _check_count(name, value)


@dataclass(frozen=True, slots=True)
class Limits:
    """What the MigrationController's arbitration and jobs use, from ``MigrationControllerArgs``
    (:meth:`of`). Counts: None or 0 = no limit; the workload limits: None = the defaults of the
    module docstring."""

    max_migrating_per_node: int | None = 2
    max_migrating_per_namespace: int | None = None
    max_migrating_globally: int | None = None
    max_migrating_per_workload: int | str | None = None
    max_unavailable_per_workload: int | str | None = None
    #: ``spec.mode`` when a PMJ gives none.
    default_job_mode: str = MODE_RESERVATION_FIRST
    #: ``spec.ttl`` when a PMJ gives none.
    default_job_ttl: timedelta = DEFAULT_TTL
    #: Evictions per second (0: no limit) and at once (``evictQPS``, ``evictBurst``).
    evict_qps: float = 10.0
    evict_burst: int = 1
    #: ``objectLimiters`` (only the enabled ones count; empty: none).
    object_limiters: tuple[ObjectRate, ...] = DEFAULT_OBJECT_RATES
    #: ``evictionPolicy``: ``Eviction``, ``Delete`` or ``SoftEviction``.
    eviction_policy: str = EVICTION
    #: ``defaultDeleteOptions``: a PMJ's ``spec.deleteOptions`` when it gives none.
    default_delete_options: DeleteOptions | None = None

    def __post_init__(self) -> None:
        _check_count("maxMigratingPerNode", self.max_migrating_per_node)
        _check_count("maxMigratingPerNamespace", self.max_migrating_per_namespace)
        _check_count("maxMigratingGlobally", self.max_migrating_globally)
        _check_int_or_percent("maxMigratingPerWorkload", self.max_migrating_per_workload)
        _check_int_or_percent("maxUnavailablePerWorkload", self.max_unavailable_per_workload)
        if self.default_job_mode not in MODES:
            raise ValueError(
                f"defaultJobMode: must be one of {', '.join(MODES)}, got {self.default_job_mode!r}"
            )
        if self.default_job_ttl < timedelta(0):
            raise ValueError(f"defaultJobTTL: must not be negative, got {self.default_job_ttl}")
        if isinstance(self.evict_qps, bool) or not self.evict_qps >= 0:
            raise ValueError(f"evictQPS: must be a number >= 0, got {self.evict_qps!r}")
        if self.evict_qps > 0 and (isinstance(self.evict_burst, bool) or self.evict_burst <= 0):
            raise ValueError(
                f"evictBurst: must be > 0 when evictQPS is set, got {self.evict_burst!r}"
            )
        kinds = [o.kind for o in self.object_limiters]
        if len(set(kinds)) != len(kinds):
            raise ValueError(f"objectLimiters: one limiter per type, got {kinds}")
        check_policy(self.eviction_policy, "evictionPolicy")
        check_delete_options(self.default_delete_options, "defaultDeleteOptions")

    @classmethod
    def of(cls, args: MigrationArgs) -> Limits:
        """The limits of a ``MigrationControllerArgs`` (anything with its fields)."""
        return cls(
            max_migrating_per_node=args.max_migrating_per_node,
            max_migrating_per_namespace=args.max_migrating_per_namespace,
            max_migrating_globally=args.max_migrating_globally,
            max_migrating_per_workload=args.max_migrating_per_workload,
            max_unavailable_per_workload=args.max_unavailable_per_workload,
            default_job_mode=args.default_job_mode,
            default_job_ttl=timedelta(microseconds=args.default_job_ttl.nanoseconds // 1000),
            evict_qps=args.qps,
            evict_burst=args.evict_burst,
            object_limiters=object_rates(args.object_limiters),
            eviction_policy=args.eviction_policy,
            default_delete_options=args.default_delete_options,
        )

    def rates(self, evictions: EvictionBuckets | None = None) -> MigrationRates:
        """Fresh token buckets for these limits (the ``evictQPS`` one from ``evictions``,
        when given)."""
        return MigrationRates(
            qps=self.evict_qps,
            burst=self.evict_burst,
            objects=self.object_limiters,
            evictions=evictions,
        )


class MigrationArgs(Protocol):
    """The fields of ``MigrationControllerArgs`` the loop reads."""

    @property
    def max_migrating_per_node(self) -> int | None: ...
    @property
    def max_migrating_per_namespace(self) -> int | None: ...
    @property
    def max_migrating_globally(self) -> int | None: ...
    @property
    def max_migrating_per_workload(self) -> int | str | None: ...
    @property
    def max_unavailable_per_workload(self) -> int | str | None: ...
    @property
    def default_job_mode(self) -> str: ...
    @property
    def default_job_ttl(self) -> Duration: ...
    @property
    def qps(self) -> float: ...
    @property
    def evict_burst(self) -> int: ...
    @property
    def object_limiters(self) -> Mapping[str, ObjectLimiterArgs]: ...
    @property
    def eviction_policy(self) -> str: ...
    @property
    def default_delete_options(self) -> DeleteOptions | None: ...


def workload_limit(value: int | str | None, replicas: int) -> int:
    """A per-workload limit for a workload of ``replicas`` live pods (module docstring, 4)."""
    if value is None:
        limit = replicas // 10 if replicas > 10 else 2 if replicas >= 4 else 1
    elif isinstance(value, str):
        match = _PERCENT.match(value)
        if match is None:
            raise ValueError(f"not an integer or a percentage: {value!r}")
        limit = replicas * int(match.group(1)) // 100
    else:
        limit = value
    return max(1, min(limit, max(replicas, 1)))


# --- small readers --------------------------------------------------------------------------------


def _created(obj: PodMigrationJob | Reservation, now: datetime) -> datetime:
    return obj.metadata.creation_timestamp or now


def _ttl(job: PodMigrationJob, limits: Limits) -> timedelta:
    ttl = job.spec.ttl
    if ttl is None:
        return limits.default_job_ttl
    return timedelta(microseconds=ttl.nanoseconds // 1000)


def _mode(job: PodMigrationJob, limits: Limits) -> str:
    return job.spec.mode or limits.default_job_mode


def _condition(job: PodMigrationJob, type_: str) -> Condition | None:
    return next((c for c in job.status.conditions if c.type == type_), None)


def _done(job: PodMigrationJob, type_: str) -> bool:
    found = _condition(job, type_)
    return found is not None and found.status == "True"


def _controller_of(pod: Pod) -> str:
    """The uid of the pod's controller ("" for a bare pod)."""
    return next((r.uid for r in pod.metadata.owner_references if r.controller), "")


def _pod_ready(pod: Pod) -> bool:
    if pod.is_terminated or pod.metadata.deletion_timestamp is not None:
        return False
    ready = next((c for c in pod.status.conditions if c.type == "Ready"), None)
    return ready is not None and ready.status == "True"


def reservation_name(job: PodMigrationJob) -> str:
    """The reservation a ReservationFirst PMJ migrates into."""
    options = job.spec.reservation_options
    if options is not None and options.reservation_ref is not None:
        return options.reservation_ref.name
    return job.metadata.uid


def _pod_key(job: PodMigrationJob) -> tuple[str, str]:
    ref = job.spec.pod_ref
    return ref.namespace or "default", ref.name


# --- the cluster as one pass sees it --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class World:
    """What one pass reads: pods by (namespace, name), reservations by name."""

    pods: Mapping[tuple[str, str], Pod]
    reservations: Mapping[str, Reservation]
    #: Controller uid -> its live pods.
    by_controller: Mapping[str, Sequence[Pod]] = field(default_factory=dict)

    @classmethod
    def of(cls, pods: Iterable[Pod], reservations: Iterable[Reservation]) -> World:
        by_key: dict[tuple[str, str], Pod] = {}
        by_controller: dict[str, list[Pod]] = {}
        for pod in pods:
            by_key[(pod.metadata.namespace, pod.metadata.name)] = pod
            owner = _controller_of(pod)
            if owner and not pod.is_terminated and pod.metadata.deletion_timestamp is None:
                by_controller.setdefault(owner, []).append(pod)
        return cls(
            pods=by_key,
            reservations={r.metadata.name: r for r in reservations},
            by_controller=by_controller,
        )

    def pod_of(self, job: PodMigrationJob) -> Pod | None:
        """The job's pod: ``podRef``'s namespace and name, and its uid when it gives one."""
        pod = self.pods.get(_pod_key(job))
        uid = job.spec.pod_ref.uid
        if pod is None or (uid and pod.metadata.uid != uid):
            return None
        return pod


# --- arbitration ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arbitration:
    #: PMJs now Running (``podRef.uid`` filled in), in order.
    admitted: Sequence[PodMigrationJob]
    #: PMJs whose pod is gone (to fail with ``MissingPod``: :func:`missing_pod`).
    missing: Sequence[PodMigrationJob]
    #: PMJ name -> the limit that keeps it Pending.
    waiting: Mapping[str, str]
    #: When an object limiter holding a PMJ has a token again (None: none holds one).
    wake_at: datetime | None = None
    #: PMJs whose pod may never migrate (to fail with ``ForbiddenMigratePod``: :func:`forbidden`).
    forbidden: Sequence[tuple[PodMigrationJob, Pod]] = ()


@dataclass(slots=True)
class _Counts:
    nodes: dict[str, int] = field(default_factory=dict)
    namespaces: dict[str, int] = field(default_factory=dict)
    workloads: dict[str, set[str]] = field(default_factory=dict)
    total: int = 0

    def add(self, namespace: str, pod: Pod | None) -> None:
        self.total += 1
        self.namespaces[namespace] = self.namespaces.get(namespace, 0) + 1
        if pod is None:
            return
        node = pod.spec.node_name
        if node:
            self.nodes[node] = self.nodes.get(node, 0) + 1
        owner = _controller_of(pod)
        if owner:
            self.workloads.setdefault(owner, set()).add(pod.metadata.uid)


#: The importance of a PMJ's pod that is gone (below every pod's).
_NO_POD: Final[SortKey] = (0, 0, 0, 0, 0, 0)


def _over(count: int, limit: int | None) -> bool:
    return bool(limit) and limit is not None and count + 1 > limit


def _refusal(pod: Pod, namespace: str, counts: _Counts, world: World, limits: Limits) -> str:
    """Which limit keeps ``pod`` from migrating now ("" when none)."""
    if _over(counts.total, limits.max_migrating_globally):
        return "maxMigratingGlobally"
    if _over(counts.namespaces.get(namespace, 0), limits.max_migrating_per_namespace):
        return "maxMigratingPerNamespace"
    node = pod.spec.node_name
    if node and _over(counts.nodes.get(node, 0), limits.max_migrating_per_node):
        return "maxMigratingPerNode"
    owner = _controller_of(pod)
    if owner:
        siblings = world.by_controller.get(owner, ())
        replicas = len(siblings)
        migrating = counts.workloads.get(owner, set()) - {pod.metadata.uid}
        if len(migrating) + 1 > workload_limit(limits.max_migrating_per_workload, replicas):
            return "maxMigratingPerWorkload"
        unavailable = migrating | {
            p.metadata.uid for p in siblings if not _pod_ready(p) and p is not pod
        }
        if len(unavailable) + 1 > workload_limit(limits.max_unavailable_per_workload, replicas):
            return "maxUnavailablePerWorkload"
    return ""


def arbitration_order(
    jobs: Sequence[PodMigrationJob],
    world: World,
    migrating: Mapping[str, int],
    now: datetime,
) -> list[PodMigrationJob]:
    """``jobs`` in the order arbitration takes them, as four sorts applied in turn, each
    keeping the order of what it finds equal (so the last is the first key):

    1. oldest first (creation time, then name);
    2. the least important pod first (:func:`~controller.descheduler.podsort.sort_key`; a PMJ
       whose pod is gone counts as least important: it only fails);
    3. the PMJs of one workload (the pod's controller) together, where its first one stood
       (a pod without a controller is a workload of its own);
    4. workloads with fewer migrating pods (``migrating``: controller uid -> count) first.
    """
    pods = {job.metadata.name: world.pod_of(job) for job in jobs}

    def importance(job: PodMigrationJob) -> tuple[int, SortKey]:
        pod = pods[job.metadata.name]
        return (0, _NO_POD) if pod is None else (1, sort_key(pod))

    ordered = sorted(jobs, key=lambda j: (_created(j, now), j.metadata.name))
    ordered.sort(key=importance)
    owners: dict[str, str] = {}
    first: dict[str, int] = {}
    for place, job in enumerate(ordered):
        pod = pods[job.metadata.name]
        owner = (_controller_of(pod) if pod is not None else "") or f"job/{job.metadata.name}"
        owners[job.metadata.name] = owner
        first.setdefault(owner, place)
    places = {job.metadata.name: place for place, job in enumerate(ordered)}
    return sorted(
        ordered,
        key=lambda j: (
            migrating.get(owners[j.metadata.name], 0),
            first[owners[j.metadata.name]],
            places[j.metadata.name],
        ),
    )


def arbitrate(
    jobs: Sequence[PodMigrationJob],
    world: World,
    limits: Limits,
    now: datetime,
    *,
    rates: MigrationRates | None = None,
) -> Arbitration:
    """Which ``Pending`` (not paused) PMJs may run now (module docstring, 4). Pure, but for
    the tokens it takes from ``rates`` (the object limiters; None: not applied)."""
    counts = _Counts()
    for job in jobs:
        if job.status.phase == RUNNING:
            counts.add(_pod_key(job)[0], world.pod_of(job))
    pending = arbitration_order(
        [j for j in jobs if (j.status.phase or PENDING) == PENDING and not j.spec.paused],
        world,
        {owner: len(uids) for owner, uids in counts.workloads.items()},
        now,
    )
    admitted: list[PodMigrationJob] = []
    missing: list[PodMigrationJob] = []
    barred: list[tuple[PodMigrationJob, Pod]] = []
    waiting: dict[str, str] = {}
    wake_at: datetime | None = None
    for job in pending:
        pod = world.pod_of(job)
        if pod is None:
            missing.append(job)
            continue
        if never_migrates(pod):
            barred.append((job, pod))
            continue
        namespace = pod.metadata.namespace
        refused = _refusal(pod, namespace, counts, world, limits)
        if refused:
            waiting[job.metadata.name] = refused
            continue
        if rates is not None:
            owner = _controller_of(pod)
            replicas = len(world.by_controller.get(owner, ())) if owner else 0
            most = workload_limit(limits.max_migrating_per_workload, replicas)
            held = rates.take_start(pod, owner, most, now)
            if held is not None:
                waiting[job.metadata.name], due = held
                wake_at = due if wake_at is None else min(wake_at, due)
                continue
        counts.add(namespace, pod)
        ref = _replace(job.spec.pod_ref, namespace=namespace, uid=pod.metadata.uid)
        running = _replace(job, spec=_replace(job.spec, pod_ref=ref))
        admitted.append(_status(running, phase=RUNNING, reason="", message=""))
    return Arbitration(
        admitted=admitted, missing=missing, forbidden=barred, waiting=waiting, wake_at=wake_at
    )


def never_migrates(pod: Pod) -> bool:
    """Whether arbitration refuses ``pod`` for good: an eviction cost of MaxInt32
    (``scheduling.koordinator.sh/eviction-cost``), unless ``descheduler.alpha.kubernetes.io/
    evict`` asks for its eviction."""
    annotations = pod.metadata.annotations
    if k.ANNOTATION_DESCHEDULER_EVICT in annotations:
        return False
    return annotations.get(k.ANNOTATION_EVICTION_COST, "").strip() == str(k.EVICTION_COST_FORBIDDEN)


def forbidden(job: PodMigrationJob, pod: Pod) -> Step:
    """``job`` Failed because its pod may not migrate (``ForbiddenMigratePod``)."""
    name = _quoted(pod.metadata.namespace, pod.metadata.name)
    return _fail(job, REASON_FORBIDDEN_MIGRATE_POD, MESSAGE_FORBIDDEN.format(name))


# --- status helpers -------------------------------------------------------------------------------


def _set_condition(
    job: PodMigrationJob,
    type_: str,
    status: str,
    now: datetime,
    *,
    reason: str = "",
    message: str = "",
) -> PodMigrationJob:
    now = whole_seconds(now)
    old = _condition(job, type_)
    if old is not None and (old.status, old.reason, old.message) == (status, reason, message):
        return job
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_probe_time=now,
        last_transition_time=(
            old.last_transition_time
            if old is not None and old.status == status and old.last_transition_time
            else now
        ),
    )
    conditions = job.status.conditions
    if old is None:
        conditions = (*conditions, new)
    else:
        conditions = tuple(new if c.type == type_ else c for c in conditions)
    return _replace(job, status=_replace(job.status, conditions=conditions))


def _status(
    job: PodMigrationJob,
    *,
    phase: str | None = None,
    status: str | None = None,
    reason: str | None = None,
    message: str | None = None,
) -> PodMigrationJob:
    """``job`` with its ``phase``, ``status``, ``reason`` and ``message`` (None: kept)."""
    current = job.status
    return _replace(
        job,
        status=_replace(
            current,
            phase=current.phase if phase is None else phase,
            status=current.status if status is None else status,
            reason=current.reason if reason is None else reason,
            message=current.message if message is None else message,
        ),
    )


def _progress(
    job: PodMigrationJob,
    type_: str,
    status: str,
    now: datetime,
    *,
    reason: str = "",
    message: str = "",
) -> PodMigrationJob:
    """``job`` with condition ``type_`` set and, when that changed it, ``status.status`` the
    condition's type and ``status.reason``/``status.message`` its reason and message (the job
    tells the step it is at, as v1.8 does)."""
    after = _set_condition(job, type_, status, now, reason=reason, message=message)
    if after is job:
        return job
    return _status(after, status=type_, reason=reason, message=message)


def _ended(job: PodMigrationJob, phase: str, reason: str, message: str) -> PodMigrationJob:
    """``job`` in a final ``phase`` (``status.status`` is left at the step it ended in)."""
    return _status(job, phase=phase, reason=reason, message=message)


def _quoted(namespace: str, name: str) -> str:
    """``"<namespace>/<name>"``, as v1.8's messages name a pod or a reservation."""
    return f'"{namespace}/{name}"'


# --- one job's step -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: Pod
    job: PodMigrationJob
    plan: EvictionPlan = field(default_factory=EvictionPlan)


@dataclass(frozen=True, slots=True)
class Note:
    """An Event to record on the PMJ once it is written (``type``, ``reason``, ``message``)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Step:
    """What one pass does for one PMJ (all None/empty: nothing)."""

    #: The PMJ to write.
    job: PodMigrationJob | None = None
    #: A reservation to create (before the PMJ is written).
    create: Reservation | None = None
    #: The pod to evict (before the PMJ is written).
    evict: Eviction | None = None
    #: A reservation to delete.
    delete_reservation: str = ""
    #: When the PMJ wants to be looked at again.
    wake_at: datetime | None = None
    #: Events on the PMJ, recorded in order after it is written.
    notes: tuple[Note, ...] = ()


def reservation_for(job: PodMigrationJob, pod: Pod, ttl: timedelta, now: datetime) -> Reservation:
    """The Reservation a ReservationFirst PMJ creates for ``pod`` (module docstring, 5a): from
    ``spec.reservationOptions.template`` when the PMJ gives one, else from the pod."""
    options = job.spec.reservation_options
    if options is not None and options.template is not None:
        return _from_template(job, options.template, pod, ttl, now)
    meta = pod.metadata
    return Reservation(
        metadata=ObjectMeta(
            name=reservation_name(job),
            labels={k.LABEL_RESERVATION_ORDER: str(int(now.timestamp() * 1000))},
        ),
        spec=ReservationSpec(
            template=PodTemplateSpec(
                metadata=ObjectMeta(
                    namespace=meta.namespace,
                    labels={k_: v for k_, v in meta.labels.items() if k_ not in _DROPPED_LABELS},
                    annotations={
                        k_: v
                        for k_, v in meta.annotations.items()
                        if k_ not in _DROPPED_ANNOTATIONS
                    },
                ),
                spec=_away_from(pod.spec, pod.spec.node_name),
            ),
            owners=(_owner_of(pod),),
            ttl=Duration.from_seconds(ttl.total_seconds()),
            allocate_once=True,
        ),
    )


def _from_template(
    job: PodMigrationJob,
    template: ReservationTemplateSpec,
    pod: Pod,
    ttl: timedelta,
    now: datetime,
) -> Reservation:
    """The reservation of ``template``: its labels, annotations and spec, under the PMJ's
    reservation name, with the order label, kept off the pod's node as one made from the pod
    is; what the template leaves unset is what one made from the pod has (owners: the pod's
    controller; the PMJ's TTL; ``allocateOnce``; the template pod's namespace)."""
    spec = template.spec
    pod_template = spec.template
    template_meta = pod_template.metadata
    return Reservation(
        metadata=ObjectMeta(
            name=reservation_name(job),
            labels={
                **template.metadata.labels,
                k.LABEL_RESERVATION_ORDER: str(int(now.timestamp() * 1000)),
            },
            annotations=dict(template.metadata.annotations),
        ),
        spec=_replace(
            spec,
            template=_replace(
                pod_template,
                metadata=_replace(
                    template_meta, namespace=template_meta.namespace or pod.metadata.namespace
                ),
                spec=_away_from(pod_template.spec, pod.spec.node_name),
            ),
            owners=spec.owners or (_owner_of(pod),),
            ttl=spec.ttl if spec.ttl is not None else Duration.from_seconds(ttl.total_seconds()),
            allocate_once=True if spec.allocate_once is None else spec.allocate_once,
        ),
    )


def _away_from(spec: PodSpec, node: str) -> PodSpec:
    """``spec`` for a reservation: no node, no scheduling gates, a required node anti-affinity
    to ``node`` in every term (when there is a node), and priority 0 when it has none."""
    affinity = spec.affinity or Affinity()
    node_affinity = affinity.node_affinity or NodeAffinity()
    if node:
        away = NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=(node,))
        required = node_affinity.required_during_scheduling_ignored_during_execution
        terms = required.node_selector_terms if required is not None else ()
        terms = tuple(_replace(t, match_fields=(*t.match_fields, away)) for t in terms) or (
            NodeSelectorTerm(match_fields=(away,)),
        )
        node_affinity = _replace(
            node_affinity,
            required_during_scheduling_ignored_during_execution=NodeSelector(
                node_selector_terms=terms
            ),
        )
        affinity = _replace(affinity, node_affinity=node_affinity)
    return _replace(
        spec,
        node_name="",
        affinity=affinity,
        scheduling_gates=(),
        # As an API server admits a pod: no priority is 0 (a template without one would make
        # the reservation unpreemptible and let it preempt everything, §1.3).
        priority=spec.priority if spec.priority is not None else 0,
    )


def _owner_of(pod: Pod) -> ReservationOwner:
    """The reservation owner for ``pod``: its controller, else the pod itself."""
    meta = pod.metadata
    controller = next((r for r in meta.owner_references if r.controller), None)
    if controller is None:
        return ReservationOwner(
            object=ObjectReference(namespace=meta.namespace, name=meta.name, uid=meta.uid)
        )
    return ReservationOwner(
        controller=ReservationControllerReference(
            api_version=controller.api_version,
            kind=controller.kind,
            name=controller.name,
            uid=controller.uid,
            controller=True,
            namespace=meta.namespace,
        )
    )


def _reservation_ref(job: PodMigrationJob, reservation: Reservation) -> PodMigrationJob:
    ref = ObjectReference(
        api_version=reservation.api_version,
        kind=reservation.kind,
        name=reservation.metadata.name,
        uid=reservation.metadata.uid,
    )
    options = job.spec.reservation_options or PodMigrationReservationOptions()
    if options.reservation_ref == ref:
        return job
    options = _replace(options, reservation_ref=ref)
    return _replace(job, spec=_replace(job.spec, reservation_options=options))


def _unschedulable(reservation: Reservation) -> Condition | None:
    scheduled = next((c for c in reservation.status.conditions if c.type == "Scheduled"), None)
    if scheduled is not None and scheduled.status == "False":
        return scheduled
    return None


def _replacement(job: PodMigrationJob, reservation: Reservation, world: World) -> Pod | None:
    """A pod bound into ``reservation`` that is not the migrated pod: one of its
    ``status.currentOwners`` (what v1.8 reads), else a pod of its controller owner whose
    ``reservation-allocated`` names it."""
    original = job.spec.pod_ref.uid
    owners = reservation.spec.owners
    controller = owners[0].controller if owners else None
    current = [
        world.pods.get((ref.namespace, ref.name)) for ref in reservation.status.current_owners
    ]
    candidates: Iterable[Pod] = [
        pod
        for pod, ref in zip(current, reservation.status.current_owners, strict=True)
        if pod is not None and pod.metadata.uid == ref.uid
    ] or (world.by_controller.get(controller.uid, ()) if controller is not None else ())
    found = []
    for pod in candidates:
        if pod.metadata.uid == original or not pod.spec.node_name:
            continue
        try:
            allocated = parse_allocated(pod)
        except AnnotationError:
            continue
        if allocated is not None and allocated.uid == reservation.metadata.uid:
            found.append(pod)
    return min(found, key=lambda p: (not _pod_ready(p), p.metadata.name), default=None)


def _plan(job: PodMigrationJob, pod: Pod, limits: Limits) -> EvictionPlan:
    """How ``pod`` is evicted (``ValueError`` naming the field of a bad value)."""
    return plan_eviction(
        pod,
        default_policy=limits.eviction_policy,
        job_options=job.spec.delete_options,
        default_options=limits.default_delete_options,
    )


def _throttled(job: PodMigrationJob, rates: MigrationRates | None, now: datetime) -> Step | None:
    """The step of a PMJ whose eviction has no token (None: a token was taken)."""
    due = rates.take_eviction(now) if rates is not None else None
    if rates is None or due is None:
        return None
    message = f"evictQPS {rates.qps:g} (evictBurst {rates.burst}) reached, tried again"
    return Step(job=_status(job, reason=REASON_TOO_MANY_EVICTIONS, message=message), wake_at=due)


def _fail(job: PodMigrationJob, reason: str, message: str, *, event: bool = True) -> Step:
    """``job`` Failed (a Warning Event with ``reason`` and ``message`` unless ``event`` is
    False, as v1.8 records none for some ends), and the reservation it made deleted."""
    notes = (Note(WARNING, reason, message),) if event else ()
    return Step(
        job=_ended(job, FAILED, reason, message),
        delete_reservation=_created_reservation(job),
        notes=notes,
    )


def missing_pod(job: PodMigrationJob) -> Step:
    """``job`` Failed because its pod is gone (``MissingPod``)."""
    namespace, name = _pod_key(job)
    return _fail(job, REASON_MISSING_POD, MESSAGE_MISSING_POD.format(_quoted(namespace, name)))


@dataclass(frozen=True, slots=True)
class _Evicting:
    """Where step 5c stands: ``done`` (the pod is gone: go on with ``job``, ``notes`` and
    ``evict``), else ``step`` is what to do now."""

    done: bool
    step: Step | None = None
    job: PodMigrationJob | None = None
    notes: tuple[Note, ...] = ()
    evict: Eviction | None = None


def _eviction(
    job: PodMigrationJob,
    pod: Pod | None,
    plan: EvictionPlan,
    now: datetime,
    rates: MigrationRates | None,
) -> _Evicting:
    """Step 5c: evict the pod (condition ``Eviction`` False, reason ``Evicting``), then, once
    it is gone or replaced by another pod of its name, condition ``Eviction`` True, reason
    ``EvictComplete``. A dry run completes at once: there is nothing to wait for."""
    found = _condition(job, COND_EVICTION)
    if found is not None and found.status == "True":
        return _Evicting(done=True, job=job)
    namespace, name = _pod_key(job)
    complete = Note(
        NORMAL, REASON_EVICT_COMPLETE, MESSAGE_EVICT_COMPLETE.format(_quoted(namespace, name))
    )
    if found is not None and found.reason == REASON_EVICTING:
        if pod is not None:
            return _Evicting(done=False, step=Step(job=job))  # still there: wait
        after = _progress(job, COND_EVICTION, "True", now, reason=REASON_EVICT_COMPLETE)
        return _Evicting(done=True, job=after, notes=(complete,))
    if pod is None:
        return _Evicting(done=False, step=missing_pod(job))
    held = _throttled(job, rates, now)
    if held is not None:
        return _Evicting(done=False, step=held)
    reason = job.metadata.annotations.get(k.ANNOTATION_EVICT_REASON, "")
    message = MESSAGE_EVICTING.format(
        _quoted(namespace, name), f'"{pod.spec.node_name}"', f'"{reason}"'
    )
    after = _progress(job, COND_EVICTION, "False", now, reason=REASON_EVICTING, message=message)
    evicting = Note(NORMAL, REASON_EVICTING, message)
    evict = Eviction(pod=pod, job=job, plan=plan)
    if plan.dry_run:
        after = _progress(after, COND_EVICTION, "True", now, reason=REASON_EVICT_COMPLETE)
        return _Evicting(done=True, job=after, notes=(evicting, complete), evict=evict)
    return _Evicting(done=False, step=Step(job=after, evict=evict, notes=(evicting,)))


def _with_notes(step: Step, notes: Iterable[Note]) -> Step:
    return dataclasses.replace(step, notes=(*notes, *step.notes))


def advance(
    job: PodMigrationJob,
    world: World,
    limits: Limits,
    now: datetime,
    *,
    rates: MigrationRates | None = None,
) -> Step:
    """The next step of a ``Running`` PMJ (module docstring, 5-6). Pure, but for the token an
    eviction takes from ``rates`` (``evictQPS``; None: not applied)."""
    pod = world.pod_of(job)
    plan = EvictionPlan()
    if pod is not None and not _done(job, COND_EVICTION):
        try:
            plan = _plan(job, pod, limits)
        except ValueError as err:
            return _fail(job, REASON_FAILED_EVICT, str(err))
    namespace, pod_name = _pod_key(job)
    if _mode(job, limits) == MODE_EVICT_DIRECTLY:
        evicting = _eviction(job, pod, plan, now, rates)
        if not evicting.done:
            assert evicting.step is not None
            return evicting.step
        assert evicting.job is not None
        message = MESSAGE_EVICT_COMPLETE.format(_quoted(namespace, pod_name))
        done = _status(
            evicting.job, phase=SUCCEEDED, status=STATUS_COMPLETE, reason="", message=message
        )
        return Step(job=done, evict=evicting.evict, notes=evicting.notes)
    notes: list[Note] = []
    evict: Eviction | None = None
    refused: Condition | None = None
    name = reservation_name(job)
    reservation = world.reservations.get(name)
    if not _done(job, COND_RESERVATION_CREATED):
        if reservation is not None:  # given in reservationRef, or created by an earlier pass
            job = _reservation_ref(job, reservation)
            job = _progress(job, COND_RESERVATION_CREATED, "True", now)
        elif name != job.metadata.uid:
            return _missing_reservation(job, name)
        else:
            if pod is None:
                return missing_pod(job)
            made = reservation_for(job, pod, _ttl(job, limits), now)
            after = _progress(job, COND_RESERVATION_CREATED, "True", now)
            note = Note(NORMAL, COND_RESERVATION_CREATED, MESSAGE_RESERVATION_CREATED.format(name))
            return Step(job=after, create=made, notes=(note,))
    if reservation is None:
        return _missing_reservation(job, name)
    job = _reservation_ref(job, reservation)
    phase = reservation.status.phase
    scheduled = _done(job, COND_RESERVATION_SCHEDULED)
    if not scheduled:
        refused = _unschedulable(reservation)
        if refused is not None:
            after = _progress(
                job,
                COND_RESERVATION_SCHEDULED,
                "False",
                now,
                reason=REASON_UNSCHEDULABLE,
                message=refused.message,
            )
            if after is not job:
                notes.append(Note(WARNING, REASON_UNSCHEDULABLE, refused.message))
            job = after
        if phase in ("", "Pending"):
            return Step(job=job, notes=tuple(notes))  # the scheduler has not placed it yet
    if phase == FAILED and _expired(reservation):
        return _with_notes(
            _fail(job, REASON_RESERVATION_EXPIRED, "Reservation expired", event=False), notes
        )
    node = reservation.status.node_name
    if not node:
        message = refused.message if not scheduled and refused is not None else ""
        return _with_notes(_fail(job, REASON_UNSCHEDULABLE, message, event=False), notes)
    if not scheduled:
        if pod is not None and node == pod.spec.node_name:
            message = MESSAGE_SAME_NODE.format(f'"{name}"')
            return _with_notes(_fail(job, REASON_FORBIDDEN_MIGRATE_POD, message), notes)
        job = _replace(job, status=_replace(job.status, node_name=node))
        job = _progress(job, COND_RESERVATION_SCHEDULED, "True", now)
        notes.append(
            Note(
                NORMAL, COND_RESERVATION_SCHEDULED, MESSAGE_RESERVATION_SCHEDULED.format(name, node)
            )
        )
    bound = _replacement(job, reservation, world)
    if not _done(job, COND_EVICTION):
        if phase == SUCCEEDED and bound is None and _condition(job, COND_EVICTION) is None:
            message = "Reservation is already bound by another Pod"
            return _with_notes(_fail(job, REASON_FORBIDDEN_MIGRATE_POD, message), notes)
        evicting = _eviction(job, pod, plan, now, rates)
        if not evicting.done:
            assert evicting.step is not None
            return _with_notes(evicting.step, notes)
        assert evicting.job is not None
        job, evict = evicting.job, evicting.evict
        notes.extend(evicting.notes)
    if bound is None:
        after = _progress(
            job,
            COND_POD_BOUND_RESERVATION,
            "False",
            now,
            reason=REASON_WAIT_FOR_POD_BIND_RESERVATION,
        )
        if after is not job:
            notes.append(Note(NORMAL, REASON_WAIT_FOR_POD_BIND_RESERVATION, MESSAGE_WAIT_FOR_BIND))
        return Step(job=after, evict=evict, notes=tuple(notes))
    new_ref = ObjectReference(
        api_version=bound.api_version,
        kind=bound.kind,
        namespace=bound.metadata.namespace,
        name=bound.metadata.name,
        uid=bound.metadata.uid,
    )
    bound_name = _quoted(new_ref.namespace, new_ref.name)
    if not _done(job, COND_RESERVATION_BOUND):
        job = _set_condition(job, COND_RESERVATION_BOUND, "True", now)
        notes.append(Note(NORMAL, COND_POD_BOUND_RESERVATION, MESSAGE_BOUND.format(bound_name)))
    job = _replace(
        job, status=_replace(job.status, pod_ref=new_ref, node_name=bound.spec.node_name)
    )
    if not _pod_ready(bound):
        after = _progress(
            job, COND_BOUND_POD_READY, "False", now, reason=REASON_WAIT_FOR_BOUND_POD_READY
        )
        if after is not job:
            message = MESSAGE_WAIT_FOR_READY.format(f"{new_ref.namespace}/{new_ref.name}")
            notes.append(Note(NORMAL, REASON_WAIT_FOR_BOUND_POD_READY, message))
        return Step(job=after, evict=evict, notes=tuple(notes))
    notes.append(Note(NORMAL, COND_BOUND_POD_READY, MESSAGE_BOUND_POD_READY.format(bound_name)))
    job = _progress(job, COND_BOUND_POD_READY, "True", now)
    message = MESSAGE_COMPLETE.format(bound_name, f'"{name}"')
    job = _set_condition(job, COND_POD_BOUND_RESERVATION, "True", now, message=message)
    job = _status(job, phase=SUCCEEDED, status=STATUS_COMPLETE, reason="", message=message)
    notes.append(Note(NORMAL, STATUS_COMPLETE, message))
    return Step(job=job, evict=evict, notes=tuple(notes))


def _missing_reservation(job: PodMigrationJob, name: str) -> Step:
    ref = job.spec.reservation_options.reservation_ref if job.spec.reservation_options else None
    namespace = ref.namespace if ref is not None else ""
    return _fail(
        job,
        REASON_MISSING_RESERVATION,
        MESSAGE_MISSING_RESERVATION.format(_quoted(namespace, name)),
    )


def _expired(reservation: Reservation) -> bool:
    ready = next((c for c in reservation.status.conditions if c.type == "Ready"), None)
    return ready is not None and ready.reason == "Expired"


def _timeout(job: PodMigrationJob, limits: Limits, now: datetime) -> datetime | None:
    ttl = _ttl(job, limits)
    if ttl <= timedelta(0):
        return None
    return _created(job, now) + ttl


def _scavenge_at(job: PodMigrationJob, limits: Limits, now: datetime) -> datetime:
    ttl = _ttl(job, limits)
    keep = ttl + SCAVENGE_AFTER_TTL if ttl > timedelta(0) else SCAVENGE_WITHOUT_TTL
    return _created(job, now) + keep


def _created_reservation(job: PodMigrationJob) -> str:
    """The reservation this job made, deleted with it ("" when it made none: EvictDirectly, not
    that far yet, or a reservation given in ``reservationRef``, which is not ours to delete)."""
    name = job.metadata.uid
    if reservation_name(job) != name or not _done(job, COND_RESERVATION_CREATED):
        return ""
    return name


def _idle(step: Step, read: Mapping[str, PodMigrationJob]) -> bool:
    """Whether ``step`` changes nothing: its PMJ is as the pass read it (``read``: by name)
    and it creates, evicts, deletes and announces nothing (a PMJ that waits). Its update
    would store nothing: it is not sent."""
    job = step.job
    if job is None or step.create is not None or step.evict is not None:
        return False
    if step.delete_reservation or step.notes:
        return False
    before = read.get(job.metadata.name)
    return before is not None and (job is before or job == before)


def _job_name(step: Step) -> str:
    job = step.job or (step.evict.job if step.evict is not None else None)
    return job.metadata.name if job is not None else "?"


# --- the loop -------------------------------------------------------------------------------------


class MigrationController:
    """The ``migration`` control loop; see the module docstring."""

    name = "migration"

    def __init__(self, limits: Limits | None = None) -> None:
        #: Limits given here win; otherwise the descheduler's ConfigMap sets them (the first
        #: profile's ``MigrationControllerArgs``), else the defaults.
        self._fixed = limits
        self.limits = limits or Limits()
        self._config_source: tuple[str, str | None] | None = None
        self._store: Cluster | None = None
        self._recorder: EventRecorder | None = None
        self._pod_view: Sequence[Object] | None = None
        #: the jobs, reservations and pods this loop wrote, laid over its snapshots until they
        #: show them, and the answers to its writes
        self._outbox = Outbox(kinds=_WRITTEN_KINDS)
        #: PMJ name -> the PMJ as its step writes it (None: scavenged), until that write is
        #: answered (see _apply)
        self._held: dict[str, PodMigrationJob | None] = {}
        #: a write was refused since the last pass ended: run again after RETRY_SECONDS
        self._retry = False
        self._pod_index: World | None = None
        self._rates: MigrationRates | None = None
        self._rates_of: tuple[float, int, tuple[ObjectRate, ...]] | None = None
        self._evictions: EvictionBuckets | None = None

    @property
    def eviction_buckets(self) -> EvictionBuckets | None:
        """The ``evictQPS`` buckets shared with the descheduler loop (None: its own)."""
        return self._evictions

    def share_evictions(self, buckets: EvictionBuckets) -> None:
        """Take ``evictQPS`` tokens from ``buckets``, shared with the descheduler loop's
        direct evictions (:func:`controller.loops.build_loops` links the two)."""
        self._evictions = buckets
        self._rates = None

    def _rates_for(self, limits: Limits) -> MigrationRates:
        """The token buckets of ``limits``, kept while the rates stay the same."""
        key = (limits.evict_qps, limits.evict_burst, limits.object_limiters)
        if self._rates is None or key != self._rates_of:
            self._rates = limits.rates(self._evictions)
            self._rates_of = key
        return self._rates

    def _configure(self, snapshot: Snapshot) -> None:
        """Limits from the descheduler's ConfigMap when it changed (a configuration that does
        not load keeps the limits in force: the descheduler loop reports the error)."""
        found = snapshot.get(
            _CONFIG_MAP_KIND, k.DESCHEDULER_CONFIG_NAME, k.DESCHEDULER_CONFIG_NAMESPACE
        )
        if not isinstance(found, ConfigMap):
            self._config_source = None
            self.limits = Limits()
            return
        text = found.data.get(k.DESCHEDULER_CONFIG_KEY)
        source = (found.metadata.uid, text)
        if source == self._config_source:
            return
        self._config_source = source
        try:
            configuration = load_configuration(text or "")
            args = next(
                (
                    p.args[MIGRATION_CONTROLLER]
                    for p in configuration.profiles
                    if MIGRATION_CONTROLLER in p.args
                ),
                None,
            )
        except (DeschedulerConfigError, ValueError) as err:
            log.debug("migration: keeping the limits in force: %s", err)
            return
        try:
            self.limits = Limits.of(args) if args is not None else Limits()
        except ValueError as err:
            # What the descheduler's own checks of the args let through.
            log.warning("migration: keeping the limits in force: MigrationControllerArgs: %s", err)

    def _events(self, ctx: LoopContext) -> EventRecorder:
        if self._recorder is None or self._store is not ctx.store:
            self._store = ctx.store
            self._recorder = EventRecorder(ctx.store, component=COMPONENT, clock=ctx.now)
        return self._recorder

    @property
    def outbox(self) -> Outbox:
        """This loop's writes whose results it has not handled yet."""
        return self._outbox

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        registry = store.registry
        snapshot = self._outbox.over(store.snapshot())
        jobs = [
            j
            for j in snapshot.objects(registry.for_type(PodMigrationJob))
            if isinstance(j, PodMigrationJob)
        ]
        if not jobs:
            self._retry = False
            return None
        now = ctx.now()
        if self._fixed is None:
            self._configure(snapshot)
        limits = self.limits
        wakes: list[datetime] = []
        steps: list[Step] = []
        kept: list[PodMigrationJob] = []
        scavenged: list[PodMigrationJob] = []
        held = self._held
        for job in jobs:
            if held and job.metadata.name in held:
                # Its last step's writes are not all answered yet: it counts as that step
                # writes it (a migrating pod, for the limits) and is looked at again once its
                # own write is answered (an answer arriving wakes the loop).
                waiting = held[job.metadata.name]
                if waiting is not None:
                    kept.append(waiting)
                continue
            at = _scavenge_at(job, limits, now)
            if now >= at:
                scavenged.append(job)
                continue
            wakes.append(at)
            if job.status.phase in FINAL_PHASES or job.spec.paused:
                kept.append(job)
                continue
            due = _timeout(job, limits, now)
            if due is not None and now >= due:
                steps.append(_fail(job, REASON_TIMEOUT, MESSAGE_TIMEOUT))
                continue
            if due is not None:
                wakes.append(due)
            kept.append(job)
        if any(j.status.phase not in FINAL_PHASES and not j.spec.paused for j in kept):
            world = self._world(snapshot, registry)
            rates = self._rates_for(limits)
            arbitration = arbitrate(kept, world, limits, now, rates=rates)
            if arbitration.wake_at is not None:
                wakes.append(arbitration.wake_at)
            steps.extend(missing_pod(j) for j in arbitration.missing)
            steps.extend(forbidden(j, pod) for j, pod in arbitration.forbidden)
            running = [
                j
                for j in kept
                if j.status.phase == RUNNING and not j.spec.paused and j.metadata.name not in held
            ]
            steps.extend(
                advance(j, world, limits, now, rates=rates)
                for j in (*running, *arbitration.admitted)
            )
            for name, limit in arbitration.waiting.items():
                log.debug("PodMigrationJob %s waits: %s reached", name, limit)
        wakes.extend(s.wake_at for s in steps if s.wake_at is not None)
        read = {j.metadata.name: j for j in jobs}
        self._apply(ctx, scavenged, [s for s in steps if not _idle(s, read)])
        if self._retry:  # a write refused since the last pass (this one's included)
            self._retry = False
            wakes.append(now + timedelta(seconds=RETRY_SECONDS))
        if not wakes:
            return None
        return max(0.0, (min(wakes) - now).total_seconds())

    def _world(self, snapshot: Snapshot, registry: Registry) -> World:
        """The pods and reservations of ``snapshot``; the pod index is rebuilt only when the
        pods changed since the last pass."""
        view = snapshot.objects(registry.for_type(Pod))
        if view is not self._pod_view or self._pod_index is None:
            self._pod_view = view
            self._pod_index = World.of((p for p in view if isinstance(p, Pod)), ())
        reservations = {
            r.metadata.name: r
            for r in snapshot.objects(registry.for_type(Reservation))
            if isinstance(r, Reservation)
        }
        return dataclasses.replace(self._pod_index, reservations=reservations)

    # -- writes -----------------------------------------------------------------------------

    def _apply(
        self, ctx: LoopContext, scavenged: Sequence[PodMigrationJob], steps: Sequence[Step]
    ) -> None:
        """Send the pass's writes, in two batches (see :class:`_Work`).

        The first holds what a PMJ's own write waits on (the reservation a scavenged PMJ made,
        to delete; a step's reservation to create, pod to evict, reservation to delete) and the
        writes of the PMJs that wait on nothing; once it is answered, the second holds the
        writes of the PMJs that waited, made from the answers (the created reservation in
        ``reservationRef``, a refused reservation or eviction, nothing after a refused
        reservation delete). From now until its own write is answered a PMJ is held
        (:attr:`_held`): it counts as its step writes it and is not stepped again, so nothing
        is created or evicted twice while an answer is late, and its next write carries the
        resourceVersion its last one stored. The Events of the pass are recorded once all of
        it is answered, in the order of the steps. A refused eviction, reservation delete or
        PMJ update has the loop try again after :data:`RETRY_SECONDS`; a refused scavenge is
        tried again at the next pass."""
        registry = ctx.store.registry
        writes: list[Write] = []
        works = [self._scavenging(registry, job, writes) for job in scavenged]
        works.extend(self._stepping(ctx, step, writes) for step in steps)
        for work in works:
            if work.job is not None:
                self._held[work.name] = work.job if work.step is not None else None
            if not work.waits:
                self._write_job(registry, work, writes)
        self._send(ctx, writes, functools.partial(self._first_answered, ctx, works))

    def _send(self, ctx: LoopContext, writes: Sequence[Write], then: Then) -> None:
        """Send ``writes`` through the outbox; ``then`` at once when there are none."""
        if writes:
            self._outbox.send(ctx.store, writes, then)
        else:
            then(())

    def _scavenging(self, registry: Registry, job: PodMigrationJob, writes: list[Write]) -> _Work:
        """A PMJ past its scavenge time: the reservation it made deleted first (when it made
        one), then the PMJ."""
        work = _Work(name=job.metadata.name, job=job)
        reservation = _created_reservation(job)
        if reservation:
            work.delete_at = len(writes)
            writes.append(Write.delete(registry.for_type(Reservation), reservation))
        return work

    def _stepping(self, ctx: LoopContext, step: Step, writes: list[Write]) -> _Work:
        """``step``'s writes before its PMJ's (appended to ``writes``), in the order the step
        makes them: its reservation created, its pod evicted, a reservation deleted."""
        work = _Work(name=_job_name(step), job=step.job, notes=step.notes, step=step)
        if step.create is not None and step.job is not None:
            work.create_at = len(writes)
            writes.append(Write.create(step.create))
        if step.evict is not None:
            eviction, event = self._eviction_write(ctx, step.evict)
            if eviction is not None:
                work.evict_at = len(writes)
                writes.append(eviction)
                work.eviction = eviction
                work.evicted = event
            elif event is not None:
                work.events.append(event)  # a dry run: proposed, nothing to wait for
        if step.delete_reservation:
            work.delete_at = len(writes)
            writes.append(
                Write.delete(ctx.store.registry.for_type(Reservation), step.delete_reservation)
            )
        return work

    def _write_job(self, registry: Registry, work: _Work, writes: list[Write]) -> None:
        """Append the PMJ's own write (its update; its delete when scavenged) to ``writes``."""
        job = work.job
        if job is None:
            return
        work.write_at = len(writes)
        if work.step is None:
            writes.append(Write.delete_of(registry.for_type(PodMigrationJob), job))
        else:
            writes.append(Write.update(job))

    def _first_answered(
        self, ctx: LoopContext, works: Sequence[_Work], results: Sequence[Result]
    ) -> None:
        """The first batch answered: what waited on it is made from the answers and sent."""
        registry = ctx.store.registry
        writes: list[Write] = []
        for work in works:
            if work.waits:
                self._settle(work, results)
                if work.job is None:
                    self._held.pop(work.name, None)  # nothing more to write: looked at again
                self._write_job(registry, work, writes)
            elif work.write_at >= 0:
                self._answered(work, results[work.write_at])
        if writes:
            self._send(ctx, writes, functools.partial(self._second_answered, ctx, works))
        else:
            self._announce(ctx, works)

    def _second_answered(
        self, ctx: LoopContext, works: Sequence[_Work], results: Sequence[Result]
    ) -> None:
        """The second batch (the PMJs that waited) answered: the pass is all answered."""
        for work in works:
            if work.waits and work.write_at >= 0:
                self._answered(work, results[work.write_at])
        self._announce(ctx, works)

    def _settle(self, work: _Work, results: Sequence[Result]) -> None:
        """Make ``work``'s PMJ write from the answers to what it waited on (as the PMJ's update
        followed those writes when they were made one by one)."""
        job, step = work.job, work.step
        if work.create_at >= 0 and job is not None:
            result = results[work.create_at]
            if isinstance(result, AlreadyExists):
                pass  # made by an earlier pass whose write of the job failed
            elif isinstance(result, StoreError):
                message = f"Failed to create Reservation caused by {result}"
                job = _ended(job, FAILED, REASON_FAILED_CREATE_RESERVATION, message)
                work.notes = (Note(WARNING, REASON_FAILED_CREATE_RESERVATION, message),)
            elif isinstance(made := result[0], Reservation):
                job = _reservation_ref(job, made)
        eviction = work.eviction
        if work.evict_at >= 0 and step is not None and step.evict is not None:
            result = results[work.evict_at]
            evict = step.evict
            pod = evict.pod.metadata
            if isinstance(result, NotFound) and eviction is not None and eviction.removes:
                pass  # gone already
            elif isinstance(result, StoreError):
                # Back to before the eviction: tried again.
                log.warning("PodMigrationJob %s: eviction failed: %s", work.name, result)
                job = _status(evict.job, reason=REASON_FAILED_EVICT, message=str(result))
                failed = f"Failed evict Pod {_quoted(pod.namespace, pod.name)} caused by {result}"
                work.notes = (Note(WARNING, REASON_EVICTING, failed),)
                self._retry = True
            else:
                if work.evicted is not None:
                    work.events.append(work.evicted)
                log.info(
                    "pod %s/%s %s for PodMigrationJob %s",
                    pod.namespace,
                    pod.name,
                    evict.plan.verb,
                    evict.job.metadata.name,
                )
        if work.delete_at >= 0:
            result = results[work.delete_at]
            if isinstance(result, StoreError) and not isinstance(result, NotFound):
                if step is None:
                    log.warning("cannot delete PodMigrationJob %s: %s", work.name, result)
                else:
                    log.warning("PodMigrationJob %s: write failed: %s", work.name, result)
                    self._retry = True
                job = None
        work.job = job

    def _answered(self, work: _Work, result: Result) -> None:
        """The PMJ's own write answered: it is no longer held (the outbox shows what was
        stored until the snapshots do), and its Events are queued (on the PMJ as stored), or
        the failure logged."""
        self._held.pop(work.name, None)
        if work.step is None:
            if isinstance(result, NotFound):
                return
            if isinstance(result, StoreError):
                log.warning("cannot delete PodMigrationJob %s: %s", work.name, result)
            else:
                log.info("PodMigrationJob %s scavenged", work.name)
            return
        if isinstance(result, StoreError):
            log.warning("PodMigrationJob %s: write failed: %s", work.name, result)
            self._retry = True
            return
        written = result[0]
        work.events.extend((written, n.type, n.reason, n.message) for n in work.notes)
        if not isinstance(written, PodMigrationJob):
            return
        phase = written.status.phase
        if phase == FAILED:
            log.info("PodMigrationJob %s failed: %s", work.name, written.status.message)
        elif phase == SUCCEEDED:
            log.info("PodMigrationJob %s succeeded: %s", work.name, written.status.message)

    def _announce(self, ctx: LoopContext, works: Sequence[_Work]) -> None:
        """Record the Events of a pass's writes, in the order of its steps, in one batch."""
        events = [event for work in works for event in work.events]
        if events:
            self._events(ctx).record_many(events)

    def _eviction_write(
        self, ctx: LoopContext, eviction: Eviction
    ) -> tuple[Write | None, _Event | None]:
        """The write that evicts as the plan says (:mod:`.evictionpolicy`), and the Event on the
        pod once it succeeded. Nothing for a pod gone, replaced by another of its name, or
        marked for soft eviction before; no write but the Event for a dry run."""
        pod, job, plan = eviction.pod, eviction.job, eviction.plan
        annotations = job.metadata.annotations
        reason = annotations.get(k.ANNOTATION_EVICT_REASON, "")
        trigger = annotations.get(k.ANNOTATION_EVICT_TRIGGER, "")
        by = f"PodMigrationJob {job.metadata.name}"
        if trigger:
            by = f"{by} ({trigger})"
        message = event_message(plan, by, reason)
        store = ctx.store
        kind = store.registry.for_type(Pod)
        try:
            current = store.get(kind, pod.metadata.name, pod.metadata.namespace)
        except NotFound:
            return None, None
        if not isinstance(current, Pod) or current.metadata.uid != pod.metadata.uid:
            return None, None  # already replaced by a pod of the same name
        if plan.dry_run:
            return None, (pod, NORMAL, EVENT_EVICTION_PROPOSED, message)
        evicted = (pod, WARNING, EVENT_EVICTED, message)
        if plan.policy == SOFT_EVICTION:
            if ANNOTATION_SOFT_EVICTION in current.metadata.annotations:
                return None, None  # marked before
            marked = soft_evicted(current, plan, by, reason, ctx.now())
            if plan.resource_version:
                meta = _replace(marked.metadata, resource_version=plan.resource_version)
                marked = _replace(marked, metadata=meta)
            return Write.update(marked), evicted
        write = Write.evict(kind, current)
        if plan.resource_version:
            write = dataclasses.replace(write, resource_version=plan.resource_version)
        return write, evicted


#: An Event to record: (object, type, reason, message).
_Event = tuple[Object, str, str, str]


@dataclass(slots=True, eq=False)
class _Work:
    """One PMJ's writes in a pass (:meth:`MigrationController._apply`): the writes its own
    waits on, by their places in the pass's first batch (-1: none), then its own write, then
    its Events."""

    #: the PMJ's name (holds, logs)
    name: str
    #: the PMJ to write once what it waits on answered (None: nothing to write)
    job: PodMigrationJob | None
    #: the Events on the PMJ, once written
    notes: tuple[Note, ...] = ()
    #: the step it does; None: the PMJ is scavenged (``job`` is deleted)
    step: Step | None = None
    create_at: int = -1
    evict_at: int = -1
    #: the eviction's write, and the Event on the pod once it succeeded
    eviction: Write | None = None
    evicted: _Event | None = None
    delete_at: int = -1
    #: the place of the PMJ's own write in its batch (-1: not sent)
    write_at: int = -1
    #: the Events to record, in order
    events: list[_Event] = field(default_factory=list)

    @property
    def waits(self) -> bool:
        """Whether the PMJ's own write waits on writes of the first batch."""
        return self.create_at >= 0 or self.evict_at >= 0 or self.delete_at >= 0
