"""``koordpy agent plan``: one pass on a host's cgroup tree, printed, nothing written."""

from __future__ import annotations

import io
import json
from pathlib import Path

from agent import cli as agent_cli
from koordpy import cli
from tests.fakes.host import FakeHost

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agent"
LSR_UID = "0c9b8a7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d"
LSR_CONTAINER = "9f8e7d6c5b4a39281706f5e4d3c2b1a0ffeeddccbbaa99887766554433221100"
BE_UID = "3b2a1c0d-9e8f-4d7c-b6a5-948372615e0f"


def _host(tmp_path: Path) -> tuple[FakeHost, Path]:
    """A cgroup v1 host with the example pods' cgroups as the kubelet would have made them."""
    host = FakeHost(tmp_path)
    host.use_v1()
    host.write("/proc/stat", "cpu  100 0 100 1000 0 0 0 0 0 0\ncpu0 50 0 50 500 0 0 0 0 0 0\n")
    host.write(
        "/proc/meminfo",
        "MemTotal:        8000000 kB\nMemFree:         5000000 kB\n"
        "MemAvailable:    6000000 kB\nBuffers:          100000 kB\n"
        "Cached:           900000 kB\nShmem:             10000 kB\n"
        "SReclaimable:      50000 kB\nActive:          1000000 kB\n"
        "Inactive:         800000 kB\n",
    )
    for cpu in (0, 1):
        host.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/core_id", f"{cpu}\n")
        host.write(f"/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", "0\n")
    host.write("/sys/devices/system/cpu/online", "0-1\n")
    lsr_pod = f"kubepods/pod{LSR_UID}"
    for directory in (lsr_pod, f"{lsr_pod}/{LSR_CONTAINER}"):
        host.write_cgroup(f"cpu,cpuacct/{directory}", "cpu.cfs_quota_us", "100000\n")
        host.write_cgroup(f"cpu,cpuacct/{directory}", "cpu.cfs_period_us", "100000\n")
    host.write_cgroup("cpu,cpuacct/kubepods/besteffort", "cpu.cfs_quota_us", "-1\n")
    config = tmp_path / "agent.toml"
    config.write_text(
        f'[host]\nroot = "{host.root}"\n[cgroup]\nroot = "{host.cgroup_root}"\n'
        "[qos]\ninterval = 0.05\n",
        encoding="utf-8",
    )
    return host, config


def _plan(config: Path, *extra: str) -> str:
    out = io.StringIO()
    args = cli.build_parser().parse_args(
        [
            "agent",
            "plan",
            "--config",
            str(config),
            "--node-name",
            "node-1",
            "--pods-file",
            str(EXAMPLES / "pods.yaml"),
            "--nodeslo-file",
            str(EXAMPLES / "nodeslo.yaml"),
            *extra,
        ]
    )
    assert agent_cli.main(args, out=out) == 0
    return out.getvalue()


def test_plan_lists_each_write_with_current_and_desired(tmp_path: Path) -> None:
    host, config = _host(tmp_path)
    quota = host.cgroup_root / "cpu,cpuacct" / "kubepods" / f"pod{LSR_UID}" / "cpu.cfs_quota_us"
    document = json.loads(_plan(config, "-o", "json"))
    writes = {(w["cgroup"], Path(w["file"]).name): w for w in document["writes"]}
    unbind = writes[(f"kubepods/pod{LSR_UID}", "cpu.cfs_quota_us")]
    assert unbind["current"] == "100000"
    assert unbind["desired"] == "-1"
    assert unbind["strategy"] == "cpu_unbind"
    assert unbind["file"] == str(quota)
    be_tier = writes[("kubepods/besteffort", "cpu.cfs_quota_us")]
    assert be_tier["strategy"] == "cpu_suppress"
    assert be_tier["current"] == "-1"
    assert int(be_tier["desired"]) >= 2000
    assert "BE budget" in be_tier["reason"]
    # Nothing was written.
    assert quota.read_text() == "100000\n"


def test_plan_table_has_the_columns(tmp_path: Path) -> None:
    _, config = _host(tmp_path)
    text = _plan(config)
    lines = text.splitlines()
    assert lines[0].startswith("node node-1: cgroup v1, driver cgroupfs, 3 pods;")
    assert lines[1].split() == ["CGROUP", "FILE", "CURRENT", "DESIRED", "STRATEGY", "REASON"]
    assert any("cpu_unbind" in line and "100000" in line for line in lines[2:])


def test_plan_refuses_a_bad_nodeslo_naming_the_field(tmp_path: Path) -> None:
    _, config = _host(tmp_path)
    bad = tmp_path / "nodeslo.yaml"
    bad.write_text(
        (EXAMPLES / "nodeslo.yaml")
        .read_text()
        .replace("cpuSuppressThresholdPercent: 65", "cpuSuppressThresholdPercent: 165")
    )
    args = cli.build_parser().parse_args(
        [
            "agent",
            "plan",
            "--config",
            str(config),
            "--pods-file",
            str(EXAMPLES / "pods.yaml"),
            "--nodeslo-file",
            str(bad),
            "-o",
            "json",
        ]
    )
    out = io.StringIO()
    assert agent_cli.main(args, out=out) == 0
    # The refused NodeSLO leaves the defaults in force: suppression is off, no BE budget.
    document = json.loads(out.getvalue())
    assert not any("BE budget" in w["reason"] for w in document["writes"])
