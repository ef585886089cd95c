"""What the Kubernetes-mode tests share: polling the cluster, and ``koordpy controller run``
as a process of its own.

The probes read the cluster as admin through :meth:`hack.kube.Cluster.request`; waiting is
polling with a deadline, since the thing awaited happens in other processes.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from apis import constants as k
from hack.kube import Cluster
from hack.kube.demo import make_node

T = TypeVar("T")

#: Seconds a test waits for the cluster to get where it expects.
WAIT = 60.0
LEASES = "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases"


def eventually(what: str, probe: Callable[[], T | bool | None], timeout: float = WAIT) -> T:
    """Poll ``probe`` (it reads the cluster) until it returns something other than None or
    False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


def get(cluster: Cluster, path: str) -> Any:
    status, body = cluster.request("GET", path)
    assert status == 200, body
    return body


def when(cluster: Cluster, path: str, check: Callable[[Any], bool]) -> Callable[[], Any]:
    """A probe: the object at ``path`` once ``check`` holds for it."""

    def probe() -> Any:
        return found if check(found := get(cluster, path)) else None

    return probe


def create(cluster: Cluster, path: str, body: dict[str, Any]) -> Any:
    status, answer = cluster.request("POST", path, body)
    assert status == 201, answer
    return answer


def pods(cluster: Cluster, namespace: str) -> dict[str, Any]:
    listed = get(cluster, f"/api/v1/namespaces/{namespace}/pods")["items"]
    return {p["metadata"]["name"]: p for p in listed}


def holder(cluster: Cluster, lease: str = "koord-scheduler") -> str:
    """Who holds one of Koordinator's Leases ("" for nobody)."""
    status, body = cluster.request("GET", f"{LEASES}/{lease}")
    return str(body["spec"].get("holderIdentity", "")) if status == 200 else ""


def ready(cluster: Cluster, node: str) -> None:
    """Wait for ``node`` to be Ready (kwok marks it)."""
    eventually(
        f"node {node} to be Ready",
        when(
            cluster,
            f"/api/v1/nodes/{node}",
            lambda n: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", [])
            ),
        ),
    )


def ready_node(cluster: Cluster, name: str, device_profile: str, capacity_type: str) -> None:
    """A node as koordpy's agent reports it (:func:`hack.kube.demo.make_node`), once Ready."""
    make_node(cluster, name, device_profile, capacity_type)
    ready(cluster, name)


#: Where :func:`place_on_demand` puts its Deployment's pods, and where they are to go.
ON_DEMAND, RESERVED = "demo-ascend-300i-duo", "demo-nvidia-h100"
PODMIGRATIONJOBS = "/apis/scheduling.koordinator.sh/v1alpha1/podmigrationjobs"


def place_on_demand(cluster: Cluster, namespace: str) -> None:
    """For the descheduler example (drain ``on-demand`` nodes onto ``reserved`` ones): a
    fresh on-demand node (the example's own is drained and cordoned by then) and a Deployment
    ``web`` of 4 replicas bound there, the reserved node cordoned until they are. 4: more than
    the example's ``maxUnavailablePerWorkload`` (3), below which a workload is not migrated."""
    ready_node(cluster, ON_DEMAND, "ascend-310p3-300i-duo", "on-demand")
    container = {
        "name": "web",
        "image": "nginx",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"schedulerName": "koord-scheduler", "containers": [container]},
            },
        },
    }
    cluster.kubectl("cordon", RESERVED)
    create(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)

    def placed() -> set[str] | None:
        nodes = [p["spec"].get("nodeName") for p in pods(cluster, namespace).values()]
        return set(nodes) if len(nodes) == 4 and all(nodes) else None

    assert eventually("the web pods to be bound", placed) == {ON_DEMAND}
    cluster.kubectl("uncordon", RESERVED)


def migrated(cluster: Cluster, namespace: str) -> Callable[[], dict[str, Any] | None]:
    """A probe: a PodMigrationJob of a pod of ``namespace`` that succeeded."""

    def probe() -> dict[str, Any] | None:
        for job in get(cluster, PODMIGRATIONJOBS)["items"]:
            ref = job["spec"].get("podRef", {})
            if ref.get("namespace") == namespace and (
                job.get("status", {}).get("phase") == "Succeeded"
            ):
                return dict(job)
        return None

    return probe


def bare_node(cluster: Cluster, name: str) -> dict[str, Any]:
    """A kwok node as its kubelet registers it (this machine's CPUs, no Device: the agent
    makes it), once Ready."""
    capacity = {"cpu": str(os.cpu_count() or 1), "memory": "64Gi", "pods": "110"}
    node = create(
        cluster,
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {k.LABEL_HOSTNAME: name, "type": "kwok"},
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {"capacity": capacity, "allocatable": capacity},
        },
    )
    ready(cluster, name)
    return dict(node)


def be_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """A BE pod bound to ``node`` asking 4 cores of batch-cpu, open to the agent's evictions
    (``koordinator.sh/eviction-enabled``)."""
    batch = {k.RESOURCE_BATCH_CPU: "4000"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {k.LABEL_QOS_CLASS: "BE", "koordinator.sh/eviction-enabled": "true"},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": batch, "limits": batch},
                }
            ],
        },
    }


def evicted(cluster: Cluster, namespace: str, uid: str) -> Callable[[], dict[str, Any] | None]:
    """A probe: the ``Evicted`` Event of the pod ``uid`` in ``namespace``."""

    def probe() -> dict[str, Any] | None:
        for event in get(cluster, f"/api/v1/namespaces/{namespace}/events")["items"]:
            if event["involvedObject"].get("uid") == uid and event["reason"] == "Evicted":
                return dict(event)
        return None

    return probe


def agent_config(
    kubepods_parent: str,
    profile: str,
    *,
    metrics: str = "off",
    device_interval: float = 5.0,
    force_update: float = 60.0,
) -> str:
    """The TOML of an agent in Kubernetes mode, as a node's DaemonSet pod would run it but for
    what a test machine differs in: its pods from a ``spec.nodeName`` watch (no kubelet), its
    devices simulated (``profile``), its QoS over the test's kubepods tree, quick intervals,
    evictions by the Batch allocatable switched on."""
    return f"""
[report]
transport = "kubernetes"
interval = 1.0
device_interval = {device_interval}

[pods]
source = "apiserver"

[devices]
simulate = ["{profile}"]

[cgroup]
kubepods_parent = "{kubepods_parent}"

[metrics]
address = "{metrics}"
report_interval = 30.0

[qos]
interval = 0.5
force_update_seconds = {force_update}
gates = {{ CPUAllocatableEvict = true }}
"""


class KoordpyProcess:
    """``python -m koordpy ARGV...`` as a user starts it, its output in
    ``<directory>/<name>.log``."""

    def __init__(
        self, argv: list[str], directory: Path, *, name: str, cwd: Path | None = None
    ) -> None:
        self.name = name
        self.log_path = directory / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "koordpy", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM, as the kubelet stops a pod (SIGKILL after 20 s); reaped."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()

    def kill(self) -> None:
        """SIGKILL: no Lease released, nothing flushed."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


class ControllerProcess(KoordpyProcess):
    """``koordpy controller run --kubeconfig``, with ``config`` (TOML) as its ``--config``
    when given."""

    def __init__(
        self,
        kubeconfig: Path,
        directory: Path,
        *,
        name: str = "koordpy-controller",
        config: str = "",
        cwd: Path | None = None,
    ) -> None:
        argv = ["controller", "run"]
        if config:
            path = directory / f"{name}.toml"
            path.write_text(config)
            argv += ["--config", str(path)]
        argv += ["--kubeconfig", str(kubeconfig), "--metrics-address", "off"]
        super().__init__(argv, directory, name=name, cwd=cwd)


class AgentProcess(KoordpyProcess):
    """``koordpy agent run --kubeconfig`` for ``node``, with ``config`` (TOML) as its
    ``--config``."""

    def __init__(self, kubeconfig: Path, directory: Path, *, node: str, config: str = "") -> None:
        name = f"koordpy-agent-{node}"
        path = directory / f"{name}.toml"
        path.write_text(config)
        argv = ["agent", "run", "--config", str(path), "--node-name", node]
        super().__init__([*argv, "--kubeconfig", str(kubeconfig)], directory, name=name)


def account_kubeconfig(
    cluster: Cluster, path: Path, account: str, namespace: str = "koordinator-system"
) -> Path:
    """A kubeconfig of the service account ``namespace/account``: a token ``kubectl create
    token`` minted for it (as the pod of a DaemonSet or Deployment running as it has), the
    cluster's server and CA."""
    token = cluster.kubectl(
        "create", "token", account, "-n", namespace, "--duration=1h"
    ).stdout.strip()
    assert token, "kubectl create token printed nothing"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cluster",
                "cluster": {
                    "server": cluster.server,
                    "certificate-authority-data": base64.b64encode(
                        cluster.ca_file.read_bytes()
                    ).decode(),
                },
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "cluster", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path
