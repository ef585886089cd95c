"""Snapshots that know what changed: Snapshot.changes, derived results updated from an earlier
view, and views built from the one before (KindView.updated, Items.updated) equal to views
built anew, sharing what did not change."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import msgspec
import pytest

from apis.core import ConfigMap, Pod
from apis.kinds import default_registry
from apis.meta import Object, ObjectMeta
from controller.store import snapshots
from controller.store.snapshots import (
    CHUNK,
    LINEAGE_DEPTH,
    MAX_CHUNK,
    MAX_LAYERS,
    MIN_CHUNK,
    Change,
    Items,
    KindView,
)
from controller.store.sqlite import Store

PODS = default_registry().for_type(Pod)


def _pod(name: str, namespace: str = "default") -> Pod:
    return Pod(metadata=ObjectMeta(name=name, namespace=namespace))


def _relabel(store: Store, name: str, value: str) -> Object:
    stored = store.get(PODS, name)
    meta = msgspec.structs.replace(stored.metadata, labels={"v": value})
    return store.update(msgspec.structs.replace(stored, metadata=meta))


def test_changes_name_each_object_changed_since_an_earlier_read() -> None:
    with Store() as store:
        for name in ("a", "b", "c"):
            store.create(_pod(name))
        earlier = store.snapshot().objects(PODS)
        a, b, c = earlier
        b2 = _relabel(store, "b", "2")
        store.delete(PODS, "c")
        d = store.create(_pod("d"))
        now = store.snapshot()
        assert now.changes(PODS, earlier) == [(b, b2), (c, None), (None, d)]
        assert now.changes(PODS, now.objects(PODS)) == []
        assert now.changes(PODS, (a,)) is None  # not a view this one knows


def test_changes_are_known_across_views_read_in_between_up_to_the_lineage_depth() -> None:
    with Store() as store:
        store.create(_pod("a"))
        first = store.snapshot().objects(PODS)
        reads = [first]
        for round_ in range(LINEAGE_DEPTH + 1):
            _relabel(store, "a", str(round_))
            reads.append(store.snapshot().objects(PODS))  # every view is built
        last = store.snapshot()
        (latest,) = last.objects(PODS)
        for since in reads[-LINEAGE_DEPTH - 1 : -1]:
            assert last.changes(PODS, since) == [(since[0], latest)]
        assert last.changes(PODS, first) is None  # further back than a view keeps


def _names(objects: Sequence[Object]) -> tuple[str, ...]:
    return tuple(o.metadata.name for o in objects)


def _renamed(earlier: tuple[str, ...], changes: list[Change]) -> tuple[str, ...]:
    names = set(earlier)
    for before, after in changes:
        if before is not None:
            names.discard(before.metadata.name)
        if after is not None:
            names.add(after.metadata.name)
    return tuple(sorted(names))


def test_derived_is_updated_from_a_view_it_was_worked_out_for_not_worked_out_again() -> None:
    computed: list[int] = []
    updated: list[int] = []

    def compute(objects: Sequence[Object]) -> tuple[str, ...]:
        computed.append(len(objects))
        return _names(objects)

    def update(earlier: tuple[str, ...], changes: list[Change]) -> tuple[str, ...]:
        updated.append(len(changes))
        return _renamed(earlier, changes)

    with Store() as store:
        for name in ("a", "b"):
            store.create(_pod(name))
        assert store.snapshot().derived(PODS, compute, update) == ("a", "b")
        store.create(_pod("c"))
        store.snapshot().objects(PODS)  # a view nobody worked the result out for
        store.delete(PODS, "a")
        assert store.snapshot().derived(PODS, compute, update) == ("b", "c")
        assert computed == [2]
        assert updated == [2]  # c came, a went: both since the view of the first result


def _config_map(key: tuple[str, str], version: str = "") -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(namespace=key[0], name=key[1], resource_version=version))


def _random_rounds(
    rng: random.Random, sizes: tuple[int, ...], rounds: int, spread: int
) -> Iterator[tuple[dict[tuple[str, str], Object], set[tuple[str, str]]]]:
    """The objects after each round of random adds, removals and replacements, and the keys
    the round changed (some added then removed again in the same round)."""
    objects: dict[tuple[str, str], Object] = {}
    for round_ in range(rounds):
        changed = set()
        for _ in range(rng.choice(sizes)):
            key = (f"ns-{rng.randrange(3)}", f"cm-{rng.randrange(spread):05d}")
            changed.add(key)
            if key in objects and rng.random() < 0.45:
                del objects[key]
            else:
                objects[key] = _config_map(key, str(round_))
        yield objects, changed


def _check_chunks(items: Items) -> None:
    sizes = [len(chunk) for chunk in items.chunks]
    assert sum(sizes) == len(items)
    assert len(sizes) <= 1 or all(MIN_CHUNK <= size <= MAX_CHUNK for size in sizes), sizes
    assert all(sizes)


def _check_view(view: KindView, objects: dict[tuple[str, str], Object]) -> None:
    fresh = KindView.build(objects)
    assert view.items == fresh.items == tuple(objects[key] for key in sorted(objects))
    assert dict(view.index) == objects
    assert len(view.index) == len(objects)
    assert all(view.index.get(key) is obj for key, obj in objects.items())
    assert all(key in view.index for key in objects)


def test_views_updated_from_the_one_before_equal_views_built_anew() -> None:
    rng = random.Random(18)
    view = KindView.build({})
    for objects, changed in _random_rounds(rng, (1, 5, 11), 3 * MAX_LAYERS, 600):
        view = KindView.updated(view, objects, changed)
        _check_view(view, objects)
        assert all(view.index.get(key) is None for key in changed - objects.keys())
        assert not any(key in view.index for key in changed - objects.keys())


def test_a_large_index_updated_over_many_views_as_it_grows_and_shrinks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Past MAX_LAYERS views a large index is split in parts; growing or shrinking far splits
    # it again (or makes it one dict): every view still finds exactly its objects.
    monkeypatch.setattr(snapshots, "PART", 8)  # parts of a few objects: many splits
    rng = random.Random(5)
    objects: dict[tuple[str, str], Object] = {}
    view = KindView.build(objects)
    views = [(view, dict(objects))]
    for round_ in range(6 * MAX_LAYERS):
        if round_ < 3 * MAX_LAYERS:  # grow by a third each time, then shrink to nothing
            start = len(objects)
            changed = {("default", f"cm-{start + i:05d}") for i in range(start // 3 + 4)}
            objects.update((key, _config_map(key, str(round_))) for key in changed)
        else:
            changed = set(rng.sample(sorted(objects), min(len(objects), len(objects) // 3 + 4)))
            for key in changed:
                del objects[key]
        changed.add(("default", f"cm-{rng.randrange(len(objects) + 5):05d}"))
        view = KindView.updated(view, objects, changed)
        views.append((view, dict(objects)))
    for earlier, then in views:  # each view still holds what it held when built
        _check_view(earlier, then)


def test_items_updated_over_many_rounds_are_the_sorted_objects_in_bounded_chunks() -> None:
    # Rounds from one object to more than a chunk's worth grow, split, shrink and merge chunks.
    rng = random.Random(6)
    items = Items()
    for objects, changed in _random_rounds(rng, (1, 3, 40, CHUNK + 7), 250, 4 * CHUNK):
        before, before_chunks = items, items.chunks
        items = items.updated({key: objects.get(key) for key in changed})
        expected = tuple(objects[key] for key in sorted(objects))
        assert items == expected
        assert list(items) == list(expected)
        assert len(items) == len(expected)
        _check_chunks(items)
        assert before.chunks is before_chunks  # the view before is left as it was
        if expected:
            at = rng.randrange(len(expected))
            assert items[at] is expected[at]
            assert items[-1] is expected[-1]
            begin, end = sorted(rng.randrange(len(expected) + 1) for _ in range(2))
            assert items[begin:end] == expected[begin:end]
            key = (expected[at].metadata.namespace, expected[at].metadata.name)
            assert items.bisect(key) == at
        assert list(reversed(items)) == list(reversed(expected))


def test_an_update_shares_the_chunks_it_did_not_touch() -> None:
    keys = [("default", f"cm-{i:05d}") for i in range(10 * CHUNK)]
    items = Items([_config_map(key) for key in keys])
    _check_chunks(items)
    changed = keys[3 * CHUNK + 5]
    after = items.updated({changed: _config_map(changed, "2")})
    shared = sum(1 for a, b in zip(items.chunks, after.chunks, strict=True) if a is b)
    assert shared == len(items.chunks) - 1
    assert after[3 * CHUNK + 5].metadata.resource_version == "2"
    assert items[3 * CHUNK + 5].metadata.resource_version == ""
    assert items.updated({}) is items


def test_a_kind_keeps_its_items_object_until_it_changes_and_gets_a_new_one_after() -> None:
    with Store() as store:
        for i in range(3 * CHUNK):
            store.create(_pod(f"p{i:05d}"))
        first = store.snapshot().objects(PODS)
        store.create(ConfigMap(metadata=ObjectMeta(name="other")))  # another kind
        assert store.snapshot().objects(PODS) is first
        _relabel(store, "p00007", "x")
        later = store.snapshot().objects(PODS)
        assert later is not first
        assert [o.metadata.name for o in later] == [o.metadata.name for o in first]
        assert later[7].metadata.labels == {"v": "x"}
        assert first[7].metadata.labels == {}
        _check_chunks(later)


def test_a_snapshot_read_after_later_writes_sees_the_state_it_was_taken_at() -> None:
    with Store() as store:
        for i in range(40):
            store.create(_pod(f"p{i:02d}"))
        store.snapshot().objects(PODS)  # a view the next ones are built from
        _relabel(store, "p03", "1")
        taken = store.snapshot()  # not read yet
        store.delete(PODS, "p05")
        store.create(_pod("p99"))
        names = [o.metadata.name for o in taken.objects(PODS)]
        assert names == [f"p{i:02d}" for i in range(40)]
        assert taken.get(PODS, "p03").metadata.labels == {"v": "1"}  # type: ignore[union-attr]
        now = [o.metadata.name for o in store.snapshot().objects(PODS)]
        assert now == [*(f"p{i:02d}" for i in range(40) if i != 5), "p99"]


def test_objects_of_one_namespace_are_those_in_it_in_name_order() -> None:
    with Store() as store:
        for namespace in ("a", "ab", "b", "a-1"):
            for name in ("y", "x"):
                store.create(_pod(name, namespace))
        snapshot = store.snapshot()
        found = snapshot.objects(PODS, namespace="a")
        assert [(o.metadata.namespace, o.metadata.name) for o in found] == [("a", "x"), ("a", "y")]
        assert snapshot.objects(PODS, namespace="zz") == ()
