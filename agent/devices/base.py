"""Device probes and the Device object built from what they find.

A probe reports the accelerators of one kind (NVML, MetaX, Ascend, or a simulated profile) as
a :class:`ProbeResult`; :func:`build_device` turns the results of every probe into Koordinator's
``Device`` (``scheduling.koordinator.sh/v1alpha1``): named after the node, owned by the Node,
devices sorted by (type, minor), the vendor/model/driver labels of the probes. No device at
all is a valid report: an empty Device.

Probes are declared in :data:`PROBES` (name -> factory). A probe that finds no hardware or no
library raises :class:`agent.errors.Unsupported`; the agent then runs without it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, runtime_checkable

from agent.config import AgentConfig
from agent.errors import TransientError, Unsupported
from apis.constants import LABEL_GPU_DRIVER_VERSION, LABEL_GPU_MODEL, LABEL_GPU_VENDOR
from apis.core import Node
from apis.meta import ObjectMeta, OwnerReference
from apis.scheduling import Device, DeviceInfo, DeviceSpec

__all__ = [
    "LABEL_GPU_DRIVER_VERSION",
    "LABEL_GPU_MODEL",
    "LABEL_GPU_VENDOR",
    "PROBES",
    "DeviceProbe",
    "DeviceReading",
    "ProbeFactory",
    "ProbeObserver",
    "ProbeResult",
    "ThreadedProbe",
    "build_device",
    "probe_all",
    "probes_for",
    "run_probe",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """Live figures of one device for the metrics endpoint (``None``: not known)."""

    vendor: str
    model: str
    minor: int
    uuid: str
    healthy: bool
    utilization_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe found: devices plus the Device labels and annotations they imply, and
    the live readings of those devices (for metrics; they never change the Device object)."""

    devices: tuple[DeviceInfo, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    readings: tuple[DeviceReading, ...] = ()


@runtime_checkable
class DeviceProbe(Protocol):
    """Finds the devices of one kind. Blocking probes run in a thread (:class:`ThreadedProbe`).

    Optional members the agent honours: ``components()`` (long-running parts such as an event
    watcher, run supervised beside the reporter), ``on_change`` (a callable attribute the agent
    sets: call it when health changes so the Device is published at once) and ``aclose()``
    (awaited when the agent stops).
    """

    @property
    def name(self) -> str: ...

    async def probe(self) -> ProbeResult: ...


@dataclass(frozen=True, slots=True)
class ThreadedProbe:
    """A blocking probe function run in a worker thread."""

    name: str
    function: Callable[[], ProbeResult]

    async def probe(self) -> ProbeResult:
        return await asyncio.to_thread(self.function)


#: Builds a probe from the config and the node name; ``None`` when it does not apply.
ProbeFactory = Callable[[AgentConfig, str], DeviceProbe | None]


def _simulated(cfg: AgentConfig, node: str) -> DeviceProbe | None:
    from agent.devices import simulated  # the table names its modules lazily

    return simulated.from_config(cfg, node)


def _nvidia(cfg: AgentConfig, node: str) -> DeviceProbe | None:
    from agent.devices import nvidia  # NVML only on hosts with NVIDIA GPUs

    return nvidia.from_config(cfg, node)


def _metax(cfg: AgentConfig, node: str) -> DeviceProbe | None:
    from agent.devices import metax  # runs mx-smi only on hosts with MetaX GPUs

    return metax.from_config(cfg, node)


def _ascend(cfg: AgentConfig, node: str) -> DeviceProbe | None:
    from agent.devices import ascend  # runs npu-smi only on hosts with Ascend NPUs

    return ascend.from_config(cfg, node)


#: Every probe the agent knows, in the order they run.
PROBES: Final[Mapping[str, ProbeFactory]] = {
    "simulated": _simulated,
    "nvidia": _nvidia,
    "metax": _metax,
    "ascend": _ascend,
}


def probes_for(cfg: AgentConfig, node: str) -> list[DeviceProbe]:
    """The probes to run: the simulated profiles when configured, else every hardware probe."""
    if cfg.devices.simulate:
        probe = PROBES["simulated"](cfg, node)
        return [probe] if probe is not None else []
    found: list[DeviceProbe] = []
    for name, factory in PROBES.items():
        if name == "simulated":
            continue
        probe = factory(cfg, node)
        if probe is not None:
            found.append(probe)
    return found


#: Told of every probe run: the probe's name, its duration in seconds and the error it ended
#: with (``None`` when it succeeded). Runs that are cancelled are not reported.
ProbeObserver = Callable[[str, float, BaseException | None], None]


async def run_probe(
    probe: DeviceProbe, *, limit: float, observe: ProbeObserver | None = None
) -> ProbeResult:
    """Run one probe for at most ``limit`` seconds; overrunning is a :class:`TransientError`
    (caused by a :class:`TimeoutError`). ``observe`` is told how the run went."""
    started = time.monotonic()
    try:
        try:
            async with asyncio.timeout(limit):
                result = await probe.probe()
        except TimeoutError as err:
            raise TransientError(f"device probe {probe.name} took longer than {limit:g}s") from err
    except Exception as err:
        if observe is not None:
            observe(probe.name, time.monotonic() - started, err)
        raise
    if observe is not None:
        observe(probe.name, time.monotonic() - started, None)
    return result


async def probe_all(
    probes: Iterable[DeviceProbe], *, limit: float, observe: ProbeObserver | None = None
) -> list[ProbeResult]:
    """Run every probe in order (each for at most ``limit`` seconds); an :class:`Unsupported`
    probe is logged and left out. ``observe`` is told of every run."""
    results: list[ProbeResult] = []
    for probe in probes:
        try:
            results.append(await run_probe(probe, limit=limit, observe=observe))
        except Unsupported as err:
            _log.info(
                "device probe %s unsupported: %s", probe.name, err, extra={"probe": probe.name}
            )
    return results


def _order(device: DeviceInfo) -> tuple[str, int, str]:
    return (device.type, device.minor if device.minor is not None else -1, device.id)


def build_device(node: Node, results: Sequence[ProbeResult]) -> Device:
    """The Device object of ``node`` from the probe results (later results win on labels)."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    devices: list[DeviceInfo] = []
    for result in results:
        devices.extend(result.devices)
        labels.update(result.labels)
        annotations.update(result.annotations)
    owner = OwnerReference(
        api_version="v1",
        kind="Node",
        name=node.metadata.name,
        uid=node.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )
    return Device(
        metadata=ObjectMeta(
            name=node.metadata.name,
            labels=labels,
            annotations=annotations,
            owner_references=(owner,),
        ),
        spec=DeviceSpec(devices=tuple(sorted(devices, key=_order))),
    )
