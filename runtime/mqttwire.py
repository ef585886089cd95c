"""MQTT 5 packets read straight off the wire: framing, PUBLISH and PUBACK.

A fleet's controller receives thousands of QoS 1 PUBLISH packets a second; reading them through
a general client costs more than everything else it does with them. :class:`Splitter` cuts
the bytes received into packets, reads every PUBLISH it can, and leaves the other packets
(CONNACK, SUBACK, PUBACK of our own publishes, PINGRESP, DISCONNECT, AUTH), as raw bytes, to
the client that owns the connection. Packet format (MQTT 5.0, sections 1.5 and 2-3):

* fixed header: one byte (packet type in the high four bits, flags in the low four), then the
  Remaining Length, a Variable Byte Integer (seven bits a byte, least significant first, the
  high bit set on every byte but the last, at most four bytes);
* PUBLISH (type 3): flags DUP (bit 3), QoS (bits 2-1) and RETAIN (bit 0); the Topic Name
  (two-byte big-endian length, then UTF-8), the Packet Identifier (two bytes, QoS 1 and 2
  only), the Properties (their length as a Variable Byte Integer, then identifier-value
  pairs), and the payload: the rest of the packet;
* PUBACK (type 4): the Packet Identifier; a reason code and properties may follow (a broker
  reads their absence as "success").

A PUBLISH that is QoS 2, or names its topic by a Topic Alias, or breaks the format, is left to
the client as well, with every packet after it in the same bytes, so that messages still
reach the application in the order they arrived.
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = [
    "PUBACK",
    "PUBLISH",
    "PacketError",
    "Publish",
    "Splitter",
    "encode_publish",
    "encode_varint",
    "frame",
    "parse_publish",
    "puback",
]

#: Packet types (the high four bits of the first byte).
PUBLISH: Final = 3
PUBACK: Final = 4

#: The properties a PUBLISH may carry, by identifier and layout. A fixed number of bytes:
#: Payload Format Indicator (1), Message Expiry Interval (4), Topic Alias (2).
_FIXED: Final = {0x01: 1, 0x02: 4, 0x23: 2}
#: A two-byte length, then that many bytes: Content Type, Response Topic, Correlation Data.
_STRING: Final = frozenset({0x03, 0x08, 0x09})
#: Two of those: User Property.
_PAIR: Final = 0x26
#: A Variable Byte Integer: Subscription Identifier.
_SUBSCRIPTION_ID: Final = 0x0B
_TOPIC_ALIAS: Final = 0x23
_MAX_VARINT: Final = 268_435_455


class PacketError(ValueError):
    """Bytes that break the MQTT 5 packet format."""


class Publish(msgspec.Struct, frozen=True, gc=False):
    """One PUBLISH packet as read."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    #: the Packet Identifier (0 for QoS 0, which has none)
    packet_id: int = 0
    #: the Topic Alias property (0: none)
    topic_alias: int = 0


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    """The Variable Byte Integer at ``at`` and where it ends; :class:`PacketError` when it runs
    past ``end`` or over four bytes."""
    value = 0
    shift = 0
    while True:
        if at >= end:
            raise PacketError("truncated variable byte integer")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift >= 28:
            raise PacketError("variable byte integer longer than four bytes")


def encode_varint(value: int) -> bytes:
    """``value`` as a Variable Byte Integer (0 to 268,435,455)."""
    if not 0 <= value <= _MAX_VARINT:
        raise ValueError(f"{value} is out of the variable byte integer range")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def frame(data: bytes, at: int = 0) -> tuple[int, int, int] | None:
    """The packet starting at ``at``: its first byte, and where its body starts and ends;
    None when ``data`` does not hold all of it yet. :class:`PacketError` for a Remaining Length
    over four bytes."""
    size = len(data)
    if at >= size:
        return None
    first = data[at]
    length = 0
    shift = 0
    cursor = at + 1
    while True:
        if cursor >= size:
            return None
        byte = data[cursor]
        cursor += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift >= 28:
            raise PacketError("remaining length longer than four bytes")
    end = cursor + length
    return (first, cursor, end) if end <= size else None


def _skip_properties(data: bytes, at: int, end: int) -> int:
    """The Topic Alias among the PUBLISH properties in ``data[at:end]`` (0 when none)."""
    alias = 0
    while at < end:
        identifier = data[at]
        at += 1
        fixed = _FIXED.get(identifier)
        if fixed is not None:
            if at + fixed > end:
                raise PacketError(f"property 0x{identifier:02x} runs past the properties")
            if identifier == _TOPIC_ALIAS:
                alias = int.from_bytes(data[at : at + 2], "big")
            at += fixed
        elif identifier in _STRING or identifier == _PAIR:
            for _ in range(2 if identifier == _PAIR else 1):
                if at + 2 > end:
                    raise PacketError(f"property 0x{identifier:02x} runs past the properties")
                at += 2 + int.from_bytes(data[at : at + 2], "big")
            if at > end:
                raise PacketError(f"property 0x{identifier:02x} runs past the properties")
        elif identifier == _SUBSCRIPTION_ID:
            _, at = _varint(data, at, end)
        else:
            raise PacketError(f"property 0x{identifier:02x} is not one a PUBLISH carries")
    return alias


def parse_publish(first: int, data: bytes, start: int, end: int) -> Publish:
    """The PUBLISH whose first byte is ``first`` and whose body is ``data[start:end]``."""
    qos = (first >> 1) & 0x03
    if qos == 3:
        raise PacketError("PUBLISH with QoS 3")
    at = start + 2
    if at > end:
        raise PacketError("PUBLISH without a topic name")
    topic_end = at + int.from_bytes(data[start:at], "big")
    if topic_end > end:
        raise PacketError("topic name runs past the packet")
    try:
        topic = data[at:topic_end].decode()
    except UnicodeDecodeError as err:
        raise PacketError(f"topic name is not UTF-8: {err}") from None
    at = topic_end
    packet_id = 0
    if qos:
        if at + 2 > end:
            raise PacketError("PUBLISH without a packet identifier")
        packet_id = int.from_bytes(data[at : at + 2], "big")
        at += 2
        if not packet_id:
            raise PacketError("packet identifier 0")
    length, at = _varint(data, at, end)
    properties_end = at + length
    if properties_end > end:
        raise PacketError("properties run past the packet")
    alias = _skip_properties(data, at, properties_end) if length else 0
    return Publish(
        topic,
        data[properties_end:end],
        qos,
        bool(first & 0x01),
        bool(first & 0x08),
        packet_id,
        alias,
    )


def puback(packet_id: int) -> bytes:
    """PUBACK of ``packet_id``, reason "success" (left out, as MQTT 5 allows)."""
    return bytes((PUBACK << 4, 2)) + packet_id.to_bytes(2, "big")


def encode_publish(
    message: Publish, *, properties: bytes = b"", topic_bytes: bytes | None = None
) -> bytes:
    """``message`` as a PUBLISH packet; ``properties``, already encoded, go in as given, and
    ``topic_bytes`` in place of the topic's UTF-8 (both for tests of odd packets)."""
    topic = message.topic.encode() if topic_bytes is None else topic_bytes
    body = len(topic).to_bytes(2, "big") + topic
    if message.qos:
        body += message.packet_id.to_bytes(2, "big")
    body += encode_varint(len(properties)) + properties + message.payload
    first = PUBLISH << 4 | message.dup << 3 | message.qos << 1 | message.retain
    return bytes((first,)) + encode_varint(len(body)) + body


class Splitter:
    """Cuts a connection's incoming bytes into packets (see the module docstring).

    :meth:`feed` takes each chunk read from the socket; the bytes of an incomplete last packet
    wait for the next chunk. After bytes that cannot be framed (a Remaining Length over four
    bytes) everything goes to the client, which ends the connection.
    """

    __slots__ = ("_broken", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete packet waiting for the rest."""
        return len(self._tail)

    def feed(self, chunk: bytes) -> tuple[list[Publish], bytes]:
        """The PUBLISH packets read, in order, and the bytes of the packets left to the client,
        in their order (every packet after a PUBLISH that is not read here included)."""
        if self._broken:
            return [], chunk
        data = self._tail + chunk if self._tail else chunk
        read: list[Publish] = []
        others: list[bytes] = []
        at = 0
        handing_over = False
        while True:
            try:
                found = frame(data, at)
            except PacketError:
                self._broken = True
                self._tail = b""
                others.append(data[at:])
                return read, b"".join(others)
            if found is None:
                break
            first, start, end = found
            if not handing_over and first >> 4 == PUBLISH:
                try:
                    message: Publish | None = parse_publish(first, data, start, end)
                except PacketError:
                    message = None
                if message is not None and message.qos < 2 and not message.topic_alias:
                    read.append(message)
                    at = end
                    continue
                handing_over = True  # this one and every later packet: to the client
            others.append(data[at:end])
            at = end
        self._tail = data[at:]
        return read, b"".join(others) if others else b""
