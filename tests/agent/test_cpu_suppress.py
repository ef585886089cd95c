"""BE CPU suppress: the budget formula, both policies, step limits, recovery."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource
from agent.qos.cpu_suppress import CpuSuppress, pick_cpus
from agent.qos.framework import CgroupWrite, Outcome, PodState, Value
from agent.qos.settings import QoSSettings, SuppressSettings
from apis import constants as k
from apis.core import Node
from apis.qos import KubeQoS
from apis.slo import CgroupPath, HostApplicationSpec
from tests.agent.qos_builders import (
    BE_DIR,
    FakeUsage,
    FakeView,
    container_dirs,
    core_cpus,
    make_cpus,
    make_node,
    make_pod,
    make_settings,
    make_snapshot,
)

CAP_CORES = 16
CAP = CAP_CORES * 1000
QUOTA = Resource.CPU_QUOTA
CPUSET = Resource.CPUSET_CPUS
ALL_CPUS = CpuSet(range(CAP_CORES))

LS = make_pod("ls", qos="LS", cpu_request=2000, cpu_limit=4000)
BE = make_pod("be", qos="BE")


def quota_settings(threshold: int = 65, minimum: int | None = None, **gates: bool) -> QoSSettings:
    return make_settings(
        suppress=SuppressSettings(
            enable=True, threshold_percent=threshold, min_percent=minimum, policy="cfsQuota"
        ),
        gates=gates,
    )


def cpuset_settings(threshold: int = 65, **gates: bool) -> QoSSettings:
    return make_settings(
        suppress=SuppressSettings(enable=True, threshold_percent=threshold, policy="cpuset"),
        gates=gates,
    )


def only(outcome: Outcome, cgroup: str, resource: Resource) -> list[CgroupWrite]:
    return [w for w in outcome.writes if w.cgroup == cgroup and w.resource is resource]


def value_of(outcome: Outcome, cgroup: str, resource: Resource) -> Value:
    found = only(outcome, cgroup, resource)
    assert len(found) == 1, found
    return found[0].value


def cpuset_of(outcome: Outcome, cgroup: str) -> CpuSet:
    value = value_of(outcome, cgroup, CPUSET)
    assert isinstance(value, CpuSet)
    return value


def gauge(outcome: Outcome, name: str, **labels: str) -> float:
    values = [g.value for g in outcome.gauges if g.name == name and dict(g.labels) == labels]
    assert len(values) == 1, outcome.gauges
    return values[0]


# --- the budget -------------------------------------------------------------------------------


@dataclass
class BudgetCase:
    id: str
    node_used: float
    expected_budget: int
    pods: dict[str, float] = field(default_factory=dict)
    allocatable: float = CAP_CORES
    threshold: int = 65
    minimum: int | None = None
    annotations: dict[str, object] = field(default_factory=dict)
    host_apps: dict[str, float] = field(default_factory=dict)
    kubepods_used: float | None = None


LS_HOST = HostApplicationSpec(name="nginx", qos="LS", cgroup_path=CgroupPath(base="CgroupRoot"))
BE_HOST = HostApplicationSpec(
    name="spark", qos="BE", cgroup_path=CgroupPath(base="KubepodsBesteffort", relative_path="x")
)
# A BestEffort pod labelled LS still counts as BE (both classes must be non-BE).
BESTEFFORT_LS = make_pod("be-labelled-ls", qos="LS", kube=KubeQoS.BEST_EFFORT)
PODS = (LS, BE, BESTEFFORT_LS)

BUDGETS = [
    # cap 16 cores, threshold 65 % -> 10400m; non-BE 3000m; system max(5200-4000=1200,
    # reserved 16-14=2000) -> budget 10400-3000-2000 = 5400m
    BudgetCase(
        "system-floored-at-kubelet-reserved",
        node_used=5200,
        pods={"ls": 3000, "be": 1000},
        allocatable=14,
        expected_budget=10400 - 3000 - max(5200 - 4000, 2000),
    ),
    # no reservation: system = 5200-4000 = 1200 -> 10400-3000-1200 = 6200m
    BudgetCase(
        "system-measured",
        node_used=5200,
        pods={"ls": 3000, "be": 1000},
        expected_budget=10400 - 3000 - 1200,
    ),
    # the BestEffort pod labelled LS is BE: non-BE 3000m only
    BudgetCase(
        "besteffort-tier-is-be",
        node_used=6000,
        pods={"ls": 3000, "be": 1000, "be-labelled-ls": 2000},
        expected_budget=10400 - 3000 - (6000 - 6000),
    ),
    # reservation annotation with reservedCPUs 0-2 -> 3000m reserved beats kubelet's 1000m
    BudgetCase(
        "annotation-reserved-cpus",
        node_used=5200,
        pods={"ls": 3000, "be": 1000},
        allocatable=15,
        annotations={k.ANNOTATION_NODE_RESERVATION: {"reservedCPUs": "0-2"}},
        expected_budget=10400 - 3000 - max(1200, 3000),
    ),
    # host apps: LS nginx 500m is non-BE, BE spark in the BE tier 300m is not;
    # system = 6000-4000-800 = 1200 -> 10400-3000-500-1200 = 5700m
    BudgetCase(
        "host-applications",
        node_used=6000,
        pods={"ls": 3000, "be": 1000},
        host_apps={"nginx": 500, "spark": 300},
        expected_budget=10400 - 3000 - 500 - (6000 - 4000 - 800),
    ),
    # kubepods used 5000m, listed pods 4000m, spark (in kubepods) 300m -> 700m from pods
    # missing from the list count as non-BE: non-BE 3700m; system 6000-4700-300 = 1000
    BudgetCase(
        "pods-missing-from-the-list",
        node_used=6000,
        pods={"ls": 3000, "be": 1000},
        host_apps={"spark": 300},
        kubepods_used=5000,
        expected_budget=10400 - (3000 + 700) - (6000 - 4700 - 300),
    ),
    # 90 % busy LS: 10400-14000-1000 < 0 -> minimum 10 % of 16000 = 1600m
    BudgetCase(
        "minimum-percent",
        node_used=16000,
        pods={"ls": 14000, "be": 1000},
        minimum=10,
        expected_budget=max(10400 - 14000 - 1000, CAP * 10 // 100),
    ),
    # threshold 80 % -> 12800-3000-1200 = 8600m
    BudgetCase(
        "threshold-80",
        node_used=5200,
        pods={"ls": 3000, "be": 1000},
        threshold=80,
        expected_budget=CAP * 80 // 100 - 3000 - 1200,
    ),
]


@pytest.mark.parametrize("case", BUDGETS, ids=[c.id for c in BUDGETS])
def test_budget_becomes_the_be_quota(case: BudgetCase) -> None:
    usage = FakeUsage(
        node=case.node_used,
        pods={f"uid-{name}": used for name, used in case.pods.items()},
        host_apps=case.host_apps,
        cgroups={} if case.kubepods_used is None else {"kubepods": case.kubepods_used},
    )
    snapshot = make_snapshot(
        pods=PODS,
        node=make_node(CAP_CORES, allocatable_cores=case.allocatable, annotations=case.annotations),
        usage=usage,
        settings=make_settings(
            suppress=SuppressSettings(
                enable=True,
                threshold_percent=case.threshold,
                min_percent=case.minimum,
                policy="cfsQuota",
            ),
            host_applications=(LS_HOST, BE_HOST),
        ),
    )
    outcome = CpuSuppress().plan(snapshot)
    # from unlimited the first write is the target itself: budget x 100000 / 1000
    assert value_of(outcome, BE_DIR, QUOTA) == case.expected_budget * 100
    assert gauge(outcome, "be_suppress_cpu_cores", type="cfsQuota") == (
        case.expected_budget * 100 / 100_000
    )
    assert usage.node_windows == [2 * usage.interval]


def test_ls_used_gauge_is_the_non_be_pod_usage() -> None:
    usage = FakeUsage(node=5200, pods={"uid-ls": 3000, "uid-be": 1000})
    outcome = CpuSuppress().plan(
        make_snapshot(pods=(LS, BE), usage=usage, settings=quota_settings())
    )
    assert gauge(outcome, "be_suppress_ls_used_cpu_cores") == 3000 / 1000


def test_no_node_usage_no_writes() -> None:
    outcome = CpuSuppress().plan(
        make_snapshot(pods=(LS, BE), usage=FakeUsage(node=None), settings=quota_settings())
    )
    assert outcome.writes == ()


# --- cfsQuota ---------------------------------------------------------------------------------

# budget of the cases below: 10400 - 3000 - 1200 = 6200m -> target 620000


def base_usage() -> FakeUsage:
    """LS uses 3000m, the BE pods 1000m, the node 5200m (system 1200m)."""
    return FakeUsage(node=5200, pods={"uid-ls": 3000, "uid-be": 1000, "uid-batch": 1000})


TARGET = (10400 - 3000 - 1200) * 100
STEP = CAP_CORES * 100_000 // 10  # 10 % of the node per pass
BAND = CAP_CORES * 100_000 // 100  # 1 % of the node


def quota_pass(
    current: int | None,
    *,
    usage: FakeUsage | None = None,
    pods: tuple[PodState, ...] = (LS, BE),
    **gates: bool,
) -> Outcome:
    view = FakeView()
    if current is not None:
        view.set(BE_DIR, QUOTA, current)
    return CpuSuppress().plan(
        make_snapshot(
            pods=pods,
            usage=usage or base_usage(),
            current=view,
            settings=quota_settings(**gates),
        )
    )


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        pytest.param(-1, TARGET, id="from-unlimited-straight-to-target"),
        pytest.param(None, TARGET, id="unknown-current-like-unlimited"),
        pytest.param(200_000, 200_000 + STEP, id="step-up-limited-to-10-percent"),
        pytest.param(TARGET - STEP, TARGET, id="step-up-within-limit"),
        pytest.param(2_000_000, TARGET, id="decrease-applied-at-once"),
    ],
)
def test_quota_steps(current: int | None, expected: int) -> None:
    assert value_of(quota_pass(current), BE_DIR, QUOTA) == expected


def test_quota_within_one_percent_is_left_alone() -> None:
    outcome = quota_pass(TARGET - BAND + 1)
    assert only(outcome, BE_DIR, QUOTA) == []
    # the gauge reports the quota in force
    assert gauge(outcome, "be_suppress_cpu_cores", type="cfsQuota") == (TARGET - BAND + 1) / 1e5


def test_quota_just_outside_the_band_is_written() -> None:
    assert value_of(quota_pass(TARGET - BAND), BE_DIR, QUOTA) == TARGET


def test_quota_floor_is_written_even_inside_the_band() -> None:
    # LS uses everything: budget < 0 -> 2000 floor; current 2500 is within the band but the
    # floor is always written
    usage = FakeUsage(node=16000, pods={"uid-ls": 15000, "uid-be": 1000})
    outcome = quota_pass(2500, usage=usage)
    assert value_of(outcome, BE_DIR, QUOTA) == 2000


def test_small_target_from_unlimited_is_not_bypassed() -> None:
    # budget 10400 - 9000 - 1300 = 100m -> 10000 µs: |10000 - (-1)| < 1 % band, still written
    usage = FakeUsage(node=10300, pods={"uid-ls": 9000, "uid-be": 0})
    assert value_of(quota_pass(-1, usage=usage), BE_DIR, QUOTA) == (10400 - 9000 - 1300) * 100


BE_POD = make_pod("batch", qos="BE", containers=2)


def test_2723_unlimited_tier_with_limited_be_pods_jumps_to_target() -> None:
    """The tier is unlimited and a running BE pod holds a 600000 quota: upstream before v1.8
    wrote -1 + 10 % (159999), below the pod, and the kernel refused it. The BE pods are made
    unlimited first, then the tier goes straight to the target."""
    view = FakeView().set(BE_DIR, QUOTA, -1).set(BE_POD.cgroup, QUOTA, 600_000)
    for directory in container_dirs(BE_POD):
        view.set(directory, QUOTA, 300_000)
    outcome = CpuSuppress().plan(
        make_snapshot(
            pods=(LS, BE_POD),
            usage=FakeUsage(node=5200, pods={"uid-ls": 3000, "uid-batch": 1000}),
            current=view,
            settings=quota_settings(),
        )
    )
    quotas = [w for w in outcome.writes if w.resource is QUOTA]
    assert [(w.cgroup, w.value) for w in quotas] == [
        (BE_POD.cgroup, -1),
        *((d, -1) for d in container_dirs(BE_POD)),
        (BE_DIR, TARGET),
    ]
    assert TARGET != -1 + STEP


def test_tier_quota_never_below_what_be_pods_hold_without_batch_resource() -> None:
    # budget 10400 - 8000 - 1000 = 1400m -> 140000, but a BE pod holds 300000 and, without
    # the BatchResource gate, keeps it: the tier gets 300000
    view = FakeView().set(BE_DIR, QUOTA, -1).set(BE_POD.cgroup, QUOTA, 300_000)
    outcome = CpuSuppress().plan(
        make_snapshot(
            pods=(LS, BE_POD),
            usage=FakeUsage(node=9000, pods={"uid-ls": 8000, "uid-batch": 0}),
            current=view,
            settings=quota_settings(BatchResource=False),
        )
    )
    assert (10400 - 8000 - 1000) * 100 < 300_000
    assert [(w.cgroup, w.value) for w in outcome.writes if w.resource is QUOTA] == [
        (BE_DIR, 300_000)
    ]


def test_quota_policy_restores_the_be_cpuset_once() -> None:
    strategy = CpuSuppress()
    snapshot = make_snapshot(
        pods=(LS, BE_POD),
        usage=base_usage(),
        settings=quota_settings(),
    )
    first = strategy.plan(snapshot)
    cpusets = {w.cgroup: w.value for w in first.writes if w.resource is CPUSET}
    assert cpusets == dict.fromkeys([BE_DIR, BE_POD.cgroup, *container_dirs(BE_POD)], ALL_CPUS)
    second = strategy.plan(snapshot)
    assert [w for w in second.writes if w.resource is CPUSET] == []
    assert value_of(second, BE_DIR, QUOTA) == TARGET


# --- cpuset -----------------------------------------------------------------------------------

TOPOLOGY = make_cpus(sockets=2, cores_per_socket=4, threads=2)  # 16 CPUs, 8 cores


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        # buckets (node 0, socket 0) and (1, 1) have 8 CPUs each; socket 0 first (lowest cpu)
        pytest.param(2, core_cpus(TOPOLOGY, 0), id="one-pair"),
        pytest.param(4, core_cpus(TOPOLOGY, 0) | core_cpus(TOPOLOGY, 4), id="pair-per-socket"),
        # after the pairs one CPU is left to pick: the first free one of socket 0 (core 1)
        pytest.param(
            3, core_cpus(TOPOLOGY, 0) | CpuSet({min(core_cpus(TOPOLOGY, 1))}), id="odd-count"
        ),
        pytest.param(
            5,
            core_cpus(TOPOLOGY, 0, 4) | CpuSet({min(core_cpus(TOPOLOGY, 1))}),
            id="pairs-then-single",
        ),
        pytest.param(8, core_cpus(TOPOLOGY, 0, 1, 4, 5), id="round-robin-pairs"),
        pytest.param(17, CpuSet(), id="pool-too-small"),
        pytest.param(0, CpuSet(), id="nothing-wanted"),
    ],
)
def test_pick_cpus_on_two_socket_hyperthreaded_node(count: int, expected: CpuSet) -> None:
    assert pick_cpus(TOPOLOGY, count) == expected


def test_pick_without_hyperthreads_round_robins_single_cpus() -> None:
    flat = make_cpus(sockets=2, cores_per_socket=4, threads=1)
    # socket 0 has cores 0-3 (cpus 0-3), socket 1 cores 4-7: alternate between them
    assert pick_cpus(flat, 4) == CpuSet({0, 4, 1, 5})


def test_pick_prefers_the_larger_bucket() -> None:
    # socket 0 lost core 0: socket 1 (8 CPUs) comes before socket 0 (6 CPUs)
    pool = [c for c in TOPOLOGY if c.core != 0]
    assert pick_cpus(pool, 2) == core_cpus(TOPOLOGY, 4)


def test_pick_takes_a_pair_only_from_free_siblings() -> None:
    # core 0 has only one thread in the pool: the pair comes from core 1
    pool = [c for c in TOPOLOGY if c.cpu != 8 and c.socket == 0]
    assert pick_cpus(pool, 2) == core_cpus(TOPOLOGY, 1)


def cpuset_pass(
    strategy: CpuSuppress | None = None,
    *,
    current: CpuSet | None = None,
    pods: tuple[PodState, ...] = (LS, BE_POD),
    usage: FakeUsage | None = None,
    node: Node | None = None,
    **gates: bool,
) -> Outcome:
    view = FakeView()
    if current is not None:
        view.set(BE_DIR, CPUSET, current)
    return (strategy or CpuSuppress()).plan(
        make_snapshot(
            pods=pods,
            cpus=TOPOLOGY,
            node=node,
            usage=usage or base_usage(),
            current=view,
            settings=cpuset_settings(**gates),
        )
    )


# budget 6200m -> ceil(6.2) = 7 CPUs
WANT = math.ceil((10400 - 3000 - 1200) / 1000)
STEP_CPUS = math.ceil(len(TOPOLOGY) * 0.1)


def test_cpuset_goes_to_tier_pods_and_containers() -> None:
    outcome = cpuset_pass(current=ALL_CPUS)
    picked = cpuset_of(outcome, BE_DIR)
    assert picked == pick_cpus(TOPOLOGY, WANT)
    assert len(picked) == WANT
    order = [w.cgroup for w in outcome.writes if w.resource is CPUSET]
    assert order == [BE_DIR, BE_POD.cgroup, *container_dirs(BE_POD)]
    assert {w.value for w in outcome.writes if w.resource is CPUSET} == {picked}
    assert gauge(outcome, "be_suppress_cpu_cores", type="cpuset") == WANT


def test_cpuset_at_least_two_cpus() -> None:
    usage = FakeUsage(node=16000, pods={"uid-ls": 15000, "uid-batch": 0})
    assert len(cpuset_of(cpuset_pass(current=ALL_CPUS, usage=usage), BE_DIR)) == 2


def test_cpuset_step_up_is_limited() -> None:
    # from 2 CPUs at most ceil(16 x 10 %) = 2 more per pass
    outcome = cpuset_pass(current=CpuSet({0, 8}))
    assert len(cpuset_of(outcome, BE_DIR)) == 2 + STEP_CPUS < WANT


def test_lsr_and_ls_cpus_are_shared_in_proportion() -> None:
    lsr = make_pod("lsr", qos="LSR", cpu_limit=4000, cpuset=str(core_cpus(TOPOLOGY, 0, 1)))
    lse = make_pod("lse", qos="LSE", cpu_limit=2000, cpuset=str(core_cpus(TOPOLOGY, 2)))
    outcome = cpuset_pass(current=ALL_CPUS, pods=(LS, BE_POD, lsr, lse))
    picked = cpuset_of(outcome, BE_DIR)
    lsr_pool = core_cpus(TOPOLOGY, 0, 1)  # 4 CPUs
    ls_pool = ALL_CPUS - lsr_pool - core_cpus(TOPOLOGY, 2)  # 10 CPUs
    from_lsr = WANT * len(lsr_pool) // (len(lsr_pool) + len(ls_pool))  # floor(7 x 4/14) = 2
    assert len(picked & lsr_pool) == from_lsr
    assert len(picked & ls_pool) == WANT - from_lsr
    assert not picked & core_cpus(TOPOLOGY, 2)


def test_reserved_and_exclusive_system_cpus_are_never_picked() -> None:
    node = make_node(
        CAP_CORES,
        annotations={
            k.ANNOTATION_NODE_RESERVATION: {"reservedCPUs": "0,8"},
            k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: {"cpuset": "4,12"},
        },
    )
    usage = FakeUsage(node=5000, pods={"uid-ls": 5000, "uid-batch": 0})
    picked = cpuset_of(cpuset_pass(current=ALL_CPUS, node=node, usage=usage), BE_DIR)
    # system = max(0, 2 reserved CPUs) -> budget 10400 - 5000 - 2000 = 3400m -> 4 CPUs,
    # none of them reserved or SYSTEM
    assert len(picked) == math.ceil((10400 - 5000 - 2 * 1000) / 1000)
    assert not picked & CpuSet({0, 8, 4, 12})


def test_kubelet_static_policy_suppresses_containers_only() -> None:
    node = make_node(
        CAP_CORES, annotations={k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: {"policy": "static"}}
    )
    lse = make_pod("lse", qos="LSE", cpu_limit=2000, cpuset=str(core_cpus(TOPOLOGY, 7)))
    outcome = cpuset_pass(current=ALL_CPUS, node=node, pods=(LS, BE_POD, lse))
    full = ALL_CPUS - core_cpus(TOPOLOGY, 7)
    assert cpuset_of(outcome, BE_DIR) == full
    assert cpuset_of(outcome, BE_POD.cgroup) == full
    for directory in container_dirs(BE_POD):
        assert len(cpuset_of(outcome, directory)) == WANT


def test_cpuset_policy_recovers_the_quota_once() -> None:
    strategy = CpuSuppress()
    first = cpuset_pass(strategy, current=ALL_CPUS)
    assert value_of(first, BE_DIR, QUOTA) == -1
    assert only(cpuset_pass(strategy, current=ALL_CPUS), BE_DIR, QUOTA) == []
    # a pass under cfsQuota sets a quota; back on cpuset it is recovered again
    strategy.plan(
        make_snapshot(
            pods=(LS, BE_POD),
            usage=base_usage(),
            settings=quota_settings(),
        )
    )
    assert value_of(cpuset_pass(strategy, current=ALL_CPUS), BE_DIR, QUOTA) == -1


# --- disabled and gates -----------------------------------------------------------------------


def recover_pass(strategy: CpuSuppress, pods: tuple[PodState, ...], **gates: bool) -> Outcome:
    settings = make_settings(suppress=SuppressSettings(enable=False), gates=gates)
    return strategy.plan(
        make_snapshot(
            pods=pods,
            cpus=TOPOLOGY,
            usage=base_usage(),
            settings=settings,
        )
    )


def test_disabled_recovers_quota_and_full_cpuset_once() -> None:
    strategy = CpuSuppress()
    lse = make_pod("lse", qos="LSE", cpu_limit=2000, cpuset=str(core_cpus(TOPOLOGY, 3)))
    first = recover_pass(strategy, (LS, BE_POD, lse))
    full = ALL_CPUS - core_cpus(TOPOLOGY, 3)
    assert [(w.cgroup, w.resource, w.value) for w in first.writes] == [
        (BE_DIR, QUOTA, -1),
        (BE_DIR, CPUSET, full),
        (BE_POD.cgroup, CPUSET, full),
        *((d, CPUSET, full) for d in container_dirs(BE_POD)),
    ]
    assert recover_pass(strategy, (LS, BE_POD, lse)).writes == ()
    # the LSE pod leaves: BE may use its CPUs again
    third = recover_pass(strategy, (LS, BE_POD))
    assert cpuset_of(third, BE_DIR) == ALL_CPUS
    assert only(third, BE_DIR, QUOTA) == []


def test_gate_off_does_nothing() -> None:
    outcome = CpuSuppress().plan(
        make_snapshot(
            pods=(LS, BE_POD),
            usage=base_usage(),
            settings=quota_settings(BECPUSuppress=False),
        )
    )
    assert outcome == Outcome()


def test_be_cpu_manager_skips_suppress_and_keeps_allocated_containers() -> None:
    allocated = make_pod("numa-be", qos="BE", numa={0: {k.RESOURCE_BATCH_CPU: "2000"}})
    outcome = recover_pass(CpuSuppress(), (LS, BE_POD, allocated), BECPUManager=True)
    assert value_of(outcome, BE_DIR, QUOTA) == -1
    touched = {w.cgroup for w in outcome.writes if w.resource is CPUSET}
    assert touched == {BE_DIR, BE_POD.cgroup, allocated.cgroup, *container_dirs(BE_POD)}
    assert not touched & set(container_dirs(allocated))


def test_strategy_name() -> None:
    assert CpuSuppress().name == "cpu_suppress"
