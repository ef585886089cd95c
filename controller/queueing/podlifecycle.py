"""The ``pod-lifecycle`` control loop: what a kubelet would do to pods, for ``up``/``simulate``.

* A bound pod (``spec.nodeName`` set) in phase ``Pending`` or empty, not being deleted, starts:
  phase ``Running``, ``status.startTime`` now, conditions ``Initialized``, ``Ready`` and
  ``ContainersReady`` ``True``, and what a kubelet reports with them: ``containerStatuses``
  (running since now, ready, started, no restarts, an ``imageID`` and ``containerID``), init
  containers terminated ``Completed`` (sidecars running), ``hostIP``/``podIP`` from the node's
  ``InternalIP`` (else its first address; none when it has none) and ``qosClass``.
* A running pod whose annotation ``koordpy.io/simulated-runtime`` is a duration (``90s``,
  ``1h``; copied from the pod template like any annotation) succeeds that long after it
  started: phase ``Succeeded``, ``Ready``/``ContainersReady`` ``False`` with reason
  ``PodCompleted``, every container terminated with exit code 0, reason ``Completed``. A
  value that is not a duration is ignored (logged once per pod).

Only pods that changed since the last pass are looked at; pending ends sit in a heap, and
``reconcile`` returns the seconds until the next one. A pass's pod writes go out in one batch
(:class:`Outbox`); the loop's snapshots show them until the store does.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import msgspec

from apis import constants as k
from apis import qos
from apis.core import Container, ContainerState, ContainerStatus, Node, Pod
from apis.duration import Duration, DurationError
from apis.meta import Condition, Object
from controller.errors import StoreError
from controller.store.assumed import Outbox
from controller.store.cluster import Cluster, Result, Write
from controller.store.snapshots import Change

if TYPE_CHECKING:  # controller.loops registers this loop: importing it here would be circular
    from controller.loops import LoopContext

__all__ = ["PodLifecycle", "completed_pod", "node_ip", "simulated_runtime", "started_pod"]

log = logging.getLogger(__name__)

replace = msgspec.structs.replace

_STARTED = ("Initialized", "Ready", "ContainersReady")


def _set(conditions: Sequence[Condition], wanted: Sequence[Condition]) -> tuple[Condition, ...]:
    types = {c.type for c in wanted}
    return (*(c for c in conditions if c.type not in types), *wanted)


def _stamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _image_id(image: str) -> str:
    repository = image.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@sha256:{_digest(image)}"


def _running(pod: Pod, container: Container, now: datetime) -> ContainerStatus:
    return ContainerStatus(
        name=container.name,
        state=ContainerState(running={"startedAt": _stamp(now)}),
        ready=True,
        restart_count=0,
        image=container.image,
        image_id=_image_id(container.image),
        container_id=f"containerd://{_digest(f'{pod.metadata.uid}/{container.name}')}",
        started=True,
    )


def _completed(
    pod: Pod, container: Container, started: str, now: datetime, *, ready: bool
) -> ContainerStatus:
    container_id = f"containerd://{_digest(f'{pod.metadata.uid}/{container.name}')}"
    return ContainerStatus(
        name=container.name,
        state=ContainerState(
            terminated={
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": started,
                "finishedAt": _stamp(now),
                "containerID": container_id,
            }
        ),
        ready=ready,
        restart_count=0,
        image=container.image,
        image_id=_image_id(container.image),
        container_id=container_id,
        started=False,
    )


def node_ip(node: Node | None) -> str:
    """The address a node's pods report as ``hostIP``: its InternalIP, else its first one."""
    if node is None or not node.status.addresses:
        return ""
    addresses = node.status.addresses
    internal = next((a.address for a in addresses if a.type == "InternalIP"), "")
    return internal or addresses[0].address


def started_pod(pod: Pod, now: datetime, node: Node | None = None) -> Pod:
    """``pod`` as the kubelet reports it once its containers run (on ``node``, when known)."""
    conditions = _set(
        pod.status.conditions,
        [Condition(type=t, status="True", last_transition_time=now) for t in _STARTED],
    )
    stamp = _stamp(now)
    init_statuses = tuple(
        _running(pod, c, now) if c.is_sidecar else _completed(pod, c, stamp, now, ready=True)
        for c in pod.spec.init_containers
    )
    ip = node_ip(node)
    ips = ({"ip": ip},) if ip else ()
    return replace(
        pod,
        status=replace(
            pod.status,
            phase="Running",
            start_time=now,
            conditions=conditions,
            host_ip=ip or pod.status.host_ip,
            host_ips=ips or pod.status.host_ips,
            pod_ip=ip or pod.status.pod_ip,
            pod_ips=ips or pod.status.pod_ips,
            init_container_statuses=init_statuses,
            container_statuses=tuple(_running(pod, c, now) for c in pod.spec.containers),
            qos_class=pod.status.qos_class or qos.kube_qos(pod).value,
        ),
    )


def completed_pod(pod: Pod, now: datetime) -> Pod:
    """``pod`` after all its containers exited 0."""
    conditions = _set(
        pod.status.conditions,
        [
            Condition(type=t, status="False", reason="PodCompleted", last_transition_time=now)
            for t in ("Ready", "ContainersReady")
        ],
    )
    started = _stamp(pod.status.start_time or now)
    statuses = tuple(_completed(pod, c, started, now, ready=False) for c in pod.spec.containers)
    init_statuses = tuple(
        _completed(pod, c, started, now, ready=False) if c.is_sidecar else status
        for c, status in zip(
            pod.spec.init_containers, pod.status.init_container_statuses, strict=False
        )
    )
    return replace(
        pod,
        status=replace(
            pod.status,
            phase="Succeeded",
            conditions=conditions,
            container_statuses=statuses,
            init_container_statuses=init_statuses or pod.status.init_container_statuses,
        ),
    )


def simulated_runtime(pod: Pod) -> timedelta | None:
    """The pod's simulated runtime; None when it has none (or not a valid duration)."""
    raw = pod.metadata.annotations.get(k.ANNOTATION_SIMULATED_RUNTIME)
    if raw is None:
        return None
    try:
        duration = Duration.parse(raw)
    except DurationError:
        log.warning(
            "pod %s/%s: %s=%r is not a duration; ignored",
            pod.metadata.namespace,
            pod.metadata.name,
            k.ANNOTATION_SIMULATED_RUNTIME,
            raw,
        )
        return None
    if duration.nanoseconds < 0:
        return None
    return timedelta(microseconds=duration.nanoseconds // 1000)


def _startable(pod: Pod) -> bool:
    return (
        bool(pod.spec.node_name)
        and pod.status.phase in ("", "Pending")
        and pod.metadata.deletion_timestamp is None
    )


def _written(results: Sequence[Result]) -> None:
    """A failed start or end is logged; the pod is started or ended again once it changes."""
    for result in results:
        if isinstance(result, StoreError):
            log.warning("pod lifecycle: write failed: %s", result)


class PodLifecycle:
    """A :class:`~controller.loops.ControlLoop`; see the module docstring."""

    name = "pod-lifecycle"

    def __init__(self) -> None:
        self._store: Cluster | None = None
        self._reset()

    def _reset(self, store: Cluster | None = None) -> None:
        #: the pod writes sent, shown as written until the store does
        self._outbox = Outbox(kinds=() if store is None else (store.registry.for_type(Pod),))
        self._view: Sequence[Object] | None = None
        #: uid -> the pod last seen.
        self._seen: dict[str, Pod] = {}
        #: (end, uid, namespace, name) of running pods with a simulated runtime.
        self._ends: list[tuple[datetime, str, str, str]] = []
        self._end_of: dict[str, datetime] = {}

    def reconcile(self, ctx: LoopContext) -> float | None:
        store = ctx.store
        if store is not self._store:
            self._store = store
            self._reset(store)
        now = ctx.now()
        snapshot = self._outbox.over(store.snapshot())
        kind = store.registry.for_type(Pod)
        view = snapshot.objects(kind)
        writes: list[Pod] = []
        if view is not self._view:
            since, self._view = self._view, view
            nodes = {
                n.metadata.name: n
                for n in snapshot.objects(store.registry.for_type(Node))
                if isinstance(n, Node)
            }
            changes = snapshot.changes(kind, since) if since is not None else None
            self._scan(view, changes, nodes, now, writes)
        ends = self._ends
        while ends and ends[0][0] <= now:
            end, uid, namespace, name = heapq.heappop(ends)
            if self._end_of.get(uid) != end:
                continue
            del self._end_of[uid]
            pod = snapshot.get(kind, name, namespace)
            if isinstance(pod, Pod) and pod.metadata.uid == uid and pod.status.phase == "Running":
                writes.append(completed_pod(pod, now))
        self._outbox.send(store, [Write.update(pod) for pod in writes], _written)
        if not self._end_of:
            return None
        return max(0.0, (min(self._end_of.values()) - now).total_seconds())

    def _scan(
        self,
        view: Sequence[Object],
        changes: Sequence[Change] | None,
        nodes: Mapping[str, Node],
        now: datetime,
        writes: list[Pod],
    ) -> None:
        """Start, track or forget the pods changed since the last scan (every pod in
        ``view`` when ``changes`` is None)."""
        if changes is None:  # every pod: whatever is not among them is gone
            gone = list(self._seen)
            self._seen, known = {}, self._seen
            changes = [(None, obj) for obj in view]
        else:
            gone = [b.metadata.uid for b, _ in changes if isinstance(b, Pod)]
            known = self._seen
        seen = self._seen
        fresh: set[str] = set()
        for _, obj in changes:
            if not isinstance(obj, Pod):
                continue
            uid = obj.metadata.uid
            fresh.add(uid)
            last = known.get(uid)
            seen[uid] = obj
            if last is obj:
                continue
            if _startable(obj):
                started = started_pod(obj, now, nodes.get(obj.spec.node_name))
                writes.append(started)
                self._track(started)
            elif obj.status.phase == "Running":
                self._track(obj)
            else:
                self._end_of.pop(uid, None)
        for uid in gone:
            if uid not in fresh:
                seen.pop(uid, None)
                self._end_of.pop(uid, None)

    def _track(self, pod: Pod) -> None:
        runtime = simulated_runtime(pod)
        started = pod.status.start_time
        uid = pod.metadata.uid
        if runtime is None or started is None:
            self._end_of.pop(uid, None)
            return
        end = started + runtime
        if self._end_of.get(uid) == end:
            return
        self._end_of[uid] = end
        heapq.heappush(self._ends, (end, uid, pod.metadata.namespace, pod.metadata.name))
