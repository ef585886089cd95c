"""The agent acts on the rendered NodeSLO: colocation-config drives its Batch resources, and
the NodeSLO reaches it over the bus as in ``koordpy up``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest

from agent.qos.batch_resources import BatchResources
from agent.qos.cpu_suppress import be_budget
from agent.qos.service import NodeSLOFollower
from agent.qos.settings import ColocationSettings, QoSSettings, SettingsError, from_nodeslo
from apis import constants as k
from apis.core import ConfigMap, Node
from apis.meta import ObjectMeta
from apis.slo import COLOCATION_EXTENSION, NodeSLOSpec
from controller.fleet.nodefeed import NodeFeed
from controller.loops import LoopContext
from controller.slo.loop import CONFIG_NAME, CONFIG_NAMESPACE, NodeSLOController
from controller.store.sqlite import Store
from runtime.bus import Bus, node_topic
from tests.agent.qos_fixtures_evict import GIB, FakeUsage, make_node, make_pod, snapshot
from tests.controller.slo.slohelpers import configmap, json_key, settings, slo_spec
from tests.manuals.replay import node, replay

CPU, MEMORY = k.RESOURCE_CPU, k.RESOURCE_MEMORY
CAP_CPU, CAP_MEM = 20_000, 100 * GIB
NODE_CPU, NODE_MEM = 6_000, 40 * GIB
LS_CPU, LS_MEM = 4_000, 30 * GIB  # the LS pod's usage; the rest of the node's is system usage


def _rendered(colocation: object, **more: object) -> NodeSLOSpec:
    extra = {key: json_key(value) for key, value in more.items()}
    out = replay(configmap(colocation_config=json_key(colocation), **extra), node("n1"))
    return slo_spec(out, "n1")


def _batch(
    spec: NodeSLOSpec,
    strategy: BatchResources | None = None,
    *,
    now: float = 1000.0,
    node_cpu: int = NODE_CPU,
) -> dict[str, int]:
    pod = make_pod("ls", qos="LS", requests={CPU: 5_000, MEMORY: 32 * GIB})
    usage = FakeUsage(
        node_cpu_milli=node_cpu,
        node_memory_bytes=NODE_MEM,
        pods_cpu={pod.metadata.uid: LS_CPU},
        pods_memory={pod.metadata.uid: LS_MEM},
    )
    qos = from_nodeslo(spec, QoSSettings())
    outcome = (strategy or BatchResources()).plan(
        snapshot(make_node(cpu=CAP_CPU, memory=CAP_MEM), [pod], usage, qos, now=now)
    )
    assert outcome.node_resources is not None
    return {
        "cpu": outcome.node_resources.get_amount(k.RESOURCE_BATCH_CPU),
        "memory": outcome.node_resources.get_amount(k.RESOURCE_BATCH_MEMORY),
    }


def _expected(cpu_reclaim: int, memory_reclaim: int, node_cpu: int = NODE_CPU) -> dict[str, int]:
    # usage policy: capacity - capacity x (100 - reclaim)% - system - HP used
    system_cpu, system_mem = node_cpu - LS_CPU, NODE_MEM - LS_MEM
    return {
        "cpu": CAP_CPU * cpu_reclaim // 100 - system_cpu - LS_CPU,
        "memory": CAP_MEM * memory_reclaim // 100 - system_mem - LS_MEM,
    }


def test_colocation_config_enables_batch_resources_with_its_thresholds() -> None:
    spec = _rendered(
        {"enable": True, "cpuReclaimThresholdPercent": 70, "memoryReclaimThresholdPercent": 80}
    )
    assert _batch(spec) == _expected(70, 80)  # 8000m, 40 GiB


def test_enable_false_publishes_no_batch_resources_whatever_the_agent_config() -> None:
    spec = _rendered({"enable": False})
    base = QoSSettings(colocation=ColocationSettings(enable=True))
    assert from_nodeslo(spec, base).colocation.enable is False
    assert _batch(spec) == {"cpu": 0, "memory": 0}


def test_without_colocation_config_the_agent_config_stays() -> None:
    out = replay(
        configmap(resource_threshold_config=json_key({"clusterStrategy": {"enable": True}})),
        node("n1"),
    )
    spec = slo_spec(out, "n1")
    assert COLOCATION_EXTENSION not in (spec.extensions or {})
    base = QoSSettings(colocation=ColocationSettings(enable=True, cpu_reclaim_threshold_percent=55))
    assert from_nodeslo(spec, base).colocation == base.colocation


def test_a_node_config_gives_its_nodes_their_own_thresholds() -> None:
    cfg = {
        "enable": True,
        "nodeConfigs": [
            {
                "name": "low",
                "nodeSelector": {"matchLabels": {"pool": "low"}},
                "cpuReclaimThresholdPercent": 50,
            }
        ],
    }
    out = replay(
        configmap(colocation_config=json_key(cfg)), node("a"), node("b", labels={"pool": "low"})
    )
    assert settings(slo_spec(out, "a")).colocation.cpu_reclaim_threshold_percent == 60
    assert settings(slo_spec(out, "b")).colocation.cpu_reclaim_threshold_percent == 50


def test_batch_thresholds_and_policies_reach_the_calculation() -> None:
    spec = _rendered(
        {
            "enable": True,
            "batchCPUThresholdPercent": 10,
            "batchMemoryThresholdPercent": 100,
            "memoryCalculatePolicy": "request",
            "degradeTimeMinutes": 5,
        }
    )
    colocation = settings(spec).colocation
    assert colocation.batch_cpu_threshold_percent == 10
    assert colocation.memory_calculate_policy == "request"
    assert colocation.degrade_time_minutes == 5
    got = _batch(spec)
    assert got["cpu"] == min(_expected(60, 65)["cpu"], CAP_CPU * 10 // 100)  # 2000m
    # request policy: capacity - safety - reserved (0) - HP request
    assert got["memory"] == CAP_MEM * 65 // 100 - 32 * GIB


class _Windows(FakeUsage):
    """FakeUsage recording the windows it was asked for."""

    asked: list[float]

    def node_cpu(self, window: float) -> float | None:
        self.asked.append(window)
        return super().node_cpu(window)


def test_metric_aggregate_duration_is_the_usage_window() -> None:
    spec = _rendered({"enable": True, "metricAggregateDurationSeconds": 120})
    usage = _Windows(node_cpu_milli=NODE_CPU, node_memory_bytes=NODE_MEM)
    usage.asked = []
    BatchResources().plan(
        snapshot(make_node(cpu=CAP_CPU, memory=CAP_MEM), [], usage, settings(spec))
    )
    assert usage.asked == [120.0]


def test_a_small_change_is_not_published_until_the_update_time_passes() -> None:
    spec = _rendered(
        {"enable": True, "resourceDiffThreshold": 0.1, "updateTimeThresholdSeconds": 300}
    )
    strategy = BatchResources()
    first = _batch(spec, strategy, now=1000.0)
    assert first == _expected(60, 65)  # cpu 6000m
    # 400m more system usage: batch-cpu 5600m, less than 10 % below 6000m: kept
    assert _batch(spec, strategy, now=1010.0, node_cpu=NODE_CPU + 400) == first
    # ... until updateTimeThresholdSeconds have passed since it was published
    assert _batch(spec, strategy, now=1300.0, node_cpu=NODE_CPU + 400) == _expected(
        60, 65, NODE_CPU + 400
    )
    # a change of 10 % or more goes out at once
    assert _batch(spec, strategy, now=1310.0, node_cpu=NODE_CPU + 1400) == _expected(
        60, 65, NODE_CPU + 1400
    )


def test_without_a_diff_threshold_every_result_is_published() -> None:
    spec = NodeSLOSpec()  # the agent config alone: resource_diff_threshold unset
    base = QoSSettings(colocation=ColocationSettings(enable=True))
    assert base.colocation.resource_diff_threshold is None
    strategy = BatchResources()
    pod = make_pod("ls", qos="LS", requests={CPU: 5_000, MEMORY: 32 * GIB})
    results = []
    for extra in (0, 400):
        usage = FakeUsage(
            node_cpu_milli=NODE_CPU + extra,
            node_memory_bytes=NODE_MEM,
            pods_cpu={pod.metadata.uid: LS_CPU},
            pods_memory={pod.metadata.uid: LS_MEM},
        )
        outcome = strategy.plan(
            snapshot(
                make_node(cpu=CAP_CPU, memory=CAP_MEM),
                [pod],
                usage,
                from_nodeslo(spec, base),
                now=1000.0 + extra,
            )
        )
        assert outcome.node_resources is not None
        results.append(outcome.node_resources.get_amount(k.RESOURCE_BATCH_CPU))
    assert results == [6000, 5600]


@pytest.mark.parametrize(
    ("strategy", "named"),
    [
        ({"cpuReclaimThresholdPercent": -1}, "cpuReclaimThresholdPercent: -1"),
        ({"midUnallocatedPercent": 150}, "midUnallocatedPercent: 150"),
        ({"memoryCalculatePolicy": "peak"}, "memoryCalculatePolicy: 'peak'"),
        ({"resourceDiffThreshold": 0}, "resourceDiffThreshold: 0"),
        ({"enable": "yes"}, "enable"),
    ],
)
def test_a_bad_colocation_extension_is_refused_naming_the_field(
    strategy: object, named: str
) -> None:
    spec = NodeSLOSpec(extensions={COLOCATION_EXTENSION: strategy})
    with pytest.raises(SettingsError) as caught:
        from_nodeslo(spec, QoSSettings())
    assert named in str(caught.value)
    assert COLOCATION_EXTENSION in str(caught.value)


async def test_the_agent_receives_its_nodeslo_over_the_bus_and_suppresses_by_it() -> None:
    """``koordpy up`` joins controller and agent by the bus: the loop renders, the node feed
    publishes the ``nodeslo`` leaf, the agent's follower takes it and its QoS settings (and the
    BE suppress budget) follow ``resource-threshold-config``."""
    bus = Bus()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    async with Store(clock=lambda: t0) as store:
        store.create(Node(metadata=ObjectMeta(name="n1")))
        store.create(
            ConfigMap(
                metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
                data={
                    "resource-threshold-config": json.dumps(
                        {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 40}}
                    )
                },
            )
        )
        NodeSLOController().reconcile(LoopContext(store=store, now=lambda: t0))
        follower = NodeSLOFollower(bus, "n1")
        NodeFeed(bus, store).publish_all()
        with bus.subscribe(node_topic("n1", "nodeslo")) as sub:
            async with asyncio.timeout(5):
                message = await sub.get()
        assert message.retain
        follower.handle(message.payload)
        spec = follower.current()
        assert spec is not None
        qos = from_nodeslo(spec, QoSSettings())
        assert (qos.suppress.enable, qos.suppress.threshold_percent) == (True, 40)
        ls = make_pod("ls", qos="LS", requests={CPU: 2_000})
        usage = FakeUsage(node_cpu_milli=3_000, pods_cpu={ls.metadata.uid: 2_000})
        budget = be_budget(snapshot(make_node(cpu=CAP_CPU, memory=CAP_MEM), [ls], usage, qos))
        assert budget is not None
        # 40 % of 20 cores - 2000m LS - 1000m system
        assert budget.milli == CAP_CPU * 40 // 100 - 2_000 - 1_000


def test_replaced_settings_keep_unrelated_agent_switches() -> None:
    base = QoSSettings(disable_unset_cpu_quota=True, gates={"CPUEvict": True})
    spec = _rendered({"enable": True})
    got = from_nodeslo(spec, base)
    assert got.disable_unset_cpu_quota is True
    assert got.gate("CPUEvict") is True
    assert got.colocation.enable is True
