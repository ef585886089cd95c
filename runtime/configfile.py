"""Strict TOML configuration: a file decodes into a msgspec Struct or fails naming the key.

Config Structs forbid unknown fields, so a typo is an error, not a silently ignored setting::

    [agent]
    nodename = "gpu-1"      ->  ConfigError: agent.toml: unknown key 'nodename' in [agent]

A missing *default* path means "all defaults"; a missing path the user named is an error.
Callers turn a :class:`ConfigError` into exit status 2 (:func:`exit_on_error`) before they
start anything.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO, TypeVar

import msgspec

from runtime.lifecycle import Fatal

__all__ = ["EXIT_CONFIG", "ConfigError", "exit_on_error", "load_config", "parse_config"]

T = TypeVar("T")

#: Exit status of a daemon or command whose configuration is unusable.
EXIT_CONFIG = 2

_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<key>[^`]+)`(?: - at `\$(?P<at>.*)`)?$")
_AT = re.compile(r"^(?P<message>.*) - at `\$(?P<at>.*)`$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


class ConfigError(Fatal, ValueError):
    """A configuration file cannot be used; fatal (exit status 2)."""


def _steps(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _STEP.findall(path)]


def _table(steps: list[str | int]) -> str:
    if not steps:
        return "at the top level"
    text = ""
    for step in steps:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return f"in [{text}]"


def _value_at(raw: Any, steps: list[str | int]) -> tuple[bool, Any]:
    node = raw
    for step in steps:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, node


def _describe(err: msgspec.ValidationError, raw: Mapping[str, Any]) -> str:
    text = str(err)
    unknown = _UNKNOWN.match(text)
    if unknown:
        return f"unknown key {unknown['key']!r} {_table(_steps(unknown['at'] or ''))}"
    located = _AT.match(text)
    if not located:
        return text
    steps = _steps(located["at"])
    message = located["message"]
    message = message[:1].lower() + message[1:]
    message = message.replace("`", "")
    if not steps:
        return message
    found, value = _value_at(raw, steps)
    # The key is the last named step plus any list indexes after it: ``simulate[0]``.
    named = [i for i, step in enumerate(steps) if isinstance(step, str)]
    cut = named[-1] if named else 0
    key = "".join(f"[{s}]" if isinstance(s, int) else s for s in steps[cut:])
    shown = f" (value {value!r})" if found else ""
    return f"key {key!r} {_table(steps[:cut])}: {message}{shown}"


def parse_config(text: str, target: type[T], *, source: str = "<config>") -> T:
    """Decode TOML text into ``target``; every error is a :class:`ConfigError`."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: invalid TOML: {err}") from None
    try:
        return msgspec.convert(raw, type=target, strict=True)
    except msgspec.ValidationError as err:
        raise ConfigError(f"{source}: {_describe(err, raw)}") from None


def load_config(
    path: str | Path | None, target: type[T], *, default: str | Path | None = None
) -> T:
    """Load ``path`` (must exist), else ``default`` (may be absent: all defaults)."""
    if path is not None and str(path) != "":
        chosen = Path(path)
        if not chosen.is_file():
            raise ConfigError(f"{chosen}: config file not found")
    elif default is not None and Path(default).is_file():
        chosen = Path(default)
    else:
        return parse_config("", target)
    try:
        text = chosen.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{chosen}: cannot read config: {err}") from None
    return parse_config(text, target, source=str(chosen))


def exit_on_error(err: ConfigError, *, prog: str = "koordpy", stream: TextIO | None = None) -> int:
    """Print ``err`` for a person and return :data:`EXIT_CONFIG`."""
    print(f"{prog}: config error: {err}", file=stream if stream is not None else sys.stderr)
    return EXIT_CONFIG
