"""``Priority``: the MultiQueueSort and QueueSort plugin (queue-spec §5.1).

Queues are visited by ``spec.priority`` (higher first, unset = 0), then by name, so the order
across queues is deterministic. Units are ordered by priority (higher first), then creation
time, then namespace and name.
"""

from __future__ import annotations

from typing import Any

import msgspec

from controller.queueing.framework import QueueConfig
from controller.queueing.units import UnitInfo

__all__ = ["Priority", "PriorityArgs"]


class PriorityArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """No settings."""


class Priority:
    name = "Priority"

    def __init__(self, args: PriorityArgs) -> None:
        self.args = args

    def queue_order(self, queue: QueueConfig) -> tuple[Any, ...]:
        return (-queue.priority, queue.namespace, queue.name)

    def unit_order(self, unit: UnitInfo) -> tuple[Any, ...]:
        return unit.order
