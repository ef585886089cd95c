"""Small builders of pods, nodes and reservations for the reservation tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from apis import constants as k
from apis.core import Container, Pod, PodSpec, PodStatus, PodTemplateSpec, ResourceRequirements
from apis.duration import Duration
from apis.meta import LabelSelector, ObjectMeta, ObjectReference
from apis.resources import ResourceList
from apis.scheduling import Reservation, ReservationOwner, ReservationSpec, ReservationStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GI = 1024**3


def res(cpu: float = 0, memory_gi: float = 0, gpu: int = 0) -> ResourceList:
    """CPU in cores, memory in GiB, ``nvidia.com/gpu`` in devices."""
    amounts: dict[str, int] = {}
    if cpu:
        amounts["cpu"] = round(cpu * 1000)
    if memory_gi:
        amounts["memory"] = round(memory_gi * GI)
    if gpu:
        amounts["nvidia.com/gpu"] = gpu
    return ResourceList(amounts)


def pod(
    name: str = "p",
    *,
    namespace: str = "default",
    uid: str = "",
    requests: ResourceList | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node: str = "",
    phase: str = "",
) -> Pod:
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=uid or f"uid-{name}",
            labels=labels or {},
            annotations=annotations or {},
        ),
        spec=PodSpec(
            node_name=node,
            containers=(
                Container(name="main", resources=ResourceRequirements(requests=requests or res())),
            ),
        ),
        status=PodStatus(phase=phase),
    )


def allocated_to(reservation: Reservation) -> dict[str, str]:
    """The annotation a pod consuming ``reservation`` carries."""
    meta = reservation.metadata
    return {k.ANNOTATION_RESERVATION_ALLOCATED: f'{{"name":"{meta.name}","uid":"{meta.uid}"}}'}


def everyone() -> tuple[ReservationOwner, ...]:
    return (ReservationOwner(),)


def by_labels(**labels: str) -> tuple[ReservationOwner, ...]:
    return (ReservationOwner(label_selector=LabelSelector(match_labels=labels)),)


def by_name(name: str, namespace: str = "default") -> tuple[ReservationOwner, ...]:
    return (ReservationOwner(object=ObjectReference(name=name, namespace=namespace)),)


def reservation(
    name: str = "r",
    *,
    requests: ResourceList | None = None,
    owners: tuple[ReservationOwner, ...] | None = None,
    node: str = "",
    phase: str = "",
    allocatable: ResourceList | None = None,
    allocated: ResourceList | None = None,
    current_owners: tuple[ObjectReference, ...] = (),
    policy: str = "",
    allocate_once: bool | None = None,
    ttl: str | None = None,
    expires: datetime | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    created: datetime = T0,
    uid: str = "",
) -> Reservation:
    reqs = res(cpu=4) if requests is None else requests
    return Reservation(
        metadata=ObjectMeta(
            name=name,
            uid=uid or f"uid-{name}",
            labels=labels or {},
            annotations=annotations or {},
            creation_timestamp=created,
        ),
        spec=ReservationSpec(
            template=PodTemplateSpec(
                spec=PodSpec(
                    containers=(Container(name="r", resources=ResourceRequirements(requests=reqs)),)
                )
            ),
            owners=everyone() if owners is None else owners,
            ttl=None if ttl is None else Duration.parse(ttl),
            expires=expires,
            allocate_policy=policy,
            allocate_once=allocate_once,
        ),
        status=ReservationStatus(
            phase=phase,
            node_name=node,
            allocatable=(reqs if node else ResourceList()) if allocatable is None else allocatable,
            allocated=allocated or ResourceList(),
            current_owners=current_owners,
        ),
    )


def available(name: str = "r", *, node: str = "n1", **kwargs: Any) -> Reservation:
    return reservation(name, node=node, phase="Available", **kwargs)
