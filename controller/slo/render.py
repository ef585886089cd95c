"""One NodeSLO spec per node from the parsed ``slo-controller-config`` (koord-manager's nodeslo
controller, agent-spec §10.3-10.4).

For each key the node takes the first node strategy whose selector matches its labels, else the
cluster strategy (both already merged over Koordinator's defaults, :mod:`.config`):
``resourceUsedThresholdWithBE``, ``resourceQOSStrategy``, ``cpuBurstStrategy``,
``systemStrategy`` and ``hostApplications``. koordpy computes Batch/Mid resources on the node,
so when the ConfigMap has a ``colocation-config`` the node's resolved strategy (its
``nodeConfigs`` entry, then the node's annotation ``node.koordinator.sh/colocation-strategy``,
as koord-manager resolves it, agent-spec §5.5) goes in ``extensions`` under
:data:`~apis.slo.COLOCATION_EXTENSION`; without that key the agent's own ``[colocation]``
configuration stays in force.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from apis import codec
from apis import constants as k
from apis.core import Node
from apis.errors import ApiError
from apis.slo import (
    COLOCATION_EXTENSION,
    ColocationStrategy,
    CPUBurstStrategy,
    HostApplicationSpec,
    NodeSLOSpec,
    ResourceQOSStrategy,
    ResourceThresholdStrategy,
    SystemStrategy,
)
from controller.slo import gojson
from controller.slo.config import (
    COLOCATION_KEY,
    CPU_BURST_KEY,
    HOST_APPLICATION_KEY,
    RESOURCE_QOS_KEY,
    RESOURCE_THRESHOLD_KEY,
    SYSTEM_KEY,
    Strategies,
    check_colocation,
    merge_wire,
    parse_key,
)

__all__ = ["SLOConfig", "colocation_for", "render"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SLOConfig:
    """Every key of the ConfigMap, parsed (absent keys: Koordinator's defaults)."""

    threshold: Strategies[ResourceThresholdStrategy]
    qos: Strategies[ResourceQOSStrategy]
    burst: Strategies[CPUBurstStrategy]
    system: Strategies[SystemStrategy]
    host_applications: Strategies[tuple[HostApplicationSpec, ...]]
    #: None: the ConfigMap has no ``colocation-config`` (the agents' own settings apply).
    colocation: Strategies[ColocationStrategy] | None = None

    @classmethod
    def defaults(cls) -> SLOConfig:
        return cls.of({})

    @classmethod
    def of(cls, parsed: dict[str, Strategies[Any]]) -> SLOConfig:
        """From :func:`~.config.parse_key` results by key; a missing key: its defaults."""

        def get(key: str) -> Strategies[Any]:
            found = parsed.get(key)
            return found if found is not None else parse_key(key, None)

        return cls(
            threshold=get(RESOURCE_THRESHOLD_KEY),
            qos=get(RESOURCE_QOS_KEY),
            burst=get(CPU_BURST_KEY),
            system=get(SYSTEM_KEY),
            host_applications=get(HOST_APPLICATION_KEY),
            colocation=parsed.get(COLOCATION_KEY),
        )


def colocation_for(config: SLOConfig, node: Node) -> ColocationStrategy | None:
    """The node's colocation strategy; None when the ConfigMap has no ``colocation-config``.

    A node annotation ``node.koordinator.sh/colocation-strategy`` that is not a valid strategy
    is logged and left out, as koord-manager does.
    """
    if config.colocation is None:
        return None
    strategy = config.colocation.for_node(node.metadata.labels)
    text = node.metadata.annotations.get(k.ANNOTATION_NODE_COLOCATION_STRATEGY)
    if not text:
        return strategy
    try:
        raw = gojson.load_object(text)
        conformed, _ = gojson.conform(raw, ColocationStrategy)
        over = gojson.decode(conformed, ColocationStrategy)
        merged: ColocationStrategy = codec.decode_as(
            merge_wire(codec.to_builtins(strategy), codec.to_builtins(over)), ColocationStrategy
        )
        check_colocation("", merged)
    except (gojson.GoJSONError, ApiError, ValueError) as err:
        log.warning(
            "node %s: annotation %s ignored: %s",
            node.metadata.name,
            k.ANNOTATION_NODE_COLOCATION_STRATEGY,
            err,
        )
        return strategy
    return merged


def render(config: SLOConfig, node: Node) -> NodeSLOSpec:
    """The NodeSLO spec ``config`` gives ``node``."""
    labels = node.metadata.labels
    extensions: dict[str, Any] = {}
    colocation = colocation_for(config, node)
    if colocation is not None:
        # plain JSON values (lists, not tuples), as the NodeSLO reads back from the store
        extensions[COLOCATION_EXTENSION] = json.loads(codec.encode_json(colocation))
    return NodeSLOSpec(
        resource_used_threshold_with_be=config.threshold.for_node(labels),
        resource_qos_strategy=config.qos.for_node(labels),
        cpu_burst_strategy=config.burst.for_node(labels),
        system_strategy=config.system.for_node(labels),
        extensions=extensions,
        host_applications=config.host_applications.for_node(labels),
    )
