"""What the colocation manual pages' replays share (``cpu-evict``, ``memory-evict``): the
cluster the pages assume (Koordinator's chart's ``koord-batch`` PriorityClass, a node that
offers Batch resources), the page's ConfigMap and demo pod applied to it, and the agent's
eviction strategy run on a node whose Batch allocatable is what the agent itself publishes."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from agent.qos.batch_resources import BatchResources
from agent.qos.evictions import Evictions
from agent.qos.settings import QoSSettings
from apis import constants as k
from apis.core import Pod
from tests.agent.qos_fixtures_evict import FakeUsage, make_node, snapshot
from tests.manuals.replay import Outcome, node, replay

__all__ = [
    "KOORD_BATCH",
    "KOORD_BATCH_PRIORITY",
    "admitted",
    "batch_node",
    "evicted_on_batch_account",
    "replay_demo",
]

#: The value of the chart's ``koord-batch`` PriorityClass.
KOORD_BATCH_PRIORITY = 5000

#: What Koordinator's chart installs.
KOORD_BATCH = f"""
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: koord-batch
value: {KOORD_BATCH_PRIORITY}
"""


def batch_node(name: str = "node-1", *, cpu: str = "16", memory: str = "64Gi") -> str:
    """A Ready Node that offers 16 batch cores and 32 GiB of batch memory besides ``cpu`` and
    ``memory``."""
    batch = {k.RESOURCE_BATCH_CPU: "16k", k.RESOURCE_BATCH_MEMORY: "32Gi"}
    return node(name, cpu=cpu, memory=memory, extra=batch)


def replay_demo(configmap: str, node_manifest: str, pod: str, name: str = "be-pod-demo") -> Outcome:
    """The page's ``slo-controller-config`` and demo pod on ``node_manifest`` (with
    ``koord-batch``): the ConfigMap is accepted and the pod ``name`` runs on ``node-1``."""
    out = replay(configmap, KOORD_BATCH, node_manifest, pod)
    assert list(out.events("SLOCfgUnmarshalFailed")) == []
    assert list(out.events("SLOCfgInvalid")) == []
    demo = out.pod(name)
    assert (demo.status.phase, demo.spec.node_name) == ("Running", "node-1")
    return out


def admitted(out: Outcome, name: str = "be-pod-demo") -> Pod:
    """The pod as the node sees it: the API server's Priority admission gives it the value of
    its PriorityClass (koordpy's store does not resolve it; the page's cluster does)."""
    pod = out.pod(name)
    spec = msgspec.structs.replace(pod.spec, priority=KOORD_BATCH_PRIORITY)
    return msgspec.structs.replace(pod, spec=spec)


def evicted_on_batch_account(
    qos: QoSSettings,
    pods: Sequence[Pod],
    usage: FakeUsage,
    *,
    cpu: int,
    memory: int,
    resource: str,
) -> list[str]:
    """``name:reason`` of the pods the agent evicts (sorted) on a node of ``cpu`` millicores
    and ``memory`` bytes whose ``resource`` allocatable (batch-cpu or batch-memory) is what the
    agent's Batch resource computation publishes under ``qos``."""
    plain = make_node(cpu=cpu, memory=memory)
    published = BatchResources().plan(snapshot(plain, list(pods), usage, qos)).node_resources
    assert published is not None
    allocatable = {
        k.RESOURCE_CPU: cpu,
        k.RESOURCE_MEMORY: memory,
        resource: published.get_amount(resource),
    }
    node_obj = make_node(cpu=cpu, memory=memory, allocatable=allocatable)
    outcome = Evictions().plan(snapshot(node_obj, list(pods), usage, qos))
    return sorted(f"{e.pod.metadata.name}:{e.reason}" for e in outcome.evictions)
