"""The metrics collector on FakeHost v1 and v2 trees, with the QoS loop sharing its sampler,
and on this machine's real cgroup v1 with a busy process."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cgroups import detect, paths
from agent.cgroups.detect import CgroupInfo
from agent.config import AgentConfig, CgroupSection, HostPaths, MetricsSection, QoSSection
from agent.devices.base import DeviceReading
from agent.metrics import collector as collector_module
from agent.metrics.collector import Collector, SharePools, build_collector, build_sampler
from agent.metrics.snapshot import Pressure
from agent.metrics.usage import HierarchyReader, ProcFiles, UsageSampler
from agent.node import HostFacts, build_node
from agent.qos import service
from agent.qos.cpu_burst import CpuBurst
from apis import constants as k
from apis.core import (
    Container,
    ContainerState,
    ContainerStatus,
    Node,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from apis.meta import ObjectMeta
from apis.qos import KubeQoS
from apis.resources import ResourceList
from apis.slo import CgroupPath, CPUBurstStrategy, HostApplicationSpec, NodeSLOSpec
from tests.agent.realcgroups import KubepodsTree, kubepods_tree
from tests.fakes.host import FakeHost

HZ = 100
GIB = 1 << 30
MIB = 1 << 20
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def _pod(
    index: int,
    *,
    containers: Sequence[str] = ("app",),
    qos: str = "LS",
    cpu_limit: int | None = None,
    running: bool = True,
    phase: str = "Running",
    priority: str | None = None,
) -> Pod:
    requests = ResourceList({"cpu": 500, "memory": GIB})
    limits = ResourceList({"cpu": cpu_limit}) if cpu_limit else ResourceList()
    labels = {k.LABEL_QOS_CLASS: qos}
    if priority is not None:
        labels[k.LABEL_PRIORITY_CLASS] = priority
    statuses = tuple(
        ContainerStatus(
            name=name,
            container_id=f"containerd://{index:032x}{n:032x}",
            state=ContainerState(running={"startedAt": "2026-01-01T00:00:00Z"})
            if running
            else ContainerState(),
        )
        for n, name in enumerate(containers)
    )
    return Pod(
        metadata=ObjectMeta(
            name=f"pod-{index}",
            namespace="ns",
            uid=f"{index:08x}-0000-4000-8000-{index:012x}",
            labels=labels,
        ),
        spec=PodSpec(
            containers=tuple(
                Container(
                    name=name,
                    resources=ResourceRequirements(requests=requests, limits=limits),
                )
                for name in containers
            )
        ),
        status=PodStatus(phase=phase, container_statuses=statuses),
    )


class Tree:
    """A FakeHost tree of either cgroup version, written the way the kernel lays it out."""

    def __init__(self, base: Path, version: int) -> None:
        self.host = FakeHost(base)
        self.version = version
        if version == 2:
            self.host.use_v2()
        else:
            self.host.use_v1()
        self.cfg = AgentConfig(host=self.host.paths, cgroup=self.host.cgroup)
        self.info = detect.detect(self.cfg.host, self.cfg.cgroup)
        self.cpus: list[tuple[int, int]] = [(0, 0)] * 4

    def _dir(self, controller: str, cgroup: str) -> str:
        if self.version == 2:
            return cgroup
        return f"{'memory' if controller == 'memory' else 'cpu,cpuacct'}/{cgroup}"

    def pod_dir(self, pod: Pod) -> str:
        return paths.pod_dir(self.info, KubeQoS.BURSTABLE, pod.metadata.uid)

    def container_dir(self, pod: Pod, index: int = 0) -> str:
        status = pod.status.container_statuses[index]
        return paths.container_dir(self.info, self.pod_dir(pod), status.container_id)

    def cpu(self, cgroup: str, ns: int, periods: int = 0, throttled: int = 0) -> None:
        where = self._dir("cpu", cgroup)
        if self.version == 2:
            stat = f"usage_usec {ns // 1000}\nuser_usec 1\nsystem_usec 1\n"
            stat += f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec 5\n"
            self.host.write_cgroup(where, "cpu.stat", stat)
        else:
            self.host.write_cgroup(where, "cpuacct.usage", f"{ns}\n")
            self.host.write_cgroup(
                where,
                "cpu.stat",
                f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time 5\n",
            )

    def memory(self, cgroup: str, *, anon: int, inactive_file: int, usage: int) -> None:
        """``anon`` bytes of anonymous memory (split into inactive/active/unevictable)."""
        where = self._dir("memory", cgroup)
        third = anon // 3
        parts = {
            "inactive_anon": third,
            "active_anon": third,
            "unevictable": anon - 2 * third,
            "inactive_file": inactive_file,
            "active_file": 4096,
        }
        if self.version == 2:
            text = "anon 1\nfile 2\n" + "".join(f"{n} {v}\n" for n, v in parts.items())
            self.host.write_cgroup(where, "memory.stat", text)
            self.host.write_cgroup(where, "memory.current", f"{usage}\n")
        else:
            # The pod's own lines (not hierarchical) come first and must not be taken.
            text = "cache 999\nrss 1\n" + "".join(f"{n} 7\n" for n in parts)
            text += "".join(f"total_{n} {v}\n" for n, v in parts.items())
            self.host.write_cgroup(where, "memory.stat", text)
            self.host.write_cgroup(where, "memory.usage_in_bytes", f"{usage}\n")

    def pressure(
        self,
        cgroup: str,
        resource: str,
        some: tuple[float, float, float],
        full: tuple[float, float, float] | None = None,
    ) -> None:
        self.host.write_pressure(self._dir("cpuacct", cgroup), resource, some, full)

    def node(self, used_per_cpu: Sequence[int], *, total: int, free: int, available: int) -> None:
        """Advance every CPU by ``used_per_cpu[i]`` jiffies (of 100 per second)."""
        self.cpus = [
            (u + add, i + HZ - add) for (u, i), add in zip(self.cpus, used_per_cpu, strict=True)
        ]
        self.host.write_proc_stat(self.cpus)
        self.host.write_meminfo(total=total, free=free, available=available)


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def tree(request: pytest.FixtureRequest, tmp_path: Path) -> Tree:
    return Tree(tmp_path, request.param)


@dataclass
class Feed:
    """What the collector's callables return; tests change it between ticks."""

    pods: list[Pod] = field(default_factory=list)
    slo: NodeSLOSpec | None = None
    devices: tuple[DeviceReading, ...] = ()
    pools: SharePools = field(default_factory=SharePools)


def _collector(
    tree: Tree,
    feed: Feed,
    clock: Clock,
    *,
    metrics: MetricsSection | None = None,
    detail_interval: float = 1.0,
    sampler: UsageSampler | None = None,
) -> Collector:
    cfg = AgentConfig(
        host=tree.cfg.host, cgroup=tree.cfg.cgroup, metrics=metrics or MetricsSection()
    )
    return build_collector(
        cfg,
        node="node-1",
        cgroup=tree.info,
        pods=lambda: tuple(feed.pods),
        nodeslo=lambda: feed.slo,
        devices=lambda: feed.devices,
        pools=lambda: feed.pools,
        sampler=sampler
        or UsageSampler(
            cfg.host,
            HierarchyReader(tree.info, clock=clock),
            clock=clock,
            clock_ticks=HZ,
            interval=cfg.metrics.collect_interval,
        ),
        clock=clock,
        wall=lambda: EPOCH,
        detail_interval=detail_interval,
    )


def test_one_tick_measures_node_pods_containers_and_pressure(tree: Tree) -> None:
    clock = Clock()
    web = _pod(1, containers=("app", "sidecar"), priority="koord-prod")
    batch = _pod(2, qos="BE", priority="koord-batch")
    gpu = DeviceReading(
        vendor="nvidia", model="A100", minor=0, uuid="GPU-0", healthy=True, utilization_percent=40
    )
    feed = Feed(pods=[web, batch], devices=(gpu,), pools=SharePools(ls=(0, 1), be=(3,)))
    collector = _collector(tree, feed, clock)
    app, sidecar = tree.container_dir(web, 0), tree.container_dir(web, 1)

    def write(step: int) -> None:
        # CPUs 0..3 busy 50, 30, 0, 100 jiffies a second: 1.8 cores in all.
        tree.node([50, 30, 0, 100], total=16 * GIB, free=4 * GIB, available=10 * GIB)
        tree.cpu(tree.pod_dir(web), step * 600_000_000, periods=step * 10, throttled=step * 2)
        tree.cpu(app, step * 400_000_000, periods=step * 10, throttled=step * 5)
        tree.cpu(sidecar, step * 200_000_000)
        tree.cpu(tree.pod_dir(batch), step * 100_000_000)
        tree.memory(tree.pod_dir(web), anon=300 * MIB, inactive_file=50 * MIB, usage=500 * MIB)
        tree.memory(app, anon=200 * MIB, inactive_file=20 * MIB, usage=260 * MIB)
        tree.memory(tree.pod_dir(batch), anon=30 * MIB, inactive_file=10 * MIB, usage=5 * MIB)
        tree.pressure(tree.pod_dir(web), "cpu", (1.5, 1.0, 0.5), (0.5, 0.25, 0.12))
        tree.pressure(tree.pod_dir(web), "memory", (2.0, 1.0, 0.0), (1.0, 0.5, 0.0))
        tree.pressure(tree.pod_dir(web), "io", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
        tree.host.write_pressure(None, "cpu", (12.0, 6.0, 3.0))
        tree.host.write_pressure(None, "memory", (1.0, 0.0, 0.0), (0.5, 0.0, 0.0))

    write(0)
    first = collector.collect()
    assert first.node_cpu is None, "one sample is no rate yet"
    assert first.pods[0].usage.cpu is None
    assert first.node_memory == 6 * GIB, "MemTotal - MemAvailable"
    assert first.pods[0].usage.memory == 300 * MIB

    clock.now += 1.0
    write(1)
    snap = collector.collect()
    assert collector.latest is snap
    assert snap.node == "node-1"
    assert snap.taken_at == EPOCH
    assert snap.monotonic == clock.now
    assert snap.node_cpu == pytest.approx(1800.0)
    assert snap.node_memory == 6 * GIB
    assert snap.duration > 0

    by_name = {p.name: p for p in snap.pods}
    pod = by_name["pod-1"]
    assert (pod.namespace, pod.qos, pod.priority) == ("ns", "LS", "koord-prod")
    assert pod.requests == ResourceList({"cpu": 1000, "memory": 2 * GIB}), "both containers"
    assert pod.usage.cpu == pytest.approx(600.0)
    assert pod.usage.memory == 300 * MIB, "anon + unevictable, the hierarchical figures"
    assert pod.usage.working_set == 450 * MIB, "usage - inactive file"
    assert pod.usage.throttled_ratio == pytest.approx(2 / 10)
    assert pod.usage.pressure["cpu"] == Pressure(some=(1.5, 1.0, 0.5), full=(0.5, 0.25, 0.12))
    assert set(pod.usage.pressure) == {"cpu", "memory", "io"}
    assert snap.node_pressure["cpu"] == Pressure(some=(12.0, 6.0, 3.0), full=None)
    assert snap.node_pressure["memory"].full == (0.5, 0.0, 0.0)
    assert "io" not in snap.node_pressure, "no /proc/pressure/io on this host"

    containers = {c.name: c for c in pod.containers}
    assert containers["app"].container_id == web.status.container_statuses[0].container_id
    assert containers["app"].usage.cpu == pytest.approx(400.0)
    assert containers["app"].usage.throttled_ratio == pytest.approx(0.5)
    assert containers["app"].usage.working_set == 240 * MIB
    assert containers["sidecar"].usage.cpu == pytest.approx(200.0)
    assert containers["sidecar"].usage.memory is None, "no memory files for it"
    assert containers["sidecar"].usage.throttled_ratio == 0.0, "no period ran"

    batch_usage = by_name["pod-2"]
    assert (batch_usage.qos, batch_usage.priority) == ("BE", "koord-batch")
    assert batch_usage.usage.working_set == 0, "inactive file above usage: never negative"
    assert batch_usage.usage.pressure == {}, "no pressure files for it"

    # system = node - pods (no host applications here)
    assert snap.system_cpu == pytest.approx(1800.0 - 600.0 - 100.0)
    assert snap.system_memory == 6 * GIB - 300 * MIB - 30 * MIB
    # share pools from the per-CPU lines
    assert snap.share_pool_cpus == (0, 1)
    assert snap.share_pool_cpu == pytest.approx(800.0)
    assert snap.be_share_pool_cpus == (3,)
    assert snap.be_share_pool_cpu == pytest.approx(1000.0)
    assert snap.devices == (gpu,)


def test_memory_policies(tree: Tree) -> None:
    clock = Clock()
    feed = Feed(pods=[_pod(1)])
    pod_dir = tree.pod_dir(feed.pods[0])
    tree.node([0] * 4, total=16 * GIB, free=4 * GIB, available=10 * GIB)
    tree.memory(pod_dir, anon=300 * MIB, inactive_file=50 * MIB, usage=500 * MIB)
    for policy, node_memory, pod_memory in [
        ("usageWithPageCache", 12 * GIB, 500 * MIB),
        ("usageWithoutPageCache", 6 * GIB, 300 * MIB),
        # no hot page cache accounting: counted without page cache
        ("usageWithHotPageCache", 6 * GIB, 300 * MIB),
    ]:
        metrics = MetricsSection(memory_policy=policy)  # type: ignore[arg-type]
        snap = _collector(tree, feed, clock, metrics=metrics).collect()
        assert snap.node_memory == node_memory, policy
        assert snap.pods[0].usage.memory == pod_memory, policy
        assert snap.pods[0].usage.working_set == 450 * MIB
        assert snap.system_memory == node_memory - pod_memory


def test_missing_files_and_a_kernel_without_psi(tree: Tree) -> None:
    clock = Clock()
    feed = Feed(pods=[_pod(1)])
    collector = _collector(tree, feed, clock)
    for _ in range(2):
        collector.collect()
        clock.now += 1
    snap = collector.collect()
    assert snap.node_cpu is None
    assert snap.node_memory is None
    assert snap.system_cpu is None
    assert snap.system_memory is None
    assert snap.node_pressure == {}
    assert snap.share_pool_cpu is None
    [pod] = snap.pods
    assert pod.usage.cpu is None
    assert pod.usage.memory is None
    assert pod.usage.working_set is None
    assert pod.usage.throttled_ratio is None
    assert pod.usage.pressure == {}
    assert pod.containers[0].usage.cpu is None
    assert collector.nodemetric() is not None, "a NodeMetric with nothing measured yet"


def test_a_counter_going_backwards_is_no_rate_then_starts_over(tree: Tree) -> None:
    clock = Clock()
    feed = Feed(pods=[_pod(1)])
    pod_dir = tree.pod_dir(feed.pods[0])
    collector = _collector(tree, feed, clock)
    for step, ns in enumerate((5_000_000_000, 5_500_000_000, 1_000_000, 301_000_000)):
        clock.now = 100.0 + step
        tree.node([10] * 4, total=GIB, free=GIB // 2, available=GIB // 2)
        tree.cpu(pod_dir, ns)
        snap = collector.collect()
        cpu = snap.pods[0].usage.cpu
        if step == 1:
            assert cpu == pytest.approx(500.0)
        if step == 2:
            assert cpu is None, "the cgroup was recreated: no rate across the reset"
        if step == 3:
            assert cpu == pytest.approx(300.0)


def test_a_pod_that_goes_away_is_dropped_everywhere(tree: Tree) -> None:
    clock = Clock()
    keep, gone = _pod(1), _pod(2)
    feed = Feed(pods=[keep, gone])
    collector = _collector(tree, feed, clock)
    for step in range(3):
        tree.node([10] * 4, total=GIB, free=GIB // 2, available=GIB // 2)
        for pod in (keep, gone):
            tree.cpu(tree.pod_dir(pod), step * 100_000_000)
            tree.memory(tree.pod_dir(pod), anon=MIB, inactive_file=0, usage=MIB)
        collector.collect()
        clock.now += 1
    assert collector.windows.aggregate().pods.keys() == {keep.metadata.uid, gone.metadata.uid}

    feed.pods = [keep]
    snap = collector.collect()
    assert [p.name for p in snap.pods] == ["pod-1"]
    assert collector.windows.aggregate().pods.keys() == {keep.metadata.uid}
    assert collector.sampler.memory(tree.pod_dir(gone)) is None, "its history is forgotten"
    metric = collector.nodemetric()
    assert metric is not None
    assert [p.name for p in metric.status.pods_metric] == ["pod-1"]


def test_a_pod_source_keeping_its_tuple_is_measured_every_tick(tree: Tree) -> None:
    # Pod sources hand out the same tuple of pods until one changes: every tick still
    # measures them, and a new tuple is followed at once.
    clock = Clock()
    keep, gone = _pod(1), _pod(2)
    listed: tuple[Pod, ...] = (keep, gone)
    collector = _collector(tree, Feed(), clock)
    collector.pods = lambda: listed
    for step in range(3):
        tree.node([10] * 4, total=GIB, free=GIB // 2, available=GIB // 2)
        tree.cpu(tree.pod_dir(keep), step * 100_000_000)  # a tenth of a core
        tree.cpu(tree.pod_dir(gone), 0)
        snap = collector.collect()
        clock.now += 1
    assert [(p.name, p.usage.cpu) for p in snap.pods] == [("pod-1", 100.0), ("pod-2", 0.0)]

    listed = (keep,)
    snap = collector.collect()
    assert [p.name for p in snap.pods] == ["pod-1"]
    listed = (_pod(1, phase="Succeeded"),)
    assert collector.collect().pods == ()


def test_finished_pods_and_stopped_containers_are_not_read(tree: Tree) -> None:
    clock = Clock()
    done = _pod(1, phase="Succeeded")
    stopped = _pod(2, running=False)
    collector = _collector(tree, Feed(pods=[done, stopped]), clock)
    snap = collector.collect()
    assert [p.name for p in snap.pods] == ["pod-2"]
    assert snap.pods[0].containers == ()


def test_host_applications_count_against_the_system_usage(tree: Tree) -> None:
    clock = Clock()
    app = HostApplicationSpec(
        name="nginx",
        qos="LS",
        priority="koord-prod",
        cgroup_path=CgroupPath(base="CgroupRoot", parent_dir="host", relative_path="nginx"),
    )
    feed = Feed(pods=[_pod(1)], slo=NodeSLOSpec(host_applications=(app,)))
    collector = _collector(tree, feed, clock)
    for step in range(2):
        tree.node([100, 100, 0, 0], total=8 * GIB, free=GIB, available=4 * GIB)
        tree.cpu(tree.pod_dir(feed.pods[0]), step * 500_000_000)
        tree.cpu("host/nginx", step * 300_000_000)
        tree.memory("host/nginx", anon=100 * MIB, inactive_file=0, usage=120 * MIB)
        snap = collector.collect()
        clock.now += 1
    [nginx] = snap.host_apps
    assert (nginx.name, nginx.qos, nginx.priority) == ("nginx", "LS", "koord-prod")
    assert nginx.usage.cpu == pytest.approx(300.0)
    assert nginx.usage.memory == 100 * MIB
    assert snap.system_cpu == pytest.approx(2000.0 - 500.0 - 300.0)
    assert snap.system_memory == 4 * GIB - 100 * MIB, "the pod has no memory files"
    # a node already below what pods and applications use: system 0, not negative
    tree.node([0, 0, 0, 0], total=8 * GIB, free=GIB, available=8 * GIB)
    tree.cpu(tree.pod_dir(feed.pods[0]), 5 * 500_000_000)
    snap = collector.collect()
    assert snap.system_cpu == 0.0
    assert snap.system_memory == 0


def test_without_cgroups_only_the_node_is_collected(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    cfg = AgentConfig(host=host.paths, cgroup=host.cgroup)
    clock = Clock()
    reading = DeviceReading(vendor="x", model="y", minor=1, uuid="u", healthy=False)
    collector = build_collector(
        cfg,
        node="edge",
        cgroup=None,
        pods=lambda: [_pod(1)],
        devices=lambda: (reading,),
        sampler=UsageSampler(
            cfg.host,
            build_sampler(cfg, None, clock=clock).reader,
            clock=clock,
            clock_ticks=HZ,
        ),
        clock=clock,
    )
    for step in range(2):
        host.write_proc_stat([(step * 100, 0), (step * 50, 50)])
        host.write_meminfo(total=4 * GIB, free=GIB, available=3 * GIB)
        snap = collector.collect()
        clock.now += 1
    assert snap.node_cpu == pytest.approx(1500.0)
    assert snap.node_memory == GIB
    assert snap.pods == ()
    assert snap.system_cpu == pytest.approx(1500.0)
    assert snap.devices == (reading,)


# --- one read per file per tick, shared with the QoS loop ------------------------------------


class CountingReader:
    """Counts every cgroup file read (path and all) of the reader it wraps."""

    def __init__(self, inner: HierarchyReader) -> None:
        self.inner = inner
        self.reads: collections.Counter[tuple[str, str]] = collections.Counter()

    @property
    def version(self) -> int:
        return self.inner.version

    def read_text(self, cgroup: str, controller: str, file: str) -> str | None:
        self.reads[(cgroup, file)] += 1
        return self.inner.read_text(cgroup, controller, file)

    def sweep(self) -> None:
        self.inner.sweep()


class CountingProc:
    def __init__(self, inner: ProcFiles) -> None:
        self.inner = inner
        self.reads: collections.Counter[str] = collections.Counter()

    def read_text(self, name: str) -> str:
        self.reads[name] += 1
        return self.inner.read_text(name)


def _node(info: CgroupInfo) -> Node:
    facts = HostFacts(
        hostname="node-1",
        cpus=4,
        memory=16 * GIB,
        ephemeral_storage=100 * GIB,
        kernel="6.1",
        os_image="test",
        architecture="amd64",
    )
    return build_node("node-1", facts, heartbeat=EPOCH, ready_since=EPOCH, cgroup=info)


async def test_each_file_is_read_once_per_tick_for_metrics_and_qos(tree: Tree) -> None:
    clock = Clock()
    pods = [_pod(i, containers=("a", "b"), cpu_limit=2000) for i in range(1, 4)]
    feed = Feed(
        pods=pods,
        slo=NodeSLOSpec(
            cpu_burst_strategy=CPUBurstStrategy(policy="auto", cfs_quota_burst_period_seconds=60)
        ),
        pools=SharePools(ls=(0, 1), be=(2,)),
    )
    reader = CountingReader(HierarchyReader(tree.info, clock=clock))
    proc = CountingProc(ProcFiles(tree.cfg.host))
    sampler = UsageSampler(
        tree.cfg.host, reader, clock=clock, clock_ticks=HZ, proc_reader=proc, sweep_seconds=60
    )
    collector = _collector(tree, feed, clock, sampler=sampler, detail_interval=2.0)
    loop = service.build_loop(
        AgentConfig(host=tree.cfg.host, cgroup=tree.cfg.cgroup, qos=QoSSection(interval=1.0)),
        node="node-1",
        cgroup=tree.info,
        pods=lambda: tuple(pods),
        node_object=lambda: _node(tree.info),
        nodeslo=lambda: feed.slo,
        strategies=[CpuBurst()],
        clock=clock,
        sampler=sampler,
    )
    assert loop.sampler is sampler
    assert not loop.sampling
    for pod in pods:
        tree.cpu(tree.pod_dir(pod), 0)
        for index in (0, 1):
            tree.cpu(tree.container_dir(pod, index), 0)
            tree.memory(tree.container_dir(pod, index), anon=MIB, inactive_file=0, usage=MIB)
        tree.memory(tree.pod_dir(pod), anon=MIB, inactive_file=0, usage=MIB)
        tree.pressure(tree.pod_dir(pod), "cpu", (1.0, 1.0, 1.0))
    container_files: list[int] = []
    for step in range(5):
        tree.node([10] * 4, total=GIB, free=GIB // 2, available=GIB // 2)
        reader.reads.clear()
        proc.reads.clear()
        collector.collect()
        await loop.run_once()
        assert reader.reads, "the collector read the cgroups"
        twice = {key: n for key, n in reader.reads.items() if n > 1}
        assert twice == {}, f"tick {step}: read more than once: {twice}"
        assert max(proc.reads.values()) == 1, proc.reads
        containers = {tree.container_dir(p, i) for p in pods for i in (0, 1)}
        container_files.append(sum(1 for (cgroup, _) in reader.reads if cgroup in containers))
        clock.now += 1
    # Every tick the QoS loop's needs (CPU burst: throttling and CPU of its containers, two
    # files on v1, one on v2); every detail_interval (2 s) also memory, working set, PSI.
    per_container_qos = 2 if tree.version == 1 else 1
    assert container_files[1] == container_files[3] == 6 * per_container_qos
    assert container_files[2] > container_files[1]
    assert container_files[4] == container_files[2]
    # The QoS loop sampled nothing itself: every read above happened inside collect().
    reader.reads.clear()
    await loop.run_once()
    assert reader.reads == {}
    assert sampler.requested.extra_cgroups, "it asked for the QoS tiers"


def test_the_qos_loop_keeps_sampling_itself_by_default(tree: Tree) -> None:
    loop = service.build_loop(
        AgentConfig(host=tree.cfg.host, cgroup=tree.cfg.cgroup),
        node="node-1",
        cgroup=tree.info,
        pods=tuple,
        node_object=lambda: _node(tree.info),
        nodeslo=lambda: None,
    )
    assert loop.sampling


def test_containers_and_psi_are_read_every_detail_interval(tree: Tree) -> None:
    clock = Clock()
    pod = _pod(1)
    container = tree.container_dir(pod, 0)
    collector = _collector(tree, Feed(pods=[pod]), clock, detail_interval=10.0)
    seen = []
    for step in range(12):
        tree.node([10] * 4, total=GIB, free=GIB // 2, available=GIB // 2)
        tree.cpu(container, step * 100_000_000)
        tree.cpu(tree.pod_dir(pod), step * 100_000_000)
        tree.memory(container, anon=step * MIB, inactive_file=0, usage=step * MIB)
        snap = collector.collect()
        seen.append(snap.pods[0].containers[0].usage)
        clock.now += 1
    assert seen[0].memory == 0
    assert all(u is seen[0] for u in seen[1:10]), "kept between reads"
    assert seen[10].memory == 10 * MIB
    assert seen[10].cpu == pytest.approx(100.0), "averaged since the previous read"
    assert seen[11] is seen[10]


async def test_run_ticks_until_cancelled(tree: Tree) -> None:
    feed = Feed(pods=[_pod(1)])
    tree.node([10] * 4, total=GIB, free=GIB // 2, available=GIB // 2)
    cfg = AgentConfig(
        host=tree.cfg.host, cgroup=tree.cfg.cgroup, metrics=MetricsSection(collect_interval=0.05)
    )
    collector = build_collector(cfg, node="node-1", cgroup=tree.info, pods=lambda: feed.pods)
    assert collector.name == "metrics"
    assert collector.nodemetric() is None, "nothing before the first tick"
    task = asyncio.create_task(collector.run())
    try:
        for _ in range(100):
            await asyncio.sleep(0.05)
            if collector.windows.aggregate().average.node_memory is not None:
                break
        assert collector.latest is not None
        assert collector.latest.node_memory == GIB // 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    metric = collector.nodemetric()
    assert metric is not None
    assert metric.metadata.name == "node-1"


def test_build_collector_defaults() -> None:
    collector = build_collector(AgentConfig(), node="n", cgroup=None)
    assert collector.interval == 1.0
    assert collector.detail_interval == collector_module.DETAIL_INTERVAL
    assert collector.windows.durations == (300.0, 600.0, 1800.0)
    with pytest.raises(ValueError, match="detail_interval"):
        build_collector(AgentConfig(), node="n", cgroup=None, detail_interval=0)


# --- this machine ----------------------------------------------------------------------------


@pytest.fixture
def real_tree() -> Iterator[KubepodsTree]:
    with kubepods_tree() as made:
        yield made


@pytest.mark.root
def test_a_busy_process_measures_about_one_core(real_tree: KubepodsTree) -> None:
    cfg = AgentConfig(
        cgroup=CgroupSection(root="/sys/fs/cgroup", kubepods_parent=real_tree.parent),
        metrics=MetricsSection(collect_interval=0.5),
    )
    info = detect.detect(cfg.host, cfg.cgroup)
    pod = _pod(1)
    pod_dir = paths.pod_dir(info, KubeQoS.BURSTABLE, pod.metadata.uid)
    container = paths.container_dir(info, pod_dir, pod.status.container_statuses[0].container_id)
    real_tree.busy(container, 1)
    collector = build_collector(
        cfg, node="node-1", cgroup=info, pods=lambda: [pod], detail_interval=0.5
    )
    collector.collect()
    time.sleep(1.0)
    snap = collector.collect()
    [usage] = snap.pods
    assert usage.usage.cpu is not None
    assert 500 < usage.usage.cpu < 1300, usage.usage.cpu
    [box] = usage.containers
    assert box.usage.cpu is not None
    assert 500 < box.usage.cpu < 1300, box.usage.cpu
    # v1 leaves a moved process's pages charged where they were: only "known" is certain
    assert usage.usage.memory is not None
    assert usage.usage.working_set is not None
    assert usage.usage.throttled_ratio == 0.0, "no quota: never throttled"
    assert snap.node_cpu is not None
    assert snap.node_cpu >= 500
    assert snap.node_memory is not None
    assert snap.node_memory > 0
    assert HostPaths().path("/proc/stat").exists()
