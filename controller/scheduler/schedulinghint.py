"""Scheduling hints: the pod annotation that names the nodes a pod must or should land on.

A hint is the JSON object ``{"nodeNames": [...], "preferredNodeNames": [...], "extensions":
{...}}`` in ``internal.scheduling.koordinator.sh/scheduling-hint``; the deprecated key
``scheduling.koordinator.sh/scheduling-hint`` is read only when the new one is absent or empty.

- ``nodeNames`` is hard: PreFilter restricts the cycle to exactly those nodes (empty list: no
  restriction). See :func:`hinted_nodes`.
- ``preferredNodeNames`` is soft: after every PreFilter ran, the preferred nodes (at most
  ``maxHintNodes``, inside the node set PreFilter left) are tried in order with the full Filter
  chain; the first that passes becomes the only candidate, and when none passes the cycle goes
  on over every allowed node. Nothing is held for the pod on a preferred node. See
  :func:`pick_preferred_node`.
- ``extensions`` carries per-plugin keys; DeviceShare and NodeNUMAResource only look at whether
  their key is present (:meth:`SchedulingHint.has_extension`). The ``Reservation`` extension is
  an in-process structure, so one written in the annotation is never recognised.

A value that is not valid JSON (or not of that shape, or past the bounds of
:mod:`apis.bounded`: 256 KiB, nesting 32 deep) is a :class:`HintError` carrying the error text:
the plugin fails the attempt with status Error and the pod is retried with backoff.
A malformed new key does not fall back to the deprecated one.

Everything here is pure; the scheduler's plugin adapter supplies the node sets and the filter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any, Final

import msgspec

from apis.bounded import MAX_DEPTH, BoundedError, decode
from apis.constants import ANNOTATION_SCHEDULING_HINT, ANNOTATION_SCHEDULING_HINT_DEPRECATED
from controller.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_HINT_NODES",
    "PLUGIN_NAME",
    "HintError",
    "SchedulingHint",
    "SchedulingHintArgs",
    "candidate_preferred_nodes",
    "hinted_nodes",
    "parse_args",
    "parse_scheduling_hint",
    "pick_preferred_node",
]

#: The plugin's name in profiles and statuses.
PLUGIN_NAME: Final = "SchedulingHint"
#: ``SchedulingHintArgs.maxHintNodes`` when not configured.
DEFAULT_MAX_HINT_NODES: Final = 100

#: The extension key that is never taken from the annotation (its value is a Go struct upstream).
_IN_PROCESS_EXTENSIONS: Final = frozenset({"Reservation"})


class SchedulingHintArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """``SchedulingHintArgs`` of the scheduler configuration."""

    #: How many ``preferredNodeNames`` are tried, from the front; must be > 0. Default 100.
    max_hint_nodes: int = DEFAULT_MAX_HINT_NODES

    def __post_init__(self) -> None:
        if isinstance(self.max_hint_nodes, bool) or self.max_hint_nodes <= 0:
            raise ConfigError(f"maxHintNodes: must be greater than 0, got {self.max_hint_nodes!r}")


def parse_args(raw: Mapping[str, Any] | None) -> SchedulingHintArgs:
    """Decode the plugin's ``args`` (camelCase keys); unknown keys and bad values are errors."""
    try:
        return msgspec.convert(dict(raw or {}), SchedulingHintArgs)
    except msgspec.ValidationError as err:
        raise ConfigError(f"SchedulingHintArgs: {err}") from None


class SchedulingHint(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded hint. Lists keep the annotation's order."""

    node_names: tuple[str, ...] = ()
    preferred_node_names: tuple[str, ...] = ()
    #: Per-plugin extension values as written (JSON values).
    extensions: Mapping[str, Any] = msgspec.field(default_factory=dict)
    #: The annotation key the hint was read from.
    source: str = ANNOTATION_SCHEDULING_HINT

    def has_extension(self, plugin: str) -> bool:
        """Whether ``plugin`` (``DeviceShare``, ``NodeNUMAResource``) is named in ``extensions``.

        ``Reservation`` is always ``False``: upstream expects an in-process structure there, so
        a JSON object from the annotation does not match and is ignored.
        """
        return plugin not in _IN_PROCESS_EXTENSIONS and plugin in self.extensions


class HintError(msgspec.Struct, frozen=True, kw_only=True):
    """An annotation whose value cannot be decoded; the attempt fails with status Error."""

    #: The annotation key that held the bad value.
    key: str
    #: The JSON decoder's error text, the status message as is.
    message: str


class _WireHint(msgspec.Struct, frozen=True, rename="camel"):
    # ``null`` members read as absent, and unknown members are ignored, as Go's decoder does.
    node_names: list[str] | None = None
    preferred_node_names: list[str] | None = None
    extensions: dict[str, Any] | None = None


_DECODER: Final = msgspec.json.Decoder(_WireHint | None)


def parse_scheduling_hint(annotations: Mapping[str, str]) -> SchedulingHint | HintError | None:
    """The pod's hint, a :class:`HintError`, or ``None`` when neither key holds a value.

    The deprecated key is consulted only when the new key is absent or empty; an empty value
    under either key counts as no value.
    """
    key = ANNOTATION_SCHEDULING_HINT
    text = annotations.get(key, "")
    if not text:
        key = ANNOTATION_SCHEDULING_HINT_DEPRECATED
        text = annotations.get(key, "")
        if not text:
            return None
    try:
        wire = decode(text, _DECODER, "", depth=MAX_DEPTH)
    except BoundedError as err:
        return HintError(key=key, message=err.detail)
    if wire is None:
        return SchedulingHint(source=key)
    return SchedulingHint(
        node_names=tuple(wire.node_names or ()),
        preferred_node_names=tuple(wire.preferred_node_names or ()),
        extensions=dict(wire.extensions or {}),
        source=key,
    )


def hinted_nodes(hint: SchedulingHint | None) -> frozenset[str] | None:
    """The node set the hint's ``nodeNames`` restrict PreFilter to; ``None``: no restriction."""
    if hint is None or not hint.node_names:
        return None
    return frozenset(hint.node_names)


def candidate_preferred_nodes(
    preferred: Iterable[str],
    *,
    allowed: Set[str] | None,
    max_hint_nodes: int = DEFAULT_MAX_HINT_NODES,
) -> tuple[str, ...]:
    """The preferred nodes worth trying, in the hint's order.

    The list is cut to its first ``max_hint_nodes`` entries *before* anything is dropped, then
    narrowed to ``allowed`` (the merged PreFilter result; ``None``: every node). A node named
    twice is tried once. An empty result means the hint is skipped.
    """
    if max_hint_nodes <= 0:
        raise ValueError(f"max_hint_nodes must be greater than 0, got {max_hint_nodes!r}")
    seen: set[str] = set()
    picked: list[str] = []
    for index, node in enumerate(preferred):
        if index >= max_hint_nodes:
            break
        if node in seen or (allowed is not None and node not in allowed):
            continue
        seen.add(node)
        picked.append(node)
    return tuple(picked)


def pick_preferred_node(
    preferred: Iterable[str],
    fits: Callable[[str], bool],
    *,
    allowed: Set[str] | None = None,
    max_hint_nodes: int = DEFAULT_MAX_HINT_NODES,
) -> str | None:
    """The first preferred node on which ``fits`` (the full Filter chain) passes, or ``None``.

    ``None`` means "keep the original PreFilter result": normal scheduling over every allowed
    node. ``fits`` is called in the hint's order and not past the first node that passes; an
    exception from it propagates (the cycle fails with status Error).
    """
    for node in candidate_preferred_nodes(
        preferred, allowed=allowed, max_hint_nodes=max_hint_nodes
    ):
        if fits(node):
            return node
    return None
