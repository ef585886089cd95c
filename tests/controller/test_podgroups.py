"""A PodGroup's status as the Coscheduling PodGroup controller writes it (controller/podgroups)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from apis import codec
from apis import constants as k
from apis.core import Pod, PodSpec, PodStatus
from apis.gang import PodGroup, PodGroupSpec, PodGroupStatus
from apis.meta import ObjectMeta, OwnerReference
from controller.loops import LOOPS, LoopContext
from controller.podgroups import (
    FAILED,
    FINISHED,
    PENDING,
    PRE_SCHEDULING,
    RUNNING,
    SCHEDULED,
    SCHEDULING,
    PodGroupStatusLoop,
    members_by_group,
    pod_group_status,
)
from controller.store.sqlite import Store
from tests.crdschema import schema_errors, validator

replace = msgspec.structs.replace
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NS = "team"


def group(min_member: int = 2, status: PodGroupStatus | None = None) -> PodGroup:
    return PodGroup(
        metadata=ObjectMeta(name="gang", namespace=NS, creation_timestamp=T0),
        spec=PodGroupSpec(min_member=min_member, schedule_timeout_seconds=100),
        status=status or PodGroupStatus(),
    )


def member(name: str, *, node: str = "", phase: str = "Pending", owner: str = "") -> Pod:
    owners = (
        (OwnerReference(api_version="batch/v1", kind="Job", name=owner, uid=f"uid-{owner}"),)
        if owner
        else ()
    )
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=NS,
            labels={k.LABEL_POD_GROUP: "gang"},
            owner_references=owners,
            creation_timestamp=T0,
        ),
        spec=PodSpec(node_name=node),
        status=PodStatus(phase=phase),
    )


@pytest.mark.parametrize(
    ("pods", "phase", "counts"),
    [
        pytest.param([], PENDING, (0, 0, 0, 0), id="no-members"),
        pytest.param([member("a")], PENDING, (0, 0, 0, 0), id="short-of-min-member"),
        pytest.param([member("a"), member("b")], PRE_SCHEDULING, (0, 0, 0, 0), id="all-created"),
        pytest.param(
            [member("a", node="n"), member("b")], SCHEDULING, (1, 0, 0, 0), id="one-bound"
        ),
        pytest.param(
            [member("a", node="n"), member("b", node="n")],
            SCHEDULED,
            (2, 0, 0, 0),
            id="all-bound",
        ),
        pytest.param(
            [member("a", node="n", phase="Running"), member("b", node="n", phase="Running")],
            RUNNING,
            (2, 2, 0, 0),
            id="running",
        ),
        pytest.param(
            [member("a", node="n", phase="Succeeded"), member("b", node="n", phase="Succeeded")],
            FINISHED,
            (2, 0, 2, 0),
            id="finished",
        ),
        pytest.param(
            [member("a", node="n", phase="Failed"), member("b", node="n", phase="Running")],
            FAILED,
            (2, 1, 0, 1),
            id="failed",
        ),
    ],
)
def test_the_phase_and_counts_follow_the_members(
    pods: list[Pod], phase: str, counts: tuple[int, int, int, int]
) -> None:
    status = pod_group_status(group(), pods, T0)
    assert status.phase == phase
    assert (status.scheduled, status.running, status.succeeded, status.failed) == counts


def test_a_gang_bound_one_by_one_gets_its_schedule_start_time_once() -> None:
    pods = [member("a"), member("b")]
    status = pod_group_status(group(), pods, T0)
    pods[0] = replace(pods[0], spec=PodSpec(node_name="n"))
    status = pod_group_status(group(status=status), pods, T0 + timedelta(seconds=3))
    assert (status.phase, status.schedule_start_time) == (SCHEDULING, T0 + timedelta(seconds=3))
    pods[1] = replace(pods[1], spec=PodSpec(node_name="n"))
    status = pod_group_status(group(status=status), pods, T0 + timedelta(seconds=9))
    assert (status.phase, status.schedule_start_time) == (SCHEDULED, T0 + timedelta(seconds=3))


def test_final_phases_stay_and_a_group_whose_members_are_gone_is_pending_again() -> None:
    done = PodGroupStatus(phase=FINISHED, scheduled=2, succeeded=2)
    assert pod_group_status(group(status=done), [], T0) == done
    running = PodGroupStatus(phase=RUNNING, scheduled=2, running=2)
    assert pod_group_status(group(status=running), [], T0).phase == PENDING


def test_occupied_by_names_the_oldest_members_owners() -> None:
    pods = [member("a", owner="train"), member("b", owner="train")]
    assert pod_group_status(group(), pods, T0).occupied_by == f"{NS}/train"


def test_members_are_the_pods_of_the_gang_not_being_deleted() -> None:
    gone = member("c")
    gone = replace(gone, metadata=replace(gone.metadata, deletion_timestamp=T0))
    other = replace(member("d"), metadata=ObjectMeta(name="d", namespace=NS))
    found = members_by_group([member("a"), member("b"), gone, other])
    assert {gang: [p.metadata.name for p in pods] for gang, pods in found.items()} == {
        f"{NS}/gang": ["a", "b"]
    }


def test_the_loop_writes_a_status_the_crd_accepts(shared_dir: Path) -> None:
    assert LOOPS["podgroups"] is PodGroupStatusLoop
    store = Store(path=None, clock=lambda: T0)
    store.apply_many([group(), member("a", node="n"), member("b")])
    loop = PodGroupStatusLoop()
    assert loop.reconcile(LoopContext(store=store, now=lambda: T0)) is None
    written = store.get(store.registry.for_type(PodGroup), "gang", NS)
    assert isinstance(written, PodGroup)
    assert (written.status.phase, written.status.scheduled) == (SCHEDULING, 1)
    check = validator(shared_dir, "scheduling.sigs.k8s.io/PodGroup")
    assert schema_errors(check, json.loads(codec.encode_json(written))) == []


def test_the_loop_follows_the_members_and_writes_only_changes() -> None:
    store = Store(path=None, clock=lambda: T0)
    store.apply_many([group(), member("a", node="n"), member("b")])
    loop = PodGroupStatusLoop()
    ctx = LoopContext(store=store, now=lambda: T0)
    loop.reconcile(ctx)
    written = store.resource_version
    loop.reconcile(ctx)
    assert store.resource_version == written  # nothing changed: nothing written
    store.update(
        replace(store.get(store.registry.for_type(Pod), "b", NS), spec=PodSpec(node_name="n"))
    )
    loop.reconcile(ctx)
    found = store.get(store.registry.for_type(PodGroup), "gang", NS)
    assert isinstance(found, PodGroup)
    assert (found.status.phase, found.status.scheduled) == (SCHEDULED, 2)
