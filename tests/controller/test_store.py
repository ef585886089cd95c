"""Store semantics: versions, conflicts, names, apply, finalizers, lists, snapshots, submit."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterator, MutableSequence, Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.labels import parse_selector
from apis.meta import Object, ObjectMeta
from controller.api.groupcommit import GroupCommit
from controller.errors import AlreadyExists, Conflict, Invalid, NotFound, StoreError
from controller.store.cluster import Outcome
from controller.store.memory import NAME_SUFFIX_ALPHABET, MemoryStore
from controller.store.snapshots import Snapshot
from controller.store.sqlite import Store
from tests.controller.backends import STORE_BACKENDS, open_backend
from tests.controller.storekinds import (
    GADGETS,
    REGISTRY,
    WIDGETS,
    FakeClock,
    Widget,
    WidgetSpec,
    WidgetStatus,
    as_widgets,
    creating,
    gadget,
    widget,
)

replace = msgspec.structs.replace
ObjT = TypeVar("ObjT", bound=Object)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 12, 0, 0, 750_000, tzinfo=UTC))


@pytest.fixture(params=STORE_BACKENDS)
def store(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> Iterator[MemoryStore]:
    """Every test runs over each backend."""
    with open_backend(request.param, tmp_path, registry=REGISTRY, clock=clock) as opened:
        yield opened


def with_spec(obj: Widget, **changes: object) -> Widget:
    return replace(obj, spec=replace(obj.spec, **changes))


def with_meta(obj: ObjT, **changes: object) -> ObjT:
    return replace(obj, metadata=replace(obj.metadata, **changes))


# --- create -----------------------------------------------------------------------------------


def test_create_sets_server_owned_metadata(store: MemoryStore) -> None:
    created = store.create(widget("web", labels={"app": "web"}))
    meta = created.metadata
    assert meta.namespace == "default"
    assert meta.resource_version == "1"
    assert meta.generation == 1
    assert meta.creation_timestamp == datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert len(meta.uid) == 36
    assert meta.uid.count("-") == 4
    assert meta.uid[14] == "4"  # a version 4 UUID
    assert store.get(WIDGETS, "web") == created
    assert store.resource_version == 1


def test_uids_are_unique(store: MemoryStore) -> None:
    uids = {store.create(widget(f"w{i}")).metadata.uid for i in range(500)}
    assert len(uids) == 500


def test_create_ignores_server_owned_fields_given_by_the_caller(store: MemoryStore) -> None:
    given_meta = ObjectMeta(
        name="web",
        uid="not-mine",
        generation=9,
        creation_timestamp=datetime(2000, 1, 1, tzinfo=UTC),
        deletion_timestamp=datetime(2000, 1, 1, tzinfo=UTC),
    )
    created = store.create(Widget(metadata=given_meta))
    assert created.metadata.uid != "not-mine"
    assert created.metadata.resource_version == "1"
    assert created.metadata.generation == 1
    assert created.metadata.deletion_timestamp is None
    assert created.metadata.creation_timestamp is not None
    assert created.metadata.creation_timestamp.year == 2026


def test_cluster_scoped_objects_have_no_namespace(store: MemoryStore) -> None:
    created = store.create(replace(gadget("g1"), metadata=ObjectMeta(name="g1", namespace="x")))
    assert created.metadata.namespace == ""
    assert store.get(GADGETS, "g1", "whatever") == created


def test_create_twice_is_already_exists(store: MemoryStore) -> None:
    store.create(widget("web"))
    with pytest.raises(AlreadyExists) as info:
        store.create(widget("web", size=3))
    assert str(info.value) == 'widgets.test.koordpy.io "web" already exists'
    assert (info.value.kind, info.value.namespace, info.value.name) == (WIDGETS, "default", "web")
    assert store.resource_version == 1
    # the same name in another namespace is another object
    assert store.create(widget("web", "other")).metadata.namespace == "other"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (widget("Web"), 'metadata.name: Invalid value: "Web": '),
        (widget(), "metadata.name: Required value: name or generateName is required"),
        (widget("web", "Team_A"), 'metadata.namespace: Invalid value: "Team_A": '),
        (widget("web", labels={"-bad": "x"}), 'metadata.labels: Invalid value: "-bad": '),
        (widget("web", labels={"app": "-x"}), 'metadata.labels: Invalid value: "-x": '),
        (widget("web", annotations={"a b": ""}), 'metadata.annotations: Invalid value: "a b": '),
        (widget("web", finalizers=("no good",)), 'metadata.finalizers[0]: Invalid value: "no '),
        (widget(generate_name="Web-"), 'metadata.generateName: Invalid value: "Web-": '),
    ],
    ids=["name", "no-name", "namespace", "label-key", "label-value", "annotation", "finalizer",
         "generate-name"],
)  # fmt: skip
def test_invalid_objects_are_refused(store: MemoryStore, obj: Widget, message: str) -> None:
    with pytest.raises(Invalid) as info:
        store.create(obj)
    assert str(info.value).startswith("Widget.test.koordpy.io ")
    assert message in str(info.value)
    assert store.resource_version == 0
    assert store.list(WIDGETS) == ([], 0)


def test_invalid_carries_field_and_value(store: MemoryStore) -> None:
    with pytest.raises(Invalid) as info:
        store.create(widget("web", labels={"-bad": "x"}))
    assert (info.value.field, info.value.value) == ("metadata.labels", "-bad")


def test_unregistered_types_are_invalid(store: MemoryStore) -> None:
    class Stray(Object):
        api_version: str = "x/v1"
        kind: str = "Stray"

    with pytest.raises(Invalid, match="Stray"):
        store.create(Stray(metadata=ObjectMeta(name="s")))


# --- generateName ----------------------------------------------------------------------------


def test_generate_name(store: MemoryStore) -> None:
    created = store.create(widget(generate_name="web-"))
    name = created.metadata.name
    assert name.startswith("web-")
    assert len(name) == len("web-") + 5
    assert set(name[4:]) <= set(NAME_SUFFIX_ALPHABET)
    assert created.metadata.generate_name == "web-"


def test_generate_name_retries_on_clash(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    predicted = random.Random(42)
    first = "web-" + "".join(predicted.choices(NAME_SUFFIX_ALPHABET, k=5))
    second = "web-" + "".join(predicted.choices(NAME_SUFFIX_ALPHABET, k=5))
    store.create(widget(first))
    monkeypatch.setattr(store, "_random", random.Random(42))
    assert store.create(widget(generate_name="web-")).metadata.name == second


def test_long_generate_name_is_cut_to_fit(store: MemoryStore) -> None:
    created = store.create(widget(generate_name="a" * 80))
    assert created.metadata.name.startswith("a" * 58)
    assert len(created.metadata.name) == 63


# --- get / update ----------------------------------------------------------------------------


def test_get_missing_is_not_found(store: MemoryStore) -> None:
    with pytest.raises(NotFound) as info:
        store.get(WIDGETS, "nope", "team")
    assert str(info.value) == 'widgets.test.koordpy.io "nope" not found'
    assert (info.value.namespace, info.value.name) == ("team", "nope")


def test_update_with_stale_version_conflicts(store: MemoryStore) -> None:
    v1 = store.create(widget("web"))
    v2 = store.update(with_spec(v1, size=2))
    assert v2.metadata.resource_version == "2"
    with pytest.raises(Conflict) as info:
        store.update(with_spec(v1, size=3))
    assert str(info.value) == (
        'Operation cannot be fulfilled on widgets.test.koordpy.io "web": the object has been'
        " modified; please apply your changes to the latest version and try again"
    )
    assert store.get(WIDGETS, "web") == v2


def test_update_without_version_is_unconditional(store: MemoryStore) -> None:
    store.create(widget("web"))
    updated = store.update(widget("web", size=5))
    assert updated.spec.size == 5
    assert updated.metadata.resource_version == "2"


def test_update_keeps_server_owned_metadata(store: MemoryStore, clock: FakeClock) -> None:
    created = store.create(widget("web", finalizers=("example.com/keep",)))
    clock.advance(60)
    incoming = with_meta(
        widget("web", size=2, finalizers=("example.com/keep",)),
        creation_timestamp=datetime(1999, 1, 1, tzinfo=UTC),
        generation=40,
    )
    updated = store.update(incoming)
    assert updated.metadata.uid == created.metadata.uid
    assert updated.metadata.creation_timestamp == created.metadata.creation_timestamp
    assert updated.metadata.generation == 2


def test_update_with_another_uid_conflicts(store: MemoryStore) -> None:
    store.create(widget("web"))
    with pytest.raises(Conflict, match="UID in precondition: other"):
        store.update(with_meta(widget("web", size=2), uid="other"))


def test_update_of_missing_object_is_not_found(store: MemoryStore) -> None:
    with pytest.raises(NotFound):
        store.update(widget("ghost"))


def test_generation_counts_body_changes_only(store: MemoryStore) -> None:
    obj = store.create(widget("web"))
    obj = store.update(with_meta(obj, labels={"app": "web"}))
    assert obj.metadata.generation == 1
    obj = store.update(replace(obj, status=WidgetStatus(phase="Ready")))
    assert obj.metadata.generation == 1
    obj = store.update(with_spec(obj, color="red"))
    assert obj.metadata.generation == 2
    assert obj.metadata.resource_version == "4"


def test_update_that_changes_nothing_is_a_no_op(store: MemoryStore) -> None:
    created = store.create(widget("web", labels={"app": "web"}))
    again = store.update(created)
    assert again is created or again == created
    assert store.resource_version == 1
    # also without a resourceVersion and with a copy of equal content
    same = widget("web", labels={"app": "web"})
    assert store.update(same).metadata.resource_version == "1"
    assert store.resource_version == 1


def test_update_validates_labels(store: MemoryStore) -> None:
    obj = store.create(widget("web"))
    with pytest.raises(Invalid, match=re.escape('metadata.labels: Invalid value: "a b"')):
        store.update(with_meta(obj, labels={"a b": "x"}))
    with pytest.raises(Invalid, match=re.escape("metadata.name: Required value")):
        store.update(with_meta(obj, name=""))


# --- apply -----------------------------------------------------------------------------------


def test_apply_outcomes(store: MemoryStore) -> None:
    obj, outcome = store.apply(widget("web", size=1))
    assert outcome is Outcome.CREATED
    assert obj.metadata.resource_version == "1"
    obj, outcome = store.apply(widget("web", size=1))
    assert outcome is Outcome.UNCHANGED
    assert obj.metadata.resource_version == "1"
    obj, outcome = store.apply(widget("web", size=2))
    assert outcome is Outcome.CONFIGURED
    assert (obj.metadata.resource_version, obj.metadata.generation) == ("2", 2)
    assert store.resource_version == 2


def test_apply_replaces_metadata_lists_and_body_keeps_server_fields(store: MemoryStore) -> None:
    first, _ = store.apply(
        widget("web", labels={"a": "1", "b": "2"}, annotations={"note": "x"}, color="red")
    )
    second, outcome = store.apply(widget("web", labels={"a": "1"}, size=1))
    assert outcome is Outcome.CONFIGURED
    assert second.metadata.labels == {"a": "1"}
    assert second.metadata.annotations == {}
    assert second.spec == WidgetSpec(size=1)
    assert second.metadata.uid == first.metadata.uid
    assert second.metadata.creation_timestamp == first.metadata.creation_timestamp


def test_apply_keeps_stored_status_unless_one_is_given(store: MemoryStore) -> None:
    obj = store.create(widget("web"))
    store.update(replace(obj, status=WidgetStatus(phase="Running", ready=1)))
    kept, outcome = store.apply(widget("web"))
    assert outcome is Outcome.UNCHANGED
    assert kept.status.phase == "Running"
    taken, outcome = store.apply(widget("web", phase="Failed"))
    assert outcome is Outcome.CONFIGURED
    assert taken.status == WidgetStatus(phase="Failed")
    assert taken.metadata.generation == 1  # status is not the body


def test_apply_with_stale_version_conflicts(store: MemoryStore) -> None:
    store.apply(widget("web"))
    store.apply(widget("web", size=2))
    with pytest.raises(Conflict):
        store.apply(widget("web", size=3, resource_version="1"))
    obj, outcome = store.apply(widget("web", size=3, resource_version="2"))
    assert outcome is Outcome.CONFIGURED
    assert obj.spec.size == 3


def test_a_create_carrying_a_resource_version_is_refused_naming_the_field(
    store: MemoryStore,
) -> None:
    """As the API server refuses it (kubectl apply of a new object included): nothing stored."""
    store.create(widget("kept"))
    for write in (store.apply, store.create):
        with pytest.raises(Invalid, match=r"metadata\.resourceVersion: Invalid value: \"5\""):
            write(widget("web", resource_version="5"))
    assert not store.exists(WIDGETS, "web")
    assert store.exists(WIDGETS, "kept")


def test_apply_needs_a_name(store: MemoryStore) -> None:
    with pytest.raises(Invalid, match=re.escape("metadata.name: Required value")):
        store.apply(widget(generate_name="web-"))


def test_apply_many_is_one_transaction_with_errors_in_place(store: MemoryStore) -> None:
    store.create(widget("b", size=1))
    results = store.apply_many(
        [widget("a"), widget("b", size=1), widget("Bad"), widget("b", size=2), widget("c")]
    )
    outcomes = [r if isinstance(r, StoreError) else r[1] for r in results]
    assert outcomes[0] is Outcome.CREATED
    assert outcomes[1] is Outcome.UNCHANGED
    assert isinstance(outcomes[2], Invalid)
    assert outcomes[3] is Outcome.CONFIGURED
    assert outcomes[4] is Outcome.CREATED
    assert store.resource_version == 4
    names = [o.metadata.name for o in store.list(WIDGETS)[0]]
    assert names == ["a", "b", "c"]


# --- delete and finalizers -------------------------------------------------------------------


def test_delete_without_finalizers_removes(store: MemoryStore) -> None:
    created = store.create(widget("web"))
    last, outcome = store.delete(WIDGETS, "web")
    assert outcome is Outcome.DELETED
    assert last.metadata.resource_version == "2"
    assert last.metadata.uid == created.metadata.uid
    with pytest.raises(NotFound):
        store.get(WIDGETS, "web")
    with pytest.raises(NotFound):
        store.delete(WIDGETS, "web")
    assert store.resource_version == 2


def test_delete_with_stale_version_conflicts(store: MemoryStore) -> None:
    store.create(widget("web"))
    store.apply(widget("web", size=2))
    with pytest.raises(Conflict):
        store.delete(WIDGETS, "web", resource_version="1")
    assert store.delete(WIDGETS, "web", resource_version="2")[1] is Outcome.DELETED


def test_finalizer_flow(store: MemoryStore, clock: FakeClock) -> None:
    created = store.create(widget("web", finalizers=("example.com/cleanup",)))
    clock.advance(30)
    marked, outcome = store.delete(WIDGETS, "web")
    assert outcome is Outcome.CONFIGURED
    assert marked.metadata.deletion_timestamp == datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    assert marked.metadata.resource_version == "2"
    assert marked.metadata.generation == created.metadata.generation + 1
    assert store.get(WIDGETS, "web") == marked

    # deleting again changes nothing
    again, outcome = store.delete(WIDGETS, "web")
    assert (again, outcome) == (marked, Outcome.CONFIGURED)
    assert store.resource_version == 2

    # no new finalizers while being deleted
    with pytest.raises(Invalid, match=re.escape("metadata.finalizers: Forbidden")):
        store.update(with_meta(marked, finalizers=("example.com/cleanup", "example.com/more")))

    # other updates still work, and deletionTimestamp cannot be cleared by an update
    touched = store.update(with_meta(marked, labels={"x": "y"}, deletion_timestamp=None))
    assert touched.metadata.deletion_timestamp == marked.metadata.deletion_timestamp

    # removing the last finalizer deletes it
    gone = store.update(with_meta(touched, finalizers=()))
    assert gone.metadata.resource_version == "4"
    with pytest.raises(NotFound):
        store.get(WIDGETS, "web")


def test_apply_removing_the_last_finalizer_deletes(store: MemoryStore) -> None:
    store.apply(widget("web", finalizers=("example.com/a",)))
    store.delete(WIDGETS, "web")
    _, outcome = store.apply(widget("web"))
    assert outcome is Outcome.DELETED
    assert store.list(WIDGETS)[0] == []


# --- list and snapshot -----------------------------------------------------------------------


def _populate(store: MemoryStore) -> None:
    for ns, name, app in [
        ("team-b", "api", "web"),
        ("team-a", "zeta", "db"),
        ("team-a", "alpha", "web"),
        ("default", "m", "cache"),
    ]:
        store.create(widget(name, ns, labels={"app": app}))
    store.create(gadget("g2", labels={"app": "web"}))
    store.create(gadget("g1"))


def test_list_is_sorted_by_namespace_then_name(store: MemoryStore) -> None:
    _populate(store)
    items, version = store.list(WIDGETS)
    assert [(o.metadata.namespace, o.metadata.name) for o in items] == [
        ("default", "m"),
        ("team-a", "alpha"),
        ("team-a", "zeta"),
        ("team-b", "api"),
    ]
    assert version == store.resource_version == 6
    assert [o.metadata.name for o in store.list(GADGETS)[0]] == ["g1", "g2"]


def test_list_filters_by_namespace_and_selector(store: MemoryStore) -> None:
    _populate(store)
    names = [o.metadata.name for o in store.list(WIDGETS, namespace="team-a")[0]]
    assert names == ["alpha", "zeta"]
    web = parse_selector("app=web")
    names = [o.metadata.name for o in store.list(WIDGETS, selector=web)[0]]
    assert names == ["alpha", "api"]
    names = [o.metadata.name for o in store.list(WIDGETS, namespace="team-a", selector=web)[0]]
    assert names == ["alpha"]
    assert [o.metadata.name for o in store.list(GADGETS, selector=parse_selector("!app"))[0]] == [
        "g1"
    ]
    # a namespace does not filter cluster-scoped kinds
    assert len(store.list(GADGETS, namespace="team-a")[0]) == 2


def test_snapshot_is_immutable_and_reflects_its_version(store: MemoryStore) -> None:
    _populate(store)
    snap = store.snapshot()
    store.apply(widget("alpha", "team-a", size=9))
    store.delete(WIDGETS, "m")
    assert snap.resource_version == 6
    assert [o.metadata.name for o in snap.objects(WIDGETS)] == ["m", "alpha", "zeta", "api"]
    alpha = snap.get(WIDGETS, "alpha", "team-a")
    assert isinstance(alpha, Widget)
    assert alpha.spec.size == 1
    assert snap.get(WIDGETS, "m") is not None
    assert snap.get(WIDGETS, "nope") is None
    items = snap.objects(WIDGETS)
    assert isinstance(items, Sequence)
    assert not isinstance(items, MutableSequence)
    later = store.snapshot()
    assert later.resource_version == 8
    assert [o.metadata.name for o in later.objects(WIDGETS)] == ["alpha", "zeta", "api"]
    assert snap.objects(WIDGETS, namespace="team-a", selector=parse_selector("app=db"))[0].name == (
        "zeta"
    )


def test_snapshots_share_unchanged_kinds(store: MemoryStore) -> None:
    _populate(store)
    first = store.snapshot()
    store.apply(widget("new"))
    second = store.snapshot()
    assert second.objects(GADGETS) is first.objects(GADGETS)
    assert second.objects(WIDGETS) is not first.objects(WIDGETS)
    assert store.snapshot().objects(WIDGETS) is second.objects(WIDGETS)


def test_snapshot_read_late_sees_the_state_it_was_taken_at(store: MemoryStore) -> None:
    # Views are built when first read: the kinds a snapshot has not read yet are kept for it
    # when they change, whatever happened since (updates, new and deleted objects).
    _populate(store)
    early = store.snapshot()
    store.apply(widget("alpha", "team-a", size=7))
    middle = store.snapshot()
    store.create(widget("aaa", "team-a"))
    store.delete(WIDGETS, "zeta", "team-a")
    store.apply(gadget("g9"))
    late = store.snapshot()
    assert [(o.metadata.name, o.spec.size) for o in as_widgets(early.objects(WIDGETS))] == [
        ("m", 1),
        ("alpha", 1),
        ("zeta", 1),
        ("api", 1),
    ]
    assert [(o.metadata.name, o.spec.size) for o in as_widgets(middle.objects(WIDGETS))] == [
        ("m", 1),
        ("alpha", 7),
        ("zeta", 1),
        ("api", 1),
    ]
    assert [o.metadata.name for o in late.objects(WIDGETS)] == ["m", "aaa", "alpha", "api"]
    assert [o.metadata.name for o in early.objects(GADGETS)] == ["g1", "g2"]
    assert [o.metadata.name for o in late.objects(GADGETS)] == ["g1", "g2", "g9"]
    assert early.get(WIDGETS, "zeta", "team-a") is not None
    assert late.get(WIDGETS, "zeta", "team-a") is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "drop", "snap"]),
            st.sampled_from(["a", "b", "c", "d"]),
            st.integers(1, 5),
        ),
        max_size=30,
    )
)
def test_every_snapshot_keeps_its_version_whenever_it_is_read(
    steps: list[tuple[str, str, int]],
) -> None:
    store = Store(registry=REGISTRY, clock=FakeClock(datetime(2026, 3, 1, tzinfo=UTC)))
    model: dict[str, int] = {}
    taken: list[tuple[Snapshot, dict[str, int]]] = []
    for op, name, size in steps:
        if op == "put":
            store.apply(widget(name, size=size))
            model[name] = size
        elif op == "drop" and name in model:
            store.delete(WIDGETS, name)
            del model[name]
        elif op == "snap":
            snap = store.snapshot()
            if size == 1:  # some are read at once, the rest only at the end
                now = as_widgets(snap.objects(WIDGETS))
                assert {o.metadata.name: o.spec.size for o in now} == model
            taken.append((snap, dict(model)))
    for snap, expected in taken:
        assert isinstance(snap, Snapshot)
        seen = {o.metadata.name: o.spec.size for o in as_widgets(snap.objects(WIDGETS))}
        assert seen == expected
        assert [o.metadata.name for o in snap.objects(WIDGETS)] == sorted(expected)


# --- group commit (controller/api/groupcommit.py) -------------------------------------------------


async def test_submit_returns_results_after_commit(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    results = await asyncio.gather(*(commits.submit(creating(widget(f"w{i}"))) for i in range(50)))
    assert sorted(int(o.metadata.resource_version) for o in results) == list(range(1, 51))
    assert store.resource_version == 50
    assert len(store.list(WIDGETS)[0]) == 50
    await commits.aclose()


async def test_a_failing_op_does_not_fail_its_batch(store: MemoryStore) -> None:
    commits = GroupCommit(store)

    def half_then_fail(s: MemoryStore) -> None:
        s.create(widget("partial"))
        raise RuntimeError("op broke")

    def conflict(s: MemoryStore) -> Object:
        return s.update(widget("w0", size=7, resource_version="999"))

    results = await asyncio.gather(
        commits.submit(lambda s: s.create(widget("w0"))),
        commits.submit(half_then_fail),
        commits.submit(lambda s: s.create(widget("w1"))),
        commits.submit(conflict),
        commits.submit(lambda s: s.create(widget("w2"))),
        return_exceptions=True,
    )
    assert isinstance(results[1], RuntimeError)
    assert isinstance(results[3], Conflict)
    assert [o.metadata.resource_version for o in results if isinstance(o, Widget)] == [
        "1",
        "2",
        "3",
    ]
    assert [o.metadata.name for o in store.list(WIDGETS)[0]] == ["w0", "w1", "w2"]
    assert store.resource_version == 3
    await commits.aclose()


async def test_submit_many_answers_each_op_and_rolls_back_only_the_failing_one(
    store: MemoryStore,
) -> None:
    commits = GroupCommit(store)

    def half_then_fail(s: MemoryStore) -> None:
        s.create(widget("partial"))
        raise RuntimeError("op broke")

    results = await commits.submit_many(
        [
            lambda s: s.create(widget("w0")),
            half_then_fail,
            lambda s: s.update(widget("w0", size=7, resource_version="999")),
            lambda s: s.create(widget("w1")),
        ]
    )
    assert [ok for ok, _ in results] == [True, False, False, True]
    assert isinstance(results[1][1], RuntimeError)
    assert isinstance(results[2][1], Conflict)
    assert [o.metadata.name for o in store.list(WIDGETS)[0]] == ["w0", "w1"]
    assert store.resource_version == 2
    await commits.aclose()


def test_update_many_reports_a_stale_object_in_its_place(store: MemoryStore) -> None:
    first, second = store.create(widget("w0")), store.create(widget("w1"))
    results = store.update_many(
        [
            with_spec(first, size=5),
            with_spec(
                replace(second, metadata=replace(second.metadata, resource_version="1")), size=6
            ),
            first,  # stale by now: w0 was just updated in this very batch
        ]
    )
    assert isinstance(results[0], tuple)
    assert results[0][1] is Outcome.CONFIGURED
    assert isinstance(results[1], Conflict)
    assert isinstance(results[2], Conflict)
    assert store.get(WIDGETS, "w0").spec.size == 5
    assert store.get(WIDGETS, "w1").spec == second.spec


async def test_changed_wakes_on_the_next_commit_and_not_before(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    store.create(widget("a"))
    seen = store.resource_version
    # Already past: no wait.
    assert await store.changed(seen - 1) == seen
    waiter = asyncio.create_task(store.changed(seen))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await commits.submit(creating(widget("b")))
    assert await asyncio.wait_for(waiter, 1.0) == seen + 1
    closing = asyncio.create_task(store.changed(store.resource_version))
    await asyncio.sleep(0.01)
    store.close()
    with pytest.raises(StoreError):
        await asyncio.wait_for(closing, 1.0)


async def test_ops_in_one_batch_see_each_other(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    store.create(widget("web"))

    def bump(s: MemoryStore) -> Object:
        current = s.get(WIDGETS, "web")
        assert isinstance(current, Widget)
        return s.update(with_spec(current, size=current.spec.size + 1))

    results = await asyncio.gather(*(commits.submit(bump) for _ in range(10)))
    assert [o.spec.size for o in results if isinstance(o, Widget)] == list(range(2, 12))
    final = store.get(WIDGETS, "web")
    assert isinstance(final, Widget)
    assert final.spec.size == 11
    await commits.aclose()


async def test_reads_outside_ops_see_committed_state_only(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    seen: list[int] = []

    def create_and_peek(s: MemoryStore) -> None:
        s.create(widget("a"))
        seen.append(len(s.list(WIDGETS)[0]))  # the op sees its own write

    task = asyncio.ensure_future(commits.submit(create_and_peek))
    assert store.list(WIDGETS)[0] == []
    await task
    assert seen == [1]
    assert len(store.list(WIDGETS)[0]) == 1
    await commits.aclose()


async def test_aclose_commits_what_is_queued_and_refuses_more(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    pending = [asyncio.ensure_future(commits.submit(creating(widget(f"w{i}"))))
               for i in range(5)]  # fmt: skip
    await asyncio.sleep(0)
    await commits.aclose()
    assert all(p.done() and not p.exception() for p in pending)
    with pytest.raises(StoreError, match="closed"):
        await commits.submit(lambda s: s.create(widget("late")))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get(WIDGETS, "w0")


async def test_sync_writes_mix_with_submit(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    first = asyncio.ensure_future(commits.submit(lambda s: s.create(widget("queued"))))
    store.create(widget("direct"))
    created = await first
    assert created.metadata.resource_version == "2"
    assert store.get(WIDGETS, "direct").metadata.resource_version == "1"
    await commits.aclose()


# --- properties ------------------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "c", "d"])
_namespaces = st.sampled_from(["default", "other"])
_ops = st.lists(
    st.tuples(st.sampled_from(["create", "update", "apply", "delete"]), _namespaces, _names,
              st.integers(0, 3)),
    max_size=40,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_store_matches_a_simple_model(ops: list[tuple[str, str, str, int]]) -> None:
    store = Store(registry=REGISTRY, clock=FakeClock())
    model: dict[tuple[str, str], int] = {}
    versions = [store.resource_version]
    for op, ns, name, size in ops:
        key = (ns, name)
        try:
            if op == "create":
                store.create(widget(name, ns, size=size))
            elif op == "update":
                store.update(widget(name, ns, size=size))
            elif op == "apply":
                store.apply(widget(name, ns, size=size))
            else:
                store.delete(WIDGETS, name, ns)
        except AlreadyExists:
            assert op == "create"
            assert key in model
        except NotFound:
            assert op in ("update", "delete")
            assert key not in model
        else:
            if op == "delete":
                del model[key]
            else:
                assert op != "create" or key not in model
                model[key] = size
        versions.append(store.resource_version)
        items, version = store.list(WIDGETS)
        assert version == store.resource_version
        sizes = {(o.metadata.namespace, o.metadata.name): o.spec.size for o in as_widgets(items)}
        assert sizes == model
        assert [(o.metadata.namespace, o.metadata.name) for o in items] == sorted(model)
    assert versions == sorted(versions)
    store.close()


@settings(max_examples=40, deadline=None)
@given(_ops)
def test_every_write_gets_a_larger_version(ops: list[tuple[str, str, str, int]]) -> None:
    store = Store(registry=REGISTRY, clock=FakeClock())
    seen: list[int] = []
    for op, ns, name, size in ops:
        try:
            if op == "delete":
                obj, _ = store.delete(WIDGETS, name, ns)
            elif op == "create":
                obj = store.create(widget(name, ns, size=size))
            else:
                before = store.resource_version
                obj, outcome = store.apply(widget(name, ns, size=size))
                if outcome is Outcome.UNCHANGED:
                    assert store.resource_version == before
                    continue
        except StoreError:
            continue
        seen.append(int(obj.metadata.resource_version))
        assert int(obj.metadata.resource_version) == store.resource_version
    assert seen == sorted(set(seen))
    store.close()


# --- real kinds ------------------------------------------------------------------------------


def test_real_pods() -> None:
    from apis import codec
    from apis.kinds import default_registry

    registry = default_registry()
    pods = registry.resolve("pods")
    nodes = registry.resolve("nodes")
    manifest = """
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: main
    image: nginx
    resources:
      requests: {cpu: 500m, memory: 1Gi}
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
  namespace: ignored
"""
    store = Store(registry=registry, clock=FakeClock())
    results = store.apply_many(codec.decode_documents(manifest, registry=registry))
    assert [r[1] for r in results if not isinstance(r, StoreError)] == [
        Outcome.CREATED,
        Outcome.CREATED,
    ]
    pod = store.get(pods, "web")
    assert pod.metadata.namespace == "default"
    assert store.get(nodes, "node-1").metadata.namespace == ""
    with pytest.raises(NotFound, match=r'^pods "db" not found$'):
        store.get(pods, "db")
    again = store.apply_many(codec.decode_documents(manifest, registry=registry))
    assert [r[1] for r in again if not isinstance(r, StoreError)] == [
        Outcome.UNCHANGED,
        Outcome.UNCHANGED,
    ]
    assert [p.metadata.name for p in store.list(pods, selector=parse_selector("app=web"))[0]] == [
        "web"
    ]
    store.close()


def test_clock_without_timezone_is_taken_as_utc() -> None:
    store = Store(registry=REGISTRY, clock=lambda: datetime(2026, 5, 1, 8, 30, 15, 999))
    created = store.create(widget("web"))
    assert created.metadata.creation_timestamp == datetime(2026, 5, 1, 8, 30, 15, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    other = Store(
        registry=REGISTRY, clock=lambda: datetime(2026, 5, 1, 12, 30, 15, tzinfo=plus_two)
    )
    assert other.create(widget("web")).metadata.creation_timestamp == datetime(
        2026, 5, 1, 10, 30, 15, tzinfo=UTC
    )


def test_stored_bytes_are_the_codec_json_and_the_wire_reuses_them(store: MemoryStore) -> None:
    from apis.codec import encode_json
    from controller.api.wire import WireEncoder

    created = store.create(widget("web", labels={"app": "web"}, color="red"))
    stored = store.stored_bytes(created)
    assert stored == encode_json(created)
    wire = WireEncoder(store)
    assert wire.encode(created) is stored  # the write's answer costs no second encode
    unstored = widget("other")
    assert store.stored_bytes(unstored) is None
    assert wire.encode(unstored) == encode_json(unstored)
    assert wire.encode(unstored) is wire.encode(unstored)  # encoded once
    wire.clear()
    assert len(wire) == 0


async def test_list_inside_an_op_sees_the_transaction(store: MemoryStore) -> None:
    commits = GroupCommit(store)
    store.create(widget("a"))
    store.create(widget("b"))

    def replace_a_with_c(s: MemoryStore) -> list[str]:
        s.delete(WIDGETS, "a")
        s.create(widget("c"))
        items, version = s.list(WIDGETS)
        assert version == 4
        return [o.metadata.name for o in items]

    assert await commits.submit(replace_a_with_c) == ["b", "c"]
    assert [o.metadata.name for o in store.list(WIDGETS)[0]] == ["b", "c"]
    await commits.aclose()


def test_a_view_after_changes_in_place_holds_every_object_where_it_belongs() -> None:
    # Built from the view before when no object came or went (see KindView.updated).
    with Store(registry=REGISTRY) as store:
        for i in range(40):
            store.create(widget(f"w{i:02d}", "team-a" if i % 3 else "default", size=i))
        assert len(store.snapshot().objects(WIDGETS)) == 40
        changed = []
        for name, namespace in (("w07", "team-a"), ("w00", "default"), ("w38", "team-a")):
            found = store.get(WIDGETS, name, namespace)
            assert isinstance(found, Widget)
            changed.append(store.update(replace(found, spec=replace(found.spec, size=999))))
        items = store.snapshot().objects(WIDGETS)
        keys = [(w.metadata.namespace, w.metadata.name) for w in items]
        assert keys == sorted(keys)
        assert len(items) == 40
        for saved in changed:
            assert items[keys.index((saved.metadata.namespace, saved.metadata.name))] is saved
        assert sum(1 for w in items if isinstance(w, Widget) and w.spec.size == 999) == 3


def test_an_unchanged_object_is_the_same_object_in_the_next_snapshot(store: MemoryStore) -> None:
    """The identity contract the caches rely on (controller/store/snapshots.py, "Identity")."""
    a = store.create(widget("a"))
    store.create(widget("b"))
    store.create(gadget("g"))
    first = store.snapshot()
    store.update(with_spec(a, size=9))
    second = store.snapshot()
    assert second.get(WIDGETS, "b") is first.get(WIDGETS, "b")
    assert second.get(WIDGETS, "b") is store.get(WIDGETS, "b")
    assert second.get(WIDGETS, "a") is not first.get(WIDGETS, "a")
    assert second.objects(GADGETS) is first.objects(GADGETS)  # an unchanged kind
    assert second.objects(WIDGETS) is not first.objects(WIDGETS)
    assert store.snapshot().objects(WIDGETS) is second.objects(WIDGETS)
