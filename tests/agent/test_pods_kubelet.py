"""The kubelet pod source against a real local HTTP(S) server standing in for the kubelet."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agent.errors import ConfigError, TransientError
from agent.pods import kubelet
from agent.pods.base import PodSource
from tests.fakes.tls import self_signed

TOKEN = "s3cr3t-token"


def _raw_pod(name: str, uid: str, **spec: object) -> dict[str, object]:
    """A pod as the kubelet lists it (no apiVersion/kind on the items)."""
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"nodeName": "n1", "containers": [{"name": "app"}], **spec},
        "status": {
            "phase": "Running",
            "qosClass": "BestEffort",
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": True,
                    "restartCount": 0,
                    "image": "busybox",
                    "imageID": "",
                    "containerID": "containerd://abc",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    "lastState": {},
                }
            ],
        },
    }


def _pod_list(*items: object) -> bytes:
    return json.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
    ).encode()


async def _eventually(condition: Callable[[], bool]) -> None:
    """Wait (up to 10 s) until ``condition`` holds."""
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


@dataclass
class FakeKubelet:
    """What the fake kubelet answers, and what it was asked."""

    body: bytes = field(default_factory=_pod_list)
    status: int = 200
    delay: float = 0.0
    authorization: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def _serve(fake: FakeKubelet, tls: ssl.SSLContext | None) -> Iterator[FakeKubelet]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.authorization.append(self.headers.get("Authorization"))
            fake.paths.append(self.path)
            if fake.delay:
                fake.release.wait(fake.delay)
            self.send_response(fake.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(fake.body)))
            self.end_headers()
            self.wfile.write(fake.body)

        def log_message(self, fmt: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that gave up (the timeout case) breaks the pipe; not a failure

    server = Server(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    fake.url = f"{scheme}://127.0.0.1:{server.server_address[1]}/pods"
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="fake-kubelet", daemon=True
    )
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def http_kubelet() -> Iterator[FakeKubelet]:
    yield from _serve(FakeKubelet(), None)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def https_kubelet(certificate: tuple[Path, Path]) -> Iterator[FakeKubelet]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    yield from _serve(FakeKubelet(), context)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


async def test_https_with_token_and_ca(
    https_kubelet: FakeKubelet, token_file: Path, certificate: tuple[Path, Path]
) -> None:
    https_kubelet.body = _pod_list(_raw_pod("a", "uid-a"), _raw_pod("b", "uid-b"))
    source = kubelet.KubeletPodSource(
        https_kubelet.url, token_file=str(token_file), ca_file=str(certificate[0])
    )
    assert isinstance(source, PodSource)
    assert await source.refresh() is True
    assert [p.metadata.name for p in source.pods] == ["a", "b"]
    assert source.pods[0].status.container_statuses[0].running
    assert source.synced.is_set()
    assert https_kubelet.authorization == [f"Bearer {TOKEN}"]
    assert https_kubelet.paths == ["/pods"]
    # same list again: no change, same generation
    generation = source.generation
    assert await source.refresh() is False
    assert source.generation == generation


async def test_token_is_reread_for_every_request(
    https_kubelet: FakeKubelet, token_file: Path, certificate: tuple[Path, Path]
) -> None:
    source = kubelet.KubeletPodSource(
        https_kubelet.url, token_file=str(token_file), ca_file=str(certificate[0])
    )
    await source.refresh()
    await asyncio.to_thread(token_file.write_text, "rotated")
    await source.refresh()
    assert https_kubelet.authorization == [f"Bearer {TOKEN}", "Bearer rotated"]


async def test_self_signed_kubelet_is_refused_without_its_ca(
    https_kubelet: FakeKubelet, token_file: Path
) -> None:
    source = kubelet.KubeletPodSource(https_kubelet.url, token_file=str(token_file))
    with pytest.raises(TransientError, match="CERTIFICATE_VERIFY_FAILED"):
        await source.refresh()
    assert not source.synced.is_set()
    assert https_kubelet.authorization == [], "no token is sent to an unverified server"


async def test_insecure_tls_skips_verification(
    https_kubelet: FakeKubelet, token_file: Path
) -> None:
    https_kubelet.body = _pod_list(_raw_pod("a", "uid-a"))
    source = kubelet.KubeletPodSource(
        https_kubelet.url, token_file=str(token_file), insecure_tls=True
    )
    assert await source.refresh() is True
    assert len(source.pods) == 1
    assert https_kubelet.authorization == [f"Bearer {TOKEN}"]


async def test_read_only_port_sends_no_token(http_kubelet: FakeKubelet, token_file: Path) -> None:
    http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"))
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=str(token_file))
    assert await source.refresh() is True
    assert http_kubelet.authorization == [None]


async def test_missing_token_file_asks_without_one(
    http_kubelet: FakeKubelet, tmp_path: Path
) -> None:
    url = http_kubelet.url
    source = kubelet.KubeletPodSource(url, token_file=str(tmp_path / "absent"))
    await source.refresh()
    assert http_kubelet.authorization == [None]


async def test_http_error_status_keeps_the_previous_pods(http_kubelet: FakeKubelet) -> None:
    http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"))
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None)
    await source.refresh()
    http_kubelet.status = 401
    http_kubelet.body = b'{"kind":"Status"}'
    with pytest.raises(TransientError, match="HTTP 401"):
        await source.refresh()
    assert [p.metadata.name for p in source.pods] == ["a"]


async def test_timeout(http_kubelet: FakeKubelet) -> None:
    http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"))
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None, timeout=0.2)
    await source.refresh()
    http_kubelet.delay = 30
    with pytest.raises(TransientError, match="timed out"):
        await source.refresh()
    assert [p.metadata.name for p in source.pods] == ["a"]
    http_kubelet.release.set()


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"kind": "Node"}', b'{"kind": "PodList", "items": {}}'],
    ids=["not-json", "wrong-kind", "items-not-list"],
)
async def test_bad_body_keeps_the_previous_pods(http_kubelet: FakeKubelet, body: bytes) -> None:
    http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"))
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None)
    await source.refresh()
    http_kubelet.body = body
    with pytest.raises(TransientError):
        await source.refresh()
    assert [p.metadata.name for p in source.pods] == ["a"]


async def test_a_bad_pod_is_skipped_and_logged(
    http_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    bad = _raw_pod("bad", "uid-bad")
    bad["spec"] = {"containers": "not a list"}
    http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"), bad, _raw_pod("c", "uid-c"))
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None)
    with caplog.at_level(logging.WARNING):
        await source.refresh()
    assert [p.metadata.name for p in source.pods] == ["a", "c"]
    assert "default/bad" in caplog.text
    assert "skipped" in caplog.text


async def test_fields_of_newer_kubernetes_are_dropped_not_the_pod(
    http_kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    newer = _raw_pod("newer", "uid-newer", futureSpecField={"x": 1})
    newer["metadata"]["futureMetaField"] = "y"  # type: ignore[index]
    http_kubelet.body = _pod_list(newer)
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None)
    with caplog.at_level(logging.WARNING):
        await source.refresh()
    [pod] = source.pods
    assert pod.metadata.uid == "uid-newer"
    assert "spec.futureSpecField" in caplog.text
    assert "metadata.futureMetaField" in caplog.text


async def test_run_polls_and_syncs(http_kubelet: FakeKubelet) -> None:
    http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"))
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None, interval=0.05)
    task = asyncio.create_task(source.run(), name="kubelet-source")
    try:
        await asyncio.wait_for(source.synced.wait(), 10)
        assert [p.metadata.name for p in source.pods] == ["a"]
        http_kubelet.body = _pod_list(_raw_pod("a", "uid-a"), _raw_pod("b", "uid-b"))
        await _eventually(lambda: len(source.pods) == 2)
        assert source.generation == 2
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_run_survives_a_down_kubelet(http_kubelet: FakeKubelet) -> None:
    http_kubelet.status = 503
    source = kubelet.KubeletPodSource(http_kubelet.url, token_file=None, interval=0.05)
    task = asyncio.create_task(source.run(), name="kubelet-source")
    try:
        await _eventually(lambda: len(http_kubelet.paths) >= 2)
        assert not source.synced.is_set()
        http_kubelet.status = 200
        await asyncio.wait_for(source.synced.wait(), 10)
        assert source.pods == ()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_urls_and_bad_config() -> None:
    assert kubelet.kubelet_url() == "https://127.0.0.1:10250/pods"
    assert kubelet.kubelet_url("10.0.0.1", kubelet.READ_ONLY_PORT) == "http://10.0.0.1:10255/pods"
    assert kubelet.kubelet_url("::1") == "https://[::1]:10250/pods"
    with pytest.raises(ConfigError, match="URL"):
        kubelet.KubeletPodSource("ftp://host/pods")
    with pytest.raises(ConfigError, match="positive"):
        kubelet.KubeletPodSource(timeout=0)
