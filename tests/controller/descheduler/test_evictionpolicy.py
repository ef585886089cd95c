"""``evictionPolicy`` and ``deleteOptions``: what the ``migration`` loop does to a pod
(controller-spec §6.2; koordpy's meaning in :mod:`controller.descheduler.evictionpolicy`)."""

from __future__ import annotations

import json

import pytest

from apis import constants as k
from apis.scheduling import DeleteOptions, Preconditions
from controller.descheduler.evictionpolicy import (
    ANNOTATION_SOFT_EVICTION,
    DELETE,
    EVICTION,
    SOFT_EVICTION,
    EvictionPlan,
    event_message,
    plan_eviction,
    soft_evicted,
)
from tests.controller.descheduler.conftest import T0, make_pod

GRACE_30 = DeleteOptions(grace_period_seconds=30)


@pytest.mark.parametrize(
    ("default_policy", "label", "job_options", "default_options", "plan"),
    [
        pytest.param(EVICTION, None, None, None, EvictionPlan(EVICTION), id="default"),
        pytest.param(DELETE, None, None, None, EvictionPlan(DELETE), id="args-policy"),
        pytest.param(
            EVICTION, SOFT_EVICTION, None, None, EvictionPlan(SOFT_EVICTION), id="label-wins"
        ),
        pytest.param(
            EVICTION,
            None,
            None,
            GRACE_30,
            EvictionPlan(EVICTION, GRACE_30),
            id="default-delete-options",
        ),
        pytest.param(
            EVICTION,
            None,
            DeleteOptions(grace_period_seconds=0),
            GRACE_30,
            EvictionPlan(EVICTION, DeleteOptions(grace_period_seconds=0)),
            id="job-delete-options-win",
        ),
    ],
)
def test_the_plan_for_a_pod(
    default_policy: str,
    label: str | None,
    job_options: DeleteOptions | None,
    default_options: DeleteOptions | None,
    plan: EvictionPlan,
) -> None:
    pod = make_pod("web-0", labels={k.LABEL_EVICT_POLICY: label} if label is not None else None)
    found = plan_eviction(
        pod,
        default_policy=default_policy,
        job_options=job_options,
        default_options=default_options,
    )
    assert found == plan


@pytest.mark.parametrize(
    ("label", "job_options", "default_options", "field"),
    [
        pytest.param("Evict", None, None, "pod label koordinator.sh/evict-policy", id="label"),
        pytest.param(
            None,
            DeleteOptions(grace_period_seconds=-1),
            None,
            "spec.deleteOptions.gracePeriodSeconds",
            id="job-grace",
        ),
        pytest.param(
            None,
            None,
            DeleteOptions(grace_period_seconds=-5),
            "defaultDeleteOptions.gracePeriodSeconds",
            id="default-grace",
        ),
        pytest.param(
            None,
            DeleteOptions(propagation_policy="Sideways"),
            None,
            "spec.deleteOptions.propagationPolicy",
            id="propagation",
        ),
        pytest.param(
            None,
            DeleteOptions(dry_run=("Some",)),
            None,
            "spec.deleteOptions.dryRun",
            id="dry-run",
        ),
        pytest.param(
            None,
            DeleteOptions(preconditions=Preconditions(uid="someone-else")),
            None,
            "spec.deleteOptions.preconditions.uid",
            id="precondition-uid",
        ),
    ],
)
def test_bad_values_name_the_field(
    label: str | None,
    job_options: DeleteOptions | None,
    default_options: DeleteOptions | None,
    field: str,
) -> None:
    pod = make_pod("web-0", labels={k.LABEL_EVICT_POLICY: label} if label is not None else None)
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        plan_eviction(
            pod,
            default_policy=EVICTION,
            job_options=job_options,
            default_options=default_options,
        )


def test_a_bad_default_policy_names_the_field() -> None:
    with pytest.raises(ValueError, match="evictionPolicy: 'Drop'"):
        plan_eviction(make_pod("a"), default_policy="Drop", job_options=None, default_options=None)


def test_a_precondition_on_the_pods_own_uid_passes() -> None:
    pod = make_pod("web-0")
    options = DeleteOptions(preconditions=Preconditions(uid=pod.metadata.uid, resource_version="7"))
    plan = plan_eviction(pod, default_policy=EVICTION, job_options=options, default_options=None)
    assert plan.resource_version == "7"


BY = "PodMigrationJob m (LowNodeLoad)"


@pytest.mark.parametrize(
    ("plan", "reason", "message"),
    [
        pytest.param(EvictionPlan(EVICTION), "hot", f"evicted by {BY}: hot", id="eviction"),
        pytest.param(EvictionPlan(DELETE), "hot", f"deleted by {BY}: hot", id="delete"),
        pytest.param(
            EvictionPlan(SOFT_EVICTION),
            "hot",
            f"marked for soft eviction by {BY}: hot",
            id="soft-eviction",
        ),
        pytest.param(EvictionPlan(EVICTION), "", f"evicted by {BY}", id="no-reason"),
        pytest.param(
            EvictionPlan(DELETE, GRACE_30),
            "hot",
            f"deleted by {BY}: hot; grace period 30s",
            id="grace-period",
        ),
        pytest.param(
            EvictionPlan(EVICTION, DeleteOptions(dry_run=("All",), grace_period_seconds=5)),
            "hot",
            f"eviction proposed by {BY} (dry run): hot",
            id="dry-run",
        ),
    ],
)
def test_the_event_says_what_was_done(plan: EvictionPlan, reason: str, message: str) -> None:
    assert event_message(plan, BY, reason) == message


def test_a_soft_eviction_marks_the_pod() -> None:
    pod = make_pod("web-0", annotations={"keep": "me"})
    marked = soft_evicted(pod, EvictionPlan(SOFT_EVICTION, GRACE_30), BY, "hot", T0)
    assert marked.metadata.annotations["keep"] == "me"
    assert json.loads(marked.metadata.annotations[ANNOTATION_SOFT_EVICTION]) == {
        "timestamp": "2026-03-01T08:00:00Z",
        "initiator": BY,
        "reason": "hot",
        "deleteOptions": {"gracePeriodSeconds": 30},
    }
    assert marked.spec == pod.spec
    bare = soft_evicted(pod, EvictionPlan(SOFT_EVICTION), BY, "", T0)
    assert "deleteOptions" not in json.loads(bare.metadata.annotations[ANNOTATION_SOFT_EVICTION])
