"""The defaults the API server gives a new pod (kubernetes.md: what ``kubectl get pod -o yaml``
shows after a create; Kubernetes' pod defaulting and ``PrepareForCreate``).

At create, where the pod leaves a field empty (``koordpy simulate`` and ``apply`` load pods
that already run: the status they have stands):

- ``status.phase``: ``Pending``;
- ``status.qosClass``: ``Guaranteed``, ``Burstable`` or ``BestEffort`` from the containers'
  requests and limits (:func:`apis.qos.kube_qos`);
- ``spec.schedulerName`` ``default-scheduler``, ``spec.restartPolicy`` ``Always``,
  ``spec.terminationGracePeriodSeconds`` 30, ``spec.dnsPolicy`` ``ClusterFirst``,
  ``spec.enableServiceLinks`` true.

At update, a field the update leaves empty keeps the stored value (as ``kubectl apply`` keeps
what the API server filled in: re-applying the manifest changes nothing), so what the create
defaulted stays. ``spec.priority`` and ``spec.preemptionPolicy`` are the Priority plugin's
(:mod:`controller.admission.priority`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from apis.core import Pod
from apis.meta import Object
from apis.qos import kube_qos
from controller.admission.base import Lookup

__all__ = [
    "DEFAULT_DNS_POLICY",
    "DEFAULT_GRACE_PERIOD_SECONDS",
    "DEFAULT_RESTART_POLICY",
    "DEFAULT_SCHEDULER",
    "PENDING",
    "admit_pod_defaults",
]

PENDING: Final = "Pending"
DEFAULT_SCHEDULER: Final = "default-scheduler"
DEFAULT_RESTART_POLICY: Final = "Always"
DEFAULT_GRACE_PERIOD_SECONDS: Final = 30
DEFAULT_DNS_POLICY: Final = "ClusterFirst"


def admit_pod_defaults(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """``obj`` with the defaults of the module docstring where it leaves them out."""
    if not isinstance(obj, Pod):
        return obj
    if old is None:
        return _defaulted(obj)
    if isinstance(old, Pod):
        return _kept(obj, old)
    return obj


def _defaulted(pod: Pod) -> Pod:
    spec, status = pod.spec, pod.status
    spec_changes: dict[str, Any] = {}
    if not spec.scheduler_name:
        spec_changes["scheduler_name"] = DEFAULT_SCHEDULER
    if not spec.restart_policy:
        spec_changes["restart_policy"] = DEFAULT_RESTART_POLICY
    if spec.termination_grace_period_seconds is None:
        spec_changes["termination_grace_period_seconds"] = DEFAULT_GRACE_PERIOD_SECONDS
    if not spec.dns_policy:
        spec_changes["dns_policy"] = DEFAULT_DNS_POLICY
    if spec.enable_service_links is None:
        spec_changes["enable_service_links"] = True
    status_changes: dict[str, Any] = {}
    if not status.phase:
        status_changes["phase"] = PENDING
    if not status.qos_class:
        status_changes["qos_class"] = kube_qos(pod).value
    return _replaced(pod, spec_changes, status_changes)


def _kept(pod: Pod, old: Pod) -> Pod:
    """``pod`` with the stored values of ``old`` where it leaves the defaulted fields empty."""
    spec, was = pod.spec, old.spec
    spec_changes: dict[str, Any] = {}
    if not spec.scheduler_name and was.scheduler_name:
        spec_changes["scheduler_name"] = was.scheduler_name
    if not spec.restart_policy and was.restart_policy:
        spec_changes["restart_policy"] = was.restart_policy
    if spec.termination_grace_period_seconds is None and (
        was.termination_grace_period_seconds is not None
    ):
        spec_changes["termination_grace_period_seconds"] = was.termination_grace_period_seconds
    if not spec.dns_policy and was.dns_policy:
        spec_changes["dns_policy"] = was.dns_policy
    if spec.enable_service_links is None and was.enable_service_links is not None:
        spec_changes["enable_service_links"] = was.enable_service_links
    status, before = pod.status, old.status
    status_changes: dict[str, Any] = {}
    if not status.phase and before.phase:
        status_changes["phase"] = before.phase
    if not status.qos_class and before.qos_class:
        status_changes["qos_class"] = before.qos_class
    return _replaced(pod, spec_changes, status_changes)


def _replaced(pod: Pod, spec_changes: dict[str, Any], status_changes: dict[str, Any]) -> Pod:
    if not spec_changes and not status_changes:
        return pod
    spec, status = pod.spec, pod.status
    return msgspec.structs.replace(
        pod,
        spec=msgspec.structs.replace(spec, **spec_changes) if spec_changes else spec,
        status=msgspec.structs.replace(status, **status_changes) if status_changes else status,
    )
