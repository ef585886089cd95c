"""Koordinator v1.8 user manual "PodMigrationJob" (``user-manuals/pod-migration-job.md``).

The page migrates the pod of a one-replica Deployment ``pod-demo``. The owner here is a batch
Job ``pod-demo`` with the page's pod template (koordpy brings back a deleted pod of a running
Job, under the same name, as a Deployment brings one under a new name); switch to the page's
Deployment once koordpy runs Deployments. The page's PodMigrationJobs are applied unchanged
once the pod runs (step 3), with ``podRef.name`` the Job's pod.

Where the page and v1.8 differ, v1.8 wins: the page prints phase ``Succeed`` and the Evicting
Event ``Try to evict Pod ...`` of older releases; v1.8 writes ``Succeeded`` and ``Pod ...
evicted from node ... by the reason ...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apis import codec
from apis.core import Event, Pod
from apis.errors import DecodeError
from apis.kinds import default_registry
from apis.scheduling import PodMigrationJob, Reservation
from controller import printing
from controller import simulate as sim
from controller.store import Store
from tests.crdschema import schema_errors, validator
from tests.manuals.replay import Outcome, node
from tests.manuals.stages import Stage, dump, pod_running, replay_in_stages, running_pod

#: The page's Deployment template, as the pod template of a Job (held by the queue first).
POD_DEMO = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: pod-demo
  namespace: default
spec:
  suspend: true
  parallelism: 1
  completions: 1
  template:
    metadata:
      labels:
        app: pod-demo
      name: stress
    spec:
      containers:
      - args:
        - -c
        - "1"
        command:
        - stress
        image: polinux/stress
        imagePullPolicy: Always
        name: stress
        resources:
          limits:
            cpu: "2"
            memory: 4Gi
          requests:
            cpu: 200m
            memory: 400Mi
      restartPolicy: Never
      schedulerName: koord-scheduler
"""
POD = "pod-demo-0"

QUICK_START = f"""\
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: PodMigrationJob
metadata:
  name: migrationjob-demo
spec:
  paused: false
  ttl: 5m
  mode: ReservationFirst
  podRef:
    namespace: default
    name: {POD}
status:
  phase: Pending
"""
PAUSED = QUICK_START.replace("paused: false", "paused: true")
EVICT_DIRECTLY = QUICK_START.replace("mode: ReservationFirst", "mode: EvictDirectly")
RESERVATION_REF = QUICK_START.replace(
    "status:\n",
    "  reservationOptions:\n    reservationRef:\n      name: reservation-0\nstatus:\n",
)
GRACEFUL = PAUSED.replace("status:\n", "  deleteOptions:\n    gracePeriodSeconds: 60\nstatus:\n")
#: Long enough for every migration here, short of the scavenger (TTL + 5 minutes).
UNTIL = timedelta(minutes=8)
NODES = (node("node-0", cpu="4", memory="16Gi"), node("node-1", cpu="4", memory="16Gi"))


def _then(*documents: str) -> Stage:
    """Apply ``documents`` once the Job's pod runs (the page's step 3)."""
    return Stage(when=pod_running(POD), documents=lambda store, now: documents)


def _recorded(event: Event) -> tuple[datetime, str, int]:
    """When an Event was first recorded: its time, then the order of its name
    (``<object>.<time>`` and ``-<n>`` for the n-th more at that time)."""
    stamp, _, more = event.metadata.name.rpartition(".")[2].partition("-")
    first = event.first_timestamp or datetime.min.replace(tzinfo=UTC)
    return (first, stamp, int(more or 0))


def job_events(outcome: Outcome, name: str = "migrationjob-demo") -> list[tuple[str, str, str]]:
    """The Events on the PodMigrationJob ``name``, oldest first."""
    return [
        (e.type, e.reason, e.message)
        for e in sorted(outcome.events(), key=_recorded)
        if e.involved_object.kind == "PodMigrationJob" and e.involved_object.name == name
    ]


def _job(outcome: Outcome) -> PodMigrationJob:
    job = outcome.get("PodMigrationJob", "migrationjob-demo")
    assert isinstance(job, PodMigrationJob)
    return job


def _pod(outcome: Outcome) -> Pod:
    pod = outcome.get("Pod", POD, "default")
    assert isinstance(pod, Pod)
    return pod


class _FirstNode:
    """Remembers the node the Job's pod ran on when the job was created."""

    def __init__(self) -> None:
        self.name = ""

    def stage(self, *documents: str) -> Stage:
        def apply(store: Store, now: datetime) -> Sequence[str]:
            pod = running_pod(store, POD)
            assert pod is not None
            self.name = pod.spec.node_name
            return documents

        return Stage(when=pod_running(POD), documents=apply)


def test_quick_start_migrates_the_pod_into_a_reservation_on_another_node(
    shared_dir: Path,
) -> None:
    """Quick Start: ReservationFirst, ``ttl: 5m``; the job Succeeds with status ``Complete``,
    the new pod runs in the reservation named after the job on the other node, ``koordpy get
    pmj`` shows the page's columns and ``koordpy describe pmj`` the page's Events (v1.8's
    Evicting message); what is written is what Koordinator's CRD accepts."""
    first = _FirstNode()
    outcome = replay_in_stages([*NODES, POD_DEMO], [first.stage(QUICK_START)], max_time=UNTIL)
    job = _job(outcome)
    [reservation] = outcome.all("Reservation")
    assert isinstance(reservation, Reservation)
    pod = _pod(outcome)
    other = {"node-0", "node-1"} - {first.name}

    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    assert {job.status.node_name, pod.spec.node_name} == other
    assert reservation.metadata.name == job.metadata.uid
    assert job.spec.reservation_options is not None
    assert job.spec.reservation_options.reservation_ref is not None
    assert job.spec.reservation_options.reservation_ref.name == reservation.metadata.name
    assert job.status.pod_ref is not None
    assert (job.status.pod_ref.name, job.status.pod_ref.uid) == (POD, pod.metadata.uid)
    assert job.spec.pod_ref.uid != pod.metadata.uid  # the migrated pod was another one
    assert pod.status.phase == "Running"

    name = reservation.metadata.name
    page = [
        ("Normal", "ReservationCreated", f'Successfully create Reservation "{name}"'),
        (
            "Normal",
            "ReservationScheduled",
            f'Assigned Reservation "{name}" to node "{job.status.node_name}"',
        ),
        (
            "Normal",
            "Evicting",
            f'Pod "default/{POD}" evicted from node "{first.name}" by the reason ""',
        ),
        ("Normal", "EvictComplete", f'Pod "default/{POD}" has been evicted'),
        ("Normal", "Complete", f'Bind Pod "default/{POD}" in Reservation "{name}"'),
    ]
    recorded = job_events(outcome)
    assert [e for e in recorded if e in page] == page  # in the page's order
    assert all(e[0] != "Warning" for e in recorded)
    about = [e for e in outcome.all("Event") if printing.involves(e, job)]
    described = printing.describe(job, about, now=outcome.result.ended)
    for type_, reason, message in page:
        row = rf"\n\s+{type_}\s+{reason}\s+\S+\s+koord-descheduler\s+{re.escape(message)}\n"
        assert re.search(row, described), (row, described)
    check = validator(shared_dir, "scheduling.koordinator.sh/PodMigrationJob")
    assert schema_errors(check, json.loads(codec.encode_json(job))) == []

    kind = default_registry().for_type(PodMigrationJob)
    now = outcome.result.ended
    headers = printing.headers(kind)
    assert headers == [
        "NAME",
        "PHASE",
        "STATUS",
        "AGE",
        "NODE",
        "RESERVATION",
        "PODNAMESPACE",
        "POD",
        "NEWPOD",
        "TTL",
    ]
    cells = dict(zip(headers, printing.row(kind, job, now=now), strict=True))
    assert {k: v for k, v in cells.items() if k != "AGE"} == {
        "NAME": "migrationjob-demo",
        "PHASE": "Succeeded",
        "STATUS": "Complete",
        "NODE": job.status.node_name,
        "RESERVATION": name,
        "PODNAMESPACE": "default",
        "POD": POD,
        "NEWPOD": POD,
        "TTL": "5m0s",
    }


def test_a_paused_job_waits_for_the_go_ahead_then_migrates() -> None:
    """ "Manually confirm whether the migration is allowed": ``paused: true`` holds the job
    (nothing reserved, nothing evicted); set to ``false`` it migrates the pod."""
    first = _FirstNode()
    held = replay_in_stages(
        [*NODES, POD_DEMO], [first.stage(PAUSED)], max_time=timedelta(minutes=4)
    )
    assert _job(held).status.phase == "Pending"
    assert held.all("Reservation") == []
    assert _pod(held).spec.node_name == first.name
    assert job_events(held) == []

    go = Stage(delay=60, documents=lambda store, now: [QUICK_START])
    outcome = replay_in_stages([*NODES, POD_DEMO], [first.stage(PAUSED), go], max_time=UNTIL)
    assert (_job(outcome).status.phase, _job(outcome).status.status) == ("Succeeded", "Complete")
    assert _pod(outcome).spec.node_name != first.name


def test_a_job_set_to_failed_is_terminated_and_a_paused_one_expires() -> None:
    """Refusing the migration: ``status.phase=Failed`` ends the job at once; otherwise the
    paused job goes away by itself (the scavenger, 5 minutes after its TTL)."""
    first = _FirstNode()
    refuse = QUICK_START.replace("phase: Pending", "phase: Failed")
    outcome = replay_in_stages(
        [*NODES, POD_DEMO],
        [first.stage(PAUSED), Stage(delay=60, documents=lambda store, now: [refuse])],
        max_time=timedelta(minutes=4),
    )
    assert _job(outcome).status.phase == "Failed"
    assert outcome.all("Reservation") == []
    assert _pod(outcome).spec.node_name == first.name

    expired = replay_in_stages(
        [*NODES, POD_DEMO], [first.stage(PAUSED)], max_time=timedelta(minutes=11)
    )
    assert expired.all("PodMigrationJob") == []
    assert _pod(expired).spec.node_name == first.name


def test_evict_directly_evicts_without_a_reservation() -> None:
    """ "Just want to evict Pods": ``mode: EvictDirectly``; the Job brings its pod back."""
    first = _FirstNode()
    outcome = replay_in_stages([*NODES, POD_DEMO], [first.stage(EVICT_DIRECTLY)], max_time=UNTIL)
    job = _job(outcome)
    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    assert job.status.message == f'Pod "default/{POD}" has been evicted'
    assert outcome.all("Reservation") == []
    assert [e[1] for e in job_events(outcome)] == ["Evicting", "EvictComplete"]
    pod = _pod(outcome)
    assert pod.metadata.uid != job.spec.pod_ref.uid
    assert pod.status.phase == "Running"


def _reservation_0(store: Store, now: datetime) -> Sequence[str]:
    """reservation-0 for the Job's pods, kept off the node the pod runs on."""
    pod = running_pod(store, POD)
    assert pod is not None
    reservation = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "reservation-0"},
        "spec": {
            "template": {
                "metadata": {"namespace": "default"},
                "spec": {
                    "schedulerName": "koord-scheduler",
                    "containers": [
                        {
                            "name": "stress",
                            "resources": {"requests": {"cpu": "200m", "memory": "400Mi"}},
                        }
                    ],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchFields": [
                                            {
                                                "key": "metadata.name",
                                                "operator": "NotIn",
                                                "values": [pod.spec.node_name],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                },
            },
            "owners": [{"labelSelector": {"matchLabels": {"app": "pod-demo"}}}],
            "ttl": "1h",
        },
    }
    return [dump(reservation)]


def _reservation_available(store: Store, now: datetime) -> bool:
    kind = store.registry.for_type(Reservation)
    if not store.exists(kind, "reservation-0"):
        return False
    found = store.get(kind, "reservation-0")
    return isinstance(found, Reservation) and found.status.phase == "Available"


def test_a_job_uses_the_reservation_it_names() -> None:
    """ "Use reserved resources when migrating": ``reservationOptions.reservationRef`` names
    reservation-0, made beforehand; the new pod lands in it and no other is made."""
    first = _FirstNode()
    stages = [
        Stage(when=pod_running(POD), documents=_reservation_0),
        Stage(when=_reservation_available, documents=lambda store, now: [RESERVATION_REF]),
    ]
    outcome = replay_in_stages([*NODES, POD_DEMO], [first.stage(), *stages], max_time=UNTIL)
    job = _job(outcome)
    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    [reservation] = outcome.all("Reservation")
    assert reservation.metadata.name == "reservation-0"
    assert job.status.message == f'Bind Pod "default/{POD}" in Reservation "reservation-0"'
    pod = _pod(outcome)
    assert isinstance(reservation, Reservation)
    assert pod.spec.node_name == reservation.status.node_name != first.name


def test_a_graceful_eviction_names_its_grace_period() -> None:
    """ "Evicting Pods Gracefully": ``deleteOptions.gracePeriodSeconds: 60`` (the page's job is
    paused: it is let go after a minute); the eviction carries the grace period."""
    first = _FirstNode()
    go = Stage(
        delay=60, documents=lambda store, now: [GRACEFUL.replace("paused: true", "paused: false")]
    )
    outcome = replay_in_stages([*NODES, POD_DEMO], [first.stage(GRACEFUL), go], max_time=UNTIL)
    job = _job(outcome)
    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    assert job.spec.delete_options is not None
    assert job.spec.delete_options.grace_period_seconds == 60
    [evicted] = [e for e in outcome.events("Evicted") if e.involved_object.name == POD]
    assert evicted.message.endswith("; grace period 60s")


def test_a_job_that_cannot_reserve_fails_at_its_ttl_and_leaves_the_pod() -> None:
    """The page's ``ttl: 5m`` with nowhere else to go (one node): the reservation stays
    unschedulable, and at 5 minutes the job is Failed, reason ``Timeout``, its reservation
    deleted and the pod where it was."""
    outcome = replay_in_stages(
        [NODES[0], POD_DEMO], [_then(QUICK_START)], max_time=timedelta(minutes=8)
    )
    job = _job(outcome)
    assert (job.status.phase, job.status.reason) == ("Failed", "Timeout")
    assert job.status.message == "Abort job caused by timeout"
    assert outcome.all("Reservation") == []
    assert _pod(outcome).metadata.uid == job.spec.pod_ref.uid
    reasons = [(e[0], e[1]) for e in job_events(outcome)]
    assert ("Warning", "Unschedulable") in reasons
    assert reasons[-1] == ("Warning", "Timeout")


def test_a_bad_ttl_is_refused_naming_the_field() -> None:
    with pytest.raises(DecodeError) as refused:
        sim.scenario_objects(QUICK_START.replace("ttl: 5m", "ttl: 5x"), source="pmj.yaml")
    assert "ttl" in str(refused.value)
    assert "5x" in str(refused.value)
