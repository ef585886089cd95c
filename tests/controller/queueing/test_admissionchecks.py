"""Which admission checks apply to a unit, their states, the verdict and the retry backoff."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.admission import AdmissionCheck, AdmissionCheckSpec, AdmissionCheckStatus
from apis.meta import Condition, LabelSelector, LabelSelectorRequirement, ObjectMeta
from apis.queueing import (
    AdmissionCheckState,
    Queue,
    QueueAdmissionCheck,
    QueueSpec,
    QueueUnit,
    RequeueState,
)
from controller.queueing import admissionchecks as ac
from controller.queueing.admissionchecks import Verdict

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=5)


def queue(*checks: QueueAdmissionCheck) -> Queue:
    return Queue(metadata=ObjectMeta(name="team-a"), spec=QueueSpec(admission_checks=checks))


def unit(**labels: str) -> QueueUnit:
    return QueueUnit(metadata=ObjectMeta(name="job", namespace="default", labels=dict(labels)))


def state(
    name: str, value: str, *, at: datetime = EARLIER, message: str = ""
) -> AdmissionCheckState:
    return AdmissionCheckState(name=name, state=value, last_transition_time=at, message=message)


def admission_check(active: str | None, *, reason: str = "", message: str = "") -> AdmissionCheck:
    conditions = (
        ()
        if active is None
        else (Condition(type="Active", status=active, reason=reason, message=message),)
    )
    return AdmissionCheck(
        metadata=ObjectMeta(name="prov"),
        spec=AdmissionCheckSpec(controller_name="koordpy.io/capacity"),
        status=AdmissionCheckStatus(conditions=conditions),
    )


GPU = LabelSelector(match_labels={"tier": "gpu"})
NOT_SPOT = LabelSelector(
    match_expressions=(LabelSelectorRequirement(key="spot", operator="DoesNotExist"),)
)


@pytest.mark.parametrize(
    ("checks", "labels", "expected"),
    [
        pytest.param((QueueAdmissionCheck(name="a"),), {}, ("a",), id="no-selector-matches-all"),
        pytest.param(
            (QueueAdmissionCheck(name="a", label_selector=LabelSelector()),),
            {"x": "y"},
            ("a",),
            id="empty-selector-matches-all",
        ),
        pytest.param(
            (
                QueueAdmissionCheck(name="gpu", label_selector=GPU),
                QueueAdmissionCheck(name="any"),
            ),
            {"tier": "cpu"},
            ("any",),
            id="selector-mismatch-skipped",
        ),
        pytest.param(
            (
                QueueAdmissionCheck(name="gpu", label_selector=GPU),
                QueueAdmissionCheck(name="on-demand", label_selector=NOT_SPOT),
            ),
            {"tier": "gpu"},
            ("gpu", "on-demand"),
            id="both-match-in-queue-order",
        ),
        pytest.param((), {"tier": "gpu"}, (), id="no-checks"),
    ],
)
def test_matching_checks_by_unit_labels(
    checks: tuple[QueueAdmissionCheck, ...], labels: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert ac.matching_checks(queue(*checks), unit(**labels)) == expected


def test_invalid_selector_ignores_the_check_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = LabelSelector(
        match_expressions=(LabelSelectorRequirement(key="tier", operator="Near", values=("x",)),)
    )
    checks = (
        QueueAdmissionCheck(name="broken-once", label_selector=bad),
        QueueAdmissionCheck(name="ok"),
    )
    with caplog.at_level(logging.WARNING, logger=ac.__name__):
        assert ac.matching_checks(queue(*checks), unit(tier="x")) == ("ok",)
        assert ac.matching_checks(queue(*checks), unit(tier="x")) == ("ok",)
    warnings = [r for r in caplog.records if "broken-once" in r.getMessage()]
    assert len(warnings) == 1


def test_reset_states_are_all_pending_now() -> None:
    assert ac.reset_states(["a", "b", "a"], NOW) == (
        AdmissionCheckState(name="a", state="Pending", last_transition_time=NOW),
        AdmissionCheckState(name="b", state="Pending", last_transition_time=NOW),
    )


def test_merge_keeps_listed_adds_new_and_forces_removed_ready() -> None:
    current = (
        state("kept", "Retry", message="later"),
        state("gone", "Pending"),
        state("done", "Ready"),
    )
    merged = ac.merge_states(current, ["kept", "new"], NOW)
    assert merged == (
        state("kept", "Retry", message="later"),
        AdmissionCheckState(name="new", state="Pending", last_transition_time=NOW),
        state("gone", "Ready", at=NOW, message=ac.REMOVED_MESSAGE),
        state("done", "Ready"),
    )
    assert ac.verdict(merged) is Verdict.RETRY
    assert ac.verdict(ac.merge_states(current, [], NOW)) is Verdict.READY


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        pytest.param(None, None, id="no-object-name-only-mode"),
        pytest.param(admission_check("True"), None, id="active"),
        pytest.param(
            admission_check("False", reason="ParametersMissing", message="no config"),
            "waiting for AdmissionCheck prov to become active (ParametersMissing: no config)",
            id="inactive-with-reason",
        ),
        pytest.param(
            admission_check(None),
            "waiting for AdmissionCheck prov to become active",
            id="no-active-condition",
        ),
    ],
)
def test_check_gate_holds_units_of_an_inactive_check(
    check: AdmissionCheck | None, expected: str | None
) -> None:
    checks = {} if check is None else {"prov": check}
    assert ac.check_gate("prov", checks) == expected


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        pytest.param((), Verdict.READY, id="no-checks"),
        pytest.param(("Ready", "Ready"), Verdict.READY, id="all-ready"),
        pytest.param(("Ready", "Pending"), Verdict.WAIT, id="one-pending"),
        pytest.param(("Pending", "Retry"), Verdict.RETRY, id="retry"),
        pytest.param(("Retry", "Rejected", "Ready"), Verdict.REJECTED, id="rejected-wins"),
    ],
)
def test_verdict(states: tuple[str, ...], expected: Verdict) -> None:
    assert ac.verdict(state(f"c{i}", s) for i, s in enumerate(states)) is expected


# --- backoff -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "seconds"),
    [(1, 10), (2, 20), (3, 40), (4, 80), (7, 640), (8, 900), (40, 900), (0, 10)],
)
def test_requeue_delay_doubles_from_10s_to_15min(count: int, seconds: int) -> None:
    assert ac.requeue_delay(count, rand=lambda: 0.5) == timedelta(seconds=seconds)


@given(count=st.integers(min_value=1, max_value=200), draw=st.floats(0, 1, exclude_max=True))
def test_requeue_delay_stays_within_ten_percent(count: int, draw: float) -> None:
    plain = min(10 * 2 ** min(count - 1, 20), 900)
    delay = ac.requeue_delay(count, rand=lambda: draw).total_seconds()
    assert plain * 0.9 - 1e-6 <= delay <= plain * 1.1 + 1e-6


def test_requeue_delay_rejects_bad_jitter() -> None:
    with pytest.raises(ValueError, match="jitter"):
        ac.requeue_delay(1, jitter=1.5, rand=lambda: 0.5)


@pytest.mark.parametrize(
    ("current", "after", "count", "at"),
    [
        pytest.param(None, None, 1, NOW + timedelta(seconds=10), id="first"),
        pytest.param(RequeueState(count=2), None, 3, NOW + timedelta(seconds=40), id="third"),
        pytest.param(
            RequeueState(count=1), 300, 2, NOW + timedelta(seconds=300), id="check-asks-longer"
        ),
        pytest.param(
            RequeueState(count=3), 5, 4, NOW + timedelta(seconds=80), id="check-asks-shorter"
        ),
    ],
)
def test_next_requeue_state(
    current: RequeueState | None, after: int | None, count: int, at: datetime
) -> None:
    assert ac.next_requeue_state(current, NOW, lambda: 0.5, after) == RequeueState(
        count=count, requeue_at=at
    )
