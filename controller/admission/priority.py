"""The Priority admission rules of Kubernetes (kubernetes.md; the ``Priority`` admission
plugin of the API server), for pods and PriorityClasses.

**Pods, at create.** ``spec.priorityClassName`` names a class: a stored PriorityClass, one of
the two system classes that always exist (``system-cluster-critical`` 2000000000,
``system-node-critical`` 2000001000), or one of the four classes Koordinator installs, which
koordpy installs with itself (``koord-prod`` 9000, ``koord-mid`` 7000, ``koord-batch`` 5000,
``koord-free`` 3000; the lowest value of each band of :class:`apis.qos.PriorityClass`), a
stored object of that name taking precedence. A pod
naming no class takes the ``globalDefault`` class (the lowest value when several claim it),
else priority 0. The pod is stored with ``spec.priority`` and ``spec.preemptionPolicy`` of its
class (``PreemptLowerPriority`` unless the class says otherwise). Refused: a class that does
not exist, and a pod that sets a priority or preemption policy other than its class's.

One leniency: a pod that names no class while no class is the global default keeps the
``spec.priority`` it sets (Kubernetes would refuse anything but 0), so that tools writing
pods with a resolved priority and no class, as koordpy's own tests and benches do, keep
working.

**Pods, at update.** What admission set at create stays when an update leaves it out (as
``kubectl apply`` keeps fields the manifest does not set): an update without
``spec.priority``, ``spec.preemptionPolicy`` or (for a pod given the global default's)
``spec.priorityClassName`` keeps the stored ones.

**PriorityClasses.** Names starting ``system-`` are reserved; a value above 1000000000 is
reserved for the system classes, one below -2147483648 is no int32; ``value`` and
``preemptionPolicy`` do not change after create; at most one class is the global default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from apis import qos
from apis.core import Pod, PriorityClass
from apis.meta import Object
from apis.validation import FieldError, invalid
from controller.admission.base import ForbiddenError, InvalidError, Lookup
from controller.admission.validation import INT32_MAX, INT32_MIN

__all__ = [
    "BUILTIN_CLASSES",
    "HIGHEST_USER_PRIORITY",
    "PREEMPT_LOWER_PRIORITY",
    "ClassValue",
    "admit_pod_priority",
    "admit_priority_class",
    "class_value",
]

PREEMPT_LOWER_PRIORITY: Final = "PreemptLowerPriority"
PREEMPT_NEVER: Final = "Never"
#: The highest value a user-defined PriorityClass may have.
HIGHEST_USER_PRIORITY: Final = 1_000_000_000
SYSTEM_PREFIX: Final = "system-"


@dataclass(frozen=True, slots=True)
class ClassValue:
    """What a PriorityClass gives the pods that name it."""

    name: str
    value: int
    preemption_policy: str = PREEMPT_LOWER_PRIORITY


#: Classes that exist without an object: Kubernetes' system classes and Koordinator's.
BUILTIN_CLASSES: Final[dict[str, ClassValue]] = {
    "system-cluster-critical": ClassValue("system-cluster-critical", 2_000_000_000),
    "system-node-critical": ClassValue("system-node-critical", 2_000_001_000),
    **{
        c.value: ClassValue(c.value, value)
        for c, value in (
            (qos.PriorityClass.PROD, 9000),
            (qos.PriorityClass.MID, 7000),
            (qos.PriorityClass.BATCH, 5000),
            (qos.PriorityClass.FREE, 3000),
        )
    },
}
_SYSTEM_CLASSES: Final = frozenset(n for n in BUILTIN_CLASSES if n.startswith(SYSTEM_PREFIX))


def _of(obj: PriorityClass) -> ClassValue:
    return ClassValue(obj.metadata.name, obj.value, obj.preemption_policy or PREEMPT_LOWER_PRIORITY)


def class_value(name: str, lookup: Lookup) -> ClassValue | None:
    """The class named ``name`` (a stored object first, then the built-in ones), or None."""
    stored = lookup.get(PriorityClass, name)
    if stored is not None:
        return _of(stored)
    return BUILTIN_CLASSES.get(name)


def _global_default(lookup: Lookup) -> ClassValue | None:
    defaults = [c for c in lookup.list(PriorityClass) if c.global_default]
    if not defaults:
        return None
    return _of(min(defaults, key=lambda c: (c.value, c.metadata.name)))


def admit_pod_priority(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Resolve a new pod's priority from its class (see the module docstring)."""
    if not isinstance(obj, Pod):
        return obj
    if isinstance(old, Pod):
        return _kept(obj, old)
    if old is not None:
        return obj
    spec = obj.spec
    named = spec.priority_class_name
    if named:
        found = class_value(named, lookup)
        if found is None:
            raise ForbiddenError(
                f"no PriorityClass with name {named} was found",
                field="spec.priorityClassName",
                value=named,
            )
        chosen = found
        class_name = named
    else:
        default = _global_default(lookup)
        if default is None:
            # No class at all: the pod's own figures stand (see the module docstring).
            chosen = ClassValue(
                "", spec.priority or 0, spec.preemption_policy or PREEMPT_LOWER_PRIORITY
            )
        else:
            chosen = default
        class_name = chosen.name
    source = f"PriorityClass {class_name}" if class_name else "a pod naming no PriorityClass"
    if spec.priority is not None and spec.priority != chosen.value:
        raise ForbiddenError(
            f"spec.priority {spec.priority} must not be set in the pod: the value of"
            f" {source} is {chosen.value}",
            field="spec.priority",
            value=str(spec.priority),
        )
    if spec.preemption_policy and spec.preemption_policy != chosen.preemption_policy:
        raise ForbiddenError(
            f"spec.preemptionPolicy {spec.preemption_policy} must not be set in the pod: the"
            f" preemption policy of {source} is {chosen.preemption_policy}",
            field="spec.preemptionPolicy",
            value=spec.preemption_policy,
        )
    if (
        spec.priority == chosen.value
        and spec.preemption_policy == chosen.preemption_policy
        and spec.priority_class_name == class_name
    ):
        return obj
    return msgspec.structs.replace(
        obj,
        spec=msgspec.structs.replace(
            spec,
            priority_class_name=class_name,
            priority=chosen.value,
            preemption_policy=chosen.preemption_policy,
        ),
    )


def _kept(pod: Pod, old: Pod) -> Pod:
    """``pod`` with the priority fields of ``old`` where it leaves them out."""
    spec, was = pod.spec, old.spec
    class_name = spec.priority_class_name or was.priority_class_name
    priority = spec.priority if spec.priority is not None else was.priority
    policy = spec.preemption_policy or was.preemption_policy
    if (class_name, priority, policy) == (
        spec.priority_class_name,
        spec.priority,
        spec.preemption_policy,
    ):
        return pod
    return msgspec.structs.replace(
        pod,
        spec=msgspec.structs.replace(
            spec, priority_class_name=class_name, priority=priority, preemption_policy=policy
        ),
    )


def admit_priority_class(obj: Object, old: Object | None, lookup: Lookup) -> Object:
    """Refuse a PriorityClass that breaks the rules of the module docstring."""
    if not isinstance(obj, PriorityClass):
        return obj
    name = obj.metadata.name
    errors: list[FieldError] = []
    if name.startswith(SYSTEM_PREFIX) and name not in _SYSTEM_CLASSES:
        errors.append(
            invalid("metadata.name", name, "the prefix 'system-' is reserved for system classes")
        )
    if name in _SYSTEM_CLASSES and obj.value != BUILTIN_CLASSES[name].value:
        errors.append(
            invalid("value", str(obj.value), f"must be {BUILTIN_CLASSES[name].value} for {name}")
        )
    if obj.value < INT32_MIN:
        errors.append(
            invalid(
                "value", str(obj.value), f"must be between {INT32_MIN} and {INT32_MAX} (an int32)"
            )
        )
    if name not in _SYSTEM_CLASSES and obj.value > HIGHEST_USER_PRIORITY:
        errors.append(
            FieldError(
                "value",
                "Forbidden",
                f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}",
            )
        )
    policy = obj.preemption_policy
    if policy is not None and policy not in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        errors.append(
            FieldError(
                "preemptionPolicy",
                "Unsupported value",
                f'supported values: "{PREEMPT_LOWER_PRIORITY}", "{PREEMPT_NEVER}"',
                policy,
            )
        )
    if isinstance(old, PriorityClass):
        if obj.value != old.value:
            errors.append(FieldError("value", "Forbidden", "may not be changed in an update"))
        if (obj.preemption_policy or PREEMPT_LOWER_PRIORITY) != (
            old.preemption_policy or PREEMPT_LOWER_PRIORITY
        ):
            errors.append(
                FieldError("preemptionPolicy", "Forbidden", "may not be changed in an update")
            )
    if errors:
        raise InvalidError(*errors)
    if obj.global_default:
        for other in lookup.list(PriorityClass):
            if other.global_default and other.metadata.name != name:
                raise ForbiddenError(
                    f"PriorityClass {other.metadata.name} is already the global default;"
                    " only one class can be",
                    field="globalDefault",
                    value="true",
                )
    return obj
