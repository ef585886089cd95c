"""Manual page ``cpu-burst`` (koordinator-sh/website ``docs/user-manuals/cpu-burst``).

``apache-demo`` (Guaranteed, 4 CPUs, no QoS label) with ``koordinator.sh/cpuBurst: '{"policy":
"auto"}'``, or every pod under the ``slo-controller-config`` ``cpu-burst-config`` cluster
strategy, gets the kernel burst (``cpu.cfs_burst_us`` = limit x ``cpuBurstPercent``, 10 x the
quota by default); ``none`` turns it off; LSR and BE pods never burst. Here the NodeSLO the
ConfigMap renders to and the page's pod (as the kubelet lists it: uid, node and a running
container added) go through ``koordpy agent plan`` on a cgroup v1 host with the systemd driver.
One deviation, deliberate: a mainline kernel refuses a burst above the quota (upstream #2801),
so the 10 x burst the page describes (which an Anolis kernel takes) is planned and then capped
at the quota; the reason says both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from apis import codec
from apis.errors import DecodeError
from tests.manuals.agent_plan import agent_host, as_listed, planned_writes

UID = "7d3e5a10-2b4c-4f6e-8a9b-0c1d2e3f4a5b"
CONTAINER_ID = "b5c1e9f0a2d34c6b8e7f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
CPU = "cpu,cpuacct"
POD_DIR = f"kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice"
CONTAINER_DIR = f"{POD_DIR}/cri-containerd-{CONTAINER_ID}.scope"
BURST = "cpu.cfs_burst_us"
#: The quota of a 4-CPU limit, µs per 100 ms period.
QUOTA = 400_000
#: limit 4 CPUs x cpuBurstPercent 1000 % of a 100 ms period: 10 x the quota, as the page says.
DEFAULT_BURST = 10 * QUOTA

APACHE_DEMO = """
apiVersion: v1
kind: Pod
metadata:
  name: apache-demo
  annotations:
    koordinator.sh/cpuBurst: '{"policy": "auto"}'   # Use this annotation to enable or disable
    # CPU Burst. (the page's comment, wrapped)
spec:
  containers:
  - command:
    - httpd
    - -D
    - FOREGROUND
    image: koordinatorsh/apache-2-4-51-for-slo-test:v0.1
    imagePullPolicy: Always
    name: apache
    resources:
      limits:
        cpu: "4"
        memory: 10Gi
      requests:
        cpu: "4"
        memory: 10Gi
  nodeName: # $nodeName Set the value to the name of the node that you use.
  hostNetwork: False
  restartPolicy: Never
  schedulerName: default-scheduler
"""


def nodeslo(cluster_strategy: str | None) -> str:
    """The NodeSLO ``cpu-burst-config``'s ``clusterStrategy`` renders to (defaults filled in)."""
    if cluster_strategy is None:
        return "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nmetadata: {name: node-1}\n"
    return f"""
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeSLO
metadata:
  name: node-1
spec:
  cpuBurstStrategy:
    policy: {cluster_strategy}
    cpuBurstPercent: 1000
    cfsQuotaBurstPercent: 300
    sharePoolThresholdPercent: 50
    cfsQuotaBurstPeriodSeconds: -1
"""


def listed(manifest: str) -> dict[str, Any]:
    """The page's pod as the kubelet lists it on node-1, its container running."""
    [pod] = codec.load_yaml_documents(manifest)
    assert pod["spec"]["nodeName"] is None  # the page leaves the node to fill in
    running = {
        "name": "apache",
        "containerID": f"containerd://{CONTAINER_ID}",
        "ready": True,
        "restartCount": 0,
        "image": "apache",
        "imageID": "",
        "state": {"running": {"startedAt": "2026-11-01T10:00:00Z"}},
    }
    return as_listed(manifest, UID, "Guaranteed", containers=[running])


def plan(
    tmp_path: Path, slo: str, pod: dict[str, Any], *, burst: int = 0
) -> dict[str, tuple[int, str]]:
    """``koordpy agent plan -o json`` on an 8-CPU host whose kernel has ``cpu.cfs_burst_us``:
    cgroup -> (desired burst, reason), for the burst writes planned."""
    host = agent_host(tmp_path, cpus=8)
    for directory in (POD_DIR, CONTAINER_DIR):
        host.write_cgroup(f"{CPU}/{directory}", "cpu.cfs_quota_us", "400000\n")
        host.write_cgroup(f"{CPU}/{directory}", "cpu.cfs_period_us", "100000\n")
        host.write_cgroup(f"{CPU}/{directory}", BURST, f"{burst}\n")
    return {
        w["cgroup"]: (int(w["desired"]), w["reason"])
        for w in planned_writes(tmp_path, host, slo, [pod])
        if Path(w["file"]).name == BURST
    }


def test_apache_demo_with_the_auto_annotation_bursts(tmp_path: Path) -> None:
    """ "Verify CPU Burst": the annotation alone (no cluster strategy) turns it on; the pod
    is Guaranteed without a QoS label, and the page excludes only LSR and BE pods."""
    writes = plan(tmp_path, nodeslo(None), listed(APACHE_DEMO))
    assert set(writes) == {CONTAINER_DIR, POD_DIR}
    value, reason = writes[CONTAINER_DIR]
    assert "policy auto: 1000% of the limit" in reason
    assert "capped at the cfs quota" in reason
    assert value == min(DEFAULT_BURST, QUOTA)
    assert writes[POD_DIR][0] == value


def test_the_cluster_strategy_bursts_a_pod_without_the_annotation(tmp_path: Path) -> None:
    """ "Use a ConfigMap to enable CPU Burst for all pods in a cluster"."""
    pod = listed(APACHE_DEMO)
    del pod["metadata"]["annotations"]
    writes = plan(tmp_path, nodeslo("auto"), pod)
    assert {cgroup: value for cgroup, (value, _) in writes.items()} == {
        CONTAINER_DIR: QUOTA,
        POD_DIR: QUOTA,
    }
    assert "policy auto: 1000% of the limit" in writes[CONTAINER_DIR][1]


def test_the_none_annotation_turns_the_burst_off_under_an_auto_cluster(tmp_path: Path) -> None:
    """``'{"policy": "none"}'``: the related fields are reset (the burst to 0)."""
    pod = listed(APACHE_DEMO.replace('{"policy": "auto"}', '{"policy": "none"}'))
    writes = plan(tmp_path, nodeslo("auto"), pod, burst=QUOTA)
    assert {cgroup: value for cgroup, (value, _) in writes.items()} == {
        CONTAINER_DIR: 0,
        POD_DIR: 0,
    }


ADVANCED = (
    '{"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,'
    ' "cfsQuotaBurstPeriodSeconds": -1}'
)


def test_the_advanced_annotation_example_bursts(tmp_path: Path) -> None:
    """ "(Optional) Advanced Settings": the page's pod annotation, over a ``none`` cluster."""
    pod = listed(APACHE_DEMO.replace('{"policy": "auto"}', ADVANCED))
    writes = plan(tmp_path, nodeslo("none"), pod)
    assert "policy auto: 1000% of the limit" in writes[CONTAINER_DIR][1]


def test_the_annotations_burst_percent_wins(tmp_path: Path) -> None:
    """A ``cpuBurstPercent`` of 50 in the annotation: half the limit, under the quota."""
    annotation = ADVANCED.replace('"cpuBurstPercent": 1000', '"cpuBurstPercent": 50')
    pod = listed(APACHE_DEMO.replace('{"policy": "auto"}', annotation))
    writes = plan(tmp_path, nodeslo("auto"), pod)
    assert writes[CONTAINER_DIR][0] == QUOTA // 2
    assert writes[POD_DIR][0] == QUOTA // 2


@pytest.mark.parametrize("qos", ["LSR", "BE"])
def test_lsr_and_be_pods_do_not_burst(tmp_path: Path, qos: str) -> None:
    """ "CPU Burst is not available for LSR and BE pods"."""
    pod = listed(APACHE_DEMO)
    pod["metadata"]["labels"] = {"koordinator.sh/qosClass": qos}
    assert plan(tmp_path, nodeslo("auto"), pod) == {}


def test_the_annotation_snippet_with_apps_v1_is_refused_naming_the_kind() -> None:
    """The page's annotation snippet says ``apiVersion: apps/v1`` for a Pod, which Kubernetes
    refuses (there is no apps/v1 Pod)."""
    snippet = """
apiVersion: apps/v1
kind: Pod
metadata:
  name: demo-pod-xxx
  annotations:
    # Set the value to auto to enable CPU Burst for the pod.
    koordinator.sh/cpuBurst: '{"policy": "auto"}'
    # To disable CPU Burst for the pod, set the value to none.
    #koordinator.sh/cpuBurst: '{"policy": "none"}'
"""
    with pytest.raises(DecodeError) as caught:
        codec.decode_documents(snippet)
    assert caught.value.field == "kind"
    assert "Pod" in caught.value.value
