"""CFS quota unbinding of cpuset-bound pods."""

from __future__ import annotations

import pytest

from agent.cgroups.resources import Resource
from agent.qos.cpu_unbind import CpuQuotaUnbind
from agent.qos.framework import Outcome, PodState
from tests.agent.qos_builders import container_dirs, make_pod, make_settings, make_snapshot

LSR = make_pod("lsr", qos="LSR", cpu_limit=4000, cpuset="2-3", containers=2)
LSE = make_pod("lse", qos="LSE", cpu_limit=2000, cpuset="4-5")
LS = make_pod("ls", qos="LS", cpu_request=1000, cpu_limit=2000)
UNBOUND_LSR = make_pod("lsr-unbound", qos="LSR", cpu_limit=2000)


def plan(*pods: PodState, disable: bool = False, **gates: bool) -> Outcome:
    settings = make_settings(gates=gates, disable_unset_cpu_quota=disable)
    return CpuQuotaUnbind().plan(make_snapshot(pods=pods, settings=settings))


def test_bound_pods_get_unlimited_quota_pod_first() -> None:
    outcome = plan(LSR, LSE, LS, UNBOUND_LSR)
    assert [(w.cgroup, w.resource, w.value) for w in outcome.writes] == [
        (LSR.cgroup, Resource.CPU_QUOTA, -1),
        *((d, Resource.CPU_QUOTA, -1) for d in container_dirs(LSR)),
        (LSE.cgroup, Resource.CPU_QUOTA, -1),
        *((d, Resource.CPU_QUOTA, -1) for d in container_dirs(LSE)),
    ]
    assert all(w.strategy == "cpu_unbind" for w in outcome.writes)


@pytest.mark.parametrize(
    ("disable", "gates"),
    [
        pytest.param(True, {}, id="disable-unset-cpu-quota"),
        pytest.param(False, {"CPUSetAllocator": False}, id="gate-off"),
    ],
)
def test_switched_off(disable: bool, gates: dict[str, bool]) -> None:
    assert plan(LSR, LSE, disable=disable, **gates) == Outcome()


def test_terminated_bound_pod_is_left() -> None:
    done = make_pod("done", qos="LSR", cpu_limit=2000, cpuset="6", phase="Failed")
    assert plan(done).writes == ()


def test_containers_without_cgroup_are_skipped() -> None:
    pod = make_pod("new", qos="LSE", cpu_limit=2000, cpuset="1", container_ids=False)
    assert [w.cgroup for w in plan(pod).writes] == [pod.cgroup]


def test_a_pod_bound_later_is_unbound_on_the_next_pass() -> None:
    strategy = CpuQuotaUnbind()
    settings = make_settings()
    assert strategy.plan(make_snapshot(pods=(UNBOUND_LSR, LS), settings=settings)).writes == ()
    bound = make_pod("lsr-unbound", qos="LSR", cpu_limit=2000, cpuset="6")
    outcome = strategy.plan(make_snapshot(pods=(bound, LS), settings=settings))
    assert [w.cgroup for w in outcome.writes] == [bound.cgroup, *container_dirs(bound)]
    assert strategy.plan(make_snapshot(pods=(bound, LS), settings=settings)) == outcome


def test_name() -> None:
    assert CpuQuotaUnbind().name == "cpu_unbind"
