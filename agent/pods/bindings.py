"""Pods the controller bound to this node, from its retained ``pods`` topic.

In a fleet without Kubernetes the controller publishes, for each node, a ``v1`` ``PodList`` of
the pods bound to it on ``koordpy/v1/nodes/{node}/pods`` (retained, so a new subscriber gets
the current list at once). Only pods whose ``spec.nodeName`` is this node are kept. An empty
retained payload (the topic was cleared) means no pods; a body that is not a pod list is logged
and the previous pods stay. A subscriber that falls behind subscribes again, which replays the
retained list.
"""

from __future__ import annotations

import logging

from agent.pods.base import PodCache, PodListError, parse_pod_list
from runtime.bus import Bus, BusOverflow, node_topic

__all__ = ["BindingsPodSource"]

_log = logging.getLogger(__name__)


class BindingsPodSource(PodCache):
    """Follows ``koordpy/v1/nodes/{node}/pods`` on ``bus``."""

    def __init__(self, bus: Bus, node: str, *, name: str = "pods/bindings") -> None:
        super().__init__(name)
        self.node = node
        self.topic = node_topic(node, "pods")
        self._bus = bus

    def handle(self, payload: bytes) -> bool:
        """Apply one message body; ``True`` when the pods changed."""
        if not payload:
            return self._replace(())
        try:
            pods = parse_pod_list(payload, source=self.topic)
        except PodListError as err:
            _log.error("%s: message ignored, keeping %d pods: %s", self.name, len(self.pods), err)
            return False
        mine = tuple(p for p in pods if p.spec.node_name == self.node)
        if len(mine) != len(pods):
            _log.warning(
                "%s: %d pods bound to other nodes ignored", self.name, len(pods) - len(mine)
            )
        return self._replace(mine)

    async def run(self) -> None:
        while True:
            with self._bus.subscribe(self.topic) as subscription:
                try:
                    while True:
                        message = await subscription.get()
                        self.handle(message.payload)
                except BusOverflow:
                    _log.warning("%s: fell behind; subscribing again", self.name)
