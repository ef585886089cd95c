"""The reserve pod: how the scheduler sees a Reservation (controller-spec §1.3).

A Reservation is scheduled, and once Available occupies its node, as a pod built here:

- name and uid are the reservation's uid; the namespace is the template's, else ``default``;
- labels and annotations are the template's overlaid by the Reservation's own; added are
  ``reserve-pod=true``, ``reservation-name=<name>``, ``is-pre-allocation=true`` (with
  ``spec.preAllocation``) and ``reservation-node=<template nodeName>``: the template's
  ``nodeName`` moves into that annotation so no plugin treats the reserve pod as bound;
- ``spec.nodeName`` is ``status.nodeName`` once scheduled;
- priority: the template's, else the label ``koordinator.sh/priority`` as an int32, else
  2^31-1 (reserve pods are not preempted by default);
- phase ``Succeeded``/``Failed`` mirrors a terminal reservation;
- an Available reservation whose ``status.allocatable`` differs from the template's requests
  carries that allocatable in one container ``__internal_fake_container__`` (requests =
  limits); the other containers' resources and the overhead are dropped.

What a pod is matched against (:func:`reservation_requests`) is ``status.allocatable`` when
Available, else the template's requests. At bind, :func:`allocatable_at_bind` is the template's
requests with the names of the ``reservation-resize-allocatable`` annotation replaced, and
:func:`assumed_available` is the reservation as the scheduler sees it between placing it and
the Available status being written (the pods scheduled after it in the same pass may use it).
"""

from __future__ import annotations

from typing import Final

import msgspec

from apis import bounded
from apis import constants as k
from apis.core import Container, Pod, PodSpec, PodStatus, ResourceRequirements, pod_requests
from apis.meta import Model, ObjectMeta
from apis.quantity import QuantityError
from apis.resources import ResourceList
from apis.scheduling import Reservation
from controller.reservations import AnnotationError

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_SCHEDULER",
    "MAX_PRIORITY",
    "MSG_NODE_NAME_MISMATCH",
    "allocatable_at_bind",
    "assumed_available",
    "is_available",
    "is_reserve_pod",
    "pinned_node",
    "reservation_requests",
    "reserve_pod",
    "reserve_priority",
    "resize_allocatable",
]

#: Filter message for a node other than the one the template pins (§10).
MSG_NODE_NAME_MISMATCH: Final = "node(s) didn't match the nodeName specified by reservation"
DEFAULT_NAMESPACE: Final = "default"
#: A template without ``schedulerName`` is Kubernetes' default scheduler's, not ours.
DEFAULT_SCHEDULER: Final = "default-scheduler"
MAX_PRIORITY: Final = 2**31 - 1
_MIN_PRIORITY: Final = -(2**31)
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})


class _ResizeAllocatable(Model):
    resources: dict[str, str | int] = {}


def is_available(reservation: Reservation) -> bool:
    """Phase Available on a node."""
    status = reservation.status
    return status.phase == "Available" and bool(status.node_name)


def reservation_requests(reservation: Reservation) -> ResourceList:
    """``status.allocatable`` when Available, else the template's pod requests."""
    if is_available(reservation):
        return reservation.status.allocatable
    return pod_requests(reservation.spec.template.spec)


def resize_allocatable(reservation: Reservation) -> ResourceList | None:
    """The resources of the ``reservation-resize-allocatable`` annotation, if any."""
    key = k.ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE
    text = reservation.metadata.annotations.get(key)
    if text is None:
        return None
    try:
        raw = bounded.decode(text, _ResizeAllocatable, key, depth=bounded.MAX_DEPTH)
        return ResourceList.parse({name: str(value) for name, value in raw.resources.items()})
    except bounded.BoundedError as err:
        raise AnnotationError(key, err.detail) from None
    except QuantityError as err:
        raise AnnotationError(key, str(err)) from None


def allocatable_at_bind(reservation: Reservation) -> ResourceList:
    """What ``status.allocatable`` becomes when the reservation is bound."""
    requests = dict(pod_requests(reservation.spec.template.spec))
    resized = resize_allocatable(reservation)
    if resized is not None:
        requests.update(resized)
    return ResourceList(requests)


def assumed_available(reservation: Reservation, node_name: str) -> Reservation:
    """``reservation`` as if its Bind had written it Available on ``node_name`` (the status
    only: phase, node and allocatable; an unparsable resize annotation raises
    :class:`~controller.reservations.AnnotationError`)."""
    status = msgspec.structs.replace(
        reservation.status,
        phase="Available",
        node_name=node_name,
        allocatable=allocatable_at_bind(reservation),
    )
    return msgspec.structs.replace(reservation, status=status)


def reserve_priority(reservation: Reservation) -> int:
    """Template priority, else the ``koordinator.sh/priority`` label (int32), else max."""
    template = reservation.spec.template
    if template.spec.priority is not None:
        return template.spec.priority
    labels = {**template.metadata.labels, **reservation.metadata.labels}
    text = labels.get(k.LABEL_PRIORITY)
    if text is not None:
        try:
            value = int(text, 10)
        except ValueError:
            return MAX_PRIORITY
        if _MIN_PRIORITY <= value <= MAX_PRIORITY:
            return value
    return MAX_PRIORITY


def pinned_node(pod: Pod) -> str:
    """The node a reserve pod's template pins it to (``reservation-node``); empty: any."""
    return pod.metadata.annotations.get(k.ANNOTATION_RESERVATION_NODE, "")


def is_reserve_pod(pod: Pod) -> bool:
    return pod.metadata.annotations.get(k.ANNOTATION_RESERVE_POD) == "true"


def _resized_spec(spec: PodSpec, allocatable: ResourceList) -> PodSpec:
    empty = ResourceRequirements()
    containers = tuple(msgspec.structs.replace(c, resources=empty) for c in spec.containers)
    inits = tuple(msgspec.structs.replace(c, resources=empty) for c in spec.init_containers)
    fake = Container(
        name=k.RESERVE_POD_FAKE_CONTAINER,
        resources=ResourceRequirements(requests=allocatable, limits=allocatable),
    )
    return msgspec.structs.replace(
        spec,
        containers=(*containers, fake),
        init_containers=inits,
        overhead=ResourceList(),
        resources=empty,
    )


def reserve_pod(reservation: Reservation) -> Pod:
    """The pod the scheduler places and accounts for ``reservation``."""
    meta = reservation.metadata
    template = reservation.spec.template
    annotations = {**template.metadata.annotations, **meta.annotations}
    annotations[k.ANNOTATION_RESERVE_POD] = "true"
    annotations[k.ANNOTATION_RESERVATION_NAME] = meta.name
    if reservation.spec.pre_allocation:
        annotations[k.ANNOTATION_IS_PRE_ALLOCATION] = "true"
    if template.spec.node_name:
        annotations[k.ANNOTATION_RESERVATION_NODE] = template.spec.node_name
    spec = msgspec.structs.replace(
        template.spec,
        node_name=reservation.status.node_name,
        priority=reserve_priority(reservation),
        scheduler_name=template.spec.scheduler_name or DEFAULT_SCHEDULER,
    )
    if is_available(reservation):
        allocatable = reservation.status.allocatable
        if pod_requests(spec) != allocatable:
            spec = _resized_spec(spec, allocatable)
    phase = reservation.status.phase
    return Pod(
        metadata=ObjectMeta(
            name=meta.uid,
            uid=meta.uid,
            namespace=template.metadata.namespace or DEFAULT_NAMESPACE,
            labels={**template.metadata.labels, **meta.labels},
            annotations=annotations,
            creation_timestamp=meta.creation_timestamp,
            deletion_timestamp=meta.deletion_timestamp,
        ),
        spec=spec,
        status=PodStatus(phase=phase if phase in _TERMINAL else "Pending"),
    )
