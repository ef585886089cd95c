"""The chart installed on a Koordinator user's cluster, and koordpy running as it deploys it.

A cluster of this module's own (kwok kubelets, an audit log of every request) with
Koordinator's v1.8.0 CRDs installed, as a cluster with Koordinator has them, so the chart goes
in with ``crds.managed=false`` and the API server holds every Device and NodeMetric koordpy
writes to Koordinator's own schemas. ``helm install`` makes the service accounts, their
ClusterRoles and the ConfigMaps. Then, as the chart's pods would run them (there is no
container runtime here: kwok only plays the kubelets), the controller runs as a process with a
token of ``koordpy-controller`` and the ``controller.toml`` of the chart's ConfigMap, and one
agent per simulated node with a token of ``koordpy-agent`` (its QoS over a private kubepods
tree on this machine's real cgroup v1; its pods from a ``spec.nodeName`` watch, as there is no
kubelet to ask).

What a user relies on follows: the agents' Devices and the controller's NodeMetrics (their
status from the agents) exist and hold to the v1.8.0 schemas, the controller writes the GPU
resources into the Nodes and binds a GPU pod with its allocation, an agent evicts a BE pod
through the Eviction API once the ConfigMap turns evictions on, nothing either account asked
for was refused, and writes outside their grants are.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.cgroups import detect, paths
from agent.config import AgentConfig, CgroupSection
from apis import constants as k
from apis.qos import KubeQoS
from hack.kube import Cluster, start_cluster, stop_cluster
from hack.kube import paths as kube_paths
from tests.agent.realcgroups import kubepods_tree
from tests.crdschema import schema_errors, validator
from tests.kube.koordpy_process import (
    AgentProcess,
    ControllerProcess,
    account_kubeconfig,
    agent_config,
    bare_node,
    be_pod,
    create,
    eventually,
    evicted,
    get,
    when,
)

pytestmark = [pytest.mark.kube, pytest.mark.root]

NAMESPACE = "koordinator-system"
#: Node name -> the devices its agent simulates.
NODES: Mapping[str, str] = {"stack-h100": "nvidia-h100", "stack-ascend": "ascend-910b3"}
H100 = "stack-h100"
DEVICES = "/apis/scheduling.koordinator.sh/v1alpha1/devices"
NODEMETRICS = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics"
NODESLOS = "/apis/slo.koordinator.sh/v1alpha1/nodeslos"
SLO_CONFIG = f"/api/v1/namespaces/{NAMESPACE}/configmaps/slo-controller-config"
WORK = "stack-work"
ACCOUNTS = ("koordpy-agent", "koordpy-controller")


@dataclass
class Stack:
    cluster: Cluster
    controller: ControllerProcess
    agents: dict[str, AgentProcess]
    kubeconfigs: dict[str, Path]
    trees: dict[str, Any]
    infos: dict[str, detect.CgroupInfo]


def _configmap_text(cluster: Cluster, name: str, key: str) -> str:
    config = get(cluster, f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}")
    text: str = config["data"][key]
    return text


@pytest.fixture(scope="module")
def stack(
    kube_binaries: dict[str, str],
    shared_dir: Path,
    repo_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("stack")
    cluster = start_cluster(directory / "cluster", kwok=True, audit=True, timeout=90.0)
    processes: list[ControllerProcess | AgentProcess] = []
    try:
        crds = shared_dir / "koordinator-crds" / "v1.8.0"
        cluster.kubectl("apply", "--server-side", "-f", str(crds), timeout=120.0)
        listed = cluster.kubectl("get", "-f", str(crds), "-o", "name").stdout.split()
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *listed)
        helm = str(kube_paths.binary("helm"))
        chart = repo_root / "charts" / "koordpy"
        install = [helm, "--kubeconfig", str(cluster.kubeconfig), "install", "koordpy"]
        install += [str(chart), "--namespace", "default", "--wait=false"]
        install += ["--set", "crds.managed=false", "--set", "koordlet.podsSource=apiserver"]
        run_checked(install)
        for name in NODES:
            bare_node(cluster, name)
        for namespace in (WORK,):
            create(
                cluster,
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        kubeconfigs = {
            account: account_kubeconfig(cluster, directory / f"{account}.kubeconfig", account)
            for account in ACCOUNTS
        }
        controller = ControllerProcess(
            kubeconfigs["koordpy-controller"],
            directory,
            config=_configmap_text(cluster, "koordpy-controller-config", "controller.toml"),
        )
        processes.append(controller)
        with contextlib.ExitStack() as trees_open:
            trees = {name: trees_open.enter_context(kubepods_tree()) for name in NODES}
            infos = {}
            agents = {}
            for name, profile in NODES.items():
                tree = trees[name]
                cfg = AgentConfig(cgroup=CgroupSection(kubepods_parent=tree.parent))
                infos[name] = detect.detect(cfg.host, cfg.cgroup)
                for tier in (KubeQoS.BURSTABLE, KubeQoS.BEST_EFFORT):
                    tree.mkdir(paths.qos_dir(infos[name], tier))
                agents[name] = AgentProcess(
                    kubeconfigs["koordpy-agent"],
                    directory,
                    node=name,
                    config=agent_config(tree.parent, profile),
                )
                processes.append(agents[name])
            yield Stack(
                cluster=cluster,
                controller=controller,
                agents=agents,
                kubeconfigs=kubeconfigs,
                trees=trees,
                infos=infos,
            )
            for process in processes:
                process.stop()
    finally:
        for process in processes:
            process.stop()
            print(f"--- {process.name}\n{process.log()[-4000:]}")
        stop_cluster(directory / "cluster")


def run_checked(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_devices_and_nodemetrics_hold_to_koordinators_schemas(
    stack: Stack, shared_dir: Path
) -> None:
    devices = validator(shared_dir, "scheduling.koordinator.sh/Device")
    nodemetrics = validator(shared_dir, "slo.koordinator.sh/NodeMetric")
    for name in NODES:
        device = eventually(f"{name}'s Device", lambda n=name: _found(stack, f"{DEVICES}/{n}"))
        node_uid = get(stack.cluster, f"/api/v1/nodes/{name}")["metadata"]["uid"]
        assert device["metadata"]["ownerReferences"][0]["uid"] == node_uid
        assert schema_errors(devices, device) == []
        metric = eventually(
            f"{name}'s NodeMetric (the controller's) with a status (its agent's)",
            lambda n=name: _reported(stack, n),
        )
        # The controller's spec, from the chart's colocation-config.
        policy = metric["spec"]["metricCollectPolicy"]
        assert policy["reportIntervalSeconds"] == 60
        assert policy["aggregateDurationSeconds"] == 300
        assert metric["status"]["nodeMetric"]["nodeUsage"]["resources"]["cpu"]
        assert schema_errors(nodemetrics, metric) == []


def _found(stack: Stack, path: str) -> dict[str, Any] | None:
    status, body = stack.cluster.request("GET", path)
    return body if status == 200 else None


def _reported(stack: Stack, node: str) -> dict[str, Any] | None:
    metric = _found(stack, f"{NODEMETRICS}/{node}")
    if metric is None or not metric.get("status", {}).get("updateTime"):
        return None
    return metric


def test_the_controller_writes_gpu_resources_and_binds_a_gpu_pod_with_its_devices(
    stack: Stack,
) -> None:
    cluster = stack.cluster
    node = eventually(
        "the H100 node's GPU resources from its Device",
        when(
            cluster,
            f"/api/v1/nodes/{H100}",
            lambda n: k.RESOURCE_GPU_CORE in n["status"].get("allocatable", {}),
        ),
    )
    assert node["status"]["allocatable"][k.RESOURCE_GPU_CORE] == "800"
    assert node["metadata"]["labels"][k.LABEL_GPU_VENDOR] == "nvidia"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cuda-one", "namespace": WORK},
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda",
                    "resources": {
                        "limits": {k.RESOURCE_GPU_CORE: "100", k.RESOURCE_GPU_MEMORY_RATIO: "100"}
                    },
                }
            ],
        },
    }
    create(cluster, f"/api/v1/namespaces/{WORK}/pods", pod)
    bound = eventually(
        "the GPU pod bound",
        when(
            cluster,
            f"/api/v1/namespaces/{WORK}/pods/cuda-one",
            lambda p: bool(p["spec"].get("nodeName")),
        ),
    )
    assert bound["spec"]["nodeName"] == H100
    allocated = json.loads(bound["metadata"]["annotations"][k.ANNOTATION_DEVICE_ALLOCATED])
    [gpu] = allocated["gpu"]
    device = get(cluster, f"{DEVICES}/{H100}")
    assert gpu["minor"] in {d["minor"] for d in device["spec"]["devices"]}


def test_an_agent_evicts_a_be_pod_once_the_configmap_turns_evictions_on(stack: Stack) -> None:
    cluster = stack.cluster
    made = create(cluster, f"/api/v1/namespaces/{WORK}/pods", be_pod("be-batch", WORK, H100))
    uid = made["metadata"]["uid"]
    stack.trees[H100].mkdir(paths.pod_dir(stack.infos[H100], KubeQoS.BEST_EFFORT, uid))
    eventually(
        "the BE pod to run",
        when(
            cluster,
            f"/api/v1/namespaces/{WORK}/pods/be-batch",
            lambda p: p["status"].get("phase") == "Running",
        ),
    )
    # The chart's colocation is off: the node has no batch-cpu; evictions by it, switched on
    # in slo-controller-config, reach the agent as its NodeSLO.
    config = get(cluster, SLO_CONFIG)
    config["data"]["resource-threshold-config"] = json.dumps(
        {
            "clusterStrategy": {
                "enable": True,
                "cpuAllocatableEvictThresholdPercent": 110,
                "cpuAllocatableEvictLowerPercent": 100,
                "allocatableEvictPriorityThreshold": 5999,
            }
        }
    )
    status, body = cluster.request("PUT", SLO_CONFIG, config)
    assert status == 200, body

    event = eventually(
        "the agent's eviction of the BE pod", evicted(cluster, WORK, uid), timeout=90.0
    )
    assert event["source"]["component"] == "koordlet"
    assert event["source"]["host"] == H100


def test_nothing_asked_for_was_refused_and_what_is_not_granted_is(stack: Stack) -> None:
    cluster = stack.cluster
    # Let each component get through a few rounds first.
    eventually("the H100 node's NodeSLO", lambda: _found(stack, f"{NODESLOS}/{H100}"), timeout=60.0)
    theirs = [
        e
        for e in cluster.audit_events()
        if e.get("stage") == "ResponseComplete"
        and e.get("user", {}).get("username", "").rpartition(":")[2] in ACCOUNTS
    ]
    assert {e["user"]["username"].rpartition(":")[2] for e in theirs} == set(ACCOUNTS)
    refused = [
        f"{e['user']['username']} {e['verb']} {e.get('requestURI')}"
        for e in theirs
        if e.get("responseStatus", {}).get("code") == 403
    ]
    assert refused == []
    kubectl = str(kube_paths.binary("kubectl"))
    outside = {
        "koordpy-agent": [
            ["delete", "device", H100],
            ["label", "node", H100, "x=y"],
            ["delete", "pod", "-n", WORK, "cuda-one"],
            ["create", "configmap", "-n", NAMESPACE, "agent-made"],
        ],
        "koordpy-controller": [
            ["delete", "node", H100],
            ["delete", "device", H100],
            ["create", "secret", "generic", "-n", NAMESPACE, "controller-made"],
            ["create", "namespace", "controller-made"],
        ],
    }
    for account, commands in outside.items():
        for command in commands:
            done = subprocess.run(
                [kubectl, "--kubeconfig", str(stack.kubeconfigs[account]), *command],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode != 0, f"{account} may {command}"
            assert "forbidden" in done.stderr.lower(), done.stderr
    for process in (stack.controller, *stack.agents.values()):
        assert process.running(), process.log()[-3000:]
