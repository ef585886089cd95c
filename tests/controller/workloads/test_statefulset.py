"""The StatefulSet decision function: names, order, scale-down, replacement, updates."""

from __future__ import annotations

from typing import Any

from apis.apps import StatefulSet
from apis.core import Pod
from controller.workloads.statefulset import plan_stateful_set, revision
from tests.controller.workloads.objects import NOW, pod, running, workload


def stateful_set(**spec: Any) -> StatefulSet:
    sts = workload("StatefulSet", "db", serviceName="db-headless", **spec)
    assert isinstance(sts, StatefulSet)
    return sts


def member(sts: StatefulSet, ordinal: int, *, ready: bool = True, stale: bool = False) -> Pod:
    labels = {"controller-revision-hash": "db-old" if stale else revision(sts)}
    name = f"db-{ordinal}"
    if ready:
        return running(name, sts, labels=labels)
    return pod(name, sts, node="node-0", labels=labels)


def names(objects: list[Any]) -> list[str]:
    return [o.metadata.name for o in objects]


def test_ordered_ready_creates_one_pod_at_a_time() -> None:
    sts = stateful_set(replicas=3)
    plan = plan_stateful_set(sts, [], NOW)
    assert names(plan.create) == ["db-0"]
    [first] = plan.create
    assert isinstance(first, Pod)
    assert first.metadata.labels == {
        "app": "web",
        "controller-revision-hash": revision(sts),
        "statefulset.kubernetes.io/pod-name": "db-0",
        "apps.kubernetes.io/pod-index": "0",
    }
    assert (first.spec.hostname, first.spec.subdomain) == ("db-0", "db-headless")
    # db-0 exists but is not ready: nothing more.
    assert plan_stateful_set(sts, [member(sts, 0, ready=False)], NOW).create == []
    # Ready: db-1 next.
    assert names(plan_stateful_set(sts, [member(sts, 0)], NOW).create) == ["db-1"]


def test_parallel_creates_every_pod_at_once() -> None:
    sts = stateful_set(replicas=3, podManagementPolicy="Parallel")
    assert names(plan_stateful_set(sts, [], NOW).create) == ["db-0", "db-1", "db-2"]


def test_ordinals_start_where_asked() -> None:
    sts = stateful_set(replicas=2, ordinals={"start": 5}, podManagementPolicy="Parallel")
    assert names(plan_stateful_set(sts, [], NOW).create) == ["db-5", "db-6"]


def test_a_missing_pod_is_created_under_its_name() -> None:
    sts = stateful_set(replicas=3)
    plan = plan_stateful_set(sts, [member(sts, 0), member(sts, 2)], NOW)
    assert names(plan.create) == ["db-1"]


def test_an_ended_pod_is_deleted_to_be_created_again() -> None:
    sts = stateful_set(replicas=2)
    failed = pod("db-0", sts, node="node-0", phase="Failed")
    plan = plan_stateful_set(sts, [failed, member(sts, 1)], NOW)
    assert names(plan.delete) == ["db-0"]
    assert plan.create == []


def test_scale_down_removes_the_highest_ordinal_first() -> None:
    sts = stateful_set(replicas=1)
    pods = [member(sts, 0), member(sts, 1), member(sts, 2)]
    assert names(plan_stateful_set(sts, pods, NOW).delete) == ["db-2"]
    parallel = stateful_set(replicas=1, podManagementPolicy="Parallel")
    pods = [member(parallel, 0), member(parallel, 1), member(parallel, 2)]
    assert names(plan_stateful_set(parallel, pods, NOW).delete) == ["db-2", "db-1"]


def test_scale_down_waits_for_unready_pods() -> None:
    sts = stateful_set(replicas=1)
    pods = [member(sts, 0, ready=False), member(sts, 1)]
    assert plan_stateful_set(sts, pods, NOW).delete == []


def test_rolling_update_replaces_the_highest_stale_pod_above_the_partition() -> None:
    sts = stateful_set(replicas=3)
    pods = [member(sts, i, stale=True) for i in range(3)]
    assert names(plan_stateful_set(sts, pods, NOW).delete) == ["db-2"]
    partitioned = stateful_set(replicas=3, updateStrategy={"rollingUpdate": {"partition": 2}})
    pods = [member(partitioned, 0, stale=True), member(partitioned, 1, stale=True)]
    pods.append(member(partitioned, 2))
    assert plan_stateful_set(partitioned, pods, NOW).delete == []
    on_delete = stateful_set(replicas=3, updateStrategy={"type": "OnDelete"})
    pods = [member(on_delete, i, stale=True) for i in range(3)]
    assert plan_stateful_set(on_delete, pods, NOW).delete == []


def test_status_reports_revisions() -> None:
    sts = stateful_set(replicas=2)
    pods = [member(sts, 0, stale=True), member(sts, 1)]
    [written] = plan_stateful_set(sts, pods, NOW).update
    assert isinstance(written, StatefulSet)
    status = written.status
    assert (status.replicas, status.ready_replicas, status.available_replicas) == (2, 2, 2)
    assert status.updated_replicas == 1
    assert status.update_revision == revision(sts)
    assert status.observed_generation == 1
