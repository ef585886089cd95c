"""CustomResourceDefinitions of koordpy's custom kinds, made from the Structs of :mod:`apis`.

:func:`custom_resource_definitions` turns every kind of a :class:`~apis.kinds.Registry` outside
Kubernetes' built-in API groups into an ``apiextensions.k8s.io/v1`` CustomResourceDefinition
whose schema is what koordpy's decoder accepts, written as a structural OpenAPI v3 schema:
every definition inlined (no ``$ref``), a ``type`` on every node, ``x-kubernetes-int-or-string``
for quantities and ``int | str`` fields, ``x-kubernetes-preserve-unknown-fields`` where a Struct
keeps a free-form mapping. The CRDs carry the names, groups, versions and scopes of the CRDs
Koordinator v1.8 installs, so they may replace them (spec ``kubernetes.md`` §1, §7).

Koordinator's kinds only by default; ``--job-kinds`` adds the job kinds' (for a cluster that
queues them without their operators installed). ``koordpy crds`` (:func:`main`) prints them
as multi-document YAML, or as a ``v1`` List in JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterable
from typing import Any, Final, TextIO

import msgspec.inspect as mi

from apis.codec import dump_yaml
from apis.duration import Duration
from apis.kinds import Kind, Registry, default_registry
from apis.resources import ResourceList

__all__ = [
    "BUILT_IN_GROUPS",
    "KOORDINATOR_GROUPS",
    "QUANTITY_PATTERN",
    "WITHOUT_STATUS_SUBRESOURCE",
    "SchemaError",
    "custom_resource_definition",
    "custom_resource_definitions",
    "is_custom",
    "main",
    "object_schema",
]

#: The groups of the CRDs Koordinator v1.8 installs (with Koord-Queue and its AdmissionCheck).
KOORDINATOR_GROUPS: Final = frozenset(
    {
        "scheduling.koordinator.sh",
        "slo.koordinator.sh",
        "scheduling.sigs.k8s.io",
        "scheduling.x-k8s.io",
        "kueue.x-k8s.io",
    }
)
#: Kubernetes' own API groups (1.35): kinds in these are served by kube-apiserver itself.
BUILT_IN_GROUPS: Final = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)

#: Kinds that have a ``status`` but no status subresource: their writers update the status
#: with the rest of the object, which a status subresource would silently ignore. Koordinator's
#: Device, ElasticQuota and PodGroup CRDs have none (spec ``kubernetes.md`` §1); Argo writes a
#: Workflow's status with a plain update of the whole object.
WITHOUT_STATUS_SUBRESOURCE: Final = frozenset(
    {
        "scheduling.koordinator.sh/Device",
        "scheduling.sigs.k8s.io/ElasticQuota",
        "scheduling.sigs.k8s.io/PodGroup",
        "argoproj.io/Workflow",
    }
)

#: ``api-approved.kubernetes.io`` of the groups under ``k8s.io``/``kubernetes.io`` the API
#: server only accepts with one: the approval the scheduler-plugins' API group was given.
_APPROVALS: Final = {
    "scheduling.sigs.k8s.io": "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52",
}
_APPROVAL_ANNOTATION: Final = "api-approved.kubernetes.io"
#: What a protected group without a known approval says (the API server accepts it and marks
#: the CRD not conformant to the approval policy).
_UNAPPROVED: Final = "unapproved, schema of koordpy's own object model"

_PRESERVE: Final = "x-kubernetes-preserve-unknown-fields"
_INT_OR_STRING: Final = "x-kubernetes-int-or-string"
#: The quantity grammar of :mod:`apis.quantity` (a sign, a decimal number, then a binary or
#: decimal suffix or a decimal exponent), as a schema pattern for quantities written as text.
QUANTITY_PATTERN: Final = r"^[+-]?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$"

#: Status fields shown by ``kubectl get`` when a kind's status has them (then the age).
_STATUS_COLUMNS: Final = (("phase", "Phase"), ("nodeName", "Node"))


class SchemaError(TypeError):
    """A Struct field whose type has no structural schema (the message names the field)."""


def is_custom(kind: Kind) -> bool:
    """Whether the kind needs a CRD: its group is not one kube-apiserver serves itself."""
    return kind.group not in BUILT_IN_GROUPS


def custom_resource_definitions(
    registry: Registry | None = None, *, job_kinds: bool = False
) -> list[dict[str, Any]]:
    """A CRD for every custom kind of ``registry`` (the default one), in the registry's order.

    Only the kinds of the groups Koordinator v1.8 installs (:data:`KOORDINATOR_GROUPS`)
    unless ``job_kinds``: the job kinds' CRDs (PyTorchJob, RayJob...) are their operators' to
    install, and ours would replace the operator's schema on a cluster that runs it."""
    kinds = default_registry() if registry is None else registry
    return [
        custom_resource_definition(kind)
        for kind in kinds
        if is_custom(kind) and (job_kinds or kind.group in KOORDINATOR_GROUPS)
    ]


def custom_resource_definition(kind: Kind) -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of one custom kind.

    The kind's apiVersion is the storage version; an alias apiVersion of the same group is
    served too, with the same schema (objects keep their fields between the two, so no
    conversion is needed). An alias in another group cannot share the CRD and is left out.
    """
    if not is_custom(kind):
        raise ValueError(f"{kind.key} is served by kube-apiserver itself, not by a CRD")
    schema = object_schema(kind)
    status_subresource = _has_status_subresource(kind)
    versions = []
    for api_version in _versions(kind):
        # Each version its own copy: no node is shared (YAML would print shared ones as aliases).
        version: dict[str, Any] = {
            "name": api_version.rpartition("/")[2],
            "served": True,
            "storage": api_version == kind.api_version,
            "schema": {"openAPIV3Schema": copy.deepcopy(schema)},
        }
        if status_subresource:
            version["subresources"] = {"status": {}}
        version["additionalPrinterColumns"] = _printer_columns(schema)
        versions.append(version)
    names: dict[str, Any] = {
        "kind": kind.kind,
        "listKind": f"{kind.kind}List",
        "plural": kind.plural,
        "singular": kind.singular or kind.kind.lower(),
    }
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    metadata: dict[str, Any] = {"name": kind.qualified_plural}
    if _is_protected(kind.group):
        metadata["annotations"] = {_APPROVAL_ANNOTATION: _APPROVALS.get(kind.group, _UNAPPROVED)}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": kind.group,
            "names": names,
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": versions,
        },
    }


def object_schema(kind: Kind) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of a kind: ``apiVersion`` and ``kind`` strings, ``metadata`` a
    bare object (the API server owns its schema), every other field from the Struct."""
    info = mi.type_info(kind.type)
    if not isinstance(info, mi.StructType):
        raise SchemaError(f"{kind.key}: {kind.type.__name__} is not a Struct")
    own = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
    }
    return _struct(info, kind.kind, (), root=own)


def _versions(kind: Kind) -> list[str]:
    same_group = (a for a in kind.api_version_aliases if a.rpartition("/")[0] == kind.group)
    return [kind.api_version, *dict.fromkeys(a for a in same_group if a != kind.api_version)]


def _has_status_subresource(kind: Kind) -> bool:
    info = mi.type_info(kind.type)
    has_status = isinstance(info, mi.StructType) and any(f.name == "status" for f in info.fields)
    return has_status and kind.key not in WITHOUT_STATUS_SUBRESOURCE


def _is_protected(group: str) -> bool:
    """Groups the API server accepts a CRD of only with an approval annotation."""
    return any(group == g or group.endswith("." + g) for g in ("k8s.io", "kubernetes.io"))


def _printer_columns(schema: dict[str, Any]) -> list[dict[str, Any]]:
    status = schema["properties"].get("status", {}).get("properties", {})
    columns = [
        {"name": title, "type": "string", "jsonPath": f".status.{field}"}
        for field, title in _STATUS_COLUMNS
        if status.get(field, {}).get("type") == "string"
    ]
    columns.append({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})
    return columns


# --- Struct types -> structural schemas --------------------------------------------------------


def _schema(info: mi.Type, path: str, ancestry: tuple[type, ...]) -> dict[str, Any]:
    """The schema of one field's type; ``path`` names the field in errors."""
    if isinstance(info, mi.Metadata):
        return _schema(info.type, path, ancestry)
    if isinstance(info, mi.UnionType):
        return _union(info, path, ancestry)
    if isinstance(info, mi.StructType):
        return _struct(info, path, ancestry)
    if isinstance(info, mi.StrType):
        return _bounded(
            {"type": "string"},
            minLength=info.min_length,
            maxLength=info.max_length,
            pattern=info.pattern,
        )
    if isinstance(info, mi.BoolType):
        return {"type": "boolean"}
    if isinstance(info, mi.IntType):
        return _number("integer", info, path)
    if isinstance(info, mi.FloatType):
        return _number("number", info, path)
    if isinstance(info, mi.DateTimeType):
        return {"type": "string", "format": "date-time"}
    if isinstance(info, mi.DateType):
        return {"type": "string", "format": "date"}
    if isinstance(info, (mi.BytesType, mi.ByteArrayType)):
        return {"type": "string", "format": "byte"}
    if isinstance(info, mi.LiteralType):
        return _enum(tuple(info.values), path)
    if isinstance(info, mi.EnumType):
        return _enum(tuple(member.value for member in info.cls), path)
    if isinstance(info, mi.DictType):
        return _dict(info, path, ancestry)
    if isinstance(info, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        items = _schema(info.item_type, f"{path}[]", ancestry)
        node = _bounded(
            {"type": "array", "items": items},
            minItems=info.min_length,
            maxItems=info.max_length,
        )
        if isinstance(info, (mi.SetType, mi.FrozenSetType)) and "properties" not in items:
            node["x-kubernetes-list-type"] = "set"
        return node
    if isinstance(info, (mi.AnyType, mi.RawType)):
        # Any JSON value: nothing to type, nothing to prune.
        return {_PRESERVE: True}
    if isinstance(info, mi.CustomType):
        return _custom(info.cls, path)
    raise SchemaError(f"{path}: no structural schema for {info!r}")


def _struct(
    info: mi.StructType,
    path: str,
    ancestry: tuple[type, ...],
    *,
    root: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    if info.array_like:
        raise SchemaError(f"{path}: {info.cls.__name__} is encoded as an array")
    if info.cls in ancestry:
        # A Struct inside itself: a schema cannot nest without end, so below here the API
        # server keeps what it is given and koordpy's decoder checks it.
        return {"type": "object", _PRESERVE: True}
    inner = (*ancestry, info.cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    if info.tag_field is not None:
        properties[info.tag_field] = _enum((info.tag,), f"{path}.{info.tag_field}")
        required.append(info.tag_field)
    for field in info.fields:
        name = field.encode_name
        if root is not None and name in root:
            properties[name] = root[name]
        else:
            properties[name] = _schema(field.type, f"{path}.{name}", inner)
        if field.required:
            required.append(name)
    node: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        node["required"] = required
    return node


def _union(info: mi.UnionType, path: str, ancestry: tuple[type, ...]) -> dict[str, Any]:
    # An explicit null is the same as an absent field to koordpy's decoder, and the API server
    # drops nulls of fields that are not nullable: ``X | None`` is the schema of ``X``.
    members = [t for t in info.types if not isinstance(t, mi.NoneType)]
    if len(members) == 1:
        return _schema(members[0], path, ancestry)
    plain = [t.type if isinstance(t, mi.Metadata) else t for t in members]
    if len(plain) == 2 and {type(t) for t in plain} == {mi.IntType, mi.StrType}:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], _INT_OR_STRING: True}
    raise SchemaError(f"{path}: a union of {plain!r} has no structural schema")


def _dict(info: mi.DictType, path: str, ancestry: tuple[type, ...]) -> dict[str, Any]:
    key = info.key_type.type if isinstance(info.key_type, mi.Metadata) else info.key_type
    if not isinstance(key, mi.StrType):
        raise SchemaError(f"{path}: map keys of {key!r} are not strings")
    value = info.value_type.type if isinstance(info.value_type, mi.Metadata) else info.value_type
    node: dict[str, Any] = {"type": "object"}
    if isinstance(value, (mi.AnyType, mi.RawType)):
        node[_PRESERVE] = True
    else:
        node["additionalProperties"] = _schema(value, f"{path}{{}}", ancestry)
    return _bounded(node, minProperties=info.min_length, maxProperties=info.max_length)


def _custom(cls: type, path: str) -> dict[str, Any]:
    if cls is ResourceList:
        quantity = {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            _INT_OR_STRING: True,
        }
        return {"type": "object", "additionalProperties": quantity}
    if cls is Duration:
        return {"type": "string"}
    raise SchemaError(f"{path}: no structural schema for {cls.__name__}")


def _number(type_: str, info: mi.IntType | mi.FloatType, path: str) -> dict[str, Any]:
    node: dict[str, Any] = {"type": type_}
    if isinstance(info, mi.IntType):
        # Whole numbers: a strict bound is the inclusive one next to it.
        low = info.ge if info.gt is None else info.gt + 1
        high = info.le if info.lt is None else info.lt - 1
        return _bounded(node, minimum=low, maximum=high, multipleOf=info.multiple_of)
    node = _bounded(node, minimum=info.ge, maximum=info.le, multipleOf=info.multiple_of)
    if info.gt is not None:
        node.update(minimum=info.gt, exclusiveMinimum=True)
    if info.lt is not None:
        node.update(maximum=info.lt, exclusiveMaximum=True)
    return node


def _enum(values: tuple[Any, ...], path: str) -> dict[str, Any]:
    if all(isinstance(v, str) for v in values):
        return {"type": "string", "enum": list(values)}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return {"type": "integer", "enum": list(values)}
    raise SchemaError(f"{path}: values {values!r} are neither all strings nor all integers")


def _bounded(node: dict[str, Any], **bounds: Any) -> dict[str, Any]:
    node.update((key, value) for key, value in bounds.items() if value is not None)
    return node


# --- koordpy crds ------------------------------------------------------------------------------


def _listing(crds: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": list(crds)}


def main(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """``koordpy crds [-o yaml|json]``: the CRDs on stdout, ready for ``kubectl apply``."""
    stdout = out if out is not None else sys.stdout
    crds = custom_resource_definitions(job_kinds=bool(getattr(args, "job_kinds", False)))
    if getattr(args, "output", "yaml") == "json":
        stdout.write(json.dumps(_listing(crds), indent=2) + "\n")
    else:
        stdout.write(dump_yaml(crds))
    return 0
