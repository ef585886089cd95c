"""How the CLI prints objects: kubectl-like tables, ages, and ``describe`` text.

Columns read the wire form of an object (camelCase keys, quantities as strings), the same
paths a CRD's printer columns name, so a table never depends on Python attribute names.
Every function here is pure: the current time is an argument.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apis import bounded
from apis.codec import to_builtins
from apis.kinds import Kind
from apis.meta import Object
from apis.quantity import QuantityError, to_canonical
from controller.queueing.phases import PENDING_PHASES
from controller.queueing.visibility import (
    ACTIVE_KEY,
    ANNOTATION_QUEUE_ADMISSION_RATE,
    eta,
    parse_rate,
)

__all__ = [
    "GPU_MEMORY_RATIO",
    "GPU_RESOURCES",
    "Column",
    "PrintContext",
    "QueuePlace",
    "align",
    "columns",
    "describe",
    "format_age",
    "gpu_count",
    "headers",
    "row",
    "table",
    "unit_eta",
]

Wire = Mapping[str, Any]
NONE = "<none>"

#: Koordinator's shared-GPU resource: 100 per whole GPU.
GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
#: Vendor device-plugin resources, each counting whole accelerators.
GPU_RESOURCES = (
    "nvidia.com/gpu",
    "huawei.com/Ascend910",
    "huawei.com/Ascend310P",
    "metax-tech.com/gpu",
)
GPU_MODEL_LABEL = "node.koordinator.sh/gpu-model"
QUOTA_PARENT_LABEL = "quota.scheduling.koordinator.sh/parent"
#: Space between table columns, as kubectl's tab writer pads.
GAP = 3


@dataclass(frozen=True, slots=True)
class QueuePlace:
    """Where a unit stands in its queue, from the Queue's status and annotations."""

    queue: str
    position: int
    #: The queue's recent admissions per second; None when the queue has not said.
    rate: float | None


@dataclass(frozen=True, slots=True)
class PrintContext:
    """Objects of other kinds some cells need: the Queues, for a QueueUnit's place."""

    #: (unit namespace, unit name) -> its place, from every Queue's ``queueItemDetails``.
    places: Mapping[tuple[str, str], QueuePlace] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_queues(cls, queues: Iterable[Object | Wire]) -> PrintContext:
        places: dict[tuple[str, str], QueuePlace] = {}
        for queue in queues:
            wire: Wire = queue if isinstance(queue, Mapping) else to_builtins(queue)
            annotations = _get(wire, "metadata.annotations") or {}
            rate = parse_rate(annotations.get(ANNOTATION_QUEUE_ADMISSION_RATE))
            name = str(_get(wire, "metadata.name") or "")
            for item in _get(wire, f"status.queueItemDetails.{ACTIVE_KEY}") or ():
                if not isinstance(item, Mapping):
                    continue
                key = (str(item.get("namespace") or ""), str(item.get("name") or ""))
                position = item.get("position")
                if isinstance(position, int) and position > 0:
                    places.setdefault(key, QueuePlace(name, position, rate))
        return cls(places)

    def place(self, unit: Wire) -> QueuePlace | None:
        """The unit's place, when it is pending and a queue lists it."""
        if str(_get(unit, "status.phase") or "") not in PENDING_PHASES:
            return None
        key = (_text_or_empty(unit, "metadata.namespace"), _text_or_empty(unit, "metadata.name"))
        return self.places.get(key)


_NO_CONTEXT = PrintContext()


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: a header and how to print a cell from the wire object.

    A column that needs other objects (:class:`PrintContext`) gives ``in_context``; its
    ``cell`` prints what can be said without them.
    """

    header: str
    cell: Callable[[Wire, datetime], str]
    wide: bool = False
    in_context: Callable[[Wire, datetime, PrintContext], str] | None = None

    def render(self, obj: Wire, now: datetime, context: PrintContext | None) -> str:
        if self.in_context is not None and context is not None:
            return self.in_context(obj, now, context)
        return self.cell(obj, now)


# --- small readers ---------------------------------------------------------------------------


def _get(obj: Any, path: str) -> Any:
    """``status.nodeName`` -> the value, or None when any step is missing."""
    node = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _text_or_empty(obj: Wire, path: str) -> str:
    value = _get(obj, path)
    return "" if value is None else str(value)


def _text(obj: Wire, path: str) -> str:
    value = _get(obj, path)
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field(path: str) -> Callable[[Wire, datetime], str]:
    return lambda obj, now: _text(obj, path)


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        stamp = value
    elif isinstance(value, str) and value:
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def format_age(delta: timedelta) -> str:
    """kubectl's human duration: ``5s``, ``3m10s`` under 10 minutes, ``2h5m``, ``4d``, ``2y``."""
    seconds = int(delta.total_seconds())
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        days, rest = divmod(hours, 24)
        return f"{days}d{rest}h" if rest else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = divmod(hours // 24, 365)
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // (24 * 365)}y"


def _age_of(value: Any, now: datetime) -> str:
    stamp = _timestamp(value)
    return format_age(now - stamp) if stamp is not None else "<unknown>"


def _age(path: str = "metadata.creationTimestamp") -> Callable[[Wire, datetime], str]:
    return lambda obj, now: _age_of(_get(obj, path), now)


def _resources(obj: Wire, path: str) -> str:
    """A ResourceList compactly: ``cpu:4,memory:8Gi``."""
    value = _get(obj, path)
    if not isinstance(value, Mapping) or not value:
        return NONE
    return ",".join(f"{name}:{amount}" for name, amount in sorted(value.items()))


def _resource(path: str, name: str) -> Callable[[Wire, datetime], str]:
    def cell(obj: Wire, now: datetime) -> str:
        value = _get(obj, path)
        if isinstance(value, Mapping) and name in value:
            return str(value[name])
        return NONE

    return cell


def _count(value: Any, name: str) -> int:
    try:
        return to_canonical(name, value)
    except (QuantityError, TypeError, ValueError):
        return 0


# --- nodes -----------------------------------------------------------------------------------


def gpu_count(node: Wire) -> int:
    """Whole accelerators on a node: gpu-memory-ratio / 100, else the vendor counts."""
    status = node.get("status") or {}
    for field in ("allocatable", "capacity"):
        resources = status.get(field) or {}
        if GPU_MEMORY_RATIO in resources:
            return _count(resources[GPU_MEMORY_RATIO], GPU_MEMORY_RATIO) // 100
    for field in ("allocatable", "capacity"):
        resources = status.get(field) or {}
        found = [name for name in GPU_RESOURCES if name in resources]
        if found:
            return sum(_count(resources[name], name) for name in found)
    return 0


def _node_status(node: Wire, now: datetime) -> str:
    state = "Unknown"
    for condition in _get(node, "status.conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            state = {"True": "Ready", "False": "NotReady"}.get(
                str(condition.get("status")), "Unknown"
            )
    if _get(node, "spec.unschedulable"):
        state += ",SchedulingDisabled"
    return state


# --- pods ------------------------------------------------------------------------------------


def _container_statuses(pod: Wire) -> list[Mapping[str, Any]]:
    return [s for s in _get(pod, "status.containerStatuses") or () if isinstance(s, Mapping)]


def _pod_ready(pod: Wire, now: datetime) -> str:
    total = len(_get(pod, "spec.containers") or ())
    ready = sum(1 for status in _container_statuses(pod) if status.get("ready"))
    return f"{ready}/{total}"


def _pod_status(pod: Wire, now: datetime) -> str:
    if _get(pod, "metadata.deletionTimestamp"):
        return "Terminating"
    reason = _get(pod, "status.reason") or _get(pod, "status.phase") or "Pending"
    for status in _container_statuses(pod):
        state = status.get("state") or {}
        for key in ("waiting", "terminated"):
            detail = state.get(key)
            if isinstance(detail, Mapping) and detail.get("reason"):
                return str(detail["reason"])
    return str(reason)


def _pod_restarts(pod: Wire, now: datetime) -> str:
    return str(sum(int(s.get("restartCount") or 0) for s in _container_statuses(pod)))


# --- workloads (apps/v1) ---------------------------------------------------------------------


def _replicas_wanted(obj: Wire) -> int:
    wanted = _get(obj, "spec.replicas")
    return 1 if wanted is None else int(wanted)


def _ready_of_wanted(obj: Wire, now: datetime) -> str:
    """``readyReplicas/spec.replicas`` (a Deployment's or StatefulSet's READY)."""
    return f"{_get(obj, 'status.readyReplicas') or 0}/{_replicas_wanted(obj)}"


def _template_containers(obj: Wire) -> list[Mapping[str, Any]]:
    found = _get(obj, "spec.template.spec.containers") or ()
    return [c for c in found if isinstance(c, Mapping)]


def _container_names(obj: Wire, now: datetime) -> str:
    return ",".join(str(c.get("name") or "") for c in _template_containers(obj)) or NONE


def _container_images(obj: Wire, now: datetime) -> str:
    return ",".join(str(c.get("image") or "") for c in _template_containers(obj)) or NONE


def _label_selector(obj: Wire, now: datetime) -> str:
    """``spec.selector`` as kubectl prints it: ``app=web,tier in (a,b)``."""
    selector = _get(obj, "spec.selector")
    if not isinstance(selector, Mapping):
        return NONE
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        if not isinstance(expr, Mapping):
            continue
        key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
        values = ",".join(str(v) for v in expr.get("values") or ())
        if op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {op.lower()} ({values})")
    return ",".join(parts) or NONE


def _node_selector(obj: Wire, now: datetime) -> str:
    selector = _get(obj, "spec.template.spec.nodeSelector")
    if not isinstance(selector, Mapping) or not selector:
        return NONE
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


# --- other kinds -----------------------------------------------------------------------------


def _devices(obj: Wire) -> list[Mapping[str, Any]]:
    return [d for d in _get(obj, "spec.devices") or () if isinstance(d, Mapping)]


def _device_count(obj: Wire, now: datetime) -> str:
    return str(len(_devices(obj)))


def _device_healthy(obj: Wire, now: datetime) -> str:
    devices = _devices(obj)
    return f"{sum(1 for d in devices if d.get('health'))}/{len(devices)}"


def _device_types(obj: Wire, now: datetime) -> str:
    types = sorted({str(d.get("type")) for d in _devices(obj) if d.get("type")})
    return ",".join(types) if types else NONE


def _label(key: str) -> Callable[[Wire, datetime], str]:
    return lambda obj, now: str((_get(obj, "metadata.labels") or {}).get(key) or NONE)


def _event_time(event: Wire) -> Any:
    return (
        event.get("lastTimestamp")
        or _get(event, "series.lastObservedTime")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or _get(event, "metadata.creationTimestamp")
    )


def _event_object(event: Wire, now: datetime) -> str:
    kind = str(_get(event, "involvedObject.kind") or "").lower()
    name = str(_get(event, "involvedObject.name") or "")
    return f"{kind}/{name}" if kind else name or NONE


def _event_message(event: Wire, now: datetime) -> str:
    return str(event.get("message") or "").replace("\n", " ") or NONE


def _config_map_entries(config_map: Wire, now: datetime) -> str:
    """How many keys ``data`` and ``binaryData`` hold together (kubectl's DATA column)."""
    return str(len(config_map.get("data") or {}) + len(config_map.get("binaryData") or {}))


def _job_completions(job: Wire, now: datetime) -> str:
    completions = _get(job, "spec.completions")
    succeeded = _get(job, "status.succeeded") or 0
    return f"{succeeded}/{completions if completions is not None else 1}"


def _job_suspended(job: Wire, now: datetime) -> str:
    return "True" if _get(job, "spec.suspend") else "False"


def _number(path: str, default: str = "0") -> Callable[[Wire, datetime], str]:
    def cell(obj: Wire, now: datetime) -> str:
        value = _get(obj, path)
        return default if value is None else str(value)

    return cell


def _queue_pending(queue: Wire, now: datetime) -> str:
    items = _get(queue, f"status.queueItemDetails.{ACTIVE_KEY}")
    return str(len(items)) if isinstance(items, (list, tuple)) else "0"


def _no_context(obj: Wire, now: datetime) -> str:
    return NONE


def _unit_position(unit: Wire, now: datetime, context: PrintContext) -> str:
    place = context.place(unit)
    return str(place.position) if place is not None else NONE


def unit_eta(place: QueuePlace | None) -> str:
    """A pending unit's estimated wait: ``4m``; ``<unknown>`` when its queue admits nothing."""
    if place is None:
        return NONE
    wait = eta(place.position, place.rate or 0.0)
    return format_age(wait) if wait is not None else "<unknown>"


def _unit_eta(unit: Wire, now: datetime, context: PrintContext) -> str:
    return unit_eta(context.place(unit))


def _unit_message(unit: Wire, now: datetime) -> str:
    return _text(unit, "status.message").replace("\n", " ")


def _check_active(check: Wire, now: datetime) -> str:
    for condition in _get(check, "status.conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Active":
            return str(condition.get("status") or "Unknown")
    return "Unknown"


_NAME = Column("NAME", _field("metadata.name"))
_AGE = Column("AGE", _age())

_TABLES: dict[str, tuple[Column, ...]] = {
    "Node": (
        _NAME,
        Column("STATUS", _node_status),
        Column("CPU", _resource("status.allocatable", "cpu")),
        Column("MEMORY", _resource("status.allocatable", "memory")),
        Column("GPUS", lambda obj, now: str(gpu_count(obj))),
        Column("GPU-MODEL", _label(GPU_MODEL_LABEL), wide=True),
        _AGE,
        Column("INTERNAL-IP", lambda obj, now: _internal_ip(obj), wide=True),
    ),
    "Pod": (
        _NAME,
        Column("READY", _pod_ready),
        Column("STATUS", _pod_status),
        Column("RESTARTS", _pod_restarts),
        _AGE,
        Column("IP", _field("status.podIP"), wide=True),
        Column("NODE", _field("spec.nodeName"), wide=True),
        Column("NOMINATED NODE", _field("status.nominatedNodeName"), wide=True),
    ),
    "Event": (
        Column("LAST SEEN", lambda obj, now: _age_of(_event_time(obj), now)),
        Column("TYPE", _field("type")),
        Column("REASON", _field("reason")),
        Column("OBJECT", _event_object),
        Column("SOURCE", _field("source.component"), wide=True),
        Column("COUNT", _number("count", "1"), wide=True),
        Column("MESSAGE", _event_message),
    ),
    "ConfigMap": (
        _NAME,
        Column("DATA", _config_map_entries),
        _AGE,
    ),
    "apps/Deployment": (
        _NAME,
        Column("READY", _ready_of_wanted),
        Column("UP-TO-DATE", _number("status.updatedReplicas")),
        Column("AVAILABLE", _number("status.availableReplicas")),
        _AGE,
        Column("CONTAINERS", _container_names, wide=True),
        Column("IMAGES", _container_images, wide=True),
        Column("SELECTOR", _label_selector, wide=True),
    ),
    "apps/ReplicaSet": (
        _NAME,
        Column("DESIRED", lambda obj, now: str(_replicas_wanted(obj))),
        Column("CURRENT", _number("status.replicas")),
        Column("READY", _number("status.readyReplicas")),
        _AGE,
        Column("CONTAINERS", _container_names, wide=True),
        Column("IMAGES", _container_images, wide=True),
        Column("SELECTOR", _label_selector, wide=True),
    ),
    "apps/StatefulSet": (
        _NAME,
        Column("READY", _ready_of_wanted),
        _AGE,
        Column("CONTAINERS", _container_names, wide=True),
        Column("IMAGES", _container_images, wide=True),
    ),
    "apps/DaemonSet": (
        _NAME,
        Column("DESIRED", _number("status.desiredNumberScheduled")),
        Column("CURRENT", _number("status.currentNumberScheduled")),
        Column("READY", _number("status.numberReady")),
        Column("UP-TO-DATE", _number("status.updatedNumberScheduled")),
        Column("AVAILABLE", _number("status.numberAvailable")),
        Column("NODE SELECTOR", _node_selector),
        _AGE,
        Column("CONTAINERS", _container_names, wide=True),
        Column("IMAGES", _container_images, wide=True),
        Column("SELECTOR", _label_selector, wide=True),
    ),
    "batch/Job": (
        _NAME,
        Column("COMPLETIONS", _job_completions),
        Column("SUSPENDED", _job_suspended),
        _AGE,
    ),
    "scheduling.koordinator.sh/Device": (
        _NAME,
        Column("DEVICES", _device_count),
        Column("HEALTHY", _device_healthy),
        Column("TYPES", _device_types),
        _AGE,
    ),
    "scheduling.koordinator.sh/Reservation": (
        _NAME,
        Column("PHASE", _field("status.phase")),
        _AGE,
        Column("NODE", _field("status.nodeName")),
        Column("TTL", _field("spec.ttl")),
        Column("EXPIRES", _field("spec.expires")),
    ),
    # The CRD's printer columns, in its order.
    "scheduling.koordinator.sh/PodMigrationJob": (
        _NAME,
        Column("PHASE", _field("status.phase")),
        Column("STATUS", _field("status.status")),
        _AGE,
        Column("NODE", _field("status.nodeName")),
        Column("RESERVATION", _field("spec.reservationOptions.reservationRef.name")),
        Column("PODNAMESPACE", _field("spec.podRef.namespace")),
        Column("POD", _field("spec.podRef.name")),
        Column("NEWPOD", _field("status.podRef.name")),
        Column("TTL", _field("spec.ttl")),
    ),
    "slo.koordinator.sh/NodeMetric": (
        _NAME,
        Column("CPU", _resource("status.nodeMetric.nodeUsage.resources", "cpu")),
        Column("MEMORY", _resource("status.nodeMetric.nodeUsage.resources", "memory")),
        Column("UPDATED", _age("status.updateTime")),
        _AGE,
    ),
    "scheduling.sigs.k8s.io/ElasticQuota": (
        _NAME,
        Column("MIN", lambda obj, now: _resources(obj, "spec.min")),
        Column("MAX", lambda obj, now: _resources(obj, "spec.max")),
        Column("PARENT", _label(QUOTA_PARENT_LABEL)),
        _AGE,
    ),
    "scheduling.sigs.k8s.io/PodGroup": (
        _NAME,
        Column("PHASE", _field("status.phase")),
        Column("MINMEMBER", _number("spec.minMember")),
        Column("RUNNING", _number("status.running")),
        _AGE,
    ),
    "scheduling.x-k8s.io/Queue": (
        _NAME,
        Column("POLICY", _field("spec.queuePolicy")),
        Column("PRIORITY", _number("spec.priority")),
        _AGE,
        Column("PENDING", _queue_pending, wide=True),
    ),
    "scheduling.x-k8s.io/QueueUnit": (
        _NAME,
        Column("PHASE", _field("status.phase")),
        Column("PRIORITY", _number("spec.priority")),
        Column("QUEUE", _field("spec.queue")),
        Column("JOBTYPE", _field("spec.consumerRef.kind")),
        _AGE,
        Column("POSITION", _no_context, wide=True, in_context=_unit_position),
        Column("ETA", _no_context, wide=True, in_context=_unit_eta),
        Column("MESSAGE", _unit_message, wide=True),
    ),
    "kueue.x-k8s.io/AdmissionCheck": (
        _NAME,
        Column("CONTROLLER", _field("spec.controllerName")),
        Column("ACTIVE", _check_active),
        _AGE,
    ),
}
_DEFAULT = (_NAME, _AGE)


def _internal_ip(node: Wire) -> str:
    for address in _get(node, "status.addresses") or ():
        if isinstance(address, Mapping) and address.get("type") == "InternalIP":
            return str(address.get("address") or NONE)
    return NONE


# --- tables ----------------------------------------------------------------------------------


def columns(kind: Kind, *, wide: bool = False) -> tuple[Column, ...]:
    """The columns of a kind's table (``wide`` adds the extra ones)."""
    table_columns = _TABLES.get(kind.key, _DEFAULT)
    return tuple(c for c in table_columns if wide or not c.wide)


def headers(kind: Kind, *, wide: bool = False, namespaces: bool = False) -> list[str]:
    names = [c.header for c in columns(kind, wide=wide)]
    return ["NAMESPACE", *names] if namespaces and kind.namespaced else names


def row(
    kind: Kind,
    obj: Object | Wire,
    *,
    now: datetime,
    wide: bool = False,
    namespaces: bool = False,
    context: PrintContext | None = None,
) -> list[str]:
    """One object's cells, in :func:`headers` order (``context``: see :class:`PrintContext`)."""
    wire: Wire = obj if isinstance(obj, Mapping) else to_builtins(obj)
    cells = [column.render(wire, now, context) for column in columns(kind, wide=wide)]
    if namespaces and kind.namespaced:
        cells.insert(0, _text(wire, "metadata.namespace"))
    return cells


def align(rows: Iterable[Sequence[str]], widths: Sequence[int] = ()) -> tuple[list[str], list[int]]:
    """Pad cells into columns ``GAP`` apart; returns the lines and the widths used.

    Pass the widths back in to print later rows (watch events) under the same header.
    """
    materialised = [list(r) for r in rows]
    width = list(widths)
    for cells in materialised:
        for index, cell in enumerate(cells):
            if index >= len(width):
                width.append(0)
            width[index] = max(width[index], len(cell))
    lines = []
    for cells in materialised:
        padded = [
            cell if index == len(cells) - 1 else cell.ljust(width[index] + GAP)
            for index, cell in enumerate(cells)
        ]
        lines.append("".join(padded).rstrip())
    return lines, width


def table(
    kind: Kind,
    objects: Iterable[Object | Wire],
    *,
    now: datetime,
    wide: bool = False,
    namespaces: bool = False,
    context: PrintContext | None = None,
) -> str:
    """The full table, header first, one line per object (newline-terminated)."""
    rows = [headers(kind, wide=wide, namespaces=namespaces)]
    rows.extend(
        row(kind, obj, now=now, wide=wide, namespaces=namespaces, context=context)
        for obj in objects
    )
    lines, _ = align(rows)
    return "\n".join(lines) + "\n"


# --- describe --------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")
_SKIP_TOP = frozenset({"apiVersion", "kind", "metadata"})
#: Maps keyed by user data or resource names: their keys print as written.
_DATA_KEYS = frozenset(
    {
        "labels",
        "annotations",
        "nodeSelector",
        "matchLabels",
        "requests",
        "limits",
        "capacity",
        "allocatable",
        "resources",
        "min",
        "max",
        "overhead",
        "allocatedResources",
        "resource",
        "request",
    }
)


def _title(key: str) -> str:
    """``nodeName`` -> ``Node Name``, ``podIP`` -> ``Pod IP``; other keys (labels) as they are."""
    if not re.fullmatch(r"[a-z][A-Za-z0-9]*", key):
        return key
    words = _WORD.findall(key)
    return " ".join(w[:1].upper() + w[1:] for w in words) if words else key


def _scalar(value: Any) -> str:
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _mapping_lines(pairs: Iterable[tuple[str, str]], indent: int, width: int) -> list[str]:
    lines = []
    for key, text in pairs:
        label = f"{key}:"
        text_lines = text.splitlines() or [""]
        lines.append(f"{' ' * indent}{label.ljust(width + 1)}  {text_lines[0]}".rstrip())
        lines.extend(f"{' ' * (indent + width + 3)}{extra}" for extra in text_lines[1:])
    return lines


def _body(value: Any, indent: int, *, titles: bool = True) -> list[str]:
    """Nested mappings and lists as indented ``Key:  value`` lines."""
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return []
        scalars = [(k, v) for k, v in value.items() if not isinstance(v, (Mapping, list, tuple))]
        width = max((len(_title(k) if titles else k) for k, _ in scalars), default=0)
        lines: list[str] = []
        for key, item in value.items():
            label = _title(key) if titles else key
            # Maps keyed by user data (labels, resources...) keep their keys as written.
            keep = key in _DATA_KEYS
            if isinstance(item, Mapping):
                lines.append(f"{pad}{label}:" + ("" if item else f"  {NONE}"))
                lines.extend(_body(item, indent + 2, titles=titles and not keep))
            elif isinstance(item, (list, tuple)):
                lines.append(f"{pad}{label}:" + ("" if item else f"  {NONE}"))
                lines.extend(_body(item, indent + 2, titles=titles))
            else:
                lines.extend(_mapping_lines([(label, _scalar(item))], indent, width))
        return lines
    if isinstance(value, (list, tuple)):
        lines = []
        for item in value:
            if isinstance(item, Mapping):
                inner = _body(item, indent + 2, titles=titles)
                if inner:
                    inner[0] = f"{pad}- {inner[0][indent + 2 :]}"
                lines.extend(inner)
            elif isinstance(item, (list, tuple)):
                lines.append(f"{pad}-")
                lines.extend(_body(item, indent + 2, titles=titles))
            else:
                lines.append(f"{pad}- {_scalar(item)}")
        return lines
    return [f"{pad}{_scalar(value)}"]


def _pairs(mapping: Any, sep: str) -> str:
    if not isinstance(mapping, Mapping) or not mapping:
        return NONE
    return "\n".join(f"{key}{sep}{value}" for key, value in sorted(mapping.items()))


def _small_table(indent: int, rows: Sequence[Sequence[str]]) -> list[str]:
    header = rows[0]
    rule = ["-" * len(h) for h in header]
    lines, _ = align([header, rule, *rows[1:]])
    return [" " * indent + line for line in lines]


def _conditions(conditions: Any) -> list[str]:
    items = [c for c in conditions or () if isinstance(c, Mapping)]
    if not items:
        return []
    rows = [["Type", "Status", "LastTransitionTime", "Reason", "Message"]]
    rows.extend(
        [
            str(c.get("type") or ""),
            str(c.get("status") or ""),
            str(c.get("lastTransitionTime") or c.get("lastHeartbeatTime") or NONE),
            str(c.get("reason") or ""),
            str(c.get("message") or "").replace("\n", " "),
        ]
        for c in items
    )
    return ["Conditions:", *_small_table(2, rows)]


def _event_age(event: Wire, now: datetime) -> str:
    last = _age_of(_event_time(event), now)
    count = event.get("count") or _get(event, "series.count") or 0
    first = event.get("firstTimestamp") or event.get("eventTime")
    if isinstance(count, int) and count > 1 and first:
        return f"{last} (x{count} over {_age_of(first, now)})"
    return last


def _events(events: Sequence[Wire], now: datetime) -> list[str]:
    if not events:
        return [f"Events:  {NONE}"]
    rows = [["Type", "Reason", "Age", "From", "Message"]]
    rows.extend(
        [
            str(e.get("type") or ""),
            str(e.get("reason") or ""),
            _event_age(e, now),
            str(
                _get(e, "source.component") or e.get("reportingComponent") or NONE,
            ),
            str(e.get("message") or "").replace("\n", " "),
        ]
        for e in events
    )
    return ["Events:", *_small_table(2, rows)]


def involves(event: Object | Wire, obj: Object) -> bool:
    """Whether an Event is about ``obj`` (same kind, name and namespace)."""
    wire: Wire = event if isinstance(event, Mapping) else to_builtins(event)
    ref = wire.get("involvedObject") or {}
    return (
        ref.get("kind") == obj.kind
        and ref.get("name") == obj.metadata.name
        and (ref.get("namespace") or "") == (obj.metadata.namespace or "")
    )


def describe(
    obj: Object,
    events: Iterable[Object | Wire] = (),
    *,
    now: datetime,
    context: PrintContext | None = None,
) -> str:
    """kubectl-describe-like text: metadata, the body, conditions, and the given events.

    A QueueUnit adds its admission check states and, while it is pending, a ``Waiting:``
    section (its message, and its place and ETA when ``context`` holds its Queue).
    """
    wire: dict[str, Any] = to_builtins(obj)
    meta: Mapping[str, Any] = wire.get("metadata") or {}
    head: list[tuple[str, str]] = [("Name", str(meta.get("name") or ""))]
    if meta.get("namespace"):
        head.append(("Namespace", str(meta["namespace"])))
    head.extend(
        [
            ("Labels", _pairs(meta.get("labels"), "=")),
            ("Annotations", _pairs(meta.get("annotations"), ": ")),
            ("API Version", str(wire.get("apiVersion") or "")),
            ("Kind", str(wire.get("kind") or "")),
            ("Created", str(meta.get("creationTimestamp") or NONE)),
            ("Resource Version", str(meta.get("resourceVersion") or NONE)),
        ]
    )
    if meta.get("uid"):
        head.append(("UID", str(meta["uid"])))
    if meta.get("deletionTimestamp"):
        head.append(("Deletion Timestamp", str(meta["deletionTimestamp"])))
    if meta.get("finalizers"):
        head.append(("Finalizers", ", ".join(meta["finalizers"])))
    if meta.get("ownerReferences"):
        owners = [
            f"{o.get('kind')}/{o.get('name')}"
            for o in meta["ownerReferences"]
            if isinstance(o, Mapping)
        ]
        head.append(("Controlled By" if len(owners) == 1 else "Owners", ", ".join(owners)))
    width = max(len(key) for key, _ in head)
    lines = _mapping_lines(head, 0, width)
    conditions: Any = None
    for key, value in wire.items():
        if key in _SKIP_TOP:
            continue
        if isinstance(value, Mapping) and "conditions" in value:
            conditions = value["conditions"]
            value = {k: v for k, v in value.items() if k != "conditions"}
        if isinstance(value, (Mapping, list, tuple)):
            lines.append(f"{_title(key)}:" + ("" if value else f"  {NONE}"))
            lines.extend(_body(value, 2))
        else:
            lines.extend(_mapping_lines([(_title(key), _scalar(value))], 0, width))
    lines.extend(_conditions(conditions))
    if wire.get("kind") == "QueueUnit":
        lines.extend(_admission_checks(_get(wire, "status.admissionChecks")))
        lines.extend(_waiting(wire, context or _NO_CONTEXT))
    lines.extend(_diagnosis(meta.get("annotations")))
    ordered = sorted(
        (e if isinstance(e, Mapping) else to_builtins(e) for e in events),
        key=lambda e: _timestamp(_event_time(e)) or datetime.min.replace(tzinfo=UTC),
    )
    lines.extend(_events(ordered, now))
    return "\n".join(lines) + "\n"


_DIAGNOSIS = "scheduling.koordpy.io/diagnosis"


def _diagnosis(annotations: Any) -> list[str]:
    """The scheduler's per-plugin reasons for a pod it could not place, as a small table."""
    if not isinstance(annotations, Mapping) or _DIAGNOSIS not in annotations:
        return []
    try:
        counts = bounded.decode_any(annotations[_DIAGNOSIS], _DIAGNOSIS)
    except ValueError:
        return []
    if not isinstance(counts, Mapping):
        return []
    rows = [("Plugin", "Nodes", "Reason")]
    for plugin in sorted(counts):
        reasons = counts[plugin]
        if isinstance(reasons, Mapping):
            rows.extend((plugin, str(n), reason) for reason, n in sorted(reasons.items()))
    return ["Scheduling Diagnosis:", *_small_table(2, rows)]


def _admission_checks(states: Any) -> list[str]:
    items = [c for c in states or () if isinstance(c, Mapping)]
    if not items:
        return []
    rows = [["Name", "State", "LastTransitionTime", "Message"]]
    rows.extend(
        [
            str(c.get("name") or ""),
            str(c.get("state") or ""),
            str(c.get("lastTransitionTime") or NONE),
            str(c.get("message") or "").replace("\n", " "),
        ]
        for c in items
    )
    return ["Admission Checks:", *_small_table(2, rows)]


def _waiting(unit: Wire, context: PrintContext) -> list[str]:
    """Why a pending unit waits, where it stands, and how long it may wait."""
    if str(_get(unit, "status.phase") or "") not in PENDING_PHASES:
        return []
    place = context.place(unit)
    pairs = [("Message", _text(unit, "status.message"))]
    if place is not None:
        pairs.extend(
            [
                ("Queue", place.queue),
                ("Position", str(place.position)),
                ("ETA", unit_eta(place)),
            ]
        )
    else:
        pairs.extend([("Position", NONE), ("ETA", NONE)])
    width = max(len(key) for key, _ in pairs)
    return ["Waiting:", *_mapping_lines(pairs, 2, width)]
