"""Manifests read as Kubernetes reads them (sigs.k8s.io/yaml: go-yaml v2 scalars, then JSON)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apis.codec import decode_as, decode_documents, load_yaml_documents
from apis.core import ConfigMap, Pod
from apis.errors import DecodeError
from apis.meta import ObjectMeta
from apis.scheduling import Device
from apis.slo import NodeSLOSpec
from controller.errors import Invalid
from controller.store.sqlite import Store

DATA = Path(__file__).parent.parent / "data" / "vendor-cli"
#: The bus IDs mx-smi prints for an 8 x MetaX C500 node (``dddd:bb:dd.f``).
METAX_BUS_IDS = re.findall(
    r"\b[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]\b",
    (DATA / "metax" / "c500-mx-smi-2.2.9-8gpu.txt").read_text("utf-8"),
)


def one(text: str) -> object:
    [obj] = decode_documents(text)
    return obj


def pod(metadata: str = "{name: p}", spec: str = "") -> str:
    return (
        "apiVersion: v1\nkind: Pod\n"
        f"metadata: {metadata}\n"
        f"spec: {{containers: [{{name: c, image: busybox}}]{', ' + spec if spec else ''}}}\n"
    )


def config_map(data: str) -> ConfigMap:
    obj = one(f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm}}\ndata: {data}\n")
    assert isinstance(obj, ConfigMap)
    return obj


# --- strings that YAML 1.1 would read as numbers -----------------------------------------------


def test_unquoted_pci_bus_ids_from_mx_smi_stay_strings() -> None:
    """A Device listing the bus IDs mx-smi reports, written without quotes, keeps them as text
    (YAML 1.1 reads ``0000:38:00.0`` as a base-60 float)."""
    assert len(METAX_BUS_IDS) == 8
    assert "0000:38:00.0" in METAX_BUS_IDS
    devices = "\n".join(
        f"  - {{type: gpu, health: true, minor: {minor}, topology:"
        f" {{socketID: 0, nodeID: 0, pcieID: pci0000:30, busID: {bus}}}}}"
        for minor, bus in enumerate(METAX_BUS_IDS)
    )
    text = (
        "apiVersion: scheduling.koordinator.sh/v1alpha1\nkind: Device\nmetadata: {name: n1}\n"
        f"spec:\n  devices:\n{devices}\n"
    )
    device = one(text)
    assert isinstance(device, Device)
    bus_ids = [d.topology.bus_id for d in device.spec.devices if d.topology is not None]
    assert bus_ids == METAX_BUS_IDS


@pytest.mark.parametrize("text", ["38:00", "1:30", "0000:38:00.0", "190:20:30.5", "12:30:45"])
def test_sexagesimal_looking_scalars_are_strings(text: str) -> None:
    assert config_map(f"{{bus: {text}}}").data == {"bus": text}


@pytest.mark.parametrize("text", ["2024-01-02", "2001-12-14t21:59:43.10-05:00", "2024-01-02 10:00"])
def test_timestamps_stay_text(text: str) -> None:
    assert config_map(f"{{when: {text}}}").data == {"when": text}


# --- booleans as go-yaml v2 has them -----------------------------------------------------------

V2_BOOLEANS = [
    *["y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"],
    *["n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"],
]


@pytest.mark.parametrize("word", V2_BOOLEANS)
def test_an_unquoted_boolean_label_value_is_refused_naming_the_label(word: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_documents(pod(metadata=f"{{name: p, labels: {{app: web, gpu: {word}}}}}"))
    assert caught.value.field == "metadata.labels.gpu"
    assert caught.value.value in ("true", "false")
    assert "metadata.labels.gpu" in str(caught.value)


def test_a_label_key_with_a_prefix_is_named_whole() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_documents(pod(metadata="{name: p, labels: {koordinator.sh/qosClass: on}}"))
    assert caught.value.field == "metadata.labels[koordinator.sh/qosClass]"


@pytest.mark.parametrize("word", ["yes", "y", "off", "N"])
def test_a_quoted_boolean_word_is_a_label_value(word: str) -> None:
    obj = one(pod(metadata=f'{{name: p, labels: {{gpu: "{word}"}}}}'))
    assert isinstance(obj, Pod)
    assert obj.metadata.labels == {"gpu": word}


@pytest.mark.parametrize(
    "word", ["yEs", "oN", "Y2", "nope", "yes_", "t", "f", "tRUE", "enable", "nil", "None"]
)
def test_words_that_are_not_v2_booleans_are_strings(word: str) -> None:
    assert config_map(f"{{flag: {word}}}").data == {"flag": word}


def test_a_boolean_name_is_refused() -> None:
    """``name: n`` is ``name: false`` to Kubernetes."""
    with pytest.raises(DecodeError) as caught:
        decode_documents(pod(metadata="{name: n}"))
    assert caught.value.field == "metadata.name"


def test_keys_become_strings_as_in_json() -> None:
    assert config_map("{on: a, 1: b, 0x10: c, off: d, 1.5: e}").data == {
        "true": "a",
        "1": "b",
        "16": "c",
        "false": "d",
        "1.5": "e",
    }


# --- numbers -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("30", 30),
        ("+30", 30),
        ("0x1E", 30),
        ("0o36", 30),
        ("036", 30),
        ("0b11110", 30),
        ("3_0", 30),
        ("30.0", 30),
        ("3e1", 30),
        ("-0x1E", -30),
    ],
)
def test_integer_spellings(text: str, value: int) -> None:
    obj = one(pod(spec=f"terminationGracePeriodSeconds: {text}"))
    assert isinstance(obj, Pod)
    assert obj.spec.termination_grace_period_seconds == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("09", 9.0), (".5", 0.5), ("-.5", -0.5), ("1e3", 1000.0), ("2.", 2.0)],
)
def test_float_spellings(text: str, value: float) -> None:
    [doc] = load_yaml_documents(f"v: {text}\n")
    assert doc == {"v": value}


@pytest.mark.parametrize(
    "text", ["1:30", "0x", "0o8", "1e", ".", "._5", ".5_0", "1e999", "+", "\u0663", "0x1p3"]
)
def test_what_go_yaml_cannot_read_as_a_number_is_text(text: str) -> None:
    [doc] = load_yaml_documents(f"v: {text}\n")
    assert doc == {"v": text}


def test_a_number_for_a_string_field_is_refused_naming_it() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_documents(pod(metadata="{name: p, annotations: {version: 1.10}}"))
    assert caught.value.field == "metadata.annotations.version"
    assert caught.value.value == "1.1"


def test_unquoted_quantities_read_as_numbers_are_still_quantities() -> None:
    obj = one(
        pod().replace(
            "image: busybox}",
            "image: busybox, resources: {requests: {cpu: 0.5, memory: 1e9}, limits: {cpu: 2.0}}}",
        )
    )
    assert isinstance(obj, Pod)
    resources = obj.spec.containers[0].resources
    assert resources.requests == {"cpu": 500, "memory": 10**9}
    assert resources.limits == {"cpu": 2000}


@pytest.mark.parametrize("text", [".nan", ".inf", "-.Inf"])
def test_a_number_json_cannot_carry_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_documents(pod(spec=f"terminationGracePeriodSeconds: {text}"))
    assert caught.value.field == "spec.terminationGracePeriodSeconds"
    assert caught.value.index == 0


# --- explicit nulls ----------------------------------------------------------------------------


def test_null_fields_are_unset() -> None:
    text = pod(
        metadata="{name: p, namespace: null, labels: null, annotations: null, finalizers: null}",
        spec="nodeName: null, tolerations: null, nodeSelector: null, priority: null, affinity: ~",
    ).replace("image: busybox}", "image: busybox, resources: {limits: null, requests: null}}")
    obj = one(text)
    assert isinstance(obj, Pod)
    assert obj == one(pod())


def test_a_null_in_a_string_map_is_the_empty_string() -> None:
    obj = one(pod(metadata="{name: p, labels: {gpu: null, app: web}}"))
    assert isinstance(obj, Pod)
    assert obj.metadata.labels == {"gpu": "", "app": "web"}
    assert config_map("{a: null, b: ''}").data == {"a": "", "b": ""}


def test_nulls_are_unset_in_every_typed_decode_and_kept_in_loose_data() -> None:
    """Component configs and embedded specs decode like manifests (NodeSLO spec from a
    ConfigMap, plugin args): ``null`` is unset there too; the NodeSLO's ``extensions`` (the
    CRD preserves unknown fields there) keeps it as data."""
    raw = {"cpuBurstStrategy": None, "hostApplications": None, "extensions": {"x": None}}
    assert decode_as(raw, NodeSLOSpec) == NodeSLOSpec(extensions={"x": None})


def test_a_null_required_field_is_reported_missing() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_documents(pod(spec="").replace("name: c", "name: null"))
    assert caught.value.field == "spec.containers[0].name"


# --- refused on create -------------------------------------------------------------------------


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store() as opened:
        yield opened


async def test_a_resource_version_on_a_new_object_is_refused_and_nothing_is_stored(
    store: Store,
) -> None:
    [obj] = decode_documents(pod(metadata="{name: p, namespace: default, resourceVersion: '7'}"))
    assert isinstance(obj, Pod)
    assert obj.metadata == ObjectMeta(name="p", namespace="default", resource_version="7")
    with pytest.raises(Invalid) as caught:
        store.apply(obj)
    assert 'metadata.resourceVersion: Invalid value: "7"' in str(caught.value)
    items, _ = store.list(store.registry.for_type(Pod))
    assert items == []
