"""The Kubernetes backend of the Cluster seam, and Lease election, on the real API server.

Each test works in a namespace of its own (and on nodes named after it). Nothing sleeps to
wait: a test waits on the store's ``changed_after`` or the Pending's callback, with a timeout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import pytest

from apis.core import Node, Pod
from apis.kinds import default_registry
from apis.meta import Object
from controller.errors import Conflict, Invalid, NotFound, StoreError
from controller.kube.client import KubeClient, resource_path
from controller.kube.election import LeaseElector
from controller.store.kubernetes import KubeStore, merge_diff
from controller.store.writes import Outcome, Pending, Result, Write

pytestmark = pytest.mark.kube

REGISTRY = default_registry()
PODS = REGISTRY.for_type(Pod)
NODES = REGISTRY.for_type(Node)
WAIT = 30.0


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


@pytest.fixture
async def store(client: KubeClient) -> AsyncIterator[KubeStore]:
    opened = KubeStore(client)
    await opened.start(sync_timeout=WAIT)
    try:
        yield opened
    finally:
        await opened.aclose()


async def until(store: KubeStore, check: Callable[[], bool]) -> None:
    """Wait (on the store's changes) until ``check()`` holds."""
    async with asyncio.timeout(WAIT):
        while not check():
            await store.changed_after(store.revision)


async def results(pending: Pending) -> list[Result]:
    done = asyncio.Event()
    pending.add_done_callback(lambda _: done.set())
    async with asyncio.timeout(WAIT):
        await done.wait()
    return pending.results()


async def make_pod(client: KubeClient, namespace: str, name: str) -> None:
    """A pod, once the namespace's default service account lets it be created."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [{"name": "c", "image": "busybox"}],
            # A field koordpy's Structs do model, and one they model only as given.
            "terminationGracePeriodSeconds": 0,
        },
    }
    async with asyncio.timeout(WAIT):
        while True:
            try:
                await client.post(resource_path(PODS, namespace), dumps(body), kind=PODS)
                return
            except StoreError:  # no service account yet (Forbidden)
                await asyncio.sleep(0.2)


async def held_pod(client: KubeClient, store: KubeStore, namespace: str, name: str) -> Pod:
    """A new pod (:func:`make_pod`), once the store holds it."""
    await make_pod(client, namespace, name)
    await until(store, lambda: store.exists(PODS, name, namespace))
    pod = store.get(PODS, name, namespace)
    assert isinstance(pod, Pod)
    return pod


async def events_of(
    client: KubeClient, namespace: str, reason: str, *, about: str = ""
) -> list[dict[str, Any]]:
    """The Events of ``reason`` in ``namespace`` (about the object named ``about``, if given),
    once there is one: Events are written after the write they tell of."""
    path = f"/api/v1/namespaces/{namespace}/events"
    async with asyncio.timeout(WAIT):
        while True:
            found = [
                e
                for e in json.loads(await client.get(path))["items"]
                if e["reason"] == reason and about in ("", e["involvedObject"]["name"])
            ]
            if found:
                return found
            await asyncio.sleep(0.1)


async def make_node(client: KubeClient, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    await client.post(resource_path(NODES), dumps(body), kind=NODES)


def test_merge_diff_is_a_merge_patch() -> None:
    before = {"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2], "gone": True}
    after = {"a": 1, "b": {"c": 2, "d": 4, "e": 5}, "l": [1]}
    assert merge_diff(before, after) == {"b": {"d": 4, "e": 5}, "l": [1], "gone": None}
    assert merge_diff(after, after) == {}


async def test_snapshots_follow_the_cluster_and_keep_identity(
    client: KubeClient, store: KubeStore, namespace: str
) -> None:
    node = f"{namespace}-n1"
    await make_node(client, node)
    await make_pod(client, namespace, "p")
    await make_pod(client, namespace, "q")  # unbound: nothing (kwok included) changes it
    await until(store, lambda: store.exists(PODS, "q", namespace) and store.exists(NODES, node))
    first = store.snapshot()
    held = store.get(PODS, "q", namespace)
    await client.patch(
        resource_path(PODS, namespace, "p"),
        dumps({"metadata": {"labels": {"x": "y"}}}),
        kind=PODS,
    )
    await until(store, lambda: store.get(PODS, "p", namespace).metadata.labels.get("x") == "y")
    assert store.get(PODS, "q", namespace) is held  # unchanged: the very object, in every snapshot
    assert first.get(PODS, "p", namespace).metadata.labels == {}  # an old snapshot stays
    await client.delete(resource_path(NODES, "", node))


async def test_bind_patches_the_prebind_annotations_then_binds(
    client: KubeClient, store: KubeStore, namespace: str
) -> None:
    node = f"{namespace}-gpu"
    await make_node(client, node)
    pod = await held_pod(client, store, namespace, "gpu")
    allocated = '{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100"}}]}'
    bound = msgspec.structs.replace(
        pod,
        metadata=msgspec.structs.replace(
            pod.metadata,
            annotations={
                **pod.metadata.annotations,
                "scheduling.koordinator.sh/device-allocated": allocated,
            },
        ),
        spec=msgspec.structs.replace(pod.spec, node_name=node),
    )
    [result] = await results(store.write([Write.bind(bound)]))
    assert not isinstance(result, StoreError), result
    stored = json.loads(await client.get(resource_path(PODS, namespace, "gpu")))
    assert stored["spec"]["nodeName"] == node
    assert stored["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"] == (
        allocated
    )
    assert stored["spec"]["terminationGracePeriodSeconds"] == 0
    # Bound once: a second binding is refused by the API server, and nothing changes.
    [again] = await results(store.write([Write.bind(bound)]))
    assert isinstance(again, Conflict), again
    await client.delete(resource_path(NODES, "", node))


async def test_bind_of_a_pod_created_again_under_its_name_is_refused(
    client: KubeClient, store: KubeStore, namespace: str
) -> None:
    old = await held_pod(client, store, namespace, "again")
    await client.delete(resource_path(PODS, namespace, "again"), dumps({"gracePeriodSeconds": 0}))
    await until(store, lambda: not store.exists(PODS, "again", namespace))
    [result] = await results(
        store.write(
            [
                Write.bind(
                    msgspec.structs.replace(
                        old, spec=msgspec.structs.replace(old.spec, node_name="n")
                    )
                )
            ]
        )
    )
    assert isinstance(result, NotFound), result


async def test_update_is_conditional_and_keeps_what_it_did_not_change(
    client: KubeClient, store: KubeStore, namespace: str
) -> None:
    pod = await held_pod(client, store, namespace, "u")
    labelled = msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, labels={"a": "b"})
    )
    [first] = await results(store.write([Write.update(labelled)]))
    assert not isinstance(first, StoreError), first
    assert first[1] is Outcome.CONFIGURED
    # The same version again: stale now, refused, and nothing of it is stored.
    stale = msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, labels={"a": "c"})
    )
    [second] = await results(store.write([Write.update(stale)]))
    assert isinstance(second, Conflict), second
    stored = json.loads(await client.get(resource_path(PODS, namespace, "u")))
    assert stored["metadata"]["labels"] == {"a": "b"}
    assert stored["spec"]["schedulerName"] == "koord-scheduler"


async def test_eviction_goes_through_the_eviction_api(
    client: KubeClient, store: KubeStore, namespace: str
) -> None:
    pod = await held_pod(client, store, namespace, "e")
    [result] = await results(store.write([Write.evict(PODS, pod)]))
    assert not isinstance(result, StoreError), result
    assert result[1] is Outcome.DELETED
    await until(
        store, lambda: not store.exists(PODS, "e", namespace) or _deleting(store, namespace)
    )


def _deleting(store: KubeStore, namespace: str) -> bool:
    obj: Object = store.get(PODS, "e", namespace)
    return obj.metadata.deletion_timestamp is not None


async def test_an_invalid_write_is_a_result_and_an_event_on_the_object(
    client: KubeClient, store: KubeStore, namespace: str
) -> None:
    pod = await held_pod(client, store, namespace, "bad")
    invalid = msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, labels={"not a label!": "x"})
    )
    [result] = await results(store.write([Write.update(invalid)]))
    assert isinstance(result, Invalid), result
    assert "metadata.labels" in str(result)
    [event] = await events_of(client, namespace, "FailedWrite")
    assert event["involvedObject"]["name"] == "bad"
    assert event["type"] == "Warning"
    assert "metadata.labels" in event["message"]


async def test_an_object_koordpy_cannot_read_is_left_out_and_told_why(
    client: KubeClient, koordinator_crds: list[str], namespace: str
) -> None:
    """Koordinator's v1.8 CRD keeps a Reservation's pod template untyped, so a misspelt
    field gets in (no webhook here): koordpy leaves that version out, keeps the last one it
    could read, and says so with a Warning Event on the Reservation."""
    kind = REGISTRY.for_gvk("scheduling.koordinator.sh/v1alpha1", "Reservation")
    name = f"{namespace}-rsv"
    body: dict[str, Any] = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "owners": [{"labelSelector": {"matchLabels": {"app": "x"}}}],
            "template": {
                "spec": {
                    "containers": [
                        {"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}
                    ]
                }
            },
        },
    }
    path = resource_path(kind)
    await client.post(path, dumps(body), kind=kind)
    opened = KubeStore(client)
    await opened.start(sync_timeout=WAIT)
    try:
        assert opened.exists(kind, name)
        good = opened.get(kind, name)
        current = json.loads(await client.get(resource_path(kind, "", name)))
        current["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
        await client.put(resource_path(kind, "", name), dumps(current), kind=kind)
        [event] = await events_of(client, "default", "InvalidObject", about=name)
        assert event["type"] == "Warning"
        assert "imagePullPolicyy" in event["message"]
        assert event["involvedObject"]["kind"] == "Reservation"
        assert opened.get(kind, name) is good  # the last version it could read
    finally:
        await opened.aclose()
        await client.delete(resource_path(kind, "", name))


async def test_a_quota_koordinators_webhook_would_refuse_is_told_why(
    client: KubeClient, koordinator_crds: list[str], namespace: str
) -> None:
    """No webhook refuses an ElasticQuota whose min is over its max on this cluster:
    koordpy's checks say so on it, naming the field, as ``koordpy apply`` would refuse it."""
    kind = REGISTRY.for_gvk("scheduling.sigs.k8s.io/v1alpha1", "ElasticQuota")
    body = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {"name": "upside-down"},
        "spec": {"min": {"cpu": "8"}, "max": {"cpu": "4"}},
    }
    await client.post(resource_path(kind, namespace), dumps(body), kind=kind)
    opened = KubeStore(client)
    await opened.start(sync_timeout=WAIT)
    try:
        [event] = await events_of(client, namespace, "InvalidObject")
        assert event["involvedObject"]["name"] == "upside-down"
        assert event["type"] == "Warning"
        assert "spec.min" in event["message"]
        assert "more than spec.max" in event["message"]
    finally:
        await opened.aclose()


async def test_one_lease_one_leader_and_a_standby_takes_over(
    client: KubeClient, namespace: str
) -> None:
    def elector(identity: str) -> LeaseElector:
        return LeaseElector(
            client,
            "koord-scheduler",
            namespace=namespace,
            identity=identity,
            lease_duration=3.0,
            renew_deadline=2.0,
            retry_period=0.5,
        )

    first, second = elector("a"), elector("b")
    assert await first.try_acquire_or_renew()
    assert not await second.try_acquire_or_renew()
    assert await first.try_acquire_or_renew()  # the holder renews
    lease = json.loads(
        await client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/koord-scheduler"
        )
    )
    assert lease["spec"]["holderIdentity"] == "a"
    await first.release()
    assert await second.try_acquire_or_renew()  # released: taken at once
    assert not await first.try_acquire_or_renew()
    # The holder goes silent: the standby takes it once the lease duration passed unrenewed.
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(WAIT):
        while True:
            if await first.try_acquire_or_renew():
                break
            await asyncio.sleep(0.25)
    waited = loop.time() - started
    assert 2.5 <= waited <= 6.0, waited
    lease = json.loads(
        await client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/koord-scheduler"
        )
    )
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 2
