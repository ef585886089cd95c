"""Agents' reports written behind: a change that only brings a newer report (a Node's
heartbeat, a Device's reported-at, a NodeMetric's status) is served at once and reaches the
state file at most ``report_write_interval`` seconds later; every other change at once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from apis.core import Node, NodeStatus, Pod
from apis.kinds import Kind, default_registry
from apis.meta import REPORTED_AT_ANNOTATION, Condition, ObjectMeta
from apis.scheduling import Device
from apis.slo import NodeMetric, NodeMetricCollectPolicy, NodeMetricSpec, NodeMetricStatus
from controller.api.groupcommit import GroupCommit
from controller.config import ControllerConfig
from controller.fleet.reports import WITHOUT_REPORT, without_report
from controller.store.sqlite import Store
from runtime import configfile

replace = msgspec.structs.replace
T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def node(beat: datetime, *, labels: dict[str, str] | None = None) -> Node:
    ready = Condition(type="Ready", status="True", last_heartbeat_time=beat, reason="Ready")
    return Node(
        metadata=ObjectMeta(name="n1", labels=labels or {}),
        status=NodeStatus(conditions=(ready,)),
    )


def device(stamp: str) -> Device:
    return Device(metadata=ObjectMeta(name="n1", annotations={REPORTED_AT_ANNOTATION: stamp}))


def metric(when: datetime, *, report_every: int | None = None) -> NodeMetric:
    policy = NodeMetricCollectPolicy(report_interval_seconds=report_every)
    return NodeMetric(
        metadata=ObjectMeta(name="n1"),
        spec=NodeMetricSpec(metric_collect_policy=policy if report_every else None),
        status=NodeMetricStatus(update_time=when),
    )


def kind_of(struct: type[Any]) -> Kind:
    return default_registry().for_type(struct)


def stored_node(store: Store) -> Node:
    found = store.get(kind_of(Node), "n1")
    assert isinstance(found, Node)
    return found


def open_store(path: Path, interval: float = 3600.0) -> Store:
    return Store(path=path, without_report=WITHOUT_REPORT, report_write_interval=interval)


def in_file(path: Path, kind: type[Any], name: str = "n1") -> dict[str, Any] | None:
    """The stored JSON of an object, read by a connection of its own (as after a restart)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        row = con.execute(
            "SELECT data FROM objects WHERE kind = ? AND name = ?", (kind_of(kind).key, name)
        ).fetchone()
    return json.loads(row[0]) if row else None


def counter_in_file(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        row = con.execute("SELECT value FROM counters WHERE name = 'resource_version'").fetchone()
    return int(row[0])


def beat_in_file(path: Path) -> str:
    stored = in_file(path, Node)
    assert stored is not None
    ready = stored["status"]["conditions"][0]
    assert ready["type"] == "Ready"
    return str(ready["lastHeartbeatTime"])


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_heartbeat_is_served_at_once_and_written_when_the_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = open_store(path)
    store.apply(node(T0))
    later = T0 + timedelta(seconds=10)
    saved, _ = store.apply(node(later))
    assert stored_node(store).status.conditions[0].last_heartbeat_time == later
    assert beat_in_file(path) == stamp(T0)
    # the counter is written by every commit: versions never go back after a crash
    assert counter_in_file(path) == int(saved.metadata.resource_version)
    store.close()
    assert beat_in_file(path) == stamp(later)
    reopened = open_store(path)
    try:
        assert reopened.get(kind_of(Node), "n1") == saved
    finally:
        reopened.close()


def test_any_other_change_writes_the_object_at_once_with_its_newest_report(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with open_store(path) as store:
        store.apply(node(T0))
        store.apply(node(T0 + timedelta(seconds=10)))
        store.apply(node(T0 + timedelta(seconds=20), labels={"zone": "a"}))
        stored = in_file(path, Node)
        assert stored is not None
        assert stored["metadata"]["labels"] == {"zone": "a"}
        assert beat_in_file(path) == stamp(T0 + timedelta(seconds=20))


def test_a_device_waits_on_its_reported_at_only(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_store(path) as store:
        store.apply(device("2026-11-30T12:00:00Z"))
        store.apply(device("2026-11-30T12:00:10Z"))
        stored = in_file(path, Device)
        assert stored is not None
        assert stored["metadata"]["annotations"][REPORTED_AT_ANNOTATION] == "2026-11-30T12:00:00Z"
        moved = device("2026-11-30T12:00:20Z")
        store.apply(replace(moved, metadata=replace(moved.metadata, labels={"gpu": "h100"})))
        stored = in_file(path, Device)
        assert stored is not None
        assert stored["metadata"]["annotations"][REPORTED_AT_ANNOTATION] == "2026-11-30T12:00:20Z"


def test_a_nodemetric_status_waits_its_collect_policy_does_not(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_store(path) as store:
        store.apply(metric(T0))
        store.apply(metric(T0 + timedelta(seconds=60)))
        stored = in_file(path, NodeMetric)
        assert stored is not None
        assert stored["status"]["updateTime"] == stamp(T0)
        store.apply(metric(T0 + timedelta(seconds=120), report_every=30))
        stored = in_file(path, NodeMetric)
        assert stored is not None
        assert stored["spec"]["metricCollectPolicy"] == {"reportIntervalSeconds": 30}
        assert stored["status"]["updateTime"] == stamp(T0 + timedelta(seconds=120))


def test_due_reports_go_with_the_next_commit(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_store(path, interval=0.05) as store:
        store.apply(node(T0))
        store.apply(node(T0 + timedelta(seconds=10)))
        assert beat_in_file(path) == stamp(T0)
        store.apply(metric(T0))  # before the node's report is due: the node waits
        assert beat_in_file(path) == stamp(T0)
        time.sleep(0.06)
        store.apply(metric(T0, report_every=30))  # any commit writes what is due
        assert beat_in_file(path) == stamp(T0 + timedelta(seconds=10))


async def test_an_idle_store_writes_due_reports_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = open_store(path, interval=0.1)
    commits = GroupCommit(store)
    try:
        await commits.submit(lambda s: s.apply(node(T0)))
        await commits.submit(lambda s: s.apply(node(T0 + timedelta(seconds=10))))
        assert beat_in_file(path) == stamp(T0)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if beat_in_file(path) != stamp(T0):
                break
        assert beat_in_file(path) == stamp(T0 + timedelta(seconds=10))
    finally:
        await commits.aclose()
        store.close()


def test_a_deleted_object_is_not_written_back(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_store(path) as store:
        store.apply(node(T0))
        store.apply(node(T0 + timedelta(seconds=10)))
        store.delete(kind_of(Node), "n1")
        assert in_file(path, Node) is None
    assert in_file(path, Node) is None


def test_interval_zero_writes_every_report(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_store(path, interval=0) as store:
        store.apply(node(T0))
        store.apply(node(T0 + timedelta(seconds=10)))
        assert beat_in_file(path) == stamp(T0 + timedelta(seconds=10))


def test_a_negative_interval_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="report_write_interval must be >= 0 seconds, got -1"):
        open_store(tmp_path / "state.db", interval=-1)
    with pytest.raises(configfile.ConfigError, match="report_write_interval"):
        configfile.parse_config("[store]\nreport_write_interval = -1\n", ControllerConfig)
    assert ControllerConfig().store.report_write_interval == 60.0


_KILLED_WRITER = """
import os, sys
from datetime import timedelta
from pathlib import Path
from tests.controller.test_store_reports import T0, node, open_store
store = open_store(Path(sys.argv[1]))
store.apply(node(T0))
for i in range(1, 6):
    saved, _ = store.apply(node(T0 + timedelta(seconds=10 * i)))
print(saved.metadata.resource_version, flush=True)
os._exit(0)  # killed: nothing written at close
"""


def test_a_killed_controller_comes_back_with_the_last_written_report(
    tmp_path: Path, repo_root: Path
) -> None:
    path = tmp_path / "state.db"
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(path)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    last = int(done.stdout.split()[-1])
    with open_store(path) as store:
        back = stored_node(store)
        assert back.status.conditions[0].last_heartbeat_time == T0
        assert store.resource_version == last
        newer, _ = store.apply(node(T0 + timedelta(seconds=60)))
        assert int(newer.metadata.resource_version) > last


def test_without_report_leaves_what_the_agent_does_not_report() -> None:
    a, b = node(T0), node(T0 + timedelta(seconds=10))
    assert without_report(a) == without_report(b)
    assert without_report(a) != without_report(node(T0, labels={"zone": "a"}))
    m1, m2 = metric(T0), metric(T0 + timedelta(seconds=60))
    assert without_report(m1) == without_report(m2)
    assert without_report(m1) != without_report(metric(T0, report_every=30))
    d1, d2 = device("2026-11-30T12:00:00Z"), device("2026-11-30T12:00:10Z")
    assert without_report(d1) == without_report(d2)
    # the resourceVersion a write gives is not part of the comparison either
    assert without_report(replace(a, metadata=replace(a.metadata, resource_version="7"))) == (
        without_report(a)
    )
    assert without_report(Pod(metadata=ObjectMeta(name="p"))) is None
