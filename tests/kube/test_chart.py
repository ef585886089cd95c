"""The Helm chart ``charts/koordpy``: what it renders, and what a cluster makes of it.

``helm lint`` and ``helm template`` run with the defaults, with every option on, with every
option off, and with the CRDs not kept; the rendered objects are held to what a user relies
on: the agent DaemonSet privileged on the host's PID and network namespaces with its host
mounts, the controller Deployment's two replicas, monitors only when asked for, CRDs only when
managed (and then exactly ``koordpy crds``'s, kept by ``helm uninstall``), and every
configuration the chart renders (agent.toml, controller.toml, slo-controller-config,
koord-scheduler-config, koord-descheduler-config) read by koordpy's own loaders as the
daemons read them. The chart's RBAC is held equal to ``deploy/rbac/``'s files.

Then a cluster of this module's own (the chart makes cluster-wide objects: CRDs, priority
classes, ClusterRoles) takes the rendered objects in a server-side dry run, and the chart is
installed, upgraded and uninstalled for real: nothing it made is left but the CRDs it keeps.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from agent import config as agent_config
from apis import codec
from apis.core import Pod
from apis.qos import priority_class
from controller import config as controller_config
from controller.descheduler import config as descheduler_config
from controller.scheduler import config as scheduler_config
from controller.slo import config as slo_config
from hack.kube import Cluster, MissingBinariesError, paths, start_cluster, stop_cluster
from tests.conftest import REPO_ROOT
from tests.controller.descheduler.test_config import SHIPPED as KOORDINATOR_DESCHEDULER
from tests.controller.scheduler.test_config import CHART as KOORDINATOR_SCHEDULER

pytestmark = pytest.mark.kube

CHART: Final = REPO_ROOT / "charts" / "koordpy"
RELEASE: Final = "koordpy"
NAMESPACE: Final = "koordinator-system"
#: Stand-ins for the Prometheus operator's CRDs (the test cluster has no operator).
MONITORING_CRDS: Final = REPO_ROOT / "tests" / "data" / "kube" / "monitoring-crds.yaml"
#: How long a test waits for the cluster to finish a deletion.
WAIT: Final = 90.0

#: Every option on: both PodMonitors and the ServiceMonitor, CRDs, priority classes and
#: koord-manager's duties (the defaults), and the agent's and controller's settings moved.
ON: Final[Mapping[str, Any]] = {
    "koordlet": {
        "enableServiceMonitor": True,
        "podsSource": "apiserver",
        "kubeletInsecureTLS": False,
        "metrics": {"port": 9400},
        "extraConfig": "[qos]\ninterval = 2.0\n",
    },
    "manager": {
        "replicas": 3,
        "metrics": {"port": 9500},
        "extraConfig": "[queueing]\nstatus_interval = 30.0\n",
    },
    "scheduler": {"monitorEnabled": True, "enableJobPreemption": False},
    "descheduler": {"monitorEnabled": True},
}
#: Every option off: what a cluster with Koordinator installed beside koordpy keeps its own.
OFF: Final[Mapping[str, Any]] = {
    "installation": {"createNamespace": False},
    "crds": {"managed": False},
    "koordlet": {"enabled": False},
    "manager": {"duties": False},
    "scheduler": {"createConfig": False},
    "descheduler": {"createConfig": False},
    "priorityClasses": {"enabled": False},
}
UNKEPT: Final[Mapping[str, Any]] = {"crds": {"keep": False}}
ELSEWHERE: Final[Mapping[str, Any]] = {"installation": {"namespace": "koord-elsewhere"}}
VALUES: Final[Mapping[str, Mapping[str, Any]]] = {
    "defaults": {},
    "on": ON,
    "off": OFF,
    "unkept": UNKEPT,
    "elsewhere": ELSEWHERE,
}

#: (kind, name) of what the defaults make, beside koordpy's CRDs.
DEFAULT_OBJECTS: Final = frozenset(
    {
        ("Namespace", NAMESPACE),
        ("PriorityClass", "koord-prod"),
        ("PriorityClass", "koord-mid"),
        ("PriorityClass", "koord-batch"),
        ("PriorityClass", "koord-free"),
        ("ServiceAccount", "koordpy-agent"),
        ("ClusterRole", "koordpy-agent"),
        ("ClusterRoleBinding", "koordpy-agent"),
        ("ConfigMap", "koordpy-agent-config"),
        ("DaemonSet", "koordpy-agent"),
        ("Service", "koordpy-agent"),
        ("ServiceAccount", "koordpy-controller"),
        ("ClusterRole", "koordpy-controller"),
        ("ClusterRoleBinding", "koordpy-controller"),
        ("Role", "koordpy-controller"),
        ("RoleBinding", "koordpy-controller"),
        ("ConfigMap", "koordpy-controller-config"),
        ("Deployment", "koordpy-controller"),
        ("Service", "koordpy-controller"),
        ("ConfigMap", "koord-scheduler-config"),
        ("ConfigMap", "koord-descheduler-config"),
        ("ConfigMap", "slo-controller-config"),
    }
)
MONITORS: Final = frozenset(
    {
        ("PodMonitor", "koord-scheduler-metrics-podmonitor"),
        ("PodMonitor", "koord-descheduler-metrics-podmonitor"),
        ("ServiceMonitor", "koordpy-agent"),
    }
)
#: What the OFF values leave out (beside the CRDs).
LEFT_OUT_BY_OFF: Final = frozenset(
    {
        ("Namespace", NAMESPACE),
        ("PriorityClass", "koord-prod"),
        ("PriorityClass", "koord-mid"),
        ("PriorityClass", "koord-batch"),
        ("PriorityClass", "koord-free"),
        ("ServiceAccount", "koordpy-agent"),
        ("ClusterRole", "koordpy-agent"),
        ("ClusterRoleBinding", "koordpy-agent"),
        ("ConfigMap", "koordpy-agent-config"),
        ("DaemonSet", "koordpy-agent"),
        ("Service", "koordpy-agent"),
        ("ConfigMap", "koord-scheduler-config"),
        ("ConfigMap", "koord-descheduler-config"),
        ("ConfigMap", "slo-controller-config"),
    }
)
#: What the agent's ClusterRole grants, (group, resource, verb) by (group, resource, verb).
AGENT_GRANTS: Final = frozenset(
    {
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "nodes/proxy", "get"),
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("", "events", "create"),
        ("scheduling.koordinator.sh", "devices", "get"),
        ("scheduling.koordinator.sh", "devices", "create"),
        ("scheduling.koordinator.sh", "devices", "update"),
        ("slo.koordinator.sh", "nodemetrics", "get"),
        ("slo.koordinator.sh", "nodemetrics", "list"),
        ("slo.koordinator.sh", "nodemetrics", "watch"),
        ("slo.koordinator.sh", "nodemetrics/status", "update"),
        ("slo.koordinator.sh", "nodeslos", "get"),
        ("slo.koordinator.sh", "nodeslos", "list"),
        ("slo.koordinator.sh", "nodeslos", "watch"),
    }
)

Key = tuple[str, str]
#: Kinds of the chart's objects that have no namespace.
CLUSTER_SCOPED: Final = frozenset(
    {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
)


# --- helm ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> str:
    """helm's path; fails (never skips) naming `make kube-bin` when it is missing."""
    try:
        return str(paths.binary("helm"))
    except MissingBinariesError as error:
        missing = str(error)
    pytest.fail(missing, pytrace=False)


def run(argv: Sequence[str], *, check: bool = True, timeout: float = 120.0) -> str:
    """Run ``argv``; its stdout and stderr together (a failure shows them)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    output = done.stdout + done.stderr
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(argv[:3])}... exited {done.returncode}:\n{output}")
    return output


def values_file(directory: Path, name: str, values: Mapping[str, Any]) -> Path:
    path = directory / f"{name}.values.json"
    path.write_text(json.dumps(values))
    return path


#: libyaml's safe loader where PyYAML has it: the CRDs are 280 kB of YAML a render.
SAFE_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=SAFE_LOADER) if doc]


def template(helm: str, values: Path) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``values``: its objects."""
    return load_docs(
        run([helm, "template", RELEASE, str(CHART), "--namespace", "default", "-f", str(values)])
    )


def by_key(docs: Sequence[Mapping[str, Any]]) -> dict[Key, dict[str, Any]]:
    found: dict[Key, dict[str, Any]] = {}
    for doc in docs:
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in found, f"{key} rendered twice"
        found[key] = dict(doc)
    return found


@pytest.fixture(scope="module")
def values_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("chart-values")
    for name, values in VALUES.items():
        values_file(directory, name, values)
    return directory


@pytest.fixture(scope="module")
def renders(helm: str, values_dir: Path) -> dict[str, dict[Key, dict[str, Any]]]:
    """Each of :data:`VALUES` rendered: (kind, name) -> object."""
    return {name: by_key(template(helm, values_dir / f"{name}.values.json")) for name in VALUES}


@functools.cache
def generated_crds() -> str:
    """What ``koordpy crds -o yaml`` prints."""
    return run([sys.executable, "-m", "koordpy", "crds", "-o", "yaml"])


@functools.cache
def crd_names() -> frozenset[str]:
    """The names of the CRDs the chart ships (files/crds.yaml)."""
    text = (CHART / "files" / "crds.yaml").read_text()
    return frozenset(doc["metadata"]["name"] for doc in load_docs(text))


def crds_of(rendered: Mapping[Key, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {
        name: doc for (kind, name), doc in rendered.items() if kind == "CustomResourceDefinition"
    }


def others(rendered: Mapping[Key, Any]) -> frozenset[Key]:
    return frozenset(key for key in rendered if key[0] != "CustomResourceDefinition")


# --- lint ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(VALUES))
def test_helm_lint_is_clean(helm: str, values_dir: Path, name: str) -> None:
    output = run(
        [helm, "lint", "--strict", str(CHART), "-f", str(values_dir / f"{name}.values.json")]
    )
    assert "1 chart(s) linted, 0 chart(s) failed" in output, output
    assert "[WARNING]" not in output, output
    assert "[ERROR]" not in output, output


# --- what is rendered ------------------------------------------------------------------------


def test_the_defaults_make_the_agent_the_controller_and_koordinators_objects(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    rendered = renders["defaults"]
    assert others(rendered) == DEFAULT_OBJECTS
    assert set(crds_of(rendered)) == crd_names()
    for (kind, name), doc in rendered.items():
        namespace = doc["metadata"].get("namespace")
        assert namespace == (None if kind in CLUSTER_SCOPED else NAMESPACE), (kind, name)
        if kind != "CustomResourceDefinition":  # the generator's, as they are
            assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, kind


def test_the_chart_is_koordpys_version_and_its_image_tag_follows(
    renders: dict[str, dict[Key, dict[str, Any]]], helm: str, tmp_path: Path
) -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == project["version"]
    for key in (("DaemonSet", "koordpy-agent"), ("Deployment", "koordpy-controller")):
        (container,) = renders["defaults"][key]["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"koordpy:{project['version']}", key
        assert container["imagePullPolicy"] == "IfNotPresent", key
    values = {"image": {"repository": "registry.example/koordpy", "tag": "dev"}}
    rendered = by_key(template(helm, values_file(tmp_path, "image", values)))
    (container,) = rendered[("DaemonSet", "koordpy-agent")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["image"] == "registry.example/koordpy:dev"


def test_a_changed_config_rolls_the_pods_that_read_it(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    """Each daemon reads its config once, at start: the pod template carries its digest."""
    for workload, config_map, key in (
        (("DaemonSet", "koordpy-agent"), "koordpy-agent-config", "agent.toml"),
        (("Deployment", "koordpy-controller"), "koordpy-controller-config", "controller.toml"),
    ):
        digests = set()
        for name in ("defaults", "on"):
            rendered = renders[name]
            text = rendered[("ConfigMap", config_map)]["data"][key]
            pod = rendered[workload]["spec"]["template"]
            digest = pod["metadata"]["annotations"]["koordpy.io/config-sha256"]
            assert digest == hashlib.sha256(text.rstrip("\n").encode()).hexdigest(), workload
            digests.add(digest)
        assert len(digests) == 2, workload


def test_every_option_on_adds_the_monitors(renders: dict[str, dict[Key, dict[str, Any]]]) -> None:
    assert others(renders["on"]) == DEFAULT_OBJECTS | MONITORS
    assert set(crds_of(renders["on"])) == crd_names()


def test_every_option_off_leaves_koordinators_own_objects_alone(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    assert others(renders["off"]) == DEFAULT_OBJECTS - LEFT_OUT_BY_OFF
    assert crds_of(renders["off"]) == {}


def test_the_agent_runs_privileged_in_the_hosts_namespaces_with_its_host_mounts(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    daemonset = renders["defaults"][("DaemonSet", "koordpy-agent")]
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["spec"]["selector"]["matchLabels"] == {"koord-app": "koordpy-agent"}
    assert daemonset["spec"]["template"]["metadata"]["labels"]["koord-app"] == "koordpy-agent"
    assert pod["hostPID"] is True
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["serviceAccountName"] == "koordpy-agent"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is True
    assert container["command"] == [
        "koordpy",
        "agent",
        "run",
        "--config",
        "/etc/koordpy/agent.toml",
    ]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in (
        container["env"]
    )
    assert container["ports"] == [{"name": "metrics", "containerPort": 9316, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        source = volume["hostPath"]["path"] if "hostPath" in volume else volume["configMap"]["name"]
        mounts[mount["mountPath"]] = (source, mount.get("readOnly", False))
    assert mounts == {
        "/etc/koordpy/": ("koordpy-agent-config", True),
        "/host-cgroup/": ("/sys/fs/cgroup/", False),
        "/var/run": ("/var/run", False),
        "/var/lib/kubelet": ("/var/lib/kubelet", True),
        "/dev": ("/dev", False),
        "/sys": ("/sys", False),
    }


def agent_toml(rendered: Mapping[Key, Mapping[str, Any]], directory: Path) -> Any:
    """The rendered agent.toml, through the agent's own strict loader."""
    path = directory / "agent.toml"
    path.write_text(rendered[("ConfigMap", "koordpy-agent-config")]["data"]["agent.toml"])
    return agent_config.load(path)


def test_the_agent_toml_is_what_the_agents_loader_reads(
    renders: dict[str, dict[Key, dict[str, Any]]], tmp_path: Path
) -> None:
    cfg = agent_toml(renders["defaults"], tmp_path)
    assert cfg.report.transport == "kubernetes"
    assert cfg.kubernetes.kubeconfig == ""
    assert cfg.cgroup.root == "/host-cgroup"
    assert cfg.pods.source == "kubelet"
    assert cfg.pods.kubelet_insecure_tls  # as koordlet: kubelets' certificates are self-signed
    assert cfg.metrics.address == ":9316"
    moved = agent_toml(renders["on"], tmp_path)
    assert moved.pods.source == "apiserver"
    assert not moved.pods.kubelet_insecure_tls
    assert moved.metrics.address == ":9400"
    assert moved.qos.interval == 2.0  # koordlet.extraConfig, appended
    (container,) = renders["on"][("DaemonSet", "koordpy-agent")]["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["ports"][0]["containerPort"] == 9400
    service = renders["on"][("Service", "koordpy-agent")]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]


def test_a_pods_source_the_agent_does_not_know_fails_the_render(helm: str, tmp_path: Path) -> None:
    values = values_file(tmp_path, "bad", {"koordlet": {"podsSource": "file"}})
    output = run([helm, "template", RELEASE, str(CHART), "-f", str(values)], check=False)
    assert 'koordlet.podsSource: "file" is neither "kubelet" nor "apiserver"' in output


def test_the_controller_is_one_deployment_of_two_replicas(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    deployment = renders["defaults"][("Deployment", "koordpy-controller")]
    assert deployment["metadata"]["labels"]["koord-app"] == "koordpy-controller"
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"]["matchLabels"] == {"koord-app": "koordpy-controller"}
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["template"]["metadata"]["labels"]["koord-app"] == (
        "koordpy-controller"
    )
    assert pod["serviceAccountName"] == "koordpy-controller"
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["command"] == [
        "koordpy",
        "controller",
        "run",
        "--in-cluster",
        "--config",
        "/etc/koordpy/controller.toml",
    ]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9317, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}, probe
    config = {v["name"]: v for v in pod["volumes"]}["config"]
    assert config["configMap"]["name"] == "koordpy-controller-config"
    assert {"name": "config", "mountPath": "/etc/koordpy/", "readOnly": True} in (
        container["volumeMounts"]
    )
    service = renders["defaults"][("Service", "koordpy-controller")]
    assert service["spec"]["selector"] == {"koord-app": "koordpy-controller"}
    assert service["spec"]["ports"][0]["name"] == "metrics"
    assert renders["on"][("Deployment", "koordpy-controller")]["spec"]["replicas"] == 3


def controller_toml(rendered: Mapping[Key, Mapping[str, Any]], directory: Path) -> Any:
    """The rendered controller.toml, through the controller's own strict loader."""
    path = directory / "controller.toml"
    data = rendered[("ConfigMap", "koordpy-controller-config")]["data"]
    path.write_text(data["controller.toml"])
    return controller_config.load(str(path))


def test_the_controller_toml_is_what_the_controllers_loader_reads(
    renders: dict[str, dict[Key, dict[str, Any]]], tmp_path: Path
) -> None:
    cfg = controller_toml(renders["defaults"], tmp_path)
    assert cfg.kubernetes.lease_namespace == NAMESPACE
    assert cfg.kubernetes.config_namespace == NAMESPACE
    assert cfg.kubernetes.manager_duties is True
    assert cfg.kubernetes.leader_elect is True
    assert cfg.metrics.address == ":9317"
    moved = controller_toml(renders["on"], tmp_path)
    assert moved.metrics.address == ":9500"
    assert moved.queueing.status_interval == 30.0  # manager.extraConfig, appended
    assert controller_toml(renders["off"], tmp_path).kubernetes.manager_duties is False
    elsewhere = controller_toml(renders["elsewhere"], tmp_path)
    assert elsewhere.kubernetes.lease_namespace == "koord-elsewhere"
    assert elsewhere.kubernetes.config_namespace == "koord-elsewhere"


def test_the_monitors_scrape_the_metrics_ports_every_30s(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    rendered = renders["on"]
    controller_labels = rendered[("Deployment", "koordpy-controller")]["spec"]["template"][
        "metadata"
    ]["labels"]
    for name in ("koord-scheduler-metrics-podmonitor", "koord-descheduler-metrics-podmonitor"):
        monitor = rendered[("PodMonitor", name)]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector == {"koord-app": "koordpy-controller"}
        assert selector.items() <= controller_labels.items()
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert monitor["spec"]["podMetricsEndpoints"] == [
            {"port": "metrics", "path": "/metrics", "interval": "30s"}
        ]
    service = rendered[("Service", "koordpy-agent")]
    monitor = rendered[("ServiceMonitor", "koordpy-agent")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert service["spec"]["clusterIP"] == "None"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]
    assert service["spec"]["ports"][0]["name"] == "metrics"


def test_the_committed_crds_are_what_koordpy_crds_prints() -> None:
    committed = (CHART / "files" / "crds.yaml").read_text()
    assert committed == generated_crds(), (
        "charts/koordpy/files/crds.yaml is stale: "
        "python -m koordpy crds -o yaml > charts/koordpy/files/crds.yaml"
    )


def test_the_crds_are_koordpys_kept_by_helm_uninstall_unless_told(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    generated = {doc["metadata"]["name"]: doc for doc in load_docs(generated_crds())}
    assert len(generated) >= 10
    for name, expected in generated.items():
        kept = json.loads(json.dumps(crds_of(renders["defaults"])[name]))
        unkept = json.loads(json.dumps(crds_of(renders["unkept"])[name]))
        assert kept["metadata"]["annotations"].pop("helm.sh/resource-policy") == "keep"
        if not kept["metadata"]["annotations"]:
            del kept["metadata"]["annotations"]
        assert kept == expected, name
        assert unkept == expected, name


def test_the_priority_classes_fall_in_koordinators_bands(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    classes = {
        name: doc for (kind, name), doc in renders["defaults"].items() if kind == "PriorityClass"
    }
    assert {name: doc["value"] for name, doc in classes.items()} == {
        "koord-prod": 9000,
        "koord-mid": 7000,
        "koord-batch": 5000,
        "koord-free": 3000,
    }
    for name, doc in classes.items():
        assert doc["globalDefault"] is False
        # A pod of the class carries its value as spec.priority: koordpy reads the class back.
        pod = codec.decode_as({"metadata": {"name": "p"}, "spec": {"priority": doc["value"]}}, Pod)
        assert priority_class(pod) == name


def test_slo_controller_config_is_koord_managers_defaults(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    data = renders["defaults"][("ConfigMap", "slo-controller-config")]["data"]
    assert set(data) == {
        slo_config.COLOCATION_KEY,
        slo_config.RESOURCE_THRESHOLD_KEY,
        slo_config.RESOURCE_QOS_KEY,
        slo_config.CPU_BURST_KEY,
        slo_config.SYSTEM_KEY,
        slo_config.HOST_APPLICATION_KEY,
    }
    for key, text in data.items():
        parsed = slo_config.parse_key(key, text)
        assert parsed.unknown == (), (key, parsed.unknown)
        assert parsed.nodes == (), key
        assert parsed.cluster == slo_config.parse_key(key, None).cluster, key
    colocation = slo_config.parse_key(slo_config.COLOCATION_KEY, data[slo_config.COLOCATION_KEY])
    assert colocation.cluster.enable is False
    threshold = slo_config.RESOURCE_THRESHOLD_KEY
    assert slo_config.parse_key(threshold, data[threshold]).cluster.enable is False


def test_an_slo_key_set_in_the_values_reaches_koord_manager(helm: str, tmp_path: Path) -> None:
    colocation = '{"enable": true, "cpuReclaimThresholdPercent": 70}'
    values = {"sloConfig": {"colocation-config": colocation, "host-application-config": ""}}
    rendered = by_key(template(helm, values_file(tmp_path, "slo", values)))
    data = rendered[("ConfigMap", "slo-controller-config")]["data"]
    assert slo_config.HOST_APPLICATION_KEY not in data  # emptied: left out
    parsed = slo_config.parse_key(slo_config.COLOCATION_KEY, data[slo_config.COLOCATION_KEY])
    assert parsed.cluster.enable is True
    assert parsed.cluster.cpu_reclaim_threshold_percent == 70


def scheduler_text(rendered: Mapping[Key, Mapping[str, Any]]) -> str:
    return str(rendered[("ConfigMap", "koord-scheduler-config")]["data"]["koord-scheduler-config"])


def test_koord_scheduler_config_is_koordinators_chart_read_by_koordpys_scheduler(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    # Job preemption off: the configuration Koordinator's chart installs, to the letter.
    shipped = scheduler_config.load_configuration(KOORDINATOR_SCHEDULER)
    without = scheduler_config.load_configuration(scheduler_text(renders["on"]))
    assert without.document == shipped.document
    # On (the default): Coscheduling's own preemption in place of DefaultPreemption.
    config = scheduler_config.load_configuration(scheduler_text(renders["defaults"]))
    (profile,) = config.document.profiles
    assert profile.scheduler_name == "koord-scheduler"
    assert profile.plugins is not None
    post_filter = [p.name for p in profile.plugins.post_filter.enabled]
    assert post_filter == ["Reservation", "Coscheduling", "ElasticQuota"]
    coscheduling = {e.name: e.args for e in profile.plugin_config}["Coscheduling"]
    assert coscheduling is not None
    assert coscheduling["enablePreemption"] is True
    assert config.profiles[0].scheduler_names == ("koord-scheduler", "default-scheduler")


def descheduler_text(rendered: Mapping[Key, Mapping[str, Any]]) -> str:
    data = rendered[("ConfigMap", "koord-descheduler-config")]["data"]
    return str(data["koord-descheduler-config"])


def test_koord_descheduler_config_is_koordinators_chart_read_by_koordpys_descheduler(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    shipped = descheduler_config.load_configuration(KOORDINATOR_DESCHEDULER)
    config = descheduler_config.load_configuration(descheduler_text(renders["defaults"]))
    assert config.interval == shipped.interval == 10.0
    assert config.dry_run is shipped.dry_run is False
    assert config.profiles == shipped.profiles
    (profile,) = config.profiles
    assert profile.evict == ("MigrationController",)
    assert profile.balance == ()  # LowNodeLoad configured, not enabled


def test_another_namespace_moves_everything_namespaced_and_what_names_it(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    rendered = renders["elsewhere"]
    assert ("Namespace", "koord-elsewhere") in rendered
    for (kind, name), doc in rendered.items():
        if "namespace" in doc["metadata"]:
            assert doc["metadata"]["namespace"] == "koord-elsewhere", (kind, name)
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        for account in ("koordpy-controller", "koordpy-agent"):
            doc = rendered.get((binding, account))
            if doc is None:
                continue
            assert doc["subjects"] == [
                {"kind": "ServiceAccount", "name": account, "namespace": "koord-elsewhere"}
            ]
    scheduler = scheduler_config.load_configuration(scheduler_text(rendered)).document
    assert scheduler.leader_election is not None
    assert scheduler.leader_election["resourceNamespace"] == "koord-elsewhere"
    quota = {e.name: e.args for e in scheduler.profiles[0].plugin_config}["ElasticQuota"]
    assert quota == {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "ElasticQuotaArgs",
        "quotaGroupNamespace": "koord-elsewhere",
    }
    descheduler = descheduler_config.load_configuration(descheduler_text(rendered))
    migration = {e.name: e.args for e in descheduler.document.profiles[0].plugin_config}
    assert migration["MigrationController"] is not None
    assert migration["MigrationController"]["namespaces"] == {
        "exclude": ["kube-system", "koord-elsewhere"]
    }


# --- RBAC ------------------------------------------------------------------------------------


def rbac_file(name: str) -> dict[Key, dict[str, Any]]:
    return by_key(load_docs((REPO_ROOT / "deploy" / "rbac" / name).read_text()))


def grants(rules: Sequence[Mapping[str, Any]]) -> frozenset[tuple[str, str, str]]:
    return frozenset(
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    )


@pytest.mark.parametrize(
    ("account", "path"),
    [("koordpy-controller", "controller.yaml"), ("koordpy-agent", "agent.yaml")],
)
def test_the_charts_rbac_is_deploy_rbacs(
    renders: dict[str, dict[Key, dict[str, Any]]], account: str, path: str
) -> None:
    chart = renders["defaults"]
    manifest = rbac_file(path)
    kinds = {kind for kind, name in manifest if name == account}
    assert "ClusterRole" in kinds
    rbac = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert {kind for kind, name in chart if name == account and kind in rbac} == kinds
    for kind in kinds:
        ours, theirs = chart[(kind, account)], manifest[(kind, account)]
        for field in ("rules", "roleRef", "subjects"):
            assert ours.get(field) == theirs.get(field), f"{kind} {account}: {field}"
        assert ours["metadata"].get("namespace") == theirs["metadata"].get("namespace")


def test_the_agent_is_granted_what_it_uses_and_nothing_else(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    role = renders["defaults"][("ClusterRole", "koordpy-agent")]
    assert grants(role["rules"]) == AGENT_GRANTS
    assert all("resourceNames" not in rule for rule in role["rules"])


def test_the_controller_may_do_koord_managers_writes(
    renders: dict[str, dict[Key, dict[str, Any]]],
) -> None:
    granted = grants(renders["defaults"][("ClusterRole", "koordpy-controller")]["rules"])
    # Writes are merge patches (a PUT is an Event's only): patch, never update.
    for verb in ("list", "watch", "create", "patch", "delete"):
        assert ("slo.koordinator.sh", "nodemetrics", verb) in granted
    assert ("", "nodes/status", "patch") in granted
    assert not {(g, r, v) for g, r, v in granted if v == "update" and r != "events"}
    assert {("scheduling.koordinator.sh", "devices", v) for v in ("list", "watch")} <= granted
    role = renders["defaults"][("Role", "koordpy-controller")]
    assert ("coordination.k8s.io", "leases", "create") in grants(role["rules"])


# --- a cluster of its own ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_cluster(
    kube_binaries: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kube-chart")
    cluster = start_cluster(directory, kwok=False, timeout=90.0)
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(MONITORING_CRDS))
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            str(MONITORING_CRDS),
            timeout=90.0,
        )
        yield cluster
    finally:
        stop_cluster(directory)


def helm_on(cluster: Cluster, helm: str, *args: str, check: bool = True) -> str:
    return run([helm, "--kubeconfig", str(cluster.kubeconfig), *args], check=check)


def exists(cluster: Cluster, kind: str, name: str, namespace: str | None) -> bool:
    where = ["-n", namespace] if namespace else []
    done = cluster.kubectl("get", kind, name, *where, "-o", "name", check=False)
    if done.returncode == 0:
        return True
    assert "NotFound" in done.stderr, done.stderr
    return False


def manifest_of(directory: Path, name: str, docs: Sequence[Mapping[str, Any]]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def present(cluster: Cluster, manifest: Path) -> set[Key]:
    """(kind, name) of each object of ``manifest`` the cluster holds."""
    done = cluster.kubectl("get", "-f", str(manifest), "--ignore-not-found", "-o", "json")
    if not done.stdout.strip():
        return set()
    listed = json.loads(done.stdout)
    items = listed["items"] if listed.get("kind") == "List" else [listed]
    return {(item["kind"], item["metadata"]["name"]) for item in items}


def wait_for(what: str, probe: Any, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


#: Every kind the chart makes, for the leftovers search by the release's label.
LABELLED_KINDS: Final = (
    "namespaces,priorityclasses,serviceaccounts,clusterroles,clusterrolebindings,roles,"
    "rolebindings,configmaps,daemonsets,deployments,replicasets,pods,services,"
    "podmonitors.monitoring.coreos.com,servicemonitors.monitoring.coreos.com"
)


def lists(cluster: Cluster, crd: Mapping[str, Any]) -> bool:
    """Whether the API server lists the objects of ``crd`` (its storage is ready)."""
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1"
    return cluster.request("GET", path)[0] == 200


def labelled(cluster: Cluster, release: str) -> list[str]:
    """What the cluster holds labelled as the release's (pods of its workloads included)."""
    done = cluster.kubectl(
        "get", LABELLED_KINDS, "-A", "-l", f"app.kubernetes.io/instance={release}", "-o", "name"
    )
    return done.stdout.split()


def test_the_api_server_takes_every_rendered_object(
    own_cluster: Cluster, helm: str, tmp_path: Path
) -> None:
    """A server-side dry run of every option on, in a namespace of the test's own (it is
    made first: objects of a namespace still to be made cannot be dry-run)."""
    namespace = "chart-dry-run"
    values = values_file(tmp_path, "dry", {**ON, "installation": {"namespace": namespace}})
    docs = template(helm, values)
    assert {d["kind"] for d in docs} >= {"CustomResourceDefinition", "PodMonitor", "DaemonSet"}
    manifest = manifest_of(tmp_path, "dry", docs)
    own_cluster.kubectl("create", "namespace", namespace)
    try:
        done = own_cluster.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            str(manifest),
            check=False,
            timeout=120.0,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == len(docs), done.stdout
        assert all(line.endswith("(server dry run)") for line in lines), done.stdout
    finally:
        own_cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def uninstalled(cluster: Cluster, helm: str) -> None:
    """The release gone, if a test left it, and its namespace with it."""
    helm_on(cluster, helm, "uninstall", RELEASE, "--namespace", "default", check=False)
    wait_for("the namespace to go", lambda: not exists(cluster, "namespace", NAMESPACE, None))


@pytest.mark.timeout(300)
def test_install_upgrade_and_uninstall_leave_only_the_kept_crds(
    own_cluster: Cluster, helm: str, tmp_path: Path
) -> None:
    values = values_file(tmp_path, "install", {**ON, "manager": {"replicas": 2}})
    docs = template(helm, values)
    manifest = manifest_of(tmp_path, "install", docs)
    keys = {(d["kind"], d["metadata"]["name"]) for d in docs}
    crds = {("CustomResourceDefinition", name) for name in crd_names()}
    assert crds <= keys
    install = ["install", RELEASE, str(CHART), "--namespace", "default", "-f", str(values)]
    deployments = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/koordpy-controller"
    try:
        helm_on(own_cluster, helm, *install)
        assert present(own_cluster, manifest) == keys
        status, deployment = own_cluster.request("GET", deployments)
        assert status == 200, deployment
        assert deployment["spec"]["replicas"] == 2

        upgrade = ["upgrade", RELEASE, str(CHART), "--namespace", "default", "--reuse-values"]
        helm_on(own_cluster, helm, *upgrade, "--set", "manager.replicas=3")
        status, deployment = own_cluster.request("GET", deployments)
        assert status == 200, deployment
        assert deployment["spec"]["replicas"] == 3
        assert present(own_cluster, manifest) == keys

        helm_on(own_cluster, helm, "uninstall", RELEASE, "--namespace", "default")
        wait_for("everything but the CRDs to go", lambda: present(own_cluster, manifest) == crds)
        wait_for("nothing labelled as the release", lambda: not labelled(own_cluster, RELEASE))
        for _, name in crds:
            status, crd = own_cluster.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            )
            assert status == 200, crd
            assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

        # The same release installed again takes the kept CRDs back.
        helm_on(own_cluster, helm, *install)
        assert present(own_cluster, manifest) == keys
        helm_on(own_cluster, helm, "uninstall", RELEASE, "--namespace", "default")
        wait_for(
            "everything but the CRDs to go again", lambda: present(own_cluster, manifest) == crds
        )
    finally:
        uninstalled(own_cluster, helm)


@pytest.mark.timeout(300)
def test_uninstall_deletes_the_crds_when_they_are_not_kept(
    own_cluster: Cluster, helm: str, tmp_path: Path
) -> None:
    """The same release as the other test's: it takes the CRDs that test kept, if it ran
    first, and drops their keep annotation."""
    values = values_file(tmp_path, "unkept", UNKEPT)
    docs = template(helm, values)
    manifest = manifest_of(tmp_path, "unkept", docs)
    keys = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("CustomResourceDefinition", name) for name in crd_names()} <= keys
    try:
        helm_on(
            own_cluster, helm, "install", RELEASE, str(CHART), "-n", "default", "-f", str(values)
        )
        assert present(own_cluster, manifest) == keys
        # A CRD deleted before the API server has its storage ready cannot list its instances
        # ("storage is (re)initializing") and its deletion then backs off for minutes: delete
        # once each serves a list, as a user's cluster long has.
        for doc in docs:
            if doc["kind"] == "CustomResourceDefinition":
                wait_for(f"{doc['metadata']['name']} to serve", lambda d=doc: lists(own_cluster, d))
        helm_on(own_cluster, helm, "uninstall", RELEASE, "--namespace", "default")
        wait_for(
            "everything to go, the CRDs too",
            lambda: not present(own_cluster, manifest),
            timeout=240.0,
        )
        wait_for("nothing labelled as the release", lambda: not labelled(own_cluster, RELEASE))
    finally:
        uninstalled(own_cluster, helm)
