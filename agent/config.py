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
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal

import msgspec

from agent import errors
from koordpy import configfile

__all__ = [
    "DEFAULT_PATH",
    "AgentConfig",
    "AgentSection",
    "CgroupSection",
    "DevicesSection",
    "HostPaths",
    "MetricsSection",
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


class MetricsSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Prometheus listen address ``[host]:port``; ``off`` disables. Default ``:9316``.
    address: str = ":9316"


class ReportSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: How reports reach the controller: ``mqtt`` (fleet) or ``bus`` (in-process, only when
    #: the agent is embedded in ``koordpy up``). Default ``mqtt``.
    transport: Literal["bus", "mqtt"] = "mqtt"
    #: Seconds between checks of Node and Device for changes (a change is published at once).
    #: Default 10.
    interval: Seconds = 10.0
    #: Seconds after which an unchanged Node is published again to refresh its Ready
    #: heartbeat. Default 60.
    heartbeat: Seconds = 60.0


class DevicesSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    #: Simulated device profiles to report instead of probing hardware (``nvidia-h100``,
    #: ``metax-c500-sgpu``, ``ascend-910b3``, ``ascend-310p3-300i-duo``). Default none.
    simulate: tuple[str, ...] = ()
    #: Seconds one device probe may take before it counts as failed. Default 30.
    probe_timeout: Seconds = 30.0


class AgentConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    agent: AgentSection = msgspec.field(default_factory=AgentSection)
    host: HostPaths = msgspec.field(default_factory=HostPaths)
    cgroup: CgroupSection = msgspec.field(default_factory=CgroupSection)
    metrics: MetricsSection = msgspec.field(default_factory=MetricsSection)
    report: ReportSection = msgspec.field(default_factory=ReportSection)
    devices: DevicesSection = msgspec.field(default_factory=DevicesSection)


def load(path: str | Path | None = None) -> AgentConfig:
    """``path`` (must exist) or :data:`DEFAULT_PATH` (may be absent); errors are ConfigError."""
    try:
        return configfile.load_config(path, AgentConfig, default=DEFAULT_PATH)
    except errors.ConfigError:
        raise
    except configfile.ConfigError as err:
        raise errors.ConfigError(str(err)) from None
