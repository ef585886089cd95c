"""``policy/v1`` Eviction, and the eviction request an agent sends its controller.

Two shapes of the same thing:

* :class:`Eviction` is Kubernetes' own subresource body, POSTed to
  ``/api/v1/namespaces/{ns}/pods/{name}/eviction``: the pod's name and namespace in
  ``metadata``, and the pod's uid as a delete precondition, so the API server refuses to evict
  a newer pod that took the same name.
* :class:`EvictionRequest` is what an agent publishes on ``koordpy/v1/nodes/{node}/evictions``
  for the controller: the same ``apiVersion``/``kind``, the pod's name, namespace and uid in
  ``metadata``, plus why (``reason``, ``message``) and which agent feature asked for it
  (``feature``: ``BEMemoryEvict``, ``CPUEvict``...). :func:`to_api` turns one into the other.

Both sides import this module: the agent builds requests, the controller's ingest decodes them.
"""

from __future__ import annotations

from typing import Final

import msgspec

from apis.meta import Model, Object, ObjectMeta

__all__ = [
    "EVICTED_REASON",
    "EVICTIONS_LEAF",
    "DeleteOptions",
    "Eviction",
    "EvictionRequest",
    "Preconditions",
    "to_api",
]

#: Topic leaf of eviction requests: ``koordpy/v1/nodes/{node}/evictions``.
EVICTIONS_LEAF: Final = "evictions"
#: Event reason recorded on an evicted pod.
EVICTED_REASON: Final = "Evicted"


class Preconditions(Model):
    uid: str | None = None
    resource_version: str | None = None


class DeleteOptions(Model):
    """The parts of ``meta/v1`` DeleteOptions an eviction uses."""

    grace_period_seconds: int | None = None
    preconditions: Preconditions | None = None
    propagation_policy: str = ""
    dry_run: tuple[str, ...] = ()


class Eviction(Object):
    """``policy/v1`` Eviction (the body of a pod's ``eviction`` subresource)."""

    api_version: str = "policy/v1"
    kind: str = "Eviction"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    delete_options: DeleteOptions | None = None


class EvictionRequest(Object):
    """An agent asking its controller to evict one of the node's pods.

    ``metadata`` names the pod (name, namespace, uid: a request whose uid no longer matches the
    stored pod is dropped). ``reason`` is the Event reason to record (``Evicted``), ``message``
    says why in words, ``feature`` is the agent feature (feature gate) that chose the victim.
    """

    api_version: str = "policy/v1"
    kind: str = "Eviction"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    reason: str = EVICTED_REASON
    message: str = ""
    feature: str = ""


def to_api(request: EvictionRequest) -> Eviction:
    """The ``policy/v1`` body for the API server: name and namespace, uid as a precondition."""
    meta = request.metadata
    return Eviction(
        metadata=ObjectMeta(name=meta.name, namespace=meta.namespace),
        delete_options=DeleteOptions(preconditions=Preconditions(uid=meta.uid))
        if meta.uid
        else None,
    )
