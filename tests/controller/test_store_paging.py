"""Issue 18: lists served in pages (``limit``/``continue``) as Kubernetes serves them.

The store's side (:meth:`MemoryStore.list_page`): pages in key order, later pages at the first
page's resourceVersion whatever changed in between, malformed tokens refused naming ``continue``,
tokens older than the history expired (410 Gone); then the API's and the CLI's: a namespace
whose objects together exceed the gRPC message limit is listed by ``koordpy get -A`` in pages.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from apis.codec import decode_object
from apis.kinds import default_registry
from apis.labels import Selector, parse_selector
from apis.meta import Object
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.client import Client
from controller.api.server import MAX_MESSAGE_BYTES, PAGE_BYTES
from controller.errors import Expired, Invalid
from controller.store.encoding import encode
from controller.store.memory import MemoryStore, Page
from koordpy.cli import main
from tests.controller.backends import STORE_BACKENDS, open_backend
from tests.controller.storekinds import GADGETS, REGISTRY, WIDGETS, as_widgets, gadget, widget
from tests.controller.test_cli import ServerThread

CONFIGMAPS = default_registry().resolve("configmaps")


def names(objects: list[Object]) -> list[str]:
    return [f"{o.metadata.namespace}/{o.metadata.name}" for o in objects]


def every_page(
    store: MemoryStore, limit: int, namespace: str | None = None, selector: Selector | None = None
) -> tuple[list[Page], list[Object]]:
    """Every page of the widgets, following the continue tokens."""
    pages: list[Page] = []
    while not pages or pages[-1].continue_:
        token = pages[-1].continue_ if pages else ""
        pages.append(
            store.list_page(
                WIDGETS, namespace=namespace, selector=selector, limit=limit, continue_=token
            )
        )
    return pages, [obj for page in pages for obj in page.items]


@pytest.fixture(params=STORE_BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore]:
    """Every test runs over each backend."""
    with open_backend(request.param, tmp_path, registry=REGISTRY) as opened:
        for ns in ("a", "b", "c"):
            for i in range(7):
                opened.create(widget(f"w{i}", ns, size=i, labels={"even": str(i % 2 == 0)}))
        yield opened


def test_pages_together_are_the_list_in_order_each_object_once(store: MemoryStore) -> None:
    everything, version = store.list(WIDGETS)
    pages, paged = every_page(store, 4)
    assert names(paged) == names(everything)
    assert [len(p.items) for p in pages] == [4, 4, 4, 4, 4, 1]
    assert {p.resource_version for p in pages} == {version}
    assert pages[-1].continue_ == ""
    assert store.list_page(WIDGETS, limit=21).continue_ == "", "no token when nothing is left"
    assert store.list_page(WIDGETS).items == everything, "limit 0: everything"


def test_namespace_and_selector_are_kept_across_pages(store: MemoryStore) -> None:
    even = parse_selector("even=True")
    _, paged = every_page(store, 2, namespace="b", selector=even)
    assert names(paged) == ["b/w0", "b/w2", "b/w4", "b/w6"]


def test_cluster_scoped_kinds_page_too() -> None:
    with MemoryStore(registry=REGISTRY) as store:
        for i in range(5):
            store.create(gadget(f"g{i}"))
        first = store.list_page(GADGETS, limit=3)
        rest = store.list_page(GADGETS, limit=3, continue_=first.continue_)
        assert names(first.items + rest.items) == [f"/g{i}" for i in range(5)]
        assert rest.continue_ == ""


def test_later_pages_are_the_list_at_the_first_pages_version(store: MemoryStore) -> None:
    """Kubernetes serves every page at the first one's resourceVersion: what is created,
    changed or deleted meanwhile does not show, and nothing is skipped or repeated."""
    at_first, version = store.list(WIDGETS)
    first = store.list_page(WIDGETS, limit=8)
    assert names(first.items)[-1] == "b/w0"
    store.delete(WIDGETS, "w3", "b")  # not served yet: still listed
    store.create(widget("w0a", "b"))  # created after the first page: not listed
    store.delete(WIDGETS, "w1", "a")  # served already: not listed twice, not missing
    store.create(widget("w1", "a"))  # recreated, already served: not again
    changed = store.get(WIDGETS, "w5", "c")
    store.update(widget("w5", "c", size=500, resource_version=changed.metadata.resource_version))
    store.create(widget("w9", "c"))
    pages = [first]
    while pages[-1].continue_:
        pages.append(store.list_page(WIDGETS, limit=8, continue_=pages[-1].continue_))
    paged = [obj for page in pages for obj in page.items]
    assert names(paged) == names(at_first)
    assert paged == at_first, "each object as it was at the first page's version"
    assert {p.resource_version for p in pages} == {version}
    sizes = {o.metadata.name: o.spec.size for o in as_widgets(paged) if o.metadata.namespace == "c"}
    assert sizes["w5"] == 5
    # A new list sees the changes.
    assert "c/w9" in names(store.list(WIDGETS)[0])


def token(**fields: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "value",
    [
        "not a token!",
        base64.urlsafe_b64encode(b"{not json").decode(),
        token(v=1, rv=1),  # no key
        token(v=2, rv=1, namespace="a", name="w1"),
        token(v=1, rv=10_000, namespace="a", name="w1"),  # a version this store never had
        token(v=1, rv=-1, namespace="a", name="w1"),
        "\u00e9t\u00e9",
    ],
    ids=["garbage", "not-json", "no-key", "version", "future", "negative", "not-ascii"],
)
def test_malformed_continue_is_refused_naming_continue(store: MemoryStore, value: str) -> None:
    with pytest.raises(Invalid, match="continue: Invalid value") as raised:
        store.list_page(WIDGETS, limit=2, continue_=value)
    assert raised.value.field == "continue"


def test_negative_limit_is_refused_naming_limit(store: MemoryStore) -> None:
    with pytest.raises(Invalid, match="limit: Invalid value: -1") as raised:
        store.list_page(WIDGETS, limit=-1)
    assert raised.value.field == "limit"


def test_a_token_older_than_the_history_is_expired_as_410_gone() -> None:
    with MemoryStore(registry=REGISTRY, history_size=4) as store:
        for i in range(6):
            store.create(widget(f"w{i}"))
        first = store.list_page(WIDGETS, limit=2)
        for i in range(4):  # the history (4 changes) still holds every change since
            store.create(widget(f"x{i}"))
        assert len(store.list_page(WIDGETS, limit=2, continue_=first.continue_).items) == 2
        store.create(widget("x4"))  # now it no longer reaches back to the first page
        with pytest.raises(Expired, match="continue token expired"):
            store.list_page(WIDGETS, limit=2, continue_=first.continue_)
        restarted = store.list_page(WIDGETS, limit=2)
        assert restarted.resource_version == store.resource_version


def test_a_page_stops_at_its_byte_budget_with_a_token(store: MemoryStore) -> None:
    one = len(encode(store.list(WIDGETS)[0][0]))
    page = store.list_page(WIDGETS, limit=100, max_bytes=3 * one + one // 2)
    assert len(page.items) == 3
    assert page.continue_
    tiny = store.list_page(WIDGETS, limit=100, max_bytes=1)
    assert len(tiny.items) == 1, "a page always holds one object"


# --- the API and the CLI ---------------------------------------------------------------------


def configmap(name: str, payload: str, namespace: str = "big") -> Object:
    return decode_object(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"blob": payload},
        }
    )


@pytest.fixture(scope="module")
def big_namespace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A real API server whose namespace ``big`` holds more bytes than one gRPC message,
    written through the API in batches as clients would, plus one small namespace."""
    socket = tmp_path_factory.mktemp("api") / "api.sock"
    with ServerThread(socket) as server, server.client() as api:
        payload = "x" * (1024 * 1024)
        count = MAX_MESSAGE_BYTES // len(payload) + 6
        for start in range(0, count, 8):
            batch = range(start, min(start + 8, count))
            api.apply([configmap(f"cm-{i:03d}", payload) for i in batch])
        api.apply([configmap("small", "y", "default")])
        yield server


def test_an_unpaged_list_too_large_for_a_message_asks_for_pages(
    big_namespace: ServerThread,
) -> None:
    with grpc.insecure_channel(
        big_namespace.address,
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
    ) as channel:
        stub = pb_grpc.ObjectsStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.List(pb.ListRequest(kind="ConfigMap"), timeout=60)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "ask for it in pages (limit and continue)" in (raised.value.details() or "")
        page = stub.List(pb.ListRequest(kind="ConfigMap", limit=500), timeout=60)
        assert 0 < len(page.items) < 500
        assert sum(len(item) for item in page.items) <= PAGE_BYTES
        assert getattr(page, "continue")


def test_malformed_and_expired_continue_over_grpc(big_namespace: ServerThread) -> None:
    with grpc.insecure_channel(big_namespace.address) as channel:
        stub = pb_grpc.ObjectsStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.List(pb.ListRequest(kind="ConfigMap", limit=1, **{"continue": "junk"}))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (raised.value.details() or "").startswith("continue: Invalid value: 'junk'")


def test_get_all_namespaces_lists_a_namespace_larger_than_a_message(
    big_namespace: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """The attack: one namespace over the message size made ``get -A`` fail for everyone."""
    capsys.readouterr()
    code = main(["--api", big_namespace.address, "get", "configmaps", "-A"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "DATA", "AGE"]
    rows = [line.split()[:2] for line in lines[1:]]
    count = MAX_MESSAGE_BYTES // (1024 * 1024) + 6
    assert rows == [["big", f"cm-{i:03d}"] for i in range(count)] + [["default", "small"]]
    code = main(["--api", big_namespace.address, "get", "configmaps", "-n", "big", "-o", "name"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert len(out.splitlines()) == count
    with Client(big_namespace.address, timeout=60) as api:
        items, version = api.list(CONFIGMAPS, chunk_size=7)
        assert len(items) == count + 1
        assert version == api.list_page(CONFIGMAPS, limit=1).resource_version


def test_pages_over_the_api_while_another_client_writes(tmp_path: Path) -> None:
    """Pages fetched while another client creates, changes and deletes objects are still
    the list at the first page's version."""
    with ServerThread(tmp_path / "api.sock") as server, server.client() as api:
        api.apply([configmap(f"c{i:02d}", "v") for i in range(30)])
        before, version = api.list(CONFIGMAPS, chunk_size=0)
        pages = [api.list_page(CONFIGMAPS, limit=10)]
        with server.client() as other:
            while pages[-1].continue_:
                i = len(pages)  # change the pages still to come, and one already served
                for n in (i * 10 + 5, i * 10 - 5):
                    other.apply([configmap(f"c{n:02d}", f"changed {i}")])
                other.delete(CONFIGMAPS, f"c{i * 10 + 9:02d}", "big")
                other.apply([configmap(f"c{i * 10 + 9}x", "new")])
                pages.append(api.list_page(CONFIGMAPS, limit=10, continue_=pages[-1].continue_))
        assert len(pages) == 3
        assert [o for p in pages for o in p.items] == before
        assert {p.resource_version for p in pages} == {version}
        after, _ = api.list(CONFIGMAPS)
        assert after != before, "a new list sees the changes"
