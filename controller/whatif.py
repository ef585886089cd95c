"""What a simulation changes: the difference between the objects before and after, for
``koordpy simulate`` (``--from-cluster`` above all) to print.

:func:`changes` compares two sets of objects (pure): the pods bound and where, the QueueUnits
admitted, the pods removed and why (the simulation's Events), the Reservations that became
Available, the pods left pending and why, then every object created, changed or deleted,
field by field (resourceVersion, managedFields, generation and the timestamps of conditions
left out; conditions keyed by type, containers by name). :func:`render_table` prints it for
people.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import msgspec

from apis import codec
from apis.core import Event, Pod
from apis.kinds import Registry, default_registry
from apis.meta import Object
from apis.queueing import QueueUnit
from apis.scheduling import Reservation
from controller.cli.printing import align
from controller.queueing.phases import is_assigned

__all__ = [
    "Changes",
    "FieldChange",
    "ObjectChange",
    "PodBinding",
    "PodPending",
    "PodRemoval",
    "QueueUnitAdmission",
    "ReservationAvailable",
    "changes",
    "render_table",
]

#: Events without any time sort first.
_NO_TIME: Final = datetime.min.replace(tzinfo=UTC)

# --- what a simulation changes ---------------------------------------------------------------

CREATED: Final = "created"
CHANGED: Final = "changed"
DELETED: Final = "deleted"
#: Who changed an object (:attr:`ObjectChange.by`): the what-if's objects, the control loops.
BY_WHATIF: Final = "what-if"
BY_LOOPS: Final = "loops"
#: Reason of a pod removed that no Event of the simulation explains.
REMOVED_REASON: Final = "Deleted"
#: The phase of a Reservation pods can use.
AVAILABLE: Final = "Available"

#: Metadata that moves with every write: not a change.
_VOLATILE_METADATA: Final = ("resourceVersion", "managedFields", "generation")
#: Timestamps conditions (and statuses) carry: left out of the comparison.
_VOLATILE_FIELDS: Final = frozenset(
    {"lastTransitionTime", "lastProbeTime", "lastHeartbeatTime", "lastUpdateTime"}
)
#: Reasons of a pod's Events that say nothing about why it is gone.
_NOT_REMOVAL_REASONS: Final = frozenset({"Scheduled", "FailedScheduling"})
#: kind -> the fields shown for an object of it that was created or deleted (any other kind:
#: ``status.phase``).
SUMMARY_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "Pod": ("spec.nodeName", "status.phase"),
    "Node": ("spec.unschedulable",),
    "QueueUnit": ("spec.queue", "status.phase"),
    "Reservation": ("status.phase", "status.nodeName"),
    "ElasticQuota": ("spec.min", "spec.max"),
    "PodGroup": ("spec.minMember", "status.phase"),
    "PodMigrationJob": ("spec.podRef.namespace", "spec.podRef.name", "status.phase"),
    "Job": ("spec.suspend", "status.active"),
}
_DEFAULT_SUMMARY: Final = ("status.phase",)
#: Fields a table row shows of one object before ``+N more``.
TABLE_FIELDS: Final = 8
#: Characters of one value a table cell shows.
TABLE_VALUE_WIDTH: Final = 60


class FieldChange(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One field (a dotted path; ``[key]`` for a map key holding dots or slashes and for a
    list entry named by its ``type`` or ``name``) before and after; None: absent."""

    path: str
    before: Any = None
    after: Any = None


class ObjectChange(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An object created, changed or deleted, with what differs (for a created or deleted
    one: its :data:`SUMMARY_FIELDS`)."""

    action: str
    api_version: str
    kind: str
    namespace: str = ""
    name: str
    #: :data:`BY_WHATIF` and/or :data:`BY_LOOPS` (empty where not known).
    by: tuple[str, ...] = ()
    fields: tuple[FieldChange, ...] = ()


class PodBinding(msgspec.Struct, frozen=True, kw_only=True):
    """A pod the simulation bound to a node."""

    namespace: str
    name: str
    node: str


class PodRemoval(msgspec.Struct, frozen=True, kw_only=True):
    """A pod gone (or being deleted, or replaced by another of the same name), with the reason
    and message of the simulation's last Event about it (:data:`REMOVED_REASON` without)."""

    namespace: str
    name: str
    node: str = ""
    reason: str = REMOVED_REASON
    message: str = ""


class PodPending(msgspec.Struct, frozen=True, kw_only=True):
    """A pod the simulation touched and left unbound: ``PodScheduled=False``."""

    namespace: str
    name: str
    reason: str = ""
    message: str = ""


class QueueUnitAdmission(msgspec.Struct, frozen=True, kw_only=True):
    """A QueueUnit that came to hold quota (admitted, or a phase past admission)."""

    namespace: str
    name: str
    queue: str = ""
    phase: str = ""


class ReservationAvailable(msgspec.Struct, frozen=True, kw_only=True):
    """A Reservation that became ``Available``, on its node."""

    name: str
    node: str = ""


class Changes(msgspec.Struct, frozen=True, kw_only=True):
    """What a simulation changed (:func:`changes`); each part in the kind table's order, then
    by namespace and name."""

    bindings: tuple[PodBinding, ...] = ()
    admitted: tuple[QueueUnitAdmission, ...] = ()
    removed: tuple[PodRemoval, ...] = ()
    reservations: tuple[ReservationAvailable, ...] = ()
    pending: tuple[PodPending, ...] = ()
    objects: tuple[ObjectChange, ...] = ()
    #: Events the simulation recorded (not listed: ``simulate -o yaml`` without
    #: ``--from-cluster`` prints them).
    events: int = 0

    @property
    def empty(self) -> bool:
        """Whether no object would change (a removed pod is a changed object too)."""
        return not self.objects


_Key = tuple[int, str, str]


def _child(path: str, key: str) -> str:
    if any(c in key for c in "./[] "):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _entry_key(items: Sequence[Any]) -> str | None:
    """The field naming each entry of a list of maps (``type``, else ``name``), if every entry
    has one and no two share it."""
    for field in ("type", "name"):
        names = [item.get(field) if isinstance(item, dict) else None for item in items]
        if all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names):
            return field
    return None


def _flatten_fields(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in _VOLATILE_FIELDS:
                _flatten_fields(item, _child(path, key), out)
        return
    if isinstance(value, (list, tuple)) and value and (field := _entry_key(value)) is not None:
        for item in value:
            entry = f"{path}[{item[field]}]"
            size = len(out)
            _flatten_fields({k: v for k, v in item.items() if k != field}, entry, out)
            if len(out) == size:
                out[entry] = {}
        return
    out[path] = value


def _document(obj: Object) -> dict[str, Any]:
    """``obj`` on the wire, without the metadata every write moves."""
    doc: dict[str, Any] = codec.to_builtins(obj)
    meta = doc.get("metadata")
    if isinstance(meta, dict):
        doc["metadata"] = {k: v for k, v in meta.items() if k not in _VOLATILE_METADATA}
    return doc


def _lookup(doc: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


class _Compared:
    """Objects' flattened documents, worked out once per object (pure: a cache for one call)."""

    def __init__(self) -> None:
        self._flat: dict[int, tuple[Object, dict[str, Any]]] = {}

    def flat(self, obj: Object) -> dict[str, Any]:
        found = self._flat.get(id(obj))
        if found is not None and found[0] is obj:
            return found[1]
        out: dict[str, Any] = {}
        _flatten_fields(_document(obj), "", out)
        self._flat[id(obj)] = (obj, out)
        return out

    def same(self, a: Object | None, b: Object | None) -> bool:
        if a is b:
            return True
        if a is None or b is None:
            return False
        return self.flat(a) == self.flat(b)

    def fields(self, a: Object, b: Object) -> tuple[FieldChange, ...]:
        old, new = self.flat(a), self.flat(b)
        paths = [*new, *(p for p in old if p not in new)]
        return tuple(
            FieldChange(path=p, before=old.get(p), after=new.get(p))
            for p in paths
            if old.get(p) != new.get(p)
        )


def _summary(obj: Object) -> dict[str, Any]:
    doc = _document(obj)
    found = ((p, _lookup(doc, p)) for p in SUMMARY_FIELDS.get(obj.kind, _DEFAULT_SUMMARY))
    return {p: v for p, v in found if v is not None}


def _index(objects: Iterable[Object], registry: Registry) -> tuple[dict[_Key, Object], list[Event]]:
    """Objects by (kind's place in the table, namespace, name); the Events apart."""
    order = {kind.key: at for at, kind in enumerate(registry)}
    found: dict[_Key, Object] = {}
    events: list[Event] = []
    for obj in objects:
        if isinstance(obj, Event):
            events.append(obj)
            continue
        meta = obj.metadata
        found[(order[registry.for_object(obj).key], meta.namespace, meta.name)] = obj
    return found, events


def _event_time(event: Event) -> datetime:
    return event.last_timestamp or event.event_time or event.first_timestamp or _NO_TIME


def _removal(old: Pod, events: Sequence[Event]) -> PodRemoval:
    meta = old.metadata
    about = [
        e
        for e in events
        if e.involved_object.kind == "Pod"
        and e.involved_object.namespace == meta.namespace
        and e.involved_object.name == meta.name
        and (not e.involved_object.uid or not meta.uid or e.involved_object.uid == meta.uid)
        and e.reason not in _NOT_REMOVAL_REASONS
    ]
    last = max(about, key=_event_time, default=None)
    return PodRemoval(
        namespace=meta.namespace,
        name=meta.name,
        node=old.spec.node_name,
        reason=last.reason if last is not None and last.reason else REMOVED_REASON,
        message=last.message if last is not None else "",
    )


def _removed(old: Pod, new: Object | None) -> bool:
    if not isinstance(new, Pod):
        return True
    if old.metadata.uid and new.metadata.uid and old.metadata.uid != new.metadata.uid:
        return True
    return new.metadata.deletion_timestamp is not None and old.metadata.deletion_timestamp is None


def _unscheduled(pod: Pod) -> PodPending | None:
    if pod.spec.node_name or pod.metadata.deletion_timestamp is not None:
        return None
    for condition in pod.status.conditions:
        if condition.type == "PodScheduled" and condition.status == "False":
            return PodPending(
                namespace=pod.metadata.namespace,
                name=pod.metadata.name,
                reason=condition.reason,
                message=condition.message,
            )
    return None


def _binding(was: Object | None, now: Object | None) -> PodBinding | None:
    """``now`` bound to a node that ``was`` was not bound to."""
    if not isinstance(now, Pod) or not now.spec.node_name:
        return None
    if isinstance(was, Pod) and was.spec.node_name == now.spec.node_name:
        return None
    meta = now.metadata
    return PodBinding(namespace=meta.namespace, name=meta.name, node=now.spec.node_name)


def _admission(was: Object | None, now: Object | None) -> QueueUnitAdmission | None:
    """``now`` a QueueUnit holding quota that ``was`` did not hold."""
    if not isinstance(now, QueueUnit) or not is_assigned(now):
        return None
    if isinstance(was, QueueUnit) and is_assigned(was):
        return None
    meta = now.metadata
    return QueueUnitAdmission(
        namespace=meta.namespace, name=meta.name, queue=now.spec.queue, phase=now.status.phase
    )


def _available(was: Object | None, now: Object | None) -> ReservationAvailable | None:
    """``now`` an Available Reservation that ``was`` was not."""
    if not isinstance(now, Reservation) or now.status.phase != AVAILABLE:
        return None
    if isinstance(was, Reservation) and was.status.phase == AVAILABLE:
        return None
    return ReservationAvailable(name=now.metadata.name, node=now.status.node_name)


def _object_change(
    was: Object | None, now: Object | None, by: tuple[str, ...], compared: _Compared
) -> ObjectChange:
    """The change from ``was`` to ``now`` (not both None): a created or deleted object with
    its summary fields, a changed one with every field that differs."""
    if was is not None and now is not None:
        shown, action, fields = now, CHANGED, compared.fields(was, now)
    elif now is not None:
        shown, action = now, CREATED
        fields = tuple(FieldChange(path=p, after=v) for p, v in _summary(now).items())
    elif was is not None:
        shown, action = was, DELETED
        fields = tuple(FieldChange(path=p, before=v) for p, v in _summary(was).items())
    else:
        raise ValueError("no object before or after")
    meta = shown.metadata
    return ObjectChange(
        action=action,
        api_version=shown.api_version,
        kind=shown.kind,
        namespace=meta.namespace,
        name=meta.name,
        by=by,
        fields=fields,
    )


def changes(
    before: Iterable[Object],
    after: Iterable[Object],
    *,
    applied: Iterable[Object] | None = None,
    registry: Registry | None = None,
) -> Changes:
    """What differs from ``before`` (a cluster's objects; a scenario as loaded) to ``after``
    (a simulation's result). ``applied``: the objects between the two (the what-if applied,
    no loop run yet: :attr:`SimulationResult.loaded`), which says who made each change
    (:attr:`ObjectChange.by`). Objects are matched by kind, namespace and name; Events are
    not compared, but explain why a pod was removed. Pure."""
    registry = registry or default_registry()
    old, _ = _index(before, registry)
    new, events = _index(after, registry)
    middle = _index(applied, registry)[0] if applied is not None else None
    compared = _Compared()
    bindings: list[PodBinding] = []
    admitted: list[QueueUnitAdmission] = []
    removed: list[PodRemoval] = []
    reservations: list[ReservationAvailable] = []
    pending: list[PodPending] = []
    objects: list[ObjectChange] = []
    for key in sorted({*old, *new}):
        was, now = old.get(key), new.get(key)
        if isinstance(was, Pod) and _removed(was, now):
            removed.append(_removal(was, events))
        if compared.same(was, now):
            continue
        if (binding := _binding(was, now)) is not None:
            bindings.append(binding)
        elif isinstance(now, Pod) and (waiting := _unscheduled(now)) is not None:
            pending.append(waiting)
        if (admission := _admission(was, now)) is not None:
            admitted.append(admission)
        if (available := _available(was, now)) is not None:
            reservations.append(available)
        by: tuple[str, ...] = ()
        if middle is not None:
            between = middle.get(key)
            by = tuple(
                who
                for who, moved in (
                    (BY_WHATIF, not compared.same(was, between)),
                    (BY_LOOPS, not compared.same(between, now)),
                )
                if moved
            )
        objects.append(_object_change(was, now, by, compared))
    return Changes(
        bindings=tuple(bindings),
        admitted=tuple(admitted),
        removed=tuple(removed),
        reservations=tuple(reservations),
        pending=tuple(pending),
        objects=tuple(objects),
        events=len(events),
    )


# --- printing the changes --------------------------------------------------------------------


def _value(value: Any) -> str:
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = value if value else '""'
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    else:
        text = codec.encode_json(value).decode()
    if len(text) > TABLE_VALUE_WIDTH:
        text = text[: TABLE_VALUE_WIDTH - 3] + "..."
    return text


def _field_text(action: str, field: FieldChange) -> str:
    if action == CREATED:
        return f"{field.path}={_value(field.after)}"
    if action == DELETED:
        return f"{field.path}={_value(field.before)}"
    return f"{field.path}: {_value(field.before)} -> {_value(field.after)}"


def _field_lines(change: ObjectChange) -> list[str]:
    shown = [_field_text(change.action, f) for f in change.fields[:TABLE_FIELDS]]
    more = len(change.fields) - TABLE_FIELDS
    if more > 0:
        shown.append(f"+{more} more (-o yaml lists them)")
    return shown or ["-"]


def _object_rows(change: ObjectChange) -> list[list[str]]:
    """One row per field shown, the object's columns on the first only."""
    first, *rest = _field_lines(change)
    name = _name(change.namespace, change.name)
    rows = [[change.action, change.kind, name, "+".join(change.by) or "-", first]]
    rows += [["", "", "", "", line] for line in rest]
    return rows


def _name(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _section(rows: Sequence[Sequence[str]]) -> list[str]:
    lines, _ = align(rows)
    return lines


def render_table(found: Changes, *, header: Sequence[str] = ()) -> str:
    """``found`` for people: ``header`` lines, then one aligned table per part that has rows
    (bound pods, admitted QueueUnits, removed pods, available Reservations, pending pods,
    changed objects), a blank line between them."""
    blocks: list[list[str]] = [list(header)] if header else []
    if found.bindings:
        rows = [["POD", "NODE"]]
        rows += [[_name(b.namespace, b.name), b.node] for b in found.bindings]
        blocks.append(["Pods bound:", *_section(rows)])
    if found.admitted:
        rows = [["QUEUEUNIT", "QUEUE", "PHASE"]]
        rows += [[_name(a.namespace, a.name), a.queue, a.phase] for a in found.admitted]
        blocks.append(["QueueUnits admitted:", *_section(rows)])
    if found.removed:
        rows = [["POD", "NODE", "REASON", "MESSAGE"]]
        rows += [
            [_name(r.namespace, r.name), r.node or "<none>", r.reason, r.message]
            for r in found.removed
        ]
        blocks.append(["Pods removed:", *_section(rows)])
    if found.reservations:
        rows = [["RESERVATION", "NODE"]]
        rows += [[r.name, r.node or "<none>"] for r in found.reservations]
        blocks.append(["Reservations available:", *_section(rows)])
    if found.pending:
        rows = [["POD", "REASON", "MESSAGE"]]
        rows += [[_name(p.namespace, p.name), p.reason, p.message] for p in found.pending]
        blocks.append(["Pods left pending:", *_section(rows)])
    if found.objects:
        rows = [["CHANGE", "KIND", "NAME", "BY", "FIELDS"]]
        rows += [row for change in found.objects for row in _object_rows(change)]
        blocks.append(["Objects:", *_section(rows)])
    else:
        blocks.append(["No object would change."])
    return "\n\n".join("\n".join(block) for block in blocks) + "\n"
