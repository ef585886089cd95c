"""The agent against a Kubernetes API server (``[report] transport = "kubernetes"``), as
koordlet works.

:class:`NodeObjects` holds this node's own objects, each through a reflector (LIST, then WATCH)
with a field selector on its name: the ``Node`` (the kubelet's: its labels, annotations and
allocatable are what the QoS strategies read), its ``NodeSLO`` (the controller's, rendered from
``slo-controller-config``) and its ``NodeMetric`` (created by the controller; the agent writes
only its status), and, with ``[pods] source = "apiserver"``, the pods whose ``spec.nodeName`` is
this node.

:class:`KubePublisher` is the :class:`~agent.report.transport.Publisher`:

* ``device``: one ``Device`` per node, named after it, a controller ``ownerReference`` to the
  Node (``blockOwnerDeletion``), the vendor/model/driver labels. Created when missing, else read
  (``resourceVersion=0``: from the API server's cache) and, when its devices, labels or
  annotations differ, updated with a plain PUT carrying the version read, under a conflict retry
  (the read is then a fresh one). The Reporter hands it over when it changed, or every
  ``[report] device_interval`` with a new report time. What others keep in the Device (its
  ``status.allocations``, other metadata) is left as it is.
* ``nodemetric``: the status of the node's NodeMetric, through the ``status`` subresource,
  conditional on the version held. No NodeMetric yet: the report waits until the controller
  made one (retried, newest only).
* ``node``: nothing is written; the Node is the kubelet's, and its Batch/Mid and GPU resources
  are the controller's to write (koord-manager's noderesource duty).
* events: created in the involved object's namespace.

A lost API server never stops the agent: a report that cannot be sent is kept, newest only per
kind (a later report replaces it), with the last :data:`EVENT_BACKLOG` events, and :meth:`run`
sends them once the server answers again, after a jittered backoff. The QoS loop meanwhile goes
on with the last Node, NodeSLO and pods held. A refusal that sending again cannot cure (invalid,
forbidden) is logged and dropped.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Final

import msgspec

from agent.report.transport import StateLeaf
from apis.codec import decode_json, encode_json
from apis.core import Event, Node, Pod
from apis.errors import DecodeError
from apis.kinds import default_registry
from apis.meta import Object, OwnerReference
from apis.scheduling import Device
from apis.slo import NodeMetric, NodeSLO, NodeSLOSpec
from runtime.kube.client import KubeClient, resource_path
from runtime.kube.errors import (
    AlreadyExists,
    Conflict,
    KubeError,
    NotFound,
    ServerUnavailable,
)
from runtime.kube.reflector import Backoff, Reflector

__all__ = ["CONFLICT_RETRIES", "EVENT_BACKLOG", "KubePublisher", "NodeObjects", "owned_device"]

log = logging.getLogger(__name__)

#: Tries of one write whose version went stale meanwhile (client-go's ``retry.DefaultRetry``).
CONFLICT_RETRIES: Final = 5
#: Events kept while the API server cannot be reached (the oldest go first).
EVENT_BACKLOG: Final = 100

_REGISTRY = default_registry()
NODES: Final = _REGISTRY.for_type(Node)
PODS: Final = _REGISTRY.for_type(Pod)
DEVICES: Final = _REGISTRY.for_type(Device)
NODESLOS: Final = _REGISTRY.for_type(NodeSLO)
NODEMETRICS: Final = _REGISTRY.for_type(NodeMetric)
EVENTS: Final = _REGISTRY.for_type(Event)


class NodeObjects:
    """This node's objects from the API server (see the module docstring); a component."""

    def __init__(self, client: KubeClient, node: str, *, pods: bool = False) -> None:
        self.client = client
        self.node = node
        self.name = f"kubernetes/{node}"
        own = f"metadata.name={node}"
        self.nodes = Reflector(client, NODES, field_selector=own)
        self.nodeslos = Reflector(client, NODESLOS, field_selector=own)
        self.nodemetrics = Reflector(client, NODEMETRICS, field_selector=own)
        self.pods = (
            Reflector(client, PODS, field_selector=f"spec.nodeName={node}") if pods else None
        )

    @property
    def reflectors(self) -> tuple[Reflector, ...]:
        every = (self.nodes, self.nodeslos, self.nodemetrics, self.pods)
        return tuple(r for r in every if r is not None)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for reflector in self.reflectors:
                group.create_task(reflector.run(), name=f"{self.name}/{reflector.name}")

    def node_object(self) -> Node | None:
        """The Node as last seen (None before the first list, or when it is not there)."""
        node = self.nodes.get(self.node)
        return node if isinstance(node, Node) else None

    def nodeslo(self) -> NodeSLOSpec | None:
        slo = self.nodeslos.get(self.node)
        return slo.spec if isinstance(slo, NodeSLO) else None

    def nodemetric(self) -> NodeMetric | None:
        metric = self.nodemetrics.get(self.node)
        return metric if isinstance(metric, NodeMetric) else None


def owned_device(device: Device, node: Node) -> Device:
    """``device`` owned by ``node``: the only ownerReference, controller, blocking deletion."""
    owner = OwnerReference(
        api_version="v1",
        kind="Node",
        name=node.metadata.name,
        uid=node.metadata.uid,
        controller=True,
        block_owner_deletion=True,
    )
    meta = msgspec.structs.replace(device.metadata, owner_references=(owner,))
    return msgspec.structs.replace(device, metadata=meta)


def _same_device(stored: Device, wanted: Device) -> bool:
    return (
        stored.spec == wanted.spec
        and stored.metadata.labels == wanted.metadata.labels
        and stored.metadata.annotations == wanted.metadata.annotations
        and stored.metadata.owner_references == wanted.metadata.owner_references
    )


class _Pending(Exception):  # noqa: N818 - a verdict, raised only inside this module
    """A report that cannot be written yet and is kept to be sent again."""


class KubePublisher:
    """The agent's reports written to the API server (see the module docstring)."""

    def __init__(
        self,
        objects: NodeObjects,
        *,
        backoff: Backoff | None = None,
    ) -> None:
        self.node = objects.node
        self.name = f"report/{objects.node}"
        self._objects = objects
        self._client = objects.client
        self._backoff = backoff or Backoff(initial=1.0, maximum=30.0)
        self._pending: dict[str, Object] = {}
        self._events: collections.deque[Event] = collections.deque(maxlen=EVENT_BACKLOG)
        self._wake = asyncio.Event()
        self._unreachable = False

    async def __aenter__(self) -> KubePublisher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    # --- the Publisher -----------------------------------------------------------------------

    async def report(self, leaf: StateLeaf, obj: Object) -> bool:
        if leaf == "node":
            return False
        self._pending[leaf] = obj
        return await self._send(leaf)

    async def event(self, event: Event) -> None:
        self._events.append(event)
        await self._send_events()

    # --- sending -----------------------------------------------------------------------------

    async def _send(self, leaf: str) -> bool:
        obj = self._pending.get(leaf)
        if obj is None:
            return False
        try:
            if isinstance(obj, Device):
                written = await self._write_device(obj)
            elif isinstance(obj, NodeMetric):
                written = await self._write_nodemetric(obj)
            else:
                raise TypeError(f"no {leaf} report in Kubernetes mode: {type(obj).__name__}")
        except _Pending as why:
            log.info("%s: %s; sent when it can be", self.name, why)
            self._wake.set()
            return False
        except ServerUnavailable as err:
            self._lost(err)
            return False
        except (KubeError, DecodeError) as err:
            log.error("%s: the %s cannot be written: %s", self.name, leaf, err)
            self._pending.pop(leaf, None)
            return False
        if self._pending.get(leaf) is obj:
            del self._pending[leaf]
        self._back()
        return written

    async def _send_events(self) -> None:
        while self._events:
            event = self._events[0]
            namespace = event.metadata.namespace or "default"
            try:
                await self._client.post(
                    resource_path(EVENTS, namespace),
                    encode_json(event),
                    kind=EVENTS,
                    namespace=namespace,
                )
            except ServerUnavailable as err:
                self._lost(err)
                return
            except KubeError as err:
                log.error("%s: the API server refused an Event: %s", self.name, err)
            else:
                self._back()
            if self._events and self._events[0] is event:
                self._events.popleft()

    def _lost(self, err: ServerUnavailable) -> None:
        if not self._unreachable:
            log.warning("%s: the API server cannot be reached, reports wait: %s", self.name, err)
        self._unreachable = True
        self._wake.set()

    def _back(self) -> None:
        if self._unreachable:
            log.info("%s: the API server answers again", self.name)
        self._unreachable = False

    async def run(self) -> None:
        """Send again what waits, newest first kept, after a backoff; until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending or self._events:
                await asyncio.sleep(self._backoff.next())
                for leaf in tuple(self._pending):
                    await self._send(leaf)
                await self._send_events()
            self._backoff.reset()

    # --- Device ------------------------------------------------------------------------------

    async def _node(self) -> Node:
        node = self._objects.node_object()
        if node is not None:
            return node
        try:
            body = await self._client.get(
                resource_path(NODES, name=self.node), kind=NODES, name=self.node
            )
        except NotFound:
            raise _Pending(f"node {self.node} is not registered yet") from None
        return decode_json(body, Node)

    async def _write_device(self, device: Device) -> bool:
        """Create or update the node's Device; True when something was written."""
        wanted = owned_device(device, await self._node())
        path = resource_path(DEVICES, name=self.node)
        name = self.node
        params: dict[str, str] | None = {"resourceVersion": "0"}
        for _ in range(CONFLICT_RETRIES):
            try:
                body = await self._client.get(path, params=params, kind=DEVICES, name=name)
            except NotFound:
                try:
                    await self._client.post(
                        resource_path(DEVICES), encode_json(wanted), kind=DEVICES, name=name
                    )
                except AlreadyExists:
                    params = None
                    continue
                log.info("%s: Device %s created", self.name, self.node)
                return True
            stored = decode_json(body, Device)
            if _same_device(stored, wanted):
                return False
            meta = msgspec.structs.replace(
                stored.metadata,
                labels=wanted.metadata.labels,
                annotations=wanted.metadata.annotations,
                owner_references=wanted.metadata.owner_references,
            )
            updated = msgspec.structs.replace(stored, metadata=meta, spec=wanted.spec)
            try:
                await self._client.put(path, encode_json(updated), kind=DEVICES, name=name)
            except Conflict:
                params = None  # read the current version, not the cache's
                continue
            return True
        raise _Pending(f"Device {self.node} still changed by others after {CONFLICT_RETRIES} tries")

    # --- NodeMetric --------------------------------------------------------------------------

    async def _write_nodemetric(self, metric: NodeMetric) -> bool:
        """The node's NodeMetric status replaced by ``metric``'s; True when written."""
        stored = self._objects.nodemetric()
        path = resource_path(NODEMETRICS, name=self.node)
        for _ in range(CONFLICT_RETRIES):
            if stored is None:
                raise _Pending(f"no NodeMetric {self.node} yet (the controller creates it)")
            if stored.status == metric.status:
                return False
            updated = msgspec.structs.replace(stored, status=metric.status)
            try:
                await self._client.put(
                    f"{path}/status", encode_json(updated), kind=NODEMETRICS, name=self.node
                )
            except Conflict:
                stored = await self._read_nodemetric(path)
                continue
            except NotFound:
                stored = None
                continue
            return True
        raise _Pending(
            f"NodeMetric {self.node} still changed by others after {CONFLICT_RETRIES} tries"
        )

    async def _read_nodemetric(self, path: str) -> NodeMetric | None:
        try:
            body = await self._client.get(path, kind=NODEMETRICS, name=self.node)
        except NotFound:
            return None
        try:
            return decode_json(body, NodeMetric)
        except DecodeError as err:
            raise _Pending(f"NodeMetric {self.node} does not decode: {err}") from None
