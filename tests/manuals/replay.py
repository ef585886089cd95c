"""Replaying a Koordinator v1.8 user manual's examples through ``koordpy simulate``.

Each test module under ``tests/manuals/`` follows one page of Koordinator's v1.8 user manuals
(koordinator-sh/website, ``docs/user-manuals/<page>.md``): its docstring names the page, each
test names the example it replays. The manifests are written in the tests as the page gives
them (our own test cases, not the page's prose); the cluster around them (nodes, devices) is
what the page assumes.

``replay`` runs the scenario to its end and returns a :class:`Outcome` to look objects up in.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from apis import codec
from apis.core import Event
from apis.meta import Object
from controller import simulate as sim

__all__ = ["Outcome", "documents", "node", "replay"]


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

    def events(self, reason: str | None = None) -> Iterator[Event]:
        """The Events recorded, those with ``reason`` only when given."""
        for obj in self.all("Event"):
            assert isinstance(obj, Event)
            if reason is None or obj.reason == reason:
                yield obj

    def wire(self, kind: str, name: str, namespace: str = "") -> Any:
        """The object as plain JSON-like data (camelCase keys), for assertions on the wire form."""
        return codec.to_builtins(self.get(kind, name, namespace))


def replay(
    *documents: str, max_time: timedelta = timedelta(hours=1), source: str = "manual"
) -> Outcome:
    """Simulate the YAML ``documents`` (each one or more ``---``-separated manifests)."""
    text = "\n---\n".join(documents)
    objects = sim.scenario_objects(text, source=source)
    return Outcome(sim.simulate(objects, max_time=max_time))


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


def documents(*parts: str | Sequence[str]) -> list[str]:
    """Flatten strings and sequences of strings into one list of YAML texts."""
    out: list[str] = []
    for part in parts:
        out.extend([part] if isinstance(part, str) else part)
    return out
