"""Koordinator best practice "Batch Workload Colocation Quick Start Guide"
(``best-practices/batch-colocation-quick-start``).

Source: koordinator-sh/website ``docs/best-practices/batch-colocation-quick-start`` (rendered
page; v1.7 docs, unchanged for v1.8). The page installs Koordinator with its chart and expects
the nodes to offer ``kubernetes.io/batch-cpu`` and ``batch-memory`` ("Check Node Resources"),
then runs batch pods on them ("Method 2: Manual Configuration"). It writes no
``slo-controller-config`` of its own: the colocation switch is the chart's ConfigMap with
``colocation-config`` enabled, as the SLO configuration manual edits it. Here that ConfigMap
renders each node's NodeSLO, the node's agent computes the Batch resources from it (as koordlet
and koord-manager do together), and the page's batch pod — the pod template of its
``manual-batch-job`` — schedules on what the agent published, and on nothing when colocation is
off. (The page's sample numbers, 15 batch cores on an 8-core node, are illustrative; the
amounts are checked against the formula instead.)
"""

from __future__ import annotations

from pathlib import Path

from agent.qos.batch_resources import BatchResources
from apis import constants as k
from apis.quantity import format_quantity
from tests.agent.qos_fixtures_evict import GIB, FakeUsage, make_node, make_pod, snapshot
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.replay import Outcome, node, replay

COLOCATION_ON = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
data:
  colocation-config: |
    {
      "enable": true
    }
  resource-threshold-config: |
    {
      "clusterStrategy": {
        "enable": true
      }
    }
"""

COLOCATION_OFF = COLOCATION_ON.replace(
    '"enable": true\n    }\n  resource', '"enable": false\n    }\n  resource'
)

#: The pod the page's ``manual-batch-job`` runs (its pod template, as the Job controller makes it).
BATCH_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: manual-batch-job-x7k2p
  namespace: batch-demo
  labels:
    koordinator.sh/qosClass: BE  # Explicitly set QoS
spec:
  priorityClassName: koord-batch  # Explicitly set priority
  schedulerName: koord-scheduler  # Use Koordinator scheduler
  containers:
  - name: worker
    image: python:3.9
    command: ["python", "-c", "print('Hello from batch job'); import time; time.sleep(30)"]
    resources:
      requests:
        kubernetes.io/batch-cpu: "1000"     # Use batch resources
        kubernetes.io/batch-memory: "2Gi"
      limits:
        kubernetes.io/batch-cpu: "1000"
        kubernetes.io/batch-memory: "2Gi"
  restartPolicy: Never
"""

CORES, MEMORY = 8, 16 * GIB


def _published(configmap: str) -> dict[str, str]:
    """What the node's agent publishes as Batch allocatable under ``configmap``'s NodeSLO: an
    online (LS) pod using 2 cores and 4 GiB of the 8-core, 16 GiB node, the system 0.5 core
    and 1 GiB more."""
    out = replay(configmap, node("node-1", cpu=str(CORES), memory="16Gi"))
    qos = agent_settings(slo_spec(out, "node-1"))
    online = make_pod("web", qos="LS", requests={k.RESOURCE_CPU: 3_000, k.RESOURCE_MEMORY: 6 * GIB})
    usage = FakeUsage(
        node_cpu_milli=2_500,
        node_memory_bytes=5 * GIB,
        pods_cpu={online.metadata.uid: 2_000},
        pods_memory={online.metadata.uid: 4 * GIB},
    )
    node_obj = make_node(cpu=CORES * 1000, memory=MEMORY)
    resources = BatchResources().plan(snapshot(node_obj, [online], usage, qos)).node_resources
    assert resources is not None
    return {
        name: format_quantity(name, resources.get_amount(name))
        for name in (k.RESOURCE_BATCH_CPU, k.RESOURCE_BATCH_MEMORY)
    }


def _batch_pod_on_published(configmap: str, published: dict[str, str]) -> Outcome:
    """The page's batch pod applied where node-1 offers the ``published`` Batch resources."""
    offering = node("node-1", cpu=str(CORES), memory="16Gi", extra=published)
    return replay(configmap, offering, BATCH_POD)


def test_colocation_on_gives_the_node_batch_resources(shared_dir: Path) -> None:
    out = replay(COLOCATION_ON, node("node-1"), node("node-2"))
    assert valid_nodeslos(shared_dir, out) == 2
    qos = agent_settings(slo_spec(out, "node-1"))
    assert qos.colocation.enable is True
    assert qos.suppress.enable is True
    published = _published(COLOCATION_ON)
    # usage policy: 8000 x 60 % - 500 system - 2000 online = 2300m;
    # 16 GiB x 65 % - 1 GiB system - 4 GiB online = 5.4 GiB
    assert published[k.RESOURCE_BATCH_CPU] == format_quantity(k.RESOURCE_BATCH_CPU, 2_300)
    batch_memory = int(MEMORY * 65 / 100) - 1 * GIB - 4 * GIB
    assert published[k.RESOURCE_BATCH_MEMORY] == format_quantity(
        k.RESOURCE_BATCH_MEMORY, batch_memory
    )


def test_the_batch_pod_runs_on_what_the_agent_published() -> None:
    out = _batch_pod_on_published(COLOCATION_ON, _published(COLOCATION_ON))
    pod = out.pod("manual-batch-job-x7k2p", "batch-demo")
    assert (pod.status.phase, pod.spec.node_name) == ("Running", "node-1")


def test_with_colocation_off_there_is_nothing_to_run_it_on() -> None:
    published = _published(COLOCATION_OFF)
    assert published == {
        k.RESOURCE_BATCH_CPU: format_quantity(k.RESOURCE_BATCH_CPU, 0),
        k.RESOURCE_BATCH_MEMORY: format_quantity(k.RESOURCE_BATCH_MEMORY, 0),
    }
    out = _batch_pod_on_published(COLOCATION_OFF, published)
    pod = out.pod("manual-batch-job-x7k2p", "batch-demo")
    assert pod.spec.node_name == ""
    [failed] = [
        e for e in out.events("FailedScheduling") if e.involved_object.name == pod.metadata.name
    ]
    assert "Insufficient kubernetes.io/batch-cpu" in failed.message
