"""Persistence: every acknowledged write survives a restart or a SIGKILL."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from apis.kinds import Registry
from apis.meta import Object
from controller.api.groupcommit import GroupCommit
from controller.errors import Expired, NotFound, StoreError
from controller.store.sqlite import Store
from tests.controller.storekinds import (
    GADGETS,
    REGISTRY,
    WIDGETS,
    FakeClock,
    Widget,
    WidgetStatus,
    applying,
    creating,
    gadget,
    widget,
)

replace = msgspec.structs.replace


def fill(store: Store) -> None:
    """A bit of everything: namespaces, both scopes, updates, deletes, finalizers, status."""
    for ns in ("default", "team-a"):
        for i in range(5):
            store.create(widget(f"w{i}", ns, labels={"i": str(i)}, annotations={"n": "x y z"}))
    store.create(gadget("g1", mode="fast"))
    store.apply(widget("w1", size=7, labels={"i": "1"}))
    obj = store.get(WIDGETS, "w2")
    assert isinstance(obj, Widget)
    store.update(replace(obj, status=WidgetStatus(phase="Ready", ready=3)))
    store.delete(WIDGETS, "w3", "team-a")
    store.create(widget("held", finalizers=("example.com/f",)))
    store.delete(WIDGETS, "held")
    store.create(widget(generate_name="gen-"))


def everything(store: Store) -> dict[str, list[Object]]:
    return {kind.key: store.list(kind)[0] for kind in store.registry}


def test_restart_reloads_every_object_and_the_counter(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY, clock=FakeClock()) as store:
        fill(store)
        before = everything(store)
        version = store.resource_version
    with Store(path=path, registry=REGISTRY, clock=FakeClock()) as store:
        assert everything(store) == before
        assert store.resource_version == version
        # deleted objects stay deleted, and the counter continues
        with pytest.raises(NotFound):
            store.get(WIDGETS, "w3", "team-a")
        created = store.create(widget("after"))
        assert created.metadata.resource_version == str(version + 1)
    with Store(path=path, registry=REGISTRY) as store:
        assert store.resource_version == version + 1


def test_the_counter_survives_deleting_everything(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY) as store:
        store.create(widget("a"))
        store.delete(WIDGETS, "a")
    with Store(path=path, registry=REGISTRY) as store:
        assert store.resource_version == 2
        assert store.create(widget("a")).metadata.resource_version == "3"


def test_file_is_wal_and_holds_one_row_per_object(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY) as store:
        fill(store)
        count = sum(len(items) for items in everything(store).values())
    con = sqlite3.connect(path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT count(*) FROM objects").fetchone()[0] == count
    finally:
        con.close()


async def test_submitted_writes_are_persisted(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path=path, registry=REGISTRY)
    commits = GroupCommit(store)
    results = await asyncio.gather(
        *(commits.submit(applying(widget(f"w{i}", size=i))) for i in range(200))
    )
    await commits.aclose()
    store.close()
    with Store(path=path, registry=REGISTRY) as again:
        assert again.resource_version == 200
        for obj in results:
            assert again.get(WIDGETS, obj.metadata.name) == obj


@pytest.mark.parametrize("synchronous", ["NORMAL", "FULL"])
def test_synchronous_modes(tmp_path: Path, synchronous: str) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY, synchronous=synchronous) as store:  # type: ignore[arg-type]
        store.create(widget("a"))
    with Store(path=path, registry=REGISTRY) as store:
        assert store.get(WIDGETS, "a").metadata.resource_version == "1"


def test_unknown_synchronous_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NORMAL or FULL"):
        Store(path=tmp_path / "s.db", registry=REGISTRY, synchronous="OFF")  # type: ignore[arg-type]


def test_a_second_store_cannot_open_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY) as store:
        store.create(widget("a"))
        with pytest.raises(StoreError, match="in use by another process"):
            Store(path=path, registry=REGISTRY)
    with Store(path=path, registry=REGISTRY) as store:  # free again once closed
        assert store.resource_version == 1


def test_unreadable_location_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open state file"):
        Store(path=tmp_path / "missing-dir" / "state.db", registry=REGISTRY)


def test_objects_of_unknown_kinds_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY) as store:
        store.create(gadget("g1"))
        store.create(widget("w1"))
    with Store(path=path, registry=Registry([WIDGETS])) as narrow:
        assert narrow.resource_version == 2
        narrow.create(widget("w2"))
    with Store(path=path, registry=REGISTRY) as store:
        assert [o.metadata.name for o in store.list(GADGETS)[0]] == ["g1"]
        assert len(store.list(WIDGETS)[0]) == 2


async def test_a_failed_commit_fails_its_batch_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(path=tmp_path / "state.db", registry=REGISTRY)
    store.create(widget("before"))
    watch = store.watch(WIDGETS, resource_version=store.resource_version)
    db = store._db
    assert db is not None
    real_write = db.write

    def broken(*args: object, **kwargs: object) -> None:
        raise StoreError("cannot write state file: disk I/O error")

    monkeypatch.setattr(db, "write", broken)
    commits = GroupCommit(store)
    results = await asyncio.gather(
        *(commits.submit(creating(widget(f"w{i}"))) for i in range(3)),
        return_exceptions=True,
    )
    assert all(isinstance(r, StoreError) for r in results)
    with pytest.raises(StoreError, match="disk I/O error"):
        store.create(widget("sync"))
    assert store.resource_version == 1
    assert [o.metadata.name for o in store.list(WIDGETS)[0]] == ["before"]
    assert watch.drain() == []

    monkeypatch.setattr(db, "write", real_write)
    created = await commits.submit(lambda s: s.create(widget("w0")))
    assert created.metadata.resource_version == "2"
    assert [e.resource_version for e in watch.drain()] == [2]
    watch.close()
    await commits.aclose()
    store.close()


def test_watch_from_before_a_restart_is_expired(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store(path=path, registry=REGISTRY) as store:
        store.create(widget("a"))
        store.create(widget("b"))
    with Store(path=path, registry=REGISTRY) as store:
        with pytest.raises(Expired):
            store.watch(WIDGETS, resource_version=1)
        with store.watch(WIDGETS, resource_version=2) as watch:
            store.create(widget("c"))
            assert [e.resource_version for e in watch.drain()] == [3]


def _record(acked: dict[str, str], line: str) -> None:
    name, version = line.split()
    assert name not in acked
    acked[name] = version


def test_acknowledged_writes_survive_sigkill(tmp_path: Path, repo_root: Path) -> None:
    path = tmp_path / "state.db"
    acked: dict[str, str] = {}
    command = [sys.executable, "-m", "tests.controller.crashwriter", str(path), "32", "1000000"]
    with subprocess.Popen(
        command, cwd=repo_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            while len(acked) < 400:
                line = proc.stdout.readline()
                if not line:
                    pytest.fail(f"writer exited early: {proc.wait()}: {proc.stderr.read()}")
                _record(acked, line)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait() == -signal.SIGKILL
            # lines already written before the kill were acknowledged too
            for line in proc.stdout.read().splitlines(keepends=True):
                if line.endswith("\n"):
                    _record(acked, line)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    with Store(path=path, registry=REGISTRY) as store:
        for name, version in acked.items():
            assert store.get(WIDGETS, name).metadata.resource_version == version
        highest = max(int(version) for version in acked.values())
        assert store.resource_version >= highest
        # and the store goes on from there
        assert int(store.create(widget("next")).metadata.resource_version) > highest
