"""Built-in admission check controllers, keyed by the AdmissionCheck's ``spec.controllerName``.

:data:`CHECKERS` is the registry. Each checker's :meth:`Checker.decide` reads one unit whose
quota is reserved and returns the check's new state, or None when the state stays as it is (so
an unchanged check writes nothing). A check whose controller is not listed here is left to its
own controller, which writes ``status.admissionChecks`` itself; the engine honours whatever
state is there.

* ``koordpy.io/capacity``: ``Ready`` when every outstanding replica of every pod set fits on
  some node's free allocatable now (replicas placed greedily, pod sets in spec order, each
  replica on the first node in name order with room), else ``Retry`` naming the pod set and
  the resource that is short. The free capacity comes from :func:`free_capacity`.
* ``koordpy.io/approval``: the state is read from the unit's annotation
  ``approval.koordpy.io/<check name>`` (``Ready``, ``Retry`` or ``Rejected``); any other value,
  or none, leaves the check ``Pending``.

Neither returns ``podSetUpdates``; a checker may (the state carries them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import ClassVar, Final, Protocol, runtime_checkable

from apis import constants as k
from apis.core import Node, Pod, pod_requests
from apis.quantity import format_quantity
from apis.queueing import AdmissionCheckState, QueueUnit
from controller.queueing.admissionchecks import PENDING, READY, REJECTED, RETRY

__all__ = [
    "APPROVAL_ANNOTATION_PREFIX",
    "APPROVAL_CONTROLLER",
    "CAPACITY_CONTROLLER",
    "CHECKERS",
    "ApprovalChecker",
    "CapacityChecker",
    "CheckContext",
    "Checker",
    "CheckerFactory",
    "free_capacity",
    "outstanding_replicas",
]

CAPACITY_CONTROLLER: Final = "koordpy.io/capacity"
APPROVAL_CONTROLLER: Final = "koordpy.io/approval"
#: ``approval.koordpy.io/<check name>`` on the QueueUnit carries a manual decision.
APPROVAL_ANNOTATION_PREFIX: Final = "approval.koordpy.io/"

_PODS: Final = "pods"
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})

FreeCapacity = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What a checker may read besides the unit."""

    #: The AdmissionCheck's name (the entry in ``status.admissionChecks``).
    check: str
    now: datetime
    #: Node name -> free allocatable per resource, canonical units (:func:`free_capacity`).
    free: FreeCapacity = field(default_factory=dict)


@runtime_checkable
class Checker(Protocol):
    controller_name: ClassVar[str]

    def decide(self, unit: QueueUnit, ctx: CheckContext) -> AdmissionCheckState | None: ...


CheckerFactory = Callable[[], Checker]


def _current(unit: QueueUnit, check: str) -> AdmissionCheckState | None:
    return next((s for s in unit.status.admission_checks if s.name == check), None)


def _transition(
    unit: QueueUnit, ctx: CheckContext, state: str, message: str
) -> AdmissionCheckState | None:
    """The new state, or None when state and message are unchanged."""
    current = _current(unit, ctx.check)
    if current is not None and current.state == state and current.message == message:
        return None
    since = ctx.now
    if current is not None and current.state == state and current.last_transition_time:
        since = current.last_transition_time
    pod_set_updates = current.pod_set_updates if current is not None else ()
    return AdmissionCheckState(
        name=ctx.check,
        state=state,
        last_transition_time=since,
        message=message,
        pod_set_updates=pod_set_updates,
    )


# --- capacity ----------------------------------------------------------------------------------


def free_capacity(nodes: Iterable[Node], pods: Iterable[Pod]) -> dict[str, dict[str, int]]:
    """Node name -> allocatable minus the requests of the pods assigned to it.

    Unschedulable nodes are left out; pods that finished (Succeeded, Failed) hold nothing. A
    node reporting a ``pods`` allocatable loses one per assigned pod.
    """
    free: dict[str, dict[str, int]] = {
        node.metadata.name: dict(node.allocatable) for node in nodes if not node.spec.unschedulable
    }
    for pod in pods:
        room = free.get(pod.spec.node_name)
        if room is None or pod.status.phase in _TERMINAL:
            continue
        for name, amount in pod_requests(pod).items():
            room[name] = room.get(name, 0) - amount
        if _PODS in room:
            room[_PODS] -= 1
    return free


def outstanding_replicas(unit: QueueUnit) -> list[tuple[str, dict[str, int], int]]:
    """(pod set, request of one replica, replicas still to place) for every pod set.

    Replicas to place are the admitted ones not running yet; before any admission, the pod
    set's count. A unit without pod sets is one replica of ``spec.request`` (or
    ``spec.resource``) under the pseudo pod set name.
    """
    admitted: dict[str, int] = {}
    running: dict[str, int] = {}
    for admission in unit.status.admissions:
        admitted[admission.name] = admitted.get(admission.name, 0) + admission.replicas
        running[admission.name] = running.get(admission.name, 0) + admission.running
    if not unit.spec.pod_set:
        request = dict(unit.spec.request or unit.spec.resource)
        count = admitted.get(k.QUEUE_DEFAULT_PODSET, 1) - running.get(k.QUEUE_DEFAULT_PODSET, 0)
        return [(k.QUEUE_DEFAULT_PODSET, request, max(count, 0))]
    out = []
    for pod_set in unit.spec.pod_set:
        wanted = admitted.get(pod_set.name, pod_set.count)
        count = max(wanted - running.get(pod_set.name, 0), 0)
        out.append((pod_set.name, dict(pod_requests(pod_set.template.spec)), count))
    return out


def _fits(room: Mapping[str, int], request: Mapping[str, int]) -> bool:
    return all(room.get(name, 0) >= amount for name, amount in request.items() if amount > 0)


def _short(free: FreeCapacity, request: Mapping[str, int]) -> str:
    """The resources no node has enough of, else every resource some node lacks."""
    wanted = {name: amount for name, amount in request.items() if amount > 0}
    everywhere = [
        name
        for name in sorted(wanted)
        if all(room.get(name, 0) < wanted[name] for room in free.values())
    ]
    names = everywhere or sorted(
        {name for room in free.values() for name in wanted if room.get(name, 0) < wanted[name]}
    )
    parts = []
    for name in names:
        most = max((room.get(name, 0) for room in free.values()), default=0)
        parts.append(
            f"{name} needs {format_quantity(name, wanted[name])}, "
            f"at most {format_quantity(name, max(most, 0))} free on a node"
        )
    return "; ".join(parts)


class CapacityChecker:
    """``koordpy.io/capacity``: Ready when the outstanding replicas fit on the nodes now."""

    controller_name: ClassVar[str] = CAPACITY_CONTROLLER

    def decide(self, unit: QueueUnit, ctx: CheckContext) -> AdmissionCheckState | None:
        rooms = {name: dict(room) for name, room in sorted(ctx.free.items())}
        for pod_set, request, count in outstanding_replicas(unit):
            need = {**request, _PODS: 1}
            for placed in range(count):
                node = next(
                    (room for room in rooms.values() if _fits(room, _with_pods(room, need))),
                    None,
                )
                if node is None:
                    message = (
                        f"pod set {pod_set}: {count - placed} of {count} replicas do not fit"
                        f" on any node now ({_short(rooms, request) or 'no schedulable node'})"
                    )
                    return _transition(unit, ctx, RETRY, message)
                for name, amount in _with_pods(node, need).items():
                    node[name] = node.get(name, 0) - amount
        return _transition(unit, ctx, READY, "the cluster has room for every replica")


def _with_pods(room: Mapping[str, int], need: Mapping[str, int]) -> dict[str, int]:
    """``need`` without the pod slot on a node that does not count pods."""
    return dict(need) if _PODS in room else {n: a for n, a in need.items() if n != _PODS}


# --- approval ----------------------------------------------------------------------------------

_APPROVAL_STATES: Final = frozenset({READY, RETRY, REJECTED})


class ApprovalChecker:
    """``koordpy.io/approval``: a person (or a tool) sets the unit's approval annotation."""

    controller_name: ClassVar[str] = APPROVAL_CONTROLLER

    def decide(self, unit: QueueUnit, ctx: CheckContext) -> AdmissionCheckState | None:
        key = APPROVAL_ANNOTATION_PREFIX + ctx.check
        value = unit.metadata.annotations.get(key, "")
        if value in _APPROVAL_STATES:
            return _transition(unit, ctx, value, f"set by annotation {key}")
        return _transition(unit, ctx, PENDING, f"waiting for annotation {key}")


CHECKERS: Final[Mapping[str, CheckerFactory]] = MappingProxyType(
    {
        CAPACITY_CONTROLLER: CapacityChecker,
        APPROVAL_CONTROLLER: ApprovalChecker,
    }
)
