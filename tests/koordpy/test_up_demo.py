"""``koordpy up --demo`` as a user sees it through the CLI: the Deployment of
``examples/reservation-deployment.yaml`` runs in its reservation (the resource reservation
manual's "Reserve on Specified Node, with Multiple Owners"), ``examples/slo-controller-config.yaml``
becomes one NodeSLO per node that this host's agent enforces, and the scheduler's
``DevicePluginAdaption`` gate, set in its ConfigMap, reaches the MetaX example pod."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from apis import constants as k
from apis.slo import COLOCATION_EXTENSION
from koordpy.up import DEMO_ADDRESSES, DEMO_CAPACITY_TYPES, DEMO_NODES
from tests.koordpy.daemons import Daemon, cli, running_up

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).parents[2] / "examples"
HOST = "test-host"
T = TypeVar("T")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One ``koordpy up --demo`` for the tests that only read what the demo shows."""
    with running_up(tmp_path_factory.mktemp("demo"), "--demo") as up:
        yield up
        assert up.stop(signal.SIGTERM) == 0


def get_json(api: str, *args: str) -> Any:
    got = cli(api, "get", *args, "-o", "json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def eventually(probe: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """``probe()`` once it is not None, polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while (found := probe()) is None:
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.5)
    return found


# --- the Deployment in its reservation ----------------------------------------------------


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions", [])
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def _controlled_by(obj: dict[str, Any], kind: str, name: str) -> bool:
    return any(
        ref["kind"] == kind and ref["name"] == name and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences", [])
    )


def test_the_deployment_runs_in_its_reservation(demo: Daemon) -> None:
    """The page's steps 3 to 6: ``reservation-demo-big`` is Available on the node its template
    names, both replicas of ``app-demo`` are Running and Ready there, each names the
    reservation in ``scheduling.koordinator.sh/reservation-allocated``, and the reservation
    lists them as its current owners with 4 CPU / 20Gi of its 6 CPU / 20Gi allocated. The pods
    report the address of the simulated node."""
    [manifest, deployment_manifest] = yaml.safe_load_all(
        (EXAMPLES / "reservation-deployment.yaml").read_text("utf-8")
    )
    wanted = deployment_manifest["spec"]["replicas"]

    def settled() -> list[dict[str, Any]] | None:
        listing = get_json(demo.api, "deploy,rs,pods", "-n", "default")["items"]
        [deployment] = [
            o for o in listing if o["kind"] == "Deployment" and o["metadata"]["name"] == "app-demo"
        ]
        sets = [o for o in listing if o["kind"] == "ReplicaSet"]
        mine = [s for s in sets if _controlled_by(s, "Deployment", "app-demo")]
        names = {s["metadata"]["name"] for s in mine}
        pods = [
            o
            for o in listing
            if o["kind"] == "Pod" and any(_controlled_by(o, "ReplicaSet", n) for n in names)
        ]
        if deployment["status"].get("readyReplicas") != wanted or len(pods) != wanted:
            return None
        return pods if all(_ready(p) for p in pods) else None

    pods = eventually(settled, "app-demo's replicas Running and Ready")
    reservation = get_json(demo.api, "reservation", "reservation-demo-big")
    status = reservation["status"]
    assert status["phase"] == "Available"
    assert status["nodeName"] == manifest["spec"]["template"]["spec"]["nodeName"]
    expected = {"name": "reservation-demo-big", "uid": reservation["metadata"]["uid"]}
    for pod in pods:
        assert pod["metadata"]["labels"]["app"] == "app-demo"
        assert pod["spec"]["nodeName"] == status["nodeName"]
        # The simulated node's InternalIP, as kubectl -o wide shows it.
        address = DEMO_ADDRESSES[status["nodeName"]]
        assert pod["status"]["hostIP"] == pod["status"]["podIP"] == address
        allocated = pod["metadata"]["annotations"][k.ANNOTATION_RESERVATION_ALLOCATED]
        assert json.loads(allocated) == expected
    owners = sorted((o["namespace"], o["name"], o["uid"]) for o in status["currentOwners"])
    assert owners == sorted(
        (p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"]) for p in pods
    )
    assert status["allocatable"] == {"cpu": "6", "memory": "20Gi"}
    assert status["allocated"] == {"cpu": "4", "memory": "20Gi"}


# --- the SLO configuration --------------------------------------------------------------


def _slo_config() -> dict[str, Any]:
    """examples/slo-controller-config.yaml's keys, decoded."""
    doc = yaml.safe_load((EXAMPLES / "slo-controller-config.yaml").read_text("utf-8"))
    return {key: json.loads(value) for key, value in doc["data"].items()}


def _for_node(
    cluster: dict[str, Any], overrides: list[dict[str, Any]], labels: dict[str, str]
) -> dict[str, Any]:
    """The cluster values with those of the first override whose selector matches ``labels``
    over them (koord-manager's rule; the example selects by ``matchLabels`` only)."""
    for override in overrides:
        selector = override["nodeSelector"]
        assert set(selector) == {"matchLabels"}, selector
        if selector["matchLabels"].items() <= labels.items():
            extra = {n: v for n, v in override.items() if n not in ("name", "nodeSelector")}
            return {**cluster, **extra}
    return cluster


def _node_labels(api: str) -> dict[str, dict[str, str]]:
    items = get_json(api, "nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in items}


def test_every_node_gets_a_nodeslo_rendered_from_the_configmap(demo: Daemon) -> None:
    """Each node's NodeSLO carries the ConfigMap's BE thresholds and colocation strategy,
    the node-selected overrides (``reserved``: suppress at 55 %; ``on-demand``: lower reclaim
    thresholds) over the cluster values."""
    config = _slo_config()
    thresholds, colocation = config["resource-threshold-config"], config["colocation-config"]
    labels = _node_labels(demo.api)
    assert sorted(labels) == sorted([HOST, *DEMO_NODES])
    for name, capacity_type in DEMO_CAPACITY_TYPES.items():
        assert labels[name]["karpenter.sh/capacity-type"] == capacity_type

    def rendered() -> dict[str, Any] | None:
        slos = {s["metadata"]["name"]: s for s in get_json(demo.api, "nodeslos")["items"]}
        return slos if set(slos) == set(labels) else None

    slos = eventually(rendered, "a NodeSLO per node")
    suppress_at = set()
    for name, node_labels in labels.items():
        spec = slos[name]["spec"]
        want = _for_node(thresholds["clusterStrategy"], thresholds["nodeStrategies"], node_labels)
        got = spec["resourceUsedThresholdWithBE"]
        assert {key: got.get(key) for key in want} == want, name
        suppress_at.add(got["cpuSuppressThresholdPercent"])
        cluster = {n: v for n, v in colocation.items() if n != "nodeConfigs"}
        want = _for_node(cluster, colocation["nodeConfigs"], node_labels)
        got = spec["extensions"][COLOCATION_EXTENSION]
        assert {key: got.get(key) for key in want} == want, name
    # Both the cluster value and the reserved nodes' override are in force somewhere.
    assert len(suppress_at) == 2, suppress_at


def _agent_samples(daemon: Daemon, node: str) -> dict[str, list[Sample]]:
    """This node's series on the agent endpoint, by name."""
    [line] = [line for line in daemon.stdout if "agent metrics" in line]
    with urllib.request.urlopen(line.split()[-1], timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("node") == node:
                samples.setdefault(sample.name, []).append(sample)
    return samples


def _suppressing(daemon: Daemon) -> dict[str, list[Sample]] | None:
    samples = _agent_samples(daemon, HOST)
    return samples if "koordlet_be_suppress_ls_used_cpu_cores" in samples else None


def test_this_hosts_agent_enforces_the_nodeslo(demo: Daemon) -> None:
    """The agent of this host received its NodeSLO: it suppresses BE CPU (on only through the
    ConfigMap; v1.8's default leaves it off) with the policy the ConfigMap names."""
    policy = _slo_config()["resource-threshold-config"]["clusterStrategy"]["cpuSuppressPolicy"]
    samples = eventually(lambda: _suppressing(demo), "BE suppress gauges on the agent endpoint")
    types = {s.labels.get("type") for s in samples.get("koordlet_be_suppress_cpu_cores", [])}
    assert types == {policy}


def test_the_configmap_turns_the_agents_suppress_on(tmp_path: Path) -> None:
    """Without the demo's objects this host's agent runs its QoS loop with BE suppress off;
    applying the example ConfigMap turns it on (the NodeSLO reaches the agent in place)."""
    with running_up(tmp_path) as up:
        eventually(
            lambda: _agent_samples(up, HOST).get("koordlet_cpuset_share_pool_cpu_cores"),
            "the QoS loop's first pass",
        )
        assert _suppressing(up) is None
        applied = cli(up.api, "apply", "-f", str(EXAMPLES / "slo-controller-config.yaml"))
        assert applied.returncode == 0, applied.stderr
        eventually(lambda: _suppressing(up), "BE suppress after the ConfigMap")
        assert up.stop() == 0


# --- DevicePluginAdaption ---------------------------------------------------------------

GATE = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: koord-scheduler-config
  namespace: koordinator-system
data:
  feature-gates: DevicePluginAdaption=true
"""


def _metax_pod(api: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = get_json(api, "pod", "test-metax-sgpu")
    return pod if pod["spec"].get("nodeName") and _ready(pod) else None


def test_the_gate_in_the_scheduler_configmap_writes_the_metax_annotation(tmp_path: Path) -> None:
    """The demo's MetaX sGPU pod (examples/metax-sgpu.yaml) is placed with Koordinator's
    allocation only (v1.8's default gates); with ``feature-gates: DevicePluginAdaption=true``
    in koord-scheduler's ConfigMap the same pod, applied again, also gets what MetaX's device
    plugin reads."""
    with running_up(tmp_path, "--demo") as up:
        before = eventually(lambda: _metax_pod(up.api), "the MetaX pod placed")
        annotations = before["metadata"]["annotations"]
        assert json.loads(annotations[k.ANNOTATION_DEVICE_ALLOCATED])["gpu"]
        assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED not in annotations

        gated = cli(up.api, "apply", "-f", "-", stdin=GATE)
        assert gated.returncode == 0, gated.stderr
        assert cli(up.api, "delete", "pod", "test-metax-sgpu").returncode == 0
        again = cli(up.api, "apply", "-f", str(EXAMPLES / "metax-sgpu.yaml"))
        assert again.returncode == 0, again.stderr
        after = eventually(lambda: _metax_pod(up.api), "the MetaX pod placed again")
        assert after["metadata"]["uid"] != before["metadata"]["uid"]
        annotations = after["metadata"]["annotations"]
        [[card]] = json.loads(annotations[k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED])
        [allocated] = json.loads(annotations[k.ANNOTATION_DEVICE_ALLOCATED])["gpu"]
        assert card == {"uuid": allocated["id"], "compute": 10, "vRam": 1024}
        assert after["spec"]["nodeName"] == "demo-metax-c500"
        assert up.stop() == 0
