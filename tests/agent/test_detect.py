"""cgroup version and driver detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cgroups import detect
from agent.config import CgroupSection, HostPaths
from agent.errors import Unsupported
from tests.fakes.host import MOUNTINFO_HYBRID, MOUNTINFO_V1, MOUNTINFO_V2, FakeHost


def test_mountinfo_lines_are_parsed_with_escapes() -> None:
    text = (
        "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
        "garbage line\n"
        "28 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:13 - cgroup cgroup "
        "rw,cpu,cpuacct\n"
    )
    mounts = detect.parse_mountinfo(text)
    assert mounts == (
        detect.Mount("/mnt two", "ext3", "/mnt1", ("rw", "errors=continue")),
        detect.Mount("/sys/fs/cgroup/cpu,cpuacct", "cgroup", "/", ("rw", "cpu", "cpuacct")),
    )


@pytest.mark.parametrize(
    ("text", "version", "unified"),
    [
        (MOUNTINFO_V1, detect.CgroupVersion.V1, None),
        (MOUNTINFO_HYBRID, detect.CgroupVersion.HYBRID, "/sys/fs/cgroup/unified"),
        (MOUNTINFO_V2, detect.CgroupVersion.V2, "/sys/fs/cgroup"),
    ],
    ids=["v1", "hybrid", "v2"],
)
def test_layout_is_classified(
    text: str, version: detect.CgroupVersion, unified: str | None
) -> None:
    layout = detect.layout_from_mounts(detect.parse_mountinfo(text))
    assert layout is not None
    assert layout.version is version
    assert layout.unified == unified
    if version is detect.CgroupVersion.V2:
        assert layout.controllers == {}
        assert layout.resource_version == 2
    else:
        assert layout.controllers["cpu"] == "/sys/fs/cgroup/cpu,cpuacct"
        assert layout.controllers["memory"] == "/sys/fs/cgroup/memory"
        assert "name=systemd" not in layout.controllers
        assert layout.resource_version == 1


def test_no_cgroup_mounts_is_no_layout() -> None:
    assert detect.layout_from_mounts(detect.parse_mountinfo(MOUNTINFO_V1.split("25 23")[0])) is None


@pytest.mark.parametrize(
    ("text", "driver"),
    [
        (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
            "cgroupDriver: systemd\n",
            "systemd",
        ),
        ('{"kind": "KubeletConfiguration", "cgroupDriver": "cgroupfs"}', "cgroupfs"),
        ("kind: KubeletConfiguration\n", None),
        ("cgroupDriver: weird\n", None),
        ("- not\n- a map\n", None),
        ("{{{", None),
    ],
)
def test_kubelet_config_driver(text: str, driver: str | None) -> None:
    found = detect.parse_kubelet_driver(text)
    assert (None if found is None else str(found)) == driver


def test_kubelet_config_wins(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.use_v1()
    host.mkdir_cgroup("cpu,cpuacct/kubepods")  # the probe alone would say cgroupfs
    host.write_kubelet_config("cgroupDriver: systemd\n")
    info = detect.detect(host.paths, host.cgroup)
    assert (info.version, info.driver, info.driver_source) == ("v1", "systemd", "kubelet-config")
    assert info.kubepods_dir == "kubepods.slice"


@pytest.mark.parametrize(
    ("directory", "driver", "source"),
    [
        ("kubepods.slice", "systemd", "probe"),
        ("kubepods", "cgroupfs", "probe"),
        (None, "cgroupfs", "default"),
    ],
)
def test_driver_probe_under_the_cpu_hierarchy(
    tmp_path: Path, directory: str | None, driver: str, source: str
) -> None:
    host = FakeHost(tmp_path)
    host.use_hybrid()
    if directory is not None:
        host.mkdir_cgroup(f"cpu,cpuacct/{directory}")
    info = detect.detect(host.paths, host.cgroup)
    assert info.version is detect.CgroupVersion.HYBRID
    assert info.hierarchy("cpu") == host.cgroup_root / "cpu,cpuacct"
    assert (info.driver, info.driver_source) == (driver, source)


def test_v2_probes_the_root_itself(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.use_v2()
    host.mkdir_cgroup("kubepods.slice")
    info = detect.detect(host.paths, host.cgroup)
    assert (info.version, info.driver) == ("v2", "systemd")
    assert info.hierarchy("cpu") == host.cgroup_root


def test_custom_kubepods_parent(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.use_v2()
    host.mkdir_cgroup("batch.slice")
    info = detect.detect(
        host.paths, CgroupSection(root=str(host.cgroup_root), kubepods_parent="batch")
    )
    assert (info.driver, info.kubepods_dir) == ("systemd", "batch.slice")


def test_without_mountinfo_the_root_decides(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    host.write_cgroup("", "cgroup.controllers", "cpu memory\n")
    assert detect.detect(host.paths, host.cgroup).version is detect.CgroupVersion.V2


def test_no_cgroups_at_all_is_unsupported(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    with pytest.raises(Unsupported, match="no cgroup filesystem"):
        detect.detect(host.paths, host.cgroup)


def test_this_machine() -> None:
    """Detection on the real /proc/self/mountinfo agrees with the cgroup root itself."""
    root = Path("/sys/fs/cgroup")
    if not Path("/proc/self/mountinfo").is_file() or not root.is_dir():
        pytest.skip(reason="no /proc/self/mountinfo or /sys/fs/cgroup on this machine")
    info = detect.detect(HostPaths(), CgroupSection())
    unified_root = (root / "cgroup.controllers").is_file()
    assert (info.resource_version == 2) is unified_root
    if not unified_root:
        assert info.version in (detect.CgroupVersion.V1, detect.CgroupVersion.HYBRID)
        assert (info.hierarchy("cpu") / "cpu.shares").is_file()
        assert (info.hierarchy("memory") / "memory.limit_in_bytes").is_file()
    assert info.driver in (detect.CgroupDriver.SYSTEMD, detect.CgroupDriver.CGROUPFS)
