"""NodeNUMAResource through the scheduler loop: LSR pods get whole cores, written in PreBind."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime

import pytest

from apis import constants as k
from apis.core import Node, Pod
from apis.meta import ObjectMeta
from controller.loops import LoopContext
from controller.scheduler.loop import POD_SCHEDULED, SchedulerLoop
from controller.scheduler.numaresource.status import parse_resource_status
from controller.scheduler.profile import (
    DEFAULT_CONFIG,
    DEFAULT_SCHEDULER,
    PluginConfig,
    ProfileConfig,
    WeightedPlugin,
    build_profile,
)
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, make_node, make_pod

#: One socket, one NUMA node, 4 cores of 2 threads: CPU ``i`` and ``i + 4`` share core ``i % 4``.
TOPOLOGY = json.dumps(
    {"detail": [{"id": i, "core": i % 4, "socket": 0, "node": 0} for i in range(8)]}
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened


def _loop() -> SchedulerLoop:
    config = ProfileConfig(
        aliases=(DEFAULT_SCHEDULER,),
        pre_filter=("NodeNUMAResource",),
        filter=("NodeResourcesFit", "NodeNUMAResource"),
        score=(WeightedPlugin(name="NodeNUMAResource"),),
        reserve=("NodeNUMAResource",),
        pre_bind=("NodeNUMAResource",),
    )
    return SchedulerLoop([build_profile(config)])


def _node(
    name: str = "n1", *, topology: str = TOPOLOGY, labels: Mapping[str, str] | None = None
) -> Node:
    """16 cores allocatable (more than the topology holds, so only the cpusets run out)."""
    labels = dict(labels or {})
    base = make_node(name, cpu=16_000, memory=32 * GI, labels=labels)
    annotations = {k.ANNOTATION_NODE_CPU_TOPOLOGY: topology} if topology else {}
    return Node(
        metadata=ObjectMeta(name=name, labels=dict(labels), annotations=annotations),
        spec=base.spec,
        status=base.status,
    )


def _lsr(name: str, cpu: int, qos: str = "LSR", *, required: str = "") -> Pod:
    base = make_pod(name, cpu=cpu, memory=GI, scheduler="")
    spec = json.dumps({"requiredCPUBindPolicy": required}) if required else ""
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            labels={k.LABEL_QOS_CLASS: qos},
            annotations={k.ANNOTATION_RESOURCE_SPEC: spec} if spec else {},
        ),
        spec=base.spec,
        status=base.status,
    )


def _get(store: Store, name: str) -> Pod:
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found


def _message(found: Pod) -> str:
    return next((c.message for c in found.status.conditions if c.type == POD_SCHEDULED), "")


def _cpuset(found: Pod) -> frozenset[int]:
    return parse_resource_status(found.metadata.annotations[k.ANNOTATION_RESOURCE_STATUS]).cpuset


def _whole_cores(cpus: frozenset[int]) -> bool:
    cores = {cpu % 4 for cpu in cpus}
    return cpus == frozenset(c for core in cores for c in (core, core + 4))


def test_an_lsr_pod_gets_whole_cores(store: Store, clock: Clock) -> None:
    store.create(_node())
    store.create(_lsr("web", 4000))
    _loop().reconcile(LoopContext(store=store, now=clock))
    placed = _get(store, "web")
    assert placed.spec.node_name == "n1"
    cpus = _cpuset(placed)
    assert len(cpus) == 4
    assert _whole_cores(cpus)
    status = json.loads(placed.metadata.annotations[k.ANNOTATION_RESOURCE_STATUS])
    assert status["numaNodeResources"] == [{"node": 0, "resources": {"cpu": "4"}}]


def test_pods_of_one_pass_get_disjoint_cpus_and_the_rest_waits(store: Store, clock: Clock) -> None:
    store.create(_node())
    for name in ("a", "b", "c"):
        store.create(_lsr(name, 4000))
    _loop().reconcile(LoopContext(store=store, now=clock))
    a, b, c = (_get(store, name) for name in ("a", "b", "c"))
    assert a.spec.node_name == b.spec.node_name == "n1"
    assert not _cpuset(a) & _cpuset(b)
    assert _whole_cores(_cpuset(a))
    assert _whole_cores(_cpuset(b))
    assert c.spec.node_name == ""
    assert _message(c) == (
        "0/1 nodes are available: 1 not enough cpus available to satisfy request."
    )


def test_cpus_bound_in_the_store_are_not_handed_out_again(store: Store, clock: Clock) -> None:
    store.create(_node())
    store.create(_lsr("a", 4000))
    loop = _loop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    store.create(_lsr("b", 4000))
    loop.reconcile(ctx)
    assert not _cpuset(_get(store, "a")) & _cpuset(_get(store, "b"))


@pytest.mark.parametrize(
    ("pod", "node", "expected_node", "expected"),
    [
        pytest.param(
            _lsr("p", 1500),
            _node(),
            "",
            "0/1 nodes are available: the requested CPUs must be integer.",
            id="fractional-cpus",
        ),
        pytest.param(
            _lsr("p", 2000),
            _node(topology=""),
            "",
            "0/1 nodes are available: 1 node(s) invalid CPU Topology.",
            id="no-topology",
        ),
        pytest.param(
            _lsr("p", 3000, required="FullPCPUs"),
            _node(),
            "",
            "0/1 nodes are available: 1 node(s) requested cpus not multiple cpus per core.",
            id="odd-cpus-full-pcpus",
        ),
        # An LS pod binds nothing: no annotation, placed anywhere.
        pytest.param(_lsr("p", 1500, qos="LS"), _node(topology=""), "n1", "", id="ls-pod"),
    ],
)
def test_pods_the_node_cannot_bind(
    store: Store, clock: Clock, pod: Pod, node: Node, expected_node: str, expected: str
) -> None:
    store.create(node)
    store.create(pod)
    _loop().reconcile(LoopContext(store=store, now=clock))
    found = _get(store, "p")
    assert found.spec.node_name == expected_node
    assert _message(found) == expected
    assert k.ANNOTATION_RESOURCE_STATUS not in found.metadata.annotations


def test_a_node_label_forces_binding_for_any_pod(store: Store, clock: Clock) -> None:
    store.create(_node(labels={k.LABEL_NODE_CPU_BIND_POLICY: "FullPCPUsOnly"}))
    store.create(_lsr("p", 2000, qos="LS"))
    _loop().reconcile(LoopContext(store=store, now=clock))
    found = _get(store, "p")
    assert found.spec.node_name == "n1"
    assert _whole_cores(_cpuset(found))


def test_the_shipped_profile_places_the_plugin_as_koord_scheduler_does() -> None:
    config = DEFAULT_CONFIG
    for point in (config.pre_filter, config.filter, config.reserve, config.pre_bind):
        assert "NodeNUMAResource" in point
    assert config.pre_bind[0] == "NodeNUMAResource"
    assert {w.name: w.weight for w in config.score}["NodeNUMAResource"] == 1


def test_bad_args_name_the_field() -> None:
    bad = ProfileConfig(
        pre_filter=("NodeNUMAResource",),
        plugin_config=(
            PluginConfig(name="NodeNUMAResource", args={"defaultCPUBindPolicy": "Nope"}),
        ),
    )
    with pytest.raises(ValueError, match="defaultCPUBindPolicy"):
        build_profile(bad)
