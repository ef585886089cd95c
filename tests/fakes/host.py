"""``FakeHost``: a host filesystem under a temporary directory (root injection).

The agent reads everything through ``HostPaths(root=...)`` and the cgroup root, so tests point
both at a tree built here instead of patching ``open``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.config import AgentConfig, CgroupSection, HostPaths

__all__ = ["MOUNTINFO_HYBRID", "MOUNTINFO_V1", "MOUNTINFO_V2", "FakeHost"]

_BASE = (
    "22 1 252:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw,errors=remount-ro\n"
    "23 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "24 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
)

#: A legacy (v1) host: systemd's named hierarchy plus controllers, cpu and cpuacct co-mounted.
MOUNTINFO_V1 = _BASE + (
    "25 23 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "26 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup "
    "cgroup rw,xattr,name=systemd\n"
    "28 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup "
    "cgroup rw,cpu,cpuacct\n"
    "29 25 0:27 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:14 - cgroup "
    "cgroup rw,cpuset\n"
    "30 25 0:28 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup "
    "cgroup rw,memory\n"
)

#: systemd's hybrid mode: the v1 controllers plus an empty cgroup2 tree at ``unified``.
MOUNTINFO_HYBRID = MOUNTINFO_V1 + (
    "27 25 0:25 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:11 - cgroup2 "
    "cgroup2 rw,nsdelegate\n"
)

#: A unified (v2) host.
MOUNTINFO_V2 = _BASE + (
    "25 23 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)


class FakeHost:
    """A host root (``root``) and a cgroup filesystem root (``cgroup_root``) under ``base``."""

    def __init__(self, base: Path) -> None:
        self.root = base / "host"
        self.cgroup_root = base / "cgroup"
        self.root.mkdir(parents=True, exist_ok=True)
        self.cgroup_root.mkdir(parents=True, exist_ok=True)

    @property
    def paths(self) -> HostPaths:
        return HostPaths(root=str(self.root))

    @property
    def cgroup(self) -> CgroupSection:
        return CgroupSection(root=str(self.cgroup_root))

    def config(self) -> AgentConfig:
        return AgentConfig(host=self.paths, cgroup=self.cgroup)

    def write(self, host_path: str, text: str) -> Path:
        """Write a file at a host path (``/etc/os-release``)."""
        target = self.root / host_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return target

    def write_mountinfo(self, text: str) -> None:
        self.write("/proc/self/mountinfo", text)

    def write_kubelet_config(self, text: str) -> None:
        self.write("/var/lib/kubelet/config.yaml", text)

    def mkdir_cgroup(self, relative: str) -> Path:
        """Create a cgroup directory relative to the cgroup root (``cpu,cpuacct/kubepods``)."""
        target = self.cgroup_root / relative
        target.mkdir(parents=True, exist_ok=True)
        return target

    def write_cgroup(self, relative_dir: str, name: str, value: str) -> Path:
        target = self.mkdir_cgroup(relative_dir) / name
        target.write_text(value, encoding="utf-8")
        return target

    def use_v1(self) -> None:
        self.write_mountinfo(MOUNTINFO_V1)
        for controller in ("cpu,cpuacct", "cpuset", "memory", "systemd"):
            self.mkdir_cgroup(controller)

    def use_hybrid(self) -> None:
        self.use_v1()
        self.write_mountinfo(MOUNTINFO_HYBRID)
        self.mkdir_cgroup("unified")

    def use_v2(self) -> None:
        self.write_mountinfo(MOUNTINFO_V2)
        self.write_cgroup("", "cgroup.controllers", "cpuset cpu io memory hugetlb pids\n")

    # --- usage files (metrics) ----------------------------------------------------------------

    def write_proc_stat(self, cpus: Sequence[tuple[int, int]]) -> None:
        """``/proc/stat`` with one ``(used, idle)`` jiffies pair per CPU: the used jiffies go
        to ``user``, the ``cpu`` line sums them (``steal`` is never counted: it gets 7)."""
        used = sum(u for u, _ in cpus)
        idle = sum(i for _, i in cpus)
        lines = [f"cpu  {used} 0 0 {idle} 0 0 0 7 0 0"]
        lines += [f"cpu{n} {u} 0 0 {i} 0 0 0 7 0 0" for n, (u, i) in enumerate(cpus)]
        lines += ["intr 12345 0 0", "ctxt 678", "btime 1700000000", "processes 4321"]
        self.write("/proc/stat", "\n".join(lines) + "\n")

    def write_meminfo(self, *, total: int, free: int, available: int) -> None:
        """``/proc/meminfo`` from byte counts (written in kB, as the kernel does)."""
        self.write(
            "/proc/meminfo",
            f"MemTotal:       {total // 1024} kB\nMemFree:        {free // 1024} kB\n"
            f"MemAvailable:   {available // 1024} kB\nBuffers:           1024 kB\n"
            "Cached:          204800 kB\n",
        )

    def write_pressure(
        self,
        relative_dir: str | None,
        resource: str,
        some: tuple[float, float, float],
        full: tuple[float, float, float] | None = None,
    ) -> None:
        """A PSI file: the node's ``/proc/pressure/<resource>`` when ``relative_dir`` is None,
        else ``<resource>.pressure`` in that cgroup directory (relative to the cgroup root)."""
        text = "some avg10={:.2f} avg60={:.2f} avg300={:.2f} total=12345\n".format(*some)
        if full is not None:
            text += "full avg10={:.2f} avg60={:.2f} avg300={:.2f} total=678\n".format(*full)
        if relative_dir is None:
            self.write(f"/proc/pressure/{resource}", text)
        else:
            self.write_cgroup(relative_dir, f"{resource}.pressure", text)
