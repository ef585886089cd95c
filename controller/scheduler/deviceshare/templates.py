"""GPU shared-resource templates (Ascend vNPU): a share of a card must be one of the shapes
the vendor can cut.

The templates come from a ConfigMap (``koordinator-system/gpu-shared-resource-templates`` by
default) whose ``data.yaml`` maps ``"<vendor>-<model>"`` to named templates::

    huawei-Ascend-910B3:
      vir10_3c_32g: {huawei.com/npu-core: "10", huawei.com/npu-cpu: "3",
                     koordinator.sh/gpu-memory: 32Gi}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import yaml

from apis.quantity import QuantityError
from apis.resources import ResourceList

__all__ = [
    "DATA_KEY",
    "NO_TEMPLATES",
    "SharedTemplates",
    "TemplateError",
    "parse_templates",
]

#: ConfigMap key holding the templates.
DATA_KEY: Final = "data.yaml"


class TemplateError(ValueError):
    """A templates document that cannot be read."""


@dataclass(frozen=True, slots=True)
class SharedTemplates:
    """Templates per ``"<vendor>-<model>"``, each template name -> its resources."""

    by_model: Mapping[str, Mapping[str, ResourceList]] = field(default_factory=dict)

    def for_model(self, vendor: str, model: str) -> Mapping[str, ResourceList]:
        return self.by_model.get(f"{vendor}-{model}", {})

    def any_equal(self, request: Mapping[str, int]) -> bool:
        """Whether some template of any model is exactly ``request``."""
        return any(
            template == request
            for templates in self.by_model.values()
            for template in templates.values()
        )

    def matching(self, vendor: str, model: str, request: Mapping[str, int]) -> tuple[str, ...]:
        """Names of the templates of ``vendor``/``model`` that are exactly ``request``."""
        return tuple(
            sorted(
                name
                for name, template in self.for_model(vendor, model).items()
                if template == request
            )
        )


NO_TEMPLATES: Final = SharedTemplates()


def needs_template(request: Mapping[str, int], matched_resources: Iterable[str]) -> bool:
    """A per-GPU share naming any of ``matched_resources`` must be cut by a template."""
    return any(request.get(name, 0) > 0 for name in matched_resources)


def parse_templates(data: Mapping[str, str]) -> SharedTemplates:
    """The templates of a ConfigMap's ``data``; none when it has no ``data.yaml``."""
    text = data.get(DATA_KEY)
    if not text:
        return NO_TEMPLATES
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise TemplateError(f"{DATA_KEY}: not valid YAML: {err}") from None
    if raw is None:
        return NO_TEMPLATES
    if not isinstance(raw, dict):
        raise TemplateError(f"{DATA_KEY}: expected a map of <vendor>-<model> to templates")
    by_model: dict[str, dict[str, ResourceList]] = {}
    for model, templates in raw.items():
        if not isinstance(templates, dict):
            raise TemplateError(
                f"{DATA_KEY}: {model}: expected a map of template name to resources"
            )
        parsed: dict[str, ResourceList] = {}
        for name, resources in templates.items():
            if not isinstance(resources, dict):
                raise TemplateError(f"{DATA_KEY}: {model}/{name}: expected a map of resources")
            try:
                parsed[str(name)] = ResourceList.parse(
                    {str(key): str(value) for key, value in resources.items()}
                ).nonzero()
            except QuantityError as err:
                raise TemplateError(f"{DATA_KEY}: {model}/{name}: {err}") from None
        by_model[str(model)] = parsed
    return SharedTemplates(by_model)
