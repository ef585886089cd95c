"""The runtime quota of the ElasticQuota tree (controller-spec §4.2, §4.3): requests bottom
up, water filling top down, min scaling, shared weights and lending."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.quota import ElasticQuota
from apis.resources import ResourceList
from controller.quota.check import QuotaIndex
from controller.quota.tree import (
    QuotaTree,
    RuntimeQuota,
    largest_remainder,
    share_level,
    shared_weight,
)
from tests.controller.quota.builders import quota, res

# --- one level, one resource -------------------------------------------------------------------

#: §4.3's worked example: A, B, C, D share 100 units.
MINS = (20, 15, 10, 10)
REQUESTS = [15, 20, 40, 40]
WEIGHTS = (100, 60, 50, 80)


@pytest.mark.parametrize(
    ("total", "mins", "requests", "weights", "lends", "expected"),
    [
        (100, MINS, REQUESTS, WEIGHTS, (True,) * 4, [15, 20, 27, 38]),
        (100, MINS, REQUESTS, WEIGHTS, (False, True, True, True), [20, 20, 25, 35]),
        (30, (20, 20), [30, 30], (1, 1), (True, True), [15, 15]),
        (100, (10, 10), [5, 7], (1, 1), (True, True), [5, 7]),
        (100, (10, 10), [5, 7], (1, 1), (False, False), [10, 10]),
        (10, (0, 0, 0), [10, 10, 10], (1, 1, 1), (True,) * 3, [4, 3, 3]),
        (10, (0, 0), [10, 10], (0, 0), (True, True), [5, 5]),
        (10, (0, 0), [10, 10], (0, 3), (True, True), [0, 10]),
        (0, (5, 5), [10, 10], (1, 1), (True, True), [0, 0]),
        (50, (40, 40), [100, 100], (1, 1), (True, True), [25, 25]),
    ],
    ids=[
        "worked example: 15/20/27/38",
        "worked example, A does not lend: A keeps 20, 45 shared",
        "min scaling: 30 cpu, two children min 20 => 15 each",
        "requests below min: lent, runtime = request",
        "requests below min, no lending: runtime = min",
        "ties of the remainder go to the first name",
        "all weights zero: an equal split",
        "a zero weight gets nothing while others hunger",
        "nothing to share",
        "min scaling at the level of the total",
    ],
)
def test_share_level(
    total: int,
    mins: tuple[int, ...],
    requests: list[int],
    weights: tuple[int, ...],
    lends: tuple[bool, ...],
    expected: list[int],
) -> None:
    got = share_level(total, mins=mins, requests=requests, weights=weights, lends=lends)
    assert got == expected


def test_without_min_scaling_the_mins_may_add_up_above_the_total() -> None:
    got = share_level(
        30, mins=(20, 20), requests=[30, 30], weights=(1, 1), lends=(True, True), scale_min=False
    )
    assert got == [20, 20]


@pytest.mark.parametrize(
    ("amount", "weights", "expected"),
    [
        (50, [60, 50, 80], [16, 13, 21]),
        (11, [50, 80], [4, 7]),
        (3, [1, 1, 1, 1], [1, 1, 1, 0]),
        (7, [0, 1], [0, 7]),
        # 128-bit sized amounts stay exact.
        (2**70 + 1, [2**64, 2**64], [2**69 + 1, 2**69]),
    ],
)
def test_largest_remainder(amount: int, weights: list[int], expected: list[int]) -> None:
    assert largest_remainder(amount, weights) == expected
    assert sum(largest_remainder(amount, weights)) == amount


# --- the tree ----------------------------------------------------------------------------------


def weighted(q: ElasticQuota, weight: str | None) -> ElasticQuota:
    if weight is None:
        return q
    annotations = {**q.metadata.annotations, k.ANNOTATION_QUOTA_SHARED_WEIGHT: weight}
    return msgspec.structs.replace(
        q, metadata=msgspec.structs.replace(q.metadata, annotations=annotations)
    )


def not_lending(q: ElasticQuota) -> ElasticQuota:
    labels = {**q.metadata.labels, k.LABEL_QUOTA_ALLOW_LENT_RESOURCE: "false"}
    return msgspec.structs.replace(q, metadata=msgspec.structs.replace(q.metadata, labels=labels))


def cpu_weight(cpu: int) -> str:
    return json.dumps({"cpu": str(cpu)})


def example_tree(*, a_lends: bool = True) -> list[ElasticQuota]:
    """The worked example as quotas (its units are millicores; max 100 each) under ``dept``."""
    children = [
        weighted(quota(name, min=res(cpu=m), max=res(cpu=100), parent="dept"), w)
        for name, m, w in (
            ("a", 20, cpu_weight(100)),
            ("b", 15, cpu_weight(60)),
            ("c", 10, cpu_weight(50)),
            ("d", 10, cpu_weight(80)),
        )
    ]
    if not a_lends:
        children[0] = not_lending(children[0])
    return [quota("dept", max=res(cpu=100), is_parent=True), *children]


EXAMPLE_REQUESTS = {"a": res(cpu=15), "b": res(cpu=20), "c": res(cpu=40), "d": res(cpu=40)}


def runtime_of(
    quotas: list[ElasticQuota],
    requests: dict[str, ResourceList],
    total: ResourceList,
    *,
    scale: bool = True,
) -> RuntimeQuota:
    tree = QuotaTree.build(QuotaIndex.build(quotas), enable_min_quota_scale=scale)
    return tree.runtime(requests, total)


def cpus(runtime: RuntimeQuota, *names: str) -> list[int]:
    """Millicores of each quota's runtime."""
    return [runtime.of(name).get_amount("cpu") for name in names]


def test_the_worked_example_one_level_down() -> None:
    runtime = runtime_of(example_tree(), EXAMPLE_REQUESTS, res(cpu=100))
    assert cpus(runtime, "dept", "a", "b", "c", "d") == [100, 15, 20, 27, 38]
    assert runtime.child_request["dept"] == ResourceList({"cpu": 115, "memory": 0})
    assert runtime.request["dept"] == ResourceList({"cpu": 100, "memory": 0})  # capped at max


def test_a_quota_that_does_not_lend_asks_its_parent_for_its_min() -> None:
    # a asks for 15 but holds 20: dept's request counts a's whole min.
    runtime = runtime_of(example_tree(a_lends=False), EXAMPLE_REQUESTS, res(cpu=100))
    assert cpus(runtime, "a", "b", "c", "d") == [20, 20, 25, 35]
    assert runtime.request["a"] == ResourceList({"cpu": 20, "memory": 0})
    assert runtime.child_request["dept"] == ResourceList({"cpu": 120, "memory": 0})


def test_min_scaling_example() -> None:
    quotas = [
        quota("p", min=res(cpu=30_000), max=res(cpu=100_000), is_parent=True),
        quota("x", parent="p", min=res(cpu=20_000), max=res(cpu=100_000)),
        quota("y", parent="p", min=res(cpu=20_000), max=res(cpu=100_000)),
    ]
    requests = {"x": res(cpu=40_000), "y": res(cpu=40_000)}
    assert cpus(runtime_of(quotas, requests, res(cpu=30_000)), "p", "x", "y") == [
        30_000,
        15_000,
        15_000,
    ]
    unscaled = runtime_of(quotas, requests, res(cpu=30_000), scale=False)
    assert cpus(unscaled, "x", "y") == [20_000, 20_000]


def test_the_root_shares_the_total_and_builtins_stay_outside() -> None:
    quotas = [quota("a", max=res(cpu=8_000, memory=8)), quota("b", max=res(cpu=8_000))]
    requests = {
        "a": res(cpu=8_000, memory=2),
        "b": res(cpu=8_000, memory=100),  # memory outside b's max: not capped, not shown
        k.QUOTA_DEFAULT: res(cpu=1_000),
    }
    runtime = runtime_of(quotas, requests, res(cpu=10_000, memory=4))
    assert runtime.runtime[k.QUOTA_ROOT] == res(cpu=10_000, memory=4)
    assert runtime.of("a") == res(cpu=5_000, memory=2)
    assert runtime.of("b") == res(cpu=5_000)
    default = QuotaIndex.build(()).by_name[k.QUOTA_DEFAULT].spec.max
    assert runtime.of(k.QUOTA_DEFAULT) == default
    assert runtime.of(k.QUOTA_SYSTEM) == default
    assert runtime.request[k.QUOTA_DEFAULT] == ResourceList({"cpu": 1_000, "memory": 0})
    assert runtime.of("no-such-quota") == ResourceList()


def test_each_resource_is_shared_on_its_own() -> None:
    gpu = "nvidia.com/gpu"
    quotas = [
        quota("a", max=res(cpu=8_000, **{gpu: 8})),
        quota("b", max=res(cpu=8_000, **{gpu: 8})),
    ]
    requests = {"a": res(cpu=8_000, **{gpu: 1}), "b": res(cpu=1_000, **{gpu: 8})}
    runtime = runtime_of(quotas, requests, res(cpu=6_000, **{gpu: 6}))
    assert runtime.of("a") == res(cpu=5_000, **{gpu: 1})
    assert runtime.of("b") == res(cpu=1_000, **{gpu: 5})


def test_a_quota_the_root_cannot_reach_keeps_its_max() -> None:
    quotas = [
        quota("lost", parent="missing", max=res(cpu=3_000)),
        quota("x", parent="y", max=res(cpu=1_000)),
        quota("y", parent="x", max=res(cpu=2_000)),
    ]
    runtime = runtime_of(quotas, {"lost": res(cpu=9_000)}, res(cpu=1_000))
    assert [runtime.of(n) for n in ("lost", "x", "y")] == [
        res(cpu=3_000),
        res(cpu=1_000),
        res(cpu=2_000),
    ]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (None, res(cpu=4_000, memory=8)),
        ('{"cpu": "2"}', res(cpu=2_000, memory=8)),
        ('{"cpu": "0", "memory": "1Gi"}', res(cpu=4_000, memory=1)),
        ("not json", res(cpu=4_000, memory=8)),
        ('["cpu"]', res(cpu=4_000, memory=8)),
        ('{"cpu": "lots"}', res(cpu=4_000, memory=8)),
    ],
    ids=["missing", "one resource", "zero means max", "invalid", "not an object", "bad quantity"],
)
def test_shared_weight(annotation: str | None, expected: ResourceList) -> None:
    q = weighted(quota("q", max=res(cpu=4_000, memory=8)), annotation)
    assert shared_weight(q) == expected


def test_shared_weight_decides_who_gets_more() -> None:
    quotas = [
        weighted(quota("a", max=res(cpu=100_000)), cpu_weight(1)),
        weighted(quota("b", max=res(cpu=100_000)), cpu_weight(3)),
    ]
    requests = {"a": res(cpu=100_000), "b": res(cpu=100_000)}
    assert cpus(runtime_of(quotas, requests, res(cpu=40_000)), "a", "b") == [10_000, 30_000]


UNBOUNDED = 10**9

# --- properties --------------------------------------------------------------------------------


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[ElasticQuota], dict[str, ResourceList], int]:
    """Up to nine quotas in up to three levels, one resource (cpu, in whole units)."""
    count = draw(st.integers(1, 9))
    quotas: list[ElasticQuota] = []
    parents: list[str] = [""]
    requests: dict[str, ResourceList] = {}
    for i in range(count):
        name = f"q{i}"
        parent = draw(st.sampled_from(parents))
        q = quota(
            name,
            parent=parent,
            min=res(cpu=draw(st.integers(0, 50))),
            max=res(cpu=draw(st.integers(0, 120))),
        )
        q = weighted(q, draw(st.sampled_from([None, cpu_weight(1), cpu_weight(7), "{}"])))
        if draw(st.booleans()):
            q = not_lending(q)
        quotas.append(q)
        if draw(st.booleans()):
            parents.append(name)
        requests[name] = res(cpu=draw(st.integers(0, 150)))
    # Parents hold no pods of their own.
    leaves = {n: r for n, r in requests.items() if n not in parents}
    return quotas, leaves, draw(st.integers(0, 300))


@settings(max_examples=300, deadline=None)
@given(case=trees(), scale=st.booleans())
def test_runtime_properties(
    case: tuple[list[ElasticQuota], dict[str, ResourceList], int], scale: bool
) -> None:
    quotas, requests, total = case
    index = QuotaIndex.build(quotas)
    runtime = QuotaTree.build(index, enable_min_quota_scale=scale).runtime(requests, res(cpu=total))
    amount = {name: r.get_amount("cpu") for name, r in runtime.runtime.items()}
    for parent in [k.QUOTA_ROOT, *(q.name for q in quotas)]:
        kids = [
            c for c in index.children.get(parent, ()) if c not in (k.QUOTA_SYSTEM, k.QUOTA_DEFAULT)
        ]
        if not kids:
            continue
        mins = {c: index.by_name[c].spec.min.get_amount("cpu") for c in kids}
        # A max without cpu does not cap it.
        caps = {c: index.by_name[c].spec.max.get("cpu", UNBOUNDED) for c in kids}
        room = amount[parent]
        # The effective min: min capped at max, scaled when the mins do not fit.
        floors = {c: min(mins[c], caps[c]) for c in kids}
        if scale and sum(floors.values()) > room:
            whole = sum(floors.values())
            floors = {c: room * f // whole if room > 0 else 0 for c, f in floors.items()}
        if sum(mins.values()) <= room:
            assert sum(amount[c] for c in kids) <= room
        for c in kids:
            child = index.by_name[c]
            lends = child.metadata.labels.get(k.LABEL_QUOTA_ALLOW_LENT_RESOURCE) != "false"
            asked = (
                runtime.child_request[c].get_amount("cpu")
                if c in runtime.child_request
                else requests.get(c, ResourceList()).get_amount("cpu")
            )
            request = min(asked, caps[c])
            assert amount[c] <= caps[c]
            assert amount[c] >= min(request, floors[c])
            if request <= floors[c]:
                assert amount[c] == (request if lends else floors[c])
            else:
                assert amount[c] <= request
