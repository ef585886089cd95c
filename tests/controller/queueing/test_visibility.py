"""Positions, the admission rate and ETA, and the text a waiting unit shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.queueing import QueueItemDetail, QueueStatus
from controller.queueing import visibility as vis
from controller.queueing.visibility import AdmissionRate, Shortfall

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GI = 1 << 30


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_queue_item_details_positions_are_one_based() -> None:
    details = vis.queue_item_details([("u1", "team", 100), ("u2", "team", 50), ("u3", "b", 50)])
    assert details == {
        "active": (
            QueueItemDetail(name="u1", namespace="team", priority=100, position=1),
            QueueItemDetail(name="u2", namespace="team", priority=50, position=2),
            QueueItemDetail(name="u3", namespace="b", priority=50, position=3),
        )
    }
    status = QueueStatus(queue_item_details=details)
    assert status.queue_item_details["active"][2].position == 3
    assert vis.queue_item_details([]) == {"active": ()}


# --- rate ----------------------------------------------------------------------------------------


def rate_after(samples: list[tuple[float, int]]) -> AdmissionRate:
    rate = AdmissionRate()
    for seconds, admitted in samples:
        rate = rate.update(at(seconds), admitted)
    return rate


@pytest.mark.parametrize(
    ("samples", "per_minute"),
    [
        pytest.param([], 0.0, id="no-samples"),
        pytest.param([(0, 5)], 0.0, id="one-sample-has-no-rate"),
        pytest.param([(0, 0), (60, 30)], 30.0, id="warm-up-average"),
        pytest.param([(0, 10), (60, 20)], 30.0, id="first-sample-counts-in-warm-up"),
        pytest.param([(0, 0), (1, 5)], 30.0, id="burst-spread-over-min-span"),
        pytest.param([(0, 0), (0, 3), (0, 3), (60, 0)], 6.0, id="same-instant-samples-held"),
        pytest.param([(0, 0), *[(60 * i, 10) for i in range(1, 60)]], 10.0, id="steady-state"),
        pytest.param([(0, 0), (60, 0), (120, 0)], 0.0, id="no-admissions"),
    ],
)
def test_admission_rate(samples: list[tuple[float, int]], per_minute: float) -> None:
    assert rate_after(samples).per_minute == pytest.approx(per_minute, rel=1e-6)


def test_rate_after_warm_up_follows_a_slowdown() -> None:
    busy = rate_after([(0, 0), *[(60 * i, 60) for i in range(1, 11)]])
    assert busy.per_minute == pytest.approx(60.0)
    slow = busy
    for i in range(11, 31):
        slow = slow.update(at(60 * i), 6)
    assert 6.0 < slow.per_minute < 10.0
    assert busy.per_minute == pytest.approx(60.0)  # an immutable value: the old one is unchanged


def test_rate_refuses_negative_counts() -> None:
    with pytest.raises(ValueError, match="admitted"):
        AdmissionRate().update(T0, -1)


@given(steps=st.lists(st.tuples(st.floats(0, 3600), st.integers(0, 1000)), min_size=1, max_size=40))
def test_rate_is_never_negative_or_nan(steps: list[tuple[float, int]]) -> None:
    rate = AdmissionRate()
    clock = 0.0
    for gap, admitted in steps:
        clock += gap
        rate = rate.update(at(clock), admitted)
        assert rate.per_second >= 0.0
        assert rate.per_second == rate.per_second


@pytest.mark.parametrize(
    ("position", "per_second", "expected"),
    [
        (1, 0.5, timedelta(seconds=2)),
        (30, 0.5, timedelta(minutes=1)),
        (536, 9.6 / 60, timedelta(minutes=536 / 9.6)),
        (3, 0.0, None),
        (0, 1.0, None),
        (3, float("inf"), None),
    ],
)
def test_eta(position: int, per_second: float, expected: timedelta | None) -> None:
    assert vis.eta(position, per_second) == expected


@pytest.mark.parametrize(
    ("text", "per_second"),
    [("30", 0.5), ("12.5", 12.5 / 60), ("0", 0.0), ("", None), ("fast", None), ("-1", None)],
)
def test_parse_rate(text: str, per_second: float | None) -> None:
    assert vis.parse_rate(text) == per_second


def test_format_rate_round_trips_per_minute() -> None:
    rate = rate_after([(0, 0), (60, 25)])
    assert vis.format_rate(rate) == "25"
    assert vis.format_rate(0.2) == "12"
    assert vis.format_rate(1 / 7) == "8.571"
    assert vis.format_rate(0.0) == "0"
    assert vis.parse_rate(vis.format_rate(rate)) == pytest.approx(rate.per_second)


# --- messages ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        pytest.param(
            {
                "quota": "team-a",
                "resource_short": {"cpu": (6000, 2000)},
                "runtime": {"cpu": 40000},
                "max_": {"cpu": 48000},
            },
            "waiting for quota team-a: cpu needs 6, 2 free of runtime 40 (max 48)",
            id="runtime-and-max",
        ),
        pytest.param(
            # Example D: team used 35 of max 40, the unit asks 6.
            {"quota": "team", "resource_short": {"cpu": (6000, 5000)}, "max_": {"cpu": 40000}},
            "waiting for quota team: cpu needs 6, 5 free of max 40",
            id="example-d-max-only",
        ),
        pytest.param(
            {
                "quota": "dept",
                "resource_short": {"memory": (8 * GI, 2 * GI), "cpu": (4000, 1500)},
                "max_": {"cpu": 100000, "memory": 64 * GI},
                "via": "team-a",
            },
            "waiting for quota dept (parent of team-a): cpu needs 4, 1500m free of max 100;"
            " memory needs 8Gi, 2Gi free of max 64Gi",
            id="ancestor-two-resources",
        ),
        pytest.param(
            {"quota": "q", "resource_short": {"nvidia.com/gpu": (2, -1)}},
            "waiting for quota q: nvidia.com/gpu needs 2, 0 free",
            id="over-committed-shows-zero",
        ),
    ],
)
def test_shortfall_message(kwargs: dict[str, Any], text: str) -> None:
    assert vis.shortfall_message(**kwargs) == text


def test_waiting_message_combines_causes_in_a_stable_order() -> None:
    shorts = [
        Shortfall(quota="team-a", resource="cpu", need=6000, free=2000, runtime=40000),
        Shortfall(quota="dept", resource="cpu", need=6000, free=0, max=100000, via="team-a"),
    ]
    text = vis.waiting_message(
        shorts,
        blocked_by="team/big-job",
        gates=["waiting for AdmissionCheck prov to become active"],
    )
    assert text == (
        "waiting behind team/big-job, which blocks its quota (Block policy); "
        "waiting for quota team-a: cpu needs 6, 2 free of runtime 40; "
        "waiting for quota dept (parent of team-a): cpu needs 6, 0 free of max 100; "
        "waiting for AdmissionCheck prov to become active"
    )
    assert text == vis.waiting_message(
        shorts,
        blocked_by="team/big-job",
        gates=["waiting for AdmissionCheck prov to become active"],
    )


def test_waiting_message_missing_quota_and_default() -> None:
    assert "quota not exist" in vis.waiting_message(missing_quota="ghost")
    assert vis.waiting_message() == "waiting in queue"
