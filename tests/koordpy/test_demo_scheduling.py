"""``koordpy up --demo``'s standalone example pods land on the simulated GPU/NPU nodes, with
their device allocation written, when the scheduler loop runs over what the demo holds: the
simulated nodes' Devices and node resources (as their agents report them) and ``examples/``.
In process, on a memory store: the same objects as the demo without its daemons."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from agent.devices.base import build_device
from agent.devices.simulated import PROFILES, simulate
from agent.node import accelerator_resources
from apis import constants as k
from apis.core import Node, NodeStatus, Pod
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from controller.loops import LoopContext
from controller.scheduler.deviceshare import parse_allocation
from controller.scheduler.loop import SchedulerLoop
from controller.store.sqlite import Store
from koordpy.up import DEMO_NODES, examples_dir, load_examples

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
GIB = 1 << 30


def run_demo() -> Store:
    """The demo's objects scheduled once: the simulated nodes' Devices and the node resources
    their agents report (``koordinator.sh/gpu.shared`` included), and ``examples/``."""
    directory = examples_dir()
    assert directory is not None
    store = Store(clock=lambda: NOW)
    for name, profile in DEMO_NODES.items():
        bare = Node(metadata=ObjectMeta(name=name, labels={k.LABEL_HOSTNAME: name}))
        device = build_device(bare, [simulate([PROFILES[profile]], name)])
        allocatable = ResourceList({"cpu": 64_000, "memory": 256 * GIB, "pods": 110})
        allocatable = allocatable + accelerator_resources(device)
        node = msgspec.structs.replace(bare, status=NodeStatus(allocatable=allocatable))
        store.apply_many([node, device])
    store.apply_many(load_examples(directory))
    SchedulerLoop().reconcile(LoopContext(store=store, now=lambda: NOW))
    return store


def test_the_metax_sgpu_pod_gets_a_share_of_one_metax_card() -> None:
    with run_demo() as store:
        pod = store.get(store.registry.for_type(Pod), "test-metax-sgpu", "default")
    assert isinstance(pod, Pod)
    assert pod.spec.node_name == "demo-metax-c500"
    allocation = parse_allocation(pod.annotations[k.ANNOTATION_DEVICE_ALLOCATED])
    (card,) = allocation.of(k.DEVICE_TYPE_GPU)
    assert card.resources.get_amount(k.RESOURCE_GPU_CORE) == 10
    assert card.resources.get_amount(k.RESOURCE_GPU_MEMORY) == GIB
    assert card.resources.get_amount(k.RESOURCE_GPU_MEMORY_RATIO) == 1  # 1Gi of 64Gi, floored
    assert card.id.startswith("GPU-")


def test_the_simulated_nodes_are_two_socket_servers_the_scheduler_can_bind_cpus_on() -> None:
    from agent.node import cpu_topology_annotation
    from controller.scheduler.numaresource.topology import parse_cpu_topology
    from koordpy.up import demo_cpu_topology

    cpus = tuple(sorted(demo_cpu_topology(), key=lambda cpu: cpu.cpu))
    topology = parse_cpu_topology(cpu_topology_annotation(cpus))
    assert topology.valid
    assert len(topology.cpus) == 96
    assert topology.cpus_per_core == 2
    assert {cpu.node for cpu in cpus} == {0, 1}
    # Linux numbering: CPU n and n + 48 are the two threads of one core.
    assert {(cpu.core, cpu.socket) for cpu in cpus if cpu.cpu in (5, 53)} == {(5, 0)}
