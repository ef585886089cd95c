"""Hostile documents at the decoders: duplicate keys and nesting that would reach Python's
recursion limit (issue 18, point 1). Every one is refused with a clear DecodeError, never a
RecursionError, and well-formed documents up to the limit still decode."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apis.bounded import nested_deeper
from apis.codec import MAX_DEPTH, check_depth, decode_documents, decode_json, load_yaml_documents
from apis.core import ConfigMap, Node, Pod
from apis.errors import DecodeError
from apis.slo import NodeMetric

DEEP = 100_000
TOO_DEEP = f"maps and lists nested more than {MAX_DEPTH} levels deep"

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: main
    resources:
      requests:
        cpu: "1"
        memory: 1Gi
        cpu: "-100"
"""


# --- duplicate keys --------------------------------------------------------------------------


def test_a_duplicate_key_is_refused_naming_it_as_kubectl_does() -> None:
    """Without the refusal the last ``cpu`` wins: a reviewer reads ``cpu: "1"`` and the
    cluster stores -100."""
    with pytest.raises(DecodeError) as caught:
        decode_documents(POD, source="pod.yaml")
    assert str(caught.value) == (
        "pod.yaml: error converting YAML to JSON: yaml: unmarshal errors:\n"
        '  line 12: key "cpu" already set in map'
    )


def test_every_duplicate_of_a_document_is_listed_by_line() -> None:
    text = "a: 1\nb:\n  c: 1\n  c: 2\na: 2\n"
    with pytest.raises(DecodeError) as caught:
        load_yaml_documents(text)
    assert caught.value.message == (
        "error converting YAML to JSON: yaml: unmarshal errors:\n"
        '  line 4: key "c" already set in map\n'
        '  line 5: key "a" already set in map'
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"metadata": {"name": "a", "name": "b"}}', '"name"'),  # JSON is read as YAML too
        ("data:\n  1: x\n  1: y\n", "1"),
        ("data:\n  on: x\n  true: y\n", "true"),  # both are the JSON key "true"
    ],
)
def test_duplicates_are_found_whatever_the_spelling(text: str, key: str) -> None:
    with pytest.raises(DecodeError, match=f"key {key} already set in map"):
        load_yaml_documents(text)


def test_keys_a_merge_brings_in_may_be_overridden() -> None:
    text = "base: &base {cpu: '1', memory: 1Gi}\nrequests:\n  <<: *base\n  cpu: '2'\n"
    assert load_yaml_documents(text) == [
        {"base": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "2", "memory": "1Gi"}}
    ]


def test_the_same_key_in_two_documents_or_two_maps_is_fine() -> None:
    text = "a: {x: 1}\nb: {x: 2}\n---\na: 3\n"
    assert load_yaml_documents(text) == [{"a": {"x": 1}, "b": {"x": 2}}, {"a": 3}]


# --- nesting depth: YAML ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "[" * DEEP + "]" * DEEP,  # flow sequences (and JSON through the YAML path)
        '{"a": ' * DEEP + "1" + "}" * DEEP,  # flow mappings
        "[" * DEEP,  # unclosed
        "- " * DEEP + "x\n",  # block sequences on one line
        "".join(f"{'  ' * level}a:\n" for level in range(MAX_DEPTH + 1)) + "  " * 101 + "b\n",
    ],
    ids=["flow-lists", "flow-maps", "unclosed", "block-lists", "block-maps"],
)
def test_yaml_nested_past_the_limit_is_refused(text: str) -> None:
    with pytest.raises(DecodeError) as caught:
        load_yaml_documents(text, source="deep.yaml")
    assert TOO_DEEP in str(caught.value)
    assert str(caught.value).startswith("deep.yaml: invalid YAML at line ")


def test_aliases_cannot_nest_deeper_than_the_text_does() -> None:
    """Each anchor is 60 levels deep as written; the alias puts one inside the other."""
    inner = "[" * 60 + "1" + "]" * 60
    text = f"a: &a {inner}\nb: " + "[" * 60 + "*a" + "]" * 60 + "\n"
    with pytest.raises(DecodeError) as caught:
        load_yaml_documents(text)
    assert caught.value.message == TOO_DEEP
    assert caught.value.field.startswith("b[0][0]")


def test_yaml_at_the_limit_decodes() -> None:
    depth = MAX_DEPTH
    text = "[" * depth + "1" + "]" * depth
    value = load_yaml_documents(text)[0]
    for _ in range(depth - 1):
        value = value[0]
    assert value == [1]


# --- nesting depth: JSON ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "[" * DEEP + "]" * DEEP,
        '{"a":' * DEEP + "1" + "}" * DEEP,
        "[" * DEEP,
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","annotations":'
        + "[" * DEEP
        + "]" * DEEP
        + "}}",
    ],
    ids=["lists", "maps", "unclosed", "inside-an-object"],
)
def test_json_nested_past_the_limit_is_refused(body: str) -> None:
    for data in (body, body.encode()):
        with pytest.raises(DecodeError, match=TOO_DEEP):
            decode_json(data, ConfigMap)


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = "[" * DEEP + '\\"{'
    body = (
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":'
        + f'"{text}"'
        + "}}"
    )
    decoded = decode_json(body, ConfigMap)
    assert decoded.data["k"] == "[" * DEEP + '"{'


def test_json_at_the_limit_passes_the_check() -> None:
    check_depth("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    check_depth("[]" * DEEP)  # wide, not deep
    with pytest.raises(DecodeError):
        check_depth("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_a_pod_body_of_ordinary_depth_decodes() -> None:
    body = (
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"affinity":'
        b'{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":'
        b'[{"matchExpressions":[{"key":"a","operator":"In","values":["b"]}]}]}}},'
        b'"containers":[' + b",".join(b'{"name":"c%d"}' % i for i in range(200)) + b"]}}"
    )
    assert len(decode_json(body, Pod).spec.containers) == 200


def test_unclosed_strings_are_read_once() -> None:
    """A quote that never closes, followed by escaped quotes a naive scan would start from
    again and again (quadratic in the text); what follows it is inside the string."""
    check_depth('"' + '\\"' * 500_000 + "[" * (MAX_DEPTH + 1))
    with pytest.raises(DecodeError, match=TOO_DEEP):
        check_depth("[" * (MAX_DEPTH + 1) + '"' + '\\"' * 500_000 + "\\")


def test_an_escaped_backslash_does_not_hide_what_follows_its_string() -> None:
    """``"\\\\"`` is a string of one backslash: the quote after it closes the string, and
    the nesting after that is structure."""
    body = r'{"metadata":{"annotations":{"a":"\\"}},"data":' + "[" * 200 + "]" * 200 + "}"
    with pytest.raises(DecodeError, match=TOO_DEEP):
        check_depth(body)
    check_depth(r'{"k":"' + r"\"[" * 300 + '"}')  # escaped quotes keep the string open


def test_aliases_standing_for_billions_of_nodes_are_refused() -> None:
    """Ten lines of anchors, each a list of ten aliases of the one before, stand for 10**10
    nodes: walking them (as the JSON step must) would never end."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    with pytest.raises(DecodeError, match="document contains excessive aliasing"):
        load_yaml_documents("\n".join(lines))


def test_a_few_aliases_still_expand() -> None:
    text = "base: &b {cpu: '1'}\nrequests: *b\nlimits:\n  <<: *b\n  memory: 1Gi\n"
    assert load_yaml_documents(text) == [
        {
            "base": {"cpu": "1"},
            "requests": {"cpu": "1"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        }
    ]


# --- nesting depth: checked on what decoding gave, for targets with few Any parts ------------

#: a Node whose ``Any`` parts (status.nodeInfo, a managedFields entry) and a resource list
#: hold ``@`` for a value, with enough brackets elsewhere that a short text cannot pass for
#: shallow
NODE_AROUND = (
    '{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","managedFields":[{"f":%s}]},'
    '"status":{"nodeInfo":{"x":%s},"capacity":{"cpu":%s},"images":['
    + ",".join(["{}"] * 120)
    + "]}}"
)


def _nested(levels: int) -> str:
    """``levels`` maps and lists around a string, alternating."""
    text = '"x"'
    for level in range(levels):
        text = f"[{text}]" if level % 2 else f'{{"k":{text}}}'
    return text


@given(
    levels=st.one_of(st.integers(90, 105), st.sampled_from([500, 990, 5_000, DEEP])),
    where=st.sampled_from([0, 1, 2]),
)
@settings(max_examples=60, deadline=None)
def test_a_node_is_refused_exactly_when_its_text_nests_too_deep(levels: int, where: int) -> None:
    """A Node's nesting is checked on the decoded Node, walking only its few ``Any`` parts:
    the verdict is the text's, deep values in any part are a DecodeError (never a
    RecursionError), and what passes decodes."""
    parts = ['"1"'] * 3
    parts[where] = _nested(levels)
    body = (NODE_AROUND % tuple(parts)).encode()
    too_deep = nested_deeper(body, MAX_DEPTH)
    if too_deep:
        with pytest.raises(DecodeError, match=TOO_DEEP):
            decode_json(body, Node)
    elif where == 2:  # a nested quantity is refused as a quantity
        with pytest.raises(DecodeError, match="quantit"):
            decode_json(body, Node)
    else:
        assert decode_json(body, Node).metadata.name == "n"


def test_deep_values_in_a_node_metric_s_pods_are_refused() -> None:
    pods = ",".join(
        f'{{"namespace":"ns","name":"p{i}","extensions":{{"a":{_nested(120 if i == 19 else 3)}}}}}'
        for i in range(20)
    )
    body = (
        '{"apiVersion":"slo.koordinator.sh/v1alpha1","kind":"NodeMetric","metadata":{"name":"n"},'
        '"status":{"podsMetric":[' + pods + "]}}"
    )
    with pytest.raises(DecodeError, match=TOO_DEEP):
        decode_json(body, NodeMetric)
    assert decode_json(body.replace(_nested(120), _nested(90)), NodeMetric).status.pods_metric
