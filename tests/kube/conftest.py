"""A real control plane (etcd, kube-apiserver, kube-controller-manager, kwok) for the session.

The binaries come from `make kube-bin`; nothing is built here. Without them the tests fail
rather than skip: CI must run everything.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from controller.kube.client import ClientOptions, KubeClient, connect
from hack.kube import Cluster, MissingBinariesError, paths, start_cluster, stop_cluster

#: What the session's cluster and the tests run.
NEEDED = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kubectl")


@pytest.fixture(scope="session")
def kube_binaries() -> dict[str, str]:
    """Each needed binary's path; fails (never skips) naming `make kube-bin` when one is missing."""
    try:
        found = paths.require(NEEDED)
    except MissingBinariesError as error:
        missing = str(error)
    else:
        return {name: str(path) for name, path in found.items()}
    pytest.fail(missing, pytrace=False)


@pytest.fixture(scope="session")
def kube_cluster(
    kube_binaries: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A running cluster: ``.kubeconfig``, ``.server``, ``.token`` (admin), ``.request()``."""
    directory = tmp_path_factory.mktemp("kube")
    cluster = start_cluster(directory, kwok=True, timeout=90.0)
    try:
        yield cluster
    finally:
        stop_cluster(directory)


#: Tests' own requests are not what is measured: no client-side limit to speak of.
FAST = ClientOptions(qps=1000.0, burst=1000)


@pytest.fixture
async def client(kube_cluster: Cluster) -> AsyncIterator[KubeClient]:
    """An admin client of the session's cluster."""
    async with await connect(kube_cluster.kubeconfig, options=FAST) as opened:
        yield opened


@pytest.fixture
async def namespace(client: KubeClient) -> AsyncIterator[str]:
    """A namespace of the test's own, deleted after it."""
    name = f"t-{secrets.token_hex(4)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await client.post("/api/v1/namespaces", json.dumps(body).encode())
    yield name
    await client.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="session")
def koordinator_crds(kube_cluster: Cluster, shared_dir: Path) -> list[str]:
    """Koordinator's v1.8.0 CRDs installed in the session's cluster (what a Koordinator user
    has), established; the names of the CRDs."""
    folder = shared_dir / "koordinator-crds" / "v1.8.0"
    # Server-side: the largest schemas are over the client-side apply annotation's limit.
    kube_cluster.kubectl("apply", "--server-side", "-f", str(folder), timeout=120.0)
    listed = kube_cluster.kubectl("get", "-f", str(folder), "-o", "name").stdout.split()
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *listed, timeout=90.0
    )
    return [name.partition("/")[2] for name in listed]
