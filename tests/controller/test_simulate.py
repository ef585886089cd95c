"""``koordpy simulate``: the harness, its clock, its output and its errors."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
import yaml

from apis.codec import decode_documents
from apis.core import Pod
from controller import simulate as sim
from controller.events import NORMAL, EventRecorder
from controller.loops import LoopContext, LoopFactory

SCENARIO = """
apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  allocatable: {cpu: "8", memory: 16Gi}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  containers:
  - name: main
    image: nginx
    resources: {requests: {cpu: 500m}}
---
apiVersion: v1
kind: Pod
metadata: {name: batch, namespace: jobs}
spec:
  containers: [{name: main, image: busybox}]
"""


@dataclass
class Labeller:
    """Every 10 simulated minutes, labels one more pod and records an Event about it."""

    name: str = "labeller"
    period: float = 600.0
    due: datetime | None = None

    def reconcile(self, ctx: LoopContext) -> float | None:
        if self.due is not None and ctx.now() < self.due:
            return (self.due - ctx.now()).total_seconds()
        kind = ctx.store.registry.for_type(Pod)
        pods, _ = ctx.store.list(kind)
        todo = [p for p in pods if "seen" not in p.metadata.labels]
        if not todo:
            return None
        pod = todo[0]
        labels = {**pod.metadata.labels, "seen": ctx.now().strftime("%H%M")}
        ctx.store.update(
            msgspec.structs.replace(
                pod, metadata=msgspec.structs.replace(pod.metadata, labels=labels)
            )
        )
        EventRecorder(ctx.store, component="labeller", clock=ctx.now).record(
            pod, type=NORMAL, reason="Labelled", message=f"labelled {pod.metadata.name}"
        )
        self.due = ctx.now() + timedelta(seconds=self.period)
        return self.period


@dataclass
class Flapper:
    """Changes an object at every pass: never converges."""

    name: str = "flapper"

    def reconcile(self, ctx: LoopContext) -> float | None:
        kind = ctx.store.registry.for_type(Pod)
        pod = ctx.store.get(kind, "web", "default")
        flip = "b" if pod.metadata.labels.get("x") == "a" else "a"
        ctx.store.update(
            msgspec.structs.replace(
                pod,
                metadata=msgspec.structs.replace(
                    pod.metadata, labels={**pod.metadata.labels, "x": flip}
                ),
            )
        )
        return None


LABELLER: dict[str, LoopFactory] = {"labeller": Labeller}


def test_without_loops_the_scenario_comes_back_as_a_list() -> None:
    result = sim.simulate(decode_documents(SCENARIO), loops={})
    listing = result.to_list()
    assert listing["apiVersion"] == "v1"
    assert listing["kind"] == "List"
    items = listing["items"]
    assert isinstance(items, list)
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
        ("Pod", "web"),
        ("Pod", "batch"),
        ("Node", "node-a"),
    ] or [(i["kind"], i["metadata"]["name"]) for i in items] == [
        ("Pod", "batch"),
        ("Pod", "web"),
        ("Node", "node-a"),
    ]
    assert result.started == sim.EPOCH
    assert result.ended == sim.EPOCH


def test_kind_table_order_then_namespace_then_name() -> None:
    result = sim.simulate(decode_documents(SCENARIO), loops={})
    keys = [(o.kind, o.metadata.namespace, o.metadata.name) for o in result.objects]
    assert keys == [("Pod", "default", "web"), ("Pod", "jobs", "batch"), ("Node", "", "node-a")]


def test_loops_run_on_the_simulated_clock_and_events_are_included() -> None:
    result = sim.simulate(decode_documents(SCENARIO), loops=LABELLER)
    pods = {o.metadata.name: o for o in result.objects if isinstance(o, Pod)}
    # One pod per pass at t0, then the next one 10 simulated minutes later.
    assert pods["web"].metadata.labels["seen"] == "0000"
    assert pods["batch"].metadata.labels["seen"] == "0010"
    events = [o for o in result.objects if o.kind == "Event"]
    assert sorted(e.reason for e in events) == ["Labelled", "Labelled"]  # type: ignore[attr-defined]
    # It asked to run again at 00:20, found nothing to do and asked for nothing more.
    assert result.ended == sim.EPOCH + timedelta(minutes=20)


def test_max_time_stops_the_clock() -> None:
    result = sim.simulate(decode_documents(SCENARIO), loops=LABELLER, max_time=timedelta(minutes=5))
    pods = {o.metadata.name: o for o in result.objects if isinstance(o, Pod)}
    assert "seen" in pods["web"].metadata.labels
    assert "seen" not in pods["batch"].metadata.labels
    assert result.ended == sim.EPOCH


def test_same_scenario_same_result() -> None:
    first = sim.simulate(decode_documents(SCENARIO), loops=LABELLER).to_list()
    second = sim.simulate(decode_documents(SCENARIO), loops=LABELLER).to_list()

    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_a_loop_that_never_settles_is_reported() -> None:
    with pytest.raises(sim.SimulationError, match="still changing"):
        sim.simulate(decode_documents(SCENARIO), loops={"flapper": Flapper})


def test_clock_starts_at_the_newest_creation_timestamp() -> None:
    later = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
    text = (
        SCENARIO
        + f"""---
apiVersion: v1
kind: Node
metadata: {{name: node-b, creationTimestamp: "{later.isoformat().replace("+00:00", "Z")}"}}
"""
    )
    result = sim.simulate(decode_documents(text), loops={})
    assert result.started == later


def _args(path: str, **extra: object) -> argparse.Namespace:
    return argparse.Namespace(filename=path, output=extra.get("output", "yaml"), max_time="1h")


def test_cli_prints_a_yaml_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    assert sim.main(_args(str(scenario))) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["kind"] == "List"
    assert {i["metadata"]["name"] for i in out["items"]} == {"web", "batch", "node-a"}
    web = next(i for i in out["items"] if i["metadata"]["name"] == "web")
    assert web["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"


def test_cli_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    assert sim.main(_args(str(scenario), output="json")) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"


def test_cli_names_the_bad_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        SCENARIO + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"
        "spec: {containers: [{name: c, resources: {requests: {cpu: 12x}}}]}\n"
    )
    assert sim.main(_args(str(scenario))) == 1
    err = capsys.readouterr().err
    assert "bad.yaml" in err
    assert "document 3" in err
    assert "12x" in err


def test_cli_rejects_a_bad_max_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    args = _args(str(scenario))
    args.max_time = "soon"
    assert sim.main(args) == 2
    assert "--max-time" in capsys.readouterr().err
