"""CFS quota "unbinding" of cpuset-bound pods.

A pod the scheduler bound to CPUs (non-empty ``scheduling.koordinator.sh/resource-status``
cpuset: LSE and LSR pods) already owns those CPUs; a CFS quota on top would only throttle it.
So its pod and container directories get ``cpu.cfs_quota_us = -1`` (``max`` on v2), the pod
directory first (raising a limit goes parent before child).

The agent switch ``disable_unset_cpu_quota`` (v1.8's ``-disable-unset-cpu-quota``) turns this
off: quotas of bound pods are then left to whoever set them. Runs under the
``CPUSetAllocator`` gate, like the cpuset rules it belongs with.
"""

from __future__ import annotations

from typing import Final

from agent.cgroups.resources import UNLIMITED, Resource
from agent.qos.framework import CgroupWrite, LastPlan, NodeSnapshot, Outcome

__all__ = ["CpuQuotaUnbind"]

NAME: Final = "cpu_unbind"
_GATE: Final = "CPUSetAllocator"


class CpuQuotaUnbind:
    """Sets the CFS quota of cpuset-bound pods and their containers to unlimited."""

    def __init__(self) -> None:
        #: The writes are a function of the pod states alone.
        self._last = LastPlan()

    @property
    def name(self) -> str:
        return NAME

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        settings = snapshot.settings
        if settings.disable_unset_cpu_quota or not settings.gate(_GATE):
            return Outcome()
        last = self._last.get(snapshot.pods)
        if last is not None:
            return last
        writes: list[CgroupWrite] = []
        for pod in snapshot.pods:
            if not pod.cpuset or pod.pod.is_terminated:
                continue
            reason = f"{pod.qos or 'pod'} bound to cpus {pod.cpuset}"
            writes.append(CgroupWrite(pod.cgroup, Resource.CPU_QUOTA, UNLIMITED, NAME, reason))
            writes.extend(
                CgroupWrite(c.cgroup, Resource.CPU_QUOTA, UNLIMITED, NAME, reason)
                for c in pod.containers
                if c.cgroup is not None
            )
        return self._last.put(snapshot.pods, (), Outcome(writes=tuple(writes)))
