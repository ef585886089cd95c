"""``koordpy agent run``'s transport settings: a config it cannot use exits 2 before anything
starts, naming the file or field at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordpy import cli
from runtime.configfile import EXIT_CONFIG
from tests.fakes.host import FakeHost
from tests.fakes.tls import make_ca


def write_config(tmp_path: Path, extra: str) -> Path:
    host = FakeHost(tmp_path)
    path = tmp_path / "agent.toml"
    path.write_text(
        f'[host]\nroot = "{host.root}"\n[cgroup]\nroot = "{host.cgroup_root}"\n'
        f'[metrics]\naddress = "off"\n{extra}',
        encoding="utf-8",
    )
    return path


def run(config: Path, *extra: str) -> int:
    return cli.main(["agent", "run", "--config", str(config), "--node-name", "node-1", *extra])


def test_an_unreadable_password_file_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-password"
    config = write_config(tmp_path, f'[report.mqtt]\npassword_file = "{missing}"\n')
    assert run(config) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "[report.mqtt] password_file" in err
    assert str(missing) in err


def test_an_empty_password_file_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password = tmp_path / "password"
    password.write_text("\n")
    config = write_config(tmp_path, f'[report.mqtt]\npassword_file = "{password}"\n')
    assert run(config) == EXIT_CONFIG
    assert "first line is empty" in capsys.readouterr().err


def test_a_missing_client_certificate_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = make_ca(tmp_path / "pki")
    _, key = ca.issue("node-1")
    cert = tmp_path / "gone.crt"
    config = write_config(
        tmp_path,
        f'[report.mqtt]\nca_file = "{ca.cert}"\ncert_file = "{cert}"\nkey_file = "{key}"\n',
    )
    assert run(config) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "[report.mqtt] cert_file" in err
    assert str(cert) in err


def test_a_ca_file_that_is_no_certificate_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "ca.pem"
    garbage.write_text("hello\n")
    config = write_config(tmp_path, f'[report.mqtt]\nca_file = "{garbage}"\n')
    assert run(config) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "[report.mqtt] ca_file" in err
    assert str(garbage) in err


def test_a_certificate_without_its_key_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, '[report.mqtt]\ncert_file = "/etc/koordpy/node.crt"\n')
    assert run(config) == EXIT_CONFIG
    assert "cert_file and key_file must be given together" in capsys.readouterr().err


def test_a_node_name_that_is_no_topic_level_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "")
    assert cli.main(["agent", "run", "--config", str(config), "--node-name", "a/b"]) == EXIT_CONFIG
    assert "node name" in capsys.readouterr().err


def test_the_in_process_bus_is_refused_outside_koordpy_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, '[report]\ntransport = "bus"\n')
    assert run(config) == EXIT_CONFIG
    assert "koordpy up" in capsys.readouterr().err
