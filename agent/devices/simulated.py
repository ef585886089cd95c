"""Simulated accelerators for demos and tests, one profile per kind of node.

Every figure comes from the project's device notes: Koordinator's Device resources per vendor
(``gpu-core`` 100, ``gpu-memory`` in bytes, ``gpu-memory-ratio`` 100; Ascend ``npu-core`` /
``npu-cpu`` / ``npu-dvpp``), HAMi's Ascend templates (910B3: 65,536 MiB, 20 AI cores, 7 AI CPUs;
310P3: 24,576 MiB, 8 AI cores, 7 AI CPUs), recorded ``mx-smi``/``npu-smi`` output (bus IDs,
card memory, NUMA affinity) and the H100 80GB HBM3's memory as NVML reports it (81,559 MiB).
What the notes do not give is left out (no driver version; NUMA unknown = -1), except the
PCI placement of the simulated H100s, which is synthetic: two GPUs per PCIe switch, four per
socket.

UUIDs are deterministic (from the node name and the device index), so a restarted simulation
reports the same devices.

Live readings (for the device metrics) are those of an idle, healthy device: utilisation 0,
no memory in use, the profile's memory as the total. Temperature and power are not simulated
(left unknown) rather than invented.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from agent.config import AgentConfig
from agent.devices.base import DeviceReading, ProbeResult
from agent.errors import ConfigError
from apis import constants as k
from apis.resources import ResourceList
from apis.scheduling import DeviceInfo, DeviceTopology

__all__ = [
    "ANNOTATION_SGPU_QOS_POLICIES",
    "PROFILES",
    "Profile",
    "SimulatedProbe",
    "Slot",
    "from_config",
    "probe_for",
    "profile",
    "simulate",
]

MIB: Final = 1 << 20

#: Device annotation listing the sGPU QoS policies a MetaX node in sGPU mode accepts (the pod
#: annotation ``metax-tech.com/sgpu-qos-policy`` picks one).
ANNOTATION_SGPU_QOS_POLICIES: Final = k.ANNOTATION_SGPU_QOS_POLICIES

_UUIDS = uuid.UUID("6f1d6a52-8f0e-4d7b-9a51-6b1b3c2f4e10")


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one device sits: PCI address, NUMA node, socket, PCIe root (-1/"" = unknown)."""

    bus_id: str
    numa: int = -1
    socket: int = -1
    pcie: str = ""


@dataclass(frozen=True, slots=True)
class Profile:
    """One simulated kind of node: identical devices in the given slots."""

    name: str
    vendor: str
    model: str
    resources: Mapping[str, int]
    slots: tuple[Slot, ...]
    #: UUID prefix as the vendor tool prints it (``GPU-`` for NVIDIA and MetaX).
    uuid_prefix: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def _gpu(memory_mib: int, **extra: int) -> dict[str, int]:
    return {
        k.RESOURCE_GPU_CORE: 100,
        k.RESOURCE_GPU_MEMORY: memory_mib * MIB,
        k.RESOURCE_GPU_MEMORY_RATIO: 100,
        **extra,
    }


def _npu(memory_mib: int, *, aicore: int, aicpu: int) -> dict[str, int]:
    return {
        k.RESOURCE_HUAWEI_NPU_CORE: aicore,
        k.RESOURCE_HUAWEI_NPU_CPU: aicpu,
        k.RESOURCE_HUAWEI_NPU_DVPP: 100,
        k.RESOURCE_GPU_MEMORY: memory_mib * MIB,
        k.RESOURCE_GPU_MEMORY_RATIO: 100,
    }


def _h100_slots() -> tuple[Slot, ...]:
    slots = []
    for index in range(8):
        socket = index // 4
        switch = index // 2
        slots.append(
            Slot(
                bus_id=f"0000:{0x10 * (index + 1):02x}:00.0",
                numa=socket,
                socket=socket,
                pcie=f"pci0000:{0x10 * (2 * switch + 1) - 1:02x}",
            )
        )
    return tuple(slots)


# MetaX C500 x8, bus IDs from ``mx-smi`` 2.2.9; ``mx-smi topo -n``: every GPU on NUMA node 0,
# GPUs 0-3 and 4-7 each behind one PCIe switch (PIX to the same NICs).
_C500_BUSES = ("0e", "0f", "10", "12", "35", "36", "37", "38")
# Ascend 910B3 x8, bus IDs from ``npu-smi info``.
_910B3_BUSES = ("c1", "c2", "81", "82", "01", "02", "41", "42")
# Atlas 300I Duo x4, two 310P3 chips per card sharing the card's bus ID (``npu-smi info``).
_300I_DUO_BUSES = ("01", "03", "81", "84")

PROFILES: Final[Mapping[str, Profile]] = {
    profile.name: profile
    for profile in (
        Profile(
            name="nvidia-h100",
            vendor=k.GPU_VENDOR_NVIDIA,
            model="H100-80GB-HBM3",
            resources=_gpu(81559),
            slots=_h100_slots(),
            uuid_prefix="GPU-",
        ),
        Profile(
            name="metax-c500-sgpu",
            vendor=k.GPU_VENDOR_METAX,
            model="C500",
            resources=_gpu(65536, **{k.RESOURCE_METAX_SGPU: 16}),
            slots=tuple(
                Slot(
                    bus_id=f"0000:{bus}:00.0",
                    numa=0,
                    socket=0,
                    pcie="pci0000:0e" if index < 4 else "pci0000:35",
                )
                for index, bus in enumerate(_C500_BUSES)
            ),
            uuid_prefix="GPU-",
            annotations={ANNOTATION_SGPU_QOS_POLICIES: ",".join(k.SGPU_QOS_POLICIES)},
        ),
        Profile(
            name="ascend-910b3",
            vendor=k.GPU_VENDOR_HUAWEI,
            model="Ascend-910B3",
            resources=_npu(65536, aicore=20, aicpu=7),
            slots=tuple(Slot(bus_id=f"0000:{bus}:00.0") for bus in _910B3_BUSES),
        ),
        Profile(
            name="ascend-310p3-300i-duo",
            vendor=k.GPU_VENDOR_HUAWEI,
            model=k.MODEL_ASCEND_310P3_300I_DUO,
            resources=_npu(24576, aicore=8, aicpu=7),
            slots=tuple(Slot(bus_id=f"0000:{bus}:00.0") for bus in _300I_DUO_BUSES for _ in (0, 1)),
        ),
    )
}


def device_uuid(profile: Profile, node: str, index: int) -> str:
    return f"{profile.uuid_prefix}{uuid.uuid5(_UUIDS, f'{node}/{profile.name}/{index}')}"


def simulate(profiles: Sequence[Profile], node: str) -> ProbeResult:
    """The devices of ``profiles`` on ``node``; minors run on across profiles.

    Vendor and model labels come from the first profile (as Koordinator labels a Device from
    its first device).
    """
    devices: list[DeviceInfo] = []
    readings: list[DeviceReading] = []
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for profile in profiles:
        resources = ResourceList(profile.resources)
        for index, slot in enumerate(profile.slots):
            minor = len(devices)
            uuid_ = device_uuid(profile, node, index)
            readings.append(
                DeviceReading(
                    vendor=profile.vendor,
                    model=profile.model,
                    minor=minor,
                    uuid=uuid_,
                    healthy=True,
                    utilization_percent=0.0,
                    memory_used_bytes=0,
                    memory_total_bytes=profile.resources.get(k.RESOURCE_GPU_MEMORY),
                )
            )
            devices.append(
                DeviceInfo(
                    type=k.DEVICE_TYPE_GPU,
                    id=uuid_,
                    minor=minor,
                    health=True,
                    resources=resources,
                    topology=DeviceTopology(
                        socket_id=slot.socket,
                        node_id=slot.numa,
                        pcie_id=slot.pcie,
                        bus_id=slot.bus_id,
                    ),
                )
            )
        labels.update({k: v for k, v in profile.labels.items() if k not in labels})
        annotations.update({k: v for k, v in profile.annotations.items() if k not in annotations})
    if profiles:
        labels[k.LABEL_GPU_VENDOR] = profiles[0].vendor
        labels[k.LABEL_GPU_MODEL] = profiles[0].model
    return ProbeResult(
        devices=tuple(devices),
        labels=labels,
        annotations=annotations,
        readings=tuple(readings),
    )


@dataclass(frozen=True, slots=True)
class SimulatedProbe:
    """Reports the devices of fixed profiles; never touches hardware."""

    profiles: tuple[Profile, ...]
    node: str
    name: str = "simulated"

    async def probe(self) -> ProbeResult:
        return simulate(self.profiles, self.node)


def profile(name: str) -> Profile:
    """The profile called ``name``; :class:`ConfigError` naming the known ones otherwise."""
    found = PROFILES.get(name)
    if found is None:
        known = ", ".join(PROFILES)
        raise ConfigError(
            f"unknown simulated device profile {name!r} in [devices] (known: {known})"
        )
    return found


def probe_for(node: str, *profiles: str) -> SimulatedProbe:
    """A probe reporting the named profiles on ``node`` (``probe_for("sim-1", "nvidia-h100")``)."""
    return SimulatedProbe(tuple(profile(name) for name in profiles), node)


def from_config(cfg: AgentConfig, node: str) -> SimulatedProbe | None:
    """The probe for ``[devices] simulate``; ``None`` when it lists nothing."""
    if not cfg.devices.simulate:
        return None
    return probe_for(node, *cfg.devices.simulate)
