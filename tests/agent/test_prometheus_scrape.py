"""A real Prometheus (the Debian package) scrapes the agent's endpoint; PromQL through its
HTTP API returns the node CPU series with the values the agent served, scrape for scrape."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.metrics import exporter, health
from agent.metrics.snapshot import MetricsSnapshot
from runtime import exposition, lifecycle
from tests.fakes.net import free_port

pytestmark = [pytest.mark.network, pytest.mark.slow]

PROMETHEUS = shutil.which("prometheus")
NODE = "scraped-node"


@dataclass
class Ticking:
    """A collector stand-in: a new snapshot (a new node CPU figure) at every scrape, and a
    record of every figure served."""

    served: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def latest(self) -> MetricsSnapshot:
        with self.lock:
            millicores = 1000.0 + 125.0 * len(self.served)
            self.served.append(millicores / 1000)
            return MetricsSnapshot(
                node=NODE,
                taken_at=datetime.now(UTC),
                monotonic=time.monotonic(),
                node_cpu=millicores,
                node_memory=1 << 30,
            )


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


@contextmanager
def prometheus(tmp_path: Path, target: str) -> Iterator[str]:
    """Prometheus scraping ``target`` every second; its base URL. Stopped on exit."""
    assert PROMETHEUS is not None
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: koordpy-agent\n"
        f"    static_configs:\n      - targets: ['{target}']\n",
        encoding="utf-8",
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


def wait_until_up(base: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            targets = api(base, "/api/v1/targets")["activeTargets"]
        except OSError as err:  # not listening yet
            last = err
        else:
            last = targets
            if targets and targets[0]["health"] == "up":
                target: dict[str, Any] = targets[0]
                return target
        time.sleep(0.2)
    raise AssertionError(f"the agent's target is not up after {timeout} s: {last}")


def test_prometheus_stores_what_the_agent_served(tmp_path: Path) -> None:
    if PROMETHEUS is None:
        pytest.skip(reason="prometheus is not installed (Debian package prometheus)")
    # The agent's whole registry: restarts, its health (one tick timed), the usage series.
    registry = CollectorRegistry()
    lifecycle.restarts_counter(registry)
    health.health_of(registry).node(NODE).collected(Ticking().latest())
    ticking = Ticking()
    with (
        exporter.exported(registry, NODE, latest=ticking.latest, start_time=1_700_000_000.0),
        exposition.serve_metrics("127.0.0.1:0", registry) as endpoint,
    ):
        assert endpoint is not None
        with prometheus(tmp_path, f"127.0.0.1:{endpoint.port}") as base:
            target = wait_until_up(base)
            assert target["lastError"] == ""
            deadline = time.monotonic() + 30
            samples: list[tuple[float, str]] = []
            while time.monotonic() < deadline:
                result = api(base, "/api/v1/query", query="koordlet_node_used_cpu_cores[1m]")[
                    "result"
                ]
                if result and len(result[0]["values"]) >= 3:
                    samples = [(float(t), v) for t, v in result[0]["values"]]
                    (series,) = result
                    assert series["metric"]["node"] == NODE
                    assert series["metric"]["job"] == "koordpy-agent"
                    break
                time.sleep(0.3)
            instant = api(base, "/api/v1/query", query="koordlet_node_used_cpu_cores")["result"]
            start = api(base, "/api/v1/query", query="koordlet_start_time")["result"]
            ticks = api(
                base, "/api/v1/query", query="koordpy_agent_collect_duration_seconds_count"
            )["result"]
    stored = [float(v) for _, v in samples]
    assert len(stored) >= 3, "three scrapes stored within 30 s"
    served = ticking.served
    # Every stored sample is a value the agent served, in the order it served them (one
    # new figure per scrape: a stored value names the scrape it came from).
    positions = [served.index(v) for v in stored]
    assert positions == sorted(positions)
    assert len(set(positions)) == len(positions)
    (now,) = instant
    assert float(now["value"][1]) in served
    assert float(now["value"][1]) >= stored[-1]
    assert float(start[0]["value"][1]) == 1_700_000_000.0
    assert [float(t["value"][1]) for t in ticks] == [1.0], "the health metrics parse too"
