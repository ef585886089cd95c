"""The resource table: v1 <-> v2 files, unit conversions, validators, stat parsing."""

from __future__ import annotations

import pytest

from agent.cgroups import resources
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource

R = Resource


def test_every_resource_has_an_entry() -> None:
    assert set(resources.TABLE) == set(Resource)
    for resource, entry in resources.TABLE.items():
        assert entry.resource is resource
        assert entry.file(1) == str(resource)


@pytest.mark.parametrize(
    ("resource", "v1", "v2_write", "v2_read"),
    [
        (R.CPU_QUOTA, "cpu/cpu.cfs_quota_us", "cpu.max", "cpu.max"),
        (R.CPU_PERIOD, "cpu/cpu.cfs_period_us", "cpu.max", "cpu.max"),
        (R.CPU_BURST, "cpu/cpu.cfs_burst_us", "cpu.max.burst", "cpu.max.burst"),
        (R.CPU_SHARES, "cpu/cpu.shares", "cpu.weight", "cpu.weight"),
        (R.CPUACCT_USAGE, "cpuacct/cpuacct.usage", "cpu.stat", "cpu.stat"),
        (R.CPUSET_CPUS, "cpuset/cpuset.cpus", "cpuset.cpus", "cpuset.cpus.effective"),
        (R.CPUSET_MEMS, "cpuset/cpuset.mems", "cpuset.mems", "cpuset.mems.effective"),
        (R.MEMORY_LIMIT, "memory/memory.limit_in_bytes", "memory.max", "memory.max"),
        (R.MEMORY_USAGE, "memory/memory.usage_in_bytes", "memory.current", "memory.current"),
        (R.MEMORY_HIGH, "memory/memory.high", "memory.high", "memory.high"),
    ],
)
def test_v1_and_v2_files(resource: Resource, v1: str, v2_write: str, v2_read: str) -> None:
    entry = resources.spec(resource)
    assert f"{entry.v1_subsystem}/{entry.file(1)}" == v1
    assert entry.file(2, write=True) == v2_write
    assert entry.file(2) == v2_read


@pytest.mark.parametrize("shares", [2, 3, 100, 1024, 2048, 102400, 262143, 262144])
def test_shares_to_weight_formula(shares: int) -> None:
    # weight = 1 + (shares - 2) * 9999 / 262142, integer division
    assert resources.shares_to_weight(shares) == 1 + (shares - 2) * 9999 // 262142


def test_shares_to_weight_bounds_and_clamps() -> None:
    assert resources.shares_to_weight(2) == 1
    assert resources.shares_to_weight(262144) == 10000
    assert resources.shares_to_weight(1024) == 1 + 1022 * 9999 // 262142 == 39
    assert resources.shares_to_weight(0) == 1  # below the range: clamped to 1
    assert resources.shares_to_weight(10**9) == 10000


@pytest.mark.parametrize("weight", [1, 2, 39, 100, 5000, 9999, 10000])
def test_weight_to_shares_formula(weight: int) -> None:
    # shares = (weight - 1) * 262142 / 9999 + 2, integer division
    assert resources.weight_to_shares(weight) == (weight - 1) * 262142 // 9999 + 2


def test_weight_to_shares_bounds_and_clamps() -> None:
    assert resources.weight_to_shares(1) == 2
    assert resources.weight_to_shares(10000) == 262144
    assert resources.weight_to_shares(0) == 2
    assert resources.weight_to_shares(20000) == 262144


def test_shares_equal_by_weight_on_v2_only() -> None:
    # 1024 shares -> weight 39 -> read back as 38 * 262142 // 9999 + 2 = 998
    back = resources.weight_to_shares(resources.shares_to_weight(1024))
    assert back == 38 * 262142 // 9999 + 2 == 998
    assert resources.canonical(R.CPU_SHARES, 2, 1024) == back
    assert resources.canonical(R.CPU_SHARES, 1, 1024) == 1024
    assert resources.same(R.CPU_SHARES, 2, back, 1024)
    # 998 itself would be stored as weight 1 + 996 * 9999 // 262142 = 38, not 39: a change
    assert resources.shares_to_weight(998) == 38
    assert not resources.same(R.CPU_SHARES, 2, back, 998)
    assert not resources.same(R.CPU_SHARES, 1, back, 1024)
    assert not resources.same(R.CPU_SHARES, 2, 2048, 1024)


@pytest.mark.parametrize(
    ("text", "quota", "period"),
    [
        ("max 100000\n", -1, 100000),
        ("50000 100000\n", 50000, 100000),
        ("250000 50000", 250000, 50000),
        ("max", -1, 100000),
    ],
)
def test_cpu_max_read(text: str, quota: int, period: int) -> None:
    assert resources.parse(R.CPU_QUOTA, 2, text) == quota
    assert resources.parse(R.CPU_PERIOD, 2, text) == period


@pytest.mark.parametrize("text", ["", "1 2 3", "lots 100000"])
def test_cpu_max_garbage(text: str) -> None:
    with pytest.raises(ValueError, match=r"cpu\.max|invalid literal"):
        resources.parse(R.CPU_QUOTA, 2, text)


def test_quota_formats() -> None:
    # v2: the quota is written alone (the kernel keeps the period); -1 is "max"
    assert resources.format_value(R.CPU_QUOTA, 2, -1) == "max"
    assert resources.format_value(R.CPU_QUOTA, 2, 20000) == "20000"
    assert resources.format_value(R.CPU_QUOTA, 1, -1) == "-1"
    assert resources.format_cpu_max(-1, 100000) == "max 100000"
    assert resources.format_cpu_max(50000, 100000) == "50000 100000"
    assert resources.parse(R.CPU_QUOTA, 1, "-1\n") == -1
    assert resources.same(R.CPU_QUOTA, 2, -1, -1)


def test_shares_formats() -> None:
    assert resources.format_value(R.CPU_SHARES, 1, 1024) == "1024"
    assert resources.format_value(R.CPU_SHARES, 2, 1024) == str(1 + 1022 * 9999 // 262142)
    assert resources.parse(R.CPU_SHARES, 2, "100\n") == 99 * 262142 // 9999 + 2


def test_memory_unlimited() -> None:
    unlimited = 0x7FFFFFFFFFFFF000
    # the kernel's v1 "no limit" is LLONG_MAX rounded down to a page
    assert resources.parse(R.MEMORY_LIMIT, 1, "9223372036854771712\n") == -1
    assert resources.parse(R.MEMORY_LIMIT, 1, f"{unlimited}\n") == -1
    assert resources.parse(R.MEMORY_LIMIT, 1, f"{unlimited - 4096}\n") == unlimited - 4096
    assert resources.parse(R.MEMORY_LIMIT, 2, "max\n") == -1
    assert resources.parse(R.MEMORY_HIGH, 2, "max\n") == -1
    assert resources.parse(R.MEMORY_MIN, 2, "0\n") == 0
    assert resources.format_value(R.MEMORY_LIMIT, 1, -1) == "-1"
    assert resources.format_value(R.MEMORY_LIMIT, 2, -1) == "max"
    assert resources.format_value(R.MEMORY_LIMIT, 2, 1 << 30) == str(1 << 30)
    assert resources.format_value(R.MEMORY_HIGH, 1, -1) == "max"
    assert resources.same(R.MEMORY_LIMIT, 1, -1, -1)


def test_cpusets_compare_as_sets() -> None:
    a = resources.parse(R.CPUSET_CPUS, 1, "0-3\n")
    b = resources.parse(R.CPUSET_CPUS, 2, "0,1,2,3")
    assert isinstance(a, CpuSet)
    assert isinstance(b, CpuSet)
    assert resources.same(R.CPUSET_CPUS, 2, a, b)
    assert not resources.same(R.CPUSET_CPUS, 2, a, CpuSet({0, 1}))
    assert resources.format_value(R.CPUSET_CPUS, 1, CpuSet({0, 1, 2, 3, 8})) == "0-3,8"
    assert resources.parse(R.CPUSET_CPUS, 1, "\n") == CpuSet()
    with pytest.raises(ValueError, match="cpu"):
        resources.parse(R.CPUSET_CPUS, 1, "3-1")


@pytest.mark.parametrize(
    ("resource", "version", "good", "bad"),
    [
        (R.CPU_BURST, 1, [0, 100_000_000], [-1, 100_000_001]),
        (R.CPU_BURST, 2, [0, 200_000_000], [-1]),
        (R.CPU_SHARES, 1, [2, 1024, 262144], [1, 0, 262145]),
        (R.CPU_QUOTA, 1, [-1, 1000, 10**9], [-2, 0, 999]),
        (R.CPU_QUOTA, 2, [-1, 1000], [999, -5]),
        (R.CPU_PERIOD, 2, [1000, 100000, 1_000_000], [999, 1_000_001]),
        (R.CPU_IDLE, 1, [0, 1], [2, -1]),
        (R.MEMORY_LIMIT, 1, [-1, 0, 1 << 40], [-2]),
        (R.PROCS, 1, [1, 4242], [0, -1]),
    ],
)
def test_validators(resource: Resource, version: int, good: list[int], bad: list[int]) -> None:
    for value in good:
        assert resources.validate(resource, version, value) is None, value
    for value in bad:
        assert resources.validate(resource, version, value) is not None, value


def test_validators_check_types_and_read_only() -> None:
    assert resources.validate(R.CPU_QUOTA, 1, CpuSet({1})) == "not an integer"
    assert resources.validate(R.CPU_QUOTA, 1, True) == "not an integer"
    assert resources.validate(R.CPUSET_CPUS, 1, 3) == "not a cpu set"
    assert resources.validate(R.CPUSET_CPUS, 1, CpuSet()) is None
    assert resources.validate(R.CPU_STAT, 1, 1) == "cpu.stat is read-only"
    assert resources.validate(R.MEMORY_USAGE, 2, 1) is not None


def test_looser() -> None:
    assert resources.looser(R.CPU_QUOTA, 30000, 50000) == 50000
    assert resources.looser(R.CPU_QUOTA, 50000, 30000) == 50000
    assert resources.looser(R.CPU_QUOTA, -1, 30000) == -1
    assert resources.looser(R.CPU_QUOTA, 30000, -1) == -1
    assert resources.looser(R.MEMORY_LIMIT, 1 << 30, 1 << 29) == 1 << 30
    assert resources.looser(R.CPUSET_CPUS, CpuSet({0, 1}), CpuSet({1, 2})) == CpuSet({0, 1, 2})
    assert resources.looser(R.CPU_SHARES, 1024, 2) == 2  # not hierarchical: the new value
    with pytest.raises(TypeError):
        resources.looser(R.CPUSET_CPUS, 1, CpuSet({1}))


def test_milli_conversions() -> None:
    # shares = max(2, min(262144, milli * 1024 / 1000)); <= 0 -> 2
    assert resources.shares_from_milli(0) == 2
    assert resources.shares_from_milli(-5) == 2
    assert resources.shares_from_milli(1) == 2
    assert resources.shares_from_milli(500) == 500 * 1024 // 1000 == 512
    assert resources.shares_from_milli(1000) == 1024
    assert resources.shares_from_milli(10**6) == 262144
    # quota = milli * 100000 / 1000; <= 0 -> -1; below 1000 -> 1000
    assert resources.quota_from_milli(0) == -1
    assert resources.quota_from_milli(500) == 500 * 100000 // 1000 == 50000
    assert resources.quota_from_milli(5) == 1000
    assert resources.quota_from_milli(2500, period=50000) == 2500 * 50000 // 1000


V1_CPU_STAT = (
    "nr_periods 345\nnr_throttled 12\nthrottled_time 987654321\nnr_bursts 0\nburst_time 0\n"
)
V2_CPU_STAT = (
    "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\ncore_sched.force_idle_usec 0\n"
    "nr_periods 10\nnr_throttled 2\nthrottled_usec 3456\nnr_bursts 1\nburst_usec 70\n"
)


def test_cpu_stat_v1() -> None:
    stats = resources.parse(R.CPU_STAT, 1, V1_CPU_STAT)
    assert stats == {
        "nr_periods": 345,
        "nr_throttled": 12,
        "throttled_time": 987654321,
        "nr_bursts": 0,
        "burst_time": 0,
    }


def test_cpu_stat_v2_in_v1_units() -> None:
    stats = resources.parse(R.CPU_STAT, 2, V2_CPU_STAT)
    assert isinstance(stats, dict)
    assert stats["nr_periods"] == 10
    assert stats["nr_throttled"] == 2
    assert stats["throttled_time"] == 3456 * 1000  # µs -> ns
    assert stats["usage_usec"] == 1234567
    # cpuacct.usage (ns) on v2 is usage_usec x 1000
    assert resources.parse(R.CPUACCT_USAGE, 2, V2_CPU_STAT) == 1234567 * 1000
    assert resources.parse(R.CPUACCT_USAGE, 1, "123456789\n") == 123456789
    with pytest.raises(ValueError, match="usage_usec"):
        resources.parse(R.CPUACCT_USAGE, 2, "nr_periods 1\n")


V1_MEMORY_STAT = """cache 4096
rss 8192
rss_huge 0
shmem 0
mapped_file 0
dirty 0
writeback 0
pgpgin 100
pgpgout 50
pgfault 1000
pgmajfault 0
inactive_anon 4096
active_anon 4096
inactive_file 4096
active_file 0
unevictable 0
hierarchical_memory_limit 9223372036854771712
total_cache 1048576
total_rss 2097152
total_rss_huge 0
total_shmem 0
total_mapped_file 4096
total_inactive_anon 524288
total_active_anon 1572864
total_inactive_file 786432
total_active_file 262144
total_unevictable 8192
"""

V2_MEMORY_STAT = """anon 2097152
file 1048576
kernel 40960
kernel_stack 16384
sock 0
shmem 0
file_mapped 4096
inactive_anon 524288
active_anon 1572864
inactive_file 786432
active_file 262144
unevictable 8192
slab_reclaimable 1000
pgfault 12345
"""


def test_memory_stat_v1_uses_the_hierarchical_totals() -> None:
    stats = resources.parse(R.MEMORY_STAT, 1, V1_MEMORY_STAT)
    assert isinstance(stats, dict)
    assert stats["inactive_anon"] == 524288  # total_inactive_anon, not the local 4096
    assert stats["anon"] == 2097152  # total_rss
    assert stats["file"] == 1048576  # total_cache
    assert stats["pgfault"] == 1000
    # usage without page cache = inactive_anon + active_anon + unevictable
    assert resources.memory_usage(stats) == 524288 + 1572864 + 8192
    assert resources.memory_usage(stats, with_cache=True) == (
        524288 + 1572864 + 8192 + 786432 + 262144
    )


def test_memory_stat_v1_and_v2_agree() -> None:
    v1 = resources.parse(R.MEMORY_STAT, 1, V1_MEMORY_STAT)
    v2 = resources.parse(R.MEMORY_STAT, 2, V2_MEMORY_STAT)
    assert isinstance(v1, dict)
    assert isinstance(v2, dict)
    for key in ("anon", "file", "inactive_anon", "active_anon", "inactive_file", "unevictable"):
        assert v1[key] == v2[key], key
    assert resources.memory_usage(v1) == resources.memory_usage(v2)


def test_pressure_and_pids() -> None:
    text = (
        "some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    psi = resources.parse(R.CPU_PRESSURE, 2, text)
    assert psi == {
        "some_avg10": 1.5,
        "some_avg60": 0.75,
        "some_avg300": 0.1,
        "some_total": 123456.0,
        "full_avg10": 0.0,
        "full_avg60": 0.0,
        "full_avg300": 0.0,
        "full_total": 0.0,
    }
    assert resources.parse(R.PROCS, 1, "12\n345\n") == (12, 345)
    assert resources.parse(R.PROCS, 2, "") == ()
