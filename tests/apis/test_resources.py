"""ResourceList: parsing at the edge, integer arithmetic inside, Kubernetes' comparison rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.codec import decode_json, encode_json
from apis.quantity import QuantityError
from apis.resources import ResourceList
from apis.slo import ResourceMap


def test_parse_holds_canonical_integers_and_prints_back() -> None:
    wire = {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 2}
    resources = ResourceList.parse(wire)
    assert dict(resources) == {"cpu": 500, "memory": 4 * 2**30, "nvidia.com/gpu": 2}
    assert resources.to_wire() == {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": "2"}


def test_parse_error_names_resource_and_value() -> None:
    with pytest.raises(QuantityError, match=r"resource 'memory'.*'12x'"):
        ResourceList.parse({"cpu": "1", "memory": "12x"})


def test_rejects_non_map_and_bad_names() -> None:
    with pytest.raises(QuantityError):
        ResourceList.parse(["cpu"])  # type: ignore[arg-type]
    with pytest.raises(QuantityError):
        ResourceList.parse({"": "1"})
    with pytest.raises(QuantityError):
        ResourceList({"cpu": 1.5})  # type: ignore[arg-type]


def test_immutable_hashable_and_equal_by_content() -> None:
    a = ResourceList({"memory": 1, "cpu": 2})
    b = ResourceList([("cpu", 2), ("memory", 1)])
    assert a == b
    assert hash(a) == hash(b)
    assert a == {"cpu": 2, "memory": 1}
    assert list(a) == ["cpu", "memory"]  # sorted, so printing is stable
    assert {a: "x"}[b] == "x"
    with pytest.raises(TypeError):
        a["cpu"] = 3  # type: ignore[index]


def test_arithmetic() -> None:
    a = ResourceList({"cpu": 2000, "memory": 100})
    b = ResourceList({"cpu": 500, "nvidia.com/gpu": 1})
    assert a + b == {"cpu": 2500, "memory": 100, "nvidia.com/gpu": 1}
    assert a - b == {"cpu": 1500, "memory": 100, "nvidia.com/gpu": -1}
    assert ResourceList.total([a, b, b]) == {"cpu": 3000, "memory": 100, "nvidia.com/gpu": 2}
    assert ResourceList.total([]) == ResourceList()
    assert a.get_amount("nvidia.com/gpu") == 0


def test_fits_in_checks_only_the_limits_keys() -> None:
    request = ResourceList({"cpu": 4000, "memory": 8, "nvidia.com/gpu": 1})
    assert request.fits_in({"cpu": 4000, "memory": 8})  # gpu is unconstrained here
    assert not request.fits_in({"cpu": 3999})
    assert request.fits_in({})
    assert request.exceeded({"cpu": 1000, "memory": 8, "nvidia.com/gpu": 0}) == (
        "cpu",
        "nvidia.com/gpu",
    )


def test_mask_nonzero_clamp() -> None:
    r = ResourceList({"cpu": 0, "memory": -5, "pods": 3})
    assert r.mask(["cpu", "pods", "nvidia.com/gpu"]) == {"cpu": 0, "pods": 3}
    assert r.nonzero() == {"memory": -5, "pods": 3}
    assert r.clamp_min() == {"cpu": 0, "memory": 0, "pods": 3}


@pytest.mark.parametrize(
    ("raw", "wire"),
    [
        # Already canonical and in name order: printed back as given.
        ({"cpu": "250m", "memory": "1000001"}, {"cpu": "250m", "memory": "1000001"}),
        ({"cpu": "3", "pods": "0"}, {"cpu": "3", "pods": "0"}),
        # Not canonical: printed the way Kubernetes prints the amount.
        ({"memory": "1024"}, {"memory": "1Ki"}),
        ({"cpu": "2000m"}, {"cpu": "2"}),
        ({"cpu": "1000"}, {"cpu": "1k"}),
        ({"cpu": "0m"}, {"cpu": "0"}),
        ({"cpu": "0.5"}, {"cpu": "500m"}),
        ({"cpu": "007"}, {"cpu": "7"}),
        ({"pods": "3000"}, {"pods": "3k"}),
        ({"memory": "1500m"}, {"memory": "2"}),
        # Out of name order: printed in name order.
        ({"memory": "5", "cpu": "1"}, {"cpu": "1", "memory": "5"}),
    ],
)
def test_wire_form_is_canonical_whatever_the_input(
    raw: dict[str, str], wire: dict[str, str]
) -> None:
    parsed = ResourceList.parse(raw)
    assert parsed.to_wire() == wire
    assert list(parsed.to_wire()) == list(wire)
    assert json.loads(encode_json(parsed)) == wire
    assert parsed == ResourceList.parse(wire)
    # The same through the JSON decoder, which hands the list its own fresh map.
    decoded = decode_json(json.dumps({"resources": raw}), ResourceMap).resources
    assert decoded == parsed
    assert (
        encode_json(decoded)
        == encode_json(parsed)
        == json.dumps(wire, separators=(",", ":")).encode()
    )


def test_parsed_list_does_not_follow_its_source_map() -> None:
    raw = {"cpu": "250m"}
    parsed = ResourceList.parse(raw)
    raw["cpu"] = "4"
    raw["memory"] = "1Gi"
    assert dict(parsed) == {"cpu": 250}
    assert parsed.to_wire() == {"cpu": "250m"}
    parsed.to_wire()["cpu"] = "9"  # a copy: the list is unchanged
    assert parsed.to_wire() == {"cpu": "250m"}


# --- lists whose reading is deferred ---------------------------------------------------------


def test_a_report_map_reads_to_the_same_amounts_and_prints_canonically() -> None:
    # Plain and milli numbers (what reports carry) are read when first used; the amounts,
    # equality, hash and printed form are those of a list built from integers.
    decoded = decode_json(
        b'{"resources":{"memory":"2048","cpu":"3790m","nvidia.com/gpu":"2000"}}', ResourceMap
    )
    built = ResourceList({"cpu": 3790, "memory": 2048, "nvidia.com/gpu": 2000})
    assert decoded.resources == built
    assert built == decoded.resources
    assert hash(decoded.resources) == hash(built)
    assert dict(decoded.resources) == {"cpu": 3790, "memory": 2048, "nvidia.com/gpu": 2000}
    assert list(decoded.resources) == ["cpu", "memory", "nvidia.com/gpu"]
    assert decoded.resources.to_wire() == {"cpu": "3790m", "memory": "2Ki", "nvidia.com/gpu": "2k"}
    assert json.loads(encode_json(decoded)) == {
        "resources": {"cpu": "3790m", "memory": "2Ki", "nvidia.com/gpu": "2k"}
    }


def test_a_deferred_list_is_stored_with_the_text_it_came_with() -> None:
    from controller.store.persistence import encode

    decoded = decode_json(b'{"resources":{"cpu":"4","memory":"1024"}}', ResourceMap)
    stored = encode(decoded)
    assert json.loads(stored) == {"resources": {"cpu": "4", "memory": "1024"}}
    assert decode_json(stored, ResourceMap) == decoded


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"resources":{"cpu":"12x"}}', "cpu"),
        (b'{"resources":{"memory":"1.5.5"}}', "memory"),
        (b'{"resources":{"":"1"}}', "non-empty"),
        (b'{"resources":{"cpu":[4]}}', "cpu"),
    ],
)
def test_a_bad_quantity_is_refused_when_decoded_not_when_read(body: bytes, message: str) -> None:
    from apis.errors import DecodeError

    with pytest.raises((DecodeError, QuantityError), match=message):
        decode_json(body, ResourceMap)


_NAMES = ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage", "requests.cpu"]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(_NAMES),
        st.tuples(
            st.sampled_from(["", "0", "00"]),
            st.integers(0, 10**13),
            st.sampled_from(["", "m", "k", "Ki", "Mi", "G"]),
        ).map(lambda t: f"{t[0]}{t[1]}{t[2]}"),
        max_size=5,
    )
)
def test_deferred_or_not_a_map_reads_as_the_general_parser_reads_it(raw: dict[str, str]) -> None:
    from apis.quantity import format_quantity, to_canonical

    try:
        expected = {name: to_canonical(name, value) for name, value in raw.items()}
    except QuantityError:
        with pytest.raises(QuantityError):
            dict(ResourceList.adopt(dict(raw)))
        return
    adopted = ResourceList.adopt(dict(raw))
    assert dict(adopted) == expected
    assert adopted.to_wire() == {name: format_quantity(name, v) for name, v in expected.items()}
    assert adopted == ResourceList(expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), st.integers(0, 1000)),
        ),
        max_size=12,
    )
)
def test_a_tally_is_the_total_of_the_lists_counted_in(
    steps: list[tuple[bool, dict[str, int]]],
) -> None:
    from apis.resources import ResourceTally

    tally = ResourceTally()
    counted: list[dict[str, int]] = []
    for remove, amounts in steps:
        if remove and counted:
            tally.remove(counted.pop(0))
        else:
            tally.add(amounts)
            counted.append(amounts)
        assert tally.total() == ResourceList.total(counted)
        assert set(tally.total()) == set(ResourceList.total(counted))
