"""``colocation-config`` as koord-manager's nodemetric and noderesource controllers read it.

:class:`ColocationSource` follows the key of ``slo-controller-config`` in each snapshot and
gives every node its strategy (:func:`~.render.colocation_for`: the first ``nodeConfigs``
entry whose selector matches, then the node's ``node.koordinator.sh/colocation-strategy``
annotation, all over Koordinator's defaults, agent-spec §5.5). Without the ConfigMap or the
key, Koordinator's defaults are in force (colocation off, metrics every 60 s over 300 s). A
text that cannot be used (:class:`~.config.SLOConfigError`) is logged once and what the key
gave before stays in force; the ``nodeslo`` loop records the Warning Event on the ConfigMap.
"""

from __future__ import annotations

import logging

from apis import constants as k
from apis.core import ConfigMap, Node
from apis.kinds import Registry
from apis.slo import ColocationStrategy
from controller.slo.config import COLOCATION_KEY, SLOConfigError, Strategies, parse_key
from controller.slo.loop import CONFIG_NAME, CONFIG_NAMESPACE
from controller.slo.render import SLOConfig, colocation_for
from controller.store.snapshots import Snapshot

__all__ = ["ColocationSource"]

log = logging.getLogger(__name__)

_Cached = tuple[int, dict[str, str], str | None, ColocationStrategy]


class ColocationSource:
    """The colocation strategies in force, and each node's (see the module docstring)."""

    def __init__(self) -> None:
        self._text: str | None = None
        self._refused: str | None = None
        self._strategies: Strategies[ColocationStrategy] = parse_key(COLOCATION_KEY, None)
        self._config = SLOConfig.of({COLOCATION_KEY: self._strategies})
        #: moves whenever the strategies in force change
        self.version = 0
        self._nodes: dict[str, _Cached] = {}

    @property
    def strategies(self) -> Strategies[ColocationStrategy]:
        """The cluster strategy and the node strategies in force."""
        return self._strategies

    def read(self, registry: Registry, snapshot: Snapshot) -> bool:
        """Follow the ConfigMap in ``snapshot``; whether the strategies in force changed."""
        found = snapshot.get(registry.for_type(ConfigMap), CONFIG_NAME, CONFIG_NAMESPACE)
        text = found.data.get(COLOCATION_KEY) if isinstance(found, ConfigMap) else None
        if text == self._text or (text is not None and text == self._refused):
            return False
        try:
            strategies = parse_key(COLOCATION_KEY, text)
        except SLOConfigError as err:
            log.error("ConfigMap %s/%s: %s (kept as it was)", CONFIG_NAMESPACE, CONFIG_NAME, err)
            self._refused = text
            return False
        self._text, self._refused = text, None
        if strategies == self.strategies:
            return False
        self._strategies = strategies
        self._config = SLOConfig.of({COLOCATION_KEY: strategies})
        self.version += 1
        self._nodes = {}
        return True

    def for_node(self, node: Node) -> ColocationStrategy:
        """``node``'s strategy (cached while its labels and annotation stay as they are)."""
        name = node.metadata.name
        labels = node.metadata.labels
        annotation = node.metadata.annotations.get(k.ANNOTATION_NODE_COLOCATION_STRATEGY)
        cached = self._nodes.get(name)
        if (
            cached is not None
            and cached[0] == self.version
            and cached[1] == labels
            and cached[2] == annotation
        ):
            return cached[3]
        strategy = colocation_for(self._config, node) or self._strategies.cluster
        self._nodes[name] = (self.version, labels, annotation, strategy)
        return strategy

    def forget(self, names: set[str]) -> None:
        """Drop what is cached for nodes not in ``names``."""
        for name in [n for n in self._nodes if n not in names]:
            del self._nodes[name]
