"""The seam's write API (controller/store/writes.py) over every store backend, and a loop's
Outbox: each write of a batch stands alone, with its result in its place; results that
arrive late are handled in order, and what was sent stays laid over the loop's snapshots."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from apis.core import Container, Node, Pod, PodSpec
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from controller.errors import AlreadyExists, Conflict, Invalid, NotFound, StoreError
from controller.store.assumed import Outbox
from controller.store.memory import MemoryStore
from controller.store.writes import Outcome, Pending, Result, Write
from tests.controller.backends import STORE_BACKENDS, open_backend
from tests.controller.storekinds import REGISTRY, WIDGETS, FakeClock, Widget, widget

replace = msgspec.structs.replace
PODS = default_registry().for_type(Pod)


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    clock = FakeClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    with open_backend(request.param, tmp_path, registry=REGISTRY, clock=clock) as opened:
        yield opened


@pytest.fixture(params=STORE_BACKENDS)
def pods(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    with open_backend(request.param, tmp_path) as opened:
        opened.create(Node(metadata=ObjectMeta(name="n1")))
        yield opened


def _results(store: MemoryStore, *writes: Write) -> list[Result]:
    pending = store.write(writes)
    assert pending.done()  # a local backend answers before it returns
    return pending.results()


def _ok(result: Result) -> tuple[Widget, Outcome]:
    assert not isinstance(result, StoreError), result
    obj, outcome = result
    assert isinstance(obj, Widget)
    return obj, outcome


def test_each_write_of_a_batch_stands_alone_with_its_result_in_its_place(
    store: MemoryStore,
) -> None:
    first = store.create(widget("a", color="red"))
    results = _results(
        store,
        Write.create(widget("b")),
        Write.create(widget("a")),  # taken
        Write.update(replace(first, spec=replace(first.spec, color="blue"))),
        Write.update(replace(first, spec=replace(first.spec, color="green"))),  # stale now
        Write.delete(WIDGETS, "missing"),
    )
    assert _ok(results[0])[1] is Outcome.CREATED
    assert isinstance(results[1], AlreadyExists)
    assert _ok(results[2])[0].spec.color == "blue"
    assert isinstance(results[3], Conflict)
    assert isinstance(results[4], NotFound)
    # what succeeded is stored, what failed left nothing
    assert store.get(WIDGETS, "a", "default").spec.color == "blue"  # type: ignore[attr-defined]
    assert store.exists(WIDGETS, "b", "default")


def test_a_status_update_writes_the_status_alone(store: MemoryStore) -> None:
    stored = store.create(widget("a", color="red"))
    changed = replace(
        stored,
        spec=replace(stored.spec, color="blue"),  # not written: status only
        status=replace(stored.status, phase="Ready", ready=2),
    )
    after, outcome = _ok(_results(store, Write.update_status(changed))[0])
    assert outcome is Outcome.CONFIGURED
    assert (after.spec.color, after.status.phase, after.status.ready) == ("red", "Ready", 2)
    assert after.metadata.generation == stored.metadata.generation  # the body did not change
    assert isinstance(_results(store, Write.update_status(changed))[0], Conflict)  # stale rv


def test_a_merge_patch_merges_maps_removes_nulls_and_keeps_the_rest(store: MemoryStore) -> None:
    stored = store.create(widget("a", labels={"app": "web", "tier": "front"}, color="red"))
    patch = {"metadata": {"labels": {"tier": None, "team": "a"}}, "spec": {"size": 3}}
    after, _ = _ok(_results(store, Write.merge_patch(WIDGETS, "a", patch, "default"))[0])
    assert after.metadata.labels == {"app": "web", "team": "a"}
    assert (after.spec.size, after.spec.color) == (3, "red")
    stale = Write.merge_patch(
        WIDGETS,
        "a",
        {"spec": {"size": 4}},
        "default",
        resource_version=stored.metadata.resource_version,
    )
    assert isinstance(_results(store, stale)[0], Conflict)
    renamed = _results(
        store, Write.merge_patch(WIDGETS, "a", {"metadata": {"name": "b"}}, "default")
    )
    assert isinstance(renamed[0], Invalid)
    bad = _results(store, Write.merge_patch(WIDGETS, "a", {"spec": {"size": "big"}}, "default"))
    assert isinstance(bad[0], Invalid)
    assert "spec.size" in str(bad[0])
    assert store.get(WIDGETS, "a", "default").spec.size == 3  # type: ignore[attr-defined]


def test_a_delete_of_an_object_as_read_checks_its_uid_and_its_version(store: MemoryStore) -> None:
    old = store.create(widget("a"))
    store.delete(WIDGETS, "a", "default")
    again = store.create(widget("a"))  # another object of the same name
    assert isinstance(_results(store, Write.delete_of(WIDGETS, old))[0], Conflict)
    touched = store.update(replace(again, spec=replace(again.spec, size=5)))
    stale = Write.delete_of(WIDGETS, again, precondition=True)
    assert isinstance(_results(store, stale)[0], Conflict)
    last, outcome = _ok(_results(store, Write.delete_of(WIDGETS, touched, precondition=True))[0])
    assert outcome is Outcome.DELETED
    assert last.metadata.uid == again.metadata.uid
    assert not store.exists(WIDGETS, "a", "default")


def _pod(name: str) -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default"),
        spec=PodSpec(containers=(Container(name="c", image="busybox"),)),
    )


def test_a_binding_sets_the_node_once(pods: MemoryStore) -> None:
    pending = pods.create(_pod("web"))
    bound = replace(pending, spec=replace(pending.spec, node_name="n1"))
    [result] = _results(pods, Write.bind(bound))
    assert not isinstance(result, StoreError)
    assert result[0].spec.node_name == "n1"  # type: ignore[attr-defined]
    stored = result[0]
    elsewhere = replace(stored, spec=replace(stored.spec, node_name="n2"))  # type: ignore[type-var]
    [again] = _results(pods, Write.bind(elsewhere))
    assert isinstance(again, Conflict)
    assert "already assigned to node 'n1'" in str(again)
    unbound = _results(pods, Write.bind(pods.create(_pod("db"))))
    assert isinstance(unbound[0], Invalid)


def test_an_eviction_deletes_the_pod(pods: MemoryStore) -> None:
    pod = pods.create(_pod("web"))
    [result] = _results(pods, Write.evict(PODS, pod, precondition=True))
    assert not isinstance(result, StoreError)
    assert result[1] is Outcome.DELETED
    assert not pods.exists(PODS, "web", "default")


# --- the Outbox -------------------------------------------------------------------------------


class _Late:
    """A cluster answering a loop's batches only when told to, as a remote one would."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.held: list[tuple[Pending, list[Result]]] = []

    @property
    def registry(self) -> object:
        return self.store.registry

    def write(self, writes: list[Write]) -> Pending:
        pending = Pending()
        self.held.append((pending, self.store.write(writes).results()))
        return pending

    def answer(self) -> None:
        for pending, results in self.held:
            pending.resolve(results)
        self.held.clear()


def test_the_outbox_shows_what_it_sent_until_the_results_arrive_then_hands_them_over(
    store: MemoryStore,
) -> None:
    late = _Late(store)
    outbox = Outbox(kinds=(WIDGETS,))
    before = store.create(widget("a", color="red"))
    seen = store.snapshot()  # the loop's snapshot, taken before its write
    got: list[list[Result]] = []
    outbox.send(
        late, [Write.update(replace(before, spec=replace(before.spec, color="blue")))], got.append
    )  # type: ignore[arg-type]
    assert got == []
    assert len(outbox) == 1
    shown = outbox.over(seen).get(WIDGETS, "a", "default")
    assert isinstance(shown, Widget)  # sent, not yet answered
    assert shown.spec.color == "blue"
    late.answer()
    shown = outbox.over(seen).get(WIDGETS, "a", "default")  # collects: the result is in
    assert len(got) == 1
    assert len(outbox) == 0
    stored = _ok(got[0][0])[0]
    assert shown is stored  # the stored object, until a snapshot shows it
    assert outbox.over(store.snapshot()).get(WIDGETS, "a", "default") is stored


def test_a_write_that_failed_late_is_no_longer_shown_and_batches_are_handled_in_order(
    store: MemoryStore,
) -> None:
    late = _Late(store)
    outbox = Outbox(kinds=(WIDGETS,))
    stored = store.create(widget("a", color="red"))
    seen = store.snapshot()  # the loop's snapshot
    store.update(replace(stored, spec=replace(stored.spec, size=5)))  # someone else's, since
    order: list[str] = []
    stale = replace(stored, spec=replace(stored.spec, color="blue"))
    first = [Write.update(stale)]
    outbox.send(late, first, lambda r: order.append(type(r[0]).__name__))  # type: ignore[arg-type]
    second = [Write.create(widget("b"))]
    outbox.send(late, second, lambda r: order.append("second"))  # type: ignore[arg-type]
    shown = outbox.over(seen).get(WIDGETS, "a", "default")
    assert isinstance(shown, Widget)
    assert shown.spec.color == "blue"
    late.answer()
    shown = outbox.over(seen).get(WIDGETS, "a", "default")
    assert order == ["Conflict", "second"]
    assert shown is stored  # the failed write is no longer shown
    now = outbox.over(store.snapshot()).get(WIDGETS, "a", "default")
    assert isinstance(now, Widget)
    assert (now.spec.color, now.spec.size) == ("red", 5)


def test_an_unchanged_rewrite_keeps_an_earlier_unseen_write_shown(store: MemoryStore) -> None:
    """A loop writes an object, then writes it again unchanged before any snapshot showed the
    first write: the snapshot from before still shows the first write, not the old object."""
    outbox = Outbox(kinds=(WIDGETS,))
    before = store.create(widget("a", color="red"))
    seen = store.snapshot()
    blue = replace(before, spec=replace(before.spec, color="blue"))
    outbox.send(store, [Write.update(blue)])  # type: ignore[arg-type]
    shown = outbox.over(seen).get(WIDGETS, "a", "default")
    assert isinstance(shown, Widget)
    assert shown.spec.color == "blue"
    outbox.send(store, [Write.update(shown)])  # type: ignore[arg-type]  # nothing changes
    again = outbox.over(seen).get(WIDGETS, "a", "default")
    assert again is shown
