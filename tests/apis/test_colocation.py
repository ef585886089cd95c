"""The shared Batch/Mid arithmetic (agent-spec §5.2-5.3) on its own: the edges its two callers
(the node agent and the controller's noderesource loop) rely on alike."""

from __future__ import annotations

from fractions import Fraction

import pytest

from apis import colocation
from apis import constants as k

CAP = 10_000


def test_high_priority_sums_take_the_larger_of_request_and_use_pod_by_pod() -> None:
    sums = colocation.high_priority([(1000, 400), (200, 900)])
    assert (sums.request, sums.used, sums.greater) == (1200, 1300, 1900)


@pytest.mark.parametrize(
    ("resource", "policy", "expected"),
    [
        # 10000 - 4000 safety - max(1500 system, 500 reserved) - used / request / greater
        pytest.param(k.RESOURCE_CPU, colocation.USAGE, 10_000 - 4000 - 1500 - 1300, id="usage"),
        pytest.param(
            k.RESOURCE_CPU,
            colocation.REQUEST,
            10_000 - 4000 - 1500 - 1300,
            id="cpu-request-is-usage",
        ),
        pytest.param(
            k.RESOURCE_MEMORY, colocation.REQUEST, 10_000 - 4000 - 500 - 1200, id="memory-request"
        ),
        pytest.param(
            k.RESOURCE_CPU, colocation.MAXIMUM_USAGE_REQUEST, 10_000 - 4000 - 1500 - 1900, id="max"
        ),
    ],
)
def test_batch_amount_by_policy(resource: str, policy: str, expected: int) -> None:
    amount = colocation.batch_amount(
        resource,
        capacity=CAP,
        reclaim_percent=Fraction(60),
        system_used=1500,
        reserved=500,
        hp=colocation.high_priority([(1000, 400), (200, 900)]),
        policy=policy,
        threshold_percent=None,
    )
    assert amount == expected


def plain(reclaim_percent: Fraction, threshold_percent: int | None) -> int:
    """Batch cpu of an idle node of 10 cores."""
    return colocation.batch_amount(
        k.RESOURCE_CPU,
        capacity=CAP,
        reclaim_percent=reclaim_percent,
        system_used=0,
        reserved=0,
        hp=colocation.HighPriority(),
        policy=colocation.USAGE,
        threshold_percent=threshold_percent,
    )


def test_batch_amount_is_capped_by_its_threshold_and_floored_at_zero() -> None:
    assert plain(Fraction(60), None) == 6000
    assert plain(Fraction(60), 25) == 2500
    assert plain(Fraction(-10), None) == 0


def test_mid_amounts() -> None:
    dynamic = colocation.mid_dynamic_amount(
        capacity=CAP,
        prod_reclaimable=3000,
        node_unused=2000,  # the reclaimable amount is held to what is unused
        reserved=500,
        system_used=1000,
        hp_request=5000,
        unallocated_percent=50,
        threshold_percent=100,
    )
    assert dynamic == 2000 + (CAP - 1000 - 5000) // 2
    overused = colocation.mid_dynamic_amount(
        capacity=CAP,
        prod_reclaimable=3000,
        node_unused=-500,
        reserved=0,
        system_used=0,
        hp_request=CAP,
        unallocated_percent=50,
        threshold_percent=100,
    )
    assert overused == 0
    static = colocation.mid_static_amount(
        capacity=CAP, reserved_percent=Fraction(30), threshold_percent=20
    )
    assert static == 2000


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.3", Fraction(3, 10)), (" 1.5 ", Fraction(3, 2)), ("lots", None), ("-0.2", None)],
)
def test_ratio_labels(text: str, expected: Fraction | None) -> None:
    told: list[tuple[str, str, str]] = []
    found = colocation.ratio_label({"key": text}, "key", ignored=lambda *why: told.append(why))
    assert found == expected
    assert bool(told) == (expected is None)
    assert colocation.ratio_label({}, "key") is None


def test_percents_from_ratios() -> None:
    assert colocation.reclaim_percent(60, Fraction(1, 2)) == 50
    assert colocation.reclaim_percent(60, Fraction(3, 2)) == 60  # above 1: ignored
    assert colocation.reclaim_percent(60, None) == 60
    assert colocation.mid_static_percent(30, Fraction(1, 10)) == 10
    assert colocation.mid_static_percent(30, None) == 30


def test_normalization_ratio() -> None:
    assert colocation.normalization_ratio("1.5") == Fraction(3, 2)
    for text in (None, "", "0.8", "x"):
        assert colocation.normalization_ratio(text) == 1
    assert colocation.normalized(3000, Fraction(3, 2)) == 4500
    assert colocation.normalized(3000, Fraction(1)) == 3000


def test_moved_by_at_least_the_threshold() -> None:
    assert not colocation.moved(1000, 1000, 0.1)
    assert not colocation.moved(1000, 1099, 0.1)
    assert colocation.moved(1000, 1100, 0.1)
    assert colocation.moved(1000, 900, 0.1)
    assert colocation.moved(0, 1, 0.1)
