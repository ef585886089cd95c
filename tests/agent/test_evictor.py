"""Carrying out evictions: over the bus to the controller, or through a Kubernetes API server."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.evictor import ApiServerEvictor, BusSink, ControllerEvictor, RecentEvictions
from agent.qos.framework import Eviction
from apis.core import Container, Event, Pod, PodSpec
from apis.meta import ObjectMeta
from controller.errors import NotFound
from controller.fleet.ingest import Ingest
from controller.store.sqlite import Store
from runtime.bus import Bus
from tests.fakes.publisher import RecordingPublisher
from tests.fakes.tls import self_signed

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOKEN = "s3cret-token"


def eviction_of(pod: Pod, feature: str = "BEMemoryEvict") -> Eviction:
    return Eviction(
        pod=pod,
        reason=feature,
        message="node memory usage 85% >= threshold 70%",
        strategy="evictions",
    )


def plain_pod(name: str = "web", uid: str = "00000000-0000-4000-8000-0000000000aa") -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="jobs", uid=uid),
        spec=PodSpec(node_name="n1", containers=(Container(name="main"),)),
    )


async def eventually(check: Callable[[], bool], what: str) -> None:
    """Let the event loop run until ``check()`` holds (10 s at most)."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not after 10 s: {what}")


# --- the expiring set ---------------------------------------------------------------------------


def test_recent_evictions_expire() -> None:
    now = [0.0]
    recent = RecentEvictions(30.0, clock=lambda: now[0])
    recent.add("uid-1")
    now[0] = 29.9
    assert "uid-1" in recent
    now[0] = 30.0
    assert "uid-1" not in recent
    assert len(recent) == 0


# --- controller path ----------------------------------------------------------------------------


async def test_bus_eviction_reaches_the_controller_which_deletes_and_records() -> None:
    bus = Bus()
    async with Store(clock=lambda: T0) as store:
        pod = store.create(
            Pod(
                metadata=ObjectMeta(name="web", namespace="jobs"),
                spec=PodSpec(node_name="n1", containers=(Container(name="main"),)),
            )
        )
        pod_kind = store.registry.for_type(Pod)
        event_kind = store.registry.for_type(Event)

        def gone() -> bool:
            try:
                store.get(pod_kind, "web", "jobs")
            except NotFound:
                return True
            return False

        ingest = Ingest(bus, store, clock=lambda: T0)
        task = asyncio.create_task(ingest.run(), name="ingest")
        spy = bus.subscribe("koordpy/v1/nodes/n1/evictions")
        try:
            await asyncio.sleep(0)  # the ingest subscribes
            with bus.connect("agent/n1") as client:
                evictor = ControllerEvictor(BusSink(client), "n1")
                assert await evictor.evict(eviction_of(pod)) is True
                # The pod is still terminating: a second eviction is suppressed.
                assert await evictor.evict(eviction_of(pod, "CPUEvict")) is False
            await eventually(gone, "the pod was deleted")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert spy.pending() == 1
        body = json.loads((await spy.get()).payload)
        assert body["apiVersion"] == "policy/v1"
        assert body["kind"] == "Eviction"
        assert body["metadata"] == {"name": "web", "namespace": "jobs", "uid": pod.metadata.uid}
        assert body["feature"] == "BEMemoryEvict"
        spy.close()
        items, _ = store.list(event_kind)
        (event,) = [e for e in items if isinstance(e, Event)]
        assert event.reason == "Evicted"
        assert event.type == "Warning"
        assert event.involved_object.name == "web"
        assert "BEMemoryEvict" in event.message


# --- API server path ----------------------------------------------------------------------------


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeApiServer:
    """A real local HTTP(S) server answering every POST with ``status``."""

    url: str
    status: int = 201
    requests: list[Request] = field(default_factory=list)


def _handler(state: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            state.requests.append(
                Request("POST", self.path, dict(self.headers.items()), self.rfile.read(length))
            )
            payload = json.dumps({"kind": "Status", "code": state.status}).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[[ssl.SSLContext | None], FakeApiServer]]:
    started: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start(tls: ssl.SSLContext | None = None) -> FakeApiServer:
        state = FakeApiServer(url="")
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        state.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name="fake-apiserver", daemon=True
        )
        thread.start()
        started.append((server, thread))
        return state

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


async def test_api_server_eviction_posts_a_policy_v1_eviction(
    serve: Callable[[ssl.SSLContext | None], FakeApiServer],
) -> None:
    api = serve(None)
    events = RecordingPublisher()
    pod = plain_pod()
    evictor = ApiServerEvictor(
        api.url, "n1", token=TOKEN, events=events, wall_clock=lambda: T0, timeout=5
    )
    assert await evictor.evict(eviction_of(pod)) is True
    (seen,) = api.requests
    assert seen.method == "POST"
    assert seen.path == "/api/v1/namespaces/jobs/pods/web/eviction"
    assert seen.headers["Authorization"] == f"Bearer {TOKEN}"
    assert seen.headers["Content-Type"] == "application/json"
    assert json.loads(seen.body) == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "web", "namespace": "jobs"},
        "deleteOptions": {"preconditions": {"uid": pod.metadata.uid}},
    }
    (event,) = events.events
    assert event.reason == "Evicted"
    assert event.type == "Warning"
    assert event.involved_object.uid == pod.metadata.uid
    assert event.metadata.namespace == "jobs"
    assert "BEMemoryEvict" in event.message
    # Evicted and still terminating: not evicted twice.
    assert await evictor.evict(eviction_of(pod)) is False
    assert len(api.requests) == 1


async def test_a_refused_eviction_is_not_remembered(
    serve: Callable[[ssl.SSLContext | None], FakeApiServer],
) -> None:
    api = serve(None)
    api.status = 429  # a PodDisruptionBudget forbids it now
    events = RecordingPublisher()
    evictor = ApiServerEvictor(api.url, "n1", token=TOKEN, events=events, timeout=5)
    pod = plain_pod()
    assert await evictor.evict(eviction_of(pod)) is False
    assert [e.reason for e in events.events] == ["EvictionFailed"]
    api.status = 201
    assert await evictor.evict(eviction_of(pod)) is True
    assert len(api.requests) == 2


async def test_the_token_file_is_read_for_each_request(
    serve: Callable[[ssl.SSLContext | None], FakeApiServer], tmp_path: Path
) -> None:
    api = serve(None)
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    evictor = ApiServerEvictor(api.url, "n1", token_file=token_file, timeout=5)
    assert await evictor.evict(eviction_of(plain_pod("a", uid="uid-a"))) is True
    token_file.write_text("rotated\n")
    assert await evictor.evict(eviction_of(plain_pod("b", uid="uid-b"))) is True
    assert [r.headers["Authorization"] for r in api.requests] == [
        "Bearer first",
        "Bearer rotated",
    ]


async def test_an_unreachable_api_server_fails_the_eviction() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    events = RecordingPublisher()
    evictor = ApiServerEvictor(f"http://127.0.0.1:{port}", "n1", events=events, timeout=5)
    assert await evictor.evict(eviction_of(plain_pod())) is False
    assert [e.reason for e in events.events] == ["EvictionFailed"]


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


@pytest.mark.parametrize(
    ("trust", "evicted"),
    [
        pytest.param("ca", True, id="verified-against-the-ca-file"),
        pytest.param("insecure", True, id="insecure-skips-verification"),
        pytest.param("system", False, id="unknown-ca-refused"),
    ],
)
async def test_tls_verification(
    serve: Callable[[ssl.SSLContext | None], FakeApiServer],
    certificate: tuple[Path, Path],
    trust: str,
    evicted: bool,
) -> None:
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    api = serve(tls)
    evictor = ApiServerEvictor(
        api.url,
        "n1",
        token=TOKEN,
        ca_file=cert if trust == "ca" else None,
        insecure=trust == "insecure",
        timeout=5,
    )
    assert await evictor.evict(eviction_of(plain_pod())) is evicted
    assert len(api.requests) == (1 if evicted else 0)
