"""The one cgroup writer: cached, leveled, and quiet about cgroups that vanished.

:class:`CgroupWriter` takes the strategies' :class:`~agent.qos.framework.CgroupWrite` batch
of a pass and makes the kernel hold those values:

* **dedupe** - two writes to the same (cgroup, resource) in one batch: the last one wins;
* **skip** - a value equal to the current one is not written (cpu sets compare as sets, ``max``
  equals -1, shares that map to the same v2 weight are equal);
* **cache** - current values come from a read-through cache; an entry is trusted for
  ``refresh_seconds`` and then re-read and compared, so a value changed behind the agent's
  back is rewritten at the latest after that long; after a write the cache holds the new
  value. A steady pass (nothing to change, cache fresh) reads nothing from disk;
* **leveled order** for hierarchical limits (cfs quota, cpuset cpus/mems, memory
  limit/min/low/high), so that a parent never holds less than a child at any moment: first,
  parent -> child, each cgroup gets the looser of its old and new value (larger quota or
  memory value, union of cpus), then, child -> parent, the exact new value;
* **burst <= quota** (the upstream #2801 bug): kernels refuse a ``cpu.max.burst`` above the
  quota (mainline v1 ``cpu.cfs_burst_us`` too), and a quota below the current burst. Burst
  values that go down are written before any quota, those that go up after; with
  ``cap_burst`` (default on) a burst is capped at the cgroup's final quota, and a quota that
  goes below the current burst brings a burst write with it (written first);
* **steady passes** - a batch of the very same write objects as the last one, which changed
  nothing, gets the last results again while every cache entry it was decided from is the
  same and fresh (no value was read, written or dropped since): the same decisions, without
  making them again;
* **errors** - a vanished cgroup is reported ``vanished`` (no exception), a refused value
  ``rejected`` with its file, text and errno text (logged once per value; also a value out of
  the resource's range, a bad cgroup path, an unreadable file), a file this kernel lacks
  ``unsupported`` (remembered for ``refresh_seconds``); the other writes of the batch go on.
  A write whose first (looser) step fails does not attempt its second.

``plan`` computes the same batch (dedupe, burst caps) and says for each write where it goes,
what is there now and whether it would change; it writes nothing (``koordpy agent plan``).
"""

from __future__ import annotations

import enum
import logging
import operator
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from agent.cgroups import resources
from agent.cgroups.files import CgroupFiles
from agent.cgroups.paths import PathError
from agent.cgroups.resources import UNLIMITED, Merge, Resource, Value
from agent.errors import NotFound, Rejected, TransientError, Unsupported
from agent.qos.framework import CgroupView, CgroupWrite

__all__ = ["CachedView", "CgroupWriter", "PlannedWrite", "WriteResult", "WriteStatus"]

_log = logging.getLogger(__name__)

_Key = tuple[str, Resource]
#: Cache entry: (value, monotonic time it was read or written, file path).
_Entry = tuple[Value, float, str]

# Within one depth of the leveled passes, mems go before cpus (a v1 cpuset needs mems).
_RESOURCE_RANK = {Resource.CPUSET_MEMS: 0, Resource.CPUSET_CPUS: 1}
_CAP_REASON = "burst capped at the cfs quota"


class WriteStatus(enum.StrEnum):
    WRITTEN = "written"
    UNCHANGED = "unchanged"
    VANISHED = "vanished"
    REJECTED = "rejected"
    UNSUPPORTED = "unsupported"


class WriteResult(msgspec.Struct, frozen=True, gc=False):
    """What became of one write."""

    write: CgroupWrite
    status: WriteStatus
    #: The file written ("" when no path could be built).
    path: str
    #: The value the kernel holds now, as far as the writer knows (None: absent or unknown).
    current: Value | None
    #: Why it failed (rejected / unsupported / vanished), with file and value.
    error: str = ""


class PlannedWrite(msgspec.Struct, frozen=True, gc=False):
    """What ``apply`` would do with one write (``koordpy agent plan``)."""

    write: CgroupWrite
    #: The file it would write ("" when no path could be built).
    path: str
    #: The current value (None: the cgroup or file is absent, or unreadable).
    current: Value | None
    #: Whether the value would change.
    changed: bool
    #: Why it cannot be done as planned ("" when it can): absent cgroup, unsupported, invalid.
    note: str = ""


@dataclass(slots=True)
class _Job:
    """One deduplicated write while a batch is applied."""

    write: CgroupWrite
    path: str
    current: Value | None
    status: WriteStatus | None = None
    error: str = ""
    wrote: bool = False

    def result(self) -> WriteResult:
        status = self.status or (WriteStatus.WRITTEN if self.wrote else WriteStatus.UNCHANGED)
        return WriteResult(self.write, status, self.path, self.current, self.error)


@dataclass(slots=True)
class _Steady:
    """A batch that changed nothing, and the cache entries it was decided from."""

    writes: tuple[CgroupWrite, ...]
    cap_burst: bool
    keys: list[_Key]
    entries: list[_Entry]
    #: When the oldest of those entries was read or written.
    oldest: float
    results: list[WriteResult]


def _same_writes(a: tuple[CgroupWrite, ...], b: tuple[CgroupWrite, ...]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def _depth(cgroup: str) -> int:
    return cgroup.count("/") + 1 if cgroup else 0


def _with_value(write: CgroupWrite, value: Value, reason: str) -> CgroupWrite:
    why = f"{write.reason}; {reason}" if write.reason else reason
    return msgspec.structs.replace(write, value=value, reason=why)


class CachedView:
    """The writer's cache as a :class:`~agent.qos.framework.CgroupView` (None = absent)."""

    __slots__ = ("_writer",)

    def __init__(self, writer: CgroupWriter) -> None:
        self._writer = writer

    def get(self, cgroup: str, resource: Resource) -> Value | None:
        return self._writer.get(cgroup, resource)


class CgroupWriter:
    """See the module docstring. Not thread-safe: one loop owns it."""

    def __init__(
        self,
        files: CgroupFiles,
        *,
        clock: Callable[[], float] = time.monotonic,
        refresh_seconds: float = 60.0,
        cap_burst: bool = True,
    ) -> None:
        self.files = files
        self.refresh_seconds = refresh_seconds
        self.cap_burst = cap_burst
        self._clock = clock
        self._version = files.version
        self._cache: dict[_Key, _Entry] = {}
        #: Keys whose file this kernel lacks -> (when found, message).
        self._unsupported: dict[_Key, tuple[float, str]] = {}
        #: Rejected (key -> value) already logged.
        self._reported: dict[_Key, Value] = {}
        self._pruned = clock()
        #: The last batch, when it changed nothing (see the module docstring).
        self._steady: _Steady | None = None

    # --- the cache ---------------------------------------------------------------------

    def current(self) -> CgroupView:
        """A read-through view of the current values (what strategies see)."""
        return CachedView(self)

    def get(self, cgroup: str, resource: Resource) -> Value | None:
        """Current value of a settable resource through the cache; None when absent.

        Read-only single values (usage counters) are read fresh, never cached.
        """
        try:
            if resource not in resources.SETTABLE:
                return self.files.read_value(cgroup, resource)
            return self._read(cgroup, resource, self._clock())[0]
        except (NotFound, Unsupported, TransientError, PathError):
            return None

    def invalidate(self, cgroup: str | None = None) -> None:
        """Forget cached values of ``cgroup`` and everything below it (all with None)."""
        if cgroup is None:
            self._cache.clear()
            self._unsupported.clear()
            return
        prefix = cgroup + "/"
        for table in (self._cache, self._unsupported):
            for key in [k for k in table if k[0] == cgroup or k[0].startswith(prefix)]:
                del table[key]

    def _read(self, cgroup: str, resource: Resource, now: float) -> tuple[Value, str]:
        """(current value, path): the cache when fresh, else the file (and cache it)."""
        key = (cgroup, resource)
        entry = self._cache.get(key)
        if entry is not None and now - entry[1] < self.refresh_seconds:
            return entry[0], entry[2]
        missing = self._unsupported.get(key)
        if missing is not None and now - missing[0] < self.refresh_seconds:
            raise Unsupported(missing[1])
        path = entry[2] if entry is not None else self.files.path_text(cgroup, resource, write=True)
        try:
            value = self.files.read_value(cgroup, resource)
        except NotFound:
            self._cache.pop(key, None)
            raise
        except Unsupported as err:
            self._unsupported[key] = (now, str(err))
            raise
        self._cache[key] = (value, now, path)
        return value, path

    def _prune(self, now: float) -> None:
        """Drop entries nobody used for two refresh periods (deleted pods' cgroups)."""
        if now - self._pruned < self.refresh_seconds:
            return
        self._pruned = now
        horizon = now - 2 * self.refresh_seconds
        for key in [k for k, e in self._cache.items() if e[1] < horizon]:
            del self._cache[key]
        for key in [k for k, e in self._unsupported.items() if e[0] < horizon]:
            del self._unsupported[key]

    # --- batches -----------------------------------------------------------------------

    def _batch(
        self, writes: Iterable[CgroupWrite], now: float, consulted: list[_Key] | None = None
    ) -> list[CgroupWrite]:
        """Deduplicated writes (last wins, first position kept), bursts capped at quotas (the
        keys of the current values the caps looked up are added to ``consulted``)."""
        batch: dict[_Key, CgroupWrite] = {}
        cpu_max: set[str] = set()
        quota, burst = Resource.CPU_QUOTA, Resource.CPU_BURST
        for write in writes:
            resource = write.resource
            batch[(write.cgroup, resource)] = write
            if resource is quota or resource is burst:
                cpu_max.add(write.cgroup)
        if self.cap_burst and cpu_max:
            self._cap_bursts(batch, cpu_max, now, consulted)
        return list(batch.values())

    def _known(
        self, cgroup: str, resource: Resource, now: float, consulted: list[_Key] | None = None
    ) -> Value | None:
        if consulted is not None:
            consulted.append((cgroup, resource))
        try:
            return self._read(cgroup, resource, now)[0]
        except (NotFound, Unsupported, TransientError, PathError):
            return None

    def _cap_bursts(
        self,
        batch: dict[_Key, CgroupWrite],
        cgroups: set[str],
        now: float,
        consulted: list[_Key] | None,
    ) -> None:
        for cgroup in cgroups:
            quota_write = batch.get((cgroup, Resource.CPU_QUOTA))
            burst_write = batch.get((cgroup, Resource.CPU_BURST))
            quota: Value | None
            burst: Value | None
            if quota_write is not None:
                quota = quota_write.value
                if burst_write is None:
                    # Only a quota going down can fall below the current burst.
                    old = self._known(cgroup, Resource.CPU_QUOTA, now, consulted)
                    if not isinstance(quota, int) or quota == UNLIMITED:
                        continue
                    if isinstance(old, int) and old != UNLIMITED and quota >= old:
                        continue
            else:
                quota = self._known(cgroup, Resource.CPU_QUOTA, now, consulted)
            if not isinstance(quota, int) or quota == UNLIMITED:
                continue
            if resources.validate(Resource.CPU_QUOTA, self._version, quota) is not None:
                continue  # the quota write itself will be refused; leave the burst alone
            if burst_write is not None:
                burst = burst_write.value
            else:
                burst = self._known(cgroup, Resource.CPU_BURST, now, consulted)
            if not isinstance(burst, int) or burst <= quota:
                continue
            if burst_write is not None:
                batch[(cgroup, Resource.CPU_BURST)] = _with_value(burst_write, quota, _CAP_REASON)
            elif quota_write is not None:
                batch[(cgroup, Resource.CPU_BURST)] = CgroupWrite(
                    cgroup=cgroup,
                    resource=Resource.CPU_BURST,
                    value=quota,
                    strategy=quota_write.strategy,
                    reason=f"{_CAP_REASON} ({quota_write.reason})"
                    if quota_write.reason
                    else _CAP_REASON,
                )

    def plan(self, writes: Iterable[CgroupWrite]) -> list[PlannedWrite]:
        """Where each write would go, what is there and whether it would change; no writes."""
        now = self._clock()
        planned: list[PlannedWrite] = []
        for write in self._batch(writes, now):
            try:
                path = self.files.path_text(write.cgroup, write.resource, write=True)
            except (PathError, Unsupported) as err:
                planned.append(PlannedWrite(write, "", None, False, str(err)))
                continue
            problem = resources.validate(write.resource, self._version, write.value)
            if problem is not None:
                planned.append(PlannedWrite(write, path, None, False, f"invalid: {problem}"))
                continue
            if not resources.TABLE[write.resource].settable:
                planned.append(PlannedWrite(write, path, None, True))
                continue
            try:
                current, _ = self._read(write.cgroup, write.resource, now)
            except NotFound:
                planned.append(PlannedWrite(write, path, None, False, "cgroup absent"))
                continue
            except (Unsupported, TransientError) as err:
                planned.append(PlannedWrite(write, path, None, False, str(err)))
                continue
            changed = not resources.same(write.resource, self._version, current, write.value)
            planned.append(PlannedWrite(write, path, current, changed))
        return planned

    def apply(self, writes: Iterable[CgroupWrite]) -> list[WriteResult]:
        """Carry out a batch; one result per deduplicated write (plus inserted burst caps)."""
        now = self._clock()
        self._prune(now)
        writes = tuple(writes)
        steady = self._steady
        if steady is not None and self._still_steady(steady, writes, now):
            return list(steady.results)
        self._steady = None
        cache, refresh, version = self._cache, self.refresh_seconds, self._version
        same = resources.same
        unchanged = WriteStatus.UNCHANGED
        done: list[WriteResult | _Job] = []
        jobs: list[_Job] = []
        consulted: list[_Key] = []
        batch = self._batch(writes, now, consulted)
        settled = True  # nothing to write, nothing refused
        for write in batch:
            # The steady state: a fresh cache entry holding the value already.
            entry = cache.get((write.cgroup, write.resource))
            if (
                entry is not None
                and now - entry[1] < refresh
                and same(write.resource, version, entry[0], write.value)
            ):
                done.append(WriteResult(write, unchanged, entry[2], entry[0]))
                continue
            job = self._job(write, now)
            done.append(job)
            if job.status is None:
                jobs.append(job)
            settled = settled and job.status is unchanged
        if jobs:
            for job, value in self._steps(jobs):
                if job.status is None:
                    self._write(job, value, now)
        results = [item if isinstance(item, WriteResult) else item.result() for item in done]
        if settled:
            keys = [(w.cgroup, w.resource) for w in batch]
            self._remember(writes, [*keys, *consulted], results)
        return results

    def _remember(
        self, writes: tuple[CgroupWrite, ...], keys: list[_Key], results: list[WriteResult]
    ) -> None:
        """Keep a batch that changed nothing, if every value it was decided from is cached."""
        keys = list(dict.fromkeys(keys))
        entries = [self._cache.get(key) for key in keys]
        held = [entry for entry in entries if entry is not None]
        if len(held) == len(keys):
            oldest = min((entry[1] for entry in held), default=float("inf"))
            self._steady = _Steady(writes, self.cap_burst, keys, held, oldest, results)

    def _still_steady(self, steady: _Steady, writes: tuple[CgroupWrite, ...], now: float) -> bool:
        """Whether ``writes`` would be decided as the steady batch was: the same writes, and
        the same cache entries, all still fresh."""
        return (
            steady.cap_burst == self.cap_burst
            and now - steady.oldest < self.refresh_seconds
            and _same_writes(writes, steady.writes)
            and list(map(self._cache.get, steady.keys)) == steady.entries
        )

    def _job(self, write: CgroupWrite, now: float) -> _Job:
        """Look up the current value; decide the writes that need no disk write."""
        cgroup, resource, value = write.cgroup, write.resource, write.value
        try:
            if resource in resources.SETTABLE:
                current, path = self._read(cgroup, resource, now)
            else:
                # Pids to move (or a read-only file, refused below): nothing to compare.
                current, path = None, self.files.path_text(cgroup, resource, write=True)
        except PathError as err:
            return _Job(write, "", None, WriteStatus.REJECTED, str(err))
        except NotFound as err:
            return _Job(write, "", None, WriteStatus.VANISHED, str(err))
        except Unsupported as err:
            return _Job(write, "", None, WriteStatus.UNSUPPORTED, str(err))
        except TransientError as err:
            return _Job(write, "", None, WriteStatus.REJECTED, str(err))
        problem = resources.validate(resource, self._version, value)
        if problem is not None:
            error = str(Rejected(path, str(value), problem))
            self._report(write, error)
            return _Job(write, path, current, WriteStatus.REJECTED, error)
        if current is not None and resources.same(resource, self._version, current, value):
            return _Job(write, path, current, WriteStatus.UNCHANGED)
        return _Job(write, path, current)

    def _steps(self, pending: list[_Job]) -> list[tuple[_Job, Value]]:
        """The order of the disk writes (see the module docstring)."""
        burst_down: list[_Job] = []
        burst_up: list[_Job] = []
        leveled: list[_Job] = []
        plain: list[_Job] = []
        last: list[_Job] = []
        for job in pending:
            resource = job.write.resource
            if resource is Resource.CPU_BURST:
                old, new = job.current, job.write.value
                lower = isinstance(old, int) and isinstance(new, int) and new < old
                (burst_down if lower else burst_up).append(job)
            elif resources.TABLE[resource].merge is not Merge.NONE:
                leveled.append(job)
            elif resource is Resource.PROCS:
                last.append(job)
            else:
                plain.append(job)
        steps: list[tuple[_Job, Value]] = [(j, j.write.value) for j in burst_down]
        down = sorted(
            leveled, key=lambda j: (_depth(j.write.cgroup), _RESOURCE_RANK.get(j.write.resource, 2))
        )
        for job in down:
            old = job.current
            assert old is not None
            steps.append((job, resources.looser(job.write.resource, old, job.write.value)))
        steps.extend((j, j.write.value) for j in plain)
        steps.extend((j, j.write.value) for j in reversed(down))
        steps.extend((j, j.write.value) for j in burst_up)
        steps.extend((j, j.write.value) for j in last)
        return steps

    def _write(self, job: _Job, value: Value, now: float) -> None:
        write = job.write
        if job.current is not None and resources.same(
            write.resource, self._version, job.current, value
        ):
            return
        key = (write.cgroup, write.resource)
        try:
            self.files.write(write.cgroup, write.resource, value)
        except NotFound as err:
            self._cache.pop(key, None)
            job.status, job.error, job.current = WriteStatus.VANISHED, str(err), None
            _log.debug("cgroup vanished, write skipped: %s", err)
            return
        except Unsupported as err:
            self._unsupported[key] = (now, str(err))
            job.status, job.error = WriteStatus.UNSUPPORTED, str(err)
            return
        except Rejected as err:
            job.status, job.error = WriteStatus.REJECTED, str(err)
            self._report(write, str(err))
            return
        job.current = resources.canonical(write.resource, self._version, value)
        job.wrote = True
        if write.resource is not Resource.PROCS:
            self._cache[key] = (job.current, now, job.path)
        self._reported.pop(key, None)

    def _report(self, write: CgroupWrite, error: str) -> None:
        """Log a refused value once (until that cgroup file accepts a value again)."""
        key = (write.cgroup, write.resource)
        if key in self._reported and self._reported[key] == write.value:
            _log.debug("still rejected: %s", error)
            return
        self._reported[key] = write.value
        _log.warning(
            "cgroup write rejected (%s, %s): %s",
            write.strategy,
            write.reason or "no reason given",
            error,
            extra={"cgroup": write.cgroup, "resource": str(write.resource)},
        )
