"""The hostile inputs of issue 18 point 1 at each entry point: the gRPC API, ingest from the
bus and the CLI get the same refusals as the store's admission and the decoders give, never
a RecursionError or an internal error, and the rest of a batch is unaffected."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from grpc import aio

from apis.codec import MAX_DEPTH, encode_json
from apis.core import ConfigMap, Node, Pod
from apis.meta import ObjectMeta
from controller.api import objects_pb2 as pb
from controller.api import objects_pb2_grpc as pb_grpc
from controller.api.server import ApiServer
from controller.fleet.ingest import Ingest, Result
from controller.store.memory import MAX_OBJECT_BYTES
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic
from tests.controller.test_cli import Koordpy, ServerThread

DEEP = 100_000
TOO_DEEP = f"maps and lists nested more than {MAX_DEPTH} levels deep"
NEGATIVE_POD = (
    b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"negative"},"spec":{"containers":'
    b'[{"name":"c","resources":{"requests":{"cpu":"-100"}}}]}}'
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with Store(path=tmp_path / "state.db") as opened:
        yield opened


async def test_the_api_refuses_each_hostile_body_and_stores_the_rest(
    store: Store, tmp_path: Path
) -> None:
    deep = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":' + (
        b"[" * DEEP + b"]" * DEEP + b"}"
    )
    big = encode_json(
        ConfigMap(
            metadata=ObjectMeta(name="big", namespace="default"),
            data={"blob": "x" * MAX_OBJECT_BYTES},
        )
    )
    fine = encode_json(ConfigMap(metadata=ObjectMeta(name="fine", namespace="default")))
    bodies = [deep, b"[" * DEEP, NEGATIVE_POD, big, fine]
    async with (
        ApiServer(store, f"unix://{tmp_path}/api.sock", grace=0.1) as server,
        aio.insecure_channel(server.address.target) as channel,
    ):
        response = await pb_grpc.ObjectsStub(channel).Apply(pb.ApplyRequest(objects=bodies))
    errors = [r.error for r in response.results[:4]]
    assert [e.code for e in errors] == [pb.ERROR_CODE_INVALID] * 4
    assert TOO_DEEP in errors[0].message
    assert TOO_DEEP in errors[1].message
    assert errors[2].field == "spec.containers[0].resources.requests[cpu]"
    assert errors[2].value == "-100"
    assert "must be greater than or equal to 0" in errors[2].message
    assert "request is too large" in errors[3].message
    assert response.results[4].outcome == pb.OUTCOME_CREATED
    stored = store.list(store.registry.for_type(ConfigMap))[0]
    assert [o.metadata.name for o in stored] == ["fine"]
    assert store.list(store.registry.for_type(Pod))[0] == []


def message(leaf: str, body: bytes) -> Message:
    return Message(node_topic("n1", leaf), body, retain=True)


@pytest.mark.parametrize(
    ("leaf", "body"),
    [
        ("node", b'{"apiVersion":"v1","kind":"Node","metadata":' + b"[" * DEEP + b"]" * DEEP),
        (
            "node",
            b'{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"},'
            b'"status":{"allocatable":{"cpu":"-64"}}}',
        ),
    ],
    ids=["deep-node", "negative-allocatable"],
)
async def test_a_hostile_report_from_a_node_is_dropped(
    store: Store, leaf: str, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    ingest = Ingest(Bus(), store)
    result = await ingest.handle(message(leaf, body))
    assert result == Result.INVALID
    assert store.list(store.registry.for_type(Node))[0] == []
    assert "RecursionError" not in caplog.text


@pytest.fixture
def koordpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Koordpy]:
    with ServerThread(tmp_path / "api.sock") as running:
        yield Koordpy(running, capsys)


def test_kubectl_style_apply_refuses_duplicate_keys_and_deep_files(
    koordpy: Koordpy, tmp_path: Path
) -> None:
    dup = tmp_path / "dup.yaml"
    dup.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: '1'\n  k: '2'\n"
    )
    code, out, err = koordpy("apply", "-f", str(dup))
    assert code != 0
    assert out == ""
    assert (
        f"{dup}: error converting YAML to JSON: yaml: unmarshal errors:\n"
        '  line 7: key "k" already set in map'
    ) in err
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * DEEP + "]" * DEEP)
    code, out, err = koordpy("apply", "-f", str(deep))
    assert code != 0
    assert TOO_DEEP in err
    assert "Traceback" not in err
