"""What the node-side QoS manual pages' replays share (``cpu-qos``, ``cpu-burst``): a page's
pod as the kubelet lists it, a fake cgroup v1 host (systemd driver) for the agent, and
``koordpy agent plan -o json`` run there with the pods and the NodeSLO the page's ConfigMap
renders to."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent import cli as agent_cli
from apis import codec
from koordpy import cli
from tests.fakes.host import FakeHost

__all__ = ["agent_host", "as_listed", "planned_writes"]

_PROC_STAT = "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 50 0 50 500 0 0 0 0 0 0\n"
_MEMINFO = (
    "MemTotal:        8000000 kB\nMemFree:         5000000 kB\n"
    "MemAvailable:    6000000 kB\nBuffers:          100000 kB\n"
    "Cached:           900000 kB\nShmem:             10000 kB\n"
    "SReclaimable:      50000 kB\nActive:          1000000 kB\n"
    "Inactive:         800000 kB\n"
)


def as_listed(
    manifest: str, uid: str, kube_qos: str, *, containers: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """The page's pod (one manifest) as the kubelet lists it: in ``default`` with ``uid`` on
    ``node-1``, Running in Kubernetes QoS class ``kube_qos``, with the ``containers``
    statuses (none when not given)."""
    [pod] = codec.load_yaml_documents(manifest)
    pod["metadata"].update(namespace="default", uid=uid)
    pod["spec"]["nodeName"] = "node-1"
    pod["status"] = {"phase": "Running", "qosClass": kube_qos}
    if containers:
        pod["status"]["containerStatuses"] = list(containers)
    listed: dict[str, Any] = pod
    return listed


def agent_host(tmp_path: Path, *, cpus: int = 1) -> FakeHost:
    """A cgroup v1 host under ``tmp_path`` with ``cpus`` CPUs online (one core each, one
    socket), 8 GB of memory and no cgroup files yet."""
    host = FakeHost(tmp_path)
    host.use_v1()
    host.write("/proc/stat", _PROC_STAT)
    host.write("/proc/meminfo", _MEMINFO)
    host.write("/sys/devices/system/cpu/online", "0\n" if cpus == 1 else f"0-{cpus - 1}\n")
    if cpus > 1:
        for cpu in range(cpus):
            host.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id", f"{cpu}\n")
            host.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", "0\n")
    return host


def planned_writes(
    tmp_path: Path, host: FakeHost, nodeslo: str, pods: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The writes ``koordpy agent plan -o json`` plans on ``host`` for ``node-1`` running
    ``pods`` (as listed) under the NodeSLO manifest ``nodeslo``."""
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[host]\nroot = "{host.root}"\n[cgroup]\nroot = "{host.cgroup_root}"\n',
        encoding="utf-8",
    )
    pods_file = tmp_path / "pods.yaml"
    items = list(pods)
    pods_file.write_text(codec.dump_yaml({"apiVersion": "v1", "kind": "PodList", "items": items}))
    slo_file = tmp_path / "nodeslo.yaml"
    slo_file.write_text(nodeslo)
    args = cli.build_parser().parse_args(
        [
            *("agent", "plan", "--config", str(config), "--node-name", "node-1"),
            *("--pods-file", str(pods_file), "--nodeslo-file", str(slo_file), "-o", "json"),
        ]
    )
    out = io.StringIO()
    assert agent_cli.main(args, out=out) == 0
    writes: list[dict[str, Any]] = json.loads(out.getvalue())["writes"]
    return writes
