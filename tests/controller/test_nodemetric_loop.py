"""koord-manager's nodemetric duty over a store: a NodeMetric per Node, its collect policy from
``colocation-config``, its status left to the agent; and where the manager's loops run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from apis.core import ConfigMap, Node
from apis.duration import Duration
from apis.meta import ObjectMeta
from apis.slo import AggregatePolicy, NodeMetric, NodeMetricCollectPolicy, NodeMetricStatus
from controller.app import KUBERNETES_LOOPS, MANAGER_LEASE, _loop_table
from controller.config import ControllerConfig
from controller.loops import LOOPS, LoopContext
from controller.slo.loop import CONFIG_NAME, CONFIG_NAMESPACE
from controller.slo.nodemetric import NodeMetricController
from controller.slo.noderesource import NodeResourceController
from controller.store.sqlite import Store
from controller.store.writes import Write

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DEFAULTS = NodeMetricCollectPolicy(
    aggregate_duration_seconds=300,
    report_interval_seconds=60,
    node_aggregate_policy=AggregatePolicy(
        durations=tuple(Duration.parse(d) for d in ("5m", "10m", "30m"))
    ),
    node_memory_collect_policy="usageWithoutPageCache",
)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(clock=lambda: T0) as opened:
        yield opened


class Loop:
    def __init__(self, store: Store) -> None:
        self.loop = NodeMetricController()
        self.ctx = LoopContext(store=store, now=lambda: T0)

    def run(self) -> float | None:
        return self.loop.reconcile(self.ctx)


def node(name: str, **labels: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, labels=labels))


def configmap(**colocation: object) -> ConfigMap:
    return ConfigMap(
        metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
        data={"colocation-config": json.dumps(colocation)},
    )


def metrics(store: Store) -> dict[str, NodeMetric]:
    found = store.list(store.registry.for_type(NodeMetric))[0]
    return {m.metadata.name: m for m in found if isinstance(m, NodeMetric)}


def policy(store: Store, name: str) -> NodeMetricCollectPolicy:
    found = metrics(store)[name].spec.metric_collect_policy
    assert found is not None
    return found


def test_every_node_gets_a_nodemetric_with_koordinators_defaults(store: Store) -> None:
    store.create(node("n1"))
    store.create(node("n2"))
    loop = Loop(store)
    assert loop.run() is None
    assert set(metrics(store)) == {"n1", "n2"}
    assert policy(store, "n1") == policy(store, "n2") == DEFAULTS
    # nothing changed: nothing written
    version = metrics(store)["n1"].metadata.resource_version
    loop.run()
    assert metrics(store)["n1"].metadata.resource_version == version


def test_the_policy_follows_the_configmap_per_node_and_the_status_stays(store: Store) -> None:
    store.create(node("n1"))
    store.create(node("gpu-1", pool="gpu"))
    store.create(
        configmap(
            metricAggregateDurationSeconds=120,
            metricReportIntervalSeconds=30,
            nodeConfigs=[
                {
                    "name": "gpu",
                    "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                    "metricReportIntervalSeconds": 15,
                    "metricMemoryCollectPolicy": "usageWithPageCache",
                    "metricAggregatePolicy": {"durations": ["1m"]},
                }
            ],
        )
    )
    loop = Loop(store)
    loop.run()
    assert policy(store, "n1").aggregate_duration_seconds == 120
    assert policy(store, "n1").report_interval_seconds == 30
    assert policy(store, "n1").node_aggregate_policy == DEFAULTS.node_aggregate_policy
    gpu = policy(store, "gpu-1")
    assert (gpu.aggregate_duration_seconds, gpu.report_interval_seconds) == (120, 15)
    assert gpu.node_memory_collect_policy == "usageWithPageCache"
    assert gpu.node_aggregate_policy == AggregatePolicy(durations=(Duration.parse("1m"),))
    # the agent reports: its status is its own
    reported = NodeMetricStatus(update_time=T0)
    kind = store.registry.for_type(NodeMetric)
    current = metrics(store)["n1"]
    [result] = store.write(
        [Write.update_status(msgspec.structs.replace(current, status=reported))]
    ).results()
    assert not isinstance(result, Exception)
    store.apply(configmap(metricAggregateDurationSeconds=600))
    loop.run()
    after = store.get(kind, "n1")
    assert isinstance(after, NodeMetric)
    assert after.spec.metric_collect_policy is not None
    assert after.spec.metric_collect_policy.aggregate_duration_seconds == 600
    assert after.status == reported
    assert policy(store, "gpu-1").report_interval_seconds == 60  # its node config is gone
    # a node relabelled into a node config
    store.apply(node("n1", pool="gpu"))
    store.apply(
        configmap(
            nodeConfigs=[
                {
                    "name": "gpu",
                    "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                    "metricReportIntervalSeconds": 20,
                }
            ]
        )
    )
    loop.run()
    assert policy(store, "n1").report_interval_seconds == 20


def test_a_configmap_that_cannot_be_used_keeps_the_policy(store: Store) -> None:
    store.create(node("n1"))
    store.create(configmap(metricReportIntervalSeconds=30))
    loop = Loop(store)
    loop.run()
    store.apply(configmap(metricReportIntervalSeconds="often"))
    loop.run()
    assert policy(store, "n1").report_interval_seconds == 30
    # gone: the defaults
    store.delete(store.registry.for_type(ConfigMap), CONFIG_NAME, CONFIG_NAMESPACE)
    loop.run()
    assert policy(store, "n1") == DEFAULTS


def test_the_nodemetric_of_a_deleted_node_is_deleted(store: Store) -> None:
    store.create(node("n1"))
    store.create(node("n2"))
    # one the agent made before the controller ran, without a spec
    store.create(NodeMetric(metadata=ObjectMeta(name="n2")))
    store.create(NodeMetric(metadata=ObjectMeta(name="gone-long-ago")))
    loop = Loop(store)
    loop.run()
    assert set(metrics(store)) == {"n1", "n2"}
    assert policy(store, "n2") == DEFAULTS
    store.delete(store.registry.for_type(Node), "n1")
    loop.run()
    assert set(metrics(store)) == {"n2"}


def test_the_manager_loops_run_under_its_lease_on_a_cluster_only() -> None:
    assert KUBERNETES_LOOPS[MANAGER_LEASE] == ("nodeslo", "nodemetric", "noderesource")
    cluster = _loop_table(ControllerConfig(), CollectorRegistry(), kubernetes=True)
    assert cluster["nodemetric"] is NodeMetricController
    assert cluster["noderesource"] is NodeResourceController
    assert list(cluster)[-3:] == ["nodeslo", "nodemetric", "noderesource"]
    # ``koordpy up``: the agents publish their Nodes with these resources themselves
    standalone = _loop_table(ControllerConfig(), CollectorRegistry())
    assert "nodemetric" not in standalone
    assert "noderesource" not in standalone
    assert "nodemetric" not in LOOPS
    assert "noderesource" not in LOOPS
