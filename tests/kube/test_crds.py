"""``koordpy crds`` on a real kube-apiserver: the CRDs are accepted and established, and the
examples' custom objects are accepted and read back without a field pruned.

The session's cluster gets Koordinator's own CRDs, which have the same names as ours, so this
module runs a cluster of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from apis import codec
from apis.kinds import Kind, default_registry
from apis.meta import Condition, ObjectReference
from apis.resources import ResourceList
from apis.scheduling import ReservationStatus
from controller.kube.client import resource_path
from controller.kube.crds import custom_resource_definitions, is_custom
from hack.kube import Cluster, start_cluster, stop_cluster
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.kube

#: Writes refuse what the schema does not name instead of pruning it silently.
STRICT = "?fieldValidation=Strict"


@pytest.fixture(scope="module")
def own_cluster(
    kube_binaries: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kube-crds")
    cluster = start_cluster(directory, kwok=False, timeout=90.0)
    try:
        yield cluster
    finally:
        stop_cluster(directory)


@pytest.fixture(scope="module")
def installed(own_cluster: Cluster) -> list[dict[str, Any]]:
    """Our CRDs, as ``koordpy crds`` prints them, applied and established."""
    printed = subprocess.run(
        [sys.executable, "-m", "koordpy", "crds", "--job-kinds"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        cwd=REPO_ROOT,
    ).stdout
    # Server-side: the pod-template kinds are over the client-side apply annotation's limit.
    applied = own_cluster.kubectl("apply", "--server-side", "-f", "-", stdin=printed, timeout=120)
    assert "Warning" not in applied.stderr, applied.stderr
    generated = custom_resource_definitions(job_kinds=True)
    names = [f"crd/{crd['metadata']['name']}" for crd in generated]
    own_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *names, timeout=90.0
    )
    return generated


def test_every_crd_is_accepted_and_established(
    own_cluster: Cluster, installed: list[dict[str, Any]]
) -> None:
    assert len(installed) >= 10
    for crd in installed:
        name = crd["metadata"]["name"]
        status, body = own_cluster.request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        )
        assert status == 200, body
        conditions = {c["type"]: c["status"] for c in body["status"]["conditions"]}
        assert conditions["Established"] == "True", (name, conditions)
        assert conditions["NamesAccepted"] == "True", (name, conditions)
        assert "NonStructuralSchema" not in conditions, name
        assert body["status"]["acceptedNames"]["kind"] == crd["spec"]["names"]["kind"]
        assert body["status"]["acceptedNames"].get("shortNames", []) == crd["spec"]["names"].get(
            "shortNames", []
        )
        # What the server stored is what we sent (nothing of the schema dropped).
        for sent, stored in zip(crd["spec"]["versions"], body["spec"]["versions"], strict=True):
            assert stored["schema"] == sent["schema"], name
            assert stored.get("subresources") == sent.get("subresources"), name
        # Discovery serves the kind with its scope and short names.
        group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
        status, listing = own_cluster.request("GET", f"/apis/{group}/{version}")
        assert status == 200, listing
        [resource] = [
            r for r in listing["resources"] if r["name"] == crd["spec"]["names"]["plural"]
        ]
        assert resource["namespaced"] == (crd["spec"]["scope"] == "Namespaced")


def _example_objects() -> list[Any]:
    registry = default_registry()
    found = []
    for path in sorted((REPO_ROOT / "examples").rglob("*.yaml")):
        for document in codec.load_yaml_documents(path.read_text(), source=str(path)):
            if str(document.get("kind", "")).endswith("List"):
                continue
            kind = codec.kind_of(document, registry)
            if is_custom(kind):
                body = json.loads(json.dumps(document))
                name = f"{path.name}:{kind.kind}:{body['metadata']['name']}"
                found.append(pytest.param(kind, body, id=name))
    return found


def _ensure_namespace(cluster: Cluster, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    status, answer = cluster.request("POST", "/api/v1/namespaces", body)
    assert status in (201, 409), answer


def _create(cluster: Cluster, kind: Kind, sent: dict[str, Any]) -> dict[str, Any]:
    """Create ``sent`` (at the kind's apiVersion, as koordpy rewrites an alias) and read it back."""
    sent = {**sent, "apiVersion": kind.api_version}
    namespace = sent["metadata"].get("namespace", "") if kind.namespaced else ""
    if namespace:
        _ensure_namespace(cluster, namespace)
    status, created = cluster.request("POST", resource_path(kind, namespace) + STRICT, sent)
    assert status == 201, created
    path = resource_path(kind, namespace, sent["metadata"]["name"])
    status, read = cluster.request("GET", path)
    assert status == 200, read
    return dict(read)


def _delete(cluster: Cluster, kind: Kind, body: dict[str, Any]) -> None:
    namespace = body["metadata"].get("namespace", "") if kind.namespaced else ""
    path = resource_path(kind, namespace, body["metadata"]["name"])
    status, answer = cluster.request("DELETE", path)
    assert status == 200, answer


@pytest.mark.parametrize(("kind", "sent"), _example_objects())
def test_every_example_object_is_accepted_unpruned(
    own_cluster: Cluster, installed: list[dict[str, Any]], kind: Kind, sent: dict[str, Any]
) -> None:
    read = _create(own_cluster, kind, sent)
    try:
        assert read["apiVersion"] == kind.api_version
        assert read["spec"] == sent["spec"]
        for key in ("labels", "annotations"):
            assert read["metadata"].get(key) == sent["metadata"].get(key)
        # koordpy decodes what the server keeps.
        codec.decode_object(read)
    finally:
        _delete(own_cluster, kind, read)


def test_the_examples_hold_custom_objects() -> None:
    kinds = {param.values[0].kind for param in _example_objects()}
    assert {"ElasticQuota", "Reservation", "Queue", "PyTorchJob", "NodeSLO"} <= kinds


def _reservation(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"namespace": "default", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": 2}}}]},
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
        },
    }


def test_a_misspelt_field_is_refused(own_cluster: Cluster, installed: list[dict[str, Any]]) -> None:
    kind = default_registry().resolve("reservations")
    body = _reservation("misspelt")
    body["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    status, answer = own_cluster.request("POST", resource_path(kind) + STRICT, body)
    assert status == 400, answer
    assert "resourcez" in answer["message"]
    body = _reservation("bad-quantity")
    body["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    status, answer = own_cluster.request("POST", resource_path(kind) + STRICT, body)
    assert status == 422, answer


def test_a_null_in_a_template_is_dropped_as_go_clients_send_it(
    own_cluster: Cluster, installed: list[dict[str, Any]]
) -> None:
    """Go clients write ``template.metadata.creationTimestamp: null``; the server drops it."""
    kind = default_registry().resolve("reservations")
    sent = _reservation("with-null")
    sent["spec"]["template"]["metadata"]["creationTimestamp"] = None
    read = _create(own_cluster, kind, sent)
    try:
        assert read["spec"]["template"]["metadata"] == {
            "namespace": "default",
            "labels": {"app": "web"},
        }
    finally:
        _delete(own_cluster, kind, read)


def test_status_goes_through_the_subresource_where_koordinator_has_one(
    own_cluster: Cluster, installed: list[dict[str, Any]]
) -> None:
    registry = default_registry()
    # Reservation: a status subresource, written as the scheduler writes it.
    kind = registry.resolve("reservations")
    read = _create(own_cluster, kind, _reservation("with-status"))
    try:
        at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        status = ReservationStatus(
            phase="Available",
            node_name="node-1",
            allocatable=ResourceList({"cpu": 2000, "memory": 4 << 30}),
            current_owners=(ObjectReference(namespace="default", name="web-1", uid="u-1"),),
            conditions=(
                Condition(
                    type="Ready",
                    status="True",
                    reason="Available",
                    last_probe_time=at,
                    last_transition_time=at,
                ),
            ),
        )
        wire = json.loads(codec.encode_json(status))
        path = resource_path(kind, name="with-status", subresource="status")
        code, answer = own_cluster.request("PUT", path + STRICT, {**read, "status": wire})
        assert code == 200, answer
        assert answer["status"] == wire
        # The main resource ignores a status change.
        code, answer = own_cluster.request(
            "PUT", resource_path(kind, name="with-status"), {**answer, "status": {"phase": "x"}}
        )
        assert code == 200, answer
        assert answer["status"] == wire
    finally:
        _delete(own_cluster, kind, read)
    # ElasticQuota: no subresource; the scheduler merge-patches status.used on the object.
    kind = registry.resolve("elasticquotas")
    sent = {
        "apiVersion": kind.api_version,
        "kind": "ElasticQuota",
        "metadata": {"name": "q", "namespace": "quota-status"},
        "spec": {"max": {"cpu": "8"}},
    }
    read = _create(own_cluster, kind, sent)
    try:
        path = resource_path(kind, "quota-status", "q")
        patch = {"status": {"used": {"cpu": "1500m", "memory": "1Gi"}}}
        code, answer = own_cluster.request(
            "PATCH", path + STRICT, patch, content_type="application/merge-patch+json"
        )
        assert code == 200, answer
        assert answer["status"] == patch["status"]
        code, _ = own_cluster.request("GET", path + "/status")
        assert code == 404
    finally:
        _delete(own_cluster, kind, read)


def test_kubectl_knows_the_short_names(
    own_cluster: Cluster, installed: list[dict[str, Any]]
) -> None:
    shown = own_cluster.kubectl("get", "pmj,rsv,qu", "-A", "-o", "name")
    assert shown.returncode == 0
    shown = own_cluster.kubectl("api-resources", "--api-group=scheduling.koordinator.sh")
    assert "podmigrationjobs" in shown.stdout
    assert "pmj" in shown.stdout
