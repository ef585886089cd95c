"""CPU share pools and the cpuset of each pod and container."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource
from agent.qos.cpuset_pool import CpusetPool, be_full_cpuset, share_pools
from agent.qos.framework import NodeSnapshot, Outcome, PodState
from apis import constants as k
from apis.qos import KubeQoS
from apis.slo import CgroupPath, HostApplicationSpec
from tests.agent.qos_builders import (
    BE_DIR,
    container_dirs,
    core_cpus,
    make_cpus,
    make_node,
    make_pod,
    make_settings,
    make_snapshot,
    node_cpus,
)

CPUSET = Resource.CPUSET_CPUS
TOPOLOGY = make_cpus(sockets=2, cores_per_socket=4, threads=2)
ALL = CpuSet(c.cpu for c in TOPOLOGY)

LSE_CPUS = core_cpus(TOPOLOGY, 0)
LSR_CPUS = core_cpus(TOPOLOGY, 1)
LSE = make_pod("lse", qos="LSE", cpu_limit=2000, cpuset=str(LSE_CPUS))
LSR = make_pod("lsr", qos="LSR", cpu_limit=2000, cpuset=str(LSR_CPUS))
LS = make_pod("ls", qos="LS", cpu_request=1000, cpu_limit=2000)
BE = make_pod("be", qos="BE")
RESERVED = core_cpus(TOPOLOGY, 7)
SYSTEM = core_cpus(TOPOLOGY, 6)


def snapshot_with(
    *pods: PodState,
    annotations: Mapping[str, object] | None = None,
    gates: Mapping[str, bool] | None = None,
    host_apps: tuple[HostApplicationSpec, ...] = (),
) -> NodeSnapshot:
    return make_snapshot(
        pods=pods,
        cpus=TOPOLOGY,
        node=make_node(16, annotations=annotations),
        settings=make_settings(gates=gates, host_applications=host_apps),
    )


def cpusets(outcome: Outcome) -> dict[str, CpuSet]:
    found: dict[str, CpuSet] = {}
    for w in outcome.writes:
        assert w.resource is CPUSET
        assert isinstance(w.value, CpuSet)
        found[w.cgroup] = w.value
    return found


def gauge(outcome: Outcome, name: str) -> float:
    return next(g.value for g in outcome.gauges if g.name == name)


# --- pools ------------------------------------------------------------------------------------

NODE_ANNOTATIONS = {
    k.ANNOTATION_NODE_RESERVATION: {"reservedCPUs": str(RESERVED)},
    k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: {"cpuset": str(SYSTEM)},
}


def test_ls_pool_excludes_bound_reserved_and_system_cpus() -> None:
    pools = share_pools(snapshot_with(LSE, LSR, LS, BE, annotations=NODE_ANNOTATIONS))
    assert pools.ls == ALL - LSE_CPUS - LSR_CPUS - RESERVED - SYSTEM
    # BE may share LSR cores, never LSE ones
    assert pools.be == ALL - LSE_CPUS - RESERVED - SYSTEM


def test_non_exclusive_system_cpus_stay_in_the_pools() -> None:
    annotations = {
        k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: {"cpuset": str(SYSTEM), "cpusetExclusive": False}
    }
    pools = share_pools(snapshot_with(LS, annotations=annotations))
    assert pools.ls == pools.be == ALL


def test_kubelet_pinned_cpus_leave_both_pools() -> None:
    pinned = core_cpus(TOPOLOGY, 5)
    allocs = [{"namespace": "d", "name": "p", "uid": "u", "cpuset": str(pinned)}]
    pools = share_pools(snapshot_with(LS, annotations={k.ANNOTATION_NODE_POD_CPU_ALLOCS: allocs}))
    assert pools.ls == pools.be == ALL - pinned


def test_terminated_pods_release_their_cpus() -> None:
    done = make_pod("done", qos="LSE", cpu_limit=2000, cpuset="0,8", phase="Succeeded")
    assert share_pools(snapshot_with(done, LS)).ls == ALL


def test_full_be_cpuset_keeps_kubelet_pinned_cpus() -> None:
    pinned = core_cpus(TOPOLOGY, 5)
    allocs = [{"cpuset": str(pinned)}]
    snapshot = snapshot_with(
        LSE, LSR, annotations={**NODE_ANNOTATIONS, k.ANNOTATION_NODE_POD_CPU_ALLOCS: allocs}
    )
    assert be_full_cpuset(snapshot) == ALL - LSE_CPUS - RESERVED - SYSTEM


def test_pool_gauges() -> None:
    outcome = CpusetPool().plan(snapshot_with(LSE, LSR, LS, annotations=NODE_ANNOTATIONS))
    assert gauge(outcome, "cpuset_share_pool_cpu_cores") == 16 - 2 - 2 - 2 - 2
    assert gauge(outcome, "cpuset_be_share_pool_cpu_cores") == 16 - 2 - 2 - 2
    assert not [g for g in outcome.gauges if g.name.endswith("_info")]


def test_per_cpu_gauges_with_gate() -> None:
    outcome = CpusetPool().plan(snapshot_with(LSE, LS, gates={"PerCPUMetric": True}))
    ls_cpus = {g.labels["cpu"] for g in outcome.gauges if g.name == "cpuset_share_pool_info"}
    be_cpus = {g.labels["cpu"] for g in outcome.gauges if g.name == "cpuset_be_share_pool_info"}
    assert ls_cpus == be_cpus == {str(c) for c in ALL - LSE_CPUS}


# --- per pod decisions ------------------------------------------------------------------------

LS_POOL = ALL - LSE_CPUS - LSR_CPUS
BE_POOL = ALL - LSE_CPUS
SYS = make_pod("sys", qos="SYSTEM", cpu_request=500, cpu_limit=1000)
PLAIN_GUARANTEED = make_pod("plain-g", cpu_limit=1000)  # no label: LSR by default, unbound
PLAIN_BURSTABLE = make_pod("plain-b", cpu_request=500, cpu_limit=1000)  # no label: LS
LS_NUMA = make_pod("ls-numa", qos="LS", cpu_limit=2000, numa={1: {"cpu": "2"}})
BE_NUMA = make_pod("be-numa", qos="BE", numa={0: {k.RESOURCE_BATCH_CPU: "2000"}})


@pytest.mark.parametrize(
    ("pod", "expected", "gates", "annotations"),
    [
        pytest.param(LSR, LSR_CPUS, None, None, id="bound-LSR-own-cpus"),
        pytest.param(LSE, LSE_CPUS, None, None, id="bound-LSE-own-cpus"),
        pytest.param(LS, LS_POOL, None, None, id="LS-share-pool"),
        pytest.param(BE, None, None, None, id="BE-left-to-suppress"),
        pytest.param(LS_NUMA, LS_POOL & node_cpus(TOPOLOGY, 1), None, None, id="LS-numa-node-1"),
        pytest.param(BE_NUMA, None, None, None, id="BE-numa-without-gate-untouched"),
        pytest.param(
            BE_NUMA,
            BE_POOL & node_cpus(TOPOLOGY, 0),
            {"BECPUManager": True},
            None,
            id="BE-numa-with-BECPUManager",
        ),
        pytest.param(SYS, LS_POOL, None, None, id="SYSTEM-without-system-cpuset-LS-pool"),
        pytest.param(
            SYS,
            SYSTEM,
            None,
            {k.ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: {"cpuset": str(SYSTEM)}},
            id="SYSTEM-cpuset",
        ),
        pytest.param(PLAIN_BURSTABLE, LS_POOL, None, None, id="unlabelled-burstable-LS-pool"),
        pytest.param(PLAIN_GUARANTEED, LS_POOL, None, None, id="unlabelled-guaranteed-LS-pool"),
        pytest.param(
            PLAIN_GUARANTEED,
            None,
            None,
            {k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: {"policy": "static"}},
            id="unlabelled-guaranteed-kubelet-static-untouched",
        ),
        pytest.param(
            LS,
            LS_POOL,
            None,
            {k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: {"policy": "static"}},
            id="LS-under-kubelet-static-still-LS-pool",
        ),
    ],
)
def test_pod_cpuset(
    pod: PodState,
    expected: CpuSet | None,
    gates: Mapping[str, bool] | None,
    annotations: Mapping[str, object] | None,
) -> None:
    outcome = CpusetPool().plan(snapshot_with(LSE, LSR, pod, annotations=annotations, gates=gates))
    found = cpusets(outcome)
    if expected is None:
        assert pod.cgroup not in found
        assert not set(container_dirs(pod)) & set(found)
        return
    assert found[pod.cgroup] == expected
    assert {found[d] for d in container_dirs(pod)} == {expected}


def test_pod_written_before_its_containers() -> None:
    pod = make_pod("two", qos="LS", cpu_limit=1000, containers=2)
    outcome = CpusetPool().plan(snapshot_with(pod))
    order = [w.cgroup for w in outcome.writes]
    assert order == [pod.cgroup, *container_dirs(pod)]


def test_containers_without_a_cgroup_are_skipped() -> None:
    pod = make_pod("new", qos="LS", cpu_limit=1000, container_ids=False)
    assert [w.cgroup for w in CpusetPool().plan(snapshot_with(pod)).writes] == [pod.cgroup]


def test_no_cpu_left_writes_nothing() -> None:
    # every CPU bound to LSE pods: the LS pool is empty and an empty cpuset is never written
    hog = make_pod("hog", qos="LSE", cpu_limit=16000, cpuset=str(ALL))
    outcome = CpusetPool().plan(snapshot_with(hog, LS))
    assert LS.cgroup not in cpusets(outcome)
    assert gauge(outcome, "cpuset_share_pool_cpu_cores") == 0


def test_ls_host_application_gets_the_ls_pool() -> None:
    app = HostApplicationSpec(
        name="nginx", qos="LS", cgroup_path=CgroupPath(base="CgroupRoot", relative_path="nginx")
    )
    be_app = HostApplicationSpec(
        name="spark", qos="BE", cgroup_path=CgroupPath(base="KubepodsBesteffort", relative_path="s")
    )
    outcome = CpusetPool().plan(snapshot_with(LSE, host_apps=(app, be_app)))
    found = cpusets(outcome)
    assert found["nginx"] == ALL - LSE_CPUS
    assert f"{BE_DIR}/s" not in found


def test_host_application_at_the_cgroup_root_is_not_written() -> None:
    app = HostApplicationSpec(name="whole", qos="LS", cgroup_path=CgroupPath(base="CgroupRoot"))
    assert cpusets(CpusetPool().plan(snapshot_with(host_apps=(app,)))) == {}


def test_the_same_pods_follow_a_changed_node_and_settings() -> None:
    strategy = CpusetPool()
    first = strategy.plan(snapshot_with(LSE, LS))
    assert strategy.plan(snapshot_with(LSE, LS)) == first
    reserved = strategy.plan(snapshot_with(LSE, LS, annotations=NODE_ANNOTATIONS))
    assert cpusets(reserved)[LS.cgroup] == ALL - LSE_CPUS - RESERVED - SYSTEM
    per_cpu = strategy.plan(snapshot_with(LSE, LS, gates={"PerCPUMetric": True}))
    assert len(per_cpu.gauges) > len(first.gauges)
    assert strategy.plan(snapshot_with(LSE, LSR, LS)) != first


def test_no_cpu_left_is_logged_every_pass(caplog: pytest.LogCaptureFixture) -> None:
    hog = make_pod("hog", qos="LSE", cpu_limit=16000, cpuset=str(ALL))
    strategy = CpusetPool()
    for _ in range(2):
        strategy.plan(snapshot_with(hog, LS))
    assert sum("no CPU left" in r.getMessage() for r in caplog.records) == 2


def test_gate_off_does_nothing() -> None:
    outcome = CpusetPool().plan(snapshot_with(LS, gates={"CPUSetAllocator": False}))
    assert outcome == Outcome()


def test_besteffort_pod_labelled_ls_follows_the_ls_rule() -> None:
    pod = make_pod("odd", qos="LS", kube=KubeQoS.BEST_EFFORT)
    assert cpusets(CpusetPool().plan(snapshot_with(pod)))[pod.cgroup] == ALL


def test_bad_kubelet_annotation_is_ignored() -> None:
    snapshot = snapshot_with(
        PLAIN_GUARANTEED, annotations={k.ANNOTATION_KUBELET_CPU_MANAGER_POLICY: "{not json"}
    )
    assert cpusets(CpusetPool().plan(snapshot))[PLAIN_GUARANTEED.cgroup] == ALL


def test_name() -> None:
    assert CpusetPool().name == "cpuset_pool"
