"""The descheduler's pod groupings (by node, by controller, by scheduler) after pods changed:
updated from the groupings of the pods' previous view, they equal the groupings worked out
anew."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.core import Pod
from apis.kinds import Kind
from controller.descheduler.loop import _group_pods, _PodGroups, _regroup
from controller.store.snapshots import LINEAGE_DEPTH
from controller.store.sqlite import Store
from tests.controller.descheduler.conftest import make_pod, replicaset

NAMES = [f"p{i}" for i in range(12)]
NODES = ["", "node-a", "node-b", "node-c"]
OWNERS = [None, "rs-1", "rs-2"]
SCHEDULERS = ["koord-scheduler", "default-scheduler"]
PHASES = ["Running", "Pending", "Succeeded", "Failed"]


def pod(name: str, node: str, owner: str | None, scheduler: str, phase: str) -> Pod:
    made = make_pod(
        name,
        node=node,
        namespace="team-b" if name.endswith("1") else "default",
        owner=replicaset(owner) if owner is not None else None,
        scheduler=scheduler,
        phase=phase,
    )
    # the store gives the uid (applied again, the pod keeps the stored one)
    return msgspec.structs.replace(made, metadata=msgspec.structs.replace(made.metadata, uid=""))


pods = st.builds(
    pod,
    st.sampled_from(NAMES),
    st.sampled_from(NODES),
    st.sampled_from(OWNERS),
    st.sampled_from(SCHEDULERS),
    st.sampled_from(PHASES),
)
#: ("put", pod) or ("delete", name)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), pods),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
    ),
    max_size=12,
)


def plain(groups: _PodGroups) -> dict[str, Any]:
    return {
        "by_node": {node: list(p) for node, p in groups.by_node.items()},
        "by_workload": {uid: list(p) for uid, p in groups.by_workload.items()},
        "nodes_by_scheduler": dict(groups.nodes_by_scheduler),
    }


def apply(
    store: Store, kind: Kind, step: tuple[str, Any], model: dict[tuple[str, str], Any]
) -> None:
    """One step on the store, and on ``model`` (key -> the stored object) alike."""
    action, what = step
    if action == "put":
        saved, _ = store.apply(what)
        model[saved.metadata.namespace, saved.metadata.name] = saved
        return
    namespace = "team-b" if what.endswith("1") else "default"
    if store.exists(kind, what, namespace):
        store.delete(kind, what, namespace)
        del model[namespace, what]


@settings(max_examples=150, deadline=None)
@given(st.lists(pods, max_size=12), st.lists(steps, min_size=1, max_size=4))
def test_groupings_updated_from_the_last_view_equal_those_worked_out_anew(
    initial: list[Pod], rounds: list[list[tuple[str, Any]]]
) -> None:
    with Store() as store:
        kind = store.registry.for_type(Pod)
        model: dict[tuple[str, str], Any] = {}
        for p in initial:
            apply(store, kind, ("put", p), model)
        store.snapshot().derived(kind, _group_pods, _regroup)
        for steps_of_round in rounds:
            for step in steps_of_round:
                apply(store, kind, step, model)
            snapshot = store.snapshot()
            # the view itself, built from the last one where only pods changed in place
            viewed = snapshot.objects(kind)
            assert [(p.metadata.namespace, p.metadata.name) for p in viewed] == sorted(model)
            assert all(p is model[p.metadata.namespace, p.metadata.name] for p in viewed)
            updated = snapshot.derived(kind, _group_pods, _regroup)
            anew = _group_pods(snapshot.objects(kind))
            assert plain(updated) == plain(anew)


def test_a_change_leaves_the_lists_of_other_nodes_and_controllers_as_they_were() -> None:
    with Store() as store:
        kind = store.registry.for_type(Pod)
        store.apply(pod("p0", "node-a", "rs-1", "koord-scheduler", "Running"))
        store.apply(pod("p2", "node-b", "rs-2", "koord-scheduler", "Running"))
        before = store.snapshot().derived(kind, _group_pods, _regroup)
        store.apply(pod("p3", "node-b", "rs-2", "default-scheduler", "Running"))
        after = store.snapshot().derived(kind, _group_pods, _regroup)
        assert after.by_node["node-a"] is before.by_node["node-a"]
        assert after.by_workload["uid-rs-1"] is before.by_workload["uid-rs-1"]
        assert [p.metadata.name for p in after.by_node["node-b"]] == ["p2", "p3"]
        assert after.nodes_by_scheduler == {
            "koord-scheduler": frozenset({"node-a", "node-b"}),
            "default-scheduler": frozenset({"node-b"}),
        }


def test_groupings_are_updated_from_an_earlier_view_or_worked_out_anew_past_it() -> None:
    calls: list[int] = []

    def regroup(before: _PodGroups, changes: Any) -> _PodGroups:
        calls.append(len(changes))
        return _regroup(before, changes)

    with Store() as store:
        kind = store.registry.for_type(Pod)
        store.apply(pod("p0", "node-a", "rs-1", "koord-scheduler", "Running"))
        store.snapshot().derived(kind, _group_pods, regroup)  # the first view: anew
        assert calls == []
        store.apply(pod("p2", "node-b", "rs-2", "koord-scheduler", "Running"))
        store.snapshot().derived(kind, _group_pods, regroup)
        assert calls == [1]
        store.apply(pod("p3", "node-b", "rs-2", "koord-scheduler", "Running"))
        store.snapshot().objects(kind)  # a view built, its groupings never asked for
        store.apply(pod("p4", "node-b", "rs-2", "koord-scheduler", "Running"))
        groups = store.snapshot().derived(kind, _group_pods, regroup)
        assert calls == [1, 2]  # from the view before the last: p3 and p4 came since
        assert [p.metadata.name for p in groups.by_node["node-b"]] == ["p2", "p3", "p4"]
        for number in range(5, 6 + LINEAGE_DEPTH):
            store.apply(pod(f"p{number}", "node-b", "rs-2", "koord-scheduler", "Running"))
            store.snapshot().objects(kind)  # views whose groupings nobody asks for
        groups = store.snapshot().derived(kind, _group_pods, regroup)
        assert calls == [1, 2]  # further back than a view keeps: worked out anew
        assert len(groups.by_node["node-b"]) == 4 + LINEAGE_DEPTH
