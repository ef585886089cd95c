"""The PCI scan over FakeHost sysfs trees: identity, NUMA node, driver, PCIe root, bad files."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from agent.config import HostPaths
from agent.devices import pci
from tests.fakes.host import FakeHost
from tests.fakes.nvml import add_numa_node, add_pci_device

GPU = "0000:3b:00.0"


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost(tmp_path)


def add_gpu(host: FakeHost, address: str = GPU, **options: object) -> Path:
    fields: dict[str, object] = {
        "vendor": pci.VENDOR_NVIDIA,
        "device": 0x2330,
        "class_code": 0x030200,
        "numa": 0,
        "driver": "nvidia",
        "pcie_root": "pci0000:3a",
        "bridges": ("0000:3a:00.0",),
    }
    fields.update(options)
    return add_pci_device(host, address, **fields)  # type: ignore[arg-type]


def test_a_gpu_bound_to_its_driver(host: FakeHost) -> None:
    add_gpu(host, numa=1)
    assert pci.scan(host.paths) == (
        pci.PciDevice(
            address=GPU,
            vendor=0x10DE,
            device=0x2330,
            class_code=0x030200,
            numa_node=1,
            driver="nvidia",
            pcie_root="pci0000:3a",
        ),
    )
    assert pci.scan(host.paths)[0].base_class == pci.CLASS_DISPLAY


def test_devices_of_several_vendors_in_address_order(host: FakeHost) -> None:
    add_pci_device(
        host, "0000:81:00.0", vendor=pci.VENDOR_HUAWEI, device=0xD802, class_code=0x120000
    )
    add_gpu(host)
    add_pci_device(
        host, "0000:3b:00.1", vendor=pci.VENDOR_NVIDIA, device=0x22A3, class_code=0x040300
    )
    devices = pci.scan(host.paths)
    assert [d.address for d in devices] == [GPU, "0000:3b:00.1", "0000:81:00.0"]
    assert [d.address for d in pci.of_vendor(devices, pci.VENDOR_NVIDIA)] == [GPU, "0000:3b:00.1"]
    assert [d.address for d in pci.of_vendor(devices, pci.VENDOR_HUAWEI)] == ["0000:81:00.0"]
    assert pci.of_vendor(devices, pci.VENDOR_METAX) == ()


def test_an_unbound_device_has_no_driver(host: FakeHost) -> None:
    add_gpu(host, driver=None)
    assert pci.scan(host.paths)[0].driver is None


def test_unknown_numa_node(host: FakeHost, caplog: pytest.LogCaptureFixture) -> None:
    add_gpu(host, "0000:3b:00.0", numa=-1)
    add_gpu(host, "0000:5e:00.0", numa=None)
    with caplog.at_level(logging.WARNING):
        assert [d.numa_node for d in pci.scan(host.paths)] == [-1, -1]
    assert caplog.records == []


def test_the_pcie_root_is_the_first_root_directory_of_the_resolved_path(host: FakeHost) -> None:
    add_gpu(host, pcie_root="pci0000:17", bridges=("0000:17:00.0", "0000:18:00.0", "0000:19:00.0"))
    assert pci.scan(host.paths)[0].pcie_root == "pci0000:17"


def test_an_entry_that_is_not_a_link_has_no_known_root(host: FakeHost) -> None:
    # A plain directory (no link into /sys/devices): identity still read, root unknown.
    host.write(f"/sys/bus/pci/devices/{GPU}/vendor", "0x10de\n")
    host.write(f"/sys/bus/pci/devices/{GPU}/device", "0x2330\n")
    host.write(f"/sys/bus/pci/devices/{GPU}/class", "0x030200\n")
    [device] = pci.scan(host.paths)
    assert (device.vendor, device.pcie_root, device.numa_node, device.driver) == (
        pci.VENDOR_NVIDIA,
        "",
        -1,
        None,
    )


@pytest.mark.parametrize("name", ["vendor", "device", "class"])
@pytest.mark.parametrize("content", [None, "", "0xzz10\n", "\x00\xff\xfe"], ids=repr)
def test_a_device_whose_identity_is_garbled_is_left_out(
    host: FakeHost, caplog: pytest.LogCaptureFixture, name: str, content: str | None
) -> None:
    broken = add_gpu(host, "0000:3b:00.0")
    add_gpu(host, "0000:5e:00.0")
    if content is None:
        (broken / name).unlink()
    else:
        (broken / name).write_bytes(content.encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="agent.devices.pci"):
        assert [d.address for d in pci.scan(host.paths)] == ["0000:5e:00.0"]
    [record] = caplog.records
    assert "0000:3b:00.0" in record.getMessage()
    assert name in record.getMessage()


def test_a_garbled_numa_node_costs_only_that_field(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    directory = add_gpu(host)
    (directory / "numa_node").write_text("zero\n")
    with caplog.at_level(logging.WARNING, logger="agent.devices.pci"):
        [device] = pci.scan(host.paths)
    assert (device.numa_node, device.driver, device.pcie_root) == (-1, "nvidia", "pci0000:3a")
    [record] = caplog.records
    assert GPU in record.getMessage()


def test_entries_that_are_not_addresses_are_skipped(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    add_gpu(host)
    host.write("/sys/bus/pci/devices/README", "not a device\n")
    with caplog.at_level(logging.WARNING, logger="agent.devices.pci"):
        assert [d.address for d in pci.scan(host.paths)] == [GPU]
    assert len(caplog.records) == 1


def test_a_host_without_pci_devices(host: FakeHost) -> None:
    assert pci.scan(host.paths) == ()


def test_this_hosts_own_sysfs_scans_without_error() -> None:
    # Whatever the machine running the tests has (possibly nothing): well-formed devices.
    for device in pci.scan(HostPaths()):
        assert re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", device.address)
        assert device.pcie_root == "" or device.pcie_root.startswith("pci")


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3b:00.1", "0000:3b:00.1"),
        (" 0001:C1:1F.7\n", "0001:c1:1f.7"),
    ],
)
def test_normalize_address(text: str, address: str) -> None:
    assert pci.normalize_address(text) == address


@pytest.mark.parametrize("text", ["", "3b:00", "0000:3b:00.8", "gpu0", "0000:3b:000.0"])
def test_normalize_address_refuses_what_is_not_an_address(text: str) -> None:
    with pytest.raises(ValueError, match="not a PCI address"):
        pci.normalize_address(text)


def test_the_socket_of_a_numa_node(host: FakeHost) -> None:
    add_numa_node(host, 0, cpus="0-31", package=0)
    add_numa_node(host, 1, cpus="32-63", package=1)
    assert pci.numa_socket(host.paths, 0) == 0
    assert pci.numa_socket(host.paths, 1) == 1
    assert pci.numa_socket(host.paths, 2) == -1
    assert pci.numa_socket(host.paths, -1) == -1


def test_a_garbled_cpu_topology_leaves_the_socket_unknown(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    host.write("/sys/devices/system/node/node0/cpulist", "none\n")
    add_numa_node(host, 1, cpus="32-63", package=1)
    host.write("/sys/devices/system/cpu/cpu32/topology/physical_package_id", "one\n")
    with caplog.at_level(logging.WARNING, logger="agent.devices.pci"):
        assert pci.numa_socket(host.paths, 0) == -1
        assert pci.numa_socket(host.paths, 1) == -1
    assert len(caplog.records) == 2
