"""Workloads in standalone mode, end to end: every control loop, as ``koordpy up`` and
``koordpy simulate`` run them, over Deployments, StatefulSets and DaemonSets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
import yaml

from apis.apps import DaemonSet, Deployment, ReplicaSet, StatefulSet
from apis.codec import to_builtins
from apis.core import Pod
from apis.kinds import default_registry
from controller.cli import printing
from controller.queueing.loop import STATUS_INTERVAL
from tests.controller.workloads.cluster import Cluster
from tests.manuals.replay import node, replay
from tests.manuals.test_load_aware_scheduling import NGINX_WITH_LOADAWARE
from tests.manuals.test_pod_migration_job import POD_DEMO
from tests.manuals.test_resource_reservation import APP_DEMO

WEB = """
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: nginx
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: registry.k8s.io/nginx-slim:0.24
        resources:
          requests:
            cpu: "{cpu}"
"""

AGENT = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-agent
  namespace: kube-system
spec:
  selector:
    matchLabels:
      app: node-agent
  template:
    metadata:
      labels:
        app: node-agent
    spec:
      containers:
      - name: agent
        image: busybox:1.36
        resources:
          requests:
            cpu: 100m
"""


def tainted(name: str, key: str, value: str, effect: str) -> str:
    doc = yaml.safe_load(node(name))
    doc["spec"] = {"taints": [{"key": key, "value": value, "effect": effect}]}
    return yaml.safe_dump(doc)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    c.apply(node("node-0"), node("node-1"))
    yield c
    c.close()


def owned(pods: list[Pod], owner_uid: str) -> list[Pod]:
    return [p for p in pods if any(r.uid == owner_uid for r in p.metadata.owner_references)]


def running_ready(pod: Pod) -> bool:
    ready = {c.type: c.status for c in pod.status.conditions}.get("Ready")
    return pod.status.phase == "Running" and ready == "True"


# --- Deployment / ReplicaSet -----------------------------------------------------------------


def test_app_demo_runs_two_ready_pods_owned_by_its_replica_set() -> None:
    """resource-reservation: the Deployment ``app-demo`` is accepted and its two pods run."""
    out = replay(node("node-0", cpu="8"), node("node-1", cpu="8"), APP_DEMO)
    deploy = out.get("Deployment", "app-demo", "default")
    assert isinstance(deploy, Deployment)
    [rs] = out.all("ReplicaSet")
    assert isinstance(rs, ReplicaSet)
    digest = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"app-demo-{digest}"
    assert re.fullmatch(r"[bcdfghjklmnpqrstvwxz2456789]{10}", digest)
    [ref] = rs.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller) == (
        "Deployment",
        "app-demo",
        deploy.metadata.uid,
        True,
    )
    assert rs.spec.selector is not None
    assert rs.spec.selector.match_labels == {"app": "app-demo", "pod-template-hash": digest}
    pods = [p for p in out.all("Pod") if isinstance(p, Pod)]
    assert len(pods) == 2
    for pod in pods:
        assert re.fullmatch(rf"{rs.metadata.name}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", pod.name)
        assert pod.metadata.labels == {"app": "app-demo", "pod-template-hash": digest}
        [pod_ref] = pod.metadata.owner_references
        assert (pod_ref.kind, pod_ref.uid, pod_ref.controller, pod_ref.block_owner_deletion) == (
            "ReplicaSet",
            rs.metadata.uid,
            True,
            True,
        )
        assert running_ready(pod)
        assert pod.spec.node_name in ("node-0", "node-1")
    status = deploy.status
    assert (status.replicas, status.ready_replicas, status.available_replicas) == (2, 2, 2)
    assert (status.updated_replicas, status.observed_generation) == (2, deploy.metadata.generation)
    assert {c.type: c.status for c in status.conditions} == {
        "Available": "True",
        "Progressing": "True",
    }
    assert rs.status.replicas == 2
    assert rs.status.ready_replicas == 2


def test_app_demo_prints_as_kubectl_shows_it() -> None:
    """resource-reservation: ``kubectl get pod -l app=app-demo`` shows both pods 1/1 Running."""
    out = replay(node("node-0", cpu="8"), node("node-1", cpu="8"), APP_DEMO)
    kinds = {o.kind: o for o in out.result.objects}
    reg = default_registry()
    now = out.result.started + timedelta(minutes=2)
    pods = out.all("Pod")
    rows = [printing.row(reg.resolve("pods"), p, now=now) for p in pods]
    assert [r[1:4] for r in rows] == [["1/1", "Running", "0"]] * 2
    deploy_row = printing.row(reg.resolve("deploy"), kinds["Deployment"], now=now)
    assert printing.headers(reg.resolve("deploy")) == [
        "NAME",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "AGE",
    ]
    assert deploy_row == ["app-demo", "2/2", "2", "2", "2m"]
    rs = kinds["ReplicaSet"]
    assert printing.row(reg.resolve("rs"), rs, now=now) == [rs.name, "2", "2", "2", "2m"]


def test_a_deleted_pod_is_replaced(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    before = {p.name for p in cluster.pods()}
    victim = sorted(before)[0]
    cluster.delete("pods", victim)
    cluster.settle()
    after = {p.name for p in cluster.pods()}
    assert len(after) == 2
    assert victim not in after
    assert len(after - before) == 1
    assert all(running_ready(p) for p in cluster.pods())


def test_an_evicted_pod_that_failed_is_replaced(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    victim = cluster.pods()[0]
    cluster.fail(victim)
    cluster.settle()
    pods = cluster.pods()
    live = [p for p in pods if p.status.phase == "Running"]
    assert len(live) == 2
    assert victim.name not in {p.name for p in live}
    failed = cluster.get("pods", victim.name)
    assert isinstance(failed, Pod)
    assert failed.status.phase == "Failed"
    rs = cluster.all("rs")[0]
    assert isinstance(rs, ReplicaSet)
    assert rs.status.replicas == 2


def test_scaling_up_and_down(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    cluster.apply(APP_DEMO.replace("replicas: 2", "replicas: 5"))
    cluster.settle()
    assert sum(running_ready(p) for p in cluster.pods()) == 5
    cluster.apply(APP_DEMO.replace("replicas: 2", "replicas: 1"))
    cluster.settle()
    assert len(cluster.pods()) == 1
    deploy = cluster.get("deploy", "app-demo")
    assert isinstance(deploy, Deployment)
    assert (deploy.status.replicas, deploy.status.available_replicas) == (1, 1)
    cluster.apply(APP_DEMO.replace("replicas: 2", "replicas: 0"))
    cluster.settle()
    assert cluster.pods() == []
    assert len(cluster.all("rs")) == 1


def test_scale_down_removes_pending_pods_before_running_ones() -> None:
    """Three pods fit on the nodes, five are wanted; scaling to 3 keeps the running three."""
    c = Cluster()
    try:
        c.apply(node("node-0", cpu="4"), node("node-1", cpu="2"))
        c.apply(APP_DEMO.replace("replicas: 2", "replicas: 5"))
        c.settle()
        running = {p.name for p in c.pods() if p.status.phase == "Running"}
        assert len(running) == 3
        assert len(c.pods()) == 5
        c.apply(APP_DEMO.replace("replicas: 2", "replicas: 3"))
        c.settle()
        assert {p.name for p in c.pods()} == running
    finally:
        c.close()


def test_a_template_change_rolls_out(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    [old] = cluster.all("rs")
    old_pods = {p.name for p in cluster.pods()}
    cluster.apply(APP_DEMO.replace("image: polinux/stress", "image: polinux/stress:1.0.4"))
    cluster.settle()
    sets = {rs.name: rs for rs in cluster.all("rs") if isinstance(rs, ReplicaSet)}
    assert len(sets) == 2
    [new_name] = set(sets) - {old.name}
    new = sets[new_name]
    assert new.spec.replicas == 2
    assert sets[old.name].spec.replicas == 0
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    pods = cluster.pods()
    assert len(pods) == 2
    assert not old_pods & {p.name for p in pods}
    assert all(p.spec.containers[0].image == "polinux/stress:1.0.4" for p in pods)
    assert all(p.name.startswith(f"{new_name}-") and running_ready(p) for p in pods)
    deploy = cluster.get("deploy", "app-demo")
    assert isinstance(deploy, Deployment)
    assert (deploy.status.updated_replicas, deploy.status.available_replicas) == (2, 2)


def test_rolling_back_reuses_the_old_replica_set(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    [first] = cluster.all("rs")
    cluster.apply(APP_DEMO.replace("image: polinux/stress", "image: polinux/stress:1.0.4"))
    cluster.settle()
    cluster.apply(APP_DEMO)
    cluster.settle()
    sets = {rs.name: rs for rs in cluster.all("rs") if isinstance(rs, ReplicaSet)}
    assert len(sets) == 2
    back = sets[first.name]
    assert back.spec.replicas == 2
    assert back.metadata.annotations["deployment.kubernetes.io/revision"] == "3"
    assert {p.spec.containers[0].image for p in cluster.pods()} == {"polinux/stress"}


def test_a_rolling_update_keeps_pods_available_step_by_step() -> None:
    """maxSurge 1 / maxUnavailable 0: never fewer than 4 available nor more than 5 pods."""
    c = Cluster()
    try:
        c.apply(node("node-0"), node("node-1"))
        spec = APP_DEMO.replace("replicas: 2", "replicas: 4").replace(
            "  selector:",
            "  strategy:\n    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}\n  selector:",
        )
        c.apply(spec)
        c.settle()
        c.apply(spec.replace("image: polinux/stress", "image: polinux/stress:1.0.4"))
        for _ in range(100):
            live = [p for p in c.pods() if p.metadata.deletion_timestamp is None]
            assert len(live) <= 5
            assert sum(running_ready(p) for p in live) >= 4
            if not c.step():
                break
        images = {p.spec.containers[0].image for p in c.pods()}
        assert images == {"polinux/stress:1.0.4"}
        assert len(c.pods()) == 4
    finally:
        c.close()


def test_recreate_removes_every_old_pod_before_a_new_one_starts() -> None:
    c = Cluster()
    try:
        c.apply(node("node-0"), node("node-1"))
        spec = APP_DEMO.replace("  selector:", "  strategy:\n    type: Recreate\n  selector:")
        c.apply(spec)
        c.settle()
        c.apply(spec.replace("image: polinux/stress", "image: polinux/stress:1.0.4"))
        for _ in range(100):
            images = {p.spec.containers[0].image for p in c.pods()}
            assert len(images) <= 1  # old and new pods never side by side
            if not c.step():
                break
        assert {p.spec.containers[0].image for p in c.pods()} == {"polinux/stress:1.0.4"}
        assert len(c.pods()) == 2
    finally:
        c.close()


def test_deleting_a_deployment_deletes_its_replica_sets_and_pods(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    cluster.delete("deploy", "app-demo")
    cluster.settle()
    assert cluster.all("rs") == []
    assert cluster.pods() == []


ORPHAN = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  ownerReferences:
  - {{apiVersion: {api}, kind: {kind}, name: gone, uid: "0000-gone"}}
spec:
  containers: [{{name: c, image: busybox}}]
"""


def test_the_collector_deletes_only_what_gone_workloads_owned(cluster: Cluster) -> None:
    cluster.apply(
        ORPHAN.format(name="of-a-job", api="batch/v1", kind="Job"),
        ORPHAN.format(name="of-a-replica-set", api="apps/v1", kind="ReplicaSet"),
    )
    cluster.settle()
    assert [p.name for p in cluster.pods()] == ["of-a-job"]


# --- StatefulSet -----------------------------------------------------------------------------


def test_a_stateful_set_starts_its_pods_in_order(cluster: Cluster) -> None:
    cluster.apply(WEB.replace("{cpu}", "100m"))
    seen: list[list[str]] = []
    for _ in range(100):
        seen.append(sorted(p.name for p in cluster.pods()))
        for pod in cluster.pods():
            ordinal = int(pod.name.rsplit("-", 1)[1])
            lower = [cluster.get("pods", f"web-{i}") for i in range(ordinal)]
            assert all(isinstance(p, Pod) and running_ready(p) for p in lower), pod.name
        if not cluster.step():
            break
    assert seen[-1] == ["web-0", "web-1", "web-2"]
    assert ["web-0"] in seen
    assert ["web-0", "web-1"] in seen
    for pod in cluster.pods():
        assert pod.metadata.labels["statefulset.kubernetes.io/pod-name"] == pod.name
        assert pod.metadata.labels["apps.kubernetes.io/pod-index"] == pod.name[-1]
        assert (pod.spec.hostname, pod.spec.subdomain) == (pod.name, "nginx")
    sts = cluster.get("sts", "web")
    assert isinstance(sts, StatefulSet)
    assert (sts.status.replicas, sts.status.ready_replicas) == (3, 3)
    assert sts.status.current_revision == sts.status.update_revision != ""


def test_ordered_ready_waits_for_a_pod_that_cannot_run() -> None:
    """web-0 does not fit anywhere: web-1 and web-2 are never created (OrderedReady)."""
    out = replay(node("node-0", cpu="1"), WEB.replace("{cpu}", "2"))
    assert [p.name for p in out.all("Pod")] == ["web-0"]
    parallel = WEB.replace("{cpu}", "2").replace(
        "  serviceName: nginx", "  serviceName: nginx\n  podManagementPolicy: Parallel"
    )
    out = replay(node("node-0", cpu="1"), parallel)
    assert [p.name for p in out.all("Pod")] == ["web-0", "web-1", "web-2"]


def test_a_stateful_set_pod_comes_back_under_its_name(cluster: Cluster) -> None:
    cluster.apply(WEB.replace("{cpu}", "100m"))
    cluster.settle()
    before = cluster.get("pods", "web-1")
    cluster.delete("pods", "web-1")
    cluster.settle()
    after = cluster.get("pods", "web-1")
    assert isinstance(after, Pod)
    assert running_ready(after)
    assert after.metadata.uid != before.metadata.uid


def test_a_stateful_set_scales_down_from_the_highest_ordinal(cluster: Cluster) -> None:
    cluster.apply(WEB.replace("{cpu}", "100m").replace("replicas: 3", "replicas: 4"))
    cluster.settle()
    cluster.apply(WEB.replace("{cpu}", "100m").replace("replicas: 3", "replicas: 2"))
    seen: list[list[str]] = []
    for _ in range(50):
        seen.append(sorted(p.name for p in cluster.pods()))
        if not cluster.step():
            break
    assert ["web-0", "web-1", "web-2"] in seen  # web-3 went first, alone
    assert seen[-1] == ["web-0", "web-1"]


def test_a_stateful_set_template_change_replaces_pods_from_the_top(cluster: Cluster) -> None:
    cluster.apply(WEB.replace("{cpu}", "100m"))
    cluster.settle()
    cluster.apply(WEB.replace("{cpu}", "200m"))
    order: list[str] = []
    uids = {p.name: p.metadata.uid for p in cluster.pods()}
    for _ in range(100):
        for pod in cluster.pods():
            if uids.get(pod.name) != pod.metadata.uid:
                uids[pod.name] = pod.metadata.uid
                order.append(pod.name)
        if not cluster.step():
            break
    assert order == ["web-2", "web-1", "web-0"]
    sts = cluster.get("sts", "web")
    assert isinstance(sts, StatefulSet)
    assert sts.status.updated_replicas == 3
    assert sts.status.current_revision == sts.status.update_revision


# --- DaemonSet -------------------------------------------------------------------------------


def test_a_daemon_set_skips_a_tainted_node() -> None:
    out = replay(
        node("node-0"),
        node("node-1"),
        tainted("node-2", "dedicated", "gpu", "NoSchedule"),
        AGENT,
    )
    pods = [p for p in out.all("Pod") if isinstance(p, Pod)]
    assert sorted(p.spec.node_name for p in pods) == ["node-0", "node-1"]
    for pod in pods:
        assert pod.name.startswith("node-agent-")
        assert running_ready(pod)
        assert pod.spec.affinity is not None
        assert pod.spec.affinity.node_affinity is not None
        required = (
            pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        )
        assert required is not None
        [term] = required.node_selector_terms
        [field] = term.match_fields
        assert (field.key, field.operator, field.values) == (
            "metadata.name",
            "In",
            (pod.spec.node_name,),
        )
        keys = {(t.key, t.effect) for t in pod.spec.tolerations}
        assert ("node.kubernetes.io/not-ready", "NoExecute") in keys
        assert ("node.kubernetes.io/unschedulable", "NoSchedule") in keys
    ds = out.get("DaemonSet", "node-agent", "kube-system")
    assert isinstance(ds, DaemonSet)
    status = ds.status
    assert (status.desired_number_scheduled, status.current_number_scheduled) == (2, 2)
    assert (status.number_ready, status.number_available, status.number_misscheduled) == (2, 2, 0)


def test_a_daemon_set_that_tolerates_the_taint_runs_there_too() -> None:
    tolerating = AGENT.replace(
        "      containers:",
        "      tolerations:\n      - {key: dedicated, operator: Exists, effect: NoSchedule}\n"
        "      containers:",
    )
    out = replay(node("node-0"), tainted("node-2", "dedicated", "gpu", "NoSchedule"), tolerating)
    assert sorted(p.spec.node_name for p in out.all("Pod") if isinstance(p, Pod)) == [
        "node-0",
        "node-2",
    ]


def test_a_daemon_set_follows_node_selector_and_new_nodes(cluster: Cluster) -> None:
    selecting = AGENT.replace(
        "      containers:", "      nodeSelector:\n        pool: edge\n      containers:"
    )
    cluster.apply(selecting)
    cluster.settle()
    assert cluster.pods("kube-system") == []
    cluster.apply(node("node-edge", labels={"pool": "edge"}))
    cluster.settle()
    [pod] = cluster.pods("kube-system")
    assert pod.spec.node_name == "node-edge"
    assert running_ready(pod)
    # The node loses the label: its daemon pod goes.
    cluster.apply(node("node-edge"))
    cluster.settle()
    assert cluster.pods("kube-system") == []


def test_deleting_a_daemon_set_deletes_its_pods(cluster: Cluster) -> None:
    cluster.apply(AGENT)
    cluster.settle()
    assert len(cluster.pods("kube-system")) == 2
    cluster.delete("ds", "node-agent", "kube-system")
    cluster.settle()
    assert cluster.pods("kube-system") == []


def test_min_ready_seconds_delays_availability(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO.replace("  selector:", "  minReadySeconds: 30\n  selector:"))
    cluster.settle()
    deploy = cluster.get("deploy", "app-demo")
    assert isinstance(deploy, Deployment)
    assert (deploy.status.ready_replicas, deploy.status.available_replicas) == (2, 0)
    cluster.advance(30)
    deploy = cluster.get("deploy", "app-demo")
    assert isinstance(deploy, Deployment)
    assert deploy.status.available_replicas == 2


def test_simulate_ends_when_workloads_are_settled() -> None:
    """Nothing keeps asking to run: the simulation stops once the quotas' status is written
    (the queueing loop writes it at most every ``STATUS_INTERVAL``)."""
    out = replay(node("node-0"), APP_DEMO, WEB.replace("{cpu}", "100m"), AGENT)
    assert out.result.ended <= out.result.started + timedelta(seconds=STATUS_INTERVAL)
    assert out.result.passes < 50


# --- the manuals' workloads in the other controllers' flows ----------------------------------


MIGRATION = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: PodMigrationJob
metadata:
  name: migrationjob-demo
spec:
  paused: false
  ttl: 5m
  mode: ReservationFirst
  podRef:
    namespace: default
    name: {pod}
status:
  phase: Pending
"""


def test_a_migrated_deployment_pod_is_replaced_into_the_reservation(cluster: Cluster) -> None:
    """pod-migration-job: the Deployment's pod is migrated; its ReplicaSet makes the new pod,
    which lands in the migration's Reservation on the other node."""
    cluster.apply(POD_DEMO)
    cluster.settle()
    [old] = cluster.pods()
    cluster.apply(MIGRATION.format(pod=old.name))
    for _ in range(6):
        cluster.advance(5)
    [new] = cluster.pods()
    assert new.name != old.name
    assert new.name.rsplit("-", 1)[0] == old.name.rsplit("-", 1)[0]  # the same ReplicaSet
    assert new.spec.node_name not in ("", old.spec.node_name)
    assert running_ready(new)
    assert "scheduling.koordinator.sh/reservation-allocated" in new.metadata.annotations
    [job] = cluster.all("pmj", "")
    status = to_builtins(job)["status"]
    assert status["podRef"]["name"] == new.name
    assert status["nodeName"] == new.spec.node_name


def test_the_load_aware_manuals_deployment_runs_six_pods() -> None:
    """load-aware-scheduling: three 4-core nodes; the six nginx pods all run."""
    nodes = [node(f"node-{i}", cpu="4", memory="16Gi") for i in range(3)]
    out = replay(*nodes, NGINX_WITH_LOADAWARE)
    pods = [p for p in out.all("Pod") if isinstance(p, Pod)]
    assert len(pods) == 6
    assert all(p.name.startswith("nginx-with-loadaware-") for p in pods)
    assert all(running_ready(p) for p in pods)
    deploy = out.get("Deployment", "nginx-with-loadaware")
    assert isinstance(deploy, Deployment)
    assert deploy.status.available_replicas == 6
