"""A delayed-visibility backend: the control loops' own writes reach their snapshots late.

What :mod:`controller.store.cluster` promises the loops is no more than an informer gives:
a write a loop made is acknowledged at once, but the loop's next snapshots may still show the
object as it was. :class:`DelayedStore` makes that happen every time: each write made while a
control loop runs (:func:`mark_loops`) stays out of the loops' snapshots for the next
``reads`` snapshots they take, which show the object as it was before (absent, for one it
created). Everything else sees the committed state at once: the test's own writes and reads
(``get``, ``list``, a snapshot taken outside a loop), and a write of the test supersedes
what a loop wrote before it.

The results of a loop's writes arrive late too, as from a remote API server: the
:class:`~controller.store.writes.Pending` a loop's ``write`` returns is resolved only by the
``results_after``-th loop pass that starts after it (the writes themselves are committed
at once), so every loop's handling of results that arrive in a later pass runs here.

The scheduler, queueing, reservation and descheduler suites run over it (their ``store``
fixture is parametrized ``memory`` / ``delayed``), and so do the invariant properties of
:mod:`tests.controller.test_delayed_visibility`: a loop that double-binds, over-commits,
double-charges or migrates a pod twice because it cannot see its own write fails them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from apis.meta import Object
from controller.errors import NotFound
from controller.loops import LOOPS, LoopContext
from controller.store.snapshots import Snapshot
from controller.store.sqlite import Store
from controller.store.writes import Pending, Result, Write

__all__ = ["BACKENDS", "DelayedStore", "as_loop", "delayed_store", "mark_loops", "open_store"]

#: Whether a control loop's reconcile is running (set by :func:`loops_marked`).
_IN_LOOP: contextvars.ContextVar[bool] = contextvars.ContextVar("in_loop", default=False)

#: The backends the loop suites run over.
BACKENDS = ("memory", "delayed")

Key = tuple[str, str, str]


class DelayedStore(Store):
    """The memory store, with the loops' own writes shown to them ``reads`` snapshots late."""

    def __init__(self, *, reads: int = 2, results_after: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._reads = reads
        self._results_after = results_after
        #: the loops' batches whose results are still held: (pending, results, passes left)
        self._held: list[tuple[Pending, list[Result], int]] = []
        #: results handed over late so far, for the test that checks this backend bites
        self.late = 0
        self._handed = 0
        #: store key -> (the object as the loops still see it, snapshots left to hide it in)
        self._hidden: dict[Key, tuple[Object | None, int]] = {}
        #: writes hidden from the loops so far, for the test that checks this backend bites
        self.delayed = 0

    def _persist(self, txn: Any) -> None:
        super()._persist(txn)
        hidden = self._hidden
        if not _IN_LOOP.get():
            for key in txn.staged:
                hidden.pop(key, None)  # the test's own write: everyone sees it at once
            return
        for key in txn.staged:
            if key in hidden:
                before = hidden[key][0]  # still the state from before the first hidden write
            else:
                try:  # what is committed so far: the commit is not visible yet
                    before = self.get(self.registry.for_key(key[0]), key[2], key[1])
                except NotFound:
                    before = None
            hidden[key] = (before, self._reads)
            self.delayed += 1

    @property
    def revision(self) -> str:
        # results handed over count as a change, as the seam promises
        return f"{super().revision}.{self._handed}"

    async def changed_after(self, revision: str) -> str:
        while self.revision == revision:
            self._check_open()
            event = self._changed
            if event is None:
                event = self._changed = asyncio.Event()
            await event.wait()
        return self.revision

    def write(self, writes: Sequence[Write]) -> Pending:
        done = super().write(writes)
        if not _IN_LOOP.get() or self._results_after <= 0:
            return done
        pending = Pending()
        self._held.append((pending, done.results(), self._results_after))
        self.late += 1
        return pending

    @property
    def holding(self) -> bool:
        """Whether results of the loops' writes are held still."""
        return bool(self._held)

    def loop_pass(self) -> None:
        """A loop's pass begins: hand over the results that are due by now."""
        if self._held:
            self._hand_over()

    def _hand_over(self) -> None:
        held, self._held = self._held, []
        due: list[tuple[Pending, list[Result]]] = []
        for pending, results, left in held:
            if left <= 1:
                due.append((pending, results))
            else:
                self._held.append((pending, results, left - 1))
        for pending, results in due:
            pending.resolve(results)
        if due:
            self._handed += 1
            event = self._changed
            if event is not None:
                self._changed = None
                event.set()

    def snapshot(self) -> Snapshot:
        real = super().snapshot()
        if not _IN_LOOP.get() or not self._hidden:
            return real
        by_kind: dict[str, dict[tuple[str, str], Object | None]] = {}
        for key, (before, left) in list(self._hidden.items()):
            if left == 0:
                del self._hidden[key]  # visible from now on
                continue
            self._hidden[key] = (before, left - 1)
            by_kind.setdefault(key[0], {})[(key[1], key[2])] = before
        for kind_key, shown in by_kind.items():
            real = real.replaced(self.registry.for_key(kind_key), shown)
        return real


def _marked(reconcile: Callable[[Any, LoopContext], float | None]) -> Callable[..., Any]:
    @functools.wraps(reconcile)
    def run(self: Any, ctx: LoopContext) -> float | None:
        if isinstance(ctx.store, DelayedStore) and not _IN_LOOP.get():
            ctx.store.loop_pass()
        token = _IN_LOOP.set(True)
        try:
            return reconcile(self, ctx)
        finally:
            _IN_LOOP.reset(token)

    return run


@contextlib.contextmanager
def as_loop() -> Iterator[None]:
    """What runs inside counts as a control loop's (its writes hidden and answered late)."""
    token = _IN_LOOP.set(True)
    try:
        yield
    finally:
        _IN_LOOP.reset(token)


def mark_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the test ends, every control loop of :data:`controller.loops.LOOPS` runs marked
    as one, so that a :class:`DelayedStore` tells its writes from the test's."""
    for factory in LOOPS.values():
        if isinstance(factory, type) and "reconcile" in vars(factory):
            monkeypatch.setattr(factory, "reconcile", _marked(vars(factory)["reconcile"]))


def open_store(backend: str, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Store:
    """A store of ``backend`` (one of :data:`BACKENDS`); for ``delayed``, the loops are marked."""
    if backend == "memory":
        return Store(**kwargs)
    if backend != "delayed":
        raise ValueError(f"unknown backend {backend!r}")
    mark_loops(monkeypatch)
    return DelayedStore(**kwargs)


@contextlib.contextmanager
def delayed_store(**kwargs: Any) -> Iterator[DelayedStore]:
    """A :class:`DelayedStore` with the loops marked, for tests without fixtures (hypothesis)."""
    with pytest.MonkeyPatch.context() as patch:
        mark_loops(patch)
        with DelayedStore(**kwargs) as store:
            yield store
