"""``scheduling.sigs.k8s.io/v1alpha1`` PodGroup (namespaced): a gang of pods scheduled together.

Pods join with the label ``pod-group.scheduling.sigs.k8s.io=<name>``; mode, total number and
gang groups come from the ``gang.scheduling.koordinator.sh/*`` annotations on the PodGroup
(see :mod:`apis.constants`, ``GANG_*``).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from apis.meta import Model, Object, ObjectMeta
from apis.resources import ResourceList

__all__ = ["PodGroup", "PodGroupSpec", "PodGroupStatus"]

_NO_RESOURCES = ResourceList()


class PodGroupSpec(Model):
    #: Pods that must be schedulable together before any is bound.
    min_member: int = 0
    min_resources: ResourceList = _NO_RESOURCES
    #: How long members wait in Permit for the rest of the gang.
    schedule_timeout_seconds: int | None = None


class PodGroupStatus(Model):
    #: ``Pending``, ``PreScheduling``, ``Scheduling``, ``Scheduled``, ``Running``, ``Finished``,
    #: ``Failed``, ``Unknown``.
    phase: str = ""
    occupied_by: str = ""
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    schedule_start_time: datetime | None = None


class PodGroup(Object):
    api_version: str = "scheduling.sigs.k8s.io/v1alpha1"
    kind: str = "PodGroup"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: PodGroupSpec = msgspec.field(default_factory=PodGroupSpec)
    status: PodGroupStatus = msgspec.field(default_factory=PodGroupStatus)
