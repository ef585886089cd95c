"""Huawei Ascend NPUs (910B, 310P3, the 300I Duo card...) from ``npu-smi``.

``npu-smi info`` prints a box table with two text rows per chip: ``NPU Name | Health | Power
Temp Hugepages`` over ``Chip [Phy-ID|Device] | Bus-Id | AICore% Memory [HBM]``. Every recorded
layout is read by splitting on ``|`` and then on whitespace, never by column offsets: the
910B tables (``Chip``, 98 characters), Atlas A3 (``Chip Phy-ID``, two chips per card),
npu-smi 26.x (116 characters), the 310P3 layout (``Chip Device``, no HBM column, power
``NA``) and npu-smi 22.0's narrower one; HAMi's in-pod output with log lines before the
table; tables with ``...`` elisions; and busy tables, whose process section (same row shape)
ends the device rows. A card with two chips (A3, 300I Duo) repeats its NPU ID on two row pairs.

The device memory is the last ``used / total`` pair of the second row (HBM on 910 chips, the
only DDR pair on 310P), in MiB. NPU IDs are card numbers, neither contiguous nor from 0
(``0/96/32768/32896``); ``npu-smi info -m`` maps (NPU ID, chip) to the chip's logic ID, the
``/dev/davinciN`` index, which is the device's minor.

Every chip is a ``gpu``-typed device with ``huawei.com/npu-core`` (AI cores),
``huawei.com/npu-cpu`` (AI CPUs), ``huawei.com/npu-dvpp: 100``, ``koordinator.sh/gpu-memory``
and ``gpu-memory-ratio: 100``; the per-model figures are in :data:`MODELS`. Both the Atlas
300I Pro and 300I Duo cards carry 310P3 chips: a card with two chips (seen in the table, or
``Chip Count : 2`` in ``npu-smi info -t board``) is a 300I Duo, model
``Ascend-310P3-300I-DUO``.

Health is the table's ``Health`` cell; a chip that is not ``OK`` is asked for its error codes
(``npu-smi info -t health``). ``OK`` and ``Warning`` (a minor alarm) keep the chip usable;
anything else (``Alarm``, ``Critical``...) marks it unhealthy. Static vNPU templates
(``npu-smi info -t template-info``) are listed on the Device, and the vNPUs already carved
out of a chip (``-t info-vnpu``) on that chip.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, TypeVar

from agent.config import AgentConfig
from agent.devices import commands, pci
from agent.devices.base import DeviceReading, ProbeResult
from agent.errors import TransientError
from apis import constants as k
from apis.resources import ResourceList
from apis.scheduling import DeviceCondition, DeviceInfo, DeviceTopology

__all__ = [
    "ANNOTATION_VNPU_TEMPLATES",
    "LABEL_VNPUS",
    "MODELS",
    "MODEL_300I_DUO",
    "NPU_SMI",
    "AscendProbe",
    "Findings",
    "NpuBoard",
    "NpuChip",
    "NpuHealth",
    "NpuModel",
    "NpuSmiInfo",
    "Vnpu",
    "VnpuInfo",
    "VnpuTemplate",
    "build_result",
    "from_config",
    "model_of",
    "parse_board",
    "parse_chip_map",
    "parse_health",
    "parse_info",
    "parse_key_values",
    "parse_templates",
    "parse_vnpu_info",
]

_log = logging.getLogger(__name__)

#: Huawei's NPU management tool, looked up on ``PATH``.
NPU_SMI: Final = "npu-smi"
#: Seconds one ``npu-smi`` run may take.
COMMAND_TIMEOUT: Final = 10.0
#: ``npu-smi`` runs for single chips (health, vNPUs) at the same time.
CONCURRENT_COMMANDS: Final = 4

#: Device annotation: the static vNPU templates of the node's chips, as JSON
#: ``{"vir10_3c_16g": {"huawei.com/npu-core": 10, "huawei.com/npu-cpu": 3,
#: "koordinator.sh/gpu-memory": <bytes>}, ...}`` (the shape of Koordinator's GPU shared-resource
#: templates).
ANNOTATION_VNPU_TEMPLATES: Final = "koordpy.io/vnpu-templates"
#: Device label (per chip): the vNPUs carved out of it, ``<vnpu id>:<template>`` comma-separated.
LABEL_VNPUS: Final = "koordpy.io/vnpus"

MIB: Final = 1 << 20
GIB: Final = 1 << 30

#: Chip health values that leave the chip usable.
_USABLE: Final = frozenset({"OK", "Warning"})
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
_TEMPLATE = re.compile(r"^vir\w+$")
#: Ascend NPUs use PCI device IDs 0xDxxx (recorded: 0xd500 310P, 0xd801 910, 0xd802 910B);
#: other Huawei functions (NICs, storage controllers of Kunpeng hosts) do not.
_NPU_DEVICE_IDS: Final = range(0xD000, 0xE000)

_T = TypeVar("_T")
_K = TypeVar("_K")


@dataclass(frozen=True, slots=True)
class NpuModel:
    """What a chip model offers when the CLI does not say."""

    #: Model label (``node.koordinator.sh/gpu-model``).
    label: str
    #: AI cores (``huawei.com/npu-core``).
    aicore: int
    #: AI CPUs (``huawei.com/npu-cpu``); ``None`` where no source gives the figure.
    aicpu: int | None
    #: Device memory in MiB, used when ``npu-smi`` shows no total.
    memory_mib: int
    #: Whether static vNPU templates apply (the 300I Duo refuses vNPUs).
    vnpu: bool = True


#: Chip models by the name ``npu-smi info`` prints. 910B2: 24 AI cores, 6 AI CPUs; 910B3,
#: 910B4, 910B4-1 and the A3's 910C (printed ``Ascend910``): 20 and 7; 310P3: 8 and 7 (HAMi's
#: Ascend device table and Koordinator's resources); 910B1's 24 AI cores are what its
#: ``npu-smi info -t common`` prints; 910A: 30 AI cores (HAMi). Memory as the tables show it.
MODELS: Final[Mapping[str, NpuModel]] = {
    "910A": NpuModel("Ascend-910A", aicore=30, aicpu=None, memory_mib=32768),
    "910B1": NpuModel("Ascend-910B1", aicore=24, aicpu=None, memory_mib=65536),
    "910B2": NpuModel("Ascend-910B2", aicore=24, aicpu=6, memory_mib=65536),
    "910B3": NpuModel("Ascend-910B3", aicore=20, aicpu=7, memory_mib=65536),
    "910B4": NpuModel("Ascend-910B4", aicore=20, aicpu=7, memory_mib=32768),
    "910B4-1": NpuModel("Ascend-910B4-1", aicore=20, aicpu=7, memory_mib=65536),
    "Ascend910": NpuModel("Ascend-910C", aicore=20, aicpu=7, memory_mib=65536),
    "310P3": NpuModel("Ascend-310P3", aicore=8, aicpu=7, memory_mib=24576),
}
#: The 300I Duo card: two 310P3 chips per card, no vNPU.
MODEL_300I_DUO: Final = NpuModel(
    k.MODEL_ASCEND_310P3_300I_DUO, aicore=8, aicpu=7, memory_mib=24576, vnpu=False
)


# --- npu-smi info (the table) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NpuChip:
    """One chip (a row pair) of the ``npu-smi info`` table."""

    #: NPU ID: the card, ``-i`` of the other commands.
    npu_id: int
    #: Chip ID within the card, ``-c`` of the other commands.
    chip_id: int
    #: Model as printed (``910B3``, ``310P3``, ``Ascend910``).
    name: str
    #: ``OK``, ``Warning``, ``Alarm``...
    health: str
    #: PCI address, lower case; ``""`` when not shown (redacted).
    bus_id: str
    memory_used_bytes: int
    memory_total_bytes: int
    #: The 310P ``Device`` column: the chip's logic ID.
    device_id: int | None = None
    #: The A3 ``Phy-ID`` column: the chip's physical ID.
    phy_id: int | None = None
    aicore_percent: int | None = None
    #: ``None`` where ``npu-smi`` prints ``NA`` (310P) or ``-`` (second chip of an A3 card).
    power_watts: float | None = None
    temperature_celsius: float | None = None


@dataclass(frozen=True, slots=True)
class NpuSmiInfo:
    """What one ``npu-smi info`` run showed."""

    chips: tuple[NpuChip, ...]
    #: ``npu-smi 24.1.rc3``.
    tool_version: str = ""
    #: ``Version: 24.1.rc3``: the driver's version.
    driver_version: str = ""
    #: Rows that could not be read (each left out), in words.
    problems: tuple[str, ...] = ()

    def chips_per_card(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for chip in self.chips:
            counts[chip.npu_id] = counts.get(chip.npu_id, 0) + 1
        return counts


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _float(text: str) -> float | None:
    return float(text) if _NUMBER.match(text) else None


def _bus(text: str) -> str:
    try:
        return pci.normalize_address(text)
    except ValueError:
        return ""


def _is_first_row(cells: Sequence[str]) -> bool:
    tokens = cells[0].split()
    return len(tokens) >= 2 and tokens[0].isdigit() and not tokens[1].isdigit()


def _is_second_row(cells: Sequence[str]) -> bool:
    tokens = cells[0].split()
    return 1 <= len(tokens) <= 2 and all(token.isdigit() for token in tokens)


def _is_process_heading(cells: Sequence[str]) -> bool:
    return cells[0].split()[:2] == ["NPU", "Chip"] or (
        len(cells) > 1 and cells[1].startswith("Process")
    )


def _chip(first: Sequence[str], second: Sequence[str], id_column: str) -> NpuChip:
    npu_text, name = first[0].split(None, 1)
    health = first[1].split()[0] if first[1].split() else ""
    if not health:
        raise ValueError("no health")
    readings = first[2].split() if len(first) > 2 else []
    ids = second[0].split()
    pairs = _PAIR.findall(second[2]) if len(second) > 2 else []
    if not pairs:
        raise ValueError("no memory usage")
    used, total = pairs[-1]
    usage = second[2].split()
    extra_id = int(ids[1]) if len(ids) > 1 else None
    return NpuChip(
        npu_id=int(npu_text),
        chip_id=int(ids[0]),
        name=name.strip(),
        health=health,
        bus_id=_bus(second[1]),
        memory_used_bytes=int(used) * MIB,
        memory_total_bytes=int(total) * MIB,
        device_id=extra_id if id_column == "Device" else None,
        phy_id=extra_id if id_column == "Phy-ID" else None,
        aicore_percent=_int(usage[0]) if usage else None,
        power_watts=_float(readings[0]) if readings else None,
        temperature_celsius=_float(readings[1]) if len(readings) > 1 else None,
    )


def parse_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info``.

    A chip whose rows cannot be read is left out and named in ``problems``; text without an
    ``npu-smi`` table raises :class:`commands.UnexpectedOutput`.
    """
    lines = [line.strip() for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("+-")), None)
    banner = re.search(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", text)
    if start is None or banner is None:
        raise commands.UnexpectedOutput("not npu-smi info output (no npu-smi table)")
    body = next((i for i in range(start, len(lines)) if lines[i].startswith("+=")), None)
    if body is None:
        raise commands.UnexpectedOutput("npu-smi info printed no chip rows")
    heading = [_cells(line) for line in lines[start:body] if line.startswith("|")]
    id_column = ""
    for cells in heading:
        tokens = cells[0].split()
        if tokens[:1] == ["Chip"] and len(tokens) > 1:
            id_column = tokens[1]
    chips: list[NpuChip] = []
    problems: list[str] = []
    pending: list[str] | None = None
    for line in lines[body + 1 :]:
        if line.startswith("+"):
            if pending is not None:
                problems.append(f"NPU row {pending[0]!r} has no second row")
                pending = None
            continue
        if not line.startswith("|"):
            continue  # elisions (...), log lines
        cells = _cells(line)
        if _is_process_heading(cells):
            break
        if pending is None:
            if _is_first_row(cells):
                pending = cells
            elif not line.startswith("| No running processes"):
                problems.append(f"unexpected row {line[:60]!r}")
            continue
        if not _is_second_row(cells):
            problems.append(f"NPU row {pending[0]!r} has no second row")
            pending = cells if _is_first_row(cells) else None
            continue
        try:
            chips.append(_chip(pending, cells, id_column))
        except (ValueError, IndexError) as err:
            problems.append(f"NPU row {pending[0]!r} unreadable ({err})")
        pending = None
    if pending is not None:
        problems.append(f"NPU row {pending[0]!r} has no second row (output cut short)")
    return NpuSmiInfo(
        chips=tuple(chips),
        tool_version=banner.group(1),
        driver_version=banner.group(2),
        problems=tuple(problems),
    )


def parse_chip_map(text: str) -> dict[tuple[int, int], int]:
    """Parse ``npu-smi info -m``: (NPU ID, chip ID) -> chip logic ID (``/dev/davinci<id>``).

    The ``Mcu`` pseudo-chips (logic ID ``-``) and the heading are skipped.
    """
    mapping: dict[tuple[int, int], int] = {}
    for line in text.splitlines():
        tokens = line.split(None, 3)
        if len(tokens) >= 3 and all(token.isdigit() for token in tokens[:3]):
            mapping[int(tokens[0]), int(tokens[1])] = int(tokens[2])
    return mapping


# --- npu-smi info -t <type> (key : value) ----------------------------------------------------


def parse_key_values(text: str) -> list[dict[str, str]]:
    """Parse ``npu-smi info -t ...`` key/value output into blocks of keys.

    Blank lines separate blocks, and so does a key that repeats (the next chip's figures).
    Keys are padded and may hold spaces and parentheses; the value follows the first
    ``" : "`` (values may contain colons: ``0000:61:00.0``). A line that starts with ``:``
    continues the previous value (``Error Information``), joined with ``"; "``.
    """
    blocks: list[dict[str, str]] = []
    block: dict[str, str] = {}
    last: tuple[dict[str, str], str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            if block:
                blocks.append(block)
                block = {}
            continue
        if line.startswith(":") and last is not None:
            owner, key = last
            more = line[1:].strip()
            owner[key] = f"{owner[key]}; {more}" if owner[key] else more
            continue
        key, separator, value = line.partition(" : ")
        if not separator:
            continue
        key = key.strip()
        if key in block:
            blocks.append(block)
            block = {}
        block[key] = value.strip()
        last = (block, key)
    if block:
        blocks.append(block)
    return blocks


@dataclass(frozen=True, slots=True)
class NpuBoard:
    """``npu-smi info -t board -i <npu>``."""

    npu_id: int
    #: ``Chip Count``: 2 on a 300I Duo or an A3 card.
    chip_count: int | None = None
    #: ``PCIe Bus Info``, lower case.
    bus_id: str = ""
    #: ``PCI Device ID`` (0xd500 for 310P, 0xd802 for 910B).
    pci_device: int | None = None
    #: ``Board ID`` (``0xb1``).
    board_id: str = ""
    product_name: str = ""
    software_version: str = ""
    firmware_version: str = ""


def _hex(text: str) -> int | None:
    try:
        return int(text, 16)
    except ValueError:
        return None


def parse_board(text: str) -> NpuBoard:
    """Parse ``npu-smi info -t board -i <npu>``; :class:`commands.UnexpectedOutput` when the
    text is not a board description (``Invalid card id.``)."""
    values: dict[str, str] = {}
    for block in parse_key_values(text):
        values.update(block)
    npu = _int(values.get("NPU ID", ""))
    if npu is None:
        first = text.strip().splitlines()[0] if text.strip() else "nothing"
        raise commands.UnexpectedOutput(f"npu-smi board output has no NPU ID: {first!r}")
    return NpuBoard(
        npu_id=npu,
        chip_count=_int(values.get("Chip Count", "")),
        bus_id=_bus(values.get("PCIe Bus Info", "")),
        pci_device=_hex(values.get("PCI Device ID", "")),
        board_id=values.get("Board ID", ""),
        product_name=values.get("Product Name", ""),
        software_version=values.get("Software Version", ""),
        firmware_version=values.get("Firmware Version", ""),
    )


@dataclass(frozen=True, slots=True)
class NpuHealth:
    """``npu-smi info -t health -i <npu> -c <chip>``."""

    #: ``OK``, ``Warning``, ``Alarm``...
    status: str
    #: Hexadecimal error codes (``A4025021``); empty when ``NA``.
    error_codes: tuple[str, ...] = ()
    #: ``Error Information`` lines; empty when ``NA``.
    messages: tuple[str, ...] = ()


def parse_health(text: str) -> NpuHealth:
    """Parse ``npu-smi info -t health``; :class:`commands.UnexpectedOutput` without a
    ``Health Status``."""
    values: dict[str, str] = {}
    for block in parse_key_values(text):
        values.update(block)
    status = values.get("Health Status", "")
    if not status:
        raise commands.UnexpectedOutput("npu-smi health output has no Health Status")
    codes = values.get("Error Code", "NA")
    information = values.get("Error Information", "NA")
    return NpuHealth(
        status=status,
        error_codes=() if codes == "NA" else tuple(codes.split()),
        messages=() if information == "NA" else tuple(information.split("; ")),
    )


# --- vNPU templates and instances -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VnpuTemplate:
    """A static vNPU template (``npu-smi info -t template-info``)."""

    name: str
    aicore: int
    #: Memory in GiB (``npu-smi`` says GB).
    memory_gib: int
    aicpu: int

    def resources(self) -> dict[str, int]:
        return {
            k.RESOURCE_HUAWEI_NPU_CORE: self.aicore,
            k.RESOURCE_HUAWEI_NPU_CPU: self.aicpu,
            k.RESOURCE_GPU_MEMORY: self.memory_gib * GIB,
        }


def _columns(tokens: Sequence[str], *names: str) -> dict[str, int]:
    upper = [token.upper() for token in tokens]
    return {name: upper.index(name.upper()) for name in names if name.upper() in upper}


def parse_templates(text: str) -> tuple[VnpuTemplate, ...]:
    """Parse ``npu-smi info -t template-info``: name, AI cores, memory (GiB), AI CPUs.

    Each template takes two text rows; the first holds these figures. The columns are found
    by the heading (``Name AICORE Memory AICPU ...``).
    """
    columns: dict[str, int] = {}
    found: list[VnpuTemplate] = []
    for line in text.splitlines():
        tokens = line.strip().strip("|").split()
        if tokens[:1] == ["Name"]:
            columns = _columns(tokens, "AICORE", "Memory", "AICPU")
            continue
        if len(columns) < 3 or not tokens or not _TEMPLATE.match(tokens[0]):
            continue
        try:
            found.append(
                VnpuTemplate(
                    name=tokens[0],
                    aicore=int(tokens[columns["AICORE"]]),
                    memory_gib=int(tokens[columns["Memory"]]),
                    aicpu=int(tokens[columns["AICPU"]]),
                )
            )
        except (ValueError, IndexError):
            continue
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Vnpu:
    """One vNPU carved out of a chip (``/dev/vdavinci<vnpu_id>``)."""

    vnpu_id: int
    vgroup_id: int
    #: 12 hex digits; ``000000000000`` when no container holds it.
    container_id: str
    status: int
    template: str


@dataclass(frozen=True, slots=True)
class VnpuInfo:
    """``npu-smi info -t info-vnpu -i <npu> -c <chip>``: free/total figures and the vNPUs."""

    #: Free and total AI cores, memory (GiB) and AI CPUs; ``None`` where not shown.
    aicore: tuple[int, int] | None
    memory_gib: tuple[int, int] | None
    aicpu: tuple[int, int] | None
    vnpus: tuple[Vnpu, ...] = ()


def parse_vnpu_info(text: str) -> VnpuInfo:
    """Parse ``npu-smi info -t info-vnpu``; :class:`commands.UnexpectedOutput` when the
    count line is missing or disagrees with the rows listed."""
    columns: dict[str, int] = {}
    figures: dict[str, tuple[int, int] | None] = {}
    vnpus: list[Vnpu] = []
    count: int | None = None
    for line in text.splitlines():
        cells = _cells(line)
        tokens = " ".join(cells).split()
        if "AICORE" in tokens and not columns:
            columns = _columns(tokens, "AICORE", "Memory", "AICPU")
            continue
        if columns and not figures and tokens and "/" in tokens[0]:
            for name, index in columns.items():
                pair = _PAIR.fullmatch(tokens[index]) if index < len(tokens) else None
                figures[name] = (int(pair[1]), int(pair[2])) if pair else None
            continue
        total = re.search(r"Total number of vnpu:\s*(\d+)", line)
        if total:
            count = int(total.group(1))
            continue
        if len(cells) == 5 and cells[0].isdigit():
            vnpus.append(
                Vnpu(
                    vnpu_id=int(cells[0]),
                    vgroup_id=int(cells[1]) if cells[1].isdigit() else -1,
                    container_id=cells[2],
                    status=int(cells[3]) if cells[3].isdigit() else -1,
                    template=cells[4],
                )
            )
    if count is None:
        raise commands.UnexpectedOutput("npu-smi info-vnpu output has no vNPU count")
    if count != len(vnpus):
        raise commands.UnexpectedOutput(
            f"npu-smi info-vnpu counts {count} vNPUs but lists {len(vnpus)}"
        )
    return VnpuInfo(
        aicore=figures.get("AICORE"),
        memory_gib=figures.get("Memory"),
        aicpu=figures.get("AICPU"),
        vnpus=tuple(vnpus),
    )


# --- from parsed output to the Device ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Findings:
    """What the follow-up commands added to the table: logic IDs (``-m``), boards, health
    details, vNPU templates and the vNPUs of each chip (keyed by NPU ID and chip ID)."""

    chip_map: Mapping[tuple[int, int], int] = field(default_factory=dict)
    boards: Mapping[int, NpuBoard] = field(default_factory=dict)
    health: Mapping[tuple[int, int], NpuHealth] = field(default_factory=dict)
    templates: tuple[VnpuTemplate, ...] = ()
    vnpus: Mapping[tuple[int, int], VnpuInfo] = field(default_factory=dict)


def model_of(chip: NpuChip, chips_on_card: int, board: NpuBoard | None = None) -> NpuModel | None:
    """The model of ``chip``: a 310P3 on a two-chip card is a 300I Duo; ``None`` if unknown."""
    model = MODELS.get(chip.name)
    if model is None:
        return None
    two_chips = chips_on_card > 1 or (board is not None and (board.chip_count or 0) > 1)
    if chip.name == "310P3" and two_chips:
        return MODEL_300I_DUO
    return model


def _minor(chip: NpuChip, chip_map: Mapping[tuple[int, int], int]) -> int:
    """The chip's logic ID: from ``-m``, else the 310P ``Device`` column, else the A3
    physical ID, else the NPU ID (one chip per card)."""
    mapped = chip_map.get((chip.npu_id, chip.chip_id))
    if mapped is not None:
        return mapped
    for candidate in (chip.device_id, chip.phy_id):
        if candidate is not None:
            return candidate
    return chip.npu_id


def _health_problem(chip: NpuChip, detail: NpuHealth | None) -> tuple[bool, str, str] | None:
    """``(usable, reason, message)`` for a chip that is not ``OK``; ``None`` when it is."""
    status = detail.status if detail is not None else chip.health
    if status == "OK":
        return None
    words = [f"npu-smi reports health {status}"]
    if detail is not None and detail.error_codes:
        words.append(f"error codes {' '.join(detail.error_codes)}")
    if detail is not None and detail.messages:
        words.append("; ".join(detail.messages))
    reason = "Health" + "".join(part.capitalize() for part in re.findall(r"[A-Za-z0-9]+", status))
    return status in _USABLE, reason, ": ".join(words)


def build_result(
    info: NpuSmiInfo,
    found: Findings | None = None,
    topologies: Mapping[str, DeviceTopology] | None = None,
    *,
    transitions: dict[str, tuple[str, datetime]] | None = None,
    complaints: commands.Complaints | None = None,
    now: datetime | None = None,
) -> ProbeResult:
    """The devices, labels, annotations and readings of one ``npu-smi`` inventory.

    ``found``: the other commands' answers (logic IDs, boards, health details, vNPUs).
    ``topologies``: NUMA node, socket and PCIe root per bus ID (from the PCI scan).
    ``transitions``: the time each device's condition last changed, kept across runs;
    ``complaints``: the probe's warnings, kept across runs. A chip of an unknown model, or
    whose minor another chip already has, is left out with a warning.
    """
    warn = (complaints or commands.Complaints(_log)).warn
    found = found or Findings()
    topologies = topologies or {}
    since = transitions if transitions is not None else {}
    moment = now or datetime.now(UTC)
    per_card = info.chips_per_card()
    devices: list[DeviceInfo] = []
    readings: list[DeviceReading] = []
    labels: dict[str, str] = {}
    minors: set[int] = set()
    for chip in info.chips:
        where = f"NPU {chip.npu_id} chip {chip.chip_id}"
        model = model_of(chip, per_card[chip.npu_id], found.boards.get(chip.npu_id))
        if model is None:
            warn("%s has an unknown model %r; left out", where, chip.name)
            continue
        minor = _minor(chip, found.chip_map)
        if minor in minors:
            warn("%s: minor %d is taken by another chip; left out", where, minor)
            continue
        minors.add(minor)
        device_id = (
            f"{chip.bus_id}/{chip.chip_id}" if chip.bus_id else f"npu{chip.npu_id}/{chip.chip_id}"
        )
        memory = chip.memory_total_bytes or model.memory_mib * MIB
        resources = {
            k.RESOURCE_HUAWEI_NPU_CORE: model.aicore,
            k.RESOURCE_HUAWEI_NPU_DVPP: 100,
            k.RESOURCE_GPU_MEMORY: memory,
            k.RESOURCE_GPU_MEMORY_RATIO: 100,
        }
        if model.aicpu is not None:
            resources[k.RESOURCE_HUAWEI_NPU_CPU] = model.aicpu
        problem = _health_problem(chip, found.health.get((chip.npu_id, chip.chip_id)))
        usable = problem is None or problem[0]
        conditions: tuple[DeviceCondition, ...] = ()
        if problem is None:
            if since.pop(device_id, None) is not None:
                _log.info("%s (minor %d) is healthy again", where, minor)
        else:
            _, reason, message = problem
            state = f"{usable}/{reason}/{message}"
            previous = since.get(device_id)
            changed = previous[1] if previous is not None and previous[0] == state else moment
            since[device_id] = (state, changed)
            warn("%s (minor %d): %s", where, minor, message)
            conditions = (
                DeviceCondition(
                    type="Healthy",
                    status="True" if usable else "False",
                    last_transition_time=changed,
                    reason=reason,
                    message=message,
                ),
            )
        vnpu_info = found.vnpus.get((chip.npu_id, chip.chip_id))
        chip_labels = (
            {LABEL_VNPUS: ",".join(f"{v.vnpu_id}:{v.template}" for v in vnpu_info.vnpus)}
            if vnpu_info is not None and vnpu_info.vnpus
            else {}
        )
        devices.append(
            DeviceInfo(
                type=k.DEVICE_TYPE_GPU,
                id=device_id,
                minor=minor,
                module_id=chip.phy_id,
                health=usable,
                labels=chip_labels,
                resources=ResourceList(resources),
                topology=topologies.get(chip.bus_id) if chip.bus_id else None,
                conditions=conditions,
            )
        )
        readings.append(
            DeviceReading(
                vendor=k.GPU_VENDOR_HUAWEI,
                model=model.label,
                minor=minor,
                uuid=device_id,
                healthy=usable,
                utilization_percent=chip.aicore_percent,
                memory_used_bytes=chip.memory_used_bytes,
                memory_total_bytes=memory,
                temperature_celsius=chip.temperature_celsius,
                power_watts=chip.power_watts,
            )
        )
        if not labels:
            labels = {k.LABEL_GPU_VENDOR: k.GPU_VENDOR_HUAWEI, k.LABEL_GPU_MODEL: model.label}
            if info.driver_version:
                labels[k.LABEL_GPU_DRIVER_VERSION] = info.driver_version
    annotations: dict[str, str] = {}
    if devices and found.templates:
        annotations[ANNOTATION_VNPU_TEMPLATES] = json.dumps(
            {template.name: template.resources() for template in found.templates},
            sort_keys=True,
            separators=(",", ":"),
        )
    return ProbeResult(
        devices=tuple(devices),
        labels=labels,
        annotations=annotations,
        readings=tuple(readings),
    )


# --- the probe --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Memory:
    """What an :class:`AscendProbe` keeps between runs: answers that do not change while the
    cards stay (logic IDs, boards, templates), condition times and warnings already given."""

    chip_map: dict[tuple[int, int], int] = field(default_factory=dict)
    boards: dict[int, NpuBoard] = field(default_factory=dict)
    templates: tuple[VnpuTemplate, ...] | None = None
    since: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    complaints: commands.Complaints = field(default_factory=lambda: commands.Complaints(_log))


@dataclass(frozen=True, slots=True)
class AscendProbe:
    """Reports the Ascend chips ``npu-smi`` shows.

    ``npu-smi`` missing from ``PATH`` is :class:`agent.errors.Unsupported`. When
    ``npu-smi info`` fails, hangs or prints something unreadable, the probe logs a warning and
    reports no Ascend chip (it never raises for that); an unreadable chip is left out on its
    own, and a failing follow-up command (``-m``, ``-t board``, ``-t health``, vNPUs) only
    costs what it would have added. Follow-ups stop once ``budget`` seconds have passed, so a
    run returns what it read before its caller's limit. Logic IDs, boards and templates are
    asked for once and kept (``-m`` again when a chip it does not know appears).
    """

    #: NUMA node, socket and PCIe root per bus ID of the Ascend cards (from the PCI scan).
    topologies: Mapping[str, DeviceTopology] = field(default_factory=dict)
    #: The ``npu-smi`` program (a name looked up on ``PATH`` or a path).
    command: str = NPU_SMI
    #: Seconds one ``npu-smi`` run may take.
    timeout: float = COMMAND_TIMEOUT
    #: Seconds one probe run may spend on ``npu-smi`` runs in all.
    budget: float = 3 * COMMAND_TIMEOUT
    name: str = "ascend"
    _memory: _Memory = field(default_factory=_Memory, compare=False, repr=False)

    async def _run(self, deadline: float, *args: str) -> str:
        left = min(self.timeout, deadline - asyncio.get_running_loop().time())
        if left <= 0:
            command = shlex.join([self.command, *args])
            raise TransientError(f"`{command}` skipped: the probe is out of time")
        return await commands.run_command([self.command, *args], timeout=left)

    async def _optional(
        self, deadline: float, args: Sequence[str], parse: Callable[[str], _T]
    ) -> _T | None:
        """Run a follow-up command; its failure is logged and costs only its answer."""
        try:
            text = await self._run(deadline, *args)
        except TransientError as err:
            self._memory.complaints.warn("%s", err)
            return None
        try:
            return parse(text)
        except commands.UnexpectedOutput as err:
            command = shlex.join([self.command, *args])
            self._memory.complaints.warn("`%s` printed what cannot be read: %s", command, err)
            return None

    async def _each(
        self, deadline: float, parse: Callable[[str], _T], jobs: Mapping[_K, Sequence[str]]
    ) -> dict[_K, _T]:
        """Run follow-ups (key -> arguments), :data:`CONCURRENT_COMMANDS` at a time."""
        gate = asyncio.Semaphore(CONCURRENT_COMMANDS)

        async def gated(args: Sequence[str]) -> _T | None:
            async with gate:
                return await self._optional(deadline, args, parse)

        answers = await asyncio.gather(*(gated(args) for args in jobs.values()))
        return {key: answer for key, answer in zip(jobs, answers, strict=True) if answer}

    async def probe(self) -> ProbeResult:
        memory = self._memory
        try:
            return await self._probe(memory)
        finally:
            memory.complaints.settle()

    async def _probe(self, memory: _Memory) -> ProbeResult:
        deadline = asyncio.get_running_loop().time() + self.budget
        try:
            info = parse_info(await self._run(deadline, "info"))
        except (TransientError, commands.UnexpectedOutput) as err:
            memory.complaints.warn("Ascend NPUs not reported: %s", err)
            return ProbeResult()
        for problem in info.problems:
            memory.complaints.warn("npu-smi info: %s", problem)
        chips = {(chip.npu_id, chip.chip_id): chip for chip in info.chips}
        if not chips.keys() <= memory.chip_map.keys():
            memory.chip_map = await self._optional(deadline, ["info", "-m"], parse_chip_map) or {}
        per_card = info.chips_per_card()
        # A 310P3 card showing one chip may still be a 300I Duo (one chip visible in a pod).
        unknown_boards = {
            chip.npu_id: ["info", "-t", "board", "-i", str(chip.npu_id)]
            for chip in info.chips
            if chip.name == "310P3"
            and per_card[chip.npu_id] == 1
            and chip.npu_id not in memory.boards
        }
        memory.boards.update(await self._each(deadline, parse_board, unknown_boards))
        health = await self._each(
            deadline,
            parse_health,
            {
                key: ["info", "-t", "health", "-i", str(key[0]), "-c", str(key[1])]
                for key, chip in chips.items()
                if chip.health != "OK"
            },
        )
        sliceable = [
            key
            for key, chip in chips.items()
            if (model := model_of(chip, per_card[chip.npu_id], memory.boards.get(chip.npu_id)))
            and model.vnpu
        ]
        if sliceable and memory.templates is None:
            templates = await self._optional(
                deadline, ["info", "-t", "template-info"], parse_templates
            )
            if templates is not None:
                memory.templates = templates
        vnpus: dict[tuple[int, int], VnpuInfo] = {}
        if sliceable and memory.templates:
            vnpus = await self._each(
                deadline,
                parse_vnpu_info,
                {
                    key: ["info", "-t", "info-vnpu", "-i", str(key[0]), "-c", str(key[1])]
                    for key in sliceable
                },
            )
        found = Findings(
            chip_map=memory.chip_map,
            boards=memory.boards,
            health=health,
            templates=memory.templates or (),
            vnpus=vnpus,
        )
        return build_result(
            info,
            found,
            self.topologies,
            transitions=memory.since,
            complaints=memory.complaints,
        )


def from_config(cfg: AgentConfig, node: str) -> AscendProbe | None:
    """The Ascend probe when the PCI scan finds Ascend NPUs (Huawei, vendor 0x19e5, device IDs
    0xDxxx), else ``None``."""
    found = [
        device
        for device in pci.of_vendor(pci.scan(cfg.host), pci.VENDOR_HUAWEI)
        if device.device in _NPU_DEVICE_IDS
    ]
    if not found:
        return None
    # The npu-smi runs of one probe stop in time for the probe's own limit.
    budget = cfg.devices.probe_timeout * 0.8
    return AscendProbe(
        topologies=pci.topologies(cfg.host, found),
        command=cfg.devices.npu_smi,
        timeout=min(COMMAND_TIMEOUT, budget / 3),
        budget=budget,
    )
