"""Ingest of ``evictions``: an agent's eviction request deletes the pod and records an Event."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from apis.codec import encode_json
from apis.core import Container, Event, Pod, PodSpec
from apis.eviction import EvictionRequest
from apis.meta import ObjectMeta
from controller.errors import NotFound
from controller.fleet.ingest import Ingest, Result
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store(clock=lambda: T0) as opened:
        yield opened


def make_pod(store: Store, name: str, *, node: str = "n1", finalizers: tuple[str, ...] = ()) -> Pod:
    return store.create(
        Pod(
            metadata=ObjectMeta(name=name, namespace="jobs", finalizers=finalizers),
            spec=PodSpec(node_name=node, containers=(Container(name="main", image="busybox"),)),
        )
    )


def request(pod: Pod, *, uid: str | None = None, feature: str = "BEMemoryEvict") -> Message:
    body = EvictionRequest(
        metadata=ObjectMeta(
            name=pod.metadata.name,
            namespace=pod.metadata.namespace,
            uid=pod.metadata.uid if uid is None else uid,
        ),
        message="node memory usage 85% >= threshold 70%",
        feature=feature,
    )
    return Message(node_topic("n1", "evictions"), encode_json(body))


def events(store: Store) -> list[Event]:
    items, _ = store.list(store.registry.for_type(Event))
    return [e for e in items if isinstance(e, Event)]


def get_pod(store: Store, name: str) -> Pod | None:
    try:
        found = store.get(store.registry.for_type(Pod), name, "jobs")
    except NotFound:
        return None
    assert isinstance(found, Pod)
    return found


async def test_eviction_deletes_the_pod_and_records_an_event(store: Store) -> None:
    pod = make_pod(store, "web")
    ingest = Ingest(Bus(), store, clock=lambda: T0)
    assert await ingest.handle(request(pod)) == Result.APPLIED
    assert get_pod(store, "web") is None
    (event,) = events(store)
    assert event.reason == "Evicted"
    assert event.type == "Warning"
    assert event.involved_object.kind == "Pod"
    assert event.involved_object.uid == pod.metadata.uid
    assert event.metadata.namespace == "jobs"
    assert "BEMemoryEvict" in event.message
    assert "n1" in event.message
    assert event.source.host == "n1"


async def test_a_pod_with_finalizers_is_only_marked_deleted(store: Store) -> None:
    make_pod(store, "web", finalizers=("example.com/keep",))
    pod = get_pod(store, "web")
    assert pod is not None
    ingest = Ingest(Bus(), store, clock=lambda: T0)
    assert await ingest.handle(request(pod)) == Result.APPLIED
    kept = get_pod(store, "web")
    assert kept is not None
    assert kept.metadata.deletion_timestamp is not None
    assert len(events(store)) == 1
    # A repeated request for a pod already being deleted changes nothing.
    assert await ingest.handle(request(pod)) == Result.UNCHANGED
    assert len(events(store)) == 1


@pytest.mark.parametrize(
    ("node", "uid", "why"),
    [
        pytest.param("n2", None, "runs on node 'n2'", id="other-node"),
        pytest.param("n1", "00000000-0000-4000-8000-000000000000", "now has uid", id="other-uid"),
    ],
)
async def test_requests_for_other_pods_are_dropped(
    store: Store, caplog: pytest.LogCaptureFixture, node: str, uid: str | None, why: str
) -> None:
    pod = make_pod(store, "web", node=node)
    ingest = Ingest(Bus(), store, clock=lambda: T0)
    with caplog.at_level(logging.INFO, logger="controller.fleet.ingest"):
        assert await ingest.handle(request(pod, uid=uid)) == Result.IGNORED
    assert get_pod(store, "web") is not None
    assert events(store) == []
    assert why in caplog.text


async def test_a_request_for_a_gone_pod_is_dropped(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    pod = make_pod(store, "web")
    ingest = Ingest(Bus(), store, clock=lambda: T0)
    assert await ingest.handle(request(pod)) == Result.APPLIED
    with caplog.at_level(logging.INFO, logger="controller.fleet.ingest"):
        assert await ingest.handle(request(pod)) == Result.IGNORED
    assert "gone" in caplog.text
    assert len(events(store)) == 1


async def test_a_malformed_request_is_invalid(store: Store) -> None:
    ingest = Ingest(Bus(), store, clock=lambda: T0)
    topic = node_topic("n1", "evictions")
    assert await ingest.handle(Message(topic, b'{"kind": "Eviction", "bogus": 1}')) == (
        Result.INVALID
    )
    no_name = encode_json(EvictionRequest(metadata=ObjectMeta(namespace="jobs")))
    assert await ingest.handle(Message(topic, no_name)) == Result.INVALID
