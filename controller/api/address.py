"""Where the controller API listens and where clients reach it.

One value names an endpoint on both sides (``koordpy up --api`` and ``koordpy get --api``)::

    unix:///run/koordpy/controller.sock    unix socket, absolute path
    unix:relative/or/absolute.sock         unix socket, gRPC's short form
    /run/koordpy/controller.sock           a bare path is a unix socket too
    127.0.0.1:7443, tcp://host:7443        TCP (needs a bearer token)
    [::1]:7443                             TCP over IPv6

The default is ``unix:///run/koordpy/controller.sock`` for root, and
``unix://$XDG_RUNTIME_DIR/koordpy/controller.sock`` for everyone else.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_VAR", "SYSTEM_SOCKET", "Address", "AddressError", "default_address", "resolve"]

#: Environment variable naming the API address when ``--api`` is not given.
ENV_VAR = "KOORDPY_API"
#: The system-wide socket root listens on.
SYSTEM_SOCKET = Path("/run/koordpy/controller.sock")


class AddressError(ValueError):
    """An API address that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class Address:
    """A parsed endpoint: a unix socket path, or a TCP host and port."""

    path: Path | None = None
    host: str = ""
    port: int = 0

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    @property
    def target(self) -> str:
        """The string gRPC channels and servers take."""
        if self.path is not None:
            return f"unix://{self.path}" if self.path.is_absolute() else f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.target

    def with_port(self, port: int) -> Address:
        """The same TCP address with the port a server actually bound (``host:0``)."""
        return Address(host=self.host, port=port)

    @classmethod
    def parse(cls, text: str) -> Address:
        value = text.strip()
        if not value:
            raise AddressError("empty API address")
        if value.startswith("unix://"):
            return cls._unix(value.removeprefix("unix://"), text)
        if value.startswith("unix:"):
            return cls._unix(value.removeprefix("unix:"), text)
        if value.startswith(("/", "./", "../")):
            return cls._unix(value, text)
        if "://" in value:
            scheme, _, rest = value.partition("://")
            if scheme != "tcp":
                raise AddressError(
                    f"unsupported API address scheme {scheme!r} in {text!r} (use unix:// or tcp://)"
                )
            value = rest.rstrip("/")
        return cls._tcp(value, text)

    @classmethod
    def _unix(cls, path: str, text: str) -> Address:
        if not path:
            raise AddressError(f"no socket path in API address {text!r}")
        return cls(path=Path(path))

    @classmethod
    def _tcp(cls, value: str, text: str) -> Address:
        if value.startswith("["):
            host, sep, port_text = value[1:].partition("]:")
            if not sep:
                raise AddressError(f"expected [host]:port in API address {text!r}")
        else:
            host, sep, port_text = value.rpartition(":")
            if not sep:
                raise AddressError(
                    f"expected unix:///path.sock or host:port as API address, got {text!r}"
                )
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise AddressError(f"bad port {port_text!r} in API address {text!r}")
        return cls(host=host or "0.0.0.0", port=int(port_text))


def default_address(*, uid: int | None = None, environ: Mapping[str, str] | None = None) -> Address:
    """The API address when nothing names one: system socket for root, else per user."""
    env = os.environ if environ is None else environ
    if (os.geteuid() if uid is None else uid) == 0:
        return Address(path=SYSTEM_SOCKET)
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime:
        return Address(path=Path(runtime) / "koordpy" / "controller.sock")
    user_id = os.geteuid() if uid is None else uid
    return Address(path=Path(tempfile.gettempdir()) / f"koordpy-{user_id}" / "controller.sock")


def resolve(
    value: str | None = None, *, uid: int | None = None, environ: Mapping[str, str] | None = None
) -> Address:
    """``--api`` when given, else ``$KOORDPY_API``, else :func:`default_address`."""
    env = os.environ if environ is None else environ
    text = value or env.get(ENV_VAR, "")
    return Address.parse(text) if text else default_address(uid=uid, environ=env)
