"""What the Kubernetes-mode tests share: polling the cluster, and ``koordpy controller run``
as a process of its own.

The probes read the cluster as admin through :meth:`hack.kube.Cluster.request`; waiting is
polling with a deadline, since the thing awaited happens in other processes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from hack.kube import Cluster

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


class ControllerProcess:
    """``python -m koordpy controller run --kubeconfig`` as a user starts it, with ``config``
    (TOML) as its ``--config`` when given; its output in ``<directory>/<name>.log``."""

    def __init__(
        self,
        kubeconfig: Path,
        directory: Path,
        *,
        name: str = "koordpy-controller",
        config: str = "",
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        argv = [sys.executable, "-m", "koordpy", "controller", "run"]
        if config:
            path = directory / f"{name}.toml"
            path.write_text(config)
            argv += ["--config", str(path)]
        argv += ["--kubeconfig", str(kubeconfig), "--metrics-address", "off"]
        self.log_path = directory / f"{name}.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)

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
