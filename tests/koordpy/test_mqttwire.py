"""MQTT 5 packets read off the wire: packets a broker (mosquitto 2) sent, and round trips."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.mqttwire import (
    PacketError,
    Publish,
    Splitter,
    encode_publish,
    encode_varint,
    frame,
    parse_publish,
    puback,
)

# Bytes mosquitto sent to a subscriber of koordpy/v1/nodes/+/+ (QoS 1), as captured.
CONNACK = bytes.fromhex("200900000622000a210014")
SUBACK = bytes.fromhex("9004000700" + "01")
RETAINED_REPLAY = bytes.fromhex(
    "3331001a6b6f6f726470792f76312f6e6f6465732f6e312f7374617475730001007b227374617465223a226f"
    "6e6c696e65227d"
)
LIVE_RETAINED = bytes.fromhex(
    "322c00186b6f6f726470792f76312f6e6f6465732f6e312f6e6f64650002007b226b696e64223a224e6f6465227d"
)
QOS0_EVENT = bytes.fromhex(
    "302d001a6b6f6f726470792f76312f6e6f6465732f6e312f6576656e7473007b226b696e64223a224576656e74227d"
)
WITH_PROPERTIES = bytes.fromhex(
    "3264001e6b6f6f726470792f76312f6e6f6465732f6e322f6e6f64656d657472696300032c01010300106170"
    "706c69636174696f6e2f6a736f6e2600056167656e7400086b6f6f72646c657402000000787b226b696e6422"
    "3a224e6f64654d6574726963227d"
)
CLEARED = bytes.fromhex("321d00186b6f6f726470792f76312f6e6f6465732f6e322f6e6f6465000400")
TWO_BYTE_LENGTH = bytes.fromhex(
    "32cb02001a6b6f6f726470792f76312f6e6f6465732f6e332f6465766963650005"
) + (b"\x00" + b"x" * 300)

CAPTURED = [
    pytest.param(
        RETAINED_REPLAY,
        Publish(
            "koordpy/v1/nodes/n1/status",
            b'{"state":"online"}',
            qos=1,
            retain=True,
            packet_id=1,
        ),
        id="retained-replay",
    ),
    pytest.param(
        LIVE_RETAINED,
        Publish("koordpy/v1/nodes/n1/node", b'{"kind":"Node"}', qos=1, packet_id=2),
        id="live-qos1",
    ),
    pytest.param(
        QOS0_EVENT,
        Publish("koordpy/v1/nodes/n1/events", b'{"kind":"Event"}'),
        id="qos0-no-packet-id",
    ),
    pytest.param(
        WITH_PROPERTIES,
        Publish("koordpy/v1/nodes/n2/nodemetric", b'{"kind":"NodeMetric"}', qos=1, packet_id=3),
        id="expiry-content-type-user-property-format",
    ),
    pytest.param(
        CLEARED,
        Publish("koordpy/v1/nodes/n2/node", b"", qos=1, packet_id=4),
        id="empty-payload",
    ),
    pytest.param(
        TWO_BYTE_LENGTH,
        Publish("koordpy/v1/nodes/n3/device", b"x" * 300, qos=1, packet_id=5),
        id="two-byte-remaining-length",
    ),
]


@pytest.mark.parametrize(("packet", "expected"), CAPTURED)
def test_captured_publish_packets_are_read(packet: bytes, expected: Publish) -> None:
    found = frame(packet)
    assert found is not None
    first, start, end = found
    assert end == len(packet)
    assert parse_publish(first, packet, start, end) == expected


@pytest.mark.parametrize(("packet", "expected"), CAPTURED)
def test_a_captured_packet_split_anywhere_is_read_once_whole(
    packet: bytes, expected: Publish
) -> None:
    for cut in range(len(packet) + 1):
        splitter = Splitter()
        first = splitter.feed(packet[:cut])
        second = splitter.feed(packet[cut:])
        assert first[0] + second[0] == [expected], cut
        assert first[1] == second[1] == b""
        assert splitter.buffered == 0


def test_other_packets_go_to_the_client_and_publishes_are_read() -> None:
    splitter = Splitter()
    read, others = splitter.feed(CONNACK + SUBACK + RETAINED_REPLAY + LIVE_RETAINED)
    assert [m.topic for m in read] == ["koordpy/v1/nodes/n1/status", "koordpy/v1/nodes/n1/node"]
    assert others == CONNACK + SUBACK


def test_a_publish_left_to_the_client_takes_every_later_packet_along() -> None:
    aliased = encode_publish(
        Publish("koordpy/v1/nodes/n9/node", b"{}", qos=1, packet_id=9),
        properties=b"\x23\x00\x01",
    )
    qos2 = encode_publish(Publish("koordpy/v1/nodes/n9/node", b"{}", qos=2, packet_id=10))
    for odd in (aliased, qos2):
        splitter = Splitter()
        read, others = splitter.feed(LIVE_RETAINED + odd + QOS0_EVENT + CLEARED[:5])
        assert [m.packet_id for m in read] == [2]
        assert others == odd + QOS0_EVENT  # in order, after the one left to the client
        assert splitter.buffered == 5
        # The next bytes are read here again.
        read, others = splitter.feed(CLEARED[5:])
        assert [m.topic for m in read] == ["koordpy/v1/nodes/n2/node"]
        assert others == b""


@pytest.mark.parametrize(
    "packet",
    [
        pytest.param(bytes.fromhex("3204001a6b6f"), id="topic-runs-past-packet"),
        pytest.param(bytes.fromhex("3203000161"), id="no-packet-id"),
        pytest.param(bytes.fromhex("3206000161000000"), id="packet-id-zero"),
        pytest.param(bytes.fromhex("3207000161000105ff"), id="properties-run-past-packet"),
        pytest.param(bytes.fromhex("320700016100010177"), id="unknown-property"),
        pytest.param(bytes.fromhex("32070002ffff000100"), id="topic-not-utf8"),
        pytest.param(bytes.fromhex("36050001610000"), id="qos-3"),
    ],
)
def test_malformed_publishes_are_left_to_the_client(packet: bytes) -> None:
    found = frame(packet)
    assert found is not None
    with pytest.raises(PacketError):
        parse_publish(found[0], packet, found[1], found[2])
    read, others = Splitter().feed(packet + QOS0_EVENT)
    assert read == []
    assert others == packet + QOS0_EVENT


def test_a_remaining_length_over_four_bytes_hands_everything_over_for_good() -> None:
    broken = b"\x32\xff\xff\xff\xff\x01"
    splitter = Splitter()
    read, others = splitter.feed(LIVE_RETAINED + broken)
    assert [m.packet_id for m in read] == [2]
    assert others == broken
    assert splitter.feed(QOS0_EVENT) == ([], QOS0_EVENT)
    with pytest.raises(PacketError):
        frame(broken)


def test_puback_is_the_short_mqtt5_form() -> None:
    assert puback(1) == b"\x40\x02\x00\x01"
    assert puback(0xBEEF) == b"\x40\x02\xbe\xef"


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (127, "7f"),
        (128, "8001"),
        (16_383, "ff7f"),
        (16_384, "808001"),
        (268_435_455, "ffffff7f"),
    ],
)
def test_variable_byte_integers_match_the_spec_table(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded


def test_variable_byte_integers_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="range"):
        encode_varint(268_435_456)


_properties = st.lists(
    st.sampled_from(
        [
            b"\x01\x01",  # payload format indicator
            b"\x02\x00\x00\x00\x3c",  # message expiry interval
            b"\x03\x00\x04text",  # content type
            b"\x08\x00\x01r",  # response topic
            b"\x09\x00\x02\x00\x01",  # correlation data
            b"\x26\x00\x01k\x00\x01v",  # user property
            b"\x0b\x81\x01",  # subscription identifier (a two-byte one)
        ]
    ),
    max_size=4,
).map(b"".join)

_publishes = st.builds(
    Publish,
    topic=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40),
    payload=st.binary(max_size=400),
    qos=st.integers(0, 1),
    retain=st.booleans(),
    dup=st.booleans(),
    packet_id=st.integers(1, 0xFFFF),
).map(lambda m: m if m.qos else Publish(m.topic, m.payload, 0, m.retain, m.dup, 0))


@given(
    messages=st.lists(st.tuples(_publishes, _properties), max_size=8),
    cuts=st.lists(st.integers(0, 4000), max_size=6),
)
def test_encoded_publishes_read_back_however_the_bytes_are_cut(
    messages: list[tuple[Publish, bytes]], cuts: list[int]
) -> None:
    stream = b"".join(encode_publish(m, properties=p) for m, p in messages)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    splitter = Splitter()
    read: list[Publish] = []
    for lo, hi in itertools.pairwise(bounds):
        got, others = splitter.feed(stream[lo:hi])
        assert others == b""
        read.extend(got)
    assert read == [m for m, _ in messages]
    assert splitter.buffered == 0


@given(value=st.integers(0, 268_435_455))
def test_variable_byte_integers_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    packet = b"\xd0" + encoded + b"\x00" * value if value < 4096 else None
    assert 1 <= len(encoded) <= 4
    if packet is not None:
        assert frame(packet) == (0xD0, 1 + len(encoded), len(packet))
        assert frame(packet[:-1]) is None or value == 0
