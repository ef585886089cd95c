"""The ``deployments`` control loop: a Deployment runs its template through ReplicaSets.

* The ReplicaSet of the current template is ``<deployment>-<hash>``, the hash a stable digest of
  ``spec.template`` (:func:`~controller.workloads.common.template_hash`), carried as the label
  ``pod-template-hash`` on the ReplicaSet, in its selector and in its template; it has a
  controller reference to the Deployment and the annotation ``deployment.kubernetes.io/revision``
  (one more than the newest revision so far).
* ``Recreate``: every older ReplicaSet is scaled to 0 first; the new one is scaled up once the
  old pods are gone.
* ``RollingUpdate`` (the default; ``maxSurge`` 25 % rounded up, ``maxUnavailable`` 25 % rounded
  down, 1 unavailable when both come to 0): a pass either scales the new ReplicaSet up, to at
  most ``replicas + maxSurge`` pods in all, or scales old ones down (their unavailable pods
  first, then oldest ReplicaSet first) while ``replicas - maxUnavailable`` pods stay available.
* Going back to an older template reuses its ReplicaSet, which takes the newest revision.
* A paused Deployment only reports. Old ReplicaSets scaled to 0 beyond
  ``revisionHistoryLimit`` (10) are deleted, oldest revision first.
* Events (about the Deployment): ``ScalingReplicaSet`` "Scaled up replica set <rs> from 0 to
  <n>" for a new ReplicaSet, "Scaled up|down replica set <rs> from <a> to <b>" for each change of
  a ReplicaSet's ``spec.replicas``.
* Status: ``replicas``, ``updatedReplicas``, ``readyReplicas``, ``availableReplicas``,
  ``unavailableReplicas`` (from the ReplicaSets' status), ``observedGeneration``, conditions
  ``Available`` and ``Progressing``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar, Final

import msgspec

from apis.apps import (
    RECREATE,
    Deployment,
    DeploymentStatus,
    ReplicaSet,
    ReplicaSetSpec,
    scaled_value,
)
from apis.core import PodTemplateSpec
from apis.meta import Condition, Object, ObjectMeta
from controller.store.cluster import Cluster
from controller.store.snapshots import Snapshot
from controller.workloads.common import (
    LABEL_POD_TEMPLATE_HASH,
    Note,
    Plan,
    WorkloadLoop,
    owner_reference,
    template_hash,
    with_selector_label,
)

__all__ = ["DeploymentController", "plan_deployment", "replica_sets_by_owner"]

replace = msgspec.structs.replace

ANNOTATION_REVISION: Final = "deployment.kubernetes.io/revision"
ANNOTATION_DESIRED_REPLICAS: Final = "deployment.kubernetes.io/desired-replicas"
ANNOTATION_MAX_REPLICAS: Final = "deployment.kubernetes.io/max-replicas"
DEFAULT_HISTORY: Final = 10
REASON_SCALING: Final = "ScalingReplicaSet"


def replica_sets_by_owner(objects: Sequence[Object]) -> Mapping[str, tuple[ReplicaSet, ...]]:
    """Controller uid -> the ReplicaSets it controls (snapshot-derived; never mutate it)."""
    grouped: dict[str, list[ReplicaSet]] = {}
    for obj in objects:
        if isinstance(obj, ReplicaSet):
            uid = next((r.uid for r in obj.metadata.owner_references if r.controller), "")
            if uid:
                grouped.setdefault(uid, []).append(obj)
    return {uid: tuple(sets) for uid, sets in grouped.items()}


def _revision(rs: ReplicaSet) -> int:
    try:
        return int(rs.metadata.annotations.get(ANNOTATION_REVISION, "0"))
    except ValueError:
        return 0


def _spec_replicas(rs: ReplicaSet) -> int:
    return 1 if rs.spec.replicas is None else rs.spec.replicas


def _limits(deploy: Deployment, desired: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as pod counts."""
    strategy = deploy.spec.strategy
    rolling = strategy.rolling_update if strategy is not None else None
    surge = scaled_value(
        rolling.max_surge if rolling else None, desired, round_up=True, default="25%"
    )
    unavailable = scaled_value(
        rolling.max_unavailable if rolling else None, desired, round_up=False, default="25%"
    )
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _new_replica_set(deploy: Deployment, digest: str, replicas: int, revision: int) -> ReplicaSet:
    template = deploy.spec.template
    labels = {**template.metadata.labels, LABEL_POD_TEMPLATE_HASH: digest}
    desired = 1 if deploy.spec.replicas is None else deploy.spec.replicas
    surge, _ = _limits(deploy, desired)
    return ReplicaSet(
        metadata=ObjectMeta(
            name=f"{deploy.metadata.name}-{digest}",
            namespace=deploy.metadata.namespace,
            labels=labels,
            annotations={
                ANNOTATION_REVISION: str(revision),
                ANNOTATION_DESIRED_REPLICAS: str(desired),
                ANNOTATION_MAX_REPLICAS: str(desired + surge),
            },
            owner_references=(owner_reference(deploy),),
        ),
        spec=ReplicaSetSpec(
            replicas=replicas,
            min_ready_seconds=deploy.spec.min_ready_seconds,
            selector=with_selector_label(deploy.spec.selector, LABEL_POD_TEMPLATE_HASH, digest),
            template=replace(template, metadata=replace(template.metadata, labels=labels)),
        ),
    )


def _rolling(
    desired: int, surge: int, unavailable: int, new: ReplicaSet, olds: Sequence[ReplicaSet]
) -> dict[str, int]:
    """New ``spec.replicas`` per ReplicaSet name for one rolling-update step."""
    scaled: dict[str, int] = {}
    new_spec = _spec_replicas(new)
    total = new_spec + sum(_spec_replicas(rs) for rs in olds)
    if new_spec < desired:
        up = min(desired + surge - total, desired - new_spec)
        if up > 0:
            scaled[new.metadata.name] = new_spec + up
            return scaled  # one step per pass: scale down once the new pods are counted
    elif new_spec > desired:
        scaled[new.metadata.name] = desired
    min_available = desired - unavailable
    new_unavailable = max(0, new_spec - new.status.available_replicas)
    room = total - min_available - new_unavailable
    if room <= 0:
        return scaled
    oldest_first = sorted(olds, key=lambda rs: (_revision(rs), rs.metadata.name))
    current = {rs.metadata.name: _spec_replicas(rs) for rs in oldest_first}
    for rs in oldest_first:  # old pods that are not available go first
        unhealthy = current[rs.metadata.name] - rs.status.available_replicas
        cut = min(max(0, unhealthy), room)
        if cut > 0:
            current[rs.metadata.name] -= cut
            room -= cut
    available_now = new.status.available_replicas + sum(
        min(rs.status.available_replicas, current[rs.metadata.name]) for rs in olds
    )
    budget = available_now - min_available
    for rs in oldest_first:
        cut = min(current[rs.metadata.name], max(0, budget))
        current[rs.metadata.name] -= cut
        budget -= cut
    for rs in olds:
        if current[rs.metadata.name] != _spec_replicas(rs):
            scaled[rs.metadata.name] = current[rs.metadata.name]
    return scaled


def _condition(
    previous: Sequence[Condition], type_: str, status: str, reason: str, message: str, now: datetime
) -> Condition:
    before = next((c for c in previous if c.type == type_), None)
    if before is not None and (before.status, before.reason, before.message) == (
        status,
        reason,
        message,
    ):
        return before
    changed = before is None or before.status != status
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_update_time=now,
        last_transition_time=now if changed or before is None else before.last_transition_time,
    )


def _status(
    deploy: Deployment,
    new: ReplicaSet | None,
    sets: Sequence[ReplicaSet],
    desired: int,
    unavailable_allowed: int,
    now: datetime,
) -> DeploymentStatus:
    replicas = sum(rs.status.replicas or 0 for rs in sets)
    ready = sum(rs.status.ready_replicas for rs in sets)
    available = sum(rs.status.available_replicas for rs in sets)
    updated = (new.status.replicas or 0) if new is not None else 0
    previous = deploy.status.conditions
    if available >= desired - unavailable_allowed:
        avail = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        avail = (
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
        )
    name = new.metadata.name if new is not None else deploy.metadata.name
    complete = (
        new is not None
        and updated == desired
        and replicas == desired
        and new.status.available_replicas == desired
    )
    if complete:
        progress = (
            "True",
            "NewReplicaSetAvailable",
            f'ReplicaSet "{name}" has successfully progressed.',
        )
    else:
        progress = ("True", "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.')
    return DeploymentStatus(
        observed_generation=deploy.metadata.generation,
        replicas=replicas,
        updated_replicas=updated,
        ready_replicas=ready,
        available_replicas=available,
        unavailable_replicas=max(0, desired - available),
        conditions=(
            _condition(previous, "Available", *avail, now),
            _condition(previous, "Progressing", *progress, now),
        ),
        collision_count=deploy.status.collision_count,
    )


def _scaled(deploy: Deployment, name: str, before: int, after: int) -> Note:
    """The ``ScalingReplicaSet`` Event of one scaling (Kubernetes v1.35's words)."""
    way = "up" if after > before else "down"
    return Note(deploy, REASON_SCALING, f"Scaled {way} replica set {name} from {before} to {after}")


def _same_template(rs: ReplicaSet, template: PodTemplateSpec) -> bool:
    """Whether ``rs`` runs ``template``, its ``pod-template-hash`` label aside: a ReplicaSet
    Kubernetes' own Deployment controller made (its hash is another digest) is the current
    one when its template is the Deployment's, as that controller judges it."""
    own = rs.spec.template
    labels = {
        key: value for key, value in own.metadata.labels.items() if key != LABEL_POD_TEMPLATE_HASH
    }
    return replace(own, metadata=replace(own.metadata, labels=labels)) == template


def plan_deployment(deploy: Deployment, sets: Sequence[ReplicaSet], now: datetime) -> Plan:
    """What ``deploy`` needs given the ReplicaSets it controls (pure; the module docstring)."""
    plan = Plan()
    desired = 1 if deploy.spec.replicas is None else deploy.spec.replicas
    surge, unavailable = _limits(deploy, desired)
    digest = template_hash(deploy.spec.template)
    new = next(
        (rs for rs in sets if rs.metadata.labels.get(LABEL_POD_TEMPLATE_HASH) == digest), None
    ) or next((rs for rs in sets if _same_template(rs, deploy.spec.template)), None)
    olds = [rs for rs in sets if rs is not new]
    if deploy.spec.paused:
        plan.status(deploy, _status(deploy, new, sets, desired, unavailable, now))
        return plan
    strategy = deploy.spec.strategy
    recreate = strategy is not None and strategy.type == RECREATE
    scaled: dict[str, int] = {}
    old_running = any(_spec_replicas(rs) > 0 or (rs.status.replicas or 0) > 0 for rs in olds)
    if recreate:
        scaled.update({rs.metadata.name: 0 for rs in olds if _spec_replicas(rs) > 0})
        want_new = 0 if old_running else desired
    elif new is None:
        want_new = (
            desired
            if not old_running
            else min(desired, max(0, desired + surge - sum(_spec_replicas(rs) for rs in olds)))
        )
    else:
        want_new = _spec_replicas(new)
        if not old_running:
            want_new = desired
        else:
            scaled.update(_rolling(desired, surge, unavailable, new, olds))
            want_new = scaled.pop(new.metadata.name, want_new)
    newest = max((_revision(rs) for rs in olds), default=0)
    if new is None:
        created = _new_replica_set(deploy, digest, want_new, newest + 1)
        plan.create.append(created)
        if want_new > 0:
            plan.events.append(_scaled(deploy, created.metadata.name, 0, want_new))
    else:
        current = new
        if want_new != _spec_replicas(new):
            current = replace(current, spec=replace(current.spec, replicas=want_new))
            plan.events.append(_scaled(deploy, new.metadata.name, _spec_replicas(new), want_new))
        if _revision(new) <= newest:  # an older template again (a rollback): the newest revision
            annotations = {**new.metadata.annotations, ANNOTATION_REVISION: str(newest + 1)}
            current = replace(current, metadata=replace(current.metadata, annotations=annotations))
        if current is not new:
            plan.update.append(current)
    for rs in olds:
        if rs.metadata.name in scaled:
            plan.update.append(
                replace(rs, spec=replace(rs.spec, replicas=scaled[rs.metadata.name]))
            )
            plan.events.append(
                _scaled(deploy, rs.metadata.name, _spec_replicas(rs), scaled[rs.metadata.name])
            )
    limit = (
        DEFAULT_HISTORY
        if deploy.spec.revision_history_limit is None
        else deploy.spec.revision_history_limit
    )
    idle = sorted(
        (
            rs
            for rs in olds
            if rs.metadata.name not in scaled and _spec_replicas(rs) == 0 and not rs.status.replicas
        ),
        key=lambda rs: (_revision(rs), rs.metadata.name),
    )
    plan.delete.extend(idle[: max(0, len(idle) - limit)])
    plan.status(deploy, _status(deploy, new, sets, desired, unavailable, now))
    return plan


class DeploymentController(WorkloadLoop):
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "deployments"
    component = "deployment-controller"
    owner_type: ClassVar[type[Object]] = Deployment
    inputs: ClassVar[tuple[type[Object], ...]] = (ReplicaSet,)

    def plan(self, owner: Object, snapshot: Snapshot, store: Cluster, now: datetime) -> Plan:
        assert isinstance(owner, Deployment)
        owned = snapshot.derived(store.registry.for_type(ReplicaSet), replica_sets_by_owner)
        return plan_deployment(owner, owned.get(owner.metadata.uid, ()), now)
