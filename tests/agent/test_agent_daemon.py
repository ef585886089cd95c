"""The agent daemon: reports Node and Device on the bus, heartbeats, stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agent import daemon
from agent.config import (
    AgentConfig,
    DevicesSection,
    MetricsSection,
    PodsSection,
    QoSSection,
    ReportSection,
)
from agent.devices import base, simulated
from agent.devices import metrics as device_metrics
from agent.errors import ConfigError, TransientError, Unsupported
from agent.node import LABEL_CGROUP_DRIVER, LABEL_CGROUP_VERSION, HostFacts
from apis.codec import decode_json
from apis.core import Node
from apis.meta import REPORTED_AT_ANNOTATION, ObjectMeta
from apis.scheduling import Device
from apis.slo import NodeMetric
from koordpy import cli
from runtime import exposition, lifecycle
from runtime.bus import AgentStatus, Bus, node_topic
from tests.crdschema import schema_errors, validator
from tests.fakes.host import FakeHost
from tests.fakes.publisher import RecordingPublisher

GIB = 1 << 30
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FACTS = HostFacts(
    hostname="box",
    cpus=64,
    memory=256 * GIB,
    ephemeral_storage=500 * GIB,
    kernel="6.1.0",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Scripted:
    """A probe whose answers the test sets; raises ``error`` once it is set."""

    name = "scripted"

    def __init__(self, result: base.ProbeResult) -> None:
        self.result = result
        self.error: BaseException | None = None
        self.calls = 0

    async def probe(self) -> base.ProbeResult:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.result


def h100(node: str) -> base.ProbeResult:
    return simulated.simulate((simulated.PROFILES["nvidia-h100"],), node)


def status_of(bus: Bus, node: str) -> AgentStatus:
    (message,) = bus.retained(node_topic(node, "status"))
    return msgspec.json.decode(message.payload, type=AgentStatus)


def retained(bus: Bus, node: str, leaf: str) -> bytes:
    (message,) = bus.retained(node_topic(node, leaf))
    return message.payload


async def test_agent_reports_on_the_bus_and_goes_offline_on_stop(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.use_v2()
    host.mkdir_cgroup("kubepods.slice")
    cfg = msgspec.structs.replace(host.config(), devices=DevicesSection(simulate=("nvidia-h100",)))
    bus, stop, ready = Bus(), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        daemon.run(cfg, bus=bus, stop=stop, node="sim-h100", facts=lambda: FACTS, ready=ready)
    )
    async with asyncio.timeout(10):
        await ready.wait()
    assert status_of(bus, "sim-h100").state == "online"
    node = decode_json(retained(bus, "sim-h100", "node"), Node)
    assert node.metadata.name == "sim-h100"
    assert node.status.capacity["nvidia.com/gpu"] == 8
    assert node.status.capacity["cpu"] == 64_000
    assert node.metadata.labels[LABEL_CGROUP_VERSION] == "v2"
    assert node.metadata.labels[LABEL_CGROUP_DRIVER] == "systemd"
    device = decode_json(retained(bus, "sim-h100", "device"), Device)
    assert len(device.spec.devices) == 8
    assert REPORTED_AT_ANNOTATION in device.metadata.annotations
    stop.set()
    async with asyncio.timeout(10):
        await task
    offline = status_of(bus, "sim-h100")
    assert offline.state == "offline"
    assert offline.since is not None, "a clean stop says when"


async def test_several_simulated_nodes_share_one_bus() -> None:
    bus, stop = Bus(), asyncio.Event()
    registry = CollectorRegistry()
    counter = lifecycle.restarts_counter(registry)
    profiles = {
        "sim-h100": "nvidia-h100",
        "sim-910b": "ascend-910b3",
        "sim-c500": "metax-c500-sgpu",
    }
    readies = {name: asyncio.Event() for name in profiles}
    tasks = [
        asyncio.create_task(
            daemon.run(
                AgentConfig(),
                bus=bus,
                stop=stop,
                node=name,
                probes=[simulated.SimulatedProbe((simulated.PROFILES[profile],), name)],
                facts=lambda: FACTS,
                detect_cgroups=False,
                restarts_metric=counter,
                ready=readies[name],
            )
        )
        for name, profile in profiles.items()
    ]
    async with asyncio.timeout(10):
        for event in readies.values():
            await event.wait()
    capacity = {
        name: decode_json(retained(bus, name, "node"), Node).status.capacity for name in profiles
    }
    assert capacity["sim-h100"]["nvidia.com/gpu"] == 8
    assert capacity["sim-910b"]["huawei.com/Ascend910"] == 8
    assert capacity["sim-c500"]["metax-tech.com/sgpu"] == 128
    stop.set()
    async with asyncio.timeout(10):
        await asyncio.gather(*tasks)
    assert {status_of(bus, name).state for name in profiles} == {"offline"}


def make_reporter(
    probe: Scripted, publisher: RecordingPublisher, clock: Clock, **kwargs: float
) -> daemon.Reporter:
    settings = {"interval": 10.0, "heartbeat": 60.0, "probe_timeout": 5.0, **kwargs}
    return daemon.Reporter(
        node="n1",
        publisher=publisher,
        probes=[probe],
        facts=lambda: FACTS,
        cgroup=None,
        clock=clock,
        **settings,
    )


async def test_unchanged_reports_are_not_sent_until_the_heartbeat_is_due() -> None:
    probe, publisher, clock = Scripted(h100("n1")), RecordingPublisher(), Clock(T0)
    # The Node's heartbeat alone (the Device's own cadence is tested below).
    reporter = make_reporter(probe, publisher, clock, device_interval=3600.0)
    await reporter.report()
    assert publisher.leaves() == ["node", "device"]
    clock.advance(10)
    await reporter.report()
    assert publisher.leaves() == ["node", "device"], "nothing changed: nothing sent"
    clock.advance(55)
    await reporter.report()
    assert publisher.leaves() == ["node", "device", "node"], "heartbeat refresh, Node only"
    node = publisher.sent[-1][1]
    assert isinstance(node, Node)
    ready = node.condition("Ready")
    assert ready is not None
    assert ready.last_heartbeat_time == T0 + timedelta(seconds=65)
    assert ready.last_transition_time == T0


async def test_a_device_change_is_sent_with_a_new_report_time() -> None:
    probe, publisher, clock = Scripted(h100("n1")), RecordingPublisher(), Clock(T0)
    reporter = make_reporter(probe, publisher, clock)
    await reporter.report()
    first = reporter.last_device
    assert first is not None
    clock.advance(5)
    devices = tuple(msgspec.structs.replace(d, health=d.minor != 0) for d in probe.result.devices)
    probe.result = dataclasses.replace(probe.result, devices=devices)
    await reporter.report()
    assert publisher.leaves() == ["node", "device", "node", "device"]
    device = reporter.last_device
    node = reporter.last_node
    assert device is not None
    assert node is not None
    assert (
        device.metadata.annotations[REPORTED_AT_ANNOTATION]
        == (T0 + timedelta(seconds=5)).isoformat()
    )
    assert first.metadata.annotations[REPORTED_AT_ANNOTATION] == T0.isoformat()
    assert node.status.capacity["nvidia.com/gpu"] == 7


async def test_trigger_reports_before_the_next_tick() -> None:
    probe, publisher = Scripted(h100("n1")), RecordingPublisher()
    reporter = make_reporter(probe, publisher, Clock(T0), interval=3600.0)
    task = asyncio.create_task(reporter.run())
    try:
        async with asyncio.timeout(10):
            await publisher.changed.wait()  # the first tick reports at once
            publisher.changed.clear()
            probe.result = base.ProbeResult()
            reporter.trigger()
            await publisher.changed.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    nodes = [obj for leaf, obj in publisher.sent if isinstance(obj, Node)]
    assert len(nodes) == 2
    assert nodes[0].status.capacity["nvidia.com/gpu"] == 8
    assert "nvidia.com/gpu" not in nodes[1].status.capacity


async def test_a_fatal_error_leaves_the_will_behind() -> None:
    bus, stop, ready = Bus(), asyncio.Event(), asyncio.Event()
    probe = Scripted(h100("n1"))
    cfg = AgentConfig(report=ReportSection(interval=0.01))
    task = asyncio.create_task(
        daemon.run(
            cfg,
            bus=bus,
            stop=stop,
            node="n1",
            probes=[probe],
            facts=lambda: FACTS,
            detect_cgroups=False,
            ready=ready,
        )
    )
    async with asyncio.timeout(10):
        await ready.wait()
    probe.error = ConfigError("probe configuration vanished")
    with pytest.raises(ConfigError):
        async with asyncio.timeout(10):
            await task
    status = status_of(bus, "n1")
    assert status.state == "offline"
    assert status.since is None, "the will, not a clean goodbye"


async def test_a_failing_probe_fails_the_start_before_anything_is_published() -> None:
    bus = Bus()
    probe = Scripted(base.ProbeResult())
    probe.error = RuntimeError("driver wedged")
    with pytest.raises(RuntimeError, match="wedged"):
        await daemon.run(
            AgentConfig(),
            bus=bus,
            stop=asyncio.Event(),
            node="n1",
            probes=[probe],
            facts=lambda: FACTS,
            detect_cgroups=False,
        )
    assert list(bus.retained()) == []


async def test_missing_hardware_degrades_to_an_empty_device() -> None:
    bus, stop, ready = Bus(), asyncio.Event(), asyncio.Event()
    probe = Scripted(base.ProbeResult())
    probe.error = Unsupported("no NVML")
    task = asyncio.create_task(
        daemon.run(
            AgentConfig(),
            bus=bus,
            stop=stop,
            node="n1",
            probes=[probe],
            facts=lambda: FACTS,
            detect_cgroups=False,
            ready=ready,
        )
    )
    async with asyncio.timeout(10):
        await ready.wait()
    assert decode_json(retained(bus, "n1", "device"), Device).spec.devices == ()
    stop.set()
    async with asyncio.timeout(10):
        await task


# --- Device cadence and device metrics ----------------------------------------------------


def device_times(publisher: RecordingPublisher) -> list[str]:
    return [
        obj.metadata.annotations[REPORTED_AT_ANNOTATION]
        for leaf, obj in publisher.sent
        if leaf == "device"
    ]


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


async def test_an_unchanged_device_is_published_again_every_30_seconds() -> None:
    probe, publisher, clock = Scripted(h100("n1")), RecordingPublisher(), Clock(T0)
    reporter = make_reporter(probe, publisher, clock)
    await reporter.report()
    for _ in range(2):
        clock.advance(10)
        await reporter.report()
    assert device_times(publisher) == [at(0)], "nothing changed within 30 s"
    clock.advance(10)
    await reporter.report()
    assert publisher.leaves() == ["node", "device", "device"], "the Node waits for its heartbeat"
    assert device_times(publisher) == [at(0), at(30)]
    first, again = (obj for leaf, obj in publisher.sent if leaf == "device")
    assert isinstance(first, Device)
    assert isinstance(again, Device)
    assert again.spec == first.spec


async def test_a_device_change_is_published_at_once_and_restarts_the_30_seconds() -> None:
    probe, publisher, clock = Scripted(h100("n1")), RecordingPublisher(), Clock(T0)
    reporter = make_reporter(probe, publisher, clock)
    await reporter.report()
    clock.advance(5)
    sick = tuple(msgspec.structs.replace(d, health=d.minor != 3) for d in probe.result.devices)
    probe.result = dataclasses.replace(probe.result, devices=sick)
    await reporter.report()
    assert device_times(publisher) == [at(0), at(5)]
    clock.advance(25)
    await reporter.report()
    assert device_times(publisher) == [at(0), at(5)], "30 s after the change, not the start"
    clock.advance(5)
    await reporter.report()
    assert device_times(publisher) == [at(0), at(5), at(35)]


async def test_the_device_cadence_holds_when_checks_are_rarer() -> None:
    probe, publisher, clock = Scripted(h100("n1")), RecordingPublisher(), Clock(T0)
    reporter = make_reporter(probe, publisher, clock, interval=3600.0, device_interval=0.01)
    task = asyncio.create_task(reporter.run())
    try:
        async with asyncio.timeout(10):
            await publisher.changed.wait()
            publisher.changed.clear()
            clock.advance(1)
            await publisher.changed.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert device_times(publisher)[:2] == [at(0), at(1)]


async def test_failed_probe_runs_are_counted_and_the_last_readings_kept() -> None:
    registry = CollectorRegistry()
    probe, publisher = Scripted(h100("n1")), RecordingPublisher()
    with device_metrics.exported(registry, "n1") as exported:
        reporter = daemon.Reporter(
            node="n1",
            publisher=publisher,
            probes=[probe],
            facts=lambda: FACTS,
            cgroup=None,
            interval=10.0,
            heartbeat=60.0,
            probe_timeout=5.0,
            observe=exported.observe,
            clock=Clock(T0),
        )
        exported.results = lambda: reporter.last_results
        await reporter.report()
        probe.error = TransientError("driver busy")
        with pytest.raises(TransientError):
            await reporter.report()
        on_probe = {"node": "n1", "probe": "scripted"}
        runs = "koordpy_device_probe_duration_seconds_count"
        assert registry.get_sample_value(runs, on_probe) == 2
        errors = "koordpy_device_probe_errors_total"
        assert registry.get_sample_value(errors, {**on_probe, "kind": "transient"}) == 1
        (first, *_) = probe.result.readings
        healthy = registry.get_sample_value(
            "koordpy_device_healthy",
            {
                "node": "n1",
                "vendor": "nvidia",
                "model": "H100-80GB-HBM3",
                "minor": "0",
                "uuid": first.uuid,
            },
        )
        assert healthy == 1.0, "the last good readings stay while the probe fails"


def healthy_devices(registry: CollectorRegistry, node: str) -> int:
    text = generate_latest(registry).decode()
    return sum(
        1
        for family in text_string_to_metric_families(text)
        if family.name == "koordpy_device_healthy"
        for sample in family.samples
        if sample.labels["node"] == node and sample.value == 1.0
    )


async def test_the_agent_exports_its_device_metrics_while_it_runs() -> None:
    registry, bus, stop, ready = CollectorRegistry(), Bus(), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        daemon.run(
            AgentConfig(),
            bus=bus,
            stop=stop,
            node="sim-910b",
            probes=[simulated.probe_for("sim-910b", "ascend-910b3")],
            facts=lambda: FACTS,
            detect_cgroups=False,
            registry=registry,
            ready=ready,
        )
    )
    async with asyncio.timeout(10):
        await ready.wait()
    assert healthy_devices(registry, "sim-910b") == 8
    runs = registry.get_sample_value(
        "koordpy_device_probe_duration_seconds_count", {"node": "sim-910b", "probe": "simulated"}
    )
    assert runs is not None
    assert runs >= 1
    stop.set()
    async with asyncio.timeout(10):
        await task
    assert healthy_devices(registry, "sim-910b") == 0
    assert (
        registry.get_sample_value(
            "koordpy_device_probe_duration_seconds_count",
            {"node": "sim-910b", "probe": "simulated"},
        )
        is None
    ), "the collector leaves with the agent"


# --- metrics: collector, NodeMetric, exporter, health -----------------------------------------


def families(registry: CollectorRegistry) -> dict[str, list[Sample]]:
    text = exposition.render(registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def sample_value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """The value of the first sample named ``name`` with ``labels`` (None: no such sample)."""
    for samples in families(registry).values():
        for sample in samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


async def wait_for(check: Callable[[], object]) -> None:
    async with asyncio.timeout(15):
        while not check():  # noqa: ASYNC110 - conditions no event signals (metrics, bus state)
            await asyncio.sleep(0.05)


def has_retained(bus: Bus, node: str, leaf: str) -> bool:
    return bool(list(bus.retained(node_topic(node, leaf))))


FAST = MetricsSection(collect_interval=0.05, report_interval=3600.0)


async def test_a_simulated_node_publishes_a_nodemetric_with_its_devices(
    shared_dir: Path,
) -> None:
    bus, stop, ready = Bus(), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        daemon.run(
            AgentConfig(metrics=FAST),
            bus=bus,
            stop=stop,
            node="sim-h100",
            probes=[simulated.probe_for("sim-h100", "nvidia-h100")],
            facts=lambda: FACTS,
            detect_cgroups=False,
            ready=ready,
        )
    )
    try:
        # The first NodeMetric as soon as a tick measured the node's CPU, long before the
        # report interval (an hour here).
        await wait_for(lambda: has_retained(bus, "sim-h100", "nodemetric"))
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await task
    raw = json.loads(retained(bus, "sim-h100", "nodemetric"))
    assert schema_errors(validator(shared_dir, "slo.koordinator.sh/NodeMetric"), raw) == []
    metric = decode_json(retained(bus, "sim-h100", "nodemetric"), NodeMetric)
    assert metric.metadata.name == "sim-h100"
    info = metric.status.node_metric
    assert info is not None
    assert info.node_usage.resources["memory"] > 0
    assert "cpu" in info.node_usage.resources
    assert len(info.node_usage.devices) == 8, "one entry per simulated GPU"
    assert metric.status.pods_metric == (), "a simulated node runs no pods"


async def test_the_agent_exports_usage_and_its_own_health_while_it_runs() -> None:
    registry, bus, stop, ready = CollectorRegistry(), Bus(), asyncio.Event(), asyncio.Event()
    counter = lifecycle.restarts_counter(registry)
    task = asyncio.create_task(
        daemon.run(
            AgentConfig(metrics=FAST),
            bus=bus,
            stop=stop,
            node="n1",
            probes=[simulated.probe_for("n1", "ascend-910b3")],
            facts=lambda: FACTS,
            detect_cgroups=False,
            restarts_metric=counter,
            registry=registry,
            ready=ready,
        )
    )
    try:
        # Present is enough: the first NodeMetric's CPU may be 0 on an idle machine.
        await wait_for(
            lambda: sample_value(registry, "koordlet_node_metric_node_usage") is not None
        )
        got = families(registry)
        # This machine's /proc: the node's memory is in use, its CPU measured.
        memory = sample_value(registry, "koordlet_node_used_memory_bytes", node="n1")
        assert memory is not None
        assert memory > 0
        assert sample_value(registry, "koordlet_node_used_cpu_cores", node="n1") is not None
        assert sample_value(registry, "koordlet_start_time", node="n1") == pytest.approx(
            time.time(), abs=60
        )
        reports = "koordpy_agent_reports_total"
        assert sample_value(registry, reports, node="n1", leaf="node", result="sent") == 1
        assert sample_value(registry, reports, node="n1", leaf="nodemetric", result="sent") == 1
        ticks = sample_value(registry, "koordpy_agent_collect_duration_seconds_count", node="n1")
        assert ticks is not None
        assert ticks >= 2
        assert "koordpy_device_healthy" in got, "device metrics beside the usage"
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await task
    assert sample_value(registry, "koordlet_node_used_cpu_cores", node="n1") is None, (
        "the usage series leave with the agent"
    )


class FakeNode:
    """A cgroup v1 host with 4 CPUs and one BE pod whose counters advance as time passes."""

    UID = "0123abcd-0000-4000-8000-000000000001"
    CID = "containerd://" + "c1" * 32

    def __init__(self, base: Path) -> None:
        self.host = FakeHost(base)
        self.host.use_v1()
        self.host.write("/proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 6000000 kB\n")
        self.host.write("/sys/devices/system/cpu/online", "0-3\n")
        for cpu in range(4):
            topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
            self.host.write(f"{topology}/core_id", f"{cpu}\n")
            self.host.write(f"{topology}/physical_package_id", "0\n")
        self.host.write("/sys/devices/system/node/node0/cpulist", "0-3\n")
        self.pod_dir = f"kubepods/besteffort/pod{self.UID}"
        self.cgroups = [self.pod_dir, f"{self.pod_dir}/{self.CID.split('//')[1]}"]
        for cgroup in ["kubepods", "kubepods/besteffort", *self.cgroups]:
            self.host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.cfs_quota_us", "-1\n")
            self.host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.cfs_period_us", "100000\n")
            self.host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.shares", "2\n")
            self.host.write_cgroup(f"cpu,cpuacct/{cgroup}", "cpu.stat", "nr_periods 0\n")
            self.host.write_cgroup(
                f"memory/{cgroup}",
                "memory.stat",
                "total_inactive_anon 1000\ntotal_active_anon 2000\ntotal_unevictable 0\n"
                "total_inactive_file 500\n",
            )
            self.host.write_cgroup(f"cpuset/{cgroup}", "cpuset.cpus", "0-3\n")
            self.host.write_cgroup(f"cpuset/{cgroup}", "cpuset.mems", "0\n")
        self.ticks = 0
        self.advance()
        pods = {
            "apiVersion": "v1",
            "kind": "PodList",
            "items": [
                {
                    "metadata": {"name": "batch-1", "namespace": "jobs", "uid": self.UID,
                                 "labels": {"koordinator.sh/qosClass": "BE"}},
                    "spec": {"nodeName": "n1", "containers": [
                        {"name": "main", "resources": {"requests": {"memory": "1Gi"}}}]},
                    "status": {"phase": "Running", "qosClass": "BestEffort",
                               "containerStatuses": [{"name": "main", "containerID": self.CID,
                                                      "ready": True,
                                                      "state": {"running": {}}}]},
                }
            ],
        }  # fmt: skip
        self.pods_file = base / "pods.json"
        self.pods_file.write_text(json.dumps(pods), encoding="utf-8")

    def advance(self) -> None:
        """10 ms of time: the pod used half a CPU of it, the node two CPUs."""
        self.ticks += 1
        cpu_line = f"cpu  {2 * self.ticks} 0 0 {2 * self.ticks} 0 0 0 0 0 0\n"
        per_cpu = "".join(
            f"cpu{c} {self.ticks // 2} 0 0 {self.ticks // 2} 0 0 0 0 0 0\n" for c in range(4)
        )
        self.host.write("/proc/stat", cpu_line + per_cpu)
        for cgroup in self.cgroups:
            self.host.write_cgroup(
                f"cpu,cpuacct/{cgroup}", "cpuacct.usage", f"{self.ticks * 5_000_000}\n"
            )

    def config(self) -> AgentConfig:
        return msgspec.structs.replace(
            self.host.config(),
            metrics=MetricsSection(collect_interval=0.05, report_interval=0.2),
            pods=PodsSection(source="file", file=str(self.pods_file), file_interval=0.05),
            qos=QoSSection(interval=0.05),
        )


async def test_qos_and_metrics_share_one_collector_over_the_pods(
    tmp_path: Path, shared_dir: Path
) -> None:
    fake = FakeNode(tmp_path)
    registry, bus, stop, ready = CollectorRegistry(), Bus(), asyncio.Event(), asyncio.Event()

    async def advance() -> None:
        while True:
            await asyncio.sleep(0.01)
            fake.advance()

    ticking = asyncio.create_task(advance())
    task = asyncio.create_task(
        daemon.run(
            fake.config(),
            bus=bus,
            stop=stop,
            node="n1",
            probes=[],
            facts=lambda: FACTS,
            qos=True,
            registry=registry,
            ready=ready,
        )
    )
    pod = {"node": "n1", "pod_uid": FakeNode.UID, "pod_name": "batch-1", "pod_namespace": "jobs"}

    def reports_sent() -> float | None:
        return sample_value(
            registry, "koordpy_agent_reports_total", node="n1", leaf="nodemetric", result="sent"
        )

    def reported_pods() -> list[str]:
        if not has_retained(bus, "n1", "nodemetric"):
            return []
        metric = decode_json(retained(bus, "n1", "nodemetric"), NodeMetric)
        return [p.name for p in metric.status.pods_metric]

    try:
        await wait_for(lambda: sample_value(registry, "koordlet_pod_used_cpu_cores", **pod))
        # The pod as the collector measured it: CPU positive (its counter advances; the rate
        # depends on the event loop's timing). Its requests from the pod source.
        cpu = sample_value(registry, "koordlet_pod_used_cpu_cores", **pod)
        assert cpu is not None
        assert cpu > 0
        requests = sample_value(
            registry,
            "koordlet_container_resource_requests",
            container_name="main",
            container_id=FakeNode.CID,
            resource="memory",
            unit="byte",
        )
        assert requests == GIB
        # The QoS loop ran on the same ticks (its gauges are exported), and the share pools
        # it draws are measured by the collector.
        assert sample_value(registry, "koordlet_cpuset_share_pool_cpu_cores", node="n1") == 4
        shared = sample_value(registry, "koordlet_cpuset_share_pool_used_cpu_cores", node="n1")
        assert shared is not None
        assert shared >= 0
        # NodeMetric every report interval, with the pod once it was measured; the pod may be
        # in the first one already, so wait for the next one too.
        await wait_for(lambda: reported_pods() == ["batch-1"])
        await wait_for(lambda: (reports_sent() or 0) >= 2)
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await task
        ticking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticking
    raw = json.loads(retained(bus, "n1", "nodemetric"))
    assert schema_errors(validator(shared_dir, "slo.koordinator.sh/NodeMetric"), raw) == []
    sent = reports_sent()
    assert sent is not None
    assert sent >= 2


async def test_nodemetric_reports_follow_the_interval() -> None:
    publisher = RecordingPublisher()
    measured = asyncio.Event()
    built = 0

    def build() -> NodeMetric:
        nonlocal built
        built += 1
        return NodeMetric(metadata=ObjectMeta(name="n1", labels={"n": str(built)}))

    reporter = daemon.NodeMetricReporter(
        node="n1", publisher=publisher, build=build, measured=measured, interval=0.05
    )
    task = asyncio.create_task(reporter.run())
    try:
        await asyncio.sleep(0.2)
        assert publisher.sent == [], "nothing before a tick measured the node"
        measured.set()
        await wait_for(lambda: len(publisher.sent) >= 3)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert publisher.leaves()[:3] == ["nodemetric"] * 3
    assert reporter.last is publisher.sent[-1][1]


# --- koordpy agent ------------------------------------------------------------------------


def write_config(tmp_path: Path, host: FakeHost, extra: str = "") -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        f'[host]\nroot = "{host.root}"\n[cgroup]\nroot = "{host.cgroup_root}"\n{extra}',
        encoding="utf-8",
    )
    return path


def test_agent_devices_prints_the_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = FakeHost(tmp_path)
    config = write_config(tmp_path, host, '[devices]\nsimulate = ["ascend-310p3-300i-duo"]\n')
    code = cli.main(
        ["agent", "devices", "--config", str(config), "--node-name", "duo", "-o", "json"]
    )
    assert code == 0
    device = decode_json(capsys.readouterr().out, Device)
    assert device.metadata.name == "duo"
    assert len(device.spec.devices) == 8


def test_agent_devices_without_hardware_prints_an_empty_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = FakeHost(tmp_path)
    config = write_config(tmp_path, host)
    assert cli.main(["agent", "devices", "--config", str(config), "--node-name", "bare"]) == 0
    out = capsys.readouterr().out
    assert "kind: Device" in out
    assert "name: bare" in out


def test_agent_devices_json_is_the_wire_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = FakeHost(tmp_path)
    config = write_config(tmp_path, host, '[devices]\nsimulate = ["nvidia-h100"]\n')
    assert cli.main(["agent", "devices", "--config", str(config), "-o", "json"]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["apiVersion"] == "scheduling.koordinator.sh/v1alpha1"
    assert raw["spec"]["devices"][0]["resources"]["koordinator.sh/gpu-memory"] == "81559Mi"


def test_agent_devices_on_a_host_without_accelerators_is_a_valid_empty_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    host = FakeHost(tmp_path)  # no PCI devices under the host root: no hardware probe applies
    config = write_config(tmp_path, host)
    assert (
        cli.main(["agent", "devices", "--config", str(config), "--node-name", "bare", "-o", "json"])
        == 0
    )
    raw = json.loads(capsys.readouterr().out)
    assert schema_errors(validator(shared_dir, "scheduling.koordinator.sh/Device"), raw) == []
    assert raw["metadata"]["name"] == "bare"
    assert raw["metadata"]["ownerReferences"][0]["name"] == "bare"
    assert raw["spec"].get("devices", []) == []
