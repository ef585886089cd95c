"""The ``migration`` loop: PodMigrationJobs from arbitration to an end (controller-spec §6.2),
and the workload bringing an evicted pod back into the reservation made for it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis import codec
from apis import constants as k
from apis.core import (
    Affinity,
    ConfigMap,
    Container,
    Event,
    Job,
    JobSpec,
    Node,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Pod,
    PodSpec,
    PodTemplateSpec,
    PyTorchJob,
    PyTorchJobSpec,
    ReplicaSpec,
    ResourceRequirements,
    RunPolicy,
)
from apis.duration import Duration
from apis.meta import Condition, Object, ObjectMeta, ObjectReference
from apis.queueing import QueueUnit
from apis.resources import ResourceList
from apis.scheduling import (
    DeleteOptions,
    PodMigrationJob,
    PodMigrationJobSpec,
    PodMigrationJobStatus,
    PodMigrationReservationOptions,
    Preconditions,
    Reservation,
)
from controller.descheduler.config import DeschedulerConfigError, load_configuration
from controller.descheduler.evictionpolicy import ANNOTATION_SOFT_EVICTION
from controller.descheduler.evictor import MigrationControllerArgs, ObjectLimiter
from controller.descheduler.migration import (
    FAILED,
    MODE_EVICT_DIRECTLY,
    PENDING,
    RUNNING,
    SUCCEEDED,
    Limits,
    MigrationController,
    World,
    arbitrate,
    arbitration_order,
    reservation_for,
    workload_limit,
)
from controller.descheduler.migrationrates import EvictionBuckets, ObjectRate
from controller.loops import LOOPS, LoopContext
from controller.simulate import simulate
from controller.store.cluster import Pending, Verb, Write
from controller.store.sqlite import Store
from tests.controller.delayed import DelayedStore, mark_loops
from tests.controller.descheduler.conftest import (
    GI,
    T0,
    Clock,
    answered,
    make_node,
    make_pod,
    replicaset,
)
from tests.crdschema import schema_errors, validator

replace = msgspec.structs.replace

REASON = "node is overutilized, node cpu usage(82.00%)>threshold(75.00%)"
PMJ_KEY = "scheduling.koordinator.sh/PodMigrationJob"
RESERVATION_KEY = "scheduling.koordinator.sh/Reservation"


def pmj(
    name: str,
    pod: Pod,
    *,
    mode: str = "",
    created: datetime = T0,
    phase: str = "",
    ttl: str | None = None,
    paused: bool = False,
) -> PodMigrationJob:
    """A PMJ for ``pod`` as the evictor writes it (reason and trigger annotations)."""
    return PodMigrationJob(
        metadata=ObjectMeta(
            name=name,
            uid=f"uid-{name}",
            creation_timestamp=created,
            annotations={
                k.ANNOTATION_EVICT_REASON: REASON,
                k.ANNOTATION_EVICT_TRIGGER: "LowNodeLoad",
            },
        ),
        spec=PodMigrationJobSpec(
            pod_ref=ObjectReference(namespace=pod.metadata.namespace, name=pod.metadata.name),
            mode=mode,
            ttl=None if ttl is None else Duration.parse(ttl),
            paused=paused,
        ),
        status=PodMigrationJobStatus(phase=phase),
    )


def wire(obj: Object) -> object:
    """``obj`` as the JSON an API server would receive."""
    return json.loads(codec.encode_json(obj))


def ready(pod: Pod, is_ready: bool = True) -> Pod:
    condition = Condition(type="Ready", status="True" if is_ready else "False")
    return replace(pod, status=replace(pod.status, conditions=(condition,)))


def by_kind(objects: Sequence[Object], kind: type[Object]) -> list[Object]:
    return [o for o in objects if isinstance(o, kind)]


def the(objects: Sequence[Object], kind: type[Object]) -> Object:
    [found] = by_kind(objects, kind)
    return found


# --- whole clusters through simulate() --------------------------------------------------------


def job_of(kind: str) -> Object:
    """A held job of one 2-core/4 GiB pod, of the kind the jobs loop runs."""
    template = PodTemplateSpec(
        metadata=ObjectMeta(labels={"app": "train"}),
        spec=PodSpec(
            scheduler_name="koord-scheduler",
            restart_policy="Never",
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(
                        requests=ResourceList({"cpu": 2000, "memory": 4 * GI})
                    ),
                ),
            ),
        ),
    )
    meta = ObjectMeta(name="train", namespace="team-a")
    if kind == "Job":
        return Job(
            metadata=meta,
            spec=JobSpec(suspend=True, parallelism=1, completions=1, template=template),
        )
    return PyTorchJob(
        metadata=replace(meta, annotations={k.ANNOTATION_QUEUE_SUSPEND: "true"}),
        spec=PyTorchJobSpec(
            run_policy=RunPolicy(suspend=True),
            pytorch_replica_specs={"Master": ReplicaSpec(replicas=1, template=template)},
        ),
    )


class Migrate:
    """Plays the descheduler: once a pod runs on node-a, optionally opens node-b and asks for
    that pod to move with a PodMigrationJob (once)."""

    name = "migrate"

    def __init__(self, *, mode: str = "", open_node_b: bool = True) -> None:
        self.mode = mode
        self.open_node_b = open_node_b
        self.moved: Pod | None = None

    def reconcile(self, ctx: LoopContext) -> float | None:
        if self.moved is not None:
            return None
        store = ctx.store
        running = [
            p
            for p in store.list(store.registry.for_type(Pod))[0]
            if isinstance(p, Pod) and p.status.phase == "Running" and p.spec.node_name == "node-a"
        ]
        if not running:
            return None
        if self.open_node_b:
            node = store.get(store.registry.for_type(Node), "node-b")
            assert isinstance(node, Node)
            store.update(replace(node, spec=replace(node.spec, unschedulable=False)))
        self.moved = running[0]
        job = pmj("move-train", self.moved, mode=self.mode)
        store.create(replace(job, metadata=replace(job.metadata, uid="", creation_timestamp=None)))
        return None


def run_cluster(
    migrate: Migrate, *workload: Object, max_time: timedelta = timedelta(minutes=4)
) -> list[Object]:
    """node-a open, node-b cordoned until ``migrate`` opens it, ``workload`` on them, every
    loop of the controller plus the migration loop, until nothing changes (or ``max_time``,
    which stays below the PMJ scavenger's 10 minutes)."""
    nodes = [
        make_node("node-a", cpu=8000, memory=32 * GI),
        make_node("node-b", cpu=8000, memory=32 * GI, unschedulable=True),
    ]
    result = simulate(
        [*nodes, *workload],
        loops={**LOOPS, "migrate": lambda: migrate, "migration": MigrationController},
        max_time=max_time,
    )
    return list(result.objects)


@pytest.mark.parametrize("kind", ["Job", "PyTorchJob"])
def test_reservation_first_moves_a_job_pod_into_a_reservation_on_another_node(
    kind: str, shared_dir: Path
) -> None:
    migrate = Migrate()
    objects = run_cluster(migrate, job_of(kind))
    old = migrate.moved
    assert old is not None
    assert old.spec.node_name == "node-a"

    job = the(objects, PodMigrationJob)
    assert isinstance(job, PodMigrationJob)
    reservation = the(objects, Reservation)
    assert isinstance(reservation, Reservation)
    new = the(objects, Pod)
    assert isinstance(new, Pod)

    # The reservation: named after the job, placed away from node-a, for the job's owner.
    assert reservation.metadata.name == job.metadata.uid
    assert reservation.status.node_name == "node-b"
    assert reservation.status.phase == "Succeeded"  # allocate-once, and allocated
    [owner] = reservation.spec.owners
    assert owner.controller is not None
    assert (owner.controller.kind, owner.controller.name) == (kind, "train")
    # The replacement: a new pod of the same replica, bound into the reservation, running.
    assert new.metadata.uid != old.metadata.uid
    assert new.metadata.name == old.metadata.name
    assert new.metadata.owner_references == old.metadata.owner_references
    assert new.metadata.labels == old.metadata.labels
    assert (new.spec.node_name, new.status.phase) == ("node-b", "Running")
    assert reservation.metadata.uid in new.metadata.annotations[k.ANNOTATION_RESERVATION_ALLOCATED]
    # The job: Succeeded, pointing at the new pod and its node.
    assert (job.status.phase, job.status.node_name) == (SUCCEEDED, "node-b")
    assert job.status.pod_ref is not None
    assert job.status.pod_ref.uid == new.metadata.uid
    assert job.spec.pod_ref.uid == old.metadata.uid
    assert {c.type: c.status for c in job.status.conditions} == {
        "ReservationCreated": "True",
        "ReservationScheduled": "True",
        "Eviction": "True",
        "PodBoundReservation": "True",
        "ReservationBound": "True",
        "BoundPodReady": "True",
    }
    name = reservation.metadata.name
    new_pod = f'"team-a/{new.metadata.name}"'
    complete = f'Bind Pod {new_pod} in Reservation "{name}"'
    assert (job.status.status, job.status.reason, job.status.message) == ("Complete", "", complete)
    # The job's Events, as v1.8 records them, in order.
    assert [
        (e.type, e.reason, e.message)
        for e in by_kind(objects, Event)
        if isinstance(e, Event) and e.involved_object.kind == "PodMigrationJob"
    ] == [
        ("Normal", "ReservationCreated", f'Successfully create Reservation "{name}"'),
        ("Normal", "ReservationScheduled", f'Assigned Reservation "{name}" to node "node-b"'),
        (
            "Normal",
            "Evicting",
            f'Pod "team-a/{old.metadata.name}" evicted from node "node-a" by the reason "{REASON}"',
        ),
        ("Normal", "EvictComplete", f'Pod "team-a/{old.metadata.name}" has been evicted'),
        ("Normal", "PodBoundReservation", f"Reservation bound by pod {new_pod}"),
        (
            "Normal",
            "WaitForBoundPodReady",
            f"Waiting for Bound Pod team-a/{new.metadata.name} Ready",
        ),
        ("Normal", "BoundPodReady", f"Bind pod {new_pod} is ready"),
        ("Normal", "Complete", complete),
    ]
    [evicted] = [
        e for e in by_kind(objects, Event) if isinstance(e, Event) and e.reason == "Evicted"
    ]
    assert evicted.type == "Warning"
    assert evicted.involved_object.uid == old.metadata.uid
    assert "move-train" in evicted.message
    assert REASON in evicted.message
    # The workload neither lost a replica nor counted one as finished.
    unit = the(objects, QueueUnit)
    assert isinstance(unit, QueueUnit)
    assert unit.status.phase == "Running"
    assert [(a.replicas, a.running) for a in unit.status.admissions] == [(1, 1)]
    owner_job = the(objects, type(job_of(kind)))
    if isinstance(owner_job, Job):
        assert (owner_job.status.succeeded, owner_job.status.failed) == (0, 0)
    elif isinstance(owner_job, PyTorchJob):
        assert all(
            s.failed == 0 and s.succeeded == 0 for s in owner_job.status.replica_statuses.values()
        )
    # What we wrote is what Koordinator's CRDs accept.
    assert schema_errors(validator(shared_dir, PMJ_KEY), wire(job)) == []
    assert schema_errors(validator(shared_dir, RESERVATION_KEY), wire(reservation)) == []


def test_an_unschedulable_reservation_holds_the_job_until_it_times_out() -> None:
    """As v1.8: the reservation stays Pending, the job tells why, and at its TTL (5 minutes by
    default) it fails with ``Timeout``, its reservation deleted and the pod left alone."""
    migrate = Migrate(open_node_b=False)  # node-b stays cordoned: nowhere else to go
    objects = run_cluster(migrate, job_of("Job"), max_time=timedelta(minutes=7))
    old = migrate.moved
    assert old is not None

    job = the(objects, PodMigrationJob)
    assert isinstance(job, PodMigrationJob)
    assert (job.status.phase, job.status.reason) == (FAILED, "Timeout")
    assert job.status.message == "Abort job caused by timeout"
    [scheduled] = [c for c in job.status.conditions if c.type == "ReservationScheduled"]
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    assert scheduled.message  # the scheduler's words
    assert by_kind(objects, Reservation) == []  # deleted with the failure
    pod = the(objects, Pod)
    assert isinstance(pod, Pod)
    assert (pod.metadata.uid, pod.spec.node_name, pod.status.phase) == (
        old.metadata.uid,
        "node-a",
        "Running",
    )
    reasons = {e.reason for e in by_kind(objects, Event) if isinstance(e, Event)}
    assert "Evicted" not in reasons
    warnings = [
        e.reason
        for e in by_kind(objects, Event)
        if isinstance(e, Event) and e.involved_object.kind == "PodMigrationJob"
    ]
    assert warnings == ["ReservationCreated", "Unschedulable", "Timeout"]


def test_evict_directly_evicts_and_the_job_brings_the_pod_back() -> None:
    migrate = Migrate(mode=MODE_EVICT_DIRECTLY)
    objects = run_cluster(migrate, job_of("Job"))
    old = migrate.moved
    assert old is not None

    job = the(objects, PodMigrationJob)
    assert isinstance(job, PodMigrationJob)
    assert job.status.phase == SUCCEEDED
    assert by_kind(objects, Reservation) == []
    new = the(objects, Pod)
    assert isinstance(new, Pod)
    assert new.metadata.uid != old.metadata.uid
    assert new.status.phase == "Running"
    assert [e.reason for e in by_kind(objects, Event) if isinstance(e, Event)].count("Evicted") == 1


# --- the loop on a store, step by step --------------------------------------------------------


def step(store: Store, clock: Clock, loop: MigrationController) -> float | None:
    """One pass of ``loop``, with the answers to its writes in (:func:`answered`)."""
    wait = loop.reconcile(LoopContext(store=store, now=clock))
    answered(store, loop)
    return wait


def get_job(store: Store, name: str = "move") -> PodMigrationJob:
    job = store.get(store.registry.for_type(PodMigrationJob), name)
    assert isinstance(job, PodMigrationJob)
    return job


def reservations(store: Store) -> list[Reservation]:
    return [
        r for r in store.list(store.registry.for_type(Reservation))[0] if isinstance(r, Reservation)
    ]


def test_a_job_past_its_ttl_fails_then_is_scavenged(store: Store, clock: Clock) -> None:
    pod = store.create(ready(make_pod("web-0", node="node-a", cpu=1000)))
    store.apply_many([make_node("node-a"), make_node("node-b")])
    store.create(pmj("move", pod))
    loop = MigrationController()

    # Running, with its reservation asked for; no scheduler runs, so it waits.
    assert step(store, clock, loop) == 300.0  # the default TTL of 5 minutes
    job = get_job(store)
    assert job.status.phase == RUNNING
    [reservation] = reservations(store)
    assert reservation.metadata.name == job.metadata.uid
    assert job.spec.reservation_options is not None
    assert job.spec.reservation_options.reservation_ref is not None
    assert job.spec.reservation_options.reservation_ref.name == reservation.metadata.name

    clock.now += timedelta(minutes=5)
    assert step(store, clock, loop) == 300.0  # until the scavenger, TTL + 5 minutes
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (FAILED, "Timeout")
    assert reservations(store) == []
    assert store.get(store.registry.for_type(Pod), "web-0").metadata.uid == pod.metadata.uid

    clock.now += timedelta(minutes=5)
    assert step(store, clock, loop) is None
    assert store.list(store.registry.for_type(PodMigrationJob))[0] == []


def test_a_paused_job_holds(store: Store, clock: Clock) -> None:
    pod = ready(make_pod("web-0", node="node-a"))
    store.apply_many([make_node("node-a"), pod])
    store.create(pmj("move", pod, paused=True))
    loop = MigrationController()
    step(store, clock, loop)
    clock.now += timedelta(minutes=6)
    step(store, clock, loop)
    assert get_job(store).status.phase in ("", PENDING)
    assert reservations(store) == []


def test_a_job_for_a_missing_pod_fails(store: Store, clock: Clock) -> None:
    store.create(pmj("move", make_pod("gone")))
    step(store, clock, MigrationController())
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (FAILED, "MissingPod")
    assert job.status.message == 'Abort job caused by missing Pod "default/gone"'
    [event] = events(store)
    assert (event.type, event.reason, event.message) == (
        "Warning",
        "MissingPod",
        job.status.message,
    )


@pytest.mark.parametrize(
    ("annotations", "phase"),
    [
        pytest.param({k.ANNOTATION_EVICTION_COST: str(2**31 - 1)}, FAILED, id="max-cost"),
        pytest.param(
            {k.ANNOTATION_EVICTION_COST: str(2**31 - 1), k.ANNOTATION_DESCHEDULER_EVICT: ""},
            RUNNING,
            id="max-cost-but-evict-asked",
        ),
        pytest.param({k.ANNOTATION_EVICTION_COST: "100"}, RUNNING, id="a-cost"),
    ],
)
def test_a_pod_that_may_never_migrate_fails_its_job_at_arbitration(
    store: Store, clock: Clock, annotations: dict[str, str], phase: str
) -> None:
    pod = store.create(ready(make_pod("web-0", annotations=annotations)))
    store.apply_many([make_node("node-a"), make_node("node-b")])
    store.create(pmj("move", pod))
    step(store, clock, MigrationController())
    job = get_job(store)
    assert job.status.phase == phase
    if phase == FAILED:
        message = (
            'Pod "default/web-0" is forbidden to migrate because it does not meet the requirements'
        )
        assert (job.status.reason, job.status.message) == ("ForbiddenMigratePod", message)
        assert reservations(store) == []
        [event] = events(store)
        assert (event.type, event.reason, event.message) == (
            "Warning",
            "ForbiddenMigratePod",
            message,
        )


def test_the_reservation_is_scheduled_then_the_pod_evicted_and_the_replacement_awaited(
    store: Store, clock: Clock
) -> None:
    pod = ready(make_pod("web-0", node="node-a", cpu=1000))
    store.apply_many([make_node("node-a"), make_node("node-b"), pod])
    store.create(pmj("move", pod))
    loop = MigrationController()
    step(store, clock, loop)
    [reservation] = reservations(store)
    # The scheduler places it on node-b.
    available = replace(
        reservation,
        status=replace(reservation.status, phase="Available", node_name="node-b"),
    )
    store.update(available)
    step(store, clock, loop)
    job = get_job(store)
    assert (job.status.phase, job.status.status) == (RUNNING, "Eviction")
    assert (job.status.reason, job.status.node_name) == ("Evicting", "node-b")
    assert not store.exists(store.registry.for_type(Pod), "web-0")
    step(store, clock, loop)  # the pod is gone: the eviction is complete
    job = get_job(store)
    assert (job.status.status, job.status.reason) == (
        "PodBoundReservation",
        "WaitForPodBindReservation",
    )
    # The replacement binds into it but is not Ready yet, then is.
    allocated = f'{{"name":"{reservation.metadata.name}","uid":"{reservation.metadata.uid}"}}'
    new = ready(
        make_pod(
            "web-1",
            node="node-b",
            cpu=1000,
            annotations={k.ANNOTATION_RESERVATION_ALLOCATED: allocated},
        ),
        is_ready=False,
    )
    store.create(new)
    step(store, clock, loop)
    assert get_job(store).status.reason == "WaitForBoundPodReady"
    store.update(ready(store.get(store.registry.for_type(Pod), "web-1")))  # type: ignore[arg-type]
    step(store, clock, loop)
    job = get_job(store)
    assert job.status.phase == SUCCEEDED
    assert job.status.pod_ref is not None
    assert job.status.pod_ref.name == "web-1"


@pytest.mark.parametrize(
    ("reservation_status", "phase", "reason"),
    [
        pytest.param(
            {
                "phase": "Pending",
                "conditions": (
                    Condition(
                        type="Scheduled",
                        status="False",
                        reason="Unschedulable",
                        message="0/2 nodes are available",
                    ),
                ),
            },
            RUNNING,
            "Unschedulable",
            id="unschedulable-waits",
        ),
        pytest.param(
            {
                "phase": "Failed",
                "conditions": (
                    Condition(type="Ready", status="False", reason="Expired", message="expired"),
                ),
            },
            FAILED,
            "ReservationExpired",
            id="expired",
        ),
    ],
)
def test_a_reservation_that_cannot_be_placed_holds_the_job_and_an_expired_one_fails_it(
    store: Store, clock: Clock, reservation_status: dict[str, object], phase: str, reason: str
) -> None:
    pod = ready(make_pod("web-0", node="node-a"))
    store.apply_many([make_node("node-a"), pod])
    store.create(pmj("move", pod))
    loop = MigrationController()
    step(store, clock, loop)
    [reservation] = reservations(store)
    store.update(replace(reservation, status=replace(reservation.status, **reservation_status)))
    step(store, clock, loop)
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (phase, reason)
    assert len(reservations(store)) == (1 if phase == RUNNING else 0)
    assert store.exists(store.registry.for_type(Pod), "web-0")


@pytest.mark.parametrize(
    ("existing", "phase", "reason"),
    [
        pytest.param(True, RUNNING, "Evicting", id="given-and-available"),
        pytest.param(False, FAILED, "MissingReservation", id="given-but-missing"),
    ],
)
def test_a_reservation_named_in_the_job_is_used_instead_of_a_new_one(
    store: Store, clock: Clock, existing: bool, phase: str, reason: str
) -> None:
    pod = store.create(ready(make_pod("web-0", node="node-a")))
    store.apply_many([make_node("node-a"), make_node("node-b")])
    if existing:
        made = reservation_for(pmj("other", pod), pod, timedelta(minutes=5), T0)
        made = replace(made, metadata=replace(made.metadata, name="mine"))
        made = store.create(made)
        store.update(
            replace(made, status=replace(made.status, phase="Available", node_name="node-b"))
        )
    job = pmj("move", pod)
    options = PodMigrationReservationOptions(reservation_ref=ObjectReference(name="mine"))
    store.create(replace(job, spec=replace(job.spec, reservation_options=options)))
    step(store, clock, MigrationController())
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (phase, reason)
    assert [r.metadata.name for r in reservations(store)] == (["mine"] if existing else [])
    assert store.exists(store.registry.for_type(Pod), "web-0") is not existing


def test_max_migrating_per_node_holds_the_third_job_until_one_ends(
    store: Store, clock: Clock
) -> None:
    pods = [ready(make_pod(f"p{i}", node="node-a", owner=replicaset(f"rs{i}"))) for i in range(3)]
    store.apply_many([make_node("node-a"), *pods])
    for i, pod in enumerate(pods):
        store.create(pmj(f"m{i}", pod, created=T0 + timedelta(seconds=i)))
    loop = MigrationController()
    step(store, clock, loop)
    assert [get_job(store, f"m{i}").status.phase for i in range(3)] == [RUNNING, RUNNING, ""]
    # The first one's reservation expires: it fails, and the third may go.
    first = next(
        r for r in reservations(store) if r.metadata.name == get_job(store, "m0").metadata.uid
    )
    store.update(
        replace(
            first,
            status=replace(
                first.status,
                phase="Failed",
                conditions=(Condition(type="Ready", status="False", reason="Expired"),),
            ),
        )
    )
    step(store, clock, loop)
    step(store, clock, loop)
    assert [get_job(store, f"m{i}").status.phase for i in range(3)] == [FAILED, RUNNING, RUNNING]


# --- answers that arrive passes late --------------------------------------------------------------


class _Recording(DelayedStore):
    """The delayed store, keeping every write the loops send (its answers ``results_after``
    of their snapshots late)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[Write] = []

    def write(self, writes: Sequence[Write]) -> Pending:
        self.sent.extend(writes)
        return super().write(writes)

    def count(self, verb: Verb, kind: type[Object], name: str = "") -> int:
        return sum(
            1
            for w in self.sent
            if w.verb is verb
            and (w.kind.type if w.kind is not None else type(w.obj)) is kind
            and (not name or w.name == name or (w.obj is not None and w.obj.metadata.name == name))
        )


def test_late_answers_make_one_reservation_and_one_eviction(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Passes that run while the answers to the loop's writes are three passes late (and its
    writes two passes from its snapshots) neither create a second reservation nor evict twice:
    the PMJ waits on its reservation's answer, then on its own write's, before its next step."""
    mark_loops(monkeypatch)
    with _Recording(clock=clock, results_after=3) as store:
        pod = ready(make_pod("web-0", node="node-a", cpu=1000))
        store.apply_many([make_node("node-a"), make_node("node-b"), pod])
        store.create(pmj("move", pod))
        loop = MigrationController()
        ctx = LoopContext(store=store, now=clock)
        for _ in range(30):
            loop.reconcile(ctx)
            for reservation in reservations(store):
                if not reservation.status.node_name:  # the scheduler places it
                    status = replace(reservation.status, phase="Available", node_name="node-b")
                    store.update(replace(reservation, status=status))
            clock.now += timedelta(seconds=1)
        answered(store, loop)
        assert store.late > 0
        job = get_job(store)
        assert (job.status.phase, job.status.reason) == (RUNNING, "WaitForPodBindReservation")
        [reservation] = reservations(store)
        options = job.spec.reservation_options
        assert options is not None
        assert options.reservation_ref is not None
        assert options.reservation_ref.uid == reservation.metadata.uid
        assert store.count(Verb.CREATE, Reservation) == 1
        assert store.count(Verb.EVICT, Pod, "web-0") == 1
        assert not store.exists(store.registry.for_type(Pod), "web-0")
        assert [e.reason for e in events(store)].count("Evicted") == 1
        assert [e.reason for e in events(store)].count("ReservationCreated") == 1


def test_late_answers_keep_a_held_job_counted_against_the_limits(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PMJ whose writes are not answered yet counts as its step wrote it: the third PMJ of a
    node (maxMigratingPerNode 2) stays Pending however late the answers are."""
    mark_loops(monkeypatch)
    with _Recording(clock=clock, results_after=3) as store:
        pods = [
            ready(make_pod(f"p{i}", node="node-a", owner=replicaset(f"rs{i}"))) for i in range(3)
        ]
        store.apply_many([make_node("node-a"), *pods])
        for i, pod in enumerate(pods):
            store.create(pmj(f"m{i}", pod, created=T0 + timedelta(seconds=i)))
        loop = MigrationController()
        ctx = LoopContext(store=store, now=clock)
        for _ in range(10):
            loop.reconcile(ctx)
            phases = [get_job(store, f"m{i}").status.phase for i in range(3)]
            assert phases.count(RUNNING) <= 2
            assert len(reservations(store)) <= 2
        answered(store, loop)
        assert [get_job(store, f"m{i}").status.phase for i in range(3)] == [RUNNING, RUNNING, ""]
        assert store.count(Verb.CREATE, Reservation) == 2


# --- pure pieces ----------------------------------------------------------------------------------


def _pods_on(node: str, count: int, owner: str = "", ready_: bool = True) -> list[Pod]:
    return [
        ready(
            make_pod(
                f"{owner or node}-{i}",
                node=node,
                owner=replicaset(owner) if owner else replicaset(f"{node}-rs{i}"),
            ),
            ready_,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("pods", "jobs", "limits", "admitted", "waiting"),
    [
        pytest.param(
            _pods_on("a", 3),
            [("a-0", ""), ("a-1", ""), ("a-2", "")],
            Limits(),
            ["a-0", "a-1"],
            {"a-2": "maxMigratingPerNode"},
            id="per-node-default-2",
        ),
        pytest.param(
            _pods_on("a", 3),
            [("a-0", RUNNING), ("a-1", ""), ("a-2", "")],
            Limits(),
            ["a-1"],
            {"a-2": "maxMigratingPerNode"},
            id="running-jobs-count",
        ),
        pytest.param(
            _pods_on("a", 3),
            [("a-0", ""), ("a-1", ""), ("a-2", "")],
            Limits(max_migrating_per_node=0),
            ["a-0", "a-1", "a-2"],
            {},
            id="per-node-0-is-no-limit",
        ),
        pytest.param(
            _pods_on("a", 2) + _pods_on("b", 2),
            [("a-0", ""), ("b-0", ""), ("a-1", ""), ("b-1", "")],
            Limits(max_migrating_globally=3),
            ["a-0", "b-0", "a-1"],
            {"b-1": "maxMigratingGlobally"},
            id="globally",
        ),
        pytest.param(
            _pods_on("a", 2) + _pods_on("b", 2),
            [("a-0", ""), ("b-0", "")],
            Limits(max_migrating_per_namespace=1),
            ["a-0"],
            {"b-0": "maxMigratingPerNamespace"},
            id="per-namespace",
        ),
        pytest.param(
            _pods_on("a", 4, owner="web"),
            [("web-0", ""), ("web-1", ""), ("web-2", "")],
            Limits(max_migrating_per_node=None),
            ["web-0", "web-1"],
            {"web-2": "maxMigratingPerWorkload"},
            id="per-workload-default-2-of-4",
        ),
        pytest.param(
            _pods_on("a", 3, owner="web"),
            [("web-0", ""), ("web-1", "")],
            Limits(),
            ["web-0"],
            {"web-1": "maxMigratingPerWorkload"},
            id="per-workload-default-1-of-3",
        ),
        pytest.param(
            _pods_on("a", 4, owner="web"),
            [("web-0", ""), ("web-1", "")],
            Limits(max_migrating_per_workload="50%", max_unavailable_per_workload=1),
            ["web-0"],
            {"web-1": "maxUnavailablePerWorkload"},
            id="max-unavailable",
        ),
    ],
)
def test_arbitration_limits(
    pods: list[Pod],
    jobs: list[tuple[str, str]],
    limits: Limits,
    admitted: list[str],
    waiting: dict[str, str],
) -> None:
    by_name = {p.metadata.name: p for p in pods}
    pmjs = [
        pmj(name, by_name[name], phase=phase, created=T0 + timedelta(seconds=i))
        for i, (name, phase) in enumerate(jobs)
    ]
    world = World.of(pods, ())
    result = arbitrate(pmjs, world, limits, T0)
    assert [j.spec.pod_ref.name for j in result.admitted] == admitted
    assert all(j.status.phase == RUNNING for j in result.admitted)
    assert all(
        j.spec.pod_ref.uid == by_name[j.spec.pod_ref.name].metadata.uid for j in result.admitted
    )
    assert dict(result.waiting) == waiting


def test_arbitration_order_puts_fewer_migrating_then_workloads_then_importance_then_age() -> None:
    def one(name: str, owner: str, priority: int) -> Pod:
        return ready(make_pod(name, node="a", owner=replicaset(owner), priority=priority))

    # web-old is the oldest job but its pod is the most important; api-low the least.
    pods = [
        one("web-old", "web", 5000),
        one("api-low", "api", 0),
        one("web-low", "web", 0),
        one("api-mid", "api", 100),
        one("db-0", "db", 0),
    ]
    by_name = {p.metadata.name: p for p in pods}
    created = {"web-old": 0, "api-low": 5, "web-low": 3, "api-mid": 1, "db-0": 9}
    jobs = [
        pmj(name, by_name[name], created=T0 + timedelta(seconds=created[name]))
        for name in ("db-0", "web-low", "api-mid", "api-low", "web-old")
    ]
    gone = pmj("gone", make_pod("gone", node="a"), created=T0 + timedelta(seconds=7))
    world = World.of(pods, ())

    def order(migrating: dict[str, int]) -> list[str]:
        return [j.metadata.name for j in arbitration_order([*jobs, gone], world, migrating, T0)]

    # by importance: web-low (3 s), api-low (5 s), db-0 (9 s), api-mid, web-old; then each
    # workload together where its first job stood; a job without its pod first (it only fails)
    assert order({}) == ["gone", "web-low", "web-old", "api-low", "api-mid", "db-0"]
    # web has a pod migrating already: its jobs go after the others
    web = replicaset("web").uid
    assert order({web: 1}) == ["gone", "api-low", "api-mid", "db-0", "web-low", "web-old"]
    # arbitration takes them in that order: one slot globally goes to web-low (the least
    # important pod of the first workload), not to web-old (the oldest job)
    result = arbitrate(jobs, world, Limits(max_migrating_globally=1), T0)
    assert [j.metadata.name for j in result.admitted] == ["web-low"]
    running = pmj("web-moving", one("web-moving", "web", 0), phase=RUNNING)
    result = arbitrate(
        [*jobs, running],
        World.of([*pods, one("web-moving", "web", 0)], ()),
        Limits(max_migrating_globally=2, max_migrating_per_node=None),
        T0,
    )
    assert [j.metadata.name for j in result.admitted] == ["api-low"]


def test_an_unready_sibling_counts_as_unavailable() -> None:
    pods = _pods_on("a", 3, owner="web")
    pods[2] = ready(pods[2], is_ready=False)
    world = World.of(pods, ())
    result = arbitrate([pmj("m", pods[0])], world, Limits(), T0)
    assert result.admitted == []
    assert dict(result.waiting) == {"m": "maxUnavailablePerWorkload"}


def test_limits_come_from_the_migration_controller_args() -> None:
    args = MigrationControllerArgs(
        max_migrating_per_node=1,
        max_unavailable_per_workload="20%",
        default_job_mode=MODE_EVICT_DIRECTLY,
        default_job_ttl=Duration.parse("90s"),
        evict_qps="2.5",
        evict_burst=3,
        object_limiters={"namespace": ObjectLimiter(duration=Duration.parse("1m"), burst=2)},
        eviction_policy="SoftEviction",
        default_delete_options=DeleteOptions(grace_period_seconds=30),
    )
    assert Limits.of(args) == Limits(
        max_migrating_per_node=1,
        max_unavailable_per_workload="20%",
        default_job_mode=MODE_EVICT_DIRECTLY,
        default_job_ttl=timedelta(seconds=90),
        evict_qps=2.5,
        evict_burst=3,
        object_limiters=(ObjectRate("namespace", timedelta(minutes=1), burst=2),),
        eviction_policy="SoftEviction",
        default_delete_options=DeleteOptions(grace_period_seconds=30),
    )
    # The defaults of both agree: 10 evictions a second, burst 1, a workload limiter.
    assert Limits.of(MigrationControllerArgs()) == Limits()
    assert Limits.of(MigrationControllerArgs(object_limiters={})).object_limiters == ()


@pytest.mark.parametrize(
    ("value", "replicas", "limit"),
    [
        (None, 1, 1),
        (None, 3, 1),
        (None, 4, 2),
        (None, 10, 2),
        (None, 11, 1),
        (None, 30, 3),
        ("50%", 4, 2),
        ("0%", 5, 1),  # never below 1
        (5, 3, 3),  # never above the replicas
        (2, 10, 2),
    ],
)
def test_workload_limit(value: int | str | None, replicas: int, limit: int) -> None:
    assert workload_limit(value, replicas) == limit


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_migrating_per_node": -1}, "maxMigratingPerNode"),
        ({"max_migrating_globally": -3}, "maxMigratingGlobally"),
        ({"max_unavailable_per_workload": "ten"}, "maxUnavailablePerWorkload"),
        ({"max_migrating_per_workload": "10"}, "maxMigratingPerWorkload"),
        ({"default_job_mode": "Sometimes"}, "defaultJobMode"),
        ({"default_job_ttl": timedelta(seconds=-1)}, "defaultJobTTL"),
        ({"evict_qps": -1.0}, "evictQPS"),
        ({"evict_qps": 5.0, "evict_burst": 0}, "evictBurst"),
        ({"eviction_policy": "Evict"}, "evictionPolicy"),
        (
            {"default_delete_options": DeleteOptions(grace_period_seconds=-1)},
            "defaultDeleteOptions.gracePeriodSeconds",
        ),
        (
            {"object_limiters": (ObjectRate("workload"), ObjectRate("workload"))},
            "objectLimiters",
        ),
    ],
)
def test_bad_limits_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Limits(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("owned", [True, False], ids=["controller", "bare-pod"])
def test_the_reservation_made_from_a_pod(owned: bool, shared_dir: Path) -> None:
    term = NodeSelectorTerm(
        match_expressions=(NodeSelectorRequirement(key="gpu", operator="Exists"),)
    )
    pod = make_pod(
        "web-0",
        node="node-a",
        cpu=1000,
        owner=replicaset() if owned else None,
        labels={"app": "web", k.LABEL_QUOTA_NAME: "team-a", k.LABEL_SCHEDULE_ADMISSION: "true"},
        annotations={k.ANNOTATION_RESERVATION_ALLOCATED: '{"name":"old","uid":"old"}'},
    )
    pod = replace(
        pod,
        spec=replace(
            pod.spec,
            affinity=Affinity(
                node_affinity=NodeAffinity(
                    required_during_scheduling_ignored_during_execution=NodeSelector(
                        node_selector_terms=(term,)
                    )
                )
            ),
        ),
    )
    job = pmj("move", pod)
    made = reservation_for(job, pod, timedelta(minutes=5), T0)
    assert made.metadata.name == "uid-move"
    assert made.metadata.labels == {k.LABEL_RESERVATION_ORDER: str(int(T0.timestamp() * 1000))}
    spec = made.spec
    assert spec.allocate_once is True
    assert spec.ttl == Duration.parse("5m")
    template = spec.template
    assert template.spec.node_name == ""
    assert template.metadata.namespace == "default"
    assert template.metadata.labels == {"app": "web"}
    assert template.metadata.annotations == {}
    assert template.spec.affinity is not None
    assert template.spec.affinity.node_affinity is not None
    required = (
        template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    )
    assert required is not None
    [kept] = required.node_selector_terms
    assert kept.match_expressions == term.match_expressions
    assert kept.match_fields == (
        NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=("node-a",)),
    )
    [owner] = spec.owners
    if owned:
        assert owner.controller is not None
        assert owner.controller.uid == "uid-web-rs"
        assert owner.object is None
    else:
        assert owner.object == ObjectReference(
            namespace="default", name="web-0", uid=pod.metadata.uid
        )
    assert schema_errors(validator(shared_dir, RESERVATION_KEY), wire(made)) == []


def test_the_reservation_made_from_the_jobs_template(shared_dir: Path) -> None:
    pod = make_pod("web-0", node="node-a", cpu=1000, labels={"app": "web"})
    options = codec.decode_as(
        {
            "template": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"note": "bigger"}},
                "spec": {
                    "template": {
                        "metadata": {"labels": {"app": "web", "size": "large"}},
                        "spec": {
                            "containers": [
                                {"name": "main", "resources": {"requests": {"cpu": "4"}}}
                            ],
                            "nodeSelector": {"pool": "reserved"},
                        },
                    },
                    "owners": [],
                    "ttl": "2m",
                },
            }
        },
        PodMigrationReservationOptions,
    )
    job = pmj("move", pod)
    job = replace(job, spec=replace(job.spec, reservation_options=options))
    made = reservation_for(job, pod, timedelta(minutes=5), T0)
    assert made.metadata.name == "uid-move"
    assert made.metadata.labels == {
        "team": "a",
        k.LABEL_RESERVATION_ORDER: str(int(T0.timestamp() * 1000)),
    }
    assert made.metadata.annotations == {"note": "bigger"}
    spec = made.spec
    # the template's: its pod, its TTL; filled in: owners (the pod's controller), allocateOnce
    assert spec.ttl == Duration.parse("2m")
    assert spec.allocate_once is True
    [owner] = spec.owners
    assert owner.controller is not None
    assert owner.controller.uid == "uid-web-rs"
    template = spec.template
    assert template.metadata.namespace == "default"
    assert template.metadata.labels == {"app": "web", "size": "large"}
    assert template.spec.node_selector == {"pool": "reserved"}
    assert template.spec.containers[0].resources.requests.amounts == {"cpu": 4000}
    assert template.spec.priority == 0
    # still kept off the pod's node
    assert template.spec.affinity is not None
    assert template.spec.affinity.node_affinity is not None
    required = (
        template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    )
    assert required is not None
    assert [t.match_fields for t in required.node_selector_terms] == [
        (NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=("node-a",)),)
    ]
    assert schema_errors(validator(shared_dir, RESERVATION_KEY), wire(made)) == []


# --- property: arbitration never goes past a limit ------------------------------------------------

_NODES = ("a", "b", "c")
_NAMESPACES = ("ns1", "ns2")
_WORKLOADS = ("w1", "w2", "w3")


@st.composite
def _arbitration_cases(draw: st.DrawFn) -> tuple[list[Pod], list[PodMigrationJob], Limits]:
    count = draw(st.integers(min_value=1, max_value=12))
    pods: list[Pod] = []
    jobs: list[PodMigrationJob] = []
    for i in range(count):
        pod = ready(
            make_pod(
                f"p{i}",
                node=draw(st.sampled_from(_NODES)),
                namespace=draw(st.sampled_from(_NAMESPACES)),
                owner=replicaset(draw(st.sampled_from(_WORKLOADS))),
            ),
            draw(st.booleans()),
        )
        pods.append(pod)
        if draw(st.booleans()):
            phase = draw(st.sampled_from(["", RUNNING]))
            job = pmj(f"m{i}", pod, phase=phase, created=T0 + timedelta(seconds=i))
            if phase == RUNNING:
                job = replace(
                    job,
                    spec=replace(job.spec, pod_ref=replace(job.spec.pod_ref, uid=pod.metadata.uid)),
                )
            jobs.append(job)
    small = st.one_of(st.none(), st.integers(min_value=0, max_value=3))
    workload = st.one_of(
        st.none(), st.integers(min_value=1, max_value=3), st.sampled_from(["30%", "50%"])
    )
    limits = Limits(
        max_migrating_per_node=draw(small),
        max_migrating_per_namespace=draw(small),
        max_migrating_globally=draw(small),
        max_migrating_per_workload=draw(workload),
        max_unavailable_per_workload=draw(workload),
    )
    return pods, jobs, limits


def _tally(
    jobs: Sequence[PodMigrationJob], pods: dict[tuple[str, str], Pod]
) -> dict[str, Counter[str]]:
    tally: dict[str, Counter[str]] = {
        "node": Counter(),
        "namespace": Counter(),
        "global": Counter(),
        "workload": Counter(),
    }
    for job in jobs:
        pod = pods[(job.spec.pod_ref.namespace, job.spec.pod_ref.name)]
        tally["node"][pod.spec.node_name] += 1
        tally["namespace"][pod.metadata.namespace] += 1
        tally["global"]["all"] += 1
        tally["workload"][pod.metadata.owner_references[0].uid] += 1
    return tally


@settings(max_examples=150, deadline=None)
@given(case=_arbitration_cases())
def test_arbitration_never_goes_past_a_limit(
    case: tuple[list[Pod], list[PodMigrationJob], Limits],
) -> None:
    pods, jobs, limits = case
    by_key = {(p.metadata.namespace, p.metadata.name): p for p in pods}
    result = arbitrate(jobs, World.of(pods, ()), limits, T0)
    before = _tally([j for j in jobs if j.status.phase == RUNNING], by_key)
    after = _tally([*(j for j in jobs if j.status.phase == RUNNING), *result.admitted], by_key)
    fixed = {
        "node": limits.max_migrating_per_node,
        "namespace": limits.max_migrating_per_namespace,
        "global": limits.max_migrating_globally,
    }
    for scope, limit in fixed.items():
        if not limit:
            continue
        for key, count in after[scope].items():
            # Jobs already Running may be over a lowered limit; arbitration never adds to that.
            assert count <= max(limit, before[scope][key])
    replicas = Counter(p.metadata.owner_references[0].uid for p in pods)
    for uid, count in after["workload"].items():
        limit = workload_limit(limits.max_migrating_per_workload, replicas[uid])
        assert count <= max(limit, before["workload"][uid])
    # Every Pending job is either admitted or told which limit holds it.
    pending = {j.metadata.name for j in jobs if j.status.phase != RUNNING}
    assert pending == {j.metadata.name for j in result.admitted} | set(result.waiting)


# --- evictQPS / evictBurst, objectLimiters, evictionPolicy, deleteOptions -----------------------


def _direct(name: str, pod: Pod, **spec: object) -> PodMigrationJob:
    job = pmj(name, pod, mode=MODE_EVICT_DIRECTLY)
    return replace(job, spec=replace(job.spec, **spec))


def _pod_gone(store: Store, name: str, namespace: str = "default") -> bool:
    return not store.exists(store.registry.for_type(Pod), name, namespace)


def events(store: Store) -> list[Event]:
    return [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]


@pytest.mark.parametrize(
    ("qps", "burst", "per_pass", "gap"),
    [
        pytest.param(10.0, 1, [1, 1, 1], 0.1, id="defaults"),
        pytest.param(1.0, 2, [2, 1], 1.0, id="burst-2"),
        pytest.param(0.0, 1, [3], None, id="qps-0-no-limit"),
    ],
)
def test_evictions_wait_for_a_token_and_the_loop_wakes_when_it_is_due(
    store: Store,
    clock: Clock,
    qps: float,
    burst: int,
    per_pass: list[int],
    gap: float | None,
) -> None:
    pods = [
        store.create(ready(make_pod(f"p{i}", node=f"node-{i}", owner=replicaset(f"rs{i}"))))
        for i in range(3)
    ]
    for i, pod in enumerate(pods):
        store.create(_direct(f"m{i}", pod))
    loop = MigrationController(Limits(evict_qps=qps, evict_burst=burst))
    evicted: list[int] = []
    for _ in per_pass:
        before = sum(_pod_gone(store, p.metadata.name) for p in pods)
        wait = step(store, clock, loop)
        evicted.append(sum(_pod_gone(store, p.metadata.name) for p in pods) - before)
        held = [
            get_job(store, f"m{i}")
            for i, p in enumerate(pods)
            if not _pod_gone(store, p.metadata.name)
        ]
        assert all((j.status.phase, j.status.reason) == (RUNNING, "TooManyEvictions") for j in held)
        if held:
            assert gap is not None
            assert wait is not None
            assert wait == pytest.approx(gap, abs=1e-3)  # the next token, not the TTL
            clock.now += timedelta(seconds=wait)
    assert evicted == per_pass
    step(store, clock, loop)  # every pod gone: every eviction complete
    assert all(get_job(store, f"m{i}").status.phase == SUCCEEDED for i in range(3))


def test_a_reservation_first_eviction_waits_for_a_token(store: Store, clock: Clock) -> None:
    pods = [
        store.create(ready(make_pod(f"p{i}", node="node-a", owner=replicaset(f"rs{i}"))))
        for i in range(2)
    ]
    for i, pod in enumerate(pods):
        store.create(pmj(f"m{i}", pod, created=T0 + timedelta(seconds=i)))
    loop = MigrationController(Limits(evict_qps=0.5))
    step(store, clock, loop)
    for reservation in reservations(store):
        store.update(
            replace(
                reservation,
                status=replace(reservation.status, phase="Available", node_name="node-b"),
            )
        )
    wait = step(store, clock, loop)
    assert [_pod_gone(store, p.metadata.name) for p in pods] == [True, False]
    second = get_job(store, "m1")
    assert (second.status.phase, second.status.reason) == (RUNNING, "TooManyEvictions")
    assert {c.type: c.status for c in second.status.conditions}["ReservationScheduled"] == "True"
    assert wait == pytest.approx(2.0, abs=1e-3)
    clock.now += timedelta(seconds=2)
    step(store, clock, loop)
    assert _pod_gone(store, "p1")
    step(store, clock, loop)
    assert get_job(store, "m1").status.reason == "WaitForPodBindReservation"


def test_on_the_simulated_clock_evictions_follow_the_rate() -> None:
    """``koordpy simulate`` wakes the loop when each token is due: one eviction every 2 s."""
    pods = [ready(make_pod(f"p{i}", node=f"node-{i}", owner=None)) for i in range(3)]
    jobs = [_direct(f"m{i}", pod) for i, pod in enumerate(pods)]
    result = simulate(
        [*pods, *jobs],
        loops={"migration": lambda: MigrationController(Limits(evict_qps=0.5))},
        max_time=timedelta(minutes=4),
    )
    objects = list(result.objects)
    done = [j for j in by_kind(objects, PodMigrationJob) if isinstance(j, PodMigrationJob)]
    assert [j.status.phase for j in done] == [SUCCEEDED] * 3
    assert by_kind(objects, Pod) == []
    stamps = sorted(
        e.first_timestamp
        for e in by_kind(objects, Event)
        if isinstance(e, Event) and e.reason == "Evicted" and e.first_timestamp is not None
    )
    assert [s - stamps[0] for s in stamps] == [timedelta(seconds=t) for t in (0, 2, 4)]


@pytest.mark.parametrize(
    ("limits", "first_pass", "wait", "second_pass"),
    [
        pytest.param(
            Limits(max_migrating_per_node=0, max_migrating_per_workload=2),
            [RUNNING, ""],
            150.0,  # 2 per 5 minutes, burst 1: the next token in 150 s
            [RUNNING, RUNNING],
            id="default-workload-limiter",
        ),
        pytest.param(
            Limits(
                max_migrating_per_node=0,
                max_migrating_per_workload=2,
                object_limiters=(ObjectRate("workload", timedelta(minutes=1), 1, 2),),
            ),
            [RUNNING, RUNNING],
            None,
            [RUNNING, RUNNING],
            id="burst-2",
        ),
        pytest.param(
            Limits(
                max_migrating_per_node=0,
                max_migrating_per_workload=2,
                object_limiters=(ObjectRate("namespace", timedelta(seconds=40), 1),),
            ),
            [RUNNING, ""],
            40.0,
            [RUNNING, RUNNING],
            id="namespace",
        ),
        pytest.param(
            Limits(max_migrating_per_node=0, max_migrating_per_workload=2, object_limiters=()),
            [RUNNING, RUNNING],
            None,
            [RUNNING, RUNNING],
            id="off",
        ),
    ],
)
def test_object_limiters_hold_a_job_pending_until_a_token_is_due(
    store: Store,
    clock: Clock,
    limits: Limits,
    first_pass: list[str],
    wait: float | None,
    second_pass: list[str],
) -> None:
    pods = [store.create(p) for p in _pods_on("node-a", 4, owner="web")]
    for i in range(2):
        store.create(pmj(f"m{i}", pods[i], created=T0 + timedelta(seconds=i)))
    loop = MigrationController(limits)
    asked = step(store, clock, loop)
    assert [get_job(store, f"m{i}").status.phase for i in range(2)] == first_pass
    if wait is None:
        return
    assert asked == pytest.approx(wait, abs=1e-3)
    clock.now += timedelta(seconds=wait)
    step(store, clock, loop)
    assert [get_job(store, f"m{i}").status.phase for i in range(2)] == second_pass


@pytest.mark.parametrize(
    ("policy", "label", "delete_options", "gone", "event", "message"),
    [
        pytest.param(
            "Eviction",
            None,
            None,
            True,
            ("Warning", "Evicted"),
            f"evicted by PodMigrationJob move (LowNodeLoad): {REASON}",
            id="eviction",
        ),
        pytest.param(
            "Delete",
            None,
            None,
            True,
            ("Warning", "Evicted"),
            f"deleted by PodMigrationJob move (LowNodeLoad): {REASON}",
            id="delete",
        ),
        pytest.param(
            "Eviction",
            "Delete",
            DeleteOptions(grace_period_seconds=30),
            True,
            ("Warning", "Evicted"),
            f"deleted by PodMigrationJob move (LowNodeLoad): {REASON}; grace period 30s",
            id="label-and-grace-period",
        ),
        pytest.param(
            "Eviction",
            "SoftEviction",
            None,
            False,
            ("Warning", "Evicted"),
            f"marked for soft eviction by PodMigrationJob move (LowNodeLoad): {REASON}",
            id="soft-eviction-label",
        ),
        pytest.param(
            "Delete",
            None,
            DeleteOptions(dry_run=("All",)),
            False,
            ("Normal", "EvictionProposed"),
            f"eviction proposed by PodMigrationJob move (LowNodeLoad) (dry run): {REASON}",
            id="dry-run-all",
        ),
    ],
)
def test_the_eviction_policy_and_delete_options(
    store: Store,
    clock: Clock,
    policy: str,
    label: str | None,
    delete_options: DeleteOptions | None,
    gone: bool,
    event: tuple[str, str],
    message: str,
) -> None:
    labels = {k.LABEL_EVICT_POLICY: label} if label is not None else None
    pod = store.create(ready(make_pod("web-0", owner=replicaset("rs0"), labels=labels)))
    store.create(_direct("move", pod, delete_options=delete_options))
    loop = MigrationController(Limits(eviction_policy=policy))
    step(store, clock, loop)
    step(store, clock, loop)
    # Done once the pod is gone (or at once for a dry run); a soft-evicted pod is waited for.
    soft = label == "SoftEviction"
    assert get_job(store).status.phase == (RUNNING if soft else SUCCEEDED)
    assert _pod_gone(store, "web-0") is gone
    [recorded] = [e for e in events(store) if e.involved_object.kind == "Pod"]
    assert ((recorded.type, recorded.reason), recorded.message) == (event, message)
    if not gone:
        kept = store.get(store.registry.for_type(Pod), "web-0")
        soft = label == "SoftEviction"
        assert (ANNOTATION_SOFT_EVICTION in kept.metadata.annotations) is soft


def test_a_soft_evicted_pod_is_left_to_its_owner(store: Store, clock: Clock) -> None:
    """ReservationFirst with SoftEviction: the pod is marked, not deleted, and the job waits
    for the replacement its owner brings."""
    pod = store.create(ready(make_pod("web-0", owner=replicaset("rs0"))))
    store.create(pmj("move", pod))
    limits = Limits(
        eviction_policy="SoftEviction", default_delete_options=DeleteOptions(grace_period_seconds=9)
    )
    loop = MigrationController(limits)
    step(store, clock, loop)
    [reservation] = reservations(store)
    store.update(
        replace(
            reservation, status=replace(reservation.status, phase="Available", node_name="node-b")
        )
    )
    step(store, clock, loop)
    step(store, clock, loop)  # marked once: nothing more is written
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (RUNNING, "Evicting")
    kept = store.get(store.registry.for_type(Pod), "web-0")
    mark = json.loads(kept.metadata.annotations[ANNOTATION_SOFT_EVICTION])
    assert mark["initiator"] == "PodMigrationJob move (LowNodeLoad)"
    assert mark["reason"] == REASON
    assert mark["deleteOptions"] == {"gracePeriodSeconds": 9}
    assert [e.count for e in events(store) if e.reason == "Evicted"] == [1]
    # The owner deletes it: the eviction is complete, the job waits for the replacement.
    store.delete(store.registry.for_type(Pod), "web-0", "default")
    step(store, clock, loop)
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (RUNNING, "WaitForPodBindReservation")


@pytest.mark.parametrize(
    ("label", "delete_options", "field"),
    [
        pytest.param("Evict", None, "pod label koordinator.sh/evict-policy", id="label"),
        pytest.param(
            None,
            DeleteOptions(grace_period_seconds=-1),
            "spec.deleteOptions.gracePeriodSeconds",
            id="grace-period",
        ),
    ],
)
def test_a_bad_policy_or_delete_option_fails_the_job_before_it_reserves(
    store: Store, clock: Clock, label: str | None, delete_options: DeleteOptions | None, field: str
) -> None:
    labels = {k.LABEL_EVICT_POLICY: label} if label is not None else None
    pod = store.create(ready(make_pod("web-0", owner=replicaset("rs0"), labels=labels)))
    job = pmj("move", pod)
    store.create(replace(job, spec=replace(job.spec, delete_options=delete_options)))
    step(store, clock, MigrationController())
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (FAILED, "FailedEvict")
    assert job.status.message.startswith(field)
    assert reservations(store) == []
    assert not _pod_gone(store, "web-0")


def test_a_stale_resource_version_precondition_keeps_the_job_trying(
    store: Store, clock: Clock
) -> None:
    pod = store.create(ready(make_pod("web-0", owner=replicaset("rs0"))))
    options = DeleteOptions(preconditions=Preconditions(resource_version="12345"))
    store.create(_direct("move", pod, delete_options=options))
    loop = MigrationController()
    wait = step(store, clock, loop)
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (RUNNING, "FailedEvict")
    assert not _pod_gone(store, "web-0")
    if not isinstance(store, DelayedStore):
        assert wait == 1.0  # tried again
    # Over the delayed backend the refusal is answered after the pass that evicted: the pass
    # after it asks to run again (and is refused again).
    clock.now += timedelta(seconds=1)
    assert step(store, clock, loop) == 1.0
    job = get_job(store)
    assert (job.status.phase, job.status.reason) == (RUNNING, "FailedEvict")
    assert not _pod_gone(store, "web-0")


MIGRATION_ONLY = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
profiles:
  - name: p
    pluginConfig:
      - name: MigrationController
        args:
          evictionPolicy: Delete
          evictQPS: "0.5"
          objectLimiters: {}
"""


def test_the_policy_and_rates_come_from_the_descheduler_configuration(
    store: Store, clock: Clock
) -> None:
    store.create(
        ConfigMap(
            metadata=ObjectMeta(
                name=k.DESCHEDULER_CONFIG_NAME, namespace=k.DESCHEDULER_CONFIG_NAMESPACE
            ),
            data={k.DESCHEDULER_CONFIG_KEY: MIGRATION_ONLY},
        )
    )
    pods = [
        store.create(ready(make_pod(f"p{i}", node=f"node-{i}", owner=replicaset(f"rs{i}"))))
        for i in range(2)
    ]
    for i, pod in enumerate(pods):
        store.create(_direct(f"m{i}", pod))
    loop = MigrationController()
    wait = step(store, clock, loop)
    assert loop.limits.eviction_policy == "Delete"
    assert [_pod_gone(store, p.metadata.name) for p in pods] == [True, False]
    assert wait == pytest.approx(2.0, abs=1e-3)
    pod_events = [e for e in events(store) if e.involved_object.kind == "Pod"]
    assert [e.message.split(" by ")[0] for e in pod_events] == ["deleted"]


def test_args_the_loop_cannot_use_keep_the_limits_in_force(store: Store, clock: Clock) -> None:
    bad = MIGRATION_ONLY + "          defaultDeleteOptions: {gracePeriodSeconds: -1}\n"
    store.create(
        ConfigMap(
            metadata=ObjectMeta(
                name=k.DESCHEDULER_CONFIG_NAME, namespace=k.DESCHEDULER_CONFIG_NAMESPACE
            ),
            data={k.DESCHEDULER_CONFIG_KEY: bad},
        )
    )
    pod = store.create(ready(make_pod("web-0", owner=replicaset("rs0"))))
    store.create(_direct("move", pod))
    loop = MigrationController()
    step(store, clock, loop)
    assert loop.limits == Limits()
    # The configuration itself is refused, naming the field (the descheduler loop reports it).
    with pytest.raises((DeschedulerConfigError, ValueError), match="defaultDeleteOptions"):
        load_configuration(bad)


def test_an_eviction_waits_for_a_token_the_descheduler_took(store: Store, clock: Clock) -> None:
    # One evictQPS bucket for both loops: the descheduler's direct eviction took the token.
    pod = store.create(ready(make_pod("web-0", owner=replicaset("rs0"))))
    store.create(_direct("move", pod))
    loop = MigrationController(Limits(evict_qps=0.5))
    buckets = EvictionBuckets()
    loop.share_evictions(buckets)
    shared = buckets.get(0.5, 1)
    assert shared is not None
    assert shared.take(clock.now)
    wait = step(store, clock, loop)
    assert not _pod_gone(store, "web-0")
    assert (get_job(store).status.phase, get_job(store).status.reason) == (
        RUNNING,
        "TooManyEvictions",
    )
    assert wait == pytest.approx(2.0, abs=1e-3)
    clock.now += timedelta(seconds=2)
    step(store, clock, loop)
    assert _pod_gone(store, "web-0")
