"""Kubernetes' rules for names, namespaces, label and annotation keys and values.

The basic checks are pure functions returning a list of reasons (empty when the value is
fine), so callers can combine them; :func:`object_meta` applies them to an ``ObjectMeta`` and
returns :class:`FieldError` values that print the way the Kubernetes API server words them::

    metadata.labels: Invalid value: "-bad": name part must start and end with a letter or digit...

Rules (Kubernetes ``apimachinery`` validation):

- object names are DNS-1123 subdomains: at most 253 characters, lowercase letters, digits,
  ``-`` and ``.``, each dot-separated part starting and ending with a letter or digit;
- namespace names are DNS-1123 labels: the same, at most 63 characters and without dots;
- label and annotation keys (and finalizers) are qualified names: an optional DNS-1123 subdomain
  prefix and ``/``, then a name of at most 63 letters, digits, ``-``, ``_`` and ``.`` that
  starts and ends with a letter or digit;
- label values are empty or at most 63 characters of the same alphabet as a key's name part;
- all annotations together (keys plus values) stay within 256 KiB.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apis.meta import ObjectMeta

__all__ = [
    "ANNOTATIONS_TOTAL_LIMIT",
    "DNS1123_LABEL_MAX",
    "DNS1123_SUBDOMAIN_MAX",
    "LABEL_VALUE_MAX",
    "QUALIFIED_NAME_MAX",
    "FieldError",
    "annotation_map",
    "dns1123_label",
    "dns1123_subdomain",
    "finalizer_list",
    "invalid",
    "label_map",
    "label_value",
    "namespace_name",
    "object_meta",
    "object_name",
    "qualified_name",
    "required",
]

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
ANNOTATIONS_TOTAL_LIMIT = 256 * 1024

_LABEL_PART = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL_PART)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL_PART}(?:\.{_LABEL_PART})*")
_QUALIFIED_PART = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

_LABEL_RULE = (
    "must be a lowercase RFC 1123 label: lowercase letters, digits and '-', starting and"
    " ending with a letter or digit (e.g. 'my-name' or '123-abc')"
)
_SUBDOMAIN_RULE = (
    "must be a lowercase RFC 1123 subdomain: lowercase letters, digits, '-' and '.', each"
    " dot-separated part starting and ending with a letter or digit (e.g. 'example.com')"
)
_NAME_PART_RULE = (
    "name part must be letters, digits, '-', '_' or '.', starting and ending with a letter or"
    " digit (e.g. 'MyName', 'my.name' or '123-abc')"
)
_VALUE_RULE = (
    "a label value must be empty or letters, digits, '-', '_' or '.', starting and ending with"
    " a letter or digit (e.g. 'MyValue', 'my_value' or '12345')"
)


def _too_long(limit: int) -> str:
    return f"must be no more than {limit} characters"


# --- basic rules -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _dns1123_label(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > DNS1123_LABEL_MAX:
        errors.append(_too_long(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.fullmatch(value):
        errors.append(_LABEL_RULE)
    return tuple(errors)


def dns1123_label(value: str) -> list[str]:
    """Reasons ``value`` is not a DNS-1123 label (namespace names)."""
    return list(_dns1123_label(value))


@functools.lru_cache(maxsize=4096)
def _dns1123_subdomain(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errors.append(_too_long(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errors.append(_SUBDOMAIN_RULE)
    return tuple(errors)


def dns1123_subdomain(value: str) -> list[str]:
    """Reasons ``value`` is not a DNS-1123 subdomain (object names, key prefixes)."""
    return list(_dns1123_subdomain(value))


def object_name(value: str) -> list[str]:
    """Reasons ``value`` is not a valid object name."""
    return list(_dns1123_subdomain(value))


def namespace_name(value: str) -> list[str]:
    """Reasons ``value`` is not a valid namespace name."""
    return list(_dns1123_label(value))


@functools.lru_cache(maxsize=4096)
def _qualified_name(value: str) -> tuple[str, ...]:
    prefix, slash, name = value.rpartition("/")
    errors: list[str] = []
    if slash:
        if "/" in prefix:
            return (
                "a qualified name must be a name with an optional DNS subdomain prefix and"
                " one '/' (e.g. 'example.com/MyName')",
            )
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend(f"prefix part {reason}" for reason in _dns1123_subdomain(prefix))
    if not name:
        errors.append("name part must be non-empty")
        return tuple(errors)
    if len(name) > QUALIFIED_NAME_MAX:
        errors.append(f"name part {_too_long(QUALIFIED_NAME_MAX)}")
    if not _QUALIFIED_PART.fullmatch(name):
        errors.append(_NAME_PART_RULE)
    return tuple(errors)


def qualified_name(value: str) -> list[str]:
    """Reasons ``value`` is not a qualified name (label and annotation keys, finalizers)."""
    return list(_qualified_name(value))


@functools.lru_cache(maxsize=4096)
def _label_value(value: str) -> tuple[str, ...]:
    if not value:
        return ()
    errors = []
    if len(value) > LABEL_VALUE_MAX:
        errors.append(_too_long(LABEL_VALUE_MAX))
    if not _QUALIFIED_PART.fullmatch(value):
        errors.append(_VALUE_RULE)
    return tuple(errors)


def label_value(value: str) -> list[str]:
    """Reasons ``value`` is not a valid label value (the empty string is valid)."""
    return list(_label_value(value))


# --- field errors ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field, printed as the Kubernetes API server prints it."""

    field: str
    type: str
    detail: str
    value: str | None = None

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.field}: {self.type}: {self.detail}"
        return f"{self.field}: {self.type}: {json.dumps(self.value)}: {self.detail}"


def invalid(field: str, value: str, detail: str) -> FieldError:
    return FieldError(field, "Invalid value", detail, value)


def required(field: str, detail: str) -> FieldError:
    return FieldError(field, "Required value", detail)


def label_map(values: Mapping[str, str], field: str = "metadata.labels") -> list[FieldError]:
    """Every bad key and value of a label map."""
    errors: list[FieldError] = []
    for key, value in values.items():
        bad = _qualified_name(key)
        if bad:
            errors.extend(invalid(field, key, reason) for reason in bad)
        if value:
            bad = _label_value(value)
            if bad:
                errors.extend(invalid(field, value, reason) for reason in bad)
    return errors


def annotation_map(
    values: Mapping[str, str], field: str = "metadata.annotations"
) -> list[FieldError]:
    """Every bad annotation key, and the total size limit."""
    errors: list[FieldError] = []
    total = 0
    for key, value in values.items():
        bad = _qualified_name(key.lower())
        if bad:
            errors.extend(invalid(field, key, reason) for reason in bad)
        total += len(key) + len(value)
    if total > ANNOTATIONS_TOTAL_LIMIT:
        errors.append(
            FieldError(field, "Too long", f"must have at most {ANNOTATIONS_TOTAL_LIMIT} bytes")
        )
    return errors


def finalizer_list(values: Sequence[str], field: str = "metadata.finalizers") -> list[FieldError]:
    """Every finalizer that is not a qualified name."""
    return [
        invalid(f"{field}[{index}]", value, reason)
        for index, value in enumerate(values)
        for reason in _qualified_name(value)
    ]


def object_meta(meta: ObjectMeta, *, namespaced: bool) -> list[FieldError]:
    """Every problem with the name, namespace, labels, annotations and finalizers of ``meta``.

    A missing name is reported unless ``generateName`` is set (the caller generates the name);
    a namespaced object's empty namespace is left to the caller's defaulting.
    """
    errors: list[FieldError] = []
    name = meta.name
    if name:
        bad = _dns1123_subdomain(name)
        if bad:
            errors.extend(invalid("metadata.name", name, reason) for reason in bad)
    elif not meta.generate_name:
        errors.append(required("metadata.name", "name or generateName is required"))
    namespace = meta.namespace
    if namespaced and namespace:
        bad = _dns1123_label(namespace)
        if bad:
            errors.extend(invalid("metadata.namespace", namespace, reason) for reason in bad)
    if meta.labels:
        errors.extend(label_map(meta.labels))
    if meta.annotations:
        errors.extend(annotation_map(meta.annotations))
    if meta.finalizers:
        errors.extend(finalizer_list(meta.finalizers))
    return errors
