"""The agent's configuration: ``/etc/koordpy/agent.toml`` decoded into strict Structs.

Every key is optional; an unknown key is an error naming it (exit status 2). Example::

    [agent]
    node_name = "gpu-01"

    [host]
    root = "/host"            # the host's / as mounted in a DaemonSet pod

    [report]
    interval = 10.0

    [devices]
    simulate = ["nvidia-h100"]

    [qos]
    interval = 1.0
    gates = { CPUEvict = true }
    nodeslo_file = "/etc/koordpy/nodeslo.yaml"

    [colocation]
    enable = true

    [pods]
    source = "kubelet"

    [evictions]
    mode = "controller"

In a Kubernetes cluster (the Helm chart's DaemonSet)::

    [report]
    transport = "kubernetes"

    [kubernetes]
    kubeconfig = ""           # the pod's service account

    [pods]
    source = "kubelet"        # or "apiserver": a watch of the pods bound to this node
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from agent import errors
from agent.qos.settings import DEFAULT_GATES, ColocationSettings
from runtime import configfile
from runtime.mqtt import MqttSettings

__all__ = [
    "DEFAULT_PATH",
    "AgentConfig",
    "AgentSection",
    "CgroupSection",
    "DevicesSection",
    "EvictionsSection",
    "HostPaths",
    "KubernetesSection",
    "MetricsSection",
    "PodsSection",
    "QoSSection",
    "ReportSection",
    "load",
]

#: Where ``koordpy agent`` looks for its config when ``--config`` is not given.
DEFAULT_PATH: Final = "/etc/koordpy/agent.toml"

Seconds = Annotated[float, msgspec.Meta(gt=0)]


class AgentSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Name of this node. Default: ``--node-name``, else ``$NODE_NAME``, else the hostname.
    node_name: str = ""
    #: Log level name (``debug``, ``info``, ``warning``, ``error``). Default ``info``.
    log_level: str = "info"


class HostPaths(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where the host's filesystem is seen from the agent (psutil's ``PROCFS_PATH`` idea).

    On a host: ``/``. In a DaemonSet pod with the host's ``/`` mounted at ``/host``: ``/host``,
    so ``/proc`` is read from ``/host/proc`` and ``/sys`` from ``/host/sys``.
    """

    #: The host's root directory. Default ``/``.
    root: str = "/"

    def path(self, absolute: str | Path) -> Path:
        """A host path (``/proc/meminfo``) as the agent reaches it (``/host/proc/meminfo``)."""
        return Path(self.root) / str(absolute).lstrip("/")

    @property
    def proc(self) -> Path:
        return self.path("/proc")

    @property
    def sys(self) -> Path:
        return self.path("/sys")


class CgroupSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Mount point of the cgroup filesystem(s) as the agent sees it. Default ``/sys/fs/cgroup``
    #: (a DaemonSet mounts the host's at, e.g., ``/host-cgroup``).
    root: str = "/sys/fs/cgroup"
    #: Name of the kubepods parent cgroup (``kubepods`` -> ``kubepods.slice`` with systemd).
    #: Default ``kubepods``.
    kubepods_parent: str = "kubepods"


MemoryPolicy = Literal["usageWithoutPageCache", "usageWithHotPageCache", "usageWithPageCache"]


class MetricsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Collection, NodeMetric and the Prometheus endpoint (koordlet's metrics advisor)."""

    #: Prometheus listen address ``[host]:port``; ``off`` disables. Default ``:9316``.
    address: str = ":9316"
    #: Seconds between samples of node, pod and container usage (koordlet's
    #: ``-collect-res-used-interval``). Default 1.
    collect_interval: Seconds = 1.0
    #: Seconds between reads of the costly figures: pod and container memory, working set
    #: and throttling, containers' CPU, PSI (CPU of pods and the node is read every tick; the
    #: QoS loop's own needs too). ``collect_interval`` reads everything every tick, at about
    #: ten times the CPU with hundreds of containers. Default 10 (koordlet's PSI interval).
    detail_interval: Seconds = 10.0
    #: Seconds between NodeMetric reports (``reportIntervalSeconds``; Koordinator's minimum
    #: is 30). Default 60.
    report_interval: Seconds = 60.0
    #: Window of the averaged usages in NodeMetric (``aggregateDurationSeconds``; Koordinator's
    #: minimum is 60). Default 300.
    aggregate_duration: Seconds = 300.0
    #: Windows of the node's avg/p50/p90/p95/p99 usages (``nodeAggregatePolicy.durations``),
    #: seconds. Default 5m, 10m, 30m.
    aggregate_durations: tuple[Seconds, ...] = (300.0, 600.0, 1800.0)
    #: Which node and pod memory NodeMetric reports (``nodeMemoryCollectPolicy``). Default
    #: ``usageWithoutPageCache``.
    memory_policy: MemoryPolicy = "usageWithoutPageCache"
    #: Read pressure (PSI) of the node and of pods and containers (koordlet's PSICollector
    #: gate, off there by default). Default on.
    psi: bool = True

    def __post_init__(self) -> None:
        if not self.aggregate_durations:
            raise ValueError("aggregate_durations must name at least one window")


class ReportSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: How reports reach the controller: ``mqtt`` (fleet), ``kubernetes`` (a Kubernetes API
    #: server, as koordlet reports: the node's Device and its NodeMetric's status, Events;
    #: the NodeSLO read from it; evictions through its Eviction API), ``bus`` (in-process,
    #: only when the agent is embedded in ``koordpy up``) or ``none`` (a node on its own: QoS
    #: only, nothing reported). Default ``mqtt``.
    transport: Literal["bus", "mqtt", "kubernetes", "none"] = "mqtt"
    #: Seconds between checks of Node and Device for changes (a change is published at once).
    #: Default 10.
    interval: Seconds = 10.0
    #: Seconds after which an unchanged Node is published again to refresh its Ready
    #: heartbeat. Default 60.
    heartbeat: Seconds = 60.0
    #: Seconds after which an unchanged Device is published again with a new report time
    #: (a change is published at once). Default 30.
    device_interval: Seconds = 30.0
    #: The broker of ``transport = "mqtt"`` (host, port, TLS files, user, password file).
    mqtt: MqttSettings = msgspec.field(default_factory=MqttSettings)


class KubernetesSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The API server of ``[report] transport = "kubernetes"``."""

    #: A kubeconfig file; empty: ``--kubeconfig``, else the pod's service account
    #: (in-cluster). Default empty.
    kubeconfig: str = ""
    #: The kubeconfig's context; empty: its current one.
    context: str = ""
    #: Client-side rate limit, requests per second, and its burst (koordlet's
    #: ``-kube-api-qps`` 20 and ``-kube-api-burst`` 30).
    qps: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    burst: Annotated[int, msgspec.Meta(ge=1)] = 30
    #: Seconds one request may take before the API server counts as unreachable. Default 10.
    timeout: Seconds = 10.0


class DevicesSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Simulated device profiles to report instead of probing hardware (``nvidia-h100``,
    #: ``metax-c500-sgpu``, ``ascend-910b3``, ``ascend-310p3-300i-duo``). Default none.
    simulate: tuple[str, ...] = ()
    #: Seconds one device probe may take before it counts as failed. Default 30.
    probe_timeout: Seconds = 30.0
    #: Seconds one NVML call may take before the GPU counts as hung. Default 5.
    nvml_call_timeout: Seconds = 5.0
    #: The MetaX management tool (a name looked up on ``PATH``, or a path). Default ``mx-smi``.
    mx_smi: str = "mx-smi"
    #: Huawei's NPU management tool (a name looked up on ``PATH``, or a path). Default
    #: ``npu-smi``.
    npu_smi: str = "npu-smi"


class QoSSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Seconds between QoS passes (koordlet's reconcile/suppress intervals). Default 1.
    interval: Seconds = 1.0
    #: Feature gates over their defaults (``BECPUSuppress``, ``CPUBurst``, ``CPUEvict``...).
    gates: dict[str, bool] = {}
    #: Strategies to run, by name; empty runs every one. Default every one.
    strategies: tuple[str, ...] = ()
    #: v1.8's ``-disable-unset-cpu-quota``: keep the cfs quota of cpuset-bound pods.
    disable_unset_cpu_quota: bool = False
    #: A NodeSLO (YAML) to enforce while the controller sends none. Default none.
    nodeslo_file: str = ""
    #: Seconds after which cached cgroup values are read again (and rewritten if they
    #: drifted), koordlet's ``-resource-force-update-seconds``. Default 60.
    force_update_seconds: Seconds = 60.0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.gates) - set(DEFAULT_GATES))
        if unknown:
            raise ValueError(
                f"unknown feature gate {unknown[0]!r} (known: {', '.join(sorted(DEFAULT_GATES))})"
            )


class PodsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Where pods come from: ``kubelet``, ``apiserver`` (a watch of the pods whose
    #: ``spec.nodeName`` is this node; needs ``[report] transport = "kubernetes"``), ``file``
    #: (nodes without a kubelet) or ``bindings`` (the controller's retained PodList topic).
    #: Default ``kubelet``.
    source: Literal["kubelet", "apiserver", "file", "bindings"] = "kubelet"
    #: The kubelet's address and port (10255, the read-only port, is plain HTTP; any other
    #: HTTPS). Default 127.0.0.1:10250.
    kubelet_address: str = "127.0.0.1"
    kubelet_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 10250
    #: Bearer token file for HTTPS, re-read on every request. Default the service account's.
    kubelet_token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    #: CA bundle for the kubelet's serving certificate; empty: the system CAs.
    kubelet_ca_file: str = ""
    #: Skip verifying the kubelet's certificate (koordlet's -kubelet-insecure-tls).
    kubelet_insecure_tls: bool = False
    #: Seconds between polls of /pods. Default 10.
    kubelet_sync_interval: Seconds = 10.0
    #: Seconds one poll may take, connect and read together. Default 3.
    kubelet_sync_timeout: Seconds = 3.0
    #: The pods file for ``source = "file"``. Default /etc/koordpy/pods.yaml.
    file: str = "/etc/koordpy/pods.yaml"
    #: Seconds between checks of the pods file for changes. Default 1.
    file_interval: Seconds = 1.0
    #: Seconds the agent waits for the first pod list before QoS starts anyway. Default 30.
    sync_timeout: Seconds = 30.0


class EvictionsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Who evicts: ``controller`` (a request on the agent's evictions topic) or ``apiserver``
    #: (a policy/v1 Eviction posted to a Kubernetes API server). Default ``controller``.
    mode: Literal["controller", "apiserver"] = "controller"
    #: The API server's base URL for ``apiserver`` (``https://10.0.0.1:6443``).
    apiserver_url: str = ""
    #: Bearer token file for the API server. Default the service account's.
    token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    #: CA bundle of the API server; empty: the system CAs.
    ca_file: str = ""
    #: Skip verifying the API server's certificate.
    insecure_tls: bool = False
    #: Seconds one eviction call may take. Default 10.
    timeout: Seconds = 10.0


class AgentConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: AgentSection = msgspec.field(default_factory=AgentSection)
    host: HostPaths = msgspec.field(default_factory=HostPaths)
    cgroup: CgroupSection = msgspec.field(default_factory=CgroupSection)
    metrics: MetricsSection = msgspec.field(default_factory=MetricsSection)
    report: ReportSection = msgspec.field(default_factory=ReportSection)
    kubernetes: KubernetesSection = msgspec.field(default_factory=KubernetesSection)
    devices: DevicesSection = msgspec.field(default_factory=DevicesSection)
    qos: QoSSection = msgspec.field(default_factory=QoSSection)
    #: Batch/Mid resources (the fields of Koordinator's ColocationStrategy, in snake_case).
    colocation: ColocationSettings = msgspec.field(default_factory=ColocationSettings)
    pods: PodsSection = msgspec.field(default_factory=PodsSection)
    evictions: EvictionsSection = msgspec.field(default_factory=EvictionsSection)

    def __post_init__(self) -> None:
        if self.pods.source == "apiserver" and self.report.transport != "kubernetes":
            raise ValueError(
                "[pods] source = 'apiserver' needs [report] transport = 'kubernetes'"
                f" (it is {self.report.transport!r})"
            )


def load(path: str | Path | None = None) -> AgentConfig:
    """``path`` (must exist) or :data:`DEFAULT_PATH` (may be absent); errors are ConfigError."""
    try:
        return configfile.load_config(path, AgentConfig, default=DEFAULT_PATH)
    except errors.ConfigError:
        raise
    except configfile.ConfigError as err:
        raise errors.ConfigError(str(err)) from None
