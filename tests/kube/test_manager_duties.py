"""koord-manager's nodemetric and noderesource duties of ``koordpy controller run`` on a real
API server, with Koordinator's v1.8.0 CRDs and kwok playing the kubelets.

A cluster of this module's own (its nodes are the only ones). A GPU node is made as the
kubelet reports it (cpu, memory, pods, no accelerator resources) with the Device koordpy's agent
reports for an H100 host; the test writes the NodeMetric's status as the agent does (the
``status`` subresource). With ``[kubernetes] manager_duties = false`` none of it happens.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from agent.daemon import device_of
from agent.devices.simulated import profile, simulate
from apis import codec
from apis import constants as k
from apis.duration import Duration
from apis.noderesources import MANAGER_DEVICE_RESOURCES, accelerator_resources
from apis.resources import ResourceList
from apis.scheduling import Device
from hack.kube import Cluster, start_cluster, stop_cluster
from tests.kube.koordpy_process import ControllerProcess, create, eventually, get, holder, ready

pytestmark = pytest.mark.kube

GIB = 1 << 30
NODES = "/api/v1/nodes"
METRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
DEVICES = "/apis/scheduling.koordinator.sh/v1alpha1/devices"
CONFIGMAP = "/api/v1/namespaces/koordinator-system/configmaps/slo-controller-config"
#: What the kubelet (kwok) reports: no accelerator and no Batch resources.
KUBELET = {"cpu": "96", "memory": "768Gi", "pods": "110"}
BATCH_MID = (
    k.RESOURCE_BATCH_CPU,
    k.RESOURCE_BATCH_MEMORY,
    k.RESOURCE_MID_CPU,
    k.RESOURCE_MID_MEMORY,
)


@pytest.fixture(scope="module")
def cluster(
    kube_binaries: dict[str, str], tmp_path_factory: pytest.TempPathFactory, shared_dir: Path
) -> Iterator[Cluster]:
    """A cluster with Koordinator's v1.8.0 CRDs and the namespace ``koordinator-system``."""
    directory = tmp_path_factory.mktemp("kube-manager")
    started = start_cluster(directory, kwok=True, timeout=90.0)
    try:
        folder = str(shared_dir / "koordinator-crds" / "v1.8.0")
        started.kubectl("apply", "--server-side", "-f", folder, timeout=120.0)
        names = started.kubectl("get", "-f", folder, "-o", "name").stdout.split()
        started.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
        started.kubectl("create", "namespace", "koordinator-system")
        yield started
    finally:
        stop_cluster(directory)


def bare_gpu_node(cluster: Cluster, name: str, **labels: str) -> Device:
    """A Node as the kubelet reports it and the H100 Device koordpy's agent reports for it;
    once Ready. The Device, as its agent made it."""
    node = create(
        cluster,
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {k.LABEL_HOSTNAME: name, "type": "kwok", **labels},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {"capacity": KUBELET, "allocatable": KUBELET},
        },
    )
    device = device_of(name, [simulate([profile("nvidia-h100")], name)])
    body = codec.to_builtins(device)
    for owner in body["metadata"].get("ownerReferences", []):
        owner["uid"] = node["metadata"]["uid"]
    create(cluster, DEVICES, body)
    ready(cluster, name)
    return device


def node_json(cluster: Cluster, name: str) -> dict[str, Any]:
    """The Node as ``kubectl get node -o json`` shows it."""
    shown: dict[str, Any] = json.loads(cluster.kubectl("get", "node", name, "-o", "json").stdout)
    return shown


def shown_when(
    cluster: Cluster, name: str, check: Callable[[dict[str, Any]], bool]
) -> Callable[[], dict[str, Any] | None]:
    """A probe: the Node as kubectl shows it, once ``check`` holds for it."""

    def probe() -> dict[str, Any] | None:
        node = node_json(cluster, name)
        return node if check(node) else None

    return probe


def amounts(resources: dict[str, str]) -> dict[str, int]:
    """Quantities in koordpy's units (millicores for cpu, bytes, counts)."""
    return dict(ResourceList.parse(resources))


def metric(cluster: Cluster, name: str) -> dict[str, Any] | None:
    status, body = cluster.request("GET", f"{METRICS}/{name}")
    return body if status == 200 else None


def report(cluster: Cluster, name: str, at: datetime) -> dict[str, Any]:
    """The agent's report: a node using 10 cores and 100 GiB, all of it system usage."""
    used = {"resources": {"cpu": "10", "memory": "100Gi"}}
    status = {
        "updateTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nodeMetric": {"nodeUsage": used, "systemUsage": used},
    }
    code, body = cluster.request(
        "PATCH",
        f"{METRICS}/{name}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
    assert code == 200, body
    return status


def set_colocation(cluster: Cluster, colocation: dict[str, Any]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
        "data": {"colocation-config": json.dumps(colocation)},
    }
    status, _ = cluster.request("GET", CONFIGMAP)
    if status == 404:
        create(cluster, "/api/v1/namespaces/koordinator-system/configmaps", body)
        return
    status, answer = cluster.request("PUT", CONFIGMAP, body)
    assert status == 200, answer


def start(cluster: Cluster, tmp_path: Path, repo_root: Path, config: str = "") -> ControllerProcess:
    return ControllerProcess(
        cluster.kubeconfig, tmp_path, name="manager-duties", config=config, cwd=repo_root
    )


def test_with_manager_duties_off_nothing_of_them_is_done(
    cluster: Cluster, tmp_path: Path, repo_root: Path
) -> None:
    bare_gpu_node(cluster, "quiet-gpu")
    set_colocation(cluster, {"enable": True})
    controller = start(cluster, tmp_path, repo_root, "[kubernetes]\nmanager_duties = false\n")
    try:
        # the controller runs and has seen the node: it binds a pod there
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": "default"},
            "spec": {
                "schedulerName": "koord-scheduler",
                "nodeSelector": {k.LABEL_HOSTNAME: "quiet-gpu"},
                "containers": [{"name": "c", "image": "busybox"}],
            },
        }
        create(cluster, "/api/v1/namespaces/default/pods", pod)
        eventually(
            "the probe pod to be bound",
            lambda: get(cluster, "/api/v1/namespaces/default/pods/probe")["spec"].get("nodeName"),
        )
        assert metric(cluster, "quiet-gpu") is None
        node = node_json(cluster, "quiet-gpu")
        assert node["status"]["capacity"] == KUBELET
        assert k.LABEL_GPU_VENDOR not in node["metadata"]["labels"]
        assert holder(cluster, "koordinator-manager") == ""
    finally:
        controller.stop()
        sys.stderr.write(controller.log()[-4000:])
    status, body = cluster.request("DELETE", "/api/v1/namespaces/default/pods/probe")
    assert status == 200, body


def test_nodemetrics_and_node_resources_follow_the_config_the_reports_and_the_devices(
    cluster: Cluster, tmp_path: Path, repo_root: Path
) -> None:
    name = "gpu-node"
    device = bare_gpu_node(cluster, name, pool="gpu")
    set_colocation(
        cluster,
        {
            "enable": True,
            "metricReportIntervalSeconds": 30,
            "nodeConfigs": [
                {
                    "name": "gpu",
                    "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                    "metricAggregateDurationSeconds": 120,
                }
            ],
        },
    )
    controller = start(cluster, tmp_path, repo_root)
    try:
        # nodemetric: made with the ConfigMap's policy for the node
        made = eventually("the node's NodeMetric", lambda: metric(cluster, name))
        policy = made["spec"]["metricCollectPolicy"]
        assert policy["reportIntervalSeconds"] == 30
        assert policy["aggregateDurationSeconds"] == 120
        assert policy["nodeMemoryCollectPolicy"] == "usageWithoutPageCache"
        durations = [Duration.parse(d) for d in policy["nodeAggregatePolicy"]["durations"]]
        assert durations == [Duration.parse(d) for d in ("5m", "10m", "30m")]

        # noderesource: the Device's resources and labels, the kubelet's fields as they were
        wanted_gpu = dict(accelerator_resources(device).mask(MANAGER_DEVICE_RESOURCES))
        assert wanted_gpu[k.RESOURCE_GPU_CORE] == 800

        def with_gpus() -> dict[str, Any] | None:
            node = node_json(cluster, name)
            shown = amounts(node["status"].get("allocatable", {}))
            return node if all(shown.get(n) == v for n, v in wanted_gpu.items()) else None

        node = eventually("the Device's resources on the Node", with_gpus)
        assert node["metadata"]["labels"][k.LABEL_GPU_VENDOR] == "nvidia"
        assert node["metadata"]["labels"][k.LABEL_GPU_MODEL]
        for part in ("capacity", "allocatable"):
            shown = node["status"][part]
            assert {n: shown[n] for n in KUBELET} == KUBELET
            assert k.RESOURCE_NVIDIA_GPU not in shown  # the device plugin's, not written here
            assert not set(BATCH_MID) & set(shown)  # no report yet
        assert any(
            c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]
        )
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok")

        # the agent reports: Batch and Mid resources from the NodeMetric
        reported = report(cluster, name, datetime.now(UTC))
        cap_memory = 768 * GIB
        expected = {
            # 96 cores - 40 % safety margin - 10 cores of system usage
            k.RESOURCE_BATCH_CPU: 96_000 - 38_400 - 10_000,
            # 768 GiB - 35 % safety margin - 100 GiB of system usage
            k.RESOURCE_BATCH_MEMORY: int(Fraction(cap_memory * 65, 100)) - 100 * GIB,
            k.RESOURCE_MID_CPU: 0,
            k.RESOURCE_MID_MEMORY: 0,
        }

        def batch(node: dict[str, Any]) -> dict[str, int]:
            shown = amounts(node["status"].get("allocatable", {}))
            return {n: shown[n] for n in BATCH_MID if n in shown}

        node = eventually(
            "the Batch and Mid resources on the Node",
            shown_when(cluster, name, lambda n: batch(n) == expected),
        )
        assert {n: v for n, v in amounts(node["status"]["capacity"]).items() if n in BATCH_MID} == (
            expected
        )
        assert {n: node["status"]["capacity"][n] for n in KUBELET} == KUBELET

        # a stale report (older than degradeTimeMinutes, 15): Batch and Mid removed
        old = datetime.now(UTC) - timedelta(minutes=20)
        reported = report(cluster, name, old)
        eventually(
            "the Batch and Mid resources removed",
            shown_when(cluster, name, lambda n: not batch(n)),
        )
        node = node_json(cluster, name)
        assert not set(BATCH_MID) & set(node["status"]["capacity"])
        assert amounts(node["status"]["allocatable"])[k.RESOURCE_GPU_CORE] == 800

        # the ConfigMap changes: the spec follows, the agent's status stays as it wrote it
        set_colocation(cluster, {"enable": True, "metricReportIntervalSeconds": 45})
        rewritten = eventually(
            "the NodeMetric's spec rewritten",
            lambda: (
                m
                if (m := metric(cluster, name))
                and m["spec"]["metricCollectPolicy"].get("reportIntervalSeconds") == 45
                else None
            ),
        )
        assert rewritten["spec"]["metricCollectPolicy"]["aggregateDurationSeconds"] == 300
        assert rewritten["status"]["updateTime"] == reported["updateTime"]
        assert rewritten["status"]["nodeMetric"] == reported["nodeMetric"]

        # the Device goes: its resources go with it
        status, body = cluster.request("DELETE", f"{DEVICES}/{name}")
        assert status == 200, body
        node = eventually(
            "the device resources removed",
            shown_when(
                cluster,
                name,
                lambda n: not set(MANAGER_DEVICE_RESOURCES) & set(n["status"]["allocatable"]),
            ),
        )
        assert {n: node["status"]["allocatable"][n] for n in KUBELET} == KUBELET

        # the Node goes: its NodeMetric with it
        status, body = cluster.request("DELETE", f"{NODES}/{name}")
        assert status == 200, body
        eventually("the NodeMetric deleted", lambda: metric(cluster, name) is None)
        assert holder(cluster, "koordinator-manager")
    finally:
        controller.stop()
        sys.stderr.write(controller.log()[-4000:])
