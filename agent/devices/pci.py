"""The PCI devices of the host as sysfs lists them: which accelerators there are and where.

Every entry of ``/sys/bus/pci/devices`` (under the host root) whose name is a PCI address
becomes a :class:`PciDevice`:

- ``vendor``, ``device`` and ``class`` files (hexadecimal, ``0x10de``) identify it; a device
  whose identity cannot be read is left out;
- ``numa_node`` is its NUMA node (``-1`` when the kernel does not know, or the file is
  missing or garbled);
- the ``driver`` link names the driver it is bound to (``None`` when unbound);
- the PCIe root is the first ``pciDDDD:BB`` directory of the resolved device path
  (``../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0`` -> ``pci0000:3a``).

A file that is missing or garbled costs that field or that device and one log line, never
the scan. The scan reads a few files per device: callers on the event loop run it in a
thread.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agent.config import HostPaths
from apis.scheduling import DeviceTopology

__all__ = [
    "CLASS_DISPLAY",
    "DEVICES_DIR",
    "VENDOR_HUAWEI",
    "VENDOR_METAX",
    "VENDOR_NVIDIA",
    "PciDevice",
    "normalize_address",
    "numa_socket",
    "of_vendor",
    "scan",
    "topologies",
]

_log = logging.getLogger(__name__)

VENDOR_NVIDIA: Final = 0x10DE
VENDOR_HUAWEI: Final = 0x19E5
VENDOR_METAX: Final = 0x9999

#: PCI base class of display controllers (VGA ``0x0300``, 3D ``0x0302``): GPUs, as opposed to
#: the audio functions, USB controllers and switches a vendor also ships.
CLASS_DISPLAY: Final = 0x03

#: Where the kernel lists PCI devices (a host path).
DEVICES_DIR: Final = "/sys/bus/pci/devices"

# Sysfs names are lower case ``dddd:bb:dd.f``; some hosts (VMD) use longer domains.
_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_LOOSE_ADDRESS = re.compile(
    r"(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<slot>[0-9a-f]{1,2})\.(?P<fn>[0-7])"
)
_ROOT = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}")


@dataclass(frozen=True, slots=True)
class PciDevice:
    """One PCI function as sysfs describes it."""

    #: ``0000:3b:00.0`` (lower case).
    address: str
    vendor: int
    device: int
    #: The 24-bit class code (``0x030200``: 3D controller).
    class_code: int
    #: NUMA node; -1 when unknown.
    numa_node: int
    #: Name of the bound driver; ``None`` when unbound.
    driver: str | None
    #: PCIe root (``pci0000:3a``); ``""`` when unknown.
    pcie_root: str

    @property
    def base_class(self) -> int:
        """The base class (``0x03`` for display controllers)."""
        return self.class_code >> 16


def normalize_address(text: str) -> str:
    """A PCI address in sysfs form: ``00000000:3B:00.0`` (NVML) -> ``0000:3b:00.0``.

    A missing domain is domain 0. :class:`ValueError` when ``text`` is not an address.
    """
    match = _LOOSE_ADDRESS.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"not a PCI address: {text!r}")
    domain = int(match["domain"] or "0", 16)
    return f"{domain:04x}:{int(match['bus'], 16):02x}:{int(match['slot'], 16):02x}.{match['fn']}"


def scan(host: HostPaths) -> tuple[PciDevice, ...]:
    """Every readable PCI device of the host, in address order."""
    root = host.path(DEVICES_DIR)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        _log.debug("no PCI devices: %s does not exist", root)
        return ()
    except OSError as err:
        _log.warning("cannot list PCI devices in %s: %s", root, err)
        return ()
    found: list[PciDevice] = []
    for name in names:
        if not _ADDRESS.fullmatch(name):
            _log.warning("PCI device entry %r in %s is not a PCI address; skipped", name, root)
            continue
        device = _read_device(root / name, name)
        if device is not None:
            found.append(device)
    return tuple(found)


def of_vendor(devices: Iterable[PciDevice], vendor: int) -> tuple[PciDevice, ...]:
    """The devices of one vendor (``of_vendor(scan(host), VENDOR_NVIDIA)``)."""
    return tuple(device for device in devices if device.vendor == vendor)


def numa_socket(host: HostPaths, node: int) -> int:
    """The CPU socket of NUMA node ``node`` (the package of its first CPU); -1 when unknown."""
    if node < 0:
        return -1
    cpulist = _read_text(host.path(f"/sys/devices/system/node/node{node}/cpulist"))
    if not cpulist:
        return -1
    first = re.match(r"\s*(\d+)", cpulist)
    if first is None:
        _log.warning("NUMA node %d: garbled cpulist %r", node, cpulist[:40])
        return -1
    package = _read_text(
        host.path(f"/sys/devices/system/cpu/cpu{first[1]}/topology/physical_package_id")
    )
    if package is None:
        return -1
    try:
        return int(package.strip())
    except ValueError:
        _log.warning("cpu%s: garbled physical_package_id %r", first[1], package[:40])
        return -1


def _read_text(path: Path) -> str | None:
    """The text of a sysfs file; ``None`` when it is missing or unreadable."""
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as err:
        _log.warning("cannot read %s: %s", path, err)
        return None


def _read_hex(directory: Path, name: str) -> int | None:
    text = _read_text(directory / name)
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _read_device(directory: Path, address: str) -> PciDevice | None:
    vendor = _read_hex(directory, "vendor")
    device = _read_hex(directory, "device")
    class_code = _read_hex(directory, "class")
    missing = [
        name
        for name, value in (("vendor", vendor), ("device", device), ("class", class_code))
        if value is None
    ]
    if vendor is None or device is None or class_code is None:
        _log.warning("PCI device %s: %s missing or garbled; skipped", address, ", ".join(missing))
        return None
    return PciDevice(
        address=address,
        vendor=vendor,
        device=device,
        class_code=class_code,
        numa_node=_numa_node(directory, address),
        driver=_driver(directory, address),
        pcie_root=_pcie_root(directory),
    )


def _numa_node(directory: Path, address: str) -> int:
    text = _read_text(directory / "numa_node")
    if text is None:
        return -1
    try:
        return int(text.strip())
    except ValueError:
        _log.warning("PCI device %s: garbled numa_node %r; NUMA node unknown", address, text[:40])
        return -1


def _driver(directory: Path, address: str) -> str | None:
    try:
        target = os.readlink(directory / "driver")
    except FileNotFoundError:
        return None
    except OSError as err:
        _log.warning("PCI device %s: cannot read its driver link: %s", address, err)
        return None
    return os.path.basename(target.rstrip("/")) or None


def _pcie_root(directory: Path) -> str:
    resolved = os.path.realpath(directory)
    for part in Path(resolved).parts:
        if _ROOT.fullmatch(part):
            return part
    return ""


def topologies(host: HostPaths, devices: Iterable[PciDevice]) -> dict[str, DeviceTopology]:
    """Where each PCI device sits (NUMA node, its socket, PCIe root), by bus ID: the
    ``topology`` of a Device entry."""
    return {
        device.address: DeviceTopology(
            socket_id=numa_socket(host, device.numa_node),
            node_id=device.numa_node,
            pcie_id=device.pcie_root,
            bus_id=device.address,
        )
        for device in devices
    }
