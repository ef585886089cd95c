"""Gang scheduling (the ``Coscheduling`` plugin's core): all or nothing for a group of pods.

A gang is identified as ``<namespace>/<name>``. Its pods name it in one of three ways:

- the annotations ``gang.scheduling.koordinator.sh/name`` and ``.../min-available`` (the gang
  is configured by the first member whose annotations are usable);
- the label ``pod-group.scheduling.sigs.k8s.io=<name>`` of a PodGroup object (the gang is
  configured by the PodGroup: ``spec.minMember``, ``spec.scheduleTimeoutSeconds`` and the same
  ``gang.scheduling.koordinator.sh/*`` annotations on the PodGroup);
- the legacy labels ``pod-group.scheduling.sigs.k8s.io/name`` and ``.../min-available``.

Several gangs can form a group (annotation ``groups``, a JSON list of gang ids); nothing of the
group binds until every gang of it is satisfied.

Flow, as the plugin adapter drives it:

1. PreEnqueue / BeforePreFilter: :func:`check_gang_ready` holds a pod back until every gang of
   its group exists, is configured, and has at least ``min-available`` members created.
2. Permit: :func:`permit` records the pod as waiting and either allows every waiting pod of the
   group (every gang valid under its match policy), or says how long the pod may still wait.
3. Failure: :func:`post_filter` (the pod fits nowhere), :func:`unreserve` (it failed after
   Reserve) and :func:`expire` (waits that timed out). In ``Strict`` mode a failure rejects
   every waiting pod of the group; ``NonStrict`` keeps them waiting.
4. PreBind: :func:`bind_annotations` gives the group id and member count to write on the pod.
5. PostBind: :meth:`GangBook.with_bound`.

:class:`GangBook` is immutable: every step returns a new book and a decision. Time is a number
of seconds on any monotonic clock the caller chooses (``now``).
"""

from __future__ import annotations

import contextlib
import enum
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Annotated, Any, Final

import msgspec

from apis.bounded import BoundedError, decode
from apis.constants import (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED,
    ANNOTATION_GANG_GROUPS,
    ANNOTATION_GANG_MATCH_POLICY,
    ANNOTATION_GANG_MIN_AVAILABLE,
    ANNOTATION_GANG_MODE,
    ANNOTATION_GANG_NAME,
    ANNOTATION_GANG_TOTAL_NUMBER,
    ANNOTATION_GANG_WAITING_TIME,
    ANNOTATION_POD_GROUP_MATCH_POLICY,
    LABEL_POD_GROUP,
    LABEL_POD_GROUP_MIN_AVAILABLE_LEGACY,
    LABEL_POD_GROUP_NAME_LEGACY,
)
from apis.core import Pod
from apis.duration import Duration, DurationError
from apis.gang import PodGroup
from controller.errors import ConfigError

__all__ = [
    "BIND_GANG_ANNOTATIONS",
    "DEFAULT_TIMEOUT_SECONDS",
    "GANG_NOT_FOUND",
    "PLUGIN_NAME",
    "Allow",
    "CoschedulingArgs",
    "Gang",
    "GangBook",
    "GangMode",
    "GangRef",
    "GangSource",
    "GangState",
    "MatchPolicy",
    "PermitDecision",
    "PostFilterOutcome",
    "Reject",
    "Rejection",
    "Wait",
    "bind_annotations",
    "check_gang_ready",
    "expire",
    "gang_from_pod",
    "gang_from_pod_group",
    "gang_ref",
    "parse_args",
    "permit",
    "pod_key",
    "post_filter",
    "unreserve",
]

#: The plugin's name in profiles, statuses and rejection messages.
PLUGIN_NAME: Final = "Coscheduling"
#: ``CoschedulingArgs.defaultTimeout`` when not configured.
DEFAULT_TIMEOUT_SECONDS: Final = 600
#: Permit's message for a gang pod whose gang is unknown or not configured.
GANG_NOT_FOUND: Final = "Gang not found"
#: PreBind writes these four keys, or removes them when the pod binds outside a gang group.
BIND_GANG_ANNOTATIONS: Final = (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED,
    ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED,
)

_INT32: Final = re.compile(r"[+-]?[0-9]+")
_INT32_MAX: Final = 2**31 - 1
#: Longest int32 (or duration) text read; anything longer is not one.
_SHORT: Final = 32
#: Most gang ids a ``gang-groups`` annotation may list.
MAX_GROUPS: Final = 1024
_GROUPS: Final = msgspec.json.Decoder(
    Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_GROUPS)]
)


class GangMode(enum.StrEnum):
    #: A failure of one member rejects every waiting member of the group (the default).
    STRICT = "Strict"
    #: A failure affects the failing pod only.
    NON_STRICT = "NonStrict"


class MatchPolicy(enum.StrEnum):
    """Which members count towards ``min-available`` at Permit."""

    #: Pods waiting in Permit (or binding) only.
    ONLY_WAITING = "only-waiting"
    #: Waiting and bound pods.
    WAITING_AND_RUNNING = "waiting-and-running"
    #: Waiting pods until the group has been satisfied once; after that, nothing is checked.
    ONCE_SATISFIED = "once-satisfied"


class GangSource(enum.StrEnum):
    #: Configured by its members' annotations (or the legacy labels).
    ANNOTATION = "annotation"
    #: Configured by a PodGroup object.
    POD_GROUP = "podgroup"


# --- args ----------------------------------------------------------------------------------------


class CoschedulingArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """``CoschedulingArgs`` of the scheduler configuration."""

    #: Go duration a gang waits in Permit when neither its annotation nor its PodGroup says;
    #: must be > 0. Default ``600s``.
    default_timeout: str = f"{DEFAULT_TIMEOUT_SECONDS}s"
    #: Workers of the PodGroup status controller; must be >= 1. Default 1.
    controller_workers: int = 1
    #: Gang-aware preemption. Default off (accepted, not implemented here).
    enable_preemption: bool = False
    #: Network-topology-aware gang placement. Default off (accepted, not implemented here).
    aware_network_topology: bool = False
    #: Match policy of gangs whose annotation is absent or unknown. Default ``once-satisfied``.
    default_match_policy: MatchPolicy = MatchPolicy.ONCE_SATISFIED
    #: Deprecated; accepted and ignored. Default false.
    skip_check_schedule_cycle: bool = False

    def __post_init__(self) -> None:
        try:
            timeout = Duration.parse(self.default_timeout)
        except DurationError:
            raise ConfigError(
                f"defaultTimeout: not a duration, got {self.default_timeout!r}"
            ) from None
        if timeout.nanoseconds <= 0:
            raise ConfigError(
                f"defaultTimeout: must be greater than 0, got {self.default_timeout!r}"
            )
        if isinstance(self.controller_workers, bool) or self.controller_workers < 1:
            raise ConfigError(
                f"controllerWorkers: must be at least 1, got {self.controller_workers!r}"
            )
        if self.default_match_policy not in tuple(MatchPolicy):
            raise ConfigError(
                f"defaultMatchPolicy: must be one of {', '.join(MatchPolicy)}, "
                f"got {self.default_match_policy!r}"
            )

    @property
    def default_timeout_seconds(self) -> float:
        return Duration.parse(self.default_timeout).seconds


def parse_args(raw: Mapping[str, Any] | None) -> CoschedulingArgs:
    """Decode the plugin's ``args`` (camelCase keys); unknown keys and bad values are errors."""
    try:
        return msgspec.convert(dict(raw or {}), CoschedulingArgs)
    except msgspec.ValidationError as err:
        raise ConfigError(f"CoschedulingArgs: {err}") from None


# --- gang identity and configuration ----------------------------------------------------------


class GangRef(msgspec.Struct, frozen=True, kw_only=True):
    """Which gang a pod belongs to, and what configures that gang."""

    #: ``<namespace>/<name>``.
    id: str
    source: GangSource


class Gang(msgspec.Struct, frozen=True, kw_only=True):
    """A configured gang."""

    #: ``<namespace>/<name>``.
    id: str
    #: Members that must be placed together (``min-available`` / ``spec.minMember``).
    min_member: int
    #: Members expected in all (``total-number``); never below ``min_member``.
    total_number: int
    mode: GangMode = GangMode.STRICT
    match_policy: MatchPolicy = MatchPolicy.ONCE_SATISFIED
    #: How long a member may wait in Permit, seconds.
    wait_seconds: float = float(DEFAULT_TIMEOUT_SECONDS)
    #: Ids of the gangs of its group, as written (default: itself).
    groups: tuple[str, ...] = ()
    #: The group's id: its gang ids sorted and joined with ``,``.
    group_id: str = ""
    source: GangSource = GangSource.ANNOTATION
    #: Creation time of the configuring pod or PodGroup.
    created: datetime | None = None

    @property
    def members(self) -> tuple[str, ...]:
        """The gangs whose waiting pods go (or fail) together with this gang's: its group, and
        itself even when the group annotation leaves it out."""
        return self.groups if self.id in self.groups else (*self.groups, self.id)


def pod_key(pod: Pod) -> str:
    """``<namespace>/<name>`` of a pod."""
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def gang_ref(pod: Pod) -> GangRef | None:
    """The gang ``pod`` belongs to, or ``None`` for a pod outside every gang.

    The PodGroup label wins over the gang annotation, which wins over the legacy label.
    """
    namespace = pod.metadata.namespace
    labels = pod.metadata.labels
    if name := labels.get(LABEL_POD_GROUP, ""):
        return GangRef(id=f"{namespace}/{name}", source=GangSource.POD_GROUP)
    name = pod.metadata.annotations.get(ANNOTATION_GANG_NAME, "") or labels.get(
        LABEL_POD_GROUP_NAME_LEGACY, ""
    )
    if name:
        return GangRef(id=f"{namespace}/{name}", source=GangSource.ANNOTATION)
    return None


def _parse_int32(text: str | None) -> int | None:
    if text is None or len(text) > _SHORT or _INT32.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -_INT32_MAX - 1 <= value <= _INT32_MAX else None


def _total_number(annotations: Mapping[str, str], min_member: int) -> int:
    total = _parse_int32(annotations.get(ANNOTATION_GANG_TOTAL_NUMBER))
    return min_member if total is None or total < min_member else total


def _mode(annotations: Mapping[str, str]) -> GangMode:
    mode = annotations.get(ANNOTATION_GANG_MODE, "")
    return GangMode.NON_STRICT if mode == GangMode.NON_STRICT else GangMode.STRICT


def _match_policy(annotations: Mapping[str, str], default: MatchPolicy) -> MatchPolicy:
    text = annotations.get(ANNOTATION_GANG_MATCH_POLICY, "") or annotations.get(
        ANNOTATION_POD_GROUP_MATCH_POLICY, ""
    )
    try:
        return MatchPolicy(text)
    except ValueError:
        return MatchPolicy(default)


def _wait_seconds(text: str | None, default: float) -> float:
    """A Go duration; absent, invalid (or too long to be one), zero or negative means
    ``default``."""
    if text is not None and len(text) > _SHORT:
        return default
    try:
        waited = Duration.parse(text or "")
    except DurationError:
        return default
    return waited.seconds if waited.nanoseconds > 0 else default


def _groups(text: str | None, gang_id: str) -> tuple[str, ...]:
    """The JSON list of gang ids; absent, malformed, empty or past the bounds (256 KiB, 1024
    ids) means the gang alone."""
    if text:
        with contextlib.suppress(BoundedError):
            groups: list[str] = decode(text, _GROUPS, ANNOTATION_GANG_GROUPS)
            return tuple(groups)
    return (gang_id,)


def _group_id(groups: Iterable[str]) -> str:
    return ",".join(sorted(groups))


def _configured(
    gang_id: str,
    *,
    min_member: int,
    annotations: Mapping[str, str],
    wait_seconds: float,
    args: CoschedulingArgs,
    source: GangSource,
    created: datetime | None,
) -> Gang:
    groups = _groups(annotations.get(ANNOTATION_GANG_GROUPS), gang_id)
    return Gang(
        id=gang_id,
        min_member=min_member,
        total_number=_total_number(annotations, min_member),
        mode=_mode(annotations),
        match_policy=_match_policy(annotations, args.default_match_policy),
        wait_seconds=wait_seconds,
        groups=groups,
        group_id=_group_id(groups),
        source=source,
        created=created,
    )


def gang_from_pod(pod: Pod, args: CoschedulingArgs) -> Gang | None:
    """The gang as a member's annotations configure it; ``None`` when they cannot.

    ``min-available`` comes from the legacy label when that is set, else from the annotation;
    missing or not an integer leaves the gang unconfigured (the next member may configure it).
    """
    ref = gang_ref(pod)
    if ref is None or ref.source != GangSource.ANNOTATION:
        return None
    annotations = pod.metadata.annotations
    legacy = pod.metadata.labels.get(LABEL_POD_GROUP_MIN_AVAILABLE_LEGACY, "")
    min_member = _parse_int32(legacy or annotations.get(ANNOTATION_GANG_MIN_AVAILABLE))
    if min_member is None:
        return None
    return _configured(
        ref.id,
        min_member=min_member,
        annotations=annotations,
        wait_seconds=_wait_seconds(
            annotations.get(ANNOTATION_GANG_WAITING_TIME), args.default_timeout_seconds
        ),
        args=args,
        source=GangSource.ANNOTATION,
        created=pod.metadata.creation_timestamp,
    )


def gang_from_pod_group(group: PodGroup, args: CoschedulingArgs) -> Gang:
    """The gang a PodGroup configures (``scheduleTimeoutSeconds`` counts only when > 0)."""
    timeout = group.spec.schedule_timeout_seconds
    return _configured(
        f"{group.metadata.namespace}/{group.metadata.name}",
        min_member=group.spec.min_member,
        annotations=group.metadata.annotations,
        wait_seconds=float(timeout)
        if timeout is not None and timeout > 0
        else args.default_timeout_seconds,
        args=args,
        source=GangSource.POD_GROUP,
        created=group.metadata.creation_timestamp,
    )


# --- state ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangState:
    """What the scheduler knows of one gang. Pods are named by :func:`pod_key`."""

    #: ``None``: members exist but nothing configured the gang yet.
    gang: Gang | None = None
    #: Every member created and not deleted.
    children: frozenset[str] = frozenset()
    #: Members waiting in Permit, each with the time its wait runs out.
    waiting: Mapping[str, float] = field(default_factory=dict)
    #: Members allowed through Permit and not bound yet.
    binding: frozenset[str] = frozenset()
    #: Members bound to a node.
    bound: frozenset[str] = frozenset()

    @property
    def assumed(self) -> int:
        """Members past Reserve: waiting or binding."""
        return len(self.waiting) + len(self.binding)


@dataclass(frozen=True, slots=True)
class GangBook:
    """Every gang the scheduler knows, immutable: each change returns a new book."""

    gangs: Mapping[str, GangState] = field(default_factory=dict)
    #: Gangs whose group has been satisfied once (a member bound, or the group allowed).
    satisfied: frozenset[str] = frozenset()
    #: Per group id, the pods allowed together when the group was last allowed (PreBind's
    #: member count); dropped once none of them is still binding.
    bind_members: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def state(self, gang_id: str) -> GangState | None:
        return self.gangs.get(gang_id)

    def gang(self, gang_id: str) -> Gang | None:
        state = self.gangs.get(gang_id)
        return None if state is None else state.gang

    def once_satisfied(self, gang: Gang) -> bool:
        """Whether ``gang``'s group has been satisfied at least once."""
        return any(g in self.satisfied for g in gang.members)

    def waiting_in_group(self, gang: Gang) -> tuple[str, ...]:
        """Every pod waiting in Permit in a gang of ``gang``'s group, sorted."""
        pods: set[str] = set()
        for member in gang.members:
            state = self.gangs.get(member)
            if state is not None:
                pods.update(state.waiting)
        return tuple(sorted(pods))

    # --- members and PodGroups -----------------------------------------------------------

    def with_pod(self, pod: Pod, args: CoschedulingArgs) -> GangBook:
        """A member created or updated; an already bound one counts as bound."""
        ref = gang_ref(pod)
        if ref is None:
            return self
        key = pod_key(pod)
        state = self.gangs.get(ref.id, GangState())
        state = replace(state, children=state.children | {key})
        if state.gang is None and ref.source == GangSource.ANNOTATION:
            state = replace(state, gang=gang_from_pod(pod, args))
        book = self._put(ref.id, state)
        if pod.spec.node_name:
            book = book._bind(ref.id, key)
        return book

    def without_pod(self, pod: Pod) -> GangBook:
        """A member deleted. An annotation gang goes away with its last member."""
        ref = gang_ref(pod)
        if ref is None or ref.id not in self.gangs:
            return self
        key = pod_key(pod)
        state = self.gangs[ref.id]
        state = replace(
            state,
            children=state.children - {key},
            waiting=_without(state.waiting, (key,)),
            binding=state.binding - {key},
            bound=state.bound - {key},
        )
        if not state.children and (
            state.gang is None or state.gang.source == GangSource.ANNOTATION
        ):
            gangs = dict(self.gangs)
            del gangs[ref.id]
            return replace(self, gangs=gangs)._pruned()
        return self._put(ref.id, state)._pruned()

    def with_pod_group(self, group: PodGroup, args: CoschedulingArgs) -> GangBook:
        """A PodGroup created or updated: it (re)configures its gang."""
        gang = gang_from_pod_group(group, args)
        state = self.gangs.get(gang.id, GangState())
        return self._put(gang.id, replace(state, gang=gang))

    def without_pod_group(self, namespace: str, name: str) -> GangBook:
        """A PodGroup deleted: its gang is forgotten."""
        gang_id = f"{namespace}/{name}"
        if gang_id not in self.gangs:
            return self
        gangs = dict(self.gangs)
        del gangs[gang_id]
        return replace(self, gangs=gangs)._pruned()

    def with_bound(self, pod: Pod) -> GangBook:
        """PostBind: the member is bound, and its group counts as satisfied once."""
        ref = gang_ref(pod)
        if ref is None or ref.id not in self.gangs:
            return self
        return self._bind(ref.id, pod_key(pod))._pruned()

    # --- internals --------------------------------------------------------------------------

    def _put(self, gang_id: str, state: GangState) -> GangBook:
        gangs = dict(self.gangs)
        gangs[gang_id] = state
        return replace(self, gangs=gangs)

    def _bind(self, gang_id: str, key: str) -> GangBook:
        state = self.gangs[gang_id]
        state = replace(
            state,
            waiting=_without(state.waiting, (key,)),
            binding=state.binding - {key},
            bound=state.bound | {key},
        )
        return replace(self._put(gang_id, state), satisfied=self.satisfied | {gang_id})

    def _pruned(self) -> GangBook:
        """Drops bind-member records none of whose pods is still binding."""
        binding: set[str] = set()
        for state in self.gangs.values():
            binding.update(state.binding)
        kept = {group: pods for group, pods in self.bind_members.items() if pods & binding}
        if len(kept) == len(self.bind_members):
            return self
        return replace(self, bind_members=kept)

    def _drop_waiting(self, pods: Iterable[str]) -> GangBook:
        """Takes ``pods`` out of Permit wait (and out of binding); they stay members."""
        dropped = frozenset(pods)
        gangs = {
            gang_id: replace(
                state,
                waiting=_without(state.waiting, dropped),
                binding=state.binding - dropped,
            )
            if dropped & (state.waiting.keys() | state.binding)
            else state
            for gang_id, state in self.gangs.items()
        }
        return replace(self, gangs=gangs)._pruned()


def _without(waiting: Mapping[str, float], keys: Iterable[str]) -> Mapping[str, float]:
    drop = set(keys) & waiting.keys()
    if not drop:
        return waiting
    return {key: deadline for key, deadline in waiting.items() if key not in drop}


# --- PreEnqueue / BeforePreFilter ----------------------------------------------------------------


def _go_list(items: Iterable[str]) -> str:
    return "[" + " ".join(items) + "]"


def _go_quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def check_gang_ready(book: GangBook, pod: Pod) -> str | None:
    """Why ``pod`` may not be scheduled yet, or ``None`` when it may.

    The pod waits until every gang of its group exists, is configured and has at least its
    ``min-available`` members created. A group satisfied once under ``once-satisfied`` no longer
    waits. The adapter reports the message as UnschedulableAndUnresolvable.
    """
    ref = gang_ref(pod)
    if ref is None:
        return None
    key = pod_key(pod)
    state = book.state(ref.id)
    if state is None:
        return f"can't find gang, gangName: {ref.id}, podName: {key}"
    gang = state.gang
    if gang is None:
        return f"gang has not init, gangName: {ref.id}, podName: {key}"
    if gang.match_policy == MatchPolicy.ONCE_SATISFIED and book.once_satisfied(gang):
        return None
    missing: list[str] = []
    unconfigured: list[str] = []
    short: list[str] = []
    for member_id in gang.groups:
        member = book.state(member_id)
        if member is None:
            missing.append(member_id)
        elif member.gang is None:
            unconfigured.append(member_id)
        elif len(member.children) < member.gang.min_member:
            short.append(member_id)
    failures: list[str] = []
    if missing:
        failures.append(f"memberGangs {_go_list(missing)} doesn't exists")
    if unconfigured:
        failures.append(f"memberGangs {_go_list(unconfigured)} has not init")
    if short:
        # Upstream names the whole group here, not only the short gangs.
        failures.append(f"memberGangs {_go_list(gang.groups)} child pod not collect enough")
    if not failures:
        return None
    return (
        f"gangGroup {_go_list(gang.groups)} basic check: {', '.join(failures)}, "
        f"current gang: {gang.id}, podName: {key}"
    )


# --- Permit --------------------------------------------------------------------------------------


class Allow(msgspec.Struct, frozen=True, kw_only=True):
    """Every pod in ``pods`` (the pod at Permit included) goes on to bind."""

    pods: tuple[str, ...]


class Wait(msgspec.Struct, frozen=True, kw_only=True):
    """The pod waits in Permit at most ``timeout_seconds`` longer."""

    timeout_seconds: float


class Reject(msgspec.Struct, frozen=True, kw_only=True):
    """The pod is unschedulable with ``message``."""

    message: str


PermitDecision = Allow | Wait | Reject


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """A pod taken out of Permit wait; the adapter rejects its waiting pod with ``message``."""

    pod: str
    message: str


def _valid_for_permit(book: GangBook, state: GangState | None) -> bool:
    if state is None or state.gang is None:
        return False
    gang = state.gang
    if gang.match_policy == MatchPolicy.ONLY_WAITING:
        return state.assumed >= gang.min_member
    if gang.match_policy == MatchPolicy.WAITING_AND_RUNNING:
        return state.assumed + len(state.bound) >= gang.min_member
    return state.assumed >= gang.min_member or book.once_satisfied(gang)


def permit(book: GangBook, pod: Pod, now: float) -> tuple[GangBook, PermitDecision]:
    """Records ``pod`` as waiting, then allows its whole group or tells it how long to wait.

    The group is allowed when every gang of it is configured and valid under its own match
    policy: ``only-waiting`` counts members waiting or binding, ``waiting-and-running`` adds
    bound ones, ``once-satisfied`` is valid like ``only-waiting`` or once the group has been
    satisfied. Allowing moves every waiting pod of the group to binding and marks the group
    satisfied. Otherwise the pod waits until its own wait time runs out, or until the first
    wait of a ``Strict`` gang of the group runs out (that timeout rejects the whole group).
    A pod outside every gang is allowed alone; one of an unknown gang is rejected.
    """
    key = pod_key(pod)
    ref = gang_ref(pod)
    if ref is None:
        return book, Allow(pods=(key,))
    state = book.state(ref.id)
    if state is None or state.gang is None:
        return book, Reject(message=GANG_NOT_FOUND)
    gang = state.gang
    if key not in state.waiting:
        waiting = dict(state.waiting)
        waiting[key] = now + gang.wait_seconds
        state = replace(state, waiting=waiting, binding=state.binding - {key})
        book = book._put(gang.id, state)
    if all(_valid_for_permit(book, book.state(member)) for member in gang.members):
        return _allow_group(book, gang, key)
    deadline = state.waiting[key]
    for member_id in gang.members:
        member = book.state(member_id)
        if member is not None and member.gang is not None and member.gang.mode == GangMode.STRICT:
            deadline = min([deadline, *member.waiting.values()])
    return book, Wait(timeout_seconds=max(deadline - now, 0.0))


def _allow_group(book: GangBook, gang: Gang, key: str) -> tuple[GangBook, PermitDecision]:
    members = set(gang.members)
    allowed: set[str] = {key}
    gangs = dict(book.gangs)
    for member_id in members:
        state = gangs.get(member_id)
        if state is None or not state.waiting:
            continue
        allowed.update(state.waiting)
        gangs[member_id] = replace(state, waiting={}, binding=state.binding | state.waiting.keys())
    bind_members = dict(book.bind_members)
    bind_members.setdefault(gang.group_id, frozenset(allowed))
    book = GangBook(gangs=gangs, satisfied=book.satisfied | members, bind_members=bind_members)
    return book, Allow(pods=tuple(sorted(allowed)))


# --- failures ------------------------------------------------------------------------------------


def _reject_group(
    book: GangBook, gang: Gang, message: str
) -> tuple[GangBook, tuple[Rejection, ...]]:
    pods = book.waiting_in_group(gang)
    if not pods:
        return book, ()
    return book._drop_waiting(pods), tuple(Rejection(pod=p, message=message) for p in pods)


def _unreserve_message(gang: Gang, pod_name: str) -> str:
    return f"Gang {_go_quote(gang.id)} gets rejected due to Pod {_go_quote(pod_name)} in Unreserve"


def _rejects_group(book: GangBook, gang: Gang) -> bool:
    satisfied = gang.match_policy == MatchPolicy.ONCE_SATISFIED and book.once_satisfied(gang)
    return gang.mode == GangMode.STRICT and not satisfied


def unreserve(book: GangBook, pod: Pod) -> tuple[GangBook, tuple[Rejection, ...]]:
    """``pod`` failed after Reserve (a later plugin, its Permit wait, or binding failed).

    It leaves the waiting and binding sets. In a ``Strict`` gang that is not already satisfied
    under ``once-satisfied``, every other waiting pod of the group is rejected too.
    """
    ref = gang_ref(pod)
    if ref is None:
        return book, ()
    gang = book.gang(ref.id)
    if gang is None:
        return book, ()
    book = book._drop_waiting((pod_key(pod),))
    if not _rejects_group(book, gang):
        return book, ()
    return _reject_group(book, gang, _unreserve_message(gang, pod.metadata.name))


class PostFilterOutcome(msgspec.Struct, frozen=True, kw_only=True):
    #: The failing pod's Unschedulable message ("" when the plugin adds none).
    message: str = ""
    #: Waiting pods of the group rejected because of it.
    rejections: tuple[Rejection, ...] = ()


def post_filter(book: GangBook, pod: Pod, reason: str) -> tuple[GangBook, PostFilterOutcome]:
    """``pod`` fits no node (``reason``: the scheduler's summary of why).

    In a ``Strict`` gang not already satisfied under ``once-satisfied``, every waiting pod of
    the group is rejected; ``NonStrict`` leaves them waiting.
    """
    ref = gang_ref(pod)
    if ref is None:
        return book, PostFilterOutcome()
    gang = book.gang(ref.id)
    if gang is None:
        name = ref.id.split("/", 1)[1]
        return book, PostFilterOutcome(
            message=f"Pod {_go_quote(pod_key(pod))} cannot find Gang {_go_quote(name)}"
        )
    if not _rejects_group(book, gang):
        return book, PostFilterOutcome()
    state = book.gangs[gang.id]
    message = (
        f"Gang {_go_quote(gang.id)} gets rejected due to member Pod "
        f"{_go_quote(pod.metadata.name)} is unschedulable with reason {_go_quote(reason)}, "
        f"alreadyWaitForBound: {state.assumed}"
    )
    book, rejections = _reject_group(book, gang, message)
    return book, PostFilterOutcome(
        message=f"Gang {_go_quote(gang.id)} gets rejected due to pod is unschedulable",
        rejections=rejections,
    )


def expire(book: GangBook, now: float) -> tuple[GangBook, tuple[Rejection, ...]]:
    """Rejects the pods whose Permit wait ran out by ``now``, and what that drags with it.

    A timed-out pod is rejected as the scheduler framework does it, then unreserved: in a
    ``Strict`` gang that rejects the rest of the group's waiting pods as well.
    """
    due = sorted(
        (deadline, key, gang_id)
        for gang_id, state in book.gangs.items()
        for key, deadline in state.waiting.items()
        if deadline <= now
    )
    rejections: list[Rejection] = []
    for _, key, gang_id in due:
        state = book.state(gang_id)
        if state is None or key not in state.waiting or state.gang is None:
            continue
        gang = state.gang
        waited = Duration.from_seconds(gang.wait_seconds)
        rejections.append(
            Rejection(
                pod=key,
                message=f"rejected due to timeout after waiting {waited} at plugin {PLUGIN_NAME}",
            )
        )
        book = book._drop_waiting((key,))
        if _rejects_group(book, gang):
            message = _unreserve_message(gang, key.split("/", 1)[1])
            book, dragged = _reject_group(book, gang, message)
            rejections.extend(dragged)
    return book, tuple(rejections)


# --- PreBind -------------------------------------------------------------------------------------


def bind_annotations(book: GangBook, pod: Pod) -> dict[str, str]:
    """The annotations PreBind writes on ``pod``; empty: remove :data:`BIND_GANG_ANNOTATIONS`.

    Written only for a pod allowed together with at least one other pod of its group: the
    group id and how many pods were allowed together, under both the current and the
    deprecated keys.
    """
    ref = gang_ref(pod)
    gang = None if ref is None else book.gang(ref.id)
    if gang is None:
        return {}
    members = book.bind_members.get(gang.group_id, frozenset())
    if len(members) <= 1 or pod_key(pod) not in members:
        return {}
    count = str(len(members))
    return {
        ANNOTATION_BIND_GANG_GROUP_ID: gang.group_id,
        ANNOTATION_BIND_GANG_MEMBER_COUNT: count,
        ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED: gang.group_id,
        ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED: count,
    }
