"""``python -m bench.agent_overhead``: the agent's CPU and memory beside the node exporter's.

What is measured. The cgroup v1 host tree of :mod:`bench.agent_qos` (150 pods, 500 containers,
``/proc/stat`` and the cpuacct counters advancing every second) is built in a temporary
directory, and two processes run side by side:

* the agent, ``python -m koordpy agent run`` with ``[host] root`` and ``[cgroup] root`` on that
  tree, its pods from a file (``[pods] source = "file"``), nothing reported
  (``[report] transport = "none"``), metrics on a free port: collection every second, the QoS
  loop every second, NodeMetric every ``report_interval``;
* ``prometheus-node-exporter`` (the Debian package) on a free port, its default collectors.

Once both answer (and the agent's endpoint has its pods), each is scraped every ``--interval``
seconds for ``--duration`` seconds by this process, one HTTP GET each. Printed for both: CPU
seconds over the window (user + system, psutil), the share of one core, peak RSS (``VmHWM``),
CPU per scrape (the process's on-CPU time, every thread, from ``/proc/<pid>/task/*/schedstat``
just before and after each GET: nanosecond resolution; median of the scrapes) and the size of
a scrape; and the agent / node exporter ratios.

Targets (issue 5): agent RSS <= 80 MiB, agent CPU <= 2 % of one core, CPU per scrape no more
than the node exporter's. koordlet's published figure, for scale: 0.5 core and 341 MiB at
150 containers.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import psutil

from apis.codec import encode_json
from bench.agent_qos import Host, _pods
from bench.ports import free_port as _free_port

__all__ = ["main"]

MIB = 1 << 20
RSS_TARGET_MIB = 80.0
CPU_TARGET = 0.02
NODE = "bench"


def _on_cpu_ns(pid: int) -> int:
    """On-CPU time of every thread of ``pid``, nanoseconds (threads that ended are lost: a
    scrape's handler thread is kept alive by the keep-alive connection)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[0])
    return total


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return psutil.Process(pid).memory_info().rss


@dataclass
class Target:
    """One scraped process."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    scrape_cpu_ns: list[int] = field(default_factory=list)
    scrape_bytes: list[int] = field(default_factory=list)
    series: int = 0
    _connection: http.client.HTTPConnection | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def get(self) -> bytes:
        """One GET of /metrics over a kept-alive connection (reopened when closed)."""
        for attempt in (1, 2):
            if self._connection is None:
                self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            try:
                self._connection.request("GET", "/metrics")
                response = self._connection.getresponse()
                body = response.read()
                if response.status != 200:
                    raise RuntimeError(f"{self.name}: /metrics answered {response.status}")
                if response.will_close:
                    self.close()
                return body
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def scrape(self) -> None:
        before = _on_cpu_ns(self.pid)
        body = self.get()
        self.scrape_cpu_ns.append(max(0, _on_cpu_ns(self.pid) - before))
        self.scrape_bytes.append(len(body))
        self.series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.pid).cpu_times()
        return float(times.user + times.system)


def _wait_for(target: Target, needle: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if target.process.poll() is not None:
            raise RuntimeError(f"{target.name} exited with {target.process.returncode}")
        try:
            if needle in target.get():
                return
            last = f"no {needle.decode()} yet"
        except (OSError, http.client.HTTPException, RuntimeError) as err:
            last = str(err)
        time.sleep(0.5)
    raise RuntimeError(f"{target.name} not ready after {timeout:.0f} s: {last}")


@contextlib.contextmanager
def _started(name: str, command: Sequence[str], port: int, log: Path) -> Iterator[Target]:
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        target = Target(name, process, port)
        try:
            yield target
        finally:
            target.close()
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


class _Advancer:
    """Advances the fake tree's CPU counters every second (in this process, not measured)."""

    def __init__(self, host: Host) -> None:
        self._host = host
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="advance", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._host.advance(1.0)

    def __enter__(self) -> _Advancer:
        self._host.advance(1.0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _write_config(base: Path, host: Host, port: int, report_interval: float) -> Path:
    pods = _pods()
    items = [msgspec.json.decode(encode_json(pod)) for pod in pods]
    pods_file = base / "pods.json"
    pods_file.write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": items}))
    config = base / "agent.toml"
    config.write_text(
        f'[host]\nroot = "{host.root}"\n'
        f'[cgroup]\nroot = "{host.cgroups}"\n'
        f'[pods]\nsource = "file"\nfile = "{pods_file}"\n'
        '[report]\ntransport = "none"\n'
        f'[metrics]\naddress = "127.0.0.1:{port}"\nreport_interval = {report_interval}\n',
        encoding="utf-8",
    )
    return config


@dataclass(frozen=True)
class Figures:
    cpu_seconds: float
    share: float
    peak_rss: int
    per_scrape_ms: float
    per_scrape_mean_ms: float
    scrape_kib: float
    series: int


def _measure(targets: Sequence[Target], duration: float, interval: float) -> list[Figures]:
    start_cpu = [t.cpu_seconds() for t in targets]
    started = time.monotonic()
    next_scrape = started
    while True:
        now = time.monotonic()
        if now - started >= duration:
            break
        if now >= next_scrape:
            for target in targets:
                target.scrape()
            next_scrape += interval
        time.sleep(max(0.0, min(next_scrape, started + duration) - time.monotonic()))
    elapsed = time.monotonic() - started
    figures = []
    for target, before in zip(targets, start_cpu, strict=True):
        cpu = target.cpu_seconds() - before
        figures.append(
            Figures(
                cpu_seconds=cpu,
                share=cpu / elapsed,
                peak_rss=_peak_rss(target.pid),
                per_scrape_ms=statistics.median(target.scrape_cpu_ns) / 1e6,
                per_scrape_mean_ms=statistics.fmean(target.scrape_cpu_ns) / 1e6,
                scrape_kib=statistics.fmean(target.scrape_bytes) / 1024,
                series=target.series,
            )
        )
    return figures


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_overhead", description=__doc__)
    parser.add_argument("--duration", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between scrapes")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after both are ready")
    parser.add_argument(
        "--report-interval", type=float, default=60.0, help="the agent's NodeMetric interval"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    exporter = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exporter is None:
        print("prometheus-node-exporter is not installed (Debian package)", file=sys.stderr)
        return 2
    pods = _pods()
    containers = sum(len(p.spec.containers) for p in pods)
    with tempfile.TemporaryDirectory(prefix="koordpy-overhead-") as tmp:
        base = Path(tmp)
        host = Host(base, pods)
        agent_port, exporter_port = _free_port(), _free_port()
        config = _write_config(base, host, agent_port, args.report_interval)
        agent_command = [
            sys.executable,
            "-m",
            "koordpy",
            "agent",
            "run",
            "--config",
            str(config),
            "--node-name",
            NODE,
        ]
        exporter_command = [exporter, f"--web.listen-address=127.0.0.1:{exporter_port}"]
        with (
            _Advancer(host),
            _started("agent", agent_command, agent_port, base / "agent.log") as agent,
            _started("node_exporter", exporter_command, exporter_port, base / "ne.log") as ne,
        ):
            try:
                _wait_for(agent, b"koordlet_container_used_cpu_cores{", 120)
                _wait_for(ne, b"node_cpu_seconds_total", 60)
            except RuntimeError:
                print((base / "agent.log").read_text(errors="replace")[-4000:], file=sys.stderr)
                raise
            time.sleep(args.warmup)
            mine, theirs = _measure([agent, ne], args.duration, args.interval)
            scrapes = len(agent.scrape_cpu_ns)
    print(
        f"agent overhead: {len(pods)} pods, {containers} containers on a fake cgroup v1 tree;"
        f" both scraped every {args.interval:.0f} s for {args.duration:.0f} s ({scrapes} scrapes)"
    )
    rows = [
        ("CPU seconds", f"{mine.cpu_seconds:.3f}", f"{theirs.cpu_seconds:.3f}",
         _ratio(mine.cpu_seconds, theirs.cpu_seconds)),
        ("CPU, % of one core", f"{100 * mine.share:.2f}", f"{100 * theirs.share:.2f}",
         _ratio(mine.share, theirs.share)),
        ("peak RSS, MiB", f"{mine.peak_rss / MIB:.1f}", f"{theirs.peak_rss / MIB:.1f}",
         _ratio(mine.peak_rss, theirs.peak_rss)),
        ("CPU per scrape, ms (median)", f"{mine.per_scrape_ms:.2f}", f"{theirs.per_scrape_ms:.2f}",
         _ratio(mine.per_scrape_ms, theirs.per_scrape_ms)),
        ("CPU per scrape, ms (mean)", f"{mine.per_scrape_mean_ms:.2f}",
         f"{theirs.per_scrape_mean_ms:.2f}",
         _ratio(mine.per_scrape_mean_ms, theirs.per_scrape_mean_ms)),
        ("scrape size, KiB", f"{mine.scrape_kib:.0f}", f"{theirs.scrape_kib:.0f}",
         _ratio(mine.scrape_kib, theirs.scrape_kib)),
        ("series per scrape", str(mine.series), str(theirs.series),
         _ratio(mine.series, theirs.series)),
    ]  # fmt: skip
    print(f"  {'':28} {'agent':>10} {'node_exporter':>14} {'agent/ne':>9}")
    for label, a, b, ratio in rows:
        print(f"  {label:28} {a:>10} {b:>14} {ratio:>9}")
    ok_rss = mine.peak_rss / MIB <= RSS_TARGET_MIB
    ok_cpu = mine.share <= CPU_TARGET
    ok_scrape = mine.per_scrape_ms <= theirs.per_scrape_ms
    verdict = {True: "PASS", False: "FAIL"}
    print(f"target: agent peak RSS <= {RSS_TARGET_MIB:.0f} MiB: {verdict[ok_rss]}")
    print(f"target: agent CPU <= {100 * CPU_TARGET:.0f} % of one core: {verdict[ok_cpu]}")
    print(f"target: agent CPU per scrape <= node_exporter's: {verdict[ok_scrape]}")
    print("koordlet's published figure: 0.5 core and 341 MiB at 150 containers")
    return 1 if args.check and not (ok_rss and ok_cpu and ok_scrape) else 0


if __name__ == "__main__":
    sys.exit(main())
