"""Small builders for the decision-function tests: workloads and their pods as the store holds
them (uids, generations, creation times)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from apis.codec import decode_object
from apis.core import Pod
from apis.meta import Condition, Object, OwnerReference

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "web"}},
    "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]},
}


def workload(kind: str, name: str = "web", *, uid: str = "", **spec: Any) -> Object:
    """An apps/v1 object of ``kind`` selecting ``app=web`` with a one-container template."""
    raw = {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid or f"uid-{name}",
            "generation": 1,
            "creationTimestamp": (NOW - timedelta(hours=1)).isoformat(),
        },
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": _TEMPLATE, **spec},
    }
    return decode_object(raw)


def pod(
    name: str,
    owner: Object | None = None,
    *,
    node: str = "",
    phase: str = "Pending",
    ready: bool = False,
    ready_for: timedelta = timedelta(minutes=5),
    created: timedelta = timedelta(minutes=10),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Pod:
    """A pod ``created`` ago, owned by ``owner``, Ready ``ready_for`` when ``ready``."""
    refs: tuple[OwnerReference, ...] = ()
    if owner is not None:
        refs = (
            OwnerReference(
                api_version=owner.api_version,
                kind=owner.kind,
                name=owner.metadata.name,
                uid=owner.metadata.uid,
                controller=True,
                block_owner_deletion=True,
            ),
        )
    base = Pod()
    conditions = (
        (Condition(type="Ready", status="True", last_transition_time=NOW - ready_for),)
        if ready
        else ()
    )
    return msgspec.structs.replace(
        base,
        metadata=msgspec.structs.replace(
            base.metadata,
            name=name,
            namespace="default",
            uid=f"uid-{name}",
            creation_timestamp=NOW - created,
            labels={"app": "web", **(labels or {})},
            annotations=annotations or {},
            owner_references=refs,
        ),
        spec=msgspec.structs.replace(base.spec, node_name=node),
        status=msgspec.structs.replace(base.status, phase=phase, conditions=conditions),
    )


def running(name: str, owner: Object | None = None, **kwargs: Any) -> Pod:
    kwargs.setdefault("node", "node-0")
    return pod(name, owner, phase="Running", ready=True, **kwargs)
