"""Small builders of pods and quotas for the quota and preemption tests."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from apis import constants as k
from apis.core import Container, Pod, PodSpec, PodStatus, ResourceRequirements
from apis.meta import ObjectMeta
from apis.quota import ElasticQuota, ElasticQuotaSpec
from apis.resources import ResourceList

GI = 1 << 30
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def res(cpu: int = 0, memory: int = 0, **extra: int) -> ResourceList:
    """``cpu`` in millicores and ``memory`` in GiB; zero amounts are left out."""
    amounts = {"cpu": cpu, "memory": memory * GI, **extra}
    return ResourceList({name: amount for name, amount in amounts.items() if amount})


def pod(
    name: str,
    *,
    cpu: int = 0,
    memory: int = 0,
    extra: Mapping[str, int] | None = None,
    namespace: str = "team",
    node: str = "",
    priority: int | None = None,
    quota: str = "",
    non_preemptible: bool = False,
    started: int | None = None,
    phase: str = "",
    terminating: bool = False,
    nominated: str = "",
    preemption_policy: str = "",
    overhead: ResourceList | None = None,
) -> Pod:
    """A one-container pod requesting ``cpu`` millicores and ``memory`` GiB.

    ``started`` is the start time in minutes after ``T0`` (None: not started).
    """
    labels: dict[str, str] = {}
    if quota:
        labels[k.LABEL_QUOTA_NAME] = quota
    if non_preemptible:
        labels[k.LABEL_QUOTA_PREEMPTIBLE] = "false"
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            uid=f"uid-{namespace}-{name}",
            labels=labels,
            deletion_timestamp=T0 if terminating else None,
        ),
        spec=PodSpec(
            node_name=node,
            priority=priority,
            preemption_policy=preemption_policy,
            overhead=overhead or ResourceList(),
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(requests=res(cpu, memory, **(extra or {}))),
                ),
            ),
        ),
        status=PodStatus(
            phase=phase,
            nominated_node_name=nominated,
            start_time=None if started is None else T0 + timedelta(minutes=started),
        ),
    )


def quota(
    name: str,
    *,
    namespace: str = "team",
    min: ResourceList | None = None,  # noqa: A002 - the spec's field name
    max: ResourceList | None = None,  # noqa: A002 - the spec's field name
    parent: str = "",
    is_parent: bool = False,
    namespaces: Sequence[str] = (),
) -> ElasticQuota:
    labels: dict[str, str] = {}
    if parent:
        labels[k.LABEL_QUOTA_PARENT] = parent
    if is_parent:
        labels[k.LABEL_QUOTA_IS_PARENT] = "true"
    annotations = (
        {k.ANNOTATION_QUOTA_NAMESPACES: json.dumps(list(namespaces))} if namespaces else {}
    )
    return ElasticQuota(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels, annotations=annotations),
        spec=ElasticQuotaSpec(min=min or ResourceList(), max=max or ResourceList()),
    )
