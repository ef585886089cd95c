"""``DeviceShareArgs``: the plugin's configuration with its defaults and validation.

On the wire (the scheduler profile's ``pluginConfig``) the fields are camelCase and an unknown
field is refused; :func:`decode_args` reads one and validates it.
"""

from __future__ import annotations

from typing import Final

import msgspec

from apis.constants import (
    RESOURCE_FPGA,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_HUAWEI_NPU_CORE,
    RESOURCE_RDMA,
)
from apis.meta import Model

__all__ = [
    "DEFAULT_ARGS",
    "LEAST_ALLOCATED",
    "MOST_ALLOCATED",
    "ArgsError",
    "DeviceShareArgs",
    "GPUSharedResourceTemplatesConfig",
    "ResourceWeight",
    "ScoringStrategy",
    "UnsupportedModel",
    "decode_args",
]

LEAST_ALLOCATED: Final = "LeastAllocated"
MOST_ALLOCATED: Final = "MostAllocated"
_STRATEGIES: Final = (LEAST_ALLOCATED, MOST_ALLOCATED)
#: Weights must lie in this range (as the scheduler's own scoring strategies require).
_WEIGHT_MIN: Final = 1
_WEIGHT_MAX: Final = 100


class ArgsError(ValueError):
    """DeviceShareArgs that cannot be used; the message names the field and the value."""


class _Args(Model):
    """Wire Struct: camelCase, frozen, unknown fields refused."""


class ResourceWeight(_Args):
    name: str
    weight: int = 1


_DEFAULT_WEIGHTS: Final = tuple(
    ResourceWeight(name=name, weight=1)
    for name in (RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_MEMORY, RESOURCE_RDMA, RESOURCE_FPGA)
)


class ScoringStrategy(_Args):
    #: ``LeastAllocated`` (spread across cards) or ``MostAllocated`` (bin-pack).
    type: str = LEAST_ALLOCATED
    resources: tuple[ResourceWeight, ...] = _DEFAULT_WEIGHTS

    @property
    def weights(self) -> dict[str, int]:
        return {item.name: item.weight for item in self.resources}


class GPUSharedResourceTemplatesConfig(_Args):
    config_map_namespace: str = "koordinator-system"
    config_map_name: str = "gpu-shared-resource-templates"
    #: A shared per-GPU request naming any of these must equal a template exactly.
    matched_resources: tuple[str, ...] = (RESOURCE_HUAWEI_NPU_CORE,)


class UnsupportedModel(_Args):
    vendor: str
    model: str


class DeviceShareArgs(_Args):
    scoring_strategy: ScoringStrategy = ScoringStrategy()
    gpu_shared_resource_templates_config: GPUSharedResourceTemplatesConfig = (
        GPUSharedResourceTemplatesConfig()
    )
    disable_device_numa_topology_alignment: bool = msgspec.field(
        default=False, name="disableDeviceNUMATopologyAlignment"
    )
    #: Deprecated and ignored; accepted so that older profiles still load.
    allocator: str = ""
    #: Shared GPU pods are refused on nodes of these vendor/model pairs.
    gpu_share_unsupported_models: tuple[UnsupportedModel, ...] = ()

    def validate(self) -> DeviceShareArgs:
        """Self, or :class:`ArgsError` naming the first bad field and its value."""
        strategy = self.scoring_strategy
        if strategy.type not in _STRATEGIES:
            raise ArgsError(
                f"scoringStrategy.type: unsupported value {strategy.type!r}"
                f" (supported: {', '.join(_STRATEGIES)})"
            )
        seen: set[str] = set()
        for index, item in enumerate(strategy.resources):
            where = f"scoringStrategy.resources[{index}]"
            if not item.name:
                raise ArgsError(f"{where}.name: must not be empty")
            if item.name in seen:
                raise ArgsError(f"{where}.name: duplicate resource {item.name!r}")
            seen.add(item.name)
            if not _WEIGHT_MIN <= item.weight <= _WEIGHT_MAX:
                raise ArgsError(
                    f"{where}.weight: {item.weight} is not in [{_WEIGHT_MIN}, {_WEIGHT_MAX}]"
                )
        templates = self.gpu_shared_resource_templates_config
        if not templates.config_map_name:
            raise ArgsError("gpuSharedResourceTemplatesConfig.configMapName: must not be empty")
        if not templates.config_map_namespace:
            raise ArgsError(
                "gpuSharedResourceTemplatesConfig.configMapNamespace: must not be empty"
            )
        for index, model in enumerate(self.gpu_share_unsupported_models):
            if not model.vendor or not model.model:
                raise ArgsError(
                    f"gpuShareUnsupportedModels[{index}]: vendor and model must both be set"
                    f" (got vendor={model.vendor!r}, model={model.model!r})"
                )
        return self

    def share_unsupported(self, vendor: str, model: str) -> bool:
        return any(
            m.vendor == vendor and m.model == model for m in self.gpu_share_unsupported_models
        )


DEFAULT_ARGS: Final = DeviceShareArgs()


def decode_args(raw: bytes | str) -> DeviceShareArgs:
    """DeviceShareArgs from JSON (missing fields take their defaults), validated."""
    try:
        args = msgspec.json.decode(raw, type=DeviceShareArgs)
    except msgspec.ValidationError as err:
        raise ArgsError(f"DeviceShareArgs: {err}") from None
    except msgspec.DecodeError as err:
        raise ArgsError(f"DeviceShareArgs: not valid JSON: {err}") from None
    return args.validate()
