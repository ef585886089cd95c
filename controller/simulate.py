"""``koordpy simulate``: every control loop over a scenario file, under a simulated clock.

The scenario's objects are loaded into a memory-only store; the loops run until nothing changes
and no loop asks to run again within ``--max-time`` of simulated time. The result is one ``v1``
``List`` holding every object, the Events the run produced included, in the kind table's order.

Algorithm (deterministic for a given scenario and loop table):

1. ``now`` starts at :data:`EPOCH` (or the newest ``creationTimestamp`` in the scenario, if
   later) and every write the loops make is stamped with it.
2. One *pass* runs each loop once, in table order. Passes repeat at the same instant while they
   change the store (at most :data:`MAX_PASSES_PER_INSTANT`, else the scenario is reported as
   not converging).
3. When a pass changes nothing, the clock jumps to the earliest time any loop asked for; with no
   request, or past the time limit, the simulation ends.

A scenario may hold a ``descheduler/v1alpha2`` ``DeschedulerConfiguration`` document: it
becomes the ConfigMap the descheduler reads (``koordinator-system/koord-descheduler-config``),
checked first, so the descheduler runs on the simulated clock like the other loops. A
``kubescheduler.config.k8s.io/v1`` (or ``v1beta3``) ``KubeSchedulerConfiguration`` document
becomes the scheduler's ConfigMap (``koordinator-system/koord-scheduler-config``) the same way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apis import codec
from apis.duration import Duration, DurationError
from apis.errors import ApiError, DecodeError
from apis.kinds import Registry, default_registry
from apis.meta import Object
from controller.api.apply import apply as kubectl_apply
from controller.descheduler import config as descheduler_config
from controller.errors import StoreError
from controller.loops import LOOPS, ControlLoop, LoopContext, LoopFactory, build_loops
from controller.scheduler import config as scheduler_config
from controller.store.memory import MemoryStore

__all__ = [
    "EPOCH",
    "MAX_PASSES_PER_INSTANT",
    "SEED",
    "SimulationResult",
    "main",
    "scenario_objects",
    "simulate",
]

#: Simulated time starts here unless the scenario holds later creation timestamps.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
#: Seed of the store's uids and generated names: the same scenario gives the same output.
SEED = 0
#: Passes at one instant before a scenario is declared not converging.
MAX_PASSES_PER_INSTANT = 100


class SimulationError(RuntimeError):
    """The scenario cannot be simulated (the loops keep changing objects without time passing)."""


@dataclass(frozen=True, slots=True)
class SimulationResult:
    objects: tuple[Object, ...]
    started: datetime
    ended: datetime
    passes: int

    def to_list(self) -> dict[str, object]:
        """The ``v1`` ``List`` printed by the CLI."""
        return {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {"resourceVersion": ""},
            "items": [codec.to_builtins(obj) for obj in self.objects],
        }


class _SimClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def _start_time(objects: Sequence[Object]) -> datetime:
    stamps = [o.metadata.creation_timestamp for o in objects if o.metadata.creation_timestamp]
    latest = max(stamps, default=EPOCH)
    return max(latest, EPOCH)


def simulate(
    objects: Sequence[Object],
    *,
    max_time: timedelta = timedelta(hours=1),
    loops: Mapping[str, LoopFactory] | None = None,
    registry: Registry | None = None,
) -> SimulationResult:
    """Run the loops over ``objects``; pure apart from the memory-only store it builds."""
    registry = registry or default_registry()
    clock = _SimClock(_start_time(objects))
    store = MemoryStore(registry=registry, clock=clock, seed=SEED)
    try:
        for obj in objects:
            kubectl_apply(store, obj)  # as `koordpy apply` would, one after another
        started = clock.now
        deadline = started + max_time
        instances: list[ControlLoop] = build_loops(LOOPS if loops is None else loops)
        ctx = LoopContext(store=store, now=clock)
        passes = 0
        while True:
            wake: float | None = None
            for _ in range(MAX_PASSES_PER_INSTANT):
                before = store.resource_version
                waits = [w for w in (loop.reconcile(ctx) for loop in instances) if w is not None]
                passes += 1
                wake = min(waits, default=None)
                if store.resource_version == before:
                    break
            else:
                raise SimulationError(
                    f"control loops still changing objects after {MAX_PASSES_PER_INSTANT}"
                    f" passes at {clock.now.isoformat()}"
                )
            if wake is None:
                break
            next_time = clock.now + timedelta(seconds=max(wake, 0.001))
            if next_time > deadline:
                break
            clock.now = next_time
        order = {kind.key: index for index, kind in enumerate(registry)}
        everything = [obj for kind in registry for obj in store.list(kind)[0]]
        everything.sort(
            key=lambda o: (order[registry.for_object(o).key], o.metadata.namespace, o.metadata.name)
        )
        return SimulationResult(
            objects=tuple(everything), started=started, ended=clock.now, passes=passes
        )
    finally:
        store.close()


def _flatten(documents: Iterable[object]) -> Iterator[object]:
    """Documents, with the items of a ``kind: List`` (or ``*List``) in its place."""
    for doc in documents:
        items = doc.get("items") if isinstance(doc, dict) else None
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
            yield from items
        else:
            yield doc


def scenario_objects(
    text: str, *, source: str = "", registry: Registry | None = None
) -> list[Object]:
    """The objects of a scenario file; a DeschedulerConfiguration (KubeSchedulerConfiguration)
    document becomes the descheduler's (scheduler's) ConfigMap. The first bad document raises
    with its location."""
    objects: list[Object] = []
    for index, raw in enumerate(_flatten(codec.load_yaml_documents(text, source=source))):
        try:
            if descheduler_config.is_document(raw):
                try:
                    objects.append(descheduler_config.config_map(raw))
                except descheduler_config.DeschedulerConfigError as err:
                    raise DecodeError(str(err)) from None
            elif scheduler_config.is_document(raw):
                try:
                    objects.append(scheduler_config.config_map(raw))
                except scheduler_config.SchedulerConfigError as err:
                    raise DecodeError(str(err)) from None
            else:
                objects.append(codec.decode_object(raw, registry=registry))
        except DecodeError as err:
            raise err.located(source=source, index=index) from None
    return objects


def main(args: argparse.Namespace) -> int:
    """CLI: ``koordpy simulate -f SCENARIO [-o yaml|json] [--max-time 1h]``."""
    try:
        limit = Duration.parse(args.max_time)
    except DurationError as err:
        print(f"error: --max-time: {err}", file=sys.stderr)
        return 2
    if limit.nanoseconds <= 0:
        print(f"error: --max-time: must be positive, got {args.max_time!r}", file=sys.stderr)
        return 2
    source = args.filename
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as err:
        print(f"error: {source}: {err.strerror or err}", file=sys.stderr)
        return 1
    try:
        objects = scenario_objects(text, source=source)
        result = simulate(objects, max_time=timedelta(microseconds=limit.nanoseconds // 1000))
    except (ApiError, StoreError, SimulationError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    listing = result.to_list()
    if args.output == "json":
        sys.stdout.write(codec.encode_json(listing).decode() + "\n")
    else:
        sys.stdout.write(codec.dump_yaml(listing))
    return 0
