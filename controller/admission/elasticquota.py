"""Koordinator's ElasticQuota webhook (controller-spec §4.1, §4.3 "design constraints";
Koordinator's manual ``capacity-scheduling``, "WebHook Verify").

**Defaults, at create** (:func:`admit_quota_defaults`): an empty ``parent`` label becomes
``koordinator-root-quota``; a quota without ``tree-id`` takes its parent's; a missing
``shared-weight`` annotation becomes ``max``, and one that names other resources than ``max``
gets the missing ones from ``max`` and loses the others. An update that leaves out the
``parent`` or ``tree-id`` label or the ``shared-weight`` annotation keeps the stored ones (as
``kubectl apply`` keeps what the webhook added), so the same manifest applied again is
unchanged.

**Rules** (:func:`admit_quota`; on update only when the parent, is-parent and tree-id labels,
the namespaces annotation or the spec changed):

- quota names are unique across namespaces, and a namespace is bound (``namespaces``
  annotation) to one quota at most;
- ``min`` and ``max`` are not negative, every ``min`` resource is in ``max`` and at most its
  ``max``; ``shared-weight`` is a ResourceList that is not negative;
- ``is-parent`` and ``tree-id`` do not change; a quota's tree-id is its parent's and its
  children's;
- below a parent other than the root: the parent exists and is a parent (``is-parent:
  "true"``), its ancestors do not include the quota itself, the resource names of ``max`` are
  those of the parent's ``max`` (and of each child's), those of ``min`` are among the parent's;
- unless the quota is a tree root (``is-root``) or allows a forced update
  (``allow-force-update``): the ``min`` of the quota and its siblings add up to at most the
  parent's ``min`` (not checked below the root), and its children's ``min`` to at most its own.

Koordinator's webhook of v1.8 lets ``is-parent`` change when the quota has no children (to
false) or no pods (to true); the manual and controller-spec §4.3 keep it immutable, as here.

**Pods** (:func:`admit_pod_quota`): a pod is refused when the quota it is charged to
(:func:`controller.quota.check.quota_name`) is a parent group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import msgspec

from apis import bounded
from apis import constants as k
from apis.core import Pod
from apis.meta import Object
from apis.quantity import QuantityError
from apis.quota import ElasticQuota
from apis.resources import ResourceList
from apis.validation import FieldError, invalid
from controller.admission.base import InvalidError, Lookup
from controller.quota.check import QuotaIndex, format_resources, quota_name
from controller.quota.status import encode_resources

__all__ = ["admit_pod_quota", "admit_quota", "admit_quota_defaults"]

_PARENT: Final = f"metadata.labels[{k.LABEL_QUOTA_PARENT}]"
_IS_PARENT: Final = f"metadata.labels[{k.LABEL_QUOTA_IS_PARENT}]"
_TREE_ID: Final = f"metadata.labels[{k.LABEL_QUOTA_TREE_ID}]"
_SHARED_WEIGHT: Final = f"metadata.annotations[{k.ANNOTATION_QUOTA_SHARED_WEIGHT}]"
_NAMESPACES: Final = f"metadata.annotations[{k.ANNOTATION_QUOTA_NAMESPACES}]"
_POD_QUOTA: Final = f"metadata.labels[{k.LABEL_QUOTA_NAME}]"
#: Quotas that cannot be changed by a write.
_FIXED: Final = frozenset({k.QUOTA_ROOT, k.QUOTA_SYSTEM})


def _parent(quota: ElasticQuota) -> str:
    return quota.metadata.labels.get(k.LABEL_QUOTA_PARENT) or k.QUOTA_ROOT


def _is_parent(quota: ElasticQuota) -> bool:
    return quota.metadata.labels.get(k.LABEL_QUOTA_IS_PARENT) == "true"


def _tree_id(quota: ElasticQuota) -> str:
    return quota.metadata.labels.get(k.LABEL_QUOTA_TREE_ID, "")


def _show(amounts: Mapping[str, int]) -> str:
    return format_resources(amounts) or "{}"


def _keys(amounts: Mapping[str, int]) -> str:
    return ",".join(sorted(amounts)) or "none"


def _bound_namespaces(quota: ElasticQuota) -> list[str]:
    """The namespaces the annotation binds (Koordinator ignores one that is not a JSON list
    of strings, and so does this)."""
    text = quota.metadata.annotations.get(k.ANNOTATION_QUOTA_NAMESPACES, "")
    try:
        value = bounded.decode_any(text, k.ANNOTATION_QUOTA_NAMESPACES) if text else []
    except bounded.BoundedError:
        return []
    return [n for n in value if isinstance(n, str) and n] if isinstance(value, list) else []


def _shared_weight(quota: ElasticQuota) -> ResourceList | None:
    """The ``shared-weight`` annotation (None when absent); InvalidError when it is not valid."""
    text = quota.metadata.annotations.get(k.ANNOTATION_QUOTA_SHARED_WEIGHT, "")
    if not text:
        return None
    try:
        raw = bounded.decode_any(text, "")
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return ResourceList.parse(raw)
    except (ValueError, QuantityError) as err:
        raise InvalidError(
            invalid(_SHARED_WEIGHT, text, f"must be a JSON object of resource quantities: {err}")
        ) from err


class _Others:
    """The stored quotas other than the one being written, by name."""

    def __init__(self, quotas: Sequence[ElasticQuota], own: tuple[str, str]) -> None:
        self.by_name: dict[str, ElasticQuota] = {}
        for quota in quotas:
            if (quota.metadata.namespace, quota.metadata.name) != own:
                self.by_name.setdefault(quota.metadata.name, quota)

    def children(self, name: str) -> list[ElasticQuota]:
        return [q for q in self.by_name.values() if _parent(q) == name]


def admit_quota_defaults(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Fill in a quota's parent, tree-id and shared weight (see the module docstring)."""
    if not isinstance(obj, ElasticQuota) or obj.metadata.name == k.QUOTA_ROOT:
        return obj
    labels = dict(obj.metadata.labels)
    annotations = dict(obj.metadata.annotations)
    if isinstance(old, ElasticQuota):
        for key in (k.LABEL_QUOTA_PARENT, k.LABEL_QUOTA_TREE_ID):
            if not labels.get(key) and old.metadata.labels.get(key):
                labels[key] = old.metadata.labels[key]
        kept = old.metadata.annotations.get(k.ANNOTATION_QUOTA_SHARED_WEIGHT)
        if kept and not annotations.get(k.ANNOTATION_QUOTA_SHARED_WEIGHT):
            annotations[k.ANNOTATION_QUOTA_SHARED_WEIGHT] = kept
    elif old is not None:
        return obj
    if not labels.get(k.LABEL_QUOTA_PARENT):
        labels[k.LABEL_QUOTA_PARENT] = k.QUOTA_ROOT
    parent_name = labels[k.LABEL_QUOTA_PARENT]
    if old is None and not labels.get(k.LABEL_QUOTA_TREE_ID) and parent_name != k.QUOTA_ROOT:
        own = (obj.metadata.namespace, obj.metadata.name)
        parent = _Others(lookup.list(ElasticQuota), own).by_name.get(parent_name)
        if parent is None:
            raise InvalidError(invalid(_PARENT, parent_name, "no quota of that name exists"))
        if _tree_id(parent):
            labels[k.LABEL_QUOTA_TREE_ID] = _tree_id(parent)
    max_ = obj.spec.max
    weight = _shared_weight(obj)
    if weight is None:
        annotations[k.ANNOTATION_QUOTA_SHARED_WEIGHT] = encode_resources(max_)
    elif set(weight) != set(max_):
        fixed = {name: weight.get(name, amount) for name, amount in max_.items()}
        annotations[k.ANNOTATION_QUOTA_SHARED_WEIGHT] = encode_resources(fixed)
    meta = obj.metadata
    if labels == meta.labels and annotations == meta.annotations:
        return obj
    return msgspec.structs.replace(
        obj, metadata=msgspec.structs.replace(meta, labels=labels, annotations=annotations)
    )


def _watched(quota: ElasticQuota) -> tuple[object, ...]:
    """What the rules read of a quota: an update that changes none of it is not checked."""
    labels, annotations = quota.metadata.labels, quota.metadata.annotations
    return (
        labels.get(k.LABEL_QUOTA_PARENT, ""),
        labels.get(k.LABEL_QUOTA_IS_PARENT, ""),
        labels.get(k.LABEL_QUOTA_TREE_ID, ""),
        annotations.get(k.ANNOTATION_QUOTA_NAMESPACES, ""),
        quota.spec,
    )


def _self_errors(quota: ElasticQuota) -> list[FieldError]:
    errors: list[FieldError] = []
    min_, max_ = quota.spec.min, quota.spec.max
    for field, amounts in (("spec.max", max_), ("spec.min", min_)):
        negative = sorted(name for name, amount in amounts.items() if amount < 0)
        if negative:
            errors.append(
                invalid(field, _show(amounts), f"must not be negative (in {', '.join(negative)})")
            )
    weight = _shared_weight(quota)
    if weight is not None and not errors:
        negative = sorted(name for name, amount in weight.items() if amount < 0)
        if negative:
            errors.append(
                invalid(
                    _SHARED_WEIGHT,
                    quota.metadata.annotations[k.ANNOTATION_QUOTA_SHARED_WEIGHT],
                    f"must not be negative (in {', '.join(negative)})",
                )
            )
    for name, amount in sorted(min_.items()):
        if name not in max_:
            errors.append(
                invalid("spec.min", _show(min_), f"names {name}, which spec.max does not name")
            )
        elif amount > max_[name]:
            errors.append(
                invalid("spec.min", _show(min_), f"{name} is more than spec.max ({_show(max_)})")
            )
    return errors


def _exceeds(amounts: Mapping[str, int], limit: Mapping[str, int]) -> list[str]:
    """Names of ``amounts`` above ``limit`` (a name ``limit`` lacks counts as 0)."""
    return sorted(name for name, amount in amounts.items() if amount > limit.get(name, 0))


def _topology_errors(
    quota: ElasticQuota, old: ElasticQuota | None, others: _Others
) -> list[FieldError]:
    name = quota.metadata.name
    labels = quota.metadata.labels
    errors: list[FieldError] = []
    if old is not None and _is_parent(old) != _is_parent(quota):
        errors.append(
            invalid(
                _IS_PARENT,
                labels.get(k.LABEL_QUOTA_IS_PARENT, ""),
                "a quota cannot turn from a parent group into a child group or back",
            )
        )
    if old is not None and _tree_id(old) != _tree_id(quota):
        errors.append(invalid(_TREE_ID, _tree_id(quota), f"is immutable (was {_tree_id(old)!r})"))
    parent_name = _parent(quota)
    parent = others.by_name.get(parent_name) if parent_name != k.QUOTA_ROOT else None
    if parent is not None and _tree_id(parent) != _tree_id(quota):
        errors.append(
            invalid(
                _TREE_ID,
                _tree_id(quota),
                f"differs from that of the parent quota {parent_name} ({_tree_id(parent)!r})",
            )
        )
    children = others.children(name)
    errors.extend(
        invalid(
            _TREE_ID,
            _tree_id(quota),
            f"differs from that of the child quota {child.metadata.name} ({_tree_id(child)!r})",
        )
        for child in children
        if _tree_id(child) != _tree_id(quota)
    )
    if errors or (parent_name == k.QUOTA_ROOT and not _is_parent(quota)):
        return errors
    min_, max_ = quota.spec.min, quota.spec.max
    if parent_name != k.QUOTA_ROOT:
        if parent_name == name:
            return [invalid(_PARENT, parent_name, "a quota cannot be its own parent")]
        if parent is None:
            return [invalid(_PARENT, parent_name, "no quota of that name exists")]
        if not _is_parent(parent):
            return [
                invalid(
                    _PARENT,
                    parent_name,
                    f"quota {parent_name} is not a parent group (its label"
                    f' {k.LABEL_QUOTA_IS_PARENT} is not "true")',
                )
            ]
        ancestor: ElasticQuota | None = parent
        seen = {name}
        while ancestor is not None and _parent(ancestor) != k.QUOTA_ROOT:
            if ancestor.metadata.name in seen:
                break
            seen.add(ancestor.metadata.name)
            if _parent(ancestor) == name:
                return [invalid(_PARENT, parent_name, f"makes quota {name} its own ancestor")]
            ancestor = others.by_name.get(_parent(ancestor))
        if set(parent.spec.max) != set(max_):
            errors.append(
                invalid(
                    "spec.max",
                    _show(max_),
                    f"must name the same resources as the max of the parent quota"
                    f" {parent_name} ({_keys(parent.spec.max)})",
                )
            )
        if not set(min_) <= set(parent.spec.min):
            errors.append(
                invalid(
                    "spec.min",
                    _show(min_),
                    f"must name only resources of the min of the parent quota {parent_name}"
                    f" ({_keys(parent.spec.min)})",
                )
            )
    for child in children:
        if set(child.spec.max) != set(max_):
            errors.append(
                invalid(
                    "spec.max",
                    _show(max_),
                    f"must name the same resources as the max of the child quota"
                    f" {child.metadata.name} ({_keys(child.spec.max)})",
                )
            )
        if not set(child.spec.min) <= set(min_):
            errors.append(
                invalid(
                    "spec.min",
                    _show(min_),
                    f"must name every resource of the min of the child quota"
                    f" {child.metadata.name} ({_keys(child.spec.min)})",
                )
            )
    if errors:
        return errors
    if labels.get(k.LABEL_QUOTA_ALLOW_FORCE_UPDATE) == "true":
        return errors
    if labels.get(k.LABEL_QUOTA_IS_ROOT) == "true":
        return errors
    if parent is not None:
        siblings = ResourceList.total(q.spec.min for q in others.children(parent_name)) + min_
        over = _exceeds(siblings, parent.spec.min)
        if over:
            errors.append(
                invalid(
                    "spec.min",
                    _show(min_),
                    f"the min of the children of {parent_name} would add up to"
                    f" {_show(siblings)}, more than its min ({_show(parent.spec.min)})"
                    f" in {', '.join(over)}",
                )
            )
    if children:
        total = ResourceList.total(child.spec.min for child in children)
        over = _exceeds(total, min_)
        if over:
            errors.append(
                invalid(
                    "spec.min",
                    _show(min_),
                    f"is less than the min of its children together ({_show(total)}) in"
                    f" {', '.join(over)}",
                )
            )
    return errors


def admit_quota(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Refuse a quota that breaks the rules of the module docstring."""
    if not isinstance(obj, ElasticQuota):
        return obj
    previous = old if isinstance(old, ElasticQuota) else None
    if previous is not None and _watched(previous) == _watched(obj):
        return obj
    name = obj.metadata.name
    if previous is not None and name in _FIXED:
        raise InvalidError(invalid("metadata.name", name, "the built-in quota cannot be changed"))
    if name == k.QUOTA_ROOT:
        return obj
    own = (obj.metadata.namespace, name)
    quotas = lookup.list(ElasticQuota)
    errors: list[FieldError] = []
    if previous is None:
        errors.extend(
            invalid(
                "metadata.name",
                name,
                f"a quota of that name exists in namespace {quota.metadata.namespace}"
                " (quota names are unique across namespaces)",
            )
            for quota in quotas
            if quota.metadata.name == name and quota.metadata.namespace != own[0]
        )
    bound = {
        namespace: quota.metadata.name
        for quota in quotas
        if (quota.metadata.namespace, quota.metadata.name) != own
        for namespace in _bound_namespaces(quota)
    }
    errors.extend(
        invalid(
            _NAMESPACES,
            obj.metadata.annotations[k.ANNOTATION_QUOTA_NAMESPACES],
            f"namespace {namespace} is bound to quota {bound[namespace]} already",
        )
        for namespace in _bound_namespaces(obj)
        if namespace in bound
    )
    errors.extend(_self_errors(obj))
    if not errors:
        errors.extend(_topology_errors(obj, previous, _Others(quotas, own)))
    if errors:
        raise InvalidError(*errors)
    return obj


def admit_pod_quota(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Refuse a pod charged to a parent quota group."""
    if not isinstance(obj, Pod):
        return obj
    label = obj.metadata.labels.get(k.LABEL_QUOTA_NAME, "")
    if isinstance(old, Pod) and old.metadata.labels.get(k.LABEL_QUOTA_NAME, "") == label:
        return obj
    quotas = lookup.list(ElasticQuota)
    if label != k.QUOTA_ROOT and not any(_is_parent(q) for q in quotas):
        return obj
    index = QuotaIndex.build(quotas)
    charged = quota_name(obj, index)
    quota = index.get(charged)
    if quota is None or charged == k.QUOTA_DEFAULT or not _is_parent(quota):
        return obj
    field = _POD_QUOTA if label else "metadata.namespace"
    raise InvalidError(
        invalid(
            field,
            label or obj.metadata.namespace,
            f"pods cannot be charged to quota {charged}: it is a parent group",
        )
    )
