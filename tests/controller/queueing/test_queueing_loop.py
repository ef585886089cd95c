"""The ``queueing`` loop beyond the checklist (issue 7 points 3, 5, 6 and 7): runtime quota along
the parent chain, ``kube-queue/max-jobs``, quota status, partial and incremental admission,
admission-check backoff, execution budgets, reclaim, waiting reasons, tenant caps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import msgspec
import pytest

from apis import constants as k
from apis.meta import ObjectMeta
from apis.queueing import AdmissionCheckState, Queue, QueueAdmissionCheck, QueueSpec, QueueUnit
from controller.errors import Conflict
from controller.queueing import phases
from controller.queueing.loop import QueueingLoop
from controller.queueing.plugins import PluginRef, QueueingConfig, build_plugins
from controller.simulate import simulate
from controller.store.sqlite import Store
from controller.store.writes import Pending, Write
from tests.controller.queueing.conftest import (
    T0,
    Clock,
    Harness,
    cores,
    holding,
    quota_object,
    unit_object,
)

DEQUEUED = phases.DEQUEUED
ENQUEUED = phases.ENQUEUED


def condition(harness: Harness, name: str, kind: str) -> tuple[str, str, str]:
    """(status, reason, message) of a condition; ("", "", "") when the unit has none."""
    for c in harness.get(name).status.conditions:
        if c.type == kind:
            return (c.status, c.reason, c.message)
    return ("", "", "")


# --- 3. policies -------------------------------------------------------------------------------


def test_intelligent_puts_non_preemptible_first_inside_a_tier(harness: Harness) -> None:
    harness.quota("team-a", max=cores(1), labels={k.LABEL_QUEUE_POLICY: "Intelligent"})
    harness.unit("preemptible", priority=5, created=1)
    harness.unit("pinned", priority=5, created=2, labels={k.LABEL_QUOTA_PREEMPTIBLE: "false"})
    harness.settle()
    assert harness.holding() == {"pinned"}


@pytest.mark.parametrize(
    ("threshold", "admitted"),
    [
        # Both units in the high tier: priority order, the big one blocks team-a only.
        pytest.param("1", {"small-q2"}, id="both-high"),
        # prio 3 is low tier at the default threshold 4: the high unit keeps it out.
        pytest.param("4", set(), id="default-threshold"),
    ],
)
def test_intelligent_threshold_from_the_queue_annotation(
    harness: Harness, threshold: str, admitted: set[str]
) -> None:
    harness.quota("q1", max=cores(1))
    harness.quota("q2", max=cores(4))
    harness.store.apply(
        Queue(
            metadata=ObjectMeta(
                name="tiers",
                namespace=k.QUEUE_NAMESPACE,
                annotations={
                    k.ANNOTATION_QUEUE_AVAILABLE_QUOTA: "*",
                    k.ANNOTATION_QUEUE_PRIORITY_THRESHOLD: threshold,
                },
            ),
            spec=QueueSpec(queue_policy="Intelligent"),
        )
    )
    to_queue = {k.ANNOTATION_QUEUE_NAME: "tiers"}
    harness.unit("big-q1", quota="q1", cpu_m=2000, priority=5, annotations=to_queue)
    harness.unit("small-q2", quota="q2", priority=3, annotations=to_queue, created=1)
    harness.settle()
    assert harness.holding() == admitted


def test_max_depth_limits_the_units_looked_at(harness: Harness) -> None:
    harness.quota("team-a", max=cores(10))
    harness.store.apply(
        Queue(
            metadata=ObjectMeta(
                name="shallow",
                namespace=k.QUEUE_NAMESPACE,
                annotations={
                    k.ANNOTATION_QUEUE_AVAILABLE_QUOTA: "team-a",
                    k.ANNOTATION_QUEUE_MAX_DEPTH_LEGACY: "2",
                },
            ),
            spec=QueueSpec(queue_policy="Priority"),
        )
    )
    to_queue = {k.ANNOTATION_QUEUE_NAME: "shallow"}
    harness.unit("too-big", cpu_m=20_000, priority=9, annotations=to_queue)
    harness.unit("second", priority=5, annotations=to_queue, created=1)
    harness.unit("third", priority=1, annotations=to_queue, created=2)
    harness.run()
    assert harness.holding() == {"second"}  # "third" is below the first 2 of the queue
    harness.settle()
    assert harness.holding() == {"second", "third"}  # within the first 2 once "second" left


# --- 5. the quota tree ---------------------------------------------------------------------------


def test_a_childs_runtime_is_bounded_by_its_parents_runtime(harness: Harness) -> None:
    harness.node("n1", cores(10))
    harness.quota("dept-1", min=cores(4), max=cores(20), is_parent=True)
    harness.quota("dept-2", min=cores(6), max=cores(20), is_parent=True)
    harness.quota("team-a", min=cores(4), max=cores(20), parent="dept-1")
    harness.quota("team-b", min=cores(6), max=cores(20), parent="dept-2")
    harness.unit("b", quota="team-b", cpu_m=6000, phase=DEQUEUED, admissions=holding("main"))
    harness.unit("a", cpu_m=6000, created=1)
    harness.settle()
    assert harness.phase("a") == ENQUEUED
    message = harness.get("a").status.message
    # dept-2 keeps its 6 of the 10 cpu, so dept-1 and team-a below it may use 4.
    assert message.endswith("cpu needs 6, 4 free of runtime 4")
    harness.advance(15)
    assert harness.annotation("dept-1", k.ANNOTATION_QUOTA_RUNTIME) == {"cpu": "4"}
    # Nothing else wants the cluster: the same unit borrows up to its max.
    harness.finish("b")
    harness.settle()
    assert harness.phase("a") == DEQUEUED


@pytest.mark.parametrize(
    ("limit", "admitted"),
    [
        pytest.param({k.RESOURCE_QUEUE_MAX_JOBS: 2}, 2, id="leaf"),
        pytest.param({k.RESOURCE_QUEUE_MAX_JOBS: 100}, 3, id="parent", marks=()),
    ],
)
def test_max_jobs_caps_the_number_of_holding_units(
    harness: Harness, limit: dict[str, int], admitted: int
) -> None:
    harness.quota("dept", max={"cpu": 100_000, k.RESOURCE_QUEUE_MAX_JOBS: 3}, is_parent=True)
    harness.quota("team-a", max={"cpu": 100_000, **limit}, parent="dept")
    for n in range(4):
        harness.unit(f"job-{n}", created=n)
    harness.settle()
    assert len(harness.holding()) == admitted
    assert "limited resKey:kube-queue/max-jobs" in harness.get("job-3").status.message
    harness.finish("job-0")
    harness.settle()
    assert len(harness.holding() - {"job-0"}) == admitted


def test_quota_status_shows_used_runtime_and_request_up_the_tree(harness: Harness) -> None:
    harness.node("n1", cores(16))
    harness.quota("dept", max=cores(12), min=cores(2), is_parent=True)
    harness.quota("team-a", min=cores(2), max=cores(8), parent="dept")
    harness.unit("job", count=2, cpu_m=1500)
    harness.unit("waiting", cpu_m=6000, created=1)
    harness.settle()
    harness.advance(15)
    team = harness.quota_obj("team-a")
    assert team.status.used == cores(3)
    assert harness.quota_obj("dept").status.used == cores(3)
    assert harness.annotation("team-a", k.ANNOTATION_QUOTA_RUNTIME) == {"cpu": "8"}
    request = harness.annotation("team-a", k.ANNOTATION_QUOTA_REQUEST)
    assert request["cpu"] == "8"  # 9 wanted, capped by max
    # A release is shown at the next refresh.
    harness.finish("job")
    harness.advance(15)
    assert harness.quota_obj("team-a").status.used == cores(6)


def test_a_restarted_loop_admits_nothing_that_would_exceed(store: Store, clock: Clock) -> None:
    first = Harness(store, clock)
    first.quota("team-a", max=cores(8))
    for n in range(3):
        first.unit(f"held-{n}", cpu_m=2000, created=n)
    first.settle()
    assert len(first.holding()) == 3
    for n in range(3):
        first.unit(f"new-{n}", cpu_m=2000, created=10 + n)
    restarted = Harness(store, clock)
    restarted.settle()
    assert len(restarted.holding()) == 4
    assert restarted.used("team-a") == cores(8)


# --- 6. admission --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "min_count", "first"),
    [
        pytest.param(6, 4, 6, id="partial-then-the-rest"),
        pytest.param(3, 4, 0, id="below-min-count-waits"),
        pytest.param(6, None, 0, id="no-min-count-all-or-nothing"),
        pytest.param(8, 4, 8, id="room-for-all"),
    ],
)
def test_min_count_partial_then_incremental_admission(
    harness: Harness, free: int, min_count: int | None, first: int
) -> None:
    harness.quota("team-a", max=cores(8))
    if free < 8:
        harness.unit("other", cpu_m=(8 - free) * 1000, phase=DEQUEUED, admissions=holding("main"))
    harness.unit("job", count=8, min_count=min_count, created=1)
    harness.settle()
    assert harness.admitted("job").get("main", 0) == first
    if free < 8:
        harness.finish("other")
        harness.settle()  # the rest of the replicas are admitted when room appears
    assert harness.admitted("job") == {"main": 8}
    assert harness.phase("job") == DEQUEUED
    assert harness.used("team-a") == cores(8)


def admission_checked(harness: Harness) -> None:
    harness.quota("team-a", max=cores(8))
    harness.store.apply(
        Queue(
            metadata=ObjectMeta(
                name="checked",
                namespace=k.QUEUE_NAMESPACE,
                annotations={k.ANNOTATION_QUEUE_AVAILABLE_QUOTA: "team-a"},
            ),
            spec=QueueSpec(admission_checks=(QueueAdmissionCheck(name="prov"),)),
        )
    )
    harness.unit("job", cpu_m=4000, annotations={k.ANNOTATION_QUEUE_NAME: "checked"})
    harness.settle()


def retry(harness: Harness) -> None:
    unit = harness.get("job")
    harness.store.update(
        msgspec.structs.replace(
            unit,
            status=msgspec.structs.replace(
                unit.status,
                admission_checks=(
                    AdmissionCheckState(name="prov", state="Retry", last_transition_time=T0),
                ),
            ),
        )
    )
    harness.settle()


def test_retry_releases_the_quota_and_backs_off_ten_seconds(harness: Harness, clock: Clock) -> None:
    admission_checked(harness)
    assert harness.phase("job") == phases.RESERVED
    retry(harness)
    unit = harness.get("job")
    assert unit.status.phase == phases.TIMEOUT_BACKOFF
    assert not unit.status.admissions
    assert harness.used("team-a") == {}
    assert unit.status.requeue_state is not None
    assert unit.status.requeue_state.count == 1
    assert unit.status.requeue_state.requeue_at == clock.now + timedelta(seconds=10)
    assert condition(harness, "job", "Evicted")[:2] == ("True", "BackoffTimeout")
    harness.advance(9)
    assert harness.phase("job") == phases.TIMEOUT_BACKOFF
    harness.advance(1)
    # Enqueued again at requeueAt and, the quota being free, reserved again at once.
    assert harness.phase("job") == phases.RESERVED
    assert [s.state for s in harness.get("job").status.admission_checks] == ["Pending"]


def test_retry_backoff_doubles_with_every_retry(harness: Harness, clock: Clock) -> None:
    admission_checked(harness)
    for attempt, delay in enumerate((10, 20, 40, 80), start=1):
        retry(harness)
        state = harness.get("job").status.requeue_state
        assert state is not None
        assert state.count == attempt
        assert state.requeue_at == clock.now + timedelta(seconds=delay)
        harness.advance(delay)
        assert harness.phase("job") == phases.RESERVED


def test_maximum_execution_time_deactivates_a_running_unit(harness: Harness, clock: Clock) -> None:
    harness.quota("team-a", max=cores(4))
    harness.unit("job", cpu_m=3000, max_exec=60)
    harness.unit("next", cpu_m=3000, created=1)
    harness.settle()
    running = harness.get("job")
    harness.write(
        running,
        phase=phases.RUNNING,
        conditions=phases.mirrored_conditions(running.status.conditions, phases.RUNNING, clock()),
    )
    harness.advance(59)
    assert harness.phase("job") == phases.RUNNING
    harness.advance(1)
    unit = harness.get("job")
    assert unit.status.phase == ENQUEUED
    assert unit.spec.active is False
    assert not unit.status.admissions
    assert condition(harness, "job", "Evicted")[:2] == (
        "True",
        phases.EVICTED_MAX_EXECUTION,
    )
    assert harness.holding() == {"next"}


def reclaim_setup(harness: Harness) -> None:
    """team-b borrowed team-a's guaranteed 6 cpu 30 s ago; team-a now wants 4 of them."""
    harness.node("n1", cores(10))
    harness.quota("dept", max=cores(10), min=cores(10), is_parent=True)
    harness.quota("team-a", min=cores(6), max=cores(10), parent="dept")
    harness.quota("team-b", min=cores(4), max=cores(10), parent="dept")
    harness.unit(
        "borrower",
        quota="team-b",
        cpu_m=10_000,
        priority=100,
        phase=DEQUEUED,
        admissions=holding("main"),
        allocated=-30,
    )
    harness.settle()
    harness.unit("owner", cpu_m=4000, priority=1, created=1)


def test_reclaim_takes_the_guaranteed_min_back_from_a_borrower(store: Store, clock: Clock) -> None:
    harness = Harness(store, clock, reclaim_min_runtime=0)
    reclaim_setup(harness)
    harness.settle()
    assert harness.holding() == {"owner"}
    borrower = harness.get("borrower")
    assert condition(harness, "borrower", "Evicted")[:2] == (
        "True",
        phases.EVICTED_PREEMPTED,
    )
    assert borrower.status.phase == ENQUEUED


def test_reclaim_spares_a_unit_younger_than_the_minimum_runtime(store: Store, clock: Clock) -> None:
    harness = Harness(store, clock, reclaim_min_runtime=60)
    reclaim_setup(harness)
    harness.settle()
    assert harness.holding() == {"borrower"}  # admitted 30 s ago: protected
    assert not harness.events("Evicted")
    harness.advance(30)  # the protection ends
    assert harness.holding() == {"owner"}


# --- 7. why a unit waits -----------------------------------------------------------------------


def test_the_waiting_reason_names_quota_resource_and_amount(harness: Harness) -> None:
    harness.quota("team-a", max=cores(8))
    harness.unit("held", cpu_m=4000, phase=DEQUEUED, admissions=holding("main"))
    harness.unit("job", cpu_m=6000, created=1)
    harness.settle()
    message = harness.get("job").status.message
    assert message == (
        "limited quotaName:team-a, limited resKey:cpu; "
        "waiting for quota team-a: cpu needs 6, 4 free of max 8"
    )
    assert condition(harness, "job", "QuotaReserved") == ("False", "Pending", message)


# --- TenantCap -----------------------------------------------------------------------------------


def tenant_harness(store: Store, clock: Clock, args: dict[str, object]) -> Harness:
    config = QueueingConfig(
        plugins=(
            PluginRef(name="Priority"),
            PluginRef(name="ElasticQuota"),
            PluginRef(name="TenantCap"),
        ),
        plugin_configs={"TenantCap": args},
    )
    harness = Harness(store, clock, plugins=build_plugins(config))
    harness.quota("team-a", max=cores(100))
    return harness


@pytest.mark.parametrize(
    ("args", "labels", "admitted", "reason"),
    [
        pytest.param(
            {"maxRunningUnits": 2},
            {},
            {"job-0", "job-1"},
            "tenant team already runs 2 units (maxRunningUnits)",
            id="units-per-namespace",
        ),
        pytest.param(
            {"maxResources": {"cpu": "3"}},
            {},
            {"job-0", "job-1", "job-2"},
            "tenant team: cpu needs 1, 0 left of maxResources 3",
            id="resources-per-namespace",
        ),
        pytest.param(
            {"tenantLabel": "user", "maxRunningUnits": 1, "tenants": {"alice": {}}},
            {"user": "alice"},
            {"job-0", "job-1", "job-2", "job-3"},
            "",
            id="override-without-caps",
        ),
        pytest.param(
            {"tenantLabel": "user", "maxRunningUnits": 1},
            {"user": "bob"},
            {"job-0"},
            "tenant bob already runs 1 units (maxRunningUnits)",
            id="units-per-user-label",
        ),
    ],
)
def test_tenant_cap(
    store: Store,
    clock: Clock,
    args: dict[str, object],
    labels: dict[str, str],
    admitted: set[str],
    reason: str,
) -> None:
    harness = tenant_harness(store, clock, args)
    for n in range(4):
        harness.unit(f"job-{n}", created=n, labels=labels)
    harness.settle()
    assert harness.holding() == admitted
    if reason:
        assert harness.get("job-3").status.message == reason
        # A unit of the tenant finishing lets the next one in at once.
        harness.finish("job-0")
        harness.settle()
        assert len(harness.holding() - {"job-0"}) == len(admitted)


# --- quiet when nothing changes, and the simulator ------------------------------------------------


def test_a_waiting_unit_is_written_once_per_reason(harness: Harness) -> None:
    harness.quota("team-a", max=cores(2))
    harness.unit("job", cpu_m=3000)
    harness.settle()
    written = harness.get("job").metadata.resource_version
    for _ in range(4):
        harness.advance(15)
    assert harness.get("job").metadata.resource_version == written
    assert len(harness.events("FailedScheduling", "job")) == 1
    # A different reason is written, and announced, again.
    harness.quota("dept", max=cores(1), is_parent=True)
    harness.quota("team-a", max=cores(10), parent="dept")
    harness.settle()
    assert harness.get("job").status.message.startswith("limited quotaName:dept,")
    assert len(harness.events("FailedScheduling", "job")) == 2


def test_the_simulator_runs_the_queue_to_rest() -> None:
    objects = [
        quota_object("team-a", max=cores(4)),
        unit_object("a", cpu_m=3000),
        unit_object("b", cpu_m=3000),
    ]
    runs = [
        simulate(objects, loops={"queueing": QueueingLoop}, max_time=timedelta(minutes=5))
        for _ in range(2)
    ]
    units = {o.metadata.name: o for o in runs[0].objects if isinstance(o, QueueUnit)}
    assert units["a"].status.phase == DEQUEUED
    assert units["b"].status.phase == ENQUEUED
    assert runs[0].to_list() == runs[1].to_list()


def test_an_admission_the_store_refuses_is_given_back_and_tried_again(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.quota("team-a", max=cores(4))
    # One unit admitted first: the refused pass then writes no quota status (the status is
    # not due), so only the refusal's own handling gives the charge back.
    harness.unit("other", cpu_m=1000)
    harness.settle()
    harness.unit("first", cpu_m=3000)
    store = harness.store
    real = store.write
    refused: list[str] = []

    def refuse_units_once(writes: Sequence[Write]) -> Pending:
        """The store's batch write, refusing the first admission it is sent (its results
        arrive when the store's would: at once, or late over the delayed backend)."""
        if refused:
            return real(writes)
        kept = [w for w in writes if not (isinstance(w.obj, QueueUnit) and w.obj.status.admissions)]
        if len(kept) == len(writes):
            return real(writes)
        inner = real(kept)
        passed = {id(w) for w in kept}
        refused.extend(
            w.obj.metadata.name for w in writes if id(w) not in passed and w.obj is not None
        )
        pending = Pending()

        def answer(done: Pending) -> None:
            results = iter(done.results())
            pending.resolve(
                [
                    next(results) if id(w) in passed else Conflict("queueunits: changed meanwhile")
                    for w in writes
                ]
            )

        inner.add_done_callback(answer)
        return pending

    monkeypatch.setattr(store, "write", refuse_units_once)
    harness.run()
    assert refused == ["first"]
    # Charged once while the answer is not in (over the delayed backend, a pass later).
    assert harness.loop.engine.ledger.used("team-a")["cpu"] == 4000
    # The pass's decision was lost: the unit is read again and admitted by a later pass,
    # charged once.
    assert harness.get("first").status.admissions == ()
    harness.settle()
    assert harness.holding() == {"other", "first"}
    assert harness.used("team-a") == cores(4)
    assert harness.loop.engine.ledger.used("team-a")["cpu"] == 4000
