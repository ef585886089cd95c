"""GPU shared-resource templates: the ConfigMap's data.yaml and exact matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from apis import constants as k
from apis.codec import decode_documents
from apis.core import ConfigMap
from apis.resources import ResourceList
from controller.scheduler.deviceshare.templates import TemplateError, parse_templates
from tests.controller.deviceshare.builders import GIB

DATA = {
    "data.yaml": """
huawei-Ascend-910B3:
  vir10_3c_32g:
    huawei.com/npu-core: "10"
    huawei.com/npu-cpu: "3"
    koordinator.sh/gpu-memory: 32Gi
  vir05_1c_16g: {huawei.com/npu-core: 5, huawei.com/npu-cpu: 1, koordinator.sh/gpu-memory: 16Gi}
huawei-Ascend-310P3:
  vir04: {huawei.com/npu-core: 4, huawei.com/npu-cpu: 1, koordinator.sh/gpu-memory: 12Gi}
"""
}
TEN = ResourceList(
    {k.RESOURCE_HUAWEI_NPU_CORE: 10, k.RESOURCE_HUAWEI_NPU_CPU: 3, k.RESOURCE_GPU_MEMORY: 32 * GIB}
)


def test_templates_are_read_per_vendor_model() -> None:
    templates = parse_templates(DATA)
    assert set(templates.for_model("huawei", "Ascend-910B3")) == {"vir10_3c_32g", "vir05_1c_16g"}
    assert templates.for_model("huawei", "Ascend-910B3")["vir10_3c_32g"] == TEN
    assert templates.for_model("huawei", "Ascend-910B4") == {}


@pytest.mark.parametrize(
    ("vendor", "model", "request_", "expected"),
    [
        ("huawei", "Ascend-910B3", TEN, ("vir10_3c_32g",)),
        ("huawei", "Ascend-310P3", TEN, ()),
        ("huawei", "Ascend-910B3", TEN + {k.RESOURCE_HUAWEI_NPU_DVPP: 10}, ()),
        ("huawei", "Ascend-910B3", ResourceList({k.RESOURCE_HUAWEI_NPU_CORE: 10}), ()),
    ],
)
def test_a_request_matches_a_template_exactly(
    vendor: str, model: str, request_: ResourceList, expected: tuple[str, ...]
) -> None:
    assert parse_templates(DATA).matching(vendor, model, request_) == expected


def test_any_equal_looks_across_models() -> None:
    templates = parse_templates(DATA)
    assert templates.any_equal(TEN)
    assert not templates.any_equal(TEN + {k.RESOURCE_HUAWEI_NPU_CPU: 1})


@pytest.mark.parametrize("data", [{}, {"data.yaml": ""}, {"data.yaml": "# nothing\n"}])
def test_no_templates(data: dict[str, str]) -> None:
    assert parse_templates(data).by_model == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [", "not valid YAML"),
        ("- a\n", "expected a map"),
        ("m: [1]\n", "m: expected a map of template name"),
        ("m: {t: 3}\n", "m/t: expected a map of resources"),
        ("m: {t: {huawei.com/npu-core: lots}}\n", "m/t:"),
    ],
)
def test_bad_documents_name_the_place(text: str, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        parse_templates({"data.yaml": text})
    assert message in str(caught.value)


def test_the_example_configmap_holds_the_ascend_vnpu_templates(repo_root: Path) -> None:
    path = repo_root / "examples" / "ascend-vnpu.yaml"
    [config_map] = [
        o for o in decode_documents(path.read_text(), source=str(path)) if isinstance(o, ConfigMap)
    ]
    assert (config_map.namespace, config_map.name) == (
        "koordinator-system",
        "gpu-shared-resource-templates",
    )
    templates = parse_templates(config_map.data)
    shapes = ("vir01", "vir02", "vir02_1c", "vir04", "vir04_3c")
    for model in ("Ascend-310P3", k.MODEL_ASCEND_310P3_300I_DUO):
        assert tuple(templates.for_model(k.GPU_VENDOR_HUAWEI, model)) == shapes
    assert templates.for_model(k.GPU_VENDOR_HUAWEI, "Ascend-910B3") == {
        "vir05_1c_16g": ResourceList(
            {
                k.RESOURCE_HUAWEI_NPU_CORE: 5,
                k.RESOURCE_HUAWEI_NPU_CPU: 1,
                k.RESOURCE_GPU_MEMORY: 16 * GIB,
            }
        ),
        "vir10_3c_32g": TEN,
    }
    vir04_3c = {
        k.RESOURCE_HUAWEI_NPU_CORE: 4,
        k.RESOURCE_HUAWEI_NPU_CPU: 3,
        k.RESOURCE_GPU_MEMORY: 12 * GIB,
    }
    assert templates.matching(k.GPU_VENDOR_HUAWEI, "Ascend-310P3", vir04_3c) == ("vir04_3c",)
