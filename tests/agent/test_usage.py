"""The usage sampler: node and cgroup counters, windows, pruning, v1 and v2 files."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.cgroups import detect
from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from agent.config import CgroupSection, HostPaths
from agent.metrics import usage
from agent.qos.framework import ContainerState, PodState, Usage
from apis.core import Pod
from apis.qos import KubeQoS, PriorityClass, QoSClass
from apis.resources import ResourceList
from apis.slo import CgroupPath, HostApplicationSpec
from tests.fakes.host import FakeHost

HZ = 100  # jiffies per second given to the sampler
GIB = 2**30


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def _proc_stat(
    user: int, nice: int, system: int, idle: int, iowait: int, irq: int, soft: int
) -> str:
    steal = 7  # never counted
    return (
        f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {soft} {steal} 0 0\n"
        f"cpu0 {user} {nice} {system} {idle} {iowait} {irq} {soft} {steal} 0 0\n"
        "intr 12345\nctxt 678\n"
    )


def _meminfo(total_kib: int, available_kib: int) -> str:
    return (
        f"MemTotal:       {total_kib} kB\nMemFree:          1000 kB\n"
        f"MemAvailable:   {available_kib} kB\nBuffers:           100 kB\n"
    )


def _state(uid: str, cgroup: str, containers: tuple[ContainerState, ...] = ()) -> PodState:
    return PodState(
        pod=Pod(),
        uid=uid,
        kube_qos=KubeQoS.BURSTABLE,
        qos=QoSClass.LS,
        priority_class=PriorityClass.PROD,
        priority=9500,
        cgroup=cgroup,
        containers=containers,
    )


def _container(cgroup: str | None, *, running: bool = True) -> ContainerState:
    return ContainerState(
        name="app",
        container_id="containerd://c1",
        cgroup=cgroup,
        requests=ResourceList(),
        limits=ResourceList(),
        running=running,
    )


class V1Tree:
    """A FakeHost with v1 cgroups (cpu and cpuacct co-mounted) and /proc files."""

    def __init__(self, tmp_path: Path) -> None:
        self.host = FakeHost(tmp_path)
        self.host.use_v1()
        self.info = detect.detect(self.host.paths, self.host.cgroup)

    def cpuacct(self, cgroup: str, ns: int) -> None:
        self.host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpuacct.usage", f"{ns}\n")

    def cpu_stat(self, cgroup: str, periods: int, throttled: int) -> None:
        text = f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time 99\n"
        self.host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.stat", text)

    def memory_stat(self, cgroup: str, inactive: int, active: int, unevictable: int) -> None:
        text = (
            "cache 999\nrss 1\ninactive_anon 5\nactive_anon 5\nunevictable 5\n"
            f"total_cache 12345678\ntotal_rss 1\ntotal_inactive_anon {inactive}\n"
            f"total_active_anon {active}\ntotal_inactive_file 777\n"
            f"total_unevictable {unevictable}\n"
        )
        self.host.write_cgroup(f"memory/{cgroup}", "memory.stat", text)


@pytest.fixture
def v1(tmp_path: Path) -> V1Tree:
    return V1Tree(tmp_path)


POD_DIR = "kubepods/burstable/poduid-1"
CONTAINER_DIR = f"{POD_DIR}/c1"
BE_DIR = "kubepods/besteffort"


def test_v1_sampler_end_to_end(v1: V1Tree) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    checked: Usage = sampler  # the strategies' protocol (mypy checks the loop's use)
    del checked
    pods = [_state("uid-1", POD_DIR, (_container(CONTAINER_DIR),))]

    v1.host.write("/proc/stat", _proc_stat(1000, 10, 500, 9000, 50, 5, 5))
    v1.host.write("/proc/meminfo", _meminfo(16_384_000, 4_096_000))
    v1.cpuacct(POD_DIR, 5_000_000_000)
    v1.cpuacct(BE_DIR, 1_000_000_000)
    v1.cpu_stat(CONTAINER_DIR, periods=100, throttled=10)
    v1.cpu_stat(BE_DIR, periods=0, throttled=0)
    v1.memory_stat(POD_DIR, inactive=100 * 2**20, active=300 * 2**20, unevictable=4096)
    sampler.sample(pods, [BE_DIR])
    # one sample is no rate yet
    assert sampler.node_cpu(10) is None
    assert sampler.pod_cpu("uid-1", 10) is None
    assert sampler.samples(10) == 0
    # memory is there at once: MemTotal - MemAvailable, and anon + unevictable of the pod
    assert sampler.node_memory() == (16_384_000 - 4_096_000) * 1024
    assert sampler.pod_memory("uid-1") == 100 * 2**20 + 300 * 2**20 + 4096

    clock.now = 1.0
    v1.host.write("/proc/stat", _proc_stat(1100, 10, 550, 9100, 60, 7, 8))
    v1.cpuacct(POD_DIR, 5_750_000_000)
    v1.cpuacct(BE_DIR, 1_200_000_000)
    v1.cpu_stat(CONTAINER_DIR, periods=150, throttled=25)
    sampler.sample(pods, [BE_DIR])
    # used jiffies = user + nice + system + irq + softirq: (100 + 0 + 50 + 2 + 3) over 1 s
    assert sampler.node_cpu(10) == pytest.approx((100 + 0 + 50 + 2 + 3) * 1000 / HZ / 1.0)
    assert sampler.pod_cpu("uid-1", 10) == pytest.approx(750_000_000 / 1e6 / 1.0)
    assert sampler.cgroup_cpu(POD_DIR, 10) == sampler.pod_cpu("uid-1", 10)
    assert sampler.cgroup_cpu(BE_DIR, 10) == pytest.approx(200_000_000 / 1e6 / 1.0)
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) == pytest.approx((25 - 10) / (150 - 100))
    assert sampler.throttled_ratio(BE_DIR, 10) == 0.0, "no quota, no periods: not throttled"
    assert sampler.samples(10) == 1

    clock.now = 3.0  # a slower step: 2 s
    v1.host.write("/proc/stat", _proc_stat(1300, 10, 650, 9200, 60, 7, 8))
    v1.cpuacct(POD_DIR, 6_750_000_000)
    v1.cpu_stat(CONTAINER_DIR, periods=250, throttled=25)
    sampler.sample(pods, [BE_DIR])
    # trailing 1 s: only the last step (samples taken after now - window)
    assert sampler.pod_cpu("uid-1", 1) == pytest.approx(1_000_000_000 / 1e6 / 2.0)
    assert sampler.node_cpu(1) == pytest.approx((200 + 100) * 1000 / HZ / 2.0)
    # trailing 5 s: both steps, weighted by their durations
    assert sampler.pod_cpu("uid-1", 5) == pytest.approx(
        (750_000_000 + 1_000_000_000) / 1e6 / (1.0 + 2.0)
    )
    assert sampler.throttled_ratio(CONTAINER_DIR, 5) == pytest.approx(15 / (50 + 100))
    assert sampler.throttled_ratio(CONTAINER_DIR, 1) == 0.0
    assert sampler.samples(5) == 2
    assert sampler.samples(1) == 1
    assert sampler.interval == 1.0
    # the BE dir's counter did not move: 0 over the last step
    assert sampler.cgroup_cpu(BE_DIR, 1) == 0.0

    # nothing sampled for a while: windows empty, latest memory stale
    clock.now = 30.0
    assert sampler.node_cpu(5) is None
    assert sampler.samples(5) == 0
    assert sampler.node_memory() is None
    assert sampler.pod_memory("uid-1") is None


def test_gone_pods_and_cgroups_are_pruned(v1: V1Tree) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    other = "kubepods/besteffort/poduid-2"
    v1.host.write("/proc/stat", _proc_stat(0, 0, 0, 0, 0, 0, 0))
    v1.host.write("/proc/meminfo", _meminfo(1000, 500))
    both = [_state("uid-1", POD_DIR), _state("uid-2", other)]
    for step, ns in enumerate((0, 1_000_000)):
        clock.now = float(step)
        v1.cpuacct(POD_DIR, ns)
        v1.cpuacct(other, ns)
        v1.memory_stat(other, 1, 2, 3)
        sampler.sample(both)
    assert sampler.pod_cpu("uid-2", 10) == pytest.approx(1.0)
    assert sampler.pod_memory("uid-2") == 6

    clock.now = 2.0
    sampler.sample(both[:1])
    assert sampler.pod_cpu("uid-2", 10) is None
    assert sampler.pod_memory("uid-2") is None
    assert sampler.cgroup_cpu(other, 10) is None, "history of a gone pod is dropped"
    assert sampler.pod_cpu("uid-1", 10) is not None

    # it comes back: history starts over (one sample is no rate)
    clock.now = 3.0
    v1.cpuacct(other, 9_000_000)
    sampler.sample(both)
    assert sampler.cgroup_cpu(other, 10) is None


def test_the_same_pods_sampled_pass_after_pass_read_what_each_pass_asks(v1: V1Tree) -> None:
    # Callers hand in the same (immutable) pod states every pass; what a pass reads still
    # follows its own arguments.
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    pods = [_state("uid-1", POD_DIR, (_container(CONTAINER_DIR),))]
    v1.cpuacct(POD_DIR, 0)
    v1.memory_stat(POD_DIR, 1, 2, 3)
    v1.cpu_stat(CONTAINER_DIR, 0, 0)
    sampler.sample(pods, memory=False, containers=False)
    assert sampler.memory(POD_DIR) is None
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) is None

    clock.now = 1.0
    sampler.sample(pods, memory=True, containers=False)
    assert sampler.pod_memory("uid-1") == 6
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) is None

    for step in (2, 3):
        clock.now = float(step)
        v1.cpu_stat(CONTAINER_DIR, step * 10, step * 5)
        sampler.sample(pods, containers=lambda pod: pod.uid == "uid-1")
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) == pytest.approx(5 / 10)

    clock.now = 4.0
    sampler.sample(pods, memory=False, containers=False)
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) is None, "no longer asked for: forgotten"
    assert sampler.memory(POD_DIR) is None


def test_history_is_bounded_and_counter_resets_start_over(v1: V1Tree) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths,
        usage.HierarchyReader(v1.info),
        clock=clock,
        clock_ticks=HZ,
        history_seconds=3,
    )
    pods = [_state("uid-1", POD_DIR)]
    for step in range(10):
        clock.now = float(step)
        v1.host.write("/proc/stat", _proc_stat(step * 10, 0, 0, 0, 0, 0, 0))
        v1.cpuacct(POD_DIR, step * 1_000_000)
        sampler.sample(pods)
    # a 100 s window still only holds what the 3 s history keeps: the steps ending at 7, 8, 9
    assert sampler.samples(100) == 3
    assert sampler.node_cpu(100) == pytest.approx(10 * 1000 / HZ / 1.0)

    clock.now = 10.0
    v1.cpuacct(POD_DIR, 5)  # recreated: the counter went backwards
    sampler.sample(pods)
    assert sampler.pod_cpu("uid-1", 0.5) is None, "no rate across a reset"
    clock.now = 11.0
    v1.cpuacct(POD_DIR, 5 + 2_000_000)
    sampler.sample(pods)
    assert sampler.pod_cpu("uid-1", 0.5) == pytest.approx(2_000_000 / 1e6 / 1.0)


def test_missing_files_are_no_data(v1: V1Tree) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    pods = [_state("uid-1", POD_DIR, (_container(CONTAINER_DIR), _container(None)))]
    for step in range(2):
        clock.now = float(step)
        sampler.sample(pods, ["kubepods/absent"])
    assert sampler.node_cpu(10) is None
    assert sampler.node_memory() is None
    assert sampler.pod_cpu("uid-1", 10) is None
    assert sampler.pod_memory("uid-1") is None
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) is None
    assert sampler.pod_cpu("never-listed", 10) is None
    assert sampler.host_app_cpu("nginx", 10) is None


def test_reader_refuses_paths_outside_the_hierarchy(v1: V1Tree) -> None:
    reader = usage.HierarchyReader(v1.info)
    v1.host.write_cgroup("cpu,cpuacct", "cpu.stat", "nr_periods 1\n")
    assert reader.read_text("", "cpu", "cpu.stat") == "nr_periods 1\n"
    assert reader.version == 1
    for bad in ("../cpuset", "/etc", "a/../../b"):
        assert reader.read_text(bad, "cpu", "cpu.stat") is None


def test_v2_files(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.use_v2()
    info = detect.detect(host.paths, host.cgroup)
    clock = Clock()
    sampler = usage.UsageSampler(host.paths, usage.HierarchyReader(info), clock=clock)
    pods = [_state("uid-1", POD_DIR, (_container(CONTAINER_DIR),))]

    def write(usage_usec: int, periods: int, throttled: int) -> None:
        stat = f"usage_usec {usage_usec}\nuser_usec 1\nsystem_usec 1\n"
        host.write_cgroup(POD_DIR, "cpu.stat", stat)
        host.write_cgroup(
            CONTAINER_DIR,
            "cpu.stat",
            f"usage_usec 1\nnr_periods {periods}\nnr_throttled {throttled}\n",
        )
        host.write_cgroup(
            POD_DIR,
            "memory.stat",
            "anon 1\nfile 99999\ninactive_anon 1000\nactive_anon 2000\nunevictable 30\n",
        )

    write(1_000_000, 10, 0)
    sampler.sample(pods)
    clock.now = 2.0
    write(1_600_000, 30, 5)
    sampler.sample(pods)
    assert sampler.pod_cpu("uid-1", 10) == pytest.approx(600_000 / 1e3 / 2.0)
    assert sampler.throttled_ratio(CONTAINER_DIR, 10) == pytest.approx(5 / 20)
    assert sampler.pod_memory("uid-1") == 1000 + 2000 + 30


def _app(name: str, base: str, parent: str, relative: str) -> HostApplicationSpec:
    return HostApplicationSpec(
        name=name,
        qos="LS",
        cgroup_path=CgroupPath(base=base, parent_dir=parent, relative_path=relative),
    )


@pytest.mark.parametrize(
    ("driver", "base", "expected"),
    [
        (CgroupDriver.CGROUPFS, "CgroupRoot", "host-latency-sensitive/nginx"),
        (CgroupDriver.CGROUPFS, "", "host-latency-sensitive/nginx"),
        (CgroupDriver.CGROUPFS, "Kubepods", "kubepods/host-latency-sensitive/nginx"),
        (
            CgroupDriver.CGROUPFS,
            "KubepodsBesteffort",
            "kubepods/besteffort/host-latency-sensitive/nginx",
        ),
        (
            CgroupDriver.SYSTEMD,
            "KubepodsBurstable",
            "kubepods.slice/kubepods-burstable.slice/host-latency-sensitive/nginx",
        ),
    ],
)
def test_host_app_cgroup(driver: CgroupDriver, base: str, expected: str) -> None:
    info = CgroupInfo(version=CgroupVersion.V1, driver=driver, root=Path("/sys/fs/cgroup"))
    app = _app("nginx", base, "host-latency-sensitive/", "/nginx/")
    assert usage.host_app_cgroup(app, info) == expected


def test_host_app_cgroup_refuses_bad_paths() -> None:
    info = CgroupInfo(
        version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS, root=Path("/sys/fs/cgroup")
    )
    apps = [
        _app("escape", "CgroupRoot", "../..", "etc"),
        _app("odd-base", "Elsewhere", "", "x"),
        HostApplicationSpec(name="no-path"),
        _app("ok", "CgroupRoot", "", "ok"),
    ]
    assert usage.host_app_cgroups(apps, info) == {"ok": "ok"}


def test_host_app_usage(v1: V1Tree) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    apps = usage.host_app_cgroups([_app("nginx", "CgroupRoot", "host", "nginx")], v1.info)
    for step, ns in enumerate((0, 300_000_000)):
        clock.now = float(step)
        v1.cpuacct("host/nginx", ns)
        v1.memory_stat("host/nginx", 10, 20, 0)
        sampler.sample([], host_apps=apps)
    assert sampler.host_app_cpu("nginx", 10) == pytest.approx(300_000_000 / 1e6 / 1.0)
    assert sampler.host_app_memory("nginx") == 30
    clock.now = 2.0
    sampler.sample([])
    assert sampler.host_app_cpu("nginx", 10) is None


# --- this machine ----------------------------------------------------------------------------


@pytest.fixture
def busy_cgroup() -> Iterator[tuple[CgroupInfo, str]]:
    """A private cpuacct cgroup holding one busy process; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip(reason="needs root to create cgroups")
    info = detect.detect(HostPaths(), CgroupSection())
    if info.resource_version != 1:
        pytest.skip(reason="this case exercises cgroup v1 (cpuacct.usage); the host runs v2")
    hierarchy = info.hierarchy("cpuacct")
    if not (hierarchy / "cpuacct.usage").is_file():
        pytest.skip(reason=f"no cpuacct hierarchy at {hierarchy}")
    name = f"koordpy-test-{secrets.token_hex(4)}"
    directory = hierarchy / name
    directory.mkdir()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        (directory / "cgroup.procs").write_text(f"{busy.pid}\n")
        yield info, name
    finally:
        busy.kill()
        busy.wait(timeout=30)
        leftover = (directory / "cgroup.procs").read_text().split()
        for pid in leftover:  # nothing should be left; move it out rather than leak the dir
            (hierarchy / "cgroup.procs").write_text(f"{pid}\n")
        for _ in range(50):
            try:
                directory.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        else:
            directory.rmdir()


@pytest.mark.root
def test_real_proc_stat_and_busy_cgroup(busy_cgroup: tuple[CgroupInfo, str]) -> None:
    info, cgroup = busy_cgroup
    sampler = usage.UsageSampler(HostPaths(), usage.HierarchyReader(info))
    sampler.sample([], [cgroup])
    time.sleep(1.0)
    sampler.sample([], [cgroup])
    measured = sampler.cgroup_cpu(cgroup, 10)
    node = sampler.node_cpu(10)
    assert measured is not None
    assert node is not None
    # a process spinning for a second uses a good part of a core (1000 millicores)
    assert measured > 200
    assert node > 200
    memory = sampler.node_memory()
    assert memory is not None
    assert 0 < memory < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# --- shared sampling (the metrics collector's passes) -----------------------------------------


def test_a_detail_pass_reads_containers_and_their_history_survives_lighter_passes(
    v1: V1Tree,
) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    pods = [_state("uid-1", POD_DIR, (_container(CONTAINER_DIR),))]
    full = usage.Detail(containers=True, pod_throttle=True)
    light = usage.Detail()
    for step in range(12):
        clock.now = float(step)
        v1.cpuacct(CONTAINER_DIR, step * 100_000_000)
        v1.cpu_stat(CONTAINER_DIR, periods=step * 10, throttled=step)
        v1.memory_stat(CONTAINER_DIR, inactive=step, active=0, unevictable=0)
        v1.host.write_cgroup(f"memory/{CONTAINER_DIR}", "memory.usage_in_bytes", "5000\n")
        sampler.sample(pods, containers=False, detail=full if step % 5 == 0 else light)
    # read at 0, 5, 10: the last step spans 5 s; kept in between although not read
    assert sampler.cgroup_cpu(CONTAINER_DIR, 0.5) is None, "no read in the last 0.5 s"
    assert sampler.cgroup_cpu(CONTAINER_DIR, 6.5) == pytest.approx(100.0)
    assert sampler.throttled_ratio(CONTAINER_DIR, 6.5) == pytest.approx(0.1)
    memory = sampler.memory(CONTAINER_DIR)
    assert memory is not None
    assert memory.without_cache == 10, "as read at 10 s"
    assert memory.usage == 5000
    assert memory.inactive_file == 777
    assert memory.working_set == 5000 - 777
    # the pod goes: everything of its containers is forgotten
    clock.now = 12.0
    sampler.sample([], detail=light)
    assert sampler.memory(CONTAINER_DIR) is None
    assert sampler.cgroup_cpu(CONTAINER_DIR, 100) is None


def test_last_step_page_cache_and_per_cpu(v1: V1Tree) -> None:
    clock = Clock()
    sampler = usage.UsageSampler(
        v1.host.paths, usage.HierarchyReader(v1.info), clock=clock, clock_ticks=HZ
    )
    per_cpu = usage.Detail(per_cpu=True)
    for step in range(3):
        clock.now = 2.0 * step
        v1.host.write_proc_stat([(step * 100, 0), (step * 50, 150), (0, 200)])
        v1.host.write_meminfo(total=8 * GIB, free=2 * GIB, available=5 * GIB)
        v1.cpuacct(POD_DIR, step * step * 1_000_000_000)
        sampler.sample([_state("uid-1", POD_DIR)], detail=per_cpu)
    assert sampler.sampled_at == 4.0
    assert sampler.node_cpu_last() == pytest.approx(150 * 10 / 2)
    assert sampler.cgroup_cpu_last(POD_DIR) == pytest.approx(3000 / 2)
    assert sampler.cgroup_cpu(POD_DIR, 10) == pytest.approx(4000 / 4)
    assert sampler.node_memory() == 3 * GIB
    assert sampler.node_memory_with_cache() == 6 * GIB
    assert sampler.cpus_cpu([0]) == pytest.approx(500.0)
    assert sampler.cpus_cpu([0, 1, 2]) == pytest.approx(750.0)
    assert sampler.cpus_cpu([9]) is None, "not a CPU of this host"
    # a pass that could not read the pod: no last step for it
    clock.now = 6.0
    v1.host.write_cgroup(f"cpu,cpuacct/{POD_DIR}", "cpuacct.usage", "garbage\n")
    sampler.sample([_state("uid-1", POD_DIR)])
    assert sampler.cgroup_cpu_last(POD_DIR) is None
    assert sampler.node_cpu_last() == 0.0, "/proc/stat did not move"


def test_reader_past_its_open_file_limit_still_reads_everything(v1: V1Tree) -> None:
    reader = usage.HierarchyReader(v1.info, max_open=2)
    cgroups = [f"kubepods/pod{i}" for i in range(5)]
    for round_ in range(3):
        for n, cgroup in enumerate(cgroups):
            v1.cpuacct(cgroup, round_ * 100 + n)
        assert [reader.read_text(c, "cpuacct", "cpuacct.usage") for c in cgroups] == [
            f"{round_ * 100 + n}\n" for n in range(5)
        ]
        assert reader.open_files == 2
    reader.sweep()
    reader.sweep()
    assert reader.open_files == 0, "closed when no longer read"


def test_a_removed_cgroup_is_found_gone_and_a_new_one_read_afresh(v1: V1Tree) -> None:
    reader = usage.HierarchyReader(v1.info)
    v1.cpuacct(POD_DIR, 5)
    assert reader.read_text(POD_DIR, "cpuacct", "cpuacct.usage") == "5\n"
    target = v1.host.cgroup_root / "cpu,cpuacct" / POD_DIR / "cpuacct.usage"
    target.unlink()
    v1.cpuacct(POD_DIR, 9)  # a new file at the same path (a recreated cgroup)
    reader.reopen_seconds = 0.0
    assert reader.read_text(POD_DIR, "cpuacct", "cpuacct.usage") == "9\n"
    target.unlink()
    assert reader.read_text(POD_DIR, "cpuacct", "cpuacct.usage") is None


def test_proc_files_stay_open_and_follow_the_content(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    proc = usage.ProcFiles(host.paths)
    host.write("/proc/loadavg", "0.10 0.20 0.30 1/100 42\n")
    assert proc.read_text("loadavg").startswith("0.10")
    host.write("/proc/loadavg", "0.50 0.20 0.30 1/100 42\n")
    assert proc.read_text("loadavg").startswith("0.50")
    with pytest.raises(FileNotFoundError):
        proc.read_text("pressure/cpu")
    proc.close()
    assert proc.read_text("loadavg").startswith("0.50"), "reopened after close"
    proc.close()


def test_no_cgroups_reader() -> None:
    reader = usage.NoCgroups()
    assert reader.version == 2
    assert reader.read_text("kubepods", "cpu", "cpu.stat") is None
