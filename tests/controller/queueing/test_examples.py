"""The worked examples of queue-spec §16 (A-D, F, and our runtime-quota answer to E) as table
cases through the ``queueing`` loop on a fake clock.

Where Koord-Queue sleeps (30 s / 60 s timers, a 3 min anti-hang), our loop re-tries at once on
the event that may change the answer: every "after a release" step below runs at the same
instant as the release."""

from __future__ import annotations

import pytest

from apis import constants as k
from apis.meta import ObjectMeta
from apis.queueing import Queue, QueueSpec
from controller.queueing import phases
from controller.store.sqlite import Store
from tests.controller.queueing.conftest import Clock, Harness, cores, holding

DEQUEUED = phases.DEQUEUED
ENQUEUED = phases.ENQUEUED


def example_a(harness: Harness, policy: str) -> None:
    """Quota ``team-a`` (max 8 cpu) with 4 cpu held; U1 (prio 100, 6), U2 (50, 4), U3 (50, 2)."""
    harness.quota("team-a", max=cores(8), labels={k.LABEL_QUEUE_POLICY: policy})
    harness.unit("held", cpu_m=4000, phase=DEQUEUED, admissions=holding("main"), created=-60)
    harness.unit("u1", priority=100, cpu_m=6000, created=1)
    harness.unit("u2", priority=50, cpu_m=4000, created=2)
    harness.unit("u3", priority=50, cpu_m=2000, created=3)


@pytest.mark.parametrize(
    ("policy", "first", "after_release"),
    [
        # Priority skips U1 (does not fit) and admits U2; when the held job ends U1 still does
        # not fit (U2 holds 4), U3 does: small jobs pass a big one.
        pytest.param("Priority", {"u2"}, {"u2", "u3"}, id="priority-skips-the-head"),
        # Block keeps U1 at the head of team-a: nothing passes it; the release admits U1 first,
        # and U2 (no longer fitting) blocks U3 again.
        pytest.param("Block", set(), {"u1"}, id="block-holds-the-head"),
        # Intelligent with every unit in the high tier (priority >= 4) is strict like Block.
        pytest.param("Intelligent", set(), {"u1"}, id="intelligent-high-tier-strict"),
    ],
)
def test_example_a_priority_against_block(
    harness: Harness, policy: str, first: set[str], after_release: set[str]
) -> None:
    example_a(harness, policy)
    harness.settle()
    assert harness.holding() - {"held"} == first
    assert harness.phase("u1") == ENQUEUED
    assert "limited quotaName:team-a, limited resKey:cpu" in harness.get("u1").status.message
    harness.finish("held")
    harness.settle()  # the release re-tries the queue at once: no 30 s / 60 s sleep
    assert harness.holding() == after_release
    for name in {"u1", "u2", "u3"} - after_release:
        assert harness.phase(name) == ENQUEUED
        assert not harness.get(name).status.admissions


def shared_queue(harness: Harness, policy: str, quotas: str, **annotations: str) -> None:
    """A hand-made Queue ``shared`` that the listed quotas may enqueue into."""
    harness.store.apply(
        Queue(
            metadata=ObjectMeta(
                name="shared",
                namespace=k.QUEUE_NAMESPACE,
                annotations={k.ANNOTATION_QUEUE_AVAILABLE_QUOTA: quotas, **annotations},
            ),
            spec=QueueSpec(queue_policy=policy, priority=10),
        )
    )


IN_SHARED = {k.ANNOTATION_QUEUE_NAME: "shared"}


@pytest.mark.parametrize(
    ("policy", "admitted"),
    [
        # Block blocks per quota: team-a is blocked by U1, U4 of team-b still goes.
        pytest.param("Block", {"u4"}, id="block-is-per-quota"),
        pytest.param("Priority", {"u2", "u4"}, id="priority"),
    ],
)
def test_example_b_blocking_is_per_quota_not_per_queue(
    harness: Harness, policy: str, admitted: set[str]
) -> None:
    harness.quota("team-a", max=cores(8))
    harness.quota("team-b", max=cores(8))
    shared_queue(harness, policy, "team-a,team-b")
    harness.unit("held", cpu_m=4000, phase=DEQUEUED, admissions=holding("main"), created=-60)
    harness.unit("u1", priority=100, cpu_m=6000, created=1, annotations=IN_SHARED)
    harness.unit("u2", priority=50, cpu_m=4000, created=2, annotations=IN_SHARED)
    harness.unit("u4", priority=10, cpu_m=1000, created=4, quota="team-b", annotations=IN_SHARED)
    harness.settle()
    assert harness.holding() - {"held"} == admitted
    assert harness.get("u4").spec.queue == "shared"


@pytest.mark.parametrize(
    ("policy", "low_admitted_first"),
    [
        # Intelligent: H1 (high tier) does not fit, so the low tier is not scanned at all.
        pytest.param("Intelligent", False, id="intelligent-strict-tiers"),
        # Block orders by priority but blocks per quota only: L1 of q2 goes.
        pytest.param("Block", True, id="block"),
        pytest.param("Priority", True, id="priority"),
    ],
)
def test_example_c_intelligent_tiers(
    harness: Harness, policy: str, low_admitted_first: bool
) -> None:
    harness.quota("q1", max=cores(4))
    harness.quota("q2", max=cores(8))
    shared_queue(harness, policy, "q1,q2", **{k.ANNOTATION_QUEUE_PRIORITY_THRESHOLD: "4"})
    harness.unit("h1", quota="q1", priority=5, cpu_m=6000, created=1, annotations=IN_SHARED)
    harness.unit("l1", quota="q2", priority=1, cpu_m=1000, created=2, annotations=IN_SHARED)
    harness.settle()
    assert harness.phase("h1") == ENQUEUED
    assert (harness.phase("l1") == DEQUEUED) is low_admitted_first
    # q1 grows: H1 fits, and the low tier opens in the same instant (no 30 s / 3 min timer).
    harness.quota("q1", max=cores(8))
    harness.settle()
    assert harness.holding() == {"h1", "l1"}


@pytest.mark.parametrize(
    ("ask", "other_used", "admitted", "limited"),
    [
        pytest.param(4, 60, True, "", id="fits-team-and-dept"),
        pytest.param(6, 60, False, "team", id="team-max-40"),
        pytest.param(5, 61, False, "dept", id="dept-max-100"),
        pytest.param(4, 61, True, "", id="exactly-full"),
    ],
)
def test_example_d_tree_check_walks_the_parent_chain(
    harness: Harness, ask: int, other_used: int, admitted: bool, limited: str
) -> None:
    harness.quota("dept", max=cores(100), min=cores(10), is_parent=True)
    harness.quota("team", max=cores(40), min=cores(10), parent="dept")
    harness.quota("other", max=cores(100), parent="dept")
    harness.unit(
        "team-held", quota="team", cpu_m=35_000, phase=DEQUEUED, admissions=holding("main")
    )
    harness.unit(
        "other-held",
        quota="other",
        cpu_m=other_used * 1000,
        phase=DEQUEUED,
        admissions=holding("main"),
    )
    harness.unit("job", quota="team", cpu_m=ask * 1000, created=1)
    harness.settle()
    assert (harness.phase("job") == DEQUEUED) is admitted
    if limited:
        message = harness.get("job").status.message
        assert f"limited quotaName:{limited}, limited resKey:cpu" in message
        assert harness.used("team") == cores(35)


@pytest.mark.parametrize(
    ("quota_max", "min_count", "after_scale_up"),
    [
        pytest.param(16, None, 12, id="room-for-all-12"),
        pytest.param(10, None, 8, id="no-room-all-or-nothing"),
        pytest.param(10, 4, 10, id="min-count-admits-what-fits"),
    ],
)
def test_example_f_replica_level_admission(
    harness: Harness, quota_max: int, min_count: int | None, after_scale_up: int
) -> None:
    harness.quota("team-a", max=cores(quota_max))
    harness.unit("job", count=8, min_count=min_count, pod_sets=(), cpu_m=1000)
    harness.settle()
    assert harness.admitted("job") == {"main": 8}
    assert harness.used("team-a") == cores(8)
    # The user scales the workers to 12: the unit is no longer satisfied and is scanned again.
    job = harness.get("job")
    scaled = tuple(
        pod_set.__class__(
            name=pod_set.name, template=pod_set.template, count=12, min_count=pod_set.min_count
        )
        for pod_set in job.spec.pod_set
    )
    harness.write_spec("job", pod_set=scaled)
    harness.settle()
    assert harness.admitted("job") == {"main": after_scale_up}
    assert harness.phase("job") == DEQUEUED
    assert harness.used("team-a") == cores(after_scale_up)
    # Scale down to 6: the reporter shrinks replicas and the quota is given back.
    harness.write_spec(
        "job",
        pod_set=tuple(
            pod_set.__class__(
                name=pod_set.name, template=pod_set.template, count=6, min_count=pod_set.min_count
            )
            for pod_set in job.spec.pod_set
        ),
    )
    harness.write(
        harness.get("job"),
        admissions=tuple(
            a.__class__(name=a.name, replicas=6, running=6)
            for a in harness.get("job").status.admissions
        ),
    )
    harness.settle()
    assert harness.used("team-a") == cores(6)


@pytest.mark.parametrize(
    ("a_held", "b_held", "victims"),
    [
        # Runtime with c wanting 3: a 4.5, b 4.5 (c 3); b is over, a is not: only b may go.
        pytest.param(4, 8, {"b1"}, id="only-the-quota-over-runtime"),
        # Both over their runtime (a by 0.5, b by 2.5); one victim is enough: the quota
        # further over its runtime gives back first (Kueue DRS: the higher share first).
        pytest.param(5, 7, {"b1"}, id="further-over-runtime-first"),
    ],
)
def test_example_e_reclaim_prefers_the_quota_furthest_over_runtime(
    store: Store, clock: Clock, a_held: int, b_held: int, victims: set[str]
) -> None:
    harness = Harness(store, clock, reclaim_min_runtime=0)
    harness.node("n1", cores(12))
    harness.quota("cluster", max=cores(12), min=cores(10), is_parent=True)
    for name, floor in (("a", 2), ("b", 2), ("c", 6)):
        harness.quota(name, min=cores(floor), max=cores(12), parent="cluster")
    # a was admitted after b: a plain "most recent first" order would pick a.
    harness.unit(
        "b1",
        quota="b",
        cpu_m=b_held * 1000,
        phase=DEQUEUED,
        admissions=holding("main"),
        allocated=-120,
    )
    harness.unit(
        "a1",
        quota="a",
        cpu_m=a_held * 1000,
        phase=DEQUEUED,
        admissions=holding("main"),
        allocated=-60,
    )
    harness.settle()
    harness.unit("c1", quota="c", cpu_m=3000, created=10)
    harness.settle()
    evicted = {e.involved_object.name for e in harness.events("Evicted")}
    assert evicted == victims
    for name in victims:
        assert harness.phase(name) == ENQUEUED
        assert not harness.get(name).status.admissions
    harness.settle()
    assert harness.phase("c1") == DEQUEUED
