"""The ``daemonsets`` control loop: one pod of a DaemonSet on every node that should run it.

* A node should run the pod when it matches the template's ``nodeSelector`` and required node
  affinity, and the template's tolerations, with the ones every daemon pod gets, tolerate its
  ``NoSchedule`` and ``NoExecute`` taints.
* Daemon pods get those tolerations (``node.kubernetes.io/not-ready`` and ``unreachable``
  ``NoExecute``; ``disk-pressure``, ``memory-pressure``, ``pid-pressure``, ``unschedulable``
  ``NoSchedule``; ``network-unavailable`` ``NoSchedule`` for host-network pods), and their
  required node affinity is replaced by one term pinning the node (``matchFields``
  ``metadata.name In [node]``). Names are ``<daemonset>-<5 letters>``; labels: the template's,
  ``controller-revision-hash`` and ``pod-template-generation``.
* A node without an active pod gets one; a pod on a node that should not run it, on a node that
  is gone, beyond the first on its node, or ended, is deleted.
* ``RollingUpdate`` (the default, ``maxUnavailable`` 1): pods of an older template are deleted,
  as many as keep at most ``maxUnavailable`` nodes without an available pod (``maxSurge`` is
  not honoured: a node's new pod comes once its old one is gone). ``OnDelete``: pods change
  only when deleted.
* Events: ``SuccessfulCreate`` "Created pod: <name>", ``SuccessfulDelete`` "Deleted pod:
  <name>", ``FailedCreate``/``FailedDelete`` (:class:`~controller.workloads.common.WorkloadLoop`).
* Status: ``desiredNumberScheduled``, ``currentNumberScheduled``, ``numberMisscheduled``,
  ``numberReady``, ``numberAvailable``, ``numberUnavailable``, ``updatedNumberScheduled``,
  ``observedGeneration``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import ClassVar, Final

import msgspec

from apis.apps import ON_DELETE, DaemonSet, DaemonSetStatus, scaled_value
from apis.core import (
    Affinity,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
    Toleration,
)
from apis.meta import Object
from controller.scheduler.plugins.nodeaffinity import NAME_FIELD, selector_matches
from controller.scheduler.plugins.tainttoleration import NO_EXECUTE, NO_SCHEDULE, tolerated
from controller.store.cluster import Cluster
from controller.store.snapshots import Snapshot
from controller.workloads.common import (
    LABEL_CONTROLLER_REVISION_HASH,
    Plan,
    WorkloadLoop,
    active,
    available,
    available_at,
    is_ready,
    pod_from_template,
    pods_by_owner,
    regroup_by_owner,
    template_hash,
)

__all__ = [
    "DaemonSetController",
    "daemon_tolerations",
    "pinned_affinity",
    "plan_daemon_set",
    "should_run",
]

replace = msgspec.structs.replace

LABEL_POD_TEMPLATE_GENERATION: Final = "pod-template-generation"

_ALWAYS_TOLERATED: Final = (
    ("node.kubernetes.io/not-ready", NO_EXECUTE),
    ("node.kubernetes.io/unreachable", NO_EXECUTE),
    ("node.kubernetes.io/disk-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/memory-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
    ("node.kubernetes.io/unschedulable", NO_SCHEDULE),
)
_HOST_NETWORK_TOLERATED: Final = (("node.kubernetes.io/network-unavailable", NO_SCHEDULE),)


def daemon_tolerations(spec: PodSpec) -> tuple[Toleration, ...]:
    """``spec``'s tolerations with those every daemon pod gets (unless already there)."""
    wanted = list(_ALWAYS_TOLERATED)
    if spec.host_network:
        wanted.extend(_HOST_NETWORK_TOLERATED)
    have = {(t.key, t.effect) for t in spec.tolerations if t.operator == "Exists"}
    added = [
        Toleration(key=key, operator="Exists", effect=effect)
        for key, effect in wanted
        if (key, effect) not in have
    ]
    return (*spec.tolerations, *added)


def pinned_affinity(affinity: Affinity | None, node_name: str) -> Affinity:
    """``affinity`` with its required node terms replaced by one naming ``node_name``."""
    pin = NodeSelector(
        node_selector_terms=(
            NodeSelectorTerm(
                match_fields=(
                    NodeSelectorRequirement(key=NAME_FIELD, operator="In", values=(node_name,)),
                )
            ),
        )
    )
    base = affinity or Affinity()
    node_affinity = base.node_affinity or NodeAffinity()
    return replace(
        base,
        node_affinity=replace(
            node_affinity, required_during_scheduling_ignored_during_execution=pin
        ),
    )


def should_run(spec: PodSpec, node: Node) -> bool:
    """Whether a daemon pod of ``spec`` belongs on ``node`` (see the module docstring)."""
    labels = node.metadata.labels
    if any(labels.get(k) != v for k, v in spec.node_selector.items()):
        return False
    required = (
        spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if spec.affinity is not None and spec.affinity.node_affinity is not None
        else None
    )
    if required is not None and not selector_matches(required, labels, node.metadata.name):
        return False
    tolerations = daemon_tolerations(spec)
    return all(
        tolerated(tolerations, taint)
        for taint in node.spec.taints
        if taint.effect in (NO_SCHEDULE, NO_EXECUTE)
    )


def _target(pod: Pod) -> str:
    """The node a daemon pod is for: where it is bound, else the node its affinity pins."""
    if pod.spec.node_name:
        return pod.spec.node_name
    affinity = pod.spec.affinity
    required = (
        affinity.node_affinity.required_during_scheduling_ignored_during_execution
        if affinity is not None and affinity.node_affinity is not None
        else None
    )
    for term in required.node_selector_terms if required is not None else ():
        for field in term.match_fields:
            if field.key == NAME_FIELD and field.operator == "In" and len(field.values) == 1:
                return field.values[0]
    return ""


def _timestamp(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0


def _new_pod(ds: DaemonSet, node: str, current: str) -> Pod:
    spec = ds.spec.template.spec
    return pod_from_template(
        ds.spec.template,
        ds,
        generate_name=f"{ds.metadata.name}-",
        labels={
            LABEL_CONTROLLER_REVISION_HASH: current,
            LABEL_POD_TEMPLATE_GENERATION: str(ds.metadata.generation),
        },
        spec_changes={
            "affinity": pinned_affinity(spec.affinity, node),
            "tolerations": daemon_tolerations(spec),
        },
    )


def plan_daemon_set(
    ds: DaemonSet, pods: Sequence[Pod], nodes: Iterable[Node], now: datetime
) -> Plan:
    """What ``ds`` needs given its pods and the nodes (pure; see the module docstring)."""
    plan = Plan()
    current = template_hash(ds.spec.template)
    min_ready = ds.spec.min_ready_seconds or 0
    by_node: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.is_terminated:
            if pod.metadata.deletion_timestamp is None:
                plan.delete.append(pod)
            continue
        by_node.setdefault(_target(pod), []).append(pod)
    desired = scheduled = misscheduled = ready = avail = updated = 0
    stale: list[Pod] = []
    seen: set[str] = set()
    for node in nodes:
        name = node.metadata.name
        seen.add(name)
        here = sorted(
            by_node.get(name, []),
            key=lambda p: (_timestamp(p.metadata.creation_timestamp), p.metadata.name),
        )
        live = [p for p in here if active(p)]
        if not should_run(ds.spec.template.spec, node):
            if here:
                misscheduled += 1
            plan.delete.extend(live)
            continue
        desired += 1
        if not live:
            if not here:  # a pod still being deleted keeps its place until it is gone
                plan.create.append(_new_pod(ds, name, current))
            continue
        scheduled += 1
        pod, extra = live[0], live[1:]
        plan.delete.extend(extra)
        ready += is_ready(pod)
        if available(pod, min_ready, now):
            avail += 1
        elif is_ready(pod):
            plan.wake(available_at(pod, min_ready))
        if pod.metadata.labels.get(LABEL_CONTROLLER_REVISION_HASH) == current:
            updated += 1
        else:
            stale.append(pod)
    for name, here in by_node.items():
        if name not in seen:
            plan.delete.extend(p for p in here if active(p))
    strategy = ds.spec.update_strategy
    if stale and (strategy is None or strategy.type != ON_DELETE):
        rolling = strategy.rolling_update if strategy is not None else None
        limit = scaled_value(
            rolling.max_unavailable if rolling is not None else None,
            desired,
            round_up=True,
            default=1,
        )
        room = max(0, limit - (desired - avail))
        plan.delete.extend(p for p in stale if not available(p, min_ready, now))
        plan.delete.extend([p for p in stale if available(p, min_ready, now)][:room])
    plan.status(
        ds,
        DaemonSetStatus(
            current_number_scheduled=scheduled,
            number_misscheduled=misscheduled,
            desired_number_scheduled=desired,
            number_ready=ready,
            observed_generation=ds.metadata.generation,
            updated_number_scheduled=updated,
            number_available=avail,
            number_unavailable=max(0, desired - avail),
            collision_count=ds.status.collision_count,
            conditions=ds.status.conditions,
        ),
    )
    return plan


class DaemonSetController(WorkloadLoop):
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "daemonsets"
    component = "daemonset-controller"
    owner_type: ClassVar[type[Object]] = DaemonSet
    inputs: ClassVar[tuple[type[Object], ...]] = (Pod, Node)

    def plan(self, owner: Object, snapshot: Snapshot, store: Cluster, now: datetime) -> Plan:
        assert isinstance(owner, DaemonSet)
        owned = snapshot.derived(store.registry.for_type(Pod), pods_by_owner, regroup_by_owner)
        nodes = [n for n in snapshot.objects(store.registry.for_type(Node)) if isinstance(n, Node)]
        return plan_daemon_set(owner, owned.get(owner.metadata.uid, ()), nodes, now)
