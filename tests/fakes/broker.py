"""A real mosquitto broker for tests: on a free port, stopped and restarted on that same port
mid-test, always killed at the end.

Two variants:

* plain (``secure=False``): one anonymous listener on 127.0.0.1, no ACL, the shipped queue
  limit;
* secure (``secure=True``): the shipped ``systemd/mosquitto/koordpy.conf`` and ``acl`` copied
  into the test's folder with only ports and file paths substituted: mutual TLS on
  :attr:`Broker.port` (the client certificate's CN is the user name), TLS with user name and
  password on :attr:`Broker.password_port`, the node ACL. A throwaway CA
  (:func:`tests.fakes.tls.make_ca`) signs the broker's certificate and every client's.

Use::

    with running_broker(tmp_path, secure=True, passwords={"node-a": "secret"}) as broker:
        settings = broker.settings("node-a")      # MqttSettings with node-a's certificate
        broker.restart()                          # same port; retained state kept only
                                                  # with persistence=True

Skips (``pytest.skip``) where mosquitto is not installed.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runtime.mqtt import MqttSettings
from tests.fakes.net import free_port
from tests.fakes.tls import CertAuthority, make_ca

__all__ = ["MOSQUITTO", "SHIPPED", "Broker", "free_port", "mosquitto", "running_broker"]

MOSQUITTO = "/usr/sbin/mosquitto"
#: The broker configuration koordpy ships (used as is by the secure variant).
SHIPPED = Path(__file__).resolve().parents[2] / "systemd" / "mosquitto"
#: Where the shipped files expect their certificates, ACL and password file.
SHIPPED_DIR = "/etc/mosquitto/koordpy/"
SHIPPED_TLS_PORT = 8883
SHIPPED_PASSWORD_PORT = 8884

#: Fast reconnects for tests (the defaults are 1 s to 30 s).
TEST_RECONNECT = {"reconnect_min": 0.05, "reconnect_max": 0.5}


def mosquitto() -> str:
    """The mosquitto binary; skips the test without it."""
    if not os.access(MOSQUITTO, os.X_OK):
        pytest.skip(reason=f"mosquitto is not installed ({MOSQUITTO}); apt-get install mosquitto")
    return MOSQUITTO


class Broker:
    """One mosquitto process under test control (see the module docstring)."""

    host = "127.0.0.1"

    def __init__(
        self,
        folder: Path,
        *,
        secure: bool = False,
        persistence: bool = False,
        passwords: dict[str, str] | None = None,
        extra: str = "",
    ) -> None:
        self.binary = mosquitto()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.secure = secure
        self.persistence = persistence
        self.port = free_port()
        self.password_port = free_port() if secure else None
        self.log_file = folder / "mosquitto.log"
        self.conf = folder / "mosquitto.conf"
        self.process: subprocess.Popen[bytes] | None = None
        self.ca: CertAuthority | None = None
        self._certs: dict[str, tuple[Path, Path]] = {}
        self._passwords = dict(passwords or {})
        if secure:
            self.ca = make_ca(folder / "pki")
            self._install_shipped()
        self.conf.write_text(self._main_conf() + self._listeners() + extra)

    # --- configuration ----------------------------------------------------------------------

    def _main_conf(self) -> str:
        """What Debian's own mosquitto.conf sets around the shipped include."""
        data = self.folder / "data"
        data.mkdir(exist_ok=True)
        return (
            f"user {getpass.getuser()}\n"
            f"persistence {'true' if self.persistence else 'false'}\n"
            f"persistence_location {data}/\n"
            f"log_dest file {self.log_file}\n"
            "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
        )

    def _listeners(self) -> str:
        if self.secure:
            shipped = (SHIPPED / "koordpy.conf").read_text()
            shipped = shipped.replace(SHIPPED_DIR, f"{self.folder}/")
            shipped = shipped.replace(f"listener {SHIPPED_TLS_PORT}\n", f"listener {self.port}\n")
            return shipped.replace(
                f"listener {SHIPPED_PASSWORD_PORT}\n", f"listener {self.password_port}\n"
            )
        # The shipped queue limit, so a fleet's retained replay is not dropped here either.
        return (
            f"listener {self.port} {self.host}\nallow_anonymous true\nmax_queued_messages 100000\n"
        )

    def _install_shipped(self) -> None:
        assert self.ca is not None
        shutil.copy(SHIPPED / "acl", self.folder / "acl")
        shutil.copy(self.ca.cert, self.folder / "ca.crt")
        cert, key = self.ca.issue("broker", server=True)
        shutil.copy(cert, self.folder / "broker.crt")
        shutil.copy(key, self.folder / "broker.key")
        passwd = self.folder / "passwd"
        passwd.write_text("")
        passwd.chmod(0o600)
        tool = shutil.which("mosquitto_passwd") if self._passwords else None
        if self._passwords and tool is None:
            pytest.skip(reason="mosquitto_passwd is not installed (Debian package mosquitto)")
        for user, password in self._passwords.items():
            assert tool is not None
            subprocess.run(
                [tool, "-b", str(passwd), user, password],
                check=True,
                capture_output=True,
            )

    # --- clients ----------------------------------------------------------------------------

    def certificate(self, user: str) -> tuple[Path, Path]:
        """(certificate, key) of a client whose CN (so its user name) is ``user``."""
        if self.ca is None:
            raise RuntimeError("a plain broker takes no certificates")
        if user not in self._certs:
            self._certs[user] = self.ca.issue(user)
        return self._certs[user]

    def settings(self, user: str = "", **overrides: Any) -> MqttSettings:
        """Settings reaching this broker with fast reconnects; on the secure variant, with
        ``user``'s client certificate (TLS port)."""
        fields: dict[str, Any] = {"host": self.host, "port": self.port, **TEST_RECONNECT}
        if self.secure:
            assert self.ca is not None
            cert, key = self.certificate(user)
            fields.update(ca_file=str(self.ca.cert), cert_file=str(cert), key_file=str(key))
        fields.update(overrides)
        return MqttSettings(**fields)

    def password_settings(self, user: str, password_file: Path, **overrides: Any) -> MqttSettings:
        """Settings for the password listener as ``user`` (the secure variant)."""
        if self.ca is None or self.password_port is None:
            raise RuntimeError("a plain broker has no password listener")
        fields: dict[str, Any] = {
            "host": self.host,
            "port": self.password_port,
            "ca_file": str(self.ca.cert),
            "username": user,
            "password_file": str(password_file),
            **TEST_RECONNECT,
        }
        fields.update(overrides)
        return MqttSettings(**fields)

    # --- process ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        """Start mosquitto and wait until it accepts connections."""
        if self.running:
            return
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self.conf)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                _, err = self.process.communicate()
                raise RuntimeError(
                    f"mosquitto exited with {self.process.returncode}: "
                    f"{err.decode(errors='replace')}{self.log()}"
                )
            ports = [self.port] if self.password_port is None else [self.port, self.password_port]
            if all(_accepts(self.host, port) for port in ports):
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"mosquitto did not listen on {self.port} within {timeout} s")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM and wait (a persistent broker saves its retained messages)."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()
        self.process = None

    def kill(self) -> None:
        """SIGKILL (nothing saved) and wait."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
        self.process = None

    def restart(self, timeout: float = 15.0) -> None:
        """Stop, then start again on the same port."""
        self.stop()
        self.start(timeout=timeout)

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def running_broker(
    folder: Path,
    *,
    secure: bool = False,
    persistence: bool = False,
    passwords: dict[str, str] | None = None,
    extra: str = "",
) -> Iterator[Broker]:
    """A started :class:`Broker` in ``folder``; killed on exit whatever happened."""
    broker = Broker(
        folder, secure=secure, persistence=persistence, passwords=passwords, extra=extra
    )
    try:
        broker.start()
        yield broker
    finally:
        broker.kill()
