"""``python -m hack.kube``: arguments, the message for missing binaries, and a real up/down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hack.kube import Cluster, ClusterError, paths, start_cluster
from hack.kube.__main__ import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hack.kube", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        env=None if env is None else {**os.environ, **env},
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [[], ["up"], ["down"], ["up", "--dir", "x", "--timeout", "0"], ["sideways", "--dir", "x"]],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_a_dir_that_is_a_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(SystemExit) as exited:
        main(["up", "--dir", str(file)])
    assert exited.value.code == 2
    assert "not a directory" in capsys.readouterr().err


def test_missing_binaries_say_to_run_make_kube_bin(tmp_path: Path) -> None:
    result = run_cli(
        "up", "--dir", str(tmp_path / "c"), env={"KUBE_CACHE": str(tmp_path / "empty")}
    )
    assert result.returncode == 1
    assert "make kube-bin" in result.stderr
    assert not (tmp_path / "c" / "etcd.pid").exists()


def test_down_with_nothing_running_is_fine(tmp_path: Path) -> None:
    result = run_cli("down", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "nothing was running" in result.stdout


@pytest.mark.kube
def test_up_leaves_a_cluster_running_and_down_stops_it(
    kube_binaries: dict[str, str], tmp_path: Path
) -> None:
    directory = tmp_path / "cluster"
    up = run_cli("up", "--dir", str(directory))
    assert up.returncode == 0, up.stderr
    assert "ready in" in up.stdout
    pids = json.loads((directory / "cluster.json").read_text())["pids"]
    try:
        cluster = Cluster.load(directory)
        assert cluster.kubeconfig == directory / "kubeconfig"
        # The CLI process has exited; the control plane it started answers all the same.
        assert cluster.kubectl("get", "ns", "default", "-o", "name").stdout.strip() == (
            "namespace/default"
        )
        assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager"}
        again = run_cli("up", "--dir", str(directory))
        assert again.returncode == 1
        assert "already running" in again.stderr
    finally:
        down = run_cli("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "kube-apiserver" in down.stdout
    for pid in pids.values():
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
    for name in pids:
        assert (directory / f"{name}.log").stat().st_size > 0
    assert not (directory / "cluster.json").exists()


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def processes_naming(text: str) -> list[int]:
    """PIDs of live processes whose command line mentions ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline and not _is_zombie(int(entry.name)):
                found.append(int(entry.name))
    return found


@pytest.mark.kube
def test_a_component_that_dies_fails_up_with_its_log_and_stops_the_rest(
    kube_binaries: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real etcd, an API server that exits at once: `up` says why and leaves nothing running."""
    monkeypatch.setenv("KUBE_CACHE", str(tmp_path / "cache"))
    fake_bin = paths.bin_dir()
    fake_bin.mkdir(parents=True)
    for name in ("etcd", "kube-controller-manager"):
        (fake_bin / name).symlink_to(kube_binaries[name])
    apiserver = fake_bin / "kube-apiserver"
    apiserver.write_text("#!/bin/sh\necho 'cannot serve: no such luck' >&2\nexit 3\n")
    apiserver.chmod(0o755)
    directory = tmp_path / "cluster"
    with pytest.raises(ClusterError, match="kube-apiserver exited") as failed:
        start_cluster(directory, timeout=30)
    assert "cannot serve: no such luck" in str(failed.value)
    assert processes_naming(str(directory)) == []
    assert not list(directory.glob("*.pid"))
    assert (directory / "etcd.log").stat().st_size > 0
