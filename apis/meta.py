"""Object metadata and the shapes every kind shares (Kubernetes ``meta/v1``).

``Model`` is the base of every nested Struct: frozen, keyword-only, camelCase on the wire,
defaults omitted, unknown fields rejected. ``Object`` is the base of every top-level kind:
``apiVersion``, ``kind``, ``metadata``, then the kind's own fields, always written out.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, dataclass_transform

import msgspec

__all__ = [
    "REPORTED_AT_ANNOTATION",
    "Condition",
    "LabelSelector",
    "LabelSelectorRequirement",
    "ListMeta",
    "Model",
    "Object",
    "ObjectMeta",
    "ObjectReference",
    "OwnerReference",
    "without_reported_at",
]

#: Annotation an agent stamps on retained bodies without a heartbeat of their own (Device):
#: when it last reported them (on a change, and again every 30 s while unchanged; RFC 3339).
REPORTED_AT_ANNOTATION: Final = "koordpy.io/reported-at"


def without_reported_at(annotations: Mapping[str, str]) -> Mapping[str, str]:
    """``annotations`` without :data:`REPORTED_AT_ANNOTATION` (themselves when it is absent):
    what a report says apart from when it was made."""
    if REPORTED_AT_ANNOTATION not in annotations:
        return annotations
    return {key: value for key, value in annotations.items() if key != REPORTED_AT_ANNOTATION}


class _StructMeta(msgspec.StructMeta):
    """Makes every subclass keyword-only and untracked by the garbage collector.

    msgspec does not inherit ``kw_only``. ``gc=False``: wire objects are trees decoded from
    JSON/YAML and never form reference cycles, and the controller holds many of them, so the
    cycle collector need not scan them.
    """

    def __new__(
        mcls,
        name: str,
        bases: tuple[type, ...],
        namespace: dict[str, Any],
        **kwargs: Any,
    ) -> _StructMeta:
        kwargs.setdefault("kw_only", True)
        kwargs.setdefault("gc", False)
        return super().__new__(mcls, name, bases, namespace, **kwargs)


# ``dataclass_transform`` tells type checkers that subclasses are frozen and keyword-only.
@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(msgspec.field,))
class Model(
    msgspec.Struct,
    metaclass=_StructMeta,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=True,
    forbid_unknown_fields=True,
    repr_omit_defaults=True,
):
    """Base of every nested wire Struct."""


class OwnerReference(Model):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectReference(Model):
    """``core/v1`` ObjectReference (every field optional)."""

    api_version: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""
    resource_version: str = ""
    field_path: str = ""


class ObjectMeta(Model):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: tuple[OwnerReference, ...] = ()
    finalizers: tuple[str, ...] = ()
    #: Server-side-apply bookkeeping from a real cluster; kept as given, never interpreted.
    managed_fields: tuple[dict[str, Any], ...] = ()
    self_link: str = ""


class ListMeta(Model):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")
    remaining_item_count: int | None = None


class LabelSelectorRequirement(Model):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class LabelSelector(Model):
    match_labels: dict[str, str] = {}
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


class Condition(Model):
    """``meta/v1`` Condition, with the optional fields older condition types carry."""

    type: str
    status: str
    observed_generation: int | None = None
    last_probe_time: datetime | None = None
    last_heartbeat_time: datetime | None = None
    last_update_time: datetime | None = None
    last_transition_time: datetime | None = None
    reason: str = ""
    message: str = ""


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(msgspec.field,))
class Object(
    msgspec.Struct,
    metaclass=_StructMeta,
    frozen=True,
    kw_only=True,
    rename="camel",
    omit_defaults=False,
    forbid_unknown_fields=True,
    repr_omit_defaults=True,
):
    """Base of every top-level kind.

    A kind re-declares ``api_version`` and ``kind`` with its own defaults and ``metadata``
    right after them, which keeps Kubernetes' order on the wire: apiVersion, kind, metadata,
    spec, status. Every subclass is keyword-only (see ``_StructMeta``), so a required ``spec``
    may follow the defaulted fields.
    ``api_version`` and ``kind`` are always written out (no ``omit_defaults`` at this level);
    optional top-level content lives in nested ``Model`` Structs::

        class Pod(Object):
            api_version: str = "v1"
            kind: str = "Pod"
            metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
            spec: PodSpec = msgspec.field(default_factory=PodSpec)
            status: PodStatus = msgspec.field(default_factory=PodStatus)
    """

    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace
