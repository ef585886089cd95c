"""The agent's usage series (koordlet's names) and its own health metrics, as a scrape
sees them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from agent.cgroups import detect
from agent.cgroups.files import CgroupFiles
from agent.cgroups.resources import Resource
from agent.cgroups.writer import CgroupWriter, WriteStatus
from agent.metrics import exporter, health
from agent.metrics.snapshot import (
    CgroupUsage,
    ContainerUsage,
    HostAppUsage,
    MetricsSnapshot,
    PodUsage,
    Pressure,
)
from agent.qos.framework import CgroupWrite
from apis import constants as k
from apis.core import (
    Container,
    ContainerStatus,
    Event,
    Pod,
    PodSpec,
    PodStatus,
    ResourceRequirements,
)
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.slo import NodeMetric, NodeMetricInfo, NodeMetricStatus, NUMAMetricInfo, ResourceMap
from runtime import exposition
from tests.fakes.host import FakeHost
from tests.fakes.publisher import RecordingPublisher

GIB = 1 << 30
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CID = "containerd://" + "ab" * 32
PSI = {
    "cpu": Pressure(some=(1.5, 2.0, 3.0)),
    "memory": Pressure(some=(0.5, 0.25, 0.0), full=(0.125, 0.0, 0.0)),
}


def snapshot(node: str = "n1", **changes: object) -> MetricsSnapshot:
    web = PodUsage(
        uid="uid-web",
        name="web",
        namespace="shop",
        qos="LS",
        priority="koord-prod",
        usage=CgroupUsage(
            cpu=1500.0, memory=2 * GIB, working_set=3 * GIB, throttled_ratio=0.25, pressure=PSI
        ),
        containers=(
            ContainerUsage(
                "app",
                CID,
                CgroupUsage(cpu=1250.0, memory=GIB, working_set=GIB + 5, throttled_ratio=0.5),
            ),
            ContainerUsage("sidecar", "", CgroupUsage()),
        ),
    )
    fields: dict[str, object] = {
        "node": node,
        "taken_at": T0,
        "monotonic": 100.0,
        "node_cpu": 12_345.0,
        "node_memory": 64 * GIB,
        "system_cpu": 500.0,
        "system_memory": GIB,
        "node_pressure": PSI,
        "pods": (web,),
        "host_apps": (
            HostAppUsage(
                name='nginx "edge"\\1',
                qos="LS",
                priority="koord-prod",
                usage=CgroupUsage(cpu=250.0, memory=GIB // 2),
            ),
        ),
        "share_pool_cpus": (0, 1, 2, 3),
        "share_pool_cpu": 3200.0,
        "duration": 0.004,
        **changes,
    }
    return MetricsSnapshot(**fields)  # type: ignore[arg-type]


def pod(name: str = "web") -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="shop", uid=f"uid-{name}"),
        spec=PodSpec(
            containers=(
                Container(
                    name="app",
                    resources=ResourceRequirements(
                        requests=ResourceList({"cpu": 500, "memory": GIB, k.RESOURCE_BATCH_CPU: 0}),
                        limits=ResourceList({"cpu": 2000, "memory": 2 * GIB, "nvidia.com/gpu": 1}),
                    ),
                ),
                Container(name="sidecar"),
            )
        ),
        status=PodStatus(
            phase="Running", container_statuses=(ContainerStatus(name="app", container_id=CID),)
        ),
    )


def nodemetric() -> NodeMetric:
    usage = ResourceMap(resources=ResourceList({"cpu": 11_000, "memory": 60 * GIB}))
    system = ResourceMap(resources=ResourceList({"cpu": 400, "memory": GIB}))
    return NodeMetric(
        metadata=ObjectMeta(name="n1"),
        status=NodeMetricStatus(
            update_time=T0,
            node_metric=NodeMetricInfo(
                node_usage=usage,
                system_usage=system,
                numa_usages=(NUMAMetricInfo(numa_node_id=1, node_usage=usage),),
            ),
        ),
    )


def scrape(registry: CollectorRegistry) -> dict[str, list[Sample]]:
    text = exposition.render(registry).decode()
    families: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in families, f"{family.name} appears twice"
        families[family.name] = family.samples
    return families


def value(families: dict[str, list[Sample]], name: str, **labels: str) -> float:
    found = [
        s.value
        for s in families[name]
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_node_series_in_koordlet_names_and_units() -> None:
    registry = CollectorRegistry()
    snap = snapshot()
    with exporter.exported(registry, "n1", latest=lambda: snap, start_time=1_700_000_000.0):
        got = scrape(registry)
    assert value(got, "koordlet_start_time", node="n1") == 1_700_000_000.0
    assert value(got, "koordlet_node_used_cpu_cores", node="n1") == pytest.approx(12.345)
    assert value(got, "koordlet_node_used_memory_bytes", node="n1") == 64 * GIB
    assert value(got, "koordlet_node_system_used_cpu_cores", node="n1") == 0.5
    assert value(got, "koordlet_node_system_used_memory_bytes", node="n1") == GIB
    assert value(got, "koordlet_cpuset_share_pool_used_cpu_cores", node="n1") == 3.2
    assert "koordlet_cpuset_be_share_pool_used_cpu_cores" not in got, "unknown is left out"
    app = {"host_application_name": 'nginx "edge"\\1', "priority_class": "koord-prod", "qos": "LS"}
    assert value(got, "koordlet_host_application_resource_usage", resource="cpu", **app) == 0.25
    assert value(got, "koordlet_host_application_resource_usage", resource="memory", **app) == (
        GIB // 2
    )
    every = [sample for samples in got.values() for sample in samples]
    assert all(sample.labels["node"] == "n1" for sample in every)


def test_pod_and_container_usage_with_their_ids() -> None:
    registry = CollectorRegistry()
    snap = snapshot()
    with exporter.exported(registry, "n1", latest=lambda: snap):
        got = scrape(registry)
    web = {"pod_uid": "uid-web", "pod_name": "web", "pod_namespace": "shop"}
    assert value(got, "koordlet_pod_used_cpu_cores", **web) == 1.5
    assert value(got, "koordlet_pod_used_memory_bytes", **web) == 2 * GIB
    assert value(got, "koordlet_pod_memory_working_set_bytes", **web) == 3 * GIB
    assert value(got, "koordlet_pod_cpu_throttled_ratio", **web) == 0.25
    app = {**web, "container_id": CID, "container_name": "app"}
    assert value(got, "koordlet_container_used_cpu_cores", **app) == 1.25
    assert value(got, "koordlet_container_used_memory_bytes", **app) == GIB
    assert value(got, "koordlet_container_memory_working_set_bytes", **app) == GIB + 5
    assert value(got, "koordlet_container_cpu_throttled_ratio", **app) == 0.5
    assert [s.labels["container_name"] for s in got["koordlet_container_used_cpu_cores"]] == [
        "app"
    ], "the sidecar measured nothing: no series, no zero"


def test_pressure_series_for_node_and_pods() -> None:
    registry = CollectorRegistry()
    snap = snapshot()
    with exporter.exported(registry, "n1", latest=lambda: snap):
        got = scrape(registry)
    pod_psi = got["koordlet_pod_psi"]
    # cpu: some only (no full line: cpu_full_supported false); memory ("mem"): some and full.
    assert len(pod_psi) == 3 + 6
    assert {s.labels["cpu_full_supported"] for s in pod_psi} == {"false"}
    assert {s.labels["psi_resource_type"] for s in pod_psi} == {"cpu", "mem"}
    assert (
        value(
            got,
            "koordlet_pod_psi",
            pod_name="web",
            psi_resource_type="cpu",
            psi_precision="avg60",
            psi_degree="some",
        )
        == 2.0
    )
    assert (
        value(
            got,
            "koordlet_node_psi",
            psi_resource_type="mem",
            psi_precision="avg10",
            psi_degree="full",
        )
        == 0.125
    )
    assert "koordlet_container_psi" not in got, "no container pressure was measured"


def test_requests_and_limits_of_every_container() -> None:
    registry = CollectorRegistry()
    pods = (pod(),)
    with exporter.exported(registry, "n1", pods=lambda: pods):
        got = scrape(registry)
    app = {"pod_uid": "uid-web", "container_id": CID, "container_name": "app"}
    requests = "koordlet_container_resource_requests"
    limits = "koordlet_container_resource_limits"
    assert value(got, requests, resource="cpu", unit="core", **app) == 0.5
    assert value(got, requests, resource="memory", unit="byte", **app) == GIB
    assert value(got, requests, resource=k.RESOURCE_BATCH_CPU, unit="integer", **app) == 0
    assert value(got, limits, resource="cpu", unit="core", **app) == 2.0
    assert value(got, limits, resource="nvidia.com/gpu", unit="integer", **app) == 1
    assert all(s.labels["container_name"] == "app" for s in got[requests]), (
        "a container without requests has no series"
    )


def test_nodemetric_usage_as_last_reported() -> None:
    registry = CollectorRegistry()
    metric = nodemetric()
    with exporter.exported(registry, "n1", nodemetric=lambda: metric):
        got = scrape(registry)
    node_usage = "koordlet_node_metric_node_usage"
    assert value(got, node_usage, resource="cpu", unit="core") == 11.0
    assert value(got, node_usage, resource="memory", unit="byte") == 60 * GIB
    assert value(got, "koordlet_node_metric_system_usage", resource="cpu", unit="core") == 0.4
    numa = "koordlet_node_metric_numa_node_usage"
    assert value(got, numa, numa_node_id="1", resource="cpu", unit="core") == 11.0


def test_nothing_measured_yet_exports_only_the_start_time() -> None:
    registry = CollectorRegistry()
    with exporter.exported(registry, "n1"):
        got = scrape(registry)
    assert set(got) == {"koordlet_start_time"}


def test_a_scrape_renders_the_latest_snapshot_and_reuses_it_until_the_next() -> None:
    registry = CollectorRegistry()
    current = [snapshot()]
    with exporter.exported(registry, "n1", latest=lambda: current[-1]):
        first = exposition.render(registry)
        assert exposition.render(registry) == first
        current.append(snapshot(node_cpu=2000.0))
        got = scrape(registry)
    assert value(got, "koordlet_node_used_cpu_cores") == 2.0


def test_nodes_share_one_exposition_and_leave_it() -> None:
    registry = CollectorRegistry()
    one, two = snapshot("n1"), snapshot("n2", node_cpu=1000.0)
    with exporter.exported(registry, "n1", latest=lambda: one):
        with exporter.exported(registry, "n2", latest=lambda: two):
            got = scrape(registry)  # each family once (checked by scrape)
            assert value(got, "koordlet_node_used_cpu_cores", node="n1") == pytest.approx(12.345)
            assert value(got, "koordlet_node_used_cpu_cores", node="n2") == 1.0
            with pytest.raises(ValueError, match="already exported"):  # noqa: SIM117
                with exporter.exported(registry, "n2"):
                    pass
        got = scrape(registry)
        assert {s.labels["node"] for s in got["koordlet_node_used_cpu_cores"]} == {"n1"}
    assert scrape(registry) == {}, "the exporter leaves with its last node"


def test_families_are_distinct_from_the_qos_gauges() -> None:
    # The QoS loop's gauges (agent.qos strategies) export these under koordlet_.
    qos = {
        "be_suppress_cpu_cores",
        "be_suppress_ls_used_cpu_cores",
        "be_suppress_be_used_cpu_cores",
        "container_scaled_cfs_burst_us",
        "container_scaled_cfs_quota_us",
        "cpuset_share_pool_cpu_cores",
        "cpuset_be_share_pool_cpu_cores",
        "cpuset_share_pool_info",
        "cpuset_be_share_pool_info",
        "node_resource_allocatable",
        "batch_resource_degraded",
        "evict_release_needed",
        "evict_victims",
    }
    names = [family.name for family in exporter.FAMILIES]
    assert len(set(names)) == len(names)
    assert not {f"koordlet_{name}" for name in qos} & set(names)


@pytest.mark.parametrize(
    ("resource", "unit"),
    [
        ("cpu", "core"),
        ("memory", "byte"),
        ("ephemeral-storage", "byte"),
        ("hugepages-2Mi", "byte"),
        (k.RESOURCE_BATCH_CPU, "integer"),
        (k.RESOURCE_BATCH_MEMORY, "byte"),
        ("nvidia.com/gpu", "integer"),
    ],
)
def test_resource_units(resource: str, unit: str) -> None:
    assert exporter.resource_unit(resource) == unit


# --- the agent's own health --------------------------------------------------------------


async def test_reports_are_counted_by_leaf_and_result() -> None:
    registry = CollectorRegistry()
    node = health.health_of(registry).node("n1")
    recording = RecordingPublisher()
    publisher = health.CountingPublisher(recording, node)
    metric = nodemetric()
    assert await publisher.report("nodemetric", metric)
    assert not await publisher.report("nodemetric", metric)
    await publisher.event(Event(metadata=ObjectMeta(name="e1", namespace="default")))

    class Broken(RecordingPublisher):
        async def report(self, leaf: str, obj: object) -> bool:
            raise ConnectionError("broker gone")

    failing = health.CountingPublisher(Broken(), node)
    with pytest.raises(ConnectionError):
        await failing.report("device", metric)
    reports = "koordpy_agent_reports_total"

    def count(leaf: str, result: str) -> float | None:
        return registry.get_sample_value(reports, {"node": "n1", "leaf": leaf, "result": result})

    assert count("nodemetric", "sent") == 1
    assert count("nodemetric", "skipped") == 1
    assert count("events", "sent") == 1
    assert count("device", "failed") == 1
    assert recording.leaves() == ["nodemetric"]


def test_collection_time_is_a_histogram_per_node() -> None:
    registry = CollectorRegistry()
    node = health.health_of(registry).node("n1")
    node.collected(snapshot(duration=0.004))
    node.collected(snapshot(duration=0.3))
    assert health.health_of(registry) is health.health_of(registry), "one set per registry"
    name = "koordpy_agent_collect_duration_seconds"
    assert registry.get_sample_value(f"{name}_count", {"node": "n1"}) == 2
    assert registry.get_sample_value(f"{name}_bucket", {"node": "n1", "le": "0.005"}) == 1
    assert registry.get_sample_value(f"{name}_sum", {"node": "n1"}) == pytest.approx(0.304)


def test_failed_cgroup_writes_are_counted_by_status(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.use_v1()
    host.write_cgroup("cpu,cpuacct/kubepods/besteffort", "cpu.shares", "2\n")
    host.write_cgroup("cpu,cpuacct/kubepods/besteffort", "cpu.cfs_quota_us", "-1\n")
    cfg = host.config()
    info = detect.detect(cfg.host, cfg.cgroup)
    registry = CollectorRegistry()
    writer = CgroupWriter(CgroupFiles(info))
    results = writer.apply(
        [
            CgroupWrite("kubepods/besteffort", Resource.CPU_SHARES, 4, "test"),
            CgroupWrite("kubepods/besteffort/gone", Resource.CPU_SHARES, 2, "test"),
            CgroupWrite("kubepods/besteffort", Resource.CPU_QUOTA, -5, "test"),
        ]
    )
    assert [r.status for r in results] == [
        WriteStatus.WRITTEN,
        WriteStatus.VANISHED,
        WriteStatus.REJECTED,
    ]
    assert health.health_of(registry).node("n1").writes(results) == 2
    errors = "koordpy_agent_cgroup_write_errors_total"
    assert registry.get_sample_value(errors, {"node": "n1", "status": "vanished"}) == 1
    assert registry.get_sample_value(errors, {"node": "n1", "status": "rejected"}) == 1
    assert registry.get_sample_value(errors, {"node": "n1", "status": "written"}) is None
