"""How the ``migration`` loop evicts a pod: ``evictionPolicy`` and ``deleteOptions``.

koordpy has no kubelet and no PodDisruptionBudgets: a deleted pod leaves the store at once,
and its workload brings a new one. What each policy (``MigrationControllerArgs.evictionPolicy``,
default ``Eviction``; a pod's label ``koordinator.sh/evict-policy`` overrides it) does here:

- ``Eviction``: the pod is deleted; a Warning Event ``Evicted`` on it says
  ``evicted by <initiator>: <reason>``. (The Eviction API's one difference from a delete, the
  PodDisruptionBudget check, has nothing to check in koordpy.)
- ``Delete``: the pod is deleted; the Event says ``deleted by <initiator>: <reason>``.
- ``SoftEviction``: the pod is not deleted. It gets the annotation
  ``scheduling.koordinator.sh/soft-eviction`` (the spec names none; this is ours), whose value
  is a JSON object ``{"timestamp": <RFC 3339>, "initiator": <initiator>, "reason": <reason>}``
  plus ``"deleteOptions"`` when there are some; deleting the pod is left to its owner. The
  Event says ``marked for soft eviction by <initiator>: <reason>``.

``<initiator>`` is ``PodMigrationJob <name>`` followed by `` (<trigger>)`` when the job
carries ``koordinator.sh/evict-trigger``; ``: <reason>`` is left out when the job carries no
``koordinator.sh/evict-reason``.

``deleteOptions`` (the job's ``spec.deleteOptions``, else the args' ``defaultDeleteOptions``):

- ``gracePeriodSeconds`` (>= 0): the store deletes at once (nothing runs to be stopped); the
  period is recorded: the Event message ends with ``; grace period <n>s``, and a soft eviction
  keeps it in its annotation's ``deleteOptions``;
- ``preconditions.uid``: must be the pod's uid (another uid can never match: the job fails);
  ``preconditions.resourceVersion``: the delete or the annotation write is refused unless the
  pod is at that version (the job stays ``Running`` with reason ``FailedEvict`` and tries
  again until its TTL);
- ``dryRun``: ``[]`` or ``["All"]``; ``All``: nothing is written to the pod and the Event is a
  Normal ``EvictionProposed`` saying ``eviction proposed by <initiator> (dry run): <reason>``
  (the job goes on as if the pod had been evicted);
- ``propagationPolicy``: ``Orphan``, ``Background`` or ``Foreground``; no effect (a pod owns
  nothing). ``orphanDependents``, ``ignoreStoreReadErrorWithClusterBreakingPotential``,
  ``apiVersion``, ``kind``: accepted, no effect.

A bad value raises ``ValueError`` naming the field (``defaultDeleteOptions.gracePeriodSeconds``,
``spec.deleteOptions.dryRun``, the pod label...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import msgspec

from apis import codec
from apis import constants as k
from apis.core import Pod
from apis.scheduling import DeleteOptions

__all__ = [
    "ANNOTATION_SOFT_EVICTION",
    "DELETE",
    "EVICTION",
    "EVICTION_POLICIES",
    "SOFT_EVICTION",
    "EvictionPlan",
    "check_delete_options",
    "check_policy",
    "event_message",
    "plan_eviction",
    "soft_evicted",
]

EVICTION: Final = "Eviction"
DELETE: Final = "Delete"
SOFT_EVICTION: Final = "SoftEviction"
EVICTION_POLICIES: Final = (EVICTION, DELETE, SOFT_EVICTION)

#: The annotation a soft eviction puts on the pod (module docstring).
ANNOTATION_SOFT_EVICTION: Final = "scheduling.koordinator.sh/soft-eviction"

_PROPAGATION_POLICIES: Final = ("Orphan", "Background", "Foreground")
_DRY_RUN_ALL: Final = "All"
_VERBS: Final = {
    EVICTION: "evicted",
    DELETE: "deleted",
    SOFT_EVICTION: "marked for soft eviction",
}


def check_policy(value: str, field: str) -> str:
    """``value`` when it is an eviction policy, else a ``ValueError`` naming ``field``."""
    if value not in EVICTION_POLICIES:
        raise ValueError(f"{field}: {value!r} is not one of {list(EVICTION_POLICIES)}")
    return value


def check_delete_options(options: DeleteOptions | None, field: str) -> None:
    """A ``ValueError`` naming the field (under ``field``) of a bad value in ``options``."""
    if options is None:
        return
    grace = options.grace_period_seconds
    if grace is not None and (isinstance(grace, bool) or grace < 0):
        raise ValueError(f"{field}.gracePeriodSeconds: {grace!r} must be >= 0")
    policy = options.propagation_policy
    if policy is not None and policy not in _PROPAGATION_POLICIES:
        raise ValueError(
            f"{field}.propagationPolicy: {policy!r} is not one of {list(_PROPAGATION_POLICIES)}"
        )
    for value in options.dry_run:
        if value != _DRY_RUN_ALL:
            raise ValueError(f"{field}.dryRun: {value!r} is not 'All'")


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """How one pod is evicted."""

    policy: str = EVICTION
    options: DeleteOptions | None = None

    @property
    def verb(self) -> str:
        """What happens to the pod, in words (``evicted``, ``deleted``...)."""
        return "eviction proposed (dry run)" if self.dry_run else _VERBS[self.policy]

    @property
    def dry_run(self) -> bool:
        return self.options is not None and _DRY_RUN_ALL in self.options.dry_run

    @property
    def grace_period_seconds(self) -> int | None:
        return self.options.grace_period_seconds if self.options is not None else None

    @property
    def resource_version(self) -> str:
        """The resourceVersion precondition ("" when none)."""
        options = self.options
        if options is None or options.preconditions is None:
            return ""
        return options.preconditions.resource_version or ""


def plan_eviction(
    pod: Pod,
    *,
    default_policy: str,
    job_options: DeleteOptions | None,
    default_options: DeleteOptions | None,
) -> EvictionPlan:
    """The plan for ``pod``: its label's policy or ``default_policy``, the job's delete options
    or the default ones (module docstring). A bad value: ``ValueError`` naming the field."""
    label = pod.metadata.labels.get(k.LABEL_EVICT_POLICY)
    if label is not None:
        policy = check_policy(label, f"pod label {k.LABEL_EVICT_POLICY}")
    else:
        policy = check_policy(default_policy, "evictionPolicy")
    options = job_options if job_options is not None else default_options
    field = "spec.deleteOptions" if job_options is not None else "defaultDeleteOptions"
    check_delete_options(options, field)
    if options is not None and options.preconditions is not None:
        uid = options.preconditions.uid
        if uid and uid != pod.metadata.uid:
            raise ValueError(
                f"{field}.preconditions.uid: {uid!r} is not the pod's uid {pod.metadata.uid!r}"
            )
    return EvictionPlan(policy=policy, options=options)


def event_message(plan: EvictionPlan, initiator: str, reason: str) -> str:
    """The message of the Event on the evicted pod (module docstring)."""
    if plan.dry_run:
        text = f"eviction proposed by {initiator} (dry run)"
    else:
        text = f"{plan.verb} by {initiator}"
    if reason:
        text = f"{text}: {reason}"
    grace = plan.grace_period_seconds
    if grace is not None and not plan.dry_run:
        text = f"{text}; grace period {grace}s"
    return text


def soft_evicted(pod: Pod, plan: EvictionPlan, initiator: str, reason: str, now: datetime) -> Pod:
    """``pod`` with the soft-eviction annotation (module docstring)."""
    body: dict[str, object] = {
        "timestamp": now.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "initiator": initiator,
        "reason": reason,
    }
    if plan.options is not None:
        body["deleteOptions"] = json.loads(codec.encode_json(plan.options))
    value = json.dumps(body, separators=(",", ":"), sort_keys=True)
    meta = pod.metadata
    annotations = {**meta.annotations, ANNOTATION_SOFT_EVICTION: value}
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(meta, annotations=annotations)
    )
