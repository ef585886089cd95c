"""A read-only snapshot of a Kubernetes cluster's objects, for ``koordpy simulate --from-cluster``.

:func:`read_cluster` connects (a kubeconfig, else in-cluster), lists every kind of the registry
the API server serves through a :class:`~controller.store.kubernetes.KubeStore` (so exactly
what the controller would read: ConfigMaps of the configuration namespace only, no Events),
takes one snapshot once every kind has listed, and closes. Nothing is written: the store is
opened in dry-run mode besides, so even a write would leave the cluster as it was.

Objects of the cluster that koordpy's Structs cannot decode are left out by the reflectors
(logged there); :attr:`ClusterSnapshot.left_out` counts them.
"""

from __future__ import annotations

import os

import msgspec

from apis.kinds import Registry, default_registry
from apis.meta import Object
from controller.kube.client import ClientOptions, KubeClient, connect
from controller.store.kubernetes import CONFIG_NAMESPACE, KubeStore

__all__ = ["DEFAULT_SYNC_TIMEOUT", "ClusterSnapshot", "read_cluster", "snapshot_of"]

#: Seconds every served kind has to list before the snapshot is given up.
DEFAULT_SYNC_TIMEOUT = 60.0


class ClusterSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The objects of a cluster at one moment, in the registry's kind order."""

    #: The API server's address.
    server: str
    #: Every object read, with its metadata as the server stored it.
    objects: tuple[Object, ...]
    #: The kinds the server serves (the registry's keys), in the registry's order.
    kinds: tuple[str, ...]
    #: Objects the server holds that did not decode, so are not in :attr:`objects`.
    left_out: int = 0


async def snapshot_of(
    client: KubeClient,
    *,
    registry: Registry | None = None,
    config_namespace: str = CONFIG_NAMESPACE,
    sync_timeout: float = DEFAULT_SYNC_TIMEOUT,
) -> ClusterSnapshot:
    """Every served kind's objects through ``client`` (which stays the caller's)."""
    registry = registry if registry is not None else default_registry()
    store = KubeStore(client, registry=registry, config_namespace=config_namespace, dry_run=True)
    try:
        await store.start(sync_timeout=sync_timeout)
        taken = store.snapshot()
        served = tuple(kind for kind in registry if kind.key in store.reflectors)
        objects = tuple(obj for kind in served for obj in taken.objects(kind))
        left_out = sum(reflector.decode_errors for reflector in store.reflectors.values())
    finally:
        await store.aclose()
    return ClusterSnapshot(
        server=client.server,
        objects=objects,
        kinds=tuple(kind.key for kind in served),
        left_out=left_out,
    )


async def read_cluster(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    options: ClientOptions | None = None,
    registry: Registry | None = None,
    sync_timeout: float = DEFAULT_SYNC_TIMEOUT,
) -> ClusterSnapshot:
    """:func:`snapshot_of` the cluster of ``kubeconfig`` (None: in-cluster, as the pod's
    service account), connecting and closing the connection around it."""
    client = await connect(kubeconfig, context=context, options=options or ClientOptions())
    async with client:
        return await snapshot_of(client, registry=registry, sync_timeout=sync_timeout)
