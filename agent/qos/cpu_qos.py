"""CPU QoS by group identity: ``cpu.bvt_warp_ns`` per Koordinator QoS class (agent-spec §9.3,
``GroupIdentity``; the ``cpu-qos`` manual).

While the NodeSLO's ``resourceQOSStrategy`` turns some class's ``cpuQOS`` on (CPU policy
``groupIdentity``, the default), every active pod's directory gets its class's value: the
``koordinator.sh/qosClass`` label (LSE as LSR), else, as the manual says, BE for a BestEffort
pod and LS for the others. The QoS tier directories follow: burstable the LS value, besteffort
the BE value, the kubepods root (Guaranteed) 0. A class whose ``cpuQOS`` is off gets 0. Kernels
without the file (anything but Alibaba Cloud Linux / Anolis) are skipped by the writer.
Runs under the ``GroupIdentity`` gate.
"""

from __future__ import annotations

from typing import Final

from agent.cgroups.paths import qos_dir
from agent.cgroups.resources import Resource
from agent.qos.framework import CgroupWrite, LastPlan, NodeSnapshot, Outcome, PodState
from apis.qos import KubeQoS, QoSClass

__all__ = ["CpuQoS", "group_identity_class"]

NAME: Final = "cpu_qos"
_GATE: Final = "GroupIdentity"
_BVT: Final = Resource.CPU_BVT_WARP_NS


def group_identity_class(pod: PodState) -> str:
    """The class whose value the pod gets: its label's (LSE as LSR), else BE or LS."""
    qos = pod.label_or_kube_qos
    if qos is QoSClass.LSE:
        return str(QoSClass.LSR)
    if qos in (QoSClass.LSR, QoSClass.LS, QoSClass.BE, QoSClass.SYSTEM):
        return str(qos)
    return str(QoSClass.BE) if pod.kube_qos is KubeQoS.BEST_EFFORT else str(QoSClass.LS)


class CpuQoS:
    """Writes each pod's and QoS tier's group identity (see the module docstring)."""

    def __init__(self) -> None:
        self._last = LastPlan()

    @property
    def name(self) -> str:
        return NAME

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        settings = snapshot.settings
        identity = settings.group_identity
        if not identity.active or not settings.gate(_GATE):
            return Outcome()
        last = self._last.get(snapshot.pods, identity)
        if last is not None:
            return last
        bvt = identity.bvt
        tiers = (
            (KubeQoS.GUARANTEED, 0),
            (KubeQoS.BURSTABLE, bvt.get("LS", 0)),
            (KubeQoS.BEST_EFFORT, bvt.get("BE", 0)),
        )
        writes = [
            CgroupWrite(qos_dir(snapshot.cgroup, tier), _BVT, value, NAME, f"{tier} tier")
            for tier, value in tiers
        ]
        for pod in snapshot.pods:
            if pod.pod.is_terminated:
                continue
            qos = group_identity_class(pod)
            writes.append(CgroupWrite(pod.cgroup, _BVT, bvt.get(qos, 0), NAME, f"{qos} pod"))
        return self._last.put(snapshot.pods, (identity,), Outcome(writes=tuple(writes)))
