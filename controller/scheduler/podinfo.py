"""What every plugin needs from a pod, computed once per scheduling attempt.

``PodInfo.of(pod, table)`` reads the effective requests (:func:`apis.core.pod_requests`) and
lays them out over the table's columns; a requested resource no node advertises is listed in
``missing`` (the pod then fits nowhere: ``Insufficient <name>`` on every node, as
kube-scheduler says for a resource a node has none of). The priority is
:func:`apis.qos.scheduling_priority` (``spec.priority``, else the value of a Koordinator
priority class named by ``priorityClassName``, else 0), which orders the queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from apis.core import NodeSelector, Pod, PreferredSchedulingTerm, Toleration, pod_requests
from apis.qos import scheduling_priority
from apis.resources import ResourceList
from controller.scheduler.nodetable import NodeTable, nonzero_pair, request_layout

__all__ = ["PodInfo", "pod_key"]


def pod_key(pod: Pod) -> str:
    """``namespace/name``."""
    return f"{pod.metadata.namespace or 'default'}/{pod.metadata.name}"


def created_at(pod: Pod) -> float:
    stamp = pod.metadata.creation_timestamp
    return stamp.timestamp() if stamp is not None else 0.0


@dataclass(frozen=True, slots=True)
class PodInfo:
    pod: Pod
    key: str
    #: The store uid (the key when the pod has none yet, as in tests).
    uid: str
    requests: ResourceList
    #: ``requests`` over the table's columns (``pods`` left 0).
    vector: NDArray[np.int64]
    #: Requested resources no node advertises, sorted.
    missing: tuple[str, ...]
    #: cpu, memory with the scoring defaults for a missing request.
    nonzero: tuple[int, int]
    priority: int
    created: float
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str]
    required_affinity: NodeSelector | None
    preferred_affinity: tuple[PreferredSchedulingTerm, ...]
    #: (column, amount) of every positive amount of ``vector``, in column order.
    demands: tuple[tuple[int, int], ...] = ()

    @property
    def name(self) -> str:
        return self.pod.metadata.name

    @property
    def requested_columns(self) -> NDArray[np.intp]:
        """The columns this pod asks a positive amount of."""
        return np.flatnonzero(self.vector)

    @classmethod
    def of(cls, pod: Pod, table: NodeTable, *, priority: int | None = None) -> PodInfo:
        """``pod`` laid out over ``table``'s columns; ``priority`` when already known."""
        requests = pod_requests(pod)
        vector, missing, demands = request_layout(requests, table.columns)
        affinity = pod.spec.affinity.node_affinity if pod.spec.affinity else None
        key = pod_key(pod)
        return cls(
            pod=pod,
            key=key,
            uid=pod.metadata.uid or key,
            requests=requests,
            vector=vector,
            missing=missing,
            nonzero=nonzero_pair(requests),
            priority=scheduling_priority(pod) if priority is None else priority,
            created=created_at(pod),
            tolerations=pod.spec.tolerations,
            node_selector=pod.spec.node_selector,
            required_affinity=(
                affinity.required_during_scheduling_ignored_during_execution if affinity else None
            ),
            preferred_affinity=(
                affinity.preferred_during_scheduling_ignored_during_execution if affinity else ()
            ),
            demands=demands,
        )
