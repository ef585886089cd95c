"""``kueue.x-k8s.io/v1beta2`` AdmissionCheck (cluster-scoped), as Kueue defines it.

A check is run by the controller named in ``spec.controllerName``; ``spec.parameters`` points
at a kind holding its settings (``ProvisioningRequestConfig``...). A check is usable only while
its ``Active`` condition is ``True``. ``kueue.x-k8s.io/v1beta1`` is accepted as an alias.
"""

from __future__ import annotations

import msgspec

from apis.meta import Condition, Model, Object, ObjectMeta

__all__ = [
    "AdmissionCheck",
    "AdmissionCheckParametersReference",
    "AdmissionCheckSpec",
    "AdmissionCheckStatus",
]


class AdmissionCheckParametersReference(Model):
    api_group: str
    kind: str
    name: str


class AdmissionCheckSpec(Model):
    #: The controller that runs the check (immutable).
    controller_name: str = ""
    parameters: AdmissionCheckParametersReference | None = None
    #: Deprecated; Kueue's default is 15.
    retry_delay_minutes: int | None = None


class AdmissionCheckStatus(Model):
    conditions: tuple[Condition, ...] = ()


class AdmissionCheck(Object):
    api_version: str = "kueue.x-k8s.io/v1beta2"
    kind: str = "AdmissionCheck"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: AdmissionCheckSpec = msgspec.field(default_factory=AdmissionCheckSpec)
    status: AdmissionCheckStatus = msgspec.field(default_factory=AdmissionCheckStatus)
