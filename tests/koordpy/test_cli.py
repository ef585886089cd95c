"""The argument tree: verbs, global options before or after the verb, environment defaults."""

from __future__ import annotations

import subprocess
import sys

import pytest

from koordpy import cli


def test_every_verb_has_a_handler() -> None:
    import importlib

    for verb, target in cli.COMMANDS.items():
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), verb


@pytest.mark.parametrize(
    "argv",
    [
        ["--api", "unix:///tmp/a.sock", "get", "pods"],
        ["get", "pods", "--api", "unix:///tmp/a.sock"],
    ],
)
def test_api_before_or_after_the_verb(argv: list[str]) -> None:
    args = cli.build_parser().parse_args(argv)
    assert args.api == "unix:///tmp/a.sock"
    assert args.kind == "pods"


def test_namespace_and_all_namespaces_exclude_each_other() -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["get", "pods", "-n", "a", "-A"])


def test_version_and_help_run_as_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "koordpy", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("koordpy ")


def test_client_verbs_report_an_unreachable_api(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "koordpy", "--api", "unix:///nonexistent/k.sock", "get", "nodes"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode != 0
    assert "unix:///nonexistent/k.sock" in result.stderr
