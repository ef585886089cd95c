"""The controller's configuration: ``/etc/koordpy/controller.toml`` decoded into strict Structs.

Every key is optional; an unknown key is an error naming it (exit status 2). Example::

    [controller]
    state_dir = "/var/lib/koordpy"
    log_level = "info"

    [api]
    address = "0.0.0.0:7443"      # default: the unix socket (see controller.api.address)
    token_file = "/etc/koordpy/api-token"
    tls_cert = "/etc/koordpy/tls.crt"
    tls_key = "/etc/koordpy/tls.key"

    [store]
    synchronous = "NORMAL"        # or "FULL": fsync every commit (survives power loss)
    report_write_interval = 60    # an agent's newer report reaches the state file this late
    start_fresh = false           # true: start empty where a store was initialised and lost
    event_ttl = 3600              # seconds an Event is kept after its last write

    [metrics]
    address = ":9317"

    [kubernetes]                  # only for `koordpy controller run --kubeconfig/--in-cluster`
    kubeconfig = "/etc/koordpy/kubeconfig"   # default: --kubeconfig, else in-cluster
    context = ""                  # default: the kubeconfig's current context
    qps = 50                      # client-side rate limit, requests per second
    burst = 100
    leader_elect = true           # Leases koord-scheduler and koord-descheduler
    lease_namespace = "koordinator-system"
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec

from controller.api.token import read_token_file
from controller.errors import ConfigError
from controller.queueing.plugins import PluginRef, Plugins, QueueingConfig, build_plugins
from runtime import configfile
from runtime.mqtt import MqttSettings

__all__ = [
    "DEFAULT_PATH",
    "DEFAULT_STATE_DIR",
    "ApiSection",
    "ControllerConfig",
    "ControllerSection",
    "IngestSection",
    "KubernetesSection",
    "MetricsSection",
    "StoreSection",
    "load",
]

#: Where ``koordpy controller run`` looks for its config when ``--config`` is not given.
DEFAULT_PATH: Final = "/etc/koordpy/controller.toml"
#: State directory of ``koordpy controller run`` (``koordpy up`` uses a per-user one).
DEFAULT_STATE_DIR: Final = "/var/lib/koordpy"


class ControllerSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Directory holding the SQLite store. Default: ``--state-dir``, else ``/var/lib/koordpy``.
    state_dir: str = ""
    #: Log level name (``debug``, ``info``, ``warning``, ``error``). Default ``info``.
    log_level: str = "info"


class ApiSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Listen address: ``unix:///path.sock`` or ``host:port``. Default: ``--api``, else
    #: ``$KOORDPY_API``, else ``unix:///run/koordpy/controller.sock`` (root).
    address: str = ""
    #: Bearer token a TCP API requires. Default none (prefer ``token_file``).
    token: str = ""
    #: File holding the bearer token (first line). Default none.
    token_file: str = ""
    #: TLS certificate and key (PEM) for a TCP API. Default none (plain TCP).
    tls_cert: str = ""
    tls_key: str = ""
    #: Seconds calls in flight get to finish at shutdown. Default 2.
    shutdown_grace: float = 2.0


class StoreSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: SQLite ``synchronous`` mode: ``NORMAL`` (a committed write survives the process being
    #: killed) or ``FULL`` (it also survives power loss). Default ``NORMAL``.
    synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    #: Seconds a change that only brings an agent's newer report (a Node's Ready heartbeat, a
    #: Device's ``koordpy.io/reported-at``, a NodeMetric's status) may wait before it is
    #: written to the state file; it is served and watched at once, and any other change to
    #: the object is written at once. 0 writes every report. Default 60 (one agent heartbeat).
    report_write_interval: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    #: Start an empty store even though the state directory's marker says one was initialised
    #: there and its database is missing or empty (else the start is refused, exit 2). Set it
    #: for the one start that is meant to begin again, then remove it. Default false.
    start_fresh: bool = False
    #: Seconds an Event is kept after its last write (Kubernetes' ``--event-ttl``, 1 h).
    event_ttl: Annotated[float, msgspec.Meta(gt=0)] = 3600.0


class MetricsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Prometheus endpoint ``[host]:port``; ``off`` disables it. Default ``:9317``.
    address: str = ":9317"


class IngestSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the agents' reports arrive through, and when a silent node counts as lost."""

    #: ``mqtt``: subscribe to the broker of ``[mqtt]`` (a fleet); ``none``: no agents report
    #: (``koordpy up`` joins its agents through the in-process bus whatever this says).
    #: Default ``none``.
    transport: Literal["mqtt", "none"] = "none"
    #: Seconds without any report after which a node gets ``Ready=False`` and the
    #: ``node.kubernetes.io/unreachable:NoSchedule`` taint (3 x the agent's 60 s heartbeat).
    #: Default 180.
    node_lost_after: Annotated[float, msgspec.Meta(gt=0)] = 180.0
    #: Largest report accepted, bytes; a larger one is dropped and counted. Default 1 MiB.
    max_payload: Annotated[int, msgspec.Meta(ge=1024)] = 1024 * 1024


class QueueingSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The queue's plugins (Koord-Queue's ``KoordQueueConfiguration``) and timings."""

    #: Enabled plugins by name (see ``controller.queueing.plugins.PLUGINS``). Default
    #: ``["Priority", "ElasticQuota"]``.
    plugins: tuple[str, ...] = ("Priority", "ElasticQuota")
    #: Plugin name -> its args (camelCase keys, as the plugin's ``Args``). Default none.
    plugin_configs: dict[str, dict[str, Any]] = {}
    #: Seconds a unit must have been admitted before reclaim may evict it. Default 60.
    reclaim_min_runtime: Annotated[float, msgspec.Meta(ge=0)] = 60.0
    #: Seconds between refreshes of queue positions, waiting reasons and quota status.
    #: Default 15.
    status_interval: Annotated[float, msgspec.Meta(gt=0)] = 15.0


class KubernetesSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The cluster of ``koordpy controller run --kubeconfig FILE`` (or ``--in-cluster``)."""

    #: Kubeconfig file. Default: ``--kubeconfig``, else the pod's service account.
    kubeconfig: str = ""
    #: Context of the kubeconfig. Default: its current context.
    context: str = ""
    #: Client-side rate limit (client-go's defaults), requests per second and burst.
    qps: Annotated[float, msgspec.Meta(gt=0)] = 50.0
    burst: Annotated[int, msgspec.Meta(ge=1)] = 100
    #: Act only while holding the Leases ``koord-scheduler`` (scheduling, queueing,
    #: reservations, quota) and ``koord-descheduler`` (descheduling, migration), so that two
    #: replicas, or koordpy and Koordinator's own components, never both act. Default true.
    leader_elect: bool = True
    #: Namespace of the Leases. Default ``koordinator-system``.
    lease_namespace: str = "koordinator-system"
    #: Seconds: how long a Lease holds, the holder's renewal deadline and the retry period
    #: (client-go's 15, 10 and 2; ``0 < retry < renew_deadline < lease_duration``).
    lease_duration: Annotated[float, msgspec.Meta(gt=0)] = 15.0
    renew_deadline: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    retry_period: Annotated[float, msgspec.Meta(gt=0)] = 2.0
    #: This replica's name in the Leases. Default ``hostname_uuid``.
    identity: str = ""
    #: Namespace of the configuration ConfigMaps (``koord-scheduler-config``,
    #: ``koord-descheduler-config``, ``slo-controller-config``). Default ``koordinator-system``.
    config_namespace: str = "koordinator-system"
    #: Writes in flight at once. Default 100.
    max_in_flight: Annotated[int, msgspec.Meta(ge=1)] = 100
    #: koord-manager's duties too: a NodeSLO per node rendered from ``slo-controller-config``,
    #: under koord-manager's own Lease ``koordinator-manager`` (so where Koordinator's
    #: koord-manager runs, only one of the two acts). Default true.
    manager_duties: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "[kubernetes] needs 0 < retry_period < renew_deadline < lease_duration, got"
                f" retry_period={self.retry_period}, renew_deadline={self.renew_deadline},"
                f" lease_duration={self.lease_duration}"
            )


class ControllerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    controller: ControllerSection = msgspec.field(default_factory=ControllerSection)
    api: ApiSection = msgspec.field(default_factory=ApiSection)
    store: StoreSection = msgspec.field(default_factory=StoreSection)
    metrics: MetricsSection = msgspec.field(default_factory=MetricsSection)
    ingest: IngestSection = msgspec.field(default_factory=IngestSection)
    queueing: QueueingSection = msgspec.field(default_factory=QueueingSection)
    kubernetes: KubernetesSection = msgspec.field(default_factory=KubernetesSection)
    #: The broker of ``[ingest] transport = "mqtt"``.
    mqtt: MqttSettings = msgspec.field(default_factory=MqttSettings)

    def api_token(self) -> str:
        """The bearer token: ``token``, else the first line of ``token_file`` (a private file)."""
        if self.api.token:
            return self.api.token
        if not self.api.token_file:
            return ""
        return read_token_file(self.api.token_file, field="[api] token_file")

    def starting_fresh(self, fresh: bool) -> ControllerConfig:
        """This config, with ``[store] start_fresh`` set when ``fresh`` (``--start-fresh``)."""
        if not fresh or self.store.start_fresh:
            return self
        return msgspec.structs.replace(
            self, store=msgspec.structs.replace(self.store, start_fresh=True)
        )


def load(path: str | None) -> ControllerConfig:
    """Load ``path`` (or the default path, which may be absent)."""
    try:
        cfg = configfile.load_config(path, ControllerConfig, default=DEFAULT_PATH)
    except ConfigError:
        raise
    except configfile.ConfigError as err:
        raise ConfigError(str(err)) from None
    queueing_plugins(cfg)  # refuse a bad [queueing] before anything starts
    return cfg


def queueing_plugins(cfg: ControllerConfig) -> Plugins:
    """The queue's plugins as ``[queueing]`` configures them (a bad name or args: ConfigError
    naming ``[queueing]``, the field and the value)."""
    section = cfg.queueing
    try:
        return build_plugins(
            QueueingConfig(
                plugins=tuple(PluginRef(name=name) for name in section.plugins),
                plugin_configs=section.plugin_configs,
            )
        )
    except ConfigError as err:
        raise ConfigError(f"[queueing] {err}") from None
