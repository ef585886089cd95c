"""QoS and priority classes of a pod, as Kubernetes and Koordinator derive them.

* Kubernetes QoS (``Guaranteed`` / ``Burstable`` / ``BestEffort``): ``status.qosClass`` when set,
  else computed from the containers' requests and limits of cpu and memory.
* Koordinator QoS (``LSE`` / ``LSR`` / ``LS`` / ``BE`` / ``SYSTEM``): label
  ``koordinator.sh/qosClass``; without it Guaranteed -> LSR, Burstable -> LS, BestEffort -> BE.
* Koordinator priority class: label ``koordinator.sh/priority-class``, else by ``spec.priority``
  band (koord-prod 9000-9999, koord-mid 7000-7999, koord-batch 5000-5999, koord-free
  3000-3999), else from the QoS (SYSTEM/LSE/LSR/LS -> prod, BE -> batch).
* Priority value with default (eviction ordering): a non-zero ``spec.priority``, else the
  class default (9500, 7500, 5500, 3500; 0 for none).

The cgroup location of a pod always follows its Kubernetes QoS; the Koordinator QoS only
selects policies.
"""

from __future__ import annotations

import enum

from apis import constants as k
from apis.core import Pod

__all__ = [
    "KubeQoS",
    "PriorityClass",
    "QoSClass",
    "koord_qos",
    "kube_qos",
    "pod_classes",
    "priority_class",
    "priority_value",
    "scheduling_priority",
    "sub_priority",
]


class KubeQoS(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class QoSClass(enum.StrEnum):
    LSE = "LSE"
    LSR = "LSR"
    LS = "LS"
    BE = "BE"
    SYSTEM = "SYSTEM"
    NONE = ""


class PriorityClass(enum.StrEnum):
    PROD = "koord-prod"
    MID = "koord-mid"
    BATCH = "koord-batch"
    FREE = "koord-free"
    NONE = ""

    @property
    def default_value(self) -> int:
        return _CLASS_DEFAULTS[self]


_CLASS_DEFAULTS = {
    PriorityClass.PROD: 9500,
    PriorityClass.MID: 7500,
    PriorityClass.BATCH: 5500,
    PriorityClass.FREE: 3500,
    PriorityClass.NONE: 0,
}
_BANDS = (
    (9000, 9999, PriorityClass.PROD),
    (7000, 7999, PriorityClass.MID),
    (5000, 5999, PriorityClass.BATCH),
    (3000, 3999, PriorityClass.FREE),
)
_COMPUTE = ("cpu", "memory")
_KUBE_BY_NAME: dict[str, KubeQoS] = {q.value: q for q in KubeQoS}
_KOORD_BY_NAME: dict[str, QoSClass] = {q.value: q for q in QoSClass if q.value}
_KOORD_DEFAULTS = {
    KubeQoS.GUARANTEED: QoSClass.LSR,
    KubeQoS.BURSTABLE: QoSClass.LS,
    KubeQoS.BEST_EFFORT: QoSClass.BE,
}
_PRIORITY_BY_NAME: dict[str, PriorityClass] = {c.value: c for c in PriorityClass if c.value}
_PROD_QOS = frozenset({QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS})


def kube_qos(pod: Pod) -> KubeQoS:
    """``status.qosClass`` when the kubelet set it, else computed like the API server does."""
    known = _KUBE_BY_NAME.get(pod.status.qos_class)
    if known is not None:
        return known
    spec = pod.spec
    containers = (
        (*spec.init_containers, *spec.containers) if spec.init_containers else spec.containers
    )
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        requests = container.resources.requests
        limits = container.resources.limits
        if not limits:
            # Nothing limited: not Guaranteed; Burstable as soon as cpu or memory is requested.
            if any_set or requests.get("cpu") or requests.get("memory"):
                return KubeQoS.BURSTABLE
            guaranteed = False
            continue
        for name in _COMPUTE:
            request = requests.get(name)
            limit = limits.get(name)
            if request or limit:
                any_set = True
            if not limit or (request is not None and request != limit):
                guaranteed = False
    if not any_set:
        return KubeQoS.BEST_EFFORT
    return KubeQoS.GUARANTEED if guaranteed else KubeQoS.BURSTABLE


def koord_qos(pod: Pod) -> QoSClass:
    """The ``koordinator.sh/qosClass`` label, else the default mapping from the kube QoS."""
    return _koord_qos(pod, None)


def _koord_qos(pod: Pod, kube: KubeQoS | None) -> QoSClass:
    """:func:`koord_qos`, with the pod's kube QoS when the caller knows it already."""
    label = pod.metadata.labels.get(k.LABEL_QOS_CLASS)
    if label is not None:
        return _KOORD_BY_NAME.get(label, QoSClass.NONE)
    return _KOORD_DEFAULTS[kube if kube is not None else kube_qos(pod)]


def priority_class(pod: Pod) -> PriorityClass:
    return _priority_class(pod, None)


def _priority_class(pod: Pod, qos: QoSClass | None) -> PriorityClass:
    """:func:`priority_class`, with the pod's Koordinator QoS when the caller knows it."""
    label = pod.metadata.labels.get(k.LABEL_PRIORITY_CLASS)
    if label:
        named = _PRIORITY_BY_NAME.get(label)
        if named is not None:
            return named
    priority = pod.spec.priority
    if priority is not None:
        for low, high, band in _BANDS:
            if low <= priority <= high:
                return band
    if qos is None:
        qos = koord_qos(pod)
    if qos in _PROD_QOS:
        return PriorityClass.PROD
    if qos is QoSClass.BE:
        return PriorityClass.BATCH
    return PriorityClass.NONE


def pod_classes(pod: Pod) -> tuple[KubeQoS, QoSClass, PriorityClass]:
    """:func:`kube_qos`, :func:`koord_qos` and :func:`priority_class` of ``pod`` at once, each
    worked out once (the later ones build on the earlier)."""
    kube = kube_qos(pod)
    koord = _koord_qos(pod, kube)
    return kube, koord, _priority_class(pod, koord)


def priority_value(pod: Pod) -> int:
    """A non-zero ``spec.priority``, else the default value of the pod's priority class."""
    if pod.spec.priority:
        return pod.spec.priority
    return priority_class(pod).default_value


def scheduling_priority(pod: Pod) -> int:
    """The priority a scheduler orders and preempts by: ``spec.priority``; when unset, what
    admission would set for a Koordinator priority class named by ``spec.priorityClassName``
    (``koord-prod`` 9500, ...); else 0, as Kubernetes gives a pod without a priority class."""
    if pod.spec.priority is not None:
        return pod.spec.priority
    try:
        named = PriorityClass(pod.spec.priority_class_name)
    except ValueError:
        return 0
    return named.default_value


def sub_priority(pod: Pod) -> int:
    """The ``koordinator.sh/priority`` label as an int (0 when absent or not a number)."""
    try:
        return int(pod.metadata.labels.get(k.LABEL_PRIORITY, "0"))
    except ValueError:
        return 0
