"""``NodeNUMAResourceArgs``: defaults, the wire form and validation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from controller.scheduler.numaresource.args import (
    NodeNUMAResourceArgs,
    NodeNUMAResourceArgsError,
    ResourceWeight,
    ScoringStrategy,
    decode_args,
)


def test_defaults() -> None:
    args = decode_args(None)
    assert args == decode_args({}) == NodeNUMAResourceArgs()
    assert args.default_cpu_bind_policy == "FullPCPUs"
    for strategy in (args.scoring_strategy, args.numa_scoring_strategy):
        assert strategy.type == "LeastAllocated"
        assert strategy.weights == {"cpu": 1, "memory": 1}
    assert args.default_numa_allocate_strategy == "LeastAllocated"


def test_wire_names() -> None:
    args = decode_args(
        {
            "defaultCPUBindPolicy": "SpreadByPCPUs",
            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu"}]},
            "numaScoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 3}],
            },
        }
    )
    assert args.default_cpu_bind_policy == "SpreadByPCPUs"
    assert args.scoring_strategy == ScoringStrategy(
        type="MostAllocated", resources=(ResourceWeight(name="cpu", weight=1),)
    )
    assert args.numa_scoring_strategy.weights == {"cpu": 2, "memory": 3}
    assert args.default_numa_allocate_strategy == "MostAllocated"
    assert decode_args(msgspec.json.decode(msgspec.json.encode(args))) == args


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        (
            {"defaultCPUBindPolicy": "ConstrainedBurst"},
            ["defaultCPUBindPolicy", "ConstrainedBurst"],
        ),
        ({"defaultCPUBindPolicy": "Default"}, ["defaultCPUBindPolicy", "Default"]),
        ({"scoringStrategy": {"type": "Balanced"}}, ["scoringStrategy.type", "Balanced"]),
        ({"numaScoringStrategy": {"type": "Nope"}}, ["numaScoringStrategy.type", "Nope"]),
        (
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}},
            ["scoringStrategy.resources[0].weight", "0"],
        ),
        (
            {"numaScoringStrategy": {"resources": [{"name": "cpu", "weight": 101}]}},
            ["numaScoringStrategy.resources[0].weight", "101"],
        ),
        (
            {"scoringStrategy": {"resources": [{"name": "cpu"}, {"name": "cpu"}]}},
            ["scoringStrategy.resources[1].name", "cpu"],
        ),
        ({"scoringStrategy": {"resources": [{"name": ""}]}}, ["resources[0].name"]),
        ({"defaultCpuBindPolicy": "FullPCPUs"}, ["defaultCpuBindPolicy"]),
        ({"defaultCPUBindPolicy": 3}, ["defaultCPUBindPolicy"]),
    ],
    ids=[
        "bind-policy-not-binding",
        "bind-policy-Default",
        "scoring-type",
        "numa-scoring-type",
        "weight-zero",
        "weight-too-big",
        "duplicate-resource",
        "empty-resource-name",
        "unknown-field",
        "wrong-type",
    ],
)
def test_bad_args_name_the_field_and_value(raw: dict[str, Any], names: list[str]) -> None:
    with pytest.raises(NodeNUMAResourceArgsError) as caught:
        decode_args(raw)
    for name in names:
        assert name in str(caught.value)


def test_constructing_bad_args_fails_too() -> None:
    with pytest.raises(NodeNUMAResourceArgsError, match="defaultCPUBindPolicy"):
        NodeNUMAResourceArgs(default_cpu_bind_policy="None")
