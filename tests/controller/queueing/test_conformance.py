"""queue-spec §17, the queue's side of the conformance checklist: one test per line.

Items 1-3 and 12 (job -> QueueUnit, suspension, running timeout) belong to the job controller
and are tested with it. Where §15 says we do better the item is adapted: no 5 s / 30 s / 60 s /
3 min timers (a release re-tries the waiting units at once, in the same instant), and several
units of one queue may be admitted in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from apis import codec
from apis import constants as k
from apis.meta import LabelSelector, ObjectMeta
from apis.queueing import (
    AdmissionCheckState,
    Queue,
    QueueAdmissionCheck,
    QueueSpec,
    ReclaimState,
)
from controller.queueing import phases
from controller.queueing.engine import NO_QUEUE_MESSAGE, WAIT_FOR_PODS_MESSAGE
from controller.queueing.loop import DEQUEUED_MESSAGE, RESERVED_MESSAGE
from controller.store.sqlite import Store
from tests.controller.queueing.conftest import (
    QUOTA_KIND,
    QUOTA_NAMESPACE,
    T0,
    Clock,
    Harness,
    cores,
    cpu,
    holding,
)
from tests.crdschema import schema_errors, validator

DEQUEUED = phases.DEQUEUED
ENQUEUED = phases.ENQUEUED


def conditions(harness: Harness, name: str) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in harness.get(name).status.conditions}


def hand_made_queue(
    harness: Harness,
    name: str,
    *,
    policy: str = "Priority",
    checks: tuple[QueueAdmissionCheck, ...] = (),
    annotations: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A Queue made by hand that accepts ``team-a``; the annotation that sends a unit there."""
    harness.store.apply(
        Queue(
            metadata=ObjectMeta(
                name=name,
                namespace=k.QUEUE_NAMESPACE,
                annotations={k.ANNOTATION_QUEUE_AVAILABLE_QUOTA: "team-a", **(annotations or {})},
            ),
            spec=QueueSpec(queue_policy=policy, priority=5, admission_checks=checks),
        )
    )
    return {k.ANNOTATION_QUEUE_NAME: name}


# --- 4. a Queue per ElasticQuota ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "policy"),
    [
        pytest.param({}, "Priority", id="no-label"),
        pytest.param({k.LABEL_QUEUE_POLICY: "Block"}, "Block", id="block"),
        pytest.param({k.LABEL_QUEUE_POLICY: "Intelligent"}, "Intelligent", id="intelligent"),
        pytest.param({k.LABEL_QUEUE_POLICY_LEGACY: "Block"}, "Block", id="kube-queue-prefix"),
        pytest.param({k.LABEL_QUEUE_POLICY: "FIFO"}, "Priority", id="invalid-is-priority"),
    ],
)
def test_04_a_quota_gets_a_queue_of_its_name(
    harness: Harness, labels: dict[str, str], policy: str
) -> None:
    harness.quota("dept", max=cores(100), is_parent=True)
    harness.quota("team-a", max=cores(8), parent="dept", labels=labels)
    harness.settle()
    queue = harness.queue("team-a")
    assert queue.spec.queue_policy == policy
    assert queue.spec.priority == 1000
    assert queue.metadata.labels[k.LABEL_QUEUE_CREATED_BY_KUBEQUEUE] == "true"
    assert queue.metadata.labels[k.LABEL_QUOTA_PARENT] == "dept"


def test_04_deleting_the_quota_deletes_its_queue_and_a_new_quota_takes_its_units(
    harness: Harness,
) -> None:
    harness.quota("team-a", max=cores(1))
    harness.unit("job", cpu_m=2000)
    harness.settle()
    harness.store.delete(QUOTA_KIND, "team-a", QUOTA_NAMESPACE)
    harness.settle()
    assert (k.QUEUE_NAMESPACE, "team-a") not in harness.queues()
    assert harness.phase("job") == ENQUEUED
    # Koord-Queue re-tries parked units every 10 s; we re-try when a quota comes back.
    harness.quota("team-a", max=cores(4))
    harness.settle()
    assert harness.phase("job") == DEQUEUED
    assert harness.get("job").spec.queue == "team-a"


def test_04_a_parked_unit_says_that_no_queue_takes_it(harness: Harness) -> None:
    harness.quota("team-a", max=cores(1))
    harness.unit("job", cpu_m=2000)
    harness.settle()
    harness.store.delete(QUOTA_KIND, "team-a", QUOTA_NAMESPACE)
    harness.settle()
    harness.advance(15)  # the waiting reasons are refreshed with the queue status
    assert harness.get("job").status.message == NO_QUEUE_MESSAGE


def test_04_the_default_quota_gets_a_queue_once_a_unit_needs_it(harness: Harness) -> None:
    harness.quota("team-a", max=cores(1))
    harness.settle()
    assert (k.QUEUE_NAMESPACE, k.QUOTA_DEFAULT) not in harness.queues()
    harness.unit("no-quota", quota=None, namespace="elsewhere")
    harness.settle()
    assert harness.queue(k.QUOTA_DEFAULT).spec.priority == 1000


# --- 5. the quota walk -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("team", "expected"),
    [
        pytest.param(
            {"max": cores(40), "parent": "dept"},
            "limited quotaName:dept, limited resKey:cpu",
            id="blocked-by-an-ancestor-max",
        ),
        pytest.param(
            {"max": cores(40), "parent": "gone"},
            "quota not exist",
            id="missing-ancestor",
        ),
        # A quota below a parent names the parent's max resources (admission), so the quota
        # without a max sits below the root.
        pytest.param({}, "quota has no max", id="empty-max-rejects"),
    ],
)
def test_05_quota_walk(harness: Harness, team: dict[str, object], expected: str) -> None:
    harness.quota("dept", max=cores(4), is_parent=True)
    # A parent that is gone: created first (admission wants it), deleted after its child.
    harness.quota("gone", max=cores(40), is_parent=True)
    harness.quota("team-a", **team)
    harness.store.delete(QUOTA_KIND, "gone", QUOTA_NAMESPACE)
    harness.unit("job", cpu_m=6000)
    harness.settle()
    assert harness.phase("job") == ENQUEUED
    assert expected in harness.get("job").status.message


# --- 6. what a release writes ------------------------------------------------------------------


def test_06_release_writes_admissions_phase_times_queue_and_an_event(
    harness: Harness, clock: Clock
) -> None:
    harness.quota("team-a", max=cores(8))
    harness.unit(
        "job",
        pod_sets=(("worker", 3, cores(1)), ("ps", 1, cores(2))),
    )
    clock.advance(7)
    harness.settle()
    unit = harness.get("job")
    assert unit.status.phase == DEQUEUED
    assert unit.status.message == DEQUEUED_MESSAGE
    assert harness.admitted("job") == {"worker": 3, "ps": 1}
    assert unit.status.last_allocate_time == clock.now
    assert unit.status.last_update_time == clock.now
    assert unit.spec.queue == "team-a"
    [event] = harness.events("Scheduled", "job")
    assert event.type == "Normal"
    assert harness.used("team-a") == cores(5)
    # Always present on the wire, even when empty (Koord-Queue serialises it).
    assert "admissions" in json.loads(codec.encode_json(harness.get("job")))["status"]


# --- 7. admission checks -----------------------------------------------------------------------

GPU_ONLY = QueueAdmissionCheck(
    name="prov", label_selector=LabelSelector(match_labels={"tier": "gpu"})
)


def checked_units(harness: Harness) -> None:
    harness.quota("team-a", max=cores(8))
    to_queue = hand_made_queue(harness, "checked", checks=(GPU_ONLY,))
    harness.unit("gpu-job", cpu_m=3000, labels={"tier": "gpu"}, annotations=to_queue)
    harness.unit("cpu-job", cpu_m=1000, annotations=to_queue, created=1)
    harness.settle()


def decide(harness: Harness, name: str, state: str) -> None:
    """The check's own controller writes its decision."""
    harness.write(
        harness.get(name),
        admission_checks=(AdmissionCheckState(name="prov", state=state, last_transition_time=T0),),
    )


def test_07_a_matching_check_reserves_with_pending_states(harness: Harness) -> None:
    checked_units(harness)
    gpu = harness.get("gpu-job")
    assert gpu.status.phase == phases.RESERVED
    assert gpu.status.message == RESERVED_MESSAGE
    assert [(s.name, s.state) for s in gpu.status.admission_checks] == [("prov", "Pending")]
    assert conditions(harness, "gpu-job")["Admitted"] == ("False", "WaitingForAdmissionChecks")
    # The selector does not match the other unit: it is released straight away.
    assert harness.phase("cpu-job") == DEQUEUED
    assert harness.used("team-a") == cores(4)  # a Reserved unit holds its quota


@pytest.mark.parametrize(
    ("state", "phase", "holds", "active"),
    [
        pytest.param("Ready", DEQUEUED, True, None, id="ready-dequeues"),
        pytest.param("Retry", phases.TIMEOUT_BACKOFF, False, None, id="retry-backs-off"),
        # Kueue parity (§10): Rejected deactivates the unit and gives its quota back.
        pytest.param("Rejected", ENQUEUED, False, False, id="rejected-deactivates"),
        pytest.param("Pending", phases.RESERVED, True, None, id="pending-waits"),
    ],
)
def test_07_check_states_decide_the_phase(
    harness: Harness, state: str, phase: str, holds: bool, active: bool | None
) -> None:
    checked_units(harness)
    decide(harness, "gpu-job", state)
    harness.settle()
    unit = harness.get("gpu-job")
    assert unit.status.phase == phase
    assert bool(unit.status.admissions) is holds
    assert harness.used("team-a") == (cores(4) if holds else cores(1))
    assert unit.spec.active is active


# --- 8. the failure path -----------------------------------------------------------------------


def test_08_a_unit_that_does_not_fit_stays_enqueued_with_its_reason(
    harness: Harness, clock: Clock
) -> None:
    harness.quota("team-a", max=cores(2))
    harness.unit("job", cpu_m=3000)
    clock.advance(3)
    harness.settle()
    unit = harness.get("job")
    assert unit.status.phase == ENQUEUED
    assert unit.status.message.startswith("limited quotaName:team-a, limited resKey:cpu")
    assert unit.status.last_update_time == clock.now
    assert not unit.status.admissions
    [event] = harness.events("FailedScheduling", "job")
    assert event.type == "Warning"
    assert event.message == unit.status.message


# --- 9. policies (the A-C examples are in test_examples.py) ------------------------------------


@pytest.mark.parametrize("policy", ["Priority", "Block", "Intelligent"])
def test_09_several_units_of_a_queue_are_admitted_in_one_pass(
    harness: Harness, policy: str
) -> None:
    harness.quota("team-a", max=cores(5), labels={k.LABEL_QUEUE_POLICY: policy})
    for n in range(7):
        harness.unit(f"job-{n}", cpu_m=1000, priority=10, created=n)
    harness.run()  # one pass, not one unit per pass or per timer tick
    assert harness.holding() == {f"job-{n}" for n in range(5)}


@pytest.mark.parametrize("policy", ["Priority", "Block", "Intelligent"])
def test_09_a_release_retries_at_once_without_a_timer(harness: Harness, policy: str) -> None:
    harness.quota("team-a", max=cores(4), labels={k.LABEL_QUEUE_POLICY: policy})
    harness.unit("running", cpu_m=4000, phase=DEQUEUED, admissions=holding("main"))
    harness.unit("waiting", cpu_m=3000, created=5)
    harness.settle()
    assert harness.phase("waiting") == ENQUEUED
    harness.finish("running")
    harness.settle()  # same instant
    assert harness.phase("waiting") == DEQUEUED


# --- 10. wait-for-pods-running -----------------------------------------------------------------


def test_10_wait_for_pods_running_serialises_admission_until_pods_are_bound(
    harness: Harness,
) -> None:
    harness.quota("team-a", max=cores(8))
    to_queue = hand_made_queue(
        harness, "serial", annotations={k.ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING: "true"}
    )
    harness.unit("first", count=2, cpu_m=1000, annotations=to_queue)
    harness.unit("second", cpu_m=1000, annotations=to_queue, created=1)
    harness.settle()
    assert harness.phase("first") == DEQUEUED
    assert harness.phase("second") == ENQUEUED
    harness.advance(15)
    assert harness.get("second").status.message == WAIT_FOR_PODS_MESSAGE
    # Bound (nodeName set) is enough: the pods need not be Running.
    harness.bind("first")
    harness.settle()
    assert harness.phase("second") == DEQUEUED


# --- 11. queue-level preemption of unbound replicas ----------------------------------------------


def test_11_queue_preemption_marks_unbound_replicas_of_lower_units(harness: Harness) -> None:
    harness.quota("team-a", max=cores(4))
    to_queue = hand_made_queue(
        harness,
        "preempting",
        annotations={
            k.ANNOTATION_QUEUE_WAIT_FOR_PODS_RUNNING: "true",
            k.ANNOTATION_QUEUE_ENABLE_QUEUEUNIT_PREEMPTION: "true",
        },
    )
    harness.unit("low", count=4, cpu_m=1000, priority=1, annotations=to_queue)
    harness.settle()
    harness.advance(120)  # past the protection window
    harness.unit("high", count=2, cpu_m=1000, priority=10, annotations=to_queue, created=120)
    harness.settle()
    [admission] = harness.get("low").status.admissions
    assert isinstance(admission.reclaim_state, ReclaimState)
    assert admission.reclaim_state.replicas == 2


# --- 13/14. releasing quota when a unit finishes or goes ------------------------------------


@pytest.mark.parametrize("end", [phases.SUCCEED, phases.FAILED])
def test_13_a_finished_unit_gives_its_quota_back(harness: Harness, end: str) -> None:
    harness.quota("team-a", max=cores(4))
    harness.unit("done", cpu_m=3000)
    harness.unit("next", cpu_m=3000, created=1)
    harness.settle()
    assert harness.holding() == {"done"}
    harness.finish("done", end)
    harness.settle()
    assert harness.holding() == {"next"}
    assert harness.used("team-a") == cores(3)
    assert conditions(harness, "done")["Finished"] == ("True", end.replace("Succeed", "Succeeded"))


def test_14_deleting_an_assigned_unit_releases_its_quota(harness: Harness) -> None:
    harness.quota("team-a", max=cores(4), labels={k.LABEL_QUEUE_POLICY: "Block"})
    harness.unit("old", cpu_m=3000)
    harness.unit("new", cpu_m=3000, created=1)
    harness.settle()
    harness.delete("old")
    harness.settle()
    assert harness.holding() == {"new"}
    assert harness.used("team-a") == cores(3)


# --- 15. spec.active=false -----------------------------------------------------------------------


def test_15_an_inactive_unit_is_skipped(harness: Harness) -> None:
    harness.quota("team-a", max=cores(4), labels={k.LABEL_QUEUE_POLICY: "Block"})
    harness.unit("paused", cpu_m=3000, priority=100, active=False)
    harness.unit("other", cpu_m=3000, created=1)
    harness.settle()
    assert harness.holding() == {"other"}
    assert harness.phase("paused") == ENQUEUED


def test_15_deactivating_an_admitted_unit_evicts_it_and_releases_its_quota(
    harness: Harness,
) -> None:
    harness.quota("team-a", max=cores(4))
    harness.unit("job", cpu_m=3000)
    harness.unit("next", cpu_m=3000, created=1)
    harness.settle()
    harness.write_spec("job", active=False)
    harness.settle()
    unit = harness.get("job")
    assert unit.status.phase == ENQUEUED
    assert not unit.status.admissions
    assert harness.holding() == {"next"}
    [event] = harness.events("Evicted", "job")
    assert "deactivated" in event.message


def test_15_the_evicted_condition_stays_while_the_unit_waits(harness: Harness) -> None:
    harness.quota("team-a", max=cores(4))
    harness.unit("job", cpu_m=3000)
    harness.settle()
    harness.write_spec("job", active=False)
    harness.settle()
    harness.advance(15)
    assert conditions(harness, "job")["Evicted"] == ("True", phases.EVICTED_DEACTIVATED)


# --- 16. the conditions mirror -------------------------------------------------------------------

MIRROR = [
    (ENQUEUED, "", {"QuotaReserved": ("False", "Pending"), "Admitted": ("False", "Pending")}),
    (
        ENQUEUED,
        phases.EVICTED_DEACTIVATED,
        {
            "QuotaReserved": ("False", "Pending"),
            "Admitted": ("False", "Pending"),
            "Evicted": ("True", "Deactivated"),
        },
    ),
    (
        phases.RESERVED,
        "",
        {
            "QuotaReserved": ("True", "QuotaReserved"),
            "Admitted": ("False", "WaitingForAdmissionChecks"),
        },
    ),
    *(
        (p, "", {"QuotaReserved": ("True", "QuotaReserved"), "Admitted": ("True", "Admitted")})
        for p in (DEQUEUED, phases.SCHED_READY, phases.SCHED_SUCCEED)
    ),
    (
        phases.RUNNING,
        "",
        {
            "QuotaReserved": ("True", "QuotaReserved"),
            "Admitted": ("True", "Admitted"),
            "PodsReady": ("True", "PodsRunning"),
        },
    ),
    (phases.SUCCEED, "", {"Finished": ("True", "Succeeded")}),
    (phases.FAILED, "", {"Finished": ("True", "Failed")}),
    (
        phases.TIMEOUT_BACKOFF,
        "",
        {
            "QuotaReserved": ("False", "BackoffTimeout"),
            "Admitted": ("False", "BackoffTimeout"),
            "Evicted": ("True", "BackoffTimeout"),
        },
    ),
    (phases.SCHED_FAILED, "", {"Admitted": ("False", "SchedulingFailed")}),
]


@pytest.mark.parametrize(("phase", "evicted", "expected"), MIRROR)
def test_16_conditions_mirror_every_phase(
    phase: str, evicted: str, expected: dict[str, tuple[str, str]]
) -> None:
    mirrored = phases.mirrored_conditions((), phase, T0, evicted_reason=evicted)
    assert {c.type: (c.status, c.reason) for c in mirrored} == expected
    assert all(c.last_transition_time == T0 for c in mirrored)


def test_16_transition_time_moves_only_when_a_status_flips() -> None:
    later = T0 + timedelta(minutes=1)
    enqueued = phases.mirrored_conditions((), ENQUEUED, T0)
    reserved = phases.mirrored_conditions(enqueued, phases.RESERVED, later)
    times = {c.type: c.last_transition_time for c in reserved}
    assert times == {"QuotaReserved": later, "Admitted": T0}  # Admitted stayed False
    running = phases.mirrored_conditions(
        phases.mirrored_conditions((), phases.RUNNING, T0), ENQUEUED, later
    )
    assert "PodsReady" not in {c.type for c in running}


def test_16_the_loop_writes_the_mirror(harness: Harness) -> None:
    harness.quota("team-a", max=cores(2))
    harness.unit("fits", cpu_m=1000)
    harness.unit("too-big", cpu_m=3000)
    harness.settle()
    assert conditions(harness, "fits") == {
        "QuotaReserved": ("True", "QuotaReserved"),
        "Admitted": ("True", "Admitted"),
    }
    assert conditions(harness, "too-big") == {
        "QuotaReserved": ("False", "Pending"),
        "Admitted": ("False", "Pending"),
    }


# --- 17. positions -------------------------------------------------------------------------------


def test_17_queue_item_details_list_positions_refreshed_within_15s(harness: Harness) -> None:
    harness.quota("team-a", max=cores(1))
    harness.unit("running", cpu_m=1000)
    harness.settle()
    harness.unit("b", cpu_m=1000, priority=5, created=2)
    harness.unit("a", cpu_m=1000, priority=5, created=1)
    harness.unit("c", cpu_m=1000, priority=1, created=0)
    harness.advance(15)

    def shown() -> list[tuple[str, int, int]]:
        details = harness.queue("team-a").status.queue_item_details["active"]
        return [(d.name, d.priority, d.position) for d in details]

    assert shown() == [("a", 5, 1), ("b", 5, 2), ("c", 1, 3)]
    harness.unit("urgent", cpu_m=1000, priority=9, created=9)
    wait = harness.settle()
    assert wait is not None
    assert wait <= 15
    harness.advance(wait)
    assert shown() == [("urgent", 9, 1), ("a", 5, 2), ("b", 5, 3), ("c", 1, 4)]


# --- 18. restart ---------------------------------------------------------------------------------


@pytest.mark.parametrize("admitted_by", ["a-previous-loop", "the-store-only"])
def test_18_a_restarted_loop_rebuilds_usage_before_admitting(
    store: Store, clock: Clock, admitted_by: str
) -> None:
    first = Harness(store, clock)
    first.quota("team-a", max=cores(8))
    if admitted_by == "a-previous-loop":
        first.unit("held", count=3, cpu_m=2000)
        first.settle()
        assert first.phase("held") == DEQUEUED
    else:
        first.unit("held", count=3, cpu_m=2000, phase=DEQUEUED, admissions=holding("main", 3))
    first.unit("waiting", cpu_m=4000, created=5)
    restarted = Harness(store, clock)
    restarted.run()  # its very first pass already knows the 6 cpu held
    assert restarted.phase("waiting") == ENQUEUED
    assert restarted.used("team-a") == cores(6)
    restarted.settle()
    assert restarted.holding() == {"held"}


# --- what we write validates against the CRD schema -------------------------------------------


def test_quota_status_written_back_validates(harness: Harness, shared_dir: Path) -> None:
    harness.node("n1", cores(16))
    harness.quota("team-a", max=cores(8), min=cores(2))
    harness.unit("job", count=2, cpu_m=1500)
    harness.unit("big", cpu_m=8000, created=1)
    harness.settle()
    harness.advance(15)
    quota = harness.quota_obj("team-a")
    assert quota.status.used == cpu(3000)
    assert harness.annotation("team-a", k.ANNOTATION_QUOTA_RUNTIME) == {"cpu": "8"}
    request = harness.annotation("team-a", k.ANNOTATION_QUOTA_REQUEST)
    assert {r: v for r, v in request.items() if v != "0"} == {"cpu": "8"}
    document = json.loads(codec.encode_json(quota))
    schema = validator(shared_dir, "scheduling.sigs.k8s.io/ElasticQuota")
    assert schema_errors(schema, document) == []
    assert msgspec.json.decode(codec.encode_json(harness.get("job")))["status"]["phase"] == (
        DEQUEUED
    )
