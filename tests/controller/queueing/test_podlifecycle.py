"""The ``pod-lifecycle`` loop: a bound pod runs and reports what a kubelet reports, and a pod
with a simulated runtime completes as a kubelet reports it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apis.codec import decode_object, encode_json
from apis.core import Node, Pod
from apis.kinds import default_registry
from controller.cli import printing
from controller.loops import LoopContext
from controller.queueing.podlifecycle import PodLifecycle, node_ip
from controller.store.sqlite import Store

START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened


def apply(store: Store, raw: dict[str, object]) -> None:
    store.apply(decode_object(raw))


def node(name: str, addresses: list[dict[str, str]] | None = None) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"addresses": addresses or []},
    }


def pod(
    name: str,
    *,
    node_name: str = "node-0",
    runtime: str = "",
    init: bool = False,
    host_network: bool = False,
    resources: dict[str, object] | None = None,
) -> dict[str, object]:
    spec: dict[str, object] = {
        "nodeName": node_name,
        "containers": [
            {"name": "main", "image": "nginx:1.27", "resources": resources or {}},
            {"name": "side", "image": "registry.example/tools/busybox"},
        ],
    }
    if init:
        spec["initContainers"] = [
            {"name": "setup", "image": "busybox:1.36"},
            {"name": "proxy", "image": "envoy:v1", "restartPolicy": "Always"},
        ]
    if host_network:
        spec["hostNetwork"] = True
    annotations = {"koordpy.io/simulated-runtime": runtime} if runtime else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": spec,
    }


def run(store: Store, clock: Clock) -> float | None:
    loop = PodLifecycle()
    return loop.reconcile(LoopContext(store=store, now=clock))


def wire_of(obj: object) -> dict[str, Any]:
    """The object as JSON reads it (camelCase keys, lists)."""
    loaded = json.loads(encode_json(obj))
    assert isinstance(loaded, dict)
    return loaded


def get(store: Store, name: str) -> Pod:
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found


def test_a_started_pod_reports_container_statuses(store: Store, clock: Clock) -> None:
    apply(
        store,
        node(
            "node-0",
            [
                {"type": "Hostname", "address": "node-0"},
                {"type": "InternalIP", "address": "10.0.0.7"},
            ],
        ),
    )
    apply(store, pod("web", resources={"requests": {"cpu": "1"}}))
    run(store, clock)
    started = get(store, "web")
    status = started.status
    assert status.phase == "Running"
    assert {c.type: c.status for c in status.conditions} == {
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    assert (status.host_ip, status.pod_ip) == ("10.0.0.7", "10.0.0.7")
    assert status.qos_class == "Burstable"
    wire = wire_of(started)["status"]
    assert wire["hostIPs"] == [{"ip": "10.0.0.7"}]
    [main, side] = wire["containerStatuses"]
    assert main["name"] == "main"
    assert main["image"] == "nginx:1.27"
    assert re.fullmatch(r"nginx@sha256:[0-9a-f]{64}", main["imageID"])
    assert side["imageID"].startswith("registry.example/tools/busybox@sha256:")
    assert re.fullmatch(r"containerd://[0-9a-f]{64}", main["containerID"])
    assert main["containerID"] != side["containerID"]
    assert (main["ready"], main["started"], main["restartCount"]) == (True, True, 0)
    assert main["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    row = printing.row(default_registry().resolve("pods"), started, now=START)
    assert row[1:4] == ["2/2", "Running", "0"]


def test_init_containers_have_completed_and_sidecars_run(store: Store, clock: Clock) -> None:
    apply(store, node("node-0"))
    apply(store, pod("web", init=True))
    run(store, clock)
    wire = wire_of(get(store, "web"))["status"]
    [setup, proxy] = wire["initContainerStatuses"]
    assert setup["state"]["terminated"]["reason"] == "Completed"
    assert setup["state"]["terminated"]["exitCode"] == 0
    assert setup["ready"] is True
    assert "running" in proxy["state"]
    assert wire["qosClass"] == "BestEffort"


def test_a_node_without_addresses_gives_no_ip(store: Store, clock: Clock) -> None:
    apply(store, node("node-0"))
    apply(store, pod("web"))
    run(store, clock)
    status = get(store, "web").status
    assert (status.host_ip, status.pod_ip, status.host_ips) == ("", "", ())


def test_node_ip_falls_back_to_the_first_address() -> None:
    raw = node("n", [{"type": "Hostname", "address": "n.example"}])
    found = decode_object(raw)
    assert isinstance(found, Node)
    assert node_ip(found) == "n.example"
    assert node_ip(None) == ""


def test_a_completed_pod_reports_exit_code_zero(store: Store, clock: Clock) -> None:
    apply(store, node("node-0"))
    apply(store, pod("batch", runtime="90s"))
    wait = run(store, clock)
    assert wait == 90.0
    loop = PodLifecycle()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    clock.now = START + timedelta(seconds=90)
    loop.reconcile(ctx)
    done = get(store, "batch")
    assert done.status.phase == "Succeeded"
    wire = wire_of(done)["status"]
    for status in wire["containerStatuses"]:
        terminated = status["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
        assert terminated["startedAt"] == "2026-01-01T00:00:00Z"
        assert terminated["finishedAt"] == "2026-01-01T00:01:30Z"
        assert status["ready"] is False
    row = printing.row(default_registry().resolve("pods"), done, now=clock.now)
    assert row[1:3] == ["0/2", "Completed"]
