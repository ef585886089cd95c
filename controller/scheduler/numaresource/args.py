"""``NodeNUMAResourceArgs``: the plugin's settings with their defaults (controller-spec §8).

On the wire (the profile's ``pluginConfig``) fields are camelCase and an unknown field is
refused. Defaults: ``defaultCPUBindPolicy: FullPCPUs``; ``scoringStrategy`` and
``numaScoringStrategy`` both ``LeastAllocated`` over cpu and memory, weight 1 each. A bad value
raises :class:`NodeNUMAResourceArgsError` naming the field and the value.
"""

from __future__ import annotations

from typing import Final

import msgspec

from apis import constants as k
from apis.meta import Model

__all__ = [
    "LEAST_ALLOCATED",
    "MOST_ALLOCATED",
    "NodeNUMAResourceArgs",
    "NodeNUMAResourceArgsError",
    "ResourceWeight",
    "ScoringStrategy",
    "decode_args",
]

LEAST_ALLOCATED: Final = "LeastAllocated"
MOST_ALLOCATED: Final = "MostAllocated"
_STRATEGIES: Final = (LEAST_ALLOCATED, MOST_ALLOCATED)
#: ``defaultCPUBindPolicy`` may only name a policy that binds CPUs.
_DEFAULT_BIND_POLICIES: Final = ("FullPCPUs", "SpreadByPCPUs")
_WEIGHT_MIN: Final = 1
_WEIGHT_MAX: Final = 100


class NodeNUMAResourceArgsError(ValueError):
    """NodeNUMAResourceArgs that cannot be used; the message names the field and the value."""


def _fail(field: str, value: object, rule: str) -> NodeNUMAResourceArgsError:
    return NodeNUMAResourceArgsError(f"NodeNUMAResourceArgs.{field}: {value!r} {rule}")


class ResourceWeight(Model):
    name: str
    weight: int = 1


_CPU_MEMORY: Final = (
    ResourceWeight(name=k.RESOURCE_CPU, weight=1),
    ResourceWeight(name=k.RESOURCE_MEMORY, weight=1),
)


class ScoringStrategy(Model):
    #: ``LeastAllocated`` (spread) or ``MostAllocated`` (pack).
    type: str = LEAST_ALLOCATED
    resources: tuple[ResourceWeight, ...] = _CPU_MEMORY

    @property
    def weights(self) -> dict[str, int]:
        return {item.name: item.weight for item in self.resources}

    def check(self, where: str) -> None:
        if self.type not in _STRATEGIES:
            raise _fail(f"{where}.type", self.type, f"is not one of {', '.join(_STRATEGIES)}")
        seen: set[str] = set()
        for index, item in enumerate(self.resources):
            at = f"{where}.resources[{index}]"
            if not item.name:
                raise _fail(f"{at}.name", item.name, "must not be empty")
            if item.name in seen:
                raise _fail(f"{at}.name", item.name, "is listed twice")
            seen.add(item.name)
            if not _WEIGHT_MIN <= item.weight <= _WEIGHT_MAX:
                raise _fail(
                    f"{at}.weight", item.weight, f"is not in [{_WEIGHT_MIN}, {_WEIGHT_MAX}]"
                )


class NodeNUMAResourceArgs(Model):
    #: Policy of pods whose resource spec says nothing or ``Default``.
    default_cpu_bind_policy: str = msgspec.field(default="FullPCPUs", name="defaultCPUBindPolicy")
    #: Node-level score.
    scoring_strategy: ScoringStrategy = ScoringStrategy()
    #: NUMA-node-level score; its type also picks the default NUMA allocate strategy.
    numa_scoring_strategy: ScoringStrategy = msgspec.field(
        default=ScoringStrategy(), name="numaScoringStrategy"
    )

    def __post_init__(self) -> None:
        if self.default_cpu_bind_policy not in _DEFAULT_BIND_POLICIES:
            raise _fail(
                "defaultCPUBindPolicy",
                self.default_cpu_bind_policy,
                f"is not one of {', '.join(_DEFAULT_BIND_POLICIES)}",
            )
        self.scoring_strategy.check("scoringStrategy")
        self.numa_scoring_strategy.check("numaScoringStrategy")

    @property
    def default_numa_allocate_strategy(self) -> str:
        """``MostAllocated`` when the NUMA scoring strategy packs, else ``LeastAllocated``."""
        if self.numa_scoring_strategy.type == MOST_ALLOCATED:
            return MOST_ALLOCATED
        return LEAST_ALLOCATED


def decode_args(raw: object) -> NodeNUMAResourceArgs:
    """``NodeNUMAResourceArgs`` from decoded YAML/JSON (a mapping, or None for the defaults)."""
    if raw is None:
        return NodeNUMAResourceArgs()
    try:
        return msgspec.convert(raw, NodeNUMAResourceArgs)
    except msgspec.ValidationError as err:
        text = str(err)
        if not text.startswith("NodeNUMAResourceArgs"):
            text = f"NodeNUMAResourceArgs: {text}"
        raise NodeNUMAResourceArgsError(text) from None
