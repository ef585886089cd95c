"""The ``statefulsets`` control loop: pods ``<statefulset>-<ordinal>`` with stable names.

* Ordinals run from ``spec.ordinals.start`` (0) for ``spec.replicas`` (1). Each pod carries the
  template's labels plus ``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index``
  and ``controller-revision-hash`` (``<statefulset>-<template hash>``); ``spec.hostname`` is its
  name and ``spec.subdomain`` the ``serviceName``.
* ``OrderedReady`` (the default): the lowest missing ordinal is created only when every lower
  one is Running and Ready, one at a time; scaling down deletes the highest ordinal first, one
  at a time, while the rest are Running and Ready. ``Parallel``: all at once.
* A pod that is deleted is created again under the same name; one that ended is deleted (and so
  created again).
* ``RollingUpdate`` (the default): once every pod is Running and Ready, the highest ordinal at
  or above ``partition`` whose revision is not the current one is deleted, to come back from the
  current template. ``OnDelete``: pods change only when deleted. Pods are always created from
  the current template (koordpy keeps no ControllerRevisions, so an ordinal below ``partition``
  that is deleted comes back at the current revision).
* Events (about the StatefulSet): ``SuccessfulCreate`` "create Pod <pod> in StatefulSet <set>
  successful", ``SuccessfulDelete`` "delete Pod ...", ``FailedCreate``/``FailedDelete`` "...
  failed error: <error>".
* Status: ``replicas``, ``readyReplicas``, ``availableReplicas``, ``currentReplicas``,
  ``updatedReplicas``, ``currentRevision``, ``updateRevision``, ``observedGeneration``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar, Final

from apis.apps import ON_DELETE, PARALLEL, StatefulSet, StatefulSetStatus
from apis.core import Pod
from apis.meta import Object
from controller.events import WARNING
from controller.store.cluster import Cluster
from controller.store.snapshots import Snapshot
from controller.workloads.common import (
    LABEL_CONTROLLER_REVISION_HASH,
    Note,
    Plan,
    WorkloadLoop,
    available,
    available_at,
    is_ready,
    pod_from_template,
    pods_by_owner,
    regroup_by_owner,
    template_hash,
)

__all__ = ["LABEL_POD_INDEX", "LABEL_POD_NAME", "StatefulSetController", "plan_stateful_set"]

LABEL_POD_NAME: Final = "statefulset.kubernetes.io/pod-name"
LABEL_POD_INDEX: Final = "apps.kubernetes.io/pod-index"


def _ordinal(sts: StatefulSet, pod: Pod) -> int | None:
    prefix, _, number = pod.metadata.name.rpartition("-")
    if prefix != sts.metadata.name or not number.isdigit():
        return None
    return int(number)


def revision(sts: StatefulSet) -> str:
    """The current revision's name: ``<statefulset>-<template hash>``."""
    return f"{sts.metadata.name}-{template_hash(sts.spec.template)}"


def _settled(pod: Pod) -> bool:
    return pod.metadata.deletion_timestamp is None and is_ready(pod)


def _new_pod(sts: StatefulSet, ordinal: int, current: str) -> Pod:
    name = f"{sts.metadata.name}-{ordinal}"
    return pod_from_template(
        sts.spec.template,
        sts,
        name=name,
        labels={
            LABEL_CONTROLLER_REVISION_HASH: current,
            LABEL_POD_NAME: name,
            LABEL_POD_INDEX: str(ordinal),
        },
        spec_changes={"hostname": name, "subdomain": sts.spec.service_name},
    )


def plan_stateful_set(sts: StatefulSet, pods: Sequence[Pod], now: datetime) -> Plan:
    """What ``sts`` needs given the pods it controls (pure; see the module docstring)."""
    plan = Plan()
    spec = sts.spec
    start = spec.ordinals.start if spec.ordinals is not None else 0
    replicas = 1 if spec.replicas is None else spec.replicas
    wanted = range(start, start + replicas)
    parallel = spec.pod_management_policy == PARALLEL
    current = revision(sts)
    by_ordinal: dict[int, Pod] = {}
    for owned in pods:
        ordinal = _ordinal(sts, owned)
        if ordinal is not None:
            by_ordinal[ordinal] = owned
    blocked = False
    for ordinal in wanted:
        pod = by_ordinal.get(ordinal)
        if pod is None:
            plan.create.append(_new_pod(sts, ordinal, current))
            blocked = True
        elif pod.is_terminated and pod.metadata.deletion_timestamp is None:
            plan.delete.append(pod)
            blocked = True
        elif not _settled(pod):
            blocked = True
        if blocked and not parallel:
            break
    condemned = sorted((o for o in by_ordinal if o not in wanted), reverse=True)
    live_condemned = [
        by_ordinal[o] for o in condemned if by_ordinal[o].metadata.deletion_timestamp is None
    ]
    if parallel:
        plan.delete.extend(live_condemned)
    elif not blocked and live_condemned and len(live_condemned) == len(condemned):
        plan.delete.append(live_condemned[0])
        blocked = True
    strategy = spec.update_strategy
    if not blocked and not condemned and (strategy is None or strategy.type != ON_DELETE):
        rolling = strategy.rolling_update if strategy is not None else None
        partition = rolling.partition or 0 if rolling is not None else 0
        stale = [
            by_ordinal[o]
            for o in sorted(wanted, reverse=True)
            if o - start >= partition
            and by_ordinal[o].metadata.labels.get(LABEL_CONTROLLER_REVISION_HASH) != current
        ]
        if stale:
            plan.delete.append(stale[0])
    min_ready = spec.min_ready_seconds or 0
    live = [p for p in pods if not p.is_terminated]
    for pod in live:
        if is_ready(pod) and not available(pod, min_ready, now):
            plan.wake(available_at(pod, min_ready))
    updated = sum(
        1 for p in live if p.metadata.labels.get(LABEL_CONTROLLER_REVISION_HASH) == current
    )
    previous = sts.status.current_revision or current
    current_revision = current if updated == replicas and len(live) == replicas else previous
    plan.status(
        sts,
        StatefulSetStatus(
            observed_generation=sts.metadata.generation,
            replicas=len(live),
            ready_replicas=sum(1 for p in live if is_ready(p)),
            current_replicas=sum(
                1
                for p in live
                if p.metadata.labels.get(LABEL_CONTROLLER_REVISION_HASH) == current_revision
            ),
            updated_replicas=updated,
            current_revision=current_revision,
            update_revision=current,
            collision_count=sts.status.collision_count,
            conditions=sts.status.conditions,
            available_replicas=sum(1 for p in live if available(p, min_ready, now)),
        ),
    )
    return plan


class StatefulSetController(WorkloadLoop):
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "statefulsets"
    component = "statefulset-controller"
    owner_type: ClassVar[type[Object]] = StatefulSet

    def pod_event(self, owner: Object, pod: Object, verb: str, error: str = "") -> Note | None:
        """Kubernetes' StatefulSet wording: "create Pod <pod> in StatefulSet <set> successful"
        (``Successful<Verb>``), or "... failed error: <error>" (``Failed<Verb>``, Warning)."""
        if not isinstance(pod, Pod):
            return None
        what = f"{verb} Pod {pod.metadata.name} in StatefulSet {owner.metadata.name}"
        if error:
            return Note(owner, f"Failed{verb.title()}", f"{what} failed error: {error}", WARNING)
        return Note(owner, f"Successful{verb.title()}", f"{what} successful")

    def plan(self, owner: Object, snapshot: Snapshot, store: Cluster, now: datetime) -> Plan:
        assert isinstance(owner, StatefulSet)
        owned = snapshot.derived(store.registry.for_type(Pod), pods_by_owner, regroup_by_owner)
        return plan_stateful_set(owner, owned.get(owner.metadata.uid, ()), now)
