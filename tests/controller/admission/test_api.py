"""Admission over the API, as ``koordpy apply`` meets it in ``koordpy up``: a refused object
comes back in its place with the field and value named, the others of the request are
stored, and nothing of the refused one is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apis import constants as k
from apis.core import Pod
from apis.quota import ElasticQuota
from controller import errors
from controller.api.client import Applied, AsyncClient
from controller.api.server import ApiServer
from controller.store.sqlite import Store
from tests.controller.admission.helpers import pod, priority_class, quota


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Store, AsyncClient]]:
    async with (
        Store(path=tmp_path / "state.db") as store,
        ApiServer(store, f"unix://{tmp_path}/run/api.sock", grace=0.1) as server,
        AsyncClient(server.address, timeout=10) as client,
    ):
        yield store, client


async def test_a_refused_quota_is_reported_in_its_place(
    api: tuple[Store, AsyncClient],
) -> None:
    store, client = api
    results = await client.apply(
        [
            quota("dept", is_parent=True, min={"cpu": 10}, max={"cpu": 40}),
            quota("team", parent="dept", min={"cpu": 20}, max={"cpu": 40}),
            quota("other", parent="dept", min={"cpu": 5}, max={"cpu": 40}),
        ]
    )
    assert isinstance(results[0], Applied)
    assert isinstance(results[2], Applied)
    refused = results[1]
    assert isinstance(refused, errors.Invalid)
    assert str(refused).startswith(
        'ElasticQuota.scheduling.sigs.k8s.io "team" is invalid: spec.min: Invalid value:'
    )
    assert (refused.field, refused.value) == ("spec.min", "cpu:20")
    kind = store.registry.for_type(ElasticQuota)
    assert sorted(q.metadata.name for q in (await client.list(kind))[0]) == ["dept", "other"]


async def test_a_pod_gets_its_priority_and_an_unknown_class_is_refused(
    api: tuple[Store, AsyncClient],
) -> None:
    store, client = api
    results = await client.apply(
        [
            priority_class("gold", 1000),
            pod("web", priorityClassName="gold"),
            pod("lost", priorityClassName="silver"),
            pod("parented", labels={k.LABEL_QUOTA_NAME: k.QUOTA_ROOT}),
        ]
    )
    web = results[1]
    assert isinstance(web, Applied)
    assert isinstance(web.object, Pod)
    assert web.object.spec.priority == 1000
    lost = results[2]
    assert isinstance(lost, errors.Invalid)
    assert str(lost) == 'pods "lost" is forbidden: no PriorityClass with name silver was found'
    assert isinstance(results[3], errors.Invalid)
    kind = store.registry.for_type(Pod)
    assert [p.metadata.name for p in (await client.list(kind))[0]] == ["web"]
