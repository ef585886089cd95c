"""``ReservationArgs``: the Reservation plugin's and controller's settings (controller-spec §1.9).

Decoded from the scheduler configuration's ``pluginConfig`` (camelCase, unknown fields
refused); a bad value raises an error naming the field and the value. ``gcDurationSeconds: 0``
and empty pre-allocation keys mean their defaults (see the ``effective_*`` properties).
"""

from __future__ import annotations

from typing import Final

import msgspec

from apis import constants as k
from apis import validation

__all__ = [
    "DEFAULT_GC_DURATION_SECONDS",
    "PreAllocationConfig",
    "ReservationArgs",
    "ReservationArgsError",
    "ReservationSelectorIndex",
    "decode_args",
]

DEFAULT_GC_DURATION_SECONDS: Final = 86400


class ReservationArgsError(ValueError):
    """A ReservationArgs field with a value it may not have."""


class PreAllocationConfig(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    #: Allow ``preAllocationPolicy.mode: Cluster``.
    enable_cluster_mode: bool = False
    #: Pod label marking Cluster-mode candidates (value ``"true"``); empty: the default.
    cluster_label_key: str = k.LABEL_IS_PRE_ALLOCATABLE
    #: Pod annotation ordering Cluster-mode candidates (int, higher first); empty: the default.
    cluster_priority_annotation_key: str = k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY
    #: Place without consuming a pod when the node's free resources suffice.
    prefer_no_pre_allocated_pods: bool = False

    @property
    def effective_label_key(self) -> str:
        return self.cluster_label_key or k.LABEL_IS_PRE_ALLOCATABLE

    @property
    def effective_priority_key(self) -> str:
        return self.cluster_priority_annotation_key or k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY


class ReservationSelectorIndex(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    enabled: bool = False
    #: Label-key prefixes indexed by key only.
    key_prefixes: tuple[str, ...] = ()
    #: Label keys indexed by (key, value).
    keys: tuple[str, ...] = ()


def _is_extended_resource(name: str) -> bool:
    """Kubernetes' extended resource names: prefixed, outside ``kubernetes.io``."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not validation.qualified_name(f"requests.{name}")


def _fail(field: str, value: object, rule: str) -> ReservationArgsError:
    return ReservationArgsError(f"ReservationArgs.{field}: {value!r} {rule}")


class ReservationArgs(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    enable_preemption: bool = False
    #: Share of nodes the preemption dry run looks at, [0, 100].
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100
    controller_workers: int = 1
    #: Age of a terminal reservation before garbage collection; 0: the default (one day).
    gc_duration_seconds: int = DEFAULT_GC_DURATION_SECONDS
    gc_interval_seconds: int = 60
    disable_garbage_collection: bool = False
    #: Period of the reservation metrics rebuild.
    resync_interval_seconds: int = 60
    pre_allocation_config: PreAllocationConfig = msgspec.field(default_factory=PreAllocationConfig)
    #: Extended resources node fit does not check.
    ignored_resources: tuple[str, ...] = ()
    #: Prefixes (the part before ``/``) of extended resources node fit does not check.
    ignored_resource_groups: tuple[str, ...] = ()
    reservation_selector_index: ReservationSelectorIndex = msgspec.field(
        default_factory=ReservationSelectorIndex
    )

    def __post_init__(self) -> None:
        if not 0 <= self.min_candidate_nodes_percentage <= 100:
            raise _fail(
                "minCandidateNodesPercentage",
                self.min_candidate_nodes_percentage,
                "is not in [0, 100]",
            )
        for field, value in (
            ("minCandidateNodesAbsolute", self.min_candidate_nodes_absolute),
            ("gcDurationSeconds", self.gc_duration_seconds),
        ):
            if value < 0:
                raise _fail(field, value, "must not be negative")
        for field, value in (
            ("controllerWorkers", self.controller_workers),
            ("gcIntervalSeconds", self.gc_interval_seconds),
            ("resyncIntervalSeconds", self.resync_interval_seconds),
        ):
            if value <= 0:
                raise _fail(field, value, "must be positive")
        for name in self.ignored_resources:
            if not _is_extended_resource(name):
                raise _fail("ignoredResources", name, "is not an extended resource name")
        for group in self.ignored_resource_groups:
            if (
                "/" in group
                or group == "kubernetes.io"
                or group.endswith(".kubernetes.io")
                or not _is_extended_resource(f"{group}/x")
            ):
                raise _fail(
                    "ignoredResourceGroups", group, "is not an extended resource name prefix"
                )

    @property
    def effective_gc_duration_seconds(self) -> int:
        return self.gc_duration_seconds or DEFAULT_GC_DURATION_SECONDS

    def ignores(self, resource: str) -> bool:
        """Node fit skips ``resource``."""
        if resource in self.ignored_resources:
            return True
        prefix, slash, _ = resource.partition("/")
        return bool(slash) and prefix in self.ignored_resource_groups


def decode_args(raw: object) -> ReservationArgs:
    """``ReservationArgs`` from decoded YAML/JSON; errors name the field and the value."""
    try:
        return msgspec.convert(raw, ReservationArgs)
    except msgspec.ValidationError as err:
        text = str(err)
        if not text.startswith("ReservationArgs"):
            text = f"ReservationArgs: {text}"
        raise ReservationArgsError(text) from None
