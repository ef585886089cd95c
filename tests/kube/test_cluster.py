"""The real control plane behaves as the tests that build on it rely on.

Each test works in a namespace of its own, so they share the session's cluster.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from hack.kube import Cluster

pytestmark = pytest.mark.kube

T = TypeVar("T")


def eventually(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll ``probe`` until it returns something other than None or False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def namespace(kube_cluster: Cluster) -> Iterator[str]:
    name = f"t-{secrets.token_hex(4)}"
    status, body = kube_cluster.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    assert status == 201, body
    # Pods are refused until the service-account controller has made the namespace's account.
    eventually(
        f"the default service account of {name}",
        lambda: (
            kube_cluster.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0]
            == 200
        ),
    )
    yield name
    kube_cluster.request("DELETE", f"/api/v1/namespaces/{name}")


def items(cluster: Cluster, path: str) -> list[dict[str, Any]]:
    status, body = cluster.request("GET", path)
    assert status == 200, body
    result: list[dict[str, Any]] = body["items"]
    return result


def etcd_compact(etcd_url: str, revision: int) -> None:
    """Compact etcd's history up to ``revision`` through its JSON gateway (v3 KV API)."""
    request = urllib.request.Request(
        etcd_url + "/v3/kv/compaction",
        data=json.dumps({"revision": revision, "physical": True}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


def test_kubectl_reaches_the_api_server_with_the_admin_kubeconfig(kube_cluster: Cluster) -> None:
    result = kube_cluster.kubectl("get", "ns", "-o", "name")
    assert {"namespace/default", "namespace/kube-system"} <= set(result.stdout.split())
    whoami = json.loads(kube_cluster.kubectl("auth", "whoami", "-o", "json").stdout)
    assert "system:masters" in whoami["status"]["userInfo"]["groups"]


def test_the_kubeconfig_verifies_the_server_certificate(kube_cluster: Cluster) -> None:
    """No insecure-skip-tls-verify: the kubeconfig carries the serving certificate's CA."""
    config = json.loads(kube_cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == kube_cluster.server
    assert cluster["certificate-authority-data"]
    assert not cluster.get("insecure-skip-tls-verify", False)
    status, body = kube_cluster.request("GET", "/version")
    assert status == 200
    assert body["gitVersion"].startswith("v1.35.")


def test_a_token_outside_the_token_file_is_refused(kube_cluster: Cluster) -> None:
    stranger = dataclasses.replace(kube_cluster, token="not-a-token")
    status, _ = stranger.request("GET", "/api/v1/namespaces")
    assert status == 401


def test_a_deployment_gets_a_replicaset_and_pods_and_is_garbage_collected(
    kube_cluster: Cluster, namespace: str
) -> None:
    manifest = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {namespace}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: web, image: nginx}}]
"""
    kube_cluster.kubectl("apply", "-f", "-", stdin=manifest)

    def replicaset() -> dict[str, Any] | None:
        sets = items(kube_cluster, f"/apis/apps/v1/namespaces/{namespace}/replicasets")
        owned = [
            rs for rs in sets if rs["metadata"].get("ownerReferences", [{}])[0].get("name") == "web"
        ]
        return owned[0] if owned else None

    rs = eventually("the deployment's replicaset", replicaset)
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    def pods() -> list[dict[str, Any]] | None:
        found = items(kube_cluster, f"/api/v1/namespaces/{namespace}/pods")
        return found if len(found) == 2 else None

    for p in eventually("the replicaset's two pods", pods):
        owner = p["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("ReplicaSet", rs["metadata"]["name"])
        assert p["spec"]["serviceAccountName"] == "default"

    kube_cluster.kubectl("delete", "deployment", "web", "-n", namespace, "--wait=false")
    eventually(
        "the garbage collector to remove the replicaset and pods",
        lambda: (
            not items(kube_cluster, f"/apis/apps/v1/namespaces/{namespace}/replicasets")
            and not items(kube_cluster, f"/api/v1/namespaces/{namespace}/pods")
        ),
    )


def test_binding_a_pod_sets_its_node(kube_cluster: Cluster, namespace: str) -> None:
    status, body = kube_cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("p"))
    assert status == 201, body
    assert "nodeName" not in body["spec"]

    def binding(node: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }

    status, body = kube_cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods/p/binding", binding("node-a")
    )
    assert status == 201, body
    _, bound = kube_cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/p")
    assert bound["spec"]["nodeName"] == "node-a"
    conditions = {c["type"]: c["status"] for c in bound["status"].get("conditions", [])}
    assert conditions.get("PodScheduled") == "True"
    # A bound pod cannot be bound again.
    status, body = kube_cluster.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods/p/binding", binding("node-b")
    )
    assert status == 409, body


def test_kwok_makes_nodes_ready_and_bound_pods_run(kube_cluster: Cluster, namespace: str) -> None:
    node = f"kwok-{namespace}"
    status, body = kube_cluster.request(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"type": "kwok"}},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            },
        },
    )
    assert status == 201, body
    try:

        def ready() -> bool:
            _, got = kube_cluster.request("GET", f"/api/v1/nodes/{node}")
            conditions = {c["type"]: c["status"] for c in got["status"].get("conditions", [])}
            return conditions.get("Ready") == "True"

        eventually(f"node {node} to turn Ready", ready)
        status, body = kube_cluster.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", pod("runs", nodeName=node)
        )
        assert status == 201, body

        def running() -> dict[str, Any] | None:
            _, got = kube_cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/runs")
            return got if got["status"].get("phase") == "Running" else None

        got = eventually("the bound pod to run", running)
        assert got["status"]["podIP"]
    finally:
        kube_cluster.request("DELETE", f"/api/v1/nodes/{node}")


def test_a_watch_from_a_compacted_resource_version_is_gone(
    kube_cluster: Cluster, namespace: str
) -> None:
    """What makes an informer relist: 410 Gone for a resourceVersion etcd compacted away.

    Events, which the API server keeps no watch cache for, so that etcd itself answers.
    """
    base = f"/api/v1/namespaces/{namespace}/events"

    def event(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "p"},
            "reason": "Test",
            "message": name,
            "type": "Normal",
        }

    status, first = kube_cluster.request("POST", base, event("e0"))
    assert status == 201, first
    stale = first["metadata"]["resourceVersion"]
    for n in range(1, 4):
        status, last = kube_cluster.request("POST", base, event(f"e{n}"))
        assert status == 201, last
    etcd_compact(kube_cluster.etcd_url, int(last["metadata"]["resourceVersion"]))

    status, listed = kube_cluster.request(
        "GET", f"{base}?resourceVersion={stale}&resourceVersionMatch=Exact"
    )
    assert (status, listed["reason"]) == (410, "Expired"), listed
    with kube_cluster.open("GET", f"{base}?watch=true&resourceVersion={stale}") as response:
        assert response.status == 200
        watched = json.loads(response.readline())
    assert watched["type"] == "ERROR"
    assert (watched["object"]["code"], watched["object"]["reason"]) == (410, "Expired")
