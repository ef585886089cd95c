"""``koordpy controller run`` as a process: serves the API, stops on SIGTERM, refuses bad config."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from apis.core import Node
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from controller.api.client import Client, Unreachable
from tests.koordpy.daemons import cli, koordpy_command

pytestmark = pytest.mark.slow


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    api = f"unix://{tmp_path / 'c.sock'}"
    process = subprocess.Popen(
        koordpy_command(
            "controller",
            "run",
            "--state-dir",
            str(tmp_path / "state"),
            "--api",
            api,
            "--metrics-address",
            "127.0.0.1:0",
            *extra,
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "NOTIFY_SOCKET": ""},
    )
    return process, api


def _wait_reachable(api: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    kind = default_registry().for_type(Node)
    while True:
        try:
            with Client(api, timeout=2) as client:
                client.list(kind)
            return
        except Unreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_serves_persists_and_stops_on_sigterm(tmp_path: Path) -> None:
    process, api = _start(tmp_path)
    try:
        _wait_reachable(api)
        with Client(api) as client:
            client.create(Node(metadata=ObjectMeta(name="gpu-1")))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert not (tmp_path / "c.sock").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()
    process, api = _start(tmp_path)
    try:
        _wait_reachable(api)
        got = cli(api, "get", "nodes", "-o", "name")
        assert got.stdout.split() == ["node/gpu-1"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


def test_unknown_config_key_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "controller.toml"
    config.write_text("[store]\nsynchronus = 'FULL'\n")
    process, _ = _start(tmp_path, "--config", str(config))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert b"synchronus" in err
    assert b"[store]" in err
    assert not (tmp_path / "state").exists()


def test_a_missing_named_config_exits_2(tmp_path: Path) -> None:
    process, _ = _start(tmp_path, "--config", str(tmp_path / "absent.toml"))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert b"absent.toml" in err


def test_an_unreadable_mqtt_password_file_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "controller.toml"
    missing = tmp_path / "no-such-password"
    config.write_text(f'[ingest]\ntransport = "mqtt"\n[mqtt]\npassword_file = "{missing}"\n')
    process, _ = _start(tmp_path, "--config", str(config))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert b"[mqtt]" in err
    assert str(missing).encode() in err
    assert not (tmp_path / "state").exists()


def test_over_mqtt_it_serves_while_the_broker_is_down(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "controller.toml"
    config.write_text(
        '[ingest]\ntransport = "mqtt"\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {port}\nreconnect_min = 0.1\nreconnect_max = 0.5\n'
    )
    process, api = _start(tmp_path, "--config", str(config))
    try:
        _wait_reachable(api)
        got = cli(api, "get", "nodes", "-o", "name")
        assert got.returncode == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stderr is not None
        process.stderr.close()


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ('plugins = ["Priority", "ElasticQuota", "Fairness"]', b"Fairness"),
        ("[queueing.plugin_configs.TenantCap]\nmaxRunningUnits = -1", b"maxRunningUnits"),
    ],
    ids=["unknown-plugin", "bad-args"],
)
def test_a_bad_queueing_section_exits_2_naming_it(
    tmp_path: Path, section: str, named: bytes
) -> None:
    config = tmp_path / "controller.toml"
    plugins = 'plugins = ["Priority", "ElasticQuota", "TenantCap"]\n'
    body = section if section.startswith("plugins") else plugins + section
    config.write_text(f"[queueing]\n{body}\n")
    process, _ = _start(tmp_path, "--config", str(config))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert b"[queueing]" in err
    assert named in err
    assert not (tmp_path / "state").exists()
