"""YAML read the way Kubernetes reads a manifest (``sigs.k8s.io/yaml``: go-yaml v2, then JSON).

A plain (unquoted) scalar resolves as go-yaml v2 resolves it, not as YAML 1.1 or PyYAML do:

- booleans: ``true/false``, ``yes/no``, ``on/off`` and ``y/n``, each in lower, Title or UPPER
  case; nulls: empty, ``~``, ``null/Null/NULL``;
- integers: what Go's ``strconv.ParseInt(s, 0, 64)`` reads once ``_`` are removed (decimal,
  ``0x`` hex, ``0o`` or leading-``0`` octal, ``0b`` binary, a sign), then unsigned 64-bit;
- floats: ``[-+]?(.d+|d+(.d*)?)([eE][-+]?d+)?`` and ``.inf/.nan``; an overflow stays text;
- everything else is a string: no base-60 numbers (``38:00`` and ``0000:38:00.0`` are PCI bus
  IDs), and timestamps stay text.

Then the JSON step: every mapping key becomes a string (``1`` -> ``"1"``, ``on`` -> ``"true"``),
a float with an integral value becomes an int (JSON cannot tell ``2.0`` from ``2``), and a NaN or
infinity is refused, since JSON cannot carry it.

Refused as kubectl refuses them: a key given twice in one mapping (keys a merge ``<<`` brings
in may be overridden), each named with its line::

    error converting YAML to JSON: yaml: unmarshal errors:
      line 5: key "cpu" already set in map

and, so that no document reaches Python's recursion limit or takes forever, maps and lists
nested deeper than :data:`MAX_DEPTH` (aliases included) and aliases standing for more than
:data:`MAX_ALIASED_NODES` nodes.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Hashable
from decimal import Decimal
from typing import Any, Final

import yaml

from apis.errors import DecodeError

__all__ = [
    "MAX_ALIASED_NODES",
    "MAX_DEPTH",
    "DuplicateKeys",
    "KubeLoader",
    "jsonable",
    "resolve_plain",
]

#: The deepest nesting of maps and lists a document may have. (Kubernetes' decoders stop at
#: 10000 levels; Python's recursion limit would not reach that, and no object needs 100.)
MAX_DEPTH: Final = 100
#: The most nodes the aliases of one document may stand for (go-yaml refuses "excessive
#: aliasing" likewise): a few lines of anchors can otherwise stand for billions of nodes.
MAX_ALIASED_NODES: Final = 1_000_000
_EXCESSIVE_ALIASING: Final = (
    f"document contains excessive aliasing (more than {MAX_ALIASED_NODES} nodes by alias)"
)

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"

_SPELLINGS: tuple[tuple[str, Any, str], ...] = (
    (_BOOL, True, "y Y yes Yes YES true True TRUE on On ON"),
    (_BOOL, False, "n N no No NO false False FALSE off Off OFF"),
    (_NULL, None, "~ null Null NULL"),
    (_FLOAT, math.nan, ".nan .NaN .NAN"),
    (_FLOAT, math.inf, ".inf .Inf .INF +.inf +.Inf +.INF"),
    (_FLOAT, -math.inf, "-.inf -.Inf -.INF"),
    (_MERGE, "<<", "<<"),
)
_WORDS: dict[str, tuple[str, Any]] = {"": (_NULL, None)}
for _tag, _value, _words in _SPELLINGS:
    _WORDS.update(dict.fromkeys(_words.split(), (_tag, _value)))

_GO_INT = re.compile(
    r"(?P<sign>[-+]?)(?:0[xX](?P<hex>[0-9a-fA-F]+)|0[oO](?P<oct>[0-7]+)|0[bB](?P<bin>[01]+)"
    r"|0(?P<zoct>[0-7]+)|(?P<dec>0|[1-9][0-9]*))"
)
_GO_UINT = re.compile(r"0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]+|0|[1-9][0-9]*")
_YAML_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_NUMBER_START = frozenset("0123456789+-")
_INT64 = (-(2**63), 2**63 - 1)
_UINT64_MAX = 2**64 - 1


def _go_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 0, 64)``, else ``ParseUint``: the int, or None."""
    match = _GO_INT.fullmatch(text)
    if match is None:
        return None
    for group, base in (("hex", 16), ("oct", 8), ("bin", 2), ("zoct", 8), ("dec", 10)):
        digits = match[group]
        if digits is not None:
            value = int(digits, base)
            break
    if match["sign"] == "-":
        value = -value
    if _INT64[0] <= value <= _INT64[1]:
        return value
    if value <= _UINT64_MAX and _GO_UINT.fullmatch(text):
        return value
    return None


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # Go's ParseFloat errs on overflow


@functools.lru_cache(maxsize=4096)
def resolve_plain(text: str) -> tuple[str, Any]:
    """The tag and value go-yaml v2 gives the plain scalar ``text``."""
    found = _WORDS.get(text)
    if found is not None:
        return found
    first = text[0]  # "" is null, found above
    if first == ".":
        if _DOT_FLOAT.fullmatch(text) and (number := _finite(text)) is not None:
            return _FLOAT, number
    elif first in _NUMBER_START:
        plain = text.replace("_", "")
        integer = _go_int(plain)
        if integer is not None:
            return _INT, integer
        if _YAML_FLOAT.fullmatch(plain) and (number := _finite(plain)) is not None:
            return _FLOAT, number
    return _STR, text


def too_deep() -> str:
    """What a document nested deeper than :data:`MAX_DEPTH` is told."""
    return f"maps and lists nested more than {MAX_DEPTH} levels deep"


class DuplicateKeys(yaml.constructor.ConstructorError):
    """Keys given twice in a mapping; ``problem`` is kubectl's whole message."""

    def __init__(self, found: list[tuple[int, str]]) -> None:
        lines = "".join(f"\n  line {line}: key {key} already set in map" for line, key in found)
        super().__init__(problem=f"error converting YAML to JSON: yaml: unmarshal errors:{lines}")


class KubeLoader(yaml.SafeLoader):
    """A SafeLoader whose plain scalars resolve as go-yaml v2 resolves them, refusing
    duplicate keys, nesting deeper than :data:`MAX_DEPTH` and excessive aliasing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._duplicates: list[tuple[int, str]] = []
        #: id of a composed collection -> its nodes, aliases counted as what they stand for
        self._sizes: dict[int, int] = {}
        self._aliased = 0  # nodes the aliases of this document stand for

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            node = super().compose_node(parent, index)
            self._aliased += self._sizes.get(id(node), 1)
            if self._aliased > MAX_ALIASED_NODES:
                raise yaml.composer.ComposerError(None, None, _EXCESSIVE_ALIASING, mark)
            return node
        if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, too_deep(), mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        sizes = self._sizes
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = node.value if node is not None else []
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
        return node

    def construct_document(self, node: yaml.Node) -> Any:
        self._sizes.clear()
        self._aliased = 0
        data = super().construct_document(node)
        found, self._duplicates = self._duplicates, []
        if found:
            raise DuplicateKeys(sorted(found))
        return data

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return resolve_plain(value)[0]
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys as JSON strings at once, so that ``on`` and ``1`` stay two keys."""
        own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE)
        self.flatten_mapping(node)
        merged = len(node.value) - own  # the pairs merges bring in come first
        mapping: dict[Any, Any] = {}
        given: set[str] = set()
        for index, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=True)
            try:
                name = _key(key)
            except TypeError as err:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, str(err), key_node.start_mark
                ) from None
            if index >= merged:
                if name in given:
                    shown = json.dumps(key) if isinstance(key, str) else name
                    self._duplicates.append((key_node.start_mark.line + 1, shown))
                given.add(name)
            mapping[name] = self.construct_object(value_node, deep=deep)
        return mapping


def _construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    text = loader.construct_scalar(node)  # type: ignore[arg-type]
    tag, value = resolve_plain(text)
    if tag == node.tag:
        return value
    if node.tag == _FLOAT and tag == _INT:  # ``!!float 1``
        return float(value)
    raise yaml.constructor.ConstructorError(
        None, None, f"cannot decode {text!r} as {node.tag}", node.start_mark
    )


for _tag in (_BOOL, _INT, _FLOAT):
    KubeLoader.add_constructor(_tag, _construct)


def _key(key: Hashable) -> str:
    """A mapping key as sigs.k8s.io/yaml writes it into JSON."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return _go_g(key)
    raise TypeError(f"unsupported map key {key!r}")


def _go_g(value: float) -> str:
    """Go's ``FormatFloat(value, 'g', -1, 32)`` for the short decimals a manifest carries."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # digits before the decimal point
    head = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{head}{mantissa}e{point - 1:+03d}"
    if point <= 0:
        return f"{head}0.{'0' * -point}{text}"
    if point >= len(text):
        return head + text + "0" * (point - len(text))
    return f"{head}{text[:point]}.{text[point:]}"


def _child(path: str, key: str) -> str:
    return f"{path}[{key}]" if ("." in key or "/" in key) else (f"{path}.{key}" if path else key)


def jsonable(value: Any, path: str = "", depth: int = 0) -> Any:
    """``value`` (as :class:`KubeLoader` builds it, keys already strings) as it comes out of
    the JSON step: no NaN/infinity, integral floats as ints. ``value`` itself when unchanged.
    ``depth`` is that of ``value``: aliases may nest a document deeper than it is written,
    and a value reaching :data:`MAX_DEPTH` is refused here."""
    if isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
        raise DecodeError(too_deep(), field=path)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            new = jsonable(item, _child(path, key), depth + 1)
            changed = changed or new is not item
            out[key] = new
        return out if changed else value
    if isinstance(value, list):
        items = [jsonable(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(value)]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if type(value) is float:
        if not math.isfinite(value):
            raise DecodeError("JSON cannot carry this number", field=path, value=repr(value))
        if value.is_integer() and abs(value) < 1e21:
            return int(value)
    return value
