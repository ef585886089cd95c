"""The cgroup resources the agent reads and writes, named after their cgroup v1 file.

A :class:`Resource` is the agent's own name for one control; the table in this module maps it
to the v1 subsystem and file and to its v2 twin, with the unit conversion between them
(``cpu.cfs_quota_us`` <-> first field of ``cpu.max``, ``cpu.shares`` <-> ``cpu.weight``...).
Values inside the agent are always in v1 units: quota/period/burst in microseconds (-1 =
unlimited), shares, bytes (-1 = unlimited), :class:`~agent.cgroups.cpuset.CpuSet`.

==================  ===========================  =========================================
resource (v1)       v2 twin                      conversion
==================  ===========================  =========================================
cpu.cfs_quota_us    ``cpu.max`` field 1          ``max`` <-> -1; written alone (the kernel
                                                 keeps the period)
cpu.cfs_period_us   ``cpu.max`` field 2          written as ``<quota> <period>``
cpu.cfs_burst_us    ``cpu.max.burst``            v1 range [0, 1e8]
cpu.shares          ``cpu.weight``               see :func:`shares_to_weight`
cpu.stat            ``cpu.stat``                 v2 ``throttled_usec`` -> ``throttled_time`` ns
cpuacct.usage       ``cpu.stat`` ``usage_usec``  v2 x1000 -> ns
cpuset.cpus/mems    same; read ``*.effective``   compared as sets
memory.limit_in_b.  ``memory.max``               v1 >= 0x7FFFFFFFFFFFF000 or v2 ``max`` -> -1
memory.usage_in_b.  ``memory.current``
memory.stat         ``memory.stat``              keys in v2 names (v1 ``total_*`` values)
memory.min/low/hi.  same                         ``max`` <-> -1
==================  ===========================  =========================================

Everything here is pure: :func:`parse` turns file text into a value, :func:`format_value`
turns a value into the text to write, :func:`validate` checks a value before it is written,
:func:`same` says whether two values are equal as the kernel would store them, and
:func:`looser` gives the less restrictive of two values (the leveled writer's first pass).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from agent.cgroups.cpuset import CpuSet, CpuSetError

__all__ = [
    "CFS_PERIOD",
    "MIN_QUOTA",
    "SETTABLE",
    "TABLE",
    "UNLIMITED",
    "Kind",
    "Merge",
    "Reading",
    "Resource",
    "ResourceSpec",
    "Value",
    "canonical",
    "format_cpu_max",
    "format_value",
    "looser",
    "memory_usage",
    "parse",
    "parse_cpu_max",
    "parse_keyed",
    "parse_memory",
    "parse_pressure",
    "quota_from_milli",
    "same",
    "shares_from_milli",
    "shares_to_weight",
    "spec",
    "validate",
    "weight_to_shares",
]


class Resource(enum.StrEnum):
    """Cgroup controls, by their v1 file name."""

    CPU_QUOTA = "cpu.cfs_quota_us"
    CPU_PERIOD = "cpu.cfs_period_us"
    CPU_BURST = "cpu.cfs_burst_us"
    CPU_SHARES = "cpu.shares"
    CPU_STAT = "cpu.stat"
    CPU_IDLE = "cpu.idle"
    #: Group identity (Alibaba Cloud Linux / Anolis kernels only).
    CPU_BVT_WARP_NS = "cpu.bvt_warp_ns"
    CPUACCT_USAGE = "cpuacct.usage"
    CPUSET_CPUS = "cpuset.cpus"
    CPUSET_MEMS = "cpuset.mems"
    MEMORY_LIMIT = "memory.limit_in_bytes"
    MEMORY_USAGE = "memory.usage_in_bytes"
    MEMORY_STAT = "memory.stat"
    MEMORY_MIN = "memory.min"
    MEMORY_LOW = "memory.low"
    MEMORY_HIGH = "memory.high"
    PROCS = "cgroup.procs"
    CPU_PRESSURE = "cpu.pressure"
    MEMORY_PRESSURE = "memory.pressure"
    IO_PRESSURE = "io.pressure"


#: A settable value in v1 units: an int (µs, shares, bytes; -1 = unlimited) or a cpu set.
Value = int | CpuSet
#: What a read returns: a value, a stat file as a dict, PSI averages, or the pids of a cgroup.
Reading = int | CpuSet | dict[str, int] | dict[str, float] | tuple[int, ...]

#: -1: no limit (``max`` on v2).
UNLIMITED: Final = -1
#: The CFS period the agent assumes everywhere, µs.
CFS_PERIOD: Final = 100_000
#: The smallest quota the agent writes (other than -1), µs.
MIN_QUOTA: Final = 1000
SHARES_MIN: Final = 2
SHARES_MAX: Final = 262_144
WEIGHT_MIN: Final = 1
WEIGHT_MAX: Final = 10_000
#: Valid ``cpu.cfs_burst_us`` range on v1 is [0, 1e8].
BURST_MAX_V1: Final = 100_000_000
PERIOD_MIN: Final = 1000
PERIOD_MAX: Final = 1_000_000
#: v1 memory limits at or above this are "unlimited" (the kernel's page-rounded LLONG_MAX).
V1_MEMORY_UNLIMITED: Final = 0x7FFFFFFFFFFFF000


class Kind(enum.Enum):
    """The shape of a resource's content."""

    INT = "int"
    CPUSET = "cpuset"
    #: Flat ``key value`` integers (``cpu.stat``, ``memory.stat``).
    STATS = "stats"
    #: PSI lines (``some avg10=0.00 ... total=N``).
    PRESSURE = "pressure"
    #: One pid per line.
    PIDS = "pids"


class Merge(enum.Enum):
    """How the leveled writer loosens a hierarchical limit (parent >= child)."""

    NONE = "none"
    #: The larger value wins; -1 (unlimited) is larger than everything.
    MAX = "max"
    #: The union of the cpu sets.
    UNION = "union"


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """Where one resource lives on each version, and how it behaves."""

    resource: Resource
    kind: Kind
    #: v1 controller whose hierarchy holds the file.
    v1_subsystem: str
    #: v1 file; None: no twin on v1.
    v1_file: str | None
    #: v2 file written (and read unless ``v2_read``); None: no twin on v2.
    v2_file: str | None
    #: v2 file read when it differs from the written one (``cpuset.cpus.effective``).
    v2_read: str | None = None
    writable: bool = False
    merge: Merge = Merge.NONE

    @property
    def settable(self) -> bool:
        """A writable value the writer caches (an int or a cpu set)."""
        return self.writable and self.kind in (Kind.INT, Kind.CPUSET)

    def file(self, version: int, *, write: bool = False) -> str | None:
        """File name on ``version`` (1 or 2); None when the resource has no twin there."""
        if version == 2:
            return self.v2_file if write or self.v2_read is None else self.v2_read
        return self.v1_file


def _spec(
    resource: Resource,
    kind: Kind,
    subsystem: str,
    v2: str | None,
    *,
    v1: str | None = "",
    v2_read: str | None = None,
    writable: bool = False,
    merge: Merge = Merge.NONE,
) -> ResourceSpec:
    return ResourceSpec(
        resource=resource,
        kind=kind,
        v1_subsystem=subsystem,
        v1_file=str(resource) if v1 == "" else v1,
        v2_file=v2,
        v2_read=v2_read,
        writable=writable,
        merge=merge,
    )


R = Resource
#: Resource -> where it lives and how it behaves.
TABLE: Final[Mapping[Resource, ResourceSpec]] = MappingProxyType(
    {
        s.resource: s
        for s in (
            _spec(R.CPU_QUOTA, Kind.INT, "cpu", "cpu.max", writable=True, merge=Merge.MAX),
            _spec(R.CPU_PERIOD, Kind.INT, "cpu", "cpu.max", writable=True),
            _spec(R.CPU_BURST, Kind.INT, "cpu", "cpu.max.burst", writable=True),
            _spec(R.CPU_SHARES, Kind.INT, "cpu", "cpu.weight", writable=True),
            _spec(R.CPU_IDLE, Kind.INT, "cpu", "cpu.idle", writable=True),
            _spec(R.CPU_BVT_WARP_NS, Kind.INT, "cpu", "cpu.bvt_warp_ns", writable=True),
            _spec(R.CPU_STAT, Kind.STATS, "cpu", "cpu.stat"),
            _spec(R.CPUACCT_USAGE, Kind.INT, "cpuacct", "cpu.stat"),
            _spec(
                R.CPUSET_CPUS,
                Kind.CPUSET,
                "cpuset",
                "cpuset.cpus",
                v2_read="cpuset.cpus.effective",
                writable=True,
                merge=Merge.UNION,
            ),
            _spec(
                R.CPUSET_MEMS,
                Kind.CPUSET,
                "cpuset",
                "cpuset.mems",
                v2_read="cpuset.mems.effective",
                writable=True,
                merge=Merge.UNION,
            ),
            _spec(R.MEMORY_LIMIT, Kind.INT, "memory", "memory.max", writable=True, merge=Merge.MAX),
            _spec(R.MEMORY_USAGE, Kind.INT, "memory", "memory.current"),
            _spec(R.MEMORY_STAT, Kind.STATS, "memory", "memory.stat"),
            # memory.min/low/high exist on v1 only with Anolis' extensions.
            _spec(R.MEMORY_MIN, Kind.INT, "memory", "memory.min", writable=True, merge=Merge.MAX),
            _spec(R.MEMORY_LOW, Kind.INT, "memory", "memory.low", writable=True, merge=Merge.MAX),
            _spec(R.MEMORY_HIGH, Kind.INT, "memory", "memory.high", writable=True, merge=Merge.MAX),
            # On v1 the writer reads and writes pids in the cpu hierarchy.
            _spec(R.PROCS, Kind.PIDS, "cpu", "cgroup.procs", writable=True),
            # PSI: on v1 only Anolis has it (under cpuacct); mainline v1 has no twin file.
            _spec(R.CPU_PRESSURE, Kind.PRESSURE, "cpuacct", "cpu.pressure"),
            _spec(R.MEMORY_PRESSURE, Kind.PRESSURE, "cpuacct", "memory.pressure"),
            _spec(R.IO_PRESSURE, Kind.PRESSURE, "cpuacct", "io.pressure"),
        )
    }
)
del R
#: The resources the writer caches (:attr:`ResourceSpec.settable`).
SETTABLE: Final[frozenset[Resource]] = frozenset(r for r, s in TABLE.items() if s.settable)


def spec(resource: Resource) -> ResourceSpec:
    return TABLE[resource]


# --- unit conversions --------------------------------------------------------------------


def shares_to_weight(shares: int) -> int:
    """``cpu.shares`` -> ``cpu.weight``: 1 + (shares-2)*9999/262142 (int), clamped [1, 10000]."""
    weight = 1 + (shares - SHARES_MIN) * 9999 // 262_142
    return max(WEIGHT_MIN, min(WEIGHT_MAX, weight))


def weight_to_shares(weight: int) -> int:
    """``cpu.weight`` -> ``cpu.shares``: (weight-1)*262142/9999 + 2, clamped [2, 262144]."""
    shares = (weight - WEIGHT_MIN) * 262_142 // 9999 + SHARES_MIN
    return max(SHARES_MIN, min(SHARES_MAX, shares))


def shares_from_milli(milli: int) -> int:
    """Millicores -> shares: milli*1024/1000 clamped [2, 262144] (<= 0 -> 2)."""
    if milli <= 0:
        return SHARES_MIN
    return max(SHARES_MIN, min(SHARES_MAX, milli * 1024 // 1000))


def quota_from_milli(milli: int, period: int = CFS_PERIOD) -> int:
    """Millicores -> cfs quota: milli*period/1000; <= 0 -> -1; anything smaller -> 1000."""
    if milli <= 0:
        return UNLIMITED
    return max(MIN_QUOTA, milli * period // 1000)


def parse_cpu_max(text: str) -> tuple[int, int]:
    """``cpu.max`` (``"max 100000"``, ``"50000 100000"``) -> (quota, period); max -> -1."""
    fields = text.split()
    if not fields or len(fields) > 2:
        raise ValueError(f"invalid cpu.max {text!r}")
    quota = UNLIMITED if fields[0] == "max" else int(fields[0])
    period = int(fields[1]) if len(fields) == 2 else CFS_PERIOD
    return quota, period


def format_cpu_max(quota: int, period: int | None = None) -> str:
    """Text for ``cpu.max``: the quota alone keeps the period; -1 is ``max``."""
    head = "max" if quota == UNLIMITED else str(quota)
    return head if period is None else f"{head} {period}"


def parse_memory(text: str) -> int:
    """A memory value, bytes: ``max`` or a v1 value >= 0x7FFFFFFFFFFFF000 -> -1."""
    text = text.strip()
    if text == "max":
        return UNLIMITED
    value = int(text)
    return UNLIMITED if value >= V1_MEMORY_UNLIMITED else value


def parse_keyed(text: str) -> dict[str, int]:
    """Flat keyed integers (``nr_periods 10``), one per line; other lines are skipped."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        try:
            values[key] = int(rest)
        except ValueError:
            continue
    return values


def parse_pressure(text: str) -> dict[str, float]:
    """PSI lines -> ``{"some_avg10": 0.5, ..., "full_total": 1234.0}`` (total in µs)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        for item in rest.split():
            name, sep, number = item.partition("=")
            if sep:
                values[f"{kind}_{name}"] = float(number)
    return values


_V1_MEMORY_KEYS: Final = {
    "total_cache": "file",
    "total_rss": "anon",
    "total_inactive_file": "inactive_file",
    "total_active_file": "active_file",
    "total_inactive_anon": "inactive_anon",
    "total_active_anon": "active_anon",
    "total_unevictable": "unevictable",
}


def _memory_stat(raw: dict[str, int], version: int) -> dict[str, int]:
    """``memory.stat`` with v2 key names; on v1 the hierarchical ``total_*`` values win."""
    if version == 2:
        return raw
    stats = dict(raw)
    for v1_key, name in _V1_MEMORY_KEYS.items():
        if v1_key in raw:
            stats[name] = raw[v1_key]
    return stats


def _cpu_stat(raw: dict[str, int], version: int) -> dict[str, int]:
    """``cpu.stat`` with v1 key names; v2's ``throttled_usec`` becomes ``throttled_time`` ns."""
    if version == 2 and "throttled_usec" in raw:
        stats = dict(raw)
        stats["throttled_time"] = raw["throttled_usec"] * 1000
        return stats
    return raw


def memory_usage(stats: Mapping[str, int], *, with_cache: bool = False) -> int:
    """Usage from a normalized ``memory.stat``: anon (active+inactive) + unevictable
    (+ active and inactive file with ``with_cache``)."""
    total = stats.get("inactive_anon", 0) + stats.get("active_anon", 0)
    total += stats.get("unevictable", 0)
    if with_cache:
        total += stats.get("inactive_file", 0) + stats.get("active_file", 0)
    return total


# --- parse / format / validate / compare -------------------------------------------------


def _int(text: str) -> int:
    return int(text.strip())


def parse(resource: Resource, version: int, text: str) -> Reading:
    """File text -> value in v1 units. Raises ValueError on text that is not the format."""
    r = Resource
    if resource in (r.CPU_QUOTA, r.CPU_PERIOD):
        if version == 2:
            quota, period = parse_cpu_max(text)
            return quota if resource is r.CPU_QUOTA else period
        return _int(text)
    if resource is r.CPU_SHARES:
        return weight_to_shares(_int(text)) if version == 2 else _int(text)
    if resource is r.CPUACCT_USAGE:
        if version == 2:
            stats = parse_keyed(text)
            if "usage_usec" not in stats:
                raise ValueError("cpu.stat has no usage_usec")
            return stats["usage_usec"] * 1000
        return _int(text)
    if resource is r.CPU_STAT:
        return _cpu_stat(parse_keyed(text), version)
    if resource is r.MEMORY_STAT:
        return _memory_stat(parse_keyed(text), version)
    if resource in (r.MEMORY_LIMIT, r.MEMORY_MIN, r.MEMORY_LOW, r.MEMORY_HIGH):
        return parse_memory(text)
    kind = TABLE[resource].kind
    if kind is Kind.CPUSET:
        try:
            return CpuSet.parse(text)
        except CpuSetError as err:
            raise ValueError(str(err)) from None
    if kind is Kind.PIDS:
        return tuple(int(line) for line in text.split())
    if kind is Kind.PRESSURE:
        return parse_pressure(text)
    return _int(text)


def format_value(resource: Resource, version: int, value: Value) -> str:
    """The text to write for ``value``. ``cpu.cfs_period_us`` on v2 gives the period alone
    (the file layer prefixes the current quota: ``cpu.max`` needs both)."""
    if isinstance(value, CpuSet):
        return str(value)
    r = Resource
    if version == 2:
        if resource is r.CPU_QUOTA:
            return format_cpu_max(value)
        if resource is r.CPU_SHARES:
            return str(shares_to_weight(value))
        if resource is r.MEMORY_LIMIT:
            return "max" if value == UNLIMITED else str(value)
    if resource in (r.MEMORY_MIN, r.MEMORY_LOW, r.MEMORY_HIGH):
        return "max" if value == UNLIMITED else str(value)
    return str(value)


def _outside(value: int, low: int, high: int | None) -> str | None:
    if value < low or (high is not None and value > high):
        return f"outside [{low}, {'inf' if high is None else high}]"
    return None


def validate(resource: Resource, version: int, value: object) -> str | None:
    """Why ``value`` must not be written to ``resource``; None when it may."""
    entry = TABLE[resource]
    if not entry.writable:
        return f"{resource} is read-only"
    if entry.kind is Kind.CPUSET:
        return None if isinstance(value, CpuSet) else "not a cpu set"
    if isinstance(value, bool) or not isinstance(value, int):
        return "not an integer"
    r = Resource
    if resource is r.CPU_QUOTA:
        if value == UNLIMITED or value >= MIN_QUOTA:
            return None
        return f"neither -1 nor >= {MIN_QUOTA}"
    if resource is r.CPU_PERIOD:
        return _outside(value, PERIOD_MIN, PERIOD_MAX)
    if resource is r.CPU_BURST:
        return _outside(value, 0, BURST_MAX_V1 if version == 1 else None)
    if resource is r.CPU_SHARES:
        return _outside(value, SHARES_MIN, SHARES_MAX)
    if resource is r.CPU_IDLE:
        return _outside(value, 0, 1)
    if resource is r.PROCS:
        return _outside(value, 1, None)
    # memory values: bytes or -1
    return None if value == UNLIMITED else _outside(value, 0, None)


def canonical(resource: Resource, version: int, value: Value) -> Value:
    """``value`` as it reads back after being written.

    Only ``cpu.shares`` on v2 differs: it is stored as a weight, and the spec's formulas
    round down both ways (1024 shares -> weight 39 -> 998 shares).
    """
    if version == 2 and resource is Resource.CPU_SHARES and not isinstance(value, CpuSet):
        return weight_to_shares(shares_to_weight(value))
    return value


def same(resource: Resource, version: int, current: Value, desired: Value) -> bool:
    """Whether writing ``desired`` over ``current`` (as read) would change nothing.

    Cpu sets compare as sets; ``max`` and -1 are the same (both parse to -1); shares on v2
    compare by the weight the kernel would store.
    """
    if version == 1 or resource is not Resource.CPU_SHARES:
        return current == desired
    return current == canonical(resource, version, desired)


def looser(resource: Resource, old: Value, new: Value) -> Value:
    """The less restrictive of two values of a hierarchical limit (see :class:`Merge`)."""
    merge = TABLE[resource].merge
    if merge is Merge.UNION:
        if not isinstance(old, CpuSet) or not isinstance(new, CpuSet):
            raise TypeError(f"{resource}: cpu sets expected")
        return old | new
    if merge is Merge.MAX:
        if isinstance(old, CpuSet) or isinstance(new, CpuSet):
            raise TypeError(f"{resource}: integers expected")
        if UNLIMITED in (old, new):
            return UNLIMITED
        return max(old, new)
    return new
