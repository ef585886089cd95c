"""The scheduling framework: status values, cycle state, and one Protocol per extension point.

A scheduling cycle (:mod:`controller.scheduler.cycle`) calls the plugins a
:class:`~controller.scheduler.profile.Profile` enables, in profile order, at each point:

============  =========================================================================
PreFilter     ``pre_filter(state, pod, table) -> Status | NodeSubset``; once per pod. Not
              Success ends the cycle (Unschedulable: every node gets the plugin's message;
              Error: the pod backs off). Skip: the plugin's own Filter is not run for this
              pod. A :class:`NodeSubset` limits the nodes the later points consider.
Filter        ``filter(state, pod, table, candidates) -> FilterResult``; **vectorized**:
              ``candidates`` is a bool mask over the table's rows (the nodes every earlier
              filter accepted); the result holds the mask of those that pass and, for the
              rejected ones, the reasons with the rows they apply to. A plugin that must
              look at nodes one by one iterates over ``np.flatnonzero(candidates)``.
PostFilter    ``post_filter(state, pod, table, diagnosis) -> PostFilterResult``; only when
              no node passed (preemption lives here).
PreScore      ``pre_score(state, pod, table, feasible) -> Status``; Skip: the plugin's
              Score is not run for this pod (it has no opinion, e.g. no preferred terms).
Score         ``score(state, pod, table, feasible) -> NDArray[int64]``, one value per
              feasible row (``feasible`` is an index array, ascending). A plugin that also
              has ``normalize(state, pod, scores) -> NDArray[int64]`` is normalized; the
              final values must lie in ``0..MAX_NODE_SCORE``.
Reserve       ``reserve(state, pod, table, row) -> Status`` after the table assumed the pod;
              ``unreserve(state, pod, table, row)`` undoes it (must be idempotent).
Permit        ``permit(state, pod, table, row) -> Status``; Wait holds the pod assumed on
              its node until the plugin (a :class:`WaitingPermitPlugin`) resolves it (gangs).
PreBind       ``pre_bind(state, pod, table, row) -> PreBindResult``: annotations and labels
              to set on the pod; the loop merges every plugin's and writes them together
              with the binding in one store write (Koordinator's ``DefaultPreBind``).
Bind          ``bind(state, pod, table, row) -> Status``: Skip passes the pod on to the next
              binder; when every binder skips, the loop's default binder writes
              ``spec.nodeName``.
============  =========================================================================

Plugins are pure: they read the :class:`~controller.scheduler.nodetable.NodeTable` (never
write it; the loop owns it and assumes/forgets pods), the
:class:`~controller.scheduler.podinfo.PodInfo`, and their own per-pod scratch space in
:class:`CycleState`. A plugin never raises for "does not fit"; an exception is turned into an
Error status by the cycle. Every plugin has a ``name`` (the registry key).

A plugin that needs more of the cluster than the table holds (Device objects, NodeMetrics,
Reservations, PodGroups, quotas) also implements :class:`ClusterStatePlugin`: the loop calls
``sync(snapshot, table)`` once per pass, before scheduling, with the store snapshot; the
plugin rebuilds whatever per-node state it keeps (aligned to ``table.index``) and returns
True when something changed that may let unschedulable pods fit (they are then retried).
Its Reserve/Unreserve keep that state in step with the pods placed during the pass. One that
refuses an object's annotation while syncing (a bound pod's cpuset naming CPUs its node does
not have) treats it as absent and implements :class:`WarningPlugin`: after the syncs the loop
takes each refusal once and records it as a Warning Event :data:`INVALID_ANNOTATION` on that
object.

Two optional class attributes let the cycle do less per pod without changing an answer:

- ``scores_bounded = True``: the plugin's Score (after its normalize) lies in
  ``0..MAX_NODE_SCORE`` by construction, so the cycle does not check the range of every
  answer (it does for any other plugin, and fails the attempt naming the plugin);
- ``pre_filter_skip_is_final = True``: when the plugin's PreFilter answers Skip for a pod,
  the plugin has nothing to do for that pod at any later point (its Filter accepts every
  node, PreScore skips, Score gives every node 0, Reserve succeeds and holds nothing, Permit
  allows, PreBind adds nothing), so the cycle calls none of them for the pod.

A Score plugin with no opinion on a pod returns :func:`zero_scores` (shared, read-only): the
cycle neither checks nor adds it.

Adding a plugin: a module under ``controller/scheduler/plugins/`` (or its own package) with
a class that has ``name`` and ``__init__(self, args)``, an ``Args`` subclass of
:class:`PluginArgs` holding its defaults (or :class:`NoArgs`), the methods of the points it
serves; an entry in :data:`controller.scheduler.profile.PLUGINS`; and its place in
:data:`controller.scheduler.profile.DEFAULT_CONFIG` as the shipped profile orders it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from apis.caches import Cache
from apis.meta import Model

if TYPE_CHECKING:
    from datetime import datetime

    from apis.core import Pod
    from controller.scheduler.nodetable import NodeTable
    from controller.scheduler.podinfo import PodInfo
    from controller.store.snapshots import Snapshot

__all__ = [
    "MAX_NODE_SCORE",
    "SKIP",
    "SUCCESS",
    "BindPlugin",
    "ClusterStatePlugin",
    "Code",
    "CycleState",
    "Diagnosis",
    "FilterPlugin",
    "FilterResult",
    "NoArgs",
    "NodeSubset",
    "NormalizeScorePlugin",
    "PermitPlugin",
    "Plugin",
    "PluginArgs",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreBindResult",
    "PreFilterPlugin",
    "PreScorePlugin",
    "PreferNodesPlugin",
    "Rejection",
    "ReservePlugin",
    "ScorePlugin",
    "Status",
    "TimedPlugin",
    "WaitingPermitPlugin",
    "default_normalize",
    "is_zero_scores",
    "zero_scores",
]

#: The highest score a plugin may give a node (kube-scheduler's ``MaxNodeScore``).
MAX_NODE_SCORE = 100

Mask = NDArray[np.bool_]
Rows = NDArray[np.intp]
Scores = NDArray[np.int64]

T = TypeVar("T")


class Code(enum.IntEnum):
    """A status code, kube-scheduler's set."""

    SUCCESS = 0
    #: Something went wrong (not the pod's fault): the pod goes to the backoff queue.
    ERROR = 1
    #: Does not fit now; preemption may help.
    UNSCHEDULABLE = 2
    #: Does not fit, and preemption cannot change that on this node.
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    #: Permit only: hold the pod (gangs).
    WAIT = 4
    #: PreFilter/PreScore: this plugin has nothing to do for the pod; Bind: not mine.
    SKIP = 5

    @property
    def rejects(self) -> bool:
        return self in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's verdict: a code, human-readable reasons, and the plugin that gave it."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def message(self) -> str:
        """The reasons joined by ``, `` (kube-scheduler's ``Status.Message``)."""
        return ", ".join(self.reasons)

    @classmethod
    def of(cls, code: Code, *reasons: str, plugin: str = "") -> Status:
        return cls(code, reasons, plugin)


SUCCESS = Status()
SKIP = Status(Code.SKIP)


@dataclass(frozen=True, slots=True)
class Rejection:
    """One reason a filter rejected some nodes: the reason text, its code, and the rows."""

    reason: str
    code: Code
    rows: Rows


@dataclass(frozen=True, slots=True)
class FilterResult:
    """What a vectorized filter returns.

    ``passed`` is a bool mask over every row (False outside the candidates); ``rejections``
    name, for each reason, the candidate rows it rejected. A row may appear under several
    reasons of the same plugin (``Insufficient cpu`` and ``Insufficient memory``), and
    every rejected candidate appears under at least one. With no rejections ``passed`` may
    be the ``candidates`` array itself: filters never write into their inputs (the first
    filter's candidates are the table's read-only ``all_mask``).
    """

    passed: Mask
    rejections: tuple[Rejection, ...] = ()

    @classmethod
    def accept(cls, candidates: Mask) -> FilterResult:
        """Every candidate passes."""
        return cls(candidates)

    @classmethod
    def reject_where(
        cls, candidates: Mask, failed: Mask, reason: str, code: Code = Code.UNSCHEDULABLE
    ) -> FilterResult:
        """Candidates where ``failed`` holds are rejected for one reason."""
        rejected = candidates & failed
        if not np.count_nonzero(rejected):
            return cls(candidates)
        return cls(candidates & ~failed, (Rejection(reason, code, np.flatnonzero(rejected)),))


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a pod fits nowhere: per plugin, per reason, the number of nodes.

    ``counts`` is ``plugin -> reason -> nodes``; ``codes`` the code of each
    ``(plugin, reason)``; ``pre_filter`` the message of a rejecting PreFilter (then every
    node counts under it); ``post_filter`` what PostFilter added (kube-scheduler appends it).
    """

    nodes: int
    counts: Mapping[str, Mapping[str, int]]
    codes: Mapping[tuple[str, str], Code] = field(default_factory=dict)
    pre_filter: str = ""
    post_filter: str = ""
    #: Rows rejected as UnschedulableAndUnresolvable (no eviction helps there).
    unresolvable: Rows = field(default_factory=lambda: np.empty(0, dtype=np.intp))

    def histogram(self) -> dict[str, int]:
        """Reason text -> nodes, merged over plugins (the FitError summary counts these)."""
        merged: dict[str, int] = {}
        for reasons in self.counts.values():
            for reason, count in reasons.items():
                merged[reason] = merged.get(reason, 0) + count
        return merged


@dataclass(frozen=True, slots=True)
class NodeSubset:
    """A PreFilter's answer that narrows the nodes the rest of the cycle looks at.

    The cycle intersects the subsets of every PreFilter; nodes left out are reported as
    ``node(s) didn't satisfy plugin(s) [<names>]`` (UnschedulableAndUnresolvable).
    """

    rows: Mask
    status: Status = SUCCESS


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """A PostFilter's answer; ``nominated`` is the row the pod may use after preemption,
    once ``victims`` (deleted by the loop) are gone."""

    status: Status
    nominated: int | None = None
    message: str = ""
    victims: tuple[Pod, ...] = ()


@dataclass(frozen=True, slots=True)
class PreBindResult:
    status: Status = SUCCESS
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


class CycleState:
    """Per-pod scratch space: plugins write in PreFilter and read at later points.

    Keys are conventionally the plugin's name (plus a suffix when one plugin keeps several
    entries). ``read`` checks the type so a plugin gets what it stored or a clear error.
    """

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, object] = {}

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str, kind: type[T]) -> T:
        value = self._data[key]
        if not isinstance(value, kind):
            raise TypeError(f"cycle state {key!r} holds {type(value).__name__}, not {kind}")
        return value

    def get(self, key: str, kind: type[T]) -> T | None:
        value = self._data.get(key)
        return value if isinstance(value, kind) else None

    def delete(self, key: str) -> None:
        self._data.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


class PluginArgs(Model):
    """Base of every plugin's ``Args``: frozen, camelCase on the wire, unknown fields
    rejected; the field defaults are the plugin's documented defaults."""


class NoArgs(PluginArgs):
    """Args of a plugin that takes none."""


# --- extension points ---------------------------------------------------------------------------


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class ClusterStatePlugin(Plugin, Protocol):
    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool: ...


#: Event reason on an object whose annotation a plugin refused (and treats as absent).
INVALID_ANNOTATION = "InvalidAnnotation"


@runtime_checkable
class WarningPlugin(Plugin, Protocol):
    def take_warnings(self) -> Sequence[tuple[Pod, str]]:
        """The (pod, message) refusals found since the last call, each handed out once."""
        ...


@runtime_checkable
class TimedPlugin(Plugin, Protocol):
    """A plugin that reads the loop's clock: ``set_time(now)`` at the start of each pass,
    before any ``sync``; the pass's attempts all happen at that time."""

    def set_time(self, now: datetime) -> None: ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(
        self, state: CycleState, pod: PodInfo, table: NodeTable
    ) -> Status | NodeSubset: ...


@runtime_checkable
class PreferNodesPlugin(Plugin, Protocol):
    """A PreFilter plugin with nodes to try first: after every PreFilter ran, the cycle runs
    the Filter chain on each of ``preferred_rows`` (inside ``candidates``) in order, and the
    first that passes becomes the only candidate; none passes: the cycle goes on as before."""

    def preferred_rows(
        self, state: CycleState, pod: PodInfo, table: NodeTable, candidates: Mask
    ) -> Sequence[int]: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(
        self, state: CycleState, pod: PodInfo, table: NodeTable, candidates: Mask
    ) -> FilterResult: ...


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(
        self, state: CycleState, pod: PodInfo, table: NodeTable, diagnosis: Diagnosis
    ) -> PostFilterResult: ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(
        self, state: CycleState, pod: PodInfo, table: NodeTable, feasible: Rows
    ) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(
        self, state: CycleState, pod: PodInfo, table: NodeTable, feasible: Rows
    ) -> Scores: ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize(self, state: CycleState, pod: PodInfo, scores: Scores) -> Scores: ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, table: NodeTable, row: int) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, table: NodeTable, row: int) -> None: ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodInfo, table: NodeTable, row: int) -> Status: ...


@runtime_checkable
class WaitingPermitPlugin(Plugin, Protocol):
    """A Permit plugin that answers Wait and later lets its waiting pods go or rejects them.

    The loop calls ``resolve_waiting(now)`` at the start of each pass (``now`` in seconds on
    the loop's clock; the plugin times the waits it grants during the pass by it) and again
    after the pass's attempts: the answer maps the key (``namespace/name``) of each waiting
    pod whose fate is decided to Success (bind it now) or a rejecting status (unreserve it
    and retry later); pods left out keep waiting. ``next_deadline()`` is the earliest time a
    wait runs out (None when nothing waits).
    """

    def resolve_waiting(self, now: float) -> Mapping[str, Status]: ...

    def next_deadline(self) -> float | None: ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    def pre_bind(
        self, state: CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> PreBindResult: ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, state: CycleState, pod: PodInfo, table: NodeTable, row: int) -> Status: ...


_ZEROS: Cache[int, Scores] = Cache(
    "scheduler.zero-scores",
    limit=64,
    contract="shared read-only all-0 score arrays by length (see zero_scores): nobody writes them",
)


def zero_scores(count: int) -> Scores:
    """A shared, read-only array of ``count`` zeros: what a Score plugin with no opinion on
    the pod returns. The cycle recognizes it (:func:`is_zero_scores`) and adds nothing."""
    zeros = _ZEROS.get(count)
    if zeros is None:
        zeros = np.zeros(count, dtype=np.int64)
        zeros.flags.writeable = False
        _ZEROS.put(count, zeros)
    return zeros


def is_zero_scores(scores: Scores) -> bool:
    """``scores`` is the shared array :func:`zero_scores` gives for its length."""
    return _ZEROS.get(len(scores)) is scores


def default_normalize(scores: Scores, *, reverse: bool = False) -> Scores:
    """Scale to ``0..MAX_NODE_SCORE`` by the highest score (kube-scheduler's helper).

    All zero: unchanged, or all ``MAX_NODE_SCORE`` when ``reverse``. Integer division.
    """
    if scores.size == 0:
        return scores
    top = int(scores.max())
    if top == 0:
        return np.full_like(scores, MAX_NODE_SCORE) if reverse else scores
    scaled = scores * MAX_NODE_SCORE // top
    return MAX_NODE_SCORE - scaled if reverse else scaled
