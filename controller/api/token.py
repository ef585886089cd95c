"""The API's bearer token: read from a private file, and long enough to resist guessing.

A token file must not be readable by its group or by others (the rule ssh applies to private
keys and mosquitto to its password files); a token must be at least :data:`MIN_TOKEN_LENGTH`
characters (README "Running").
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from controller.errors import ConfigError

__all__ = ["MIN_TOKEN_LENGTH", "TokenError", "check_token", "read_token_file"]

#: Shortest bearer token a controller starts with (32 random characters, about 190 bits).
MIN_TOKEN_LENGTH = 32


class TokenError(ConfigError):
    """A token, or the file holding it, that cannot be used."""


def read_token_file(path: Path | str, *, field: str = "token file") -> str:
    """The first line of ``path``; refuses a file its group or others can read, and an empty one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise TokenError(f"{field}: cannot read {str(path)!r}: {err.strerror}") from None
    with os.fdopen(fd, encoding="utf-8") as file:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            raise TokenError(
                f"{field}: {str(path)!r} has mode {mode:04o}: its group or others can read it "
                f"(chmod 600 {path})"
            )
        text = file.read()
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise TokenError(f"{field}: {str(path)!r} is empty")
    return lines[0].strip()


def check_token(token: str, *, field: str) -> str:
    """``token`` if it is empty (none) or long enough; else :class:`TokenError` naming ``field``."""
    if token and len(token) < MIN_TOKEN_LENGTH:
        raise TokenError(
            f"{field}: the bearer token has {len(token)} characters, "
            f"at least {MIN_TOKEN_LENGTH} are needed"
        )
    return token
