"""The cgroup writer: skipping, leveled order, burst <= quota, vanished and rejected writes,
the cache; on FakeHost trees (v1 and v2) and on the real cgroup v1 kernel."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cgroups import detect, paths, resources
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.detect import CgroupInfo
from agent.cgroups.files import CgroupFiles
from agent.cgroups.resources import Resource, Value
from agent.cgroups.writer import CgroupWriter, WriteResult, WriteStatus
from agent.config import CgroupSection, HostPaths
from agent.errors import NotFound, Rejected, Unsupported
from agent.qos.framework import CgroupWrite
from apis.qos import KubeQoS
from tests.fakes.host import FakeHost

R = Resource
S = WriteStatus
PARENT = "kubepods/besteffort"
CHILD = "kubepods/besteffort/pod1"
GRANDCHILD = "kubepods/besteffort/pod1/c1"
GIB = 1 << 30


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingFiles(CgroupFiles):
    """Counts reads and records writes (in order)."""

    def __init__(self, info: CgroupInfo) -> None:
        super().__init__(info)
        self.reads = 0
        self.writes: list[tuple[str, Resource, Value]] = []

    def read(self, cgroup: str, resource: Resource) -> resources.Reading:
        self.reads += 1
        return super().read(cgroup, resource)

    def write(self, cgroup: str, resource: Resource, value: Value) -> None:
        super().write(cgroup, resource, value)
        self.writes.append((cgroup, resource, value))


def _peek(files: CgroupFiles, cgroup: str, resource: Resource) -> Value | None:
    path = files.path(cgroup, resource)
    if not path.is_file():
        return None
    value = resources.parse(resource, files.version, path.read_text())
    assert isinstance(value, int | CpuSet)
    return value


class StrictV1Files(RecordingFiles):
    """A fake v1 kernel: refuses what the real one refuses (EINVAL / EBUSY).

    * a cfs quota above the parent's effective quota, or below a child's;
    * a quota below the cgroup's burst, a burst above its quota (mainline kernels);
    * cpuset cpus outside the parent's, or not covering a child's.
    """

    def _parent(self, cgroup: str) -> str | None:
        return cgroup.rpartition("/")[0] if "/" in cgroup else ("" if cgroup else None)

    def _children(self, cgroup: str, controller: str) -> list[str]:
        return [f"{cgroup}/{name}" for name in self.listdir(cgroup, controller)]

    def _effective_quota(self, cgroup: str | None) -> int:
        while cgroup is not None:
            quota = _peek(self, cgroup, R.CPU_QUOTA)
            if isinstance(quota, int) and quota != -1:
                return quota
            cgroup = self._parent(cgroup)
        return -1

    def write(self, cgroup: str, resource: Resource, value: Value) -> None:
        path = str(self.path(cgroup, resource, write=True))

        def refuse(why: str) -> Rejected:
            return Rejected(path, str(value), why)

        if resource is R.CPU_QUOTA and isinstance(value, int):
            burst = _peek(self, cgroup, R.CPU_BURST)
            if value != -1 and isinstance(burst, int) and burst > value:
                raise refuse("Invalid argument")
            limit = self._effective_quota(self._parent(cgroup))
            if value != -1 and limit != -1 and value > limit:
                raise refuse("Invalid argument")
            mine = value if value != -1 else limit
            for child in self._children(cgroup, "cpu"):
                quota = _peek(self, child, R.CPU_QUOTA)
                if mine != -1 and isinstance(quota, int) and quota != -1 and quota > mine:
                    raise refuse("Invalid argument")
        if resource is R.CPU_BURST and isinstance(value, int):
            quota = _peek(self, cgroup, R.CPU_QUOTA)
            if isinstance(quota, int) and quota != -1 and value > quota:
                raise refuse("Invalid argument")
        if resource is R.CPUSET_CPUS and isinstance(value, CpuSet):
            parent = self._parent(cgroup)
            above = _peek(self, parent, R.CPUSET_CPUS) if parent is not None else None
            if isinstance(above, CpuSet) and not value <= above:
                raise refuse("Invalid argument")
            for child in self._children(cgroup, "cpuset"):
                below = _peek(self, child, R.CPUSET_CPUS)
                if isinstance(below, CpuSet) and not below <= value:
                    raise refuse("Device or resource busy")
        super().write(cgroup, resource, value)


def _put(files: CgroupFiles, cgroup: str, resource: Resource, text: str) -> Path:
    """Create a fake cgroup file (the one read; on v2 cpuset also the written one)."""
    targets = {files.path(cgroup, resource), files.path(cgroup, resource, write=True)}
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return files.path(cgroup, resource, write=True)


def _w(cgroup: str, resource: Resource, value: Value, reason: str = "") -> CgroupWrite:
    return CgroupWrite(cgroup=cgroup, resource=resource, value=value, strategy="t", reason=reason)


def _statuses(results: list[WriteResult]) -> list[tuple[str, Resource, WriteStatus]]:
    return [(r.write.cgroup, r.write.resource, r.status) for r in results]


def _v1_info(tmp_path: Path) -> CgroupInfo:
    host = FakeHost(tmp_path)
    host.use_v1()
    return detect.detect(host.paths, host.cgroup)


def _v2_info(tmp_path: Path) -> CgroupInfo:
    host = FakeHost(tmp_path)
    host.use_v2()
    return detect.detect(host.paths, host.cgroup)


@pytest.fixture
def v1(tmp_path: Path) -> StrictV1Files:
    files = StrictV1Files(_v1_info(tmp_path))
    assert files.version == 1
    return files


@pytest.fixture
def v2(tmp_path: Path) -> RecordingFiles:
    files = RecordingFiles(_v2_info(tmp_path))
    assert files.version == 2
    return files


# --- files ----------------------------------------------------------------------------


def test_v1_files_live_in_their_controller(v1: StrictV1Files) -> None:
    root = v1.info.root
    # FakeHost co-mounts cpu and cpuacct like most distributions
    assert v1.path(CHILD, R.CPU_QUOTA) == root / "cpu,cpuacct" / CHILD / "cpu.cfs_quota_us"
    assert v1.path(CHILD, R.CPUACCT_USAGE) == root / "cpu,cpuacct" / CHILD / "cpuacct.usage"
    assert v1.path(CHILD, R.CPUSET_CPUS) == root / "cpuset" / CHILD / "cpuset.cpus"
    assert v1.path(CHILD, R.MEMORY_LIMIT) == root / "memory" / CHILD / "memory.limit_in_bytes"
    assert v1.path("", R.CPU_SHARES) == root / "cpu,cpuacct" / "cpu.shares"


def test_v2_files_are_in_one_tree(v2: RecordingFiles) -> None:
    root = v2.info.root
    assert v2.path(CHILD, R.CPU_QUOTA) == root / CHILD / "cpu.max"
    assert v2.path(CHILD, R.CPUSET_CPUS) == root / CHILD / "cpuset.cpus.effective"
    assert v2.path(CHILD, R.CPUSET_CPUS, write=True) == root / CHILD / "cpuset.cpus"


def test_files_errors_are_translated(v1: StrictV1Files) -> None:
    with pytest.raises(NotFound, match="vanished"):
        v1.read(CHILD, R.CPU_QUOTA)
    v1.directory(CHILD).mkdir(parents=True)
    with pytest.raises(Unsupported, match=r"cpu\.cfs_burst_us"):
        v1.read(CHILD, R.CPU_BURST)
    path = _put(v1, CHILD, R.CPU_QUOTA, "garbage\n")
    with pytest.raises(Unsupported, match="unexpected content"):
        v1.read(CHILD, R.CPU_QUOTA)
    with pytest.raises(Rejected) as err:
        v1.write(CHILD, R.CPU_QUOTA, 10)
    assert err.value.path == str(path)
    assert err.value.value == "10"
    with pytest.raises(paths.PathError):
        v1.read("../../etc", R.CPU_QUOTA)
    assert v1.exists(CHILD)
    assert not v1.exists(GRANDCHILD)
    assert v1.listdir("kubepods/besteffort") == ["pod1"]
    with pytest.raises(NotFound):
        v1.listdir(GRANDCHILD)


def test_v2_period_keeps_the_quota(v2: RecordingFiles) -> None:
    path = _put(v2, CHILD, R.CPU_PERIOD, "max 100000\n")
    v2.write(CHILD, R.CPU_PERIOD, 50000)
    assert path.read_text() == "max 50000"
    v2.write(CHILD, R.CPU_QUOTA, 20000)
    assert path.read_text() == "20000"  # the quota alone: the kernel keeps the period


# --- skipping unchanged values --------------------------------------------------------


def test_v1_unchanged_values_are_not_written(v1: StrictV1Files) -> None:
    _put(v1, CHILD, R.CPU_QUOTA, "50000\n")
    _put(v1, CHILD, R.CPU_SHARES, "1024\n")
    _put(v1, CHILD, R.CPUSET_CPUS, "0-3\n")
    _put(v1, CHILD, R.MEMORY_LIMIT, "9223372036854771712\n")
    writer = CgroupWriter(v1)
    results = writer.apply(
        [
            _w(CHILD, R.CPU_QUOTA, 50000),
            _w(CHILD, R.CPU_SHARES, 1024),
            _w(CHILD, R.CPUSET_CPUS, CpuSet({0, 1, 2, 3})),
            _w(CHILD, R.MEMORY_LIMIT, -1),
        ]
    )
    assert [r.status for r in results] == [S.UNCHANGED] * 4
    assert v1.writes == []
    assert results[2].current == CpuSet.parse("0-3")
    assert results[3].current == -1


def test_v2_conversions_and_unchanged_values(v2: RecordingFiles) -> None:
    quota = _put(v2, CHILD, R.CPU_QUOTA, "max 100000\n")
    burst = _put(v2, CHILD, R.CPU_BURST, "0\n")
    weight = _put(v2, CHILD, R.CPU_SHARES, f"{resources.shares_to_weight(1024)}\n")
    cpus = _put(v2, CHILD, R.CPUSET_CPUS, "0-3\n")
    memory = _put(v2, CHILD, R.MEMORY_LIMIT, "max\n")
    writer = CgroupWriter(v2)
    same = [
        _w(CHILD, R.CPU_QUOTA, -1),
        _w(CHILD, R.CPU_BURST, 0),
        _w(CHILD, R.CPU_SHARES, 1024),
        _w(CHILD, R.CPUSET_CPUS, CpuSet.parse("0,1,2,3")),
        _w(CHILD, R.MEMORY_LIMIT, -1),
    ]
    assert [r.status for r in writer.apply(same)] == [S.UNCHANGED] * 5
    assert v2.writes == []

    results = writer.apply(
        [
            _w(CHILD, R.CPU_QUOTA, 50000),
            _w(CHILD, R.CPU_SHARES, 2048),
            _w(CHILD, R.CPUSET_CPUS, CpuSet({0, 1})),
            _w(CHILD, R.MEMORY_LIMIT, GIB),
        ]
    )
    assert [r.status for r in results] == [S.WRITTEN] * 4
    assert quota.read_text() == "50000"
    assert weight.read_text() == str(1 + (2048 - 2) * 9999 // 262142)
    assert cpus.read_text() == "0-1"
    assert (cpus.parent / "cpuset.cpus.effective").read_text() == "0-3\n"  # read, not written
    assert memory.read_text() == str(GIB)
    assert burst.read_text() == "0\n"
    assert results[0].path == str(quota)
    # the cache holds what reads back: 2048 shares as the weight the kernel stores
    assert writer.current().get(CHILD, R.CPU_SHARES) == resources.canonical(R.CPU_SHARES, 2, 2048)
    reads = v2.reads
    again = writer.apply(
        [
            _w(CHILD, R.CPU_QUOTA, 50000),
            _w(CHILD, R.CPU_SHARES, 2048),
            _w(CHILD, R.CPUSET_CPUS, CpuSet({0, 1})),
            _w(CHILD, R.MEMORY_LIMIT, GIB),
            _w(CHILD, R.MEMORY_LIMIT, -1),  # the last write wins
        ]
    )
    assert [r.status for r in again] == [S.UNCHANGED] * 3 + [S.WRITTEN]
    assert memory.read_text() == "max"
    assert v2.reads == reads


def test_last_write_to_a_file_wins(v1: StrictV1Files) -> None:
    path = _put(v1, CHILD, R.CPU_SHARES, "1024\n")
    results = CgroupWriter(v1).apply(
        [_w(CHILD, R.CPU_SHARES, 2), _w(CHILD, R.CPU_QUOTA, 1000), _w(CHILD, R.CPU_SHARES, 512)]
    )
    assert [(r.write.resource, r.write.value) for r in results] == [
        (R.CPU_SHARES, 512),
        (R.CPU_QUOTA, 1000),
    ]
    assert path.read_text() == "512"
    assert v1.writes.count((CHILD, R.CPU_SHARES, 2)) == 0


# --- leveled order --------------------------------------------------------------------


def _quota_tree(files: CgroupFiles, parent: int, child: int) -> None:
    _put(files, PARENT, R.CPU_QUOTA, f"{parent}\n")
    _put(files, CHILD, R.CPU_QUOTA, f"{child}\n")


def test_strict_fake_refuses_a_naive_order(v1: StrictV1Files) -> None:
    _quota_tree(v1, 400_000, 300_000)
    with pytest.raises(Rejected):
        v1.write(PARENT, R.CPU_QUOTA, 200_000)  # below the child's 300000


def test_quota_lowered_child_first(v1: StrictV1Files) -> None:
    _quota_tree(v1, 400_000, 300_000)
    results = CgroupWriter(v1).apply(
        [_w(PARENT, R.CPU_QUOTA, 200_000), _w(CHILD, R.CPU_QUOTA, 150_000)]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert v1.writes == [(CHILD, R.CPU_QUOTA, 150_000), (PARENT, R.CPU_QUOTA, 200_000)]


def test_quota_raised_parent_first(v1: StrictV1Files) -> None:
    _quota_tree(v1, 400_000, 300_000)
    results = CgroupWriter(v1).apply(
        [_w(CHILD, R.CPU_QUOTA, 600_000), _w(PARENT, R.CPU_QUOTA, 800_000)]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert v1.writes == [(PARENT, R.CPU_QUOTA, 800_000), (CHILD, R.CPU_QUOTA, 600_000)]


def test_quota_from_and_to_unlimited(v1: StrictV1Files) -> None:
    _quota_tree(v1, -1, -1)
    writer = CgroupWriter(v1)
    results = writer.apply([_w(PARENT, R.CPU_QUOTA, 500_000), _w(CHILD, R.CPU_QUOTA, 200_000)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert v1.writes == [(CHILD, R.CPU_QUOTA, 200_000), (PARENT, R.CPU_QUOTA, 500_000)]
    v1.writes.clear()
    results = writer.apply([_w(CHILD, R.CPU_QUOTA, -1), _w(PARENT, R.CPU_QUOTA, -1)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert v1.writes == [(PARENT, R.CPU_QUOTA, -1), (CHILD, R.CPU_QUOTA, -1)]


def test_three_levels_moving_both_ways(v1: StrictV1Files) -> None:
    # parent 400000 -> 300000 while the child rises 100000 -> 250000 and a grandchild
    # 50000 -> 250000: lowering the parent waits until the children are done.
    _quota_tree(v1, 400_000, 100_000)
    _put(v1, GRANDCHILD, R.CPU_QUOTA, "50000\n")
    results = CgroupWriter(v1).apply(
        [
            _w(PARENT, R.CPU_QUOTA, 300_000),
            _w(GRANDCHILD, R.CPU_QUOTA, 250_000),
            _w(CHILD, R.CPU_QUOTA, 250_000),
        ]
    )
    assert [r.status for r in results] == [S.WRITTEN] * 3
    assert v1.writes[-1] == (PARENT, R.CPU_QUOTA, 300_000)
    assert v1.writes.index((CHILD, R.CPU_QUOTA, 250_000)) < v1.writes.index(
        (GRANDCHILD, R.CPU_QUOTA, 250_000)
    )


def test_cpuset_moved_through_the_union(v1: StrictV1Files) -> None:
    _put(v1, PARENT, R.CPUSET_CPUS, "0-1\n")
    _put(v1, CHILD, R.CPUSET_CPUS, "0\n")
    results = CgroupWriter(v1).apply(
        [_w(CHILD, R.CPUSET_CPUS, CpuSet({2})), _w(PARENT, R.CPUSET_CPUS, CpuSet({2, 3}))]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    # first parent -> child the union of old and new, then child -> parent the new value
    assert v1.writes == [
        (PARENT, R.CPUSET_CPUS, CpuSet({0, 1, 2, 3})),
        (CHILD, R.CPUSET_CPUS, CpuSet({0, 2})),
        (CHILD, R.CPUSET_CPUS, CpuSet({2})),
        (PARENT, R.CPUSET_CPUS, CpuSet({2, 3})),
    ]
    assert _peek(v1, PARENT, R.CPUSET_CPUS) == CpuSet({2, 3})
    assert _peek(v1, CHILD, R.CPUSET_CPUS) == CpuSet({2})
    assert results[0].current == CpuSet({2})


def test_mems_before_cpus_at_each_level(v1: StrictV1Files) -> None:
    for cgroup in (PARENT, CHILD):
        _put(v1, cgroup, R.CPUSET_CPUS, "\n")
        _put(v1, cgroup, R.CPUSET_MEMS, "\n")
    CgroupWriter(v1).apply(
        [
            _w(CHILD, R.CPUSET_CPUS, CpuSet({1})),
            _w(CHILD, R.CPUSET_MEMS, CpuSet({0})),
            _w(PARENT, R.CPUSET_CPUS, CpuSet({0, 1})),
            _w(PARENT, R.CPUSET_MEMS, CpuSet({0})),
        ]
    )
    assert [(c, r) for c, r, _ in v1.writes] == [
        (PARENT, R.CPUSET_MEMS),
        (PARENT, R.CPUSET_CPUS),
        (CHILD, R.CPUSET_MEMS),
        (CHILD, R.CPUSET_CPUS),
    ]


def test_memory_limits_are_leveled(v1: StrictV1Files) -> None:
    _put(v1, PARENT, R.MEMORY_LIMIT, f"{2 * GIB}\n")
    _put(v1, CHILD, R.MEMORY_LIMIT, f"{GIB + GIB // 2}\n")
    writer = CgroupWriter(v1)
    writer.apply([_w(PARENT, R.MEMORY_LIMIT, GIB), _w(CHILD, R.MEMORY_LIMIT, GIB // 2)])
    assert v1.writes == [(CHILD, R.MEMORY_LIMIT, GIB // 2), (PARENT, R.MEMORY_LIMIT, GIB)]
    v1.writes.clear()
    writer.apply([_w(CHILD, R.MEMORY_LIMIT, -1), _w(PARENT, R.MEMORY_LIMIT, -1)])
    assert v1.writes == [(PARENT, R.MEMORY_LIMIT, -1), (CHILD, R.MEMORY_LIMIT, -1)]
    assert v1.path(CHILD, R.MEMORY_LIMIT).read_text() == "-1"


# --- burst <= quota (#2801) -----------------------------------------------------------


def _burst_tree(files: CgroupFiles, quota: int, burst: int) -> None:
    _put(files, CHILD, R.CPU_QUOTA, f"{quota} 100000\n" if files.version == 2 else f"{quota}\n")
    _put(files, CHILD, R.CPU_BURST, f"{burst}\n")


def test_v2_burst_lowered_before_the_quota(v2: RecordingFiles) -> None:
    _burst_tree(v2, 200_000, 150_000)
    results = CgroupWriter(v2).apply(
        [_w(CHILD, R.CPU_QUOTA, 100_000), _w(CHILD, R.CPU_BURST, 50_000)]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert v2.writes == [(CHILD, R.CPU_BURST, 50_000), (CHILD, R.CPU_QUOTA, 100_000)]
    assert v2.path(CHILD, R.CPU_BURST).read_text() == "50000"


def test_v2_quota_going_down_brings_the_burst_down_first(v2: RecordingFiles) -> None:
    _burst_tree(v2, 200_000, 150_000)
    results = CgroupWriter(v2).apply([_w(CHILD, R.CPU_QUOTA, 100_000, "scale down")])
    assert _statuses(results) == [
        (CHILD, R.CPU_QUOTA, S.WRITTEN),
        (CHILD, R.CPU_BURST, S.WRITTEN),
    ]
    assert v2.writes == [(CHILD, R.CPU_BURST, 100_000), (CHILD, R.CPU_QUOTA, 100_000)]
    assert "capped" in results[1].write.reason
    assert "scale down" in results[1].write.reason


def test_v2_quota_going_down_below_a_small_burst_needs_no_burst_write(
    v2: RecordingFiles,
) -> None:
    _burst_tree(v2, 200_000, 50_000)
    results = CgroupWriter(v2).apply([_w(CHILD, R.CPU_QUOTA, 100_000)])
    assert _statuses(results) == [(CHILD, R.CPU_QUOTA, S.WRITTEN)]


def test_burst_capped_at_the_quota(v2: RecordingFiles) -> None:
    _burst_tree(v2, 200_000, 0)
    writer = CgroupWriter(v2)
    results = writer.apply([_w(CHILD, R.CPU_BURST, 10 * 200_000)])
    assert results[0].status is S.WRITTEN
    assert results[0].write.value == 200_000
    assert v2.writes == [(CHILD, R.CPU_BURST, 200_000)]
    # an unlimited quota caps nothing
    writer.apply([_w(CHILD, R.CPU_QUOTA, -1), _w(CHILD, R.CPU_BURST, 2_000_000)])
    assert v2.writes[-1] == (CHILD, R.CPU_BURST, 2_000_000)


def test_quota_raised_before_the_burst(v2: RecordingFiles) -> None:
    _burst_tree(v2, 200_000, 150_000)
    results = CgroupWriter(v2).apply(
        [_w(CHILD, R.CPU_BURST, 350_000), _w(CHILD, R.CPU_QUOTA, 400_000)]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert v2.writes == [(CHILD, R.CPU_QUOTA, 400_000), (CHILD, R.CPU_BURST, 350_000)]


def test_burst_rules_on_a_strict_v1_kernel(v1: StrictV1Files) -> None:
    _burst_tree(v1, 200_000, 150_000)
    results = CgroupWriter(v1).apply([_w(CHILD, R.CPU_QUOTA, 100_000)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    # without the cap the kernel refuses the quota
    _burst_tree(v1, 200_000, 150_000)
    results = CgroupWriter(v1, cap_burst=False).apply([_w(CHILD, R.CPU_QUOTA, 100_000)])
    assert _statuses(results) == [(CHILD, R.CPU_QUOTA, S.REJECTED)]


# --- vanished, rejected, unsupported --------------------------------------------------


def test_vanished_cgroup_is_ignored(v1: StrictV1Files) -> None:
    shares = _put(v1, CHILD, R.CPU_SHARES, "1024\n")
    results = CgroupWriter(v1).apply(
        [_w("kubepods/besteffort/gone", R.CPU_SHARES, 2), _w(CHILD, R.CPU_SHARES, 2)]
    )
    assert [r.status for r in results] == [S.VANISHED, S.WRITTEN]
    assert "kubepods/besteffort/gone" in results[0].error
    assert results[0].current is None
    assert shares.read_text() == "2"


def test_removed_between_plan_and_apply(v1: StrictV1Files) -> None:
    _put(v1, CHILD, R.CPU_SHARES, "1024\n")
    writer = CgroupWriter(v1)
    (planned,) = writer.plan([_w(CHILD, R.CPU_SHARES, 2)])
    assert planned.changed
    assert planned.current == 1024
    shutil.rmtree(v1.directory(CHILD))
    (result,) = writer.apply([_w(CHILD, R.CPU_SHARES, 2)])
    assert result.status is S.VANISHED
    # and the next pass finds it gone too (nothing stale in the cache)
    assert writer.current().get(CHILD, R.CPU_SHARES) is None


def test_rejected_value_reported_with_path_and_value(
    v1: StrictV1Files, caplog: pytest.LogCaptureFixture
) -> None:
    _quota_tree(v1, 400_000, 300_000)
    shares = _put(v1, CHILD, R.CPU_SHARES, "1024\n")
    writer = CgroupWriter(v1)
    batch = [
        _w(PARENT, R.CPU_QUOTA, 200_000),  # below the child's 300000 (not in the batch)
        _w(CHILD, R.CPU_SHARES, 1),  # outside [2, 262144]: refused before the kernel
        _w(CHILD, R.CPU_IDLE, 1),  # and the rest of the batch goes on
    ]
    _put(v1, CHILD, R.CPU_IDLE, "0\n")
    with caplog.at_level(logging.WARNING, logger="agent.cgroups.writer"):
        results = writer.apply(batch)
        again = writer.apply(batch)
    assert [r.status for r in results] == [S.REJECTED, S.REJECTED, S.WRITTEN]
    quota_path = str(v1.path(PARENT, R.CPU_QUOTA))
    assert quota_path in results[0].error
    assert "'200000'" in results[0].error
    assert "Invalid argument" in results[0].error
    assert results[0].current == 400_000
    assert str(shares) in results[1].error
    assert "'1'" in results[1].error
    assert shares.read_text() == "1024\n"
    assert [r.status for r in again] == [S.REJECTED, S.REJECTED, S.UNCHANGED]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # once per refused value, not once per pass


def test_bad_cgroup_path_is_rejected_not_raised(v1: StrictV1Files) -> None:
    results = CgroupWriter(v1).apply([_w("../../etc", R.CPU_SHARES, 2)])
    assert results[0].status is S.REJECTED
    assert "../../etc" in results[0].error


def test_missing_file_is_unsupported_and_remembered(v1: StrictV1Files) -> None:
    _put(v1, CHILD, R.CPU_QUOTA, "-1\n")
    writer = CgroupWriter(v1)
    (result,) = writer.apply([_w(CHILD, R.CPU_BURST, 1000)])
    assert result.status is S.UNSUPPORTED
    assert "cpu.cfs_burst_us" in result.error
    reads = v1.reads
    (result,) = writer.apply([_w(CHILD, R.CPU_BURST, 1000)])
    assert result.status is S.UNSUPPORTED
    assert v1.reads == reads
    assert writer.current().get(CHILD, R.CPU_BURST) is None


# --- the cache ------------------------------------------------------------------------


def _pods(files: CgroupFiles, count: int) -> list[CgroupWrite]:
    writes = []
    for n in range(count):
        pod = f"kubepods/besteffort/pod{n}"
        _put(files, pod, R.CPU_QUOTA, "-1\n")
        _put(files, pod, R.CPU_SHARES, "1024\n")
        _put(files, pod, R.CPUSET_CPUS, "0-3\n")
        writes += [
            _w(pod, R.CPU_QUOTA, 50_000 + n * 1000),
            _w(pod, R.CPU_SHARES, 2),
            _w(pod, R.CPUSET_CPUS, CpuSet({n % 4})),
        ]
    return writes


def test_steady_state_reads_nothing(v1: StrictV1Files) -> None:
    _put(v1, "kubepods/besteffort", R.CPUSET_CPUS, "0-3\n")
    clock = Clock()
    writer = CgroupWriter(v1, clock=clock, refresh_seconds=60)
    writes = _pods(v1, 50)
    first = writer.apply(writes)
    assert {r.status for r in first} == {S.WRITTEN}
    reads, written = v1.reads, len(v1.writes)
    assert reads >= len(writes)
    assert written == len(writes)
    for _ in range(3):
        clock.now += 1
        results = writer.apply(writes)
        assert {r.status for r in results} == {S.UNCHANGED}
    view = writer.current()
    assert view.get("kubepods/besteffort/pod7", R.CPU_QUOTA) == 57_000
    assert v1.reads == reads
    assert len(v1.writes) == written


def test_refresh_rereads_and_repairs_drift(v1: StrictV1Files) -> None:
    clock = Clock()
    writer = CgroupWriter(v1, clock=clock, refresh_seconds=60)
    writes = _pods(v1, 3)
    writer.apply(writes)
    reads, written = v1.reads, len(v1.writes)
    # somebody else changes a value: unnoticed while the cache is fresh...
    drifted = v1.path("kubepods/besteffort/pod1", R.CPU_SHARES)
    drifted.write_text("4096\n")
    clock.now += 30
    assert {r.status for r in writer.apply(writes)} == {S.UNCHANGED}
    assert v1.reads == reads
    # ...and re-read, compared and repaired after refresh_seconds
    clock.now += 31
    results = writer.apply(writes)
    assert v1.reads == reads + len(writes)
    assert [r.status for r in results].count(S.WRITTEN) == 1
    assert drifted.read_text() == "2"
    assert len(v1.writes) == written + 1


def test_a_steady_batch_follows_what_changed_in_between(v1: StrictV1Files) -> None:
    # The strategies hand in the very same writes pass after pass; the writer still notices
    # another batch's write and a forgotten (invalidated) value.
    clock = Clock()
    writer = CgroupWriter(v1, clock=clock, refresh_seconds=60)
    writes = _pods(v1, 3)
    writer.apply(writes)
    for _ in range(2):
        clock.now += 1
        assert {r.status for r in writer.apply(writes)} == {S.UNCHANGED}
    target = "kubepods/besteffort/pod1"
    assert _statuses(writer.apply([_w(target, R.CPU_SHARES, 4096)])) == [
        (target, R.CPU_SHARES, S.WRITTEN)
    ]
    results = writer.apply(writes)
    assert [r.status for r in results].count(S.WRITTEN) == 1
    assert v1.path(target, R.CPU_SHARES).read_text() == "2"

    v1.path(target, R.CPU_SHARES).write_text("4096\n")
    clock.now += 1
    assert {r.status for r in writer.apply(writes)} == {S.UNCHANGED}
    writer.invalidate(target)
    assert [r.status for r in writer.apply(writes)].count(S.WRITTEN) == 1
    assert v1.path(target, R.CPU_SHARES).read_text() == "2"


def test_a_steady_burst_is_capped_at_a_quota_lowered_in_between(v2: RecordingFiles) -> None:
    _burst_tree(v2, 200_000, 0)
    clock = Clock()
    writer = CgroupWriter(v2, clock=clock)
    batch = [_w(CHILD, R.CPU_BURST, 150_000)]
    assert [r.status for r in writer.apply(batch)] == [S.WRITTEN]
    assert [r.status for r in writer.apply(batch)] == [S.UNCHANGED]
    writer.apply([_w(CHILD, R.CPU_QUOTA, 100_000)])
    assert v2.path(CHILD, R.CPU_BURST).read_text() == "100000", "lowered with the quota"
    results = writer.apply(batch)
    assert [(r.status, r.write.value) for r in results] == [(S.UNCHANGED, 100_000)]
    writer.apply([_w(CHILD, R.CPU_QUOTA, 400_000)])
    results = writer.apply(batch)
    assert [(r.status, r.write.value) for r in results] == [(S.WRITTEN, 150_000)]


def test_view_reads_through_and_sees_writes(v1: StrictV1Files) -> None:
    _put(v1, CHILD, R.CPU_QUOTA, "-1\n")
    _put(v1, CHILD, R.MEMORY_USAGE, "4096\n")
    writer = CgroupWriter(v1, clock=Clock())
    view = writer.current()
    assert view.get(CHILD, R.CPU_QUOTA) == -1
    assert view.get("kubepods/nope", R.CPU_QUOTA) is None
    assert view.get(CHILD, R.CPU_BURST) is None  # no such file on this kernel
    reads = v1.reads
    writer.apply([_w(CHILD, R.CPU_QUOTA, 70_000)])
    assert view.get(CHILD, R.CPU_QUOTA) == 70_000
    assert v1.reads == reads
    # counters are read fresh every time
    assert view.get(CHILD, R.MEMORY_USAGE) == 4096
    assert view.get(CHILD, R.MEMORY_USAGE) == 4096
    assert v1.reads == reads + 2


def test_invalidate_forgets_a_subtree(v1: StrictV1Files) -> None:
    _put(v1, CHILD, R.CPU_QUOTA, "-1\n")
    _put(v1, PARENT, R.CPU_QUOTA, "-1\n")
    writer = CgroupWriter(v1, clock=Clock())
    view = writer.current()
    view.get(CHILD, R.CPU_QUOTA)
    view.get(PARENT, R.CPU_QUOTA)
    reads = v1.reads
    writer.invalidate(CHILD)
    view.get(CHILD, R.CPU_QUOTA)
    view.get(PARENT, R.CPU_QUOTA)
    assert v1.reads == reads + 1
    writer.invalidate()
    view.get(PARENT, R.CPU_QUOTA)
    assert v1.reads == reads + 2


def test_plan_writes_nothing(v2: RecordingFiles) -> None:
    quota = _put(v2, CHILD, R.CPU_QUOTA, "max 100000\n")
    _put(v2, CHILD, R.CPU_BURST, "500000\n")
    _put(v2, CHILD, R.CPU_SHARES, "39\n")
    writer = CgroupWriter(v2)
    planned = writer.plan(
        [
            _w(CHILD, R.CPU_QUOTA, 200_000),
            _w(CHILD, R.CPU_SHARES, 1024),
            _w("kubepods/gone", R.CPU_SHARES, 2),
            _w(CHILD, R.CPU_SHARES, 0),
        ]
    )
    assert v2.writes == []
    assert quota.read_text() == "max 100000\n"
    by_key = {(p.write.cgroup, p.write.resource): p for p in planned}
    # the last write to the shares wins; the quota leaves "max", so the burst comes down too
    assert len(planned) == 4
    q = by_key[CHILD, R.CPU_QUOTA]
    assert (q.path, q.current, q.changed, q.note) == (str(quota), -1, True, "")
    assert by_key["kubepods/gone", R.CPU_SHARES].note == "cgroup absent"
    assert by_key[CHILD, R.CPU_SHARES].note.startswith("invalid")
    burst = by_key[CHILD, R.CPU_BURST]
    assert (burst.write.value, burst.current, burst.changed) == (200_000, 500_000, True)


def test_plan_shows_the_burst_cap(v2: RecordingFiles) -> None:
    _burst_tree(v2, 400_000, 300_000)
    planned = CgroupWriter(v2).plan([_w(CHILD, R.CPU_QUOTA, 100_000)])
    assert [(p.write.resource, p.write.value, p.changed) for p in planned] == [
        (R.CPU_QUOTA, 100_000, True),
        (R.CPU_BURST, 100_000, True),
    ]
    assert v2.writes == []


# --- the real cgroup v1 kernel --------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RealTree:
    info: CgroupInfo
    top: str
    files: RecordingFiles

    def mkdir(self, controller: str, cgroup: str) -> Path:
        path = self.files.directory(cgroup, controller)
        path.mkdir(parents=True, exist_ok=True)
        return path


def _evacuate_and_remove(top: Path, hierarchy: Path) -> None:
    """Remove a cgroup sub-tree, deepest first, moving any process out to the root."""
    if not top.is_dir():
        return
    dirs = sorted(
        (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    )
    for directory in [*dirs, top]:
        with contextlib.suppress(OSError):
            for pid in (directory / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (hierarchy / "cgroup.procs").write_text(pid)
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()


@pytest.fixture
def real_v1() -> Iterator[RealTree]:
    if os.geteuid() != 0:
        pytest.skip(reason="needs root to create cgroups")
    try:
        found = detect.detect(HostPaths(), CgroupSection())
    except Unsupported as err:
        pytest.skip(reason=f"no cgroups on this host: {err}")
    if found.resource_version != 1:
        pytest.skip(reason="the cgroup v1 controllers are not mounted (cgroup v2 host)")
    for controller in ("cpu", "cpuset"):
        hierarchy = found.hierarchy(controller)
        if controller not in found.subsystems or not os.access(hierarchy, os.W_OK):
            pytest.skip(reason=f"cgroup v1 {controller} controller not mounted writable")
    top = f"koordpy-test-{secrets.token_hex(4)}"
    info = dataclasses.replace(
        found, driver=detect.CgroupDriver.CGROUPFS, kubepods_parent=f"{top}/kubepods"
    )
    tree = RealTree(info, top, RecordingFiles(info))
    try:
        for controller in ("cpu", "cpuset"):
            tree.mkdir(controller, top)
        yield tree
    finally:
        for controller in ("cpu", "cpuset"):
            _evacuate_and_remove(info.hierarchy(controller) / top, info.hierarchy(controller))


@pytest.mark.root
def test_real_kernel_quota_order(real_v1: RealTree) -> None:
    info, files = real_v1.info, real_v1.files
    parent = paths.qos_dir(info, KubeQoS.BEST_EFFORT)
    child = paths.pod_dir(info, KubeQoS.BEST_EFFORT, "0a1b2c3d-0000-4000-8000-00000000beef")
    real_v1.mkdir("cpu", child)
    writer = CgroupWriter(files)
    # from unlimited, given child first
    results = writer.apply([_w(child, R.CPU_QUOTA, 40_000), _w(parent, R.CPU_QUOTA, 50_000)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]

    # the kernel refuses a parent quota below the child's: reported, not raised
    (lone,) = writer.apply([_w(parent, R.CPU_QUOTA, 30_000)])
    assert lone.status is S.REJECTED
    assert str(files.path(parent, R.CPU_QUOTA)) in lone.error
    assert "'30000'" in lone.error
    assert lone.current == 50_000
    assert files.read(parent, R.CPU_QUOTA) == 50_000

    # lowering both in one batch succeeds: the child goes first
    results = writer.apply([_w(parent, R.CPU_QUOTA, 20_000), _w(child, R.CPU_QUOTA, 10_000)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert (files.read(parent, R.CPU_QUOTA), files.read(child, R.CPU_QUOTA)) == (20_000, 10_000)

    # raising both succeeds: the parent goes first
    results = writer.apply([_w(child, R.CPU_QUOTA, 90_000), _w(parent, R.CPU_QUOTA, 100_000)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert (files.read(parent, R.CPU_QUOTA), files.read(child, R.CPU_QUOTA)) == (100_000, 90_000)


@pytest.mark.root
def test_real_kernel_burst_never_above_quota(real_v1: RealTree) -> None:
    info, files = real_v1.info, real_v1.files
    pod = paths.pod_dir(info, KubeQoS.BURSTABLE, "burst-test-1")
    real_v1.mkdir("cpu", pod)
    if not files.path(pod, R.CPU_BURST).is_file():
        pytest.skip(reason="this kernel has no cpu.cfs_burst_us")
    writer = CgroupWriter(files)
    results = writer.apply([_w(pod, R.CPU_QUOTA, 50_000), _w(pod, R.CPU_BURST, 40_000)])
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    # a lower quota alone: the burst comes down first, capped at the new quota
    results = writer.apply([_w(pod, R.CPU_QUOTA, 20_000)])
    assert _statuses(results) == [(pod, R.CPU_QUOTA, S.WRITTEN), (pod, R.CPU_BURST, S.WRITTEN)]
    assert (files.read(pod, R.CPU_QUOTA), files.read(pod, R.CPU_BURST)) == (20_000, 20_000)
    # without the cap a mainline kernel refuses a burst above the quota
    (refused,) = CgroupWriter(files, cap_burst=False).apply([_w(pod, R.CPU_BURST, 30_000)])
    if refused.status is S.WRITTEN:
        pytest.skip(reason="this kernel allows a burst above the quota")
    assert refused.status is S.REJECTED
    assert "'30000'" in refused.error


@pytest.mark.root
def test_real_kernel_cpuset_widen_and_narrow(real_v1: RealTree) -> None:
    info, files = real_v1.info, real_v1.files
    root_cpus = files.read("", R.CPUSET_CPUS)
    root_mems = files.read("", R.CPUSET_MEMS)
    assert isinstance(root_cpus, CpuSet)
    assert isinstance(root_mems, CpuSet)
    if len(root_cpus) < 2:
        pytest.skip(reason="needs at least 2 CPUs")
    a, b = sorted(root_cpus)[:2]
    top = real_v1.top
    kubepods = paths.qos_dir(info, KubeQoS.GUARANTEED)
    pod = paths.pod_dir(info, KubeQoS.GUARANTEED, "cpuset-test-1")
    real_v1.mkdir("cpuset", pod)
    # new cpusets start empty; one batch fills the chain, given child first
    assert files.read(pod, R.CPUSET_CPUS) == CpuSet()
    writer = CgroupWriter(files)
    setup = [
        *(_w(c, R.CPUSET_CPUS, CpuSet({a})) for c in (pod,)),
        *(_w(c, R.CPUSET_CPUS, CpuSet({a, b})) for c in (kubepods, top)),
        *(_w(c, R.CPUSET_MEMS, root_mems) for c in (pod, kubepods, top)),
    ]
    assert {r.status for r in writer.apply(setup)} == {S.WRITTEN}

    # the kernel refuses a parent that no longer covers its child
    (lone,) = writer.apply([_w(kubepods, R.CPUSET_CPUS, CpuSet({b}))])
    assert lone.status is S.REJECTED
    assert str(files.path(kubepods, R.CPUSET_CPUS)) in lone.error

    # narrowing parent and child to another cpu in one batch
    results = writer.apply(
        [_w(kubepods, R.CPUSET_CPUS, CpuSet({b})), _w(pod, R.CPUSET_CPUS, CpuSet({b}))]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert files.read(kubepods, R.CPUSET_CPUS) == CpuSet({b})
    assert files.read(pod, R.CPUSET_CPUS) == CpuSet({b})

    # widening both, child first in the batch
    results = writer.apply(
        [_w(pod, R.CPUSET_CPUS, CpuSet({a, b})), _w(kubepods, R.CPUSET_CPUS, CpuSet({a, b}))]
    )
    assert [r.status for r in results] == [S.WRITTEN, S.WRITTEN]
    assert files.read(pod, R.CPUSET_CPUS) == CpuSet({a, b})


@pytest.mark.root
def test_real_kernel_cgroup_removed_between_plan_and_apply(real_v1: RealTree) -> None:
    info, files = real_v1.info, real_v1.files
    pod = paths.pod_dir(info, KubeQoS.BEST_EFFORT, "vanishing-1")
    directory = real_v1.mkdir("cpu", pod)
    writer = CgroupWriter(files)
    writes = [_w(pod, R.CPU_QUOTA, 50_000), _w(pod, R.CPU_SHARES, 2)]
    planned = writer.plan(writes)
    assert [(p.current, p.changed) for p in planned] == [(-1, True), (1024, True)]
    directory.rmdir()
    results = writer.apply(writes)
    assert [r.status for r in results] == [S.VANISHED, S.VANISHED]
    assert all(pod in r.error for r in results)
