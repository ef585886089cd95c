"""The ``nodeslo`` loop over a store: NodeSLOs follow the ConfigMap, the nodes and their labels."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from apis import codec
from apis.core import ConfigMap, Event, Node
from apis.meta import ObjectMeta
from apis.slo import COLOCATION_EXTENSION, NodeSLO, NodeSLOSpec, ResourceThresholdStrategy
from controller.loops import LOOPS, LoopContext
from controller.slo.loop import CONFIG_NAME, CONFIG_NAMESPACE, NodeSLOController
from controller.store.sqlite import Store
from tests.crdschema import schema_errors, validator

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(clock=lambda: T0) as opened:
        yield opened


def _node(name: str, **labels: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, labels=labels))


def _configmap(**data: object) -> ConfigMap:
    return ConfigMap(
        metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
        data={key.replace("_", "-"): json.dumps(value) for key, value in data.items()},
    )


def _apply(store: Store, obj: object) -> None:
    assert isinstance(obj, ConfigMap | Node)
    store.apply(obj)


def _threshold(store: Store, node: str) -> ResourceThresholdStrategy:
    slo = store.get(store.registry.for_type(NodeSLO), node)
    assert isinstance(slo, NodeSLO)
    found = slo.spec.resource_used_threshold_with_be
    assert found is not None
    return found


def _events(store: Store) -> list[Event]:
    return [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]


class _Loop:
    def __init__(self, store: Store) -> None:
        self.loop = NodeSLOController()
        self.ctx = LoopContext(store=store, now=lambda: T0)

    def run(self) -> float | None:
        return self.loop.reconcile(self.ctx)


SUPPRESS_60 = {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 60}}


def test_the_loop_is_registered() -> None:
    assert LOOPS["nodeslo"] is NodeSLOController


def test_nothing_is_rendered_before_the_configmap_exists(store: Store) -> None:
    store.create(_node("n1"))
    assert _Loop(store).run() is None
    assert store.list(store.registry.for_type(NodeSLO))[0] == []


def test_every_node_gets_its_nodeslo_and_new_nodes_too(store: Store, shared_dir: Path) -> None:
    store.create(_node("n1"))
    store.create(_node("n2", pool="gpu"))
    store.create(
        _configmap(
            resource_threshold_config={
                **SUPPRESS_60,
                "nodeStrategies": [
                    {
                        "name": "gpu",
                        "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                        "cpuSuppressThresholdPercent": 50,
                    }
                ],
            }
        )
    )
    loop = _Loop(store)
    loop.run()
    assert _threshold(store, "n1").cpu_suppress_threshold_percent == 60
    assert _threshold(store, "n2").cpu_suppress_threshold_percent == 50
    store.create(_node("n3", pool="gpu"))
    loop.run()
    assert _threshold(store, "n3").cpu_suppress_threshold_percent == 50
    check = validator(shared_dir, "slo.koordinator.sh/NodeSLO")
    for slo in store.list(store.registry.for_type(NodeSLO))[0]:
        assert schema_errors(check, json.loads(codec.encode_json(slo))) == []


def test_a_label_change_and_a_configmap_change_rewrite_the_nodeslo(store: Store) -> None:
    store.create(_node("n1"))
    store.create(
        _configmap(
            resource_threshold_config={
                **SUPPRESS_60,
                "nodeStrategies": [
                    {
                        "name": "gpu",
                        "nodeSelector": {"matchLabels": {"pool": "gpu"}},
                        "cpuSuppressThresholdPercent": 50,
                    }
                ],
            }
        )
    )
    loop = _Loop(store)
    loop.run()
    before = store.get(store.registry.for_type(NodeSLO), "n1").metadata.resource_version
    loop.run()  # nothing changed: nothing written
    assert store.get(store.registry.for_type(NodeSLO), "n1").metadata.resource_version == before
    node = store.get(store.registry.for_type(Node), "n1")
    store.update(
        msgspec.structs.replace(
            node, metadata=msgspec.structs.replace(node.metadata, labels={"pool": "gpu"})
        )
    )
    loop.run()
    assert _threshold(store, "n1").cpu_suppress_threshold_percent == 50
    store.apply(_configmap(resource_threshold_config={"clusterStrategy": {"enable": False}}))
    loop.run()
    assert _threshold(store, "n1") == ResourceThresholdStrategy(
        enable=False,
        cpu_suppress_threshold_percent=65,
        cpu_suppress_policy="cpuset",
        memory_evict_threshold_percent=70,
        cpu_evict_policy="evictByRealLimit",
    )


def test_a_refused_key_keeps_what_it_gave_and_is_reported_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create(_node("n1"))
    store.create(_configmap(resource_threshold_config=SUPPRESS_60))
    loop = _Loop(store)
    loop.run()
    bad = _configmap(
        resource_threshold_config={"clusterStrategy": {"cpuSuppressThresholdPercent": 120}},
        cpu_burst_config={"clusterStrategy": {"policy": "auto"}},
    )
    store.apply(bad)
    with caplog.at_level(logging.ERROR, logger="controller.slo.loop"):
        loop.run()
        loop.run()
    assert _threshold(store, "n1").cpu_suppress_threshold_percent == 60
    slo = store.get(store.registry.for_type(NodeSLO), "n1")
    assert isinstance(slo, NodeSLO)
    assert slo.spec.cpu_burst_strategy is not None
    assert slo.spec.cpu_burst_strategy.policy == "auto"  # the other key still applies
    [event] = _events(store)
    assert (event.type, event.reason) == ("Warning", "SLOCfgInvalid")
    assert event.involved_object.name == CONFIG_NAME
    assert "resource-threshold-config" in event.message
    assert "cpuSuppressThresholdPercent: 120" in event.message
    assert event.count == 1
    assert "cpuSuppressThresholdPercent: 120" in caplog.text
    store.apply(
        _configmap(
            resource_threshold_config={"clusterStrategy": {"cpuSuppressThresholdPercent": 55}},
            cpu_burst_config={"clusterStrategy": {"policy": "auto"}},
        )
    )
    loop.run()
    assert _threshold(store, "n1").cpu_suppress_threshold_percent == 55


def test_invalid_json_is_an_unmarshal_failure_event(store: Store) -> None:
    store.create(_node("n1"))
    cm = _configmap()
    store.create(msgspec.structs.replace(cm, data={"colocation-config": '{"enable": true,}'}))
    _Loop(store).run()
    [event] = _events(store)
    assert event.reason == "ColocationCfgUnmarshalFailed"
    assert event.message.startswith("colocation-config: invalid JSON at line 1")
    slo = store.get(store.registry.for_type(NodeSLO), "n1")
    assert isinstance(slo, NodeSLO)
    assert slo.spec.extensions == {}  # no colocation: the agent's own settings stay


def test_nodeslos_of_deleted_nodes_go_and_a_deleted_configmap_restores_defaults(
    store: Store,
) -> None:
    store.create(_node("n1"))
    store.create(_node("n2"))
    store.create(
        _configmap(resource_threshold_config=SUPPRESS_60, colocation_config={"enable": True})
    )
    loop = _Loop(store)
    loop.run()
    store.delete(store.registry.for_type(Node), "n2")
    loop.run()
    names = [s.metadata.name for s in store.list(store.registry.for_type(NodeSLO))[0]]
    assert names == ["n1"]
    store.delete(store.registry.for_type(ConfigMap), CONFIG_NAME, CONFIG_NAMESPACE)
    loop.run()
    assert _threshold(store, "n1").enable is False
    slo = store.get(store.registry.for_type(NodeSLO), "n1")
    assert isinstance(slo, NodeSLO)
    assert COLOCATION_EXTENSION not in (slo.spec.extensions or {})


def test_the_colocation_annotation_of_a_node_is_laid_over_its_strategy(store: Store) -> None:
    node = _node("n1")
    annotated = msgspec.structs.replace(
        node,
        metadata=msgspec.structs.replace(
            node.metadata,
            annotations={
                "node.koordinator.sh/colocation-strategy": json.dumps(
                    {"cpuReclaimThresholdPercent": 40}
                )
            },
        ),
    )
    store.create(annotated)
    store.create(_node("n2"))
    store.create(_configmap(colocation_config={"enable": True, "cpuReclaimThresholdPercent": 70}))
    _Loop(store).run()
    for name, percent in (("n1", 40), ("n2", 70)):
        slo = store.get(store.registry.for_type(NodeSLO), name)
        assert isinstance(slo, NodeSLO)
        assert slo.spec.extensions is not None
        strategy = slo.spec.extensions[COLOCATION_EXTENSION]
        assert (strategy["enable"], strategy["cpuReclaimThresholdPercent"]) == (True, percent)


def test_a_nodeslo_applied_by_hand_is_brought_back_to_the_configmap(store: Store) -> None:
    store.create(_node("n1"))
    store.create(_configmap(resource_threshold_config=SUPPRESS_60))
    loop = _Loop(store)
    loop.run()
    slo = store.get(store.registry.for_type(NodeSLO), "n1")
    store.update(msgspec.structs.replace(slo, spec=NodeSLOSpec()))
    loop.run()
    assert _threshold(store, "n1").cpu_suppress_threshold_percent == 60


def test_unknown_fields_are_dropped_and_logged(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create(_node("n1"))
    store.create(
        _configmap(
            resource_threshold_config={
                "clusterStrategy": {"enable": True, "cpuSupressThresholdPercent": 50}
            }
        )
    )
    with caplog.at_level(logging.WARNING, logger="controller.slo.loop"):
        _Loop(store).run()
    assert "clusterStrategy.cpuSupressThresholdPercent" in caplog.text
    assert _threshold(store, "n1").cpu_suppress_threshold_percent == 65  # the typo: no effect
    assert _events(store) == []


def test_nodeslos_read_back_after_a_restart_are_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, clock=lambda: T0) as first:
        first.create(_node("n1"))
        first.create(
            _configmap(
                resource_threshold_config=SUPPRESS_60,
                colocation_config={"enable": True},
                host_application_config={"applications": [{"name": "nginx", "qos": "LS"}]},
            )
        )
        _Loop(first).run()
        written = first.get(first.registry.for_type(NodeSLO), "n1").metadata.resource_version
    with Store(path=path, clock=lambda: T0) as second:
        _Loop(second).run()
        again = second.get(second.registry.for_type(NodeSLO), "n1")
        assert again.metadata.resource_version == written
        assert isinstance(again, NodeSLO)
        assert again.spec.extensions is not None
        assert again.spec.extensions[COLOCATION_EXTENSION]["enable"] is True
