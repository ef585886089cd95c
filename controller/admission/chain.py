"""The admission table and the call the store makes on every create, update and apply.

:data:`PLUGINS` is ordered as the API server runs admission: the plugins that change the
object first, then those that only check it. :func:`admit` runs those registered for the
object's type, each on what the one before returned, and turns a refusal into the store's
``Invalid`` (``Forbidden`` for a :class:`~controller.admission.base.ForbiddenError`).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from typing import Final, Protocol, TypeVar

from apis.apps import DaemonSet, Deployment, ReplicaSet, StatefulSet
from apis.core import Job, Node, Pod, PriorityClass
from apis.kinds import Kind, Registry
from apis.meta import Object
from apis.quota import ElasticQuota
from apis.scheduling import Reservation
from controller.admission import elasticquota, poddefaults, priority, validation
from controller.admission.base import ForbiddenError, InvalidError, Plugin, Registration
from controller.errors import Forbidden, Invalid, NotFound

__all__ = ["PLUGINS", "Reader", "StoreLookup", "admit", "plugins_for"]

ObjT = TypeVar("ObjT", bound=Object)

#: Name -> plugin, in the order they run (mutating ones first).
PLUGINS: Final[tuple[Registration, ...]] = (
    Registration("PodDefaults", (Pod,), poddefaults.admit_pod_defaults),
    Registration("Priority", (Pod,), priority.admit_pod_priority),
    Registration("ElasticQuotaDefaults", (ElasticQuota,), elasticquota.admit_quota_defaults),
    Registration("PodValidation", (Pod,), validation.admit_pod_fields),
    Registration("NodeValidation", (Node,), validation.admit_node_resources),
    Registration(
        "PodTemplateValidation",
        (Reservation, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job),
        validation.admit_pod_template,
    ),
    Registration("PriorityClass", (PriorityClass,), priority.admit_priority_class),
    Registration("ElasticQuota", (ElasticQuota,), elasticquota.admit_quota),
    Registration("PodElasticQuota", (Pod,), elasticquota.admit_pod_quota),
)


def _by_type(table: tuple[Registration, ...]) -> Mapping[type[Object], tuple[Plugin, ...]]:
    found: dict[type[Object], list[Plugin]] = {}
    for entry in table:
        for kind in entry.kinds:
            found.setdefault(kind, []).append(entry.plugin)
    return {kind: tuple(plugins) for kind, plugins in found.items()}


#: :data:`PLUGINS` by the object type they are called for (worked out once).
_PLUGINS_BY_TYPE: Final = _by_type(PLUGINS)


def plugins_for(
    struct: type[Object], table: tuple[Registration, ...] = PLUGINS
) -> tuple[Plugin, ...]:
    """The plugins ``table`` runs for objects of type ``struct``, in order."""
    by_type = _PLUGINS_BY_TYPE if table is PLUGINS else _by_type(table)
    return by_type.get(struct, ())


class Reader(Protocol):
    """What :class:`StoreLookup` reads through (the store's own read methods)."""

    @property
    def registry(self) -> Registry: ...

    def get(self, kind: Kind, name: str, namespace: str = "") -> Object: ...

    def list(self, kind: Kind) -> tuple[builtins.list[Object], int]: ...


class StoreLookup:
    """A :class:`~controller.admission.base.Lookup` over a store's reads."""

    __slots__ = ("_reader",)

    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def get(self, kind: type[ObjT], name: str, namespace: str = "") -> ObjT | None:
        try:
            found = self._reader.get(self._reader.registry.for_type(kind), name, namespace)
        except NotFound:
            return None
        return found if isinstance(found, kind) else None

    def list(self, kind: type[ObjT]) -> Sequence[ObjT]:
        items = self._reader.list(self._reader.registry.for_type(kind))[0]
        return [obj for obj in items if isinstance(obj, kind)]


def admit(
    kind: Kind,
    obj: ObjT,
    old: Object | None,
    reader: Reader,
    table: tuple[Registration, ...] = PLUGINS,
) -> ObjT:
    """``obj`` as the plugins of ``table`` let it be stored; ``Invalid`` or ``Forbidden``
    naming the field and value when one refuses it."""
    plugins = plugins_for(type(obj), table)
    if not plugins:
        return obj
    lookup = StoreLookup(reader)
    meta = obj.metadata
    name = meta.name or meta.generate_name
    current: Object = obj
    try:
        for plugin in plugins:
            current = plugin(current, old, lookup)
    except InvalidError as err:
        raise Invalid.of(kind, name, err.causes, meta.namespace) from err
    except ForbiddenError as err:
        raise Forbidden.because(
            kind, name, err.reason, meta.namespace, field=err.field, value=err.value
        ) from err
    assert isinstance(current, type(obj)), "an admission plugin changed the object's type"
    return current
