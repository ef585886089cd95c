"""The store's SQLite file: one row per object, and the resourceVersion counter.

Schema (``PRAGMA user_version`` = 1)::

    objects(kind TEXT, namespace TEXT, name TEXT, data BLOB)  primary key (kind, namespace, name)
    counters(name TEXT PRIMARY KEY, value INTEGER)             "resource_version"

``data`` is the object's JSON; ``kind`` the kind's key (``group/Kind``, ``Kind`` for the core
group). Every :meth:`Database.write` is one transaction (upserts, deletes and the counter)
and returns after its ``COMMIT``.

Durability: the file is in WAL mode. With ``synchronous=NORMAL`` (the default) a committed
transaction is in the WAL file when ``COMMIT`` returns, so it survives the process being killed
(SIGKILL, a crash); only a power loss or kernel crash can lose the last few transactions.
``synchronous=FULL`` also syncs the WAL to disk on every commit, surviving power loss at the
cost of one fsync per commit.

Checkpoints (copying the WAL back into the database file, with its fsyncs) run on a background
thread with a connection of its own, so commits stay short and the event loop never waits for
them. Under writes that never pause a background checkpoint cannot finish while the writer
appends, and SQLite only restarts the WAL from its beginning after a finished one; so once the
WAL holds more than :data:`WAL_LIMIT_FRAMES` pages, the writer checkpoints the (few) frames
left itself, and the WAL starts over. A lock file (``<file>.lock``, ``flock``) keeps a second store
from opening the same file and silently diverging.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from apis import codec
from apis.duration import Duration
from apis.resources import ResourceList
from controller.errors import StoreError

__all__ = ["SCHEMA_VERSION", "Database", "Synchronous", "encode"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
Synchronous = Literal["NORMAL", "FULL"]
#: Bytes written between two background checkpoints (about a thousand pages).
CHECKPOINT_EVERY_BYTES = 4 * 1024 * 1024
#: A WAL holding more pages than this is checkpointed by the writer itself (64 MiB of 4 KiB).
WAL_LIMIT_FRAMES = 16_384

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS objects ("
    " kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (kind, namespace, name))",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO counters (name, value) VALUES ('resource_version', 0)",
)
_UPSERT = (
    "INSERT INTO objects (kind, namespace, name, data) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (kind, namespace, name) DO UPDATE SET data = excluded.data"
)
_DELETE = "DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?"
_SET_VERSION = "UPDATE counters SET value = ? WHERE name = 'resource_version'"

Row = tuple[str, str, str, bytes]
Key = tuple[str, str, str]


def _enc_hook(value: Any) -> Any:
    if type(value) is ResourceList:
        return value.stored_form()  # the text it came with, or its wire form (kept by it)
    if type(value) is Duration:
        return str(value)
    return codec.to_builtins(value)


_ENCODER = msgspec.json.Encoder(enc_hook=_enc_hook)


def encode(obj: Any) -> bytes:
    """An object's stored JSON: the bytes :func:`apis.codec.encode_json` gives, except that a
    resource list decoded from plain and milli numbers keeps their text (see
    :mod:`apis.resources`; it reads back to the same amounts)."""
    return _ENCODER.encode(obj)


class _Checkpointer:
    """A thread that checkpoints the WAL when asked, on its own connection."""

    def __init__(self, path: Path) -> None:
        self._con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._wake = threading.Event()
        self._stopping = False
        #: pages in the WAL at the end of the last checkpoint
        self.wal_frames = 0
        self._thread = threading.Thread(
            target=self._run, name=f"checkpoint {path.name}", daemon=True
        )
        self._thread.start()

    def request(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    _, frames, _ = self._con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.wal_frames = int(frames)
                except sqlite3.Error as err:
                    log.warning("background checkpoint failed: %s", err)
        finally:
            self._con.close()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()


#: Mode of every state file (the database, its WAL and SHM, the lock).
STATE_FILE_MODE = 0o600


def _private_files(path: Path) -> None:
    """Create ``path`` 0600 if absent; narrow it and its WAL/SHM/lock to 0600 if wider."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, STATE_FILE_MODE)
    try:
        os.fchmod(fd, STATE_FILE_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", ".lock"):
        companion = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            if companion.stat().st_mode & 0o777 != STATE_FILE_MODE:
                os.chmod(companion, STATE_FILE_MODE)


class Database:
    """One open state file. Not thread-safe: the store calls it from one thread."""

    def __init__(self, path: Path, *, synchronous: Synchronous = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = path
        self._lock = self._take_lock(path)
        try:
            _private_files(path)
        except OSError as err:
            os.close(self._lock)
            raise StoreError(f"cannot open state file {path}: {err}") from err
        try:
            self._con = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=10.0
            )
        except sqlite3.Error as err:
            os.close(self._lock)
            raise StoreError(f"cannot open state file {path}: {err}") from err
        try:
            self._configure(synchronous)
            self._checkpointer = _Checkpointer(path)
        except sqlite3.Error as err:
            self._con.close()
            os.close(self._lock)
            raise StoreError(f"cannot open state file {path}: {err}") from err
        self._unchecked = 0

    @staticmethod
    def _take_lock(path: Path) -> int:
        lock_path = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, STATE_FILE_MODE)
        except OSError as err:
            raise StoreError(f"cannot open state file {path}: {err}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            raise StoreError(
                f"state file {path} is in use by another process (lock {lock_path} is held)"
            ) from err
        return fd

    def _configure(self, synchronous: Synchronous) -> None:
        con = self._con
        mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch to WAL mode (got {mode})")
        con.execute(f"PRAGMA synchronous = {synchronous}")
        con.execute("PRAGMA wal_autocheckpoint = 0")
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise sqlite3.DatabaseError(
                f"schema version {version} is not supported (expected {SCHEMA_VERSION})"
            )
        con.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                con.execute(statement)
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise

    def resource_version(self) -> int:
        row = self._con.execute(
            "SELECT value FROM counters WHERE name = 'resource_version'"
        ).fetchone()
        return int(row[0]) if row else 0

    def rows(self) -> Iterator[Row]:
        """Every stored object as (kind key, namespace, name, JSON)."""
        try:
            yield from self._con.execute("SELECT kind, namespace, name, data FROM objects")
        except sqlite3.Error as err:
            raise StoreError(f"cannot read state file {self.path}: {err}") from err

    def write(self, upserts: Sequence[Row], deletes: Sequence[Key], resource_version: int) -> None:
        """One committed transaction; on failure nothing of it is kept."""
        con = self._con
        try:
            con.execute("BEGIN")
            try:
                if upserts:
                    con.executemany(_UPSERT, upserts)
                if deletes:
                    con.executemany(_DELETE, deletes)
                con.execute(_SET_VERSION, (resource_version,))
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:
                    con.execute("ROLLBACK")
                raise
        except sqlite3.Error as err:
            raise StoreError(f"cannot write state file {self.path}: {err}") from err
        self._unchecked += sum(len(row[3]) for row in upserts) + 64 * len(deletes)
        if self._unchecked >= CHECKPOINT_EVERY_BYTES:
            self._unchecked = 0
            self._checkpointer.request()
            self._limit_wal()

    def _limit_wal(self) -> None:
        """Finish a checkpoint here when the background ones never catch up with the writes."""
        if self._checkpointer.wal_frames <= WAL_LIMIT_FRAMES:
            return
        try:
            busy, frames, done = self._con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as err:
            log.warning("checkpoint of %s failed: %s", self.path, err)
            return
        if not busy and frames == done:
            self._checkpointer.wal_frames = 0

    def close(self) -> None:
        self._checkpointer.stop()
        try:
            with contextlib.suppress(sqlite3.Error):
                self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._con.close()
        finally:
            os.close(self._lock)
