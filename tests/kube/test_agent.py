"""``koordpy agent run`` against a real API server, as koordlet runs on a node.

The session's cluster with Koordinator's v1.8.0 CRDs and ``deploy/rbac/agent.yaml`` applied; a
kwok node of this module's own; the agent as a process, as the node's DaemonSet pod runs it:
with a token of the ``koordpy-agent`` service account, its pods from a ``spec.nodeName`` watch
(there is no kubelet to ask), an H100 node's devices simulated, and its QoS loop over a private
kubepods tree on this machine's real cgroup v1. It reaches the API server through a TCP
forwarder of the test's, so the test can cut it off and bring it back.

The NodeMetric is made by the test, as koord-manager makes it (a 1 s report interval in its
spec, which the agent follows); the NodeSLO too, after the agent started (read through its
watch, it switches evictions on).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from agent.cgroups import detect, paths
from agent.config import AgentConfig, CgroupSection
from apis import constants as k
from apis.qos import KubeQoS
from hack.kube import Cluster
from runtime.kube.client import ClientOptions, KubeClient
from runtime.kube.errors import Forbidden
from tests.agent.realcgroups import KubepodsTree, kubepods_tree
from tests.kube.koordpy_process import (
    AgentProcess,
    account_kubeconfig,
    agent_config,
    bare_node,
    be_pod,
    create,
    eventually,
    evicted,
    get,
    when,
)

pytestmark = [pytest.mark.kube, pytest.mark.root]

NODE = f"agent-{secrets.token_hex(3)}"
DEVICES = "/apis/scheduling.koordinator.sh/v1alpha1/devices"
NODEMETRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
NODESLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
NAMESPACE = "agent-pods"
#: How far a report's own time may trail the moment the API server came back: one report
#: interval and the clock's second.
SLACK = timedelta(seconds=2)
AGENT_DEVICES = (sys.executable, "-m", "koordpy", "agent", "devices")


class Forwarder:
    """A TCP forwarder on 127.0.0.1 to ``target``: :meth:`stop` cuts every connection and
    refuses new ones (the API server is lost, as a partition makes it), :meth:`start` serves
    again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the accept() blocked on it
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@dataclass
class Scene:
    cluster: Cluster
    agent: AgentProcess
    kubeconfig: Path
    forwarder: Forwarder
    tree: KubepodsTree
    info: detect.CgroupInfo
    config: str
    metrics: str
    node_uid: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def scene(
    kube_cluster: Cluster,
    koordinator_crds: list[str],
    repo_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scene]:
    cluster = kube_cluster
    directory = tmp_path_factory.mktemp("agent")
    for namespace in ("koordinator-system", NAMESPACE):
        status, body = cluster.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        assert status in (201, 409), body
    cluster.kubectl("apply", "-f", str(repo_root / "deploy" / "rbac" / "agent.yaml"))
    node = bare_node(cluster, NODE)
    # As koord-manager makes it: the agent only ever writes its status.
    create(
        cluster,
        NODEMETRICS,
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": NODE},
            "spec": {
                "metricCollectPolicy": {"aggregateDurationSeconds": 60, "reportIntervalSeconds": 1}
            },
        },
    )
    server = urlsplit(cluster.server)
    forwarder = Forwarder((server.hostname or "127.0.0.1", server.port or 443))
    forwarder.start()
    kubeconfig = account_kubeconfig(cluster, directory / "agent.kubeconfig", "koordpy-agent")
    document = yaml.safe_load(kubeconfig.read_text())
    document["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{forwarder.port}"
    kubeconfig.write_text(yaml.safe_dump(document))
    metrics_port = _free_port()
    with kubepods_tree() as tree:
        cfg = AgentConfig(cgroup=CgroupSection(kubepods_parent=tree.parent))
        info = detect.detect(cfg.host, cfg.cgroup)
        for tier in (KubeQoS.BURSTABLE, KubeQoS.BEST_EFFORT):
            tree.mkdir(paths.qos_dir(info, tier))
        config = agent_config(
            tree.parent,
            "nvidia-h100",
            metrics=f"127.0.0.1:{metrics_port}",
            device_interval=2.0,
            force_update=1.0,
        )
        agent = AgentProcess(kubeconfig, directory, node=NODE, config=config)
        try:
            yield Scene(
                cluster=cluster,
                agent=agent,
                kubeconfig=kubeconfig,
                forwarder=forwarder,
                tree=tree,
                info=info,
                config=config,
                metrics=f"http://127.0.0.1:{metrics_port}/metrics",
                node_uid=node["metadata"]["uid"],
            )
        finally:
            agent.stop()
            forwarder.stop()
            print(agent.log()[-6000:])
            cluster.request("DELETE", f"/api/v1/nodes/{NODE}")
            cluster.request("DELETE", f"{NODEMETRICS}/{NODE}")
            cluster.request("DELETE", f"{NODESLOS}/{NODE}")


def _device(scene: Scene) -> dict[str, Any] | None:
    status, body = scene.cluster.request("GET", f"{DEVICES}/{NODE}")
    return body if status == 200 else None


def _reported_at(device: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(device["metadata"]["annotations"]["koordpy.io/reported-at"])


def _nodemetric_time(scene: Scene) -> datetime | None:
    metric = get(scene.cluster, f"{NODEMETRICS}/{NODE}")
    stamp = metric.get("status", {}).get("updateTime")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def _devices_command(scene: Scene, directory: Path) -> dict[str, Any]:
    """What ``koordpy agent devices -o json`` prints for the agent's config."""
    path = directory / "devices.toml"
    path.write_text(scene.config)
    printed = subprocess.run(
        [*AGENT_DEVICES, "--config", str(path), "--node-name", NODE, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    found: dict[str, Any] = json.loads(printed.stdout)
    return found


def test_the_device_is_made_as_koordlet_makes_it(scene: Scene, tmp_path: Path) -> None:
    device = eventually("the agent's Device", lambda: _device(scene))
    assert device["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": NODE,
            "uid": scene.node_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    labels = device["metadata"]["labels"]
    assert labels[k.LABEL_GPU_VENDOR] == "nvidia"
    assert labels[k.LABEL_GPU_MODEL].startswith("H100")
    # Nothing the agent reports was pruned by Koordinator's v1.8.0 schema.
    assert device["spec"] == _devices_command(scene, tmp_path)["spec"]
    assert len(device["spec"]["devices"]) == 8
    assert all(d["health"] for d in device["spec"]["devices"])


def test_the_device_is_refreshed_and_keeps_what_others_wrote(scene: Scene) -> None:
    first = eventually("the agent's Device", lambda: _device(scene))
    allocations = [
        {
            "type": "gpu",
            "entries": [{"name": "trainer", "namespace": NAMESPACE, "uuid": "u1", "minors": [0]}],
        }
    ]
    # The scheduler's part of the Device: its allocations (there is no status subresource).
    status, body = scene.cluster.request(
        "PATCH",
        f"{DEVICES}/{NODE}",
        {"status": {"allocations": allocations}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, body
    later = eventually(
        "a refreshed Device",
        when(scene.cluster, f"{DEVICES}/{NODE}", lambda d: _reported_at(d) > _reported_at(first)),
    )
    assert later["status"]["allocations"] == allocations
    assert later["spec"] == first["spec"]


def test_the_nodemetric_status_is_reported_at_its_specs_interval(scene: Scene) -> None:
    first = eventually("a NodeMetric status", lambda: _nodemetric_time(scene))
    metric = get(scene.cluster, f"{NODEMETRICS}/{NODE}")
    usage = metric["status"]["nodeMetric"]["nodeUsage"]["resources"]
    assert usage["cpu"]
    assert usage["memory"]
    # The spec is koord-manager's: left as it was made.
    assert metric["spec"] == {
        "metricCollectPolicy": {"aggregateDurationSeconds": 60, "reportIntervalSeconds": 1}
    }
    # Every report interval of the spec (1 s), not the agent's own 30 s.
    eventually(
        "the next NodeMetric report",
        lambda: (t := _nodemetric_time(scene)) is not None and t > first,
        timeout=15.0,
    )


def _nodeslo(cluster: Cluster) -> None:
    """The node's NodeSLO as koord-manager renders it with BE thresholds on: CPU suppress at
    its default 65 %, and evictions by the batch allocatable."""
    status, body = cluster.request(
        "POST",
        NODESLOS,
        {
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeSLO",
            "metadata": {"name": NODE},
            "spec": {
                "resourceUsedThresholdWithBE": {
                    "enable": True,
                    "cpuAllocatableEvictThresholdPercent": 110,
                    "cpuAllocatableEvictLowerPercent": 100,
                    "allocatableEvictPriorityThreshold": 5999,
                }
            },
        },
    )
    assert status in (201, 409), body


def test_a_be_pod_over_the_batch_allocatable_is_evicted_through_the_eviction_api(
    scene: Scene,
) -> None:
    cluster = scene.cluster
    pod = create(
        cluster, f"/api/v1/namespaces/{NAMESPACE}/pods", be_pod("be-over", NAMESPACE, NODE)
    )
    uid = pod["metadata"]["uid"]
    scene.tree.mkdir(paths.pod_dir(scene.info, KubeQoS.BEST_EFFORT, uid))
    eventually(
        "the BE pod to run",
        when(
            cluster,
            f"/api/v1/namespaces/{NAMESPACE}/pods/be-over",
            lambda p: p["status"].get("phase") == "Running",
        ),
    )
    # The node has no batch-cpu at all: over the threshold once evictions are on, which the
    # NodeSLO (read through the agent's watch) does.
    _nodeslo(cluster)

    event = eventually("the eviction's Event", evicted(cluster, NAMESPACE, uid))
    assert event["source"] == {"component": "koordlet", "host": NODE}
    assert "CPUAllocatableEvict" in event["message"]

    def gone() -> bool:
        status, body = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/be-over")
        if status == 404:
            return True
        # Evicted through the API: the API server marks the pod before it deletes it.
        conditions = body["status"].get("conditions", [])
        return any(c["type"] == "DisruptionTarget" for c in conditions) and bool(
            body["metadata"].get("deletionTimestamp")
        )

    eventually("the pod to be evicted", gone)


async def test_outside_its_verbs_the_agent_is_refused(scene: Scene) -> None:
    options = ClientOptions(qps=100.0, burst=100)
    async with KubeClient.from_kubeconfig(scene.kubeconfig, options=options) as client:
        outside = [
            ("DELETE", f"{DEVICES}/{NODE}", None),
            ("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {"x": "y"}}}),
            ("POST", NODEMETRICS, {"metadata": {"name": "someone-else"}}),
            ("PUT", f"{NODEMETRICS}/{NODE}", get(scene.cluster, f"{NODEMETRICS}/{NODE}")),
            ("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/anything", None),
        ]
        for method, path, body in outside:
            data = json.dumps(body).encode() if body is not None else None
            with pytest.raises(Forbidden):
                await client.request(
                    method, path, body=data, content_type="application/merge-patch+json"
                )
        # What it is granted, it may do: its own Node read.
        assert json.loads(await client.get(f"/api/v1/nodes/{NODE}"))["metadata"]["name"] == NODE
    assert "forbidden" not in scene.agent.log().lower()


def _narrow(cgroup: Path, cpus: str) -> None:
    """``cgroup`` and everything under it set to ``cpus``, the deepest first."""
    for child in cgroup.iterdir():
        if child.is_dir():
            _narrow(child, cpus)
    (cgroup / "cpuset.cpus").write_text(cpus)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode()
        return text


def test_a_lost_api_server_keeps_qos_running_and_reports_the_newest_state_when_back(
    scene: Scene,
) -> None:
    eventually("a NodeMetric status", lambda: _nodemetric_time(scene))
    eventually("the agent's Device", lambda: _device(scene))
    _nodeslo(scene.cluster)
    be_dir = paths.qos_dir(scene.info, KubeQoS.BEST_EFFORT)
    be_cpuset = scene.tree.path("cpuset", be_dir)
    written = eventually(
        "the BE cpuset the QoS loop draws",
        lambda: (cpus := (be_cpuset / "cpuset.cpus").read_text().strip()) and cpus,
    )
    scene.forwarder.stop()
    lost_at = datetime.now().astimezone()
    try:
        # The QoS loop goes on without the API server: a cpuset knocked off what it wrote is
        # put back (its children narrowed first: cgroup v1 keeps a child within its parent).
        _narrow(be_cpuset, written.split(",")[0].split("-")[0])
        eventually(
            "the BE cpuset restored while the API server is away",
            lambda: scene.tree.read("cpuset", be_dir, "cpuset.cpus") == written,
        )
        time.sleep(3.0)  # several NodeMetric and Device reports wait meanwhile
        assert scene.agent.running(), scene.agent.log()[-3000:]
        assert "koordlet_node_used_cpu_cores" in _scrape(scene.metrics)
    finally:
        scene.forwarder.start()
    back_at = datetime.now().astimezone()
    stamp = eventually(
        "a NodeMetric report after the API server is back",
        lambda: (t := _nodemetric_time(scene)) is not None and t > lost_at and t,
    )
    # The newest state, not the first report that had to wait.
    assert stamp >= back_at.replace(microsecond=0) - SLACK
    device = eventually(
        "a Device report after the API server is back",
        lambda: (d := _device(scene)) is not None and _reported_at(d) > lost_at and d,
    )
    assert _reported_at(device) >= back_at - SLACK
    log = scene.agent.log()
    assert "the API server cannot be reached, reports wait" in log
    assert "the API server answers again" in log
