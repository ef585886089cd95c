"""Reading a ``slo-controller-config`` JSON value the way koord-manager's Go decoder does.

Go's ``encoding/json`` matches object keys to struct fields exactly or, failing that, without
regard to case (the cpu-evict manual writes ``CPUEvictTimeWindowSeconds``), and skips keys no
field has. :func:`conform` rewrites a decoded value to the wire names of a msgspec Struct type
the same way and reports the keys it dropped, so that :func:`decode` can then convert it
strictly (a wrong type is an error naming the field and the value).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from apis import codec
from apis.bounded import nested_deeper
from apis.codec import MAX_DEPTH
from apis.errors import DecodeError

__all__ = ["GoJSONError", "conform", "decode", "json_text", "load_object"]


class GoJSONError(ValueError):
    """The text is not JSON, or a value does not have its field's type."""


def load_object(text: str) -> dict[str, Any]:
    """The JSON object ``text`` holds (not JSON / not an object: :class:`GoJSONError`)."""
    if nested_deeper(text, MAX_DEPTH):
        raise GoJSONError(f"invalid JSON: maps and lists nested more than {MAX_DEPTH} levels deep")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise GoJSONError(
            f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    if not isinstance(value, dict):
        raise GoJSONError(f"expected a JSON object, got {type(value).__name__}")
    return value


def _struct_fields(
    info: msgspec.inspect.Type,
) -> dict[str, tuple[str, msgspec.inspect.Type]] | None:
    if isinstance(info, msgspec.inspect.StructType):
        return {f.encode_name.lower(): (f.encode_name, f.type) for f in info.fields}
    return None


def _conform(value: Any, info: msgspec.inspect.Type, path: str, dropped: list[str]) -> Any:
    if isinstance(info, msgspec.inspect.UnionType):
        for member in info.types:
            if isinstance(member, msgspec.inspect.StructType) and isinstance(value, dict):
                return _conform(value, member, path, dropped)
            containers = (
                msgspec.inspect.DictType,
                msgspec.inspect.ListType,
                msgspec.inspect.VarTupleType,
            )
            if isinstance(member, containers) and isinstance(value, dict | list):
                return _conform(value, member, path, dropped)
        return value
    fields = _struct_fields(info)
    if fields is not None and isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            exact = next((f for f in fields.values() if f[0] == key), None)
            found = exact or fields.get(str(key).lower())
            if found is None:
                dropped.append(f"{path}.{key}" if path else str(key))
                continue
            name, sub = found
            if name in out and exact is None:
                continue  # Go: an exact match wins over a case-insensitive one
            out[name] = _conform(item, sub, f"{path}.{name}" if path else name, dropped)
        return out
    if isinstance(info, msgspec.inspect.DictType) and isinstance(value, dict):
        return {
            k: _conform(v, info.value_type, f"{path}.{k}" if path else str(k), dropped)
            for k, v in value.items()
        }
    if isinstance(info, msgspec.inspect.ListType | msgspec.inspect.VarTupleType) and isinstance(
        value, list
    ):
        return [_conform(v, info.item_type, f"{path}[{i}]", dropped) for i, v in enumerate(value)]
    return value


def conform(value: Any, tp: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` with its keys renamed to ``tp``'s wire names; the unknown keys dropped."""
    dropped: list[str] = []
    return _conform(value, msgspec.inspect.type_info(tp), path, dropped), dropped


def json_text(value: Any) -> str:
    """``value`` as JSON, for messages."""
    return json.dumps(value)


def decode(value: Any, tp: Any, path: str = "") -> Any:
    """``value`` (already conformed) as ``tp``; a wrong type names the field and its value."""
    try:
        return codec.decode_as(value, tp)
    except DecodeError as err:
        field = ".".join(p for p in (path, err.field) if p) or "value"
        shown = f" {err.value}:" if err.value else ""
        raise GoJSONError(f"{field}:{shown} {err.message}") from None
