"""The ``descheduler`` control loop: koord-descheduler's cycles, on the loop's clock.

Configuration. The loop reads a ``DeschedulerConfiguration`` (:mod:`.config`) from ConfigMap
``koordinator-system/koord-descheduler-config``, key ``koord-descheduler-config`` (what
Koordinator's Helm chart installs). No ConfigMap: descheduling is off. A ConfigMap that does not
hold a valid configuration gets a Warning Event ``InvalidConfiguration`` and a log line naming
the error, and the previous configuration (if any) stays in force. A new configuration builds
new plugins and runs a cycle at once.

Cycle (controller-spec §6.1), every ``deschedulingInterval`` (``0s``: once per configuration):

1. the Ready nodes matching the global ``nodeSelector``; fewer than 2: no cycle (logged);
2. one :class:`~.evictor.CycleLedger` for the cycle (the limits of the configuration, the
   active PodMigrationJobs, the workloads' pods); per profile a
   :class:`~.framework.CycleView` of its nodes and a :class:`~.evictor.CycleEvictor` with the
   profile's ``MigrationController`` args;
3. every profile's Deschedule plugins, then every profile's Balance plugins; the plugin
   instances live as long as the configuration (LowNodeLoad keeps its anomaly detectors);
4. the writes, sent in one batch through the loop's outbox (their log lines, metrics and
   Events once the answers are in, a pass later from a remote backend; until its snapshots
   show them the outbox shows them, so no later cycle cordons, evicts or makes a job twice):
   cordons (``spec.unschedulable: true`` and a Normal Event ``Cordoned`` on the node), then
   each admitted eviction:

   - dry run: a Normal Event ``EvictionProposed`` on the pod, nothing else;
   - ``ReservationFirst``: a PodMigrationJob for the ``migration`` loop (name: a UUID derived
     from the pod's uid and the time, so ``koordpy simulate`` stays reproducible; annotations
     ``koordinator.sh/evict-reason``, ``koordinator.sh/evict-trigger`` (the plugin) and
     ``koordinator.sh/job-created-by``; spec ``podRef``, ``mode``, ``ttl``,
     ``deleteOptions``; phase ``Pending``);
   - ``EvictDirectly`` (and, as upstream, a pod of a scheduler outside ``schedulerNames``):
     the pod is evicted now as the ``migration`` loop evicts (:mod:`.evictionpolicy`: the
     pod's ``koordinator.sh/evict-policy`` label or ``evictionPolicy``, and
     ``defaultDeleteOptions``): deleted (if it is still the pod that was seen) or, with
     ``SoftEviction``, annotated; a Warning Event ``Evicted``: ``evicted by <plugin>:
     <reason>`` (``deleted by``, ``marked for soft eviction by``; ``; grace period Ns``).
     These deletes take ``evictQPS`` tokens from the bucket the ``migration`` loop paces the
     evictions of PodMigrationJobs with, when the two share one (:func:`build_loops
     <controller.loops.build_loops>` links them; the rate of each side's
     ``MigrationControllerArgs``).

The loop also keeps the ``descheduler_pod_migration_jobs`` gauge current on every pass.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import functools
import gc
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

import msgspec

from apis import constants as k
from apis.core import ConfigMap, Node, Pod, PriorityClass
from apis.kinds import default_registry
from apis.labels import Selector
from apis.meta import Object, ObjectMeta, ObjectReference
from apis.scheduling import PodMigrationJob, PodMigrationJobSpec, PodMigrationJobStatus
from apis.slo import NodeMetric
from controller.descheduler.config import (
    Configuration,
    DeschedulerConfigError,
    PluginEntry,
    ProfileConfig,
    load_configuration,
)
from controller.descheduler.evictionpolicy import (
    ANNOTATION_SOFT_EVICTION,
    SOFT_EVICTION,
    EvictionPlan,
    event_message,
    plan_eviction,
    soft_evicted,
)
from controller.descheduler.evictor import (
    ActiveMigration,
    Admission,
    CycleEvictor,
    CycleLedger,
    MigrationController,
    MigrationControllerArgs,
    NotReady,
    TokenBucket,
    controller_uid,
    direct_nodes,
)
from controller.descheduler.framework import (
    BalancePlugin,
    CycleView,
    DeschedulePlugin,
    Status,
    same_objects,
)
from controller.descheduler.metrics import ERROR, SUCCESS, DeschedulerMetrics
from controller.descheduler.migration import MODE_EVICT_DIRECTLY, PENDING, RUNNING
from controller.descheduler.migrationrates import EvictionBuckets
from controller.errors import StoreError
from controller.events import NORMAL, WARNING, EventRecorder
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster, Result, Write
from controller.store.snapshots import Change, Snapshot

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["COMPONENT", "DeschedulerLoop"]

log = logging.getLogger(__name__)

COMPONENT: Final = "koord-descheduler"
#: Event reasons.
INVALID_CONFIGURATION: Final = "InvalidConfiguration"
EVICTED: Final = "Evicted"
EVICTION_PROPOSED: Final = "EvictionProposed"
CORDONED: Final = "Cordoned"
CORDON_PROPOSED: Final = "CordonProposed"
#: Names of PodMigrationJobs and of this descheduler instance are UUIDs in this namespace.
_NAMES: Final = uuid.uuid5(uuid.NAMESPACE_URL, "https://koordpy.io/descheduler")
_ACTIVE_PHASES: Final = frozenset({"", PENDING, RUNNING})
#: Phases of a pod that holds no resources any more (``Pod.is_terminated``).
_FINISHED: Final = frozenset({"Succeeded", "Failed"})
#: What the descheduler writes, and keeps assumed until its snapshots show it.
_WRITTEN_KINDS: Final = tuple(default_registry().for_type(t) for t in (PodMigrationJob, Pod, Node))
#: An Event to record: (object, type, reason, message).
_Event = tuple[Object, str, str, str]
#: What a cycle does with one write's answer (None: it made no write), given the Events list.
_Handler = tuple[int, Callable[[Result | None, list[_Event]], None]]


class _Plugins:
    """The plugin instances of one profile, built once per configuration."""

    def __init__(
        self,
        profile: ProfileConfig,
        table: Mapping[str, PluginEntry],
        evictions: EvictionBuckets | None = None,
    ) -> None:
        self.profile = profile
        self.deschedule: list[DeschedulePlugin] = []
        self.balance: list[BalancePlugin] = []
        built: dict[str, object] = {}
        for name in profile.plugins:
            entry = table[name]
            try:
                built[name] = entry.factory(profile.args[name])
            except (TypeError, ValueError) as err:
                raise DeschedulerConfigError(
                    f"profile {profile.name}: plugin {name}: {err}"
                ) from None
        for name in profile.deschedule:
            plugin = built[name]
            if not isinstance(plugin, DeschedulePlugin):
                raise DeschedulerConfigError(f"plugin {name} cannot deschedule")
            self.deschedule.append(plugin)
        for name in profile.balance:
            plugin = built[name]
            if not isinstance(plugin, BalancePlugin):
                raise DeschedulerConfigError(f"plugin {name} cannot balance")
            self.balance.append(plugin)
        self.evictor_args = MigrationControllerArgs()
        for name in profile.evict:
            plugin = built[name]
            if isinstance(plugin, MigrationController):
                self.evictor_args = plugin.args
                break
        self.filters = any(isinstance(built[name], MigrationController) for name in profile.filter)
        args = self.evictor_args
        #: ``evictQPS``/``evictBurst`` (shared with the ``migration`` loop when ``evictions``
        #: is given), and the object limiters: across cycles.
        self.bucket = (evictions or EvictionBuckets()).get(args.qps, args.evict_burst)
        self.object_buckets: dict[tuple[str, str], TokenBucket] = {}


class DeschedulerLoop:
    """The ``descheduler`` control loop (see the module docstring)."""

    name = "descheduler"

    def __init__(
        self,
        *,
        metrics: DeschedulerMetrics | None = None,
        plugins: Mapping[str, PluginEntry] | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._metrics = metrics
        self._table = plugins
        self._timer = timer
        self._config: Configuration | None = None
        self._profiles: list[_Plugins] = []
        #: (ConfigMap uid, text) of the configuration in force, and of the last one refused.
        self._source: tuple[str, str | None] | None = None
        self._refused: tuple[str, str | None] | None = None
        self._instance = ""
        self._due: datetime | None = None
        self._ran = False
        self._too_few_nodes = False
        self._jobs_view: object = None
        self._store: Cluster | None = None
        self._recorder: EventRecorder | None = None
        #: the jobs, pods and nodes this loop wrote, laid over its snapshots until they show
        #: them, and the answers to its writes
        self._outbox = Outbox(kinds=_WRITTEN_KINDS)
        self._evictions: EvictionBuckets | None = None
        #: The pod groupings the last cycle read, and their pods by node with each node's
        #: list from the groupings before where the node's pods are the same objects
        self._groups: _PodGroups | None = None
        self._by_node: Mapping[str, Sequence[Pod]] = {}
        #: The pods' requests the last cycle worked out (CycleView.requests_before)
        self._requests: dict[int, tuple[Pod, dict[str, int]]] = {}
        #: The workloads' not-Ready pods the last cycle worked out (CycleLedger)
        self._not_ready: dict[str, NotReady] = {}

    @property
    def eviction_buckets(self) -> EvictionBuckets | None:
        """The ``evictQPS`` buckets shared with the ``migration`` loop (None: its own)."""
        return self._evictions

    def share_evictions(self, buckets: EvictionBuckets) -> None:
        """Take the tokens of direct evictions from ``buckets``, shared with the
        ``migration`` loop (:func:`controller.loops.build_loops` links the two); profiles
        built from now on use them."""
        self._evictions = buckets

    @property
    def configuration(self) -> Configuration | None:
        """The configuration in force (None: descheduling is off)."""
        return self._config

    def _events(self, ctx: LoopContext) -> EventRecorder:
        if self._recorder is None or self._store is not ctx.store:
            self._store = ctx.store
            self._recorder = EventRecorder(ctx.store, component=COMPONENT, clock=ctx.now)
        return self._recorder

    # -- the loop --------------------------------------------------------------------------------

    def _snapshot(self, ctx: LoopContext) -> Snapshot:
        """A snapshot with this loop's writes laid over it until it shows them (the answers
        that arrived since handled first)."""
        return self._outbox.over(ctx.store.snapshot())

    @property
    def outbox(self) -> Outbox:
        """This loop's writes whose results it has not handled yet."""
        return self._outbox

    def reconcile(self, ctx: LoopContext) -> float | None:
        snapshot = self._snapshot(ctx)
        self._job_metrics(ctx, snapshot)
        self._load(ctx, snapshot)
        config = self._config
        if config is None:
            return None
        now = ctx.now()
        if self._due is not None and now < self._due:
            return (self._due - now).total_seconds()
        if self._ran and config.interval <= 0:
            return None
        with _collector_paused():
            self._cycle(ctx, snapshot, config, now)
        if self._metrics is not None:
            self._job_metrics(ctx, self._snapshot(ctx))
        self._ran = True
        if config.interval <= 0:
            return None
        self._due = now + timedelta(seconds=config.interval)
        return config.interval

    def _job_metrics(self, ctx: LoopContext, snapshot: Snapshot) -> None:
        if self._metrics is None:
            return
        view = snapshot.objects(ctx.store.registry.for_type(PodMigrationJob))
        if view is not self._jobs_view:
            self._jobs_view = view
            self._metrics.migration_jobs(j for j in view if isinstance(j, PodMigrationJob))

    # -- configuration ---------------------------------------------------------------------------

    def _load(self, ctx: LoopContext, snapshot: Snapshot) -> None:
        kind = ctx.store.registry.for_type(ConfigMap)
        found = snapshot.get(kind, k.DESCHEDULER_CONFIG_NAME, k.DESCHEDULER_CONFIG_NAMESPACE)
        if not isinstance(found, ConfigMap):
            if self._config is not None:
                log.info(
                    "descheduling is off: ConfigMap %s/%s is gone",
                    k.DESCHEDULER_CONFIG_NAMESPACE,
                    k.DESCHEDULER_CONFIG_NAME,
                )
            self._config, self._profiles, self._source, self._refused = None, [], None, None
            return
        text = found.data.get(k.DESCHEDULER_CONFIG_KEY)
        source = (found.metadata.uid, text)
        if source == self._source or source == self._refused:
            return
        try:
            if text is None:
                raise DeschedulerConfigError(f"no key {k.DESCHEDULER_CONFIG_KEY!r} in its data")
            table = self._registry()
            config = load_configuration(text, plugins=table)
            profiles = [_Plugins(profile, table, self._evictions) for profile in config.profiles]
        except DeschedulerConfigError as err:
            self._refused = source
            kept = "keeping the previous configuration" if self._config else "descheduling is off"
            log.error(
                "ConfigMap %s/%s: invalid descheduler configuration (%s): %s",
                k.DESCHEDULER_CONFIG_NAMESPACE,
                k.DESCHEDULER_CONFIG_NAME,
                kept,
                err,
            )
            self._events(ctx).record(
                found,
                type=WARNING,
                reason=INVALID_CONFIGURATION,
                message=f"invalid descheduler configuration ({kept}): {err}",
            )
            return
        log.info(
            "descheduler configuration loaded: %d profile(s) (%s), interval %ss%s",
            len(config.profiles),
            ", ".join(p.name for p in config.profiles),
            config.interval,
            ", dry run" if config.dry_run else "",
        )
        self._config, self._profiles = config, profiles
        self._source, self._refused = source, None
        self._instance = str(uuid.uuid5(_NAMES, f"instance/{found.metadata.uid}"))
        self._due, self._ran = None, False

    def _registry(self) -> Mapping[str, PluginEntry]:
        if self._table is None:
            from controller.descheduler.plugins import PLUGINS  # imports every plugin

            self._table = PLUGINS
        return self._table

    # -- one cycle ---------------------------------------------------------------------------------

    def _cycle(
        self, ctx: LoopContext, snapshot: Snapshot, config: Configuration, now: datetime
    ) -> None:
        started = self._timer()
        registry = ctx.store.registry
        nodes = [n for n in snapshot.objects(registry.for_type(Node)) if isinstance(n, Node)]
        nodes = [n for n in nodes if _ready(n)]
        selected = _matching(nodes, config.node_selector)
        if len(selected) < 2:
            if not self._too_few_nodes:
                log.info(
                    "descheduling skipped: %d Ready node(s) match the node selector, 2 needed",
                    len(selected),
                )
            self._too_few_nodes = True
            return
        self._too_few_nodes = False
        pod_kind = registry.for_type(Pod)
        groups = snapshot.derived(pod_kind, _group_pods, _regroup)
        if groups is not self._groups:
            # Plugins keep what they worked out per node while its pod list is the same
            # object: a change to some pods leaves the other nodes' lists as they were.
            self._by_node = _unchanged_kept(self._by_node, groups.by_node)
            self._groups = groups
        pods_by_node = self._by_node
        workload_pods = groups.by_workload
        nodes_by_scheduler = groups.nodes_by_scheduler
        migrations = []
        for job in snapshot.objects(registry.for_type(PodMigrationJob)):
            if not isinstance(job, PodMigrationJob) or job.status.phase not in _ACTIVE_PHASES:
                continue
            ref = job.spec.pod_ref
            found = snapshot.get(pod_kind, ref.name, ref.namespace)
            pod = found if isinstance(found, Pod) else None
            migrations.append(
                ActiveMigration(
                    namespace=ref.namespace or "default",
                    name=ref.name,
                    node=pod.spec.node_name if pod is not None else "",
                    workload=controller_uid(pod) if pod is not None else "",
                )
            )
        ledger = CycleLedger(
            now=now,
            max_per_node=config.max_pods_per_node,
            max_per_namespace=config.max_pods_per_namespace,
            max_total=config.max_pods_total,
            migrations=migrations,
            workload_pods=workload_pods,
            priority_classes={
                pc.metadata.name: pc.value
                for pc in snapshot.objects(registry.for_type(PriorityClass))
                if isinstance(pc, PriorityClass)
            },
            not_ready_before=self._not_ready,
        )
        node_metrics = {
            m.metadata.name: m
            for m in snapshot.objects(registry.for_type(NodeMetric))
            if isinstance(m, NodeMetric)
        }
        everywhere = {n.metadata.name: n for n in nodes}
        runs: list[tuple[_Plugins, CycleView, CycleEvictor]] = []
        for plugins in self._profiles:
            profile = plugins.profile
            view = CycleView(
                now=now,
                nodes=tuple(_matching(selected, profile.node_selector)),
                pods_by_node=pods_by_node,
                metrics=node_metrics,
                all_nodes=everywhere,
                direct_nodes=direct_nodes(plugins.evictor_args, nodes_by_scheduler),
                requests_before=self._requests,
            )
            evictor = CycleEvictor(
                view,
                ledger,
                args=plugins.evictor_args,
                profile=profile.name,
                dry_run=config.dry_run,
                filters=plugins.filters,
                bucket=plugins.bucket,
                object_buckets=plugins.object_buckets,
            )
            runs.append((plugins, view, evictor))
        for plugins, view, evictor in runs:
            for deschedule in plugins.deschedule:
                self._run(
                    deschedule.name,
                    "Deschedule",
                    plugins.profile.name,
                    functools.partial(
                        deschedule.deschedule, view, _for_plugin(deschedule, evictor, config)
                    ),
                )
        for plugins, view, evictor in runs:
            for balance in plugins.balance:
                self._run(
                    balance.name,
                    "Balance",
                    plugins.profile.name,
                    functools.partial(balance.balance, view, _for_plugin(balance, evictor, config)),
                )
        carried: dict[int, tuple[Pod, dict[str, int]]] = {}
        for _, view, _ in runs:
            carried.update(view.requests_asked())
        self._requests = carried
        self._not_ready = ledger.not_ready_asked()
        self._write(ctx, snapshot, ledger, dry_run=config.dry_run)
        elapsed = self._timer() - started
        if self._metrics is not None:
            self._metrics.cycle_ran(elapsed)
        log.log(
            logging.INFO if ledger.admitted or ledger.cordons else logging.DEBUG,
            "descheduling cycle over %d node(s) in %.3fs: %d eviction(s)%s, %d refused by the"
            " cycle's limits, %d cordon(s)",
            len(selected),
            elapsed,
            len(ledger.admitted),
            " proposed (dry run)" if config.dry_run else "",
            len(ledger.refused),
            len(ledger.cordons),
        )

    def _run(self, plugin: str, point: str, profile: str, call: Callable[[], Status]) -> None:
        started = self._timer()
        try:
            status = call()
        except Exception:
            log.exception("descheduler profile %s: %s plugin %s failed", profile, point, plugin)
        else:
            if not status.ok:
                log.warning(
                    "descheduler profile %s: %s plugin %s: %s",
                    profile,
                    point,
                    plugin,
                    status.message,
                )
        if self._metrics is not None:
            self._metrics.plugin_ran(plugin, point, profile, self._timer() - started)

    # -- the writes ------------------------------------------------------------------------------

    def _write(
        self, ctx: LoopContext, snapshot: Snapshot, ledger: CycleLedger, *, dry_run: bool
    ) -> None:
        """Send the cycle's writes in one batch: the cordons, the direct evictions, then the
        PodMigrationJobs (module docstring, 4).

        What each write's answer calls for (its log line, metric and Event) is done when the
        answers are in (:meth:`_written`: at once from a local backend, else in a later
        pass), in the order of the cordons and admissions, and so is what is proposed without
        a write, so that the Events keep that order. The outbox lays the writes over this
        loop's snapshots from the moment they are sent: a cycle that runs before they show
        neither cordons nor evicts twice, nor makes a second PodMigrationJob for a pod."""
        store = ctx.store
        metrics = self._metrics
        writes: list[Write] = []
        handlers: list[_Handler] = []
        self._cordon(ctx, snapshot, ledger, writes, handlers, dry_run=dry_run)
        jobs: list[tuple[Admission, PodMigrationJob]] = []
        pod_kind = store.registry.for_type(Pod)
        info = log.isEnabledFor(logging.INFO)
        for admission in ledger.admitted:
            intent = admission.intent
            if intent.dry_run:
                handlers.append((-1, functools.partial(self._proposed, admission, info)))
                continue
            if admission.mode != MODE_EVICT_DIRECTLY:
                jobs.append((admission, self._job(admission, ledger.now)))
                continue
            # As the migration loop evicts (controller.descheduler.evictionpolicy): the pod's
            # evict-policy label or evictionPolicy, and defaultDeleteOptions.
            pod = intent.pod
            try:
                plan = plan_eviction(
                    pod,
                    default_policy=admission.args.eviction_policy,
                    job_options=None,
                    default_options=admission.args.default_delete_options,
                )
            except ValueError as err:
                handlers.append((-1, functools.partial(self._evicted, admission, err)))
                continue
            write: Write | None = None
            if plan.dry_run:
                pass
            elif plan.policy == SOFT_EVICTION:
                if ANNOTATION_SOFT_EVICTION not in pod.metadata.annotations:
                    marked = soft_evicted(pod, plan, intent.plugin, intent.reason, ledger.now)
                    write = Write.update(marked)
            else:
                write = dataclasses.replace(
                    Write.evict(pod_kind, pod),
                    resource_version=plan.resource_version or pod.metadata.resource_version,
                )
            at = -1
            if write is not None:
                at = len(writes)
                writes.append(write)
            handlers.append((at, functools.partial(self._evicted, admission, plan)))
        for admission, job in jobs:
            handlers.append((len(writes), functools.partial(self._job_created, admission, job)))
            writes.append(Write.apply(job))
        if metrics is not None:
            for refusal in ledger.refused:
                metrics.evicted(
                    refusal.result,
                    strategy=refusal.plugin,
                    namespace=refusal.pod.metadata.namespace,
                    node=refusal.node,
                )
        then = functools.partial(self._written, ctx, handlers)
        if writes:
            self._outbox.send(store, writes, then)
        else:
            then(())

    def _written(
        self, ctx: LoopContext, handlers: Sequence[_Handler], results: Sequence[Result]
    ) -> None:
        """The cycle's writes answered: each handler with its write's answer (None when it
        made none), in order; then their Events, in one batch."""
        events: list[_Event] = []
        for at, handle in handlers:
            handle(results[at] if at >= 0 else None, events)
        if events:
            try:
                self._events(ctx).record_many(events)
            except StoreError as err:
                log.warning("descheduler events not recorded: %s", err)

    def _proposed(
        self, admission: Admission, info: bool, _: Result | None, events: list[_Event]
    ) -> None:
        """A dry-run eviction: its Event, metric and log line (no write)."""
        intent = admission.intent
        pod = intent.pod
        events.append(
            (
                pod,
                NORMAL,
                EVICTION_PROPOSED,
                f"eviction proposed by {intent.plugin} (dry run): {intent.reason}",
            )
        )
        if self._metrics is not None:
            self._metrics.proposed(
                strategy=intent.plugin, namespace=pod.metadata.namespace, node=intent.node
            )
        if info:
            log.info(
                "dry run: %s would evict pod %s/%s from node %s: %s",
                intent.plugin,
                pod.metadata.namespace,
                pod.metadata.name,
                intent.node,
                intent.reason,
            )

    def _evicted(
        self,
        admission: Admission,
        plan: EvictionPlan | ValueError,
        result: Result | None,
        events: list[_Event],
    ) -> None:
        """A direct eviction answered (``result`` None: nothing was written, as for a dry run
        of its delete options or a pod marked for soft eviction before; ``plan`` a ValueError:
        its policy or options are bad)."""
        intent = admission.intent
        pod = intent.pod
        if isinstance(plan, ValueError) or isinstance(result, StoreError):
            log.warning(
                "eviction of pod %s/%s by %s failed: %s",
                pod.metadata.namespace,
                pod.metadata.name,
                intent.plugin,
                plan if isinstance(plan, ValueError) else result,
            )
            outcome = ERROR
        else:
            log.info(
                "pod %s/%s %s on node %s (%s: %s)",
                pod.metadata.namespace,
                pod.metadata.name,
                plan.verb,
                intent.node,
                intent.plugin,
                intent.reason,
            )
            events.append(
                (
                    pod,
                    NORMAL if plan.dry_run else WARNING,
                    EVICTION_PROPOSED if plan.dry_run else EVICTED,
                    event_message(plan, intent.plugin, intent.reason),
                )
            )
            outcome = SUCCESS
        if self._metrics is not None:
            self._metrics.evicted(
                outcome, strategy=intent.plugin, namespace=pod.metadata.namespace, node=intent.node
            )

    def _job_created(
        self,
        admission: Admission,
        job: PodMigrationJob,
        result: Result | None,
        _: list[_Event],
    ) -> None:
        """The PodMigrationJob of a ReservationFirst eviction answered."""
        intent = admission.intent
        pod = intent.pod
        if isinstance(result, StoreError):
            log.warning(
                "PodMigrationJob for pod %s/%s not created: %s",
                pod.metadata.namespace,
                pod.metadata.name,
                result,
            )
            if self._metrics is not None:
                self._metrics.evicted(
                    ERROR,
                    strategy=intent.plugin,
                    namespace=pod.metadata.namespace,
                    node=intent.node,
                )
            return
        log.info(
            "PodMigrationJob %s created for pod %s/%s on node %s (%s: %s)",
            job.metadata.name,
            pod.metadata.namespace,
            pod.metadata.name,
            intent.node,
            intent.plugin,
            intent.reason,
        )

    def _cordon(
        self,
        ctx: LoopContext,
        snapshot: Snapshot,
        ledger: CycleLedger,
        writes: list[Write],
        handlers: list[_Handler],
        *,
        dry_run: bool,
    ) -> None:
        """The cycle's cordons: each node's write appended to ``writes`` (a dry run: none),
        its handler to ``handlers``."""
        kind = ctx.store.registry.for_type(Node)
        for name, plugin in ledger.cordons.items():
            node = snapshot.get(kind, name)
            if not isinstance(node, Node) or node.spec.unschedulable:
                continue
            if dry_run:
                handlers.append((-1, functools.partial(self._cordoned, node, plugin)))
                continue
            cordoned = msgspec.structs.replace(
                node, spec=msgspec.structs.replace(node.spec, unschedulable=True)
            )
            handlers.append((len(writes), functools.partial(self._cordoned, node, plugin)))
            writes.append(Write.update(cordoned))

    @staticmethod
    def _cordoned(node: Node, plugin: str, result: Result | None, events: list[_Event]) -> None:
        """A cordon answered (``result`` None: proposed in a dry run, nothing written)."""
        name = node.metadata.name
        if result is None:
            events.append((node, NORMAL, CORDON_PROPOSED, f"cordon proposed by {plugin} (dry run)"))
        elif isinstance(result, StoreError):
            log.warning("cordon of node %s by %s failed: %s", name, plugin, result)
        else:
            log.info("cordoned node %s for %s", name, plugin)
            events.append((node, NORMAL, CORDONED, f"cordoned by {plugin} to drain the node"))

    def _job(self, admission: Admission, now: datetime) -> PodMigrationJob:
        intent = admission.intent
        pod = intent.pod
        meta = pod.metadata
        args = admission.args
        name = str(uuid.uuid5(_NAMES, f"job/{meta.uid}/{now.isoformat()}"))
        return PodMigrationJob(
            metadata=ObjectMeta(
                name=name,
                annotations={
                    k.ANNOTATION_EVICT_REASON: intent.reason,
                    k.ANNOTATION_EVICT_TRIGGER: intent.plugin,
                    k.ANNOTATION_JOB_CREATED_BY: self._instance,
                },
            ),
            spec=PodMigrationJobSpec(
                pod_ref=ObjectReference(
                    kind="Pod", namespace=meta.namespace, name=meta.name, uid=meta.uid
                ),
                mode=admission.mode,
                ttl=args.default_job_ttl,
                delete_options=args.default_delete_options,
            ),
            status=PodMigrationJobStatus(phase=PENDING),
        )


def _ready(node: Node) -> bool:
    """``Node.is_ready`` (its first Ready condition is True), without a generator per node."""
    for condition in node.status.conditions:
        if condition.type == "Ready":
            return condition.status == "True"
    return False


def _matching(nodes: list[Node], selector: Selector) -> list[Node]:
    """The nodes whose labels ``selector`` matches (all of them for an empty selector)."""
    if selector.empty:
        return nodes
    return [n for n in nodes if selector.matches(n.metadata.labels)]


@dataclass(frozen=True, slots=True)
class _PodGroups:
    """The live pods of the cluster grouped as a cycle reads them (see :func:`_group_pods`)."""

    #: node -> its live pods
    by_node: Mapping[str, Sequence[Pod]]
    #: controller uid -> its live pods
    by_workload: Mapping[str, Sequence[Pod]]
    #: spec.schedulerName -> the nodes with a live pod of that scheduler
    nodes_by_scheduler: Mapping[str, frozenset[str]]


def _group_pods(objects: Sequence[Object]) -> _PodGroups:
    """Group the live (not deleting, not finished) pods by node, by controller and by
    scheduler: one pass over every pod of the cluster, made once per version of the pods
    (:meth:`Snapshot.derived`) and kept as lean as it can be (attributes read once,
    controller_uid and Pod.is_terminated inlined, get-then-append since setdefault would build
    a list for every pod, the last scheduler's node set kept at hand)."""
    pods_by_node: dict[str, list[Pod]] = {}
    workload_pods: dict[str, list[Pod]] = {}
    nodes_by_scheduler: dict[str, set[str]] = {}
    last_scheduler: str | None = None
    scheduled_by: set[str] = set()
    for obj in objects:
        if not isinstance(obj, Pod):
            continue
        meta = obj.metadata
        if meta.deletion_timestamp is not None or obj.status.phase in _FINISHED:
            continue
        for owner in meta.owner_references:
            if owner.controller:
                workload = owner.uid
                if workload:
                    same = workload_pods.get(workload)
                    if same is None:
                        workload_pods[workload] = [obj]
                    else:
                        same.append(obj)
                break
        spec = obj.spec
        node = spec.node_name
        if node:
            on_node = pods_by_node.get(node)
            if on_node is None:
                pods_by_node[node] = [obj]
            else:
                on_node.append(obj)
            scheduler = spec.scheduler_name
            if scheduler != last_scheduler:
                found_by = nodes_by_scheduler.get(scheduler)
                if found_by is None:
                    found_by = nodes_by_scheduler[scheduler] = set()
                scheduled_by = found_by
                last_scheduler = scheduler
            scheduled_by.add(node)
    return _PodGroups(
        by_node=pods_by_node,
        by_workload=workload_pods,
        nodes_by_scheduler={name: frozenset(nodes) for name, nodes in nodes_by_scheduler.items()},
    )


def _live_placement(obj: Object | None) -> tuple[str, str, str] | None:
    """A live pod's (node, controller uid, scheduler), as :func:`_group_pods` files it; None
    for anything else."""
    if not isinstance(obj, Pod):
        return None
    meta = obj.metadata
    if meta.deletion_timestamp is not None or obj.status.phase in _FINISHED:
        return None
    workload = next((o.uid for o in meta.owner_references if o.controller), "")
    return obj.spec.node_name, workload, obj.spec.scheduler_name


def _by_key(pod: Pod) -> tuple[str, str]:
    return pod.metadata.namespace, pod.metadata.name


def _refiled(
    before: Mapping[str, Sequence[Pod]],
    added: Mapping[str, list[Pod]],
    gone: set[int],
) -> dict[str, Sequence[Pod]]:
    """``before`` with the list of each name in ``added`` made again: its pods less those
    ``gone`` (by identity: the objects of the view before), plus those ``added``, in key
    order (a name left without pods is dropped)."""
    filed = dict(before)
    for name, new in added.items():
        pods = [p for p in before.get(name, ()) if id(p) not in gone]
        for pod in new:
            bisect.insort(pods, pod, key=_by_key)
        if pods:
            filed[name] = pods
        else:
            filed.pop(name, None)
    return filed


def _regroup(before: _PodGroups, changes: Sequence[Change]) -> _PodGroups:
    """What :func:`_group_pods` gives after ``changes`` (pods before and after), from what it
    gave before them: only the nodes, controllers and schedulers the changed pods were or are
    filed under are worked out again; every other node and controller keeps its list object."""
    gone: set[int] = set()
    nodes: dict[str, list[Pod]] = {}
    workloads: dict[str, list[Pod]] = {}
    schedulers: set[str] = set()
    for old, new in changes:
        if old is not None:
            gone.add(id(old))
        for obj in (old, new):
            placed = _live_placement(obj)
            if placed is None:
                continue
            node, workload, scheduler = placed
            if node:
                nodes.setdefault(node, [])
                schedulers.add(scheduler)
            if workload:
                workloads.setdefault(workload, [])
        placed = _live_placement(new)
        if placed is not None and isinstance(new, Pod):
            node, workload, _ = placed
            if node:
                nodes[node].append(new)
            if workload:
                workloads[workload].append(new)
    by_node = _refiled(before.by_node, nodes, gone)
    by_workload = _refiled(before.by_workload, workloads, gone)
    by_scheduler = dict(before.nodes_by_scheduler)
    for scheduler in schedulers:
        holding = set(by_scheduler.get(scheduler, ()))
        for node in nodes:
            if any(p.spec.scheduler_name == scheduler for p in by_node.get(node, ())):
                holding.add(node)
            else:
                holding.discard(node)
        if holding:
            by_scheduler[scheduler] = frozenset(holding)
        else:
            by_scheduler.pop(scheduler, None)
    return _PodGroups(by_node=by_node, by_workload=by_workload, nodes_by_scheduler=by_scheduler)


def _unchanged_kept(
    before: Mapping[str, Sequence[Pod]], now: Mapping[str, Sequence[Pod]]
) -> dict[str, Sequence[Pod]]:
    """``now``, with the list ``before`` had for each node whose pods are the very same
    objects in the same order."""
    kept: dict[str, Sequence[Pod]] = {}
    for node, pods in now.items():
        old = before.get(node)
        if old is pods:
            kept[node] = pods
        elif old is not None and same_objects(old, pods):
            kept[node] = old
        else:
            kept[node] = pods
    return kept


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (when it was on), back on after.

    A cycle makes hundreds of thousands of containers that live as long as it does (the view,
    the plugins' bookkeeping, the Events) next to the store's large long-lived heap. With the
    collector on, their allocation sets off a young collection every few hundred of them and,
    in most cycles, a full one over the whole heap, none of which can free what the cycle
    still holds; what the cycle drops, reference counting frees (it makes no reference
    cycles). Once the block ends the collector runs as usual.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _for_plugin(plugin: object, evictor: CycleEvictor, config: Configuration) -> CycleEvictor:
    """The evictor a plugin uses: the cycle's, or, for a plugin whose args say ``dryRun`` in a
    live cycle, a twin over the same ledger that only proposes."""
    args = getattr(plugin, "args", None)
    if config.dry_run or evictor.dry_run or not getattr(args, "dry_run", False):
        return evictor
    return evictor.proposing()
