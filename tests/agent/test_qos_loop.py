"""The QoS loop end to end on FakeHost trees: snapshot, strategies, writer, evictor, Node."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cgroups import detect, paths
from agent.config import AgentConfig, CgroupSection, HostPaths, QoSSection
from agent.metrics.collector import build_collector
from agent.node import HostFacts, build_node
from agent.qos import service
from agent.qos.framework import Eviction, NodeSnapshot, Outcome
from agent.qos.loop import PassResult, QoSLoop
from agent.qos.settings import ColocationSettings
from apis import codec
from apis.core import Pod
from apis.qos import KubeQoS
from apis.resources import ResourceList
from apis.slo import CPUBurstStrategy, NodeSLOSpec, ResourceThresholdStrategy
from tests.fakes.host import FakeHost
from tests.koordpy.daemons import koordpy_command

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agent"
GIB = 1 << 30
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
FACTS = HostFacts(
    hostname="node-1",
    cpus=4,
    memory=16 * GIB,
    ephemeral_storage=100 * GIB,
    kernel="6.1",
    os_image="test",
    architecture="amd64",
)
PODS = tuple(p for p in codec.decode_documents((EXAMPLES / "pods.yaml").read_text()))


def _pod(name: str) -> Pod:
    found = next(p for p in PODS if p.metadata.name == name)
    assert isinstance(found, Pod)
    return found


@dataclass
class Settings:
    """What the loop reads each pass: a NodeSLO that tests swap."""

    slo: NodeSLOSpec | None = None

    def current(self) -> NodeSLOSpec | None:
        return self.slo


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def _dirs(cfg: AgentConfig) -> dict[str, str]:
    """Name -> cgroup dir for the QoS tiers, the example pods and their containers."""
    info = detect.detect(cfg.host, cfg.cgroup)
    found = {str(q): paths.qos_dir(info, q) for q in KubeQoS}
    for pod in PODS:
        assert isinstance(pod, Pod)
        pod_dir = paths.pod_dir(info, KubeQoS(pod.status.qos_class), pod.metadata.uid)
        found[pod.metadata.name] = pod_dir
        for status in pod.status.container_statuses:
            found[f"{pod.metadata.name}/{status.name}"] = paths.container_dir(
                info, pod_dir, status.container_id
            )
    return found


def _host(tmp_path: Path, *, v2: bool) -> tuple[FakeHost, AgentConfig, dict[str, str]]:
    host = FakeHost(tmp_path)
    if v2:
        host.use_v2()
    else:
        host.use_v1()
    cfg = AgentConfig(
        host=HostPaths(root=str(host.root)),
        cgroup=CgroupSection(root=str(host.cgroup_root)),
        qos=QoSSection(interval=1.0),
    )
    host.write("/proc/stat", "cpu  0 0 0 0 0 0 0 0 0 0\n")
    host.write(
        "/proc/meminfo",
        "MemTotal:       16000000 kB\nMemFree:        10000000 kB\n"
        "MemAvailable:   12000000 kB\nBuffers:          100000 kB\n"
        "Cached:          1900000 kB\nShmem:             10000 kB\n"
        "SReclaimable:      50000 kB\nActive:          2000000 kB\n"
        "Inactive:        1000000 kB\n",
    )
    for cpu in range(4):
        host.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id", f"{cpu}\n")
        host.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", "0\n")
    host.write("/sys/devices/system/cpu/online", "0-3\n")
    dirs = _dirs(cfg)
    for cgroup in dirs.values():
        if v2:
            host.write_cgroup(cgroup, "cpu.max", "max 100000\n")
            host.write_cgroup(cgroup, "cpu.max.burst", "0\n")
            host.write_cgroup(cgroup, "cpu.stat", "usage_usec 0\nnr_periods 0\nnr_throttled 0\n")
            host.write_cgroup(cgroup, "cpuset.cpus", "0-3\n")
            host.write_cgroup(cgroup, "cpuset.cpus.effective", "0-3\n")
        else:
            host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.cfs_quota_us", "-1\n")
            host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.cfs_period_us", "100000\n")
            host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.cfs_burst_us", "0\n")
            host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpuacct.usage", "0\n")
            host.write_cgroup(f"cpuset/{cgroup}", "cpuset.cpus", "0-3\n")
    return host, cfg, dirs


def _loop(cfg: AgentConfig, settings: Settings, clock: Clock) -> QoSLoop:
    info = detect.detect(cfg.host, cfg.cgroup)
    node = build_node("node-1", FACTS, heartbeat=EPOCH, ready_since=EPOCH, cgroup=info)
    loop = service.build_loop(
        cfg,
        node="node-1",
        cgroup=info,
        pods=lambda: tuple(p for p in PODS if isinstance(p, Pod)),
        node_object=lambda: node,
        nodeslo=settings.current,
        clock=clock,
    )
    return loop


async def test_cgroup_v2_burst_stays_within_the_quota_as_it_scales(tmp_path: Path) -> None:
    host, cfg, dirs = _host(tmp_path, v2=True)
    web, container = dirs["web"], dirs["web/nginx"]
    # The kubelet set the 1-core limit: cpu.max "100000 100000" on the pod and its container.
    host.write_cgroup(web, "cpu.max", "100000 100000\n")
    host.write_cgroup(container, "cpu.max", "100000 100000\n")
    settings = Settings(
        NodeSLOSpec(
            cpu_burst_strategy=CPUBurstStrategy(
                policy="auto", cpu_burst_percent=1000, share_pool_threshold_percent=90
            )
        )
    )
    clock = Clock()
    loop = _loop(cfg, settings, clock)
    await loop.run_once()
    # 1000 % of a 1-core limit is 1,000,000 µs, but on v2 the kernel holds burst <= quota.
    assert (host.cgroup_root / container / "cpu.max.burst").read_text().strip() == "100000"

    # The container is throttled in every period: its quota scales up by 1.2.
    for step in range(1, 4):
        clock.now += 1
        host.write("/proc/stat", f"cpu  {50 * step} 0 0 {350 * step} 0 0 0 0 0 0\n")
        host.write_cgroup(
            container,
            "cpu.stat",
            f"usage_usec {step * 500000}\nnr_periods {step * 10}\nnr_throttled {step * 10}\n",
        )
        await loop.run_once()
    # The agent writes the quota alone (a kernel keeps the period; this fake file does not).
    quota = (host.cgroup_root / container / "cpu.max").read_text().split()[0]
    assert 100000 < int(quota) <= 300000
    burst = int((host.cgroup_root / container / "cpu.max.burst").read_text())
    assert burst <= int(quota), "v2: cpu.max.burst never exceeds the quota"
    pod_quota = int((host.cgroup_root / web / "cpu.max").read_text().split()[0])
    assert pod_quota >= int(quota)


async def test_burst_scales_the_same_on_the_metrics_collectors_samples(tmp_path: Path) -> None:
    """The QoS loop over the collector's sampler: it samples nothing itself, states what it
    needs, and the collector's next tick reads it (one read of each file for both)."""
    host, cfg, dirs = _host(tmp_path, v2=True)
    web, container = dirs["web"], dirs["web/nginx"]
    host.write_cgroup(web, "cpu.max", "100000 100000\n")
    host.write_cgroup(container, "cpu.max", "100000 100000\n")
    settings = Settings(
        NodeSLOSpec(
            cpu_burst_strategy=CPUBurstStrategy(
                policy="auto", cpu_burst_percent=1000, share_pool_threshold_percent=90
            )
        )
    )
    clock = Clock()
    info = detect.detect(cfg.host, cfg.cgroup)
    pods = tuple(p for p in PODS if isinstance(p, Pod))
    collector = build_collector(
        cfg, node="node-1", cgroup=info, pods=lambda: pods, nodeslo=settings.current, clock=clock
    )
    node = build_node("node-1", FACTS, heartbeat=EPOCH, ready_since=EPOCH, cgroup=info)
    loop = service.build_loop(
        cfg,
        node="node-1",
        cgroup=info,
        pods=lambda: pods,
        node_object=lambda: node,
        nodeslo=settings.current,
        clock=clock,
        sampler=collector.sampler,
    )
    assert not loop.sampling
    await loop.run_once()
    assert loop.sampler.requested.containers is not False, "it asked for its containers"
    for step in range(1, 5):
        clock.now += 1
        host.write("/proc/stat", f"cpu  {50 * step} 0 0 {350 * step} 0 0 0 0 0 0\n")
        host.write_cgroup(
            container,
            "cpu.stat",
            f"usage_usec {step * 500000}\nnr_periods {step * 10}\nnr_throttled {step * 10}\n",
        )
        collector.collect()
        await loop.run_once()
    assert loop.sampler.throttled_ratio(container, 1.0) == 1.0
    quota = (host.cgroup_root / container / "cpu.max").read_text().split()[0]
    assert 100000 < int(quota) <= 300000, "throttled every period: the quota scaled up"


async def test_a_refused_nodeslo_keeps_the_previous_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, cfg, _ = _host(tmp_path, v2=False)
    good = NodeSLOSpec(
        resource_used_threshold_with_be=ResourceThresholdStrategy(
            enable=True, cpu_suppress_threshold_percent=60, cpu_suppress_policy="cfsQuota"
        )
    )
    settings = Settings(good)
    loop = _loop(cfg, settings, Clock())
    assert loop.settings().suppress.threshold_percent == 60
    settings.slo = NodeSLOSpec(
        resource_used_threshold_with_be=ResourceThresholdStrategy(
            enable=True, cpu_suppress_threshold_percent=165
        )
    )
    with caplog.at_level(logging.ERROR):
        kept = loop.settings()
    assert kept.suppress.threshold_percent == 60
    assert kept.suppress.policy == "cfsQuota"
    assert "cpuSuppressThresholdPercent" in caplog.text
    assert "165" in caplog.text


async def test_batch_resources_run_on_their_interval_and_reach_the_node(tmp_path: Path) -> None:
    host, cfg, _ = _host(tmp_path, v2=False)
    clock = Clock()
    loop = _loop(cfg, Settings(), clock)
    loop.base_settings = type(loop.base_settings)(colocation=ColocationSettings(enable=True))
    published: list[ResourceList | None] = []
    loop.on_node_resources = published.append
    for step in range(1, 13):
        clock.now += 1
        host.write("/proc/stat", f"cpu  {100 * step} 0 0 {300 * step} 0 0 0 0 0 0\n")
        await loop.run_once()
    # First run at once, the next one 10 s later.
    assert len(published) == 2
    assert published[0] is not None
    assert set(published[0]) == {
        "kubernetes.io/batch-cpu",
        "kubernetes.io/batch-memory",
        "kubernetes.io/mid-cpu",
        "kubernetes.io/mid-memory",
    }


@dataclass
class Evicting:
    """A strategy that wants one pod gone, every pass."""

    victim: Pod
    name: str = "test_evict"

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        return Outcome(
            evictions=(Eviction(self.victim, "BEMemoryEvict", "memory pressure", self.name),)
        )


@dataclass
class Broken:
    name: str = "broken"

    def plan(self, snapshot: NodeSnapshot) -> Outcome:
        raise RuntimeError("strategy bug")


@dataclass
class RecordingEvictor:
    seen: list[Eviction] = field(default_factory=list)

    async def evict(self, eviction: Eviction) -> bool:
        self.seen.append(eviction)
        return True


async def test_evictions_go_to_the_evictor_and_a_broken_strategy_stops_nothing(
    tmp_path: Path,
) -> None:
    _, cfg, _ = _host(tmp_path, v2=False)
    loop = _loop(cfg, Settings(), Clock())
    victim = _pod("spark-executor")
    evictor = RecordingEvictor()
    loop.strategies = [Broken(), Evicting(victim), *loop.strategies]
    loop.evictor = evictor
    result = await loop.run_once()
    assert [e.pod.metadata.name for e in evictor.seen] == ["spark-executor"]
    assert result.evicted == ("batch/spark-executor",)
    assert any(w.strategy == "cpuset_pool" for w in result.outcome.writes)


async def test_every_pass_result_reaches_the_pass_hook(tmp_path: Path) -> None:
    _, cfg, _ = _host(tmp_path, v2=False)
    clock = Clock()
    loop = _loop(cfg, Settings(), clock)
    seen: list[PassResult] = []
    loop.on_pass = seen.append
    first = await loop.run_once()
    clock.now += 1
    second = await loop.run_once()
    assert seen == [first, second], "the hook sees what run_once returns, once per pass"
    assert first.results, "the first pass writes the pools: its write results are there to count"


async def test_steady_passes_over_the_same_pods_still_repair_drift(tmp_path: Path) -> None:
    """The pod source hands out the same tuple pass after pass: values changed behind the
    agent's back are put back once the writer's cache refreshes, and a new pod list is
    followed at once."""
    host, cfg, dirs = _host(tmp_path, v2=False)
    clock = Clock()
    info = detect.detect(cfg.host, cfg.cgroup)
    node = build_node("node-1", FACTS, heartbeat=EPOCH, ready_since=EPOCH, cgroup=info)
    pods = tuple(p for p in PODS if isinstance(p, Pod))
    listed = [pods]
    loop = service.build_loop(
        cfg,
        node="node-1",
        cgroup=info,
        pods=lambda: listed[0],
        node_object=lambda: node,
        nodeslo=Settings().current,
        clock=clock,
    )
    assert (await loop.run_once()).written
    clock.now += 1
    assert (await loop.run_once()).written == 0
    server, web = dirs["inference/server"], dirs["web/nginx"]
    cpuset = host.cgroup_root / "cpuset" / server / "cpuset.cpus"
    quota = host.cgroup_root / "cpu,cpuacct" / server / "cpu.cfs_quota_us"
    assert (cpuset.read_text().strip(), quota.read_text().strip()) == ("1", "-1")
    cpuset.write_text("0-3\n")
    quota.write_text("50000\n")
    clock.now += 1
    assert (await loop.run_once()).written == 0, "trusted while the cache is fresh"
    clock.now += cfg.qos.force_update_seconds
    assert (await loop.run_once()).written == 2
    assert (cpuset.read_text().strip(), quota.read_text().strip()) == ("1", "-1")

    web_cpuset = host.cgroup_root / "cpuset" / web / "cpuset.cpus"
    assert web_cpuset.read_text().strip() == "0,2-3", "CPU 1 is bound to the LSR pod"
    listed[0] = tuple(p for p in pods if p.metadata.name != "inference")
    clock.now += 1
    await loop.run_once()
    assert web_cpuset.read_text().strip() == "0-3"


@pytest.mark.slow
def test_agent_run_on_its_own_enforces_qos_tells_systemd_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    host, _, dirs = _host(tmp_path, v2=False)
    quota = host.cgroup_root / "cpu,cpuacct" / dirs["inference/server"] / "cpu.cfs_quota_us"
    quota.write_text("100000\n")
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[host]\nroot = "{host.root}"\n[cgroup]\nroot = "{host.cgroup_root}"\n'
        '[report]\ntransport = "none"\n[metrics]\naddress = "off"\n'
        f'[pods]\nsource = "file"\nfile = "{EXAMPLES / "pods.yaml"}"\n'
        f'[qos]\ninterval = 0.2\nnodeslo_file = "{EXAMPLES / "nodeslo.yaml"}"\n'
    )
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(30)
    process = subprocess.Popen(
        koordpy_command("agent", "run", "--config", str(config), "--node-name", "node-1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify")},
    )
    try:
        # systemd's Type=notify: READY once the first report is out.
        assert notify.recv(256) == b"READY=1"
        deadline = time.monotonic() + 30
        while quota.read_text().strip() != "-1" and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.1)
        # The LSR pod is bound to CPU 1: its quota is lifted, its cpuset is its own.
        assert quota.read_text().strip() == "-1"
        cpuset = host.cgroup_root / "cpuset" / dirs["inference/server"] / "cpuset.cpus"
        assert cpuset.read_text().strip() == "1"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert notify.recv(256) == b"STOPPING=1"
    finally:
        notify.close()
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
