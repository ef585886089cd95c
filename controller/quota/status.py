"""What a quota object shows of its accounting (controller-spec §4.1): ``status.used`` and the
annotations ``quota.scheduling.koordinator.sh/runtime``, ``/request``, ``/child-request`` and
``/non-preemptible-used``, each a JSON ResourceList in wire quantities with its keys sorted
(``{"cpu":"2","memory":"4Gi"}``).

``child-request`` (:func:`child_request`) is what the quota's own pods and its children ask:
for a leaf the sum of its pods' requests, for a parent the sum of its children's limited
requests (each capped at the child's max, raised to its min where it does not lend), over the
names of the quota's ``max``; Koordinator's ``ChildRequest``, which the page
``capacity-scheduling`` shows on a leaf.

:func:`quota_status` is pure: it answers the quota as it should be written, or None when what
it shows already says the same. Zero amounts are ignored in that comparison (``{"cpu":"0"}``
and ``{}`` say the same), so a write happens only when some amount really moved.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Final

import msgspec

from apis import bounded
from apis import constants as k
from apis.quantity import QuantityError
from apis.quota import ElasticQuota
from apis.resources import ResourceList

__all__ = [
    "STATUS_ANNOTATIONS",
    "child_request",
    "encode_resources",
    "quota_status",
    "read_resources",
]

#: The annotations :func:`quota_status` writes.
STATUS_ANNOTATIONS: Final = (
    k.ANNOTATION_QUOTA_RUNTIME,
    k.ANNOTATION_QUOTA_REQUEST,
    k.ANNOTATION_QUOTA_CHILD_REQUEST,
    k.ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED,
)


def encode_resources(amounts: Mapping[str, int]) -> str:
    """``amounts`` as a compact JSON object of wire quantities, keys sorted."""
    return json.dumps(ResourceList(amounts).to_wire(), sort_keys=True, separators=(",", ":"))


def read_resources(text: str) -> ResourceList | None:
    """The ResourceList an annotation holds; None when it holds none (absent or not valid)."""
    if not text:
        return None
    try:
        raw = bounded.decode_any(text, "")
        return ResourceList.parse(raw) if isinstance(raw, dict) else None
    except (ValueError, QuantityError):
        return None


def child_request(
    quota: ElasticQuota,
    *,
    own: Mapping[str, int] | None,
    children: Mapping[str, int] | None,
    ignore: Collection[str] = (),
) -> ResourceList:
    """The ``child-request`` of ``quota``: its own pods' requests plus what its children ask,
    over the names of its ``max`` (less ``ignore``), zero amounts left out."""
    own = own or {}
    children = children or {}
    amounts = {
        name: own.get(name, 0) + children.get(name, 0)
        for name in quota.spec.max
        if name not in ignore
    }
    return ResourceList(amounts).nonzero()


def _same(shown: ResourceList | None, amounts: ResourceList) -> bool:
    return shown is not None and shown.nonzero() == amounts.nonzero()


def quota_status(
    quota: ElasticQuota,
    *,
    used: ResourceList,
    runtime: ResourceList,
    request: ResourceList,
    child_request: ResourceList | None = None,
    non_preemptible_used: ResourceList | None = None,
) -> ElasticQuota | None:
    """``quota`` with ``status.used`` and the status annotations set to these figures, or
    None when nothing changed. An annotation whose figure is None is left as it is."""
    annotations = dict(quota.metadata.annotations)
    changed = False
    for key, amounts in (
        (k.ANNOTATION_QUOTA_RUNTIME, runtime),
        (k.ANNOTATION_QUOTA_REQUEST, request),
        (k.ANNOTATION_QUOTA_CHILD_REQUEST, child_request),
        (k.ANNOTATION_QUOTA_NON_PREEMPTIBLE_USED, non_preemptible_used),
    ):
        if amounts is None or _same(read_resources(annotations.get(key, "")), amounts):
            continue
        annotations[key] = encode_resources(amounts)
        changed = True
    used_changed = quota.status.used.nonzero() != used.nonzero()
    if not changed and not used_changed:
        return None
    return msgspec.structs.replace(
        quota,
        metadata=msgspec.structs.replace(quota.metadata, annotations=annotations),
        status=msgspec.structs.replace(quota.status, used=used) if used_changed else quota.status,
    )
