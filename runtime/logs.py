"""Logging setup: stdlib ``logging``, JSON lines for machines, plain text for people.

JSON lines carry ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``, every field
passed through ``extra={...}``, and ``exception`` when there is one. Plain text appends the
extra fields as ``key=value``. JSON is chosen when stderr is not a terminal, unless asked.
"""

from __future__ import annotations

import json as jsonlib
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["JsonFormatter", "PlainFormatter", "setup_logging"]

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return jsonlib.dumps(entry, default=str, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """``2026-01-01 12:00:00,000 INFO    agent.daemon: message key=value``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = _extras(record)
        if not extras:
            return text
        head, sep, tail = text.partition("\n")
        fields = " ".join(f"{k}={v}" for k, v in extras.items())
        return f"{head} {fields}{sep}{tail}"


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``setup_logging`` owns (so a second call replaces it)."""


#: Libraries whose INFO records are one per request.
CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


def setup_logging(
    level: int | str = logging.INFO,
    *,
    json: bool | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Configure the root logger; ``json=None`` picks JSON unless ``stream`` is a terminal.

    Calling it again replaces the handler it installed before. Returns the handler.
    """
    target = stream if stream is not None else sys.stderr
    if isinstance(level, str):
        resolved = logging.getLevelNamesMapping().get(level.upper())
        if resolved is None:
            raise ValueError(f"unknown log level {level!r}")
        level = resolved
    if json is None:
        isatty = getattr(target, "isatty", None)
        json = not (callable(isatty) and isatty())
    handler = _Handler(target)
    handler.setFormatter(JsonFormatter() if json else PlainFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    # HTTP clients log every request at INFO (a Kubernetes controller makes thousands a
    # minute): only their warnings, unless asked for debug.
    for chatty in CHATTY_LOGGERS:
        logging.getLogger(chatty).setLevel(level if level <= logging.DEBUG else logging.WARNING)
    return handler
