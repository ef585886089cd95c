"""MetaX: every recorded ``mx-smi`` layout, garbage, the Device built, and the probe end to end."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config import AgentConfig, DevicesSection
from agent.devices import base, commands, metax, pci
from agent.devices.simulated import ANNOTATION_SGPU_QOS_POLICIES
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
C500_BUSES_229 = [
    "0000:0e:00.0",
    "0000:0f:00.0",
    "0000:10:00.0",
    "0000:12:00.0",
    "0000:35:00.0",
    "0000:36:00.0",
    "0000:37:00.0",
    "0000:38:00.0",
]


def read(name: str) -> str:
    return VendorCli.read(f"metax/{name}")


@dataclass(frozen=True)
class Layout:
    file: str
    smi_version: str
    driver_version: str
    maca_version: str
    names: list[str]
    buses: list[str]
    #: First card: used MiB, total MiB, utilisation, temperature, power, cap, sGPU-M, state.
    first: tuple[int, int, int, float, float, float | None, str, str]


LAYOUTS = [
    Layout(
        "c500-mx-smi-2.1.6-4gpu-busy.txt",
        "2.1.6",
        "2.5.014",
        "2.23.0.1018",
        ["MXC500"] * 4,
        ["0000:05:00.0", "0000:08:00.0", "0000:0e:00.0", "0000:0f:00.0"],
        (60982, 65536, 0, 51.0, 71.0, None, "", ""),
    ),
    Layout(
        "c550-mx-smi-2.1.12-in-pod-1gpu.txt",
        "2.1.12",
        "2.12.13",
        "unknown",
        ["MetaX C550"],
        ["0000:2a:00.0"],
        (858, 65536, 0, 34.0, 97.0, None, "", ""),
    ),
    Layout(
        "c550-mx-smi-2.2.4-8gpu.txt",
        "2.2.4",
        "2.15.9",
        "2.32.0.6",
        ["MetaX C550"] * 8,
        [f"0000:{bus}:00.0" for bus in ("0f", "34", "48", "5a", "87", "ae", "c2", "d7")],
        (858, 65536, 0, 29.0, 53.0, 450.0, "", "Available"),
    ),
    Layout(
        "n260-mx-smi-2.2.8-2gpu-sgpu-native-TESTFIXTURE.txt",
        "2.2.8",
        "3.0.11",
        "3.1.0.14",
        ["MetaX N260"] * 2,
        ["0000:01:00.0", "0000:21:00.0"],
        (666, 65536, 0, 37.0, 29.0, 225.0, "Native", "Available"),
    ),
    Layout(
        "c500-mx-smi-2.2.9-8gpu.txt",
        "2.2.9",
        "3.4.4",
        "3.3.0.15",
        ["MetaX C500"] * 8,
        C500_BUSES_229,
        (826, 65536, 0, 35.0, 57.0, 350.0, "Disabled", "Available"),
    ),
    Layout(
        "c500-mx-smi-2.3.1-1gpu.txt",
        "2.3.1",
        "3.8.30",
        "3.7.1.5",
        ["MetaX C500"],
        ["0000:12:00.0"],
        (826, 65536, 0, 32.0, 37.0, 350.0, "Disabled", "Available"),
    ),
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.file.split("-mx-smi-")[1])
def test_every_recorded_layout_parses(layout: Layout) -> None:
    report = metax.parse_mx_smi(read(layout.file))
    assert report.problems == ()
    assert (report.smi_version, report.driver_version, report.maca_version) == (
        layout.smi_version,
        layout.driver_version,
        layout.maca_version,
    )
    assert report.attached == len(layout.names)
    assert [card.name for card in report.cards] == layout.names
    assert [card.bus_id for card in report.cards] == layout.buses
    assert [card.index for card in report.cards] == list(range(len(layout.names)))
    first = report.cards[0]
    used, total, util, temp, power, cap, sgpu, state = layout.first
    assert first.memory_used_bytes == used * MIB
    assert first.memory_total_bytes == total * MIB
    assert (first.utilization_percent, first.temperature_celsius) == (util, temp)
    assert (first.power_watts, first.power_cap_watts) == (power, cap)
    assert (first.sgpu_mode, first.state) == (sgpu, state)
    assert not any(card.sgpu for card in report.cards)


def test_the_oldest_layout_reads_each_card_of_a_busy_host() -> None:
    cards = metax.parse_mx_smi(read("c500-mx-smi-2.1.6-4gpu-busy.txt")).cards
    assert [card.memory_used_bytes // MIB for card in cards] == [60982, 60534, 60534, 60534]
    assert [card.power_watts for card in cards] == [71.0, 76.0, 74.0, 71.0]
    assert [card.temperature_celsius for card in cards] == [51.0, 51.0, 50.0, 50.0]


def test_board_and_gpu_index_are_separate_columns_from_2_2_9() -> None:
    cards = metax.parse_mx_smi(read("c500-mx-smi-2.2.9-8gpu.txt")).cards
    assert [(card.board, card.index) for card in cards] == [(i, i) for i in range(8)]
    assert [card.temperature_celsius for card in cards] == [35, 37, 36, 35, 33, 34, 34, 36]
    older = metax.parse_mx_smi(read("c550-mx-smi-2.2.4-8gpu.txt")).cards
    assert {card.board for card in older} == {None}


def test_a_partial_capture_lists_what_it_shows_and_says_what_is_missing() -> None:
    report = metax.parse_mx_smi(read("c500-mx-smi-2.1.12-8gpu-PARTIAL-issue.txt"))
    assert [(card.index, card.bus_id) for card in report.cards] == [
        (0, "0000:0e:00.0"),
        (1, "0000:0f:00.0"),
    ]
    assert [card.power_watts for card in report.cards] == [54.0, 45.0]
    assert report.problems == ("mx-smi reports 8 GPUs attached but the table lists 2",)


def test_a_gpu_cut_in_half_is_left_out() -> None:
    lines = read("c500-mx-smi-2.2.9-8gpu.txt").splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("| 3     MetaX C500"))
    report = metax.parse_mx_smi("\n".join(lines[: cut + 1]))  # GPU 3's first row only
    assert [card.index for card in report.cards] == [0, 1, 2]
    assert report.problems[0] == "GPU row '3     MetaX C500': 1 text row(s), expected 2"
    assert report.problems[1] == "mx-smi reports 8 GPUs attached but the table lists 4"


def test_an_unreadable_row_costs_only_its_gpu() -> None:
    text = read("c500-mx-smi-2.2.9-8gpu.txt").replace(
        "| 0000:0f:00.0        |", "| 0000:0f:00         |"
    )
    report = metax.parse_mx_smi(text)
    assert [card.index for card in report.cards] == [0, 2, 3, 4, 5, 6, 7]
    assert report.problems == ("GPU row '1     MetaX C500' unreadable (bus id '0000:0f:00')",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        VendorCli.read("ascend/910b3-npu-smi-info.txt"),
        # The banner of a MetaX run without any table after it.
        "\n".join(VendorCli.read("metax/c500-mx-smi-2.3.1-1gpu.txt").splitlines()[:6]),
    ],
    ids=["empty", "npu-smi-output", "banner-only"],
)
def test_output_that_is_no_mx_smi_table_is_refused(text: str) -> None:
    with pytest.raises(commands.UnexpectedOutput):
        metax.parse_mx_smi(text)


def test_the_list_gives_uuids_by_bus_id() -> None:
    listings = metax.parse_mx_smi_list(read("c500-mx-smi-L-EXCERPT-code-comment.txt"))
    assert listings == (
        metax.MetaxListing(
            0, "MXC500", "0000:08:00.0", "Available", "GPU-e702f06b-bbd6-bc06-5196-90a5554a24ba"
        ),
        metax.MetaxListing(
            7, "MXC500", "0000:3c:00.0", "Available", "GPU-0e715b45-bcef-1500-e2db-752724095700"
        ),
    )


@pytest.mark.parametrize(
    ("name", "model"),
    [("MetaX C500", "C500"), ("MXC500", "C500"), ("MetaX N260", "N260"), ("S30", None)],
)
def test_model_labels(name: str, model: str | None) -> None:
    assert metax.model_of(name) == model


# --- the Device ----------------------------------------------------------------------------------


def node() -> Node:
    return Node(metadata=ObjectMeta(name="mx-1", uid="a1"))


def test_full_cards_report_core_memory_and_ratio() -> None:
    report = metax.parse_mx_smi(read("c500-mx-smi-2.2.9-8gpu.txt"))
    topology = DeviceTopology(
        socket_id=0, node_id=0, pcie_id="pci0000:0d", bus_id=C500_BUSES_229[0]
    )
    result = metax.build_result(report, topologies={C500_BUSES_229[0]: topology})
    assert len(result.devices) == 8
    for device in result.devices:
        assert device.type == "gpu"
        assert device.health is True
        assert dict(device.resources) == {
            k.RESOURCE_GPU_CORE: 100,
            k.RESOURCE_GPU_MEMORY: 65536 * MIB,
            k.RESOURCE_GPU_MEMORY_RATIO: 100,
        }
        assert device.conditions == ()
    assert [d.minor for d in result.devices] == list(range(8))
    assert [d.id for d in result.devices] == C500_BUSES_229  # no UUIDs without mx-smi -L
    assert result.devices[0].topology == topology
    assert result.devices[1].topology == DeviceTopology(
        socket_id=-1, node_id=-1, pcie_id="", bus_id="0000:0f:00.0"
    )
    assert result.labels == {
        k.LABEL_GPU_VENDOR: "metax",
        k.LABEL_GPU_MODEL: "C500",
        k.LABEL_GPU_DRIVER_VERSION: "3.4.4",
    }
    assert result.annotations == {}


def test_sgpu_mode_adds_16_sgpus_per_card_and_the_qos_policies() -> None:
    # No capture of a card in sGPU mode exists; the 2.3.1 table is edited to say Enabled.
    text = read("c500-mx-smi-2.3.1-1gpu.txt").replace(
        "0%          Disabled", "0%           Enabled"
    )
    report = metax.parse_mx_smi(text)
    assert report.cards[0].sgpu
    result = metax.build_result(report)
    (device,) = result.devices
    assert device.resources[k.RESOURCE_METAX_SGPU] == 16
    assert device.resources[k.RESOURCE_GPU_CORE] == 100
    assert result.annotations == {
        ANNOTATION_SGPU_QOS_POLICIES: "fixed-share,best-effort,burst-share"
    }
    assert set(result.annotations[ANNOTATION_SGPU_QOS_POLICIES].split(",")) == set(
        k.SGPU_QOS_POLICIES
    )


def test_native_and_disabled_cards_are_whole_gpus() -> None:
    for name in (
        "n260-mx-smi-2.2.8-2gpu-sgpu-native-TESTFIXTURE.txt",
        "c500-mx-smi-2.2.9-8gpu.txt",
    ):
        result = metax.build_result(metax.parse_mx_smi(read(name)))
        assert all(k.RESOURCE_METAX_SGPU not in d.resources for d in result.devices)
        assert result.annotations == {}


def test_uuids_come_from_the_list_when_bus_ids_match() -> None:
    report = metax.parse_mx_smi(read("c500-mx-smi-2.3.1-1gpu.txt"))
    listing = metax.MetaxListing(0, "MXC500", "0000:12:00.0", "Available", "GPU-0123")
    (device,) = metax.build_result(report, [listing]).devices
    assert device.id == "GPU-0123"


def test_a_card_not_available_is_unhealthy_with_a_condition() -> None:
    # No capture of an unavailable card exists; GPU 0's GPU-State is edited.
    text = read("c550-mx-smi-2.2.4-8gpu.txt").replace(
        "| 858/65536 MiB       | Available            |",
        "| 858/65536 MiB       | Unavailable          |",
        1,
    )
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    result = metax.build_result(metax.parse_mx_smi(text), now=moment)
    first, *others = result.devices
    assert first.health is False
    (condition,) = first.conditions
    assert (condition.type, condition.status, condition.reason) == (
        "Healthy",
        "False",
        "GPUStateNotAvailable",
    )
    assert condition.message == "mx-smi reports GPU-State 'Unavailable'"
    assert condition.last_transition_time == moment
    assert all(d.health and not d.conditions for d in others)
    assert result.readings[0].healthy is False


def test_the_condition_keeps_its_transition_time_while_unchanged() -> None:
    text = read("c550-mx-smi-2.1.12-in-pod-1gpu.txt")
    listing = metax.MetaxListing(0, "MXC550", "0000:2a:00.0", "Not Available(ECC)", "GPU-9")
    report = metax.parse_mx_smi(text)
    since: dict[str, tuple[str, datetime]] = {}
    first = datetime(2026, 1, 1, tzinfo=UTC)
    later = datetime(2026, 1, 2, tzinfo=UTC)
    (a,) = metax.build_result(report, [listing], transitions=since, now=first).devices
    (b,) = metax.build_result(report, [listing], transitions=since, now=later).devices
    assert a.conditions[0].message == "mx-smi -L reports 'Not Available(ECC)'"
    assert b.conditions[0].last_transition_time == first
    healthy = metax.MetaxListing(0, "MXC550", "0000:2a:00.0", "Available", "GPU-9")
    (c,) = metax.build_result(report, [healthy], transitions=since, now=later).devices
    assert c.health
    assert not c.conditions
    (d,) = metax.build_result(report, [listing], transitions=since, now=later).devices
    assert d.conditions[0].last_transition_time == later


def test_a_card_of_unknown_model_is_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = read("c500-mx-smi-2.2.9-8gpu.txt").replace(
        "| 2     MetaX C500 |", "| 2     MetaX ????? |"
    )
    with caplog.at_level(logging.WARNING, logger="agent.devices.metax"):
        result = metax.build_result(metax.parse_mx_smi(text))
    assert [d.minor for d in result.devices] == [0, 1, 3, 4, 5, 6, 7]
    assert "mx-smi GPU 2 (0000:10:00.0) has an unknown model 'MetaX ?????'; left out" in caplog.text


def test_readings_carry_the_live_figures() -> None:
    result = metax.build_result(metax.parse_mx_smi(read("c500-mx-smi-2.1.6-4gpu-busy.txt")))
    first = result.readings[0]
    assert first == base.DeviceReading(
        vendor="metax",
        model="C500",
        minor=0,
        uuid="0000:05:00.0",
        healthy=True,
        utilization_percent=0,
        memory_used_bytes=60982 * MIB,
        memory_total_bytes=65536 * MIB,
        temperature_celsius=51.0,
        power_watts=71.0,
    )
    assert len(result.readings) == 4


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.file.split("-mx-smi-")[1])
def test_the_device_of_every_layout_validates(layout: Layout, shared_dir: Path) -> None:
    check = validator(shared_dir, "scheduling.koordinator.sh/Device")
    text = read(layout.file)
    # Also as unhealthy and sliced cards (edited: no such capture exists).
    edited = text.replace("Available ", "Unavailable").replace("Disabled", " Enabled")
    for variant in (text, edited):
        result = metax.build_result(metax.parse_mx_smi(variant))
        device = base.build_device(node(), [result])
        assert schema_errors(check, json.loads(encode_json(device))) == []


# --- the probe through a stub mx-smi -------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VendorCli:
    return VendorCli(tmp_path, monkeypatch)


async def test_the_probe_reads_mx_smi_and_its_list(cli: VendorCli) -> None:
    cli.reply("mx-smi", "metax/c500-mx-smi-2.2.9-8gpu.txt")
    cli.reply("mx-smi -L", "metax/c500-mx-smi-L-EXCERPT-code-comment.txt")
    result = await base.run_probe(metax.MetaxProbe(), limit=30)
    assert cli.calls == [("mx-smi", ""), ("mx-smi", "-L")]
    assert [d.topology.bus_id for d in result.devices if d.topology] == C500_BUSES_229
    assert result.labels[k.LABEL_GPU_MODEL] == "C500"
    assert [r.power_watts for r in result.readings] == [57, 58, 58, 60, 57, 56, 55, 56]


async def test_the_probe_without_the_list_names_gpus_by_bus_id(
    cli: VendorCli, caplog: pytest.LogCaptureFixture
) -> None:
    cli.reply("mx-smi", "metax/c550-mx-smi-2.1.12-in-pod-1gpu.txt")
    cli.reply("mx-smi -L", code=1, stderr="unknown option -L")
    with caplog.at_level(logging.INFO, logger="agent.devices.metax"):
        result = await metax.MetaxProbe().probe()
    (device,) = result.devices
    assert device.id == "0000:2a:00.0"
    assert "`mx-smi -L` exited with status 1: unknown option -L" in caplog.text


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ({"code": 1, "stderr": "mxsml init failed"}, "`mx-smi` exited with status 1: mxsml init"),
        ({"hang": True}, "`mx-smi` timed out after 0.5s"),
        ({"output": "ascend/910b3-npu-smi-info.txt"}, "not MetaX mx-smi output"),
    ],
    ids=["non-zero-exit", "hang", "not-metax"],
)
async def test_a_failing_mx_smi_reports_no_gpu_and_warns(
    cli: VendorCli,
    caplog: pytest.LogCaptureFixture,
    reply: dict[str, object],
    expected: str,
) -> None:
    cli.reply("mx-smi", **reply)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agent.devices.metax"):
        result = await metax.MetaxProbe(timeout=0.5).probe()
    assert result == base.ProbeResult()
    assert f"MetaX GPUs not reported: {expected}" in caplog.text


async def test_the_probe_warns_about_a_truncated_table(
    cli: VendorCli, caplog: pytest.LogCaptureFixture
) -> None:
    cli.reply("mx-smi", "metax/c500-mx-smi-2.1.12-8gpu-PARTIAL-issue.txt")
    cli.reply("mx-smi -L", code=1)
    with caplog.at_level(logging.WARNING, logger="agent.devices.metax"):
        result = await metax.MetaxProbe().probe()
    assert len(result.devices) == 2
    assert "mx-smi: mx-smi reports 8 GPUs attached but the table lists 2" in caplog.text


async def test_no_mx_smi_on_path_is_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unsupported, match="mx-smi not found on PATH"):
        await metax.MetaxProbe().probe()
    assert await base.probe_all([metax.MetaxProbe()], limit=5) == []


# --- the factory ---------------------------------------------------------------------------------


def test_the_factory_needs_metax_devices_on_the_pci_bus(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    cfg = AgentConfig(host=host.paths)
    assert metax.from_config(cfg, "mx-1") is None
    add_pci_device(
        host, "0000:3b:00.0", vendor=pci.VENDOR_NVIDIA, device=0x2330, class_code=0x030200
    )
    assert metax.from_config(cfg, "mx-1") is None
    add_numa_node(host, 1, cpus="32-63", package=1)
    add_pci_device(
        host,
        "0000:0e:00.0",
        vendor=pci.VENDOR_METAX,
        device=0x4001,
        class_code=0x038000,
        numa=1,
        pcie_root="pci0000:0d",
    )
    probe = metax.from_config(cfg, "mx-1")
    assert isinstance(probe, metax.MetaxProbe)
    assert probe.topologies == {
        "0000:0e:00.0": DeviceTopology(
            socket_id=1, node_id=1, pcie_id="pci0000:0d", bus_id="0000:0e:00.0"
        )
    }
    assert probe.timeout == 10.0
    short = AgentConfig(host=host.paths, devices=DevicesSection(probe_timeout=6))
    assert metax.from_config(short, "mx-1").timeout == 2.0  # type: ignore[union-attr]
    chosen = base.probes_for(cfg, "mx-1")
    assert [p for p in chosen if isinstance(p, metax.MetaxProbe)] == [probe]


async def test_the_factory_probe_places_cards_from_sysfs(tmp_path: Path, cli: VendorCli) -> None:
    host = FakeHost(tmp_path)
    add_pci_device(
        host,
        "0000:12:00.0",
        vendor=pci.VENDOR_METAX,
        device=0x4001,
        class_code=0x038000,
        numa=0,
        pcie_root="pci0000:11",
    )
    cli.reply("mx-smi", "metax/c500-mx-smi-2.3.1-1gpu.txt")
    cli.reply("mx-smi -L", code=1)
    probe = metax.from_config(AgentConfig(host=host.paths), "mx-1")
    assert probe is not None
    (device,) = (await probe.probe()).devices
    assert device.topology == DeviceTopology(
        socket_id=-1, node_id=0, pcie_id="pci0000:11", bus_id="0000:12:00.0"
    )
