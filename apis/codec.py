"""Decoding and encoding objects: YAML/JSON documents <-> Structs.

Everything that turns bytes into objects goes through here, so every error names the source,
the document index, the field path and the offending value (a map value's key included:
``metadata.labels.gpu``). YAML is read as Kubernetes reads it (:mod:`apis.goyaml`), and every
typed decode unsets explicit nulls (:mod:`apis.nulls`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi
import yaml

from apis.bounded import nested_deeper
from apis.caches import Cache
from apis.duration import Duration
from apis.errors import DecodeError, UnknownKind
from apis.goyaml import MAX_DEPTH, DuplicateKeys, KubeLoader, jsonable, too_deep
from apis.kinds import Kind, Registry, default_registry
from apis.meta import Object
from apis.nulls import unset_nulls
from apis.resources import ResourceList

__all__ = [
    "MAX_DEPTH",
    "check_depth",
    "decode_as",
    "decode_documents",
    "decode_json",
    "decode_object",
    "dump_yaml",
    "encode_json",
    "kind_of",
    "load_yaml_documents",
    "to_builtins",
]

T = TypeVar("T")
_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")


def _dec_hook(target: type, value: Any) -> Any:
    if target is ResourceList:
        if isinstance(value, ResourceList):
            return value
        return ResourceList.parse(value)
    if target is Duration:
        if isinstance(value, Duration):
            return value
        return Duration.parse(value)
    raise NotImplementedError(f"no decoder for {target!r}")


_DURATIONS: Cache[str, Duration] = Cache(
    "codec.durations",
    limit=1024,
    contract="Durations decoded from JSON, by text: they are immutable, and reports repeat a"
    " few windows",
)


def _json_dec_hook(target: type, value: Any) -> Any:
    # The decoder's maps are fresh and held by nobody else: a resource list may keep one.
    if target is ResourceList and type(value) is dict:
        return ResourceList.adopt(value)
    if target is Duration and type(value) is str:
        found = _DURATIONS.get(value)
        return found if found is not None else _DURATIONS.put(value, Duration.parse(value))
    return _dec_hook(target, value)


def _enc_hook(value: Any) -> Any:
    if type(value) is ResourceList:
        return value.wire_form()
    if isinstance(value, Duration):
        return str(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)
_DECODERS: Cache[type[Any], msgspec.json.Decoder[Any]] = Cache(
    "codec.decoders",
    limit=4096,
    contract="a msgspec decoder per target type: it depends on the type alone",
)


def encode_json(obj: Any) -> bytes:
    """Compact JSON of an object (or any Struct/builtin mix)."""
    return _ENCODER.encode(obj)


def to_builtins(obj: Any) -> Any:
    """Plain dicts/lists/strings, as the object looks on the wire."""
    return msgspec.to_builtins(obj, enc_hook=_enc_hook)


def _decoder(target: type[T]) -> msgspec.json.Decoder[T]:
    found = _DECODERS.get(target)
    if found is None:
        found = _DECODERS.put(target, msgspec.json.Decoder(target, dec_hook=_json_dec_hook))
    return found


def _lookup(document: Any, path: str) -> tuple[bool, Any]:
    """Resolve a msgspec error path (``.spec.containers[0].name``) inside a raw document."""
    node = document
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        key, index = part
        try:
            node = node[int(index)] if index else node[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, node


_GOT = re.compile(r"got `(?P<type>[a-z]+)`")
_JSON_TYPES = {bool: "bool", int: "int", float: "float", str: "str", dict: "object", list: "array"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), "")


def _keyed(node: Any, path: str, got: str) -> str | None:
    """``path`` with each ``[...]`` (msgspec's "some map value") replaced by the key whose value
    is the ``got`` type msgspec complained about; None when no key fits."""
    head, marker, rest = path.partition("[...]")
    found, inner = _lookup(node, head)
    if not found:
        return None
    if not marker:
        return head if _json_type(inner) == got else None
    if not isinstance(inner, dict):
        return None
    for key, value in inner.items():
        tail = _keyed(value, rest, got)
        if tail is not None:
            return _child(head, str(key)) + tail
    return None


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(?P<name>[^`]+)`")
_MISSING_FIELD = re.compile(r"Object missing required field `(?P<name>[^`]+)`")
_BAD_RESOURCE = re.compile(r"resource '(?P<name>[^']+)': ")


def _child(parent: str, key: str) -> str:
    """``parent.key``, or ``parent[key]`` for keys with dots or slashes (resource names)."""
    return f"{parent}[{key}]" if ("." in key or "/" in key) else f"{parent}.{key}"


def _translate(err: msgspec.ValidationError, raw: Any) -> DecodeError:
    message = str(err)
    path = ""
    match = _PATH.search(message)
    if match is not None:
        message = message[: match.start()]
        path = match["path"]
    if "[...]" in path and (got := _GOT.search(message)) is not None:
        path = _keyed(raw, path, got["type"]) or path
    found, node = _lookup(raw, path)
    key = ""
    for pattern, text in (
        (_UNKNOWN_FIELD, "unknown field"),
        (_MISSING_FIELD, "missing required field"),
    ):
        named = pattern.match(message)
        if named is not None:
            key, message = named["name"], text
            break
    else:
        resource = _BAD_RESOURCE.match(message)
        if resource is not None:
            key, message = resource["name"], message[resource.end() :]
    if key:
        path = _child(path, key)
        found, node = (
            (True, node[key]) if found and isinstance(node, dict) and key in node else (False, None)
        )
    value = _show(node) if found and not isinstance(node, (dict, list)) else ""
    return DecodeError(message, field=path.lstrip("."), value=value)


def decode_as(raw: Any, target: type[T]) -> T:
    """Convert raw builtins into ``target``, explicit nulls unset (:mod:`apis.nulls`); errors
    become :class:`DecodeError`."""
    raw = unset_nulls(raw, target)
    try:
        return msgspec.convert(raw, target, dec_hook=_dec_hook)
    except msgspec.ValidationError as err:
        raise _translate(err, raw) from None


def kind_of(raw: Any, registry: Registry) -> Kind:
    if not isinstance(raw, dict):
        raise DecodeError(f"expected an object (mapping), got {type(raw).__name__}")
    api_version = raw.get("apiVersion")
    kind = raw.get("kind")
    if not isinstance(api_version, str) or not api_version:
        raise DecodeError("apiVersion is required", field="apiVersion")
    if not isinstance(kind, str) or not kind:
        raise DecodeError("kind is required", field="kind")
    try:
        return registry.for_gvk(api_version, kind)
    except UnknownKind as err:
        raise DecodeError(str(err), field="kind", value=_show(kind)) from None


def decode_object(raw: Any, *, registry: Registry | None = None) -> Object:
    """One raw document (builtins) -> the Struct of its kind, apiVersion normalised."""
    registry = registry or default_registry()
    kind = kind_of(raw, registry)
    if raw["apiVersion"] != kind.api_version:
        raw = {**raw, "apiVersion": kind.api_version}
    return decode_as(raw, kind.type)


def check_depth(data: bytes | str) -> None:
    """:class:`DecodeError` when the JSON ``data`` nests maps and lists deeper than
    :data:`MAX_DEPTH` (also when it is not JSON but would recurse that deep before a decoder
    noticed). Linear in the size of ``data`` (times the depth, for deeply nested text)."""
    if nested_deeper(data, MAX_DEPTH):
        raise DecodeError(f"invalid JSON: {too_deep()}")


#: Whether a decoded value, found ``levels`` maps and lists deep, nests deeper than allowed.
_Walk = Callable[[Any, int], bool]


def _any_deeper(value: Any, levels: int) -> bool:
    """Whether ``value`` (decoded as ``Any``: dicts, lists, scalars), inside ``levels`` maps
    and lists, takes the nesting past :data:`MAX_DEPTH`. Level by level, no recursion."""
    frontier = [value]
    while True:
        inner: list[Any] = []
        opened = False  # a map or list at this level
        for item in frontier:
            if type(item) is dict:
                inner.extend(item.values())
            elif type(item) is list:
                inner.extend(item)
            else:
                continue
            opened = True
        if not opened:
            return False
        levels += 1
        if levels > MAX_DEPTH:
            return True
        frontier = inner


class _UnplannableError(Exception):
    """A type whose decoded values cannot say how deep their JSON was."""


def _walk_of(info: mi.Type, seen: frozenset[type]) -> _Walk | None:
    """How to find the ``Any`` parts of a decoded ``info`` (None: it has none, so msgspec
    reads no deeper than the type itself goes). ``seen``: the Structs around it."""
    if len(seen) > MAX_DEPTH:
        raise _UnplannableError  # the type alone nests that deep
    if isinstance(info, mi.AnyType):
        return _any_deeper
    if isinstance(info, mi.StructType):
        if not info.forbid_unknown_fields or info.cls in seen:
            raise _UnplannableError  # unknown fields are skipped recursively; recursive types
        inner = seen | {info.cls}
        fields = [(f.name, w) for f in info.fields if (w := _walk_of(f.type, inner)) is not None]
        if not fields:
            return None

        def struct(value: Any, levels: int) -> bool:
            levels += 1
            for name, walk in fields:  # noqa: SIM110 - any() over a generator is slower
                if walk(getattr(value, name), levels):
                    return True
            return False

        return struct
    if isinstance(info, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        item = _walk_of(info.item_type, seen)
        if item is None:
            return None

        def items(value: Any, levels: int) -> bool:
            levels += 1
            for v in value:  # noqa: SIM110 - any() over a generator is slower
                if item(v, levels):
                    return True
            return False

        return items
    if isinstance(info, mi.TupleType):
        walks = [_walk_of(t, seen) for t in info.item_types]
        if not any(walks):
            return None
        return lambda value, levels: any(
            w(v, levels + 1) for w, v in zip(walks, value, strict=True) if w is not None
        )
    if isinstance(info, mi.DictType):
        value_walk = _walk_of(info.value_type, seen)
        if value_walk is None:
            return None

        def values(value: Any, levels: int) -> bool:
            levels += 1
            for v in value.values():  # noqa: SIM110 - any() over a generator is slower
                if value_walk(v, levels):
                    return True
            return False

        return values
    if isinstance(info, mi.UnionType):
        return _union_walk(info, seen)
    if isinstance(info, mi.RawType):
        raise _UnplannableError
    # scalars, and the custom types (ResourceList, Duration), which the decode hook takes
    # only as a flat map of quantities or a string
    return None


def _union_walk(info: mi.UnionType, seen: frozenset[type]) -> _Walk | None:
    if any(isinstance(t, mi.AnyType) for t in info.types):
        return _any_deeper
    by_type: dict[type, _Walk] = {}
    for option in info.types:
        walk = _walk_of(option, seen)
        if walk is None:
            continue
        if isinstance(option, mi.StructType):
            by_type[option.cls] = walk
        elif isinstance(option, mi.DictType):
            by_type[dict] = walk
        elif isinstance(option, (mi.ListType, mi.VarTupleType, mi.TupleType)):
            by_type[list] = by_type[tuple] = walk
        else:
            raise _UnplannableError
    if not by_type:
        return None

    def member(value: Any, levels: int) -> bool:
        walk = by_type.get(type(value))
        return walk is not None and walk(value, levels)

    return member


#: The most ``Any`` parts a type may have for its decoded values to be walked (Node has 11,
#: NodeMetric 2); a Pod, with 91, is cheaper to check by its text.
MAX_WALKED_ANY_PARTS = 16
_DEPTH_WALKS: Cache[type[Any], tuple[_Walk | None, bool]] = Cache(
    "codec.depth-walks",
    limit=4096,
    contract="how to check the nesting of a type's decoded values: it depends on the type alone",
)


def _depth_walk(target: type[Any]) -> tuple[_Walk | None, bool]:
    """``(walk, planned)``: ``planned`` when the decoded value can be checked instead of the
    text; ``walk`` then finds its ``Any`` parts (None: it has none)."""
    found = _DEPTH_WALKS.get(target)
    if found is None:
        info = mi.type_info(target)
        try:
            walk = _walk_of(info, frozenset())
        except _UnplannableError:
            found = (None, False)
        else:  # every list item walks each Any part below it: a few, or the text is cheaper
            found = (walk, _any_parts(info, frozenset()) <= MAX_WALKED_ANY_PARTS)
        _DEPTH_WALKS.put(target, found)
    return found


def _any_parts(info: mi.Type, seen: frozenset[type]) -> int:
    """How many fields (and items) of ``info``, all the way down, are ``Any``."""
    if isinstance(info, mi.AnyType):
        return 1
    if isinstance(info, mi.StructType):
        inner = seen | {info.cls}
        return sum(_any_parts(f.type, inner) for f in info.fields)
    if isinstance(info, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        return _any_parts(info.item_type, seen)
    if isinstance(info, mi.DictType):
        return _any_parts(info.value_type, seen)
    if isinstance(info, (mi.TupleType, mi.UnionType)):
        members = info.item_types if isinstance(info, mi.TupleType) else info.types
        return sum(_any_parts(t, seen) for t in members)
    return 0


def decode_json(
    data: bytes | str | msgspec.Raw, target: type[T], *, depth_checked: bool = False
) -> T:
    """Fast path for trusted JSON of a known type (store reload, wire messages); JSON nested
    deeper than :data:`MAX_DEPTH` is refused (:func:`check_depth`, unless the caller ran it
    on ``data`` already: ``depth_checked``).

    A target whose every part is typed, but for ``Any`` values, is checked on what decoding
    gave instead of on the text: msgspec reads no deeper than the type goes except inside
    those values (and refuses unknown fields without reading them), so only they are walked.
    """
    if isinstance(data, msgspec.Raw):  # a part of a larger document (a list's item)
        data = bytes(data)
    walk: _Walk | None = None
    if not depth_checked and _maybe_deep(data):
        walk, planned = _depth_walk(target)
        if not planned:
            check_depth(data)
            walk = None
    try:
        obj = _decoder(target).decode(data)
    except msgspec.ValidationError as err:
        if not depth_checked:
            check_depth(data)  # before the raw document is read to name the field
        raise _translate(err, _safe_json(data)) from None
    except msgspec.DecodeError as err:
        raise DecodeError(f"invalid JSON: {err}") from None
    except RecursionError:
        raise DecodeError(f"invalid JSON: {too_deep()}") from None
    if walk is not None and walk(obj, 0):
        raise DecodeError(f"invalid JSON: {too_deep()}")
    return obj


def _maybe_deep(data: bytes | str) -> bool:
    """Whether ``data`` has enough brackets to nest deeper than :data:`MAX_DEPTH`."""
    if isinstance(data, str):
        return data.count("[") + data.count("{") > MAX_DEPTH
    return data.count(b"[") + data.count(b"{") > MAX_DEPTH


def _safe_json(data: bytes | str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def load_yaml_documents(text: str, *, source: str = "") -> list[Any]:
    """Parse multi-document YAML (JSON is YAML too) as Kubernetes does (:mod:`apis.goyaml`:
    duplicate keys and nesting deeper than :data:`MAX_DEPTH` refused); empty documents are
    dropped."""
    try:
        docs = list(yaml.load_all(text, Loader=KubeLoader))  # a SafeLoader subclass
    except DuplicateKeys as err:
        raise DecodeError(str(err.problem), source=source) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise DecodeError(f"invalid YAML{where}: {problem}", source=source) from None
    out = []
    for index, doc in enumerate(d for d in docs if d is not None):
        try:
            out.append(jsonable(doc))
        except DecodeError as err:
            raise err.located(source=source, index=index) from None
    return out


def _expand(docs: Iterable[Any]) -> Iterator[Any]:
    """Flatten ``kind: List`` (and ``*List``) documents into their items."""
    for doc in docs:
        if (
            isinstance(doc, dict)
            and isinstance(doc.get("kind"), str)
            and doc["kind"].endswith("List")
            and isinstance(doc.get("items"), list)
        ):
            yield from doc["items"]
        else:
            yield doc


def decode_documents(
    text: str, *, source: str = "", registry: Registry | None = None
) -> list[Object]:
    """Every object in a YAML/JSON stream; the first bad document raises with its location."""
    objects: list[Object] = []
    for index, raw in enumerate(_expand(load_yaml_documents(text, source=source))):
        try:
            objects.append(decode_object(raw, registry=registry))
        except DecodeError as err:
            raise err.located(source=source, index=index) from None
    return objects


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with multi-line strings as literals."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str_representer)


def dump_yaml(obj: Any) -> str:
    """YAML as kubectl prints it (field order kept); a sequence becomes several documents."""
    if isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        return "---\n".join(dump_yaml(item) for item in obj)
    return yaml.dump(to_builtins(obj), Dumper=_Dumper, sort_keys=False, allow_unicode=True)
