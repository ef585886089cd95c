"""Gang scheduling: identity and configuration, readiness, Permit, failures, PreBind."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.core import Pod, PodSpec
from apis.gang import PodGroup, PodGroupSpec
from apis.meta import ObjectMeta
from controller.errors import ConfigError
from controller.scheduler.gangs import (
    BIND_GANG_ANNOTATIONS,
    GANG_NOT_FOUND,
    Allow,
    CoschedulingArgs,
    Gang,
    GangBook,
    GangMode,
    GangRef,
    GangSource,
    MatchPolicy,
    PostFilterOutcome,
    Reject,
    Rejection,
    Wait,
    bind_annotations,
    check_gang_ready,
    expire,
    gang_from_pod,
    gang_from_pod_group,
    gang_ref,
    parse_args,
    permit,
    post_filter,
    unreserve,
)

NS = "team"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ARGS = CoschedulingArgs()


class FakeClock:
    """Monotonic seconds that only move when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def member(
    name: str,
    gang: str = "g",
    *,
    min_available: int | str | None = 2,
    node: str = "",
    namespace: str = NS,
    **annotations: str,
) -> Pod:
    """A pod of the annotation gang ``gang``; keyword annotations use ``_`` for ``-``."""
    values = {k.ANNOTATION_GANG_NAME: gang}
    if min_available is not None:
        values[k.ANNOTATION_GANG_MIN_AVAILABLE] = str(min_available)
    for key, value in annotations.items():
        values[k.PREFIX_GANG + key.replace("_", "-")] = value
    return Pod(
        metadata=ObjectMeta(
            name=name, namespace=namespace, annotations=values, creation_timestamp=T0
        ),
        spec=PodSpec(node_name=node),
    )


def plain(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> Pod:
    return Pod(
        metadata=ObjectMeta(
            name=name, namespace=NS, labels=dict(labels or {}), annotations=dict(annotations or {})
        )
    )


def pod_group(
    name: str,
    min_member: int,
    *,
    timeout: int | None = None,
    annotations: dict[str, str] | None = None,
) -> PodGroup:
    return PodGroup(
        metadata=ObjectMeta(
            name=name, namespace=NS, annotations=annotations or {}, creation_timestamp=T0
        ),
        spec=PodGroupSpec(min_member=min_member, schedule_timeout_seconds=timeout),
    )


def book_of(*pods: Pod, args: CoschedulingArgs = ARGS) -> GangBook:
    book = GangBook()
    for pod in pods:
        book = book.with_pod(pod, args)
    return book


# --- identity --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(plain("p"), None, id="no-gang"),
        pytest.param(
            plain("p", annotations={k.ANNOTATION_GANG_NAME: "train"}),
            GangRef(id="team/train", source=GangSource.ANNOTATION),
            id="annotation",
        ),
        pytest.param(
            plain("p", labels={k.LABEL_POD_GROUP: "pg"}),
            GangRef(id="team/pg", source=GangSource.POD_GROUP),
            id="podgroup-label",
        ),
        pytest.param(
            plain("p", labels={k.LABEL_POD_GROUP_NAME_LEGACY: "old"}),
            GangRef(id="team/old", source=GangSource.ANNOTATION),
            id="legacy-label",
        ),
        pytest.param(
            plain(
                "p", labels={k.LABEL_POD_GROUP: "pg"}, annotations={k.ANNOTATION_GANG_NAME: "train"}
            ),
            GangRef(id="team/pg", source=GangSource.POD_GROUP),
            id="podgroup-label-wins",
        ),
        pytest.param(
            plain(
                "p",
                labels={k.LABEL_POD_GROUP_NAME_LEGACY: "old"},
                annotations={k.ANNOTATION_GANG_NAME: "a"},
            ),
            GangRef(id="team/a", source=GangSource.ANNOTATION),
            id="annotation-over-legacy",
        ),
        pytest.param(plain("p", annotations={k.ANNOTATION_GANG_NAME: ""}), None, id="empty-name"),
    ],
)
def test_gang_ref(pod: Pod, expected: GangRef | None) -> None:
    assert gang_ref(pod) == expected


# --- configuration from a member's annotations -----------------------------------------------


def test_annotation_gang_fields() -> None:
    gang = gang_from_pod(
        member(
            "p",
            min_available=3,
            total_number="5",
            mode="NonStrict",
            waiting_time="90s",
            groups='["team/b", "team/g"]',
            match_policy="only-waiting",
        ),
        ARGS,
    )
    assert gang == Gang(
        id="team/g",
        min_member=3,
        total_number=5,
        mode=GangMode.NON_STRICT,
        match_policy=MatchPolicy.ONLY_WAITING,
        wait_seconds=90.0,
        groups=("team/b", "team/g"),
        group_id="team/b,team/g",
        source=GangSource.ANNOTATION,
        created=T0,
    )


def test_annotation_gang_defaults() -> None:
    gang = gang_from_pod(member("p", min_available=2), ARGS)
    assert gang is not None
    assert (gang.min_member, gang.total_number) == (2, 2)
    assert gang.mode is GangMode.STRICT
    assert gang.match_policy is MatchPolicy.ONCE_SATISFIED
    assert gang.wait_seconds == 600.0
    assert (gang.groups, gang.group_id) == (("team/g",), "team/g")


@pytest.mark.parametrize("bad", [None, "", "x", "1.5", " 2", "2 ", "1_0", "99999999999"])
def test_min_available_must_be_an_integer(bad: str | None) -> None:
    assert gang_from_pod(member("p", min_available=bad), ARGS) is None


def test_legacy_labels_configure_a_gang_and_their_min_wins() -> None:
    pod = Pod(
        metadata=ObjectMeta(
            name="p",
            namespace=NS,
            labels={
                k.LABEL_POD_GROUP_NAME_LEGACY: "old",
                k.LABEL_POD_GROUP_MIN_AVAILABLE_LEGACY: "4",
            },
            annotations={k.ANNOTATION_GANG_MIN_AVAILABLE: "2"},
        )
    )
    gang = gang_from_pod(pod, ARGS)
    assert gang is not None
    assert (gang.id, gang.min_member) == ("team/old", 4)


@pytest.mark.parametrize(
    ("total", "expected"),
    [(None, 3), ("5", 5), ("3", 3), ("2", 3), ("0", 3), ("many", 3), ("-1", 3)],
)
def test_total_number_never_below_min(total: str | None, expected: int) -> None:
    extra = {} if total is None else {"total_number": total}
    gang = gang_from_pod(member("p", min_available=3, **extra), ARGS)
    assert gang is not None
    assert gang.total_number == expected


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (None, GangMode.STRICT),
        ("Strict", GangMode.STRICT),
        ("NonStrict", GangMode.NON_STRICT),
        ("nonstrict", GangMode.STRICT),
        ("whatever", GangMode.STRICT),
    ],
)
def test_mode(mode: str | None, expected: GangMode) -> None:
    extra = {} if mode is None else {"mode": mode}
    gang = gang_from_pod(member("p", **extra), ARGS)
    assert gang is not None
    assert gang.mode is expected


@pytest.mark.parametrize(
    ("waiting", "expected"),
    [
        (None, 600.0),
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("0", 600.0),
        ("0s", 600.0),
        ("-5s", 600.0),
        ("30", 600.0),
        ("soon", 600.0),
    ],
)
def test_waiting_time(waiting: str | None, expected: float) -> None:
    extra = {} if waiting is None else {"waiting_time": waiting}
    gang = gang_from_pod(member("p", **extra), ARGS)
    assert gang is not None
    assert gang.wait_seconds == expected


def test_waiting_time_default_comes_from_args() -> None:
    gang = gang_from_pod(member("p", waiting_time="bad"), CoschedulingArgs(default_timeout="2m"))
    assert gang is not None
    assert gang.wait_seconds == 120.0


@pytest.mark.parametrize(
    ("groups", "expected", "group_id"),
    [
        (None, ("team/g",), "team/g"),
        ('["team/z", "team/g"]', ("team/z", "team/g"), "team/g,team/z"),
        ("[]", ("team/g",), "team/g"),
        ("not json", ("team/g",), "team/g"),
        ('{"a": 1}', ("team/g",), "team/g"),
        ("[1, 2]", ("team/g",), "team/g"),
        ('["other/x"]', ("other/x",), "other/x"),
    ],
)
def test_groups(groups: str | None, expected: tuple[str, ...], group_id: str) -> None:
    extra = {} if groups is None else {"groups": groups}
    gang = gang_from_pod(member("p", **extra), ARGS)
    assert gang is not None
    assert (gang.groups, gang.group_id) == (expected, group_id)


@pytest.mark.parametrize(
    ("annotations", "default", "expected"),
    [
        ({}, MatchPolicy.ONCE_SATISFIED, MatchPolicy.ONCE_SATISFIED),
        ({}, MatchPolicy.ONLY_WAITING, MatchPolicy.ONLY_WAITING),
        (
            {k.ANNOTATION_GANG_MATCH_POLICY: "waiting-and-running"},
            MatchPolicy.ONCE_SATISFIED,
            MatchPolicy.WAITING_AND_RUNNING,
        ),
        (
            {k.ANNOTATION_POD_GROUP_MATCH_POLICY: "only-waiting"},
            MatchPolicy.ONCE_SATISFIED,
            MatchPolicy.ONLY_WAITING,
        ),
        (
            {
                k.ANNOTATION_GANG_MATCH_POLICY: "only-waiting",
                k.ANNOTATION_POD_GROUP_MATCH_POLICY: "waiting-and-running",
            },
            MatchPolicy.ONCE_SATISFIED,
            MatchPolicy.ONLY_WAITING,
        ),
        (
            {k.ANNOTATION_GANG_MATCH_POLICY: "always"},
            MatchPolicy.WAITING_AND_RUNNING,
            MatchPolicy.WAITING_AND_RUNNING,
        ),
    ],
)
def test_match_policy_and_its_alias(
    annotations: dict[str, str], default: MatchPolicy, expected: MatchPolicy
) -> None:
    pod = member("p")
    pod = Pod(
        metadata=ObjectMeta(
            name="p", namespace=NS, annotations=pod.metadata.annotations | annotations
        )
    )
    gang = gang_from_pod(pod, CoschedulingArgs(default_match_policy=default))
    assert gang is not None
    assert gang.match_policy is expected


def test_pod_group_gang_is_not_configured_by_pods() -> None:
    pod = plain(
        "p", labels={k.LABEL_POD_GROUP: "pg"}, annotations={k.ANNOTATION_GANG_MIN_AVAILABLE: "2"}
    )
    assert gang_from_pod(pod, ARGS) is None


# --- configuration from a PodGroup --------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [(None, 600.0), (30, 30.0), (0, 600.0), (-1, 600.0)],
)
def test_pod_group_timeout(timeout: int | None, expected: float) -> None:
    assert gang_from_pod_group(pod_group("pg", 3, timeout=timeout), ARGS).wait_seconds == expected


def test_pod_group_fields_come_from_spec_and_annotations() -> None:
    group = pod_group(
        "pg",
        3,
        annotations={
            k.ANNOTATION_GANG_TOTAL_NUMBER: "4",
            k.ANNOTATION_GANG_MODE: "NonStrict",
            k.ANNOTATION_GANG_GROUPS: '["team/pg", "team/other"]',
            k.ANNOTATION_POD_GROUP_MATCH_POLICY: "waiting-and-running",
            # The waiting-time annotation is for pods; a PodGroup has scheduleTimeoutSeconds.
            k.ANNOTATION_GANG_WAITING_TIME: "5s",
        },
    )
    assert gang_from_pod_group(group, ARGS) == Gang(
        id="team/pg",
        min_member=3,
        total_number=4,
        mode=GangMode.NON_STRICT,
        match_policy=MatchPolicy.WAITING_AND_RUNNING,
        wait_seconds=600.0,
        groups=("team/pg", "team/other"),
        group_id="team/other,team/pg",
        source=GangSource.POD_GROUP,
        created=T0,
    )


# --- args -----------------------------------------------------------------------------------------


def test_args_defaults() -> None:
    args = parse_args(None)
    assert args == CoschedulingArgs(
        default_timeout="600s",
        controller_workers=1,
        enable_preemption=False,
        aware_network_topology=False,
        default_match_policy=MatchPolicy.ONCE_SATISFIED,
        skip_check_schedule_cycle=False,
    )
    assert args.default_timeout_seconds == 600.0


def test_args_decode_camel_case() -> None:
    args = parse_args(
        {
            "defaultTimeout": "5m",
            "controllerWorkers": 4,
            "enablePreemption": True,
            "awareNetworkTopology": True,
            "defaultMatchPolicy": "only-waiting",
            "skipCheckScheduleCycle": True,
        }
    )
    assert args.default_timeout_seconds == 300.0
    assert args.controller_workers == 4
    assert args.default_match_policy is MatchPolicy.ONLY_WAITING


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"defaultTimeout": "0s"}, "defaultTimeout: must be greater than 0, got '0s'"),
        ({"defaultTimeout": "-1m"}, "defaultTimeout: must be greater than 0, got '-1m'"),
        ({"defaultTimeout": "ten minutes"}, "defaultTimeout: not a duration, got 'ten minutes'"),
        ({"controllerWorkers": 0}, "controllerWorkers: must be at least 1, got 0"),
        ({"defaultMatchPolicy": "sometimes"}, "defaultMatchPolicy"),
        ({"defaultTimout": "1s"}, "defaultTimout"),
    ],
)
def test_bad_args_name_field_and_value(raw: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match="CoschedulingArgs") as raised:
        parse_args(raw)
    assert fragment in str(raised.value)


def test_args_checked_when_built_in_code() -> None:
    with pytest.raises(ConfigError, match="controllerWorkers: must be at least 1, got 0"):
        CoschedulingArgs(controller_workers=0)


# --- the book -------------------------------------------------------------------------------------


def test_first_usable_member_configures_the_gang() -> None:
    book = book_of(
        member("p0", min_available="oops"),
        member("p1", min_available=2, mode="NonStrict"),
        member("p2", min_available=5, mode="Strict"),
    )
    state = book.state("team/g")
    assert state is not None
    assert state.children == {"team/p0", "team/p1", "team/p2"}
    assert state.gang is not None
    assert (state.gang.min_member, state.gang.mode) == (2, GangMode.NON_STRICT)


def test_bound_member_counts_as_bound_and_satisfies_the_group() -> None:
    book = book_of(member("p0", node="n1"), member("p1"))
    state = book.state("team/g")
    assert state is not None
    assert state.bound == {"team/p0"}
    assert "team/g" in book.satisfied


def test_annotation_gang_goes_with_its_last_member() -> None:
    p0, p1 = member("p0"), member("p1")
    book = book_of(p0, p1).without_pod(p0)
    state = book.state("team/g")
    assert state is not None
    assert state.children == {"team/p1"}
    assert book.without_pod(p1).state("team/g") is None


def test_pod_group_gang_outlives_its_members_until_the_pod_group_goes() -> None:
    pod = plain("p", labels={k.LABEL_POD_GROUP: "pg"})
    book = GangBook().with_pod(pod, ARGS)
    state = book.state("team/pg")
    assert state is not None
    assert state.gang is None
    book = book.with_pod_group(pod_group("pg", 1), ARGS)
    assert book.gang("team/pg") is not None
    book = book.without_pod(pod)
    assert book.gang("team/pg") is not None
    assert book.without_pod_group(NS, "pg").state("team/pg") is None


def test_pod_group_update_reconfigures() -> None:
    book = GangBook().with_pod_group(pod_group("pg", 1), ARGS)
    book = book.with_pod_group(pod_group("pg", 4), ARGS)
    gang = book.gang("team/pg")
    assert gang is not None
    assert gang.min_member == 4


def test_the_book_is_immutable() -> None:
    before = book_of(member("p0"))
    after = before.with_pod(member("p1"), ARGS)
    state = before.state("team/g")
    assert state is not None
    assert state.children == {"team/p0"}
    after_state = after.state("team/g")
    assert after_state is not None
    assert after_state.children == {"team/p0", "team/p1"}


# --- PreEnqueue ---------------------------------------------------------------------------------


GROUPS = '["team/a", "team/b"]'


@pytest.mark.parametrize(
    ("pods", "candidate", "expected"),
    [
        pytest.param((), plain("solo"), None, id="not-a-gang-pod"),
        pytest.param(
            (),
            member("p0"),
            "can't find gang, gangName: team/g, podName: team/p0",
            id="unknown-gang",
        ),
        pytest.param(
            (member("p0", min_available=None),),
            member("p0", min_available=None),
            "gang has not init, gangName: team/g, podName: team/p0",
            id="not-configured",
        ),
        pytest.param(
            (member("p0", min_available=3), member("p1", min_available=3)),
            member("p0", min_available=3),
            "gangGroup [team/g] basic check: memberGangs [team/g] child pod not collect enough, "
            "current gang: team/g, podName: team/p0",
            id="too-few-children",
        ),
        pytest.param(
            (member("p0"), member("p1")),
            member("p0"),
            None,
            id="enough-children",
        ),
        pytest.param(
            (member("a0", "a", min_available=1, groups=GROUPS),),
            member("a0", "a", min_available=1, groups=GROUPS),
            "gangGroup [team/a team/b] basic check: memberGangs [team/b] doesn't exists, "
            "current gang: team/a, podName: team/a0",
            id="member-gang-missing",
        ),
        pytest.param(
            (
                member("a0", "a", min_available=1, groups=GROUPS),
                member("b0", "b", min_available=None),
            ),
            member("a0", "a", min_available=1, groups=GROUPS),
            "gangGroup [team/a team/b] basic check: memberGangs [team/b] has not init, "
            "current gang: team/a, podName: team/a0",
            id="member-gang-not-configured",
        ),
        pytest.param(
            (
                member("a0", "a", min_available=1, groups=GROUPS),
                member("b0", "b", min_available=2, groups=GROUPS),
            ),
            member("a0", "a", min_available=1, groups=GROUPS),
            "gangGroup [team/a team/b] basic check: memberGangs [team/a team/b] child pod not "
            "collect enough, current gang: team/a, podName: team/a0",
            id="member-gang-short",
        ),
        pytest.param(
            (
                member("a0", "a", min_available=2, groups='["team/a", "team/b", "team/c"]'),
                member("c0", "c", min_available=None),
            ),
            member("a0", "a", min_available=2, groups='["team/a", "team/b", "team/c"]'),
            "gangGroup [team/a team/b team/c] basic check: memberGangs [team/b] doesn't exists, "
            "memberGangs [team/c] has not init, memberGangs [team/a team/b team/c] child pod not "
            "collect enough, current gang: team/a, podName: team/a0",
            id="every-failure-named",
        ),
        pytest.param(
            (
                member("a0", "a", min_available=1, groups=GROUPS),
                member("b0", "b", min_available=1, groups=GROUPS),
            ),
            member("a0", "a", min_available=1, groups=GROUPS),
            None,
            id="whole-group-ready",
        ),
    ],
)
def test_check_gang_ready(pods: tuple[Pod, ...], candidate: Pod, expected: str | None) -> None:
    assert check_gang_ready(book_of(*pods), candidate) == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (MatchPolicy.ONCE_SATISFIED, None),
        (MatchPolicy.ONLY_WAITING, "child pod not collect enough"),
        (MatchPolicy.WAITING_AND_RUNNING, "child pod not collect enough"),
    ],
)
def test_once_satisfied_group_skips_the_readiness_check(
    policy: MatchPolicy, expected: str | None
) -> None:
    # Four members wanted, one bound, the rest deleted: a replacement is alone.
    book = book_of(member("p0", min_available=4, node="n1", match_policy=policy))
    late = member("p9", min_available=4, match_policy=policy)
    book = book.with_pod(late, ARGS)
    result = check_gang_ready(book, late)
    if expected is None:
        assert result is None
    else:
        assert result is not None
        assert expected in result


# --- Permit -------------------------------------------------------------------------------------


def test_permit_waits_until_min_then_allows_every_waiting_pod() -> None:
    clock = FakeClock()
    pods = [member(f"p{i}", min_available=3, waiting_time="60s") for i in range(3)]
    book = book_of(*pods)
    book, first = permit(book, pods[0], clock.now)
    assert first == Wait(timeout_seconds=60.0)
    clock.advance(10)
    book, second = permit(book, pods[1], clock.now)
    # The group's first Strict wait runs out at +60s: 50 s are left.
    assert second == Wait(timeout_seconds=50.0)
    clock.advance(5)
    book, third = permit(book, pods[2], clock.now)
    assert third == Allow(pods=("team/p0", "team/p1", "team/p2"))
    state = book.state("team/g")
    assert state is not None
    assert not state.waiting
    assert state.binding == {"team/p0", "team/p1", "team/p2"}


def test_non_strict_pods_wait_their_own_time() -> None:
    clock = FakeClock()
    pods = [member(f"p{i}", min_available=3, waiting_time="60s", mode="NonStrict") for i in (0, 1)]
    book = book_of(*pods)
    book, _ = permit(book, pods[0], clock.now)
    clock.advance(10)
    _, decision = permit(book, pods[1], clock.now)
    assert decision == Wait(timeout_seconds=60.0)


def test_permit_outside_a_gang_and_for_an_unknown_gang() -> None:
    book = GangBook()
    assert permit(book, plain("solo"), 0.0) == (book, Allow(pods=("team/solo",)))
    assert permit(book, member("p0"), 0.0) == (book, Reject(message=GANG_NOT_FOUND))
    unconfigured = book_of(member("p0", min_available=None))
    assert permit(unconfigured, member("p0", min_available=None), 0.0)[1] == Reject(
        message=GANG_NOT_FOUND
    )


@pytest.mark.parametrize(
    ("policy", "bound", "waiting", "allowed"),
    [
        # min 3; `bound` members already run, `waiting` reach Permit one after the other.
        pytest.param(MatchPolicy.ONLY_WAITING, 0, 3, True, id="only-waiting-enough"),
        pytest.param(MatchPolicy.ONLY_WAITING, 1, 2, False, id="only-waiting-ignores-bound"),
        pytest.param(MatchPolicy.WAITING_AND_RUNNING, 1, 2, True, id="waiting-and-running"),
        pytest.param(MatchPolicy.WAITING_AND_RUNNING, 0, 2, False, id="waiting-and-running-short"),
        pytest.param(MatchPolicy.ONCE_SATISFIED, 0, 3, True, id="once-satisfied-enough"),
        pytest.param(MatchPolicy.ONCE_SATISFIED, 1, 1, True, id="once-satisfied-after-a-bind"),
        pytest.param(MatchPolicy.ONCE_SATISFIED, 0, 2, False, id="once-satisfied-short"),
    ],
)
def test_permit_by_match_policy(
    policy: MatchPolicy, bound: int, waiting: int, allowed: bool
) -> None:
    running = [
        member(f"r{i}", min_available=3, node="n1", match_policy=policy) for i in range(bound)
    ]
    pending = [member(f"p{i}", min_available=3, match_policy=policy) for i in range(waiting)]
    book = book_of(*running, *pending)
    decision: Allow | Wait | Reject = Reject(message="not reached")
    for pod in pending:
        book, decision = permit(book, pod, 0.0)
    if allowed:
        assert decision == Allow(pods=tuple(f"team/p{i}" for i in range(waiting)))
    else:
        assert isinstance(decision, Wait)


def test_group_waits_for_every_gang_and_allows_them_together() -> None:
    a = [member(f"a{i}", "a", min_available=2, groups=GROUPS) for i in range(2)]
    b = [member("b0", "b", min_available=1, groups=GROUPS)]
    book = book_of(*a, *b)
    book, d1 = permit(book, a[0], 0.0)
    book, d2 = permit(book, a[1], 1.0)
    assert isinstance(d1, Wait)
    assert isinstance(d2, Wait)
    book, d3 = permit(book, b[0], 2.0)
    assert d3 == Allow(pods=("team/a0", "team/a1", "team/b0"))
    assert {"team/a", "team/b"} <= book.satisfied


def test_later_member_of_a_satisfied_group_passes_alone() -> None:
    pods = [member(f"p{i}", min_available=2) for i in range(3)]
    book = book_of(*pods)
    book, _ = permit(book, pods[0], 0.0)
    book, _ = permit(book, pods[1], 0.0)
    book, decision = permit(book, pods[2], 0.0)
    assert decision == Allow(pods=("team/p2",))


# --- Strict and NonStrict failures ------------------------------------------------------------


def _two_waiting(mode: str, policy: str = "once-satisfied") -> tuple[GangBook, list[Pod]]:
    pods = [member(f"p{i}", min_available=3, mode=mode, match_policy=policy) for i in range(3)]
    book = book_of(*pods)
    book, _ = permit(book, pods[0], 0.0)
    book, _ = permit(book, pods[1], 0.0)
    return book, pods


def _waiting(book: GangBook, gang: str = "team/g") -> set[str]:
    state = book.state(gang)
    assert state is not None
    return set(state.waiting)


def test_strict_post_filter_rejects_every_waiting_pod() -> None:
    book, pods = _two_waiting("Strict")
    book, outcome = post_filter(book, pods[2], "0/3 nodes are available: 3 Insufficient cpu.")
    message = (
        'Gang "team/g" gets rejected due to member Pod "p2" is unschedulable with reason '
        '"0/3 nodes are available: 3 Insufficient cpu.", alreadyWaitForBound: 2'
    )
    assert outcome == PostFilterOutcome(
        message='Gang "team/g" gets rejected due to pod is unschedulable',
        rejections=(
            Rejection(pod="team/p0", message=message),
            Rejection(pod="team/p1", message=message),
        ),
    )
    assert _waiting(book) == set()
    state = book.state("team/g")
    assert state is not None
    assert state.children == {"team/p0", "team/p1", "team/p2"}


def test_non_strict_post_filter_keeps_the_others_waiting() -> None:
    book, pods = _two_waiting("NonStrict")
    book, outcome = post_filter(book, pods[2], "0/3 nodes are available")
    assert outcome == PostFilterOutcome()
    assert _waiting(book) == {"team/p0", "team/p1"}


def test_post_filter_outside_or_without_a_gang() -> None:
    assert post_filter(GangBook(), plain("solo"), "x")[1] == PostFilterOutcome()
    assert post_filter(GangBook(), member("p0"), "x")[1] == PostFilterOutcome(
        message='Pod "team/p0" cannot find Gang "g"'
    )


def test_strict_unreserve_rejects_the_rest_of_the_group() -> None:
    book, pods = _two_waiting("Strict")
    book, rejections = unreserve(book, pods[0])
    assert rejections == (
        Rejection(
            pod="team/p1", message='Gang "team/g" gets rejected due to Pod "p0" in Unreserve'
        ),
    )
    assert _waiting(book) == set()


def test_non_strict_unreserve_drops_only_that_pod() -> None:
    book, pods = _two_waiting("NonStrict")
    book, rejections = unreserve(book, pods[0])
    assert rejections == ()
    assert _waiting(book) == {"team/p1"}


@pytest.mark.parametrize(
    ("policy", "late_allowed"),
    [("once-satisfied", True), ("waiting-and-running", True), ("only-waiting", False)],
)
def test_late_member_after_the_group_bound(policy: str, late_allowed: bool) -> None:
    # min 2: p0 and p1 are allowed together and bind; then p2 reaches Permit and p3 fits nowhere.
    pods = [member(f"p{i}", min_available=2, match_policy=policy) for i in range(4)]
    book = book_of(*pods)
    for pod in pods[:2]:
        book, _ = permit(book, pod, 0.0)
    book = book.with_bound(pods[0]).with_bound(pods[1])
    book, decision = permit(book, pods[2], 0.0)
    book, outcome = post_filter(book, pods[3], "0/1 nodes are available")
    if late_allowed:
        assert decision == Allow(pods=("team/p2",))
        assert outcome.rejections == ()
    else:
        # only-waiting never counts bound members: p2 waits, and p3's failure rejects it.
        assert isinstance(decision, Wait)
        assert [r.pod for r in outcome.rejections] == ["team/p2"]
    if policy == "once-satisfied":
        # A satisfied once-satisfied group adds no message and rejects nobody.
        assert outcome == PostFilterOutcome()


def test_strict_timeout_rejects_the_group_on_the_fake_clock() -> None:
    clock = FakeClock()
    pods = [member(f"p{i}", min_available=3, waiting_time="30s") for i in range(3)]
    book = book_of(*pods)
    book, _ = permit(book, pods[0], clock.now)
    clock.advance(20)
    book, _ = permit(book, pods[1], clock.now)
    clock.advance(9)
    book, none_yet = expire(book, clock.now)
    assert none_yet == ()
    clock.advance(1)
    book, rejections = expire(book, clock.now)
    assert rejections == (
        Rejection(
            pod="team/p0",
            message="rejected due to timeout after waiting 30s at plugin Coscheduling",
        ),
        Rejection(
            pod="team/p1", message='Gang "team/g" gets rejected due to Pod "p0" in Unreserve'
        ),
    )
    assert _waiting(book) == set()


def test_non_strict_timeouts_are_per_pod() -> None:
    clock = FakeClock()
    pods = [
        member(f"p{i}", min_available=3, waiting_time="30s", mode="NonStrict") for i in range(2)
    ]
    book = book_of(*pods)
    book, _ = permit(book, pods[0], clock.now)
    clock.advance(20)
    book, _ = permit(book, pods[1], clock.now)
    clock.advance(10)
    book, rejections = expire(book, clock.now)
    assert [r.pod for r in rejections] == ["team/p0"]
    assert _waiting(book) == {"team/p1"}
    clock.advance(20)
    book, rejections = expire(book, clock.now)
    assert [r.pod for r in rejections] == ["team/p1"]


def test_rejected_pods_can_try_again() -> None:
    book, pods = _two_waiting("Strict")
    book, _ = post_filter(book, pods[2], "no fit")
    for pod in pods:
        book, decision = permit(book, pod, 5.0)
    assert decision == Allow(pods=("team/p0", "team/p1", "team/p2"))


# --- PreBind --------------------------------------------------------------------------------------


def test_bind_annotations_for_pods_allowed_together() -> None:
    a = [member(f"a{i}", "a", min_available=2, groups=GROUPS) for i in range(2)]
    b = [member("b0", "b", min_available=1, groups=GROUPS)]
    book = book_of(*a, *b)
    for pod in (*a, *b):
        book, _ = permit(book, pod, 0.0)
    expected = {
        k.ANNOTATION_BIND_GANG_GROUP_ID: "team/a,team/b",
        k.ANNOTATION_BIND_GANG_MEMBER_COUNT: "3",
        k.ANNOTATION_BIND_GANG_GROUP_ID_DEPRECATED: "team/a,team/b",
        k.ANNOTATION_BIND_GANG_MEMBER_COUNT_DEPRECATED: "3",
    }
    assert bind_annotations(book, a[0]) == expected
    assert bind_annotations(book, b[0]) == expected
    assert set(expected) == set(BIND_GANG_ANNOTATIONS)


def test_no_bind_annotations_for_a_lone_pod_or_a_late_member() -> None:
    lone = member("solo", "s", min_available=1)
    book = book_of(lone)
    book, decision = permit(book, lone, 0.0)
    assert decision == Allow(pods=("team/solo",))
    assert bind_annotations(book, lone) == {}
    assert bind_annotations(book, plain("x")) == {}

    pods = [member(f"p{i}", min_available=2) for i in range(3)]
    book = book_of(*pods)
    for pod in pods:
        book, _ = permit(book, pod, 0.0)
    assert bind_annotations(book, pods[0])[k.ANNOTATION_BIND_GANG_MEMBER_COUNT] == "2"
    assert bind_annotations(book, pods[2]) == {}


def test_bind_record_goes_once_every_member_bound() -> None:
    pods = [member(f"p{i}", min_available=2) for i in range(2)]
    book = book_of(*pods)
    for pod in pods:
        book, _ = permit(book, pod, 0.0)
    assert book.bind_members
    book = book.with_bound(pods[0])
    assert book.bind_members
    book = book.with_bound(pods[1])
    assert not book.bind_members


# --- property: Strict groups are all or nothing ------------------------------------------------

_GANG_A = [f"a{i}" for i in range(3)]
_GANG_B = [f"b{i}" for i in range(2)]
_OPS = st.lists(
    st.tuples(
        # Permit comes up more often, so that groups fill up as well as fail.
        st.sampled_from(["permit"] * 4 + ["post_filter", "unreserve", "bind", "tick"]),
        st.sampled_from(_GANG_A + _GANG_B),
        st.integers(min_value=0, max_value=20),
    ),
    max_size=30,
)


def _strict_group(policy: str) -> dict[str, Pod]:
    common = {"groups": GROUPS, "mode": "Strict", "waiting_time": "30s", "match_policy": policy}
    pods = {name: member(name, "a", min_available=2, **common) for name in _GANG_A}
    pods.update({name: member(name, "b", min_available=1, **common) for name in _GANG_B})
    return pods


def _group_waiting(book: GangBook) -> set[str]:
    waiting: set[str] = set()
    for gang in ("team/a", "team/b"):
        state = book.state(gang)
        if state is not None:
            waiting.update(state.waiting)
    return waiting


@settings(max_examples=150, deadline=None)
@given(policy=st.sampled_from([p.value for p in MatchPolicy]), ops=_OPS)
def test_strict_group_is_allowed_entirely_or_not_at_all(
    policy: str, ops: list[tuple[str, str, int]]
) -> None:
    pods = _strict_group(policy)
    book = book_of(*pods.values())
    now = 0.0
    for op, name, seconds in ops:
        pod = pods[name]
        key = f"team/{name}"
        before = _group_waiting(book)
        state = book.state(f"team/{name[0]}")
        assert state is not None
        reserved = key in before or key in state.binding
        if (op in ("permit", "post_filter") and (reserved or key in state.bound)) or (
            op in ("unreserve", "bind") and not reserved
        ):
            continue  # not a step the scheduler takes for a pod in that state
        allowed: tuple[str, ...] = ()
        rejected: tuple[Rejection, ...] = ()
        if op == "permit":
            book, decision = permit(book, pod, now)
            if isinstance(decision, Allow):
                allowed = decision.pods
        elif op == "post_filter":
            book, outcome = post_filter(book, pod, "no fit")
            rejected = outcome.rejections
        elif op == "unreserve":
            book, rejected = unreserve(book, pod)
        elif op == "bind":
            if key in state.binding:
                book = book.with_bound(pod)
        else:
            now += seconds
            book, rejected = expire(book, now)
        after = _group_waiting(book)
        if allowed:
            # Everyone who was waiting went through with the pod, and nobody is left behind.
            assert set(allowed) == before | {key}
            assert after == set()
        if rejected:
            # A Strict failure leaves none of the group waiting.
            assert after == set()
            assert {r.pod for r in rejected} <= before
        assert not (set(allowed) & {r.pod for r in rejected})


def test_a_gang_left_out_of_its_own_groups_still_goes_with_them() -> None:
    groups = '["team/b"]'
    a = [member(f"a{i}", "a", min_available=2, groups=groups) for i in range(2)]
    b = [member("b0", "b", min_available=1)]
    book = book_of(*a, *b)
    gang = book.gang("team/a")
    assert gang is not None
    assert gang.members == ("team/b", "team/a")
    book, first = permit(book, a[0], 0.0)
    assert isinstance(first, Wait)
    book, outcome = post_filter(book, a[1], "no fit")
    assert [r.pod for r in outcome.rejections] == ["team/a0"]
