"""The client verbs against a live API server (run in a thread with its own event loop)."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
import yaml

from apis.codec import decode_documents, decode_object
from apis.kinds import default_registry
from controller.api.client import Client
from controller.api.server import ApiServer
from controller.cli import commands as verbs
from controller.store.sqlite import Store
from koordpy.cli import main

PODS = default_registry().resolve("po")

POD_A = """\
apiVersion: v1
kind: Pod
metadata:
  name: pod-a
  labels: {app: web}
spec:
  containers:
  - name: main
    image: nginx
    resources:
      requests: {cpu: 500m, memory: 1Gi}
"""
POD_B = POD_A.replace("pod-a", "pod-b").replace("app: web", "app: db")
NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-1
  labels: {node.koordinator.sh/gpu-model: NVIDIA-H100}
status:
  allocatable: {cpu: "96", memory: 1Ti, koordinator.sh/gpu-memory-ratio: "800"}
  conditions: [{type: Ready, status: "True"}]
"""
RESERVATION = """\
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: pre-alloc-cluster
spec:
  ttl: 1h
  template:
    spec:
      containers: [{name: c, resources: {requests: {cpu: "2"}}}]
  owners:
  - object: {name: pod-a, namespace: default}
"""
QUOTA = """\
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: team-a
  namespace: quotas
spec:
  min: {cpu: "4", memory: 8Gi}
  max: {cpu: "8", memory: 16Gi}
"""


class ServerThread:
    """A store and an API server on a private socket, served from a background loop."""

    def __init__(self, socket: Path) -> None:
        self.address = f"unix://{socket}"
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="api-server", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as err:  # surfaced to the test by __enter__
            self._error = err
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Store() as store, ApiServer(store, self.address, grace=0.1):
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def client(self) -> Client:
        return Client(self.address, timeout=10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(tmp_path / "api.sock") as running:
        yield running


class Koordpy:
    """Runs ``koordpy VERB ...`` against the test server and captures its output."""

    def __init__(self, server: ServerThread, capsys: pytest.CaptureFixture[str]) -> None:
        self.server = server
        self.capsys = capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(["--api", self.server.address, *argv])
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def koordpy(server: ServerThread, capsys: pytest.CaptureFixture[str]) -> Koordpy:
    return Koordpy(server, capsys)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def stored_pods(server: ServerThread) -> list[str]:
    with server.client() as api:
        items, _ = api.list(PODS)
    return [f"{o.metadata.namespace}/{o.metadata.name}" for o in items]


# --- apply -----------------------------------------------------------------------------------


def test_apply_created_then_unchanged_then_configured(koordpy: Koordpy, tmp_path: Path) -> None:
    manifest = write(tmp_path / "all.yaml", "---\n".join([POD_A, NODE, RESERVATION]))
    code, out, err = koordpy("apply", "-f", str(manifest))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "pod/pod-a created",
        "node/gpu-1 created",
        "reservation.scheduling.koordinator.sh/pre-alloc-cluster created",
    ]
    code, out, _ = koordpy("apply", "-f", str(manifest))
    assert code == 0
    assert [line.rsplit(" ", 1)[1] for line in out.splitlines()] == ["unchanged"] * 3
    write(manifest, "---\n".join([POD_A.replace("app: web", "app: api"), NODE, RESERVATION]))
    code, out, _ = koordpy("apply", "-f", str(manifest))
    assert out.splitlines()[0] == "pod/pod-a configured"
    assert out.splitlines()[1:] == [
        "node/gpu-1 unchanged",
        "reservation.scheduling.koordinator.sh/pre-alloc-cluster unchanged",
    ]


def test_apply_directory_sorted_json_and_namespace(
    koordpy: Koordpy, server: ServerThread, tmp_path: Path
) -> None:
    folder = tmp_path / "manifests"
    write(folder / "b.yml", POD_B)
    pod_json = json.dumps(yaml.safe_load(POD_A))
    write(folder / "a.json", pod_json)
    write(folder / "notes.txt", "not a manifest")
    write(folder / "nested" / "c.yaml", POD_A.replace("pod-a", "pod-c"))
    code, out, _ = koordpy("apply", "-f", str(folder), "-n", "team")
    assert code == 0
    assert out.splitlines() == ["pod/pod-a created", "pod/pod-b created"]
    assert stored_pods(server) == ["team/pod-a", "team/pod-b"]


def test_apply_from_stdin(
    koordpy: Koordpy, server: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(POD_A + "---\n" + POD_B))
    code, out, _ = koordpy("apply", "-f", "-")
    assert code == 0
    assert out.splitlines() == ["pod/pod-a created", "pod/pod-b created"]
    assert stored_pods(server) == ["default/pod-a", "default/pod-b"]


BAD_INPUTS = [
    pytest.param(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n",
        "invalid YAML",
        None,
        id="invalid-yaml",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pud\nmetadata: {name: x}\n",
        "document 1: field kind: unknown kind 'Pud'",
        None,
        id="unknown-kind",
    ),
    pytest.param(
        POD_A.replace("cpu: 500m", "cpu: 12x"),
        "document 1: field spec.containers[0].resources.requests.cpu:",
        "(value: '12x')",
        id="bad-quantity",
    ),
    pytest.param(
        POD_A.replace("  name: pod-a\n", ""),
        "document 1: field metadata.name: Required value",
        None,
        id="missing-name",
    ),
    pytest.param(
        POD_A.replace("    image: nginx\n", "    imagee: nginx\n"),
        "document 1: field spec.containers[0].imagee: unknown field",
        "(value: 'nginx')",
        id="unknown-field",
    ),
    pytest.param(
        POD_A.replace("name: pod-a", "name: Pod_A"),
        "document 1: field metadata.name: Invalid value",
        "(value: 'Pod_A')",
        id="invalid-name",
    ),
]


@pytest.mark.parametrize(("bad", "where", "value"), BAD_INPUTS)
def test_bad_input_fails_and_stores_nothing(
    koordpy: Koordpy,
    server: ServerThread,
    tmp_path: Path,
    bad: str,
    where: str,
    value: str | None,
) -> None:
    good = write(tmp_path / "a-good.yaml", POD_B)
    # The bad document is the second of its file, after a good one.
    broken = write(tmp_path / "b-broken.yaml", POD_A.replace("pod-a", "pod-ok") + "---\n" + bad)
    code, out, err = koordpy("apply", "-f", str(good), "-f", str(broken))
    assert code == 1
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"error: {broken}: ")
    assert where in line
    if value is not None:
        assert line.endswith(value)
    assert stored_pods(server) == []


def test_every_bad_document_is_reported(koordpy: Koordpy, tmp_path: Path) -> None:
    first = write(tmp_path / "one.yaml", POD_A.replace("name: pod-a", "name: A"))
    second = write(tmp_path / "two.yaml", POD_B.replace("cpu: 500m", "cpu: lots"))
    code, _, err = koordpy("apply", "-f", str(first), "-f", str(second))
    assert code == 1
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"error: {first}: document 0: field metadata.name:")
    assert lines[1].startswith(f"error: {second}: document 0: field spec.containers[0]")


def test_namespace_mismatch_is_refused(
    koordpy: Koordpy, server: ServerThread, tmp_path: Path
) -> None:
    manifest = write(
        tmp_path / "p.yaml", POD_A.replace("  name: pod-a\n", "  name: pod-a\n  namespace: a\n")
    )
    code, _, err = koordpy("apply", "-f", str(manifest), "-n", "b")
    assert code == 1
    assert "field metadata.namespace" in err
    assert "--namespace=a" in err
    assert stored_pods(server) == []


def test_missing_path(koordpy: Koordpy, tmp_path: Path) -> None:
    code, _, err = koordpy("apply", "-f", str(tmp_path / "nope.yaml"))
    assert code == 1
    assert err.strip() == f'error: the path "{tmp_path / "nope.yaml"}" does not exist'


def test_apply_output_yaml_returns_stored_objects(koordpy: Koordpy, tmp_path: Path) -> None:
    manifest = write(tmp_path / "p.yaml", POD_A)
    code, out, _ = koordpy("apply", "-f", str(manifest), "-o", "yaml")
    assert code == 0
    (stored,) = decode_documents(out)
    assert stored.metadata.name == "pod-a"
    assert stored.metadata.resource_version


# --- get -------------------------------------------------------------------------------------


@pytest.fixture
def populated(koordpy: Koordpy, tmp_path: Path) -> None:
    other = POD_A.replace("name: pod-a", "name: pod-c\n  namespace: other")
    manifest = write(
        tmp_path / "objects.yaml", "---\n".join([POD_A, POD_B, other, NODE, RESERVATION, QUOTA])
    )
    code, _, err = koordpy("apply", "-f", str(manifest))
    assert code == 0, err


@pytest.mark.usefixtures("populated")
def test_get_tables(koordpy: Koordpy) -> None:
    code, out, _ = koordpy("get", "po")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["pod-a", "0/1", "Pending", "0"],
        ["pod-b", "0/1", "Pending", "0"],
    ]
    assert lines[0].index("READY") == lines[1].index("0/1")

    _, out, _ = koordpy("get", "nodes")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "CPU", "MEMORY", "GPUS", "AGE"]
    assert row.split()[:5] == ["gpu-1", "Ready", "96", "1Ti", "8"]

    _, out, _ = koordpy("get", "no", "-o", "wide")
    assert "NVIDIA-H100" in out.splitlines()[1]

    _, out, _ = koordpy("get", "rsv")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "PHASE", "AGE", "NODE", "TTL", "EXPIRES"]
    assert row.split()[0] == "pre-alloc-cluster"
    assert row.split()[4] == "1h0m0s"

    _, out, _ = koordpy("get", "eq", "-n", "quotas")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "MIN", "MAX", "PARENT", "AGE"]
    assert row.split()[:3] == ["team-a", "cpu:4,memory:8Gi", "cpu:8,memory:16Gi"]


@pytest.mark.usefixtures("populated")
def test_get_all_namespaces_and_selector(koordpy: Koordpy) -> None:
    _, out, _ = koordpy("get", "pods", "-A")
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [line.split()[:2] for line in lines[1:]] == [
        ["default", "pod-a"],
        ["default", "pod-b"],
        ["other", "pod-c"],
    ]
    _, out, _ = koordpy("get", "pods", "-A", "-l", "app=web", "-o", "name")
    assert out.splitlines() == ["pod/pod-a", "pod/pod-c"]
    _, out, _ = koordpy("get", "pods", "-l", "app!=web", "-o", "name")
    assert out.splitlines() == ["pod/pod-b"]


@pytest.mark.usefixtures("populated")
def test_get_several_kinds_prints_a_table_each_with_kind_names(koordpy: Koordpy) -> None:
    code, out, _ = koordpy("get", "pods,nodes")
    assert code == 0
    pods, nodes = out.split("\n\n")
    assert pods.splitlines()[0].split()[:2] == ["NAME", "READY"]
    assert [line.split()[0] for line in pods.splitlines()[1:]] == ["pod/pod-a", "pod/pod-b"]
    assert nodes.splitlines()[1].split()[0] == "node/gpu-1"
    _, out, _ = koordpy("get", "pods,eq", "-A", "-o", "name")
    assert out.splitlines() == [
        "pod/pod-a",
        "pod/pod-b",
        "pod/pod-c",
        "elasticquota.scheduling.sigs.k8s.io/team-a",
    ]
    code, out, _ = koordpy("get", "po,no", "-o", "json")
    assert code == 0
    assert [i["kind"] for i in json.loads(out)["items"]] == ["Pod", "Pod", "Node"]
    code, _, err = koordpy("get", "pods,nodes", "pod-a")
    assert code != 0
    assert "several kinds" in err


@pytest.mark.usefixtures("populated")
def test_get_yaml_and_json_round_trip(koordpy: Koordpy, server: ServerThread) -> None:
    with server.client() as api:
        stored = api.get(PODS, "pod-a", "default")
    _, out, _ = koordpy("get", "po", "pod-a", "-o", "yaml")
    (again,) = decode_documents(out)
    assert again == stored
    _, out, _ = koordpy("get", "po", "-o", "json")
    listing = json.loads(out)
    assert listing["apiVersion"] == "v1"
    assert listing["kind"] == "List"
    assert [item["metadata"]["name"] for item in listing["items"]] == ["pod-a", "pod-b"]
    assert decode_object(listing["items"][0]) == stored


@pytest.mark.usefixtures("populated")
def test_get_missing_and_unknown(koordpy: Koordpy) -> None:
    code, out, err = koordpy("get", "po", "pod-a", "ghost")
    assert code == 1
    assert out.splitlines()[1].split()[0] == "pod-a"
    assert err.strip() == 'Error from server (NotFound): pods "ghost" not found'
    code, _, err = koordpy("get", "po", "pod-a", "-A")
    assert code == 1
    assert err.strip() == "error: a resource cannot be retrieved by name across all namespaces"
    code, _, err = koordpy("get", "widgets")
    assert code == 1
    assert err.startswith('error: the server doesn\'t have a resource type "widgets"')


def test_get_empty(koordpy: Koordpy) -> None:
    code, out, err = koordpy("get", "po")
    assert (code, out) == (0, "")
    assert err.strip() == "No resources found in default namespace."
    _, _, err = koordpy("get", "po", "-n", "team")
    assert err.strip() == "No resources found in team namespace."
    _, _, err = koordpy("get", "no")
    assert err.strip() == "No resources found"
    code, out, _ = koordpy("get", "po", "-o", "json")
    assert code == 0
    assert json.loads(out)["items"] == []


def test_get_watch_prints_rows_until_interrupted(
    koordpy: Koordpy, server: ServerThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    koordpy("apply", "-f", str(write(tmp_path / "a.yaml", POD_A)))
    printed: list[str] = []
    original = verbs._print_event

    def interrupt_after_one(*args: Any) -> bool:
        original(*args)
        printed.append(args[1].object.metadata.name)
        raise KeyboardInterrupt

    monkeypatch.setattr(verbs, "_print_event", interrupt_after_one)
    done = threading.Event()

    def writer() -> None:
        with server.client() as api:
            for revision in range(300):
                if done.wait(0.1):
                    return
                pod = decode_object(yaml.safe_load(POD_B.replace("app: db", f"app: db{revision}")))
                api.apply([pod])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        code, out, _ = koordpy("get", "po", "-w")
    finally:
        done.set()
        thread.join()
    assert code == 130
    lines = out.splitlines()
    assert lines[0].split()[0] == "NAME"
    assert lines[1].split()[0] == "pod-a"
    assert lines[-1].split()[0] == "pod-b"
    assert printed == ["pod-b"]
    # The event row lines up under the header.
    assert lines[-1].index("0/1") == lines[0].index("READY")


# --- describe --------------------------------------------------------------------------------


def test_describe_with_events(koordpy: Koordpy, tmp_path: Path) -> None:
    events = [
        f"""\
apiVersion: v1
kind: Event
metadata: {{name: pod-a.{index}}}
involvedObject: {{kind: Pod, name: {name}, namespace: default}}
reason: {reason}
message: {message}
type: Normal
source: {{component: koord-scheduler}}
lastTimestamp: "2026-01-01T00:0{index}:00Z"
"""
        for index, name, reason, message in (
            (2, "pod-a", "Started", "started main"),
            (1, "pod-a", "Scheduled", "assigned default/pod-a to gpu-1"),
            (3, "pod-b", "Other", "not about pod-a"),
        )
    ]
    manifest = write(tmp_path / "p.yaml", "---\n".join([POD_A, *events]))
    assert koordpy("apply", "-f", str(manifest))[0] == 0
    code, out, _ = koordpy("describe", "po", "pod-a")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["Name:", "pod-a"]
    assert lines[1].split() == ["Namespace:", "default"]
    assert lines[2].split() == ["Labels:", "app=web"]
    assert any(line.split() == ["Image:", "nginx"] for line in lines)
    start = lines.index("Events:")
    assert lines[start + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    reasons = [line.split()[1] for line in lines[start + 3 :]]
    assert reasons == ["Scheduled", "Started"]
    code, out, _ = koordpy("describe", "no", "ghost")
    assert code == 1


def test_describe_without_events(koordpy: Koordpy, tmp_path: Path) -> None:
    koordpy("apply", "-f", str(write(tmp_path / "n.yaml", NODE)))
    _, out, _ = koordpy("describe", "nodes", "gpu-1")
    assert out.splitlines()[-1] == "Events:  <none>"
    assert "Conditions:" in out.splitlines()


# --- delete ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("populated")
def test_delete_by_name(koordpy: Koordpy, server: ServerThread) -> None:
    code, out, err = koordpy("delete", "po", "pod-a", "ghost")
    assert code == 1
    assert out.strip() == 'pod "pod-a" deleted'
    assert err.strip() == 'Error from server (NotFound): pods "ghost" not found'
    assert stored_pods(server) == ["default/pod-b", "other/pod-c"]
    code, out, _ = koordpy("delete", "rsv", "pre-alloc-cluster")
    assert out.strip() == 'reservation.scheduling.koordinator.sh "pre-alloc-cluster" deleted'


@pytest.mark.usefixtures("populated")
def test_delete_by_selector_and_file(
    koordpy: Koordpy, server: ServerThread, tmp_path: Path
) -> None:
    code, out, _ = koordpy("delete", "po", "-A", "-l", "app=web")
    assert code == 0
    assert out.splitlines() == ['pod "pod-a" deleted', 'pod "pod-c" deleted']
    assert stored_pods(server) == ["default/pod-b"]
    manifest = write(tmp_path / "b.yaml", POD_B)
    code, out, _ = koordpy("delete", "-f", str(manifest))
    assert (code, out.strip()) == (0, 'pod "pod-b" deleted')
    assert stored_pods(server) == []


def test_delete_needs_names(koordpy: Koordpy) -> None:
    code, _, err = koordpy("delete", "po")
    assert code == 1
    assert err.startswith("error: resource(s) were provided")


def test_unreachable_api_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["--api", f"unix://{tmp_path}/none.sock", "get", "po"])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach the koordpy API at unix://{tmp_path}/none.sock")
    assert "koordpy up" in err


# --- queueing: wide QueueUnit columns from the Queues ------------------------------------------

QUEUE = """\
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: Queue
metadata:
  name: team-a
  namespace: koord-queue
  annotations: {koordpy.io/admission-rate: "3"}
spec: {queuePolicy: Priority, priority: 1000}
status:
  queueItemDetails:
    active:
    - {name: big, namespace: team, priority: 10, position: 1}
    - {name: small, namespace: team, priority: 5, position: 2}
"""
UNITS = [
    f"""\
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: QueueUnit
metadata: {{name: {name}, namespace: team}}
spec: {{priority: {priority}, queue: team-a, consumerRef: {{kind: Job, name: {name}}}}}
status: {{phase: {phase}, message: "{message}"}}
"""
    for name, priority, phase, message in (
        ("big", 10, "Enqueued", "waiting for quota team-a: cpu needs 6, 2 free of max 8"),
        ("small", 5, "Enqueued", "waiting in queue"),
        ("done", 1, "Dequeued", "Dequeued because schedule successfully"),
    )
]


@pytest.fixture
def queued(koordpy: Koordpy, tmp_path: Path) -> None:
    manifest = write(tmp_path / "queueing.yaml", "---\n".join([QUEUE, *UNITS]))
    code, _, err = koordpy("apply", "-f", str(manifest))
    assert code == 0, err


@pytest.mark.usefixtures("queued")
def test_get_queueunits_wide_shows_position_eta_and_message(koordpy: Koordpy) -> None:
    code, out, _ = koordpy("get", "qu", "-n", "team", "-o", "wide")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[-3:] == ["POSITION", "ETA", "MESSAGE"]
    cells = {row.split()[0]: row.split(None, 8)[6:] for row in rows}
    assert cells == {
        "big": ["1", "20s", "waiting for quota team-a: cpu needs 6, 2 free of max 8"],
        "small": ["2", "40s", "waiting in queue"],
        "done": ["<none>", "<none>", "Dequeued because schedule successfully"],
    }
    _, narrow, _ = koordpy("get", "qu", "-n", "team")
    assert "POSITION" not in narrow.splitlines()[0]


@pytest.mark.usefixtures("queued")
def test_get_queues_wide_and_describe_queueunit(koordpy: Koordpy) -> None:
    _, out, _ = koordpy("get", "queues", "-n", "koord-queue", "-o", "wide")
    header, row = out.splitlines()
    assert header.split()[-1] == "PENDING"
    assert row.split()[-1] == "2"
    code, out, _ = koordpy("describe", "qu", "small", "-n", "team")
    assert code == 0
    lines = out.splitlines()
    start = lines.index("Waiting:")
    assert [line.split() for line in lines[start + 1 : start + 5]] == [
        ["Message:", "waiting", "in", "queue"],
        ["Queue:", "team-a"],
        ["Position:", "2"],
        ["ETA:", "40s"],
    ]
