"""Which cgroup hierarchy the host runs, and which driver the kubelet uses.

Version, from the cgroup mounts in ``/proc/self/mountinfo``:

* ``v1``: controllers (cpu, memory...) on ``cgroup`` filesystems, no ``cgroup2``;
* ``hybrid``: v1 controllers plus a ``cgroup2`` mount beside them (systemd's
  ``/sys/fs/cgroup/unified``); the resource controllers the agent uses are the v1 ones;
* ``v2``: every controller on one ``cgroup2`` filesystem.

Driver: ``cgroupDriver`` from the kubelet's config file when it is readable, else a probe for
``kubepods.slice`` (systemd) or ``kubepods`` (cgroupfs) under the cpu hierarchy, else cgroupfs
(the kubelet's own default).

Parsing is pure (:func:`parse_mountinfo`, :func:`layout_from_mounts`,
:func:`parse_kubelet_driver`); :func:`detect` is the one reader.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml

from agent.config import CgroupSection, HostPaths
from agent.errors import Unsupported

__all__ = [
    "KUBELET_CONFIG",
    "CgroupDriver",
    "CgroupInfo",
    "CgroupLayout",
    "CgroupVersion",
    "Mount",
    "detect",
    "layout_from_mounts",
    "parse_kubelet_driver",
    "parse_mountinfo",
    "probe_driver",
]

_log = logging.getLogger(__name__)

#: The kubelet's config file (a host path).
KUBELET_CONFIG: Final = "/var/lib/kubelet/config.yaml"

# Mount/superblock options of a cgroup v1 mount that are not controllers.
_NOT_CONTROLLERS: Final = frozenset(
    {
        "rw",
        "ro",
        "nosuid",
        "nodev",
        "noexec",
        "relatime",
        "noatime",
        "nodiratime",
        "strictatime",
        "xattr",
        "noprefix",
        "clone_children",
        "cpuset_v2_mode",
        "favordynmods",
    }
)
_ESCAPE = re.compile(r"\\([0-7]{3})")


class CgroupVersion(enum.StrEnum):
    V1 = "v1"
    V2 = "v2"
    HYBRID = "hybrid"


class CgroupDriver(enum.StrEnum):
    SYSTEMD = "systemd"
    CGROUPFS = "cgroupfs"


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/<pid>/mountinfo`` (the fields this package needs)."""

    mount_point: str
    fs_type: str
    root: str = "/"
    super_options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """The cgroup mounts: version, v1 controller -> mount point, the cgroup2 mount."""

    version: CgroupVersion
    controllers: Mapping[str, str] = field(default_factory=dict)
    unified: str | None = None

    @property
    def resource_version(self) -> int:
        """Hierarchy version of the resource controllers (1 for v1 and hybrid, 2 for v2)."""
        return 2 if self.version is CgroupVersion.V2 else 1


@dataclass(frozen=True, slots=True)
class CgroupInfo:
    """What the agent needs to find cgroup files: version, driver and directories."""

    version: CgroupVersion
    driver: CgroupDriver
    #: The cgroup filesystem root as the agent sees it (``/sys/fs/cgroup``, ``/host-cgroup``).
    root: Path
    kubepods_parent: str = "kubepods"
    #: v1 controller -> its directory under ``root`` (``cpu`` -> ``cpu,cpuacct``).
    subsystems: Mapping[str, str] = field(default_factory=dict)
    #: Where the driver came from: ``kubelet-config``, ``probe`` or ``default``.
    driver_source: str = "default"

    @property
    def resource_version(self) -> int:
        return 2 if self.version is CgroupVersion.V2 else 1

    def hierarchy(self, controller: str) -> Path:
        """Directory of ``controller``'s hierarchy (the root itself on v2)."""
        if self.resource_version == 2:
            return self.root
        return self.root / self.subsystems.get(controller, controller)

    @property
    def kubepods_dir(self) -> str:
        """Name of the kubepods cgroup for the driver (``kubepods.slice`` or ``kubepods``)."""
        if self.driver is CgroupDriver.SYSTEMD:
            return f"{self.kubepods_parent}.slice"
        return self.kubepods_parent


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """Parse mountinfo text; malformed lines are skipped."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        before = head.split()
        after = tail.split()
        if len(before) < 6 or len(after) < 2:
            continue
        options = tuple(after[2].split(",")) if len(after) > 2 else ()
        mounts.append(
            Mount(
                mount_point=_unescape(before[4]),
                fs_type=after[0],
                root=_unescape(before[3]),
                super_options=options,
            )
        )
    return tuple(mounts)


def _controllers(mount: Mount) -> list[str]:
    return [
        opt for opt in mount.super_options if opt not in _NOT_CONTROLLERS and "=" not in opt and opt
    ]


def layout_from_mounts(mounts: Iterable[Mount]) -> CgroupLayout | None:
    """Classify the cgroup mounts; ``None`` when there is none."""
    controllers: dict[str, str] = {}
    unified: str | None = None
    for mount in mounts:
        if mount.fs_type == "cgroup":
            for name in _controllers(mount):
                controllers.setdefault(name, mount.mount_point)
        elif mount.fs_type == "cgroup2" and unified is None:
            unified = mount.mount_point
    if controllers:
        version = CgroupVersion.HYBRID if unified is not None else CgroupVersion.V1
        return CgroupLayout(version, controllers, unified)
    if unified is not None:
        return CgroupLayout(CgroupVersion.V2, {}, unified)
    return None


def parse_kubelet_driver(text: str) -> CgroupDriver | None:
    """``cgroupDriver`` of a KubeletConfiguration (YAML or JSON); ``None`` if absent/unknown."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict):
        return None
    value = data.get("cgroupDriver")
    try:
        return CgroupDriver(value) if isinstance(value, str) else None
    except ValueError:
        return None


def probe_driver(cpu_hierarchy: Path, kubepods_parent: str = "kubepods") -> CgroupDriver | None:
    """``kubepods.slice`` -> systemd, ``kubepods`` -> cgroupfs, neither -> ``None``."""
    if (cpu_hierarchy / f"{kubepods_parent}.slice").is_dir():
        return CgroupDriver.SYSTEMD
    if (cpu_hierarchy / kubepods_parent).is_dir():
        return CgroupDriver.CGROUPFS
    return None


def _subsystem_dirs(layout: CgroupLayout) -> dict[str, str]:
    """v1 controller -> directory name under the cgroup root (the mount's last component)."""
    return {name: Path(point).name for name, point in layout.controllers.items()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def detect(host: HostPaths, cgroup: CgroupSection) -> CgroupInfo:
    """Detect version and driver on the host; raises :class:`Unsupported` without cgroups."""
    root = Path(cgroup.root)
    text = _read(host.path("/proc/self/mountinfo"))
    layout = layout_from_mounts(parse_mountinfo(text)) if text is not None else None
    if layout is None:
        # No mountinfo to read (or no cgroup mounts in it): look at the root itself.
        if (root / "cgroup.controllers").is_file():
            layout = CgroupLayout(CgroupVersion.V2, {}, str(root))
        elif (root / "cpu").is_dir():
            layout = CgroupLayout(CgroupVersion.V1, {"cpu": str(root / "cpu")})
        else:
            raise Unsupported(f"no cgroup filesystem found (mountinfo, {root})")
    info = CgroupInfo(
        version=layout.version,
        driver=CgroupDriver.CGROUPFS,
        root=root,
        kubepods_parent=cgroup.kubepods_parent,
        subsystems=_subsystem_dirs(layout),
    )
    kubelet = _read(host.path(KUBELET_CONFIG))
    driver = parse_kubelet_driver(kubelet) if kubelet is not None else None
    source = "kubelet-config"
    if driver is None:
        driver = probe_driver(info.hierarchy("cpu"), cgroup.kubepods_parent)
        source = "probe"
    if driver is None:
        driver, source = CgroupDriver.CGROUPFS, "default"
    _log.info(
        "cgroup %s, driver %s (from %s)",
        info.version,
        driver,
        source,
        extra={"cgroup_version": str(info.version), "cgroup_driver": str(driver)},
    )
    return CgroupInfo(
        version=info.version,
        driver=driver,
        root=root,
        kubepods_parent=cgroup.kubepods_parent,
        subsystems=info.subsystems,
        driver_source=source,
    )
