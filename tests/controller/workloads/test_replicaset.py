"""The ReplicaSet decision function and the pod ranking it scales down by."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec

from apis.apps import ReplicaSet
from apis.core import Pod
from controller.workloads.common import deletion_order, owned_by, template_hash
from controller.workloads.replicaset import plan_replica_set
from tests.controller.workloads.objects import NOW, pod, running, workload


def replica_set(**spec: Any) -> ReplicaSet:
    rs = workload("ReplicaSet", "web-abc", **spec)
    assert isinstance(rs, ReplicaSet)
    return rs


def test_missing_pods_are_created_from_the_template() -> None:
    rs = replica_set(replicas=3)
    plan = plan_replica_set(rs, [running("web-abc-aaaaa", rs)], NOW)
    assert len(plan.create) == 2
    for new in plan.create:
        assert isinstance(new, Pod)
        assert new.metadata.name == ""
        assert new.metadata.generate_name == "web-abc-"
        assert new.metadata.labels == {"app": "web"}
        assert owned_by(new, rs)
        [ref] = new.metadata.owner_references
        assert (ref.kind, ref.block_owner_deletion) == ("ReplicaSet", True)
        assert new.spec.containers[0].image == "nginx:1.27"
        assert new.status.phase == "Pending"
    assert plan.delete == []


def test_replicas_default_to_one() -> None:
    rs = replica_set()
    assert len(plan_replica_set(rs, [], NOW).create) == 1


def test_ended_and_deleting_pods_do_not_count() -> None:
    rs = replica_set(replicas=2)
    failed = pod("web-abc-fffff", rs, node="node-0", phase="Failed")
    done = pod("web-abc-sssss", rs, node="node-0", phase="Succeeded")
    going = running("web-abc-ddddd", rs)
    going = msgspec.structs.replace(
        going, metadata=msgspec.structs.replace(going.metadata, deletion_timestamp=NOW)
    )
    plan = plan_replica_set(rs, [failed, done, going], NOW)
    assert len(plan.create) == 2
    assert plan.delete == []  # ended pods stay, as Kubernetes leaves them


def test_scale_down_deletes_the_lowest_ranked_pods() -> None:
    rs = replica_set(replicas=1)
    pods = [running("web-abc-old", rs), pod("web-abc-pending", rs), running("web-abc-new", rs)]
    plan = plan_replica_set(rs, pods, NOW)
    assert {p.metadata.name for p in plan.delete} == {"web-abc-pending", "web-abc-new"}


def test_deletion_order_follows_kubernetes_ranking() -> None:
    unscheduled = pod("unscheduled", created=timedelta(hours=5))
    pending = pod("pending", node="node-0")
    unknown = pod("unknown", node="node-0", phase="Unknown")
    not_ready = pod("not-ready", node="node-0", phase="Running")
    cheap = running("cheap", annotations={"controller.kubernetes.io/pod-deletion-cost": "-10"})
    recently_ready = running("recently-ready", ready_for=timedelta(seconds=30))
    newer = running("newer", created=timedelta(minutes=1))
    older = running("older", created=timedelta(hours=2))
    shuffled = [older, newer, cheap, recently_ready, not_ready, unknown, pending, unscheduled]
    assert [p.metadata.name for p in deletion_order(shuffled)] == [
        "unscheduled",
        "pending",
        "unknown",
        "not-ready",
        "cheap",
        "recently-ready",
        "newer",
        "older",
    ]


def test_status_counts_ready_and_available_pods() -> None:
    rs = replica_set(replicas=3, minReadySeconds=60)
    pods = [
        running("web-abc-a", rs, ready_for=timedelta(minutes=5)),
        running("web-abc-b", rs, ready_for=timedelta(seconds=20)),
        pod("web-abc-c", rs, labels={"app": "other"}),
    ]
    plan = plan_replica_set(rs, pods, NOW)
    [written] = plan.update
    assert isinstance(written, ReplicaSet)
    status = written.status
    assert (status.replicas, status.ready_replicas, status.available_replicas) == (3, 2, 1)
    assert status.fully_labeled_replicas == 2
    assert status.observed_generation == 1
    assert plan.wake_at == NOW + timedelta(seconds=40)  # web-abc-b becomes available then


def test_an_unchanged_status_is_not_written() -> None:
    rs = replica_set(replicas=1)
    pods = [running("web-abc-a", rs)]
    first = plan_replica_set(rs, pods, NOW)
    [written] = first.update
    assert isinstance(written, ReplicaSet)
    again = plan_replica_set(written, pods, NOW)
    assert again.update == []
    assert again.create == []
    assert again.delete == []


def test_template_hash_is_stable_and_tracks_the_template() -> None:
    rs = replica_set()
    same = replica_set()
    assert template_hash(rs.spec.template) == template_hash(same.spec.template)
    other = msgspec.structs.replace(
        rs.spec.template,
        metadata=msgspec.structs.replace(
            rs.spec.template.metadata, labels={"app": "web", "v": "2"}
        ),
    )
    assert template_hash(other) != template_hash(rs.spec.template)
    assert len(template_hash(other)) == 10
