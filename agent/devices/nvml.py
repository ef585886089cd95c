"""The NVIDIA Management Library behind a small Protocol; the only module importing ``pynvml``.

:class:`NvmlApi` covers exactly the calls the agent makes. :class:`PynvmlApi` implements it
over ``pynvml`` (from the ``nvidia-ml-py`` package), imported on :meth:`PynvmlApi.init` so a
host without it degrades instead of failing to import. Tests use ``tests.fakes.nvml``.

Every method blocks (NVML serialises on the driver's locks; a wedged GPU can hang a call),
so callers run them off the event loop. ``NVMLError`` codes are translated at this edge:

==========================================================  ==================================
NVML                                                        ``agent.errors``
==========================================================  ==================================
``LIBRARY_NOT_FOUND``, ``DRIVER_NOT_LOADED``                :class:`Unsupported` (no NVML)
``NOT_SUPPORTED``, ``FUNCTION_NOT_FOUND``                   :class:`Unsupported` (that field)
``GPU_IS_LOST``, ``NOT_FOUND``                              :class:`NotFound` (that GPU)
``TIMEOUT`` from :meth:`NvmlApi.event_wait`                 no event (``None``)
anything else                                               :class:`TransientError`
==========================================================  ==================================

Handles and event sets are opaque objects: only the implementation that returned them can
use them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agent.errors import AgentError, NotFound, TransientError, Unsupported

__all__ = ["MemoryInfo", "NvmlApi", "PynvmlApi", "XidEvent", "translate"]


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """Frame-buffer memory of one GPU, in bytes."""

    total: int
    used: int


@dataclass(frozen=True, slots=True)
class XidEvent:
    """A critical XID error reported by the driver."""

    #: UUID of the GPU it happened on; ``None`` when NVML could not tell.
    uuid: str | None
    #: The XID code (``79``: fallen off the bus).
    xid: int


@runtime_checkable
class NvmlApi(Protocol):
    """The NVML calls the agent uses. Every method blocks; see the module docstring."""

    def init(self) -> None:
        """Load the library and initialise NVML (reference counted by NVML)."""

    def shutdown(self) -> None: ...

    def driver_version(self) -> str:
        """The kernel driver's version (``550.54.15``)."""

    def device_count(self) -> int: ...

    def handle_by_index(self, index: int) -> object: ...

    def handle_by_bus_id(self, bus_id: str) -> object:
        """The GPU at PCI address ``bus_id`` (``0000:3b:00.0``)."""

    def uuid(self, handle: object) -> str:
        """``GPU-`` followed by the UUID."""

    def name(self, handle: object) -> str:
        """The product name (``NVIDIA H100 80GB HBM3``)."""

    def minor_number(self, handle: object) -> int:
        """N of ``/dev/nvidiaN``."""

    def pci_bus_id(self, handle: object) -> str:
        """The PCI address as NVML prints it (``00000000:3B:00.0``)."""

    def memory(self, handle: object) -> MemoryInfo: ...

    def utilization(self, handle: object) -> int:
        """Percent of the last sample period a kernel was running."""

    def temperature(self, handle: object) -> int:
        """GPU core temperature in degrees Celsius."""

    def power_usage(self, handle: object) -> int:
        """Power draw in milliwatts."""

    def mig_enabled(self, handle: object) -> bool:
        """Whether MIG mode is currently on."""

    def ecc_uncorrected_volatile(self, handle: object) -> int:
        """Uncorrected (double-bit) ECC errors since the driver last loaded."""

    def retired_pages_pending(self, handle: object) -> bool:
        """Whether retired memory pages wait for a reset to take effect."""

    def event_set_create(self) -> object: ...

    def register_xid_events(self, handle: object, event_set: object) -> None:
        """Deliver the GPU's critical XID errors to ``event_set``."""

    def event_wait(self, event_set: object, timeout_ms: int) -> XidEvent | None:
        """The next event of ``event_set``, waiting at most ``timeout_ms``; ``None``: none."""

    def event_set_free(self, event_set: object) -> None: ...


def translate(lib: Any, err: Exception, what: str) -> AgentError:
    """The agent error for an ``NVMLError`` of ``lib`` (the ``pynvml`` module)."""
    code = getattr(err, "value", None)
    message = f"{what}: {err}"
    if code in (lib.NVML_ERROR_LIBRARY_NOT_FOUND, lib.NVML_ERROR_DRIVER_NOT_LOADED):
        return Unsupported(message)
    if code in (lib.NVML_ERROR_NOT_SUPPORTED, lib.NVML_ERROR_FUNCTION_NOT_FOUND):
        return Unsupported(message)
    if code in (lib.NVML_ERROR_GPU_IS_LOST, lib.NVML_ERROR_NOT_FOUND):
        return NotFound(message)
    return TransientError(message)


class PynvmlApi:
    """:class:`NvmlApi` over ``pynvml``."""

    def __init__(self) -> None:
        self._module: Any = None

    @property
    def _lib(self) -> Any:
        if self._module is None:
            raise Unsupported("NVML is not initialised")
        return self._module

    def _call(self, what: str, function: Callable[..., Any], *args: Any) -> Any:
        lib = self._lib
        try:
            return function(*args)
        except lib.NVMLError as err:
            raise translate(lib, err, what) from err

    def init(self) -> None:
        if self._module is None:
            try:
                self._module = importlib.import_module("pynvml")
            except ImportError as err:
                raise Unsupported(f"nvidia-ml-py is not installed: {err}") from err
        self._call("nvmlInit", self._lib.nvmlInit)

    def shutdown(self) -> None:
        self._call("nvmlShutdown", self._lib.nvmlShutdown)

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion", self._lib.nvmlSystemGetDriverVersion))

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount", self._lib.nvmlDeviceGetCount))

    def handle_by_index(self, index: int) -> object:
        handle: object = self._call(
            f"nvmlDeviceGetHandleByIndex({index})", self._lib.nvmlDeviceGetHandleByIndex, index
        )
        return handle

    def handle_by_bus_id(self, bus_id: str) -> object:
        handle: object = self._call(
            f"nvmlDeviceGetHandleByPciBusId({bus_id})",
            self._lib.nvmlDeviceGetHandleByPciBusId,
            bus_id,
        )
        return handle

    def uuid(self, handle: object) -> str:
        return _text(self._call("nvmlDeviceGetUUID", self._lib.nvmlDeviceGetUUID, handle))

    def name(self, handle: object) -> str:
        return _text(self._call("nvmlDeviceGetName", self._lib.nvmlDeviceGetName, handle))

    def minor_number(self, handle: object) -> int:
        return int(
            self._call("nvmlDeviceGetMinorNumber", self._lib.nvmlDeviceGetMinorNumber, handle)
        )

    def pci_bus_id(self, handle: object) -> str:
        info = self._call("nvmlDeviceGetPciInfo", self._lib.nvmlDeviceGetPciInfo, handle)
        return _text(info.busId)

    def memory(self, handle: object) -> MemoryInfo:
        info = self._call("nvmlDeviceGetMemoryInfo", self._lib.nvmlDeviceGetMemoryInfo, handle)
        return MemoryInfo(total=int(info.total), used=int(info.used))

    def utilization(self, handle: object) -> int:
        rates = self._call(
            "nvmlDeviceGetUtilizationRates", self._lib.nvmlDeviceGetUtilizationRates, handle
        )
        return int(rates.gpu)

    def temperature(self, handle: object) -> int:
        lib = self._lib
        return int(
            self._call(
                "nvmlDeviceGetTemperature",
                lib.nvmlDeviceGetTemperature,
                handle,
                lib.NVML_TEMPERATURE_GPU,
            )
        )

    def power_usage(self, handle: object) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", self._lib.nvmlDeviceGetPowerUsage, handle))

    def mig_enabled(self, handle: object) -> bool:
        lib = self._lib
        current, _pending = self._call("nvmlDeviceGetMigMode", lib.nvmlDeviceGetMigMode, handle)
        return bool(current == lib.NVML_DEVICE_MIG_ENABLE)

    def ecc_uncorrected_volatile(self, handle: object) -> int:
        lib = self._lib
        return int(
            self._call(
                "nvmlDeviceGetTotalEccErrors",
                lib.nvmlDeviceGetTotalEccErrors,
                handle,
                lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                lib.NVML_VOLATILE_ECC,
            )
        )

    def retired_pages_pending(self, handle: object) -> bool:
        lib = self._lib
        pending = self._call(
            "nvmlDeviceGetRetiredPagesPendingStatus",
            lib.nvmlDeviceGetRetiredPagesPendingStatus,
            handle,
        )
        return bool(pending == lib.NVML_FEATURE_ENABLED)

    def event_set_create(self) -> object:
        event_set: object = self._call("nvmlEventSetCreate", self._lib.nvmlEventSetCreate)
        return event_set

    def register_xid_events(self, handle: object, event_set: object) -> None:
        lib = self._lib
        self._call(
            "nvmlDeviceRegisterEvents",
            lib.nvmlDeviceRegisterEvents,
            handle,
            lib.nvmlEventTypeXidCriticalError,
            event_set,
        )

    def event_wait(self, event_set: object, timeout_ms: int) -> XidEvent | None:
        lib = self._lib
        try:
            data = lib.nvmlEventSetWait(event_set, timeout_ms)
        except lib.NVMLError as err:
            if getattr(err, "value", None) == lib.NVML_ERROR_TIMEOUT:
                return None
            raise translate(lib, err, "nvmlEventSetWait") from err
        if not int(data.eventType) & int(lib.nvmlEventTypeXidCriticalError):
            return None
        try:
            uuid: str | None = _text(lib.nvmlDeviceGetUUID(data.device))
        except lib.NVMLError:
            uuid = None
        return XidEvent(uuid=uuid, xid=int(data.eventData))

    def event_set_free(self, event_set: object) -> None:
        self._call("nvmlEventSetFree", self._lib.nvmlEventSetFree, event_set)


def _text(value: object) -> str:
    """NVML strings arrive as ``str`` or, from struct fields, ``bytes``."""
    if isinstance(value, bytes):
        return value.decode("ascii", errors="replace")
    return str(value)
