"""SchedulingHint: hard node lists, preferred nodes tried in order, malformed hints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import numpy as np
import pytest

from apis import constants as k
from apis.core import Event, Node, Pod
from controller.errors import ConfigError
from controller.loops import LoopContext
from controller.scheduler import framework as fw
from controller.scheduler.cycle import schedule_one
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.plugins.schedulinghint import SchedulingHintArgs, SchedulingHintPlugin
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import (
    PLUGINS,
    PluginConfig,
    ProfileConfig,
    WeightedPlugin,
    build_profile,
    default_profile,
)
from controller.scheduler.schedulinghint import HintError, parse_scheduling_hint
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, make_node, make_pod

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def _hinted(name: str, hint: object, *, cpu: int = 1000, key: str = "") -> Pod:
    pod = make_pod(name, cpu=cpu, memory=GI)
    text = hint if isinstance(hint, str) else json.dumps(hint)
    annotations = {key or k.ANNOTATION_SCHEDULING_HINT: text}
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations)
    )


def _nodes() -> list[Node]:
    # n4 is the emptiest: without a hint LeastAllocated picks it.
    return [
        make_node("n1", cpu=2000, memory=4 * GI),
        make_node("n2", cpu=2000, memory=4 * GI),
        make_node("n3", cpu=2000, memory=4 * GI, labels={"zone": "b"}),
        make_node("n4", cpu=8000, memory=16 * GI),
    ]


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(clock=lambda: NOW) as opened:
        for node in _nodes():
            opened.create(node)
        yield opened


def _run(store: Store) -> None:
    SchedulerLoop().reconcile(LoopContext(store=store, now=lambda: NOW))


def _node_of(store: Store, name: str) -> str:
    pod = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(pod, Pod)
    return pod.spec.node_name


@pytest.mark.parametrize(
    ("hint", "busy", "expected"),
    [
        # The first preferred node that passes every filter wins over better-scored ones.
        ({"preferredNodeNames": ["n2", "n1"]}, (), "n2"),
        # n2 is full: the next preferred node is taken.
        ({"preferredNodeNames": ["n2", "n1"]}, ("n2",), "n1"),
        # A preferred node that does not exist is passed over.
        ({"preferredNodeNames": ["gone", "n3"]}, (), "n3"),
        # None feasible: normal scheduling over every node (LeastAllocated: n4).
        ({"preferredNodeNames": ["n2"]}, ("n2",), "n4"),
        # nodeNames is hard: the pod goes to one of them, scored as usual.
        ({"nodeNames": ["n1", "n2"]}, ("n2",), "n1"),
        # Preferred nodes outside nodeNames are not tried.
        ({"nodeNames": ["n1", "n4"], "preferredNodeNames": ["n2", "n1"]}, (), "n1"),
        # No hint at all (empty nodeNames): plain scheduling.
        ({"nodeNames": []}, (), "n4"),
    ],
)
def test_hinted_pods_land_where_the_hint_says(
    store: Store, hint: object, busy: tuple[str, ...], expected: str
) -> None:
    for node in busy:
        store.create(make_pod(f"busy-{node}", cpu=1800, node=node))
    store.create(_hinted("hinted", hint))
    _run(store)
    assert _node_of(store, "hinted") == expected


def test_the_deprecated_key_is_read_when_the_new_one_is_absent(store: Store) -> None:
    store.create(
        _hinted("old", {"preferredNodeNames": ["n3"]}, key=k.ANNOTATION_SCHEDULING_HINT_DEPRECATED)
    )
    _run(store)
    assert _node_of(store, "old") == "n3"


def test_a_hard_node_list_that_fits_nowhere_explains_the_excluded_nodes(store: Store) -> None:
    store.create(make_pod("busy", cpu=1800, node="n1"))
    store.create(_hinted("hinted", {"nodeNames": ["n1"]}))
    _run(store)
    pod = store.get(store.registry.for_type(Pod), "hinted", "default")
    assert isinstance(pod, Pod)
    assert pod.spec.node_name == ""
    (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert condition.message.startswith(
        "0/4 nodes are available: 1 Insufficient cpu, "
        "3 node(s) didn't satisfy plugin(s) [SchedulingHint]."
    )


def test_a_malformed_hint_leaves_the_pod_pending_with_an_event_quoting_the_error(
    store: Store,
) -> None:
    store.create(_hinted("broken", '{"nodeNames": ["n1"'))
    _run(store)
    assert _node_of(store, "broken") == ""
    events = [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]
    (event,) = events
    assert (event.type, event.reason, event.involved_object.name) == (
        "Warning",
        "FailedScheduling",
        "broken",
    )
    error = parse_scheduling_hint({k.ANNOTATION_SCHEDULING_HINT: '{"nodeNames": ["n1"'})
    assert isinstance(error, HintError)
    assert event.message == error.message == "Input data was truncated"


def test_nothing_is_held_for_a_pod_on_its_preferred_node() -> None:
    table = NodeTable(_nodes())
    profile = default_profile()
    pod = PodInfo.of(_hinted("hinted", {"preferredNodeNames": ["n1"]}), table)
    decision = schedule_one(profile, table, pod)
    assert decision.node == "n1"
    # The table holds exactly the pod's own request on n1, nothing more.
    row = table.index["n1"]
    assert int(table.requested[row, 0]) == 1000
    assert table.accounted == 1


def test_max_hint_nodes_cuts_the_list_before_anything_is_dropped() -> None:
    config = ProfileConfig(
        pre_filter=("SchedulingHint",),
        filter=("NodeResourcesFit",),
        score=(WeightedPlugin(name="NodeResourcesFit"),),
        plugin_config=(PluginConfig(name="SchedulingHint", args={"maxHintNodes": 1}),),
    )
    profile = build_profile(config)
    table = NodeTable(_nodes())
    table.add_pod(make_pod("busy", cpu=1800, node="n2"))
    pod = PodInfo.of(_hinted("hinted", {"preferredNodeNames": ["n2", "n1"]}), table)
    # Only n2 is tried (and fails): normal scheduling picks the emptiest node.
    assert schedule_one(profile, table, pod).node == "n4"


def test_args_refuse_a_non_positive_max_hint_nodes() -> None:
    with pytest.raises(ConfigError, match="maxHintNodes"):
        SchedulingHintArgs(max_hint_nodes=0)
    assert PLUGINS["SchedulingHint"].args is SchedulingHintArgs


def test_pre_filter_narrows_to_the_named_nodes_only() -> None:
    table = NodeTable(_nodes())
    plugin = SchedulingHintPlugin(SchedulingHintArgs())
    pod = PodInfo.of(_hinted("hinted", {"nodeNames": ["n3", "elsewhere"]}), table)
    answer = plugin.pre_filter(fw.CycleState(), pod, table)
    assert isinstance(answer, fw.NodeSubset)
    assert list(np.flatnonzero(answer.rows)) == [table.index["n3"]]
