"""Node liveness: a node that went offline or fell silent takes no new pods.

A node is *lost* when its agent's ``status`` says ``offline`` (its will, or a clean shutdown),
or when nothing was heard from it for ``node_lost_after`` seconds (default 180: three missed
60 s heartbeats). A lost node gets

* condition ``Ready=False``, reason ``NodeStatusUnknown``, message ``agent went offline`` or
  ``no report for 180 s``; the heartbeat time of the agent's last report is kept;
* the taint ``node.kubernetes.io/unreachable:NoSchedule``, which the scheduler filters on.

A fresh report brings it back: the ingest applies the next Node that is neither an older body
delivered again nor the stored heartbeat repeated (:mod:`controller.fleet.ingest`, "Which report is
stale": by arrival order, never by comparing the agent's clock), with the agent's
``Ready=True``, and removes that taint (only that one; taints others set are kept). A replayed
or repeated Node does not, except after the agent's own ``online`` following an ``offline`` (a
dropped connection: the broker published the will, the agent came back with what it had
already sent).

:class:`Liveness` watches for silence with one timer over an in-memory table of when each node
was last heard from (the ingest calls :meth:`Liveness.heard`); no task per node. Only nodes
agents report are tracked: those the ingest wrote (they carry
:data:`AGENT_LABELS_ANNOTATION`), never Nodes created through the API alone.
After a controller restart the clock of every such node starts at the restart, not at its
last stored heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

import msgspec

from apis.core import Node, Taint
from apis.kinds import Kind
from apis.meta import Condition
from controller.api.groupcommit import GroupCommit
from controller.errors import NotFound, StoreError
from controller.store.sqlite import Store
from runtime import lifecycle

__all__ = [
    "AGENT_LABELS_ANNOTATION",
    "NOT_READY_REASON",
    "OFFLINE_MESSAGE",
    "UNREACHABLE_TAINT",
    "Liveness",
    "clear_unreachable",
    "is_marked",
    "lost_because",
    "mark_unreachable",
    "silence_message",
]

_log = logging.getLogger(__name__)

#: Reason of the ``Ready=False`` condition of a lost node (as Kubernetes marks a silent one).
NOT_READY_REASON: Final = "NodeStatusUnknown"
#: Message of that condition when the agent's status said offline.
OFFLINE_MESSAGE: Final = "agent went offline"
#: Key of the taint a lost node gets (effect ``NoSchedule``).
UNREACHABLE_TAINT: Final = "node.kubernetes.io/unreachable"
_EFFECT: Final = "NoSchedule"
#: Node annotation the ingest sets on every Node an agent reports: the label keys the agent
#: set last (comma-separated, sorted).
AGENT_LABELS_ANNOTATION: Final = "koordpy.io/agent-labels"
#: Longest time between two checks for silent nodes, seconds.
MAX_CHECK_INTERVAL: Final = 10.0


def _utcnow() -> datetime:
    return datetime.now(UTC)


def silence_message(seconds: float) -> str:
    """Message of the condition of a node silent for ``seconds``."""
    return f"no report for {seconds:.0f} s"


def _is_unreachable(taint: Taint) -> bool:
    return taint.key == UNREACHABLE_TAINT and taint.effect == _EFFECT


def is_marked(node: Node) -> bool:
    """True when ``node`` carries the lost mark (the taint, or the ``Ready=False`` condition)."""
    if any(_is_unreachable(t) for t in node.spec.taints):
        return True
    ready = node.condition("Ready")
    return ready is not None and ready.status == "False" and ready.reason == NOT_READY_REASON


def lost_because(node: Node) -> str:
    """The message of the lost mark of ``node`` (empty when it is not marked)."""
    ready = node.condition("Ready")
    if ready is None or ready.status != "False" or ready.reason != NOT_READY_REASON:
        return ""
    return ready.message


def mark_unreachable(node: Node, now: datetime, message: str) -> Node:
    """``node`` lost: ``Ready=False`` saying ``message``, and the unreachable taint.

    The very object is returned when it already carries both with that message.
    """
    ready = node.condition("Ready")
    tainted = any(_is_unreachable(t) for t in node.spec.taints)
    if (
        tainted
        and ready is not None
        and (ready.status, ready.reason, ready.message) == ("False", NOT_READY_REASON, message)
    ):
        return node
    condition = Condition(
        type="Ready",
        status="False",
        reason=NOT_READY_REASON,
        message=message,
        last_heartbeat_time=ready.last_heartbeat_time if ready is not None else None,
        last_transition_time=(
            ready.last_transition_time
            if ready is not None and ready.status == "False" and ready.last_transition_time
            else now
        ),
    )
    others = tuple(c for c in node.status.conditions if c.type != "Ready")
    spec = node.spec
    if not tainted:
        taint = Taint(key=UNREACHABLE_TAINT, effect=_EFFECT, time_added=now)
        spec = msgspec.structs.replace(spec, taints=(*spec.taints, taint))
    return msgspec.structs.replace(
        node,
        spec=spec,
        status=msgspec.structs.replace(node.status, conditions=(condition, *others)),
    )


def clear_unreachable(node: Node) -> Node:
    """``node`` without the unreachable taint (other taints kept); the same object if absent."""
    taints = tuple(t for t in node.spec.taints if not _is_unreachable(t))
    if len(taints) == len(node.spec.taints):
        return node
    return msgspec.structs.replace(node, spec=msgspec.structs.replace(node.spec, taints=taints))


class Liveness:
    """A supervised controller component marking nodes lost after ``lost_after`` s of silence.

    ``clock`` is a monotonic clock in seconds and ``now`` the wall clock stamped on the
    condition and taint; both are injectable so tests need not wait.
    """

    name = "liveness"

    def __init__(
        self,
        store: Store,
        *,
        lost_after: float = 180.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = _utcnow,
        check_interval: float | None = None,
        commits: GroupCommit[Store] | None = None,
    ) -> None:
        if lost_after <= 0:
            raise ValueError(f"lost_after must be positive, got {lost_after}")
        self.lost_after = lost_after
        self.check_interval = check_interval or min(MAX_CHECK_INTERVAL, lost_after / 6)
        self._store = store
        self._commits = commits if commits is not None else GroupCommit(store)
        self._kind: Kind = store.registry.for_type(Node)
        self._clock = clock
        self._now = now
        #: node -> clock reading when it was last heard from
        self._heard: dict[str, float] = {}
        #: nodes marked lost (so they are not written again at every check)
        self._lost: set[str] = set()
        self._seeded = False

    def heard(self, node: str) -> None:
        """A fresh report from ``node`` arrived now."""
        self._heard[node] = self._clock()
        self._lost.discard(node)

    def went_offline(self, node: str) -> None:
        """``node`` was marked lost because its status said offline."""
        self._heard.setdefault(node, self._clock())
        self._lost.add(node)

    def tracked(self) -> dict[str, float]:
        """Seconds since each tracked node was last heard from."""
        now = self._clock()
        return {node: now - at for node, at in self._heard.items()}

    def seed(self) -> None:
        """Track every Node an agent reported, from now (a restart starts their clocks)."""
        start = self._clock()
        for obj in self._store.list(self._kind)[0]:
            if not isinstance(obj, Node) or AGENT_LABELS_ANNOTATION not in obj.metadata.annotations:
                continue
            name = obj.metadata.name
            self._heard.setdefault(name, start)
            if is_marked(obj):
                self._lost.add(name)
        self._seeded = True

    def due(self) -> list[str]:
        """Nodes silent for longer than ``lost_after`` and not yet marked, by name."""
        limit = self._clock() - self.lost_after
        lost = self._lost
        return sorted(n for n, at in self._heard.items() if at <= limit and n not in lost)

    async def check(self) -> list[str]:
        """Mark every node silent for too long; the names marked now."""
        if not self._seeded:
            self.seed()
        names = self.due()
        if not names:
            return []
        now = self._now()
        message = silence_message(self.lost_after)
        kind = self._kind

        def mark(name: str) -> Callable[[Store], bool | None]:
            def write(store: Store) -> bool | None:
                try:
                    stored = store.get(kind, name)
                except NotFound:
                    return None
                if not isinstance(stored, Node):
                    return None
                marked = mark_unreachable(stored, now, message)
                if marked is stored:
                    return False
                store.update(marked)
                return True

            return write

        outcomes = await asyncio.gather(
            *(self._commits.submit(mark(name)) for name in names), return_exceptions=True
        )
        marked: list[str] = []
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, StoreError):
                    raise outcome
                _log.warning("cannot mark node %s lost: %s", name, outcome, extra={"node": name})
                continue
            if outcome is None:  # the Node is gone: stop tracking it
                self._heard.pop(name, None)
                continue
            self._lost.add(name)
            if outcome:
                marked.append(name)
                _log.warning("node %s lost: %s", name, message, extra={"node": name})
        return marked

    async def run(self) -> None:
        self.seed()
        ticker = lifecycle.Ticker(self.check_interval)
        while True:
            await ticker.wait()
            await self.check()
