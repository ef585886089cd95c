"""The built-in admission check controllers: capacity and manual approval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apis import constants as k
from apis.core import (
    Container,
    Node,
    NodeSpec,
    NodeStatus,
    Pod,
    PodSpec,
    PodStatus,
    PodTemplateSpec,
    ResourceRequirements,
)
from apis.meta import ObjectMeta
from apis.queueing import (
    Admission,
    AdmissionCheckState,
    PodSet,
    QueueUnit,
    QueueUnitSpec,
    QueueUnitStatus,
)
from apis.resources import ResourceList
from controller.queueing import checkers
from controller.queueing.checkers import CHECKERS, CheckContext, Checker

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=3)
GI = 1 << 30


def res(cpu: int = 0, memory: int = 0, **extra: int) -> ResourceList:
    """``cpu`` in cores, ``memory`` in GiB; zero amounts left out."""
    amounts = {"cpu": cpu * 1000, "memory": memory * GI, **extra}
    return ResourceList({n: a for n, a in amounts.items() if a})


def node(name: str, allocatable: ResourceList, *, unschedulable: bool = False) -> Node:
    return Node(
        metadata=ObjectMeta(name=name),
        spec=NodeSpec(unschedulable=unschedulable),
        status=NodeStatus(allocatable=allocatable),
    )


def pod(name: str, on: str, requests: ResourceList, *, phase: str = "Running") -> Pod:
    return Pod(
        metadata=ObjectMeta(name=name, namespace="default"),
        spec=PodSpec(
            node_name=on,
            containers=(Container(name="c", resources=ResourceRequirements(requests=requests)),),
        ),
        status=PodStatus(phase=phase),
    )


def pod_set(name: str, count: int, requests: ResourceList) -> PodSet:
    template = PodTemplateSpec(
        spec=PodSpec(
            containers=(Container(name="c", resources=ResourceRequirements(requests=requests)),)
        )
    )
    return PodSet(name=name, count=count, template=template)


def unit(
    *pod_sets: PodSet,
    admissions: tuple[Admission, ...] = (),
    checks: tuple[AdmissionCheckState, ...] = (),
    annotations: dict[str, str] | None = None,
    request: ResourceList | None = None,
) -> QueueUnit:
    return QueueUnit(
        metadata=ObjectMeta(name="job", namespace="default", annotations=annotations or {}),
        spec=QueueUnitSpec(pod_set=pod_sets, request=request or ResourceList()),
        status=QueueUnitStatus(phase="Reserved", admissions=admissions, admission_checks=checks),
    )


def ctx(check: str = "capacity", free: dict[str, dict[str, int]] | None = None) -> CheckContext:
    return CheckContext(check=check, now=NOW, free=free or {})


def test_registry_lists_the_builtin_controllers() -> None:
    assert set(CHECKERS) == {"koordpy.io/capacity", "koordpy.io/approval"}
    for name, factory in CHECKERS.items():
        made = factory()
        assert isinstance(made, Checker)
        assert made.controller_name == name


def test_free_capacity_subtracts_assigned_live_pods() -> None:
    nodes = [
        node("a", res(8, 32, pods=110)),
        node("b", res(4, 16)),
        node("cordoned", res(64, 256), unschedulable=True),
    ]
    pods = [
        pod("p1", "a", res(2, 4)),
        pod("p2", "a", res(1, 1)),
        pod("done", "a", res(4, 4), phase="Succeeded"),
        pod("pending", "", res(4, 4), phase="Pending"),
        pod("elsewhere", "cordoned", res(1, 1)),
    ]
    assert checkers.free_capacity(nodes, pods) == {
        "a": {"cpu": 5000, "memory": 27 * GI, "pods": 108},
        "b": {"cpu": 4000, "memory": 16 * GI},
    }


FREE = {
    "a": dict(res(8, 32)),
    "b": dict(res(4, 16)),
    "c": dict(res(4, 16, **{"nvidia.com/gpu": 2})),
}


@pytest.mark.parametrize(
    ("the_unit", "state", "message"),
    [
        pytest.param(
            unit(pod_set("worker", 4, res(4, 8))),
            "Ready",
            "the cluster has room for every replica",
            id="four-fit-on-three-nodes",
        ),
        pytest.param(
            unit(pod_set("worker", 5, res(4, 8))),
            "Retry",
            "pod set worker: 1 of 5 replicas do not fit on any node now"
            " (cpu needs 4, at most 0 free on a node)",
            id="fifth-replica-short-of-cpu",
        ),
        pytest.param(
            unit(pod_set("trainer", 1, res(1, 1, **{"nvidia.com/gpu": 4}))),
            "Retry",
            "pod set trainer: 1 of 1 replicas do not fit on any node now"
            " (nvidia.com/gpu needs 4, at most 2 free on a node)",
            id="no-node-has-four-gpus",
        ),
        pytest.param(
            unit(
                pod_set("worker", 8, res(4, 8)),
                admissions=(Admission(name="worker", replicas=8, running=5),),
            ),
            "Ready",
            "the cluster has room for every replica",
            id="only-unbound-replicas-count",
        ),
        pytest.param(
            unit(pod_set("ps", 1, res(2, 2)), pod_set("worker", 3, res(4, 30))),
            "Retry",
            "pod set worker: 2 of 3 replicas do not fit on any node now"
            " (memory needs 30Gi, at most 16Gi free on a node)",
            id="second-pod-set-short-of-memory",
        ),
        pytest.param(
            unit(request=res(16)),
            "Retry",
            f"pod set {k.QUEUE_DEFAULT_PODSET}: 1 of 1 replicas do not fit on any node now"
            " (cpu needs 16, at most 8 free on a node)",
            id="legacy-request",
        ),
    ],
)
def test_capacity_checker(the_unit: QueueUnit, state: str, message: str) -> None:
    decided = checkers.CapacityChecker().decide(the_unit, ctx(free=FREE))
    assert decided is not None
    assert (decided.name, decided.state, decided.message) == ("capacity", state, message)
    assert decided.last_transition_time == NOW


def test_capacity_without_nodes_says_so() -> None:
    decided = checkers.CapacityChecker().decide(unit(pod_set("w", 1, res(1))), ctx())
    assert decided is not None
    assert decided.state == "Retry"
    assert "at most 0 free" in decided.message


def test_unchanged_state_writes_nothing() -> None:
    first = checkers.CapacityChecker().decide(unit(pod_set("w", 1, res(1))), ctx(free=FREE))
    assert first is not None
    again = unit(pod_set("w", 1, res(1)), checks=(first,))
    assert checkers.CapacityChecker().decide(again, ctx(free=FREE)) is None


def test_message_change_keeps_transition_time() -> None:
    before = AdmissionCheckState(
        name="capacity", state="Retry", last_transition_time=EARLIER, message="old"
    )
    decided = checkers.CapacityChecker().decide(
        unit(pod_set("w", 9, res(8)), checks=(before,)), ctx(free=FREE)
    )
    assert decided is not None
    assert decided.state == "Retry"
    assert decided.last_transition_time == EARLIER


@pytest.mark.parametrize(
    ("annotation", "state"),
    [
        pytest.param(None, "Pending", id="absent"),
        pytest.param("Ready", "Ready", id="approved"),
        pytest.param("Retry", "Retry", id="retry"),
        pytest.param("Rejected", "Rejected", id="rejected"),
        pytest.param("yes please", "Pending", id="unknown-value"),
    ],
)
def test_approval_reads_the_annotation(annotation: str | None, state: str) -> None:
    key = "approval.koordpy.io/manager-ok"
    annotations = {} if annotation is None else {key: annotation}
    decided = checkers.ApprovalChecker().decide(
        unit(annotations=annotations), ctx(check="manager-ok")
    )
    assert decided is not None
    assert (decided.name, decided.state) == ("manager-ok", state)
    assert key in decided.message
    assert decided.pod_set_updates == ()


def test_approval_unchanged_is_none() -> None:
    key = "approval.koordpy.io/manager-ok"
    first = checkers.ApprovalChecker().decide(
        unit(annotations={key: "Ready"}), ctx(check="manager-ok")
    )
    assert first is not None
    again = unit(annotations={key: "Ready"}, checks=(first,))
    assert checkers.ApprovalChecker().decide(again, ctx(check="manager-ok")) is None
