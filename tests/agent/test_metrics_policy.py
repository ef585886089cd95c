"""The agent follows its NodeMetric's ``spec.metricCollectPolicy`` (agent-spec §7.2)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from agent.config import AgentConfig, MetricsSection
from agent.metrics.collector import Collector, build_collector, build_sampler
from agent.metrics.policy import NodeMetricSpecFollower, followed
from agent.metrics.usage import UsageSampler
from apis.codec import encode_json
from apis.duration import Duration
from apis.meta import ObjectMeta
from apis.slo import AggregatePolicy, NodeMetric, NodeMetricCollectPolicy, NodeMetricSpec
from tests.fakes.host import FakeHost

GIB = 1 << 30
HZ = 100


def spec(
    *,
    aggregate: int | None = None,
    report: int | None = None,
    windows: tuple[str, ...] = (),
    memory: str = "",
) -> NodeMetricSpec:
    return NodeMetricSpec(
        metric_collect_policy=NodeMetricCollectPolicy(
            aggregate_duration_seconds=aggregate,
            report_interval_seconds=report,
            node_aggregate_policy=(
                AggregatePolicy(durations=tuple(Duration.parse(w) for w in windows))
                if windows
                else None
            ),
            node_memory_collect_policy=memory,
        )
    )


def test_every_field_the_spec_sets_wins() -> None:
    settings = followed(
        MetricsSection(),
        spec(aggregate=120, report=30, windows=("1m", "15m"), memory="usageWithPageCache"),
    )
    assert settings == MetricsSection(
        aggregate_duration=120,
        report_interval=30,
        aggregate_durations=(60, 900),
        memory_policy="usageWithPageCache",
    )


def test_what_the_spec_leaves_unset_keeps_the_agents_own() -> None:
    mine = MetricsSection(report_interval=45, aggregate_duration=600)
    assert followed(mine, None) is mine
    assert followed(mine, NodeMetricSpec()) is mine
    assert followed(mine, spec(report=90)) == msgspec.structs.replace(mine, report_interval=90)


@pytest.mark.parametrize(
    "bad",
    [spec(aggregate=0), spec(report=-5), spec(windows=("0s",)), spec(memory="usageWithSwap")],
)
def test_values_koordlet_could_not_use_keep_the_agents_own(bad: NodeMetricSpec) -> None:
    assert followed(MetricsSection(), bad) == MetricsSection()


def test_the_follower_keeps_the_last_good_spec() -> None:
    follower = NodeMetricSpecFollower(None, "n1")
    assert follower.current() is None
    sent = spec(report=30)
    follower.handle(encode_json(NodeMetric(metadata=ObjectMeta(name="n1"), spec=sent)))
    assert follower.current() == sent
    follower.handle(b'{"apiVersion": "v1", "kind": "Pod"')
    assert follower.current() == sent
    follower.handle(b"")
    assert follower.current() is None


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


def _collector(host: FakeHost, policy: list[NodeMetricSpec | None]) -> Collector:
    cfg = AgentConfig(host=host.paths, cgroup=host.cgroup)
    clock = Clock()
    return build_collector(
        cfg,
        node="n1",
        cgroup=None,
        policy=lambda: policy[0],
        sampler=UsageSampler(
            cfg.host, build_sampler(cfg, None, clock=clock).reader, clock=clock, clock_ticks=HZ
        ),
        clock=clock,
        wall=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_the_collector_resizes_its_windows_and_memory_to_the_spec(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write_proc_stat([(0, 0)])
    host.write_meminfo(total=16 * GIB, free=4 * GIB, available=10 * GIB)
    policy: list[NodeMetricSpec | None] = [None]
    collector = _collector(host, policy)
    assert collector.collect().node_memory == 6 * GIB  # without page cache: total - available
    before = collector.windows
    assert (before.aggregate_duration, before.durations) == (300, (300, 600, 1800))

    policy[0] = spec(aggregate=60, report=30, windows=("2m",), memory="usageWithPageCache")
    assert collector.collect().node_memory == 12 * GIB  # with page cache: total - free
    after = collector.windows
    assert (after.aggregate_duration, after.durations) == (60, (120,))
    assert collector.settings.report_interval == 30
    metric = collector.nodemetric()
    assert metric is not None
    collected = metric.spec.metric_collect_policy
    assert collected is not None
    assert collected.aggregate_duration_seconds == 60
    assert collected.report_interval_seconds == 30
    assert collected.node_aggregate_policy == AggregatePolicy(durations=(Duration.parse("2m"),))

    policy[0] = None  # the NodeMetric went away: the agent's own settings again
    collector.collect()
    again = (collector.windows.durations, collector.settings)
    assert again == ((300, 600, 1800), MetricsSection())
