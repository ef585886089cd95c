"""Kubernetes mode when things go wrong: the API server restarts, the leader is SIGKILLed, pods
and nodes vanish mid-flight, Devices change under an allocation.

A cluster of this module's own (kwok kubelets, kube-controller-manager) with Koordinator's
v1.8.0 CRDs; koordpy's controllers run as processes, as a user runs them, with short Leases
(4 s) so that a takeover is quick. Every scenario works in a namespace and on nodes of its own
and ends with the state asserted, not just the absence of a crash.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from apis import constants as k
from hack.kube import Cluster, start_cluster, stop_cluster
from tests.kube.koordpy_process import (
    ControllerProcess,
    create,
    eventually,
    get,
    holder,
    pods,
    ready_node,
    when,
)

pytestmark = pytest.mark.kube

#: What a second bind of a pod already bound is answered with: never seen if nothing is bound
#: twice.
BOUND_TWICE = "is already assigned to node"


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: dict[str, str], tmp_path_factory: pytest.TempPathFactory, shared_dir: Path
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kube-failures")
    started = start_cluster(directory, kwok=True, timeout=90.0)
    try:
        folder = shared_dir / "koordinator-crds" / "v1.8.0"
        started.kubectl("apply", "--server-side", "-f", str(folder), timeout=120.0)
        names = started.kubectl("get", "-f", str(folder), "-o", "name").stdout.split()
        started.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        started.kubectl("create", "namespace", "koordinator-system")
        yield started
    finally:
        stop_cluster(directory)


@pytest.fixture
def scene(cluster: Cluster) -> Iterator[str]:
    """A namespace of the test's own (its nodes are named after it)."""
    name = f"f-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def controllers() -> Iterator[list[ControllerProcess]]:
    """The controllers a test starts (:func:`launch`): each stopped after it, its log shown
    on failure."""
    started: list[ControllerProcess] = []
    yield started
    for controller in started:
        controller.stop()
        sys.stderr.write(f"--- {controller.name}\n{controller.log()[-3000:]}\n")


def launch(
    started: list[ControllerProcess], cluster: Cluster, tmp_path: Path, repo: Path, identity: str
) -> ControllerProcess:
    """A controller named ``identity`` in the Leases, with Leases of 4 s, as koord-scheduler
    and koord-descheduler only: no agent reports on these nodes, and koord-manager's duties
    would make each a NodeMetric that none ever reports (whose nodes the scheduler's LoadAware
    then takes into account), which the scenarios here do not set out to try (the manager
    duties have tests/kube/test_manager_duties.py and test_helm_stack.py)."""
    config = (
        "[kubernetes]\n"
        f'identity = "{identity}"\n'
        "lease_duration = 4.0\n"
        "renew_deadline = 3.0\n"
        "retry_period = 0.5\n"
        "manager_duties = false\n"
    )
    controller = ControllerProcess(
        cluster.kubeconfig, tmp_path, name=identity, config=config, cwd=repo
    )
    started.append(controller)
    return controller


def pod(name: str, node_selector: dict[str, str], cpu: str = "1", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **extra.pop("metadata", {})},
        "spec": {
            "schedulerName": "koord-scheduler",
            "nodeSelector": node_selector,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": cpu}, **extra.pop("resources", {})},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def all_bound(cluster: Cluster, namespace: str, count: int) -> dict[str, str] | None:
    placed = {
        name: p["spec"].get("nodeName", "")
        for name, p in pods(cluster, namespace).items()
        if not p["metadata"].get("deletionTimestamp")
    }
    return placed if len(placed) == count and all(placed.values()) else None


def restart_api_server(cluster: Cluster) -> datetime:
    """Stop kube-apiserver and start it again with the same command line (its etcd keeps
    every object); returns once it is ready, with the time it was."""
    pid_file = cluster.dir / "kube-apiserver.pid"
    pid = int(pid_file.read_text())
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    os.kill(pid, signal.SIGTERM)
    try:
        os.waitpid(pid, 0)  # the session's own child
    except ChildProcessError:
        eventually("kube-apiserver to stop", lambda: not Path(f"/proc/{pid}").exists())
    log_path = cluster.dir / "kube-apiserver.log"
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    new = os.posix_spawn(
        argv[0],
        argv,
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log_path), flags, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
    )
    pid_file.write_text(f"{new}\n")  # so that stop_cluster stops this one

    def serving() -> bool:
        try:
            return cluster.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    eventually("kube-apiserver to serve again", serving)
    return datetime.now(UTC)


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _reachable(cluster: Cluster, name: str) -> bool:
    node = get(cluster, f"/api/v1/nodes/{name}")
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
    )
    taints = node["spec"].get("taints") or []
    return ready and not any(t["key"] == "node.kubernetes.io/unreachable" for t in taints)


@pytest.mark.timeout(240)
def test_an_api_server_restart_loses_nothing_and_binds_nothing_twice(
    cluster: Cluster,
    scene: str,
    controllers: list[ControllerProcess],
    tmp_path: Path,
    repo_root: Path,
) -> None:
    node = f"{scene}-n1"
    ready_node(cluster, node, "nvidia-h100", "reserved")
    controller = launch(controllers, cluster, tmp_path, repo_root, "only")
    eventually("the controller to lead", lambda: holder(cluster) == "only")
    selector = {k.LABEL_HOSTNAME: node}
    for i in range(10):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"before-{i}", selector))
    eventually("the first ten pods bound", lambda: all_bound(cluster, scene, 10))
    restarted = restart_api_server(cluster)
    # While the server was down kwok could not renew the node's Lease: once it is older than
    # its 40 s the node lifecycle controller takes the node for unreachable (NotReady, and
    # tainted) until kwok renews it. That is the cluster's doing, not koordpy's: go on once the
    # node is renewed and Ready again.
    eventually(
        "kwok to renew the node's Lease",
        when(
            cluster,
            f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}",
            lambda lease: _stamp(lease["spec"]["renewTime"]) > restarted,
        ),
    )
    eventually("the node Ready and untainted again", lambda: _reachable(cluster, node))
    for i in range(10):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"after-{i}", selector))
    placed = eventually("all twenty pods bound", lambda: all_bound(cluster, scene, 20))
    assert set(placed.values()) == {node}
    assert controller.running(), "the controller survives the restart"
    assert BOUND_TWICE not in controller.log()
    # the reflectors resumed: a change after the restart is seen (a pod deleted is forgotten,
    # so its CPU is free again for a pod that needs the whole node but it)
    allocatable = int(get(cluster, f"/api/v1/nodes/{node}")["status"]["allocatable"]["cpu"])
    cluster.kubectl("delete", "pod", "-n", scene, "after-9", "--wait=true")
    create(
        cluster,
        f"/api/v1/namespaces/{scene}/pods",
        pod("big", selector, cpu=str(allocatable - 19)),
    )
    eventually("the pod needing the freed CPU bound", lambda: all_bound(cluster, scene, 20))


def test_a_standby_takes_over_from_a_killed_leader_without_double_charging_a_quota(
    cluster: Cluster,
    scene: str,
    controllers: list[ControllerProcess],
    tmp_path: Path,
    repo_root: Path,
) -> None:
    node = f"{scene}-n1"
    ready_node(cluster, node, "nvidia-h100", "reserved")
    quota = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": scene, "namespace": scene},
        "spec": {"min": {"cpu": "8", "memory": "32Gi"}, "max": {"cpu": "16", "memory": "64Gi"}},
    }
    create(
        cluster, f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{scene}/elasticquotas", quota
    )
    first = launch(controllers, cluster, tmp_path, repo_root, "first")
    eventually("the first to lead", lambda: holder(cluster) == "first")
    second = launch(controllers, cluster, tmp_path, repo_root, "second")
    selector = {k.LABEL_HOSTNAME: node}
    labels = {"metadata": {"labels": {k.LABEL_QUOTA_NAME: scene}}}
    for i in range(3):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"a-{i}", selector, **labels))
    eventually("the first three pods bound", lambda: all_bound(cluster, scene, 3))
    assert holder(cluster) == "first"
    assert holder(cluster, "koord-descheduler") == "first"
    first.kill()
    killed_at = time.monotonic()
    eventually("the second to take over", lambda: holder(cluster) == "second", timeout=30.0)
    took = time.monotonic() - killed_at
    for i in range(3):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"b-{i}", selector, **labels))
    eventually("all six pods bound", lambda: all_bound(cluster, scene, 6))
    used = eventually(
        "the quota to count the six pods",
        when(
            cluster,
            f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{scene}/elasticquotas/{scene}",
            lambda q: q.get("status", {}).get("used", {}).get("cpu") == "6",
        ),
    )["status"]["used"]
    assert used["cpu"] == "6"  # rebuilt from the cluster: each pod charged once
    # within the lease duration (4 s) of the holder's last renewal, plus the retry period
    assert took < 4.0 + 0.5 + 2.0, took
    assert BOUND_TWICE not in second.log()
    assert holder(cluster, "koord-descheduler") == "second"


def test_pods_deleted_in_flight_and_a_deleted_node_leave_a_clean_state(
    cluster: Cluster,
    scene: str,
    controllers: list[ControllerProcess],
    tmp_path: Path,
    repo_root: Path,
) -> None:
    keep, doomed = f"{scene}-keep", f"{scene}-doomed"
    for name in (keep, doomed):
        ready_node(cluster, name, "nvidia-h100", "reserved")
    controller = launch(controllers, cluster, tmp_path, repo_root, "only")
    eventually("the controller to lead", lambda: holder(cluster) == "only")
    group = {"koordpy.io/test-scene": scene}
    cluster.kubectl("label", "node", keep, doomed, f"koordpy.io/test-scene={scene}")
    # pods deleted as soon as they are made: some while the scheduler has them in hand
    for i in range(20):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"gone-{i}", group))
        cluster.request("DELETE", f"/api/v1/namespaces/{scene}/pods/gone-{i}")
    # pods that can only go to the node about to be deleted
    only_doomed = {k.LABEL_HOSTNAME: doomed}
    for i in range(3):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"stranded-{i}", only_doomed))
    status, _ = cluster.request("DELETE", f"/api/v1/nodes/{doomed}")
    assert status == 200
    # after both: new pods of the group go to the node that is left, and nothing else moves
    for i in range(4):
        create(cluster, f"/api/v1/namespaces/{scene}/pods", pod(f"later-{i}", group))

    def settled() -> dict[str, str] | None:
        live = {
            name: p["spec"].get("nodeName", "")
            for name, p in pods(cluster, scene).items()
            if not p["metadata"].get("deletionTimestamp")
        }
        later = [live.get(f"later-{i}") for i in range(4)]
        return live if all(node == keep for node in later) else None

    live = eventually("the later pods on the node that is left", settled)
    assert not any(name.startswith("gone-") for name in live)
    for i in range(3):
        # bound to the node before it went (the pod GC's to clean up) or pending: never
        # bound to a node that is not there once it is gone
        node = live.get(f"stranded-{i}", "")
        assert node in ("", doomed)
    status, _ = cluster.request("GET", f"/api/v1/nodes/{doomed}")
    assert status == 404
    create(cluster, f"/api/v1/namespaces/{scene}/pods", pod("after-the-node", only_doomed))
    time.sleep(3)  # the scheduler's pass for it has long run: it stays pending
    assert not pods(cluster, scene)["after-the-node"]["spec"].get("nodeName")
    assert controller.running()
    assert BOUND_TWICE not in controller.log()


def test_a_device_changing_under_an_allocation_keeps_it_and_steers_new_ones(
    cluster: Cluster,
    scene: str,
    controllers: list[ControllerProcess],
    tmp_path: Path,
    repo_root: Path,
) -> None:
    node = f"{scene}-gpu"
    ready_node(cluster, node, "nvidia-h100", "reserved")
    launch(controllers, cluster, tmp_path, repo_root, "only")
    eventually("the controller to lead", lambda: holder(cluster) == "only")
    selector = {k.LABEL_HOSTNAME: node}
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}

    def allocated_minor(name: str) -> int | None:
        found = pods(cluster, scene).get(name)
        if found is None or not found["spec"].get("nodeName"):
            return None
        annotation = found["metadata"].get("annotations", {}).get(k.ANNOTATION_DEVICE_ALLOCATED)
        if annotation is None:
            return None
        [allocation] = json.loads(annotation)["gpu"]
        return int(allocation["minor"])

    create(cluster, f"/api/v1/namespaces/{scene}/pods", pod("first", selector, **gpu))
    first = eventually("the first GPU pod allocated", lambda: allocated_minor("first"))
    # every GPU but one other than the first's turns unhealthy
    device_path = f"/apis/scheduling.koordinator.sh/v1alpha1/devices/{node}"
    device = get(cluster, device_path)
    minors = sorted(d["minor"] for d in device["spec"]["devices"])
    spare = next(m for m in minors if m != first)
    for entry in device["spec"]["devices"]:
        entry["health"] = entry["minor"] in (first, spare)
    status, body = cluster.request("PUT", device_path, device)
    assert status == 200, body
    time.sleep(1)  # the Device's change reaches the controller's cache
    create(cluster, f"/api/v1/namespaces/{scene}/pods", pod("second", selector, **gpu))
    assert eventually("the second GPU pod allocated", lambda: allocated_minor("second")) == spare
    # no healthy GPU is free now: a third waits
    create(cluster, f"/api/v1/namespaces/{scene}/pods", pod("third", selector, **gpu))
    time.sleep(3)
    assert allocated_minor("third") is None
    # the allocations made stay as they are
    assert allocated_minor("first") == first
    assert allocated_minor("second") == spare
    # a GPU back to health is used for the waiting pod
    device = get(cluster, device_path)
    back = next(m for m in minors if m not in (first, spare))
    for entry in device["spec"]["devices"]:
        if entry["minor"] == back:
            entry["health"] = True
    status, body = cluster.request("PUT", device_path, device)
    assert status == 200, body
    assert eventually("the third GPU pod allocated", lambda: allocated_minor("third")) == back
