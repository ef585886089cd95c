"""The node state a QoS pass works on: pods with their classes and cgroup dirs, and the CPUs.

:func:`pod_states` turns the pod source's pods into :class:`~agent.qos.framework.PodState`
records: Kubernetes and Koordinator QoS, priority class and value, the pod's cgroup directory
(from its Kubernetes QoS and UID), its containers (regular ones and sidecars, i.e. restartable
init containers, which run beside them) with their cgroup directories (from the runtime's
container ID), requests, limits and whether they run, and the CPUs the scheduler bound it to.

* A pod whose UID cannot be a cgroup path component is dropped (logged once).
* A container without an ID yet, or with one that cannot be a path component (unknown runtime,
  odd characters), gets ``cgroup=None`` (the latter logged once).
* Every pod is listed; :attr:`PodState.active` tells Pending/Running/unknown from finished.

:func:`cpu_topology` reads the logical CPUs, their cores, sockets and NUMA nodes from sysfs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from agent.cgroups import paths
from agent.cgroups.cpuset import MAX_TEXT, CpuSet, CpuSetError
from agent.cgroups.detect import CgroupInfo
from agent.config import HostPaths
from agent.qos import nodeinfo
from agent.qos.framework import ContainerState, CpuInfo, PodState
from apis import qos
from apis.core import Container, ContainerStatus, Pod, container_requests, pod_requests

__all__ = ["PodStateCache", "container_states", "cpu_topology", "pod_state", "pod_states"]

_log = logging.getLogger(__name__)

_CPU_DIR = re.compile(r"cpu(\d+)")
_NODE_DIR = re.compile(r"node(\d+)")
_WARN_LIMIT: Final = 4096
_warned: set[tuple[str, ...]] = set()


def _warn_once(key: tuple[str, ...], message: str, *args: object) -> None:
    """Warn the first time (per key); the same problem every pass is logged at debug."""
    if key in _warned:
        _log.debug(message, *args)
        return
    if len(_warned) >= _WARN_LIMIT:
        _warned.clear()
    _warned.add(key)
    _log.warning(message, *args)


def _who(pod: Pod) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"


def _container_state(
    info: CgroupInfo,
    pod: Pod,
    pod_dir: str,
    container: Container,
    status: ContainerStatus | None,
) -> ContainerState:
    container_id = status.container_id if status is not None else ""
    cgroup: str | None = None
    if container_id:
        try:
            cgroup = paths.container_dir(info, pod_dir, container_id)
        except paths.PathError as err:
            _warn_once(
                ("container", pod.metadata.uid, container_id),
                "pod %s container %s: no cgroup: %s",
                _who(pod),
                container.name,
                err,
            )
    return ContainerState(
        name=container.name,
        container_id=container_id,
        cgroup=cgroup,
        requests=container_requests(container),
        limits=container.resources.limits,
        running=status is not None and status.running,
    )


def container_states(info: CgroupInfo, pod: Pod, pod_dir: str) -> tuple[ContainerState, ...]:
    """The pod's regular containers, then its sidecars, with their statuses matched by name."""
    statuses: Mapping[str, ContainerStatus] = {s.name: s for s in pod.status.container_statuses}
    init_statuses: Mapping[str, ContainerStatus] = {
        s.name: s for s in pod.status.init_container_statuses
    }
    states = [
        _container_state(info, pod, pod_dir, c, statuses.get(c.name)) for c in pod.spec.containers
    ]
    states.extend(
        _container_state(info, pod, pod_dir, c, init_statuses.get(c.name))
        for c in pod.spec.init_containers
        if c.is_sidecar
    )
    return tuple(states)


def pod_state(pod: Pod, info: CgroupInfo) -> PodState:
    """One pod's state; raises :class:`paths.PathError` when its UID is not usable."""
    kube_qos = qos.kube_qos(pod)
    pod_dir = paths.pod_dir(info, kube_qos, pod.metadata.uid)
    return PodState(
        pod=pod,
        uid=pod.metadata.uid,
        kube_qos=kube_qos,
        qos=qos.koord_qos(pod),
        priority_class=qos.priority_class(pod),
        priority=qos.priority_value(pod),
        cgroup=pod_dir,
        containers=container_states(info, pod, pod_dir),
        cpuset=nodeinfo.pod_cpuset(pod),
        phase=pod.status.phase,
        requests=pod_requests(pod),
    )


class PodStateCache:
    """Remembers each pod's state by the pod object's identity.

    Pod sources hand out the same (immutable) Pod objects until the list changes, so a steady
    node costs one dictionary lookup per pod and pass. Entries keep their Pod alive, so an
    identity never matches a different object; only the pods of the last call are kept.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[Pod, CgroupInfo, PodState | None]] = {}

    def states(self, pods: Iterable[Pod], info: CgroupInfo) -> tuple[PodState, ...]:
        entries: dict[int, tuple[Pod, CgroupInfo, PodState | None]] = {}
        result: list[PodState] = []
        seen: set[str] = set()
        for pod in pods:
            uid = pod.metadata.uid
            if uid in seen:
                _warn_once(
                    ("dup", uid), "pod %s: UID %s listed twice; kept the first", _who(pod), uid
                )
                continue
            entry = self._entries.get(id(pod))
            if entry is None or entry[0] is not pod or (entry[1] is not info and entry[1] != info):
                try:
                    entry = (pod, info, pod_state(pod, info))
                except paths.PathError as err:
                    _warn_once(("uid", uid, _who(pod)), "pod %s ignored: %s", _who(pod), err)
                    entry = (pod, info, None)
            entries[id(pod)] = entry
            state = entry[2]
            if state is not None:
                seen.add(uid)
                result.append(state)
        self._entries = entries
        return tuple(result)


_CACHE = PodStateCache()


def pod_states(
    pods: Iterable[Pod], info: CgroupInfo, *, cache: PodStateCache | None = None
) -> tuple[PodState, ...]:
    """States of ``pods`` in their order; unusable UIDs and repeated UIDs are dropped.

    Memoised in ``cache`` (default: one shared by this module's callers).
    """
    return (cache or _CACHE).states(pods, info)


# --- CPU topology -------------------------------------------------------------------------------


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None


def _read_cpuset(path: Path) -> CpuSet | None:
    """The cpu list in ``path``; ``None`` when unreadable, or not a bounded cpu list (read no
    further than the bound, so a huge file costs nothing)."""
    try:
        with path.open("rb") as file:
            return CpuSet.parse(file.read(MAX_TEXT + 1).decode("ascii"))
    except (OSError, ValueError, CpuSetError):
        return None


def _numa_of(host: HostPaths) -> dict[int, int]:
    """cpu -> NUMA node from ``/sys/devices/system/node/node*/cpulist``."""
    found: dict[int, int] = {}
    base = host.path("/sys/devices/system/node")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return found
    for entry in entries:
        match = _NODE_DIR.fullmatch(entry.name)
        if match is None:
            continue
        cpus = _read_cpuset(entry / "cpulist")
        for cpu in cpus or ():
            found.setdefault(cpu, int(match.group(1)))
    return found


def cpu_topology(host: HostPaths) -> tuple[CpuInfo, ...]:
    """Online logical CPUs with core, socket and NUMA node, sorted by CPU id.

    Read from ``/sys/devices/system/cpu/cpu<N>/topology/{core_id,physical_package_id}`` and
    ``/sys/devices/system/node/node<M>/cpulist`` under the host root. ``core_id`` repeats
    across sockets, so cores are numbered here as ``lscpu`` does: one id per distinct
    (socket, core_id), in order of the first CPU on it. Missing NUMA information puts a CPU on
    node 0; a missing socket is socket 0 (as is the ``-1`` some platforms report); a missing
    core id makes the CPU its own core. Only CPUs in ``cpu/online`` count when that file is
    readable. An empty tuple when nothing is readable.
    """
    base = host.path("/sys/devices/system/cpu")
    try:
        entries = list(base.iterdir())
    except OSError:
        return ()
    online = _read_cpuset(base / "online")
    numa = _numa_of(host)
    raw: list[tuple[int, int, int | None]] = []
    for entry in entries:
        match = _CPU_DIR.fullmatch(entry.name)
        if match is None:
            continue
        cpu = int(match.group(1))
        if online is not None and cpu not in online:
            continue
        topology = entry / "topology"
        socket = _read_int(topology / "physical_package_id")
        core_id = _read_int(topology / "core_id")
        raw.append((cpu, socket if socket is not None and socket >= 0 else 0, core_id))
    raw.sort()
    cores: dict[tuple[int, int], int] = {}
    result: list[CpuInfo] = []
    for cpu, socket, core_id in raw:
        key = (socket, core_id if core_id is not None else -1 - cpu)
        core = cores.setdefault(key, len(cores))
        result.append(CpuInfo(cpu=cpu, core=core, socket=socket, node=numa.get(cpu, 0)))
    return tuple(result)
