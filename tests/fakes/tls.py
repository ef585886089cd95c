"""Throwaway certificates for TLS tests (made with the openssl command): a self-signed one,
or a CA issuing server and per-node client certificates."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) for ``localhost`` and ``127.0.0.1``; skips without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip(reason="the openssl command is needed to make a test certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def _openssl() -> str:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip(reason="the openssl command is needed to make test certificates")
    return openssl


def _run(*args: str) -> None:
    subprocess.run([_openssl(), *args], check=True, capture_output=True)


@dataclass(frozen=True, slots=True)
class CertAuthority:
    """A throwaway certificate authority: its certificate and key, and where it issues into."""

    cert: Path
    key: Path
    folder: Path

    def issue(self, name: str, *, server: bool = False) -> tuple[Path, Path]:
        """(certificate, key) with ``CN=name`` signed by this CA.

        ``server``: a server certificate for ``localhost`` and ``127.0.0.1`` (``name`` is only
        the file name); else a client certificate whose CN is ``name`` (a node's name, or
        ``controller``): the broker takes the CN as the MQTT user name.
        """
        cert, key, request = (self.folder / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
        extensions = self.folder / f"{name}.ext"
        if server:
            extensions.write_text(
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
            )
            subject = "/CN=localhost"
        else:
            extensions.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
            subject = f"/CN={name}"
        _run(
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(request),
        )  # fmt: skip
        _run(
            "x509", "-req", "-in", str(request), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", "1", "-extfile", str(extensions), "-out", str(cert),
        )  # fmt: skip
        return cert, key


def make_ca(folder: Path, name: str = "koordpy test CA") -> CertAuthority:
    """A new CA in ``folder`` (created); skips without openssl."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "ca.crt", folder / "ca.key"
    _run(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-days", "1", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
    )  # fmt: skip
    return CertAuthority(cert=cert, key=key, folder=folder)
