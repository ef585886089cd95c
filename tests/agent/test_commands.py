"""The vendor-CLI runner against stub programs on PATH: output, missing tools, failures, hangs."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from agent.devices import commands
from agent.errors import TransientError, Unsupported
from tests.fakes.vendor_cli import VendorCli


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VendorCli:
    return VendorCli(tmp_path, monkeypatch)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_returns_what_the_command_printed(cli: VendorCli) -> None:
    cli.reply("mx-smi", "metax/c500-mx-smi-2.3.1-1gpu.txt")
    text = await commands.run_command(["mx-smi"], timeout=30)
    assert text == cli.read("metax/c500-mx-smi-2.3.1-1gpu.txt")
    assert cli.calls == [("mx-smi", "")]


async def test_arguments_reach_the_command(cli: VendorCli) -> None:
    cli.reply("npu-smi info -t board -i 0", "ascend/910a-npu-smi-info-i0-t-board.txt")
    text = await commands.run_command(["npu-smi", "info", "-t", "board", "-i", "0"], timeout=30)
    assert "PCI Device ID                  : 0xD801" in text
    assert cli.calls == [("npu-smi", "info -t board -i 0")]


async def test_a_missing_program_is_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(Unsupported, match=r"npu-smi not found on PATH \(wanted for `npu-smi info`"):
        await commands.run_command(["npu-smi", "info"], timeout=30)


async def test_env_replaces_the_environment_of_the_command(cli: VendorCli, tmp_path: Path) -> None:
    cli.reply("mx-smi", "metax/c500-mx-smi-2.3.1-1gpu.txt")
    assert await commands.run_command(["mx-smi"], timeout=30)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Unsupported, match="mx-smi not found"):
        await commands.run_command(["mx-smi"], timeout=30, env={"PATH": str(empty)})


async def test_a_non_zero_exit_names_the_command_and_the_first_stderr_line(
    cli: VendorCli,
) -> None:
    cli.reply("npu-smi info -t board -i 9", code=255, stderr="Error parameter of -i\nmore\n")
    with pytest.raises(TransientError) as caught:
        await commands.run_command(["npu-smi", "info", "-t", "board", "-i", "9"], timeout=30)
    assert str(caught.value) == (
        "`npu-smi info -t board -i 9` exited with status 255: Error parameter of -i"
    )


async def test_without_stderr_the_error_quotes_stdout(cli: VendorCli) -> None:
    # npu-smi prints its errors on stdout (recorded: an invalid card id).
    cli.reply(
        "npu-smi info -i 0 -t board",
        "ascend/910a-npu-smi-info-i0-t-board-error-invalid-card.txt",
        code=1,
    )
    with pytest.raises(TransientError, match=r"exited with status 1: Invalid card id\.$"):
        await commands.run_command(["npu-smi", "info", "-i", "0", "-t", "board"], timeout=30)


async def test_an_unknown_subcommand_fails_like_the_real_tool(cli: VendorCli) -> None:
    cli.reply("mx-smi", "metax/c500-mx-smi-2.3.1-1gpu.txt")
    with pytest.raises(TransientError, match=r"`mx-smi --bogus` exited with status 2: Usage"):
        await commands.run_command(["mx-smi", "--bogus"], timeout=30)


async def test_a_hanging_command_is_killed_at_its_timeout(cli: VendorCli) -> None:
    cli.reply("npu-smi info", hang=True)
    with pytest.raises(TransientError, match=r"`npu-smi info` timed out after 0\.5s"):
        await commands.run_command(["npu-smi", "info"], timeout=0.5)
    (pid,) = cli.pids
    assert not alive(pid)


async def test_a_cancelled_caller_takes_the_command_down_with_it(cli: VendorCli) -> None:
    cli.reply("npu-smi info", hang=True)
    running = asyncio.create_task(commands.run_command(["npu-smi", "info"], timeout=60))
    for _ in range(3000):  # until the stub has started (it logs its pid first)
        if cli.pids:
            break
        await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    (pid,) = cli.pids
    assert not alive(pid)


async def test_an_empty_argv_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="needs a program"):
        await commands.run_command([], timeout=1)


def test_complaints_are_warnings_once_while_they_last(caplog: pytest.LogCaptureFixture) -> None:
    complaints = commands.Complaints(logging.getLogger("tests.complaints"))
    with caplog.at_level(logging.DEBUG, logger="tests.complaints"):
        for _ in range(3):  # three probe runs with the same problem
            complaints.warn("NPU %d chip %d has an unknown model %r", 2, 0, "910X9")
            complaints.settle()
        complaints.settle()  # a run without it: forgotten
        complaints.warn("NPU %d chip %d has an unknown model %r", 2, 0, "910X9")
    levels = [record.levelno for record in caplog.records]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG, logging.WARNING]
    assert caplog.records[0].getMessage() == "NPU 2 chip 0 has an unknown model '910X9'"
