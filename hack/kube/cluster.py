"""Start and stop a real Kubernetes control plane on loopback, in one directory.

:func:`start_cluster` runs etcd, kube-apiserver and kube-controller-manager (kube-scheduler and
kwok on request) from the binaries ``make kube-bin`` built, each in a session of its own so they
outlive the caller, and returns once the API server is ready and the controller manager has
created the ``default`` service account. Everything lives in the directory::

    kubeconfig           admin kubeconfig (token of a system:masters user, the server's CA)
    cluster.json         server URL, admin token, ports and PIDs (what :meth:`Cluster.load` reads)
    <name>.pid           each process's PID, written as soon as it is started
    <name>.log           each process's output
    tokens.csv           the API server's static tokens
    sa.key, sa.pub       the service-account signing key pair (made with openssl)
    certs/               the API server's self-signed serving certificate and its CA
    etcd/                etcd's data
    <name>.kubeconfig    the kubeconfig each component runs with
    audit-policy.yaml    the API server's audit policy (only with ``audit=True``)
    audit.log            one JSON audit event per request (only with ``audit=True``)

With ``audit=True`` the API server records every request at level ``Metadata`` (who, verb,
resource and subresource, namespace, name, response code; no bodies), once it is answered
(:data:`AUDIT_POLICY`); :meth:`Cluster.audit_events` reads them back, so a test can see what
a client asked for and what it was refused. Off by default: the other tests need no log.

:func:`stop_cluster` stops the processes (SIGTERM, then SIGKILL after a timeout) and leaves the
logs. Every port is on 127.0.0.1 and chosen free at start.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import yaml

from hack.kube import paths

log = logging.getLogger(__name__)

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
STATE_FILE = "cluster.json"
#: kwok's stages (what it does to nodes and pods); also keeps it off ~/.kwok/kwok.yaml.
KWOK_STAGES = Path(__file__).resolve().parent / "kwok" / "stages.yaml"
#: Processes in the order they start; :func:`stop_cluster` stops them in reverse.
START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: The static users of tokens.csv: name -> (user, groups).
USERS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("koordpy-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok", ("system:masters",)),
}
#: The audit policy of ``audit=True``: every request at ``Metadata``, one event when answered
#: (``ResponseComplete``; a watch also logs ``ResponseStarted``), none when merely received.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""
AUDIT_POLICY_FILE = "audit-policy.yaml"
AUDIT_LOG = "audit.log"


class ClusterError(RuntimeError):
    """The cluster could not be started or stopped."""


@dataclass(frozen=True)
class Cluster:
    """A running control plane: where it lives and how to reach its API server as admin."""

    dir: Path
    server: str
    token: str
    kubeconfig: Path
    ca_file: Path
    etcd_url: str
    pids: Mapping[str, int]
    #: the API server's audit log (``start_cluster(audit=True)``), else None
    audit_log: Path | None = None

    @classmethod
    def load(cls, directory: Path) -> Cluster:
        """The cluster :func:`start_cluster` recorded in ``directory``."""
        state_path = directory / STATE_FILE
        try:
            state = json.loads(state_path.read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster recorded in {directory} ({STATE_FILE} missing)"
            ) from None
        return cls(
            dir=directory,
            server=state["server"],
            token=state["token"],
            kubeconfig=Path(state["kubeconfig"]),
            ca_file=Path(state["ca_file"]),
            etcd_url=state["etcd_url"],
            pids={name: int(pid) for name, pid in state["pids"].items()},
            audit_log=Path(state["audit_log"]) if state.get("audit_log") else None,
        )

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit events logged so far, oldest first (``audit=True`` clusters only).

        A last line still being written is left for the next read.
        """
        if self.audit_log is None:
            raise ClusterError("this cluster was started without an audit log (audit=True)")
        events: list[dict[str, Any]] = []
        with contextlib.suppress(FileNotFoundError), self.audit_log.open("rb") as file:
            for line in file:
                if not line.endswith(b"\n"):
                    break
                events.append(json.loads(line))
        return events

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context that trusts the API server's CA (and checks its name)."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def open(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> HTTPResponse:
        """Send one request as admin; the caller reads and closes the response.

        An HTTP error status raises :class:`urllib.error.HTTPError`, as urllib does.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        response: HTTPResponse = urllib.request.urlopen(
            request, timeout=timeout, context=self.ssl_context()
        )
        return response

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """Send one request as admin: the status and the decoded JSON body (also on errors)."""
        try:
            with self.open(
                method, path, body, timeout=timeout, content_type=content_type
            ) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, _decode(error.read())

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the cache's kubectl against this cluster with the admin kubeconfig."""
        return subprocess.run(
            [str(paths.binary("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


# --- processes -------------------------------------------------------------------------------


def _spawn(name: str, argv: Sequence[str], directory: Path) -> int:
    """Start ``argv`` in a new session, output to ``<name>.log``; record and return its PID."""
    log_path = directory / f"{name}.log"
    log_flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    pid = os.posix_spawn(
        argv[0],
        list(argv),
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log_path), log_flags, 0o644),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
        # Python ignores SIGPIPE and SIGXFSZ; the child gets the defaults back, as with Popen.
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
    )
    (directory / f"{name}.pid").write_text(f"{pid}\n")
    log.info("started %s (pid %s), log %s", name, pid, log_path)
    return pid


def _running(pid: int, name: str) -> bool:
    """Whether ``pid`` is still a live ``name`` process (reaping it if it is our child).

    Our own children are judged by waitpid alone (just after the spawn a child still shows
    Python's command line); any other PID only while /proc shows it running ``name``.
    """
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not (or no longer) our child: ask /proc
    else:
        return done == 0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[0]
    program = cmdline.split(b"\0", 1)[0].decode(errors="replace")
    return state not in ("Z", "X") and Path(program).name == name


def _log_tail(directory: Path, name: str, lines: int = 25) -> str:
    try:
        text = (directory / f"{name}.log").read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _recorded_pids(directory: Path) -> dict[str, int]:
    pids = {}
    for name in START_ORDER:
        with contextlib.suppress(OSError, ValueError):
            pids[name] = int((directory / f"{name}.pid").read_text().strip())
    return pids


def _stop(directory: Path, pids: Mapping[str, int], timeout: float) -> None:
    """SIGTERM each live process (clients first, etcd last), SIGKILL what outlives ``timeout``."""
    order = [name for name in reversed(START_ORDER) if name in pids]
    # Everything but etcd together, then etcd, so the API server never loses its store first.
    groups = [
        [name for name in order if name != "etcd"],
        [name for name in order if name == "etcd"],
    ]
    for group in groups:
        live = {name: pids[name] for name in group if _running(pids[name], name)}
        for name, pid in live.items():
            log.info("stopping %s (pid %s)", name, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while live and time.monotonic() < deadline:
            live = {name: pid for name, pid in live.items() if _running(pid, name)}
            if live:
                time.sleep(0.05)
        for name, pid in live.items():
            log.warning("%s (pid %s) outlived SIGTERM by %ss: SIGKILL", name, pid, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while live and time.monotonic() < deadline:
            live = {name: pid for name, pid in live.items() if _running(pid, name)}
            if live:
                time.sleep(0.05)
    for name in pids:
        (directory / f"{name}.pid").unlink(missing_ok=True)


def stop_cluster(directory: Path, *, timeout: float = 15.0) -> list[str]:
    """Stop the processes recorded in ``directory``; the names of those that were running.

    Logs and data stay. A PID is only signalled while it is still the process it names.
    """
    pids = _recorded_pids(directory)
    running = [name for name, pid in pids.items() if _running(pid, name)]
    _stop(directory, pids, timeout)
    (directory / STATE_FILE).unlink(missing_ok=True)
    return running


# --- files -----------------------------------------------------------------------------------


def _free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _write_tokens(path: Path, tokens: Mapping[str, str]) -> None:
    """The static token file: ``token,user,uid,"group1,group2"`` a line."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", newline="") as file:
        writer = csv.writer(file, quoting=csv.QUOTE_ALL)
        for name, token in tokens.items():
            user, groups = USERS[name]
            row = [token, user, f"uid-{name}"]
            if groups:
                row.append(",".join(groups))
            writer.writerow(row)


def _service_account_keys(directory: Path) -> tuple[Path, Path]:
    """A fresh RSA key pair for signing service-account tokens, made with openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ClusterError("openssl is not installed (it makes the service-account keys)")
    private, public = directory / "sa.key", directory / "sa.pub"
    private.unlink(missing_ok=True)
    for argv in (
        ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(private)],
        ["pkey", "-in", str(private), "-pubout", "-out", str(public)],
    ):
        result = subprocess.run([openssl, *argv], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"openssl {argv[0]} failed: {result.stderr.strip()}")
    private.chmod(0o600)
    return private, public


def _kubeconfig(server: str, ca_pem: bytes, user: str, token: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "koordpy",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "koordpy", "context": {"cluster": "koordpy", "user": user}}],
        "current-context": "koordpy",
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


# --- readiness -------------------------------------------------------------------------------


def _wait(
    what: str,
    ready: Callable[[], bool],
    directory: Path,
    pids: Mapping[str, int],
    deadline: float,
) -> None:
    """Poll ``ready`` until it holds; fail early, with its log, if a started process died."""
    while True:
        for name, pid in pids.items():
            if not _running(pid, name):
                raise ClusterError(
                    f"{name} exited while waiting for {what}; the end of {name}.log:\n"
                    + _log_tail(directory, name)
                )
        if ready():
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _get_ok(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2.0, context=context) as response:
            return bool(response.status == 200)
    except (OSError, ssl.SSLError):  # refused, not yet serving, HTTP errors (URLError)
        return False


def _exists(cluster: Cluster, path: str) -> bool:
    try:
        return cluster.request("GET", path, timeout=2.0)[0] == 200
    except OSError:
        return False


def _etcd_healthy(url: str) -> bool:
    request = urllib.request.Request(url + "/health")
    try:
        with urllib.request.urlopen(request, timeout=2.0) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


# --- start -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _stopped_on_failure(directory: Path, pids: dict[str, int]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        _stop(directory, pids, timeout=5.0)
        raise


def start_cluster(
    directory: Path,
    *,
    scheduler: bool = False,
    kwok: bool = False,
    audit: bool = False,
    timeout: float = 120.0,
) -> Cluster:
    """Start a fresh control plane in ``directory`` and return once it serves.

    ``scheduler`` adds kube-scheduler; ``kwok`` adds kwok, which plays the kubelet of every
    node (nodes turn Ready, bound pods Running); ``audit`` has the API server log every
    request (:data:`AUDIT_POLICY`) to ``audit.log`` (:meth:`Cluster.audit_events`). A
    previous cluster's etcd data in ``directory`` is removed; one still running there is an
    error.
    """
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    still_running = [name for name, pid in _recorded_pids(directory).items() if _running(pid, name)]
    if still_running:
        raise ClusterError(
            f"a cluster is already running in {directory} ({', '.join(still_running)}): "
            "stop it first"
        )
    names = ["etcd", "kube-apiserver", "kube-controller-manager"]
    names += ["kube-scheduler"] if scheduler else []
    names += ["kwok"] if kwok else []
    binaries = paths.require(names)
    started = time.monotonic()
    deadline = started + timeout

    etcd_client_port, etcd_peer_port, apiserver_port = _free_ports(3)
    etcd_url = f"http://127.0.0.1:{etcd_client_port}"
    etcd_peer_url = f"http://127.0.0.1:{etcd_peer_port}"
    server = f"https://127.0.0.1:{apiserver_port}"
    tokens = {name: secrets.token_urlsafe(32) for name in USERS}
    _write_tokens(directory / "tokens.csv", tokens)
    sa_key, sa_pub = _service_account_keys(directory)
    etcd_data = directory / "etcd"
    if etcd_data.exists():
        log.info("removing the previous cluster's etcd data %s", etcd_data)
        shutil.rmtree(etcd_data)
    cert_dir = directory / "certs"
    cert_dir.mkdir(exist_ok=True)
    serving_cert = cert_dir / "apiserver.crt"
    audit_log = directory / AUDIT_LOG if audit else None
    audit_flags: list[str] = []
    if audit_log is not None:
        policy = directory / AUDIT_POLICY_FILE
        policy.write_text(AUDIT_POLICY)
        audit_log.unlink(missing_ok=True)
        audit_flags = [f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}"]

    pids: dict[str, int] = {}
    with _stopped_on_failure(directory, pids):
        pids["etcd"] = _spawn(
            "etcd",
            [
                str(binaries["etcd"]),
                "--name=koordpy",
                f"--data-dir={etcd_data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={etcd_peer_url}",
                f"--initial-advertise-peer-urls={etcd_peer_url}",
                f"--initial-cluster=koordpy={etcd_peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
            ],
            directory,
        )
        _wait("etcd", lambda: _etcd_healthy(etcd_url), directory, pids, deadline)

        pids["kube-apiserver"] = _spawn(
            "kube-apiserver",
            [
                str(binaries["kube-apiserver"]),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={apiserver_port}",
                f"--cert-dir={cert_dir}",
                # No kubernetes Endpoints: they may not point at loopback.
                "--endpoint-reconciler-type=none",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--authorization-mode=RBAC",
                f"--token-auth-file={directory / 'tokens.csv'}",
                f"--service-account-key-file={sa_pub}",
                f"--service-account-signing-key-file={sa_key}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                "--profiling=false",
                *audit_flags,
            ],
            directory,
        )
        # The serving certificate (and its CA) is written before the server listens.
        _wait(
            "the API server's certificate",
            serving_cert.is_file,
            directory,
            pids,
            deadline,
        )
        ca_file = directory / "ca.crt"
        ca_pem = serving_cert.read_bytes()
        ca_file.write_bytes(ca_pem)
        context = ssl.create_default_context(cafile=str(ca_file))
        _wait(
            "the API server's /readyz",
            lambda: _get_ok(server + "/readyz", context=context, token=tokens["admin"]),
            directory,
            pids,
            deadline,
        )

        kubeconfigs = {}
        for name in USERS:
            path = directory / ("kubeconfig" if name == "admin" else f"{name}.kubeconfig")
            _write_private(path, _kubeconfig(server, ca_pem, USERS[name][0], tokens[name]))
            kubeconfigs[name] = path

        pids["kube-controller-manager"] = _spawn(
            "kube-controller-manager",
            [
                str(binaries["kube-controller-manager"]),
                f"--kubeconfig={kubeconfigs['kube-controller-manager']}",
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca_file}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--leader-elect=false",
                "--secure-port=0",
                "--profiling=false",
                # Else it creates /usr/libexec/kubernetes/kubelet-plugins/volume/exec.
                f"--flex-volume-plugin-dir={directory / 'flexvolume'}",
            ],
            directory,
        )
        if scheduler:
            pids["kube-scheduler"] = _spawn(
                "kube-scheduler",
                [
                    str(binaries["kube-scheduler"]),
                    f"--kubeconfig={kubeconfigs['kube-scheduler']}",
                    "--leader-elect=false",
                    "--secure-port=0",
                    "--profiling=false",
                ],
                directory,
            )
        if kwok:
            pids["kwok"] = _spawn(
                "kwok",
                [
                    str(binaries["kwok"]),
                    f"--kubeconfig={kubeconfigs['kwok']}",
                    f"--config={KWOK_STAGES}",
                    "--manage-all-nodes=true",
                    # Fake pod IPs, apart from the service range; nodes (and so anything that
                    # would talk to their kubelets) on loopback.
                    "--cidr=10.244.0.0/16",
                    "--node-ip=127.0.0.1",
                    # kwok renews each node's Lease: the node lifecycle controller's heartbeat.
                    "--node-lease-duration-seconds=40",
                ],
                directory,
            )
        # The service-account controller works once it has made the default namespace's
        # account; pods cannot be created before that anyway.
        cluster = Cluster(
            dir=directory,
            server=server,
            token=tokens["admin"],
            kubeconfig=kubeconfigs["admin"],
            ca_file=ca_file,
            etcd_url=etcd_url,
            pids=dict(pids),
            audit_log=audit_log,
        )
        _wait(
            "kube-controller-manager to create the default service account",
            lambda: _exists(cluster, "/api/v1/namespaces/default/serviceaccounts/default"),
            directory,
            pids,
            deadline,
        )
        state = {
            "server": server,
            "token": tokens["admin"],
            "kubeconfig": str(kubeconfigs["admin"]),
            "ca_file": str(ca_file),
            "etcd_url": etcd_url,
            "audit_log": str(audit_log) if audit_log is not None else None,
            "pids": pids,
            "ports": {
                "etcd-client": etcd_client_port,
                "etcd-peer": etcd_peer_port,
                "kube-apiserver": apiserver_port,
            },
            "versions": paths.versions(),
        }
        _write_private(directory / STATE_FILE, json.dumps(state, indent=2) + "\n")
    log.info("cluster ready at %s in %.1fs", server, time.monotonic() - started)
    return cluster
