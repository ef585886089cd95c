"""Kubepods paths per QoS class, driver and runtime; reverse parsing; hostile input."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.cgroups import paths
from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from apis.qos import KubeQoS

SYSTEMD, CGROUPFS = CgroupDriver.SYSTEMD, CgroupDriver.CGROUPFS
G, BU, BE = KubeQoS.GUARANTEED, KubeQoS.BURSTABLE, KubeQoS.BEST_EFFORT
UID = "7712555c-ce62-454a-9e18-9ff0217b8941"
CID = "4f3c2a1b" * 8

# The kubelet's layout (agent-spec §1.3), "{u}" = UID, "{u_}" = UID with '-' -> '_'.
QOS_DIRS = {
    (SYSTEMD, G): "kubepods.slice",
    (SYSTEMD, BU): "kubepods.slice/kubepods-burstable.slice",
    (SYSTEMD, BE): "kubepods.slice/kubepods-besteffort.slice",
    (CGROUPFS, G): "kubepods",
    (CGROUPFS, BU): "kubepods/burstable",
    (CGROUPFS, BE): "kubepods/besteffort",
}
POD_NAMES = {
    (SYSTEMD, G): "kubepods-pod{u_}.slice",
    (SYSTEMD, BU): "kubepods-burstable-pod{u_}.slice",
    (SYSTEMD, BE): "kubepods-besteffort-pod{u_}.slice",
    (CGROUPFS, G): "pod{u}",
    (CGROUPFS, BU): "pod{u}",
    (CGROUPFS, BE): "pod{u}",
}
CONTAINER_NAMES = {
    (SYSTEMD, "containerd"): "cri-containerd-{id}.scope",
    (SYSTEMD, "cri-o"): "crio-{id}.scope",
    (SYSTEMD, "docker"): "docker-{id}.scope",
    (SYSTEMD, "pouch"): "pouch-{id}.scope",
    (CGROUPFS, "containerd"): "{id}",
    (CGROUPFS, "cri-o"): "{id}",
    (CGROUPFS, "docker"): "{id}",
    (CGROUPFS, "pouch"): "{id}",
}


def _info(driver: CgroupDriver, parent: str = "kubepods") -> CgroupInfo:
    return CgroupInfo(
        version=CgroupVersion.V1,
        driver=driver,
        root=Path("/sys/fs/cgroup"),
        kubepods_parent=parent,
    )


@pytest.mark.parametrize("runtime", ["containerd", "cri-o", "docker", "pouch"])
@pytest.mark.parametrize("qos", [G, BU, BE], ids=str)
@pytest.mark.parametrize("driver", [SYSTEMD, CGROUPFS], ids=str)
def test_every_qos_driver_and_runtime(driver: CgroupDriver, qos: KubeQoS, runtime: str) -> None:
    info = _info(driver)
    pod_name = POD_NAMES[driver, qos].format(u=UID, u_=UID.replace("-", "_"))
    container_name = CONTAINER_NAMES[driver, runtime].format(id=CID)

    assert paths.qos_dir(info, qos) == QOS_DIRS[driver, qos]
    pod = paths.pod_dir(info, qos, UID)
    assert pod == f"{QOS_DIRS[driver, qos]}/{pod_name}"
    container = paths.container_dir(info, pod, f"{runtime}://{CID}")
    assert container == f"{pod}/{container_name}"

    # and back
    assert paths.parse_pod_uid(posixpath.basename(pod)) == UID
    assert paths.parse_container_id(posixpath.basename(container)) == CID
    assert paths.qos_of_dir(pod) is qos


def test_spec_example_path() -> None:
    pod = paths.pod_dir(_info(SYSTEMD), BU, UID)
    assert pod == (
        "kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod7712555c_ce62_454a_9e18_9ff0217b8941.slice"
    )


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        (
            SYSTEMD,
            "koordpy-test-x/kubepods.slice/kubepods-besteffort.slice/"
            "kubepods-besteffort-pod{u_}.slice",
        ),
        (CGROUPFS, "koordpy-test-x/kubepods/besteffort/pod{u}"),
    ],
    ids=str,
)
def test_kubepods_parent_with_a_directory_in_front(driver: CgroupDriver, expected: str) -> None:
    info = _info(driver, "koordpy-test-x/kubepods")
    # the leading directory is kept as is; only the last component is the kubepods cgroup
    assert paths.qos_dir(info, G) == info.kubepods_dir
    pod = paths.pod_dir(info, BE, UID)
    assert pod == expected.format(u=UID, u_=UID.replace("-", "_"))
    assert paths.parse_pod_uid(posixpath.basename(pod)) == UID


def test_another_kubepods_name_prefixes_the_systemd_slices() -> None:
    info = _info(SYSTEMD, "koordpy")
    assert paths.qos_dir(info, BU) == "koordpy.slice/koordpy-burstable.slice"
    pod = paths.pod_dir(info, BU, "abc-1")
    assert pod == "koordpy.slice/koordpy-burstable.slice/koordpy-burstable-podabc_1.slice"
    assert paths.parse_pod_uid(posixpath.basename(pod)) == "abc-1"


@pytest.mark.parametrize(
    "parent", ["../kubepods", "/kubepods", "a//kubepods", "kubepods/", "a/./kubepods", "", "a b"]
)
def test_bad_kubepods_parent(parent: str) -> None:
    with pytest.raises(paths.PathError, match="kubepods parent"):
        paths.qos_dir(_info(CGROUPFS, parent), BE)


@pytest.mark.parametrize(
    "uid",
    [
        "",
        "..",
        "../etc",
        "a/b",
        "/abs",
        "x\0y",
        "a b",
        "tab\tuid",
        "new\nline",
        "-leading",
        "ünï",
        "a.b",
        "under_score",
        "x" * 129,
    ],
)
@pytest.mark.parametrize("driver", [SYSTEMD, CGROUPFS], ids=str)
def test_bad_pod_uid_is_refused_naming_it(driver: CgroupDriver, uid: str) -> None:
    with pytest.raises(paths.PathError) as err:
        paths.pod_dir(_info(driver), BU, uid)
    assert repr(uid)[:40] in str(err.value)


@pytest.mark.parametrize(
    "container_id",
    [
        "containerd://../x",
        "containerd://a/b",
        "containerd://",
        "docker://..",
        "docker://a b",
        "cri-o://x\0y",
        "containerd://a.b",
        "rkt://abc",
        "abc",
        "",
        "containerd:/abc",
    ],
)
@pytest.mark.parametrize("driver", [SYSTEMD, CGROUPFS], ids=str)
def test_bad_container_id_is_refused_naming_it(driver: CgroupDriver, container_id: str) -> None:
    info = _info(driver)
    pod = paths.pod_dir(info, BU, UID)
    with pytest.raises(paths.PathError) as err:
        paths.container_dir(info, pod, container_id)
    shown = container_id.partition("://")[2] if "://" in container_id else container_id
    assert repr(shown)[1:-1][:30] in str(err.value)


def test_unknown_runtime_names_the_runtime() -> None:
    with pytest.raises(paths.PathError, match="unknown runtime 'rkt'"):
        paths.split_container_id("rkt://abc")
    assert paths.split_container_id("cri-o://abc") == ("cri-o", "abc")


@pytest.mark.parametrize(
    "pod_dir", ["/kubepods/pod1", "kubepods/../../etc", "kubepods//pod1", "kubepods/pod1/", "."]
)
def test_container_dir_refuses_a_bad_pod_dir(pod_dir: str) -> None:
    with pytest.raises(paths.PathError):
        paths.container_dir(_info(CGROUPFS), pod_dir, f"containerd://{CID}")


@pytest.mark.parametrize(
    "name",
    [
        "kubepods-burstable.slice",
        "burstable",
        "cpu.shares",
        "pod",
        "pod.slice",
        "kubepods-pod.slice",
        "podx/y",
        "pod../..",
        "kubepods-podab-c.slice",
    ],
)
def test_names_that_are_not_pod_dirs(name: str) -> None:
    assert paths.parse_pod_uid(name) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("cri-containerd-abc123.scope", "abc123"),
        ("docker-abc123.scope", "abc123"),
        ("crio-abc123.scope", "abc123"),
        ("crio-abc123", "abc123"),
        ("pouch-abc123.scope", "abc123"),
        ("abc123", "abc123"),
        ("cpu.stat", None),
        ("cgroup.procs", None),
        ("kubepods-besteffort.slice", None),
        ("foo-abc.scope", None),
        ("docker-a.b.scope", None),
        ("..", None),
        ("", None),
    ],
)
def test_parse_container_id(name: str, expected: str | None) -> None:
    assert paths.parse_container_id(name) == expected


@pytest.mark.parametrize(
    ("cgroup", "qos"),
    [
        ("kubepods.slice/kubepods-besteffort.slice/x", BE),
        ("kubepods/burstable/pod1", BU),
        ("kubepods/pod1", G),
    ],
)
def test_qos_of_dir(cgroup: str, qos: KubeQoS) -> None:
    assert paths.qos_of_dir(cgroup) is qos


@pytest.mark.parametrize("cgroup", ["/abs", "a/../b", "..", "a/.", "a//b", "a/", "x\0"])
def test_check_cgroup_refuses_escapes(cgroup: str) -> None:
    with pytest.raises(paths.PathError):
        paths.check_cgroup(cgroup)


@pytest.mark.parametrize("cgroup", ["", "kubepods", "kubepods.slice/kubepods-pod1.slice", "a..b"])
def test_check_cgroup_accepts_relative_dirs(cgroup: str) -> None:
    assert paths.check_cgroup(cgroup) == cgroup


_NASTY = st.text(alphabet=st.sampled_from("ab09-_./ \0\n\t:%\\"), max_size=24) | st.text(
    max_size=40
)
ROOT = "/sys/fs/cgroup/cpu"


def _inside(relative: str, top: str) -> bool:
    full = posixpath.normpath(f"{ROOT}/{relative}")
    return full.startswith(f"{ROOT}/{top}/") and ".." not in relative.split("/")


@given(uid=_NASTY, driver=st.sampled_from([SYSTEMD, CGROUPFS]), qos=st.sampled_from([G, BU, BE]))
def test_no_accepted_uid_leaves_the_root(uid: str, driver: CgroupDriver, qos: KubeQoS) -> None:
    info = _info(driver)
    try:
        pod = paths.pod_dir(info, qos, uid)
    except paths.PathError:
        return
    assert _inside(pod, paths.qos_dir(info, qos))
    assert pod.count("/") == paths.qos_dir(info, qos).count("/") + 1
    assert paths.parse_pod_uid(posixpath.basename(pod)) == uid


@given(
    bare=_NASTY,
    runtime=st.sampled_from(["containerd", "cri-o", "docker", "pouch", "rkt", ""]),
    driver=st.sampled_from([SYSTEMD, CGROUPFS]),
)
def test_no_accepted_container_id_leaves_the_pod(
    bare: str, runtime: str, driver: CgroupDriver
) -> None:
    info = _info(driver)
    pod = paths.pod_dir(info, BE, UID)
    try:
        container = paths.container_dir(info, pod, f"{runtime}://{bare}")
    except paths.PathError:
        return
    assert runtime in paths.RUNTIMES
    assert _inside(container, pod)
    assert container.count("/") == pod.count("/") + 1
    assert paths.parse_container_id(posixpath.basename(container)) == bare
