"""Logging setup: JSON lines for machines, plain text on a terminal."""

from __future__ import annotations

import io
import json
import logging

import pytest

from runtime import logs


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_json_lines_carry_the_fields_and_extras() -> None:
    stream = io.StringIO()
    logs.setup_logging("info", json=True, stream=stream)
    logging.getLogger("agent.daemon").info(
        "node %s online", "gpu-1", extra={"node": "gpu-1", "devices": 8}
    )
    entry = json.loads(stream.getvalue().strip())
    assert entry["level"] == "info"
    assert entry["logger"] == "agent.daemon"
    assert entry["message"] == "node gpu-1 online"
    assert entry["node"] == "gpu-1"
    assert entry["devices"] == 8
    assert entry["time"].endswith("+00:00")


def test_json_lines_include_the_traceback() -> None:
    stream = io.StringIO()
    logs.setup_logging(logging.INFO, json=True, stream=stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("it failed")
    entry = json.loads(stream.getvalue().strip())
    assert entry["level"] == "error"
    assert "ValueError: boom" in entry["exception"]


def test_json_is_the_default_when_not_on_a_terminal() -> None:
    stream = io.StringIO()
    logs.setup_logging("info", stream=stream)
    logging.getLogger("x").warning("hello")
    assert json.loads(stream.getvalue())["message"] == "hello"


def test_plain_text_on_a_terminal_with_extras() -> None:
    stream = Terminal()
    logs.setup_logging("debug", stream=stream)
    logging.getLogger("agent.cgroups").debug("wrote %s", "cpu.shares", extra={"cgroup": "kubepods"})
    line = stream.getvalue().strip()
    assert "DEBUG" in line
    assert "agent.cgroups: wrote cpu.shares cgroup=kubepods" in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_level_filters_and_a_second_setup_replaces_the_first() -> None:
    first, second = io.StringIO(), io.StringIO()
    logs.setup_logging("warning", json=True, stream=first)
    logs.setup_logging("warning", json=True, stream=second)
    logging.getLogger("x").info("quiet")
    logging.getLogger("x").error("loud")
    assert first.getvalue() == ""
    assert [json.loads(line)["message"] for line in second.getvalue().splitlines()] == ["loud"]


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="verbose"):
        logs.setup_logging("verbose")
