"""Snapshots that know what changed: Snapshot.changes, derived results updated from an earlier
view, and views built from the one before (KindView.updated) equal to views built anew."""

from __future__ import annotations

import random

import msgspec

from apis.core import ConfigMap, Pod
from apis.kinds import default_registry
from apis.meta import Object, ObjectMeta
from controller.snapshots import LINEAGE_DEPTH, MAX_LAYERS, Change, KindView
from controller.store import Store

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


def _names(objects: tuple[Object, ...]) -> tuple[str, ...]:
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

    def compute(objects: tuple[Object, ...]) -> tuple[str, ...]:
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


def _objects(rng: random.Random, count: int) -> dict[tuple[str, str], Object]:
    return {
        (f"ns-{rng.randrange(3)}", f"cm-{rng.randrange(count * 3):05d}"): ConfigMap(
            metadata=ObjectMeta(name=str(i))
        )
        for i in range(count)
    }


def test_views_updated_from_the_one_before_equal_views_built_anew() -> None:
    rng = random.Random(18)
    objects = _objects(rng, 200)
    view = KindView.build(objects)
    order = sorted(objects)
    for _ in range(3 * MAX_LAYERS):
        changed = set()
        for _ in range(rng.randrange(1, 12)):
            key = (f"ns-{rng.randrange(3)}", f"cm-{rng.randrange(600):05d}")
            changed.add(key)
            if key in objects and rng.random() < 0.4:
                del objects[key]
            else:
                objects[key] = ConfigMap(metadata=ObjectMeta(name=f"{key[1]}-{rng.random()}"))
        order = KindView.sorted_keys(order, objects, changed)
        assert order == sorted(objects)
        view = KindView.updated(view, objects, order, changed)
        fresh = KindView.build(objects)
        assert view.items == fresh.items
        assert dict(view.index) == objects
        assert len(view.index) == len(objects)
        assert all(view.index.get(key) is obj for key, obj in objects.items())
        assert all(view.index.get(key) is None for key in changed - objects.keys())
