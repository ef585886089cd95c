"""``python -m bench.store``: persisted writes per second through the controller API.

What is measured. The real gRPC server (:class:`controller.api.server.ApiServer`) listens on a
private unix socket over a :class:`controller.store.sqlite.Store` whose state file lives in a
temporary directory (SQLite WAL, ``synchronous=NORMAL``). Client threads, each with its own
channel, send Apply requests of realistic Pod objects (batches of ``--batch``); a write is
counted when its Apply response arrived, that is once the store committed it to SQLite. The
server runs in a thread with its own event loop, in this process. Afterwards the store is
reopened from its file and every object is checked to be there.

Baseline. Raw ``sqlite3`` inserts of the same rows (the same JSON bodies the store wrote, the
same table and PRAGMAs), each row committed on its own: one acknowledged write = one commit,
the durability the API gives every write it acknowledges. The ratio is baseline rate / API
rate; the issue's targets are >= 5,000 writes/s through the API and a ratio <= 3.

Write latency at scale (the latency table). The same gRPC server over a state file, with every
control loop of the controller running in its event loop (:data:`controller.loops.LOOPS`, as
``koordpy up`` runs them), over ``--nodes`` nodes. The store is filled to 0, 10k, 50k and 100k
Pods (bound to the nodes and Running, in 20 namespaces; ``apply_many`` transactions; plus the
few hundred objects the rows before wrote), the loops are let settle and the heap is settled as
the daemon does once its store is loaded; then one client applies ``--samples`` new Pods
(scheduled, bound and started by the loops) and as many new ConfigMaps, alternating, one at a
time, each timed from request to response, the next sent once the loops are done with the last
(no store change for 50 ms): a write's latency is its own, not a queue behind the loop work of
the writes before. The loops wait 5 ms after a change before they run
(:data:`controller.loops.DEBOUNCE`), so the API answers a write before they react to it. Also
printed, not targets: "pod done", from a Pod's request to the loops' last write about it (its
scheduling, binding and start), and its growth; and "pods/s", new Pods four clients apply
together, one per Apply, while the loops schedule, bind and start them. Targets: p99 at 100k
within 2x of p99 at 0, and a Pod's p99 within 2x of a ConfigMap's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import msgspec

from apis.codec import decode_object, encode_json
from apis.core import Pod
from apis.kinds import default_registry
from apis.meta import Object, ObjectMeta
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.client import Client
from controller.api.server import ApiServer
from controller.loops import LoopRunner, build_loops
from controller.store.sqlite import Store
from runtime import lifecycle

__all__ = ["main"]

T = TypeVar("T")

TARGET_WRITES_PER_SECOND = 5_000
TARGET_RATIO = 3.0
#: Stored pods the latency table is measured at.
LATENCY_POINTS = (0, 10_000, 50_000, 100_000)
#: p99 at the most pods stored over p99 at none, and a Pod's p99 over a ConfigMap's.
TARGET_GROWTH = 2.0
TARGET_POD_RATIO = 2.0
_NAMESPACES = tuple(f"team-{i:02d}" for i in range(20))
_FILL_CHUNK = 5_000
#: Seconds without a store change after which a write's loop work is taken to be done.
_QUIET = 0.05
#: Clients of the latency table's pods/s column.
_CLIENTS = 4

_CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
)
_RESOURCE_SPEC = '{"preferredCPUBindPolicy":"SpreadByPCPUs"}'
_TEAMS = ("search", "ads", "recsys", "vision", "speech", "llm", "infra", "batch")
_QOS = ("LS", "LS", "BE", "LSR")


def make_pods(count: int, *, seed: int = 7) -> list[Object]:
    """Pods as a training/serving cluster holds them: labels, requests, affinity, tolerations."""
    rng = random.Random(seed)
    pods = []
    for index in range(count):
        team = _TEAMS[index % len(_TEAMS)]
        qos = _QOS[index % len(_QOS)]
        gpus = rng.choice((0, 0, 1, 2, 8))
        requests = {
            "cpu": f"{rng.choice((250, 500, 1000, 4000))}m",
            "memory": f"{rng.choice((1, 2, 8, 32))}Gi",
        }
        if gpus:
            requests["nvidia.com/gpu"] = str(gpus)
        raw = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{team}-worker-{index:07d}",
                "namespace": f"team-{team}",
                "labels": {
                    "app": f"{team}-worker",
                    "koordinator.sh/qosClass": qos,
                    "koordinator.sh/priority-class": "koord-batch" if qos == "BE" else "koord-prod",
                    "pod-template-hash": f"{rng.getrandbits(32):08x}",
                },
                "annotations": {
                    "scheduling.koordinator.sh/resource-spec": _RESOURCE_SPEC,
                },
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": f"{team}-job-{index // 16:05d}",
                        "uid": f"00000000-0000-4000-8000-{index // 16:012d}",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": "koord-batch" if qos == "BE" else "koord-prod",
                "priority": 5000 if qos == "BE" else 9000,
                "nodeSelector": {"node.koordinator.sh/gpu-model": "NVIDIA-H100"} if gpus else {},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "topology.kubernetes.io/zone",
                                            "operator": "In",
                                            "values": ["zone-a", "zone-b"],
                                        }
                                    ]
                                }
                            ]
                        }
                    }
                },
                "containers": [
                    {
                        "name": "worker",
                        "image": f"registry.example.com/{team}/worker:v1.{index % 20}",
                        "args": ["--rank", str(index % 64), "--epochs", "10"],
                        "env": [{"name": "TEAM", "value": team}],
                        "resources": {"requests": requests, "limits": requests},
                    }
                ],
            },
        }
        pods.append(decode_object(raw))
    return pods


class _Server:
    """Store + API server on a unix socket, served by a background thread's event loop;
    with ``loops``, every control loop of the controller runs beside them."""

    def __init__(self, state: Path, socket: Path, *, loops: bool = False) -> None:
        self.state = state
        self._with_loops = loops
        self.store: Store | None = None
        self.address = f"unix://{socket}"
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="bench-api", daemon=True)

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Store(path=self.state) as store, ApiServer(store, self.address, grace=1.0):
            self.store = store
            if not self._with_loops:
                self._ready.set()
                await self._stop.wait()
                return
            runner = asyncio.create_task(LoopRunner(store, build_loops()).run())
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner

    def call(self, fn: Callable[[Store], T]) -> T:
        """``fn(store)`` run in the server's event loop, between its other work."""
        loop, store = self._loop, self.store
        assert loop is not None
        assert store is not None

        async def run() -> T:
            return fn(store)

        return asyncio.run_coroutine_threadsafe(run(), loop).result()

    def quiet(self, *, quiet: float = _QUIET, limit: float = 60.0) -> float:
        """Wait until the store has not changed for ``quiet`` seconds; the
        ``time.perf_counter()`` of its last change (of the call, when none came)."""
        loop, store = self._loop, self.store
        assert loop is not None
        assert store is not None

        async def run() -> float:
            version, last = store.resource_version, time.perf_counter()
            deadline = last + limit
            while time.perf_counter() < deadline:
                try:
                    version = await asyncio.wait_for(store.changed(version), quiet)
                except TimeoutError:
                    return last
                last = time.perf_counter()
            raise RuntimeError(f"the control loops kept writing for {limit:.0f} s")

        return asyncio.run_coroutine_threadsafe(run(), loop).result()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join()
        if self._error is not None:
            raise self._error


def _chunks(items: Sequence[Object], size: int) -> Iterator[Sequence[Object]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def drive(address: str, pods: Sequence[Object], *, clients: int, batch: int) -> float:
    """Apply every pod through the API from ``clients`` threads; seconds taken.

    The request bodies are encoded before the clock starts: in this one process the client
    threads share the interpreter with the server, and encoding is the client's work, not the
    API's. Everything the server does (decode, validate, store, commit, respond) is timed.
    """
    requests = [
        pb.ApplyRequest(objects=[encode_json(obj) for obj in chunk], omit_objects=True)
        for chunk in _chunks(pods, batch)
    ]
    cursor = itertools.count()
    lock = threading.Lock()

    def worker() -> int:
        written = 0
        with grpc.insecure_channel(address, options=_CHANNEL_OPTIONS) as channel:
            apply = pb_grpc.ObjectsStub(channel).Apply
            while True:
                with lock:
                    index = next(cursor)
                if index >= len(requests):
                    return written
                response = apply(requests[index], timeout=120)
                for result in response.results:
                    if result.HasField("error") or result.outcome != pb.OUTCOME_CREATED:
                        raise RuntimeError(f"write failed: {result}")
                    written += 1

    with Client(address) as warm:  # the server answers before the clock starts
        warm.list(default_registry().resolve("nodes"))
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        written = sum(f.result() for f in [pool.submit(worker) for _ in range(clients)])
    elapsed = time.perf_counter() - started
    if written != len(pods):
        raise RuntimeError(f"{written} writes acknowledged, {len(pods)} sent")
    return elapsed


def stored_rows(state: Path) -> list[tuple[str, str, str, bytes]]:
    with sqlite3.connect(state) as con:
        return list(con.execute("SELECT kind, namespace, name, data FROM objects"))


def baseline(rows: Sequence[tuple[str, str, str, bytes]], path: Path) -> float:
    """Insert the rows with raw sqlite3, one committed transaction each; seconds taken."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA synchronous = NORMAL")
        con.execute(
            "CREATE TABLE objects (kind TEXT NOT NULL, namespace TEXT NOT NULL,"
            " name TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (kind, namespace, name))"
        )
        insert = "INSERT INTO objects (kind, namespace, name, data) VALUES (?, ?, ?, ?)"
        started = time.perf_counter()
        for row in rows:
            con.execute("BEGIN")
            con.execute(insert, row)
            con.execute("COMMIT")
        elapsed = time.perf_counter() - started
    finally:
        con.close()
    return elapsed


@dataclass(frozen=True, slots=True)
class Result:
    objects: int
    api_seconds: float
    reloaded: int
    rows: int
    baseline_seconds: float

    @property
    def api_rate(self) -> float:
        return self.objects / self.api_seconds

    @property
    def baseline_rate(self) -> float:
        return self.rows / self.baseline_seconds

    @property
    def ratio(self) -> float:
        return self.baseline_rate / self.api_rate

    @property
    def passed(self) -> bool:
        return self.api_rate >= TARGET_WRITES_PER_SECOND and self.ratio <= TARGET_RATIO


def run(objects: int, clients: int, batch: int, workdir: Path) -> Result:
    pods = make_pods(objects)
    state = workdir / "state.db"
    server = _Server(state, workdir / "api.sock")
    server.start()
    try:
        api_seconds = drive(server.address, pods, clients=clients, batch=batch)
    finally:
        server.stop()
    with Store(path=state) as reopened:
        reloaded = len(reopened.list(default_registry().resolve("pods"))[0])
    rows = stored_rows(state)
    baseline_seconds = baseline(rows, workdir / "baseline.db")
    return Result(objects, api_seconds, reloaded, len(rows), baseline_seconds)


def report(result: Result, clients: int, batch: int) -> str:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    lines = [
        f"store benchmark: {result.objects} Pod objects, {clients} client threads,"
        f" Apply batches of {batch}",
        "API (gRPC unix socket -> store group commit -> SQLite WAL, synchronous=NORMAL)",
        f"  objects              {result.objects}",
        f"  seconds              {result.api_seconds:.2f}",
        f"  persisted writes/s   {result.api_rate:,.0f}",
        f"  reloaded from disk   {result.reloaded}",
        "baseline (raw sqlite3, same rows and PRAGMAs, one INSERT + COMMIT per row)",
        f"  rows                 {result.rows}",
        f"  seconds              {result.baseline_seconds:.2f}",
        f"  inserts/s            {result.baseline_rate:,.0f}",
        f"ratio baseline/API     {result.ratio:.2f}",
        f"target: >= {TARGET_WRITES_PER_SECOND:,} writes/s through the API:"
        f" {verdict(result.api_rate >= TARGET_WRITES_PER_SECOND)}",
        f"target: ratio <= {TARGET_RATIO:g}: {verdict(result.ratio <= TARGET_RATIO)}",
    ]
    return "\n".join(lines)


# -- write latency at scale --------------------------------------------------------------------


def latency_nodes(count: int) -> list[Object]:
    """Nodes with room for every pod of the table (the pods are what grows, not the nodes)."""
    return [
        decode_object(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"node-{i:04d}",
                    "labels": {
                        "kubernetes.io/hostname": f"node-{i:04d}",
                        "topology.kubernetes.io/zone": ("zone-a", "zone-b")[i % 2],
                    },
                },
                "status": {
                    "capacity": {"cpu": "100000", "memory": "100Ti", "pods": "100000"},
                    "allocatable": {"cpu": "100000", "memory": "100Ti", "pods": "100000"},
                },
            }
        )
        for i in range(count)
    ]


def _latency_pod(name: str, namespace: str) -> Pod:
    pod = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app": "worker", "koordinator.sh/qosClass": "LS"},
                "annotations": {"scheduling.koordinator.sh/resource-spec": _RESOURCE_SPEC},
            },
            "spec": {
                "schedulerName": "koord-scheduler",
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.example.com/worker:v1",
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"cpu": "100m", "memory": "128Mi"},
                        },
                    }
                ],
            },
        }
    )
    assert isinstance(pod, Pod)
    return pod


def stored_pods(start: int, stop: int, nodes: int) -> list[Object]:
    """Pods ``start``..``stop`` as the cluster holds them: bound, Running, 20 namespaces."""
    template = _latency_pod("template", _NAMESPACES[0])
    running = msgspec.structs.replace(template.status, phase="Running")
    pods: list[Object] = []
    for index in range(start, stop):
        meta = ObjectMeta(
            name=f"stored-{index:07d}",
            namespace=_NAMESPACES[index % len(_NAMESPACES)],
            labels=template.metadata.labels,
            annotations=template.metadata.annotations,
        )
        spec = msgspec.structs.replace(template.spec, node_name=f"node-{index % nodes:04d}")
        pods.append(msgspec.structs.replace(template, metadata=meta, spec=spec, status=running))
    return pods


def _percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass(frozen=True, slots=True)
class LatencyRow:
    stored: int
    pod_p50: float
    pod_p99: float
    config_map_p50: float
    config_map_p99: float
    #: a Pod's write until the loops were done with it (scheduled, bound, started)
    pod_done_p50: float
    pod_done_p99: float
    #: new Pods a second that :data:`_CLIENTS` clients apply together, one per Apply, back to
    #: back, the loops scheduling, binding and starting them meanwhile
    pods_per_second: float


def _time_applies(
    server: _Server, apply: Callable[..., object], objects: Sequence[Object]
) -> tuple[list[float], list[float]]:
    """Apply each object alone on a settled controller; milliseconds each from request to
    response, and from request to the loops' last write about it."""
    answered, done = [], []
    for obj in objects:
        request = pb.ApplyRequest(objects=[encode_json(obj)], omit_objects=True)
        started = time.perf_counter()
        response = apply(request, timeout=120)
        answered.append((time.perf_counter() - started) * 1000.0)
        for result in response.results:  # type: ignore[attr-defined]
            if result.HasField("error") or result.outcome != pb.OUTCOME_CREATED:
                raise RuntimeError(f"write failed: {result}")
        done.append((server.quiet() - started) * 1000.0)
    return answered, done


def _config_map(name: str, namespace: str) -> Object:
    return decode_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"rank": name},
        }
    )


def run_latency(
    points: Sequence[int], *, nodes: int, samples: int, workdir: Path
) -> list[LatencyRow]:
    """The latency table: one row per count of stored pods in ``points`` (ascending)."""
    server = _Server(workdir / "latency.db", workdir / "latency.sock", loops=True)
    server.start()
    rows: list[LatencyRow] = []
    try:
        server.call(lambda store: store.apply_many(latency_nodes(nodes)))
        stored = 0
        with grpc.insecure_channel(server.address, options=_CHANNEL_OPTIONS) as channel:
            apply = pb_grpc.ObjectsStub(channel).Apply
            for point in points:
                for start in range(stored, point, _FILL_CHUNK):
                    chunk = stored_pods(start, min(point, start + _FILL_CHUNK), nodes)
                    server.call(lambda store, chunk=chunk: store.apply_many(chunk))  # type: ignore[misc]
                stored = point
                server.quiet(quiet=0.5, limit=300.0)
                server.call(lambda _: lifecycle.settle_heap())
                names = [(f"new-{point}-{i:05d}", _NAMESPACES[i % 20]) for i in range(samples)]
                server.quiet()
                # Pods and ConfigMaps alternate, so that both meet the same conditions.
                mixed = [obj for name in names for obj in (_latency_pod(*name), _config_map(*name))]
                answered, done = _time_applies(server, apply, mixed)
                pod_ms, pod_done_ms = answered[0::2], done[0::2]
                config_map_ms = answered[1::2]
                together = [
                    _latency_pod(f"many-{point}-{i:05d}", _NAMESPACES[i % 20])
                    for i in range(samples)
                ]
                seconds = drive(server.address, together, clients=_CLIENTS, batch=1)
                server.quiet(quiet=0.5, limit=300.0)
                rows.append(
                    LatencyRow(
                        stored=point,
                        pod_p50=_percentile(pod_ms, 0.5),
                        pod_p99=_percentile(pod_ms, 0.99),
                        config_map_p50=_percentile(config_map_ms, 0.5),
                        config_map_p99=_percentile(config_map_ms, 0.99),
                        pod_done_p50=_percentile(pod_done_ms, 0.5),
                        pod_done_p99=_percentile(pod_done_ms, 0.99),
                        pods_per_second=len(together) / seconds,
                    )
                )
        unbound = server.call(
            lambda store: [
                pod.metadata.name
                for pod in store.list(default_registry().resolve("pods"))[0]
                if isinstance(pod, Pod) and not pod.spec.node_name
            ]
        )
        if unbound:
            raise RuntimeError(f"{len(unbound)} pods left unscheduled, e.g. {unbound[0]}")
    finally:
        server.stop()
    return rows


def latency_verdicts(rows: Sequence[LatencyRow]) -> tuple[bool, bool]:
    """(p99 at the most pods stored within TARGET_GROWTH of p99 at the fewest, Pods and
    ConfigMaps both; every row's Pod p99 within TARGET_POD_RATIO of its ConfigMap p99)."""
    first, last = rows[0], rows[-1]
    growth = (
        last.pod_p99 <= TARGET_GROWTH * first.pod_p99
        and last.config_map_p99 <= TARGET_GROWTH * first.config_map_p99
    )
    pod_ratio = all(row.pod_p99 <= TARGET_POD_RATIO * row.config_map_p99 for row in rows)
    return growth, pod_ratio


def latency_report(rows: Sequence[LatencyRow], *, nodes: int, samples: int) -> str:
    def verdict(ok: bool) -> str:
        return "PASS" if ok else "FAIL"

    first = rows[0]
    lines = [
        "write latency: one object per Apply through the gRPC API with every control loop"
        f" running, each on a settled controller; {nodes} nodes, {samples} writes of each kind"
        " per row (ms); 'pod done': until the loops' last write about the pod (scheduled,"
        f" bound, started); 'pods/s': {_CLIENTS} clients applying new pods together",
        f"  {'pods stored':>11}  {'pod p50':>8} {'pod p99':>8}  {'cm p50':>8} {'cm p99':>8}"
        f"  {'pod p99/@0':>10} {'cm p99/@0':>9}  {'pod/cm p99':>10}"
        f"  {'done p50':>8} {'done p99':>8} {'done p99/@0':>11}  {'pods/s':>7}",
    ]
    lines.extend(
        f"  {row.stored:>11,}  {row.pod_p50:>8.2f} {row.pod_p99:>8.2f}"
        f"  {row.config_map_p50:>8.2f} {row.config_map_p99:>8.2f}"
        f"  {row.pod_p99 / first.pod_p99:>10.2f}"
        f" {row.config_map_p99 / first.config_map_p99:>9.2f}"
        f"  {row.pod_p99 / row.config_map_p99:>10.2f}"
        f"  {row.pod_done_p50:>8.2f} {row.pod_done_p99:>8.2f}"
        f" {row.pod_done_p99 / first.pod_done_p99:>11.2f}  {row.pods_per_second:>7.0f}"
        for row in rows
    )
    growth, pod_ratio = latency_verdicts(rows)
    lines += [
        f"target: p99 at {rows[-1].stored:,} pods <= {TARGET_GROWTH:g}x p99 at {first.stored:,}:"
        f" {verdict(growth)}",
        f"target: pod p99 <= {TARGET_POD_RATIO:g}x ConfigMap p99: {verdict(pod_ratio)}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.store", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--objects", type=int, default=20_000, help="Pods to write (default 20000)")
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--batch", type=int, default=100, help="objects per Apply (default 100)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--points",
        type=lambda text: sorted(int(n) for n in text.split(",")),
        default=list(LATENCY_POINTS),
        help="stored pods of the latency table's rows (default 0,10000,50000,100000)",
    )
    parser.add_argument("--nodes", type=int, default=20, help="nodes of the latency table")
    parser.add_argument(
        "--samples", type=int, default=200, help="writes of each kind per latency row"
    )
    parser.add_argument("--no-latency", action="store_true", help="skip the latency table")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="koordpy-bench-") as tmp:
        result = run(args.objects, args.clients, args.batch, Path(tmp))
        print(report(result, args.clients, args.batch), flush=True)
        rows = []
        if not args.no_latency:
            rows = run_latency(
                args.points, nodes=args.nodes, samples=args.samples, workdir=Path(tmp)
            )
            print(latency_report(rows, nodes=args.nodes, samples=args.samples))
    if result.reloaded != result.objects:
        print(
            f"error: {result.reloaded} objects reloaded, {result.objects} written", file=sys.stderr
        )
        return 1
    passed = result.passed and (not rows or all(latency_verdicts(rows)))
    return 1 if args.check and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
