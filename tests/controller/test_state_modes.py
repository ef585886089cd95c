"""Who can read the controller's state: the state files and directory, and the API socket.

Issue 18: the SQLite file (and its WAL, SHM and identity marker) are 0600 and the state
directory 0700 whatever the umask; the unix API socket is 0600 from the moment it is bound,
not after a chmod.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from apis.codec import decode_object
from apis.kinds import default_registry
from apis.meta import Object
from controller.api.client import AsyncClient
from controller.api.server import ApiServer
from controller.app import STORE_FILE, open_store
from controller.config import ControllerConfig
from controller.store.sqlite import Store

NODES = default_registry().resolve("nodes")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The common login umask, under which files come out 0644 unless asked otherwise."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def node(name: str) -> Object:
    return decode_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def fill(store: Store, *names: str) -> None:
    for name in names:
        store.create(node(name))


@pytest.fixture
def state_dir(tmp_path: Path, umask_022: None) -> Path:
    return tmp_path / "state"


def modes(folder: Path) -> dict[str, int]:
    """Each file's name in ``folder`` and its permission bits."""
    return {path.name: mode(path) for path in folder.iterdir()}


def widen(folder: Path) -> None:
    """What an older run under umask 022 left: a 0755 directory of 0644 files."""
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)


async def test_every_state_file_is_0600_under_umask_022(state_dir: Path) -> None:
    store = open_store(ControllerConfig(), state_dir)
    try:
        fill(store, "n1", "n2")
        files = [STORE_FILE, f"{STORE_FILE}-shm", f"{STORE_FILE}-wal", f"{STORE_FILE}.id"]
        assert modes(state_dir) == dict.fromkeys(files, 0o600)
        assert mode(state_dir) == 0o700
    finally:
        await store.aclose()
        store.close()


async def test_files_left_readable_by_an_older_run_are_narrowed_and_kept(
    state_dir: Path,
) -> None:
    store = open_store(ControllerConfig(), state_dir)
    fill(store, "kept")
    await store.aclose()
    store.close()
    widen(state_dir)
    reopened = open_store(ControllerConfig(), state_dir)
    try:
        items, _ = reopened.list(NODES)
        assert [o.metadata.name for o in items] == ["kept"]
        assert mode(state_dir) == 0o700
        assert set(modes(state_dir).values()) == {0o600}
        assert len(modes(state_dir)) == 4
    finally:
        await reopened.aclose()
        reopened.close()


async def test_socket_is_0600_from_bind_not_from_a_later_chmod(
    tmp_path: Path, umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chmod after bind leaves a window; with chmod disabled the socket must still be 0600."""
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    path = tmp_path / "run" / "api.sock"
    async with Store() as store, ApiServer(store, f"unix://{path}", grace=0.1) as server:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        assert mode(path) == 0o600
        assert mode(path.parent) == 0o700
        async with AsyncClient(server.address, timeout=10) as api:
            items, _ = await api.list(NODES)
            assert items == []
    assert os.umask(0o022) == 0o022, "the start-up umask is restored"
