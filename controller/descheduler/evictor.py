"""The evictor of one descheduling cycle, and the ``MigrationController`` plugin's arguments.

Plugins decide; the evictor admits or refuses (controller-spec §6.1, §6.2). For each profile the
loop builds a :class:`CycleEvictor` over the profile's :class:`~.framework.CycleView`; the
profiles of one cycle share a :class:`CycleLedger` (the limiter and what was admitted so far).

``filter(pod)`` (the ``MigrationController`` filter) refuses, in this order:

1. a pod already admitted this cycle, or with an active PodMigrationJob
   (``Pending``/``Running``);
2. nothing else when the pod carries ``descheduler.alpha.kubernetes.io/evict`` (every check
   below, node fit included, is bypassed); else
   ``scheduling.koordinator.sh/eviction-cost: 2147483647`` (MaxInt32);
3. the standard evictor filters: a terminating, mirror, static or DaemonSet pod; a bare pod
   (no ownerReferences) unless ``evictAllBarePods``, or ``evictFailedBarePods`` and it failed;
   local storage (``emptyDir``/``hostPath`` volumes) unless ``evictLocalStoragePods``; a
   system-critical pod (``system-cluster-critical``, ``system-node-critical`` or priority
   >= 2000000000) unless ``evictSystemCriticalPods``, and then (as upstream, only then) a pod
   whose priority is at or above ``priorityThreshold`` (``value`` or a PriorityClass ``name``);
   a pod with a PersistentVolumeClaim when ``ignorePvcPods``; ``labelSelector``;
   ``namespaces`` include/exclude; the expected-replicas check (a workload of 1 pod, or of as
   many pods as its migrating or unavailable limit, is not migrated) unless
   ``skipCheckExpectedReplicas``;
4. the migrating limits, counting the active PodMigrationJobs of other pods plus the pods this
   cycle evicts directly: ``maxMigratingGlobally``, ``maxMigratingPerNode`` (2),
   ``maxMigratingPerNamespace`` (0 or unset: no limit), ``maxMigratingPerWorkload`` and
   ``maxUnavailablePerWorkload`` (not-Ready pods of the workload plus its migrating ones).
   PodMigrationJobs admitted this cycle do not count here (as upstream, where the jobs a
   cycle creates wait for arbitration): the ``migration`` loop starts them only as these
   limits allow, so a DrainNode plugin can ask for every pod of a node at once.

``skipEvictionGates`` drops single checks: ``MaxUnavailablePerWorkload``,
``MaxMigratingPerWorkload``, ``MaxMigratingPerNode``, ``MaxMigratingPerNamespace``,
``MaxMigratingGlobally``, ``ExpectedReplicas``, ``PVC``, ``BarePods``, ``LocalStorage``,
``SystemCritical``, ``PriorityThreshold``, ``LabelSelector``, ``Namespaces``, ``NodeFit``.

``pre_eviction_filter(pod)`` is node fit when ``nodeFit`` is on: some other Ready node (of the
args' ``nodeSelector``) fits the pod (:func:`~.nodefit.fits`).

``evict(pod, plugin=, reason=)`` runs both filters again (earlier admissions count), then the
cycle's limits of the DeschedulerConfiguration (``maxNoOfPodsToEvictPerNode``,
``PerNamespace``, ``Total``: ``count + 1 <= max``), then, for a pod that is deleted now (mode
``EvictDirectly``, or a pod of a scheduler outside ``schedulerNames``), the ``evictQPS`` /
``evictBurst`` token bucket (an empty bucket refuses: the pod is tried again next cycle), and
the object limiters (per workload or namespace: ``maxMigrating`` per ``duration``;
``objectLimiters: {}`` or a ``0s`` duration turns them off). In dry run the rates do not apply
and the admission is a proposal. Within a cycle the checks that admissions cannot change (the
standard filters, expected replicas, node fit) are worked out once per pod.

A workload is the pod's controller (its ``controller: true`` owner reference); its size is the
number of live pods with that controller (koordpy has no ReplicaSet or StatefulSet objects to
read a desired replica count from).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, TypeAlias

import msgspec

from apis import constants as k
from apis.core import Node, Pod
from apis.duration import Duration
from apis.labels import Selector, SelectorError, parse_selector
from apis.meta import LabelSelector, Model
from apis.scheduling import DeleteOptions
from controller.descheduler import nodefit
from controller.descheduler.evictionpolicy import check_delete_options
from controller.descheduler.framework import CycleView, EvictionIntent
from controller.descheduler.migration import (
    MODE_EVICT_DIRECTLY,
    MODE_RESERVATION_FIRST,
    MODES,
    workload_limit,
)

__all__ = [
    "EVICTION_GATES",
    "ActiveMigration",
    "Admission",
    "ArbitrationArgs",
    "CycleEvictor",
    "CycleLedger",
    "MigrationController",
    "MigrationControllerArgs",
    "MigrationNamespaces",
    "NotReady",
    "ObjectLimiter",
    "PriorityThreshold",
    "Refusal",
    "TokenBucket",
    "controller_uid",
    "direct_nodes",
    "eviction_mode",
]

NAME: Final = "MigrationController"
KIND: Final = "MigrationControllerArgs"
DEFAULT_SCHEDULER: Final = "default-scheduler"

#: The gates ``skipEvictionGates`` may name.
EVICTION_GATES: Final = frozenset(
    {
        "MaxUnavailablePerWorkload",
        "MaxMigratingPerWorkload",
        "MaxMigratingPerNode",
        "MaxMigratingPerNamespace",
        "MaxMigratingGlobally",
        "ExpectedReplicas",
        "PVC",
        "BarePods",
        "LocalStorage",
        "SystemCritical",
        "PriorityThreshold",
        "LabelSelector",
        "Namespaces",
        "NodeFit",
    }
)
EVICTION_POLICIES: Final = ("Eviction", "Delete", "SoftEviction")
OBJECT_LIMITER_TYPES: Final = ("workload", "namespace")

#: ``descheduler_pods_evicted`` results of the cycle's limits (koord-descheduler's words).
PER_NODE_REACHED: Final = "maximum number of pods per node reached"
PER_NAMESPACE_REACHED: Final = "maximum number of pods per namespace reached"
TOTAL_REACHED: Final = "maximum number of pods per cycle reached"


def _fail(field_name: str, value: object, rule: str) -> ValueError:
    return ValueError(f"{field_name}: {value!r} {rule}")


# --- arguments ----------------------------------------------------------------------------------


class PriorityThreshold(Model):
    """Pods at or above this priority are not evicted: a ``value``, or a PriorityClass
    ``name`` (not both)."""

    value: int | None = None
    name: str = ""


class MigrationNamespaces(Model):
    """Namespaces whose pods may be evicted: only ``include``, or all but ``exclude``."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


class ObjectLimiter(Model):
    """At most ``maxMigrating`` migrations per ``duration`` per object (0: the workload's
    ``maxMigratingPerWorkload``), ``burst`` at once (0: 1)."""

    duration: Duration = Duration.parse("5m")
    max_migrating: int = 0
    burst: int = 0


class ArbitrationArgs(Model):
    enabled: bool = True
    interval: Duration = Duration.parse("500ms")


def _default_object_limiters() -> dict[str, ObjectLimiter]:
    return {"workload": ObjectLimiter()}


def _is_percent(value: str) -> bool:
    return value.endswith("%") and value[:-1].isdigit()


class MigrationControllerArgs(Model):
    """``MigrationControllerArgs`` with every field and default of controller-spec §6.2."""

    dry_run: bool = False
    max_concurrent_reconciles: int = 1
    #: Migrating pods per node (0: no limit).
    max_migrating_per_node: int | None = 2
    max_migrating_per_namespace: int | None = None
    max_migrating_globally: int | None = None
    #: An int or a percentage of the workload's pods; unset: 10% above 10 pods, 2 from 4, 1.
    max_migrating_per_workload: int | str | None = None
    max_unavailable_per_workload: int | str | None = None
    skip_check_expected_replicas: bool = False
    default_job_mode: str = MODE_RESERVATION_FIRST
    default_job_ttl: Duration = msgspec.field(default=Duration.parse("5m"), name="defaultJobTTL")
    #: ReservationFirst migrates only pods of these schedulers; others are evicted directly.
    scheduler_names: tuple[str, ...] = ("koord-scheduler",)
    eviction_policy: str = "Eviction"
    #: Evictions per second (a number or a numeric string; 0: no limit).
    evict_qps: float | str = msgspec.field(default=10.0, name="evictQPS")
    evict_burst: int = 1
    object_limiters: dict[str, ObjectLimiter] = msgspec.field(
        default_factory=_default_object_limiters
    )
    arbitration_args: ArbitrationArgs = msgspec.field(default_factory=ArbitrationArgs)
    default_delete_options: DeleteOptions | None = None
    evict_failed_bare_pods: bool = False
    evict_all_bare_pods: bool = False
    evict_local_storage_pods: bool = False
    evict_system_critical_pods: bool = False
    ignore_pvc_pods: bool = False
    priority_threshold: PriorityThreshold | None = None
    label_selector: LabelSelector | None = None
    namespaces: MigrationNamespaces | None = None
    node_fit: bool = False
    #: Nodes node fit may move a pod to (label selector text; empty: every node).
    node_selector: str = ""
    skip_eviction_gates: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_concurrent_reconciles <= 0:
            raise _fail("maxConcurrentReconciles", self.max_concurrent_reconciles, "must be > 0")
        for name, count in (
            ("maxMigratingPerNode", self.max_migrating_per_node),
            ("maxMigratingPerNamespace", self.max_migrating_per_namespace),
            ("maxMigratingGlobally", self.max_migrating_globally),
        ):
            if count is not None and count < 0:
                raise _fail(name, count, "must be >= 0")
        for name, limit in (
            ("maxMigratingPerWorkload", self.max_migrating_per_workload),
            ("maxUnavailablePerWorkload", self.max_unavailable_per_workload),
        ):
            if isinstance(limit, str) and not _is_percent(limit):
                raise _fail(name, limit, "is neither an integer nor a percentage like '10%'")
            if isinstance(limit, int) and limit < 0:
                raise _fail(name, limit, "must be >= 0")
        if self.default_job_mode not in MODES:
            raise _fail("defaultJobMode", self.default_job_mode, f"is not one of {list(MODES)}")
        if self.default_job_ttl.nanoseconds < 0:
            raise _fail("defaultJobTTL", str(self.default_job_ttl), "must not be negative")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise _fail(
                "evictionPolicy", self.eviction_policy, f"is not one of {list(EVICTION_POLICIES)}"
            )
        check_delete_options(self.default_delete_options, "defaultDeleteOptions")
        qps = self.qps  # checks the string form
        if qps < 0:
            raise _fail("evictQPS", self.evict_qps, "must not be negative")
        if qps > 0 and self.evict_burst <= 0:
            raise _fail("evictBurst", self.evict_burst, "must be > 0 when evictQPS is set")
        for kind, limiter in self.object_limiters.items():
            if kind not in OBJECT_LIMITER_TYPES:
                raise _fail("objectLimiters", kind, f"is not one of {list(OBJECT_LIMITER_TYPES)}")
            if limiter.duration.nanoseconds < 0:
                raise _fail(
                    f"objectLimiters.{kind}.duration",
                    str(limiter.duration),
                    "must not be negative",
                )
            if limiter.max_migrating < 0 or limiter.burst < 0:
                raise _fail(f"objectLimiters.{kind}", limiter, "counts must be >= 0")
        threshold = self.priority_threshold
        if threshold is not None and threshold.value is not None and threshold.name:
            raise _fail("priorityThreshold", threshold, "sets both value and name")
        namespaces = self.namespaces
        if namespaces is not None and namespaces.include and namespaces.exclude:
            raise _fail("namespaces", namespaces, "sets both include and exclude")
        try:
            if self.label_selector is not None:
                Selector.from_label_selector(self.label_selector)
            if self.node_selector:
                parse_selector(self.node_selector)
        except SelectorError as err:
            raise _fail(
                "labelSelector" if err.text != self.node_selector else "nodeSelector",
                err.text,
                err.reason,
            ) from None
        for gate in self.skip_eviction_gates:
            if gate not in EVICTION_GATES:
                raise _fail("skipEvictionGates", gate, f"is not one of {sorted(EVICTION_GATES)}")

    @property
    def qps(self) -> float:
        """``evictQPS`` as a number."""
        value = self.evict_qps
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise _fail("evictQPS", value, "is not a number") from None
        return float(value)


# --- the plugin ---------------------------------------------------------------------------------


class MigrationController:
    """The ``MigrationController`` evict and filter plugin: its args, for the loop's evictors."""

    name = NAME

    def __init__(self, args: MigrationControllerArgs) -> None:
        self.args = args


# --- rate limiting --------------------------------------------------------------------------------


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens per second up to ``burst``; starts full. ``rate <= 0``: no limit."""

    rate: float
    burst: int
    tokens: float = -1.0
    last: datetime | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = float(max(self.burst, 1))

    def _refill(self, now: datetime) -> None:
        if self.last is not None and now > self.last:
            elapsed = (now - self.last).total_seconds()
            self.tokens = min(float(max(self.burst, 1)), self.tokens + elapsed * self.rate)
        if self.last is None or now > self.last:
            self.last = now

    def available(self, now: datetime) -> bool:
        if self.rate <= 0:
            return True
        self._refill(now)
        return self.tokens >= 1.0

    def take(self, now: datetime) -> bool:
        """Take one token if there is one."""
        if not self.available(now):
            return False
        if self.rate > 0:
            self.tokens -= 1.0
        return True


# --- what the loop hands over -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveMigration:
    """A ``Pending``/``Running`` PodMigrationJob's pod: where it is and its workload."""

    namespace: str
    name: str
    node: str = ""
    #: uid of the pod's controller ("" for a bare pod).
    workload: str = ""


class Admission(msgspec.Struct, frozen=True):
    """One admitted eviction and how it is carried out."""

    intent: EvictionIntent
    #: ``ReservationFirst`` (a PodMigrationJob) or ``EvictDirectly`` (delete now).
    mode: str
    #: The profile whose plugin asked.
    profile: str
    args: MigrationControllerArgs


@dataclass(frozen=True, slots=True)
class Refusal:
    """An eviction the cycle's limits refused (``result`` is the metric label)."""

    pod: Pod
    node: str
    plugin: str
    result: str


def controller_uid(pod: Pod) -> str:
    """uid of the pod's controller reference ("" when it has none)."""
    for owner in pod.metadata.owner_references:
        if owner.controller:
            return owner.uid
    return ""


def eviction_mode(pod: Pod, args: MigrationControllerArgs) -> str:
    """How ``pod`` is evicted: ReservationFirst only for pods of ``schedulerNames``."""
    if args.default_job_mode == MODE_RESERVATION_FIRST and (
        (pod.spec.scheduler_name or DEFAULT_SCHEDULER) in args.scheduler_names
    ):
        return MODE_RESERVATION_FIRST
    return MODE_EVICT_DIRECTLY


def direct_nodes(
    args: MigrationControllerArgs, nodes_by_scheduler: Mapping[str, Iterable[str]]
) -> frozenset[str]:
    """The nodes with a pod :func:`eviction_mode` evicts directly, from the nodes of each
    ``spec.schedulerName`` (the cycle view's ``direct_nodes``)."""
    return frozenset(
        node
        for scheduler, nodes in nodes_by_scheduler.items()
        if args.default_job_mode != MODE_RESERVATION_FIRST
        or (scheduler or DEFAULT_SCHEDULER) not in args.scheduler_names
        for node in nodes
    )


_NONE: Final[frozenset[tuple[str, str]]] = frozenset()
#: A workload's pod list and the keys of those of its pods that are not Ready.
NotReady: TypeAlias = tuple[Sequence[Pod], frozenset[tuple[str, str]]]


def _key(pod: Pod) -> tuple[str, str]:
    return (pod.metadata.namespace, pod.metadata.name)


class CycleLedger:
    """What one cycle admitted so far, across profiles, and its limits."""

    def __init__(
        self,
        *,
        now: datetime,
        max_per_node: int | None = None,
        max_per_namespace: int | None = None,
        max_total: int | None = None,
        migrations: Iterable[ActiveMigration] = (),
        workload_pods: Mapping[str, Sequence[Pod]] | None = None,
        priority_classes: Mapping[str, int] | None = None,
        not_ready_before: Mapping[str, NotReady] | None = None,
    ) -> None:
        """``not_ready_before``: :meth:`not_ready_asked` of the cycle before, taken again for
        a workload whose pod list is the same object (its pods are then the same)."""
        self.now = now
        self.max_per_node = max_per_node
        self.max_per_namespace = max_per_namespace
        self.max_total = max_total
        #: uid of a workload -> its live pods.
        self.workload_pods: Mapping[str, Sequence[Pod]] = workload_pods or {}
        #: PriorityClass name -> value (the built-in system classes included).
        self.priority_classes: Mapping[str, int] = {
            **k.SYSTEM_PRIORITY_CLASSES,
            **(priority_classes or {}),
        }
        self.admitted: list[Admission] = []
        self.refused: list[Refusal] = []
        self.cordons: dict[str, str] = {}
        self.evicted_per_node: Counter[str] = Counter()
        self.evicted_per_namespace: Counter[str] = Counter()
        self.evicted_total = 0
        #: Pods with an active PodMigrationJob, and those evicted directly this cycle.
        self.migrating: set[tuple[str, str]] = set()
        #: Pods admitted this cycle.
        self.taken: set[tuple[str, str]] = set()
        self.migrating_per_node: Counter[str] = Counter()
        self.migrating_per_namespace: Counter[str] = Counter()
        self.migrating_per_workload: dict[str, set[tuple[str, str]]] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._not_ready: dict[str, NotReady] = {}
        self._not_ready_before: Mapping[str, NotReady] = not_ready_before or {}
        for migration in migrations:
            self._migrating(migration.namespace, migration.name, migration.node, migration.workload)

    def _migrating(self, namespace: str, name: str, node: str, workload: str) -> None:
        key = (namespace, name)
        if key in self.migrating:
            return
        self.migrating.add(key)
        self.migrating_per_node[node] += 1
        self.migrating_per_namespace[namespace] += 1
        if workload:
            self.migrating_per_workload.setdefault(workload, set()).add(key)

    def not_ready(self, workload: str) -> frozenset[tuple[str, str]]:
        """The workload's pods that are not Ready (computed once per cycle)."""
        found = self._not_ready.get(workload)
        if found is not None:
            return found[1]
        pods = self.workload_pods.get(workload, ())
        last = self._not_ready_before.get(workload)
        if last is not None and last[0] is pods:
            self._not_ready[workload] = last
            return last[1]
        keys: list[tuple[str, str]] = []
        for pod in pods:
            # Ready: its Ready condition is True (inlined: every pod of the workload is read)
            for condition in pod.status.conditions:
                if condition.type == "Ready":
                    if condition.status != "True":
                        keys.append(_key(pod))
                    break
            else:
                keys.append(_key(pod))
        keys_found = frozenset(keys) if keys else _NONE
        self._not_ready[workload] = (pods, keys_found)
        return keys_found

    def not_ready_asked(self) -> dict[str, NotReady]:
        """What :meth:`not_ready` gave this cycle, with each workload's pod list: the next
        cycle's ``not_ready_before``."""
        return dict(self._not_ready)

    @property
    def intents(self) -> list[EvictionIntent]:
        return [admission.intent for admission in self.admitted]

    def used(self, node: str, pods: Sequence[Pod]) -> dict[str, int]:
        """Requests of ``pods`` (those on ``node``), summed once per cycle."""
        found = self._used.get(node)
        if found is None:
            found = self._used[node] = nodefit.requested(pods)
        return found

    def limit_refusal(self, pod: Pod) -> str:
        """The cycle limit evicting ``pod`` would break ("" when none)."""
        node = pod.spec.node_name
        if self.max_per_node is not None and self.evicted_per_node[node] + 1 > self.max_per_node:
            return PER_NODE_REACHED
        namespace = pod.metadata.namespace
        if (
            self.max_per_namespace is not None
            and self.evicted_per_namespace[namespace] + 1 > self.max_per_namespace
        ):
            return PER_NAMESPACE_REACHED
        if self.max_total is not None and self.evicted_total + 1 > self.max_total:
            return TOTAL_REACHED
        return ""

    def admit(self, admission: Admission) -> None:
        intent = admission.intent
        pod = intent.pod
        self.admitted.append(admission)
        self.evicted_per_node[intent.node] += 1
        self.evicted_per_namespace[pod.metadata.namespace] += 1
        self.evicted_total += 1
        key = (pod.metadata.namespace, pod.metadata.name)
        self.taken.add(key)
        if admission.mode == MODE_EVICT_DIRECTLY:
            # Deleted at once: nothing else throttles it, so it counts as migrating now. A
            # PodMigrationJob waits for the migration loop's arbitration, which applies the
            # migrating limits as the jobs run.
            self._migrating(key[0], key[1], intent.node, controller_uid(pod))


@dataclass(slots=True)
class _Compiled:
    """The args' selectors and sets, parsed once."""

    skip: frozenset[str]
    labels: Selector | None
    include: frozenset[str]
    exclude: frozenset[str]
    node_selector: Selector
    threshold: int | None
    threshold_error: str = ""


def _compile(args: MigrationControllerArgs, classes: Mapping[str, int]) -> _Compiled:
    threshold: int | None = None
    error = ""
    given = args.priority_threshold
    if given is not None:
        if given.value is not None:
            threshold = given.value
        elif given.name:
            found = classes.get(given.name)
            if found is None:
                error = f"priority class {given.name!r} of priorityThreshold not found"
            else:
                threshold = found
    namespaces = args.namespaces or MigrationNamespaces()
    return _Compiled(
        skip=frozenset(args.skip_eviction_gates),
        labels=(
            Selector.from_label_selector(args.label_selector)
            if args.label_selector is not None
            else None
        ),
        include=frozenset(namespaces.include),
        exclude=frozenset(namespaces.exclude),
        node_selector=(
            parse_selector(args.node_selector) if args.node_selector else Selector.everything()
        ),
        threshold=threshold,
        threshold_error=error,
    )


def _has_local_storage(pod: Pod) -> bool:
    return any("emptyDir" in v or "hostPath" in v for v in pod.spec.volumes)


def _has_pvc(pod: Pod) -> bool:
    return any("persistentVolumeClaim" in v for v in pod.spec.volumes)


def _eviction_cost(pod: Pod) -> int | None:
    text = pod.metadata.annotations.get(k.ANNOTATION_EVICTION_COST)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


class CycleEvictor:
    """The :class:`~.framework.Evictor` of one profile for one cycle (module docstring)."""

    def __init__(
        self,
        view: CycleView,
        ledger: CycleLedger,
        *,
        args: MigrationControllerArgs | None = None,
        profile: str = "",
        dry_run: bool = False,
        filters: bool = True,
        bucket: TokenBucket | None = None,
        object_buckets: dict[tuple[str, str], TokenBucket] | None = None,
        cycle_dry_run: bool | None = None,
    ) -> None:
        """``filters`` False: the profile has no filter plugin (only the limits apply).
        ``bucket`` (``evictQPS``/``evictBurst``) and ``object_buckets`` (the object limiters,
        by (type, object)) are kept by the loop across cycles. ``cycle_dry_run`` False with
        ``dry_run`` True: a plugin's own ``dryRun`` inside a live cycle (its evictions are
        proposals, its cordons are dropped)."""
        self._view = view
        self._ledger = ledger
        self.args = args or MigrationControllerArgs()
        self.profile = profile
        self.dry_run = dry_run or self.args.dry_run
        #: The whole cycle is a dry run (its cordons are reported as proposals).
        self._ledger_dry_run = cycle_dry_run if cycle_dry_run is not None else self.dry_run
        self.filters = filters
        self.bucket = bucket
        self.object_buckets = object_buckets if object_buckets is not None else {}
        self._compiled = _compile(self.args, ledger.priority_classes)
        self._targets: tuple[Node, ...] | None = None
        #: The pod ``filter`` last passed and the number of admissions then (the filter's
        #: answer holds until the next admission).
        self._passed: tuple[Pod, int] | None = None
        self._switches()

    @property
    def ledger(self) -> CycleLedger:
        """The cycle's ledger (shared by the profiles' evictors)."""
        return self._ledger

    # -- the framework's Evictor -----------------------------------------------------------------

    def filter(self, pod: Pod) -> bool:
        if self.refusal(pod):
            return False
        # Remembered for evict: its filter gives the same answer until an admission.
        self._passed = (pod, len(self._ledger.admitted))
        return True

    def pre_eviction_filter(self, pod: Pod) -> bool:
        return not self.misfit(pod)

    def evict(self, pod: Pod, *, plugin: str, reason: str) -> bool:
        ledger = self._ledger
        passed = self._passed
        filtered = passed is not None and passed[0] is pod and passed[1] == len(ledger.admitted)
        if (not filtered and self.refusal(pod)) or self.misfit(pod):
            return False
        limit = ledger.limit_refusal(pod)
        node = pod.spec.node_name
        if limit:
            ledger.refused.append(Refusal(pod=pod, node=node, plugin=plugin, result=limit))
            return False
        mode = eviction_mode(pod, self.args)
        if not self.dry_run and not self._rate_allows(pod, mode):
            return False
        intent = EvictionIntent(
            pod=pod, node=node, plugin=plugin, reason=reason, dry_run=self.dry_run
        )
        ledger.admit(Admission(intent=intent, mode=mode, profile=self.profile, args=self.args))
        return True

    def can_evict_from(self, node: str) -> bool:
        ledger = self._ledger
        if ledger.max_total is not None and ledger.evicted_total >= ledger.max_total:
            return False
        return ledger.max_per_node is None or ledger.evicted_per_node[node] < ledger.max_per_node

    @property
    def intents(self) -> Sequence[EvictionIntent]:
        return self._ledger.intents

    def proposing(self) -> CycleEvictor:
        """A twin over the same ledger whose evictions are only proposals (dry run)."""
        return CycleEvictor(
            self._view,
            self._ledger,
            args=self.args,
            profile=self.profile,
            dry_run=True,
            filters=self.filters,
            bucket=self.bucket,
            object_buckets=self.object_buckets,
            cycle_dry_run=False,
        )

    def cordon(self, node: str, *, plugin: str) -> None:
        if self.dry_run and not self._ledger_dry_run:
            return  # a plugin in dry run within a live cycle: nothing is cordoned
        self._ledger.cordons.setdefault(node, plugin)

    def uncordon(self, node: str) -> None:
        self._ledger.cordons.pop(node, None)

    @property
    def cordoned(self) -> Sequence[str]:
        return tuple(self._ledger.cordons)

    # -- the checks --------------------------------------------------------------------------------

    def _skipped(self, gate: str) -> bool:
        return gate in self._compiled.skip

    def _switches(self) -> None:
        """Which checks apply, decided once from the args and ``skipEvictionGates``."""
        args = self.args
        compiled = self._compiled
        skipped = self._skipped
        self._bare = not args.evict_all_bare_pods and not skipped("BarePods")
        self._local = not args.evict_local_storage_pods and not skipped("LocalStorage")
        self._critical = not args.evict_system_critical_pods and not skipped("SystemCritical")
        self._threshold = (
            not args.evict_system_critical_pods
            and not skipped("PriorityThreshold")
            and (compiled.threshold is not None or bool(compiled.threshold_error))
        )
        self._pvc = args.ignore_pvc_pods and not skipped("PVC")
        self._labels = compiled.labels if not skipped("LabelSelector") else None
        self._namespaces = (
            (compiled.include, compiled.exclude)
            if not skipped("Namespaces") and (compiled.include or compiled.exclude)
            else None
        )
        self._replicas = not args.skip_check_expected_replicas and not skipped("ExpectedReplicas")
        self._max_global = (args.max_migrating_globally or 0) * (
            not skipped("MaxMigratingGlobally")
        )
        self._max_node = (args.max_migrating_per_node or 0) * (not skipped("MaxMigratingPerNode"))
        self._max_namespace = (args.max_migrating_per_namespace or 0) * (
            not skipped("MaxMigratingPerNamespace")
        )
        self._per_workload = not skipped("MaxMigratingPerWorkload")
        self._unavailable = not skipped("MaxUnavailablePerWorkload")
        #: workload uid -> (pods, max migrating, max unavailable)
        self._workloads: dict[str, tuple[int, int, int]] = {}
        #: pod uid -> the refusal of the checks that do not depend on admissions
        self._fixed: dict[str, str] = {}
        #: pod uid -> why node fit refuses it (the nodes do not change during the cycle)
        self._misfits: dict[str, str] = {}
        #: workload uid -> its migrating limits' refusal, and the number of migrating pods
        #: (ledger-wide) it was worked out at
        self._verdicts: dict[str, str] = {}
        self._verdict_at: dict[str, int] = {}

    def refusal(self, pod: Pod) -> str:
        """Why ``filter`` refuses ``pod`` ("" when it passes)."""
        meta = pod.metadata
        annotations = meta.annotations
        key = (meta.namespace, meta.name)
        if key in self._ledger.taken:
            return "pod is already being evicted in this cycle"
        if key in self._ledger.migrating:
            return "pod is already migrating"
        if annotations and k.ANNOTATION_DESCHEDULER_EVICT in annotations:
            return ""
        if annotations and _eviction_cost(pod) == k.EVICTION_COST_FORBIDDEN:
            return "pod is forbidden to migrate by its eviction cost"
        if not self.filters:
            return ""
        workload = controller_uid(pod)
        fixed = self._fixed.get(meta.uid) if meta.uid else None
        if fixed is None:
            # What cannot change during the cycle, worked out once per pod.
            fixed = self._standard(pod) or self._expected_replicas(workload)
            if meta.uid:
                self._fixed[meta.uid] = fixed
        return fixed or self._migrating_limits(pod, workload)

    def _standard(self, pod: Pod) -> str:
        args = self.args
        meta = pod.metadata
        annotations = meta.annotations
        if meta.deletion_timestamp is not None:
            return "pod is terminating"
        if annotations:
            if k.ANNOTATION_MIRROR_POD in annotations:
                return "pod is a mirror pod"
            if annotations.get(k.ANNOTATION_CONFIG_SOURCE, "api") != "api":
                return "pod is a static pod"
        owners = meta.owner_references
        for owner in owners:
            if owner.kind == "DaemonSet":
                return "pod is a DaemonSet pod"
        if (
            not owners
            and self._bare
            and not (args.evict_failed_bare_pods and pod.status.phase == "Failed")
        ):
            return "pod does not have any ownerRefs"
        volumes = pod.spec.volumes
        if volumes and self._local and _has_local_storage(pod):
            return "pod has local storage and evictLocalStoragePods is off"
        if self._critical and self._system_critical(pod):
            return "pod has system critical priority"
        if self._threshold:
            compiled = self._compiled
            if compiled.threshold_error:
                return compiled.threshold_error
            priority = self._priority(pod)
            if (
                compiled.threshold is not None
                and priority is not None
                and priority >= compiled.threshold
            ):
                return "pod has higher priority than the priorityThreshold"
        if volumes and self._pvc and _has_pvc(pod):
            return "pod has a PVC and ignorePvcPods is on"
        if self._labels is not None and not self._labels.matches(meta.labels):
            return "pod labels do not match the labelSelector"
        if self._namespaces is not None:
            include, exclude = self._namespaces
            if include and meta.namespace not in include:
                return f"namespace {meta.namespace} is not included"
            if meta.namespace in exclude:
                return f"namespace {meta.namespace} is excluded"
        return ""

    def _priority(self, pod: Pod) -> int | None:
        if pod.spec.priority is not None:
            return pod.spec.priority
        if pod.spec.priority_class_name:
            return self._ledger.priority_classes.get(pod.spec.priority_class_name)
        return None

    def _system_critical(self, pod: Pod) -> bool:
        if pod.spec.priority_class_name in k.SYSTEM_PRIORITY_CLASSES:
            return True
        priority = pod.spec.priority
        return priority is not None and priority >= k.SYSTEM_CRITICAL_PRIORITY

    def _workload(self, workload: str) -> tuple[int, int, int]:
        """(pods, max migrating, max unavailable) of a workload."""
        found = self._workloads.get(workload)
        if found is None:
            args = self.args
            replicas = len(self._ledger.workload_pods.get(workload, ())) or 1
            found = (
                replicas,
                workload_limit(args.max_migrating_per_workload, replicas),
                workload_limit(args.max_unavailable_per_workload, replicas),
            )
            self._workloads[workload] = found
        return found

    def _expected_replicas(self, workload: str) -> str:
        if not workload or not self._replicas:
            return ""
        replicas, most_migrating, most_unavailable = self._workload(workload)
        if replicas in (1, most_migrating, most_unavailable):
            return f"workload has {replicas} pod(s), too few to migrate one"
        return ""

    def _migrating_limits(self, pod: Pod, workload: str) -> str:
        ledger = self._ledger
        limit = self._max_global
        if limit and len(ledger.migrating) >= limit:
            return f"{len(ledger.migrating)} pods are migrating, the global limit is {limit}"
        node = pod.spec.node_name
        if self._max_node and ledger.migrating_per_node.get(node, 0) >= self._max_node:
            return f"{ledger.migrating_per_node[node]} pods of node {node} are migrating"
        namespace = pod.metadata.namespace
        if self._max_namespace and ledger.migrating_per_namespace[namespace] >= self._max_namespace:
            count = ledger.migrating_per_namespace[namespace]
            return f"{count} pods of namespace {namespace} are migrating"
        if not workload or not (self._per_workload or self._unavailable):
            return ""
        # A workload's verdict changes only when one more pod migrates: pods of the same
        # workload reuse it while the number of migrating pods stays the same.
        count = len(ledger.migrating)
        if self._verdict_at.get(workload) == count:
            return self._verdicts[workload]
        verdict = self._workload_limits(workload)
        self._verdict_at[workload] = count
        self._verdicts[workload] = verdict
        return verdict

    def _workload_limits(self, workload: str) -> str:
        ledger = self._ledger
        _, most_migrating, most_unavailable = self._workload(workload)
        migrating = ledger.migrating_per_workload.get(workload, _NONE)
        if self._per_workload and len(migrating) >= most_migrating:
            return f"{len(migrating)} pods of the workload are migrating"
        if self._unavailable:
            not_ready = ledger.not_ready(workload)
            unavailable = len(migrating | not_ready) if migrating else len(not_ready)
            if unavailable >= most_unavailable:
                return f"{unavailable} pods of the workload are unavailable"
        return ""

    def misfit(self, pod: Pod) -> str:
        """Why ``pre_eviction_filter`` refuses ``pod`` ("" when it passes)."""
        if (
            not self.filters
            or not self.args.node_fit
            or self._skipped("NodeFit")
            or k.ANNOTATION_DESCHEDULER_EVICT in pod.metadata.annotations
        ):
            return ""
        uid = pod.metadata.uid
        found = self._misfits.get(uid) if uid else None
        if found is None:
            found = self._fit_nowhere(pod)
            if uid:
                self._misfits[uid] = found
        return found

    def _fit_nowhere(self, pod: Pod) -> str:
        view = self._view
        here = pod.spec.node_name
        for node in self._target_nodes():
            name = node.metadata.name
            if name == here:
                continue
            pods = view.pods_on(name)
            if nodefit.fits(pod, node, pods, used=self._ledger.used(name, pods)):
                return ""
        return "pod does not fit on any other node"

    def _target_nodes(self) -> tuple[Node, ...]:
        if self._targets is None:
            selector = self._compiled.node_selector
            nodes = self._view.all_nodes.values() if self._view.all_nodes else self._view.nodes
            self._targets = tuple(n for n in nodes if selector.matches(n.metadata.labels))
        return self._targets

    def _rate_allows(self, pod: Pod, mode: str) -> bool:
        now = self._ledger.now
        buckets: list[TokenBucket] = []
        if mode == MODE_EVICT_DIRECTLY and self.bucket is not None:
            if not self.bucket.available(now):
                return False
            buckets.append(self.bucket)
        for kind, limiter in sorted(self.args.object_limiters.items()):
            bucket = self._object_bucket(kind, limiter, pod)
            if bucket is None:
                continue
            if not bucket.available(now):
                return False
            buckets.append(bucket)
        for bucket in buckets:
            bucket.take(now)
        return True

    def _object_bucket(self, kind: str, limiter: ObjectLimiter, pod: Pod) -> TokenBucket | None:
        seconds = limiter.duration.seconds
        if seconds <= 0:
            return None
        if kind == "workload":
            obj = controller_uid(pod)
            if not obj:
                return None
            most = limiter.max_migrating or self._workload(obj)[1]
        else:
            obj = pod.metadata.namespace
            most = limiter.max_migrating
            if most <= 0:
                return None
        key = (kind, obj)
        bucket = self.object_buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(rate=most / seconds, burst=limiter.burst or 1)
            self.object_buckets[key] = bucket
        return bucket
