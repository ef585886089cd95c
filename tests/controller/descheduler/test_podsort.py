"""The descheduler's pod order (controller-spec §6.4 step 6): who is moved first."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from apis import constants as k
from apis.core import Container, Pod, PodSpec, PodStatus, ResourceRequirements
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from controller.descheduler.podsort import (
    ANNOTATION_POD_DELETION_COST,
    annotation_cost,
    sort_key,
    sorted_pods,
)
from tests.controller.descheduler.conftest import GI, make_pod

BATCH = {k.LABEL_PRIORITY_CLASS: "koord-batch"}


def _pod(
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    priority: int | None = None,
    cpu: int = 0,
) -> Pod:
    return make_pod(
        name,
        labels=BATCH if labels is None else labels,
        annotations=annotations,
        priority=priority,
        cpu=cpu,
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(
            _pod("free", labels={k.LABEL_PRIORITY_CLASS: "koord-free"}),
            _pod("batch", labels={k.LABEL_PRIORITY_CLASS: "koord-batch"}),
            id="koord-free before koord-batch",
        ),
        pytest.param(
            _pod("mid", labels={k.LABEL_PRIORITY_CLASS: "koord-mid"}),
            _pod("prod", labels={k.LABEL_PRIORITY_CLASS: "koord-prod"}),
            id="koord-mid before koord-prod",
        ),
        pytest.param(
            _pod(
                "batch-top-priority", labels={k.LABEL_PRIORITY_CLASS: "koord-batch"}, priority=9999
            ),
            _pod("prod-no-priority", labels={k.LABEL_PRIORITY_CLASS: "koord-prod"}, priority=0),
            id="the class decides before the priority",
        ),
        pytest.param(
            _pod("p100", priority=100),
            _pod("p200", priority=200),
            id="lower priority first",
        ),
        pytest.param(
            _pod("besteffort"),
            _pod("burstable", cpu=500),
            id="BestEffort before Burstable",
        ),
        pytest.param(
            _pod("be", labels={**BATCH, k.LABEL_QOS_CLASS: "BE"}),
            _pod("ls", labels={**BATCH, k.LABEL_QOS_CLASS: "LS"}),
            id="koord BE before LS",
        ),
        pytest.param(
            _pod("lsr", labels={**BATCH, k.LABEL_QOS_CLASS: "LSR"}),
            _pod("system", labels={**BATCH, k.LABEL_QOS_CLASS: "SYSTEM"}),
            id="koord LSR before SYSTEM",
        ),
        pytest.param(
            _pod("cheap", annotations={ANNOTATION_POD_DELETION_COST: "-5"}),
            _pod("default"),
            id="negative deletion cost before none",
        ),
        pytest.param(
            _pod("default"),
            _pod("costly", annotations={ANNOTATION_POD_DELETION_COST: "10"}),
            id="no deletion cost before a positive one",
        ),
        pytest.param(
            _pod("evict-cheap", annotations={k.ANNOTATION_EVICTION_COST: "1"}),
            _pod("evict-costly", annotations={k.ANNOTATION_EVICTION_COST: "100"}),
            id="lower eviction cost first",
        ),
        pytest.param(
            _pod(
                "deletion-wins",
                annotations={
                    ANNOTATION_POD_DELETION_COST: "1",
                    k.ANNOTATION_EVICTION_COST: "100",
                },
            ),
            _pod(
                "deletion-higher",
                annotations={ANNOTATION_POD_DELETION_COST: "2", k.ANNOTATION_EVICTION_COST: "0"},
            ),
            id="deletion cost before eviction cost",
        ),
    ],
)
def test_first_pod_sorts_first(first: Pod, second: Pod) -> None:
    assert sort_key(first) < sort_key(second)
    assert sorted_pods([second, first]) == [first, second]


@pytest.mark.parametrize(
    ("text", "cost"),
    [
        pytest.param(None, 0, id="absent"),
        pytest.param("42", 42, id="number"),
        pytest.param(" -7 ", -7, id="negative with spaces"),
        pytest.param("ten", 0, id="not a number"),
        pytest.param(str(2**31), 0, id="beyond int32"),
        pytest.param(str(2**31 - 1), 2**31 - 1, id="int32 max (forbids migration)"),
    ],
)
def test_annotation_cost(text: str | None, cost: int) -> None:
    annotations = {} if text is None else {k.ANNOTATION_EVICTION_COST: text}
    pod = Pod(metadata=ObjectMeta(name="p", annotations=annotations))
    assert annotation_cost(pod, k.ANNOTATION_EVICTION_COST) == cost


def test_equal_pods_keep_their_order() -> None:
    pods = [_pod(f"same-{i}") for i in range(5)]
    assert sorted_pods(reversed(pods)) == list(reversed(pods))


def test_a_mixed_node_in_eviction_order() -> None:
    prod = _pod("prod-web", labels={k.LABEL_PRIORITY_CLASS: "koord-prod"}, cpu=1000)
    batch_costly = _pod("batch-costly", annotations={ANNOTATION_POD_DELETION_COST: "100"})
    batch = _pod("batch", cpu=1000)
    free = _pod("free", labels={k.LABEL_PRIORITY_CLASS: "koord-free"}, cpu=1000)
    batch_be = _pod("batch-be")
    assert [p.metadata.name for p in sorted_pods([prod, batch_costly, batch, free, batch_be])] == [
        "free",
        "batch-be",
        "batch-costly",
        "batch",
        "prod-web",
    ]


# --- the QoS keys ---------------------------------------------------------------------------

#: A container's (requests, limits).
Resources = tuple[dict[str, int], dict[str, int]]
CPU_MEMORY = {"cpu": 500, "memory": GI}


def _qos_pod(
    containers: list[Resources],
    *,
    init: list[Resources] | None = None,
    qos_class: str = "",
    labels: Mapping[str, str] | None = None,
) -> Pod:
    def built(i: int, resources: Resources, kind: str) -> Container:
        requests, limits = resources
        return Container(
            name=f"{kind}-{i}",
            image="app",
            resources=ResourceRequirements(
                requests=ResourceList(requests), limits=ResourceList(limits)
            ),
        )

    return Pod(
        metadata=ObjectMeta(name="p", namespace="default", labels=dict(labels or {})),
        spec=PodSpec(
            containers=tuple(built(i, c, "main") for i, c in enumerate(containers)),
            init_containers=tuple(built(i, c, "init") for i, c in enumerate(init or [])),
        ),
        status=PodStatus(qos_class=qos_class),
    )


# (class rank, kube QoS rank, koord QoS rank) of sort_key: prod 4, batch 2, none 0;
# BestEffort 0, Burstable 1, Guaranteed 2; BE 1, LS 2, LSR 3, none 0.
@pytest.mark.parametrize(
    ("pod", "ranks"),
    [
        pytest.param(_qos_pod([({"cpu": 500}, {})]), (4, 1, 2), id="requests only: Burstable"),
        pytest.param(_qos_pod([({}, {})]), (2, 0, 1), id="nothing set: BestEffort"),
        pytest.param(_qos_pod([({"cpu": 0}, {})]), (2, 0, 1), id="a zero request: BestEffort"),
        pytest.param(
            _qos_pod([(CPU_MEMORY, CPU_MEMORY)]), (4, 2, 3), id="limits = requests: Guaranteed"
        ),
        pytest.param(_qos_pod([({}, CPU_MEMORY)]), (4, 2, 3), id="limits only: Guaranteed"),
        pytest.param(
            _qos_pod([({}, {}), (CPU_MEMORY, CPU_MEMORY)]),
            (4, 1, 2),
            id="one container without anything, one Guaranteed: Burstable",
        ),
        pytest.param(
            _qos_pod([(CPU_MEMORY, CPU_MEMORY), ({"memory": 1}, {})]),
            (4, 1, 2),
            id="one Guaranteed container, one with requests only: Burstable",
        ),
        pytest.param(
            _qos_pod([({}, {})], init=[({"cpu": 100}, {})]),
            (4, 1, 2),
            id="an init container's request counts",
        ),
        pytest.param(
            _qos_pod([({"cpu": 500}, {})], qos_class="BestEffort"),
            (2, 0, 1),
            id="status.qosClass wins",
        ),
        pytest.param(
            _qos_pod([(CPU_MEMORY, CPU_MEMORY)], labels={k.LABEL_QOS_CLASS: "BE"}),
            (2, 2, 1),
            id="the koordinator QoS label sets the class",
        ),
        pytest.param(
            _qos_pod([({"cpu": 500}, {})], labels={k.LABEL_QOS_CLASS: "XYZ"}),
            (0, 1, 0),
            id="an unknown koordinator QoS label: no class",
        ),
    ],
)
def test_qos_keys(pod: Pod, ranks: tuple[int, int, int]) -> None:
    key = sort_key(pod)
    assert (key[0], key[2], key[3]) == ranks
