"""Bodies in parts (runtime.mqttparts): whole, one version, bounded; no broker needed."""

from __future__ import annotations

import hashlib
import random
import secrets
import zlib

import pytest

from runtime import mqttparts
from runtime.bus import node_topic
from runtime.mqttparts import Assembler, PartsError, parse_part_topic, part_topic, split

PODS = node_topic("node-a", "pods")


def test_parts_in_any_order_make_the_body_once() -> None:
    body = secrets.token_bytes(50_000)
    manifest, parts = split(body, 4096)
    assert len(parts) > 10
    order = [(i, part) for i, part in enumerate(parts)]
    random.Random(7).shuffle(order)
    assembler = Assembler()
    assert assembler.manifest(PODS, manifest) is None
    results = [assembler.part(PODS, i, part) for i, part in order]
    assert results[:-1] == [None] * (len(parts) - 1)
    assert results[-1] == body
    # Parts arriving again (a reconnect's replay) without a new manifest hand on nothing.
    assert assembler.part(PODS, 0, parts[0]) is None


def test_parts_of_two_versions_never_make_a_body() -> None:
    old, new = secrets.token_bytes(20_000), secrets.token_bytes(20_000)
    old_manifest, old_parts = split(old, 8192)
    new_manifest, new_parts = split(new, 8192)
    assembler = Assembler()
    for i, part in enumerate(old_parts):
        assembler.part(PODS, i, part)
    # The new manifest first, then its parts one by one: nothing until the last is in.
    assert assembler.manifest(PODS, new_manifest) is None
    for i, part in enumerate(new_parts[:-1]):
        assert assembler.part(PODS, i, part) is None
    assert assembler.part(PODS, len(new_parts) - 1, new_parts[-1]) == new
    # The old manifest again, over the new parts: not a body either.
    assert assembler.manifest(PODS, old_manifest) is None


def test_a_whole_body_outdates_a_manifest_still_waiting() -> None:
    body = secrets.token_bytes(10_000)
    manifest, parts = split(body, 4096)
    assembler = Assembler()
    assembler.manifest(PODS, manifest)
    assembler.whole(PODS)
    assert [assembler.part(PODS, i, part) for i, part in enumerate(parts)] == [None] * len(parts)


def test_a_zip_bomb_is_refused_without_inflating_it() -> None:
    bomb = zlib.compress(b"\0" * (32 * 1024 * 1024))  # 32 MiB in about 32 KiB
    digest = hashlib.sha256(bomb).hexdigest()
    assembler = Assembler()
    assembler.part(PODS, 0, bomb)
    lying = b'{"kind":"MqttParts","encoding":"zlib","size":1024,"digests":["%s"]}' % digest.encode()
    with pytest.raises(PartsError, match="do not decompress to the 1024 bytes"):
        assembler.manifest(PODS, lying)
    too_big = lying.replace(b'"size":1024', b'"size":%d' % (mqttparts.MAX_BODY + 1))
    with pytest.raises(PartsError, match="not a parts manifest"):
        assembler.manifest(PODS, too_big)


def test_a_garbled_manifest_or_garbage_parts_are_refused() -> None:
    assembler = Assembler()
    with pytest.raises(PartsError, match="not a parts manifest"):
        assembler.manifest(PODS, b'{"kind":"MqttParts","digests":["nothex"]}')
    garbage = b"not zlib at all"
    assembler.part(PODS, 0, garbage)
    digest = hashlib.sha256(garbage).hexdigest().encode()
    with pytest.raises(PartsError, match="do not decompress"):
        assembler.manifest(PODS, b'{"kind":"MqttParts","size":3,"digests":["%s"]}' % digest)


def test_a_body_needing_too_many_parts_is_refused() -> None:
    with pytest.raises(PartsError, match="parts of 16 bytes, over 256"):
        split(secrets.token_bytes(10_000), 16)


def test_part_topics() -> None:
    assert parse_part_topic(part_topic(PODS, 3)) == (PODS, 3)
    assert parse_part_topic(f"{PODS}/0") == (PODS, 0)
    for topic in (
        f"{PODS}/03",  # one spelling per index
        f"{PODS}/{mqttparts.MAX_PARTS}",
        f"{PODS}/-1",
        f"{PODS}/x",
        f"{node_topic('node-a', 'nodemetric')}/0",  # only the controller's leaves go in parts
        PODS,
    ):
        assert parse_part_topic(topic) is None, topic
    assert mqttparts.is_manifest(split(b"{}", 1024)[0])
    assert not mqttparts.is_manifest(b'{"apiVersion":"v1","kind":"PodList"}')
