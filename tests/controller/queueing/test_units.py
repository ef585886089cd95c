"""What the engine reads of a QueueUnit (:func:`unit_info`) and the §2.3 predicates."""

from __future__ import annotations

import msgspec
import pytest

from apis import constants as k
from apis.core import Container, PodSpec, PodTemplateSpec, ResourceRequirements
from apis.queueing import Admission, PodSet, QueueUnit
from apis.resources import ResourceList
from controller.queueing import phases
from controller.queueing.units import MAX_JOBS, unit_info, unit_quota_label
from tests.controller.queueing.conftest import cores, cpu, unit_object


@pytest.mark.parametrize(
    ("labels", "quota"),
    [
        pytest.param(
            {k.LABEL_QUOTA_NAME: "a", k.LABEL_QUOTA_NAME_ALIBABACLOUD: "b"}, "a", id="koord"
        ),
        pytest.param({k.LABEL_QUOTA_NAME_ALIBABACLOUD: "b"}, "b", id="alibabacloud"),
        pytest.param({k.LABEL_QUOTA_NAME_TREE: "c"}, "c", id="tree"),
        pytest.param({}, "", id="none"),
    ],
)
def test_the_quota_label_and_its_fallbacks(labels: dict[str, str], quota: str) -> None:
    assert unit_quota_label(unit_object("u", quota=None, labels=labels)) == quota


@pytest.mark.parametrize(
    ("phase", "admissions", "charge", "outstanding"),
    [
        pytest.param(phases.ENQUEUED, (), {}, {"main": 4}, id="waiting-holds-nothing"),
        pytest.param(
            phases.DEQUEUED,
            (Admission(name="main", replicas=3),),
            {"cpu": 3000, MAX_JOBS: 1},
            {"main": 1},
            id="partly-admitted",
        ),
        pytest.param(
            phases.RUNNING,
            (Admission(name="main", replicas=4, resources=cpu(9000)),),
            {"cpu": 9000, MAX_JOBS: 1},
            {},
            id="live-usage-above-the-request-is-charged",
        ),
        pytest.param(phases.SUCCEED, (Admission(name="main", replicas=4),), {}, {}, id="finished"),
    ],
)
def test_charge_and_outstanding_replicas(
    phase: str,
    admissions: tuple[Admission, ...],
    charge: dict[str, int],
    outstanding: dict[str, int],
) -> None:
    unit = unit_object("u", count=4, cpu_m=1000, phase=phase, admissions=admissions)
    info = unit_info(unit, "team-a")
    assert info.holds is bool(charge)
    assert (dict(info.charge) if info.holds else {}) == charge
    assert dict(info.outstanding) == outstanding


def test_a_legacy_unit_past_admission_charges_its_whole_request() -> None:
    unit = unit_object("u", legacy=cores(5), phase=phases.DEQUEUED)
    info = unit_info(unit, "team-a")
    assert info.holds
    assert dict(info.charge) == {"cpu": 5000, MAX_JOBS: 1}
    assert not info.outstanding
    waiting = unit_info(unit_object("w", legacy=cores(5)), "team-a")
    assert dict(waiting.outstanding) == {k.QUEUE_DEFAULT_PODSET: 1}
    assert dict(waiting.request_of(waiting.outstanding)) == {"cpu": 5000}


def test_limits_stand_in_for_missing_requests() -> None:
    template = PodTemplateSpec(
        spec=PodSpec(
            containers=(Container(name="c", resources=ResourceRequirements(limits=cores(2))),)
        )
    )
    unit = unit_object("u")
    unit = msgspec.structs.replace(
        unit,
        spec=msgspec.structs.replace(
            unit.spec, pod_set=(PodSet(name="main", count=3, template=template),)
        ),
    )
    info = unit_info(unit, "team-a")
    assert dict(info.request_of({"main": 3})) == {"cpu": 6000}


@pytest.mark.parametrize(
    ("count", "min_count", "expected"),
    [
        pytest.param(8, None, 8, id="unset-is-count"),
        pytest.param(8, 3, 3, id="set"),
        pytest.param(8, 12, 8, id="above-count-is-count"),
        pytest.param(8, 0, 8, id="zero-is-unset"),
    ],
)
def test_min_count(count: int, min_count: int | None, expected: int) -> None:
    info = unit_info(unit_object("u", count=count, min_count=min_count), "team-a")
    assert info.pod_sets[0].min_count == expected


@pytest.mark.parametrize(
    ("spec_active", "annotations", "active"),
    [
        pytest.param(None, {}, True, id="unset"),
        pytest.param(False, {}, False, id="spec-active-false"),
        pytest.param(None, {k.ANNOTATION_QUEUEUNIT_SUSPEND: "true"}, False, id="queue-suspend"),
    ],
)
def test_active(spec_active: bool | None, annotations: dict[str, str], active: bool) -> None:
    unit = unit_object("u", active=spec_active, annotations=annotations)
    assert unit_info(unit, "team-a").active is active


@pytest.mark.parametrize(
    ("labels", "preemptible"),
    [
        pytest.param({}, True, id="default"),
        pytest.param({k.LABEL_QUOTA_PREEMPTIBLE: "false"}, False, id="koord"),
        pytest.param({k.LABEL_PREEMPTIBLE_ALIBABACLOUD: "false"}, False, id="alibabacloud"),
    ],
)
def test_preemptible(labels: dict[str, str], preemptible: bool) -> None:
    assert unit_info(unit_object("u", labels=labels), "q").preemptible is preemptible


def unit_with(phase: str, *admissions: Admission, count: int = 2) -> QueueUnit:
    return unit_object("u", count=count, phase=phase, admissions=admissions)


@pytest.mark.parametrize(
    ("unit", "pending", "assigned", "satisfied", "running", "assumed"),
    [
        pytest.param(unit_with(phases.ENQUEUED), True, False, False, False, False, id="enqueued"),
        pytest.param(unit_with(""), True, False, False, False, False, id="empty-phase"),
        pytest.param(
            unit_with(phases.SCHED_FAILED), True, False, False, False, False, id="sched-failed"
        ),
        pytest.param(
            unit_with(phases.RESERVED), False, True, False, False, False, id="reserved-legacy"
        ),
        pytest.param(
            unit_with(phases.DEQUEUED, Admission(name="main", replicas=2)),
            False,
            True,
            True,
            False,
            True,
            id="admitted-unbound",
        ),
        pytest.param(
            unit_with(phases.RUNNING, Admission(name="main", replicas=2, running=2)),
            False,
            True,
            True,
            True,
            False,
            id="all-running",
        ),
        pytest.param(
            unit_with(phases.DEQUEUED, Admission(name="main", replicas=1, running=1)),
            False,
            True,
            False,
            True,
            False,
            id="partly-admitted-running",
        ),
    ],
)
def test_predicates(
    unit: QueueUnit,
    pending: bool,
    assigned: bool,
    satisfied: bool,
    running: bool,
    assumed: bool,
) -> None:
    assert phases.is_pending(unit) is pending
    assert phases.is_assigned(unit) is assigned
    assert phases.is_satisfied(unit) is satisfied
    assert phases.all_running(unit) is running
    assert phases.reserved_not_run(unit) is assumed


def test_demand_counts_every_replica_and_a_job() -> None:
    info = unit_info(
        unit_object("u", pod_sets=(("w", 4, cpu(500)), ("ps", 1, ResourceList({"cpu": 2000})))),
        "team-a",
    )
    assert dict(info.demand) == {"cpu": 4000, MAX_JOBS: 1}
