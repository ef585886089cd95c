"""Carrying out the evictions the QoS strategies decide.

An :class:`Evictor` takes one :class:`~agent.qos.framework.Eviction` and returns True when it
evicted the pod (or asked for it) now. Two ways out:

* :class:`ControllerEvictor` (koordpy's default) publishes an
  :class:`~apis.eviction.EvictionRequest` on ``koordpy/v1/nodes/{node}/evictions``; the
  controller deletes the pod and records the ``Evicted`` Event on it.
* :class:`ApiServerEvictor` POSTs a ``policy/v1`` Eviction to a Kubernetes API server
  (``/api/v1/namespaces/{ns}/pods/{name}/eviction``, bearer token, the pod's uid as a
  precondition) and publishes the Event itself on the agent's ``events`` topic: ``Evicted``
  when the API server accepted, ``EvictionFailed`` when it refused. :class:`KubeEvictor` does
  the same over the agent's connection of ``[report] transport = "kubernetes"``.

Both remember the pods they evicted for ``ttl`` seconds (:class:`RecentEvictions`), so a pod
that is still terminating is not evicted twice; a refused eviction is not remembered and the
next request tries again.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Protocol

from agent.qos.framework import Eviction
from agent.report.transport import Publisher
from apis.codec import encode_json
from apis.core import Event, EventSource, Pod
from apis.eviction import EVICTED_REASON, EVICTIONS_LEAF, EvictionRequest, to_api
from apis.kinds import default_registry
from apis.meta import ObjectMeta, ObjectReference
from runtime.bus import node_topic
from runtime.kube.client import KubeClient, resource_path
from runtime.kube.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    ServerUnavailable,
)

__all__ = [
    "COMPONENT",
    "DEFAULT_TTL",
    "FAILED_REASON",
    "ApiServerEvictor",
    "BusSink",
    "ControllerEvictor",
    "EvictionSink",
    "Evictor",
    "KubeEvictor",
    "RecentEvictions",
    "eviction_event",
    "eviction_request",
    "pod_key",
]

_log = logging.getLogger(__name__)

#: Seconds a pod stays remembered after its eviction.
DEFAULT_TTL: Final = 300.0
#: Component named on the Events the agent publishes.
COMPONENT: Final = "koordlet"
#: Event reason when the API server refused an eviction.
FAILED_REASON: Final = "EvictionFailed"


class Evictor(Protocol):
    async def evict(self, eviction: Eviction) -> bool:
        """Evict the pod; True when it was evicted (or requested) by this call."""
        ...


class EvictionSink(Protocol):
    """Where eviction requests are published (the bus, an MQTT client)."""

    async def publish(self, topic: str, payload: bytes) -> None: ...


class _SyncPublisher(Protocol):
    def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None: ...


class BusSink:
    """An :class:`EvictionSink` over anything with a non-blocking ``publish`` (a bus client)."""

    def __init__(self, client: _SyncPublisher) -> None:
        self._client = client

    async def publish(self, topic: str, payload: bytes) -> None:
        self._client.publish(topic, payload)


class RecentEvictions:
    """Pod keys evicted within the last ``ttl`` seconds (an expiring set)."""

    def __init__(self, ttl: float = DEFAULT_TTL, *, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self._clock = clock
        self._until: dict[str, float] = {}

    def _prune(self) -> None:
        now = self._clock()
        self._until = {key: until for key, until in self._until.items() if until > now}

    def add(self, key: str) -> None:
        self._prune()
        self._until[key] = self._clock() + self.ttl

    def __contains__(self, key: object) -> bool:
        self._prune()
        return key in self._until

    def __len__(self) -> int:
        self._prune()
        return len(self._until)


def pod_key(pod: Pod) -> str:
    """The pod's uid, or ``namespace/name`` when it has none."""
    meta = pod.metadata
    return meta.uid or f"{meta.namespace or 'default'}/{meta.name}"


def eviction_request(eviction: Eviction) -> EvictionRequest:
    """The wire request for the controller."""
    meta = eviction.pod.metadata
    return EvictionRequest(
        metadata=ObjectMeta(name=meta.name, namespace=meta.namespace or "default", uid=meta.uid),
        reason=EVICTED_REASON,
        message=eviction.message,
        feature=eviction.reason,
    )


def eviction_event(
    eviction: Eviction, *, node: str, now: datetime, reason: str = EVICTED_REASON, note: str = ""
) -> Event:
    """A Warning Event on the evicted pod naming the feature (``reason``: Evicted or failed)."""
    meta = eviction.pod.metadata
    namespace = meta.namespace or "default"
    message = f"evicted by feature {eviction.reason} on node {node}: {eviction.message}"
    if reason != EVICTED_REASON:
        message = f"eviction by feature {eviction.reason} on node {node} failed: {note}"
    stamp = now.replace(microsecond=0)
    return Event(
        metadata=ObjectMeta(generate_name=f"{meta.name}.", namespace=namespace),
        involved_object=ObjectReference(
            api_version="v1", kind="Pod", namespace=namespace, name=meta.name, uid=meta.uid
        ),
        reason=reason,
        message=message,
        source=EventSource(component=COMPONENT, host=node),
        first_timestamp=stamp,
        last_timestamp=stamp,
        count=1,
        type="Warning",
        reporting_component=COMPONENT,
        reporting_instance=node,
    )


def _shown(eviction: Eviction) -> str:
    meta = eviction.pod.metadata
    return f"{meta.namespace or 'default'}/{meta.name}"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ControllerEvictor:
    """Asks the controller to evict, over the bus (``koordpy/v1/nodes/{node}/evictions``)."""

    def __init__(
        self,
        sink: EvictionSink,
        node: str,
        *,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self._sink = sink
        self._topic = node_topic(node, EVICTIONS_LEAF)
        self.recent = RecentEvictions(ttl, clock=clock)

    async def evict(self, eviction: Eviction) -> bool:
        key = pod_key(eviction.pod)
        if key in self.recent:
            _log.debug("pod %s was evicted recently; not again", _shown(eviction))
            return False
        await self._sink.publish(self._topic, encode_json(eviction_request(eviction)))
        self.recent.add(key)
        _log.info(
            "asked the controller to evict pod %s (%s)",
            _shown(eviction),
            eviction.reason,
            extra={"pod": _shown(eviction), "feature": eviction.reason},
        )
        return True


class ApiServerEvictor:
    """Evicts through a Kubernetes API server's Eviction API.

    ``server`` is the API server's base URL (``https://10.0.0.1:6443``); the bearer token is
    ``token``, or read from ``token_file`` before every request (projected tokens rotate).
    TLS verifies against ``ca_file`` (else the system store) unless ``insecure``. Each request
    runs in a thread and gives up after ``timeout`` seconds. ``events`` (the agent's
    publisher) receives an Event per eviction, accepted or refused.
    """

    def __init__(
        self,
        server: str,
        node: str,
        *,
        token: str = "",
        token_file: Path | None = None,
        ca_file: Path | None = None,
        insecure: bool = False,
        timeout: float = 10.0,
        events: Publisher | None = None,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.server = server.rstrip("/")
        self.node = node
        self.timeout = timeout
        self._token = token
        self._token_file = token_file
        self._events = events
        self._wall_clock = wall_clock
        self.recent = RecentEvictions(ttl, clock=clock)
        self._ssl: ssl.SSLContext | None = None
        if self.server.startswith("https://"):
            context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            if insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._ssl = context

    def _bearer(self) -> str:
        if self._token_file is not None:
            return self._token_file.read_text().strip()
        return self._token

    def url(self, eviction: Eviction) -> str:
        meta = eviction.pod.metadata
        namespace = urllib.parse.quote(meta.namespace or "default", safe="")
        name = urllib.parse.quote(meta.name, safe="")
        return f"{self.server}/api/v1/namespaces/{namespace}/pods/{name}/eviction"

    def _post(self, url: str, body: bytes, token: str) -> tuple[int, str]:
        """One POST (in a worker thread): the status and the response text."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            with err:
                return err.code, err.read().decode(errors="replace")

    async def _send(self, eviction: Eviction, body: bytes) -> tuple[int, str]:
        """POST the Eviction ``body``: the HTTP status and the response text; OSError or
        TimeoutError when the server cannot be reached."""
        token = await asyncio.to_thread(self._bearer)
        async with asyncio.timeout(self.timeout + 1):
            return await asyncio.to_thread(self._post, self.url(eviction), body, token)

    async def evict(self, eviction: Eviction) -> bool:
        key = pod_key(eviction.pod)
        shown = _shown(eviction)
        if key in self.recent:
            _log.debug("pod %s was evicted recently; not again", shown)
            return False
        body = encode_json(to_api(eviction_request(eviction)))
        where = {"pod": shown, "feature": eviction.reason}
        try:
            status, text = await self._send(eviction, body)
        except (OSError, TimeoutError) as err:
            _log.warning("evicting pod %s failed: %s", shown, err, extra=where)
            await self._event(eviction, FAILED_REASON, f"API server unreachable: {err}")
            return False
        if 200 <= status < 300:
            self.recent.add(key)
            _log.info("evicted pod %s (%s)", shown, eviction.reason, extra=where)
            await self._event(eviction, EVICTED_REASON)
            return True
        if status == 404:
            _log.info("pod %s is already gone; nothing to evict", shown, extra=where)
            return False
        # 429: a disruption budget forbids it now; 409: the uid no longer matches; others.
        _log.warning(
            "API server refused to evict pod %s: HTTP %d %s", shown, status, text[:200], extra=where
        )
        await self._event(eviction, FAILED_REASON, f"HTTP {status}")
        return False

    async def _event(self, eviction: Eviction, reason: str, note: str = "") -> None:
        if self._events is None:
            return
        event = eviction_event(
            eviction, node=self.node, now=self._wall_clock(), reason=reason, note=note
        )
        await self._events.event(event)


class KubeEvictor(ApiServerEvictor):
    """:class:`ApiServerEvictor` over the agent's own API server connection (``[report]
    transport = "kubernetes"``): its credentials, rate limit and timeouts."""

    def __init__(
        self,
        client: KubeClient,
        node: str,
        *,
        events: Publisher | None = None,
        ttl: float = DEFAULT_TTL,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        super().__init__(
            client.server,
            node,
            timeout=client.options.timeout,
            events=events,
            ttl=ttl,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._client = client

    async def _send(self, eviction: Eviction, body: bytes) -> tuple[int, str]:
        meta = eviction.pod.metadata
        namespace = meta.namespace or "default"
        path = resource_path(_PODS, namespace, meta.name, "eviction")
        try:
            await self._client.post(path, body, kind=_PODS, namespace=namespace, name=meta.name)
        except ServerUnavailable as err:
            if err.code == 0:
                raise OSError(err.message) from None
            return err.code, err.message
        except KubeError as err:
            return _http_status(err), err.message
        return 201, ""


_PODS: Final = default_registry().for_type(Pod)


def _http_status(err: KubeError) -> int:
    """The HTTP status a refusal stands for (what :meth:`ApiServerEvictor.evict` decides by)."""
    if isinstance(err, NotFound):
        return 404
    if isinstance(err, Conflict | AlreadyExists):
        return 409
    if isinstance(err, Forbidden):
        return 403
    if isinstance(err, Invalid):
        return 422
    if isinstance(err, ApiError):
        return err.code
    return 400
