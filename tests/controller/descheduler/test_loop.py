"""The ``descheduler`` loop: configuration from its ConfigMap, cycle timing, and the writes."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from apis import codec
from apis import constants as k
from apis.core import ConfigMap, Event, Node, Pod
from apis.errors import DecodeError
from apis.meta import Model, Object, ObjectMeta
from apis.scheduling import PodMigrationJob
from controller import simulate as sim
from controller.descheduler import config as cfg
from controller.descheduler.config import PluginEntry
from controller.descheduler.evictionpolicy import ANNOTATION_SOFT_EVICTION
from controller.descheduler.framework import CycleView, Evictor, Status
from controller.descheduler.loop import DeschedulerLoop
from controller.descheduler.migrationrates import EvictionBuckets
from controller.descheduler.plugins import PLUGINS
from controller.loops import LoopContext
from controller.store.cluster import Pending, Verb, Write
from controller.store.sqlite import Store
from tests.controller.delayed import DelayedStore, mark_loops
from tests.controller.descheduler.conftest import (
    Clock,
    answered,
    make_node,
    make_pod,
    replicaset,
)
from tests.crdschema import schema_errors, validator

HEAD = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n"


class PickArgs(Model):
    """Which pods the fake plugin evicts (by name), and which node it cordons."""

    pods: tuple[str, ...] = ()
    cordon: str = ""
    reason: str = "testing"
    dry_run: bool = False


class Pick:
    """A Balance plugin that evicts the pods its args name, and counts its runs."""

    name = "Pick"

    def __init__(self, args: PickArgs) -> None:
        self.args = args
        self.runs = 0
        self.seen: list[CycleView] = []
        #: Whether Python's garbage collector was on, per run.
        self.collector: list[bool] = []

    def balance(self, view: CycleView, evictor: Evictor) -> Status:
        self.runs += 1
        self.seen.append(view)
        self.collector.append(gc.isenabled())
        if self.args.cordon:
            evictor.cordon(self.args.cordon, plugin=self.name)
        for node in view.nodes:
            for pod in view.pods_on(node.metadata.name):
                if pod.metadata.name in self.args.pods:
                    evictor.evict(pod, plugin=self.name, reason=self.args.reason)
        return Status()


class BoomArgs(Model):
    pass


class Boom:
    """A Balance plugin that fails."""

    name = "Boom"

    def __init__(self, args: BoomArgs) -> None:
        self.args = args

    def balance(self, view: CycleView, evictor: Evictor) -> Status:
        raise RuntimeError("boom")


TABLE = {
    **PLUGINS,
    "Pick": PluginEntry(args=PickArgs, factory=Pick, points=frozenset({cfg.BALANCE})),
    "Boom": PluginEntry(args=BoomArgs, factory=Boom, points=frozenset({cfg.BALANCE})),
}


def document(
    *,
    pods: Sequence[str] = ("web-0",),
    interval: str = "10s",
    dry_run: bool = False,
    migration: dict[str, Any] | None = None,
    cordon: str = "",
    extra: dict[str, Any] | None = None,
) -> str:
    body: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "deschedulingInterval": interval,
        "dryRun": dry_run,
        "profiles": [
            {
                "name": "test",
                "plugins": {"balance": {"enabled": [{"name": "Pick"}]}},
                "pluginConfig": [
                    {"name": "Pick", "args": {"pods": list(pods), "cordon": cordon}},
                    {
                        "name": "MigrationController",
                        "args": {"objectLimiters": {}, **(migration or {})},
                    },
                ],
            }
        ],
        **(extra or {}),
    }
    return yaml.safe_dump(body)


def config_map(text: str) -> ConfigMap:
    return ConfigMap(
        metadata=ObjectMeta(
            name=k.DESCHEDULER_CONFIG_NAME, namespace=k.DESCHEDULER_CONFIG_NAMESPACE
        ),
        data={k.DESCHEDULER_CONFIG_KEY: text},
    )


def setup_cluster(store: Store, *, ready_nodes: int = 2) -> list[Pod]:
    for i, name in enumerate(("node-a", "node-b")):
        store.create(make_node(name, ready=i < ready_nodes))
    pods = [
        make_pod("web-0", node="node-a", cpu=500, ready=True),
        make_pod("web-1", node="node-b", cpu=500, ready=True),
        make_pod("web-2", node="node-b", cpu=500, ready=True),
        make_pod(
            "other-0",
            node="node-a",
            cpu=500,
            ready=True,
            scheduler="default-scheduler",
            owner=replicaset("other"),
        ),
        make_pod("other-1", node="node-b", ready=True, owner=replicaset("other")),
    ]
    return [store.create(p) for p in pods]


def listing(store: Store, kind: type[Object]) -> list[Any]:
    objects, _ = store.list(store.registry.for_type(kind))
    return [o for o in objects if isinstance(o, kind)]


def events(store: Store, reason: str) -> list[Event]:
    return [e for e in listing(store, Event) if e.reason == reason]


def loop_and_context(store: Store, clock: Clock) -> tuple[DeschedulerLoop, LoopContext]:
    return DeschedulerLoop(plugins=TABLE), LoopContext(store=store, now=clock)


def plugin_of(loop: DeschedulerLoop) -> Pick:
    (profile,) = loop._profiles
    (plugin,) = profile.balance
    assert isinstance(plugin, Pick)
    return plugin


def test_without_its_config_map_the_loop_does_nothing(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    loop, ctx = loop_and_context(store, clock)
    version = store.resource_version
    assert loop.reconcile(ctx) is None
    assert loop.configuration is None
    assert store.resource_version == version


def test_cycles_run_every_interval_on_the_loop_s_clock(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(config_map(document(pods=())))
    loop, ctx = loop_and_context(store, clock)
    assert loop.reconcile(ctx) == 10.0
    plugin = plugin_of(loop)
    assert plugin.runs == 1
    clock.now += timedelta(seconds=4)
    assert loop.reconcile(ctx) == pytest.approx(6.0)
    assert plugin.runs == 1
    clock.now += timedelta(seconds=6)
    assert loop.reconcile(ctx) == 10.0
    assert plugin_of(loop) is plugin  # the same instance, cycle after cycle
    assert plugin.runs == 2


def test_interval_zero_runs_one_cycle(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(config_map(document(pods=(), interval="0s")))
    loop, ctx = loop_and_context(store, clock)
    assert loop.reconcile(ctx) is None
    clock.now += timedelta(hours=1)
    assert loop.reconcile(ctx) is None
    assert plugin_of(loop).runs == 1


def test_the_view_holds_ready_nodes_pods_and_every_node(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(make_node("node-c", ready=False))
    store.create(config_map(document(pods=())))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    (view,) = plugin_of(loop).seen
    assert [n.metadata.name for n in view.nodes] == ["node-a", "node-b"]
    assert set(view.all_nodes) == {"node-a", "node-b"}
    assert {p.metadata.name for p in view.pods_on("node-b")} == {"web-1", "web-2", "other-1"}
    assert view.now == clock.now


def test_a_node_whose_pods_did_not_change_keeps_its_pod_list_object(
    store: Store, clock: Clock
) -> None:
    # Plugins keep per-node work while a node's pod list is the same object.
    setup_cluster(store)
    store.create(config_map(document(pods=())))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    clock.now += timedelta(seconds=10)
    store.create(make_pod("web-3", node="node-b", cpu=500, ready=True))
    loop.reconcile(ctx)
    clock.now += timedelta(seconds=10)
    web0 = next(p for p in listing(store, Pod) if p.metadata.name == "web-0")
    store.update(msgspec.structs.replace(web0, metadata=replace_labels(web0, {"v": "2"})))
    loop.reconcile(ctx)
    first, second, third = plugin_of(loop).seen
    assert second.pods_on("node-a") is first.pods_on("node-a")
    assert second.pods_on("node-b") is not first.pods_on("node-b")
    assert {p.metadata.name for p in second.pods_on("node-b")} == {
        "web-1",
        "web-2",
        "web-3",
        "other-1",
    }
    assert third.pods_on("node-b") is second.pods_on("node-b")
    assert third.pods_on("node-a") is not second.pods_on("node-a")
    assert {p.metadata.labels.get("v") for p in third.pods_on("node-a")} == {"2", None}


def replace_labels(pod: Pod, labels: dict[str, str]) -> Any:
    return msgspec.structs.replace(pod.metadata, labels={**pod.metadata.labels, **labels})


def test_each_profile_sees_the_nodes_of_its_selector(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    text = document(pods=())
    body = yaml.safe_load(text)
    second = {**body["profiles"][0], "name": "only-b"}
    second["nodeSelector"] = {
        "matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]
    }
    body["profiles"].append(second)
    node_b = next(n for n in listing(store, Node) if n.metadata.name == "node-b")
    store.update(
        msgspec.structs.replace(
            node_b, metadata=msgspec.structs.replace(node_b.metadata, labels={"pool": "b"})
        )
    )
    store.create(config_map(yaml.safe_dump(body)))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    seen: dict[str, list[str]] = {}
    for profile in loop._profiles:
        (plugin,) = profile.balance
        assert isinstance(plugin, Pick)
        (view,) = plugin.seen
        seen[profile.profile.name] = [n.metadata.name for n in view.nodes]
    assert seen == {"test": ["node-a", "node-b"], "only-b": ["node-b"]}


@pytest.mark.parametrize("enabled", [True, False], ids=["collector on", "collector off"])
def test_the_garbage_collector_rests_during_a_cycle_and_is_left_as_it_was(
    store: Store, clock: Clock, enabled: bool
) -> None:
    setup_cluster(store)
    store.create(config_map(document()))
    loop, ctx = loop_and_context(store, clock)
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        loop.reconcile(ctx)
        after = gc.isenabled()
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()
    assert plugin_of(loop).collector == [False]
    assert after is enabled


def test_a_failing_plugin_is_logged_and_the_others_still_run(
    store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    setup_cluster(store)
    body = yaml.safe_load(document())
    body["profiles"][0]["plugins"]["balance"]["enabled"].insert(0, {"name": "Boom"})
    store.create(config_map(yaml.safe_dump(body)))
    loop, ctx = loop_and_context(store, clock)
    with caplog.at_level(logging.ERROR, logger="controller.descheduler.loop"):
        assert loop.reconcile(ctx) == 10.0
    assert "Balance plugin Boom failed" in caplog.text
    assert "RuntimeError: boom" in caplog.text
    assert [j.spec.pod_ref.name for j in listing(store, PodMigrationJob)] == ["web-0"]


def test_fewer_than_two_ready_nodes_skip_the_cycle(
    store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    setup_cluster(store, ready_nodes=1)
    store.create(config_map(document()))
    loop, ctx = loop_and_context(store, clock)
    with caplog.at_level(logging.INFO, logger="controller.descheduler.loop"):
        assert loop.reconcile(ctx) == 10.0
    assert plugin_of(loop).runs == 0
    assert "1 Ready node(s) match the node selector, 2 needed" in caplog.text
    assert listing(store, PodMigrationJob) == []


def test_reservation_first_creates_a_pod_migration_job(
    store: Store, clock: Clock, shared_dir: Path
) -> None:
    pods = setup_cluster(store)
    store.create(config_map(document(migration={"defaultJobTTL": "10m"})))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    (job,) = listing(store, PodMigrationJob)
    web = pods[0]
    assert job.metadata.annotations == {
        k.ANNOTATION_EVICT_REASON: "testing",
        k.ANNOTATION_EVICT_TRIGGER: "Pick",
        k.ANNOTATION_JOB_CREATED_BY: job.metadata.annotations[k.ANNOTATION_JOB_CREATED_BY],
    }
    assert len(job.metadata.name) == 36  # a UUID
    spec = job.spec
    assert (spec.pod_ref.namespace, spec.pod_ref.name, spec.pod_ref.uid) == (
        "default",
        "web-0",
        web.metadata.uid,
    )
    assert (spec.mode, str(spec.ttl)) == ("ReservationFirst", "10m0s")
    assert job.status.phase == "Pending"
    assert store.exists(store.registry.for_type(Pod), "web-0", "default")
    wire = json.loads(codec.encode_json(job))
    assert (
        schema_errors(validator(shared_dir, "scheduling.koordinator.sh/PodMigrationJob"), wire)
        == []
    )


def test_a_pod_with_an_active_job_is_not_migrated_twice(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(config_map(document()))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    clock.now += timedelta(seconds=10)
    loop.reconcile(ctx)
    assert len(listing(store, PodMigrationJob)) == 1


@pytest.mark.parametrize("mode", ["ReservationFirst", "EvictDirectly"])
def test_late_answers_neither_evict_twice_nor_make_a_second_job(
    clock: Clock, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Cycles that run while the answers to the loop's writes are three snapshots late (and
    its writes hidden from its snapshots): the pod is evicted, or gets its PodMigrationJob,
    once."""
    mark_loops(monkeypatch)
    sent: list[Write] = []
    with DelayedStore(clock=clock, results_after=3) as store:
        write = store.write

        def recording(writes: Sequence[Write]) -> Pending:
            sent.extend(writes)
            return write(writes)

        monkeypatch.setattr(store, "write", recording)
        setup_cluster(store)
        store.create(config_map(document(migration={"defaultJobMode": mode})))
        loop, ctx = loop_and_context(store, clock)
        for _ in range(4):
            loop.reconcile(ctx)
            clock.now += timedelta(seconds=10)
        answered(store, loop)
        assert store.late > 0
    jobs = [w for w in sent if isinstance(w.obj, PodMigrationJob)]
    evictions = [w for w in sent if w.verb is Verb.EVICT]
    if mode == "EvictDirectly":
        assert [w.name for w in evictions] == ["web-0"]
        assert jobs == []
    else:
        assert evictions == []
        assert [w.obj.spec.pod_ref.name for w in jobs if isinstance(w.obj, PodMigrationJob)] == [
            "web-0"
        ]


def test_evict_directly_deletes_the_pod_with_an_event(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(config_map(document(migration={"defaultJobMode": "EvictDirectly"})))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    answered(store, loop)  # the Events follow the answers
    assert not store.exists(store.registry.for_type(Pod), "web-0", "default")
    assert listing(store, PodMigrationJob) == []
    (event,) = events(store, "Evicted")
    assert event.type == "Warning"
    assert event.message == "evicted by Pick: testing"
    assert (event.involved_object.kind, event.involved_object.name) == ("Pod", "web-0")


def test_a_direct_eviction_waits_for_a_token_the_migration_loop_took(
    store: Store, clock: Clock
) -> None:
    # One evictQPS bucket for both loops (build_loops links them): 10 a second, burst 1.
    setup_cluster(store)
    store.create(config_map(document(migration={"defaultJobMode": "EvictDirectly"})))
    loop, ctx = loop_and_context(store, clock)
    buckets = EvictionBuckets()
    loop.share_evictions(buckets)
    shared = buckets.get(10.0, 1)
    assert shared is not None
    assert shared.take(clock.now)  # the migration loop evicted a pod just now
    loop.reconcile(ctx)
    pods = store.registry.for_type(Pod)
    assert store.exists(pods, "web-0", "default")  # refused: no token this instant
    clock.now += timedelta(seconds=10)
    loop.reconcile(ctx)
    assert not store.exists(pods, "web-0", "default")
    assert not shared.take(clock.now)  # the cycle took the token


@pytest.mark.parametrize(
    ("migration", "label", "gone", "message"),
    [
        ({"evictionPolicy": "Delete"}, None, True, "deleted by Pick: testing"),
        (
            {"defaultDeleteOptions": {"gracePeriodSeconds": 30}},
            None,
            True,
            "evicted by Pick: testing; grace period 30s",
        ),
        ({}, "SoftEviction", False, "marked for soft eviction by Pick: testing"),
        ({"evictionPolicy": "SoftEviction"}, "Delete", True, "deleted by Pick: testing"),
    ],
    ids=["policy Delete", "grace period", "label SoftEviction", "label overrides the args"],
)
def test_evict_directly_follows_the_eviction_policy_and_delete_options(
    store: Store,
    clock: Clock,
    migration: dict[str, Any],
    label: str | None,
    gone: bool,
    message: str,
) -> None:
    # The cycle's own deletes (EvictDirectly) follow evictionPolicy, the pod's
    # koordinator.sh/evict-policy label and defaultDeleteOptions, as the migration loop does.
    setup_cluster(store)
    pods = store.registry.for_type(Pod)
    if label is not None:
        web = store.get(pods, "web-0", "default")
        assert isinstance(web, Pod)
        labels = {**web.metadata.labels, k.LABEL_EVICT_POLICY: label}
        store.update(
            msgspec.structs.replace(
                web, metadata=msgspec.structs.replace(web.metadata, labels=labels)
            )
        )
    store.create(config_map(document(migration={"defaultJobMode": "EvictDirectly", **migration})))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    answered(store, loop)  # the Events follow the answers
    assert store.exists(pods, "web-0", "default") is not gone
    if not gone:
        kept = store.get(pods, "web-0", "default")
        assert isinstance(kept, Pod)
        assert ANNOTATION_SOFT_EVICTION in kept.metadata.annotations
    (event,) = events(store, "Evicted")
    assert event.message == message


def test_pods_of_other_schedulers_are_evicted_directly_in_reservation_first(
    store: Store, clock: Clock
) -> None:
    setup_cluster(store)
    store.create(config_map(document(pods=("web-0", "other-0"))))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    answered(store, loop)  # the Events follow the answers
    assert [j.spec.pod_ref.name for j in listing(store, PodMigrationJob)] == ["web-0"]
    assert not store.exists(store.registry.for_type(Pod), "other-0", "default")
    assert [e.involved_object.name for e in events(store, "Evicted")] == ["other-0"]


def test_dry_run_writes_only_proposal_events(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(config_map(document(pods=("web-0", "other-0"), dry_run=True, cordon="node-a")))
    loop, ctx = loop_and_context(store, clock)
    before = listing(store, Pod)
    loop.reconcile(ctx)
    assert listing(store, PodMigrationJob) == []
    assert listing(store, Pod) == before
    assert not any(n.spec.unschedulable for n in listing(store, Node))
    proposals = events(store, "EvictionProposed")
    assert sorted(e.involved_object.name for e in proposals) == ["other-0", "web-0"]
    assert all(e.type == "Normal" for e in proposals)
    assert "eviction proposed by Pick (dry run): testing" in {e.message for e in proposals}
    assert [e.involved_object.name for e in events(store, "CordonProposed")] == ["node-a"]
    assert {e.reason for e in listing(store, Event)} == {"EvictionProposed", "CordonProposed"}


def test_a_plugin_s_own_dry_run_only_proposes_in_a_live_cycle(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    text = document(pods=("web-0", "other-0"), cordon="node-a")
    text = text.replace("cordon: node-a", "cordon: node-a\n      dryRun: true")
    assert "dryRun: true" in text
    store.create(config_map(text))
    loop, ctx = loop_and_context(store, clock)
    before = listing(store, Pod)
    loop.reconcile(ctx)
    assert plugin_of(loop).args.dry_run
    assert listing(store, PodMigrationJob) == []
    assert listing(store, Pod) == before
    assert not any(n.spec.unschedulable for n in listing(store, Node))
    proposals = events(store, "EvictionProposed")
    assert sorted(e.involved_object.name for e in proposals) == ["other-0", "web-0"]


def test_cordons_mark_the_node_unschedulable(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    store.create(config_map(document(pods=(), cordon="node-b")))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    answered(store, loop)  # the Events follow the answers
    nodes = {n.metadata.name: n for n in listing(store, Node)}
    assert nodes["node-b"].spec.unschedulable
    assert not nodes["node-a"].spec.unschedulable
    (event,) = events(store, "Cordoned")
    assert (event.involved_object.name, event.type) == ("node-b", "Normal")


def test_the_cycle_limits_of_the_configuration_apply(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    text = document(pods=("web-1", "other-1"), extra={"maxNoOfPodsToEvictPerNode": 1})
    store.create(config_map(text))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    # The plugin asks for node-b's pods in name order: other-1 first, then web-1 is refused.
    assert [j.spec.pod_ref.name for j in listing(store, PodMigrationJob)] == ["other-1"]


def test_a_bad_configuration_is_reported_and_the_previous_one_kept(
    store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    setup_cluster(store)
    made = store.create(config_map(document(pods=())))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    good = loop.configuration
    bad = msgspec.structs.replace(
        made,
        data={k.DESCHEDULER_CONFIG_KEY: HEAD + "maxNoOfPodsToEvictTotal: -1\n"},
    )
    store.update(bad)
    clock.now += timedelta(seconds=10)
    with caplog.at_level(logging.ERROR, logger="controller.descheduler.loop"):
        assert loop.reconcile(ctx) == 10.0
        loop.reconcile(ctx)  # the same bad text: reported once
    assert loop.configuration is good
    assert plugin_of(loop).runs == 2
    (event,) = events(store, "InvalidConfiguration")
    assert event.type == "Warning"
    assert event.involved_object.name == k.DESCHEDULER_CONFIG_NAME
    assert "maxNoOfPodsToEvictTotal: -1 must not be negative" in event.message
    assert "keeping the previous configuration" in event.message
    assert caplog.text.count("maxNoOfPodsToEvictTotal: -1 must not be negative") == 1


def test_a_new_configuration_runs_at_once_and_deleting_it_stops(store: Store, clock: Clock) -> None:
    setup_cluster(store)
    made = store.create(config_map(document(pods=())))
    loop, ctx = loop_and_context(store, clock)
    loop.reconcile(ctx)
    first = plugin_of(loop)
    store.update(
        msgspec.structs.replace(made, data={k.DESCHEDULER_CONFIG_KEY: document(pods=("web-0",))})
    )
    clock.now += timedelta(seconds=1)
    assert loop.reconcile(ctx) == 10.0
    assert plugin_of(loop) is not first
    assert len(listing(store, PodMigrationJob)) == 1
    store.delete(store.registry.for_type(ConfigMap), made.metadata.name, made.metadata.namespace)
    assert loop.reconcile(ctx) is None
    assert loop.configuration is None


# --- koordpy simulate ---------------------------------------------------------------------------

SCENARIO = """\
apiVersion: v1
kind: Node
metadata: {name: od-1, labels: {tier: on-demand}}
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Node
metadata: {name: rsv-1, labels: {tier: reserved}}
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  namespace: default
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: rs-web, controller: true}
spec:
  nodeName: od-1
  schedulerName: koord-scheduler
  containers: [{name: main, image: nginx, resources: {requests: {cpu: "1"}}}]
status:
  phase: Running
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  namespace: default
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: rs-web, controller: true}
spec:
  nodeName: rsv-1
  schedulerName: koord-scheduler
  containers: [{name: main, image: nginx, resources: {requests: {cpu: "1"}}}]
status:
  phase: Running
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: 0s
profiles:
- name: tiers
  plugins:
    balance: {enabled: [{name: CustomPriority}]}
  pluginConfig:
  - name: CustomPriority
    args:
      evictionOrder:
      - {name: on-demand, nodeSelector: {matchLabels: {tier: on-demand}}}
      - {name: reserved, nodeSelector: {matchLabels: {tier: reserved}}}
  - name: MigrationController
    args: {defaultJobMode: EvictDirectly, objectLimiters: {}}
"""


def test_a_scenario_s_descheduler_configuration_becomes_its_config_map() -> None:
    objects = sim.scenario_objects(SCENARIO, source="s.yaml")
    (made,) = [o for o in objects if isinstance(o, ConfigMap)]
    assert (made.metadata.namespace, made.metadata.name) == (
        k.DESCHEDULER_CONFIG_NAMESPACE,
        k.DESCHEDULER_CONFIG_NAME,
    )
    assert cfg.load_configuration(made.data[k.DESCHEDULER_CONFIG_KEY]).profiles[0].name == "tiers"


def test_simulate_runs_the_descheduler_on_the_scenario() -> None:
    objects = sim.scenario_objects(SCENARIO, source="s.yaml")
    result = sim.simulate(objects, loops={"descheduler": DeschedulerLoop})
    names = {o.metadata.name for o in result.objects if isinstance(o, Pod)}
    assert names == {"web-1"}
    (event,) = [o for o in result.objects if isinstance(o, Event) and o.reason == "Evicted"]
    assert event.involved_object.name == "web-0"
    assert event.message.startswith("evicted by CustomPriority: evicting from on-demand")


def test_a_bad_descheduler_document_in_a_scenario_names_where() -> None:
    bad = SCENARIO.replace("deschedulingInterval: 0s", "deschedulingInterval: soon")
    with pytest.raises(DecodeError) as caught:
        sim.scenario_objects(bad, source="s.yaml")
    text = str(caught.value)
    assert text.startswith("s.yaml: document 4: deschedulingInterval: ")
    assert "invalid duration" in text
