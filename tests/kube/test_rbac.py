"""``deploy/rbac/controller.yaml`` grants the controller exactly what it uses.

A cluster of this module's own, its API server auditing every request
(``start_cluster(audit=True)``), with Koordinator's v1.8.0 CRDs, the training operator's
PyTorchJob CRD and koordpy's CRDs of the other job kinds (TFJob, MPIJob, RayJob,
SparkApplication, Workflow: their operators' stand-ins, so that every kind koordpy reads is
served), and Kueue's v1beta2 AdmissionCheck served beside Koordinator's v1beta1 (koordpy reads
v1beta2). The manifest is applied, and ``koordpy controller run`` is started as its service
account, with a token ``kubectl create token`` minted. Then the cluster is driven until every
loop has done each of its writes: ``examples/`` applied (pods bound, a GPU pod with its device,
an unschedulable pod explained, the reservation example Available and its Deployment's pods in
it, the PyTorchJob queued, the batch Job queued and admitted, a pod migrated by the descheduler
through a PodMigrationJob into a reservation), then what the examples do not reach: a
preemption, a PodMigrationJob timing out (its reservation deleted), a PodGroup's first status,
a queue of a deleted ElasticQuota deleted, a job of every kind queued, and a queued job's
deletion deleting its QueueUnit. The controller is stopped (releasing its Leases) and the audit
log read back.

The tests then hold the manifest against what the service account asked for: nothing was
refused (a verb missing from the manifest would be a 403), every request is one a rule grants,
and every rule was used but those of :data:`UNEXERCISED`, each of which names the code path
that needs it and why this run cannot take it (so an extra verb fails too).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from apis import constants as k
from apis.admission import AdmissionCheck
from apis.core import TFJob
from apis.kinds import default_registry
from apis.workloads import MPIJob, RayJob, SparkApplication, Workflow
from controller.kube.crds import custom_resource_definition
from hack.kube import Cluster, start_cluster, stop_cluster
from hack.kube.demo import make_node, make_nodes
from tests.kube.koordpy_process import (
    ControllerProcess,
    account_kubeconfig,
    create,
    eventually,
    get,
    holder,
    migrated,
    place_on_demand,
    pods,
    ready,
    when,
)

pytestmark = pytest.mark.kube

NAMESPACE: Final = "koordinator-system"
ACCOUNT: Final = "koordpy-controller"
#: The user the API server sees for the account's token.
USER: Final = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
#: This module's own namespaces, beside the examples'.
SCRATCH: Final = "rbac"
SCRATCH_QUOTA: Final = "rbac-quota"
NAMESPACES: Final = (
    "koordinator-system",
    "koord-queue",
    "team-a",
    "team-b",
    SCRATCH,
    SCRATCH_QUOTA,
)
#: A small node of this module's own, for the preemption and the PodMigrationJob that times out.
SMALL_NODE: Final = "rbac-small"

#: (API group, resource[/subresource], verb) of one request or one grant.
Triple = tuple[str, str, str]

_APPLY_FALLBACK: Final = (
    "KubeStore._apply (controller/store/kubernetes.py): a create answered AlreadyExists, the "
    "informer cache behind the server, reads the object before patching it; a race this run "
    "cannot make happen on purpose"
)
#: Rules of the manifest this run cannot make the controller use: the code path needing each.
UNEXERCISED: Final[Mapping[Triple, str]] = {
    ("scheduling.x-k8s.io", "queues", "get"): f"queueing's Queue apply: {_APPLY_FALLBACK}",
    ("scheduling.x-k8s.io", "queueunits", "get"): f"jobs' QueueUnit apply: {_APPLY_FALLBACK}",
    ("scheduling.koordinator.sh", "podmigrationjobs", "get"): (
        f"descheduler's PodMigrationJob apply: {_APPLY_FALLBACK}"
    ),
    ("scheduling.koordinator.sh", "podmigrationjobs", "delete"): (
        "migration's scavenger (controller/descheduler/migration.py, SCAVENGE_AFTER_TTL) "
        "deletes a PodMigrationJob 5 minutes past its TTL, whatever its phase: longer than "
        "this run"
    ),
}


# --- the manifest -------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """One (group, resource, verb) of a rule; ``namespace`` None for the ClusterRole's."""

    group: str
    resource: str
    verb: str
    namespace: str | None
    names: frozenset[str]

    @property
    def triple(self) -> Triple:
        return (self.group, self.resource, self.verb)

    def allows(self, request: Request) -> bool:
        return (
            request.triple == self.triple
            and (self.namespace is None or request.namespace == self.namespace)
            and (not self.names or request.name in self.names)
        )


def manifest(repo_root: Path) -> list[dict[str, Any]]:
    text = (repo_root / "deploy" / "rbac" / "controller.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def grants(docs: Iterable[Mapping[str, Any]]) -> list[Grant]:
    """Every (group, resource, verb) the manifest's ClusterRole and Role grant."""
    found: list[Grant] = []
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        namespace = doc["metadata"]["namespace"] if doc["kind"] == "Role" else None
        for rule in doc["rules"]:
            assert "nonResourceURLs" not in rule, "discovery is system:discovery's to grant"
            names = frozenset(rule.get("resourceNames", ()))
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), f"a wildcard in {rule}"
                        found.append(Grant(group, resource, verb, namespace, names))
    return found


# --- the audit log ------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One resource request of the service account, as the audit log has it."""

    group: str
    resource: str
    verb: str
    namespace: str
    name: str
    code: int
    uri: str

    @property
    def triple(self) -> Triple:
        return (self.group, self.resource, self.verb)


@dataclass(frozen=True)
class Audited:
    """What the run left: the account's requests, its other requests (discovery), the
    controller's log, and the manifest's grants."""

    requests: list[Request]
    non_resource: list[dict[str, Any]]
    refused: list[Mapping[str, Any]]
    log: str
    grants: list[Grant]


def account_events(cluster: Cluster) -> list[dict[str, Any]]:
    """The account's audit events, each request once (its ResponseComplete)."""
    return [
        event
        for event in cluster.audit_events()
        if event.get("user", {}).get("username") == USER
        and event.get("stage") == "ResponseComplete"
    ]


def requests_of(events: Iterable[Mapping[str, Any]]) -> list[Request]:
    found = []
    for event in events:
        ref = event.get("objectRef")
        if ref is None:
            continue
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        found.append(
            Request(
                group=ref.get("apiGroup", ""),
                resource=resource,
                verb=event["verb"],
                namespace=ref.get("namespace", ""),
                name=ref.get("name", ""),
                code=int(event.get("responseStatus", {}).get("code", 0)),
                uri=event.get("requestURI", ""),
            )
        )
    return found


def refusals(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The events of requests the API server refused (403: RBAC said no)."""
    return [
        e
        for e in events
        if e.get("responseStatus", {}).get("code") == 403
        or e.get("annotations", {}).get("authorization.k8s.io/decision") == "forbid"
    ]


def described(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """``verb group resource[/subresource]`` of each event, once each, sorted."""
    return sorted(
        {
            f"{r.verb} {r.group or 'core'} {r.resource}"
            + (f" in {r.namespace}" if r.namespace else "")
            for r in requests_of(events)
        }
    )


def made(cluster: Cluster, triple: Triple, name: str = "") -> bool:
    """Whether the account has made a request of ``triple`` (on ``name``, when given)."""
    return any(
        r.triple == triple and (not name or r.name == name)
        for r in requests_of(account_events(cluster))
    )


# --- the cluster ----------------------------------------------------------------------------


def install_crds(cluster: Cluster, shared_dir: Path, repo_root: Path) -> None:
    files = [
        shared_dir / "koordinator-crds" / "v1.8.0",
        repo_root / "tests" / "data" / "kube" / "pytorchjob-crd.yaml",
    ]
    args = [arg for path in files for arg in ("-f", str(path))]
    cluster.kubectl("apply", "--server-side", *args, timeout=120.0)
    registry = default_registry()
    ours = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            custom_resource_definition(registry.for_type(kind))
            for kind in (TFJob, MPIJob, RayJob, SparkApplication, Workflow, AdmissionCheck)
        ],
    }
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(ours)
    )
    names = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, timeout=90.0)


def pod(name: str, resources: Mapping[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod for koord-scheduler: one container with ``resources``, then ``spec``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "koord-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": dict(resources)}],
            **spec,
        },
    }


def small_pod(name: str, cpu: str, **spec: Any) -> dict[str, Any]:
    """A pod of the scratch namespace that only the small node may take."""
    pinned = {"nodeSelector": {k.LABEL_HOSTNAME: SMALL_NODE}}
    return pod(name, {"requests": {"cpu": cpu}}, **pinned, **spec)


def worker(image: str = "busybox") -> dict[str, Any]:
    """A pod template of one container asking for one CPU."""
    return {
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": "1"}}}],
        }
    }


def queued_jobs() -> list[tuple[str, dict[str, Any]]]:
    """A suspended job of each kind whose CRD koordpy stands in for: (API path, object)."""
    held = {"annotations": {k.ANNOTATION_QUEUE_SUSPEND: "true"}}
    kubeflow = {"replicas": 1, "template": worker()}
    return [
        (
            f"/apis/kubeflow.org/v1/namespaces/{SCRATCH}/tfjobs",
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": "queued-tf", **held},
                "spec": {"runPolicy": {"suspend": True}, "tfReplicaSpecs": {"Worker": kubeflow}},
            },
        ),
        (
            f"/apis/kubeflow.org/v2beta1/namespaces/{SCRATCH}/mpijobs",
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "metadata": {"name": "queued-mpi", **held},
                "spec": {
                    "runPolicy": {"suspend": True},
                    "mpiReplicaSpecs": {"Launcher": kubeflow, "Worker": kubeflow},
                },
            },
        ),
        (
            f"/apis/ray.io/v1/namespaces/{SCRATCH}/rayjobs",
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "metadata": {"name": "queued-ray", **held},
                "spec": {
                    "suspend": True,
                    "entrypoint": "python main.py",
                    "rayClusterSpec": {
                        "headGroupSpec": {"template": worker()},
                        "workerGroupSpecs": [
                            {"groupName": "workers", "replicas": 1, "template": worker()}
                        ],
                    },
                },
            },
        ),
        (
            f"/apis/sparkoperator.k8s.io/v1beta2/namespaces/{SCRATCH}/sparkapplications",
            {
                "apiVersion": "sparkoperator.k8s.io/v1beta2",
                "kind": "SparkApplication",
                "metadata": {"name": "queued-spark", **held},
                "spec": {
                    "type": "Scala",
                    "mode": "cluster",
                    "image": "spark",
                    "mainApplicationFile": "local:///opt/spark/examples.jar",
                    "driver": {"cores": 1, "memory": "512m"},
                    "executor": {"instances": 1, "cores": 1, "memory": "512m"},
                },
            },
        ),
        (
            f"/apis/argoproj.io/v1alpha1/namespaces/{SCRATCH}/workflows",
            {
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Workflow",
                "metadata": {"name": "queued-wf", **held},
                "spec": {
                    "entrypoint": "main",
                    "templates": [{"name": "main", "container": {"image": "busybox"}}],
                },
            },
        ),
    ]


# --- driving every loop ---------------------------------------------------------------------


def drive_examples(cluster: Cluster, repo_root: Path) -> None:
    """What tests/kube/test_controller.py sees happen, made to happen here."""
    cluster.kubectl("apply", "-f", str(repo_root / "examples"))
    eventually(
        "the example's pod-with-hint to be bound",
        lambda: pods(cluster, "default")["pod-with-hint"]["spec"].get("nodeName"),
    )
    gpu = pod("cuda-1gpu", {"limits": {"nvidia.com/gpu": "1"}})
    create(cluster, "/api/v1/namespaces/default/pods", gpu)
    eventually(
        "the GPU pod bound with its device",
        lambda: (
            k.ANNOTATION_DEVICE_ALLOCATED
            in pods(cluster, "default")["cuda-1gpu"]["metadata"].get("annotations", {})
        ),
    )
    too_big = pod("too-big", {"requests": {"cpu": "500"}})
    create(cluster, "/api/v1/namespaces/default/pods", too_big)
    eventually(
        "the unschedulable pod's PodScheduled=False",
        lambda: any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in pods(cluster, "default")["too-big"]["status"].get("conditions", [])
        ),
    )

    reservation = "/apis/scheduling.koordinator.sh/v1alpha1/reservations/reservation-demo-big"
    eventually(
        "the example reservation to list its two owners",
        when(cluster, reservation, lambda r: len(r["status"].get("currentOwners", [])) == 2),
    )
    unit = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/team-a/queueunits/preprocess-shards"
    eventually(
        "the batch Job's QueueUnit to be admitted",
        when(cluster, unit, lambda u: u.get("status", {}).get("phase") in ("Dequeued", "Running")),
    )
    eventually(
        "team-a's quota to count what was admitted",
        when(
            cluster,
            "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team-a/elasticquotas/team-a",
            lambda q: q.get("status", {}).get("used", {}).get("cpu") not in (None, "0"),
        ),
    )
    drive_migration(cluster)
    drive_nodeslos(cluster)


NODESLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"


def _suppress(cluster: Cluster, node: str) -> int | None:
    status, slo = cluster.request("GET", f"{NODESLOS}/{node}")
    if status != 200:
        return None
    threshold = slo["spec"].get("resourceUsedThresholdWithBE", {})
    value = threshold.get("cpuSuppressThresholdPercent")
    return int(value) if value is not None else None


def drive_nodeslos(cluster: Cluster) -> None:
    """koord-manager's nodeslo duty: a node's NodeSLO made from the example's
    slo-controller-config, rewritten when the ConfigMap changes, deleted with its node; its
    nodemetric duty: the NodeMetric's spec rewritten with the ConfigMap's colocation-config."""
    eventually("the H100 node's NodeSLO", lambda: _suppress(cluster, "demo-nvidia-h100"))
    path = "/api/v1/namespaces/koordinator-system/configmaps/slo-controller-config"
    config = get(cluster, path)
    thresholds = json.loads(config["data"]["resource-threshold-config"])
    thresholds["clusterStrategy"]["cpuSuppressThresholdPercent"] = 61
    thresholds.pop("nodeStrategies", None)
    config["data"]["resource-threshold-config"] = json.dumps(thresholds)
    # and koord-manager's nodemetric duty: the NodeMetrics' collection policy rewritten.
    colocation = json.loads(config["data"]["colocation-config"])
    colocation["metricReportIntervalSeconds"] = 90
    config["data"]["colocation-config"] = json.dumps(colocation)
    status, body = cluster.request("PUT", path, config)
    assert status == 200, body
    eventually(
        "the NodeSLO rewritten from the changed ConfigMap",
        lambda: _suppress(cluster, "demo-nvidia-h100") == 61,
    )
    eventually(
        "the NodeMetric's spec rewritten from the changed ConfigMap",
        lambda: made(cluster, ("slo.koordinator.sh", "nodemetrics", "patch"), "demo-nvidia-h100"),
    )
    make_node(cluster, "short-lived", "nvidia-h100", "reserved")
    eventually("the new node's NodeSLO", lambda: _suppress(cluster, "short-lived"))
    status, body = cluster.request("DELETE", "/api/v1/nodes/short-lived")
    assert status == 200, body
    eventually(
        "the deleted node's NodeSLO gone",
        lambda: cluster.request("GET", f"{NODESLOS}/short-lived")[0] == 404,
    )


def drive_migration(cluster: Cluster) -> None:
    """The descheduler drains an on-demand node: a Deployment's pod migrates through a
    PodMigrationJob into a reservation on the reserved node (as test_controller.py)."""
    place_on_demand(cluster, "team-b")
    eventually("a web pod's PodMigrationJob to succeed", migrated(cluster, "team-b"), 90)


def drive_preemption(cluster: Cluster) -> str:
    """A high-priority pod preempts a low one on the small node; the preemptor's name."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": SMALL_NODE,
            "labels": {k.LABEL_HOSTNAME: SMALL_NODE, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
        },
    }
    create(cluster, "/api/v1/nodes", node)
    ready(cluster, SMALL_NODE)
    create(
        cluster,
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "rbac-high"},
            "value": 1_000_000,
        },
    )
    path = f"/api/v1/namespaces/{SCRATCH}/pods"
    create(cluster, path, small_pod("victim", "3"))
    eventually(
        "the victim to be bound", lambda: pods(cluster, SCRATCH)["victim"]["spec"].get("nodeName")
    )
    create(cluster, path, small_pod("preemptor", "3", priorityClassName="rbac-high"))
    eventually(
        "the preemptor to be bound in the victim's place",
        lambda: (
            "victim" not in pods(cluster, SCRATCH)
            and pods(cluster, SCRATCH)["preemptor"]["spec"].get("nodeName")
        ),
    )
    return "preemptor"


def drive_failed_migration(cluster: Cluster, name: str) -> None:
    """A PodMigrationJob whose reservation cannot be placed (the pod is pinned to its own
    node, the reservation kept off it) times out: Failed, its reservation deleted."""
    jobs = "/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs"
    create(
        cluster,
        jobs,
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "PodMigrationJob",
            "metadata": {"name": "rbac-stuck"},
            "spec": {
                "podRef": {"namespace": SCRATCH, "name": name},
                "mode": "ReservationFirst",
                "ttl": "5s",
            },
        },
    )
    failed = eventually(
        "the PodMigrationJob to time out",
        when(cluster, f"{jobs}/rbac-stuck", lambda j: j.get("status", {}).get("phase") == "Failed"),
    )
    reservation = failed["spec"].get("reservationOptions", {}).get("reservationRef", {})
    assert reservation.get("name"), failed
    eventually(
        "the failed migration's reservation to be deleted",
        lambda: made(
            cluster, ("scheduling.koordinator.sh", "reservations", "delete"), reservation["name"]
        ),
    )


def drive_queueing(cluster: Cluster) -> None:
    """A PodGroup's first status; a queued job of every kind; a deleted job's QueueUnit
    deleted; the Queue of a deleted ElasticQuota deleted."""
    groups = f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{SCRATCH}/podgroups"
    create(
        cluster,
        groups,
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "gang"},
            "spec": {"minMember": 2},
        },
    )
    eventually(
        "the PodGroup's first status",
        when(cluster, f"{groups}/gang", lambda g: bool(g.get("status", {}).get("phase"))),
    )

    for path, job in queued_jobs():
        create(cluster, path, job)
    for path, job in queued_jobs():
        eventually(
            f"{job['kind']} to be marked enqueued",
            when(
                cluster,
                f"{path}/{job['metadata']['name']}",
                lambda j: (
                    j["metadata"].get("annotations", {}).get(k.ANNOTATION_JOB_HAS_ENQUEUED)
                    == "true"
                ),
            ),
        )
    units = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{SCRATCH}/queueunits"
    # The garbage collector would delete the unit of a deleted job too: a finalizer keeps it
    # there, so that the jobs loop's own delete is seen whoever comes first.
    hold = {"metadata": {"finalizers": ["rbac.koordpy.test/hold"]}}
    status, answer = cluster.request(
        "PATCH", f"{units}/queued-tf-tf-qu", hold, content_type="application/merge-patch+json"
    )
    assert status == 200, answer
    status, answer = cluster.request(
        "DELETE", f"/apis/kubeflow.org/v1/namespaces/{SCRATCH}/tfjobs/queued-tf"
    )
    assert status == 200, answer
    eventually(
        "the deleted TFJob's QueueUnit to be deleted",
        lambda: made(cluster, ("scheduling.x-k8s.io", "queueunits", "delete"), "queued-tf-tf-qu"),
    )
    release = {"metadata": {"finalizers": None}}
    cluster.request(
        "PATCH", f"{units}/queued-tf-tf-qu", release, content_type="application/merge-patch+json"
    )

    quotas = f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{SCRATCH_QUOTA}/elasticquotas"
    create(
        cluster,
        quotas,
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "scratch"},
            "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}},
        },
    )
    queue = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/koord-queue/queues/scratch"
    eventually("the quota's Queue", lambda: cluster.request("GET", queue)[0] == 200)
    status, answer = cluster.request("DELETE", f"{quotas}/scratch")
    assert status == 200, answer
    eventually("the deleted quota's Queue to go", lambda: cluster.request("GET", queue)[0] == 404)


@pytest.fixture(scope="module")
def audited(
    kube_binaries: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    shared_dir: Path,
    repo_root: Path,
) -> Iterator[Audited]:
    directory = tmp_path_factory.mktemp("kube-rbac")
    cluster = start_cluster(directory, kwok=True, audit=True, timeout=90.0)
    controller: ControllerProcess | None = None
    try:
        install_crds(cluster, shared_dir, repo_root)
        for namespace in NAMESPACES:
            cluster.kubectl("create", "namespace", namespace)
        docs = manifest(repo_root)
        cluster.kubectl("apply", "-f", str(repo_root / "deploy" / "rbac" / "controller.yaml"))
        kubeconfig = account_kubeconfig(
            cluster, directory / "koordpy-controller.kubeconfig", ACCOUNT, NAMESPACE
        )
        make_nodes(cluster)
        controller = ControllerProcess(kubeconfig, directory, cwd=repo_root)
        for lease in ("koord-scheduler", "koord-descheduler"):
            eventually(
                f"koordpy to take the {lease} Lease", functools.partial(holder, cluster, lease)
            )
        try:
            drive_examples(cluster, repo_root)
            drive_failed_migration(cluster, drive_preemption(cluster))
            drive_queueing(cluster)
            # A repeated FailedScheduling of the unschedulable pod moves its Event on (a PUT).
            eventually(
                "an Event to be written again", lambda: made(cluster, ("", "events", "update"))
            )
        except pytest.fail.Exception as stuck:
            # A loop that was refused a write never gets there: say which.
            refused = described(refusals(account_events(cluster)))
            if refused:
                pytest.fail(f"{stuck}; the API server refused {USER}: {refused}")
            raise
        controller.stop()  # releasing the Leases: update
        log = controller.log()
        controller = None
        time.sleep(1.0)  # the ends of the watches it closed are logged as the server sees them
        events = account_events(cluster)
        yield Audited(
            requests=requests_of(events),
            non_resource=[e for e in events if "objectRef" not in e],
            refused=refusals(events),
            log=log,
            grants=grants(docs),
        )
    finally:
        if controller is not None:
            controller.stop()
            sys.stderr.write(controller.log()[-4000:])
        stop_cluster(directory)


def test_nothing_the_controller_asked_for_was_refused(audited: Audited) -> None:
    assert audited.requests, "no request of the service account in the audit log"
    refused = described(audited.refused)
    assert not refused, f"refused to {USER}: {refused}"
    lines = [line for line in audited.log.splitlines() if "forbidden" in line.lower()]
    assert not lines, "\n".join(lines[:10])


def test_every_request_is_granted_by_a_rule_of_the_manifest(audited: Audited) -> None:
    ungranted = sorted(
        {
            (r.triple, r.namespace or "(cluster)")
            for r in audited.requests
            if not any(g.allows(r) for g in audited.grants)
        }
    )
    assert not ungranted, f"requests no rule of deploy/rbac/controller.yaml grants: {ungranted}"
    # Discovery only, outside the rules: system:discovery grants it to every user.
    for event in audited.non_resource:
        uri = event["requestURI"].partition("?")[0]
        assert event["verb"] == "get", event
        assert uri in ("/api", "/apis") or uri.startswith(("/api/", "/apis/")), uri
        assert event["responseStatus"]["code"] in (200, 404), event


def test_every_rule_of_the_manifest_is_used(audited: Audited) -> None:
    ours = {g.triple for g in audited.grants}
    stale = sorted(set(UNEXERCISED) - ours)
    assert not stale, f"UNEXERCISED names rules the manifest does not have: {stale}"
    unused = sorted(
        g.triple
        for g in audited.grants
        if g.triple not in UNEXERCISED and not any(g.allows(r) for r in audited.requests)
    )
    assert not unused, f"rules of deploy/rbac/controller.yaml the controller never used: {unused}"


def test_the_manifest_binds_both_roles_to_the_service_account(repo_root: Path) -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in manifest(repo_root)}
    account = docs[("ServiceAccount", ACCOUNT)]
    assert account["metadata"]["namespace"] == NAMESPACE
    assert docs[("Role", ACCOUNT)]["metadata"]["namespace"] == NAMESPACE
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        doc = docs[(binding, ACCOUNT)]
        assert doc["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role,
            "name": ACCOUNT,
        }
        assert doc["subjects"] == [
            {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
        ]
