"""``koordpy controller run --kubeconfig`` on a cluster as a Koordinator user has it.

A cluster of this module's own (so that the examples' names, nodes and configuration are
alone there) with Koordinator's v1.8.0 CRDs and the training operator's PyTorchJob CRD
installed; kwok plays the kubelets and kube-controller-manager runs the Deployment, ReplicaSet
and Job controllers. Two GPU nodes are made as koordpy's agents report them (a ``reserved``
NVIDIA H100 node and an ``on-demand`` Ascend 910B3 node, with their Device objects), the
controller is started as a user starts it, and ``examples/`` is applied with the real kubectl.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apis import codec
from apis import constants as k
from hack.kube import Cluster, start_cluster, stop_cluster
from hack.kube.demo import make_nodes
from tests.kube.koordpy_process import (
    ControllerProcess,
    create,
    eventually,
    get,
    holder,
    migrated,
    place_on_demand,
    pods,
    when,
)

pytestmark = pytest.mark.kube


NAMESPACES = ("koordinator-system", "koord-queue", "team-a", "team-b")


@pytest.fixture(scope="module")
def world(
    kube_binaries: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    shared_dir: Path,
    repo_root: Path,
) -> Iterator[tuple[Cluster, str]]:
    """(the cluster, what ``kubectl apply -f examples/`` printed), the controller running."""
    directory = tmp_path_factory.mktemp("kube-controller")
    cluster = start_cluster(directory, kwok=True, timeout=90.0)
    controller: ControllerProcess | None = None
    try:
        crds = [
            shared_dir / "koordinator-crds" / "v1.8.0",
            repo_root / "tests" / "data" / "kube" / "pytorchjob-crd.yaml",
        ]
        files = [arg for crd in crds for arg in ("-f", str(crd))]
        cluster.kubectl("apply", "--server-side", *files, timeout=120.0)
        names = cluster.kubectl("get", *files, "-o", "name").stdout.split()
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        for namespace in NAMESPACES:
            cluster.kubectl("create", "namespace", namespace)
        make_nodes(cluster)
        controller = ControllerProcess(cluster.kubeconfig, directory, cwd=repo_root)
        eventually("koordpy to take the koord-scheduler Lease", lambda: holder(cluster))
        applied = cluster.kubectl("apply", "-f", str(repo_root / "examples"))
        yield cluster, applied.stdout
    finally:
        if controller is not None:
            controller.stop()
            sys.stderr.write(controller.log()[-4000:])
        stop_cluster(directory)


def test_the_examples_apply_with_kubectl(world: tuple[Cluster, str], repo_root: Path) -> None:
    cluster, printed = world
    lines = printed.splitlines()
    expected = 0
    for path in sorted((repo_root / "examples").glob("*.yaml")):
        expected += sum(1 for doc in codec.load_yaml_documents(path.read_text()) if doc)
    assert len(lines) == expected, printed
    assert all(line.endswith(" created") for line in lines), printed
    # what was applied is what koordpy reads: the PyTorchJob got its QueueUnit
    eventually(
        "the PyTorchJob's QueueUnit",
        lambda: (
            cluster.request(
                "GET",
                "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/queueunits/resnet50-ddp-py-qu",
            )[0]
            == 200
        ),
    )
    # nothing of the examples is refused by koordpy's checks (made once read, as the unit)
    refused = [e for e in get(cluster, "/api/v1/events")["items"] if e["reason"] == "InvalidObject"]
    assert refused == []


def test_every_node_gets_its_nodeslo_from_the_slo_controller_config(
    world: tuple[Cluster, str],
) -> None:
    """koord-manager's nodeslo duty: the example's thresholds, per node strategy."""
    cluster, _ = world

    def threshold(node: str) -> dict[str, Any] | None:
        status, slo = cluster.request("GET", f"/apis/slo.koordinator.sh/v1alpha1/nodeslos/{node}")
        if status != 200:
            return None
        found: dict[str, Any] = slo["spec"].get("resourceUsedThresholdWithBE", {})
        return found or None

    reserved = eventually("the reserved node's NodeSLO", lambda: threshold("demo-nvidia-h100"))
    on_demand = eventually("the on-demand node's NodeSLO", lambda: threshold("demo-ascend-910b3"))
    # the cluster strategy (65 %), and the example's node strategy for reserved nodes (55 %)
    assert (reserved["enable"], reserved["cpuSuppressPolicy"]) == (True, "cpuset")
    assert {reserved["cpuSuppressThresholdPercent"], on_demand["cpuSuppressThresholdPercent"]} == {
        55,
        65,
    }
    assert reserved["cpuSuppressThresholdPercent"] == 55
    assert holder(cluster, "koordinator-manager")


def test_pods_naming_koord_scheduler_are_bound_gpu_pods_with_their_devices(
    world: tuple[Cluster, str],
) -> None:
    cluster, _ = world
    eventually(
        "the example's pod-with-hint to be bound",
        lambda: pods(cluster, "default")["pod-with-hint"]["spec"].get("nodeName"),
    )
    gpu = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda-1gpu"},
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    create(cluster, "/api/v1/namespaces/default/pods", gpu)
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "for-kube-scheduler"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    create(cluster, "/api/v1/namespaces/default/pods", plain)

    def bound() -> dict[str, Any] | None:
        pod = pods(cluster, "default")["cuda-1gpu"]
        return pod if pod["spec"].get("nodeName") else None

    pod = eventually("the GPU pod to be bound", bound)
    assert pod["spec"]["nodeName"] == "demo-nvidia-h100"
    allocated = json.loads(pod["metadata"]["annotations"][k.ANNOTATION_DEVICE_ALLOCATED])
    [gpu_allocation] = allocated["gpu"]
    assert gpu_allocation["resources"]["koordinator.sh/gpu-core"] == "100"
    device = get(cluster, "/apis/scheduling.koordinator.sh/v1alpha1/devices/demo-nvidia-h100")
    minors = {d["minor"] for d in device["spec"]["devices"]}
    assert gpu_allocation["minor"] in minors
    eventually(
        "the bound GPU pod to run (kwok)",
        lambda: pods(cluster, "default")["cuda-1gpu"]["status"].get("phase") == "Running",
    )
    # a pod for another scheduler is not koordpy's to bind
    assert not pods(cluster, "default")["for-kube-scheduler"]["spec"].get("nodeName")

    # a pod no node can take is told why, as kube-scheduler tells it: PodScheduled=False and
    # a FailedScheduling Event
    too_big = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "too-big"},
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "500"}}}
            ],
        },
    }
    create(cluster, "/api/v1/namespaces/default/pods", too_big)

    def explained() -> dict[str, Any] | None:
        conditions = pods(cluster, "default")["too-big"]["status"].get("conditions", [])
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)

    condition = eventually("the unschedulable pod's PodScheduled condition", explained)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "nodes are available" in condition["message"]
    events = get(cluster, "/api/v1/namespaces/default/events")["items"]
    assert any(
        e["involvedObject"]["name"] == "too-big" and e["reason"] == "FailedScheduling"
        for e in events
    )


def test_the_reservation_becomes_available_and_its_owners_allocate_from_it(
    world: tuple[Cluster, str],
) -> None:
    cluster, _ = world
    path = "/apis/scheduling.koordinator.sh/v1alpha1/reservations/reservation-demo-big"
    reservation = eventually(
        "reservation-demo-big to be Available",
        when(cluster, path, lambda r: r.get("status", {}).get("phase") == "Available"),
    )
    assert reservation["status"]["nodeName"] == "demo-nvidia-h100"
    uid = reservation["metadata"]["uid"]

    def owners() -> list[dict[str, Any]] | None:
        found = [
            p
            for name, p in pods(cluster, "default").items()
            if name.startswith("app-demo-") and p["spec"].get("nodeName")
        ]
        return found if len(found) == 2 else None

    for pod in eventually("both app-demo pods bound", owners):
        allocated = json.loads(pod["metadata"]["annotations"][k.ANNOTATION_RESERVATION_ALLOCATED])
        assert allocated == {"name": "reservation-demo-big", "uid": uid}
        assert pod["spec"]["nodeName"] == "demo-nvidia-h100"
    status = eventually(
        "the reservation to list its two owners",
        when(cluster, path, lambda r: len(r["status"].get("currentOwners", [])) == 2),
    )["status"]
    assert status["allocated"]["cpu"] == "4"


def test_a_queued_job_is_admitted_against_its_quota_and_its_pods_are_bound(
    world: tuple[Cluster, str],
) -> None:
    cluster, _ = world
    unit_path = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/queueunits/preprocess-shards"
    unit = eventually(
        "the Job's QueueUnit to be admitted",
        when(
            cluster,
            unit_path,
            lambda u: u.get("status", {}).get("phase") in ("Dequeued", "Running"),
        ),
    )
    assert unit["spec"]["consumerRef"]["name"] == "preprocess-shards"
    [admission] = unit["status"]["admissions"]
    assert admission["replicas"] == 4
    job = get(cluster, "/apis/batch/v1/namespaces/team-a/jobs/preprocess-shards")
    assert job["spec"]["suspend"] is False

    def job_pods() -> list[dict[str, Any]] | None:
        found = [
            p
            for p in pods(cluster, "team-a").values()
            if p["metadata"].get("labels", {}).get("job-name") == "preprocess-shards"
            and p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
        ]
        return found if len(found) == 4 else None

    for pod in eventually("the Job controller's four pods to be bound", job_pods):
        [owner] = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Job", "preprocess-shards")
    quota = eventually(
        "team-a's quota to count the job",
        when(
            cluster,
            "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team-a/elasticquotas/team-a",
            lambda q: q.get("status", {}).get("used", {}).get("cpu") not in (None, "0"),
        ),
    )
    # the job's 4 x 2 CPUs, beside what the admitted PyTorchJob holds
    assert int(quota["status"]["used"]["cpu"]) >= 8


def test_the_descheduler_migrates_a_deployments_pod_into_a_reservation(
    world: tuple[Cluster, str],
) -> None:
    """The example's CustomPriority profile drains ``on-demand`` nodes: a Deployment's pod
    there is moved through a PodMigrationJob, and the ReplicaSet's replacement lands in the
    migration's reservation on the ``reserved`` node."""
    cluster, _ = world
    place_on_demand(cluster, "team-b")
    job = eventually("the web pod's PodMigrationJob to succeed", migrated(cluster, "team-b"), 90)
    reservation = job["spec"]["reservationOptions"]["reservationRef"]["name"]

    def replacement() -> dict[str, Any] | None:
        for pod in pods(cluster, "team-b").values():
            annotation = (
                pod["metadata"].get("annotations", {}).get(k.ANNOTATION_RESERVATION_ALLOCATED)
            )
            if annotation and json.loads(annotation)["name"] == reservation:
                return pod
        return None

    pod = eventually("the ReplicaSet's replacement in the reservation", replacement)
    assert pod["metadata"]["name"] != job["spec"]["podRef"]["name"]
    [owner] = pod["metadata"]["ownerReferences"]
    assert owner["kind"] == "ReplicaSet"
    assert pod["spec"]["nodeName"] == "demo-nvidia-h100"
    evicted = pods(cluster, "team-b").get(job["spec"]["podRef"]["name"])
    assert evicted is None or evicted["metadata"].get("deletionTimestamp")
