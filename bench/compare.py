"""Run benchmarks on an earlier revision and on the working tree back to back, and print both.

``python -m bench.compare REV [--bench NAME ...] [--rounds N] [--same-bench] [-- ARGS]`` checks
``REV`` out into a temporary git worktree (the generated gRPC modules copied over, as ``make
proto`` would make them), then runs each benchmark module (``bench.NAME``; default: every one)
there and here in turn, ``--rounds`` times, with the same arguments, under this interpreter.
Every line a run prints is kept; lines whose words agree (their numbers aside) are paired, and
each figure is printed old / new with the ratio new / old, so "within 10 % of before" is read
off one table from one machine in one sitting. Lines that differ are printed from both sides as
they came. ``--same-bench`` runs this tree's ``bench/`` against the old code as well, when a
benchmark's harness changed with the code (the measurement held equal, only the code measured
differs).

A benchmark's own targets are judged by the benchmark (its PASS/FAIL lines appear in both
columns); this script adds no target of its own. It exits 1 when a run failed.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["BENCHES", "main", "pair_lines"]

ROOT = Path(__file__).resolve().parent.parent
#: every benchmark module, in the order they run
BENCHES = ("store", "queueing", "scheduler", "descheduler", "ingest", "agent_qos", "agent_overhead")
#: generated at install time, not committed: what a worktree needs copied in to import
_GENERATED = ("controller/api/objects_pb2.py", "controller/api/objects_pb2_grpc.py")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?")


def _numbers(line: str) -> tuple[str, list[float]]:
    """``line`` with every number replaced by ``#``, and the numbers."""
    found = [float(m.group().replace(",", "")) for m in _NUMBER.finditer(line)]
    return _NUMBER.sub("#", line), found


def pair_lines(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """One printed line per output line: paired lines (same words) with each figure as
    ``old -> new (xR)``; the rest as ``old| ...`` / ``new| ...``."""
    out: list[str] = []
    width = max((len(line) for line in (*old, *new)), default=0)
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else ""
        b = new[i] if i < len(new) else ""
        shape_a, nums_a = _numbers(a)
        shape_b, nums_b = _numbers(b)
        if a == b:
            out.append(b)
        elif shape_a == shape_b and nums_a and len(nums_a) == len(nums_b):
            figures = ", ".join(
                f"{x:g} -> {y:g} ({y / x:.2f}x)" if x else f"{x:g} -> {y:g}"
                for x, y in zip(nums_a, nums_b, strict=True)
            )
            out.append(f"{b.ljust(width)}  | {figures}")
        else:
            if a:
                out.append(f"old| {a}")
            if b:
                out.append(f"new| {b}")
    return out


@contextlib.contextmanager
def _worktree(rev: str) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="koordpy-bench-"))
    tree = folder / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    try:
        for name in _GENERATED:
            source = ROOT / name
            if source.exists():
                shutil.copy2(source, tree / name)
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


def _run(tree: Path, bench: str, args: Sequence[str]) -> tuple[int, list[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{bench}", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode:
        lines += [f"(exit {done.returncode}) {line}" for line in done.stderr.splitlines()[-5:]]
    return done.returncode, lines, time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("rev", help="the earlier revision (a commit, tag or branch)")
    parser.add_argument(
        "--bench", action="append", choices=BENCHES, help="a benchmark (repeat; default: all)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="old/new pairs per benchmark")
    parser.add_argument(
        "--same-bench",
        action="store_true",
        help="run this tree's bench/ against the old code too (the harness held equal)",
    )
    given = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in given:  # what follows goes to every benchmark
        at = given.index("--")
        given, extra = given[:at], given[at + 1 :]
    options = parser.parse_args(given)
    if options.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {options.rounds}")
    failed = False
    with _worktree(options.rev) as old_tree:
        if options.same_bench:
            shutil.rmtree(old_tree / "bench")
            shutil.copytree(ROOT / "bench", old_tree / "bench")
        for bench in options.bench or BENCHES:
            for round_ in range(1, options.rounds + 1):
                code_old, old, took_old = _run(old_tree, bench, extra)
                code_new, new, took_new = _run(ROOT, bench, extra)
                failed = failed or bool(code_old or code_new)
                print(
                    f"== bench.{bench} round {round_}: old {options.rev} ({took_old:.0f} s)"
                    f" / new working tree ({took_new:.0f} s)"
                )
                for line in pair_lines(old, new):
                    print(line)
                print(flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
