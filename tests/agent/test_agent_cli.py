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


def test_pods_from_the_api_server_need_the_kubernetes_transport(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, '[pods]\nsource = "apiserver"\n')
    assert run(config) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "[pods] source = 'apiserver'" in err
    assert "transport = 'kubernetes'" in err


def test_a_missing_kubeconfig_is_a_config_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-kubeconfig"
    config = write_config(tmp_path, "")
    assert run(config, "--kubeconfig", str(missing)) == EXIT_CONFIG
    assert str(missing) in capsys.readouterr().err


def test_kubernetes_mode_outside_a_pod_without_a_kubeconfig_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = write_config(tmp_path, '[report]\ntransport = "kubernetes"\n')
    assert run(config) == EXIT_CONFIG
    assert "not running in a Kubernetes pod" in capsys.readouterr().err


def test_a_kubernetes_rate_limit_of_zero_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, '[report]\ntransport = "kubernetes"\n[kubernetes]\nqps = 0\n')
    assert run(config) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "key 'qps' in [kubernetes]" in err
    assert "(value 0)" in err
