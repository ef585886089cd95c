"""Runs vendor command-line tools (``mx-smi``, ``npu-smi``) without blocking the event loop.

Each command is an asyncio subprocess in its own session, so that a hung tool and anything
it started can be killed as a group when the timeout expires. Failures are translated here:

* the program is not on ``PATH`` (or not executable) -> :class:`agent.errors.Unsupported`;
* it exits non-zero -> :class:`agent.errors.TransientError` naming the command, the exit
  status and the first line it printed on stderr (else stdout: ``npu-smi`` prints its errors
  there);
* it outlives its timeout -> it is killed and :class:`agent.errors.TransientError` is raised.

Parsers of what the tools print raise :class:`UnexpectedOutput` for text they cannot read at
all; the probes catch it, log it and report no device of that kind. :class:`Complaints` keeps
a probe that runs every few seconds from repeating the same warning on every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
from collections.abc import Mapping, Sequence
from typing import Final

from agent.errors import TransientError, Unsupported

__all__ = ["Complaints", "UnexpectedOutput", "run_command"]

_log = logging.getLogger(__name__)

#: Seconds to wait for a killed command to be reaped and its pipes to close.
_REAP_SECONDS: Final = 5.0


class UnexpectedOutput(ValueError):  # noqa: N818 - names the condition
    """A vendor tool printed something its parser cannot read."""


class Complaints:
    """Warnings about what a vendor tool said, each logged once while it lasts.

    A lasting problem (an unknown model, a sick chip, a failing command) is a warning in the
    probe run where it appears and a debug line in the runs after. :meth:`settle` ends a run:
    a problem that was not raised again is forgotten, so if it comes back it is a warning again.
    """

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._before: set[str] = set()
        self._now: set[str] = set()

    def warn(self, message: str, *args: object) -> None:
        text = message % args if args else message
        self._now.add(text)
        level = logging.DEBUG if text in self._before else logging.WARNING
        self._logger.log(level, message, *args, stacklevel=2)

    def settle(self) -> None:
        """End a probe run."""
        self._before, self._now = self._now, set()


def _first_line(data: bytes) -> str:
    for line in data.decode("utf-8", errors="replace").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the command and everything in its session (it leads its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


async def _reap(process: asyncio.subprocess.Process) -> None:
    """Collect a killed command: drain its pipes and wait for its exit status."""
    try:
        async with asyncio.timeout(_REAP_SECONDS):
            await process.communicate()
    except TimeoutError:
        _log.warning("process %s did not exit %gs after SIGKILL", process.pid, _REAP_SECONDS)


async def run_command(
    argv: Sequence[str],
    *,
    timeout: float,  # noqa: ASYNC109 - the command, not the caller, is what times out (killed)
    env: Mapping[str, str] | None = None,
) -> str:
    """Run ``argv`` (the program looked up on ``PATH``) and return what it printed on stdout.

    ``env`` replaces the environment of the command; ``None`` passes the agent's own.
    """
    if not argv:
        raise ValueError("run_command needs a program to run")
    command = shlex.join(argv)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except FileNotFoundError as err:
        raise Unsupported(f"{argv[0]} not found on PATH (wanted for `{command}`)") from err
    except PermissionError as err:
        raise Unsupported(f"{argv[0]} cannot be executed (`{command}`): {err}") from err
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        _kill_group(process)
        await _reap(process)
        raise TransientError(f"`{command}` timed out after {timeout:g}s and was killed") from None
    except asyncio.CancelledError:
        # The caller gave up (its own timeout, shutdown): the command must not outlive it.
        _kill_group(process)
        await _reap(process)
        raise
    if process.returncode != 0:
        detail = _first_line(stderr) or _first_line(stdout) or "no output"
        raise TransientError(f"`{command}` exited with status {process.returncode}: {detail}")
    return stdout.decode("utf-8", errors="replace")
