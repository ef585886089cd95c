"""ReservationArgs (§1.9): defaults, the "0 means default" fields, validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from apis import codec
from apis import constants as k
from apis.scheduling import Reservation
from controller.reservations.args import ReservationArgs, ReservationArgsError, decode_args
from controller.reservations.preallocation import check_preconditions, mode_of


def test_defaults() -> None:
    args = decode_args({})
    assert args == ReservationArgs()
    assert (args.min_candidate_nodes_percentage, args.min_candidate_nodes_absolute) == (10, 100)
    assert (args.gc_duration_seconds, args.gc_interval_seconds) == (86400, 60)
    assert (args.controller_workers, args.resync_interval_seconds) == (1, 60)
    assert (args.enable_preemption, args.disable_garbage_collection) == (False, False)
    config = args.pre_allocation_config
    assert (config.enable_cluster_mode, config.prefer_no_pre_allocated_pods) == (False, False)
    assert config.effective_label_key == k.LABEL_IS_PRE_ALLOCATABLE
    assert config.effective_priority_key == k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY
    assert not args.reservation_selector_index.enabled


def test_zero_and_empty_mean_the_defaults() -> None:
    args = decode_args(
        {
            "gcDurationSeconds": 0,
            "preAllocationConfig": {"clusterLabelKey": "", "clusterPriorityAnnotationKey": ""},
        }
    )
    assert args.effective_gc_duration_seconds == 86400
    assert args.pre_allocation_config.effective_label_key == k.LABEL_IS_PRE_ALLOCATABLE
    assert args.pre_allocation_config.effective_priority_key == (
        k.ANNOTATION_PRE_ALLOCATABLE_PRIORITY
    )


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"minCandidateNodesPercentage": 101}, "minCandidateNodesPercentage: 101"),
        ({"minCandidateNodesAbsolute": -1}, "minCandidateNodesAbsolute: -1"),
        ({"gcIntervalSeconds": 0}, "gcIntervalSeconds: 0"),
        ({"ignoredResources": ["cpu"]}, "ignoredResources: 'cpu'"),
        ({"ignoredResources": ["kubernetes.io/batch-cpu"]}, "kubernetes.io/batch-cpu"),
        ({"ignoredResourceGroups": ["example.com/gpu"]}, "ignoredResourceGroups"),
        ({"ignoredResourceGroups": ["kubernetes.io"]}, "ignoredResourceGroups: 'kubernetes.io'"),
        ({"enablePreemtion": True}, "enablePreemtion"),
    ],
    ids=[
        "percentage",
        "absolute",
        "gc interval",
        "native resource",
        "kubernetes.io resource",
        "group with slash",
        "kubernetes.io group",
        "unknown field",
    ],
)
def test_bad_values_name_the_field(raw: dict[str, object], fragment: str) -> None:
    with pytest.raises(ReservationArgsError, match="ReservationArgs") as caught:
        decode_args(raw)
    assert fragment in str(caught.value)


def test_ignored_resources() -> None:
    args = decode_args(
        {"ignoredResources": ["nvidia.com/gpu"], "ignoredResourceGroups": ["example.com"]}
    )
    assert args.ignores("nvidia.com/gpu")
    assert args.ignores("example.com/fpga")
    assert not args.ignores("cpu")
    assert not args.ignores("koordinator.sh/gpu-core")


def test_the_example_reservation_is_pre_allocatable(repo_root: Path) -> None:
    text = (repo_root / "examples" / "reservation.yaml").read_text(encoding="utf-8")
    (r,) = codec.decode_documents(text)
    assert isinstance(r, Reservation)
    assert mode_of(r) == "Cluster"
    cluster = decode_args({"preAllocationConfig": {"enableClusterMode": True}})
    assert check_preconditions(r, cluster) == ""
    assert check_preconditions(r, ReservationArgs()) == (
        "reservation requires cluster mode pre-allocation which is disabled"
    )
