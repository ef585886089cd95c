"""``scheduling.sigs.k8s.io/v1alpha1`` ElasticQuota (namespaced).

A quota's place in the tree and its behaviour come from labels and annotations (see
:mod:`apis.constants`, ``QUOTA_*``); the object itself only holds ``min``, ``max`` and
``status.used``.
"""

from __future__ import annotations

import msgspec

from apis.meta import Model, Object, ObjectMeta
from apis.resources import ResourceList

__all__ = ["ElasticQuota", "ElasticQuotaSpec", "ElasticQuotaStatus"]

_NO_RESOURCES = ResourceList()


class ElasticQuotaSpec(Model):
    #: Guaranteed amount (a key missing from ``min`` guarantees nothing of that resource).
    min: ResourceList = _NO_RESOURCES
    #: Upper bound (a key missing from ``max`` is unconstrained).
    max: ResourceList = _NO_RESOURCES


class ElasticQuotaStatus(Model):
    used: ResourceList = _NO_RESOURCES


class ElasticQuota(Object):
    api_version: str = "scheduling.sigs.k8s.io/v1alpha1"
    kind: str = "ElasticQuota"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ElasticQuotaSpec = msgspec.field(default_factory=ElasticQuotaSpec)
    status: ElasticQuotaStatus = msgspec.field(default_factory=ElasticQuotaStatus)
