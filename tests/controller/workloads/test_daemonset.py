"""The DaemonSet decision function: which nodes, the pinned pods, updates, status."""

from __future__ import annotations

from typing import Any

from apis.apps import DaemonSet
from apis.codec import decode_object
from apis.core import Node, Pod
from controller.workloads.common import template_hash
from controller.workloads.daemonset import pinned_affinity, plan_daemon_set, should_run
from tests.controller.workloads.objects import NOW, pod, running, workload


def daemon_set(**template_spec: Any) -> DaemonSet:
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "agent:1"}], **template_spec},
    }
    ds = workload("DaemonSet", "agent", template=template)
    assert isinstance(ds, DaemonSet)
    return ds


def node(name: str, *, labels: dict[str, str] | None = None, taints: Any = ()) -> Node:
    obj = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": list(taints)},
        }
    )
    assert isinstance(obj, Node)
    return obj


def on(name: str, ds: DaemonSet, node_name: str, *, stale: bool = False, ready: bool = True) -> Pod:
    labels = {"controller-revision-hash": "old" if stale else template_hash(ds.spec.template)}
    if ready:
        return running(name, ds, node=node_name, labels=labels)
    return pod(name, ds, node=node_name, labels=labels)


def test_taints_selectors_and_affinity_decide_the_nodes() -> None:
    plain = daemon_set().spec.template.spec
    gpu = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    soft = {"key": "dedicated", "value": "gpu", "effect": "PreferNoSchedule"}
    assert should_run(plain, node("a"))
    assert not should_run(plain, node("a", taints=[gpu]))
    assert should_run(plain, node("a", taints=[soft]))
    # The tolerations every daemon pod gets cover the node-condition taints.
    cordoned = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
    assert should_run(plain, node("a", taints=[cordoned, not_ready]))
    tolerant = daemon_set(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert should_run(tolerant.spec.template.spec, node("a", taints=[gpu]))
    selecting = daemon_set(nodeSelector={"pool": "edge"}).spec.template.spec
    assert not should_run(selecting, node("a"))
    assert should_run(selecting, node("a", labels={"pool": "edge"}))
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                ]
            }
        }
    }
    affine = daemon_set(affinity=affinity).spec.template.spec
    assert should_run(affine, node("a", labels={"zone": "z1"}))
    assert not should_run(affine, node("a", labels={"zone": "z2"}))


def test_new_pods_are_pinned_to_their_node() -> None:
    ds = daemon_set(hostNetwork=True)
    plan = plan_daemon_set(ds, [], [node("a"), node("b")], NOW)
    assert len(plan.create) == 2
    targets: list[str] = []
    for new in plan.create:
        assert isinstance(new, Pod)
        assert new.metadata.generate_name == "agent-"
        assert new.metadata.labels["pod-template-generation"] == "1"
        assert new.metadata.labels["controller-revision-hash"] == template_hash(ds.spec.template)
        affinity = new.spec.affinity
        assert affinity is not None
        assert affinity.node_affinity is not None
        required = affinity.node_affinity.required_during_scheduling_ignored_during_execution
        assert required is not None
        [term] = required.node_selector_terms
        [field] = term.match_fields
        targets.extend(field.values)
        keys = {(t.key, t.operator, t.effect) for t in new.spec.tolerations}
        assert ("node.kubernetes.io/network-unavailable", "Exists", "NoSchedule") in keys
        assert len(new.spec.tolerations) == 7
    assert sorted(targets) == ["a", "b"]


def test_pinning_replaces_required_terms_and_keeps_the_rest() -> None:
    affinity = daemon_set(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]},
                    }
                ],
            }
        }
    ).spec.template.spec.affinity
    pinned = pinned_affinity(affinity, "node-7")
    assert pinned.node_affinity is not None
    required = pinned.node_affinity.required_during_scheduling_ignored_during_execution
    assert required is not None
    [term] = required.node_selector_terms
    assert term.match_expressions == ()
    assert [(f.key, f.values) for f in term.match_fields] == [("metadata.name", ("node-7",))]
    assert len(pinned.node_affinity.preferred_during_scheduling_ignored_during_execution) == 1


def test_pods_where_they_do_not_belong_are_deleted() -> None:
    ds = daemon_set(nodeSelector={"pool": "edge"})
    edge = node("edge", labels={"pool": "edge"})
    pods = [
        on("agent-1", ds, "edge"),
        on("agent-2", ds, "edge"),  # a second one on the same node
        on("agent-3", ds, "plain"),  # a node that should not run it
        on("agent-4", ds, "gone"),  # a node that no longer exists
    ]
    plan = plan_daemon_set(ds, pods, [edge, node("plain")], NOW)
    assert sorted(p.metadata.name for p in plan.delete) == ["agent-2", "agent-3", "agent-4"]
    assert plan.create == []
    [written] = plan.update
    assert isinstance(written, DaemonSet)
    status = written.status
    assert (status.desired_number_scheduled, status.current_number_scheduled) == (1, 1)
    assert status.number_misscheduled == 1


def test_a_rolling_update_replaces_max_unavailable_pods_at_a_time() -> None:
    ds = daemon_set()
    nodes = [node("a"), node("b"), node("c")]
    pods = [on(f"agent-{n}", ds, n, stale=True) for n in "abc"]
    plan = plan_daemon_set(ds, pods, nodes, NOW)
    assert len(plan.delete) == 1
    # One node already without an available pod: nothing more goes.
    pods[0] = on("agent-a", ds, "a", stale=True, ready=False)
    plan = plan_daemon_set(ds, pods, nodes, NOW)
    assert [p.metadata.name for p in plan.delete] == ["agent-a"]  # an unavailable stale pod may go


def test_status_counts_nodes() -> None:
    ds = daemon_set()
    nodes = [node("a"), node("b")]
    pods = [on("agent-a", ds, "a"), on("agent-b", ds, "b", ready=False)]
    [written] = plan_daemon_set(ds, pods, nodes, NOW).update
    assert isinstance(written, DaemonSet)
    status = written.status
    assert (status.desired_number_scheduled, status.number_ready) == (2, 1)
    assert (status.number_available, status.number_unavailable) == (1, 1)
    assert status.updated_number_scheduled == 2
