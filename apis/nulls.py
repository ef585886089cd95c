"""Explicit nulls in a manifest, read as Kubernetes reads them.

``annotations: null``, ``nodeName: null``, ``tolerations: null``: a null field is unset, at any
depth, so the field takes its default. A null value in a map of strings (labels, annotations,
``nodeSelector``, a ConfigMap's ``data``) is the empty string, as Go's JSON decoding of a
``map[string]string`` makes it. The walk follows the target type (``msgspec.inspect``). Loose
data (``dict[str, Any]``: a NodeSLO's ``extensions``, Argo templates) keeps its nulls, as
Kubernetes keeps them under ``x-kubernetes-preserve-unknown-fields``; a part of it decoded into
a typed Struct later loses them then (:func:`apis.codec.decode_as`). A null list item is left
for the decoder to report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

import msgspec
import msgspec.inspect as mi

__all__ = ["unset_nulls"]

_SEQUENCES = (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)


@functools.cache
def _info(target: Any) -> mi.Type:
    return mi.type_info(target)


@functools.cache
def _fields(cls: type) -> dict[str, mi.Type]:
    info = _info(cls)
    assert isinstance(info, mi.StructType)
    return {field.encode_name: field.type for field in info.fields}


def _member(union: mi.UnionType, value: Any) -> mi.Type | None:
    """The member of ``union`` a raw mapping or list decodes as."""
    for member in union.types:
        if isinstance(value, dict) and isinstance(member, (mi.StructType, mi.DictType)):
            return member
        if isinstance(value, list) and isinstance(member, (*_SEQUENCES, mi.TupleType)):
            return member
    return None


_DROP: Final = object()


def _walk(value: Any, target: mi.Type | None) -> Any:
    kind = type(value)
    if kind is not dict and kind is not list:
        return value
    if isinstance(target, mi.UnionType):
        target = _member(target, value)
    if kind is dict:
        if isinstance(target, mi.StructType):
            return _map(value, _fields(target.cls).get, blank=None)
        if isinstance(target, mi.DictType) and not isinstance(target.value_type, mi.AnyType):
            item = target.value_type
            blank = "" if isinstance(item, mi.StrType) else None
            return _map(value, lambda _key: item, blank=blank)
        return value  # loose data (``Any``) keeps its nulls
    if isinstance(target, _SEQUENCES):
        items = [_walk(item, target.item_type) for item in value]
    elif isinstance(target, mi.TupleType):
        types = target.item_types
        items = [_walk(item, types[i]) if i < len(types) else item for i, item in enumerate(value)]
    else:
        return value
    return items if any(a is not b for a, b in zip(items, value, strict=True)) else value


def _map(
    value: dict[str, Any], type_of: Callable[[str], mi.Type | None], *, blank: str | None
) -> dict[str, Any]:
    """``value`` with each null entry dropped, or replaced by ``blank`` when one is given; the
    same dict when nothing changes."""
    changes: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            changes[key] = _DROP if blank is None else blank
        elif type(item) is dict or type(item) is list:
            new = _walk(item, type_of(key))
            if new is not item:
                changes[key] = new
    if not changes:
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        new = changes.get(key, item)
        if new is not _DROP:
            out[key] = new
    return out


def unset_nulls(raw: Any, target: type) -> Any:
    """``raw`` as Kubernetes would decode it into ``target``: nulls unset (see module doc)."""
    try:
        if b"null" not in msgspec.json.encode(raw):
            return raw  # no null anywhere: most documents, found at C speed
    except (TypeError, ValueError, OverflowError):
        pass
    return _walk(raw, _info(target))
