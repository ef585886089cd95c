"""``koordpy crds``: structural CRDs made from the Structs, matching Koordinator's v1.8.0 CRDs.

No cluster here: a checker of the API server's structural-schema rules, the names against
Koordinator's CRDs, and example objects against our schemas (tests/kube/test_crds.py has a
real API server accept them).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import msgspec
import pytest
import yaml

from apis import codec
from apis.duration import Duration
from apis.kinds import Kind, Registry, default_registry
from apis.meta import Model, Object, ObjectMeta
from apis.resources import ResourceList
from controller.kube import crds
from tests.conftest import REPO_ROOT
from tests.crdschema import _FORMATS, _strict, schema_errors

# --- a checker of the structural-schema rules kube-apiserver enforces -------------------------

_TYPES = {"object", "array", "string", "integer", "number", "boolean"}
#: JSON-Schema keywords a CRD schema may not use at all.
_FORBIDDEN = {"$ref", "$schema", "definitions", "id", "patternProperties", "dependencies"}
#: What a value validation (inside anyOf/allOf/oneOf/not) may not set.
_NOT_IN_VALUE_VALIDATION = {"type", "description", "default", "additionalProperties", "nullable"}
_INT_OR_STRING = [{"type": "integer"}, {"type": "string"}]


def structural_errors(schema: Any) -> list[str]:
    """Every rule of a structural schema the ``openAPIV3Schema`` breaks, by path."""
    errors: list[str] = []
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ["<root>: must be of type object"]
    if "additionalProperties" in schema:
        errors.append("<root>: additionalProperties is not allowed at the root")
    properties = schema.get("properties", {})
    errors.extend(
        f"<root>.{name}: must be a plain string"
        for name in ("apiVersion", "kind")
        if name in properties and properties[name] != {"type": "string"}
    )
    if "metadata" in properties and properties["metadata"] != {"type": "object"}:
        errors.append("<root>.metadata: must be {type: object} only")
    _check(schema, "<root>", errors)
    return errors


def _check(node: Any, path: str, errors: list[str]) -> None:
    if not isinstance(node, dict):
        errors.append(f"{path}: a schema must be a map, got {node!r}")
        return
    errors.extend(f"{path}: {key} is not allowed" for key in sorted(_FORBIDDEN & node.keys()))
    if node.get("uniqueItems") is True:
        errors.append(f"{path}: uniqueItems: true is not allowed")
    errors.extend(
        f"{path}: {extension} must be true when set"
        for extension in ("x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string")
        if extension in node and node[extension] is not True
    )
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if int_or_string:
        if "type" in node:
            errors.append(f"{path}: type must be empty with x-kubernetes-int-or-string")
        if node.get("anyOf") != _INT_OR_STRING:
            errors.append(f"{path}: int-or-string needs anyOf [integer, string]")
    elif node.get("type") not in _TYPES and not preserve:
        errors.append(f"{path}: type {node.get('type')!r} is missing or unknown")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: properties and additionalProperties together")
    if ("properties" in node or "additionalProperties" in node) and node.get("type") != "object":
        errors.append(f"{path}: properties on a node that is not an object")
    if "items" in node and node.get("type") != "array":
        errors.append(f"{path}: items on a node that is not an array")
    if node.get("type") == "array" and not isinstance(node.get("items"), dict):
        errors.append(f"{path}: an array needs one items schema")
    errors.extend(
        f"{path}: required {name!r} is not a property"
        for name in node.get("required", [])
        if name not in node.get("properties", {})
    )
    if node.get("x-kubernetes-list-type") == "set" and "properties" in node.get("items", {}):
        errors.append(f"{path}: a set lists scalars only")
    for keyword in ("anyOf", "allOf", "oneOf", "not"):
        if keyword not in node:
            continue
        members = node[keyword] if isinstance(node[keyword], list) else [node[keyword]]
        if int_or_string and keyword == "anyOf" and members == _INT_OR_STRING:
            continue
        for index, member in enumerate(members):
            _check_value_validation(member, f"{path}.{keyword}[{index}]", errors)
    for name, child in node.get("properties", {}).items():
        _check(child, f"{path}.{name}", errors)
    if isinstance(node.get("additionalProperties"), dict):
        _check(node["additionalProperties"], f"{path}{{}}", errors)
    elif "additionalProperties" in node and node["additionalProperties"] is not False:
        errors.append(f"{path}: additionalProperties must be a schema")
    if "items" in node:
        _check(node["items"], f"{path}[]", errors)


def _check_value_validation(node: Any, path: str, errors: list[str]) -> None:
    if not isinstance(node, dict):
        errors.append(f"{path}: a schema must be a map")
        return
    errors.extend(
        f"{path}: {key} is not allowed in a value validation"
        for key in sorted(_NOT_IN_VALUE_VALIDATION & node.keys())
    )
    for child in node.get("properties", {}).values():
        _check_value_validation(child, path, errors)


GOOD = {"type": "object", "properties": {"spec": {"type": "object"}}}


@pytest.mark.parametrize(
    ("broken", "error"),
    [
        ({"properties": {"a": {"$ref": "#/$defs/A"}}}, "$ref is not allowed"),
        ({"properties": {"a": {"properties": {}}}}, "type None is missing"),
        (
            {"properties": {"a": {"type": "object", "properties": {}, "additionalProperties": {}}}},
            "properties and additionalProperties together",
        ),
        ({"properties": {"a": {"type": "string", "x-kubernetes-int-or-string": True}}}, "empty"),
        ({"properties": {"a": {"x-kubernetes-int-or-string": True}}}, "needs anyOf"),
        ({"properties": {"metadata": {"type": "object", "properties": {}}}}, "metadata"),
        ({"properties": {"a": {"type": "array"}}}, "one items schema"),
        ({"properties": {"a": {"type": "array", "items": {}}}}, "<root>.a[]: type None"),
        ({"additionalProperties": {"type": "string"}}, "not allowed at the root"),
        ({"properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}}}, "value valid"),
        ({"required": ["spec"], "properties": {}}, "required 'spec'"),
        (
            {
                "properties": {
                    "a": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
                }
            },
            "uniqueItems",
        ),
    ],
)
def test_the_checker_finds_what_the_api_server_refuses(broken: dict[str, Any], error: str) -> None:
    schema = {"type": "object", **broken}
    assert structural_errors(GOOD) == []
    found = structural_errors(schema)
    assert any(error in message for message in found), found


# --- the generated CRDs -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated() -> list[dict[str, Any]]:
    return crds.custom_resource_definitions(default_registry(), job_kinds=True)


def _storage_schema(crd: dict[str, Any]) -> dict[str, Any]:
    [version] = [v for v in crd["spec"]["versions"] if v["storage"]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def test_every_custom_kind_of_the_registry_gets_a_crd(generated: list[dict[str, Any]]) -> None:
    registry = default_registry()
    custom = [kind for kind in registry if kind.group not in crds.BUILT_IN_GROUPS]
    assert [c["metadata"]["name"] for c in generated] == [k.qualified_plural for k in custom]
    expected = {
        "devices.scheduling.koordinator.sh",
        "reservations.scheduling.koordinator.sh",
        "podmigrationjobs.scheduling.koordinator.sh",
        "nodemetrics.slo.koordinator.sh",
        "nodeslos.slo.koordinator.sh",
        "elasticquotas.scheduling.sigs.k8s.io",
        "podgroups.scheduling.sigs.k8s.io",
        "queues.scheduling.x-k8s.io",
        "queueunits.scheduling.x-k8s.io",
        "admissionchecks.kueue.x-k8s.io",
        "pytorchjobs.kubeflow.org",
    }
    assert expected <= {c["metadata"]["name"] for c in generated}
    built_in = {"Pod", "Node", "ConfigMap", "Deployment", "Job", "PriorityClass"}
    assert not built_in & {c["spec"]["names"]["kind"] for c in generated}
    with pytest.raises(ValueError, match="served by kube-apiserver"):
        crds.custom_resource_definition(registry.resolve("pods"))


def test_every_crd_is_structural(generated: list[dict[str, Any]]) -> None:
    for crd in generated:
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["kind"] == "CustomResourceDefinition"
        assert [v for v in crd["spec"]["versions"] if v["storage"]], crd["metadata"]["name"]
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            assert structural_errors(schema) == [], crd["metadata"]["name"]
            assert '"$ref"' not in json.dumps(schema)


def test_quantities_are_int_or_string_and_free_form_maps_are_preserved(
    generated: list[dict[str, Any]],
) -> None:
    by_name = {c["metadata"]["name"]: _storage_schema(c) for c in generated}
    quota = by_name["elasticquotas.scheduling.sigs.k8s.io"]["properties"]
    for resources in (quota["spec"]["properties"]["min"], quota["status"]["properties"]["used"]):
        assert resources["type"] == "object"
        assert resources["additionalProperties"]["x-kubernetes-int-or-string"] is True
        assert resources["additionalProperties"]["pattern"] == crds.QUANTITY_PATTERN
    nodeslo = by_name["nodeslos.slo.koordinator.sh"]["properties"]
    assert nodeslo["status"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert nodeslo["spec"]["properties"]["extensions"]["x-kubernetes-preserve-unknown-fields"]
    bandwidth = nodeslo["spec"]["properties"]["systemStrategy"]["properties"]
    assert bandwidth["totalNetworkBandwidth"]["x-kubernetes-int-or-string"] is True
    reservation = by_name["reservations.scheduling.koordinator.sh"]
    assert reservation["required"] == ["spec"]
    assert reservation["properties"]["spec"]["required"] == ["template", "owners"]
    ttl = reservation["properties"]["spec"]["properties"]["ttl"]
    assert ttl == {"type": "string"}
    # Nested object metadata (a pod template's) is typed in full: its labels are kept.
    template = reservation["properties"]["spec"]["properties"]["template"]["properties"]
    assert "labels" in template["metadata"]["properties"]


# --- the same names as Koordinator's v1.8.0 CRDs ----------------------------------------------


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_KOORDINATOR_CRDS: dict[Path, dict[str, dict[str, Any]]] = {}


def _koordinator_crds(shared_dir: Path) -> dict[str, dict[str, Any]]:
    """Koordinator's v1.8.0 CRDs by name (read once: the QueueUnit one is 600 kB)."""
    if shared_dir not in _KOORDINATOR_CRDS:
        found: dict[str, dict[str, Any]] = {}
        for path in sorted((shared_dir / "koordinator-crds" / "v1.8.0").glob("*.yaml")):
            for document in yaml.load_all(path.read_text(), Loader=_LOADER):
                if document:
                    found[document["metadata"]["name"]] = document
        _KOORDINATOR_CRDS[shared_dir] = found
    return _KOORDINATOR_CRDS[shared_dir]


def test_names_groups_scopes_and_versions_are_koordinators(
    generated: list[dict[str, Any]], shared_dir: Path
) -> None:
    theirs = _koordinator_crds(shared_dir)
    ours = {c["metadata"]["name"]: c for c in generated}
    registered = {(k.group, k.kind) for k in default_registry()}
    shared = {
        name
        for name, crd in theirs.items()
        if (crd["spec"]["group"], crd["spec"]["names"]["kind"]) in registered
    }
    # Every Koordinator CRD of a kind koordpy holds has its replacement.
    assert len(shared) == 10
    assert shared <= ours.keys()
    for name in sorted(shared):
        mine, koord = ours[name]["spec"], theirs[name]["spec"]
        assert mine["group"] == koord["group"], name
        assert mine["scope"] == koord["scope"], name
        for key in ("kind", "listKind", "plural", "singular"):
            assert mine["names"][key] == koord["names"][key], (name, key)
        assert set(koord["names"].get("shortNames", ())) <= set(mine["names"].get("shortNames", ()))
        served = {v["name"] for v in mine["versions"] if v["served"]}
        assert {v["name"] for v in koord["versions"] if v["served"]} <= served, name
        for version in koord["versions"]:
            [same] = [v for v in mine["versions"] if v["name"] == version["name"]]
            has_status = "status" in (version.get("subresources") or {})
            assert ("status" in (same.get("subresources") or {})) == has_status, name
        if "api-approved.kubernetes.io" in theirs[name]["metadata"].get("annotations", {}):
            assert ours[name]["metadata"]["annotations"] == {
                "api-approved.kubernetes.io": theirs[name]["metadata"]["annotations"][
                    "api-approved.kubernetes.io"
                ]
            }


def _missing_fields(theirs: Any, ours: Any, path: str) -> Iterator[str]:
    """Fields Koordinator's schema names that ours would prune."""
    if not isinstance(theirs, dict) or not isinstance(ours, dict):
        return
    if ours.get("x-kubernetes-preserve-unknown-fields") and "properties" not in ours:
        return
    if path == ".metadata":  # the API server's own schema
        return
    for name, child in theirs.get("properties", {}).items():
        if name not in ours.get("properties", {}):
            yield f"{path}.{name}"
        else:
            yield from _missing_fields(child, ours["properties"][name], f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        yield from _missing_fields(theirs.get(key), ours.get(key), path + suffix)


def test_no_field_of_koordinators_schemas_is_missing_from_ours(
    generated: list[dict[str, Any]], shared_dir: Path
) -> None:
    """An object Koordinator's components write loses nothing under our CRD."""
    theirs = _koordinator_crds(shared_dir)
    compared = 0
    for crd in generated:
        name = crd["metadata"]["name"]
        if name in theirs:
            compared += 1
            missing = list(_missing_fields(_storage_schema(theirs[name]), _storage_schema(crd), ""))
            assert missing == [], name
    assert compared == 10


def test_subresources_follow_the_structs_and_the_exceptions(
    generated: list[dict[str, Any]],
) -> None:
    registry = default_registry()
    for crd in generated:
        kind = registry.resolve(crd["metadata"]["name"])
        has_status = "status" in {f.name for f in msgspec.structs.fields(kind.type)}
        expected = has_status and kind.key not in crds.WITHOUT_STATUS_SUBRESOURCE
        for version in crd["spec"]["versions"]:
            assert ("subresources" in version) == expected, kind.key


def test_an_alias_of_the_same_group_is_served_and_one_of_another_group_is_not(
    generated: list[dict[str, Any]],
) -> None:
    by_name = {c["metadata"]["name"]: c["spec"] for c in generated}
    check = by_name["admissionchecks.kueue.x-k8s.io"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in check] == [
        ("v1beta2", True, True),
        ("v1beta1", True, False),
    ]
    assert check[0]["schema"] == check[1]["schema"]
    assert check[0]["schema"] is not check[1]["schema"]
    queue = by_name["queues.scheduling.x-k8s.io"]
    assert queue["group"] == "scheduling.x-k8s.io"
    assert [v["name"] for v in queue["versions"]] == ["v1alpha1"]
    # The release notes' scheduling.koordinator.sh Queue is koordpy's alias, not a CRD.
    assert ("scheduling.koordinator.sh", "Queue") not in {
        (c["spec"]["group"], c["spec"]["names"]["kind"]) for c in generated
    }


# --- objects against our schemas ---------------------------------------------------------------


def _validator(generated: list[dict[str, Any]], kind: Kind) -> jsonschema.Draft7Validator:
    [crd] = [c for c in generated if c["metadata"]["name"] == kind.qualified_plural]
    # Strict as the API server's pruning is: a key the schema does not name is an error.
    schema = _strict(copy.deepcopy(_storage_schema(crd)))
    return jsonschema.Draft7Validator(schema, format_checker=_FORMATS)


def _is_list(document: dict[str, Any]) -> bool:
    return str(document.get("kind", "")).endswith("List") and "items" in document


def _custom_objects(text: str, source: str) -> list[tuple[Kind, dict[str, Any]]]:
    registry = default_registry()
    found = []
    documents = codec.load_yaml_documents(text, source=source)
    # A ``kind: List`` (PodList...) stands for its items.
    for document in [i for d in documents for i in (d["items"] if _is_list(d) else [d])]:
        kind = codec.kind_of(document, registry)
        if crds.is_custom(kind):
            # JSON's shapes (the loader reads sequences as tuples).
            found.append((kind, json.loads(json.dumps(document))))
    return found


EXAMPLES = sorted((REPO_ROOT / "examples").rglob("*.yaml"))
EXAMPLE_OBJECTS = [
    pytest.param(kind, document, id=f"{path.name}:{kind.kind}:{document['metadata']['name']}")
    for path in EXAMPLES
    for kind, document in _custom_objects(path.read_text(), str(path))
]


def test_the_examples_hold_custom_objects() -> None:
    kinds = {param.values[0].kind for param in EXAMPLE_OBJECTS}
    assert {"ElasticQuota", "Reservation", "Queue", "PyTorchJob", "NodeSLO"} <= kinds


@pytest.mark.parametrize(("kind", "document"), EXAMPLE_OBJECTS)
def test_every_example_object_validates(
    kind: Kind, document: dict[str, Any], generated: list[dict[str, Any]]
) -> None:
    validator = _validator(generated, kind)
    # As written, and as koordpy writes it back out.
    assert schema_errors(validator, document) == []
    written = json.loads(codec.encode_json(codec.decode_object(document)))
    assert schema_errors(validator, written) == []
    # And the schema is no sieve: a misspelt field or a bad quantity is refused.
    misspelt = {**document, "spec": {**document.get("spec", {}), "notAField": 1}}
    assert any("notAField" in e for e in schema_errors(validator, misspelt))


def test_a_bad_quantity_is_refused(generated: list[dict[str, Any]]) -> None:
    validator = _validator(generated, default_registry().resolve("elasticquotas"))
    good = {"apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota"}
    for quantity in ("4Gi", "500m", "1.5", "1e3", 8):
        assert schema_errors(validator, {**good, "spec": {"min": {"cpu": quantity}}}) == []
    for quantity in ("4 Gi", "lots", "1.2.3", True):
        assert schema_errors(validator, {**good, "spec": {"min": {"cpu": quantity}}}) != []


def _release_note_samples(shared_dir: Path) -> list[tuple[Kind, dict[str, Any]]]:
    """The custom objects among the YAML samples of Koordinator's v1.8 release notes."""
    text = (shared_dir / "seed" / "koordinator-v1.8-release-notes.zh.txt").read_text()
    blocks = [b for b in re.split(r"\n\s*\n", text) if b.startswith("apiVersion:")]
    return [found for block in blocks for found in _custom_objects(block, "release notes")]


def test_koordinators_sample_objects_validate(
    generated: list[dict[str, Any]], shared_dir: Path
) -> None:
    samples = {kind.kind: document for kind, document in _release_note_samples(shared_dir)}
    registry = default_registry()
    assert sorted(samples) == ["Queue", "Reservation"]
    queue = registry.resolve("queues")
    assert schema_errors(_validator(generated, queue), samples["Queue"]) == []
    # The Reservation is a fragment (only its pre-allocation fields): all it lacks is what
    # both schemas require, and every field it names is known.
    reservation = registry.resolve("reservations")
    ours = schema_errors(_validator(generated, reservation), samples["Reservation"])
    assert sorted(ours) == [
        "spec: 'owners' is a required property",
        "spec: 'template' is a required property",
    ]
    koord = _koordinator_crds(shared_dir)["reservations.scheduling.koordinator.sh"]
    theirs = jsonschema.Draft7Validator(_strict(copy.deepcopy(_storage_schema(koord))))
    assert sorted(schema_errors(theirs, samples["Reservation"])) == sorted(ours)


# --- the generator on types of its own ----------------------------------------------------------


class Inner(Model):
    amount: int | str | None = None
    free: dict[str, Any] = {}


class Tree(Model):
    name: str
    children: tuple[Tree, ...] = ()


class ToySpec(Model):
    size: int = msgspec.field(default=0)
    ratio: float = 0.0
    bounded: Annotated[int, msgspec.Meta(gt=0, lt=10)] = 1
    mode: Literal["On", "Off"] = "On"
    when: datetime | None = None
    every: Duration | None = None
    resources: ResourceList = ResourceList()
    labels: dict[str, str] = {}
    inner: Inner | None = None
    tree: Tree | None = None
    tags: frozenset[str] = frozenset()
    required_name: str


class Toy(Object):
    api_version: str = "toys.example.com/v1"
    kind: str = "Toy"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: ToySpec


def test_the_generator_maps_each_type() -> None:
    kind = Kind(Toy, "toys", namespaced=True, short_names=("ty",))
    [crd] = crds.custom_resource_definitions(Registry([kind]), job_kinds=True)
    schema = _storage_schema(crd)
    assert structural_errors(schema) == []
    assert crd["spec"]["names"] == {
        "kind": "Toy",
        "listKind": "ToyList",
        "plural": "toys",
        "singular": "toy",
        "shortNames": ["ty"],
    }
    assert crd["spec"]["scope"] == "Namespaced"
    assert "annotations" not in crd["metadata"]
    spec = schema["properties"]["spec"]
    fields = spec["properties"]
    assert spec["required"] == ["requiredName"]
    assert fields["size"] == {"type": "integer"}
    assert fields["ratio"] == {"type": "number"}
    assert fields["bounded"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert fields["mode"]["type"] == "string"
    assert sorted(fields["mode"]["enum"]) == ["Off", "On"]
    assert fields["when"] == {"type": "string", "format": "date-time"}
    assert fields["every"] == {"type": "string"}
    assert fields["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert fields["tags"]["x-kubernetes-list-type"] == "set"
    inner = fields["inner"]["properties"]
    assert inner["amount"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    assert inner["free"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    # A Struct inside itself stops one level down, kept as given.
    children = fields["tree"]["properties"]["children"]["items"]
    assert children == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


class Unexpressible(Model):
    either: int | bool = 0


class Odd(Object):
    api_version: str = "toys.example.com/v1"
    kind: str = "Odd"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: Unexpressible = msgspec.field(default_factory=Unexpressible)


def test_a_type_without_a_structural_schema_is_named() -> None:
    kind = Kind(Odd, "odds", namespaced=False)
    with pytest.raises(crds.SchemaError, match=r"Odd\.spec\.either"):
        crds.custom_resource_definitions(Registry([kind]), job_kinds=True)


def test_a_protected_group_carries_an_approval() -> None:
    class Spark(Object):
        api_version: str = "things.k8s.io/v1"
        kind: str = "Thing"
        metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)

    [crd] = crds.custom_resource_definitions(
        Registry([Kind(Spark, "things", namespaced=True)]), job_kinds=True
    )
    approval = crd["metadata"]["annotations"]["api-approved.kubernetes.io"]
    assert approval.startswith("unapproved")


# --- koordpy crds --------------------------------------------------------------------------------


def test_the_command_prints_yaml_documents_and_a_json_list(
    generated: list[dict[str, Any]],
) -> None:
    out = io.StringIO()
    assert crds.main(argparse.Namespace(output="yaml", job_kinds=True), out=out) == 0
    assert "&id" not in out.getvalue()  # no YAML aliases for shared nodes
    assert list(yaml.load_all(out.getvalue(), Loader=_LOADER)) == generated
    out = io.StringIO()
    assert crds.main(argparse.Namespace(output="json", job_kinds=True), out=out) == 0
    listing = json.loads(out.getvalue())
    assert listing["apiVersion"] == "v1"
    assert listing["kind"] == "List"
    assert listing["items"] == generated


def test_by_default_only_koordinators_kinds_get_crds() -> None:
    """The job kinds' CRDs are their operators': ``koordpy crds`` alone never replaces them."""
    groups = {crd["spec"]["group"] for crd in crds.custom_resource_definitions()}
    assert groups == crds.KOORDINATOR_GROUPS
    everything = {c["spec"]["group"] for c in crds.custom_resource_definitions(job_kinds=True)}
    assert {"kubeflow.org", "ray.io"} <= everything - groups


def test_the_cli_dispatches_crds(capsys: pytest.CaptureFixture[str]) -> None:
    from koordpy import cli

    assert cli.main(["crds", "-o", "json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {item["spec"]["names"]["kind"] for item in listing["items"]} >= {"Reservation"}
