"""The Events the workload controllers record, as Kubernetes' own controllers word them: the
lines ``kubectl get events`` shows in Koordinator's manuals (the descheduling pages show a
ReplicaSet's ``SuccessfulCreate`` after an eviction), in ``simulate`` and in a live cluster."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from apis.apps import Deployment, ReplicaSet
from apis.core import Event, Job
from controller.errors import Invalid
from controller.store.sqlite import Store
from controller.store.writes import Pending, Verb, Write
from controller.workloads.deployment import plan_deployment
from controller.workloads.job import plan_batch_job
from tests.controller.workloads.cluster import Cluster
from tests.controller.workloads.objects import NOW, running, workload
from tests.controller.workloads.test_job import pi_job
from tests.controller.workloads.test_scenarios import AGENT, APP_DEMO, WEB
from tests.manuals.replay import Outcome, node, replay

replace = msgspec.structs.replace
POD_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
#: How far the tests move the clock between a user's writes.
LATER = timedelta(seconds=5)


def lines(events: Iterator[Event] | list[Event], kind: str, name: str) -> list[tuple[str, ...]]:
    """(type, reason, message) of the Events about ``kind``/``name``, oldest first (those of
    one moment by reason and message: a pass records them at the same time)."""
    about = [e for e in events if (e.involved_object.kind, e.involved_object.name) == (kind, name)]
    about.sort(key=lambda e: (e.first_timestamp or NOW, e.reason, e.message))
    return [(e.type, e.reason, e.message) for e in about]


def cluster_events(cluster: Cluster) -> list[Event]:
    return [e for e in cluster.all("events") if isinstance(e, Event)]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    c.apply(node("node-0"), node("node-1"))
    yield c
    c.close()


# --- the plans say what to record --------------------------------------------------------------


def deployment(**spec: Any) -> Deployment:
    deploy = workload("Deployment", "web", **spec)
    assert isinstance(deploy, Deployment)
    return deploy


def test_a_new_deployment_scales_its_replica_set_up_from_zero() -> None:
    deploy = deployment(replicas=3)
    plan = plan_deployment(deploy, [], NOW)
    [rs] = plan.create
    [note] = plan.events
    assert (note.about, note.type, note.reason) == (deploy, "Normal", "ScalingReplicaSet")
    assert note.message == f"Scaled up replica set {rs.metadata.name} from 0 to 3"


def test_a_deployment_that_changes_nothing_records_nothing() -> None:
    deploy = deployment(replicas=3)
    [rs] = plan_deployment(deploy, [], NOW).create
    assert isinstance(rs, ReplicaSet)
    settled = replace(rs, status=replace(rs.status, replicas=3, available_replicas=3))
    assert plan_deployment(deploy, [settled], NOW).events == []


def job(**spec: Any) -> Job:
    raw = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi", "namespace": "default", "uid": "uid-pi", "generation": 1},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "pi", "image": "p"}]}
            },
            **spec,
        },
    }
    return msgspec.convert(raw, Job, from_attributes=False, strict=False)


def test_suspending_a_running_job_records_suspended() -> None:
    running_job = job()
    pod = running("pi-abcde", running_job)
    first = plan_batch_job(running_job, [pod], NOW)
    assert first.events == []
    suspended = replace(running_job, spec=replace(running_job.spec, suspend=True))
    plan = plan_batch_job(suspended, [pod], NOW)
    assert [(n.reason, n.message) for n in plan.events] == [("Suspended", "Job suspended")]


# --- simulate: one replay per controller ------------------------------------------------------


def test_a_deployment_records_scaling_and_its_replica_set_records_pods() -> None:
    """resource-reservation's ``app-demo``: the Deployment scales its new ReplicaSet up from 0
    to 2, and the ReplicaSet records creating each pod."""
    out = replay(node("node-0", cpu="8"), node("node-1", cpu="8"), APP_DEMO)
    [rs] = out.all("ReplicaSet")
    assert lines(out.events(), "Deployment", "app-demo") == [
        ("Normal", "ScalingReplicaSet", f"Scaled up replica set {rs.metadata.name} from 0 to 2")
    ]
    created = lines(out.events(), "ReplicaSet", rs.metadata.name)
    pods = sorted(p.metadata.name for p in out.all("Pod"))
    assert sorted(m for _, _, m in created) == [f"Created pod: {p}" for p in pods]
    assert {(t, r) for t, r, _ in created} == {("Normal", "SuccessfulCreate")}
    for name in pods:
        assert re.fullmatch(rf"{rs.metadata.name}-{POD_SUFFIX}", name)
    [event] = list(out.events("ScalingReplicaSet"))
    assert event.source.component == "deployment-controller"
    assert event.involved_object.uid == out.get("Deployment", "app-demo", "default").metadata.uid


def test_a_stateful_set_records_each_pod_in_its_words() -> None:
    out = replay(node("node-0"), WEB.replace("{cpu}", "100m"))
    assert lines(out.events(), "StatefulSet", "web") == [
        ("Normal", "SuccessfulCreate", f"create Pod web-{i} in StatefulSet web successful")
        for i in range(3)
    ]


def test_a_daemon_set_records_its_pod_on_every_node() -> None:
    out = replay(node("node-0"), node("node-1"), AGENT)
    recorded = lines(out.events(), "DaemonSet", "node-agent")
    names = sorted(p.metadata.name for p in out.all("Pod"))
    assert len(names) == 2
    assert sorted(recorded) == [("Normal", "SuccessfulCreate", f"Created pod: {n}") for n in names]
    [one] = [e for e in out.events() if e.involved_object.kind == "DaemonSet"][:1]
    assert one.metadata.namespace == "kube-system"


def job_lines(out: Outcome, name: str) -> list[tuple[str, ...]]:
    return lines(out.events(), "Job", name)


def test_a_job_records_its_pods_and_completed() -> None:
    out = replay(node("node-0"), pi_job("pi", "  completions: 3\n  parallelism: 2"))
    recorded = job_lines(out, "pi")
    names = sorted(p.metadata.name for p in out.all("Pod"))
    assert sorted(recorded[:-1]) == [
        ("Normal", "SuccessfulCreate", f"Created pod: {n}") for n in names
    ]
    assert recorded[-1] == ("Normal", "Completed", "Job completed")
    assert [e.source.component for e in out.events("Completed")] == ["job-controller"]


def test_a_job_past_its_deadline_records_the_deletions_and_deadline_exceeded() -> None:
    out = replay(node("node-0"), pi_job("slow", "  parallelism: 2\n  activeDeadlineSeconds: 30"))
    recorded = job_lines(out, "slow")
    creates = [m for _, r, m in recorded if r == "SuccessfulCreate"]
    deletes = [m for _, r, m in recorded if r == "SuccessfulDelete"]
    assert len(creates) == 2
    assert sorted(deletes) == sorted(m.replace("Created", "Deleted") for m in creates)
    assert [line for line in recorded if line[0] == "Warning"] == [
        ("Warning", "DeadlineExceeded", "Job was active longer than specified deadline")
    ]


def test_a_job_the_queue_runs_records_the_same_lines_once() -> None:
    """Koord-Queue's path runs it (pods ``<job>-<index>``); the Events about it are those
    Kubernetes' Job controller records, written once, not by both paths."""
    out = replay(node("node-0"), pi_job("queued", "  suspend: true"))
    assert job_lines(out, "queued") == [
        ("Normal", "SuccessfulCreate", "Created pod: queued-0"),
        ("Normal", "Completed", "Job completed"),
    ]
    assert {e.count for e in out.events() if e.involved_object.name == "queued"} == {1}
    assert {e.source.component for e in out.events("Completed")} == {"job-controller"}


def test_a_job_deleted_by_its_ttl_records_no_pod_deletion() -> None:
    out = replay(node("node-0"), pi_job("short", "  ttlSecondsAfterFinished: 100"))
    assert out.all("Job") == []
    assert [e.reason for e in out.events() if e.involved_object.name == "short"] == [
        "SuccessfulCreate",
        "Completed",
    ]


# --- a live cluster: deletions, repeats and failures -------------------------------------------


def test_scaling_down_records_the_deletions_and_the_scaling(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO.replace("replicas: 2", "replicas: 3"))
    cluster.settle()
    [rs] = cluster.all("rs")
    cluster.apply(APP_DEMO.replace("replicas: 2", "replicas: 1"))
    cluster.settle(advance=LATER)
    events = cluster_events(cluster)
    assert lines(events, "Deployment", "app-demo")[-1] == (
        "Normal",
        "ScalingReplicaSet",
        f"Scaled down replica set {rs.metadata.name} from 3 to 1",
    )
    deleted = [
        m for _, r, m in lines(events, "ReplicaSet", rs.metadata.name) if r != "SuccessfulCreate"
    ]
    [kept] = cluster.pods()
    assert len(deleted) == 2
    assert all(re.fullmatch(rf"Deleted pod: {rs.metadata.name}-{POD_SUFFIX}", m) for m in deleted)
    assert f"Deleted pod: {kept.metadata.name}" not in deleted


def test_a_rollout_records_both_replica_sets_scaling(cluster: Cluster) -> None:
    cluster.apply(APP_DEMO)
    cluster.settle()
    [old] = cluster.all("rs")
    cluster.apply(APP_DEMO.replace("image: polinux/stress", "image: polinux/stress:1.0.4"))
    cluster.settle(advance=LATER)
    [new] = [rs for rs in cluster.all("rs") if rs.metadata.name != old.metadata.name]
    recorded = [m for _, _, m in lines(cluster_events(cluster), "Deployment", "app-demo")]
    assert recorded[0] == f"Scaled up replica set {old.metadata.name} from 0 to 2"
    # 25 % surge and unavailability of 2 replicas: one pod at a time, up one, down the other.
    assert sorted(recorded[1:]) == sorted(
        [
            f"Scaled up replica set {new.metadata.name} from 0 to 1",
            f"Scaled down replica set {old.metadata.name} from 2 to 1",
            f"Scaled up replica set {new.metadata.name} from 1 to 2",
            f"Scaled down replica set {old.metadata.name} from 1 to 0",
        ]
    )


def test_a_stateful_set_pod_made_again_bumps_the_event_count(cluster: Cluster) -> None:
    cluster.apply(WEB.replace("{cpu}", "100m").replace("replicas: 3", "replicas: 1"))
    cluster.settle()
    cluster.delete("pods", "web-0")
    cluster.settle(advance=LATER)
    [created] = [e for e in cluster_events(cluster) if e.reason == "SuccessfulCreate"]
    assert created.message == "create Pod web-0 in StatefulSet web successful"
    assert created.count == 2
    assert created.first_timestamp is not None
    assert created.last_timestamp == created.first_timestamp + LATER


def test_a_stateful_set_scale_down_records_the_deletion(cluster: Cluster) -> None:
    cluster.apply(WEB.replace("{cpu}", "100m").replace("replicas: 3", "replicas: 2"))
    cluster.settle()
    cluster.apply(WEB.replace("{cpu}", "100m").replace("replicas: 3", "replicas: 1"))
    cluster.settle(advance=LATER)
    assert lines(cluster_events(cluster), "StatefulSet", "web")[-1] == (
        "Normal",
        "SuccessfulDelete",
        "delete Pod web-1 in StatefulSet web successful",
    )


def test_a_job_over_its_backoff_limit_records_backoff_limit_exceeded(cluster: Cluster) -> None:
    cluster.apply(pi_job("flaky", "  backoffLimit: 0"))
    cluster.settle()
    [pod] = cluster.pods()
    cluster.fail(pod, reason="Error")
    cluster.settle(advance=LATER)
    flaky = cluster.get("jobs", "flaky")
    assert isinstance(flaky, Job)
    ends = [(c.type, c.reason) for c in flaky.status.conditions]
    assert ends == [("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")]
    assert lines(cluster_events(cluster), "Job", "flaky") == [
        ("Normal", "SuccessfulCreate", f"Created pod: {pod.metadata.name}"),
        ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    ]


def test_a_job_suspended_and_resumed_by_apply_records_both(cluster: Cluster) -> None:
    """A Job created ``suspend: false`` runs without the queue; applying ``suspend: true``
    suspends it (its pod is deleted), and ``suspend: false`` again resumes it."""
    cluster.apply(pi_job("pausable", "  suspend: false"))
    cluster.settle()
    [first] = cluster.pods()
    cluster.apply(pi_job("pausable", "  suspend: true"))
    cluster.settle(advance=LATER)
    paused = cluster.get("jobs", "pausable")
    assert isinstance(paused, Job)
    assert paused.spec.suspend is True
    assert {c.type: c.status for c in paused.status.conditions} == {"Suspended": "True"}
    assert cluster.pods() == []
    cluster.apply(pi_job("pausable", "  suspend: false"))
    cluster.settle(advance=LATER)
    [second] = cluster.pods()
    assert lines(cluster_events(cluster), "Job", "pausable") == [
        ("Normal", "SuccessfulCreate", f"Created pod: {first.metadata.name}"),
        ("Normal", "SuccessfulDelete", f"Deleted pod: {first.metadata.name}"),
        ("Normal", "Suspended", "Job suspended"),
        ("Normal", "Resumed", "Job resumed"),
        ("Normal", "SuccessfulCreate", f"Created pod: {second.metadata.name}"),
    ]


def test_a_pod_the_store_refuses_records_failed_create(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Store.write

    def refuse_pods(self: Store, writes: Sequence[Write]) -> Pending:
        refused = [
            w.verb is Verb.CREATE and w.obj is not None and w.obj.kind == "Pod" for w in writes
        ]
        done = iter(
            original(self, [w for w, r in zip(writes, refused, strict=True) if not r]).results()
        )
        error = Invalid("spec.containers[0].image: Required value")
        return Pending.completed(error if r else next(done) for r in refused)

    monkeypatch.setattr(Store, "write", refuse_pods)
    cluster.apply(WEB.replace("{cpu}", "100m").replace("replicas: 3", "replicas: 1"))
    cluster.step()
    assert lines(cluster_events(cluster), "StatefulSet", "web") == [
        (
            "Warning",
            "FailedCreate",
            "create Pod web-0 in StatefulSet web failed error: "
            "spec.containers[0].image: Required value",
        )
    ]
    cluster.apply(APP_DEMO)
    cluster.step()  # the Deployment makes its ReplicaSet, which fails to make its pods
    [rs] = cluster.all("rs")
    recorded = lines(cluster_events(cluster), "ReplicaSet", rs.metadata.name)
    assert recorded == [
        ("Warning", "FailedCreate", "Error creating: spec.containers[0].image: Required value")
    ]
    [event] = [e for e in cluster_events(cluster) if e.involved_object.kind == "ReplicaSet"]
    assert event.count == 2  # the two pods refused in one pass
