"""Strict TOML config: unknown keys and bad values are named; bad config exits 2."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from agent import config as agent_config
from agent import errors as agent_errors
from koordpy import cli
from runtime import configfile, lifecycle


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_file_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[agent]\nnode_name = "gpu-1"\n[report]\ninterval = 5\n'
        '[devices]\nsimulate = ["nvidia-h100"]\n[host]\nroot = "/host"\n',
    )
    cfg = configfile.load_config(path, agent_config.AgentConfig)
    assert cfg.agent.node_name == "gpu-1"
    assert cfg.report.interval == 5.0
    assert cfg.devices.simulate == ("nvidia-h100",)
    assert cfg.host.path("/proc/meminfo") == Path("/host/proc/meminfo")
    assert cfg.cgroup.root == "/sys/fs/cgroup"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[agent]\nfoo = 1\n", "unknown key 'foo' in [agent]"),
        ("bogus = true\n", "unknown key 'bogus' at the top level"),
        ("[reports]\ninterval = 1\n", "unknown key 'reports' at the top level"),
        ("[cgroup]\nkubepod_parent = 'x'\n", "unknown key 'kubepod_parent' in [cgroup]"),
    ],
)
def test_unknown_keys_are_named_with_their_table(text: str, message: str) -> None:
    with pytest.raises(configfile.ConfigError) as caught:
        configfile.parse_config(text, agent_config.AgentConfig, source="agent.toml")
    assert str(caught.value) == f"agent.toml: {message}"


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("[report]\ninterval = 'soon'\n", ("'interval' in [report]", "'soon'")),
        ("[report]\ninterval = -1\n", ("'interval' in [report]", "-1")),
        ("[report]\ntransport = 'pigeon'\n", ("'transport' in [report]", "'pigeon'")),
        ("[devices]\nsimulate = 'nvidia-h100'\n", ("'simulate' in [devices]", "nvidia-h100")),
    ],
)
def test_bad_values_name_the_key_and_the_value(text: str, parts: tuple[str, ...]) -> None:
    with pytest.raises(configfile.ConfigError) as caught:
        configfile.parse_config(text, agent_config.AgentConfig)
    for part in parts:
        assert part in str(caught.value)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent\n")
    with pytest.raises(configfile.ConfigError, match=r"agent\.toml: invalid TOML"):
        configfile.load_config(path, agent_config.AgentConfig)


def test_a_missing_default_path_means_defaults(tmp_path: Path) -> None:
    cfg = configfile.load_config(None, agent_config.AgentConfig, default=tmp_path / "absent.toml")
    assert cfg == agent_config.AgentConfig()


def test_a_missing_explicit_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(configfile.ConfigError, match="not found"):
        configfile.load_config(tmp_path / "absent.toml", agent_config.AgentConfig)


def test_agent_config_errors_are_fatal_agent_errors(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent]\nfoo = 1\n")
    with pytest.raises(agent_errors.ConfigError) as caught:
        agent_config.load(path)
    assert isinstance(caught.value, lifecycle.Fatal)
    assert isinstance(caught.value, configfile.ConfigError)


def test_exit_on_error_prints_and_returns_2() -> None:
    stream = io.StringIO()
    code = configfile.exit_on_error(configfile.ConfigError("x.toml: bad"), stream=stream)
    assert code == configfile.EXIT_CONFIG == 2
    assert stream.getvalue() == "koordpy: config error: x.toml: bad\n"


def test_the_cli_exits_2_naming_the_unknown_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "[agent]\nnodename = 'typo'\n")
    assert cli.main(["agent", "devices", "--config", str(path)]) == 2
    assert "unknown key 'nodename' in [agent]" in capsys.readouterr().err


def test_a_bad_list_item_is_named_with_its_index() -> None:
    with pytest.raises(configfile.ConfigError) as caught:
        configfile.parse_config("[devices]\nsimulate = [1]\n", agent_config.AgentConfig)
    assert "key 'simulate[0]' in [devices]: expected str, got int (value 1)" in str(caught.value)
