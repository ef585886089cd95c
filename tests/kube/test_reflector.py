"""The Kubernetes transport against a real API server: the client and the reflector.

Each test that writes works in a namespace of its own, so they share the session's cluster.
Nothing waits by sleeping: a test waits for what the reflector reports (its change counter,
its ``synced`` event) or for a watch event, each with a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx2
import lightkube
import pytest
import yaml

from apis.core import ConfigMap, Event, Node, Pod, container_requests
from apis.kinds import Kind, default_registry
from controller.errors import (
    AlreadyExists,
    ConfigError,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    NotFound,
    TransientError,
)
from controller.kube.client import (
    ERRORS,
    ApiError,
    ClientOptions,
    KubeClient,
    RateLimiter,
    ServerUnavailable,
    connect,
    resource_path,
)
from hack.kube import Cluster
from runtime.kube.client import status_error as base_status_error
from runtime.kube.errors import KubeError
from runtime.kube.reflector import Backoff, Delta, Key, Reflector

pytestmark = pytest.mark.kube

T = TypeVar("T")

REGISTRY = default_registry()
CONFIGMAPS = REGISTRY.for_type(ConfigMap)
EVENTS = REGISTRY.for_type(Event)
PODS = REGISTRY.for_type(Pod)
NODES = REGISTRY.for_type(Node)
#: Tests' own writes are not what is measured: no client-side limit to speak of.
FAST = ClientOptions(qps=1000.0, burst=1000)
WAIT = 30.0


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def event(name: str, message: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "p"},
        "reason": "Test",
        "message": message,
        "type": "Normal",
    }


async def create(client: KubeClient, kind: Kind, namespace: str, body: Any) -> dict[str, Any]:
    created: dict[str, Any] = json.loads(
        await client.post(resource_path(kind, namespace), dumps(body), kind=kind)
    )
    return created


# --- fixtures --------------------------------------------------------------------------------


async def service_account_made(client: KubeClient, namespace: str) -> None:
    """Wait (on a watch) until the namespace's ``default`` service account exists: pods are
    refused before."""
    params: dict[str, str | int] = {
        "watch": "true",
        "fieldSelector": "metadata.name=default",
        "timeoutSeconds": 60,
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
    async with asyncio.timeout(WAIT), client.stream(path, params=params) as lines:
        async for batch in lines:
            if any(json.loads(line)["type"] == "ADDED" for line in batch):
                return
    pytest.fail(f"no default service account in {namespace}")


class Running:
    """A reflector's :meth:`Reflector.run` as a task, and waits that end early when it dies."""

    def __init__(self, reflector: Reflector) -> None:
        self.reflector = reflector
        self.task = asyncio.create_task(reflector.run(), name=f"reflector {reflector.name}")

    async def _race(self, waited: Awaitable[T], what: str, within: float) -> T:
        waiter = asyncio.ensure_future(waited)
        try:
            done, _ = await asyncio.wait(
                {waiter, self.task}, timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if not waiter.done():
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter
        if waiter in done:
            return waiter.result()
        if self.task in done:
            self.task.result()  # raises what ended it
            pytest.fail(f"{self.reflector} stopped before {what}")
        pytest.fail(f"timed out after {within:.1f}s waiting for {what}")

    async def synced(self, within: float = WAIT) -> None:
        await self._race(self.reflector.synced.wait(), "the first list", within)

    async def until(self, what: str, done: Callable[[], bool], within: float = WAIT) -> None:
        """Wait until ``done()`` holds, checking after each batch of changes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        version = self.reflector.version
        while not done():
            left = deadline - loop.time()
            if left <= 0:
                pytest.fail(f"timed out after {within}s waiting for {what}")
            version = await self._race(self.reflector.changed_after(version), what, left)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@contextlib.asynccontextmanager
async def running(reflector: Reflector) -> AsyncIterator[Running]:
    run = Running(reflector)
    try:
        yield run
    finally:
        await run.stop()


def deltas_of(batches: Sequence[Sequence[Delta]], key: Key) -> list[Delta]:
    return [delta for batch in batches for delta in batch if delta.key == key]


# --- the list --------------------------------------------------------------------------------


async def test_a_list_longer_than_a_page_arrives_whole_and_each_object_once(
    client: KubeClient, namespace: str
) -> None:
    names = [f"cm-{n:04d}" for n in range(1200)]
    gate = asyncio.Semaphore(32)

    async def make(name: str) -> None:
        async with gate:
            await create(client, CONFIGMAPS, namespace, configmap(name, n=name[3:]))

    await asyncio.gather(*(make(name) for name in names))

    batches: list[Sequence[Delta]] = []
    reflector = Reflector(
        client, CONFIGMAPS, namespace=namespace, page_size=500, on_change=batches.append
    )
    async with running(reflector) as run:
        await run.synced()
    # 1,200 of ours and the namespace's kube-root-ca.crt: three pages of at most 500.
    assert (reflector.lists, reflector.last_list_pages) == (1, 3)
    ours = [delta for delta in batches[0] if delta.key[1].startswith("cm-")]
    assert [delta.key for delta in ours] == [(namespace, name) for name in names]
    assert all(delta.before is None and type(delta.after) is ConfigMap for delta in ours)
    held = reflector.objects
    assert {key for key in held if key[1].startswith("cm-")} == {d.key for d in ours}
    sample = reflector.get("cm-0042", namespace)
    assert isinstance(sample, ConfigMap)
    assert (sample.data, sample.metadata.namespace) == ({"n": "0042"}, namespace)
    assert reflector.resource_version


# --- the watch -------------------------------------------------------------------------------


async def test_changes_after_the_list_arrive_by_watch_in_order(
    client: KubeClient, namespace: str
) -> None:
    batches: list[Sequence[Delta]] = []
    reflector = Reflector(client, CONFIGMAPS, namespace=namespace, on_change=batches.append)
    key = (namespace, "watched")
    path = resource_path(CONFIGMAPS, namespace, "watched")
    async with running(reflector) as run:
        await run.synced()
        listed_at = reflector.resource_version
        created = await create(client, CONFIGMAPS, namespace, configmap("watched", step="1"))
        updated = json.loads(
            await client.put(path, dumps({**created, "data": {"step": "2"}}), kind=CONFIGMAPS)
        )
        await client.delete(path, kind=CONFIGMAPS)
        await run.until("the delete", lambda: len(deltas_of(batches, key)) == 3)
    first, second, third = deltas_of(batches, key)
    assert first.before is None
    assert isinstance(first.after, ConfigMap)
    assert (first.after.data, first.after.metadata.resource_version) == (
        {"step": "1"},
        created["metadata"]["resourceVersion"],
    )
    assert second.before is first.after
    assert isinstance(second.after, ConfigMap)
    assert (second.after.data, second.after.metadata.resource_version) == (
        {"step": "2"},
        updated["metadata"]["resourceVersion"],
    )
    assert second.after.metadata.uid == created["metadata"]["uid"]
    assert second.after is third.before
    assert third.after is None
    assert reflector.get("watched", namespace) is None
    assert reflector.lists == 1  # all of it by the watch
    assert reflector.resource_version != listed_at


async def test_pods_and_nodes_decode_into_their_structs(
    client: KubeClient, namespace: str, kube_cluster: Cluster
) -> None:
    node_name = f"kwok-{namespace}"
    await service_account_made(client, namespace)
    pods = Reflector(client, PODS, namespace=namespace)
    nodes = Reflector(client, NODES, field_selector=f"metadata.name={node_name}")
    try:
        async with running(pods) as pods_run, running(nodes) as nodes_run:
            await asyncio.gather(pods_run.synced(), nodes_run.synced())
            await client.post(
                "/api/v1/nodes",
                dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": node_name, "labels": {"type": "kwok"}},
                        "status": {
                            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        },
                    }
                ),
            )
            resources = {"requests": {"cpu": "100m", "memory": "64Mi"}}
            created = await create(
                client,
                PODS,
                namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "runs", "labels": {"app": "x"}},
                    "spec": {
                        "nodeName": node_name,
                        "containers": [
                            {"name": "main", "image": "busybox", "resources": resources}
                        ],
                    },
                },
            )

            def ready() -> bool:
                node = nodes.get(node_name)
                return isinstance(node, Node) and node.is_ready

            def pod_running() -> bool:
                pod = pods.get("runs", namespace)
                return isinstance(pod, Pod) and pod.status.phase == "Running"

            await asyncio.gather(
                nodes_run.until(f"node {node_name} Ready", ready),
                pods_run.until("the pod to run", pod_running),
            )
        node, pod = nodes.get(node_name), pods.get("runs", namespace)
        assert isinstance(node, Node)
        assert isinstance(pod, Pod)
        assert node.metadata.labels["type"] == "kwok"
        assert dict(node.allocatable) == {"cpu": 8000, "memory": 32 * 2**30, "pods": 110}
        assert pod.metadata.uid == created["metadata"]["uid"]
        assert pod.spec.node_name == node_name
        assert pod.spec.service_account_name == "default"  # the server's defaults decode too
        assert pod.spec.containers[0].image == "busybox"
        assert dict(container_requests(pod.spec.containers[0])) == {
            "cpu": 100,
            "memory": 64 * 2**20,
        }
        assert pod.status.pod_ip
        assert pod.labels == {"app": "x"}
        assert (pods.decode_errors, nodes.decode_errors) == (0, 0)
        assert list(nodes.objects) == [("", node_name)]
    finally:
        await client.delete(f"/api/v1/nodes/{node_name}")


# --- relist after 410 Gone -------------------------------------------------------------------


async def etcd_compact(etcd_url: str, revision: int) -> None:
    """Compact etcd's history up to ``revision`` (its v3 JSON gateway)."""
    async with httpx2.AsyncClient(trust_env=False) as etcd:
        answer = await etcd.post(
            f"{etcd_url}/v3/kv/compaction", json={"revision": revision, "physical": True}
        )
    assert answer.status_code == 200, answer.text


async def test_a_relist_after_410_keeps_unchanged_objects_identical(
    client: KubeClient, namespace: str, kube_cluster: Cluster
) -> None:
    """Events: the API server keeps no watch cache for them, so a watch from a version etcd
    compacted away is refused (an ERROR event with code 410) and the reflector relists."""
    for n in range(4):
        await create(client, EVENTS, namespace, event(f"e{n}", f"first {n}", namespace))
    batches: list[Sequence[Delta]] = []
    reflector = Reflector(client, EVENTS, namespace=namespace, on_change=batches.append)
    async with running(reflector) as run:
        await run.synced()
    before = dict(reflector.objects)
    assert sorted(name for _, name in before) == ["e0", "e1", "e2", "e3"]
    stale = reflector.resource_version

    # Meanwhile, with nobody watching: one changed, one deleted, one made; then etcd forgets.
    e1 = json.loads(await client.get(resource_path(EVENTS, namespace, "e1")))
    await client.put(resource_path(EVENTS, namespace, "e1"), dumps({**e1, "message": "second 1"}))
    await client.delete(resource_path(EVENTS, namespace, "e2"))
    made = await create(client, EVENTS, namespace, event("e4", "first 4", namespace))
    await etcd_compact(kube_cluster.etcd_url, int(made["metadata"]["resourceVersion"]))

    batches.clear()
    async with running(reflector) as run:  # resumes watching from the stale version
        await run.until("the relist", lambda: reflector.lists == 2)
    assert reflector.watches >= 2
    assert reflector.resource_version != stale
    after = reflector.objects
    for name in ("e0", "e3"):
        assert after[(namespace, name)] is before[(namespace, name)]
    changed = after[(namespace, "e1")]
    assert isinstance(changed, Event)
    assert changed.message == "second 1"
    assert (namespace, "e2") not in after
    assert isinstance(after[(namespace, "e4")], Event)
    relisted = {delta.key: delta for delta in batches[0]}
    assert sorted(name for _, name in relisted) == ["e1", "e2", "e4"]
    assert relisted[(namespace, "e1")].before is before[(namespace, "e1")]
    assert relisted[(namespace, "e2")].after is None
    assert relisted[(namespace, "e4")].before is None


# --- reconnecting ----------------------------------------------------------------------------


class CuttableProxy:
    """A TCP proxy to the API server whose connections a test can cut, and then refuse new
    ones until :meth:`reopen` (what a network failure looks like to a client)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.refusing = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.accepted = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if self.refusing:
                writer.transport.abort()
                return
            self.accepted += 1
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
            pair = {writer, up_writer}
            self._writers |= pair
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                self._writers -= pair
                for end in pair:
                    end.transport.abort()
        finally:
            self._handlers.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()

    def cut(self) -> None:
        """Break every connection now and refuse new ones."""
        self.refusing = True
        for writer in list(self._writers):
            writer.transport.abort()

    def reopen(self) -> None:
        self.refusing = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)


async def test_a_broken_watch_reconnects_and_resumes_without_a_relist(
    client: KubeClient, namespace: str, kube_cluster: Cluster, tmp_path: Path
) -> None:
    server = urlsplit(kube_cluster.server)
    assert server.hostname is not None
    assert server.port is not None
    proxy = CuttableProxy(server.hostname, server.port)
    port = await proxy.start()
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    proxied_config = tmp_path / "proxied.kubeconfig"
    proxied_config.write_text(yaml.safe_dump(config))
    batches: list[Sequence[Delta]] = []
    try:
        async with await connect(proxied_config) as proxied:
            reflector = Reflector(
                proxied,
                CONFIGMAPS,
                namespace=namespace,
                on_change=batches.append,
                backoff=Backoff(initial=0.05, maximum=0.2),
            )
            async with running(reflector) as run:
                await run.synced()
                await create(client, CONFIGMAPS, namespace, configmap("before"))
                await run.until("before", lambda: reflector.get("before", namespace) is not None)
                connections = proxy.accepted
                proxy.cut()
                await create(client, CONFIGMAPS, namespace, configmap("during", at="cut"))
                proxy.reopen()
                await run.until("during", lambda: reflector.get("during", namespace) is not None)
    finally:
        await proxy.close()
    assert reflector.lists == 1
    assert reflector.watches >= 2
    assert proxy.accepted > connections  # it did come back through the proxy
    (during,) = deltas_of(batches, (namespace, "during"))
    assert during.before is None
    assert isinstance(during.after, ConfigMap)
    assert during.after.data == {"at": "cut"}


# --- the client's errors ---------------------------------------------------------------------


async def test_errors_carry_the_api_servers_status(client: KubeClient, namespace: str) -> None:
    collection = resource_path(CONFIGMAPS, namespace)
    missing = resource_path(CONFIGMAPS, namespace, "nope")
    with pytest.raises(NotFound) as not_found:
        await client.get(missing, kind=CONFIGMAPS, namespace=namespace)
    assert str(not_found.value) == 'configmaps "nope" not found'
    assert (not_found.value.kind, not_found.value.name) == (CONFIGMAPS, "nope")

    created = await create(client, CONFIGMAPS, namespace, configmap("taken", v="1"))
    with pytest.raises(AlreadyExists, match=r'^configmaps "taken" already exists$'):
        await client.post(collection, dumps(configmap("taken")), kind=CONFIGMAPS)

    path = resource_path(CONFIGMAPS, namespace, "taken")
    await client.put(path, dumps({**created, "data": {"v": "2"}}))
    with pytest.raises(Conflict) as conflict:  # the first version again: stale now
        await client.put(path, dumps({**created, "data": {"v": "3"}}), kind=CONFIGMAPS)
    assert type(conflict.value) is Conflict
    assert str(conflict.value) == (
        'Operation cannot be fulfilled on configmaps "taken": the object has been modified;'
        " please apply your changes to the latest version and try again"
    )
    assert conflict.value.name == "taken"

    with pytest.raises(Invalid) as invalid:
        await client.post(collection, dumps(configmap("Bad_Name")), kind=CONFIGMAPS)
    assert type(invalid.value) is Invalid
    assert str(invalid.value).startswith('ConfigMap "Bad_Name" is invalid: metadata.name:')
    assert (invalid.value.field, invalid.value.value) == ("metadata.name", "Bad_Name")
    assert invalid.value.causes[0].startswith('metadata.name: Invalid value: "Bad_Name": ')
    assert invalid.value.name == "Bad_Name"


async def test_a_refusal_by_rbac_is_forbidden_and_a_stale_list_is_expired(
    client: KubeClient, namespace: str, kube_cluster: Cluster
) -> None:
    # kube-scheduler's user may read pods but not delete namespaces.
    scheduler = await connect(kube_cluster.dir / "kube-scheduler.kubeconfig")
    async with scheduler:
        with pytest.raises(Forbidden) as forbidden:
            await scheduler.delete(f"/api/v1/namespaces/{namespace}")
    assert str(forbidden.value).startswith(f'namespaces "{namespace}" is forbidden: User ')
    # A list at a version etcd compacted away: 410 Gone.
    made = await create(client, EVENTS, namespace, event("x", "x", namespace))
    await etcd_compact(kube_cluster.etcd_url, int(made["metadata"]["resourceVersion"]))
    with pytest.raises(Expired):
        await client.get(
            resource_path(EVENTS, namespace),
            params={"resourceVersion": "1", "resourceVersionMatch": "Exact"},
        )


async def test_no_server_is_a_transient_error(tmp_path: Path, kube_cluster: Cluster) -> None:
    config = yaml.safe_load(kube_cluster.kubeconfig.read_text())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
        path = tmp_path / "nowhere.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        async with await connect(path) as nowhere:
            with pytest.raises(ServerUnavailable) as unavailable:
                await nowhere.get("/version")
    assert isinstance(unavailable.value, TransientError)  # what a supervisor retries
    assert unavailable.value.code == 0
    assert "no answer from the API server" in str(unavailable.value)


# --- in-cluster configuration ----------------------------------------------------------------


async def test_in_cluster_reads_the_service_accounts_files(
    tmp_path: Path, kube_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = urlsplit(kube_cluster.server)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("not-the-token")
    (account / "ca.crt").write_bytes(kube_cluster.ca_file.read_bytes())
    (account / "namespace").write_text("kube-system")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        KubeClient.in_cluster(account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))

    async with KubeClient.in_cluster(account) as inside:
        assert (inside.server, inside.namespace) == (kube_cluster.server, "kube-system")
        with pytest.raises(ApiError) as refused:
            await inside.get(f"/api/v1/namespaces/{inside.namespace}")
        assert refused.value.code == 401
        # The token is rotated: it is read again when the server refuses the old one.
        (account / "token").write_text(kube_cluster.token)
        body = json.loads(await inside.get(f"/api/v1/namespaces/{inside.namespace}"))
    assert body["metadata"]["name"] == "kube-system"


# --- a server that sends what the real one never does -----------------------------------------


class ScriptedServer:
    """Plain HTTP on loopback: every list gets ``list_body``; the first watch gets ``events``
    in one chunk, and every watch then stays open until :meth:`close`."""

    def __init__(self, list_body: bytes, events: Sequence[bytes]) -> None:
        self.list_body = list_body
        self.events = list(events)
        self.requests: list[str] = []
        self._closing = asyncio.Event()
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                self.requests.append(target)
                if "watch=true" not in target:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(self.list_body), self.list_body)
                    )
                    await writer.drain()
                    continue
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                payload, self.events = b"".join(e + b"\n" for e in self.events), []
                if payload:
                    writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))
                await writer.drain()
                await self._closing.wait()
                return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.transport.abort()
            self._handlers.discard(task)

    async def close(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)


def raw_pod(name: str, version: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


async def test_undecodable_objects_are_counted_and_the_rest_arrives() -> None:
    """A page with an object our Structs refuse is taken item by item; a modified object that
    will not decode keeps its last state; a bookmark moves the version on."""
    listed = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "6"},
        "items": [raw_pod("a", "3"), raw_pod("b", "5", bogus=True)],
    }
    events = [
        {"type": "MODIFIED", "object": {"kind": "Pod", **raw_pod("a", "7", bogus=True)}},
        {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}},
        {"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1", **raw_pod("c", "10")}},
    ]
    server = ScriptedServer(dumps(listed), [dumps(e) for e in events])
    url = await server.start()
    try:
        config = lightkube.KubeConfig.from_server(url).get()
        assert config is not None
        async with KubeClient(config) as client:
            reflector = Reflector(client, PODS, namespace="ns")
            async with running(reflector) as run:
                await run.synced()
                a = reflector.get("a", "ns")
                assert isinstance(a, Pod)
                assert (list(reflector.objects), reflector.decode_errors) == ([("ns", "a")], 1)
                await run.until("c", lambda: reflector.get("c", "ns") is not None)
    finally:
        await server.close()
    assert reflector.get("a", "ns") is a  # the MODIFIED that did not decode changed nothing
    assert (reflector.decode_errors, reflector.resource_version) == (2, "10")
    watch = server.requests[1]
    assert watch.startswith("/api/v1/namespaces/ns/pods?")
    assert {"watch=true", "allowWatchBookmarks=true", "resourceVersion=6"} <= set(
        watch.partition("?")[2].split("&")
    )


# --- without a server ------------------------------------------------------------------------


def test_the_rate_limiter_lets_a_burst_through_then_paces() -> None:
    now = [100.0]
    limiter = RateLimiter(qps=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [limiter.reserve() for _ in range(2)] == [0.5, 1.0]  # reserved in turn
    now[0] += 1.0  # two tokens' worth later: those two are paid for, nothing is saved up
    assert limiter.reserve() == 0.5
    now[0] += 60.0
    assert [limiter.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]  # at most a burst
    assert RateLimiter(qps=0, burst=0).reserve() == 0.0


def test_backoff_doubles_with_jitter_up_to_its_maximum() -> None:
    draws = iter([1.0, 1.0, 0.0, 1.0, 1.0, 0.5])
    backoff = Backoff(initial=1.0, maximum=5.0, rng=lambda: next(draws))
    assert [backoff.next() for _ in range(4)] == [1.0, 2.0, 2.0, 5.0]  # 4 drawn low: 2
    assert backoff.next(at_least=9.0) == 9.0
    backoff.reset()
    assert backoff.next() == 0.75


def status_error(code: int, body: bytes) -> KubeError:
    """What the controller's client raises for ``code`` and ``body``."""
    return base_status_error(code, body, errors=ERRORS)


def test_status_errors_without_a_status_body() -> None:
    gateway = status_error(502, b"<html>bad gateway</html>")
    assert isinstance(gateway, ServerUnavailable)
    assert gateway.code == 502
    assert str(gateway) == "the server answered 502: <html>bad gateway</html>"
    body = dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "message": "too many requests",
            "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": 3},
            "code": 429,
        }
    )
    throttled = status_error(429, body)
    assert isinstance(throttled, ServerUnavailable)
    assert throttled.retry_after == 3.0
    unauthorized = status_error(401, dumps({"kind": "Status", "message": "Unauthorized"}))
    assert isinstance(unauthorized, ApiError)
    assert unauthorized.code == 401


def test_resource_paths() -> None:
    reservations = next(k for k in REGISTRY if k.plural == "reservations")
    assert resource_path(PODS) == "/api/v1/pods"
    assert resource_path(PODS, "ns", "p", "binding") == "/api/v1/namespaces/ns/pods/p/binding"
    assert resource_path(NODES, "ignored", "n1") == "/api/v1/nodes/n1"
    assert (
        resource_path(reservations, name="r1", subresource="status")
        == "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r1/status"
    )
    with pytest.raises(ValueError, match="needs a namespace"):
        resource_path(PODS, name="p")
