"""The eviction strategy against the spec's formulas and orderings (agent-spec §6).

Each test states the node's numbers, the amount to release as the spec computes it, and the
victims in the order the spec sorts them. Units: cpu millicores, memory bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource
from agent.qos import evictions as ev
from agent.qos.evictions import Evictions
from agent.qos.framework import Outcome, Strategy
from agent.qos.settings import DEFAULT_GATES, EvictSettings, QoSSettings, SuppressSettings
from apis import constants as k
from apis.core import Pod
from tests.agent.qos_fixtures_evict import (
    GIB,
    FakeUsage,
    FakeView,
    make_node,
    make_pod,
    snapshot,
)

CPU, MEMORY = k.RESOURCE_CPU, k.RESOURCE_MEMORY
BATCH_CPU, BATCH_MEMORY = k.RESOURCE_BATCH_CPU, k.RESOURCE_BATCH_MEMORY
MID_CPU = k.RESOURCE_MID_CPU
BE_DIR = "kubepods/besteffort"  # cgroupfs driver, kubepods parent "kubepods"

MEM_CAP = 100 * GIB
CPU_CAP = 10_000


def settings(*gates: str, enable: bool = True, **evict: object) -> QoSSettings:
    return QoSSettings(
        suppress=SuppressSettings(enable=enable),
        evict=EvictSettings(**evict),  # type: ignore[arg-type]
        gates={**DEFAULT_GATES, **dict.fromkeys(gates, True)},
    )


def run(
    pods: Sequence[Pod],
    qos: QoSSettings,
    *,
    memory: dict[str, int] | None = None,
    cpu: dict[str, float] | None = None,
    node_memory: int | None = None,
    node_cpu: float | None = None,
    strategy: Evictions | None = None,
    now: float = 1000.0,
    allocatable: dict[str, int] | None = None,
    usage: FakeUsage | None = None,
    current: FakeView | None = None,
) -> Outcome:
    """One pass; ``memory``/``cpu`` map pod names to their usage."""
    by_name = {p.metadata.name: p.metadata.uid for p in pods}
    if usage is None:
        usage = FakeUsage(
            node_cpu_milli=node_cpu,
            node_memory_bytes=node_memory,
            pods_cpu={by_name[n]: v for n, v in (cpu or {}).items() if n in by_name},
            pods_memory={by_name[n]: v for n, v in (memory or {}).items() if n in by_name},
        )
    node = make_node(
        cpu=CPU_CAP,
        memory=MEM_CAP,
        allocatable={CPU: CPU_CAP, MEMORY: MEM_CAP, **(allocatable or {})},
    )
    return (strategy or Evictions()).plan(
        snapshot(node, list(pods), usage, qos, now=now, current=current, cpus=8)
    )


def victims(outcome: Outcome) -> list[str]:
    return [e.pod.metadata.name for e in outcome.evictions]


def gauge(outcome: Outcome, name: str, reason: str) -> float:
    return next(g.value for g in outcome.gauges if g.name == name and g.labels["reason"] == reason)


# --- memory usage -------------------------------------------------------------------------------

# Node memory used 85 GiB of 100: usage% = floor(85 * 100 / 100) = 85 >= threshold 70; the lower
# percent defaults to 70 - 2 = 68, so release = 100 GiB * (85 - 68) / 100 = 17 GiB.
USED_85 = 85 * GIB
NEED_17 = MEM_CAP * (85 - (70 - 2)) // 100


BE_MEMORY_CASES = [
    pytest.param(
        [
            make_pod("be-a", qos="BE"),
            make_pod("be-b", qos="BE"),
            make_pod("be-d", qos="BE"),
            make_pod("ls-x", qos="LS"),
        ],
        {"be-a": 10 * GIB, "be-b": 8 * GIB, "be-d": 12 * GIB, "ls-x": 30 * GIB},
        ["be-d", "be-a"],  # 12 + 10 = 22 GiB >= 17 GiB; the LS pod is never a BE victim
        id="most-memory-first-until-covered",
    ),
    pytest.param(
        [make_pod("be-high", qos="BE", priority=5900), make_pod("be-low", qos="BE", priority=5100)],
        {"be-high": 20 * GIB, "be-low": 1 * GIB},
        ["be-low", "be-high"],  # lower spec.priority first whatever it uses; 1 < 17, then 21
        id="spec-priority-first",
    ),
    pytest.param(
        [make_pod("be-zero", qos="BE"), make_pod("be-small", qos="BE")],
        {"be-small": 1 * GIB},
        ["be-small", "be-zero"],  # pods using nothing go last
        id="zero-usage-last",
    ),
    pytest.param(
        [make_pod("be-1", qos="BE"), make_pod("be-2", qos="BE")],
        {"be-1": 9 * GIB, "be-2": 9 * GIB},
        ["be-2", "be-1"],  # equal usage: name descending
        id="ties-by-name-descending",
    ),
]


@pytest.mark.parametrize(("pods", "memory", "expected"), BE_MEMORY_CASES)
def test_be_memory_evict(pods: list[Pod], memory: dict[str, int], expected: list[str]) -> None:
    outcome = run(pods, settings("BEMemoryEvict"), memory=memory, node_memory=USED_85)
    assert victims(outcome) == expected
    assert gauge(outcome, "evict_release_needed", "BEMemoryEvict") == NEED_17
    assert all(e.reason == "BEMemoryEvict" and e.strategy == "evictions" for e in outcome.evictions)


def test_be_memory_evict_below_threshold_does_nothing() -> None:
    pods = [make_pod("be-a", qos="BE")]
    # 69 GiB: usage% 69 < 70
    outcome = run(pods, settings("BEMemoryEvict"), memory={"be-a": 9 * GIB}, node_memory=69 * GIB)
    assert outcome.evictions == ()


def test_memory_lower_percent_sets_the_amount() -> None:
    pods = [make_pod(f"be-{i}", qos="BE") for i in range(4)]
    memory = {f"be-{i}": 10 * GIB for i in range(4)}
    # lower 50: release 100 GiB * (85 - 50) / 100 = 35 GiB -> four pods of 10 GiB (40 >= 35)
    outcome = run(
        pods, settings("BEMemoryEvict", memory_lower_percent=50), memory=memory, node_memory=USED_85
    )
    assert gauge(outcome, "evict_release_needed", "BEMemoryEvict") == MEM_CAP * (85 - 50) // 100
    assert len(outcome.evictions) == 4


def memory_evict_pods() -> list[Pod]:
    return [
        make_pod("batch-a", priority=5500, evictable=True),
        make_pod("batch-b", priority=5500, evictable=True),
        make_pod("mid-c", priority=7500, evictable=True),
        make_pod("prod-d", priority=9500, evictable=True),
        make_pod("batch-unlabelled", priority=5500),
        make_pod("batch-unmeasured", priority=5500, evictable=True),
        make_pod("batch-late", priority=5500, evictable=True, eviction_priority=10),
    ]


MEMORY_USED = {
    "batch-a": 6 * GIB,
    "batch-b": 10 * GIB,
    "mid-c": 20 * GIB,
    "prod-d": 30 * GIB,
    "batch-unlabelled": 40 * GIB,
    "batch-late": 50 * GIB,
}


def test_memory_evict_orders_by_eviction_priority_priority_then_usage() -> None:
    outcome = run(
        memory_evict_pods(),
        settings("MemoryEvict", evict_enabled_priority_threshold=7999),
        memory=MEMORY_USED,
        node_memory=USED_85,
    )
    # Candidates: priority value <= 7999, label eviction-enabled, a usage sample. Order:
    # eviction-priority 0 before 10, then priority 5500 before 7500, then usage descending.
    # Release 17 GiB: batch-b 10 -> 16 with batch-a 6 -> 36 with mid-c 20. Each pod's real
    # memory is credited (Koordinator's x1000 would have stopped after batch-b).
    assert victims(outcome) == ["batch-b", "batch-a", "mid-c"]


def test_memory_evict_needs_the_priority_threshold() -> None:
    outcome = run(
        memory_evict_pods(), settings("MemoryEvict"), memory=MEMORY_USED, node_memory=USED_85
    )
    assert outcome.evictions == ()


def test_sub_priority_label_orders_pods_of_equal_priority() -> None:
    pods = [
        make_pod("big", priority=5500, evictable=True, sub_priority=2),
        make_pod("small", priority=5500, evictable=True, sub_priority=1),
    ]
    outcome = run(
        pods,
        settings("MemoryEvict", evict_enabled_priority_threshold=7999),
        memory={"big": 20 * GIB, "small": 1 * GIB},
        node_memory=USED_85,
    )
    assert victims(outcome) == ["small", "big"]


def test_be_victims_are_credited_to_memory_evict() -> None:
    pods = [
        make_pod("be-a", qos="BE"),
        make_pod("batch-x", qos="LS", priority=5500, evictable=True),
    ]
    outcome = run(
        pods,
        settings("BEMemoryEvict", "MemoryEvict", evict_enabled_priority_threshold=7999),
        memory={"be-a": 18 * GIB, "batch-x": 20 * GIB},
        node_memory=USED_85,
    )
    # BEMemoryEvict runs first and releases 18 GiB >= 17: MemoryEvict has nothing left to do.
    assert victims(outcome) == ["be-a"]
    assert gauge(outcome, "evict_victims", "MemoryEvict") == 0


@pytest.mark.parametrize(
    ("policy", "evicted"),
    [
        pytest.param(None, True, id="absent-allows-every-feature"),
        pytest.param(["BEMemoryEvict"], True, id="listed"),
        pytest.param(["CPUEvict"], False, id="not-listed"),
        pytest.param("{not json", False, id="invalid-json-allows-none"),
        pytest.param('"BEMemoryEvict"', False, id="not-a-list"),
    ],
)
def test_eviction_policy_annotation(policy: list[str] | str | None, evicted: bool) -> None:
    pods = [make_pod("be-a", qos="BE", policy=policy)]
    outcome = run(pods, settings("BEMemoryEvict"), memory={"be-a": 20 * GIB}, node_memory=USED_85)
    assert victims(outcome) == (["be-a"] if evicted else [])


@pytest.mark.parametrize(
    ("qos", "why"),
    [
        pytest.param(settings(enable=False), "gate off", id="gate-off"),
        pytest.param(settings("BEMemoryEvict", enable=False), "threshold off", id="enable-false"),
    ],
)
def test_needs_the_gate_and_the_nodeslo_enable(qos: QoSSettings, why: str) -> None:
    pods = [make_pod("be-a", qos="BE")]
    outcome = run(pods, qos, memory={"be-a": 20 * GIB}, node_memory=USED_85)
    assert outcome.evictions == (), why


# --- rounds: cool-down, pending releases, terminating pods --------------------------------------


def test_memory_cool_down_is_four_seconds() -> None:
    strategy = Evictions()
    a, b = make_pod("be-a", qos="BE"), make_pod("be-b", qos="BE")
    qos = settings("BEMemoryEvict")
    memory = {"be-a": 20 * GIB, "be-b": 20 * GIB}
    first = run([a, b], qos, memory=memory, node_memory=USED_85, strategy=strategy, now=100.0)
    assert victims(first) == ["be-b"]  # 20 GiB covers 17; equal usage: name descending
    # be-b is gone but usage is still high: the memory features rest until 100 + 4.
    resting = run([a], qos, memory=memory, node_memory=USED_85, strategy=strategy, now=103.0)
    assert resting.evictions == ()
    again = run([a], qos, memory=memory, node_memory=USED_85, strategy=strategy, now=104.0)
    assert victims(again) == ["be-a"]


def test_cpu_cool_down_is_twenty_seconds() -> None:
    strategy = Evictions()
    qos = settings("CPUEvict", cpu_threshold_percent=80, evict_enabled_priority_threshold=7999)
    a = make_pod("a", priority=5500, evictable=True)
    b = make_pod("b", priority=5500, evictable=True)
    cpu = {"a": 2000.0, "b": 1500.0}
    first = run([a, b], qos, cpu=cpu, node_cpu=9_000, strategy=strategy, now=100.0)
    assert victims(first) == ["a"]
    assert run([b], qos, cpu=cpu, node_cpu=9_000, strategy=strategy, now=119.0).evictions == ()
    assert victims(run([b], qos, cpu=cpu, node_cpu=9_000, strategy=strategy, now=120.0)) == ["b"]


def test_evicted_pods_still_present_are_pending_releases() -> None:
    strategy = Evictions(pending_seconds=60)
    a, b = make_pod("be-a", qos="BE"), make_pod("be-b", qos="BE")
    qos = settings("BEMemoryEvict")
    memory = {"be-a": 20 * GIB, "be-b": 5 * GIB}
    assert victims(run([a, b], qos, memory=memory, node_memory=USED_85, strategy=strategy)) == [
        "be-a"
    ]
    # After the cool-down be-a is still terminating: its 20 GiB still count, nobody else goes.
    later = run([a, b], qos, memory=memory, node_memory=USED_85, strategy=strategy, now=1010.0)
    assert later.evictions == ()
    # Past the pending time it is asked for again (the first eviction may have been lost).
    retry = run([a, b], qos, memory=memory, node_memory=USED_85, strategy=strategy, now=1061.0)
    assert victims(retry) == ["be-a"]


def test_terminating_pods_count_as_pending() -> None:
    pods = [make_pod("be-going", qos="BE", deleting=True), make_pod("be-b", qos="BE")]
    outcome = run(
        pods,
        settings("BEMemoryEvict"),
        memory={"be-going": 18 * GIB, "be-b": 10 * GIB},
        node_memory=USED_85,
    )
    assert outcome.evictions == ()


# --- CPU usage ----------------------------------------------------------------------------------

# Node CPU 9000m of 10000m over the window: usage% 90 >= threshold 80; lower 80 - 2 = 78;
# release = 10000 * (90 - 78) / 100 = 1200m of pod usage.
CPU_NEED = CPU_CAP * (90 - (80 - 2)) // 100


def cpu_pods() -> list[Pod]:
    return [
        make_pod("batch-a", priority=5500, evictable=True),
        make_pod("batch-b", priority=5500, evictable=True),
        make_pod("mid-c", priority=7500, evictable=True),
        make_pod("prod-d", priority=9500, evictable=True),
        make_pod("batch-unmeasured", priority=5500, evictable=True),
    ]


CPU_USED = {"batch-a": 1000.0, "batch-b": 500.0, "mid-c": 2000.0, "prod-d": 3000.0}


def test_cpu_evict() -> None:
    outcome = run(
        cpu_pods(),
        settings("CPUEvict", cpu_threshold_percent=80, evict_enabled_priority_threshold=7999),
        cpu=CPU_USED,
        node_cpu=9_000,
    )
    assert gauge(outcome, "evict_release_needed", "CPUEvict") == CPU_NEED
    # priority 5500 first, usage descending: 1000 then 500 -> 1500 >= 1200
    assert victims(outcome) == ["batch-a", "batch-b"]


@pytest.mark.parametrize(
    ("node_cpu", "samples", "extra"),
    [
        pytest.param(7_900, None, {}, id="below-threshold"),
        pytest.param(9_000, 9, {"cpu_time_window_seconds": 30}, id="too-few-samples"),
    ],
)
def test_cpu_evict_does_nothing(
    node_cpu: float, samples: int | None, extra: dict[str, int]
) -> None:
    pods = cpu_pods()
    by_name = {p.metadata.name: p.metadata.uid for p in pods}
    usage = FakeUsage(
        node_cpu_milli=node_cpu,
        pods_cpu={by_name[n]: v for n, v in CPU_USED.items()},
        sample_count=samples,
    )
    # 30 s window needs samples * 1 s >= 30 / 3 = 10.
    qos = settings(
        "CPUEvict", cpu_threshold_percent=80, evict_enabled_priority_threshold=7999, **extra
    )
    assert run(pods, qos, usage=usage).evictions == ()


# --- BE CPU satisfaction ------------------------------------------------------------------------

# BE pods request 4000 + 2000 + 2000 = 8000 batch-cpu. The BE tier may use 2 CPUs (cpuset 0-1):
# limit 2000. It uses 1900 (95 % >= 90 %). Satisfaction 2000 / 8000 = 25 % <= lower 40 %, so
# release = 8000 * 80 / 100 - 2000 = 4400 of batch-cpu requests.
BE_REQUEST = 4000 + 2000 + 2000
BE_NEED = BE_REQUEST * 80 // 100 - 2000
BE_SETTINGS = {
    "cpu_be_satisfaction_lower_percent": 40,
    "cpu_be_satisfaction_upper_percent": 80,
    "cpu_time_window_seconds": 10,
}


def be_pods(**priorities: int) -> list[Pod]:
    return [
        make_pod(
            name,
            qos="BE",
            priority=priorities.get(name),
            requests={BATCH_CPU: request},
            container_id=f"{i:064x}",
        )
        for i, (name, request) in enumerate((("be-1", 4000), ("be-2", 2000), ("be-3", 2000)), 1)
    ]


BE_USED = {"be-1": 1000.0, "be-2": 800.0, "be-3": 100.0}


def be_run(
    pods: list[Pod],
    *,
    tier: float = 1900.0,
    latest: float | None = None,
    views: dict[tuple[str, Resource], object] | None = None,
    samples: int | None = None,
    strategy: Evictions | None = None,
    now: float = 1000.0,
    allocatable: dict[str, int] | None = None,
    **extra: object,
) -> Outcome:
    by_name = {p.metadata.name: p.metadata.uid for p in pods}
    usage = FakeUsage(
        pods_cpu={by_name[n]: v for n, v in BE_USED.items() if n in by_name},
        cgroups_cpu={BE_DIR: tier},
        cgroups_cpu_latest={BE_DIR: latest} if latest is not None else {},
        sample_count=samples,
    )
    table = {(BE_DIR, Resource.CPUSET_CPUS): CpuSet.parse("0-1")}
    table.update(views or {})  # type: ignore[arg-type]
    qos = settings("BECPUEvict", **{**BE_SETTINGS, **extra})
    return run(
        pods,
        qos,
        usage=usage,
        current=FakeView(dict(table)),
        strategy=strategy,
        now=now,
        allocatable=allocatable,
    )


def test_be_cpu_evict() -> None:
    outcome = be_run(be_pods())
    assert gauge(outcome, "evict_release_needed", "BECPUEvict") == BE_NEED
    # used / request: be-2 800/2000 = 0.4, be-1 1000/4000 = 0.25, be-3 100/2000 = 0.05;
    # releasing batch-cpu requests: be-2 2000 -> 6000 with be-1 >= 4400
    assert victims(outcome) == ["be-2", "be-1"]


def test_be_cpu_evict_spec_priority_comes_before_the_usage_ratio() -> None:
    outcome = be_run(be_pods(**{"be-1": 5100, "be-2": 5900, "be-3": 5000}))
    # be-3 (5000) 2000, then be-1 (5100) 4000 -> 6000 >= 4400
    assert victims(outcome) == ["be-3", "be-1"]


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        pytest.param({"tier": 1700.0}, "1700 / 2000 = 85 % < 90 %", id="usage-below-threshold"),
        pytest.param({"latest": 1500.0}, "latest 1500 / 2000 = 75 %", id="latest-usage-low"),
        pytest.param(
            {"views": {(BE_DIR, Resource.CPUSET_CPUS): CpuSet.parse("0-3")}, "tier": 3900.0},
            "4000 / 8000 = 50 % above lower 40 %",
            id="satisfied",
        ),
        pytest.param({"samples": 3}, "3 samples * 1 s < 10 s / 3", id="too-few-samples"),
        pytest.param(
            {"cpu_be_satisfaction_lower_percent": None, "cpu_be_satisfaction_upper_percent": None},
            "not configured",
            id="not-configured",
        ),
    ],
)
def test_be_cpu_evict_does_nothing(kwargs: dict[str, object], why: str) -> None:
    assert be_run(be_pods(), **kwargs).evictions == (), why  # type: ignore[arg-type]


def test_be_cpu_real_limit_takes_the_quota_and_the_smallest_container_cpuset() -> None:
    pods = be_pods()
    container = f"kubepods/besteffort/pod{pods[0].metadata.uid}/{1:064x}"
    views = {
        (BE_DIR, Resource.CPUSET_CPUS): CpuSet.parse("0-7"),
        (container, Resource.CPUSET_CPUS): CpuSet.parse("0-3"),  # smallest cpuset: 4 CPUs
        (BE_DIR, Resource.CPU_QUOTA): 200_000,  # 200000 * 1000 / 100000 = 2000 < 4000
        (BE_DIR, Resource.CPU_PERIOD): 100_000,
    }
    outcome = be_run(pods, views=views)
    assert gauge(outcome, "evict_release_needed", "BECPUEvict") == BE_NEED  # limit 2000 again


def test_be_cpu_evict_by_allocatable_uses_the_node_batch_cpu() -> None:
    # limit = allocatable batch-cpu 500 (< 1000: the usage check passes at any usage);
    # release = 8000 * 80 / 100 - 500 = 5900: be-2 2000 + be-1 4000 = 6000 >= 5900
    outcome = be_run(
        be_pods(), tier=0.0, cpu_policy="evictByAllocatable", allocatable={BATCH_CPU: 500}
    )
    assert gauge(outcome, "evict_release_needed", "BECPUEvict") == BE_REQUEST * 80 // 100 - 500
    assert victims(outcome) == ["be-2", "be-1"]


def test_be_cpu_takes_the_smaller_of_the_window_and_latest_releases() -> None:
    strategy = Evictions()
    pods = be_pods()
    one_cpu = {(BE_DIR, Resource.CPUSET_CPUS): CpuSet.parse("0")}
    # First pass: the tier usage is not known yet; the request 8000 and limit 1000 are recorded.
    first = be_run(pods, views=one_cpu, strategy=strategy, now=1000.0, tier=None)  # type: ignore[arg-type]
    assert first.evictions == ()
    second = be_run(pods, strategy=strategy, now=1001.0)
    # window averages: request 8000, limit (1000 + 2000) / 2 = 1500 -> 6400 - 1500 = 4900
    # latest values:   request 8000, limit 2000                    -> 6400 - 2000 = 4400
    assert gauge(second, "evict_release_needed", "BECPUEvict") == min(
        BE_REQUEST * 80 // 100 - 1500, BE_REQUEST * 80 // 100 - 2000
    )


# --- evict by allocatable -----------------------------------------------------------------------

# Node allocatable batch-cpu 4000; batch pods request 3000 + 2000 + 1000 = 6000;
# 6000 / 4000 = 150 % > threshold 110 %, release 6000 - 4000 * 100 / 100 = 2000.
ALLOC = {BATCH_CPU: 4000, MID_CPU: 2000, BATCH_MEMORY: 8 * GIB}
ALLOC_SETTINGS = {
    "cpu_allocatable_threshold_percent": 110,
    "cpu_allocatable_lower_percent": 100,
    "memory_allocatable_threshold_percent": 110,
    "memory_allocatable_lower_percent": 100,
    "allocatable_priority_threshold": 7999,
}


def alloc_pods(**overrides: dict[str, object]) -> list[Pod]:
    specs: dict[str, dict[str, object]] = {
        "batch-a": {"priority": 5500, "evictable": True, "requests": {BATCH_CPU: 3000}},
        "batch-b": {"priority": 5500, "evictable": True, "requests": {BATCH_CPU: 2000}},
        "batch-c": {"priority": 5500, "evictable": True, "requests": {BATCH_CPU: 1000}},
        "mid-m": {"priority": 7500, "evictable": True, "requests": {MID_CPU: 1000}},
        "prod-p": {"priority": 9500, "evictable": True, "requests": {CPU: 4000}},
    }
    for name, changes in overrides.items():
        specs[name] = {**specs[name], **changes}
    return [make_pod(name, **spec) for name, spec in specs.items()]  # type: ignore[arg-type]


ALL_MEASURED = dict.fromkeys(("batch-a", "batch-b", "batch-c", "mid-m", "prod-p"), 100.0)


@pytest.mark.parametrize(
    ("pods", "allocatable", "cpu", "need", "expected"),
    [
        pytest.param(alloc_pods(), ALLOC, ALL_MEASURED, 6000 - 4000, ["batch-a"], id="over"),
        pytest.param(
            alloc_pods(),
            {MID_CPU: 2000},
            ALL_MEASURED,
            6000,  # no batch-cpu allocatable at all: release every request
            ["batch-a", "batch-b", "batch-c"],
            id="no-allocatable",
        ),
        pytest.param(
            alloc_pods(**{"batch-a": {"evictable": False}}),
            ALLOC,
            ALL_MEASURED,
            2000,
            ["batch-b"],  # batch-a lacks the eviction-enabled label (it still counts as requested)
            id="label-required",
        ),
        pytest.param(
            alloc_pods(),
            ALLOC,
            {n: v for n, v in ALL_MEASURED.items() if n != "batch-a"},
            2000,
            ["batch-b"],  # batch-a has no usage sample: dropped
            id="no-metric-dropped",
        ),
        pytest.param(
            alloc_pods(**{"batch-c": {"sidecar_requests": {BATCH_CPU: 500}}}),
            ALLOC,
            ALL_MEASURED,
            6500 - 4000,  # the sidecar's 500 counts: batch-a 3000 + ... until 2500
            ["batch-a"],
            id="sidecars-count",
        ),
        pytest.param(
            alloc_pods(**{"batch-a": {"eviction_priority": 5}}),
            ALLOC,
            ALL_MEASURED,
            2000,
            ["batch-b"],  # eviction-priority 5 puts batch-a last; batch-b's 2000 covers
            id="eviction-priority-annotation",
        ),
    ],
)
def test_cpu_allocatable_evict(
    pods: list[Pod],
    allocatable: dict[str, int],
    cpu: dict[str, float],
    need: int,
    expected: list[str],
) -> None:
    outcome = run(
        pods,
        settings("CPUAllocatableEvict", **ALLOC_SETTINGS),
        cpu=cpu,
        node_cpu=1000,
        allocatable=allocatable,
    )
    assert gauge(outcome, "evict_release_needed", "CPUAllocatableEvict") == need
    assert victims(outcome) == expected
    assert "prod-p" not in victims(outcome)
    assert "mid-m" not in victims(outcome)


def test_allocatable_under_threshold_does_nothing() -> None:
    # 6000 * 100 = 600000 <= 4000 * 160 = 640000
    qos = settings(
        "CPUAllocatableEvict", **{**ALLOC_SETTINGS, "cpu_allocatable_threshold_percent": 160}
    )
    outcome = run(alloc_pods(), qos, cpu=ALL_MEASURED, node_cpu=1000, allocatable=ALLOC)
    assert outcome.evictions == ()


def test_memory_allocatable_evict() -> None:
    pods = [
        make_pod("batch-a", priority=5500, evictable=True, requests={BATCH_MEMORY: 6 * GIB}),
        make_pod("batch-b", priority=5500, evictable=True, requests={BATCH_MEMORY: 4 * GIB}),
        make_pod("batch-c", priority=5500, evictable=True, requests={BATCH_MEMORY: 2 * GIB}),
    ]
    outcome = run(
        pods,
        settings("MemoryAllocatableEvict", **ALLOC_SETTINGS),
        memory=dict.fromkeys(("batch-a", "batch-b", "batch-c"), GIB),
        node_memory=10 * GIB,
        allocatable=ALLOC,
    )
    # 12 GiB requested vs 8 GiB allocatable: 150 % > 110 %; release 12 - 8 = 4 GiB
    need = 12 * GIB - 8 * GIB * 100 // 100
    assert gauge(outcome, "evict_release_needed", "MemoryAllocatableEvict") == need
    assert victims(outcome) == ["batch-a"]


def test_tasks_run_be_first_and_victims_are_credited_across_features() -> None:
    pods = [
        # a BE pod (batch class by default) that also requests batch-cpu
        make_pod("be-big", qos="BE", evictable=True, requests={BATCH_CPU: 3000}),
        make_pod("batch-b", priority=5500, evictable=True, requests={BATCH_CPU: 3000}),
    ]
    outcome = run(
        pods,
        settings("BEMemoryEvict", "CPUAllocatableEvict", **ALLOC_SETTINGS),
        memory={"be-big": 18 * GIB, "batch-b": 1 * GIB},
        cpu={"be-big": 100.0, "batch-b": 100.0},
        node_memory=USED_85,
        node_cpu=1000,
        allocatable=ALLOC,
    )
    # BEMemoryEvict (first tier) takes be-big for its 18 GiB. CPUAllocatableEvict needs
    # 6000 - 4000 = 2000 of batch-cpu requests and be-big's 3000 already covers it.
    assert victims(outcome) == ["be-big"]
    assert [e.reason for e in outcome.evictions] == ["BEMemoryEvict"]
    assert gauge(outcome, "evict_release_needed", "CPUAllocatableEvict") == 2000


def test_a_pod_is_evicted_once_per_round() -> None:
    pod = make_pod("be-a", qos="BE", evictable=True, priority=5500)
    outcome = run(
        [pod],
        settings("BEMemoryEvict", "MemoryEvict", evict_enabled_priority_threshold=7999),
        memory={"be-a": 5 * GIB},  # not enough for either task: both want it
        node_memory=USED_85,
    )
    assert victims(outcome) == ["be-a"]


def test_the_eviction_names_the_pod_and_the_feature() -> None:
    pods = [make_pod("be-a", qos="BE", namespace="jobs")]
    outcome = run(pods, settings("BEMemoryEvict"), memory={"be-a": 20 * GIB}, node_memory=USED_85)
    (eviction,) = outcome.evictions
    assert eviction.pod is pods[0]
    assert eviction.reason == "BEMemoryEvict"
    assert "jobs/be-a" in eviction.message
    assert "BEMemoryEvict" in eviction.message


def test_is_a_strategy() -> None:
    strategy = Evictions()
    assert isinstance(strategy, Strategy)
    assert strategy.name == ev.NAME == "evictions"
