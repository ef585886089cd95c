"""The explicit table of QoS strategies, in the order one pass runs them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from agent.qos.batch_resources import BatchResources
from agent.qos.cpu_burst import CpuBurst
from agent.qos.cpu_qos import CpuQoS
from agent.qos.cpu_suppress import CpuSuppress
from agent.qos.cpu_unbind import CpuQuotaUnbind
from agent.qos.cpuset_pool import CpusetPool
from agent.qos.evictions import Evictions
from agent.qos.framework import Strategy

__all__ = ["STRATEGIES", "StrategyFactory", "build"]

#: Builds a fresh strategy (its own state) for one agent.
StrategyFactory = Callable[[], Strategy]

#: Every QoS strategy, in run order: the share pools and unbinding of cpuset-bound pods first,
#: then BE suppression (which narrows the BE tier inside those pools), CPU burst for LS pods,
#: CPU QoS (group identity), Batch/Mid resources, and evictions last (they see everything the
#: others decided from).
STRATEGIES: Final[Mapping[str, StrategyFactory]] = {
    "cpuset_pool": CpusetPool,
    "cpu_unbind": CpuQuotaUnbind,
    "cpu_suppress": CpuSuppress,
    "cpu_burst": CpuBurst,
    "cpu_qos": CpuQoS,
    "batch_resources": BatchResources,
    "evictions": Evictions,
}


def build(table: Mapping[str, StrategyFactory] | None = None) -> list[Strategy]:
    """Instantiate every strategy of ``table`` (default :data:`STRATEGIES`)."""
    built = [factory() for factory in (STRATEGIES if table is None else table).values()]
    for strategy in built:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"{strategy!r} does not implement Strategy")
    return built
