"""LowNodeLoad's anomaly detector: a node is a source after exactly N over-threshold cycles."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.descheduler.plugins.lownodeload.anomaly import Detector, DetectorCache, State
from controller.descheduler.plugins.lownodeload.args import Anomaly
from tests.controller.descheduler.conftest import T0

MINUTE = timedelta(minutes=1)
KEY = ("pool", "node-a")


def _rule(abnormal: int = 5, normal: int = 3, timeout: timedelta | None = MINUTE) -> Anomaly:
    return Anomaly(
        consecutive_abnormalities=abnormal, consecutive_normalities=normal, timeout=timeout
    )


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_source_on_exactly_the_nth_consecutive_abnormal_cycle(n: int) -> None:
    detector = Detector(_rule(abnormal=n))
    states = [detector.mark(normal=False, now=T0 + i * timedelta(seconds=1)) for i in range(n)]
    assert states == [State.OK] * (n - 1) + [State.ANOMALY]


def test_a_normal_cycle_breaks_the_streak() -> None:
    detector = Detector(_rule(abnormal=3))
    for verdict in (False, False, True, False, False):
        assert detector.mark(normal=verdict, now=T0) is State.OK
    assert detector.mark(normal=False, now=T0) is State.ANOMALY


@pytest.mark.parametrize(
    ("normal_marks", "state"),
    [
        pytest.param(2, State.ANOMALY, id="2 of 3 normal marks: still abnormal"),
        pytest.param(3, State.OK, id="3 of 3 normal marks: normal again"),
    ],
)
def test_anomaly_ends_after_consecutive_normalities(normal_marks: int, state: State) -> None:
    detector = Detector(_rule(abnormal=1, normal=3, timeout=None))
    assert detector.mark(normal=False, now=T0) is State.ANOMALY
    for _ in range(normal_marks):
        detector.mark(normal=True, now=T0)
    assert detector.state is state


@pytest.mark.parametrize(
    ("elapsed", "state"),
    [
        pytest.param(timedelta(seconds=59), State.ANOMALY, id="before the timeout"),
        pytest.param(MINUTE, State.OK, id="at the timeout"),
    ],
)
def test_anomaly_times_out(elapsed: timedelta, state: State) -> None:
    detector = Detector(_rule(abnormal=2))
    detector.mark(normal=False, now=T0)
    detector.mark(normal=False, now=T0)
    assert detector.state is State.ANOMALY
    # Still over threshold at the next mark: after a timeout the count starts again from 1.
    assert detector.mark(normal=False, now=T0 + elapsed) is state


def test_no_timeout_keeps_the_anomaly() -> None:
    detector = Detector(_rule(abnormal=1, timeout=None))
    detector.mark(normal=False, now=T0)
    assert detector.mark(normal=False, now=T0 + timedelta(days=30)) is State.ANOMALY


def test_reset_forces_ok_and_clears_the_counts() -> None:
    detector = Detector(_rule(abnormal=3))
    detector.mark(normal=False, now=T0)
    detector.mark(normal=False, now=T0)
    detector.reset()
    assert detector.state is State.OK
    assert detector.mark(normal=False, now=T0) is State.OK
    assert detector.mark(normal=False, now=T0) is State.OK
    assert detector.mark(normal=False, now=T0) is State.ANOMALY


@given(st.lists(st.booleans(), max_size=40), st.integers(min_value=1, max_value=6))
def test_first_anomaly_is_the_end_of_the_first_run_of_n(marks: list[bool], n: int) -> None:
    detector = Detector(_rule(abnormal=n, timeout=None))
    run = 0
    expected = None
    for i, normal in enumerate(marks):
        run = 0 if normal else run + 1
        if run == n:
            expected = i
            break
    first = next(
        (
            i
            for i, normal in enumerate(marks)
            if detector.mark(normal=normal, now=T0) is State.ANOMALY
        ),
        None,
    )
    assert first == expected


def test_cache_forgets_a_detector_unmarked_for_the_ttl() -> None:
    cache = DetectorCache(timedelta(minutes=5))
    rule = _rule(abnormal=3)
    cache.mark(KEY, rule, normal=False, now=T0)
    cache.mark(KEY, rule, normal=False, now=T0 + timedelta(minutes=4))
    # Refreshed by the second mark: still there 4 minutes later, the third mark counts.
    assert cache.mark(KEY, rule, normal=False, now=T0 + timedelta(minutes=8)) is State.ANOMALY
    # Unmarked for 5 minutes: forgotten, counting starts again.
    assert cache.mark(KEY, rule, normal=False, now=T0 + timedelta(minutes=13)) is State.OK
    assert len(cache) == 1


def test_cache_normal_marks_and_resets_create_no_detector() -> None:
    cache = DetectorCache(timedelta(minutes=5))
    assert cache.mark(KEY, _rule(), normal=True, now=T0) is State.OK
    cache.reset(KEY, T0)
    assert len(cache) == 0


def test_cache_sweep_drops_expired_detectors() -> None:
    cache = DetectorCache(timedelta(minutes=5))
    cache.mark(("p", "a"), _rule(), normal=False, now=T0)
    cache.mark(("p", "b"), _rule(), normal=False, now=T0 + timedelta(minutes=3))
    cache.sweep(T0 + timedelta(minutes=6))
    assert len(cache) == 1
    assert cache.state(("p", "a"), T0 + timedelta(minutes=6)) is State.OK


def test_cache_keys_pools_apart() -> None:
    cache = DetectorCache(timedelta(minutes=5))
    rule = _rule(abnormal=2)
    cache.mark(("pool-1", "n"), rule, normal=False, now=T0)
    assert cache.mark(("pool-2", "n"), rule, normal=False, now=T0) is State.OK
    assert cache.mark(("pool-1", "n"), rule, normal=False, now=T0) is State.ANOMALY
