"""Where the kubelet puts pods and containers in the cgroup tree, and the way back.

Every path here is relative to a hierarchy root (``/sys/fs/cgroup/cpu`` on v1, the root
itself on v2), has no leading slash, and is the same in every v1 subsystem:

============  =====================================================  ==========================
level         systemd driver                                         cgroupfs driver
============  =====================================================  ==========================
Guaranteed    ``kubepods.slice``                                     ``kubepods``
Burstable     ``kubepods.slice/kubepods-burstable.slice``            ``kubepods/burstable``
BestEffort    ``kubepods.slice/kubepods-besteffort.slice``           ``kubepods/besteffort``
pod           ``<qos dir>/kubepods-burstable-pod<uid_>.slice``       ``<qos dir>/pod<uid>``
container     ``<pod dir>/cri-containerd-<id>.scope`` (``crio-``,    ``<pod dir>/<id>``
              ``docker-``, ``pouch-``)
============  =====================================================  ==========================

``<uid_>`` is the pod UID with ``-`` replaced by ``_`` (systemd reserves ``-`` for nesting).

**A kubepods parent with slashes** (``koordpy-test-x/kubepods``, to run the agent against a
private sub-tree): the leading components are plain directories, kept as they are under both
drivers; only the last component is the kubepods cgroup, and under systemd its name prefixes
every slice below it: ``koordpy-test-x/kubepods.slice/kubepods-besteffort.slice/
kubepods-besteffort-pod<uid_>.slice``. With the default parent (``kubepods``) this is exactly
the kubelet's layout.

**Validation.** Pod UIDs and container IDs come from the API server and the runtime, so they
are checked against a strict charset before they become path components: a UID is ASCII
letters, digits and ``-``; a container ID is letters, digits, ``-`` and ``_``; both start with
a letter or digit and are at most 128 characters. Nothing with ``/``, ``.``, NUL or whitespace
is ever accepted, so no accepted input leaves the kubepods tree. Violations raise
:class:`PathError` naming the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from agent.cgroups.detect import CgroupDriver, CgroupInfo
from apis.qos import KubeQoS

__all__ = [
    "RUNTIMES",
    "PathError",
    "check_cgroup",
    "check_container_id",
    "check_pod_uid",
    "container_dir",
    "parse_container_id",
    "parse_pod_uid",
    "pod_dir",
    "qos_dir",
    "qos_of_dir",
    "split_container_id",
]

#: Runtime (the scheme of ``containerStatuses[].containerID``) -> systemd scope prefix.
RUNTIMES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "containerd": "cri-containerd",
        "cri-o": "crio",
        "docker": "docker",
        "pouch": "pouch",
    }
)

_MAX_LEN: Final = 128
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
# A path component of the kubepods parent: no dots-only names, no separators, no blanks.
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,254}")

_SYSTEMD_POD = re.compile(r"(?:.+-)?pod([A-Za-z0-9_]{1,128})\.slice")
_CGROUPFS_POD = re.compile(r"pod([A-Za-z0-9-]{1,128})")
_SCOPE = re.compile(r"(cri-containerd|crio|docker|pouch)-([A-Za-z0-9_-]{1,128})\.scope")
# CRI-O's conmon cgroups (``crio-<id>`` without ``.scope``).
_CRIO_BARE = re.compile(r"crio-([A-Za-z0-9_-]{1,128})")

_QOS_SUFFIX: Final[Mapping[KubeQoS, str]] = MappingProxyType(
    {
        KubeQoS.GUARANTEED: "",
        KubeQoS.BURSTABLE: "burstable",
        KubeQoS.BEST_EFFORT: "besteffort",
    }
)


class PathError(ValueError):
    """A pod UID, container ID or cgroup path that must not become a cgroup path."""


def _shown(value: str) -> str:
    return repr(value if len(value) <= 200 else value[:200] + "...")


def check_pod_uid(uid: str) -> str:
    """``uid`` if it is a safe pod UID, else :class:`PathError`."""
    if _UID.fullmatch(uid) is None:
        raise PathError(
            f"pod UID {_shown(uid)} is not allowed in a cgroup path "
            f"(letters, digits and '-', at most {_MAX_LEN})"
        )
    return uid


def check_container_id(container_id: str) -> str:
    """``container_id`` (without runtime) if it is safe, else :class:`PathError`."""
    if _ID.fullmatch(container_id) is None:
        raise PathError(
            f"container ID {_shown(container_id)} is not allowed in a cgroup path "
            f"(letters, digits, '-' and '_', at most {_MAX_LEN})"
        )
    return container_id


def check_cgroup(cgroup: str) -> str:
    """A relative cgroup directory: no leading ``/``, no ``.``/``..``/empty components, no NUL.

    ``""`` is the hierarchy root itself. Cheap enough to run on every file access.
    """
    if "\0" in cgroup or cgroup.startswith("/") or cgroup.endswith("/"):
        raise PathError(f"cgroup {_shown(cgroup)} is not a relative cgroup directory")
    if cgroup and ("." in cgroup or "//" in cgroup):
        for part in cgroup.split("/"):
            if part in ("", ".", ".."):
                raise PathError(f"cgroup {_shown(cgroup)} is not a relative cgroup directory")
    return cgroup


def _parent(info: CgroupInfo) -> tuple[str, str]:
    """Validated kubepods parent: (leading directories with trailing ``/`` or "", last name)."""
    parent = info.kubepods_parent
    parts = parent.split("/")
    for part in parts:
        if _COMPONENT.fullmatch(part) is None:
            raise PathError(
                f"kubepods parent {_shown(parent)} is not a relative cgroup path "
                f"(component {_shown(part)})"
            )
    lead = "/".join(parts[:-1])
    return (lead + "/" if lead else ""), parts[-1]


def qos_dir(info: CgroupInfo, qos: KubeQoS) -> str:
    """The QoS tier's directory (Guaranteed pods live in the kubepods directory itself)."""
    lead, name = _parent(info)
    suffix = _QOS_SUFFIX[KubeQoS(qos)]
    if info.driver is CgroupDriver.SYSTEMD:
        root = f"{lead}{name}.slice"
        return f"{root}/{name}-{suffix}.slice" if suffix else root
    root = f"{lead}{name}"
    return f"{root}/{suffix}" if suffix else root


def pod_dir(info: CgroupInfo, qos: KubeQoS, uid: str) -> str:
    """A pod's directory; its location follows the pod's Kubernetes QoS."""
    check_pod_uid(uid)
    base = qos_dir(info, qos)
    if info.driver is CgroupDriver.SYSTEMD:
        _, name = _parent(info)
        suffix = _QOS_SUFFIX[KubeQoS(qos)]
        prefix = f"{name}-{suffix}" if suffix else name
        return f"{base}/{prefix}-pod{uid.replace('-', '_')}.slice"
    return f"{base}/pod{uid}"


def split_container_id(container_id: str) -> tuple[str, str]:
    """``containerd://abc`` -> (``containerd``, ``abc``); unknown runtimes are a PathError."""
    runtime, sep, bare = container_id.partition("://")
    if not sep:
        raise PathError(f"container ID {_shown(container_id)} has no '<runtime>://' prefix")
    if runtime not in RUNTIMES:
        raise PathError(
            f"container ID {_shown(container_id)}: unknown runtime {runtime!r} "
            f"(known: {', '.join(sorted(RUNTIMES))})"
        )
    return runtime, check_container_id(bare)


def container_dir(info: CgroupInfo, pod_dir: str, container_id: str) -> str:
    """A container's directory inside ``pod_dir``, from ``<runtime>://<id>``."""
    check_cgroup(pod_dir)
    runtime, bare = split_container_id(container_id)
    if info.driver is CgroupDriver.SYSTEMD:
        return f"{pod_dir}/{RUNTIMES[runtime]}-{bare}.scope"
    return f"{pod_dir}/{bare}"


def parse_pod_uid(dirname: str) -> str | None:
    """The pod UID of a pod directory name (either driver); None if it is not one."""
    match = _SYSTEMD_POD.fullmatch(dirname)
    if match is not None:
        uid = match.group(1).replace("_", "-")
    else:
        match = _CGROUPFS_POD.fullmatch(dirname)
        if match is None:
            return None
        uid = match.group(1)
    return uid if _UID.fullmatch(uid) is not None else None


def parse_container_id(dirname: str) -> str | None:
    """The container ID (without runtime) of a container directory name; None if not one.

    Understands the systemd scopes of every runtime (``pouch-`` included), CRI-O's bare
    ``crio-<id>`` and the cgroupfs form (the ID itself).
    """
    match = _SCOPE.fullmatch(dirname) or _CRIO_BARE.fullmatch(dirname)
    bare = match.group(match.lastindex or 0) if match is not None else dirname
    return bare if _ID.fullmatch(bare) is not None else None


def qos_of_dir(cgroup: str) -> KubeQoS:
    """The Kubernetes QoS a cgroup directory belongs to (by its path)."""
    if "besteffort" in cgroup:
        return KubeQoS.BEST_EFFORT
    if "burstable" in cgroup:
        return KubeQoS.BURSTABLE
    return KubeQoS.GUARANTEED
