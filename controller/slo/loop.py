"""The ``nodeslo`` control loop: koord-manager's nodeslo controller (agent-spec §10.3).

The loop starts once ConfigMap ``koordinator-system/slo-controller-config`` exists. From then
on every Node has a NodeSLO of its name whose spec is what the ConfigMap gives it
(:func:`.render.render`): a new node gets one, a changed ConfigMap or a node's changed labels
(or colocation annotation) rewrite the ones that differ, and the NodeSLO of a deleted node is
deleted. A ConfigMap deleted later leaves every key at its defaults, as koord-manager does.
Without that ConfigMap ever seen, NodeSLOs are left as they were applied.

Each key is read on its own. A key that cannot be used (:class:`~.config.SLOConfigError`) gets a
Warning Event on the ConfigMap (``SLOCfgUnmarshalFailed``, or ``ColocationCfgUnmarshalFailed``
for ``colocation-config``, as koord-manager records them; ``SLOCfgInvalid`` for a value its
webhook refuses) and a log line naming the key, the field and the value, and what the key gave
before stays in force, so the NodeSLOs keep their settings. Keys no field has are dropped, as
koord-manager's decoder drops them, and logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from apis import constants as k
from apis.core import ConfigMap, Node
from apis.kinds import Kind, default_registry
from apis.meta import ObjectMeta
from apis.slo import NodeSLO, NodeSLOSpec
from controller.errors import StoreError
from controller.events import WARNING, EventRecorder
from controller.slo.config import COLOCATION_KEY, KEYS, SLOConfigError, Strategies, parse_key
from controller.slo.render import SLOConfig, render
from controller.store.assumed import Outbox
from controller.store.snapshots import Snapshot
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = [
    "COMPONENT",
    "CONFIG_NAME",
    "CONFIG_NAMESPACE",
    "INVALID",
    "UNMARSHAL_FAILED",
    "NodeSLOController",
]

log = logging.getLogger(__name__)

COMPONENT: Final = "slo-controller"
CONFIG_NAMESPACE: Final = "koordinator-system"
CONFIG_NAME: Final = "slo-controller-config"
#: Event reasons (koord-manager's for an unmarshal failure; koordpy's for a refused value).
UNMARSHAL_FAILED: Final = "SLOCfgUnmarshalFailed"
COLOCATION_UNMARSHAL_FAILED: Final = "ColocationCfgUnmarshalFailed"
INVALID: Final = "SLOCfgInvalid"
#: Seconds before writes that failed are tried again.
RETRY_SECONDS: Final = 1.0

_Rendered = tuple[int, dict[str, str], str | None, NodeSLOSpec]


class NodeSLOController:
    """The ``nodeslo`` control loop (see the module docstring)."""

    name = "nodeslo"

    def __init__(self) -> None:
        #: key -> (ConfigMap uid, text, its strategies) of what the key gives now.
        self._parsed: dict[str, tuple[str, str | None, Strategies[Any]]] = {}
        #: key -> (ConfigMap uid, text) last refused, so that it is reported once.
        self._refused: dict[str, tuple[str, str | None]] = {}
        self._config: SLOConfig | None = None
        self._version = 0
        self._seen: tuple[object, object, int] | None = None
        self._rendered: dict[str, _Rendered] = {}
        #: node name -> (Node, NodeSLO) last found in agreement under the configuration.
        self._agreed: dict[str, tuple[Node, NodeSLO]] = {}
        self._recorder: EventRecorder | None = None
        self._store: object = None
        #: the NodeSLO writes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=(default_registry().for_type(NodeSLO),))
        #: a write failed: try again after RETRY_SECONDS
        self._retry = False

    @property
    def config(self) -> SLOConfig | None:
        """What the ConfigMap gives (None: the loop has not started)."""
        return self._config

    def _events(self, ctx: LoopContext) -> EventRecorder:
        if self._recorder is None or self._store is not ctx.store:
            self._store = ctx.store
            self._recorder = EventRecorder(ctx.store, component=COMPONENT, clock=ctx.now)
        return self._recorder

    # -- the loop ----------------------------------------------------------------------------

    def reconcile(self, ctx: LoopContext) -> float | None:
        self._retry = False  # a result arriving now may set it
        snapshot = self._outbox.over(ctx.store.snapshot())
        self._load(ctx, snapshot)
        config = self._config
        if config is None:
            return None
        registry = ctx.store.registry
        nodes = snapshot.objects(registry.for_type(Node))
        slos = snapshot.objects(registry.for_type(NodeSLO))
        seen = (nodes, slos, self._version)
        if self._seen is not None and all(a is b for a, b in zip(seen, self._seen, strict=True)):
            return None
        self._seen = seen
        self._sync(ctx, snapshot, config, nodes, slos)
        return RETRY_SECONDS if self._retry else None

    # -- the ConfigMap -----------------------------------------------------------------------

    def _load(self, ctx: LoopContext, snapshot: Snapshot) -> None:
        kind = ctx.store.registry.for_type(ConfigMap)
        found = snapshot.get(kind, CONFIG_NAME, CONFIG_NAMESPACE)
        if not isinstance(found, ConfigMap):
            if self._config is not None and self._parsed:
                log.warning(
                    "ConfigMap %s/%s is gone: NodeSLOs take Koordinator's defaults",
                    CONFIG_NAMESPACE,
                    CONFIG_NAME,
                )
                self._parsed, self._refused = {}, {}
                self._replace(SLOConfig.defaults())
            return
        uid = found.metadata.uid
        for key in KEYS:
            text = found.data.get(key)
            kept = self._parsed.get(key)
            if kept is not None and kept[1] == text:
                continue
            if self._refused.get(key) == (uid, text):
                continue
            if kept is None and text is None:
                continue
            try:
                strategies = parse_key(key, text)
            except SLOConfigError as err:
                self._refuse(ctx, found, err)
                self._refused[key] = (uid, text)
                continue
            self._refused.pop(key, None)
            if text is None:
                self._parsed.pop(key, None)
            else:
                self._parsed[key] = (uid, text, strategies)
            if strategies.unknown:
                log.warning(
                    "ConfigMap %s/%s: %s: unknown field(s) ignored: %s",
                    CONFIG_NAMESPACE,
                    CONFIG_NAME,
                    key,
                    ", ".join(strategies.unknown),
                )
        config = SLOConfig.of({key: parsed for key, (_, _, parsed) in self._parsed.items()})
        if config != self._config:
            self._replace(config)

    def _replace(self, config: SLOConfig) -> None:
        log.info("slo-controller-config in force: rendering the NodeSLOs")
        self._config = config
        self._version += 1
        self._agreed = {}

    def _refuse(self, ctx: LoopContext, configmap: ConfigMap, err: SLOConfigError) -> None:
        kept = "keeping the previous settings" if err.key in self._parsed else "using the defaults"
        if err.key == COLOCATION_KEY and err.key not in self._parsed:
            kept = "the agents' own colocation settings stay"
        log.error("ConfigMap %s/%s refused (%s): %s", CONFIG_NAMESPACE, CONFIG_NAME, kept, err)
        if not err.unmarshal:
            reason = INVALID
        elif err.key == COLOCATION_KEY:
            reason = COLOCATION_UNMARSHAL_FAILED
        else:
            reason = UNMARSHAL_FAILED
        self._events(ctx).record(configmap, type=WARNING, reason=reason, message=f"{err} ({kept})")

    # -- the NodeSLOs --------------------------------------------------------------------------

    def _spec(self, config: SLOConfig, node: Node) -> NodeSLOSpec:
        name = node.metadata.name
        labels = node.metadata.labels
        annotation = node.metadata.annotations.get(k.ANNOTATION_NODE_COLOCATION_STRATEGY)
        cached = self._rendered.get(name)
        if (
            cached is not None
            and cached[0] == self._version
            and cached[1] == labels
            and cached[2] == annotation
        ):
            return cached[3]
        spec = render(config, node)
        self._rendered[name] = (self._version, labels, annotation, spec)
        return spec

    def _sync(
        self,
        ctx: LoopContext,
        snapshot: Snapshot,
        config: SLOConfig,
        nodes: Sequence[object],
        slos: Sequence[object],
    ) -> None:
        store = ctx.store
        kind = store.registry.for_type(NodeSLO)
        creates: list[NodeSLO] = []
        updates: list[NodeSLO] = []
        agreed = self._agreed
        paired = 0
        for node in nodes:
            if not isinstance(node, Node):
                continue
            name = node.metadata.name
            found = snapshot.get(kind, name)
            current = found if isinstance(found, NodeSLO) else None
            paired += current is not None
            seen = agreed.get(name)
            # A node and a NodeSLO that are the very objects found in agreement last time (for
            # this configuration) still agree: a heartbeat elsewhere costs two lookups.
            if seen is not None and seen[0] is node and seen[1] is current:
                continue
            spec = self._spec(config, node)
            if current is None:
                creates.append(NodeSLO(metadata=ObjectMeta(name=name), spec=spec))
            elif current.spec != spec:
                updates.append(msgspec.structs.replace(current, spec=spec))
            else:
                agreed[name] = (node, current)
        writes: list[Write] = []
        if paired < len(slos) or len(self._rendered) > len(nodes):
            writes.extend(self._forget_gone(kind, nodes, slos))
        writes.extend(Write.apply(slo) for slo in creates)
        writes.extend(Write.update(slo) for slo in updates)
        if creates or updates:
            log.info("NodeSLOs rendered: %d created, %d updated", len(creates), len(updates))
        self._outbox.send(store, writes, self._written)

    def _written(self, results: Sequence[Result]) -> None:
        failed = [r for r in results if isinstance(r, StoreError)]
        if failed:
            log.warning("NodeSLOs not written, trying again: %s", failed[0])
            self._seen = None
            self._retry = True

    def _forget_gone(
        self, kind: Kind, nodes: Sequence[object], slos: Sequence[object]
    ) -> list[Write]:
        """Deletes of the NodeSLOs of nodes that are gone; what was cached for them goes."""
        names = {n.metadata.name for n in nodes if isinstance(n, Node)}
        for name in [n for n in self._rendered if n not in names]:
            del self._rendered[name]
            self._agreed.pop(name, None)
        writes: list[Write] = []
        for slo in slos:
            if isinstance(slo, NodeSLO) and slo.metadata.name not in names:
                writes.append(Write.delete_of(kind, slo))
                log.info("NodeSLO %s deleted: its node is gone", slo.metadata.name)
        return writes
