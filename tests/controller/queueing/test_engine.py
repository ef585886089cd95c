"""The admission engine on its own: equivalence classes, event-driven re-tries, the cycle
budget and the order across queues."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from datetime import UTC, datetime
from typing import Any

from controller.queueing.engine import Engine
from controller.queueing.framework import CycleContext, FilterPlugin, FilterResult, QueueConfig
from controller.queueing.plugins import build_plugins
from controller.queueing.units import UnitInfo, unit_info
from controller.quota.check import QuotaIndex
from tests.controller.queueing.conftest import cores, holding, quota_object, unit_object

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


class Counting:
    """Wraps a filter and counts the units it is asked about."""

    def __init__(self, inner: FilterPlugin) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls = 0

    def signature(self, unit: UnitInfo) -> Hashable:
        return self.inner.signature(unit)

    def filter(self, ctx: CycleContext, unit: UnitInfo, request: Mapping[str, int]) -> FilterResult:
        self.calls += 1
        return self.inner.filter(ctx, unit, request)


def engine(**kwargs: Any) -> tuple[Engine, Counting]:
    plugins = build_plugins()
    counting = Counting(plugins.filters[0])
    built = Engine(dataclasses.replace(plugins, filters=(counting,)), **kwargs)
    return built, counting


def queues(*names: str, policy: str = "Priority", priority: int = 1000) -> dict[str, QueueConfig]:
    return {
        n: QueueConfig(name=n, namespace="koord-queue", policy=policy, priority=priority)
        for n in names
    }


def add(target: Engine, name: str, quota: str = "team-a", **kwargs: Any) -> UnitInfo:
    info = unit_info(unit_object(name, quota=quota, **kwargs), quota)
    target.upsert(info)
    return info


def test_one_refused_head_stands_for_its_whole_class() -> None:
    target, counting = engine()
    target.set_quotas(QuotaIndex.build([quota_object("team-a", max=cores(2))]))
    target.set_queues(queues("team-a"))
    for n in range(100):
        add(target, f"big-{n}", cpu_m=3000, created=n)
    result = target.cycle(NOW)
    assert not result.admitted
    assert counting.calls == 1  # not 100: the other 99 look the same to every filter
    refusal = target.refusal_of(unit_object("big-57").metadata.uid)
    assert refusal is not None
    assert "limited quotaName:team-a" in refusal.message


def test_nothing_is_retried_until_a_blocker_changes() -> None:
    target, counting = engine()
    target.set_quotas(QuotaIndex.build([quota_object("team-a", max=cores(4))]))
    target.set_queues(queues("team-a"))
    held = add(target, "held", cpu_m=4000)
    assert [a.unit.name for a in target.cycle(NOW).admitted] == ["held"]
    # The store echoes the admission back.
    add(target, "held", cpu_m=4000, phase="Dequeued", admissions=holding("main"))
    add(target, "waiting", cpu_m=2000, created=1)
    assert not target.cycle(NOW).admitted
    calls = counting.calls
    for _ in range(5):
        assert not target.cycle(NOW).admitted
    assert counting.calls == calls  # no polling
    target.remove(held.uid)
    assert [a.unit.name for a in target.cycle(NOW).admitted] == ["waiting"]


def test_the_cycle_budget_leaves_the_rest_for_the_next_cycle() -> None:
    target, _ = engine(attempts_per_cycle=3)
    target.set_quotas(QuotaIndex.build([quota_object("team-a", max=cores(100))]))
    target.set_queues(queues("team-a"))
    for n in range(5):
        add(target, f"job-{n}", created=n)
    first = target.cycle(NOW)
    assert [a.unit.name for a in first.admitted] == ["job-0", "job-1", "job-2"]
    assert first.more
    second = target.cycle(NOW)
    assert [a.unit.name for a in second.admitted] == ["job-3", "job-4"]
    assert not second.more


def test_queues_are_visited_by_priority() -> None:
    target, _ = engine()
    target.set_quotas(
        QuotaIndex.build(
            [
                quota_object("dept", max=cores(1), is_parent=True),
                quota_object("low", max=cores(1), parent="dept"),
                quota_object("high", max=cores(1), parent="dept"),
            ]
        )
    )
    target.set_queues({**queues("low", priority=1), **queues("high", priority=5)})
    add(target, "from-low", quota="low")
    add(target, "from-high", quota="high", created=10)
    assert [a.unit.name for a in target.cycle(NOW).admitted] == ["from-high"]


def test_a_larger_quota_reopens_refused_units() -> None:
    target, _ = engine()
    target.set_quotas(QuotaIndex.build([quota_object("team-a", max=cores(1))]))
    target.set_queues(queues("team-a", policy="Block"))
    add(target, "job", cpu_m=2000)
    assert not target.cycle(NOW).admitted
    target.set_quotas(QuotaIndex.build([quota_object("team-a", max=cores(2))]))
    assert [a.unit.name for a in target.cycle(NOW).admitted] == ["job"]
