"""A private kubepods sub-tree on this machine's real cgroup v1, with real busy processes.

``KubepodsTree`` creates ``/sys/fs/cgroup/<controller>/koordpy-test-<random>/kubepods/...`` in
the cpu, cpuacct, cpuset and memory hierarchies, starts busy-looping processes inside pod
containers, and tears everything down (processes killed, directories removed bottom-up) in
``close()``, which the fixture always calls.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
BUSY = "while True:\n    pass\n"


def require_real_cgroup_v1() -> None:
    """Skip (with the reason) unless root with writable v1 cpu/cpuacct/cpuset/memory."""
    if os.geteuid() != 0:
        pytest.skip(reason="needs root to create cgroups (CI runs as root)")
    for controller in CONTROLLERS:
        hierarchy = ROOT / controller
        if not (hierarchy / "cgroup.procs").exists() or not os.access(hierarchy, os.W_OK):
            why = f"cgroup v1 {controller} hierarchy not mounted writable at {hierarchy}"
            pytest.skip(reason=why)


@dataclass
class KubepodsTree:
    """The sub-tree and its processes; ``parent`` is the kubepods parent for the agent."""

    prefix: str = field(default_factory=lambda: f"koordpy-test-{secrets.token_hex(4)}")
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    @property
    def parent(self) -> str:
        return f"{self.prefix}/kubepods"

    def path(self, controller: str, cgroup: str) -> Path:
        return ROOT / controller / cgroup

    def mkdir(self, cgroup: str) -> None:
        """Create ``cgroup`` (relative to the hierarchy root) in every controller."""
        parts = cgroup.split("/")
        for depth in range(1, len(parts) + 1):
            partial = "/".join(parts[:depth])
            if partial in self.created:
                continue
            for controller in CONTROLLERS:
                target = self.path(controller, partial)
                target.mkdir(exist_ok=True)
                if controller == "cpuset":
                    parent = target.parent
                    for name in ("cpuset.mems", "cpuset.cpus"):
                        (target / name).write_text((parent / name).read_text())
            self.created.append(partial)

    def read(self, controller: str, cgroup: str, name: str) -> str:
        return self.path(controller, cgroup).joinpath(name).read_text().strip()

    def write(self, controller: str, cgroup: str, name: str, value: str) -> None:
        self.path(controller, cgroup).joinpath(name).write_text(value)

    def busy(self, cgroup: str, count: int = 1) -> list[int]:
        """Start ``count`` busy processes inside ``cgroup`` (every controller)."""
        self.mkdir(cgroup)
        pids = []
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, "-c", BUSY],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.processes.append(process)
            for controller in CONTROLLERS:
                self.write(controller, cgroup, "cgroup.procs", str(process.pid))
            pids.append(process.pid)
        return pids

    def stop(self, pids: list[int]) -> None:
        for process in self.processes:
            if process.pid in pids and process.poll() is None:
                process.kill()
                process.wait(timeout=10)

    def cpu_usage_ns(self, cgroup: str) -> int:
        return int(self.read("cpuacct", cgroup, "cpuacct.usage"))

    def measure_millicores(self, cgroup: str, seconds: float = 1.0) -> float:
        """CPU the cgroup used over ``seconds``, in millicores."""
        start, began = self.cpu_usage_ns(cgroup), time.monotonic()
        time.sleep(seconds)
        used, elapsed = self.cpu_usage_ns(cgroup) - start, time.monotonic() - began
        return used / elapsed / 1e6

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for cgroup in sorted(self.created, key=lambda c: c.count("/"), reverse=True):
            for controller in CONTROLLERS:
                target = self.path(controller, cgroup)
                if not target.exists():
                    continue
                for attempt in range(50):
                    try:
                        target.rmdir()
                        break
                    except OSError:
                        if attempt == 49:
                            raise
                        time.sleep(0.1)


@contextlib.contextmanager
def kubepods_tree() -> Iterator[KubepodsTree]:
    require_real_cgroup_v1()
    tree = KubepodsTree()
    tree.mkdir(tree.parent)
    try:
        yield tree
    finally:
        tree.close()
