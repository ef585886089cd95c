"""DeviceShareArgs: the spec's defaults, the wire form, and refusals naming the field."""

from __future__ import annotations

import pytest

from controller.scheduler.deviceshare.args import (
    DEFAULT_ARGS,
    ArgsError,
    decode_args,
)


def test_defaults() -> None:
    args = DEFAULT_ARGS.validate()
    assert args.scoring_strategy.type == "LeastAllocated"
    assert args.scoring_strategy.weights == {
        "koordinator.sh/gpu-memory-ratio": 1,
        "koordinator.sh/gpu-memory": 1,
        "koordinator.sh/rdma": 1,
        "koordinator.sh/fpga": 1,
    }
    templates = args.gpu_shared_resource_templates_config
    assert (templates.config_map_namespace, templates.config_map_name) == (
        "koordinator-system",
        "gpu-shared-resource-templates",
    )
    assert templates.matched_resources == ("huawei.com/npu-core",)
    assert args.disable_device_numa_topology_alignment is False
    assert args.gpu_share_unsupported_models == ()
    assert decode_args("{}") == DEFAULT_ARGS


def test_wire_form_is_camel_case() -> None:
    args = decode_args(
        """{
          "scoringStrategy": {"type": "MostAllocated",
                              "resources": [{"name": "koordinator.sh/gpu-memory", "weight": 3}]},
          "disableDeviceNUMATopologyAlignment": true,
          "allocator": "autopilot",
          "gpuShareUnsupportedModels": [{"vendor": "huawei", "model": "Ascend-310P3"}],
          "gpuSharedResourceTemplatesConfig": {"configMapName": "mine"}
        }"""
    )
    assert args.scoring_strategy.weights == {"koordinator.sh/gpu-memory": 3}
    assert args.disable_device_numa_topology_alignment is True
    assert args.share_unsupported("huawei", "Ascend-310P3")
    assert not args.share_unsupported("huawei", "Ascend-910B3")
    assert args.gpu_shared_resource_templates_config.config_map_namespace == "koordinator-system"
    assert args.gpu_shared_resource_templates_config.config_map_name == "mine"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            '{"scoringStrategy": {"type": "Balanced"}}',
            "scoringStrategy.type: unsupported value 'Balanced'",
        ),
        (
            '{"scoringStrategy": {"resources": [{"name": "x", "weight": 0}]}}',
            "scoringStrategy.resources[0].weight: 0 is not in [1, 100]",
        ),
        (
            '{"scoringStrategy": {"resources": [{"name": "x"}, {"name": "x"}]}}',
            "scoringStrategy.resources[1].name: duplicate resource 'x'",
        ),
        ('{"scoringStrategy": {"resources": [{"name": ""}]}}', "scoringStrategy.resources[0].name"),
        ('{"gpuSharedResourceTemplatesConfig": {"configMapName": ""}}', "configMapName"),
        (
            '{"gpuShareUnsupportedModels": [{"vendor": "", "model": "x"}]}',
            "gpuShareUnsupportedModels[0]",
        ),
        ('{"scoringStrategy": {"typo": 1}}', "typo"),
        ('{"numaAlignment": true}', "numaAlignment"),
        ("{", "not valid JSON"),
    ],
)
def test_bad_args_name_the_field(raw: str, message: str) -> None:
    with pytest.raises(ArgsError) as caught:
        decode_args(raw)
    assert message in str(caught.value)
