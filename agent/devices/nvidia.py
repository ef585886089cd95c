"""NVIDIA GPUs through NVML: inventory, health and live readings.

Which GPUs. The display controllers of vendor ``0x10de`` bound to the ``nvidia`` driver, as
the PCI scan (:mod:`agent.devices.pci`) finds them on every probe: sysfs bus IDs are the
source of truth, not NVML's device indices, so a GPU that fell off the bus is still known
and reported unhealthy instead of breaking the enumeration. NVML finds each by its bus ID and
gives its UUID (the Device's ``id``), minor number, name and memory.

Threads. Every NVML call runs in one dedicated worker thread, one call at a time, each under
a timeout (:class:`NvmlRunner`); the event loop only waits. A call that overruns is
abandoned: the probe marks that GPU unhealthy and goes on with the others in a fresh worker
thread, and while the abandoned call has not returned, that GPU is not called again (so a
wedged GPU costs one lingering thread, not one per probe).

Health. A GPU is unhealthy from its latest bad observation until :data:`RECOVERY_WINDOW`
(5 minutes by default) has passed without another one; the Device then carries a
``Healthy=False`` condition naming the latest reason. Bad observations are:

- a critical XID error (every XID but 13, 31, 43, 45, 68 and 109, which applications cause),
  delivered by the :class:`XidWatcher`; an XID that names no GPU counts for every GPU;
- a non-zero volatile double-bit (uncorrected) ECC count, or retired pages pending a reset;
- a failing NVML call (GPU lost, error, timeout), or a GPU that left the ``nvidia`` driver;
- XID events that cannot be registered for the GPU (its health cannot be watched).

One bad GPU never hides the others (upstream switches NVML reporting off for the whole node).
The window keeps a flapping GPU out of scheduling: it must answer, with clean counters and
no critical XID, for five minutes in a row before it is offered again.

A host without NVML (no library, no driver) reports no NVIDIA devices, logged once; NVML
initialisation is retried quietly at every probe.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Final, TypeVar

from agent.config import AgentConfig, HostPaths
from agent.devices import pci
from agent.devices.base import DeviceReading, ProbeResult
from agent.devices.nvml import NvmlApi, PynvmlApi, XidEvent
from agent.errors import AgentError, NotFound, TransientError, Unsupported
from apis import constants as k
from apis.resources import ResourceList
from apis.scheduling import DeviceCondition, DeviceInfo, DeviceTopology

__all__ = [
    "CALL_TIMEOUT",
    "LABEL_MIG_MODE",
    "NON_CRITICAL_XIDS",
    "RECOVERY_WINDOW",
    "NvidiaProbe",
    "NvmlRunner",
    "NvmlTimeout",
    "XidWatcher",
    "from_config",
    "model_label",
    "nvidia_gpus",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: XIDs caused by applications (bad kernels, page faults, preemption...): not a GPU fault.
NON_CRITICAL_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
#: Device label on a GPU whose MIG mode is on (value ``enabled``).
LABEL_MIG_MODE: Final = "koordpy.io/mig-mode"
#: Seconds one NVML call may take before it is abandoned.
CALL_TIMEOUT: Final = 5.0
#: Seconds NVML initialisation may take (slow without persistence mode).
INIT_TIMEOUT: Final = 15.0
#: Seconds a GPU must stay clean after its latest bad observation to be healthy again.
RECOVERY_WINDOW: Final = 300.0

CONDITION_HEALTHY: Final = "Healthy"
REASON_LOST: Final = "GPULost"
REASON_TIMEOUT: Final = "NVMLTimeout"
REASON_ERROR: Final = "NVMLError"
REASON_ECC: Final = "DoubleBitECCError"
REASON_RETIRED_PAGES: Final = "RetiredPagesPending"
REASON_UNWATCHED: Final = "DeviceHealthCheckNotSupported"
REASON_UNBOUND: Final = "NotBoundToDriver"

_DRIVER: Final = "nvidia"
_NOT_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def nvidia_gpus(devices: Iterable[pci.PciDevice]) -> tuple[pci.PciDevice, ...]:
    """The NVIDIA display controllers bound to the ``nvidia`` driver (not its audio
    functions, USB controllers or NVSwitches)."""
    return tuple(
        device
        for device in pci.of_vendor(devices, pci.VENDOR_NVIDIA)
        if device.driver == _DRIVER and device.base_class == pci.CLASS_DISPLAY
    )


def model_label(name: str) -> str:
    """The ``gpu-model`` label of an NVML product name: ``NVIDIA A100-SXM4-80GB`` ->
    ``A100-SXM4-80GB``, ``Tesla T4`` -> ``Tesla-T4`` (a valid label value)."""
    model = name.strip().removeprefix("NVIDIA ").strip()
    return _NOT_LABEL_CHARS.sub("-", model)[:63].strip("-._")


# --- the worker thread ------------------------------------------------------------------------


class NvmlTimeout(TransientError):  # noqa: N818 - names the condition
    """An NVML call overran its timeout and was abandoned (or an earlier one still hangs)."""


_Job = tuple[Callable[[], Any], Future[Any]]


class _WorkerThread:
    """A daemon thread running submitted functions one after another (daemon: a call that
    never returns must not keep the process from exiting)."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self.thread.start()

    def submit(self, function: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((function, future))
        return future

    def stop(self) -> None:
        """Exit once the current call returns."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = function()
            except BaseException as err:  # handed to the waiting coroutine
                future.set_exception(err)
            else:
                future.set_result(result)


class NvmlRunner:
    """Runs blocking calls in one dedicated thread, one at a time, each under a timeout.

    ``key`` names what a call touches (a GPU's bus ID, ``init``, ``events``). A call that
    overruns is abandoned with :class:`NvmlTimeout`: its thread is retired (it exits when the
    call finally returns), the next call starts a fresh one, and calls with the same key
    fail at once with :class:`NvmlTimeout` until the abandoned call has returned.
    """

    def __init__(self, *, timeout: float = CALL_TIMEOUT, name: str = "nvml") -> None:
        self.timeout = timeout
        self._name = name
        self._lock = asyncio.Lock()
        self._worker: _WorkerThread | None = None
        self._started = 0
        self._hung: dict[str, tuple[str, Future[Any]]] = {}

    @property
    def threads_started(self) -> int:
        """Worker threads started so far (one more after each abandoned call)."""
        return self._started

    def hung(self, key: str) -> bool:
        """Whether an abandoned call for ``key`` has still not returned."""
        entry = self._hung.get(key)
        if entry is not None and entry[1].done():
            del self._hung[key]
            return False
        return entry is not None

    async def call(
        self, key: str, what: str, function: Callable[[], T], *, limit: float | None = None
    ) -> T:
        """``function()`` in the worker thread; :class:`NvmlTimeout` after ``limit`` seconds
        (default: the runner's ``timeout``)."""
        if self.hung(key):
            raise NvmlTimeout(f"{what}: an earlier call ({self._hung[key][0]}) still hangs")
        limit = self.timeout if limit is None else limit
        async with self._lock:
            if self._worker is None:
                self._started += 1
                self._worker = _WorkerThread(f"{self._name}-{self._started}")
            worker = self._worker
            future = worker.submit(function)
            waiter = asyncio.wrap_future(future)
            try:
                await asyncio.wait((waiter,), timeout=limit)
            finally:
                if not waiter.done():  # timed out or cancelled
                    waiter.cancel()
                    if not future.done():  # the call runs on: leave it to its thread
                        worker.stop()
                        self._worker = None
                        self._hung[key] = (what, future)
            if waiter.cancelled():
                _log.warning(
                    "NVML call %s (%s) did not return within %gs; abandoned",
                    what,
                    key,
                    limit,
                    extra={"gpu": key},
                )
                raise NvmlTimeout(f"{what} did not return within {limit:g}s")
            return waiter.result()

    def close(self) -> None:
        """Let the current worker thread exit (a hung one exits when its call returns)."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None


# --- per-GPU state ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Figures:
    """The live figures of one probe of one GPU."""

    memory_used: int | None = None
    utilization: int | None = None
    temperature: int | None = None
    power_mw: int | None = None


@dataclass(slots=True)
class _Gpu:
    """What the probe knows about the GPU at one bus ID (kept across probes)."""

    address: str
    device: pci.PciDevice
    socket: int = -1
    handle: object | None = None
    watched: bool = False
    uuid: str | None = None
    name: str | None = None
    minor: int | None = None
    memory_total: int | None = None
    mig: bool | None = None
    #: Fields NVML does not support on this GPU (not asked again).
    unsupported: set[str] = field(default_factory=set)
    #: The live figures of the latest probe.
    figures: _Figures = field(default_factory=_Figures)
    healthy: bool = True
    #: When ``healthy`` last changed (``None``: never).
    since: datetime | None = None
    last_bad: datetime | None = None
    reason: str = ""
    message: str = ""
    left_out_logged: bool = False

    @property
    def identified(self) -> bool:
        return (
            self.uuid is not None
            and self.name is not None
            and self.minor is not None
            and self.memory_total is not None
        )

    def bad(self, at: datetime, reason: str, message: str) -> bool:
        """Record a bad observation; whether the reported health changed."""
        changed = self.healthy or (reason, message) != (self.reason, self.message)
        self.last_bad = at if self.last_bad is None else max(self.last_bad, at)
        self.reason, self.message = reason, message
        if self.healthy:
            self.healthy = False
            self.since = at
            _log.warning(
                "GPU %s (%s) unhealthy: %s: %s",
                self.address,
                self.uuid or "uuid unknown",
                reason,
                message,
                extra={"gpu": self.address},
            )
        return changed

    def settle(self, now: datetime, window: timedelta) -> None:
        """Healthy again once ``window`` passed since the latest bad observation."""
        if self.healthy or self.last_bad is None or now - self.last_bad < window:
            return
        self.healthy = True
        self.since = now
        _log.info(
            "GPU %s (%s) healthy again: nothing bad for %s since %s: %s",
            self.address,
            self.uuid or "uuid unknown",
            window,
            self.reason,
            self.message,
            extra={"gpu": self.address},
        )
        self.reason = self.message = ""

    def device_info(self) -> DeviceInfo:
        # Only for identified GPUs:
        assert self.uuid is not None
        assert self.minor is not None
        topology = None
        if self.device.pcie_root:
            topology = DeviceTopology(
                socket_id=self.socket,
                node_id=max(self.device.numa_node, 0),
                pcie_id=self.device.pcie_root,
                bus_id=self.address,
            )
        conditions: tuple[DeviceCondition, ...] = ()
        if not self.healthy:
            conditions = (
                DeviceCondition(
                    type=CONDITION_HEALTHY,
                    status="False",
                    last_transition_time=self.since or datetime.fromtimestamp(0, UTC),
                    reason=self.reason or "Unknown",
                    message=self.message or "device is unhealthy",
                ),
            )
        return DeviceInfo(
            type=k.DEVICE_TYPE_GPU,
            id=self.uuid,
            minor=self.minor,
            health=self.healthy,
            labels={LABEL_MIG_MODE: "enabled"} if self.mig else {},
            resources=ResourceList(
                {
                    k.RESOURCE_GPU_CORE: 100,
                    k.RESOURCE_GPU_MEMORY: self.memory_total or 0,
                    k.RESOURCE_GPU_MEMORY_RATIO: 100,
                }
            ),
            topology=topology,
            conditions=conditions,
        )


# --- the probe --------------------------------------------------------------------------------


class NvidiaProbe:
    """The :class:`~agent.devices.base.DeviceProbe` of NVIDIA GPUs.

    ``watcher`` is the component that waits for XID events; the agent supervises it next to
    its other components (:meth:`components`). ``on_change`` (when set) is called on the
    event loop when an XID event changes a GPU's health, so the Device can be published at
    once.
    """

    def __init__(
        self,
        host: HostPaths,
        *,
        nvml: NvmlApi | None = None,
        call_timeout: float = CALL_TIMEOUT,
        init_timeout: float = INIT_TIMEOUT,
        recovery_window: float = RECOVERY_WINDOW,
        event_wait_ms: int = 100,
        event_interval: float = 1.0,
        clock: Callable[[], datetime] = _utcnow,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.name = "nvidia"
        self.host = host
        self.nvml: NvmlApi = nvml if nvml is not None else PynvmlApi()
        self.runner = NvmlRunner(timeout=call_timeout)
        self.recovery_window = timedelta(seconds=recovery_window)
        self.on_change = on_change
        self.watcher = XidWatcher(self, wait_ms=event_wait_ms, interval=event_interval)
        self._init_timeout = init_timeout
        self._clock = clock
        self._ready = False
        self._unavailable: str | None = None
        self._driver_version: str | None = None
        self._event_set: object | None = None
        self._events_unsupported: str | None = None
        self._gpus: dict[str, _Gpu] = {}
        self._last_scan: tuple[tuple[pci.PciDevice, ...], dict[int, int]] = ((), {})

    @property
    def event_set(self) -> object | None:
        """The NVML event set XID events arrive in, once NVML is up."""
        return self._event_set

    def components(self) -> tuple[XidWatcher]:
        """The long-running parts the agent supervises."""
        return (self.watcher,)

    async def probe(self) -> ProbeResult:
        devices, sockets = await self._read_sysfs()
        if not await self._start():
            return ProbeResult()
        if self._event_set is None and self._events_unsupported is None:
            await self._create_event_set()
        now = self._clock()
        present: set[str] = set()
        for device in devices:
            gpu = self._gpus.get(device.address)
            if gpu is None:
                gpu = self._gpus[device.address] = _Gpu(device.address, device)
            gpu.device = device
            gpu.socket = sockets.get(max(device.numa_node, 0), -1)
            present.add(device.address)
            await self._refresh(gpu, now)
        for address, gpu in self._gpus.items():
            if address not in present:
                gpu.figures = _Figures()
                gpu.bad(now, REASON_UNBOUND, f"{address} is no longer bound to the nvidia driver")
        return self._result(now)

    def record_xid(self, event: XidEvent) -> None:
        """Apply an XID event to the GPUs' health (called by the :class:`XidWatcher`)."""
        if event.xid in NON_CRITICAL_XIDS:
            _log.info(
                "XID %d on %s: application error, GPU health unchanged", event.xid, event.uuid
            )
            return
        if event.uuid is None:
            targets = list(self._gpus.values())
        else:
            targets = [gpu for gpu in self._gpus.values() if gpu.uuid == event.uuid]
            if not targets:
                _log.warning(
                    "XID %d on a GPU this node does not report (%s)", event.xid, event.uuid
                )
                return
        now = self._clock()
        message = f"Xid error detected on device, error code: {event.xid}"
        changed = [gpu.bad(now, f"Xid{event.xid}", message) for gpu in targets]
        if any(changed) and self.on_change is not None:
            self.on_change()

    async def aclose(self) -> None:
        """Free the event set, shut NVML down and let the worker thread exit."""
        try:
            if self._event_set is not None:
                event_set, self._event_set = self._event_set, None
                await self.runner.call(
                    "events", "nvmlEventSetFree", partial(self.nvml.event_set_free, event_set)
                )
            if self._ready:
                self._ready = False
                await self.runner.call("init", "nvmlShutdown", self.nvml.shutdown)
        except AgentError as err:
            _log.warning("NVML shutdown: %s", err)
        finally:
            self.runner.close()

    # --- steps ---

    async def _read_sysfs(self) -> tuple[tuple[pci.PciDevice, ...], dict[int, int]]:
        """The GPUs on the PCI bus and the socket of each of their NUMA nodes (in a thread;
        the previous scan if this one overruns)."""
        try:
            async with asyncio.timeout(self.runner.timeout):
                self._last_scan = await asyncio.to_thread(_scan_gpus, self.host)
        except TimeoutError:
            _log.warning(
                "PCI scan took longer than %gs; using the previous one", self.runner.timeout
            )
        return self._last_scan

    async def _start(self) -> bool:
        """Initialise NVML once; ``False`` while it is unavailable."""
        if self._ready:
            return True
        try:
            await self.runner.call("init", "nvmlInit", self.nvml.init, limit=self._init_timeout)
        except AgentError as err:
            if self._unavailable is None:
                _log.warning(
                    "NVIDIA GPUs are on the PCI bus but NVML is unavailable (%s): "
                    "no NVIDIA devices reported until it is",
                    err,
                )
            else:
                _log.debug("NVML still unavailable: %s", err)
            self._unavailable = str(err)
            return False
        self._ready = True
        if self._unavailable is not None:
            _log.info("NVML available (was: %s)", self._unavailable)
            self._unavailable = None
        try:
            self._driver_version = await self.runner.call(
                "init", "nvmlSystemGetDriverVersion", self.nvml.driver_version
            )
        except AgentError as err:
            _log.warning("NVIDIA driver version unknown: %s", err)
        return True

    async def _create_event_set(self) -> None:
        try:
            self._event_set = await self.runner.call(
                "events", "nvmlEventSetCreate", self.nvml.event_set_create
            )
        except Unsupported as err:
            self._events_unsupported = str(err)
            _log.warning("NVML events unsupported, XID errors cannot be watched: %s", err)
        except AgentError as err:
            _log.warning("cannot create the NVML event set (retried at the next probe): %s", err)

    async def _call(self, gpu: _Gpu, what: str, function: Callable[[], T]) -> T:
        return await self.runner.call(gpu.address, what, function)

    async def _optional(self, gpu: _Gpu, what: str, function: Callable[[], T]) -> T | None:
        """A field the GPU may not support: ``None`` then (and it is not asked again)."""
        if what in gpu.unsupported:
            return None
        try:
            return await self._call(gpu, what, function)
        except Unsupported:
            gpu.unsupported.add(what)
            return None

    async def _refresh(self, gpu: _Gpu, now: datetime) -> None:
        """Ask NVML about one GPU; a failure marks that GPU (and only it) bad."""
        nvml = self.nvml
        figures = _Figures()
        try:
            if gpu.handle is None:
                # A new handle of the same GPU: its XID registration (of the GPU) is kept.
                gpu.handle = await self._call(
                    gpu,
                    "nvmlDeviceGetHandleByPciBusId",
                    partial(nvml.handle_by_bus_id, gpu.address),
                )
            handle = gpu.handle
            if gpu.uuid is None:
                gpu.uuid = await self._call(gpu, "nvmlDeviceGetUUID", partial(nvml.uuid, handle))
            if gpu.name is None:
                gpu.name = await self._call(gpu, "nvmlDeviceGetName", partial(nvml.name, handle))
            if gpu.minor is None:
                gpu.minor = await self._call(
                    gpu, "nvmlDeviceGetMinorNumber", partial(nvml.minor_number, handle)
                )
            memory = await self._call(gpu, "nvmlDeviceGetMemoryInfo", partial(nvml.memory, handle))
            gpu.memory_total, figures.memory_used = memory.total, memory.used
            await self._watch(gpu, handle, now)
            figures.utilization = await self._optional(
                gpu, "nvmlDeviceGetUtilizationRates", partial(nvml.utilization, handle)
            )
            figures.temperature = await self._optional(
                gpu, "nvmlDeviceGetTemperature", partial(nvml.temperature, handle)
            )
            figures.power_mw = await self._optional(
                gpu, "nvmlDeviceGetPowerUsage", partial(nvml.power_usage, handle)
            )
            gpu.mig = await self._optional(
                gpu, "nvmlDeviceGetMigMode", partial(nvml.mig_enabled, handle)
            )
            ecc = await self._optional(
                gpu, "nvmlDeviceGetTotalEccErrors", partial(nvml.ecc_uncorrected_volatile, handle)
            )
            pending = await self._optional(
                gpu,
                "nvmlDeviceGetRetiredPagesPendingStatus",
                partial(nvml.retired_pages_pending, handle),
            )
        except NotFound as err:
            gpu.handle = None
            gpu.bad(now, REASON_LOST, str(err))
        except NvmlTimeout as err:
            gpu.bad(now, REASON_TIMEOUT, str(err))
        except AgentError as err:
            gpu.bad(now, REASON_ERROR, str(err))
        else:
            if ecc:
                gpu.bad(now, REASON_ECC, f"{ecc} uncorrected ECC error(s) since the driver loaded")
            if pending:
                gpu.bad(now, REASON_RETIRED_PAGES, "retired memory pages pending; reset the GPU")
        gpu.figures = figures

    async def _watch(self, gpu: _Gpu, handle: object, now: datetime) -> None:
        """Register the GPU for XID events (until that succeeds)."""
        if gpu.watched:
            return
        if self._events_unsupported is not None:
            gpu.bad(
                now, REASON_UNWATCHED, f"XID events cannot be watched: {self._events_unsupported}"
            )
            return
        event_set = self._event_set
        if event_set is None:
            return  # creating it failed for now; retried at the next probe
        try:
            await self._call(
                gpu,
                "nvmlDeviceRegisterEvents",
                partial(self.nvml.register_xid_events, handle, event_set),
            )
        except Unsupported as err:
            gpu.bad(now, REASON_UNWATCHED, f"XID events cannot be watched: {err}")
            return
        gpu.watched = True

    @staticmethod
    def _reading(gpu: _Gpu) -> DeviceReading:
        # Only for identified GPUs:
        assert gpu.uuid is not None
        assert gpu.minor is not None
        figures = gpu.figures
        return DeviceReading(
            vendor=k.GPU_VENDOR_NVIDIA,
            model=model_label(gpu.name or ""),
            minor=gpu.minor,
            uuid=gpu.uuid,
            healthy=gpu.healthy,
            utilization_percent=_float(figures.utilization),
            memory_used_bytes=figures.memory_used,
            memory_total_bytes=gpu.memory_total,
            temperature_celsius=_float(figures.temperature),
            power_watts=None if figures.power_mw is None else figures.power_mw / 1000,
        )

    def _result(self, now: datetime) -> ProbeResult:
        devices: list[DeviceInfo] = []
        readings: list[DeviceReading] = []
        models: set[str] = set()
        for gpu in self._gpus.values():
            gpu.settle(now, self.recovery_window)
            if not gpu.identified:
                if not gpu.left_out_logged:
                    gpu.left_out_logged = True
                    _log.warning(
                        "GPU %s left out: NVML could not identify it (%s)",
                        gpu.address,
                        gpu.message or "no answer",
                        extra={"gpu": gpu.address},
                    )
                continue
            devices.append(gpu.device_info())
            models.add(model_label(gpu.name or ""))
            readings.append(self._reading(gpu))
        if not devices:
            return ProbeResult()
        labels = {k.LABEL_GPU_VENDOR: k.GPU_VENDOR_NVIDIA}
        if len(models) == 1:
            labels[k.LABEL_GPU_MODEL] = models.pop()
        if self._driver_version:
            labels[k.LABEL_GPU_DRIVER_VERSION] = self._driver_version
        return ProbeResult(devices=tuple(devices), labels=labels, readings=tuple(readings))


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


def _scan_gpus(host: HostPaths) -> tuple[tuple[pci.PciDevice, ...], dict[int, int]]:
    gpus = nvidia_gpus(pci.scan(host))
    nodes = {max(gpu.numa_node, 0) for gpu in gpus}
    return gpus, {node: pci.numa_socket(host, node) for node in nodes}


# --- the XID watcher --------------------------------------------------------------------------


class XidWatcher:
    """Waits for critical XID events and feeds them to the probe's health state.

    Each round waits at most ``wait_ms`` in the NVML worker thread, then (when nothing came)
    sleeps ``interval`` on the event loop, leaving the thread to the probe; events queue in
    the event set meanwhile, and a burst is drained without sleeping. Before NVML is up it
    just waits for the probe to start it. A failing wait is logged (once per streak) and
    retried; it marks no GPU (the probe finds the ones that really fail).
    """

    def __init__(self, probe: NvidiaProbe, *, wait_ms: int = 100, interval: float = 1.0) -> None:
        self.name = "nvidia-xid-watcher"
        self._probe = probe
        self._wait_ms = wait_ms
        self._interval = interval
        self._failing: str | None = None

    async def run(self) -> None:
        while True:
            event = await self.wait_once()
            if event is None:
                await asyncio.sleep(self._interval)
            else:
                self._probe.record_xid(event)

    async def wait_once(self) -> XidEvent | None:
        """One wait for an event; ``None``: none came (or waiting is not possible now)."""
        probe = self._probe
        event_set = probe.event_set
        if event_set is None:
            return None
        runner = probe.runner
        try:
            event = await runner.call(
                "events",
                "nvmlEventSetWait",
                partial(probe.nvml.event_wait, event_set, self._wait_ms),
                limit=self._wait_ms / 1000 + runner.timeout,
            )
        except AgentError as err:
            if self._failing is None:
                _log.warning("waiting for NVML events failed (retrying): %s", err)
            self._failing = str(err)
            return None
        if self._failing is not None:
            _log.info("waiting for NVML events works again (was: %s)", self._failing)
            self._failing = None
        return event


# --- the factory ------------------------------------------------------------------------------


def from_config(cfg: AgentConfig, node: str) -> NvidiaProbe | None:
    """The NVIDIA probe when the PCI bus has GPUs bound to the ``nvidia`` driver."""
    if not nvidia_gpus(pci.scan(cfg.host)):
        return None
    return NvidiaProbe(cfg.host, call_timeout=cfg.devices.nvml_call_timeout)
