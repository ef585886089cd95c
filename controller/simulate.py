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

What-if on a live cluster (``--from-cluster``): the cluster's objects are read once
(:mod:`controller.kube.snapshot`, read-only) and held in the memory-only store as the server
stored them (uid, resourceVersion and creationTimestamp kept: ``simulate(..., base=...)``);
the what-if file's objects are applied on top, as ``koordpy apply`` would (an object of the
same kind, namespace and name is replaced); the loops run as above, offline. What is printed
is what would change (:func:`controller.whatif.changes`): the pods bound and to which node,
the QueueUnits admitted, the pods removed (evicted, preempted, deleted), the Reservations that
became Available, the pods left pending and why, then every object created, changed or deleted,
compared field by field (resourceVersion, managedFields, generation and the timestamps of
conditions left out). ``-o table`` (the default with ``--from-cluster``) prints it for
people, ``-o yaml``/``json`` as one document. Without ``--from-cluster``, ``-o table`` prints
what the loops changed in the scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apis import codec
from apis.duration import Duration, DurationError
from apis.errors import ApiError, DecodeError
from apis.kinds import Registry, default_registry
from apis.meta import Object
from controller.api.apply import apply as kubectl_apply
from controller.cli.printing import format_age
from controller.descheduler import config as descheduler_config
from controller.errors import ControllerError, StoreError
from controller.loops import LOOPS, ControlLoop, LoopContext, LoopFactory, build_loops
from controller.scheduler import config as scheduler_config
from controller.store.memory import MemoryStore
from controller.whatif import Changes, changes, render_table

if TYPE_CHECKING:
    from controller.kube.snapshot import ClusterSnapshot

__all__ = [
    "EPOCH",
    "MAX_PASSES_PER_INSTANT",
    "SEED",
    "SimulationResult",
    "main",
    "report_document",
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
    #: Every object once the base was held and the objects applied, before any loop ran.
    loaded: tuple[Object, ...] = ()

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


def _start_time(objects: Iterable[Object]) -> datetime:
    stamps = [o.metadata.creation_timestamp for o in objects if o.metadata.creation_timestamp]
    latest = max(stamps, default=EPOCH)
    return max(latest, EPOCH)


def _hold(store: MemoryStore, registry: Registry, objects: Sequence[Object]) -> None:
    """``objects`` in ``store`` as another server stored them (metadata kept), kind by kind."""
    by_kind: dict[str, list[Object]] = {}
    for obj in objects:
        by_kind.setdefault(registry.for_object(obj).key, []).append(obj)
    for kind in registry:
        held = by_kind.get(kind.key)
        if held:
            store.mirror(kind, ((None, obj) for obj in held))


def _everything(store: MemoryStore, registry: Registry) -> tuple[Object, ...]:
    """Every object of ``store`` in the kind table's order, then by namespace and name."""
    return tuple(obj for kind in registry for obj in store.list(kind)[0])


def simulate(
    objects: Sequence[Object],
    *,
    base: Sequence[Object] = (),
    max_time: timedelta = timedelta(hours=1),
    loops: Mapping[str, LoopFactory] | None = None,
    registry: Registry | None = None,
) -> SimulationResult:
    """Run the loops over ``objects``; pure apart from the memory-only store it builds.

    ``base``: objects as a server stored them (a cluster's, with their uid, resourceVersion
    and creationTimestamp), held first exactly as they are, without admission; ``objects`` are
    then applied on top, one after another, as ``koordpy apply`` would."""
    registry = registry or default_registry()
    clock = _SimClock(_start_time(itertools.chain(base, objects)))
    store = MemoryStore(registry=registry, clock=clock, seed=SEED)
    try:
        _hold(store, registry, base)
        for obj in objects:
            kubectl_apply(store, obj)  # as `koordpy apply` would, one after another
        loaded = _everything(store, registry)
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
        return SimulationResult(
            objects=_everything(store, registry),
            started=started,
            ended=clock.now,
            passes=passes,
            loaded=loaded,
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


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def report_document(
    found: Changes, result: SimulationResult, *, cluster: ClusterSnapshot | None = None
) -> dict[str, Any]:
    """What ``-o yaml``/``json`` prints: the run's times and passes, the cluster read (with
    ``--from-cluster``), then the parts of ``found``."""
    document: dict[str, Any] = {
        "started": _stamp(result.started),
        "ended": _stamp(result.ended),
        "passes": result.passes,
    }
    if cluster is not None:
        document["cluster"] = {
            "server": cluster.server,
            "objects": len(cluster.objects),
            "leftOut": cluster.left_out,
        }
    document.update(codec.to_builtins(found))
    return document


def _header(result: SimulationResult, cluster: ClusterSnapshot | None, whatif: int) -> list[str]:
    span = format_age(result.ended - result.started)
    line = f"Simulated {span} from {_stamp(result.started)} ({result.passes} passes)"
    if cluster is None:
        return [f"{line} over {whatif} objects of the scenario."]
    lines = [
        f"{line} over {len(cluster.objects)} objects of {cluster.server}"
        f" and {whatif} of the what-if; nothing was written to the cluster."
    ]
    if cluster.left_out:
        lines.append(f"{cluster.left_out} objects of the cluster did not decode: left out.")
    return lines


# --- the command -----------------------------------------------------------------------------


def _read_cluster(args: argparse.Namespace) -> ClusterSnapshot:
    from controller.kube.snapshot import read_cluster  # only --from-cluster needs a client

    return asyncio.run(
        read_cluster(
            _kubeconfig(getattr(args, "kubeconfig", None)), context=getattr(args, "context", None)
        )
    )


def _kubeconfig(given: str | None) -> str | None:
    """Where a person's cluster is, as kubectl finds it: ``--kubeconfig``, else the first file
    of ``$KUBECONFIG``, else ``~/.kube/config`` when there is one; None (in-cluster) else."""
    if given:
        return given
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return listed[0]
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None


def main(args: argparse.Namespace) -> int:
    """CLI: ``koordpy simulate -f SCENARIO [-o yaml|json|table] [--max-time 1h]``, and
    ``koordpy simulate --from-cluster [--kubeconfig F] [--context C] -f WHATIF
    [-o table|yaml|json]`` (see the module docstring)."""
    try:
        limit = Duration.parse(args.max_time)
    except DurationError as err:
        print(f"error: --max-time: {err}", file=sys.stderr)
        return 2
    if limit.nanoseconds <= 0:
        print(f"error: --max-time: must be positive, got {args.max_time!r}", file=sys.stderr)
        return 2
    from_cluster = bool(getattr(args, "from_cluster", False))
    output = args.output or ("table" if from_cluster else "yaml")
    source = args.filename
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as err:
        print(f"error: {source}: {err.strerror or err}", file=sys.stderr)
        return 1
    try:
        objects = scenario_objects(text, source=source)
    except ApiError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    cluster: ClusterSnapshot | None = None
    if from_cluster:
        try:
            cluster = _read_cluster(args)
        except (ControllerError, TimeoutError, OSError) as err:
            print(f"error: reading the cluster: {err}", file=sys.stderr)
            return 1
        if cluster.left_out:
            print(
                f"warning: {cluster.left_out} objects of the cluster did not decode and are"
                " left out of the simulation",
                file=sys.stderr,
            )
    max_time = timedelta(microseconds=limit.nanoseconds // 1000)
    try:
        base = cluster.objects if cluster is not None else ()
        result = simulate(objects, base=base, max_time=max_time)
    except (ApiError, StoreError, SimulationError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if cluster is None and output != "table":
        listing = result.to_list()
        if output == "json":
            sys.stdout.write(codec.encode_json(listing).decode() + "\n")
        else:
            sys.stdout.write(codec.dump_yaml(listing))
        return 0
    before = cluster.objects if cluster is not None else result.loaded
    found = changes(before, result.objects, applied=result.loaded)
    if output == "table":
        sys.stdout.write(render_table(found, header=_header(result, cluster, len(objects))))
    elif output == "json":
        document = report_document(found, result, cluster=cluster)
        sys.stdout.write(codec.encode_json(document).decode() + "\n")
    else:
        sys.stdout.write(codec.dump_yaml(report_document(found, result, cluster=cluster)))
    return 0
