"""The NodeMetric the agent reports: content, cold start, and the Koordinator CRD schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from agent.config import AgentConfig, MetricsSection
from agent.devices.base import DeviceReading
from agent.metrics.collector import build_collector
from agent.metrics.nodemetric import build_nodemetric
from agent.metrics.snapshot import CgroupUsage, HostAppUsage, MetricsSnapshot, PodUsage
from agent.metrics.windows import Windows
from apis import codec
from apis.constants import RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO
from apis.resources import ResourceList
from apis.slo import NodeMetric
from tests.crdschema import schema_errors, validator
from tests.fakes.host import FakeHost

GIB = 1 << 30
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def nodemetric_schema(shared_dir: Path) -> jsonschema.Draft7Validator:
    return validator(shared_dir, "slo.koordinator.sh/NodeMetric")


def _wire(metric: NodeMetric) -> dict[str, object]:
    document: dict[str, object] = json.loads(codec.encode_json(metric))
    return document


def _pod(
    uid: str, name: str, namespace: str, cpu: float, memory: int, priority: str, qos: str
) -> PodUsage:
    return PodUsage(
        uid=uid,
        name=name,
        namespace=namespace,
        qos=qos,
        priority=priority,
        usage=CgroupUsage(cpu=cpu, memory=memory),
        requests=ResourceList({"cpu": 500, "memory": GIB}),
    )


GPU = DeviceReading(
    vendor="nvidia",
    model="A100",
    minor=1,
    uuid="GPU-abc",
    healthy=True,
    utilization_percent=30.0,
    memory_used_bytes=8 * GIB,
    memory_total_bytes=32 * GIB,
)


def _warm(ticks: int = 1800) -> tuple[Windows, MetricsSnapshot]:
    """Half an hour of 1 s ticks: node CPU ramps 1000 -> 2799 millicores."""
    windows = Windows(interval=1.0)
    snap = None
    for tick in range(ticks):
        snap = MetricsSnapshot(
            node="node-1",
            taken_at=EPOCH,
            monotonic=float(tick),
            node_cpu=1000.0 + tick,
            node_memory=8 * GIB,
            system_cpu=100.0,
            system_memory=GIB,
            pods=(
                _pod("u-2", "web", "zeta", 400.0, 2 * GIB, "koord-prod", "LS"),
                _pod("u-1", "batch", "alpha", 250.5, GIB, "koord-batch", "BE"),
                _pod("u-3", "plain", "alpha", 10.0, GIB // 2, "", ""),
            ),
            host_apps=(
                HostAppUsage(
                    name="nginx",
                    qos="LS",
                    priority="koord-prod",
                    usage=CgroupUsage(cpu=50.0, memory=GIB // 4),
                ),
            ),
            devices=(GPU,),
        )
        windows.record(snap)
    assert snap is not None
    return windows, snap


def test_a_warm_node_with_pods_and_gpus(nodemetric_schema: jsonschema.Draft7Validator) -> None:
    windows, latest = _warm()
    settings = MetricsSection()
    metric = build_nodemetric("node-1", windows.aggregate(), latest, settings, now=NOW)
    assert schema_errors(nodemetric_schema, _wire(metric)) == []

    assert metric.metadata.name == "node-1"
    policy = metric.spec.metric_collect_policy
    assert policy is not None
    assert policy.aggregate_duration_seconds == 300
    assert policy.report_interval_seconds == 60
    assert policy.node_memory_collect_policy == "usageWithoutPageCache"
    assert policy.node_aggregate_policy is not None
    assert [str(d) for d in policy.node_aggregate_policy.durations] == ["5m0s", "10m0s", "30m0s"]

    status = metric.status
    assert status.update_time == NOW
    assert status.node_metric is not None
    usage = status.node_metric.node_usage
    # the last 300 ticks: 2500 .. 2799 -> 2649.5, rounded half to even
    assert usage.resources == ResourceList({"cpu": 2650, "memory": 8 * GIB})
    [gpu] = usage.devices
    assert (gpu.type, gpu.id, gpu.minor, gpu.health) == ("gpu", "GPU-abc", 1, True)
    assert gpu.resources == ResourceList(
        {RESOURCE_GPU_CORE: 30, RESOURCE_GPU_MEMORY: 8 * GIB, RESOURCE_GPU_MEMORY_RATIO: 25}
    )
    assert status.node_metric.system_usage.resources == ResourceList({"cpu": 100, "memory": GIB})

    aggregated = status.node_metric.aggregated_node_usages
    assert [str(a.duration) for a in aggregated] == ["5m0s", "10m0s", "30m0s"]
    thirty = aggregated[2].usage
    assert set(thirty) == {"avg", "p50", "p90", "p95", "p99"}
    assert thirty["p50"].resources["cpu"] == 1000 + 900  # 1899.5 rounds half to even
    assert thirty["p99"].resources["cpu"] == round(1000 + 0.99 * 1799)
    assert thirty["p99"].devices[0].resources[RESOURCE_GPU_CORE] == 30
    system = status.node_metric.aggregated_system_usages
    assert [str(a.duration) for a in system] == ["5m0s", "10m0s", "30m0s"]
    assert system[0].usage["p95"].devices == ()

    # pods sorted by namespace, then name; priority and QoS as collected
    pods = [(p.namespace, p.name, p.priority, p.qos) for p in status.pods_metric]
    assert pods == [
        ("alpha", "batch", "koord-batch", "BE"),
        ("alpha", "plain", "", ""),
        ("zeta", "web", "koord-prod", "LS"),
    ]
    assert status.pods_metric[0].pod_usage.resources == ResourceList({"cpu": 250, "memory": GIB})
    [app] = status.host_application_metric
    assert (app.name, app.priority, app.qos) == ("nginx", "koord-prod", "LS")
    assert app.usage.resources == ResourceList({"cpu": 50, "memory": GIB // 4})

    # no predictor: nothing reclaimable; the peak is the Prod and priority-less requests
    assert status.prod_reclaimable_metric is not None
    assert status.prod_reclaimable_metric.resource.resources == ResourceList(
        {"cpu": 0, "memory": 0}
    )
    assert status.prod_peak_metric is not None
    assert status.prod_peak_metric.resource.resources == ResourceList(
        {"cpu": 1000, "memory": 2 * GIB}
    )
    # it round-trips through the API model
    assert codec.decode_json(codec.encode_json(metric), NodeMetric) == metric


def test_cold_start_leaves_out_what_is_not_covered(
    nodemetric_schema: jsonschema.Draft7Validator,
) -> None:
    windows, latest = _warm(ticks=400)
    metric = build_nodemetric("node-1", windows.aggregate(), latest, MetricsSection(), now=NOW)
    assert schema_errors(nodemetric_schema, _wire(metric)) == []
    assert metric.status.node_metric is not None
    durations = [str(a.duration) for a in metric.status.node_metric.aggregated_node_usages]
    # 400 s of samples cover 5 m and 10 m at least by half, not 30 m
    assert durations == ["5m0s", "10m0s"]


def test_first_tick_of_a_collector(
    tmp_path: Path, nodemetric_schema: jsonschema.Draft7Validator
) -> None:
    host = FakeHost(tmp_path)
    host.use_v2()
    host.write_proc_stat([(10, 90)])
    host.write_meminfo(total=4 * GIB, free=GIB, available=2 * GIB)
    cfg = AgentConfig(
        host=host.paths,
        cgroup=host.cgroup,
        metrics=MetricsSection(memory_policy="usageWithPageCache", aggregate_durations=(60.0,)),
    )
    collector = build_collector(cfg, node="node-1", cgroup=None, wall=lambda: NOW)
    collector.collect()
    metric = collector.nodemetric()
    assert metric is not None
    assert schema_errors(nodemetric_schema, _wire(metric)) == []
    assert metric.status.update_time == NOW
    assert metric.status.node_metric is not None
    # one tick: memory is known, CPU (a rate) not yet; no window is covered
    assert metric.status.node_metric.node_usage.resources == ResourceList({"memory": 3 * GIB})
    assert metric.status.node_metric.aggregated_node_usages == ()
    assert metric.status.pods_metric == ()
    policy = metric.spec.metric_collect_policy
    assert policy is not None
    assert policy.node_memory_collect_policy == "usageWithPageCache"


def test_no_cgroups_and_nothing_measured(nodemetric_schema: jsonschema.Draft7Validator) -> None:
    windows = Windows(interval=1.0)
    metric = build_nodemetric("edge", windows.aggregate(), None, MetricsSection(), now=NOW)
    assert schema_errors(nodemetric_schema, _wire(metric)) == []
    assert metric.status.node_metric is not None
    assert metric.status.node_metric.node_usage.resources == ResourceList()
    assert metric.status.pods_metric == ()
    assert metric.status.host_application_metric == ()


def test_the_schema_check_catches_a_bad_document(
    nodemetric_schema: jsonschema.Draft7Validator,
) -> None:
    windows, latest = _warm(ticks=10)
    document = _wire(build_nodemetric("n", windows.aggregate(), latest, MetricsSection(), now=NOW))
    status = document["status"]
    assert isinstance(status, dict)
    status["podsMetric"] = [{"name": "x", "podUsage": {"resources": {"cpu": "lots"}}}]
    assert schema_errors(nodemetric_schema, document) != []
