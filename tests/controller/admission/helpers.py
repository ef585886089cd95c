"""Objects for the admission tests, written as manifests and decoded as the API would."""

from __future__ import annotations

from typing import Any

from apis import codec
from apis.core import Pod
from apis.meta import Object
from apis.quota import ElasticQuota


def decode(doc: dict[str, Any]) -> Object:
    return codec.decode_object(doc)


def pod(
    name: str,
    *,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Pod:
    body: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
        ],
        **spec,
    }
    obj = decode(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": body,
        }
    )
    assert isinstance(obj, Pod)
    return obj


def priority_class(name: str, value: int, **fields: Any) -> Object:
    return decode(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            **fields,
        }
    )


def quota(
    name: str,
    *,
    namespace: str = "default",
    max: dict[str, Any] | None = None,  # noqa: A002 - the field's name
    min: dict[str, Any] | None = None,  # noqa: A002 - the field's name
    parent: str | None = None,
    is_parent: bool | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> ElasticQuota:
    all_labels = dict(labels or {})
    if parent is not None:
        all_labels["quota.scheduling.koordinator.sh/parent"] = parent
    if is_parent is not None:
        all_labels["quota.scheduling.koordinator.sh/is-parent"] = "true" if is_parent else "false"
    obj = decode(
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": all_labels,
                "annotations": annotations or {},
            },
            "spec": {"max": max or {"cpu": 40, "memory": "40Gi"}, "min": min or {}},
        }
    )
    assert isinstance(obj, ElasticQuota)
    return obj
