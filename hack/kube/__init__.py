"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager.

``make kube-bin`` builds the binaries into a cache outside the repository
(:mod:`hack.kube.paths` finds it); :func:`start_cluster` runs them on loopback in a directory
and :func:`stop_cluster` stops them. ``python -m hack.kube up|down --dir DIR`` does the same
from a shell.
"""

from __future__ import annotations

from hack.kube.cluster import Cluster, ClusterError, start_cluster, stop_cluster
from hack.kube.paths import MissingBinariesError, bin_dir, binary, cache_dir

__all__ = [
    "Cluster",
    "ClusterError",
    "MissingBinariesError",
    "bin_dir",
    "binary",
    "cache_dir",
    "start_cluster",
    "stop_cluster",
]
