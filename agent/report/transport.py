"""How the agent's reports leave the node: the ``Publisher`` seam.

A transport publishes this node's state objects retained under ``koordpy/v1/nodes/{node}/``
(``node``, ``device``, ``nodemetric``), its events unretained (``events``), and its
``status`` (``online`` while connected; the will says ``offline``). The bus publisher
(:mod:`agent.report.bus`) implements it on a :class:`runtime.bus.Bus`: the controller's own
bus inside ``koordpy up``, or, in a fleet (``[report] transport = "mqtt"``), a local bus that
:class:`runtime.mqtt.MqttBridge` mirrors to the broker (its will, left with the broker, says
``offline`` when the agent dies).

Transports are async context managers: entering connects and announces ``online``; leaving
normally (or by cancellation) announces ``offline`` and closes cleanly; leaving with an error
disconnects uncleanly, so the will announces ``offline`` instead.
"""

from __future__ import annotations

from typing import Literal, Protocol

from apis.core import Event
from apis.meta import Object

__all__ = ["NullPublisher", "Publisher", "StateLeaf"]

#: Topic leaves that carry a node's retained state.
StateLeaf = Literal["node", "device", "nodemetric"]


class Publisher(Protocol):
    async def report(self, leaf: StateLeaf, obj: Object) -> bool:
        """Publish ``obj`` retained; ``False`` (and nothing sent) when it equals the last one."""
        ...

    async def event(self, event: Event) -> None:
        """Publish a Kubernetes Event about this node or its pods (not retained)."""
        ...


class NullPublisher:
    """``[report] transport = "none"``: a node on its own; reports go nowhere (logged once)."""

    def __init__(self, node: str) -> None:
        self.node = node

    async def __aenter__(self) -> NullPublisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def report(self, leaf: StateLeaf, obj: Object) -> bool:
        return False

    async def event(self, event: Event) -> None:
        return None
