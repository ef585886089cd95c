"""``RecordingPublisher``: a transport that keeps what the agent would send."""

from __future__ import annotations

import asyncio

from apis.codec import encode_json
from apis.core import Event
from apis.meta import Object

__all__ = ["RecordingPublisher"]


class RecordingPublisher:
    """Implements ``agent.report.transport.Publisher``; skips bodies equal to the last one."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Object]] = []
        self.events: list[Event] = []
        self._last: dict[str, bytes] = {}
        #: Set whenever a report is accepted (clear it to wait for the next one).
        self.changed = asyncio.Event()

    async def report(self, leaf: str, obj: Object) -> bool:
        body = encode_json(obj)
        if self._last.get(leaf) == body:
            return False
        self._last[leaf] = body
        self.sent.append((leaf, obj))
        self.changed.set()
        return True

    async def event(self, event: Event) -> None:
        self.events.append(event)

    def leaves(self) -> list[str]:
        return [leaf for leaf, _ in self.sent]
