"""What the standalone workload controllers share: pod readiness, ownership, template hashes,
the scale-down ranking, pods made from a template, and the thin loop that runs a plan function.

A controller is a pure function ``plan(owner, inputs, now) -> Plan`` (the objects to create,
update and delete, the Events to record, and when to look again) and a :class:`WorkloadLoop`
subclass naming the kinds it reads. The loop runs every owner of its kind again whenever one of
those kinds changed (the views are compared by identity) or a wanted time is due, and writes the
plans: creations one by one (``generateName`` needs the store to draw the name), updates in one
batch, deletions last.

Events (as Kubernetes' controllers record them, about the owner): every pod the loop creates or
deletes gets ``SuccessfulCreate`` "Created pod: <name>" / ``SuccessfulDelete`` "Deleted pod:
<name>", or on failure the Warnings ``FailedCreate`` "Error creating: <error>" /
``FailedDelete`` "Error deleting: <error>" (a subclass may word them otherwise:
:meth:`WorkloadLoop.pod_event`); a plan's own :attr:`Plan.events` are recorded once its writes
went through. Repeats bump the count of the Event recorded before.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, Final

import msgspec

from apis.codec import to_builtins
from apis.core import Pod, PodStatus, PodTemplateSpec
from apis.kinds import default_registry
from apis.meta import LabelSelector, Object, ObjectMeta, OwnerReference
from controller.errors import NotFound, StoreError
from controller.events import NORMAL, WARNING, EventRecorder
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster
from controller.store.snapshots import Change, Snapshot
from controller.store.writes import Result, Write

if TYPE_CHECKING:  # controller.loops registers these loops: importing it here would be circular
    from controller.loops import LoopContext

__all__ = [
    "ANNOTATION_DELETION_COST",
    "LABEL_CONTROLLER_REVISION_HASH",
    "LABEL_POD_TEMPLATE_HASH",
    "Note",
    "Plan",
    "WorkloadLoop",
    "active",
    "available",
    "deletion_order",
    "group_pods",
    "is_ready",
    "owned_by",
    "owner_reference",
    "pod_from_template",
    "pods_by_owner",
    "ready_since",
    "regroup_by_owner",
    "regroup_pods",
    "template_hash",
    "with_selector_label",
]

log = logging.getLogger(__name__)

replace = msgspec.structs.replace

LABEL_POD_TEMPLATE_HASH: Final = "pod-template-hash"
LABEL_CONTROLLER_REVISION_HASH: Final = "controller-revision-hash"
ANNOTATION_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
#: Seconds before an owner whose write failed is looked at again.
RETRY_SECONDS: Final = 1.0

#: The letters Kubernetes draws generated names and hashes from (no vowels, no look-alikes).
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


# --- pods ------------------------------------------------------------------------------------


def active(pod: Pod) -> bool:
    """Neither ended nor being deleted: a pod that counts toward its owner's replicas."""
    return not pod.is_terminated and pod.metadata.deletion_timestamp is None


def _ready_condition(pod: Pod) -> datetime | bool:
    for condition in pod.status.conditions:
        if condition.type == "Ready":
            if condition.status != "True":
                return False
            return condition.last_transition_time or True
    return False


def is_ready(pod: Pod) -> bool:
    """Running with the Ready condition True."""
    return pod.status.phase == "Running" and _ready_condition(pod) is not False


def ready_since(pod: Pod) -> datetime | None:
    """When a ready pod became ready (None: not ready, or the time is not known)."""
    if not is_ready(pod):
        return None
    since = _ready_condition(pod)
    return since if isinstance(since, datetime) else None


def available(pod: Pod, min_ready_seconds: int, now: datetime) -> bool:
    """Ready for at least ``min_ready_seconds``."""
    if not is_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready_since(pod)
    return since is None or since + timedelta(seconds=min_ready_seconds) <= now


def available_at(pod: Pod, min_ready_seconds: int) -> datetime | None:
    """When a ready pod that is not available yet becomes available."""
    since = ready_since(pod)
    if since is None or min_ready_seconds <= 0:
        return None
    return since + timedelta(seconds=min_ready_seconds)


def _deletion_cost(pod: Pod) -> int:
    try:
        return int(pod.metadata.annotations.get(ANNOTATION_DELETION_COST, "0"))
    except ValueError:
        return 0


def _timestamp(moment: datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0


def _rank(pod: Pod) -> tuple[bool, int, bool, int, float, int, float, str]:
    since = ready_since(pod)
    restarts = sum(s.restart_count or 0 for s in pod.status.container_statuses)
    return (
        bool(pod.spec.node_name),
        _PHASE_RANK.get(pod.status.phase, 0),
        is_ready(pod),
        _deletion_cost(pod),
        -_timestamp(since),
        -restarts,
        -_timestamp(pod.metadata.creation_timestamp),
        pod.metadata.name,
    )


def deletion_order(pods: Sequence[Pod]) -> list[Pod]:
    """``pods``, those a scale-down removes first at the front.

    As Kubernetes ranks them: unscheduled before scheduled; Pending, Unknown, then Running; not
    ready before ready; a lower ``pod-deletion-cost`` first; ready for less time first; more
    restarts first; newer first.
    """
    return sorted(pods, key=_rank)


# --- owners ----------------------------------------------------------------------------------


def owner_reference(owner: Object) -> OwnerReference:
    """The controller reference a pod (or ReplicaSet) gets from ``owner``."""
    return OwnerReference(
        api_version=owner.api_version,
        kind=owner.kind,
        name=owner.metadata.name,
        uid=owner.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )


def _controller_uid(obj: Object) -> str:
    return next((r.uid for r in obj.metadata.owner_references if r.controller), "")


def owned_by(obj: Object, owner: Object) -> bool:
    return _controller_uid(obj) == owner.metadata.uid


def group_pods(
    objects: Iterable[Object], groups_of: Callable[[Pod], Iterable[str]]
) -> dict[str, tuple[Pod, ...]]:
    """Group -> the pods among ``objects`` in it (a pod is in each of ``groups_of(pod)``),
    in the order of ``objects``."""
    grouped: dict[str, list[Pod]] = {}
    for obj in objects:
        if isinstance(obj, Pod):
            for group in groups_of(obj):
                grouped.setdefault(group, []).append(obj)
    return {group: tuple(pods) for group, pods in grouped.items()}


def regroup_pods(
    earlier: Mapping[str, tuple[Pod, ...]],
    changes: Sequence[Change],
    groups_of: Callable[[Pod], Iterable[str]],
) -> dict[str, tuple[Pod, ...]]:
    """What :func:`group_pods` gives after ``changes`` to objects it grouped into
    ``earlier`` (in namespace, name order); only the groups the changed pods are in are
    worked out again."""
    grouped = dict(earlier)
    touched: dict[str, dict[tuple[str, str], Pod | None]] = {}
    for before, after in changes:
        for obj in (before, after):
            if isinstance(obj, Pod):
                key = (obj.metadata.namespace, obj.metadata.name)
                for group in groups_of(obj):
                    touched.setdefault(group, {})[key] = obj if obj is after else None
    for group, updates in touched.items():
        members = {(p.metadata.namespace, p.metadata.name): p for p in grouped.get(group, ())}
        for key, pod in updates.items():
            if pod is None:
                members.pop(key, None)
            else:
                members[key] = pod
        if members:
            grouped[group] = tuple(members[key] for key in sorted(members))
        else:
            grouped.pop(group, None)
    return grouped


def _controller_group(pod: Pod) -> tuple[str, ...]:
    uid = _controller_uid(pod) if pod.metadata.owner_references else ""
    return (uid,) if uid else ()


def pods_by_owner(objects: Sequence[Object]) -> Mapping[str, tuple[Pod, ...]]:
    """Controller uid -> the pods it controls (a snapshot-derived index; never mutate it)."""
    return group_pods(objects, _controller_group)


def regroup_by_owner(
    earlier: Mapping[str, tuple[Pod, ...]], changes: Sequence[Change]
) -> Mapping[str, tuple[Pod, ...]]:
    """:func:`pods_by_owner` from the one before and the pods changed since (for
    :meth:`Snapshot.derived`)."""
    return regroup_pods(earlier, changes, _controller_group)


def template_hash(template: PodTemplateSpec, salt: str = "") -> str:
    """A stable 10-letter hash of a pod template (the same template: the same hash)."""
    canonical = json.dumps(to_builtins(template), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{salt}\0{canonical}".encode()).digest()
    number = int.from_bytes(digest[:8], "big")
    letters = []
    for _ in range(10):
        number, index = divmod(number, len(_ALPHABET))
        letters.append(_ALPHABET[index])
    return "".join(letters)


def with_selector_label(selector: LabelSelector | None, key: str, value: str) -> LabelSelector:
    """``selector`` that also requires ``key=value``."""
    base = selector or LabelSelector()
    return replace(base, match_labels={**base.match_labels, key: value})


def pod_from_template(
    template: PodTemplateSpec,
    owner: Object,
    *,
    name: str = "",
    generate_name: str = "",
    labels: Mapping[str, str] | None = None,
    spec_changes: Mapping[str, object] | None = None,
) -> Pod:
    """A new pod of ``owner`` (Pending, its controller reference set) from ``template``."""
    meta = template.metadata
    spec = template.spec
    if spec_changes:
        spec = replace(spec, **spec_changes)
    return Pod(
        metadata=ObjectMeta(
            name=name,
            generate_name=generate_name if not name else "",
            namespace=owner.metadata.namespace,
            labels={**meta.labels, **(labels or {})},
            annotations=dict(meta.annotations),
            finalizers=meta.finalizers,
            owner_references=(owner_reference(owner),),
        ),
        spec=spec,
        status=PodStatus(phase="Pending"),
    )


# --- the loop --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Note:
    """An Event a plan asks for: ``reason`` and ``message`` about ``about`` (its owner)."""

    about: Object
    reason: str
    message: str
    type: str = NORMAL


@dataclass(slots=True)
class Plan:
    """The writes one owner needs (all empty: nothing to do)."""

    create: list[Object] = field(default_factory=list)
    update: list[Object] = field(default_factory=list)
    delete: list[Object] = field(default_factory=list)
    #: Events to record once the writes above went through.
    events: list[Note] = field(default_factory=list)
    #: When the owner wants to be looked at again (a pod becoming available).
    wake_at: datetime | None = None

    def wake(self, at: datetime | None) -> None:
        if at is not None and (self.wake_at is None or at < self.wake_at):
            self.wake_at = at

    def status(self, owner: Object, status: object) -> None:
        """Write ``owner`` with ``status`` when it differs from the stored one."""
        if getattr(owner, "status", None) != status:
            self.update.append(replace(owner, status=status))


class WorkloadLoop:
    """Runs ``plan`` for every object of ``owner_type``; subclasses name what they read."""

    name: str
    #: The ``source.component`` of the Events the loop records.
    component: ClassVar[str]
    owner_type: ClassVar[type[Object]]
    #: The other kinds whose changes make a pass look at every owner again.
    inputs: ClassVar[tuple[type[Object], ...]] = (Pod,)

    def __init__(self) -> None:
        self._store: Cluster | None = None
        self._views: tuple[Sequence[Object], ...] | None = None
        self._wake: datetime | None = None
        self._recorder: EventRecorder | None = None
        #: the writes sent, laid over the snapshots until they show them
        self._outbox = Outbox(kinds=[default_registry().for_type(t) for t in self._written_types()])
        #: uids of the owners whose writes' results are not in yet: not planned meanwhile
        self._in_flight: set[str] = set()
        self._clock_now: Callable[[], datetime] = lambda: datetime.now(UTC)

    @classmethod
    def _written_types(cls) -> tuple[type[Object], ...]:
        return tuple(dict.fromkeys((cls.owner_type, *cls.inputs, Pod)))

    def pod_event(self, owner: Object, pod: Object, verb: str, error: str = "") -> Note | None:
        """The Event about ``owner`` after it created (``verb`` "create") or deleted
        (``verb`` "delete") ``pod``, ``error`` saying why that failed; None: none. Kubernetes'
        pod control words them; only pods get one."""
        if not isinstance(pod, Pod):
            return None
        if error:
            noun = "creating" if verb == "create" else "deleting"
            return Note(owner, f"Failed{verb.title()}", f"Error {noun}: {error}", WARNING)
        done = "Created" if verb == "create" else "Deleted"
        return Note(owner, f"Successful{verb.title()}", f"{done} pod: {pod.metadata.name}")

    def plan(self, owner: Object, snapshot: Snapshot, store: Cluster, now: datetime) -> Plan:
        raise NotImplementedError

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._views = None
            self._wake = None
            self._recorder = EventRecorder(store, component=self.component, clock=ctx.now)
            self._outbox.clear()
            self._in_flight.clear()
        self._clock_now = ctx.now
        now = ctx.now()
        snapshot = self._outbox.over(store.snapshot())
        registry = store.registry
        views = tuple(
            snapshot.objects(registry.for_type(t)) for t in (self.owner_type, *self.inputs)
        )
        due = self._wake is not None and self._wake <= now
        if (
            self._views is not None
            and not due
            and all(a is b for a, b in zip(views, self._views, strict=True))
        ):
            return self._wait(now)
        self._views = views
        self._wake = None
        plans: list[tuple[Object | None, Plan]] = []
        for owner in views[0]:
            if owner.metadata.deletion_timestamp is not None:
                continue
            if owner.metadata.uid in self._in_flight:
                self._views = None  # look again once the results are in
                continue
            plan = self.plan(owner, snapshot, store, now)
            plans.append((owner, plan))
            if plan.wake_at is not None and (self._wake is None or plan.wake_at < self._wake):
                self._wake = plan.wake_at
        self._write(store, plans)
        return self._wait(now)

    def _wait(self, now: datetime) -> float | None:
        if self._wake is None:
            return None
        return max(0.0, (self._wake - now).total_seconds())

    def _write(self, store: Cluster, plans: Sequence[tuple[Object | None, Plan]]) -> None:
        """Every plan's writes, in one batch, and then its Events (a plan without an owner
        records none); when a write failed, the owners are looked at again after
        :data:`RETRY_SECONDS`. An owner whose writes are in flight is not planned again
        until their results are in (what the pods it created are then is laid over the
        snapshots until they show them)."""
        tags: list[tuple[int, str, Object]] = []
        writes: list[Write] = []
        for number, (_, plan) in enumerate(plans):
            for obj in plan.create:
                tags.append((number, "create", obj))
                writes.append(Write.create(obj))
        for number, (_, plan) in enumerate(plans):
            for obj in plan.update:
                tags.append((number, "update", obj))
                writes.append(Write.update(obj))
        for number, (_, plan) in enumerate(plans):
            for obj in plan.delete:
                tags.append((number, "delete", obj))
                writes.append(
                    Write.delete_of(store.registry.for_object(obj), obj, precondition=True)
                )
        busy = {
            owner.metadata.uid
            for owner in (plans[number][0] for number, _, _ in tags)
            if owner is not None and owner.metadata.uid
        }
        self._in_flight |= busy
        then = functools.partial(self._written, plans, tags, busy)
        if writes:
            self._outbox.send(store, writes, then)
        else:
            then([])

    def _written(
        self,
        plans: Sequence[tuple[Object | None, Plan]],
        tags: Sequence[tuple[int, str, Object]],
        busy: set[str],
        results: Sequence[Result],
    ) -> None:
        self._in_flight -= busy
        failed: set[int] = set()
        notes: list[Note] = []
        for (number, verb, obj), result in zip(tags, results, strict=True):
            owner = plans[number][0]
            error = result if isinstance(result, StoreError) else None
            if verb == "delete" and isinstance(error, NotFound):
                continue  # one already gone gets no Event
            if error is not None:
                log.warning("%s: %s %s failed: %s", self.name, verb, _describe(obj), error)
                failed.add(number)
            if verb == "update" or owner is None:
                continue
            about = obj if isinstance(result, StoreError) else result[0]
            found = self.pod_event(owner, about, verb, "" if error is None else str(error))
            if found is not None:
                notes.append(found)
        for number, (_, plan) in enumerate(plans):
            if number not in failed:
                notes.extend(plan.events)
        self._record(notes)
        if failed:
            self._views = None
            retry = self._clock_now() + timedelta(seconds=RETRY_SECONDS)
            self._wake = retry if self._wake is None else min(self._wake, retry)

    def _record(self, notes: Sequence[Note]) -> None:
        if not notes or self._recorder is None:
            return
        self._recorder.record_many((n.about, n.type, n.reason, n.message) for n in notes)


def delete_writes(store: Cluster, objs: Iterable[Object]) -> list[Write]:
    """Deletes of ``objs`` as read (each conditional on its resourceVersion)."""
    return [Write.delete_of(store.registry.for_object(o), o, precondition=True) for o in objs]


def delete_failed(result: Result, obj: Object, loop: str) -> bool:
    """Whether a delete's ``result`` is a failure (gone already is not one); logs it."""
    if not isinstance(result, StoreError) or isinstance(result, NotFound):
        return False
    log.warning("%s: delete %s failed: %s", loop, _describe(obj), result)
    return True


def _describe(obj: Object) -> str:
    name = obj.metadata.name or f"{obj.metadata.generate_name}*"
    return f"{obj.kind} {obj.metadata.namespace}/{name}"
