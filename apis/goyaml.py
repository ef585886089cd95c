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
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Hashable
from decimal import Decimal
from typing import Any

import yaml

from apis.errors import DecodeError

__all__ = ["KubeLoader", "jsonable", "resolve_plain"]

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


class KubeLoader(yaml.SafeLoader):
    """A SafeLoader whose plain scalars resolve as go-yaml v2 resolves them."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is yaml.ScalarNode and implicit[0]:
            return resolve_plain(value)[0]
        tag: str = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
        return tag

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys as JSON strings at once, so that ``on`` and ``1`` stay two keys."""
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                name = _key(key)
            except TypeError as err:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, str(err), key_node.start_mark
                ) from None
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


def jsonable(value: Any, path: str = "") -> Any:
    """``value`` (as :class:`KubeLoader` builds it, keys already strings) as it comes out of
    the JSON step: no NaN/infinity, integral floats as ints. ``value`` itself when unchanged."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            new = jsonable(item, _child(path, key))
            changed = changed or new is not item
            out[key] = new
        return out if changed else value
    if isinstance(value, list):
        items = [jsonable(item, f"{path}[{index}]") for index, item in enumerate(value)]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if type(value) is float:
        if not math.isfinite(value):
            raise DecodeError("JSON cannot carry this number", field=path, value=repr(value))
        if value.is_integer() and abs(value) < 1e21:
            return int(value)
    return value
