"""Koordinator's CRD schemas as strict JSON-Schema validators, for tests of what we emit.

The schemas are made strict: an object schema that lists ``properties`` without
``additionalProperties`` or ``x-kubernetes-preserve-unknown-fields`` refuses other keys (the API
server would prune them, so a misspelt field we emit would silently vanish).
"""

from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = {
    "scheduling.koordinator.sh/Device": "scheduling.koordinator.sh_devices.yaml",
    "scheduling.koordinator.sh/Reservation": "scheduling.koordinator.sh_reservations.yaml",
    "scheduling.koordinator.sh/PodMigrationJob": "scheduling.koordinator.sh_podmigrationjobs.yaml",
    "slo.koordinator.sh/NodeMetric": "slo.koordinator.sh_nodemetrics.yaml",
    "slo.koordinator.sh/NodeSLO": "slo.koordinator.sh_nodeslos.yaml",
    "scheduling.sigs.k8s.io/ElasticQuota": "scheduling.sigs.k8s.io_elasticquotas.yaml",
    "scheduling.sigs.k8s.io/PodGroup": "scheduling.sigs.k8s.io_podgroups.yaml",
}
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _strict(schema: Any) -> Any:
    """Kubernetes structural schema -> plain JSON Schema, strict about unknown properties."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items() if key != "description"}
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("format") in _INT_RANGES and out.get("type") == "integer":
        low, high = _INT_RANGES[out["format"]]
        out.setdefault("minimum", low)
        out.setdefault("maximum", high)
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if "T" not in value or not (value.endswith("Z") or value[-6] in "+-"):
        raise ValueError(f"not RFC 3339: {value!r}")
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


def crd(shared_dir: Path, key: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load((shared_dir / "koordinator-crds" / CRDS[key]).read_text())
    return crd


def validator(shared_dir: Path, key: str) -> jsonschema.Draft7Validator:
    [version] = [v for v in crd(shared_dir, key)["spec"]["versions"] if v.get("storage")]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema, format_checker=_FORMATS)


def schema_errors(validator: jsonschema.Draft7Validator, document: Any) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(document)
    ]
