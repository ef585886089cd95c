"""CPU burst: kernel burst, quota scaling, the share-pool state, the limiter, cgroup v2."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from agent.cgroups.resources import Resource
from agent.qos.cpu_burst import CpuBurst, PoolState, TokenBucket, burst_qos, share_pool_state
from agent.qos.framework import Outcome, PodState
from agent.qos.settings import BurstPolicy, BurstSettings
from apis import constants as k
from apis.qos import KubeQoS, QoSClass
from tests.agent.qos_builders import (
    FakeUsage,
    FakeView,
    container_dirs,
    make_pod,
    make_settings,
    make_snapshot,
)

QUOTA = Resource.CPU_QUOTA
BURST = Resource.CPU_BURST
PERIOD = 100_000
LIMIT = 2000  # millicores
BASE = LIMIT * PERIOD // 1000  # 200000 µs
CPUS = 16  # the default topology of the builders
THRESHOLD = 50  # sharePoolThresholdPercent default

# share-pool use (no bound or BE pods): ratio = node / 16000
IDLE = 1000.0
COOLING = 0.45 * CPUS * 1000 + 300  # 0.469 of the pool: within 90 % of the threshold
OVERLOAD = 0.5 * CPUS * 1000


def web(**kwargs: Any) -> PodState:
    defaults: dict[str, Any] = {"qos": "LS", "cpu_limit": LIMIT, "cpu_request": 1000}
    defaults.update(kwargs)
    return make_pod("web", **defaults)


WEB = web()
WEB_C = container_dirs(WEB)[0]


def run(
    pod: PodState = WEB,
    *,
    policy: BurstPolicy = "cfsQuotaBurstOnly",
    strategy: CpuBurst | None = None,
    quota: int | None = BASE,
    pod_quota: int | None = None,
    burst: int | None = None,
    throttled: float | None = None,
    node: float | None = IDLE,
    used: float | None = None,
    pod_used: float | None = None,
    version: int = 1,
    now: float = 0.0,
    pods: tuple[PodState, ...] = (),
    period_s: int = -1,
    quota_burst_percent: int = 300,
    burst_percent: int = 1000,
) -> Outcome:
    view = FakeView()
    dirs = container_dirs(pod)
    for directory in dirs:
        if quota is not None:
            view.set(directory, QUOTA, quota)
        if burst is not None:
            view.set(directory, BURST, burst)
    if pod_quota is None and quota is not None:
        pod_quota = quota * len(dirs)
    if pod_quota is not None:
        view.set(pod.cgroup, QUOTA, pod_quota)
    if burst is not None:
        view.set(pod.cgroup, BURST, burst * len(dirs))
    usage = FakeUsage(
        node=node,
        throttled={} if throttled is None else dict.fromkeys(dirs, throttled),
        cgroups={} if used is None else dict.fromkeys(dirs, used),
        pods={} if pod_used is None else {pod.uid: pod_used},
    )
    settings = make_settings(
        burst=BurstSettings(
            policy=policy,
            cpu_burst_percent=burst_percent,
            cfs_quota_burst_percent=quota_burst_percent,
            cfs_quota_burst_period_seconds=period_s,
        )
    )
    snapshot = make_snapshot(
        pods=(pod, *pods), usage=usage, current=view, settings=settings, version=version, now=now
    )
    return (strategy or CpuBurst(rng=random.Random(1))).plan(snapshot)


def writes(outcome: Outcome, resource: Resource) -> dict[str, int]:
    found: dict[str, int] = {}
    for w in outcome.writes:
        if w.resource is resource:
            assert isinstance(w.value, int)
            found[w.cgroup] = w.value
    return found


def position(outcome: Outcome, cgroup: str, resource: Resource) -> int:
    matches = [
        i for i, w in enumerate(outcome.writes) if (w.cgroup, w.resource) == (cgroup, resource)
    ]
    assert len(matches) == 1, outcome.writes
    return matches[0]


# --- kernel burst -----------------------------------------------------------------------------


def kernel_burst(limit_milli: int, percent: int) -> int:
    """limitCores x cpuBurstPercent/100 x period."""
    return int(limit_milli / 1000 * percent / 100 * PERIOD)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("cpuBurstOnly", kernel_burst(LIMIT, 1000), id="cpuBurstOnly"),
        pytest.param("auto", kernel_burst(LIMIT, 1000), id="auto"),
        pytest.param("none", 0, id="none-resets-to-zero"),
        pytest.param("cfsQuotaBurstOnly", 0, id="quota-only-no-kernel-burst"),
    ],
)
def test_kernel_burst_by_policy(policy: BurstPolicy, expected: int) -> None:
    outcome = run(policy=policy)
    assert writes(outcome, BURST) == {WEB_C: expected, WEB.cgroup: expected}
    assert position(outcome, WEB_C, BURST) < position(outcome, WEB.cgroup, BURST)


def test_pod_burst_is_the_sum_of_its_containers() -> None:
    pod = web(containers=2)
    outcome = run(pod, policy="cpuBurstOnly")
    per_container = kernel_burst(LIMIT, 1000)
    assert writes(outcome, BURST) == {
        **dict.fromkeys(container_dirs(pod), per_container),
        pod.cgroup: 2 * per_container,
    }


def test_burst_percent_from_node_config() -> None:
    outcome = run(policy="cpuBurstOnly", burst_percent=350)
    assert writes(outcome, BURST)[WEB_C] == kernel_burst(LIMIT, 350)


def test_pod_annotation_overrides_the_node() -> None:
    pod = web(
        annotations={k.ANNOTATION_CPU_BURST: {"policy": "cpuBurstOnly", "cpuBurstPercent": 200}}
    )
    outcome = run(pod, policy="none")
    assert writes(outcome, BURST)[container_dirs(pod)[0]] == kernel_burst(LIMIT, 200)


def test_invalid_pod_annotation_falls_back_to_the_node(caplog: pytest.LogCaptureFixture) -> None:
    pod = web(annotations={k.ANNOTATION_CPU_BURST: {"cpuBurstPercent": 0}})
    strategy = CpuBurst(rng=random.Random(1))
    outcome = run(pod, policy="cpuBurstOnly", strategy=strategy)
    assert writes(outcome, BURST)[container_dirs(pod)[0]] == kernel_burst(LIMIT, 1000)
    assert "cpuBurstPercent" in caplog.text
    caplog.clear()
    run(pod, policy="cpuBurstOnly", strategy=strategy)
    assert "cpuBurstPercent" not in caplog.text  # said once


@pytest.mark.parametrize("policy", ["none", "cpuBurstOnly"])
def test_a_quota_moved_behind_our_back_is_reset_on_the_next_pass(policy: BurstPolicy) -> None:
    # The same pod state pass after pass: the plan still follows the quotas the cgroups hold.
    strategy = CpuBurst(rng=random.Random(1))
    view = FakeView()
    for directory in container_dirs(WEB):
        view.set(directory, QUOTA, BASE)
    view.set(WEB.cgroup, QUOTA, BASE * len(container_dirs(WEB)))
    settings = make_settings(burst=BurstSettings(policy=policy))
    snapshot = make_snapshot(pods=(WEB,), current=view, settings=settings)
    first = strategy.plan(snapshot)
    assert writes(first, QUOTA) == {}
    assert strategy.plan(snapshot) == first

    view.set(WEB_C, QUOTA, 3 * BASE)
    assert writes(strategy.plan(snapshot), QUOTA)[WEB_C] == BASE
    view.set(WEB_C, QUOTA, BASE)
    assert strategy.plan(snapshot) == first


def test_override_reader_is_injectable() -> None:
    from apis.slo import CPUBurstStrategy

    strategy = CpuBurst(override=lambda pod: CPUBurstStrategy(policy="cpuBurstOnly"))
    outcome = run(policy="none", strategy=strategy)
    assert writes(outcome, BURST)[WEB_C] == kernel_burst(LIMIT, 1000)


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod("lsr", qos="LSR", cpu_limit=LIMIT), id="LSR"),
        pytest.param(make_pod("lse", qos="LSE", cpu_limit=LIMIT), id="LSE"),
        pytest.param(make_pod("be", qos="BE", cpu_limit=LIMIT), id="BE"),
        pytest.param(
            make_pod("lsr-guaranteed", qos="LSR", kube=KubeQoS.GUARANTEED, cpu_limit=LIMIT),
            id="guaranteed-labelled-LSR",
        ),
        pytest.param(web(phase="Succeeded"), id="succeeded"),
        pytest.param(make_pod("nolimit", qos="LS", cpu_request=1000), id="no-cpu-limit"),
    ],
)
def test_ineligible_pods_are_left_alone(pod: PodState) -> None:
    assert run(pod, policy="auto", throttled=0.5).writes == ()


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(web(phase="Pending"), id="pending-LS"),
        pytest.param(make_pod("sys", qos="SYSTEM", cpu_limit=LIMIT), id="SYSTEM"),
        pytest.param(
            make_pod("plain", cpu_limit=LIMIT, cpu_request=1000), id="unlabelled-burstable"
        ),
        pytest.param(make_pod("guaranteed", cpu_limit=LIMIT), id="unlabelled-guaranteed"),
        pytest.param(make_pod("unknown", qos="gold", cpu_limit=LIMIT), id="unknown-label"),
    ],
)
def test_eligible_pods(pod: PodState) -> None:
    assert writes(run(pod, policy="cpuBurstOnly"), BURST)[pod.cgroup] == kernel_burst(LIMIT, 1000)


@pytest.mark.parametrize(
    ("pod", "qos"),
    [
        pytest.param(make_pod("g", cpu_limit=LIMIT), QoSClass.LS, id="guaranteed"),
        pytest.param(make_pod("b", cpu_request=500), QoSClass.LS, id="burstable"),
        pytest.param(make_pod("e"), QoSClass.BE, id="besteffort"),
        pytest.param(make_pod("r", qos="LSR", cpu_limit=LIMIT), QoSClass.LSR, id="label-LSR"),
        pytest.param(make_pod("s", qos="SYSTEM"), QoSClass.SYSTEM, id="label-SYSTEM"),
    ],
)
def test_burst_qos_is_the_label_else_ls_unless_besteffort(pod: PodState, qos: QoSClass) -> None:
    assert burst_qos(pod) is qos


def test_v1_burst_is_not_capped() -> None:
    assert writes(run(policy="cpuBurstOnly"), BURST)[WEB_C] == kernel_burst(LIMIT, 1000) > BASE


def test_v2_burst_is_capped_at_the_quota() -> None:
    # upstream #2326: 1000 % of the limit is refused by cpu.max.burst; capped at the quota
    outcome = run(policy="cpuBurstOnly", version=2)
    assert writes(outcome, BURST) == {WEB_C: BASE, WEB.cgroup: BASE}


def test_v2_scale_down_lowers_the_burst_first() -> None:
    """Upstream #2778/#2801: a scale-down wrote a cpu.max below the current cpu.max.burst
    and the kernel refused it. The burst (capped at the new quota) goes first."""
    current = 300_000
    target = current * 8 // 10  # overload: x0.8
    outcome = run(policy="auto", quota=current, burst=current, node=OVERLOAD, version=2)
    assert writes(outcome, QUOTA) == {WEB_C: target, WEB.cgroup: target}
    assert writes(outcome, BURST) == {WEB_C: target, WEB.cgroup: target}
    assert position(outcome, WEB_C, BURST) < position(outcome, WEB_C, QUOTA)
    assert position(outcome, WEB.cgroup, BURST) < position(outcome, WEB.cgroup, QUOTA)
    # shrinking: container before pod
    assert position(outcome, WEB_C, QUOTA) < position(outcome, WEB.cgroup, QUOTA)


def test_v2_scale_up_raises_the_quota_before_the_burst() -> None:
    target = BASE * 12 // 10
    outcome = run(policy="auto", burst=BASE, throttled=0.3, version=2)
    assert writes(outcome, BURST) == {WEB_C: target, WEB.cgroup: target}
    assert position(outcome, WEB.cgroup, QUOTA) < position(outcome, WEB_C, QUOTA)
    assert position(outcome, WEB_C, QUOTA) < position(outcome, WEB_C, BURST)


def test_burst_gauge() -> None:
    outcome = run(policy="cpuBurstOnly")
    gauges = {g.name: g for g in outcome.gauges}
    gauge = gauges["container_scaled_cfs_burst_us"]
    assert gauge.value == kernel_burst(LIMIT, 1000)
    assert gauge.labels["container_name"] == WEB.containers[0].name


# --- share pool -------------------------------------------------------------------------------

LSR = make_pod("lsr", qos="LSR", cpu_limit=4000)
BE = make_pod("be", qos="BE")


@pytest.mark.parametrize(
    ("node_used", "expected"),
    [
        # pool = 16 CPUs - 4 requested by LSR = 12000m; use = node - LSR 2000 - BE 1000
        pytest.param(3000 + 0.5 * 12000, PoolState.OVERLOAD, id="at-threshold-overload"),
        pytest.param(3000 + 0.45 * 12000, PoolState.COOLING, id="90-percent-of-threshold-cooling"),
        pytest.param(3000 + 0.44 * 12000, PoolState.IDLE, id="below-idle"),
        pytest.param(None, PoolState.UNKNOWN, id="no-data-unknown"),
    ],
)
def test_share_pool_state(node_used: float | None, expected: PoolState) -> None:
    usage = FakeUsage(node=node_used, pods={"uid-lsr": 2000, "uid-be": 1000, "uid-web": 5000})
    snapshot = make_snapshot(pods=(WEB, LSR, BE), usage=usage)
    assert share_pool_state(snapshot, THRESHOLD) is expected


@pytest.mark.parametrize(("interval", "window"), [(1.0, 5.0), (3.0, 10.0)])
def test_share_pool_window(interval: float, window: float) -> None:
    usage = FakeUsage(node=0, interval=interval)
    share_pool_state(make_snapshot(usage=usage), THRESHOLD)
    assert usage.node_windows == [min(5 * interval, 10.0)]


def test_no_share_pool_left_is_overload() -> None:
    big = make_pod("big", qos="LSR", cpu_limit=CPUS * 1000)
    snapshot = make_snapshot(pods=(big,), usage=FakeUsage(node=0))
    assert share_pool_state(snapshot, THRESHOLD) is PoolState.OVERLOAD


# --- quota burst ------------------------------------------------------------------------------

CEILING = BASE * 300 // 100


@dataclass
class QuotaCase:
    id: str
    current: int
    expected: int
    throttled: float | None = None
    node: float | None = IDLE
    policy: BurstPolicy = "cfsQuotaBurstOnly"


QUOTA_CASES = [
    QuotaCase("throttled-idle-scales-up", BASE, BASE * 12 // 10, throttled=0.2),
    QuotaCase("throttled-cooling-remains", BASE, BASE, throttled=0.2, node=COOLING),
    QuotaCase("throttled-unknown-remains", BASE, BASE, throttled=0.2, node=None),
    QuotaCase("not-throttled-remains", 300_000, 300_000, throttled=0.0),
    QuotaCase("no-throttle-data-remains", 300_000, 300_000),
    QuotaCase("overload-scales-down", 300_000, 300_000 * 8 // 10, node=OVERLOAD),
    QuotaCase(
        "overload-beats-throttling", 300_000, 300_000 * 8 // 10, throttled=0.5, node=OVERLOAD
    ),
    QuotaCase("up-clamped-at-ceiling", 550_000, CEILING, throttled=0.2),
    QuotaCase("down-clamped-at-base", 220_000, BASE, node=OVERLOAD),
    QuotaCase("auto-scales-too", BASE, BASE * 12 // 10, throttled=0.2, policy="auto"),
    QuotaCase("other-policy-resets-to-base", 300_000, BASE, throttled=0.2, policy="cpuBurstOnly"),
    QuotaCase("none-resets-to-base", 300_000, BASE, policy="none"),
]


@pytest.mark.parametrize("case", QUOTA_CASES, ids=[c.id for c in QUOTA_CASES])
def test_quota_scaling(case: QuotaCase) -> None:
    outcome = run(quota=case.current, throttled=case.throttled, node=case.node, policy=case.policy)
    if case.expected == case.current:
        assert writes(outcome, QUOTA) == {}
    else:
        delta = case.expected - case.current
        assert writes(outcome, QUOTA) == {WEB_C: case.expected, WEB.cgroup: case.current + delta}
    gauge = next(g for g in outcome.gauges if g.name == "container_scaled_cfs_quota_us")
    assert gauge.value == case.expected


def test_growing_writes_pod_first_shrinking_container_first() -> None:
    up = run(throttled=0.2)
    assert position(up, WEB.cgroup, QUOTA) < position(up, WEB_C, QUOTA)
    down = run(quota=300_000, node=OVERLOAD)
    assert position(down, WEB_C, QUOTA) < position(down, WEB.cgroup, QUOTA)


def test_unlimited_pod_quota_is_not_touched() -> None:
    outcome = run(throttled=0.2, pod_quota=-1)
    assert writes(outcome, QUOTA) == {WEB_C: BASE * 12 // 10}


def test_pod_quota_moves_by_the_sum_of_its_containers() -> None:
    pod = web(containers=2)
    outcome = run(pod, throttled=0.2)
    step = BASE * 12 // 10 - BASE
    assert writes(outcome, QUOTA) == {
        **dict.fromkeys(container_dirs(pod), BASE + step),
        pod.cgroup: 2 * BASE + 2 * step,
    }


def test_containers_not_running_keep_their_quota() -> None:
    assert writes(run(web(running=False), throttled=0.2), QUOTA) == {}


# --- the limiter ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "now", "percent", "expected"),
    [
        # 3 whole seconds at 150 % take 50 per second
        pytest.param(500.0, 3.5, 150.0, 500 - 50 * 3, id="above-limit-spends"),
        # 2 seconds at 30 % give 70 per second
        pytest.param(500.0, 2.0, 30.0, 500 + 70 * 2, id="idle-earns"),
        pytest.param(500.0, 5.0, 80.0, 500, id="between-60-and-100-unchanged"),
        pytest.param(1900.0, 5.0, 10.0, 2000, id="clamped-at-capacity"),
        pytest.param(-1900.0, 5.0, 300.0, -2000, id="clamped-at-minus-capacity"),
        pytest.param(500.0, 0.9, 300.0, 500, id="under-a-second-nothing"),
        pytest.param(500.0, 4.0, None, 500, id="no-usage-nothing"),
    ],
)
def test_token_bucket(tokens: float, now: float, percent: float | None, expected: float) -> None:
    bucket = TokenBucket(capacity=2000, tokens=tokens, updated=0.0, used=0.0, period=10)
    assert bucket.allow(now, percent) is (expected > 0)
    assert bucket.tokens == expected


def test_token_bucket_keeps_fractions_of_seconds() -> None:
    bucket = TokenBucket(capacity=2000, tokens=500, updated=0.0, used=0.0, period=10)
    bucket.allow(1.5, 200.0)  # 1 whole second: -100
    bucket.allow(2.0, 200.0)  # 0.5 s left over + 0.5 s: another whole second
    assert bucket.tokens == 500 - 100 - 100


def test_zero_tokens_deny() -> None:
    assert TokenBucket(capacity=10, tokens=0, updated=0, used=0, period=1).allow(0, None) is False


PERIOD_S = 10
PERCENT = 300


def test_initial_tokens_come_from_the_injected_random() -> None:
    strategy = CpuBurst(rng=random.Random(42))
    run(
        strategy=strategy,
        throttled=0.2,
        period_s=PERIOD_S,
        quota_burst_percent=PERCENT,
    )
    capacity = PERIOD_S * (PERCENT - 100)
    bucket = strategy.buckets[WEB.containers[0].container_id]
    assert bucket.capacity == capacity
    assert bucket.tokens == random.Random(42).random() * capacity / 2


@pytest.mark.parametrize(
    ("used", "pod_used"),
    [
        pytest.param(3 * LIMIT, None, id="container-usage"),
        pytest.param(None, 3 * LIMIT, id="one-container-pod-usage"),
    ],
)
def test_limiter_out_of_tokens_scales_down(used: float | None, pod_used: float | None) -> None:
    strategy = CpuBurst(rng=random.Random(3))
    # t=0: tokens in [0, 100) and throttled -> up
    first = run(strategy=strategy, throttled=0.2, period_s=1, quota_burst_percent=PERCENT)
    assert random.Random(3).random() * 1 * (PERCENT - 100) / 2 > 0
    assert writes(first, QUOTA)[WEB_C] == BASE * 12 // 10
    # t=1: a second at 300 % of the limit costs 200 tokens: denied -> down despite throttling
    current = BASE * 12 // 10
    second = run(
        strategy=strategy,
        quota=current,
        throttled=0.2,
        used=used,
        pod_used=pod_used,
        now=1.0,
        period_s=1,
        quota_burst_percent=PERCENT,
    )
    assert writes(second, QUOTA)[WEB_C] == max(current * 8 // 10, BASE)
    assert strategy.buckets[WEB.containers[0].container_id].tokens < 0


def test_limiter_rebuilt_when_its_capacity_changes() -> None:
    strategy = CpuBurst(rng=random.Random(5))
    run(strategy=strategy, period_s=1, quota_burst_percent=200)
    key = WEB.containers[0].container_id
    assert strategy.buckets[key].capacity == 1 * (200 - 100)
    run(strategy=strategy, now=1.0, period_s=2, quota_burst_percent=200)
    assert strategy.buckets[key].capacity == 2 * (200 - 100)


def test_limiter_dropped_after_two_periods_unused() -> None:
    strategy = CpuBurst(rng=random.Random(5))
    run(strategy=strategy, period_s=5, quota_burst_percent=200)
    key = WEB.containers[0].container_id
    other = make_pod("other", qos="LSR", cpu_limit=LIMIT)  # the web pod is gone
    run(other, strategy=strategy, now=2 * 5.0, period_s=5, quota_burst_percent=200)
    assert key in strategy.buckets
    run(other, strategy=strategy, now=2 * 5.0 + 1, period_s=5, quota_burst_percent=200)
    assert key not in strategy.buckets


def test_no_limiter_when_period_is_unlimited() -> None:
    strategy = CpuBurst(rng=random.Random(5))
    run(strategy=strategy, throttled=0.2)
    assert strategy.buckets == {}


def test_gate_off() -> None:
    strategy = CpuBurst()
    usage = FakeUsage(node=IDLE, throttled={WEB_C: 0.5})
    settings = make_settings(burst=BurstSettings(policy="auto"), gates={"CPUBurst": False})
    assert strategy.plan(make_snapshot(pods=(WEB,), usage=usage, settings=settings)) == Outcome()


def test_name() -> None:
    assert CpuBurst().name == "cpu_burst"


def test_writes_name_the_strategy() -> None:
    outcome = run(policy="auto", throttled=0.2)
    assert outcome.writes
    assert {w.strategy for w in outcome.writes} == {"cpu_burst"}
