"""Pod states (classes, cgroup dirs, containers) and the CPU topology from sysfs."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from agent import states
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from agent.config import HostPaths
from agent.qos.framework import CpuInfo, PodState
from apis import constants as k
from apis.codec import decode_as
from apis.core import Pod
from apis.qos import KubeQoS, PriorityClass, QoSClass
from tests.fakes.host import FakeHost

UID = "7712555c-ce62-454a-9e18-9ff0217b8941"
CID = "0123abcd"


def _info(driver: CgroupDriver) -> CgroupInfo:
    return CgroupInfo(version=CgroupVersion.V1, driver=driver, root=Path("/sys/fs/cgroup"))


def _status(name: str, container_id: str = "", state: str = "running") -> dict[str, Any]:
    status: dict[str, Any] = {"name": name, "ready": state == "running", "restartCount": 0}
    if container_id:
        status["containerID"] = container_id
    if state:
        status["state"] = {state: {}}
    return status


def _pod(
    name: str = "web",
    uid: str = UID,
    *,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    qos_class: str = "",
    priority: int | None = None,
) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "containers": containers if containers is not None else [{"name": "app"}],
            "initContainers": init_containers or [],
        },
        "status": {
            "phase": phase,
            "containerStatuses": statuses or [],
            "initContainerStatuses": init_statuses or [],
        },
    }
    if qos_class:
        raw["status"]["qosClass"] = qos_class
    if priority is not None:
        raw["spec"]["priority"] = priority
    return decode_as(raw, Pod)


GUARANTEED_APP = {
    "name": "app",
    "resources": {
        "requests": {"cpu": "2", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    },
}


def test_guaranteed_pod_on_cgroupfs() -> None:
    pod = _pod(
        containers=[GUARANTEED_APP],
        statuses=[_status("app", f"containerd://{CID}")],
        annotations={k.ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": "2-3"})},
    )
    [state] = states.pod_states([pod], _info(CgroupDriver.CGROUPFS))
    assert state.pod is pod
    assert state.uid == UID
    assert state.kube_qos is KubeQoS.GUARANTEED
    assert state.qos is QoSClass.LSR  # Guaranteed without a label
    assert state.priority_class is PriorityClass.PROD
    assert state.priority == 9500
    assert state.cgroup == f"kubepods/pod{UID}"
    assert state.cpuset == CpuSet({2, 3})
    assert state.phase == "Running"
    assert state.active
    [app] = state.containers
    assert app.name == "app"
    assert app.container_id == f"containerd://{CID}"
    assert app.cgroup == f"kubepods/pod{UID}/{CID}"
    assert app.running
    assert app.requests == {"cpu": 2000, "memory": 2**30}
    assert app.limits == {"cpu": 2000, "memory": 2**30}


def test_besteffort_pod_on_systemd_with_label_and_priority() -> None:
    pod = _pod(
        statuses=[_status("app", f"cri-o://{CID}")],
        labels={k.LABEL_QOS_CLASS: "BE"},
        priority=5100,
    )
    [state] = states.pod_states([pod], _info(CgroupDriver.SYSTEMD))
    assert state.kube_qos is KubeQoS.BEST_EFFORT
    assert state.qos is QoSClass.BE
    assert state.priority_class is PriorityClass.BATCH
    assert state.priority == 5100
    uid_ = UID.replace("-", "_")
    pod_dir = f"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice"
    assert state.cgroup == pod_dir
    assert state.containers[0].cgroup == f"{pod_dir}/crio-{CID}.scope"
    assert state.cpuset is None


def test_burstable_status_qos_class_wins_and_limits_stand_in_for_requests() -> None:
    pod = _pod(
        containers=[{"name": "app", "resources": {"limits": {"cpu": "1"}}}],
        qos_class="Burstable",
        statuses=[_status("app", f"docker://{CID}")],
    )
    [state] = states.pod_states([pod], _info(CgroupDriver.CGROUPFS))
    assert state.kube_qos is KubeQoS.BURSTABLE
    assert state.qos is QoSClass.LS
    assert state.cgroup == f"kubepods/burstable/pod{UID}"
    [app] = state.containers
    assert app.requests == {"cpu": 1000}
    assert app.limits == {"cpu": 1000}


def test_containers_without_a_usable_id_have_no_cgroup(caplog: pytest.LogCaptureFixture) -> None:
    pod = _pod(
        name="mixed",
        uid="aaaaaaaa-0000-4000-8000-000000000001",
        containers=[{"name": "pending"}, {"name": "odd-runtime"}, {"name": "escape"}],
        statuses=[
            _status("pending", state="waiting"),
            _status("odd-runtime", "rkt://abc"),
            _status("escape", "containerd://../../etc"),
        ],
    )
    with caplog.at_level(logging.WARNING, logger="agent.states"):
        [state] = states.pod_states([pod], _info(CgroupDriver.CGROUPFS))
    assert [(c.name, c.cgroup) for c in state.containers] == [
        ("pending", None),
        ("odd-runtime", None),
        ("escape", None),
    ]
    assert [c.running for c in state.containers] == [False, True, True]
    assert "odd-runtime" in caplog.text
    assert "escape" in caplog.text
    assert "pending" not in caplog.text, "a container not created yet is normal"


def test_sidecars_count_regular_init_containers_do_not() -> None:
    pod = _pod(
        uid="bbbbbbbb-0000-4000-8000-000000000002",
        init_containers=[{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}],
        statuses=[_status("app", "containerd://c1")],
        init_statuses=[
            _status("setup", "containerd://c0", state="terminated"),
            _status("proxy", "containerd://c2"),
        ],
    )
    [state] = states.pod_states([pod], _info(CgroupDriver.CGROUPFS))
    pod_dir = "kubepods/besteffort/podbbbbbbbb-0000-4000-8000-000000000002"
    assert [(c.name, c.cgroup, c.running) for c in state.containers] == [
        ("app", f"{pod_dir}/c1", True),
        ("proxy", f"{pod_dir}/c2", True),
    ]


def test_bad_and_repeated_uids_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    good = _pod("good", "cccccccc-0000-4000-8000-000000000003")
    evil = _pod("evil", "../../../etc")
    empty = _pod("no-uid", "")
    again = _pod("again", "cccccccc-0000-4000-8000-000000000003")
    with caplog.at_level(logging.WARNING, logger="agent.states"):
        result = states.pod_states([good, evil, empty, again], _info(CgroupDriver.CGROUPFS))
    assert [s.name for s in result] == ["good"]
    assert "default/evil ignored" in caplog.text
    assert "default/no-uid ignored" in caplog.text
    assert "listed twice" in caplog.text


@pytest.mark.parametrize(
    ("phase", "active"),
    [
        ("Pending", True),
        ("Running", True),
        ("", True),
        ("Unknown", True),
        ("Succeeded", False),
        ("Failed", False),
    ],
)
def test_active_phases(phase: str, active: bool) -> None:
    [state] = states.pod_states([_pod(phase=phase)], _info(CgroupDriver.CGROUPFS))
    assert isinstance(state, PodState)
    assert state.phase == phase
    assert state.active is active


# --- CPU topology -------------------------------------------------------------------------------


def _cpu(host: FakeHost, cpu: int, *, core: int | None, package: int | None) -> None:
    base = f"/sys/devices/system/cpu/cpu{cpu}/topology"
    (host.root / base.lstrip("/")).mkdir(parents=True, exist_ok=True)
    if core is not None:
        host.write(f"{base}/core_id", f"{core}\n")
    if package is not None:
        host.write(f"{base}/physical_package_id", f"{package}\n")


def test_topology_two_sockets_with_hyperthreads(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    # 2 sockets x 2 cores x 2 threads; siblings are N and N+4; core_id restarts per socket
    layout = {0: (0, 0), 1: (1, 0), 2: (0, 1), 3: (1, 1), 4: (0, 0), 5: (1, 0), 6: (0, 1)}
    layout[7] = (1, 1)
    for cpu, (core_id, package) in layout.items():
        _cpu(host, cpu, core=core_id, package=package)
    host.write("/sys/devices/system/cpu/online", "0-7\n")
    host.write("/sys/devices/system/cpu/possible", "0-7\n")  # not a cpu directory
    host.write("/sys/devices/system/node/node0/cpulist", "0-1,4-5\n")
    host.write("/sys/devices/system/node/node1/cpulist", "2-3,6-7\n")
    host.write("/sys/devices/system/node/possible", "0-1\n")

    cpus = states.cpu_topology(host.paths)
    # logical cores are numbered per distinct (socket, core_id) in order of the first cpu:
    # (0,0)->0 (0,1)->1 (1,0)->2 (1,1)->3
    assert cpus == (
        CpuInfo(cpu=0, core=0, socket=0, node=0),
        CpuInfo(cpu=1, core=1, socket=0, node=0),
        CpuInfo(cpu=2, core=2, socket=1, node=1),
        CpuInfo(cpu=3, core=3, socket=1, node=1),
        CpuInfo(cpu=4, core=0, socket=0, node=0),
        CpuInfo(cpu=5, core=1, socket=0, node=0),
        CpuInfo(cpu=6, core=2, socket=1, node=1),
        CpuInfo(cpu=7, core=3, socket=1, node=1),
    )


def test_topology_offline_cpus_missing_numa_and_odd_packages(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    _cpu(host, 0, core=0, package=-1)  # some platforms report -1
    _cpu(host, 1, core=1, package=0)
    _cpu(host, 2, core=None, package=None)
    _cpu(host, 10, core=5, package=0)  # numeric sort, not lexical
    _cpu(host, 3, core=3, package=0)
    host.write("/sys/devices/system/cpu/online", "0-2,10\n")
    cpus = states.cpu_topology(host.paths)
    assert [c.cpu for c in cpus] == [0, 1, 2, 10]
    assert {c.node for c in cpus} == {0}
    assert {c.socket for c in cpus} == {0}
    assert len({c.core for c in cpus}) == 4, "a cpu without core_id is its own core"


def test_topology_without_sysfs_is_empty(tmp_path: Path) -> None:
    assert states.cpu_topology(FakeHost(tmp_path).paths) == ()


def test_topology_of_this_machine() -> None:
    online = Path("/sys/devices/system/cpu/online")
    if not online.is_file():
        pytest.skip(reason="no /sys/devices/system/cpu/online on this machine")
    cpus = states.cpu_topology(HostPaths())
    assert CpuSet(c.cpu for c in cpus) == CpuSet.parse(online.read_text())
    assert len(cpus) == os.cpu_count()
    for numa_dir in Path("/sys/devices/system/node").glob("node[0-9]*"):
        node = int(numa_dir.name[4:])
        listed = CpuSet.parse((numa_dir / "cpulist").read_text())
        assert {c.cpu for c in cpus if c.node == node} == set(listed)
    siblings = Path("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
    if siblings.is_file():
        same_core = CpuSet.parse(siblings.read_text())
        core0 = next(c.core for c in cpus if c.cpu == 0)
        assert {c.cpu for c in cpus if c.core == core0} == set(same_core)


def test_states_are_memoised_by_pod_identity() -> None:
    cache = states.PodStateCache()
    info = _info(CgroupDriver.CGROUPFS)
    a = _pod("a", "dddddddd-0000-4000-8000-00000000000a")
    b = _pod("b", "dddddddd-0000-4000-8000-00000000000b")
    first = states.pod_states([a, b], info, cache=cache)
    again = states.pod_states([a, b], info, cache=cache)
    assert all(x is y for x, y in zip(first, again, strict=True))
    # an equal but different object (a re-read) is computed afresh, and equals the old state
    b2 = _pod("b", "dddddddd-0000-4000-8000-00000000000b", phase="Succeeded")
    third = states.pod_states([a, b2], info, cache=cache)
    assert third[0] is first[0]
    assert third[1] is not first[1]
    assert third[1].pod is b2
    assert not third[1].active
    # another driver: new directories
    systemd = states.pod_states([a], _info(CgroupDriver.SYSTEMD), cache=cache)
    assert systemd[0].cgroup.startswith("kubepods.slice/")
