"""Running ``koordpy`` daemons as real processes in tests."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BANNER = "(Ctrl-C stops)"


@dataclass
class Daemon:
    process: subprocess.Popen[str]
    api: str
    stdout: list[str] = field(default_factory=list)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 10.0) -> int:
        """Send ``sig`` and wait; the exit code (raises if it outlives ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)


def koordpy_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "koordpy", *args]


class LineReader:
    """Collects a process's stdout lines in a background thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self._stream = process.stdout
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, name="stdout-reader", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self._stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def wait_for(self, text: str, timeout: float) -> list[str]:
        """Lines up to and including the first containing ``text``."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if text in line:
                return seen
        raise AssertionError(f"{text!r} not printed within {timeout} s; stdout: {seen}")


@contextmanager
def running_up(
    state_dir: Path,
    *extra: str,
    api: str | None = None,
    token: str = "",
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> Iterator[Daemon]:
    """``koordpy up`` on a private socket and ephemeral metrics ports; stopped on exit."""
    api = api or f"unix://{state_dir / 'api.sock'}"
    command = koordpy_command(
        *(("--token", token) if token else ()),
        "up",
        "--state-dir",
        str(state_dir),
        "--api",
        api,
        "--metrics-address",
        "127.0.0.1:0",
        "--agent-metrics-address",
        "127.0.0.1:0",
        "--node-name",
        "test-host",
        *extra,
    )
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    daemon = Daemon(process=process, api=api)
    try:
        daemon.stdout = LineReader(process).wait_for(BANNER, timeout)
        yield daemon
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def cli(api: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one ``koordpy`` client verb against ``api``."""
    return subprocess.run(
        koordpy_command("--api", api, *args),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def table_rows(output: str) -> list[dict[str, str]]:
    """Parse a kubectl-style table into dicts keyed by header."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]


def names(rows: Sequence[dict[str, str]]) -> list[str]:
    return [row["NAME"] for row in rows]
