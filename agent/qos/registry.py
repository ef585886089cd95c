"""The explicit table of QoS strategies, in the order one pass runs them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from agent.qos.framework import Strategy

__all__ = ["STRATEGIES", "StrategyFactory", "build"]

#: Builds a fresh strategy (its own state) for one agent.
StrategyFactory = Callable[[], Strategy]

#: Every QoS strategy, in run order.
STRATEGIES: Final[Mapping[str, StrategyFactory]] = {}


def build(table: Mapping[str, StrategyFactory] | None = None) -> list[Strategy]:
    """Instantiate every strategy of ``table`` (default :data:`STRATEGIES`)."""
    built = [factory() for factory in (STRATEGIES if table is None else table).values()]
    for strategy in built:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"{strategy!r} does not implement Strategy")
    return built
