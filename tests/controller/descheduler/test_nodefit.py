"""Pod requests for node fit, and the cycle view's per-cycle memo of them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.core import Container, Pod, ResourceRequirements, pod_requests
from apis.resources import ResourceList
from controller.descheduler import nodefit
from controller.descheduler.framework import CycleView
from tests.controller.descheduler.conftest import GI, T0, make_node, make_pod


def _container(name: str, requests: dict[str, int], limits: dict[str, int]) -> Container:
    return Container(
        name=name,
        resources=ResourceRequirements(
            requests=ResourceList(requests), limits=ResourceList(limits)
        ),
    )


def _with(pod: Pod, **spec: Any) -> Pod:
    return msgspec.structs.replace(pod, spec=msgspec.structs.replace(pod.spec, **spec))


BASE = make_pod("p", cpu=500, memory=GI)


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(BASE, id="one container, requests only"),
        pytest.param(make_pod("p"), id="no requests"),
        pytest.param(_with(BASE, containers=()), id="no containers"),
        pytest.param(
            _with(BASE, containers=(_container("a", {"cpu": 100}, {"cpu": 200, "memory": GI}),)),
            id="a limit stands in for a missing request",
        ),
        pytest.param(
            _with(
                BASE,
                containers=(
                    _container("a", {"memory": GI}, {}),
                    _container("b", {"cpu": 300}, {"nvidia.com/gpu": 1}),
                ),
            ),
            id="containers summed",
        ),
        pytest.param(
            _with(BASE, init_containers=(_container("init", {"cpu": 4000}, {}),)),
            id="init container peak",
        ),
        pytest.param(_with(BASE, overhead=ResourceList({"cpu": 50})), id="overhead"),
        pytest.param(
            _with(
                BASE,
                resources=ResourceRequirements(requests=ResourceList({"memory": 3 * GI})),
            ),
            id="pod-level resources",
        ),
    ],
)
def test_request_of_is_pod_requests(pod: Pod) -> None:
    request = nodefit.request_of(pod)
    assert request == dict(pod_requests(pod))
    assert list(request) == list(pod_requests(pod))  # names in order


AMOUNTS = st.dictionaries(
    st.sampled_from(["cpu", "memory", "example.com/dongle"]), st.integers(-5, 10_000), max_size=3
)


@given(st.lists(st.tuples(AMOUNTS, AMOUNTS), max_size=3))
def test_request_of_matches_pod_requests_for_any_containers(
    containers: list[tuple[dict[str, int], dict[str, int]]],
) -> None:
    pod = _with(
        BASE,
        containers=tuple(
            _container(f"c{i}", requests, limits) for i, (requests, limits) in enumerate(containers)
        ),
    )
    assert nodefit.request_of(pod) == dict(pod_requests(pod))


#: Amounts around 0, so that a single negative one among many is common.
NEAR_ZERO = st.dictionaries(
    st.sampled_from(["cpu", "memory", "example.com/dongle"]), st.integers(-2, 3), max_size=2
)


@settings(max_examples=300)
@given(
    st.lists(st.tuples(NEAR_ZERO, NEAR_ZERO), max_size=3),
    st.lists(st.tuples(NEAR_ZERO, NEAR_ZERO), max_size=2),
    NEAR_ZERO,
    st.tuples(NEAR_ZERO, NEAR_ZERO),
)
def test_a_negative_effective_request_is_never_missed(
    containers: list[tuple[dict[str, int], dict[str, int]]],
    init: list[tuple[dict[str, int], dict[str, int]]],
    overhead: dict[str, int],
    pod_level: tuple[dict[str, int], dict[str, int]],
) -> None:
    # asks_less_than_nothing is False only for pods whose every given amount is >= 0, and
    # then the effective request has no negative amount
    pod = _with(
        BASE,
        containers=tuple(_container(f"c{i}", r, lim) for i, (r, lim) in enumerate(containers)),
        init_containers=tuple(_container(f"i{i}", r, lim) for i, (r, lim) in enumerate(init)),
        overhead=ResourceList(overhead),
        resources=ResourceRequirements(
            requests=ResourceList(pod_level[0]), limits=ResourceList(pod_level[1])
        ),
    )
    given_amounts = [
        *overhead.values(),
        *pod_level[0].values(),
        *pod_level[1].values(),
        *(v for r, lim in (*containers, *init) for v in (*r.values(), *lim.values())),
    ]
    assert nodefit.asks_less_than_nothing(pod) == any(v < 0 for v in given_amounts)
    if not nodefit.asks_less_than_nothing(pod):
        assert all(v >= 0 for v in nodefit.request_of(pod).values())


def test_request_of_returns_a_new_dict() -> None:
    first = nodefit.request_of(BASE)
    first["cpu"] = 0
    assert nodefit.request_of(BASE)["cpu"] == 500


def test_requested_sums_with_the_given_request() -> None:
    pods = [make_pod("a", cpu=100), make_pod("b", cpu=200, memory=GI)]
    assert nodefit.requested(pods) == {"pods": 2, "cpu": 300, "memory": GI}
    assert nodefit.requested(pods, lambda pod: {"cpu": 1}) == {"pods": 2, "cpu": 2}


def test_fits_takes_a_known_request() -> None:
    node = make_node("n", cpu=1000)
    pod = make_pod("p", cpu=800)
    assert nodefit.fits(pod, node)
    assert not nodefit.fits(pod, node, request={"cpu": 1200})
    assert nodefit.fits(pod, node, used={"cpu": 900}, request={"cpu": 100})


def _view(pods: list[Pod]) -> CycleView:
    return CycleView(now=T0, nodes=(make_node("node-a"),), pods_by_node={"node-a": tuple(pods)})


def test_view_works_out_a_request_once_per_pod() -> None:
    pod = make_pod("a", cpu=100)
    view = _view([pod])
    first = view.request_of(pod)
    assert first == {"cpu": 100}
    assert view.request_of(pod) is first
    twin = make_pod("a", cpu=300)  # another object, even with the same name
    assert view.request_of(twin) == {"cpu": 300}
    assert _view([pod]).request_of(pod) is not first  # a new view, a new memo


def test_view_sums_the_requests_on_a_node_once() -> None:
    pods = [make_pod("a", cpu=100), make_pod("b", cpu=200, memory=GI)]
    view = _view(pods)
    used = view.requested_on("node-a")
    assert used == nodefit.requested(pods)
    assert view.requested_on("node-a") is used
    assert view.requested_on("elsewhere") == {"pods": 0}


@pytest.mark.parametrize(
    ("direct_nodes", "holds"),
    [(None, False), (frozenset({"node-a"}), False), (frozenset({"node-b"}), True)],
)
def test_view_says_where_the_filter_holds(direct_nodes: frozenset[str] | None, holds: bool) -> None:
    view = CycleView(now=T0, nodes=(), pods_by_node={}, direct_nodes=direct_nodes)
    assert view.filter_holds_on("node-a") is holds


def test_a_view_takes_the_request_of_the_cycle_before_for_the_same_pod_object() -> None:
    web = make_pod("web", cpu=500, memory=GI)
    first = CycleView(now=T0, nodes=(), pods_by_node={})
    assert first.request_of(web) == {"cpu": 500, "memory": GI}
    carried = first.requests_asked()
    assert carried == {id(web): (web, {"cpu": 500, "memory": GI})}
    # the next cycle: the same pod object gets the very dict, an equal new object its own
    second = CycleView(now=T0, nodes=(), pods_by_node={}, requests_before=carried)
    assert second.request_of(web) is carried[id(web)][1]
    again = msgspec.structs.replace(web)
    assert again == web
    assert again is not web
    assert second.request_of(again) is not carried[id(web)][1]
    assert second.request_of(again) == {"cpu": 500, "memory": GI}
