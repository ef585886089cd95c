"""Decoding documents: every error names the source, document index, field and value."""

from __future__ import annotations

import pytest

from apis.codec import (
    decode_documents,
    decode_json,
    decode_object,
    dump_yaml,
    encode_json,
    load_yaml_documents,
)
from apis.core import Job, Pod
from apis.errors import DecodeError
from apis.queueing import Queue

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: ok
  namespace: default
spec:
  containers:
    - name: app
      image: nginx
"""


def _decode_error(text: str, source: str = "manifests/app.yaml") -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        decode_documents(text, source=source)
    return caught.value


def test_invalid_yaml_names_file_and_line() -> None:
    err = _decode_error("apiVersion: v1\nkind: Pod\nmetadata: {name: a\n")
    assert err.source == "manifests/app.yaml"
    assert str(err).startswith("manifests/app.yaml: invalid YAML at line 4")


def test_unknown_kind_names_document_and_kind() -> None:
    err = _decode_error(POD + "---\napiVersion: v1\nkind: Pot\nmetadata: {name: a}\n")
    assert (err.source, err.index, err.field) == ("manifests/app.yaml", 1, "kind")
    assert "unknown kind 'Pot'" in err.message
    assert str(err).startswith("manifests/app.yaml: document 1: field kind: unknown kind 'Pot'")


def test_kind_served_under_another_api_version() -> None:
    err = _decode_error("apiVersion: v2\nkind: Pod\nmetadata: {name: a}\n")
    assert err.field == "kind"
    assert "served in v1" in err.message


def test_bad_quantity_names_field_and_value() -> None:
    text = POD.replace("image: nginx", "image: nginx\n      resources: {requests: {cpu: 12x}}")
    err = _decode_error(text)
    assert (err.index, err.field, err.value) == (
        0,
        "spec.containers[0].resources.requests.cpu",
        "'12x'",
    )
    assert "12x" in str(err)


def test_bad_quantity_of_a_dotted_resource_name() -> None:
    text = POD.replace(
        "image: nginx", "image: nginx\n      resources: {limits: {nvidia.com/gpu: one}}"
    )
    err = _decode_error(text)
    assert err.field == "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert err.value == "'one'"


def test_unknown_field_names_its_path() -> None:
    err = _decode_error(POD.replace("image: nginx", "imagee: nginx"))
    assert (err.field, err.message, err.value) == (
        "spec.containers[0].imagee",
        "unknown field",
        "'nginx'",
    )


def test_wrong_type_names_field_and_value() -> None:
    text = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {parallelism: three}\n"
    err = _decode_error(POD + "---\n" + text)
    assert (err.index, err.field, err.value) == (1, "spec.parallelism", "'three'")
    assert "Expected `int" in err.message


def test_missing_required_field() -> None:
    text = (
        "apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\n"
        "metadata: {name: r}\nspec: {preAllocation: true}\n"
    )
    err = _decode_error(text)
    assert (err.field, err.message) == ("spec.template", "missing required field")


def test_missing_api_version_and_non_mapping_documents() -> None:
    assert _decode_error("kind: Pod\nmetadata: {name: a}\n").field == "apiVersion"
    assert "expected an object" in _decode_error("- a\n- b\n").message


def test_bad_timestamp_and_duration() -> None:
    bad_time = POD.replace("name: ok", "name: ok\n  creationTimestamp: yesterday")
    assert _decode_error(bad_time).field == "metadata.creationTimestamp"
    bad_ttl = (
        "apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Reservation\nmetadata: {name: r}\n"
        "spec: {ttl: 1y, template: {}, owners: [{}]}\n"
    )
    err = _decode_error(bad_ttl)
    assert (err.field, err.value) == ("spec.ttl", "'1y'")


def test_list_documents_are_flattened_and_indexed() -> None:
    text = """
apiVersion: v1
kind: List
items:
  - {apiVersion: v1, kind: Pod, metadata: {name: a}}
  - {apiVersion: batch/v1, kind: Job, metadata: {name: b}}
---
apiVersion: v1
kind: PodList
items:
  - {apiVersion: v1, kind: Pod, metadata: {name: c}}
"""
    objects = decode_documents(text)
    assert [(type(o), o.name) for o in objects] == [(Pod, "a"), (Job, "b"), (Pod, "c")]
    err = _decode_error(text.replace("name: c", "name: c, nmae: x"))
    assert err.index == 2


def test_json_documents_and_empty_documents() -> None:
    text = '---\n---\n{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}}\n---\n'
    [pod] = decode_documents(text)
    assert pod.name == "j"
    assert load_yaml_documents("---\n\n---\n") == []


def test_dates_in_labels_stay_strings() -> None:
    [pod] = decode_documents(POD.replace("name: ok", "name: ok\n  labels: {day: 2026-03-01}"))
    assert isinstance(pod, Pod)
    assert pod.labels == {"day": "2026-03-01"}


def test_api_version_alias_is_normalised() -> None:
    raw = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "team-a-queue", "namespace": "koord-queue"},
        "spec": {"queuePolicy": "Priority", "priority": 100},
    }
    queue = decode_object(raw)
    assert isinstance(queue, Queue)
    assert queue.api_version == "scheduling.x-k8s.io/v1alpha1"
    assert queue.spec.priority == 100


def test_decode_json_fast_path_errors() -> None:
    with pytest.raises(DecodeError, match="invalid JSON"):
        decode_json(b"{not json", Pod)
    with pytest.raises(DecodeError) as caught:
        decode_json(b'{"apiVersion":"v1","kind":"Pod","spec":{"nodeNme":"x"}}', Pod)
    assert caught.value.field == "spec.nodeNme"


def test_encode_is_compact_camel_case_and_dump_is_block_yaml() -> None:
    [pod] = decode_documents(POD.replace("image: nginx", "image: nginx\n      workingDir: /srv"))
    assert b'"workingDir":"/srv"' in encode_json(pod)
    text = dump_yaml([pod, pod])
    assert text.count("apiVersion: v1") == 2
    assert "---\n" in text
    assert decode_documents(text) == [pod, pod]


def test_multi_line_strings_dump_as_literal_blocks() -> None:
    [pod] = decode_documents(POD.replace("name: ok", 'name: ok\n  annotations: {note: "a\\nb"}'))
    text = dump_yaml(pod)
    assert "note: |-\n" in text
    assert decode_documents(text) == [pod]


def test_json_durations_are_read_once_per_text_and_bad_ones_still_fail() -> None:
    from apis import codec
    from apis.duration import Duration
    from apis.slo import AggregatedUsage

    first = decode_json(b'{"duration":"5m0s"}', AggregatedUsage)
    again = decode_json(b'{"duration":"5m0s"}', AggregatedUsage)
    assert first.duration == again.duration == Duration(300 * 10**9)
    for _ in range(2):  # a bad text is never remembered as good
        with pytest.raises(DecodeError, match="invalid duration"):
            decode_json(b'{"duration":"5 minutes"}', AggregatedUsage)
    for seconds in range(codec._DURATIONS.limit + 10):
        decode_json(b'{"duration":"%ds"}' % seconds, AggregatedUsage)
    assert len(codec._DURATIONS) <= codec._DURATIONS.limit
    assert decode_json(b'{"duration":"1h"}', AggregatedUsage).duration == Duration(3600 * 10**9)
