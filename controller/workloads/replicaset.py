"""The ``replicasets`` control loop: a ReplicaSet keeps ``spec.replicas`` active pods.

Pods are the ones whose controller reference is the ReplicaSet; an active pod has not ended and
is not being deleted. Fewer than wanted: new pods named ``<replicaset>-<5 letters>``
(``generateName``) from the template, with a controller reference (``blockOwnerDeletion``).
More than wanted: the first of :func:`~controller.workloads.common.deletion_order` are deleted.
A pod that is deleted, or ends (an evicted pod that failed), is so replaced. Status:
``replicas`` (active pods), ``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas``
(ready for ``minReadySeconds``), ``observedGeneration``. Events: ``SuccessfulCreate`` "Created
pod: <name>", ``SuccessfulDelete`` "Deleted pod: <name>", ``FailedCreate``/``FailedDelete``
(:class:`~controller.workloads.common.WorkloadLoop`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from apis.apps import ReplicaSet, ReplicaSetStatus
from apis.core import Pod
from apis.meta import Object
from controller.store.cluster import Cluster
from controller.store.snapshots import Snapshot
from controller.workloads.common import (
    Plan,
    WorkloadLoop,
    active,
    available,
    available_at,
    deletion_order,
    is_ready,
    pod_from_template,
    pods_by_owner,
    regroup_by_owner,
)

__all__ = ["ReplicaSetController", "plan_replica_set", "replica_set_status"]


def replica_set_status(rs: ReplicaSet, pods: Sequence[Pod], now: datetime) -> ReplicaSetStatus:
    """The status of ``rs`` given its pods."""
    live = [p for p in pods if active(p)]
    wanted = rs.spec.template.metadata.labels
    min_ready = rs.spec.min_ready_seconds or 0
    return ReplicaSetStatus(
        replicas=len(live),
        fully_labeled_replicas=sum(
            1 for p in live if all(p.metadata.labels.get(k) == v for k, v in wanted.items())
        ),
        ready_replicas=sum(1 for p in live if is_ready(p)),
        available_replicas=sum(1 for p in live if available(p, min_ready, now)),
        observed_generation=rs.metadata.generation,
        conditions=rs.status.conditions,
    )


def plan_replica_set(rs: ReplicaSet, pods: Sequence[Pod], now: datetime) -> Plan:
    """What ``rs`` needs given the pods it controls (pure; see the module docstring)."""
    plan = Plan()
    live = [p for p in pods if active(p)]
    wanted = 1 if rs.spec.replicas is None else rs.spec.replicas
    if len(live) < wanted:
        plan.create.extend(
            pod_from_template(rs.spec.template, rs, generate_name=f"{rs.metadata.name}-")
            for _ in range(wanted - len(live))
        )
    elif len(live) > wanted:
        plan.delete.extend(deletion_order(live)[: len(live) - wanted])
    min_ready = rs.spec.min_ready_seconds or 0
    for pod in live:
        if is_ready(pod) and not available(pod, min_ready, now):
            plan.wake(available_at(pod, min_ready))
    plan.status(rs, replica_set_status(rs, pods, now))
    return plan


class ReplicaSetController(WorkloadLoop):
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "replicasets"
    component = "replicaset-controller"
    owner_type: ClassVar[type[Object]] = ReplicaSet

    def plan(self, owner: Object, snapshot: Snapshot, store: Cluster, now: datetime) -> Plan:
        assert isinstance(owner, ReplicaSet)
        owned = snapshot.derived(store.registry.for_type(Pod), pods_by_owner, regroup_by_owner)
        return plan_replica_set(owner, owned.get(owner.metadata.uid, ()), now)
