"""Who can reach the controller API over TCP: TLS verified by the CLI, private token files,
and tokens long enough to resist guessing (issue 18; README "Running" and "Configuration")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest

from controller.api.server import ApiServer
from controller.api.token import MIN_TOKEN_LENGTH, TokenError, read_token_file
from controller.store.sqlite import Store
from koordpy import cli
from tests.fakes.tls import self_signed

TOKEN = "k" * MIN_TOKEN_LENGTH
NODE = """\
apiVersion: v1
kind: Node
metadata: {name: gpu-1}
"""


class TlsServer:
    """A TCP API with TLS and a bearer token, served from a background loop."""

    def __init__(self, cert: Path, key: Path) -> None:
        self._tls = (cert, key)
        self.address = ""
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tls-api", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        cert, key = self._tls
        async with (
            Store() as store,
            ApiServer(
                store, "127.0.0.1:0", token=TOKEN, tls_cert=cert, tls_key=key, grace=0.1
            ) as server,
        ):
            self.address = str(server.address)
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> TlsServer:
        self._thread.start()
        assert self._ready.wait(30), "the TLS API did not start"
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


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "server"
    folder.mkdir()
    return self_signed(folder)


@pytest.fixture
def tls_server(certificate: tuple[Path, Path]) -> Iterator[TlsServer]:
    with TlsServer(*certificate) as running:
        yield running


def private_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def koordpy(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def no_api_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("KOORDPY_API", "KOORDPY_TOKEN", "KOORDPY_TOKEN_FILE", "KOORDPY_TLS_CA"):
        monkeypatch.delenv(variable, raising=False)


# --- the CLI over TLS ------------------------------------------------------------------------


def test_cli_verifies_the_server_with_tls_ca(
    tls_server: TlsServer,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = tmp_path / "node.yaml"
    manifest.write_text(NODE)
    api = ("--api", tls_server.address, "--token", TOKEN, "--tls-ca", str(certificate[0]))
    assert koordpy(capsys, *api, "apply", "-f", str(manifest)) == (0, "node/gpu-1 created\n", "")
    code, out, _ = koordpy(capsys, "get", "nodes", "-o", "name", *api)
    assert (code, out) == (0, "node/gpu-1\n")


def test_tls_ca_and_token_file_from_the_environment(
    tls_server: TlsServer,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KOORDPY_API", tls_server.address)
    monkeypatch.setenv("KOORDPY_TLS_CA", str(certificate[0]))
    monkeypatch.setenv("KOORDPY_TOKEN_FILE", str(private_file(tmp_path / "token", TOKEN + "\n")))
    assert koordpy(capsys, "get", "nodes") == (0, "", "No resources found\n")


def test_a_certificate_the_ca_did_not_sign_is_refused(
    tls_server: TlsServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other_ca, _ = self_signed(tmp_path)
    code, out, err = koordpy(
        capsys, "--api", tls_server.address, "--token", TOKEN, "--tls-ca", str(other_ca),
        "get", "nodes",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert tls_server.address in err


def test_plaintext_to_a_tls_api_fails(
    tls_server: TlsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = koordpy(capsys, "--api", tls_server.address, "--token", TOKEN, "get", "nodes")
    assert code == 1
    assert err.startswith("error: ")


def test_an_unreadable_tls_ca_names_the_file(
    tls_server: TlsServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.pem"
    code, _, err = koordpy(
        capsys, "--api", tls_server.address, "--token", TOKEN, "--tls-ca", str(missing),
        "get", "nodes",
    )  # fmt: skip
    assert code == 1
    assert f"--tls-ca: cannot read {str(missing)!r}" in err


# --- token files -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_token_file_others_can_read_is_refused(
    mode: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = private_file(tmp_path / "token", TOKEN, mode)
    code, out, err = koordpy(
        capsys, "--api", "127.0.0.1:1", "--token-file", str(token_file), "get", "nodes"
    )
    assert (code, out) == (2, "")
    assert str(token_file) in err
    assert f"mode {mode:04o}" in err


def test_token_file_reading(tmp_path: Path) -> None:
    assert read_token_file(private_file(tmp_path / "a", f"  {TOKEN}  \nignored\n")) == TOKEN
    assert read_token_file(private_file(tmp_path / "b", TOKEN, 0o400)) == TOKEN
    with pytest.raises(TokenError, match="is empty"):
        read_token_file(private_file(tmp_path / "c", "\n\n"))
    with pytest.raises(TokenError, match="cannot read"):
        read_token_file(tmp_path / "absent")


def test_token_file_works_against_the_tls_api(
    tls_server: TlsServer,
    certificate: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token_file = private_file(tmp_path / "token", TOKEN)
    code, _, err = koordpy(
        capsys, "--api", tls_server.address, "--token-file", str(token_file),
        "--tls-ca", str(certificate[0]), "get", "nodes",
    )  # fmt: skip
    assert (code, err) == (0, "No resources found\n")
    wrong = private_file(tmp_path / "wrong", "w" * MIN_TOKEN_LENGTH)
    code, _, err = koordpy(
        capsys, "--api", tls_server.address, "--token-file", str(wrong),
        "--tls-ca", str(certificate[0]), "get", "nodes",
    )  # fmt: skip
    assert code == 1
    assert "token" in err


# --- token length at start-up ----------------------------------------------------------------


def controller_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> int:
    return cli.main(
        [
            "--api", "127.0.0.1:0", *argv, "controller", "run",
            "--state-dir", str(tmp_path / "state"), "--metrics-address", "off",
        ]
    )  # fmt: skip


def test_controller_refuses_a_short_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    short = "s" * (MIN_TOKEN_LENGTH - 1)
    assert controller_run(capsys, tmp_path, "--token", short) == 2
    assert f"--token: the bearer token has {MIN_TOKEN_LENGTH - 1} characters" in caplog.text
    assert not (tmp_path / "state").exists(), "refused before the store is touched"


def test_controller_refuses_a_short_token_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    token_file = private_file(tmp_path / "token", "short\n")
    config = tmp_path / "controller.toml"
    config.write_text(f'[api]\ntoken_file = "{token_file}"\n')
    code = cli.main(
        [
            "--api", "127.0.0.1:0", "controller", "run", "--config", str(config),
            "--state-dir", str(tmp_path / "state"), "--metrics-address", "off",
        ]
    )  # fmt: skip
    assert code == 2
    assert "[api] token_file: the bearer token has 5 characters" in caplog.text


def test_controller_refuses_a_readable_token_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = private_file(tmp_path / "token", TOKEN, 0o644)
    config = tmp_path / "controller.toml"
    config.write_text(f'[api]\ntoken_file = "{token_file}"\n')
    code = cli.main(
        [
            "--api", "127.0.0.1:0", "controller", "run", "--config", str(config),
            "--state-dir", str(tmp_path / "state"), "--metrics-address", "off",
        ]
    )  # fmt: skip
    assert code == 2
    assert f"[api] token_file: {str(token_file)!r} has mode 0644" in caplog.text


def test_up_refuses_a_short_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(
        [
            "up", "--api", "127.0.0.1:0", "--token", "s3cret", "--state-dir",
            str(tmp_path / "state"), "--metrics-address", "off", "--agent-metrics-address", "off",
        ]
    )  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    assert f"--token: the bearer token has 6 characters, at least {MIN_TOKEN_LENGTH}" in err
