"""The scheduling queue on a fake clock: order, backoff, unschedulable parking."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from apis.core import Pod
from controller.scheduler.scheduling_queue import SchedulingQueue, Where
from tests.controller.scheduler import make_pod


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pod(name: str, *, priority: int = 0, created: int = 0) -> Pod:
    pod = make_pod(name, priority=priority)
    stamp = datetime.fromtimestamp(1_700_000_000 + created, UTC)
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, creation_timestamp=stamp)
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_order_is_priority_then_age_then_name(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    for pod in (
        _pod("late-low", priority=1, created=50),
        _pod("b-old", priority=1, created=10),
        _pod("a-old", priority=1, created=10),
        _pod("high", priority=9000, created=99),
    ):
        queue.add(pod)
    assert [e.key for e in queue.pop_ready()] == [
        "default/high",
        "default/a-old",
        "default/b-old",
        "default/late-low",
    ]
    assert queue.pop_ready() == []


@pytest.mark.parametrize(
    ("limit", "first", "second"),
    [
        (1, ["default/high"], ["default/a-old"]),
        (2, ["default/high", "default/a-old"], ["default/b-old", "default/late-low"]),
        (4, ["default/high", "default/a-old", "default/b-old", "default/late-low"], []),
        (9, ["default/high", "default/a-old", "default/b-old", "default/late-low"], []),
    ],
)
def test_a_limited_pop_takes_the_first_in_order_and_keeps_the_rest_active(
    clock: FakeClock, limit: int, first: list[str], second: list[str]
) -> None:
    queue = SchedulingQueue(clock)
    for pod in (
        _pod("late-low", priority=1, created=50),
        _pod("b-old", priority=1, created=10),
        _pod("a-old", priority=1, created=10),
        _pod("high", priority=9000, created=99),
    ):
        queue.add(pod)
    assert [e.key for e in queue.pop_ready(limit)] == first
    left = 4 - len(first)
    assert queue.counts()[Where.ACTIVE] == left
    assert queue.next_wake() == (0.0 if left else None)
    assert [e.key for e in queue.pop_ready(limit)][: len(second)] == second[:limit]


def test_error_backoff_doubles_up_to_ten_seconds(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    queue.add(_pod("p"))
    waits = []
    for _ in range(6):
        (entry,) = queue.pop_ready()
        queue.backoff(entry.key)
        assert queue.where(entry.key) is Where.BACKOFF
        wait = queue.next_wake()
        assert wait is not None
        waits.append(wait)
        clock.now += wait - 0.01
        assert queue.pop_ready() == []  # not yet
        clock.now += 0.01
    assert waits == pytest.approx([1.0, 2.0, 4.0, 8.0, 10.0, 10.0])
    assert [e.key for e in queue.pop_ready()] == ["default/p"]


def test_unschedulable_waits_for_an_event(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    queue.add(_pod("p"))
    (entry,) = queue.pop_ready()
    queue.park(entry.key)
    clock.now += 60
    assert queue.pop_ready() == []
    assert queue.where("default/p") is Where.UNSCHEDULABLE
    assert queue.move_all() == 1
    assert [e.key for e in queue.pop_ready()] == ["default/p"]


def test_an_event_during_backoff_waits_out_the_backoff(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    queue.add(_pod("p"))
    for _ in range(2):  # two attempts: a 2 s backoff
        (entry,) = queue.pop_ready()
        queue.park(entry.key)
        queue.move_all()
        clock.now += 2
    (entry,) = queue.pop_ready()
    queue.park(entry.key)
    clock.now += 1
    queue.move_all()
    assert queue.where("default/p") is Where.BACKOFF
    assert queue.next_wake() == pytest.approx(3.0)  # third attempt: 4 s after it started


def test_unschedulable_pods_retry_after_five_minutes(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    queue.add(_pod("p"))
    (entry,) = queue.pop_ready()
    queue.park(entry.key)
    assert queue.next_wake() == pytest.approx(300.0)
    clock.now += 299
    assert queue.pop_ready() == []
    clock.now += 1
    assert [e.key for e in queue.pop_ready()] == ["default/p"]


def test_a_changed_pod_is_retried_and_a_deleted_one_forgotten(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    queue.add(_pod("p"))
    queue.add(_pod("q"))
    for entry in queue.pop_ready():
        queue.park(entry.key)
    clock.now += 5
    queue.add(_pod("p"), changed=False)
    queue.add(_pod("q", priority=5), changed=True)
    assert queue.where("default/p") is Where.UNSCHEDULABLE
    assert [e.key for e in queue.pop_ready()] == ["default/q"]
    queue.delete("default/p")
    assert "default/p" not in queue
    assert len(queue) == 1
    assert queue.counts()[Where.IN_FLIGHT] == 1


def test_done_removes_and_nothing_left_means_no_wake(clock: FakeClock) -> None:
    queue = SchedulingQueue(clock)
    queue.add(_pod("p"))
    assert queue.next_wake() == 0.0
    (entry,) = queue.pop_ready()
    queue.done(entry.key)
    assert len(queue) == 0
    assert queue.next_wake() is None
