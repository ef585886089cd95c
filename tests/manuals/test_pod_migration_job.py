"""Koordinator v1.8 user manual "PodMigrationJob" (``user-manuals/pod-migration-job.md``).

The page migrates the pod of its one-replica Deployment ``pod-demo``, applied as the page
gives it. Its PodMigrationJobs are applied once that pod runs (step 3), as the page writes
them but for ``podRef.name``: the page's ``pod-demo-5f9b977566-c7lvk`` is the name its cluster
gave the pod, so here it is the name koordpy's ReplicaSet gave it. The replacement pod comes
from the ReplicaSet under a new name (the page's NEWPOD), and the job's ``status.podRef``
names it.

Where the page and v1.8 differ, v1.8 wins: the page prints phase ``Succeed`` and the Evicting
Event ``Try to evict Pod ...`` of older releases; v1.8 writes ``Succeeded`` and ``Pod ...
evicted from node ... by the reason ...``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apis import codec
from apis.core import Event, Pod
from apis.errors import DecodeError
from apis.kinds import default_registry
from apis.scheduling import PodMigrationJob, Reservation
from controller import simulate as sim
from controller.cli import printing
from controller.reservations.affinity import AllocatedReservation, parse_allocated
from tests.crdschema import schema_errors, validator
from tests.manuals.replay import Cluster, Outcome, dump, node

#: The page's Deployment ``pod-demo`` (step 1), as the page gives it.
POD_DEMO = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pod-demo
  namespace: default
spec:
  progressDeadlineSeconds: 600
  replicas: 1
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app: pod-demo
  strategy:
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 25%
    type: RollingUpdate
  template:
    metadata:
      creationTimestamp: null
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
      restartPolicy: Always
      schedulerName: koord-scheduler
"""
#: The page's name of the Deployment's pod, which the page's PodMigrationJobs name: replaced
#: by the name koordpy's ReplicaSet gave it (:func:`migration`).
PAGE_POD = "pod-demo-5f9b977566-c7lvk"

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
    name: {PAGE_POD}
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


def _demo_pod(outcome: Outcome) -> Pod:
    """The one pod of pod-demo (``kubectl get pod -l app=pod-demo``)."""
    [pod] = outcome.pods(app="pod-demo")
    return pod


def _demo_runs(outcome: Outcome) -> bool:
    pods = outcome.pods(app="pod-demo")
    return len(pods) == 1 and bool(pods[0].spec.node_name) and pods[0].status.phase == "Running"


def started(*nodes: str) -> tuple[Cluster, Pod]:
    """Steps 1 and 2: pod-demo created and its pod running; the cluster and that pod."""
    cluster = Cluster(*(nodes or NODES), POD_DEMO)
    cluster.run_until(_demo_runs, within=timedelta(minutes=1))
    return cluster, _demo_pod(cluster.outcome())


def migration(manifest: str, pod: Pod) -> str:
    """The page's PodMigrationJob ``manifest``, its ``podRef`` naming ``pod``."""
    return manifest.replace(PAGE_POD, pod.metadata.name)


def migrated(manifest: str) -> tuple[Outcome, Pod]:
    """Steps 1 to 3: pod-demo's pod running, the PodMigrationJob ``manifest`` for it applied
    and run to its end; the objects then, and the pod it migrated."""
    cluster, old = started()
    with cluster:
        cluster.apply(migration(manifest, old))
        cluster.run(UNTIL)
        return cluster.outcome(), old


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


def test_quick_start_migrates_the_pod_into_a_reservation_on_another_node(
    shared_dir: Path,
) -> None:
    """Quick Start: ReservationFirst, ``ttl: 5m``; the job Succeeds with status ``Complete``,
    the ReplicaSet's new pod (another name) runs in the reservation named after the job on the
    other node, ``koordpy get pmj`` shows the page's columns (NEWPOD the new pod) and ``koordpy
    describe pmj`` the page's Events (v1.8's Evicting message); what is written is what
    Koordinator's CRD accepts."""
    outcome, old = migrated(QUICK_START)
    job = _job(outcome)
    [reservation] = outcome.all("Reservation")
    assert isinstance(reservation, Reservation)
    new = _demo_pod(outcome)
    other = {"node-0", "node-1"} - {old.spec.node_name}

    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    assert new.metadata.name != old.metadata.name
    [owner] = new.metadata.owner_references
    assert owner.kind == "ReplicaSet"
    assert old.metadata.name.startswith(f"{owner.name}-")  # the same ReplicaSet's
    assert {job.status.node_name, new.spec.node_name} == other
    assert new.status.phase == "Running"
    assert reservation.metadata.name == job.metadata.uid
    assert parse_allocated(new) is not None
    assert parse_allocated(new) == AllocatedReservation(
        name=reservation.metadata.name, uid=reservation.metadata.uid
    )
    assert job.spec.reservation_options is not None
    assert job.spec.reservation_options.reservation_ref is not None
    assert job.spec.reservation_options.reservation_ref.name == reservation.metadata.name
    assert job.status.pod_ref is not None
    assert (job.status.pod_ref.name, job.status.pod_ref.uid) == (
        new.metadata.name,
        new.metadata.uid,
    )
    assert job.spec.pod_ref.uid == old.metadata.uid
    assert outcome.pods(app="pod-demo") == [new]  # the old one is gone

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
            f'Pod "default/{old.metadata.name}" evicted from node "{old.spec.node_name}"'
            ' by the reason ""',
        ),
        ("Normal", "EvictComplete", f'Pod "default/{old.metadata.name}" has been evicted'),
        ("Normal", "Complete", f'Bind Pod "default/{new.metadata.name}" in Reservation "{name}"'),
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
    cells = dict(zip(headers, printing.row(kind, job, now=outcome.result.ended), strict=True))
    assert {k: v for k, v in cells.items() if k != "AGE"} == {
        "NAME": "migrationjob-demo",
        "PHASE": "Succeeded",
        "STATUS": "Complete",
        "NODE": job.status.node_name,
        "RESERVATION": name,
        "PODNAMESPACE": "default",
        "POD": old.metadata.name,
        "NEWPOD": new.metadata.name,
        "TTL": "5m0s",
    }


def test_a_paused_job_waits_for_the_go_ahead_then_migrates() -> None:
    """ "Manually confirm whether the migration is allowed": ``paused: true`` holds the job
    (nothing reserved, nothing evicted); set to ``false`` it migrates the pod."""
    cluster, old = started()
    with cluster:
        cluster.apply(migration(PAUSED, old))
        cluster.run(timedelta(minutes=4))
        held = cluster.outcome()
        assert _job(held).status.phase == "Pending"
        assert held.all("Reservation") == []
        assert _demo_pod(held).metadata.uid == old.metadata.uid
        assert job_events(held) == []

        cluster.apply(migration(QUICK_START, old))
        cluster.run(timedelta(minutes=4))  # before the scavenger: 10 minutes from the start
        outcome = cluster.outcome()
    assert (_job(outcome).status.phase, _job(outcome).status.status) == ("Succeeded", "Complete")
    assert _demo_pod(outcome).spec.node_name not in ("", old.spec.node_name)


def test_a_job_set_to_failed_is_terminated_and_a_paused_one_expires() -> None:
    """Refusing the migration: ``status.phase=Failed`` ends the job at once; otherwise the
    paused job goes away by itself (the scavenger, 5 minutes after its TTL)."""
    refuse = QUICK_START.replace("phase: Pending", "phase: Failed")
    cluster, old = started()
    with cluster:
        cluster.apply(migration(PAUSED, old))
        cluster.run(timedelta(minutes=1))
        cluster.apply(migration(refuse, old))
        cluster.run(timedelta(minutes=3))
        outcome = cluster.outcome()
    assert _job(outcome).status.phase == "Failed"
    assert outcome.all("Reservation") == []
    assert _demo_pod(outcome).metadata.uid == old.metadata.uid

    cluster, old = started()
    with cluster:
        cluster.apply(migration(PAUSED, old))
        cluster.run(timedelta(minutes=11))
        expired = cluster.outcome()
    assert expired.all("PodMigrationJob") == []
    assert _demo_pod(expired).metadata.uid == old.metadata.uid


def test_evict_directly_evicts_without_a_reservation() -> None:
    """ "Just want to evict Pods": ``mode: EvictDirectly``; the ReplicaSet makes a new pod."""
    outcome, old = migrated(EVICT_DIRECTLY)
    job = _job(outcome)
    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    assert job.status.message == f'Pod "default/{old.metadata.name}" has been evicted'
    assert outcome.all("Reservation") == []
    assert [e[1] for e in job_events(outcome)] == ["Evicting", "EvictComplete"]
    new = _demo_pod(outcome)
    assert new.metadata.name != old.metadata.name
    assert new.status.phase == "Running"
    assert parse_allocated(new) is None


def _reservation_0(avoid: str) -> str:
    """reservation-0 for pod-demo's pods, kept off the node ``avoid`` (where the pod runs)."""
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
                                                "values": [avoid],
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
    return dump(reservation)


def _reservation_0_available(outcome: Outcome) -> bool:
    found = [r for r in outcome.all("Reservation") if r.metadata.name == "reservation-0"]
    return any(isinstance(r, Reservation) and r.status.phase == "Available" for r in found)


def test_a_job_uses_the_reservation_it_names() -> None:
    """ "Use reserved resources when migrating": ``reservationOptions.reservationRef`` names
    reservation-0, made beforehand; the new pod lands in it and no other is made."""
    cluster, old = started()
    with cluster:
        cluster.apply(_reservation_0(avoid=old.spec.node_name))
        cluster.run_until(_reservation_0_available, within=timedelta(minutes=1))
        cluster.apply(migration(RESERVATION_REF, old))
        cluster.run(UNTIL)
        outcome = cluster.outcome()
    job = _job(outcome)
    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    [reservation] = outcome.all("Reservation")
    assert isinstance(reservation, Reservation)
    assert reservation.metadata.name == "reservation-0"
    new = _demo_pod(outcome)
    assert job.status.message == (
        f'Bind Pod "default/{new.metadata.name}" in Reservation "reservation-0"'
    )
    assert new.spec.node_name == reservation.status.node_name != old.spec.node_name
    assert parse_allocated(new) == AllocatedReservation(
        name="reservation-0", uid=reservation.metadata.uid
    )


def test_a_graceful_eviction_names_its_grace_period() -> None:
    """ "Evicting Pods Gracefully": ``deleteOptions.gracePeriodSeconds: 60`` (the page's job is
    paused: it is let go after a minute); the eviction carries the grace period."""
    cluster, old = started()
    with cluster:
        cluster.apply(migration(GRACEFUL, old))
        cluster.run(timedelta(minutes=1))
        cluster.apply(migration(GRACEFUL.replace("paused: true", "paused: false"), old))
        cluster.run(UNTIL)
        outcome = cluster.outcome()
    job = _job(outcome)
    assert (job.status.phase, job.status.status) == ("Succeeded", "Complete")
    assert job.spec.delete_options is not None
    assert job.spec.delete_options.grace_period_seconds == 60
    [evicted] = [
        e for e in outcome.events("Evicted") if e.involved_object.name == old.metadata.name
    ]
    assert evicted.message.endswith("; grace period 60s")


def test_a_job_that_cannot_reserve_fails_at_its_ttl_and_leaves_the_pod() -> None:
    """The page's ``ttl: 5m`` with nowhere else to go (one node): the reservation stays
    unschedulable, and at 5 minutes the job is Failed, reason ``Timeout``, its reservation
    deleted and the pod where it was."""
    cluster, old = started(NODES[0])
    with cluster:
        cluster.apply(migration(QUICK_START, old))
        cluster.run(timedelta(minutes=8))
        outcome = cluster.outcome()
    job = _job(outcome)
    assert (job.status.phase, job.status.reason) == ("Failed", "Timeout")
    assert job.status.message == "Abort job caused by timeout"
    assert outcome.all("Reservation") == []
    assert _demo_pod(outcome).metadata.uid == old.metadata.uid == job.spec.pod_ref.uid
    reasons = [(e[0], e[1]) for e in job_events(outcome)]
    assert ("Warning", "Unschedulable") in reasons
    assert reasons[-1] == ("Warning", "Timeout")


def test_a_bad_ttl_is_refused_naming_the_field() -> None:
    """A ``ttl`` that is no duration is refused naming the field and the value."""
    with pytest.raises(DecodeError) as refused:
        sim.scenario_objects(QUICK_START.replace("ttl: 5m", "ttl: 5x"), source="pmj.yaml")
    assert "ttl" in str(refused.value)
    assert "5x" in str(refused.value)


def test_a_bad_ttl_applied_to_the_running_cluster_stores_nothing() -> None:
    """The same ``ttl: 5x`` applied next to the running pod-demo: refused, nothing stored, the
    pod left where it runs."""
    cluster, old = started()
    with cluster:
        with pytest.raises(DecodeError):
            cluster.apply(migration(QUICK_START.replace("ttl: 5m", "ttl: 5x"), old))
        cluster.run(timedelta(minutes=1))
        outcome = cluster.outcome()
    assert outcome.all("PodMigrationJob") == []
    assert _demo_pod(outcome).metadata.uid == old.metadata.uid
