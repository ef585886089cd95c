"""Helpers for the tests of ``slo-controller-config`` rendering (controller and manual pages)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.qos.settings import DEFAULT_GATES, QoSSettings, from_nodeslo
from apis import codec
from apis.slo import NodeSLO, NodeSLOSpec
from tests.crdschema import schema_errors, validator
from tests.manuals.replay import Outcome

__all__ = ["agent_settings", "configmap", "json_key", "settings", "slo_spec", "valid_nodeslos"]


def json_key(value: Any) -> str:
    """A ConfigMap value as the manuals write them: indented JSON."""
    return json.dumps(value, indent=2) + "\n"


def configmap(namespace: str = "koordinator-system", **data: str) -> str:
    """``slo-controller-config`` with ``data`` (keyword ``resource_threshold_config`` is key
    ``resource-threshold-config``)."""
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "slo-controller-config", "namespace": namespace},
        "data": {key.replace("_", "-"): value for key, value in data.items()},
    }
    return codec.dump_yaml(doc)


def slo_spec(outcome: Outcome, node: str) -> NodeSLOSpec:
    found = outcome.get("NodeSLO", node)
    assert isinstance(found, NodeSLO)
    return found.spec


def settings(spec: NodeSLOSpec, base: QoSSettings | None = None) -> QoSSettings:
    """What the agent's QoS strategies run with under this NodeSLO."""
    return from_nodeslo(spec, base or QoSSettings())


def valid_nodeslos(shared_dir: Path, outcome: Outcome) -> int:
    """Every NodeSLO of ``outcome`` validates against Koordinator's CRD; how many there are."""
    check = validator(shared_dir, "slo.koordinator.sh/NodeSLO")
    slos = outcome.all("NodeSLO")
    for slo in slos:
        document = json.loads(codec.encode_json(slo))
        assert schema_errors(check, document) == [], slo.metadata.name
    return len(slos)


def agent_settings(spec: NodeSLOSpec, *gates: str) -> QoSSettings:
    """The agent's settings under this NodeSLO with the koordlet feature ``gates`` on (as the
    manuals ask to add them to ``-feature-gates``)."""
    return from_nodeslo(spec, QoSSettings(gates={**DEFAULT_GATES, **dict.fromkeys(gates, True)}))
