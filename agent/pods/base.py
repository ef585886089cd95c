"""The pod source seam, and decoding pod lists leniently.

A :class:`PodSource` is a component (``name``, ``async run()``) that keeps ``pods`` current
and sets ``synced`` once its first read succeeded; ``generation`` grows by one whenever
``pods`` changes, so a consumer can tell a new list from the one it already processed.
:class:`PodCache` implements that bookkeeping for the sources of this package.

Decoding is per pod: a pod that does not decode is skipped and logged, never the whole list.
A field this version of the object model does not know (a Kubernetes release newer than 1.35
adding one) is dropped with a warning, so a kubelet upgrade never hides pods from the agent.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import msgspec

from agent.errors import TransientError
from apis import codec
from apis.codec import decode_as
from apis.core import Pod
from apis.errors import DecodeError
from runtime import lifecycle

__all__ = [
    "Failures",
    "PodCache",
    "PodListError",
    "PodSource",
    "PollingSource",
    "decode_pod",
    "decode_pods",
    "parse_pod_list",
    "pod_list_items",
]

_log = logging.getLogger(__name__)

#: How many unknown fields one pod may carry before it counts as undecodable.
_MAX_UNKNOWN: Final = 64
_PATH_PART = re.compile(r"\[([^\]]*)\]|\.?([^.\[\]]+)")


class PodListError(ValueError):
    """A body or document that is not a pod list at all."""


@runtime_checkable
class PodSource(Protocol):
    """Keeps the node's pods current (see the module docstring)."""

    @property
    def name(self) -> str: ...

    @property
    def pods(self) -> tuple[Pod, ...]: ...

    @property
    def synced(self) -> asyncio.Event: ...

    @property
    def generation(self) -> int: ...

    async def run(self) -> None: ...


class PodCache:
    """The state every source keeps: the pods, the synced event and the generation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pods: tuple[Pod, ...] = ()
        self.synced = asyncio.Event()
        self.generation = 0

    def _replace(self, pods: tuple[Pod, ...]) -> bool:
        """Install a freshly read list; ``True`` when it differs from the previous one.

        A pod equal to the one held before keeps the old object, so consumers that memoise
        by identity (:class:`agent.states.PodStateCache`) redo only the pods that changed.
        """
        if self.pods:
            held = {p.metadata.uid: p for p in self.pods}
            pods = tuple(
                old if (old := held.get(p.metadata.uid)) is not None and old == p else p
                for p in pods
            )
        changed = pods != self.pods or not self.synced.is_set()
        if changed:
            self.pods = pods
            self.generation += 1
            _log.debug("%s: %d pods (generation %d)", self.name, len(pods), self.generation)
        self.synced.set()
        return changed


class _Once:
    """Remembers what was already logged at warning level (bounded)."""

    def __init__(self, limit: int = 4096) -> None:
        self._seen: set[tuple[str, ...]] = set()
        self._limit = limit

    def first(self, *key: str) -> bool:
        if key in self._seen:
            return False
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen.add(key)
        return True


_LOGGED = _Once()


def _drop(raw: Any, path: str) -> bool:
    """Remove the field at ``path`` (``spec.containers[0].x``) from ``raw``; False if absent."""
    parts: list[str | int] = []
    for bracket, dotted in _PATH_PART.findall(path):
        if dotted:
            parts.append(dotted)
        else:
            parts.append(int(bracket) if bracket.isdigit() else bracket)
    if not parts:
        return False
    node = raw
    for part in parts[:-1]:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and part < len(node)
        if not (in_dict or in_list):
            return False
        node = node[part]
    last = parts[-1]
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    return False


def _describe(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata")
    if isinstance(meta, Mapping):
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    return "?"


def decode_pod(raw: Any, *, source: str = "") -> Pod:
    """One raw pod (builtins) -> :class:`Pod`; fields unknown to the model are dropped.

    Raises :class:`DecodeError` when the pod is invalid for any other reason.
    """
    if not isinstance(raw, dict):
        raise DecodeError(f"expected a Pod object, got {type(raw).__name__}", source=source)
    kind = raw.get("kind")
    if kind not in (None, "", "Pod"):
        raise DecodeError(f"expected kind Pod, got {kind!r}", source=source, field="kind")
    working = raw
    for _ in range(_MAX_UNKNOWN):
        try:
            return decode_as(working, Pod)
        except DecodeError as err:
            if err.message != "unknown field" or not err.field:
                raise err.located(source=source) from None
            if working is raw:
                working = copy.deepcopy(raw)
            if not _drop(working, err.field):
                raise err.located(source=source) from None
            if _LOGGED.first("unknown", source, err.field):
                _log.warning(
                    "%s: pod %s: ignoring field %s unknown to this version",
                    source or "pods",
                    _describe(raw),
                    err.field,
                )
    raise DecodeError(f"more than {_MAX_UNKNOWN} unknown fields", source=source)


def decode_pods(items: Iterable[Any], *, source: str) -> tuple[Pod, ...]:
    """Decode every item; an item that fails is skipped with a log line naming it."""
    pods: list[Pod] = []
    for index, raw in enumerate(items):
        try:
            pods.append(decode_pod(raw, source=source))
        except DecodeError as err:
            who = _describe(raw) if isinstance(raw, Mapping) else f"item {index}"
            message = str(err.located(index=index))
            if _LOGGED.first("bad", source, who, message):
                _log.warning("%s: pod %s skipped: %s", source, who, message)
            else:
                _log.debug("%s: pod %s skipped: %s", source, who, message)
    return tuple(pods)


def pod_list_items(document: Any, *, source: str) -> list[Any]:
    """The items of a ``PodList`` (or ``List``) document, or a single Pod document."""
    if not isinstance(document, dict):
        raise PodListError(f"{source}: expected a PodList object, got {type(document).__name__}")
    kind = document.get("kind")
    if kind in ("PodList", "List"):
        items = document.get("items")
        if items is None:
            return []
        if not isinstance(items, list):
            raise PodListError(f"{source}: items must be a list, got {type(items).__name__}")
        return items
    if kind == "Pod":
        return [document]
    raise PodListError(f"{source}: expected kind PodList, List or Pod, got {kind!r}")


def parse_pod_list(data: bytes | str, *, source: str) -> tuple[Pod, ...]:
    """A JSON ``PodList`` body -> its pods (bad pods skipped); :class:`PodListError` if the
    body is not JSON or not a pod list."""
    try:
        codec.check_depth(data)
        document = msgspec.json.decode(data)
    except (msgspec.DecodeError, DecodeError) as err:
        raise PodListError(f"{source}: invalid JSON: {err}") from None
    return decode_pods(pod_list_items(document, source=source), source=source)


class Failures:
    """Logs a failing read as the house style says: the first failure with its reason, then
    "still failing" at most once per ``every`` seconds, then "recovered"."""

    def __init__(self, name: str, *, every: float = 60.0) -> None:
        self.name = name
        self.count = 0
        self._every = every
        self._last = 0.0

    def failed(self, err: BaseException, now: float) -> None:
        self.count += 1
        if self.count == 1:
            _log.warning("%s: cannot read pods: %s", self.name, err)
            self._last = now
        elif now - self._last >= self._every:
            _log.warning("%s: still failing (%d failures): %s", self.name, self.count, err)
            self._last = now

    def succeeded(self) -> None:
        if self.count:
            _log.info("%s: recovered after %d failures", self.name, self.count)
        self.count = 0


class PollingSource(PodCache):
    """A source that re-reads its pods every ``interval`` seconds (kubelet, pods file).

    Subclasses implement ``refresh()``; a :class:`TransientError` from it is logged once and
    retried at the next tick (see :class:`Failures`), the pods read before stay in force.
    """

    def __init__(self, name: str, *, interval: float) -> None:
        super().__init__(name)
        self.interval = interval
        self._failures = Failures(name)

    async def refresh(self) -> bool:
        raise NotImplementedError

    async def run(self) -> None:
        ticker = lifecycle.Ticker(self.interval)
        loop = asyncio.get_running_loop()
        while True:
            await ticker.wait()
            try:
                await self.refresh()
            except TransientError as err:
                self._failures.failed(err, loop.time())
            else:
                self._failures.succeeded()
