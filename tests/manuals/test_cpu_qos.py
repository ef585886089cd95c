"""Manual page ``cpu-qos`` (koordinator-sh/website ``docs/user-manuals/cpu-qos.md``).

The page's ``resource-qos-config`` turns CPU QoS on for the LS class (group identity 2) and the
BE class (-1); ``ls-pod-demo`` (LS, Guaranteed) and ``be-pod-demo`` (BE, BestEffort) then read
``2`` and ``-1`` from their pod cgroup's ``cpu.bvt_warp_ns``. Here the NodeSLO that ConfigMap
renders to is handed to ``koordpy agent plan`` with the page's pods (as the kubelet lists them,
uid, node and phase added) on a cgroup v1 host with the systemd driver whose kernel has group
identity; the plan's writes are what the page reads back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.qos.settings import QoSSettings, SettingsError, from_nodeslo
from apis import codec
from apis.slo import NodeSLO
from tests.manuals.agent_plan import agent_host, as_listed, planned_writes

LS_UID = "1c20f2ad-5e31-4b0a-9d7e-2f4c6a8b0d11"
BE_UID = "4b6e96c8-7a19-4c2e-8f30-5d1b3e7a9c22"
CPU = "cpu,cpuacct"
KUBEPODS = "kubepods.slice"
BURSTABLE = f"{KUBEPODS}/kubepods-burstable.slice"
BESTEFFORT = f"{KUBEPODS}/kubepods-besteffort.slice"
LS_POD = f"{KUBEPODS}/kubepods-pod{LS_UID.replace('-', '_')}.slice"
BE_POD = f"{BESTEFFORT}/kubepods-besteffort-pod{BE_UID.replace('-', '_')}.slice"

#: What ``resource-qos-config``'s clusterStrategy renders to in the node's NodeSLO.
NODESLO = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeSLO
metadata:
  name: node-1
spec:
  resourceQOSStrategy:
    lsClass:
      cpuQOS:
        enable: true
        groupIdentity: 2
    beClass:
      cpuQOS:
        enable: true
        groupIdentity: -1
"""

LS_POD_DEMO = """
apiVersion: v1
kind: Pod
metadata:
  name: ls-pod-demo
  labels:
    koordinator.sh/qosClass: 'LS' # Set the QoS class of the pod to LS
spec:
  containers:
  - command:
    - "nginx"
    - "-g"
    - "daemon off; worker_processes 4;"
    image: docker.io/koordinatorsh/nginx:v1.18-koord-example
    imagePullPolicy: Always
    name: nginx
    resources:
      limits:
        cpu: "4"
        memory: 10Gi
      requests:
        cpu: "4"
        memory: 10Gi
  restartPolicy: Never
  schedulerName: default-scheduler
"""

BE_POD_DEMO = """
apiVersion: v1
kind: Pod
metadata:
  name: be-pod-demo
  labels:
    koordinator.sh/qosClass: 'BE' # Set the QoS class of the pod to BE.
spec:
  containers:
    - args:
        - '-c'
        - '1'
        - '--vm'
        - '1'
      command:
        - stress
      image: polinux/stress
      imagePullPolicy: Always
      name: stress
  restartPolicy: Always
  schedulerName: default-scheduler
  priorityClassName: koord-batch
"""


def plan(tmp_path: Path, nodeslo: str, pods: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """``koordpy agent plan -o json`` on a host whose kernel has group identity (every QoS
    tier's and pod's ``cpu.bvt_warp_ns`` at 0): (cgroup, file) -> the planned write."""
    host = agent_host(tmp_path)
    for directory in (KUBEPODS, BURSTABLE, BESTEFFORT, LS_POD, BE_POD):
        host.write_cgroup(f"{CPU}/{directory}", "cpu.bvt_warp_ns", "0\n")
    return {
        (w["cgroup"], Path(w["file"]).name): w
        for w in planned_writes(tmp_path, host, nodeslo, pods)
        if Path(w["file"]).name == "cpu.bvt_warp_ns"
    }


def desired(writes: dict[tuple[str, str], Any], cgroup: str) -> int:
    return int(writes[(cgroup, "cpu.bvt_warp_ns")]["desired"])


def test_the_ls_pod_gets_2_and_the_be_pod_gets_minus_1(tmp_path: Path) -> None:
    """Steps 1-8: the page's ConfigMap, ``ls-pod-demo`` and ``be-pod-demo``."""
    pods = [
        as_listed(LS_POD_DEMO, LS_UID, "Guaranteed"),
        as_listed(BE_POD_DEMO, BE_UID, "BestEffort"),
    ]
    writes = plan(tmp_path, NODESLO, pods)
    assert desired(writes, LS_POD) == 2
    assert desired(writes, BE_POD) == -1
    assert writes[(LS_POD, "cpu.bvt_warp_ns")]["current"] == "0"
    # the QoS tiers: burstable as LS, besteffort as BE, the Guaranteed root 0
    assert desired(writes, BURSTABLE) == 2
    assert desired(writes, BESTEFFORT) == -1
    assert (KUBEPODS, "cpu.bvt_warp_ns") not in writes  # already 0: nothing to change


def test_pods_without_the_label_follow_their_kubernetes_qos(tmp_path: Path) -> None:
    """The page's note: without ``koordinator.sh/qosClass`` a BestEffort pod takes the BE
    settings and any other pod the LS settings."""
    plain_ls = as_listed(
        LS_POD_DEMO.replace("koordinator.sh/qosClass: 'LS'", "app: web"), LS_UID, "Guaranteed"
    )
    plain_be = as_listed(
        BE_POD_DEMO.replace("koordinator.sh/qosClass: 'BE'", "app: batch"), BE_UID, "BestEffort"
    )
    writes = plan(tmp_path, NODESLO, [plain_ls, plain_be])
    assert desired(writes, LS_POD) == 2
    assert desired(writes, BE_POD) == -1


def test_a_class_with_cpu_qos_off_gets_0(tmp_path: Path) -> None:
    """``enable: false`` for the LS class: its pods are given no group identity (0)."""
    pods = [
        as_listed(LS_POD_DEMO, LS_UID, "Guaranteed"),
        as_listed(BE_POD_DEMO, BE_UID, "BestEffort"),
    ]
    writes = plan(
        tmp_path, NODESLO.replace("enable: true\n        groupIdentity: 2", "enable: false"), pods
    )
    assert (LS_POD, "cpu.bvt_warp_ns") not in writes  # 0 already
    assert desired(writes, BE_POD) == -1


def test_without_cpu_qos_nothing_is_written(tmp_path: Path) -> None:
    pods = [as_listed(LS_POD_DEMO, LS_UID, "Guaranteed")]
    assert plan(tmp_path, NODESLO.replace("enable: true", "enable: false"), pods) == {}


@pytest.mark.parametrize("value", [3, -2])
def test_a_group_identity_out_of_range_is_refused_naming_the_field(value: int) -> None:
    """The page's table: valid values are -1 to 2."""
    [slo] = codec.decode_documents(NODESLO.replace("groupIdentity: 2", f"groupIdentity: {value}"))
    assert isinstance(slo, NodeSLO)
    with pytest.raises(
        SettingsError, match=r"spec\.resourceQOSStrategy\.lsClass\.cpuQOS\.groupIdentity"
    ):
        from_nodeslo(slo.spec, QoSSettings())
