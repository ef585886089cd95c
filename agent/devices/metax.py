"""MetaX GPUs (C500, C550, N260...) from ``mx-smi``, with sGPU slicing.

``mx-smi`` prints one box table with two text rows per GPU. Its columns moved between
releases, and every one of these layouts is read:

* 2.1.6: ``GPU NAME | Bus-id | GPU-Util`` over ``Temp Power | Memory-Usage |`` (no power cap);
* 2.1.12: ``Temp Pwr:Usage/Cap`` (the cap is ``NA`` inside a pod);
* 2.2.4: adds ``GPU-State`` under ``GPU-Util``;
* 2.2.8: ``GPU NAME Persistence-M`` and ``GPU-Util sGPU-M`` (``Native``) plus ``Perf``;
* 2.2.9 and 2.3.1: four columns, ``Board Name | GPU Persist-M | Bus-id | GPU-Util sGPU-M``
  (board index and GPU index apart; ``sGPU-M`` ``Disabled``/``Enabled``).

Inside a container the GPUs are renumbered from 0; the bus ID still names the card. Names
are ``MetaX C500`` in newer tables and ``MXC500`` in 2.1.6 and ``mx-smi -L``; both give the
model label ``C500``. The binary name ``mx-smi`` is also used by another vendor's tool, so the
output must carry MetaX's banner.

A full card reports ``koordinator.sh/gpu-core: 100``, ``gpu-memory`` (bytes) and
``gpu-memory-ratio: 100``. A card in sGPU mode (``sGPU-M Enabled``) adds
``metax-tech.com/sgpu: 16`` (MetaX slices a card into at most 16 sGPUs), and the Device then
lists the sGPU QoS policies pods may ask for (``metax-tech.com/sgpu-qos-policy``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from agent.config import AgentConfig
from agent.devices import commands, pci
from agent.devices.base import DeviceReading, ProbeResult
from agent.devices.simulated import ANNOTATION_SGPU_QOS_POLICIES
from agent.errors import TransientError
from apis import constants as k
from apis.resources import ResourceList
from apis.scheduling import DeviceCondition, DeviceInfo, DeviceTopology

__all__ = [
    "MX_SMI",
    "SGPUS_PER_CARD",
    "MetaxCard",
    "MetaxListing",
    "MetaxProbe",
    "MetaxReport",
    "build_result",
    "from_config",
    "model_of",
    "parse_mx_smi",
    "parse_mx_smi_list",
]

_log = logging.getLogger(__name__)

#: The MetaX management tool, looked up on ``PATH``.
MX_SMI: Final = "mx-smi"
#: sGPUs one card is sliced into in sGPU mode (MetaX's maximum).
SGPUS_PER_CARD: Final = 16
#: Seconds one ``mx-smi`` run may take.
COMMAND_TIMEOUT: Final = 10.0

MIB: Final = 1 << 20

_BUS_ID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_MEMORY = re.compile(r"(\d+)\s*/\s*(\d+)\s*MiB")
_TEMPERATURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)C\b")
_POWER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)W(?:\s*/\s*(?:(\d+(?:\.\d+)?)W|NA))?")
_UTILIZATION = re.compile(r"^(\d+)%$")
_NAME = re.compile(r"^(?:MetaX\s+|MX)([A-Z]\d+\w*)$")
_LISTING = re.compile(
    r"^GPU#(?P<index>\d+)\s+(?P<name>\S+)\s+(?P<bus>\S+)\s+(?P<state>.*?)\s*"
    r"\(UUID:\s*(?P<uuid>[^)\s]+)\s*\)\s*$"
)


@dataclass(frozen=True, slots=True)
class MetaxCard:
    """One GPU row pair of the ``mx-smi`` table."""

    #: GPU index as ``mx-smi`` numbers it (from 0 again inside a container).
    index: int
    #: Device name as printed (``MetaX C500``, ``MXC500``).
    name: str
    #: PCI address, lower case (``0000:0e:00.0``).
    bus_id: str
    memory_used_bytes: int
    memory_total_bytes: int
    #: Board index (2.2.9 and later print it apart from the GPU index).
    board: int | None = None
    utilization_percent: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_cap_watts: float | None = None
    #: ``sGPU-M`` column: ``Disabled``, ``Enabled``, ``Native``; ``""`` before 2.2.8.
    sgpu_mode: str = ""
    #: ``GPU-State`` column (``Available``); ``""`` before 2.2.4.
    state: str = ""

    @property
    def sgpu(self) -> bool:
        """Whether the card is sliced into sGPUs."""
        return self.sgpu_mode.lower() == "enabled"


@dataclass(frozen=True, slots=True)
class MetaxReport:
    """What one ``mx-smi`` run showed."""

    cards: tuple[MetaxCard, ...]
    #: ``MX-SMI 2.2.9`` in the table banner.
    smi_version: str = ""
    #: ``Kernel Mode Driver Version`` (KMD).
    driver_version: str = ""
    #: ``MACA Version`` (the SDK); ``unknown`` when it is not installed.
    maca_version: str = ""
    bios_version: str = ""
    #: ``Attached GPUs``; ``None`` when the preamble is missing.
    attached: int | None = None
    #: Rows that could not be read (each left out), in words.
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MetaxListing:
    """One line of ``mx-smi -L``."""

    index: int
    name: str
    bus_id: str
    #: ``Available``, or why not (``Not Available(...)``).
    state: str
    uuid: str


def model_of(name: str) -> str | None:
    """The model label of a MetaX device name (``MetaX C500`` and ``MXC500`` -> ``C500``);
    ``None`` for a name that is not a MetaX GPU's."""
    found = _NAME.match(name.strip())
    return found.group(1) if found else None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _value(text: str, pattern: str) -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else ""


def _table(lines: Sequence[str]) -> tuple[str, list[list[str]]]:
    """The column headings and the data rows (each a list of cells) of the GPU table."""
    start = next((i for i, line in enumerate(lines) if "Bus-id" in line and "|" in line), None)
    if start is None:
        raise commands.UnexpectedOutput("mx-smi printed no GPU table (no Bus-id heading)")
    heading: list[str] = []
    groups: list[list[str]] = []
    rows: list[str] = []
    in_data = False
    for raw in lines[start:]:
        line = raw.strip()
        if not in_data:
            if line.startswith(("|==", "+==")):
                in_data = True
            elif line.startswith("|"):
                heading.append(line)
            continue
        if line.startswith("|"):
            rows.append(line)
        elif line.startswith("+"):
            groups.append(rows)
            rows = []
        else:
            break  # a blank line ends the table; the process table follows it
    groups.append(rows)
    return " ".join(heading), [group for group in groups if group]


def _parse_card(heading: str, first: list[str], second: list[str]) -> MetaxCard:
    if len(first) == 4:  # 2.2.9+: Board Name | GPU Persist-M | Bus-id | GPU-Util sGPU-M
        board_text, _, name = first[0].partition(" ")
        board: int | None = int(board_text)
        index = int(first[1].split()[0])
        bus, util_cell = first[2], first[3]
    elif len(first) == 3:  # GPU NAME [Persistence-M] | Bus-id | GPU-Util [sGPU-M]
        tokens = first[0].split()
        board = None
        index = int(tokens[0])
        if "Persist" in heading and tokens[-1] in ("On", "Off"):
            tokens = tokens[:-1]
        name = " ".join(tokens[1:])
        bus, util_cell = first[1], first[2]
    else:
        raise ValueError(f"{len(first)} columns")
    if not _BUS_ID.match(bus):
        raise ValueError(f"bus id {bus!r}")
    rest = " ".join(second)
    memory = _MEMORY.search(rest)
    if memory is None:
        raise ValueError("no memory usage")
    util_tokens = util_cell.split()
    utilization = _UTILIZATION.match(util_tokens[0]) if util_tokens else None
    temperature = _TEMPERATURE.search(rest)
    power = _POWER.search(rest)
    return MetaxCard(
        index=index,
        board=board,
        name=name.strip(),
        bus_id=bus.lower(),
        memory_used_bytes=int(memory.group(1)) * MIB,
        memory_total_bytes=int(memory.group(2)) * MIB,
        utilization_percent=int(utilization.group(1)) if utilization else None,
        temperature_celsius=float(temperature.group(1)) if temperature else None,
        power_watts=float(power.group(1)) if power else None,
        power_cap_watts=float(power.group(2)) if power and power.group(2) else None,
        sgpu_mode=util_tokens[1] if len(util_tokens) > 1 else "",
        state=second[-1] if "GPU-State" in heading and second else "",
    )


def parse_mx_smi(text: str) -> MetaxReport:
    """Parse the output of a plain ``mx-smi`` run.

    A GPU whose rows cannot be read is left out and named in ``problems``; output that is not
    MetaX's ``mx-smi`` table at all raises :class:`commands.UnexpectedOutput`.
    """
    if "MX-SMI" not in text and "MetaX System Management Interface" not in text:
        raise commands.UnexpectedOutput("not MetaX mx-smi output (no MetaX banner)")
    lines = text.splitlines()
    heading, groups = _table(lines)
    cards: list[MetaxCard] = []
    problems: list[str] = []
    for rows in groups:
        label = rows[0].strip("| ").split("|")[0].strip() or "?"
        if len(rows) != 2:
            problems.append(f"GPU row {label!r}: {len(rows)} text row(s), expected 2")
            continue
        try:
            cards.append(_parse_card(heading, _cells(rows[0]), _cells(rows[1])))
        except (ValueError, IndexError) as err:
            problems.append(f"GPU row {label!r} unreadable ({err})")
    attached_text = _value(text, r"Attached GPUs\s*:\s*(\d+)")
    attached = int(attached_text) if attached_text else None
    listed = len(cards) + len(problems)
    if attached is not None and listed < attached:
        problems.append(f"mx-smi reports {attached} GPUs attached but the table lists {listed}")
    return MetaxReport(
        cards=tuple(cards),
        smi_version=_value(text, r"MX-SMI\s+(\S+)"),
        driver_version=_value(text, r"Kernel Mode Driver Version:\s*(\S+)"),
        maca_version=_value(text, r"MACA Version:\s*(\S+)"),
        bios_version=_value(text, r"BIOS Version:\s*(\S+)"),
        attached=attached,
        problems=tuple(problems),
    )


def parse_mx_smi_list(text: str) -> tuple[MetaxListing, ...]:
    """Parse ``mx-smi -L``: index, name, bus ID, state and UUID of every GPU."""
    found: list[MetaxListing] = []
    for line in text.splitlines():
        match = _LISTING.match(line.strip())
        if match and _BUS_ID.match(match["bus"]):
            found.append(
                MetaxListing(
                    index=int(match["index"]),
                    name=match["name"],
                    bus_id=match["bus"].lower(),
                    state=match["state"],
                    uuid=match["uuid"],
                )
            )
    return tuple(found)


def _unhealthy(card: MetaxCard, listing: MetaxListing | None) -> str | None:
    """Why the card cannot be used, or ``None`` when it can."""
    if card.state and card.state != "Available":
        return f"mx-smi reports GPU-State {card.state!r}"
    if listing is not None and listing.state != "Available":
        return f"mx-smi -L reports {listing.state!r}"
    return None


def build_result(
    report: MetaxReport,
    listings: Sequence[MetaxListing] = (),
    topologies: Mapping[str, DeviceTopology] | None = None,
    *,
    transitions: dict[str, tuple[str, datetime]] | None = None,
    complaints: commands.Complaints | None = None,
    now: datetime | None = None,
) -> ProbeResult:
    """The devices, labels, annotations and readings of one ``mx-smi`` report.

    A card whose name is not a MetaX GPU's is left out with a warning. UUIDs come from
    ``mx-smi -L`` (``listings``); without them a card is identified by its bus ID. NUMA node,
    socket and PCIe root come from the PCI scan (``topologies``, by bus ID).
    ``transitions``: the time each device's condition last changed, kept across runs;
    ``complaints``: the probe's warnings, kept across runs.
    """
    warn = (complaints or commands.Complaints(_log)).warn
    topologies = topologies or {}
    since = transitions if transitions is not None else {}
    moment = now or datetime.now(UTC)
    by_bus = {listing.bus_id: listing for listing in listings}
    devices: list[DeviceInfo] = []
    readings: list[DeviceReading] = []
    models: list[str] = []
    sliced = False
    for card in report.cards:
        model = model_of(card.name)
        if model is None:
            warn(
                "mx-smi GPU %s (%s) has an unknown model %r; left out",
                card.index,
                card.bus_id,
                card.name,
            )
            continue
        listing = by_bus.get(card.bus_id)
        problem = _unhealthy(card, listing)
        resources = {
            k.RESOURCE_GPU_CORE: 100,
            k.RESOURCE_GPU_MEMORY: card.memory_total_bytes,
            k.RESOURCE_GPU_MEMORY_RATIO: 100,
        }
        if card.sgpu:
            resources[k.RESOURCE_METAX_SGPU] = SGPUS_PER_CARD
            sliced = True
        uuid = listing.uuid if listing else card.bus_id
        conditions: tuple[DeviceCondition, ...] = ()
        if problem is None:
            if since.pop(uuid, None) is not None:
                _log.info("MetaX GPU %s (%s) is healthy again", card.index, card.bus_id)
        else:
            warn("MetaX GPU %s (%s) is unhealthy: %s", card.index, card.bus_id, problem)
            previous = since.get(uuid)
            changed = previous[1] if previous is not None and previous[0] == problem else moment
            since[uuid] = (problem, changed)
            conditions = (
                DeviceCondition(
                    type="Healthy",
                    status="False",
                    last_transition_time=changed,
                    reason="GPUStateNotAvailable",
                    message=problem,
                ),
            )
        devices.append(
            DeviceInfo(
                type=k.DEVICE_TYPE_GPU,
                id=uuid,
                minor=card.index,
                health=problem is None,
                resources=ResourceList(resources),
                topology=topologies.get(card.bus_id)
                or DeviceTopology(socket_id=-1, node_id=-1, pcie_id="", bus_id=card.bus_id),
                conditions=conditions,
            )
        )
        readings.append(
            DeviceReading(
                vendor=k.GPU_VENDOR_METAX,
                model=model,
                minor=card.index,
                uuid=uuid,
                healthy=problem is None,
                utilization_percent=card.utilization_percent,
                memory_used_bytes=card.memory_used_bytes,
                memory_total_bytes=card.memory_total_bytes,
                temperature_celsius=card.temperature_celsius,
                power_watts=card.power_watts,
            )
        )
        models.append(model)
    labels: dict[str, str] = {}
    if models:
        labels[k.LABEL_GPU_VENDOR] = k.GPU_VENDOR_METAX
        labels[k.LABEL_GPU_MODEL] = models[0]
        if report.driver_version:
            labels[k.LABEL_GPU_DRIVER_VERSION] = report.driver_version
    annotations: dict[str, str] = {}
    if sliced:
        annotations[ANNOTATION_SGPU_QOS_POLICIES] = ",".join(k.SGPU_QOS_POLICIES)
    return ProbeResult(
        devices=tuple(devices),
        labels=labels,
        annotations=annotations,
        readings=tuple(readings),
    )


@dataclass(frozen=True, slots=True)
class MetaxProbe:
    """Reports the MetaX GPUs ``mx-smi`` shows.

    ``mx-smi`` missing from ``PATH`` is :class:`agent.errors.Unsupported`. When it fails,
    hangs or prints something unreadable, the probe logs a warning and reports no MetaX GPU
    (it never raises for that); a GPU whose rows are unreadable is left out on its own.
    """

    #: NUMA node, socket and PCIe root per bus ID of the MetaX cards (from the PCI scan).
    topologies: Mapping[str, DeviceTopology] = field(default_factory=dict)
    #: The ``mx-smi`` program (a name looked up on ``PATH`` or a path).
    command: str = MX_SMI
    #: Seconds one ``mx-smi`` run may take.
    timeout: float = COMMAND_TIMEOUT
    name: str = "metax"
    _since: dict[str, tuple[str, datetime]] = field(default_factory=dict, compare=False, repr=False)
    _complaints: commands.Complaints = field(
        default_factory=lambda: commands.Complaints(_log), compare=False, repr=False
    )

    async def probe(self) -> ProbeResult:
        try:
            return await self._probe()
        finally:
            self._complaints.settle()

    async def _probe(self) -> ProbeResult:
        warn = self._complaints.warn
        try:
            text = await commands.run_command([self.command], timeout=self.timeout)
            report = parse_mx_smi(text)
        except (TransientError, commands.UnexpectedOutput) as err:
            warn("MetaX GPUs not reported: %s", err)
            return ProbeResult()
        for problem in report.problems:
            warn("mx-smi: %s", problem)
        listings: tuple[MetaxListing, ...] = ()
        try:
            listings = parse_mx_smi_list(
                await commands.run_command([self.command, "-L"], timeout=self.timeout)
            )
        except TransientError as err:
            warn("no MetaX GPU UUIDs (GPUs named by bus ID instead): %s", err)
        return build_result(
            report,
            listings,
            self.topologies,
            transitions=self._since,
            complaints=self._complaints,
        )


def from_config(cfg: AgentConfig, node: str) -> MetaxProbe | None:
    """The MetaX probe when the PCI scan finds MetaX devices (vendor 0x9999), else ``None``."""
    found = pci.of_vendor(pci.scan(cfg.host), pci.VENDOR_METAX)
    if not found:
        return None
    # Two runs per probe must fit in the probe's own limit.
    timeout = min(COMMAND_TIMEOUT, cfg.devices.probe_timeout / 3)
    return MetaxProbe(
        topologies=pci.topologies(cfg.host, found), command=cfg.devices.mx_smi, timeout=timeout
    )
