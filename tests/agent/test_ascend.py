"""Ascend: every recorded ``npu-smi`` layout, the key/value commands, garbage, the Device built,
and the probe end to end through a stub ``npu-smi``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config import AgentConfig, DevicesSection
from agent.devices import ascend, base, commands, pci
from agent.errors import Unsupported
from apis import constants as k
from apis.codec import encode_json
from apis.core import Node
from apis.meta import ObjectMeta
from apis.scheduling import DeviceTopology
from tests.crdschema import schema_errors, validator
from tests.fakes.host import FakeHost
from tests.fakes.nvml import add_numa_node, add_pci_device
from tests.fakes.vendor_cli import VendorCli

MIB = 1 << 20
GIB = 1 << 30
B910_BUSES = [f"0000:{bus}:00.0" for bus in ("c1", "c2", "81", "82", "01", "02", "41", "42")]


def read(name: str) -> str:
    return VendorCli.read(f"ascend/{name}")


@dataclass(frozen=True)
class Table:
    file: str
    tool: str
    driver: str
    #: (NPU ID, chip ID) of every chip.
    chips: list[tuple[int, int]]
    name: str
    buses: list[str]
    #: First chip: used MiB, total MiB, power, temperature.
    first: tuple[int, int, float | None, float]
    #: The second ID column (310P ``Device``, A3 ``Phy-ID``) of every chip, if any.
    second_ids: list[int] | None = None
    kind: str = ""


def one_per_card(*npus: int) -> list[tuple[int, int]]:
    return [(npu, 0) for npu in npus]


TABLES = [
    Table(
        "910b1-npu-smi-info.txt",
        "23.0.rc2",
        "23.0.rc2",
        one_per_card(0, 1, 7),  # the author elided NPU 2-6
        "910B1",
        ["0000:c1:00.0", "0000:01:00.0", "0000:42:00.0"],
        (4175, 65536, 88.4, 46),
    ),
    Table(
        "910b2-npu-smi-info-8cards.txt",
        "24.1.rc3",
        "24.1.rc3",
        one_per_card(*range(8)),
        "910B2",
        B910_BUSES,
        (3367, 65536, 96.0, 27),
    ),
    Table(
        "910b2c-npu-smi-info-2cards.txt",
        "23.0.3",
        "23.0.3",
        one_per_card(0, 1),
        "910B2C",
        ["0000:5a:00.0", "0000:29:00.0"],
        (3317, 65536, 89.9, 53),
    ),
    Table(
        "910b2c-npu-smi-info-container-npu12-15-busy.txt",
        "23.0.3",
        "23.0.3",
        one_per_card(12, 13, 14, 15),
        "910B2C",
        ["0000:d9:00.0", "0000:98:00.0", "0000:b9:00.0", "0000:c9:00.0"],
        (52675, 65536, 91.3, 53),
    ),
    Table(
        "910b3-npu-smi-info.txt",
        "24.1.rc1.b030",
        "24.1.rc1.b030",
        one_per_card(*range(8)),
        "910B3",
        B910_BUSES,
        (3318, 65536, 101.8, 43),
    ),
    Table(
        "910b4-npu-smi-info-container-npu4-7-busy.txt",
        "23.0.6",
        "23.0.6",
        one_per_card(4, 5, 6, 7),
        "910B4",
        ["0000:81:00.0", "0000:41:00.0", "0000:82:00.0", "0000:42:00.0"],
        (29096, 32768, 89.2, 39),
    ),
    Table(
        "910b4-1-npu-smi-info-PARTIAL-issue.txt",
        "25.2.0",
        "25.2.0",
        one_per_card(0, 1),
        "910B4-1",
        ["", ""],  # redacted by the reporter (0000:xx:00.0)
        (3197, 65536, 91.3, 33),
    ),
    Table(
        "a3-ascend910-npu-smi-info-16chips-busy.txt",
        "25.2.0",
        "25.2.0",
        [(npu, chip) for npu in range(8) for chip in (0, 1)],
        "Ascend910",
        [
            f"0000:{bus}:00.0"
            for bus in (
                *("9d", "9f", "99", "9b", "95", "97", "91", "93"),
                *("8d", "8f", "89", "8b", "85", "87", "81", "83"),
            )
        ],
        (61609, 65536, 211.3, 43),
        second_ids=list(range(16)),
        kind="Phy-ID",
    ),
    Table(
        "a3-ascend910-npu-smi-26.0.rc2-wide-layout-PARTIAL-issue.txt",
        "26.0.rc2",
        "26.0.rc2",
        [(0, 0), (0, 1)],
        "Ascend910",
        ["0000:9d:00.0", "0000:9f:00.0"],
        (3419, 65536, 162.6, 34),
        second_ids=[0, 1],
        kind="Phy-ID",
    ),
    Table(
        "300i-duo-310p3-npu-smi-info-container-4cards.txt",
        "25.3.rc1",
        "25.3.rc1",
        [(npu, chip) for npu in (0, 96, 32768, 32896) for chip in (0, 1)],
        "310P3",
        [f"0000:{bus}:00.0" for bus in ("01", "03", "81", "84") for _ in (0, 1)],
        (35552, 44278, None, 86),
        second_ids=list(range(8)),
        kind="Device",
    ),
    Table(
        "300i-duo-310p3-npu-smi-info-1card-PARTIAL-issue.txt",
        "25.2.0",
        "25.2.0",
        [(2, 0), (2, 1)],
        "310P3",
        ["0000:01:00.0", "0000:01:00.0"],
        (1529, 44280, None, 45),
        second_ids=[0, 1],
        kind="Device",
    ),
    Table(
        "300i-pro-310p3-npu-smi-info-host-2cards.txt",
        "25.5.1",
        "25.5.1",
        one_per_card(4, 5),
        "310P3",
        ["0000:81:00.0", "0000:85:00.0"],
        (1848, 21525, None, 37),
        second_ids=[0, 1],
        kind="Device",
    ),
    Table(
        "300i-pro-310p3-npu-smi-info-in-pod-hami-vnpu-8192.txt",
        "25.5.1",
        "25.5.1",
        one_per_card(32768),
        "310P3",
        ["0000:81:00.0"],
        (0, 8192, None, 38),  # HAMi's soft vNPU shows its quota
        second_ids=[0],
        kind="Device",
    ),
    Table(
        "300i-pro-310p3-npu-smi-22.0.0-info-old-layout-INDENTED-doc.txt",
        "22.0.0",
        "22.0.2",
        one_per_card(0),
        "310P3",
        ["0000:86:00.0"],
        (994, 21534, 16.2, 42),
        second_ids=[0],
        kind="Device",
    ),
    Table(
        "910a-npu-smi-info-warning-vendordoc.txt",
        "23.0.5",
        "23.0.5",
        one_per_card(0, 7),
        "xxx",  # redacted by the vendor's documentation
        ["0000:61:00.0", "0000:3d:00.0"],
        (0, 32768, 73.1, 37),  # the HBM pair, not DDR 920 / 13553
    ),
]


def table_id(table: Table) -> str:
    return table.file.removesuffix(".txt")


@pytest.mark.parametrize("table", TABLES, ids=table_id)
def test_every_recorded_table_layout_parses(table: Table) -> None:
    info = ascend.parse_info(read(table.file))
    assert info.problems == ()
    assert (info.tool_version, info.driver_version) == (table.tool, table.driver)
    assert [(chip.npu_id, chip.chip_id) for chip in info.chips] == table.chips
    assert {chip.name for chip in info.chips} == {table.name}
    assert [chip.bus_id for chip in info.chips] == table.buses
    first = info.chips[0]
    used, total, power, temperature = table.first
    assert (first.memory_used_bytes, first.memory_total_bytes) == (used * MIB, total * MIB)
    assert (first.power_watts, first.temperature_celsius) == (power, temperature)
    if table.kind == "Device":
        assert [chip.device_id for chip in info.chips] == table.second_ids
        assert {chip.phy_id for chip in info.chips} == {None}
    elif table.kind == "Phy-ID":
        assert [chip.phy_id for chip in info.chips] == table.second_ids
        assert {chip.device_id for chip in info.chips} == {None}
    else:
        assert {(chip.device_id, chip.phy_id) for chip in info.chips} == {(None, None)}


def test_health_cells_are_read_even_when_misaligned() -> None:
    # The vendor's documentation hand-edited NPU 0's cell to Warning, breaking the alignment.
    info = ascend.parse_info(read("910a-npu-smi-info-warning-vendordoc.txt"))
    assert [chip.health for chip in info.chips] == ["Warning", "OK"]


def test_the_a3_second_chip_has_no_power_reading() -> None:
    info = ascend.parse_info(read("a3-ascend910-npu-smi-info-16chips-busy.txt"))
    assert [chip.power_watts for chip in info.chips[:4]] == [211.3, None, 210.6, None]
    assert [chip.aicore_percent for chip in info.chips[8:10]] == [8, 7]
    assert info.chips_per_card() == dict.fromkeys(range(8), 2)


def test_memory_pairs_without_a_space_are_read() -> None:
    info = ascend.parse_info(read("300i-duo-310p3-npu-smi-info-container-4cards.txt"))
    assert [chip.memory_used_bytes // MIB for chip in info.chips[:2]] == [35552, 35270]
    assert [chip.memory_total_bytes // MIB for chip in info.chips[:2]] == [44278, 43693]


def test_log_lines_before_the_table_are_skipped() -> None:
    text = read("300i-pro-310p3-npu-smi-info-in-pod-hami-vnpu-8192.txt")
    assert text.startswith("[INFO limiter::supervisor]")
    (chip,) = ascend.parse_info(text).chips
    assert chip.npu_id == 32768


def test_a_table_cut_short_keeps_the_whole_chips() -> None:
    lines = read("910b3-npu-smi-info.txt").splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("| 3     910B3"))
    info = ascend.parse_info("\n".join(lines[: cut + 1]))  # NPU 3's first row only
    assert [chip.npu_id for chip in info.chips] == [0, 1, 2]
    assert info.problems == ("NPU row '3     910B3' has no second row (output cut short)",)


def test_an_unreadable_chip_is_left_out_and_named() -> None:
    text = read("910b3-npu-smi-info.txt").replace(
        "| 0000:C2:00.0  | 0           0    / 0          3314 / 65536         |",
        "| 0000:C2:00.0  | 0           garbled                                |",
    )
    info = ascend.parse_info(text)
    assert [chip.npu_id for chip in info.chips] == [0, 2, 3, 4, 5, 6, 7]
    assert info.problems == ("NPU row '1     910B3' unreadable (no memory usage)",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        VendorCli.read("metax/c500-mx-smi-2.3.1-1gpu.txt"),
        "\n".join(read("300i-pro-310p3-npu-smi-info-in-pod-hami-vnpu-8192.txt").splitlines()[:5]),
        read("910a-npu-smi-info-i0-t-board-error-invalid-card.txt"),
    ],
    ids=["empty", "mx-smi-output", "log-lines-only", "usage-error"],
)
def test_output_without_an_npu_smi_table_is_refused(text: str) -> None:
    with pytest.raises(commands.UnexpectedOutput):
        ascend.parse_info(text)


# --- key/value commands ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["910b4-npu-smi-info-m-8cards.txt", "910a-npu-smi-info-m.txt"])
def test_the_chip_map_skips_mcus(name: str) -> None:
    assert ascend.parse_chip_map(read(name)) == {(npu, 0): npu for npu in range(8)}


def test_boards() -> None:
    assert ascend.parse_board(read("910a-npu-smi-info-i0-t-board.txt")) == ascend.NpuBoard(
        npu_id=0,
        chip_count=1,
        bus_id="0000:61:00.0",
        pci_device=0xD801,
        board_id="0x02",
        software_version="23.0.5",
        firmware_version="7.1.0.7.220",
    )
    duo = ascend.parse_board(
        read("300i-duo-IT21PD2G10-npu-smi-info-t-board-TESTFIXTURE-noindent.txt")
    )
    assert (duo.npu_id, duo.chip_count, duo.pci_device, duo.bus_id) == (
        2944,
        2,
        0xD500,
        "0000:0c:00.0",
    )
    assert duo.product_name == "IT21PD2G10"
    b910 = ascend.parse_board(read("910b-IT21HMDC-npu-smi-info-t-board-i0-TESTFIXTURE.txt"))
    assert (b910.chip_count, b910.pci_device, b910.software_version) == (1, 0xD802, "25.5.1")
    chip = ascend.parse_board(read("910a-npu-smi-info-i0-c0-t-board.txt"))
    assert (chip.npu_id, chip.chip_count, chip.bus_id) == (0, None, "0000:61:00.0")


def test_an_invalid_card_is_no_board() -> None:
    with pytest.raises(commands.UnexpectedOutput, match=r"no NPU ID: 'Invalid card id\.'"):
        ascend.parse_board(read("910a-npu-smi-info-i0-t-board-error-invalid-card.txt"))


def test_health_ok_and_alarm() -> None:
    assert ascend.parse_health(read("910a-npu-smi-info-i0-c0-t-health-ok.txt")) == ascend.NpuHealth(
        "OK"
    )
    alarm = ascend.parse_health(read("910a-npu-smi-info-i0-c0-t-health-alarm.txt"))
    assert alarm.status == "Alarm"
    assert alarm.error_codes == ("A4025021", "8C03A000", "8C084E00")
    assert alarm.messages == (
        "ascend_monitor adda heart beat lost error",
        "node type=process-manager, sensor type=General Software, "
        "event state=The process start failed or exit abnormally",
        "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
    )
    with pytest.raises(commands.UnexpectedOutput):
        ascend.parse_health(read("910a-npu-smi-info-i0-t-board.txt"))


def test_key_value_blocks_end_at_blank_lines() -> None:
    blocks = ascend.parse_key_values(read("910b1-npu-smi-info-t-common-i1.txt"))
    assert blocks[0] == {"NPU ID": "1", "Chip Count": "1"}
    assert blocks[1]["Aicore Count"] == "24"
    assert blocks[1]["NPU Real-time Power(W)"] == "93.4"
    assert blocks[2] == {"Chip Name": "mcu", "Temperature(C)": "38"}


def test_templates() -> None:
    small = ascend.parse_templates(read("910b4-32g-npu-smi-info-t-template-info.txt"))
    assert small == (
        ascend.VnpuTemplate("vir10_3c_16g", aicore=10, memory_gib=16, aicpu=3),
        ascend.VnpuTemplate("vir10_4c_16g_m", aicore=10, memory_gib=16, aicpu=4),
        ascend.VnpuTemplate("vir10_3c_16g_nm", aicore=10, memory_gib=16, aicpu=3),
        ascend.VnpuTemplate("vir05_1c_8g", aicore=5, memory_gib=8, aicpu=1),
    )
    large = ascend.parse_templates(read("910b4-1-64g-npu-smi-info-t-template-info.txt"))
    assert [(t.name, t.aicore, t.memory_gib, t.aicpu) for t in large] == [
        ("vir10_3c_32g", 10, 32, 3),
        ("vir05_1c_16g", 5, 16, 1),
    ]
    assert large[0].resources() == {
        k.RESOURCE_HUAWEI_NPU_CORE: 10,
        k.RESOURCE_HUAWEI_NPU_CPU: 3,
        k.RESOURCE_GPU_MEMORY: 32 * GIB,
    }


@pytest.mark.parametrize(
    ("name", "aicore", "memory", "aicpu", "vnpus"),
    [
        ("910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-empty.txt", (20, 20), (28, 32), (6, 6), []),
        (
            "910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-2vnpu.txt",
            (0, 20),
            (0, 32),
            (1, 7),
            [
                (100, 0, "ffffffffffff", 1, "vir10_3c_16g"),
                (101, 1, "000000000000", 0, "vir10_3c_16g"),
            ],
        ),
        ("910b4-1-64g-npu-smi-info-t-info-vnpu-i7-c0-empty.txt", (20, 20), (60, 64), (6, 6), []),
        (
            "910b4-1-64g-npu-smi-info-t-info-vnpu-i7-c0-2vnpu.txt",
            (0, 20),
            (0, 64),
            (1, 7),
            [
                (212, 0, "000000000000", 0, "vir10_3c_32g"),
                (213, 1, "000000000000", 0, "vir10_3c_32g"),
            ],
        ),
    ],
    ids=["32g-empty", "32g-2vnpu", "64g-empty-no-heading", "64g-2vnpu"],
)
def test_vnpu_info(
    name: str,
    aicore: tuple[int, int],
    memory: tuple[int, int],
    aicpu: tuple[int, int],
    vnpus: list[tuple[int, int, str, int, str]],
) -> None:
    info = ascend.parse_vnpu_info(read(name))
    assert (info.aicore, info.memory_gib, info.aicpu) == (aicore, memory, aicpu)
    assert [
        (v.vnpu_id, v.vgroup_id, v.container_id, v.status, v.template) for v in info.vnpus
    ] == vnpus


def test_vnpu_info_whose_count_disagrees_is_refused() -> None:
    lines = read("910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-2vnpu.txt").splitlines()
    with pytest.raises(commands.UnexpectedOutput, match="counts 2 vNPUs but lists 1"):
        ascend.parse_vnpu_info("\n".join(lines[:-2]))  # the last vNPU row cut off


# --- the Device ----------------------------------------------------------------------------------


def node() -> Node:
    return Node(metadata=ObjectMeta(name="npu-1", uid="b2"))


def npu(aicore: int, aicpu: int | None, memory_mib: int) -> dict[str, int]:
    resources = {
        k.RESOURCE_HUAWEI_NPU_CORE: aicore,
        k.RESOURCE_HUAWEI_NPU_DVPP: 100,
        k.RESOURCE_GPU_MEMORY: memory_mib * MIB,
        k.RESOURCE_GPU_MEMORY_RATIO: 100,
    }
    if aicpu is not None:
        resources[k.RESOURCE_HUAWEI_NPU_CPU] = aicpu
    return resources


def build(name: str, findings: ascend.Findings | None = None) -> base.ProbeResult:
    return ascend.build_result(ascend.parse_info(read(name)), findings)


@pytest.mark.parametrize(
    ("name", "model", "resources", "minors"),
    [
        ("910b2-npu-smi-info-8cards.txt", "Ascend-910B2", npu(24, 6, 65536), list(range(8))),
        ("910b3-npu-smi-info.txt", "Ascend-910B3", npu(20, 7, 65536), list(range(8))),
        (
            "910b4-npu-smi-info-container-npu4-7-busy.txt",
            "Ascend-910B4",
            npu(20, 7, 32768),
            [4, 5, 6, 7],
        ),
        ("910b4-1-npu-smi-info-PARTIAL-issue.txt", "Ascend-910B4-1", npu(20, 7, 65536), [0, 1]),
        ("910b1-npu-smi-info.txt", "Ascend-910B1", npu(24, None, 65536), [0, 1, 7]),
        (
            "300i-pro-310p3-npu-smi-info-host-2cards.txt",
            "Ascend-310P3",
            npu(8, 7, 21525),
            [0, 1],
        ),
    ],
)
def test_chips_report_npu_resources(
    name: str, model: str, resources: dict[str, int], minors: list[int]
) -> None:
    result = build(name)
    assert [d.minor for d in result.devices] == minors
    for device in result.devices:
        assert device.type == "gpu"
        assert device.health is True
        assert device.conditions == ()
        assert dict(device.resources) == resources
    assert result.labels[k.LABEL_GPU_VENDOR] == "huawei"
    assert result.labels[k.LABEL_GPU_MODEL] == model
    assert result.annotations == {}


def test_the_300i_duo_reports_each_chip_with_its_own_memory() -> None:
    result = build("300i-duo-310p3-npu-smi-info-container-4cards.txt")
    assert result.labels == {
        k.LABEL_GPU_VENDOR: "huawei",
        k.LABEL_GPU_MODEL: "Ascend-310P3-300I-DUO",
        k.LABEL_GPU_DRIVER_VERSION: "25.3.rc1",
    }
    assert [d.minor for d in result.devices] == list(range(8))  # the Device column
    memory = [d.resources[k.RESOURCE_GPU_MEMORY] // MIB for d in result.devices]
    assert memory == [44278, 43693] * 4
    assert {d.resources[k.RESOURCE_HUAWEI_NPU_CORE] for d in result.devices} == {8}
    assert {d.resources[k.RESOURCE_HUAWEI_NPU_CPU] for d in result.devices} == {7}
    # Both chips of a card share its bus ID; the chip tells them apart.
    assert [d.id for d in result.devices[:2]] == ["0000:01:00.0/0", "0000:01:00.0/1"]
    assert len({d.id for d in result.devices}) == 8


def test_a_310p3_card_whose_board_counts_two_chips_is_a_300i_duo() -> None:
    info = ascend.parse_info(read("300i-pro-310p3-npu-smi-info-in-pod-hami-vnpu-8192.txt"))
    duo = ascend.parse_board(
        read("300i-duo-IT21PD2G10-npu-smi-info-t-board-TESTFIXTURE-noindent.txt")
    )
    single = ascend.build_result(info)
    assert single.labels[k.LABEL_GPU_MODEL] == "Ascend-310P3"
    with_board = ascend.build_result(info, ascend.Findings(boards={32768: duo}))
    assert with_board.labels[k.LABEL_GPU_MODEL] == k.MODEL_ASCEND_310P3_300I_DUO


def test_a3_chips_use_their_physical_ids() -> None:
    result = build("a3-ascend910-npu-smi-info-16chips-busy.txt")
    assert [d.minor for d in result.devices] == list(range(16))
    assert [d.module_id for d in result.devices] == list(range(16))
    assert result.labels[k.LABEL_GPU_MODEL] == "Ascend-910C"
    assert [r.power_watts for r in result.readings[:2]] == [211.3, None]
    assert result.readings[0].memory_used_bytes == 61609 * MIB


def test_the_chip_map_gives_the_minors() -> None:
    info = ascend.parse_info(read("910b4-npu-smi-info-container-npu4-7-busy.txt"))
    chip_map = {(4, 0): 0, (5, 0): 1, (6, 0): 2, (7, 0): 3}  # as in a container's numbering
    result = ascend.build_result(info, ascend.Findings(chip_map=chip_map))
    assert [d.minor for d in result.devices] == [0, 1, 2, 3]


def test_topology_comes_from_the_pci_scan() -> None:
    placed = DeviceTopology(socket_id=1, node_id=1, pcie_id="pci0000:80", bus_id="0000:81:00.0")
    info = ascend.parse_info(read("910b4-npu-smi-info-container-npu4-7-busy.txt"))
    result = ascend.build_result(info, topologies={"0000:81:00.0": placed})
    assert [d.topology for d in result.devices] == [placed, None, None, None]


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("910b2c-npu-smi-info-2cards.txt", "910B2C"),
        ("910a-npu-smi-info-warning-vendordoc.txt", "xxx"),
    ],
)
def test_chips_of_models_without_figures_are_left_out(
    name: str, model: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agent.devices.ascend"):
        result = build(name)
    assert result == base.ProbeResult()
    assert f"NPU 0 chip 0 has an unknown model {model!r}; left out" in caplog.text


def test_an_unknown_model_costs_only_its_chip(caplog: pytest.LogCaptureFixture) -> None:
    text = read("910b3-npu-smi-info.txt").replace("| 2     910B3 ", "| 2     910X9 ")
    with caplog.at_level(logging.WARNING, logger="agent.devices.ascend"):
        result = ascend.build_result(ascend.parse_info(text))
    assert [d.minor for d in result.devices] == [0, 1, 3, 4, 5, 6, 7]
    assert "NPU 2 chip 0 has an unknown model '910X9'; left out" in caplog.text


def with_health(name: str, npu_id: int, value: str) -> str:
    """The table with one chip's Health cell edited (no capture of a non-OK table exists)."""
    text = read(name)
    row = next(line for line in text.splitlines() if line.startswith(f"| {npu_id} "))
    cells = row.split("|")
    cells[2] = f" {value}".ljust(len(cells[2]))
    return text.replace(row, "|".join(cells), 1)


def test_an_alarm_marks_the_chip_unhealthy_with_the_error_codes() -> None:
    info = ascend.parse_info(with_health("910b3-npu-smi-info.txt", 3, "Alarm"))
    assert info.chips[3].health == "Alarm"
    alarm = ascend.parse_health(read("910a-npu-smi-info-i0-c0-t-health-alarm.txt"))
    moment = datetime(2026, 3, 1, tzinfo=UTC)
    result = ascend.build_result(info, ascend.Findings(health={(3, 0): alarm}), now=moment)
    sick = result.devices[3]
    assert sick.health is False
    (condition,) = sick.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "Healthy",
        "False",
        "HealthAlarm",
    )
    assert condition.message == (
        "npu-smi reports health Alarm: error codes A4025021 8C03A000 8C084E00: "
        "ascend_monitor adda heart beat lost error; node type=process-manager, sensor "
        "type=General Software, event state=The process start failed or exit abnormally; node "
        "type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost."
    )
    assert condition.last_transition_time == moment
    assert result.readings[3].healthy is False
    assert all(d.health and not d.conditions for i, d in enumerate(result.devices) if i != 3)


def test_a_warning_keeps_the_chip_usable_but_says_so() -> None:
    info = ascend.parse_info(with_health("910b3-npu-smi-info.txt", 0, "Warning"))
    (first, *_) = ascend.build_result(info).devices
    assert first.health is True
    (condition,) = first.conditions
    assert (condition.status, condition.reason) == ("True", "HealthWarning")
    assert condition.message == "npu-smi reports health Warning"


@pytest.mark.parametrize("value", ["Critical", "Unknown"])
def test_any_other_health_is_unhealthy(value: str) -> None:
    info = ascend.parse_info(with_health("910b2-npu-smi-info-8cards.txt", 1, value))
    device = ascend.build_result(info).devices[1]
    assert device.health is False
    assert device.conditions[0].reason == f"Health{value}"


def test_the_condition_time_survives_until_the_health_changes() -> None:
    info = ascend.parse_info(with_health("910b3-npu-smi-info.txt", 0, "Alarm"))
    healthy = ascend.parse_info(read("910b3-npu-smi-info.txt"))
    since: dict[str, tuple[str, datetime]] = {}
    t1, t2 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    ascend.build_result(info, transitions=since, now=t1)
    again = ascend.build_result(info, transitions=since, now=t2).devices[0]
    assert again.conditions[0].last_transition_time == t1
    assert ascend.build_result(healthy, transitions=since, now=t2).devices[0].conditions == ()
    later = ascend.build_result(info, transitions=since, now=t2).devices[0]
    assert later.conditions[0].last_transition_time == t2


def test_vnpu_templates_and_instances() -> None:
    templates = ascend.parse_templates(read("910b4-32g-npu-smi-info-t-template-info.txt"))
    carved = ascend.parse_vnpu_info(read("910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-2vnpu.txt"))
    empty = ascend.parse_vnpu_info(read("910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-empty.txt"))
    findings = ascend.Findings(templates=templates, vnpus={(4, 0): carved, (5, 0): empty})
    result = build("910b4-npu-smi-info-container-npu4-7-busy.txt", findings)
    assert json.loads(result.annotations[ascend.ANNOTATION_VNPU_TEMPLATES]) == {
        "vir10_3c_16g": {
            "huawei.com/npu-core": 10,
            "huawei.com/npu-cpu": 3,
            "koordinator.sh/gpu-memory": 16 * GIB,
        },
        "vir10_4c_16g_m": {
            "huawei.com/npu-core": 10,
            "huawei.com/npu-cpu": 4,
            "koordinator.sh/gpu-memory": 16 * GIB,
        },
        "vir10_3c_16g_nm": {
            "huawei.com/npu-core": 10,
            "huawei.com/npu-cpu": 3,
            "koordinator.sh/gpu-memory": 16 * GIB,
        },
        "vir05_1c_8g": {
            "huawei.com/npu-core": 5,
            "huawei.com/npu-cpu": 1,
            "koordinator.sh/gpu-memory": 8 * GIB,
        },
    }
    assert result.devices[0].labels == {ascend.LABEL_VNPUS: "100:vir10_3c_16g,101:vir10_3c_16g"}
    assert [d.labels for d in result.devices[1:]] == [{}, {}, {}]


@pytest.mark.parametrize("table", TABLES, ids=table_id)
def test_the_device_of_every_layout_validates(table: Table, shared_dir: Path) -> None:
    check = validator(shared_dir, "scheduling.koordinator.sh/Device")
    info = ascend.parse_info(read(table.file))
    alarm = ascend.parse_health(read("910a-npu-smi-info-i0-c0-t-health-alarm.txt"))
    first = info.chips[0]
    templates = ascend.parse_templates(read("910b4-1-64g-npu-smi-info-t-template-info.txt"))
    carved = ascend.parse_vnpu_info(read("910b4-1-64g-npu-smi-info-t-info-vnpu-i7-c0-2vnpu.txt"))
    key = (first.npu_id, first.chip_id)
    for findings in (
        None,
        ascend.Findings(health={key: alarm}, templates=templates, vnpus={key: carved}),
    ):
        result = ascend.build_result(info, findings)
        device = base.build_device(node(), [result])
        assert schema_errors(check, json.loads(encode_json(device))) == []


# --- the probe through a stub npu-smi ------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VendorCli:
    return VendorCli(tmp_path, monkeypatch)


async def test_the_probe_asks_for_what_it_needs(
    cli: VendorCli, caplog: pytest.LogCaptureFixture
) -> None:
    sick = with_health("910b4-npu-smi-info-container-npu4-7-busy.txt", 5, "Alarm")
    cli.reply("npu-smi info", cli.write("npu-smi-info.txt", sick))
    cli.reply("npu-smi info -m", "ascend/910b4-npu-smi-info-m-8cards.txt")
    cli.reply(
        "npu-smi info -t health -i 5 -c 0", "ascend/910a-npu-smi-info-i0-c0-t-health-alarm.txt"
    )
    cli.reply("npu-smi info -t template-info", "ascend/910b4-32g-npu-smi-info-t-template-info.txt")
    cli.reply(
        "npu-smi info -t info-vnpu -i 4 -c 0",
        "ascend/910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-2vnpu.txt",
    )
    for other in (5, 6, 7):
        cli.reply(
            f"npu-smi info -t info-vnpu -i {other} -c 0",
            "ascend/910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-empty.txt",
        )
    with caplog.at_level(logging.WARNING, logger="agent.devices.ascend"):
        result = await base.run_probe(ascend.AscendProbe(), limit=60)
    assert cli.calls[:2] == [("npu-smi", "info"), ("npu-smi", "info -m")]
    assert sorted(cli.calls[2:]) == sorted(
        [
            ("npu-smi", "info -t health -i 5 -c 0"),
            ("npu-smi", "info -t template-info"),
            *(("npu-smi", f"info -t info-vnpu -i {n} -c 0") for n in (4, 5, 6, 7)),
        ]
    )
    assert [d.minor for d in result.devices] == [4, 5, 6, 7]
    assert [d.health for d in result.devices] == [True, False, True, True]
    assert result.devices[1].conditions[0].reason == "HealthAlarm"
    assert "NPU 5 chip 0 (minor 5): npu-smi reports health Alarm" in caplog.text
    assert result.devices[0].labels == {ascend.LABEL_VNPUS: "100:vir10_3c_16g,101:vir10_3c_16g"}
    assert set(json.loads(result.annotations[ascend.ANNOTATION_VNPU_TEMPLATES])) == {
        "vir10_3c_16g",
        "vir10_4c_16g_m",
        "vir10_3c_16g_nm",
        "vir05_1c_8g",
    }
    assert result.labels[k.LABEL_GPU_DRIVER_VERSION] == "23.0.6"
    assert [r.memory_used_bytes for r in result.readings] == [
        29096 * MIB,
        29095 * MIB,
        29096 * MIB,
        29096 * MIB,
    ]


async def test_the_300i_duo_probe_skips_boards_and_vnpus(cli: VendorCli) -> None:
    cli.reply("npu-smi info", "ascend/300i-duo-310p3-npu-smi-info-container-4cards.txt")
    cli.reply("npu-smi info -m", code=1, stderr="not supported in a container")
    result = await ascend.AscendProbe().probe()
    assert cli.calls == [("npu-smi", "info"), ("npu-smi", "info -m")]
    assert len(result.devices) == 8
    assert result.labels[k.LABEL_GPU_MODEL] == "Ascend-310P3-300I-DUO"
    assert result.annotations == {}


async def test_a_single_chip_310p3_card_is_checked_on_its_board(
    cli: VendorCli, caplog: pytest.LogCaptureFixture
) -> None:
    cli.reply("npu-smi info", "ascend/300i-pro-310p3-npu-smi-info-host-2cards.txt")
    cli.reply("npu-smi info -m", code=1)
    cli.reply(
        "npu-smi info -t board -i 4",
        "ascend/910a-npu-smi-info-i0-t-board-error-invalid-card.txt",
        code=1,
    )
    cli.reply(
        "npu-smi info -t board -i 5",
        "ascend/910a-npu-smi-info-i0-t-board-error-invalid-card.txt",
        code=1,
    )
    cli.reply("npu-smi info -t template-info", code=255, stderr="Command or option is not found")
    with caplog.at_level(logging.WARNING, logger="agent.devices.ascend"):
        result = await ascend.AscendProbe().probe()
    assert ("npu-smi", "info -t board -i 4") in cli.calls
    assert ("npu-smi", "info -t board -i 5") in cli.calls
    assert "`npu-smi info -t board -i 4` exited with status 1: Invalid card id." in caplog.text
    assert result.labels[k.LABEL_GPU_MODEL] == "Ascend-310P3"
    assert [d.minor for d in result.devices] == [0, 1]
    assert result.annotations == {}


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            {"code": 1, "stderr": "dcmi module initialize failed"},
            "`npu-smi info` exited with status 1",
        ),
        ({"hang": True}, "`npu-smi info` timed out after 0.5s"),
        ({"output": "metax/c500-mx-smi-2.2.9-8gpu.txt"}, "not npu-smi info output"),
    ],
    ids=["non-zero-exit", "hang", "garbage"],
)
async def test_a_failing_npu_smi_reports_no_chip_and_warns(
    cli: VendorCli,
    caplog: pytest.LogCaptureFixture,
    reply: dict[str, object],
    expected: str,
) -> None:
    cli.reply("npu-smi info", **reply)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agent.devices.ascend"):
        result = await ascend.AscendProbe(timeout=0.5).probe()
    assert result == base.ProbeResult()
    assert f"Ascend NPUs not reported: {expected}" in caplog.text


async def test_a_hanging_follow_up_costs_only_its_answer(cli: VendorCli) -> None:
    cli.reply("npu-smi info", "ascend/910b3-npu-smi-info.txt")
    cli.reply("npu-smi info -m", hang=True)
    cli.reply("npu-smi info -t template-info", code=1)
    result = await ascend.AscendProbe(timeout=0.5).probe()
    assert len(result.devices) == 8


async def test_answers_that_do_not_change_are_asked_for_once(cli: VendorCli) -> None:
    cli.reply("npu-smi info", "ascend/300i-pro-310p3-npu-smi-info-host-2cards.txt")
    cli.reply("npu-smi info -m", "ascend/910b4-npu-smi-info-m-8cards.txt")
    cli.reply(
        "npu-smi info -t board -i 4",
        "ascend/910a-npu-smi-info-i0-t-board.txt",  # a board that answers: one chip
    )
    cli.reply("npu-smi info -t board -i 5", "ascend/910a-npu-smi-info-i0-t-board.txt")
    cli.reply("npu-smi info -t template-info", "ascend/910b4-32g-npu-smi-info-t-template-info.txt")
    for npu_id in (4, 5):
        cli.reply(
            f"npu-smi info -t info-vnpu -i {npu_id} -c 0",
            "ascend/910b4-32g-npu-smi-info-t-info-vnpu-i0-c0-empty.txt",
        )
    probe = ascend.AscendProbe()
    first = await probe.probe()
    runs = len(cli.calls)
    second = await probe.probe()
    assert first == second
    assert sorted(cli.calls[runs:]) == [
        ("npu-smi", "info"),
        ("npu-smi", "info -t info-vnpu -i 4 -c 0"),
        ("npu-smi", "info -t info-vnpu -i 5 -c 0"),
    ]
    assert [d.minor for d in second.devices] == [4, 5]  # from -m, not the Device column
    assert second.labels[k.LABEL_GPU_MODEL] == "Ascend-310P3"


async def test_follow_ups_stop_when_the_probe_is_out_of_time(
    cli: VendorCli, caplog: pytest.LogCaptureFixture
) -> None:
    cli.reply("npu-smi info", "ascend/910b3-npu-smi-info.txt")
    cli.reply("npu-smi info -m", hang=True)
    cli.reply("npu-smi info -t template-info", "ascend/910b4-32g-npu-smi-info-t-template-info.txt")
    with caplog.at_level(logging.WARNING, logger="agent.devices.ascend"):
        result = await ascend.AscendProbe(timeout=5, budget=0.5).probe()
    assert len(result.devices) == 8
    assert "`npu-smi info -m` timed out" in caplog.text
    assert "`npu-smi info -t template-info` skipped: the probe is out of time" in caplog.text
    assert ("npu-smi", "info -t template-info") not in cli.calls


async def test_no_npu_smi_on_path_is_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unsupported, match="npu-smi not found on PATH"):
        await ascend.AscendProbe().probe()


# --- the factory ---------------------------------------------------------------------------------


def test_the_factory_needs_ascend_npus_on_the_pci_bus(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    cfg = AgentConfig(host=host.paths)
    # A Huawei NIC (Hi1822) is no NPU.
    add_pci_device(
        host, "0000:05:00.0", vendor=pci.VENDOR_HUAWEI, device=0x1822, class_code=0x020000
    )
    assert ascend.from_config(cfg, "npu-1") is None
    add_numa_node(host, 0, cpus="0-23", package=0)
    add_pci_device(
        host,
        "0000:c1:00.0",
        vendor=pci.VENDOR_HUAWEI,
        device=0xD802,
        class_code=0x120000,
        numa=0,
        pcie_root="pci0000:c0",
    )
    probe = ascend.from_config(cfg, "npu-1")
    assert isinstance(probe, ascend.AscendProbe)
    assert probe.topologies == {
        "0000:c1:00.0": DeviceTopology(
            socket_id=0, node_id=0, pcie_id="pci0000:c0", bus_id="0000:c1:00.0"
        )
    }
    short = AgentConfig(host=host.paths, devices=DevicesSection(probe_timeout=7.5))
    quick = ascend.from_config(short, "npu-1")
    assert quick is not None
    assert (quick.budget, quick.timeout) == (6.0, 2.0)
    chosen = base.probes_for(cfg, "npu-1")
    assert [p for p in chosen if isinstance(p, ascend.AscendProbe)] == [probe]


async def test_the_factory_probe_places_chips_from_sysfs(tmp_path: Path, cli: VendorCli) -> None:
    host = FakeHost(tmp_path)
    add_pci_device(
        host,
        "0000:81:00.0",
        vendor=pci.VENDOR_HUAWEI,
        device=0xD500,
        class_code=0x120000,
        numa=1,
        pcie_root="pci0000:80",
    )
    cli.reply("npu-smi info", "ascend/300i-pro-310p3-npu-smi-info-in-pod-hami-vnpu-8192.txt")
    probe = ascend.from_config(AgentConfig(host=host.paths), "npu-1")
    assert probe is not None
    (device,) = (await probe.probe()).devices
    assert device.topology == DeviceTopology(
        socket_id=-1, node_id=1, pcie_id="pci0000:80", bus_id="0000:81:00.0"
    )
    assert device.resources[k.RESOURCE_GPU_MEMORY] == 8192 * MIB
