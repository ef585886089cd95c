"""The controller's downlink: each node's agent gets its pods and its NodeSLO.

For every node (every Node object, and every node a pod or NodeSLO names) the feed keeps two
retained topics current:

* ``koordpy/v1/nodes/{node}/pods``: a ``v1`` ``PodList`` of the pods bound to the node
  (``spec.nodeName``), sorted by namespace and name;
* ``koordpy/v1/nodes/{node}/nodeslo``: the NodeSLO named after the node (an empty retained
  payload once it is deleted, which clears it).

A burst of store changes is one publication per affected node; a body identical to the last
one published is not sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from apis import codec
from apis.core import Node, Pod
from apis.kinds import Kind
from apis.meta import Object
from apis.slo import NodeSLO
from controller.store import Store
from koordpy.bus import Bus, node_topic

__all__ = ["NodeFeed", "pod_list"]

log = logging.getLogger(__name__)


def pod_list(pods: Iterable[Pod]) -> bytes:
    """The PodList body of a node's ``pods`` topic."""
    items = sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name))
    return codec.encode_json(
        {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
    )


class NodeFeed:
    """A supervised component publishing each node's pods and NodeSLO on the bus."""

    name = "nodefeed"

    def __init__(self, bus: Bus, store: Store) -> None:
        self._bus = bus
        self._store = store
        self._pods_kind: Kind = store.registry.for_type(Pod)
        self._slo_kind: Kind = store.registry.for_type(NodeSLO)
        self._node_kind: Kind = store.registry.for_type(Node)
        self._sent: dict[str, bytes] = {}
        #: pod uid -> the node it was bound to at its last change (a rebind touches both).
        self._placed: dict[str, str] = {}

    def _publish(self, topic: str, body: bytes) -> None:
        if self._sent.get(topic) == body:
            return
        self._sent[topic] = body
        self._bus.publish(topic, body, retain=True)

    def _bound_to(self, node: str) -> list[Pod]:
        pods, _ = self._store.list(self._pods_kind)
        return [p for p in pods if isinstance(p, Pod) and p.spec.node_name == node]

    def publish_node(self, node: str) -> None:
        """Publish ``node``'s pods and NodeSLO as the store holds them now."""
        if not node:
            return
        self._publish(node_topic(node, "pods"), pod_list(self._bound_to(node)))
        slo = self._store.snapshot().get(self._slo_kind, node)
        self._publish(node_topic(node, "nodeslo"), b"" if slo is None else codec.encode_json(slo))

    def _nodes_of(self, obj: Object) -> set[str]:
        if isinstance(obj, Pod):
            return {obj.spec.node_name} if obj.spec.node_name else set()
        if isinstance(obj, NodeSLO | Node):
            return {obj.metadata.name}
        return set()

    def publish_all(self) -> None:
        nodes: set[str] = set()
        pods, _ = self._store.list(self._pods_kind)
        for pod in pods:
            nodes |= self._nodes_of(pod)
            if isinstance(pod, Pod) and pod.spec.node_name:
                self._placed[pod.metadata.uid] = pod.spec.node_name
        for kind in (self._slo_kind, self._node_kind):
            for obj in self._store.list(kind)[0]:
                nodes |= self._nodes_of(obj)
        for node in sorted(nodes):
            self.publish_node(node)

    async def run(self) -> None:
        with self._store.watch(None, resource_version=self._store.resource_version) as changes:
            self.publish_all()
            placed = self._placed
            async for first in changes:
                touched: set[str] = set()
                for event in (first, *changes.drain()):
                    obj = event.object
                    touched |= self._nodes_of(obj)
                    if isinstance(obj, Pod):
                        uid = obj.metadata.uid
                        before = placed.get(uid)
                        if before:
                            touched.add(before)
                        if str(event.type) == "DELETED" or not obj.spec.node_name:
                            placed.pop(uid, None)
                        else:
                            placed[uid] = obj.spec.node_name
                for node in sorted(touched):
                    self.publish_node(node)
