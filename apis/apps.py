"""The ``apps/v1`` workload kinds: Deployment, ReplicaSet, StatefulSet, DaemonSet.

What the standalone workload controllers read and write (replicas, selector, template,
strategies, status counters) is typed; the rest (volume claim templates, retention policies)
is kept as given. Each kind checks, as the API server does, what its controller relies on
(``kubernetes.md``, apps/v1 validation essentials): a non-empty ``spec.selector`` that matches
``spec.template.metadata.labels``, a template with containers, counts that are not negative,
and the strategy fields. A failing check raises :class:`InvalidWorkload` naming the field and
the value, which decoding reports at the document it came from.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from apis import validation
from apis.core import PodTemplateSpec
from apis.errors import ApiError
from apis.labels import Selector, SelectorError
from apis.meta import Condition, LabelSelector, Model, Object, ObjectMeta
from apis.validation import FieldError

__all__ = [
    "DaemonSet",
    "DaemonSetSpec",
    "DaemonSetStatus",
    "DaemonSetUpdateStrategy",
    "Deployment",
    "DeploymentSpec",
    "DeploymentStatus",
    "DeploymentStrategy",
    "IntOrString",
    "InvalidWorkload",
    "ReplicaSet",
    "ReplicaSetSpec",
    "ReplicaSetStatus",
    "RollingUpdateDaemonSet",
    "RollingUpdateDeployment",
    "RollingUpdateStatefulSetStrategy",
    "StatefulSet",
    "StatefulSetOrdinals",
    "StatefulSetSpec",
    "StatefulSetStatus",
    "StatefulSetUpdateStrategy",
    "scaled_value",
]

Loose = dict[str, Any]
#: ``intstr.IntOrString``: a count (``1``) or a percentage (``"25%"``).
IntOrString = int | str

RECREATE = "Recreate"
ROLLING_UPDATE = "RollingUpdate"
ON_DELETE = "OnDelete"
ORDERED_READY = "OrderedReady"
PARALLEL = "Parallel"


class InvalidWorkload(ApiError, ValueError):  # noqa: N818 - reads as the API server says it
    """A workload the API server would refuse; the message names the field and the value.

    A ``ValueError`` too, so that decoding reports it at the document and path it came from."""

    def __init__(self, kind: str, errors: list[FieldError]) -> None:
        self.kind = kind
        self.errors = errors
        super().__init__(f"{kind} is invalid: " + "; ".join(str(e) for e in errors))


def _show(value: Any) -> str:
    """A value as the error prints it: labels as ``k=v,...``, the rest as JSON."""
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def scaled_value(
    value: IntOrString | None, total: int, *, round_up: bool, default: IntOrString
) -> int:
    """An IntOrString against ``total``: the int itself, or the percentage of ``total``."""
    given: IntOrString = default if value is None else value
    if isinstance(given, int):
        return given
    percent = int(given.removesuffix("%"))
    scaled = percent * total
    return -(-scaled // 100) if round_up else scaled // 100


def _int_or_percent(field: str, value: IntOrString | None, errors: list[FieldError]) -> None:
    if value is None:
        return
    if isinstance(value, int):
        if value < 0:
            errors.append(
                FieldError(field, "Invalid value", "must be greater than or equal to 0", str(value))
            )
        return
    digits = value.removesuffix("%")
    if not value.endswith("%") or not digits.isdigit():
        errors.append(
            FieldError(
                field,
                "Invalid value",
                "a valid percent string must be a numeric string"
                " followed by an ending '%' (e.g. '1%' or '93%')",
                value,
            )
        )


def _non_negative(field: str, value: int | None, errors: list[FieldError]) -> None:
    if value is not None and value < 0:
        errors.append(
            FieldError(field, "Invalid value", "must be greater than or equal to 0", str(value))
        )


def _pod_template_errors(
    selector: LabelSelector | None, template: PodTemplateSpec, errors: list[FieldError]
) -> None:
    """``spec.selector`` and ``spec.template`` as apps/v1 validates them."""
    template_labels = validation.label_map(
        template.metadata.labels, field="spec.template.metadata.labels"
    )
    errors.extend(template_labels)
    if selector is None or (not selector.match_labels and not selector.match_expressions):
        errors.append(
            FieldError("spec.selector", "Required value", "a non-empty selector is required")
        )
    else:
        try:
            wanted = Selector.from_label_selector(selector)
        except SelectorError as err:
            errors.append(
                FieldError(
                    "spec.selector",
                    "Invalid value",
                    err.reason,
                    _show(msgspec.to_builtins(selector)),
                )
            )
        else:
            labels = template.metadata.labels
            if not template_labels and not wanted.matches(labels):
                errors.append(
                    FieldError(
                        "spec.template.metadata.labels",
                        "Invalid value",
                        "`selector` does not match template `labels`",
                        _show(labels),
                    )
                )
    if not template.spec.containers:
        errors.append(
            FieldError("spec.template.spec.containers", "Required value", "at least one container")
        )


def _restart_always(template: PodTemplateSpec, errors: list[FieldError]) -> None:
    policy = template.spec.restart_policy
    if policy and policy != "Always":
        errors.append(
            FieldError(
                "spec.template.spec.restartPolicy",
                "Unsupported value",
                'supported values: "Always"',
                policy,
            )
        )


# --- Deployment ----------------------------------------------------------------------------


class RollingUpdateDeployment(Model):
    max_unavailable: IntOrString | None = None
    max_surge: IntOrString | None = None


class DeploymentStrategy(Model):
    #: ``RollingUpdate`` (the default) or ``Recreate``.
    type: str = ""
    rolling_update: RollingUpdateDeployment | None = None


class DeploymentSpec(Model):
    #: None: 1.
    replicas: int | None = None
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    strategy: DeploymentStrategy | None = None
    min_ready_seconds: int | None = None
    #: None: 10.
    revision_history_limit: int | None = None
    paused: bool | None = None
    progress_deadline_seconds: int | None = None


class DeploymentStatus(Model):
    observed_generation: int = 0
    replicas: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    unavailable_replicas: int = 0
    terminating_replicas: int | None = None
    conditions: tuple[Condition, ...] = ()
    collision_count: int | None = None


class Deployment(Object):
    api_version: str = "apps/v1"
    kind: str = "Deployment"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeploymentSpec = msgspec.field(default_factory=DeploymentSpec)
    status: DeploymentStatus = msgspec.field(default_factory=DeploymentStatus)

    def __post_init__(self) -> None:
        spec = self.spec
        errors: list[FieldError] = []
        _non_negative("spec.replicas", spec.replicas, errors)
        _non_negative("spec.minReadySeconds", spec.min_ready_seconds, errors)
        _non_negative("spec.revisionHistoryLimit", spec.revision_history_limit, errors)
        _pod_template_errors(spec.selector, spec.template, errors)
        _restart_always(spec.template, errors)
        strategy = spec.strategy or DeploymentStrategy()
        if strategy.type not in ("", RECREATE, ROLLING_UPDATE):
            errors.append(
                FieldError(
                    "spec.strategy.type",
                    "Unsupported value",
                    'supported values: "Recreate", "RollingUpdate"',
                    strategy.type,
                )
            )
        rolling = strategy.rolling_update
        if rolling is not None and strategy.type == RECREATE:
            errors.append(
                FieldError(
                    "spec.strategy.rollingUpdate",
                    "Forbidden",
                    "may not be specified when strategy `type` is 'Recreate'",
                )
            )
        elif rolling is not None:
            _int_or_percent("spec.strategy.rollingUpdate.maxSurge", rolling.max_surge, errors)
            _int_or_percent(
                "spec.strategy.rollingUpdate.maxUnavailable", rolling.max_unavailable, errors
            )
            if not errors:
                surge = scaled_value(rolling.max_surge, 100, round_up=True, default="25%")
                unavailable = scaled_value(
                    rolling.max_unavailable, 100, round_up=False, default="25%"
                )
                if surge == 0 and unavailable == 0:
                    errors.append(
                        FieldError(
                            "spec.strategy.rollingUpdate.maxUnavailable",
                            "Invalid value",
                            "may not be 0 when `maxSurge` is 0",
                            _show(rolling.max_unavailable),
                        )
                    )
        if errors:
            raise InvalidWorkload(self.kind, errors)


# --- ReplicaSet ----------------------------------------------------------------------------


class ReplicaSetSpec(Model):
    #: None: 1.
    replicas: int | None = None
    min_ready_seconds: int | None = None
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)


class ReplicaSetStatus(Model):
    #: Written by the controller even when 0 (as Kubernetes does).
    replicas: int | None = None
    fully_labeled_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    terminating_replicas: int | None = None
    observed_generation: int = 0
    conditions: tuple[Condition, ...] = ()


class ReplicaSet(Object):
    api_version: str = "apps/v1"
    kind: str = "ReplicaSet"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ReplicaSetSpec = msgspec.field(default_factory=ReplicaSetSpec)
    status: ReplicaSetStatus = msgspec.field(default_factory=ReplicaSetStatus)

    def __post_init__(self) -> None:
        errors: list[FieldError] = []
        _non_negative("spec.replicas", self.spec.replicas, errors)
        _non_negative("spec.minReadySeconds", self.spec.min_ready_seconds, errors)
        _pod_template_errors(self.spec.selector, self.spec.template, errors)
        _restart_always(self.spec.template, errors)
        if errors:
            raise InvalidWorkload(self.kind, errors)


# --- StatefulSet ---------------------------------------------------------------------------


class RollingUpdateStatefulSetStrategy(Model):
    partition: int | None = None
    max_unavailable: IntOrString | None = None


class StatefulSetUpdateStrategy(Model):
    #: ``RollingUpdate`` (the default) or ``OnDelete``.
    type: str = ""
    rolling_update: RollingUpdateStatefulSetStrategy | None = None


class StatefulSetOrdinals(Model):
    start: int = 0


class StatefulSetSpec(Model):
    #: None: 1.
    replicas: int | None = None
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    volume_claim_templates: tuple[Loose, ...] = ()
    service_name: str = ""
    #: ``OrderedReady`` (the default) or ``Parallel``.
    pod_management_policy: str = ""
    update_strategy: StatefulSetUpdateStrategy | None = None
    revision_history_limit: int | None = None
    min_ready_seconds: int | None = None
    persistent_volume_claim_retention_policy: Loose | None = None
    ordinals: StatefulSetOrdinals | None = None


class StatefulSetStatus(Model):
    observed_generation: int = 0
    #: Written by the controller even when 0 (as Kubernetes does).
    replicas: int | None = None
    ready_replicas: int = 0
    current_replicas: int = 0
    updated_replicas: int = 0
    current_revision: str = ""
    update_revision: str = ""
    collision_count: int | None = None
    conditions: tuple[Condition, ...] = ()
    available_replicas: int | None = None


class StatefulSet(Object):
    api_version: str = "apps/v1"
    kind: str = "StatefulSet"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: StatefulSetSpec = msgspec.field(default_factory=StatefulSetSpec)
    status: StatefulSetStatus = msgspec.field(default_factory=StatefulSetStatus)

    def __post_init__(self) -> None:
        spec = self.spec
        errors: list[FieldError] = []
        _non_negative("spec.replicas", spec.replicas, errors)
        _non_negative("spec.minReadySeconds", spec.min_ready_seconds, errors)
        _non_negative("spec.revisionHistoryLimit", spec.revision_history_limit, errors)
        if spec.ordinals is not None:
            _non_negative("spec.ordinals.start", spec.ordinals.start, errors)
        _pod_template_errors(spec.selector, spec.template, errors)
        _restart_always(spec.template, errors)
        if spec.pod_management_policy not in ("", ORDERED_READY, PARALLEL):
            errors.append(
                FieldError(
                    "spec.podManagementPolicy",
                    "Unsupported value",
                    'supported values: "OrderedReady", "Parallel"',
                    spec.pod_management_policy,
                )
            )
        strategy = spec.update_strategy or StatefulSetUpdateStrategy()
        if strategy.type not in ("", ROLLING_UPDATE, ON_DELETE):
            errors.append(
                FieldError(
                    "spec.updateStrategy.type",
                    "Unsupported value",
                    'supported values: "OnDelete", "RollingUpdate"',
                    strategy.type,
                )
            )
        if strategy.rolling_update is not None:
            _non_negative(
                "spec.updateStrategy.rollingUpdate.partition",
                strategy.rolling_update.partition,
                errors,
            )
        if errors:
            raise InvalidWorkload(self.kind, errors)


# --- DaemonSet -----------------------------------------------------------------------------


class RollingUpdateDaemonSet(Model):
    max_unavailable: IntOrString | None = None
    max_surge: IntOrString | None = None


class DaemonSetUpdateStrategy(Model):
    #: ``RollingUpdate`` (the default) or ``OnDelete``.
    type: str = ""
    rolling_update: RollingUpdateDaemonSet | None = None


class DaemonSetSpec(Model):
    selector: LabelSelector | None = None
    template: PodTemplateSpec = msgspec.field(default_factory=PodTemplateSpec)
    update_strategy: DaemonSetUpdateStrategy | None = None
    min_ready_seconds: int | None = None
    revision_history_limit: int | None = None


class DaemonSetStatus(Model):
    #: The four counts Kubernetes always writes (None: not written yet).
    current_number_scheduled: int | None = None
    number_misscheduled: int | None = None
    desired_number_scheduled: int | None = None
    number_ready: int | None = None
    observed_generation: int = 0
    updated_number_scheduled: int = 0
    number_available: int = 0
    number_unavailable: int = 0
    collision_count: int | None = None
    conditions: tuple[Condition, ...] = ()


class DaemonSet(Object):
    api_version: str = "apps/v1"
    kind: str = "DaemonSet"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DaemonSetSpec = msgspec.field(default_factory=DaemonSetSpec)
    status: DaemonSetStatus = msgspec.field(default_factory=DaemonSetStatus)

    def __post_init__(self) -> None:
        spec = self.spec
        errors: list[FieldError] = []
        _non_negative("spec.minReadySeconds", spec.min_ready_seconds, errors)
        _non_negative("spec.revisionHistoryLimit", spec.revision_history_limit, errors)
        _pod_template_errors(spec.selector, spec.template, errors)
        _restart_always(spec.template, errors)
        strategy = spec.update_strategy or DaemonSetUpdateStrategy()
        if strategy.type not in ("", ROLLING_UPDATE, ON_DELETE):
            errors.append(
                FieldError(
                    "spec.updateStrategy.type",
                    "Unsupported value",
                    'supported values: "OnDelete", "RollingUpdate"',
                    strategy.type,
                )
            )
        rolling = strategy.rolling_update
        if rolling is not None:
            _int_or_percent(
                "spec.updateStrategy.rollingUpdate.maxUnavailable", rolling.max_unavailable, errors
            )
            _int_or_percent("spec.updateStrategy.rollingUpdate.maxSurge", rolling.max_surge, errors)
        if errors:
            raise InvalidWorkload(self.kind, errors)
