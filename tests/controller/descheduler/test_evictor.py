"""The cycle's evictor: every filter and gate, node fit, the cycle's limits, rates, modes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.codec import decode_as
from apis.core import Pod
from apis.errors import DecodeError
from apis.meta import LabelSelector, OwnerReference
from controller.descheduler import evictor as ev
from controller.descheduler.evictor import (
    ActiveMigration,
    CycleEvictor,
    CycleLedger,
    MigrationControllerArgs,
    TokenBucket,
)
from controller.descheduler.framework import CycleView, Evictor
from tests.controller.descheduler.conftest import T0, make_node, make_pod, replicaset

NO_LIMITERS: dict[str, Any] = {"objectLimiters": {}}


def margs(**fields: Any) -> MigrationControllerArgs:
    """MigrationControllerArgs from wire names (object limiters off unless given)."""
    return decode_as({**NO_LIMITERS, **fields}, MigrationControllerArgs)


def siblings(count: int = 3, *, ready: bool = True, owner: str = "web-rs") -> list[Pod]:
    """Pods of the same ReplicaSet on node-b."""
    return [
        make_pod(f"{owner}-{i}", node="node-b", cpu=100, owner=replicaset(owner), ready=ready)
        for i in range(1, count + 1)
    ]


def evictor(
    pods: Sequence[Pod],
    *,
    args: MigrationControllerArgs | None = None,
    migrations: Sequence[ActiveMigration] = (),
    node_b_cpu: int = 4000,
    classes: dict[str, int] | None = None,
    dry_run: bool = False,
    filters: bool = True,
    bucket: TokenBucket | None = None,
    ledger: CycleLedger | None = None,
    max_per_node: int | None = None,
    max_per_namespace: int | None = None,
    max_total: int | None = None,
) -> CycleEvictor:
    nodes = [make_node("node-a"), make_node("node-b", cpu=node_b_cpu)]
    by_node: dict[str, list[Pod]] = {}
    workloads: dict[str, list[Pod]] = {}
    for pod in pods:
        by_node.setdefault(pod.spec.node_name, []).append(pod)
        workload = ev.controller_uid(pod)
        if workload:
            workloads.setdefault(workload, []).append(pod)
    view = CycleView(
        now=T0,
        nodes=tuple(nodes),
        pods_by_node=by_node,
        all_nodes={n.metadata.name: n for n in nodes},
    )
    if ledger is None:
        ledger = CycleLedger(
            now=T0,
            max_per_node=max_per_node,
            max_per_namespace=max_per_namespace,
            max_total=max_total,
            migrations=migrations,
            workload_pods=workloads,
            priority_classes=classes,
        )
    return CycleEvictor(
        view,
        ledger,
        args=args or margs(),
        profile="p",
        dry_run=dry_run,
        filters=filters,
        bucket=bucket,
    )


def web(**changes: Any) -> Pod:
    """The pod under test: web-rs-0 on node-a, Ready, 500m."""
    return make_pod("web-rs-0", node="node-a", cpu=500, ready=True, **changes)


def with_meta(pod: Pod, **fields: Any) -> Pod:
    return msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, **fields))


CRITICAL = {"priority_class_name": "system-cluster-critical"}
BARE: dict[str, Any] = {"owner": None}
EMPTY_DIR = {"volumes": [{"name": "scratch", "emptyDir": {}}]}
HOST_PATH = {"volumes": [{"name": "logs", "hostPath": {"path": "/var/log"}}]}
PVC = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}
BYPASS = {k.ANNOTATION_DESCHEDULER_EVICT: ""}
FORBIDDEN = {k.ANNOTATION_EVICTION_COST: str(k.EVICTION_COST_FORBIDDEN)}


def gates(*names: str) -> dict[str, Any]:
    return {"skipEvictionGates": list(names)}


FilterCase = tuple[Callable[[], Pod], dict[str, Any], str]

FILTER_CASES: dict[str, FilterCase] = {
    "plain pod": (lambda: web(), {}, ""),
    "evict annotation bypasses everything": (
        lambda: web(annotations={**BYPASS, **FORBIDDEN}, **BARE, **EMPTY_DIR, **CRITICAL),
        {},
        "",
    ),
    "eviction cost MaxInt32": (
        lambda: web(annotations=FORBIDDEN),
        gates(*ev.EVICTION_GATES),
        "forbidden to migrate by its eviction cost",
    ),
    "an eviction cost below MaxInt32": (
        lambda: web(annotations={k.ANNOTATION_EVICTION_COST: "100"}),
        {},
        "",
    ),
    "terminating": (lambda: with_meta(web(), deletion_timestamp=T0), {}, "pod is terminating"),
    "mirror pod": (
        lambda: web(annotations={k.ANNOTATION_MIRROR_POD: "x"}),
        {},
        "pod is a mirror pod",
    ),
    "static pod": (
        lambda: web(annotations={k.ANNOTATION_CONFIG_SOURCE: "file"}),
        {},
        "pod is a static pod",
    ),
    "DaemonSet pod": (
        lambda: web(
            owner=OwnerReference(
                api_version="apps/v1", kind="DaemonSet", name="ds", uid="ds", controller=True
            )
        ),
        {},
        "pod is a DaemonSet pod",
    ),
    "bare pod": (lambda: web(**BARE), {}, "pod does not have any ownerRefs"),
    "bare pod, evictAllBarePods": (lambda: web(**BARE), {"evictAllBarePods": True}, ""),
    "failed bare pod, evictFailedBarePods": (
        lambda: web(**BARE, phase="Failed"),
        {"evictFailedBarePods": True},
        "",
    ),
    "running bare pod, evictFailedBarePods": (
        lambda: web(**BARE),
        {"evictFailedBarePods": True},
        "pod does not have any ownerRefs",
    ),
    "bare pod, gate BarePods": (lambda: web(**BARE), gates("BarePods"), ""),
    "emptyDir": (lambda: web(**EMPTY_DIR), {}, "pod has local storage"),
    "hostPath": (lambda: web(**HOST_PATH), {}, "pod has local storage"),
    "emptyDir, evictLocalStoragePods": (
        lambda: web(**EMPTY_DIR),
        {"evictLocalStoragePods": True},
        "",
    ),
    "emptyDir, gate LocalStorage": (lambda: web(**EMPTY_DIR), gates("LocalStorage"), ""),
    "system-cluster-critical": (lambda: web(**CRITICAL), {}, "system critical priority"),
    "system-node-critical": (
        lambda: web(priority_class_name="system-node-critical"),
        {},
        "system critical priority",
    ),
    "priority 2000000000": (
        lambda: web(priority=2_000_000_000),
        {},
        "system critical priority",
    ),
    "critical, evictSystemCriticalPods": (
        lambda: web(**CRITICAL),
        {"evictSystemCriticalPods": True},
        "",
    ),
    "critical, gate SystemCritical": (lambda: web(**CRITICAL), gates("SystemCritical"), ""),
    "priority at the threshold value": (
        lambda: web(priority=1000),
        {"priorityThreshold": {"value": 1000}},
        "higher priority than the priorityThreshold",
    ),
    "priority below the threshold value": (
        lambda: web(priority=999),
        {"priorityThreshold": {"value": 1000}},
        "",
    ),
    "no priority and a threshold": (lambda: web(), {"priorityThreshold": {"value": 0}}, ""),
    "priority above a named threshold": (
        lambda: web(priority=600),
        {"priorityThreshold": {"name": "high"}},
        "higher priority than the priorityThreshold",
    ),
    "priority class above a named threshold": (
        lambda: web(priority_class_name="high"),
        {"priorityThreshold": {"name": "high"}},
        "higher priority than the priorityThreshold",
    ),
    "unknown threshold class": (
        lambda: web(priority=1),
        {"priorityThreshold": {"name": "nope"}},
        "priority class 'nope' of priorityThreshold not found",
    ),
    "threshold, evictSystemCriticalPods (as upstream)": (
        lambda: web(priority=1000),
        {"priorityThreshold": {"value": 10}, "evictSystemCriticalPods": True},
        "",
    ),
    "threshold, gate PriorityThreshold": (
        lambda: web(priority=1000),
        {"priorityThreshold": {"value": 10}, **gates("PriorityThreshold")},
        "",
    ),
    "PVC, ignorePvcPods": (
        lambda: web(**PVC),
        {"ignorePvcPods": True},
        "pod has a PVC and ignorePvcPods is on",
    ),
    "PVC": (lambda: web(**PVC), {}, ""),
    "PVC, ignorePvcPods, gate PVC": (
        lambda: web(**PVC),
        {"ignorePvcPods": True, **gates("PVC")},
        "",
    ),
    "label selector missed": (
        lambda: web(),
        {"labelSelector": {"matchLabels": {"app": "web"}}},
        "pod labels do not match the labelSelector",
    ),
    "label selector matched": (
        lambda: web(labels={"app": "web"}),
        {"labelSelector": {"matchLabels": {"app": "web"}}},
        "",
    ),
    "label selector, gate LabelSelector": (
        lambda: web(),
        {"labelSelector": {"matchLabels": {"app": "web"}}, **gates("LabelSelector")},
        "",
    ),
    "namespace not included": (
        lambda: web(),
        {"namespaces": {"include": ["prod"]}},
        "namespace default is not included",
    ),
    "namespace excluded": (
        lambda: web(),
        {"namespaces": {"exclude": ["default"]}},
        "namespace default is excluded",
    ),
    "namespace excluded, gate Namespaces": (
        lambda: web(),
        {"namespaces": {"exclude": ["default"]}, **gates("Namespaces")},
        "",
    ),
}


@pytest.mark.parametrize(("make", "fields", "refusal"), FILTER_CASES.values(), ids=FILTER_CASES)
def test_filters_and_gates(make: Callable[[], Pod], fields: dict[str, Any], refusal: str) -> None:
    pod = make()
    subject = evictor([pod, *siblings()], args=margs(**fields), classes={"high": 500})
    assert isinstance(subject, Evictor)
    assert subject.filter(pod) is (not refusal)
    assert refusal in subject.refusal(pod)
    assert subject.evict(pod, plugin="Test", reason="r") is (not refusal)


def lone(**changes: Any) -> Pod:
    return make_pod("solo-0", node="node-a", owner=replicaset("solo"), ready=True, **changes)


WORKLOAD_CASES: dict[str, tuple[Sequence[Pod], dict[str, Any], str]] = {
    "a workload of one pod": ([lone()], {}, "workload has 1 pod(s), too few to migrate one"),
    "a workload of one pod, skipCheckExpectedReplicas": (
        [lone()],
        {"skipCheckExpectedReplicas": True},
        "",
    ),
    "a workload of one pod, gate ExpectedReplicas": ([lone()], gates("ExpectedReplicas"), ""),
    "replicas == maxMigratingPerWorkload": (
        [web(), *siblings(1)],
        {"maxMigratingPerWorkload": 2},
        "workload has 2 pod(s), too few",
    ),
    "replicas == maxUnavailablePerWorkload": (
        [web(), *siblings(2)],
        {"maxUnavailablePerWorkload": "100%"},
        "workload has 3 pod(s), too few",
    ),
}


@pytest.mark.parametrize(("pods", "fields", "refusal"), WORKLOAD_CASES.values(), ids=WORKLOAD_CASES)
def test_expected_replicas(pods: Sequence[Pod], fields: dict[str, Any], refusal: str) -> None:
    subject = evictor(pods, args=margs(**fields))
    assert refusal in subject.refusal(pods[0])
    assert subject.filter(pods[0]) is (not refusal)


def moving(
    name: str, *, node: str = "node-b", namespace: str = "default", workload: str = ""
) -> ActiveMigration:
    return ActiveMigration(namespace=namespace, name=name, node=node, workload=workload)


MIGRATING_CASES: dict[str, tuple[Sequence[ActiveMigration], Sequence[Pod], dict[str, Any], str]] = {
    "the pod has an active job": ([moving("web-rs-0", node="node-a")], [], {}, "already migrating"),
    "two pods of node-a migrate (default limit 2)": (
        [moving("x", node="node-a"), moving("y", node="node-a")],
        [],
        {},
        "2 pods of node node-a are migrating",
    ),
    "one pod of node-a migrates": ([moving("x", node="node-a")], [], {}, ""),
    "maxMigratingPerNode 0 is no limit": (
        [moving(f"x{i}", node="node-a") for i in range(5)],
        [],
        {"maxMigratingPerNode": 0},
        "",
    ),
    "per node, gate": (
        [moving("x", node="node-a"), moving("y", node="node-a")],
        [],
        gates("MaxMigratingPerNode"),
        "",
    ),
    "globally": ([moving("x")], [], {"maxMigratingGlobally": 1}, "the global limit is 1"),
    "globally, gate": (
        [moving("x")],
        [],
        {"maxMigratingGlobally": 1, **gates("MaxMigratingGlobally")},
        "",
    ),
    "per namespace": (
        [moving("x")],
        [],
        {"maxMigratingPerNamespace": 1},
        "1 pods of namespace default are migrating",
    ),
    "per namespace, another namespace": (
        [moving("x", namespace="other")],
        [],
        {"maxMigratingPerNamespace": 1},
        "",
    ),
    "per namespace, gate": (
        [moving("x")],
        [],
        {"maxMigratingPerNamespace": 1, **gates("MaxMigratingPerNamespace")},
        "",
    ),
    "per workload": (
        [moving("web-rs-1", workload="uid-web-rs")],
        [],
        {"maxMigratingPerWorkload": 1},
        "1 pods of the workload are migrating",
    ),
    "per workload, gate": (
        [moving("web-rs-1", workload="uid-web-rs")],
        [],
        {"maxMigratingPerWorkload": 1, **gates("MaxMigratingPerWorkload")},
        "",
    ),
    "unavailable: a migrating and a not-Ready sibling (limit 2 of 4)": (
        [moving("web-rs-1", workload="uid-web-rs")],
        [make_pod("web-rs-9", node="node-b", owner=replicaset())],
        gates("MaxMigratingPerWorkload"),
        "2 pods of the workload are unavailable",
    ),
    "unavailable, gate": (
        [moving("web-rs-1", workload="uid-web-rs")],
        [make_pod("web-rs-9", node="node-b", owner=replicaset())],
        gates("MaxMigratingPerWorkload", "MaxUnavailablePerWorkload"),
        "",
    ),
}


@pytest.mark.parametrize(
    ("migrations", "extra", "fields", "refusal"), MIGRATING_CASES.values(), ids=MIGRATING_CASES
)
def test_migrating_limits(
    migrations: Sequence[ActiveMigration],
    extra: Sequence[Pod],
    fields: dict[str, Any],
    refusal: str,
) -> None:
    pod = web()
    subject = evictor([pod, *siblings(), *extra], args=margs(**fields), migrations=migrations)
    assert refusal in subject.refusal(pod)
    assert subject.filter(pod) is (not refusal)


def test_direct_evictions_count_as_migrating_within_the_cycle() -> None:
    pods = spread(3, nodes=1)
    subject = evictor([*pods, *partners(pods)], args=margs(defaultJobMode="EvictDirectly"))
    assert [subject.evict(p, plugin="T", reason="r") for p in pods] == [True, True, False]
    assert "2 pods of node node-a are migrating" in subject.refusal(pods[2])
    assert "already being evicted in this cycle" in subject.refusal(pods[0])


def test_jobs_of_the_cycle_wait_for_arbitration_instead() -> None:
    # A drain asks for every pod of a node at once; the migration loop runs two at a time.
    pods = spread(3, nodes=1)
    subject = evictor([*pods, *partners(pods)], args=margs())
    assert [subject.evict(p, plugin="T", reason="r") for p in pods] == [True, True, True]
    assert "already being evicted in this cycle" in subject.refusal(pods[2])


NODE_FIT_CASES: dict[str, tuple[int, dict[str, Any], Callable[[], Pod], str]] = {
    "fits on node-b": (4000, {"nodeFit": True}, lambda: web(), ""),
    "node-b is full": (700, {"nodeFit": True}, lambda: web(), "does not fit on any other node"),
    "node fit off": (700, {}, lambda: web(), ""),
    "gate NodeFit": (700, {"nodeFit": True, **gates("NodeFit")}, lambda: web(), ""),
    "evict annotation": (700, {"nodeFit": True}, lambda: web(annotations=BYPASS), ""),
    "nodeSelector leaves only the pod's own node": (
        4000,
        {"nodeFit": True, "nodeSelector": "pool=none"},
        lambda: web(),
        "does not fit on any other node",
    ),
}


@pytest.mark.parametrize(
    ("node_b_cpu", "fields", "make", "misfit"), NODE_FIT_CASES.values(), ids=NODE_FIT_CASES
)
def test_node_fit(
    node_b_cpu: int, fields: dict[str, Any], make: Callable[[], Pod], misfit: str
) -> None:
    pod = make()
    # node-b holds the three siblings: 300m of its cpu is taken.
    subject = evictor([pod, *siblings()], args=margs(**fields), node_b_cpu=node_b_cpu)
    assert subject.pre_eviction_filter(pod) is (not misfit)
    assert misfit in subject.misfit(pod)
    assert subject.evict(pod, plugin="T", reason="r") is (not misfit)


def spread(count: int, *, nodes: int = 2, namespaces: int = 1) -> list[Pod]:
    """``count`` pods of separate workloads, round-robin over nodes and namespaces."""
    return [
        make_pod(
            f"p{i}",
            node=f"node-{'abc'[i % nodes]}",
            namespace=f"ns{i % namespaces}",
            owner=replicaset(f"rs{i}"),
            ready=True,
        )
        for i in range(count)
    ]


def partners(pods: Sequence[Pod]) -> list[Pod]:
    """A second, Ready pod for each pod's workload (on node-z), so that each may migrate."""
    return [
        make_pod(
            f"{p.metadata.name}-twin",
            node="node-z",
            namespace=p.metadata.namespace,
            owner=p.metadata.owner_references[0],
            ready=True,
        )
        for p in pods
    ]


Limits = tuple[int | None, int | None, int | None]

LIMIT_CASES: dict[str, tuple[Limits, int, int, int, str]] = {
    "per node": ((1, None, None), 2, 1, 2, ev.PER_NODE_REACHED),
    "per namespace": ((None, 3, None), 1, 2, 6, ev.PER_NAMESPACE_REACHED),
    "total": ((None, None, 4), 2, 2, 4, ev.TOTAL_REACHED),
}


@pytest.mark.parametrize(
    ("limits", "nodes", "namespaces", "admitted", "result"), LIMIT_CASES.values(), ids=LIMIT_CASES
)
def test_cycle_limits_refuse_and_say_which(
    limits: Limits, nodes: int, namespaces: int, admitted: int, result: str
) -> None:
    pods = spread(8, nodes=nodes, namespaces=namespaces)
    per_node, per_namespace, total = limits
    subject = evictor(
        [*pods, *partners(pods)],
        args=margs(maxMigratingPerNode=0),
        max_per_node=per_node,
        max_per_namespace=per_namespace,
        max_total=total,
    )
    ledger = subject.ledger
    assert sum(subject.evict(p, plugin="T", reason="r") for p in pods) == admitted
    assert [r.result for r in ledger.refused] == [result] * (8 - admitted)
    assert {r.plugin for r in ledger.refused} == {"T"}


@settings(max_examples=80, deadline=None)
@given(
    per_node=st.none() | st.integers(0, 4),
    per_namespace=st.none() | st.integers(0, 4),
    total=st.none() | st.integers(0, 8),
    migrating_per_node=st.integers(0, 3),
    active=st.lists(st.integers(0, 2), max_size=4),
    choices=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=30),
    direct=st.booleans(),
    dry_run=st.booleans(),
)
def test_no_cycle_exceeds_any_limit(
    per_node: int | None,
    per_namespace: int | None,
    total: int | None,
    migrating_per_node: int,
    active: list[int],
    choices: list[tuple[int, int]],
    direct: bool,
    dry_run: bool,
) -> None:
    pods = [
        make_pod(
            f"p{i}",
            node=f"node-{'abc'[n]}",
            namespace=f"ns{s}",
            owner=replicaset(f"rs{i}"),
            ready=True,
        )
        for i, (n, s) in enumerate(choices)
    ]
    # Active jobs: of other pods on the chosen nodes, and of the first pod (if any).
    migrations = [moving(f"m{i}", node=f"node-{'abc'[n]}") for i, n in enumerate(active)]
    if pods:
        migrations.append(moving("p0", node=pods[0].spec.node_name, namespace="ns0"))
    subject = evictor(
        [*pods, *partners(pods)],
        args=margs(
            maxMigratingPerNode=migrating_per_node,
            defaultJobMode="EvictDirectly" if direct else "ReservationFirst",
        ),
        migrations=migrations,
        max_per_node=per_node,
        max_per_namespace=per_namespace,
        max_total=total,
        dry_run=dry_run,
    )
    for pod in pods:
        subject.evict(pod, plugin="T", reason="r")
    intents = subject.intents
    by_node = Counter(i.node for i in intents)
    by_namespace = Counter(i.pod.metadata.namespace for i in intents)
    if per_node is not None:
        assert all(count <= per_node for count in by_node.values())
    if per_namespace is not None:
        assert all(count <= per_namespace for count in by_namespace.values())
    if total is not None:
        assert len(intents) <= total
    if direct and migrating_per_node:
        busy = Counter(m.node for m in migrations)
        for node, count in by_node.items():
            assert count <= max(0, migrating_per_node - busy[node])
    keys = [(i.pod.metadata.namespace, i.pod.metadata.name) for i in intents]
    assert len(set(keys)) == len(keys)
    assert ("ns0", "p0") not in keys
    assert all(i.dry_run is dry_run for i in intents)


def test_the_evict_qps_bucket_refuses_direct_evictions_until_it_refills() -> None:
    bucket = TokenBucket(rate=1.0, burst=2)
    args = margs(defaultJobMode="EvictDirectly", maxMigratingPerNode=0)
    pods = spread(6)
    everyone = [*pods, *partners(pods)]
    first = evictor(everyone, args=args, bucket=bucket)
    assert [first.evict(p, plugin="T", reason="r") for p in pods[:3]] == [True, True, False]
    ledger = CycleLedger(now=T0 + timedelta(seconds=1), workload_pods=first.ledger.workload_pods)
    later = evictor(everyone, args=args, bucket=bucket, ledger=ledger)
    assert [later.evict(p, plugin="T", reason="r") for p in pods[2:4]] == [True, False]


def test_the_bucket_does_not_apply_to_reservation_first_or_dry_run() -> None:
    bucket = TokenBucket(rate=1.0, burst=1)
    pods = spread(4)
    everyone = [*pods, *partners(pods)]
    subject = evictor(everyone, args=margs(maxMigratingPerNode=0), bucket=bucket)
    assert all(subject.evict(p, plugin="T", reason="r") for p in pods[:2])
    direct = margs(defaultJobMode="EvictDirectly", maxMigratingPerNode=0)
    proposals = evictor(everyone, args=direct, bucket=bucket, dry_run=True)
    assert all(proposals.evict(p, plugin="T", reason="r") for p in pods)
    assert bucket.tokens == 1.0


def test_the_workload_object_limiter_lets_one_pod_of_a_workload_go_per_window() -> None:
    pods = [web(), *siblings(9)]
    limiters = {"workload": {"duration": "5m"}}
    subject = evictor(pods, args=margs(objectLimiters=limiters, maxMigratingPerNode=0))
    # A workload of 10 pods may have 2 migrating; the limiter starts with one token (burst 1).
    assert subject.evict(pods[0], plugin="T", reason="r")
    assert not subject.evict(pods[1], plugin="T", reason="r")


@pytest.mark.parametrize(
    ("fields", "scheduler", "mode"),
    [
        ({}, "koord-scheduler", "ReservationFirst"),
        ({}, "default-scheduler", "EvictDirectly"),
        ({}, "", "EvictDirectly"),
        ({"schedulerNames": ["default-scheduler"]}, "", "ReservationFirst"),
        ({"defaultJobMode": "EvictDirectly"}, "koord-scheduler", "EvictDirectly"),
    ],
)
def test_eviction_mode(fields: dict[str, Any], scheduler: str, mode: str) -> None:
    assert ev.eviction_mode(web(scheduler=scheduler), margs(**fields)) == mode


@pytest.mark.parametrize(
    ("fields", "direct"),
    [
        pytest.param({}, {"n2", "n3"}, id="pods of other schedulers, by name or by default"),
        pytest.param({"schedulerNames": ["koord-scheduler", "default-scheduler"]}, set(), id="all"),
        pytest.param({"defaultJobMode": "EvictDirectly"}, {"n1", "n2", "n3"}, id="every node"),
    ],
)
def test_direct_nodes_are_those_with_a_pod_evicted_directly(
    fields: dict[str, Any], direct: set[str]
) -> None:
    by_scheduler = {"koord-scheduler": {"n1", "n2"}, "default-scheduler": {"n2"}, "": {"n3"}}
    args = margs(**fields)
    assert ev.direct_nodes(args, by_scheduler) == direct
    for scheduler, nodes in by_scheduler.items():
        if ev.eviction_mode(web(scheduler=scheduler), args) == "EvictDirectly":
            assert nodes <= ev.direct_nodes(args, by_scheduler)


def test_dry_run_records_proposals_and_cordons_can_be_taken_back() -> None:
    pod = web()
    subject = evictor([pod, *siblings()], dry_run=True)
    assert subject.evict(pod, plugin="LowNodeLoad", reason="hot")
    (intent,) = subject.intents
    assert (intent.pod, intent.node, intent.plugin, intent.reason, intent.dry_run) == (
        pod,
        "node-a",
        "LowNodeLoad",
        "hot",
        True,
    )
    subject.cordon("node-a", plugin="CustomPriority")
    subject.cordon("node-b", plugin="CustomPriority")
    assert list(subject.cordoned) == ["node-a", "node-b"]
    subject.uncordon("node-a")
    assert list(subject.cordoned) == ["node-b"]


def test_a_profile_without_filter_plugins_only_applies_limits() -> None:
    pod = web(**BARE, **CRITICAL)
    subject = evictor([pod], filters=False, max_per_node=1)
    assert subject.filter(pod)
    assert subject.evict(pod, plugin="T", reason="r")
    assert not subject.filter(pod)  # admitted once: not again


def test_label_selector_args_are_checked() -> None:
    with pytest.raises(DecodeError, match="labelSelector"):
        margs(labelSelector=msgspec.to_builtins(LabelSelector(match_labels={"a/b/c": "x"})))


def test_the_evict_annotation_does_not_migrate_a_pod_twice() -> None:
    pod = web(annotations=BYPASS)
    subject = evictor([pod, *siblings()], migrations=[moving("web-rs-0", node="node-a")])
    assert subject.refusal(pod) == "pod is already migrating"


def test_can_evict_from_says_when_a_node_or_the_cycle_is_full() -> None:
    p0, p1, p2, p3 = spread(4, nodes=2, namespaces=1)  # node-a, node-b, node-a, node-b
    subject = evictor(
        [p0, p1, p2, p3, *partners([p0, p1, p2, p3])],
        args=margs(maxMigratingPerNode=0),
        max_per_node=1,
        max_total=2,
    )
    assert subject.can_evict_from("node-a")
    assert subject.evict(p0, plugin="T", reason="r")
    assert not subject.can_evict_from("node-a")
    assert not subject.evict(p2, plugin="T", reason="r")
    assert subject.can_evict_from("node-b")
    assert subject.evict(p1, plugin="T", reason="r")
    # The total of 2 is reached: no node has room left.
    assert not subject.can_evict_from("node-b")
    assert not subject.can_evict_from("node-c")
    assert not subject.evict(p3, plugin="T", reason="r")


def test_evict_checks_the_filter_again_after_an_admission_since_it_was_asked() -> None:
    # Both pods pass the filter while nothing is admitted; once the first is evicted directly
    # (migrating at once), the node's limit of 1 refuses the second, filtered before that.
    pods = spread(2, nodes=1)
    subject = evictor(
        [*pods, *partners(pods)],
        args=margs(defaultJobMode="EvictDirectly", maxMigratingPerNode=1),
    )
    assert subject.filter(pods[0])
    assert subject.filter(pods[1])
    assert subject.evict(pods[0], plugin="T", reason="r")
    assert not subject.evict(pods[1], plugin="T", reason="r")
    assert "1 pods of node node-a are migrating" in subject.refusal(pods[1])


def test_not_ready_pods_are_carried_while_the_workload_pod_list_is_the_same() -> None:
    ready = siblings(3)
    first = CycleLedger(now=T0, workload_pods={"w": ready})
    assert first.not_ready("w") == frozenset()
    carried = first.not_ready_asked()
    # the same list in the next cycle: the same answer, not worked out again
    same = CycleLedger(now=T0, workload_pods={"w": ready}, not_ready_before=carried)
    assert same.not_ready("w") is carried["w"][1]
    # web-rs-2 lost its Ready condition: a new pod object in a new list
    changed = [*ready[:1], *siblings(3, ready=False)[1:2], *ready[2:]]
    later = CycleLedger(now=T0, workload_pods={"w": changed}, not_ready_before=carried)
    assert later.not_ready("w") == {("default", "web-rs-2")}
    assert later.not_ready_asked()["w"][0] is changed
