"""Small builders of CPU topologies, nodes and pods for the NodeNUMAResource tests."""

from __future__ import annotations

import json

from apis import constants as k
from apis.core import Container, Node, Pod, PodSpec, PodStatus, ResourceRequirements
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from controller.scheduler.numaresource.status import ResourceStatus, encode_resource_status


def topology_text(
    *, sockets: int = 2, cores: int = 4, threads: int = 2, numa_per_socket: int = 1
) -> str:
    """A ``cpu-topology`` annotation numbered as Linux does on x86.

    ``cores`` physical cores per socket, ``threads`` per core; core ids restart on every
    socket; logical CPU ``t * sockets * cores + s * cores + c`` is thread ``t`` of core ``c`` of
    socket ``s``, so the second threads follow all first ones. Each socket's cores are split
    evenly over ``numa_per_socket`` NUMA nodes.
    """
    detail = []
    per_node = cores // numa_per_socket
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                cpu = thread * sockets * cores + socket * cores + core
                node = socket * numa_per_socket + core // per_node
                detail.append({"id": cpu, "core": core, "socket": socket, "node": node})
    detail.sort(key=lambda entry: entry["id"])
    return json.dumps({"detail": detail})


#: 2 sockets x 4 cores x 2 threads, one NUMA node per socket:
#: node 0 = cpus 0-3 and their siblings 8-11, node 1 = cpus 4-7 and 12-15.
TWO_SOCKETS = topology_text()


def node(
    name: str = "n1",
    *,
    topology: str | None = TWO_SOCKETS,
    labels: dict[str, str] | None = None,
) -> Node:
    annotations = {k.ANNOTATION_NODE_CPU_TOPOLOGY: topology} if topology is not None else {}
    return Node(metadata=ObjectMeta(name=name, labels=labels or {}, annotations=annotations))


def pod(
    name: str = "p",
    *,
    cpu: int = 4000,
    memory: int = 1 << 30,
    qos: str | None = "LSR",
    priority_class: str | None = None,
    annotations: dict[str, str] | None = None,
    node_name: str = "",
    phase: str = "",
) -> Pod:
    """A pod requesting ``cpu`` millicores (and ``memory`` bytes) in one container."""
    labels: dict[str, str] = {}
    if qos is not None:
        labels[k.LABEL_QOS_CLASS] = qos
    if priority_class is not None:
        labels[k.LABEL_PRIORITY_CLASS] = priority_class
    amounts = {name_: amount for name_, amount in (("cpu", cpu), ("memory", memory)) if amount}
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            labels=labels,
            annotations=annotations or {},
        ),
        spec=PodSpec(
            node_name=node_name,
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(requests=ResourceList(amounts)),
                ),
            ),
        ),
        status=PodStatus(phase=phase),
    )


def bound(name: str, cpus: frozenset[int], *, phase: str = "Running", exclusive: str = "") -> Pod:
    """A pod already bound to ``cpus`` on node ``n1`` (with ``exclusive`` as its policy)."""
    annotations = {
        k.ANNOTATION_RESOURCE_STATUS: encode_resource_status(ResourceStatus(cpuset=cpus))
    }
    if exclusive:
        spec = {"preferredCPUExclusivePolicy": exclusive}
        annotations[k.ANNOTATION_RESOURCE_SPEC] = json.dumps(spec)
    return pod(
        name,
        cpu=len(cpus) * 1000,
        annotations=annotations,
        node_name="n1",
        phase=phase,
    )
