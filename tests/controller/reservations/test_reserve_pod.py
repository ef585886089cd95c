"""The reserve pod (§1.3): identity, labels/annotations overlay, priority, requests."""

from __future__ import annotations

import msgspec
import pytest

from apis import constants as k
from apis.core import PodSpec, PodTemplateSpec, pod_requests
from apis.meta import ObjectMeta
from apis.scheduling import Reservation
from controller.reservations import AnnotationError
from controller.reservations.reserve_pod import (
    MAX_PRIORITY,
    allocatable_at_bind,
    is_reserve_pod,
    pinned_node,
    reservation_requests,
    reserve_pod,
    reserve_priority,
)
from tests.controller.reservations.builders import available, pod, res, reservation


def _with_template(r: Reservation, **spec: object) -> Reservation:
    template = r.spec.template
    return msgspec.structs.replace(
        r,
        spec=msgspec.structs.replace(
            r.spec,
            template=msgspec.structs.replace(
                template, spec=msgspec.structs.replace(template.spec, **spec)
            ),
        ),
    )


def test_identity_and_annotations() -> None:
    r = reservation("demo", labels={"tier": "r"}, annotations={"note": "mine"})
    r = msgspec.structs.replace(
        r,
        spec=msgspec.structs.replace(
            r.spec,
            pre_allocation=True,
            template=PodTemplateSpec(
                metadata=ObjectMeta(
                    namespace="team-a", labels={"tier": "t", "app": "x"}, annotations={"note": "t"}
                ),
                spec=PodSpec(node_name="node-1", containers=r.spec.template.spec.containers),
            ),
        ),
    )
    p = reserve_pod(r)
    assert (p.metadata.name, p.metadata.uid, p.metadata.namespace) == (
        "uid-demo",
        "uid-demo",
        "team-a",
    )
    assert p.metadata.labels == {"tier": "r", "app": "x"}
    assert p.metadata.annotations == {
        "note": "mine",
        k.ANNOTATION_RESERVE_POD: "true",
        k.ANNOTATION_RESERVATION_NAME: "demo",
        k.ANNOTATION_IS_PRE_ALLOCATION: "true",
        k.ANNOTATION_RESERVATION_NODE: "node-1",
    }
    assert p.spec.node_name == ""  # the template's node moved into the annotation
    assert pinned_node(p) == "node-1"
    assert p.spec.scheduler_name == "default-scheduler"


def test_namespace_defaults_and_node_name_follows_status() -> None:
    p = reserve_pod(available("r", node="n7"))
    assert p.metadata.namespace == "default"
    assert p.spec.node_name == "n7"
    assert k.ANNOTATION_IS_PRE_ALLOCATION not in p.metadata.annotations


@pytest.mark.parametrize(
    ("template_priority", "label", "expected"),
    [
        (100, "5", 100),
        (None, "5", 5),
        (None, "-7", -7),
        (None, "lots", MAX_PRIORITY),
        (None, str(2**31), MAX_PRIORITY),
        (None, None, MAX_PRIORITY),
    ],
    ids=["template", "label", "negative label", "bad label", "label past int32", "none"],
)
def test_priority(template_priority: int | None, label: str | None, expected: int) -> None:
    r = reservation(labels={k.LABEL_PRIORITY: label} if label is not None else {})
    r = _with_template(r, priority=template_priority)
    assert reserve_priority(r) == expected
    assert reserve_pod(r).spec.priority == expected


@pytest.mark.parametrize(
    ("phase", "expected"),
    [("", "Pending"), ("Available", "Pending"), ("Succeeded", "Succeeded"), ("Failed", "Failed")],
)
def test_phase_mirrors_terminal_reservations(phase: str, expected: str) -> None:
    r = reservation(node="n1" if phase else "", phase=phase)
    assert reserve_pod(r).status.phase == expected


def test_requests_are_the_template_until_available() -> None:
    pending = reservation(requests=res(cpu=4, memory_gi=8))
    assert reservation_requests(pending) == res(cpu=4, memory_gi=8)
    resized = available(requests=res(cpu=4, memory_gi=8), allocatable=res(cpu=2, memory_gi=8))
    assert reservation_requests(resized) == res(cpu=2, memory_gi=8)


def test_available_with_other_allocatable_carries_one_fake_container() -> None:
    r = available(requests=res(cpu=4, memory_gi=8), allocatable=res(cpu=2, memory_gi=8))
    p = reserve_pod(r)
    names = [c.name for c in p.spec.containers]
    assert names == ["r", k.RESERVE_POD_FAKE_CONTAINER]
    assert pod_requests(p) == res(cpu=2, memory_gi=8)
    same = reserve_pod(available(requests=res(cpu=4)))
    assert [c.name for c in same.spec.containers] == ["r"]


def test_resize_annotation_overrides_allocatable_at_bind() -> None:
    key = k.ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE
    r = reservation(
        requests=res(cpu=4, memory_gi=8), annotations={key: '{"resources":{"cpu":"2500m"}}'}
    )
    assert allocatable_at_bind(r) == res(cpu=2.5, memory_gi=8)
    assert allocatable_at_bind(reservation(requests=res(cpu=1))) == res(cpu=1)
    broken = reservation(annotations={key: '{"resources":{"cpu":"lots"}}'})
    with pytest.raises(AnnotationError, match=key):
        allocatable_at_bind(broken)


def test_reserve_pod_is_recognised() -> None:
    p = reserve_pod(available())
    assert is_reserve_pod(p)
    assert pinned_node(p) == ""
    assert not is_reserve_pod(pod("web"))
