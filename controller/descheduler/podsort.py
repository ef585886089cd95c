"""The descheduler's pod order: which pods of a node to move first (controller-spec §6.4 step 6).

Pods compare on six keys in turn, each ascending, so the pod that matters least comes first:

1. Koordinator priority class: none, ``koord-free``, ``koord-batch``, ``koord-mid``,
   ``koord-prod`` (the class of :func:`apis.qos.priority_class`, defaults included);
2. ``spec.priority`` (unset counts as 0);
3. Kubernetes QoS: ``BestEffort``, ``Burstable``, ``Guaranteed``;
4. Koordinator QoS: none, ``BE``, ``LS``, ``LSR``, ``LSE``, ``SYSTEM``;
5. the ``controller.kubernetes.io/pod-deletion-cost`` annotation (an int32; absent or not a
   number counts as 0);
6. the ``scheduling.koordinator.sh/eviction-cost`` annotation (the same rules).

Pods equal on all six keep their given order (:func:`sorted_pods` is a stable sort), so a
caller adds its own later keys by sorting with a longer key built on :func:`sort_key`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from apis import constants as k
from apis.core import Pod
from apis.qos import KubeQoS, PriorityClass, QoSClass, pod_classes

__all__ = ["ANNOTATION_POD_DELETION_COST", "SortKey", "annotation_cost", "sort_key", "sorted_pods"]

#: Kubernetes' ReplicaSet scale-down hint, read here as one of the pod order's keys.
ANNOTATION_POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1

_PRIORITY_CLASS_RANK: Final = {
    PriorityClass.NONE: 0,
    PriorityClass.FREE: 1,
    PriorityClass.BATCH: 2,
    PriorityClass.MID: 3,
    PriorityClass.PROD: 4,
}
_KUBE_QOS_RANK: Final = {
    KubeQoS.BEST_EFFORT: 0,
    KubeQoS.BURSTABLE: 1,
    KubeQoS.GUARANTEED: 2,
}
_KOORD_QOS_RANK: Final = {
    QoSClass.NONE: 0,
    QoSClass.BE: 1,
    QoSClass.LS: 2,
    QoSClass.LSR: 3,
    QoSClass.LSE: 4,
    QoSClass.SYSTEM: 5,
}

SortKey = tuple[int, int, int, int, int, int]


def annotation_cost(pod: Pod, key: str) -> int:
    """The int32 value of annotation ``key`` of ``pod``; 0 when absent, not an integer, or
    outside the int32 range."""
    text = pod.metadata.annotations.get(key)
    if text is None:
        return 0
    try:
        value = int(text.strip())
    except ValueError:
        return 0
    return value if _INT32_MIN <= value <= _INT32_MAX else 0


def sort_key(pod: Pod) -> SortKey:
    """The pod's place in the order (smaller: moved earlier)."""
    kube, koord, priority = pod_classes(pod)
    annotations = pod.metadata.annotations
    return (
        _PRIORITY_CLASS_RANK[priority],
        pod.spec.priority or 0,
        _KUBE_QOS_RANK[kube],
        _KOORD_QOS_RANK[koord],
        annotation_cost(pod, ANNOTATION_POD_DELETION_COST) if annotations else 0,
        annotation_cost(pod, k.ANNOTATION_EVICTION_COST) if annotations else 0,
    )


def sorted_pods(pods: Iterable[Pod]) -> list[Pod]:
    """``pods`` in the order above (stable: equal pods keep their given order)."""
    return sorted(pods, key=sort_key)
