"""Group commit: the writes of many callers in one transaction of the store.

The API server, fleet ingest and node liveness hand their writes in as ops, callables run
against the store (:meth:`GroupCommit.submit`). Everything queued by the time the committer
task runs is one :meth:`~controller.store.memory.MemoryStore.transact`: each op rolled back
alone when it raises, the whole committed (one SQLite transaction) before any caller hears its
result. This is what the embedded store offers its own API; it is not part of the
:class:`~controller.store.cluster.Cluster` seam the control loops use (a Kubernetes API has
no transactions across requests).

The committer task runs while ops are queued and ends when the queue is empty, so a
:class:`GroupCommit` holds nothing between bursts of writes; :meth:`GroupCommit.aclose`
commits what is queued and refuses later ops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from controller.errors import StorageFull, StoreError
from controller.store.memory import MemoryStore

__all__ = ["GroupCommit"]

T = TypeVar("T")
S = TypeVar("S", bound=MemoryStore)


@dataclass(slots=True)
class _Pending:
    op: Callable[[Any], Any]
    future: asyncio.Future[Any]


class GroupCommit(Generic[S]):
    """Callers' ops against ``store``, committed together."""

    def __init__(self, store: S) -> None:
        self.store = store
        self._queue: list[_Pending] = []
        self._committer: asyncio.Task[None] | None = None
        self._closing = False

    async def submit(self, op: Callable[[S], T]) -> T:
        """Run ``op(store)`` in the next group commit; its result once that batch is committed.

        ``op`` calls the store's synchronous write (and read) methods; what it raises is
        raised here, and its own changes are rolled back without affecting the rest of the
        batch.
        """
        return await self.submit_nowait(op)

    def submit_many(
        self, ops: Sequence[Callable[[S], Any]]
    ) -> asyncio.Future[list[tuple[bool, Any]]]:
        """Many ops in the next group commit, with one future: ``(True, result)`` or
        ``(False, exception)`` for each, in order; each op's changes are rolled back alone
        when it raises, as with :meth:`submit`."""
        batch = tuple(ops)
        return self.submit_nowait(lambda store: store.transact(batch))

    def submit_nowait(self, op: Callable[[S], T]) -> asyncio.Future[T]:
        """:meth:`submit` without the coroutine: the future of ``op``'s result (for callers
        handing in many writes at once, which gather the futures)."""
        if self._closing or self.store.closed:
            raise StoreError("store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.append(_Pending(op, future))
        if self._committer is None:
            self._committer = loop.create_task(self._commit_all(), name="store-committer")
        return future

    async def _commit_all(self) -> None:
        try:  # first run in the loop's next turn: every caller of this one has queued by then
            while self._queue:
                batch, self._queue = self._queue, []
                self._run(batch)
        finally:
            self._committer = None
            self._fail(StoreError("store committer stopped"))

    def _run(self, batch: list[_Pending]) -> None:
        waiting = [pending for pending in batch if not pending.future.done()]  # skip the gone
        try:
            results = self.store.transact([pending.op for pending in waiting])
        except StoreError as err:
            failed = StorageFull if isinstance(err, StorageFull) else StoreError
            for pending in waiting:
                if not pending.future.done():
                    pending.future.set_exception(failed(err.message))
            return
        except BaseException:
            for pending in waiting:
                if not pending.future.done():
                    pending.future.set_exception(StoreError("store committer stopped"))
            raise
        for pending, (ok, value) in zip(waiting, results, strict=True):
            future = pending.future
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def _fail(self, err: StoreError) -> None:
        queue, self._queue = self._queue, []
        for pending in queue:
            if not pending.future.done():
                pending.future.set_exception(err)

    async def aclose(self) -> None:
        """Commit what is queued, then refuse later ops."""
        self._closing = True
        task = self._committer
        if task is not None:
            await task

    def close(self) -> None:
        """Refuse later ops; queued ones fail (use :meth:`aclose` to commit them)."""
        self._closing = True
        task = self._committer
        if task is not None and not task.done():
            task.cancel()
        self._fail(StoreError("store is closed"))
