"""``python -m bench.reflector``: listing pods from a real kube-apiserver into koordpy's Structs.

What is measured. A control plane of the test cluster (:mod:`hack.kube`, binaries from ``make
kube-bin``) holding ``--pods`` pods (5,000, as :func:`bench.store.make_pods` makes them: labels,
annotations, requests, affinity, tolerations; the API server adds its defaults and
``managedFields``). Then, ``--repeat`` times (the fastest counts):

- **reflector**: a :class:`~runtime.kube.reflector.Reflector` of Pods from start until its
  first list is in: chunked LIST (500 a page) and every pod decoded into
  :class:`~apis.core.Pod`, as the controller's informers do;
- **peer**: the same pages fetched with the same client and each parsed with ``json.loads``
  (what a dict-based client does at the least).

The ratio is reflector over peer: decoding into typed Structs (checked, every quantity
parsed) costs about what ``json.loads`` costs into dicts, so the ratio should stay near 1
(the target: <= 1.5). Also printed: the decode alone, on the page bodies already fetched
(:func:`apis.codec.decode_json` per pod against ``json.loads`` per page), without the server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

from apis import codec
from apis.core import Pod, PodStatus
from apis.kinds import default_registry
from bench.store import make_pods
from controller.kube.client import ClientOptions, KubeClient, connect, resource_path
from hack.kube import start_cluster, stop_cluster
from runtime.kube.reflector import Reflector

__all__ = ["main"]

TARGET_RATIO = 1.5
PAGE = 500
#: Requests the filling keeps in flight.
_FILL_CONCURRENCY = 32
#: Koordinator's classes the pods name (admission refuses a pod naming a missing one).
_PRIORITY_CLASSES = {"koord-prod": 9000, "koord-batch": 5000}
_FAST = ClientOptions(qps=10_000.0, burst=10_000, timeout=120.0)


class _Page(msgspec.Struct):
    items: list[msgspec.Raw] = []
    metadata: dict[str, object] = {}


async def _fill(client: KubeClient, count: int) -> None:
    pods = make_pods(count)
    kind = default_registry().for_type(Pod)
    namespaces = sorted({p.metadata.namespace for p in pods})
    for namespace in namespaces:
        body: dict[str, object] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace},
        }
        await client.post("/api/v1/namespaces", json.dumps(body).encode())
    for name, value in _PRIORITY_CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        await client.post("/apis/scheduling.k8s.io/v1/priorityclasses", json.dumps(body).encode())
    slots = asyncio.Semaphore(_FILL_CONCURRENCY)

    async def one(pod: Pod) -> None:
        # Pending, unbound and unowned: the pod GC removes pods bound to missing nodes and
        # the garbage collector those whose owner is missing.
        pod = msgspec.structs.replace(
            pod,
            metadata=msgspec.structs.replace(pod.metadata, owner_references=()),
            spec=msgspec.structs.replace(pod.spec, node_name=""),
            status=PodStatus(),
        )
        async with slots:
            await client.post(
                resource_path(kind, pod.metadata.namespace), codec.encode_json(pod), kind=kind
            )

    # The namespaces' default service accounts come first (pods are refused until they do).
    await asyncio.sleep(2.0)
    await asyncio.gather(*(one(p) for p in pods if isinstance(p, Pod)))


async def _pages(client: KubeClient) -> list[bytes]:
    bodies: list[bytes] = []
    token = ""
    while True:
        params = {"limit": str(PAGE)}
        if token:
            params["continue"] = token
        body = await client.get("/api/v1/pods", params=params)
        bodies.append(body)
        token = str(json.loads(body)["metadata"].get("continue", ""))
        if not token:
            return bodies


async def _peer(client: KubeClient) -> tuple[float, int]:
    started = time.perf_counter()
    count = 0
    token = ""
    while True:
        params = {"limit": str(PAGE)}
        if token:
            params["continue"] = token
        page = json.loads(await client.get("/api/v1/pods", params=params))
        count += len(page["items"])
        token = page["metadata"].get("continue", "")
        if not token:
            return time.perf_counter() - started, count


async def _reflector(client: KubeClient) -> tuple[float, int]:
    kind = default_registry().for_type(Pod)
    reflector = Reflector(client, kind, page_size=PAGE)
    started = time.perf_counter()
    task = asyncio.create_task(reflector.run())
    try:
        await reflector.synced.wait()
        elapsed = time.perf_counter() - started
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return elapsed, len(reflector.objects)


def _decode_only(bodies: Sequence[bytes]) -> tuple[float, float, int]:
    started = time.perf_counter()
    for body in bodies:
        json.loads(body)
    loads = time.perf_counter() - started
    decoder = msgspec.json.Decoder(_Page)
    started = time.perf_counter()
    count = 0
    for body in bodies:
        for raw in decoder.decode(body).items:
            codec.decode_json(raw, Pod)
            count += 1
    return time.perf_counter() - started, loads, count


async def _run(kubeconfig: Path, pods: int, repeat: int) -> int:
    async with await connect(kubeconfig, options=_FAST) as client:
        started = time.perf_counter()
        await _fill(client, pods)
        print(f"filled {pods} pods in {time.perf_counter() - started:.1f}s", flush=True)
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(repeat):
            elapsed, listed = await _reflector(client)
            ours.append(elapsed)
            peer, counted = await _peer(client)
            theirs.append(peer)
        if listed != pods or counted != pods:
            print(f"expected {pods} pods, listed {listed} and {counted}", file=sys.stderr)
            return 1
        bodies = await _pages(client)
    decode, loads, decoded = min(
        (_decode_only(bodies) for _ in range(repeat)), key=lambda run: run[0]
    )
    size = sum(len(b) for b in bodies)
    best, peer_best = min(ours), min(theirs)
    ratio = best / peer_best
    print(f"pods listed                 {pods} in {len(bodies)} pages, {size / 2**20:.1f} MiB")
    print(f"reflector (list + decode)   {best * 1000:8.1f} ms  {pods / best:10.0f} pods/s")
    print(
        f"peer (list + json.loads)    {peer_best * 1000:8.1f} ms  {pods / peer_best:10.0f} pods/s"
    )
    print(f"ratio reflector/peer        {ratio:8.2f}    (target <= {TARGET_RATIO})")
    print(
        f"decode alone: Structs {decode * 1000:.1f} ms for {decoded} pods,"
        f" json.loads {loads * 1000:.1f} ms, ratio {decode / loads:.2f}"
    )
    return 0 if ratio <= TARGET_RATIO else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reflector", description=__doc__)
    parser.add_argument("--pods", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-reflector-") as tmp:
        directory = Path(tmp)
        cluster = start_cluster(directory, timeout=120.0)
        try:
            return asyncio.run(_run(cluster.kubeconfig, args.pods, args.repeat))
        finally:
            stop_cluster(directory)


if __name__ == "__main__":
    sys.exit(main())
