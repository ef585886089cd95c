"""A real control plane (etcd, kube-apiserver, kube-controller-manager, kwok) for the session.

The binaries come from `make kube-bin`; nothing is built here. Without them the tests fail
rather than skip: CI must run everything.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
