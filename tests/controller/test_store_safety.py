"""Issue 18, store safety: ownership that deleting a file cannot break, a lost database not
silently replaced by an empty one, a full disk answered clearly, and a WAL that stays bounded.

The disk-full tests use a real small file system (tmpfs, mounted for the test and unmounted
after it), the ownership test two real processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc import aio

from apis.codec import decode_object, encode_json
from apis.meta import Object
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.client import Applied, AsyncClient
from controller.api.groupcommit import GroupCommit
from controller.api.server import ApiServer
from controller.app import STORE_FILE, open_store
from controller.config import ControllerConfig
from controller.errors import ConfigError, StoreError
from controller.store import persistence
from controller.store.sqlite import Store
from tests.controller.storekinds import REGISTRY, applying, widget
from tests.koordpy.daemons import cli, koordpy_command, running_up

# --- a real small file system ----------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs at ``tmp_path/fs``, unmounted after the test."""
    mount = tmp_path / "fs"
    mount.mkdir()
    options = "size=2m,mode=0700"
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill(folder: Path, name: str = "filler") -> Path:
    """Write ``folder/name`` until the file system has no byte left."""
    path = folder / name
    # ENOSPC once full (after a short write)
    with path.open("wb", buffering=0) as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * 65536)
    assert os.statvfs(folder).f_bavail == 0
    return path


def configmap(name: str, size: int) -> Object:
    return decode_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": {"blob": "x" * size},
        }
    )


def node(name: str) -> Object:
    return decode_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


# --- ownership -------------------------------------------------------------------------------


def holder(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.controller.storeholder", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_deleting_files_beside_the_database_does_not_let_a_second_process_in(
    tmp_path: Path,
) -> None:
    """The attack: with the lock in a file of its own, deleting that file let a second
    controller open the same database and diverge. The lock is on the database itself."""
    path = tmp_path / STORE_FILE
    first = holder(path)
    assert first.stdout is not None
    assert first.stdin is not None
    try:
        assert first.stdout.readline().split() == ["open", "1"]
        for companion in tmp_path.iterdir():  # the lock file, the marker: whatever is beside
            if companion != path and not companion.name.startswith(f"{STORE_FILE}-"):
                companion.unlink()
        second = subprocess.run(
            [sys.executable, "-m", "tests.controller.storeholder", str(path)],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 3, second.stdout
        assert "is in use by another process" in second.stdout
        with pytest.raises(StoreError, match="is in use by another process"):
            Store(path=path, registry=REGISTRY)  # nor in this process
    finally:
        first.stdin.close()
        assert first.wait(timeout=30) == 0
        first.stdout.close()
    with Store(path=path, registry=REGISTRY) as store:  # free once the holder is gone
        assert store.resource_version == 1


# --- a lost database -------------------------------------------------------------------------


@pytest.fixture
def initialised(tmp_path: Path) -> Path:
    """A state directory whose store holds one widget."""
    state = tmp_path / "state"
    with open_store(ControllerConfig(), state) as store:
        store.create(node("n1"))
    return state


def reopen(state: Path, *, start_fresh: bool | None = None) -> Store:
    return open_store(ControllerConfig(), state, start_fresh=start_fresh)


def test_the_marker_is_private_and_names_the_store(initialised: Path) -> None:
    marker = initialised / f"{STORE_FILE}.id"
    assert marker.stat().st_mode & 0o777 == 0o600
    with reopen(initialised) as store:
        assert store.resource_version == 1
    with contextlib.closing(sqlite3.connect(initialised / STORE_FILE)) as db:
        (recorded,) = db.execute("SELECT id FROM identity").fetchone()
    assert marker.read_text() == f"{uuid.UUID(recorded)}\n"


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_lost_database_refuses_to_start_empty(initialised: Path, damage: str) -> None:
    """The attack: a truncated (or deleted) store.db started empty at resourceVersion 0."""
    db = initialised / STORE_FILE
    if damage == "truncated":  # the WAL and SHM left beside it
        db.write_bytes(b"")
    else:
        for suffix in ("", "-wal", "-shm"):
            (initialised / f"{STORE_FILE}{suffix}").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="refusing to start empty") as raised:
        reopen(initialised)
    message = str(raised.value)
    assert str(db) in message
    assert "start_fresh" in message
    assert (initialised / f"{STORE_FILE}.id").exists(), "the marker is kept"
    assert db.exists() == (damage == "truncated"), "nothing created in its place"
    with reopen(initialised, start_fresh=True) as store:
        assert store.resource_version == 0
    with reopen(initialised) as store:  # now a store of its own, with its own marker
        assert store.resource_version == 0


def test_another_stores_database_is_refused(tmp_path: Path, initialised: Path) -> None:
    with open_store(ControllerConfig(), tmp_path / "other"):
        pass
    (initialised / STORE_FILE).write_bytes((tmp_path / "other" / STORE_FILE).read_bytes())
    with pytest.raises(ConfigError, match="refusing to start on another store's file"):
        reopen(initialised)


def test_a_deleted_marker_is_written_again(initialised: Path) -> None:
    marker = initialised / f"{STORE_FILE}.id"
    was = marker.read_text()
    marker.unlink()
    with reopen(initialised) as store:
        assert store.resource_version == 1
    assert marker.read_text() == was


def test_controller_run_on_a_truncated_database_exits_2_saying_so(initialised: Path) -> None:
    (initialised / STORE_FILE).write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        (initialised / f"{STORE_FILE}{suffix}").unlink(missing_ok=True)
    got = run_controller(initialised)
    assert got.returncode == 2, got.stderr
    assert "refusing to start empty" in got.stderr
    assert "start_fresh" in got.stderr


def test_up_start_fresh_starts_empty_where_the_database_was_lost(initialised: Path) -> None:
    (initialised / STORE_FILE).write_bytes(b"")
    with running_up(initialised, "--start-fresh") as daemon:
        manifest = "".join(
            f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}}}\n" for i in range(3)
        )
        assert cli(daemon.api, "apply", "-f", "-", stdin=manifest).returncode == 0
        got = cli(daemon.api, "get", "configmaps", "--chunk-size", "1", "-o", "name")
        assert got.stdout.split() == [f"configmap/cm-{i}" for i in range(3)], got.stderr
    # The new store is the one the marker names now: a plain start accepts it.
    with reopen(initialised) as store:
        assert store.resource_version >= 3


def run_controller(state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``koordpy controller run`` on ``state``, expected to stop by itself."""
    return subprocess.run(
        koordpy_command(
            "controller",
            "run",
            "--state-dir",
            str(state),
            "--api",
            f"unix://{state.parent / 'api.sock'}",
            "--metrics-address",
            "off",
            *extra,
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NOTIFY_SOCKET": ""},
    )


# --- disk full -------------------------------------------------------------------------------


@pytest.fixture
async def full_server(small_fs: Path, tmp_path: Path) -> AsyncIterator[tuple[Store, ApiServer]]:
    async with (
        Store(path=small_fs / STORE_FILE) as store,
        ApiServer(store, f"unix://{tmp_path}/api.sock", grace=0.1) as server,
    ):
        yield store, server


async def test_a_full_disk_answers_resource_exhausted_naming_the_cause(
    small_fs: Path, full_server: tuple[Store, ApiServer], caplog: pytest.LogCaptureFixture
) -> None:
    _, server = full_server
    reserve = small_fs / "reserve"
    reserve.write_bytes(b"\0" * 256 * 1024)  # freed later, to show the store recovers
    acknowledged: list[str] = []
    async with aio.insecure_channel(server.address.target) as channel:
        stub = pb_grpc.ObjectsStub(channel)
        refused: grpc.aio.AioRpcError | None = None
        for i in range(100):
            request = pb.ApplyRequest(objects=[encode_json(configmap(f"cm-{i}", 64 * 1024))])
            try:
                await stub.Apply(request, timeout=30)
            except grpc.aio.AioRpcError as err:
                refused = err
                break
            acknowledged.append(f"cm-{i}")
        assert refused is not None, "the file system never filled"
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "database or disk is full" in (refused.details() or "")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as again:
                    await stub.Apply(request, timeout=30)
                assert again.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        refusals = [r for r in caplog.records if "database or disk is full" in r.getMessage()]
        assert len(refusals) == 3, "one line per refused request"
        assert all(r.exc_info is None and r.levelno == logging.WARNING for r in refusals)
        assert not [r for r in caplog.records if r.exc_info], "no traceback"
    async with AsyncClient(server.address, timeout=30) as api:
        kind = api.registry.resolve("configmaps")
        items, _ = await api.list(kind)
        assert [o.metadata.name for o in items] == sorted(acknowledged)
        reserve.unlink()
        (written,) = await api.apply([configmap("after", 10)])
        assert isinstance(written, Applied), written


def test_starting_with_no_byte_free_exits_2_saying_so(small_fs: Path) -> None:
    state = small_fs / "state"
    with open_store(ControllerConfig(), state) as store:
        store.create(node("n1"))
    fill(small_fs)
    got = run_controller(state)
    assert got.returncode == 2, got.stderr
    assert "no space left on device" in got.stderr
    assert "0 bytes free" in got.stderr


# --- the WAL ---------------------------------------------------------------------------------


async def test_the_wal_stays_bounded_under_writes_that_never_pause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: the WAL reached 143 MB beside a 3.5 MB database. Scaled down (a limit of
    64 pages, checked every 64 KiB written), the WAL file must stay within a few limits."""
    monkeypatch.setattr(persistence, "WAL_LIMIT_FRAMES", 64)
    monkeypatch.setattr(persistence, "CHECKPOINT_EVERY_BYTES", 64 * 1024)
    monkeypatch.setattr(persistence, "WAL_KEEP_BYTES", 256 * 1024)
    path = tmp_path / STORE_FILE
    wal = tmp_path / f"{STORE_FILE}-wal"
    largest = 0
    async with Store(path=path, registry=REGISTRY) as store:
        commits = GroupCommit(store)
        for batch in range(150):
            await asyncio.gather(
                *(
                    commits.submit(applying(widget(f"w{i}", color=f"{batch}" * 2000)))
                    for i in range(16)
                )
            )
            largest = max(largest, wal.stat().st_size)
        database = path.stat().st_size
    assert database < 1024 * 1024
    assert largest <= 4 * 64 * 4096 + 256 * 1024, (largest, database)
