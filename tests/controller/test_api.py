"""The gRPC API end to end: every RPC, error codes, auth, socket handling, watch resume."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio

from apis.codec import decode_object, encode_json
from apis.errors import UnknownKind
from apis.kinds import default_registry
from apis.meta import Object
from controller import errors
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.address import Address, AddressError, default_address, resolve
from controller.api.client import (
    Applied,
    AsyncClient,
    Client,
    Mode,
    Unauthenticated,
    Unreachable,
    WatchEvent,
)
from controller.api.server import ApiServer, ListenError
from controller.store.sqlite import Store
from tests.fakes.tls import self_signed

PODS = default_registry().resolve("pods")
NODES = default_registry().resolve("nodes")


def pod(name: str, namespace: str = "default", **extra: Any) -> Object:
    labels = extra.pop("labels", {"app": "web"})
    return decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, **extra},
            "spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}],
            },
        }
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(path=tmp_path / "state.db") as opened:
        yield opened


@pytest.fixture
async def server(store: Store, tmp_path: Path) -> AsyncIterator[ApiServer]:
    async with ApiServer(store, f"unix://{tmp_path}/run/api.sock", grace=0.1) as started:
        yield started


@pytest.fixture
async def api(server: ApiServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.address, timeout=10) as client:
        yield client


def ok(result: Applied | errors.StoreError) -> Applied:
    assert isinstance(result, Applied), result
    return result


# --- addresses -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("unix:///run/koordpy/controller.sock", Address(path=Path("/run/koordpy/controller.sock"))),
        ("unix:/tmp/a.sock", Address(path=Path("/tmp/a.sock"))),
        ("unix:rel/a.sock", Address(path=Path("rel/a.sock"))),
        ("/tmp/a.sock", Address(path=Path("/tmp/a.sock"))),
        ("127.0.0.1:7443", Address(host="127.0.0.1", port=7443)),
        ("tcp://ctl.example:7443", Address(host="ctl.example", port=7443)),
        ("[::1]:7443", Address(host="::1", port=7443)),
        (":7443", Address(host="0.0.0.0", port=7443)),
    ],
)
def test_address_forms(text: str, expected: Address) -> None:
    assert Address.parse(text) == expected


def test_address_targets_round_trip() -> None:
    for text in ("unix:///run/x.sock", "unix:rel.sock", "10.0.0.1:80", "[::1]:9"):
        assert Address.parse(Address.parse(text).target) == Address.parse(text)


@pytest.mark.parametrize("text", ["", "unix://", "localhost", "host:port", "http://h:1", "h:70000"])
def test_bad_addresses_are_refused(text: str) -> None:
    with pytest.raises(AddressError):
        Address.parse(text)


def test_default_address_root_and_user() -> None:
    assert default_address(uid=0, environ={}) == Address(path=Path("/run/koordpy/controller.sock"))
    user = default_address(uid=1000, environ={"XDG_RUNTIME_DIR": "/run/user/1000"})
    assert user == Address(path=Path("/run/user/1000/koordpy/controller.sock"))
    fallback = default_address(uid=1000, environ={})
    assert fallback.path is not None
    assert fallback.path.name == "controller.sock"
    assert "koordpy-1000" in str(fallback.path)


def test_resolve_prefers_flag_then_environment() -> None:
    env = {"KOORDPY_API": "unix:///env.sock"}
    assert resolve("127.0.0.1:1", uid=0, environ=env) == Address(host="127.0.0.1", port=1)
    assert resolve("", uid=0, environ=env) == Address(path=Path("/env.sock"))
    assert resolve(None, uid=0, environ={}) == default_address(uid=0, environ={})


# --- apply, get, list, delete ----------------------------------------------------------------


async def test_apply_reports_created_configured_unchanged(api: AsyncClient) -> None:
    first = ok((await api.apply([pod("a"), pod("b")]))[0])
    assert first.outcome == "created"
    assert first.object is not None
    assert first.object.metadata.uid
    assert first.object.metadata.resource_version
    again = await api.apply([pod("a"), pod("b")])
    assert [ok(r).outcome for r in again] == ["unchanged", "unchanged"]
    changed = ok((await api.apply([pod("a", labels={"app": "api"})]))[0])
    assert changed.outcome == "configured"
    assert changed.object is not None
    assert changed.object.metadata.labels == {"app": "api"}


async def test_apply_can_omit_objects(api: AsyncClient) -> None:
    (result,) = await api.apply([pod("a")], omit_objects=True)
    assert ok(result).outcome == "created"
    assert ok(result).object is None


async def test_one_bad_object_does_not_hide_the_others(api: AsyncClient) -> None:
    bad_name = pod("Not_A_Name")
    results = await api.apply([pod("good-1"), bad_name, pod("good-2")])
    assert ok(results[0]).outcome == "created"
    assert ok(results[2]).outcome == "created"
    error = results[1]
    assert isinstance(error, errors.Invalid)
    assert error.field == "metadata.name"
    assert "Not_A_Name" in error.value
    items, _ = await api.list(PODS)
    assert [o.metadata.name for o in items] == ["good-1", "good-2"]


async def test_undecodable_bodies_are_refused_per_object(server: ApiServer) -> None:
    bodies = [
        b"{not json",
        b'{"apiVersion": "v1", "kind": "Pud", "metadata": {"name": "x"}}',
        b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},'
        b' "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "12x"}}}]}}',
        encode_json(pod("fine")),
    ]
    async with aio.insecure_channel(server.address.target) as channel:
        stub = pb_grpc.ObjectsStub(channel)
        response = await stub.Apply(pb.ApplyRequest(objects=bodies))
    codes = [r.error.code for r in response.results[:3]]
    assert codes == [pb.ERROR_CODE_INVALID] * 3
    assert response.results[1].error.field == "kind"
    assert response.results[2].error.field == "spec.containers[0].resources.requests.cpu"
    assert "12x" in response.results[2].error.value
    assert response.results[3].outcome == pb.OUTCOME_CREATED
    assert response.resource_version >= 1


async def test_create_and_update_modes(api: AsyncClient) -> None:
    created = await api.create(pod("a"))
    with pytest.raises(errors.AlreadyExists, match='pods "a" already exists'):
        await api.create(pod("a"))
    updated = await api.update(
        decode_object(
            {
                **_wire(created),
                "metadata": {**_wire(created)["metadata"], "labels": {"app": "v2"}},
            }
        )
    )
    assert updated.metadata.labels == {"app": "v2"}
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    # ``created`` still carries the old resourceVersion: a stale write.
    with pytest.raises(errors.Conflict, match="has been modified"):
        await api.update(created)
    with pytest.raises(errors.NotFound):
        await api.update(pod("missing"))
    results = await api.apply([pod("a"), pod("b")], mode=Mode.CREATE)
    assert isinstance(results[0], errors.AlreadyExists)
    assert ok(results[1]).outcome == "created"


def _wire(obj: Object) -> dict[str, Any]:
    from apis.codec import to_builtins

    wire: dict[str, Any] = to_builtins(obj)
    return wire


async def test_get_and_not_found(api: AsyncClient) -> None:
    await api.apply([pod("a", namespace="team")])
    got = await api.get(PODS, "a", "team")
    assert got.metadata.namespace == "team"
    with pytest.raises(errors.NotFound, match='pods "a" not found'):
        await api.get(PODS, "a")  # namespace default


async def test_list_by_namespace_and_selector(api: AsyncClient) -> None:
    await api.apply(
        [
            pod("a", labels={"app": "web", "tier": "front"}),
            pod("b", labels={"app": "db"}),
            pod("c", namespace="other", labels={"app": "web"}),
        ]
    )
    everything, version = await api.list(PODS)
    assert [(o.metadata.namespace, o.metadata.name) for o in everything] == [
        ("default", "a"),
        ("default", "b"),
        ("other", "c"),
    ]
    assert version >= 1
    web, _ = await api.list(PODS, selector="app=web")
    assert [o.metadata.name for o in web] == ["a", "c"]
    scoped, _ = await api.list(PODS, namespace="default", selector="app in (web,db),!tier")
    assert [o.metadata.name for o in scoped] == ["b"]
    with pytest.raises(errors.Invalid):
        await api.list(PODS, selector="app in (")


async def test_delete_and_finalizers(api: AsyncClient) -> None:
    await api.apply([pod("a"), pod("held", finalizers=["example.com/keep"])])
    deleted, outcome = await api.delete(PODS, "a")
    assert outcome == "deleted"
    assert deleted.metadata.name == "a"
    with pytest.raises(errors.NotFound, match='pods "a" not found'):
        await api.delete(PODS, "a")
    marked, outcome = await api.delete(PODS, "held")
    assert outcome == "configured"
    assert marked.metadata.deletion_timestamp is not None
    assert (await api.get(PODS, "held")).metadata.deletion_timestamp is not None


async def test_delete_with_stale_resource_version_conflicts(api: AsyncClient) -> None:
    created = ok((await api.apply([pod("a")]))[0]).object
    assert created is not None
    await api.apply([pod("a", labels={"app": "changed"})])
    with pytest.raises(errors.Conflict):
        await api.delete(PODS, "a", resource_version=int(created.metadata.resource_version))


async def test_unknown_kind_key(api: AsyncClient) -> None:
    async with aio.insecure_channel(api.address.target) as channel:
        stub = pb_grpc.ObjectsStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            await stub.Get(pb.GetRequest(kind="example.com/Ghost", name="x"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_client_maps_unknown_kind(server: ApiServer) -> None:
    fake = _FakeKind()
    async with AsyncClient(server.address) as client:
        with pytest.raises(UnknownKind):
            await client.get(fake, "x")  # type: ignore[arg-type]


class _FakeKind:
    key = "example.com/Ghost"


# --- watch -----------------------------------------------------------------------------------


async def _take(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    taken = []
    async with asyncio.timeout(10):
        async for event in events:
            taken.append(event)
            if len(taken) == count:
                break
    return taken


async def test_watch_streams_ordered_events(api: AsyncClient) -> None:
    _, version = await api.list(PODS)
    events = api.watch(PODS, resource_version=version)
    consumer = asyncio.ensure_future(_take(events, 3))
    await api.apply([pod("a")])
    await api.apply([pod("a", labels={"app": "v2"})])
    await api.delete(PODS, "a")
    got = await consumer
    await events.aclose()  # type: ignore[attr-defined]
    assert [(e.type, e.object.metadata.name) for e in got] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    versions = [e.resource_version for e in got]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


async def test_watch_without_version_lists_first(api: AsyncClient) -> None:
    await api.apply([pod("a"), pod("b")])
    events = api.watch(PODS)
    got = await _take(events, 2)
    await events.aclose()  # type: ignore[attr-defined]
    assert sorted((e.type, e.object.metadata.name) for e in got) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


async def test_watch_resumes_after_a_version(api: AsyncClient) -> None:
    (first,) = await api.apply([pod("a")])
    await api.apply([pod("b")])
    await api.apply([pod("c")])
    assert ok(first).object is not None
    after = int(ok(first).object.metadata.resource_version)  # type: ignore[union-attr]
    events = api.watch(PODS, resource_version=after)
    got = await _take(events, 2)
    await events.aclose()  # type: ignore[attr-defined]
    assert [(e.type, e.object.metadata.name) for e in got] == [("ADDED", "b"), ("ADDED", "c")]


async def test_watch_filters_by_kind_namespace_and_selector(api: AsyncClient) -> None:
    _, version = await api.list(PODS)
    events = api.watch(PODS, namespace="team", selector="app=web", resource_version=version)
    consumer = asyncio.ensure_future(_take(events, 1))
    node = decode_object({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    await api.apply([node, pod("x"), pod("y", namespace="team", labels={"app": "db"})])
    await api.apply([pod("z", namespace="team")])
    (event,) = await consumer
    await events.aclose()  # type: ignore[attr-defined]
    assert (event.type, event.object.metadata.namespace, event.object.metadata.name) == (
        "ADDED",
        "team",
        "z",
    )


async def test_watch_from_a_version_older_than_history_is_expired(tmp_path: Path) -> None:
    async with (
        Store(history_size=2) as small,
        ApiServer(small, f"unix://{tmp_path}/h.sock", grace=0.1) as srv,
        AsyncClient(srv.address) as client,
    ):
        await client.apply([pod(f"p{i}") for i in range(5)])
        await client.apply([pod("late")])
        await client.apply([pod("later")])
        with pytest.raises(errors.Expired):
            await _take(client.watch(PODS, resource_version=1), 1)


async def test_sync_client_watch_and_calls(server: ApiServer) -> None:
    def work() -> list[str]:
        with Client(server.address, timeout=10) as client:
            client.apply([pod("a")])
            _, version = client.list(PODS)
            client.apply([pod("b")])
            events = client.watch(PODS, resource_version=version)
            first = next(events)
            events.close()
            return [first.type, first.object.metadata.name, client.get(PODS, "a").metadata.name]

    assert await asyncio.to_thread(work) == ["ADDED", "b", "a"]


# --- transport -------------------------------------------------------------------------------


async def test_socket_is_private_and_removed_on_stop(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "dir" / "api.sock"
    srv = ApiServer(store, f"unix://{path}", grace=0.1)
    await srv.start()
    try:
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        await srv.stop()
    assert not path.exists()


async def test_stale_socket_is_replaced(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    assert path.exists()
    async with (
        ApiServer(store, f"unix://{path}", grace=0.1) as srv,
        AsyncClient(srv.address) as client,
    ):
        assert (await client.list(PODS))[0] == []


async def test_socket_in_use_is_refused(server: ApiServer, store: Store) -> None:
    with pytest.raises(ListenError, match="another server"):
        await ApiServer(store, server.address).start()


async def test_regular_file_is_not_replaced(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "api.sock"
    path.write_text("precious")
    with pytest.raises(ListenError, match="not a socket"):
        await ApiServer(store, f"unix://{path}").start()
    assert path.read_text() == "precious"


async def test_tcp_requires_a_token(store: Store) -> None:
    with pytest.raises(ListenError, match="token"):
        await ApiServer(store, "127.0.0.1:0").start()


async def test_tcp_bearer_token(store: Store) -> None:
    async with ApiServer(store, "127.0.0.1:0", token="s3cret", grace=0.1) as srv:
        assert srv.address.port != 0
        async with AsyncClient(srv.address, token="s3cret") as good:
            await good.apply([pod("a")])
            assert (await good.get(PODS, "a")).metadata.name == "a"
        for token in ("", "wrong", "s3cret-but-longer"):
            async with AsyncClient(srv.address, token=token) as bad:
                with pytest.raises(Unauthenticated, match="bearer token"):
                    await bad.get(PODS, "a")
                with pytest.raises(Unauthenticated):
                    await _take(bad.watch(PODS), 1)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


async def test_tcp_with_tls(store: Store, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    async with ApiServer(
        store, "127.0.0.1:0", token="t", tls_cert=cert, tls_key=key, grace=0.1
    ) as srv:
        async with AsyncClient(srv.address, token="t", tls_ca=cert) as client:
            await client.apply([pod("a")])
            assert (await client.get(PODS, "a")).metadata.name == "a"
        async with AsyncClient(srv.address, token="t", timeout=5) as plaintext:
            with pytest.raises(Unreachable):
                await plaintext.get(PODS, "a")


async def test_nothing_listening_is_a_clear_error(tmp_path: Path) -> None:
    address = f"unix://{tmp_path}/nobody.sock"
    async with AsyncClient(address, timeout=5) as client:
        with pytest.raises(
            Unreachable, match=r"cannot reach the koordpy API at unix://.*koordpy up"
        ):
            await client.list(PODS)


async def test_store_writes_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    async with (
        Store(path=path) as first,
        ApiServer(first, f"unix://{tmp_path}/r.sock", grace=0.1) as srv,
        AsyncClient(srv.address) as client,
    ):
        results = await client.apply([pod(f"p{i}") for i in range(20)])
    versions = {ok(r).object.metadata.name: ok(r).object.metadata.resource_version for r in results}  # type: ignore[union-attr]
    async with Store(path=path) as second:
        items, _ = second.list(PODS)
        assert {o.metadata.name: o.metadata.resource_version for o in items} == versions


def test_stop_before_start_is_harmless(tmp_path: Path) -> None:
    srv = ApiServer(Store(), f"unix://{tmp_path}/x.sock")
    asyncio.run(srv.stop())
    assert not os.path.exists(tmp_path / "x.sock")
