"""Assembling the controller: store, API, metrics, control loops, and the agents' side.

The controller's metrics registry (``[metrics] address``, ``:9317``) carries the scheduler's
metrics (:mod:`controller.scheduler.metrics`), the queue's (:mod:`controller.queueing.metrics`)
and the descheduler's (:mod:`controller.descheduler.metrics`) beside the controller's own.

Both ``koordpy controller run`` and the all-in-one ``koordpy up`` build the controller here and
differ only in what runs beside it. Agents reach the controller through a bus: ``koordpy up``
passes its in-process one; ``koordpy controller run`` with ``[ingest] transport = "mqtt"`` makes
a local bus and bridges it to the broker of ``[mqtt]`` (every agent leaf of every node in, each
node's ``pods`` and ``nodeslo`` out). Over either, the ingest writes the agents' reports into
the store, the node feed publishes each node's pods and NodeSLO, and liveness marks nodes that
went offline or silent.

``koordpy controller run --kubeconfig FILE`` (or ``--in-cluster``) builds the other kind of
controller (:func:`open_kube_controller`): the cluster is the store
(:class:`~controller.store.kubernetes.KubeStore`), and only the loops that koord-scheduler,
koord-queue and koord-descheduler run on a cluster run, each set under Koordinator's Lease.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
from prometheus_client import CollectorRegistry, Counter

from controller.api.groupcommit import GroupCommit
from controller.api.server import ApiServer
from controller.api.token import check_token
from controller.config import ControllerConfig, queueing_plugins
from controller.descheduler.loop import DeschedulerLoop
from controller.descheduler.metrics import DeschedulerMetrics
from controller.errors import ConfigError
from controller.events import EventTTL
from controller.fleet.ingest import Ingest
from controller.fleet.liveness import Liveness
from controller.fleet.nodefeed import NodeFeed
from controller.fleet.reports import WITHOUT_REPORT
from controller.kube.client import ClientOptions, KubeClient, connect
from controller.kube.election import Elected, LeaseElector, default_identity
from controller.loops import LOOPS, LoopFactory, LoopRunner, build_loops
from controller.queueing.jobcontroller import JobController
from controller.queueing.loop import QueueingLoop
from controller.queueing.metrics import QueueingMetrics
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.metrics import SchedulerMetrics
from controller.slo.nodemetric import NodeMetricController
from controller.slo.noderesource import NodeResourceController
from controller.store.kubernetes import KubeStore
from controller.store.persistence import Lost, StorageFull
from controller.store.sqlite import Store
from runtime import lifecycle
from runtime.bus import Bus
from runtime.exposition import MetricsEndpoint, serve_metrics
from runtime.mqtt import controller_bridge

__all__ = [
    "FLEET_QUEUE",
    "KUBERNETES_LOOPS",
    "MANAGER_LEASE",
    "STORE_FILE",
    "Controller",
    "KubeController",
    "open_controller",
    "open_kube_controller",
]

log = logging.getLogger(__name__)

#: The SQLite file inside the state directory.
STORE_FILE = "store.db"
#: Messages the local bus of a fleet controller queues per subscriber: a broker's retained
#: replay of 5,000 nodes (four retained leaves each) with room to spare.
FLEET_QUEUE = 50_000


@dataclass(slots=True)
class Controller:
    """A started controller: what its daemon supervises and where it can be reached."""

    store: Store
    api: ApiServer
    metrics: MetricsEndpoint | None
    registry: CollectorRegistry
    restarts: Counter
    components: list[lifecycle.Component] = field(default_factory=list)


def open_store(cfg: ControllerConfig, state_dir: Path, *, start_fresh: bool | None = None) -> Store:
    """The store in ``state_dir``, the directory made (or narrowed to) 0700 first.

    A state directory that cannot hold the store is a :class:`ConfigError` (exit 2): no byte
    free on its file system, or a store initialised there whose database is now missing or
    empty (see :mod:`controller.store.persistence`; ``start_fresh``, default ``[store]
    start_fresh``, starts an empty one instead).
    """
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if state_dir.stat().st_mode & 0o777 != 0o700:
        log.info("narrowing state directory %s to mode 0700", state_dir)
        state_dir.chmod(0o700)
    try:
        store = Store(
            path=state_dir / STORE_FILE,
            synchronous=cfg.store.synchronous,
            without_report=WITHOUT_REPORT,
            report_write_interval=cfg.store.report_write_interval,
            start_fresh=cfg.store.start_fresh if start_fresh is None else start_fresh,
        )
    except Lost as err:
        raise ConfigError(f"{err} (--start-fresh, or [store] start_fresh = true)") from None
    except StorageFull as err:
        raise ConfigError(str(err)) from None
    log.info(
        "store %s reloaded at resourceVersion %d", state_dir / STORE_FILE, store.resource_version
    )
    return store


def _token(cfg: ControllerConfig, given: str | None) -> str:
    """The API's bearer token (``--token`` over ``[api]``), refused when too short."""
    if given:
        return check_token(given, field="--token")
    field = "[api] token" if cfg.api.token else "[api] token_file"
    return check_token(cfg.api_token(), field=field)


async def open_controller(
    stack: contextlib.AsyncExitStack,
    cfg: ControllerConfig,
    *,
    state_dir: Path,
    api_address: str | None,
    metrics_address: str | None = None,
    api_token: str | None = None,
    bus: Bus | None = None,
) -> Controller:
    """Open the store, start the API and metrics; ``stack`` closes them in reverse order."""
    token = _token(cfg, api_token)
    store = open_store(cfg, state_dir)
    stack.callback(store.close)
    # One group commit for every writer: what is queued is committed before the store closes.
    commits = GroupCommit(store)
    stack.push_async_callback(commits.aclose)
    registry = CollectorRegistry()
    restarts = lifecycle.restarts_counter(registry)
    api = ApiServer(
        store,
        api_address or cfg.api.address or None,
        token=token,
        tls_cert=Path(cfg.api.tls_cert) if cfg.api.tls_cert else None,
        tls_key=Path(cfg.api.tls_key) if cfg.api.tls_key else None,
        grace=cfg.api.shutdown_grace,
        commits=commits,
    )
    await stack.enter_async_context(api)
    metrics = stack.enter_context(serve_metrics(metrics_address or cfg.metrics.address, registry))
    loops = build_loops(_loop_table(cfg, registry))
    components: list[lifecycle.Component] = [
        LoopRunner(store, loops),
        # Beside the control loops, not among them: ``simulate`` keeps every Event of its run.
        LoopRunner(store, [EventTTL(ttl=cfg.store.event_ttl)], name=EventTTL.name),
    ]
    if bus is None and cfg.ingest.transport == "mqtt":
        bus = await _bridge(stack, cfg, registry)
    if bus is not None:
        liveness = Liveness(store, lost_after=cfg.ingest.node_lost_after, commits=commits)
        ingest = Ingest(
            bus,
            store,
            registry=registry,
            liveness=liveness,
            max_payload=cfg.ingest.max_payload,
            commits=commits,
        )
        components[:0] = [ingest, NodeFeed(bus, store), liveness]
    return Controller(
        store=store,
        api=api,
        metrics=metrics,
        registry=registry,
        restarts=restarts,
        components=components,
    )


def _loop_table(
    cfg: ControllerConfig, registry: CollectorRegistry, *, kubernetes: bool = False
) -> dict[str, LoopFactory]:
    """:data:`~controller.loops.LOOPS` configured by ``cfg``, their metrics in ``registry``.

    ``kubernetes``: only the loops of koord-scheduler, koord-queue, koord-descheduler and
    koord-manager (:data:`KUBERNETES_LOOPS`), with koord-manager's ``nodemetric`` and
    ``noderesource``, which run on a cluster only; the scheduler serves only pods naming one
    of its profiles, and the jobs loop leaves pods to the job kinds' own controllers."""
    table: dict[str, LoopFactory] = {
        **LOOPS,
        "queueing": functools.partial(
            QueueingLoop,
            functools.partial(queueing_plugins, cfg),
            reclaim_min_runtime=cfg.queueing.reclaim_min_runtime,
            status_interval=cfg.queueing.status_interval,
            metrics=QueueingMetrics(registry),
        ),
        "scheduler": functools.partial(
            SchedulerLoop, metrics=SchedulerMetrics(registry), only_named=kubernetes
        ),
        "descheduler": functools.partial(DeschedulerLoop, metrics=DeschedulerMetrics(registry)),
    }
    if not kubernetes:
        return table
    table["jobs"] = functools.partial(JobController, own_pods=False)
    # koord-manager's duties that only a cluster has: there the agents do not publish their
    # Nodes (``koordpy up``'s agents write these resources themselves)
    table["nodemetric"] = NodeMetricController
    table["noderesource"] = NodeResourceController
    wanted = {name for names in KUBERNETES_LOOPS.values() for name in names}
    return {name: factory for name, factory in table.items() if name in wanted}


#: The Lease of koord-manager's duties: koordpy and Koordinator's koord-manager never both act.
MANAGER_LEASE: Final = "koordinator-manager"
#: Kubernetes mode: the Lease each set of loops runs under (Koordinator's names) and the loops.
#: The rest of :data:`~controller.loops.LOOPS` is what Kubernetes' own controllers (workloads,
#: garbage collection), the kubelets (pod lifecycle) and the API server (Event TTL) do on a
#: cluster.
KUBERNETES_LOOPS: Final[Mapping[str, tuple[str, ...]]] = {
    "koord-scheduler": (
        "jobs",
        "queueing",
        "reservations",
        "scheduler",
        "quota-revoke",
        "podgroups",
    ),
    "koord-descheduler": ("descheduler", "migration"),
    # koord-manager's nodeslo, nodemetric and noderesource controllers
    # ([kubernetes] manager_duties)
    "koordinator-manager": ("nodeslo", "nodemetric", "noderesource"),
}


@dataclass(slots=True)
class KubeController:
    """A started controller of a Kubernetes cluster (``koordpy controller run --kubeconfig``)."""

    client: KubeClient
    store: KubeStore
    metrics: MetricsEndpoint | None
    registry: CollectorRegistry
    restarts: Counter
    components: list[lifecycle.Component] = field(default_factory=list)


async def open_kube_controller(
    stack: contextlib.AsyncExitStack,
    cfg: ControllerConfig,
    *,
    kubeconfig: str | None,
    context: str | None = None,
    metrics_address: str | None = None,
    sync_timeout: float = 120.0,
) -> KubeController:
    """Connect to the cluster (``kubeconfig``, None: in-cluster), fill the caches, start the
    metrics; the loops of :data:`KUBERNETES_LOOPS`, each set under its Lease when
    ``[kubernetes] leader_elect``. ``stack`` closes everything in reverse order.

    No SQLite store and no koordpy API: the cluster is the store, kubectl the client."""
    section = cfg.kubernetes
    options = ClientOptions(qps=section.qps, burst=section.burst)
    client = await connect(kubeconfig, context=context or section.context or None, options=options)
    stack.push_async_callback(client.aclose)
    store = KubeStore(
        client,
        config_namespace=section.config_namespace,
        max_in_flight=section.max_in_flight,
    )
    stack.push_async_callback(store.aclose)
    await store.start(sync_timeout=sync_timeout)
    registry = CollectorRegistry()
    restarts = lifecycle.restarts_counter(registry)
    metrics = stack.enter_context(serve_metrics(metrics_address or cfg.metrics.address, registry))
    loops = build_loops(_loop_table(cfg, registry, kubernetes=True))
    components: list[lifecycle.Component] = []
    identity = section.identity or default_identity()
    for lease, names in KUBERNETES_LOOPS.items():
        if lease == MANAGER_LEASE and not section.manager_duties:
            continue
        runner = LoopRunner(store, [loop for loop in loops if loop.name in names], name=lease)
        if not section.leader_elect:
            components.append(runner)
            continue
        elector = LeaseElector(
            client,
            lease,
            namespace=section.lease_namespace,
            identity=identity,
            lease_duration=section.lease_duration,
            renew_deadline=section.renew_deadline,
            retry_period=section.retry_period,
        )
        components.append(Elected(elector, [runner], restarts_metric=restarts))
    return KubeController(
        client=client,
        store=store,
        metrics=metrics,
        registry=registry,
        restarts=restarts,
        components=components,
    )


async def _bridge(
    stack: contextlib.AsyncExitStack, cfg: ControllerConfig, registry: CollectorRegistry
) -> Bus:
    """A local bus bridged to the fleet's broker (connecting in the background).

    The bridge takes bodies up to ``[ingest] max_payload`` too, so that the ingest is where a
    larger one is dropped and counted, by leaf.
    """
    bus = Bus(queue_size=FLEET_QUEUE)
    settings = cfg.mqtt
    if settings.max_payload < cfg.ingest.max_payload:
        settings = msgspec.structs.replace(settings, max_payload=cfg.ingest.max_payload)
    await stack.enter_async_context(controller_bridge(bus, settings, registry=registry))
    log.info("ingest over MQTT: broker %s:%d", settings.host, settings.port)
    return bus
