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
left itself with ``wal_checkpoint(TRUNCATE)``, and the WAL starts over from an empty file
(``journal_size_limit`` also cuts it back after every restart), so it stays within about
:data:`WAL_LIMIT_FRAMES` pages whatever the write rate.

Ownership: the store holds an exclusive ``flock`` on the database file itself (on its own
descriptor; SQLite's POSIX record locks are separate), so a second store, in this process or
another, cannot open the same file and silently diverge, and no other file can be deleted to
break that. (Deleting the database itself loses its data anyway; the identity below then keeps
a second store from starting empty in its place.)

Identity: a store initialised in a file records a random id in it (table ``identity``) and in
a marker beside it, ``<file>.id`` (0600, written after the id is committed). A database that is
missing, empty or without an id while its marker exists was initialised before and lost:
opening it is refused (:class:`Lost`) unless ``start_fresh`` is given, which starts an empty
store with a new id. A database carrying an id and no marker (the marker was removed, or the
process died between the two writes) gets its marker back.

Disk full: a write the file system has no room for fails with :class:`StorageFull` ("database
or disk is full"), leaving memory and the file as they were; so does opening a store on a file
system with no byte free.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from controller.errors import StorageFull, StoreError
from controller.store.encoding import encode

__all__ = ["SCHEMA_VERSION", "Database", "Lost", "StorageFull", "Synchronous", "encode"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
Synchronous = Literal["NORMAL", "FULL"]
#: Bytes written between two background checkpoints (about a thousand pages).
CHECKPOINT_EVERY_BYTES = 4 * 1024 * 1024
#: A WAL holding more pages than this is checkpointed by the writer itself (64 MiB of 4 KiB).
WAL_LIMIT_FRAMES = 16_384
#: Bytes of one WAL frame: a page (SQLite's default 4 KiB) and its header.
_FRAME_BYTES = 4096 + 24
#: Bytes a restarted WAL file is cut back to (``PRAGMA journal_size_limit``).
WAL_KEEP_BYTES = 4 * 1024 * 1024


class Lost(StoreError):  # noqa: N818 - a state, as errors.NotFound
    """A state file initialised before is missing, empty or not the one its marker names."""


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS objects ("
    " kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY (kind, namespace, name))",
    "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO counters (name, value) VALUES ('resource_version', 0)",
    "CREATE TABLE IF NOT EXISTS identity (id TEXT NOT NULL)",
)
_UPSERT = (
    "INSERT INTO objects (kind, namespace, name, data) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (kind, namespace, name) DO UPDATE SET data = excluded.data"
)
_DELETE = "DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?"
_SET_VERSION = "UPDATE counters SET value = ? WHERE name = 'resource_version'"

Row = tuple[str, str, str, bytes]
Key = tuple[str, str, str]


class _Checkpointer:
    """A thread that checkpoints the WAL when asked, on its own connection."""

    def __init__(self, path: Path) -> None:
        self._con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        #: held while a checkpoint runs (the writer's own waits for this thread's to end)
        self.lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
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
                    with self.lock:
                        self._con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error as err:
                    log.warning("background checkpoint failed: %s", err)
        finally:
            self._con.close()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()


#: Mode of every state file (the database, its WAL and SHM, the identity marker).
STATE_FILE_MODE = 0o600


def _full(err: BaseException) -> bool:
    """Whether ``err`` says the file system is out of room."""
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or (
        "database or disk is full" in str(err)
    )


def _failure(what: str, path: Path, err: BaseException) -> StoreError:
    cls = StorageFull if _full(err) else StoreError
    return cls(f"cannot {what} state file {path}: {err}")


def _check_room(path: Path) -> None:
    """Refuse to start on a file system with no byte free (every start writes)."""
    try:
        free = os.statvfs(path.parent)
    except OSError:
        return  # the open that follows names the problem
    if free.f_bavail * free.f_frsize == 0:
        raise StorageFull(
            f"cannot open state file {path}: no space left on device"
            f" ({path.parent} has 0 bytes free)"
        )


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` by a 0600 file holding ``text``, durably (written, synced, renamed)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, STATE_FILE_MODE)
    try:
        os.fchmod(fd, STATE_FILE_MODE)
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _open_locked(path: Path) -> int:
    """Create ``path`` 0600 if absent, narrow it to 0600 if wider, and hold an exclusive
    ``flock`` on it; the descriptor (closing it releases the lock)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, STATE_FILE_MODE)
    except OSError as err:
        raise _failure("open", path, err) from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        raise StoreError(
            f"state file {path} is in use by another process (it holds the file's lock)"
        ) from err
    try:
        os.fchmod(fd, STATE_FILE_MODE)
        _private_files(path)
    except OSError as err:
        os.close(fd)
        raise _failure("open", path, err) from err
    return fd


def _private_files(path: Path) -> None:
    """Narrow the WAL, SHM and identity marker of ``path`` to 0600 if wider."""
    for suffix in ("-wal", "-shm", ".id"):
        companion = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            if companion.stat().st_mode & 0o777 != STATE_FILE_MODE:
                os.chmod(companion, STATE_FILE_MODE)


class Database:
    """One open state file. Not thread-safe: the store calls it from one thread."""

    def __init__(
        self, path: Path, *, synchronous: Synchronous = "NORMAL", start_fresh: bool = False
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.path = path
        self.marker = path.with_name(path.name + ".id")
        self._wal = path.with_name(path.name + "-wal")
        _check_room(path)
        marked = self._marked_id()
        if marked and (not path.exists() or path.stat().st_size == 0):
            if not start_fresh:
                raise self._lost(marked, "missing" if not path.exists() else "empty")
            for suffix in ("-wal", "-shm"):  # the lost store's: never replayed into the new one
                with contextlib.suppress(FileNotFoundError):
                    path.with_name(path.name + suffix).unlink()
        self._lock = _open_locked(path)
        try:
            self._con = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=10.0
            )
        except sqlite3.Error as err:
            os.close(self._lock)
            raise _failure("open", path, err) from err
        try:
            self._configure(synchronous)
            self.store_id = self._identify(marked, start_fresh)
            self._checkpointer = _Checkpointer(path)
        except (sqlite3.Error, OSError, StoreError) as err:
            self._con.close()
            os.close(self._lock)
            if isinstance(err, StoreError):
                raise
            raise _failure("open", path, err) from err
        self._unchecked = 0

    def _marked_id(self) -> str:
        try:
            return self.marker.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return ""
        except (OSError, UnicodeDecodeError) as err:
            raise StoreError(f"cannot read the state file's marker {self.marker}: {err}") from err

    def _lost(self, marked: str, how: str) -> Lost:
        return Lost(
            f"state file {self.path} is {how}, but {self.marker} says store {marked} was"
            " initialised here: refusing to start empty (restore the file, or start fresh to"
            " begin an empty store)"
        )

    def _identify(self, marked: str, start_fresh: bool) -> str:
        """The store's id: the one the file records (checked against the marker), else a new
        one when the file is new (or ``start_fresh``); the marker written to match."""
        con = self._con
        row = con.execute("SELECT id FROM identity").fetchone()
        recorded = str(row[0]) if row else ""
        if recorded and marked and recorded != marked and not start_fresh:
            raise Lost(
                f"state file {self.path} belongs to store {recorded}, but {self.marker} says"
                f" store {marked} was initialised here: refusing to start on another store's"
                " file (restore the file, or start fresh)"
            )
        if not recorded:
            if marked and not start_fresh:
                raise self._lost(marked, "without its store's identity (reinitialised)")
            if start_fresh and marked:
                log.warning("starting fresh: %s replaces store %s", self.path, marked)
            recorded = str(uuid.uuid4())
            con.execute("BEGIN IMMEDIATE")
            try:
                con.execute("DELETE FROM identity")
                con.execute("INSERT INTO identity (id) VALUES (?)", (recorded,))
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        if recorded != marked:
            _write_private(self.marker, recorded + "\n")
        return recorded

    def _configure(self, synchronous: Synchronous) -> None:
        con = self._con
        mode = con.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch to WAL mode (got {mode})")
        con.execute(f"PRAGMA synchronous = {synchronous}")
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute(f"PRAGMA journal_size_limit = {WAL_KEEP_BYTES}")
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
            raise _failure("write", self.path, err) from err
        self._unchecked += sum(len(row[3]) for row in upserts) + 64 * len(deletes)
        if self._unchecked >= CHECKPOINT_EVERY_BYTES:
            self._unchecked = 0
            if self._wal_bytes() > WAL_LIMIT_FRAMES * _FRAME_BYTES:
                self._limit_wal()
            else:
                self._checkpointer.request()

    def _wal_bytes(self) -> int:
        """The WAL file's size: after each restart it is cut back to :data:`WAL_KEEP_BYTES`,
        so past that it is the pages written since the last restart."""
        try:
            return self._wal.stat().st_size
        except OSError:
            return 0

    def _limit_wal(self) -> None:
        """Finish a checkpoint here, as the background ones never catch up with writes that
        never pause: once the background one running (if any) is done, copy the rest and
        restart the WAL from an empty file."""
        try:
            with self._checkpointer.lock:
                busy, frames, done = self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as err:
            log.warning("checkpoint of %s failed: %s", self.path, err)
            return
        if busy or frames != done:
            log.warning(
                "checkpoint of %s could not finish (%d of %d pages)", self.path, done, frames
            )

    def close(self) -> None:
        self._checkpointer.stop()
        try:
            with contextlib.suppress(sqlite3.Error):
                self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._con.close()
        finally:
            os.close(self._lock)
