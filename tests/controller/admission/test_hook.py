"""The admission seam: the table, the order plugins run in, and the store calling it inside
the write's transaction (controller.admission.chain, controller.store)."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from apis.core import Pod
from apis.meta import Object
from apis.quota import ElasticQuota
from apis.validation import invalid
from controller import admission
from controller.admission import ForbiddenError, InvalidError, Lookup, Registration, elasticquota
from controller.api.groupcommit import GroupCommit
from controller.errors import Forbidden, Invalid
from controller.store.cluster import Outcome
from controller.store.sqlite import Store
from tests.controller.admission.helpers import pod, priority_class, quota


def test_the_table_names_each_plugin_once_mutating_ones_first() -> None:
    names = [entry.name for entry in admission.PLUGINS]
    assert len(names) == len(set(names))
    pod_plugins = admission.plugins_for(Pod)
    assert pod_plugins[:2] == tuple(
        admission.PLUGINS[names.index(name)].plugin for name in ("PodDefaults", "Priority")
    )
    assert admission.plugins_for(ElasticQuota)[0] is elasticquota.admit_quota_defaults


def _label(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    meta = msgspec.structs.replace(obj.metadata, labels={**obj.metadata.labels, "seen": "yes"})
    return msgspec.structs.replace(obj, metadata=meta)


def _needs_label(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    if obj.metadata.labels.get("seen") != "yes":
        raise InvalidError(invalid("metadata.labels", "", "not labelled first"))
    return obj


def _deny(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    raise ForbiddenError("no writes today", field="metadata.name", value=obj.metadata.name)


def test_each_plugin_sees_what_the_one_before_returned() -> None:
    table = (
        Registration("Label", (Pod,), _label),
        Registration("NeedsLabel", (Pod,), _needs_label),
    )
    store = Store()
    kind = store.registry.for_type(Pod)
    admitted = admission.admit(kind, pod("web"), None, store, table)
    assert admitted.metadata.labels == {"seen": "yes"}
    with pytest.raises(Invalid, match="not labelled first"):
        admission.admit(kind, pod("web"), None, store, table[1:])


def test_a_denied_write_is_forbidden_naming_the_field_and_value() -> None:
    store = Store()
    kind = store.registry.for_type(Pod)
    table = (Registration("Deny", (Pod,), _deny),)
    with pytest.raises(Forbidden) as caught:
        admission.admit(kind, pod("web"), None, store, table)
    assert str(caught.value) == 'pods "web" is forbidden: no writes today'
    assert (caught.value.field, caught.value.value) == ("metadata.name", "web")
    assert admission.admit(kind, quota("q"), None, store, table) == quota("q")


def test_a_refused_object_in_a_batch_is_reported_in_its_place_and_the_others_stay() -> None:
    store = Store()
    results = store.apply_many(
        [
            quota("dept", is_parent=True),
            quota("team", parent="missing"),
            pod("web", priorityClassName="nowhere"),
            pod("ok"),
        ]
    )
    assert isinstance(results[1], Invalid)
    assert isinstance(results[2], Forbidden)
    assert [r[1] for r in (results[0], results[3]) if not isinstance(r, Exception)] == [
        Outcome.CREATED,
        Outcome.CREATED,
    ]
    names = {o.metadata.name for o in store.snapshot().objects(store.registry.for_type(Pod))}
    assert names == {"ok"}
    assert not store.exists(store.registry.for_type(ElasticQuota), "team", "default")


def test_a_refused_update_leaves_the_stored_object_as_it_was() -> None:
    store = Store()
    saved = store.apply(quota("dept", is_parent=True))[0]
    with pytest.raises(Invalid):
        store.update(quota("dept", is_parent=False))
    assert store.get(store.registry.for_type(ElasticQuota), "dept", "default") == saved


def test_a_control_loop_write_goes_through_admission_in_a_group_commit() -> None:
    async def run() -> tuple[object, object]:
        store = Store()
        store.apply(priority_class("gold", 1000))
        commits = GroupCommit(store)
        ok = commits.submit(lambda s: s.create(pod("a", priorityClassName="gold")))
        bad = commits.submit(lambda s: s.create(pod("b", priorityClassName="silver")))
        results = await asyncio.gather(ok, bad, return_exceptions=True)
        await commits.aclose()
        store.close()
        return results[0], results[1]

    created, refused = asyncio.run(run())
    assert isinstance(created, Pod)
    assert created.spec.priority == 1000
    assert isinstance(refused, Forbidden)
