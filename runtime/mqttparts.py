"""Retained bodies larger than one MQTT message, sent in parts.

A node with thousands of pods has a PodList larger than a broker takes in one message
(``max_packet_size``) or a bridge sends (``max_payload``). The bridge then sends such a body on
a leaf of :data:`PARTED_LEAVES` as:

* the body compressed (zlib) and cut into parts of at most ``max_payload`` bytes, each retained
  on ``{topic}/{i}`` (``i`` = 0, 1, ...);
* then, retained on ``{topic}`` itself, a manifest (:class:`Manifest`): the size of the body
  once decompressed and the SHA-256 of each part, in order;
* then empty retained bodies, clearing the parts a longer previous version left.

The receiver (:class:`Assembler`) keeps the newest body of each part topic and the newest
manifest. Once every part the manifest names is there with the digest it names, it joins
them, decompresses (never more than the manifest's ``size``, itself at most :data:`MAX_BODY`:
no zip bomb) and hands on the whole body, once. A part of another version never has the
digest the manifest names, so whatever order the broker delivers the topics in, what is handed
on is one version, whole. A body that fits in one message is sent as it is.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Annotated, Final, Literal

import msgspec

from runtime.bus import CONTROLLER_LEAVES, parse_node_topic

__all__ = [
    "MAX_BODY",
    "MAX_PARTS",
    "PARTED_LEAVES",
    "Assembler",
    "Manifest",
    "PartsError",
    "is_manifest",
    "parse_part_topic",
    "part_topic",
    "parted",
    "split",
]

#: The leaves whose bodies may go in parts: what the controller sends each node.
PARTED_LEAVES: Final = frozenset(CONTROLLER_LEAVES)
#: Largest body sent in parts, bytes once decompressed.
MAX_BODY: Final = 64 * 1024 * 1024
#: Most parts one body may take.
MAX_PARTS: Final = 256
#: How a manifest body starts (a Kubernetes object's body never does).
_PREFIX: Final = b'{"kind":"MqttParts",'

_Digest = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]


class PartsError(ValueError):
    """A manifest or a set of parts that does not make a body."""


class Manifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body on ``{topic}`` while its content is in parts on ``{topic}/{i}``."""

    kind: Literal["MqttParts"] = "MqttParts"
    encoding: Literal["zlib"] = "zlib"
    #: Bytes of the body once decompressed.
    size: Annotated[int, msgspec.Meta(ge=0, le=MAX_BODY)]
    #: SHA-256 (hex) of each part, in order.
    digests: Annotated[tuple[_Digest, ...], msgspec.Meta(min_length=1, max_length=MAX_PARTS)]


_decode_manifest = msgspec.json.Decoder(Manifest).decode
_encode = msgspec.json.Encoder().encode


def parted(topic: str) -> bool:
    """Whether a body on ``topic`` may go in parts."""
    parsed = parse_node_topic(topic)
    return parsed is not None and parsed[1] in PARTED_LEAVES


def part_topic(topic: str, index: int) -> str:
    """Where part ``index`` of ``topic``'s body goes."""
    return f"{topic}/{index}"


def parse_part_topic(topic: str) -> tuple[str, int] | None:
    """``(topic of the whole body, index)`` of a part topic, else ``None``."""
    base, _, index = topic.rpartition("/")
    if not index.isdigit() or (index != "0" and index.startswith("0")) or not parted(base):
        return None
    number = int(index)
    return (base, number) if number < MAX_PARTS else None


def is_manifest(payload: bytes) -> bool:
    """Whether ``payload`` is a manifest (rather than a whole body)."""
    return payload.startswith(_PREFIX)


def split(body: bytes, part_size: int) -> tuple[bytes, list[bytes]]:
    """``(manifest, parts)`` for ``body``: :class:`PartsError` when it is over
    :data:`MAX_BODY` or would take more than :data:`MAX_PARTS` parts of ``part_size``."""
    if len(body) > MAX_BODY:
        raise PartsError(f"{len(body)} bytes is over the {MAX_BODY} a body in parts may have")
    packed = zlib.compress(body, 1)
    parts = [packed[at : at + part_size] for at in range(0, len(packed), part_size)]
    if len(parts) > MAX_PARTS:
        raise PartsError(
            f"{len(body)} bytes ({len(packed)} compressed) would take {len(parts)} parts of"
            f" {part_size} bytes, over {MAX_PARTS}"
        )
    digests = tuple(hashlib.sha256(part).hexdigest() for part in parts)
    return _encode(Manifest(size=len(body), digests=digests)), parts


def _inflate(packed: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(packed, size + 1)  # a byte more than promised is an error
    except zlib.error as err:
        raise PartsError(f"parts do not decompress: {err}") from None
    if len(body) != size or not inflater.eof or inflater.unconsumed_tail:
        raise PartsError(f"parts do not decompress to the {size} bytes the manifest says")
    return body


class Assembler:
    """The receiving side (see the module docstring): feed it every part and manifest as they
    arrive; it returns a whole body when one is complete."""

    def __init__(self) -> None:
        #: topic -> index -> (part, its digest)
        self._parts: dict[str, dict[int, tuple[bytes, str]]] = {}
        self._manifests: dict[str, Manifest] = {}

    def part(self, topic: str, index: int, payload: bytes) -> bytes | None:
        """Part ``index`` of ``topic`` came (empty: cleared); the whole body if complete now."""
        parts = self._parts.setdefault(topic, {})
        if payload:
            parts[index] = (payload, hashlib.sha256(payload).hexdigest())
        else:
            parts.pop(index, None)
        return self._complete(topic)

    def manifest(self, topic: str, payload: bytes) -> bytes | None:
        """The manifest of ``topic`` came; the whole body if its parts are all here.
        :class:`PartsError` for a manifest that is not one."""
        try:
            manifest = _decode_manifest(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise PartsError(f"not a parts manifest: {err}") from None
        self._manifests[topic] = manifest
        return self._complete(topic)

    def whole(self, topic: str) -> None:
        """A whole body came on ``topic``: a manifest still waiting for parts is outdated."""
        self._manifests.pop(topic, None)

    def _complete(self, topic: str) -> bytes | None:
        manifest = self._manifests.get(topic)
        if manifest is None:
            return None
        parts = self._parts.get(topic, {})
        chunks: list[bytes] = []
        for index, digest in enumerate(manifest.digests):
            part = parts.get(index)
            if part is None or part[1] != digest:
                return None
            chunks.append(part[0])
        del self._manifests[topic]
        return _inflate(b"".join(chunks), manifest.size)
