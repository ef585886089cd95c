"""Usage of the node, its pods and chosen cgroups, sampled each pass and kept as history.

:class:`UsageSampler` implements :class:`agent.qos.framework.Usage`. Each :meth:`~UsageSampler.
sample` call takes one sample:

==============  ===========================================  ===============================
what            cgroup v1                                    cgroup v2
==============  ===========================================  ===============================
node CPU        ``/proc/stat`` ``cpu``: user + nice + system + irq + softirq jiffies
node memory     ``/proc/meminfo``: MemTotal - MemAvailable
cgroup CPU      ``cpuacct.usage`` (ns, cpuacct hierarchy)    ``cpu.stat`` ``usage_usec``
throttling      ``cpu.stat`` ``nr_periods``, ``nr_throttled`` (cpu hierarchy on v1)
memory          ``memory.stat`` ``total_`` + (inactive_anon + active_anon + unevictable):
                the usage without page cache (v2 has no ``total_`` prefix)
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

Cgroup files are read through a :class:`CgroupReader` (``read_text(cgroup, controller, file)``,
``None`` when absent); :class:`HierarchyReader` reads them under
:meth:`CgroupInfo.hierarchy`, and tests hand in one over a ``FakeHost`` tree.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import operator
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol, TypeVar

from agent.cgroups import paths
from agent.cgroups.detect import CgroupInfo
from agent.config import HostPaths
from agent.qos.framework import PodState
from apis.qos import KubeQoS
from apis.slo import HostApplicationSpec

__all__ = [
    "CgroupReader",
    "HierarchyReader",
    "UsageSampler",
    "host_app_cgroup",
    "host_app_cgroups",
]

_log = logging.getLogger(__name__)

_T = TypeVar("_T")
_READ_CHUNK: Final = 65536
#: Open cgroup files kept at most (a node with more cgroups reopens as it goes).
_MAX_OPEN_FILES: Final = 4096
_CPU_STAT: Final = ("usage_usec", "nr_periods", "nr_throttled")
#: ``/proc/stat`` ``cpu`` columns counted as used: user nice system (idle iowait) irq softirq.
_USED_COLUMNS: Final = (0, 1, 2, 5, 6)
_V1_ANON: Final = ("total_inactive_anon", "total_active_anon", "total_unevictable")
_V2_ANON: Final = ("inactive_anon", "active_anon", "unevictable")
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


class HierarchyReader:
    """Reads ``<hierarchy of controller>/<cgroup>/<file>`` (the cgroup root itself on v2).

    The files read every pass stay open and are re-read with ``pread`` at offset 0: one
    system call instead of three per file. A cgroup that is removed makes its open files fail
    (``ENODEV``), and then the path is opened afresh (or found gone); every file is also
    reopened after ``reopen_seconds``, and :meth:`sweep` closes what the last pass did not read.
    """

    __slots__ = ("_bases", "_checked", "_clock", "_fds", "_used", "info", "reopen_seconds")

    def __init__(
        self,
        info: CgroupInfo,
        *,
        reopen_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.info = info
        self.reopen_seconds = reopen_seconds
        self._clock = clock
        self._bases: dict[str, str] = {}
        #: cgroups already validated (the same few hundred are read every pass).
        self._checked: set[str] = set()
        #: path -> (open descriptor, when it was opened)
        self._fds: dict[str, tuple[int, float]] = {}
        self._used: set[str] = set()

    @property
    def version(self) -> int:
        return self.info.resource_version

    def _open(self, target: str) -> int | None:
        try:
            fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        if len(self._fds) >= _MAX_OPEN_FILES:
            self.close()
        self._fds[target] = (fd, self._clock())
        return fd

    def _drop(self, target: str) -> None:
        held = self._fds.pop(target, None)
        if held is not None:
            os.close(held[0])

    def _pread(self, fd: int) -> bytes:
        data = os.pread(fd, _READ_CHUNK, 0)
        if len(data) == _READ_CHUNK:  # a long file (memory.stat can be): read the rest
            chunks = [data]
            offset = len(data)
            while chunk := os.pread(fd, _READ_CHUNK, offset):
                chunks.append(chunk)
                offset += len(chunk)
            data = b"".join(chunks)
        return data

    def read_text(self, cgroup: str, controller: str, file: str) -> str | None:
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
        self._used.add(target)
        held = self._fds.get(target)
        if held is not None and self._clock() - held[1] >= self.reopen_seconds:
            self._drop(target)
            held = None
        for attempt in (0, 1):
            fd = held[0] if held is not None and attempt == 0 else self._open(target)
            if fd is None:
                return None
            try:
                return self._pread(fd).decode("ascii", errors="replace")
            except OSError:
                # The cgroup went away under the open file; try the path once more.
                self._drop(target)
                held = None
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

    def count(self, since: float) -> int:
        """How many differences end after ``since``."""
        base = self._base(since)
        return 0 if base is None else len(self.times) - 1 - base


def _stat_fields(text: str, names: Iterable[str]) -> dict[str, int]:
    """The integer values of ``names`` in a flat-keyed stat file (``key value`` lines)."""
    tokens = text.split()
    table = dict(zip(tokens[::2], tokens[1::2], strict=False))
    found: dict[str, int] = {}
    for name in names:
        value = table.get(name)
        if value is not None:
            try:
                found[name] = int(value)
            except ValueError:
                continue
    return found


def _prune(table: dict[str, _T], live: Mapping[str, None]) -> None:
    for gone in [cgroup for cgroup in table if cgroup not in live]:
        del table[gone]


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
    ) -> None:
        if history_seconds <= 0 or interval <= 0:
            raise ValueError(
                f"history and interval must be positive, got {history_seconds}, {interval}"
            )
        self._host = host
        self._reader = files_reader
        self._clock = clock
        self._history = history_seconds
        self._interval = interval
        #: USER_HZ: jiffies per second in /proc/stat.
        self._hz = clock_ticks or os.sysconf("SC_CLK_TCK")
        self._node_cpu = _Counters()
        self._node_memory: tuple[float, int] | None = None
        self._cpu: dict[str, _Counters] = {}
        self._throttle: dict[str, _Counters] = {}
        self._memory: dict[str, tuple[float, int]] = {}
        self._pods: dict[str, str] = {}
        self._apps: dict[str, str] = {}
        self._warned: set[str] = set()
        #: (cgroup, window) -> CPU: answers stay the same until the next sample, so every
        #: strategy of one pass sees the same numbers (and each is computed once).
        self._cpu_answers: dict[tuple[str, float], float | None] = {}

    # --- reading ----------------------------------------------------------------------------

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            _log.warning(message, *args)

    def _proc(self, name: str) -> str | None:
        try:
            return Path(self._host.path(f"/proc/{name}")).read_text(encoding="ascii")
        except OSError as err:
            self._warn_once(name, "cannot read /proc/%s: %s", name, err)
            return None

    def _read_node_cpu(self) -> int | None:
        text = self._proc("stat")
        if text is None:
            return None
        for line in text.splitlines():
            fields = line.split()
            if fields and fields[0] == "cpu":
                try:
                    values = [int(v) for v in fields[1:]]
                    return sum(values[i] for i in _USED_COLUMNS if i < len(values))
                except ValueError:
                    break
        self._warn_once("stat-format", "no cpu line in /proc/stat")
        return None

    def _read_node_memory(self) -> int | None:
        text = self._proc("meminfo")
        if text is None:
            return None
        kib: dict[str, int] = {}
        for line in text.splitlines():
            name, _, rest = line.partition(":")
            value = rest.split()
            if value and value[0].isdigit():
                kib[name] = int(value[0])
        total = kib.get("MemTotal")
        available = kib.get("MemAvailable")
        if available is None and "MemFree" in kib:
            # Kernels before 3.14 have no MemAvailable: free + buffers + page cache.
            available = kib["MemFree"] + kib.get("Buffers", 0) + kib.get("Cached", 0)
        if total is None or available is None:
            self._warn_once("meminfo-format", "no MemTotal/MemAvailable in /proc/meminfo")
            return None
        return max(total - available, 0) * 1024

    def _cpu_stat(
        self, cgroup: str, memo: dict[str, dict[str, int] | None]
    ) -> dict[str, int] | None:
        if cgroup not in memo:
            text = self._reader.read_text(cgroup, "cpu", "cpu.stat")
            memo[cgroup] = _stat_fields(text, _CPU_STAT) if text is not None else None
        return memo[cgroup]

    def _read_cgroup_cpu(self, cgroup: str, memo: dict[str, dict[str, int] | None]) -> int | None:
        """Cumulative CPU time of a cgroup, ns."""
        if self._reader.version == 2:
            stat = self._cpu_stat(cgroup, memo)
            usage = stat.get("usage_usec") if stat is not None else None
            return None if usage is None else usage * 1000
        text = self._reader.read_text(cgroup, "cpuacct", "cpuacct.usage")
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def _read_throttle(
        self, cgroup: str, memo: dict[str, dict[str, int] | None]
    ) -> tuple[int, int] | None:
        stat = self._cpu_stat(cgroup, memo)
        if stat is None or "nr_periods" not in stat or "nr_throttled" not in stat:
            return None
        return stat["nr_periods"], stat["nr_throttled"]

    def _read_memory(self, cgroup: str) -> int | None:
        text = self._reader.read_text(cgroup, "memory", "memory.stat")
        if text is None:
            return None
        stat = _stat_fields(text, _V2_ANON if self._reader.version == 2 else _V1_ANON)
        return sum(stat.values()) if stat else None

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
    ) -> None:
        """Take one sample of the node, ``pods``, ``extra_cgroups`` and ``host_apps``
        (name -> cgroup, see :func:`host_app_cgroups`); forget what is no longer listed.

        ``containers``: which pods' running containers to sample throttling of (all, none, or
        those a predicate picks: only CPU burst's quota scaling needs them), and with
        ``container_cpu`` their CPU too (only burst's limiter does). Each is one read per
        container per pass, so the agent asks only for what its strategies use. ``memory``:
        sample the pods' (and host applications') memory (one read per pod).
        """
        now = self._clock()
        horizon = self._history
        used = self._read_node_cpu()
        if used is not None:
            self._node_cpu.observe(now, (used,), horizon)
        node_memory = self._read_node_memory()
        if node_memory is not None:
            self._node_memory = (now, node_memory)

        memo: dict[str, dict[str, int] | None] = {}
        cpu_cgroups: dict[str, None] = {}
        memory_cgroups: dict[str, None] = {}
        throttle_cgroups: dict[str, None] = {}
        self._pods = {}
        self._cpu_answers.clear()
        for pod in pods:
            self._pods[pod.uid] = pod.cgroup
            cpu_cgroups[pod.cgroup] = None
            if memory:
                memory_cgroups[pod.cgroup] = None
            if containers is False or (callable(containers) and not containers(pod)):
                continue
            for container in pod.containers:
                if container.cgroup is not None and container.running:
                    throttle_cgroups[container.cgroup] = None
                    if container_cpu:
                        cpu_cgroups[container.cgroup] = None
        for cgroup in extra_cgroups:
            cpu_cgroups[cgroup] = None
            throttle_cgroups[cgroup] = None
        self._apps = dict(host_apps or {})
        for cgroup in self._apps.values():
            cpu_cgroups[cgroup] = None
            if memory:
                memory_cgroups[cgroup] = None

        for cgroup in cpu_cgroups:
            usage = self._read_cgroup_cpu(cgroup, memo)
            if usage is not None:
                self._cpu.setdefault(cgroup, _Counters()).observe(now, (usage,), horizon)
        for cgroup in throttle_cgroups:
            counters = self._read_throttle(cgroup, memo)
            if counters is not None:
                self._throttle.setdefault(cgroup, _Counters()).observe(now, counters, horizon)
        for cgroup in memory_cgroups:
            value = self._read_memory(cgroup)
            if value is not None:
                self._memory[cgroup] = (now, value)

        sweep = getattr(self._reader, "sweep", None)
        if sweep is not None:
            sweep()
        _prune(self._cpu, cpu_cgroups)
        _prune(self._throttle, throttle_cgroups)
        _prune(self._memory, memory_cgroups)

    # --- queries (agent.qos.framework.Usage) ------------------------------------------------

    @property
    def interval(self) -> float:
        return self._interval

    def _since(self, window: float) -> float:
        return self._clock() - window

    def _fresh(self, value: tuple[float, int] | None) -> int | None:
        if value is None or value[0] <= self._clock() - 2 * self._interval:
            return None
        return value[1]

    def node_cpu(self, window: float) -> float | None:
        """Node CPU used, millicores, averaged over the trailing ``window`` seconds."""
        totals = self._node_cpu.totals(self._since(window))
        if totals is None or totals[0] <= 0:
            return None
        seconds, (jiffies,) = totals
        return jiffies * 1000 / self._hz / seconds

    def node_memory(self) -> int | None:
        """MemTotal - MemAvailable, bytes (latest sample)."""
        return self._fresh(self._node_memory)

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

    def pod_cpu(self, uid: str, window: float) -> float | None:
        cgroup = self._pods.get(uid)
        return None if cgroup is None else self.cgroup_cpu(cgroup, window)

    def pod_memory(self, uid: str) -> int | None:
        """Pod memory without page cache, bytes (latest sample)."""
        cgroup = self._pods.get(uid)
        return None if cgroup is None else self._fresh(self._memory.get(cgroup))

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
        return None if cgroup is None else self._fresh(self._memory.get(cgroup))

    def samples(self, window: float) -> int:
        """Node samples (differences) taken within the window."""
        return self._node_cpu.count(self._since(window))
