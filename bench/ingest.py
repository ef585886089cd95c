"""``python -m bench.ingest``: agents' reports through mosquitto into the controller, per second.

What is measured. A real mosquitto broker (plain listener on a free local port, no auth) and
the real controller, ``python -m koordpy controller run`` with ``[ingest] transport = "mqtt"``,
a state directory in a temporary folder (SQLite WAL, ``synchronous=NORMAL``), its API on a
private unix socket and its metrics on a free port, run as their own processes. A load
generator process simulates ``--nodes`` agents over ``--connections`` MQTT connections: each
node first publishes its retained ``status`` (online), then every ``interval`` seconds its
Node, Device (eight simulated H100s) and NodeMetric (``--pods`` pods), as the agent builds them
with the ``apis`` Structs, each with a fresh timestamp (Ready heartbeat,
``koordpy.io/reported-at``, ``status.updateTime``), QoS 1, retained, spread evenly over the
interval. As with real agents, Node and Device change only in their timestamp from one report
to the next, while the NodeMetric's usage figures change every time (they differ per node and
per report).

Phases: one round that creates every object (reported, not judged), then ``--duration``
seconds at the agents' 10 s interval (1,500 reports/s for 5,000 nodes), then as long at the
interval that offers the target rate (7.5 s: 2,000 reports/s, judged against the target: met
when it processes what is offered, 1 % slack for the phase's edges, at <= 50 % of a core),
then as long at 5 s (3,000 reports/s offered, above the target). For each phase: reports offered per
second (acknowledged by the broker), reports the controller processed per second (from its
``koordpy_ingest_messages_total``: every result but ``superseded``), of which applied, the
reports superseded per second (a controller behind takes each node's newest report and counts
the older ones it skipped: they are not counted as processed), the controller's CPU (user +
system of its process, % of one core, from psutil) and the CPU per processed report.

The controller runs with its default ``[store] report_write_interval`` (60 s: a change that only
brings an agent's newer report, a heartbeat or a NodeMetric status, reaches the state file at
most that much later; see :mod:`controller.store.sqlite`); ``--report-write-interval 0``
writes every report to SQLite as it is applied.

Target (issue 5): >= 2,000 reports/s processed at <= 50 % of one core; the ratios printed
are measured / target for the rate and target / measured for the CPU (both >= 1 = met).
``--profile FILE`` runs the controller under cProfile and prints where its time went.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import multiprocessing
import multiprocessing.queues
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import psutil
from prometheus_client.parser import text_string_to_metric_families

from agent.devices import base, simulated
from agent.node import HostFacts, build_node
from agent.report.bus import status_body
from apis.codec import encode_json
from apis.core import Node
from apis.duration import Duration
from apis.meta import REPORTED_AT_ANNOTATION, ObjectMeta
from apis.resources import ResourceList
from apis.slo import (
    AggregatedUsage,
    NodeMetric,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)
from bench.ports import free_port
from controller.config import StoreSection
from runtime.bus import node_topic

__all__ = ["main"]

TARGET_REPORTS_PER_SECOND = 2_000
TARGET_CPU_SHARE = 0.50
MOSQUITTO = "/usr/sbin/mosquitto"
#: Leaves a node reports every interval (``status`` is published once, at the start).
REPORT_LEAVES = ("node", "device", "nodemetric")

GIB = 1 << 30
#: Stamped into the encoded bodies and replaced by the current time at each publication.
_STAMP_TIME = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC)
_STAMP = b"2001-02-03T04:05:06Z"
#: When the simulated agents came up (their Ready condition's transition time).
_BOOTED = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
_FACTS = HostFacts(
    hostname="gpu-node",
    cpus=96,
    memory=768 * GIB,
    ephemeral_storage=2000 * GIB,
    kernel="6.1.0-18-amd64",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
    internal_ips=("10.0.0.1",),
)


# --- the fleet's bodies ------------------------------------------------------------------------


def _usage(cpu: int, memory: int) -> ResourceMap:
    return ResourceMap(resources=ResourceList({"cpu": cpu, "memory": memory}))


def node_metric(name: str, pods: int, seed: int) -> NodeMetric:
    """A NodeMetric as the agent reports it: node usage, aggregates and ``pods`` pods, with
    figures that differ from node to node and from one ``seed`` (report) to the next."""
    windows = [Duration(minutes * 60 * 10**9) for minutes in (5, 10, 30)]

    def figure(i: int, span: int) -> int:
        return (seed * 7919 + i * 104_729) % span

    aggregated = tuple(
        AggregatedUsage(
            usage={
                stat: _usage(20_000 + figure(w * 5 + i, 9_000), 200 * GIB + figure(i, GIB))
                for i, stat in enumerate(("avg", "p50", "p90", "p95", "p99"))
            },
            duration=window,
        )
        for w, window in enumerate(windows)
    )
    return NodeMetric(
        metadata=ObjectMeta(name=name),
        status=NodeMetricStatus(
            update_time=_STAMP_TIME,
            node_metric=NodeMetricInfo(
                node_usage=_usage(31_250 + figure(1, 5_000), 301 * GIB + figure(2, GIB)),
                aggregated_node_usages=aggregated,
                system_usage=_usage(1_250 + figure(3, 500), 9 * GIB + figure(4, GIB)),
            ),
            pods_metric=tuple(
                PodMetricInfo(
                    name=f"job-{i:03d}-worker",
                    namespace="training" if i % 2 else "serving",
                    pod_usage=_usage(500 + figure(10 + i, 4_000), 2 * GIB + figure(40 + i, GIB)),
                    priority="koord-prod" if i % 3 else "koord-batch",
                    qos="LS" if i % 3 else "BE",
                )
                for i in range(pods)
            ),
        ),
    )


#: NodeMetric bodies per node, used in turn (usage changes from one report to the next).
METRIC_VARIANTS = 3


def fleet(nodes: int, pods: int) -> list[tuple[str, list[tuple[str, list[bytes]]]]]:
    """Per node: its name and, per report leaf, the topic and the bodies to publish in turn
    (each with the time stamp to replace)."""
    stamp = encode_json({"t": _STAMP_TIME})
    if _STAMP not in stamp:
        raise RuntimeError(f"timestamps do not encode as expected: {stamp!r}")
    result = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        facts = dataclasses.replace(_FACTS, hostname=name, machine_id=f"{n:032x}")
        node = build_node(name, facts, heartbeat=_STAMP_TIME, ready_since=_BOOTED)
        probe = simulated.simulate((simulated.PROFILES["nvidia-h100"],), name)
        device = base.build_device(Node(metadata=ObjectMeta(name=name)), [probe])
        device = msgspec.structs.replace(
            device,
            metadata=msgspec.structs.replace(
                device.metadata, annotations={REPORTED_AT_ANNOTATION: _STAMP.decode()}
            ),
        )
        metrics = [
            encode_json(node_metric(name, pods, n * METRIC_VARIANTS + v))
            for v in range(METRIC_VARIANTS)
        ]
        bodies = [
            (node_topic(name, "node"), [encode_json(node)]),
            (node_topic(name, "device"), [encode_json(device)]),
            (node_topic(name, "nodemetric"), metrics),
        ]
        for topic, variants in bodies:
            if not all(_STAMP in body for body in variants):
                raise RuntimeError(f"no time stamp in the body of {topic}")
        result.append((name, bodies))
    return result


# --- the load generator (its own process) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    host: str
    port: int
    nodes: int
    pods: int
    connections: int


def _now_stamp() -> bytes:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()


def generate(
    load: Load,
    commands: multiprocessing.queues.Queue[tuple[str, float, float]],
    results: multiprocessing.queues.Queue[tuple[str, int, int, float]],
) -> None:
    """Publish rounds of reports as told: ``(phase, interval, duration)``; ``stop`` ends."""
    import paho.mqtt.client as mqtt  # the generator's own process
    from paho.mqtt.enums import CallbackAPIVersion

    bodies = fleet(load.nodes, load.pods)
    acked = [0]
    clients = []
    for i in range(load.connections):
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=f"bench-load-{i}",
            protocol=mqtt.MQTTv5,
        )
        client.max_inflight_messages_set(10_000)
        client.max_queued_messages_set(0)

        def on_publish(*_: Any) -> None:
            acked[0] += 1

        client.on_publish = on_publish
        client.connect(load.host, load.port, keepalive=60)
        client.loop_start()
        clients.append(client)
    try:
        for n, (name, _) in enumerate(bodies):
            clients[n % len(clients)].publish(
                node_topic(name, "status"), status_body("online"), qos=1, retain=True
            )
        results.put(("ready", len(bodies), 0, 0.0))
        turn = 0
        while True:
            phase, interval, duration = commands.get()
            if phase == "stop":
                return
            offered_before, acked_before = 0, acked[0]
            start = time.monotonic()
            end = start + duration
            per_node = interval / len(bodies)
            round_start = start
            while round_start < end:
                turn += 1
                for n, (_, reports) in enumerate(bodies):
                    due = round_start + n * per_node
                    wait = due - time.monotonic()
                    if wait > 0.002:
                        time.sleep(wait)
                    stamp = _now_stamp()
                    client = clients[n % len(clients)]
                    for topic, variants in reports:
                        body = variants[turn % len(variants)].replace(_STAMP, stamp)
                        client.publish(topic, body, qos=1, retain=True)
                        offered_before += 1
                    if time.monotonic() >= end:
                        break
                round_start += interval
            elapsed = time.monotonic() - start
            # Let the broker acknowledge what is in flight before counting.
            deadline = time.monotonic() + 10
            while acked[0] - acked_before < offered_before and time.monotonic() < deadline:
                time.sleep(0.01)
            results.put((phase, offered_before, acked[0] - acked_before, elapsed))
    finally:
        for client in clients:
            client.disconnect()
            client.loop_stop()


# --- the broker and the controller ----------------------------------------------------------


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def broker(folder: Path) -> Iterator[int]:
    """A plain mosquitto on a free port; its port."""
    binary = shutil.which("mosquitto") or MOSQUITTO
    if not os.access(binary, os.X_OK):
        raise SystemExit("mosquitto is not installed (apt-get install mosquitto)")
    port = free_port()
    conf = folder / "mosquitto.conf"
    conf.write_text(
        f"user {getpass.getuser()}\npersistence false\nlog_dest none\n"
        f"listener {port} 127.0.0.1\nallow_anonymous true\n"
        "max_queued_messages 100000\nmax_inflight_messages 0\n"
    )
    process = subprocess.Popen(
        [binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(port, process, 15)
        yield port
    finally:
        process.kill()
        process.wait()


@dataclass
class Controller:
    process: subprocess.Popen[bytes]
    metrics_url: str

    def counts(self) -> dict[tuple[str, str], float]:
        """``koordpy_ingest_messages_total`` by (leaf, result); the restarts of the
        controller's components and the ingest's resynchronisations as
        ``("restarts", what)``."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        found: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                if family.name == "koordpy_ingest_messages":
                    found[(sample.labels["leaf"], sample.labels["result"])] = sample.value
                elif family.name == "koordpy_component_restarts":
                    found[("restarts", sample.labels["component"])] = sample.value
                elif family.name == "koordpy_ingest_resyncs":
                    found[("restarts", "ingest-resync")] = sample.value
        return found

    def restarts(self) -> float:
        return sum(v for (what, _), v in self.counts().items() if what == "restarts")

    def processed(self, leaves: Sequence[str] = REPORT_LEAVES) -> tuple[float, float, float]:
        """Of ``leaves``, so far: reports accounted for (any result), of which applied, and
        of which superseded (replaced unread by a newer one of their node: never processed)."""
        counts = self.counts()
        total = sum(v for (leaf, _), v in counts.items() if leaf in leaves)
        applied = sum(v for (leaf, r), v in counts.items() if leaf in leaves and r == "applied")
        superseded = sum(
            v for (leaf, r), v in counts.items() if leaf in leaves and r == "superseded"
        )
        return total, applied, superseded

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return float(times.user + times.system)


@contextlib.contextmanager
def controller(
    folder: Path, mqtt_port: int, profile: Path | None, report_write_interval: float
) -> Iterator[Controller]:
    metrics_port = free_port()
    config = folder / "controller.toml"
    config.write_text(
        '[controller]\nlog_level = "warning"\n'
        f'[api]\naddress = "unix://{folder / "api.sock"}"\n'
        f'[metrics]\naddress = "127.0.0.1:{metrics_port}"\n'
        f"[store]\nreport_write_interval = {report_write_interval!r}\n"
        '[ingest]\ntransport = "mqtt"\n'
        f'[mqtt]\nhost = "127.0.0.1"\nport = {mqtt_port}\nclient_id = "bench-controller"\n'
    )
    command = [sys.executable]
    if profile is not None:
        command += ["-m", "cProfile", "-o", str(profile)]
    command += ["-m", "koordpy", "controller", "run", "--config", str(config)]
    command += ["--state-dir", str(folder / "state")]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, env={**os.environ, "NOTIFY_SOCKET": ""}
    )
    try:
        _wait_listening(metrics_port, process, 60)
        yield Controller(process, f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --- phases -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PhaseResult:
    name: str
    interval: float
    elapsed: float
    offered: int
    acked: int
    processed: float
    applied: float
    superseded: float
    cpu_seconds: float
    backlog: float
    drain_seconds: float
    restarts: float

    @property
    def offered_rate(self) -> float:
        return self.acked / self.elapsed

    @property
    def processed_rate(self) -> float:
        return self.processed / self.elapsed

    @property
    def applied_rate(self) -> float:
        return self.applied / self.elapsed

    @property
    def superseded_rate(self) -> float:
        return self.superseded / self.elapsed

    @property
    def cpu_share(self) -> float:
        return self.cpu_seconds / self.elapsed

    @property
    def cpu_per_report(self) -> float:
        return self.cpu_seconds / self.processed if self.processed else float("nan")


def _wait_processed(ctl: Controller, want: float, timeout: float, leaves: Sequence[str]) -> float:
    """Seconds until the controller processed ``want`` messages of ``leaves`` (or timeout)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if ctl.processed(leaves)[0] >= want:
            break
        time.sleep(0.1)
    return time.monotonic() - start


def run_phase(
    ctl: Controller,
    commands: multiprocessing.queues.Queue[tuple[str, float, float]],
    results: multiprocessing.queues.Queue[tuple[str, int, int, float]],
    name: str,
    interval: float,
    duration: float,
) -> PhaseResult:
    accounted0, applied0, superseded0 = ctl.processed()
    restarts0 = ctl.restarts()
    cpu0 = ctl.cpu_seconds()
    commands.put((name, interval, duration))
    phase, offered, acked, elapsed = results.get(timeout=duration + 120)
    assert phase == name
    accounted1, applied1, superseded1 = ctl.processed()
    cpu1 = ctl.cpu_seconds()
    backlog = accounted0 + acked - accounted1
    drain = _wait_processed(ctl, accounted0 + acked, 120, REPORT_LEAVES) if backlog > 0 else 0.0
    return PhaseResult(
        name=name,
        interval=interval,
        elapsed=elapsed,
        offered=offered,
        acked=acked,
        processed=(accounted1 - superseded1) - (accounted0 - superseded0),
        applied=applied1 - applied0,
        superseded=superseded1 - superseded0,
        cpu_seconds=cpu1 - cpu0,
        backlog=max(backlog, 0.0),
        drain_seconds=drain,
        restarts=ctl.restarts() - restarts0,
    )


def report(
    results: Sequence[PhaseResult], nodes: int, pods: int, report_write_interval: float
) -> str:
    lines = [
        f"ingest benchmark: {nodes} nodes, Node + Device + NodeMetric ({pods} pods) each per"
        " interval, through mosquitto into `koordpy controller run`; an agent's newer report"
        f" written to the state file at most every {report_write_interval:g} s"
        " ([store] report_write_interval)",
        f"{'phase':<22}{'offered/s':>11}{'processed/s':>13}{'applied/s':>11}"
        f"{'superseded/s':>14}{'ctl CPU':>9}{'CPU/report':>12}{'restarts':>10}{'backlog':>9}",
    ]
    lines.extend(
        f"{r.name:<22}{r.offered_rate:>11,.0f}{r.processed_rate:>13,.0f}"
        f"{r.applied_rate:>11,.0f}{r.superseded_rate:>14,.0f}"
        f"{r.cpu_share:>8.0%} {r.cpu_per_report * 1e6:>8.0f} us"
        f"{r.restarts:>10.0f}{r.backlog:>9,.0f}"
        + (f" (drained in {r.drain_seconds:.1f} s)" if r.backlog else "")
        for r in results
    )
    best = max(results[1:] or results, key=lambda r: r.processed_rate)
    at_target = best.cpu_per_report * TARGET_REPORTS_PER_SECOND
    lines += [
        f"target: >= {TARGET_REPORTS_PER_SECOND:,} reports/s at <= {TARGET_CPU_SHARE:.0%} of one"
        " core",
        f"best phase ({best.name}): {best.processed_rate:,.0f} reports/s at"
        f" {best.cpu_share:.0%} CPU; ratio to target: rate"
        f" {best.processed_rate / TARGET_REPORTS_PER_SECOND:.2f}, CPU"
        f" {TARGET_CPU_SHARE / best.cpu_share:.2f}"
        if best.cpu_share
        else "",
        f"controller CPU at {TARGET_REPORTS_PER_SECOND:,} reports/s (from CPU per report):"
        f" {at_target:.0%} of one core",
    ]
    for r in results:
        if r.name.endswith("(target)"):
            met = (
                r.processed_rate >= TARGET_REPORTS_PER_SECOND * 0.99
                and r.cpu_share <= TARGET_CPU_SHARE
            )
            lines.append(
                f"at the target rate ({r.name}): {r.processed_rate:,.0f} reports/s processed at"
                f" {r.cpu_share:.0%} of one core: {'met' if met else 'MISSED'}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=20, help="pods per NodeMetric")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per phase")
    parser.add_argument("--interval", type=float, default=10.0, help="the agents' interval")
    parser.add_argument("--burst-interval", type=float, default=5.0)
    parser.add_argument("--profile", type=Path, help="cProfile the controller into this file")
    parser.add_argument(
        "--report-write-interval",
        type=float,
        default=StoreSection().report_write_interval,
        help="the controller's [store] report_write_interval (0: write every report)",
    )
    args = parser.parse_args(argv)
    # The interval at which the fleet offers the target rate (three reports a node).
    target_interval = round(3 * args.nodes / TARGET_REPORTS_PER_SECOND, 3)

    context = multiprocessing.get_context("spawn")
    commands: multiprocessing.queues.Queue[tuple[str, float, float]] = context.Queue()
    results: multiprocessing.queues.Queue[tuple[str, int, int, float]] = context.Queue()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        folder = Path(tmp)
        with (
            broker(folder) as port,
            controller(folder, port, args.profile, args.report_write_interval) as ctl,
        ):
            load = Load("127.0.0.1", port, args.nodes, args.pods, args.connections)
            generator = context.Process(target=generate, args=(load, commands, results))
            generator.start()
            try:
                ready = results.get(timeout=600)
                assert ready[0] == "ready"
                _wait_processed(ctl, args.nodes, 120, ("status",))
                phases = [
                    run_phase(
                        ctl,
                        commands,
                        results,
                        "first round (creates)",
                        args.interval,
                        args.interval,
                    ),
                    run_phase(
                        ctl,
                        commands,
                        results,
                        f"every {args.interval:g} s",
                        args.interval,
                        args.duration,
                    ),
                    run_phase(
                        ctl,
                        commands,
                        results,
                        f"every {target_interval:g} s (target)",
                        target_interval,
                        args.duration,
                    ),
                    run_phase(
                        ctl,
                        commands,
                        results,
                        f"every {args.burst_interval:g} s",
                        args.burst_interval,
                        args.duration,
                    ),
                ]
            finally:
                commands.put(("stop", 0.0, 0.0))
                generator.join(timeout=30)
                if generator.is_alive():
                    generator.kill()
        print(report(phases, args.nodes, args.pods, args.report_write_interval))
        if args.profile is not None:
            print(f"\ncontroller profile ({args.profile}), top 30 by own time:")
            stats = pstats.Stats(str(args.profile))
            stats.sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
