"""Replaying a Koordinator v1.8 user manual's examples through ``koordpy simulate``.

Each test module under ``tests/manuals/`` follows one page of Koordinator's v1.8 user manuals
(koordinator-sh/website, ``docs/user-manuals/<page>.md``): its docstring names the page, each
test names the example it replays. The manifests are written in the tests as the page gives
them (our own test cases, not the page's prose); the cluster around them (nodes, devices) is
what the page assumes.

``replay`` runs the scenario to its end and returns a :class:`Outcome` to look objects up in.
A page whose steps wait for the cluster ("once the pod runs, create ...") is played with a
:class:`Cluster`: apply, run for a while or until something holds, look, apply the next step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from apis import codec
from apis.core import Event, Pod
from apis.meta import Object
from controller import simulate as sim
from controller.api.apply import apply as kubectl_apply
from controller.loops import LoopContext, LoopFactory, build_loops
from controller.store.sqlite import Store

__all__ = [
    "Cluster",
    "Outcome",
    "documents",
    "dump",
    "node",
    "node_metric",
    "replay",
    "scheduler_config",
]


@dataclass(frozen=True)
class Outcome:
    """What a simulation ended with."""

    result: sim.SimulationResult

    def all(self, kind: str) -> list[Object]:
        """Every object of ``kind`` (the wire kind, e.g. ``"Pod"``)."""
        return [o for o in self.result.objects if o.kind == kind]

    def get(self, kind: str, name: str, namespace: str = "") -> Object:
        """The object of ``kind`` named ``name`` (namespace ``""`` matches any)."""
        for obj in self.all(kind):
            if obj.metadata.name == name and namespace in ("", obj.metadata.namespace):
                return obj
        names = sorted(f"{o.metadata.namespace}/{o.metadata.name}" for o in self.all(kind))
        raise AssertionError(f"no {kind} {namespace}/{name}; there are {names}")

    def pod(self, name: str, namespace: str = "") -> Pod:
        """The pod ``name`` (namespace ``""`` matches any)."""
        found = self.get("Pod", name, namespace)
        assert isinstance(found, Pod)
        return found

    def events(self, reason: str | None = None) -> Iterator[Event]:
        """The Events recorded, those with ``reason`` only when given."""
        for obj in self.all("Event"):
            assert isinstance(obj, Event)
            if reason is None or obj.reason == reason:
                yield obj

    def wire(self, kind: str, name: str, namespace: str = "") -> Any:
        """The object as plain JSON-like data (camelCase keys), for assertions on the wire form."""
        return codec.to_builtins(self.get(kind, name, namespace))

    def pods(self, namespace: str = "default", **labels: str) -> list[Pod]:
        """The pods of ``namespace`` carrying every label of ``labels``, by name (the pods a
        workload's selector picks: their names are generated)."""
        found = [
            p
            for p in self.all("Pod")
            if isinstance(p, Pod)
            and p.metadata.namespace == namespace
            and all(p.metadata.labels.get(k) == v for k, v in labels.items())
        ]
        return sorted(found, key=lambda p: p.metadata.name)


def replay(
    *documents: str, max_time: timedelta = timedelta(hours=1), source: str = "manual"
) -> Outcome:
    """Simulate the YAML ``documents`` (each one or more ``---``-separated manifests)."""
    text = "\n---\n".join(documents)
    objects = sim.scenario_objects(text, source=source)
    return Outcome(sim.simulate(objects, max_time=max_time))


class Cluster:
    """A page's steps one after the other, as a user runs them with ``kubectl`` against ``koordpy
    up``: :meth:`apply` manifests, :meth:`delete` objects, :meth:`run` for a while or
    :meth:`run_until` something holds, and look at the objects (:meth:`outcome`, or ``get``,
    ``wire``, ``pods`` as on an :class:`Outcome`) in between.

    Every control loop of ``koordpy simulate`` (or those of ``loops``) over a memory store,
    passes repeated as ``simulate`` repeats them, under a clock that starts at ``simulate``'s
    start and moves only inside ``run``/``run_until``. Use it as a context manager.
    """

    def __init__(self, *documents: str, loops: Mapping[str, LoopFactory] | None = None) -> None:
        self.now: datetime = sim.EPOCH
        self.store = Store(path=None, clock=self._clock, seed=sim.SEED)
        self._loops = build_loops(loops)
        self._ctx = LoopContext(store=self.store, now=self._clock)
        if documents:
            self.apply(*documents)

    def _clock(self) -> datetime:
        return self.now

    def __enter__(self) -> Cluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def apply(self, *documents: str) -> None:
        """``kubectl apply -f`` of the YAML ``documents`` (read as a scenario file reads them: a
        configuration document becomes its ConfigMap), then the loops until they settle at
        this instant. A bad document raises before anything of that call is stored."""
        for obj in sim.scenario_objects("\n---\n".join(documents), source="step"):
            kubectl_apply(self.store, obj)
        self.run()

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        """``kubectl delete KIND NAME`` (``kind`` as typed: ``rsv``, ``Pod``...), then settle."""
        self.store.delete(self.store.registry.resolve(kind), name, namespace)
        self.run()

    def _settle(self) -> float | None:
        """Passes at this instant until nothing changes; the shortest wait a loop asked for."""
        for _ in range(sim.MAX_PASSES_PER_INSTANT):
            before = self.store.resource_version
            waits = [w for loop in self._loops if (w := loop.reconcile(self._ctx)) is not None]
            if self.store.resource_version == before:
                return min(waits, default=None)
        raise AssertionError(f"the control loops do not settle at {self.now.isoformat()}")

    def run(self, duration: timedelta = timedelta(0)) -> None:
        """Let ``duration`` of simulated time pass (the clock jumps from one wanted run of a
        loop to the next, as in ``simulate``); it ends at ``now + duration`` at the latest."""
        deadline = self.now + duration
        while True:
            wake = self._settle()
            if wake is None or self.now + timedelta(seconds=max(wake, 0.001)) > deadline:
                self.now = max(self.now, deadline)
                return
            self.now += timedelta(seconds=max(wake, 0.001))

    def run_until(
        self, condition: Callable[[Outcome], bool], *, within: timedelta = timedelta(minutes=10)
    ) -> None:
        """Run until ``condition`` holds of the objects (checked after each settled instant);
        an AssertionError when it does not within ``within``."""
        deadline = self.now + within
        while True:
            wake = self._settle()
            if condition(self.outcome()):
                return
            step = timedelta(seconds=max(wake, 0.001)) if wake is not None else None
            if step is None or self.now + step > deadline:
                raise AssertionError(f"not reached within {within} (at {self.now.isoformat()})")
            self.now += step

    def outcome(self) -> Outcome:
        """The objects as they are now."""
        registry = self.store.registry
        objects = tuple(obj for kind in registry for obj in self.store.list(kind)[0])
        return Outcome(
            sim.SimulationResult(objects=objects, started=sim.EPOCH, ended=self.now, passes=0)
        )

    def get(self, kind: str, name: str, namespace: str = "") -> Object:
        return self.outcome().get(kind, name, namespace)

    def pod(self, name: str, namespace: str = "") -> Pod:
        return self.outcome().pod(name, namespace)

    def wire(self, kind: str, name: str, namespace: str = "") -> Any:
        """The object as ``kubectl get -o json`` shows it (JSON data: lists, not tuples)."""
        return json.loads(codec.encode_json(self.get(kind, name, namespace)))

    def pods(self, namespace: str = "default", **labels: str) -> list[Pod]:
        return self.outcome().pods(namespace, **labels)


def node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "64Gi",
    labels: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
    pods: str = "110",
) -> str:
    """A Ready Node manifest with ``cpu``/``memory`` (and ``extra`` resources) allocatable."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}
    doc = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return codec.dump_yaml(doc)


def node_metric(
    name: str,
    *,
    cpu: str,
    memory: str,
    updated: str,
    pods: Mapping[str, tuple[str, str]] | None = None,
    pod_priority: str | None = None,
    p99: tuple[str, str] | None = None,
    system: tuple[str, str] | None = None,
    report_interval: int | None = None,
) -> str:
    """``name``'s NodeMetric manifest as koordlet reports it at ``updated``: the node's usage
    ``cpu``/``memory``, where given its p99 over 5 minutes and its system usage, and the usage
    of ``pods`` (name -> cpu, memory; namespace default; priority class ``pod_priority`` where
    given); ``spec.metricCollectPolicy.reportIntervalSeconds`` where ``report_interval`` is."""

    def usage(amounts: tuple[str, str]) -> dict[str, Any]:
        return {"resources": {"cpu": amounts[0], "memory": amounts[1]}}

    pods_metric = [
        {
            "namespace": "default",
            "name": pod,
            "podUsage": usage(used),
            **({"priority": pod_priority} if pod_priority is not None else {}),
        }
        for pod, used in (pods or {}).items()
    ]
    reported: dict[str, Any] = {"nodeUsage": usage((cpu, memory))}
    if p99 is not None:
        reported["aggregatedNodeUsages"] = [{"duration": "5m0s", "usage": {"p99": usage(p99)}}]
    if system is not None:
        reported["systemUsage"] = usage(system)
    doc: dict[str, Any] = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeMetric",
        "metadata": {"name": name},
        "status": {"updateTime": updated, "nodeMetric": reported, "podsMetric": pods_metric},
    }
    if report_interval is not None:
        doc["spec"] = {"metricCollectPolicy": {"reportIntervalSeconds": report_interval}}
    return dump(doc)


def dump(doc: object) -> str:
    """A manifest (plain data) as YAML."""
    return codec.dump_yaml(doc)


def scheduler_config(document: str, **extra: str) -> str:
    """The scheduler's ConfigMap ``koordinator-system/koord-scheduler-config`` holding the
    KubeSchedulerConfiguration ``document`` (and ``extra`` keys, e.g. ``feature-gates``)."""
    data = {"koord-scheduler-config": document.lstrip("\n"), **extra}
    return dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "koord-scheduler-config", "namespace": "koordinator-system"},
            "data": data,
        }
    )


def documents(*parts: str | Sequence[str]) -> list[str]:
    """Flatten strings and sequences of strings into one list of YAML texts."""
    out: list[str] = []
    for part in parts:
        out.extend([part] if isinstance(part, str) else part)
    return out
