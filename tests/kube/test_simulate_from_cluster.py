"""``koordpy simulate --from-cluster`` on the real API server: a what-if over a live cluster's
snapshot, printed as what would change, with the cluster left as it was.

Two kwok nodes named after the test's namespace carry a label of the test's own, and the
pods select it, so the other tests' nodes and pods in the session's cluster change nothing
here. Nothing sleeps to wait: the nodes' readiness is awaited on a KubeStore's changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from apis.core import Node, Pod
from apis.kinds import default_registry
from controller.errors import NotFound, StoreError
from controller.kube.client import KubeClient, resource_path
from controller.store.kubernetes import KubeStore
from hack.kube import Cluster

pytestmark = pytest.mark.kube

REGISTRY = default_registry()
PODS = REGISTRY.for_type(Pod)
NODES = REGISTRY.for_type(Node)
WAIT = 60.0
#: The label the test's nodes carry and its pods select.
POOL = "simulate.koordpy.io/pool"
CPU_REQUEST = "1"


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def node_body(name: str, pool: str) -> dict[str, Any]:
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {POOL: pool, "kubernetes.io/hostname": name, "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def pod_body(name: str, namespace: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "koord-scheduler",
            "nodeSelector": {POOL: pool},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": CPU_REQUEST, "memory": "256Mi"}},
                }
            ],
        },
    }


async def until(store: KubeStore, check: Callable[[], bool]) -> None:
    """Wait (on the store's changes) until ``check()`` holds."""
    async with asyncio.timeout(WAIT):
        while not check():
            await store.changed_after(store.revision)


async def make_pod(client: KubeClient, body: dict[str, Any]) -> None:
    """The pod, once the namespace lets it be created (its service account may come late)."""
    namespace = body["metadata"]["namespace"]
    async with asyncio.timeout(WAIT):
        while True:
            try:
                await client.post(resource_path(PODS, namespace), dumps(body), kind=PODS)
                return
            except StoreError:  # no service account yet (Forbidden)
                await asyncio.sleep(0.2)


def undecodable_reservation(name: str) -> dict[str, Any]:
    """A Reservation the server keeps (its pod template's schema keeps unknown fields) and
    koordpy's Structs refuse: left out of the snapshot."""
    container = {"name": "c", "image": "busybox", "notAContainerField": 1}
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"containers": [container]}},
            "owners": [{"object": {"name": "nobody", "namespace": "default"}}],
        },
    }


RESERVATIONS = "/apis/scheduling.koordinator.sh/v1alpha1/reservations"


def ready(store: KubeStore, name: str) -> bool:
    """Whether kwok made the node Ready and the node lifecycle controller lifted its taints."""
    if not store.exists(NODES, name):
        return False
    node = store.get(NODES, name)
    assert isinstance(node, Node)
    conditions = {c.type: c.status for c in node.status.conditions}
    not_ready = any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints)
    return conditions.get("Ready") == "True" and not not_ready


async def get_json(client: KubeClient, path: str) -> Any:
    return json.loads(await client.get(path))


async def cluster_state(client: KubeClient, namespace: str, nodes: list[str]) -> dict[str, Any]:
    """What the what-if must not change: the namespace's pods (version, node, phase), its
    quotas and Events, the nodes' spec and labels."""
    pods = await get_json(client, f"/api/v1/namespaces/{namespace}/pods")
    quotas = await get_json(
        client, f"/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/{namespace}/elasticquotas"
    )
    events = await get_json(client, f"/api/v1/namespaces/{namespace}/events")
    node_state = {}
    for name in nodes:
        node = await get_json(client, f"/api/v1/nodes/{name}")
        node_state[name] = {"spec": node.get("spec", {}), "labels": node["metadata"]["labels"]}
    return {
        "pods": {
            p["metadata"]["name"]: (
                p["metadata"]["resourceVersion"],
                p["spec"].get("nodeName", ""),
                p.get("status", {}).get("phase", ""),
            )
            for p in pods["items"]
        },
        "quotas": [q["metadata"]["name"] for q in quotas["items"]],
        "events": [(e["reason"], e["involvedObject"]["name"]) for e in events["items"]],
        "nodes": node_state,
    }


async def simulate(
    repo_root: Path, kubeconfig: Path, whatif: Path, output: str
) -> tuple[int, str, str]:
    """``koordpy simulate --from-cluster`` as a user runs it: (exit code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "koordpy",
        "simulate",
        "--from-cluster",
        "--kubeconfig",
        str(kubeconfig),
        "-f",
        str(whatif),
        "-o",
        output,
        "--max-time",
        "10m",
        cwd=repo_root,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(WAIT * 2):
        out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.usefixtures("koordinator_crds")
async def test_a_drained_node_and_a_new_pod_and_quota_change_nothing_in_the_cluster(
    client: KubeClient,
    namespace: str,
    kube_cluster: Cluster,
    repo_root: Path,
    tmp_path: Path,
) -> None:
    n1, n2 = f"{namespace}-n1", f"{namespace}-n2"
    odd = f"{namespace}-odd"
    try:
        store = KubeStore(client)
        await store.start(sync_timeout=WAIT)
        try:
            for name in (n1, n2):
                body = dumps(node_body(name, namespace))
                await client.post(resource_path(NODES), body, kind=NODES)
            await make_pod(client, pod_body("web", namespace, namespace))
            await client.post(RESERVATIONS, dumps(undecodable_reservation(odd)))
            await until(
                store,
                lambda: (
                    ready(store, n1) and ready(store, n2) and store.exists(PODS, "web", namespace)
                ),
            )
        finally:
            await store.aclose()

        before = await cluster_state(client, namespace, [n1, n2])
        assert before["pods"]["web"][1] == ""  # nothing in this cluster binds koord-scheduler's

        drained = node_body(n1, namespace)
        drained["spec"] = {"unschedulable": True}
        del drained["status"]  # the cluster's status stays
        quota = {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": "team", "namespace": namespace},
            "spec": {"min": {"cpu": "4", "memory": "8Gi"}, "max": {"cpu": "8", "memory": "16Gi"}},
        }
        whatif = tmp_path / "whatif.yaml"
        whatif.write_text(
            yaml.safe_dump_all([drained, pod_body("batch", namespace, namespace), quota])
        )

        code, out, err = await simulate(repo_root, kube_cluster.kubeconfig, whatif, "json")
        assert code == 0, err
        report = json.loads(out)
        assert report["cluster"]["objects"] > 0
        assert report["cluster"]["leftOut"] >= 1  # the Reservation koordpy cannot decode
        assert "did not decode and are left out" in err
        assert odd in err  # the reflector names it
        mine = sorted(
            (b["name"], b["node"]) for b in report["bindings"] if b["namespace"] == namespace
        )
        assert mine == [("batch", n2), ("web", n2)]  # both land on the node not drained
        changed = {
            (c["kind"], c["namespace"], c["name"]): c
            for c in report["objects"]
            if c["namespace"] == namespace or c["name"] in (n1, n2)
        }
        node = changed[("Node", "", n1)]
        assert node["action"] == "changed"
        assert node["by"] == ["what-if"]
        assert {"path": "spec.unschedulable", "after": True} in node["fields"]
        assert ("Node", "", n2) not in changed
        assert changed[("ElasticQuota", namespace, "team")]["action"] == "created"
        assert changed[("Pod", namespace, "batch")]["action"] == "created"
        web = changed[("Pod", namespace, "web")]
        assert web["action"] == "changed"
        assert web["by"] == ["loops"]
        assert {"path": "spec.nodeName", "after": n2} in web["fields"]
        assert not [r for r in report["removed"] if r["namespace"] == namespace]

        # The same what-if for people: a table naming where the pods land.
        code, table, err = await simulate(repo_root, kube_cluster.kubeconfig, whatif, "table")
        assert code == 0, err
        assert "nothing was written to the cluster" in table
        lines = [line.split() for line in table.splitlines()]
        assert [f"{namespace}/web", n2] in lines
        assert [f"{namespace}/batch", n2] in lines

        # Draining the other node instead sends the pod to the first: the drain decides.
        drained_n2 = node_body(n2, namespace)
        drained_n2["spec"] = {"unschedulable": True}
        del drained_n2["status"]
        other = tmp_path / "other.yaml"
        other.write_text(yaml.safe_dump(drained_n2))
        code, out, err = await simulate(repo_root, kube_cluster.kubeconfig, other, "json")
        assert code == 0, err
        mine = [
            (b["name"], b["node"])
            for b in json.loads(out)["bindings"]
            if b["namespace"] == namespace
        ]
        assert mine == [("web", n1)]

        # The cluster is as it was: the pod unbound at the same version, no second pod, no
        # quota, no Event, the nodes' spec and labels untouched.
        assert await cluster_state(client, namespace, [n1, n2]) == before
    finally:
        for path in (*(resource_path(NODES, "", n) for n in (n1, n2)), f"{RESERVATIONS}/{odd}"):
            with contextlib.suppress(NotFound):
                await client.delete(path)
