"""How the store writes an object as JSON (the bytes a backend keeps and serves)."""

from __future__ import annotations

from typing import Any

import msgspec

from apis import codec
from apis.duration import Duration
from apis.resources import ResourceList

__all__ = ["encode"]


def _enc_hook(value: Any) -> Any:
    if type(value) is ResourceList:
        return value.stored_form()  # the text it came with, or its wire form (kept by it)
    if type(value) is Duration:
        return str(value)
    return codec.to_builtins(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def encode(obj: Any) -> bytes:
    """An object's stored JSON: the bytes :func:`apis.codec.encode_json` gives, except that a
    resource list decoded from plain and milli numbers keeps their text (see
    :mod:`apis.resources`; it reads back to the same amounts)."""
    return _ENCODER.encode(obj)
