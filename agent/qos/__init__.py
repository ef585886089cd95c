"""QoS strategies: pure functions from a node snapshot to the cgroup writes it wants.

``STRATEGIES`` is the explicit table (name -> factory) the agent runs, in order. A strategy
never writes: it returns :class:`CgroupWrite` values, and the cgroup writer (or ``koordpy agent
plan``, which only prints them) decides what to do with them. The table is empty until the
first strategies land.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from agent.cgroups.detect import CgroupInfo
from agent.config import AgentConfig
from apis.core import Node, Pod

__all__ = ["STRATEGIES", "CgroupWrite", "NodeSnapshot", "Strategy", "StrategyFactory", "plan"]


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """What a strategy sees: the cgroup layout, the Node and the pods bound to it."""

    cgroup: CgroupInfo
    node: Node | None = None
    pods: tuple[Pod, ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupWrite:
    """One desired cgroup file value."""

    #: cgroup directory relative to the controller's hierarchy (``kubepods/besteffort``).
    cgroup: str
    #: resource file, named as on cgroup v1 (``cpu.cfs_quota_us``).
    resource: str
    value: str
    #: the strategy that wants it.
    strategy: str = ""


@runtime_checkable
class Strategy(Protocol):
    @property
    def name(self) -> str: ...

    def plan(self, snapshot: NodeSnapshot) -> Sequence[CgroupWrite]: ...


#: Builds a strategy from the agent config.
StrategyFactory = Callable[[AgentConfig], Strategy]

#: Every QoS strategy, in the order they run.
STRATEGIES: Final[Mapping[str, StrategyFactory]] = {}


def plan(strategies: Iterable[Strategy], snapshot: NodeSnapshot) -> list[CgroupWrite]:
    """One reconcile pass of every strategy, writes in strategy order."""
    writes: list[CgroupWrite] = []
    for strategy in strategies:
        writes.extend(strategy.plan(snapshot))
    return writes
