"""The Deployment decision function: its ReplicaSets, the two strategies, history, status."""

from __future__ import annotations

from typing import Any

import msgspec

from apis.apps import Deployment, ReplicaSet, ReplicaSetStatus
from controller.workloads.common import template_hash
from controller.workloads.deployment import plan_deployment
from tests.controller.workloads.objects import NOW, workload

replace = msgspec.structs.replace


def deployment(**spec: Any) -> Deployment:
    deploy = workload("Deployment", "web", **spec)
    assert isinstance(deploy, Deployment)
    return deploy


def first_replica_set(deploy: Deployment) -> ReplicaSet:
    [rs] = plan_deployment(deploy, [], NOW).create
    assert isinstance(rs, ReplicaSet)
    return replace(rs, metadata=replace(rs.metadata, uid=f"uid-{rs.metadata.name}", generation=1))


def settled(
    rs: ReplicaSet, replicas: int | None = None, available: int | None = None
) -> ReplicaSet:
    """``rs`` with ``replicas`` pods, ``available`` of them available (default: all)."""
    count = rs.spec.replicas if replicas is None else replicas
    assert count is not None
    ready = count if available is None else available
    status = ReplicaSetStatus(replicas=count, ready_replicas=ready, available_replicas=ready)
    return replace(rs, spec=replace(rs.spec, replicas=count), status=status)


def changed(deploy: Deployment, image: str) -> Deployment:
    template = deploy.spec.template
    container = replace(template.spec.containers[0], image=image)
    template = replace(template, spec=replace(template.spec, containers=(container,)))
    return replace(deploy, spec=replace(deploy.spec, template=template))


def test_the_first_replica_set_is_named_by_the_template_hash() -> None:
    deploy = deployment(replicas=3)
    rs = first_replica_set(deploy)
    digest = template_hash(deploy.spec.template)
    assert rs.metadata.name == f"web-{digest}"
    assert rs.metadata.labels == {"app": "web", "pod-template-hash": digest}
    assert rs.spec.replicas == 3
    assert rs.spec.selector is not None
    assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": digest}
    assert rs.spec.template.metadata.labels["pod-template-hash"] == digest
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    [ref] = rs.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller) == ("Deployment", "web", "uid-web", True)


def test_scaling_changes_only_the_current_replica_set() -> None:
    deploy = deployment(replicas=2)
    rs = settled(first_replica_set(deploy))
    bigger = replace(deploy, spec=replace(deploy.spec, replicas=5))
    plan = plan_deployment(bigger, [rs], NOW)
    scaled = [o for o in plan.update if isinstance(o, ReplicaSet)]
    assert [(o.metadata.name, o.spec.replicas) for o in scaled] == [(rs.metadata.name, 5)]
    assert plan.create == []


def test_a_replica_set_kubernetes_made_for_the_template_is_the_current_one() -> None:
    """On a cluster the ReplicaSet of the template carries Kubernetes' own hash: it is
    adopted as the current one (scaled), not replaced by one more (``simulate
    --from-cluster``)."""
    deploy = deployment(replicas=2)
    ours = settled(first_replica_set(deploy))
    theirs_hash = "5d8f7b9c6"
    template = ours.spec.template
    assert ours.spec.selector is not None
    labels = {**template.metadata.labels, "pod-template-hash": theirs_hash}
    theirs = replace(
        ours,
        metadata=replace(
            ours.metadata,
            name=f"web-{theirs_hash}",
            labels={**ours.metadata.labels, "pod-template-hash": theirs_hash},
        ),
        spec=replace(
            ours.spec,
            selector=replace(ours.spec.selector, match_labels=labels),
            template=replace(template, metadata=replace(template.metadata, labels=labels)),
        ),
    )
    bigger = replace(deploy, spec=replace(deploy.spec, replicas=3))
    plan = plan_deployment(bigger, [theirs], NOW)
    assert plan.create == []
    scaled = [o for o in plan.update if isinstance(o, ReplicaSet)]
    assert [(o.metadata.name, o.spec.replicas) for o in scaled] == [(f"web-{theirs_hash}", 3)]
    # another template is another ReplicaSet, whatever its hash
    other = plan_deployment(changed(bigger, "nginx:2"), [theirs], NOW)
    assert len(other.create) == 1


def test_recreate_scales_old_sets_to_zero_before_the_new_one_grows() -> None:
    deploy = deployment(replicas=2, strategy={"type": "Recreate"})
    old = settled(first_replica_set(deploy))
    new_deploy = changed(deploy, "nginx:1.28")
    plan = plan_deployment(new_deploy, [old], NOW)
    [new] = plan.create
    assert isinstance(new, ReplicaSet)
    assert new.spec.replicas == 0
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    [scaled] = [o for o in plan.update if isinstance(o, ReplicaSet)]
    assert (scaled.metadata.name, scaled.spec.replicas) == (old.metadata.name, 0)
    # Old set at 0 but its pods not gone yet: the new one still waits.
    draining = settled(old, replicas=0)
    draining = replace(draining, status=replace(draining.status, replicas=1))
    new = replace(new, metadata=replace(new.metadata, uid="uid-new"))
    plan = plan_deployment(new_deploy, [draining, new], NOW)
    assert not [o for o in plan.update if isinstance(o, ReplicaSet)]
    # Gone: the new set is scaled up.
    plan = plan_deployment(new_deploy, [settled(old, replicas=0), new], NOW)
    [grown] = [o for o in plan.update if isinstance(o, ReplicaSet)]
    assert (grown.metadata.name, grown.spec.replicas) == (new.metadata.name, 2)


def test_rolling_update_surges_then_scales_down_within_bounds() -> None:
    strategy = {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    deploy = deployment(replicas=4, strategy=strategy)
    old = settled(first_replica_set(deploy))
    new_deploy = changed(deploy, "nginx:1.28")
    [new] = plan_deployment(new_deploy, [old], NOW).create
    assert isinstance(new, ReplicaSet)
    assert new.spec.replicas == 1  # 4 + 1 surge - 4 old
    new = settled(replace(new, metadata=replace(new.metadata, uid="uid-new")), available=0)
    plan = plan_deployment(new_deploy, [old, new], NOW)
    assert not [o for o in plan.update if isinstance(o, ReplicaSet)]  # nothing available to lose
    new = settled(new)  # the surge pod is available: one old pod may go
    plan = plan_deployment(new_deploy, [old, new], NOW)
    [scaled] = [o for o in plan.update if isinstance(o, ReplicaSet)]
    assert (scaled.metadata.name, scaled.spec.replicas) == (old.metadata.name, 3)


def test_rolling_update_defaults_are_a_quarter_each_way() -> None:
    deploy = deployment(replicas=8)
    old = settled(first_replica_set(deploy))
    new_deploy = changed(deploy, "nginx:1.28")
    [new] = plan_deployment(new_deploy, [old], NOW).create
    assert isinstance(new, ReplicaSet)
    assert new.spec.replicas == 2  # maxSurge 25 % of 8
    new = settled(replace(new, metadata=replace(new.metadata, uid="uid-new")), available=0)
    plan = plan_deployment(new_deploy, [old, new], NOW)
    [scaled] = [o for o in plan.update if isinstance(o, ReplicaSet)]
    assert scaled.spec.replicas == 6  # 8 available may drop to 6 (maxUnavailable 25 %)


def test_old_replica_sets_beyond_the_history_limit_are_deleted() -> None:
    deploy = deployment(replicas=1, revisionHistoryLimit=1)
    current = settled(first_replica_set(deploy))
    olds = []
    for revision in (1, 2, 3):
        rs = replace(
            current,
            metadata=replace(
                current.metadata,
                name=f"web-old{revision}",
                uid=f"uid-old{revision}",
                labels={"app": "web", "pod-template-hash": f"old{revision}"},
                annotations={"deployment.kubernetes.io/revision": str(revision)},
            ),
        )
        olds.append(settled(rs, replicas=0))
    plan = plan_deployment(deploy, [*olds, current], NOW)
    assert sorted(o.metadata.name for o in plan.delete) == ["web-old1", "web-old2"]


def test_a_paused_deployment_only_reports() -> None:
    deploy = deployment(replicas=2)
    old = settled(first_replica_set(deploy))
    paused = changed(replace(deploy, spec=replace(deploy.spec, paused=True)), "nginx:1.28")
    plan = plan_deployment(paused, [old], NOW)
    assert plan.create == []
    assert plan.delete == []
    assert [o.kind for o in plan.update] == ["Deployment"]


def test_status_sums_the_replica_sets() -> None:
    deploy = deployment(replicas=3)
    rs = settled(first_replica_set(deploy), available=2)
    [written] = plan_deployment(deploy, [rs], NOW).update
    assert isinstance(written, Deployment)
    status = written.status
    assert (status.replicas, status.updated_replicas) == (3, 3)
    assert (status.ready_replicas, status.available_replicas) == (2, 2)
    assert status.unavailable_replicas == 1
    conditions = {c.type: (c.status, c.reason) for c in status.conditions}
    assert conditions == {
        "Available": ("False", "MinimumReplicasUnavailable"),  # 25 % of 3 rounds down to 0
        "Progressing": ("True", "ReplicaSetUpdated"),
    }
    # Once written, the same inputs write nothing again.
    assert plan_deployment(written, [rs], NOW).update == []


def test_available_allows_max_unavailable_pods_missing() -> None:
    deploy = deployment(replicas=4)
    rs = settled(first_replica_set(deploy), available=3)
    [written] = plan_deployment(deploy, [rs], NOW).update
    assert isinstance(written, Deployment)
    conditions = {c.type: (c.status, c.reason) for c in written.status.conditions}
    assert conditions["Available"] == ("True", "MinimumReplicasAvailable")  # 3 >= 4 - 1
    complete = settled(rs)
    [done] = plan_deployment(written, [complete], NOW).update
    assert isinstance(done, Deployment)
    progressing = next(c for c in done.status.conditions if c.type == "Progressing")
    assert progressing.reason == "NewReplicaSetAvailable"
    assert progressing.message == f'ReplicaSet "{rs.metadata.name}" has successfully progressed.'
