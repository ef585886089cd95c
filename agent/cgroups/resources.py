"""The cgroup resources the agent reads and writes, named after their cgroup v1 file.

A :class:`Resource` is the agent's own name for one control; the table in this module maps it
to the v1 subsystem and file and to its v2 twin, with the unit conversion between them
(``cpu.cfs_quota_us`` <-> first field of ``cpu.max``, ``cpu.shares`` <-> ``cpu.weight``...).
Values inside the agent are always in v1 units: quota/period/burst in microseconds (-1 =
unlimited), shares, bytes (-1 = unlimited), :class:`~agent.cgroups.cpuset.CpuSet`.
"""

from __future__ import annotations

import enum

__all__ = ["Resource"]


class Resource(enum.StrEnum):
    """Cgroup controls, by their v1 file name."""

    CPU_QUOTA = "cpu.cfs_quota_us"
    CPU_PERIOD = "cpu.cfs_period_us"
    CPU_BURST = "cpu.cfs_burst_us"
    CPU_SHARES = "cpu.shares"
    CPU_STAT = "cpu.stat"
    CPU_IDLE = "cpu.idle"
    CPUACCT_USAGE = "cpuacct.usage"
    CPUSET_CPUS = "cpuset.cpus"
    CPUSET_MEMS = "cpuset.mems"
    MEMORY_LIMIT = "memory.limit_in_bytes"
    MEMORY_USAGE = "memory.usage_in_bytes"
    MEMORY_STAT = "memory.stat"
    MEMORY_MIN = "memory.min"
    MEMORY_LOW = "memory.low"
    MEMORY_HIGH = "memory.high"
    PROCS = "cgroup.procs"
    CPU_PRESSURE = "cpu.pressure"
    MEMORY_PRESSURE = "memory.pressure"
    IO_PRESSURE = "io.pressure"
