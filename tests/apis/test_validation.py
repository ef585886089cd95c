"""Kubernetes name, namespace, label and annotation rules."""

from __future__ import annotations

import pytest

from apis import validation
from apis.meta import ObjectMeta


@pytest.mark.parametrize(
    "name",
    ["a", "web", "web-1", "0abc", "a.b.c", "my-app.example.com", "a" * 253, "1-2.3-4"],
)
def test_valid_object_names(name: str) -> None:
    assert validation.object_name(name) == []


@pytest.mark.parametrize(
    "name",
    ["", "Web", "-web", "web-", "web_1", "a..b", ".a", "a.", "we b", "a" * 254, "ö"],
)
def test_invalid_object_names(name: str) -> None:
    assert validation.object_name(name)


def test_too_long_name_says_so() -> None:
    assert "must be no more than 253 characters" in validation.object_name("a" * 254)


@pytest.mark.parametrize("name", ["default", "kube-system", "a", "a" * 63, "team-1"])
def test_valid_namespaces(name: str) -> None:
    assert validation.namespace_name(name) == []


@pytest.mark.parametrize("name", ["a.b", "A", "a" * 64, "-a", "a-", ""])
def test_invalid_namespaces(name: str) -> None:
    assert validation.namespace_name(name)


@pytest.mark.parametrize(
    "key",
    [
        "app",
        "App.Name_1",
        "example.com/app",
        "scheduling.koordinator.sh/gpu-model",
        "kubernetes.io/hostname",
        "a" * 63,
        "k8s.io/" + "a" * 63,
    ],
)
def test_valid_qualified_names(key: str) -> None:
    assert validation.qualified_name(key) == []


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("", "name part must be non-empty"),
        ("example.com/", "name part must be non-empty"),
        ("/app", "prefix part must be non-empty"),
        ("a/b/c", "one '/'"),
        ("-app", "name part must be"),
        ("app-", "name part must be"),
        ("Example.com/app", "prefix part must be a lowercase RFC 1123 subdomain"),
        ("a" * 64, "name part must be no more than 63 characters"),
        ("app name", "name part must be"),
    ],
)
def test_invalid_qualified_names(key: str, fragment: str) -> None:
    assert any(fragment in reason for reason in validation.qualified_name(key))


@pytest.mark.parametrize("value", ["", "web", "v1.2_3-x", "A", "a" * 63])
def test_valid_label_values(value: str) -> None:
    assert validation.label_value(value) == []


@pytest.mark.parametrize("value", ["-web", "web-", "a b", "a/b", "a" * 64, "é"])
def test_invalid_label_values(value: str) -> None:
    assert validation.label_value(value)


def test_label_map_names_field_and_value() -> None:
    errors = validation.label_map({"-bad": "ok", "good": "bad value"})
    shown = [str(e) for e in errors]
    assert shown[0].startswith('metadata.labels: Invalid value: "-bad": ')
    assert shown[1].startswith('metadata.labels: Invalid value: "bad value": ')
    assert [e.value for e in errors] == ["-bad", "bad value"]


def test_annotation_keys_are_checked_case_insensitively_values_are_free() -> None:
    assert validation.annotation_map({"Example.COM/Note": "any text, even spaces!"}) == []
    assert validation.annotation_map({"bad key": "x"})


def test_annotations_total_size_limit() -> None:
    limit = validation.ANNOTATIONS_TOTAL_LIMIT
    assert validation.annotation_map({"k": "v" * (limit - 1)}) == []
    errors = validation.annotation_map({"k": "v" * limit})
    assert [e.type for e in errors] == ["Too long"]


def test_finalizers_must_be_qualified_names() -> None:
    assert validation.finalizer_list(("example.com/cleanup", "plain")) == []
    errors = validation.finalizer_list(("ok", "not ok"))
    assert [e.field for e in errors] == ["metadata.finalizers[1]"]


def test_object_meta_requires_a_name_or_generate_name() -> None:
    errors = validation.object_meta(ObjectMeta(), namespaced=True)
    assert [str(e) for e in errors] == [
        "metadata.name: Required value: name or generateName is required"
    ]
    assert validation.object_meta(ObjectMeta(generate_name="web-"), namespaced=True) == []


def test_object_meta_checks_every_part() -> None:
    meta = ObjectMeta(
        name="Web",
        namespace="Team.A",
        labels={"app": "-x"},
        annotations={"bad key": ""},
        finalizers=("bad finalizer",),
    )
    fields = [e.field for e in validation.object_meta(meta, namespaced=True)]
    assert fields == [
        "metadata.name",
        "metadata.namespace",
        "metadata.labels",
        "metadata.annotations",
        "metadata.finalizers[0]",
    ]


def test_cluster_scoped_objects_ignore_the_namespace() -> None:
    meta = ObjectMeta(name="node-1", namespace="Not Valid")
    assert validation.object_meta(meta, namespaced=False) == []


def test_field_error_quotes_the_value_like_kubernetes() -> None:
    error = validation.invalid("metadata.name", 'a"b', "bad")
    assert str(error) == 'metadata.name: Invalid value: "a\\"b": bad'
    assert str(validation.required("metadata.name", "needed")) == (
        "metadata.name: Required value: needed"
    )
