"""The controller's downlink: each node's agent gets its pods and its NodeSLO.

For every node (every Node object, and every node a pod or NodeSLO names) the feed keeps two
retained topics current:

* ``koordpy/v1/nodes/{node}/pods``: a ``v1`` ``PodList`` of the pods bound to the node
  (``spec.nodeName``), sorted by namespace and name;
* ``koordpy/v1/nodes/{node}/nodeslo``: the NodeSLO named after the node (an empty retained
  payload once it is deleted, which clears it);
* ``koordpy/v1/nodes/{node}/nodemetricspec``: the node's NodeMetric with its name and spec
  only, the collect policy its agent follows (empty once the NodeMetric is deleted). The
  agent's reports change only the status, so they publish nothing here.

A burst of store changes is one publication per affected node; a body identical to the last
one published is not sent again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from apis import codec
from apis.core import Node, Pod
from apis.kinds import Kind
from apis.meta import Object, ObjectMeta
from apis.slo import NodeMetric, NodeSLO
from controller.errors import NotFound
from controller.store.sqlite import Store
from runtime.bus import Bus, node_topic

__all__ = ["NodeFeed", "pod_list"]

log = logging.getLogger(__name__)


def pod_list(pods: Iterable[Pod]) -> bytes:
    """The PodList body of a node's ``pods`` topic."""
    items = sorted(pods, key=lambda p: (p.metadata.namespace, p.metadata.name))
    return codec.encode_json(
        {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
    )


class NodeFeed:
    """A supervised component publishing each node's pods and NodeSLO on the bus.

    It keeps the pods indexed by node from the store's watch, so a change costs the work of
    the nodes it touches; a Node's own updates (heartbeats, status) touch nothing here: only a
    Node appearing or going away does.
    """

    name = "nodefeed"

    def __init__(self, bus: Bus, store: Store) -> None:
        self._bus = bus
        self._store = store
        self._pods_kind: Kind = store.registry.for_type(Pod)
        self._slo_kind: Kind = store.registry.for_type(NodeSLO)
        self._node_kind: Kind = store.registry.for_type(Node)
        self._metric_kind: Kind = store.registry.for_type(NodeMetric)
        self._sent: dict[str, bytes] = {}
        #: pod uid -> the node it is bound to (a rebind touches both nodes).
        self._placed: dict[str, str] = {}
        #: node -> pod uid -> pod, for every bound pod.
        self._bound: dict[str, dict[str, Pod]] = {}

    def _publish(self, topic: str, body: bytes) -> None:
        if self._sent.get(topic) == body:
            return
        self._sent[topic] = body
        self._bus.publish(topic, body, retain=True)

    def _place(self, pod: Pod, *, deleted: bool = False) -> set[str]:
        """Index ``pod``; the nodes whose pod list changed."""
        uid = pod.metadata.uid
        touched: set[str] = set()
        before = self._placed.pop(uid, None)
        if before:
            touched.add(before)
            on_node = self._bound.get(before)
            if on_node is not None:
                on_node.pop(uid, None)
                if not on_node:
                    del self._bound[before]
        node = pod.spec.node_name
        if node and not deleted:
            self._placed[uid] = node
            self._bound.setdefault(node, {})[uid] = pod
            touched.add(node)
        return touched

    def publish_node(self, node: str) -> None:
        """Publish ``node``'s pods and NodeSLO as the store holds them now."""
        if not node:
            return
        self._publish(node_topic(node, "pods"), pod_list(self._bound.get(node, {}).values()))
        try:
            slo = self._store.get(self._slo_kind, node)
        except NotFound:
            slo = None
        self._publish(node_topic(node, "nodeslo"), b"" if slo is None else codec.encode_json(slo))
        try:
            metric = self._store.get(self._metric_kind, node)
        except NotFound:
            metric = None
        self._publish_metric_spec(node, metric if isinstance(metric, NodeMetric) else None)

    def _publish_metric_spec(self, node: str, metric: NodeMetric | None) -> None:
        body = b""
        if metric is not None:
            only_spec = NodeMetric(metadata=ObjectMeta(name=node), spec=metric.spec)
            body = codec.encode_json(only_spec)
        self._publish(node_topic(node, "nodemetricspec"), body)

    def publish_all(self) -> None:
        self._placed.clear()
        self._bound.clear()
        nodes: set[str] = set()
        pods, _ = self._store.list(self._pods_kind)
        for pod in pods:
            if isinstance(pod, Pod):
                nodes |= self._place(pod)
        for kind in (self._slo_kind, self._node_kind):
            nodes.update(obj.metadata.name for obj in self._store.list(kind)[0])
        for node in sorted(nodes):
            self.publish_node(node)

    def _touched(self, event_type: str, obj: Object) -> set[str]:
        if isinstance(obj, NodeMetric):
            name = obj.metadata.name
            self._publish_metric_spec(name, None if event_type == "DELETED" else obj)
            return set()
        if isinstance(obj, Pod):
            return self._place(obj, deleted=event_type == "DELETED")
        if isinstance(obj, NodeSLO):
            return {obj.metadata.name}
        if isinstance(obj, Node) and event_type != "MODIFIED":
            return {obj.metadata.name}
        return set()

    async def run(self) -> None:
        with self._store.watch(None, resource_version=self._store.resource_version) as changes:
            self.publish_all()
            async for first in changes:
                touched: set[str] = set()
                for event in (first, *changes.drain()):
                    touched |= self._touched(str(event.type), event.object)
                for node in sorted(touched):
                    self.publish_node(node)
