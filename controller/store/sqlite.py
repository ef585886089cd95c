"""The SQLite backend of the :class:`~controller.store.cluster.Cluster` seam (``koordpy up``,
``koordpy controller run``): the in-memory store (:mod:`controller.store.memory`) whose every
commit is written to a state file (:mod:`controller.store.persistence`) before it is visible,
and which loads that file when opened. See :mod:`controller.store.persistence` for what
"committed" guarantees. With ``path=None`` it keeps nothing beyond the process (tests).

Agents' reports. With ``report_write_interval`` > 0, a committed change to an object of a kind
in ``without_report`` (:data:`controller.fleet.reports.WITHOUT_REPORT`: Node, Device, NodeMetric)
that only brings its agent's newer report (the Node's heartbeat, the Device's reported-at, the
NodeMetric's status) is visible, published and kept in memory at once, but written to the file
at most that many seconds later, with the object as it is then (as Kubernetes keeps a node's
heartbeat apart from its status, and metrics out of its database). Any other change to the
object writes it at once, and closing the store writes every one left. A process killed before
then comes back with those objects as of their last write: an older report, which the agent's
next one (or the broker's retained copy) replaces; node liveness restarts its clock with the
controller anyway (:mod:`controller.fleet.liveness`). The resourceVersion counter is written by
every
commit, so versions never go back.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from apis.codec import decode_json
from apis.errors import DecodeError
from apis.kinds import Registry
from apis.meta import Object
from controller.errors import StoreError
from controller.store.encoding import encode
from controller.store.memory import (
    EventType,
    MemoryStore,
    Outcome,
    Page,
    Snapshot,
    Watch,
    WatchEvent,
    _Transaction,
    _utcnow,
)
from controller.store.persistence import Database, Synchronous

__all__ = ["EventType", "Outcome", "Page", "Snapshot", "Store", "Watch", "WatchEvent"]

log = logging.getLogger(__name__)

Key = tuple[str, str, str]


class Store(MemoryStore):
    """The objects of the controller, kept in a SQLite state file at ``path``."""

    def __init__(
        self,
        *,
        path: Path | None = None,
        registry: Registry | None = None,
        clock: Callable[[], datetime] = _utcnow,
        synchronous: Synchronous = "NORMAL",
        history_size: int = 10_000,
        watch_queue_size: int = 1_024,
        seed: int | None = None,
        without_report: Mapping[type[Object], Callable[[Any], Object]] | None = None,
        report_write_interval: float = 0.0,
        start_fresh: bool = False,
    ) -> None:
        if not report_write_interval >= 0:
            raise ValueError(
                f"report_write_interval must be >= 0 seconds, got {report_write_interval!r}"
            )
        super().__init__(
            registry=registry,
            clock=clock,
            history_size=history_size,
            watch_queue_size=watch_queue_size,
            seed=seed,
        )
        # Reports written behind (see "Agents' reports" above).
        self._without_report = dict(without_report or {}) if report_write_interval > 0 else {}
        self._report_write_interval = report_write_interval
        #: key -> what the file holds of it, without the report (kinds in ``_without_report``)
        self._written: dict[Key, Object] = {}
        #: key -> when its newer state in memory is due in the file (monotonic; in that order)
        self._behind: dict[Key, float] = {}
        self._behind_timer: asyncio.TimerHandle | None = None
        self._db: Database | None = None
        if path is not None:
            self._db = Database(path, synchronous=synchronous, start_fresh=start_fresh)
            try:
                self._load(self._db)
            except BaseException:
                self._db.close()
                raise

    def _load(self, db: Database) -> None:
        unknown: Counter[str] = Counter()
        count = 0
        for key, namespace, name, data in db.rows():
            bucket = self._objects.get(key)
            if bucket is None:
                unknown[key] += 1
                continue
            kind = self._registry.for_key(key)
            try:
                obj = decode_json(data, kind.type)
            except DecodeError as err:
                raise StoreError(
                    f"state file {db.path}: stored {kind.qualified_plural}"
                    f" {namespace}/{name} does not decode: {err}",
                    kind=kind,
                    namespace=namespace,
                    name=name,
                ) from err
            bucket[(namespace, name)] = obj
            count += 1
        for key, n in sorted(unknown.items()):
            log.warning(
                "state file %s holds %d objects of unknown kind %s; kept, not served",
                db.path,
                n,
                key,
            )
        self._version = db.resource_version()
        log.info("loaded %d objects at resourceVersion %d from %s", count, self._version, db.path)

    @property
    def path(self) -> Path | None:
        return self._db.path if self._db is not None else None

    def _persist(self, txn: _Transaction) -> None:
        staged = txn.staged
        if self._db is not None:
            upserts: builtins.list[tuple[str, str, str, bytes]] = []
            deletes: builtins.list[Key] = []
            without_report = self._without_report
            #: keys written (or deleted) now -> what the file holds, without the report (None: gone)
            done: dict[Key, Object | None] = {}
            deferred: builtins.list[Key] = []
            for key, obj in staged.items():
                if obj is None:
                    deletes.append(key)
                    if without_report:
                        done[key] = None
                    continue
                if without_report:
                    strip = without_report.get(type(obj))
                    if strip is not None:
                        bare = strip(obj)
                        if self._written.get(key) == bare:
                            deferred.append(key)  # only its agent's report changed
                            continue
                        done[key] = bare
                data = self._bytes_of(obj)  # encoded when staged
                upserts.append((key[0], key[1], key[2], data))
            now = time.monotonic()
            if self._behind:
                self._behind_rows(now, staged, done, upserts)
            self._db.write(upserts, deletes, txn.resource_version)
            if done or deferred:
                self._wrote_behind(done, deferred, now)

    def _release(self) -> None:
        if self._behind_timer is not None:
            self._behind_timer.cancel()
            self._behind_timer = None
        if self._db is not None:
            try:
                self._write_behind(every=True)
            finally:
                self._db.close()

    # -- reports written behind --------------------------------------------------------------

    def _behind_rows(
        self,
        until: float | None,
        staged: dict[Key, Object | None],
        done: dict[Key, Object | None],
        upserts: builtins.list[tuple[str, str, str, bytes]],
    ) -> None:
        """Add the rows of the objects written behind that are due by ``until`` (all when
        None), recording in ``done`` what the file will hold of them."""
        objects = self._objects
        for key, when in self._behind.items():
            if until is not None and when > until:
                break
            if key in done:
                continue
            obj = staged[key] if key in staged else objects[key[0]].get((key[1], key[2]))
            if obj is None:
                done[key] = None
                continue
            done[key] = self._without_report[type(obj)](obj)
            data = encode(obj)
            upserts.append((key[0], key[1], key[2], data))
            self._remember(obj, data)

    def _wrote_behind(
        self, done: dict[Key, Object | None], deferred: builtins.list[Key], now: float
    ) -> None:
        """After a write to the file: what it now holds, and which changes wait for a later
        one (due ``report_write_interval`` seconds after the first of them)."""
        written, behind = self._written, self._behind
        for key, bare in done.items():
            behind.pop(key, None)
            if bare is None:
                written.pop(key, None)
            else:
                written[key] = bare
        due = now + self._report_write_interval
        for key in deferred:
            if key not in done:
                behind.setdefault(key, due)
        self._arm_behind()

    def _arm_behind(self, delay: float | None = None) -> None:
        """Time the write of the next changes due (a store used without an event loop
        writes them with its next commit, or when closed)."""
        if self._behind_timer is not None or not self._behind:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if delay is None:
            delay = max(0.0, next(iter(self._behind.values())) - time.monotonic())
        self._behind_timer = loop.call_later(delay, self._write_behind)

    def _write_behind(self, *, every: bool = False) -> None:
        """Write the changes due now (``every``: all of them)."""
        self._behind_timer = None
        db = self._db
        if db is None or not self._behind:
            return
        now = time.monotonic()
        done: dict[Key, Object | None] = {}
        upserts: builtins.list[tuple[str, str, str, bytes]] = []
        self._behind_rows(None if every else now, {}, done, upserts)
        try:
            db.write(upserts, [], self._version)
        except StoreError as err:
            log.warning("reports not written to the state file yet: %s", err)
            self._arm_behind(self._report_write_interval)
            return
        self._wrote_behind(done, [], now)
