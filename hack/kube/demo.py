"""``koordpy up --demo``'s GPU nodes on a test cluster: Nodes and Devices as koordpy's agent
reports them, for kwok to keep Ready (``python -m hack.kube nodes --dir DIR``).

Each node gets the Device the agent's simulated probe reports for its profile (owned by the
Node), the accelerator resources in its capacity and allocatable, and the
``karpenter.sh/capacity-type`` label the descheduler example selects on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agent.daemon import device_of
from agent.devices.simulated import profile, simulate
from agent.node import accelerator_resources
from apis import codec
from apis import constants as k
from hack.kube.cluster import Cluster, ClusterError

__all__ = ["DEMO_NODES", "make_node", "make_nodes"]

#: Node name -> (simulated device profile, ``karpenter.sh/capacity-type``), as ``--demo``.
DEMO_NODES: Final[Mapping[str, tuple[str, str]]] = {
    "demo-nvidia-h100": ("nvidia-h100", "reserved"),
    "demo-ascend-910b3": ("ascend-910b3", "on-demand"),
}
#: What every demo node has besides its accelerators.
BASE_RESOURCES: Final[Mapping[str, str]] = {"cpu": "96", "memory": "768Gi", "pods": "110"}


def _created(cluster: Cluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, answer = cluster.request("POST", path, body)
    if status != 201:
        raise ClusterError(f"POST {path}: {status} {answer}")
    created: dict[str, Any] = answer
    return created


def make_node(cluster: Cluster, name: str, device_profile: str, capacity_type: str) -> None:
    """Create the Node and the Device koordpy's agent reports for ``device_profile``."""
    device = device_of(name, [simulate([profile(device_profile)], name)])
    resources = dict(BASE_RESOURCES)
    resources.update(codec.to_builtins(accelerator_resources(device)))
    node = _created(
        cluster,
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    k.LABEL_HOSTNAME: name,
                    "karpenter.sh/capacity-type": capacity_type,
                    "type": "kwok",
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "status": {"capacity": resources, "allocatable": resources},
        },
    )
    body = codec.to_builtins(device)
    for owner in body["metadata"].get("ownerReferences", []):
        owner["uid"] = node["metadata"]["uid"]
    _created(cluster, "/apis/scheduling.koordinator.sh/v1alpha1/devices", body)


def make_nodes(cluster: Cluster, nodes: Mapping[str, tuple[str, str]] = DEMO_NODES) -> None:
    """Every node of ``nodes`` (name -> (profile, capacity type))."""
    for name, (device_profile, capacity_type) in nodes.items():
        make_node(cluster, name, device_profile, capacity_type)
