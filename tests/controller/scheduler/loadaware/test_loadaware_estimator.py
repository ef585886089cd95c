"""The default pod usage estimator (§5.1)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from apis import constants as k
from apis.core import Container, Pod, PodSpec, ResourceRequirements
from apis.resources import ResourceList
from controller.scheduler.loadaware.args import load_args
from controller.scheduler.loadaware.estimator import estimate_pod, pod_limits
from tests.controller.scheduler.loadaware.builders import GIB, MIB, pod

FACTORS = k.ANNOTATION_LOAD_ESTIMATED_SCALING_FACTORS


@pytest.mark.parametrize(
    ("incoming", "args", "expected"),
    [
        (
            pod(requests={"cpu": 4000, "memory": 8 * GIB}, limits={"cpu": 4000, "memory": 8 * GIB}),
            {},
            {"cpu": 3400, "memory": round(8 * GIB * 0.7)},
        ),
        (
            pod(requests={"cpu": 2000, "memory": 4 * GIB}, limits={"cpu": 4000}),
            {},
            {"cpu": 3400, "memory": round(4 * GIB * 0.7)},
        ),
        (pod(), {}, {"cpu": 250, "memory": 200 * MIB}),
        (pod(requests={"cpu": 1}), {}, {"cpu": 1, "memory": 200 * MIB}),
        (pod(requests={"cpu": 3}), {}, {"cpu": 3, "memory": 200 * MIB}),  # 2.55 rounds up
        (
            pod(requests={"cpu": 1000}),
            {"estimatedScalingFactors": {"cpu": 100, "memory": 50}},
            {"cpu": 1000, "memory": 200 * MIB},
        ),
        (
            pod(
                requests={k.RESOURCE_BATCH_CPU: 2000, k.RESOURCE_BATCH_MEMORY: 2 * GIB},
                priority_class="koord-batch",
            ),
            {},
            {"cpu": 1700, "memory": round(2 * GIB * 0.7)},
        ),
        (
            pod(requests={"cpu": 2000, "memory": GIB}, priority_class="koord-batch"),
            {},
            {"cpu": 250, "memory": 200 * MIB},  # a batch pod's cpu/memory requests are not its own
        ),
        (
            pod(requests={k.RESOURCE_MID_CPU: 1000}, priority_class="koord-mid"),
            {},
            {"cpu": 850, "memory": 200 * MIB},
        ),
        (
            pod(requests={"cpu": 1000, "nvidia.com/gpu": 2}),
            {"estimatedScalingFactors": {"nvidia.com/gpu": 100}},
            {"cpu": 850, "memory": 200 * MIB, "nvidia.com/gpu": 2},
        ),
        (
            pod(requests={"cpu": 1000}),
            {"estimatedScalingFactors": {"ephemeral-storage": 50}},
            {"cpu": 850, "memory": 200 * MIB, "ephemeral-storage": 0},
        ),
    ],
    ids=[
        "request-equals-limit",
        "limit-above-request",
        "nothing-requested-floor",
        "tiny-cpu",
        "rounding-half-up",
        "custom-factors",
        "batch-resources",
        "batch-pod-ignores-cpu",
        "mid-resources",
        "extra-resource",
        "extra-resource-without-floor",
    ],
)
def test_estimate(incoming: Pod, args: Mapping[str, Any], expected: dict[str, int]) -> None:
    assert estimate_pod(incoming, load_args(args)) == expected


def test_estimate_capped_at_the_limit() -> None:
    """A request above its limit (only possible in a hand-made object) is capped at the limit."""
    odd = Pod(
        spec=PodSpec(
            containers=(
                Container(
                    name="c",
                    resources=ResourceRequirements(
                        requests=ResourceList({"cpu": 4000}), limits=ResourceList({"cpu": 1000})
                    ),
                ),
            )
        )
    )
    assert estimate_pod(odd, load_args({}))["cpu"] == 1000


@pytest.mark.parametrize(
    ("allow", "annotation", "expected_cpu"),
    [
        (True, {"cpu": 50}, 500),
        (False, {"cpu": 50}, 850),
        (True, {"cpu": 0}, 850),  # out of range: ignored
        (True, {"cpu": "50"}, 850),  # not a number: ignored
        (True, None, 850),
    ],
    ids=["allowed", "not-allowed", "zero-ignored", "string-ignored", "no-annotation"],
)
def test_pod_scaling_factor_annotation(
    allow: bool, annotation: dict[str, Any] | None, expected_cpu: int
) -> None:
    annotations = {FACTORS: json.dumps(annotation)} if annotation is not None else {}
    incoming = pod(requests={"cpu": 1000}, annotations=annotations)
    args = load_args({"allowCustomizeEstimation": allow})
    assert estimate_pod(incoming, args)["cpu"] == expected_cpu


def test_annotation_that_is_not_json_is_ignored() -> None:
    incoming = pod(requests={"cpu": 1000}, annotations={FACTORS: "{cpu: 50"})
    assert estimate_pod(incoming, load_args({"allowCustomizeEstimation": True}))["cpu"] == 850


def test_pod_limits_sum_containers_and_take_the_init_peak() -> None:
    def container(name: str, cpu: int, *, sidecar: bool = False) -> Container:
        return Container(
            name=name,
            restart_policy="Always" if sidecar else "",
            resources=ResourceRequirements(limits=ResourceList({"cpu": cpu})),
        )

    spec = PodSpec(
        containers=(container("a", 1000), container("b", 500)),
        init_containers=(container("side", 200, sidecar=True), container("init", 3000)),
    )
    assert pod_limits(Pod(spec=spec)) == {"cpu": 3200}
    spec = PodSpec(
        containers=(container("a", 1000),),
        init_containers=(container("side", 200, sidecar=True),),
    )
    assert pod_limits(Pod(spec=spec)) == {"cpu": 1200}
