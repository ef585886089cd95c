"""The status a quota object is given (§4.1): ``status.used`` and the JSON annotations, written
only when an amount moved."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from apis import codec
from apis import constants as k
from apis.quota import ElasticQuota, ElasticQuotaStatus
from apis.resources import ResourceList
from controller.quota.status import encode_resources, quota_status, read_resources
from tests.controller.quota.builders import GI, quota, res
from tests.crdschema import schema_errors, validator


def shown(q: ElasticQuota, key: str) -> object:
    return json.loads(q.metadata.annotations[key])


def team() -> ElasticQuota:
    return quota("team", min=res(cpu=2000), max=res(cpu=8000, memory=16))


def test_the_figures_are_written_as_sorted_wire_quantities(shared_dir: Path) -> None:
    updated = quota_status(
        team(),
        used=res(cpu=1500, memory=2),
        runtime=res(cpu=4000, memory=8),
        request=ResourceList({"memory": 4 * GI, "cpu": 6000, "nvidia.com/gpu": 0}),
        child_request=res(cpu=6000),
        non_preemptible_used=res(cpu=500),
    )
    assert updated is not None
    notes = updated.metadata.annotations
    assert notes[k.ANNOTATION_QUOTA_RUNTIME] == '{"cpu":"4","memory":"8Gi"}'
    assert notes[k.ANNOTATION_QUOTA_REQUEST] == '{"cpu":"6","memory":"4Gi","nvidia.com/gpu":"0"}'
    assert shown(updated, k.ANNOTATION_QUOTA_CHILD_REQUEST) == {"cpu": "6"}
    assert shown(updated, k.ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED) == {"cpu": "500m"}
    assert updated.status.used == res(cpu=1500, memory=2)
    assert updated.spec == team().spec
    document = json.loads(codec.encode_json(updated))
    assert document["status"] == {"used": {"cpu": "1500m", "memory": "2Gi"}}
    schema = validator(shared_dir, "scheduling.sigs.k8s.io/ElasticQuota")
    assert schema_errors(schema, document) == []


def test_a_figure_not_given_leaves_its_annotation_alone() -> None:
    before = quota_status(
        team(), used=res(), runtime=res(cpu=1), request=res(cpu=1), child_request=res(cpu=1)
    )
    assert before is not None
    after = quota_status(before, used=res(), runtime=res(cpu=2), request=res(cpu=2))
    assert after is not None
    assert shown(after, k.ANNOTATION_QUOTA_CHILD_REQUEST) == {"cpu": "1m"}
    assert k.ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED not in after.metadata.annotations


@pytest.mark.parametrize(
    ("used", "runtime", "requested", "changed"),
    [
        (res(cpu=1000), res(cpu=4000), res(cpu=6000), False),
        (ResourceList({"cpu": 1000, "memory": 0}), res(cpu=4000), res(cpu=6000), False),
        (res(cpu=1000), ResourceList({"cpu": 4000, "nvidia.com/gpu": 0}), res(cpu=6000), False),
        (res(cpu=2000), res(cpu=4000), res(cpu=6000), True),
        (res(cpu=1000), res(cpu=5000), res(cpu=6000), True),
        (res(cpu=1000), res(cpu=4000), res(cpu=6000, memory=1), True),
    ],
    ids=[
        "same figures",
        "a zero used amount",
        "a zero runtime amount",
        "used moved",
        "runtime moved",
        "request gained a resource",
    ],
)
def test_nothing_is_written_unless_an_amount_moved(
    used: ResourceList, runtime: ResourceList, requested: ResourceList, changed: bool
) -> None:
    current = quota_status(team(), used=res(cpu=1000), runtime=res(cpu=4000), request=res(cpu=6000))
    assert current is not None
    again = quota_status(current, used=used, runtime=runtime, request=requested)
    assert (again is not None) == changed


def test_an_unreadable_annotation_is_rewritten() -> None:
    broken = msgspec.structs.replace(
        team(),
        metadata=msgspec.structs.replace(
            team().metadata, annotations={k.ANNOTATION_QUOTA_RUNTIME: "{not json"}
        ),
        status=ElasticQuotaStatus(used=res(cpu=1)),
    )
    updated = quota_status(broken, used=res(cpu=1), runtime=res(cpu=3000), request=res())
    assert updated is not None
    assert shown(updated, k.ANNOTATION_QUOTA_RUNTIME) == {"cpu": "3"}
    assert shown(updated, k.ANNOTATION_QUOTA_REQUEST) == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("[]", None),
        ('{"cpu": "x"}', None),
        ('{"memory": "1Gi", "cpu": "250m"}', ResourceList({"cpu": 250, "memory": GI})),
    ],
)
def test_read_resources(text: str, expected: ResourceList | None) -> None:
    assert read_resources(text) == expected


def test_encode_and_read_agree() -> None:
    amounts = res(cpu=2500, memory=3, **{"nvidia.com/gpu": 2})
    assert read_resources(encode_resources(amounts)) == amounts
