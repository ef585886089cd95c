"""Usage of the node, its pods and chosen cgroups, sampled each pass and kept as history.

:class:`UsageSampler` implements :class:`agent.qos.framework.Usage`. Each :meth:`~UsageSampler.
sample` call takes one sample:

==============  ===========================================  ===============================
what            cgroup v1                                    cgroup v2
==============  ===========================================  ===============================
node CPU        ``/proc/stat`` ``cpu``: user + nice + system + irq + softirq jiffies
                (the ``cpuN`` lines the same way, per CPU, when asked: share pools)
node memory     ``/proc/meminfo``: MemTotal - MemAvailable (MemTotal - MemFree with page cache)
node pressure   ``/proc/pressure/{cpu,memory,io}``
cgroup CPU      ``cpuacct.usage`` (ns, cpuacct hierarchy)    ``cpu.stat`` ``usage_usec``
throttling      ``cpu.stat`` ``nr_periods``, ``nr_throttled`` (cpu hierarchy on v1)
memory          ``memory.stat`` ``total_`` + (inactive_anon + active_anon + unevictable):
                the usage without page cache (v2 has no ``total_`` prefix)
memory usage    ``memory.usage_in_bytes``                    ``memory.current``
working set     memory usage - ``total_inactive_file``       memory usage - ``inactive_file``
pressure        ``{cpu,memory,io}.pressure`` in cpuacct      ``{cpu,memory,io}.pressure``
                (only kernels booted with ``psi=1`` have them)
==============  ===========================================  ===============================

CPU and throttling are cumulative counters: each sample stores the difference to the previous
one with the time between them, in a ring buffer of ``history_seconds``. A window query sums the
differences of the samples taken within the trailing ``window`` seconds (ending now, on
``clock``) and divides by their summed durations: the time-weighted average over the window.
``None`` means no sample in the window. Memory is the latest value, if it is fresher than two
sampling intervals. A counter that goes backwards (a cgroup recreated) starts over.

Which cgroups: every pod's directory (CPU, memory), every running container's directory
(throttling), the ``extra_cgroups`` given (CPU, throttling; e.g. the BE QoS directory) and the
NodeSLO host applications (CPU, memory). History of a cgroup that is no longer among them is
dropped at the next sample.

Shared sampling. The metrics collector (:mod:`agent.metrics.collector`) samples once per tick
for everyone: it passes a :class:`Detail` (working set, pressure, every container on some ticks,
per-CPU ticks), and other readers of the same sampler (the QoS loop) state what they need in
:attr:`UsageSampler.requested` instead of sampling themselves. With a :class:`Detail`, the
history of a running container is kept while its pod is listed, even on passes that do not
read it. Every file is read at most once per pass.

Cgroup files are read through a :class:`CgroupReader` (``read_text(cgroup, controller, file)``,
``None`` when absent); :class:`HierarchyReader` reads them under
:meth:`CgroupInfo.hierarchy`, and tests hand in one over a ``FakeHost`` tree. ``/proc`` files
are read through a :class:`ProcReader` (:class:`ProcFiles` keeps them open).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import operator
import os
import resource
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from agent.cgroups import paths
from agent.cgroups.detect import CgroupInfo
from agent.config import HostPaths
from agent.metrics.pressure import RESOURCES, parse_pressure
from agent.metrics.snapshot import Pressure
from agent.qos.framework import PodState
from apis.qos import KubeQoS
from apis.slo import HostApplicationSpec

__all__ = [
    "CgroupReader",
    "Detail",
    "HierarchyReader",
    "MemoryFigures",
    "NoCgroups",
    "ProcFiles",
    "ProcReader",
    "SampleRequest",
    "UsageSampler",
    "host_app_cgroup",
    "host_app_cgroups",
]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_READ_CHUNK: Final = 65536
#: Open cgroup files kept at most (and at most half the process's descriptor limit); past it
#: files are opened for each read and closed again.
_MAX_OPEN_FILES: Final = 8192
_CPU_STAT: Final = ("usage_usec", "nr_periods", "nr_throttled")
#: ``/proc/stat`` ``cpu`` columns counted as used: user nice system (idle iowait) irq softirq.
_USED_COLUMNS: Final = (0, 1, 2, 5, 6)
_V1_MEMORY: Final = ("total_inactive_anon", "total_active_anon", "total_unevictable")
_V2_MEMORY: Final = ("inactive_anon", "active_anon", "unevictable")
_V1_INACTIVE_FILE: Final = "total_inactive_file"
_V2_INACTIVE_FILE: Final = "inactive_file"
_V1_MEMORY_STAT: Final = (*_V1_MEMORY, _V1_INACTIVE_FILE)
_V2_MEMORY_STAT: Final = (*_V2_MEMORY, _V2_INACTIVE_FILE)
_NO_PRESSURE: Mapping[str, Pressure] = {}
_HOST_APP_BASES: Final[Mapping[str, KubeQoS | None]] = {
    "": None,
    "CgroupRoot": None,
    "Kubepods": KubeQoS.GUARANTEED,
    "KubepodsBurstable": KubeQoS.BURSTABLE,
    "KubepodsBesteffort": KubeQoS.BEST_EFFORT,
}


class CgroupReader(Protocol):
    """Reads one cgroup file; ``None`` when the cgroup or the file is absent."""

    @property
    def version(self) -> int:
        """1 or 2: which files hold the counters."""
        ...

    def read_text(self, cgroup: str, controller: str, file: str) -> str | None: ...


class ProcReader(Protocol):
    """Reads one file under the host's ``/proc`` (``stat``, ``pressure/cpu``); raises
    :class:`OSError` when it cannot."""

    def read_text(self, name: str) -> str: ...


def _pread_all(fd: int) -> bytes:
    data = os.pread(fd, _READ_CHUNK, 0)
    if len(data) == _READ_CHUNK:  # a long file (memory.stat can be): read the rest
        chunks = [data]
        offset = len(data)
        while chunk := os.pread(fd, _READ_CHUNK, offset):
            chunks.append(chunk)
            offset += len(chunk)
        data = b"".join(chunks)
    return data


def _open_files_limit() -> int:
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 512
    if soft == resource.RLIM_INFINITY:
        return _MAX_OPEN_FILES
    return max(16, min(_MAX_OPEN_FILES, soft // 2))


class ProcFiles:
    """Reads ``/proc/<name>`` under the host root, keeping each file open (``pread`` at 0)."""

    __slots__ = ("_fds", "_host")

    def __init__(self, host: HostPaths) -> None:
        self._host = host
        self._fds: dict[str, int] = {}

    def read_text(self, name: str) -> str:
        fd = self._fds.get(name)
        if fd is None:
            fd = os.open(self._host.path(f"/proc/{name}"), os.O_RDONLY | os.O_CLOEXEC)
            self._fds[name] = fd
        try:
            data = _pread_all(fd)
        except OSError:
            del self._fds[name]
            os.close(fd)
            raise
        return data.decode("ascii", errors="replace")

    def close(self) -> None:
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class NoCgroups:
    """The reader of a host without usable cgroups: every file is absent."""

    version = 2

    def read_text(self, cgroup: str, controller: str, file: str) -> str | None:
        return None


class HierarchyReader:
    """Reads ``<hierarchy of controller>/<cgroup>/<file>`` (the cgroup root itself on v2).

    The files read every pass stay open and are re-read with ``pread`` at offset 0: one
    system call instead of three per file. A cgroup that is removed makes its open files fail
    (``ENODEV``), and then the path is opened afresh (or found gone); every file is also
    reopened after ``reopen_seconds``, and :meth:`sweep` closes what was not read since the
    previous sweep. At most ``max_open`` files are kept open (default: half the descriptor
    limit, at most 8192); further files are opened, read and closed each time.
    """

    __slots__ = (
        "_bases",
        "_checked",
        "_clock",
        "_fds",
        "_used",
        "info",
        "max_open",
        "reopen_seconds",
    )

    def __init__(
        self,
        info: CgroupInfo,
        *,
        reopen_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_open: int | None = None,
    ) -> None:
        self.info = info
        self.reopen_seconds = reopen_seconds
        self.max_open = _open_files_limit() if max_open is None else max_open
        self._clock = clock
        self._bases: dict[str, str] = {}
        #: cgroups already validated (the same few hundred are read every pass).
        self._checked: set[str] = set()
        #: (controller, cgroup, file) -> (open descriptor, when it was opened)
        self._fds: dict[tuple[str, str, str], tuple[int, float]] = {}
        self._used: set[tuple[str, str, str]] = set()

    @property
    def version(self) -> int:
        return self.info.resource_version

    @property
    def open_files(self) -> int:
        """How many files are held open."""
        return len(self._fds)

    def _open(self, target: str) -> int | None:
        try:
            return os.open(target, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                _log.warning("cannot open %s: %s", target, err)
            return None

    def _drop(self, key: tuple[str, str, str]) -> None:
        held = self._fds.pop(key, None)
        if held is not None:
            os.close(held[0])

    def _read_once(self, target: str) -> str | None:
        fd = self._open(target)
        if fd is None:
            return None
        try:
            return _pread_all(fd).decode("ascii", errors="replace")
        except OSError:
            return None
        finally:
            os.close(fd)

    def read_text(self, cgroup: str, controller: str, file: str) -> str | None:
        key = (controller, cgroup, file)
        held = self._fds.get(key)
        if held is not None and self._clock() - held[1] < self.reopen_seconds:
            # The common case: a file read every pass, still open.
            self._used.add(key)
            try:
                data = os.pread(held[0], _READ_CHUNK, 0)
            except OSError:
                pass  # the cgroup went away under the open file: try the path afresh
            else:
                if len(data) == _READ_CHUNK:
                    data = _pread_all(held[0])
                return data.decode("ascii", errors="replace")
        return self._read_path(key)

    def _read_path(self, key: tuple[str, str, str]) -> str | None:
        controller, cgroup, file = key
        self._drop(key)
        if cgroup not in self._checked:
            try:
                paths.check_cgroup(cgroup)
            except paths.PathError as err:
                _log.warning("not reading %s: %s", file, err)
                return None
            if len(self._checked) > 65536:
                self._checked.clear()
            self._checked.add(cgroup)
        base = self._bases.get(controller)
        if base is None:
            base = self._bases[controller] = str(self.info.hierarchy(controller))
        target = f"{base}/{cgroup}/{file}" if cgroup else f"{base}/{file}"
        if len(self._fds) >= self.max_open:
            return self._read_once(target)
        fd = self._open(target)
        if fd is None:
            return None
        self._fds[key] = (fd, self._clock())
        self._used.add(key)
        try:
            return _pread_all(fd).decode("ascii", errors="replace")
        except OSError:
            self._drop(key)
            return None

    def sweep(self) -> None:
        """Close the files not read since the last sweep (gone pods' cgroups)."""
        for target in [t for t in self._fds if t not in self._used]:
            self._drop(target)
        self._used = set()

    def close(self) -> None:
        for fd, _ in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def host_app_cgroup(app: HostApplicationSpec, info: CgroupInfo) -> str | None:
    """A host application's cgroup: its base directory + ``parentDir`` + ``relativePath``.

    ``None`` (logged) when the base is unknown or the result is not a relative cgroup path.
    """
    where = app.cgroup_path
    if where is None:
        return None
    if where.base not in _HOST_APP_BASES:
        _log.warning("host application %s: unknown cgroup base %r", app.name, where.base)
        return None
    qos = _HOST_APP_BASES[where.base]
    parts = [paths.qos_dir(info, qos) if qos is not None else ""]
    parts += [where.parent_dir, where.relative_path]
    cgroup = "/".join(p.strip("/") for p in parts if p.strip("/"))
    try:
        return paths.check_cgroup(cgroup)
    except paths.PathError as err:
        _log.warning("host application %s: %s", app.name, err)
        return None


def host_app_cgroups(apps: Iterable[HostApplicationSpec], info: CgroupInfo) -> dict[str, str]:
    """name -> cgroup of every host application with a usable cgroup path."""
    found: dict[str, str] = {}
    for app in apps:
        cgroup = host_app_cgroup(app, info)
        if cgroup is not None and app.name:
            found[app.name] = cgroup
    return found


# --- what to sample ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Detail:
    """What a pass reads beyond the strategies' needs (the metrics collector's passes)."""

    #: Every running container: CPU, throttling, memory and working set.
    containers: bool = False
    #: Throttling of the pods' own directories.
    pod_throttle: bool = False
    #: The memory usage file (usage with page cache, working set) of every memory cgroup.
    working_set: bool = True
    #: PSI of the node, and of the pods and containers read this pass.
    pressure: bool = False
    #: The per-CPU lines of ``/proc/stat`` (share-pool usage).
    per_cpu: bool = False


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """What a reader of a shared sampler needs sampled every pass (see the module docstring);
    the arguments of :meth:`UsageSampler.sample` of the same names."""

    extra_cgroups: tuple[str, ...] = ()
    host_apps: Mapping[str, str] = field(default_factory=dict)
    containers: bool | Callable[[PodState], bool] = False
    container_cpu: bool = False
    memory: bool = False


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """One cgroup's memory as last read, bytes (``None``: that file was not read or absent)."""

    #: anon + unevictable: the usage without page cache.
    without_cache: int | None = None
    #: ``memory.usage_in_bytes`` / ``memory.current``: the usage with page cache.
    usage: int | None = None
    inactive_file: int | None = None

    @property
    def working_set(self) -> int | None:
        """Usage minus inactive file pages, never below 0."""
        if self.usage is None or self.inactive_file is None:
            return None
        return max(self.usage - self.inactive_file, 0)


# --- history ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Counters:
    """Samples of cumulative counters; a window's total is ``last - base`` (O(log n)).

    ``times``/``values`` hold the samples in order from ``start`` on (older ones are trimmed
    lazily); one sample at or before the history horizon is kept as the base of the oldest
    difference. A counter that goes backwards (a reset, a recreated cgroup) starts a fresh
    history: no difference spans the reset.
    """

    times: list[float] = field(default_factory=list)
    values: list[tuple[int, ...]] = field(default_factory=list)
    start: int = 0

    def observe(self, now: float, values: tuple[int, ...], horizon: float) -> None:
        if self.times:
            if now <= self.times[-1]:
                return  # no time passed: keep the older base, the next sample spans both
            last = self.values[-1]
            if len(values) != len(last) or any(map(operator.lt, values, last)):
                self.times.clear()
                self.values.clear()
                self.start = 0
        self.times.append(now)
        self.values.append(values)
        # Keep one sample at or before the horizon as the base of the oldest difference.
        limit = now - horizon
        start, times = self.start, self.times
        while start + 1 < len(times) and times[start + 1] <= limit:
            start += 1
        if start > 64 and start * 2 > len(times):
            del times[:start]
            del self.values[:start]
            start = 0
        self.start = start

    def _base(self, since: float) -> int | None:
        """Index of the sample the window's first difference starts from."""
        times = self.times
        first = bisect.bisect_right(times, since, lo=self.start)
        if first >= len(times):
            return None
        base = max(first - 1, self.start)
        return None if base == len(times) - 1 else base

    def totals(self, since: float) -> tuple[float, list[int]] | None:
        """(seconds, summed differences) of the samples taken after ``since``."""
        base = self._base(since)
        if base is None:
            return None
        last = self.values[-1]
        return self.times[-1] - self.times[base], list(map(operator.sub, last, self.values[base]))

    def last(self, at: float) -> tuple[float, list[int]] | None:
        """(seconds, differences) of the last step, if its sample was taken at ``at``."""
        times = self.times
        if len(times) - self.start < 2 or times[-1] != at:
            return None
        values = self.values
        return times[-1] - times[-2], list(map(operator.sub, values[-1], values[-2]))

    def count(self, since: float) -> int:
        """How many differences end after ``since``."""
        base = self._base(since)
        return 0 if base is None else len(self.times) - 1 - base


def _needles(names: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    found = _NEEDLES.get(names)
    if found is None:
        found = _NEEDLES[names] = tuple((n, f"{n} ", f"\n{n} ") for n in names)
    return found


_NEEDLES: dict[tuple[str, ...], tuple[tuple[str, str, str], ...]] = {}


def _stat_fields(text: str, names: tuple[str, ...]) -> dict[str, int]:
    """The integer values of ``names`` in a flat-keyed stat file (``key value`` lines).

    Looks up only the names wanted (``memory.stat`` has some forty lines; a pass reads
    hundreds of them).
    """
    found: dict[str, int] = {}
    for name, first, needle in _needles(names):
        if text.startswith(first):
            start = len(first)
        else:
            start = text.find(needle)
            if start < 0:
                continue
            start += len(needle)
        end = text.find("\n", start)
        try:
            found[name] = int(text[start:end] if end >= 0 else text[start:])
        except ValueError:
            continue
    return found


def _int_file(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _prune(table: dict[str, _T], live: Mapping[str, None]) -> None:
    if len(table) <= len(live) and all(cgroup in live for cgroup in table):
        return
    for gone in [cgroup for cgroup in table if cgroup not in live]:
        del table[gone]


def _used_jiffies(fields: list[str]) -> int | None:
    try:
        values = [int(v) for v in fields[1:]]
    except ValueError:
        return None
    return sum(values[i] for i in _USED_COLUMNS if i < len(values))


def _parse_stat(text: str, per_cpu: bool) -> tuple[int | None, dict[int, int] | None]:
    """Used jiffies of the ``cpu`` line, and of every ``cpuN`` line when ``per_cpu``."""
    node: int | None = None
    cpus: dict[int, int] | None = {} if per_cpu else None
    for line in text.splitlines():
        if not line.startswith("cpu"):
            break  # the cpu lines come first
        fields = line.split()
        if fields[0] == "cpu":
            node = _used_jiffies(fields)
            if cpus is None:
                break
        elif cpus is not None and fields[0][3:].isdigit():
            used = _used_jiffies(fields)
            if used is not None:
                cpus[int(fields[0][3:])] = used
    return node, cpus


def _observe(
    table: dict[str, _Counters],
    cgroup: str,
    now: float,
    values: tuple[int, ...],
    horizon: float,
) -> None:
    counters = table.get(cgroup)
    if counters is None:
        counters = table[cgroup] = _Counters()
    counters.observe(now, values, horizon)


@dataclass(frozen=True, slots=True)
class _Reads:
    """The cgroups one pass reads, by file kind, and (with a detail) whose history it keeps."""

    cpu: dict[str, None]
    throttle: dict[str, None]
    memory: dict[str, None]
    pressure: dict[str, None]
    keep: dict[str, None] | None


class _Plan:
    """The reads of the passes over one list of pod states (see :meth:`UsageSampler.sample`):
    worked out once per combination of ``memory`` and :class:`Detail`, then reused while the
    same states are sampled (their cgroups cannot change: the states are immutable)."""

    __slots__ = ("_reads", "apps", "container_cpu", "containers", "extra", "pods", "states")

    def __init__(
        self,
        states: tuple[PodState, ...],
        extra: tuple[str, ...],
        apps: dict[str, str],
        containers: bool | Callable[[PodState], bool],
        container_cpu: bool,
    ) -> None:
        self.states = states
        self.extra = extra
        self.apps = apps
        self.containers = containers
        self.container_cpu = container_cpu
        #: pod UID -> its cgroup.
        self.pods = {pod.uid: pod.cgroup for pod in states}
        self._reads: dict[tuple[bool, Detail | None], _Reads] = {}

    def reads(self, memory: bool, detail: Detail | None) -> _Reads:
        key = (memory, detail)
        found = self._reads.get(key)
        if found is None:
            found = self._reads[key] = self._work_out(memory, detail)
        return found

    def _work_out(self, memory: bool, detail: Detail | None) -> _Reads:
        containers, container_cpu = self.containers, self.container_cpu
        cpu_cgroups: dict[str, None] = {}
        memory_cgroups: dict[str, None] = {}
        throttle_cgroups: dict[str, None] = {}
        pressure_cgroups: dict[str, None] = {}
        #: With a detail: every cgroup whose history is kept (read this pass or not).
        keep: dict[str, None] | None = None if detail is None else {}
        every = detail is not None and detail.containers
        pod_throttle = detail is not None and detail.pod_throttle
        pressure = detail is not None and detail.pressure
        for pod in self.states:
            cpu_cgroups[pod.cgroup] = None
            if memory:
                memory_cgroups[pod.cgroup] = None
            if pod_throttle:
                throttle_cgroups[pod.cgroup] = None
            if pressure:
                pressure_cgroups[pod.cgroup] = None
            if keep is not None:
                keep[pod.cgroup] = None
            wanted = containers is True or (callable(containers) and containers(pod))
            if not (wanted or every or keep is not None):
                continue
            for container in pod.containers:
                cgroup = container.cgroup
                if cgroup is None or not container.running:
                    continue
                if keep is not None:
                    keep[cgroup] = None
                if every:
                    cpu_cgroups[cgroup] = None
                    throttle_cgroups[cgroup] = None
                    memory_cgroups[cgroup] = None
                    if pressure:
                        pressure_cgroups[cgroup] = None
                elif wanted:
                    throttle_cgroups[cgroup] = None
                    if container_cpu:
                        cpu_cgroups[cgroup] = None
        for cgroup in self.extra:
            cpu_cgroups[cgroup] = None
            throttle_cgroups[cgroup] = None
            if keep is not None:
                keep[cgroup] = None
        for cgroup in self.apps.values():
            cpu_cgroups[cgroup] = None
            if memory:
                memory_cgroups[cgroup] = None
            if keep is not None:
                keep[cgroup] = None
        return _Reads(cpu_cgroups, throttle_cgroups, memory_cgroups, pressure_cgroups, keep)


class UsageSampler:
    """Samples usage and answers window queries (see the module docstring)."""

    def __init__(
        self,
        host: HostPaths,
        files_reader: CgroupReader,
        *,
        clock: Callable[[], float] = time.monotonic,
        history_seconds: float = 300.0,
        interval: float = 1.0,
        clock_ticks: int | None = None,
        proc_reader: ProcReader | None = None,
        sweep_seconds: float = 0.0,
    ) -> None:
        if history_seconds <= 0 or interval <= 0:
            raise ValueError(
                f"history and interval must be positive, got {history_seconds}, {interval}"
            )
        self._reader = files_reader
        #: Which files hold the counters (the reader's version never changes).
        self._v2 = files_reader.version == 2
        self._proc_reader: ProcReader = proc_reader or ProcFiles(host)
        self._clock = clock
        self._history = history_seconds
        self._interval = interval
        #: Open cgroup files not read for this long are closed (0: after every pass).
        self._sweep_seconds = sweep_seconds
        self._swept = float("-inf")
        #: USER_HZ: jiffies per second in /proc/stat.
        self._hz = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._node_cpu = _Counters()
        #: (when, MemTotal, MemAvailable, MemFree), bytes.
        self._meminfo: tuple[float, int, int | None, int | None] | None = None
        #: The last two per-CPU readings: (when, cpu -> used jiffies).
        self._per_cpu: tuple[tuple[float, dict[int, int]] | None, ...] = (None, None)
        self._node_pressure: Mapping[str, Pressure] = _NO_PRESSURE
        self._cpu: dict[str, _Counters] = {}
        self._throttle: dict[str, _Counters] = {}
        self._memory: dict[str, tuple[float, MemoryFigures]] = {}
        self._pressure: dict[str, Mapping[str, Pressure]] = {}
        self._pods: dict[str, str] = {}
        self._apps: dict[str, str] = {}
        self._warned: set[str] = set()
        self._sampled_at: float | None = None
        #: The cgroups kept by the last pass with a detail (see :meth:`sample`).
        self._kept: dict[str, None] | None = None
        #: What passes over the last list of pod states read.
        self._last_plan: _Plan | None = None
        #: (cgroup, window) -> CPU: answers stay the same until the next sample, so every
        #: strategy of one pass sees the same numbers (and each is computed once).
        self._cpu_answers: dict[tuple[str, float], float | None] = {}
        #: What other readers need when someone else samples (see the module docstring).
        self.requested = SampleRequest()

    @property
    def reader(self) -> CgroupReader:
        """The cgroup file reader."""
        return self._reader

    @property
    def history_seconds(self) -> float:
        return self._history

    # --- reading ----------------------------------------------------------------------------

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(message, *args)

    def _proc(self, name: str, *, quiet: bool = False) -> str | None:
        try:
            return self._proc_reader.read_text(name)
        except OSError as err:
            if quiet:
                _log.debug("cannot read /proc/%s: %s", name, err)
            else:
                self._warn_once(name, "cannot read /proc/%s: %s", name, err)
            return None

    def _read_node(self, now: float, detail: Detail | None) -> None:
        per_cpu = detail is not None and detail.per_cpu
        text = self._proc("stat")
        if text is not None:
            used, cpus = _parse_stat(text, per_cpu)
            if used is None:
                self._warn_once("stat-format", "no cpu line in /proc/stat")
            else:
                self._node_cpu.observe(now, (used,), self._history)
            if cpus:
                self._per_cpu = (self._per_cpu[-1], (now, cpus))
        self._read_meminfo(now)
        if detail is not None and detail.pressure:
            found: dict[str, Pressure] = {}
            for name in RESOURCES:
                text = self._proc(f"pressure/{name}", quiet=True)
                parsed = parse_pressure(text) if text is not None else None
                if parsed is not None:
                    found[name] = parsed
            self._node_pressure = found

    def _read_meminfo(self, now: float) -> None:
        text = self._proc("meminfo")
        if text is None:
            self._meminfo = None
            return
        kib: dict[str, int] = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            value = rest.split()
            if value and value[0].isdigit():
                kib[name] = int(value[0])
        total = kib.get("MemTotal")
        available = kib.get("MemAvailable")
        free = kib.get("MemFree")
        if available is None and free is not None:
            # Kernels before 3.14 have no MemAvailable: free + buffers + page cache.
            available = free + kib.get("Buffers", 0) + kib.get("Cached", 0)
        if total is None or available is None:
            self._warn_once("meminfo-format", "no MemTotal/MemAvailable in /proc/meminfo")
            self._meminfo = None
            return
        self._meminfo = (
            now,
            total * 1024,
            available * 1024,
            free * 1024 if free is not None else None,
        )

    def _cpu_stat(
        self, cgroup: str, memo: dict[str, dict[str, int] | None]
    ) -> dict[str, int] | None:
        if cgroup not in memo:
            text = self._reader.read_text(cgroup, "cpu", "cpu.stat")
            memo[cgroup] = _stat_fields(text, _CPU_STAT) if text is not None else None
        return memo[cgroup]

    def _read_throttle(
        self, cgroup: str, memo: dict[str, dict[str, int] | None]
    ) -> tuple[int, int] | None:
        stat = self._cpu_stat(cgroup, memo)
        if stat is None or "nr_periods" not in stat or "nr_throttled" not in stat:
            return None
        return stat["nr_periods"], stat["nr_throttled"]

    def _read_memory(self, cgroup: str, usage_file: bool) -> MemoryFigures | None:
        v2 = self._v2
        text = self._reader.read_text(cgroup, "memory", "memory.stat")
        without_cache = inactive_file = None
        if text is not None:
            inactive_name = _V2_INACTIVE_FILE if v2 else _V1_INACTIVE_FILE
            stat = _stat_fields(text, _V2_MEMORY_STAT if v2 else _V1_MEMORY_STAT)
            inactive_file = stat.pop(inactive_name, None)
            without_cache = sum(stat.values()) if stat else None
        usage = None
        if usage_file:
            name = "memory.current" if v2 else "memory.usage_in_bytes"
            usage = _int_file(self._reader.read_text(cgroup, "memory", name))
        if without_cache is None and usage is None:
            return None
        return MemoryFigures(without_cache=without_cache, usage=usage, inactive_file=inactive_file)

    def _read_pressure(self, cgroup: str) -> dict[str, Pressure] | None:
        """PSI of a cgroup; ``None`` when the kernel has no pressure files for it."""
        found: dict[str, Pressure] = {}
        absent = 0
        for name in RESOURCES:
            text = self._reader.read_text(cgroup, "cpuacct", f"{name}.pressure")
            if text is None:
                absent += 1
                continue
            parsed = parse_pressure(text)
            if parsed is not None:
                found[name] = parsed
        return None if absent == len(RESOURCES) else found

    # --- sampling ---------------------------------------------------------------------------

    def sample(
        self,
        pods: Sequence[PodState],
        extra_cgroups: Sequence[str] = (),
        *,
        host_apps: Mapping[str, str] | None = None,
        containers: bool | Callable[[PodState], bool] = True,
        container_cpu: bool = True,
        memory: bool = True,
        detail: Detail | None = None,
    ) -> None:
        """Take one sample of the node, ``pods``, ``extra_cgroups`` and ``host_apps``
        (name -> cgroup, see :func:`host_app_cgroups`); forget what is no longer listed.

        ``containers``: which pods' running containers to sample throttling of (all, none, or
        those a predicate of the pod state picks: only CPU burst's quota scaling needs them),
        and with ``container_cpu`` their CPU too (only burst's limiter does). Each is one read
        per container per pass, so the agent asks only for what its strategies use.
        ``memory``: sample the pods' (and host applications') memory (one read per pod).
        ``detail``: what the metrics collector reads on top (see :class:`Detail`).
        """
        now = self._clock()
        self._sampled_at = now
        horizon = self._history
        self._read_node(now, detail)
        plan = self._plan(pods, extra_cgroups, host_apps or {}, containers, container_cpu)
        reads = plan.reads(memory, detail)
        self._pods = plan.pods
        self._apps = plan.apps
        self._cpu_answers.clear()

        memo: dict[str, dict[str, int] | None] = {}
        table = self._cpu
        if self._v2:
            for cgroup in reads.cpu:
                stat = self._cpu_stat(cgroup, memo)
                usage = stat.get("usage_usec") if stat is not None else None
                if usage is not None:
                    _observe(table, cgroup, now, (usage * 1000,), horizon)
        else:
            read = self._reader.read_text
            for cgroup in reads.cpu:
                usage = _int_file(read(cgroup, "cpuacct", "cpuacct.usage"))
                if usage is not None:
                    _observe(table, cgroup, now, (usage,), horizon)
        table = self._throttle
        for cgroup in reads.throttle:
            counters = self._read_throttle(cgroup, memo)
            if counters is not None:
                _observe(table, cgroup, now, counters, horizon)
        usage_file = detail is not None and detail.working_set
        memory_table = self._memory
        for cgroup in reads.memory:
            figures = self._read_memory(cgroup, usage_file)
            if figures is None:
                memory_table.pop(cgroup, None)
            else:
                memory_table[cgroup] = (now, figures)
        supported = True
        for cgroup in reads.pressure:
            if not supported:
                break
            found = self._read_pressure(cgroup)
            if found is None:
                # The first cgroup tells: no pressure files on this kernel (or it vanished).
                supported = bool(self._pressure)
                self._pressure.pop(cgroup, None)
            else:
                self._pressure[cgroup] = found

        if now - self._swept >= self._sweep_seconds:
            self._swept = now
            sweep = getattr(self._reader, "sweep", None)
            if sweep is not None:
                sweep()
        keep = reads.keep
        if keep is not None and (keep is self._kept or keep == self._kept):
            return  # the same cgroups as the last pass: nothing to forget
        self._kept = keep
        if keep is None:
            _prune(self._cpu, reads.cpu)
            _prune(self._throttle, reads.throttle)
            _prune(self._memory, reads.memory)
            _prune(self._pressure, reads.pressure)
        else:
            _prune(self._cpu, keep)
            _prune(self._throttle, keep)
            _prune(self._memory, keep)
            _prune(self._pressure, keep)

    def _plan(
        self,
        pods: Sequence[PodState],
        extra_cgroups: Sequence[str],
        host_apps: Mapping[str, str],
        containers: bool | Callable[[PodState], bool],
        container_cpu: bool,
    ) -> _Plan:
        """What passes over these pods read (kept while the pod states are the same objects:
        states are immutable, and ``containers`` is a predicate of the state alone)."""
        plan = self._last_plan
        if (
            plan is not None
            and plan.containers is containers
            and plan.container_cpu == container_cpu
            and len(plan.states) == len(pods)
            and all(map(operator.is_, plan.states, pods))
            and plan.extra == tuple(extra_cgroups)
            and plan.apps == host_apps
        ):
            return plan
        plan = self._last_plan = _Plan(
            tuple(pods), tuple(extra_cgroups), dict(host_apps), containers, container_cpu
        )
        return plan

    # --- queries (agent.qos.framework.Usage) ------------------------------------------------

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def sampled_at(self) -> float | None:
        """When the last pass was taken (``clock``)."""
        return self._sampled_at

    def _since(self, window: float) -> float:
        return self._clock() - window

    def _recent(self, when: float) -> bool:
        return when > self._clock() - 2 * self._interval

    def _fresh(self, value: tuple[float, MemoryFigures] | None) -> MemoryFigures | None:
        if value is None or not self._recent(value[0]):
            return None
        return value[1]

    def node_cpu(self, window: float) -> float | None:
        """Node CPU used, millicores, averaged over the trailing ``window`` seconds."""
        totals = self._node_cpu.totals(self._since(window))
        if totals is None or totals[0] <= 0:
            return None
        seconds, (jiffies,) = totals
        return jiffies * 1000 / self._hz / seconds

    def node_cpu_last(self) -> float | None:
        """Node CPU used over the last step, millicores (``None`` unless the last pass read it)."""
        if self._sampled_at is None:
            return None
        step = self._node_cpu.last(self._sampled_at)
        if step is None or step[0] <= 0:
            return None
        return step[1][0] * 1000 / self._hz / step[0]

    def node_memory(self) -> int | None:
        """MemTotal - MemAvailable, bytes (latest sample)."""
        meminfo = self._meminfo
        if meminfo is None or meminfo[2] is None or not self._recent(meminfo[0]):
            return None
        return max(meminfo[1] - meminfo[2], 0)

    def node_memory_with_cache(self) -> int | None:
        """MemTotal - MemFree, bytes (latest sample): the usage with page cache."""
        meminfo = self._meminfo
        if meminfo is None or meminfo[3] is None or not self._recent(meminfo[0]):
            return None
        return max(meminfo[1] - meminfo[3], 0)

    @property
    def node_pressure(self) -> Mapping[str, Pressure]:
        """The node's PSI as last read (empty when unsupported or never read)."""
        return self._node_pressure

    def cpus_cpu(self, cpus: Iterable[int]) -> float | None:
        """CPU used by the given CPUs together over the last two per-CPU readings,
        millicores; ``None`` without two readings or when none of the CPUs is in both."""
        before, after = self._per_cpu
        if before is None or after is None or after[0] <= before[0]:
            return None
        jiffies = 0
        found = False
        for cpu in cpus:
            start, end = before[1].get(cpu), after[1].get(cpu)
            if start is not None and end is not None and end >= start:
                jiffies += end - start
                found = True
        return jiffies * 1000 / self._hz / (after[0] - before[0]) if found else None

    def cgroup_cpu(self, cgroup: str, window: float) -> float | None:
        """CPU used by ``cgroup``, millicores, averaged over the window."""
        key = (cgroup, window)
        if key in self._cpu_answers:
            return self._cpu_answers[key]
        counters = self._cpu.get(cgroup)
        totals = counters.totals(self._since(window)) if counters is not None else None
        answer = None
        if totals is not None and totals[0] > 0:
            seconds, (nanoseconds,) = totals
            answer = nanoseconds / 1e6 / seconds
        self._cpu_answers[key] = answer
        return answer

    def cgroup_cpu_last(self, cgroup: str) -> float | None:
        """CPU used by ``cgroup`` over its last step, millicores (``None`` unless the last
        pass read it)."""
        counters = self._cpu.get(cgroup)
        if counters is None or self._sampled_at is None:
            return None
        step = counters.last(self._sampled_at)
        if step is None or step[0] <= 0:
            return None
        return step[1][0] / 1e6 / step[0]

    def pod_cpu(self, uid: str, window: float) -> float | None:
        cgroup = self._pods.get(uid)
        return None if cgroup is None else self.cgroup_cpu(cgroup, window)

    def pod_memory(self, uid: str) -> int | None:
        """Pod memory without page cache, bytes (latest sample)."""
        cgroup = self._pods.get(uid)
        figures = None if cgroup is None else self._fresh(self._memory.get(cgroup))
        return None if figures is None else figures.without_cache

    def memory(self, cgroup: str) -> MemoryFigures | None:
        """A cgroup's memory as last read (however long ago; gone cgroups are forgotten)."""
        held = self._memory.get(cgroup)
        return None if held is None else held[1]

    def pressure(self, cgroup: str) -> Mapping[str, Pressure]:
        """A cgroup's PSI as last read (empty when unsupported or never read)."""
        return self._pressure.get(cgroup, _NO_PRESSURE)

    def throttled_ratio(self, cgroup: str, window: float) -> float | None:
        """Throttled periods / periods of ``cgroup`` over the window (0 when no period ran)."""
        counters = self._throttle.get(cgroup)
        totals = counters.totals(self._since(window)) if counters is not None else None
        if totals is None:
            return None
        periods, throttled = totals[1]
        return throttled / periods if periods > 0 else 0.0

    def host_app_cpu(self, name: str, window: float) -> float | None:
        cgroup = self._apps.get(name)
        return None if cgroup is None else self.cgroup_cpu(cgroup, window)

    def host_app_memory(self, name: str) -> int | None:
        cgroup = self._apps.get(name)
        figures = None if cgroup is None else self._fresh(self._memory.get(cgroup))
        return None if figures is None else figures.without_cache

    def samples(self, window: float) -> int:
        """Node samples (differences) taken within the window."""
        return self._node_cpu.count(self._since(window))
