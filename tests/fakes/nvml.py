"""``FakeNvml``: :class:`agent.devices.nvml.NvmlApi` over a table of GPUs, with faults.

Build one from a device table (:func:`h100_table`, or :class:`FakeGpu` rows of your own) and
lay the same GPUs out in a :class:`~tests.fakes.host.FakeHost` sysfs tree
(:meth:`FakeNvml.write_sysfs`), since the probe finds GPUs on the PCI bus first::

    nvml = FakeNvml.h100(count=8)
    nvml.write_sysfs(host)
    nvml.lose(3)                   # GPU 3 fell off the bus: its calls raise NotFound
    release = nvml.hang(5)         # GPU 5's calls block until release.set() / nvml.release()
    nvml.xid(2, 79)                # a critical XID event on GPU 2

Errors are the ones the real adapter translates NVML's into (``agent.errors``). The figures
are test inputs, not recordings: an H100 80GB HBM3 with 81,559 MiB (what NVML reports for
it), round numbers for the rest. UUIDs and bus IDs are made up and stable.

:func:`add_pci_device` and :func:`add_numa_node` build the sysfs entries themselves (device
directories under a PCIe root, relative ``driver`` and ``/sys/bus/pci/devices`` links).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.devices import pci
from agent.devices.nvml import MemoryInfo, XidEvent
from agent.errors import AgentError, NotFound, TransientError, Unsupported
from tests.fakes.host import FakeHost

__all__ = [
    "H100_MEMORY",
    "H100_NAME",
    "FakeGpu",
    "FakeNvml",
    "add_numa_node",
    "add_pci_device",
    "h100_table",
]

MIB = 1 << 20
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY = 81559 * MIB
#: PCI device ID of the fake H100s' sysfs entries (any value works for the probe).
H100_DEVICE_ID = 0x2330
_UUIDS = uuid.UUID("0b7e1c52-3f4d-4a8e-9c61-2d5f7a9e8b30")
#: How long a hung call blocks at most (so a forgotten release cannot wedge the test run).
_HANG_CAP = 60.0


@dataclass(slots=True)
class FakeGpu:
    """One row of the device table. ``None`` in an optional field: NVML does not support it."""

    index: int
    bus_id: str
    uuid: str
    minor: int
    name: str = H100_NAME
    memory_total: int = H100_MEMORY
    memory_used: int = 0
    utilization: int | None = 0
    temperature: int | None = 30
    power_mw: int | None = 70_000
    mig: bool | None = False
    ecc_uncorrected: int | None = 0
    #: Hopper GPUs remap rows instead of retiring pages: unsupported.
    retired_pages_pending: bool | None = None
    numa: int = 0
    pcie_root: str = "pci0000:00"
    # faults
    #: Fell off the bus: every call about it raises NotFound.
    lost: bool = False
    #: Raised when the probe asks for its handle (the GPU failed to initialise).
    handle_error: AgentError | None = None
    events_supported: bool = True


def h100_table(count: int = 8) -> list[FakeGpu]:
    """``count`` H100s, two per PCIe root, four per NUMA node (node = socket)."""
    gpus = []
    for index in range(count):
        bus = 0x18 + 0x10 * index
        gpus.append(
            FakeGpu(
                index=index,
                bus_id=f"0000:{bus:02x}:00.0",
                uuid=f"GPU-{uuid.uuid5(_UUIDS, str(index))}",
                minor=index,
                numa=index // 4,
                pcie_root=f"pci0000:{0x10 + 0x20 * (index // 2):02x}",
            )
        )
    return gpus


@dataclass(frozen=True, slots=True)
class _Handle:
    index: int


@dataclass(slots=True)
class _EventSet:
    gpus: set[int] = field(default_factory=set)
    events: deque[XidEvent] = field(default_factory=deque)
    freed: bool = False


@dataclass(slots=True)
class _Hang:
    gpu: int | None
    call: str | None
    release: threading.Event


class FakeNvml:
    """An in-memory NVML. Thread-safe enough for one worker thread plus the test."""

    def __init__(
        self,
        gpus: Sequence[FakeGpu],
        *,
        driver_version: str = "550.54.15",
        library_missing: bool = False,
        call_delay: float = 0.0,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version_text = driver_version
        #: ``init()`` raises Unsupported, as the adapter does without libnvidia-ml.
        self.library_missing = library_missing
        #: Raised by ``init()`` (a driver in trouble).
        self.init_error: AgentError | None = None
        #: Seconds every call takes (spent sleeping, like a call waiting on the driver).
        self.call_delay = call_delay
        self.initialized = 0
        #: ``(call, gpu index or None)`` of every call, in order.
        self.calls: list[tuple[str, int | None]] = []
        #: Identifiers of the threads that made calls.
        self.threads: set[int] = set()
        self._hangs: list[_Hang] = []
        self._sets: list[_EventSet] = []
        self._events = threading.Condition()

    @classmethod
    def h100(
        cls, count: int = 8, *, library_missing: bool = False, call_delay: float = 0.0
    ) -> FakeNvml:
        """A node of ``count`` H100 80GB HBM3 (:func:`h100_table`)."""
        return cls(h100_table(count), library_missing=library_missing, call_delay=call_delay)

    # --- the sysfs side ---

    def write_sysfs(self, host: FakeHost) -> None:
        """The GPUs' PCI entries (bound to ``nvidia``) and their NUMA nodes in ``host``."""
        for gpu in self.gpus:
            add_pci_device(
                host,
                gpu.bus_id,
                vendor=pci.VENDOR_NVIDIA,
                device=H100_DEVICE_ID,
                class_code=0x030200,
                numa=gpu.numa,
                driver="nvidia",
                pcie_root=gpu.pcie_root,
            )
        for node in sorted({gpu.numa for gpu in self.gpus}):
            add_numa_node(host, node, cpus=f"{32 * node}-{32 * node + 31}", package=node)

    # --- faults ---

    def lose(self, index: int) -> None:
        """GPU ``index`` falls off the bus."""
        self.gpus[index].lost = True

    def restore(self, index: int) -> None:
        """GPU ``index`` answers again."""
        self.gpus[index].lost = False

    def fail_init(self, index: int, error: AgentError | None = None) -> None:
        """GPU ``index`` failed to initialise: asking for its handle raises ``error``."""
        self.gpus[index].handle_error = error or TransientError("Unknown Error")

    def hang(self, index: int | None = None, call: str | None = None) -> threading.Event:
        """Calls about GPU ``index`` (any GPU: ``None``), or only ``call`` (a method name),
        block until the returned event is set or :meth:`release` is called."""
        release = threading.Event()
        self._hangs.append(_Hang(index, call, release))
        return release

    def release(self) -> None:
        """Unblock every hung call."""
        for hang in self._hangs:
            hang.release.set()
        self._hangs.clear()

    def xid(self, index: int | None, code: int) -> None:
        """An XID event on GPU ``index``; ``None``: an event NVML cannot attribute."""
        event = XidEvent(uuid=None if index is None else self.gpus[index].uuid, xid=code)
        with self._events:
            for event_set in self._sets:
                if not event_set.freed and (index is None or index in event_set.gpus):
                    event_set.events.append(event)
            self._events.notify_all()

    def double_bit_ecc(self, index: int, count: int = 1) -> None:
        self.gpus[index].ecc_uncorrected = count

    def retired_pages(self, index: int, pending: bool = True) -> None:
        self.gpus[index].retired_pages_pending = pending

    # --- NvmlApi ---

    def _enter(self, call: str, index: int | None = None) -> None:
        self.calls.append((call, index))
        self.threads.add(threading.get_ident())
        if self.call_delay:
            time.sleep(self.call_delay)
        for hang in list(self._hangs):
            if (hang.gpu is None or hang.gpu == index) and (hang.call in (None, call)):
                hang.release.wait(_HANG_CAP)
        if call != "init" and not self.initialized:
            raise TransientError(f"{call}: Uninitialized")

    def _gpu(self, call: str, handle: object) -> FakeGpu:
        if not isinstance(handle, _Handle):
            raise TransientError(f"{call}: Invalid Argument")
        self._enter(call, handle.index)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise NotFound(f"{call}: GPU is lost")
        return gpu

    @staticmethod
    def _supported(call: str, value: int | bool | None) -> int | bool:
        if value is None:
            raise Unsupported(f"{call}: Not Supported")
        return value

    def init(self) -> None:
        self._enter("init")
        if self.library_missing:
            raise Unsupported("nvmlInit: NVML Shared Library Not Found")
        if self.init_error is not None:
            raise self.init_error
        self.initialized += 1

    def shutdown(self) -> None:
        self._enter("shutdown")
        self.initialized = max(0, self.initialized - 1)

    def driver_version(self) -> str:
        self._enter("driver_version")
        return self.driver_version_text

    def device_count(self) -> int:
        self._enter("device_count")
        return len(self.gpus)

    def handle_by_index(self, index: int) -> object:
        self._enter("handle_by_index", index)
        if not 0 <= index < len(self.gpus):
            raise TransientError(f"nvmlDeviceGetHandleByIndex({index}): Invalid Argument")
        return self._handle(self.gpus[index])

    def handle_by_bus_id(self, bus_id: str) -> object:
        address = pci.normalize_address(bus_id)
        for gpu in self.gpus:
            if gpu.bus_id == address:
                self._enter("handle_by_bus_id", gpu.index)
                return self._handle(gpu)
        self._enter("handle_by_bus_id")
        raise NotFound(f"nvmlDeviceGetHandleByPciBusId({bus_id}): Not Found")

    def _handle(self, gpu: FakeGpu) -> _Handle:
        if gpu.handle_error is not None:
            raise gpu.handle_error
        if gpu.lost:
            raise NotFound("nvmlDeviceGetHandle: GPU is lost")
        return _Handle(gpu.index)

    def uuid(self, handle: object) -> str:
        return self._gpu("uuid", handle).uuid

    def name(self, handle: object) -> str:
        return self._gpu("name", handle).name

    def minor_number(self, handle: object) -> int:
        return self._gpu("minor_number", handle).minor

    def pci_bus_id(self, handle: object) -> str:
        # NVML's form: eight-digit domain, upper case.
        domain, rest = self._gpu("pci_bus_id", handle).bus_id.split(":", 1)
        return f"{int(domain, 16):08X}:{rest.upper()}"

    def memory(self, handle: object) -> MemoryInfo:
        gpu = self._gpu("memory", handle)
        return MemoryInfo(total=gpu.memory_total, used=gpu.memory_used)

    def utilization(self, handle: object) -> int:
        return int(self._supported("utilization", self._gpu("utilization", handle).utilization))

    def temperature(self, handle: object) -> int:
        return int(self._supported("temperature", self._gpu("temperature", handle).temperature))

    def power_usage(self, handle: object) -> int:
        return int(self._supported("power_usage", self._gpu("power_usage", handle).power_mw))

    def mig_enabled(self, handle: object) -> bool:
        return bool(self._supported("mig_enabled", self._gpu("mig_enabled", handle).mig))

    def ecc_uncorrected_volatile(self, handle: object) -> int:
        gpu = self._gpu("ecc_uncorrected_volatile", handle)
        return int(self._supported("ecc_uncorrected_volatile", gpu.ecc_uncorrected))

    def retired_pages_pending(self, handle: object) -> bool:
        gpu = self._gpu("retired_pages_pending", handle)
        return bool(self._supported("retired_pages_pending", gpu.retired_pages_pending))

    def event_set_create(self) -> object:
        self._enter("event_set_create")
        event_set = _EventSet()
        with self._events:
            self._sets.append(event_set)
        return event_set

    def register_xid_events(self, handle: object, event_set: object) -> None:
        gpu = self._gpu("register_xid_events", handle)
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise TransientError("nvmlDeviceRegisterEvents: Invalid Argument")
        if not gpu.events_supported:
            raise Unsupported("nvmlDeviceRegisterEvents: Not Supported")
        event_set.gpus.add(gpu.index)

    def event_wait(self, event_set: object, timeout_ms: int) -> XidEvent | None:
        self._enter("event_wait")
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise TransientError("nvmlEventSetWait: Invalid Argument")
        with self._events:
            self._events.wait_for(lambda: bool(event_set.events), timeout_ms / 1000)
            return event_set.events.popleft() if event_set.events else None

    def event_set_free(self, event_set: object) -> None:
        self._enter("event_set_free")
        if isinstance(event_set, _EventSet):
            event_set.freed = True

    def registered(self) -> list[int]:
        """Indexes of the GPUs registered for XID events in any live event set."""
        with self._events:
            live = [s for s in self._sets if not s.freed]
            return sorted({index for s in live for index in s.gpus})


# --- sysfs builders ---------------------------------------------------------------------------


def add_pci_device(
    host: FakeHost,
    address: str,
    *,
    vendor: int,
    device: int,
    class_code: int,
    numa: int | None = -1,
    driver: str | None = None,
    pcie_root: str = "pci0000:00",
    bridges: Sequence[str] = (),
) -> Path:
    """A PCI function as sysfs shows it: its directory under ``/sys/devices/<pcie_root>/
    <bridges...>/``, the ``/sys/bus/pci/devices/<address>`` link to it and, when bound, its
    ``driver`` link (``numa`` ``None``: no ``numa_node`` file). Returns the directory."""
    sys_dir = host.root / "sys"
    directory = sys_dir / "devices" / pcie_root
    for bridge in bridges:
        directory /= bridge
    directory /= address
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vendor").write_text(f"0x{vendor:04x}\n")
    (directory / "device").write_text(f"0x{device:04x}\n")
    (directory / "class").write_text(f"0x{class_code:06x}\n")
    if numa is not None:
        (directory / "numa_node").write_text(f"{numa}\n")
    if driver is not None:
        driver_dir = sys_dir / "bus" / "pci" / "drivers" / driver
        driver_dir.mkdir(parents=True, exist_ok=True)
        (directory / "driver").symlink_to(os.path.relpath(driver_dir, directory))
        (driver_dir / address).symlink_to(os.path.relpath(directory, driver_dir))
    links = sys_dir / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    (links / address).symlink_to(os.path.relpath(directory, links))
    return directory


def add_numa_node(host: FakeHost, node: int, *, cpus: str, package: int) -> None:
    """NUMA node ``node`` with CPUs ``cpus`` (``0-31``), whose first CPU is on ``package``."""
    host.write(f"/sys/devices/system/node/node{node}/cpulist", f"{cpus}\n")
    first = int(cpus.split("-")[0].split(",")[0])
    host.write(f"/sys/devices/system/cpu/cpu{first}/topology/physical_package_id", f"{package}\n")
