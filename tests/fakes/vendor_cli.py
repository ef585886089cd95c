"""Stub vendor command-line tools (``mx-smi``, ``npu-smi``) on ``PATH``.

``VendorCli(tmp_path, monkeypatch)`` puts an empty directory first on ``PATH``; ``reply()``
then writes an executable stub for a program that answers each argument list with a recorded
output (a file of ``tests/data/vendor-cli``), an exit status and optionally a stderr line, or
hangs. Argument lists nobody declared get a usage error (exit 2), as the real tools do. Each
run is appended to ``calls`` so tests can see what a probe asked for.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

__all__ = ["DATA", "VendorCli"]

#: The recorded outputs.
DATA = Path(__file__).resolve().parents[1] / "data" / "vendor-cli"

_STUB = """\
#!{python}
import json, os, sys, time
table = json.load(open({table!r}, encoding="utf-8"))
key = " ".join(sys.argv[1:])
with open({calls!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps([os.path.basename(sys.argv[0]), key, os.getpid()]) + "\\n")
answer = table.get(key)
if answer is None:
    sys.stderr.write("Usage: %s <command> [options]\\n" % os.path.basename(sys.argv[0]))
    sys.exit(2)
if answer["hang"]:
    time.sleep(3600)
if answer["stdout"] is not None:
    with open(answer["stdout"], "rb") as recorded:
        sys.stdout.buffer.write(recorded.read())
    sys.stdout.flush()
sys.stderr.write(answer["stderr"])
sys.exit(answer["code"])
"""


class VendorCli:
    """Stub programs in ``tmp_path/bin``, first on ``PATH`` for the test."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir(exist_ok=True)
        self._calls = tmp_path / "vendor-cli-calls.jsonl"
        self._tables: dict[str, dict[str, dict[str, object]]] = {}
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}")

    def reply(
        self,
        command: str,
        output: str | Path | None = None,
        *,
        code: int = 0,
        stderr: str = "",
        hang: bool = False,
    ) -> None:
        """Make ``command`` (``"npu-smi info -t board -i 0"``) print ``output`` (a path, or a
        file name under ``tests/data/vendor-cli``) and exit with ``code``; ``hang`` makes it
        sleep until killed."""
        program, *args = shlex.split(command)
        path = None
        if output is not None:
            path = Path(output) if Path(output).is_absolute() else DATA / output
            if not path.is_file():
                raise FileNotFoundError(path)
        table = self._tables.setdefault(program, {})
        table[" ".join(args)] = {
            "stdout": None if path is None else str(path),
            "code": code,
            "stderr": stderr + ("\n" if stderr and not stderr.endswith("\n") else ""),
            "hang": hang,
        }
        table_file = self.bin / f".{program}.json"
        table_file.write_text(json.dumps(table), encoding="utf-8")
        stub = self.bin / program
        stub.write_text(
            _STUB.format(python=sys.executable, table=str(table_file), calls=str(self._calls)),
            encoding="utf-8",
        )
        stub.chmod(0o755)

    def write(self, name: str, text: str) -> Path:
        """Write an edited output (``text``) next to the stubs, for ``reply()``."""
        path = self.bin / f".{name}"
        path.write_text(text, encoding="utf-8")
        return path

    @property
    def calls(self) -> list[tuple[str, str]]:
        """``(program, arguments)`` of every run so far, in order."""
        if not self._calls.exists():
            return []
        runs = [json.loads(line) for line in self._calls.read_text(encoding="utf-8").splitlines()]
        return [(program, args) for program, args, _ in runs]

    @property
    def pids(self) -> list[int]:
        """Process IDs of every run so far."""
        if not self._calls.exists():
            return []
        lines = self._calls.read_text(encoding="utf-8").splitlines()
        return [json.loads(line)[2] for line in lines]

    @staticmethod
    def read(name: str) -> str:
        """A recorded output as text (``"ascend/910b3-npu-smi-info.txt"``)."""
        return (DATA / name).read_text(encoding="utf-8")
