"""``python -m bench.store``: persisted writes per second through the controller API.

What is measured. The real gRPC server (:class:`controller.api.server.ApiServer`) listens on a
private unix socket over a :class:`controller.store.Store` whose state file lives in a
temporary directory (SQLite WAL, ``synchronous=NORMAL``). Client threads, each with its own
channel, send Apply requests of realistic Pod objects (batches of ``--batch``); a write is
counted when its Apply response arrived, that is once the store committed it to SQLite. The
server runs in a thread with its own event loop, in this process. Afterwards the store is
reopened from its file and every object is checked to be there.

Baseline. Raw ``sqlite3`` inserts of the same rows (the same JSON bodies the store wrote, the
same table and PRAGMAs), each row committed on its own: one acknowledged write = one commit,
the durability the API gives every write it acknowledges. The ratio is baseline rate / API
rate; the issue's targets are >= 5,000 writes/s through the API and a ratio <= 3.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from apis.codec import decode_object, encode_json
from apis.kinds import default_registry
from apis.meta import Object
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.client import Client
from controller.api.server import ApiServer
from controller.store import Store

__all__ = ["main"]

TARGET_WRITES_PER_SECOND = 5_000
TARGET_RATIO = 3.0

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
    """Store + API server on a unix socket, served by a background thread's event loop."""

    def __init__(self, state: Path, socket: Path) -> None:
        self.state = state
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
            self._ready.set()
            await self._stop.wait()

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.store", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--objects", type=int, default=20_000, help="Pods to write (default 20000)")
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--batch", type=int, default=100, help="objects per Apply (default 100)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="koordpy-bench-") as tmp:
        result = run(args.objects, args.clients, args.batch, Path(tmp))
    print(report(result, args.clients, args.batch))
    if result.reloaded != result.objects:
        print(
            f"error: {result.reloaded} objects reloaded, {result.objects} written", file=sys.stderr
        )
        return 1
    return 1 if args.check and not result.passed else 0


if __name__ == "__main__":
    sys.exit(main())
