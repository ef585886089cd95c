"""The API server's field validation of resource amounts and priorities (kubernetes.md; what
``ValidatePod``, ``ValidateNode`` and a CRD's schema refuse before anything is stored).

- every quantity in a pod's ``requests`` and ``limits`` (containers, init containers and the
  pod-level ``spec.resources``) and ``spec.overhead``, a Node's ``status.capacity`` and
  ``status.allocatable``, and a Reservation's or workload's ``spec.template`` is at least 0::

      spec.containers[0].resources.requests[cpu]: Invalid value: "-100": must be greater
      than or equal to 0

- a request is at most the limit of the same resource, where both are given (a limit without a
  request stands for the request, as Kubernetes defaults it: :func:`apis.core.pod_requests`)::

      spec.containers[0].resources.requests: Invalid value: "3": must be less than or
      equal to cpu limit of 2

- a pod's ``spec.priority`` is an int32 (Kubernetes' field type; ``PriorityClass.value`` is
  bounded by :mod:`controller.admission.priority`).

Values are printed as stored (:meth:`apis.resources.ResourceList.stored_form`): a quantity
read from plain digits keeps its text and can never be negative, so it is not read at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from apis.core import Container, Node, Pod, PodSpec, PodTemplateSpec, ResourceRequirements
from apis.meta import Object
from apis.resources import ResourceList
from apis.validation import FieldError, invalid
from controller.admission.base import InvalidError, Lookup

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "NEGATIVE",
    "admit_node_resources",
    "admit_pod_fields",
    "admit_pod_template",
    "negative_amounts",
    "pod_spec_errors",
]

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
#: What the API server says of a negative quantity.
NEGATIVE: Final = "must be greater than or equal to 0"


def _key(path: str, name: str) -> str:
    return f"{path}[{name}]"


def negative_amounts(amounts: ResourceList, path: str, *, key: bool = True) -> Iterator[FieldError]:
    """One error per negative quantity of ``amounts``, the field ``path[name]`` (``path.name``
    when not ``key``, as the API server names a Node's)."""
    if not amounts.any_negative():
        return
    for name, text in amounts.stored_form().items():
        if text.startswith("-"):
            yield invalid(_key(path, name) if key else f"{path}.{name}", text, NEGATIVE)


def _requirements(req: ResourceRequirements, path: str) -> Iterator[FieldError]:
    requests, limits = req.requests, req.limits
    yield from negative_amounts(requests, f"{path}.requests")
    yield from negative_amounts(limits, f"{path}.limits")
    if not requests or not limits:
        return
    asked, shown = requests.amounts, requests.stored_form()
    capped, capped_shown = limits.amounts, limits.stored_form()
    for name, amount in asked.items():
        cap = capped.get(name)
        if cap is not None and amount > cap:
            yield invalid(
                f"{path}.requests",
                shown[name],
                f"must be less than or equal to {name} limit of {capped_shown[name]}",
            )


def _containers(containers: tuple[Container, ...], path: str) -> Iterator[FieldError]:
    for index, container in enumerate(containers):
        resources = container.resources
        if resources.requests or resources.limits:
            yield from _requirements(resources, f"{path}[{index}].resources")


def _within(req: ResourceRequirements) -> bool:
    """No negative amount and no request above its limit (nothing formatted: the common case)."""
    requests, limits = req.requests, req.limits
    if requests.any_negative() or limits.any_negative():
        return False
    if not requests or not limits:
        return True
    capped = limits.amounts
    return all(amount <= capped.get(name, amount) for name, amount in requests.amounts.items())


def _spec_ok(spec: PodSpec) -> bool:
    for container in (*spec.containers, *spec.init_containers):
        resources = container.resources
        if (resources.requests or resources.limits) and not _within(resources):
            return False
    resources = spec.resources
    if (resources.requests or resources.limits) and not _within(resources):
        return False
    priority = spec.priority
    in_range = priority is None or INT32_MIN <= priority <= INT32_MAX
    return in_range and not spec.overhead.any_negative()


def pod_spec_errors(spec: PodSpec, path: str = "spec") -> list[FieldError]:
    """Every problem of the module docstring with the pod spec at ``path``."""
    if _spec_ok(spec):
        return []
    errors = [
        *_containers(spec.containers, f"{path}.containers"),
        *_containers(spec.init_containers, f"{path}.initContainers"),
        *negative_amounts(spec.overhead, f"{path}.overhead"),
    ]
    if spec.resources.requests or spec.resources.limits:
        errors.extend(_requirements(spec.resources, f"{path}.resources"))
    priority = spec.priority
    if priority is not None and not INT32_MIN <= priority <= INT32_MAX:
        errors.append(
            invalid(
                f"{path}.priority",
                str(priority),
                f"must be between {INT32_MIN} and {INT32_MAX} (an int32)",
            )
        )
    return errors


def admit_pod_fields(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Refuse a pod breaking the rules of the module docstring."""
    if isinstance(obj, Pod):
        errors = pod_spec_errors(obj.spec)
        if errors:
            raise InvalidError(*errors)
    return obj


def admit_node_resources(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Refuse a Node whose capacity or allocatable has a negative quantity."""
    if isinstance(obj, Node):
        status = obj.status
        errors = [
            *negative_amounts(status.capacity, "status.capacity", key=False),
            *negative_amounts(status.allocatable, "status.allocatable", key=False),
        ]
        if errors:
            raise InvalidError(*errors)
    return obj


def admit_pod_template(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Refuse an object whose ``spec.template`` (a Reservation's, a workload's pod template)
    breaks the pod rules, as the API server validates a template as the pods it makes."""
    spec = getattr(obj, "spec", None)
    template = getattr(spec, "template", None)
    if isinstance(template, PodTemplateSpec):
        errors = pod_spec_errors(template.spec, "spec.template.spec")
        if errors:
            raise InvalidError(*errors)
    return obj
